//! Transactions: MULTI, EXEC, DISCARD, WATCH and UNWATCH, with Redis 7.0's behaviour
//! (docs/kv-types.md, "How are commands over several shards atomic?").
//!
//! MULTI makes the connection queue its commands: each is checked as it arrives (its
//! name, its arity, a write over the memory limit or while a log cannot be written,
//! a command a transaction may not hold) and answered `QUEUED`, or refused, which
//! makes EXEC answer `EXECABORT` and run nothing. EXEC runs the queue as **one
//! transaction over the shards of all its keys**, and of the keys the connection
//! watches: it holds their gates (in ascending order) from before the first command
//! until every record is written, so no client on any worker sees part of it, and a
//! crash keeps all of it or none of it (each shard's part is one `Tx` frame:
//! `log/tx.rs`). Its commands run in order, each through the same dispatch a command
//! outside a transaction takes (`conn::run_command`), so every command of the table
//! works queued; keyless ones (PING, ECHO, SELECT, ...) run in place, in order. A
//! command whose shards EXEC cannot tell from the table (a server command with keys)
//! makes it hold every shard. A runtime error is that command's reply in EXEC's
//! array.
//!
//! WATCH notes keys on their shards (`watch.rs`); a write to one of them by anyone,
//! FLUSHDB, FLUSHALL and SWAPDB that change one, or its expiry, marks the
//! connection's flag dirty, and EXEC then answers a nil array and runs nothing. EXEC,
//! DISCARD, UNWATCH, RESET and the connection's end forget every watched key.
//!
//! What a connection queues and watches counts in its client memory, and a queue is
//! at most [`MAX_QUEUED`] bytes of arguments.
//!
//! Errors, in Redis's words: `ERR MULTI calls can not be nested`, `ERR EXEC without
//! MULTI`, `ERR DISCARD without MULTI`, `ERR WATCH inside MULTI is not allowed`,
//! `ERR Command not allowed inside a transaction` (SAVE, SHUTDOWN, ...),
//! `EXECABORT Transaction discarded because of previous errors.`, `EXECABORT
//! Transaction discarded because of: OOM ...` (a write queued while memory is over
//! the limit at EXEC).

use super::conn::{self, Conn, Pending};
use super::Server;
use crate::commands::{self, flags, Command, Exec};
use crate::exec::{Acks, ShardSet};
use crate::resp::Reply;
use crate::route;
use crate::shard::now_ms;
use crate::watch::Watcher;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;

/// The most bytes of arguments a transaction queues (as Redis's query buffer limit);
/// past it the transaction is refused.
pub const MAX_QUEUED: usize = 1 << 30;

/// Bytes counted per queued command and per watched key on top of its bytes.
const OVERHEAD: usize = 48;

/// A connection's transaction state.
#[derive(Debug)]
pub struct TxState {
    /// In MULTI: the commands queued (each its arguments).
    queue: Option<Vec<Vec<Vec<u8>>>>,
    /// The bytes the queue holds.
    queued_bytes: usize,
    /// A command was refused while queueing: EXEC aborts.
    failed: bool,
    /// EXEC is running the queue.
    executing: bool,
    /// The watched keys: (database, key) to (shard, whether it was live when watched).
    watched: HashMap<(u8, Vec<u8>), (usize, bool)>,
    /// The bytes the watched keys hold.
    watched_bytes: usize,
    /// Set by the shards when a watched key changes.
    dirty: Arc<AtomicBool>,
}

impl TxState {
    /// A connection's state, outside MULTI, watching nothing; `dirty` is the flag the
    /// shards set (CLIENT LIST shows it).
    pub fn new(dirty: Arc<AtomicBool>) -> TxState {
        TxState {
            queue: None,
            queued_bytes: 0,
            failed: false,
            executing: false,
            watched: HashMap::new(),
            watched_bytes: 0,
            dirty,
        }
    }

    /// Whether the connection is in MULTI (queueing).
    pub fn in_multi(&self) -> bool {
        self.queue.is_some()
    }

    /// Whether EXEC is running the connection's queue (a blocking command then does
    /// not block, as in Redis).
    pub fn executing(&self) -> bool {
        self.executing
    }

    /// The bytes the queue and the watched keys hold (the connection's client memory).
    pub fn memory(&self) -> usize {
        self.queued_bytes + self.watched_bytes
    }

    /// A command was refused while queueing: EXEC will abort.
    pub fn refused(&mut self) {
        if self.in_multi() {
            self.failed = true;
        }
    }
}

