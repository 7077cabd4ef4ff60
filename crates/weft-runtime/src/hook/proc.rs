//! Processes and names: `fork`, `waitpid`, `wait`, `getaddrinfo`.
//!
//! - `fork` from a green thread leaves a child whose one thread is the calling worker's
//!   OS thread, without the runtime's other threads; in the child that thread stops
//!   being a worker (its thread word is cleared), so every call there is the C
//!   library's and parks the OS thread: the child runs as a plain process (and may
//!   `exec`, `waitpid`, read and write as any).
//! - `waitpid` waits on a blocking-pool thread with `waitid(..., WNOWAIT)`, which
//!   leaves the child to reap; the green thread then reaps it with `WNOHANG`. Nothing
//!   is reaped on the pool, so a wait given up (a signal) loses no child. With `WNOHANG`
//!   it is the C library's.
//! - `getaddrinfo` runs on a blocking-pool thread (the resolver's own sockets and
//!   files stay there); its answer is the C library's, to free with `freeaddrinfo`.

use super::stats::{self, Call};
use super::wait::{self, Waiter};
use super::{errno, fail, green, parked, real, stop_errno};
use core::ffi::{c_char, c_int};
use libc::{addrinfo, pid_t};
use std::ffi::{CStr, CString};

/// `fork(2)`.
///
/// # Safety
/// As `fork(2)`.
pub unsafe fn fork() -> pid_t {
    // The thread stops being a worker for the call: what the C library's fork handlers
    // run (the fiber registry's copy for the child, say) must not park in the child,
    // where no runtime thread comes along; the child keeps it so (module comment).
    let w = weft_fiber::raw::thread_word();
    weft_fiber::raw::set_thread_word(core::ptr::null_mut());
    // SAFETY: passed on.
    let pid = unsafe { real::fork()() };
    if pid != 0 {
        weft_fiber::raw::set_thread_word(w);
    }
    pid
}

/// `waitpid(2)`.
///
/// # Safety
/// As `waitpid(2)`.
#[inline]
pub unsafe fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    if !green() || options & libc::WNOHANG != 0 {
        // SAFETY: passed on.
        return unsafe { real::waitpid()(pid, status, options) };
    }
    // SAFETY: as the caller's.
    unsafe { waitpid_green(Call::waitpid, pid, status, options) }
}

/// `wait(2)`: `waitpid(-1, status, 0)`.
///
/// # Safety
/// As `wait(2)`.
#[inline]
pub unsafe fn wait(status: *mut c_int) -> pid_t {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::wait()(status) };
    }
    // SAFETY: as the caller's.
    unsafe { waitpid_green(Call::wait, -1, status, 0) }
}

#[inline(never)]
unsafe fn waitpid_green(call: Call, pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    stats::call(call);
    // The waitid form of the same wait.
    let (idtype, id) = match pid {
        -1 => (libc::P_ALL, 0),
        0 => (libc::P_PGID, 0),
        p if p < -1 => (libc::P_PGID, (-p) as libc::id_t),
        p => (libc::P_PID, p as libc::id_t),
    };
    let mut which = libc::WEXITED | libc::WNOWAIT;
    if options & libc::WUNTRACED != 0 {
        which |= libc::WSTOPPED;
    }
    if options & libc::WCONTINUED != 0 {
        which |= libc::WCONTINUED;
    }
    which |= options & (libc::__WALL | libc::__WCLONE | libc::__WNOTHREAD);
    let w = Waiter::new(true);
    let mut waiting = None;
    loop {
        // SAFETY: the caller's status pointer.
        let r = unsafe { real::waitpid()(pid, status, options | libc::WNOHANG) };
        if r != 0 {
            return r;
        }
        if waiting.is_none() {
            waiting = Some(stats::Waiting::new(call, false));
            parked();
        }
        let r = wait::pool(
            move || {
                // SAFETY: into a local siginfo.
                let mut si: libc::siginfo_t = unsafe { core::mem::zeroed() };
                // SAFETY: as above.
                let r = unsafe { real::waitid()(idtype, id, &mut si, which) };
                if r < 0 {
                    errno()
                } else {
                    0
                }
            },
            false,
            Some(&w),
        );
        match r {
            // A child is waitable (or none is: the next look says ECHILD).
            Ok(_) => {}
            Err(s) => return fail(stop_errno(s)) as pid_t,
        }
    }
}

/// What the pool thread hands back: the resolver's answer, freed if nobody takes it.
struct Answer(*mut addrinfo);

// SAFETY: the list is the C library's heap memory, owned by whoever holds this.
unsafe impl Send for Answer {}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: a list from getaddrinfo, freed once.
            unsafe { libc::freeaddrinfo(self.0) };
        }
    }
}

/// `getaddrinfo(3)`, on a blocking-pool thread from a green thread.
///
/// # Safety
/// As `getaddrinfo(3)`.
#[inline]
pub unsafe fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::getaddrinfo()(node, service, hints, res) };
    }
    stats::call(Call::getaddrinfo);
    // Copies the job owns (the caller's may not outlive a shutdown).
    // SAFETY: NUL-terminated strings or null, and a hints struct or null.
    let (node, service, hints) = unsafe {
        let c = |p: *const c_char| (!p.is_null()).then(|| CStr::from_ptr(p).to_owned());
        let h = (!hints.is_null()).then(|| {
            let mut h = *hints;
            // Only flags, family, socktype and protocol are read from hints.
            h.ai_addr = core::ptr::null_mut();
            h.ai_canonname = core::ptr::null_mut();
            h.ai_next = core::ptr::null_mut();
            h.ai_addrlen = 0;
            HintsCopy(h)
        });
        (c(node), c(service), h)
    };
    let _waiting = stats::Waiting::new(Call::getaddrinfo, false);
    parked();
    let r = wait::pool(
        move || {
            let p = |s: &Option<CString>| s.as_ref().map_or(core::ptr::null(), |s| s.as_ptr());
            let h = hints
                .as_ref()
                .map_or(core::ptr::null(), |h| &h.0 as *const addrinfo);
            let mut out = core::ptr::null_mut();
            // SAFETY: strings and hints the job owns; the answer into a local.
            let r = unsafe { real::getaddrinfo()(p(&node), p(&service), h, &mut out) };
            let e = errno();
            (r, e, Answer(out))
        },
        false,
        None,
    );
    match r {
        Ok((r, e, mut a)) => {
            if r == 0 {
                // SAFETY: the caller's result pointer.
                unsafe { *res = core::mem::replace(&mut a.0, core::ptr::null_mut()) };
            } else if r == libc::EAI_SYSTEM {
                super::set_errno(e);
            }
            r
        }
        Err(s) => {
            super::set_errno(stop_errno(s));
            libc::EAI_SYSTEM
        }
    }
}

/// A copy of the caller's hints (its pointers cleared), sent to the pool thread.
struct HintsCopy(addrinfo);

// SAFETY: plain integers and null pointers.
unsafe impl Send for HintsCopy {}
