//! Syslets: programs of system calls, submitted with one call, run asynchronously,
//! with completions in a ring (after Ingo Molnar's 2007 kernel syslets).
//!
//! A syslet is a chain of **atoms** ([`SysletUatom`], the kernel syslets' layout), each one
//! system call whose arguments are pointers to values, with stop conditions, branches
//! ("skip to the linearly next atom on stop") and loops (`next` pointing back). Write
//! one with the [`Builder`] (which owns everything the atoms point to and checks the
//! program before it runs) or by hand in C (`include/weft/syslet.h`).
//!
//! ```
//! use weft_runtime::syslet::{Builder, Context, Outcome, SYSLET_STOP_ON_NON_POSITIVE};
//!
//! // Count down from 3 with umem_add, in a loop (`next` pointing back).
//! let mut b = Builder::new();
//! let (counter, minus_one) = (b.value(3), b.value(-1));
//! let step = b.umem_add(counter, minus_one);
//! b.flags(step, SYSLET_STOP_ON_NON_POSITIVE); // leave the loop at 0
//! b.next(step, Some(step));                   // else loop back
//! let ctx = Context::new(64);
//! match ctx.exec(b.build().unwrap()) {
//!     Outcome::Done(d) => assert_eq!((d.ret, d.program.get(counter)), (0, 0)),
//!     Outcome::Async(h) => { let d = ctx.wait_for(h).unwrap(); assert_eq!(d.ret, 0); }
//! }
//! ```
//!
//! ## Running: inline when it will not block, else a cachemiss thread
//!
//! [`Context::exec`] runs the atoms at once on the caller's thread as long as each can
//! complete without blocking (the kernel syslets' opportunistic path: their "cached"
//! case) and
//! returns [`Outcome::Done`] with the final atom's result: nothing goes to the ring.
//! When an atom would block, the rest of the syslet moves to a **cachemiss thread** and
//! `exec` returns [`Outcome::Async`]; the completion arrives in the context's ring,
//! which the user drains without a system call ([`Context::pop`]) or waits on
//! ([`Context::wait`], which parks only the green thread on a runtime worker). What
//! runs where, exactly, is in `exec.rs`. Cancellation: [`Context::cancel`].
//!
//! A syslet's result flows like this: each atom's result goes to its `ret_ptr` (if
//! any); a stop condition (`SYSLET_STOP_ON_*`) ends the syslet at that atom unless it
//! has `SYSLET_SKIP_TO_NEXT_ON_STOP`, which continues with the linearly next atom
//! instead; otherwise `next` is followed, and a NULL `next` ends it. The completion
//! names the final atom and its result: a failing `open` in a chain stops it there
//! (with `SYSLET_STOP_ON_NEGATIVE`), and the completion says which atom failed and why
//! (`-errno`). Bad pointers give `-EFAULT`, never a crash.
//!
//! On the io_uring I/O backend, the asynchronous part runs on the **io_uring chain
//! engine** (`uring.rs`) rather than a cachemiss thread: runs of atoms io_uring has
//! (`openat` into a direct descriptor slot, `read`, `write`, `close`, `fsync`, ...) go
//! in linked chains, conditions, branches and loops are evaluated by the engine between
//! chains, and atoms io_uring cannot do go on to a cachemiss thread. Same results
//! (documented exceptions: a direct `openat` writes the slot's index; a cancelled atom
//! says `-ECANCELED`). `WEFT_SYSLET_URING=off` turns it off; on the threads backend
//! everything runs on cachemiss threads. What runs where: docs/syslets.md.

mod atom;
mod build;
mod exec;
mod fault;
mod ring;
mod sys;
mod uring;

pub use atom::*;
pub use build::{AtomId, BuildError, Builder, Program, Var};
pub use exec::INLINE_BUDGET;
pub use ring::Completion;
#[doc(hidden)]
pub use uring::{engine_available, engine_stats, EngineStats};

/// weft's `sys_umem_add(ptr, val)` (as in the kernel syslets): adds `val` to the 64-bit value at
/// `ptr` and returns the new value; with `val` 0 it reads it.
pub const SYS_UMEM_ADD: u64 = sys::SYS_UMEM_ADD;

/// The number of the system call called `name` in weft's syslet table (`"read"`,
/// `"openat"`, `"umem_add"`...), if it has one.
pub fn syscall_number(name: &str) -> Option<u64> {
    sys::by_name(name).map(|i| i.nr)
}

/// The name of system call `nr` in weft's syslet table, if it is there.
pub fn syscall_name(nr: u64) -> Option<&'static str> {
    sys::info(nr).map(|i| i.name)
}

/// How many arguments system call `nr` takes, if weft's syslet table knows it (for the
/// C API's `weft_syslet_validate`).
#[doc(hidden)]
pub fn syscall_arity(nr: u64) -> Option<u8> {
    sys::info(nr).map(|i| i.arity)
}

