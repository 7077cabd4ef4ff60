//! A compaction's walk over one shard's keys, a step at a time, with a big key
//! written in pieces.
//!
//! A compaction runs as a green thread on its shard's worker, and each step of its walk
//! holds the worker: other commands run only between steps. A step writes the
//! whole-state records of the keys of [`KEYS_PER_STEP`] hashes, except that a hash,
//! set, sorted set, list or stream of more than [`PIECE`] elements or [`PIECE_BYTES`] of memory
//! is set aside (it is *held*) and written later, a piece of at most that a step
//! (`keyspace/pieces.rs`): the first
//! piece's record creates the key, replacing what it held, the later ones add to it.
//! The held keys of a step are written before the walk goes on.
//!
//! ```text
//! step:  held key waiting?  yes: write its next piece (or all of it, or its removal)
//!                           no:  walk the next KEYS_PER_STEP hashes, holding big keys
//! ```
//!
//! What a write between steps does to the compaction (`Shard::note_logged`): a record
//! about a key behind the walk's frontier goes to the compaction's tail, which follows
//! the image; a key ahead of it will be walked with every change. A held key is behind
//! the frontier but not yet (or not wholly) in the image, so its records stay out of
//! the tail until its first piece is written: it is written from its state when its
//! turn comes, with every change up to then. A change to the key whose pieces are
//! being written then depends on its type ([`pieces::goes_on`]):
//!
//! - a hash, set or sorted set *goes on*: its records go to the tail and the next
//!   piece goes on from the last one's position over its current state. Its records
//!   set elements' states (never a relative change: HINCRBY, ZINCRBY, SPOP, SMOVE...
//!   log the state they leave) and its positions are elements of an order of their
//!   own (a field hash; a sorted set's last (score, member) written), so an element
//!   never written to is in exactly one piece, and one written to has its last state
//!   in the tail, after whatever piece caught it. If the key is removed or replaced
//!   (its type or table is another: [`pieces::identity`]), the tail holds the record
//!   that did it, and its pieces stop. A key written without a pause (a benchmark's
//!   SADD, SPOP, ZADD, ZPOPMIN, HSET on one key) so costs no work thrown away.
//! - a list (LPUSH and RPOP shift its positions) or a stream *starts again*: the next
//!   step writes it from its current state, from a first record that replaces
//!   whatever the earlier pieces made, so image and tail replay exactly whatever
//!   happened between pieces (a removal, a RENAME or MOVE away, an expiry, an
//!   eviction, a new value of another type: if the key is gone, the step writes its
//!   removal). After [`RESTARTS`] starts of one key, the step writes it whole, so a
//!   key written without a pause cannot hold the compaction back for ever.
//!
//! A record about whole databases (FLUSHDB,
//! SWAPDB, FLUSHALL) starts the whole compaction again while a key is held, as it does
//! while the walk is under way. The caller waits for a transaction holding the shard
//! before each step (the image never holds part of one), and a crash at any step
//! leaves the old log in force: the image becomes the log only when it is published.

use crate::keyspace::{pieces, Keyspace};
use crate::log::{self, RecordRef, DATABASES};
use crate::shard::Shard;
use std::collections::VecDeque;

/// The hashes of keys a step of the walk visits.
pub const KEYS_PER_STEP: usize = 1024;

/// The most elements of a big key a step writes (past which a key is big).
pub const PIECE: usize = 4096;

/// The memory of the elements of a big key a step writes, about (past which a key is
/// big).
pub const PIECE_BYTES: u64 = 256 << 10;

/// The times a big list or stream is started again before it is written whole in one
/// step.
pub const RESTARTS: u32 = 3;

/// The keys a compaction's walk has passed but not yet written whole (module doc): on
/// the shard, where its writes look ([`Held::holds`]).
#[derive(Debug, Default)]
pub struct Held {
    /// The keys, by database, the first being written.
    keys: VecDeque<(u8, Box<[u8]>)>,
    /// The image holds pieces of the first key.
    written: bool,
    /// The first key's pieces go on over its changes ([`pieces::goes_on`]): once the
    /// image holds a piece of it, its records go to the tail.
    goes_on: bool,
    /// The first key was written to since its last piece (and its records were held).
    changed: bool,
    /// The records about a key being written that went to the tail, its pieces going
    /// on (read by the tests: nothing reports it).
    pub went_on: u64,
}

