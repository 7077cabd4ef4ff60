//! Reads and writes: `read`, `readv`, `pread`, `write`, `writev`, `pwrite`, and the
//! engine the socket calls (`net.rs`) share with them.
//!
//! A transfer ([`transfer`]) is tried first without blocking, on the caller's own
//! buffers (`preadv2`/`pwritev2` with `RWF_NOWAIT`, which sockets, pipes and the page
//! cache honour; `MSG_DONTWAIT` for the socket calls). What happens next is what a
//! blocking call would do, with the waiting done by the layer:
//!
//! - a read returns what it got; a write goes on until everything is written (a
//!   blocking write to a socket or a pipe does), as does a read with `MSG_WAITALL` and
//!   a read of a disk file (which returns less only at its end);
//! - a descriptor the program made non-blocking gets `EAGAIN`;
//! - a socket or a pipe is waited on for readiness, then the call is tried again;
//!   `SO_RCVTIMEO`/`SO_SNDTIMEO` bound that wait (`EAGAIN` when nothing moved, else
//!   the count so far);
//! - a disk file, or a descriptor that refuses `RWF_NOWAIT` (a terminal), goes through
//!   an operation that waits in the kernel: io_uring's read or write, or a pool thread,
//!   through a buffer the operation owns.
//!
//! A signal, a close or the runtime's shutdown ends the wait; data already moved is
//! returned as a count, as the kernel returns a partial transfer.

use super::fd::{entry_gen, facts, kind_of};
use super::fdtab::Kind;
use super::stats::{self, Call};
use super::wait::{self, Mark, Stop, Waiter};
use super::{fail, fair, green, neg, parked, real, ret, stop_errno};
use crate::io::{bufs, Dir, OpData};
use core::ffi::{c_int, c_void};
use libc::{iovec, off_t, size_t, ssize_t};
use std::time::{Duration, Instant};

/// The most one operation through a buffer of its own moves at a time.
const OP_MAX: usize = 1 << 20;

/// The most buffers one call takes (Linux's `UIO_MAXIOV`); more is the kernel's
/// `EINVAL`.
const IOV_MAX: c_int = 1024;

/// The caller's buffers, and the part of them still to transfer.
pub(crate) struct Iov<'a> {
    v: &'a [iovec],
}

impl<'a> Iov<'a> {
    /// # Safety
    /// `v` points to `n` iovecs (n may be 0), each valid for its length, for `'a`.
    pub(crate) unsafe fn new(v: *const iovec, n: c_int) -> Iov<'a> {
        if v.is_null() || n <= 0 {
            return Iov { v: &[] };
        }
        // SAFETY: per the contract.
        Iov {
            v: unsafe { core::slice::from_raw_parts(v, n as usize) },
        }
    }

    /// Bytes in all buffers.
    pub(crate) fn total(&self) -> usize {
        self.v
            .iter()
            .fold(0usize, |a, v| a.saturating_add(v.iov_len))
    }

    /// The buffers past the first `done` bytes.
    pub(crate) fn after(&self, done: usize) -> Vec<iovec> {
        let mut skip = done;
        let mut out = Vec::with_capacity(self.v.len());
        for v in self.v {
            if skip >= v.iov_len {
                skip -= v.iov_len;
                continue;
            }
            out.push(iovec {
                // SAFETY: within the buffer (skip < its length).
                iov_base: unsafe { v.iov_base.cast::<u8>().add(skip) }.cast(),
                iov_len: v.iov_len - skip,
            });
            skip = 0;
        }
        out
    }

    /// Copies `from` into the buffers, starting `at` bytes in.
    pub(crate) fn scatter(&self, at: usize, from: &[u8]) {
        let mut src = from;
        for v in self.after(at) {
            if src.is_empty() {
                break;
            }
            let n = v.iov_len.min(src.len());
            // SAFETY: `v` is part of the caller's writable buffers.
            unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), v.iov_base.cast(), n) };
            src = &src[n..];
        }
    }

    /// A copy of `len` bytes of the buffers from `at` on.
    pub(crate) fn gather(&self, at: usize, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        for v in self.after(at) {
            let n = v.iov_len.min(len - out.len());
            // SAFETY: `v` is part of the caller's readable buffers.
            out.extend_from_slice(unsafe {
                core::slice::from_raw_parts(v.iov_base.cast::<u8>(), n)
            });
            if out.len() == len {
                break;
            }
        }
        out
    }
}

