//! The server's shards: where each lives, how a connection reaches it, and the green
//! threads that serve it.
//!
//! # Ownership
//! Shard `s` belongs to worker `s % workers`. Its state (a [`Shard`]) is touched only
//! by green threads of that worker, and never across a switch: every closure run on
//! it is short, does no I/O and cannot be preempted (the server's green threads are
//! spawned non-preemptible), so it needs no lock. A [`ShardCell`] checks both rules
//! at run time (a closure run on the wrong worker, or while another one runs, panics
//! instead of racing).
//!
//! # Reaching a shard
//! A connection on the owning worker runs its closure on the shard directly. One on
//! another worker sends it to the shard's **server thread** with an IPC `call`
//! (weft's synchronous IPC, whose cross-worker requests travel in the message boxes):
//! the message carries a pointer to the caller's closure, which stays valid because
//! the caller is blocked in the call until the reply. A pipeline of commands for one
//! shard goes in one call.
//!
//! # Gates: commands over several shards
//! Each shard has a [`Gate`]: the transaction holding it, and those waiting for it,
//! first come first served (docs/kv-types.md, "How are commands over several shards
//! atomic?"). A command over several shards (MSET, MGET, DEL, EXISTS of keys of
//! several shards; FLUSHDB, FLUSHALL, SWAPDB) runs as a transaction
//! ([`ShardSet::atomically`]): it enters the gates of its shards in ascending order
//! (so no two transactions wait for each other), runs its parts, waits until their
//! records are written, and leaves the gates. Every other access to a shard checks its
//! gate first, in the closure that runs on the shard's worker: while another
//! transaction holds it, a local caller waits for the gate, and a closure sent by IPC
//! is answered "held" at once (the shard's IPC server never blocks) and its caller
//! waits and sends it again. So no command sees a transaction's part on one shard
//! without its parts on the others, and a single-shard command pays one load.
//!
//! # Writing the log
//! Each shard's **flusher** green thread owns its [`LogWriter`]. Commands append
//! records to the shard's buffer and *kick* the flusher; it takes the whole buffer
//! (every record since its last write: group commit), writes it (a plain `pwrite` on
//! the worker, or through io_uring after one that slept: `log/writer.rs`), fsyncs
//! under `always` (on the worker itself when the worker owns no other shard and no
//! read ran on the shard since the last write, or none ran during its last fsync
//! through the ring, else through the worker's ring, which lets reads be served
//! during the fsync: `log/writer.rs`), then publishes the
//! LSN it reached as `durable` and wakes the connections waiting for it. Under
//! `everysec` an fsync of what was written runs once a second, when something was, on
//! a green thread of its own: the flusher goes on writing (and connections on being
//! acknowledged) while it runs; a failed one is reported as a failed write is, and the
//! flusher fsyncs again itself. A failed write (ENOSPC, EIO) puts
//! the records back, makes the shard refuse writes with `MISCONF` and is retried
//! every 100 ms: service resumes when space returns.
//!
//! # Compaction
//! A compaction walks the keys in chunks, a big key a piece at a time (yielding
//! between them, so service goes on: `compact.rs`) into a temporary file while the shard keeps every new record in a *tail* too. The
//! compaction's thread then writes and fsyncs the file, and the tail kept so far (a
//! few rounds, until what is left is small), while the flusher goes on writing the
//! old log; the flusher then appends the rest of the tail, publishes the file (fsync,
//! rename, fsync of the directory) and writes on in the new file. Writers wait for the
//! flusher during its part only, so that part is kept short: an fsync of the whole
//! image there held every write back for as long as the disk took.
//!
//! # Shut-down
//! [`Shards::close`] stops compaction (abandoning one under way, which removes its
//! temporary file), then has each flusher write and fsync everything its shard logged
//! and stop writing, and waits for all of them: the process exits with no write under
//! way, so a clean stop leaves every log ending on a whole record and no `.rewrite`.
//!
//! # Active expiry
//! Each worker's **housekeeping** green thread removes its shards' keys whose time
//! has passed, without any command touching them (as Redis's active expire cycle
//! does; lazy expiry alone would keep unread keys forever). Redis samples its
//! expiring keys at random and adapts how long it keeps sampling to the share it
//! found expired; a shard here keeps its expiring keys in time order, so every key
//! it looks at is due and there is nothing to sample: the work is bounded in time
//! instead.
//! - A **slice** removes due keys of one shard for at most [`EXPIRE_SLICE`] (the
//!   clock is read every [`EXPIRE_BATCH`] keys), then the thread sleeps for
//!   [`EXPIRE_GAP`], so the worker's connections run between slices: a command waits
//!   for at most one slice. (A sleep, not a yield: a worker whose threads keep
//!   yielding looks at its sockets only every few dozen switches, so a client's
//!   request would wait for many slices; a worker with a sleeping thread looks at them
//!   as soon as the others are done.)
//! - A **cycle** runs slices over the worker's shards until no key is due, or until
//!   it has spent [`EXPIRE_BUDGET`]. Caught up, the next cycle comes
//!   [`EXPIRE_PERIOD`] later; still behind, it comes after a pause as long as the
//!   cycle worked, so a backlog is cleared at up to half the worker's time (Redis's
//!   slow cycle takes at most a quarter, plus fast cycles when it is behind).
//! - Besides, a write that would not fit under the memory limit first reclaims
//!   expired keys of its shard (`Keyspace::reclaim`), so expired keys never cause an
//!   OOM refusal.
//!
//! INFO stats shows `expired_keys` (lazy and active), `expired_time_cap_reached_count`
//! (cycles that ended on their budget) and `expire_cycle_cpu_milliseconds`.

#[path = "reload.rs"]
mod reload;

use super::{blocking, Settings};
use crate::compact::Walk;
use crate::exec::{Held, ShardSet};
use crate::keyspace::Keyspace;
use crate::log::writer::SyncHandle;
use crate::log::{self, DataDir, LogWriter, Rewriter};

/// The number of databases.
const DATABASES: usize = log::DATABASES as usize;
use crate::resp::Reply;
use crate::server::Fsync;
use crate::shard::{now_ms, Shard};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::ipc::{self, Message, Tid, Timeout};
use weft_runtime::sync::{Condvar, Mutex};
use weft_runtime::{current_worker, ThreadBuilder};

/// A shard's state, usable only on its owning worker.
pub struct ShardCell {
    owner: usize,
    busy: Cell<bool>,
    state: UnsafeCell<Shard>,
}

// SAFETY: the state is only reached through `run`, which checks that the caller runs
// on the owning worker (one OS thread) and that no other closure is running on it
// (`busy`, which only that OS thread touches), so it is never accessed from two
// threads or twice at once.
unsafe impl Sync for ShardCell {}
// SAFETY: as above; a Shard is plain data.
unsafe impl Send for ShardCell {}

