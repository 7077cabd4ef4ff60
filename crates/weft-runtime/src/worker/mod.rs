//! Workers: the OS threads that run green threads, one per CPU.
//!
//! A worker owns, and alone touches:
//! - its **run queue** of started green threads that are ready (`runq`), plus a
//!   `next` slot for the thread just spawned here (it runs next, as in Go: a spawn
//!   followed by a join costs no trip through the queue; a thief may take it, since it
//!   has never run);
//! - its **spawn deque** of green threads that have never run (`spawnq`, a Chase-Lev
//!   deque: idle workers may steal from it, and only from it);
//! - its **timers** (`timers.rs`), its end of the **message-box matrix**
//!   ([`crate::msgbox`]), and its I/O driver;
//! - the **live list** of the started green threads it owns (for shutdown): its
//!   entries ([`LiveNode`]) live in each thread's base frame, on the thread's own
//!   stack, for as long as the thread runs, so they cost the heap nothing.
//!
//! Others reach a worker only through its message boxes (from workers) or its inbox
//! (from any other thread), each followed by a ring of its doorbell.
//!
//! ## Switching
//!
//! The worker thread is itself a fiber (converted at start): the *scheduler fiber*,
//! which runs [`sched_loop`]. Green threads switch **directly** to each other: a
//! thread that yields or parks picks the next one itself ([`pick_next`]) and switches
//! to it, so a yield is one context switch, not two. Only when nothing is runnable does
//! a thread switch to the scheduler fiber, which polls, steals, and sleeps.
//!
//! The hot paths avoid work that is usually moot: a yield moves the running thread's
//! reference into the run queue (no count change); a thread that starts and ends
//! without switching is current without a count of its own (`current_borrowed`: the
//! live list's entry holds it); the spawn deque is not popped while it is known empty
//! (`spawnq_maybe`); the `next` slot is filled with a store when it is empty (thieves
//! only empty it).
//!
//! Code that runs after a switch reaches its worker through [`current`], which reads
//! the fiber core's never-cached thread word: never through a pointer kept from before
//! the switch (a thread moved with `move_to` resumes on another worker).
//!
//! ## Invariants
//!
//! 1. A task is in at most one of: `current`, `next`, `runq`, `spawnq`, a message or the
//!    inbox, or parked (in none). Its park word (`task/state.rs`) makes "woken once per
//!    park" true across threads.
//! 2. A started task is switched to only by its owner worker's OS thread.
//! 3. `Worker` is reached through a raw pointer and never borrowed across a call that
//!    could reach it again (an unpark, a drop that wakes someone): every access is a
//!    short field access.

pub(crate) mod preempt;
pub(crate) mod timers;

use crate::msgbox::{Endpoint, Remote};
use crate::shim::CachePadded;
use crate::task::{Task, NO_OWNER};
use crossbeam_deque::{Steal, Stealer};
use crossbeam_queue::SegQueue;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use timers::Timers;
use weft_fiber::raw::{self, RawFiber};

/// What travels through the message boxes and inboxes.
pub(crate) enum Mail {
    /// Wake a green thread owned by the receiver (the receiver does the park word's
    /// swap, and queues it if it was parked).
    Wake(Arc<Task>),
    /// A new green thread for the receiver (`spawn_on`, or a spawn from outside).
    Spawn(Spawned),
    /// An IPC request for a thread the receiver owns (`ipc/protocol.rs`).
    Ipc(crate::ipc::protocol::Req),
}

/// A never-run task in transit. If the message is dropped undelivered (its worker has
/// ended), the task is cancelled, so its join handle does not wait forever.
pub(crate) struct Spawned(Option<Arc<Task>>);

impl Spawned {
    fn is_pinned(&self) -> bool {
        self.0.as_ref().is_some_and(|t| t.pinned())
    }
    fn take(mut self) -> Arc<Task> {
        self.0.take().expect("taken once")
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.cancel_unstarted();
        }
    }
}

/// How often (in picks) a worker looks at its timers, inbox and I/O even while its run
/// queue is not empty (fairness between ready threads and the outside world), and how
/// often it takes a woken thread before a never-run one.
const POLL_EVERY: u32 = 61;
const SPAWNQ_EVERY: u32 = 31;

/// The part of a worker that others may touch (all atomics or thread-safe queues).
pub(crate) struct WorkerShared {
    /// Mail from threads that are not workers.
    pub inbox: SegQueue<Mail>,
    /// Steals never-run green threads from this worker's spawn deque.
    pub stealer: Stealer<Arc<Task>>,
    /// The thread spawned last here, run at the worker's next switch; a thief may take
    /// it too (it has never run).
    pub next: NextSlot,
    /// The worker's OS thread id (0 before it starts), for signals and `weft ps`.
    pub tid: AtomicI32,
    /// What the worker writes at every switch, on a cache line of its own: every
    /// message sent to this worker reads `ended`, which must not miss in the cache
    /// because the worker has just switched (a busy cross-worker round trip paid one
    /// such miss a hop).
    pub progress: CachePadded<Progress>,
    /// Set when the worker's loop has ended (shutdown): mail for it is no longer read,
    /// so senders cancel spawns and drop wake-ups instead.
    pub ended: AtomicBool,
}

/// The part of [`WorkerShared`] that changes at every switch (the monitor reads it).
#[derive(Default)]
pub(crate) struct Progress {
    /// Counts context switches on this worker (the monitor's progress measure).
    pub switches: AtomicU64,
    /// Whether the running green thread has been asked to yield (preemption flag).
    pub preempt_requested: AtomicBool,
    /// Whether a green thread (not the scheduler) holds the worker now.
    pub running: AtomicBool,
    /// Whether that green thread sleeps in a system call on the worker itself
    /// ([`in_blocking_call`]): nothing to preempt, so the monitor need not tick for it.
    pub blocked: AtomicBool,
}

/// A one-task slot that the owner fills and empties and a thief may empty: each side
/// takes with an atomic swap, so exactly one gets the task.
pub(crate) struct NextSlot(AtomicPtr<Task>);

impl NextSlot {
    pub(crate) fn new() -> Self {
        NextSlot(AtomicPtr::new(core::ptr::null_mut()))
    }
    /// Puts `t` in the slot; returns what was there.
    pub(crate) fn put(&self, t: Arc<Task>) -> Option<Arc<Task>> {
        let new = Arc::into_raw(t).cast_mut();
        if self.0.load(Relaxed).is_null() {
            // Thieves only empty the slot: an empty slot stays empty until we fill it,
            // so a store does (the Release pairs with the taker's AcqRel swap).
            self.0.store(new, Release);
            return None;
        }
        let old = self.0.swap(new, AcqRel);
        // SAFETY: a non-null pointer in the slot is an `Arc::into_raw` we own now.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }
    /// Whether the slot is empty (a hint).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.load(Relaxed).is_null()
    }
    /// Empties the slot.
    #[inline]
    pub(crate) fn take(&self) -> Option<Arc<Task>> {
        if self.0.load(Relaxed).is_null() {
            return None;
        }
        let old = self.0.swap(core::ptr::null_mut(), AcqRel);
        // SAFETY: as in `put`.
        (!old.is_null()).then(|| unsafe { Arc::from_raw(old) })
    }
}

