//! One shard's state, as the server and the embedded store both hold it: the
//! keyspaces of its 16 databases, the log records not yet handed to the log file, and
//! the counters that tell a connection when its writes are durable.
//!
//! Log sequence numbers (LSNs) count the bytes of records a shard has ever produced
//! (not file offsets: compaction replaces the file but the count goes on). A command
//! that changed something notes `appended` after it ran; it is acknowledged once the
//! writer has reported that LSN written (and fsynced, under `fsync always`). A command
//! that logged nothing waits only for the records of what it read (`Shard::run`).
//!
//! While a compaction runs, the records of keys it has already walked (behind its
//! *frontier*) are also kept in a tail, which the compaction appends to its image:
//! a key ahead of the frontier will be walked with every change up to then, so each
//! change is in the new log once (docs/kv-types.md, "How does compaction rewrite every
//! type?"). A record about whole databases (FLUSHDB, FLUSHALL, SWAPDB) makes the
//! compaction start again.

use crate::commands::{Ctx, ShardFn};
use crate::keyspace::Keyspace;
use crate::log::record::FRAME_HEADER;
use crate::log::{self, RecordRef, DATABASES};
use crate::resp::Reply;

/// One shard: keys plus the log buffer.
pub struct Shard {
    /// The keys of each database: `dbs[d]` is database `d` (16 of them).
    pub dbs: Vec<Keyspace>,
    /// Records produced since the writer last took them.
    pub log: Vec<u8>,
    /// The LSN at the end of `log` (every byte ever appended).
    pub appended: u64,
    /// The changes logged since start-up: each key a command changed ([`count_changes`]).
    /// INFO's `rdb_changes_since_last_save` (Redis's `dirty`) counts from these; a
    /// command that changed nothing logs nothing, so counts nothing.
    pub changes: u64,
    /// `changes` when the running (or last) compaction started: what it saves.
    pub changes_at_rewrite: u64,
    /// While a compaction runs: the records produced since it started about keys
    /// behind `frontier` (appended to the compacted image at its end).
    pub rewrite_tail: Option<Vec<u8>>,
    /// While a compaction runs: the (database, hash) position its walk has reached;
    /// every key before it has been walked.
    pub frontier: (u8, u64),
    /// A record about whole databases was logged while a compaction ran: it must
    /// start again.
    pub rewrite_restart: bool,
    /// While a compaction runs: the big keys its walk passed but has not yet written
    /// whole, whose records stay out of its tail (`compact.rs`).
    pub rewrite_held: crate::compact::Held,
    /// The databases commands changed since the server last published their counts
    /// (a bit per database).
    pub dirty_dbs: u16,
    /// The writer was asked to run (the server's flusher) and has not yet taken `log`.
    pub kicked: bool,
    /// The server's memory limit in bytes (0: none): set by the server before it
    /// runs commands here, so that each write can check what it adds against the
    /// limit for the whole server.
    pub mem_limit: u64,
    /// The memory the other shards used when they last said (set with `mem_limit`).
    pub mem_others: u64,
    /// The records the transaction holding the shard has logged here so far, until
    /// its part is wrapped in a `Tx` frame ([`Shard::tx_wrap`]; `log/tx.rs`).
    pub tx_log: Vec<u8>,
    /// A transaction's part runs now: its records go to `tx_log` ([`Shard::tx_enter`]).
    pub in_tx: bool,
    /// The highest transaction id whose part this shard logged (or recovered).
    pub last_tx: u64,
    /// The best candidates for eviction seen in earlier samples (`evict.rs`).
    pub evict_pool: crate::evict::Pool,
    /// The keys connections watch here (WATCH; `watch.rs`), if any.
    pub watches: Option<Box<crate::watch::Watches>>,
    /// The connections blocked on this shard's keys (BLPOP, BZPOPMIN, ...), and the
    /// waited keys that commands wrote to (`server/blocking.rs`).
    pub blocked: crate::server::blocking::Blocked,
}

/// Whether `payload` is a record that changes only an encoding
/// ([`log::RecordRef::only_encoding`]: a `SetRange`, kind 17, of nothing at offset 0;
/// a `ZAdd`, kind 51, of no members).
fn only_encoding(payload: &[u8]) -> bool {
    // kind:u8 db:u8 key_len:u32le key, then for kind 17 offset:u64le piece_len:u32le,
    // for kind 51 n:u32le and the items
    let Some(key_len) = payload.get(2..6) else {
        return false;
    };
    let key_len = u32::from_le_bytes(key_len.try_into().unwrap()) as usize;
    let rest = payload.get(6 + key_len..);
    (payload[0] == 17 && rest == Some(&[0u8; 12][..]))
        || (payload[0] == 51 && rest == Some(&[0u8; 4][..]))
}

