//! Synchronous IPC between green threads, L4-style: `send`, `receive`, `call`,
//! `reply_and_wait`, with timeouts of zero, finite and infinite, and cancellation.
//!
//! ```
//! use weft_runtime::{ipc::{self, Message, Timeout}, Runtime};
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let sum = rt.block_on(|| {
//!     // A server that adds one to every request, forever.
//!     let server = weft_runtime::spawn(|| {
//!         let (mut client, mut req) = ipc::receive(None, Timeout::Never).unwrap();
//!         loop {
//!             let reply = Message::word(req.words[0] + 1);
//!             match ipc::reply_and_wait(&client, reply, Timeout::Never) {
//!                 Ok((c, m)) => (client, req) = (c, m),
//!                 Err(_) => return,
//!             }
//!         }
//!     });
//!     let tid = server.tid();
//!     let mut n = 0;
//!     for _ in 0..10 {
//!         n = ipc::call(&tid, Message::word(n), Timeout::Never).unwrap().words[0];
//!     }
//!     ipc::cancel(&tid); // ends the server's wait: its reply_and_wait fails
//!     server.join().unwrap();
//!     n
//! });
//! assert_eq!(sum, 10);
//! ```
//!
//! ## Semantics
//!
//! - **Rendezvous.** A message moves only when both sides are there: `send` waits
//!   until the receiver is in a `receive` that accepts this sender (from anyone, or from
//!   this thread), or the timeout passes. Nothing is buffered.
//! - **Identity.** Every green thread has a [`Tid`] ([`me`], [`JoinHandle::tid`],
//!   [`Tid::from_id`]); its id is the fiber id `weft ps` shows. `Runtime::block_on`'s
//!   closure runs as a green thread, so the program's main flow has one too. Plain OS
//!   threads have none: IPC from them fails with [`ErrorKind::NotGreenThread`].
//! - **Timeouts** ([`Timeout`]): `Zero` fails at once unless the partner is ready
//!   (across workers "at once" costs one message round trip to ask), `After(d)` fails
//!   with `TimedOut` after `d`, `Never` waits. For `call`, `After` is a deadline for the
//!   whole call and `Zero` applies to the send: "fail unless the server is waiting
//!   now; then wait for its reply".
//! - **Atomic send-to-receive.** A `call` is receiving from its server from the moment
//!   its message is delivered, before the server can run, so a server's reply with
//!   timeout zero (which [`reply_and_wait`] uses) always finds its caller waiting, on
//!   one worker or across workers (as in Fiasco's multiprocessor IPC).
//! - **Errors** ([`IpcError`]): timed out, cancelled ([`cancel`]), partner dead (a
//!   sender or caller waiting on a thread that exits is woken with it), not a green
//!   thread, invalid partner (itself, or another runtime's). The error says at which
//!   stage it failed; when the send did not happen, the message is given back
//!   ([`IpcError::into_message`]): nothing is lost.
//! - **Same semantics on one worker and across workers.** On one worker a call and a
//!   reply switch straight to the partner (no run queue) when nothing else waits to
//!   run; across workers the requests travel through the message boxes. The protocol
//!   and its proof are in `protocol.rs` and `tests/loom_ipc.rs`.

pub(crate) mod protocol;

pub use protocol::{Message, Stage};

use crate::task::{JoinHandle, Task};
use crate::worker::{self, Worker};
use core::mem::ManuallyDrop;
use protocol::{Env, Fail, Host, Ipc, Next, Req, Then, NO_WORKER};
use std::collections::HashMap;
use std::sync::atomic::Ordering::*;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// A green thread's IPC identity: cheap to clone, comparable, sendable anywhere. It
/// stays valid after the thread exits (IPC to it then fails with `PartnerDead`).
///
/// It is a count on the thread's identity. Dropped on a green thread of the same
/// worker while the thread lives, that count is not given back but banked in the
/// identity until the thread needs one on itself (`recycle`): a server drops the `Tid`
/// of the client it has just answered, and that client's next call takes the count back
/// instead of counting again, so the server loop's steady state takes no locked
/// instruction for the `Tid`s it receives. The thread's exit gives banked counts back.
#[derive(Clone)]
pub struct Tid(ManuallyDrop<Arc<Ipc>>);

impl Drop for Tid {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is not used again.
        recycle(unsafe { ManuallyDrop::take(&mut self.0) });
    }
}

impl Tid {
    /// A `Tid` holding the count `x`.
    #[inline(always)]
    fn of(x: Arc<Ipc>) -> Tid {
        Tid(ManuallyDrop::new(x))
    }

    /// The thread's id (its fiber id, as `weft ps` shows it).
    pub fn id(&self) -> u64 {
        self.0.id()
    }

    /// The thread with this id, if it has an IPC identity: identities are made on first
    /// use ([`me`], [`JoinHandle::tid`], any IPC) and live as long as their thread or
    /// any `Tid` of them. A thread nobody has asked a `Tid` for is not found yet.
    pub fn from_id(id: u64) -> Option<Tid> {
        registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .and_then(Weak::upgrade)
            .map(Tid::of)
    }

    /// Whether the thread has exited.
    pub fn is_dead(&self) -> bool {
        self.0.is_dead()
    }
}

impl PartialEq for Tid {
    fn eq(&self, o: &Tid) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for Tid {}
impl std::hash::Hash for Tid {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.id().hash(h)
    }
}
impl std::fmt::Debug for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tid({})", self.id())
    }
}

