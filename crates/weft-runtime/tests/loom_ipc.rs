//! loom models of the cross-worker IPC protocol (`src/ipc/protocol.rs`), run on the
//! real protocol code over the real message boxes, both built on loom's atomics:
//! `cargo test -p weft-runtime --features loom --test loom_ipc` (`make test` runs them).
//!
//! ## The model
//!
//! Each worker is a loom thread holding its [`Endpoint`] of a `matrix::<Req>`. It loops:
//! handle every request in its boxes (`ipc_protocol::handle`), then run its green
//! threads, then sleep on its doorbell (`Endpoint::wait`) when nothing is left to do,
//! exactly as a worker does. A green thread is a script of steps ([`Step`]) run by its
//! worker's loop: an IPC step starts the operation (`begin_send_then` with
//! `Then::Nothing`, `Partner` or `Any` for a send, a call or a reply and wait, as
//! `ipc.rs` does; `begin_receive`),
//! looks at `ipc_protocol::next` once (as `ipc::run` does before it parks), and then
//! again only when the protocol woke it ([`Env::wake`] sets a flag) or when its timer
//! fires. A timer is a count of its worker's loop turns: loom decides what has arrived
//! in the boxes by then, so the timeout (`cancel(.., Fail::TimedOut)`) lands before,
//! during or after the partner's answer. A thread the protocol forgets to wake never
//! looks again, its worker sleeps, and loom reports the deadlock; so does a request
//! lost in the boxes.
//!
//! The models end when every script is over and every posted request has been handled:
//! one counter of unfinished scripts plus requests in flight, whoever brings it to zero
//! wakes the other workers. The counter is a std atomic, which loom does not see: it
//! is the model's bookkeeping, not part of what is checked, and adds no interleavings
//! (with a loom atomic the models run ten times as many executions for nothing). Then
//! every live thread receives with timeout zero, which must fail: no sender is left
//! queued for anyone, and every thread is idle (the protocol's `debug_assert`s check
//! the phase); and the boxes are drained: empty. Every worker keeps a trace of the
//! requests it handled and the steps its threads took, for the checks below.
//!
//! Every message carries a unique word (and a payload of its bytes). After each
//! execution, [`account`] checks every send against every receive: a message is
//! received exactly once (and its sender was told `Ok`, or for a call a failure at the
//! `Receive` stage) or given back to its sender with a failure at the `Send` stage,
//! never both, never lost. Each model adds its own expectations, and checks, over all
//! executions, that the interesting interleavings really happened (a model that never
//! reaches its race proves nothing): the labels it expects are printed with
//! `--nocapture`.
//!
//! | model | covers |
//! |-------|--------|
//! | `delivery_races_the_senders_timeout` | (a) a send's timeout against delivery: delivered to a waiting receive or from the queue while the Cancel travels (Delivered, then Missed), or Removed from the queue and given back |
//! | `a_call_times_out_at_either_stage_while_the_server_replies` | (a)+(b) a call's timeout while sending (Removed, or Delivered while cancelling: fails at the receive stage) or while awaiting the reply; the server's `reply_and_wait` (with a timeout too): its reply delivered exactly when the caller still waits, else refused and given back |
//! | `a_receive_times_out_while_a_zero_send_arrives` | (b) a receive's timeout (with its Watch) against a zero send: delivered or refused, never both |
//! | `an_abort_races_a_call` | (b) `abort` from the server's worker: before the call (ignored), while sent or queued, while awaiting the reply |
//! | `an_abort_from_a_third_worker_races_a_call` | (b) the same with the abort from a third worker (its box unordered with the other two); preemption bound 1 |
//! | `a_reply_with_timeout_zero_is_always_delivered` | (c) two calls in a row to a server on the other worker, plus one from the server's own worker, served by `reply_and_wait`: every reply (zero) delivered; a call arriving while a reply is in flight is queued and taken as the reply's delivery is acknowledged |
//! | `a_zero_call_right_after_a_reply_and_wait_is_always_taken` | (c) `reply_and_wait`'s transition from reply to receive: the caller's next call, with timeout zero, always finds the server receiving |
//! | `a_zero_call_is_refused_or_answered` | (c) a call with timeout zero: refused at the send, or delivered, and then its reply always is |
//! | `a_dying_receiver_refuses_queued_and_late_senders` | (d) a receiver exits while remote sends are queued, in flight, or not sent yet, one with a timeout racing the exit: `Dead` (or the timeout), message given back |
//! | `a_dying_server_fails_its_caller_and_watchers` | (d) a server exits after taking a call, without replying: the caller and a thread receiving from it (Watch before or after the exit) get `Dead` |
//!
//! Preemption bound 2 (3 for the two smallest models, 1 for the three-worker one);
//! `WEFT_LOOM_FULL=1` adds one.
//!
//! **Reaching the races.** A message is late in these models only when loom schedules
//! its receiver late. The message boxes' doorbell uses sequentially consistent fences
//! (`src/msgbox/park.rs`), which loom models as ordering every fence after all earlier
//! ones, so a worker that has fenced sees every message sent before: it cannot read
//! an older state of a box, as it could before those fences existed. Two races that
//! relied on such a late view (a call queued and cancelled before its server
//! receives; an abort that lands before the call starts) were then out of reach at
//! any bound tried (up to 5); a one-turn `Pause` in the script of the side that must
//! come second makes them ordinary interleavings again, and the models check that
//! they are reached.
//!
//! A failure shows as an assertion with the execution's outcome and traces, or as
//! loom's `deadlock` panic (a lost wake-up or request; the test binary then aborts).
//! Each kind of check was seen to fail on a deliberately broken copy of the protocol:
//! a delivery that does not wake the receiver, a `Send` to a dead thread queued, a
//! `Gone` that does not wake, a zero send queued instead of refused, a reply and wait
//! that leaves a waiting sender queued (deadlocks); a `Cancel` always answered
//! `Removed` (a message delivered *and* given back: `account`); an exit that does not
//! answer its queued senders (the protocol's own `debug_assert`: a `Missed` before
//! the send's answer); the sender touching its `out` while cancelling (loom's
//! causality check on the `UnsafeCell`).
#![cfg(feature = "loom")]

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use weft_runtime::ipc_protocol::{
    self as p, Env, Fail, Host, Ipc, Message, Next, Req, Stage, Then,
};
use weft_runtime::msgbox::{matrix, Endpoint};