impl Drop for NextSlot {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// What the workers and every handle of one runtime share.
pub(crate) struct Shared {
    pub workers: Box<[CachePadded<WorkerShared>]>,
    pub remote: Remote<Mail>,
    pub shutdown: AtomicBool,
    /// Round-robin choice of a worker for spawns from outside the runtime.
    pub next_worker: AtomicUsize,
    pub config: crate::runtime::Config,
}

/// A worker's own state (see the module comment). Lives on its OS thread.
pub(crate) struct Worker {
    pub id: usize,
    pub shared: Arc<Shared>,
    /// `&shared.workers[id]`, kept (the hot paths read it on every switch).
    mine: *const WorkerShared,
    endpoint: Endpoint<Mail>,
    runq: VecDeque<Arc<Task>>,
    spawnq: crossbeam_deque::Worker<Arc<Task>>,
    /// False only when `spawnq` is known empty: set by every push (only this worker
    /// pushes), cleared by a pop that finds it empty (thieves only take). So the picks
    /// of a worker with no never-run threads (a yield) skip the deque's pop.
    spawnq_maybe: bool,
    pub(crate) timers: Timers,
    /// This worker's I/O (io_uring, or the thread fallback).
    pub(crate) io: crate::io::Driver,
    /// The scheduler fiber (this OS thread's own fiber).
    sched: RawFiber,
    /// The green thread running now (None while the scheduler fiber runs).
    current: Option<Arc<Task>>,
    /// Whether `current` holds no count of its own: a thread that has just started
    /// moved the count its queue entry gave it into its live-list entry
    /// ([`task_started`]), and until it first switches away (or exits) `current` is a
    /// copy without a count. So a thread that starts and ends without switching (a
    /// spawn + join) costs no reference-count traffic for being current.
    current_borrowed: bool,
    /// The running count of the green thread that parked in IPC here last, kept (not
    /// dropped) for its waker on this worker ([`take_ipc_parked`]): a same-worker call
    /// and reply then hand the two threads' counts over instead of taking and dropping
    /// one per switch. Held only while that thread is parked: it takes its own back
    /// when it resumes, if its waker did not ([`park_ipc`]).
    ipc_parked: Option<Arc<Task>>,
    /// Counts on IPC identities kept for the next requests (see `ipc::CountCache`).
    ipc_counts: crate::ipc::CountCache,
    /// Head of the live list (each entry holds one strong count, from `Arc::into_raw`).
    live_head: *const LiveNode,
    live: usize,
    /// Picks left until the next one that polls events anyway ([`POLL_EVERY`]).
    poll_in: u32,
    /// IPC direct switches made (for the tests: which picks took the direct path).
    #[cfg(test)]
    direct_switches: u64,
    /// Picks left until the next one that takes a woken thread before a never-run one
    /// ([`SPAWNQ_EVERY`]).
    spawnq_in: u32,
    /// Whether the last poll moved a thread its mail woke to the front of the run
    /// queue ([`poll_events`]).
    promoted: bool,
    /// Runtime depth: above 0 while runtime code runs on this worker, so the preemption
    /// signal only sets a flag (`preempt.rs`). Every context switch happens at depth 1.
    pub(crate) depth: core::cell::Cell<u32>,
    /// Times the worker went to wait for work ([`idle`]) or into a declared blocking
    /// call ([`in_blocking_call`]): where it may sleep by the runtime's own choice.
    rests: u64,
}

/// The runtime of worker `w`.
///
/// # Safety
/// `w` is a live worker; the reference must not outlive it.
#[inline(always)]
pub(crate) unsafe fn shared_of<'a>(w: *mut Worker) -> &'a Shared {
    // SAFETY: per the contract; the Arc keeps `Shared` alive as long as the worker.
    unsafe { &*Arc::as_ptr(&(*w).shared) }
}

/// Worker `w`'s own shared part.
///
/// # Safety
/// As [`shared_of`].
#[inline(always)]
unsafe fn mine<'a>(w: *mut Worker) -> &'a WorkerShared {
    // SAFETY: per the contract; `mine` points into `shared`, which the worker keeps.
    unsafe { &*(*w).mine }
}

/// The worker the calling OS thread runs, or null.
#[inline(always)]
pub(crate) fn current() -> *mut Worker {
    raw::thread_word().cast()
}

/// The green thread running now, if the caller is one.
pub(crate) fn current_task() -> Option<Arc<Task>> {
    let w = current();
    if w.is_null() {
        return None;
    }
    // SAFETY: a non-null thread word is this thread's live worker.
    unsafe { (*w).current.clone() }
}

/// The index of the worker running the caller, if it is a green thread.
pub fn current_worker() -> Option<usize> {
    let w = current();
    // SAFETY: as above.
    (!w.is_null() && unsafe { (*w).current.is_some() }).then(|| unsafe { (*w).id })
}

/// Whether the caller is a green thread running its own code, not the runtime's: the
/// test the system-call layer (`hook`) inlines into every function it overrides.
#[cfg(feature = "hook")]
#[inline(always)]
pub(crate) fn in_green_code() -> bool {
    let w = current();
    // SAFETY: a non-null thread word is this thread's live worker; two short reads.
    !w.is_null() && unsafe { (*w).current.is_some() && (*w).depth.get() == 0 }
}

/// Whether the running green thread has been cancelled (its runtime shuts down), read
/// without taking a count on its task (the layer asks before every park).
#[cfg(feature = "hook")]
#[inline]
pub(crate) fn current_cancelled() -> bool {
    let w = current();
    // SAFETY: as above.
    !w.is_null() && unsafe { (*w).current.as_ref().is_some_and(|t| t.cancelled()) }
}

impl Worker {
    pub(crate) fn new(
        id: usize,
        shared: Arc<Shared>,
        mut endpoint: Endpoint<Mail>,
        spawnq: crossbeam_deque::Worker<Arc<Task>>,
        sched: RawFiber,
    ) -> std::io::Result<Worker> {
        let io = crate::io::Driver::new(endpoint.wake_fd(), shared.config.io_backend)?;
        endpoint.set_spin(shared.config.idle_spin);
        let mine: *const WorkerShared = &*shared.workers[id];
        Ok(Worker {
            id,
            mine,
            shared,
            endpoint,
            runq: VecDeque::new(),
            spawnq,
            spawnq_maybe: false,
            timers: Timers::default(),
            io,
            sched,
            current: None,
            current_borrowed: false,
            ipc_parked: None,
            ipc_counts: crate::ipc::CountCache::new(),
            live_head: core::ptr::null(),
            live: 0,
            poll_in: POLL_EVERY,
            #[cfg(test)]
            direct_switches: 0,
            spawnq_in: SPAWNQ_EVERY,
            promoted: false,
            depth: core::cell::Cell::new(0),
            rests: 0,
        })
    }
}

/// Wakes a green thread, from wherever the caller runs.
///
/// Only the owner worker touches a thread's park word: on the owner, the wake-up is
/// the park word's swap and, if the thread was parked, a push onto the run queue; from
/// another worker (a `Wake` message) or any other thread (the owner's inbox) it is a
/// message, and the owner does the same when the message arrives. So the park word's
/// cache line never leaves the owner's CPU, and a cross-worker wake-up costs the
/// message alone.
pub(crate) fn wake(task: Arc<Task>) {
    let owner = task.owner.load(Acquire);
    debug_assert_ne!(owner, NO_OWNER, "only started tasks park");
    let w = current();
    // SAFETY: a non-null thread word is this thread's worker; short field accesses only.
    unsafe {
        if !w.is_null() && core::ptr::eq(Arc::as_ptr(&(*w).shared), task.shared()) {
            preempt::enter(w);
            if (*w).id == owner {
                if task.park.unpark() {
                    (*w).runq.push_back(task);
                }
            } else {
                send_to_worker(w, owner, Mail::Wake(task));
            }
            preempt::leave(w);
            return;
        }
    }
    // The task keeps its runtime alive; `send_from_outside` may drop the mail (the
    // worker has ended), so a second reference keeps `shared` valid through the call.
    let keep = task.clone();
    send_from_outside(keep.shared(), owner, Mail::Wake(task));
}

/// Sends `mail` to worker `to` from a thread that is not one of its runtime's workers.
/// If that worker has ended, the mail is dropped here (a spawn is cancelled, a wake-up
/// is moot) rather than left in an inbox nobody reads.
pub(crate) fn send_from_outside(shared: &Shared, to: usize, mail: Mail) {
    if shared.workers[to].ended.load(Acquire) {
        return drop(mail);
    }
    shared.workers[to].inbox.push(mail);
    shared.remote.wake(to);
    // Ended meanwhile? Then take it back out (Runtime::drop also drains the inboxes,
    // for a runtime still being dropped).
    if shared.workers[to].ended.load(Acquire) {
        while shared.workers[to].inbox.pop().is_some() {}
    }
}

/// Sends `mail` from worker `w` to worker `to` of the same runtime, unless `to` has
/// ended (then the mail is dropped: a spawn is cancelled).
///
/// # Safety
/// `w` is this thread's worker.
unsafe fn send_to_worker(w: *mut Worker, to: usize, mail: Mail) {
    // SAFETY: per the contract.
    unsafe {
        if shared_of(w).workers[to].ended.load(Acquire) {
            return drop(mail);
        }
        (*w).endpoint.send(to, mail);
    }
}

/// Queues a new green thread. From a green thread of the same runtime with `to` None or
/// its own worker, it goes into the `next` slot (it runs at the caller's next switch);
/// otherwise to worker `to` (or a round-robin choice) through the boxes or the inbox.
pub(crate) fn submit(shared: &Arc<Shared>, task: Arc<Task>, to: Option<usize>) {
    let w = current();
    // SAFETY: a non-null thread word is this thread's worker.
    unsafe {
        if !w.is_null() && Arc::ptr_eq(&(*w).shared, shared) {
            let me = (*w).id;
            let to = to.unwrap_or(me);
            preempt::enter(w);
            if task.pinned() && to == me {
                // Placed here by spawn_on: not stealable, so not in `next` or the deque.
                (*w).runq.push_back(task);
            } else if to == me {
                // A lone spawn (typically followed by a join) runs here next; only
                // when never-run work piles up is a sleeping worker woken to steal it
                // (and the monitor wakes one if this worker stays busy: monitor.rs).
                if let Some(prev) = mine(w).next.put(task) {
                    spawnq_push(w, prev);
                    wake_an_idle_worker(shared, me);
                }
            } else {
                send_to_worker(w, to, Mail::Spawn(Spawned(Some(task))));
            }
            preempt::leave(w);
            return;
        }
    }
    let to = to.unwrap_or_else(|| shared.next_worker.fetch_add(1, Relaxed) % shared.workers.len());
    send_from_outside(shared, to, Mail::Spawn(Spawned(Some(task))));
}

/// If some other worker sleeps while this one has unstarted work, wakes one so it can
/// steal (Go's "wakep").
fn wake_an_idle_worker(shared: &Shared, me: usize) {
    let n = shared.workers.len();
    for i in 1..n {
        let o = (me + i) % n;
        if shared.remote.is_sleeping(o) {
            shared.remote.wake(o);
            return;
        }
    }
}

/// Starts a task on this worker if it has never run: it becomes owned here. (It
/// joins the live list as it starts running: [`task_started`].)
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
unsafe fn adopt(w: *mut Worker, t: &Arc<Task>) {
    // SAFETY: per the contract.
    unsafe {
        if !t.started() {
            t.owner.store((*w).id, Release);
            t.set_started();
        }
    }
}

/// An entry of a worker's live list (the started green threads it owns). It lives in
/// the thread's base frame (the fiber closure made in `runtime.rs`), from the thread's
/// first instruction ([`task_started`]) to its exit ([`exit_current`]), so it costs
/// no heap: its stack page is resident anyway. It holds one strong count on the task
/// (a thread parked with no waker, say forever, stays findable for the shutdown).
pub(crate) struct LiveNode {
    prev: core::cell::Cell<*const LiveNode>,
    next: core::cell::Cell<*const LiveNode>,
    task: core::cell::Cell<*const Task>,
}

impl LiveNode {
    /// An unlinked entry.
    pub(crate) fn new() -> Self {
        LiveNode {
            prev: core::cell::Cell::new(core::ptr::null()),
            next: core::cell::Cell::new(core::ptr::null()),
            task: core::cell::Cell::new(core::ptr::null()),
        }
    }
}

/// Takes a finished thread's entry off its worker's live list, dropping the list's
/// count on its task.
///
/// # Safety
/// `w` is this thread's worker and `node` an entry of its live list.
unsafe fn unlink(w: *mut Worker, node: &LiveNode) {
    // SAFETY: per the contract.
    unsafe {
        let (p, n) = (node.prev.get(), node.next.get());
        if p.is_null() {
            (*w).live_head = n;
        } else {
            (*p).next.set(n);
        }
        if !n.is_null() {
            (*n).prev.set(p);
        }
        (*w).live -= 1;
        drop(Arc::from_raw(node.task.get()));
    }
}

/// Handles everything that came from outside: mail, the inbox, due timers.
///
/// # Safety
/// `w` is this thread's worker.
unsafe fn poll_events(w: *mut Worker) {
    // SAFETY: per the contract. `poll`'s callback only pushes to this worker's queues.
    unsafe {
        let runq: *mut VecDeque<Arc<Task>> = &mut (*w).runq;
        let deliver = |m: Mail| match m {
            Mail::Wake(t) => {
                if t.park.unpark() {
                    (*runq).push_back(t)
                }
            }
            // Placed here by spawn_on: not stealable, so not in the deque.
            Mail::Spawn(t) if t.is_pinned() => (*runq).push_back(t.take()),
            Mail::Spawn(t) => spawnq_push(w, t.take()),
            Mail::Ipc(r) => crate::ipc::on_mail(w, r),
        };
        let queued = (*runq).len();
        (*w).endpoint.poll(|_, m| deliver(m));
        // Looked at first: crossbeam's `pop` runs a SeqCst fence (a locked instruction)
        // even on an empty queue, and this runs at every poll. A push that this look
        // misses is followed by its sender's wake-up (`send_from_outside`), which makes
        // the worker poll again.
        if !mine(w).inbox.is_empty() {
            while let Some(m) = mine(w).inbox.pop() {
                deliver(m);
            }
        }
        // The first thread this mail made ready runs next, ahead of the threads that
        // were already queued (the one that yielded to come here among them): it is
        // the other half of a cross-worker exchange, whose partner waits for it. Not
        // twice in a row, so the queued threads get every other pick at least.
        if (*runq).len() > queued && !core::mem::take(&mut (*w).promoted) {
            if let Some(t) = (*runq).remove(queued) {
                (*runq).push_front(t);
                (*w).promoted = true;
            }
        }
        let io: *mut crate::io::Driver = &mut (*w).io;
        (*io).poll();
        if (*w).timers.next_deadline().is_some() {
            let now = Instant::now();
            let timers: *mut Timers = &mut (*w).timers;
            (*timers).fire(now);
        }
    }
}

/// The next green thread to run on this worker, if any.
///
/// # Safety
/// `w` is this thread's worker.
#[inline(always)]
unsafe fn pick_next(w: *mut Worker) -> Option<Arc<Task>> {
    // SAFETY: per the contract.
    unsafe {
        let t = pick_any(w)?;
        // Once the runtime shuts down, never-run threads do not run their closures:
        // they are cancelled (their join handles report `Shutdown`). Such a thread
        // still starts, only to drop its closure in its own green context (where a
        // destructor may park) and exit: see `starting_cancelled`.
        if !t.started() && shared_of(w).shutdown.load(Relaxed) {
            t.set_cancelled();
        }
        Some(t)
    }
}

/// Counts a pick, and polls events if it is one that must ([`POLL_EVERY`]) or mail
/// is waiting.
///
/// # Safety
/// `w` is this thread's worker.
#[inline(always)]
unsafe fn count_pick_and_poll(w: *mut Worker) {
    // SAFETY: per the contract.
    unsafe {
        if must_poll(w) || (*w).endpoint.has_mail() {
            poll_events(w);
        }
    }
}

/// Counts a pick; true for the one in every [`POLL_EVERY`] that must poll events.
///
/// # Safety
/// `w` is this thread's worker.
#[inline(always)]
unsafe fn must_poll(w: *mut Worker) -> bool {
    // SAFETY: per the contract.
    unsafe {
        (*w).poll_in -= 1;
        if (*w).poll_in == 0 {
            (*w).poll_in = POLL_EVERY;
            return true;
        }
        false
    }
}

/// `pick_next` without the shutdown rule.
///
/// # Safety
/// As `pick_next`.
#[inline(always)]
unsafe fn pick_any(w: *mut Worker) -> Option<Arc<Task>> {
    // SAFETY: per the contract.
    unsafe {
        count_pick_and_poll(w);
        if let Some(t) = mine(w).next.take() {
            return Some(t);
        }
        // Never-run threads before woken ones (a yield lets new threads start), except
        // every SPAWNQ_EVERY-th pick, so a spawning loop cannot starve woken threads.
        // (The countdown only moves while there may be never-run threads.)
        if (*w).spawnq_maybe {
            (*w).spawnq_in -= 1;
            if (*w).spawnq_in == 0 {
                (*w).spawnq_in = SPAWNQ_EVERY;
            } else if let Some(t) = spawnq_pop(w) {
                return Some(t);
            }
        }
        if let Some(t) = (*w).runq.pop_front() {
            return Some(t);
        }
        if let Some(t) = spawnq_pop(w) {
            return Some(t);
        }
        poll_events(w);
        if let Some(t) = (*w).runq.pop_front() {
            return Some(t);
        }
        spawnq_pop(w)
    }
}

/// Queues a never-run task on this worker's spawn deque.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
unsafe fn spawnq_push(w: *mut Worker, t: Arc<Task>) {
    // SAFETY: per the contract.
    unsafe {
        (*w).spawnq.push(t);
        (*w).spawnq_maybe = true;
    }
}

/// Pops a never-run task from this worker's spawn deque, unless it is known empty.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
unsafe fn spawnq_pop(w: *mut Worker) -> Option<Arc<Task>> {
    // SAFETY: per the contract.
    unsafe {
        if !(*w).spawnq_maybe {
            return None;
        }
        let t = (*w).spawnq.pop();
        if t.is_none() {
            (*w).spawnq_maybe = false;
        }
        t
    }
}

/// Makes `to` (a task, or the scheduler when None) the worker's running context, with
/// the bookkeeping of every switch: a never-run task is adopted, and the monitor sees a
/// switch and a new slice (`running`, `switches`, `preempt_requested`). Returns the
/// fiber to switch (or exit) to.
///
/// # Safety
/// `w` is this thread's worker, about to switch to the returned fiber.
#[inline(always)]
unsafe fn make_current(w: *mut Worker, to: Option<Arc<Task>>) -> RawFiber {
    // SAFETY: per the contract.
    unsafe {
        let target = match &to {
            Some(t) => {
                adopt(w, t);
                t.raw()
            }
            None => (*w).sched,
        };
        mine(w).progress.running.store(to.is_some(), Relaxed);
        install_current(w, to);
        target
    }
}

/// What every switch's [`make_current`] does: a new slice begins, `to` becomes the
/// current thread, the switch is counted.
///
/// # Safety
/// As [`make_current`].
#[inline(always)]
unsafe fn install_current(w: *mut Worker, to: Option<Arc<Task>>) {
    // SAFETY: per the contract.
    unsafe {
        let sh = mine(w);
        if sh.progress.preempt_requested.load(Relaxed) {
            sh.progress.preempt_requested.store(false, Relaxed); // a new slice begins
        }
        // The previous context has left `current` (switch_away_to, exit_current) or is
        // the scheduler: nothing to drop.
        debug_assert!((*w).current.is_none() && !(*w).current_borrowed);
        core::ptr::write(&mut (*w).current, to);
        sh.progress
            .switches
            .store(sh.progress.switches.load(Relaxed) + 1, Relaxed);
    }
}

/// Switches from the running context to `to` (a task, or the scheduler when None).
///
/// # Safety
/// `w` is this thread's worker; the running context has already put itself wherever it
/// must be found again (a queue, a waiter list) or is the scheduler fiber.
#[inline(always)]
unsafe fn switch_to(w: *mut Worker, to: Option<Arc<Task>>) {
    // SAFETY: per the contract.
    unsafe {
        let target = make_current(w, to);
        // Owned: a worker's green threads and its scheduler fiber are switched to by
        // the worker alone (a started thread never moves; a never-run one reaches a
        // thief through the spawn deque or a message, which order its release), so the
        // fiber core may acquire the target without a locked instruction.
        if let Err(e) = target.switch_to_owned() {
            switch_failed(w, target, e);
        }
    }
}

/// A switch the fiber core refused: a broken invariant of the runtime.
#[cold]
#[inline(never)]
unsafe fn switch_failed(w: *mut Worker, target: RawFiber, e: weft_fiber::Error) -> ! {
    // SAFETY: `w` is this thread's worker (the caller's contract).
    let id = unsafe { (*w).id };
    panic!(
        "weft: worker {id} could not switch to fiber {}: {e}",
        target.id()
    )
}

/// Gives up the CPU from a green thread: `requeue` puts it at the back of the run
/// queue (a yield); otherwise it must already be findable by whoever will wake it (a
/// park). Returns when the thread runs again.
///
/// # Safety
/// Called on a green thread; `w` is this thread's worker.
unsafe fn switch_away(w: *mut Worker, requeue: bool) {
    // SAFETY: per the contract.
    unsafe { switch_away_to(w, requeue, None, false) }
}

/// As [`switch_away`], preferring `prefer` (a thread just woken on this worker, that the
/// caller took responsibility for scheduling) as the next thread: it is switched to
/// directly, without a trip through the run queue, unless other work is waiting (then
/// it queues behind that work, so a pair of threads handing off to each other cannot
/// starve the rest) or this pick is one where the worker looks at its mail and timers.
///
/// `keep`: a park in IPC, whose count goes to the worker's `ipc_parked` slot instead of
/// being dropped.
///
/// # Safety
/// As [`switch_away`]; `prefer` is owned by `w`, started, and in no queue.
unsafe fn switch_away_to(w: *mut Worker, requeue: bool, prefer: Option<Arc<Task>>, keep: bool) {
    // SAFETY: per the contract.
    unsafe {
        let me = (*w)
            .current
            .take()
            .expect("switch_away outside a green thread");
        let me_ptr = Arc::as_ptr(&me);
        if core::mem::take(&mut (*w).current_borrowed) {
            // `me` holds no count (the live list's entry does).
            let me = core::mem::ManuallyDrop::new(me);
            if requeue {
                (*w).runq.push_back(Arc::clone(&me));
            }
        } else if requeue {
            (*w).runq.push_back(me); // moved: a yield costs no reference-count traffic
        } else if keep {
            (*w).ipc_parked = Some(me); // (the one there, if any, is dropped)
        } else {
            drop(me); // a waker or the live list keeps the task alive
        }
        let mut next = None;
        if let Some(p) = prefer {
            // Mail, timers and the inbox are looked at here as `pick_any` would (a pair
            // handing off to each other never goes through it): what they make ready
            // goes first, and the preferred thread queues behind it.
            count_pick_and_poll(w);
            if (*w).runq.is_empty()
                && mine(w).next.is_empty()
                && (!(*w).spawnq_maybe || (*w).spawnq.is_empty())
            {
                next = Some(p);
            } else {
                (*w).runq.push_back(p);
            }
        }
        if next.is_none() {
            next = pick_next(w);
        }
        if next.is_none() {
            next = spin_for_mail(w);
        }
        if let Some(n) = &next {
            if Arc::as_ptr(n) == me_ptr {
                // Woken (or requeued) and picked again before we even left.
                (*w).current = next;
                return;
            }
        }
        switch_to(w, next);
    }
}

/// Nothing is ready: before handing the worker to its scheduler fiber (two switches,
/// then a sleep), watch for mail, the inbox and I/O completions for a short while
/// ([`SPIN_BEFORE_SLEEP`](crate::msgbox::SPIN_BEFORE_SLEEP)) from the parking thread
/// itself. A wake-up that arrives meanwhile (the reply of a cross-worker ping-pong,
/// typically) is served at once, and if it is for the parking thread itself, it simply
/// returns: no switch at all. (Fiasco's multiprocessor IPC does the same: processors
/// keep serving incoming requests while they wait for their own.)
///
/// # Safety
/// `w` is this thread's worker.
unsafe fn spin_for_mail(w: *mut Worker) -> Option<Arc<Task>> {
    // SAFETY: per the contract.
    unsafe {
        let timeout = (*w)
            .timers
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()));
        let mut spin = crate::msgbox::Spin::up_to(timeout, (*w).endpoint.spin());
        while spin.go_on() {
            if (*w).endpoint.has_mail() || !mine(w).inbox.is_empty() || (*w).io.has_completions() {
                if let Some(t) = pick_next(w) {
                    return Some(t);
                }
            }
        }
        None
    }
}

