//! The embedded store: `Store::open(dir)` gives one process the same keys, files and
//! durability as the server, without a server.
//!
//! The data directory is the server's (same manifest, same shard logs, same lock, so
//! a store and a server never open one directory at once). Each shard sits behind a
//! lock; a command runs on its shard and its records are written to the shard's log
//! before the call returns (and fsynced first under `Fsync::Always`; under
//! `EverySec`, a background thread fsyncs each log once a second). Commands are the
//! server's (`Store::exec` takes any key command, DBSIZE, KEYS, SCAN, FLUSHALL, PING,
//! ...), run by the same code.
//!
//! It is meant for plain OS threads. From weft green threads it works too, but a
//! green thread that waits for a shard's lock blocks its worker.

use crate::commands::{self, Exec};
use crate::exec::{self, Acks, ShardSet};
use crate::keyspace::{Keyspace, Replay};
use crate::log::{self, DataDir, LogWriter};
use crate::resp::Reply;
use crate::server::Fsync;
use crate::shard::Shard;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct StoreShard {
    shard: Shard,
    writer: LogWriter,
    error: Option<String>,
    unsynced: bool,
    /// The LSN written to the log file.
    written: u64,
}

struct Inner {
    shards: Vec<Mutex<StoreShard>>,
    /// Commands take it shared; a transaction over several shards takes it alone, so
    /// no command sees part of one (a store serves one process: serializing those is
    /// simple and enough).
    gate: std::sync::RwLock<()>,
    /// The last id a transaction's parts were logged with (`log/tx.rs`).
    last_tx: AtomicU64,
    fsync: Fsync,
    stop: AtomicBool,
    _dir: DataDir,
}

/// An embedded weft-kv store.
pub struct Store {
    inner: Arc<Inner>,
    syncer: Option<std::thread::JoinHandle<()>>,
}

