//! The set commands: the one-key ones run through the command table on one keyspace
//! (replies as Redis 7.0 gives them, edge cases and errors included; the records they
//! log: a new set's whole state, an existing one's change; the state a replay of those
//! records rebuilds; expiry, memory, encodings), and the ones over several keys (SMOVE,
//! SINTER, SINTERCARD, SUNION, SDIFF, the STORE forms) through the embedded store over
//! four shards, checked again after the store is reopened from its log.

mod common;
use common::*;
use std::collections::BTreeSet;
use weft_kv::keyspace::{PER_EXPIRE_OVERHEAD, PER_KEY_OVERHEAD};

fn set_of(v: &[&str]) -> Reply {
    Reply::Set(v.iter().map(|s| bulk(s)).collect())
}

/// The members of a set or array reply, sorted.
fn sorted(r: Reply) -> Vec<String> {
    let (Reply::Set(v) | Reply::Array(v)) = r else {
        panic!("{r:?}")
    };
    let mut out: Vec<String> = v
        .into_iter()
        .map(|m| match m {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            m => panic!("{m:?}"),
        })
        .collect();
    out.sort();
    out
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn sadd_srem_and_their_records() {
    let mut t = T::new();
    assert_eq!(t.run(&["sadd", "s", "b", "a", "b", "c"]), Reply::Int(3));
    // A new set: its whole state, each member once.
    assert_eq!(
        t.logged(),
        vec![Record::Members {
            key: b"s".to_vec(),
            expire_at_ms: None,
            items: items(&["b", "a", "c"]),
        }]
    );
    // Only the members that were new are logged.
    assert_eq!(t.run(&["sadd", "s", "a", "d"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::SAdd {
            key: b"s".to_vec(),
            items: items(&["d"]),
        }]
    );
    assert_eq!(t.run(&["sadd", "s", "a", "b"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![], "nothing new: nothing logged");
    // A small set keeps the order members came in.
    assert_eq!(t.run(&["smembers", "s"]), set_of(&["b", "a", "c", "d"]));
    assert_eq!(t.run(&["scard", "s"]), Reply::Int(4));
    assert_eq!(t.run(&["sismember", "s", "a"]), Reply::Int(1));
    assert_eq!(t.run(&["sismember", "s", "x"]), Reply::Int(0));
    assert_eq!(
        t.run(&["smismember", "s", "a", "x", "d"]),
        Reply::Array(vec![Reply::Int(1), Reply::Int(0), Reply::Int(1)])
    );
    assert_eq!(t.run(&["srem", "s", "a", "x", "a"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::SRem {
            key: b"s".to_vec(),
            items: items(&["a"]),
        }]
    );
    assert_eq!(t.run(&["srem", "s", "x"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![]);
    t.check_replay();
    // The last member takes the set with it.
    assert_eq!(t.run(&["srem", "s", "b", "c", "d"]), Reply::Int(3));
    assert_eq!(t.run(&["exists", "s"]), Reply::Int(0));
    assert_eq!(t.run(&["type", "s"]), Reply::Simple("none".into()));
    t.check_replay();
    // A missing key: an empty set everywhere.
    assert_eq!(t.run(&["smembers", "nokey"]), set_of(&[]));
    assert_eq!(t.run(&["scard", "nokey"]), Reply::Int(0));
    assert_eq!(t.run(&["sismember", "nokey", "a"]), Reply::Int(0));
    assert_eq!(
        t.run(&["smismember", "nokey", "a"]),
        Reply::Array(vec![Reply::Int(0)])
    );
    assert_eq!(t.run(&["srem", "nokey", "a"]), Reply::Int(0));
    assert_eq!(t.log.len(), t.log.len());
    // Arity, as Redis counts it.
    for line in [
        &["sadd", "s"][..],
        &["srem", "s"],
        &["scard"],
        &["sismember", "s"],
        &["smismember", "s"],
        &["smembers"],
        &["srandmember"],
        &["spop"],
        &["sscan", "s"],
    ] {
        assert_eq!(
            t.run(line),
            err(&format!(
                "ERR wrong number of arguments for '{}' command",
                line[0]
            ))
        );
    }
}

#[test]
fn every_set_command_answers_wrongtype() {
    let mut t = T::new();
    t.run(&["set", "str", "x"]);
    t.run(&["hset", "h", "f", "v"]);
    t.run(&["sadd", "s", "m"]);
    let before = t.log.len();
    for key in ["str", "h"] {
        for line in [
            &["sadd", key, "m"][..],
            &["srem", key, "m"],
            &["scard", key],
            &["sismember", key, "m"],
            &["smismember", key, "m"],
            &["smembers", key],
            &["srandmember", key],
            &["srandmember", key, "2"],
            &["spop", key],
            &["spop", key, "0"],
            &["sscan", key, "0"],
        ] {
            assert_eq!(t.run(line), err(WRONGTYPE), "{line:?}");
        }
    }
    for line in [
        &["get", "s"][..],
        &["hget", "s", "m"],
        &["append", "s", "x"],
        &["hset", "s", "f", "v"],
    ] {
        assert_eq!(t.run(line), err(WRONGTYPE), "{line:?}");
    }
    assert_eq!(t.log.len(), before, "an error changes nothing");
    assert_eq!(t.run(&["type", "s"]), Reply::Simple("set".into()));
    // SET overwrites a set, as any type.
    assert_eq!(t.run(&["set", "s", "v"]), Reply::OK);
    assert_eq!(t.run(&["get", "s"]), bulk("v"));
    t.check_replay();
}

/// Integers stay `intset` up to set-max-intset-entries (512), then a table; a word
/// makes a small set `listpack` (up to 128 members of up to 64 bytes), a longer one
/// or more members a `hashtable`; none goes back.
#[test]
fn encodings_follow_the_thresholds() {
    let mut t = T::new();
    let enc = |t: &mut T, k: &str| t.run(&["object", "encoding", k]);
    t.run(&["sadd", "ints", "3", "-1", "20"]);
    assert_eq!(enc(&mut t, "ints"), bulk("intset"));
    // In numeric order, as Redis's intset.
    assert_eq!(t.run(&["smembers", "ints"]), set_of(&["-1", "3", "20"]));
    // Texts that read as integers only loosely are members of their own.
    t.run(&["sadd", "loose", "1", "01"]);
    assert_eq!(enc(&mut t, "loose"), bulk("listpack"));
    assert_eq!(t.run(&["scard", "loose"]), Reply::Int(2));
    for i in 0..509 {
        t.run(&["sadd", "ints", &i.to_string()]);
    }
    // 3 and 20 were there already.
    assert_eq!(t.run(&["scard", "ints"]), Reply::Int(510));
    t.run(&["sadd", "ints", "999"]);
    assert_eq!(enc(&mut t, "ints"), bulk("intset"));
    t.run(&["sadd", "ints", "1000"]);
    assert_eq!(enc(&mut t, "ints"), bulk("intset"), "512 members");
    t.run(&["sadd", "ints", "1001"]);
    assert_eq!(enc(&mut t, "ints"), bulk("hashtable"), "513 members");
    t.run(&["sadd", "mixed", "1", "2"]);
    t.run(&["sadd", "mixed", "a"]);
    assert_eq!(enc(&mut t, "mixed"), bulk("listpack"));
    t.run(&["sadd", "long", "1", &"x".repeat(64)]);
    assert_eq!(enc(&mut t, "long"), bulk("listpack"), "64 bytes fit");
    t.run(&["sadd", "long", &"y".repeat(65)]);
    assert_eq!(enc(&mut t, "long"), bulk("hashtable"));
    for i in 0..128 {
        t.run(&["sadd", "words", &format!("w{i}")]);
    }
    assert_eq!(enc(&mut t, "words"), bulk("listpack"));
    t.run(&["sadd", "words", "w128"]);
    assert_eq!(enc(&mut t, "words"), bulk("hashtable"));
    // Never back.
    for i in 0..120 {
        t.run(&["srem", "words", &format!("w{i}")]);
    }
    assert_eq!(enc(&mut t, "words"), bulk("hashtable"));
    // An intset of 300 that gets a word goes straight to a table.
    for i in 0..300 {
        t.run(&["sadd", "many", &i.to_string()]);
    }
    t.run(&["sadd", "many", "word"]);
    assert_eq!(enc(&mut t, "many"), bulk("hashtable"));
    assert_eq!(t.run(&["scard", "many"]), Reply::Int(301));
    t.check_replay();
}

#[test]
fn srandmember_counts_and_shapes() {
    let mut t = T::new();
    assert_eq!(t.run(&["srandmember", "nokey"]), Reply::Nil);
    assert_eq!(t.run(&["srandmember", "nokey", "3"]), Reply::Array(vec![]));
    assert_eq!(t.run(&["srandmember", "nokey", "-3"]), Reply::Array(vec![]));
    for (key, n, word) in [
        ("ints", 40usize, false),
        ("small", 40, true),
        ("big", 600, true),
    ] {
        let all: Vec<String> = (0..n)
            .map(|i| if word { format!("m{i}") } else { i.to_string() })
            .collect();
        for m in &all {
            t.run(&["sadd", key, m]);
        }
        let all: BTreeSet<String> = all.into_iter().collect();
        let one = sorted(Reply::Array(vec![t.run(&["srandmember", key])]));
        assert!(all.contains(&one[0]));
        assert_eq!(t.run(&["srandmember", key, "0"]), Reply::Array(vec![]));
        for count in [1usize, 3, 39, 40, 41, 1000] {
            let got = sorted(t.run(&["srandmember", key, &count.to_string()]));
            let distinct: BTreeSet<String> = got.iter().cloned().collect();
            assert_eq!(got.len(), count.min(n), "{key} {count}");
            assert_eq!(distinct.len(), got.len(), "distinct");
            assert!(distinct.is_subset(&all));
        }
        // Repeats allowed with a negative count, and every member comes up.
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let got = sorted(t.run(&["srandmember", key, "-100"]));
            assert_eq!(got.len(), 100);
            seen.extend(got);
            if seen.len() == n {
                break;
            }
        }
        assert_eq!(seen, all, "{key}: every member eventually");
    }
    assert_eq!(
        t.run(&["srandmember", "small", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["srandmember", "small", "-9223372036854775808"]),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert_eq!(
        t.run(&["srandmember", "small", "1", "2"]),
        err("ERR syntax error")
    );
    assert!(
        matches!(t.run(&["srandmember", "small", "-2000000"]), Reply::Error(e) if e.contains("too large"))
    );
    // RESP shapes: an array in both protocols (not a set).
    let r = t.run(&["srandmember", "ints", "2"]);
    assert!(r.encode_to_vec(3).starts_with(b"*2\r\n"));
    assert!(r.encode_to_vec(2).starts_with(b"*2\r\n"));
    assert!(t.logged().is_empty(), "a read logs nothing");
}

/// SPOP removes random members and logs exactly those (SRem), or the key (Del) when
/// it takes every member, so replay ends in the same set.
#[test]
fn spop_logs_the_members_it_removed() {
    let mut t = T::new();
    assert_eq!(t.run(&["spop", "nokey"]), Reply::Nil);
    assert_eq!(t.run(&["spop", "nokey", "3"]), set_of(&[]));
    for (key, n) in [("ints", 20usize), ("words", 30), ("big", 700)] {
        for i in 0..n {
            let m = if key == "ints" {
                i.to_string()
            } else {
                format!("{key}{i}")
            };
            t.run(&["sadd", key, &m]);
        }
        let Reply::Bulk(one) = t.run(&["spop", key]) else {
            panic!()
        };
        assert_eq!(
            t.logged(),
            vec![Record::SRem {
                key: key.as_bytes().to_vec(),
                items: vec![one.clone()],
            }]
        );
        assert_eq!(
            t.run(&["sismember", key, std::str::from_utf8(&one).unwrap()]),
            Reply::Int(0)
        );
        let got = sorted(t.run(&["spop", key, "5"]));
        assert_eq!(got.len(), 5);
        let Record::SRem { items: logged, .. } = &t.logged()[0] else {
            panic!()
        };
        let mut logged: Vec<String> = logged
            .iter()
            .map(|m| String::from_utf8(m.clone()).unwrap())
            .collect();
        logged.sort();
        assert_eq!(logged, got, "the members popped are the members logged");
        assert_eq!(t.run(&["scard", key]), Reply::Int(n as i64 - 6));
        assert_eq!(t.run(&["spop", key, "0"]), set_of(&[]));
        t.check_replay();
        // All that is left: the key goes.
        let rest = sorted(t.run(&["spop", key, "100000"]));
        assert_eq!(rest.len(), n - 6);
        assert_eq!(
            t.logged(),
            vec![Record::Del {
                key: key.as_bytes().to_vec()
            }]
        );
        assert_eq!(t.run(&["exists", key]), Reply::Int(0));
    }
    t.run(&["sadd", "s", "a"]);
    for bad in ["-1", "x"] {
        assert_eq!(
            t.run(&["spop", "s", bad]),
            err("ERR value is out of range, must be positive")
        );
    }
    assert_eq!(t.run(&["spop", "s", "1", "2"]), err("ERR syntax error"));
    // RESP3: SPOP with a count and SMEMBERS are sets.
    assert_eq!(
        t.run(&["smembers", "s"]).encode_to_vec(3),
        b"~1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        t.run(&["smembers", "s"]).encode_to_vec(2),
        b"*1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        t.run(&["spop", "s", "1"]).encode_to_vec(3),
        b"~1\r\n$1\r\na\r\n"
    );
    t.check_replay();
}

/// SSCAN: a small set answers whole with cursor 0; a big one in steps that return
/// every member present for the whole scan, whatever is added and removed meanwhile.
#[test]
fn sscan_returns_every_member_present_for_the_whole_scan() {
    let mut t = T::new();
    let scan = |t: &mut T, key: &str, cursor: &str, extra: &[&str]| -> (String, Vec<String>) {
        let mut line = vec!["sscan", key, cursor];
        line.extend_from_slice(extra);
        let Reply::Array(mut v) = t.run(&line) else {
            panic!()
        };
        let members = sorted(v.pop().unwrap());
        let Reply::Bulk(c) = v.pop().unwrap() else {
            panic!()
        };
        (String::from_utf8(c).unwrap(), members)
    };
    t.run(&["sadd", "small", "1", "2", "3"]);
    assert_eq!(
        scan(&mut t, "small", "0", &[]),
        ("0".into(), strs(&["1", "2", "3"]))
    );
    assert_eq!(
        scan(&mut t, "nokey", "0", &["count", "0"]),
        ("0".into(), vec![])
    );
    t.run(&["sadd", "small", "a1", "b1"]);
    assert_eq!(
        scan(&mut t, "small", "0", &["match", "*1"]),
        ("0".into(), strs(&["1", "a1", "b1"]))
    );
    assert_eq!(t.run(&["sscan", "small", "x"]), err("ERR invalid cursor"));
    assert_eq!(
        t.run(&["sscan", "small", "0", "count", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["sscan", "small", "0", "count", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["sscan", "small", "0", "foo", "1"]),
        err("ERR syntax error")
    );
    for i in 0..1000 {
        t.run(&["sadd", "big", &format!("m{i}")]);
    }
    let (mut cursor, mut seen) = ("0".to_string(), BTreeSet::new());
    let mut steps = 0;
    loop {
        let (next, got) = scan(&mut t, "big", &cursor, &["count", "20"]);
        seen.extend(got);
        // Churn: members 1000.. come and members 500.. go during the scan.
        t.run(&["sadd", "big", &format!("m{}", 1000 + steps)]);
        t.run(&["srem", "big", &format!("m{}", 500 + steps)]);
        steps += 1;
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert!(steps > 5, "{steps} steps");
    for i in (0..500).chain(500 + steps..1000) {
        assert!(seen.contains(&format!("m{i}")), "m{i} was there throughout");
    }
    t.check_replay();
}

/// Memory is counted exactly in every encoding; a set keeps its expiry through
/// changes, and an expired one is missing (its next SADD logs a whole new state).
#[test]
fn expiry_and_memory_for_sets() {
    let mut t = T::new();
    t.run(&["sadd", "s", "1", "2", "3"]);
    assert_eq!(
        t.ks.used_memory(),
        1 + 24 + PER_KEY_OVERHEAD,
        "three 8-byte integers"
    );
    t.run(&["sadd", "s", "ab"]);
    // Packed: each member as a length byte and its bytes.
    assert_eq!(t.ks.used_memory(), 1 + 2 * 3 + 3 + PER_KEY_OVERHEAD);
    t.run(&["sadd", "s", &"z".repeat(70)]);
    let per = weft_kv::keyspace::set::MEMBER_OVERHEAD;
    assert_eq!(
        t.ks.used_memory(),
        1 + 3 * (1 + per) + (2 + per) + (70 + per) + PER_KEY_OVERHEAD
    );
    assert_eq!(t.run(&["expire", "s", "100"]), Reply::Int(1));
    assert_eq!(
        t.ks.used_memory(),
        1 + 3 * (1 + per) + (2 + per) + (70 + per) + PER_KEY_OVERHEAD + PER_EXPIRE_OVERHEAD
    );
    t.run(&["sadd", "s", "4"]);
    t.run(&["srem", "s", "1"]);
    t.run(&["spop", "s"]);
    assert_eq!(
        t.run(&["ttl", "s"]),
        Reply::Int(100),
        "changes keep the expiry"
    );
    t.check_replay();
    t.now += 100_000;
    assert_eq!(t.run(&["scard", "s"]), Reply::Int(0));
    assert_eq!(t.run(&["sadd", "s", "x"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::Members {
            key: b"s".to_vec(),
            expire_at_ms: None,
            items: items(&["x"]),
        }]
    );
    assert_eq!(t.run(&["ttl", "s"]), Reply::Int(-1));
    t.run(&["del", "s"]);
    assert_eq!((t.ks.len(), t.ks.used_memory()), (0, 0));
    t.check_replay();
}

/// Under a memory limit, SADD that would pass it is refused with Redis's OOM error and
/// changes nothing; SREM and SPOP still run.
#[test]
fn set_writes_respect_the_memory_limit() {
    let mut t = T::new();
    t.run(&["sadd", "s", "a"]);
    t.room = 200;
    let big = "x".repeat(300);
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(t.run(&["sadd", "s", &big]), oom);
    assert_eq!(t.run(&["sadd", "new", &big]), oom);
    assert_eq!(t.run(&["exists", "new"]), Reply::Int(0));
    assert_eq!(t.run(&["sadd", "s", "b"]), Reply::Int(1));
    assert_eq!(t.run(&["srem", "s", "a"]), Reply::Int(1));
    assert_eq!(t.run(&["spop", "s"]), bulk("b"));
    t.check_replay();
}

/// A big set logs one member for one SADD, and its whole state (compaction's walk)
/// comes in records of at most 1 MiB that replay to the same set.
#[test]
fn a_big_set_logs_changes_and_replays_from_chunks() {
    let mut t = T::new();
    let members: Vec<String> = (0..20_000)
        .map(|i| format!("member-{i:06}-{}", "p".repeat(60)))
        .collect();
    let mut line = vec!["sadd", "big"];
    line.extend(members.iter().map(String::as_str));
    assert_eq!(t.run(&line), Reply::Int(20_000));
    let created = t.logged();
    assert!(created.len() > 1, "a creation of 1.4 MB is several records");
    assert!(matches!(created[0], Record::Members { .. }));
    assert!(created[1..]
        .iter()
        .all(|r| matches!(r, Record::SAdd { .. })));
    assert_eq!(t.run(&["sadd", "big", "one-more"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::SAdd {
            key: b"big".to_vec(),
            items: items(&["one-more"]),
        }]
    );
    assert!(t.last.len() < 64, "{} bytes for one member", t.last.len());
    let mut walked = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = t.ks.walk(cursor, 10, t.now, |r| {
            let mut out = Vec::new();
            weft_kv::log::encode(&r, &mut out);
            walked.push(out.len());
        });
        if cursor == 0 {
            break;
        }
    }
    assert!(walked.len() > 1);
    assert!(walked
        .iter()
        .all(|&n| n <= weft_kv::log::ITEMS_PER_RECORD + 100));
    t.check_replay();
}

// ---- commands over several keys, through the embedded store -------------------------

use weft_kv::store::Store;

/// A store over four shards (so that the keys of one command fall on several).
fn store(dir: &std::path::Path) -> Store {
    weft_kv::log::DataDir::open(dir, 4).unwrap();
    Store::open(dir).unwrap()
}

fn run(s: &Store, line: &[&str]) -> Reply {
    let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
    s.exec(&args)
}

#[test]
fn set_algebra_over_several_shards() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    let s = store(&dir);
    run(&s, &["sadd", "a", "1", "2", "3", "4", "x"]);
    run(&s, &["sadd", "b", "2", "3", "5", "x", "y"]);
    run(&s, &["sadd", "c", "3", "x", "z"]);
    run(&s, &["set", "str", "v"]);
    assert_eq!(
        sorted(run(&s, &["sinter", "a", "b", "c"])),
        strs(&["3", "x"])
    );
    assert_eq!(
        sorted(run(&s, &["sinter", "a", "a"])),
        strs(&["1", "2", "3", "4", "x"])
    );
    assert_eq!(run(&s, &["sinter", "a", "nokey"]), set_of(&[]));
    assert_eq!(
        sorted(run(&s, &["sunion", "a", "b", "nokey", "c"])),
        strs(&["1", "2", "3", "4", "5", "x", "y", "z"])
    );
    assert_eq!(
        sorted(run(&s, &["sdiff", "a", "b", "c"])),
        strs(&["1", "4"])
    );
    assert_eq!(
        sorted(run(&s, &["sdiff", "a", "nokey"])),
        strs(&["1", "2", "3", "4", "x"])
    );
    assert_eq!(run(&s, &["sdiff", "nokey", "a"]), set_of(&[]));
    assert_eq!(run(&s, &["sdiff", "a", "a"]), set_of(&[]));
    assert_eq!(run(&s, &["sintercard", "3", "a", "b", "c"]), Reply::Int(2));
    assert_eq!(
        run(&s, &["sintercard", "2", "a", "b", "limit", "2"]),
        Reply::Int(2)
    );
    assert_eq!(
        run(&s, &["sintercard", "2", "a", "b", "LIMIT", "0"]),
        Reply::Int(3)
    );
    assert_eq!(run(&s, &["sintercard", "2", "a", "nokey"]), Reply::Int(0));
    // A LIMIT stops early on a big intersection: at most that many.
    let many: Vec<String> = (0..5000).map(|i| format!("c{i}")).collect();
    for key in ["big1", "big2"] {
        let mut line = vec!["sadd", key];
        line.extend(many.iter().map(String::as_str));
        run(&s, &line);
    }
    run(&s, &["sadd", "big2", "only2"]);
    assert_eq!(
        run(&s, &["sintercard", "2", "big1", "big2"]),
        Reply::Int(5000)
    );
    for (limit, want) in [("1", 1), ("1500", 1500), ("5000", 5000), ("9999", 5000)] {
        assert_eq!(
            run(&s, &["sintercard", "2", "big2", "big1", "limit", limit]),
            Reply::Int(want),
            "LIMIT {limit}"
        );
    }
    // Every key's type is checked, even after a missing one.
    for line in [
        &["sinter", "nokey", "str"][..],
        &["sinter", "a", "str"],
        &["sunion", "str", "a"],
        &["sdiff", "nokey", "str"],
        &["sdiff", "a", "str"],
        &["sintercard", "2", "nokey", "str"],
        &["sinterstore", "d", "a", "str"],
        &["sunionstore", "d", "nokey", "str"],
        &["sdiffstore", "d", "a", "b", "str"],
    ] {
        assert_eq!(run(&s, line), err(WRONGTYPE), "{line:?}");
    }
    assert_eq!(
        run(&s, &["exists", "d"]),
        Reply::Int(0),
        "an error changes nothing"
    );
    // SINTERCARD's arguments.
    let cases = [
        (
            &["sintercard", "0", "a"][..],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["sintercard", "x", "a"],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["sintercard", "2", "a"],
            "ERR Number of keys can't be greater than number of args",
        ),
        (&["sintercard", "1", "a", "b"], "ERR syntax error"),
        (&["sintercard", "1", "a", "limit"], "ERR syntax error"),
        (
            &["sintercard", "1", "a", "limit", "-1"],
            "ERR LIMIT can't be negative",
        ),
        (
            &["sintercard", "1", "a", "limit", "x"],
            "ERR LIMIT can't be negative",
        ),
        (
            &["sintercard", "1"],
            "ERR wrong number of arguments for 'sintercard' command",
        ),
    ];
    for (line, e) in cases {
        assert_eq!(run(&s, line), err(e), "{line:?}");
    }
    // The STORE forms: the destination becomes the result, whatever it held, without
    // its expiry; an empty result removes it.
    run(&s, &["set", "d", "old"]);
    run(&s, &["expire", "d", "1000"]);
    assert_eq!(run(&s, &["sinterstore", "d", "a", "b"]), Reply::Int(3));
    assert_eq!(sorted(run(&s, &["smembers", "d"])), strs(&["2", "3", "x"]));
    assert_eq!(run(&s, &["ttl", "d"]), Reply::Int(-1));
    assert_eq!(run(&s, &["sunionstore", "u", "a", "c"]), Reply::Int(6));
    assert_eq!(run(&s, &["sdiffstore", "df", "b", "a"]), Reply::Int(2));
    assert_eq!(sorted(run(&s, &["smembers", "df"])), strs(&["5", "y"]));
    // A source that is also the destination.
    assert_eq!(run(&s, &["sdiffstore", "a", "a", "c"]), Reply::Int(3));
    assert_eq!(sorted(run(&s, &["smembers", "a"])), strs(&["1", "2", "4"]));
    assert_eq!(run(&s, &["sinterstore", "d", "a", "nokey"]), Reply::Int(0));
    assert_eq!(run(&s, &["exists", "d"]), Reply::Int(0));
    assert_eq!(
        run(&s, &["sinterstore", "nothing", "a", "nokey"]),
        Reply::Int(0)
    );
    assert_eq!(run(&s, &["object", "encoding", "u"]), bulk("listpack"));
    assert_eq!(run(&s, &["sunionstore", "n", "a"]), Reply::Int(3));
    assert_eq!(run(&s, &["object", "encoding", "n"]), bulk("intset"));
    // SMOVE.
    assert_eq!(run(&s, &["smove", "a", "b", "1"]), Reply::Int(1));
    assert_eq!(run(&s, &["sismember", "b", "1"]), Reply::Int(1));
    assert_eq!(run(&s, &["sismember", "a", "1"]), Reply::Int(0));
    assert_eq!(run(&s, &["smove", "a", "b", "nope"]), Reply::Int(0));
    assert_eq!(run(&s, &["smove", "nokey", "str", "1"]), Reply::Int(0));
    assert_eq!(run(&s, &["smove", "str", "a", "1"]), err(WRONGTYPE));
    assert_eq!(run(&s, &["smove", "a", "str", "2"]), err(WRONGTYPE));
    assert_eq!(
        run(&s, &["sismember", "a", "2"]),
        Reply::Int(1),
        "nothing moved"
    );
    assert_eq!(run(&s, &["smove", "a", "a", "2"]), Reply::Int(1));
    assert_eq!(run(&s, &["smove", "a", "a", "9"]), Reply::Int(0));
    assert_eq!(run(&s, &["smove", "a", "new", "2"]), Reply::Int(1));
    assert_eq!(run(&s, &["smove", "a", "new", "4"]), Reply::Int(1));
    assert_eq!(
        run(&s, &["exists", "a"]),
        Reply::Int(0),
        "the emptied source goes"
    );
    assert_eq!(sorted(run(&s, &["smembers", "new"])), strs(&["2", "4"]));
    // The typed methods of the store.
    assert_eq!(s.sadd(b"t", &[b"p", b"q", b"p"]).unwrap(), 2);
    assert_eq!(s.srem(b"t", &[b"q", b"r"]).unwrap(), 1);
    assert!(s.sismember(b"t", b"p").unwrap());
    assert!(!s.sismember(b"t", b"q").unwrap());
    assert_eq!(s.scard(b"t").unwrap(), 1);
    assert_eq!(s.smembers(b"t").unwrap(), vec![b"p".to_vec()]);
    assert!(s.sadd(b"str", &[b"p"]).is_err());
    // Everything comes back from the log.
    let keys = ["b", "c", "d", "u", "df", "n", "new", "t", "str", "a"];
    let before: Vec<Reply> = keys.iter().map(|k| run(&s, &["smembers", k])).collect();
    let before: Vec<Vec<String>> = before
        .into_iter()
        .map(|r| {
            if r.is_error() {
                vec!["error".into()]
            } else {
                sorted(r)
            }
        })
        .collect();
    drop(s);
    let s = Store::open(&dir).unwrap();
    for (k, want) in keys.iter().zip(before) {
        let r = run(&s, &["smembers", k]);
        let got = if r.is_error() {
            vec!["error".into()]
        } else {
            sorted(r)
        };
        assert_eq!(got, want, "{k}");
    }
}

/// TYPE, SCAN's TYPE option and KEYS see sets over every shard; an expired set is
/// gone for all of them.
#[test]
fn scan_type_keys_and_expiry_see_sets() {
    let d = tempfile::tempdir().unwrap();
    let s = store(&d.path().join("kv"));
    for i in 0..20 {
        run(&s, &["sadd", &format!("set{i}"), "m"]);
        run(&s, &["set", &format!("str{i}"), "v"]);
        run(&s, &["hset", &format!("hash{i}"), "f", "v"]);
    }
    assert_eq!(run(&s, &["type", "set3"]), Reply::Simple("set".into()));
    let mut found = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Reply::Array(mut v) = run(&s, &["scan", &cursor, "type", "set", "count", "7"]) else {
            panic!()
        };
        found.extend(sorted(v.pop().unwrap()));
        let Reply::Bulk(c) = v.pop().unwrap() else {
            panic!()
        };
        cursor = String::from_utf8(c).unwrap();
        if cursor == "0" {
            break;
        }
    }
    found.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("set{i}")).collect();
    want.sort();
    assert_eq!(found, want);
    assert_eq!(
        sorted(run(&s, &["keys", "set1*"])),
        strs(&[
            "set1", "set10", "set11", "set12", "set13", "set14", "set15", "set16", "set17",
            "set18", "set19"
        ])
    );
    assert_eq!(run(&s, &["pexpire", "set1", "1"]), Reply::Int(1));
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_eq!(run(&s, &["type", "set1"]), Reply::Simple("none".into()));
    assert_eq!(run(&s, &["scard", "set1"]), Reply::Int(0));
    assert_eq!(run(&s, &["sismember", "set1", "m"]), Reply::Int(0));
    assert!(!sorted(run(&s, &["keys", "set*"])).contains(&"set1".to_string()));
}