/// The unwind payload a green thread's park raises when its runtime shuts down while it
/// is parked: it unwinds the thread's stack (running destructors) and is caught at the
/// thread's base. Do not catch it: it is raised once, and afterwards the thread's parks
/// return at once, so a thread that catches it and goes on waiting spins until it ends.
#[derive(Debug)]
pub struct Shutdown;

/// Parks the calling green thread (until `deadline` if given). Returns false, without
/// parking, if the caller is not a green thread.
#[inline]
pub(crate) fn park_current(deadline: Option<Instant>) -> bool {
    let w = current();
    // SAFETY: a non-null thread word is this thread's worker; a short read.
    if w.is_null() || unsafe { running_task(w) }.is_null() {
        return false;
    }
    park_inner(None, deadline, false);
    true
}

/// Parks the calling green thread, waiting in IPC (until `deadline` if given), handing
/// its worker to `handoff` if given: a thread of this worker that the caller woke and
/// took responsibility for scheduling (see [`switch_away_to`]). If the caller does not
/// park after all (a wake-up was pending), `handoff` is queued and the caller goes on.
///
/// While parked, the thread's running count is kept in the worker's `ipc_parked` slot
/// for an IPC wake-up on this worker to take ([`take_ipc_parked`]); if it resumes
/// otherwise (a timer, a wake-up from another worker, shutdown), it takes the count
/// back itself.
///
/// # Panics
/// Outside a green thread.
#[inline]
pub(crate) fn park_ipc(handoff: Option<Arc<Task>>, deadline: Option<Instant>) {
    park_inner(handoff, deadline, true)
}