/// The changes in whole frames `frames`, the records one command logged: each key it
/// changed counts one (a key's records follow one another: SETBIT of a new key logs
/// its creation, then its byte), and so does a record without a key (FLUSHDB). A `Tx`
/// frame wraps records counted when a transaction's commands logged them. Reads each
/// frame's header, kind, database and key only.
fn count_changes(frames: &[u8]) -> u64 {
    let mut n = 0;
    let mut last: Option<&[u8]> = None;
    let mut at = 0;
    while let Some(header) = frames.get(at..at + FRAME_HEADER) {
        let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
        let payload = &frames[at + FRAME_HEADER..at + FRAME_HEADER + len];
        at += FRAME_HEADER + len;
        if payload.first() == Some(&log::tx::TX_KIND) || only_encoding(payload) {
            continue;
        }
        // kind:u8 db:u8 key_len:u32le key
        let key_len = payload
            .get(2..6)
            .map(|l| u32::from_le_bytes(l.try_into().unwrap()));
        let db_and_key = key_len.and_then(|l| payload.get(1..6 + l as usize));
        if db_and_key.is_none() || db_and_key != last {
            n += 1;
        }
        last = db_and_key;
    }
    n
}

/// The most expired keys a command reclaims before it runs when the server is over
/// its memory limit (a bound on how long it holds the shard).
const RECLAIM_OVER_LIMIT: usize = 8192;

impl Shard {
    /// A shard over recovered databases (`dbs[d]` for database `d`; fewer than 16 are
    /// completed with empty ones).
    pub fn new(mut dbs: Vec<Keyspace>) -> Shard {
        dbs.resize_with(DATABASES as usize, Keyspace::new);
        for (d, ks) in dbs.iter_mut().enumerate() {
            ks.set_db(d as u8);
        }
        Shard {
            dbs,
            log: Vec::new(),
            appended: 0,
            changes: 0,
            changes_at_rewrite: 0,
            rewrite_tail: None,
            frontier: (0, 0),
            rewrite_restart: false,
            rewrite_held: Default::default(),
            dirty_dbs: u16::MAX,
            kicked: false,
            mem_limit: 0,
            mem_others: 0,
            tx_log: Vec::new(),
            in_tx: false,
            last_tx: 0,
            watches: None,
            blocked: Default::default(),
            evict_pool: Default::default(),
        }
    }

    /// Runs shard function `f` with `args`; keeps `appended` and the rewrite tail up to
    /// date. Returns the reply and the LSN that must be written before the reply may be
    /// sent (0: nothing to wait for): the end of the log if the command logged
    /// something, else the stamp of the newest state it read (see the keyspace's
    /// "durability stamps"), so a read of a key untouched since its records were
    /// written does not wait for other keys' records.
    ///
    /// `db`: the database the command runs in (the connection's selected one).
    /// `out`: the connection's output buffer, if the caller encodes replies in order
    /// as commands run (see [`Ctx::out`]).
    pub fn run(
        &mut self,
        f: ShardFn,
        db: u8,
        args: &[&[u8]],
        now_ms: u64,
        out: Option<&mut Vec<u8>>,
    ) -> (Reply, u64) {
        self.run_with(f, db, args, now_ms, out, None)
    }

    /// [`Shard::run`] of a command whose reply is encoded later, on its connection's
    /// worker: the messages that keys evicted before it send the connection
    /// (client-side caching) go to `before`, for the connection to send just ahead
    /// of the reply, as [`Shard::run`] puts them ahead of it in `out`.
    pub fn run_before(
        &mut self,
        f: ShardFn,
        db: u8,
        args: &[&[u8]],
        now_ms: u64,
        before: &mut Vec<u8>,
    ) -> (Reply, u64) {
        self.run_with(f, db, args, now_ms, None, Some(before))
    }

