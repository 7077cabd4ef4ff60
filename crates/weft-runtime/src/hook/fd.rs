//! Descriptors: what the layer learns of them (`facts`), and the calls that make,
//! change, close and flush them.
//!
//! Calls that give out a descriptor (`socket`, `pipe`, `dup`, `open`, ...) tell the
//! table the number means something new; `close`, `dup2`, `dup3` and `fclose` wake
//! the green threads waiting on the number they close; `fcntl(F_SETFL)`,
//! `ioctl(FIONBIO)` and `setsockopt` of a timeout make the layer ask the kernel again.
//! These run on every thread (a descriptor is the process's), for the price of a
//! table update beside the system call.

use super::fdtab::{self, Entry, Kind, FLAG_EPOCH, TIMEO_EPOCH};
use super::stats::{self, Call};
use super::wait::{self, Waiter};
use super::{errno, fail, green, real, stop_errno};
use crate::io::OpData;
use core::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use core::sync::atomic::Ordering::*;
use libc::{mode_t, socklen_t, FILE};
use std::ffi::{CStr, CString};
use std::time::Duration;

/// What a call needs to know of a descriptor to wait on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts {
    pub kind: Kind,
    /// The program made it non-blocking (its open file has `O_NONBLOCK`).
    pub nonblocking: bool,
    /// A socket's `SO_RCVTIMEO` and `SO_SNDTIMEO` (None: none).
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
}

/// The facts of `fd` in generation `gen` of its entry (from the table, or asked of the
/// kernel and kept). `Err(errno)` if the kernel refuses (the descriptor is not open).
pub(crate) fn facts(fd: c_int, e: Option<&Entry>, gen: u32) -> Result<Facts, c_int> {
    let kind = match e.and_then(|e| e.kind(gen)) {
        Some(k) => k,
        None => {
            let k = kind_of(fd)?;
            if let Some(e) = e {
                e.set_kind(gen, k);
            }
            k
        }
    };
    let nonblocking = match e.and_then(|e| e.nonblocking(gen)) {
        Some(nb) => nb,
        None => {
            let epoch = FLAG_EPOCH.load(Acquire);
            // SAFETY: F_GETFL takes no argument.
            let fl = unsafe { real::fcntl()(fd, libc::F_GETFL) };
            if fl < 0 {
                return Err(errno());
            }
            let nb = fl & libc::O_NONBLOCK != 0;
            if let Some(e) = e {
                e.set_nonblocking(gen, epoch, nb);
            }
            nb
        }
    };
    let (rcv, snd) = if kind != Kind::Socket {
        (0, 0)
    } else {
        match e.and_then(|e| e.timeouts(gen)) {
            Some(t) => t,
            None => {
                let epoch = TIMEO_EPOCH.load(Acquire);
                let t = (
                    sock_timeout(fd, libc::SO_RCVTIMEO),
                    sock_timeout(fd, libc::SO_SNDTIMEO),
                );
                if let Some(e) = e {
                    e.set_timeouts(gen, epoch, t.0, t.1);
                }
                t
            }
        }
    };
    let d = |us: u64| (us != 0).then(|| Duration::from_micros(us));
    Ok(Facts {
        kind,
        nonblocking,
        rcvtimeo: d(rcv),
        sndtimeo: d(snd),
    })
}

/// What kind of file `fd` names (`fstat`).
pub(crate) fn kind_of(fd: c_int) -> Result<Kind, c_int> {
    // SAFETY: fstat into a local.
    let mut st: libc::stat64 = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat64(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFREG | libc::S_IFBLK | libc::S_IFDIR => Kind::Disk,
        _ => Kind::Other,
    })
}

/// A socket timeout in microseconds (0: none, or not asked for).
fn sock_timeout(fd: c_int, opt: c_int) -> u64 {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = core::mem::size_of::<libc::timeval>() as socklen_t;
    // SAFETY: getsockopt into a local timeval.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return 0;
    }
    (tv.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000)
        .saturating_add(tv.tv_usec.max(0) as u64)
}

/// The entry of `fd` and its generation now.
pub(crate) fn entry_gen(fd: c_int) -> (Option<&'static Entry>, u32) {
    match fdtab::entry(fd) {
        Some(e) => (Some(e), e.gen()),
        None => (None, 0),
    }
}

/// A descriptor given out by a call: tell the table (a failed call gives none).
#[inline]
fn made(fd: c_int) -> c_int {
    if fd >= 0 {
        fdtab::created(fd);
    }
    fd
}

// ---------------------------------------------------------------------------------
// Calls that make descriptors

/// `socket(2)`.
///
/// # Safety
/// As `socket(2)`.
pub unsafe fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::socket()(domain, ty, proto) })
}

