//! Multi-producer multi-consumer channels: [`bounded`] (with back-pressure) and
//! [`unbounded`]; both give a clonable [`Sender`] and a clonable [`Receiver`].
//!
//! ## Design
//!
//! One FIFO buffer (a `VecDeque`, preallocated for bounded channels), the counts of
//! live senders and receivers, and two FIFO wait queues (`sync/waitq.rs`) (blocked
//! senders, blocked receivers), all under one small spin lock that is held for a few
//! instructions, never across a park, an unpark or a value's destructor.
//!
//! - `recv` takes the oldest value, or registers in the receivers' queue and parks;
//!   `send` appends, or (bounded and full) registers in the senders' queue and parks.
//!   Each successful `send` notifies one blocked receiver and each successful `recv`
//!   one blocked sender, after releasing the lock. A woken thread re-checks under the
//!   lock (another may have got there first; this is barging, not hand-off: it keeps
//!   the channel busy instead of reserving a slot for a thread not yet scheduled).
//! - A woken thread whose timeout expires re-checks before giving up, so it takes the
//!   value (or the slot) its wake-up was for; one unwound by the runtime's shutdown
//!   passes its wake-up on. No wake-up is lost.
//! - **Disconnection**: when the last sender goes, blocked receivers wake; they drain
//!   what is buffered, then get [`RecvError`]. When the last receiver goes, the
//!   buffered values are dropped (outside the lock), blocked senders wake, and every
//!   send fails with its value given back ([`SendError`]).
//! - **Order**: one FIFO buffer, so the values of one producer are received in the
//!   order it sent them (by any one consumer, and overall).
//! - **`bounded(0)` is rejected** (it panics): rendezvous channels are not
//!   implemented. Use `bounded(1)`, or a [`oneshot`](super::oneshot) for a single
//!   hand-off.
//!
//! Why not a lock-free queue (crossbeam-queue)? The waiter queues need a lock anyway to
//! make "check, then register" atomic with respect to wakers; keeping the buffer under
//! the same lock makes every transition (including disconnection and timeouts) one
//! critical section, at the cost of a few uncontended atomic operations per message.

use super::error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
use crate::sync::spin::SpinLock;
use crate::sync::waitq::{unpark_all, OnUnwind, WaitQueue, Waiter};
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct State<T> {
    buf: VecDeque<T>,
    senders: usize,
    receivers: usize,
    send_waiters: WaitQueue,
    recv_waiters: WaitQueue,
}

struct Chan<T> {
    /// None: unbounded.
    cap: Option<usize>,
    state: SpinLock<State<T>>,
}

impl<T> Chan<T> {
    fn has_room(&self, st: &State<T>) -> bool {
        self.cap.is_none_or(|c| st.buf.len() < c)
    }
}

fn new_chan<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        cap,
        state: SpinLock::new(State {
            buf: VecDeque::with_capacity(cap.unwrap_or(0).min(4096)),
            senders: 1,
            receivers: 1,
            send_waiters: WaitQueue::new(),
            recv_waiters: WaitQueue::new(),
        }),
    });
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// A channel that holds at most `cap` values: a send to a full channel parks the
/// sender until a receiver makes room.
///
/// # Panics
/// If `cap` is 0: rendezvous channels are not implemented (see the module
/// documentation).
///
/// ```
/// use weft_runtime::{chan, spawn, Runtime};
///
/// let rt = Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(|| {
///     let (tx, rx) = chan::bounded(1);
///     // Producer and consumer share the single worker: the full channel parks the
///     // producer, which lets the consumer run.
///     let p = spawn(move || (0..100).for_each(|i| tx.send(i).unwrap()));
///     assert_eq!(rx.iter().collect::<Vec<_>>(), (0..100).collect::<Vec<_>>());
///     p.join().unwrap();
/// });
/// ```
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        cap > 0,
        "weft_runtime::chan::bounded(0): rendezvous (zero-capacity) channels are not \
         supported; use bounded(1), or chan::oneshot for a single hand-off"
    );
    new_chan(Some(cap))
}

/// A channel without a limit: a send never parks (it only fails when every receiver
/// is gone).
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    new_chan(None)
}

