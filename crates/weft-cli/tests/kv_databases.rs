//! `weft kv serve`'s databases and typed values, run as a user runs them (the built
//! binary, two workers so that keys fall on shards of both):
//!
//! - SELECT, MOVE, SWAPDB, FLUSHDB, FLUSHALL, DBSIZE, KEYS, SCAN (with TYPE), INFO
//!   keyspace (a line per database) and CLIENT LIST's `db=`;
//! - every kind of change record (APPEND, SETRANGE, HSET and HDEL on an existing
//!   hash, HINCRBY, HINCRBYFLOAT, EXPIRE, PERSIST, MOVE, SWAPDB, FLUSHDB) comes back
//!   after `kill -9` and a restart, and again after a compaction (BGREWRITEAOF) and a
//!   restart: every database's keys, types, values and times to live;
//! - a write costs the log what it changes: a one-byte APPEND to a 4 MB value and an
//!   HSET of one field into a hash of 10,000 grow the logs by a few dozen bytes.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{bulk, run, KvServer, CEILING};
use std::path::Path;
use std::time::{Duration, Instant};
use weft_kv::client::Client;
use weft_kv::resp::Reply;

fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) => s.to_string(),
        r => panic!("not a string: {r:?}"),
    }
}

/// Every database's keys: (db, key, type, value, has a time to live); a hash's value is
/// its sorted `field=value` pairs.
fn dump(c: &mut Client) -> Vec<(usize, String, String, String, bool)> {
    let mut out = Vec::new();
    for db in 0..16 {
        run(c, &["select", &db.to_string()]);
        let Reply::Array(keys) = run(c, &["keys", "*"]) else {
            panic!()
        };
        for k in keys.iter().map(text) {
            let t = text(&run(c, &["type", &k]));
            let v = match t.as_str() {
                "string" => text(&run(c, &["get", &k])),
                "hash" => {
                    let Reply::Array(items) = run(c, &["hgetall", &k]) else {
                        panic!()
                    };
                    let mut pairs: Vec<String> = items
                        .chunks(2)
                        .map(|p| format!("{}={}", text(&p[0]), text(&p[1])))
                        .collect();
                    pairs.sort();
                    pairs.join(";")
                }
                t => panic!("type {t}"),
            };
            let ttl = matches!(run(c, &["pttl", &k]), Reply::Int(t) if t >= 0);
            out.push((db, k, t, v, ttl));
        }
    }
    run(c, &["select", "0"]);
    out.sort();
    out
}

fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

fn start(dir: &Path, socket: &Path) -> KvServer {
    KvServer::weft(dir, socket, &["--fsync", "always", "--workers", "2"]).unwrap()
}

