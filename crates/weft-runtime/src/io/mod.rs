//! I/O that never stalls a worker: the per-worker driver and the operations `fs`, `net`
//! and `blocking` are built on.
//!
//! ## Two backends, one semantics
//!
//! Every operation here (read, write, openat, close, fsync, accept, connect, send,
//! recv, and the timeouts of the socket ones) behaves the same on both backends; which
//! one runs is decided per runtime (`Builder::io_backend`, default: detected once per
//! process, see [`default_backend`]):
//!
//! - **io_uring** (`uring.rs`): one ring per worker, owned by the worker's [`Driver`]
//!   and touched only on that worker's OS thread. The worker's doorbell eventfd is
//!   registered with the ring, so a completion wakes a sleeping worker. A green thread
//!   pushes its SQE (no syscall) and parks; the SQ is submitted in batches by
//!   [`Driver::poll`] (the worker's `poll_events`, which runs before every sleep and
//!   every few dozen switches), by [`Driver::submit`] before the worker sleeps, or when
//!   the SQ is full.
//! - **threads** (`threads.rs`): file operations are plain blocking syscalls on a pool
//!   of small-stack OS threads (grown on demand up to a limit, idle threads exit); the
//!   pool thread makes the call and unparks the green thread. Socket operations are not
//!   sent to the pool: the socket is made nonblocking, the green thread tries the call
//!   itself, and on `EAGAIN` waits for readiness from one process-wide epoll thread
//!   (edge-triggered, registered once per socket). So 1,000 blocked socket operations
//!   cost 1,000 parked green threads, not 1,000 OS threads.
//!
//! Outside a green thread (a plain OS thread, or a worker's scheduler) every operation
//! is the plain blocking syscall (a nonblocking socket is waited on with `poll(2)`).
//!
//! ## Buffer ownership
//!
//! An operation's state lives in a [`Slot`]: the result, the [`Unparker`] of the green
//! thread, and an [`OpData`] that **owns** everything the kernel or the pool thread
//! reads or writes: a bounce buffer (user data is copied in before a write and out
//! after a read), the socket address, the path, the timeout's timespec, and a reference
//! to the descriptor (so it cannot be closed and reused while the operation runs). The
//! slot is an `Arc`: one count for the waiter, one for the completer (the ring's
//! `user_data` holds it as a raw pointer, or the pool job owns it). So a green thread
//! that is cancelled while it waits (runtime shutdown unwinds parked threads) simply
//! drops its count: nothing it abandons is freed before the completion arrives. On
//! io_uring it also queues an `ASYNC_CANCEL` for its operation; a worker that exits
//! waits (up to 2 s) for its ring's operations to finish and leaks the ring and the
//! slots if some never do, rather than freeing memory the kernel may still write. The
//! copy costs one `memcpy` per operation; in exchange no user buffer is ever lent to
//! the kernel.
//!
//! ## Closing
//!
//! Descriptors are owned by [`Fd`]; the last reference closes it, and the descriptor is
//! closed when that drop returns (as with std: the port can be bound again, the peer
//! sees end-of-file): an `IORING_OP_CLOSE` submitted at once on an io_uring worker,
//! `close(2)` itself elsewhere.
//!
//! ## Preemption
//!
//! Ring and pool bookkeeping (a `RefCell`, counters, a mutex) must not be interrupted
//! by a switch to another green thread of the same worker, so every such section runs
//! with the worker's runtime depth raised ([`NoPreempt`]); none of them parks.

pub(crate) mod threads;
pub(crate) mod uring;

use crate::park::{self, Unparker};
use crate::worker;
use std::cell::UnsafeCell;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering::*};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The largest transfer one operation makes (reads and writes may be short).
const MAX_IO: usize = 1 << 20;

/// Which I/O backend a runtime uses (see `Builder::io_backend`).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackend {
    /// One io_uring per worker.
    Uring,
    /// A pool of OS threads (files) and an epoll thread (sockets).
    Threads,
}

impl IoBackend {
    /// `"io_uring"` or `"threads"`.
    pub fn name(self) -> &'static str {
        match self {
            IoBackend::Uring => "io_uring",
            IoBackend::Threads => "threads",
        }
    }
}

static DEFAULT: OnceLock<Result<IoBackend, String>> = OnceLock::new();
static URING_OK: OnceLock<Result<(), String>> = OnceLock::new();

fn uring_available() -> &'static Result<(), String> {
    URING_OK.get_or_init(uring::probe)
}

/// The process's default backend: `WEFT_IO_BACKEND=threads|uring` if set, else
/// io_uring when this kernel lets us create a ring with the operations we need (one
/// line on stderr says why when it does not).
pub(crate) fn default_backend() -> io::Result<IoBackend> {
    let d = DEFAULT.get_or_init(|| {
        let var = std::env::var("WEFT_IO_BACKEND").unwrap_or_default();
        match var.as_str() {
            "threads" => Ok(IoBackend::Threads),
            "uring" | "io_uring" => match uring_available() {
                Ok(()) => Ok(IoBackend::Uring),
                Err(why) => Err(format!(
                    "WEFT_IO_BACKEND={var} but io_uring is not available: {why}"
                )),
            },
            "" | "auto" => match uring_available() {
                Ok(()) => Ok(IoBackend::Uring),
                Err(why) => {
                    eprintln!(
                        "weft: io_uring unavailable ({why}); using the thread-pool I/O backend"
                    );
                    Ok(IoBackend::Threads)
                }
            },
            other => Err(format!(
                "WEFT_IO_BACKEND={other:?} is not understood (expected `uring` or `threads`)"
            )),
        }
    });
    d.clone().map_err(io::Error::other)
}

/// Checks that `b` can run here (for an explicit `Builder::io_backend`).
pub(crate) fn check_backend(b: IoBackend) -> io::Result<IoBackend> {
    match (b, uring_available()) {
        (IoBackend::Uring, Err(why)) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the io_uring I/O backend was asked for but is not available: {why}"),
        )),
        _ => Ok(b),
    }
}

/// The I/O backend in use: the calling green thread's runtime's, or outside a runtime
/// the process default (`"io_uring"` or `"threads"`).
pub fn io_backend() -> &'static str {
    let w = worker::current();
    if !w.is_null() {
        // SAFETY: a non-null thread word is this thread's live worker; a short read.
        return unsafe { (*w).io.backend() }.name();
    }
    default_backend().unwrap_or(IoBackend::Threads).name()
}

/// A worker's I/O driver: its ring on the io_uring backend; nothing on the threads
/// backend (pool threads and the poller wake green threads through their unparkers).
/// Accessed through shared references only (interior mutability), from its worker's
/// OS thread only.
pub(crate) struct Driver {
    ring: Option<uring::Ring>,
}

impl Driver {
    /// A driver for the worker that sleeps on eventfd `wake_fd`.
    pub(crate) fn new(wake_fd: RawFd, backend: IoBackend) -> io::Result<Driver> {
        let ring = match backend {
            IoBackend::Uring => Some(uring::Ring::new(wake_fd)?),
            IoBackend::Threads => None,
        };
        Ok(Driver { ring })
    }

    /// Which backend this driver is.
    pub(crate) fn backend(&self) -> IoBackend {
        if self.ring.is_some() {
            IoBackend::Uring
        } else {
            IoBackend::Threads
        }
    }

