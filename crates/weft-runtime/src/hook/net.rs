//! Socket calls: `recv`, `recvfrom`, `recvmsg`, `send`, `sendto`, `sendmsg` (through
//! the engine of `rw.rs`, tried with `MSG_DONTWAIT`), `accept`, `accept4` and
//! `connect` (io_uring operations, or a pool thread on the thread fallback).
//!
//! A call whose flags have `MSG_DONTWAIT` does not wait and is the C library's own.
//! `MSG_WAITALL` reads go on until the buffer is full, as the kernel's do; with
//! `MSG_PEEK` too (which a loop of non-blocking calls cannot do: nothing is consumed)
//! the call is made on a pool thread.

use super::fd::{entry_gen, facts};
use super::fdtab::{self, Kind};
use super::rw::{transfer, Iov, Xfer};
use super::stats::{self, Call};
use super::wait::{self, Stop, Waiter};
use super::{errno, fail, fair, green, neg, parked, real, ret, stop_errno};
use crate::io::{OpData, SockAddr};
use core::ffi::{c_int, c_void};
use libc::{iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::time::Instant;

/// recv-like calls: `attempt(done, flags)` receives into what is left.
fn input(
    call: Call,
    fd: c_int,
    iov: &Iov<'_>,
    flags: c_int,
    ring_flags: bool,
    mut attempt: impl FnMut(usize, c_int) -> isize,
) -> isize {
    let total = iov.total();
    if flags & libc::MSG_PEEK != 0 && flags & libc::MSG_WAITALL != 0 {
        stats::call(call);
        return peek_all(fd, iov, flags);
    }
    let x = Xfer {
        call,
        fd,
        out: false,
        total,
        waitall: flags & libc::MSG_WAITALL != 0 && total > 0,
        off: None,
        recv: ring_flags.then_some(flags & !(libc::MSG_WAITALL | libc::MSG_DONTWAIT)),
    };
    transfer(&x, iov, |done, nowait| {
        attempt(
            done,
            if nowait {
                flags | libc::MSG_DONTWAIT
            } else {
                flags
            },
        )
    })
}

/// send-like calls: `attempt(done, flags)` sends what is left.
fn output(
    call: Call,
    fd: c_int,
    iov: &Iov<'_>,
    flags: c_int,
    mut attempt: impl FnMut(usize, c_int) -> isize,
) -> isize {
    let x = Xfer {
        call,
        fd,
        out: true,
        total: iov.total(),
        waitall: true,
        off: None,
        recv: None,
    };
    transfer(&x, iov, |done, nowait| {
        attempt(
            done,
            if nowait {
                flags | libc::MSG_DONTWAIT
            } else {
                flags
            },
        )
    })
}

/// `recv` with `MSG_PEEK | MSG_WAITALL` on a pool thread (module comment).
fn peek_all(fd: c_int, iov: &Iov<'_>, flags: c_int) -> isize {
    let len = iov.total();
    let r = wait::pool(
        move || {
            let mut buf = vec![0u8; len];
            // SAFETY: into a buffer the job owns.
            let r = unsafe { real::recv()(fd, buf.as_mut_ptr().cast(), len, flags) };
            (neg(r), buf)
        },
        false,
        None,
    );
    match r {
        Ok((n, buf)) => {
            if n > 0 {
                iov.scatter(0, &buf[..n as usize]);
            }
            ret(n)
        }
        Err(s) => fail(stop_errno(s)),
    }
}

/// `recv(2)`.
///
/// # Safety
/// As `recv(2)`.
#[inline]
pub unsafe fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: passed on.
        return unsafe { real::recv()(fd, buf, n, flags) };
    }
    // SAFETY: the caller's buffer.
    unsafe {
        let from = (core::ptr::null_mut(), core::ptr::null_mut());
        recvfrom_green(Call::recv, fd, buf, n, flags, from)
    }
}