impl ShardCell {
    /// Runs `f` on the state. Panics off the owning worker or when re-entered.
    #[inline]
    pub fn run<R>(&self, f: impl FnOnce(&mut Shard) -> R) -> R {
        assert_eq!(
            current_worker(),
            Some(self.owner),
            "a shard was touched off its worker"
        );
        assert!(!self.busy.replace(true), "a shard was re-entered");
        struct Done<'a>(&'a Cell<bool>);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _done = Done(&self.busy);
        // SAFETY: on the owning worker and not re-entered (checked above): this is the
        // only reference to the state while `f` runs.
        f(unsafe { &mut *self.state.get() })
    }
}

/// A shard's gate (module doc).
pub struct Gate {
    /// The transaction holding the shard (0: none). Read without the lock by every
    /// access to the shard; written under it.
    held: AtomicU64,
    /// Transactions waiting for the shard, in arrival order.
    queue: Mutex<std::collections::VecDeque<u64>>,
    /// Signalled when the holder changes.
    cv: Condvar,
    /// The green thread (its IPC id) of the transaction holding the gate, once it
    /// holds every gate it asked for (0: none): its own accesses, inside the
    /// transaction, go through ([`Gate::mine`]).
    owner: AtomicU64,
    /// The transaction holding the gate logged records here (it wraps them in its
    /// `Tx` frame before it leaves).
    wrote: AtomicBool,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            held: AtomicU64::new(0),
            queue: Mutex::new(Default::default()),
            cv: Condvar::new(),
            owner: AtomicU64::new(0),
            wrote: AtomicBool::new(false),
        }
    }

    /// The transaction holding the gate if the calling green thread is the one
    /// running it (a command inside an EXEC, or a multi-key command inside one, reaches
    /// the shard through the plain paths).
    fn mine(&self) -> Option<u64> {
        let h = self.held.load(Acquire);
        if h == 0 {
            return None;
        }
        let me = weft_runtime::ipc::try_me()?.id();
        (self.owner.load(Acquire) == me).then_some(h)
    }

    /// Whether `tx` (0: no transaction) may run on the shard now.
    #[inline]
    fn lets(&self, tx: u64) -> bool {
        let h = self.held.load(Acquire);
        h == 0 || h == tx
    }

    /// Takes the gate for transaction `tx`, waiting behind the transactions that came
    /// first.
    fn enter(&self, tx: u64) {
        let mut q = self.queue.lock();
        if self.held.load(Acquire) == 0 && q.is_empty() {
            self.held.store(tx, Release);
            return;
        }
        q.push_back(tx);
        while self.held.load(Acquire) != tx {
            q = self.cv.wait(q);
        }
    }

    /// Gives the gate up (to the next transaction waiting, if any).
    fn leave(&self, tx: u64) {
        let mut q = self.queue.lock();
        debug_assert_eq!(self.held.load(Acquire), tx, "left by its holder");
        self.owner.store(0, Release);
        self.wrote.store(false, Relaxed);
        let next = q.pop_front().unwrap_or(0);
        self.held.store(next, Release);
        drop(q);
        self.cv.notify_all();
    }

    /// Waits until `tx` (0: no transaction) may run on the shard.
    fn wait(&self, tx: u64) {
        let mut q = self.queue.lock();
        while !self.lets(tx) {
            q = self.cv.wait(q);
        }
    }
}

/// One shard and the signals around it.
pub struct ServerShard {
    cell: ShardCell,
    /// Transactions over several shards (module doc).
    gate: Gate,
    tid: std::sync::OnceLock<Tid>,
    /// The LSN written (and fsynced under `always`).
    durable: AtomicU64,
    /// Fsync requests (SAVE, SHUTDOWN) asked and done.
    fsync_asked: AtomicU64,
    fsync_done: AtomicU64,
    /// The last write error, if the log cannot be written now.
    error: std::sync::Mutex<Option<String>>,
    failing: AtomicBool,
    /// Connections waiting for `durable` / `fsync_done`.
    wait_m: Mutex<()>,
    wait_cv: Condvar,
    /// The flusher's doorbell.
    kick_m: Mutex<bool>,
    kick_cv: Condvar,
    /// A finished compaction for the flusher to publish.
    switch: std::sync::Mutex<Option<Rewriter>>,
    rewriting: AtomicBool,
    /// Shut-down of the flusher ([`Shards::close`]): [`OPEN`], [`CLOSING`] or [`CLOSED`].
    close: AtomicU8,
    /// The log file's size, and its size after the last compaction.
    pub log_len: AtomicU64,
    pub log_base: AtomicU64,
    /// How much of the log file a finished fsync covers (it never exceeds `log_len`),
    /// and the fsyncs of the log finished (INFO's `aof_fsynced_size`, `aof_fsyncs`).
    pub synced_len: AtomicU64,
    pub fsyncs: AtomicU64,
    /// Of those, the fsyncs the flusher ran on the worker itself (`log/writer.rs`;
    /// INFO's `aof_fsyncs_on_worker`).
    pub fsyncs_on_worker: AtomicU64,
    /// Which log file the flusher writes: one more at each compaction it publishes (an
    /// fsync of the file before covers nothing of the new one).
    log_file: AtomicU64,
    /// Commands run on the shard that logged nothing (reads, mostly), and the log
    /// position the last command left: the flusher fsyncs on the worker only while no
    /// such command runs between its fsyncs (`Shards::flusher`). Written by the owning
    /// worker only.
    quiet_runs: AtomicU64,
    seen_lsn: AtomicU64,
    /// Connections waiting in [`Shards::wait_durable`] for this shard's log.
    waiting: AtomicUsize,
    /// Memory used by the keys, as last seen.
    pub memory: AtomicU64,
    /// The keys, and those with an expiry, of each database, as last seen.
    pub keys: [AtomicU64; DATABASES],
    pub expires: [AtomicU64; DATABASES],
    /// Keys removed because their time had passed, as last seen.
    pub expired: AtomicU64,
    /// The changes logged (`Shard::changes`), as last seen, and those of them a SAVE
    /// or a compaction has saved: INFO's `rdb_changes_since_last_save` is the
    /// difference.
    pub changes: AtomicU64,
    pub saved_changes: AtomicU64,
    /// Waited keys became ready while a transaction held the shard: they are served
    /// when it leaves (`server/blocking.rs`).
    blocked_ready: AtomicBool,
}

/// Active expiry (module doc): the longest a slice holds a shard.
const EXPIRE_SLICE: Duration = Duration::from_micros(500);
/// The pause after a slice, in which the worker serves its connections.
const EXPIRE_GAP: Duration = Duration::from_micros(20);
/// Keys a slice removes between two looks at the clock.
const EXPIRE_BATCH: usize = 32;
/// The most time one cycle spends in slices.
const EXPIRE_BUDGET: Duration = Duration::from_millis(25);
/// From one cycle to the next when no key was left due.
const EXPIRE_PERIOD: Duration = Duration::from_millis(100);

/// Compaction (module doc): the most times the image's tail is written and fsynced
/// before the flusher's part, and the tail small enough to leave to it.
const CATCH_UP_ROUNDS: usize = 4;
const CATCH_UP_SMALL: usize = 256 << 10;

