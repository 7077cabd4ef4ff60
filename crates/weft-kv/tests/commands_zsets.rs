//! The sorted-set commands, run through the command table on one keyspace: replies
//! (Redis 7.0's, edge cases and errors included), the records they log (a new sorted
//! set's whole state, an existing one's change), the state a replay of those records
//! rebuilds, the two encodings and their threshold, RESP2 and RESP3 shapes; and the
//! commands over several keys through the embedded store of four shards, recovered
//! by reopening it.

mod common;
use common::*;

fn pairs(v: &[(&str, f64)]) -> Reply {
    Reply::Pairs(
        v.iter()
            .map(|&(m, s)| (bulk(m), Reply::Double(s)))
            .collect(),
    )
}

/// Record items of (member, score) pairs.
fn zitems(v: &[(&str, f64)]) -> Vec<Vec<u8>> {
    v.iter()
        .flat_map(|&(m, s)| [m.as_bytes().to_vec(), s.to_bits().to_le_bytes().to_vec()])
        .collect()
}

fn members(v: &[&str]) -> Vec<Vec<u8>> {
    v.iter().map(|s| s.as_bytes().to_vec()).collect()
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn zadd_logs_a_new_sorted_set_whole_and_a_change_as_its_change() {
    let mut t = T::new();
    assert_eq!(
        t.run(&["zadd", "z", "3", "c", "1", "a", "2", "b", "5", "a"]),
        Reply::Int(3)
    );
    // A new sorted set: its whole state in order, each member once with its last score.
    assert_eq!(
        t.logged(),
        vec![Record::ZSet {
            key: b"z".to_vec(),
            expire_at_ms: None,
            items: zitems(&[("b", 2.0), ("c", 3.0), ("a", 5.0)]),
        }]
    );
    // An existing one: only the members whose score changed.
    assert_eq!(t.run(&["zadd", "z", "2", "b", "0.5", "d"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::ZAdd {
            key: b"z".to_vec(),
            items: zitems(&[("d", 0.5)]),
        }]
    );
    // Nothing changed: nothing logged.
    assert_eq!(t.run(&["zadd", "z", "3", "c"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![]);
    assert_eq!(
        t.run(&["zrange", "z", "0", "-1", "withscores"]),
        pairs(&[("d", 0.5), ("b", 2.0), ("c", 3.0), ("a", 5.0)])
    );
    assert_eq!(t.run(&["zcard", "z"]), Reply::Int(4));
    assert_eq!(t.run(&["zcard", "nokey"]), Reply::Int(0));
    assert_eq!(t.run(&["zscore", "z", "c"]), Reply::Double(3.0));
    assert_eq!(t.run(&["zscore", "z", "x"]), Reply::Nil);
    assert_eq!(
        t.run(&["zmscore", "z", "a", "x", "d"]),
        Reply::Array(vec![Reply::Double(5.0), Reply::Nil, Reply::Double(0.5)])
    );
    assert_eq!(
        t.run(&["zmscore", "nokey", "a"]),
        Reply::Array(vec![Reply::Nil])
    );
    assert_eq!(t.run(&["zrank", "z", "b"]), Reply::Int(1));
    assert_eq!(t.run(&["zrevrank", "z", "b"]), Reply::Int(2));
    assert_eq!(t.run(&["zrank", "z", "x"]), Reply::Nil);
    assert_eq!(t.run(&["zrank", "nokey", "x"]), Reply::Nil);
    assert_eq!(t.run(&["type", "z"]), Reply::Simple("zset".into()));
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("listpack"));
    t.check_replay();
}

#[test]
fn zadd_options_and_their_errors() {
    let mut t = T::new();
    t.run(&["zadd", "z", "10", "x"]);
    // XX on a missing key: nothing, no key.
    assert_eq!(t.run(&["zadd", "none", "xx", "1", "a"]), Reply::Int(0));
    assert_eq!(t.run(&["zadd", "none", "xx", "incr", "1", "a"]), Reply::Nil);
    assert_eq!(t.run(&["exists", "none"]), Reply::Int(0));
    // NX adds only new members; XX changes only existing ones.
    assert_eq!(
        t.run(&["zadd", "z", "nx", "20", "x", "5", "y"]),
        Reply::Int(1)
    );
    assert_eq!(t.run(&["zscore", "z", "x"]), Reply::Double(10.0));
    assert_eq!(
        t.run(&["zadd", "z", "xx", "ch", "20", "x", "5", "w"]),
        Reply::Int(1)
    );
    assert_eq!(t.run(&["zscore", "z", "w"]), Reply::Nil);
    // GT and LT change only to a greater / lower score, but add new members.
    assert_eq!(
        t.run(&["zadd", "z", "gt", "ch", "15", "x", "30", "y", "1", "n"]),
        Reply::Int(2)
    );
    assert_eq!(t.run(&["zscore", "z", "x"]), Reply::Double(20.0));
    assert_eq!(t.run(&["zscore", "z", "y"]), Reply::Double(30.0));
    assert_eq!(
        t.run(&["zadd", "z", "lt", "ch", "25", "x", "40", "y"]),
        Reply::Int(0)
    );
    assert_eq!(
        t.run(&["zadd", "z", "lt", "ch", "15", "x", "40", "y"]),
        Reply::Int(1)
    );
    assert_eq!(t.run(&["zscore", "z", "y"]), Reply::Double(30.0));
    // CH counts a member given twice once added and once changed, as Redis.
    assert_eq!(
        t.run(&["zadd", "z", "ch", "1", "q", "2", "q"]),
        Reply::Int(2)
    );
    assert_eq!(
        t.logged(),
        vec![Record::ZAdd {
            key: b"z".to_vec(),
            items: zitems(&[("q", 2.0)]),
        }]
    );
    // INCR answers the new score, or nil when an option stops it.
    assert_eq!(
        t.run(&["zadd", "z", "incr", "2.5", "x"]),
        Reply::Double(17.5)
    );
    assert_eq!(t.run(&["zadd", "z", "nx", "incr", "1", "x"]), Reply::Nil);
    assert_eq!(t.run(&["zadd", "z", "gt", "incr", "-1", "x"]), Reply::Nil);
    assert_eq!(t.logged(), vec![]);
    assert_eq!(
        t.run(&["zadd", "z", "incr", "-inf", "ninf"]),
        Reply::Double(f64::NEG_INFINITY)
    );
    assert_eq!(
        t.run(&["zadd", "z", "incr", "+inf", "ninf"]),
        err("ERR resulting score is not a number (NaN)")
    );
    for (line, e) in [
        (
            &["zadd", "z", "1"][..],
            "ERR wrong number of arguments for 'zadd' command",
        ),
        (&["zadd", "z", "nx", "ch"], "ERR syntax error"),
        (&["zadd", "z", "1", "a", "2"], "ERR syntax error"),
        (
            &["zadd", "z", "nx", "xx", "1", "a"],
            "ERR XX and NX options at the same time are not compatible",
        ),
        (
            &["zadd", "z", "gt", "lt", "1", "a"],
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            &["zadd", "z", "nx", "gt", "1", "a"],
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ),
        (
            &["zadd", "z", "incr", "1", "a", "2", "b"],
            "ERR INCR option supports a single increment-element pair",
        ),
        (
            &["zadd", "z", "1", "a", "x", "b"],
            "ERR value is not a valid float",
        ),
        (&["zadd", "z", "nan", "a"], "ERR value is not a valid float"),
        (&["zadd", "z", "", "a"], "ERR value is not a valid float"),
        (&["zadd", "z", " 1", "a"], "ERR value is not a valid float"),
        (
            &["zadd", "z", "1e400", "a"],
            "ERR value is not a valid float",
        ),
        (
            &["zincrby", "z", "abc", "a"],
            "ERR value is not a valid float",
        ),
    ] {
        assert_eq!(t.run(line), err(e), "{line:?}");
        assert_eq!(t.logged(), vec![], "{line:?}");
    }
    // C's strtod: hexadecimal and infinities are numbers.
    assert_eq!(
        t.run(&["zadd", "h", "0x10", "a", "inf", "b"]),
        Reply::Int(2)
    );
    assert_eq!(
        t.run(&["zrange", "h", "0", "-1", "withscores"]),
        pairs(&[("a", 16.0), ("b", f64::INFINITY)])
    );
    t.run(&["set", "s", "v"]);
    assert_eq!(t.run(&["zadd", "s", "1", "a"]), err(WRONGTYPE));
    assert_eq!(t.run(&["zscore", "s", "a"]), err(WRONGTYPE));
    assert_eq!(t.run(&["zrange", "s", "0", "1"]), err(WRONGTYPE));
    t.check_replay();
}

#[test]
fn zincrby_logs_the_resulting_score() {
    let mut t = T::new();
    assert_eq!(t.run(&["zincrby", "z", "1.5", "a"]), Reply::Double(1.5));
    assert_eq!(
        t.logged(),
        vec![Record::ZSet {
            key: b"z".to_vec(),
            expire_at_ms: None,
            items: zitems(&[("a", 1.5)]),
        }]
    );
    assert_eq!(t.run(&["zincrby", "z", "0.1", "a"]), Reply::Double(1.6));
    assert_eq!(
        t.logged(),
        vec![Record::ZAdd {
            key: b"z".to_vec(),
            items: zitems(&[("a", 1.5 + 0.1)]),
        }]
    );
    assert_eq!(
        t.run(&["zincrby", "z", "-inf", "a"]),
        Reply::Double(f64::NEG_INFINITY)
    );
    assert_eq!(
        t.run(&["zincrby", "z", "inf", "a"]),
        err("ERR resulting score is not a number (NaN)")
    );
    // A score is written as Redis 7.0 writes it (%.17g): in RESP2 as a bulk string,
    // in RESP3 as a double.
    assert_eq!(
        t.run(&["zincrby", "z", "1.1", "b"]).encode_to_vec(2),
        b"$18\r\n1.1000000000000001\r\n"
    );
    assert_eq!(
        t.run(&["zscore", "z", "b"]).encode_to_vec(3),
        b",1.1000000000000001\r\n"
    );
    assert_eq!(
        t.run(&["zscore", "z", "a"]).encode_to_vec(2),
        b"$4\r\n-inf\r\n"
    );
    t.check_replay();
}

#[test]
fn ranges_by_rank_score_and_member() {
    let mut t = T::new();
    t.run(&[
        "zadd", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e",
    ]);
    assert_eq!(t.run(&["zrange", "z", "1", "2"]), bulks(&["b", "c"]));
    assert_eq!(t.run(&["zrange", "z", "-2", "-1"]), bulks(&["d", "e"]));
    assert_eq!(t.run(&["zrange", "z", "3", "100"]), bulks(&["d", "e"]));
    assert_eq!(t.run(&["zrange", "z", "4", "2"]), bulks(&[]));
    assert_eq!(t.run(&["zrange", "z", "0", "0", "rev"]), bulks(&["e"]));
    assert_eq!(
        t.run(&["zrevrange", "z", "0", "1", "withscores"]),
        pairs(&[("e", 5.0), ("d", 4.0)])
    );
    assert_eq!(
        t.run(&["zrangebyscore", "z", "(1", "3"]),
        bulks(&["b", "c"])
    );
    assert_eq!(
        t.run(&["zrangebyscore", "z", "-inf", "+inf", "limit", "1", "2"]),
        bulks(&["b", "c"])
    );
    assert_eq!(
        t.run(&["zrangebyscore", "z", "-inf", "+inf", "limit", "-1", "2"]),
        bulks(&[])
    );
    assert_eq!(
        t.run(&["zrangebyscore", "z", "-inf", "+inf", "limit", "3", "-1"]),
        bulks(&["d", "e"])
    );
    assert_eq!(
        t.run(&["zrevrangebyscore", "z", "4", "(2", "withscores"]),
        pairs(&[("d", 4.0), ("c", 3.0)])
    );
    assert_eq!(
        t.run(&["zrange", "z", "(4", "2", "byscore", "rev", "limit", "1", "5"]),
        bulks(&["b"])
    );
    assert_eq!(t.run(&["zcount", "z", "(1", "4"]), Reply::Int(3));
    assert_eq!(t.run(&["zcount", "z", "5", "1"]), Reply::Int(0));
    assert_eq!(t.run(&["zcount", "nokey", "1", "2"]), Reply::Int(0));
    t.run(&["zadd", "l", "0", "a", "0", "b", "0", "c", "0", "d"]);
    assert_eq!(t.run(&["zrangebylex", "l", "[b", "(d"]), bulks(&["b", "c"]));
    assert_eq!(
        t.run(&["zrangebylex", "l", "-", "+", "limit", "2", "10"]),
        bulks(&["c", "d"])
    );
    assert_eq!(
        t.run(&["zrevrangebylex", "l", "+", "(b"]),
        bulks(&["d", "c"])
    );
    assert_eq!(t.run(&["zlexcount", "l", "(a", "[c"]), Reply::Int(2));
    for (line, e) in [
        (
            &["zrangebyscore", "z", "x", "1"][..],
            "ERR min or max is not a float",
        ),
        (
            &["zrangebyscore", "z", "1", "nan"],
            "ERR min or max is not a float",
        ),
        (&["zcount", "z", "1", "(x"], "ERR min or max is not a float"),
        (
            &["zrangebylex", "l", "a", "+"],
            "ERR min or max not valid string range item",
        ),
        (
            &["zrangebylex", "l", "-x", "+"],
            "ERR min or max not valid string range item",
        ),
        (
            &["zrange", "z", "a", "1"],
            "ERR value is not an integer or out of range",
        ),
        (
            &["zrange", "z", "0", "1", "limit", "0", "1"],
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ),
        (
            &["zrange", "l", "-", "+", "bylex", "withscores"],
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ),
        (&["zrange", "z", "0", "1", "bogus"], "ERR syntax error"),
        (&["zrangebyscore", "z", "0", "1", "rev"], "ERR syntax error"),
        (
            &["zrangebyscore", "z", "0", "1", "limit", "0"],
            "ERR syntax error",
        ),
        (
            &["zrangebyscore", "z", "0", "1", "limit", "x", "1"],
            "ERR value is not an integer or out of range",
        ),
    ] {
        assert_eq!(t.run(line), err(e), "{line:?}");
    }
    // RESP shapes of WITHSCORES: pairs in RESP3, flat in RESP2.
    let r = t.run(&["zrange", "z", "0", "0", "withscores"]);
    assert_eq!(r.encode_to_vec(2), b"*2\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(r.encode_to_vec(3), b"*1\r\n*2\r\n$1\r\na\r\n,1\r\n");
}

#[test]
fn removals_log_the_members_removed_or_the_key() {
    let mut t = T::new();
    t.run(&[
        "zadd", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f",
    ]);
    assert_eq!(t.run(&["zrem", "z", "a", "x", "b"]), Reply::Int(2));
    assert_eq!(
        t.logged(),
        vec![Record::ZRem {
            key: b"z".to_vec(),
            items: members(&["a", "b"]),
        }]
    );
    assert_eq!(t.run(&["zrem", "z", "x"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![]);
    assert_eq!(t.run(&["zremrangebyscore", "z", "(3", "4"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::ZRem {
            key: b"z".to_vec(),
            items: members(&["d"])
        }]
    );
    assert_eq!(t.run(&["zremrangebyrank", "z", "-1", "-1"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::ZRem {
            key: b"z".to_vec(),
            items: members(&["f"])
        }]
    );
    assert_eq!(
        t.run(&["zremrangebylex", "z", "x", "y"]),
        err("ERR min or max not valid string range item")
    );
    assert_eq!(
        t.run(&["zremrangebyrank", "nokey", "0", "1"]),
        Reply::Int(0)
    );
    // ZPOPMIN without a count: a flat [member, score]; with one: pairs.
    assert_eq!(
        t.run(&["zpopmin", "z"]),
        Reply::Array(vec![bulk("c"), Reply::Double(3.0)])
    );
    assert_eq!(
        t.logged(),
        vec![Record::ZRem {
            key: b"z".to_vec(),
            items: members(&["c"])
        }]
    );
    assert_eq!(t.run(&["zpopmax", "z", "0"]), pairs(&[]));
    assert_eq!(
        t.run(&["zpopmax", "z", "-1"]),
        err("ERR value is out of range, must be positive")
    );
    // The last member goes: the key goes, logged as Del.
    assert_eq!(t.run(&["zpopmax", "z", "10"]), pairs(&[("e", 5.0)]));
    assert_eq!(t.logged(), vec![Record::Del { key: b"z".to_vec() }]);
    assert_eq!(t.run(&["exists", "z"]), Reply::Int(0));
    assert_eq!(t.run(&["zpopmin", "z"]), Reply::Array(vec![]));
    t.run(&["zadd", "z", "1", "a"]);
    assert_eq!(t.run(&["zrem", "z", "a"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![Record::Del { key: b"z".to_vec() }]);
    t.run(&["set", "s", "v"]);
    assert_eq!(t.run(&["zpopmin", "s", "0"]), err(WRONGTYPE));
    assert_eq!(t.run(&["zrem", "s", "a"]), err(WRONGTYPE));
    t.check_replay();
}

#[test]
fn a_big_sorted_set_converts_once_and_replays() {
    let mut t = T::new();
    for i in 0..128 {
        t.run(&["zadd", "z", &(i % 10).to_string(), &format!("m{i:03}")]);
    }
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("listpack"));
    t.run(&["zadd", "z", "-1", "m999"]);
    assert_eq!(t.run(&["object", "encoding", "z"]), bulk("skiplist"));
    // A long member converts a small one.
    t.run(&["zadd", "y", "1", "a"]);
    t.run(&["zadd", "y", "2", &"x".repeat(65)]);
    assert_eq!(t.run(&["object", "encoding", "y"]), bulk("skiplist"));
    assert_eq!(t.run(&["zcard", "z"]), Reply::Int(129));
    assert_eq!(t.run(&["zrange", "z", "0", "1"]), bulks(&["m999", "m000"]));
    assert_eq!(t.run(&["zrank", "z", "m001"]), Reply::Int(14));
    assert_eq!(t.run(&["zrevrank", "z", "m999"]), Reply::Int(128));
    assert_eq!(t.run(&["zcount", "z", "(0", "1"]), Reply::Int(13));
    assert_eq!(
        t.run(&["zrevrangebyscore", "z", "9", "9", "limit", "0", "2"]),
        bulks(&["m119", "m109"])
    );
    // An existing big sorted set logs one member's change, not its state.
    t.run(&["zincrby", "z", "100", "m050"]);
    assert_eq!(
        t.logged(),
        vec![Record::ZAdd {
            key: b"z".to_vec(),
            items: zitems(&[("m050", 100.0)]),
        }]
    );
    assert_eq!(t.run(&["zremrangebyrank", "z", "0", "9"]), Reply::Int(10));
    let mut cursor = "0".to_string();
    let mut seen = 0;
    loop {
        let Reply::Array(r) = t.run(&["zscan", "z", &cursor, "count", "7"]) else {
            panic!()
        };
        let (Reply::Bulk(c), Reply::Array(items)) = (&r[0], &r[1]) else {
            panic!()
        };
        seen += items.len() / 2;
        cursor = String::from_utf8(c.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen, 119);
    t.check_replay();
    // Expiry works on a sorted set as on any key.
    t.run(&["pexpire", "z", "10"]);
    t.now += 11;
    assert_eq!(t.run(&["zcard", "z"]), Reply::Int(0));
    assert_eq!(t.run(&["exists", "z"]), Reply::Int(0));
}

/// A write that would pass the memory limit is refused before it changes anything;
/// removals still run.
#[test]
fn writes_past_the_memory_limit_are_refused() {
    let mut t = T::new();
    t.run(&["zadd", "z", "1", "a"]);
    t.room = 40;
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(t.run(&["zadd", "z", "2", &"b".repeat(100)]), oom);
    assert_eq!(t.logged(), vec![]);
    assert_eq!(t.run(&["zadd", "new", "1", "a"]), oom);
    assert_eq!(t.run(&["zincrby", "new", "1", "a"]), oom);
    assert_eq!(t.run(&["exists", "new"]), Reply::Int(0));
    assert_eq!(t.run(&["zcard", "z"]), Reply::Int(1));
    assert_eq!(t.run(&["zrem", "z", "a"]), Reply::Int(1));
    t.check_replay();
}

#[test]
fn zrandmember_and_zscan() {
    let mut t = T::new();
    t.run(&["zadd", "z", "1", "a", "2", "b", "3", "c"]);
    let Reply::Bulk(m) = t.run(&["zrandmember", "z"]) else {
        panic!()
    };
    assert!([&b"a"[..], b"b", b"c"].contains(&m.as_slice()));
    assert_eq!(t.run(&["zrandmember", "z", "5"]), bulks(&["a", "b", "c"]));
    assert_eq!(t.run(&["zrandmember", "nokey"]), Reply::Nil);
    assert_eq!(t.run(&["zrandmember", "nokey", "3"]), Reply::Array(vec![]));
    let Reply::Array(r) = t.run(&["zrandmember", "z", "-7"]) else {
        panic!()
    };
    assert_eq!(r.len(), 7);
    let Reply::Pairs(p) = t.run(&["zrandmember", "z", "2", "withscores"]) else {
        panic!()
    };
    assert_eq!(p.len(), 2);
    assert_ne!(p[0].0, p[1].0);
    assert_eq!(
        t.run(&["zrandmember", "z", "1", "bogus"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["zscan", "z", "0", "match", "[ab]"]),
        Reply::Array(vec![bulk("0"), bulks(&["a", "1", "b", "2"])])
    );
    assert_eq!(t.run(&["zscan", "z", "x"]), err("ERR invalid cursor"));
}

/// An embedded store of four shards, and four keys of its sorted sets, one on each
/// shard (a key's shard is its CRC32C modulo the shards).
fn spread_store() -> (tempfile::TempDir, weft_kv::Store, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    drop(weft_kv::log::DataDir::open(dir.path(), 4).unwrap());
    let store = weft_kv::Store::open(dir.path()).unwrap();
    let mut keys: Vec<String> = Vec::new();
    for i in 0.. {
        let k = format!("zkey{i}");
        let shard = |k: &str| crc32c::crc32c(k.as_bytes()) % 4;
        if keys.iter().all(|o| shard(o) != shard(&k)) {
            keys.push(k);
        }
        if keys.len() == 4 {
            break;
        }
    }
    (dir, store, keys)
}

/// The commands over several keys, through the embedded store of four shards, and
/// their state after the store is opened again (replayed from its logs).
#[test]
fn commands_over_several_keys_run_across_shards_and_recover() {
    let (dir, store, keys) = spread_store();
    let (a, b, c, d) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    let ex = |args: &[&str]| {
        let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        store.exec(&v)
    };
    ex(&["zadd", a, "1", "x", "2", "y", "3", "z"]);
    ex(&["zadd", b, "10", "y", "20", "z", "30", "w"]);
    assert_eq!(
        ex(&["zunion", "2", a, b, "withscores"]),
        pairs(&[("x", 1.0), ("y", 12.0), ("z", 23.0), ("w", 30.0)])
    );
    assert_eq!(
        ex(&[
            "zinter",
            "2",
            a,
            b,
            "weights",
            "2",
            "1",
            "aggregate",
            "max",
            "withscores"
        ]),
        pairs(&[("y", 10.0), ("z", 20.0)])
    );
    assert_eq!(ex(&["zdiff", "2", a, b]), bulks(&["x"]));
    // A plain set is an input whose members score 1.
    ex(&["sadd", "plain", "x", "q"]);
    assert_eq!(
        ex(&["zunion", "2", a, "plain", "withscores"]),
        pairs(&[("q", 1.0), ("x", 2.0), ("y", 2.0), ("z", 3.0)])
    );
    assert_eq!(ex(&["zintercard", "2", a, b, "limit", "1"]), Reply::Int(1));
    assert_eq!(ex(&["zunionstore", c, "3", a, b, "nokey"]), Reply::Int(4));
    assert_eq!(
        ex(&["zinterstore", d, "2", a, b, "aggregate", "min"]),
        Reply::Int(2)
    );
    assert_eq!(
        ex(&["zrangestore", a, b, "(10", "+inf", "byscore"]),
        Reply::Int(2)
    );
    // An empty result removes the destination.
    assert_eq!(ex(&["zdiffstore", b, "1", "nokey"]), Reply::Int(0));
    assert_eq!(ex(&["exists", b]), Reply::Int(0));
    assert_eq!(
        ex(&["zmpop", "3", "nokey", b, d, "max", "count", "1"]),
        Reply::Array(vec![
            bulk(d),
            Reply::Array(vec![Reply::Array(vec![bulk("z"), Reply::Double(3.0)])]),
        ])
    );
    assert_eq!(ex(&["zmpop", "1", "nokey", "min"]), Reply::NilArray);
    // SCAN's TYPE option finds sorted sets.
    let Reply::Array(scan) = ex(&["scan", "0", "type", "zset", "count", "1000"]) else {
        panic!()
    };
    let Reply::Array(mut found) = scan[1].clone() else {
        panic!()
    };
    found.sort_by_key(|r| format!("{r:?}"));
    let mut want: Vec<Reply> = [a, c, d].iter().map(|k| bulk(k)).collect();
    want.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(found, want);
    ex(&["set", "s", "v"]);
    assert_eq!(ex(&["zunion", "2", a, "s"]), err(WRONGTYPE));
    assert_eq!(ex(&["zunionstore", c, "2", a, "s"]), err(WRONGTYPE));
    assert_eq!(
        ex(&["zunion", "0", a]),
        err("ERR at least 1 input key is needed for 'zunion' command")
    );
    assert_eq!(ex(&["zunion", "3", a]), err("ERR syntax error"));
    assert_eq!(
        ex(&["zunionstore", c, "1", a, "withscores"]),
        err("ERR syntax error")
    );
    assert_eq!(
        ex(&["zinter", "1", a, "weights", "x"]),
        err("ERR weight value is not a float")
    );
    assert_eq!(
        ex(&["zintercard", "1", a, "limit", "-1"]),
        err("ERR LIMIT can't be negative")
    );
    assert_eq!(
        ex(&["zmpop", "0", a, "min"]),
        err("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        ex(&["zmpop", "1", a, "min", "count", "0"]),
        err("ERR count should be greater than 0")
    );
    assert_eq!(ex(&["zmpop", "1", a, "bogus"]), err("ERR syntax error"));
    let state = |ex: &dyn Fn(&[&str]) -> Reply| {
        [a, b, c, d].map(|k| ex(&["zrange", k, "0", "-1", "withscores"]))
    };
    let before = state(&ex);
    assert_eq!(
        before,
        [
            pairs(&[("z", 20.0), ("w", 30.0)]),
            pairs(&[]),
            pairs(&[("x", 1.0), ("y", 12.0), ("z", 23.0), ("w", 30.0)]),
            pairs(&[("y", 2.0)]),
        ]
    );
    drop(store);
    let store = weft_kv::Store::open(dir.path()).unwrap();
    let ex2 = |args: &[&str]| {
        let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        store.exec(&v)
    };
    assert_eq!(state(&ex2), before);
}

/// The embedded store's typed methods.
#[test]
fn the_store_has_typed_sorted_set_methods() {
    let (_dir, store, _) = spread_store();
    assert_eq!(
        store
            .zadd(b"z", &[(1.5, &b"a"[..]), (-2.0, &b"b"[..])])
            .unwrap(),
        2
    );
    assert_eq!(store.zadd(b"z", &[(3.0, &b"a"[..])]).unwrap(), 0);
    assert_eq!(store.zscore(b"z", b"a").unwrap(), Some(3.0));
    assert_eq!(store.zscore(b"z", b"x").unwrap(), None);
    assert_eq!(store.zcard(b"z").unwrap(), 2);
    assert_eq!(
        store.zrange(b"z", 0, -1).unwrap(),
        vec![(b"b".to_vec(), -2.0), (b"a".to_vec(), 3.0)]
    );
    assert_eq!(store.zrem(b"z", &[&b"b"[..], &b"x"[..]]).unwrap(), 1);
    assert_eq!(store.zcard(b"z").unwrap(), 1);
    store.set(b"s", b"v").unwrap();
    assert!(store.zadd(b"s", &[(1.0, &b"a"[..])]).is_err());
}
