//! Choosing a key to evict from one keyspace, by a `maxmemory-policy` (the shard's
//! `evict.rs` removes and logs it).
//!
//! Like Redis, the choice is approximate: a sample of `maxmemory-samples` keys, each
//! scored ([`Keyspace::eviction_sample`]), goes into the shard's pool of the best
//! candidates seen so far (the shard's `evict.rs`, as Redis's `evictionPoolPopulate`),
//! and the best of the pool is evicted. The sample is the keys that follow a random
//! hash in hash order (the index is in hash order and hashes are random, so they are
//! a random sample, as Redis's `dictGetSomeKeys` takes neighbouring buckets).
//!
//! - `volatile-ttl` needs no sample: the expiry index is in time order, so the key
//!   whose expiry time is nearest is known exactly.
//! - The other `volatile-*` policies skip keys without an expiry time while sampling,
//!   looking at no more than [`VOLATILE_WALK`] keys per key sampled; finding none
//!   (keys with an expiry are rare here), they take the key whose expiry is nearest.
//! - `allkeys-random` and `volatile-random` take the first key they find.

use super::access::{self, Policy};
use super::{Keyspace, HASH_LIMIT};

/// The most keys a volatile policy's sample looks at, per key it samples.
pub const VOLATILE_WALK: usize = 16;

/// A key chosen for eviction.
pub struct Candidate {
    /// How much it deserves eviction: the larger, the sooner (comparable between the
    /// keyspaces of one policy).
    pub score: u64,
    /// The key.
    pub key: Vec<u8>,
}

impl Keyspace {
    /// Calls `f` with the score and key of each of a sample of `samples` keys this
    /// keyspace may evict under `policy` (an LRU or LFU one; module doc); answers
    /// whether it found any.
    pub fn eviction_sample(
        &self,
        policy: Policy,
        samples: usize,
        now_ms: u64,
        mut f: impl FnMut(u64, &[u8]),
    ) -> bool {
        if self.is_empty() || (policy.volatile() && self.expires_count == 0) {
            return false;
        }
        let lfu = policy.lfu();
        let walk = samples.max(1) * if policy.volatile() { VOLATILE_WALK } else { 2 };
        let start = access::random() & (HASH_LIMIT - 1);
        let mut found = 0;
        let keys = self.index.iter_from(start).chain(self.index.iter_from(0));
        for (_, e) in keys.take(walk) {
            if e.expired(now_ms) || (policy.volatile() && e.expire_at_ms().is_none()) {
                continue;
            }
            f(access::eviction_score(e.access(), lfu), e.key());
            found += 1;
            if found == samples {
                break;
            }
        }
        if found == 0 && policy.volatile() {
            if let Some(c) = self.nearest_expiry() {
                f(u64::MAX, &c.key);
                found = 1;
            }
        }
        found > 0
    }

    /// The key of this keyspace that `policy` evicts first among a sample of `samples`
    /// keys (one for a random policy; none for `volatile-ttl`, whose choice is exact),
    /// if it has any it may evict.
    pub fn eviction_candidate(
        &self,
        policy: Policy,
        samples: usize,
        now_ms: u64,
    ) -> Option<Candidate> {
        if policy == Policy::NoEviction || (policy.volatile() && self.expires_count == 0) {
            return None;
        }
        if policy == Policy::VolatileTtl {
            return self.nearest_expiry();
        }
        let random = matches!(policy, Policy::AllKeysRandom | Policy::VolatileRandom);
        let mut best: Option<Candidate> = None;
        self.eviction_sample(
            policy,
            if random { 1 } else { samples },
            now_ms,
            |score, key| {
                if best.as_ref().is_none_or(|b| score > b.score) {
                    best = Some(Candidate {
                        score,
                        key: key.to_vec(),
                    });
                }
            },
        );
        best
    }

    /// The key whose expiry time is nearest (scored so that nearer is larger).
    fn nearest_expiry(&self) -> Option<Candidate> {
        let &(at, h) = self.expires.first()?;
        let e = self
            .index
            .with_hash(h)
            .find(|e| e.expire_at_ms() == Some(at))?;
        Some(Candidate {
            score: u64::MAX - at,
            key: e.key().to_vec(),
        })
    }
}
