//! Start-up replay of a shard's log: the records applied in batches sorted by key hash.
//!
//! Applying millions of records in log order inserts keys at random places of the
//! index (it is ordered by a keyed hash): nearly every insert misses the cache. (With
//! the former B-tree, a 10-million-key start-up spent 62% of its time there.) But the
//! records of *different* keys commute (each touches one key's entry, the counters are
//! sums, the expiry index is per key), and a *stable* sort by hash keeps the records
//! of one key, and of one hash, in log order. So [`Replay`] gathers up to [`BATCH`]
//! records, sorts them by hash and applies them in that order: consecutive inserts
//! touch neighbouring slots of the index, which stay in the cache. The index is first
//! grown to hold the whole batch (inserted in hash order into a table sized for fewer
//! keys, they would pile up at its start). A Flush record (every key gone) is a
//! barrier: the batch before it is applied first. The result is exactly the keyspace
//! that applying the records one by one gives (tested below, with hash collisions
//! forced).
//!
//! Records come borrowed from recovery's read buffer: a batched `Set` is already the
//! key's [`super::Entry`] (one allocation holding key and value, which moves into the
//! index); the key of a `Del` or `Expire` is kept in a [`Key`] (a short key inline, so
//! no allocation at all).

use super::{Key, Keyspace, Op};
use crate::log::RecordRef;

/// Records gathered before a batch is sorted and applied: enough that consecutive
/// inserts of a batch land a few slots apart even in an index of tens of millions.
/// The batch costs about 64 bytes a record (the hash, the database and the operation;
/// a whole state's entry is an allocation the keyspace keeps), 64 MiB at most,
/// returned once replay ends.
pub const BATCH: usize = 1 << 20;

/// Replays a shard's log into its databases; [`Replay::finish`] applies what is still
/// gathered, then drops the keys whose time has passed and packs the sorted sets and
/// hashes small enough to be packed (`pack_small`).
pub struct Replay<'a> {
    dbs: &'a mut [Keyspace],
    now_ms: u64,
    batch: Vec<(u64, u8, Op<Key>)>,
}