// ---- Scripts ----

/// One step of a green thread's script. A timeout of `n` (at least 1) fires `n` turns
/// of the worker's loop after the turn the operation started in (a timeout of zero is
/// `zero`, which the protocol handles itself).
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Send message `word` to thread `to`, then nothing (`send`), receive from `to`
    /// (`call`), or receive from anyone.
    Send {
        to: usize,
        word: u64,
        then: Then,
        zero: bool,
        timeout: Option<u32>,
    },
    /// Receive from `from` (None: anyone).
    Receive {
        from: Option<usize>,
        zero: bool,
        timeout: Option<u32>,
    },
    /// Reply `word` with timeout zero to the sender of the last message received (a
    /// plain `send`); skipped if nothing was received.
    Reply { word: u64 },
    /// `reply_and_wait`: reply `word` with timeout zero to the sender of the last
    /// message received, then (atomically, once delivered) receive from anyone; the
    /// timeout bounds the whole. Skipped if nothing was received.
    ReplyWait { word: u64, timeout: Option<u32> },
    /// `ipc::cancel` of thread `who`, whatever it is doing.
    Abort(usize),
    /// The thread exits (`ipc_protocol::exit`); no step may follow.
    Exit,
    /// Does nothing for this many turns of its worker's loop.
    Pause(u32),
}

fn send(to: usize, word: u64, timeout: Option<u32>) -> Step {
    Step::Send {
        to,
        word,
        then: Then::Nothing,
        zero: false,
        timeout,
    }
}

fn call(to: usize, word: u64, timeout: Option<u32>) -> Step {
    Step::Send {
        to,
        word,
        then: Then::Partner,
        zero: false,
        timeout,
    }
}

fn zero_call(to: usize, word: u64) -> Step {
    Step::Send {
        to,
        word,
        then: Then::Partner,
        zero: true,
        timeout: None,
    }
}

fn receive(from: Option<usize>, timeout: Option<u32>) -> Step {
    Step::Receive {
        from,
        zero: false,
        timeout,
    }
}

/// What an operation ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Res {
    /// A plain send (or reply) was delivered.
    Sent,
    /// A receive (or a call's reply) got `word` from thread `from`.
    Got { from: usize, word: u64 },
    /// The operation failed; `unsent` is the word of the message given back.
    Failed {
        why: Fail,
        stage: Stage,
        unsent: Option<u64>,
    },
}

/// One finished operation of a thread.
#[derive(Clone, Debug)]
struct Log {
    /// For a send: the partner, the word sent, and what the send turned into.
    sent: Option<(usize, u64, Then)>,
    /// Whether the thread cancelled it (its timer fired, or it was aborted).
    cancelled: bool,
    res: Res,
}

fn message(word: u64) -> Message {
    Message::word(word).with_payload(word.to_le_bytes().to_vec())
}

fn word_of(m: &Message) -> u64 {
    assert_eq!(
        m.payload.as_deref(),
        Some(&m.words[0].to_le_bytes()[..]),
        "the payload travels with its words"
    );
    m.words[0]
}

// ---- The environment of the protocol on a model worker ----

/// The host's view of a thread: which worker owns it.
struct Th {
    worker: usize,
}

fn th_worker(p: *const ()) -> usize {
    // SAFETY: `p` is the `Th` the identity owns (freed only by `th_release`).
    unsafe { (*(p as *const Th)).worker }
}

fn th_release(p: *const (), _id: u64) {
    // SAFETY: the box made in `run`, given back once, by the identity's Drop.
    drop(unsafe { Box::from_raw(p as *mut Th) });
}

struct ModelEnv {
    here: usize,
    ep: Endpoint<Req>,
    /// Unfinished scripts plus requests posted and not yet handled, for all workers.
    pending: Arc<AtomicUsize>,
    /// Set by `wake`, per thread (only this worker's threads are ever set here).
    woken: Vec<bool>,
    /// What happened here, in order: requests handled from the boxes (`"Send 0"`: a
    /// `Send` of thread 0) and threads' steps (`"t1 exit"`).
    trace: Vec<String>,
}

impl Env for ModelEnv {
    fn here(&self) -> usize {
        self.here
    }