    fn run_with(
        &mut self,
        f: ShardFn,
        db: u8,
        args: &[&[u8]],
        now_ms: u64,
        out: Option<&mut Vec<u8>>,
        before_reply: Option<&mut Vec<u8>>,
    ) -> (Reply, u64) {
        crate::keyspace::access::set_now(now_ms);
        let (over_memory, room, evicted) = self.memory_room(now_ms);
        // (An eviction to make room logged and noted its records itself: the
        // command's own start after them.)
        let before = self.log.len();
        let mut out = out;
        if evicted > 0 {
            // Evicted before the command: the connection's invalidations come
            // before its reply, as in Redis.
            if let Some(to) = out.as_deref_mut().or(before_reply) {
                crate::pubsub::tracking::flush_writer_into(to);
            }
        }
        self.dirty_dbs |= 1 << db;
        let ks = &mut self.dbs[db as usize];
        ks.begin(self.appended + 1);
        let reply = {
            let mut ctx = Ctx {
                out,
                over_memory,
                room,
                db,
                ..Ctx::new(now_ms, &mut self.log)
            };
            f(ks, args, &mut ctx)
        };
        let seen = ks.seen();
        let need = if self.note_logged(before) {
            self.appended
        } else {
            // Nothing logged: the newest state read (never past the log's end: a stamp
            // of this very command, noted by a change that logged nothing, is moot).
            seen.min(self.appended)
        };
        (reply, need)
    }

    /// The keys of database `db`.
    #[inline]
    pub fn db(&self, db: u8) -> &Keyspace {
        &self.dbs[db as usize]
    }

    /// The memory of every database's keys.
    pub fn used_memory(&self) -> u64 {
        self.dbs.iter().map(Keyspace::used_memory).sum()
    }

    /// The keys removed because their time had passed, in every database, ever.
    pub fn expired_count(&self) -> u64 {
        self.dbs.iter().map(Keyspace::expired_count).sum()
    }

    /// The earliest expiry time of any key of any database.
    pub fn next_expiry(&self) -> Option<u64> {
        self.dbs.iter().filter_map(Keyspace::next_expiry).min()
    }

    /// Removes up to `max_keys` keys whose time has passed, database after database;
    /// answers how many.
    pub fn expire_cycle(&mut self, now_ms: u64, max_keys: usize) -> usize {
        let mut n = 0;
        for (d, ks) in self.dbs.iter_mut().enumerate() {
            if n == max_keys {
                break;
            }
            if ks.next_expiry().is_some_and(|at| at <= now_ms) {
                n += ks.expire_cycle(now_ms, max_keys - n);
                self.dirty_dbs |= 1 << d;
            }
        }
        n
    }

    /// Removes expired keys, database after database, until `bytes` are freed or
    /// `max_keys` removed; answers the bytes freed.
    pub fn reclaim(&mut self, now_ms: u64, bytes: u64, max_keys: usize) -> u64 {
        let mut freed = 0;
        for (d, ks) in self.dbs.iter_mut().enumerate() {
            if freed >= bytes {
                break;
            }
            if ks.next_expiry().is_some_and(|at| at <= now_ms) {
                freed += ks.reclaim(now_ms, bytes - freed, max_keys);
                self.dirty_dbs |= 1 << d;
            }
        }
        freed
    }

    /// Whether the server is over its memory limit, how many bytes a command may
    /// add (`u64::MAX`: no limit), and how many keys of this shard were evicted. Over
    /// the limit, expired keys of this shard are reclaimed first, so that keys whose
    /// time has passed never cause a refusal; then, under an evicting
    /// `maxmemory-policy`, keys are evicted (`evict.rs`). (The count is this shard's
    /// own, not the server's `evicted_keys`: the other shards evict at the same time
    /// on their workers, and CONFIG RESETSTAT clears that one.)
    fn memory_room(&mut self, now_ms: u64) -> (bool, u64, usize) {
        let limit = self.mem_limit;
        if limit == 0 {
            return (false, u64::MAX, 0);
        }
        let mut used = self.mem_others + self.used_memory();
        if used > limit && self.next_expiry().is_some_and(|at| at <= now_ms) {
            self.reclaim(now_ms, used - limit, RECLAIM_OVER_LIMIT);
            used = self.mem_others + self.used_memory();
        }
        if crate::evict::evicting() {
            return self.evict_for_room(now_ms);
        }
        (used > limit, limit.saturating_sub(used), 0)
    }

