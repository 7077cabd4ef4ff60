//! What a key's entry keeps about its accesses, for eviction (`maxmemory-policy`) and
//! OBJECT IDLETIME / OBJECT FREQ: 24 bits, read as Redis 7.0 reads its objects' `lru`
//! field, by the policy in force.
//!
//! - Under an LRU policy (and any policy but the LFU ones), the bits are a clock of
//!   seconds modulo 2^24 (about 194 days): the time of the key's last access. A key's
//!   idle time is the clock now minus the clock then (wrapped once).
//! - Under an LFU policy, the top 16 bits are the time of the last decrement in
//!   minutes modulo 2^16, the low 8 bits a logarithmic counter of accesses: a new key
//!   starts at [`LFU_INIT`], each access adds 1 with probability
//!   1 / ((counter - LFU_INIT) * lfu-log-factor + 1) (so a counter of 255 takes about
//!   a million accesses at the default factor of 10), and every `lfu-decay-time`
//!   minutes without access take 1 off.
//!
//! Changing the policy between the two kinds does not rewrite the keys: their bits are
//! read the new way, and settle as keys are accessed again (as in Redis).
//!
//! Every lookup of a key by a command updates the bits (reads and writes alike), but
//! not the lookups that only look: OBJECT, DEBUG OBJECT, TYPE, EXISTS, TTL, PTTL,
//! EXPIRETIME and PEXPIRETIME (Redis's "no touch" lookups).
//! The settings are the process's (the server's: the embedded store never evicts).

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// The counter a new key starts with under an LFU policy (Redis's `LFU_INIT_VAL`), so
/// that a new key is not the first evicted.
pub const LFU_INIT: u32 = 5;

/// The bits kept (24).
pub const BITS: u32 = 24;
const MASK: u32 = (1 << BITS) - 1;

/// What the server does when a write would pass `maxmemory` (`maxmemory-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Refuse the write (OOM).
    NoEviction = 0,
    /// Evict the least recently used keys.
    AllKeysLru = 1,
    /// Evict the least frequently used keys.
    AllKeysLfu = 2,
    /// Evict keys at random.
    AllKeysRandom = 3,
    /// Evict the least recently used keys among those with an expiry time.
    VolatileLru = 4,
    /// Evict the least frequently used keys among those with an expiry time.
    VolatileLfu = 5,
    /// Evict keys at random among those with an expiry time.
    VolatileRandom = 6,
    /// Evict the keys with an expiry time nearest first.
    VolatileTtl = 7,
}

impl Policy {
    const ALL: [Policy; 8] = [
        Policy::NoEviction,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
    ];

    /// The policy's name in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Whether it evicts only keys with an expiry time.
    pub fn volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    /// Whether the access bits count frequency (an LFU policy).
    pub fn lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }
}

static POLICY: AtomicU8 = AtomicU8::new(Policy::NoEviction as u8);
static SAMPLES: AtomicU32 = AtomicU32::new(5);
static LOG_FACTOR: AtomicU32 = AtomicU32::new(10);
static DECAY_TIME: AtomicU32 = AtomicU32::new(1);
/// The time the running command is judged against (Unix ms), set by each shard before
/// it runs one ([`set_now`]).
static NOW_MS: AtomicU64 = AtomicU64::new(0);

/// The eviction policy.
pub fn policy() -> Policy {
    Policy::ALL[POLICY.load(Relaxed) as usize & 7]
}

/// Sets the eviction policy.
pub fn set_policy(p: Policy) {
    POLICY.store(p as u8, Relaxed);
}

/// The keys a shard looks at to choose each key it evicts (`maxmemory-samples`).
pub fn samples() -> u32 {
    SAMPLES.load(Relaxed)
}

/// Sets `maxmemory-samples` (at least 1; a shard looks at no more keys than it has).
pub fn set_samples(n: u32) {
    SAMPLES.store(n.max(1), Relaxed);
}

/// `lfu-log-factor`.
pub fn log_factor() -> u32 {
    LOG_FACTOR.load(Relaxed)
}

/// Sets `lfu-log-factor`.
pub fn set_log_factor(n: u32) {
    LOG_FACTOR.store(n, Relaxed);
}

/// `lfu-decay-time` (minutes; 0: counters never decay).
pub fn decay_time() -> u32 {
    DECAY_TIME.load(Relaxed)
}

