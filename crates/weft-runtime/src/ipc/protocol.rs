//! The rendezvous protocol of synchronous IPC: each thread's IPC state, the requests
//! workers send each other, and the handlers that run them.
//!
//! This is the cross-processor IPC path of the Fiasco microkernel's multiprocessor
//! design (Sven Schneider, TU Chemnitz, 2006, sections 11.3 and 12.3) with green
//! threads for kernel threads and workers for processors. The module knows nothing of
//! the runtime: it is driven through [`Env`] (which worker am I, post a request to a
//! worker, wake a thread), so the loom model (`tests/loom_ipc.rs`) runs this very code
//! over the real message boxes.
//!
//! ## Who touches what
//!
//! Every thread's IPC state ([`Ipc`]) belongs to the worker that owns the thread (a
//! started green thread never changes worker). Only that worker reads or writes the
//! state's `st` part: the phase of the thread's current operation, its receive buffer,
//! the queue of **senders** waiting for it and the list of **watchers** (threads in a
//! receive from it, told if it dies). There are no locks: every other worker asks the
//! owner through a [`Req`] in the message boxes, and the owner handles requests one at
//! a time, between its green threads' steps.
//!
//! One exception, as in Fiasco, where a receiver may read its sender's register
//! message: while a thread's send is in flight, the worker of its partner reads the
//! sender's `out` part (the message, and whether the send is a call) and takes the
//! message from it. (A request from another worker usually carries a copy of what the
//! partner's worker needs, `SendCopy`, and then `out` is not read at all.) The sender
//! does not touch `out` from the moment it posts its send until the answer to that send
//! (or to its cancellation) comes back, and the message boxes order the two sides
//! (Release on push, Acquire on pop).
//!
//! ## Requests (all carry the thread they concern, `who`, and its operation number)
//!
//! | request     | handled on       | does                                               |
//! |-------------|------------------|----------------------------------------------------|
//! | `Send`      | receiver's worker | deliver if the receiver waits for `who`; else refuse (timeout zero) or queue `who` |
//! | `Cancel`    | receiver's worker | take `who` out of the queue if it is still there: answers `Removed` or `Missed` |
//! | `Watch`     | partner's worker  | note that `who` receives from the partner (answered by `Gone` if it is dead) |
//! | `Abort`     | `who`'s worker    | cancel `who`'s operation (L4's `lthread_ex_regs`) |
//! | `Delivered`, `Refused`, `Dead` | sender's worker | the outcome of a send |
//! | `Gone`      | receiver's worker | the partner `who` receives from has exited        |
//! | `Removed`, `Missed` | sender's worker | the answer to `Cancel`                     |
//!
//! When both threads are on one worker the handler is simply called; the semantics are
//! the same.
//!
//! ## The orderings that make it right (each checked by the loom model)
//!
//! - **Delivery against cancellation.** A sender whose timeout expires (or that is
//!   aborted) while its send waits in a remote queue posts `Cancel` and waits for the
//!   answer. The receiver's worker either still finds it queued (`Removed`: the send
//!   failed, the message comes back to the caller) or does not, because it delivered
//!   the message (or refused it, or the receiver died) first. A plain send's
//!   `Delivered` (or a `Refused`, a `Dead`) was then posted *before* the `Missed`, into
//!   the same FIFO box: the sender learns the outcome before the answer. A call's
//!   delivery is not acknowledged (below), so for a call a `Missed` with no answer
//!   before it *means* delivered: the call fails at its receive stage. Delivered
//!   exactly once, or failed, never both.
//! - **The atomic transition from send to receive** (Fiasco's design, 11.3.4). A call is receiving
//!   from its server from the moment its request is delivered. Its delivery is not
//!   even acknowledged (one message less per call across workers): the server learns
//!   the call's number at delivery, and its next send to the caller names it
//!   (`Out::reply_to`); the caller's worker takes a send that answers its pending call
//!   as that call's reply, at once, whatever the timeout (`awaits_reply`). So a server
//!   may reply with timeout zero, on one worker or across. `reply_and_wait` turns the
//!   other way when the reply's `Delivered` is handled on the server's worker: its
//!   receive begins there, and a request that queued meanwhile is taken at once.
//! - **Death.** A thread that exits refuses its queued senders with `Dead` and tells its
//!   watchers `Gone`; a later `Send` to it is answered `Dead`.
//! - Stale answers (for an operation that is over) are recognised by the operation
//!   number and the phase, and ignored.

use crate::shim::{AtomicBool, CachePadded, UnsafeCell};
use core::sync::atomic::Ordering::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// The worker of a thread that has not started yet (it has none).
pub const NO_WORKER: usize = usize::MAX;

/// What one IPC moves: four machine words inline, plus an optional payload of bytes
/// that is moved (the vector's buffer changes hands; its bytes are not copied).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Message {
    /// The inline words (L4's message registers).
    pub words: [u64; 4],
    /// An owned payload, moved to the receiver.
    pub payload: Option<Vec<u8>>,
}

impl Message {
    /// A message of four words.
    pub fn new(words: [u64; 4]) -> Self {
        Message {
            words,
            payload: None,
        }
    }

    /// A message whose first word is `w` (the others 0).
    pub fn word(w: u64) -> Self {
        Message::new([w, 0, 0, 0])
    }

    /// This message with `payload` attached.
    pub fn with_payload(mut self, payload: Vec<u8>) -> Self {
        self.payload = Some(payload);
        self
    }
}

/// Why an operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fail {
    /// The timeout expired (for timeout zero: the partner was not ready).
    TimedOut,
    /// Another thread cancelled the operation.
    Cancelled,
    /// The partner has exited.
    Dead,
}

/// Which half of an operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The send: the message did not reach the partner (it is given back).
    Send,
    /// The receive (of a receive, or of a call after its message was delivered).
    Receive,
}

/// How the protocol reaches its surroundings: the runtime, or a model.
pub trait Env {
    /// The worker running the caller.
    fn here(&self) -> usize;
    /// Posts `req` to worker `to` (never `here()`), in FIFO order per pair of workers.
    fn post(&mut self, to: usize, req: Req);
    /// Makes `who`'s thread runnable; `who` belongs to `here()`.
    fn wake(&mut self, who: &Ipc);
    /// A count on `x` for a request about to be posted. The runtime hands out one that
    /// an earlier request brought to this worker, if it has one (see
    /// `ipc::CountCache`): a request's counts then travel back and forth with the
    /// requests instead of being taken on one worker and given back on the other,
    /// each time a locked instruction on a cache line the other worker owns.
    #[inline(always)]
    fn count(&mut self, x: &Arc<Ipc>) -> Arc<Ipc> {
        x.clone()
    }
    /// Takes back a count that a handled request carried.
    #[inline(always)]
    fn uncount(&mut self, x: Arc<Ipc>) {
        drop(x)
    }
}

