//! The system-call layer: blocking C library calls made on a green thread park only
//! that green thread.
//!
//! A program opts in by linking the layer's C symbols (`read`, `write`, `accept`,
//! `poll`, `nanosleep`, ...): the crate `weft-hook` for a Rust program, the library
//! `libweft-hook` for a C program (docs/hook.md, the user's guide, lists what is
//! covered and what is not). Those symbols call the functions of this module, which
//! keep each call's meaning exactly and change only who waits:
//!
//! - **Off green threads** (a plain thread, a worker's scheduler, the runtime's own
//!   code, before any runtime starts) a function is the C library's, after one test of
//!   a thread-local word (the worker pointer in the fiber core's thread word, read with
//!   its initial-exec access; and two fields of the worker when it is set).
//! - **On a green thread** it first tries the call without blocking (`MSG_DONTWAIT`,
//!   `RWF_NOWAIT`); when that would block, it asks the descriptor's facts (`fdtab`:
//!   kind, `O_NONBLOCK`, socket timeouts; learned once, then kept), returns `EAGAIN` as
//!   the kernel would for a non-blocking descriptor, and otherwise waits (`wait`):
//!   readiness of sockets and pipes (then the call is made again), or an io_uring
//!   operation or a pool thread for what readiness cannot tell (disk files, opens,
//!   `fsync`, `accept`, `connect`, `getaddrinfo`, `waitpid`).
//! - **Errors** are set in `errno` as the C library sets them: the kernel's own where
//!   the call was made; for the layer's waits, what the kernel would have said
//!   (`EAGAIN` for a socket timeout, `EINTR` for a signal (`signal.rs`), `EBADF` for a
//!   descriptor closed while waiting, and `ECANCELED` once the runtime shuts down).
//!
//! Fairness: a green thread whose calls never have to wait (a peer that always has
//! bytes ready) yields to the others of its worker every few dozen calls, and honours
//! a preemption request, as the runtime's own I/O does.
//!
//! The functions are `unsafe` with the contracts of the C functions they stand for.

mod fd;
mod fdtab;
mod net;
mod proc;
mod real;
mod rw;
mod sleep;
mod symbols;
mod wait;
mod waitset;

pub mod signal;
pub mod stats;

pub use fd::{
    close, close_range, creat, creat64, dup, dup2, dup3, epoll_create, epoll_create1, eventfd,
    fclose, fcntl, fcntl64, fdatasync, fsync, ioctl, open, open64, openat, openat64, pclose, pipe,
    pipe2, setsockopt, socket, socketpair,
};
pub use net::{accept, accept4, connect, recv, recvfrom, recvmsg, send, sendmsg, sendto};
pub use proc::{fork, getaddrinfo, wait, waitpid};
pub use rw::{pread, pread64, pwrite, pwrite64, read, readv, write, writev};
pub use signal::{sigaction, signal};
pub use sleep::{clock_nanosleep, nanosleep, sleep, usleep};
pub use symbols::*;
pub use waitset::{epoll_pwait, epoll_wait, poll, ppoll, pselect, select};

use core::ffi::c_int;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};
use wait::Stop;

/// Whether the caller is a green thread running its own code, and the layer is on:
/// the one test of the fast path (the second part is read on green threads only).
#[inline(always)]
fn green() -> bool {
    crate::worker::in_green_code() && enabled()
}

/// 0: on (not set), 1: on (set), 2: off. Read on green threads only, and by the calls
/// that track descriptors.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether the layer works: it does once linked, unless `WEFT_HOOK=off` (or `0`) is in
/// the environment or the program turned it off with [`set_enabled`]. Off, every
/// overridden function is the C library's on every thread.
#[inline(always)]
pub fn enabled() -> bool {
    STATE.load(Relaxed) != 2
}

/// Reads `WEFT_HOOK` when the program (or library) is loaded, before `main`: a load,
/// not a call, is then all [`enabled`] costs.
#[used]
#[link_section = ".init_array"]
static READ_WEFT_HOOK: extern "C" fn() = {
    extern "C" fn read_weft_hook() {
        if std::env::var_os("WEFT_HOOK").is_some_and(|v| v == "off" || v == "0") {
            // Unless the program has said otherwise already.
            let _ = STATE.compare_exchange(0, 2, Relaxed, Relaxed);
        }
    }
    read_weft_hook
};

/// Turns the layer on or off for the whole process, whatever `WEFT_HOOK` says; best
/// called first thing in `main`, before any runtime starts (a call already parked
/// finishes as it began). A program that links the layer for some of its work only
/// (the `weft` command links it for one benchmark) turns it off at start.
pub fn set_enabled(on: bool) {
    STATE.store(if on { 1 } else { 2 }, Relaxed);
}

/// Sets `errno`.
#[inline]
fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
#[inline]
fn errno() -> c_int {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// `-1` with `errno` set to `e`.
#[inline]
fn fail(e: c_int) -> isize {
    set_errno(e);
    -1
}

/// A count or `-errno` as the C library returns it (`-1` and `errno`).
#[inline]
fn ret(r: isize) -> isize {
    if r < 0 {
        fail(-r as c_int)
    } else {
        r
    }
}

/// A C library call's result as a count or `-errno`.
#[inline]
fn neg(r: isize) -> isize {
    if r < 0 {
        -(errno() as isize)
    } else {
        r
    }
}

/// The `errno` a stopped wait gives (`TimedOut` is a socket timeout: `EAGAIN`).
fn stop_errno(s: Stop) -> c_int {
    match s {
        Stop::Closed => libc::EBADF,
        Stop::Signal { .. } => libc::EINTR,
        Stop::TimedOut => libc::EAGAIN,
        Stop::Shutdown => libc::ECANCELED,
    }
}

thread_local! {
    /// Calls in a row on this worker that completed without parking.
    static RUN: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// How many calls in a row may complete without parking before the green thread lets
/// the others of its worker run.
const RUN_BUDGET: u32 = 32;

/// A call completed without parking: every [`RUN_BUDGET`] in a row, and whenever the
/// runtime asks for a preemption, the green thread yields first.
#[inline]
fn fair() {
    crate::worker::preemption_point();
    let yield_now = RUN.with(|c| {
        let n = c.get() + 1;
        c.set(if n >= RUN_BUDGET { 0 } else { n });
        n >= RUN_BUDGET
    });
    if yield_now {
        let _ = wait::yield_once();
    }
}

/// A call parked: the run of calls that did not starts again.
#[inline]
fn parked() {
    RUN.with(|c| c.set(0));
}
