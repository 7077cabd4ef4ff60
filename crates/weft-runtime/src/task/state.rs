//! The park/unpark protocol of one green thread: one atomic word, three values.
//!
//! ```text
//!   EMPTY ----park_begin----> PARKED ----unpark (swap NOTIFIED): "schedule it"---> NOTIFIED
//!     ^  \                                                                            |
//!     |   `--unpark---> NOTIFIED ----park_begin: consume, do not sleep--> EMPTY       |
//!     `---------------------------------- park_end (on resume) <--------------------'
//! ```
//!
//! - `park_begin` (the thread itself): `fetch_sub(1)`. From NOTIFIED it lands on EMPTY
//!   and the thread does not sleep (a wake-up came first and is consumed); from EMPTY it
//!   lands on PARKED and the thread switches away, out of every run queue.
//! - `unpark` (in the runtime, the owner worker, which receives other workers' and
//!   threads' wake-ups as messages; the protocol itself allows any thread):
//!   `swap(NOTIFIED)`. Exactly one unparker can see
//!   PARKED (after its swap the word is NOTIFIED), and only that one puts the thread
//!   back on a run queue: a thread is queued at most once per park, however many wake
//!   it at once.
//! - `park_end` (the thread, once resumed): `swap(EMPTY)`, consuming the notification.
//!
//! The orderings: `unpark` is Release and `park_begin`/`park_end` Acquire, so what the
//! waker wrote before waking (a mutex handed over, a channel slot filled) is visible to
//! the woken thread. This is std's futex parker with "go to sleep" replaced by "switch
//! away" and "futex wake" by "put on the owner's run queue". The loom model is in
//! `tests/loom_park.rs`.
//!
//! The word is one byte (it is part of every green thread's record, which is kept
//! small: `task/mod.rs`); atomic `fetch_sub` wraps, so PARKED is `u8::MAX`.

use crate::shim::AtomicU8;
use core::sync::atomic::Ordering::*;

const EMPTY: u8 = 0;
const NOTIFIED: u8 = 1;
const PARKED: u8 = u8::MAX; // EMPTY - 1 (wrapping)

/// A green thread's park word (see the module comment).
#[derive(Debug)]
pub struct ParkState(AtomicU8);

impl Default for ParkState {
    fn default() -> Self {
        Self::new()
    }
}

impl ParkState {
    /// A word in the EMPTY state (running, no wake-up pending).
    pub fn new() -> Self {
        ParkState(AtomicU8::new(EMPTY))
    }

    /// The thread is about to park: true if it must now switch away (no wake-up was
    /// pending); false if a pending wake-up was consumed and it goes on running.
    #[inline]
    pub fn park_begin(&self) -> bool {
        self.0.fetch_sub(1, Acquire) != NOTIFIED
    }

    /// The thread was resumed after `park_begin` returned true: consumes the wake-up.
    #[inline]
    pub fn park_end(&self) {
        self.0.swap(EMPTY, Acquire);
    }

    /// Wakes the thread: true if the caller must put it back on a run queue (it was
    /// parked); false if it was running (it will not sleep at its next park) or someone
    /// else already woke it.
    #[inline]
    pub fn unpark(&self) -> bool {
        self.0.swap(NOTIFIED, Release) == PARKED
    }

    /// A parked thread's word, reset to EMPTY without a wake-up (shutdown, which
    /// resumes parked threads itself). True if it was parked.
    pub fn take_parked(&self) -> bool {
        self.0
            .compare_exchange(PARKED, NOTIFIED, Acquire, Relaxed)
            .is_ok()
    }
}
