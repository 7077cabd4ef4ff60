//! Eviction: under a `maxmemory` limit and a `maxmemory-policy` other than
//! `noeviction`, the server removes keys to stay under the limit, as Redis 7.0 does
//! before each command (docs/kv.md, "Memory limit and eviction").
//!
//! The limit is the server's, over every shard; each shard knows what the others use
//! (as they last published it) and evicts only its own keys. Before each command, a
//! shard over the limit first reclaims its expired keys, then evicts keys of its own
//! ([`Shard::evict_over_limit`]) until the server is under the limit, or until it is
//! itself down to its share (the limit divided by the number of shards): the other
//! shards, over their share, evict on their next command, or on their worker's
//! housekeeping (every 100 ms), so a shard holding little never empties itself for
//! the others. A command is refused with OOM (if it may grow memory) only when the
//! server is over the limit and its shard, over its share, has nothing left it may
//! evict (a `volatile-*` policy and no key with an expiry time).
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
    /// over its share.
    fn should_evict(&self) -> bool {
        let own = self.used_memory();
        self.mem_limit != 0 && own + self.mem_others > self.mem_limit && own > self.share()
    }

    /// Before a command, under an evicting policy: evicts as needed (module doc) and
    /// answers whether the command is refused if it may grow memory, and the bytes it
    /// may add (no bound unless refused: under an evicting policy, what a command adds
    /// is evicted before the next one).
    pub(crate) fn evict_for_room(&mut self, now_ms: u64) -> (bool, u64) {
        self.evict_over_limit(now_ms, EVICT_PER_COMMAND);
        match self.should_evict() {
            true => (true, 0),
            false => (false, u64::MAX),
        }
    }

    /// Evicts keys of this shard by the policy, at most `max_keys`, while the server
    /// is over its limit and this shard over its share; answers how many.
    pub fn evict_over_limit(&mut self, now_ms: u64, max_keys: usize) -> usize {
        let policy = access::policy();
        if policy == Policy::NoEviction {
            return 0;
        }
        let samples = access::samples() as usize;
        access::set_now(now_ms);
        let mut n = 0;
        while n < max_keys && self.should_evict() {
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

    /// Removes `key` of database `db`, logged as a deletion, and announces it.
    fn evict_key(&mut self, db: u8, key: &[u8], now_ms: u64) {
        let before = self.log.len();
        let ks = &mut self.dbs[db as usize];
        ks.begin(self.appended + 1);
        if !ks.remove(key, now_ms) {
            return;
        }
        crate::log::encode_in(db, &RecordRef::Del { key }, &mut self.log);
        self.dirty_dbs |= 1 << db;
        self.note_logged(before);
        EVICTED.fetch_add(1, Relaxed);
        crate::pubsub::notify::notify_db(db, crate::pubsub::EVICTED, "evicted", key);
    }
}
