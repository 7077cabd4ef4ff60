//! The key commands and the keyspace itself: replies, logged records, replay, SCAN's
//! cursor guarantee under mutation, active expiry, memory accounting.

mod common;
use common::*;

use proptest::prelude::*;
use std::collections::BTreeSet;
use weft_kv::keyspace::HASH_LIMIT;

fn del_rec(k: &str) -> Record {
    Record::Del { key: k.into() }
}

fn exp_rec(k: &str, at: Option<u64>) -> Record {
    Record::Expire {
        key: k.into(),
        at_ms: at,
    }
}

#[test]
fn del_exists_touch_type() {
    let mut t = T::new();
    t.run(&["mset", "a", "1", "b", "2"]);
    assert_eq!(t.run(&["exists", "a", "b", "c", "a"]), Reply::Int(3));
    assert_eq!(t.run(&["touch", "a", "c"]), Reply::Int(1));
    assert_eq!(t.run(&["type", "a"]), Reply::Simple("string".into()));
    assert_eq!(t.run(&["type", "c"]), Reply::Simple("none".into()));
    assert_eq!(t.run(&["del", "a", "c", "a"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![del_rec("a")]);
    assert_eq!(t.run(&["unlink", "b"]), Reply::Int(1));
    assert_eq!(t.run(&["del", "b"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    t.run(&["set", "e", "v", "px", "5"]);
    t.now += 5;
    assert_eq!(t.run(&["del", "e"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.ks.len(), 0);
    t.check_replay();
}

#[test]
fn expiretime_of_the_latest_expiry_rounds_without_overflow() {
    let mut t = T::new();
    let max = i64::MAX.to_string();
    assert_eq!(t.run(&["set", "k", "v", "pxat", &max]), Reply::OK);
    assert_eq!(t.run(&["pexpiretime", "k"]), Reply::Int(i64::MAX));
    // Redis's answer: i64::MAX ms rounded to the nearest second.
    assert_eq!(
        t.run(&["expiretime", "k"]),
        Reply::Int(9_223_372_036_854_776)
    );
    assert_eq!(
        t.run(&["ttl", "k"]),
        Reply::Int((i64::MAX - NOW as i64 + 500) / 1000)
    );
}

#[test]
fn expire_family() {
    let mut t = T::new();
    assert_eq!(t.run(&["expire", "k", "10"]), Reply::Int(0));
    t.run(&["set", "k", "v"]);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(-1));
    assert_eq!(t.run(&["pttl", "nope"]), Reply::Int(-2));
    assert_eq!(t.run(&["expire", "k", "10"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![exp_rec("k", Some(NOW + 10_000))]);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(10));
    assert_eq!(t.run(&["pexpire", "k", "2500"]), Reply::Int(1));
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(3)); // 2.5 s rounds up
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(2500));
    assert_eq!(
        t.run(&["pexpiretime", "k"]),
        Reply::Int((NOW + 2500) as i64)
    );
    assert_eq!(
        t.run(&["expiretime", "k"]),
        Reply::Int(((NOW + 2500 + 500) / 1000) as i64)
    );
    let at = (NOW / 1000 + 50).to_string();
    assert_eq!(t.run(&["expireat", "k", &at]), Reply::Int(1));
    assert_eq!(
        t.run(&["expiretime", "k"]),
        Reply::Int((NOW / 1000 + 50) as i64)
    );
    let at = (NOW + 7).to_string();
    assert_eq!(t.run(&["pexpireat", "k", &at]), Reply::Int(1));
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(7));
    // NX / XX / GT / LT
    assert_eq!(t.run(&["expire", "k", "100", "nx"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["expire", "k", "100", "xx"]), Reply::Int(1));
    assert_eq!(t.run(&["expire", "k", "50", "gt"]), Reply::Int(0));
    assert_eq!(t.run(&["expire", "k", "200", "gt"]), Reply::Int(1));
    assert_eq!(t.run(&["expire", "k", "300", "lt"]), Reply::Int(0));
    assert_eq!(t.run(&["expire", "k", "150", "LT"]), Reply::Int(1));
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(150));
    assert_eq!(t.run(&["persist", "k"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![exp_rec("k", None)]);
    assert_eq!(t.run(&["persist", "k"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["expire", "k", "100", "xx"]), Reply::Int(0));
    assert_eq!(t.run(&["expire", "k", "100", "gt"]), Reply::Int(0)); // no ttl = infinite
    assert_eq!(t.run(&["expire", "k", "100", "lt"]), Reply::Int(1));
    assert_eq!(
        t.run(&["expire", "k", "100", "nx", "xx"]),
        err("ERR NX and XX, GT or LT options at the same time are not compatible")
    );
    assert_eq!(
        t.run(&["expire", "k", "100", "gt", "lt"]),
        err("ERR GT and LT options at the same time are not compatible")
    );
    assert_eq!(
        t.run(&["expire", "k", "100", "foo"]),
        err("ERR Unsupported option foo")
    );
    assert_eq!(
        t.run(&["expire", "k", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["expire", "k", "9223372036854775807"]),
        err("ERR invalid expire time in 'expire' command")
    );
    assert_eq!(
        t.run(&["pexpire", "k", "9223372036854775807"]),
        err("ERR invalid expire time in 'pexpire' command")
    );
    // a time in the past deletes, logged as Del
    assert_eq!(t.run(&["expire", "k", "-1"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![del_rec("k")]);
    assert_eq!(t.run(&["exists", "k"]), Reply::Int(0));
    t.run(&["set", "k", "v"]);
    assert_eq!(t.run(&["pexpireat", "k", "1"]), Reply::Int(1));
    assert_eq!(t.run(&["get", "k"]), Reply::Nil);
    // expiry passes with the clock
    t.run(&["set", "k", "v", "px", "10"]);
    t.now += 9;
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(1));
    t.now += 1;
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(-2));
    t.check_replay();
}

#[test]
fn expire_cycle_removes_earliest_first_and_keeps_counts() {
    let mut ks = Keyspace::new();
    for i in 0..100u64 {
        ks.set(format!("k{i}").as_bytes(), b"v", Some(1000 + i));
    }
    ks.set(b"forever", b"v", None);
    assert_eq!(ks.expires_count(), 100);
    assert_eq!(ks.expire_cycle(999, 1000), 0);
    assert_eq!(ks.expire_cycle(1049, 10), 10);
    assert!(ks.peek(b"k9", 0).is_none());
    assert!(ks.peek(b"k10", 0).is_some());
    assert_eq!(ks.expire_cycle(1049, 1000), 40);
    assert_eq!(ks.len(), 51);
    assert_eq!(ks.expires_count(), 50);
    // changing an expiry moves it in the index
    assert!(ks.set_expire(b"k99", Some(5000), 0));
    assert!(ks.set_expire(b"k98", None, 0));
    assert_eq!(ks.expire_cycle(4999, 1000), 48);
    assert_eq!(ks.len(), 3);
    assert_eq!(ks.expires_count(), 1);
    assert_eq!(ks.expire_cycle(5000, 1000), 1);
    let keys: BTreeSet<Vec<u8>> = ks.keys(b"*", 0).into_iter().collect();
    assert_eq!(
        keys,
        [b"forever".to_vec(), b"k98".to_vec()].into_iter().collect()
    );
    // overwriting without expiry clears the index entry
    ks.set(b"x", b"v", Some(10));
    ks.set(b"x", b"w", None);
    assert_eq!(ks.expire_cycle(u64::MAX, 1000), 0);
    assert_eq!(ks.expires_count(), 0);
}

#[test]
fn memory_accounting_is_incremental() {
    use weft_kv::keyspace::{PER_EXPIRE_OVERHEAD, PER_KEY_OVERHEAD};
    let mut t = T::new();
    assert_eq!(t.ks.used_memory(), 0);
    t.run(&["set", "key", "value"]);
    assert_eq!(t.ks.used_memory(), 3 + 5 + PER_KEY_OVERHEAD);
    t.run(&["append", "key", "12345"]);
    assert_eq!(t.ks.used_memory(), 3 + 10 + PER_KEY_OVERHEAD);
    t.run(&["expire", "key", "100"]);
    assert_eq!(
        t.ks.used_memory(),
        3 + 10 + PER_KEY_OVERHEAD + PER_EXPIRE_OVERHEAD
    );
    t.run(&["setrange", "key", "20", "x"]);
    assert_eq!(
        t.ks.used_memory(),
        3 + 21 + PER_KEY_OVERHEAD + PER_EXPIRE_OVERHEAD
    );
    t.run(&["persist", "key"]);
    t.run(&["set", "k2", "v"]);
    assert_eq!(t.ks.used_memory(), 3 + 21 + 2 + 1 + 2 * PER_KEY_OVERHEAD);
    t.run(&["del", "key", "k2"]);
    assert_eq!(t.ks.used_memory(), 0);
    t.run(&["set", "k", "v", "ex", "1"]);
    t.ks.flush();
    assert_eq!(
        (t.ks.used_memory(), t.ks.len(), t.ks.expires_count()),
        (0, 0, 0)
    );
}

#[test]
fn keys_and_scan_patterns() {
    let mut ks = Keyspace::new();
    for k in ["user:1", "user:2", "item:1", "", "u"] {
        ks.set(k.as_bytes(), b"v", None);
    }
    ks.set(b"user:gone", b"v", Some(5));
    let sorted = |mut v: Vec<Vec<u8>>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(ks.keys(b"user:*", 10)),
        vec![b"user:1".to_vec(), b"user:2".to_vec()]
    );
    assert_eq!(ks.keys(b"*", 10).len(), 5); // "*" includes the empty key, as Redis
    assert_eq!(ks.keys(b"*", 0).len(), 6);
    assert_eq!(sorted(ks.keys(b"?", 10)), vec![b"u".to_vec()]);
    let (mut cur, mut got) = (0, Vec::new());
    loop {
        let (next, keys) = ks.scan(cur, 1, Some(b"*:1"), 10);
        assert!(next < HASH_LIMIT);
        got.extend(keys);
        cur = next;
        if cur == 0 {
            break;
        }
    }
    assert_eq!(sorted(got), vec![b"item:1".to_vec(), b"user:1".to_vec()]);
    assert_eq!(ks.scan(0, 1000, None, 10).0, 0);
    assert_eq!(ks.scan(HASH_LIMIT, 10, None, 10), (0, vec![]));
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    Remove(u16),
    Step(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..400).prop_map(Op::Insert),
        (0u16..400).prop_map(Op::Remove),
        (1u8..20).prop_map(Op::Step),
    ]
}

proptest! {
    /// SCAN's guarantee: every key present from the scan's start to its end is
    /// returned, whatever is inserted and removed between the steps, and the walk
    /// ends; and the walk for compaction visits every live key exactly once.
    #[test]
    fn scan_returns_every_key_present_throughout(
        initial in proptest::collection::btree_set(0u16..400, 0..200),
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut ks = Keyspace::new();
        let name = |i: u16| format!("key:{i}").into_bytes();
        for &i in &initial {
            ks.set(&name(i), b"v", None);
        }
        let mut throughout: BTreeSet<u16> = initial.clone();
        let mut seen = BTreeSet::new();
        let mut cursor = 0;
        let mut steps = 0;
        let mut ops = ops.into_iter();
        loop {
            let step = match ops.next() {
                Some(Op::Insert(i)) => {
                    ks.set(&name(i), b"v", None);
                    continue;
                }
                Some(Op::Remove(i)) => {
                    ks.remove(&name(i), 0);
                    throughout.remove(&i);
                    continue;
                }
                Some(Op::Step(n)) => n as usize,
                None => 3, // the operations are used up: finish the scan
            };
            let (next, keys) = ks.scan(cursor, step, None, 0);
            seen.extend(keys);
            cursor = next;
            steps += 1;
            prop_assert!(steps < 10_000);
            if cursor == 0 {
                break;
            }
        }
        for i in throughout {
            prop_assert!(seen.contains(&name(i)), "key:{} was present throughout but not returned", i);
        }
        // the compaction walk: every live key exactly once
        let mut walked = Vec::new();
        let mut cur = 0;
        loop {
            cur = ks.walk(cur, 5, 0, |r| if let weft_kv::log::RecordRef::Set { key, .. } = r { walked.push(key.to_vec()) });
            if cur == 0 { break; }
        }
        let n = walked.len();
        let uniq: BTreeSet<_> = walked.into_iter().collect();
        prop_assert_eq!(n, uniq.len());
        prop_assert_eq!(uniq.len(), ks.len());
    }
}

#[test]
fn replay_of_a_random_history_matches() {
    // A fixed pseudo-random sequence of commands; the replayed log must rebuild the
    // same keys, values and expiry times.
    let mut t = T::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut rnd = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..3000 {
        let k = format!("k{}", rnd(30));
        let v = format!("{}", rnd(1000));
        let line: Vec<String> = match rnd(14) {
            0 => vec!["set".into(), k, v],
            1 => vec!["set".into(), k, v, "px".into(), format!("{}", rnd(50) + 1)],
            2 => vec!["set".into(), k, v, "keepttl".into(), "xx".into()],
            3 => vec!["incrby".into(), k, v],
            4 => vec!["append".into(), k, v],
            5 => vec!["setrange".into(), k, format!("{}", rnd(8)), v],
            6 => vec!["del".into(), k],
            7 => vec!["pexpire".into(), k, format!("{}", rnd(60) as i64 - 10)],
            8 => vec!["persist".into(), k],
            9 => vec!["getex".into(), k, "px".into(), format!("{}", rnd(50) + 1)],
            10 => vec!["getdel".into(), k],
            11 => vec!["incrbyfloat".into(), k, "1.5".into()],
            12 => vec!["mset".into(), k, v.clone(), format!("k{}", rnd(30)), v],
            _ => vec!["setnx".into(), k, v],
        };
        let line: Vec<&str> = line.iter().map(|s| s.as_str()).collect();
        t.run(&line);
        t.now += rnd(3);
        if rnd(50) == 0 {
            t.ks.expire_cycle(t.now, 5);
        }
    }
    t.check_replay();
    // and replay at a later time drops what has expired since
    t.now += 100;
    t.check_replay();
}

/// The full state of a key, as compaction would write it (what RENAME, COPY and
/// RESTORE must recreate).
fn state_of(t: &T, key: &str) -> Option<(Vec<u8>, Option<u64>)> {
    dump(&t.ks, t.now)
        .into_iter()
        .find(|(k, _, _)| k == key.as_bytes())
        .map(|(_, v, at)| (v, at))
}

#[test]
fn rename_and_renamenx_move_any_type() {
    let mut t = T::new();
    t.run(&["set", "s", "v", "px", "5000"]);
    t.run(&["hset", "h", "a", "1", "b", "2"]);
    let s_state = state_of(&t, "s");
    assert_eq!(t.run(&["rename", "s", "s2"]), Reply::OK);
    assert_eq!(state_of(&t, "s2"), s_state, "value and expiry moved");
    assert_eq!(state_of(&t, "s"), None);
    assert_eq!(
        t.logged(),
        vec![
            del_rec("s"),
            Record::Set {
                key: "s2".into(),
                value: b"v".to_vec(),
                expire_at_ms: Some(NOW + 5000)
            }
        ]
    );
    // Over an existing key of another type: replaced, its expiry not inherited.
    t.run(&["set", "dst", "x", "ex", "100"]);
    let h_state = state_of(&t, "h");
    assert_eq!(t.run(&["rename", "h", "dst"]), Reply::OK);
    assert_eq!(state_of(&t, "dst"), h_state);
    assert_eq!(t.run(&["ttl", "dst"]), Reply::Int(-1));
    assert_eq!(t.run(&["type", "dst"]), Reply::Simple("hash".into()));
    assert_eq!(t.run(&["rename", "nokey", "x"]), err("ERR no such key"));
    assert_eq!(t.run(&["rename", "dst", "dst"]), Reply::OK);
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["renamenx", "dst", "dst"]), Reply::Int(0));
    assert_eq!(t.run(&["renamenx", "nokey", "dst"]), err("ERR no such key"));
    assert_eq!(t.run(&["renamenx", "dst", "s2"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["renamenx", "dst", "h"]), Reply::Int(1));
    assert_eq!(state_of(&t, "h"), h_state);
    // An expired source is missing.
    t.now += 5000;
    assert_eq!(t.run(&["rename", "s2", "s3"]), err("ERR no such key"));
    t.check_replay();
}

#[test]
fn copy_copies_any_type_with_its_expiry() {
    let mut t = T::new();
    t.run(&["hset", "h", "a", "1", "b", "2"]);
    t.run(&["pexpire", "h", "7000"]);
    t.run(&["set", "s", "v"]);
    assert_eq!(t.run(&["copy", "h", "h2"]), Reply::Int(1));
    assert_eq!(state_of(&t, "h2"), state_of(&t, "h"));
    assert_eq!(t.run(&["pttl", "h2"]), Reply::Int(7000));
    // The copy is its own: changing it leaves the source.
    t.run(&["hset", "h2", "c", "3"]);
    assert_eq!(t.run(&["hlen", "h"]), Reply::Int(2));
    assert_eq!(t.run(&["copy", "h", "s"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["copy", "h", "s", "replace"]), Reply::Int(1));
    assert_eq!(t.run(&["type", "s"]), Reply::Simple("hash".into()));
    assert_eq!(t.run(&["copy", "nokey", "s"]), Reply::Int(0));
    assert_eq!(
        t.run(&["copy", "h", "h"]),
        err("ERR source and destination objects are the same")
    );
    assert_eq!(t.run(&["copy", "h", "x", "what"]), err("ERR syntax error"));
    assert_eq!(
        t.run(&["copy", "h", "x", "db", "16"]),
        err("ERR DB index is out of range")
    );
    assert_eq!(
        t.run(&["copy", "h", "x", "db", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(t.run(&["copy", "h", "x", "db", "0"]), Reply::Int(1));
    // Under the memory limit: a copy that does not fit is refused.
    t.room = 10;
    assert_eq!(
        t.run(&["copy", "h", "y"]),
        err("OOM command not allowed when used memory > 'maxmemory'.")
    );
    assert_eq!(t.run(&["exists", "y"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn dump_and_restore_any_type() {
    let mut t = T::new();
    t.run(&["hset", "h", "a", "1", "b", "2"]);
    t.run(&["set", "s", "hello", "ex", "100"]);
    let Reply::Bulk(hp) = t.run(&["dump", "h"]) else {
        panic!("a payload")
    };
    let Reply::Bulk(sp) = t.run(&["dump", "s"]) else {
        panic!("a payload")
    };
    assert_eq!(t.run(&["dump", "nokey"]), Reply::Nil);
    let restore = |t: &mut T, args: &[&[u8]]| {
        let mut line: Vec<Vec<u8>> = vec![b"restore".to_vec()];
        line.extend(args.iter().map(|a| a.to_vec()));
        t.run_bytes(&line)
    };
    assert_eq!(restore(&mut t, &[b"h2", b"0", &hp]), Reply::OK);
    assert_eq!(state_of(&t, "h2"), state_of(&t, "h"));
    // The payload's own expiry is not the restored key's: its TTL argument is.
    assert_eq!(restore(&mut t, &[b"s2", b"0", &sp]), Reply::OK);
    assert_eq!(t.run(&["ttl", "s2"]), Reply::Int(-1));
    assert_eq!(t.run(&["get", "s2"]), Reply::Bulk(b"hello".to_vec()));
    assert_eq!(
        restore(&mut t, &[b"s2", b"0", &sp]),
        err("BUSYKEY Target key name already exists.")
    );
    assert_eq!(
        restore(&mut t, &[b"s2", b"3000", &hp, b"REPLACE"]),
        Reply::OK
    );
    assert_eq!(t.run(&["type", "s2"]), Reply::Simple("hash".into()));
    assert_eq!(t.run(&["pttl", "s2"]), Reply::Int(3000));
    let at = (NOW + 9000).to_string();
    assert_eq!(
        restore(
            &mut t,
            &[b"s3", at.as_bytes(), &sp, b"absttl", b"idletime", b"5"]
        ),
        Reply::OK
    );
    assert_eq!(t.run(&["pexpiretime", "s3"]), Reply::Int(NOW as i64 + 9000));
    // A time already passed: OK, nothing created; with REPLACE the old key goes.
    assert_eq!(restore(&mut t, &[b"s4", b"1", &sp, b"absttl"]), Reply::OK);
    assert_eq!(t.run(&["exists", "s4"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(
        restore(&mut t, &[b"s3", b"1", &sp, b"absttl", b"replace"]),
        Reply::OK
    );
    assert_eq!(t.logged(), vec![del_rec("s3")]);
    // Errors change nothing.
    let bad = err("ERR DUMP payload version or checksum are wrong");
    let mut damaged = hp.clone();
    damaged[4] ^= 1;
    assert_eq!(restore(&mut t, &[b"x", b"0", &damaged]), bad);
    assert_eq!(restore(&mut t, &[b"x", b"0", b"nonsense"]), bad);
    assert_eq!(restore(&mut t, &[b"x", b"0", b""]), bad);
    assert_eq!(
        restore(&mut t, &[b"x", b"-1", &hp]),
        err("ERR Invalid TTL value, must be >= 0")
    );
    assert_eq!(
        restore(&mut t, &[b"x", b"a", &hp]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        restore(&mut t, &[b"x", b"0", &hp, b"idletime", b"-1"]),
        err("ERR Invalid IDLETIME value, must be >= 0")
    );
    assert_eq!(
        restore(&mut t, &[b"x", b"0", &hp, b"freq", b"256"]),
        err("ERR Invalid FREQ value, must be >= 0 and <= 255")
    );
    assert_eq!(
        restore(&mut t, &[b"x", b"0", &hp, b"freq", b"1", b"idletime", b"1"]),
        err("ERR syntax error")
    );
    assert_eq!(
        restore(&mut t, &[b"x", b"0", &hp, b"what"]),
        err("ERR syntax error")
    );
    // A payload of valid records that would make a string of 2^40 bytes: refused
    // before anything is allocated.
    let mut crafted = vec![b'W', 1];
    let set = weft_kv::log::RecordRef::Set {
        key: b"",
        value: b"",
        expire_at_ms: None,
    };
    weft_kv::log::encode(&set, &mut crafted);
    let far = weft_kv::log::RecordRef::SetRange {
        key: b"",
        offset: 1 << 40,
        piece: b"x",
    };
    weft_kv::log::encode(&far, &mut crafted);
    let crc = crc32c::crc32c(&crafted);
    crafted.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        restore(&mut t, &[b"x", b"0", &crafted]),
        err("ERR Bad data format")
    );
    assert_eq!(t.run(&["exists", "x"]), Reply::Int(0));
    t.check_replay();
}

/// A type these commands have no code for (a list) moves the same way: as its
/// full-state records.
#[test]
fn lists_are_renamed_copied_dumped_and_restored_whole() {
    let mut t = T::new();
    let long = "x".repeat(100);
    t.run(&["rpush", "l", "a", "b", &long, "c"]);
    let state = state_of(&t, "l");
    assert_eq!(t.run(&["copy", "l", "l2"]), Reply::Int(1));
    assert_eq!(state_of(&t, "l2"), state);
    assert_eq!(t.run(&["rename", "l2", "l3"]), Reply::OK);
    assert_eq!(state_of(&t, "l3"), state);
    assert_eq!(t.run(&["lpop", "l3"]), Reply::Bulk(b"a".to_vec()));
    assert_eq!(t.run(&["llen", "l"]), Reply::Int(4));
    let Reply::Bulk(p) = t.run(&["dump", "l"]) else {
        panic!("a payload")
    };
    let line = [b"restore".to_vec(), b"l4".to_vec(), b"0".to_vec(), p];
    assert_eq!(t.run_bytes(&line), Reply::OK);
    assert_eq!(state_of(&t, "l4"), state);
    assert_eq!(t.run(&["type", "l4"]), Reply::Simple("list".into()));
    t.check_replay();
}

/// RENAME, COPY and LCS over keys of different shards, and COPY to another database:
/// one transaction each, logged as their parts, the same after a restart.
#[test]
fn rename_copy_and_lcs_over_several_shards() {
    let (dir, store) = four_shards();
    let k = keys_on_shards("rk", 4);
    let run = |store: &weft_kv::Store, line: &[&str]| {
        let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        store.exec(&args)
    };
    run(&store, &["hset", &k[0], "f", "v", "g", "w"]);
    run(&store, &["expire", &k[0], "1000"]);
    assert_eq!(run(&store, &["rename", &k[0], &k[1]]), Reply::OK);
    assert_eq!(run(&store, &["exists", &k[0]]), Reply::Int(0));
    assert_eq!(
        run(&store, &["hget", &k[1], "g"]),
        Reply::Bulk(b"w".to_vec())
    );
    assert!(matches!(
        run(&store, &["ttl", &k[1]]),
        Reply::Int(990..=1000)
    ));
    assert_eq!(
        run(&store, &["rename", &k[0], &k[2]]),
        err("ERR no such key")
    );
    run(&store, &["set", &k[2], "x"]);
    assert_eq!(run(&store, &["renamenx", &k[1], &k[2]]), Reply::Int(0));
    assert_eq!(run(&store, &["renamenx", &k[1], &k[3]]), Reply::Int(1));
    assert_eq!(run(&store, &["copy", &k[3], &k[2]]), Reply::Int(0));
    assert_eq!(
        run(&store, &["copy", &k[3], &k[2], "replace"]),
        Reply::Int(1)
    );
    assert_eq!(
        run(&store, &["copy", &k[3], &k[3], "db", "2"]),
        Reply::Int(1)
    );
    assert_eq!(
        run(&store, &["copy", &k[3], &k[3], "db", "2"]),
        Reply::Int(0)
    );
    assert_eq!(
        run(&store, &["copy", &k[3], &k[3], "db", "0"]),
        err("ERR source and destination objects are the same")
    );
    run(&store, &["set", &k[0], "ohmytext"]);
    run(&store, &["set", &k[1], "mynewtext"]);
    assert_eq!(
        run(&store, &["lcs", &k[0], &k[1]]),
        Reply::Bulk(b"mytext".to_vec())
    );
    assert_eq!(
        run(&store, &["lcs", &k[0], &k[3]]),
        err("ERR The specified keys must contain string values")
    );
    drop(store);
    let store = weft_kv::Store::open(dir.path()).unwrap();
    assert_eq!(
        run(&store, &["hget", &k[2], "f"]),
        Reply::Bulk(b"v".to_vec())
    );
    assert_eq!(run(&store, &["hlen", &k[3]]), Reply::Int(2));
    assert_eq!(run(&store, &["exists", &k[1]]), Reply::Int(1));
    assert_eq!(run(&store, &["dbsize"]), Reply::Int(4));
}

#[test]
fn randomkey_answers_a_live_key() {
    let (_dir, store) = four_shards();
    let run = |line: &[&str]| {
        let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        store.exec(&args)
    };
    assert_eq!(run(&["randomkey"]), Reply::Nil);
    let keys = keys_on_shards("r", 4);
    for k in &keys {
        run(&["set", k, "v"]);
    }
    let mut seen = BTreeSet::new();
    for _ in 0..400 {
        match run(&["randomkey"]) {
            Reply::Bulk(k) => {
                assert!(keys.iter().any(|x| x.as_bytes() == k));
                seen.insert(k);
            }
            r => panic!("{r:?}"),
        }
    }
    assert_eq!(seen.len(), 4, "every key comes up");
    // Keys whose time has passed are never answered.
    run(&["flushall"]);
    run(&["set", "only", "v"]);
    for i in 0..50 {
        run(&["set", &format!("gone{i}"), "v", "px", "1"]);
    }
    std::thread::sleep(std::time::Duration::from_millis(5));
    for _ in 0..20 {
        assert_eq!(run(&["randomkey"]), Reply::Bulk(b"only".to_vec()));
    }
}
