//! The blocking commands: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX
//! and BZMPOP, XREAD and XREADGROUP with BLOCK, with CLIENT UNBLOCK (docs/kv-blocking.md has the design and its
//! invariants; this is the code).
//!
//! # Who holds what
//! - A [`Waiter`] is one blocked command: what it pops ([`Op`]), its state (waiting,
//!   or decided: served, timed out, unblocked, gone) moved off "waiting" exactly once
//!   by a compare-and-swap, and the outcome the one who moved it leaves there.
//! - Each shard keeps, in [`Blocked`] (a field of [`Shard`]), the waiters of each
//!   (database, key) in the order they blocked, and the keys that became *ready*: a
//!   command logged a record about a waited key ([`Blocked::note`], from
//!   `Shard::note_logged`; one load when nobody waits on the shard).
//! - After every closure on a shard whose gate no transaction holds, the shard serves
//!   its ready keys ([`serve_ready`], as Redis's `handleClientsBlockedOnKeys` after a
//!   command): the first waiter of a key that holds data of its type is claimed and
//!   its pop runs there, as the command's non-blocking form (`LPOP`, `LMOVE`,
//!   `ZPOPMIN`, ...) through `Shard::run`, so it is logged exactly as that form. The
//!   waiter's connection, parked on its own worker, is woken after the closure.
//! - The connection blocks on a condition variable with its deadline: one timer entry
//!   of its worker. While it waits, a *read-ahead* green thread does the connection's
//!   next read of its socket: an end of file there (the client went, or CLIENT KILL)
//!   cancels the wait. The bytes it reads are the connection's next read.
//!
//! A waiter on keys of several shards is registered on each; the shard that claims it
//! first serves it, the others find it decided and drop it. A BLMOVE whose destination
//! is on another shard than its source cannot be served inside one shard's closure:
//! the source's shard hands the key to it (it stops serving that key), and the
//! connection runs LMOVE itself, as a transaction over both shards.

use super::conn::Conn;
use super::Server;
use crate::commands::{self, Command, Exec, ShardFn};
use crate::exec::{Acks, ShardSet};
use crate::log;
use crate::resp::Reply;
use crate::route;
use crate::shard::{now_ms, Shard};
use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::sync::{Condvar, Mutex};

/// What a blocked command pops once a key has data.
#[derive(Clone, Debug)]
pub enum Op {
    /// BLPOP, BRPOP (`count` None: one element, answered `[key, element]`) and BLMPOP
    /// (`count` Some: up to that many, answered `[key, [elements]]`).
    List { left: bool, count: Option<i64> },
    /// BLMOVE and BRPOPLPUSH: the element moved to `dst`, answered alone.
    Move {
        dst: Vec<u8>,
        from_left: bool,
        to_left: bool,
    },
    /// BZPOPMIN, BZPOPMAX (`count` None: `[key, member, score]`) and BZMPOP
    /// (`count` Some: `[key, [[member, score], ...]]`).
    Zset { min: bool, count: Option<i64> },
    /// XREAD and XREADGROUP with BLOCK: served, by the read of the one key that got
    /// entries, once a key has entries after its ID (or its group's last ID).
    Stream(Arc<StreamRead>),
}

/// A blocked XREAD or XREADGROUP.
#[derive(Debug)]
pub struct StreamRead {
    /// Each key and the ID it waits after (`$` resolved when it blocked; `None`: `>`).
    keys: Vec<(Vec<u8>, Option<crate::keyspace::stream::Id>)>,
    /// XREADGROUP's group and consumer.
    group: Option<(Vec<u8>, Vec<u8>)>,
    noack: bool,
    /// COUNT (0: none).
    count: usize,
}

impl StreamRead {
    fn after(&self, key: &[u8]) -> Option<crate::keyspace::stream::Id> {
        self.keys
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, id)| *id)
    }

    /// The read that serves it on `key`: XREAD or XREADGROUP of that key alone.
    fn args(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let mut a: Vec<Vec<u8>> = Vec::new();
        match &self.group {
            Some((g, c)) => {
                a.extend([
                    b"xreadgroup".to_vec(),
                    b"GROUP".to_vec(),
                    g.clone(),
                    c.clone(),
                ]);
                if self.noack {
                    a.push(b"NOACK".to_vec());
                }
            }
            None => a.push(b"xread".to_vec()),
        }
        if self.count > 0 {
            a.extend([b"COUNT".to_vec(), self.count.to_string().into_bytes()]);
        }
        a.extend([b"STREAMS".to_vec(), key.to_vec()]);
        a.push(match self.after(key) {
            Some(id) => id.text(),
            None => b">".to_vec(),
        });
        a
    }
}

impl Op {
    /// The type (as TYPE names it) a key must hold to serve this op.
    fn wants(&self) -> &'static str {
        match self {
            Op::List { .. } | Op::Move { .. } => "list",
            Op::Zset { .. } => "zset",
            Op::Stream(_) => "stream",
        }
    }

    /// Whether `key` of database `db` can serve this op now (for a list or sorted
    /// set: it holds one; for a stream: it has entries the reader has not seen).
    /// (An XREADGROUP's key that is gone, or holds another type, is ready too: its
    /// reader gets an error.)
    fn ready_on(&self, sh: &Shard, db: u8, key: &[u8], now: u64) -> bool {
        let e = sh.db(db).peek(key, now);
        match (self, e) {
            (Op::Stream(r), e)
                if r.group.is_some() && e.is_none_or(|e| e.kind().name() != "stream") =>
            {
                true
            }
            (_, None) => false,
            (Op::Stream(r), Some(e)) => commands::streams::has_new(
                e,
                r.after(key),
                r.group.as_ref().map(|(g, _)| g.as_slice()),
            ),
            (op, Some(e)) => e.kind().name() == op.wants(),
        }
    }
}

/// A waiter's state: only [`WAITING`] moves, once, to one of the others.
const WAITING: u8 = 0;
/// Claimed by a shard, which leaves the outcome.
const DECIDED: u8 = 1;

/// How a wait ended.
#[derive(Debug)]
pub enum Outcome {
    /// A shard served it: the reply, and the shard and LSN it waits to be written.
    Served(Reply, usize, u64),
    /// The source of a BLMOVE across shards has data: the connection runs LMOVE.
    Retry,
    /// The time ran out, or CLIENT UNBLOCK ... TIMEOUT.
    TimedOut,
    /// CLIENT UNBLOCK ... ERROR.
    Unblocked,
    /// The client closed its connection (or CLIENT KILL closed it).
    Gone,
}

