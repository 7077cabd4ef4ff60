//! loom models of the green-thread park/unpark protocol (`src/task/state.rs`).
//! Run with `cargo test -p weft-runtime --features loom --test loom_park`.
//!
//! The model plays the scheduler's part: a parker that sees `park_begin() == true` is
//! "switched away" and may only continue once an unparker has put it back on the run
//! queue (`unpark() == true`), which the model represents by a queue counter.
#![cfg(feature = "loom")]

use loom::sync::atomic::{AtomicUsize, Ordering::*};
use loom::sync::{Arc, Notify};
use loom::thread;
use weft_runtime::park_state::ParkState;

/// Runs a parker that waits for `flag`, against `wakers` threads that set it and wake.
/// Checks: the parker always ends (no lost wake-up), it is queued at most once per park,
/// and it sees the flag the waker wrote before waking.
fn model(wakers: usize) {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("WEFT_LOOM_FULL").is_none() {
        // Every interleaving with up to 3 preemptions (WEFT_LOOM_FULL=1: all of them).
        b.preemption_bound = Some(3);
    }
    b.check(move || {
        let st = Arc::new(ParkState::new());
        let flag = Arc::new(AtomicUsize::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let run_queue = Arc::new(Notify::new());
        let hs: Vec<_> = (0..wakers)
            .map(|_| {
                let (st, flag, queued, rq) =
                    (st.clone(), flag.clone(), queued.clone(), run_queue.clone());
                thread::spawn(move || {
                    flag.store(1, Relaxed);
                    if st.unpark() {
                        queued.fetch_add(1, Release);
                        rq.notify();
                    }
                })
            })
            .collect();
        // The parker: loops on its condition as every primitive does.
        let mut parks = 0;
        while flag.load(Relaxed) == 0 {
            if st.park_begin() {
                parks += 1;
                // Switched away: runs again only once queued by an unparker.
                while queued.load(Acquire) < parks {
                    run_queue.wait();
                }
                st.park_end();
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        assert!(
            queued.load(Relaxed) <= parks,
            "queued more often than parked"
        );
    });
}

#[test]
fn one_waker_never_loses_the_wakeup() {
    model(1);
}

#[test]
fn two_wakers_queue_the_thread_once() {
    model(2);
}

#[test]
fn a_wakeup_before_the_park_is_kept() {
    loom::model(|| {
        let st = Arc::new(ParkState::new());
        let s2 = st.clone();
        let t = thread::spawn(move || {
            assert!(!s2.unpark(), "the thread runs: nobody must queue it");
        });
        t.join().unwrap();
        assert!(
            !st.park_begin(),
            "the earlier wake-up is consumed: no sleep"
        );
        assert!(st.park_begin(), "and only once");
    });
}