/// A flusher writes as usual.
const OPEN: u8 = 0;
/// A flusher is asked to write and fsync all it holds, then stop writing.
const CLOSING: u8 = 1;
/// A flusher has written and fsynced all it held and writes nothing more.
const CLOSED: u8 = 2;

/// A shard's `everysec` fsync, run on a green thread of its own on the shard's worker
/// so that the flusher goes on writing meanwhile (Redis, too, fsyncs its log in a
/// background thread under `everysec`).
#[derive(Default)]
struct BackgroundSync {
    /// Set from [`BackgroundSync::start`] until the fsync is done.
    running: AtomicBool,
    /// The last fsync's outcome, until the flusher takes it: what it covers (see
    /// [`Covers`]), and its error if any.
    done: std::sync::Mutex<Option<(Covers, Result<(), String>)>>,
}

/// What a background fsync covers: the flusher's count of writes without fsync when it
/// started, the log's length then, and which log file it was (`ServerShard::log_file`).
#[derive(Clone, Copy)]
struct Covers {
    writes: u64,
    len: u64,
    file: u64,
}

impl BackgroundSync {
    /// Starts an fsync of `file`, covering what `covers` says, on `worker`; `false` if
    /// no green thread could be made for it.
    fn start(self: &Arc<Self>, s: usize, worker: usize, file: SyncHandle, covers: Covers) -> bool {
        self.running.store(true, Release);
        let me = self.clone();
        let spawned = ThreadBuilder::new()
            .name(format!("kv-fsync {s}"))
            .preemptible(false)
            .spawn_on(worker, move || {
                let res = file.sync().map_err(|e| e.to_string());
                *me.done.lock().unwrap() = Some((covers, res));
                me.running.store(false, Release);
            });
        if spawned.is_err() {
            self.running.store(false, Release);
        }
        spawned.is_ok()
    }

    fn running(&self) -> bool {
        self.running.load(Acquire)
    }

    /// The outcome of the last fsync, once (None while one runs or after it was taken).
    fn finished(&self) -> Option<(Covers, Result<(), String>)> {
        self.done.lock().unwrap().take()
    }
}

/// Notes a finished fsync of shard `sh`'s log, which covers its first `len` bytes.
fn synced(sh: &ServerShard, len: u64) {
    sh.fsyncs.fetch_add(1, Relaxed);
    sh.synced_len.store(len, Relaxed);
}

/// Every shard of the server.
pub struct Shards {
    list: Vec<ServerShard>,
    dir: Arc<DataDir>,
    settings: Arc<Settings>,
    /// Set while [`Shards::close`] runs: no compaction starts or goes on.
    closing: AtomicBool,
    /// The last transaction id given (ids start at 1; 0 is "no transaction").
    next_tx: AtomicU64,
    /// The last id a transaction's parts were logged with (`log/tx.rs`).
    next_log_tx: AtomicU64,
    /// The server's count of open connections ([`Shards::count_clients`]).
    clients: std::sync::OnceLock<Arc<AtomicUsize>>,
    /// Active expiry cycles that ended on their time budget with keys still due.
    pub expire_capped: AtomicU64,
    /// Time spent in active expiry slices, in microseconds.
    pub expire_us: AtomicU64,
}

impl Shards {
    /// The shards over recovered keyspaces (`spaces[s]` for shard `s`), owned by
    /// `workers` workers.
    pub fn new(
        spaces: Vec<(Vec<Keyspace>, u64)>,
        workers: usize,
        dir: Arc<DataDir>,
        settings: Arc<Settings>,
    ) -> Shards {
        let list = spaces
            .into_iter()
            .enumerate()
            .map(|(s, (dbs, log_len))| {
                let state = Shard::new(dbs);
                let memory = state.used_memory();
                let keys = std::array::from_fn(|d| AtomicU64::new(state.dbs[d].len() as u64));
                let expires =
                    std::array::from_fn(|d| AtomicU64::new(state.dbs[d].expires_count() as u64));
                ServerShard {
                    cell: ShardCell {
                        owner: s % workers,
                        busy: Cell::new(false),
                        state: UnsafeCell::new(state),
                    },
                    gate: Gate::new(),
                    tid: std::sync::OnceLock::new(),
                    durable: AtomicU64::new(0),
                    fsync_asked: AtomicU64::new(0),
                    fsync_done: AtomicU64::new(0),
                    error: std::sync::Mutex::new(None),
                    failing: AtomicBool::new(false),
                    wait_m: Mutex::new(()),
                    wait_cv: Condvar::new(),
                    kick_m: Mutex::new(false),
                    kick_cv: Condvar::new(),
                    switch: std::sync::Mutex::new(None),
                    rewriting: AtomicBool::new(false),
                    close: AtomicU8::new(OPEN),
                    log_len: AtomicU64::new(log_len),
                    log_base: AtomicU64::new(log_len),
                    synced_len: AtomicU64::new(log_len),
                    fsyncs: AtomicU64::new(0),
                    fsyncs_on_worker: AtomicU64::new(0),
                    log_file: AtomicU64::new(0),
                    quiet_runs: AtomicU64::new(0),
                    seen_lsn: AtomicU64::new(0),
                    waiting: AtomicUsize::new(0),
                    memory: AtomicU64::new(memory),
                    keys,
                    expires,
                    expired: AtomicU64::new(0),
                    changes: AtomicU64::new(0),
                    saved_changes: AtomicU64::new(0),
                    blocked_ready: AtomicBool::new(false),
                }
            })
            .collect::<Vec<_>>();
        crate::evict::set_shards(list.len());
        Shards {
            list,
            dir,
            settings,
            closing: AtomicBool::new(false),
            next_tx: AtomicU64::new(0),
            next_log_tx: AtomicU64::new(0),
            clients: std::sync::OnceLock::new(),
            expire_capped: AtomicU64::new(0),
            expire_us: AtomicU64::new(0),
        }
    }

    /// Notes what recovery found of transactions: the highest id each shard logged
    /// (`last[s]`), and the highest of all, which the next transaction's id follows.
    pub fn with_tx_ids(mut self, last: &[u64], highest: u64) -> Shards {
        for (sh, &id) in self.list.iter_mut().zip(last) {
            sh.cell.state.get_mut().last_tx = id;
        }
        *self.next_log_tx.get_mut() = highest;
        self
    }

    /// The shards.
    pub fn list(&self) -> &[ServerShard] {
        &self.list
    }

    /// The worker that owns shard `s`.
    pub fn owner(&self, s: usize) -> usize {
        self.list[s].cell.owner
    }

    /// Runs `f` on shard `s`'s keys of database `db` if this worker owns the shard
    /// (`None` if not): a read that changes nothing, so without the bookkeeping after
    /// a command.
    #[inline]
    pub fn read_local<R>(&self, s: usize, db: u8, f: impl FnOnce(&Keyspace) -> R) -> Option<R> {
        let cell = &self.list[s].cell;
        (current_worker() == Some(cell.owner)).then(|| cell.run(|st| f(st.db(db))))
    }

