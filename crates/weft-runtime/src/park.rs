//! Parking "whatever is running": the green thread if there is one, else the OS thread.
//!
//! Every blocking primitive of the runtime (join, mutexes, condition variables,
//! channels, timers, I/O) is written once on top of this module. A waiter records an
//! [`Unparker`] for itself, publishes it where the waker will find it, and calls
//! [`park`] in a loop until its condition holds. On a worker this parks only the green
//! thread (the worker runs others meanwhile); on any other thread (the `main` thread,
//! the blocking pool) it parks the OS thread with `std::thread::park`. So the
//! primitives work between green threads, between OS threads, and across the two.
//!
//! Like `std::thread::park`, a park may return spuriously; callers always loop on their
//! condition.

use crate::task::{self, Task};
use crate::worker;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to wake one parked thread, green or OS.
#[derive(Clone)]
pub struct Unparker(Kind);

#[derive(Clone)]
enum Kind {
    /// A green thread.
    Green(Arc<Task>),
    /// An OS thread outside the runtime's workers.
    Os(std::thread::Thread),
}

impl std::fmt::Debug for Unparker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::Green(t) => write!(f, "Unparker::Green({:?})", t.fiber.get().map(|f| f.id())),
            Kind::Os(t) => write!(f, "Unparker::Os({:?})", t.id()),
        }
    }
}

impl Unparker {
    /// The unparker of the calling context.
    pub fn current() -> Unparker {
        Unparker(match worker::current_task() {
            Some(t) => Kind::Green(t),
            None => Kind::Os(std::thread::current()),
        })
    }

    /// Wakes it (at most one pending wake-up is kept, as with `std::thread::unpark`).
    pub fn unpark(&self) {
        match &self.0 {
            Kind::Green(t) => task::unpark(t),
            Kind::Os(t) => t.unpark(),
        }
    }

    /// Wakes it, consuming this handle: a green thread's reference moves into its run
    /// queue instead of being cloned there and dropped here (two atomic operations
    /// fewer than `unpark`).
    pub fn unpark_owned(self) {
        match self.0 {
            Kind::Green(t) => task::unpark_owned(t),
            Kind::Os(t) => t.unpark(),
        }
    }

    /// This unparker as an 8-aligned address and whether it is an OS thread's (a green
    /// thread's is its task's count, `Arc::into_raw`; an OS thread's a box), for a
    /// waiter published in one atomic word (`task::JoinCell`). Give it back with
    /// [`Unparker::from_raw`], once.
    pub(crate) fn into_raw(self) -> (usize, bool) {
        match self.0 {
            Kind::Green(t) => (Arc::into_raw(t) as usize, false),
            Kind::Os(t) => (Box::into_raw(Box::new(t)) as usize, true),
        }
    }

    /// The unparker [`Unparker::into_raw`] gave as `(address, os)`.
    ///
    /// # Safety
    /// `(address, os)` came from `into_raw`, and is given back once.
    pub(crate) unsafe fn from_raw(address: usize, os: bool) -> Unparker {
        // SAFETY: per the contract.
        unsafe {
            Unparker(if os {
                Kind::Os(*Box::from_raw(address as *mut std::thread::Thread))
            } else {
                Kind::Green(Arc::from_raw(address as *const Task))
            })
        }
    }

    /// Whether two unparkers wake the same thread.
    pub fn same_as(&self, other: &Unparker) -> bool {
        match (&self.0, &other.0) {
            (Kind::Green(a), Kind::Green(b)) => Arc::ptr_eq(a, b),
            (Kind::Os(a), Kind::Os(b)) => a.id() == b.id(),
            _ => false,
        }
    }
}

/// Parks the calling green thread (or OS thread) until an [`Unparker`] of it is used,
/// or spuriously.
///
/// Inlined, as is the worker's `park_current`: a thread resumed by another whose call
/// chain differs (a joiner resumed by the thread it joined, as it exits) mispredicts
/// every `ret` between the switch and its own frame, so each call level in between
/// costs a misprediction per park.
#[inline]
pub fn park() {
    if !worker::park_current(None) {
        std::thread::park();
    }
}

/// As [`park`], returning at the latest at `deadline`.
pub fn park_until(deadline: Instant) {
    if !worker::park_current(Some(deadline)) {
        let now = Instant::now();
        if deadline > now {
            std::thread::park_timeout(deadline - now);
        }
    }
}

/// As [`park`], returning at the latest after `timeout`.
pub fn park_timeout(timeout: Duration) {
    park_until(Instant::now() + timeout)
}