    /// Submits what is pending and reaps completions, waking their green threads.
    /// Returns how many completed.
    pub(crate) fn poll(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.poll())
    }

    /// Submits what is queued: called before the worker spins and sleeps on its
    /// eventfd, which the completions of what is submitted write.
    pub(crate) fn submit(&self) {
        if let Some(r) = &self.ring {
            r.submit();
        }
    }

    /// Whether [`Driver::poll`] would do nothing now (the threads backend's completions
    /// arrive as mail: it never has anything to poll).
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.ring.as_ref().is_none_or(|r| r.is_idle())
    }

    /// Whether completions wait to be reaped by [`Driver::poll`] (the threads backend
    /// has none: its completions arrive as wake-up mail).
    #[inline]
    pub(crate) fn has_completions(&self) -> bool {
        self.ring.as_ref().is_some_and(|r| r.has_completions())
    }
}

/// Holds off preemption of the calling green thread (raises its worker's runtime
/// depth) while alive. Never held across a park.
pub(crate) struct NoPreempt(*mut worker::Worker);

impl NoPreempt {
    pub(crate) fn new() -> NoPreempt {
        let w = worker::current();
        if !w.is_null() {
            // SAFETY: `w` is this thread's worker.
            unsafe { worker::preempt::enter(w) };
        }
        NoPreempt(w)
    }
}

impl Drop for NoPreempt {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the worker of `new`, on the same thread (no park in between).
            unsafe { worker::preempt::leave(self.0) };
        }
    }
}

/// Runs `f` on the calling thread's worker's ring, preemption held off. None when the
/// thread is not a worker or its worker has no ring.
pub(crate) fn with_ring<R>(f: impl FnOnce(&uring::Ring) -> R) -> Option<R> {
    let w = worker::current();
    if w.is_null() {
        return None;
    }
    let _np = NoPreempt::new();
    // SAFETY: `w` is this thread's live worker; the driver is only used through shared
    // references, and `f` does not park, so the reference does not outlive this call.
    let io = unsafe { &(*w).io };
    io.ring.as_ref().map(f)
}

/// How many `io_uring_enter` calls the calling green thread's worker has made to
/// submit operations or run their task work (its sleeps not counted); `None` off an
/// io_uring worker. For tests and measurements: a worker that sends the replies of
/// a turn's connections in one call shows it here.
#[doc(hidden)]
pub fn ring_enters() -> Option<u64> {
    with_ring(|r| r.enters())
}

/// Where the caller runs, for I/O purposes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Ctx {
    /// Not a green thread: plain blocking syscalls.
    Os,
    /// A green thread on a threads-backend worker.
    Threads,
    /// A green thread on an io_uring worker.
    Uring,
}

pub(crate) fn ctx() -> Ctx {
    if worker::current_worker().is_none() {
        return Ctx::Os;
    }
    let w = worker::current();
    // SAFETY: a green thread runs on its live worker; a short read.
    match unsafe { (*w).io.backend() } {
        IoBackend::Uring => Ctx::Uring,
        IoBackend::Threads => Ctx::Threads,
    }
}

/// A socket address in kernel form.
#[derive(Clone, Copy)]
pub(crate) struct SockAddr {
    pub storage: libc::sockaddr_storage,
    pub len: libc::socklen_t,
}

impl Default for SockAddr {
    fn default() -> Self {
        SockAddr {
            // SAFETY: all-zero is a valid sockaddr_storage.
            storage: unsafe { core::mem::zeroed() },
            len: core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }
}

/// Everything an operation lends the kernel (or a pool thread), owned here so that it
/// outlives the operation even if its green thread is cancelled (module comment).
#[derive(Default)]
pub(crate) struct OpData {
    pub fd: RawFd,
    /// Offset for read/write (None: the file position); flags for open/accept/send.
    pub off: Option<u64>,
    pub flags: i32,
    pub mode: u32,
    pub buf: Vec<u8>,
    pub addr: SockAddr,
    pub path: Option<CString>,
    pub ts: Option<io_uring::types::Timespec>,
    /// Keeps the descriptor open while the operation may use it (held, never read).
    #[allow(dead_code)]
    pub keep: Option<Fd>,
}

/// One operation's completion: filled by the kernel (through the ring) or a pool
/// thread, waited for by a green thread.
pub(crate) struct Slot {
    done: AtomicBool,
    /// Completing it wakes nobody (the first operations of a chain whose waiter waits
    /// for the last: [`send_then_recv`]); cleared by a waiter that parks on it anyway.
    quiet: AtomicBool,
    res: AtomicI64,
    waker: Unparker,
    data: UnsafeCell<OpData>,
}

// SAFETY: `data` is used by the submitter before the operation is handed over, by the
// completer (kernel or one pool thread) until `done` is set (Release), and by the
// waiter after it has seen `done` (Acquire): never by two at once.
unsafe impl Sync for Slot {}
// SAFETY: as above; everything in it is Send.
unsafe impl Send for Slot {}

impl Slot {
    pub(crate) fn new(data: OpData) -> Arc<Slot> {
        Arc::new(Slot {
            done: AtomicBool::new(false),
            quiet: AtomicBool::new(false),
            res: AtomicI64::new(0),
            waker: Unparker::current(),
            data: UnsafeCell::new(data),
        })
    }

    /// The completer's side: publishes `res` (a count, or -errno) and wakes the waiter.
    pub(crate) fn complete(&self, res: i64) {
        self.res.store(res, Relaxed);
        // SeqCst with the load below and [`wait_quiet`]'s: a waiter that clears `quiet`
        // and then finds `done` false is woken.
        self.done.store(true, SeqCst);
        if !self.quiet.load(SeqCst) {
            self.waker.unpark();
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Acquire)
    }

    /// The result `complete` published (read once [`Slot::is_done`] is true). Only
    /// the system-call layer reads it.
    #[cfg_attr(not(feature = "hook"), allow(dead_code))]
    pub(crate) fn result(&self) -> i64 {
        self.res.load(Relaxed)
    }

    /// The operation's data.
    ///
    /// # Safety
    /// The caller is the one party that may use it now (see the `Sync` impl).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn data(&self) -> &mut OpData {
        // SAFETY: per the contract.
        unsafe { &mut *self.data.get() }
    }
}

/// Parks until `slot` completes. If the green thread is cancelled meanwhile (a
/// shutdown unwind out of `park`), `abandon` runs (e.g. to cancel the operation) and the
/// slot is left to its completer.
fn wait(slot: &Slot, abandon: impl FnOnce()) {
    struct Guard<'a, F: FnOnce()>(&'a Slot, Option<F>);
    impl<F: FnOnce()> Drop for Guard<'_, F> {
        fn drop(&mut self) {
            if let Some(f) = self.1.take() {
                if !self.0.is_done() {
                    f();
                }
            }
        }
    }
    let mut g = Guard(slot, Some(abandon));
    while !slot.is_done() {
        park::park();
    }
    g.1 = None;
}

/// [`wait`] for a quiet slot (one whose completion wakes nobody): it wakes its waiter
/// again from now on.
fn wait_quiet(slot: &Slot, abandon: impl FnOnce()) {
    slot.quiet.store(false, SeqCst);
    if !slot.done.load(SeqCst) {
        wait(slot, abandon);
    }
}

/// What an operation returned: its result (count or -errno) and its data back.
pub(crate) struct Done {
    pub res: i64,
    pub data: OpData,
}

impl Done {
    fn result(&self) -> io::Result<usize> {
        if self.res < 0 {
            Err(io::Error::from_raw_os_error(-self.res as i32))
        } else {
            Ok(self.res as usize)
        }
    }
}