    /// Starts each shard's server and flusher threads, on its worker. Call from a
    /// green thread of the runtime.
    pub fn start(self: &Arc<Self>, writers: Vec<LogWriter>) -> std::io::Result<()> {
        for (s, writer) in writers.into_iter().enumerate() {
            let me = self.clone();
            let h = ThreadBuilder::new()
                .name(format!("kv-shard {s}"))
                .preemptible(false)
                .spawn_on(self.owner(s), move || me.serve_ipc(s))?;
            let _ = self.list[s].tid.set(h.tid());
            let me = self.clone();
            ThreadBuilder::new()
                .name(format!("kv-flusher {s}"))
                .preemptible(false)
                .spawn_on(self.owner(s), move || me.flusher(s, writer))?;
        }
        let me = self.clone();
        for w in 0..self.list.len().min(weft_runtime::workers().unwrap_or(1)) {
            let me = me.clone();
            ThreadBuilder::new()
                .name(format!("kv-housekeeping {w}"))
                .preemptible(false)
                .spawn_on(w, move || me.housekeeping(w))?;
        }
        Ok(())
    }

    /// Shard `s`'s IPC server: runs the closures other workers send.
    fn serve_ipc(&self, s: usize) {
        let sh = &self.list[s];
        let (mut client, mut msg) = loop {
            if let Ok(x) = ipc::receive(None, Timeout::Never) {
                break x;
            }
        };
        loop {
            let f = msg.words[0] as *mut &mut (dyn FnMut(&mut Shard) + Send);
            // Another transaction holds the shard: "held" (1), and the caller waits
            // for the gate and sends the closure again.
            let ran = sh.gate.lets(msg.words[1]);
            if ran {
                sh.cell.run(|st| {
                    self.set_room(s, st);
                    // SAFETY: `run_on` put a pointer to its closure here and is blocked
                    // in its call until we reply, so the closure is alive and nobody
                    // else uses it.
                    unsafe { (*f)(st) }
                });
                self.after_run(s, true);
            }
            let answer = Message::word(if ran { 0 } else { 1 });
            match ipc::reply_and_wait(&client, answer, Timeout::Never) {
                Ok((c, m)) => (client, msg) = (c, m),
                Err(_) => loop {
                    if let Ok((c, m)) = ipc::receive(None, Timeout::Never) {
                        (client, msg) = (c, m);
                        break;
                    }
                },
            }
        }
    }