impl Held {
    /// Where a record about `key` of database `db` goes if the key is held:
    /// `Some(false)`, held (out of the compaction's tail: the key is written from its
    /// state later; a change to the key being written is noted); `Some(true)`, to the
    /// tail (the key being written, whose pieces go on over its changes); `None`, not
    /// held.
    pub fn holds(&mut self, db: u8, key: &[u8]) -> Option<bool> {
        if self.keys.is_empty() {
            return None;
        }
        let i = self
            .keys
            .iter()
            .position(|(d, k)| *d == db && **k == *key)?;
        if i == 0 && self.written && self.goes_on {
            self.went_on += 1;
            return Some(true);
        }
        if i == 0 {
            self.changed = true;
        }
        Some(false)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Holds no key (a compaction starts or ends).
    pub fn clear(&mut self) {
        *self = Held::default();
    }
}

/// A compaction's walk over a shard (module doc).
#[derive(Debug)]
pub struct Walk {
    db: u8,
    cursor: u64,
    /// Where the next piece of the first held key starts.
    at: pieces::At,
    /// What the first held key's pieces are of ([`pieces::identity`]).
    of: (u8, usize),
    /// The times the first held key was started again.
    restarts: u32,
    keys: usize,
    piece: pieces::Size,
    /// The steps that wrote a piece of a held key (or all of it).
    pub pieces: u64,
    /// The times a held key was started again after a change.
    pub restarted: u64,
    /// The held keys written whole after [`RESTARTS`] starts. (These three counts are
    /// read by the tests: nothing reports them.)
    pub whole: u64,
}

impl Default for Walk {
    fn default() -> Self {
        Walk::with(KEYS_PER_STEP, PIECE)
    }
}

impl Walk {
    /// A walk of `keys` hashes a step, writing big keys at most `piece` elements (and
    /// about [`PIECE_BYTES`]) a step.
    pub fn with(keys: usize, piece: usize) -> Walk {
        Walk {
            db: 0,
            cursor: 0,
            at: pieces::At::Start,
            of: (0, 0),
            restarts: 0,
            keys,
            piece: pieces::Size {
                elements: piece,
                bytes: PIECE_BYTES,
            },
            pieces: 0,
            restarted: 0,
            whole: 0,
        }
    }

    /// One step: appends the records it writes to `out`, sets the shard's frontier;
    /// whether the walk is done (every key written).
    pub fn step(&mut self, sh: &mut Shard, now: u64, out: &mut Vec<u8>) -> bool {
        if let Some((db, key)) = sh.rewrite_held.keys.front().cloned() {
            self.piece_of(sh, db, &key, now, out);
            return false;
        }
        if self.db >= DATABASES {
            return true;
        }
        let db = self.db;
        let held = &mut sh.rewrite_held;
        self.cursor = sh.dbs[db as usize].walk_deferring(
            self.cursor,
            self.keys,
            now,
            self.piece,
            |r| log::encode_in(db, &r, out),
            |k| held.keys.push_back((db, k.into())),
        );
        if self.cursor == 0 {
            self.db += 1;
        }
        sh.frontier = (self.db, self.cursor);
        self.db >= DATABASES && sh.rewrite_held.is_empty()
    }

