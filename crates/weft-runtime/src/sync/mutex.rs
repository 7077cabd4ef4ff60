//! A mutual-exclusion lock for green threads (and OS threads): [`Mutex`].
//!
//! Waiting for it parks only the calling green thread; the other green threads of its
//! worker run meanwhile. So, unlike a `std::sync::Mutex`, it may be held across a park,
//! a sleep, a channel operation or a yield.
//!
//! ## Design
//!
//! The state (a `locked` flag and a FIFO wait queue (`waitq.rs`)) sits under a small
//! spin lock held for a few instructions. Unlocking with waiters **hands the lock
//! over** to the oldest one: `locked` stays true and the waiter is told it now owns the
//! mutex. The choice, over barging (letting any running thread take a just-released
//! lock): waiters are served in FIFO order and cannot starve, and a timed or
//! cancelled wait is simple to get right (a notified waiter owns the lock, full stop).
//! The price is throughput under heavy contention: the lock stays reserved for the
//! woken thread until it is scheduled. A thread that finds the mutex free and nobody
//! queued takes it without parking.
//!
//! **No poisoning**: a panic while the guard is held unlocks the mutex (the guard is
//! dropped while unwinding) and the next locker gets the data as it was left. Check
//! your invariants if your threads may panic mid-update.

use super::spin::SpinLock;
use super::waitq::{OnUnwind, WaitQueue};
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use std::fmt;
use std::time::{Duration, Instant};

struct State {
    locked: bool,
    waiters: WaitQueue,
}

/// A mutual-exclusion lock whose waiters park as green threads (see the module
/// documentation). Hand-off (FIFO) under contention, no poisoning.
///
/// ```
/// use std::sync::Arc;
/// use weft_runtime::{spawn, sync::Mutex, Runtime};
///
/// let rt = Runtime::builder().workers(2).build().unwrap();
/// let n = rt.block_on(|| {
///     let m = Arc::new(Mutex::new(0));
///     let hs: Vec<_> = (0..4)
///         .map(|_| {
///             let m = m.clone();
///             spawn(move || *m.lock() += 1)
///         })
///         .collect();
///     hs.into_iter().for_each(|h| h.join().unwrap());
///     let n = *m.lock();
///     n
/// });
/// assert_eq!(n, 4);
/// ```
pub struct Mutex<T: ?Sized> {
    state: SpinLock<State>,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex gives one thread at a time access to `data`; it moves between
// threads with the lock, so `T: Send` is enough (as for std's Mutex).
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    pub const fn new(value: T) -> Self {
        Mutex {
            state: SpinLock::new(State {
                locked: false,
                waiters: WaitQueue::new(),
            }),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks the mutex, parking the calling green thread (or blocking the calling OS
    /// thread) until it is available.
    ///
    /// Not reentrant: locking a mutex the caller already holds deadlocks that caller.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        match self.lock_until(None) {
            Some(g) => g,
            None => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// Locks the mutex if it is free and nobody waits for it, without parking.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        crate::worker::preemption_point();
        let mut st = self.state.lock();
        if st.locked {
            return None;
        }
        st.locked = true;
        drop(st);
        Some(self.guard())
    }

    /// As [`lock`](Self::lock), giving up after `timeout`: `None` if the mutex could not
    /// be taken by then.
    pub fn lock_timeout(&self, timeout: Duration) -> Option<MutexGuard<'_, T>> {
        self.lock_until(Some(Instant::now() + timeout))
    }

    fn lock_until(&self, deadline: Option<Instant>) -> Option<MutexGuard<'_, T>> {
        crate::worker::preemption_point();
        let node = {
            let mut st = self.state.lock();
            if !st.locked {
                st.locked = true;
                drop(st);
                return Some(self.guard());
            }
            st.waiters.register()
        };
        // If a park raises the shutdown unwind: leave the queue, or, if the lock was
        // handed to us meanwhile, pass it on.
        let cleanup = OnUnwind::new(|| {
            if !self.state.lock().waiters.remove(&node) {
                self.unlock();
            }
        });
        let owned = node.wait(deadline) || !self.state.lock().waiters.remove(&node);
        cleanup.disarm();
        // Not removed means notified: the lock was handed to us.
        owned.then(|| self.guard())
    }

    /// A guard for a lock the caller has just taken.
    fn guard(&self) -> MutexGuard<'_, T> {
        MutexGuard {
            mutex: self,
            _data: PhantomData,
        }
    }

    /// Releases the lock: hands it to the oldest waiter, or marks it free.
    pub(super) fn unlock(&self) {
        let mut st = self.state.lock();
        let next = st.waiters.notify_one();
        if next.is_none() {
            st.locked = false;
        }
        drop(st);
        if let Some(n) = next {
            n.unpark();
        }
    }

    /// The data, through exclusive access to the mutex (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }

    /// Whether the mutex is held right now (a snapshot, for diagnostics).
    pub fn is_locked(&self) -> bool {
        self.state.lock().locked
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(v: T) -> Self {
        Mutex::new(v)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Some(g) => d.field("data", &&*g),
            None => d.field("data", &format_args!("<locked>")),
        };
        d.finish_non_exhaustive()
    }
}

/// Access to the data of a locked [`Mutex`]; unlocks it (handing it to the oldest
/// waiter) when dropped.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    // Send iff T: Send, Sync iff T: Sync (with the reference above).
    _data: PhantomData<&'a mut T>,
}

impl<'a, T: ?Sized> MutexGuard<'a, T> {
    /// The mutex this guard locks.
    pub(super) fn mutex(&self) -> &'a Mutex<T> {
        self.mutex
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held, so no one else touches the data.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as above, and `&mut self` makes this the only reference through the
        // guard.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