impl<'a> Replay<'a> {
    /// Replays into `dbs` (database `d` is `dbs[d]`; a record of a database past the
    /// end is ignored), dropping at the end the keys whose expiry time has passed at
    /// `now_ms`.
    pub fn new(dbs: &'a mut [Keyspace], now_ms: u64) -> Replay<'a> {
        Replay {
            dbs,
            now_ms,
            batch: Vec::new(),
        }
    }

    /// The next record of the log, of database `db`.
    pub fn push(&mut self, db: u8, rec: RecordRef<'_>) {
        if db as usize >= self.dbs.len() {
            return;
        }
        match (Op::from_record(rec), rec) {
            (Some(op), _) if op.key().is_some() => {
                let k = op.key().expect("a keyed record");
                let h = self.dbs[db as usize].hash(k);
                self.batch.push((h, db, op.map_key(Key::from)));
                if self.batch.len() == BATCH {
                    self.apply_batch();
                }
            }
            (Some(op), _) => {
                // Flush: after everything before it.
                self.apply_batch();
                self.dbs[db as usize].apply_hashed(0, op);
            }
            (None, RecordRef::FlushAll) => {
                self.apply_batch();
                for ks in self.dbs.iter_mut() {
                    ks.clear();
                }
            }
            (None, RecordRef::SwapDb { other }) => {
                self.apply_batch();
                let (a, b) = (db as usize, other as usize);
                if a != b && b < self.dbs.len() {
                    let (lo, hi) = (a.min(b), a.max(b));
                    let (x, y) = self.dbs.split_at_mut(hi);
                    Keyspace::swap(&mut x[lo], &mut y[0], 0);
                }
            }
            // A transaction's part (a log's last one is held back by recovery:
            // `log::tx`): its records, in order.
            (None, RecordRef::Tx { body, .. }) => {
                for (db, r) in crate::log::tx::records(body) {
                    self.push(db, r);
                }
            }
            (None, _) => unreachable!("every other record is about one keyspace"),
        }
    }

    /// Applies the records still gathered, then removes the keys whose time has
    /// passed (they expired while nothing ran: not counted as expired by a command).
    pub fn finish(mut self) {
        self.apply_batch();
        for ks in self.dbs.iter_mut() {
            ks.expire_cycle(self.now_ms, usize::MAX);
            ks.reset_expired_count();
            pack_small(ks, self.now_ms);
        }
    }

    fn apply_batch(&mut self) {
        // Stable: one key's records stay in log order.
        self.batch.sort_by_key(|&(h, _, _)| h);
        // Room for every key of the batch first: keys inserted in hash order into a
        // table sized for fewer would pile up at its start (index.rs, `reserve`).
        let mut per_db = [0usize; crate::log::DATABASES as usize];
        for &(_, db, _) in &self.batch {
            per_db[db as usize] += 1;
        }
        for (db, n) in per_db.into_iter().enumerate() {
            if n > 0 {
                self.dbs[db].reserve(n);
            }
        }
        for (h, db, rec) in self.batch.drain(..) {
            self.dbs[db as usize].apply_hashed(h, rec);
        }
    }
}

/// Packs every sorted set and hash of `ks` small enough to be packed that is not
/// (`zset::pack_if_fits`, `hash::pack_if_fits`): the end of a replay, as Redis 7.0
/// loads a small sorted set or hash as a listpack whatever its encoding when it was
/// saved, so the encoding after a restart does not depend on whether a compaction ran
/// (whose records of a small one make it packed). Answers how many.
pub(super) fn pack_small(ks: &mut Keyspace, now_ms: u64) -> usize {
    use super::value::tag;
    let small: Vec<Vec<u8>> = ks
        .index
        .iter_from(0)
        .filter(|(_, e)| match e.tag() {
            tag::ZSET_SKIP => super::zset::len(e) <= super::zset::max_packed_entries(),
            tag::HASH_TABLE => super::hash::len(e) <= super::hash::max_packed_entries(),
            _ => false,
        })
        .map(|(_, e)| e.key().to_vec())
        .collect();
    let pack = |e: &mut super::Entry| super::zset::pack_if_fits(e) || super::hash::pack_if_fits(e);
    small
        .iter()
        .filter(|k| ks.modify(k, now_ms, pack) == Some(true))
        .count()
}

#[cfg(test)]
mod tests {
    use super::super::{hash, Type};
    use super::*;
    use crate::log::Record;

    type Dump = Vec<(Vec<u8>, Vec<Vec<u8>>, Option<u64>)>;

    /// Every key (expired ones too) with its content (a string's bytes, a hash's
    /// sorted fields and values) and expiry.
    fn dump(ks: &Keyspace) -> Dump {
        let mut v: Dump = ks
            .index
            .iter_from(0)
            .map(|(_, e)| {
                let content = match e.kind() {
                    Type::String => vec![vec![b's', e.tag()], e.value().to_vec()],
                    Type::Hash => {
                        let mut pairs: Vec<Vec<u8>> =
                            hash::iter(e).map(|(f, v)| [f, b"=", v].concat()).collect();
                        pairs.sort();
                        pairs.insert(0, b"h".to_vec());
                        pairs
                    }
                    Type::ZSet => {
                        let mut pairs: Vec<Vec<u8>> = super::super::zset::view(e)
                            .iter()
                            .map(|(m, s)| [m, &s.to_bits().to_le_bytes()].concat())
                            .collect();
                        pairs.insert(0, b"z".to_vec());
                        pairs
                    }
                    Type::Set => {
                        let mut members: Vec<Vec<u8>> =
                            super::super::set::iter(e).map(|m| m.to_vec()).collect();
                        members.sort();
                        members.insert(0, b"S".to_vec());
                        members
                    }
                    Type::List => {
                        let mut elements: Vec<Vec<u8>> = super::super::list::iter_from(e, 0)
                            .map(<[u8]>::to_vec)
                            .collect();
                        elements.insert(0, b"l".to_vec());
                        elements
                    }
                    Type::Stream => {
                        let mut records = vec![b"x".to_vec()];
                        super::super::stream::state_records(e, |k, b| {
                            records.push([&[k][..], b].concat())
                        });
                        records
                    }
                };
                (e.key().to_vec(), content, e.expire_at_ms())
            })
            .collect();
        v.sort();
        v
    }

