//! Green threads: the record each one has, and the handle that joins it.
//!
//! A green thread is a fiber of the fiber core ([`weft_fiber::raw::RawFiber`]) plus a
//! `Task` record shared (through `Arc`) by everything that may need to find it: the
//! run queue it waits in, a mutex's or channel's list of waiters, its timers, its join
//! handle. The fiber holds the stack and registers; the record holds what the
//! scheduler needs: the park word (`state.rs`), the worker that owns it, and its join
//! word.
//!
//! ## Size
//!
//! The record is one allocation per green thread that outlives the thread's stack (a
//! join handle or a waker may hold it after the thread has ended), so it is kept to 40
//! bytes: with `Arc`'s two counts that is a 56-byte allocation, the allocator's 64-byte
//! class (1,000,000 parked threads then fit in 4 GiB: a stack page, a registry slot
//! and this). What does not have to outlive the stack lives on it: the links of the
//! worker's list of live threads are a `LiveNode` (of the internal `worker` module) in the
//! thread's base frame, and the closure sits at the top of the stack (the fiber core).
//! The small fields are packed: the park word and the flags are a byte each, the owner
//! 16 bits (so a runtime has at most 65,534 workers), the timer sequence 32 bits.
//!
//! Ownership of the fiber: a task's fiber is switched to only by the worker that owns
//! the task (the one it first ran on), and it frees itself as it ends
//! (`RawFiber::exit_to`). A task that never ran is freed by whoever drops its last
//! queue entry (`Drop for Task` deletes the unstarted fiber).
//!
//! ## The join word
//!
//! `JoinCell` (internal) is one word: `PENDING` (0); `WAITING` or `WAITING_OS` with the
//! joiner's [`Unparker`] as a raw word (a green joiner's task
//! count, `Arc::into_raw`; an OS thread's boxed handle); `OK` or `ERR` with a thin
//! pointer to the outcome (`Box<Aligned<T>>`, which allocates nothing for a `()` result,
//! or `Box<Box<dyn Any + Send>>` for a panic); `DETACHED` (the handle was dropped
//! first); `GONE` (the outcome was taken or dropped). The tags sit in the low three bits
//! (every pointer is 8-aligned). The thread completes by a CAS from `PENDING`, or from
//! the waiting word to the outcome, which hands it the joiner's unparker to wake it
//! with. A joiner that leaves while waiting (the shutdown unwind, raised in its park)
//! takes its unparker back by a CAS to `PENDING` first, unless the thread has already
//! taken it: whoever wins the word owns the unparker, and nothing points into the
//! joiner's stack (which is freed, and reused, once it unwinds). The handle, which knows
//! `T`, decodes or drops the outcome; if it was dropped first, the thread drops its own
//! outcome.

pub mod state;

use crate::park::Unparker;
use crate::worker::{self, Shared};
use core::cell::Cell;
use core::sync::atomic::{AtomicPtr, AtomicU16, AtomicU8, AtomicUsize, Ordering, Ordering::*};

use state::ParkState;
use std::any::Any;
use std::sync::Arc;
use weft_fiber::raw::RawFiber;

/// `Task::owner` before the task has run on any worker.
pub(crate) const NO_OWNER: usize = usize::MAX;

/// The most workers a runtime may have (`Task::owner` is 16 bits, `u16::MAX` is none).
pub(crate) const MAX_WORKERS: usize = u16::MAX as usize - 1;

/// The worker that owns a task, in 16 bits; reads as a `usize` ([`NO_OWNER`] for none).
pub(crate) struct Owner(AtomicU16);

impl Owner {
    #[inline]
    pub(crate) fn load(&self, o: Ordering) -> usize {
        match self.0.load(o) {
            u16::MAX => NO_OWNER,
            v => v as usize,
        }
    }
    #[inline]
    pub(crate) fn store(&self, w: usize, o: Ordering) {
        debug_assert!(w <= MAX_WORKERS);
        self.0.store(w as u16, o)
    }
}

const STARTED: u8 = 1;
const CANCELLED: u8 = 2;
const UNWINDING: u8 = 4;
const PREEMPTIBLE: u8 = 8;
const PINNED: u8 = 16;