/// Sets `lfu-decay-time`.
pub fn set_decay_time(n: u32) {
    DECAY_TIME.store(n, Relaxed);
}

/// Notes the time the next accesses happen at (Unix ms).
#[inline]
pub fn set_now(now_ms: u64) {
    if NOW_MS.load(Relaxed) != now_ms {
        NOW_MS.store(now_ms, Relaxed);
    }
}

fn now_ms() -> u64 {
    match NOW_MS.load(Relaxed) {
        0 => crate::shard::now_ms(),
        t => t,
    }
}

/// The LRU clock: seconds modulo 2^24.
fn lru_clock() -> u32 {
    (now_ms() / 1000) as u32 & MASK
}

/// The LFU time: minutes modulo 2^16.
fn lfu_minutes() -> u32 {
    (now_ms() / 60_000) as u32 & 0xffff
}

/// The bits of a key created now.
#[inline]
pub fn initial() -> u32 {
    if policy().lfu() {
        lfu_minutes() << 8 | LFU_INIT
    } else {
        lru_clock()
    }
}

/// The bits of a key accessed now that had `old`.
#[inline]
pub fn touched(old: u32) -> u32 {
    if policy().lfu() {
        let counter = log_incr(frequency(old));
        lfu_minutes() << 8 | counter
    } else {
        lru_clock()
    }
}

/// The bits of a key RESTOREd with IDLETIME `idle_secs` or FREQ `freq`, if the
/// policy reads the one given: FREQ under an LFU policy, IDLETIME under another.
pub fn restored(idle_secs: Option<u64>, freq: Option<u32>) -> Option<u32> {
    match (policy().lfu(), idle_secs, freq) {
        (true, _, Some(f)) => Some(lfu_minutes() << 8 | f.min(255)),
        (false, Some(idle), _) => {
            let back = (idle % (MASK as u64 + 1)) as u32;
            Some(lru_clock().wrapping_sub(back) & MASK)
        }
        _ => None,
    }
}

/// The milliseconds since the access that left `bits` (read as an LRU clock).
pub fn idle_ms(bits: u32) -> u64 {
    let now = lru_clock();
    let secs = if now >= bits {
        now - bits
    } else {
        now + (MASK - bits)
    };
    secs as u64 * 1000
}

/// The access counter that `bits` stand for now (read as LFU bits), decayed by the
/// minutes since its last decrement.
pub fn frequency(bits: u32) -> u32 {
    let (then, counter) = (bits >> 8 & 0xffff, bits & 0xff);
    let now = lfu_minutes();
    let elapsed = if now >= then {
        now - then
    } else {
        0xffff - then + now
    };
    let periods = elapsed.checked_div(decay_time()).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// One access's logarithmic increment of `counter`.
fn log_incr(counter: u32) -> u32 {
    if counter >= 255 {
        return 255;
    }
    let base = counter.saturating_sub(LFU_INIT) as f64;
    let p = 1.0 / (base * log_factor() as f64 + 1.0);
    if random_unit() < p {
        counter + 1
    } else {
        counter
    }
}

/// How much a key of access bits `bits` deserves eviction under an LRU or LFU policy:
/// the larger, the sooner (its idle time, or 255 minus its frequency).
pub fn eviction_score(bits: u32, lfu: bool) -> u64 {
    if lfu {
        255 - frequency(bits) as u64
    } else {
        idle_ms(bits)
    }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(std::thread::current().id()) | 1
    });
}

/// A pseudo-random number (xorshift64*, seeded per thread from the process's random
/// keys; not for secrets): eviction's samples and the commands' random picks.
pub fn random() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A pseudo-random number in [0, 1).
fn random_unit() -> f64 {
    (random() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_name() {
        for p in Policy::ALL {
            assert_eq!(Policy::parse(&p.name().to_uppercase()), Some(p));
        }
        assert_eq!(Policy::parse("lru"), None);
        assert!(Policy::VolatileTtl.volatile() && !Policy::AllKeysLfu.volatile());
        assert!(Policy::VolatileLfu.lfu() && !Policy::AllKeysLru.lfu());
    }

    #[test]
    fn the_counter_grows_logarithmically_and_saturates() {
        let mut c = LFU_INIT;
        for _ in 0..100 {
            c = log_incr(c);
        }
        // The first few increments are near-certain, later ones rare.
        assert!((7..20).contains(&c), "{c}");
        assert_eq!(log_incr(255), 255);
        assert_eq!(log_incr(0), 1);
    }
}