/// What a transfer is.
pub(crate) struct Xfer {
    pub call: Call,
    pub fd: c_int,
    /// A write (else a read).
    pub out: bool,
    /// Bytes asked for.
    pub total: usize,
    /// Go on until `total` even for a socket or a pipe (a read with `MSG_WAITALL`;
    /// writes always do).
    pub waitall: bool,
    /// Where a disk transfer goes: an offset (`pread`), or the file position (None).
    pub off: Option<u64>,
    /// For a read that a socket answers as `recv(2)` with these flags would (`read`,
    /// `recv`, `recvfrom` without an address): on io_uring a socket's wait is then an
    /// `IORING_OP_RECV` into a buffer of its own, which saves the call made again
    /// after a readiness wait.
    pub recv: Option<c_int>,
}

/// A socket read whose last call had to wait tries the call first again only once in
/// this many (the attempt would most likely say `EAGAIN`).
const RETRY: u32 = 8;

/// Runs transfer `x` on a green thread. `attempt(done, nowait)` makes the call on what
/// is left after `done` bytes, without waiting if `nowait` (else as the program asked:
/// only for a non-blocking descriptor) and returns the count or `-errno`; `iov` are the
/// caller's buffers (for the transfers that go through a buffer of their own).
pub(crate) fn transfer(
    x: &Xfer,
    iov: &Iov<'_>,
    mut attempt: impl FnMut(usize, bool) -> isize,
) -> isize {
    stats::call(x.call);
    let (e, gen) = entry_gen(x.fd);
    let ring_recv = x.recv.is_some() && wait::on_uring();
    let mut done = 0usize;
    let mut nowait_ok = true;
    let dir = if x.out { Dir::Write } else { Dir::Read };
    // On the thread fallback a read notes its descriptor's readiness count first (see
    // `wait::Mark`); a write seldom waits, and arms the registration when it does.
    let mark = |ring: bool| {
        if x.out || ring {
            Mark::none()
        } else {
            Mark::take(e, gen, dir)
        }
    };
    let mut m = mark(ring_recv);
    if !(ring_recv && e.is_some_and(|e| e.waited(gen, RETRY))) {
        let r = attempt(0, true);
        if r >= 0 {
            let n = r as usize;
            if let (Some(e), true) = (e, ring_recv) {
                e.ready();
            }
            if n == 0 || n >= x.total {
                fair();
                return r;
            }
            done = n;
        } else if r == -(libc::EOPNOTSUPP as isize) {
            nowait_ok = false;
        } else if r != -(libc::EAGAIN as isize) {
            return ret(r);
        }
    }
    // Short, or would block: what the descriptor is decides what comes next.
    let f = match facts(x.fd, e, gen) {
        Ok(f) => f,
        Err(err) => return if done > 0 { done as isize } else { fail(err) },
    };
    if f.nonblocking {
        if done > 0 {
            fair();
            return done as isize;
        }
        // As the program asked: the descriptor does not wait.
        let r = if nowait_ok {
            -(libc::EAGAIN as isize)
        } else {
            attempt(0, false)
        };
        fair();
        return ret(r);
    }
    let go_on = x.out || x.waitall || f.kind == Kind::Disk;
    if done > 0 && !go_on {
        fair();
        return done as isize;
    }
    let timeout = if x.out { f.sndtimeo } else { f.rcvtimeo };
    let deadline = timeout.map(|t| Instant::now() + t);
    // The kernel restarts a socket call after a signal only when it has no timeout.
    let mut w = Waiter::new(timeout.is_none());
    if let Some(e) = e {
        if w.watch(e, gen).is_err() {
            return if done > 0 {
                done as isize
            } else {
                fail(libc::EBADF)
            };
        }
    }
    let _waiting = stats::Waiting::new(x.call, false);
    parked();
    let events = if x.out { libc::POLLOUT } else { libc::POLLIN } as u32;
    let mut kind = f.kind;
    let mut spurious = 0;
    loop {
        let r = if ring_recv && kind == Kind::Socket {
            if let Some(e) = e {
                e.waiting();
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return if done > 0 {
                    done as isize
                } else {
                    fail(libc::EAGAIN)
                };
            }
            match op(x, iov, done, false, &w, left) {
                Ok(r) if r == -(libc::ECANCELED as isize) && left.is_some() => {
                    -(libc::EAGAIN as isize)
                }
                Ok(r) => {
                    if r > 0 && r as usize >= (x.total - done).min(OP_MAX) {
                        // A full buffer: more is probably there already.
                        if let Some(e) = e {
                            e.ready();
                        }
                    }
                    r
                }
                Err(s) => {
                    return if done > 0 {
                        done as isize
                    } else {
                        fail(stop_errno(s))
                    }
                }
            }
        } else if kind == Kind::Disk || !nowait_ok {
            match op(x, iov, done, kind == Kind::Disk, &w, None) {
                Ok(r) => r,
                Err(s) => {
                    return if done > 0 {
                        done as isize
                    } else {
                        fail(stop_errno(s))
                    }
                }
            }
        } else {
            let here = core::mem::replace(&mut m, Mark::none());
            if let Err(s) = wait::ready_one(x.fd, e, gen, events, here, deadline, &w) {
                return if done > 0 {
                    done as isize
                } else {
                    fail(stop_errno(s))
                };
            }
            m = mark(false);
            let r = attempt(done, true);
            if r == -(libc::EAGAIN as isize) {
                // Ready, then not: another reader was first, or the facts are stale
                // (the number names a disk file now): look again after a few.
                spurious += 1;
                if spurious % 4 == 0 && kind_of(x.fd) == Ok(Kind::Disk) {
                    kind = Kind::Disk;
                }
                continue;
            }
            if r == -(libc::EOPNOTSUPP as isize) {
                nowait_ok = false;
                continue;
            }
            r
        };
        if r < 0 {
            return if done > 0 { done as isize } else { ret(r) };
        }
        let n = r as usize;
        done += n;
        if n == 0 || done >= x.total || !(x.out || x.waitall || kind == Kind::Disk) {
            return done as isize;
        }
    }
}

