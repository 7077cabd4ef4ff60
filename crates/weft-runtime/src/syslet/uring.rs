//! The io_uring chain engine: runs the asynchronous part of syslets as io_uring linked
//! chains where io_uring has the operations, without waking the submitter in between.
//!
//! One process-wide engine (started on first use): one io_uring with a sparse table of
//! [`SLOTS`] direct descriptors, and one thread that submits chains, reaps their
//! completions, evaluates each atom's result exactly as the executor does (`ret_ptr`
//! through `fault.rs`, stop conditions, `SKIP_TO_NEXT_ON_STOP`, `next`), and goes on:
//! with another chain, with atoms it runs itself (those that never block), on a
//! cachemiss thread (`exec::offload`) for atoms io_uring cannot do, or by posting the
//! completion. New work and cancels come through a queue and an eventfd on which the
//! engine keeps a READ request (written only when the queue was empty: the engine takes
//! the whole queue at each wake-up). Completions are pushed to their rings as syslets
//! end, and each ring's waiters are woken once per batch of CQEs reaped (after the
//! batch), not once per completion. The ring is made on the engine thread, with
//! `SINGLE_ISSUER | DEFER_TASKRUN` when the kernel has them, and io-wq may use up to
//! 64 workers for bounded work (`WEFT_SYSLET_URING_WORKERS` overrides: the blocking part
//! of uncached opens runs there).
//!
//! ## What a chain is
//!
//! From an atom that maps (below), the atoms along the normal flow join the chain while
//! io_uring reproduces the executor's semantics exactly:
//!
//! | atom | io_uring |
//! |---|---|
//! | `openat` | `OPENAT` (into a direct slot when a later atom of the chain uses its descriptor and the chain also closes it) |
//! | `read`, `pread64` (offset >= 0) | `READ` (offset -1: the file position; 0 on a direct descriptor that this is the only read or write of: the file was just opened and its position is never seen again) |
//! | `write`, `pwrite64` (offset >= 0) | `WRITE` |
//! | `close` | `CLOSE` (on the direct slot when the descriptor came from the chain's `openat`) |
//! | `fsync`, `fdatasync` | `FSYNC` (`DATASYNC`) |
//! | `accept`, `accept4`, `connect` | `ACCEPT`, `CONNECT` |
//! | `recvfrom`, `sendto` without addresses | `RECV`, `SEND` |
//! | `statx` | `STATX` |
//!
//! - an atom without stop condition links to its `next` with `IOSQE_IO_HARDLINK` (the
//!   chain goes on whatever the result);
//! - `SYSLET_STOP_ON_NEGATIVE` alone on `openat`, `close`, `fsync`, `fdatasync`,
//!   `accept`, `accept4`, `connect`, `statx` (no short results) links with
//!   `IOSQE_IO_LINK`: a failure cancels the rest, and the syslet ends there;
//! - a stop condition with `SKIP_TO_NEXT_ON_STOP` whose linearly next atom is also its
//!   `next` (both ways lead to the same atom) is a hard link too;
//! - any other stop condition ends the chain at that atom: the engine evaluates it and
//!   goes on from its successor (branches and loops are followed between chains);
//! - an atom joins only if its arguments do not read memory an earlier atom of the
//!   chain writes (a `ret_ptr`, a read buffer), except the descriptor of an `openat` of
//!   the chain as the first argument of `read`/`pread64`/`write`/`pwrite64`/`close`/
//!   `fsync`/`fdatasync`, which becomes a fixed-file slot; nor if what the kernel reads
//!   for it (a write's buffer, a path, an address) holds an earlier `ret_ptr` (written
//!   by the engine only after the chain); nor if its own buffer covers an earlier
//!   `ret_ptr` or an atom of the chain; nor if its `ret_ptr` is not writable; at most
//!   [`MAX_CHAIN`] atoms; never an atom twice.
//!
//! Arguments are read (through `fault.rs`) when the chain is built, just before it is
//! submitted; a bad pointer cuts the chain before that atom, which then ends the syslet
//! with `-EFAULT` as in the executor. `SYSLET_ASYNC` sets `IOSQE_ASYNC`, and so does
//! being an `openat` the submitter handed over (the first atom of the syslet's first
//! chain: its `RESOLVE_CACHED` attempt just missed, or was skipped for a miss streak,
//! so io_uring's own non-blocking attempt, on the engine thread, would only miss again:
//! it goes straight to io-wq). A middle atom with `SYSLET_NO_COMPLETE`, no `ret_ptr`
//! and no stop condition (its result is never looked at) gets `IOSQE_CQE_SKIP_SUCCESS`.
//!
//! **The descriptor of a direct `openat`**: the slot lives in the engine's ring, never in
//! the process's descriptor table; the variable the `openat` writes receives the slot's
//! index (>= 0) on success, `-errno` on failure. The chain always closes it; if that
//! close does not run (a failure or a cancel before it), the engine closes the slot.
//!
//! **Cancellation**: io_uring cannot cancel a linked request that has not started, and
//! a hard link starts the next request whatever the result (`-ECANCELED` included). So
//! an atom that may wait indefinitely (I/O on a pipe, a socket, a terminal: a plain
//! descriptor that is not a regular file or block device; `accept`, `connect`, `recv`,
//! `send`) is always the **last** atom of its chain, and `Job::cancel` reaches the
//! engine, which sends `ASYNC_CANCEL` to the chain's last atom (whatever it is: no
//! linked atom follows it) once it has started (again if it had not: `-ENOENT`); if it
//! is cancelled, the syslet ends there with `-ECANCELED`, its `ret_ptr` untouched. The other atoms of a chain complete in bounded time (disk I/O, which a
//! signal does not interrupt on a cachemiss thread either): the chain finishes and the
//! syslet stops before its next atom, as on a cachemiss thread. Residual: a FIFO or a
//! device opened by the chain's own `openat` counts as bounded.

