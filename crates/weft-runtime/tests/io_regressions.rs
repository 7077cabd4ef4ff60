//! Regression tests for bugs a review found in the I/O layer, each run on both
//! backends: several green threads waiting on one socket (the threads backend kept a
//! single waiter per direction and lost wake-ups), and a dropped descriptor being
//! closed by the time its drop returns (a queued close left the port bound).

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use weft_runtime::net::{TcpListener, UnixStream};
use weft_runtime::{chan, spawn, IoBackend, Runtime};

mod common;
use common::*;

fn rt(b: IoBackend, workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .io_backend(b)
        .build()
        .unwrap()
}

/// Two green threads accept on one shared listener; two clients connect one after the
/// other. Both acceptors must get a connection.
#[test]
fn two_acceptors_on_one_listener_both_get_a_connection() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let got = rt.block_on(move || {
            let l = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
            let addr = l.local_addr().unwrap();
            let (tx, rx) = chan::unbounded();
            let hs: Vec<_> = (0..2)
                .map(|i| {
                    let (l, tx) = (l.clone(), tx.clone());
                    spawn(move || {
                        let (s, _) = l.accept().unwrap();
                        tx.send(i).unwrap();
                        drop(s);
                    })
                })
                .collect();
            for h in &hs {
                wait_parked(h.id()); // both acceptors parked
            }
            // One connection, taken by one of them; then the other.
            let mut got = 0;
            let c1 = std::net::TcpStream::connect(addr).unwrap();
            got += usize::from(rx.recv_timeout(PATIENCE).is_ok());
            let c2 = std::net::TcpStream::connect(addr).unwrap();
            got += usize::from(rx.recv_timeout(PATIENCE).is_ok());
            drop((c1, c2));
            got
        });
        if got != 2 {
            failures.push(format!("{b:?}: only {got} of 2 acceptors woke"));
        }
        drop(rt);
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Two green threads read from one shared stream; the peer writes one byte, then
/// another. Each reader must get one.
#[test]
fn two_readers_on_one_stream_both_wake() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let got = rt.block_on(move || {
            let (a, mut peer) = UnixStream::pair().unwrap();
            let a = Arc::new(a);
            let (tx, rx) = chan::unbounded();
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let (a, tx) = (a.clone(), tx.clone());
                    spawn(move || {
                        let mut buf = [0u8; 1];
                        let n = a.read(&mut buf).unwrap();
                        tx.send(n).unwrap();
                    })
                })
                .collect();
            for h in &hs {
                wait_parked(h.id()); // both readers parked
            }
            let mut got = 0;
            peer.write_all(b"x").unwrap();
            got += usize::from(rx.recv_timeout(PATIENCE).is_ok());
            peer.write_all(b"y").unwrap();
            got += usize::from(rx.recv_timeout(PATIENCE).is_ok());
            got
        });
        if got != 2 {
            failures.push(format!("{b:?}: only {got} of 2 readers woke"));
        }
        drop(rt);
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Dropping a listener and binding its port again (as with std) must work: the drop
/// must have closed the socket.
#[test]
fn drop_listener_then_rebind_same_port() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let r = rt.block_on(move || {
            let mut errs = vec![];
            for _ in 0..20 {
                let l = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = l.local_addr().unwrap();
                drop(l);
                if let Err(e) = TcpListener::bind(addr) {
                    errs.push(e.to_string());
                }
            }
            errs
        });
        if !r.is_empty() {
            failures.push(format!("{b:?}: {} of 20 rebinds failed: {}", r.len(), r[0]));
        }
        drop(rt);
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Dropping our end of a socket pair must make the peer see EOF at once (no park in
/// between), as with std.
#[test]
fn dropped_stream_is_closed_at_once() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let eof = rt.block_on(move || {
            let (a, peer) = UnixStream::pair().unwrap();
            drop(a);
            let mut p = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&peer),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack; zero timeout.
            let r = unsafe { libc::poll(&mut p, 1, 0) };
            r == 1
        });
        if !eof {
            failures.push(format!("{b:?}: the peer did not see the close"));
        }
        drop(rt);
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// A green thread that owns a listener and is parked in accept when the runtime is
/// dropped: after the drop, the listener must be closed (its port free again).
#[test]
fn listener_owned_by_thread_parked_in_accept_is_closed_at_shutdown() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let addr = rt.block_on(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let h = spawn(move || {
                let _ = l.accept();
            });
            wait_parked(h.id());
            addr
        });
        drop(rt);
        // Closes made by a pool thread are asynchronous: try again until they are done.
        let t0 = std::time::Instant::now();
        let mut bound = TcpListener::bind(addr);
        while bound.is_err() && t0.elapsed() < PATIENCE {
            std::thread::sleep(Duration::from_millis(1));
            bound = TcpListener::bind(addr);
        }
        if let Err(e) = bound {
            failures.push(format!("{b:?}: listener still open after shutdown: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Same with a stream parked in recv: the peer must see EOF after the runtime drop.
#[test]
fn stream_owned_by_thread_parked_in_recv_is_closed_at_shutdown() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let (tx, rx) = std::sync::mpsc::channel();
        rt.block_on(move || {
            let (a, peer) = UnixStream::pair().unwrap();
            tx.send(peer).unwrap();
            let h = spawn(move || {
                let mut buf = [0u8; 8];
                let _ = a.read(&mut buf);
            });
            wait_parked(h.id());
        });
        drop(rt);
        // Closes made by a pool thread are asynchronous: the read waits for EOF.
        let peer = rx.recv().unwrap();
        peer.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = [0u8; 8];
        match peer.read(&mut buf) {
            Ok(0) => {}
            other => failures.push(format!("{b:?}: peer did not see EOF: {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// A reader parked without a timeout; a second reader of the same stream times out.
/// Then one byte arrives: the first reader must get it.
#[test]
fn a_timed_out_reader_does_not_unregister_another_reader() {
    let mut failures = vec![];
    for b in backends() {
        let rt = rt(b, 1);
        let got = rt.block_on(move || {
            let (a, mut peer) = UnixStream::pair().unwrap();
            let a = Arc::new(a);
            let (tx, rx) = chan::unbounded();
            let a1 = a.clone();
            let h = spawn(move || {
                let mut buf = [0u8; 1];
                tx.send(a1.read(&mut buf).unwrap()).unwrap();
            });
            wait_parked(h.id()); // reader 1 parked, no timeout
            a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut buf = [0u8; 1];
            let r2 = a.read(&mut buf);
            assert!(r2.is_err(), "reader 2 should time out");
            a.set_read_timeout(None).unwrap();
            peer.write_all(b"x").unwrap();
            rx.recv_timeout(PATIENCE).is_ok()
        });
        if !got {
            failures.push(format!("{b:?}: reader 1 never woke for the byte"));
        }
        drop(rt);
    }
    assert!(failures.is_empty(), "{failures:?}");
}