/// Whether SET made a new key or replaced a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// The key did not exist.
    Created,
    /// The key existed; its value was replaced.
    Updated,
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, with fsync every second.
    ///
    /// A new directory gets [`crate::server::default_workers`] shards, as `weft kv
    /// serve` would give it, so the server and the embedded store can open each other's
    /// directories (one at a time: a directory is locked while open).
    pub fn open(dir: impl AsRef<Path>) -> io::Result<Store> {
        Store::open_with(dir, Fsync::EverySec)
    }

    /// Opens the store in `dir` with fsync policy `fsync`.
    pub fn open_with(dir: impl AsRef<Path>, fsync: Fsync) -> io::Result<Store> {
        let dd = DataDir::open(dir.as_ref(), crate::server::default_workers())?;
        let now = crate::shard::now_ms();
        let (mut spaces, mut ends, mut tails, mut paths) = (vec![], vec![], vec![], vec![]);
        for s in 0..dd.shards() {
            let path = dd.log_path(s);
            let mut dbs: Vec<Keyspace> = (0..log::DATABASES).map(|_| Keyspace::new()).collect();
            let mut replay = Replay::new(&mut dbs, now);
            let mut txs = log::tx::TxReplay::new(|db, r| replay.push(db, r));
            let rec = log::recover_refs(&path, |db, r| txs.push(db, r))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            tails.push(txs.finish());
            replay.finish();
            spaces.push(dbs);
            ends.push(rec.bytes);
            paths.push(path);
        }
        // The last part of a transaction in a log is kept only if every participant
        // has it (`log/tx.rs`).
        let (last, highest) = log::tx::settle_shards(&paths, &ends, &tails, |s, held| {
            let mut replay = Replay::new(&mut spaces[s], now);
            held.apply(|db, r| replay.push(db, r));
            replay.finish();
        })?;
        let mut shards = Vec::new();
        for (s, dbs) in spaces.into_iter().enumerate() {
            let writer = LogWriter::open(&paths[s])?;
            let mut shard = Shard::new(dbs);
            shard.last_tx = last[s];
            shards.push(Mutex::new(StoreShard {
                shard,
                writer,
                error: None,
                unsynced: false,
                written: 0,
            }));
        }
        let inner = Arc::new(Inner {
            last_tx: AtomicU64::new(highest),
            shards,
            gate: std::sync::RwLock::new(()),
            fsync,
            stop: AtomicBool::new(false),
            _dir: dd,
        });
        let syncer = (fsync == Fsync::EverySec).then(|| {
            let inner = inner.clone();
            std::thread::spawn(move || {
                while !inner.stop.load(Acquire) {
                    std::thread::park_timeout(Duration::from_secs(1));
                    let _ = inner.sync_all();
                }
            })
        });
        Ok(Store { inner, syncer })
    }

    /// Runs one command (`args[0]` is its name) in database 0 and returns its reply, as
    /// the server would: key commands, DBSIZE, KEYS, SCAN, FLUSHDB, FLUSHALL, SWAPDB,
    /// MOVE, PING, ECHO, TIME.
    pub fn exec(&self, args: &[&[u8]]) -> Reply {
        if let Err(r) = commands::check_lengths(args) {
            return r;
        }
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let Some(cmd) = args.first().and_then(|n| commands::lookup(n)) else {
            return commands::unknown(&args);
        };
        if let Err(r) = commands::check_arity(cmd, &args) {
            return r;
        }
        let mut acks = Acks::default();
        let set = &*self.inner;
        let reply = match cmd.exec {
            Exec::Shard(_) | Exec::Split(..) => exec::run_keyed(set, cmd, &args, 0, &mut acks),
            Exec::Server => exec::run_common(set, cmd, &args, 0, &mut acks),
        }
        .unwrap_or_else(|| {
            Reply::error(format!(
                "ERR '{}' is a server command: the embedded store does not run it",
                cmd.name
            ))
        });
        // A command whose records could not be written is not acknowledged (it stays
        // in memory and is written once the log can be written again).
        for (s, &lsn) in acks.lsn.iter().enumerate() {
            let g = self.inner.shards[s]
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if g.written < lsn {
                let e = g.error.clone().unwrap_or_default();
                return Reply::error(format!(
                    "MISCONF Errors writing to the append only file: {e}"
                ));
            }
        }
        reply
    }

    /// The value of `key`, if it exists.
    pub fn get(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        match self.exec(&[b"get", key]) {
            Reply::Bulk(v) => Ok(Some(v)),
            Reply::Nil => Ok(None),
            r => Err(reply_error(r)),
        }
    }

    /// Sets `key` to `value` (durable as the fsync policy says when this returns).
    pub fn set(&self, key: &[u8], value: &[u8]) -> io::Result<SetOutcome> {
        match self.exec(&[b"set", key, value, b"get"]) {
            Reply::Nil => Ok(SetOutcome::Created),
            Reply::Bulk(_) => Ok(SetOutcome::Updated),
            r => Err(reply_error(r)),
        }
    }

    /// Deletes `key`: whether it existed.
    pub fn del(&self, key: &[u8]) -> io::Result<bool> {
        match self.exec(&[b"del", key]) {
            Reply::Int(n) => Ok(n > 0),
            r => Err(reply_error(r)),
        }
    }

    /// Pushes `elems` one after another at the head of the list `key` (creating it):
    /// its new length.
    pub fn lpush(&self, key: &[u8], elems: &[&[u8]]) -> io::Result<usize> {
        self.push(b"lpush", key, elems)
    }

    /// Pushes `elems` one after another at the tail of the list `key` (creating it):
    /// its new length.
    pub fn rpush(&self, key: &[u8], elems: &[&[u8]]) -> io::Result<usize> {
        self.push(b"rpush", key, elems)
    }

    fn push(&self, name: &[u8], key: &[u8], elems: &[&[u8]]) -> io::Result<usize> {
        let args: Vec<&[u8]> = [name, key]
            .into_iter()
            .chain(elems.iter().copied())
            .collect();
        match self.exec(&args) {
            Reply::Int(n) => Ok(n as usize),
            r => Err(reply_error(r)),
        }
    }

    /// Removes and returns up to `count` elements from the head of the list `key`
    /// (none if there is no such list).
    pub fn lpop(&self, key: &[u8], count: usize) -> io::Result<Vec<Vec<u8>>> {
        self.elements(&[b"lpop", key, count.to_string().as_bytes()])
    }

    /// Removes and returns up to `count` elements from the tail of the list `key`, the
    /// last first.
    pub fn rpop(&self, key: &[u8], count: usize) -> io::Result<Vec<Vec<u8>>> {
        self.elements(&[b"rpop", key, count.to_string().as_bytes()])
    }

    /// The elements of the list `key` from `start` to `stop` inclusive (negative
    /// indexes count from the tail: `0, -1` is the whole list).
    pub fn lrange(&self, key: &[u8], start: i64, stop: i64) -> io::Result<Vec<Vec<u8>>> {
        let (a, b) = (start.to_string(), stop.to_string());
        self.elements(&[b"lrange", key, a.as_bytes(), b.as_bytes()])
    }

    /// The number of elements of the list `key` (0 if there is none).
    pub fn llen(&self, key: &[u8]) -> io::Result<usize> {
        match self.exec(&[b"llen", key]) {
            Reply::Int(n) => Ok(n as usize),
            r => Err(reply_error(r)),
        }
    }

    fn elements(&self, args: &[&[u8]]) -> io::Result<Vec<Vec<u8>>> {
        match self.exec(args) {
            Reply::NilArray => Ok(Vec::new()),
            Reply::Array(v) => v
                .into_iter()
                .map(|r| match r {
                    Reply::Bulk(b) => Ok(b),
                    r => Err(reply_error(r)),
                })
                .collect(),
            r => Err(reply_error(r)),
        }
    }

    /// The keys matching glob `pattern`.
    pub fn keys(&self, pattern: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        match self.exec(&[b"keys", pattern]) {
            Reply::Array(v) => Ok(v
                .into_iter()
                .filter_map(|r| {
                    if let Reply::Bulk(b) = r {
                        Some(b)
                    } else {
                        None
                    }
                })
                .collect()),
            r => Err(reply_error(r)),
        }
    }

    /// Adds `members` to the set `key` (creating it): how many were new. A key of
    /// another type is an error.
    pub fn sadd(&self, key: &[u8], members: &[&[u8]]) -> io::Result<usize> {
        self.set_command(b"sadd", key, members)
    }

    /// Removes `members` from the set `key` (removing the key with its last member):
    /// how many were there.
    pub fn srem(&self, key: &[u8], members: &[&[u8]]) -> io::Result<usize> {
        self.set_command(b"srem", key, members)
    }

    /// Whether the set `key` has `member` (false for a missing key).
    pub fn sismember(&self, key: &[u8], member: &[u8]) -> io::Result<bool> {
        self.set_command(b"sismember", key, &[member])
            .map(|n| n == 1)
    }

    /// The number of members of the set `key` (0 for a missing key).
    pub fn scard(&self, key: &[u8]) -> io::Result<usize> {
        self.set_command(b"scard", key, &[])
    }

    /// The members of the set `key` (none for a missing key), in no particular order.
    pub fn smembers(&self, key: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        match self.exec(&[b"smembers", key]) {
            Reply::Set(v) => Ok(v
                .into_iter()
                .filter_map(|r| match r {
                    Reply::Bulk(b) => Some(b),
                    _ => None,
                })
                .collect()),
            r => Err(reply_error(r)),
        }
    }

    /// Runs the set command `name` on `key` with `members`: its integer reply.
    fn set_command(&self, name: &[u8], key: &[u8], members: &[&[u8]]) -> io::Result<usize> {
        let mut args = vec![name, key];
        args.extend_from_slice(members);
        match self.exec(&args) {
            Reply::Int(n) => Ok(n as usize),
            r => Err(reply_error(r)),
        }
    }

    /// ZADD: sets the members' scores in the sorted set `key` (creating it), answers
    /// how many members were new. A NaN score is refused.
    pub fn zadd(&self, key: &[u8], members: &[(f64, &[u8])]) -> io::Result<i64> {
        if members.iter().any(|(s, _)| s.is_nan()) {
            return Err(io::Error::other("a score is not a number"));
        }
        // Rust writes a double as the shortest text that reads back as the same double.
        let scores: Vec<String> = members.iter().map(|(s, _)| s.to_string()).collect();
        let mut args: Vec<&[u8]> = vec![b"zadd", key];
        for (s, (_, m)) in scores.iter().zip(members) {
            args.push(s.as_bytes());
            args.push(m);
        }
        match self.exec(&args) {
            Reply::Int(n) => Ok(n),
            r => Err(reply_error(r)),
        }
    }

    /// ZREM: removes the members from the sorted set `key`, answers how many were there.
    pub fn zrem(&self, key: &[u8], members: &[&[u8]]) -> io::Result<i64> {
        let mut args: Vec<&[u8]> = vec![b"zrem", key];
        args.extend_from_slice(members);
        match self.exec(&args) {
            Reply::Int(n) => Ok(n),
            r => Err(reply_error(r)),
        }
    }

    /// ZSCORE: the member's score in the sorted set `key`, if it has the member.
    pub fn zscore(&self, key: &[u8], member: &[u8]) -> io::Result<Option<f64>> {
        match self.exec(&[b"zscore", key, member]) {
            Reply::Double(s) => Ok(Some(s)),
            Reply::Nil => Ok(None),
            r => Err(reply_error(r)),
        }
    }

    /// ZRANGE ... WITHSCORES: the members of ranks `start` to `stop` (negative: from
    /// the end) of the sorted set `key`, with their scores, lowest first.
    pub fn zrange(&self, key: &[u8], start: i64, stop: i64) -> io::Result<Vec<(Vec<u8>, f64)>> {
        let (a, b) = (start.to_string(), stop.to_string());
        match self.exec(&[b"zrange", key, a.as_bytes(), b.as_bytes(), b"withscores"]) {
            Reply::Pairs(p) => Ok(p
                .into_iter()
                .filter_map(|pair| match pair {
                    (Reply::Bulk(m), Reply::Double(s)) => Some((m, s)),
                    _ => None,
                })
                .collect()),
            r => Err(reply_error(r)),
        }
    }

    /// ZCARD: the number of members of the sorted set `key` (0 if it is missing).
    pub fn zcard(&self, key: &[u8]) -> io::Result<usize> {
        match self.exec(&[b"zcard", key]) {
            Reply::Int(n) => Ok(n as usize),
            r => Err(reply_error(r)),
        }
    }

    /// The number of keys (of database 0).
    pub fn len(&self) -> usize {
        (0..self.inner.count())
            .map(|s| self.inner.with(s, |sh| sh.db(0).len()))
            .sum()
    }

    /// Whether the store has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fsyncs every shard's log.
    pub fn sync(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
}