/// How long an operation may wait for its partner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Fail at once unless the partner is ready.
    Zero,
    /// Fail after this long.
    After(Duration),
    /// Wait as long as it takes.
    Never,
}

impl From<Duration> for Timeout {
    fn from(d: Duration) -> Timeout {
        if d.is_zero() {
            Timeout::Zero
        } else {
            Timeout::After(d)
        }
    }
}

impl From<Option<Duration>> for Timeout {
    /// `None` waits forever.
    fn from(d: Option<Duration>) -> Timeout {
        d.map_or(Timeout::Never, Timeout::from)
    }
}

/// What went wrong (see [`IpcError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The timeout expired; with timeout zero, the partner was not ready.
    TimedOut,
    /// Another thread cancelled the operation ([`cancel`]).
    Cancelled,
    /// The partner has exited (before, or while we waited).
    PartnerDead,
    /// The caller is not a green thread.
    NotGreenThread,
    /// The partner cannot be used: the caller itself, or a thread of another runtime.
    InvalidPartner,
}

/// The error of an IPC operation: what went wrong, at which stage, with whom, and the
/// message back if it was not sent.
pub struct IpcError {
    kind: ErrorKind,
    stage: Stage,
    partner: Option<u64>,
    unsent: Option<Message>,
}

impl IpcError {
    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// At which stage: `Send` (the message was not delivered, and is given back by
    /// [`into_message`](Self::into_message)) or `Receive`.
    pub fn stage(&self) -> Stage {
        self.stage
    }
    /// The partner's id, when there was one.
    pub fn partner(&self) -> Option<u64> {
        self.partner
    }
    /// The message that was not sent (a failure at the send stage), if any.
    pub fn into_message(self) -> Option<Message> {
        self.unsent
    }
}

impl std::fmt::Debug for IpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcError")
            .field("kind", &self.kind)
            .field("stage", &self.stage)
            .field("partner", &self.partner)
            .field("unsent", &self.unsent.is_some())
            .finish()
    }
}

impl std::fmt::Display for IpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.partner {
            Some(p) => format!(" thread {p}"),
            None => String::new(),
        };
        let what = match self.stage {
            Stage::Send => format!("IPC send to{who}"),
            Stage::Receive if self.partner.is_some() => format!("IPC receive from{who}"),
            Stage::Receive => "IPC receive".to_string(),
        };
        match self.kind {
            ErrorKind::TimedOut => match self.stage {
                Stage::Send => write!(
                    f,
                    "{what} timed out: the thread was not waiting to receive from this \
                     sender (the message is given back by IpcError::into_message)"
                ),
                Stage::Receive => write!(f, "{what} timed out: no message arrived"),
            },
            ErrorKind::Cancelled => write!(f, "{what} was cancelled by ipc::cancel"),
            ErrorKind::PartnerDead => write!(f, "{what} failed: the thread has exited"),
            ErrorKind::NotGreenThread => write!(
                f,
                "IPC needs a green thread: call it from a thread spawned on a weft runtime \
                 or from Runtime::block_on (plain OS threads have no IPC identity)"
            ),
            ErrorKind::InvalidPartner => write!(
                f,
                "{what}: invalid partner (a thread cannot send to itself or receive from \
                 itself, and both threads must belong to the same runtime)"
            ),
        }
    }
}

impl std::error::Error for IpcError {}

fn error(kind: ErrorKind, stage: Stage, partner: Option<u64>, unsent: Option<Message>) -> IpcError {
    IpcError {
        kind,
        stage,
        partner,
        unsent,
    }
}