/// Whether `cmd` runs at once while the connection is in MULTI (every other command
/// is queued).
pub fn runs_at_once(cmd: &Command) -> bool {
    matches!(
        cmd.name,
        "multi" | "exec" | "discard" | "watch" | "quit" | "reset"
    )
}

/// Commands a transaction may not hold (Redis's `no-multi`).
fn refused_in_multi(cmd: &Command) -> bool {
    matches!(cmd.name, "save" | "shutdown")
}

/// The server's commands that touch no shard: inside EXEC they need no gate.
fn keyless(cmd: &Command) -> bool {
    matches!(
        cmd.name,
        "ping"
            | "echo"
            | "hello"
            | "auth"
            | "select"
            | "quit"
            | "reset"
            | "client"
            | "info"
            | "config"
            | "command"
            | "lastsave"
            | "time"
            | "role"
            | "wait"
            | "function"
            | "script"
            | "eval"
            | "evalsha"
            | "eval_ro"
            | "evalsha_ro"
            | "fcall"
            | "fcall_ro"
            | "bgsave"
            | "bgrewriteaof"
            | "multi"
            | "exec"
            | "discard"
            | "watch"
            | "unwatch"
            | "publish"
            | "pubsub"
            | "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "spublish"
            | "ssubscribe"
            | "sunsubscribe"
    )
}

/// Whether the server is over its memory limit.
fn over_memory(server: &Server) -> bool {
    let max = server.settings.maxmemory();
    max != 0 && server.shards.room() == 0 && {
        let used: u64 = server
            .shards
            .list()
            .iter()
            .map(|s| s.memory.load(Relaxed))
            .sum();
        used > max
    }
}

/// A log that cannot be written refuses writes: the first shard's error, if any.
fn refusal(server: &Server) -> Option<Reply> {
    (0..server.shards.count()).find_map(|s| server.shards.refuses_writes(s))
}

/// While the connection is in MULTI: queues `cmd` (answering `QUEUED`) or refuses it
/// (the transaction then aborts at EXEC). `None`: not in MULTI, or a command that
/// runs at once.
pub fn queue(server: &Server, conn: &mut Conn, cmd: &Command, args: &[&[u8]]) -> Option<Reply> {
    if !conn.tx.in_multi() || runs_at_once(cmd) {
        return None;
    }
    let refuse = |conn: &mut Conn, r: Reply| {
        conn.tx.failed = true;
        Some(r)
    };
    if refused_in_multi(cmd) {
        return refuse(
            conn,
            Reply::err("ERR Command not allowed inside a transaction"),
        );
    }
    // DEBUG refused to this connection: refused as it is queued, as in Redis.
    if cmd.name == "debug" {
        if let Some(r) = commands::debug::refusal(server, conn) {
            return refuse(conn, r);
        }
    }
    if cmd.flags & flags::DENYOOM != 0 && over_memory(server) {
        return refuse(conn, commands::OOM);
    }
    if cmd.flags & flags::WRITE != 0 {
        if let Some(r) = refusal(server) {
            return refuse(conn, r);
        }
    }
    let bytes: usize = args.iter().map(|a| a.len()).sum::<usize>() + OVERHEAD;
    if conn.tx.queued_bytes + bytes > MAX_QUEUED {
        return refuse(
            conn,
            Reply::err("ERR the transaction queues more than 1 GiB of commands: it is discarded"),
        );
    }
    // A transaction that will abort anyway keeps nothing (as Redis).
    if conn.tx.failed || conn.tx.dirty.load(SeqCst) {
        return Some(Reply::Simple("QUEUED".into()));
    }
    conn.tx.queued_bytes += bytes;
    let q = conn.tx.queue.as_mut().expect("in MULTI");
    q.push(args.iter().map(|a| a.to_vec()).collect());
    conn.client.multi.store(q.len() as i64, Relaxed);
    conn.client.multi_mem.store(conn.tx.queued_bytes, Relaxed);
    Some(Reply::Simple("QUEUED".into()))
}

