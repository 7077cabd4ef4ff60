//! The completion ring: where asynchronous syslets report, drained by the user without
//! a system call.
//!
//! A bounded lock-free queue (crossbeam's `ArrayQueue`: many producers, the cachemiss
//! threads, and any consumer) of [`Completion`]s. When it is full a completion is not
//! dropped: it waits in an overflow list and moves into the ring as the user drains
//! it (`overflowed()` counts how often that happened, so a user can size the ring).
//! `wait(min, timeout)` parks the caller, green thread or OS thread, until `min`
//! completions are waiting.

use super::atom::SysletUatom;
use crate::park::{self, Unparker};
use crossbeam_queue::ArrayQueue;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Mutex;
use std::time::Instant;

/// One finished syslet: its final atom and that atom's result (`-errno` for a failed
/// system call, `-ECANCELED` for a cancelled syslet, `-EFAULT` for a bad pointer).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The atom the syslet ended at.
    pub atom: *mut SysletUatom,
    /// Its result.
    pub ret: i64,
    /// The handle id [`exec`](super::Context::exec) returned for it.
    pub id: u64,
}

// SAFETY: plain data (the atom pointer is the submitter's own).
unsafe impl Send for Completion {}

pub(crate) struct Ring {
    q: ArrayQueue<Completion>,
    overflow: Mutex<VecDeque<Completion>>,
    overflow_len: AtomicUsize,
    overflowed: AtomicU64,
    waiters: Mutex<Vec<Unparker>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Ring {
        Ring {
            q: ArrayQueue::new(capacity.max(1)),
            overflow: Mutex::new(VecDeque::new()),
            overflow_len: AtomicUsize::new(0),
            overflowed: AtomicU64::new(0),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Adds a completion (never drops it) without waking the waiters: the caller calls
    /// [`wake`](Self::wake) next (`exec::finish`), or once per batch of completions
    /// (the io_uring engine).
    pub(crate) fn push_quiet(&self, c: Completion) {
        self.add(c, true)
    }

    /// Puts back a completion that was taken out (not counted as an overflow).
    pub(crate) fn push_back(&self, c: Completion) {
        self.add(c, false);
        self.wake();
    }

    /// `fresh`: a new completion, which goes behind any in the overflow list and counts
    /// as an overflow if it joins them; else one put back, which takes any free slot.
    fn add(&self, c: Completion, fresh: bool) {
        let pushed = (!fresh || self.overflow_len.load(Acquire) == 0) && self.q.push(c).is_ok();
        if !pushed {
            let mut o = lock(&self.overflow);
            o.push_back(c);
            self.overflow_len.store(o.len(), Release);
            if fresh {
                self.overflowed.fetch_add(1, Relaxed);
            }
        }
    }

    /// Wakes the waiters. Waiters check under this lock (see `wait`): taking it after
    /// a push means none can miss that completion.
    pub(crate) fn wake(&self) {
        let ws = core::mem::take(&mut *lock(&self.waiters));
        for w in ws {
            w.unpark_owned();
        }
    }

    /// Takes the oldest waiting completion, if any (no system call).
    pub(crate) fn pop(&self) -> Option<Completion> {
        let c = self.q.pop();
        if self.overflow_len.load(Acquire) > 0 {
            let mut o = lock(&self.overflow);
            while let Some(x) = o.pop_front() {
                if let Err(x) = self.q.push(x) {
                    o.push_front(x);
                    break;
                }
            }
            self.overflow_len.store(o.len(), Release);
            if c.is_none() {
                return self.q.pop();
            }
        }
        c
    }

    /// How many completions wait.
    pub(crate) fn len(&self) -> usize {
        self.q.len() + self.overflow_len.load(Acquire)
    }

    /// How many completions found the ring full (and waited in the overflow list).
    pub(crate) fn overflowed(&self) -> u64 {
        self.overflowed.load(Relaxed)
    }

    /// Waits until at least `min` completions wait, or `deadline` passes; true if they
    /// do.
    pub(crate) fn wait(&self, min: usize, deadline: Option<Instant>) -> bool {
        loop {
            {
                let mut ws = lock(&self.waiters);
                if self.len() >= min {
                    return true;
                }
                let me = Unparker::current();
                if !ws.iter().any(|w| w.same_as(&me)) {
                    ws.push(me);
                }
            }
            match deadline {
                Some(d) if Instant::now() >= d => return self.len() >= min,
                Some(d) => park::park_until(d),
                None => park::park(),
            }
        }
    }
}