    fn post(&mut self, to: usize, req: Req) {
        assert_ne!(
            to, self.here,
            "a request for this worker is handled, not posted"
        );
        self.pending.fetch_add(1, AcqRel);
        self.ep.send(to, req);
    }

    fn wake(&mut self, who: &Ipc) {
        assert_eq!(
            who.worker(),
            self.here,
            "only the owner worker wakes a thread"
        );
        self.woken[who.id() as usize] = true;
    }
}

impl ModelEnv {
    /// One unit of pending work is over; the last one wakes every other worker to end.
    fn done_one(&mut self) {
        if self.pending.fetch_sub(1, AcqRel) == 1 {
            for w in 0..self.ep.workers() {
                if w != self.here {
                    self.ep.wake(w);
                }
            }
        }
    }
}

// ---- Green threads ----

struct OpState {
    /// Look at `next` at once (just started, or just cancelled).
    look: bool,
    /// Loop turns before the timer fires.
    timer: Option<u32>,
    /// The timer has fired: a `Wait` now means cancel.
    expired: bool,
    /// A `Pause`, not an operation: over when the timer fires.
    pause: bool,
    cancelled: bool,
    sent: Option<(usize, u64, Then)>,
}

struct Green {
    idx: usize,
    me: Arc<Ipc>,
    script: Vec<Step>,
    pc: usize,
    op: Option<OpState>,
    last_from: Option<Arc<Ipc>>,
    log: Vec<Log>,
    exited: bool,
    done: bool,
}

impl Green {
    /// Runs the thread as far as it can go now.
    fn step(&mut self, env: &mut ModelEnv, all: &[Arc<Ipc>]) {
        loop {
            if self.done {
                return;
            }
            let Some(op) = &mut self.op else {
                self.start(env, all);
                continue;
            };
            let woken = std::mem::take(&mut env.woken[self.idx]);
            let mut fired = false;
            if let Some(n) = op.timer {
                if n == 0 {
                    op.timer = None;
                    op.expired = true;
                    fired = true;
                } else {
                    op.timer = Some(n - 1);
                }
            }
            if op.pause {
                if fired {
                    self.op = None;
                    self.pc += 1;
                    continue;
                }
                return;
            }
            if !(woken || fired || op.look) {
                return; // parked
            }
            op.look = false;
            let why = match p::next(&self.me) {
                Next::Done => {
                    let res = match p::finish(&self.me) {
                        Ok(None) => Res::Sent,
                        Ok(Some((from, m))) => {
                            let r = Res::Got {
                                from: from.id() as usize,
                                word: word_of(&m),
                            };
                            self.last_from = Some(from);
                            r
                        }
                        Err((why, stage, partner, unsent)) => {
                            let partner = partner.map(|p| p.id() as usize);
                            match op.sent {
                                // A reply and wait that failed in its receive (from
                                // anyone) has no partner, or names the one its reply
                                // went to when it was cancelled before the reply's
                                // delivery was acknowledged.
                                Some((to, _, Then::Any)) if stage == Stage::Receive => {
                                    assert!(partner.is_none() || partner == Some(to))
                                }
                                Some((to, _, _)) => assert_eq!(partner, Some(to)),
                                None => {}
                            }
                            Res::Failed {
                                why,
                                stage,
                                unsent: unsent.as_ref().map(word_of),
                            }
                        }
                    };
                    self.log.push(Log {
                        sent: op.sent,
                        cancelled: op.cancelled,
                        res,
                    });
                    self.op = None;
                    self.pc += 1;
                    continue;
                }
                Next::Aborted => Fail::Cancelled,
                Next::Wait if op.expired => Fail::TimedOut,
                Next::Wait | Next::WaitForAnswer => return, // parked
            };
            op.cancelled = true;
            op.look = true;
            p::cancel(env, &self.me, why);
        }
    }

    /// Starts the next step of the script (or ends the script).
    fn start(&mut self, env: &mut ModelEnv, all: &[Arc<Ipc>]) {
        let Some(&step) = self.script.get(self.pc) else {
            self.done = true;
            env.done_one();
            return;
        };
        let mut op = OpState {
            look: true,
            timer: None,
            expired: false,
            pause: false,
            cancelled: false,
            sent: None,
        };
        let what = match step {
            Step::Send {
                then: Then::Partner,
                ..
            } => "call",
            Step::Send { .. } | Step::Reply { .. } => "send",
            Step::ReplyWait { .. } => "replywait",
            Step::Receive { .. } => "receive",
            Step::Abort(_) => "abort",
            Step::Exit => "exit",
            Step::Pause(_) => "pause",
        };
        env.trace.push(format!("t{} {what}", self.idx));
        match step {
            Step::Send {
                to,
                word,
                then,
                zero,
                timeout,
            } => {
                op.timer = timeout;
                op.sent = Some((to, word, then));
                p::begin_send_then(env, &self.me, &all[to], message(word), then, zero);
            }
            Step::Reply { word } | Step::ReplyWait { word, .. } => {
                let Some(to) = self.last_from.take() else {
                    self.pc += 1;
                    return;
                };
                let then = match step {
                    Step::ReplyWait { timeout, .. } => {
                        op.timer = timeout;
                        Then::Any
                    }
                    _ => Then::Nothing,
                };
                op.sent = Some((to.id() as usize, word, then));
                p::begin_send_then(env, &self.me, &to, message(word), then, true);
            }
            Step::Receive {
                from,
                zero,
                timeout,
            } => {
                op.timer = timeout;
                p::begin_receive(env, &self.me, from.map(|f| &all[f]), zero);
            }
            Step::Abort(who) => {
                p::abort(env, &all[who]);
                self.pc += 1;
                return;
            }
            Step::Exit => {
                p::exit(env, &self.me);
                self.exited = true;
                self.pc = self.script.len();
                return;
            }
            Step::Pause(n) => {
                op.pause = true;
                op.timer = Some(n);
            }
        }
        assert_ne!(op.timer, Some(0), "a timeout of zero is `zero`");
        self.op = Some(op);
    }