#[inline(always)]
fn park_inner(handoff: Option<Arc<Task>>, deadline: Option<Instant>, keep: bool) {
    let w = current();
    // SAFETY: a non-null thread word is this thread's worker; short accesses only. The
    // running task is borrowed through a pointer, not a counted clone (the worker's
    // `current`, then the waker's reference, keep it alive while it runs).
    unsafe {
        let me = running_task(w);
        assert!(!me.is_null(), "park outside a green thread");
        let mut handoff = handoff;
        if (*me).cancelled() {
            if let Some(h) = handoff.take() {
                (*w).runq.push_back(h);
            }
            check_cancelled(&*me);
        }
        preempt::enter(w);
        if (*me).park.park_begin() {
            if let Some(d) = deadline {
                let t = (*w).current.clone().expect("a green thread");
                (*w).timers.add(d, t);
            }
            switch_away_to(w, false, handoff, keep);
            let w = current();
            let me = running_task(w);
            (*me).park.park_end();
            if deadline.is_some() {
                (*w).timers.cancel(&*me);
            }
            if keep {
                // Not woken through the slot: our count comes back (`current` holds
                // the one we run with).
                drop(take_ipc_parked(w, me));
            }
            preempt::leave(w);
            check_cancelled(&*me);
        } else {
            if let Some(h) = handoff {
                (*w).runq.push_back(h);
            }
            preempt::leave(w);
        }
    }
}

