//! A string's OBJECT ENCODING depends on how it was made, not only on its bytes, and
//! weft-kv keeps that as Redis does: INCRBYFLOAT makes `embstr` (`raw` past 44 bytes)
//! even of an integer text such as "1000", APPEND and SETRANGE make `raw`; RENAME,
//! COPY and MOVE keep the encoding (over one shard or two), RESTORE encodes by the
//! bytes alone. The same script runs on redis-server and on `weft kv serve` (two
//! workers, so some pairs of keys are on two shards), and weft-kv's answers must be
//! redis-server's: as written, after `kill -9` and a restart (the log replayed), and
//! after a compaction and a restart. (redis-server is not restarted: its own restart
//! loads every string anew from its snapshot, `int` by the bytes, where weft-kv
//! recovers each key exactly.)

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{run, KvServer};
use weft_kv::client::Client;
use weft_kv::resp::Reply;

/// Eight of each: with two shards, some pairs `x{i}`, `y{i}` are surely split.
const N: usize = 8;

/// The key names the script makes, in databases 0 and 3.
fn names() -> Vec<String> {
    let mut out = Vec::new();
    for p in [
        "f", "g", "long", "n", "a", "s", "cf", "rg", "cn", "ra", "cl", "resf", "resn", "resa",
    ] {
        out.extend((0..N).map(|i| format!("{p}{i}")));
    }
    out
}

fn restore_dump(c: &mut Client, from: &str, to: &str) {
    let Reply::Bulk(p) = run(c, &["dump", from]) else {
        panic!("a payload of {from}")
    };
    let args: Vec<&[u8]> = vec![b"restore", to.as_bytes(), b"0", &p];
    assert_eq!(c.command(&args).unwrap(), Reply::OK, "restore {to}");
}

/// The script: strings made every way, then renamed, copied, moved and restored.
fn script(c: &mut Client) {
    for i in 0..N {
        let k = |p: &str| format!("{p}{i}");
        run(c, &["incrbyfloat", &k("f"), "1e3"]);
        run(c, &["incrbyfloat", &k("g"), "1.5"]);
        run(c, &["incrbyfloat", &k("long"), "1e50"]);
        run(c, &["set", &k("n"), "1000"]);
        run(c, &["append", &k("n"), "7"]);
        run(c, &["set", &k("a"), "abc"]);
        run(c, &["setrange", &k("a"), "1", "x"]);
        run(c, &["set", &k("s"), "1000"]);
        run(c, &["incrbyfloat", &k("s"), "0"]);
    }
    for i in 0..N {
        let k = |p: &str| format!("{p}{i}");
        assert_eq!(run(c, &["copy", &k("f"), &k("cf")]), Reply::Int(1));
        assert_eq!(
            run(c, &["copy", &k("f"), &k("f"), "db", "3"]),
            Reply::Int(1)
        );
        assert_eq!(run(c, &["rename", &k("g"), &k("rg")]), Reply::OK);
        assert_eq!(run(c, &["copy", &k("n"), &k("cn")]), Reply::Int(1));
        assert_eq!(run(c, &["rename", &k("a"), &k("ra")]), Reply::OK);
        assert_eq!(run(c, &["copy", &k("long"), &k("cl")]), Reply::Int(1));
        if i % 2 == 0 {
            assert_eq!(run(c, &["move", &k("long"), "3"]), Reply::Int(1));
        }
        restore_dump(c, &k("f"), &k("resf"));
        restore_dump(c, &k("n"), &k("resn"));
        restore_dump(c, &k("ra"), &k("resa"));
    }
}

/// OBJECT ENCODING (and GET) of every name of the script, in databases 0 and 3.
fn encodings(c: &mut Client) -> Vec<String> {
    let mut out = Vec::new();
    for db in ["0", "3"] {
        run(c, &["select", db]);
        for k in names() {
            let enc = text(run(c, &["object", "encoding", &k]));
            let v = text(run(c, &["get", &k]));
            out.push(format!("{db} {k} {enc} {v}"));
        }
    }
    run(c, &["select", "0"]);
    out
}

/// A bulk reply as text, nil as `nil`.
fn text(r: Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        Reply::Nil => "nil".into(),
        r => panic!("{r:?}"),
    }
}

fn start(dir: &std::path::Path, socket: &std::path::Path) -> KvServer {
    KvServer::weft(dir, socket, &["--fsync", "always", "--workers", "2"]).unwrap()
}

#[test]
fn string_encodings_match_redis_server_after_replay_and_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("redis")).unwrap();
    let Some(redis) = KvServer::redis(
        &tmp.path().join("redis"),
        &tmp.path().join("redis.sock"),
        false,
    ) else {
        common::skip("redis-server is not installed (apt-get install redis-server)");
        return;
    };
    let mut r = redis.client().unwrap();
    script(&mut r);
    let want = encodings(&mut r);
    // The script makes every encoding a string can have.
    for enc in ["int", "embstr", "raw"] {
        assert!(
            want.iter().any(|l| l.contains(&format!(" {enc} "))),
            "no {enc} in {want:?}"
        );
    }

    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("kv.sock"));
    let mut server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    script(&mut c);
    assert_eq!(encodings(&mut c), want, "as written");

    drop(c);
    server.kill9();
    drop(server);
    let mut server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    assert_eq!(encodings(&mut c), want, "after kill -9 and a restart");

    assert!(!run(&mut c, &["bgrewriteaof"]).is_error());
    kv::eventually("the compaction ends", || {
        matches!(run(&mut c, &["info", "persistence"]),
            Reply::Bulk(b) if String::from_utf8_lossy(&b).contains("aof_rewrite_in_progress:0"))
    });
    assert_eq!(encodings(&mut c), want, "after a compaction");
    drop(c);
    server.kill9();
    drop(server);
    let server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    assert_eq!(encodings(&mut c), want, "after a compaction and a restart");
}