    /// Whether the thread can go on without mail: woken, or its timer runs.
    fn busy(&self, env: &ModelEnv) -> bool {
        env.woken[self.idx] || self.op.as_ref().is_some_and(|o| o.timer.is_some())
    }
}

/// A worker: requests, then green threads, then sleep, until all work is over.
fn worker(mut env: ModelEnv, mut gs: Vec<Green>, all: Vec<Arc<Ipc>>) -> (Vec<Green>, Vec<String>) {
    loop {
        let mut mail = Vec::new();
        env.ep.poll(|_, r| mail.push(r));
        for r in mail {
            env.trace.push(format!("{:?} {}", r.op, r.who.id()));
            p::handle(&mut env, r);
            env.done_one();
        }
        for g in gs.iter_mut() {
            g.step(&mut env, &all);
        }
        if env.pending.load(Acquire) == 0 {
            break;
        }
        if gs.iter().any(|g| g.busy(&env)) {
            loom::thread::yield_now();
        } else {
            env.ep.wait(None);
        }
    }
    // Nothing is left queued for any live thread, and each is idle.
    for g in &gs {
        if g.exited {
            continue;
        }
        p::begin_receive(&mut env, &g.me, None, true);
        assert_eq!(p::next(&g.me), Next::Done);
        match p::finish(&g.me) {
            Err((Fail::TimedOut, Stage::Receive, None, None)) => {}
            Ok(Some((from, m))) => panic!(
                "thread {}: a send from thread {} (word {}) was left queued",
                g.idx,
                from.id(),
                m.words[0]
            ),
            r => panic!("thread {}: a zero receive at the end gave {r:?}", g.idx),
        }
    }
    (gs, env.trace)
}

// ---- Running a model ----

/// A model: how many workers, and each thread's worker and script. Thread `i` has id
/// `i`.
struct Model {
    workers: usize,
    threads: Vec<(usize, Vec<Step>)>,
    bound: usize,
}

/// What an execution did.
#[derive(Debug)]
struct Outcome {
    /// Per thread, the log of its operations.
    threads: Vec<Vec<Log>>,
    /// Per worker, its trace (`ModelEnv::trace`).
    trace: Vec<Vec<String>>,
}

impl Outcome {
    /// The result of thread `t`'s `i`th operation.
    fn res(&self, t: usize, i: usize) -> &Res {
        &self.threads[t][i].res
    }

    /// Where `what` is in worker `w`'s trace.
    fn at(&self, w: usize, what: &str) -> Option<usize> {
        self.trace[w].iter().position(|e| e == what)
    }
}