    /// Writes the next piece of held key `key` of database `db` (the first held).
    fn piece_of(&mut self, sh: &mut Shard, db: u8, key: &[u8], now: u64, out: &mut Vec<u8>) {
        let held = &mut sh.rewrite_held;
        if std::mem::take(&mut held.changed) && self.at != pieces::At::Start {
            // Changed between its pieces: from its current state again.
            self.at = pieces::At::Start;
            self.restarts += 1;
            self.restarted += 1;
        }
        let mut enc = |r: RecordRef<'_>| log::encode_in(db, &r, out);
        let e = sh.dbs[db as usize].for_compaction(key, now);
        let next = match e {
            // Its pieces went on and its records went to the tail since the first: the
            // tail holds whatever removed or replaced it, the image needs no more.
            _ if held.written && held.goes_on && e.map(pieces::identity) != Some(self.of) => None,
            None => {
                // Gone: undo what its pieces made, if any.
                if held.written {
                    enc(RecordRef::Del { key });
                }
                None
            }
            Some(e) if self.restarts >= RESTARTS => {
                self.whole += 1;
                Keyspace::state_records(e, enc);
                None
            }
            Some(e) => {
                if self.at == pieces::At::Start {
                    self.of = pieces::identity(e);
                    held.goes_on = pieces::goes_on(e);
                }
                let n = pieces::piece_len(e, self.piece);
                pieces::state_piece(e, &self.at, n, enc)
            }
        };
        self.pieces += 1;
        match next {
            Some(at) => {
                self.at = at;
                held.written = true;
            }
            None => {
                held.keys.pop_front();
                (held.written, held.changed, held.goes_on) = (false, false, false);
                (self.at, self.restarts) = (pieces::At::Start, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{lookup, transfer, Exec};
    use crate::shard::tests::{replay, Rnd};

    /// Every live key of every database as (database, key, type and expiry, items),
    /// sorted; a hash's and a set's items sorted, whatever the encoding or pieces.
    fn dump(dbs: &[Keyspace], now: u64) -> Vec<(usize, Vec<u8>, String, Vec<Vec<u8>>)> {
        let mut out: Vec<(usize, Vec<u8>, String, Vec<Vec<u8>>)> = Vec::new();
        for (d, ks) in dbs.iter().enumerate() {
            let mut cur = 0;
            loop {
                cur = ks.walk(cur, 5, now, |r| {
                    let key = r.key().expect("a key's record").to_vec();
                    let (head, items) = match r {
                        RecordRef::Hash {
                            items,
                            expire_at_ms,
                            ..
                        } => (Some(format!("hash {expire_at_ms:?}")), items.to_vec()),
                        RecordRef::ZSet {
                            items,
                            expire_at_ms,
                            ..
                        } => (Some(format!("zset {expire_at_ms:?}")), items.to_vec()),
                        RecordRef::Members {
                            items,
                            expire_at_ms,
                            ..
                        } => (Some(format!("set {expire_at_ms:?}")), items.to_vec()),
                        RecordRef::List {
                            items,
                            expire_at_ms,
                            ..
                        } => (Some(format!("list {expire_at_ms:?}")), items.to_vec()),
                        RecordRef::HSet { items, .. }
                        | RecordRef::ZAdd { items, .. }
                        | RecordRef::SAdd { items, .. }
                        | RecordRef::RPush { items, .. } => (None, items.to_vec()),
                        r => (Some(format!("{r:?}")), vec![]),
                    };
                    match (head, out.last_mut()) {
                        (None, Some((db, k, _, v))) if *db == d && *k == key => v.extend(items),
                        (Some(head), _) => out.push((d, key, head, items)),
                        (None, _) => panic!("an add record without its key's first record"),
                    }
                });
                if cur == 0 {
                    break;
                }
            }
        }
        for (_, _, head, v) in &mut out {
            if head.starts_with("hash") {
                let mut pairs: Vec<Vec<u8>> = v.chunks(2).map(|p| p.join(&b'=')).collect();
                pairs.sort();
                *v = pairs;
            } else if head.starts_with("set") {
                v.sort();
            }
        }
        out.sort();
        out
    }

    /// Runs command `line` in database `db` of the shard, as the server does; every
    /// record goes to `all` too.
    fn run(sh: &mut Shard, db: u8, line: &[String], now: u64, all: &mut Vec<u8>) {
        if line[0] == "smove" {
            return smove(sh, db, line, now, all);
        }
        let before = sh.log.len();
        let argv: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        let f = match line[0].as_str() {
            "rename" => transfer::rename,
            name => match lookup(name.as_bytes()).unwrap().exec {
                Exec::Shard(f) | Exec::Split(f, _) => f,
                Exec::Server => panic!("{name} is run by the server"),
            },
        };
        sh.run(f, db, &argv, now, None);
        all.extend_from_slice(&sh.log[before..]);
        sh.log.clear();
    }

    /// SMOVE `line` in database `db`, as the server runs it: a transaction of an `SRem`
    /// from the source and, if the member was there, an `SAdd` to the destination.
    fn smove(sh: &mut Shard, db: u8, line: &[String], now: u64, all: &mut Vec<u8>) {
        let (src, dst, member) = (line[1].as_bytes(), line[2].as_bytes(), line[3].as_bytes());
        let f = |name: &[u8]| match lookup(name).unwrap().exec {
            Exec::Shard(f) | Exec::Split(f, _) => f,
            Exec::Server => unreachable!(),
        };
        let before = sh.log.len();
        sh.tx_enter();
        let (moved, _) = sh.run(f(b"srem"), db, &[b"srem", src, member], now, None);
        if moved == crate::resp::Reply::Int(1) {
            sh.run(f(b"sadd"), db, &[b"sadd", dst, member], now, None);
        }
        sh.tx_leave();
        let id = sh.last_tx + 1;
        sh.tx_wrap(id, &crate::log::tx::shards_bytes(&[0]));
        all.extend_from_slice(&sh.log[before..]);
        sh.log.clear();
    }

    /// The big keys' names, one of each type, and the names they may be renamed to.
    const BIG: [&str; 5] = ["z", "s", "h", "l", "x"];
    const OTHER: [&str; 3] = ["a", "b", "c"];

    /// The commands making big key `name` (the type its name says) with `n` elements
    /// (a stream: made anew).
    fn create(name: &str, n: u64, salt: u64) -> Vec<Vec<String>> {
        if name == "x" {
            let mut lines = vec![vec!["del".to_string(), name.into()]];
            lines.extend((1..=n).map(|i| {
                let id = format!("{}-{i}", salt + 1);
                vec!["xadd".into(), name.into(), id, "f".into(), format!("v{i}")]
            }));
            return lines;
        }
        let mut line: Vec<String> = match name {
            "z" => vec!["zadd".into(), name.into()],
            "s" => vec!["sadd".into(), name.into()],
            "h" => vec!["hset".into(), name.into()],
            _ => vec!["rpush".into(), name.into()],
        };
        for i in 0..n {
            match name {
                "z" => line.extend([format!("{}", (i * 7 + salt) % 1000), format!("m{i}")]),
                "h" => line.extend([format!("f{i}"), format!("v{}", i + salt)]),
                _ => line.push(format!("e{i}.{salt}")),
            }
        }
        vec![line]
    }

    /// One random command of every kind that changes big keys between pieces: adds,
    /// removals, pops, a new score, DEL, RENAME, MOVE, expiry, a new value of another
    /// type, the key made again, now and then a FLUSHDB.
    fn random_command(sh: &mut Shard, r: &mut Rnd, now: u64, all: &mut Vec<u8>) {
        let db = r.below(2) as u8;
        let name = BIG[r.below(5) as usize];
        let i = r.below(1500);
        let s = |x: &str| x.to_string();
        let line: Vec<String> = match r.below(31 + ELEMENT_WRITES) {
            0 if r.below(6) == 0 => {
                let before = sh.log.len();
                sh.flush_db(db);
                all.extend_from_slice(&sh.log[before..]);
                sh.log.clear();
                return;
            }
            1 => {
                let before = sh.log.len();
                sh.move_key(name.as_bytes(), db, 1 - db, now);
                all.extend_from_slice(&sh.log[before..]);
                sh.log.clear();
                return;
            }
            2 => vec![s("del"), s(name)],
            3 => vec![s("rename"), s(name), s(OTHER[r.below(3) as usize])],
            4 => vec![s("rename"), s(OTHER[r.below(3) as usize]), s(name)],
            5 => vec![s("pexpire"), s(name), format!("{}", 1 + r.below(4))],
            6 => vec![s("set"), s(name), s("a string now")],
            7..=8 => {
                for line in create(name, 100 + r.below(400), r.below(1000)) {
                    run(sh, db, &line, now, all);
                }
                return;
            }
            27 => vec![s("xadd"), s("x"), s("*"), s("g"), format!("{i}")],
            28 => vec![s("xtrim"), s("x"), s("maxlen"), format!("{}", 200 + i)],
            29 if i.is_multiple_of(2) => vec![
                s("xgroup"),
                s("create"),
                s("x"),
                format!("g{}", i % 3),
                s("0"),
            ],
            29 => vec![
                s("xgroup"),
                s("createconsumer"),
                s("x"),
                format!("g{}", i % 3),
                format!("c{i}"),
            ],
            9..=11 => vec![
                s("zadd"),
                s("z"),
                format!("{}", r.below(2000)),
                format!("m{i}"),
            ],
            12 => vec![s("zrem"), s("z"), format!("m{i}")],
            13..=14 => vec![s("sadd"), s("s"), format!("e{i}.0")],
            15 => vec![s("spop"), s("s")],
            16 => vec![s("srem"), s("s"), format!("e{i}.0")],
            17..=19 => vec![s("hset"), s("h"), format!("f{i}"), format!("w{i}")],
            20 => vec![s("hdel"), s("h"), format!("f{i}")],
            21..=22 => vec![s("rpush"), s("l"), format!("x{i}")],
            23 => vec![s("lpush"), s("l"), format!("y{i}")],
            24 => vec![s("lpop"), s("l")],
            25 => vec![s("lset"), s("l"), s("3"), format!("z{i}")],
            26 => vec![s("persist"), s(name)],
            30.. if r.below(4) != 0 => element_write(r),
            _ => vec![s("set"), s(OTHER[r.below(3) as usize]), format!("v{i}")],
        };
        run(sh, db, &line, now, all);
    }

    /// The kinds of [`element_write`].
    const ELEMENT_WRITES: u64 = 12;

    /// A random write to elements of the big set, hash or sorted set, as a stream of
    /// writes to one big key makes them: adds, pops, new scores and values, relative
    /// ones (ZINCRBY, ZADD INCR, HINCRBY, HINCRBYFLOAT) and SMOVE out and in.
    fn element_write(r: &mut Rnd) -> Vec<String> {
        let i = r.below(1500);
        let s = |x: &str| x.to_string();
        match r.below(ELEMENT_WRITES) {
            0 => vec![
                s("sadd"),
                s("s"),
                format!("e{i}.1"),
                format!("e{}.0", i / 2),
            ],
            1 => vec![s("spop"), s("s"), format!("{}", 1 + r.below(3))],
            2 => vec![s("smove"), s("s"), s("t"), format!("e{i}.0")],
            3 => vec![s("smove"), s("t"), s("s"), format!("e{i}.0")],
            4 if i.is_multiple_of(2) => {
                vec![s("zadd"), s("z"), s("incr"), s("-700"), format!("m{i}")]
            }
            4 => vec![
                s("zadd"),
                s("z"),
                format!("{}", r.below(3000)),
                format!("n{i}"),
            ],
            5 => vec![s("zpopmin"), s("z"), format!("{}", 1 + r.below(3))],
            6 => vec![s("zpopmax"), s("z")],
            7 => vec![s("zincrby"), s("z"), s("1.5"), format!("m{i}")],
            8 => vec![s("zrem"), s("z"), format!("m{i}"), format!("n{i}")],
            9 => vec![s("hset"), s("h"), format!("g{i}"), format!("{i}")],
            10 => vec![s("hincrby"), s("h"), format!("g{}", i % 50), s("3")],
            _ => vec![s("hincrbyfloat"), s("h"), format!("k{}", i % 50), s("0.25")],
        }
    }

    /// A compaction whose big keys (of every type, in two databases) are written in
    /// pieces while commands change, remove, rename, move, expire and make them again
    /// between the pieces: its image plus its tail replays to exactly the live state,
    /// as the whole log does. Keys were started again, some often enough to be written
    /// whole, and many were written in more than one piece. `WEFT_KV_STRESS=1`: 400
    /// rounds instead of 12.
    #[test]
    fn big_keys_changed_between_pieces_replay_exactly() {
        let mut r = Rnd(0x9e37_79b9_7f4a_7c15);
        let (mut restarted, mut pieces, mut went_on) = (0, 0, 0);
        let rounds = match std::env::var_os("WEFT_KV_STRESS") {
            Some(_) => 400,
            None => 12,
        };
        for round in 0..rounds {
            let mut sh = Shard::new(vec![]);
            let mut now = 1_000_000;
            let mut all = Vec::new();
            for db in 0..2 {
                for name in BIG {
                    for line in create(name, 600 + r.below(600), round) {
                        run(&mut sh, db, &line, now, &mut all);
                    }
                }
            }
            for _ in 0..20 {
                random_command(&mut sh, &mut r, now, &mut all);
            }
            // The compaction, as `Shards::compact` runs it.
            sh.start_rewrite();
            let mut image = Vec::new();
            let mut walk = Walk::with(2, 64);
            loop {
                if sh.rewrite_restart {
                    sh.start_rewrite();
                    image.clear();
                    walk = Walk::with(2, 64);
                    continue;
                }
                if walk.step(&mut sh, now, &mut image) {
                    break;
                }
                for _ in 0..r.below(3) {
                    random_command(&mut sh, &mut r, now, &mut all);
                }
                now += r.below(2);
            }
            for _ in 0..10 {
                random_command(&mut sh, &mut r, now, &mut all);
            }
            went_on += sh.rewrite_held.went_on;
            image.extend_from_slice(&sh.end_rewrite().unwrap());
            restarted += walk.restarted;
            pieces += walk.pieces;
            // (the whole log, the compaction) against the live state
            let live = dump(&sh.dbs, now);
            let replayed = [&all, &image].map(|log| dump(&replay(log, now), now));
            assert_eq!(replayed, [live.clone(), live], "round {round}");
        }
        assert!(
            restarted > 0,
            "a change between pieces started a list or stream again"
        );
        assert!(went_on > 0, "changes went to the tail, the pieces going on");
        assert!(
            pieces > rounds * 8,
            "big keys were written in pieces: {pieces}"
        );
    }

    /// A big set, hash and sorted set, each written to between every two pieces (as a
    /// stream of SADD, SPOP, ZADD, ZPOPMIN, HSET... without a pause makes it), are
    /// written in pieces without being started again: their records go to the tail
    /// and the pieces go on, and the image plus the tail replays to exactly the live
    /// state. A list written to between every two pieces is started again [`RESTARTS`]
    /// times and then written whole. `WEFT_KV_STRESS=1`: 200 rounds instead of 4.
    #[test]
    fn big_keys_written_between_every_piece_go_on() {
        let mut r = Rnd(0x2545_f491_4f6c_dd1d);
        let rounds = match std::env::var_os("WEFT_KV_STRESS") {
            Some(_) => 200,
            None => 4,
        };
        for round in 0..rounds {
            let mut sh = Shard::new(vec![]);
            let now = 1_000_000;
            let mut all = Vec::new();
            for name in ["z", "s", "h", "l"] {
                for line in create(name, 1500 + r.below(1500), round) {
                    run(&mut sh, 0, &line, now, &mut all);
                }
            }
            sh.start_rewrite();
            let (mut image, mut walk) = (Vec::new(), Walk::with(2, 64));
            let (mut steps, mut after_pieces) = (0, 0);
            while !walk.step(&mut sh, now, &mut image) {
                assert!(!sh.rewrite_restart, "no record about a whole database");
                steps += 1;
                let held = &sh.rewrite_held;
                if held.written && held.keys.front().is_some_and(|(_, k)| **k != *b"l") {
                    after_pieces += 1;
                }
                // A write to each big key, then random ones.
                let n = steps.to_string();
                for line in [
                    ["rpush", "l", &n],
                    ["spop", "s", "1"],
                    ["zpopmin", "z", "1"],
                    ["hset", "h", &n],
                ] {
                    let mut line: Vec<String> = line.map(String::from).into();
                    if line[0] == "hset" {
                        line.push("v".into());
                    }
                    run(&mut sh, 0, &line, now, &mut all);
                }
                for _ in 0..1 + r.below(4) {
                    run(&mut sh, 0, &element_write(&mut r), now, &mut all);
                }
                if r.below(8) == 0 {
                    // The tail so far goes to the image between steps, as
                    // `Shards::compact` may take it.
                    image.extend_from_slice(&sh.take_rewrite_tail());
                }
            }
            let went_on = sh.rewrite_held.went_on;
            image.extend_from_slice(&sh.end_rewrite().unwrap());
            let live = dump(&sh.dbs, now);
            assert_eq!(dump(&replay(&image, now), now), live, "round {round}");
            assert_eq!(dump(&replay(&all, now), now), live, "round {round}");
            // Only the list was started again, then written whole.
            assert_eq!(walk.restarted, RESTARTS as u64, "round {round}");
            assert_eq!(walk.whole, 1, "round {round}");
            // Every write to a key after its first piece went to the tail.
            assert!(
                went_on >= after_pieces,
                "round {round}: {went_on} of {after_pieces}"
            );
            assert!(
                after_pieces > 3 * 1500 / 64 / 2,
                "round {round}: {after_pieces}"
            );
            assert!(walk.pieces > 3 * 1500 / 64, "{} pieces", walk.pieces);
        }
    }

    /// A whole compaction with no command between its steps: the walk, the image and
    /// tail, the steps, the most bytes one step wrote.
    fn compact_quietly(sh: &mut Shard, now: u64) -> (Walk, Vec<u8>, usize, usize) {
        sh.start_rewrite();
        let (mut image, mut steps, mut most) = (Vec::new(), 0, 0);
        let mut walk = Walk::default();
        loop {
            let before = image.len();
            let done = walk.step(sh, now, &mut image);
            steps += 1;
            most = most.max(image.len() - before);
            if done {
                break;
            }
        }
        image.extend_from_slice(&sh.end_rewrite().unwrap());
        (walk, image, steps, most)
    }

    /// The walk's steps over a sorted set of 100,000 members: the set is written over
    /// many steps of at most a piece each, not in one, and the image replays to it.
    #[test]
    fn a_big_sorted_set_takes_many_steps() {
        let mut sh = Shard::new(vec![]);
        let now = 1_000_000;
        let mut all = Vec::new();
        let mut line = vec!["zadd".to_string(), "big".to_string()];
        for i in 0..100_000 {
            line.extend([format!("{i}"), format!("member:{i}")]);
        }
        run(&mut sh, 0, &line, now, &mut all);
        run(
            &mut sh,
            0,
            &["set".into(), "small".into(), "x".into()],
            now,
            &mut all,
        );
        let (walk, image, steps, most) = compact_quietly(&mut sh, now);
        // At most PIECE members a piece (fewer by PIECE_BYTES of ~100-byte members).
        assert!(
            walk.pieces >= 100_000u64.div_ceil(PIECE as u64),
            "{}",
            walk.pieces
        );
        assert!(steps > 24, "{steps} steps");
        assert!(
            most < image.len() / 20,
            "a step wrote {most} of {} bytes",
            image.len()
        );
        assert_eq!(dump(&replay(&image, now), now), dump(&sh.dbs, now));
    }

    /// A hash of few but large fields (200 of 10 KB, under [`PIECE`] fields) is
    /// written in pieces of about [`PIECE_BYTES`], and its image replays to it.
    #[test]
    fn a_hash_of_large_fields_is_written_in_pieces_by_its_memory() {
        let mut sh = Shard::new(vec![]);
        let now = 1_000_000;
        let mut all = Vec::new();
        let mut line = vec!["hset".to_string(), "wide".to_string()];
        for i in 0..200 {
            line.extend([format!("f{i}"), format!("{i:<10000}")]);
        }
        run(&mut sh, 0, &line, now, &mut all);
        let (walk, image, _, most) = compact_quietly(&mut sh, now);
        assert!(walk.pieces >= 6, "{} pieces", walk.pieces);
        assert!(most < 2 * PIECE_BYTES as usize, "a step wrote {most} bytes");
        assert_eq!(dump(&replay(&image, now), now), dump(&sh.dbs, now));
    }
}