    /// Before a closure runs on shard `s` (on its worker): tells the shard the memory
    /// limit and what the other shards use, which its writes check what they add
    /// against. Reads one counter per shard, only under a limit.
    #[inline]
    fn set_room(&self, s: usize, st: &mut Shard) {
        let limit = self.settings.maxmemory();
        st.mem_limit = limit;
        if limit != 0 {
            st.mem_others = self
                .list
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != s)
                .map(|(_, o)| o.memory.load(Relaxed))
                .sum();
        }
    }

    /// After a closure ran on shard `s` (on its worker): kick the flusher if it has
    /// records to write and was not kicked yet; publish the memory figures. A
    /// `command`'s closure that logged nothing is counted (`ServerShard::quiet_runs`).
    #[inline]
    fn after_run(&self, s: usize, command: bool) {
        let sh = &self.list[s];
        // Stored only when changed: other workers read these (the memory limit's
        // check), and an unchanged line stays in their caches.
        let publish = |a: &AtomicU64, v: u64| {
            if a.load(Relaxed) != v {
                a.store(v, Relaxed);
            }
        };
        let (kick, woken) = sh.cell.run(|st| {
            // Connections blocked on keys the closure wrote to are served now (their
            // pops logged before the flusher is kicked), unless a transaction holds
            // the shard: then when it leaves.
            let mut woken = None;
            if st.blocked.has_ready() {
                if sh.gate.held.load(Acquire) == 0 {
                    woken = Some(blocking::serve_ready(st, s, self.list.len(), now_ms()));
                } else {
                    sh.blocked_ready.store(true, Release);
                }
            }
            publish(&sh.memory, st.used_memory());
            // The databases commands changed since the last time (one, usually).
            let mut dirty = std::mem::take(&mut st.dirty_dbs);
            while dirty != 0 {
                let d = dirty.trailing_zeros() as usize;
                dirty &= dirty - 1;
                publish(&sh.keys[d], st.dbs[d].len() as u64);
                publish(&sh.expires[d], st.dbs[d].expires_count() as u64);
            }
            publish(&sh.expired, st.expired_count());
            publish(&sh.changes, st.changes);
            if !command {
                sh.seen_lsn.store(st.appended, Relaxed);
            } else if sh.seen_lsn.load(Relaxed) == st.appended {
                sh.quiet_runs
                    .store(sh.quiet_runs.load(Relaxed) + 1, Relaxed);
            } else {
                sh.seen_lsn.store(st.appended, Relaxed);
            }
            let kick = !st.log.is_empty() && !st.kicked;
            st.kicked |= kick;
            (kick, woken)
        });
        if kick {
            self.kick(s);
        }
        if let Some(woken) = woken {
            blocking::wake_all(woken);
        }
    }

    fn kick(&self, s: usize) {
        let sh = &self.list[s];
        let mut g = sh.kick_m.lock();
        *g = true;
        sh.kick_cv.notify_one();
    }

    /// Shard `s`'s flusher: writes the log (see the module's doc).
    fn flusher(&self, s: usize, mut writer: LogWriter) {
        let sh = &self.list[s];
        let policy = || self.settings.fsync();
        let mut last_sync = Instant::now();
        let mut unsynced = false;
        // The `everysec` fsync runs beside the flusher (module doc): `writes` counts the
        // writes made without fsync, and an fsync that covered the last of them leaves
        // nothing unsynced. After a failed one, the next fsync is the flusher's own.
        let background = Arc::new(BackgroundSync::default());
        let mut writes = 0u64;
        let mut sync_failed = false;
        // The buffer of the last write, cleared: handed back to the shard for the next
        // records, so appending does not regrow a fresh vector after every write.
        let mut spare: Vec<u8> = Vec::new();
        // A worker owning this shard alone fsyncs on itself (`log/writer.rs`), as it has
        // no other shard's flusher to keep going while the disk flushes, unless commands
        // that log nothing (reads) ran since its last write: those are served during
        // the fsync when it goes through the worker's ring, where on the worker they
        // would wait for it. When every connection waits for this fsync, none could be
        // served meanwhile: on the worker then, reads or not. And the ring's fsync pays
        // (its thread wake-ups cost about as much server CPU as the write itself) only
        // if reads do come while it runs: after one during which none ran on the shard
        // (reads and writes taking turns, as clients that each read then write do), the
        // fsyncs with reads between go on the worker, every [`RING_PROBE`]th through
        // the ring again to look.
        let mut quiet_runs = 0;
        let mut reads_during_ring = true;
        let mut probe = 0u32;
        let alone = self
            .list
            .iter()
            .filter(|o| o.cell.owner == sh.cell.owner)
            .count()
            == 1;
        loop {
            {
                let mut g = sh.kick_m.lock();
                if !*g {
                    let (g2, _) = sh.kick_cv.wait_timeout(
                        g,
                        Duration::from_millis(if sh.failing.load(Relaxed) { 100 } else { 1000 }),
                    );
                    g = g2;
                }
                *g = false;
            }
            let close = sh.close.load(Acquire);
            if close == CLOSED {
                continue; // The process is exiting: nothing more is written.
            }
            match background.finished() {
                Some((covers, Ok(()))) => {
                    sh.fsyncs.fetch_add(1, Relaxed);
                    if covers.file == sh.log_file.load(Relaxed) {
                        sh.synced_len.fetch_max(covers.len, Relaxed);
                    }
                    if covers.writes == writes {
                        unsynced = false;
                    }
                }
                Some((_, Err(e))) => {
                    unsynced = true;
                    sync_failed = true;
                    self.set_error(s, Some(e));
                }
                _ => {}
            }
            if let Some(rw) = sh.switch.lock().unwrap().take() {
                self.publish_rewrite(s, rw, &mut writer);
            }
            // Let the connections already made ready (their requests arrived with the
            // one that kicked us) run their commands first: one write then covers
            // them all (a larger group commit, fewer writes and wake-ups).
            weft_runtime::yield_now();
            let asked = sh.fsync_asked.load(Acquire);
            let (buf, end) = sh.cell.run(|st| {
                st.kicked = false;
                (
                    std::mem::replace(&mut st.log, std::mem::take(&mut spare)),
                    st.appended,
                )
            });
            let must_sync = close == CLOSING || asked > sh.fsync_done.load(Relaxed) || sync_failed;
            if !buf.is_empty() {
                let reads = sh.quiet_runs.load(Relaxed);
                // A connection waiting for a write (on any shard) sends nothing until it
                // is answered: when every open one waits, no read can come during this
                // fsync, and the ring's fsync would only cost its thread wake-ups.
                let everyone_waits = || {
                    self.clients.get().is_some_and(|c| {
                        let open = c.load(Relaxed);
                        let waiting: usize =
                            self.list.iter().map(|o| o.waiting.load(Relaxed)).sum();
                        open > 0 && waiting >= open
                    })
                };
                let on_worker = if reads == quiet_runs || everyone_waits() {
                    true
                } else if reads_during_ring {
                    false
                } else {
                    probe += 1;
                    !probe.is_multiple_of(RING_PROBE)
                };
                writer.set_sync_on_worker(alone && on_worker);
                quiet_runs = reads;
                let (here, ring) = (writer.stats().synced_here, writer.stats().synced_ring);
                match writer.write(&buf, policy() == Fsync::Always || must_sync) {
                    Ok(()) => {
                        if writer.stats().synced_here > here {
                            sh.fsyncs_on_worker.fetch_add(1, Relaxed);
                        }
                        if writer.stats().synced_ring > ring {
                            reads_during_ring = sh.quiet_runs.load(Relaxed) != reads;
                        }
                        sh.log_len.store(writer.len(), Relaxed);
                        if policy() == Fsync::Always || must_sync {
                            // Before `durable`: a reply this write allows finds it.
                            synced(sh, writer.len());
                            last_sync = Instant::now();
                            unsynced = false;
                            sync_failed = false;
                        } else {
                            unsynced = true;
                            writes += 1;
                        }
                        self.set_error(s, None);
                        sh.durable.store(end, Release);
                        if buf.capacity() <= 1 << 20 {
                            spare = buf;
                            spare.clear();
                        }
                    }
                    Err(e) => {
                        sh.cell.run(|st| st.put_back(buf));
                        self.set_error(s, Some(format!("{e}")));
                        let mut g = sh.kick_m.lock();
                        *g = true;
                        drop(g);
                        weft_runtime::sleep(Duration::from_millis(100));
                        self.wake_waiters(s);
                        continue;
                    }
                }
            } else if must_sync && unsynced {
                match writer.sync() {
                    Ok(()) => {
                        synced(sh, writer.len());
                        last_sync = Instant::now();
                        unsynced = false;
                        sync_failed = false;
                        self.set_error(s, None);
                    }
                    // A shut-down waits for this fsync: it must hear of its failure.
                    Err(e) if close == CLOSING => self.set_error(s, Some(format!("{e}"))),
                    Err(_) => {}
                }
            } else if asked > sh.fsync_done.load(Relaxed) && !unsynced {
                // Nothing to write and nothing unsynced: the request is met.
            }
            // Once a second under `everysec`: an fsync of what is written so far, on a
            // green thread of its own, while the writes go on (one still running since
            // the last second is left to finish first).
            if policy() == Fsync::EverySec
                && unsynced
                && !must_sync
                && last_sync.elapsed() >= Duration::from_secs(1)
                && !background.running()
            {
                last_sync = Instant::now();
                let covers = Covers {
                    writes,
                    len: writer.len(),
                    file: sh.log_file.load(Relaxed),
                };
                if !background.start(s, sh.cell.owner, writer.sync_handle(), covers) {
                    // No green thread for it: the flusher's own fsync.
                    if writer.sync().is_ok() {
                        synced(sh, writer.len());
                        unsynced = false;
                    }
                }
            }
            if asked > sh.fsync_done.load(Relaxed) && !unsynced && !sh.failing.load(Relaxed) {
                sh.fsync_done.store(asked, Release);
            }
            if close == CLOSING && !unsynced && !sh.failing.load(Relaxed) {
                // Everything logged so far is written and fsynced; stop here, so no
                // write is under way when the process exits.
                let _ = sh.close.compare_exchange(CLOSING, CLOSED, AcqRel, Acquire);
            }
            self.wake_waiters(s);
        }
    }

    fn set_error(&self, s: usize, e: Option<String>) {
        let sh = &self.list[s];
        if e.is_none() && !sh.failing.load(Relaxed) {
            return;
        }
        if let Some(msg) = &e {
            eprintln!("weft-kv: shard {s}: cannot write the log: {msg} (retrying every 100 ms; writes are refused meanwhile)");
        } else {
            eprintln!("weft-kv: shard {s}: the log is written again");
        }
        sh.failing.store(e.is_some(), Release);
        *sh.error.lock().unwrap() = e;
    }

    fn wake_waiters(&self, s: usize) {
        let sh = &self.list[s];
        let _g = sh.wait_m.lock();
        sh.wait_cv.notify_all();
    }

    /// Waits until shard `s` has written `lsn`: `Err` with the write error when its
    /// log cannot be written.
    pub fn wait_durable(&self, s: usize, lsn: u64) -> Result<(), String> {
        let sh = &self.list[s];
        if sh.durable.load(Acquire) >= lsn {
            return Ok(());
        }
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Relaxed);
            }
        }
        sh.waiting.fetch_add(1, Relaxed);
        let _waiting = Waiting(&sh.waiting);
        let mut g = sh.wait_m.lock();
        loop {
            if sh.durable.load(Acquire) >= lsn {
                return Ok(());
            }
            if sh.failing.load(Acquire) {
                return Err(sh.error.lock().unwrap().clone().unwrap_or_default());
            }
            g = sh.wait_cv.wait(g);
        }
    }

    /// Gives the flushers the count of open connections (the server's), for their
    /// choice of where to fsync (`Shards::flusher`).
    pub fn count_clients(&self, clients: Arc<AtomicUsize>) {
        let _ = self.clients.set(clients);
    }

    /// Writes and fsyncs every shard's log (SAVE, SHUTDOWN); the changes logged
    /// before are then saved.
    pub fn fsync_all(&self) -> Result<(), String> {
        for s in 0..self.list.len() {
            let sh = &self.list[s];
            let changes = sh.changes.load(Relaxed);
            let ask = sh.fsync_asked.fetch_add(1, AcqRel) + 1;
            self.kick(s);
            let mut g = sh.wait_m.lock();
            while sh.fsync_done.load(Acquire) < ask {
                if sh.failing.load(Acquire) {
                    return Err(sh.error.lock().unwrap().clone().unwrap_or_default());
                }
                g = sh.wait_cv.wait(g);
            }
            sh.saved_changes.fetch_max(changes, Relaxed);
        }
        Ok(())
    }

    /// The changes logged since the last SAVE or compaction, over every shard
    /// (INFO's `rdb_changes_since_last_save`).
    pub fn changes_since_save(&self) -> u64 {
        self.list
            .iter()
            .map(|sh| {
                let saved = sh.saved_changes.load(Relaxed);
                sh.changes.load(Relaxed).saturating_sub(saved)
            })
            .sum()
    }

    /// Shut-down (SHUTDOWN, SIGTERM, SIGINT): stops compaction (one under way is
    /// abandoned at its next chunk, its temporary file removed, or published if it was
    /// done), then has every flusher write and fsync all its shard logged and stop
    /// writing. When this returns `Ok`, no log write is under way or will start, so the
    /// process may exit: every log ends on a whole record and no `.rewrite` file is
    /// left. Records logged afterwards are never written; their commands were never
    /// acknowledged. On a write error the flushers resume and the error is returned.
    pub fn close(&self) -> Result<(), String> {
        self.closing.store(true, SeqCst);
        for (s, sh) in self.list.iter().enumerate() {
            while sh.rewriting.load(SeqCst) {
                self.kick(s);
                weft_runtime::sleep(Duration::from_millis(1));
            }
        }
        for (s, sh) in self.list.iter().enumerate() {
            sh.close.store(CLOSING, Release);
            self.kick(s);
        }
        for sh in &self.list {
            let mut g = sh.wait_m.lock();
            while sh.close.load(Acquire) != CLOSED {
                if sh.failing.load(Acquire) {
                    drop(g);
                    let e = sh.error.lock().unwrap().clone().unwrap_or_default();
                    for (s, sh) in self.list.iter().enumerate() {
                        sh.close.store(OPEN, Release);
                        self.kick(s);
                    }
                    self.closing.store(false, SeqCst);
                    return Err(e);
                }
                g = sh.wait_cv.wait(g);
            }
        }
        Ok(())
    }

    /// Runs `f` on shard `s`, wherever it lives, once its gate lets transaction `tx`
    /// (0: none) in (module doc).
    fn run_on<R: Send>(&self, s: usize, tx: u64, f: impl FnOnce(&mut Shard) -> R + Send) -> R {
        self.run_in(s, tx, false, f)
    }

    /// [`Shards::run_on`]: inside a transaction (`tx`, or the one the calling green
    /// thread holds the gate for), `f` runs as a part of it, its records kept aside
    /// until the part is wrapped ([`Shard::tx_enter`]), unless `raw`.
    fn run_in<R: Send>(
        &self,
        s: usize,
        tx: u64,
        raw: bool,
        f: impl FnOnce(&mut Shard) -> R + Send,
    ) -> R {
        let sh = &self.list[s];
        let part = |tx: u64, st: &mut Shard, f: Box<dyn FnOnce(&mut Shard) -> R + Send + '_>| {
            if tx == 0 || raw {
                return f(st);
            }
            st.tx_enter();
            let r = f(st);
            st.tx_leave();
            if !st.tx_log.is_empty() {
                sh.gate.wrote.store(true, Relaxed);
            }
            r
        };
        if current_worker() == Some(sh.cell.owner) {
            // Nothing else runs on this worker between the check and the closure, and
            // a transaction's part on this shard runs on this worker too.
            let mut tx = tx;
            if !sh.gate.lets(tx) {
                match sh.gate.mine() {
                    Some(t) => tx = t,
                    None => sh.gate.wait(tx),
                }
            }
            let r = sh.cell.run(|st| {
                self.set_room(s, st);
                if tx == 0 {
                    f(st)
                } else {
                    part(tx, st, Box::new(f))
                }
            });
            self.after_run(s, true);
            return r;
        }
        // The transaction the closure runs in, as the shard's server lets it in.
        let txc = AtomicU64::new(tx);
        let mut f = Some(f);
        let mut out = None;
        let mut run = |st: &mut Shard| {
            let f = f.take().expect("run once");
            out = Some(match txc.load(Relaxed) {
                0 => f(st),
                tx => part(tx, st, Box::new(f)),
            })
        };
        let mut dynf: &mut (dyn FnMut(&mut Shard) + Send) = &mut run;
        let ptr = &mut dynf as *mut &mut (dyn FnMut(&mut Shard) + Send) as u64;
        let tid = sh.tid.get().expect("the shard's server thread runs");
        loop {
            let answer = ipc::call(
                tid,
                Message::new([ptr, txc.load(Relaxed), 0, 0]),
                Timeout::Never,
            )
            .expect("a shard's server thread lives as long as the server");
            if answer.words[0] == 0 {
                break;
            }
            // Held: by this green thread's own transaction (send it again as part of
            // it), or by another (wait for the gate, then send it again).
            match sh.gate.mine() {
                Some(t) => txc.store(t, Relaxed),
                None => sh.gate.wait(txc.load(Relaxed)),
            }
        }
        out.expect("the shard's server ran the closure")
    }

    /// Starts a compaction of every shard not compacting already; `false` if all
    /// were.
    pub fn rewrite_all(self: &Arc<Self>) -> bool {
        let mut any = false;
        for s in 0..self.list.len() {
            if !self.list[s].rewriting.swap(true, AcqRel) {
                any = true;
                let me = self.clone();
                let _ = ThreadBuilder::new()
                    .name(format!("kv-compact {s}"))
                    .preemptible(false)
                    .spawn_on(self.owner(s), move || me.compact(s));
            }
        }
        any
    }

    /// Under a memory limit and an evicting policy, evicts keys of shards `mine` that
    /// are over their share while the server is over its limit (`evict.rs`): the
    /// housekeeping's part, and CONFIG SET's when it lowers the limit or changes the
    /// policy.
    pub fn evict(&self, mine: &[usize]) {
        let max = self.settings.maxmemory();
        if max == 0 || !crate::evict::evicting() {
            return;
        }
        for &s in mine {
            let used: u64 = self.list.iter().map(|s| s.memory.load(Relaxed)).sum();
            if used <= max {
                return;
            }
            // Slices of a bounded number of keys, the connections' turn between them.
            while self.run_on(s, 0, |st| {
                st.evict_over_limit(now_ms(), crate::evict::EVICT_PER_COMMAND)
                    == crate::evict::EVICT_PER_COMMAND
            }) {
                weft_runtime::sleep(EXPIRE_GAP);
            }
        }
    }

    /// Whether any shard is compacting.
    pub fn rewriting(&self) -> bool {
        self.list.iter().any(|s| s.rewriting.load(Relaxed))
    }

    /// One cycle of active expiry over shards `mine` (module doc): `None` when no key
    /// is left due, or the time it worked when it stopped on its budget.
    fn expire_cycle(&self, mine: &[usize]) -> Option<Duration> {
        let mut worked = Duration::ZERO;
        let behind = loop {
            let mut behind = false;
            for &s in mine {
                let start = Instant::now();
                let end = start + EXPIRE_SLICE;
                let more = self.list[s].cell.run(|st| {
                    let now = now_ms();
                    while st.expire_cycle(now, EXPIRE_BATCH) == EXPIRE_BATCH {
                        if Instant::now() >= end {
                            return true;
                        }
                    }
                    false
                });
                self.after_run(s, false);
                worked += start.elapsed();
                if more {
                    // The slice ended on time: the connections' turn.
                    weft_runtime::sleep(EXPIRE_GAP);
                }
                behind |= more;
            }
            if !behind || worked >= EXPIRE_BUDGET {
                break behind;
            }
        };
        self.expire_us.fetch_add(worked.as_micros() as u64, Relaxed);
        if behind {
            self.expire_capped.fetch_add(1, Relaxed);
            Some(worked)
        } else {
            None
        }
    }

    /// Compacts shard `s` (on its worker): see the module's doc.
    fn compact(&self, s: usize) {
        let sh = &self.list[s];
        let fail = |what: &str, e: std::io::Error| {
            eprintln!("weft-kv: shard {s}: compaction failed ({what}: {e}); the log is unchanged");
            sh.cell.run(|st| st.end_rewrite());
            sh.rewriting.store(false, Release);
        };
        // A shut-down under way: no compaction (it waits for `rewriting` to clear).
        let stop = || {
            sh.cell.run(|st| st.end_rewrite());
            sh.rewriting.store(false, SeqCst);
        };
        if self.closing.load(SeqCst) {
            return stop();
        }
        let mut rw = match Rewriter::create(&self.dir, s) {
            Ok(rw) => rw,
            Err(e) => return fail("creating the temporary file", e),
        };
        sh.cell.run(|st| st.start_rewrite());
        // The walk, a step at a time (a big key a piece a step: `compact.rs`).
        let mut walk = Walk::default();
        let mut chunk = Vec::with_capacity(64 << 10);
        let mut done = false;
        while !done {
            let now = now_ms();
            // Not inside a transaction's parts: the image never holds part of one
            // that a crash could still cut (`log/tx.rs`).
            if !sh.gate.lets(0) {
                sh.gate.wait(0);
            }
            let restart = sh.cell.run(|st| {
                if st.rewrite_restart {
                    // A whole database changed (FLUSHDB, FLUSHALL, SWAPDB) behind the
                    // walk: start again.
                    st.start_rewrite();
                    return true;
                }
                done = walk.step(st, now, &mut chunk);
                false
            });
            if restart {
                chunk.clear();
                rw.abort();
                rw = match Rewriter::create(&self.dir, s) {
                    Ok(rw) => rw,
                    Err(e) => return fail("creating the temporary file", e),
                };
                walk = Walk::default();
                continue;
            }
            if let Err(e) = rw.append(&chunk) {
                rw.abort();
                return fail("writing the temporary file", e);
            }
            chunk.clear();
            weft_runtime::yield_now();
            if self.closing.load(SeqCst) {
                rw.abort(); // removes the temporary file
                return stop();
            }
        }
        // The image is whole. Write it out and fsync it here, then the tail kept
        // meanwhile, while the flusher goes on writing the old log: the flusher's part
        // (the last of the tail, an fsync, the rename) holds the shard's writes back,
        // and a whole image to fsync there would stall every writer for as long.
        for _ in 0..CATCH_UP_ROUNDS {
            let tail = sh.cell.run(|st| st.take_rewrite_tail());
            if let Err(e) = rw.append(&tail).and_then(|()| rw.sync()) {
                rw.abort();
                return fail("writing the temporary file", e);
            }
            if self.closing.load(SeqCst) {
                rw.abort();
                return stop();
            }
            if tail.len() <= CATCH_UP_SMALL {
                break;
            }
        }
        *sh.switch.lock().unwrap() = Some(rw);
        self.kick(s);
    }

    /// The flusher's part of a compaction: append the tail, publish, switch files.
    fn publish_rewrite(&self, s: usize, mut rw: Rewriter, writer: &mut LogWriter) {
        let sh = &self.list[s];
        let (tail, pending, end, saves) = sh.cell.run(|st| {
            let tail = st.end_rewrite().unwrap_or_default();
            let (p, end) = st.take_log();
            (tail, p, end, st.changes_at_rewrite)
        });
        let result = rw.append(&tail).and_then(|()| rw.finish());
        match result {
            Ok(w) => {
                *writer = w;
                let len = writer.len();
                // The new file is fsynced whole (`Rewriter::finish`).
                sh.log_file.fetch_add(1, Relaxed);
                sh.log_len.store(len, Relaxed);
                sh.log_base.store(len, Relaxed);
                sh.synced_len.store(len, Relaxed);
                sh.fsyncs.fetch_add(1, Relaxed);
                sh.saved_changes.fetch_max(saves, Relaxed);
                sh.durable.store(end, Release);
                eprintln!("weft-kv: shard {s}: log compacted to {len} bytes");
            }
            Err(e) => {
                eprintln!(
                    "weft-kv: shard {s}: compaction failed (publishing: {e}); the log is unchanged"
                );
                // The old log still lacks `pending`: hand it back to the writer.
                sh.cell.run(|st| st.put_back(pending));
                let mut g = sh.kick_m.lock();
                *g = true;
            }
        }
        sh.rewriting.store(false, Release);
    }

    /// Worker `w`'s housekeeping: active expiry of its shards (module doc), and the
    /// automatic compaction trigger (a log past its minimum size and grown by the
    /// configured percentage since the last compaction).
    fn housekeeping(self: Arc<Self>, w: usize) {
        let mine: Vec<usize> = (w..self.list.len())
            .step_by(weft_runtime::workers().unwrap_or(1))
            .collect();
        loop {
            // (DEBUG PAUSE-CRON 1: nothing periodic until PAUSE-CRON 0.)
            if self.settings.cron_paused() {
                weft_runtime::sleep(EXPIRE_PERIOD);
                continue;
            }
            // (DEBUG SET-ACTIVE-EXPIRE 0: expired keys stay until a command finds them.)
            let cycle = match self.settings.active_expire() {
                true => self.expire_cycle(&mine),
                false => None,
            };
            let pause = match cycle {
                None => EXPIRE_PERIOD,
                Some(worked) => worked.max(EXPIRE_SLICE),
            };
            weft_runtime::sleep(pause);
            self.evict(&mine);
            for &s in &mine {
                let sh = &self.list[s];
                let len = sh.log_len.load(Relaxed);
                let base = sh.log_base.load(Relaxed).max(1);
                let (min, pct) = self.settings.auto_rewrite();
                let grown = pct > 0 && len >= min && (len - base.min(len)) * 100 / base >= pct;
                if grown && !sh.rewriting.swap(true, AcqRel) {
                    let me = self.clone();
                    let _ = ThreadBuilder::new()
                        .name(format!("kv-compact {s}"))
                        .preemptible(false)
                        .spawn_on(self.owner(s), move || me.compact(s));
                }
            }
        }
    }
}

