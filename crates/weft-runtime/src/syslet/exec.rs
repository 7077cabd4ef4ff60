//! The executor: runs a syslet's atoms inline while they do not block, and hands the
//! rest to a cachemiss thread when one would.
//!
//! This is the kernel syslets' opportunistic path, done in user space. The kernel's syslets ran
//! an atom and switched the user context to a "cachemiss" thread only if the atom hit
//! `schedule()`. User space cannot see that happen, so each atom is tried in a form
//! that fails instead of blocking (`sys::try_nowait`: `openat2` with `RESOLVE_CACHED`,
//! `preadv2`/`pwritev2` with `RWF_NOWAIT`, `MSG_DONTWAIT`, a readiness poll), or run as
//! is when it never blocks (`close`, `lseek`, `umem_add`...). When the attempt says "it
//! would block", or the atom has `SYSLET_ASYNC`, the syslet from that atom on goes to a
//! cachemiss thread (a pool: `io/threads.rs`), which runs the remaining atoms with plain
//! blocking calls and posts the completion to the ring; the submitter returns at once.
//!
//! | atom | where it runs |
//! |---|---|
//! | class `Inline` (never blocks) | inline |
//! | class `NoWait`, the non-blocking attempt succeeds | inline |
//! | class `NoWait`, the attempt says it would block | cachemiss thread, from this atom on |
//! | `open`/`openat` while the context's lookups keep missing (below), not a probe | cachemiss thread, from this atom on, without the attempt |
//! | class `Blocking` (no way to try), or flag `SYSLET_ASYNC` | cachemiss thread, from this atom on |
//! | flag `SYSLET_SYNC` | where it is (blocking the caller if it must: on a green thread through `blocking`, so the worker goes on) |
//! | any atom after the first that went to a cachemiss thread | that cachemiss thread |
//!
//! On the io_uring backend, "cachemiss thread" above reads "the io_uring chain engine
//! (`uring.rs`)", which runs what io_uring can do as linked chains and hands the rest to
//! a cachemiss thread ([`offload`]); both end by posting the completion ([`finish`]; the
//! engine wakes each ring's waiters once per batch of completions).
//!
//! **Lookups that keep missing are not tried.** A path lookup that misses the dentry
//! cache (`openat` with `RESOLVE_CACHED` saying `EAGAIN`) costs the submitter 3-4.5 us
//! (measured, uncached directory), as much as a whole cached open+read+close, and the
//! engine's `OPENAT` (or the cachemiss thread) walks the path again anyway: on cold
//! directories that doubled the submitter's work. So each
//! [`Context`](super::Context) counts its consecutive lookup misses ([`Lookups`]); after
//! [`MISS_STREAK`] of them an `open`/`openat` atom (one that would be tried with
//! `RESOLVE_CACHED`: no `O_CREAT`, `O_TRUNC`, `O_TMPFILE`; not `SYSLET_SYNC`) is
//! handed on without the attempt, as if it had said "would block", except every
//! [`PROBE_EVERY`]-th one, which is still tried: a probe that hits (the names are
//! cached again) ends the streak. The results are the same either way; only where the
//! atom runs differs (at most `PROBE_EVERY - 1` syslets in a row go asynchronous that
//! could have finished inline).
//!
//! An inline run also gives up after [`INLINE_BUDGET`] atoms (a loop over cached data
//! would otherwise keep the submitter forever): the rest goes to a cachemiss thread.
//!
//! Every access to the submitter's memory (the atom, its argument pointers, `ret_ptr`,
//! `umem_add`'s counter) goes through `fault.rs`: a bad pointer gives `-EFAULT` as the
//! atom's result, never a crash.

use super::atom::{self, SysletUatom, SYSLET_ASYNC, SYSLET_NO_COMPLETE, SYSLET_SYNC};
use super::ring::{Completion, Ring};
use super::{fault, sys};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, Once};

/// How many times (a millisecond apart) a cancel interrupts the thread running the
/// syslet before it gives up on it leaving (a call that ignores signals).
const CANCEL_RESENDS: u32 = 50;

/// How many atoms an inline run executes before the rest goes to a cachemiss thread.
pub const INLINE_BUDGET: u32 = 256;

/// Consecutive lookup misses after which lookups are no longer tried inline.
pub const MISS_STREAK: u32 = 8;
/// While lookups are not tried, one in this many still is (a probe).
pub const PROBE_EVERY: u32 = 16;