// ---- Identities ----

fn registry() -> &'static Mutex<HashMap<u64, Weak<Ipc>>> {
    static R: OnceLock<Mutex<HashMap<u64, Weak<Ipc>>>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn host_worker(p: *const ()) -> usize {
    // SAFETY: `p` is the task the identity holds a count on.
    let o = unsafe { &*(p as *const Task) }.owner.load(Acquire);
    if o == crate::task::NO_OWNER {
        NO_WORKER
    } else {
        o
    }
}

fn host_release(p: *const (), id: u64) {
    {
        let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
        if r.get(&id).is_some_and(|w| w.strong_count() == 0) {
            r.remove(&id);
        }
    }
    // SAFETY: the count taken in `ipc_of`.
    drop(unsafe { Arc::from_raw(p as *const Task) });
}

/// `Task::ipc` once the thread has exited (or will never run): an identity asked for
/// after that is made dead from the start. Never dereferenced.
const EXITED: *mut Ipc = core::ptr::dangling_mut();

/// The IPC identity of `task`, made on first use.
fn ipc_of(task: &Arc<Task>) -> Arc<Ipc> {
    let p = task.ipc.load(Acquire);
    if p == EXITED {
        let ipc = new_ipc(task);
        ipc.mark_dead();
        return ipc;
    }
    if !p.is_null() {
        // SAFETY: a non-null pointer is the task's count on its identity, alive while
        // the task is (it is taken only by the thread's own exit, which also leaves
        // the identity alive through any Tid the caller could have).
        return unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
    }
    let ipc = new_ipc(task);
    let id = ipc.id();
    let raw = Arc::into_raw(ipc.clone()).cast_mut();
    match task
        .ipc
        .compare_exchange(core::ptr::null_mut(), raw, SeqCst, SeqCst)
    {
        Ok(_) => {
            if task.join_done_seqcst() {
                // The thread completed, and its exit may have looked for an identity
                // before this one went in (see `exited`): it is dead, and the task's
                // count on it is taken back (else task and identity would hold each
                // other forever). If the exit took it first, the exit gives it back.
                ipc.mark_dead();
                if task.ipc.swap(EXITED, SeqCst) == raw {
                    // SAFETY: the count published above, taken back out of the task.
                    drop(unsafe { Arc::from_raw(raw) });
                }
            }
            registry()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, Arc::downgrade(&ipc));
            ipc
        }
        Err(winner) => {
            // SAFETY: ours was never published.
            drop(unsafe { Arc::from_raw(raw) });
            if winner == EXITED {
                ipc.mark_dead();
                return ipc;
            }
            // SAFETY: as in the fast path.
            unsafe {
                Arc::increment_strong_count(winner);
                Arc::from_raw(winner)
            }
        }
    }
}

fn new_ipc(task: &Arc<Task>) -> Arc<Ipc> {
    Arc::new(Ipc::new(
        task.raw().id(),
        Host {
            ptr: Arc::into_raw(task.clone()).cast(),
            worker: host_worker,
            release: host_release,
            realm: task.shared() as *const worker::Shared as usize,
        },
    ))
}

/// The calling green thread's identity, or None outside a green thread.
pub fn try_me() -> Option<Tid> {
    worker::current_task().map(|t| Tid::of(ipc_of(&t)))
}

/// The calling green thread's identity.
///
/// # Panics
/// Outside a green thread (see [`try_me`]).
pub fn me() -> Tid {
    try_me().expect(
        "ipc::me called outside a green thread: IPC identities belong to green threads \
         (spawned on a weft runtime, or Runtime::block_on's closure)",
    )
}

impl<T> JoinHandle<T> {
    /// The thread's IPC identity (usable before the thread has started: IPC to it
    /// waits for it to start, within the timeout).
    pub fn tid(&self) -> Tid {
        Tid::of(ipc_of(&self.task))
    }
}