impl ShardSet for Shards {
    #[inline]
    fn count(&self) -> usize {
        self.list.len()
    }

    #[inline]
    fn with<R: Send>(&self, s: usize, f: impl FnOnce(&mut Shard) -> R + Send) -> R {
        self.run_on(s, 0, f)
    }

    fn atomically<R>(&self, shards: &[usize], f: impl FnOnce(&dyn Held) -> R) -> R {
        debug_assert!(
            shards.windows(2).all(|w| w[0] < w[1]),
            "sorted and distinct"
        );
        // A command inside a transaction this green thread runs (a multi-key command
        // queued in an EXEC): the gates are held already, by that transaction, which
        // wraps and writes its parts at its end.
        if let Some(tx) = shards.iter().find_map(|&s| self.list[s].gate.mine()) {
            debug_assert!(
                shards.iter().all(|&s| self.list[s].gate.mine() == Some(tx)),
                "a transaction inside another asks only for the shards it holds"
            );
            let held = ServerHeld {
                shards: self,
                tx,
                written: std::sync::Mutex::new(Vec::new()),
            };
            return f(&held);
        }
        let tx = self.next_tx.fetch_add(1, Relaxed) + 1;
        for &s in shards {
            self.list[s].gate.enter(tx);
        }
        let me = weft_runtime::ipc::try_me().map_or(0, |t| t.id());
        for &s in shards {
            self.list[s].gate.owner.store(me, Release);
        }
        // Holding every gate: the id its parts are logged with (ids increase in the
        // order transactions hold all their gates, so on each shard in log order).
        let log_id = self.next_log_tx.fetch_add(1, AcqRel) + 1;
        let held = ServerHeld {
            shards: self,
            tx,
            written: std::sync::Mutex::new(Vec::new()),
        };
        let r = f(&held);
        // Each part that logged something becomes one Tx frame naming the others
        // (crash atomicity: `log/tx.rs`).
        let parts: Vec<usize> = shards
            .iter()
            .copied()
            .filter(|&s| self.list[s].gate.wrote.load(Relaxed))
            .collect();
        let names = log::tx::shards_bytes(&parts);
        let mut written = held.written.into_inner().unwrap_or_else(|p| p.into_inner());
        for &s in &parts {
            let lsn = self.run_in(s, tx, true, |st| st.tx_wrap(log_id, &names));
            written.push((s, lsn));
        }
        // No one sees the parts before every one of them is written: a crash cannot
        // take back part of what a client was shown.
        for (s, lsn) in written {
            let _ = self.wait_durable(s, lsn);
        }
        for &s in shards {
            self.list[s].gate.leave(tx);
        }
        // Connections blocked on keys the transaction wrote to are served now that
        // it is over (as Redis serves them after EXEC).
        for &s in shards {
            if self.list[s].blocked_ready.swap(false, AcqRel) {
                self.run_on(s, 0, |_| ());
            }
        }
        r
    }

