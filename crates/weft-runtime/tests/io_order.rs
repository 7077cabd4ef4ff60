//! The order in which one worker's green threads get the bytes of two sockets: the
//! order in which the bytes arrived, as epoll reports readiness. A server relies on it
//! (Redis's rule: a request is run before any request that reached the server after
//! it; weft-kv's WATCH and EXEC against another client's write depend on it).
//!
//! The case that broke it: a green thread parks in a receive that the worker has
//! queued but not yet handed to the kernel, bytes arrive for it, then bytes arrive for
//! another socket whose receive the kernel already waits on, and the worker enters the
//! kernel (any system call, or a preemption) before it submits. With cooperative task
//! running, the second socket's completion was posted on that return from the kernel,
//! ahead of the first one's, which completed only once submitted: the later bytes were
//! taken first.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_runtime::net::UnixStream;
use weft_runtime::{spawn, Runtime};

mod common;
use common::*;

/// Rounds of the case (each a few microseconds of work and two parks).
const ROUNDS: usize = 50;

#[test]
fn bytes_that_arrive_first_are_taken_first() {
    for b in backends() {
        let rt = Runtime::builder().workers(1).io_backend(b).build().unwrap();
        let orders: Vec<Vec<&'static str>> = rt.block_on(move || {
            (0..ROUNDS)
                .map(|_| {
                    let order = Arc::new(Mutex::new(Vec::new()));
                    let (first, mut first_peer) = UnixStream::pair().unwrap();
                    let (second, mut second_peer) = UnixStream::pair().unwrap();
                    // `second`'s reader waits long before anything comes: its receive
                    // is in the kernel (the worker submits before it sleeps).
                    let o = order.clone();
                    let waiting = spawn(move || {
                        let mut buf = [0u8; 8];
                        assert_eq!(second.read(&mut buf).unwrap(), 1);
                        o.lock().unwrap().push("second");
                    });
                    wait_parked(waiting.id());
                    weft_runtime::sleep(Duration::from_millis(2));
                    // `first`'s reader parks just now: its receive may still be queued
                    // in the worker.
                    let o = order.clone();
                    let fresh = spawn(move || {
                        let mut buf = [0u8; 8];
                        assert_eq!(first.read(&mut buf).unwrap(), 1);
                        o.lock().unwrap().push("first");
                    });
                    wait_parked(fresh.id());
                    // Bytes for `first`, then for `second`, each write a system call
                    // of this worker, before it polls again.
                    first_peer.write_all(b"1").unwrap();
                    second_peer.write_all(b"2").unwrap();
                    waiting.join().unwrap();
                    fresh.join().unwrap();
                    let v = order.lock().unwrap().clone();
                    v
                })
                .collect()
        });
        let wrong = orders.iter().filter(|o| o[0] != "first").count();
        assert_eq!(
            wrong, 0,
            "{b:?}: the later bytes were taken first in {wrong} of {ROUNDS} rounds"
        );
    }
}