/// Runs MULTI, EXEC, DISCARD, WATCH or UNWATCH (`None` for any other command). EXEC
/// writes its array of replies into `wbuf` itself ([`Reply::Written`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &Command,
    args: &[&[u8]],
    me: Option<usize>,
    pending: &mut [Vec<Pending>],
    acks: &mut Acks,
    wbuf: &mut Vec<u8>,
) -> Option<Reply> {
    Some(match cmd.name {
        "multi" => {
            if conn.tx.in_multi() {
                return Some(Reply::err("ERR MULTI calls can not be nested"));
            }
            conn.tx.queue = Some(Vec::new());
            conn.tx.failed = false;
            conn.client.multi.store(0, Relaxed);
            Reply::OK
        }
        "discard" => {
            if !conn.tx.in_multi() {
                return Some(Reply::err("ERR DISCARD without MULTI"));
            }
            discard(server, conn);
            Reply::OK
        }
        "watch" => {
            if conn.tx.in_multi() {
                return Some(Reply::err("ERR WATCH inside MULTI is not allowed"));
            }
            watch(server, conn, &args[1..]);
            Reply::OK
        }
        "unwatch" => {
            unwatch_all(server, conn);
            Reply::OK
        }
        "exec" => exec(server, conn, me, pending, acks, wbuf),
        _ => return None,
    })
}

/// Leaves MULTI, forgetting the queue and every watched key (DISCARD, RESET, and a
/// connection that ends).
pub fn discard(server: &Server, conn: &mut Conn) {
    left_multi(conn);
    conn.tx.failed = false;
    unwatch_all(server, conn);
}

/// The connection is out of MULTI: no queue (CLIENT LIST says so).
fn left_multi(conn: &mut Conn) {
    conn.tx.queue = None;
    conn.tx.queued_bytes = 0;
    conn.client.multi.store(-1, Relaxed);
    conn.client.multi_mem.store(0, Relaxed);
}

/// WATCH key...: the keys of the selected database are watched, on their shards.
fn watch(server: &Server, conn: &mut Conn, keys: &[&[u8]]) {
    let db = conn.db;
    let n = server.shards.count();
    let mut by_shard: HashMap<usize, Vec<&[u8]>> = HashMap::new();
    for &key in keys {
        if conn.tx.watched.contains_key(&(db, key.to_vec())) {
            continue;
        }
        let list = by_shard.entry(route::shard_of(key, n)).or_default();
        if !list.contains(&key) {
            list.push(key);
        }
    }
    let w = Watcher {
        conn: conn.id,
        dirty: conn.tx.dirty.clone(),
    };
    let now = now_ms();
    for (s, keys) in by_shard {
        let live = server.shards.with(s, |sh| sh.watch(db, &keys, &w, now));
        for (key, live) in keys.into_iter().zip(live) {
            conn.tx.watched_bytes += key.len() + OVERHEAD;
            conn.tx.watched.insert((db, key.to_vec()), (s, live));
        }
    }
}

/// Forgets every watched key (on its shard) and the dirty flag.
fn unwatch_all(server: &Server, conn: &mut Conn) {
    let watched = std::mem::take(&mut conn.tx.watched);
    conn.tx.watched_bytes = 0;
    let mut by_shard: HashMap<usize, Vec<(u8, &[u8])>> = HashMap::new();
    for ((db, key), (s, _)) in &watched {
        by_shard.entry(*s).or_default().push((*db, key));
    }
    let id = conn.id;
    for (s, keys) in by_shard {
        server.shards.with(s, |sh| sh.unwatch(id, &keys));
    }
    conn.tx.dirty.store(false, SeqCst);
}

/// A watched key as EXEC looks at it on its shard: database, key, whether it was live
/// when watched.
type WatchedKey<'a> = (u8, &'a [u8], bool);

/// The key arguments of `cmd` as the table places them.
fn key_args<'a>(cmd: &Command, args: &'a [Vec<u8>]) -> impl Iterator<Item = &'a [u8]> {
    let first = cmd.first_key.max(0) as usize;
    let step = cmd.step.max(1) as usize;
    let last = if cmd.last_key < 0 {
        (args.len() as i64 + cmd.last_key as i64).max(0) as usize
    } else {
        cmd.last_key as usize
    };
    let range = if first == 0 { 0..0 } else { first..last + 1 };
    args.get(range.start..range.end.min(args.len()))
        .unwrap_or(&[])
        .iter()
        .step_by(step)
        .map(Vec::as_slice)
}

/// The shards a queue of commands touches, sorted; every shard when a command's
/// shards cannot be told from the table.
fn shards_of(queue: &[Vec<Vec<u8>>], n: usize) -> BTreeSet<usize> {
    let mut set = BTreeSet::new();
    for args in queue {
        let Some(cmd) = commands::lookup(&args[0]) else {
            continue;
        };
        match cmd.exec {
            Exec::Shard(_) | Exec::Split(..) => {
                set.extend(key_args(cmd, args).map(|k| route::shard_of(k, n)))
            }
            Exec::Server if keyless(cmd) => {}
            Exec::Server if matches!(cmd.name, "msetnx" | "move") => {
                set.extend(key_args(cmd, args).map(|k| route::shard_of(k, n)))
            }
            Exec::Server => return (0..n).collect(),
        }
    }
    set
}

