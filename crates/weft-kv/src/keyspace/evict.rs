//! Choosing a key to evict from one keyspace, by a `maxmemory-policy` (the shard's
//! `evict.rs` removes and logs it).
//!
//! Like Redis, the choice is approximate: a sample of `maxmemory-samples` keys, the
//! one the policy likes least evicted. The sample is the keys that follow a random
//! hash in hash order (the index is in hash order and hashes are random, so they are
//! a random sample, as Redis's `dictGetSomeKeys` takes neighbouring buckets). Redis
//! also keeps a pool of the best candidates of earlier samples; weft-kv does not, so
//! with the same number of samples its choice is a little less exact.
//!
//! - `volatile-ttl` needs no sample: the expiry index is in time order, so the key
//!   whose expiry time is nearest is known exactly.
//! - The other `volatile-*` policies skip keys without an expiry time while sampling,
//!   looking at no more than [`VOLATILE_WALK`] keys per key sampled; finding none
//!   (keys with an expiry are rare here), they take the key whose expiry is nearest.
//! - `allkeys-random` and `volatile-random` take the first key they find.

use super::access::{self, Policy};
use super::{Entry, Keyspace, HASH_LIMIT};

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
    /// The key of this keyspace that `policy` evicts first among a sample of `samples`
    /// keys (module doc), if it has any it may evict. Keys whose time has passed at
    /// `now_ms` are not candidates (they are reclaimed before eviction).
    pub fn eviction_candidate(
        &self,
        policy: Policy,
        samples: usize,
        now_ms: u64,
    ) -> Option<Candidate> {
        if self.is_empty() || policy == Policy::NoEviction {
            return None;
        }
        if policy.volatile() && self.expires_count == 0 {
            return None;
        }
        if policy == Policy::VolatileTtl {
            return self.nearest_expiry();
        }
        let lfu = policy.lfu();
        let random = matches!(policy, Policy::AllKeysRandom | Policy::VolatileRandom);
        let samples = if random { 1 } else { samples.max(1) };
        let walk = samples * if policy.volatile() { VOLATILE_WALK } else { 2 };
        let start = access::random() & (HASH_LIMIT - 1);
        let mut best: Option<(u64, &Entry)> = None;
        let mut found = 0;
        let keys = self.index.iter_from(start).chain(self.index.iter_from(0));
        for (_, e) in keys.take(walk) {
            if e.expired(now_ms) || (policy.volatile() && e.expire_at_ms().is_none()) {
                continue;
            }
            let score = access::eviction_score(e.access(), lfu);
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, e));
            }
            found += 1;
            if found == samples {
                break;
            }
        }
        match best {
            Some((score, e)) => Some(Candidate {
                score,
                key: e.key().to_vec(),
            }),
            None if policy.volatile() => self.nearest_expiry(),
            None => None,
        }
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
