//! loom models of the green-thread park/unpark protocol (`src/task/state.rs`).
//! Run with `cargo test -p weft-runtime --features loom --test loom_park`.
//!
//! Only the owner worker's OS thread touches a park word: the thread parks and resumes
//! on it, and a wake-up from anywhere else is a message to the owner, which flips the
//! word when it handles the message (`worker::wake`). The model plays both parts: the
//! owner thread runs the parking green thread and, between its steps and while it is
//! switched away, handles the wake-up messages that waker threads post to its inbox (a
//! mutex-protected queue, as the message boxes: Release on push, Acquire on pop). A
//! parker that sees `park_begin() == true` is "switched away" and continues only once
//! a handled wake-up has put it back on the run queue (`unpark() == true`).
#![cfg(feature = "loom")]

use loom::sync::atomic::{AtomicUsize, Ordering::*};
use loom::sync::{Arc, Mutex, Notify};
use loom::thread;
use weft_runtime::park_state::ParkState;

/// The owner worker's inbox: wake-up messages, and the doorbell that rings on a push.
struct Inbox {
    mail: Mutex<usize>,
    bell: Notify,
}

impl Inbox {
    fn post(&self) {
        *self.mail.lock().unwrap() += 1;
        self.bell.notify();
    }

    /// The owner handles the wake-ups that arrived: returns how many queued the thread.
    fn serve(&self, st: &ParkState) -> usize {
        let n = core::mem::take(&mut *self.mail.lock().unwrap());
        (0..n).filter(|_| st.unpark()).count()
    }
}

/// Runs a parker that waits for `flag`, against `wakers` threads that set it and wake
/// it through the owner's inbox. Checks: the parker always ends (no lost wake-up), it
/// is queued at most once per park, and it sees the flag the waker wrote before waking.
fn model(wakers: usize) {
    let mut b = loom::model::Builder::new();
    if std::env::var_os("WEFT_LOOM_FULL").is_none() {
        // Every interleaving with up to 3 preemptions (WEFT_LOOM_FULL=1: all of them).
        b.preemption_bound = Some(3);
    }
    b.check(move || {
        let st = ParkState::new();
        let flag = Arc::new(AtomicUsize::new(0));
        let inbox = Arc::new(Inbox {
            mail: Mutex::new(0),
            bell: Notify::new(),
        });
        let hs: Vec<_> = (0..wakers)
            .map(|_| {
                let (flag, inbox) = (flag.clone(), inbox.clone());
                thread::spawn(move || {
                    flag.store(1, Relaxed);
                    inbox.post();
                })
            })
            .collect();
        // The owner: the parker loops on its condition as every primitive does, and
        // the worker handles its mail between the thread's steps.
        let (mut parks, mut queued) = (0, 0);
        loop {
            queued += inbox.serve(&st);
            if flag.load(Relaxed) != 0 {
                break;
            }
            // The thread can be switched out (preempted) between its check and its
            // park: the worker serves mail then too, and the thread must not sleep.
            queued += inbox.serve(&st);
            if st.park_begin() {
                parks += 1;
                // Switched away: the worker serves mail until the thread is queued.
                loop {
                    queued += inbox.serve(&st);
                    assert!(queued <= parks, "queued more often than parked");
                    if queued == parks {
                        break;
                    }
                    inbox.bell.wait();
                }
                st.park_end();
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        queued += inbox.serve(&st);
        assert!(queued <= parks, "queued more often than parked");
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
        // A wake-up another thread posted, handled by the owner while the thread runs.
        let st = ParkState::new();
        let inbox = Arc::new(Inbox {
            mail: Mutex::new(0),
            bell: Notify::new(),
        });
        let i2 = inbox.clone();
        let t = thread::spawn(move || i2.post());
        t.join().unwrap();
        assert_eq!(inbox.serve(&st), 0, "the thread runs: nobody must queue it");
        assert!(
            !st.park_begin(),
            "the earlier wake-up is consumed: no sleep"
        );
        assert!(st.park_begin(), "and only once");
    });
}
