//! Sockets through green threads, on both I/O backends (each test runs once per
//! backend: the thread pool always, io_uring where this kernel has it).

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use weft_runtime::{sleep, spawn, IoBackend};

mod common;
use common::*;

/// Raises the soft descriptor limit to the hard one; the limit now in force.
fn raise_nofile() -> u64 {
    // SAFETY: reads and sets this process's limit through a local struct.
    unsafe {
        let mut l: libc::rlimit = core::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        if l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        }
        l.rlim_cur
    }
}

/// 1,000 clients connect to an echo server on ONE worker, all before any of them
/// writes (so 1,000 server green threads are parked in recv at once), then each sends
/// its own bytes and checks the echo.
#[test]
fn echo_server_with_1000_concurrent_connections_on_one_worker() {
    const N: usize = 1000;
    let limit = raise_nofile();
    assert!(
        limit >= 2 * N as u64 + 100,
        "RLIMIT_NOFILE {limit} is too low for {N} connections"
    );
    for b in backends() {
        let rt = rt1(b);
        let ok = rt.block_on(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let server = spawn(move || {
                let mut conns = Vec::new();
                for _ in 0..N {
                    let (s, _) = l.accept().unwrap();
                    conns.push(spawn(move || {
                        let mut s = s;
                        let mut buf = [0u8; 512];
                        loop {
                            let n = s.read(&mut buf).unwrap();
                            if n == 0 {
                                return;
                            }
                            s.write_all(&buf[..n]).unwrap();
                        }
                    }));
                }
                for c in conns {
                    c.join().unwrap();
                }
            });
            let connected = Arc::new(AtomicUsize::new(0));
            let clients: Vec<_> = (0..N)
                .map(|i| {
                    let connected = connected.clone();
                    spawn(move || {
                        let mut s = TcpStream::connect(addr).unwrap();
                        s.set_nodelay(true).unwrap();
                        connected.fetch_add(1, AcqRel);
                        while connected.load(Acquire) < N {
                            sleep(Duration::from_millis(2));
                        }
                        let msg: Vec<u8> = (0..300).map(|k| (i * 31 + k) as u8).collect();
                        s.write_all(&msg).unwrap();
                        let mut back = vec![0u8; msg.len()];
                        s.read_exact(&mut back).unwrap();
                        s.shutdown(std::net::Shutdown::Write).unwrap();
                        let mut rest = Vec::new();
                        s.read_to_end(&mut rest).unwrap();
                        back == msg && rest.is_empty()
                    })
                })
                .collect();
            let ok = clients
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&x| x)
                .count();
            server.join().unwrap();
            ok
        });
        assert_eq!(ok, N, "{b:?}: every byte echoed on every connection");
    }
}

#[test]
fn connect_to_a_closed_port_is_refused() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for b in backends() {
        let rt = rt1(b);
        let e = rt.block_on(move || TcpStream::connect(("127.0.0.1", port)).unwrap_err());
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{b:?}: {e}");
        assert!(
            e.to_string().contains("127.0.0.1"),
            "the address is named: {e}"
        );
        let e = rt.block_on(|| UnixStream::connect("/nonexistent/weft.sock").unwrap_err());
        assert_eq!(e.kind(), ErrorKind::NotFound, "{b:?}: {e}");
    }
    let e = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "OS thread: {e}");
}

/// A socket read that waits for its data parks only its green thread: the peer writes
/// only once another green thread of the same (only) worker has had its turns meanwhile.
#[test]
fn a_slow_socket_read_does_not_stall_the_worker_and_timeouts_fire() {
    for b in backends() {
        let rt = rt1(b);
        let (ticks, got, timed_out, waited, peer) = rt.block_on(|| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let ticks = Arc::new(AtomicUsize::new(0));
            // The peer is a plain OS thread.
            let t2 = ticks.clone();
            let peer = std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                wait_for_ticks(&t2);
                s.write_all(b"slow").unwrap();
                let mut b = [0u8; 1];
                let _ = s.read(&mut b); // until the other side closes
            });
            let (s, _) = l.accept().unwrap();
            let mut buf = [0u8; 8];
            let (n, seen) = ticks_during(ticks, || s.read(&mut buf).unwrap());
            // Nothing more comes: a read timeout fires, not before its time.
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let t0 = Instant::now();
            let e = s.read(&mut buf).unwrap_err();
            let waited = t0.elapsed();
            drop(s);
            (seen, buf[..n].to_vec(), e.kind(), waited, peer)
        });
        // Joined here, not on the worker: a std join would block the worker itself.
        peer.join().unwrap();
        assert_eq!(got, b"slow", "{b:?}");
        assert!(
            ticks >= TICKS,
            "{b:?}: the worker stalled ({ticks} ticks while the read waited)"
        );
        assert_eq!(timed_out, ErrorKind::TimedOut, "{b:?}");
        assert!(
            waited >= Duration::from_millis(40),
            "{b:?}: after {waited:?}"
        );
    }
}