/// What the protocol knows of the thread behind an [`Ipc`]: an opaque pointer the
/// environment owns one reference through, the function that says which worker owns
/// the thread now ([`NO_WORKER`] before it starts), and the one that gives the
/// reference back when the `Ipc` is dropped.
pub struct Host {
    /// The environment's handle on the thread (the runtime's task record).
    pub ptr: *const (),
    /// The thread's worker, or NO_WORKER before it has started. Once it has answered
    /// a worker, the answer must never change (the identity keeps it: `Ipc::worker`).
    pub worker: fn(*const ()) -> usize,
    /// Gives back the reference `ptr` holds (called once, from `Drop`), with the id.
    pub release: fn(*const (), u64),
    /// An opaque tag of the environment the thread belongs to (the runtime's): kept in
    /// the identity's read-mostly part, so that checking that two threads may be
    /// partners reads no line of the partner's that its worker writes.
    pub realm: usize,
}

/// The IPC identity and state of one thread (see the module comment for who touches
/// which part).
///
/// Its three parts sit on cache lines of their own, apart from the `Arc`'s counts too
/// (which every request that names the thread changes): what other workers read at
/// every step (`ro`: is it dead, which worker owns it), what the partner's worker reads
/// once a send (`out`), and what only the owner touches (`st`). Sharing one line, a
/// cross-worker call missed in the cache on `dead` at each step, because the other
/// worker had just written the line.
pub struct Ipc {
    ro: CachePadded<ReadMostly>,
    /// The outgoing half of the current send (read by the partner's worker while the
    /// send is in flight).
    out: CachePadded<UnsafeCell<Out>>,
    /// Everything else; the owner worker's alone.
    st: UnsafeCell<Local>,
}

/// What other workers read of an [`Ipc`] at every step, written (almost) never.
struct ReadMostly {
    id: u64,
    host: Host,
    /// Set by the owner worker when the thread exits; read by anyone as a hint.
    dead: AtomicBool,
    /// `host.worker`'s answer once it is not NO_WORKER: a started thread never changes
    /// worker, so the answer is final and every IPC step reads it here instead of
    /// asking the host (an indirect call and a pointer chase, several per operation).
    /// A plain atomic even under loom: a pure cache of the host's value, it orders
    /// nothing (the requests travel through the message boxes).
    worker: core::sync::atomic::AtomicUsize,
}

// SAFETY: the cells are accessed only under the ownership rules of the module comment
// (one worker at a time, handed over through the message boxes' Release/Acquire); the
// host pointer is only handed to the host's own functions.
unsafe impl Send for Ipc {}
// SAFETY: as above.
unsafe impl Sync for Ipc {}

struct Out {
    msg: Option<Message>,
    /// This send answers the receiver's call number `reply_to`, which the sender received
    /// (and has not answered since): the receiver, still in that call's send stage on
    /// its side (a call's delivery is not acknowledged: see `deliver`), takes it as its
    /// reply.
    reply_to: Option<u32>,
    /// The sender will receive from the receiver next (a call): the receiver notes it
    /// as a watcher, to tell it if it exits before replying.
    watch: bool,
    zero: bool,
}

/// What a send turns into once its message is delivered (atomically: see the module
/// comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the operation is over (`send`).
    Nothing,
    /// A receive from the partner (`call`).
    Partner,
    /// A receive from anyone (`reply_and_wait`).
    Any,
}

#[derive(Debug)]
enum Phase {
    /// No operation in progress (or the outcome is waiting to be taken).
    Idle,
    /// A send is in flight or queued at the partner (`Local::partner`).
    Sending,
    /// Waiting to receive from anyone (`any`), or from `Local::partner`.
    Receiving { any: bool },
    /// A remote send is being cancelled: waiting for `Removed` or `Missed`.
    Cancelling,
}

struct Local {
    seq: u32,
    phase: Phase,
    /// The current operation's partner (the receiver of a send, the thread a closed
    /// receive waits for).
    partner: Option<Arc<Ipc>>,
    /// What the current send turns into once delivered.
    then: Then,
    /// Why a cancellation in progress was started.
    why: Fail,
    /// Another thread asked to cancel the current operation.
    abort: bool,
    /// The operation is over: `Ok`, or which failure at which stage.
    outcome: Option<Result<(), (Fail, Stage)>>,
    /// What the last receive got, and from whom (None: from `partner`).
    rbuf: Option<(Option<Arc<Ipc>>, Message)>,
    /// Threads whose sends wait for this one to receive, in arrival order, with their
    /// operation numbers.
    senders: VecDeque<(Arc<Ipc>, u32)>,
    /// Threads receiving from this one (callers awaiting a reply, closed receives):
    /// told `Gone` if it exits. At most one entry per thread; stale entries are
    /// harmless (the operation number no longer matches).
    watchers: Vec<(Arc<Ipc>, u32)>,
    /// A count on some identity that an operation of this thread no longer needs (the
    /// partner of a reply and wait once its reply is delivered), kept to be reused
    /// when the next one names the same thread (`share`) instead of being dropped and
    /// counted again: a server's reply hands its client's count over to the next
    /// request's sender field, a client's call keeps its server as `partner` for the
    /// next call. Each of those is a locked read-modify-write saved per operation. It
    /// keeps at most one other identity (not its thread's stack) alive until replaced,
    /// or until this thread exits.
    spare: Option<Arc<Ipc>>,
    /// Counts on this identity that `Tid`s of it left here when they were dropped on
    /// its worker while the thread lived (`bank`), instead of giving them back: the
    /// next count this thread's own operation needs on itself (a direct call's watcher
    /// entry at its server) takes one of them instead of a locked increment
    /// (`count_on`). A server drops its last client's `Tid` on their common worker,
    /// and the client's next call takes that count back. They are given back when the
    /// thread exits, so they never keep a dead identity alive, or findable by its id.
    banked: usize,
}

/// A request between workers (see the table in the module comment).
pub struct Req {
    /// The thread whose operation this is.
    pub who: Arc<Ipc>,
    /// Its partner, for the requests that travel to the partner's worker.
    pub peer: Option<Arc<Ipc>>,
    /// `who`'s operation number.
    pub seq: u32,
    /// What to do.
    pub op: Op,
    /// For a `Send` from another worker: a copy of the sender's outgoing half, so that
    /// the receiver's worker need not read the sender's `out` (see [`SendCopy`]).
    pub send: SendCopy,
}

/// A copy of a send's outgoing half (`Out`), carried in its `Send` request.
///
/// Across workers, reading the sender's `out` is a cache miss that can only start once
/// the request's own line has arrived (the request says whose `out`): a second miss in
/// a row on every hop. The request carries what the receiver's worker needs instead:
/// always the flags and `reply_to`, and the words of a message without a payload
/// whose fourth word is 0 (`WORDS`: three words keep a request, and so a message-box
/// slot with its sequence word, within one 64-byte cache line). Such a message is then
/// delivered from the copy and the sender's `out` is left as it is: a stale copy of
/// plain words, which owns nothing, overwritten by the next `put_message` and never
/// given back (a delivered send has nothing to give back: `finish` returns a message
/// only from a send-stage failure). A message with a payload is still moved out of
/// `out`, as its vector must change hands exactly once.
#[derive(Clone, Copy, Default, Debug)]
pub struct SendCopy {
    words: [u64; 3],
    reply_to: u32,
    flags: u8,
}

impl SendCopy {
    const FILLED: u8 = 1;
    const WORDS: u8 = 2;
    const WATCH: u8 = 4;
    const ZERO: u8 = 8;
    const REPLY: u8 = 16;

