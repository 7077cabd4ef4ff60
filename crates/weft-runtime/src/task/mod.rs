//! Green threads: the record each one has, and the handle that joins it.
//!
//! A green thread is a fiber of the fiber core ([`weft_fiber::raw::RawFiber`]) plus a
//! `Task` record shared (through `Arc`) by everything that may need to find it: the
//! run queue it waits in, a mutex's or channel's list of waiters, its timers, its join
//! handle. The fiber holds the stack and registers; the record holds what the
//! scheduler needs: the park word (`state.rs`), the worker that owns it, and the links
//! of its worker's list of live threads.
//!
//! Ownership of the fiber: a task's fiber is switched to only by the worker that owns
//! the task (the one it first ran on), and it frees itself as it ends
//! (`RawFiber::exit_to`). A task that never ran is freed by whoever drops its last
//! queue entry (`Drop for Task` deletes the unstarted fiber).

pub mod state;

use crate::worker::{self, Shared};
use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};

use state::ParkState;
use std::any::Any;
use std::sync::Arc;
use weft_fiber::raw::RawFiber;

/// `Task::owner` before the task has run on any worker.
pub(crate) const NO_OWNER: usize = usize::MAX;

/// The scheduler's record of one green thread.
pub(crate) struct Task {
    /// The fiber; set once, right after creation, before the task is queued.
    pub fiber: Cell<Option<RawFiber>>,
    /// The park word.
    pub park: ParkState,
    /// The worker that runs it (fixed at its first run; changed only by an explicit
    /// move), or NO_OWNER before.
    pub owner: AtomicUsize,
    /// Set once the fiber has started: an unstarted task may be stolen, a started one
    /// stays on its worker.
    pub started: AtomicBool,
    /// Set when the runtime shuts down while this thread is parked: its park returns
    /// with a shutdown unwind.
    pub cancelled: AtomicBool,
    /// The sequence number of the timer that may wake it (0: none), for lazy timer
    /// cancellation. Touched only by the owning worker.
    pub timer_seq: Cell<u64>,
    /// The worker's intrusive list of live started tasks (owner worker only).
    pub live_prev: Cell<*const Task>,
    pub live_next: Cell<*const Task>,
    /// Set once the shutdown unwind has been raised in this thread (it is raised once).
    pub unwinding: Cell<bool>,
    /// Whether the preemption signal may switch this thread out.
    pub preemptible: bool,
    /// Placed on a worker by `spawn_on`: never stolen, even before it runs.
    pub pinned: bool,
    /// What its join handle waits on and takes.
    pub join: JoinCell,
    /// Its IPC identity (`ipc/`), made on first use: an `Arc::into_raw`, or null. The
    /// identity holds a count on this task (so a kept `Tid` can still find its worker);
    /// this count on the identity is given back when the thread exits (`ipc::exited`).
    pub ipc: AtomicPtr<crate::ipc::protocol::Ipc>,
    /// The runtime's `Shared`, as a pointer holding one strong count (given back in
    /// `Drop`): how a thread outside the runtime finds the owner's inbox.
    runtime: *const Shared,
}

// SAFETY: the Cells are touched only by the task's owning worker (its OS thread), or
// before the task is published to any queue; everything else is atomic.
unsafe impl Send for Task {}
// SAFETY: as above.
unsafe impl Sync for Task {}

impl Task {
    pub(crate) fn new(shared: &Arc<Shared>, preemptible: bool, pinned: bool) -> Task {
        Task {
            runtime: Arc::into_raw(shared.clone()),
            join: JoinCell::new(),
            ipc: AtomicPtr::new(core::ptr::null_mut()),
            unwinding: Cell::new(false),
            fiber: Cell::new(None),
            park: ParkState::new(),
            owner: AtomicUsize::new(NO_OWNER),
            started: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            timer_seq: Cell::new(0),
            live_prev: Cell::new(core::ptr::null()),
            live_next: Cell::new(core::ptr::null()),
            preemptible,
            pinned,
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
        if !self.started.load(Acquire) {
            if let Some(f) = self.fiber.take() {
                // SAFETY: a never-started fiber is not running; taking it out of the
                // cell means nobody else will delete or run it.
                unsafe { f.delete() };
                crate::ipc::never_ran(self);
                self.join.complete(Err(Box::new(worker::Shutdown)));
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // A task that never started still owns its fiber (closure and stack).
        if !*self.started.get_mut() {
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

/// The result a green thread's closure produced (boxed: a `()` result allocates
/// nothing), or its panic.
pub(crate) type Outcome = Result<Box<dyn Any + Send + 'static>, Box<dyn Any + Send + 'static>>;

const PENDING: u32 = 0;
const WAITING: u32 = 1;
const DONE: u32 = 2;

/// The join half of a task: its outcome and who waits for it. Part of the task record
/// itself (one allocation per green thread, not two).
pub(crate) struct JoinCell {
    state: AtomicU32,
    result: UnsafeCell<Option<Outcome>>,
    waiter: UnsafeCell<Option<crate::park::Unparker>>,
}

// SAFETY: `result` is written by the task before DONE (Release) and read by the handle
// after seeing DONE (Acquire); `waiter` is written by the handle before WAITING
// (Release) and taken by the task after seeing WAITING (AcqRel swap).
unsafe impl Sync for JoinCell {}
// SAFETY: as above.
unsafe impl Send for JoinCell {}

impl JoinCell {
    pub(crate) fn new() -> Self {
        JoinCell {
            state: AtomicU32::new(PENDING),
            result: UnsafeCell::new(None),
            waiter: UnsafeCell::new(None),
        }
    }

    /// The task's side: stores the outcome and wakes a waiting joiner.
    pub(crate) fn complete(&self, out: Outcome) {
        // SAFETY: only the task writes `result`, once, before publishing DONE.
        unsafe { *self.result.get() = Some(out) };
        // SeqCst: ordered with the IPC identity's exit check (`ipc::exited`).
        if self.state.swap(DONE, SeqCst) == WAITING {
            // SAFETY: the joiner wrote `waiter` before its Release CAS to WAITING, which
            // our AcqRel swap read; it never touches it again.
            if let Some(w) = unsafe { (*self.waiter.get()).take() } {
                w.unpark_owned();
            }
        }
    }

    fn is_done(&self) -> bool {
        self.state.load(Acquire) == DONE
    }

    /// `is_done` as a SeqCst load (for `ipc::ipc_of`'s check against `ipc::exited`).
    pub(crate) fn is_done_seqcst(&self) -> bool {
        self.state.load(SeqCst) == DONE
    }

    /// The handle's side: waits for the outcome (parking the green thread, or the OS
    /// thread when called outside the runtime).
    fn wait(&self) -> Outcome {
        if !self.is_done() {
            // SAFETY: only the handle writes `waiter`, before publishing WAITING.
            unsafe { *self.waiter.get() = Some(crate::park::Unparker::current()) };
            if self
                .state
                .compare_exchange(PENDING, WAITING, Release, Acquire)
                .is_ok()
            {
                while !self.is_done() {
                    crate::park::park();
                }
            }
        }
        // SAFETY: DONE was observed with Acquire; the task wrote the result before, and
        // only the (single, owned) handle takes it.
        unsafe { (*self.result.get()).take() }.expect("a finished green thread left its outcome")
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
        self.task.join.wait().map(|v| {
            *v.downcast::<T>()
                .expect("a green thread's result has its spawn's type")
        })
    }
}

impl<T> JoinHandle<T> {
    /// True once the green thread has finished (returned or panicked).
    pub fn is_finished(&self) -> bool {
        self.task.join.is_done()
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
