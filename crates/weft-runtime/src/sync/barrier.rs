//! A reusable barrier for green threads: [`Barrier`].
//!
//! ## Design
//!
//! A count of arrivals, a generation number and a wait queue (`waitq.rs`) under a
//! spin lock. Each arrival but the last registers and parks; the last one (the
//! *leader*) resets the count, starts the next generation and notifies everyone in the
//! queue at once. A thread released from generation `g` may call `wait` again at once:
//! it counts towards generation `g + 1`, whose queue is fresh, so generations never mix.
//! A waiter unwound by the runtime's shutdown before its generation completed takes
//! its arrival back.

use super::spin::SpinLock;
use super::waitq::{unpark_all, OnUnwind, WaitQueue};
use std::fmt;

struct State {
    arrived: usize,
    generation: u64,
    waiters: WaitQueue,
}

/// A barrier for `n` threads (green or OS), reusable across generations (see the
/// module documentation).
///
/// ```
/// use std::sync::Arc;
/// use weft_runtime::{spawn, sync::Barrier, Runtime};
///
/// let rt = Runtime::builder().workers(2).build().unwrap();
/// let leaders = rt.block_on(|| {
///     let b = Arc::new(Barrier::new(3));
///     let hs: Vec<_> = (0..3)
///         .map(|_| {
///             let b = b.clone();
///             spawn(move || b.wait().is_leader())
///         })
///         .collect();
///     hs.into_iter().map(|h| h.join().unwrap() as u32).sum::<u32>()
/// });
/// assert_eq!(leaders, 1);
/// ```
pub struct Barrier {
    n: usize,
    state: SpinLock<State>,
}

impl Barrier {
    /// A barrier that releases its waiters each time `n` of them have called
    /// [`wait`](Self::wait). `n == 0` behaves as `n == 1` (as `std::sync::Barrier`).
    pub const fn new(n: usize) -> Self {
        Barrier {
            n,
            state: SpinLock::new(State {
                arrived: 0,
                generation: 0,
                waiters: WaitQueue::new(),
            }),
        }
    }

    /// Parks the caller until `n` threads have called `wait` in this generation; then
    /// releases them all. Exactly one of them (the last to arrive) gets a result whose
    /// [`is_leader`](BarrierWaitResult::is_leader) is true.
    pub fn wait(&self) -> BarrierWaitResult {
        crate::worker::preemption_point();
        let mut st = self.state.lock();
        st.arrived += 1;
        if st.arrived >= self.n {
            st.arrived = 0;
            st.generation = st.generation.wrapping_add(1);
            let all = st.waiters.notify_all();
            drop(st);
            unpark_all(all);
            return BarrierWaitResult(true);
        }
        let node = st.waiters.register();
        drop(st);
        let cleanup = OnUnwind::new(|| {
            let mut st = self.state.lock();
            if st.waiters.remove(&node) {
                st.arrived -= 1;
            }
        });
        node.wait(None);
        cleanup.disarm();
        BarrierWaitResult(false)
    }

    /// How many generations have completed so far (a snapshot).
    pub fn generation(&self) -> u64 {
        self.state.lock().generation
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state.lock();
        let (arrived, generation) = (st.arrived, st.generation);
        drop(st);
        f.debug_struct("Barrier")
            .field("n", &self.n)
            .field("arrived", &arrived)
            .field("generation", &generation)
            .finish()
    }
}

/// What [`Barrier::wait`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one thread of each generation: the last to arrive.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}