/// IPC's direct hand-off between two threads of this worker (`ipc::hand_off`, the end
/// of `call`'s and `reply_and_wait`'s direct paths): the running thread, which has just
/// given `target` its message (`target` is parked in IPC here, the last to park: its
/// running count is in the `ipc_parked` slot), parks in IPC without a deadline and the
/// worker switches straight to `target`. It is `WorkerEnv::wake` + [`park_ipc`] +
/// [`switch_away_to`] for the one case a call/reply ping-pong lives in, with their
/// general cases checked up front instead of along the way. Returns false, having
/// changed nothing, unless: `target`'s count is in the slot and it is parked; the
/// running thread has no wake-up pending and is not cancelled; no mail waits, and this
/// pick is not one that must look at the inbox, timers and I/O first while they hold
/// something ([`nothing_to_poll`]); and no other thread is ready to run (so a pair
/// handing off to each other cannot starve the rest: they then take the general path,
/// which queues the partner behind the others). The caller then takes that path.
///
/// Returns true once the running thread has been resumed (as after `park_ipc`: by
/// its IPC waker, shutdown, an abort or a remote answer; the caller looks at its
/// operation's state to know which).
///
/// # Safety
/// `w` is this thread's worker, the caller a green thread at runtime depth
/// (`preempt::enter`), which it is again on return; `target` a task of this worker.
#[inline(always)]
pub(crate) unsafe fn ipc_direct_switch(w: *mut Worker, target: *const Task) -> bool {
    // SAFETY: per the contract; the slot's count keeps `target` alive while we look.
    unsafe {
        let ok = (*w)
            .ipc_parked
            .as_ref()
            .is_some_and(|x| Arc::as_ptr(x) == target)
            && (*target).park.is_parked()
            && !(*w).current_borrowed
            && ((*w).poll_in > 1 || nothing_to_poll(w))
            && (*w).runq.is_empty()
            && mine(w).next.is_empty()
            && (!(*w).spawnq_maybe || (*w).spawnq.is_empty())
            && !(*w).endpoint.has_mail();
        if !ok {
            return false;
        }
        // What the switch will read, loaded now (changing nothing): the switch's clock
        // read then does not wait for these loads (`RawFiber::prepare_ready_jump`).
        // `target` is parked here, so it has its fiber; nothing switches before.
        let switch = (*target).raw().prepare_ready_jump();
        let me = (*w).current.take().expect("a green thread");
        if !me.park.is_empty() || me.cancelled() {
            (*w).current = Some(me);
            return false;
        }
        // This is a pick (see `count_pick_and_poll`); the one that must poll found
        // nothing to poll.
        must_poll(w);
        me.park.park_begin();
        let me_ptr = Arc::as_ptr(&me);
        let next = (*w).ipc_parked.replace(me).expect("checked");
        next.park.unpark();
        // Inlined into both sides of a ping-pong, each switching from its own call site
        // and going on inline: the jump-ended switch, entered without a call, is the
        // one predicted there (see `RawFiber::switch_to_owned_jump`). Its checks pass
        // by construction: `target` is a parked thread of this worker (suspended, not
        // the running one), and the running thread is in its IPC call, not in a switch.
        #[cfg(test)]
        {
            (*w).direct_switches += 1;
        }
        make_current_parked(w, next);
        switch.switch();
        // Resumed (see `park_inner`'s second half, which this mirrors), on the same
        // worker: a started thread never moves (invariant 2 above).
        (*me_ptr).park.park_end();
        // Not woken through the slot: our count comes back (`current` holds the one we
        // run with).
        drop(take_ipc_parked(w, me_ptr));
        true
    }
}