/// Runs one operation on the caller's backend: `sqe` builds its io_uring entry from the
/// data (the slot's address is added as user_data), `sys` performs it as a blocking
/// syscall (returns the count or -errno). `timeout` links an `IORING_OP_LINK_TIMEOUT`
/// (io_uring only: the callers handle timeouts elsewhere).
pub(crate) fn run(
    cx: Ctx,
    mut data: OpData,
    sqe: impl FnOnce(&mut OpData) -> io_uring::squeue::Entry,
    sys: fn(&mut OpData) -> i64,
    timeout: Option<Duration>,
) -> io::Result<Done> {
    crate::worker::preemption_point();
    match cx {
        Ctx::Os => {
            let res = sys(&mut data);
            Ok(Done { res, data })
        }
        Ctx::Threads => {
            let slot = Slot::new(data);
            let s2 = slot.clone();
            {
                let _np = NoPreempt::new();
                threads::io_pool().execute(Box::new(move || {
                    // SAFETY: the pool thread is the completer: it alone uses the data
                    // until `complete`.
                    let res = sys(unsafe { s2.data() });
                    s2.complete(res);
                }));
            }
            wait(&slot, || {});
            // SAFETY: done was seen: the data is the waiter's now.
            let data = core::mem::take(unsafe { slot.data() });
            Ok(Done {
                res: slot.res.load(Relaxed),
                data,
            })
        }
        Ctx::Uring => {
            let slot = Slot::new(data);
            // SAFETY: not handed over yet: the submitter's.
            let d = unsafe { slot.data() };
            let ud = Arc::into_raw(slot.clone()) as u64;
            let mut first = sqe(d).user_data(ud);
            let mut entries = vec![];
            if let Some(t) = timeout {
                d.ts = Some(
                    io_uring::types::Timespec::new()
                        .sec(t.as_secs())
                        .nsec(t.subsec_nanos()),
                );
                let ts: *const io_uring::types::Timespec = d.ts.as_ref().unwrap();
                first = first.flags(io_uring::squeue::Flags::IO_LINK);
                entries.push(first);
                entries.push(io_uring::opcode::LinkTimeout::new(ts).build().user_data(0));
            } else {
                entries.push(first);
            }
            // SAFETY: everything the entries point to is owned by the slot, which the
            // ring keeps (through `ud`) until the completion is reaped.
            let pushed = with_ring(|r| unsafe { r.push(&entries, 1) }).expect("a uring context");
            if let Err(e) = pushed {
                // SAFETY: the count taken for the ring, which never got the entry.
                drop(unsafe { Arc::from_raw(ud as *const Slot) });
                return Err(e);
            }
            wait(&slot, || {
                with_ring(|r| r.cancel(ud));
            });
            // SAFETY: done was seen: the data is the waiter's now.
            let data = core::mem::take(unsafe { slot.data() });
            Ok(Done {
                res: slot.res.load(Relaxed),
                data,
            })
        }
    }
}

/// `-errno` of the last failed libc call.
fn neg_errno() -> i64 {
    -(io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO) as i64)
}

/// Runs a libc call returning -1 on error, retrying on EINTR; the count or -errno.
fn sys_retry(mut f: impl FnMut() -> isize) -> i64 {
    loop {
        let r = f();
        if r >= 0 {
            return r as i64;
        }
        let e = neg_errno();
        if e != -(libc::EINTR as i64) {
            return e;
        }
    }
}

fn cvt(r: i64) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::from_raw_os_error(-r as i32))
    } else {
        Ok(r as usize)
    }
}

// ---------------------------------------------------------------------------------
// Descriptors

/// An owned file descriptor, shared by the handle and its operations in flight; the
/// last reference closes it without blocking a worker (module comment).
#[derive(Clone)]
pub(crate) struct Fd(Arc<FdInner>);

pub(crate) struct FdInner {
    fd: RawFd,
    /// Set once this descriptor has O_NONBLOCK (threads backend sockets).
    nonblocking: AtomicBool,
    /// How many recvs in a row had to wait for bytes (io_uring sockets: [`recv`]).
    recv_waits: AtomicU32,
    /// Set once `RWF_NOWAIT` proved unsupported for this descriptor (file reads and
    /// writes then go straight to the asynchronous path: [`try_nowait`]).
    no_nowait: AtomicBool,
    /// Its registration with the threads backend's poller, once it needed one.
    reg: OnceLock<Option<threads::Registration>>,
}

impl Fd {
    /// Takes ownership of `fd`.
    pub(crate) fn new(fd: RawFd, nonblocking: bool) -> Fd {
        Fd(Arc::new(FdInner {
            fd,
            nonblocking: AtomicBool::new(nonblocking),
            recv_waits: AtomicU32::new(0),
            no_nowait: AtomicBool::new(false),
            reg: OnceLock::new(),
        }))
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.0.fd
    }

    /// Gives up ownership without closing: the caller owns the descriptor. Fails (gives
    /// the handle back) while an operation still uses it.
    pub(crate) fn into_raw(self) -> Result<RawFd, Fd> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => {
                if let Some(Some(reg)) = inner.reg.take() {
                    reg.deregister(inner.fd);
                }
                let fd = inner.fd;
                core::mem::forget(inner);
                Ok(fd)
            }
            Err(a) => Err(Fd(a)),
        }
    }

    /// Sets O_NONBLOCK once.
    fn ensure_nonblocking(&self) -> io::Result<()> {
        if self.0.nonblocking.load(Relaxed) {
            return Ok(());
        }
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fl = libc::fcntl(self.0.fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(self.0.fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        self.0.nonblocking.store(true, Relaxed);
        Ok(())
    }
}

impl Drop for FdInner {
    fn drop(&mut self) {
        if let Some(Some(reg)) = self.reg.take() {
            reg.deregister(self.fd);
        }
        close_async(self.fd);
    }
}

/// Closes `fd`, done when this returns (as std's drop is): on an io_uring worker, a
/// close submitted to the ring at once; elsewhere (the threads backend, plain threads)
/// `close(2)` itself, which does not block for sockets and local files (it may for a
/// network filesystem's flush or a socket with `SO_LINGER`, as it would under std).
pub(crate) fn close_async(fd: RawFd) {
    if with_ring(|r| r.close(fd)) == Some(true) {
        return;
    }
    // SAFETY: the descriptor was handed to us to close.
    unsafe { libc::close(fd) };
}

// ---------------------------------------------------------------------------------
// File operations

/// A file read or write from a green thread, tried first without blocking:
/// `preadv2`/`pwritev2` with `RWF_NOWAIT` on the caller's own buffer, which the kernel
/// completes when the data is in (or, for a write, can go to) the page cache and
/// refuses with `EAGAIN` when it would have to wait for the disk. `Some` when it is
/// done (a short count included: the caller goes on from there, as after any short
/// read or write; or an error other than "would block"); `None` when the operation must
/// take the asynchronous path. A cached read or write thus costs one system call and no
/// park, switch or copy, instead of an io_uring round trip through the worker's ring
/// (or a trip to a pool thread). A descriptor whose kernel or filesystem refuses the
/// flag (`EOPNOTSUPP`, `EINVAL`) is not tried again.
fn try_nowait(
    fd: &Fd,
    write: bool,
    p: *mut u8,
    n: usize,
    off: Option<u64>,
) -> Option<io::Result<usize>> {
    if fd.0.no_nowait.load(Relaxed) {
        return None;
    }
    let iov = libc::iovec {
        iov_base: p.cast(),
        iov_len: n,
    };
    let off = off.map_or(-1, |o| o as libc::off_t);
    loop {
        // SAFETY: one iovec over the caller's `n` bytes at `p` (readable for a write,
        // writable for a read), for the duration of the call.
        let r = unsafe {
            if write {
                libc::pwritev2(fd.raw(), &iov, 1, off, libc::RWF_NOWAIT)
            } else {
                libc::preadv2(fd.raw(), &iov, 1, off, libc::RWF_NOWAIT)
            }
        };
        if r >= 0 {
            return Some(Ok(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return None,
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                fd.0.no_nowait.store(true, Relaxed);
                return None;
            }
            _ => return Some(Err(e)),
        }
    }
}

/// Reads into `buf` at `off` (None: at the file position).
pub(crate) fn read(fd: &Fd, buf: &mut [u8], off: Option<u64>) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO);
    if len == 0 {
        return Ok(0);
    }
    let cx = ctx();
    if cx == Ctx::Os {
        let r = sys_retry(|| pread_or_read(fd.raw(), buf.as_mut_ptr(), len, off));
        return cvt(r);
    }
    if let Some(r) = try_nowait(fd, false, buf.as_mut_ptr(), len, off) {
        return r;
    }
    let data = OpData {
        fd: fd.raw(),
        off,
        buf: bufs::take(len),
        keep: Some(fd.clone()),
        ..Default::default()
    };
    let done = run(
        cx,
        data,
        |d| {
            io_uring::opcode::Read::new(
                io_uring::types::Fd(d.fd),
                d.buf.as_mut_ptr(),
                d.buf.len() as u32,
            )
            .offset(d.off.unwrap_or(u64::MAX))
            .build()
        },
        |d| {
            let (fd, p, n, off) = (d.fd, d.buf.as_mut_ptr(), d.buf.len(), d.off);
            sys_retry(|| pread_or_read(fd, p, n, off))
        },
        None,
    )?;
    let n = done.result()?;
    buf[..n].copy_from_slice(&done.data.buf[..n]);
    bufs::give(done.data.buf);
    Ok(n)
}

