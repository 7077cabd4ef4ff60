//! Waiting for one of many descriptors: `poll`, `ppoll`, `select`, `pselect`,
//! `epoll_wait`, `epoll_pwait`.
//!
//! Each first asks the kernel without waiting (the call itself with a zero timeout).
//! When nothing is ready and the timeout is not zero, the green thread parks until one
//! of the descriptors may be ready (`wait::ready`: io_uring's poll of the one
//! descriptor, or of a private epoll instance holding them all), the timeout passes,
//! a signal is handled on its worker (`EINTR`: the kernel never restarts these), or a
//! descriptor is closed; then it asks the kernel again, which fills in what the
//! program reads (`revents`, the sets, the events) exactly as it would have. `select`
//! writes the time left into its timeout, as Linux does.
//!
//! A signal mask given to `ppoll`, `pselect` or `epoll_pwait` applies to the OS thread
//! while the call waits, which the other green threads of the worker share; so a call
//! with a mask other than the thread's own is the C library's (it blocks the worker,
//! and is counted as not covered). With no mask, or the thread's own, it is covered.

use super::fd::entry_gen;
use super::stats::{self, Call};
use super::wait::{self, Stop, Waiter};
use super::{fail, fair, green, parked, real, stop_errno};
use core::ffi::c_int;
use libc::{epoll_event, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};
use std::time::{Duration, Instant};

/// The deadline of a timeout in milliseconds (negative: none).
fn ms_deadline(ms: c_int) -> Option<Instant> {
    (ms >= 0).then(|| Instant::now() + Duration::from_millis(ms as u64))
}

fn ts_duration(t: &timespec) -> Option<Duration> {
    (t.tv_sec >= 0 && (0..1_000_000_000).contains(&t.tv_nsec))
        .then(|| Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}

fn tv_duration(t: &timeval) -> Option<Duration> {
    (t.tv_sec >= 0 && (0..1_000_000).contains(&t.tv_usec))
        .then(|| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000))
}

/// Whether `mask` is the calling thread's signal mask.
fn is_own_mask(mask: *const sigset_t) -> bool {
    if mask.is_null() {
        return true;
    }
    // SAFETY: reads the thread's mask into a local; sigismember reads both sets.
    unsafe {
        let mut cur: sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, core::ptr::null(), &mut cur);
        (1..65).all(|s| libc::sigismember(&cur, s) == libc::sigismember(mask, s))
    }
}

/// Parks until `look` (the call with a zero timeout) says something (a count or
/// `-1`), `deadline` passes (then `look`'s answer, normally 0), a signal (`EINTR`) or
/// the shutdown (`ECANCELED`). `fds`: what to wait for (descriptor, poll events).
fn wait_for(
    call: Call,
    fds: &[(c_int, u32)],
    deadline: Option<Instant>,
    mut look: impl FnMut() -> c_int,
) -> c_int {
    let mut w = Waiter::new(false);
    for &(fd, _) in fds {
        if w.watch_fd(fd).is_err() {
            // Being closed: the kernel's answer says so.
            return look();
        }
    }
    let _waiting = stats::Waiting::new(call, fds.is_empty());
    parked();
    loop {
        let r = match fds {
            [] => wait::sleep_until(deadline, &w),
            &[(fd, ev)] => {
                let (e, gen) = entry_gen(fd);
                wait::ready_one(fd, e, gen, ev, wait::Mark::none(), deadline, &w)
            }
            _ => wait::ready(fds, deadline, &w),
        };
        match r {
            Ok(()) => {
                let n = look();
                if n != 0 {
                    return n;
                }
            }
            Err(Stop::TimedOut) | Err(Stop::Closed) => return look(),
            Err(s) => return fail(stop_errno(s)) as c_int,
        }
    }
}

/// `poll(2)`.
///
/// # Safety
/// As `poll(2)`.
#[inline]
pub unsafe fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::poll()(fds, n, timeout) };
    }
    // SAFETY: as the caller's.
    unsafe { poll_green(Call::poll, fds, n, ms_deadline(timeout), timeout == 0) }
}