/// Runs `m` under loom; `check` sees every execution's outcome and returns a label of
/// it; the set of labels seen over all executions is returned.
fn explore(
    m: Model,
    check: impl Fn(&Outcome) -> String + Send + Sync + 'static,
) -> BTreeSet<String> {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let seen2 = seen.clone();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runs2 = runs.clone();
    let mut b = loom::model::Builder::new();
    // Every interleaving with up to `bound` preemptions (WEFT_LOOM_FULL=1: one more).
    b.preemption_bound = Some(m.bound + std::env::var_os("WEFT_LOOM_FULL").map_or(0, |_| 1));
    let m = Arc::new(m);
    b.check(move || {
        let out = run(&m);
        account(&out);
        let label = check(&out);
        seen2.lock().unwrap().insert(label);
        runs2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let s = seen.lock().unwrap().clone();
    eprintln!(
        "{} executions; outcomes seen: {s:#?}",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
    s
}

fn run(m: &Model) -> Outcome {
    let eps = matrix::<Req>(m.workers, 4).unwrap();
    let remote = eps[0].remote();
    let pending = Arc::new(AtomicUsize::new(m.threads.len()));
    let all: Vec<Arc<Ipc>> = m
        .threads
        .iter()
        .enumerate()
        .map(|(i, (w, _))| {
            Arc::new(Ipc::new(
                i as u64,
                Host {
                    ptr: Box::into_raw(Box::new(Th { worker: *w })) as *const (),
                    worker: th_worker,
                    release: th_release,
                    realm: 0,
                },
            ))
        })
        .collect();
    let mut per_worker: Vec<Vec<Green>> = (0..m.workers).map(|_| Vec::new()).collect();
    for (i, (w, script)) in m.threads.iter().enumerate() {
        per_worker[*w].push(Green {
            idx: i,
            me: all[i].clone(),
            script: script.clone(),
            pc: 0,
            op: None,
            last_from: None,
            log: Vec::new(),
            exited: false,
            done: false,
        });
    }
    let mut handles = Vec::new();
    let mut first = None;
    for (w, (ep, gs)) in eps.into_iter().zip(per_worker).enumerate().rev() {
        let env = ModelEnv {
            here: w,
            ep,
            pending: pending.clone(),
            woken: vec![false; all.len()],
            trace: Vec::new(),
        };
        if w == 0 {
            first = Some((env, gs)); // worker 0 runs on the model's own thread
        } else {
            let all = all.clone();
            handles.push(loom::thread::spawn(move || worker(env, gs, all)));
        }
    }
    let (env, gs) = first.unwrap();
    let (mut done, t0) = worker(env, gs, all.clone());
    let mut trace = vec![t0];
    for h in handles.into_iter().rev() {
        let (gs, t) = h.join().unwrap();
        done.extend(gs);
        trace.push(t);
    }
    let mut left = 0;
    // SAFETY: every endpoint is gone (the workers returned and dropped them).
    unsafe { remote.drain(|_| left += 1) };
    assert_eq!(left, 0, "requests left in the boxes");
    assert_eq!(pending.load(Acquire), 0);
    done.sort_by_key(|g| g.idx);
    Outcome {
        threads: done.into_iter().map(|g| g.log).collect(),
        trace,
    }
}

/// Every message received exactly once or given back to its sender, never both.
fn account(out: &Outcome) {
    // word -> (receiver, sender) of each receipt
    let mut got: HashMap<u64, Vec<(usize, usize)>> = HashMap::new();
    for (t, log) in out.threads.iter().enumerate() {
        for l in log {
            if let Res::Got { from, word } = l.res {
                got.entry(word).or_default().push((t, from));
            }
        }
    }
    let mut sent_words = BTreeSet::new();
    for (t, log) in out.threads.iter().enumerate() {
        for l in log {
            let Some((to, w, then)) = l.sent else {
                continue;
            };
            assert!(sent_words.insert(w), "word {w} sent twice by the script");
            let r = got.get(&w).map_or(&[][..], |v| &v[..]);
            assert!(
                r.len() <= 1,
                "message {w} received {} times: {out:?}",
                r.len()
            );
            if let Some(&(rx, from)) = r.first() {
                assert_eq!((rx, from), (to, t), "message {w} went astray: {out:?}");
            }
            let delivered = match &l.res {
                Res::Sent => then == Then::Nothing,
                Res::Got { from, .. } => match then {
                    Then::Partner => *from == to,
                    Then::Any => true,
                    Then::Nothing => false,
                },
                Res::Failed {
                    stage: Stage::Receive,
                    unsent: None,
                    ..
                } => then != Then::Nothing,
                Res::Failed {
                    stage: Stage::Send,
                    unsent: Some(u),
                    ..
                } => {
                    assert_eq!(*u, w, "thread {t} got another message back: {out:?}");
                    false
                }
                r => panic!("thread {t}: send of {w} ended with {r:?}: {out:?}"),
            };
            assert_eq!(
                r.len(),
                delivered as usize,
                "thread {t}'s send of {w} ended with {:?} but was received {} times: {out:?}",
                l.res,
                r.len()
            );
        }
    }
    for w in got.keys() {
        assert!(sent_words.contains(w), "word {w} received but never sent");
    }
}

fn short(r: &Res) -> String {
    match r {
        Res::Sent => "sent".into(),
        Res::Got { word, .. } => format!("got {word}"),
        Res::Failed { why, stage, .. } => format!("{why:?}@{stage:?}"),
    }
}

/// A label for an execution: each thread's results (with `+c` when it cancelled).
fn label(out: &Outcome) -> String {
    out.threads
        .iter()
        .enumerate()
        .map(|(t, log)| {
            let r: Vec<String> = log
                .iter()
                .map(|l| format!("{}{}", short(&l.res), if l.cancelled { "+c" } else { "" }))
                .collect();
            format!("t{t}: {};", r.join(", "))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn expect_seen(seen: &BTreeSet<String>, wanted: &[&str]) {
    for w in wanted {
        assert!(
            seen.iter().any(|s| s.contains(w)),
            "no execution reached `{w}`; seen: {seen:#?}"
        );
    }
}

// ---- The models ----

/// Whether worker `w` did `a` before `b` (both happened).
fn before(out: &Outcome, w: usize, a: &str, b: &str) -> bool {
    matches!((out.at(w, a), out.at(w, b)), (Some(x), Some(y)) if x < y)
}

/// Whether worker `w` did `x` after a `start` and before the next `end`.
fn during(out: &Outcome, w: usize, start: &str, x: &str, end: &str) -> bool {
    let mut open = false;
    for e in &out.trace[w] {
        if e == start {
            open = true;
        } else if e == end {
            open = false;
        } else if e == x && open {
            return true;
        }
    }
    false
}

/// How a cancelled send of thread `t` (on worker `w`) was answered: `Removed` (the send
/// fails) or `Missed` after the send's own outcome (which then stands). A call's delivery
/// is not acknowledged: for a call, a Missed with no answer before it means the request
/// was delivered, and then the call must have failed at its receive stage.
fn cancel_answer(out: &Outcome, w: usize, t: usize) -> &'static str {
    let removed = out.at(w, &format!("Removed {t}"));
    let missed = out.at(w, &format!("Missed {t}"));
    match (removed, missed) {
        (Some(_), None) => "removed",
        (None, Some(m)) => {
            let answered = ["Delivered", "Refused", "Dead"]
                .iter()
                .filter_map(|a| out.at(w, &format!("{a} {t}")))
                .any(|a| a < m);
            let call = out.threads[t]
                .iter()
                .any(|l| matches!(l.sent, Some((_, _, Then::Partner))));
            if !answered {
                assert!(call, "a Missed before the send's answer: {out:?}");
                assert!(
                    out.threads[t].iter().any(|l| matches!(
                        l.res,
                        Res::Failed {
                            stage: Stage::Receive,
                            ..
                        }
                    )),
                    "a call whose cancel missed (delivered) failed at its receive stage: {out:?}"
                );
            }
            "missed"
        }
        (None, None) => "no answer",
        _ => panic!("both Removed and Missed: {out:?}"),
    }
}

/// (a) Thread 0 (worker 0) sends to thread 1 (worker 1) with a timeout; thread 1
/// receives with a timeout. The send's timeout lands while its Send is in flight,
/// queued, or being delivered: it is delivered (and the cancel misses) or removed
/// from the queue (and given back), never both.
#[test]
fn delivery_races_the_senders_timeout() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![send(1, 10, Some(1))]),
                (1, vec![receive(None, Some(2))]),
            ],
            bound: 2,
        },
        |out| {
            let (s, r) = (&out.threads[0][0], &out.threads[1][0]);
            match &s.res {
                Res::Sent => assert_eq!(r.res, Res::Got { from: 0, word: 10 }),
                Res::Failed {
                    why: Fail::TimedOut,
                    stage: Stage::Send,
                    unsent: Some(10),
                } => assert!(matches!(r.res, Res::Failed { .. })),
                x => panic!("{x:?}"),
            }
            let answer = if s.cancelled {
                let a = cancel_answer(out, 0, 0);
                assert_eq!(a == "removed", s.res != Res::Sent, "{out:?}");
                a
            } else {
                ""
            };
            let queued = before(out, 1, "Send 0", "t1 receive");
            format!(
                "{} {answer}{}",
                label(out),
                if queued { " queued" } else { "" }
            )
        },
    );
    expect_seen(
        &seen,
        &[
            "t0: sent; t1: got 10; ",
            // Delivered (to a waiting receive) while the cancel was on its way.
            "t0: sent+c; t1: got 10; missed",
            // Taken from the queue by the receive while the cancel was on its way.
            "t0: sent+c; t1: got 10; missed queued",
            // Removed from the queue by the cancel.
            "t0: TimedOut@Send+c; t1: TimedOut@Receive+c; removed",
        ],
    );
}

