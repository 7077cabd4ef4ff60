//! Commands over several shards are atomic and isolated in `weft kv serve` (the built
//! binary, two workers, so the keys fall on shards of both and connections are served
//! by both): while writers MSET sixteen keys to one value each time, and now and then
//! DEL them all and MSETNX them, readers on every worker MGET the sixteen keys and must
//! never see two different values, or some keys set and others not.
//!
//! `WEFT_KV_ATOMIC_ROUNDS=N` runs N MSETs per writer (default 300).

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{KvServer, CEILING};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use weft_kv::resp::Reply;

const KEYS: usize = 16;
const WRITERS: usize = 2;
const READERS: usize = 4;

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("atomic:{i}")).collect()
}

#[test]
fn readers_never_see_part_of_an_mset() {
    let rounds: usize = std::env::var("WEFT_KV_ATOMIC_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let server = KvServer::weft(&dir, &socket, &["--workers", "2", "--fsync", "no"]).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut c = server.client().unwrap();
            std::thread::spawn(move || {
                let keys = keys();
                for n in 0..rounds {
                    let value = format!("w{w}:{n}");
                    let mut args: Vec<&[u8]> = vec![b"MSET"];
                    for k in &keys {
                        args.push(k.as_bytes());
                        args.push(value.as_bytes());
                    }
                    assert_eq!(c.command(&args).unwrap(), Reply::OK);
                    if n % 25 == 24 {
                        let mut del: Vec<&[u8]> = vec![b"DEL"];
                        del.extend(keys.iter().map(|k| k.as_bytes()));
                        c.command(&del).unwrap();
                        // Set them again only if none is there: the other writer may
                        // have been first (0), and either way no reader sees a part.
                        args[0] = b"MSETNX";
                        let r = c.command(&args).unwrap();
                        assert!(matches!(r, Reply::Int(0 | 1)), "{r:?}");
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let mut c = server.client().unwrap();
            let (done, reads) = (done.clone(), reads.clone());
            std::thread::spawn(move || {
                let keys = keys();
                let mut args: Vec<&[u8]> = vec![b"MGET"];
                args.extend(keys.iter().map(|k| k.as_bytes()));
                let deadline = Instant::now() + CEILING;
                while !done.load(SeqCst) {
                    assert!(Instant::now() < deadline, "the writers did not finish");
                    let Reply::Array(values) = c.command(&args).unwrap() else {
                        panic!("MGET answered something else than an array")
                    };
                    assert!(
                        values.windows(2).all(|w| w[0] == w[1]),
                        "a reader saw part of an MSET or a DEL: {values:?}"
                    );
                    reads.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    join_all(writers, readers, &done, &reads);
}

/// Waits for the writers, then tells the readers to stop and waits for them; they must
/// have read.
fn join_all(
    writers: Vec<std::thread::JoinHandle<()>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    done: &AtomicBool,
    reads: &AtomicUsize,
) {
    for w in writers {
        w.join().expect("a writer failed");
    }
    done.store(true, SeqCst);
    for r in readers {
        r.join().expect("a reader saw part of a transaction");
    }
    assert!(reads.load(Relaxed) > 0, "the readers read");
}

/// Sends `cmds` in one pipeline and reads their replies.
fn pipeline(c: &mut weft_kv::Client, cmds: &[Vec<Vec<u8>>]) -> Vec<Reply> {
    for args in cmds {
        let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        c.send(&argv);
    }
    c.flush().unwrap();
    cmds.iter().map(|_| c.read_reply().unwrap()).collect()
}

fn words(line: &[&str]) -> Vec<Vec<u8>> {
    line.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// MULTI, `body`, EXEC in one pipeline: EXEC's reply (the others must be OK / QUEUED).
fn transaction(c: &mut weft_kv::Client, body: &[Vec<Vec<u8>>]) -> Reply {
    let mut cmds = vec![words(&["MULTI"])];
    cmds.extend(body.iter().cloned());
    cmds.push(words(&["EXEC"]));
    let mut replies = pipeline(c, &cmds);
    let exec = replies.pop().unwrap();
    assert_eq!(replies[0], Reply::OK);
    for r in &replies[1..] {
        assert_eq!(*r, Reply::Simple("QUEUED".into()));
    }
    exec
}

/// The stress rounds: `WEFT_KV_STRESS=1` runs `long`, else `short`.
fn rounds(short: usize, long: usize) -> usize {
    match std::env::var("WEFT_KV_STRESS").as_deref() {
        Ok("1") => long,
        _ => short,
    }
}

/// While writers run EXECs that set sixteen keys of both workers' shards to one value
/// (SET by SET, and now and then DEL then MSET in one EXEC), readers on every worker
/// read them with MGET and with EXECs of sixteen GETs: never two values, never some
/// missing.
#[test]
fn readers_never_see_part_of_an_exec() {
    let rounds = rounds(150, 3000);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let server = KvServer::weft(&dir, &socket, &["--workers", "2", "--fsync", "no"]).unwrap();
    let mut c = server.client().unwrap();
    let mut first: Vec<&[u8]> = vec![b"MSET"];
    let ks = keys();
    for k in &ks {
        first.extend([k.as_bytes(), b"start"]);
    }
    assert_eq!(c.command(&first).unwrap(), Reply::OK);
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut c = server.client().unwrap();
            std::thread::spawn(move || {
                let keys = keys();
                for n in 0..rounds {
                    let value = format!("w{w}:{n}");
                    let body: Vec<Vec<Vec<u8>>> = if n % 10 == 9 {
                        let mut del = words(&["DEL"]);
                        let mut mset = words(&["MSET"]);
                        for k in &keys {
                            del.push(k.as_bytes().to_vec());
                            mset.extend([k.as_bytes().to_vec(), value.as_bytes().to_vec()]);
                        }
                        vec![del, mset]
                    } else {
                        keys.iter().map(|k| words(&["SET", k, &value])).collect()
                    };
                    let Reply::Array(replies) = transaction(&mut c, &body) else {
                        panic!("EXEC answered something else than an array")
                    };
                    assert_eq!(replies.len(), body.len());
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let mut c = server.client().unwrap();
            let (done, reads) = (done.clone(), reads.clone());
            std::thread::spawn(move || {
                let keys = keys();
                let mut mget = words(&["MGET"]);
                mget.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
                let gets: Vec<Vec<Vec<u8>>> = keys.iter().map(|k| words(&["GET", k])).collect();
                let deadline = Instant::now() + CEILING;
                let mut n = 0;
                while !done.load(SeqCst) {
                    assert!(Instant::now() < deadline, "the writers did not finish");
                    n += 1;
                    let values = if (n + r) % 2 == 0 {
                        let Reply::Array(v) = pipeline(&mut c, &[mget.clone()]).remove(0) else {
                            panic!("MGET answered something else than an array")
                        };
                        v
                    } else {
                        let Reply::Array(v) = transaction(&mut c, &gets) else {
                            panic!("EXEC answered something else than an array")
                        };
                        v
                    };
                    assert!(
                        values.windows(2).all(|w| w[0] == w[1]) && values[0] != Reply::Nil,
                        "a reader saw part of an EXEC: {values:?}"
                    );
                    reads.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    join_all(writers, readers, &done, &reads);
}

/// Optimistic locking: clients add 1 to two counters (on both workers' shards) with
/// WATCH, GET, MULTI, SET, SET, EXEC, retrying when EXEC answers nil; the counters end
/// at exactly the number of increments, equal.
#[test]
fn watch_counters_add_up() {
    const CLIENTS: usize = 4;
    let each = rounds(40, 1000);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let server = KvServer::weft(&dir, &socket, &["--workers", "2", "--fsync", "no"]).unwrap();
    let retries = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let mut c = server.client().unwrap();
            let retries = retries.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + CEILING;
                for _ in 0..each {
                    loop {
                        assert!(Instant::now() < deadline, "the increments did not finish");
                        assert_eq!(
                            c.command(&[b"WATCH", b"ctr:a", b"ctr:c"]).unwrap(),
                            Reply::OK
                        );
                        let n = match c.command(&[b"GET", b"ctr:a"]).unwrap() {
                            Reply::Nil => 0,
                            Reply::Bulk(b) => String::from_utf8(b).unwrap().parse().unwrap(),
                            r => panic!("{r:?}"),
                        };
                        let next = (n + 1u64).to_string();
                        let body = [
                            words(&["SET", "ctr:a", &next]),
                            words(&["SET", "ctr:c", &next]),
                        ];
                        match transaction(&mut c, &body) {
                            Reply::Array(r) => {
                                assert_eq!(r, vec![Reply::OK, Reply::OK]);
                                break;
                            }
                            Reply::NilArray | Reply::Nil => {
                                retries.fetch_add(1, Relaxed);
                            }
                            r => panic!("EXEC answered {r:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
    let mut c = server.client().unwrap();
    let total = (CLIENTS * each).to_string().into_bytes();
    assert_eq!(
        c.command(&[b"MGET", b"ctr:a", b"ctr:c"]).unwrap(),
        Reply::Array(vec![Reply::Bulk(total.clone()), Reply::Bulk(total)])
    );
    common::note(&format!(
        "{} increments, {} retries",
        CLIENTS * each,
        retries.load(Relaxed)
    ));
}