/// `socketpair(2)`.
///
/// # Safety
/// As `socketpair(2)`.
pub unsafe fn socketpair(domain: c_int, ty: c_int, proto: c_int, sv: *mut c_int) -> c_int {
    // SAFETY: passed on; on success the kernel wrote two descriptors.
    unsafe {
        let r = real::socketpair()(domain, ty, proto, sv);
        if r == 0 {
            made(*sv);
            made(*sv.add(1));
        }
        r
    }
}

/// `pipe(2)`.
///
/// # Safety
/// As `pipe(2)`.
pub unsafe fn pipe(fds: *mut c_int) -> c_int {
    // SAFETY: passed on; on success the kernel wrote two descriptors.
    unsafe {
        let r = real::pipe()(fds);
        if r == 0 {
            made(*fds);
            made(*fds.add(1));
        }
        r
    }
}

/// `pipe2(2)`.
///
/// # Safety
/// As `pipe2(2)`.
pub unsafe fn pipe2(fds: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: as `pipe`.
    unsafe {
        let r = real::pipe2()(fds, flags);
        if r == 0 {
            made(*fds);
            made(*fds.add(1));
        }
        r
    }
}

/// `eventfd(2)`.
///
/// # Safety
/// As `eventfd(2)`.
pub unsafe fn eventfd(init: c_uint, flags: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::eventfd()(init, flags) })
}

/// `epoll_create(2)`.
///
/// # Safety
/// As `epoll_create(2)`.
pub unsafe fn epoll_create(size: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::epoll_create()(size) })
}

/// `epoll_create1(2)`.
///
/// # Safety
/// As `epoll_create1(2)`.
pub unsafe fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::epoll_create1()(flags) })
}

/// `dup(2)`.
///
/// # Safety
/// As `dup(2)`.
pub unsafe fn dup(old: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::dup()(old) })
}

/// `dup2(2)`: a descriptor replaced this way is closed, and its waiters woken.
///
/// # Safety
/// As `dup2(2)`.
pub unsafe fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::dup2()(old, new) };
    if r >= 0 && old != new {
        fdtab::created(r);
    }
    r
}

/// `dup3(2)`: as [`dup2`].
///
/// # Safety
/// As `dup3(2)`.
pub unsafe fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: passed on.
    made(unsafe { real::dup3()(old, new, flags) })
}

/// `fcntl(2)`, with one argument (an integer or a pointer, passed on as it came).
///
/// # Safety
/// As `fcntl(2)`.
pub unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: as the caller's.
    unsafe { fcntl_with(real::fcntl(), fd, cmd, arg) }
}

/// `fcntl64`, glibc's name of `fcntl` for 64-bit offsets: as [`fcntl`].
///
/// # Safety
/// As `fcntl(2)`.
pub unsafe fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: as the caller's.
    unsafe { fcntl_with(real::fcntl64(), fd, cmd, arg) }
}

unsafe fn fcntl_with(
    f: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
    fd: c_int,
    cmd: c_int,
    arg: usize,
) -> c_int {
    match cmd {
        libc::F_SETFL => {
            // SAFETY: passed on.
            let r = unsafe { f(fd, cmd, arg) };
            if r == 0 {
                FLAG_EPOCH.fetch_add(1, AcqRel);
            }
            r
        }
        // SAFETY: passed on.
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => made(unsafe { f(fd, cmd, arg) }),
        libc::F_SETLKW | libc::F_OFD_SETLKW => {
            if green() {
                stats::uncovered(Call::fcntl_lock);
            }
            // SAFETY: passed on.
            unsafe { f(fd, cmd, arg) }
        }
        // SAFETY: passed on.
        _ => unsafe { f(fd, cmd, arg) },
    }
}

/// `ioctl(2)`, with one argument.
///
/// # Safety
/// As `ioctl(2)`.
pub unsafe fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::ioctl()(fd, req, arg) };
    if r == 0 && req == libc::FIONBIO as c_ulong {
        FLAG_EPOCH.fetch_add(1, AcqRel);
    }
    r
}

/// `setsockopt(2)`.
///
/// # Safety
/// As `setsockopt(2)`.
pub unsafe fn setsockopt(
    fd: c_int,
    level: c_int,
    opt: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::setsockopt()(fd, level, opt, val, len) };
    // SO_RCVTIMEO_NEW / SO_SNDTIMEO_NEW (66, 67): the 64-bit-time names.
    if r == 0
        && level == libc::SOL_SOCKET
        && matches!(opt, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO | 66 | 67)
    {
        TIMEO_EPOCH.fetch_add(1, AcqRel);
    }
    r
}