/// `ppoll(2)` (see the module comment for its signal mask).
///
/// # Safety
/// As `ppoll(2)`.
#[inline]
pub unsafe fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    tmo: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::ppoll()(fds, n, tmo, mask) };
    }
    if !is_own_mask(mask) {
        stats::uncovered(Call::ppoll_mask);
        // SAFETY: passed on.
        return unsafe { real::ppoll()(fds, n, tmo, mask) };
    }
    // SAFETY: the caller's timespec.
    let d = if tmo.is_null() {
        None
    } else {
        match ts_duration(unsafe { &*tmo }) {
            Some(d) => Some(d),
            None => return fail(libc::EINVAL) as c_int,
        }
    };
    let zero = d == Some(Duration::ZERO);
    // SAFETY: as the caller's.
    unsafe { poll_green(Call::ppoll, fds, n, d.map(|d| Instant::now() + d), zero) }
}

#[inline(never)]
unsafe fn poll_green(
    call: Call,
    fds: *mut pollfd,
    n: nfds_t,
    deadline: Option<Instant>,
    zero: bool,
) -> c_int {
    stats::call(call);
    // SAFETY: the caller's array of `n` pollfds.
    let look = || unsafe { real::poll()(fds, n, 0) };
    let r = look();
    if r != 0 || zero {
        fair();
        return r;
    }
    // SAFETY: as above.
    let set: Vec<(c_int, u32)> = unsafe { core::slice::from_raw_parts(fds, n as usize) }
        .iter()
        .filter(|p| p.fd >= 0)
        .map(|p| (p.fd, p.events as u16 as u32))
        .collect();
    wait_for(call, &set, deadline, look)
}

/// The descriptors of three `select` sets below `nfds`, with the poll events each
/// stands for.
///
/// # Safety
/// Each set is null or valid.
unsafe fn select_set(
    nfds: c_int,
    r: *const fd_set,
    w: *const fd_set,
    e: *const fd_set,
) -> Vec<(c_int, u32)> {
    let mut out = Vec::new();
    for fd in 0..nfds.min(libc::FD_SETSIZE as c_int) {
        let mut ev = 0u32;
        // SAFETY: per the contract.
        unsafe {
            if !r.is_null() && libc::FD_ISSET(fd, r) {
                ev |= libc::POLLIN as u32;
            }
            if !w.is_null() && libc::FD_ISSET(fd, w) {
                ev |= libc::POLLOUT as u32;
            }
            if !e.is_null() && libc::FD_ISSET(fd, e) {
                ev |= libc::POLLPRI as u32;
            }
        }
        if ev != 0 {
            out.push((fd, ev));
        }
    }
    out
}

/// The three sets as the caller gave them, to give the kernel again after a wait.
struct Sets {
    r: Option<fd_set>,
    w: Option<fd_set>,
    e: Option<fd_set>,
}

impl Sets {
    /// # Safety
    /// Each set is null or valid.
    unsafe fn save(r: *const fd_set, w: *const fd_set, e: *const fd_set) -> Sets {
        // SAFETY: per the contract.
        let c = |p: *const fd_set| (!p.is_null()).then(|| unsafe { *p });
        Sets {
            r: c(r),
            w: c(w),
            e: c(e),
        }
    }

    /// # Safety
    /// As `save`, with the same pointers.
    unsafe fn restore(&self, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set) {
        // SAFETY: per the contract.
        unsafe {
            if let Some(s) = self.r {
                *r = s;
            }
            if let Some(s) = self.w {
                *w = s;
            }
            if let Some(s) = self.e {
                *e = s;
            }
        }
    }
}

