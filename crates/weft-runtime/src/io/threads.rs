//! The thread fallback backend: a pool of OS threads for blocking calls, and one epoll
//! thread for socket readiness (see `io/mod.rs` for the semantics).
//!
//! **Pools** ([`Pool`]): a job queue served by OS threads that are started on demand
//! (when no idle thread is waiting for the queued jobs) up to a limit, and exit after
//! [`KEEP_ALIVE`] without work. Two instances: [`io_pool`] for file syscalls (64 KiB
//! stacks: a job is one syscall and an unpark) and [`blocking_pool`] for
//! `weft_runtime::blocking` closures (user code: 2 MiB stacks, committed lazily). Past
//! the limit jobs wait in the queue; a job runs even if thread creation fails (on the
//! caller, as a last resort, when no pool thread exists).
//!
//! **Poller** (sockets): a socket is made nonblocking and the green thread makes the
//! call itself; on `EAGAIN` it waits on the socket's [`Registration`], registered once
//! with a process-wide epoll instance (edge-triggered, read and write interest). Each
//! direction keeps a `ready` flag and at most one waiter: the epoll thread sets the
//! flag and wakes the waiter; a waiter that finds the flag set clears it and retries
//! its call instead of parking (so an edge between its `EAGAIN` and its wait is not
//! lost). This keeps 1,000 blocked socket operations at 1,000 parked green threads and
//! no extra OS thread, and lets shutdown abandon a wait without leaving a thread stuck
//! in a syscall.

use super::{Dir, Fd, NoPreempt};
use crate::park::{self, Unparker};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long an idle pool thread waits for work before it exits.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A job for a pool thread.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A pool of OS threads, grown on demand up to `max` (module comment).
pub(crate) struct Pool {
    name: &'static str,
    stack: usize,
    max: usize,
    state: Mutex<PoolState>,
    cv: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
}

impl Pool {
    const fn new(name: &'static str, stack: usize, max: usize) -> Pool {
        Pool {
            name,
            stack,
            max,
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            cv: Condvar::new(),
        }
    }

    /// Runs `job` on a pool thread.
    pub(crate) fn execute(&'static self, job: Job) {
        let mut st = lock(&self.state);
        st.jobs.push_back(job);
        if st.idle >= st.jobs.len() || st.threads >= self.max {
            drop(st);
            self.cv.notify_one();
            return;
        }
        st.threads += 1;
        drop(st);
        let spawned = std::thread::Builder::new()
            .name(self.name.into())
            .stack_size(self.stack)
            .spawn(move || self.serve());
        if spawned.is_err() {
            let mut st = lock(&self.state);
            st.threads -= 1;
            if st.threads == 0 {
                // No thread to run it: run what is queued here rather than never.
                while let Some(j) = st.jobs.pop_front() {
                    drop(st);
                    let _ = catch_unwind(AssertUnwindSafe(j));
                    st = lock(&self.state);
                }
            }
        }
    }

    fn serve(&'static self) {
        unpin_current_thread();
        let mut st = lock(&self.state);
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                // Jobs catch their own panics; this keeps the thread if one does not.
                let _ = catch_unwind(AssertUnwindSafe(job));
                st = lock(&self.state);
                continue;
            }
            st.idle += 1;
            let (g, to) = self
                .cv
                .wait_timeout(st, KEEP_ALIVE)
                .unwrap_or_else(PoisonError::into_inner);
            st = g;
            st.idle -= 1;
            if to.timed_out() && st.jobs.is_empty() {
                st.threads -= 1;
                return;
            }
        }
    }

    /// Threads alive now (for tests and `weft ps`).
    #[allow(dead_code)]
    pub(crate) fn threads(&self) -> usize {
        lock(&self.state).threads
    }
}

/// A pool thread started from a pinned worker inherits its single CPU: it gets the
/// process's CPUs back (the main thread's set), so blocking work spreads over them.
fn unpin_current_thread() {
    // SAFETY: reads the main thread's CPU set into a local and applies it to the
    // calling thread; both calls only touch that local.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        let size = core::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut set) == 0 {
            libc::sched_setaffinity(0, size, &set);
        }
    }
}

static IO_POOL: Pool = Pool::new("weft-io", 64 * 1024, 256);
static BLOCKING_POOL: Pool = Pool::new("weft-blocking", 2 * 1024 * 1024, 512);
static CACHEMISS_POOL: Pool = Pool::new("weft-cachemiss", 256 * 1024, 256);

/// The pool of syslet "cachemiss" threads (`syslet/exec.rs`).
pub(crate) fn cachemiss_pool() -> &'static Pool {
    &CACHEMISS_POOL
}

/// The pool for file syscalls of the threads backend (and closes).
pub(crate) fn io_pool() -> &'static Pool {
    &IO_POOL
}

