//! The small spin lock that guards the state of every primitive in [`crate::sync`] and
//! [`crate::chan`].
//!
//! Why not a `std::sync::Mutex`? A green thread that blocked on an OS mutex would block
//! its whole worker, and with it the green thread that holds the mutex if that one runs
//! on the same worker: a deadlock. The critical sections here are a handful of
//! instructions (a flag, a counter, a queue push or pop) and **never contain a park, a
//! yield, an unpark or a user destructor**, so the holder never switches away while
//! holding the lock and a waiter only ever spins for those few instructions. After a
//! few rounds of spinning the waiter yields its OS thread, in case the holder is a
//! plain OS thread that the kernel preempted inside its critical section.
//!
//! On a worker, the lock is taken and held at raised runtime depth
//! (`worker::preempt::enter`/`leave`), as the runtime's own code is: the preemption
//! signal then only sets the yield flag, and never switches a green thread out while
//! it holds the lock (which would leave the other green threads of its worker spinning
//! until their own time slice ran out).

use crate::worker::{self, preempt, Worker};
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering::*};

/// A test-and-test-and-set spin lock around a `T` (see the module comment for when it
/// may be used).
pub(crate) struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock gives exclusive access to `value` to one thread at a time, so the
// value only needs to be sendable between threads.
unsafe impl<T: Send> Send for SpinLock<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    pub(crate) const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning (then yielding the OS thread) while someone holds it.
    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        let w = worker::current();
        if !w.is_null() {
            // SAFETY: a non-null thread word is this OS thread's live worker; the guard
            // is dropped on this same OS thread (nothing switches while it is held), where
            // it calls the matching `leave`.
            unsafe { preempt::enter(w) };
        }
        if self
            .locked
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        SpinGuard { lock: self, w }
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spins = 0u32;
        loop {
            while self.locked.load(Relaxed) {
                if spins < 100 {
                    spins += 1;
                    core::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Acquire, Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Holds a [`SpinLock`]; unlocks on drop.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// This OS thread's worker (whose depth `lock` raised), or null.
    w: *mut Worker,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard proves we hold the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves we hold the lock, and `&mut self` that this is the
        // only reference made through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Release);
        if !self.w.is_null() {
            // SAFETY: the `enter` made in `lock`, on this same OS thread and worker (the
            // guard is never held across a switch, and is !Send through its pointer).
            unsafe { preempt::leave(self.w) };
        }
    }
}
