//! How a hooked call waits: parked, registered where a close or a signal finds it, on
//! the worker's io_uring or the thread fallback.
//!
//! A [`Waiter`] is the call's registration. It is on the waiter list of every
//! descriptor the call waits on (`fdtab`: a close wakes it) and, when the program has
//! signal handlers the layer wraps, on the signal list (`signal.rs`: a signal handled
//! on its worker wakes it). After every wake-up the call asks [`Waiter::check`] why.
//!
//! What it waits for:
//!
//! - **readiness** ([`ready`]): on io_uring an `IORING_OP_POLL_ADD` for the descriptor
//!   (with a linked timeout for a deadline); on the thread fallback a private epoll
//!   instance holding the descriptor, itself watched by the runtime's epoll thread. A
//!   set of descriptors (`poll`, `select`) is a private epoll instance on both.
//!   Nothing is read or written while waiting, so giving up is always free.
//! - **an operation** ([`ring_op`]): accept, connect, and the reads and writes of disk
//!   files, on io_uring, with buffers the operation owns (`io::OpData`). Giving up (a
//!   signal, a close) cancels it and then waits for its completion: if it completed
//!   anyway, its result stands, as if the signal had come just after the call.
//! - **a pool thread** ([`pool`]): the same on the thread fallback, and what has no
//!   io_uring form (`getaddrinfo`, `waitpid`).
//!
//! Runtime shutdown: the park that raises the shutdown unwind is caught here and ends
//! the call with [`Stop::Shutdown`] (the call then fails with `ECANCELED`); an unwind
//! must not cross the C functions the call returns through.

use super::fdtab::{self, Entry, Link};
use super::signal;
use crate::io::{self, threads, Dir, Fd, OpData, Slot};
use crate::park::{self, Unparker};
use crate::worker;
use core::ffi::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a wait ended before what it waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// A descriptor waited on was closed (or replaced): `EBADF`.
    Closed,
    /// A signal was handled on this worker; `restart`: its handler has `SA_RESTART`.
    Signal { restart: bool },
    /// The deadline passed.
    TimedOut,
    /// The runtime is shutting down: `ECANCELED`.
    Shutdown,
}

/// A hooked call's registration while it may park (module comment).
pub(crate) struct Waiter {
    me: Unparker,
    links: Vec<(&'static Entry, Box<Link>, u32)>,
    sig: Option<signal::SigLink>,
    /// A signal whose handler has `SA_RESTART` does not stop the call (the kernel
    /// would restart it); false for calls the kernel never restarts (`poll`, sleeps,
    /// socket calls with a timeout).
    restartable: bool,
}

impl Waiter {
    /// The calling green thread's registration (on no descriptor yet); `restartable`:
    /// see the field.
    pub(crate) fn new(restartable: bool) -> Waiter {
        let me = Unparker::current();
        let sig = signal::register(&me);
        Waiter {
            me,
            links: Vec::new(),
            sig,
            restartable,
        }
    }

    /// A registration that nothing interrupts but the runtime's shutdown: for waits
    /// the kernel does not interrupt either (the disk, `fsync`, opens, closes).
    pub(crate) fn quiet() -> Waiter {
        Waiter {
            me: Unparker::current(),
            links: Vec::new(),
            sig: None,
            restartable: true,
        }
    }

    /// Watches descriptor entry `e`, as of generation `gen` (read when the call
    /// started): fails if it has been closed or replaced since.
    pub(crate) fn watch(&mut self, e: &'static Entry, gen: u32) -> Result<(), Stop> {
        let link = Box::new(Link::new(self.me.clone()));
        if !e.register(&link, gen) {
            return Err(Stop::Closed);
        }
        self.links.push((e, link, gen));
        Ok(())
    }

    /// Watches `fd` as it is now (for calls that take a set of descriptors).
    pub(crate) fn watch_fd(&mut self, fd: c_int) -> Result<(), Stop> {
        match fdtab::entry(fd) {
            Some(e) => self.watch(e, e.gen()),
            None => Ok(()),
        }
    }

    /// Why the call should stop waiting, if it should. A signal that would restart
    /// the call is taken here: the call goes on waiting.
    pub(crate) fn check(&self) -> Option<Stop> {
        if self.links.iter().any(|(e, _, g)| e.gen() != *g) {
            return Some(Stop::Closed);
        }
        let sig = self.sig.as_ref()?;
        match sig.pending()? {
            Stop::Signal { restart: true } if self.restartable => {
                sig.clear();
                None
            }
            s => Some(s),
        }
    }