    /// Random records of every kind over few keys (so one key gets many records), in
    /// three databases, with a narrow hash (so buckets collide): sorted replay ends
    /// where one-by-one replay does, counters and expiry index included.
    #[test]
    fn batched_replay_equals_record_by_record() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let now = 1_000_000;
        // Rounds that end with some key (a round may end just after a FLUSHALL).
        let mut nonempty = 0;
        for round in 0..20 {
            let mut recs = Vec::new();
            for _ in 0..3_000 {
                let key = format!("k{}", rnd(300)).into_bytes();
                let at = match rnd(4) {
                    0 => Some(now - 10 + rnd(20)), // passed or not
                    1 => Some(now + 1_000 + rnd(3)),
                    _ => None,
                };
                let fields = |rnd: &mut dyn FnMut(u64) -> u64, pairs: bool| {
                    let mut v = Vec::new();
                    for _ in 0..1 + rnd(4) {
                        v.push(format!("f{}", rnd(8)).into_bytes());
                        if pairs {
                            let most = if rnd(30) == 0 { 90 } else { 9 };
                            v.push(vec![b'v'; rnd(most) as usize]);
                        }
                    }
                    v
                };
                let db = rnd(3) as u8;
                recs.push((
                    db,
                    match rnd(32) {
                        0 if round % 2 == 0 => Record::Flush,
                        1 if round % 3 == 0 => Record::FlushAll,
                        2 if round % 2 == 1 => Record::SwapDb {
                            other: rnd(3) as u8,
                        },
                        3..=5 => Record::Del { key },
                        6..=8 => Record::Expire { key, at_ms: at },
                        9..=10 => Record::Append {
                            key,
                            piece: vec![b'a'; rnd(5) as usize],
                        },
                        11..=12 => Record::SetRange {
                            key,
                            offset: rnd(12),
                            piece: vec![b'r'; rnd(4) as usize],
                        },
                        13..=15 => Record::Hash {
                            key,
                            expire_at_ms: at,
                            items: fields(&mut rnd, true),
                        },
                        16..=19 => Record::HSet {
                            key,
                            items: fields(&mut rnd, true),
                        },
                        20..=22 => Record::HDel {
                            key,
                            items: fields(&mut rnd, false),
                        },
                        23..=24 => Record::Members {
                            key,
                            expire_at_ms: at,
                            items: fields(&mut rnd, false),
                        },
                        25 => Record::SAdd {
                            key,
                            items: fields(&mut rnd, false),
                        },
                        26 => Record::SRem {
                            key,
                            items: fields(&mut rnd, false),
                        },
                        27 => Record::SetStr {
                            key,
                            value: b"1000".to_vec(),
                            expire_at_ms: at,
                            enc: if rnd(2) == 0 {
                                crate::log::StrEnc::Raw
                            } else {
                                crate::log::StrEnc::Float
                            },
                        },
                        30 => Record::List {
                            key,
                            expire_at_ms: at,
                            items: fields(&mut rnd, false),
                        },
                        31 => match rnd(5) {
                            0 => Record::LPush {
                                key,
                                items: fields(&mut rnd, false),
                            },
                            1 => Record::RPop { key, count: rnd(3) },
                            2 => Record::LInsert {
                                key,
                                index: rnd(4),
                                value: b"i".to_vec(),
                            },
                            3 => Record::LSet {
                                key,
                                index: rnd(3),
                                value: b"s".to_vec(),
                            },
                            _ => Record::LRem {
                                key,
                                positions: vec![rnd(3).to_le_bytes().to_vec()],
                            },
                        },
                        _ => Record::Set {
                            key,
                            value: vec![b'v'; rnd(40) as usize],
                            expire_at_ms: at,
                        },
                    },
                ));
            }
            let narrow = Keyspace {
                mask: 0x3f, // 64 hashes for 300 keys: collisions in most buckets
                ..Keyspace::new()
            };
            let like = |ks: &Keyspace| Keyspace {
                hasher: ks.hasher.clone(),
                mask: ks.mask,
                ..Keyspace::new()
            };
            let mut batched: Vec<Keyspace> = (0..3).map(|_| like(&narrow)).collect();
            let mut one: Vec<Keyspace> = (0..3).map(|_| like(&narrow)).collect();
            for (db, r) in &recs {
                match r {
                    Record::SwapDb { other } => {
                        let (a, b) = (*db as usize, *other as usize);
                        if a != b {
                            let (x, y) = one.split_at_mut(a.max(b));
                            Keyspace::swap(&mut x[a.min(b)], &mut y[0], 0);
                        }
                    }
                    Record::FlushAll => one.iter_mut().for_each(|ks| ks.clear()),
                    r => one[*db as usize].apply(r.as_ref(), now),
                }
            }
            for ks in &mut one {
                ks.expire_cycle(now, usize::MAX);
                // As the end of a replay packs what shrank (some hashes here do).
                pack_small(ks, now);
            }
            let mut rp = Replay::new(&mut batched, now);
            for (db, r) in &recs {
                rp.push(*db, r.as_ref());
            }
            rp.finish();
            for (b, o) in batched.iter().zip(&one) {
                assert_eq!(dump(b), dump(o), "round {round}");
                assert_eq!(b.len(), o.len());
                assert_eq!(b.used_memory(), o.used_memory());
                assert_eq!(b.expires_count(), o.expires_count());
                assert_eq!(b.expires, o.expires);
            }
            nonempty += batched.iter().any(|ks| !ks.is_empty()) as usize;
        }
        assert!(nonempty >= 10, "{nonempty} of 20 rounds end with keys");
    }