/// `recv` and `recvfrom` on a green thread (out of line: the functions that call it
/// stay a thread-local test and a jump to the C library's on every other thread).
/// `from` is where the sender's address goes (null for none).
#[inline(never)]
unsafe fn recvfrom_green(
    call: Call,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    from: (*mut sockaddr, *mut socklen_t),
) -> ssize_t {
    let (addr, len) = from;
    let v = iovec {
        iov_base: buf,
        iov_len: n,
    };
    // SAFETY: one iovec over the caller's buffer.
    let iov = unsafe { Iov::new(&v, 1) };
    input(call, fd, &iov, flags, addr.is_null(), |done, fl| {
        // SAFETY: within the caller's buffer (`done` <= `n`); the caller's address buffer.
        neg(unsafe { real::recvfrom()(fd, buf.byte_add(done), n - done, fl, addr, len) })
    })
}

/// `recvfrom(2)`.
///
/// # Safety
/// As `recvfrom(2)`.
#[inline]
pub unsafe fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: passed on.
        return unsafe { real::recvfrom()(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's buffers.
    unsafe { recvfrom_green(Call::recvfrom, fd, buf, n, flags, (addr, len)) }
}

/// `recvmsg(2)`.
///
/// # Safety
/// As `recvmsg(2)`.
#[inline]
pub unsafe fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 || msg.is_null() {
        // SAFETY: passed on.
        return unsafe { real::recvmsg()(fd, msg, flags) };
    }
    // SAFETY: the caller's message header.
    unsafe { recvmsg_green(fd, msg, flags) }
}

#[inline(never)]
unsafe fn recvmsg_green(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's message header and its iovecs.
    unsafe {
        let iov = Iov::new((*msg).msg_iov, (*msg).msg_iovlen as c_int);
        let first = *msg;
        input(Call::recvmsg, fd, &iov, flags, false, |done, fl| {
            if done == 0 {
                return neg(real::recvmsg()(fd, msg, fl));
            }
            // The rest of a MSG_WAITALL read: into the rest of the buffers, without
            // the address and ancillary data the first part received.
            let rest = iov.after(done);
            let mut m = first;
            m.msg_iov = rest.as_ptr().cast_mut();
            m.msg_iovlen = rest.len() as _;
            m.msg_name = core::ptr::null_mut();
            m.msg_namelen = 0;
            m.msg_control = core::ptr::null_mut();
            m.msg_controllen = 0;
            let r = neg(real::recvmsg()(fd, &mut m, fl));
            (*msg).msg_flags |= m.msg_flags;
            r
        })
    }
}

/// `send(2)`.
///
/// # Safety
/// As `send(2)`.
#[inline]
pub unsafe fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: passed on.
        return unsafe { real::send()(fd, buf, n, flags) };
    }
    // SAFETY: the caller's buffer.
    unsafe { sendto_green(Call::send, fd, buf, n, flags, (core::ptr::null(), 0)) }
}

/// `send` and `sendto` on a green thread (out of line, as [`recvfrom_green`]); `to` is
/// the address to send to (null for the connected peer).
#[inline(never)]
unsafe fn sendto_green(
    call: Call,
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    to: (*const sockaddr, socklen_t),
) -> ssize_t {
    let (addr, len) = to;
    let v = iovec {
        iov_base: buf.cast_mut(),
        iov_len: n,
    };
    // SAFETY: one iovec over the caller's buffer.
    let iov = unsafe { Iov::new(&v, 1) };
    output(call, fd, &iov, flags, |done, fl| {
        // SAFETY: within the caller's buffer (`done` <= `n`); the caller's address.
        neg(unsafe { real::sendto()(fd, buf.byte_add(done), n - done, fl, addr, len) })
    })
}

/// `sendto(2)`.
///
/// # Safety
/// As `sendto(2)`.
#[inline]
pub unsafe fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: passed on.
        return unsafe { real::sendto()(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's buffer and address.
    unsafe { sendto_green(Call::sendto, fd, buf, n, flags, (addr, len)) }
}

/// `sendmsg(2)`.
///
/// # Safety
/// As `sendmsg(2)`.
#[inline]
pub unsafe fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if !green() || flags & libc::MSG_DONTWAIT != 0 || msg.is_null() {
        // SAFETY: passed on.
        return unsafe { real::sendmsg()(fd, msg, flags) };
    }
    // SAFETY: the caller's message header.
    unsafe { sendmsg_green(fd, msg, flags) }
}