    /// Parks once (until `deadline` if given), or not at all if the call should stop.
    pub(crate) fn park(&self, deadline: Option<Instant>) -> Result<(), Stop> {
        if let Some(s) = self.check() {
            return Err(s);
        }
        park_once(deadline)?;
        match self.check() {
            Some(s) => Err(s),
            None => Ok(()),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        for (e, link, _) in &self.links {
            e.unregister(link);
        }
    }
}

/// Whether the calling green thread's runtime is shutting down (its parks return at
/// once, or unwind).
fn cancelled() -> bool {
    worker::current_cancelled()
}

/// One park of the calling green thread, the shutdown unwind caught.
pub(crate) fn park_once(deadline: Option<Instant>) -> Result<(), Stop> {
    if cancelled() {
        return Err(Stop::Shutdown);
    }
    let r = catch_unwind(AssertUnwindSafe(|| match deadline {
        None => park::park(),
        Some(d) => park::park_until(d),
    }));
    match r {
        Ok(()) => Ok(()),
        Err(p) if p.is::<worker::Shutdown>() => Err(Stop::Shutdown),
        Err(p) => resume_unwind(p),
    }
}

/// Lets the worker's other green threads run once (the shutdown unwind caught).
pub(crate) fn yield_once() -> Result<(), Stop> {
    match catch_unwind(worker::yield_now) {
        Ok(()) => Ok(()),
        Err(p) if p.is::<worker::Shutdown>() => Err(Stop::Shutdown),
        Err(p) => resume_unwind(p),
    }
}

/// The time left until `deadline` (None: no deadline), or `TimedOut`.
fn left(deadline: Option<Instant>) -> Result<Option<Duration>, Stop> {
    match deadline {
        None => Ok(None),
        Some(d) => {
            let now = Instant::now();
            if now >= d {
                Err(Stop::TimedOut)
            } else {
                Ok(Some(d - now))
            }
        }
    }
}

/// Whether the calling green thread's worker uses io_uring.
pub(crate) fn on_uring() -> bool {
    io::ctx() == io::Ctx::Uring
}

/// Waits until one of `fds` (descriptor, `poll` events) may be ready, or `deadline`.
/// `Ok` means "look again": ready, or the descriptor is in a state the retried call
/// will report (closed, not pollable).
pub(crate) fn ready(
    fds: &[(c_int, u32)],
    deadline: Option<Instant>,
    w: &Waiter,
) -> Result<(), Stop> {
    if fds.len() == 1 && on_uring() {
        return poll_uring(fds[0].0, fds[0].1, deadline, w);
    }
    let Some(set) = EpollSet::new(fds) else {
        return ready_on_pool(fds, deadline, w);
    };
    if set.empty {
        // Nothing can become ready (only descriptors that cannot be polled for what
        // was asked): wait for the deadline, a close or a signal.
        return sleep_until(deadline, w);
    }
    if on_uring() {
        return poll_uring(set.fd.raw(), libc::POLLIN as u32, deadline, w);
    }
    let since = threads::edges(&set.fd, Dir::Read);
    if set.is_ready() {
        return Ok(());
    }
    threads::wait_ready_or(&set.fd, Dir::Read, since, deadline, &|| w.check().is_some()).map_err(
        |e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                Stop::TimedOut
            } else {
                Stop::Closed
            }
        },
    )?;
    match w.check() {
        Some(s) => Err(s),
        None => Ok(()),
    }
}

/// The readiness-edge count of a descriptor's registration with the thread fallback's
/// epoll thread, read before a call that may say `EAGAIN`, so that an edge between that
/// call and the wait after it is not lost (and the wait need not arm the registration
/// again, which would make the epoll thread report the descriptor once more).
pub(crate) struct Mark(Option<(Arc<threads::Registration>, u64)>);

impl Mark {
    /// No mark (io_uring, or a descriptor not registered yet: its wait arms one).
    pub(crate) fn none() -> Mark {
        Mark(None)
    }

    /// The mark of `e` (generation `gen`) in direction `dir`, if the worker uses the
    /// thread fallback and the descriptor has a registration already.
    pub(crate) fn take(e: Option<&'static Entry>, gen: u32, dir: Dir) -> Mark {
        if on_uring() {
            return Mark(None);
        }
        Mark(e.and_then(|e| e.existing_registration(gen)).map(|r| {
            let since = r.edges(dir);
            (r, since)
        }))
    }
}

/// How long a wait through a registration lasts before it arms the registration again:
/// a descriptor closed and its number given out again behind the layer's back would
/// otherwise leave the wait on a registration the kernel dropped.
const REARM_EVERY: Duration = Duration::from_secs(10);