#[test]
fn unix_sockets_echo_and_pairs_work() {
    for b in backends() {
        let rt = rt1(b);
        let path =
            std::env::temp_dir().join(format!("weft-net-{}-{}.sock", std::process::id(), b.name()));
        let _ = std::fs::remove_file(&path);
        let p2 = path.clone();
        let got = rt.block_on(move || {
            let l = UnixListener::bind(&p2).unwrap();
            let server = spawn(move || {
                let mut s = l.accept().unwrap();
                let mut buf = Vec::new();
                s.read_to_end(&mut buf).unwrap();
                s.write_all(&buf).unwrap();
            });
            let mut c = UnixStream::connect(&p2).unwrap();
            c.write_all(b"over unix").unwrap();
            c.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = Vec::new();
            c.read_to_end(&mut back).unwrap();
            server.join().unwrap();
            let (mut x, mut y) = UnixStream::pair().unwrap();
            x.write_all(b"pair").unwrap();
            let mut four = [0u8; 4];
            y.read_exact(&mut four).unwrap();
            assert_eq!(&four, b"pair");
            back
        });
        assert_eq!(got, b"over unix", "{b:?}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// Shutdown with green threads parked in accept() and in recv() ends promptly and
/// cleanly; the runtime's sockets can then be reused by a new runtime.
#[test]
fn shutdown_with_green_threads_parked_in_accept_and_recv() {
    for b in backends() {
        let rt = rt1(b);
        let l = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
        let addr = l.local_addr().unwrap();
        let peer = std::net::TcpStream::connect(addr).unwrap();
        let l2 = l.clone();
        let (inner_tx, inner_rx) = std::sync::mpsc::channel();
        let h_accept = rt.spawn(move || {
            // The first accept takes `peer`; then recv on it, while another accepts.
            let (s, _) = l2.accept().unwrap();
            let l3 = l2.clone();
            let inner = spawn(move || {
                let _ = l3.accept();
                unreachable!("nobody else connects");
            });
            inner_tx.send(inner.id()).unwrap();
            let mut buf = [0u8; 16];
            let _ = s.read(&mut buf);
            unreachable!("the peer never writes");
        });
        let ids = [h_accept.id(), inner_rx.recv_timeout(PATIENCE).unwrap()];
        // Both parked (seen from a green thread of the same, only worker).
        rt.spawn(move || ids.iter().for_each(|&id| wait_parked(id)))
            .join()
            .unwrap();
        let t0 = Instant::now();
        drop(rt);
        assert!(
            t0.elapsed() < PATIENCE,
            "{b:?}: shutdown took {:?}",
            t0.elapsed()
        );
        assert!(h_accept.join().is_err(), "the parked thread was unwound");
        // The listener still works, from a plain thread and from a new runtime.
        let c = std::thread::spawn(move || std::net::TcpStream::connect(addr).unwrap());
        let (s, _) = l.accept().unwrap();
        drop(c.join().unwrap());
        drop(s);
        drop(peer);
        let rt = rt1(b);
        let l4 = l.clone();
        let n = rt.block_on(move || {
            let c = std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(b"again").unwrap();
            });
            let (mut s, _) = l4.accept().unwrap();
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            c.join().unwrap();
            v.len()
        });
        assert_eq!(n, 5);
    }
}

/// The plain-thread path: a client on an OS thread talks to a green-thread server.
#[test]
fn os_thread_client_and_green_server() {
    for b in backends() {
        let rt = rt1(b);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = rt.spawn(move || {
            let (mut s, peer) = l.accept().unwrap();
            assert_eq!(s.peer_addr().unwrap(), peer);
            let mut b = [0u8; 3];
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        assert_eq!(c.peer_addr().unwrap(), addr);
        c.set_nodelay(true).unwrap();
        assert!(c.nodelay().unwrap());
        c.write_all(b"abc").unwrap();
        let mut b3 = [0u8; 3];
        c.read_exact(&mut b3).unwrap();
        assert_eq!(&b3, b"abc");
        server.join().unwrap();
    }
}

/// A socket first used on the threads backend (which makes it nonblocking) still waits
/// properly on io_uring (an `EAGAIN` completion falls back to a poll) and on a plain
/// thread.
#[test]
fn a_socket_moves_between_backends_and_plain_threads() {
    let (a, b) = UnixStream::pair().unwrap();
    let (a, b) = (Arc::new(a), Arc::new(b));
    let rt = rt1(IoBackend::Threads);
    let a2 = a.clone();
    let e = rt.block_on(move || {
        a2.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let e = a2.read(&mut [0u8; 4]).unwrap_err().kind();
        a2.set_read_timeout(None).unwrap();
        e
    });
    assert_eq!(e, ErrorKind::TimedOut);
    drop(rt);
    for bk in backends() {
        let rt = rt1(bk);
        let b2 = b.clone();
        let w = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            (&*b2).write_all(b"late").unwrap();
        });
        let a2 = a.clone();
        let got = rt.block_on(move || {
            let mut buf = [0u8; 4];
            (&*a2).read_exact(&mut buf).unwrap();
            buf
        });
        w.join().unwrap();
        assert_eq!(&got, b"late", "{bk:?}");
    }
    // A plain thread on the (now nonblocking) socket still blocks until data comes.
    let b2 = b.clone();
    let w = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        (&*b2).write_all(b"os").unwrap();
    });
    let mut two = [0u8; 2];
    (&*a).read_exact(&mut two).unwrap();
    w.join().unwrap();
    assert_eq!(&two, b"os");
}