    /// The copy of `o` (the sender's `out`, just written by the sender itself).
    fn of(o: &Out) -> SendCopy {
        let msg = o.msg.as_ref().expect("a send has its message");
        let mut flags = Self::FILLED;
        if msg.payload.is_none() && msg.words[3] == 0 {
            flags |= Self::WORDS;
        }
        if o.watch {
            flags |= Self::WATCH;
        }
        if o.zero {
            flags |= Self::ZERO;
        }
        if o.reply_to.is_some() {
            flags |= Self::REPLY;
        }
        SendCopy {
            words: [msg.words[0], msg.words[1], msg.words[2]],
            reply_to: o.reply_to.unwrap_or(0),
            flags,
        }
    }

    fn filled(&self) -> bool {
        self.flags & Self::FILLED != 0
    }
    fn reply_to(&self) -> Option<u32> {
        (self.flags & Self::REPLY != 0).then_some(self.reply_to)
    }
    fn zero(&self) -> bool {
        self.flags & Self::ZERO != 0
    }
    fn watch(&self) -> bool {
        self.flags & Self::WATCH != 0
    }
    /// The message, if the copy carries all of it.
    fn message(&self) -> Option<Message> {
        let [a, b, c] = self.words;
        (self.flags & Self::WORDS != 0).then(|| Message::new([a, b, c, 0]))
    }
}

/// The kinds of [`Req`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Send,
    Cancel,
    Watch,
    Abort,
    Delivered,
    Refused,
    Dead,
    Gone,
    Removed,
    Missed,
}

impl Ipc {
    /// A new identity for a thread.
    pub fn new(id: u64, host: Host) -> Ipc {
        Ipc {
            ro: CachePadded(ReadMostly {
                id,
                host,
                dead: AtomicBool::new(false),
                worker: core::sync::atomic::AtomicUsize::new(NO_WORKER),
            }),
            out: CachePadded(UnsafeCell::new(Out {
                msg: None,
                reply_to: None,
                watch: false,
                zero: false,
            })),
            st: UnsafeCell::new(Local {
                seq: 0,
                phase: Phase::Idle,
                partner: None,
                then: Then::Nothing,
                why: Fail::TimedOut,
                abort: false,
                outcome: None,
                rbuf: None,
                senders: VecDeque::new(),
                watchers: Vec::new(),
                spare: None,
                banked: 0,
            }),
        }
    }

    /// The thread's id.
    #[inline]
    pub fn id(&self) -> u64 {
        self.ro.id
    }

    /// The environment's handle on the thread.
    #[inline]
    pub fn host_ptr(&self) -> *const () {
        self.ro.host.ptr
    }

    /// The environment's tag ([`Host::realm`]).
    #[inline]
    pub fn realm(&self) -> usize {
        self.ro.host.realm
    }

    /// The worker that owns the thread (NO_WORKER before it starts).
    #[inline(always)]
    pub fn worker(&self) -> usize {
        let w = self.ro.worker.load(Relaxed);
        if w != NO_WORKER {
            return w;
        }
        self.worker_slow()
    }

    /// Asks the host, and keeps a final answer (see `Ipc::worker`, the field).
    #[cold]
    #[inline(never)]
    fn worker_slow(&self) -> usize {
        let w = (self.ro.host.worker)(self.ro.host.ptr);
        if w != NO_WORKER {
            self.ro.worker.store(w, Relaxed);
        }
        w
    }

    /// Marks a new identity dead (made for a thread that has already exited).
    pub fn mark_dead(&self) {
        self.ro.dead.store(true, Release);
    }

    /// Whether the thread has exited.
    #[inline]
    pub fn is_dead(&self) -> bool {
        self.ro.dead.load(Acquire)
    }

    /// The owner-only state.
    ///
    /// # Safety
    /// The caller runs on the owner worker, and the returned reference is the only one
    /// alive (the handlers below take it for a few statements and never call out while
    /// holding it).
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn st(&self) -> &mut Local {
        // SAFETY: per the contract.
        self.st.with_mut(|p| unsafe { &mut *p })
    }

    /// The outgoing half.
    ///
    /// # Safety
    /// The caller is the owner (no send in flight) or the partner's worker (a send in
    /// flight); the reference is the only one alive.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn out(&self) -> &mut Out {
        // SAFETY: per the contract.
        self.out.with_mut(|p| unsafe { &mut *p })
    }
}

impl Drop for Ipc {
    fn drop(&mut self) {
        (self.ro.host.release)(self.ro.host.ptr, self.ro.id);
    }
}

impl std::fmt::Debug for Ipc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ipc({})", self.ro.id)
    }
}

/// Sends `req` to the worker of `target`, or handles it here if that is this worker.
fn route<E: Env>(env: &mut E, target: &Ipc, req: Req) {
    let w = target.worker();
    if w == env.here() {
        handle(env, req)
    } else {
        env.post(w, req)
    }
}

/// Gives `who` (a sender, or a receiver told `Gone`) the answer `op` about its
/// operation `seq`: directly if it lives here, else through the boxes.
#[inline(always)]
fn answer<E: Env>(env: &mut E, who: &Arc<Ipc>, seq: u32, op: Op) {
    let w = who.worker();
    if w == env.here() {
        if op == Op::Delivered {
            // (A local reply's acknowledgement, on every round trip: no dispatch.)
            on_send_done(env, who, seq, op)
        } else {
            handle_ref(env, who, None, seq, op, &SendCopy::default())
        }
    } else {
        let req = Req {
            who: env.count(who),
            peer: None,
            seq,
            op,
            send: SendCopy::default(),
        };
        env.post(w, req)
    }
}

/// Handles a request on the worker it was sent to.
pub fn handle<E: Env>(env: &mut E, req: Req) {
    handle_ref(env, &req.who, req.peer.as_ref(), req.seq, req.op, &req.send);
    env.uncount(req.who);
    if let Some(p) = req.peer {
        env.uncount(p);
    }
}

/// `copy`: a `Send` request's copy of the sender's outgoing half (empty otherwise).
fn handle_ref<E: Env>(
    env: &mut E,
    who: &Arc<Ipc>,
    peer: Option<&Arc<Ipc>>,
    seq: u32,
    op: Op,
    copy: &SendCopy,
) {
    match op {
        Op::Send => on_send(
            env,
            who,
            peer.expect("a send names its receiver"),
            seq,
            copy,
        ),
        Op::Cancel => on_cancel(env, who, peer.expect("a cancel names the receiver"), seq),
        Op::Watch => on_watch(env, who, peer.expect("a watch names the partner"), seq),
        Op::Abort => on_abort(env, who),
        Op::Delivered | Op::Refused | Op::Dead => on_send_done(env, who, seq, op),
        Op::Gone => on_gone(env, who, seq),
        Op::Removed | Op::Missed => on_cancel_answer(env, who, seq, op),
    }
}

/// Whether `st` waits to receive from `sender`.
#[inline]
fn accepts(st: &Local, sender: &Arc<Ipc>) -> bool {
    match st.phase {
        Phase::Receiving { any: true } => true,
        Phase::Receiving { any: false } => {
            st.partner.as_ref().is_some_and(|p| Arc::ptr_eq(p, sender))
        }
        _ => false,
    }
}