fn pread_or_read(fd: RawFd, p: *mut u8, n: usize, off: Option<u64>) -> isize {
    // SAFETY: `p` points to `n` writable bytes owned by the caller for the call.
    unsafe {
        match off {
            Some(o) => libc::pread(fd, p.cast(), n, o as libc::off_t),
            None => libc::read(fd, p.cast(), n),
        }
    }
}

/// Writes from `buf` at `off` (None: at the file position).
pub(crate) fn write(fd: &Fd, buf: &[u8], off: Option<u64>) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO);
    if len == 0 {
        return Ok(0);
    }
    let cx = ctx();
    if cx == Ctx::Os {
        return cvt(sys_retry(|| {
            pwrite_or_write(fd.raw(), buf.as_ptr(), len, off)
        }));
    }
    if let Some(r) = try_nowait(fd, true, buf.as_ptr().cast_mut(), len, off) {
        return r;
    }
    let data = OpData {
        fd: fd.raw(),
        off,
        buf: bufs::copy(&buf[..len]),
        keep: Some(fd.clone()),
        ..Default::default()
    };
    let done = run(
        cx,
        data,
        |d| {
            io_uring::opcode::Write::new(
                io_uring::types::Fd(d.fd),
                d.buf.as_ptr(),
                d.buf.len() as u32,
            )
            .offset(d.off.unwrap_or(u64::MAX))
            .build()
        },
        |d| {
            let (fd, p, n, off) = (d.fd, d.buf.as_ptr(), d.buf.len(), d.off);
            sys_retry(|| pwrite_or_write(fd, p, n, off))
        },
        None,
    )?;
    let r = done.result();
    bufs::give_copy(done.data.buf);
    r
}

fn pwrite_or_write(fd: RawFd, p: *const u8, n: usize, off: Option<u64>) -> isize {
    // SAFETY: `p` points to `n` readable bytes owned by the caller for the call.
    unsafe {
        match off {
            Some(o) => libc::pwrite(fd, p.cast(), n, o as libc::off_t),
            None => libc::write(fd, p.cast(), n),
        }
    }
}

/// Opens `path` (relative to the working directory) with open(2) `flags` (O_CLOEXEC is
/// added) and `mode`.
pub(crate) fn open(path: CString, flags: i32, mode: u32) -> io::Result<Fd> {
    let flags = flags | libc::O_CLOEXEC;
    let data = OpData {
        path: Some(path),
        flags,
        mode,
        ..Default::default()
    };
    let done = run(
        ctx(),
        data,
        |d| {
            io_uring::opcode::OpenAt::new(
                io_uring::types::Fd(libc::AT_FDCWD),
                d.path.as_ref().unwrap().as_ptr(),
            )
            .flags(d.flags)
            .mode(d.mode)
            .build()
        },
        |d| {
            let (p, fl, m) = (d.path.as_ref().unwrap().as_ptr(), d.flags, d.mode);
            // SAFETY: `p` is a NUL-terminated path owned by the data.
            sys_retry(|| unsafe { libc::open(p, fl, m) } as isize)
        },
        None,
    )?;
    let fd = done.result()?;
    Ok(Fd::new(fd as RawFd, false))
}

/// The io_uring entry of an fsync of `d.fd` (an fdatasync when `d.flags` is not 0).
pub(crate) fn fsync_sqe(d: &mut OpData) -> io_uring::squeue::Entry {
    let mut op = io_uring::opcode::Fsync::new(io_uring::types::Fd(d.fd));
    if d.flags != 0 {
        op = op.flags(io_uring::types::FsyncFlags::DATASYNC);
    }
    op.build()
}

/// The io_uring entry of a connect of `d.fd` to `d.addr`.
pub(crate) fn connect_sqe(d: &mut OpData) -> io_uring::squeue::Entry {
    io_uring::opcode::Connect::new(
        io_uring::types::Fd(d.fd),
        (&d.addr.storage as *const libc::sockaddr_storage).cast(),
        d.addr.len,
    )
    .build()
}

/// fsync(2), or fdatasync(2) when `data_only`.
pub(crate) fn fsync(fd: &Fd, data_only: bool) -> io::Result<()> {
    let data = OpData {
        fd: fd.raw(),
        flags: data_only as i32,
        keep: Some(fd.clone()),
        ..Default::default()
    };
    let done = run(
        ctx(),
        data,
        fsync_sqe,
        |d| {
            let (fd, only) = (d.fd, d.flags != 0);
            // SAFETY: plain syscalls on a descriptor kept open by the data.
            sys_retry(|| unsafe {
                if only {
                    libc::fdatasync(fd) as isize
                } else {
                    libc::fsync(fd) as isize
                }
            })
        },
        None,
    )?;
    done.result().map(drop)
}

// ---------------------------------------------------------------------------------
// Socket operations

/// Which readiness a socket operation waits for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dir {
    Read,
    Write,
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the socket operation timed out")
}

fn remaining(deadline: Option<Instant>) -> io::Result<Option<Duration>> {
    match deadline {
        None => Ok(None),
        Some(d) => {
            let now = Instant::now();
            if now >= d {
                Err(timed_out())
            } else {
                Ok(Some(d - now))
            }
        }
    }
}

