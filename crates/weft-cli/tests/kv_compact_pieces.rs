//! `weft kv serve`'s compaction of big keys, which it writes a piece a step
//! (`crates/weft-kv/src/compact.rs`), while another client changes, removes, renames
//! and makes them again: after the compaction and a restart, every big key comes back
//! as it was (members and scores, elements in order, fields and values, times to
//! live). The exactness of image and tail, whatever comes between two pieces, is the
//! shard test `compact::tests::big_keys_changed_between_pieces_replay_exactly`; this
//! one runs the server's own compaction with real clients.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{run, KvServer, Rng, CEILING};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::time::{Duration, Instant};
use weft_kv::client::Client;
use weft_kv::resp::Reply;

fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Reply::Simple(s) => s.to_string(),
        Reply::Int(n) => n.to_string(),
        r => panic!("not a string: {r:?}"),
    }
}

fn texts(r: Reply) -> Vec<String> {
    match r {
        Reply::Array(items) => items.iter().map(text).collect(),
        r => panic!("not an array: {r:?}"),
    }
}

/// Every key: (key, type, its contents as text, has a time to live); a hash's and a
/// set's contents sorted.
fn dump(c: &mut Client) -> Vec<(String, String, Vec<String>, bool)> {
    let mut out = Vec::new();
    for k in texts(run(c, &["keys", "*"])) {
        let t = text(&run(c, &["type", &k]));
        let v = match t.as_str() {
            "string" => vec![text(&run(c, &["get", &k]))],
            "zset" => texts(run(c, &["zrange", &k, "0", "-1", "withscores"])),
            "list" => texts(run(c, &["lrange", &k, "0", "-1"])),
            "hash" => {
                let mut v = texts(run(c, &["hgetall", &k]))
                    .chunks(2)
                    .map(|p| p.join("="))
                    .collect::<Vec<_>>();
                v.sort();
                v
            }
            "set" => {
                let mut v = texts(run(c, &["smembers", &k]));
                v.sort();
                v
            }
            t => panic!("type {t}"),
        };
        let ttl = matches!(run(c, &["pttl", &k]), Reply::Int(t) if t >= 0);
        out.push((k, t, v, ttl));
    }
    out.sort();
    out
}

fn start(dir: &Path, socket: &Path) -> KvServer {
    KvServer::weft(dir, socket, &["--workers", "1"]).unwrap()
}

/// Whether a compaction runs.
fn compacting(c: &mut Client) -> bool {
    !text(&run(c, &["info", "persistence"])).contains("aof_rewrite_in_progress:0")
}

/// Makes big key `name` (its type by its first letter) of `n` elements, pipelined.
fn create(c: &mut Client, name: &str, n: usize, salt: u64) {
    run(c, &["del", name]);
    for base in (0..n).step_by(1000) {
        let mut line: Vec<String> = match &name[..1] {
            "z" => vec!["zadd".into(), name.into()],
            "l" => vec!["rpush".into(), name.into()],
            "h" => vec!["hset".into(), name.into()],
            _ => vec!["sadd".into(), name.into()],
        };
        for i in base..(base + 1000).min(n) {
            match &name[..1] {
                "z" => line.extend([format!("{}", (i as u64 * 7 + salt) % 5000), format!("m{i}")]),
                "h" => line.extend([format!("f{i}"), format!("v{i}.{salt}")]),
                _ => line.push(format!("e{i}.{salt}")),
            }
        }
        let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        c.send(&args);
    }
    c.flush().unwrap();
    for _ in (0..n).step_by(1000) {
        c.read_reply().unwrap();
    }
}

#[test]
fn big_keys_changed_during_a_compaction_come_back_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let mut server = start(&dir, &socket);
    let mut c = server.client().unwrap();
    let names = ["zbig", "lbig", "hbig", "sbig"];
    for (i, name) in names.iter().enumerate() {
        create(&mut c, name, 20_000 + 3_000 * i, 1);
    }
    let mut rng = Rng(0x5eed_cafe_f00d_0001);
    for round in 0..3 {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut w = server.client().unwrap();
                let mut r = Rng(0x1234_5678 + round);
                let mut sent = 0;
                while !stop.load(Relaxed) || sent < 200 {
                    let name = names[r.below(4) as usize];
                    let i = r.below(30_000);
                    let line: Vec<String> = match (r.below(12), &name[..1]) {
                        (0, _) => vec!["pexpire".into(), name.into(), "100000000".into()],
                        (1, _) => vec!["persist".into(), name.into()],
                        (2, _) if r.below(4) == 0 => vec![
                            "rename".into(),
                            name.into(),
                            names[r.below(4) as usize].into(),
                        ],
                        (3, _) if r.below(8) == 0 => {
                            create(&mut w, name, 5_000 + r.below(10_000) as usize, sent);
                            sent += 1;
                            continue;
                        }
                        (_, "z") => vec![
                            "zadd".into(),
                            name.into(),
                            format!("{}", r.below(9000)),
                            format!("m{i}"),
                        ],
                        (_, "l") if i.is_multiple_of(3) => vec!["lpop".into(), name.into()],
                        (_, "l") => vec!["rpush".into(), name.into(), format!("x{i}")],
                        (_, "h") if i.is_multiple_of(3) => {
                            vec!["hdel".into(), name.into(), format!("f{i}")]
                        }
                        (_, "h") => {
                            vec!["hset".into(), name.into(), format!("f{i}"), format!("w{i}")]
                        }
                        (_, _) if i.is_multiple_of(3) => {
                            vec!["srem".into(), name.into(), format!("e{i}.1")]
                        }
                        (_, _) => vec!["sadd".into(), name.into(), format!("y{i}")],
                    };
                    let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
                    // (a RENAME whose source is gone, or a write of another type,
                    // answers an error: nothing changes)
                    let _ = w.command(&args).unwrap();
                    sent += 1;
                }
                sent
            });
            run(&mut c, &["bgrewriteaof"]);
            let deadline = Instant::now() + CEILING;
            while compacting(&mut c) {
                assert!(Instant::now() < deadline, "the compaction did not end");
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Relaxed);
            writer.join().unwrap();
        });
        // A key gone for good is made again for the next round.
        for (i, name) in names.iter().enumerate() {
            if run(&mut c, &["exists", name]) == Reply::Int(0) {
                create(&mut c, name, 20_000 + i, rng.below(100));
            }
        }
        let before = dump(&mut c);
        assert!(
            server.stderr().contains("log compacted"),
            "{}",
            server.stderr()
        );
        drop(c);
        server.signal(libc::SIGTERM);
        assert!(server.wait_exit().success());
        server = start(&dir, &socket);
        c = server.client().unwrap();
        assert_eq!(
            dump(&mut c),
            before,
            "round {round}: after a compaction and a restart"
        );
    }
}
