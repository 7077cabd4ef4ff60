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
    for w in writers {
        w.join().expect("a writer failed");
    }
    done.store(true, SeqCst);
    for r in readers {
        r.join().expect("a reader saw part of a command");
    }
    assert!(reads.load(Relaxed) > 0, "the readers read");
}