    /// Accounts for records appended to `log` since it was `before` bytes long.
    pub fn note_logged(&mut self, before: usize) -> bool {
        let added = self.log.len() - before;
        if added == 0 {
            return false;
        }
        self.changes += count_changes(&self.log[before..]);
        if self.watches.is_some() {
            self.touch_logged(before);
        }
        if crate::pubsub::tracking::active() {
            crate::pubsub::tracking::written_records(&self.log[before..]);
        }
        // A transaction's part: counted, and given to a compaction, once it is
        // wrapped in its `Tx` frame (`tx_wrap`).
        let in_tx = self.in_tx;
        if !in_tx {
            self.appended += added as u64;
        }
        // A waited key written to is ready to serve its waiters (after the command).
        if !self.blocked.is_empty() {
            self.blocked.note(&self.log[before..]);
        }
        if self.rewrite_tail.is_some() && !in_tx {
            self.note_for_rewrite(before);
        }
        true
    }

    /// A part of the transaction holding the shard starts: what it logs is kept
    /// aside in `tx_log` (the records logged before it stay in `log`, for the writer).
    pub fn tx_enter(&mut self) {
        debug_assert!(!self.in_tx, "a transaction's parts do not nest");
        self.in_tx = true;
        std::mem::swap(&mut self.log, &mut self.tx_log);
    }

    /// The part that [`Shard::tx_enter`] started is done.
    pub fn tx_leave(&mut self) {
        debug_assert!(self.in_tx);
        self.in_tx = false;
        std::mem::swap(&mut self.log, &mut self.tx_log);
    }

    /// Ends transaction `id`'s part here: the records its parts logged become its
    /// `Tx` frame (or frames) naming the participants `shards` ([`log::tx`]), logged.
    /// Answers the LSN at its end.
    pub fn tx_wrap(&mut self, id: u64, shards: &[u8]) -> u64 {
        let mut records = std::mem::take(&mut self.tx_log);
        if !records.is_empty() {
            let before = self.log.len();
            log::tx::encode_part(id, shards, &records, &mut self.log);
            self.last_tx = self.last_tx.max(id);
            self.note_logged(before);
            records.clear();
        }
        self.tx_log = records;
        self.appended
    }

    /// For a compaction: the records of the `Tx` frame `frame` about keys behind the
    /// frontier, as a `Tx` frame of the same id (maybe empty: the id is kept).
    fn tx_for_rewrite(&mut self, frame: &[u8]) {
        let Ok((
            _,
            RecordRef::Tx {
                id,
                more,
                shards,
                body,
            },
            _,
        )) = log::decode_frame(frame)
        else {
            return;
        };
        let mut kept = Vec::new();
        for (db, rec) in log::tx::records(body) {
            if Self::behind_frontier(
                &self.dbs,
                self.frontier,
                &mut self.rewrite_restart,
                &mut self.rewrite_held,
                db,
                &rec,
            ) {
                log::encode_in(db, &rec, &mut kept);
            }
        }
        let tail = self.rewrite_tail.as_mut().expect("a compaction runs");
        let rec = RecordRef::Tx {
            id,
            more,
            shards,
            body: &kept,
        };
        log::encode_in(0, &rec, tail);
    }

    /// Whether record `rec` of database `db` goes to the running compaction's tail:
    /// its key is behind the frontier (already walked) and not held (a big key not yet
    /// written whole: `compact.rs`). A record without a key makes the compaction start
    /// again, unless every database is walked and no key is held.
    fn behind_frontier(
        dbs: &[Keyspace],
        frontier: (u8, u64),
        restart: &mut bool,
        held: &mut crate::compact::Held,
        db: u8,
        rec: &RecordRef<'_>,
    ) -> bool {
        match rec.key() {
            Some(key) => match held.holds(db, key) {
                Some(to_tail) => to_tail,
                None => (db, dbs[db as usize].hash(key)) < frontier,
            },
            // Every database walked: the image is whole, anything may follow it.
            None if frontier.0 as usize == dbs.len() && held.is_empty() => true,
            None => {
                *restart = true;
                false
            }
        }
    }