/// A context's record of its path lookups: how many missed in a row (see the module
/// docs), and how many were skipped since the last probe.
#[derive(Default)]
pub(crate) struct Lookups {
    misses: AtomicU32,
    skipped: AtomicU32,
}

impl Lookups {
    /// Whether to skip the inline attempt of a lookup (the streak is on and this is not
    /// a probe).
    fn skip(&self) -> bool {
        if self.misses.load(Relaxed) < MISS_STREAK {
            return false;
        }
        let n = self.skipped.fetch_add(1, Relaxed) + 1;
        if n >= PROBE_EVERY {
            self.skipped.store(0, Relaxed);
            return false;
        }
        true
    }

    fn record(&self, missed: bool) {
        if missed {
            let m = self.misses.load(Relaxed);
            if m < MISS_STREAK {
                self.misses.store(m + 1, Relaxed);
            }
        } else if self.misses.load(Relaxed) != 0 {
            self.misses.store(0, Relaxed);
            self.skipped.store(0, Relaxed);
        }
    }
}

/// One syslet in flight: its id, its cancel flag, and the cachemiss thread running it.
pub(crate) struct Job {
    pub id: u64,
    pub cancel: AtomicBool,
    thread: Mutex<Option<libc::pthread_t>>,
    /// The engine task running it (`uring.rs`), 0 when it is not on the engine.
    pub(crate) engine: AtomicU64,
}

impl Job {
    pub(crate) fn new(id: u64) -> Job {
        Job {
            id,
            cancel: AtomicBool::new(false),
            thread: Mutex::new(None),
            engine: AtomicU64::new(0),
        }
    }

    /// Cancels the syslet: it stops before its next atom, and an atom blocked on a
    /// cachemiss thread is interrupted (its system call returns `EINTR`).
    pub(crate) fn cancel(&self) {
        self.cancel.store(true, SeqCst);
        // On the io_uring engine: it cancels the chain's requests (ASYNC_CANCEL).
        let task = self.engine.load(SeqCst);
        if task != 0 {
            super::uring::cancel(task);
        }
        // A signal that lands between the thread's check of the flag and its entry
        // into the system call is lost (the call then blocks): so it is sent again,
        // every millisecond for a while, until the thread has left the syslet.
        for _ in 0..CANCEL_RESENDS {
            {
                let t = self.thread.lock().unwrap_or_else(|e| e.into_inner());
                let Some(t) = *t else { return };
                install_cancel_signal();
                // SAFETY: `t` is a live pool thread (it clears the slot, under this
                // lock, before it moves on) and the signal has a no-op handler.
                unsafe { libc::pthread_kill(t, cancel_signal()) };
            }
            crate::park::park_timeout(std::time::Duration::from_millis(1));
        }
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(SeqCst)
    }
}

/// The signal that interrupts a cancelled cachemiss thread's system call: a real-time
/// signal with a handler that does nothing, installed without `SA_RESTART`.
fn cancel_signal() -> libc::c_int {
    libc::SIGRTMIN() + 7
}

fn install_cancel_signal() {
    static ONCE: Once = Once::new();
    extern "C" fn nothing(_: libc::c_int) {}
    ONCE.call_once(|| {
        // SAFETY: installs a handler that does nothing (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = nothing as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(cancel_signal(), &sa, core::ptr::null_mut());
        }
    });
}

/// How an atom's system call is to be run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Inline: only if it will not block.
    Try,
    /// On a cachemiss thread: block if need be.
    Block,
}

/// Where a run ended.
pub(crate) enum Ran {
    /// The syslet ended at `atom` with `ret` (and is complete unless NO_COMPLETE).
    Done {
        atom: *mut SysletUatom,
        ret: i64,
        complete: bool,
    },
    /// It must go on on a cachemiss thread, from `atom`.
    Offload(*mut SysletUatom),
}

/// Reads the atom at `at` and its arguments; Err(-EFAULT) if any pointer is bad.
pub(crate) fn load(at: *mut SysletUatom) -> Result<(SysletUatom, [u64; 6]), ()> {
    let mut a = SysletUatom::default();
    fault::copy_in(
        (&mut a as *mut SysletUatom).cast(),
        at.cast_const().cast(),
        core::mem::size_of::<SysletUatom>(),
    )?;
    let mut args = [0u64; 6];
    for (i, p) in a.arg_ptr.iter().enumerate() {
        if p.is_null() {
            break;
        }
        args[i] = fault::read_u64(*p)?;
    }
    Ok((a, args))
}