/// Moves `sender`'s message to `receiver` (on the receiver's worker), completing the
/// receiver's receive, and answers the sender `Delivered` (unless the send is a call).
/// `wake_receiver` is false when the receiver is the running thread itself; `copy` is
/// the request's copy of the sender's outgoing half (empty for a send from this
/// worker).
#[inline]
fn deliver<E: Env>(
    env: &mut E,
    receiver: &Arc<Ipc>,
    sender: &Arc<Ipc>,
    seq: u32,
    wake_receiver: bool,
    copy: &SendCopy,
) {
    // SAFETY: the sender's send is in flight (it waits for our answer), so its `out`
    // is ours to read; we are the receiver's worker.
    // From the request's copy when it carries the whole message (see `SendCopy`: the
    // sender's `out` is not read); else moved out of `out`.
    let (msg, watch) = match copy.message() {
        Some(m) => (m, copy.watch()),
        // SAFETY: as above.
        None => unsafe {
            let o = sender.out();
            (
                o.msg.take().expect("a send in flight has its message"),
                o.watch,
            )
        },
    };
    {
        // SAFETY: the receiver is owned here.
        let st = unsafe { receiver.st() };
        // A closed receive knows its sender (its partner): no second count on it.
        let from = match st.phase {
            Phase::Receiving { any: false } => None,
            _ => Some(share(&mut st.spare, sender)),
        };
        st.rbuf = Some((from, msg));
        st.phase = Phase::Idle;
        st.outcome = Some(Ok(()));
        if watch {
            add_watcher(st, sender, seq);
        }
    }
    if wake_receiver {
        env.wake(receiver);
    }
    if !watch {
        answer(env, sender, seq, Op::Delivered);
    }
    // A call's delivery is not acknowledged: the caller goes on waiting, and the
    // server's reply, which names the call (`Out::reply_to`), is taken as delivered-and-
    // answered at once (`awaits_reply`). This saves a message per call across workers;
    // the races stay covered: a cancel that misses means delivered (`on_cancel_answer`),
    // and the server's exit tells its watchers `Gone`.
}

/// Adds (or renews) `who`'s entry in a watcher list.
#[inline]
fn add_watcher(st: &mut Local, who: &Arc<Ipc>, seq: u32) {
    match watcher_entry(st, who) {
        Some(e) => e.1 = seq,
        None => st.watchers.push((who.clone(), seq)),
    }
}

/// Banks `x`, the count of a `Tid` just dropped on this worker, in its own identity
/// (see `Local::banked`), if that identity is of a live thread of this worker (`here`,
/// of the environment `realm`: worker numbers repeat from one runtime to the next).
/// Otherwise gives `x` back to the caller, to drop after this step (dropping the last
/// count on an identity runs its destructor).
///
/// # Safety
/// The caller runs at runtime depth on worker `here` of `realm`.
#[inline]
pub unsafe fn bank(x: Arc<Ipc>, realm: usize, here: usize) -> Option<Arc<Ipc>> {
    // (The thread's exit, which gives banked counts back, runs on the same worker at
    // runtime depth: it is either over, and `dead` is set, or not begun.)
    if x.realm() != realm || x.worker() != here || x.is_dead() {
        return Some(x);
    }
    // SAFETY: the thread is of this worker, whose threads touch its state at runtime
    // depth only, as we do.
    unsafe { x.st() }.banked += 1;
    // The count stays, banked: `count_on` or `exit` takes it back.
    let _ = Arc::into_raw(x);
    None
}

/// A count on `me` for an entry in another thread's state, `st` being `me`'s state: a
/// banked one (see `Local::banked`) if there is one, else a new one.
#[inline(always)]
fn count_on(st: &mut Local, me: &Arc<Ipc>) -> Arc<Ipc> {
    if st.banked > 0 {
        st.banked -= 1;
        // SAFETY: a banked count is a count on `me` given up with `into_raw` (`bank`).
        unsafe { Arc::from_raw(Arc::as_ptr(me)) }
    } else {
        me.clone()
    }
}

/// As [`add_watcher`], with a count on `who` already taken (dropped if `who` has an
/// entry).
#[inline]
fn add_watcher_counted(st: &mut Local, who: Arc<Ipc>, seq: u32) {
    match watcher_entry(st, &who) {
        Some(e) => e.1 = seq,
        None => st.watchers.push((who, seq)),
    }
}

/// `who`'s entry in a watcher list, if it has one.
#[inline]
fn watcher_entry<'a>(st: &'a mut Local, who: &Arc<Ipc>) -> Option<&'a mut (Arc<Ipc>, u32)> {
    st.watchers
        .iter_mut()
        .rev()
        .find(|(x, _)| Arc::ptr_eq(x, who))
}

/// Takes `who`'s entry out of a watcher list: its count on `who` and the number of the
/// operation it watched with (for a caller: its call), if it had one.
#[inline]
fn remove_watcher(st: &mut Local, who: &Arc<Ipc>) -> Option<(Arc<Ipc>, u32)> {
    let i = st.watchers.iter().rposition(|(x, _)| Arc::ptr_eq(x, who))?;
    Some(st.watchers.swap_remove(i))
}

/// A count on `who`: the spare one if it is `who`'s (see `Local::spare`), else a new one.
#[inline]
fn share(spare: &mut Option<Arc<Ipc>>, who: &Arc<Ipc>) -> Arc<Ipc> {
    match spare.take() {
        Some(s) if Arc::ptr_eq(&s, who) => s,
        s => {
            *spare = s;
            who.clone()
        }
    }
}

/// Keeps `x`, a count this thread's operation no longer needs, as the spare.
#[inline(always)]
fn retire(spare: &mut Option<Arc<Ipc>>, x: Option<Arc<Ipc>>) {
    if x.is_some() {
        *spare = x;
    }
}

/// Makes `to` the partner of the operation starting in `st`: the count already there
/// (kept from the last operation, see `finish_reply`) or `given` (a count the caller
/// has on `to`) or the spare are reused before a new count is taken. The common cases
/// (no partner from now on; the same partner again; a given count where there was
/// none, as a server's reply) are decided here, inline; the rest is out of line.
#[inline(always)]
fn set_partner(st: &mut Local, to: Option<&Arc<Ipc>>, given: Option<Arc<Ipc>>) {
    let Some(to) = to else {
        let old = st.partner.take();
        retire(&mut st.spare, old);
        return;
    };
    match (&st.partner, given) {
        (Some(p), None) if Arc::ptr_eq(p, to) => {}
        (None, Some(g)) => st.partner = Some(g),
        (_, given) => set_partner_slow(st, to, given),
    }
}

#[inline(never)]
fn set_partner_slow(st: &mut Local, to: &Arc<Ipc>, given: Option<Arc<Ipc>>) {
    if st.partner.as_ref().is_some_and(|p| Arc::ptr_eq(p, to)) {
        retire(&mut st.spare, given);
        return;
    }
    let new = match given {
        Some(g) => g,
        None => share(&mut st.spare, to),
    };
    let old = st.partner.replace(new);
    retire(&mut st.spare, old);
}