// ---------------------------------------------------------------------------------
// Opening

/// `open(2)`.
///
/// # Safety
/// As `open(2)`; `mode` is read only with `O_CREAT` or `O_TMPFILE`.
pub unsafe fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return made(unsafe { real::open()(path, flags, mode) });
    }
    // SAFETY: passed on.
    unsafe { open_green(Call::open, libc::AT_FDCWD, path, flags, mode) }
}

/// `open64`: as [`open`].
///
/// # Safety
/// As `open(2)`.
pub unsafe fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return made(unsafe { real::open64()(path, flags, mode) });
    }
    // SAFETY: passed on.
    unsafe {
        open_green(
            Call::open,
            libc::AT_FDCWD,
            path,
            flags | libc::O_LARGEFILE,
            mode,
        )
    }
}

/// `openat(2)`.
///
/// # Safety
/// As `openat(2)`.
pub unsafe fn openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return made(unsafe { real::openat()(dir, path, flags, mode) });
    }
    // SAFETY: passed on.
    unsafe { open_green(Call::openat, dir, path, flags, mode) }
}

/// `openat64`: as [`openat`].
///
/// # Safety
/// As `openat(2)`.
pub unsafe fn openat64(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return made(unsafe { real::openat64()(dir, path, flags, mode) });
    }
    // SAFETY: passed on.
    unsafe { open_green(Call::openat, dir, path, flags | libc::O_LARGEFILE, mode) }
}

/// `creat(2)`: `open` with `O_CREAT | O_WRONLY | O_TRUNC`.
///
/// # Safety
/// As `creat(2)`.
pub unsafe fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: passed on.
    unsafe { open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// `creat64`: as [`creat`].
///
/// # Safety
/// As `creat(2)`.
pub unsafe fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: passed on.
    unsafe { open64(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

/// An open from a green thread: on io_uring an `IORING_OP_OPENAT`; on the thread
/// fallback a pool thread. io_uring first tries an open without waiting, with
/// `O_NONBLOCK` added (and taken away after): for a FIFO or a device that changes what
/// the open does (a FIFO opened for reading would not wait for a writer, one opened for
/// writing fails with `ENXIO`), so an open of one of those without `O_NONBLOCK` is made
/// again on a pool thread, as `open(2)` makes it.
#[inline(never)]
unsafe fn open_green(
    call: Call,
    dir: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    stats::call(call);
    if path.is_null() {
        return fail(libc::EFAULT) as c_int;
    }
    // SAFETY: a NUL-terminated path (the caller's contract).
    let p = unsafe { CStr::from_ptr(path) }.to_owned();
    let _w = stats::Waiting::new(call, false);
    super::parked();
    let r = if wait::on_uring() {
        let r = open_ring(dir, &p, flags, mode);
        let special = |fd: c_int| matches!(kind_of(fd), Ok(Kind::Other));
        if flags & libc::O_NONBLOCK == 0
            && flags & libc::O_PATH == 0
            && (r == -(libc::ENXIO as i64) || (r >= 0 && special(r as c_int)))
        {
            if r >= 0 {
                // SAFETY: the descriptor we just opened.
                unsafe { real::close()(r as c_int) };
            }
            open_pool(dir, p, flags, mode)
        } else {
            r
        }
    } else {
        open_pool(dir, p, flags, mode)
    };
    if r >= 0 {
        made(r as c_int)
    } else {
        fail(-r as c_int) as c_int
    }
}

fn open_ring(dir: c_int, p: &CStr, flags: c_int, mode: c_uint) -> i64 {
    let data = OpData {
        fd: dir,
        path: Some(p.to_owned()),
        flags,
        mode,
        ..Default::default()
    };
    let w = Waiter::quiet();
    match wait::ring_op(
        data,
        |d| {
            io_uring::opcode::OpenAt::new(
                io_uring::types::Fd(d.fd),
                d.path.as_ref().expect("set").as_ptr(),
            )
            .flags(d.flags)
            .mode(d.mode)
            .build()
        },
        None,
        &w,
        true,
    ) {
        Ok(d) => d.res,
        Err(s) => -(stop_errno(s) as i64),
    }
}

fn open_pool(dir: c_int, p: CString, flags: c_int, mode: c_uint) -> i64 {
    let r = wait::pool(
        move || {
            // SAFETY: a NUL-terminated path we own; the C library's openat.
            let fd = unsafe { real::openat()(dir, p.as_ptr(), flags, mode) };
            if fd < 0 {
                -(errno() as i64)
            } else {
                fd as i64
            }
        },
        true,
        None,
    );
    r.unwrap_or_else(|s| -(stop_errno(s) as i64))
}

// ---------------------------------------------------------------------------------
// Closing

/// `close(2)`: wakes every green thread waiting on the descriptor (its call fails with
/// `EBADF`); from a green thread on io_uring the close is an `IORING_OP_CLOSE` it waits
/// for.
///
/// # Safety
/// As `close(2)`.
pub unsafe fn close(fd: c_int) -> c_int {
    let c = fdtab::closing(fd);
    let r = if green() {
        close_green(fd)
    } else {
        // SAFETY: passed on.
        unsafe { real::close()(fd) }
    };
    c.done();
    r
}

#[inline(never)]
fn close_green(fd: c_int) -> c_int {
    stats::call(Call::close);
    if !wait::on_uring() {
        // SAFETY: passed on (the thread fallback closes in place, as the runtime's own
        // descriptors do: a close does not wait for sockets and local files).
        return unsafe { real::close()(fd) };
    }
    let _w = stats::Waiting::new(Call::close, false);
    super::parked();
    let w = Waiter::quiet();
    let data = OpData {
        fd,
        ..Default::default()
    };
    let r = wait::ring_op(
        data,
        |d| io_uring::opcode::Close::new(io_uring::types::Fd(d.fd)).build(),
        None,
        &w,
        true,
    );
    match r {
        Ok(d) if d.res >= 0 => 0,
        Ok(d) => fail(-d.res as c_int) as c_int,
        Err(s) => fail(stop_errno(s)) as c_int,
    }
}

/// `fclose(3)`: the stream's descriptor is closed (its waiters woken).
///
/// # Safety
/// As `fclose(3)`.
pub unsafe fn fclose(f: *mut FILE) -> c_int {
    // SAFETY: a stream of the caller's.
    let fd = if f.is_null() {
        -1
    } else {
        unsafe { libc::fileno(f) }
    };
    if green() {
        stats::uncovered(Call::fclose);
    }
    let c = fdtab::closing(fd);
    // SAFETY: passed on.
    let r = unsafe { real::fclose()(f) };
    c.done();
    r
}

/// `pclose(3)`: as [`fclose`], and it waits for the command (not covered).
///
/// # Safety
/// As `pclose(3)`.
pub unsafe fn pclose(f: *mut FILE) -> c_int {
    // SAFETY: a stream of the caller's.
    let fd = if f.is_null() {
        -1
    } else {
        unsafe { libc::fileno(f) }
    };
    if green() {
        stats::uncovered(Call::pclose);
    }
    let c = fdtab::closing(fd);
    // SAFETY: passed on.
    let r = unsafe { real::pclose()(f) };
    c.done();
    r
}

/// `close_range(2)`: the descriptors it closes lose their waiters.
///
/// # Safety
/// As `close_range(2)`.
pub unsafe fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real::close_range()(first, last, flags) };
    if r == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        let end = (last as usize).min(fdtab::LIMIT - 1);
        fdtab::forget_range(first as usize, end);
    }
    r
}