/// One blocked command.
pub struct Waiter {
    state: AtomicU8,
    /// The client closed its connection while this waited (set before the wait is
    /// decided as gone, so that a waiter put back to waiting sees it).
    gone: AtomicBool,
    db: u8,
    op: Op,
    /// Left by whoever moved `state` off [`WAITING`] (a shard does it inside its
    /// closure: a std mutex, never held across a switch).
    outcome: std::sync::Mutex<Option<Outcome>>,
    park: Mutex<()>,
    cv: Condvar,
    /// The connection's own outbox when it tracks keys without REDIRECT: the
    /// invalidations its served command causes are held in it until its reply is sent
    /// (as Redis sends them after the reply).
    hold: std::sync::OnceLock<Arc<crate::pubsub::Subscriber>>,
    /// The blocked connection's id (0: not known): a shard serving it makes the pop
    /// as that connection (NOLOOP: it is not told of its own change, as in Redis).
    conn: std::sync::atomic::AtomicU64,
}

impl Waiter {
    fn new(db: u8, op: Op) -> Arc<Waiter> {
        Arc::new(Waiter {
            state: AtomicU8::new(WAITING),
            gone: AtomicBool::new(false),
            db,
            op,
            outcome: std::sync::Mutex::new(None),
            park: Mutex::new(()),
            cv: Condvar::new(),
            hold: std::sync::OnceLock::new(),
            conn: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// While it waits, the messages of its connection's outbox flow (they were held
    /// when the command started, `server/tracking.rs`); once a shard claimed it, they
    /// stay held until the reply is sent. Under the outbox's lock of the outcome, so
    /// that a shard claiming it at the same moment ([`Waiter::held`]) is ordered with
    /// this.
    fn let_go(&self) {
        let Some(own) = self.hold.get() else { return };
        let _g = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        if self.waiting() {
            own.release();
        }
    }

    /// A shard claimed it and is about to run its pop: its connection's outbox holds
    /// the messages the pop causes until the reply is sent.
    fn held(&self) {
        if let Some(own) = self.hold.get() {
            let _g = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
            own.hold_back();
        }
    }

    fn waiting(&self) -> bool {
        self.state.load(Acquire) == WAITING
    }

    /// Moves the waiter off "waiting": true for the one caller that does.
    fn claim(&self) -> bool {
        self.state
            .compare_exchange(WAITING, DECIDED, SeqCst, SeqCst)
            .is_ok()
    }

    fn set(&self, o: Outcome) {
        *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = Some(o);
    }

    /// Ends the wait with `o` if it is still waiting, and wakes its connection (not
    /// from inside a shard's closure: it takes the parking mutex).
    pub fn decide(&self, o: Outcome) -> bool {
        if !self.claim() {
            return false;
        }
        self.set(o);
        self.wake();
        true
    }

    /// Wakes the connection (its outcome is set).
    fn wake(&self) {
        let _g = self.park.lock();
        self.cv.notify_all();
    }

    /// Waits until the wait is decided, or until `deadline`: then it times out unless
    /// a shard decided it meanwhile (its outcome is then taken, not lost).
    fn wait(&self, deadline: Option<Instant>) -> Outcome {
        let mut g = self.park.lock();
        loop {
            if let Some(o) = self
                .outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
            {
                return o;
            }
            match deadline {
                None => g = self.cv.wait(g),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        if self.claim() {
                            return Outcome::TimedOut;
                        }
                        // Decided at the same moment: its outcome comes with a wake-up.
                        g = self.cv.wait(g);
                    } else {
                        g = self.cv.wait_timeout(g, d - now).0;
                    }
                }
            }
        }
    }
}

/// The key of `key` of database `db` in [`Blocked`]'s map.
fn id(db: u8, key: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + key.len());
    v.push(db);
    v.extend_from_slice(key);
    v
}

/// One shard's waiters (module doc).
#[derive(Default)]
pub struct Blocked {
    /// The waiters of each (database, key), first blocked first.
    /// (Keyed by the database's number followed by the key: [`id`].)
    keys: HashMap<Vec<u8>, VecDeque<Arc<Waiter>>>,
    /// A key's [`id`] being looked up (reused: checking a written key allocates
    /// nothing).
    probe: Vec<u8>,
    /// Waited keys that a command wrote to since they were last served, in order.
    ready: Vec<(u8, Vec<u8>)>,
}

impl Blocked {
    /// Whether no one waits on this shard (the check after every write: one load).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether keys wait to be served.
    #[inline]
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    fn mark(&mut self, db: u8, key: &[u8]) {
        if !self.ready.iter().any(|(d, k)| *d == db && k == key) {
            self.ready.push((db, key.to_vec()));
        }
    }

    /// Notes the keys that `records` (whole log frames a command just appended) wrote
    /// to and someone waits on. A record about whole databases (SWAPDB) makes every
    /// waited key ready.
    pub fn note(&mut self, records: &[u8]) {
        let mut at = 0;
        while at < records.len() {
            let Ok((db, rec, n)) = log::decode_frame(&records[at..]) else {
                return;
            };
            match rec.key() {
                Some(key) => {
                    self.probe.clear();
                    self.probe.push(db);
                    self.probe.extend_from_slice(key);
                    if self.keys.contains_key(&self.probe) {
                        self.mark(db, key);
                    }
                }
                None => {
                    let all: Vec<Vec<u8>> = self.keys.keys().cloned().collect();
                    for k in all {
                        self.mark(k[0], &k[1..]);
                    }
                }
            }
            at += n;
        }
    }

    /// Adds `w` to the waiters of `key` (at the front: a BLMOVE handed a key that it
    /// could not take).
    fn add(&mut self, key: &[u8], w: &Arc<Waiter>, front: bool) {
        let q = self.keys.entry(id(w.db, key)).or_default();
        if q.iter().any(|x| Arc::ptr_eq(x, w)) {
            return;
        }
        if front {
            q.push_front(w.clone());
        } else {
            q.push_back(w.clone());
        }
    }

    /// Removes `w` from the waiters of `key`.
    fn remove(&mut self, key: &[u8], w: &Arc<Waiter>) {
        let k = id(w.db, key);
        if let Some(q) = self.keys.get_mut(&k) {
            q.retain(|x| !Arc::ptr_eq(x, w));
            if q.is_empty() {
                self.keys.remove(&k);
            }
        }
    }
}

/// The shard function of the non-blocking command `name`, if the table has one.
fn shard_fn(name: &str) -> Option<ShardFn> {
    match commands::lookup(name.as_bytes())?.exec {
        Exec::Shard(f) | Exec::Split(f, _) => Some(f),
        Exec::Server => None,
    }
}

fn side(left: bool) -> &'static [u8] {
    if left {
        b"LEFT"
    } else {
        b"RIGHT"
    }
}