/// Whether system call `nr` is in weft's syslet table but cannot run in a syslet (fork,
/// exec, exit...: validation refuses it; the executor gives `-EPERM`).
#[doc(hidden)]
pub fn syscall_forbidden(nr: u64) -> bool {
    sys::info(nr).is_some_and(|i| i.class == sys::Class::Forbidden)
}

/// Every system call a syslet may use (the forbidden ones left out), by name.
pub fn syscalls() -> impl Iterator<Item = &'static str> {
    sys::all()
        .iter()
        .filter(|i| i.class != sys::Class::Forbidden)
        .map(|i| i.name)
}

use exec::Job;
use ring::Ring;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where syslets are submitted and complete: a completion ring, and the syslets in
/// flight. Cheap to share (`Clone` shares the same ring).
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    ring: Arc<Ring>,
    next_id: AtomicU64,
    /// The syslets in flight, and the programs of those submitted from Rust.
    jobs: Mutex<HashMap<u64, InFlight>>,
    /// Whether offloaded syslets may run on the io_uring chain engine (`uring.rs`).
    uring: std::sync::atomic::AtomicBool,
    /// Its path lookups' misses (`exec.rs`: lookups that keep missing are not tried).
    lookups: exec::Lookups,
}

/// A syslet in flight, and its program if it was submitted from Rust.
type InFlight = (Arc<Job>, Option<Program>);

/// A syslet that went asynchronous (its completion will be in the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

/// A finished syslet submitted with [`Context::exec`]: the program back, the atom it
/// ended at, and that atom's result.
pub struct Done {
    /// The handle it had (0 if it finished inline).
    pub id: u64,
    /// The index of the final atom in the program.
    pub atom: usize,
    /// Its result: `>= 0`, or `-errno` (`-ECANCELED` if cancelled, `-EFAULT` for a bad
    /// pointer).
    pub ret: i64,
    /// The program, with its variables and buffers as the syslet left them.
    pub program: Program,
}

/// What [`Context::exec`] did.
pub enum Outcome {
    /// It ran to its end inline (nothing blocked): nothing goes to the ring.
    Done(Done),
    /// It went asynchronous (io_uring chain engine or cachemiss thread): its completion
    /// will be in the ring.
    Async(Handle),
}

