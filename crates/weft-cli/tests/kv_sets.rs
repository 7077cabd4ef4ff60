//! Sets in `weft kv serve` (the built binary, two workers, so a command's keys fall on
//! shards of both and connections are served by both):
//!
//! - SMOVE, SINTERSTORE and SUNIONSTORE over several shards are atomic and isolated:
//!   while writers move members between eight sets and store unions and
//!   intersections of them, readers on every worker never see a member in two sets,
//!   or one missing from all of them;
//! - every set write fires Redis 7.0's keyspace events, in Redis's order, and one that
//!   changes nothing fires none (the same script against redis-server, when installed,
//!   fires the same events);
//! - CONFIG GET and SET of set-max-intset-entries, set-max-listpack-entries and
//!   set-max-listpack-value, which later writes convert by; over the memory limit,
//!   SADD and the STORE forms are refused and change nothing.
//!
//! `WEFT_KV_STRESS=1` runs 20,000 moves per writer instead of 500.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{run, KvServer, Rng, CEILING};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use weft_kv::client::Client;
use weft_kv::resp::Reply;

const SETS: usize = 8;
const MEMBERS: usize = 100;

fn set_name(i: usize) -> String {
    format!("sets:{i}")
}

fn members(r: Reply) -> Vec<String> {
    let (Reply::Array(v) | Reply::Set(v)) = r else {
        panic!("not members: {r:?}")
    };
    v.into_iter()
        .map(|m| match m {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            m => panic!("not a member: {m:?}"),
        })
        .collect()
}