/// Called by a green thread as it ends: its IPC identity dies (see `protocol::exit`).
pub(crate) fn exited() {
    let w = worker::current();
    // SAFETY: called by a green thread on its worker; the task is alive while it runs.
    let task = unsafe { &*worker::running_task(w) };
    // A thread that never used IPC pays one load here (spawn + join is the common
    // case). An identity made for it after this load finds its join complete (which
    // happened before: `complete_current` runs first) and is made dead by `ipc_of`:
    // the join's swap, this load, `ipc_of`'s CAS and its load of the join state are
    // SeqCst, so one of the two sides sees the other.
    let p = task.ipc.load(SeqCst);
    if p.is_null() {
        return;
    }
    let p = task.ipc.swap(EXITED, SeqCst);
    if p.is_null() || p == EXITED {
        return; // `ipc_of` took it back meanwhile
    }
    // SAFETY: the task's count on its identity, taken out of the task just now.
    let ipc = unsafe { Arc::from_raw(p) };
    // SAFETY: we run on our worker; protocol steps run at runtime depth.
    unsafe {
        worker::preempt::enter(w);
        protocol::exit(&mut WorkerEnv::new(w, false), &ipc);
        // Now dead: no count on it is kept here from now on.
        worker::ipc_counts(w).purge(&ipc);
        worker::preempt::leave(w);
    }
}

/// Where a dropped [`Tid`]'s count `x` goes: banked in its own identity when the
/// `Tid` is dropped on a green thread of the worker (of the runtime) `x`'s thread lives
/// on, while that thread lives (`protocol::bank`); given back otherwise.
///
/// The next count that thread's own operation needs on itself takes a banked one
/// instead of a locked increment (`protocol::call_here`): a server drops its last
/// client's `Tid`, and the client's next call to it takes that count back. The thread's
/// exit gives banked counts back, so an identity is kept alive, and findable by its id,
/// exactly as long as without them.
#[inline]
fn recycle(x: Arc<Ipc>) {
    let w = worker::current();
    // SAFETY: a non-null thread word is this thread's worker.
    if w.is_null() || unsafe { worker::running_task(w) }.is_null() {
        drop(x);
        return;
    }
    // SAFETY: `w` is this thread's worker and a green thread runs on it: the identity's
    // state is touched at runtime depth only (no preemption switch in between).
    let back = unsafe {
        worker::preempt::enter(w);
        let realm = worker::shared_of(w) as *const worker::Shared as usize;
        let back = protocol::bank(x, realm, worker::id_of(w));
        worker::preempt::leave(w);
        back
    };
    drop(back);
}

/// A task that will never run (shutdown) gives back its count on its identity.
pub(crate) fn never_ran(task: &Task) {
    let p = task.ipc.swap(EXITED, AcqRel);
    if !p.is_null() && p != EXITED {
        // SAFETY: the task's count, taken out of the task just now.
        drop(unsafe { Arc::from_raw(p) });
    }
}

// ---- The protocol's environment on a worker ----

struct WorkerEnv {
    w: *mut Worker,
    /// Collect the first thread woken as the one to switch to (see `park_ipc`).
    collect: bool,
    handoff: Option<Arc<Task>>,
}

impl WorkerEnv {
    fn new(w: *mut Worker, collect: bool) -> Self {
        WorkerEnv {
            w,
            collect,
            handoff: None,
        }
    }
}

/// Counts on the identities of this worker's own threads that requests brought here,
/// kept for the requests it posts next (see `Env::count`). A request from worker A to B
/// carries counts on its sender and its receiver; B's answer or reply names the same
/// two threads, and the count on B's own thread goes back with it instead of being given
/// back here and taken again (a locked instruction each, on a line A has just written).
/// Only this worker's threads are kept, and only while they live: a thread's exit
/// purges its counts here (`exited`), so an identity lives exactly as long as its
/// thread or a `Tid` of it (or a partner's pending operation), as documented; no
/// worker keeps another's threads alive. A few entries, replaced round robin.
pub(crate) struct CountCache {
    slots: [Option<Arc<Ipc>>; COUNT_CACHE],
    next: usize,
}

const COUNT_CACHE: usize = 8;

impl CountCache {
    pub(crate) fn new() -> Self {
        CountCache {
            slots: Default::default(),
            next: 0,
        }
    }

    /// A count on `x`: a kept one if there is one, else a new one.
    #[inline]
    fn take(&mut self, x: &Arc<Ipc>) -> Arc<Ipc> {
        for s in self.slots.iter_mut() {
            if s.as_ref().is_some_and(|k| Arc::ptr_eq(k, x)) {
                return s.take().expect("just seen");
            }
        }
        x.clone()
    }

    /// Keeps `x` if it is a live thread of worker `here` (in a free slot, else in place
    /// of the oldest kept count); else gives it back.
    #[inline]
    fn keep(&mut self, here: usize, x: Arc<Ipc>) {
        // (`dead` is set by this worker, at the thread's exit: a dead thread is never
        // kept after `purge`.)
        if x.worker() != here || x.is_dead() {
            return drop(x);
        }
        if let Some(s) = self.slots.iter_mut().find(|s| s.is_none()) {
            *s = Some(x);
            return;
        }
        let i = self.next;
        self.next = (i + 1) % COUNT_CACHE;
        self.slots[i] = Some(x); // the count replaced is given back here
    }