/// (a)+(b) A call with a timeout against a server that receives (with a timeout) and
/// replies with timeout zero: the call's timeout lands before the delivery, between
/// delivery and reply, or after the reply. The reply is delivered exactly when the
/// caller still waits for it, and refused (given back) when it gave up. The server
/// pauses one turn before it receives, so the call may also arrive, be queued and be
/// cancelled before the server receives (see "Reaching the races" above).
#[test]
fn a_call_times_out_at_either_stage_while_the_server_replies() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![call(1, 10, Some(2))]),
                (
                    1,
                    vec![
                        Step::Pause(1),
                        receive(None, Some(2)),
                        Step::ReplyWait {
                            word: 20,
                            timeout: Some(1),
                        },
                    ],
                ),
            ],
            bound: 2,
        },
        |out| {
            let c = &out.threads[0][0];
            let srv = &out.threads[1];
            match &c.res {
                Res::Got { word: 20, .. } => assert!(
                    matches!(
                        srv[1].res,
                        Res::Failed {
                            why: Fail::TimedOut,
                            stage: Stage::Receive,
                            unsent: None
                        }
                    ),
                    "the reply was delivered, then nothing came: {out:?}"
                ),
                Res::Failed {
                    stage: Stage::Receive,
                    why: Fail::TimedOut,
                    ..
                } => assert_eq!(
                    srv[1].res,
                    Res::Failed {
                        why: Fail::TimedOut,
                        stage: Stage::Send,
                        unsent: Some(20)
                    },
                    "a reply to a caller that gave up is refused and given back"
                ),
                Res::Failed {
                    stage: Stage::Send, ..
                } => assert_eq!(srv.len(), 1, "no request, no reply"),
                x => panic!("{x:?}"),
            }
            // Gave up while the call was still being sent (a Cancel went to worker
            // 1), or in its receive stage (nothing to ask).
            let answer = if out.at(1, "Cancel 0").is_some() {
                cancel_answer(out, 0, 0)
            } else {
                ""
            };
            format!("{} {answer}", label(out))
        },
    );
    expect_seen(
        &seen,
        &[
            "t0: got 20; t1: got 10, TimedOut@Receive+c; ",
            "t0: TimedOut@Send+c; t1: TimedOut@Receive+c; removed",
            // Delivered while cancelling: the call fails at the receive stage.
            "t0: TimedOut@Receive+c; t1: got 10, TimedOut@Send; missed",
            // Timed out in the receive stage, before the reply came.
            "t0: TimedOut@Receive+c; t1: got 10, TimedOut@Send; ",
        ],
    );
    assert!(
        !seen.iter().any(|s| s.contains("no answer")),
        "a cancel without an answer: {seen:?}"
    );
}