/// Whether `st` is a call to `sender` whose request `sender` received (operation
/// `reply_to`): a call is receiving from its server from its delivery on, though its
/// phase says Sending until the reply comes (the delivery is not acknowledged).
#[inline]
fn awaits_reply(st: &Local, sender: &Arc<Ipc>, reply_to: Option<u32>) -> bool {
    matches!(st.phase, Phase::Sending)
        && st.then == Then::Partner
        && reply_to == Some(st.seq)
        && st.partner.as_ref().is_some_and(|p| Arc::ptr_eq(p, sender))
}

/// Takes the first sender `st` accepts out of its queue (an empty queue, the common
/// case, is seen inline).
#[inline(always)]
fn take_waiting_sender(st: &mut Local) -> Option<(Arc<Ipc>, u32)> {
    if st.senders.is_empty() {
        return None;
    }
    take_queued_sender(st)
}

#[inline(never)]
fn take_queued_sender(st: &mut Local) -> Option<(Arc<Ipc>, u32)> {
    let i = match st.phase {
        Phase::Receiving { any: true } => (!st.senders.is_empty()).then_some(0),
        Phase::Receiving { any: false } => {
            let p = st.partner.as_ref()?;
            st.senders.iter().position(|(s, _)| Arc::ptr_eq(s, p))
        }
        _ => None,
    };
    st.senders.remove(i?)
}

/// `copy`: the request's copy of the sender's outgoing half (filled for a request from
/// another worker; empty when the send started on this worker, whose `out` is local).
#[inline]
fn on_send<E: Env>(env: &mut E, sender: &Arc<Ipc>, receiver: &Arc<Ipc>, seq: u32, copy: &SendCopy) {
    if receiver.is_dead() {
        return answer(env, sender, seq, Op::Dead);
    }
    let reply_to = if copy.filled() {
        copy.reply_to()
    } else {
        // SAFETY: the sender's send is in flight: its `out` is readable here.
        unsafe { sender.out().reply_to }
    };
    let ready = {
        // SAFETY: the receiver is owned here; the reference ends before any call out.
        let st = unsafe { receiver.st() };
        if awaits_reply(st, sender, reply_to) {
            st.phase = Phase::Receiving { any: false };
        }
        accepts(st, sender)
    };
    if ready {
        return deliver(env, receiver, sender, seq, true, copy);
    }
    let zero = if copy.filled() {
        copy.zero()
    } else {
        // SAFETY: the sender's send is in flight: its `out` is readable here.
        unsafe { sender.out().zero }
    };
    if zero {
        answer(env, sender, seq, Op::Refused)
    } else {
        // SAFETY: the receiver is owned here.
        unsafe { receiver.st() }
            .senders
            .push_back((sender.clone(), seq));
    }
}

fn on_cancel<E: Env>(env: &mut E, sender: &Arc<Ipc>, receiver: &Arc<Ipc>, seq: u32) {
    let removed = {
        // SAFETY: the receiver is owned here.
        let st = unsafe { receiver.st() };
        match st
            .senders
            .iter()
            .position(|(x, s)| Arc::ptr_eq(x, sender) && *s == seq)
        {
            Some(i) => {
                st.senders.remove(i);
                true
            }
            None => false,
        }
    };
    answer(
        env,
        sender,
        seq,
        if removed { Op::Removed } else { Op::Missed },
    );
}

fn on_watch<E: Env>(env: &mut E, receiver: &Arc<Ipc>, partner: &Arc<Ipc>, seq: u32) {
    if partner.is_dead() {
        answer(env, receiver, seq, Op::Gone)
    } else {
        // SAFETY: the partner is owned here.
        add_watcher(unsafe { partner.st() }, receiver, seq)
    }
}

fn on_abort<E: Env>(env: &mut E, who: &Ipc) {
    let wake = {
        // SAFETY: `who` is owned here.
        let st = unsafe { who.st() };
        let busy = matches!(st.phase, Phase::Sending | Phase::Receiving { .. });
        if busy {
            st.abort = true;
        }
        busy
    };
    if wake {
        env.wake(who);
    }
}

#[inline]
fn on_send_done<E: Env>(env: &mut E, sender: &Arc<Ipc>, seq: u32, op: Op) {
    if sender.is_dead() {
        return;
    }
    let (wake, waiting) = {
        // SAFETY: the sender is owned here.
        let st = unsafe { sender.st() };
        let cancelling = matches!(st.phase, Phase::Cancelling);
        if st.seq != seq || !(cancelling || matches!(st.phase, Phase::Sending)) {
            return; // stale
        }
        match op {
            Op::Delivered if st.then != Then::Nothing && !cancelling => {
                // The atomic transition: from here on the sender receives, before its
                // partner can run (module comment). A sender already queued for it
                // is taken at once.
                st.phase = Phase::Receiving {
                    any: st.then == Then::Any,
                };
                if st.then == Then::Any {
                    set_partner(st, None, None);
                }
                let w = take_waiting_sender(st);
                (false, w)
            }
            Op::Delivered if st.then != Then::Nothing => {
                // Delivered while we were cancelling: the local reason applies to the
                // receive stage (the message did arrive).
                st.phase = Phase::Idle;
                st.outcome = Some(Err((st.why, Stage::Receive)));
                if st.then == Then::Any {
                    set_partner(st, None, None); // as for a receive from anyone that fails
                }
                (true, None)
            }
            Op::Delivered => {
                st.phase = Phase::Idle;
                st.outcome = Some(Ok(()));
                (true, None)
            }
            Op::Refused | Op::Dead => {
                st.phase = Phase::Idle;
                let why = if op == Op::Dead {
                    Fail::Dead
                } else {
                    Fail::TimedOut
                };
                st.outcome = Some(Err((why, Stage::Send)));
                (true, None)
            }
            _ => unreachable!("not a send answer: {op:?}"),
        }
    };
    if let Some((s, sseq)) = waiting {
        deliver(env, sender, &s, sseq, true, &SendCopy::default());
    } else if wake {
        env.wake(sender);
    }
}

fn on_gone<E: Env>(env: &mut E, receiver: &Ipc, seq: u32) {
    if receiver.is_dead() {
        return;
    }
    let wake = {
        // SAFETY: the receiver is owned here.
        let st = unsafe { receiver.st() };
        let hit = st.seq == seq
            && (matches!(st.phase, Phase::Receiving { any: false })
                || (matches!(st.phase, Phase::Sending) && st.then == Then::Partner));
        if hit {
            st.phase = Phase::Idle;
            st.outcome = Some(Err((Fail::Dead, Stage::Receive)));
        }
        hit
    };
    if wake {
        env.wake(receiver);
    }
}

