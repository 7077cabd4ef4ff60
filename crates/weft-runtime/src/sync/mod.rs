//! Synchronization primitives for green threads: [`Mutex`], [`Condvar`],
//! [`Semaphore`], [`Barrier`].
//!
//! They work between green threads on any workers, between plain OS threads, and
//! across the two. Waiting parks only the calling green thread: its worker runs its
//! other green threads meanwhile (an OS thread blocks, as with std). So, unlike std's
//! primitives, a weft `Mutex` may be held across a park, a sleep or a channel
//! operation without stalling a worker.
//!
//! ## Design
//!
//! Every primitive is the same three pieces, each in its own module:
//!
//! - **State under a spin lock** (`spin.rs`): a flag, a count, a generation, held for
//!   a few instructions and never across a park, a yield, an unpark or a user
//!   destructor. An OS mutex would not do: a green thread blocked on it would block its
//!   worker, possibly with the holder on it.
//! - **A wait queue** (`waitq.rs`): a FIFO of records, each an
//!   [`Unparker`](crate::park::Unparker) of a waiting thread plus a `notified` flag.
//!   A waiter checks its condition and registers under the spin lock, releases it, and
//!   **parks in a loop** until its record is notified (parks may return spuriously).
//!   A waker changes the state and pops records under the spin lock, and unparks them
//!   after releasing it. Since registration and check share the lock, and an unpark
//!   before the park is remembered, no wake-up is lost.
//! - **Hand-off**: what a waiter waited for (the mutex, a permit) is given to the
//!   popped waiter directly, so waiters are served in FIFO order and a notified waiter
//!   whose timeout expires knows it got what it waited for. Timed waits and waits
//!   unwound by the runtime's shutdown take their record out of the queue, or, if it
//!   was already notified, keep or pass on what it carried.
//!
//! The channels in [`crate::chan`] are built the same way.

mod barrier;
mod condvar;
mod mutex;
mod semaphore;
pub(crate) mod spin;
pub(crate) mod waitq;

pub use barrier::{Barrier, BarrierWaitResult};
pub use condvar::Condvar;
pub use mutex::{Mutex, MutexGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
