//! One shard's state, as the server and the embedded store both hold it: the
//! keyspace, the log records not yet handed to the log file, and the counters that
//! tell a connection when its writes are durable.
//!
//! Log sequence numbers (LSNs) count the bytes of records a shard has ever produced
//! (not file offsets: compaction replaces the file but the count goes on). A command
//! that changed something notes `appended` after it ran; it is acknowledged once the
//! writer has reported that LSN written (and fsynced, under `fsync always`). A command
//! that logged nothing waits only for the records of what it read (`Shard::run`).

use crate::commands::{Ctx, ShardFn};
use crate::keyspace::Keyspace;
use crate::resp::Reply;

/// One shard: keys plus the log buffer.
pub struct Shard {
    /// The keys.
    pub ks: Keyspace,
    /// Records produced since the writer last took them.
    pub log: Vec<u8>,
    /// The LSN at the end of `log` (every byte ever appended).
    pub appended: u64,
    /// While a compaction runs: every record produced since it started (replayed over
    /// the compacted image at its end: records are full states, so that is exact).
    pub rewrite_tail: Option<Vec<u8>>,
    /// The writer was asked to run (the server's flusher) and has not yet taken `log`.
    pub kicked: bool,
    /// The server's memory limit in bytes (0: none): set by the server before it
    /// runs commands here, so that each write can check what it adds against the
    /// limit for the whole server.
    pub mem_limit: u64,
    /// The memory the other shards used when they last said (set with `mem_limit`).
    pub mem_others: u64,
}

/// The most expired keys a command reclaims before it runs when the server is over
/// its memory limit (a bound on how long it holds the shard).
const RECLAIM_OVER_LIMIT: usize = 8192;

impl Shard {
    /// A shard over recovered keys.
    pub fn new(ks: Keyspace) -> Shard {
        Shard {
            ks,
            log: Vec::new(),
            appended: 0,
            rewrite_tail: None,
            kicked: false,
            mem_limit: 0,
            mem_others: 0,
        }
    }

    /// Runs shard function `f` with `args`; keeps `appended` and the rewrite tail up to
    /// date. Returns the reply and the LSN that must be written before the reply may be
    /// sent (0: nothing to wait for): the end of the log if the command logged
    /// something, else the stamp of the newest state it read (see the keyspace's
    /// "durability stamps"), so a read of a key untouched since its records were
    /// written does not wait for other keys' records.
    ///
    /// `out`: the connection's output buffer, if the caller encodes replies in order
    /// as commands run (see [`Ctx::out`]).
    pub fn run(
        &mut self,
        f: ShardFn,
        args: &[&[u8]],
        now_ms: u64,
        out: Option<&mut Vec<u8>>,
    ) -> (Reply, u64) {
        let before = self.log.len();
        let (over_memory, room) = self.memory_room(now_ms);
        self.ks.begin(self.appended + 1);
        let reply = {
            let mut ctx = Ctx {
                out,
                over_memory,
                room,
                ..Ctx::new(now_ms, &mut self.log)
            };
            f(&mut self.ks, args, &mut ctx)
        };
        let need = if self.note_logged(before) {
            self.appended
        } else {
            // Nothing logged: the newest state read (never past the log's end: a stamp
            // of this very command, noted by a change that logged nothing, is moot).
            self.ks.seen().min(self.appended)
        };
        (reply, need)
    }

    /// Whether the server is over its memory limit, and how many bytes a command may
    /// add (`u64::MAX`: no limit). Over the limit, expired keys of this shard are
    /// reclaimed first, so that keys whose time has passed never cause a refusal.
    fn memory_room(&mut self, now_ms: u64) -> (bool, u64) {
        let limit = self.mem_limit;
        if limit == 0 {
            return (false, u64::MAX);
        }
        let mut used = self.mem_others + self.ks.used_memory();
        if used > limit && self.ks.next_expiry().is_some_and(|at| at <= now_ms) {
            self.ks.reclaim(now_ms, used - limit, RECLAIM_OVER_LIMIT);
            used = self.mem_others + self.ks.used_memory();
        }
        (used > limit, limit.saturating_sub(used))
    }

    /// Accounts for records appended to `log` since it was `before` bytes long.
    pub fn note_logged(&mut self, before: usize) -> bool {
        let added = self.log.len() - before;
        if added == 0 {
            return false;
        }
        self.appended += added as u64;
        if let Some(t) = &mut self.rewrite_tail {
            t.extend_from_slice(&self.log[before..]);
        }
        true
    }

    /// Removes every key (logged).
    pub fn flush(&mut self) {
        let before = self.log.len();
        self.ks.flush(&mut self.log);
        self.note_logged(before);
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