    /// Gives back every count kept on `x` (its thread has exited).
    fn purge(&mut self, x: &Arc<Ipc>) {
        for s in self.slots.iter_mut() {
            if s.as_ref().is_some_and(|k| Arc::ptr_eq(k, x)) {
                *s = None;
            }
        }
    }
}

impl Env for WorkerEnv {
    #[inline(always)]
    fn count(&mut self, x: &Arc<Ipc>) -> Arc<Ipc> {
        // SAFETY: `w` is this thread's worker; the cache is its own.
        unsafe { worker::ipc_counts(self.w) }.take(x)
    }

    #[inline(always)]
    fn uncount(&mut self, x: Arc<Ipc>) {
        let here = self.here();
        // SAFETY: as above.
        unsafe { worker::ipc_counts(self.w) }.keep(here, x)
    }

    fn here(&self) -> usize {
        // SAFETY: `w` is this thread's worker.
        unsafe { worker::id_of(self.w) }
    }

    fn post(&mut self, to: usize, req: Req) {
        // SAFETY: as above.
        unsafe { worker::post_ipc(self.w, to, req) }
    }

    #[inline(always)]
    fn wake(&mut self, who: &Ipc) {
        let t = who.host_ptr() as *const Task;
        // SAFETY: as above. The running thread needs no wake-up: it is in its IPC call
        // and looks at its outcome before it parks.
        if unsafe { worker::is_running(self.w, t) } {
            return;
        }
        // SAFETY: `self.w` is this thread's worker. A thread parked in IPC here left its
        // running count in the worker's slot: it is moved, not counted again. Else the
        // identity holds a count on its task, which is alive.
        let task = unsafe {
            worker::take_ipc_parked(self.w, t).unwrap_or_else(|| {
                Arc::increment_strong_count(t);
                Arc::from_raw(t)
            })
        };
        if self.collect && self.handoff.is_none() {
            if task.park.unpark() {
                self.handoff = Some(task);
            }
        } else {
            crate::task::unpark_owned(task);
        }
    }
}

/// Handles an IPC request that arrived in worker `w`'s message boxes.
pub(crate) fn on_mail(w: *mut Worker, req: Req) {
    protocol::handle(&mut WorkerEnv::new(w, false), req);
}

// ---- The operations ----

/// The running green thread's worker and identity. The identity is borrowed from the
/// thread's task (no reference count taken: it lives until the thread itself exits).
#[inline(always)]
fn caller(stage: Stage) -> Result<(*mut Worker, ManuallyDrop<Arc<Ipc>>), IpcError> {
    let w = worker::current();
    let t = if w.is_null() {
        core::ptr::null()
    } else {
        // SAFETY: a non-null thread word is this thread's worker.
        unsafe { worker::running_task(w) }
    };
    if t.is_null() {
        return Err(error(ErrorKind::NotGreenThread, stage, None, None));
    }
    // SAFETY: the running task is alive while it runs.
    let task = unsafe { &*t };
    let mut p = task.ipc.load(Acquire);
    if p.is_null() {
        p = first_use(task);
    }
    // SAFETY: the task's own count keeps its identity alive until the thread exits,
    // and the thread is running this call; ManuallyDrop never gives the count back.
    Ok((w, ManuallyDrop::new(unsafe { Arc::from_raw(p) })))
}

/// The running thread's first IPC: makes its identity; returns the task's pointer to it.
#[cold]
#[inline(never)]
fn first_use(task: &Task) -> *mut Ipc {
    drop(ipc_of(&worker::current_task().expect("running")));
    task.ipc.load(Acquire)
}

/// Checks that `to` may be a partner of `me` and has started (waiting for it to start,
/// within the deadline).
#[inline]
fn check_partner(
    me: &Arc<Ipc>,
    to: &Tid,
    zero: bool,
    deadline: Option<Instant>,
) -> Result<(), ErrorKind> {
    // (Compared through the identities' read-mostly parts: the partner's task record is
    // a line its worker writes, a cache miss across workers at every call.)
    if Arc::ptr_eq(me, &to.0) || me.realm() != to.0.realm() {
        return Err(ErrorKind::InvalidPartner);
    }
    let mut spins = 0u32;
    while to.0.worker() == NO_WORKER {
        // Not started yet (it sits in some run queue): it is certainly not receiving.
        if zero || deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ErrorKind::TimedOut);
        }
        spins += 1;
        if spins < 64 {
            worker::yield_now();
        } else {
            crate::park::park_timeout(Duration::from_micros(50));
        }
    }
    Ok(())
}