fn on_cancel_answer<E: Env>(env: &mut E, sender: &Ipc, seq: u32, op: Op) {
    if sender.is_dead() {
        return;
    }
    let wake = {
        // SAFETY: the sender is owned here.
        let st = unsafe { sender.st() };
        if st.seq != seq || !matches!(st.phase, Phase::Cancelling) {
            // The send's own answer came first (it always does when the cancel
            // missed: same FIFO box) and ended the operation.
            return;
        }
        // A cancel that missed a call's request means it was delivered (a call's
        // delivery is not acknowledged; a refusal or a death would have come first, in
        // the same FIFO box): the reply is what is given up. Any other send's answer
        // comes before the Missed, so a Missed here is always a call's.
        debug_assert!(op == Op::Removed || st.then == Then::Partner);
        let stage = if op == Op::Missed {
            Stage::Receive
        } else {
            Stage::Send
        };
        st.phase = Phase::Idle;
        st.outcome = Some(Err((st.why, stage)));
        true
    };
    if wake {
        env.wake(sender);
    }
}

// ---- The thread's side: called by the thread itself, on its own worker. ----

/// Starts a send from `me` (the running thread) to `to`. `call`: receive from `to` once
/// the message is delivered. `zero`: fail at once unless `to` is waiting to receive.
/// The outcome comes later: see [`next`] and [`finish`].
#[cfg_attr(not(feature = "loom"), allow(dead_code))] // the runtime uses begin_send_then
pub fn begin_send<E: Env>(
    env: &mut E,
    me: &Arc<Ipc>,
    to: &Arc<Ipc>,
    msg: Message,
    call: bool,
    zero: bool,
) {
    let then = if call { Then::Partner } else { Then::Nothing };
    begin_send_then(env, me, to, msg, then, zero)
}

/// As [`begin_send`], with what the send turns into once delivered: nothing, a
/// receive from `to` (a call), or a receive from anyone (a reply and wait).
pub fn begin_send_then<E: Env>(
    env: &mut E,
    me: &Arc<Ipc>,
    to: &Arc<Ipc>,
    msg: Message,
    then: Then,
    zero: bool,
) {
    put_message(me, msg);
    begin_sending(env, me, to, then, zero)
}

/// Puts `msg` in `me`'s outgoing half, where the send [`begin_sending`] starts next
/// takes it from (the receiver's worker moves it straight into the receiver's buffer):
/// the message is written once on the sender's side, not handed down the call chain.
/// Called by the running thread `me` between operations (its `out` is its own then).
#[inline(always)]
pub fn put_message(me: &Ipc, msg: Message) {
    // SAFETY: `me` runs here, so its state is owned here (a read for the check).
    debug_assert!(matches!(unsafe { me.st() }.phase, Phase::Idle));
    // SAFETY: `me` runs here and has no send in flight: `out` is ours.
    unsafe { me.out() }.msg = Some(msg);
}

/// As [`begin_send_then`], for a message already put in place by [`put_message`].
#[inline(always)]
pub fn begin_sending<E: Env>(env: &mut E, me: &Arc<Ipc>, to: &Arc<Ipc>, then: Then, zero: bool) {
    let (seq, reply_to) = {
        // SAFETY: `me` runs here, so its state is owned here.
        let st = unsafe { me.st() };
        debug_assert!(matches!(st.phase, Phase::Idle), "one operation at a time");
        st.seq = st.seq.wrapping_add(1);
        st.phase = Phase::Sending;
        st.then = then;
        st.abort = false;
        st.outcome = None;
        st.rbuf = None;
        // Sending to a thread ends our part in its receive, if it was waiting for us
        // (and answers its call, if it is one); the watcher entry's count on it serves
        // as the partner's.
        let (given, reply_to) = match remove_watcher(st, to) {
            Some((x, n)) => (Some(x), Some(n)),
            None => (None, None),
        };
        set_partner(st, Some(to), given);
        (st.seq, reply_to)
    };
    {
        // SAFETY: no send of ours is in flight: `out` is ours.
        let o = unsafe { me.out() };
        o.reply_to = reply_to;
        o.watch = then == Then::Partner;
        o.zero = zero;
    }
    if to.is_dead() {
        // SAFETY: as above.
        let st = unsafe { me.st() };
        st.phase = Phase::Idle;
        st.outcome = Some(Err((Fail::Dead, Stage::Send)));
        return;
    }
    let w = to.worker();
    if w == env.here() {
        on_send(env, me, to, seq, &SendCopy::default())
    } else {
        // SAFETY: no send of ours is in flight yet: `out` is ours (just written).
        let send = SendCopy::of(unsafe { me.out() });
        let req = Req {
            who: env.count(me),
            peer: Some(env.count(to)),
            seq,
            op: Op::Send,
            send,
        };
        env.post(w, req)
    }
}

/// Starts a receive by `me` (the running thread) from `from` (None: anyone). `zero`:
/// fail at once unless a sender is already waiting.
pub fn begin_receive<E: Env>(env: &mut E, me: &Arc<Ipc>, from: Option<&Arc<Ipc>>, zero: bool) {
    let (seq, found) = {
        // SAFETY: `me` runs here.
        let st = unsafe { me.st() };
        debug_assert!(matches!(st.phase, Phase::Idle), "one operation at a time");
        st.seq = st.seq.wrapping_add(1);
        st.abort = false;
        st.outcome = None;
        st.rbuf = None;
        set_partner(st, from, None);
        st.phase = Phase::Receiving {
            any: from.is_none(),
        };
        (st.seq, take_waiting_sender(st))
    };
    if let Some((sender, sseq)) = found {
        return deliver(env, me, &sender, sseq, false, &SendCopy::default());
    }
    // SAFETY: as above.
    let st = unsafe { me.st() };
    if from.is_some_and(|x| x.is_dead()) {
        st.phase = Phase::Idle;
        st.outcome = Some(Err((Fail::Dead, Stage::Receive)));
    } else if zero {
        st.phase = Phase::Idle;
        st.outcome = Some(Err((Fail::TimedOut, Stage::Receive)));
    } else if let Some(x) = from {
        // Be told if the partner exits while we wait.
        route(
            env,
            x,
            Req {
                who: me.clone(),
                peer: Some(x.clone()),
                seq,
                op: Op::Watch,
                send: SendCopy::default(),
            },
        );
    }
}

// ---- Same-worker direct paths: a call and a reply that are delivered at once ----
//
// A client and its server on one worker spend most of an IPC in the general steps
// above: `begin_sending`, `on_send`, `deliver`, `answer` and `on_send_done` each look
// at cases that cannot arise when the partner is already waiting here (a queue, a
// refusal, a cancellation in flight, a remote worker). The functions below do a call's
// and a reply's whole transition in one step when the partner is on this worker and
// ready, leaving both states exactly as the general steps would (the same fields, the
// same counts), so everything after them (timeouts, cancellation, the partner's exit,
// the remote paths) sees no difference. Each comes in two halves: a check that changes
// nothing (when it says no, the caller takes the general path), and the transition,
// which cannot fail: the message is moved once, into the receiver's buffer, and never
// handed back and forth (each copy of its seven words through a temporary was a
// store-forwarding stall).

