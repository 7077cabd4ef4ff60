//! FFI to the benchmark peers in `peers/peers.c` (and `peers/fcontext.cpp`
//! when Boost.Context was found at build time; see build.rs).
//!
//! Each C function runs one batch of `n` iterations, times only its loop with
//! CLOCK_MONOTONIC (the clock of `std::time::Instant`) and returns 0 or an
//! errno-style code. The wrappers here return the loop's [`Duration`] or an
//! error message naming the peer and the failure.

use std::os::raw::c_int;
use std::time::Duration;

extern "C" {
    fn peer_ucontext_pingpong(round_trips: u64, elapsed_ns: *mut u64) -> c_int;
    fn peer_weft_c_pingpong(round_trips: u64, elapsed_ns: *mut u64) -> c_int;
    fn peer_ucontext_create(n: u64, elapsed_ns: *mut u64) -> c_int;
    fn peer_pthread_create(n: u64, elapsed_ns: *mut u64) -> c_int;
    fn peer_pthread_getspecific(n: u64, elapsed_ns: *mut u64) -> c_int;
    fn peer_thread_local_get(n: u64, elapsed_ns: *mut u64) -> c_int;
    #[cfg(weft_have_boost)]
    fn peer_fcontext_pingpong(round_trips: u64, elapsed_ns: *mut u64) -> c_int;
}

type PeerFn = unsafe extern "C" fn(u64, *mut u64) -> c_int;

fn call(what: &str, f: PeerFn, n: u64) -> Result<Duration, String> {
    let mut ns = 0u64;
    // SAFETY: the peers only write `*elapsed_ns`; they are not reentrant, and
    // the bench calls them from one thread at a time.
    let rc = unsafe { f(n, &mut ns) };
    if rc != 0 {
        return Err(format!(
            "C peer {what} failed: {} (code {rc}); the system refused its setup, \
             check `ulimit -a` and free memory",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(Duration::from_nanos(ns))
}

/// glibc getcontext/makecontext/swapcontext ping-pong: `round_trips` round
/// trips, i.e. 2 * round_trips switches.
pub fn ucontext_pingpong(round_trips: u64) -> Result<Duration, String> {
    call("ucontext ping-pong", peer_ucontext_pingpong, round_trips)
}

/// `n` times: getcontext + makecontext on a preallocated 64 KiB stack,
/// swapcontext in, and the context swaps straight back.
/// SwitchToFiber ping-pong from C call sites (libweft's exported entry point).
/// The calling thread must already be a fiber.
pub fn weft_c_pingpong(round_trips: u64) -> Result<Duration, String> {
    call("weft C ping-pong", peer_weft_c_pingpong, round_trips)
}

pub fn ucontext_create(n: u64) -> Result<Duration, String> {
    call("ucontext create", peer_ucontext_create, n)
}

/// `n` times: pthread_create + pthread_join of an empty thread.
pub fn pthread_create_join(n: u64) -> Result<Duration, String> {
    call("pthread_create/join", peer_pthread_create, n)
}

/// `n` pthread_getspecific calls on a key with a value set.
pub fn pthread_getspecific(n: u64) -> Result<Duration, String> {
    call("pthread_getspecific", peer_pthread_getspecific, n)
}

/// `n` reads of a C `__thread` variable through a non-inlined function.
pub fn thread_local_get(n: u64) -> Result<Duration, String> {
    call("__thread read", peer_thread_local_get, n)
}

/// Why the Boost.Context peer cannot run, or `None` if it was built in.
pub fn fcontext_unavailable() -> Option<&'static str> {
    if cfg!(weft_have_boost) {
        None
    } else {
        Some("not installed: apt-get install libboost-context-dev, then cargo clean -p weft-cli and rebuild")
    }
}

/// Boost.Context jump_fcontext ping-pong: `round_trips` round trips.
#[cfg(weft_have_boost)]
pub fn fcontext_pingpong(round_trips: u64) -> Result<Duration, String> {
    call(
        "boost fcontext ping-pong",
        peer_fcontext_pingpong,
        round_trips,
    )
}

/// Boost.Context was not found at build time.
#[cfg(not(weft_have_boost))]
pub fn fcontext_pingpong(_round_trips: u64) -> Result<Duration, String> {
    Err(fcontext_unavailable().unwrap_or_default().to_string())
}