fn kind_of(f: Fail) -> ErrorKind {
    match f {
        Fail::TimedOut => ErrorKind::TimedOut,
        Fail::Cancelled => ErrorKind::Cancelled,
        Fail::Dead => ErrorKind::PartnerDead,
    }
}

/// Runs one operation of `me` to its end: `start` begins it, then the thread parks
/// until the outcome is in, cancelling at the deadline or when aborted. The outcome is
/// then `me`'s to take (`protocol::finish`, `finish_reply`).
#[inline]
fn run(me: &Arc<Ipc>, deadline: Option<Instant>, start: impl FnOnce(&mut WorkerEnv)) {
    let w = worker::current();
    // SAFETY: `w` is this thread's worker (the caller is a green thread); protocol
    // steps run at runtime depth (never switched out by the preemption signal) and
    // parks at depth 0, as every switch expects.
    let handoff = unsafe {
        worker::preempt::enter(w);
        let mut env = WorkerEnv::new(w, true);
        start(&mut env);
        worker::preempt::leave(w);
        env.handoff
    };
    wait(me, deadline, handoff);
}

/// The waiting half of [`run`]: parks until `me`'s operation is over, first handing the
/// worker to `handoff` (a thread the operation woke).
#[inline]
fn wait(me: &Arc<Ipc>, deadline: Option<Instant>, mut handoff: Option<Arc<Task>>) {
    let mut first = true;
    loop {
        let w = worker::current();
        let step = protocol::next(me);
        let why = match step {
            Next::Done => {
                if let Some(h) = handoff {
                    worker::push_ready(h);
                }
                return;
            }
            Next::Aborted => Some(Fail::Cancelled),
            Next::Wait if !first && deadline.is_some_and(|d| Instant::now() >= d) => {
                Some(Fail::TimedOut)
            }
            Next::Wait | Next::WaitForAnswer => None,
        };
        first = false;
        if let Some(why) = why {
            // SAFETY: as above.
            unsafe {
                worker::preempt::enter(w);
                protocol::cancel(&mut WorkerEnv::new(w, false), me, why);
                worker::preempt::leave(w);
            }
            continue;
        }
        let d = if step == Next::Wait { deadline } else { None };
        worker::park_ipc(handoff.take(), d);
    }
}

#[inline]
fn deadline_of(t: Timeout) -> (bool, Option<Instant>) {
    match t {
        Timeout::Zero => (true, None),
        Timeout::After(d) => (false, Some(Instant::now() + d)),
        Timeout::Never => (false, None),
    }
}

#[inline]
fn failed(
    (why, stage, partner, unsent): (Fail, Stage, Option<Arc<Ipc>>, Option<Message>),
) -> IpcError {
    error(kind_of(why), stage, partner.map(|p| p.id()), unsent)
}

/// Sends `msg` to `to`: returns once `to` has received it, or fails (and gives the
/// message back) when the timeout passes, the operation is cancelled, or `to` exits.
#[inline]
pub fn send(to: &Tid, msg: Message, timeout: Timeout) -> Result<(), IpcError> {
    let (zero, deadline) = deadline_of(timeout);
    transfer(to, msg, zero, deadline, Then::Nothing).map(|_| ())
}

/// Sends `msg` to `to` and waits for its reply (`to`'s next send to the caller), with
/// the send-to-receive transition atomic: see the module comment. `timeout`: `Zero`
/// fails unless `to` is waiting now (then the reply is awaited without limit);
/// `After(d)` bounds the whole call.
#[inline]
pub fn call(to: &Tid, msg: Message, timeout: Timeout) -> Result<Message, IpcError> {
    // The direct path (a server waiting on this worker); it waits for the reply
    // without a deadline, so not for `After`.
    if !matches!(timeout, Timeout::After(_)) {
        // SAFETY (both blocks): `me` runs here, `to` is owned here (`direct`), two
        // threads; the check said yes, at runtime depth.
        if let Some((w, me, closed)) =
            direct(&to.0, |me| unsafe { protocol::call_ready_here(me, &to.0) })
        {
            unsafe { protocol::call_here(&me, &to.0, msg, closed) };
            hand_off(w, &me, &to.0);
            return replied(&me);
        }
    }
    let (zero, deadline) = deadline_of(timeout);
    let me = start_transfer(to, msg, zero, deadline, Then::Partner)?;
    replied(&me)
}