/// Whether a call of `me` (the running thread) to `to` can be delivered at once: `to`
/// waits to receive from `me` (Some(true): a closed receive) or from anyone
/// (Some(false)), is alive, and `me` has no business with `to` that the general path
/// must see (an entry in `me`'s watcher list: `to` receiving from `me`, maybe in a
/// call). Changes nothing.
///
/// # Safety
/// `me` runs on this worker, `to` is owned by this worker, and they differ.
#[inline(always)]
pub unsafe fn call_ready_here(me: &Arc<Ipc>, to: &Arc<Ipc>) -> Option<bool> {
    // SAFETY: per the contract, both states are this worker's, and they are two.
    let (st, rs) = unsafe { (me.st(), to.st()) };
    let closed = match rs.phase {
        Phase::Receiving { any: true } => false,
        Phase::Receiving { any: false }
            if rs.partner.as_ref().is_some_and(|p| Arc::ptr_eq(p, me)) =>
        {
            true
        }
        _ => return None,
    };
    if st.watchers.iter().any(|(x, _)| Arc::ptr_eq(x, to)) || to.is_dead() {
        return None; // (dead: unwound out of its receive at shutdown)
    }
    Some(closed)
}

/// The call [`call_ready_here`] said can be delivered at once (`closed`: its answer),
/// delivered: `to` has the message and its receive is over; `me` is in its call's send
/// stage, receiving from `to` (a call's delivery is not acknowledged: see `deliver`).
/// The caller then wakes `to` and parks `me`.
///
/// # Safety
/// As [`call_ready_here`], which said so, with nothing run on this worker since.
#[inline(always)]
pub unsafe fn call_here(me: &Arc<Ipc>, to: &Arc<Ipc>, msg: Message, closed: bool) {
    // SAFETY: per the contract.
    let (st, rs) = unsafe { (me.st(), to.st()) };
    // The watcher entry's count: the one the server banked with us when it dropped
    // our `Tid` (a server loop's steady state), else a new one, taken first: a locked
    // instruction waits for the stores before it to drain, and the transition is
    // mostly stores.
    let watcher = count_on(st, me);
    debug_assert!(matches!(st.phase, Phase::Idle), "one operation at a time");
    // `begin_sending`, for a call.
    st.seq = st.seq.wrapping_add(1);
    st.phase = Phase::Sending;
    st.then = Then::Partner;
    st.abort = false;
    st.outcome = None;
    clear_rbuf(st);
    set_partner(st, Some(to), None);
    // (`out` is read only while a send is in flight, and this one never is.)
    // `deliver`: the receiver's half.
    let from = if closed {
        None
    } else {
        Some(share(&mut rs.spare, me))
    };
    fill_rbuf(rs, from, msg);
    rs.phase = Phase::Idle;
    rs.outcome = Some(Ok(()));
    add_watcher_counted(rs, watcher, st.seq);
}

/// Empties a receive buffer that an operation starting now will fill: it is empty
/// already, unless the last operation's outcome was never taken (a thread unwound out
/// of it), so the general drop is out of line (inline, as `rbuf = None`, it was a call
/// to the drop glue on every direct call and reply).
#[inline(always)]
fn clear_rbuf(st: &mut Local) {
    if st.rbuf.is_some() {
        drop_rbuf(st);
    }
}

/// [`clear_rbuf`]'s rare case.
#[cold]
#[inline(never)]
fn drop_rbuf(st: &mut Local) {
    st.rbuf = None;
}

/// Fills a receive buffer (emptied first, as by [`clear_rbuf`]), without the general
/// drop of what was there.
#[inline(always)]
fn fill_rbuf(st: &mut Local, from: Option<Arc<Ipc>>, msg: Message) {
    clear_rbuf(st);
    // SAFETY: the buffer is None: writing over it leaks nothing.
    unsafe { core::ptr::write(&mut st.rbuf, Some((from, msg))) };
}

/// Whether a reply and wait of `me` (the running thread) to `client` can be delivered
/// at once: `client` waits for the reply to a call that `me` received and has not
/// answered (`me` has its watcher entry: Some(its index)), `client` has not exited, and
/// no sender waits for `me` (its receive would take the first of them at once).
/// Changes nothing.
///
/// # Safety
/// As [`call_ready_here`], with `client` for `to`.
#[inline(always)]
pub unsafe fn reply_ready_here(me: &Arc<Ipc>, client: &Arc<Ipc>) -> Option<usize> {
    // SAFETY: per the contract, as in `call_ready_here`.
    let (st, cs) = unsafe { (me.st(), client.st()) };
    if !st.senders.is_empty() || client.is_dead() {
        return None; // (dead: unwound out of its call at shutdown)
    }
    let i = st
        .watchers
        .iter()
        .rposition(|(x, _)| Arc::ptr_eq(x, client))?;
    awaits_reply(cs, me, Some(st.watchers[i].1)).then_some(i)
}

/// The reply [`reply_ready_here`] said can be delivered at once (`i`: its answer),
/// delivered: `client` has its reply and `me` receives from anyone, as after
/// `on_send_done`'s transition. The caller then wakes `client` and parks `me`.
///
/// # Safety
/// As [`reply_ready_here`], which said so, with nothing run on this worker since.
#[inline(always)]
pub unsafe fn reply_here(me: &Arc<Ipc>, client: &Arc<Ipc>, reply: Message, i: usize) {
    // SAFETY: per the contract.
    let (st, cs) = unsafe { (me.st(), client.st()) };
    debug_assert!(matches!(st.phase, Phase::Idle), "one operation at a time");
    let (given, _) = st.watchers.swap_remove(i);
    // `begin_sending` then `on_send_done`'s transition to a receive from anyone: the
    // watcher entry's count on the client ends as the spare (and any partner goes).
    st.seq = st.seq.wrapping_add(1);
    st.then = Then::Any;
    st.abort = false;
    st.outcome = None;
    clear_rbuf(st);
    st.partner = None;
    st.spare = Some(given);
    st.phase = Phase::Receiving { any: true };
    // `on_send` and `deliver` at the client: the reply to its call.
    fill_rbuf(cs, None, reply);
    cs.phase = Phase::Idle;
    cs.outcome = Some(Ok(()));
}

/// What the running thread `me` should do next in its operation.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// The operation is over: take it with [`finish`].
    Done,
    /// Wait (park) with the operation's deadline.
    Wait,
    /// Wait for a cancellation's answer, without a deadline.
    WaitForAnswer,
    /// Another thread cancelled the operation: call [`cancel`] with `Fail::Cancelled`.
    Aborted,
}

/// Where `me`'s operation stands.
#[inline]
pub fn next(me: &Ipc) -> Next {
    // SAFETY: `me` runs here.
    let st = unsafe { me.st() };
    if st.outcome.is_some() {
        Next::Done
    } else if matches!(st.phase, Phase::Cancelling) {
        Next::WaitForAnswer
    } else if st.abort {
        Next::Aborted
    } else {
        Next::Wait
    }
}

