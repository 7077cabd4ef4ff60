//! Eviction: under a `maxmemory` limit and a `maxmemory-policy` other than
//! `noeviction`, the server removes keys to stay under the limit, as Redis 7.0 does
//! before each command (docs/kv.md, "Memory limit and eviction").
//!
//! The limit is the server's, over every shard; each shard knows what the others use
//! (as they last published it). Before each command, a shard over the limit first
//! reclaims its expired keys, then evicts keys of its own
//! ([`Shard::evict_over_limit`]) until the server is under the limit, or until it is
//! itself down to its share (the limit divided by the number of shards): the other
//! shards, over their share, evict on their next command, or on their worker's
//! housekeeping (every 100 ms), so a shard holding little never empties itself for
//! the others.
//!
//! Redis evicts from the whole keyspace, so a write must not fail, nor the server stay
//! over its limit, because its own shard has nothing to give: before a write whose
//! shard is at or under its share, or has no key it may evict (none at all, or none
//! with an expiry time under a `volatile-*` policy), while the server is over the
//! limit, the connection has the other shards evict ([`Shard::evict_for_others`], the
//! ones using the most memory first) until the server is under the limit
//! (`Shards::make_room` in `server/shards.rs`; never from inside a transaction, which
//! holds gates in its own order). A command is refused with OOM (if it may grow
//! memory) only when the server is still over the limit and its shard, over its
//! share, has nothing left it may evict: no shard had anything (a `volatile-*`
//! policy and no key with an expiry time anywhere).
//!
//! Under an LRU or LFU policy, the key is the best of a pool of candidates from every
//! sample so far ([`Pool`]; `keyspace/evict.rs` samples); under a random one, the
//! first key of a sample; under `volatile-ttl`, the nearest expiry.
//!
//! Each eviction is a deletion like DEL's: logged as a `Del` record (so recovery and
//! compaction never bring the key back), seen by WATCH and client-side caching, and
//! announced with the `evicted` keyspace event. INFO's `evicted_keys` counts them.

use crate::keyspace::access::{self, Policy};
use crate::log::RecordRef;
use crate::shard::Shard;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Keys evicted since start-up (or CONFIG RESETSTAT).
static EVICTED: AtomicU64 = AtomicU64::new(0);
/// The number of shards the limit is shared by.
static SHARDS: AtomicUsize = AtomicUsize::new(1);

/// The most keys one command evicts before it runs (a bound on how long it holds the
/// shard; housekeeping goes on).
pub const EVICT_PER_COMMAND: usize = 4096;

/// Keys evicted since start-up or the last [`reset_count`].
pub fn evicted_count() -> u64 {
    EVICTED.load(Relaxed)
}

/// Starts the count of evicted keys again (CONFIG RESETSTAT).
pub fn reset_count() {
    EVICTED.store(0, Relaxed);
}

/// Says how many shards share the memory limit.
pub fn set_shards(n: usize) {
    SHARDS.store(n.max(1), Relaxed);
}

/// The most candidates a shard's pool keeps (Redis's `EVPOOL_SIZE`).
pub const POOL: usize = 16;

/// A shard's best candidates for eviction under an LRU or LFU policy, from every
/// sample so far, the best last: (score, database, key). A candidate may be gone or
/// changed since it was sampled: it is looked up again before it is evicted, and its
/// score is as it was (as in Redis). Emptied when the policy changes.
#[derive(Default)]
pub struct Pool(Vec<(u64, u8, Box<[u8]>)>, Option<Policy>);

impl Pool {
    /// Offers key `key` of database `db`, of score `score`: kept if the pool has room
    /// or it beats the worst kept (a key already kept takes the new score).
    fn offer(&mut self, score: u64, db: u8, key: &[u8]) {
        if let Some(i) = self.0.iter().position(|(_, d, k)| *d == db && **k == *key) {
            self.0.remove(i);
        } else if self.0.len() == POOL {
            if score <= self.0[0].0 {
                return;
            }
            self.0.remove(0);
        }
        let at = self.0.partition_point(|&(s, _, _)| s <= score);
        self.0.insert(at, (score, db, key.into()));
    }

    /// Takes the best candidate out.
    fn pop(&mut self) -> Option<(u8, Box<[u8]>)> {
        self.0.pop().map(|(_, d, k)| (d, k))
    }

    /// Forgets every candidate if they were scored by another policy than `policy`.
    fn keep_for(&mut self, policy: Policy) {
        if self.1 != Some(policy) {
            self.0.clear();
            self.1 = Some(policy);
        }
    }
}

/// Whether the policy evicts keys (any policy but `noeviction`).
#[inline]
pub fn evicting() -> bool {
    access::policy() != Policy::NoEviction
}

impl Shard {
    /// This shard's share of the memory limit.
    fn share(&self) -> u64 {
        self.mem_limit / SHARDS.load(Relaxed) as u64
    }

    /// Whether this shard should evict now: the server over its limit, and this shard
    /// over its share (or holding anything at all, `for_others`).
    fn should_evict(&self, for_others: bool) -> bool {
        let own = self.used_memory();
        let floor = if for_others { 0 } else { self.share() };
        self.mem_limit != 0 && own + self.mem_others > self.mem_limit && own > floor
    }