    /// Keeps, of the records appended since `before`, those about keys the running
    /// compaction has walked (module doc).
    fn note_for_rewrite(&mut self, before: usize) {
        let mut at = before;
        while at < self.log.len() {
            let (db, rec, n) =
                log::decode_frame(&self.log[at..]).expect("a command logs whole records");
            if let RecordRef::Tx { .. } = rec {
                let frame = self.log[at..at + n].to_vec();
                self.tx_for_rewrite(&frame);
                at += n;
                continue;
            }
            if Self::behind_frontier(
                &self.dbs,
                self.frontier,
                &mut self.rewrite_restart,
                &mut self.rewrite_held,
                db,
                &rec,
            ) {
                let tail = self.rewrite_tail.as_mut().expect("a compaction runs");
                tail.extend_from_slice(&self.log[at..at + n]);
            }
            at += n;
        }
    }

    /// Starts keeping the tail of a compaction whose walk starts now.
    ///
    /// The tail starts with an empty `Tx` frame of the highest transaction id the shard
    /// has logged, so that the compacted log still says which transactions it has
    /// (`log/tx.rs`): those are written everywhere before the walk's first step (it
    /// waits for a held gate), and so before the compaction is published. The
    /// transactions wrapped later are in the tail with their own ids, after it; a note
    /// at the end instead would hide a last part that recovery must hold back.
    pub fn start_rewrite(&mut self) {
        let mut tail = Vec::new();
        if self.last_tx > 0 {
            log::tx::encode_part(self.last_tx, &[], &[], &mut tail);
        }
        self.rewrite_tail = Some(tail);
        self.frontier = (0, 0);
        self.rewrite_restart = false;
        self.rewrite_held.clear();
        self.changes_at_rewrite = self.changes;
    }

    /// The compaction's tail kept so far, taken out (the tail goes on from empty): the
    /// compaction appends it to its image before the rest, which keeps the order.
    pub fn take_rewrite_tail(&mut self) -> Vec<u8> {
        self.rewrite_tail
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Ends keeping a compaction's tail: the tail.
    pub fn end_rewrite(&mut self) -> Option<Vec<u8>> {
        self.rewrite_restart = false;
        self.rewrite_held.clear();
        self.rewrite_tail.take()
    }

    /// Logs `rec` (about whole databases: FLUSHDB, FLUSHALL, SWAPDB) for database `db`
    /// as its own command.
    fn log_whole(&mut self, db: u8, rec: RecordRef<'_>) {
        let before = self.log.len();
        log::encode_in(db, &rec, &mut self.log);
        self.note_logged(before);
    }

    /// Moves `key` from database `from` to database `to` (MOVE; logged as its removal
    /// from one and its whole state in the other): whether it moved (not if it is
    /// missing from `from` or already in `to`).
    pub fn move_key(&mut self, key: &[u8], from: u8, to: u8, now_ms: u64) -> bool {
        let stamp = self.appended + 1;
        let before = self.log.len();
        let (f, t) = (from as usize, to as usize);
        self.dbs[f].begin(stamp);
        self.dbs[t].begin(stamp);
        if !self.dbs[f].contains(key, now_ms) || self.dbs[t].contains(key, now_ms) {
            return false;
        }
        let e = self.dbs[f].take(key, now_ms).expect("a live key");
        log::encode_in(from, &RecordRef::Del { key }, &mut self.log);
        Keyspace::state_records(&e, |r| log::encode_in(to, &r, &mut self.log));
        self.dbs[t].put(e);
        self.dirty_dbs |= 1 << from | 1 << to;
        self.note_logged(before);
        true
    }

    /// Removes every key of database `db` (FLUSHDB; logged).
    pub fn flush_db(&mut self, db: u8) {
        self.touch_db(db, None, now_ms());
        let stamp = self.appended + 1;
        let ks = &mut self.dbs[db as usize];
        ks.begin(stamp);
        ks.flush();
        self.dirty_dbs |= 1 << db;
        self.log_whole(db, RecordRef::Flush);
    }

    /// Removes every key of every database (FLUSHALL; logged).
    pub fn flush_all(&mut self) {
        if self.watches.is_some() {
            let now = now_ms();
            for db in 0..DATABASES {
                self.touch_db(db, None, now);
            }
        }
        let stamp = self.appended + 1;
        for ks in &mut self.dbs {
            ks.begin(stamp);
            ks.flush();
        }
        self.dirty_dbs = u16::MAX;
        self.log_whole(0, RecordRef::FlushAll);
    }

    /// Swaps databases `a` and `b` (SWAPDB; logged).
    pub fn swap_dbs(&mut self, a: u8, b: u8) {
        if a == b {
            return;
        }
        if self.watches.is_some() {
            let now = now_ms();
            self.touch_db(a, Some(b), now);
            self.touch_db(b, Some(a), now);
        }
        let stamp = self.appended + 1;
        let (lo, hi) = (a.min(b) as usize, a.max(b) as usize);
        let (x, y) = self.dbs.split_at_mut(hi);
        Keyspace::swap(&mut x[lo], &mut y[0], stamp);
        self.dirty_dbs |= 1 << a | 1 << b;
        self.log_whole(a, RecordRef::SwapDb { other: b });
    }

    /// Takes the records not yet written: the bytes and the LSN at their end.
    pub fn take_log(&mut self) -> (Vec<u8>, u64) {
        self.kicked = false;
        (std::mem::take(&mut self.log), self.appended)
    }

    /// Puts back records a failed write did not write, in front of any newer ones.
    pub fn put_back(&mut self, mut buf: Vec<u8>) {
        buf.extend_from_slice(&self.log);
        self.log = buf;
    }
}

/// The time in Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::commands::{lookup, Exec};
    use crate::keyspace::Replay;