/// (b) Thread 1 receives from thread 0 only (posting a Watch to worker 0), with a
/// timeout; thread 0 sends with timeout zero: delivered if the receive is there when
/// the Send arrives, refused otherwise; never both.
#[test]
fn a_receive_times_out_while_a_zero_send_arrives() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (
                    0,
                    vec![Step::Send {
                        to: 1,
                        word: 10,
                        then: Then::Nothing,
                        zero: true,
                        timeout: None,
                    }],
                ),
                (1, vec![receive(Some(0), Some(1))]),
            ],
            bound: 3,
        },
        |out| {
            let (s, r) = (&out.threads[0][0], &out.threads[1][0]);
            assert_eq!(s.res == Res::Sent, matches!(r.res, Res::Got { .. }));
            label(out)
        },
    );
    expect_seen(
        &seen,
        &[
            "t0: sent; t1: got 10;",
            "t0: TimedOut@Send; t1: TimedOut@Receive+c;",
        ],
    );
}

/// (b) A call from worker 0 to a server on worker 1, and a thread on worker 1 that
/// aborts the caller (`ipc::cancel`) at once; the server starts receiving a little
/// later, and the caller calls after a one-turn pause. The abort lands before the call
/// starts (and is ignored), while it is in flight, queued, or awaiting its reply.
#[test]
fn an_abort_races_a_call() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                // A timeout too, for when the abort lands before the call starts.
                (0, vec![Step::Pause(1), call(1, 10, Some(3))]),
                (
                    1,
                    vec![
                        Step::Pause(1),
                        receive(None, Some(2)),
                        Step::Reply { word: 20 },
                    ],
                ),
                (1, vec![Step::Abort(0)]),
            ],
            bound: 2,
        },
        |out| {
            let c = &out.threads[0][0];
            let srv = &out.threads[1];
            match &c.res {
                Res::Got { .. } => {}
                Res::Failed {
                    why: Fail::Cancelled | Fail::TimedOut,
                    stage: Stage::Receive,
                    ..
                } => assert!(
                    srv.len() == 2 && srv[1].res != Res::Sent,
                    "the reply to a call that gave up is refused"
                ),
                Res::Failed {
                    why: Fail::Cancelled | Fail::TimedOut,
                    stage: Stage::Send,
                    ..
                } => {}
                x => panic!("{x:?}"),
            }
            let early = before(out, 0, "Abort 0", "t0 call");
            format!("{}{}", label(out), if early { " early" } else { "" })
        },
    );
    expect_seen(
        &seen,
        &[
            "t0: got 20; t1: got 10, sent; t2: ; early",
            "t0: Cancelled@Send+c;",
            "t0: Cancelled@Receive+c;",
        ],
    );
}

/// (c) The atomic send-to-receive transition: thread 0 (worker 0) calls the server
/// (worker 1) twice, thread 2 (worker 1, the server's own) once; the server receives,
/// replies and waits (`reply_and_wait`: the reply with timeout zero) twice, and
/// replies. Every reply must be delivered; a call that comes while a reply is in
/// flight waits in the queue and is taken when the reply's delivery is acknowledged.
#[test]
fn a_reply_with_timeout_zero_is_always_delivered() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![call(1, 10, None), call(1, 11, None)]),
                (
                    1,
                    vec![
                        receive(None, None),
                        Step::ReplyWait {
                            word: 20,
                            timeout: None,
                        },
                        Step::ReplyWait {
                            word: 21,
                            timeout: None,
                        },
                        Step::Reply { word: 22 },
                    ],
                ),
                (1, vec![call(1, 12, None)]),
            ],
            bound: 2,
        },
        |out| {
            for (t, log) in out.threads.iter().enumerate() {
                for l in log {
                    assert!(
                        !matches!(l.res, Res::Failed { .. }),
                        "thread {t}: {:?}: {out:?}",
                        l.res
                    );
                }
            }
            // Thread 2's call came while a reply was in flight: queued, and taken as
            // the reply's delivery was acknowledged.
            let queued = during(out, 1, "t1 replywait", "t2 call", "Delivered 1");
            format!("{}{}", label(out), if queued { " queued" } else { "" })
        },
    );
    expect_seen(&seen, &["t1: got 10", "t1: got 12", " queued"]);
}

/// (c) A call with timeout zero (which applies to the send): refused if the server is
/// not receiving when it arrives; if delivered, the server's reply (zero) always is.
#[test]
fn a_zero_call_is_refused_or_answered() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![zero_call(1, 10)]),
                (1, vec![receive(None, Some(2)), Step::Reply { word: 20 }]),
            ],
            bound: 3,
        },
        |out| {
            let c = &out.threads[0][0];
            let srv = &out.threads[1];
            match &c.res {
                Res::Got { word: 20, .. } => assert_eq!(srv[1].res, Res::Sent),
                Res::Failed {
                    why: Fail::TimedOut,
                    stage: Stage::Send,
                    unsent: Some(10),
                } => assert_eq!(srv.len(), 1),
                x => panic!("{x:?}"),
            }
            label(out)
        },
    );
    expect_seen(&seen, &["t0: got 20", "t0: TimedOut@Send"]);
}