/// Whether `key` of database `db` holds a value of the type `op` pops (`Some(false)`:
/// another type; `None`: missing).
fn holds(sh: &Shard, db: u8, key: &[u8], op: &Op, now: u64) -> Option<bool> {
    sh.db(db)
        .peek(key, now)
        .map(|e| e.kind().name() == op.wants())
}

/// Whether an element can move from `src` to the destination of `op` inside one
/// shard's closure (of `count` shards): both keys are that shard's.
fn local_move(op: &Op, src: &[u8], count: usize) -> bool {
    match op {
        Op::Move { dst, .. } => route::shard_of(dst, count) == route::shard_of(src, count),
        _ => true,
    }
}

/// Runs `op`'s pop on `key` of shard `sh` (which holds data of its type), as its
/// non-blocking command: the blocking command's reply, and the LSN it waits for.
/// `None` when the pop cannot run inside one shard (a BLMOVE across shards).
fn pop(
    sh: &mut Shard,
    db: u8,
    key: &[u8],
    op: &Op,
    now: u64,
    shards: usize,
) -> Option<(Reply, u64)> {
    let (name, count) = match op {
        Op::Stream(r) => {
            // An XREADGROUP whose key or group went meanwhile: an error, as Redis.
            if let Some((g, _)) = &r.group {
                let gone = match sh.db(db).peek(key, now) {
                    Some(e) if e.kind().name() == "stream" => {
                        if commands::streams::has_group(e, g) {
                            None
                        } else {
                            Some("NOGROUP the consumer group this client was blocked on no longer exists")
                        }
                    }
                    _ => Some("UNBLOCKED the stream key no longer exists"),
                };
                if let Some(e) = gone {
                    return Some((Reply::err(e), sh.appended));
                }
            }
            let args = r.args(key);
            let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let f: ShardFn = if r.group.is_some() {
                commands::streams::xreadgroup
            } else {
                commands::streams::xread
            };
            return Some(sh.run(f, db, &argv, now, None));
        }
        Op::List { left, count } => (if *left { "lpop" } else { "rpop" }, count),
        Op::Zset { min, count } => (if *min { "zpopmin" } else { "zpopmax" }, count),
        Op::Move {
            dst,
            from_left,
            to_left,
        } => {
            if !local_move(op, key, shards) {
                return None;
            }
            // LMOVE with both keys on this shard (the table's LMOVE is the server's,
            // which also handles keys of two shards).
            let args: Vec<&[u8]> = vec![b"lmove", key, dst, side(*from_left), side(*to_left)];
            let (r, lsn) = sh.run(commands::lists::lmove, db, &args, now, None);
            return Some((shape(op, key, r), lsn));
        }
    };
    let n = count.map(|c| c.to_string());
    let mut args: Vec<&[u8]> = vec![name.as_bytes(), key];
    args.extend(n.as_deref().map(str::as_bytes));
    let f = shard_fn(name)?;
    let (r, lsn) = sh.run(f, db, &args, now, None);
    Some((shape(op, key, r), lsn))
}

/// The blocking command's reply from its non-blocking form's reply `r` on `key`.
fn shape(op: &Op, key: &[u8], r: Reply) -> Reply {
    if r.is_error() {
        return r;
    }
    let k = || Reply::Bulk(key.to_vec());
    match op {
        Op::Move { .. } | Op::Stream(_) => r,
        Op::List { .. } => Reply::Array(vec![k(), r]),
        Op::Zset { count, .. } => {
            let pairs = score_pairs(r);
            match count {
                None => {
                    let mut v = vec![k()];
                    if let Some((m, s)) = pairs.into_iter().next() {
                        v.extend([m, s]);
                    }
                    Reply::Array(v)
                }
                Some(_) => Reply::Array(vec![
                    k(),
                    Reply::Array(
                        pairs
                            .into_iter()
                            .map(|(m, s)| Reply::Array(vec![m, s]))
                            .collect(),
                    ),
                ]),
            }
        }
    }
}