    /// Every live key of every database: (database, key, its whole-state records as
    /// bytes), sorted; a big hash's fields sorted so that order does not matter.
    fn dump(dbs: &[Keyspace], now: u64) -> Vec<(usize, Vec<u8>, Vec<Vec<u8>>)> {
        let mut out: Vec<(usize, Vec<u8>, Vec<Vec<u8>>)> = Vec::new();
        for (d, ks) in dbs.iter().enumerate() {
            let mut cur = 0;
            loop {
                cur = ks.walk(cur, 5, now, |r| {
                    let key = r.key().expect("a key's record").to_vec();
                    let mut parts = match r {
                        RecordRef::Set {
                            value,
                            expire_at_ms,
                            ..
                        } => vec![
                            b"s".to_vec(),
                            value.to_vec(),
                            format!("{expire_at_ms:?}").into(),
                        ],
                        RecordRef::SetStr {
                            value,
                            expire_at_ms,
                            enc,
                            ..
                        } => vec![
                            b"s".to_vec(),
                            value.to_vec(),
                            format!("{expire_at_ms:?} {enc:?}").into(),
                        ],
                        RecordRef::Hash {
                            items,
                            expire_at_ms,
                            ..
                        } => {
                            let mut v = vec![b"h".to_vec(), format!("{expire_at_ms:?}").into()];
                            v.extend(items.to_vec().chunks(2).map(|p| p.concat()));
                            v
                        }
                        RecordRef::HSet { items, .. } => {
                            items.to_vec().chunks(2).map(|p| p.concat()).collect()
                        }
                        r => panic!("{r:?}"),
                    };
                    match out.last_mut() {
                        Some((db, k, v)) if *db == d && *k == key => v.append(&mut parts),
                        _ => out.push((d, key, parts)),
                    }
                });
                if cur == 0 {
                    break;
                }
            }
        }
        for (_, _, v) in &mut out {
            if v[0] == b"h" {
                v[2..].sort();
            }
        }
        out.sort();
        out
    }

    /// The databases `log` replays to at `now`.
    pub(crate) fn replay(log: &[u8], now: u64) -> Vec<Keyspace> {
        let mut dbs: Vec<Keyspace> = (0..DATABASES).map(|_| Keyspace::new()).collect();
        let mut rp = Replay::new(&mut dbs, now);
        let mut at = 0;
        while at < log.len() {
            let (db, rec, n) = log::decode_frame(&log[at..]).unwrap();
            rp.push(db, rec);
            at += n;
        }
        rp.finish();
        dbs
    }