/// (c) The atomic transition of `reply_and_wait` from its reply to its receive: the
/// server is receiving from the moment its reply is delivered, so a caller's next call
/// with timeout zero, right after the reply, always finds it waiting.
#[test]
fn a_zero_call_right_after_a_reply_and_wait_is_always_taken() {
    explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![call(1, 10, None), zero_call(1, 11)]),
                (
                    1,
                    vec![
                        receive(None, None),
                        Step::ReplyWait {
                            word: 20,
                            timeout: None,
                        },
                        Step::Reply { word: 21 },
                    ],
                ),
            ],
            bound: 2,
        },
        |out| {
            assert_eq!(
                out.threads[0]
                    .iter()
                    .map(|l| l.res.clone())
                    .collect::<Vec<_>>(),
                [
                    Res::Got { from: 1, word: 20 },
                    Res::Got { from: 1, word: 21 }
                ],
                "{out:?}"
            );
            label(out)
        },
    );
}

/// Where thread `t`'s Send met the exit of thread `r` on worker `w`: queued before
/// the exit, arriving after it, or never sent (seen dead at once).
fn met_exit(out: &Outcome, w: usize, t: usize, r: usize) -> &'static str {
    let send = format!("Send {t}");
    let exit = format!("t{r} exit");
    match out.at(w, &send) {
        None => "unsent",
        Some(_) if before(out, w, &send, &exit) => "queued",
        Some(_) => "late",
    }
}

/// (d) Thread 1 (worker 1) exits; thread 0 (worker 0) sends to it without a timeout,
/// and thread 2 (worker 0) with one. Each Send is queued when the receiver exits, in
/// flight, or not sent at all (the receiver is seen dead at once): always `Dead` (or
/// the timeout, for thread 2), at the send stage, with the message given back.
#[test]
fn a_dying_receiver_refuses_queued_and_late_senders() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![send(1, 10, None)]),
                (1, vec![Step::Exit]),
                (0, vec![send(1, 12, Some(1))]),
            ],
            bound: 2,
        },
        |out| {
            assert_eq!(
                *out.res(0, 0),
                Res::Failed {
                    why: Fail::Dead,
                    stage: Stage::Send,
                    unsent: Some(10)
                }
            );
            assert!(matches!(
                out.res(2, 0),
                Res::Failed {
                    why: Fail::Dead | Fail::TimedOut,
                    stage: Stage::Send,
                    unsent: Some(12)
                }
            ));
            format!(
                "{} t0 {}, t2 {}",
                label(out),
                met_exit(out, 1, 0, 1),
                met_exit(out, 1, 2, 1)
            )
        },
    );
    expect_seen(
        &seen,
        &[
            "t0 queued",
            "t0 late",
            "t0 unsent",
            "t2: Dead@Send+c; t0 queued, t2 queued", // the cancel missed: Dead first
            "t2: TimedOut@Send+c",                   // removed before the exit
        ],
    );
}

/// (d) A server on worker 1 takes one call and exits without replying; thread 0
/// (worker 0) made that call, thread 2 (worker 0) receives from the server only (its
/// Watch reaches the server before or after the exit, or it sees the server dead at
/// once). Both are told the server died; the request was received once.
#[test]
fn a_dying_server_fails_its_caller_and_watchers() {
    let seen = explore(
        Model {
            workers: 2,
            threads: vec![
                (0, vec![call(1, 10, None)]),
                (1, vec![receive(None, None), Step::Exit]),
                (0, vec![receive(Some(1), None)]),
            ],
            bound: 2,
        },
        |out| {
            let dead_rx = Res::Failed {
                why: Fail::Dead,
                stage: Stage::Receive,
                unsent: None,
            };
            assert_eq!(*out.res(0, 0), dead_rx);
            assert_eq!(*out.res(1, 0), Res::Got { from: 0, word: 10 });
            assert_eq!(*out.res(2, 0), dead_rx);
            match out.at(1, "Watch 2") {
                None => "watch: none",
                Some(_) if before(out, 1, "Watch 2", "t1 exit") => "watch: before the exit",
                Some(_) => "watch: after the exit",
            }
            .to_string()
        },
    );
    // (The server exits only after taking the call, which worker 0 posts before it
    // starts thread 2's receive: thread 2 cannot see the server dead at once.)
    expect_seen(&seen, &["watch: before the exit", "watch: after the exit"]);
}

/// Three workers: a call from worker 0 to a server on worker 1, aborted from worker 2
/// (whose request travels in a third box, unordered with the other two).
#[test]
fn an_abort_from_a_third_worker_races_a_call() {
    let seen = explore(
        Model {
            workers: 3,
            threads: vec![
                (0, vec![call(1, 10, Some(3))]),
                (1, vec![receive(None, Some(2)), Step::Reply { word: 20 }]),
                (2, vec![Step::Abort(0)]),
            ],
            bound: 1,
        },
        |out| {
            let c = &out.threads[0][0];
            let srv = &out.threads[1];
            if let Res::Failed {
                stage: Stage::Receive,
                ..
            } = c.res
            {
                assert!(srv.len() == 2 && srv[1].res != Res::Sent);
            }
            label(out)
        },
    );
    expect_seen(
        &seen,
        &[
            "t0: got 20",
            "t0: Cancelled@Send+c",
            "t0: Cancelled@Receive+c",
        ],
    );
}
