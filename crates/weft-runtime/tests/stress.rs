//! Stress: every worker sends to every worker (itself included) from its own thread,
//! through small boxes (so overflow happens), receiving and sleeping in between. Every
//! message must arrive exactly once and in order per sender; a lost wake-up would leave
//! a worker asleep, which the watchdog reports. WEFT_STRESS_MESSAGES scales it.

use std::sync::mpsc;
use std::time::{Duration, Instant};
use weft_runtime::msgbox::matrix;

#[test]
fn every_message_arrives_once_in_order_and_no_wake_up_is_lost() {
    const WORKERS: usize = 4;
    let per_pair: u64 = std::env::var("WEFT_STRESS_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let endpoints = matrix::<(u64, u64)>(WORKERS, 64).unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let all_done = std::sync::Arc::new(std::sync::Barrier::new(WORKERS));
    for mut e in endpoints {
        let done = done_tx.clone();
        let all_done = all_done.clone();
        std::thread::spawn(move || {
            let me = e.id();
            let mut next_seq = [0u64; WORKERS]; // next expected from each sender
            let mut sent = 0u64;
            let mut received = 0u64;
            let expected = per_pair * WORKERS as u64;
            let mut sleeps = 0u64;
            while received < expected || e.flush() {
                // Send a burst, to every worker in turn.
                for _ in 0..64 {
                    if sent == per_pair * WORKERS as u64 {
                        break;
                    }
                    let to = (sent % WORKERS as u64) as usize;
                    e.send(to, (me as u64, sent / WORKERS as u64));
                    sent += 1;
                }
                let n = e.poll(|from, (sender, seq)| {
                    assert_eq!(
                        from, sender as usize,
                        "delivered from the box of its sender"
                    );
                    assert_eq!(
                        seq, next_seq[from],
                        "in order per sender, none lost or doubled"
                    );
                    next_seq[from] += 1;
                });
                received += n as u64;
                if n == 0 && sent == per_pair * WORKERS as u64 && received < expected {
                    sleeps += 1;
                    e.wait(None); // nothing to do: sleep until mail
                }
            }
            done.send((me, received, sleeps)).unwrap();
            // Keep the endpoint (and its boxes) alive until every worker is done.
            all_done.wait();
        });
    }
    drop(done_tx);
    let t0 = Instant::now();
    let mut finished = Vec::new();
    while finished.len() < WORKERS {
        match done_rx.recv_timeout(Duration::from_secs(120)) {
            Ok(r) => finished.push(r),
            Err(_) => panic!(
                "workers {:?} of {WORKERS} finished after {:?}: a message or a wake-up was lost",
                finished.iter().map(|r| r.0).collect::<Vec<_>>(),
                t0.elapsed()
            ),
        }
    }
    for (id, received, _sleeps) in finished {
        assert_eq!(received, per_pair * WORKERS as u64, "worker {id}");
    }
}