    /// A small random generator (xorshift) for the tests.
    pub(crate) struct Rnd(pub u64);
    impl Rnd {
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// One random command of every kind that changes keys (strings, hashes, the
    /// expiry, databases), run on the shard as the server runs it; every record goes
    /// to `all` too.
    fn random_command(sh: &mut Shard, r: &mut Rnd, now: u64, all: &mut Vec<u8>) {
        let db = r.below(3) as u8;
        let key = format!("k{}", r.below(40));
        let most = if r.below(8) == 0 { 300 } else { 6 };
        let field = format!("f{}", r.below(most));
        let before = sh.log.len();
        match r.below(40) {
            0 => sh.flush_db(db),
            1 => sh.swap_dbs(db, r.below(3) as u8),
            2 => {
                sh.move_key(key.as_bytes(), db, r.below(3) as u8, now);
            }
            3 if r.below(4) == 0 => sh.flush_all(),
            // A transaction's part: two commands' records wrapped in one Tx frame,
            // which a compaction's tail keeps whole or in part by the frontier.
            3 if r.below(3) == 0 => {
                let (f, other) = (format!("f{}", r.below(6)), format!("k{}", r.below(40)));
                sh.tx_enter();
                for (k, args) in [
                    (&key, ["set", key.as_str(), f.as_str()]),
                    (&other, ["hset", other.as_str(), f.as_str()]),
                ] {
                    let cmd = lookup(args[0].as_bytes()).unwrap();
                    let Exec::Shard(run) = cmd.exec else {
                        unreachable!()
                    };
                    let mut argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                    if args[0] == "hset" {
                        argv.push(k.as_bytes());
                    }
                    sh.run(run, db, &argv, now, None);
                }
                sh.tx_leave();
                sh.tx_wrap(1 + r.below(100), &log::tx::shards_bytes(&[0, 1]));
            }
            n => {
                let v = format!("v{}", r.below(1000));
                let many: Vec<String> = (0..r.below(200))
                    .flat_map(|i| [format!("m{i}"), "x".repeat(i as usize % 70)])
                    .collect();
                let args: Vec<&str> = match n {
                    4..=8 => vec!["set", &key, &v],
                    9..=11 => vec!["append", &key, &v],
                    12..=13 => vec!["setrange", &key, "3", &v],
                    14..=15 => vec!["del", &key],
                    16 => vec!["pexpire", &key, "50"],
                    17 => vec!["expire", &key, "1000"],
                    18 => vec!["persist", &key],
                    19..=25 => vec!["hset", &key, &field, &v],
                    26 => {
                        let mut a = vec!["hset", &key];
                        a.extend(many.iter().map(String::as_str));
                        if a.len() == 2 {
                            a.extend([&field[..], &v]);
                        }
                        a
                    }
                    27..=30 => vec!["hdel", &key, &field, "f1"],
                    31..=33 => vec!["hincrby", &key, &field, "7"],
                    34 => vec!["hincrbyfloat", &key, &field, "0.5"],
                    35 => vec!["incr", &key],
                    36 => vec!["set", &key, &v, "px", "30"],
                    _ => vec!["hsetnx", &key, &field, &v],
                };
                let cmd = lookup(args[0].as_bytes()).unwrap();
                let (Exec::Shard(f) | Exec::Split(f, _)) = cmd.exec else {
                    unreachable!()
                };
                let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                sh.run(f, db, &argv, now, None);
            }
        }
        all.extend_from_slice(&sh.log[before..]);
        sh.log.clear();
    }

    /// Compaction while commands run: its image (walked a few hashes at a time, with
    /// commands of every kind between the steps, time passing) plus its tail of
    /// records behind the frontier (taken in pieces after the walk, as the catch-up
    /// does, then the rest) replays to exactly the shard's state, as the whole log
    /// does; a command about whole databases behind the walk makes it start again.
    #[test]
    fn compaction_with_changes_in_between_is_exact() {
        let mut r = Rnd(0x2545_f491_4f6c_dd1d);
        let mut restarts = 0;
        for round in 0..30 {
            let mut sh = Shard::new(vec![]);
            let mut now = 1_000_000;
            let mut all = Vec::new();
            for _ in 0..300 {
                random_command(&mut sh, &mut r, now, &mut all);
            }
            // The compaction, as `Shards::compact` runs it.
            sh.start_rewrite();
            let mut image = Vec::new();
            let (mut db, mut cursor) = (0u8, 0u64);
            while (db as usize) < DATABASES as usize {
                if sh.rewrite_restart {
                    sh.start_rewrite();
                    image.clear();
                    (db, cursor) = (0, 0);
                    restarts += 1;
                    continue;
                }
                cursor = sh.dbs[db as usize]
                    .walk(cursor, 2, now, |rec| log::encode_in(db, &rec, &mut image));
                if cursor == 0 {
                    db += 1;
                }
                sh.frontier = (db, cursor);
                for _ in 0..r.below(4) {
                    random_command(&mut sh, &mut r, now, &mut all);
                }
                now += r.below(3);
            }
            // The catch-up: the tail taken a piece at a time while commands go on,
            // then the rest at the end.
            for _ in 0..3 {
                for _ in 0..r.below(8) {
                    random_command(&mut sh, &mut r, now, &mut all);
                }
                image.extend_from_slice(&sh.take_rewrite_tail());
            }
            for _ in 0..20 {
                random_command(&mut sh, &mut r, now, &mut all);
            }
            let tail = sh.end_rewrite().unwrap();
            image.extend_from_slice(&tail);
            let live = dump(&sh.dbs, now);
            assert_eq!(
                dump(&replay(&all, now), now),
                live,
                "round {round}: the whole log"
            );
            assert_eq!(
                dump(&replay(&image, now), now),
                live,
                "round {round}: the compaction"
            );
            assert!(image.len() < all.len() || round == 0 || live.is_empty());
        }
        assert!(
            restarts > 0,
            "a command about whole databases restarted a compaction"
        );
    }

