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
/// The batch costs about 56 bytes a record (the hash and the operation; a `Set`'s
/// entry is an allocation the keyspace keeps), 56 MiB at most, returned once replay
/// ends.
pub const BATCH: usize = 1 << 20;

/// Replays a log into a keyspace; [`Replay::finish`] applies what is still gathered.
pub struct Replay<'a> {
    ks: &'a mut Keyspace,
    now_ms: u64,
    batch: Vec<(u64, Op<Key>)>,
}

impl<'a> Replay<'a> {
    /// Replays into `ks`, dropping keys whose expiry time has passed at `now_ms` (as
    /// [`Keyspace::apply`] does).
    pub fn new(ks: &'a mut Keyspace, now_ms: u64) -> Replay<'a> {
        Replay {
            ks,
            now_ms,
            batch: Vec::new(),
        }
    }

    /// The next record of the log.
    pub fn push(&mut self, rec: RecordRef<'_>) {
        let op = Op::from_record(rec);
        match op.key() {
            Some(k) => {
                let h = self.ks.hash(k);
                self.batch.push((h, op.map_key(Key::from)));
                if self.batch.len() == BATCH {
                    self.apply_batch();
                }
            }
            None => {
                // Flush: after everything before it.
                self.apply_batch();
                self.ks.apply_hashed(0, op, self.now_ms);
            }
        }
    }

    /// Applies the records still gathered.
    pub fn finish(mut self) {
        self.apply_batch();
    }

    fn apply_batch(&mut self) {
        // Stable: one key's records stay in log order.
        self.batch.sort_by_key(|&(h, _)| h);
        // Room for every key of the batch first: keys inserted in hash order into a
        // table sized for fewer would pile up at its start (index.rs, `reserve`).
        self.ks.reserve(self.batch.len());
        for (h, rec) in self.batch.drain(..) {
            self.ks.apply_hashed(h, rec, self.now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Record;

    fn dump(ks: &Keyspace) -> Vec<(Vec<u8>, Vec<u8>, Option<u64>)> {
        let mut v: Vec<_> = ks
            .index
            .iter_from(0)
            .map(|(_, e)| (e.key().to_vec(), e.value().to_vec(), e.expire_at_ms()))
            .collect();
        v.sort();
        v
    }

    /// Random records over few keys (so one key gets many records) with a narrow
    /// hash (so buckets collide): sorted replay ends where one-by-one replay does,
    /// counters and expiry index included.
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
        for round in 0..20 {
            let mut recs = Vec::new();
            for _ in 0..2_000 {
                let key = format!("k{}", rnd(300)).into_bytes();
                let at = match rnd(4) {
                    0 => Some(now - 10 + rnd(20)), // passed or not
                    1 => Some(now + 1_000 + rnd(3)),
                    _ => None,
                };
                recs.push(match rnd(20) {
                    0 if round % 2 == 0 => Record::Flush,
                    1..=3 => Record::Del { key },
                    4..=6 => Record::Expire { key, at_ms: at },
                    _ => Record::Set {
                        key,
                        value: vec![b'v'; rnd(40) as usize],
                        expire_at_ms: at,
                    },
                });
            }
            let narrow = Keyspace {
                mask: 0x3f, // 64 hashes for 300 keys: collisions in most buckets
                ..Keyspace::new()
            };
            let mut one = Keyspace {
                hasher: narrow.hasher.clone(),
                mask: narrow.mask,
                ..Keyspace::new()
            };
            for r in &recs {
                one.apply(r.as_ref(), now);
            }
            let mut batched = narrow;
            let mut rp = Replay::new(&mut batched, now);
            for r in &recs {
                rp.push(r.as_ref());
            }
            rp.finish();
            assert_eq!(dump(&batched), dump(&one), "round {round}");
            assert_eq!(batched.len(), one.len());
            assert_eq!(batched.used_memory(), one.used_memory());
            assert_eq!(batched.expires_count(), one.expires_count());
            assert_eq!(batched.expires, one.expires);
        }
    }
}
