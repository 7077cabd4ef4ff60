//! Memory of small hashes, side by side with redis-server: N hashes of ten small
//! fields (`f1`..`f10`, values of up to six digits, or the same with a letter before
//! them so they are not integers) loaded into `weft kv serve` and into redis-server,
//! and the growth of each process's resident memory compared: weft-kv's must be no
//! larger (docs/kv-types.md, "Memory target").
//!
//! It takes a while (and the built binary's speed does not matter: the allocations
//! are the same), so it runs on demand: `WEFT_KV_MEMORY_HASHES=1000000` (the target's
//! million); without it the test says it skipped. Skipped too without redis-server.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::KvServer;
use std::time::Duration;
use weft_kv::client::Client;

/// The process's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Loads `n` hashes (`numbers`: values that are integers, else strings) and answers
/// the server's resident memory growth.
fn load(server: &KvServer, n: usize, numbers: bool) -> u64 {
    let mut c: Client = server.client().unwrap();
    let before = rss(server.child.id());
    let batch = 1000;
    let mut i = 0;
    while i < n {
        let end = (i + batch).min(n);
        for k in i..end {
            let key = format!("hash:{k:07}");
            let mut owned = Vec::new();
            for f in 1..=10u64 {
                let v = (k as u64 * 7919 + f * 104_729) % 1_000_000;
                owned.push(format!("f{f}"));
                owned.push(if numbers {
                    format!("{v}")
                } else {
                    format!("v{v}")
                });
            }
            let mut args: Vec<&[u8]> = vec![b"HSET", key.as_bytes()];
            args.extend(owned.iter().map(|s| s.as_bytes()));
            c.send(&args);
        }
        c.flush().unwrap();
        for _ in i..end {
            c.read_reply().unwrap();
        }
        i = end;
    }
    std::thread::sleep(Duration::from_millis(500));
    rss(server.child.id()).saturating_sub(before)
}

#[test]
fn a_million_small_hashes_take_no_more_memory_than_in_redis() {
    let Some(n) = std::env::var("WEFT_KV_MEMORY_HASHES")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
    else {
        common::skip("set WEFT_KV_MEMORY_HASHES=1000000 to compare memory with redis-server");
        return;
    };
    for numbers in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let Some(redis) = KvServer::redis(tmp.path(), &tmp.path().join("r"), false) else {
            common::skip("redis-server is not installed");
            return;
        };
        let theirs = load(&redis, n, numbers);
        drop(redis);
        let dir = tmp.path().join("data");
        let weft = KvServer::weft(&dir, &tmp.path().join("w"), &["--fsync", "no"]).unwrap();
        let ours = load(&weft, n, numbers);
        common::note(&format!(
            "{n} hashes of 10 fields ({}): weft-kv grew by {} MB, redis-server by {} MB",
            if numbers {
                "integer values"
            } else {
                "string values"
            },
            ours >> 20,
            theirs >> 20
        ));
        assert!(
            ours <= theirs,
            "weft-kv took {ours} bytes for {n} hashes, redis-server {theirs}"
        );
    }
}