/// Whether polling events now would find nothing: no mail, nothing in the inbox, no
/// timer due, the I/O ring idle. Then the pick that must poll ([`POLL_EVERY`]) may be a
/// direct IPC switch too; otherwise that pick goes through the scheduler, whose poll
/// handles what is there. (Out of line: asked once every [`POLL_EVERY`] switches. A
/// ping-pong that fell back to the scheduler's path at each of those picks paid ~3.5 ns
/// a round trip for it; so did one beside a timer not yet due, a sleeping thread's or
/// a timeout's, ~2.3 ns, before the timer test asked whether it was due, at the cost
/// of one clock read here.) When the answer is yes, this pick counts as the endpoint's
/// empty poll (`Endpoint::poll_empty`), so the doorbell bits of workers that have
/// gone quiet are cleared as a real poll would clear them.
///
/// # Safety
/// `w` is this thread's worker.
#[cold]
#[inline(never)]
unsafe fn nothing_to_poll(w: *mut Worker) -> bool {
    // SAFETY: per the contract.
    unsafe {
        !(*w).endpoint.has_mail()
            && mine(w).inbox.is_empty()
            && (*w)
                .timers
                .next_deadline()
                .is_none_or(|d| d > Instant::now())
            && (*w).io.is_idle()
            && !(*w).endpoint.poll_empty()
    }
}

/// [`make_current`] for `to`, a started thread parked on this worker, switched to
/// from a green thread (so the worker's `running` flag is set already): IPC's direct
/// switch, which has its fiber already.
///
/// # Safety
/// As [`make_current`].
#[inline(always)]
unsafe fn make_current_parked(w: *mut Worker, to: Arc<Task>) {
    // SAFETY: per the contract.
    unsafe {
        debug_assert!(to.started() && mine(w).progress.running.load(Relaxed));
        install_current(w, Some(to));
    }
}

/// The count the IPC-parked thread `t` left in worker `w`'s slot (see [`park_ipc`]), if
/// it is the one there.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
pub(crate) unsafe fn take_ipc_parked(w: *mut Worker, t: *const Task) -> Option<Arc<Task>> {
    // SAFETY: per the contract; a short field access.
    unsafe {
        if (*w)
            .ipc_parked
            .as_ref()
            .is_some_and(|x| Arc::as_ptr(x) == t)
        {
            (*w).ipc_parked.take()
        } else {
            None
        }
    }
}

/// Queues `task`, a thread of this worker whose park word the caller already flipped
/// (`ParkState::unpark` returned true).
pub(crate) fn push_ready(task: Arc<Task>) {
    let w = current();
    debug_assert!(!w.is_null());
    // SAFETY: called on the task's owner worker.
    unsafe { (*w).runq.push_back(task) };
}

/// The green thread running on worker `w`, or null.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
pub(crate) unsafe fn running_task(w: *mut Worker) -> *const Task {
    // SAFETY: per the contract.
    unsafe { (*w).current.as_ref().map_or(core::ptr::null(), Arc::as_ptr) }
}

/// Whether `t` is the green thread running on worker `w`.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
pub(crate) unsafe fn is_running(w: *mut Worker, t: *const Task) -> bool {
    // SAFETY: per the contract.
    unsafe { (*w).current.as_ref().is_some_and(|c| Arc::as_ptr(c) == t) }
}

/// The index of worker `w`.
///
/// # Safety
/// `w` is this thread's worker.
#[inline]
pub(crate) unsafe fn id_of(w: *mut Worker) -> usize {
    // SAFETY: per the contract.
    unsafe { (*w).id }
}

/// Whether `t` belongs to the runtime of worker `w`.
///
/// # Safety
/// `w` is this thread's worker.
pub(crate) unsafe fn same_runtime(w: *mut Worker, t: &Task) -> bool {
    // SAFETY: per the contract.
    unsafe { core::ptr::eq(Arc::as_ptr(&(*w).shared), t.shared()) }
}

/// Worker `w`'s cache of counts on IPC identities.
///
/// # Safety
/// `w` is this thread's worker; the reference is the only one alive.
#[inline(always)]
pub(crate) unsafe fn ipc_counts<'a>(w: *mut Worker) -> &'a mut crate::ipc::CountCache {
    // SAFETY: per the contract.
    unsafe { &mut (*w).ipc_counts }
}

/// Posts an IPC request from worker `w` to worker `to`.
///
/// # Safety
/// `w` is this thread's worker.
pub(crate) unsafe fn post_ipc(w: *mut Worker, to: usize, req: crate::ipc::protocol::Req) {
    // SAFETY: per the contract.
    unsafe { send_to_worker(w, to, Mail::Ipc(req)) }
}

/// Raises the shutdown unwind once in a cancelled thread (not while it is already
/// unwinding from it: destructors that park then just return).
#[inline]
pub(crate) fn check_cancelled(me: &Task) {
    if me.cancelled() {
        unwind_cancelled(me);
    }
}

#[cold]
#[inline(never)]
fn unwind_cancelled(me: &Task) {
    if !me.replace_unwinding() {
        std::panic::resume_unwind(Box::new(Shutdown));
    }
}