    fn room(&self) -> u64 {
        match self.settings.maxmemory() {
            0 => u64::MAX,
            // Each part evicts what it needs as it runs (`evict.rs`).
            _ if crate::evict::evicting() => u64::MAX,
            max => max.saturating_sub(self.list.iter().map(|s| s.memory.load(Relaxed)).sum()),
        }
    }

    fn make_room(&self, s: usize) -> bool {
        let max = self.settings.maxmemory();
        if max == 0 || !crate::evict::evicting() {
            return false;
        }
        let used =
            |list: &[ServerShard]| -> u64 { list.iter().map(|o| o.memory.load(Relaxed)).sum() };
        if used(&self.list) <= max {
            return false;
        }
        // Shard `s` evicts its own keys before the write when it is over its share and
        // has some it may evict; else the others do, now (`evict.rs`).
        let sh = &self.list[s];
        let volatile = crate::keyspace::access::policy().volatile();
        let counts = if volatile { &sh.expires } else { &sh.keys };
        let evictable = counts.iter().any(|c| c.load(Relaxed) > 0);
        let share = max / self.list.len() as u64;
        if evictable && sh.memory.load(Relaxed) > share {
            return false;
        }
        // Never from inside a transaction: it holds gates, entered in its own order.
        if self.list.iter().any(|o| o.gate.mine().is_some()) {
            return false;
        }
        let mut others: Vec<usize> = (0..self.list.len()).filter(|&t| t != s).collect();
        others.sort_by_key(|&t| std::cmp::Reverse(self.list[t].memory.load(Relaxed)));
        let mut evicted = false;
        for t in others {
            let o = &self.list[t];
            let counts = if volatile { &o.expires } else { &o.keys };
            if counts.iter().all(|c| c.load(Relaxed) == 0) {
                continue;
            }
            let n = self.run_on(t, 0, |st| {
                st.evict_for_others(now_ms(), crate::evict::EVICT_PER_COMMAND)
            });
            evicted |= n > 0;
            if used(&self.list) <= max {
                break;
            }
        }
        evicted
    }