    /// A compaction's tail starts with a note of the shard's highest transaction id,
    /// and a part wrapped while it runs comes after it: replayed, the image and tail
    /// still hold that part back when it is last (a note after it would release it).
    #[test]
    fn a_compacted_log_holds_back_its_last_part() {
        let mut sh = Shard::new(vec![]);
        let set = lookup(b"set").unwrap();
        let Exec::Shard(f) = set.exec else {
            unreachable!()
        };
        let part = |sh: &mut Shard, id: u64, key: &str| {
            sh.tx_enter();
            sh.run(f, 0, &[b"set", key.as_bytes(), b"v"], 1, None);
            sh.tx_leave();
            sh.tx_wrap(id, &log::tx::shards_bytes(&[0, 1]))
        };
        part(&mut sh, 5, "a");
        sh.start_rewrite();
        // The walk, done: every key behind the frontier.
        sh.frontier = (DATABASES, 0);
        part(&mut sh, 6, "b");
        let tail = sh.end_rewrite().unwrap();
        let mut applied = Vec::new();
        let mut txs =
            log::tx::TxReplay::new(|_, r: RecordRef<'_>| applied.push(r.key().unwrap().to_vec()));
        let mut at = 0;
        while at < tail.len() {
            let (db, rec, n) = log::decode_frame(&tail[at..]).unwrap();
            txs.push(db, rec);
            at += n;
        }
        let t = txs.finish();
        assert_eq!(t.applied, 5, "the note says the shard had transaction 5");
        let held = t.held.expect("transaction 6 is held back");
        assert_eq!((held.id, held.shards.clone()), (6, vec![0, 1]));
        assert!(applied.is_empty(), "{applied:?}");
        assert!(tail.ends_with(&held.frames));
    }

    /// A shard counts each key a command changed once, whatever its records: SETBIT
    /// of a new key (its creation, then its byte), a transaction's commands (not the
    /// `Tx` frame that wraps them), FLUSHDB; a command that changed nothing, none.
    #[test]
    fn changes_count_the_keys_commands_changed() {
        let mut sh = Shard::new(vec![]);
        let now = 1_700_000_000_000;
        let run = |sh: &mut Shard, line: &[&str]| {
            let (Exec::Shard(f) | Exec::Split(f, _)) = lookup(line[0].as_bytes()).unwrap().exec
            else {
                panic!("{line:?} is not a shard command")
            };
            let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
            sh.run(f, 0, &argv, now, None);
            sh.changes
        };
        assert_eq!(run(&mut sh, &["setbit", "b", "9", "0"]), 1);
        assert_eq!(run(&mut sh, &["setbit", "b", "9", "0"]), 1);
        assert_eq!(run(&mut sh, &["setbit", "b", "9", "1"]), 2);
        assert_eq!(run(&mut sh, &["get", "b"]), 2);
        assert_eq!(run(&mut sh, &["hset", "h", "f", "v", "g", "w"]), 3);
        assert_eq!(run(&mut sh, &["del", "b"]), 4);
        assert_eq!(run(&mut sh, &["del", "b"]), 4);
        sh.tx_enter();
        run(&mut sh, &["set", "x", "1"]);
        run(&mut sh, &["incr", "x"]);
        run(&mut sh, &["get", "x"]);
        sh.tx_leave();
        sh.tx_wrap(7, &log::tx::shards_bytes(&[0, 1]));
        assert_eq!(sh.changes, 6);
        sh.flush_db(0);
        assert_eq!(sh.changes, 7);
    }
}