/// Runs atoms from `at` in `mode` until the syslet ends or (inline) must go to a
/// cachemiss thread.
///
/// # Safety
/// The syslet's memory is the submitter's, valid while it runs (the executor's
/// contract); bad pointers are caught (EFAULT).
unsafe fn run(job: &Job, mut at: *mut SysletUatom, mode: Mode, lookups: Option<&Lookups>) -> Ran {
    let mut budget = INLINE_BUDGET;
    loop {
        if job.cancelled() {
            return Ran::Done {
                atom: at,
                ret: -(libc::ECANCELED as i64),
                complete: true,
            };
        }
        let (a, args) = match load(at) {
            Ok(x) => x,
            Err(()) => {
                return Ran::Done {
                    atom: at,
                    ret: -(libc::EFAULT as i64),
                    complete: true,
                }
            }
        };
        let ret = match sys::info(a.nr) {
            None => -(libc::ENOSYS as i64),
            Some(i) if i.class == sys::Class::Forbidden => -(libc::EPERM as i64),
            Some(i) => {
                let sync = a.flags & SYSLET_SYNC != 0;
                if mode == Mode::Try && !sync && (a.flags & SYSLET_ASYNC != 0 || budget == 0) {
                    return Ran::Offload(at);
                }
                budget = budget.saturating_sub(1);
                match mode {
                    Mode::Block => loop {
                        // SAFETY: the arguments are the submitter's (its contract).
                        let r = unsafe { sys::run_blocking(a.nr, args) };
                        // A cancel's signal may interrupt a call of another syslet
                        // that this thread runs next: retry it, as SA_RESTART would.
                        if r == -(libc::EINTR as i64) && !job.cancelled() {
                            continue;
                        }
                        break r;
                    },
                    Mode::Try => {
                        let lookup = lookups.filter(|_| i.attempt_is_lookup(&args));
                        if !sync && lookup.is_some_and(|l| l.skip()) {
                            return Ran::Offload(at);
                        }
                        let tried = match i.class {
                            // SAFETY: as above.
                            sys::Class::Inline => Some(unsafe { sys::run_blocking(a.nr, args) }),
                            // SAFETY: as above.
                            sys::Class::NoWait => unsafe { sys::try_nowait(a.nr, args) },
                            _ => None,
                        };
                        if let Some(l) = lookup {
                            l.record(tried.is_none());
                        }
                        match tried {
                            Some(r) => r,
                            None if sync => run_sync(a.nr, args),
                            None => return Ran::Offload(at),
                        }
                    }
                }
            }
        };
        if !a.ret_ptr.is_null() && fault::write_i64(a.ret_ptr, ret).is_err() {
            // An error is always reported, even on a NO_COMPLETE atom.
            return Ran::Done {
                atom: at,
                ret: -(libc::EFAULT as i64),
                complete: true,
            };
        }
        match atom::successor(at, &a, ret) {
            Some(n) => at = n,
            None => {
                return Ran::Done {
                    atom: at,
                    ret,
                    complete: a.flags & SYSLET_NO_COMPLETE == 0,
                }
            }
        }
    }
}

/// A `SYSLET_SYNC` atom that would block: run it where we are, parking only the green
/// thread (through the blocking pool) when on one.
fn run_sync(nr: u64, args: [u64; 6]) -> i64 {
    // SAFETY: the arguments are the submitter's (its contract).
    crate::blocking(move || unsafe { sys::run_blocking(nr, args) })
}

/// What to call when a syslet ends silently (a NO_COMPLETE ending): forgets the job.
pub(crate) type SilentEnd = Box<dyn FnOnce(u64) + Send>;

/// What a syslet that goes asynchronous needs from its context: the ring its
/// completion goes to, what to call if it ends silently, and whether the io_uring
/// chain engine may run it.
pub(crate) struct GoAsync {
    pub ring: Arc<Ring>,
    pub silent_end: SilentEnd,
    pub uring: bool,
}