#![allow(non_upper_case_globals)] // libc::SYS_* in patterns

use super::atom::{self, *};
use super::exec::{self, Job, SilentEnd};
use super::ring::Ring;
use super::{fault, sys};
use io_uring::{opcode, squeue, types, IoUring};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock};

/// Direct descriptor slots registered with the engine's ring.
pub(crate) const SLOTS: u32 = 4096;
/// io-wq workers for bounded work (`WEFT_SYSLET_URING_WORKERS` overrides).
const IOWQ_BOUNDED: u32 = 64;
/// The longest chain.
pub(crate) const MAX_CHAIN: usize = 16;

const WAKE: u64 = u64::MAX;
const CLEANUP: u64 = 1 << 62;
const CANCEL: u64 = 1 << 61;

/// Whether the engine is wanted (`WEFT_SYSLET_URING=off` or `0` disables it).
pub(crate) fn wanted() -> bool {
    !matches!(
        std::env::var("WEFT_SYSLET_URING").as_deref(),
        Ok("off") | Ok("0") | Ok("false")
    )
}

/// The engine's counters (for tests and measurements).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Chains submitted.
    pub chains: u64,
    /// Atoms submitted as io_uring requests.
    pub sqes: u64,
    /// Atoms run by the engine thread itself (never blocking).
    pub inline: u64,
    /// Syslets the engine handed to a cachemiss thread.
    pub offloaded: u64,
    /// Atoms opened into a direct slot.
    pub direct: u64,
    /// Atoms submitted with `IOSQE_CQE_SKIP_SUCCESS`.
    pub skip_success: u64,
    /// Times the engine thread waited in `io_uring_enter`.
    pub waits: u64,
    /// Wake-ups through the eventfd (new work or cancels).
    pub wakeups: u64,
}

static STATS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

fn count(i: usize, n: u64) {
    STATS[i].fetch_add(n, Relaxed);
}

/// The engine's counters so far.
pub fn engine_stats() -> EngineStats {
    let g = |i: usize| STATS[i].load(Relaxed);
    EngineStats {
        chains: g(0),
        sqes: g(1),
        inline: g(2),
        offloaded: g(3),
        direct: g(4),
        skip_success: g(5),
        waits: g(6),
        wakeups: g(7),
    }
}

/// Whether the engine runs (or can start) in this process.
pub fn engine_available() -> bool {
    engine().is_some()
}

pub(crate) struct Engine {
    queue: Mutex<Vec<Msg>>,
    wake: OwnedFd,
    next_task: AtomicU64,
}

enum Msg {
    Start(Task, exec::SendPtr),
    Cancel(u64),
}

struct Task {
    id: u64,
    job: Arc<Job>,
    ring: Arc<Ring>,
    silent_end: SilentEnd,
}

static ENGINE: OnceLock<Option<Engine>> = OnceLock::new();

/// The engine, started on first use; None if io_uring cannot give it what it needs.
pub(crate) fn engine() -> Option<&'static Engine> {
    ENGINE
        .get_or_init(|| match start_engine() {
            Ok(e) => Some(e),
            Err(e) => {
                eprintln!(
                    "weft: the syslet io_uring engine cannot start ({e}); using cachemiss threads"
                );
                None
            }
        })
        .as_ref()
}

