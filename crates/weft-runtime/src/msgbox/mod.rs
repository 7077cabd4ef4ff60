//! Message boxes: how workers talk to each other (the only way they do).
//!
//! The multiprocessor design of the Fiasco microkernel gives every ordered pair of processors a message box
//! and handles every cross-processor operation as a request in one. weft's workers do
//! the same: waking a green thread owned by another worker, `spawn_on`, and later the
//! cross-worker IPC requests all travel through the matrix built by [`matrix`].
//!
//! - `spsc.rs`: one box, a bounded single-producer single-consumer ring;
//! - `matrix.rs`: the n x n matrix, the doorbells, and each worker's [`Endpoint`];
//! - `park.rs`: each worker's doorbell, and sleeping on it without losing a wake-up.

mod matrix;
mod park;
mod spsc;

pub use matrix::{matrix, Endpoint, Remote, Spin, ROOM_RETRY, SPIN_BEFORE_SLEEP};