/// The outcome of `me`'s finished call: its reply, or why it failed.
#[inline(always)]
fn replied(me: &Ipc) -> Result<Message, IpcError> {
    match protocol::take_reply(me) {
        Some(m) => Ok(m),
        None => protocol::finish_reply(me).map_err(failed),
    }
}

/// The outcome of `me`'s finished receive (of a `receive` or a `reply_and_wait`): the
/// sender and the message, or why it failed.
#[inline(always)]
fn received(me: &Ipc) -> Result<(Tid, Message), IpcError> {
    if let Some((t, m)) = protocol::take_received(me) {
        return Ok((Tid::of(t), m));
    }
    protocol::finish(me)
        .map(|r| {
            let (t, m) = r.expect("a receive has a message");
            (Tid::of(t), m)
        })
        .map_err(failed)
}

#[inline]
fn transfer(
    to: &Tid,
    msg: Message,
    zero: bool,
    deadline: Option<Instant>,
    then: Then,
) -> Result<Option<(Tid, Message)>, IpcError> {
    let me = start_transfer(to, msg, zero, deadline, then)?;
    protocol::finish(&me)
        .map(|r| r.map(|(t, m)| (Tid::of(t), m)))
        .map_err(failed)
}

/// Runs a send of the caller to `to` (turning into `then` once delivered) to its end;
/// returns the caller's identity, whose outcome is to be taken.
#[inline]
fn start_transfer(
    to: &Tid,
    msg: Message,
    zero: bool,
    deadline: Option<Instant>,
    then: Then,
) -> Result<ManuallyDrop<Arc<Ipc>>, IpcError> {
    let (_, me) = match caller(Stage::Send) {
        Ok(x) => x,
        Err(e) => {
            return Err(IpcError {
                unsent: Some(msg),
                ..e
            })
        }
    };
    if let Err(k) = check_partner(&me, to, zero, deadline) {
        return Err(error(k, Stage::Send, Some(to.id()), Some(msg)));
    }
    // The message goes to its place once, here; the receiver's worker moves it from
    // there into the receiver's buffer.
    protocol::put_message(&me, msg);
    run(&me, deadline, |env| {
        protocol::begin_sending(env, &me, &to.0, then, zero)
    });
    Ok(me)
}

// ---- The same-worker direct paths (see protocol.rs, `call_here`) ----

/// The caller's worker and identity, if `to` is a live thread of the same worker (and
/// runtime) other than the caller: the case of the direct paths. (The lookups of
/// [`caller`], without its error and its first-use path: built on `caller`, the local
/// round trip measured ~1.5 ns slower.)
#[inline(always)]
fn caller_beside(to: &Arc<Ipc>) -> Option<(*mut Worker, ManuallyDrop<Arc<Ipc>>)> {
    let w = worker::current();
    if w.is_null() {
        return None;
    }
    // SAFETY: a non-null thread word is this thread's worker.
    let t = unsafe { worker::running_task(w) };
    if t.is_null() {
        return None;
    }
    // SAFETY: the running task is alive while it runs.
    let p = unsafe { &*t }.ipc.load(Acquire);
    if p.is_null() || core::ptr::eq(p, Arc::as_ptr(to)) {
        return None;
    }
    // SAFETY: as in `caller`: the task's own count keeps its identity alive, and
    // ManuallyDrop never gives a count back.
    let me = ManuallyDrop::new(unsafe { Arc::from_raw(p) });
    // SAFETY: `w` is this thread's worker.
    let here = unsafe { worker::id_of(w) };
    // (Whether `to` has exited is asked by the direct paths' checks, at runtime depth.)
    if me.realm() != to.realm() || to.worker() != here {
        return None;
    }
    Some((w, me))
}

/// Enters runtime depth for a direct path if `ready` (its check, run there) says the
/// partner is ready: returns the worker, the caller's identity and `ready`'s answer,
/// still at runtime depth. None (at depth 0 again) otherwise.
#[inline(always)]
fn direct<T>(
    partner: &Arc<Ipc>,
    ready: impl FnOnce(&Arc<Ipc>) -> Option<T>,
) -> Option<(*mut Worker, ManuallyDrop<Arc<Ipc>>, T)> {
    let (w, me) = caller_beside(partner)?;
    // SAFETY: `w` is this thread's worker, the caller a green thread on it (as in `run`):
    // the check and the transition after it run at runtime depth, never switched out
    // between them by the preemption signal.
    unsafe { worker::preempt::enter(w) };
    match ready(&me) {
        Some(x) => Some((w, me, x)),
        None => {
            // SAFETY: as above.
            unsafe { worker::preempt::leave(w) };
            None
        }
    }
}