/// The scheduler's record of one green thread (40 bytes: see the module comment).
pub(crate) struct Task {
    /// The fiber; set once, right after creation, before the task is queued.
    pub fiber: Cell<Option<RawFiber>>,
    /// What its join handle waits on and takes.
    pub join: JoinCell,
    /// Its IPC identity (`ipc/`), made on first use: an `Arc::into_raw`, or null. The
    /// identity holds a count on this task (so a kept `Tid` can still find its worker);
    /// this count on the identity is given back when the thread exits (`ipc::exited`).
    pub ipc: AtomicPtr<crate::ipc::protocol::Ipc>,
    /// The runtime's `Shared`, as a pointer holding one strong count (given back in
    /// `Drop`): how a thread outside the runtime finds the owner's inbox.
    runtime: *const Shared,
    /// The sequence number of the timer that may wake it (0: none), for lazy timer
    /// cancellation. Touched only by the owning worker.
    pub timer_seq: Cell<u32>,
    /// The worker that runs it (fixed at its first run; changed only by an explicit
    /// move), or NO_OWNER before.
    pub owner: Owner,
    /// The park word.
    pub park: ParkState,
    /// STARTED (the fiber has been switched to: an unstarted task may be stolen, a
    /// started one stays on its worker), CANCELLED (the runtime shuts down: its park
    /// returns with a shutdown unwind), UNWINDING (that unwind has been raised: it is
    /// raised once), and the fixed PREEMPTIBLE (the preemption signal may switch it
    /// out) and PINNED (placed on a worker by `spawn_on`: never stolen, even before it
    /// runs). Written only by the thread that holds the task exclusively (the owner
    /// worker, or whoever holds a never-run task), so a load and a store suffice;
    /// read from anywhere.
    flags: AtomicU8,
}

// One allocation of at most 56 bytes with `Arc`'s counts: see the module comment.
const _: () = assert!(core::mem::size_of::<Task>() <= 40);

// SAFETY: the Cells are touched only by the task's owning worker (its OS thread), or
// before the task is published to any queue; everything else is atomic.
unsafe impl Send for Task {}
// SAFETY: as above.
unsafe impl Sync for Task {}

impl Task {
    pub(crate) fn new(shared: &Arc<Shared>, preemptible: bool, pinned: bool) -> Task {
        let flags = if preemptible { PREEMPTIBLE } else { 0 } | if pinned { PINNED } else { 0 };
        Task {
            runtime: Arc::into_raw(shared.clone()),
            join: JoinCell::new(),
            ipc: AtomicPtr::new(core::ptr::null_mut()),
            fiber: Cell::new(None),
            park: ParkState::new(),
            owner: Owner(AtomicU16::new(u16::MAX)),
            timer_seq: Cell::new(0),
            flags: AtomicU8::new(flags),
        }
    }

    /// The runtime this task belongs to.
    #[inline]
    pub(crate) fn shared(&self) -> &Shared {
        // SAFETY: the task holds a strong count on it.
        unsafe { &*self.runtime }
    }

    /// The fiber (always set once the task is queued).
    #[inline]
    pub(crate) fn raw(&self) -> RawFiber {
        self.fiber.get().expect("a queued task has its fiber")
    }

    #[inline]
    fn has(&self, f: u8, o: Ordering) -> bool {
        self.flags.load(o) & f != 0
    }

    /// Sets flag `f`. The caller holds the task exclusively (module comment of
    /// `flags`), so no other write can race with this load and store.
    #[inline]
    fn set(&self, f: u8, o: Ordering) {
        self.flags.store(self.flags.load(Relaxed) | f, o);
    }

    /// Whether the fiber has been switched to.
    #[inline]
    pub(crate) fn started(&self) -> bool {
        self.has(STARTED, Acquire)
    }
    /// Marks the task started (its owner worker, as it first switches to it).
    #[inline]
    pub(crate) fn set_started(&self) {
        self.set(STARTED, Release);
    }
    /// Whether the runtime has cancelled this thread (shutdown).
    #[inline]
    pub(crate) fn cancelled(&self) -> bool {
        self.has(CANCELLED, Relaxed)
    }
    /// Cancels the thread (its owner worker, or the holder of a never-run task).
    #[inline]
    pub(crate) fn set_cancelled(&self) {
        self.set(CANCELLED, Relaxed);
    }
    /// Marks the shutdown unwind raised (the thread itself); returns whether it was.
    #[inline]
    pub(crate) fn replace_unwinding(&self) -> bool {
        let was = self.has(UNWINDING, Relaxed);
        self.set(UNWINDING, Relaxed);
        was
    }
    /// Whether the preemption signal may switch this thread out.
    #[inline]
    pub(crate) fn preemptible(&self) -> bool {
        self.has(PREEMPTIBLE, Relaxed)
    }
    /// Whether `spawn_on` placed it (never stolen).
    #[inline]
    pub(crate) fn pinned(&self) -> bool {
        self.has(PINNED, Relaxed)
    }
}

impl Task {
    /// Whether the thread has completed (its join outcome is in), as a SeqCst load.
    pub(crate) fn join_done_seqcst(&self) -> bool {
        self.join.is_done_seqcst()
    }
}