#[inline(never)]
unsafe fn sendmsg_green(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's message header and its iovecs.
    unsafe {
        let iov = Iov::new((*msg).msg_iov, (*msg).msg_iovlen as c_int);
        let first = *msg;
        output(Call::sendmsg, fd, &iov, flags, |done, fl| {
            if done == 0 {
                return neg(real::sendmsg()(fd, msg, fl));
            }
            // The rest: the ancillary data went with the first part.
            let rest = iov.after(done);
            let mut m = first;
            m.msg_iov = rest.as_ptr().cast_mut();
            m.msg_iovlen = rest.len() as _;
            m.msg_control = core::ptr::null_mut();
            m.msg_controllen = 0;
            neg(real::sendmsg()(fd, &m, fl))
        })
    }
}

/// `accept(2)`.
///
/// # Safety
/// As `accept(2)`.
#[inline]
pub unsafe fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    if !green() {
        // SAFETY: passed on.
        let r = unsafe { real::accept()(fd, addr, len) };
        if r >= 0 {
            fdtab::created(r);
        }
        return r;
    }
    // SAFETY: the caller's address buffer.
    unsafe { accept_green(Call::accept, fd, addr, len, 0) }
}

/// `accept4(2)`.
///
/// # Safety
/// As `accept4(2)`.
#[inline]
pub unsafe fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    if !green() {
        // SAFETY: passed on.
        let r = unsafe { real::accept4()(fd, addr, len, flags) };
        if r >= 0 {
            fdtab::created(r);
        }
        return r;
    }
    // SAFETY: the caller's address buffer.
    unsafe { accept_green(Call::accept4, fd, addr, len, flags) }
}

/// An accept on a green thread: the C library's on a non-blocking socket; otherwise an
/// `IORING_OP_ACCEPT` (with `SO_RCVTIMEO` as a linked timeout), or on the thread
/// fallback a wait for readiness and the accept on a pool thread.
#[inline(never)]
unsafe fn accept_green(
    call: Call,
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    stats::call(call);
    let (e, gen) = entry_gen(fd);
    let f = match facts(fd, e, gen) {
        Ok(f) => f,
        Err(err) => return fail(err) as c_int,
    };
    if f.nonblocking || f.kind != Kind::Socket {
        // SAFETY: passed on (it does not wait, or fails as it would).
        let r = unsafe { real::accept4()(fd, addr, len, flags) };
        if r >= 0 {
            fdtab::created(r);
        }
        fair();
        return r;
    }
    let mut w = Waiter::new(f.rcvtimeo.is_none());
    if let Some(e) = e {
        if w.watch(e, gen).is_err() {
            return fail(libc::EBADF) as c_int;
        }
    }
    let _waiting = stats::Waiting::new(call, false);
    parked();
    let r = if wait::on_uring() {
        let data = OpData {
            fd,
            flags,
            ..Default::default()
        };
        let d = wait::ring_op(
            data,
            |d| {
                io_uring::opcode::Accept::new(
                    io_uring::types::Fd(d.fd),
                    (&mut d.addr.storage as *mut libc::sockaddr_storage).cast(),
                    &mut d.addr.len,
                )
                .flags(d.flags)
                .build()
            },
            f.rcvtimeo,
            &w,
            true,
        );
        match d {
            Ok(d) if d.res == -(libc::ECANCELED as i64) && f.rcvtimeo.is_some() => {
                Err(Stop::TimedOut)
            }
            Ok(d) => Ok((d.res, d.data.addr)),
            Err(s) => Err(s),
        }
    } else {
        accept_pool(
            fd,
            e,
            gen,
            flags,
            f.rcvtimeo.map(|t| Instant::now() + t),
            &w,
        )
    };
    match r {
        Ok((n, a)) if n >= 0 => {
            fdtab::created(n as c_int);
            // SAFETY: the caller's address buffer and its length.
            unsafe { copy_addr(&a, addr, len) };
            n as c_int
        }
        Ok((n, _)) => fail(-n as c_int) as c_int,
        Err(s) => fail(stop_errno(s)) as c_int,
    }
}