/// Starts a syslet at `first`: runs it inline as far as it goes; if it must block, hands
/// the rest to the io_uring chain engine (`uring.rs`, when `GoAsync::uring`) or a
/// cachemiss thread, which posts its completion to the ring. Returns the final atom and
/// result when it finished inline (nothing is posted then), None when it went
/// asynchronous.
///
/// # Safety
/// As [`run`]; the memory must stay valid until the completion is posted.
pub(crate) unsafe fn start(
    id: u64,
    first: *mut SysletUatom,
    lookups: &Lookups,
    go_async: impl FnOnce(&Arc<Job>) -> GoAsync,
) -> Option<(*mut SysletUatom, i64)> {
    // The inline run needs no shared record (nobody can cancel a syslet that has no
    // handle yet): the job is made, and registered with its context through
    // `go_async` (which also gives the ring and the rest), only when the syslet goes
    // asynchronous, before anything else can see it. An inline syslet costs no
    // allocation, no lock and no reference count.
    let inline = Job::new(id);
    // SAFETY: per the contract.
    match unsafe { run(&inline, first, Mode::Try, Some(lookups)) } {
        Ran::Done { atom, ret, .. } => Some((atom, ret)),
        Ran::Offload(at) => {
            let job = Arc::new(inline);
            let GoAsync {
                ring,
                silent_end,
                uring,
            } = go_async(&job);
            if uring {
                if let Some(e) = super::uring::engine() {
                    // SAFETY: per the contract.
                    unsafe { e.submit(job, at, ring, silent_end) };
                    return None;
                }
            }
            // SAFETY: per the contract.
            unsafe { offload(job, at, ring, silent_end) };
            None
        }
    }
}

/// Runs the syslet from `at` on a cachemiss thread, which posts its completion.
///
/// # Safety
/// As [`start`].
pub(crate) unsafe fn offload(
    job: Arc<Job>,
    at: *mut SysletUatom,
    ring: Arc<Ring>,
    silent_end: SilentEnd,
) {
    let at = SendPtr(at);
    crate::io::threads::cachemiss_pool().execute(Box::new(move || {
        let at = at;
        // SAFETY: pthread_self is always safe.
        *job.thread.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(unsafe { libc::pthread_self() });
        // SAFETY: per the contract.
        let r = unsafe { run(&job, at.0, Mode::Block, None) };
        *job.thread.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let Ran::Done {
            atom,
            ret,
            complete,
        } = r
        else {
            unreachable!("a blocking run does not offload")
        };
        finish(&job, &ring, silent_end, atom, ret, complete);
    }));
}

/// Ends a syslet that went asynchronous at `atom` with `ret`: posts its completion, or,
/// for a NO_COMPLETE ending, posts nothing (as the kernel syslets did) and forgets the job.
pub(crate) fn finish(
    job: &Job,
    ring: &Ring,
    silent_end: SilentEnd,
    atom: *mut SysletUatom,
    ret: i64,
    complete: bool,
) {
    if finish_quiet(job, ring, silent_end, atom, ret, complete) {
        ring.wake();
    }
}

/// [`finish`] without waking the ring's waiters: true if it posted a completion, and
/// the caller must then call `ring.wake()` (the io_uring engine does, once per batch).
pub(crate) fn finish_quiet(
    job: &Job,
    ring: &Ring,
    silent_end: SilentEnd,
    atom: *mut SysletUatom,
    ret: i64,
    complete: bool,
) -> bool {
    if complete {
        ring.push_quiet(Completion {
            atom,
            ret,
            id: job.id,
        });
    } else {
        silent_end(job.id);
    }
    complete
}

pub(crate) struct SendPtr(pub(crate) *mut SysletUatom);
// SAFETY: the atom memory is the submitter's, valid until completion (the contract);
// only the thread running the syslet touches it from here on.
unsafe impl Send for SendPtr {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_skip_after_a_miss_streak_probe_and_reset() {
        let l = Lookups::default();
        // Below the streak: always tried.
        for _ in 0..MISS_STREAK {
            assert!(!l.skip());
            l.record(true);
        }
        // On the streak: skipped, except one in PROBE_EVERY.
        let tried: Vec<bool> = (0..2 * PROBE_EVERY).map(|_| !l.skip()).collect();
        let probes: Vec<usize> = (0..tried.len()).filter(|&i| tried[i]).collect();
        assert_eq!(
            probes,
            vec![PROBE_EVERY as usize - 1, 2 * PROBE_EVERY as usize - 1]
        );
        // A probe that misses keeps the streak; one that hits ends it.
        l.record(true);
        assert!(l.skip());
        l.record(false);
        for _ in 0..3 * PROBE_EVERY {
            assert!(!l.skip());
        }
    }
}