impl Task {
    /// Drops a task that will never run (runtime shutdown, or a spawn that reached a
    /// worker that has ended): frees its fiber and closure, and completes its join with
    /// the [`Shutdown`](crate::Shutdown) payload.
    pub(crate) fn cancel_unstarted(&self) {
        if !self.started() {
            if let Some(f) = self.fiber.take() {
                // SAFETY: a never-started fiber is not running; taking it out of the
                // cell means nobody else will delete or run it.
                unsafe { f.delete() };
                crate::ipc::never_ran(self);
                self.join.complete::<()>(Err(Box::new(worker::Shutdown)));
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A task that never started still owns its fiber (closure and stack).
        if *self.flags.get_mut() & STARTED == 0 {
            if let Some(f) = self.fiber.get() {
                // SAFETY: an unstarted fiber is not running and nothing else holds it:
                // this was the last reference to its task.
                unsafe { f.delete() };
            }
        }
        // SAFETY: the count taken in `new`.
        drop(unsafe { Arc::from_raw(self.runtime) });
    }
}

/// Wakes `task`: if it is parked it runs again, else its next park returns at once
/// (see `worker::wake` for who touches what).
pub(crate) fn unpark(task: &Arc<Task>) {
    worker::wake(task.clone());
}

/// As [`unpark`], consuming the caller's reference.
pub(crate) fn unpark_owned(task: Arc<Task>) {
    worker::wake(task);
}

/// A green thread's outcome as its closure left it: its value, or its panic.
pub(crate) type Outcome<T> = Result<T, Box<dyn Any + Send + 'static>>;

/// A result boxed with an alignment of at least 8, so the join word has room for its
/// tag (a zero-sized result allocates nothing).
#[repr(align(8))]
struct Aligned<T>(T);

const TAG: usize = 7;
const PENDING: usize = 0;
const WAITING: usize = 1;
const OK: usize = 2;
const ERR: usize = 3;
const DETACHED: usize = 4;
const GONE: usize = 5;
const WAITING_OS: usize = 6;

/// Whether `w` is a waiting word (`WAITING` or `WAITING_OS`).
#[inline]
fn is_waiting(w: usize) -> bool {
    matches!(w & TAG, WAITING | WAITING_OS)
}

/// The waiting word of `u`.
fn waiting_word(u: Unparker) -> usize {
    let (p, os) = u.into_raw();
    debug_assert_eq!(p & TAG, 0);
    p | if os { WAITING_OS } else { WAITING }
}

/// The unparker in waiting word `w`.
///
/// # Safety
/// `w` is a waiting word made by `waiting_word`, whose unparker the caller now owns
/// (it won the word with a CAS): taken once.
unsafe fn waiter_of(w: usize) -> Unparker {
    // SAFETY: per the contract.
    unsafe { Unparker::from_raw(w & !TAG, w & TAG == WAITING_OS) }
}

/// Takes a published waiter back if the wait ends without the outcome (the shutdown
/// unwind out of `park`): see the module comment.
struct Unpublish<'a> {
    cell: &'a AtomicUsize,
    word: usize,
}

impl Drop for Unpublish<'_> {
    fn drop(&mut self) {
        if self
            .cell
            .compare_exchange(self.word, PENDING, AcqRel, Acquire)
            .is_ok()
        {
            // SAFETY: we won the word back: its unparker is ours again, taken once.
            drop(unsafe { waiter_of(self.word) });
        }
    }
}

#[inline]
fn is_done(w: usize) -> bool {
    matches!(w & TAG, OK | ERR | GONE)
}

/// The outcome as a tagged thin pointer.
fn encode<T>(out: Outcome<T>) -> usize {
    match out {
        Ok(v) => Box::into_raw(Box::new(Aligned(v))) as usize | OK,
        Err(p) => Box::into_raw(Box::new(p)) as usize | ERR,
    }
}