/// EXEC: runs the queue as one transaction (module doc), its replies written into
/// `wbuf` as one array; or aborts.
fn exec(
    server: &Arc<Server>,
    conn: &mut Conn,
    me: Option<usize>,
    pending: &mut [Vec<Pending>],
    acks: &mut Acks,
    wbuf: &mut Vec<u8>,
) -> Reply {
    let Some(queue) = conn.tx.queue.take() else {
        return Reply::err("ERR EXEC without MULTI");
    };
    left_multi(conn);
    if std::mem::take(&mut conn.tx.failed) {
        unwatch_all(server, conn);
        return Reply::err("EXECABORT Transaction discarded because of previous errors.");
    }
    let cmds: Vec<&Command> = queue
        .iter()
        .map(|a| commands::lookup(&a[0]).expect("checked when queued"))
        .collect();
    let abort = |conn: &mut Conn, why: Reply| {
        unwatch_all(server, conn);
        let Reply::Error(e) = why else {
            unreachable!("an error")
        };
        Reply::error(format!("EXECABORT Transaction discarded because of: {e}"))
    };
    if cmds.iter().any(|c| c.flags & flags::DENYOOM != 0) && over_memory(server) {
        return abort(conn, commands::OOM);
    }
    if cmds.iter().any(|c| c.flags & flags::WRITE != 0) {
        if let Some(r) = refusal(server) {
            return abort(conn, r);
        }
    }
    if conn.tx.dirty.load(SeqCst) {
        unwatch_all(server, conn);
        return Reply::NilArray;
    }
    let n = server.shards.count();
    let mut shards = shards_of(&queue, n);
    shards.extend(conn.tx.watched.values().map(|&(s, _)| s));
    let shards: Vec<usize> = shards.into_iter().collect();
    let mut run = |conn: &mut Conn| -> Reply {
        // The watched keys, under the gates: one that was live when watched and has
        // expired since dirties the transaction too. They are forgotten either way.
        let watched = std::mem::take(&mut conn.tx.watched);
        conn.tx.watched_bytes = 0;
        let mut by_shard: HashMap<usize, Vec<WatchedKey>> = HashMap::new();
        for ((db, key), (s, live)) in &watched {
            by_shard.entry(*s).or_default().push((*db, key, *live));
        }
        let (id, now) = (conn.id, now_ms());
        let mut gone = false;
        for (s, keys) in by_shard {
            gone |= server
                .shards
                .with(s, |sh| sh.unwatch_expired(id, &keys, now));
        }
        if conn.tx.dirty.swap(false, SeqCst) || gone {
            return Reply::NilArray;
        }
        wbuf.extend_from_slice(format!("*{}\r\n", queue.len()).as_bytes());
        conn.tx.executing = true;
        let now = now_ms();
        for args in &queue {
            let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let r = conn::run_command(server, conn, &argv, me, now, 0, pending, acks, wbuf)
                .expect("a command inside EXEC runs at once");
            r.encode(conn.proto, wbuf);
        }
        conn.tx.executing = false;
        Reply::Written
    };
    if shards.is_empty() {
        run(conn)
    } else {
        server.shards.atomically(&shards, |_| run(conn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    /// The shards of a queue: each key's, a keyless command's none, a server command
    /// with keys EXEC cannot place every shard.
    #[test]
    fn the_shards_a_queue_touches() {
        let n = 4;
        let sh = |k: &str| route::shard_of(k.as_bytes(), n);
        let q = vec![
            args(&["set", "a", "1"]),
            args(&["ping"]),
            args(&["select", "2"]),
        ];
        assert_eq!(shards_of(&q, n), [sh("a")].into_iter().collect());
        let q = vec![args(&["mset", "a", "1", "b", "2", "c", "3"])];
        assert_eq!(
            shards_of(&q, n),
            [sh("a"), sh("b"), sh("c")].into_iter().collect()
        );
        let q = vec![args(&["msetnx", "a", "1", "d", "2"])];
        assert_eq!(shards_of(&q, n), [sh("a"), sh("d")].into_iter().collect());
        let q = vec![args(&["get", "a"]), args(&["dbsize"])];
        assert_eq!(shards_of(&q, n), (0..n).collect());
        assert!(shards_of(&[args(&["echo", "x"])], n).is_empty());
    }
}
