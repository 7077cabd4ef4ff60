//! The list commands run through the command table on one keyspace: replies (Redis
//! 7.0's, edge cases and errors included), the records they log (a new list's whole
//! state, an existing one's change), the state a replay of those records rebuilds,
//! expiry, memory, encodings.

mod common;
use common::*;
use weft_kv::commands::lists;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Runs a multi-key list command (LMOVE, RPOPLPUSH, LMPOP) with every key on this
/// keyspace, as its one shard would.
fn run_local(t: &mut T, line: &[&str]) -> Reply {
    let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
    if let Err(e) = check_arity(lookup(args[0]).unwrap(), &args) {
        return e;
    }
    let f = match line[0] {
        "lmpop" => lists::lmpop,
        _ => lists::lmove,
    };
    let mut buf = Vec::new();
    let mut ctx = Ctx {
        now_ms: t.now,
        log: &mut buf,
        db: 0,
        over_memory: false,
        room: t.room,
        out: None,
    };
    let r = f(&mut t.ks, &args, &mut ctx);
    t.log.extend_from_slice(&buf);
    t.last = buf;
    r
}

#[test]
fn push_pop_and_their_records() {
    let mut t = T::new();
    assert_eq!(t.run(&["lpush", "l", "a", "b", "c"]), Reply::Int(3));
    // A new list: its whole state, head first.
    assert_eq!(
        t.logged(),
        vec![Record::List {
            key: b"l".to_vec(),
            expire_at_ms: None,
            items: items(&["c", "b", "a"]),
        }]
    );
    assert_eq!(t.run(&["rpush", "l", "x", "y"]), Reply::Int(5));
    assert_eq!(
        t.logged(),
        vec![Record::RPush {
            key: b"l".to_vec(),
            items: items(&["x", "y"]),
        }]
    );
    assert_eq!(t.run(&["lpush", "l", "0"]), Reply::Int(6));
    assert_eq!(
        t.logged(),
        vec![Record::LPush {
            key: b"l".to_vec(),
            items: items(&["0"]),
        }]
    );
    assert_eq!(
        t.run(&["lrange", "l", "0", "-1"]),
        bulks(&["0", "c", "b", "a", "x", "y"])
    );
    assert_eq!(t.run(&["llen", "l"]), Reply::Int(6));
    assert_eq!(t.run(&["lpop", "l"]), bulk("0"));
    assert_eq!(
        t.logged(),
        vec![Record::LPop {
            key: b"l".to_vec(),
            count: 1
        }]
    );
    assert_eq!(t.run(&["rpop", "l", "2"]), bulks(&["y", "x"]));
    assert_eq!(
        t.logged(),
        vec![Record::RPop {
            key: b"l".to_vec(),
            count: 2
        }]
    );
    assert_eq!(t.run(&["lpop", "l", "0"]), Reply::Array(vec![]));
    assert!(t.logged().is_empty(), "a count of 0 changes nothing");
    // Popping past the end takes what there is, and the emptied list goes.
    assert_eq!(t.run(&["lpop", "l", "10"]), bulks(&["c", "b", "a"]));
    assert_eq!(t.logged(), vec![Record::Del { key: b"l".to_vec() }]);
    assert_eq!(t.run(&["exists", "l"]), Reply::Int(0));
    // A missing key: nil, or a nil array with a count.
    assert_eq!(t.run(&["lpop", "l"]), Reply::Nil);
    assert_eq!(t.run(&["rpop", "l", "3"]), Reply::NilArray);
    assert_eq!(t.run(&["lpop", "l", "0"]), Reply::NilArray);
    assert!(t.logged().is_empty());
    let positive = err("ERR value is out of range, must be positive");
    assert_eq!(t.run(&["lpop", "l", "-1"]), positive);
    assert_eq!(t.run(&["lpop", "l", "x"]), positive);
    assert_eq!(
        t.run(&["lpop", "l", "1", "2"]),
        err("ERR wrong number of arguments for 'lpop' command")
    );
    // PUSHX only onto an existing list.
    assert_eq!(t.run(&["lpushx", "l", "a"]), Reply::Int(0));
    assert_eq!(t.run(&["rpushx", "l", "a"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    t.run(&["rpush", "l", "m"]);
    assert_eq!(t.run(&["lpushx", "l", "h1", "h2"]), Reply::Int(3));
    assert_eq!(t.run(&["rpushx", "l", "t"]), Reply::Int(4));
    assert_eq!(
        t.run(&["lrange", "l", "0", "-1"]),
        bulks(&["h2", "h1", "m", "t"])
    );
    t.check_replay();
}

#[test]
fn ranges_and_indexes() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a", "b", "c", "d", "e"]);
    for (start, stop, want) in [
        ("0", "-1", &["a", "b", "c", "d", "e"][..]),
        ("1", "2", &["b", "c"]),
        ("-2", "-1", &["d", "e"]),
        ("-100", "1", &["a", "b"]),
        ("3", "100", &["d", "e"]),
        ("3", "1", &[]),
        ("5", "10", &[]),
        ("-1", "-2", &[]),
        ("0", "-6", &[]),
    ] {
        assert_eq!(
            t.run(&["lrange", "l", start, stop]),
            bulks(want),
            "{start} {stop}"
        );
    }
    assert_eq!(t.run(&["lrange", "nokey", "0", "-1"]), Reply::Array(vec![]));
    let not_int = err("ERR value is not an integer or out of range");
    assert_eq!(t.run(&["lrange", "l", "x", "1"]), not_int);
    assert_eq!(t.run(&["lindex", "l", "0"]), bulk("a"));
    assert_eq!(t.run(&["lindex", "l", "-1"]), bulk("e"));
    assert_eq!(t.run(&["lindex", "l", "5"]), Reply::Nil);
    assert_eq!(t.run(&["lindex", "l", "-6"]), Reply::Nil);
    assert_eq!(t.run(&["lindex", "l", "x"]), not_int);
    assert_eq!(
        t.run(&["lindex", "nokey", "x"]),
        Reply::Nil,
        "the key first"
    );
    assert_eq!(t.run(&["llen", "nokey"]), Reply::Int(0));
}

#[test]
fn lset_linsert_lrem_ltrim_log_their_effect() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a", "b", "c", "b", "d"]);
    assert_eq!(t.run(&["lset", "l", "-1", "D"]), Reply::OK);
    assert_eq!(
        t.logged(),
        vec![Record::LSet {
            key: b"l".to_vec(),
            index: 4,
            value: b"D".to_vec()
        }]
    );
    assert_eq!(
        t.run(&["lset", "l", "5", "x"]),
        err("ERR index out of range")
    );
    assert_eq!(t.run(&["lset", "nokey", "0", "x"]), err("ERR no such key"));
    assert_eq!(
        t.run(&["lset", "l", "x", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(t.run(&["linsert", "l", "after", "b", "B"]), Reply::Int(6));
    assert_eq!(
        t.logged(),
        vec![Record::LInsert {
            key: b"l".to_vec(),
            index: 2,
            value: b"B".to_vec()
        }]
    );
    assert_eq!(t.run(&["linsert", "l", "BEFORE", "a", "0"]), Reply::Int(7));
    assert_eq!(
        t.run(&["linsert", "l", "before", "zz", "0"]),
        Reply::Int(-1)
    );
    assert_eq!(
        t.run(&["linsert", "nokey", "before", "a", "0"]),
        Reply::Int(0)
    );
    assert_eq!(
        t.run(&["linsert", "l", "middle", "a", "0"]),
        err("ERR syntax error")
    );
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["lrange", "l", "0", "-1"]),
        bulks(&["0", "a", "b", "B", "c", "b", "D"])
    );
    // LREM from the tail: the last match goes; logged as its position.
    assert_eq!(t.run(&["lrem", "l", "-1", "b"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::LRem {
            key: b"l".to_vec(),
            positions: vec![5u64.to_le_bytes().to_vec()],
        }]
    );
    t.run(&["rpush", "l", "b", "x", "b"]);
    assert_eq!(t.run(&["lrem", "l", "2", "b"]), Reply::Int(2));
    assert_eq!(
        t.logged(),
        vec![Record::LRem {
            key: b"l".to_vec(),
            positions: vec![6u64.to_le_bytes().to_vec(), 2u64.to_le_bytes().to_vec()],
        }]
    );
    assert_eq!(
        t.run(&["lrange", "l", "0", "-1"]),
        bulks(&["0", "a", "B", "c", "D", "x", "b"])
    );
    assert_eq!(t.run(&["lrem", "l", "0", "nothing"]), Reply::Int(0));
    assert_eq!(t.run(&["lrem", "nokey", "0", "a"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["lrem", "l", "x", "a"]),
        err("ERR value is not an integer or out of range")
    );
    // LTRIM: what left each end.
    assert_eq!(t.run(&["ltrim", "l", "1", "-2"]), Reply::OK);
    assert_eq!(
        t.logged(),
        vec![
            Record::LPop {
                key: b"l".to_vec(),
                count: 1
            },
            Record::RPop {
                key: b"l".to_vec(),
                count: 1
            }
        ]
    );
    assert_eq!(
        t.run(&["lrange", "l", "0", "-1"]),
        bulks(&["a", "B", "c", "D", "x"])
    );
    assert_eq!(t.run(&["ltrim", "l", "0", "-1"]), Reply::OK);
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["ltrim", "nokey", "0", "1"]), Reply::OK);
    t.check_replay();
    assert_eq!(t.run(&["ltrim", "l", "3", "1"]), Reply::OK);
    assert_eq!(t.logged(), vec![Record::Del { key: b"l".to_vec() }]);
    assert_eq!(t.run(&["exists", "l"]), Reply::Int(0));
    // LREM of every element removes the key.
    t.run(&["rpush", "l", "z", "z"]);
    assert_eq!(t.run(&["lrem", "l", "0", "z"]), Reply::Int(2));
    assert_eq!(t.logged(), vec![Record::Del { key: b"l".to_vec() }]);
    t.check_replay();
}

#[test]
fn lpos_options() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a", "b", "c", "1", "2", "3", "c", "c"]);
    assert_eq!(t.run(&["lpos", "l", "c"]), Reply::Int(2));
    assert_eq!(t.run(&["lpos", "l", "c", "rank", "2"]), Reply::Int(6));
    assert_eq!(t.run(&["lpos", "l", "c", "rank", "-1"]), Reply::Int(7));
    assert_eq!(t.run(&["lpos", "l", "c", "rank", "4"]), Reply::Nil);
    assert_eq!(t.run(&["lpos", "l", "c", "count", "0"]), ints(&[2, 6, 7]));
    assert_eq!(
        t.run(&["lpos", "l", "c", "count", "2", "rank", "-1"]),
        ints(&[7, 6])
    );
    assert_eq!(
        t.run(&["lpos", "l", "c", "count", "0", "maxlen", "3"]),
        ints(&[2])
    );
    assert_eq!(
        t.run(&["lpos", "l", "c", "count", "0", "maxlen", "3", "rank", "-1"]),
        ints(&[7, 6])
    );
    assert_eq!(t.run(&["lpos", "l", "x", "count", "2"]), ints(&[]));
    assert_eq!(t.run(&["lpos", "nokey", "x", "count", "2"]), ints(&[]));
    assert_eq!(t.run(&["lpos", "nokey", "x"]), Reply::Nil);
    assert_eq!(
        t.run(&["lpos", "l", "c", "rank", "0"]),
        err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
    );
    assert_eq!(
        t.run(&["lpos", "l", "c", "count", "-1"]),
        err("ERR COUNT can't be negative")
    );
    assert_eq!(
        t.run(&["lpos", "l", "c", "maxlen", "-1"]),
        err("ERR MAXLEN can't be negative")
    );
    assert_eq!(t.run(&["lpos", "l", "c", "rank"]), err("ERR syntax error"));
    assert_eq!(
        t.run(&["lpos", "l", "c", "foo", "1"]),
        err("ERR syntax error")
    );
}

#[test]
fn wrong_types_change_nothing() {
    let mut t = T::new();
    t.run(&["set", "s", "v"]);
    t.run(&["rpush", "l", "a"]);
    for line in [
        &["lpush", "s", "a"][..],
        &["rpushx", "s", "a"],
        &["lpop", "s"],
        &["rpop", "s", "2"],
        &["llen", "s"],
        &["lrange", "s", "0", "1"],
        &["lindex", "s", "0"],
        &["lset", "s", "0", "a"],
        &["linsert", "s", "before", "a", "b"],
        &["lrem", "s", "0", "a"],
        &["ltrim", "s", "0", "1"],
        &["lpos", "s", "a"],
    ] {
        assert_eq!(t.run(line), err(WRONGTYPE), "{line:?}");
        assert!(t.logged().is_empty());
    }
    assert_eq!(t.run(&["get", "l"]), err(WRONGTYPE));
    assert_eq!(t.run(&["hset", "l", "f", "v"]), err(WRONGTYPE));
    assert_eq!(
        run_local(&mut t, &["lmove", "s", "l", "left", "left"]),
        err(WRONGTYPE)
    );
    assert_eq!(
        run_local(&mut t, &["lmove", "l", "s", "left", "left"]),
        err(WRONGTYPE)
    );
    assert_eq!(
        run_local(&mut t, &["lmpop", "2", "s", "l", "left"]),
        err(WRONGTYPE)
    );
    assert_eq!(t.run(&["lrange", "l", "0", "-1"]), bulks(&["a"]));
    assert_eq!(t.run(&["type", "l"]), Reply::Simple("list".into()));
    assert_eq!(t.run(&["object", "encoding", "l"]), bulk("listpack"));
}

#[test]
fn lmove_rpoplpush_and_lmpop() {
    let mut t = T::new();
    t.run(&["rpush", "src", "a", "b", "c"]);
    assert_eq!(run_local(&mut t, &["rpoplpush", "src", "dst"]), bulk("c"));
    // The new destination's whole state, then the source's pop.
    assert_eq!(
        t.logged(),
        vec![
            Record::List {
                key: b"dst".to_vec(),
                expire_at_ms: None,
                items: items(&["c"]),
            },
            Record::RPop {
                key: b"src".to_vec(),
                count: 1
            }
        ]
    );
    assert_eq!(
        run_local(&mut t, &["lmove", "src", "dst", "left", "right"]),
        bulk("a")
    );
    assert_eq!(t.run(&["lrange", "dst", "0", "-1"]), bulks(&["c", "a"]));
    assert_eq!(
        run_local(&mut t, &["lmove", "nokey", "dst", "left", "right"]),
        Reply::Nil
    );
    assert_eq!(
        run_local(&mut t, &["lmove", "src", "dst", "up", "right"]),
        err("ERR syntax error")
    );
    // A rotation of one list.
    assert_eq!(
        run_local(&mut t, &["lmove", "dst", "dst", "left", "right"]),
        bulk("c")
    );
    assert_eq!(t.run(&["lrange", "dst", "0", "-1"]), bulks(&["a", "c"]));
    // The last element moved takes the source with it.
    assert_eq!(
        run_local(&mut t, &["lmove", "src", "dst", "right", "left"]),
        bulk("b")
    );
    assert_eq!(t.run(&["exists", "src"]), Reply::Int(0));
    // A list of one element moved onto itself stays.
    t.run(&["rpush", "one", "x"]);
    assert_eq!(run_local(&mut t, &["rpoplpush", "one", "one"]), bulk("x"));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["lrange", "one", "0", "-1"]), bulks(&["x"]));
    t.check_replay();
    // LMPOP: the first key that holds a list.
    assert_eq!(
        run_local(
            &mut t,
            &["lmpop", "3", "nokey", "dst", "one", "right", "count", "5"]
        ),
        Reply::Array(vec![bulk("dst"), bulks(&["c", "a", "b"])])
    );
    assert_eq!(
        run_local(&mut t, &["lmpop", "2", "nokey", "one", "left"]),
        Reply::Array(vec![bulk("one"), bulks(&["x"])])
    );
    assert_eq!(
        run_local(&mut t, &["lmpop", "1", "nokey", "left"]),
        Reply::NilArray
    );
    for (line, want) in [
        (
            &["lmpop", "0", "l", "left"][..],
            "ERR numkeys should be greater than 0",
        ),
        (
            &["lmpop", "x", "l", "left"],
            "ERR numkeys should be greater than 0",
        ),
        (&["lmpop", "1", "l", "middle"], "ERR syntax error"),
        (&["lmpop", "2", "l", "left"], "ERR syntax error"),
        (
            &["lmpop", "1", "l", "left", "count", "0"],
            "ERR count should be greater than 0",
        ),
        (
            &["lmpop", "1", "l", "left", "count", "1", "count", "2"],
            "ERR syntax error",
        ),
        (&["lmpop", "1", "l", "left", "count"], "ERR syntax error"),
    ] {
        assert_eq!(run_local(&mut t, line), err(want), "{line:?}");
    }
    t.check_replay();
}

