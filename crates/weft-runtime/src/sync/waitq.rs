//! The wait queue every blocking primitive is built on: a FIFO of waiter records, each
//! an [`Unparker`] plus a `notified` flag, kept under the primitive's [`SpinLock`].
//!
//! The protocol, for a waiter:
//! 1. under the primitive's spin lock, check the condition; if it does not hold,
//!    [`WaitQueue::register`] a record for the calling thread (green or OS);
//! 2. release the spin lock and [`Waiter::wait`]: park in a loop until the record is
//!    notified (parks may return spuriously) or the deadline passes.
//!
//! For a waker: under the spin lock, change the state and pop a record with
//! [`WaitQueue::notify_one`] (which sets its flag, Release); then, **after** releasing
//! the lock, [`Notified::unpark`] it. Registration happens under the same lock as the
//! check, and an unpark that comes before the park leaves a pending wake-up, so no
//! wake-up is lost.
//!
//! A waiter that gives up (timeout, or the shutdown unwind raised by a park) takes the
//! spin lock and [`WaitQueue::remove`]s its record. If the record is no longer queued
//! it has been notified, and the waiter must honour what the notification carried (a
//! mutex handed over, a permit, a notify) or pass it on: each primitive says how.

use crate::park::{self, Unparker};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use std::time::Instant;

#[cfg(doc)]
use super::spin::SpinLock;

/// One waiting thread: how to wake it, and whether it was chosen.
#[derive(Debug)]
pub(crate) struct Waiter {
    unparker: Unparker,
    notified: AtomicBool,
}

impl Waiter {
    /// Whether a waker popped this record (Acquire: what the waker wrote before is
    /// visible).
    #[inline]
    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Acquire)
    }

    /// Parks until notified (true) or until `deadline` passes (false). A park that
    /// raises the shutdown unwind unwinds through here.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> bool {
        loop {
            if self.is_notified() {
                return true;
            }
            match deadline {
                None => park::park(),
                Some(d) => {
                    if Instant::now() >= d {
                        return self.is_notified();
                    }
                    park::park_until(d);
                }
            }
        }
    }
}

/// A waiter taken off the queue and marked notified, still to be woken. Call
/// [`Notified::unpark`] once the spin lock is released.
#[must_use = "a notified waiter must be unparked (after releasing the lock)"]
pub(crate) struct Notified(Arc<Waiter>);

impl Notified {
    /// Wakes the waiter.
    #[inline]
    pub(crate) fn unpark(self) {
        self.0.unparker.unpark();
    }
}

/// A FIFO of waiters, kept under the owning primitive's spin lock.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    q: VecDeque<Arc<Waiter>>,
}

impl WaitQueue {
    /// An empty queue.
    pub(crate) const fn new() -> Self {
        WaitQueue { q: VecDeque::new() }
    }

    /// Queues a record for the calling thread (green or OS) at the back.
    pub(crate) fn register(&mut self) -> Arc<Waiter> {
        let w = Arc::new(Waiter {
            unparker: Unparker::current(),
            notified: AtomicBool::new(false),
        });
        self.q.push_back(w.clone());
        w
    }

    /// Takes the oldest waiter, marked notified.
    #[inline]
    pub(crate) fn notify_one(&mut self) -> Option<Notified> {
        let w = self.q.pop_front()?;
        w.notified.store(true, Release);
        Some(Notified(w))
    }

    /// Takes every waiter, marked notified; unpark them with [`unpark_all`] after
    /// releasing the lock.
    pub(crate) fn notify_all(&mut self) -> VecDeque<Arc<Waiter>> {
        for w in &self.q {
            w.notified.store(true, Release);
        }
        std::mem::take(&mut self.q)
    }

    /// Takes `w` off the queue: true if it was still there (not notified).
    pub(crate) fn remove(&mut self, w: &Arc<Waiter>) -> bool {
        match self.q.iter().position(|x| Arc::ptr_eq(x, w)) {
            Some(i) => {
                self.q.remove(i);
                true
            }
            None => false,
        }
    }

    /// Whether no one waits.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Number of waiters.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }
}

/// Wakes every waiter taken by [`WaitQueue::notify_all`] (call it after releasing the
/// lock).
pub(crate) fn unpark_all(ws: VecDeque<Arc<Waiter>>) {
    for w in ws {
        w.unparker.unpark();
    }
}

/// Runs a closure when dropped unless disarmed: how a waiter cleans up when a park
/// raises the shutdown unwind.
pub(crate) struct OnUnwind<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnUnwind<F> {
    /// Arms `f`.
    pub(crate) fn new(f: F) -> Self {
        OnUnwind(Some(f))
    }

    /// The wait ended normally: do not run it.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnUnwind<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}