fn reply_error(r: Reply) -> io::Error {
    match r {
        Reply::Error(e) => io::Error::other(e.into_owned()),
        r => io::Error::other(format!("unexpected reply {r:?}")),
    }
}

impl Inner {
    fn sync_all(&self) -> io::Result<()> {
        for m in &self.shards {
            let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
            if g.unsynced {
                g.writer.sync()?;
                g.unsynced = false;
            }
        }
        Ok(())
    }
}

impl ShardSet for Inner {
    fn count(&self) -> usize {
        self.shards.len()
    }

    fn with<R: Send>(&self, s: usize, f: impl FnOnce(&mut Shard) -> R + Send) -> R {
        let _shared = self.gate.read().unwrap_or_else(|p| p.into_inner());
        self.run_on(s, f)
    }

    fn atomically<R>(&self, shards: &[usize], f: impl FnOnce(&dyn crate::exec::Held) -> R) -> R {
        let _alone = self.gate.write().unwrap_or_else(|p| p.into_inner());
        let id = self.last_tx.fetch_add(1, AcqRel) + 1;
        let r = f(&TxHeld(self));
        // Each part that logged something becomes one Tx frame naming the others, so
        // a crash keeps the whole transaction or none of it (`log/tx.rs`).
        let parts: Vec<usize> = shards
            .iter()
            .copied()
            .filter(|&s| {
                let g = self.shards[s].lock().unwrap_or_else(|p| p.into_inner());
                !g.shard.tx_log.is_empty()
            })
            .collect();
        let names = log::tx::shards_bytes(&parts);
        for &s in &parts {
            self.run_on(s, |sh| sh.tx_wrap(id, &names));
        }
        r
    }