/// Moves (part of) what is left through an operation with a buffer of its own: an
/// io_uring read or write, or a pool thread. `disk`: nothing interrupts it (the kernel
/// does not interrupt disk waits); otherwise a stop of `w` cancels it.
fn op(
    x: &Xfer,
    iov: &Iov<'_>,
    done: usize,
    disk: bool,
    w: &Waiter,
    timeout: Option<Duration>,
) -> Result<isize, Stop> {
    let len = (x.total - done).min(OP_MAX);
    let off = x.off.map(|o| o + done as u64);
    let buf = if x.out {
        iov.gather(done, len)
    } else {
        bufs::take(len)
    };
    let quiet;
    let w = if disk {
        quiet = Waiter::quiet();
        &quiet
    } else {
        w
    };
    let (res, buf) = if wait::on_uring() {
        let data = OpData {
            fd: x.fd,
            off,
            buf,
            ..Default::default()
        };
        let (out, recv) = (x.out, x.recv.filter(|_| !disk));
        let d = wait::ring_op(
            data,
            |d| {
                let fd = io_uring::types::Fd(d.fd);
                let o = d.off.unwrap_or(u64::MAX);
                let len = d.buf.len() as u32;
                match (out, recv) {
                    (true, _) => io_uring::opcode::Write::new(fd, d.buf.as_ptr(), len)
                        .offset(o)
                        .build(),
                    (false, Some(flags)) => {
                        io_uring::opcode::Recv::new(fd, d.buf.as_mut_ptr(), len)
                            .flags(flags)
                            .build()
                    }
                    (false, None) => io_uring::opcode::Read::new(fd, d.buf.as_mut_ptr(), len)
                        .offset(o)
                        .build(),
                }
            },
            timeout,
            w,
            true,
        )?;
        (d.res as isize, d.data.buf)
    } else {
        let (fd, out) = (x.fd, x.out);
        wait::pool(
            move || {
                let mut buf = buf;
                let p = buf.as_mut_ptr().cast::<c_void>();
                let n = buf.len();
                // SAFETY: plain calls on the caller's descriptor into (from) a buffer
                // the job owns.
                let r = unsafe {
                    match (out, off) {
                        (false, None) => real::read()(fd, p, n),
                        (false, Some(o)) => real::pread64()(fd, p, n, o as off_t),
                        (true, None) => real::write()(fd, p, n),
                        (true, Some(o)) => real::pwrite64()(fd, p, n, o as off_t),
                    }
                };
                (neg(r), buf)
            },
            true,
            None,
        )?
    };
    if !x.out && res > 0 {
        iov.scatter(done, &buf[..res as usize]);
    }
    if x.out {
        bufs::give_copy(buf);
    } else {
        bufs::give(buf);
    }
    Ok(res)
}

/// `preadv2`/`pwritev2` of what is left after `done` bytes, `RWF_NOWAIT` if `nowait`;
/// the count or `-errno`.
fn rw_attempt(
    fd: c_int,
    iov: &Iov<'_>,
    off: Option<u64>,
    out: bool,
    done: usize,
    nowait: bool,
) -> isize {
    let rest = iov.after(done);
    let o = off.map_or(-1, |o| (o + done as u64) as off_t);
    let flags = if nowait { libc::RWF_NOWAIT } else { 0 };
    // SAFETY: `rest` points into the caller's buffers (readable for a write, writable
    // for a read); preadv2 and pwritev2 are not overridden.
    let r = unsafe {
        if out {
            libc::pwritev2(fd, rest.as_ptr(), rest.len() as c_int, o, flags)
        } else {
            libc::preadv2(fd, rest.as_ptr(), rest.len() as c_int, o, flags)
        }
    };
    let r = neg(r);
    // A kernel or file that does not know RWF_NOWAIT says EINVAL or EOPNOTSUPP.
    if nowait && r == -(libc::EINVAL as isize) {
        return -(libc::EOPNOTSUPP as isize);
    }
    r
}