/// The (member, score) pairs of a ZPOPMIN/ZPOPMAX reply, whatever its shape (a flat
/// array, pairs, or an array of two-element arrays).
fn score_pairs(r: Reply) -> Vec<(Reply, Reply)> {
    match r {
        Reply::Pairs(p) | Reply::Map(p) => p,
        Reply::Array(v) if v.iter().all(|x| matches!(x, Reply::Array(_))) => v
            .into_iter()
            .filter_map(|x| match x {
                Reply::Array(mut p) if p.len() == 2 => {
                    let s = p.pop()?;
                    let m = p.pop()?;
                    Some((m, s))
                }
                _ => None,
            })
            .collect(),
        Reply::Array(v) => {
            let mut it = v.into_iter();
            let mut out = Vec::new();
            while let (Some(m), Some(s)) = (it.next(), it.next()) {
                out.push((m, s));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Serves the ready keys of shard `s` (on its worker, inside its closure; no
/// transaction holds it): for each key, while it holds data, its first waiter of that
/// type is claimed and served. Answers the waiters to wake once the closure is done.
pub fn serve_ready(sh: &mut Shard, s: usize, shards: usize, now: u64) -> Vec<Arc<Waiter>> {
    let mut woken = Vec::new();
    while !sh.blocked.ready.is_empty() {
        let (db, key) = sh.blocked.ready.remove(0);
        let slot = id(db, &key);
        while let Some(q) = sh.blocked.keys.get_mut(&slot) {
            q.retain(|w| w.waiting());
            let waiters: Vec<Arc<Waiter>> = q.iter().cloned().collect();
            let at = waiters
                .iter()
                .position(|w| w.op.ready_on(sh, db, &key, now));
            let q = sh.blocked.keys.get_mut(&slot).expect("looked up above");
            let w = at.map(|at| q.remove(at).expect("a position of the queue"));
            if q.is_empty() {
                sh.blocked.keys.remove(&slot);
            }
            let Some(w) = w else {
                break;
            };
            if !w.claim() {
                continue;
            }
            w.held();
            let me = w.conn.load(Relaxed);
            match crate::pubsub::tracking::as_writer(me, || pop(sh, db, &key, &w.op, now, shards)) {
                Some((reply, lsn)) => {
                    w.set(Outcome::Served(reply, s, lsn));
                    woken.push(w);
                }
                None => {
                    // A BLMOVE to another shard: the key is its to take.
                    w.set(Outcome::Retry);
                    woken.push(w);
                    break;
                }
            }
        }
    }
    woken
}

/// Wakes the waiters [`serve_ready`] decided (after its closure).
pub fn wake_all(woken: Vec<Arc<Waiter>>) {
    for w in woken {
        w.wake();
    }
}

/// A blocking command, parsed.
struct Request {
    keys: Vec<Vec<u8>>,
    op: Op,
    /// Milliseconds to wait (0: forever).
    timeout_ms: u64,
}

/// The timeout argument, in seconds with decimals, as Redis reads it: a number
/// `strtold` takes whole (else `ERR timeout is not a float or out of range`), then
/// milliseconds rounded up; negative, `ERR timeout is negative`. 0 waits forever.
pub fn parse_timeout(arg: &[u8]) -> Result<u64, Reply> {
    use commands::float80::F80;
    let v = commands::float80::parse(arg)
        .map_err(|_| Reply::err("ERR timeout is not a float or out of range"))?;
    let secs = match v {
        F80::Zero(_) => 0.0,
        F80::Inf(neg) => {
            if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }
        F80::Finite { neg, m, e } => {
            let x = m as f64 * 2f64.powi(e);
            if neg {
                -x
            } else {
                x
            }
        }
    };
    let ms = (secs * 1000.0).ceil();
    // Redis converts to a 64-bit integer: past its range, the result is negative.
    if !(0.0..9.223_372_036_854_775e18).contains(&ms) {
        return Err(Reply::err("ERR timeout is negative"));
    }
    Ok(ms as u64)
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// LEFT or RIGHT (any case), else `ERR syntax error`.
fn where_arg(a: &[u8]) -> Result<bool, Reply> {
    if eq(a, "left") {
        Ok(true)
    } else if eq(a, "right") {
        Ok(false)
    } else {
        Err(commands::SYNTAX_ERR)
    }
}

/// A positive count or number of keys, as Redis's getRangeLongFromObjectOrReply(1,
/// LONG_MAX) reads it: not an integer, or below 1, `ERR <what> should be greater
/// than 0`.
fn positive(a: &[u8], what: &str) -> Result<i64, Reply> {
    match commands::parse_i64(a) {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(Reply::error(format!("ERR {what} should be greater than 0"))),
    }
}

/// BLMPOP's or BZMPOP's arguments: the keys, whether it pops from the left (MIN), the
/// count, the timeout in milliseconds.
type Mpop = (Vec<Vec<u8>>, bool, i64, u64);

/// BLMPOP / BZMPOP: `timeout numkeys key... where [COUNT count]` (arguments from 1).
/// `min_max`: the words of `where` are MIN/MAX (else LEFT/RIGHT).
///
/// Checked in Redis's order: numkeys, where, COUNT, and the timeout last.
fn parse_mpop(args: &[Vec<u8>], min_max: bool) -> Result<Mpop, Reply> {
    let numkeys = positive(&args[2], "numkeys")?;
    let where_at = 3usize.saturating_add(numkeys as usize);
    if numkeys as u64 >= args.len() as u64 || where_at >= args.len() {
        return Err(commands::SYNTAX_ERR);
    }
    let w = &args[where_at];
    let first = if min_max {
        if eq(w, "min") {
            true
        } else if eq(w, "max") {
            false
        } else {
            return Err(commands::SYNTAX_ERR);
        }
    } else {
        where_arg(w)?
    };
    let mut count = -1;
    let mut j = where_at + 1;
    while j < args.len() {
        if count == -1 && eq(&args[j], "count") && j + 1 < args.len() {
            count = positive(&args[j + 1], "count")?;
            j += 2;
        } else {
            return Err(commands::SYNTAX_ERR);
        }
    }
    let timeout = parse_timeout(&args[1])?;
    let keys = args[3..where_at].to_vec();
    Ok((keys, first, count.max(1), timeout))
}

/// The request of blocking command `cmd` (arity checked), or its argument error, in
/// the order Redis checks them.
fn parse(cmd: &str, args: &[Vec<u8>]) -> Result<Request, Reply> {
    let last = args.len() - 1;
    Ok(match cmd {
        "blpop" | "brpop" => Request {
            timeout_ms: parse_timeout(&args[last])?,
            keys: args[1..last].to_vec(),
            op: Op::List {
                left: cmd == "blpop",
                count: None,
            },
        },
        "bzpopmin" | "bzpopmax" => Request {
            timeout_ms: parse_timeout(&args[last])?,
            keys: args[1..last].to_vec(),
            op: Op::Zset {
                min: cmd == "bzpopmin",
                count: None,
            },
        },
        "brpoplpush" => Request {
            timeout_ms: parse_timeout(&args[3])?,
            keys: vec![args[1].clone()],
            op: Op::Move {
                dst: args[2].clone(),
                from_left: false,
                to_left: true,
            },
        },
        "blmove" => {
            let from_left = where_arg(&args[3])?;
            let to_left = where_arg(&args[4])?;
            Request {
                timeout_ms: parse_timeout(&args[5])?,
                keys: vec![args[1].clone()],
                op: Op::Move {
                    dst: args[2].clone(),
                    from_left,
                    to_left,
                },
            }
        }
        "blmpop" => {
            let (keys, left, count, timeout_ms) = parse_mpop(args, false)?;
            Request {
                keys,
                op: Op::List {
                    left,
                    count: Some(count),
                },
                timeout_ms,
            }
        }
        "bzmpop" => {
            let (keys, min, count, timeout_ms) = parse_mpop(args, true)?;
            Request {
                keys,
                op: Op::Zset {
                    min,
                    count: Some(count),
                },
                timeout_ms,
            }
        }
        _ => unreachable!("a blocking command"),
    })
}

/// Whether `name` (any case) is a blocking command: the pipeline runs one only after
/// the replies before it are sent.
pub fn is_blocking(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 10] = [
        b"xread",
        b"xreadgroup",
        b"blpop",
        b"brpop",
        b"blmove",
        b"brpoplpush",
        b"blmpop",
        b"bzpopmin",
        b"bzpopmax",
        b"bzmpop",
    ];
    name.len() >= 5
        && matches!(name[0] | 0x20, b'b' | b'x')
        && NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// What one key's shard answered when the command first looked at it.
enum Look {
    /// Served there and then.
    Served(Reply, u64),
    /// It holds another type.
    WrongType,
    /// Missing: the waiter is registered on it.
    Waiting,
    /// The waiter was decided meanwhile (served on an earlier key, or unblocked).
    Decided,
    /// A BLMOVE's source has data but its destination is on another shard.
    Move,
}

/// On the key's shard: serve the waiter now if the key has data (claiming it), answer
/// WRONGTYPE if it holds another type, else register the waiter there (`register`).
fn look(
    sh: &mut Shard,
    w: &Arc<Waiter>,
    key: &[u8],
    now: u64,
    shards: usize,
    register: bool,
) -> Look {
    match holds(sh, w.db, key, &w.op, now) {
        Some(true) => {
            if !local_move(&w.op, key, shards) {
                return Look::Move;
            }
            if !w.claim() {
                return Look::Decided;
            }
            let me = w.conn.load(Relaxed);
            match crate::pubsub::tracking::as_writer(me, || pop(sh, w.db, key, &w.op, now, shards))
            {
                Some((r, lsn)) => Look::Served(r, lsn),
                None => unreachable!("a local pop"),
            }
        }
        Some(false) => Look::WrongType,
        None => {
            if register {
                sh.blocked.add(key, w, false);
            }
            Look::Waiting
        }
    }
}

/// Runs blocking command `cmd` for the connection (arity checked); `None` for any
/// other command.
pub fn run(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &Command,
    args: &[Vec<u8>],
    acks: &mut Acks,
) -> Option<Reply> {
    if matches!(cmd.name, "xread" | "xreadgroup") {
        return stream_block(server, conn, cmd, args, acks);
    }
    if !is_blocking(cmd.name.as_bytes()) {
        return None;
    }
    let req = match parse(cmd.name, args) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    if conn.tx.executing() {
        return Some(at_once(server, conn, cmd, req, acks));
    }
    Some(block(server, conn, req, acks))
}

/// XREAD or XREADGROUP with BLOCK, outside MULTI (`None` for another form: the
/// command then runs as it does without BLOCK). Served at once if any key has entries
/// for it (or on an error); else the connection waits, registered on every key, each
/// with the ID it waits after (`$` taken now). A key that gets entries between the
/// first look and the registration is marked ready by the registration's own look
/// (invariant 3 of docs/kv-blocking.md).
fn stream_block(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &Command,
    args: &[Vec<u8>],
    acks: &mut Acks,
) -> Option<Reply> {
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let group_cmd = cmd.name == "xreadgroup";
    let read = commands::streams::parse_read(&argv, group_cmd).ok()?;
    let block_ms = read.block?;
    if conn.tx.executing() {
        return None;
    }
    let shards = &*server.shards;
    let first = crate::exec::run_common(shards, cmd, args, conn.db, acks)?;
    if !matches!(first, Reply::NilArray) {
        return Some(first);
    }
    let count = shards.count();
    let now = now_ms();
    let db = conn.db;
    let mut keys: Vec<(Vec<u8>, Option<crate::keyspace::stream::Id>)> = Vec::new();
    for (k, id) in read.keys.iter().zip(&read.ids) {
        if keys.iter().any(|(x, _)| x == k) {
            continue;
        }
        let s = route::shard_of(k, count);
        let after = shards.with(s, |sh| {
            commands::streams::wait_after(sh.db(db).peek(k, now), id)
        });
        keys.push((k.to_vec(), after));
    }
    let op = Op::Stream(Arc::new(StreamRead {
        keys: keys.clone(),
        group: read.group.map(|(g, c)| (g.to_vec(), c.to_vec())),
        noack: read.noack,
        count: read.count,
    }));
    let w = Waiter::new(db, op);
    w.conn.store(conn.id, Relaxed);
    let names: Vec<Vec<u8>> = keys.into_iter().map(|(k, _)| k).collect();
    for key in &names {
        let s = route::shard_of(key, count);
        shards.with(s, |sh| {
            sh.blocked.add(key, &w, false);
            if w.op.ready_on(sh, db, key, now_ms()) {
                sh.blocked.mark(db, key);
            }
        });
    }
    let registered: Vec<usize> = (0..names.len()).collect();
    let deadline = match block_ms {
        0 => None,
        ms => Instant::now().checked_add(Duration::from_millis(ms)),
    };
    Some(wait(server, conn, &w, &names, &registered, deadline, acks))
}

/// The blocking command as its non-blocking form (inside EXEC, where nothing blocks,
/// as in Redis): the first of its keys with data answers; none has any, a null array
/// (BLMOVE and BRPOPLPUSH: a nil).
fn at_once(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &Command,
    req: Request,
    acks: &mut Acks,
) -> Reply {
    let count = server.shards.count();
    let now = now_ms();
    let w = Waiter::new(conn.db, req.op.clone());
    w.conn.store(conn.id, Relaxed);
    for key in &req.keys {
        let s = route::shard_of(key, count);
        match server
            .shards
            .with(s, |sh| look(sh, &w, key, now, count, false))
        {
            Look::Served(r, lsn) => {
                acks.note(s, lsn);
                return r;
            }
            Look::WrongType => return commands::WRONGTYPE,
            Look::Move => {
                if let Some(r) = try_move(server, conn, key, &w.op, acks) {
                    return r;
                }
            }
            Look::Waiting | Look::Decided => {}
        }
    }
    match cmd.name {
        "blmove" | "brpoplpush" => Reply::Nil,
        _ => TIMED_OUT,
    }
}

/// The command's reply when the time runs out, or when it cannot block (inside
/// MULTI): a null array (`*-1`; RESP3 `_`).
const TIMED_OUT: Reply = Reply::NilArray;

fn block(server: &Arc<Server>, conn: &mut Conn, req: Request, acks: &mut Acks) -> Reply {
    let shards = &server.shards;
    let count = shards.count();
    let now = now_ms();
    // (A deadline past what the clock holds: forever.)
    let deadline = match req.timeout_ms {
        0 => None,
        ms => Instant::now().checked_add(Duration::from_millis(ms)),
    };
    let w = Waiter::new(conn.db, req.op.clone());
    w.conn.store(conn.id, Relaxed);
    let mut keys: Vec<Vec<u8>> = Vec::with_capacity(req.keys.len());
    for k in req.keys {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // Look at each key in order: the first with data serves the command at once;
    // the others are registered as they are passed.
    let mut registered: Vec<usize> = Vec::new();
    let mut answer = None;
    for (i, key) in keys.iter().enumerate() {
        let s = route::shard_of(key, count);
        match shards.with(s, |sh| look(sh, &w, key, now, count, true)) {
            Look::Served(r, lsn) => {
                acks.note(s, lsn);
                answer = Some(r);
                break;
            }
            Look::WrongType => {
                // (Served by an earlier key meanwhile: that reply, below.)
                if w.claim() {
                    answer = Some(commands::WRONGTYPE);
                }
                break;
            }
            Look::Waiting => registered.push(i),
            Look::Decided => break,
            Look::Move => {
                // A BLMOVE (one key, so nothing else can decide it meanwhile).
                if let Some(r) = try_move(server, conn, key, &w.op, acks) {
                    answer = Some(r);
                    break;
                }
                // Emptied meanwhile: wait for it.
                wait_again(server, &w, key, false);
                registered.push(i);
            }
        }
    }
    if let Some(r) = answer {
        unregister(server, &w, &keys, &registered);
        return r;
    }
    wait(server, conn, &w, &keys, &registered, deadline, acks)
}

/// Registers `w` on `key` (first in line with `front`) and, if the key holds data
/// already, marks it ready, so that its shard serves it after this closure.
fn wait_again(server: &Arc<Server>, w: &Arc<Waiter>, key: &[u8], front: bool) {
    let s = route::shard_of(key, server.shards.count());
    server.shards.with(s, |sh| {
        sh.blocked.add(key, w, front);
        if holds(sh, w.db, key, &w.op, now_ms()) == Some(true) {
            sh.blocked.mark(w.db, key);
        }
    });
}

/// LMOVE of a BLMOVE whose keys are on two shards, run by the connection as the
/// non-blocking command: its reply, or `None` if the source was empty.
fn try_move(
    server: &Arc<Server>,
    conn: &mut Conn,
    src: &[u8],
    op: &Op,
    acks: &mut Acks,
) -> Option<Reply> {
    let Op::Move {
        dst,
        from_left,
        to_left,
    } = op
    else {
        return None;
    };
    let cmd = commands::lookup(b"lmove")?;
    let args: Vec<Vec<u8>> = vec![
        b"lmove".to_vec(),
        src.to_vec(),
        dst.clone(),
        side(*from_left).to_vec(),
        side(*to_left).to_vec(),
    ];
    let r = super::conn::run_other(server, conn, cmd, &args, acks);
    match r {
        Reply::Nil | Reply::NilArray => None,
        r => Some(r),
    }
}

/// Takes the waiter out of the queues of the keys it was registered on.
fn unregister(server: &Arc<Server>, w: &Arc<Waiter>, keys: &[Vec<u8>], registered: &[usize]) {
    let count = server.shards.count();
    for &i in registered {
        let key = &keys[i];
        let s = route::shard_of(key, count);
        server.shards.with(s, |sh| sh.blocked.remove(key, w));
    }
}

/// Blocks the connection until the waiter is decided or its deadline passes.
fn wait(
    server: &Arc<Server>,
    conn: &mut Conn,
    w: &Arc<Waiter>,
    keys: &[Vec<u8>],
    registered: &[usize],
    deadline: Option<Instant>,
    acks: &mut Acks,
) -> Reply {
    let client = conn.client.clone();
    client.set_waiter(Some(w.clone()));
    server.registry.note_blocked(true, deadline.is_some());
    if let Some(sock) = conn.sock {
        conn.ahead.watch(sock, Some(w));
    }
    if let Some(own) = super::tracking::own_outbox(conn) {
        let _ = w.hold.set(own);
    }
    let reply = loop {
        w.let_go();
        let o = w.wait(deadline);
        match o {
            Outcome::Served(r, s, lsn) => {
                acks.note(s, lsn);
                break r;
            }
            Outcome::TimedOut => break TIMED_OUT,
            Outcome::Unblocked => {
                break Reply::err("UNBLOCKED client unblocked via CLIENT UNBLOCK")
            }
            Outcome::Gone => {
                conn.close = true;
                break Reply::Written;
            }
            Outcome::Retry => {
                // The source of a BLMOVE across shards has data: move it as LMOVE does.
                let key = &keys[registered[0]];
                if let Some(r) = try_move(server, conn, key, &w.op, acks) {
                    break r;
                }
                // Taken by another client first: wait again, first in line (unless
                // the client closed its connection meanwhile).
                w.state.store(WAITING, SeqCst);
                if w.gone.load(SeqCst) && w.claim() {
                    conn.close = true;
                    break Reply::Written;
                }
                wait_again(server, w, key, true);
            }
        }
    };
    server.registry.note_blocked(false, deadline.is_some());
    client.set_waiter(None);
    if let Some(sock) = conn.sock {
        conn.ahead.watch(sock, None);
    }
    unregister(server, w, keys, registered);
    reply
}

/// CLIENT UNBLOCK client-id [TIMEOUT | ERROR]: ends the wait of a connection blocked
/// by a blocking command, as if its time ran out (the default) or with `-UNBLOCKED`.
/// 1 if it was blocked, else 0.
pub fn client_unblock(server: &Server, args: &[Vec<u8>]) -> Reply {
    let error = match args.get(3) {
        _ if args.len() > 4 => return commands::sub_syntax_error(args),
        None => false,
        Some(m) if eq(m, "timeout") => false,
        Some(m) if eq(m, "error") => true,
        Some(_) => return Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
    };
    let Some(id) = commands::parse_i64(&args[2]) else {
        return commands::NOT_INT;
    };
    let Some(w) = server.registry.waiter_of(id as u64) else {
        return Reply::Int(0);
    };
    let o = if error {
        Outcome::Unblocked
    } else {
        Outcome::TimedOut
    };
    Reply::Int(w.decide(o) as i64)
}

/// A connection's socket, for the read-ahead of a blocked connection: a pointer to the
/// stream and the function that reads it.
#[derive(Clone, Copy)]
pub struct Sock {
    ptr: usize,
    read: unsafe fn(usize, &mut [u8]) -> std::io::Result<usize>,
    fd: i32,
}

/// Reads from the stream of type `S` at `ptr`.
///
/// # Safety
/// `ptr` must point to a live `S` (the connection's stream, which the connection keeps
/// until the read-ahead is over: [`Ahead::finish`]).
unsafe fn read_via<S>(ptr: usize, buf: &mut [u8]) -> std::io::Result<usize>
where
    for<'a> &'a S: Read,
{
    // SAFETY: the caller's contract: `ptr` is the connection's live stream.
    let mut s: &S = unsafe { &*(ptr as *const S) };
    s.read(buf)
}

impl Sock {
    /// The socket of stream `s`, which must outlive every read-ahead started on it.
    pub fn of<S>(s: &S, fd: i32) -> Sock
    where
        for<'a> &'a S: Read,
    {
        Sock {
            ptr: s as *const S as usize,
            read: read_via::<S>,
            fd,
        }
    }
}

/// The bytes one read-ahead takes at most.
const AHEAD: usize = 16 << 10;

/// What a read-ahead and its connection share.
#[derive(Default)]
struct Watch {
    /// The wait the connection is in now, if any: the one a close ends.
    current: std::sync::Mutex<Option<Arc<Waiter>>>,
    /// The read-ahead found the stream closed (or failed).
    ended: AtomicBool,
}

/// A blocked connection's read-ahead (module doc).
#[derive(Default)]
pub struct Ahead {
    state: AheadState,
    watch: Arc<Watch>,
}

#[derive(Default)]
enum AheadState {
    /// None under way.
    #[default]
    Idle,
    /// A green thread is reading.
    Running(weft_runtime::JoinHandle<(Vec<u8>, std::io::Result<usize>)>),
    /// It read these bytes (from the offset on, not yet taken), or ended the stream.
    Done(Vec<u8>, usize, Option<std::io::Error>),
}

impl Ahead {
    /// Watches the socket for a close while `w` waits (`None`: the wait is over).
    /// Starts a read-ahead on `sock` unless one is under way or left bytes; a close
    /// seen there (now or before) ends the wait as [`Outcome::Gone`].
    pub fn watch(&mut self, sock: Sock, w: Option<&Arc<Waiter>>) {
        *self.watch.current.lock().unwrap_or_else(|p| p.into_inner()) = w.cloned();
        let Some(w) = w else { return };
        if self.watch.ended.load(SeqCst) {
            w.gone.store(true, SeqCst);
            w.decide(Outcome::Gone);
            return;
        }
        if !matches!(self.state, AheadState::Idle) {
            return;
        }
        let watch = self.watch.clone();
        let spawned = weft_runtime::ThreadBuilder::new()
            .name("kv-read-ahead")
            .preemptible(false)
            .stack_size(64 << 10)
            .spawn_on(weft_runtime::current_worker().unwrap_or(0), move || {
                let mut buf = vec![0u8; AHEAD];
                // SAFETY: the connection keeps its stream until it has joined this
                // thread (`Ahead::take`, `Ahead::finish`).
                let r = unsafe { (sock.read)(sock.ptr, &mut buf) };
                if !matches!(r, Ok(n) if n > 0) {
                    watch.ended.store(true, SeqCst);
                    let w = watch
                        .current
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take();
                    if let Some(w) = w {
                        w.gone.store(true, SeqCst);
                        w.decide(Outcome::Gone);
                    }
                }
                (buf, r)
            });
        if let Ok(h) = spawned {
            self.state = AheadState::Running(h);
        }
    }

    /// Whether no read-ahead is under way or left bytes ([`Ahead::take`] would give
    /// `None`).
    pub fn is_idle(&self) -> bool {
        matches!(self.state, AheadState::Idle)
    }

    /// The connection's next read: what the read-ahead read (waiting for it), copied
    /// into `buf`; `None` when no read-ahead is under way or left bytes.
    pub fn take(&mut self, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
        if let AheadState::Running(_) = self.state {
            let AheadState::Running(h) = std::mem::take(&mut self.state) else {
                unreachable!()
            };
            self.state = match h.join() {
                Ok((bytes, Ok(n))) => AheadState::Done(bytes[..n].to_vec(), 0, None),
                Ok((_, Err(e))) => AheadState::Done(Vec::new(), 0, Some(e)),
                Err(_) => AheadState::Done(Vec::new(), 0, None),
            };
        }
        let AheadState::Done(bytes, at, err) = &mut self.state else {
            return None;
        };
        if let Some(e) = err.take() {
            self.state = AheadState::Idle;
            return Some(Err(e));
        }
        let n = (bytes.len() - *at).min(buf.len());
        buf[..n].copy_from_slice(&bytes[*at..*at + n]);
        *at += n;
        if *at == bytes.len() {
            self.state = AheadState::Idle;
        }
        Some(Ok(n))
    }

    /// Before the connection closes its stream: ends a read-ahead under way (shutting
    /// the socket down wakes its read) and waits for it.
    pub fn finish(&mut self, sock: Option<Sock>) {
        if let AheadState::Running(h) = std::mem::take(&mut self.state) {
            if let Some(sock) = sock {
                // SAFETY: the connection's own socket, still open (it is closed after
                // this returns); shutdown(2) only wakes the read under way.
                unsafe { libc::shutdown(sock.fd, libc::SHUT_RDWR) };
            }
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{Keyspace, Replay};

    const NOW: u64 = 1_000_000;

    /// Runs a shard command of the table on database 0 of `sh`.
    fn run(sh: &mut Shard, args: &[&str]) -> Reply {
        let f = shard_fn(args[0]).expect("a shard command");
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        sh.run(f, 0, &argv, NOW, None).0
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    /// The outcome a decided waiter holds.
    fn outcome(w: &Waiter) -> Option<Outcome> {
        w.outcome.lock().unwrap().take()
    }

    fn served(w: &Waiter) -> Reply {
        match outcome(w) {
            Some(Outcome::Served(r, _, _)) => r,
            o => panic!("not served: {o:?}"),
        }
    }

    /// The shard's log replayed into fresh databases equals its state: every key of
    /// database 0 with its LRANGE or ZRANGE.
    fn check_replay(sh: &mut Shard) {
        let mut dbs: Vec<Keyspace> = (0..crate::log::DATABASES)
            .map(|_| Keyspace::new())
            .collect();
        let mut rp = Replay::new(&mut dbs, NOW);
        let mut at = 0;
        while at < sh.log.len() {
            let (db, rec, n) = log::decode_frame(&sh.log[at..]).unwrap();
            rp.push(db, rec);
            at += n;
        }
        rp.finish();
        let mut again = Shard::new(dbs);
        for key in ["q", "z", "dst", "other"] {
            for cmd in [["lrange", key, "0", "-1"], ["zrange", key, "0", "-1"]] {
                assert_eq!(run(sh, &cmd), run(&mut again, &cmd), "{cmd:?}");
            }
        }
    }

    fn list_waiter() -> Arc<Waiter> {
        Waiter::new(
            0,
            Op::List {
                left: true,
                count: None,
            },
        )
    }

    #[test]
    fn a_push_serves_the_waiters_of_its_type_in_order_and_logs_their_pops() {
        let mut sh = Shard::new(vec![]);
        let z = Waiter::new(
            0,
            Op::Zset {
                min: true,
                count: None,
            },
        );
        let ws: Vec<_> = (0..3).map(|_| list_waiter()).collect();
        assert!(matches!(
            look(&mut sh, &z, b"q", NOW, 1, true),
            Look::Waiting
        ));
        for w in &ws {
            assert!(matches!(
                look(&mut sh, w, b"q", NOW, 1, true),
                Look::Waiting
            ));
        }
        assert!(!sh.blocked.has_ready());
        assert_eq!(run(&mut sh, &["rpush", "q", "a", "b"]), Reply::Int(2));
        assert!(sh.blocked.has_ready());
        let woken = serve_ready(&mut sh, 0, 1, NOW);
        assert_eq!(woken.len(), 2);
        assert_eq!(served(&ws[0]), Reply::Array(vec![bulk("q"), bulk("a")]));
        assert_eq!(served(&ws[1]), Reply::Array(vec![bulk("q"), bulk("b")]));
        assert!(ws[2].waiting() && z.waiting());
        assert_eq!(
            run(&mut sh, &["lrange", "q", "0", "-1"]),
            Reply::Array(vec![])
        );
        check_replay(&mut sh);
        // A value of another type serves no one; a list made after it does.
        run(&mut sh, &["set", "q", "x"]);
        assert!(serve_ready(&mut sh, 0, 1, NOW).is_empty());
        run(&mut sh, &["del", "q"]);
        run(&mut sh, &["lpush", "q", "c"]);
        assert_eq!(serve_ready(&mut sh, 0, 1, NOW).len(), 1);
        assert_eq!(served(&ws[2]), Reply::Array(vec![bulk("q"), bulk("c")]));
        // The sorted-set waiter is still in line; a sorted set serves it.
        run(&mut sh, &["zadd", "q", "1.5", "m"]);
        assert_eq!(serve_ready(&mut sh, 0, 1, NOW).len(), 1);
        let Reply::Array(v) = served(&z) else {
            panic!("an array")
        };
        assert_eq!(v[..2], [bulk("q"), bulk("m")]);
        assert!(sh.blocked.is_empty());
        check_replay(&mut sh);
    }

    #[test]
    fn a_waiter_decided_elsewhere_takes_nothing_here() {
        // Two shards: the waiter is in both; one serves it, the other drops it.
        let (mut a, mut b) = (Shard::new(vec![]), Shard::new(vec![]));
        let w = list_waiter();
        let next = list_waiter();
        assert!(matches!(
            look(&mut a, &w, b"q", NOW, 1, true),
            Look::Waiting
        ));
        assert!(matches!(
            look(&mut b, &w, b"other", NOW, 1, true),
            Look::Waiting
        ));
        assert!(matches!(
            look(&mut b, &next, b"other", NOW, 1, true),
            Look::Waiting
        ));
        run(&mut a, &["rpush", "q", "x"]);
        run(&mut b, &["rpush", "other", "y"]);
        assert_eq!(serve_ready(&mut a, 0, 2, NOW).len(), 1);
        assert_eq!(served(&w), Reply::Array(vec![bulk("q"), bulk("x")]));
        // Shard b finds `w` decided and serves the next waiter with the element.
        assert_eq!(serve_ready(&mut b, 1, 2, NOW).len(), 1);
        assert_eq!(served(&next), Reply::Array(vec![bulk("other"), bulk("y")]));
        assert!(a.blocked.is_empty() && b.blocked.is_empty());
        // A waiter that timed out (decided by its connection) is never served.
        let late = list_waiter();
        assert!(matches!(
            look(&mut a, &late, b"q", NOW, 1, true),
            Look::Waiting
        ));
        assert!(late.claim());
        run(&mut a, &["rpush", "q", "kept"]);
        assert!(serve_ready(&mut a, 0, 1, NOW).is_empty());
        assert_eq!(
            run(&mut a, &["lrange", "q", "0", "-1"]),
            Reply::Array(vec![bulk("kept")])
        );
        check_replay(&mut a);
    }

    #[test]
    fn a_served_blmove_is_logged_as_lmove_and_feeds_the_next_waiter() {
        let mut sh = Shard::new(vec![]);
        let mover = Waiter::new(
            0,
            Op::Move {
                dst: b"dst".to_vec(),
                from_left: true,
                to_left: false,
            },
        );
        let reader = list_waiter();
        assert!(matches!(
            look(&mut sh, &mover, b"q", NOW, 1, true),
            Look::Waiting
        ));
        assert!(matches!(
            look(&mut sh, &reader, b"dst", NOW, 1, true),
            Look::Waiting
        ));
        run(&mut sh, &["rpush", "q", "e1", "e2"]);
        assert_eq!(serve_ready(&mut sh, 0, 1, NOW).len(), 2);
        assert_eq!(served(&mover), bulk("e1"));
        assert_eq!(served(&reader), Reply::Array(vec![bulk("dst"), bulk("e1")]));
        assert_eq!(
            run(&mut sh, &["lrange", "q", "0", "-1"]),
            Reply::Array(vec![bulk("e2")])
        );
        check_replay(&mut sh);
        // Its destination of another type: the error, and the element stays.
        let wrong = Waiter::new(
            0,
            Op::Move {
                dst: b"str".to_vec(),
                from_left: true,
                to_left: true,
            },
        );
        run(&mut sh, &["set", "str", "x"]);
        run(&mut sh, &["del", "q"]);
        assert!(matches!(
            look(&mut sh, &wrong, b"q", NOW, 1, true),
            Look::Waiting
        ));
        run(&mut sh, &["rpush", "q", "e3"]);
        serve_ready(&mut sh, 0, 1, NOW);
        assert_eq!(served(&wrong), commands::WRONGTYPE);
        assert_eq!(
            run(&mut sh, &["lrange", "q", "0", "-1"]),
            Reply::Array(vec![bulk("e3")])
        );
    }

    #[test]
    fn timeouts_are_read_as_redis_reads_them() {
        for (arg, ms) in [
            ("0", 0),
            ("0.1", 100),
            ("0.0001", 1),
            ("-0.0001", 0),
            ("1e3", 1_000_000),
            ("0x10", 16_000),
            ("2.5", 2500),
        ] {
            assert_eq!(parse_timeout(arg.as_bytes()), Ok(ms), "{arg}");
        }
        let negative = Err(Reply::err("ERR timeout is negative"));
        for arg in ["-1", "-inf", "inf", "0x7FFFFFFFFFFFFF"] {
            assert_eq!(parse_timeout(arg.as_bytes()), negative, "{arg}");
        }
        let not_float = Err(Reply::err("ERR timeout is not a float or out of range"));
        for arg in ["", "abc", " 1", "1 ", "nan", "1e99999"] {
            assert_eq!(parse_timeout(arg.as_bytes()), not_float, "{arg}");
        }
    }

    #[test]
    fn blmpop_and_bzmpop_check_the_timeout_after_the_rest() {
        let args = |a: &[&str]| a.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        // A bad timeout and a bad numkeys: numkeys is the error, as in Redis.
        let r = parse_mpop(&args(&["bzmpop", "x", "0", "k", "MIN"]), true);
        assert_eq!(
            r.err(),
            Some(Reply::err("ERR numkeys should be greater than 0"))
        );
        // A bad timeout and a bad where: a syntax error.
        let r = parse_mpop(&args(&["blmpop", "x", "1", "k", "UP"]), false);
        assert_eq!(r.err(), Some(commands::SYNTAX_ERR));
        // Only the timeout is bad: its own error.
        let r = parse_mpop(&args(&["blmpop", "x", "1", "k", "LEFT"]), false);
        assert_eq!(
            r.err(),
            Some(Reply::err("ERR timeout is not a float or out of range"))
        );
    }
}
