//! A condition variable for green threads, paired with the weft [`Mutex`]: [`Condvar`].
//!
//! ## Design
//!
//! A FIFO wait queue (`waitq.rs`) under a spin lock. `wait` registers the caller in
//! the queue **before** it unlocks the mutex, so a notification sent by anyone who
//! takes the mutex after that cannot be missed; then it parks until its record is
//! notified, and relocks the mutex. `notify_one` pops the oldest record, `notify_all`
//! all of them; both unpark after releasing the spin lock.
//!
//! A waiter whose `wait_timeout` expires leaves the queue; if it was notified at the
//! same moment it reports "not timed out", so the notification is never lost. A waiter
//! unwound by the runtime's shutdown passes a notification it received on to the next
//! waiter.
//!
//! This implementation does not wake waiters spuriously, but callers should still
//! check their condition in a loop ([`Condvar::wait_while`] does it), as with every
//! condition variable: another thread may have changed the state between the notify
//! and the relock.

use super::mutex::{Mutex, MutexGuard};
use super::spin::SpinLock;
use super::waitq::{unpark_all, OnUnwind, WaitQueue};
use std::fmt;
use std::time::{Duration, Instant};

/// A condition variable whose waiters park as green threads (see the module
/// documentation). Use it with a weft [`Mutex`].
///
/// ```
/// use std::sync::Arc;
/// use weft_runtime::{spawn, sync::{Condvar, Mutex}, Runtime};
///
/// let rt = Runtime::builder().workers(2).build().unwrap();
/// rt.block_on(|| {
///     let pair = Arc::new((Mutex::new(false), Condvar::new()));
///     let p2 = pair.clone();
///     let h = spawn(move || {
///         *p2.0.lock() = true;
///         p2.1.notify_one();
///     });
///     let (m, cv) = &*pair;
///     let ready = cv.wait_while(m.lock(), |ready| !*ready);
///     assert!(*ready);
///     drop(ready);
///     h.join().unwrap();
/// });
/// ```
pub struct Condvar {
    waiters: SpinLock<WaitQueue>,
}

impl Condvar {
    /// A condition variable with no waiters.
    pub const fn new() -> Self {
        Condvar {
            waiters: SpinLock::new(WaitQueue::new()),
        }
    }

    /// Unlocks the mutex of `guard`, parks until notified, and locks it again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_until(guard, None).0
    }

    /// Waits while `condition` holds for the data (checked before the first wait and
    /// after each wake-up), and returns the guard once it does not.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// As [`wait`](Self::wait), giving up after `timeout`. The flag is true if the wait
    /// timed out without a notification. The mutex is locked again in both cases (so
    /// the call may take longer than `timeout` when the mutex is contended).
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        self.wait_until(guard, Some(Instant::now() + timeout))
    }

    /// As [`wait_while`](Self::wait_while), giving up after `timeout` in total. The flag
    /// is true if `condition` still held when the time ran out.
    pub fn wait_timeout_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        timeout: Duration,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> (MutexGuard<'a, T>, bool) {
        let deadline = Instant::now() + timeout;
        while condition(&mut *guard) {
            let (g, timed_out) = self.wait_until(guard, Some(deadline));
            guard = g;
            if timed_out {
                let still = condition(&mut *guard);
                return (guard, still);
            }
        }
        (guard, false)
    }

    fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, T>, bool) {
        let mutex: &'a Mutex<T> = guard.mutex();
        let node = self.waiters.lock().register();
        drop(guard);
        // Unwound by shutdown while parked: leave the queue, or pass a notification
        // we already took on to the next waiter.
        let cleanup = OnUnwind::new(|| {
            if !self.waiters.lock().remove(&node) {
                self.notify_one();
            }
        });
        let notified = node.wait(deadline) || !self.waiters.lock().remove(&node);
        cleanup.disarm();
        (mutex.lock(), !notified)
    }

    /// Wakes the oldest waiter, if any.
    pub fn notify_one(&self) {
        crate::worker::preemption_point();
        let n = self.waiters.lock().notify_one();
        if let Some(n) = n {
            n.unpark();
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        crate::worker::preemption_point();
        let all = self.waiters.lock().notify_all();
        unpark_all(all);
    }
}

impl Default for Condvar {
    fn default() -> Self {
        Condvar::new()
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar")
            .field("waiters", &self.waiters.lock().len())
            .finish()
    }
}