/// The thread fallback's accept: readiness, then the accept on a pool thread (which
/// returns at once unless another thread took the connection first).
fn accept_pool(
    fd: c_int,
    e: Option<&'static fdtab::Entry>,
    gen: u32,
    flags: c_int,
    deadline: Option<Instant>,
    w: &Waiter,
) -> Result<(i64, SockAddr), Stop> {
    wait::ready_one(
        fd,
        e,
        gen,
        libc::POLLIN as u32,
        wait::Mark::none(),
        deadline,
        w,
    )?;
    wait::pool(
        move || {
            let mut a = SockAddr::default();
            // SAFETY: into a local address buffer.
            let r = unsafe {
                real::accept4()(
                    fd,
                    (&mut a.storage as *mut libc::sockaddr_storage).cast(),
                    &mut a.len,
                    flags,
                )
            };
            (if r < 0 { -(errno() as i64) } else { r as i64 }, a)
        },
        true,
        None,
    )
}

/// Copies an address the kernel gave into the caller's buffer, as the kernel does:
/// cut to the buffer, with the full length in `*len`.
///
/// # Safety
/// `addr` is null or writable for `*len` bytes; `len` is null or valid.
unsafe fn copy_addr(a: &SockAddr, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: per the contract.
    unsafe {
        let n = (*len).min(a.len) as usize;
        core::ptr::copy_nonoverlapping(
            (&a.storage as *const libc::sockaddr_storage).cast::<u8>(),
            addr.cast::<u8>(),
            n,
        );
        *len = a.len;
    }
}

/// `connect(2)`.
///
/// # Safety
/// As `connect(2)`.
#[inline]
pub unsafe fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::connect()(fd, addr, len) };
    }
    // SAFETY: the caller's address.
    unsafe { connect_green(fd, addr, len) }
}

/// A connect on a green thread: the C library's on a non-blocking socket (it says
/// `EINPROGRESS`); otherwise an `IORING_OP_CONNECT` (`SO_SNDTIMEO` as a linked timeout:
/// then `EINPROGRESS`, the attempt going on, as the kernel's timeout does), or on the
/// thread fallback the connect on a pool thread.
#[inline(never)]
unsafe fn connect_green(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    stats::call(Call::connect);
    let (e, gen) = entry_gen(fd);
    let f = match facts(fd, e, gen) {
        Ok(f) => f,
        Err(err) => return fail(err) as c_int,
    };
    let max = core::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    if f.nonblocking || f.kind != Kind::Socket || addr.is_null() || len > max {
        // SAFETY: passed on (it does not wait, or fails as it would).
        let r = unsafe { real::connect()(fd, addr, len) };
        fair();
        return r;
    }
    let mut a = SockAddr::default();
    // SAFETY: `len` bytes of the caller's address, which fit.
    unsafe {
        core::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (&mut a.storage as *mut libc::sockaddr_storage).cast::<u8>(),
            len as usize,
        )
    };
    a.len = len;
    // After a signal the attempt goes on in the background (as the kernel's does):
    // the call fails with EINTR unless the handler asks for a restart.
    let mut w = Waiter::new(f.sndtimeo.is_none());
    if let Some(e) = e {
        if w.watch(e, gen).is_err() {
            return fail(libc::EBADF) as c_int;
        }
    }
    let _waiting = stats::Waiting::new(Call::connect, false);
    parked();
    let r = if wait::on_uring() {
        let data = OpData {
            fd,
            addr: a,
            ..Default::default()
        };
        match wait::ring_op(data, crate::io::connect_sqe, f.sndtimeo, &w, true) {
            Ok(d) if d.res == -(libc::ECANCELED as i64) && f.sndtimeo.is_some() => {
                Ok(-(libc::EINPROGRESS as i64))
            }
            Ok(d) => Ok(d.res),
            Err(s) => Err(s),
        }
    } else {
        wait::pool(
            move || {
                // SAFETY: an address the job owns.
                let r = unsafe {
                    real::connect()(
                        fd,
                        (&a.storage as *const libc::sockaddr_storage).cast(),
                        a.len,
                    )
                };
                if r < 0 {
                    -(errno() as i64)
                } else {
                    0
                }
            },
            false,
            Some(&w),
        )
    };
    match r {
        Ok(0) => 0,
        Ok(n) => fail(-n as c_int) as c_int,
        Err(s) => fail(stop_errno(s)) as c_int,
    }
}