// ---------------------------------------------------------------------------------
// Flushing

/// `fsync(2)`.
///
/// # Safety
/// As `fsync(2)`.
pub unsafe fn fsync(fd: c_int) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::fsync()(fd) };
    }
    sync_green(Call::fsync, fd, false)
}

/// `fdatasync(2)`.
///
/// # Safety
/// As `fdatasync(2)`.
pub unsafe fn fdatasync(fd: c_int) -> c_int {
    if !green() {
        // SAFETY: passed on.
        return unsafe { real::fdatasync()(fd) };
    }
    sync_green(Call::fdatasync, fd, true)
}

#[inline(never)]
fn sync_green(call: Call, fd: c_int, data_only: bool) -> c_int {
    stats::call(call);
    let _w = stats::Waiting::new(call, false);
    super::parked();
    let r = if wait::on_uring() {
        let w = Waiter::quiet();
        let data = OpData {
            fd,
            flags: data_only as i32,
            ..Default::default()
        };
        wait::ring_op(data, crate::io::fsync_sqe, None, &w, true).map(|d| d.res)
    } else {
        wait::pool(
            move || {
                // SAFETY: plain calls on the caller's descriptor.
                let r = unsafe {
                    if data_only {
                        real::fdatasync()(fd)
                    } else {
                        real::fsync()(fd)
                    }
                };
                if r < 0 {
                    -(errno() as i64)
                } else {
                    0
                }
            },
            true,
            None,
        )
    };
    match r {
        Ok(r) if r >= 0 => 0,
        Ok(r) => fail(-r as c_int) as c_int,
        Err(s) => fail(stop_errno(s)) as c_int,
    }
}