/// Waits with poll(2) until `fd` is ready for `dir` (plain OS threads).
fn poll_fd(fd: RawFd, dir: Dir, deadline: Option<Instant>) -> io::Result<()> {
    loop {
        let ms = match remaining(deadline)? {
            None => -1,
            Some(d) => d.as_millis().clamp(1, i32::MAX as u128) as i32,
        };
        let mut p = libc::pollfd {
            fd,
            events: if dir == Dir::Read {
                libc::POLLIN
            } else {
                libc::POLLOUT
            },
            revents: 0,
        };
        // SAFETY: polls one pollfd on the stack.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// The threads backend's readiness count of `fd` (None in other contexts), read
/// before a call that may return `EAGAIN`.
fn readiness(cx: Ctx, fd: &Fd, dir: Dir) -> Option<u64> {
    (cx == Ctx::Threads)
        .then(|| threads::edges(fd, dir))
        .flatten()
}

/// Waits until `fd` is ready for `dir` in the caller's context.
///
/// `since` is the threads backend's readiness count read before the call that returned
/// `EAGAIN` ([`readiness`]); other contexts ignore it.
fn wait_ready(
    cx: Ctx,
    fd: &Fd,
    dir: Dir,
    since: Option<u64>,
    deadline: Option<Instant>,
) -> io::Result<()> {
    match cx {
        Ctx::Os => poll_fd(fd.raw(), dir, deadline),
        Ctx::Threads => threads::wait_ready(fd, dir, since, deadline),
        Ctx::Uring => {
            let t = remaining(deadline)?;
            let data = OpData {
                fd: fd.raw(),
                flags: if dir == Dir::Read {
                    libc::POLLIN as i32
                } else {
                    libc::POLLOUT as i32
                },
                keep: Some(fd.clone()),
                ..Default::default()
            };
            let done = run(
                cx,
                data,
                |d| {
                    io_uring::opcode::PollAdd::new(io_uring::types::Fd(d.fd), d.flags as u32)
                        .build()
                },
                |_| -(libc::ENOSYS as i64),
                t,
            )?;
            match done.res {
                r if r >= 0 => Ok(()),
                r if deadline.is_some() && (r == -(libc::ECANCELED as i64)) => Err(timed_out()),
                r => Err(io::Error::from_raw_os_error(-r as i32)),
            }
        }
    }
}

/// Runs a nonblocking-capable socket call `op` (gets `dontwait`: whether it must not
/// block; returns the count or -errno) until it does not say EAGAIN, waiting for
/// readiness in between.
fn sock_loop(
    cx: Ctx,
    fd: &Fd,
    dir: Dir,
    deadline: Option<Instant>,
    mut op: impl FnMut(bool) -> i64,
) -> io::Result<usize> {
    let eagain = -(libc::EAGAIN as i64);
    if cx == Ctx::Threads {
        fd.ensure_nonblocking()?;
    }
    loop {
        if cx == Ctx::Os && deadline.is_some() {
            poll_fd(fd.raw(), dir, deadline)?;
        }
        let dontwait = cx != Ctx::Os || deadline.is_some();
        let since = readiness(cx, fd, dir);
        let r = op(dontwait);
        if r == eagain {
            wait_ready(cx, fd, dir, since, deadline)?;
            continue;
        }
        return cvt(r);
    }
}

/// The io_uring result of a socket operation with a deadline: a linked timeout that
/// fired shows as ECANCELED.
fn uring_sock_result(done: &Done, deadline: Option<Instant>) -> io::Result<usize> {
    if done.res == -(libc::ECANCELED as i64) && deadline.is_some() {
        return Err(timed_out());
    }
    done.result()
}

/// How many socket calls in a row a worker may complete without parking (the
/// nonblocking fast path of [`recv`] and [`send`]) before it lets its other green
/// threads run: a peer that always has bytes ready must not starve them.
const FAST_IO_BUDGET: u32 = 32;

/// A socket whose recvs keep waiting tries the nonblocking call once every this many.
const RECV_RETRY: u32 = 8;

thread_local! {
    static FAST_IO: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// A socket call tried without waiting on an io_uring worker: `Some` with its result,
/// `None` when it said EAGAIN (the caller then goes through the ring). Every
/// [`FAST_IO_BUDGET`] successes in a row the caller yields first.
fn try_now(op: impl FnMut() -> isize) -> Option<io::Result<usize>> {
    crate::worker::preemption_point();
    let r = sys_retry(op);
    if r == -(libc::EAGAIN as i64) {
        FAST_IO.with(|c| c.set(0));
        return None;
    }
    if FAST_IO.with(|c| {
        let n = c.get() + 1;
        c.set(if n >= FAST_IO_BUDGET { 0 } else { n });
        n >= FAST_IO_BUDGET
    }) {
        worker::yield_now();
    }
    Some(cvt(r))
}

/// recv(2) into `buf`.
pub(crate) fn recv(fd: &Fd, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<usize> {
    recv_flags(fd, buf, deadline, 0)
}

/// recv(2) into `buf` with `flags` (0, or `MSG_PEEK`: the bytes stay queued).
pub(crate) fn recv_flags(
    fd: &Fd,
    buf: &mut [u8],
    deadline: Option<Instant>,
    flags: libc::c_int,
) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO);
    if len == 0 {
        return Ok(0);
    }
    let cx = ctx();
    if cx != Ctx::Uring {
        let raw = fd.raw();
        let p = buf.as_mut_ptr();
        return sock_loop(cx, fd, Dir::Read, deadline, |dw| {
            let fl = flags | if dw { libc::MSG_DONTWAIT } else { 0 };
            // SAFETY: `p` points to `len` writable bytes of the caller's buffer.
            sys_retry(|| unsafe { libc::recv(raw, p.cast(), len, fl) })
        });
    }
    // The nonblocking call first: when the bytes are there already (a busy peer, a
    // pipeline) it saves the ring's round trip and a park; on EAGAIN the ring waits.
    // A socket whose last recv had to wait (request and reply, one at a time) skips
    // the attempt, which would only say EAGAIN, except every few calls.
    let hint = &fd.0.recv_waits;
    let waits = hint.load(Relaxed);
    if waits == 0 || waits.is_multiple_of(RECV_RETRY) {
        if let Some(r) = try_now(|| {
            // SAFETY: `buf` is `len` writable bytes of the caller's.
            unsafe {
                libc::recv(
                    fd.raw(),
                    buf.as_mut_ptr().cast(),
                    len,
                    flags | libc::MSG_DONTWAIT,
                )
            }
        }) {
            hint.store(0, Relaxed);
            return r;
        }
    }
    hint.store(waits.wrapping_add(1).max(1), Relaxed);
    loop {
        let data = OpData {
            fd: fd.raw(),
            buf: bufs::take(len),
            flags,
            keep: Some(fd.clone()),
            ..Default::default()
        };
        let done = run(
            cx,
            data,
            |d| {
                io_uring::opcode::Recv::new(
                    io_uring::types::Fd(d.fd),
                    d.buf.as_mut_ptr(),
                    d.buf.len() as u32,
                )
                .flags(d.flags)
                .build()
            },
            |_| -(libc::ENOSYS as i64),
            remaining(deadline)?,
        )?;
        if done.res == -(libc::EAGAIN as i64) {
            wait_ready(cx, fd, Dir::Read, None, deadline)?;
            continue;
        }
        let n = uring_sock_result(&done, deadline)?;
        if n == len {
            // A full buffer: more is probably there already.
            hint.store(0, Relaxed);
        }
        buf[..n].copy_from_slice(&done.data.buf[..n]);
        bufs::give(done.data.buf);
        return Ok(n);
    }
}

/// send(2) from `buf` (MSG_NOSIGNAL: a closed peer is an error, not a SIGPIPE).
pub(crate) fn send(fd: &Fd, buf: &[u8], deadline: Option<Instant>) -> io::Result<usize> {
    let len = buf.len().min(MAX_IO);
    if len == 0 {
        return Ok(0);
    }
    let cx = ctx();
    if cx != Ctx::Uring {
        let raw = fd.raw();
        let p = buf.as_ptr();
        return sock_loop(cx, fd, Dir::Write, deadline, |dw| {
            let fl = libc::MSG_NOSIGNAL | if dw { libc::MSG_DONTWAIT } else { 0 };
            // SAFETY: `p` points to `len` readable bytes of the caller's buffer.
            sys_retry(|| unsafe { libc::send(raw, p.cast(), len, fl) })
        });
    }
    // The nonblocking call first: a socket's send buffer almost always has room, and
    // then the ring's round trip and a park are saved; on EAGAIN the ring waits.
    if let Some(r) = try_now(|| {
        // SAFETY: `buf` is `len` readable bytes of the caller's.
        unsafe {
            libc::send(
                fd.raw(),
                buf.as_ptr().cast(),
                len,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        }
    }) {
        return r;
    }
    loop {
        let data = OpData {
            fd: fd.raw(),
            buf: bufs::copy(&buf[..len]),
            keep: Some(fd.clone()),
            ..Default::default()
        };
        let done = run(
            cx,
            data,
            |d| {
                io_uring::opcode::Send::new(
                    io_uring::types::Fd(d.fd),
                    d.buf.as_ptr(),
                    d.buf.len() as u32,
                )
                .flags(libc::MSG_NOSIGNAL)
                .build()
            },
            |_| -(libc::ENOSYS as i64),
            remaining(deadline)?,
        )?;
        if done.res == -(libc::EAGAIN as i64) {
            wait_ready(cx, fd, Dir::Write, None, deadline)?;
            continue;
        }
        let r = uring_sock_result(&done, deadline);
        bufs::give_copy(done.data.buf);
        return r;
    }
}

/// The most bytes [`send_then_discard`] takes off in the same system call as its send
/// (more, and they are taken off by plain calls after it).
const DISCARD_CHAINED: usize = 64 << 10;

/// Sends all of `buf`, then takes `discard` bytes off the socket's receive queue
/// without waiting (they must be queued already: the caller peeked them, and nobody
/// else reads the socket). On an io_uring worker both go to the kernel as one linked
/// pair, and the calling green thread parks until they complete: the pair is submitted
/// with whatever the worker's other green threads queued meanwhile, in the
/// `io_uring_enter` the worker makes once it has nothing left to run (its poll), which
/// also runs the second of each pair before it returns. So the replies of all the
/// connections a worker served in one turn go out in one system call, and nothing runs
/// between a send and its discard, not even a peer that the send woke and that the
/// scheduler would run here at the return of a separate send (nor, with the replies
/// batched, between one reply and the next: a woken peer preempts the worker once a
/// turn, not once a reply). Elsewhere (another backend, a write timeout, a long reply
/// or discard): a send loop, then the discard.
pub(crate) fn send_then_discard(
    fd: &Fd,
    buf: &[u8],
    discard: usize,
    deadline: Option<Instant>,
) -> io::Result<()> {
    let cx = ctx();
    let mut sent = 0;
    let mut left = discard;
    if cx == Ctx::Uring
        && deadline.is_none()
        && !buf.is_empty()
        && buf.len() <= MAX_IO
        && (1..=DISCARD_CHAINED).contains(&discard)
    {
        crate::worker::preemption_point();
        let send = Slot::new(OpData {
            fd: fd.raw(),
            buf: bufs::copy(buf),
            keep: Some(fd.clone()),
            ..Default::default()
        });
        let recv = Slot::new(OpData {
            fd: fd.raw(),
            // From the copy buffers, not the fill ones: a request's few bytes would
            // cut a 16 KiB receive buffer's length, and the next receive that took
            // it would zero 16 KiB again. Zeroed here are only the `discard` bytes.
            buf: bufs::zeroed_copy(discard),
            keep: Some(fd.clone()),
            ..Default::default()
        });
        // SAFETY: not handed over yet: the submitter's.
        let (sd, rd) = unsafe { (send.data(), recv.data()) };
        let (su, ru) = (
            Arc::into_raw(send.clone()) as u64,
            Arc::into_raw(recv.clone()) as u64,
        );
        let entries = [
            io_uring::opcode::Send::new(
                io_uring::types::Fd(sd.fd),
                sd.buf.as_ptr(),
                sd.buf.len() as u32,
            )
            // All of it before the link goes on: without MSG_WAITALL, io_uring
            // completes a send that found too little room short, and runs the recv.
            .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
            .build()
            .flags(io_uring::squeue::Flags::IO_LINK)
            .user_data(su),
            io_uring::opcode::Recv::new(
                io_uring::types::Fd(rd.fd),
                rd.buf.as_mut_ptr(),
                discard as u32,
            )
            .flags(libc::MSG_DONTWAIT)
            .build()
            .user_data(ru),
        ];
        // SAFETY: everything the entries point to is owned by the slots, which the ring
        // keeps (through `su` and `ru`) until their completions are reaped.
        let pushed = with_ring(|r| unsafe { r.push(&entries, 2).map(|()| r.reaped()) })
            .expect("a uring context");
        let reaped_before = match pushed {
            Ok(n) => n,
            Err(e) => {
                // SAFETY: the counts taken for the ring, which never got the entries.
                unsafe {
                    drop(Arc::from_raw(su as *const Slot));
                    drop(Arc::from_raw(ru as *const Slot));
                }
                return Err(e);
            }
        };
        // Parked until the worker's next poll submits the pair (with the other
        // connections' replies) and reaps it.
        wait(&send, || {
            with_ring(|r| r.cancel(su));
        });
        wait(&recv, || {
            with_ring(|r| r.cancel(ru));
        });
        // Other sockets' completions came with these two, and their threads may run
        // before this one submits its next receive: its own next bytes, sent before
        // theirs, would then come after (the peer that got this reply may have sent
        // them already). The next receive tries the call at once (past the hint of
        // `recv`), which finds them: requests stay in the order they arrived.
        if with_ring(|r| r.reaped()).unwrap_or(0) > reaped_before + 2 {
            fd.0.recv_waits.store(0, Relaxed);
        }
        // SAFETY: done was seen on both: their data is ours now.
        let (sd, rd) = unsafe { (core::mem::take(send.data()), core::mem::take(recv.data())) };
        bufs::give_copy(sd.buf);
        bufs::give_copy(rd.buf);
        let (s, r) = (send.res.load(Relaxed), recv.res.load(Relaxed));
        if s < 0 && s != -(libc::EAGAIN as i64) {
            return Err(io::Error::from_raw_os_error(-s as i32));
        }
        // A short send or a recv that did not run: the plain calls finish the work.
        sent = s.max(0) as usize;
        if r > 0 {
            // What the recv took is gone, whatever the send did.
            left -= (r as usize).min(left);
        }
    }
    while sent < buf.len() {
        match send(fd, &buf[sent..], deadline)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => sent += n,
        }
    }
    discard_queued(fd, left)
}

/// The longest reply [`send_then_recv`] chains: its copy stays allocated until the
/// receive completes, which may be long for an idle peer (a longer one is sent first,
/// and the receive follows as a call of its own).
const SEND_CHAINED: usize = 16 << 10;

/// Sends all of `buf`, takes `discard` bytes off the socket's receive queue (peeked
/// ones, as [`send_then_discard`]; 0: none), then receives into `rbuf` with `flags`
/// (0, or `MSG_PEEK`), waiting for bytes: a server's reply to one read and its next
/// read. On an io_uring worker the three go to the kernel as one linked chain in the
/// `io_uring_enter` the worker makes once it has nothing left to run (with the other
/// green threads' operations of its turn), and the calling green thread is woken once,
/// by the receive: no `send` of its own for the reply, and no receive tried at once
/// that would only say EAGAIN. The receive is in the kernel from the moment the reply
/// has gone out, so a peer's next bytes are taken in the order they arrive among the
/// worker's other sockets' (see `send_then_discard` for why that order matters).
/// Elsewhere (another backend, a timeout, a reply longer than [`SEND_CHAINED`], a long
/// discard): the calls one after the other. Returns what the receive got (0: the peer
/// closed).
pub(crate) fn send_then_recv(
    fd: &Fd,
    buf: &[u8],
    discard: usize,
    rbuf: &mut [u8],
    flags: libc::c_int,
    write_deadline: Option<Instant>,
    read_deadline: Option<Instant>,
) -> io::Result<usize> {
    let len = rbuf.len().min(MAX_IO);
    if ctx() != Ctx::Uring
        || write_deadline.is_some()
        || read_deadline.is_some()
        || buf.is_empty()
        || buf.len() > SEND_CHAINED
        || discard > DISCARD_CHAINED
        || len == 0
    {
        if discard > 0 || !buf.is_empty() {
            send_then_discard(fd, buf, discard, write_deadline)?;
        }
        return recv_flags(fd, rbuf, read_deadline, flags);
    }
    crate::worker::preemption_point();
    let slot = |buf: Vec<u8>, flags: libc::c_int| {
        let s = Slot::new(OpData {
            fd: fd.raw(),
            buf,
            flags,
            keep: Some(fd.clone()),
            ..Default::default()
        });
        let ud = Arc::into_raw(s.clone()) as u64;
        (s, ud)
    };
    let (send, su) = slot(bufs::copy(buf), 0);
    // The removal's few bytes from the send buffers' cache (`send_then_discard` says
    // why).
    let removal = (discard > 0).then(|| slot(bufs::zeroed_copy(discard), 0));
    let (recv, vu) = slot(bufs::take(len), flags);
    // The first ones wake nobody: the receive comes after them in the chain, and its
    // waiter looks at them once it is done.
    send.quiet.store(true, Relaxed);
    let link = io_uring::squeue::Flags::IO_LINK;
    // SAFETY: not handed over yet: the submitter's.
    let sd = unsafe { send.data() };
    let mut entries = vec![io_uring::opcode::Send::new(
        io_uring::types::Fd(sd.fd),
        sd.buf.as_ptr(),
        sd.buf.len() as u32,
    )
    // All of it or a failure, which breaks the chain: without MSG_WAITALL, io_uring
    // completes a send that found too little room short, and runs what follows.
    .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
    .build()
    .flags(link)
    .user_data(su)];
    if let Some((removal, ru)) = &removal {
        removal.quiet.store(true, Relaxed);
        // SAFETY: not handed over yet: the submitter's.
        let rd = unsafe { removal.data() };
        entries.push(
            io_uring::opcode::Recv::new(
                io_uring::types::Fd(rd.fd),
                rd.buf.as_mut_ptr(),
                discard as u32,
            )
            // All of the peeked bytes (queued: never waits) or a failure, which breaks
            // the chain before the next receive could see them again.
            .flags(libc::MSG_DONTWAIT | libc::MSG_WAITALL)
            .build()
            .flags(link)
            .user_data(*ru),
        );
    }
    // SAFETY: not handed over yet: the submitter's.
    let vd = unsafe { recv.data() };
    entries.push(
        io_uring::opcode::Recv::new(io_uring::types::Fd(vd.fd), vd.buf.as_mut_ptr(), len as u32)
            .flags(flags)
            .build()
            .user_data(vu),
    );
    let n = entries.len();
    // SAFETY: everything the entries point to is owned by the slots, which the ring
    // keeps (through the user data) until their completions are reaped.
    let pushed = with_ring(|r| unsafe { r.push(&entries, n) }).expect("a uring context");
    if let Err(e) = pushed {
        // SAFETY: the counts taken for the ring, which never got the entries.
        unsafe {
            drop(Arc::from_raw(su as *const Slot));
            drop(Arc::from_raw(vu as *const Slot));
            if let Some((_, ru)) = &removal {
                drop(Arc::from_raw(*ru as *const Slot));
            }
        }
        return Err(e);
    }
    wait(&recv, || {
        with_ring(|r| r.cancel(vu));
    });
    // The chain's earlier completions came before the receive's (or with it).
    wait_quiet(&send, || {});
    // SAFETY: done was seen: its data is ours now.
    bufs::give_copy(core::mem::take(unsafe { send.data() }).buf);
    let s = send.res.load(Relaxed);
    let mut result = if s < 0 {
        Err(io::Error::from_raw_os_error(-s as i32))
    } else if (s as usize) < buf.len() {
        Err(io::ErrorKind::WriteZero.into())
    } else {
        Ok(())
    };
    if let Some((removal, _)) = &removal {
        wait_quiet(removal, || {});
        // SAFETY: done was seen: its data is ours now.
        bufs::give_copy(core::mem::take(unsafe { removal.data() }).buf);
        let r = removal.res.load(Relaxed);
        if result.is_ok() && r != discard as i64 {
            result = Err(if r < 0 {
                io::Error::from_raw_os_error(-r as i32)
            } else {
                io::ErrorKind::UnexpectedEof.into()
            });
        }
    }
    // SAFETY: done was seen: its data is ours now.
    let vd = core::mem::take(unsafe { recv.data() });
    let v = recv.res.load(Relaxed);
    let result = result.and_then(|()| {
        if v < 0 {
            return Err(io::Error::from_raw_os_error(-v as i32));
        }
        let v = v as usize;
        rbuf[..v].copy_from_slice(&vd.buf[..v]);
        Ok(v)
    });
    bufs::give(vd.buf);
    result
}

/// Takes `n` bytes off the socket's receive queue without waiting (they must be queued
/// already: peeked, and nobody else reads the socket); an error if they are not.
pub(crate) fn discard_queued(fd: &Fd, mut left: usize) -> io::Result<()> {
    let mut scratch = [0u8; 4096];
    while left > 0 {
        let want = left.min(scratch.len());
        // SAFETY: `scratch` is `want` (<= its length) writable bytes of ours.
        let r = sys_retry(|| unsafe {
            libc::recv(
                fd.raw(),
                scratch.as_mut_ptr().cast(),
                want,
                libc::MSG_DONTWAIT,
            )
        });
        match r {
            r if r > 0 => left -= r as usize,
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            e => return Err(io::Error::from_raw_os_error(-e as i32)),
        }
    }
    Ok(())
}

/// accept4(2): the new connection (close-on-exec) and its peer address.
pub(crate) fn accept(fd: &Fd, deadline: Option<Instant>) -> io::Result<(Fd, SockAddr)> {
    let cx = ctx();
    if cx != Ctx::Uring {
        let mut addr = SockAddr::default();
        let nb = cx == Ctx::Threads;
        let flags = libc::SOCK_CLOEXEC | if nb { libc::SOCK_NONBLOCK } else { 0 };
        let raw = fd.raw();
        let st: *mut libc::sockaddr_storage = &mut addr.storage;
        let len: *mut libc::socklen_t = &mut addr.len;
        let n = sock_loop(cx, fd, Dir::Read, deadline, |_| {
            // SAFETY: `st`/`len` point to the local address buffer.
            sys_retry(|| unsafe {
                *len = core::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                libc::accept4(raw, st.cast(), len, flags) as isize
            })
        })?;
        return Ok((Fd::new(n as RawFd, nb), addr));
    }
    loop {
        let data = OpData {
            fd: fd.raw(),
            keep: Some(fd.clone()),
            ..Default::default()
        };
        let done = run(
            cx,
            data,
            |d| {
                io_uring::opcode::Accept::new(
                    io_uring::types::Fd(d.fd),
                    (&mut d.addr.storage as *mut libc::sockaddr_storage).cast(),
                    &mut d.addr.len,
                )
                .flags(libc::SOCK_CLOEXEC)
                .build()
            },
            |_| -(libc::ENOSYS as i64),
            remaining(deadline)?,
        )?;
        if done.res == -(libc::EAGAIN as i64) {
            wait_ready(cx, fd, Dir::Read, None, deadline)?;
            continue;
        }
        let n = uring_sock_result(&done, deadline)?;
        return Ok((Fd::new(n as RawFd, false), done.data.addr));
    }
}

/// The pending error of a socket (SO_ERROR), as a result.
fn so_error(fd: RawFd) -> io::Result<()> {
    let mut err: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a local int.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(())
}

/// connect(2) to `addr`.
pub(crate) fn connect(fd: &Fd, addr: SockAddr, deadline: Option<Instant>) -> io::Result<()> {
    let cx = ctx();
    let mut since = None;
    let res = if cx == Ctx::Uring {
        let data = OpData {
            fd: fd.raw(),
            addr,
            keep: Some(fd.clone()),
            ..Default::default()
        };
        let done = run(
            cx,
            data,
            connect_sqe,
            |_| -(libc::ENOSYS as i64),
            remaining(deadline)?,
        )?;
        if done.res == -(libc::ECANCELED as i64) && deadline.is_some() {
            return Err(timed_out());
        }
        done.res
    } else {
        // A plain thread with a deadline connects without blocking, then polls; the
        // threads backend's sockets are nonblocking anyway.
        if cx == Ctx::Threads || deadline.is_some() {
            fd.ensure_nonblocking()?;
        }
        since = readiness(cx, fd, Dir::Write);
        let raw = fd.raw();
        // SAFETY: connects with an address owned by this frame.
        let r = unsafe {
            libc::connect(
                raw,
                (&addr.storage as *const libc::sockaddr_storage).cast(),
                addr.len,
            )
        };
        if r < 0 {
            neg_errno()
        } else {
            0
        }
    };
    match res {
        0 => Ok(()),
        r if r == -(libc::EINPROGRESS as i64)
            || r == -(libc::EINTR as i64)
            || r == -(libc::EAGAIN as i64) =>
        {
            wait_ready(cx, fd, Dir::Write, since, deadline).and_then(|()| so_error(fd.raw()))
        }
        r => Err(io::Error::from_raw_os_error(-r as i32)),
    }
    // (A socket made nonblocking here stays so: every context handles EAGAIN.)
}

/// Buffers for operations whose memory the kernel uses until they complete (read,
/// recv, write and send copy through them, so that a cancelled operation never
/// writes into the caller's memory). A fresh zeroed 16 KiB buffer per read cost more
/// than the read's own work (memset was the top entry of a server's profile), so
/// each OS thread keeps a few: a buffer comes back after its operation completed and
/// its bytes were copied out; one lost to a cancellation is simply freed.
pub(crate) mod bufs {
    use std::cell::RefCell;

    /// Bytes of buffers kept per OS thread and kind, and the largest buffer kept. A
    /// worker with many connections has as many recvs in flight, each holding a
    /// buffer: a budget of a few buffers would free and allocate (zeroed) one per
    /// recv as they come and go.
    const KEEP_BYTES: usize = 1 << 20;
    const MAX: usize = 256 << 10;

    thread_local! {
        /// Buffers that operations fill (reads, recvs): their length stays what it
        /// was, so reusing one for the same size zeroes nothing.
        static FILL: RefCell<Cache> = const { RefCell::new(Cache::new()) };
        /// Buffers that carry a copy (writes, sends): refilled by copying, never
        /// zeroed. Kept apart from `FILL`, whose length a short copy would cut (the
        /// next 16 KiB recv would then zero 16 KiB again).
        static COPY: RefCell<Cache> = const { RefCell::new(Cache::new()) };
    }

    /// A buffer of `len` bytes for an operation to fill (zeroed where it was never
    /// used; a reused one holds old bytes, which the operation overwrites and nobody
    /// reads). Give it back with [`give`].
    pub(crate) fn take(len: usize) -> Vec<u8> {
        // The caches are this OS thread's: a green thread switched out while it borrows
        // one (preemption) would leave it borrowed for the next.
        let _np = super::NoPreempt::new();
        match FILL.with(|c| c.borrow_mut().pop()) {
            Some(mut v) => {
                v.resize(len, 0);
                v
            }
            None => vec![0; len],
        }
    }

    /// A buffer holding a copy of `src`. Give it back with [`give_copy`].
    pub(crate) fn copy(src: &[u8]) -> Vec<u8> {
        let _np = super::NoPreempt::new();
        match COPY.with(|c| c.borrow_mut().pop()) {
            Some(mut v) => {
                v.clear();
                v.extend_from_slice(src);
                v
            }
            None => src.to_vec(),
        }
    }

    /// A buffer of `len` zeroed bytes from the copy buffers (for an operation that
    /// fills a few bytes nobody reads: it leaves the fill buffers' lengths alone).
    /// Give it back with [`give_copy`].
    pub(crate) fn zeroed_copy(len: usize) -> Vec<u8> {
        let mut v = copy(&[]);
        v.resize(len, 0);
        v
    }

    /// Kept buffers and their total capacity.
    struct Cache {
        list: Vec<Vec<u8>>,
        bytes: usize,
    }

    impl Cache {
        const fn new() -> Cache {
            Cache {
                list: Vec::new(),
                bytes: 0,
            }
        }
        fn pop(&mut self) -> Option<Vec<u8>> {
            let v = self.list.pop()?;
            self.bytes -= v.capacity();
            Some(v)
        }
    }

    fn keep(cache: &'static std::thread::LocalKey<RefCell<Cache>>, v: Vec<u8>) {
        let _np = super::NoPreempt::new();
        if v.capacity() <= MAX {
            cache.with(|c| {
                let mut c = c.borrow_mut();
                if c.bytes + v.capacity() <= KEEP_BYTES {
                    c.bytes += v.capacity();
                    c.list.push(v);
                }
            });
        }
    }

    /// Gives a buffer from [`take`] back for reuse.
    pub(crate) fn give(v: Vec<u8>) {
        keep(&FILL, v);
    }

    /// Gives a buffer from [`copy`] back for reuse.
    pub(crate) fn give_copy(v: Vec<u8>) {
        keep(&COPY, v);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// A receive buffer given back keeps its length through a request's removal
        /// (`send_then_discard`'s few bytes come from the copy buffers), so the next
        /// receive of that size gets the same allocation at its full length: nothing
        /// to zero.
        #[test]
        fn a_removal_leaves_the_receive_buffers_whole() {
            let recv = take(16 << 10);
            let at = recv.as_ptr();
            give(recv);
            let discard = zeroed_copy(30);
            assert_eq!(discard, vec![0u8; 30]);
            give_copy(discard);
            FILL.with(|c| {
                let c = c.borrow();
                let top = c.list.last().expect("the receive buffer kept");
                assert_eq!((top.as_ptr(), top.len()), (at, 16 << 10));
            });
            let again = take(16 << 10);
            assert_eq!(
                again.as_ptr(),
                at,
                "the kept receive buffer is the one taken next"
            );
        }
    }
}
