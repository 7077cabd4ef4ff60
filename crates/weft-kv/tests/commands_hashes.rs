//! The hash commands, and every type's part in the key commands, run through the
//! command table on one keyspace: replies (Redis 7.0's, edge cases and errors
//! included), the records they log (a new hash's whole state, an existing one's
//! change), the state a replay of those records rebuilds, expiry, memory, encodings.

mod common;
use common::*;
use weft_kv::keyspace::{PER_EXPIRE_OVERHEAD, PER_KEY_OVERHEAD};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn hset_hget_and_their_records() {
    let mut t = T::new();
    assert_eq!(
        t.run(&["hset", "h", "a", "1", "b", "2", "a", "3"]),
        Reply::Int(2)
    );
    // A new hash: its whole state (each field once, the last value).
    assert_eq!(
        t.logged(),
        vec![Record::Hash {
            key: b"h".to_vec(),
            expire_at_ms: None,
            items: items(&["a", "3", "b", "2"]),
        }]
    );
    assert_eq!(t.run(&["hget", "h", "a"]), bulk("3"));
    assert_eq!(t.run(&["hget", "h", "zz"]), Reply::Nil);
    assert_eq!(t.run(&["hget", "nokey", "a"]), Reply::Nil);
    assert_eq!(t.run(&["hset", "h", "b", "20", "c", "30"]), Reply::Int(1));
    // An existing one: the fields set, as given.
    assert_eq!(
        t.logged(),
        vec![Record::HSet {
            key: b"h".to_vec(),
            items: items(&["b", "20", "c", "30"]),
        }]
    );
    assert_eq!(t.run(&["hlen", "h"]), Reply::Int(3));
    assert_eq!(t.run(&["hlen", "nokey"]), Reply::Int(0));
    assert_eq!(
        t.run(&["hmget", "h", "a", "x", "c"]),
        Reply::Array(vec![bulk("3"), Reply::Nil, bulk("30")])
    );
    assert_eq!(
        t.run(&["hmget", "nokey", "a", "b"]),
        Reply::Array(vec![Reply::Nil, Reply::Nil])
    );
    // A packed hash keeps the order in which fields came.
    assert_eq!(t.run(&["hkeys", "h"]), bulks(&["a", "b", "c"]));
    assert_eq!(t.run(&["hvals", "h"]), bulks(&["3", "20", "30"]));
    assert_eq!(
        t.run(&["hgetall", "h"]),
        Reply::Map(vec![
            (bulk("a"), bulk("3")),
            (bulk("b"), bulk("20")),
            (bulk("c"), bulk("30")),
        ])
    );
    assert_eq!(t.run(&["hkeys", "nokey"]), Reply::Array(vec![]));
    assert_eq!(t.run(&["hgetall", "nokey"]), Reply::Map(vec![]));
    assert_eq!(t.run(&["hexists", "h", "a"]), Reply::Int(1));
    assert_eq!(t.run(&["hexists", "h", "x"]), Reply::Int(0));
    assert_eq!(t.run(&["hexists", "nokey", "x"]), Reply::Int(0));
    assert_eq!(t.run(&["hstrlen", "h", "b"]), Reply::Int(2));
    assert_eq!(t.run(&["hstrlen", "h", "x"]), Reply::Int(0));
    assert_eq!(t.run(&["hstrlen", "nokey", "x"]), Reply::Int(0));
    // Setting a field to its own value: not new, still logged (it is a write).
    assert_eq!(t.run(&["hset", "h", "a", "3"]), Reply::Int(0));
    // Arity: a field without its value.
    assert_eq!(
        t.run(&["hset", "h", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(
        t.run(&["hmset", "h", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'hmset' command")
    );
    assert_eq!(
        t.run(&["hset", "h", "a"]),
        err("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(t.run(&["hmset", "h", "d", "4"]), Reply::OK);
    assert_eq!(t.run(&["hsetnx", "h", "d", "40"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["hsetnx", "h", "e", "5"]), Reply::Int(1));
    assert_eq!(t.run(&["hsetnx", "new", "f", "v"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::Hash {
            key: b"new".to_vec(),
            expire_at_ms: None,
            items: items(&["f", "v"]),
        }]
    );
    // Empty fields and values are fields and values.
    assert_eq!(t.run(&["hset", "h", "", ""]), Reply::Int(1));
    assert_eq!(t.run(&["hget", "h", ""]), bulk(""));
    t.check_replay();
}

#[test]
fn hdel_removes_fields_and_the_emptied_hash() {
    let mut t = T::new();
    t.run(&["hset", "h", "a", "1", "b", "2", "c", "3"]);
    assert_eq!(t.run(&["hdel", "h", "a", "x", "a"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::HDel {
            key: b"h".to_vec(),
            items: items(&["a", "x", "a"]),
        }]
    );
    assert_eq!(t.run(&["hdel", "h", "x"]), Reply::Int(0));
    assert!(t.logged().is_empty(), "nothing removed, nothing logged");
    assert_eq!(t.run(&["hdel", "nokey", "x"]), Reply::Int(0));
    t.run(&["expire", "h", "100"]);
    assert_eq!(t.run(&["hdel", "h", "b", "c"]), Reply::Int(2));
    assert_eq!(
        t.run(&["exists", "h"]),
        Reply::Int(0),
        "the last field takes the key"
    );
    assert_eq!(t.run(&["type", "h"]), Reply::Simple("none".into()));
    assert_eq!(
        (t.ks.len(), t.ks.used_memory(), t.ks.expires_count()),
        (0, 0, 0)
    );
    t.check_replay();
}

#[test]
fn hincrby_and_hincrbyfloat() {
    let mut t = T::new();
    assert_eq!(t.run(&["hincrby", "h", "n", "5"]), Reply::Int(5));
    assert_eq!(t.run(&["hincrby", "h", "n", "-7"]), Reply::Int(-2));
    // Logged as the new value.
    assert_eq!(
        t.logged(),
        vec![Record::HSet {
            key: b"h".to_vec(),
            items: items(&["n", "-2"]),
        }]
    );
    assert_eq!(
        t.run(&["hincrby", "h", "n", "x"]),
        err("ERR value is not an integer or out of range")
    );
    t.run(&[
        "hset",
        "h",
        "s",
        "abc",
        "sp",
        " 1",
        "big",
        "9223372036854775807",
    ]);
    assert_eq!(
        t.run(&["hincrby", "h", "s", "1"]),
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        t.run(&["hincrby", "h", "sp", "1"]),
        err("ERR hash value is not an integer")
    );
    assert_eq!(
        t.run(&["hincrby", "h", "big", "1"]),
        err("ERR increment or decrement would overflow")
    );
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["hincrbyfloat", "h", "f", "10.5"]), bulk("10.5"));
    assert_eq!(t.run(&["hincrbyfloat", "h", "f", "0.1"]), bulk("10.6"));
    assert_eq!(t.run(&["hincrbyfloat", "h", "n", "-84"]), bulk("-86"));
    assert_eq!(t.run(&["hset", "h", "m", "-84"]), Reply::Int(1));
    assert_eq!(t.run(&["hincrbyfloat", "h", "m", "0.1"]), bulk("-83.9"));
    assert_eq!(t.run(&["hincrbyfloat", "h", "x", "0x10"]), bulk("16"));
    assert_eq!(
        t.logged(),
        vec![Record::HSet {
            key: b"h".to_vec(),
            items: items(&["x", "16"]),
        }]
    );
    assert_eq!(
        t.run(&["hincrbyfloat", "h", "f", "abc"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        t.run(&["hincrbyfloat", "h", "f", "inf"]),
        err("ERR value is NaN or Infinity")
    );
    assert_eq!(
        t.run(&["hincrbyfloat", "h", "s", "1"]),
        err("ERR hash value is not a float")
    );
    t.run(&["hset", "h", "huge", "1e4932"]);
    assert_eq!(
        t.run(&["hincrbyfloat", "h", "huge", "1e4932"]),
        err("ERR increment would produce NaN or Infinity")
    );
    t.check_replay();
}

#[test]
fn every_type_answers_wrongtype_where_redis_does() {
    let mut t = T::new();
    t.run(&["set", "s", "text"]);
    t.run(&["hset", "h", "f", "v"]);
    for cmd in [
        &["hget", "s", "f"][..],
        &["hset", "s", "f", "v"],
        &["hsetnx", "s", "f", "v"],
        &["hmget", "s", "f"],
        &["hdel", "s", "f"],
        &["hlen", "s"],
        &["hgetall", "s"],
        &["hincrby", "s", "f", "1"],
        &["hincrbyfloat", "s", "f", "1"],
        &["hrandfield", "s"],
        &["hscan", "s", "0"],
        &["get", "h"],
        &["getset", "h", "v"],
        &["getdel", "h"],
        &["getex", "h"],
        &["append", "h", "x"],
        &["incr", "h"],
        &["incrbyfloat", "h", "1"],
        &["strlen", "h"],
        &["getrange", "h", "0", "1"],
        &["setrange", "h", "0", "x"],
        &["set", "h", "v", "get"],
    ] {
        assert_eq!(t.run(cmd), err(WRONGTYPE), "{cmd:?}");
        assert!(t.logged().is_empty(), "{cmd:?} changed nothing");
    }
    assert_eq!(t.run(&["hget", "h", "f"]), bulk("v"));
    assert_eq!(t.run(&["get", "s"]), bulk("text"));
    // MGET answers nil for a key of another type; SETNX sees it exists.
    assert_eq!(
        t.run(&["mget", "s", "h"]),
        Reply::Array(vec![bulk("text"), Reply::Nil])
    );
    assert_eq!(t.run(&["setnx", "h", "v"]), Reply::Int(0));
    assert_eq!(t.run(&["type", "h"]), Reply::Simple("hash".into()));
    assert_eq!(t.run(&["type", "s"]), Reply::Simple("string".into()));
    // SET replaces a value of any type (its memory goes with it).
    t.run(&["expire", "h", "100"]);
    assert_eq!(t.run(&["set", "h", "now a string"]), Reply::OK);
    assert_eq!(t.run(&["type", "h"]), Reply::Simple("string".into()));
    assert_eq!(t.run(&["ttl", "h"]), Reply::Int(-1));
    assert_eq!(
        t.ks.used_memory(),
        (1 + 4 + 1 + 12) as u64 + 2 * PER_KEY_OVERHEAD
    );
    t.run(&["hset", "h2", "f", "v"]);
    assert_eq!(t.run(&["mset", "h2", "x"]), Reply::OK);
    assert_eq!(t.run(&["get", "h2"]), bulk("x"));
    t.check_replay();
}

#[test]
fn object_encoding_follows_redis() {
    let mut t = T::new();
    let enc = |t: &mut T, k: &str| t.run(&["object", "encoding", k]);
    t.run(&["set", "i", "12345"]);
    t.run(&["set", "e", "hello"]);
    t.run(&["set", "r", &"x".repeat(45)]);
    t.run(&["set", "lead0", "012"]);
    t.run(&["set", "a", "12"]);
    t.run(&["append", "a", "3"]);
    assert_eq!(enc(&mut t, "i"), bulk("int"));
    assert_eq!(enc(&mut t, "e"), bulk("embstr"));
    assert_eq!(enc(&mut t, "r"), bulk("raw"));
    assert_eq!(enc(&mut t, "lead0"), bulk("embstr"));
    assert_eq!(enc(&mut t, "a"), bulk("raw"), "APPEND makes a raw string");
    assert_eq!(enc(&mut t, "nokey"), Reply::Nil);
    t.run(&["hset", "h", "f", "v"]);
    assert_eq!(enc(&mut t, "h"), bulk("listpack"));
    // 128 fields stay packed; the 129th converts.
    for i in 0..127 {
        t.run(&["hset", "h", &format!("f{i}"), "v"]);
    }
    assert_eq!(t.run(&["hlen", "h"]), Reply::Int(128));
    assert_eq!(enc(&mut t, "h"), bulk("listpack"));
    t.run(&["hset", "h", "one-more", "v"]);
    assert_eq!(enc(&mut t, "h"), bulk("hashtable"));
    // A value of 64 bytes stays packed, of 65 converts; a field likewise.
    t.run(&["hset", "v", "f", &"x".repeat(64)]);
    assert_eq!(enc(&mut t, "v"), bulk("listpack"));
    t.run(&["hset", "v", "g", &"x".repeat(65)]);
    assert_eq!(enc(&mut t, "v"), bulk("hashtable"));
    t.run(&["hset", "w", &"y".repeat(65), "v"]);
    assert_eq!(enc(&mut t, "w"), bulk("hashtable"));
    // Removing fields does not convert back.
    t.run(&["hdel", "v", "g"]);
    assert_eq!(enc(&mut t, "v"), bulk("hashtable"));
    assert_eq!(t.run(&["object", "refcount", "h"]), Reply::Int(1));
    // Seconds since h was last used (OBJECT itself is not a use).
    assert!(matches!(t.run(&["object", "idletime", "h"]), Reply::Int(n) if n >= 0));
    assert!(matches!(t.run(&["object", "freq", "h"]), Reply::Error(e) if e.contains("LFU")));
    assert!(matches!(t.run(&["object", "help"]), Reply::Array(v) if v.len() > 5));
    assert_eq!(
        t.run(&["object", "encoding", "h", "extra"]),
        err("ERR wrong number of arguments for 'object|encoding' command")
    );
    assert!(
        matches!(t.run(&["object", "nosuch", "h"]), Reply::Error(e) if e.contains("OBJECT HELP"))
    );
    t.check_replay();
}

#[test]
fn expiry_and_memory_for_hashes() {
    let mut t = T::new();
    t.run(&["hset", "h", "ab", "xyz"]);
    let packed = |fields: &[(&str, &str)]| {
        fields
            .iter()
            .map(|(f, v)| 2 + f.len() + v.len())
            .sum::<usize>() as u64
    };
    assert_eq!(
        t.ks.used_memory(),
        1 + packed(&[("ab", "xyz")]) + PER_KEY_OVERHEAD
    );
    assert_eq!(t.run(&["pexpire", "h", "1000"]), Reply::Int(1));
    assert_eq!(t.run(&["hset", "h", "c", "d"]), Reply::Int(1));
    assert_eq!(
        t.run(&["pttl", "h"]),
        Reply::Int(1000),
        "HSET keeps the expiry"
    );
    assert_eq!(
        t.ks.used_memory(),
        1 + packed(&[("ab", "xyz"), ("c", "d")]) + PER_KEY_OVERHEAD + PER_EXPIRE_OVERHEAD
    );
    assert_eq!(t.run(&["persist", "h"]), Reply::Int(1));
    t.run(&["pexpire", "h", "1000"]);
    t.check_replay();
    t.now += 1000;
    assert_eq!(t.run(&["hget", "h", "c"]), Reply::Nil);
    assert_eq!(t.run(&["exists", "h"]), Reply::Int(0));
    assert_eq!((t.ks.len(), t.ks.used_memory()), (0, 0));
    // A new hash on an expired key's name starts afresh, without its expiry.
    t.run(&["hset", "h", "n", "1"]);
    assert_eq!(t.run(&["ttl", "h"]), Reply::Int(-1));
    assert_eq!(
        t.run(&["hgetall", "h"]),
        Reply::Map(vec![(bulk("n"), bulk("1"))])
    );
    // A big hash counts its fields and values plus an overhead each.
    for i in 0..300 {
        t.run(&["hset", "big", &format!("field{i:03}"), "value"]);
    }
    let per_field = weft_kv::keyspace::hash::FIELD_OVERHEAD + 8 + 5;
    assert_eq!(
        t.ks.memory_of(b"big", t.now),
        3 + 300 * per_field + PER_KEY_OVERHEAD
    );
    t.run(&["hdel", "big", "field000", "field001"]);
    assert_eq!(
        t.ks.memory_of(b"big", t.now),
        3 + 298 * per_field + PER_KEY_OVERHEAD
    );
    t.run(&["del", "big", "h"]);
    assert_eq!((t.ks.len(), t.ks.used_memory()), (0, 0));
    t.check_replay();
}

/// Under a memory limit, a hash write that would pass it is refused with Redis's OOM
/// error and changes nothing; deletions still run.
#[test]
fn hash_writes_respect_the_memory_limit() {
    let mut t = T::new();
    t.run(&["hset", "h", "a", "1"]);
    t.room = 200;
    let big = "x".repeat(300);
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(t.run(&["hset", "h", "b", &big]), oom);
    assert_eq!(t.run(&["hset", "new", "b", &big]), oom);
    assert_eq!(t.run(&["hincrby", "new", "n", "1"]), Reply::Int(1));
    assert_eq!(t.run(&["hlen", "h"]), Reply::Int(1));
    assert_eq!(t.run(&["exists", "new"]), Reply::Int(1));
    assert_eq!(t.run(&["hdel", "h", "a"]), Reply::Int(1));
    t.check_replay();
}

#[test]
fn hrandfield_counts_and_shapes() {
    let mut t = T::new();
    assert_eq!(t.run(&["hrandfield", "nokey"]), Reply::Nil);
    assert_eq!(t.run(&["hrandfield", "nokey", "3"]), Reply::Array(vec![]));
    assert_eq!(
        t.run(&["hrandfield", "nokey", "-3", "withvalues"]),
        Reply::Array(vec![])
    );
    for (key, n) in [("small", 5usize), ("big", 300)] {
        for i in 0..n {
            t.run(&["hset", key, &format!("f{i}"), &format!("v{i}")]);
        }
        let field_of = |r: &Reply| match r {
            Reply::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
            r => panic!("{r:?}"),
        };
        let r = t.run(&["hrandfield", key]);
        assert!(field_of(&r)[1..].parse::<usize>().unwrap() < n);
        assert_eq!(t.run(&["hrandfield", key, "0"]), Reply::Array(vec![]));
        // Distinct fields, as many as asked (all of them if fewer).
        for count in [1usize, 3, 4, 99, 1000] {
            let Reply::Array(got) = t.run(&["hrandfield", key, &count.to_string()]) else {
                panic!()
            };
            let names: std::collections::BTreeSet<String> = got.iter().map(field_of).collect();
            assert_eq!(got.len(), count.min(n), "{key} {count}");
            assert_eq!(names.len(), got.len(), "distinct");
        }
        // Repeats allowed with a negative count.
        let Reply::Array(got) = t.run(&["hrandfield", key, "-50"]) else {
            panic!()
        };
        assert_eq!(got.len(), 50);
        // WITHVALUES: each field with its own value.
        let Reply::Pairs(got) = t.run(&["hrandfield", key, "-20", "WITHVALUES"]) else {
            panic!()
        };
        assert_eq!(got.len(), 20);
        for (f, v) in &got {
            assert_eq!(field_of(f)[1..], field_of(v)[1..]);
        }
        let Reply::Pairs(got) = t.run(&["hrandfield", key, "2", "withvalues"]) else {
            panic!()
        };
        assert_eq!(got.len(), 2);
        assert_ne!(got[0].0, got[1].0);
    }
    // Every field comes up.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        if let Reply::Bulk(b) = t.run(&["hrandfield", "small"]) {
            seen.insert(b);
        }
    }
    assert_eq!(seen.len(), 5);
    assert_eq!(
        t.run(&["hrandfield", "small", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["hrandfield", "small", "1", "values"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["hrandfield", "small", "1", "withvalues", "x"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["hrandfield", "small", "-9223372036854770000", "withvalues"]),
        err("ERR value is out of range")
    );
    assert_eq!(
        t.run(&["hrandfield", "small", "-9223372036854775808"]),
        err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    );
    assert!(
        matches!(t.run(&["hrandfield", "small", "-2000000"]), Reply::Error(e) if e.contains("too large"))
    );
    assert!(t.logged().is_empty());
}

#[test]
fn hscan_walks_every_field() {
    let mut t = T::new();
    let scan = |t: &mut T, args: &[&str]| -> (String, Vec<Vec<u8>>) {
        match t.run(args) {
            Reply::Array(v) => match (&v[0], &v[1]) {
                (Reply::Bulk(c), Reply::Array(items)) => (
                    String::from_utf8(c.clone()).unwrap(),
                    items
                        .iter()
                        .map(|i| match i {
                            Reply::Bulk(b) => b.clone(),
                            r => panic!("{r:?}"),
                        })
                        .collect(),
                ),
                r => panic!("{r:?}"),
            },
            r => panic!("{r:?}"),
        }
    };
    assert_eq!(scan(&mut t, &["hscan", "nokey", "0"]), ("0".into(), vec![]));
    assert_eq!(
        scan(&mut t, &["hscan", "nokey", "0", "count", "0"]),
        ("0".into(), vec![]),
        "a missing key answers before the options are read"
    );
    t.run(&["hset", "h", "a", "1", "b", "2", "ab", "3"]);
    // A packed hash: everything at once, cursor 0.
    assert_eq!(
        scan(&mut t, &["hscan", "h", "0", "count", "1"]),
        ("0".into(), items(&["a", "1", "b", "2", "ab", "3"]))
    );
    assert_eq!(
        scan(&mut t, &["hscan", "h", "0", "match", "a*"]),
        ("0".into(), items(&["a", "1", "ab", "3"]))
    );
    for i in 0..1000 {
        t.run(&["hset", "big", &format!("f{i}"), &format!("{i}")]);
    }
    let mut fields = std::collections::BTreeMap::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let (next, got) = scan(&mut t, &["hscan", "big", &cursor, "count", "50"]);
        for p in got.chunks(2) {
            assert!(
                fields.insert(p[0].clone(), p[1].clone()).is_none(),
                "once each"
            );
        }
        calls += 1;
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(fields.len(), 1000);
    assert!(
        calls > 10,
        "a big hash is walked a part at a time ({calls} calls)"
    );
    assert_eq!(fields[&b"f77"[..]], b"77");
    assert_eq!(t.run(&["hscan", "h", "x"]), err("ERR invalid cursor"));
    assert_eq!(
        t.run(&["hscan", "h", "0", "count", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["hscan", "h", "0", "count", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["hscan", "h", "0", "match"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["hscan", "h", "0", "nosuch", "1"]),
        err("ERR syntax error")
    );
}

/// HRANDFIELD draws every field of a big hash (a table) equally often, with repeats (a
/// negative count) and without (a positive one): 200,000 fields drawn from 1,000 give
/// each about 200 (a sum of independent draws of chance 1/1000, or 1/10 for a hundred
/// distinct ones at a time). Under a uniform draw a field comes up fewer than 100 or
/// more than 320 times with a chance below 10^-11 (Chernoff's bound), so the test fails
/// by chance less than once in 10^7 runs; picking the first field at or after a random
/// hash, as HRANDFIELD once did, draws some fields several times as often as others.
#[test]
fn hrandfield_draws_every_field_equally_often() {
    let mut t = T::new();
    for i in 0..1000 {
        t.run(&["hset", "h", &format!("field{i}"), "v"]);
    }
    assert_eq!(t.run(&["object", "encoding", "h"]), bulk("hashtable"));
    let check = |counts: std::collections::HashMap<Vec<u8>, u32>, how: &str| {
        assert_eq!(counts.len(), 1000, "{how}: every field comes up");
        for (f, n) in &counts {
            let f = String::from_utf8_lossy(f);
            assert!((100..=320).contains(n), "{how}: {f} drawn {n} times");
        }
    };
    let mut counts = std::collections::HashMap::new();
    let Reply::Array(got) = t.run(&["hrandfield", "h", "-200000"]) else {
        panic!()
    };
    for r in got {
        let Reply::Bulk(f) = r else { panic!("{r:?}") };
        *counts.entry(f).or_insert(0) += 1;
    }
    check(counts, "a negative count");
    let mut counts = std::collections::HashMap::new();
    for _ in 0..2000 {
        let Reply::Array(got) = t.run(&["hrandfield", "h", "100"]) else {
            panic!()
        };
        for r in got {
            let Reply::Bulk(f) = r else { panic!("{r:?}") };
            *counts.entry(f).or_insert(0) += 1;
        }
    }
    check(counts, "a positive count");
}

/// A hash big enough to be a table, changed field by field, comes back from its log
/// (its creation, then changes) and from compaction's records (chunked).
#[test]
fn a_big_hash_replays() {
    let mut t = T::new();
    let long = "v".repeat(5000);
    for i in 0..500 {
        t.run(&["hset", "big", &format!("f{i}"), &long]);
        if i % 7 == 0 {
            t.run(&["hdel", "big", &format!("f{}", i / 2)]);
        }
        if i % 11 == 0 {
            t.run(&["hincrby", "big", "counter", "3"]);
        }
    }
    t.run(&["pexpire", "big", "100000"]);
    t.check_replay();
    // Compaction's records of the big hash: several, none above the size limit.
    let mut records = 0;
    t.ks.walk(0, 100, t.now, |r| {
        let mut out = Vec::new();
        weft_kv::log::encode(&r, &mut out);
        assert!(out.len() <= weft_kv::log::ITEMS_PER_RECORD + 4096);
        records += 1;
    });
    assert!(records > 1, "{records}");
}