/// A list passes from listpack to quicklist at the threshold (8 KiB by default), never
/// back; a big list's pushes and pops log only what they change; replay and the
/// compaction's records rebuild it; its memory is counted and given back.
#[test]
fn big_lists_encodings_memory_and_replay() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a"]);
    assert_eq!(t.run(&["object", "encoding", "l"]), bulk("listpack"));
    let long = "x".repeat(9000);
    t.run(&["rpush", "l", &long]);
    assert_eq!(t.run(&["object", "encoding", "l"]), bulk("quicklist"));
    t.run(&["rpush", "l", "small"]);
    assert_eq!(t.run(&["lrem", "l", "0", &long]), Reply::Int(1));
    assert_eq!(t.run(&["lrange", "l", "0", "-1"]), bulks(&["a", "small"]));
    assert_eq!(
        t.run(&["object", "encoding", "l"]),
        bulk("quicklist"),
        "never back"
    );
    // Many elements: pushes log only themselves.
    let base = t.ks.used_memory();
    let elems: Vec<String> = (0..20_000).map(|i| format!("element-{i}")).collect();
    let mut line = vec!["rpush", "big"];
    line.extend(elems.iter().map(String::as_str));
    assert_eq!(t.run(&line), Reply::Int(20_000));
    assert_eq!(t.run(&["object", "encoding", "big"]), bulk("quicklist"));
    assert!(t.ks.used_memory() > base + 20_000 * 10);
    assert_eq!(t.run(&["lpush", "big", "head"]), Reply::Int(20_001));
    assert_eq!(
        t.logged(),
        vec![Record::LPush {
            key: b"big".to_vec(),
            items: items(&["head"]),
        }]
    );
    assert_eq!(t.run(&["lindex", "big", "10001"]), bulk("element-10000"));
    assert_eq!(t.run(&["lset", "big", "10001", &long]), Reply::OK);
    assert_eq!(
        t.run(&["linsert", "big", "after", "element-5", "inserted"]),
        Reply::Int(20_002)
    );
    assert_eq!(t.run(&["lpos", "big", "inserted"]), Reply::Int(7));
    assert_eq!(t.run(&["lrem", "big", "0", "element-7"]), Reply::Int(1));
    assert_eq!(t.run(&["ltrim", "big", "2", "-3"]), Reply::OK);
    assert_eq!(t.run(&["llen", "big"]), Reply::Int(19_997));
    assert_eq!(
        t.run(&["lrange", "big", "0", "2"]),
        bulks(&["element-1", "element-2", "element-3"])
    );
    t.check_replay();
    t.run(&["del", "big", "l"]);
    assert_eq!(t.ks.used_memory(), 0, "every byte given back");
}