/// One descriptor, with buffers `iov`, at `off`: the read and write calls on a green
/// thread. Out of line: the functions below stay a thread-local test and a jump to the
/// C library's on every other thread (no frame to set up).
#[inline(never)]
unsafe fn rw(call: Call, fd: c_int, iov: &Iov<'_>, off: Option<u64>, out: bool) -> isize {
    let total = iov.total();
    if total == 0 {
        // Nothing to wait for: the kernel's answer (0, or an error for a bad
        // descriptor) at once.
        return ret(rw_attempt(fd, iov, off, out, 0, false));
    }
    let x = Xfer {
        call,
        fd,
        out,
        total,
        waitall: false,
        off,
        // A read at the file position is, on a socket, a recv without flags.
        recv: (!out && off.is_none()).then_some(0),
    };
    transfer(&x, iov, |done, nowait| {
        rw_attempt(fd, iov, off, out, done, nowait)
    })
}

/// [`rw`] with one buffer (out of line, as `rw`).
#[inline(never)]
unsafe fn rw1(
    call: Call,
    fd: c_int,
    p: *mut c_void,
    n: size_t,
    off: Option<u64>,
    out: bool,
) -> isize {
    let v = iovec {
        iov_base: p,
        iov_len: n,
    };
    // SAFETY: one iovec over the caller's buffer.
    unsafe { rw(call, fd, &Iov::new(&v, 1), off, out) }
}

/// [`rw`] with the caller's iovecs (out of line, as `rw`).
#[inline(never)]
unsafe fn rwv(call: Call, fd: c_int, iov: *const iovec, n: c_int, out: bool) -> isize {
    // SAFETY: the caller's iovecs.
    unsafe { rw(call, fd, &Iov::new(iov, n), None, out) }
}

/// `read(2)`.
///
/// # Safety
/// As `read(2)`.
#[inline]
pub unsafe fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::read()(fd, buf, n) };
    }
    // SAFETY: the caller's buffer.
    unsafe { rw1(Call::read, fd, buf, n, None, false) }
}

/// `readv(2)`.
///
/// # Safety
/// As `readv(2)`.
#[inline]
pub unsafe fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if !green() || !(0..=IOV_MAX).contains(&n) {
        // SAFETY: passed on.
        return unsafe { real::readv()(fd, iov, n) };
    }
    // SAFETY: the caller's iovecs.
    unsafe { rwv(Call::readv, fd, iov, n, false) }
}

/// `pread(2)`.
///
/// # Safety
/// As `pread(2)`.
#[inline]
pub unsafe fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: as the caller's.
    unsafe { pread64(fd, buf, n, off) }
}

/// `pread64`: glibc's name of `pread` with a 64-bit offset (the same on 64-bit
/// systems).
///
/// # Safety
/// As `pread(2)`.
#[inline]
pub unsafe fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    if !green() || off < 0 {
        // SAFETY: passed on.
        return unsafe { real::pread64()(fd, buf, n, off) };
    }
    // SAFETY: the caller's buffer.
    unsafe { rw1(Call::pread, fd, buf, n, Some(off as u64), false) }
}

/// `write(2)`.
///
/// # Safety
/// As `write(2)`.
#[inline]
pub unsafe fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::write()(fd, buf, n) };
    }
    // SAFETY: the caller's buffer.
    unsafe { rw1(Call::write, fd, buf.cast_mut(), n, None, true) }
}

/// `writev(2)`.
///
/// # Safety
/// As `writev(2)`.
#[inline]
pub unsafe fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if !green() || !(0..=IOV_MAX).contains(&n) {
        // SAFETY: passed on.
        return unsafe { real::writev()(fd, iov, n) };
    }
    // SAFETY: the caller's iovecs.
    unsafe { rwv(Call::writev, fd, iov, n, true) }
}

/// `pwrite(2)`.
///
/// # Safety
/// As `pwrite(2)`.
#[inline]
pub unsafe fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    // SAFETY: as the caller's.
    unsafe { pwrite64(fd, buf, n, off) }
}

/// `pwrite64`: as [`pwrite`].
///
/// # Safety
/// As `pwrite(2)`.
#[inline]
pub unsafe fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    if !green() || off < 0 {
        // SAFETY: passed on.
        return unsafe { real::pwrite64()(fd, buf, n, off) };
    }
    // SAFETY: the caller's buffer.
    unsafe { rw1(Call::pwrite, fd, buf.cast_mut(), n, Some(off as u64), true) }
}
