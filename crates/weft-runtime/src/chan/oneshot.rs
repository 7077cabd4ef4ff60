//! A channel for one value, sent once: [`channel`] gives a [`Sender`] and a
//! [`Receiver`].
//!
//! ## Design
//!
//! One slot, two "alive" flags and the receiver's [`Unparker`] under a small spin lock
//! (held for a few instructions, never across a park or a destructor). The receiver
//! checks the slot and records its unparker under the lock, then parks in a loop; the
//! sender fills the slot (or, when dropped unused, clears its flag) under the lock and
//! unparks the recorded receiver after releasing it. So the receiver wakes either with
//! the value or with [`RecvError`] when the sender is gone, never misses the wake-up,
//! and a send to a dropped receiver gives the value back.

use super::error::{RecvError, RecvTimeoutError, TryRecvError};
use crate::park::{self, Unparker};
use crate::sync::spin::SpinLock;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct State<T> {
    value: Option<T>,
    sender_alive: bool,
    receiver_alive: bool,
    waiter: Option<Unparker>,
}

struct Inner<T> {
    state: SpinLock<State<T>>,
}

/// A new oneshot channel.
///
/// ```
/// use weft_runtime::{chan::oneshot, spawn, Runtime};
///
/// let rt = Runtime::builder().workers(2).build().unwrap();
/// let v = rt.block_on(|| {
///     let (tx, rx) = oneshot::channel();
///     spawn(move || tx.send(42).unwrap());
///     rx.recv().unwrap()
/// });
/// assert_eq!(v, 42);
/// ```
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: SpinLock::new(State {
            value: None,
            sender_alive: true,
            receiver_alive: true,
            waiter: None,
        }),
    });
    (
        Sender {
            inner: inner.clone(),
        },
        Receiver { inner },
    )
}

/// The sending half of a oneshot channel. Dropping it without sending wakes the
/// receiver with [`RecvError`].
pub struct Sender<T> {
    inner: Arc<Inner<T>>,
}

/// The receiving half of a oneshot channel.
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Sender<T> {
    /// Sends the value and wakes the receiver; `Err(value)` if the receiver is gone.
    pub fn send(self, value: T) -> Result<(), T> {
        let mut st = self.inner.state.lock();
        if !st.receiver_alive {
            return Err(value);
        }
        st.value = Some(value);
        st.sender_alive = false;
        let w = st.waiter.take();
        drop(st);
        if let Some(w) = w {
            w.unpark();
        }
        // `Drop` finds `sender_alive` false and does nothing more.
        Ok(())
    }

    /// Whether the receiver is gone (a send would fail).
    pub fn is_closed(&self) -> bool {
        !self.inner.state.lock().receiver_alive
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        if !st.sender_alive {
            return; // it sent
        }
        st.sender_alive = false;
        let w = st.waiter.take();
        drop(st);
        if let Some(w) = w {
            w.unpark();
        }
    }
}

impl<T> Receiver<T> {
    /// Waits for the value, parking the calling green thread (or blocking the calling
    /// OS thread). [`RecvError`] if the sender was dropped without sending.
    pub fn recv(mut self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// The value if it has arrived, without parking.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        crate::worker::preemption_point();
        let mut st = self.inner.state.lock();
        match st.value.take() {
            Some(v) => Ok(v),
            None if st.sender_alive => Err(TryRecvError::Empty),
            None => Err(TryRecvError::Disconnected),
        }
    }

    /// As [`recv`](Self::recv), giving up after `timeout` (the receiver stays usable).
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(Instant::now() + timeout))
    }

    fn recv_until(&mut self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        crate::worker::preemption_point();
        loop {
            let mut st = self.inner.state.lock();
            if let Some(v) = st.value.take() {
                return Ok(v);
            }
            if !st.sender_alive {
                return Err(RecvTimeoutError::Disconnected);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RecvTimeoutError::Timeout);
            }
            let old = st.waiter.replace(Unparker::current());
            drop(st);
            drop(old);
            match deadline {
                None => park::park(),
                Some(d) => park::park_until(d),
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.inner.state.lock();
        st.receiver_alive = false;
        let v = st.value.take();
        let w = st.waiter.take();
        drop(st);
        drop(w);
        drop(v); // outside the lock: its destructor may do anything
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Sender").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("oneshot::Receiver").finish_non_exhaustive()
    }
}
