//! Sleeps: `nanosleep`, `clock_nanosleep`, `usleep`, `sleep` park the green thread on
//! its worker's timers.
//!
//! As in the kernel, a signal handled on the worker ends a sleep early whatever its
//! handler's flags (`EINTR`, with the time left where the call reports it), and a
//! sleep is never shorter than asked otherwise. `clock_nanosleep` sleeps on the
//! monotonic clock's timers for every clock it accepts (`CLOCK_MONOTONIC`,
//! `CLOCK_BOOTTIME`, `CLOCK_REALTIME`, `CLOCK_TAI`): an absolute time is turned into a
//! duration once, when the call starts, so a later change of the system's wall clock
//! does not move it. Other clocks (CPU-time clocks) are the C library's. Once the
//! runtime shuts down (green threads can no longer park), a sleep ends as an OS
//! thread's sleep of the time left.

use super::stats::{self, Call};
use super::wait::{Stop, Waiter};
use super::{fail, green, parked, real, set_errno, stop_errno};
use core::ffi::{c_int, c_uint};
use libc::timespec;
use std::time::{Duration, Instant};

/// Parks until `d` has passed: `Ok`, or why it ended early with the time left.
#[inline(never)]
fn sleep_for(call: Call, d: Duration) -> Result<(), (Stop, Duration)> {
    stats::call(call);
    let deadline = Instant::now() + d;
    // A sleep is never restarted after a signal.
    let w = Waiter::new(false);
    let _w = stats::Waiting::new(call, true);
    parked();
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        match w.park(Some(deadline)) {
            Ok(()) => {}
            Err(Stop::Shutdown) => {
                // The runtime is ending and parks return at once: the rest of the
                // sleep is an OS thread's sleep (as long as asked, without spinning).
                let left = to_timespec(deadline.saturating_duration_since(Instant::now()));
                // SAFETY: a relative sleep on a local timespec.
                unsafe {
                    real::clock_nanosleep()(libc::CLOCK_MONOTONIC, 0, &left, core::ptr::null_mut())
                };
                return Ok(());
            }
            Err(s) => return Err((s, deadline.saturating_duration_since(Instant::now()))),
        }
    }
}

fn to_duration(t: &timespec) -> Option<Duration> {
    (t.tv_sec >= 0 && (0..1_000_000_000).contains(&t.tv_nsec))
        .then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

fn to_timespec(d: Duration) -> timespec {
    timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// `nanosleep(2)`.
///
/// # Safety
/// As `nanosleep(2)`.
#[inline]
pub unsafe fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::nanosleep()(req, rem) };
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { nanosleep_green(req, rem) }
}

/// `nanosleep` on a green thread (out of line: the call off green threads stays a
/// test and a jump).
///
/// # Safety
/// As `nanosleep(2)`.
#[inline(never)]
unsafe fn nanosleep_green(req: *const timespec, rem: *mut timespec) -> c_int {
    if req.is_null() {
        // SAFETY: passed on.
        return unsafe { real::nanosleep()(req, rem) };
    }
    // SAFETY: the caller's timespec.
    let Some(d) = to_duration(unsafe { &*req }) else {
        return fail(libc::EINVAL) as c_int;
    };
    match sleep_for(Call::nanosleep, d) {
        Ok(()) => 0,
        Err((s, left)) => {
            if !rem.is_null() {
                // SAFETY: the caller's timespec for the time left.
                unsafe { *rem = to_timespec(left) };
            }
            fail(stop_errno(s)) as c_int
        }
    }
}

/// `clock_nanosleep(2)`: returns the error number (0 on success), as it does.
///
/// # Safety
/// As `clock_nanosleep(2)`.
#[inline]
pub unsafe fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::clock_nanosleep()(clock, flags, req, rem) };
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { clock_nanosleep_green(clock, flags, req, rem) }
}

/// `clock_nanosleep` on a green thread (out of line, as [`nanosleep_green`]).
///
/// # Safety
/// As `clock_nanosleep(2)`.
#[inline(never)]
unsafe fn clock_nanosleep_green(
    clock: libc::clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let ours = matches!(
        clock,
        libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME | libc::CLOCK_REALTIME | libc::CLOCK_TAI
    );
    if !ours || req.is_null() {
        // SAFETY: passed on.
        return unsafe { real::clock_nanosleep()(clock, flags, req, rem) };
    }
    // SAFETY: the caller's timespec.
    let t = unsafe { &*req };
    let Some(mut d) = to_duration(t) else {
        return libc::EINVAL;
    };
    let abs = flags & libc::TIMER_ABSTIME != 0;
    if abs {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: into a local.
        unsafe { libc::clock_gettime(clock, &mut now) };
        let now = to_duration(&now).unwrap_or_default();
        d = d.saturating_sub(now);
    }
    match sleep_for(Call::clock_nanosleep, d) {
        Ok(()) => 0,
        Err((s, left)) => {
            // An absolute sleep does not report the time left.
            if !abs && !rem.is_null() {
                // SAFETY: the caller's timespec.
                unsafe { *rem = to_timespec(left) };
            }
            stop_errno(s)
        }
    }
}

/// `usleep(3)`.
///
/// # Safety
/// None beyond `usleep(3)`'s.
#[inline]
pub unsafe fn usleep(us: c_uint) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::usleep()(us) };
    }
    match sleep_for(Call::usleep, Duration::from_micros(us as u64)) {
        Ok(()) => 0,
        Err((s, _)) => fail(stop_errno(s)) as c_int,
    }
}

/// `sleep(3)`: the seconds left (rounded up) if a signal ended it.
///
/// # Safety
/// None beyond `sleep(3)`'s.
#[inline]
pub unsafe fn sleep(secs: c_uint) -> c_uint {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::sleep()(secs) };
    }
    match sleep_for(Call::sleep, Duration::from_secs(secs as u64)) {
        Ok(()) => 0,
        Err((s, left)) => {
            set_errno(stop_errno(s));
            left.as_secs() as c_uint + (left.subsec_nanos() > 0) as c_uint
        }
    }
}