/// Waits until no compaction runs.
fn compacted(c: &mut Client) {
    let deadline = Instant::now() + CEILING;
    loop {
        let info = text(&run(c, &["info", "persistence"]));
        if info.contains("aof_rewrite_in_progress:0") {
            return;
        }
        assert!(Instant::now() < deadline, "the compaction did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn databases_are_kept_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    assert_eq!(
        run(&mut c, &["select", "16"]),
        Reply::err("ERR DB index is out of range")
    );
    assert_eq!(
        run(&mut c, &["select", "x"]),
        Reply::err("ERR value is not an integer or out of range")
    );
    assert_eq!(run(&mut c, &["select", "3"]), Reply::OK);
    for i in 0..20 {
        run(&mut c, &["set", &format!("s{i}"), "v"]);
    }
    run(&mut c, &["hset", "h", "f", "v"]);
    assert_eq!(run(&mut c, &["dbsize"]), Reply::Int(21));
    let list = text(&run(&mut c, &["client", "list"]));
    assert!(list.contains(" db=3 "), "{list}");
    // Another connection starts in database 0, which is empty.
    let mut other = server.client().unwrap();
    assert_eq!(run(&mut other, &["dbsize"]), Reply::Int(0));
    assert_eq!(run(&mut other, &["get", "s1"]), Reply::Nil);
    assert_eq!(run(&mut other, &["keys", "*"]), Reply::Array(vec![]));
    // SCAN in database 3, by type.
    let mut hashes = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let Reply::Array(v) = run(&mut c, &["scan", &cursor, "type", "hash", "count", "3"]) else {
            panic!()
        };
        cursor = text(&v[0]);
        if let Reply::Array(keys) = &v[1] {
            hashes.extend(keys.iter().map(text));
        }
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(hashes, ["h"]);
    // MOVE.
    assert_eq!(run(&mut c, &["move", "s1", "0"]), Reply::Int(1));
    assert_eq!(run(&mut other, &["get", "s1"]), bulk("v"));
    assert_eq!(run(&mut c, &["exists", "s1"]), Reply::Int(0));
    assert_eq!(run(&mut c, &["move", "nokey", "0"]), Reply::Int(0));
    run(&mut other, &["set", "s2", "zero's"]);
    assert_eq!(
        run(&mut c, &["move", "s2", "0"]),
        Reply::Int(0),
        "the target has it"
    );
    assert_eq!(run(&mut c, &["get", "s2"]), bulk("v"));
    assert_eq!(
        run(&mut c, &["move", "s2", "3"]),
        Reply::err("ERR source and destination objects are the same")
    );
    assert_eq!(run(&mut c, &["move", "h", "7"]), Reply::Int(1));
    // INFO keyspace: a line per database with keys.
    let info = text(&run(&mut c, &["info", "keyspace"]));
    assert!(info.contains("db0:keys=2,expires=0"), "{info}");
    assert!(info.contains("db3:keys=19,expires=0"), "{info}");
    assert!(info.contains("db7:keys=1,expires=0"), "{info}");
    // SWAPDB: every connection sees the other database's keys.
    assert_eq!(run(&mut c, &["swapdb", "0", "3"]), Reply::OK);
    assert_eq!(run(&mut other, &["dbsize"]), Reply::Int(19));
    assert_eq!(run(&mut c, &["dbsize"]), Reply::Int(2));
    assert_eq!(run(&mut c, &["get", "s2"]), bulk("zero's"));
    assert_eq!(
        run(&mut c, &["swapdb", "0", "x"]),
        Reply::err("ERR invalid second DB index")
    );
    assert_eq!(
        run(&mut c, &["swapdb", "0", "16"]),
        Reply::err("ERR DB index is out of range")
    );
    // FLUSHDB empties one database, FLUSHALL all of them.
    assert_eq!(run(&mut other, &["flushdb"]), Reply::OK);
    assert_eq!(run(&mut other, &["dbsize"]), Reply::Int(0));
    assert_eq!(run(&mut c, &["dbsize"]), Reply::Int(2));
    run(&mut c, &["select", "7"]);
    assert_eq!(run(&mut c, &["hget", "h", "f"]), bulk("v"));
    run(&mut c, &["flushall"]);
    assert_eq!(dump(&mut c), vec![]);
    // RESET selects database 0.
    run(&mut c, &["select", "9"]);
    run(&mut c, &["reset"]);
    run(&mut c, &["set", "after-reset", "1"]);
    assert_eq!(run(&mut other, &["get", "after-reset"]), bulk("1"));
}

#[test]
fn every_change_record_comes_back_after_a_crash_and_a_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let mut server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    let script: &[&[&str]] = &[
        &["set", "s", "abc"],
        &["append", "s", "def"],
        &["setrange", "s", "1", "XY"],
        &["setrange", "s", "10", "z"],
        &["setrange", "new", "2", "pad"],
        &["append", "fresh", "first"],
        &["set", "n", "10"],
        &["incr", "n"],
        &["incrbyfloat", "n", "0.5"],
        &["hset", "h", "a", "1", "b", "2"],
        &["hset", "h", "c", "3", "a", "10"],
        &["hdel", "h", "b"],
        &["hincrby", "h", "count", "5"],
        &["hincrby", "h", "count", "-2"],
        &["hincrbyfloat", "h", "f", "1.5"],
        &["hsetnx", "h", "c", "not this"],
        &["hsetnx", "h", "d", "4"],
        &["hset", "gone", "x", "1"],
        &["hdel", "gone", "x"],
        &["expire", "h", "1000"],
        &["set", "p", "v", "ex", "1000"],
        &["persist", "p"],
        &["set", "e", "v", "px", "100"],
        &["select", "2"],
        &["hset", "h2", "f", "v"],
        &["set", "m", "moving"],
        &["move", "m", "4"],
        &["set", "in2", "x"],
        &["swapdb", "2", "5"],
        &["select", "6"],
        &["set", "flushed", "x"],
        &["flushdb"],
        &["set", "kept6", "y"],
        &["select", "0"],
    ];
    for line in script {
        let r = run(&mut c, line);
        assert!(!matches!(r, Reply::Error(_)), "{line:?}: {r:?}");
    }
    // A big hash (a table) changed field by field.
    for i in 0..300 {
        run(&mut c, &["hset", "big", &format!("f{i}"), &format!("v{i}")]);
    }
    run(&mut c, &["hdel", "big", "f7", "f8"]);
    std::thread::sleep(Duration::from_millis(150)); // "e" expires
    let before = dump(&mut c);
    assert!(before.iter().any(|k| k.1 == "big"), "{before:?}");
    assert!(!before
        .iter()
        .any(|k| k.1 == "e" || k.1 == "gone" || k.1 == "flushed"));
    assert!(before.iter().any(|k| k.0 == 5 && k.1 == "h2"), "{before:?}");
    assert!(before.iter().any(|k| k.0 == 4 && k.1 == "m"), "{before:?}");
    let s = before.iter().find(|k| k.1 == "s").unwrap();
    assert_eq!(s.3, "aXYdef\0\0\0\0z");
    let h = before.iter().find(|k| k.1 == "h").unwrap();
    assert_eq!((h.3.as_str(), h.4), ("a=10;c=3;count=3;d=4;f=1.5", true));
    assert!(
        !before.iter().find(|k| k.1 == "p").unwrap().4,
        "PERSIST is kept"
    );

    server.kill9();
    drop(server);
    let server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    assert_eq!(dump(&mut c), before, "after kill -9 and a restart");

    assert_eq!(
        run(&mut c, &["bgrewriteaof"]),
        Reply::Simple("Background append only file rewriting started".into())
    );
    compacted(&mut c);
    c.send(&[b"shutdown"]);
    c.flush().unwrap();
    let mut server = server;
    assert!(server.wait_exit().success());
    drop(server);
    let server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    assert_eq!(dump(&mut c), before, "after a compaction and a restart");
}