/// Expiry is kept by list commands, and an expired list is gone for them.
#[test]
fn expiry_of_lists() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a", "b"]);
    t.run(&["pexpire", "l", "100"]);
    t.run(&["rpush", "l", "c"]);
    t.run(&["lpop", "l"]);
    assert_eq!(t.run(&["pttl", "l"]), Reply::Int(100));
    t.check_replay();
    t.now += 100;
    assert_eq!(t.run(&["llen", "l"]), Reply::Int(0));
    assert_eq!(t.run(&["rpushx", "l", "x"]), Reply::Int(0));
    assert_eq!(t.run(&["lpush", "l", "new"]), Reply::Int(1));
    assert_eq!(
        t.logged(),
        vec![Record::List {
            key: b"l".to_vec(),
            expire_at_ms: None,
            items: items(&["new"]),
        }]
    );
    assert_eq!(t.run(&["pttl", "l"]), Reply::Int(-1));
    t.check_replay();
}

/// Under a memory limit a push that does not fit is refused with OOM and changes
/// nothing; removals still run.
#[test]
fn pushes_check_memory_first() {
    let mut t = T::new();
    t.run(&["rpush", "l", "a"]);
    t.room = 300;
    let big = "y".repeat(400);
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(t.run(&["rpush", "l", &big]), oom);
    assert_eq!(t.run(&["lpush", "new", &big]), oom);
    assert_eq!(t.run(&["lset", "l", "0", &big]), oom);
    assert_eq!(t.run(&["linsert", "l", "before", "a", &big]), oom);
    assert_eq!(
        run_local(&mut t, &["rpoplpush", "l", "other"]),
        bulk("a"),
        "small enough"
    );
    assert_eq!(t.run(&["lrange", "other", "0", "-1"]), bulks(&["a"]));
    assert_eq!(t.run(&["lpop", "other"]), bulk("a"));
    t.check_replay();
}