/// Waits until descriptor `fd` (entry `e` as of generation `gen`, if it has one) may
/// be ready for `events`: as [`ready`], and on the thread fallback through the
/// descriptor's own registration with the epoll thread (no descriptor of its own),
/// from `mark` (read before the call that said `EAGAIN`) or, without one, armed again
/// now.
pub(crate) fn ready_one(
    fd: c_int,
    e: Option<&'static Entry>,
    gen: u32,
    events: u32,
    mark: Mark,
    deadline: Option<Instant>,
    w: &Waiter,
) -> Result<(), Stop> {
    if on_uring() {
        return poll_uring(fd, events, deadline, w);
    }
    let dir = match events as i16 {
        libc::POLLIN => Dir::Read,
        libc::POLLOUT => Dir::Write,
        _ => return ready(&[(fd, events)], deadline, w),
    };
    let (reg, mut since) = match mark.0 {
        Some(m) => m,
        None => {
            let Some(reg) = e.and_then(|e| e.registration(fd, gen)) else {
                return ready(&[(fd, events)], deadline, w);
            };
            let since = reg.edges(dir);
            if reg.rearm(fd).is_err() {
                // Not open any more: the call says so.
                return Ok(());
            }
            (reg, since)
        }
    };
    loop {
        let slice = Instant::now() + REARM_EVERY;
        let until = deadline.map_or(slice, |d| d.min(slice));
        match threads::wait_edge(&reg, dir, since, Some(until), &|| w.check().is_some()) {
            Ok(()) => break,
            Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => return Err(Stop::TimedOut),
            Err(_) => {
                since = reg.edges(dir);
                if reg.rearm(fd).is_err() {
                    return Ok(());
                }
            }
        }
    }
    match w.check() {
        Some(s) => Err(s),
        None => Ok(()),
    }
}

/// Waits on a pool thread with `poll(2)` (a slice of the time left at most): for when
/// no epoll instance can be made (no descriptor left). `Ok`: look again.
fn ready_on_pool(fds: &[(c_int, u32)], deadline: Option<Instant>, w: &Waiter) -> Result<(), Stop> {
    let slice = left(deadline)?.map_or(1000, |d| d.as_millis().clamp(1, 1000) as c_int);
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, ev)| libc::pollfd {
            fd,
            events: ev as i16,
            revents: 0,
        })
        .collect();
    pool(
        move || {
            // SAFETY: a set the job owns.
            unsafe { super::real::poll()(set.as_mut_ptr(), set.len() as libc::nfds_t, slice) }
        },
        false,
        Some(w),
    )?;
    left(deadline)?;
    Ok(())
}

/// Parks until `deadline` (forever if None), a close of a watched descriptor or a
/// signal: `TimedOut` when the deadline passes.
pub(crate) fn sleep_until(deadline: Option<Instant>, w: &Waiter) -> Result<(), Stop> {
    loop {
        left(deadline)?;
        w.park(deadline)?;
    }
}

/// A private epoll instance holding some descriptors (level-triggered).
struct EpollSet {
    fd: Fd,
    /// No descriptor could be added (all refuse polling for what was asked).
    empty: bool,
}

impl EpollSet {
    /// The set; None when no instance can be made (no descriptor left: the caller
    /// waits otherwise) or a descriptor cannot be added (not open any more: the caller
    /// waits otherwise and its retried call says so).
    fn new(fds: &[(c_int, u32)]) -> Option<EpollSet> {
        // SAFETY: creates a descriptor that `Fd` owns (and closes).
        let ep = unsafe { super::real::epoll_create1()(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return None;
        }
        let mut set = EpollSet {
            fd: Fd::new(ep, false),
            empty: true,
        };
        for &(fd, ev) in fds {
            if fd < 0 {
                continue;
            }
            let mut e = libc::epoll_event {
                events: ev,
                u64: fd as u64,
            };
            // SAFETY: an epoll_event on the stack.
            if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut e) } == 0 {
                set.empty = false;
                continue;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                // The same descriptor twice: wait for the events of both.
                Some(libc::EEXIST) => {
                    let mut all = libc::epoll_event {
                        events: ev | Self::events_of(fds, fd),
                        u64: fd as u64,
                    };
                    // SAFETY: as above.
                    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, fd, &mut all) };
                }
                // Not pollable (a regular file: always ready for reading and writing,
                // which the caller's first look saw): nothing to wait for on it.
                Some(libc::EPERM) => {}
                _ => return None,
            }
        }
        Some(set)
    }

    fn events_of(fds: &[(c_int, u32)], fd: c_int) -> u32 {
        fds.iter().filter(|f| f.0 == fd).fold(0, |a, f| a | f.1)
    }

    fn is_ready(&self) -> bool {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: one event into a local.
        unsafe { super::real::epoll_wait()(self.fd.raw(), &mut ev, 1, 0) > 0 }
    }
}