/// `select(2)`: the time left is written into `tv`, as Linux does.
///
/// # Safety
/// As `select(2)`.
#[inline]
pub unsafe fn select(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    tv: *mut timeval,
) -> c_int {
    if !green() || nfds < 0 {
        // SAFETY: passed on.
        return unsafe { real::select()(nfds, r, w, e, tv) };
    }
    // SAFETY: the caller's timeval.
    let d = if tv.is_null() {
        None
    } else {
        match tv_duration(unsafe { &*tv }) {
            Some(d) => Some(d),
            None => return fail(libc::EINVAL) as c_int,
        }
    };
    let deadline = d.map(|d| Instant::now() + d);
    // SAFETY: the caller's sets.
    let n = unsafe {
        select_green(
            Call::select,
            nfds,
            r,
            w,
            e,
            deadline,
            d == Some(Duration::ZERO),
        )
    };
    if let (false, Some(dl)) = (tv.is_null(), deadline) {
        let left = dl.saturating_duration_since(Instant::now());
        // SAFETY: the caller's timeval.
        unsafe {
            *tv = timeval {
                tv_sec: left.as_secs() as libc::time_t,
                tv_usec: left.subsec_micros() as libc::suseconds_t,
            }
        };
    }
    n
}

/// `pselect(2)` (see the module comment for its signal mask).
///
/// # Safety
/// As `pselect(2)`.
#[inline]
pub unsafe fn pselect(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !green() || nfds < 0 {
        // SAFETY: passed on.
        return unsafe { real::pselect()(nfds, r, w, e, ts, mask) };
    }
    if !is_own_mask(mask) {
        stats::uncovered(Call::pselect_mask);
        // SAFETY: passed on.
        return unsafe { real::pselect()(nfds, r, w, e, ts, mask) };
    }
    // SAFETY: the caller's timespec.
    let d = if ts.is_null() {
        None
    } else {
        match ts_duration(unsafe { &*ts }) {
            Some(d) => Some(d),
            None => return fail(libc::EINVAL) as c_int,
        }
    };
    // SAFETY: the caller's sets.
    unsafe {
        select_green(
            Call::pselect,
            nfds,
            r,
            w,
            e,
            d.map(|d| Instant::now() + d),
            d == Some(Duration::ZERO),
        )
    }
}

#[inline(never)]
unsafe fn select_green(
    call: Call,
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    deadline: Option<Instant>,
    zero: bool,
) -> c_int {
    stats::call(call);
    // SAFETY: the caller's sets.
    let saved = unsafe { Sets::save(r, w, e) };
    let look = || {
        let mut z = timeval {
            tv_sec: 0,
            tv_usec: 0,
        };
        // SAFETY: the caller's sets, given back as they came first.
        unsafe {
            saved.restore(r, w, e);
            real::select()(nfds, r, w, e, &mut z)
        }
    };
    let n = look();
    if n != 0 || zero {
        fair();
        return n;
    }
    // SAFETY: the sets as the caller gave them.
    let set = unsafe {
        let s = Sets::save(r, w, e);
        saved.restore(r, w, e);
        let list = select_set(nfds, r, w, e);
        s.restore(r, w, e);
        list
    };
    wait_for(call, &set, deadline, look)
}

/// `epoll_wait(2)`.
///
/// # Safety
/// As `epoll_wait(2)`.
#[inline]
pub unsafe fn epoll_wait(ep: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::epoll_wait()(ep, evs, max, timeout) };
    }
    // SAFETY: as the caller's.
    unsafe { epoll_green(Call::epoll_wait, ep, evs, max, timeout) }
}

/// `epoll_pwait(2)` (see the module comment for its signal mask).
///
/// # Safety
/// As `epoll_pwait(2)`.
#[inline]
pub unsafe fn epoll_pwait(
    ep: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::epoll_pwait()(ep, evs, max, timeout, mask) };
    }
    if !is_own_mask(mask) {
        stats::uncovered(Call::epoll_pwait_mask);
        // SAFETY: passed on.
        return unsafe { real::epoll_pwait()(ep, evs, max, timeout, mask) };
    }
    // SAFETY: as the caller's.
    unsafe { epoll_green(Call::epoll_pwait, ep, evs, max, timeout) }
}

#[inline(never)]
unsafe fn epoll_green(
    call: Call,
    ep: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    stats::call(call);
    // SAFETY: the caller's event array.
    let look = || unsafe { real::epoll_wait()(ep, evs, max, 0) };
    let n = look();
    if n != 0 || timeout == 0 {
        fair();
        return n;
    }
    wait_for(
        call,
        &[(ep, libc::POLLIN as u32)],
        ms_deadline(timeout),
        look,
    )
}
