//! Stress for synchronous IPC: clients on every worker call servers on every worker
//! (their own worker included) with random timeouts (zero, short finite, infinite),
//! and now and then a client cancels a random client or server (whatever it is
//! blocked in: a call at either stage, a server's receive or its reply and wait).
//! Every message is accounted for: each call's request carries a unique id, the
//! servers record every id they receive, and at the end each id is
//!
//! - received exactly once by a server, and its client got the reply (checked to be
//!   the reply to that very request) or failed at the `Receive` stage (it gave up
//!   waiting for the reply, which the server then saw refused: `TimedOut`, or
//!   `PartnerDead` if the client had exited meanwhile), or
//! - never received, and its client failed at the `Send` stage with the message given
//!   back (payload included);
//!
//! never both, never lost. The servers' delivered and refused replies must match the
//! clients' successes and receive-stage failures one for one. A lost wake-up or
//! request would leave a client hanging, which the watchdog reports.
//!
//! Default: about 50,000 calls per test, a few seconds on 2 cores.
//! `WEFT_STRESS_FULL=1`: 2,000,000 calls per test.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;
use weft_runtime::ipc::{self, ErrorKind, Message, Stage, Tid, Timeout};
use weft_runtime::{spawn_on, Runtime};

/// xorshift64*: enough randomness for choosing timeouts and partners.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The payload some requests carry: derived from the id, so both ends can check it.
fn payload_of(id: u64) -> Vec<u8> {
    let n = 1 + (id % 61) as usize;
    (0..n).map(|i| (id as u8).wrapping_add(i as u8)).collect()
}

fn request(id: u64) -> Message {
    let m = Message::new([id, !id, 0, 0]);
    if id.is_multiple_of(8) {
        m.with_payload(payload_of(id))
    } else {
        m
    }
}

fn check_request(m: &Message) -> u64 {
    let id = m.words[0];
    assert_eq!(m.words[1], !id, "request {id} arrived damaged");
    let want = id.is_multiple_of(8).then(|| payload_of(id));
    assert_eq!(m.payload, want, "request {id}: payload");
    id
}

fn reply_to(id: u64, server: usize) -> Message {
    Message::new([id, id.wrapping_mul(31), server as u64, 0])
}

#[derive(Default)]
struct ClientReport {
    /// Replied to.
    ok: Vec<u64>,
    /// Failed at the send stage, message given back.
    unsent: Vec<u64>,
    /// Delivered, but failed waiting for the reply.
    gave_up: Vec<u64>,
    /// How each failure happened.
    failures: HashMap<(ErrorKind, Stage), u64>,
    /// Cancels this client sent to others.
    cancels: u64,
}

#[derive(Default)]
struct ServerReport {
    got: Vec<u64>,
    replies_delivered: u64,
    replies_refused: u64,
}

/// A server: receives requests from anyone, replies with `reply_and_wait`, records every
/// id, until `stop` (checked whenever it has nothing to do).
fn server(me: usize, stop: Arc<AtomicBool>) -> ServerReport {
    let mut r = ServerReport::default();
    let idle = Timeout::After(Duration::from_millis(2));
    let mut pending: Option<(Tid, u64)> = None;
    let mut rng = Rng::new(1000 + me as u64);
    loop {
        let res = match pending.take() {
            None => ipc::receive(None, idle),
            Some((client, id)) => {
                // Half the replies wait for the next request without a deadline (a
                // client on this worker then gets it through the direct path); the
                // run's end cancels the servers.
                let wait = if rng.below(2) == 0 {
                    Timeout::Never
                } else {
                    idle
                };
                let res = ipc::reply_and_wait(&client, reply_to(id, me), wait);
                match &res {
                    Err(e) if e.stage() == Stage::Send => {
                        // The client gave up: the reply comes back, and no receive
                        // was started.
                        r.replies_refused += 1;
                    }
                    _ => r.replies_delivered += 1,
                }
                res
            }
        };
        match res {
            Ok((client, m)) => {
                let id = check_request(&m);
                r.got.push(id);
                pending = Some((client, id));
            }
            Err(e) => {
                // A client that gave up on its last call may have exited by the time
                // the reply goes: the reply is refused with PartnerDead.
                assert!(
                    matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::Cancelled)
                        || (e.kind(), e.stage()) == (ErrorKind::PartnerDead, Stage::Send),
                    "server {me}: {e}"
                );
                if stop.load(Acquire) {
                    return r;
                }
            }
        }
    }
}