/// Runs `f`, a system call that may sleep (an `fdatasync`, say), on the worker itself
/// and tells the runtime so: the worker's other green threads wait meanwhile, as they
/// would for any long call, but the monitor does not wake every millisecond to watch
/// a worker that cannot be preempted anyway (it ticks as for an idle worker; the
/// thread starts a fresh slice when the call returns). Never-run green threads queued
/// on this worker are offered to a sleeping worker first (the hand-off the monitor
/// would make after a tick), and the monitor keeps ticking for the hand-off while
/// some remain. Outside a green thread it just runs `f`.
pub fn in_blocking_call<R>(f: impl FnOnce() -> R) -> R {
    let w = current();
    // SAFETY: a non-null thread word is this thread's live worker.
    if w.is_null() || unsafe { (*w).current.is_none() } {
        return f();
    }
    // SAFETY: as above; the references do not outlive the call, which runs on it.
    let (sh, shared, id) = unsafe { (mine(w), shared_of(w), (*w).id) };
    if !(sh.stealer.is_empty() && sh.next.is_empty()) {
        wake_an_idle_worker(shared, id);
    }
    struct Back<'a>(&'a Progress);
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            // Only this worker writes its switch counter: the call counts as a switch,
            // so the thread's slice starts again now.
            let p = self.0;
            p.switches.store(p.switches.load(Relaxed) + 1, Relaxed);
            p.blocked.store(false, Relaxed);
        }
    }
    // SAFETY: the worker's own state, touched only on its thread (this one).
    unsafe { (*w).rests += 1 };
    sh.progress.blocked.store(true, Relaxed);
    let _back = Back(&sh.progress);
    f()
}

/// How many times the calling green thread's worker has gone to wait for work or into
/// [`in_blocking_call`] (`None` off a worker): the places where a worker sleeps by the
/// runtime's choice. If this count did not move between two readings of the worker's
/// voluntary context switches (`getrusage(RUSAGE_THREAD)`), any sleep counted there
/// happened in the caller's own system calls (how the log writer tells a write that
/// slept with one `getrusage` a write).
#[doc(hidden)]
pub fn worker_rests() -> Option<u64> {
    let w = current();
    // SAFETY: a non-null thread word is this thread's live worker; one read.
    (!w.is_null()).then(|| unsafe { (*w).rests })
}

/// Lets the other ready green threads of this worker run; returns at once if there are
/// none (or outside the runtime, yields the OS thread).
pub fn yield_now() {
    let w = current();
    // SAFETY: as in park_current.
    unsafe {
        if w.is_null() || (*w).current.is_none() {
            std::thread::yield_now();
            return;
        }
        if let Some(me) = &(*w).current {
            check_cancelled(me);
        }
        preempt::enter(w);
        // A yield ends the slice (read first: the line is not dirtied when the flag is
        // clear, which it almost always is).
        let sh = mine(w);
        if sh.progress.preempt_requested.load(Relaxed) {
            sh.progress.preempt_requested.store(false, Relaxed);
        }
        switch_away(w, true);
        preempt::leave(current());
    }
}

/// A runtime call's preemption point: if the monitor has asked the running green
/// thread to yield (it held its worker for a slice, and the signal could not switch it
/// out where it was), yields now. Called by the entry points that do not park on their
/// fast path: lock and channel operations, I/O, spawning.
#[inline]
pub fn preemption_point() {
    let w = current();
    // SAFETY: a non-null thread word is this thread's worker.
    unsafe {
        if !w.is_null()
            && (*w).depth.get() == 0
            && mine(w).progress.preempt_requested.load(Relaxed)
            && (*w).current.is_some()
        {
            yield_now();
        }
    }
}

/// Whether the green thread starting now was cancelled before it ran (runtime
/// shutdown): it must drop its closure and exit. Parks during that drop return without
/// a second shutdown unwind.
pub(crate) fn starting_cancelled() -> bool {
    let w = current();
    // SAFETY: called by a green thread on its worker.
    unsafe {
        let me = (*w).current.as_ref().expect("a green thread is running");
        let c = me.cancelled();
        if c {
            me.replace_unwinding();
        }
        c
    }
}

/// Called first thing by a new green thread, with `node` in its base frame: the thread
/// joins its worker's live list; it starts at runtime depth 1 (it was switched to by
/// runtime code) and runs user code at depth 0.
///
/// # Safety
/// `node` stays where it is, unmoved, until the thread passes it to [`exit_current`].
pub(crate) unsafe fn task_started(node: &LiveNode) {
    let w = current();
    // SAFETY: a green thread runs on its worker, which owns it now (`adopt`); the live
    // list is this worker's alone; `node` outlives its time on the list (contract).
    unsafe {
        // The count that made the task current (its queue entry's) becomes the live
        // list's; `current` goes on without one until the thread first switches away.
        let me = (*w).current.as_ref().expect("a green thread is running");
        debug_assert!(!(*w).current_borrowed);
        node.task.set(Arc::as_ptr(me));
        (*w).current_borrowed = true;
        node.next.set((*w).live_head);
        if !(*w).live_head.is_null() {
            (*(*w).live_head).prev.set(node);
        }
        (*w).live_head = node;
        (*w).live += 1;
        preempt::leave(w);
    }
}

/// Publishes the running green thread's outcome to its join handle.
pub(crate) fn complete_current<T>(out: crate::task::Outcome<T>) {
    let w = current();
    // SAFETY: called on a green thread; the task outlives this call (the live list).
    let me: *const Task = unsafe {
        Arc::as_ptr(
            (*w).current
                .as_ref()
                .expect("complete_current outside a green thread"),
        )
    };
    // SAFETY: as above.
    unsafe { (*me).join.complete(out) };
}

/// Ends the running green thread: frees it as it leaves and runs the next one.
///
/// # Safety
/// Called at the very end of a task's fiber, with nothing left to drop on its stack;
/// `node` is the entry it passed to [`task_started`].
pub(crate) unsafe fn exit_current(node: &LiveNode) -> ! {
    let w = current();
    // SAFETY: per the contract.
    unsafe {
        preempt::enter(w);
        let me = (*w).current.take().expect("exit outside a green thread");
        if core::mem::take(&mut (*w).current_borrowed) {
            core::mem::forget(me); // no count of its own
        } else {
            drop(me);
        }
        unlink(w, node);
        // Owned: see `switch_to`.
        make_current(w, pick_next(w)).exit_to_owned()
    }
}

/// The scheduler fiber's loop: runs ready threads, steals, sleeps; returns at shutdown
/// once no green thread of this worker is left.
///
/// # Safety
/// `w` is this thread's worker, and the caller is its scheduler fiber.
pub(crate) unsafe fn sched_loop(w: *mut Worker) {
    // SAFETY: per the contract.
    unsafe {
        // The scheduler is runtime code throughout: never preempted.
        preempt::enter(w);
        loop {
            if let Some(t) = pick_next(w) {
                switch_to(w, Some(t));
                continue;
            }
            if shared_of(w).shutdown.load(Acquire) {
                if shutdown_step(w) {
                    mine(w).ended.store(true, Release);
                    // Mail that raced with the flag: spawns are cancelled, wake-ups
                    // dropped (their threads are gone).
                    (*w).endpoint.poll(|_, m| drop(m));
                    while mine(w).inbox.pop().is_some() {}
                    preempt::leave(w);
                    return;
                }
                continue;
            }
            if let Some(t) = steal(w) {
                switch_to(w, Some(t));
                continue;
            }
            idle(w);
        }
    }
}

/// Takes a never-run green thread from another worker's spawn deque.
unsafe fn steal(w: *mut Worker) -> Option<Arc<Task>> {
    // SAFETY: `w` is this thread's worker.
    unsafe {
        let shared = shared_of(w);
        let n = shared.workers.len();
        for i in 1..n {
            let o = ((*w).id + i) % n;
            if let Some(t) = shared.workers[o].next.take() {
                return Some(t);
            }
            loop {
                match shared.workers[o].stealer.steal() {
                    Steal::Success(t) => return Some(t),
                    Steal::Empty => break,
                    Steal::Retry => continue,
                }
            }
        }
        None
    }
}