/// The pool for `weft_runtime::blocking`.
pub(crate) fn blocking_pool() -> &'static Pool {
    &BLOCKING_POOL
}

// ---------------------------------------------------------------------------------
// The poller

/// One direction of a registered descriptor: a count of readiness edges, and every
/// green thread waiting for the next one. Edge-triggered epoll reports an edge once for
/// however much became ready (two connections, say), so an edge wakes *every* waiter
/// and each retries its call; a waiter that read the count before its call returned
/// `EAGAIN` waits only if no edge has come since, so none is lost.
#[derive(Default)]
struct Side {
    edges: u64,
    waiters: Vec<Unparker>,
}

#[derive(Default)]
struct PollState {
    read: Mutex<Side>,
    write: Mutex<Side>,
}

impl PollState {
    fn side(&self, dir: Dir) -> &Mutex<Side> {
        match dir {
            Dir::Read => &self.read,
            Dir::Write => &self.write,
        }
    }
}

fn wake(side: &Mutex<Side>) {
    let ws = {
        let mut s = lock(side);
        s.edges = s.edges.wrapping_add(1);
        std::mem::take(&mut s.waiters)
    };
    for w in ws {
        w.unpark_owned();
    }
}

struct Poller {
    epfd: RawFd,
    regs: Mutex<HashMap<u64, Arc<PollState>>>,
    next: AtomicU64,
}

static POLLER: OnceLock<Result<Poller, String>> = OnceLock::new();

fn poller() -> io::Result<&'static Poller> {
    let p = POLLER.get_or_init(|| {
        // SAFETY: creates a descriptor this process keeps for its lifetime.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(format!("epoll_create1: {}", io::Error::last_os_error()));
        }
        Ok(Poller {
            epfd,
            regs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        })
    });
    let p = p.as_ref().map_err(|e| io::Error::other(e.clone()))?;
    static START: std::sync::Once = std::sync::Once::new();
    let mut err = None;
    START.call_once(|| {
        if let Err(e) = std::thread::Builder::new()
            .name("weft-poller".into())
            .stack_size(64 * 1024)
            .spawn(move || poller_main(p))
        {
            err = Some(e);
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(p),
    }
}

fn poller_main(p: &'static Poller) {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        // SAFETY: epoll_wait into our array.
        let n = unsafe { libc::epoll_wait(p.epfd, evs.as_mut_ptr(), evs.len() as i32, -1) };
        if n < 0 {
            continue; // EINTR
        }
        for ev in &evs[..n as usize] {
            let (events, token) = (ev.events as i32, ev.u64);
            let st = lock(&p.regs).get(&token).cloned();
            let Some(st) = st else { continue };
            if events & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                wake(&st.read);
            }
            if events & (libc::EPOLLOUT | libc::EPOLLHUP | libc::EPOLLERR) != 0 {
                wake(&st.write);
            }
        }
    }
}

/// A socket's registration with the poller (one per socket, for its lifetime).
pub(crate) struct Registration {
    token: u64,
    state: Arc<PollState>,
}

impl Registration {
    pub(crate) fn new(fd: RawFd) -> io::Result<Registration> {
        let p = poller()?;
        let token = p.next.fetch_add(1, Relaxed);
        let state = Arc::new(PollState::default());
        lock(&p.regs).insert(token, state.clone());
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: registers a descriptor we own.
        if unsafe { libc::epoll_ctl(p.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            let e = io::Error::last_os_error();
            lock(&p.regs).remove(&token);
            return Err(e);
        }
        Ok(Registration { token, state })
    }

    /// How many readiness edges came in direction `dir` (see [`edges`]).
    #[cfg_attr(not(feature = "hook"), allow(dead_code))]
    pub(crate) fn edges(&self, dir: Dir) -> u64 {
        let _np = NoPreempt::new();
        lock(self.state.side(dir)).edges
    }

    /// Arms the registration of `fd` again (`EPOLL_CTL_MOD`, or `ADD` when the kernel
    /// has dropped it: the descriptor was closed and its number given out again): the
    /// readiness it has now comes as an edge.
    #[cfg_attr(not(feature = "hook"), allow(dead_code))]
    pub(crate) fn rearm(&self, fd: RawFd) -> io::Result<()> {
        let p = poller()?;
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET) as u32,
            u64: self.token,
        };
        // SAFETY: an epoll_event on the stack, for a descriptor of the caller's.
        unsafe {
            if libc::epoll_ctl(p.epfd, libc::EPOLL_CTL_MOD, fd, &mut ev) == 0
                || libc::epoll_ctl(p.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) == 0
            {
                return Ok(());
            }
        }
        Err(io::Error::last_os_error())
    }

    /// Removes the registration (before the descriptor is closed).
    pub(crate) fn deregister(&self, fd: RawFd) {
        let _np = NoPreempt::new();
        if let Ok(p) = poller() {
            // SAFETY: unregisters a descriptor we still own.
            unsafe { libc::epoll_ctl(p.epfd, libc::EPOLL_CTL_DEL, fd, core::ptr::null_mut()) };
            lock(&p.regs).remove(&self.token);
        }
    }
}