/// A client: `calls` calls to random servers with random timeouts; now and then it
/// cancels whatever a random thread of `targets` (clients and servers) is blocked in.
fn client(
    idx: u64,
    calls: u64,
    servers: Arc<Vec<Tid>>,
    targets: Arc<OnceLock<Vec<Tid>>>,
) -> ClientReport {
    let mut rng = Rng::new(idx + 1);
    let mut r = ClientReport::default();
    for seq in 0..calls {
        if rng.below(16) == 0 {
            if let Some(t) = targets.get() {
                ipc::cancel(&t[rng.below(t.len() as u64) as usize]);
                r.cancels += 1;
            }
        }
        let id = (idx << 32) | seq;
        let s = rng.below(servers.len() as u64) as usize;
        let timeout = match rng.below(8) {
            0 | 1 => Timeout::Zero,
            2 | 3 => Timeout::Never,
            _ => Timeout::After(Duration::from_micros(1 + rng.below(300))),
        };
        match ipc::call(&servers[s], request(id), timeout) {
            Ok(m) => {
                assert_eq!(
                    (m.words[0], m.words[1], m.words[2]),
                    (id, id.wrapping_mul(31), s as u64),
                    "client {idx}: the reply to another request"
                );
                r.ok.push(id);
            }
            Err(e) => {
                *r.failures.entry((e.kind(), e.stage())).or_default() += 1;
                assert!(
                    matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::Cancelled),
                    "client {idx}: {e}"
                );
                assert_eq!(e.partner(), Some(servers[s].id()));
                match e.stage() {
                    Stage::Send => {
                        let m = e
                            .into_message()
                            .expect("a failed send gives its message back");
                        assert_eq!(check_request(&m), id, "another message given back");
                        r.unsent.push(id);
                    }
                    Stage::Receive => {
                        assert!(e.into_message().is_none());
                        r.gave_up.push(id);
                    }
                }
            }
        }
    }
    r
}

fn run(workers: usize) {
    let full = std::env::var_os("WEFT_STRESS_FULL").is_some();
    let clients_per_worker = 4;
    let total: u64 = if full { 2_000_000 } else { 50_000 };
    let calls = total / (workers * clients_per_worker) as u64;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = Runtime::builder().workers(workers).build().unwrap();
        let out = rt.block_on(move || {
            let stop = Arc::new(AtomicBool::new(false));
            let servers: Vec<_> = (0..workers)
                .map(|w| {
                    let stop = stop.clone();
                    spawn_on(w, move || server(w, stop))
                })
                .collect();
            let tids = Arc::new(servers.iter().map(|s| s.tid()).collect::<Vec<_>>());
            // Whom the clients cancel now and then: every client and server (known
            // once all clients are spawned).
            let targets = Arc::new(OnceLock::new());
            let clients: Vec<_> = (0..workers * clients_per_worker)
                .map(|i| {
                    let (tids, targets) = (tids.clone(), targets.clone());
                    spawn_on(i % workers, move || client(i as u64, calls, tids, targets))
                })
                .collect();
            let _ = targets.set(
                clients
                    .iter()
                    .map(|c| c.tid())
                    .chain(tids.iter().cloned())
                    .collect::<Vec<_>>(),
            );
            let creports: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
            stop.store(true, Release);
            for s in &servers {
                while !s.is_finished() {
                    ipc::cancel(&s.tid()); // (a server waiting without a deadline)
                    weft_runtime::sleep(Duration::from_millis(1));
                }
            }
            let cancels: u64 = creports.iter().map(|r| r.cancels).sum();
            let sreports: Vec<_> = servers.into_iter().map(|s| s.join().unwrap()).collect();
            (creports, sreports, cancels)
        });
        let _ = tx.send(out);
    });
    let limit = Duration::from_secs(if full { 1200 } else { 120 });
    let (creports, sreports, cancels) = match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "{workers} workers: the calls did not finish in {limit:?}: a request or a \
             wake-up was lost"
        ),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{workers} workers: the run panicked (see above)")
        }
    };

    // Every id received at most once, by one server.
    let mut got = HashSet::new();
    for (s, r) in sreports.iter().enumerate() {
        for &id in &r.got {
            assert!(got.insert(id), "request {id} received twice (server {s})");
        }
    }
    let (mut ok, mut unsent, mut gave_up) = (0u64, 0u64, 0u64);
    let mut failures: HashMap<(ErrorKind, Stage), u64> = HashMap::new();
    for (c, r) in creports.iter().enumerate() {
        assert_eq!(
            (r.ok.len() + r.unsent.len() + r.gave_up.len()) as u64,
            calls,
            "client {c}: every call ended once"
        );
        for id in r.ok.iter().chain(&r.gave_up) {
            assert!(
                got.contains(id),
                "client {c}: request {id} delivered but no server has it"
            );
        }
        for id in &r.unsent {
            assert!(
                !got.contains(id),
                "client {c}: request {id} given back AND received by a server"
            );
        }
        ok += r.ok.len() as u64;
        unsent += r.unsent.len() as u64;
        gave_up += r.gave_up.len() as u64;
        for (k, n) in &r.failures {
            *failures.entry(*k).or_default() += n;
        }
    }
    assert_eq!(
        got.len() as u64,
        ok + gave_up,
        "a server received a request nobody sent"
    );
    let delivered: u64 = sreports.iter().map(|r| r.replies_delivered).sum();
    let refused: u64 = sreports.iter().map(|r| r.replies_refused).sum();
    assert_eq!(delivered, ok, "replies delivered vs calls answered");
    assert_eq!(refused, gave_up, "replies refused vs callers that gave up");
    let mut f: Vec<_> = failures.into_iter().collect();
    f.sort_by_key(|((k, s), _)| (format!("{s:?}"), format!("{k:?}")));
    eprintln!(
        "{workers} workers: {} calls: {ok} answered, {unsent} failed at \
         the send (given back), {gave_up} gave up on the reply; {cancels} cancels; \
         failures {f:?}",
        ok + unsent + gave_up
    );
    assert!(
        ok > 0 && unsent > 0 && gave_up > 0,
        "every outcome happened"
    );
}

#[test]
fn every_call_is_answered_or_given_back_on_2_workers() {
    run(2);
}

#[test]
fn every_call_is_answered_or_given_back_on_3_workers() {
    run(3);
}
