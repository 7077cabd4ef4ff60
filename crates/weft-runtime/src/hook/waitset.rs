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
//! while the call waits. The worker's OS thread runs the other green threads of the
//! worker meanwhile, so it cannot take the mask: a call with a mask other than the
//! thread's own runs on a blocking-pool thread, with that mask, while the green thread
//! parks ([`masked`]). A signal the mask lets through interrupts it there (`EINTR`) if
//! the kernel picks that thread to take it, exactly as with several OS threads of
//! which one waits in `ppoll`. With no mask, or the thread's own, the call is the
//! green wait above.

use super::fd::entry_gen;
use super::stats::{self, Call};
use super::wait::{self, Stop, Waiter};
use super::{errno, fail, fair, green, parked, real, set_errno, stop_errno};
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
            // Being closed: the kernel's answer says so, once the close is made.
            settle_closes(fds);
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
            Err(Stop::TimedOut) => return look(),
            Err(Stop::Closed) => {
                settle_closes(fds);
                return look();
            }
            Err(s) => return fail(stop_errno(s)) as c_int,
        }
    }
}

/// Lets the worker run others until no close of a descriptor of `fds` is under way. A
/// close wakes the descriptor's waiters before the kernel closes it (fdtab's
/// `closing`, then the close, then `Closing::done`), so a waiter woken by it that asked
/// the kernel at once could still find the descriptor open (a poll would answer 0
/// instead of `POLLNVAL`).
fn settle_closes(fds: &[(c_int, u32)]) {
    for &(fd, _) in fds {
        while matches!(entry_gen(fd), (Some(_), g) if g & 1 == 1) {
            if wait::yield_once().is_err() {
                return;
            }
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
        // SAFETY: as the caller's.
        return unsafe { ppoll_masked(fds, n, tmo, mask) };
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
        // SAFETY: as the caller's.
        return unsafe { pselect_masked(nfds, r, w, e, ts, mask) };
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

/// Runs `job` (a call given signal mask `mask`) on a blocking-pool thread while the
/// green thread parks, and answers its result, with `errno` as the job left it. The
/// job owns copies of what the call reads and writes, given back by `back` only when
/// it returned: the runtime's shutdown ends the park while the job may still wait,
/// and must not leave it writing into the green thread's memory.
fn masked<T: Send + 'static>(
    call: Call,
    job: impl FnOnce(&sigset_t) -> (c_int, T) + Send + 'static,
    mask: sigset_t,
    back: impl FnOnce(T),
) -> c_int {
    stats::call(call);
    let _waiting = stats::Waiting::new(call, false);
    parked();
    let r = wait::pool(
        move || {
            let (r, v) = job(&mask);
            (r, errno(), v)
        },
        false,
        None,
    );
    match r {
        Ok((r, e, v)) => {
            if r < 0 {
                set_errno(e);
            } else {
                back(v);
            }
            r
        }
        Err(s) => fail(stop_errno(s)) as c_int,
    }
}

/// A copy of a timespec pointer's value, for a job that outlives the caller's frame.
///
/// # Safety
/// `t` is null or points at a timespec.
unsafe fn own_timespec(t: *const timespec) -> Option<timespec> {
    // SAFETY: as the caller says.
    (!t.is_null()).then(|| unsafe { *t })
}

/// `ppoll` with a signal mask other than the thread's own ([`masked`]).
///
/// # Safety
/// As `ppoll(2)`, with `mask` not null.
#[inline(never)]
unsafe fn ppoll_masked(
    fds: *mut pollfd,
    n: nfds_t,
    tmo: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if n > max_fds() {
        return fail(libc::EINVAL) as c_int;
    }
    // SAFETY: the caller's array of n entries, timeout and mask.
    let (own, t, m) = unsafe {
        let own = if n == 0 {
            Vec::new()
        } else {
            core::slice::from_raw_parts(fds, n as usize).to_vec()
        };
        (own, own_timespec(tmo), *mask)
    };
    let job = move |m: &sigset_t| {
        let mut own = own;
        let t = t
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const timespec);
        // SAFETY: arrays, timeout and mask the job owns.
        let r = unsafe { real::ppoll()(own.as_mut_ptr(), own.len() as nfds_t, t, m) };
        (r, own)
    };
    masked(Call::ppoll_mask, job, m, |own| {
        // SAFETY: the caller's array, of the same length.
        unsafe { core::ptr::copy_nonoverlapping(own.as_ptr(), fds, own.len()) }
    })
}

/// The most descriptors a poll may name (the kernel's `RLIMIT_NOFILE` rule: more is
/// `EINVAL`).
fn max_fds() -> nfds_t {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: fills a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return nfds_t::MAX;
    }
    l.rlim_cur.min(nfds_t::MAX as libc::rlim_t) as nfds_t
}

/// `pselect` with a signal mask other than the thread's own ([`masked`]).
///
/// # Safety
/// As `pselect(2)`, with `mask` not null.
#[inline(never)]
unsafe fn pselect_masked(
    nfds: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's sets (or nulls), timeout and mask.
    let (sets, t, m) = unsafe {
        let c = |p: *mut fd_set| (!p.is_null()).then(|| *p);
        ([c(r), c(w), c(e)], own_timespec(ts), *mask)
    };
    let job = move |m: &sigset_t| {
        let mut sets = sets;
        let p = |s: &mut Option<fd_set>| {
            s.as_mut()
                .map_or(core::ptr::null_mut(), |s| s as *mut fd_set)
        };
        let t = t
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const timespec);
        let [a, b, c] = &mut sets;
        // SAFETY: sets, timeout and mask the job owns.
        let n = unsafe { real::pselect()(nfds, p(a), p(b), p(c), t, m) };
        (n, sets)
    };
    masked(Call::pselect_mask, job, m, |sets| {
        for (dst, src) in [r, w, e].into_iter().zip(sets) {
            if let Some(src) = src {
                // SAFETY: the caller's set, not null since it was copied.
                unsafe { *dst = src };
            }
        }
    })
}

/// `epoll_pwait` with a signal mask other than the thread's own ([`masked`]).
///
/// # Safety
/// As `epoll_pwait(2)`, with `mask` not null.
#[inline(never)]
unsafe fn epoll_pwait_masked(
    ep: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    // The kernel's own bound on maxevents (its EINVAL otherwise).
    let limit = (i32::MAX as usize / core::mem::size_of::<epoll_event>()) as c_int;
    if max <= 0 || max > limit {
        return fail(libc::EINVAL) as c_int;
    }
    // SAFETY: the caller's mask.
    let m = unsafe { *mask };
    let job = move |m: &sigset_t| {
        // Room for as many events as the caller asked for, at most a page's worth at
        // a time of what the kernel fills in (it stops at what is ready).
        let want = max.min(4096) as usize;
        let mut own: Vec<epoll_event> = Vec::with_capacity(want);
        // SAFETY: the job's own buffer of `want` events and mask.
        let n = unsafe { real::epoll_pwait()(ep, own.as_mut_ptr(), want as c_int, timeout, m) };
        if n > 0 {
            // SAFETY: the kernel filled in the first n.
            unsafe { own.set_len(n as usize) };
        }
        (n, own)
    };
    masked(Call::epoll_pwait_mask, job, m, |own| {
        // SAFETY: the caller's buffer of at least `max` >= own.len() events.
        unsafe { core::ptr::copy_nonoverlapping(own.as_ptr(), evs, own.len()) }
    })
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
        // SAFETY: as the caller's.
        return unsafe { epoll_pwait_masked(ep, evs, max, timeout, mask) };
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
