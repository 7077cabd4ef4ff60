//! The park/unpark protocol of one green thread: one atomic word, three values.
//!
//! ```text
//!   EMPTY ----park_begin----> PARKED ----unpark (swap NOTIFIED): "schedule it"---> NOTIFIED
//!     ^  \                                                                            |
//!     |   `--unpark---> NOTIFIED ----park_begin: consume, do not sleep--> EMPTY       |
//!     `---------------------------------- park_end (on resume) <--------------------'
//! ```
//!
//! - `park_begin` (the thread itself): from NOTIFIED it goes to EMPTY and the thread
//!   does not sleep (a wake-up came first and is consumed); from EMPTY it goes to PARKED
//!   and the thread switches away, out of every run queue.
//! - `unpark` (the owner worker): sets NOTIFIED. Only the one that finds PARKED puts
//!   the thread back on a run queue: a thread is queued at most once per park, however
//!   many wake it.
//! - `park_end` (the thread, once resumed): back to EMPTY, consuming the notification.
//! - `take_parked` (the owner worker's shutdown): PARKED to NOTIFIED.
//!
//! **Only the owner worker's OS thread touches the word** (`worker::wake`): the thread
//! itself parks and resumes on it (a started green thread never changes worker), and
//! every wake-up from elsewhere (another worker, a plain OS thread's cancel or wake, a
//! spawn's join) travels as a message to the owner, which flips the word when it
//! handles the message; timers fire and shutdown runs on the owner too. So the word
//! needs no read-modify-write and no ordering of its own: each transition is a plain
//! (Relaxed) load and store, and what a waker wrote before waking is made visible to
//! the woken thread by the message that carried the wake-up (Release push, Acquire
//! pop) or by program order on the owner's own thread. This is std's futex parker with
//! "go to sleep" replaced by "switch away" and "futex wake" by "put on the owner's run
//! queue", made single-threaded by routing wake-ups to the owner. The loom model
//! (`tests/loom_park.rs`) checks that routing: wakers on other threads post to the
//! owner, which never loses a wake-up and queues the thread at most once per park.
//!
//! The word is one byte (it is part of every green thread's record, which is kept
//! small: `task/mod.rs`). It stays an atomic byte (Relaxed loads and stores compile
//! to plain moves) so the record is `Sync` without an unsafe claim.

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
    /// Called on the owner worker only (module comment).
    #[inline]
    pub fn park_begin(&self) -> bool {
        if self.0.load(Relaxed) == NOTIFIED {
            self.0.store(EMPTY, Relaxed);
            false
        } else {
            self.0.store(PARKED, Relaxed);
            true
        }
    }

    /// Whether the thread is parked (switched away, in no run queue, not yet woken).
    /// On the owner worker only.
    #[inline]
    pub fn is_parked(&self) -> bool {
        self.0.load(Relaxed) == PARKED
    }

    /// Whether no wake-up is pending for the running thread (its next `park_begin`
    /// would park). On the owner worker only.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.load(Relaxed) == EMPTY
    }

    /// The thread was resumed after `park_begin` returned true: consumes the wake-up.
    /// On the owner worker only.
    #[inline]
    pub fn park_end(&self) {
        self.0.store(EMPTY, Relaxed);
    }

    /// Wakes the thread: true if the caller must put it back on a run queue (it was
    /// parked); false if it was running (it will not sleep at its next park) or someone
    /// else already woke it. On the owner worker only.
    #[inline]
    pub fn unpark(&self) -> bool {
        let was = self.0.load(Relaxed);
        self.0.store(NOTIFIED, Relaxed);
        was == PARKED
    }

    /// A parked thread's word, reset to EMPTY without a wake-up (shutdown, which
    /// resumes parked threads itself). True if it was parked. On the owner worker only.
    pub fn take_parked(&self) -> bool {
        if self.0.load(Relaxed) == PARKED {
            self.0.store(NOTIFIED, Relaxed);
            true
        } else {
            false
        }
    }
}