/// The end of a direct path, whose transition has just given `partner` its message
/// (still at runtime depth): hands the worker to `partner` and waits until `me`'s
/// operation is over, back at depth 0.
#[inline(always)]
fn hand_off(w: *mut Worker, me: &Arc<Ipc>, partner: &Ipc) {
    // SAFETY: `w` is this thread's worker, the caller a green thread on it at runtime
    // depth; `partner`'s identity holds a count on its task.
    unsafe {
        if worker::ipc_direct_switch(w, partner.host_ptr() as *const Task) {
            worker::preempt::leave(w);
            worker::check_cancelled(&*worker::running_task(w));
            if protocol::next(me) != Next::Done {
                wait(me, None, None); // an abort, say: the general loop deals with it
            }
        } else {
            let mut env = WorkerEnv::new(w, true);
            env.wake(partner);
            let handoff = env.handoff;
            worker::preempt::leave(w);
            wait(me, None, handoff);
        }
    }
}

/// Receives a message from `from` (None: from anyone), waiting at most `timeout`.
/// Returns the sender and the message.
#[inline]
pub fn receive(from: Option<&Tid>, timeout: Timeout) -> Result<(Tid, Message), IpcError> {
    let (_, me) = caller(Stage::Receive)?;
    let (zero, deadline) = deadline_of(timeout);
    if let Some(f) = from {
        if let Err(k) = check_partner(&me, f, zero, deadline) {
            return Err(error(k, Stage::Receive, Some(f.id()), None));
        }
    }
    let from = from.map(|f| &*f.0);
    run(&me, deadline, |env| {
        protocol::begin_receive(env, &me, from, zero)
    });
    received(&me)
}

/// The server loop's step: replies to `client` with timeout zero (a caller is always
/// ready for its reply), then receives the next request from anyone, waiting at most
/// `timeout`. If the reply cannot be delivered (the client gave up or was cancelled),
/// the error has stage `Send`, gives the reply back, and no receive was started.
#[inline]
pub fn reply_and_wait(
    client: &Tid,
    reply: Message,
    timeout: Timeout,
) -> Result<(Tid, Message), IpcError> {
    // The direct path (the client waiting on this worker), when the receive has no
    // deadline.
    if matches!(timeout, Timeout::Never) {
        // SAFETY (both blocks): as in `call`.
        if let Some((w, me, i)) = direct(&client.0, |me| unsafe {
            protocol::reply_ready_here(me, &client.0)
        }) {
            unsafe { protocol::reply_here(&me, &client.0, reply, i) };
            hand_off(w, &me, &client.0);
            return received(&me);
        }
    }
    // The reply goes with timeout zero; once delivered, the receive begins at once (on
    // the server's worker, as the delivery is acknowledged): one operation, not two.
    let deadline = match timeout {
        Timeout::Zero => Some(Instant::now()),
        t => deadline_of(t).1,
    };
    transfer(client, reply, true, deadline, Then::Any)
        .map(|r| r.expect("a reply and wait receives"))
}

/// Cancels the IPC operation `tid` is blocked in, if any: it fails with
/// [`ErrorKind::Cancelled`] (L4's `lthread_ex_regs`). Works from any green
/// thread or OS thread; returns at once.
pub fn cancel(tid: &Tid) {
    let w = worker::current();
    // SAFETY: a non-null thread word is this thread's worker.
    let mine =
        !w.is_null() && unsafe { worker::same_runtime(w, &*(tid.0.host_ptr() as *const Task)) };
    if mine {
        // SAFETY: as above; protocol steps at runtime depth.
        unsafe {
            worker::preempt::enter(w);
            protocol::abort(&mut WorkerEnv::new(w, false), &tid.0);
            worker::preempt::leave(w);
        }
    } else {
        // From outside the runtime: through the owner's inbox.
        let owner = tid.0.worker();
        if owner == NO_WORKER {
            return;
        }
        // SAFETY: the identity holds a count on its task.
        let task = unsafe { &*(tid.0.host_ptr() as *const Task) };
        worker::send_from_outside(
            task.shared(),
            owner,
            worker::Mail::Ipc(Req {
                who: Arc::clone(&tid.0),
                peer: None,
                seq: 0,
                op: protocol::Op::Abort,
                send: Default::default(),
            }),
        );
    }
}
