//! A server written with `std::net` on green threads, and 10,000 client green threads
//! (std's TcpStream too), all connected at once, each side on two workers; every byte
//! checked. The clients run in a child process (this test again, told so by its
//! environment), so that each process needs a descriptor per connection, not two.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use weft_hook as _;
use weft_runtime::sync::Barrier;
use weft_runtime::{spawn, Runtime};

mod common;
use common::*;

const WANT: usize = 10_000;
const MSG: usize = 100;

/// Client `id`'s `round`-th message: its id and round, then a pattern of both.
fn message(id: usize, round: u8) -> Vec<u8> {
    let mut m: Vec<u8> = (0..MSG)
        .map(|i| (i as u8).wrapping_mul(31) ^ (id as u8) ^ round.wrapping_mul(7))
        .collect();
    m[..8].copy_from_slice(&(id as u64).to_le_bytes());
    m[8] = round;
    m
}

/// The server's connection: echo until end of stream, counting the connections open.
fn echo(mut s: TcpStream, live: Arc<AtomicUsize>, most: Arc<AtomicUsize>) {
    let now = live.fetch_add(1, SeqCst) + 1;
    most.fetch_max(now, SeqCst);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => s.write_all(&buf[..n]).unwrap(),
        }
    }
    live.fetch_sub(1, SeqCst);
}

/// The child's environment: the server's address and how many clients.
const ROLE: &str = "WEFT_HOOK_TEST_NET_CLIENTS";

#[test]
fn a_std_net_server_and_ten_thousand_client_green_threads() {
    if let Ok(v) = std::env::var(ROLE) {
        let (addr, n) = v.split_once(',').unwrap();
        return clients(addr.parse().unwrap(), n.parse().unwrap());
    }
    let n = connections_that_fit(WANT, 1);
    let rt = Runtime::builder().workers(2).build().unwrap();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    // A long accept queue: all clients connect at once.
    // SAFETY: listen again on our listening socket, with a longer queue.
    unsafe { libc::listen(l.as_raw_fd(), 65_535) };
    let addr = l.local_addr().unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_std_net_server_and_ten_thousand_client_green_threads",
        ])
        .env(ROLE, format!("{addr},{n}"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let most = rt.block_on(move || {
        let live = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let (s, _) = l.accept().unwrap();
            let (live, most) = (live.clone(), most.clone());
            conns.push(spawn(move || echo(s, live, most)));
        }
        for c in conns {
            c.join().unwrap();
        }
        most.load(SeqCst)
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the clients failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(most, n, "the server did not hold every connection at once");
}

/// The child: `n` client green threads, every connection open at once, two echoes
/// each, every byte checked.
fn clients(addr: std::net::SocketAddr, n: usize) {
    raise_nofile((n + 256) as u64);
    let rt = Runtime::builder().workers(2).build().unwrap();
    let checked = rt.block_on(move || {
        let all = Arc::new(Barrier::new(n));
        let checked = Arc::new(AtomicUsize::new(0));
        let clients: Vec<_> = (0..n)
            .map(|id| {
                let (all, checked) = (all.clone(), checked.clone());
                spawn(move || {
                    let mut c = TcpStream::connect(addr).unwrap();
                    let mut back = vec![0u8; MSG];
                    for round in 0..2u8 {
                        let m = message(id, round);
                        c.write_all(&m).unwrap();
                        c.read_exact(&mut back).unwrap();
                        assert_eq!(back, m, "client {id}, round {round}: a wrong echo");
                        checked.fetch_add(MSG, SeqCst);
                        if round == 0 {
                            // Every connection open at once.
                            all.wait();
                        }
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        checked.load(SeqCst)
    });
    assert_eq!(checked, 2 * n * MSG);
}