/// What [`Context::exec_raw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawOutcome {
    /// Finished inline at this atom with this result.
    Done(*mut SysletUatom, i64),
    /// Went asynchronous.
    Async(Handle),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    /// A context whose ring holds `ring_size` completions (more wait in an overflow
    /// list: none is dropped).
    pub fn new(ring_size: usize) -> Context {
        Context {
            inner: Arc::new(Inner {
                ring: Arc::new(Ring::new(ring_size)),
                next_id: AtomicU64::new(1),
                jobs: Mutex::new(HashMap::new()),
                uring: std::sync::atomic::AtomicBool::new(uring::wanted()),
                lookups: exec::Lookups::default(),
            }),
        }
    }

    /// Runs `program`: inline as far as nothing blocks, then asynchronously.
    pub fn exec(&self, mut program: Program) -> Outcome {
        let first = program.first();
        // SAFETY: the atoms point into the program's boxes (which do not move with it):
        // alive here during the inline run, then in `jobs` (moved there before anything
        // runs asynchronously) until the completion is taken.
        match unsafe { self.start(first, Some(program)) } {
            Ok((atom, ret, program)) => {
                let program = program.expect("an inline run keeps its program");
                Outcome::Done(Done {
                    id: 0,
                    atom: program.index_of(atom).unwrap_or(usize::MAX),
                    ret,
                    program,
                })
            }
            Err(h) => Outcome::Async(h),
        }
    }

    /// Runs the syslet whose first atom is `first` (C-style: the caller owns the atoms
    /// and what they point to).
    ///
    /// # Safety
    /// Everything the atoms point to stays valid (and is not written by the caller)
    /// until the syslet completes: inline, or when its completion is in the ring.
    /// Invalid addresses are caught (`-EFAULT`); memory freed and reused meanwhile is
    /// not.
    pub unsafe fn exec_raw(&self, first: *mut SysletUatom) -> RawOutcome {
        // SAFETY: per the contract.
        match unsafe { self.start(first, None) } {
            Ok((atom, ret, _)) => RawOutcome::Done(atom, ret),
            Err(h) => RawOutcome::Async(h),
        }
    }

    /// Starts a syslet: Ok((final atom, result, the program back)) if it finished
    /// inline (it was never registered), Err(handle) if it went asynchronous (then it
    /// and its program were registered in `jobs` before it could complete).
    ///
    /// # Safety
    /// As `exec_raw`.
    unsafe fn start(
        &self,
        first: *mut SysletUatom,
        program: Option<Program>,
    ) -> Result<(*mut SysletUatom, i64, Option<Program>), Handle> {
        let id = self.inner.next_id.fetch_add(1, Relaxed);
        // If the inline run unwinds (a SYSLET_SYNC atom parked in `blocking()` when the
        // runtime shuts down), the pool thread still finishes that system call with
        // pointers into the program: the program is leaked then, never freed under it.
        struct LeakOnUnwind(Option<Program>);
        impl Drop for LeakOnUnwind {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    core::mem::forget(self.0.take());
                }
            }
        }
        let mut program = LeakOnUnwind(program);
        let go_async = |job: &Arc<Job>| {
            lock(&self.inner.jobs).insert(id, (job.clone(), program.0.take()));
            // A strong count: whoever runs the syslet asynchronously holds this closure
            // until the syslet ends, so the context's state, and the program the atoms
            // point into, outlive it even if the user drops the context meanwhile (a
            // weak count here let a cachemiss thread write into a freed program).
            let inner = self.inner.clone();
            exec::GoAsync {
                ring: self.inner.ring.clone(),
                silent_end: Box::new(move |id| {
                    lock(&inner.jobs).remove(&id);
                }),
                uring: self.inner.uring.load(Relaxed) && crate::io::io_backend() == "io_uring",
            }
        };
        // SAFETY: per the contract.
        match unsafe { exec::start(id, first, &self.inner.lookups, go_async) } {
            Some((atom, ret)) => Ok((atom, ret, program.0.take())),
            None => Err(Handle(id)),
        }
    }

    /// Whether syslets of this context that go asynchronous may run on the io_uring
    /// chain engine (default: on, unless `WEFT_SYSLET_URING=off`; it is used only on
    /// the io_uring I/O backend). For tests and measurements.
    #[doc(hidden)]
    pub fn set_uring_engine(&self, on: bool) {
        self.inner.uring.store(on, Relaxed);
    }

    /// Takes the oldest completion from the ring, if any, without a system call. For a
    /// syslet submitted with [`exec`](Self::exec), use [`take`](Self::take) to get its
    /// program back.
    pub fn pop(&self) -> Option<Completion> {
        let c = self.inner.ring.pop()?;
        // The syslet is over: it is no longer in flight (a Rust program, if any, is
        // dropped with it: `take` gives it back instead).
        lock(&self.inner.jobs).remove(&c.id);
        Some(c)
    }

    /// Takes the oldest completion as a [`Done`] (with its program, if it was submitted
    /// with `exec`; raw ones come back with an empty program slot: use `pop`).
    pub fn take(&self) -> Option<Result<Done, Completion>> {
        let c = self.inner.ring.pop()?;
        Some(self.reunite(c))
    }

    fn reunite(&self, c: Completion) -> Result<Done, Completion> {
        let entry = lock(&self.inner.jobs).remove(&c.id);
        match entry {
            Some((_, Some(program))) => Ok(Done {
                id: c.id,
                atom: program.index_of(c.atom).unwrap_or(usize::MAX),
                ret: c.ret,
                program,
            }),
            _ => Err(c),
        }
    }

    /// Waits until at least `min` completions wait in the ring, or `timeout` passes
    /// (None: no limit). Returns how many wait. Parks only the green thread on a
    /// runtime worker.
    pub fn wait(&self, min: usize, timeout: Option<Duration>) -> usize {
        let deadline = timeout.map(|t| Instant::now() + t);
        self.inner.ring.wait(min, deadline);
        self.inner.ring.len()
    }

    /// Waits for the completion of `h` (submitted with `exec`) and returns it. Other
    /// completions taken out meanwhile go back into the ring (behind newer ones: the
    /// ring's order is not kept). None if `h` is not in flight here, or was submitted
    /// with `exec_raw` (its completion then stays in the ring, for `pop`).
    pub fn wait_for(&self, h: Handle) -> Option<Done> {
        let mut held = Vec::new();
        let out = loop {
            if !lock(&self.inner.jobs).contains_key(&h.0) && held.is_empty() {
                // Already taken by someone, or never ours.
                break None;
            }
            match self.inner.ring.pop() {
                Some(c) if c.id == h.0 => match self.reunite(c) {
                    Ok(d) => break Some(d),
                    Err(raw) => {
                        held.push(raw);
                        break None;
                    }
                },
                Some(c) => held.push(c),
                None => {
                    self.inner.ring.wait(1, None);
                }
            }
        };
        for c in held {
            self.inner.ring.push_back(c);
        }
        out
    }

    /// How many completions wait in the ring.
    pub fn ready(&self) -> usize {
        self.inner.ring.len()
    }

    /// How many completions found the ring full (and waited in the overflow list).
    pub fn overflowed(&self) -> u64 {
        self.inner.ring.overflowed()
    }

    /// How many syslets are in flight (went asynchronous, completion not taken yet).
    pub fn in_flight(&self) -> usize {
        lock(&self.inner.jobs).len()
    }

    /// Cancels a syslet in flight: it stops before its next atom, and an atom blocked
    /// on a cachemiss thread is interrupted; its completion then reports `-ECANCELED`
    /// (or the interrupted call's `-EINTR` if the call itself reports it). False if `h`
    /// is not in flight.
    pub fn cancel(&self, h: Handle) -> bool {
        let job = lock(&self.inner.jobs).get(&h.0).map(|(j, _)| j.clone());
        match job {
            Some(j) => {
                j.cancel();
                true
            }
            None => false,
        }
    }
}