/// Ends `me`'s operation early (its deadline passed, or it was aborted). A receive ends
/// at once; a send queued on this worker is taken out of the queue at once; a send to
/// another worker must be cancelled there: `next` says `WaitForAnswer` until the answer
/// comes.
pub fn cancel<E: Env>(env: &mut E, me: &Arc<Ipc>, why: Fail) {
    let (partner, seq) = {
        // SAFETY: `me` runs here.
        let st = unsafe { me.st() };
        match st.phase {
            Phase::Receiving { .. } => {
                // A stale watcher entry may stay at the partner: harmless.
                st.phase = Phase::Idle;
                st.outcome = Some(Err((why, Stage::Receive)));
                return;
            }
            Phase::Sending => {}
            Phase::Idle | Phase::Cancelling => return,
        }
        (st.partner.clone().expect("a send has a partner"), st.seq)
    };
    if partner.worker() == env.here() {
        // Queued here: the partner's queue is ours to change.
        // SAFETY: the partner is owned here; the reference ends at once.
        let q = &mut unsafe { partner.st() }.senders;
        let i = q.iter().position(|(x, s)| Arc::ptr_eq(x, me) && *s == seq);
        if let Some(i) = i {
            q.remove(i);
        }
        // SAFETY: `me` runs here.
        let st = unsafe { me.st() };
        // Not queued: a call that was delivered (a local send in progress is otherwise
        // queued), whose reply is what is given up.
        debug_assert!(i.is_some() || st.then == Then::Partner);
        st.phase = Phase::Idle;
        st.outcome = Some(Err((
            why,
            if i.is_some() {
                Stage::Send
            } else {
                Stage::Receive
            },
        )));
    } else {
        {
            // SAFETY: `me` runs here.
            let st = unsafe { me.st() };
            st.phase = Phase::Cancelling;
            st.why = why;
        }
        let w = partner.worker();
        env.post(
            w,
            Req {
                who: me.clone(),
                peer: Some(partner),
                seq,
                op: Op::Cancel,
                send: SendCopy::default(),
            },
        );
    }
}

/// What a finished operation gave: `Ok(received)` (the sender and message of a
/// receive, None for a plain send), or the failure, its stage, the partner, and the
/// message given back when the send did not happen.
pub type Finished =
    Result<Option<(Arc<Ipc>, Message)>, (Fail, Stage, Option<Arc<Ipc>>, Option<Message>)>;

/// Takes the outcome of `me`'s finished operation (after `next` said `Done`).
#[inline]
pub fn finish(me: &Ipc) -> Finished {
    // SAFETY: `me` runs here; its operation is over, so no other worker reads `out`.
    let (st, o) = unsafe { (me.st(), me.out()) };
    let outcome = st.outcome.take().expect("finish after Done");
    let partner = st.partner.take();
    let unsent = o.msg.take();
    match outcome {
        Ok(()) => Ok(st.rbuf.take().map(|(from, m)| match from {
            Some(from) => {
                retire(&mut st.spare, partner);
                (from, m)
            }
            None => (partner.expect("a closed receive has its partner"), m),
        })),
        // A delivered message is not given back: `out` may hold a stale copy of it
        // (`SendCopy`).
        Err((why, stage)) => Err((why, stage, partner, unsent.filter(|_| stage == Stage::Send))),
    }
}

/// What a finished call gave: the reply, or as [`Finished`]'s failure.
pub type FinishedCall = Result<Message, (Fail, Stage, Option<Arc<Ipc>>, Option<Message>)>;

/// As [`finish`], for a call (a send that turned into a receive from its partner),
/// whose caller wants the reply only: the partner's count stays in `me` (as the
/// partner of the next call to the same thread, see `set_partner`) instead of being
/// handed out and dropped.
#[inline]
pub fn finish_reply(me: &Ipc) -> FinishedCall {
    // SAFETY: as in `finish`.
    let (st, o) = unsafe { (me.st(), me.out()) };
    match st.outcome.take().expect("finish after Done") {
        Ok(()) => {
            let (from, m) = st.rbuf.take().expect("a call receives its reply");
            debug_assert!(from.is_none(), "a call receives from its partner");
            Ok(m)
        }
        // As in `finish`: only a send-stage failure gives the message back.
        Err((why, stage)) => Err((
            why,
            stage,
            st.partner.take(),
            o.msg.take().filter(|_| stage == Stage::Send),
        )),
    }
}

/// [`finish_reply`]'s common case, for the direct paths: the call succeeded, and its
/// reply is taken. None (nothing taken) otherwise.
#[inline(always)]
pub fn take_reply(me: &Ipc) -> Option<Message> {
    // SAFETY: as in `finish`.
    let st = unsafe { me.st() };
    if !matches!(st.outcome, Some(Ok(()))) || !matches!(st.rbuf, Some((None, _))) {
        return None;
    }
    st.outcome = None;
    st.rbuf.take().map(|(_, m)| m)
}

/// [`finish`]'s common case, for the direct paths: a receive from anyone succeeded, and
/// its sender and message are taken. None (nothing taken) otherwise.
///
/// (`finish` also clears `out`: after a success it holds nothing or a stale copy of
/// plain words, which the next `put_message` overwrites; see `SendCopy`.)
#[inline(always)]
pub fn take_received(me: &Ipc) -> Option<(Arc<Ipc>, Message)> {
    // SAFETY: as in `finish`.
    let st = unsafe { me.st() };
    if !matches!(st.outcome, Some(Ok(())))
        || st.partner.is_some()
        || !matches!(st.rbuf, Some((Some(_), _)))
    {
        return None;
    }
    st.outcome = None;
    match st.rbuf.take() {
        Some((Some(from), m)) => Some((from, m)),
        _ => unreachable!("checked"),
    }
}

/// Cancels whatever IPC `who` is blocked in (from any thread of the runtime; `post`
/// only if `who`'s worker is not `env.here()`).
pub fn abort<E: Env>(env: &mut E, who: &Arc<Ipc>) {
    let w = who.worker();
    if w == NO_WORKER {
        return; // not started: not in an IPC
    }
    route(
        env,
        who,
        Req {
            who: who.clone(),
            peer: None,
            seq: 0,
            op: Op::Abort,
            send: SendCopy::default(),
        },
    );
}

/// `me` exits: it is dead from now on; its queued senders are answered `Dead` and its
/// watchers `Gone`.
pub fn exit<E: Env>(env: &mut E, me: &Arc<Ipc>) {
    me.ro.dead.store(true, Release);
    let (senders, watchers, pending, banked) = {
        // SAFETY: `me` runs here (its last act).
        let st = unsafe { me.st() };
        st.rbuf = None;
        st.spare = None;
        let partner = st.partner.take(); // (no cycle of identities outlives the thread)
        let pending = match st.phase {
            // Unwound out of a send (runtime shutdown): leave no entry behind here.
            Phase::Sending => partner.map(|p| (p, st.seq)),
            _ => None,
        };
        (
            core::mem::take(&mut st.senders),
            core::mem::take(&mut st.watchers),
            pending,
            core::mem::take(&mut st.banked),
        )
    };
    for _ in 0..banked {
        // SAFETY: each is a count on `me` given up with `into_raw` (`bank`); the
        // caller's own count keeps `me` alive through this loop.
        drop(unsafe { Arc::from_raw(Arc::as_ptr(me)) });
    }
    if let Some((p, seq)) = pending {
        if p.worker() == env.here() {
            // SAFETY: the partner is owned here.
            let q = &mut unsafe { p.st() }.senders;
            q.retain(|(x, s)| !(Arc::ptr_eq(x, me) && *s == seq));
        }
    }
    for (s, seq) in senders {
        answer(env, &s, seq, Op::Dead);
    }
    for (r, seq) in watchers {
        answer(env, &r, seq, Op::Gone);
    }
}