/// The engine's ring, made on the engine thread: with `SINGLE_ISSUER` and
/// `DEFER_TASKRUN` (completions' task work runs when the engine waits, not as
/// interruptions) when the kernel has them.
fn make_ring() -> std::io::Result<(IoUring, bool, bool)> {
    let ring = IoUring::builder()
        .setup_cqsize(4096)
        .setup_clamp()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(256)
        .or_else(|_| {
            IoUring::builder()
                .setup_cqsize(4096)
                .setup_clamp()
                .build(256)
        })?;
    if !ring.params().is_feature_nodrop() || !ring.params().is_feature_rw_cur_pos() {
        return Err(std::io::Error::other("io_uring too old"));
    }
    let skip = ring.params().is_feature_skip_cqe_on_success();
    let direct = ring.submitter().register_files_sparse(SLOTS).is_ok();
    // io-wq's default for bounded work (regular files: the blocking part of an uncached
    // open or read) is 4 workers a CPU; cachemiss threads go up to 256.
    let workers: u32 = std::env::var("WEFT_SYSLET_URING_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(IOWQ_BOUNDED);
    let _ = ring
        .submitter()
        .register_iowq_max_workers(&mut [workers, 0]);
    Ok((ring, skip, direct))
}

fn start_engine() -> std::io::Result<Engine> {
    // SAFETY: a plain eventfd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just created, ours.
    let wake = unsafe { OwnedFd::from_raw_fd(fd) };
    let wake_fd = wake.as_raw_fd();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("weft-syslet-uring".into())
        .spawn(move || {
            let (ring, skip, direct) = match make_ring() {
                Ok(r) => {
                    let _ = tx.send(Ok(()));
                    r
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            let e = loop {
                match ENGINE.get() {
                    Some(Some(e)) => break e,
                    Some(None) => return,
                    None => std::thread::yield_now(),
                }
            };
            let mut st = State {
                ring,
                chains: HashMap::new(),
                by_task: HashMap::new(),
                free: if direct {
                    (0..SLOTS).rev().collect()
                } else {
                    Vec::new()
                },
                next_chain: 1,
                wake_buf: Box::new(0),
                wake_fd,
                skip,
                to_wake: Vec::new(),
            };
            st.run(e);
        })?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the engine thread died"))??;
    Ok(Engine {
        queue: Mutex::new(Vec::new()),
        wake,
        next_task: AtomicU64::new(1),
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Engine {
    fn send(&self, m: Msg) {
        let wake = {
            let mut q = lock(&self.queue);
            q.push(m);
            // A non-empty queue has a wake-up pending already: the engine takes the
            // whole queue when its eventfd read completes.
            q.len() == 1
        };
        if !wake {
            return;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Runs the syslet from `at` (an atom the submitter could not run without blocking)
    /// on the engine.
    ///
    /// # Safety
    /// As `exec::start`.
    pub(crate) unsafe fn submit(
        &self,
        job: Arc<Job>,
        at: *mut SysletUatom,
        ring: Arc<Ring>,
        silent_end: SilentEnd,
    ) {
        let id = self.next_task.fetch_add(1, Relaxed);
        job.engine.store(id, SeqCst);
        self.send(Msg::Start(
            Task {
                id,
                job,
                ring,
                silent_end,
            },
            exec::SendPtr(at),
        ));
    }
}

/// Cancels engine task `task` (from `Job::cancel`).
pub(crate) fn cancel(task: u64) {
    if let Some(Some(e)) = ENGINE.get() {
        e.send(Msg::Cancel(task));
    }
}

/// How an atom hands over to its successor in a chain.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LinkKind {
    Hard,
    Soft,
    End,
}

/// One atom of a chain.
struct Link {
    at: *mut SysletUatom,
    atom: SysletUatom,
    args: [u64; 6],
    /// The chain's `openat` whose descriptor this atom's first argument is.
    fd_src: Option<usize>,
    /// The direct slot this `openat` opens into.
    slot: Option<u32>,
    kind: LinkKind,
    skip: bool,
    /// Submitted with `IOSQE_ASYNC` (see `build`'s `punt`).
    punt: bool,
}

struct Chain {
    task: Task,
    links: Vec<Link>,
    results: Vec<Option<i64>>,
    outstanding: usize,
    base: u64,
}

struct State {
    ring: IoUring,
    chains: HashMap<u64, Chain>,
    by_task: HashMap<u64, u64>,
    free: Vec<u32>,
    next_chain: u64,
    wake_buf: Box<u64>,
    wake_fd: i32,
    skip: bool,
    /// Rings that got completions since the engine last woke their waiters (once per
    /// batch of CQEs, not once per completion).
    to_wake: Vec<Arc<Ring>>,
}

fn neg(e: i32) -> i64 {
    -(e as i64)
}

fn nr_is(nr: u64, n: libc::c_long) -> bool {
    nr == n as u64
}

/// Whether io_uring has an exact equivalent of this call with these arguments.
fn maps(nr: u64, a: &[u64; 6]) -> bool {
    use libc::*;
    let fits = |l: u64| l <= u32::MAX as u64;
    match nr as c_long {
        SYS_openat | SYS_close | SYS_fsync | SYS_fdatasync | SYS_connect | SYS_statx => true,
        SYS_accept | SYS_accept4 => true,
        SYS_read | SYS_write => fits(a[2]),
        SYS_pread64 | SYS_pwrite64 => fits(a[2]) && (a[3] as i64) >= 0,
        SYS_recvfrom => fits(a[2]) && a[4] == 0 && a[5] == 0,
        SYS_sendto => fits(a[2]) && a[4] == 0,
        _ => false,
    }
}

/// Whether the descriptor argument lets io_uring reproduce the call exactly: a plain
/// descriptor must not be non-blocking (the call would give `EAGAIN`; io_uring may wait
/// instead), and `pread64`/`pwrite64` need a file with positions (on a pipe the call
/// gives `ESPIPE`; io_uring would ignore the offset). `fixed`: the descriptor comes from
/// an `openat` of the chain (a direct slot): never non-blocking, but of unknown kind.
fn fd_ok(nr: u64, a: &[u64; 6], fixed: bool) -> bool {
    use libc::*;
    let positional = matches!(nr as c_long, SYS_pread64 | SYS_pwrite64);
    let io = positional
        || matches!(
            nr as c_long,
            SYS_read
                | SYS_write
                | SYS_recvfrom
                | SYS_sendto
                | SYS_accept
                | SYS_accept4
                | SYS_connect
        );
    if !io {
        return true;
    }
    if fixed {
        return !positional;
    }
    let fd = a[0] as c_int;
    // SAFETY: F_GETFL and fstat only look at the descriptor.
    let fl = unsafe { fcntl(fd, F_GETFL) };
    if fl < 0 || fl & O_NONBLOCK != 0 {
        return false;
    }
    if positional {
        // SAFETY: as above, into a local.
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        if unsafe { fstat(fd, &mut st) } != 0 {
            return false;
        }
        let k = st.st_mode & S_IFMT;
        return k == S_IFREG || k == S_IFBLK;
    }
    true
}

/// Whether the call may wait indefinitely: I/O on a plain descriptor that is not a
/// regular file or a block device (a pipe, a socket, a terminal...), accept, connect.
/// A direct descriptor (from the chain's `openat`) counts as bounded (see the docs).
fn unbounded(nr: u64, a: &[u64; 6], fixed: bool) -> bool {
    use libc::*;
    match nr as c_long {
        SYS_accept | SYS_accept4 | SYS_connect | SYS_recvfrom | SYS_sendto => true,
        SYS_read | SYS_write | SYS_pread64 | SYS_pwrite64 if !fixed => {
            // SAFETY: fstat into a local.
            let mut st: libc::stat = unsafe { core::mem::zeroed() };
            if unsafe { fstat(a[0] as c_int, &mut st) } != 0 {
                return true;
            }
            let k = st.st_mode & S_IFMT;
            k != S_IFREG && k != S_IFBLK
        }
        _ => false,
    }
}

/// Calls whose only failure is a negative result (no short transfers): a plain link
/// reproduces STOP_ON_NEGATIVE.
fn no_short(nr: u64) -> bool {
    use libc::*;
    matches!(
        nr as c_long,
        SYS_openat
            | SYS_close
            | SYS_fsync
            | SYS_fdatasync
            | SYS_accept
            | SYS_accept4
            | SYS_connect
            | SYS_statx
    )
}

/// Calls whose first argument may be a fixed (direct) descriptor.
fn takes_fixed(nr: u64) -> bool {
    use libc::*;
    matches!(
        nr as c_long,
        SYS_read | SYS_write | SYS_pread64 | SYS_pwrite64 | SYS_close | SYS_fsync | SYS_fdatasync
    )
}

/// The memory the kernel writes for this call (beyond `ret_ptr`).
fn writes(nr: u64, a: &[u64; 6]) -> Vec<(usize, usize)> {
    use libc::*;
    match nr as c_long {
        SYS_read | SYS_pread64 | SYS_recvfrom => vec![(a[1] as usize, a[2] as usize)],
        SYS_statx => vec![(a[4] as usize, core::mem::size_of::<libc::statx>())],
        SYS_accept | SYS_accept4 if a[1] != 0 => vec![(a[1] as usize, 128), (a[2] as usize, 4)],
        _ => Vec::new(),
    }
}

/// The memory the kernel reads for this call when it runs (a path counted as up to
/// PATH_MAX bytes: conservative).
fn reads(nr: u64, a: &[u64; 6]) -> Vec<(usize, usize)> {
    use libc::*;
    match nr as c_long {
        SYS_write | SYS_pwrite64 | SYS_sendto | SYS_connect => vec![(a[1] as usize, a[2] as usize)],
        SYS_openat | SYS_statx => vec![(a[1] as usize, PATH_MAX as usize)],
        _ => Vec::new(),
    }
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0.saturating_add(b.1) && b.0 < a.0.saturating_add(a.1)
}

/// How atom `a` at `at` hands over inside a chain, and to which atom.
fn link_kind(at: *mut SysletUatom, a: &SysletUatom) -> (LinkKind, *mut SysletUatom) {
    if a.next.is_null() {
        return (LinkKind::End, a.next);
    }
    let stop = a.flags & SYSLET_STOP_MASK;
    if stop == 0 {
        return (LinkKind::Hard, a.next);
    }
    if a.flags & SYSLET_SKIP_TO_NEXT_ON_STOP != 0 && at.wrapping_add(1) == a.next {
        return (LinkKind::Hard, a.next);
    }
    if stop == SYSLET_STOP_ON_NEGATIVE
        && a.flags & SYSLET_SKIP_TO_NEXT_ON_STOP == 0
        && no_short(a.nr)
    {
        return (LinkKind::Soft, a.next);
    }
    (LinkKind::End, a.next)
}

/// Whether `p` can take an i64 (read it and write it back).
fn writable(p: *mut i64) -> bool {
    match fault::read_u64(p.cast_const().cast()) {
        Ok(v) => fault::write_i64(p, v as i64).is_ok(),
        Err(()) => false,
    }
}

impl State {
    fn run(&mut self, e: &'static Engine) {
        self.arm_wake();
        let mut cqes = Vec::new();
        loop {
            count(6, 1);
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(err) if matches!(err.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(err) => {
                    eprintln!("weft: syslet engine: io_uring_enter: {err}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            cqes.clear();
            cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result() as i64)),
            );
            for &(ud, res) in &cqes {
                if ud == WAKE {
                    count(7, 1);
                    let msgs = std::mem::take(&mut *lock(&e.queue));
                    self.arm_wake();
                    for m in msgs {
                        match m {
                            Msg::Start(t, at) => self.advance(t, at.0, true),
                            Msg::Cancel(task) => self.cancel_task(task),
                        }
                    }
                } else if ud & CLEANUP != 0 {
                    self.free.push((ud & !CLEANUP) as u32);
                } else if ud & CANCEL != 0 {
                    // The last atom was not started yet: try again.
                    if res == neg(libc::ENOENT) {
                        self.cancel_chain(ud & !CANCEL);
                    }
                } else if ud != 0 {
                    self.on_cqe(ud, res);
                }
            }
            for r in self.to_wake.drain(..) {
                r.wake();
            }
        }
    }

    fn push(&mut self, entries: &[squeue::Entry]) {
        loop {
            {
                let mut sq = self.ring.submission();
                if sq.capacity() - sq.len() >= entries.len() {
                    // SAFETY: what the entries point to is the submitter's (the
                    // executor's contract) or the engine's own (wake_buf), alive until
                    // the completions are reaped.
                    unsafe { sq.push_multiple(entries) }.expect("room was checked");
                    return;
                }
            }
            let _ = self.ring.submit();
        }
    }

    fn arm_wake(&mut self) {
        let e = opcode::Read::new(
            types::Fd(self.wake_fd),
            (&mut *self.wake_buf as *mut u64).cast(),
            8,
        )
        .build()
        .user_data(WAKE);
        self.push(&[e]);
    }

    /// Ends the syslet of `t`, as `exec::finish`, except that the ring's waiters are
    /// woken at the end of the current batch of CQEs.
    fn end(&mut self, t: Task, atom: *mut SysletUatom, ret: i64, complete: bool) {
        t.job.engine.store(0, SeqCst);
        if exec::finish_quiet(&t.job, &t.ring, t.silent_end, atom, ret, complete)
            && !self.to_wake.iter().any(|r| Arc::ptr_eq(r, &t.ring))
        {
            self.to_wake.push(t.ring);
        }
    }

    /// Goes on with the syslet of `t` from `at`: chains, atoms that never block, or a
    /// cachemiss thread. `fresh`: `at` is the atom the submitter could not run.
    fn advance(&mut self, t: Task, mut at: *mut SysletUatom, mut fresh: bool) {
        let mut budget = exec::INLINE_BUDGET;
        loop {
            if t.job.cancelled() {
                return self.end(t, at, neg(libc::ECANCELED), true);
            }
            let Ok((a, args)) = exec::load(at) else {
                return self.end(t, at, neg(libc::EFAULT), true);
            };
            let info = sys::info(a.nr);
            let inline_class = info.is_some_and(|i| i.class == sys::Class::Inline);
            if !inline_class && maps(a.nr, &args) {
                // An openat the submitter did not run inline: its RESOLVE_CACHED attempt
                // just missed (or was skipped for a miss streak), so io_uring's own
                // non-blocking attempt would miss again, on the engine thread.
                let punt = fresh && nr_is(a.nr, libc::SYS_openat);
                let links = self.build(at, a, args, punt);
                if !links.is_empty() {
                    return self.submit_chain(t, links);
                }
            }
            let ret = match info {
                _ if budget == 0 => None,
                None => Some(neg(libc::ENOSYS)),
                Some(i) if i.class == sys::Class::Forbidden => Some(neg(libc::EPERM)),
                // SAFETY: the arguments are the submitter's (its contract).
                Some(i) if i.class == sys::Class::Inline => {
                    Some(unsafe { sys::run_blocking(a.nr, args) })
                }
                Some(i)
                    if i.class == sys::Class::NoWait && !fresh && a.flags & SYSLET_ASYNC == 0 =>
                {
                    // SAFETY: as above.
                    unsafe { sys::try_nowait(a.nr, args) }
                }
                _ => None,
            };
            let Some(ret) = ret else {
                count(3, 1);
                t.job.engine.store(0, SeqCst);
                // SAFETY: the executor's contract.
                unsafe { exec::offload(t.job, at, t.ring, t.silent_end) };
                return;
            };
            count(2, 1);
            budget -= 1;
            fresh = false;
            if !a.ret_ptr.is_null() && fault::write_i64(a.ret_ptr, ret).is_err() {
                return self.end(t, at, neg(libc::EFAULT), true);
            }
            match atom::successor(at, &a, ret) {
                Some(n) => at = n,
                None => return self.end(t, at, ret, a.flags & SYSLET_NO_COMPLETE == 0),
            }
        }
    }

    /// The chain from `at` (whose atom maps): see the module's rules.
    /// `punt`: the first atom goes with `IOSQE_ASYNC` (straight to io-wq).
    fn build(
        &mut self,
        at: *mut SysletUatom,
        a: SysletUatom,
        args: [u64; 6],
        punt: bool,
    ) -> Vec<Link> {
        let mut links: Vec<Link> = Vec::new();
        let (mut cur, mut ca, mut cargs) = (at, a, args);
        loop {
            // Dependencies on earlier atoms of the chain.
            let mut fd_src = None;
            let mut ok = true;
            'args: for (i, p) in ca.arg_ptr.iter().enumerate() {
                if p.is_null() {
                    break;
                }
                let r = (*p as usize, 8);
                for (j, l) in links.iter().enumerate() {
                    if overlaps(r, (l.atom.ret_ptr as usize, 8)) {
                        if i == 0
                            && std::ptr::eq(l.atom.ret_ptr.cast_const().cast::<u64>(), *p)
                            && nr_is(l.atom.nr, libc::SYS_openat)
                            && takes_fixed(ca.nr)
                        {
                            fd_src = Some(j);
                            continue;
                        }
                        ok = false;
                        break 'args;
                    }
                    if writes(l.atom.nr, &l.args).iter().any(|w| overlaps(r, *w)) {
                        ok = false;
                        break 'args;
                    }
                }
            }
            // A direct descriptor opened non-blocking: left to the executor's rules.
            let nonblock = fd_src.is_some_and(|j| links[j].args[2] & libc::O_NONBLOCK as u64 != 0);
            if nonblock || !fd_ok(ca.nr, &cargs, fd_src.is_some()) {
                if links.is_empty() {
                    return links;
                }
                break;
            }
            // What it reads when it runs must not hold an earlier ret_ptr (the engine
            // writes those after the chain).
            if reads(ca.nr, &cargs).iter().any(|r| {
                links
                    .iter()
                    .any(|l| overlaps(*r, (l.atom.ret_ptr as usize, 8)))
            }) {
                ok = false;
            }
            // Its own writes must not cover an earlier ret_ptr, nor an atom of the chain.
            let w = writes(ca.nr, &cargs);
            let atom_size = core::mem::size_of::<SysletUatom>();
            if links.iter().any(|l| {
                w.iter().any(|w| {
                    overlaps(*w, (l.atom.ret_ptr as usize, 8))
                        || overlaps(*w, (l.at as usize, atom_size))
                })
            }) || w.iter().any(|w| overlaps(*w, (cur as usize, atom_size)))
            {
                ok = false;
            }
            if !ok && !links.is_empty() {
                break;
            }
            let (mut kind, next) = link_kind(cur, &ca);
            if !ca.ret_ptr.is_null() && !writable(ca.ret_ptr) {
                // The EFAULT must end the syslet here: the engine evaluates it alone.
                kind = LinkKind::End;
            }
            if unbounded(ca.nr, &cargs, fd_src.is_some()) {
                // Only a chain's last atom may wait indefinitely, so that a cancel
                // (which can only reach a request that has started) never leaves a
                // hard-linked atom after it to run.
                kind = LinkKind::End;
            }
            links.push(Link {
                at: cur,
                atom: ca,
                args: cargs,
                fd_src,
                slot: None,
                kind,
                skip: false,
                punt: punt && links.is_empty(),
            });
            if !ok || kind == LinkKind::End || links.len() >= MAX_CHAIN {
                break;
            }
            if links.iter().any(|l| l.at == next) {
                break;
            }
            let Ok((na, nargs)) = exec::load(next) else {
                break;
            };
            let ninfo = sys::info(na.nr);
            if ninfo.is_none_or(|i| i.class == sys::Class::Forbidden) || !maps(na.nr, &nargs) {
                break;
            }
            (cur, ca, cargs) = (next, na, nargs);
        }
        // Direct descriptors: an openat whose descriptor the chain uses must also be
        // closed by it, and not used after the close; else cut at its first use.
        loop {
            let mut cut = None;
            for (j, l) in links.iter().enumerate() {
                if !nr_is(l.atom.nr, libc::SYS_openat) {
                    continue;
                }
                let users: Vec<usize> = (j + 1..links.len())
                    .filter(|&k| links[k].fd_src == Some(j))
                    .collect();
                let Some(&first) = users.first() else {
                    continue;
                };
                let close = users
                    .iter()
                    .position(|&k| nr_is(links[k].atom.nr, libc::SYS_close));
                let good = match close {
                    Some(c) => c == users.len() - 1,
                    None => false,
                };
                if !good {
                    cut = Some(first);
                    break;
                }
            }
            match cut {
                Some(c) => links.truncate(c),
                None => break,
            }
        }
        // Slots.
        for j in 0..links.len() {
            if links[j + 1..].iter().any(|l| l.fd_src == Some(j)) {
                match self.free.pop() {
                    Some(s) => links[j].slot = Some(s),
                    None => {
                        let first = (j + 1..links.len())
                            .find(|&k| links[k].fd_src == Some(j))
                            .expect("a user");
                        links.truncate(first);
                        break;
                    }
                }
            }
        }
        let n = links.len();
        for (i, l) in links.iter_mut().enumerate() {
            l.skip = self.skip
                && i + 2 < n
                && l.atom.flags & SYSLET_NO_COMPLETE != 0
                && l.atom.ret_ptr.is_null()
                && l.atom.flags & SYSLET_STOP_MASK == 0
                && l.slot.is_none();
        }
        links
    }

    fn entry(&self, links: &[Link], i: usize) -> squeue::Entry {
        use libc::*;
        let l = &links[i];
        let a = &l.args;
        let fixed = l.fd_src.and_then(|j| links[j].slot);
        // The file position of a `read`/`write`: the current one (-1), except on a direct
        // descriptor that this is the only read or write of: the file was just opened
        // (position 0) and its position is never seen again (the chain closes it and it
        // never escapes), so offset 0 is the same, and lets io_uring read without the
        // file-position lock (an uncached buffered read then waits on the page, not on an
        // io-wq worker).
        let only_rw = l.fd_src.is_some_and(|j| {
            links
                .iter()
                .filter(|m| {
                    m.fd_src == Some(j)
                        && matches!(
                            m.atom.nr as c_long,
                            SYS_read | SYS_write | SYS_pread64 | SYS_pwrite64
                        )
                })
                .count()
                == 1
        });
        let pos = if fixed.is_some() && only_rw {
            0
        } else {
            u64::MAX
        };
        macro_rules! fd {
            ($op:ident, $($rest:tt)*) => {
                match fixed {
                    Some(s) => opcode::$op::new(types::Fixed(s), $($rest)*),
                    None => opcode::$op::new(types::Fd(a[0] as i32), $($rest)*),
                }
            };
        }
        let e = match l.atom.nr as c_long {
            SYS_openat => opcode::OpenAt::new(types::Fd(a[0] as i32), a[1] as *const c_char)
                .flags(a[2] as i32)
                .mode(a[3] as mode_t)
                .file_index(
                    l.slot
                        .map(|s| types::DestinationSlot::try_from_slot_target(s).expect("slot")),
                )
                .build(),
            SYS_read => fd!(Read, a[1] as *mut u8, a[2] as u32).offset(pos).build(),
            SYS_pread64 => fd!(Read, a[1] as *mut u8, a[2] as u32).offset(a[3]).build(),
            SYS_write => fd!(Write, a[1] as *const u8, a[2] as u32)
                .offset(pos)
                .build(),
            SYS_pwrite64 => fd!(Write, a[1] as *const u8, a[2] as u32)
                .offset(a[3])
                .build(),
            SYS_close => match fixed {
                Some(s) => opcode::Close::new(types::Fixed(s)).build(),
                None => opcode::Close::new(types::Fd(a[0] as i32)).build(),
            },
            SYS_fsync => fd!(Fsync,).build(),
            SYS_fdatasync => fd!(Fsync,).flags(types::FsyncFlags::DATASYNC).build(),
            SYS_accept => opcode::Accept::new(
                types::Fd(a[0] as i32),
                a[1] as *mut sockaddr,
                a[2] as *mut socklen_t,
            )
            .build(),
            SYS_accept4 => opcode::Accept::new(
                types::Fd(a[0] as i32),
                a[1] as *mut sockaddr,
                a[2] as *mut socklen_t,
            )
            .flags(a[3] as i32)
            .build(),
            SYS_connect => opcode::Connect::new(
                types::Fd(a[0] as i32),
                a[1] as *const sockaddr,
                a[2] as socklen_t,
            )
            .build(),
            SYS_recvfrom => opcode::Recv::new(types::Fd(a[0] as i32), a[1] as *mut u8, a[2] as u32)
                .flags(a[3] as i32)
                .build(),
            SYS_sendto => opcode::Send::new(types::Fd(a[0] as i32), a[1] as *const u8, a[2] as u32)
                .flags(a[3] as i32)
                .build(),
            SYS_statx => opcode::Statx::new(
                types::Fd(a[0] as i32),
                a[1] as *const c_char,
                a[4] as *mut types::statx,
            )
            .flags(a[2] as i32)
            .mask(a[3] as u32)
            .build(),
            _ => unreachable!("only mapped calls join a chain"),
        };
        let mut f = squeue::Flags::empty();
        if i + 1 < links.len() {
            f |= match l.kind {
                LinkKind::Hard => squeue::Flags::IO_HARDLINK,
                _ => squeue::Flags::IO_LINK,
            };
        }
        if l.atom.flags & SYSLET_ASYNC != 0 || l.punt {
            f |= squeue::Flags::ASYNC;
        }
        if l.skip {
            f |= squeue::Flags::SKIP_SUCCESS;
        }
        e.flags(f)
    }

    fn submit_chain(&mut self, t: Task, links: Vec<Link>) {
        let id = self.next_chain;
        self.next_chain += 1;
        let base = id << 8;
        let entries: Vec<squeue::Entry> = (0..links.len())
            .map(|i| self.entry(&links, i).user_data(base | i as u64))
            .collect();
        count(0, 1);
        count(1, links.len() as u64);
        count(4, links.iter().filter(|l| l.slot.is_some()).count() as u64);
        count(5, links.iter().filter(|l| l.skip).count() as u64);
        self.push(&entries);
        let outstanding = links.iter().filter(|l| !l.skip).count();
        let task = t.id;
        let cancelled = t.job.cancelled();
        self.by_task.insert(task, id);
        self.chains.insert(
            id,
            Chain {
                task: t,
                results: vec![None; links.len()],
                links,
                outstanding,
                base,
            },
        );
        if cancelled {
            self.cancel_task(task);
        }
    }

    fn cancel_task(&mut self, task: u64) {
        if let Some(&id) = self.by_task.get(&task) {
            self.cancel_chain(id);
        }
    }

    /// Cancels a cancelled job's chain: only its last atom, the only one that may wait
    /// indefinitely and the only one with no linked atom after it (the others complete
    /// by themselves; the syslet then stops before its next atom, as on a cachemiss
    /// thread), and only once it has started (every earlier result is in; a cancel that
    /// finds it not started yet, `-ENOENT`, is sent again).
    fn cancel_chain(&mut self, id: u64) {
        let Some(c) = self.chains.get(&id) else {
            return;
        };
        let last = c.links.len() - 1;
        let started = (0..last).all(|i| c.links[i].skip || c.results[i].is_some());
        if !started || c.results[last].is_some() {
            return;
        }
        let e = opcode::AsyncCancel::new(c.base | last as u64)
            .build()
            .user_data(CANCEL | id);
        self.push(&[e]);
    }

    fn on_cqe(&mut self, ud: u64, res: i64) {
        let id = ud >> 8;
        let i = (ud & 0xff) as usize;
        let Some(c) = self.chains.get_mut(&id) else {
            return; // a skipped atom's failure, after its chain ended
        };
        if i >= c.links.len() || c.results[i].is_some() {
            return;
        }
        c.results[i] = Some(res);
        if !c.links[i].skip {
            c.outstanding -= 1;
        }
        if c.outstanding > 0 {
            if c.task.job.cancelled() {
                self.cancel_chain(id);
            }
            return;
        }
        let c = self.chains.remove(&id).expect("there");
        self.by_task.remove(&c.task.id);
        self.evaluate(c);
    }

    /// Frees the chain's direct slots (closing those its close did not).
    fn release_slots(&mut self, links: &[Link], results: &[Option<i64>]) {
        for (j, l) in links.iter().enumerate() {
            let Some(s) = l.slot else { continue };
            let closed = links.iter().enumerate().any(|(k, m)| {
                m.fd_src == Some(j) && nr_is(m.atom.nr, libc::SYS_close) && results[k] == Some(0)
            });
            if closed || results[j].is_some_and(|r| r < 0) {
                self.free.push(s);
            } else {
                let e = opcode::Close::new(types::Fixed(s))
                    .build()
                    .user_data(CLEANUP | s as u64);
                self.push(&[e]);
            }
        }
    }

    fn evaluate(&mut self, c: Chain) {
        let Chain {
            task,
            links,
            results,
            ..
        } = c;
        self.release_slots(&links, &results);
        let cancelled = task.job.cancelled();
        for (i, l) in links.iter().enumerate() {
            let Some(res) = results[i] else {
                continue; // a skipped success: no ret_ptr, no stop condition
            };
            if cancelled && (res == neg(libc::ECANCELED) || res == neg(libc::EINTR)) {
                return self.end(task, l.at, neg(libc::ECANCELED), true);
            }
            let val = match l.slot {
                Some(s) if res >= 0 => s as i64,
                _ => res,
            };
            if !l.atom.ret_ptr.is_null() && fault::write_i64(l.atom.ret_ptr, val).is_err() {
                return self.end(task, l.at, neg(libc::EFAULT), true);
            }
            match atom::successor(l.at, &l.atom, val) {
                None => {
                    let complete = l.atom.flags & SYSLET_NO_COMPLETE == 0;
                    return self.end(task, l.at, val, complete);
                }
                Some(n) if i + 1 == links.len() => return self.advance(task, n, false),
                Some(n) => debug_assert_eq!(n, links[i + 1].at),
            }
        }
        unreachable!("a chain ends at its last atom at the latest")
    }
}
