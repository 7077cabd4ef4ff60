//! Channels for green threads: [`oneshot`] (one value, once) and [`mpmc`] (bounded and
//! unbounded, many producers and many consumers).
//!
//! Like [`crate::sync`], they work between green threads on any workers, between OS
//! threads, and across the two; a blocked send or receive parks only the calling green
//! thread. They are built the same way: state under a small spin lock, FIFO wait queues
//! of unparkers, park in a loop.
//!
//! ```
//! use weft_runtime::{chan, spawn, Runtime};
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let sum = rt.block_on(|| {
//!     let (tx, rx) = chan::bounded(4);
//!     let p = spawn(move || (1..=100u64).for_each(|i| tx.send(i).unwrap()));
//!     let sum: u64 = rx.iter().sum(); // ends when the sender is gone
//!     p.join().unwrap();
//!     sum
//! });
//! assert_eq!(sum, 5050);
//! ```
//!
//! The errors ([`error`]) follow `std::sync::mpsc` and crossbeam: a send that fails
//! gives the value back, nothing is dropped silently.

pub mod error;
pub mod mpmc;
pub mod oneshot;

pub use error::{
    RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError, TrySendError,
};
pub use mpmc::{bounded, unbounded, Receiver, Sender};
