//! SORT and SORT_RO on an embedded store of four shards: exact replies (numeric and
//! ALPHA order, DESC, LIMIT, BY and GET patterns with `*`, `->field` and `#`, BY
//! nosort over lists, sets and sorted sets), errors (syntax, LIMIT, scores that are
//! not numbers, WRONGTYPE) that change nothing, STORE into a destination on another
//! shard, and the stored lists as a restart (a replay of the log) rebuilds them; and
//! STORE's step on one keyspace: the records it logs (a new list's whole state, or
//! `Del`), their replay (`check_replay`), OOM before anything changes.

mod common;
use common::*;

fn run(store: &weft_kv::Store, line: &[&str]) -> Reply {
    let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
    store.exec(&args)
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn numeric_alpha_desc_and_limit() {
    let (_dir, s) = four_shards();
    run(&s, &["rpush", "l", "3", "10", "1", "2.5", "-4", "0x10", ""]);
    assert_eq!(
        run(&s, &["sort", "l"]),
        bulks(&["-4", "", "1", "2.5", "3", "10", "0x10"])
    );
    assert_eq!(
        run(&s, &["sort", "l", "desc"]),
        bulks(&["0x10", "10", "3", "2.5", "1", "", "-4"])
    );
    assert_eq!(
        run(&s, &["sort", "l", "alpha"]),
        bulks(&["", "-4", "0x10", "1", "10", "2.5", "3"])
    );
    assert_eq!(
        run(&s, &["sort", "l", "limit", "1", "2"]),
        bulks(&["", "1"])
    );
    // A negative offset is 0, a negative count all the rest, past the end nothing.
    assert_eq!(
        run(&s, &["sort", "l", "limit", "-5", "2"]),
        bulks(&["-4", ""])
    );
    assert_eq!(
        run(&s, &["sort", "l", "limit", "5", "-1"]),
        bulks(&["10", "0x10"])
    );
    assert_eq!(run(&s, &["sort", "l", "limit", "7", "3"]), bulks(&[]));
    assert_eq!(run(&s, &["sort_ro", "l", "limit", "0", "0"]), bulks(&[]));
    // Equal scores: by the elements' bytes.
    run(&s, &["sadd", "st", "1.0", "1", "01"]);
    assert_eq!(run(&s, &["sort", "st"]), bulks(&["01", "1", "1.0"]));
    assert_eq!(run(&s, &["sort", "st", "desc"]), bulks(&["1.0", "1", "01"]));
    run(&s, &["zadd", "z", "1", "c", "2", "b", "3", "a"]);
    assert_eq!(run(&s, &["sort", "z", "alpha"]), bulks(&["a", "b", "c"]));
    assert_eq!(run(&s, &["sort", "missing"]), bulks(&[]));
}

#[test]
fn errors_change_nothing() {
    let (_dir, s) = four_shards();
    run(&s, &["rpush", "l", "1", "x"]);
    run(&s, &["set", "str", "v"]);
    run(&s, &["set", "dst", "keep"]);
    let no_double = err("ERR One or more scores can't be converted into double");
    assert_eq!(run(&s, &["sort", "l"]), no_double);
    assert_eq!(run(&s, &["sort", "l", "store", "dst"]), no_double);
    assert_eq!(run(&s, &["get", "dst"]), bulk("keep"));
    run(&s, &["rpush", "sp", "2 "]);
    assert_eq!(run(&s, &["sort", "sp"]), no_double);
    assert_eq!(run(&s, &["sort", "str"]), err(WRONGTYPE));
    // Options are checked before the key's type.
    assert_eq!(run(&s, &["sort", "str", "foo"]), err("ERR syntax error"));
    assert_eq!(
        run(&s, &["sort", "l", "limit", "1"]),
        err("ERR syntax error")
    );
    assert_eq!(
        run(&s, &["sort", "l", "limit", "a", "1"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        run(&s, &["sort_ro", "l", "store", "dst"]),
        err("ERR syntax error")
    );
    assert_eq!(run(&s, &["sort", "l", "alpha"]), bulks(&["1", "x"]));
    assert_eq!(run(&s, &["get", "dst"]), bulk("keep"));
}

#[test]
fn by_and_get_patterns_across_shards() {
    let (_dir, s) = four_shards();
    run(&s, &["rpush", "ids", "1", "2", "3"]);
    // Weights and values on other shards than the list's.
    run(&s, &["mset", "w_1", "30", "w_2", "10", "w_3", "20"]);
    run(&s, &["mset", "name_1", "one", "name_3", "three"]);
    run(&s, &["hset", "obj_1", "n", "x1", "w", "3"]);
    run(&s, &["hset", "obj_2", "n", "x2", "w", "1"]);
    run(&s, &["hset", "obj_3", "w", "2"]);
    assert_eq!(
        run(&s, &["sort", "ids", "by", "w_*"]),
        bulks(&["2", "3", "1"])
    );
    assert_eq!(
        run(&s, &["sort", "ids", "by", "obj_*->w"]),
        bulks(&["2", "3", "1"])
    );
    assert_eq!(
        run(
            &s,
            &["sort", "ids", "by", "w_*", "get", "name_*", "get", "#", "get", "obj_*->n"]
        ),
        Reply::Array(vec![
            Reply::Nil,
            bulk("2"),
            bulk("x2"),
            bulk("three"),
            bulk("3"),
            Reply::Nil,
            bulk("one"),
            bulk("1"),
            bulk("x1"),
        ])
    );
    // A missing weight counts as 0 (numeric) or comes first (ALPHA).
    run(&s, &["rpush", "ids", "4"]);
    assert_eq!(
        run(&s, &["sort", "ids", "by", "w_*"]),
        bulks(&["4", "2", "3", "1"])
    );
    assert_eq!(
        run(&s, &["sort", "ids", "by", "name_*", "alpha"]),
        bulks(&["2", "4", "1", "3"])
    );
    // A key of another type gives nil; a GET pattern without `*` too.
    assert_eq!(
        run(
            &s,
            &["sort", "ids", "limit", "0", "1", "get", "obj_*", "get", "const"]
        ),
        Reply::Array(vec![Reply::Nil, Reply::Nil])
    );
    run(&s, &["set", "w_4", "nan?"]);
    assert_eq!(
        run(&s, &["sort", "ids", "by", "w_*"]),
        err("ERR One or more scores can't be converted into double")
    );
}

#[test]
fn by_nosort_keeps_the_order() {
    let (_dir, s) = four_shards();
    run(&s, &["rpush", "l", "c", "a", "b"]);
    assert_eq!(
        run(&s, &["sort", "l", "by", "nosort"]),
        bulks(&["c", "a", "b"])
    );
    assert_eq!(
        run(&s, &["sort", "l", "by", "nosort", "desc"]),
        bulks(&["b", "a", "c"])
    );
    run(&s, &["zadd", "z", "1", "a", "2", "b", "3", "c", "4", "d"]);
    assert_eq!(
        run(&s, &["sort", "z", "by", "nosort", "limit", "1", "2"]),
        bulks(&["b", "c"])
    );
    assert_eq!(
        run(
            &s,
            &["sort", "z", "by", "nosort", "desc", "limit", "0", "3"]
        ),
        bulks(&["d", "c", "b"])
    );
    // A set stored with BY nosort is sorted as bytes.
    run(&s, &["sadd", "st", "b", "10", "a", "2"]);
    assert_eq!(
        run(&s, &["sort", "st", "by", "nosort", "store", "out"]),
        Reply::Int(4)
    );
    assert_eq!(
        run(&s, &["lrange", "out", "0", "-1"]),
        bulks(&["10", "2", "a", "b"])
    );
}

#[test]
fn store_to_other_shards_and_replay() {
    let (dir, s) = four_shards();
    let k = keys_on_shards("sk", 4);
    run(&s, &["rpush", &k[0], "3", "1", "2"]);
    run(&s, &["set", &k[1], "a string"]);
    run(&s, &["mset", "v_1", "one", "v_3", "three"]);
    // The destination on another shard, replacing a string.
    assert_eq!(run(&s, &["sort", &k[0], "store", &k[1]]), Reply::Int(3));
    assert_eq!(run(&s, &["type", &k[1]]), Reply::Simple("list".into()));
    assert_eq!(
        run(&s, &["lrange", &k[1], "0", "-1"]),
        bulks(&["1", "2", "3"])
    );
    // Nils are stored as empty strings.
    assert_eq!(
        run(&s, &["sort", &k[0], "desc", "get", "v_*", "store", &k[2]]),
        Reply::Int(3)
    );
    assert_eq!(
        run(&s, &["lrange", &k[2], "0", "-1"]),
        bulks(&["three", "", "one"])
    );
    // The same shard as the key, and over itself.
    assert_eq!(
        run(&s, &["sort", &k[0], "desc", "store", &k[0]]),
        Reply::Int(3)
    );
    assert_eq!(
        run(&s, &["lrange", &k[0], "0", "-1"]),
        bulks(&["3", "2", "1"])
    );
    // An empty result removes the destination.
    run(&s, &["set", &k[3], "x"]);
    assert_eq!(run(&s, &["sort", "nokey", "store", &k[3]]), Reply::Int(0));
    assert_eq!(run(&s, &["exists", &k[3]]), Reply::Int(0));
    assert_eq!(
        run(&s, &["sort", &k[0], "limit", "5", "1", "store", &k[2]]),
        Reply::Int(0)
    );
    assert_eq!(run(&s, &["exists", &k[2]]), Reply::Int(0));
    drop(s);
    let s = weft_kv::Store::open(dir.path()).unwrap();
    assert_eq!(
        run(&s, &["lrange", &k[0], "0", "-1"]),
        bulks(&["3", "2", "1"])
    );
    assert_eq!(
        run(&s, &["lrange", &k[1], "0", "-1"]),
        bulks(&["1", "2", "3"])
    );
    assert_eq!(run(&s, &["exists", &k[2], &k[3]]), Reply::Int(0));
    assert_eq!(run(&s, &["dbsize"]), Reply::Int(4));
}

/// Runs SORT's STORE step (`commands::sort::store`) on `t`'s keyspace, as the
/// transaction runs it on the destination's shard.
fn store_step(t: &mut T, args: &[&str]) -> Reply {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut buf = Vec::new();
    let mut ctx = Ctx::new(t.now, &mut buf);
    ctx.room = t.room;
    let r = weft_kv::commands::sort::store(&mut t.ks, &argv, &mut ctx);
    t.log.extend_from_slice(&buf);
    t.last = buf;
    r
}

#[test]
fn store_logs_a_new_list_and_checks_the_memory_first() {
    let mut t = T::new();
    t.run(&["set", "d", "a string"]);
    assert_eq!(
        store_step(&mut t, &["sortstore", "d", "b", "", "a"]),
        Reply::Int(3)
    );
    // The destination's whole state, as an LPUSH onto a new key logs it.
    assert_eq!(
        t.logged(),
        vec![Record::List {
            key: b"d".to_vec(),
            expire_at_ms: None,
            items: vec![b"b".to_vec(), vec![], b"a".to_vec()],
        }]
    );
    assert_eq!(t.run(&["lrange", "d", "0", "-1"]), bulks(&["b", "", "a"]));
    t.check_replay();
    // Nothing to store: the destination goes, logged as its removal; again, nothing.
    assert_eq!(store_step(&mut t, &["sortstore", "d"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![Record::Del { key: b"d".to_vec() }]);
    assert_eq!(store_step(&mut t, &["sortstore", "d"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![]);
    t.check_replay();
    // Without room: OOM, and the old value stays.
    t.run(&["set", "d", "x"]);
    t.room = 8;
    let big = "y".repeat(100);
    assert_eq!(
        store_step(&mut t, &["sortstore", "d", &big]),
        err("OOM command not allowed when used memory > 'maxmemory'.")
    );
    assert_eq!(t.logged(), vec![]);
    assert_eq!(t.run(&["get", "d"]), bulk("x"));
    t.check_replay();
}

/// Runs SORT's read of its key (`commands::sort::read_source`) on `t`'s keyspace, as
/// the transaction runs it on the key's shard.
fn read_step(t: &mut T, key: &str) -> Reply {
    let argv: Vec<&[u8]> = vec![b"sortread", key.as_bytes()];
    let mut buf = Vec::new();
    let mut ctx = Ctx::new(t.now, &mut buf);
    let r = weft_kv::commands::sort::read_source(&mut t.ks, &argv, &mut ctx);
    t.log.extend_from_slice(&buf);
    t.last = buf;
    r
}

/// A keyspace rebuilt from `t`'s log (a restart), and one rebuilt from the records
/// compaction writes for `t`'s keys, each replayed as a restart replays a log
/// (`keyspace::Replay`).
fn replayed_and_compacted(t: &T) -> (T, T) {
    let restart = |records: &mut dyn FnMut(&mut dyn FnMut(weft_kv::log::RecordRef<'_>))| {
        let mut u = T::new();
        let mut replay = weft_kv::keyspace::Replay::new(std::slice::from_mut(&mut u.ks), t.now);
        records(&mut |r| replay.push(0, r));
        replay.finish();
        u
    };
    let replayed = restart(&mut |push| {
        for r in common::records(&t.log) {
            push(r.as_ref());
        }
    });
    let compacted = restart(&mut |push| {
        let mut cur = 0;
        loop {
            cur = t.ks.walk(cur, 16, t.now, |r| push(r));
            if cur == 0 {
                break;
            }
        }
    });
    (replayed, compacted)
}

#[test]
fn sort_makes_a_sorted_set_a_skiplist_as_redis_does() {
    let mut t = T::new();
    t.run(&["zadd", "z", "1", "a", "2", "b"]);
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("listpack"));
    // SORT's read converts it, and logs nothing (SORT_RO is a read).
    assert_eq!(
        read_step(&mut t, "z"),
        Reply::Array(vec![bulk("z"), bulk("a"), bulk("b")])
    );
    assert_eq!(t.logged(), vec![]);
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("skiplist"));
    read_step(&mut t, "z");
    assert_eq!(t.logged(), vec![]);
    // Other types and missing keys: nothing logged.
    t.run(&["rpush", "l", "1"]);
    read_step(&mut t, "l");
    read_step(&mut t, "missing");
    assert_eq!(t.logged(), vec![]);
    // A small tree keeps its encoding through new members; a restart, before or
    // after a compaction, packs it again (as Redis loads a small sorted set).
    t.run(&["zadd", "z", "3", "c"]);
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("skiplist"));
    t.check_replay();
    let (mut replayed, mut compacted) = replayed_and_compacted(&t);
    for u in [&mut replayed, &mut compacted] {
        assert_eq!(u.run(&["object", "encoding", "z"]), bulk("listpack"));
        assert_eq!(u.run(&["zrange", "z", "0", "-1"]), bulks(&["a", "b", "c"]));
        assert_eq!(u.run(&["lrange", "l", "0", "-1"]), bulks(&["1"]));
    }
}

/// A sorted set that grew past the thresholds and shrank stays a tree while the
/// server runs, and is packed again by a restart, before or after a compaction (as
/// Redis 7.0's DEBUG RELOAD and restart load it); one still past them stays a tree.
#[test]
fn a_shrunk_sorted_set_is_packed_again_by_a_restart() {
    let mut t = T::new();
    for key in ["z", "big"] {
        let mut add = vec!["zadd".to_string(), key.to_string()];
        for i in 0..200 {
            add.push(i.to_string());
            add.push(format!("m{i:03}"));
        }
        t.run(&add.iter().map(String::as_str).collect::<Vec<_>>());
    }
    t.run(&["zremrangebyrank", "z", "2", "-1"]);
    assert_eq!(t.run(&["zcard", "z"]), Reply::Int(2));
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("skiplist"));
    // A small one with a member too long to be packed stays a tree.
    let long = "x".repeat(100);
    t.run(&["zadd", "long", "1", &long]);
    assert_eq!(t.run(&["object", "encoding", "long"]), bulk("skiplist"));
    t.run(&["zadd", "p", "1", "a"]);
    t.check_replay();
    let (mut replayed, mut compacted) = replayed_and_compacted(&t);
    for u in [&mut replayed, &mut compacted] {
        assert_eq!(u.run(&["object", "encoding", "z"]), bulk("listpack"));
        assert_eq!(u.run(&["object", "encoding", "p"]), bulk("listpack"));
        assert_eq!(u.run(&["object", "encoding", "big"]), bulk("skiplist"));
        assert_eq!(u.run(&["object", "encoding", "long"]), bulk("skiplist"));
        assert_eq!(u.run(&["zrange", "z", "0", "-1"]), bulks(&["m000", "m001"]));
        assert_eq!(u.run(&["zscore", "z", "m001"]), Reply::Double(1.0));
        assert_eq!(u.run(&["zcard", "big"]), Reply::Int(200));
        // Writes go on as on any packed sorted set.
        assert_eq!(u.run(&["zadd", "z", "5", "m005"]), Reply::Int(1));
        assert_eq!(u.run(&["zrange", "z", "-1", "-1"]), bulks(&["m005"]));
    }
}

/// SORT and SORT_RO through the store: the sorted set is a skiplist after either,
/// even when the sort fails (members that are not numbers); packed again after a
/// restart (as Redis loads it), the restart's values unchanged.
#[test]
fn sort_and_sort_ro_convert_through_the_store() {
    let (dir, s) = four_shards();
    run(&s, &["zadd", "z1", "1", "x", "2", "y"]);
    run(&s, &["zadd", "z2", "1", "3", "2", "4"]);
    run(&s, &["zadd", "z3", "1", "5"]);
    assert_eq!(run(&s, &["object", "encoding", "z1"]), bulk("listpack"));
    assert_eq!(
        run(&s, &["sort_ro", "z1"]),
        err("ERR One or more scores can't be converted into double")
    );
    assert_eq!(
        run(&s, &["sort", "z2", "by", "nosort", "limit", "0", "0"]),
        bulks(&[])
    );
    // A syntax error comes before: nothing changes.
    assert_eq!(run(&s, &["sort", "z3", "bogus"]), err("ERR syntax error"));
    for (k, enc) in [("z1", "skiplist"), ("z2", "skiplist"), ("z3", "listpack")] {
        assert_eq!(run(&s, &["object", "encoding", k]), bulk(enc), "{k}");
    }
    drop(s);
    let s = weft_kv::Store::open(dir.path()).unwrap();
    for k in ["z1", "z2", "z3"] {
        assert_eq!(run(&s, &["object", "encoding", k]), bulk("listpack"), "{k}");
    }
    assert_eq!(run(&s, &["zrange", "z2", "0", "-1"]), bulks(&["3", "4"]));
}