/// Nothing to run: waits for mail, a timer, or I/O.
unsafe fn idle(w: *mut Worker) {
    // SAFETY: `w` is this thread's worker.
    unsafe {
        if !mine(w).inbox.is_empty() {
            return;
        }
        let timeout = (*w)
            .timers
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()));
        if timeout == Some(std::time::Duration::ZERO) {
            return;
        }
        // Submit first: what completes then writes the eventfd the sleep waits on, and
        // the spin before it watches the completion ring.
        let io: *const crate::io::Driver = &(*w).io;
        (*io).submit();
        (*w).rests += 1;
        (*w).endpoint.wait_or(timeout, || (*io).has_completions());
    }
}

/// One round of shutdown: cancels every green thread of this worker (parked ones are
/// resumed to unwind), drops never-run ones. True when none is left.
unsafe fn shutdown_step(w: *mut Worker) -> bool {
    // SAFETY: `w` is this thread's worker.
    unsafe {
        // Never-run threads that arrived since the last pick: run them (they only
        // drop their closures and exit, `starting_cancelled`).
        while let Some(t) = spawnq_pop(w) {
            t.set_cancelled();
            (*w).runq.push_back(t);
        }
        if let Some(t) = mine(w).next.take() {
            t.set_cancelled();
            (*w).runq.push_back(t);
        }
        (*w).timers.clear();
        // The entries live on the threads' stacks, mapped while they are suspended.
        let mut n = (*w).live_head;
        while !n.is_null() {
            let p = (*n).task.get();
            (*p).set_cancelled();
            if (*p).park.take_parked() {
                Arc::increment_strong_count(p);
                (*w).runq.push_back(Arc::from_raw(p));
            }
            n = (*n).next.get();
        }
        if !(*w).runq.is_empty() {
            return false;
        }
        if (*w).live == 0 {
            return true;
        }
        idle(w);
        false
    }
}

// A message-box slot holds one `Mail` and its sequence word in one 64-byte cache line
// (`msgbox/spsc.rs`): keep it within 56 bytes. An IPC request carries a copy of the
// message's words (`ipc::protocol::SendCopy`), which spares the receiving worker a
// second, dependent cache miss per request.
const _: () = assert!(core::mem::size_of::<Mail>() <= 56);

#[cfg(test)]
mod tests {
    use crate::ipc::{self, Message, Timeout};
    use crate::{spawn_on, JoinHandle, Runtime};

    /// A server on worker 0 replying word + 1, until the word `u64::MAX`.
    fn adder_on_0() -> JoinHandle<()> {
        spawn_on(0, || {
            let (mut c, mut m) = ipc::receive(None, Timeout::Never).unwrap();
            while m.words[0] != u64::MAX {
                let r = Message::word(m.words[0] + 1);
                (c, m) = ipc::reply_and_wait(&c, r, Timeout::Never).unwrap();
            }
            ipc::send(&c, Message::word(0), Timeout::Zero).unwrap();
        })
    }

    /// A worker that has received mail from another worker, then runs only a same-worker
    /// IPC ping-pong (direct switches, which skip the scheduler's poll while there is
    /// nothing to poll), still clears the doorbell bit of the now quiet sender: else
    /// every switch kept looking at that sender's box (~6 ns a round trip).
    #[test]
    fn a_direct_ping_pong_clears_the_doorbell_bits_of_quiet_workers() {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let bits = rt.block_on(|| {
            spawn_on(0, || {
                // A thread on worker 1 whose end wakes its joiner here, parked by then:
                // mail from 1. It ends once this thread has been switched out (after
                // its spawn, its next step is the join).
                let me = weft_fiber::current_id().unwrap();
                let switched_out = move || {
                    weft_fiber::introspect::read(std::process::id() as i32)
                        .ok()
                        .and_then(|s| s.fibers.into_iter().find(|f| f.id == me))
                        .map(|f| f.deactivations)
                };
                let before = loop {
                    if let Some(d) = switched_out() {
                        break d;
                    }
                };
                spawn_on(1, move || {
                    let t0 = std::time::Instant::now();
                    while switched_out().is_none_or(|d| d == before) {
                        assert!(t0.elapsed().as_secs() < 60, "the joiner never parked");
                        crate::sleep(std::time::Duration::from_millis(1));
                    }
                })
                .join()
                .unwrap();
                let w = super::current();
                // SAFETY: our worker; a short read of its endpoint.
                let before = unsafe { (*w).endpoint.class_bits() };
                let server = adder_on_0();
                let tid = server.tid();
                // Two picks a round trip, a poll every POLL_EVERY picks, a bit cleared
                // after STICKY_POLLS empty polls: 20,000 round trips are plenty.
                for i in 0..20_000u64 {
                    let r = ipc::call(&tid, Message::word(i), Timeout::Never).unwrap();
                    assert_eq!(r.words[0], i + 1);
                }
                // SAFETY: as above.
                let after = unsafe { (*w).endpoint.class_bits() };
                ipc::call(&tid, Message::word(u64::MAX), Timeout::Never).unwrap();
                server.join().unwrap();
                (before, after)
            })
            .join()
            .unwrap()
        });
        assert_ne!(bits.0, 0, "the join's wake-up came as mail from worker 1");
        assert_eq!(bits.1, 0, "the quiet sender's bit stayed set");
    }

    /// A timer that is not due (a thread's timed receive, far off) does not send the
    /// polling picks of a same-worker ping-pong through the scheduler: every switch of
    /// the ping-pong is a direct one. A due timer still fires beside it
    /// (`tests/ipc.rs`, `timers_fire_beside_a_local_ping_pong`).
    #[test]
    fn a_timer_not_yet_due_leaves_every_ping_pong_switch_direct() {
        let rt = Runtime::builder().workers(1).build().unwrap();
        let (made, waiter) = rt.block_on(|| {
            spawn_on(0, || {
                // Parked with a timer 60 s away (cancelled at the end).
                let waiter = spawn_on(0, || {
                    ipc::receive(None, Timeout::After(std::time::Duration::from_secs(60)))
                        .unwrap_err()
                        .kind()
                });
                crate::yield_now();
                let server = adder_on_0();
                let tid = server.tid();
                ipc::call(&tid, Message::word(0), Timeout::Never).unwrap();
                let w = super::current();
                // SAFETY: our worker; short reads of its counter.
                let before = unsafe { (*w).direct_switches };
                const N: u64 = 10_000;
                for i in 0..N {
                    let r = ipc::call(&tid, Message::word(i), Timeout::Never).unwrap();
                    assert_eq!(r.words[0], i + 1);
                }
                // SAFETY: as above.
                let made = unsafe { (*w).direct_switches } - before;
                ipc::call(&tid, Message::word(u64::MAX), Timeout::Never).unwrap();
                server.join().unwrap();
                ipc::cancel(&waiter.tid());
                (made, waiter.join().unwrap())
            })
            .join()
            .unwrap()
        });
        assert_eq!(waiter, ipc::ErrorKind::Cancelled);
        // Two switches a round trip, all direct (~1 in 30 went through the scheduler).
        assert_eq!(made, 2 * 10_000, "some switches took the scheduler's path");
    }
}
