//! # weft-runtime: the M:N runtime (layer 2)
//!
//! Many green threads over one worker thread per CPU, partitioned like the split
//! multiprocessor model of the Fiasco microkernel: each worker owns its run queue,
//! timers and I/O, and workers talk only through an n x n matrix of message boxes.
//!
//! ```
//! use weft_runtime::{Runtime, spawn, yield_now};
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let n = rt.block_on(|| {
//!     let h = spawn(|| { yield_now(); 40 });
//!     h.join().unwrap() + 2
//! });
//! assert_eq!(n, 42);
//! ```
//!
//! ## Design, in one page (details in each module and in docs/runtime.md)
//!
//! - **Green threads are fibers** of the fiber core (`weft-fiber`): the same context
//!   switch, cached stacks, statistics and registry, so `weft ps` lists them.
//! - **Workers** (`worker/`): one OS thread per CPU, pinned. Each keeps its ready green
//!   threads in a private run queue; a green thread that yields or parks picks the
//!   next one and switches to it directly (one switch per yield). Never-run threads sit
//!   in a stealable deque: an idle worker takes only those.
//! - **Threads stay where they first ran.** A started green thread is only ever resumed
//!   on its owner worker's OS thread, so code that keeps a thread-local's address across
//!   a switch (the compiler may) never reads another thread's storage. Moving a started
//!   thread is explicit and documented as such.
//! - **Parking** (`park.rs`, `task/state.rs`): one atomic word per green thread; a
//!   wake-up from the owner worker pushes onto its run queue, from another worker goes
//!   through the message boxes (`msgbox/`), from any other thread through the owner's
//!   inbox; the doorbell wakes a sleeping worker without a lost wake-up.
//! - **Timers** (`worker/timers.rs`): per worker, lazily cancelled.
//!
//! Everything that blocks (join, sync, channels, sleep, I/O) is written on [`park`]
//! and works from green threads and plain OS threads alike.

#![warn(missing_docs)]

/// How a unit test reports what it could not run here (shared with the test files).
#[cfg(test)]
#[path = "../../../tests/support/skip.rs"]
mod test_skip;

// Under the `loom` feature only the lock-free protocols are built (on loom's atomics),
// for the model checks in tests/loom_*.rs; the runtime itself is not.
#[cfg(not(feature = "loom"))]
mod blocking;
#[cfg(not(feature = "loom"))]
pub mod chan;
#[cfg(not(feature = "loom"))]
pub mod fs;
#[cfg(all(feature = "hook", not(feature = "loom")))]
pub mod hook;
#[cfg(not(feature = "loom"))]
mod io;
#[cfg(not(feature = "loom"))]
pub mod ipc;
#[cfg(not(feature = "loom"))]
mod monitor;
pub mod msgbox;
#[cfg(not(feature = "loom"))]
pub mod net;
#[cfg(not(feature = "loom"))]
pub mod park;
#[cfg(not(feature = "loom"))]
mod runtime;
mod shim;
#[cfg(not(feature = "loom"))]
pub mod sync;
#[cfg(not(feature = "loom"))]
pub mod syslet;
#[cfg(not(feature = "loom"))]
pub mod task;
#[cfg(not(feature = "loom"))]
mod worker;

/// The IPC protocol alone, exposed for the loom model (tests/loom_ipc.rs).
#[cfg(feature = "loom")]
#[doc(hidden)]
#[path = "ipc/protocol.rs"]
pub mod ipc_protocol;

/// The park word of a green thread, exposed for the loom model (tests/loom_park.rs).
#[cfg(feature = "loom")]
#[doc(hidden)]
#[path = "task/state.rs"]
pub mod park_state;
#[cfg(not(feature = "loom"))]
#[doc(hidden)]
pub use task::state as park_state;

#[cfg(not(feature = "loom"))]
pub use runtime::{set_name, sleep, spawn, spawn_on, workers, Builder, Runtime, ThreadBuilder};
#[cfg(not(feature = "loom"))]
pub use task::JoinHandle;
#[cfg(not(feature = "loom"))]
pub use worker::{
    current_worker, in_blocking_call, preemption_point, worker_rests, yield_now, Shutdown,
};
#[cfg(not(feature = "loom"))]
pub use {blocking::blocking, io::io_backend, io::ring_enters, io::IoBackend};