#[test]
fn a_write_logs_what_it_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    let big = "x".repeat(4 << 20);
    run(&mut c, &["set", "big", &big]);
    for i in 0..10_000 {
        c.send(&[b"hset", b"hash", format!("field{i}").as_bytes(), b"value"]);
    }
    c.flush().unwrap();
    for _ in 0..10_000 {
        c.read_reply().unwrap();
    }
    let grew = |c: &mut Client, args: &[&str]| {
        let before = log_bytes(&dir);
        assert!(!matches!(run(c, args), Reply::Error(_)));
        log_bytes(&dir) - before
    };
    let n = grew(&mut c, &["append", "big", "!"]);
    assert!(n < 64, "a 1-byte APPEND to 4 MB logged {n} bytes");
    let n = grew(&mut c, &["setrange", "big", "1000000", "ab"]);
    assert!(n < 64, "a 2-byte SETRANGE logged {n} bytes");
    let n = grew(&mut c, &["hset", "hash", "one", "more"]);
    assert!(n < 64, "an HSET into a hash of 10,000 logged {n} bytes");
    let n = grew(&mut c, &["hincrby", "hash", "counter", "1"]);
    assert!(n < 64, "an HINCRBY logged {n} bytes");
    let n = grew(&mut c, &["hdel", "hash", "field5"]);
    assert!(n < 64, "an HDEL logged {n} bytes");
    assert_eq!(run(&mut c, &["strlen", "big"]), Reply::Int((4 << 20) + 1));
}