/// The embedded store's list methods, over four shards, and the lists after a reopen
/// (replayed from the logs).
#[test]
fn the_store_pushes_pops_and_keeps_lists() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    weft_kv::log::DataDir::open(&dir, 4).unwrap();
    let s = weft_kv::store::Store::open(&dir).unwrap();
    assert_eq!(s.rpush(b"q", &[b"a", b"b", b"c"]).unwrap(), 3);
    assert_eq!(s.lpush(b"q", &[b"z"]).unwrap(), 4);
    assert_eq!(s.llen(b"q").unwrap(), 4);
    assert_eq!(s.lrange(b"q", 0, -1).unwrap(), items(&["z", "a", "b", "c"]));
    assert_eq!(s.lpop(b"q", 1).unwrap(), items(&["z"]));
    assert_eq!(s.rpop(b"q", 2).unwrap(), items(&["c", "b"]));
    assert_eq!(s.lpop(b"missing", 3).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(s.llen(b"missing").unwrap(), 0);
    let many: Vec<Vec<u8>> = (0..5000).map(|i| format!("n{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    assert_eq!(s.rpush(b"big", &refs).unwrap(), 5000);
    // Moves between lists, whichever shards they are on.
    for i in 0..8 {
        let dst = format!("dst{i}");
        let r = s.exec(&[b"lmove", b"big", dst.as_bytes(), b"left", b"right"]);
        assert_eq!(r, Reply::Bulk(format!("n{i}").into_bytes()));
    }
    s.set(b"str", b"v").unwrap();
    assert!(s.lpush(b"str", &[b"x"]).is_err(), "WRONGTYPE");
    drop(s);
    let s = weft_kv::store::Store::open(&dir).unwrap();
    assert_eq!(s.lrange(b"q", 0, -1).unwrap(), items(&["a"]));
    assert_eq!(s.llen(b"big").unwrap(), 4992);
    assert_eq!(s.lrange(b"big", 0, 1).unwrap(), items(&["n8", "n9"]));
    assert_eq!(s.lrange(b"dst7", 0, -1).unwrap(), items(&["n7"]));
}
