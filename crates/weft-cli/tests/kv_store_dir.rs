//! The embedded store and the server share one data directory format: what `weft kv
//! serve` wrote, `weft_kv::store::Store::open` reads, and the other way round. Each
//! direction goes through real processes: the server is the `weft` binary, stopped with
//! SHUTDOWN (which writes and fsyncs its logs) before the store opens the directory
//! (the directory's lock keeps the two from using it at once: checked too).
//!
//! The server runs 2 workers, so the directory has 2 shards: the store must find every
//! key in the shard the server put it in, and the server every key the store wrote.

use std::path::Path;
use std::time::Duration;

use weft_kv::client::Client;
use weft_kv::resp::Reply;
use weft_kv::store::{SetOutcome, Store};

#[path = "common/kv.rs"]
mod kv;
use kv::{ok, run, KvServer};

/// A `weft kv serve` on `dir`, Unix socket only, killed if still running when dropped.
struct Server(KvServer);

impl Server {
    fn start(dir: &Path, socket: &Path) -> Server {
        Server::start_with(dir, socket, &["--workers", "2"])
    }

    fn start_with(dir: &Path, socket: &Path, extra: &[&str]) -> Server {
        Server(KvServer::weft(dir, socket, extra).expect("weft kv serve starts"))
    }

    fn client(&self) -> std::io::Result<Client> {
        self.0.client()
    }

    /// SHUTDOWN, then waits for the process to exit with status 0.
    fn shutdown(mut self) {
        let mut c = self.client().unwrap();
        // The server exits without replying (as Redis does): the error is expected.
        let _ = c.command(&[b"SHUTDOWN"]);
        let st = self.0.wait_exit();
        assert!(st.success(), "weft kv serve exited with {st}");
    }
}

#[test]
fn a_directory_written_by_the_server_opens_in_the_store_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let socket = tmp.path().join("kv.sock");

    // 1. The server writes: 200 keys, every third overwritten, every tenth deleted,
    // one with a TTL, one counter.
    let srv = Server::start(&dir, &socket);
    let mut c = srv.client().unwrap();
    for i in 0..200 {
        assert_eq!(
            run(&mut c, &["SET", &format!("k{i}"), &format!("v{i}")]),
            ok()
        );
    }
    for i in (0..200).step_by(3) {
        assert_eq!(
            run(&mut c, &["SET", &format!("k{i}"), &format!("w{i}")]),
            ok()
        );
    }
    for i in (0..200).step_by(10) {
        assert_eq!(run(&mut c, &["DEL", &format!("k{i}")]), Reply::Int(1));
    }
    assert_eq!(run(&mut c, &["SET", "ttl", "x", "EX", "1000"]), ok());
    assert_eq!(run(&mut c, &["INCRBY", "counter", "41"]), Reply::Int(41));
    assert_eq!(run(&mut c, &["DBSIZE"]), Reply::Int(180 + 2));

    // While the server runs, the store cannot open the directory, and says why.
    let err = match Store::open(&dir) {
        Ok(_) => panic!("Store::open succeeded on a directory a server is using"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("in use"),
        "the refusal should say the directory is in use: {err}"
    );
    drop(c);
    srv.shutdown();

    // 2. The store reads exactly what the server acknowledged.
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.len(), 182);
    for i in 0..200 {
        let want = match i {
            _ if i % 10 == 0 => None,
            _ if i % 3 == 0 => Some(format!("w{i}").into_bytes()),
            _ => Some(format!("v{i}").into_bytes()),
        };
        assert_eq!(store.get(format!("k{i}").as_bytes()).unwrap(), want, "k{i}");
    }
    match store.exec(&[b"TTL", b"ttl"]) {
        Reply::Int(t) => assert!((990..=1000).contains(&t), "TTL of ttl: {t}"),
        r => panic!("TTL ttl: {r:?}"),
    }
    assert_eq!(store.get(b"counter").unwrap(), Some(b"41".to_vec()));

    // 3. The store writes; the server, started again on the directory, sees it.
    assert_eq!(
        store.set(b"k1", b"from-store").unwrap(),
        SetOutcome::Updated
    );
    assert_eq!(store.set(b"new", b"n").unwrap(), SetOutcome::Created);
    assert!(store.del(b"k2").unwrap());
    assert_eq!(store.exec(&[b"INCR", b"counter"]), Reply::Int(42));
    drop(store);

    let srv = Server::start(&dir, &socket);
    let mut c = srv.client().unwrap();
    assert_eq!(
        run(&mut c, &["GET", "k1"]),
        Reply::Bulk(b"from-store".to_vec())
    );
    assert_eq!(run(&mut c, &["GET", "new"]), Reply::Bulk(b"n".to_vec()));
    assert_eq!(run(&mut c, &["GET", "k2"]), Reply::Nil);
    assert_eq!(run(&mut c, &["GET", "k3"]), Reply::Bulk(b"w3".to_vec()));
    assert_eq!(
        run(&mut c, &["GET", "counter"]),
        Reply::Bulk(b"42".to_vec())
    );
    assert_eq!(run(&mut c, &["DBSIZE"]), Reply::Int(182));
    drop(c);
    srv.shutdown();
}

