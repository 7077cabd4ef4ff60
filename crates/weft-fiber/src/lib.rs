//! # weft-fiber: the fiber core
//!
//! Fibers are user-mode threads that the program schedules itself: a fiber runs until
//! it switches to another. This crate implements them with the Windows Fibers API
//! ([`win`], exported to C by `libweft` through `include/weft/fibers.h`) and an
//! idiomatic Rust API beside it ([`Fiber`], [`ThreadFiber`], [`FlsKey`]).
//!
//! ## Map
//!
//! | module | what it holds |
//! |---|---|
//! | `arch` | the context switch (a few dozen instructions of assembly) and a new stack's first frame |
//! | `stack` | guarded, lazily committed stacks and their per-thread and process-wide caches |
//! | `valgrind`, `sanitizer` | telling valgrind and AddressSanitizer about fiber stacks |
//! | `fiber` | the fiber record and the switch protocol: atomic ownership, statistics, signal safety |
//! | `pool` | where records live (never freed to the allocator) and what a handle is (an index and a generation) |
//! | `thread` | per-OS-thread state, conversion, and cleanup when a thread ends |
//! | [`thread_stack`] | `pthread_create` with the start routine on a stack weft owns, so a converted fiber outlives its thread |
//! | `fls` | fiber-local storage |
//! | `overflow` | the SIGSEGV handler that names a fiber that overflowed its stack |
//! | `registry` | the shared-memory registry of every fiber's statistics (seqlocked slots) |
//! | [`introspect`] | reading registries, this process's or another's |
//! | `stats` | per-fiber statistics snapshots |
//! | `tls` | the two words of static TLS the hot paths read |
//! | `clock` | the time-stamp counter behind run-time accounting |
//! | [`win`] | the Windows API |
//! | `api` | the Rust API |
//!
//! ## Invariants a reader should keep in mind
//!
//! 1. A fiber runs on at most one thread; its `state` word (READY/RUNNING/FINISHED) is
//!    taken with a CAS and released by the *next* context after the switch (`fiber.rs`).
//! 2. Code that runs after a switch never uses a thread-local address computed before
//!    it: the fiber may have moved to another OS thread (`tls.rs`).
//! 3. The switch path allocates nothing and takes no lock, so a signal handler may
//!    switch (`fiber.rs`, "Signal handlers").
//! 4. No Rust frame is ever unwound by a thread exit started from a fiber (`arch`,
//!    `exit_thread_at`).
//! 5. A fiber handle is checked (its record's index and generation) before anything
//!    else is read, and records are never freed to the allocator, so a stale handle
//!    fails with an error and reads no freed memory (`pool`).
//! 6. A stack is freed only when nothing runs on it: a fiber's with its record, and the
//!    stack a thread's start routine runs on with the thread's own record or, if none
//!    took it, by the thread's cleanup, which runs on glibc's stack (`thread_stack`).

#![warn(missing_docs)]

mod api;
mod arch;
mod clock;
mod error;
mod fiber;
mod fls;
pub mod introspect;
mod overflow;
mod pool;
pub mod raw;
mod registry;
mod sanitizer;
pub mod stack;
mod stats;
mod thread;
pub mod thread_stack;
mod tls;
mod valgrind;
pub mod win;

pub use api::{convert_thread, current_id, set_name, Builder, Fiber, FlsKey, ThreadFiber};
pub use clock::{set_run_time_accounting, set_statistics_enabled};
pub use error::{message as error_message, Error};
pub use fls::{FlsCallback, FLS_MAXIMUM_AVAILABLE, FLS_OUT_OF_INDEXES};
pub use stats::{FiberState, FiberStats};

/// Error codes as `GetLastError` reports them.
pub mod error_codes {
    pub use crate::error::{
        ERROR_ALREADY_FIBER, ERROR_ALREADY_THREAD, ERROR_BUSY, ERROR_INVALID_FUNCTION,
        ERROR_INVALID_HANDLE, ERROR_INVALID_PARAMETER, ERROR_NOT_ENOUGH_MEMORY, ERROR_SUCCESS,
    };
}