    fn room(&self) -> u64 {
        u64::MAX
    }

    fn refuses_writes(&self, s: usize) -> Option<Reply> {
        let g = self.shards[s].lock().unwrap_or_else(|p| p.into_inner());
        g.error.as_ref().map(|e| {
            Reply::error(format!(
                "MISCONF Errors writing to the append only file: {e}"
            ))
        })
    }
}

/// The shards a transaction holds: its parts' records are kept aside until it wraps
/// them (`ShardSet::atomically`).
struct TxHeld<'a>(&'a Inner);

impl crate::exec::Held for TxHeld<'_> {
    fn with(&self, s: usize, f: &mut (dyn FnMut(&mut Shard) + Send)) {
        self.0.run_on(s, |sh| {
            sh.tx_enter();
            f(sh);
            sh.tx_leave();
        })
    }
}

impl Inner {
    /// Runs `f` on shard `s` under its lock, then writes what it logged.
    fn run_on<R>(&self, s: usize, f: impl FnOnce(&mut Shard) -> R) -> R {
        let mut g = self.shards[s].lock().unwrap_or_else(|p| p.into_inner());
        let r = f(&mut g.shard);
        if !g.shard.log.is_empty() {
            let (buf, end) = g.shard.take_log();
            let sync = self.fsync == Fsync::Always;
            match g.writer.write(&buf, sync) {
                Ok(()) => {
                    g.error = None;
                    g.unsynced |= !sync;
                    g.written = end;
                }
                Err(e) => {
                    // Kept in memory and written by the next command that succeeds.
                    g.shard.put_back(buf);
                    g.error = Some(e.to_string());
                }
            }
        }
        r
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.inner.stop.store(true, Release);
        if let Some(t) = self.syncer.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        let _ = self.inner.sync_all();
    }
}