    fn refuses_writes(&self, s: usize) -> Option<Reply> {
        let sh = &self.list[s];
        if !sh.failing.load(Relaxed) {
            return None;
        }
        let e = sh.error.lock().unwrap().clone().unwrap_or_default();
        Some(Reply::error(format!(
            "MISCONF Errors writing to the append only file: {e}"
        )))
    }
}

/// The shards a transaction holds (`Shards::atomically`): runs its parts through their
/// gates, and notes how far each part's records go.
struct ServerHeld<'a> {
    shards: &'a Shards,
    tx: u64,
    /// (shard, LSN at the end of a part): what must be written before the gates open.
    written: std::sync::Mutex<Vec<(usize, u64)>>,
}

impl Held for ServerHeld<'_> {
    fn with(&self, s: usize, f: &mut (dyn FnMut(&mut Shard) + Send)) {
        let (before, after) = self.shards.run_on(s, self.tx, |st| {
            let before = st.appended;
            f(st);
            (before, st.appended)
        });
        // A part that logged nothing (a read) waits for nothing before the gates open
        // (what it read, its reply waits for, as any read's).
        if after > before {
            self.written
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((s, after));
        }
    }
}

/// Under `--fsync always`, after an fsync through the ring during which no read ran, one
/// in this many of the fsyncs with reads between goes through the ring again, to see
/// whether reads come during it now (`Shards::flusher`).
const RING_PROBE: u32 = 8;
