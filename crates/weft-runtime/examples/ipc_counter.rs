//! Synchronous IPC between green threads: a counter service.
//!
//! One counter server per worker, and many client green threads spread over every
//! worker, each calling the servers in turn with `ipc::call` ("add 1, tell me the new
//! value"). A server is the classic L4 server loop: `ipc::receive` once, then
//! `ipc::reply_and_wait` forever, which replies to the last client (with timeout zero:
//! a caller is always waiting for its reply) and waits for the next request in one
//! operation. Most calls cross workers, through the message boxes; the others are
//! served on the caller's own worker by a direct switch to the server.
//!
//! At the end the main green thread asks each server to stop (a `STOP` request whose
//! reply carries the final count) and checks that the counts add up: every increment
//! arrived exactly once.
//!
//! Run: `cargo run --release -p weft-runtime --example ipc_counter`

use std::time::Instant;
use weft_runtime::ipc::{self, Message, Tid, Timeout};
use weft_runtime::{spawn_on, Runtime};

/// Request kinds (the first word of a request; the second is the argument).
const ADD: u64 = 1;
const STOP: u64 = 2;

const CLIENTS_PER_WORKER: usize = 100;
const CALLS_PER_CLIENT: u64 = 2_000;

/// A counter server: answers `ADD n` with the new count; `STOP` ends it, returning its
/// count and the number of requests it served.
fn counter_server() -> (u64, u64) {
    let (mut client, mut req) =
        ipc::receive(None, Timeout::Never).expect("nothing cancels the servers");
    let (mut count, mut served) = (0u64, 0u64);
    loop {
        served += 1;
        match req.words[0] {
            ADD => count += req.words[1],
            STOP => {
                // The last reply is a plain send (timeout zero): the caller waits for it.
                ipc::send(&client, Message::new([count, served, 0, 0]), Timeout::Zero)
                    .expect("a caller waits for its reply");
                return (count, served);
            }
            k => panic!("unknown request {k}"),
        }
        // Reply, and wait for the next request: one operation.
        (client, req) = ipc::reply_and_wait(&client, Message::word(count), Timeout::Never)
            .expect("clients wait for their replies");
    }
}

/// A client: `CALLS_PER_CLIENT` increments, on the servers in turn; checks that each
/// server's count only grows. Returns how many of its calls crossed workers.
fn client(idx: usize, servers: Vec<Tid>, my_worker: usize) -> u64 {
    let mut last = vec![0u64; servers.len()];
    let mut crossed = 0;
    for i in 0..CALLS_PER_CLIENT {
        let s = (idx + i as usize) % servers.len();
        let reply = ipc::call(&servers[s], Message::new([ADD, 1, 0, 0]), Timeout::Never)
            .expect("the servers run until the end");
        let count = reply.words[0];
        assert!(count > last[s], "server {s} went backwards");
        last[s] = count;
        crossed += (s != my_worker) as u64;
    }
    crossed
}

fn main() -> std::io::Result<()> {
    let rt = Runtime::new()?; // one pinned worker per CPU
    let workers = rt.workers();
    let clients = workers * CLIENTS_PER_WORKER;
    let (elapsed, crossed, results) = rt.block_on(move || {
        // Server `w` runs on worker `w`.
        let servers: Vec<_> = (0..workers).map(|w| spawn_on(w, counter_server)).collect();
        let tids: Vec<Tid> = servers.iter().map(|s| s.tid()).collect();
        let t0 = Instant::now();
        let hs: Vec<_> = (0..clients)
            .map(|i| {
                let tids = tids.clone();
                let w = i % workers;
                spawn_on(w, move || client(i, tids, w))
            })
            .collect();
        let crossed: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        let elapsed = t0.elapsed();
        // Stop every server; its reply to STOP carries its final count.
        let results: Vec<(u64, u64)> = tids
            .iter()
            .zip(servers)
            .map(|(tid, h)| {
                let r = ipc::call(tid, Message::new([STOP, 0, 0, 0]), Timeout::Never).unwrap();
                assert_eq!(h.join().unwrap(), (r.words[0], r.words[1]));
                (r.words[0], r.words[1])
            })
            .collect();
        (elapsed, crossed, results)
    });
    let calls = clients as u64 * CALLS_PER_CLIENT;
    let total: u64 = results.iter().map(|r| r.0).sum();
    println!(
        "{workers} workers, {workers} counter servers, {clients} client green threads: \
         {calls} calls in {elapsed:.2?} ({:.2} M calls/s, {:.0} ns per call overall)",
        calls as f64 / elapsed.as_secs_f64() / 1e6,
        elapsed.as_nanos() as f64 / calls as f64,
    );
    println!(
        "  {crossed} calls crossed workers (message boxes), {} stayed on the caller's worker",
        calls - crossed
    );
    for (w, (count, served)) in results.iter().enumerate() {
        println!("  server on worker {w}: count {count} ({served} requests, STOP included)");
    }
    assert_eq!(total, calls, "every increment arrived exactly once");
    println!(
        "  total {total} = {clients} clients x {CALLS_PER_CLIENT} calls: none lost, none doubled"
    );
    Ok(())
}