/// One pipeline whose commands go to both workers' shards, with commands that are
/// barriers (ECHO, MGET) and inline commands between them: every reply comes back
/// once, in command order (replies of the other worker's shard arrive after later
/// ones were encoded, and are put back in place).
#[test]
fn a_pipeline_across_both_workers_answers_in_order() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().unwrap();
    let srv = Server::start(&tmp.path().join("data"), &tmp.path().join("kv.sock"));
    let mut req = Vec::new();
    let mut want = Vec::new();
    let bulk = |s: &str| format!("${}\r\n{s}\r\n", s.len());
    for i in 0..40 {
        let (k, v) = (format!("key{i}"), format!("value-{i}"));
        req.extend(format!("*3\r\n$3\r\nSET\r\n{}{}", bulk(&k), bulk(&v)).bytes());
        want.extend(b"+OK\r\n");
    }
    for i in 0..40 {
        let k = format!("key{i}");
        req.extend(format!("*2\r\n$3\r\nGET\r\n{}", bulk(&k)).bytes());
        want.extend(bulk(&format!("value-{i}")).bytes());
        match i % 7 {
            3 => {
                req.extend(b"ECHO hi\r\n");
                want.extend(bulk("hi").bytes());
            }
            5 => {
                let j = (i + 17) % 40;
                req.extend(
                    format!(
                        "*3\r\n$4\r\nMGET\r\n{}{}",
                        bulk(&k),
                        bulk(&format!("key{j}"))
                    )
                    .bytes(),
                );
                want.extend(
                    format!(
                        "*2\r\n{}{}",
                        bulk(&format!("value-{i}")),
                        bulk(&format!("value-{j}"))
                    )
                    .bytes(),
                );
            }
            _ => {}
        }
    }
    let mut s = std::os::unix::net::UnixStream::connect(&srv.0.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&req).unwrap();
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    drop(s);
    srv.shutdown();
}

/// The shard logs (`shard-NNN.log`) of a data directory.
fn shard_logs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            let n = n.to_string_lossy();
            n.starts_with("shard-") && n.ends_with(".log")
        })
        .count()
}

#[test]
fn server_and_store_give_a_new_directory_the_same_default_shards() {
    let d = tempfile::tempdir().unwrap();
    let want = weft_kv::server::default_workers();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(want, (cpus / 2).max(1), "half the CPUs, at least one");

    // The server without --workers.
    let served = d.path().join("served");
    let s = Server::start_with(&served, &d.path().join("s.sock"), &[]);
    assert_eq!(run(&mut s.client().unwrap(), &["SET", "k", "v"]), ok());
    s.shutdown();
    assert_eq!(
        shard_logs(&served),
        want,
        "shards of a directory the server made"
    );

    // The embedded store.
    let stored = d.path().join("stored");
    drop(Store::open(&stored).unwrap());
    assert_eq!(
        shard_logs(&stored),
        want,
        "shards of a directory the store made"
    );

    // A directory keeps its shard count whatever the worker count: 3 shards made by a
    // 3-worker server, served again by the default worker count, keep every key.
    let three = d.path().join("three");
    let s = Server::start_with(&three, &d.path().join("t.sock"), &["--workers", "3"]);
    let mut c = s.client().unwrap();
    for i in 0..30 {
        assert_eq!(
            run(&mut c, &["SET", &format!("k{i}"), &format!("{i}")]),
            ok()
        );
    }
    drop(c);
    s.shutdown();
    let s = Server::start_with(&three, &d.path().join("t.sock"), &[]);
    let mut c = s.client().unwrap();
    for i in 0..30 {
        assert_eq!(
            run(&mut c, &["GET", &format!("k{i}")]),
            Reply::Bulk(format!("{i}").into_bytes())
        );
    }
    drop(c);
    s.shutdown();
    assert_eq!(shard_logs(&three), 3);
}
