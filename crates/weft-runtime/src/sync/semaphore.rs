//! A counting semaphore for green threads: [`Semaphore`].
//!
//! ## Design
//!
//! A permit count and a FIFO wait queue (`waitq.rs`) under a spin lock. A permit
//! is **handed over**: releasing one while threads wait gives it to the oldest waiter
//! (the count does not move), so waiters are served in order and a thread that
//! arrives later cannot take a permit ahead of them (`try_acquire` fails while anyone
//! waits). A waiter whose timeout expires at the moment it is handed a permit keeps
//! it (and reports success); one unwound by the runtime's shutdown gives it back.

use super::spin::SpinLock;
use super::waitq::{OnUnwind, WaitQueue};
use std::fmt;
use std::time::{Duration, Instant};

struct State {
    permits: usize,
    waiters: WaitQueue,
}

/// A counting semaphore whose waiters park as green threads (see the module
/// documentation).
///
/// ```
/// use weft_runtime::{sync::Semaphore, Runtime};
///
/// let rt = Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let s = Semaphore::new(2);
///     let a = s.acquire();
///     let _b = s.acquire();
///     assert!(s.try_acquire().is_none());
///     drop(a);
///     assert_eq!(s.available_permits(), 1);
/// });
/// ```
pub struct Semaphore {
    state: SpinLock<State>,
}

impl Semaphore {
    /// A semaphore with `permits` permits available.
    pub const fn new(permits: usize) -> Self {
        Semaphore {
            state: SpinLock::new(State {
                permits,
                waiters: WaitQueue::new(),
            }),
        }
    }

    /// Takes a permit, parking the calling green thread (or blocking the calling OS
    /// thread) until one is available. The permit is given back when the returned
    /// guard is dropped.
    pub fn acquire(&self) -> SemaphorePermit<'_> {
        match self.acquire_until(None) {
            Some(p) => p,
            None => unreachable!("a wait without a deadline does not time out"),
        }
    }

    /// Takes a permit if one is available and nobody waits, without parking.
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        crate::worker::preemption_point();
        let mut st = self.state.lock();
        if st.permits > 0 && st.waiters.is_empty() {
            st.permits -= 1;
            drop(st);
            return Some(SemaphorePermit { sem: self });
        }
        None
    }

    /// As [`acquire`](Self::acquire), giving up after `timeout` (`None`).
    pub fn acquire_timeout(&self, timeout: Duration) -> Option<SemaphorePermit<'_>> {
        self.acquire_until(Some(Instant::now() + timeout))
    }

    fn acquire_until(&self, deadline: Option<Instant>) -> Option<SemaphorePermit<'_>> {
        crate::worker::preemption_point();
        let node = {
            let mut st = self.state.lock();
            if st.permits > 0 && st.waiters.is_empty() {
                st.permits -= 1;
                drop(st);
                return Some(SemaphorePermit { sem: self });
            }
            st.waiters.register()
        };
        let cleanup = OnUnwind::new(|| {
            if !self.state.lock().waiters.remove(&node) {
                self.add_permits(1); // we were handed one
            }
        });
        let got = node.wait(deadline) || !self.state.lock().waiters.remove(&node);
        cleanup.disarm();
        got.then(|| SemaphorePermit { sem: self })
    }

    /// Gives back one permit (one that was [`forget`](SemaphorePermit::forget)ten, or a
    /// new one): the same as `add_permits(1)`.
    pub fn release(&self) {
        self.add_permits(1);
    }

    /// Adds `n` permits, handing them to waiters in FIFO order first.
    pub fn add_permits(&self, mut n: usize) {
        while n > 0 {
            let mut st = self.state.lock();
            match st.waiters.notify_one() {
                Some(w) => {
                    drop(st);
                    w.unpark();
                    n -= 1;
                }
                None => {
                    st.permits = st
                        .permits
                        .checked_add(n)
                        .expect("Semaphore::add_permits: the permit count overflowed usize");
                    return;
                }
            }
        }
    }

    /// The permits available right now (a snapshot). Zero while threads wait.
    pub fn available_permits(&self) -> usize {
        self.state.lock().permits
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        let (p, w) = (st.permits, st.waiters.len());
        drop(st);
        f.debug_struct("Semaphore")
            .field("permits", &p)
            .field("waiters", &w)
            .finish()
    }
}

/// One permit of a [`Semaphore`], given back when dropped.
#[must_use = "the permit is given back at once if unused"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
}

impl SemaphorePermit<'_> {
    /// Keeps the permit taken: dropping it no longer gives it back (use
    /// [`Semaphore::release`] later, or never).
    pub fn forget(self) {
        core::mem::forget(self);
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.add_permits(1);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit").finish_non_exhaustive()
    }
}