/// The sending half of a channel; clone it for more producers. The channel
/// disconnects for receivers when the last sender is dropped.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving half of a channel; clone it for more consumers (each value goes to
/// one of them). The channel disconnects for senders when the last receiver is
/// dropped.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends `value`, parking the calling green thread (or blocking the calling OS
    /// thread) while a bounded channel is full. `Err` gives the value back if every
    /// receiver is gone.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        self.send_until(value, None).map_err(|e| match e {
            SendTimeoutError::Disconnected(v) | SendTimeoutError::Timeout(v) => SendError(v),
        })
    }

    /// Sends `value` if there is room now, without parking.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        crate::worker::preemption_point();
        let mut st = self.chan.state.lock();
        if st.receivers == 0 {
            return Err(TrySendError::Disconnected(value));
        }
        if !self.chan.has_room(&st) {
            return Err(TrySendError::Full(value));
        }
        st.buf.push_back(value);
        let w = st.recv_waiters.notify_one();
        drop(st);
        if let Some(w) = w {
            w.unpark();
        }
        Ok(())
    }

    /// As [`send`](Self::send), giving up after `timeout` (the value is given back).
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.send_until(value, Some(Instant::now() + timeout))
    }

    fn send_until(&self, value: T, deadline: Option<Instant>) -> Result<(), SendTimeoutError<T>> {
        crate::worker::preemption_point();
        let mut node: Option<Arc<Waiter>> = None;
        loop {
            let mut st = self.chan.state.lock();
            if let Some(n) = node.take() {
                st.send_waiters.remove(&n);
            }
            if st.receivers == 0 {
                return Err(SendTimeoutError::Disconnected(value));
            }
            if self.chan.has_room(&st) {
                st.buf.push_back(value);
                let w = st.recv_waiters.notify_one();
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SendTimeoutError::Timeout(value));
            }
            let n = st.send_waiters.register();
            drop(st);
            // Unwound by shutdown: leave the queue, or pass on a wake-up we took.
            let cleanup = OnUnwind::new(|| {
                let mut st = self.chan.state.lock();
                let w = if st.send_waiters.remove(&n) {
                    None
                } else {
                    st.send_waiters.notify_one()
                };
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
            });
            n.wait(deadline);
            cleanup.disarm();
            node = Some(n);
        }
    }

    /// Whether every receiver is gone (sends fail).
    pub fn is_disconnected(&self) -> bool {
        self.chan.state.lock().receivers == 0
    }

    /// Values buffered now (a snapshot).
    pub fn len(&self) -> usize {
        self.chan.state.lock().buf.len()
    }

    /// Whether nothing is buffered now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity (None: unbounded).
    pub fn capacity(&self) -> Option<usize> {
        self.chan.cap
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.chan.state.lock().senders += 1;
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut st = self.chan.state.lock();
        st.senders -= 1;
        if st.senders > 0 {
            return;
        }
        let all = st.recv_waiters.notify_all();
        drop(st);
        unpark_all(all);
    }
}

impl<T> Receiver<T> {
    /// Takes the oldest value, parking the calling green thread (or blocking the
    /// calling OS thread) while the channel is empty. [`RecvError`] once it is empty
    /// and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_until(None).map_err(|_| RecvError)
    }

    /// Takes the oldest value if there is one, without parking.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        crate::worker::preemption_point();
        let mut st = self.chan.state.lock();
        match st.buf.pop_front() {
            Some(v) => {
                let w = st.send_waiters.notify_one();
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
                Ok(v)
            }
            None if st.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// As [`recv`](Self::recv), giving up after `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_until(Some(Instant::now() + timeout))
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        crate::worker::preemption_point();
        let mut node: Option<Arc<Waiter>> = None;
        loop {
            let mut st = self.chan.state.lock();
            if let Some(n) = node.take() {
                st.recv_waiters.remove(&n);
            }
            if let Some(v) = st.buf.pop_front() {
                let w = st.send_waiters.notify_one();
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
                return Ok(v);
            }
            if st.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RecvTimeoutError::Timeout);
            }
            let n = st.recv_waiters.register();
            drop(st);
            // Unwound by shutdown: leave the queue, or pass on a wake-up we took.
            let cleanup = OnUnwind::new(|| {
                let mut st = self.chan.state.lock();
                let w = if st.recv_waiters.remove(&n) {
                    None
                } else {
                    st.recv_waiters.notify_one()
                };
                drop(st);
                if let Some(w) = w {
                    w.unpark();
                }
            });
            n.wait(deadline);
            cleanup.disarm();
            node = Some(n);
        }
    }

    /// A blocking iterator: yields values until the channel is empty and every sender
    /// is gone.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// A non-blocking iterator over the values buffered now.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// Whether every sender is gone (once empty, receives fail).
    pub fn is_disconnected(&self) -> bool {
        self.chan.state.lock().senders == 0
    }

    /// Values buffered now (a snapshot).
    pub fn len(&self) -> usize {
        self.chan.state.lock().buf.len()
    }

    /// Whether nothing is buffered now (a snapshot).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity (None: unbounded).
    pub fn capacity(&self) -> Option<usize> {
        self.chan.cap
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.chan.state.lock().receivers += 1;
        Receiver {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.chan.state.lock();
        st.receivers -= 1;
        if st.receivers > 0 {
            return;
        }
        let buffered = std::mem::take(&mut st.buf);
        let all = st.send_waiters.notify_all();
        drop(st);
        unpark_all(all);
        drop(buffered); // outside the lock: destructors may do anything
    }
}

/// The blocking iterator of [`Receiver::iter`].
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

/// The non-blocking iterator of [`Receiver::try_iter`].
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// The owning blocking iterator of a [`Receiver`].
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.chan.cap)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.chan.cap)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Iter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for TryIter<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TryIter").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for IntoIter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoIter").finish_non_exhaustive()
    }
}