/// Waits (parking the green thread) until `fd` may be ready for `dir`, or `deadline`.
/// The count of readiness edges of `fd` in direction `dir` (registering it with the
/// poller on first use), to be read *before* trying the call that may return `EAGAIN`
/// and passed to [`wait_ready`]. None if the descriptor cannot be registered.
pub(crate) fn edges(fd: &Fd, dir: Dir) -> Option<u64> {
    let _np = NoPreempt::new();
    let reg = fd.0.reg.get_or_init(|| Registration::new(fd.raw()).ok());
    reg.as_ref().map(|r| lock(r.state.side(dir)).edges)
}

/// Waits until an edge comes after `since` (from [`edges`], read before the call that
/// returned `EAGAIN`), or `deadline`.
pub(crate) fn wait_ready(
    fd: &Fd,
    dir: Dir,
    since: Option<u64>,
    deadline: Option<Instant>,
) -> io::Result<()> {
    wait_ready_or(fd, dir, since, deadline, &|| false)
}

/// As [`wait_ready`], returning `Ok` early too when `stop` says so after a wake-up (the
/// caller, which unparks the thread to stop it, then looks at why).
pub(crate) fn wait_ready_or(
    fd: &Fd,
    dir: Dir,
    since: Option<u64>,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> io::Result<()> {
    // Not preemptible while the registry's mutex (or the OnceLock) is held: a green
    // thread switched out holding it would stall the poller and every green thread of
    // its worker that wants it.
    let reg = {
        let _np = NoPreempt::new();
        fd.0.reg.get_or_init(|| Registration::new(fd.raw()).ok())
    };
    let (Some(reg), Some(since)) = (reg, since) else {
        return wait_on_pool(fd, dir, deadline);
    };
    wait_edge(reg, dir, since, deadline, stop)
}

/// Waits until registration `reg` has an edge in direction `dir` after `since`, or
/// `deadline`, or `stop` says so after a wake-up (then `Ok`).
pub(crate) fn wait_edge(
    reg: &Registration,
    dir: Dir,
    since: u64,
    deadline: Option<Instant>,
    stop: &dyn Fn() -> bool,
) -> io::Result<()> {
    let side = reg.state.side(dir);
    let me = Unparker::current();
    // Takes our entry out of the waiter list however we leave (an edge already took it;
    // a timeout or a shutdown unwind did not).
    struct Leave<'a>(&'a Mutex<Side>, &'a Unparker);
    impl Drop for Leave<'_> {
        fn drop(&mut self) {
            let _np = NoPreempt::new();
            lock(self.0).waiters.retain(|w| !w.same_as(self.1));
        }
    }
    let _leave = Leave(side, &me);
    loop {
        if stop() {
            return Ok(());
        }
        {
            let _np = NoPreempt::new();
            let mut s = lock(side);
            if s.edges != since {
                return Ok(());
            }
            if !s.waiters.iter().any(|w| w.same_as(&me)) {
                s.waiters.push(me.clone());
            }
        }
        match deadline {
            None => park::park(),
            Some(d) => {
                if Instant::now() >= d {
                    return Err(super::timed_out());
                }
                park::park_until(d)
            }
        }
    }
}

/// Without a poller registration: a pool thread polls for us.
fn wait_on_pool(fd: &Fd, dir: Dir, deadline: Option<Instant>) -> io::Result<()> {
    let data = super::OpData {
        fd: fd.raw(),
        flags: (dir == Dir::Write) as i32,
        // The time left, in microseconds (milliseconds would round a wait short).
        off: deadline.map(|d| d.saturating_duration_since(Instant::now()).as_micros() as u64),
        keep: Some(fd.clone()),
        ..Default::default()
    };
    let done = super::run(
        super::Ctx::Threads,
        data,
        |_| unreachable!("not an io_uring context"),
        |d| {
            let deadline = d.off.map(|us| Instant::now() + Duration::from_micros(us));
            let dir = if d.flags != 0 { Dir::Write } else { Dir::Read };
            match super::poll_fd(d.fd, dir, deadline) {
                Ok(()) => 0,
                Err(e) if e.kind() == io::ErrorKind::TimedOut => -(libc::ETIMEDOUT as i64),
                Err(e) => -(e.raw_os_error().unwrap_or(libc::EIO) as i64),
            }
        },
        None,
    )?;
    if done.res == -(libc::ETIMEDOUT as i64) {
        return Err(super::timed_out());
    }
    done.result().map(drop)
}