    /// Before a command, under an evicting policy: evicts as needed (module doc) and
    /// answers whether the command is refused if it may grow memory, the bytes it
    /// may add (no bound unless refused: under an evicting policy, what a command adds
    /// is evicted before the next one), and how many keys it evicted here.
    pub(crate) fn evict_for_room(&mut self, now_ms: u64) -> (bool, u64, usize) {
        let n = self.evict_over_limit(now_ms, EVICT_PER_COMMAND);
        let refused = self.should_evict(false);
        (refused, if refused { 0 } else { u64::MAX }, n)
    }

    /// Evicts keys of this shard by the policy, at most `max_keys`, while the server
    /// is over its limit and this shard over its share; answers how many.
    pub fn evict_over_limit(&mut self, now_ms: u64, max_keys: usize) -> usize {
        self.evict_while(now_ms, max_keys, false)
    }

    /// For a write on another shard that cannot make room itself (module doc): evicts
    /// keys of this shard by the policy, at most `max_keys`, while the server is over
    /// its limit, whatever this shard's share; answers how many.
    pub fn evict_for_others(&mut self, now_ms: u64, max_keys: usize) -> usize {
        self.evict_while(now_ms, max_keys, true)
    }

    fn evict_while(&mut self, now_ms: u64, max_keys: usize, for_others: bool) -> usize {
        let policy = access::policy();
        if policy == Policy::NoEviction {
            return 0;
        }
        let samples = access::samples() as usize;
        access::set_now(now_ms);
        let pooled = !matches!(
            policy,
            Policy::AllKeysRandom | Policy::VolatileRandom | Policy::VolatileTtl
        );
        let mut n = 0;
        while n < max_keys && self.should_evict(for_others) {
            if pooled {
                if !self.evict_from_pool(policy, samples, now_ms) {
                    break;
                }
                n += 1;
                continue;
            }
            let mut best: Option<(u64, u8, Vec<u8>)> = None;
            for (d, ks) in self.dbs.iter().enumerate() {
                if let Some(c) = ks.eviction_candidate(policy, samples, now_ms) {
                    if best.as_ref().is_none_or(|b| c.score > b.0) {
                        best = Some((c.score, d as u8, c.key));
                    }
                }
            }
            let Some((_, db, key)) = best else {
                break;
            };
            self.evict_key(db, &key, now_ms);
            n += 1;
        }
        n
    }

    /// Under an LRU or LFU policy: samples every database into the pool, then evicts
    /// its best candidate that is still there (and still evictable); whether one was.
    /// Candidates gone since they were sampled never stop an eviction: each round
    /// takes at least one candidate out, so the next finds room for a fresh sample.
    fn evict_from_pool(&mut self, policy: Policy, samples: usize, now_ms: u64) -> bool {
        let (dbs, pool) = (&self.dbs, &mut self.evict_pool);
        pool.keep_for(policy);
        for (d, ks) in dbs.iter().enumerate() {
            ks.eviction_sample(policy, samples, now_ms, |score, key| {
                pool.offer(score, d as u8, key)
            });
        }
        while let Some((db, key)) = self.evict_pool.pop() {
            let evictable = self.dbs[db as usize]
                .peek_quiet(&key, now_ms)
                .is_some_and(|e| !policy.volatile() || e.expire_at_ms().is_some());
            if evictable && self.evict_key(db, &key, now_ms) {
                return true;
            }
        }
        false
    }

    /// Removes `key` of database `db`, logged as a deletion, and announces it; whether
    /// it was there.
    fn evict_key(&mut self, db: u8, key: &[u8], now_ms: u64) -> bool {
        let before = self.log.len();
        let ks = &mut self.dbs[db as usize];
        ks.begin(self.appended + 1);
        if !ks.remove(key, now_ms) {
            return false;
        }
        crate::log::encode_in(db, &RecordRef::Del { key }, &mut self.log);
        self.dirty_dbs |= 1 << db;
        self.note_logged(before);
        EVICTED.fetch_add(1, Relaxed);
        crate::pubsub::notify::notify_db(db, crate::pubsub::EVICTED, "evicted", key);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_keeps_the_best_candidates_best_last() {
        let mut p = Pool::default();
        for i in 0..40u64 {
            // Scores 0, 7, 14, ... in a scrambled order.
            let s = (i * 17) % 40 * 7;
            p.offer(s, 0, format!("k{s}").as_bytes());
        }
        assert_eq!(p.0.len(), POOL);
        // A key offered again takes its new score, and is not kept twice.
        p.offer(1000, 0, b"k273");
        assert_eq!(p.0.len(), POOL);
        let popped: Vec<Box<[u8]>> = std::iter::from_fn(|| p.pop().map(|(_, k)| k)).collect();
        let want: Vec<Box<[u8]>> = std::iter::once("k273".to_string())
            .chain((24..39).rev().map(|i| format!("k{}", i * 7)))
            .map(|k| k.into_bytes().into())
            .collect();
        assert_eq!(popped, want);
        // A policy change forgets the candidates.
        p.offer(5, 1, b"x");
        p.keep_for(Policy::AllKeysLfu);
        assert!(p.pop().is_none());
    }
}