#[test]
fn accept_and_connect_take_timeouts() {
    use std::time::Instant;
    use weft_runtime::net::{TcpListener, TcpStream};
    for b in backends() {
        let rt = rt1(b);
        rt.block_on(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // Nobody connects: TimedOut after about the timeout, not before.
            let t0 = Instant::now();
            let e = l.accept_timeout(Duration::from_millis(60)).unwrap_err();
            let took = t0.elapsed();
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{b:?}: {e}");
            assert!(
                took >= Duration::from_millis(60),
                "{b:?}: returned after {took:?}"
            );
            assert!(took < PATIENCE, "{b:?}: returned after {took:?}");
            // A connection within the timeout is accepted; connect_timeout connects.
            let c = spawn(move || TcpStream::connect_timeout(&addr, Duration::from_secs(5)));
            let (s, _) = l.accept_timeout(Duration::from_secs(5)).unwrap();
            let c = c.join().unwrap().unwrap();
            assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
        });
    }
    // From a plain thread too (no runtime): both calls work the same way.
    let l = weft_runtime::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let e = l.accept_timeout(Duration::from_millis(30)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    let c = weft_runtime::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    let (s, _) = l.accept_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());
}

/// `send_then_discard` sends the whole reply, then takes exactly the peeked bytes off
/// the socket (what follows them stays, whole), on both backends: a short discard (one
/// system call on io_uring), one past the chained size (plain calls after the send),
/// and replies larger than the peer's socket buffer, past the chained size and within
/// it (the send waits while the peer does not read; the discard comes after it).
#[test]
fn send_then_discard_sends_all_then_takes_exactly_the_peeked_bytes() {
    for b in backends() {
        let rt = rt1(b);
        let got = rt.block_on(|| {
            let (server, mut client) = UnixStream::pair().unwrap();
            let mut results = Vec::new();
            for (request, reply) in [
                (vec![b'q'; 14], vec![b'r'; 5]),
                (vec![b'Q'; 100_000], vec![b'R'; 7]),
                (vec![b'x'; 3], vec![b'y'; 4 << 20]),
                // Larger than the socket's buffer but chained: the send must finish
                // before the recv runs, and the recv's bytes are not taken twice.
                (vec![b'z'; 3], vec![b'w'; 512 << 10]),
            ] {
                // The peer, on an OS thread (plain blocking calls).
                let reader = {
                    let (rq, rp) = (request.clone(), reply.len());
                    std::thread::spawn(move || {
                        client.write_all(&rq).unwrap();
                        client.write_all(b"next").unwrap();
                        let mut back = vec![0u8; rp];
                        client.read_exact(&mut back).unwrap();
                        (client, back)
                    })
                };
                let mut seen = 0;
                let mut buf = vec![0u8; request.len()];
                while seen < request.len() {
                    seen = server.peek(&mut buf).unwrap();
                }
                assert_eq!(buf, request);
                server.send_then_discard(&reply, request.len()).unwrap();
                let (c, back) = reader.join().unwrap();
                client = c;
                assert_eq!(back, reply);
                let mut next = [0u8; 4];
                (&server).read_exact(&mut next).unwrap();
                results.push(next);
            }
            results
        });
        assert_eq!(got, vec![*b"next"; 4], "{b:?}");
    }
}
