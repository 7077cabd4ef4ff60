//! Unmodified blocking client crates on hooked green threads: the `redis` crate's
//! synchronous client in 1,000 green threads against `weft kv serve`, and `ureq` (a
//! blocking HTTP client) against a local HTTP server written with `std::net` on green
//! threads. Neither crate knows weft: their `connect`, `read`, `write`, `poll` and
//! `getaddrinfo` park only their green threads.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_hook as _;
use weft_runtime::hook::stats;
use weft_runtime::{spawn, Runtime};

mod common;
use common::*;

/// A free TCP port on 127.0.0.1 (free when this returns).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `weft kv serve` in a temporary directory, on a TCP port; killed when dropped.
struct KvServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl KvServer {
    fn start() -> KvServer {
        let dir = std::env::temp_dir().join(format!("weft-hook-kv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let port = free_port();
        let child = Command::new(weft_command())
            .args(["kv", "serve", "--no-socket", "--workers", "1", "--port"])
            .arg(port.to_string())
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start weft kv serve");
        let s = KvServer { child, dir, port };
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < PATIENCE, "weft kv serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn the_redis_crate_in_a_thousand_green_threads_against_weft_kv() {
    const N: usize = 1000;
    let kv = KvServer::start();
    let url = format!("redis://127.0.0.1:{}/", kv.port);
    let rt = Runtime::builder().workers(2).build().unwrap();
    let connected = Arc::new(AtomicUsize::new(0));
    let c2 = connected.clone();
    let total: i64 = rt.block_on(move || {
        let all = Arc::new(weft_runtime::sync::Barrier::new(N));
        let hs: Vec<_> = (0..N)
            .map(|i| {
                let (url, all, connected) = (url.clone(), all.clone(), c2.clone());
                spawn(move || {
                    let client = redis::Client::open(url).unwrap();
                    let mut con = client.get_connection().unwrap();
                    connected.fetch_add(1, SeqCst);
                    // Every connection open at once.
                    all.wait();
                    let key = format!("hook:{i}");
                    let value = format!("value of {i}");
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&value)
                        .exec(&mut con)
                        .unwrap();
                    let got: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
                    assert_eq!(got, value);
                    let _: i64 = redis::cmd("INCR")
                        .arg("hook:count")
                        .query(&mut con)
                        .unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", kv.port)).unwrap();
        let mut con = client.get_connection().unwrap();
        let total = redis::cmd("GET").arg("hook:count").query(&mut con).unwrap();
        drop(kv);
        total
    });
    assert_eq!(total, N as i64);
    assert_eq!(connected.load(SeqCst), N);
    // The client's socket calls went through the layer, and green threads parked in
    // them (not their workers).
    let s = stats::snapshot();
    let parked: u64 = ["read", "recv", "recvfrom", "poll", "connect"]
        .iter()
        .map(|c| s.get(c).unwrap().parked)
        .sum();
    assert!(
        parked >= N as u64,
        "only {parked} parks in the client's calls"
    );
}

/// One HTTP/1.1 exchange on a connection: the path asked for comes back in the body.
fn http_answer(s: std::net::TcpStream) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut first = String::new();
    r.read_line(&mut first).unwrap();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
            break;
        }
    }
    let path = first.split(' ').nth(1).unwrap_or("/").to_string();
    let body = format!("you asked for {path}");
    let mut s = s;
    write!(
        s,
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
}

#[test]
fn ureq_against_a_local_http_server() {
    const N: usize = 200;
    let rt = Runtime::builder().workers(2).build().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let gai_before = stats::snapshot().get("getaddrinfo").unwrap().calls;
    let bodies = rt.block_on(move || {
        let server = spawn(move || {
            let mut hs = Vec::new();
            for _ in 0..N {
                let (s, _) = l.accept().unwrap();
                hs.push(spawn(move || http_answer(s)));
            }
            for h in hs {
                h.join().unwrap();
            }
        });
        let hs: Vec<_> = (0..N)
            .map(|i| {
                spawn(move || {
                    // "localhost": the name is resolved by getaddrinfo, on a pool thread.
                    ureq::get(&format!("http://localhost:{port}/item/{i}"))
                        .call()
                        .unwrap()
                        .body_mut()
                        .read_to_string()
                        .unwrap()
                })
            })
            .collect();
        let bodies: Vec<String> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        server.join().unwrap();
        bodies
    });
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(b, &format!("you asked for /item/{i}"));
    }
    let gai = stats::snapshot().get("getaddrinfo").unwrap().calls - gai_before;
    assert!(gai >= N as u64, "{gai} lookups went through the layer");
}