    /// Replay is exact, whatever the clock: a key whose time has passed at replay
    /// but that was made persistent later (SET EX, PERSIST) is kept; one still
    /// expiring is dropped at the end; a change record of a key that is not there (or
    /// of another type) is ignored.
    #[test]
    fn replay_keeps_what_a_later_record_needs() {
        let now = 1_000_000;
        let recs = [
            Record::Set {
                key: b"p".to_vec(),
                value: b"v".to_vec(),
                expire_at_ms: Some(now - 5),
            },
            Record::Expire {
                key: b"p".to_vec(),
                at_ms: None,
            },
            Record::Set {
                key: b"gone".to_vec(),
                value: b"v".to_vec(),
                expire_at_ms: Some(now - 5),
            },
            Record::Append {
                key: b"gone".to_vec(),
                piece: b"+".to_vec(),
            },
            Record::Append {
                key: b"never".to_vec(),
                piece: b"+".to_vec(),
            },
            Record::HSet {
                key: b"p".to_vec(),
                items: vec![b"f".to_vec(), b"v".to_vec()],
            },
        ];
        let mut dbs = [Keyspace::new()];
        let mut rp = Replay::new(&mut dbs, now);
        for r in &recs {
            rp.push(0, r.as_ref());
        }
        rp.finish();
        let ks = &mut dbs[0];
        assert_eq!(ks.len(), 1);
        let e = ks.get(b"p", now).expect("kept");
        assert_eq!((e.value(), e.expire_at_ms()), (&b"v"[..], None));
        assert_eq!(ks.expired_count(), 0);
    }
}