#[test]
fn readers_never_see_part_of_a_move_or_a_store() {
    let moves = if std::env::var_os("WEFT_KV_STRESS").is_some() {
        20_000
    } else {
        500
    };
    let dir = tempfile::tempdir().unwrap();
    let s = KvServer::weft(
        &dir.path().join("data"),
        &dir.path().join("kv.sock"),
        &["--workers", "2"],
    )
    .expect("weft kv serve starts");
    let mut c = s.client().unwrap();
    // Every member in exactly one of the sets.
    for m in 0..MEMBERS {
        let r = run(&mut c, &["SADD", &set_name(m % SETS), &format!("m{m}")]);
        assert_eq!(r, Reply::Int(1));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (mut c, stop, checks) = (s.client().unwrap(), stop.clone(), checks.clone());
            std::thread::spawn(move || {
                let all: Vec<String> = (0..SETS).map(set_name).collect();
                while !stop.load(Relaxed) {
                    // The union of the eight has every member once: SUNION of all,
                    // and the sizes, read as one transaction each.
                    let mut line = vec!["SUNION"];
                    line.extend(all.iter().map(String::as_str));
                    let union = members(run(&mut c, &line));
                    assert_eq!(union.len(), MEMBERS, "a member missing: {union:?}");
                    let a = set_name(checks.load(Relaxed) % SETS);
                    let b = set_name((checks.load(Relaxed) + 3) % SETS);
                    let both = run(&mut c, &["SINTERCARD", "2", &a, &b]);
                    assert_eq!(both, Reply::Int(0), "a member in {a} and {b}");
                    checks.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let mut c = s.client().unwrap();
            std::thread::spawn(move || {
                let mut rng = Rng(Rng::from_time() ^ w as u64);
                for _ in 0..moves {
                    let m = format!("m{}", rng.below(MEMBERS as u64));
                    let (a, b) = (rng.below(SETS as u64), rng.below(SETS as u64));
                    let r = run(
                        &mut c,
                        &["SMOVE", &set_name(a as usize), &set_name(b as usize), &m],
                    );
                    assert!(matches!(r, Reply::Int(0 | 1)), "{r:?}");
                    if rng.below(10) == 0 {
                        // A store of all of them into a key of its own: every member.
                        let mut line = vec!["SUNIONSTORE".to_string(), format!("sets:all{w}")];
                        line.extend((0..SETS).map(set_name));
                        let line: Vec<&str> = line.iter().map(String::as_str).collect();
                        assert_eq!(run(&mut c, &line), Reply::Int(MEMBERS as i64));
                        let mut line = vec!["SINTERSTORE".to_string(), format!("sets:none{w}")];
                        line.extend([set_name(a as usize), set_name((a as usize + 1) % SETS)]);
                        let line: Vec<&str> = line.iter().map(String::as_str).collect();
                        assert_eq!(run(&mut c, &line), Reply::Int(0));
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + CEILING;
    for w in writers {
        w.join().expect("a writer saw a wrong reply");
    }
    // Readers have checked during the writes and go on until they have checked some.
    while checks.load(Relaxed) < 20 {
        assert!(Instant::now() < deadline, "the readers did not get to read");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, Relaxed);
    for r in readers {
        r.join().expect("a reader saw part of a move or a store");
    }
    // After a restart from the log, the same sets.
    let before: Vec<BTreeSet<String>> = (0..SETS)
        .map(|i| {
            members(run(&mut c, &["SMEMBERS", &set_name(i)]))
                .into_iter()
                .collect()
        })
        .collect();
    drop(c);
    drop(s);
    let s = KvServer::weft(
        &dir.path().join("data"),
        &dir.path().join("kv.sock"),
        &["--workers", "2"],
    )
    .expect("weft kv serve starts again");
    let mut c = s.client().unwrap();
    let after: Vec<BTreeSet<String>> = (0..SETS)
        .map(|i| {
            members(run(&mut c, &["SMEMBERS", &set_name(i)]))
                .into_iter()
                .collect()
        })
        .collect();
    assert_eq!(before, after);
}

/// The events a script of set commands fires, as (channel, message) pairs read from a
/// PSUBSCRIBE to every keyevent channel, up to a marker published at the end.
fn events(s: &KvServer) -> Vec<(String, String)> {
    let mut c = s.client().unwrap();
    let mut sub = s.client().unwrap();
    run(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Egs"]);
    let r = run(&mut sub, &["PSUBSCRIBE", "__keyevent@0__:*"]);
    assert!(matches!(r, Reply::Array(_)), "{r:?}");
    for line in [
        &["SADD", "s", "a", "b"][..],
        &["SADD", "s", "a"],
        &["SREM", "s", "zz"],
        &["SREM", "s", "a"],
        &["SPOP", "s"],
        &["SADD", "x", "1", "2"],
        &["SADD", "y", "2", "3"],
        &["SMOVE", "x", "y", "1"],
        &["SMOVE", "x", "y", "2"],
        &["SMOVE", "y", "x", "nope"],
        &["SINTERSTORE", "d", "y", "y"],
        &["SINTERSTORE", "d", "y", "nokey"],
        &["SDIFFSTORE", "e", "y", "y"],
        &["SUNIONSTORE", "u", "y"],
        &["SPOP", "u", "10"],
        &["SPOP", "y", "0"],
    ] {
        run(&mut c, line);
    }
    run(&mut c, &["PUBLISH", "__keyevent@0__:marker", "end"]);
    let mut out = Vec::new();
    loop {
        let Reply::Array(m) = sub.read_reply().unwrap() else {
            panic!("not a message")
        };
        let text = |r: &Reply| match r {
            Reply::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
            r => panic!("{r:?}"),
        };
        let (channel, payload) = (text(&m[2]), text(&m[3]));
        if channel.ends_with(":marker") {
            return out;
        }
        let event = channel.rsplit(':').next().unwrap().to_string();
        out.push((event, payload));
    }
}

#[test]
fn set_writes_fire_redis_keyspace_events() {
    let dir = tempfile::tempdir().unwrap();
    let s = KvServer::weft(
        &dir.path().join("data"),
        &dir.path().join("kv.sock"),
        &["--workers", "2"],
    )
    .expect("weft kv serve starts");
    let want: Vec<(String, String)> = [
        ("sadd", "s"),
        ("srem", "s"),
        ("spop", "s"),
        ("del", "s"),
        ("sadd", "x"),
        ("sadd", "y"),
        ("srem", "x"),
        ("sadd", "y"),
        ("srem", "x"),
        ("del", "x"),
        ("sinterstore", "d"),
        ("del", "d"),
        ("sunionstore", "u"),
        ("spop", "u"),
        ("del", "u"),
    ]
    .iter()
    .map(|(e, k)| (e.to_string(), k.to_string()))
    .collect();
    assert_eq!(events(&s), want);
    let rdir = tempfile::tempdir().unwrap();
    if let Some(redis) = KvServer::redis(rdir.path(), &rdir.path().join("redis.sock"), false) {
        assert_eq!(events(&redis), want, "redis-server fires the same");
    }
}

/// CONFIG GET and SET of the set thresholds: later writes convert by them (a set of
/// words past set-max-listpack-entries, integers past set-max-intset-entries, a member
/// past set-max-listpack-value), and a set never converts back.
#[test]
fn config_sets_the_set_thresholds() {
    let dir = tempfile::tempdir().unwrap();
    let s = KvServer::weft(
        &dir.path().join("data"),
        &dir.path().join("kv.sock"),
        &["--workers", "1"],
    )
    .expect("weft kv serve starts");
    let mut c = s.client().unwrap();
    let get = |c: &mut Client, name: &str| match run(c, &["CONFIG", "GET", name]) {
        Reply::Array(v) => v[1].clone(),
        r => panic!("{r:?}"),
    };
    let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
    assert_eq!(get(&mut c, "set-max-intset-entries"), bulk("512"));
    assert_eq!(get(&mut c, "set-max-listpack-entries"), bulk("128"));
    assert_eq!(get(&mut c, "set-max-listpack-value"), bulk("64"));
    let ok = Reply::Simple("OK".into());
    for (name, value) in [
        ("set-max-intset-entries", "3"),
        ("set-max-listpack-entries", "2"),
        ("set-max-listpack-value", "4"),
    ] {
        assert_eq!(run(&mut c, &["CONFIG", "SET", name, value]), ok);
        assert_eq!(get(&mut c, name), bulk(value));
    }
    let enc = |c: &mut Client, k: &str| run(c, &["OBJECT", "ENCODING", k]);
    run(&mut c, &["SADD", "ints", "1", "2", "3"]);
    assert_eq!(enc(&mut c, "ints"), bulk("intset"));
    run(&mut c, &["SADD", "ints", "4"]);
    assert_eq!(enc(&mut c, "ints"), bulk("hashtable"));
    run(&mut c, &["SADD", "words", "a", "b"]);
    assert_eq!(enc(&mut c, "words"), bulk("listpack"));
    run(&mut c, &["SADD", "words", "c"]);
    assert_eq!(enc(&mut c, "words"), bulk("hashtable"));
    run(&mut c, &["SREM", "words", "a", "b"]);
    assert_eq!(enc(&mut c, "words"), bulk("hashtable"), "never back");
    run(&mut c, &["SADD", "long", "abcde"]);
    assert_eq!(enc(&mut c, "long"), bulk("hashtable"));
    let refused = run(&mut c, &["CONFIG", "SET", "set-max-intset-entries", "x"]);
    assert!(refused.is_error(), "{refused:?}");
    // Over the memory limit: SADD and the STORE forms are refused and change nothing;
    // SREM, SPOP and SMOVE (which adds nothing in all) still run.
    assert_eq!(run(&mut c, &["CONFIG", "SET", "maxmemory", "1"]), ok);
    let oom = |r: &Reply| matches!(r, Reply::Error(e) if e.starts_with("OOM"));
    assert!(oom(&run(&mut c, &["SADD", "ints", "99"])));
    assert!(oom(&run(&mut c, &["SUNIONSTORE", "dest", "ints", "words"])));
    assert_eq!(run(&mut c, &["EXISTS", "dest"]), Reply::Int(0));
    assert_eq!(run(&mut c, &["SISMEMBER", "ints", "99"]), Reply::Int(0));
    assert_eq!(run(&mut c, &["SMOVE", "ints", "words", "1"]), Reply::Int(1));
    assert_eq!(run(&mut c, &["SREM", "ints", "2"]), Reply::Int(1));
    assert_eq!(run(&mut c, &["SCARD", "ints"]), Reply::Int(2));
    assert_eq!(run(&mut c, &["CONFIG", "SET", "maxmemory", "0"]), ok);
    assert_eq!(
        run(&mut c, &["SUNIONSTORE", "dest", "ints", "words"]),
        Reply::Int(4)
    );
}