/// `IORING_OP_POLL_ADD` for `fd`'s `events`, until `deadline`.
fn poll_uring(fd: c_int, events: u32, deadline: Option<Instant>, w: &Waiter) -> Result<(), Stop> {
    let data = OpData {
        fd,
        flags: events as i32,
        ..Default::default()
    };
    let timeout = left(deadline)?;
    let done = ring_op(
        data,
        |d| io_uring::opcode::PollAdd::new(io_uring::types::Fd(d.fd), d.flags as u32).build(),
        timeout,
        w,
        false,
    )?;
    if done.res == -(libc::ECANCELED as i64) && deadline.is_some() {
        return Err(Stop::TimedOut);
    }
    Ok(())
}

/// Runs one io_uring operation built by `sqe` from `data` (which owns what the kernel
/// touches), with a linked timeout if `timeout` is given, parking until it completes or
/// the waiter must stop. `settle`: the operation moves data or makes a descriptor, so a
/// stop cancels it and waits for its completion (a result it reached anyway is
/// returned); otherwise a stop cancels it and returns at once.
pub(crate) fn ring_op(
    data: OpData,
    sqe: impl FnOnce(&mut OpData) -> io_uring::squeue::Entry,
    timeout: Option<Duration>,
    w: &Waiter,
    settle: bool,
) -> Result<io::Done, Stop> {
    let slot = Slot::new(data);
    // SAFETY: not handed to the kernel yet: the submitter's.
    let d = unsafe { slot.data() };
    let ud = Arc::into_raw(slot.clone()) as u64;
    let mut entries = Vec::with_capacity(2);
    let first = sqe(d).user_data(ud);
    if let Some(t) = timeout {
        d.ts = Some(
            io_uring::types::Timespec::new()
                .sec(t.as_secs())
                .nsec(t.subsec_nanos()),
        );
        let ts: *const io_uring::types::Timespec = d.ts.as_ref().expect("just set");
        entries.push(first.flags(io_uring::squeue::Flags::IO_LINK));
        entries.push(io_uring::opcode::LinkTimeout::new(ts).build().user_data(0));
    } else {
        entries.push(first);
    }
    // SAFETY: what the entries point to is owned by the slot, which the ring keeps
    // (through `ud`) until the completion is reaped.
    let pushed = io::with_ring(|r| unsafe { r.push(&entries, 1) });
    match pushed {
        Some(Ok(())) => {}
        _ => {
            // SAFETY: the count taken for the ring, which never got the entry.
            drop(unsafe { Arc::from_raw(ud as *const Slot) });
            return Err(Stop::Shutdown);
        }
    }
    let mut stopped = None;
    while !slot.is_done() {
        let r = match stopped {
            Some(_) => park_once(None),
            None => w.park(None),
        };
        match r {
            Ok(()) => {}
            Err(Stop::Shutdown) => {
                if !slot.is_done() {
                    io::with_ring(|r| r.cancel(ud));
                }
                return Err(Stop::Shutdown);
            }
            Err(s) => {
                if !slot.is_done() {
                    io::with_ring(|r| r.cancel(ud));
                }
                if !settle {
                    return Err(s);
                }
                stopped = Some(s);
            }
        }
    }
    // SAFETY: done was seen: the data is ours again.
    let data = core::mem::take(unsafe { slot.data() });
    let res = slot.result();
    match stopped {
        Some(s) if res < 0 => Err(s),
        _ => Ok(io::Done { res, data }),
    }
}

/// Runs `job` on a pool thread (the file I/O pool if `io`, else the blocking pool),
/// parking until it returns. `interruptible`: a stop of the waiter ends the wait (the
/// job runs to its end and its result is dropped: only for jobs without lasting
/// effects); otherwise only the runtime's shutdown does.
pub(crate) fn pool<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
    io_pool: bool,
    interruptible: Option<&Waiter>,
) -> Result<T, Stop> {
    struct Cell<T> {
        done: AtomicBool,
        out: Mutex<Option<T>>,
        waker: Unparker,
    }
    let cell = Arc::new(Cell {
        done: AtomicBool::new(false),
        out: Mutex::new(None),
        waker: Unparker::current(),
    });
    let c2 = cell.clone();
    let run: threads::Job = Box::new(move || {
        let v = job();
        *c2.out.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        c2.done.store(true, Release);
        c2.waker.unpark();
    });
    {
        let _np = io::NoPreempt::new();
        if io_pool {
            threads::io_pool().execute(run);
        } else {
            threads::blocking_pool().execute(run);
        }
    }
    while !cell.done.load(Acquire) {
        match interruptible {
            Some(w) => w.park(None)?,
            None => park_once(None)?,
        }
    }
    let _np = io::NoPreempt::new();
    let v = cell.out.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(v.expect("a finished job left its result"))
}