/// The outcome back from its tagged pointer.
///
/// # Safety
/// `w` is an `OK` or `ERR` word made by `encode::<T>`, decoded once.
unsafe fn decode<T>(w: usize) -> Outcome<T> {
    let p = w & !TAG;
    // SAFETY: per the contract.
    unsafe {
        if w & TAG == OK {
            Ok(Box::from_raw(p as *mut Aligned<T>).0)
        } else {
            Err(*Box::from_raw(p as *mut Box<dyn Any + Send + 'static>))
        }
    }
}

/// The join half of a task: one word (see the module comment). Part of the task record
/// itself (one allocation per green thread, not two).
pub(crate) struct JoinCell(AtomicUsize);

impl JoinCell {
    pub(crate) fn new() -> Self {
        JoinCell(AtomicUsize::new(PENDING))
    }

    /// The task's side: publishes the outcome and wakes a waiting joiner; if the handle
    /// is gone, drops the outcome here. Called once.
    pub(crate) fn complete<T>(&self, out: Outcome<T>) {
        let enc = encode(out);
        let mut cur = self.0.load(Acquire);
        loop {
            if cur == PENDING {
                // SeqCst: ordered with the IPC identity's exit check (`ipc::exited`).
                match self.0.compare_exchange(PENDING, enc, SeqCst, Acquire) {
                    Ok(_) => return,
                    Err(c) => cur = c,
                }
            } else if is_waiting(cur) {
                // The outcome in and the joiner's unparker ours, in one step, unless the
                // joiner took it back meanwhile (it is leaving: then the word is PENDING
                // again). SeqCst as above.
                match self.0.compare_exchange(cur, enc, SeqCst, Acquire) {
                    Ok(_) => {
                        // SAFETY: we won the waiting word: its unparker is ours.
                        unsafe { waiter_of(cur) }.unpark_owned();
                        return;
                    }
                    Err(c) => cur = c,
                }
            } else {
                debug_assert_eq!(cur, DETACHED, "a green thread completed twice");
                self.0.store(GONE, SeqCst);
                // SAFETY: made just above, never published.
                drop(unsafe { decode::<T>(enc) });
                return;
            }
        }
    }

    /// `is_done` as a SeqCst load (for `ipc::ipc_of`'s check against `ipc::exited`).
    pub(crate) fn is_done_seqcst(&self) -> bool {
        is_done(self.0.load(SeqCst))
    }

    /// The handle's side: waits for the outcome (parking the green thread, or the OS
    /// thread when called outside the runtime) and takes it.
    fn wait<T>(&self) -> Outcome<T> {
        let mut cur = self.0.load(Acquire);
        if !is_done(cur) {
            debug_assert_eq!(cur, PENDING);
            let word = waiting_word(Unparker::current());
            match self.0.compare_exchange(PENDING, word, Release, Acquire) {
                Ok(_) => {
                    // Leaving without the outcome (an unwind out of `park`), take the
                    // unparker back unless the thread has it.
                    let unpublish = Unpublish {
                        cell: &self.0,
                        word,
                    };
                    loop {
                        cur = self.0.load(Acquire);
                        if is_done(cur) {
                            break;
                        }
                        crate::park::park();
                    }
                    // Done: the thread won the word and owns the unparker.
                    core::mem::forget(unpublish);
                }
                Err(c) => {
                    // Completed meanwhile: the waiter was never published.
                    // SAFETY: made just above, never published: ours, taken once.
                    drop(unsafe { waiter_of(word) });
                    cur = c;
                }
            }
        }
        debug_assert!(cur & TAG == OK || cur & TAG == ERR);
        // Only the (single, owned) handle takes the outcome, and the task no longer
        // writes the word once it is done.
        self.0.store(GONE, Relaxed);
        // SAFETY: an outcome word, seen with Acquire, taken once (now GONE).
        unsafe { decode::<T>(cur) }
    }

    /// The handle is dropped: a pending outcome will be dropped by the task, a present
    /// one is dropped here.
    fn detach<T>(&self) {
        let mut cur = self.0.load(Acquire);
        loop {
            match cur & TAG {
                PENDING => match self.0.compare_exchange(PENDING, DETACHED, AcqRel, Acquire) {
                    Ok(_) => return,
                    Err(c) => cur = c,
                },
                OK | ERR => {
                    self.0.store(GONE, Relaxed);
                    // SAFETY: an outcome word made by the task with `encode::<T>` (the
                    // handle's type), seen with Acquire, taken once (now GONE).
                    drop(unsafe { decode::<T>(cur) });
                    return;
                }
                _ => return, // GONE: taken by `join`
            }
        }
    }
}

/// An owned permission to join a green thread (wait for it and take its result), as
/// `std::thread::JoinHandle`. Dropping it detaches the thread.
pub struct JoinHandle<T> {
    pub(crate) task: Arc<Task>,
    pub(crate) id: u64,
    pub(crate) _result: core::marker::PhantomData<fn() -> T>,
}

impl<T: 'static> JoinHandle<T> {
    /// Waits for the green thread to finish; `Err` carries its panic payload, as
    /// `std::thread::JoinHandle::join` does. Parks only the calling green thread (or
    /// blocks the calling OS thread when called from outside the runtime).
    pub fn join(self) -> std::thread::Result<T> {
        self.task.join.wait::<T>()
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        self.task.join.detach::<T>();
    }
}

impl<T> JoinHandle<T> {
    /// True once the green thread has finished (returned or panicked).
    pub fn is_finished(&self) -> bool {
        is_done(self.task.join.0.load(Acquire))
    }

    /// The green thread's id: its fiber id, the one `weft ps` shows.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id)
            .field("finished", &self.is_finished())
            .finish()
    }
}
