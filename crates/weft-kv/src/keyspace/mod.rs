//! One shard's keys: the values, their expiry times and the memory they take.
//!
//! # Structure
//! Keys live in a `BTreeMap<u64, Bucket>` ordered by a 56-bit keyed hash of the key
//! (SipHash with a per-process random key, std's `RandomState`: an attacker who picks
//! keys cannot aim them at one bucket). A [`Bucket`] holds the entries whose keys share
//! a hash: one inline, the rare others (two keys collide with probability ≈ n²/2⁵⁷)
//! in a vector that allocates only when used. A lookup hashes the key once and walks
//! one B-tree path (logarithmic, cache-friendly nodes of several hashes each).
//!
//! # The cursor (SCAN and compaction)
//! A cursor is a position in hash order: "every bucket whose hash is ≥ cursor is still
//! to be visited". 0 starts a walk, and a returned 0 ends it. Since a key's hash never
//! changes and a walk only moves forward, every key present for the whole walk is
//! returned (at least once: exactly once in fact, unless it is removed and added
//! again), whatever else is inserted or removed between calls, and nothing rehashes.
//! Hashes are below 2⁵⁶ so that the server can put a shard index in a cursor's top
//! 8 bits. The next cursor is the hash of the next bucket, which is never 0 (hash 0
//! can only be the first bucket), so 0 unambiguously means done.
//!
//! # Expiry
//! Each key has an optional absolute expiry time in Unix milliseconds. Expiry is lazy
//! (an expired key behaves as absent, and is removed when an operation with `&mut`
//! access finds it) and active: [`Keyspace::expire_cycle`] pops the earliest entries
//! of an index ordered by `(expire_at_ms, hash)`, kept in step with every change of
//! a key's expiry. Neither removal is logged: replaying the log drops keys whose
//! absolute expiry time has passed, so the log need not say so.
//!
//! # Memory accounting
//! [`Keyspace::used_memory`] is the sum over keys of key length + value length +
//! [`PER_KEY_OVERHEAD`] (+ [`PER_EXPIRE_OVERHEAD`] for a key with an expiry), kept
//! up to date by every primitive that changes a key. It approximates what the heap
//! holds (B-tree slots, allocation headers) without asking the allocator.
//!
//! # Durability stamps (what a reply must wait for)
//! A reply may only show state whose log records are written (under `fsync always`:
//! on disk), or a crash could take back what a client was shown. Rather than wait for
//! the shard's whole log, a command waits for the records of what it read or wrote:
//! the shard calls [`Keyspace::begin`] with the command's *stamp* (its LSN before the
//! command, plus 1) before running it, every entry keeps the stamp of the command that
//! last changed it, and the keyspace keeps the highest stamp of any removal (a missing
//! key's state is "removed by some command", or never existed). Each read notes the
//! stamp of what it looked at: the entry's, or for a missing key the last removal's.
//! [`Keyspace::seen`] is the highest noted. Since the log writer only ever reports LSNs
//! at command boundaries, "written up to at least stamp s" means "written up to the
//! end of the command of stamp s". A key untouched since its records were written
//! answers at once, even while the shard cannot write its log (disk full). Entries
//! replayed at start-up carry stamp 0 (written). Whole-keyspace reads ([`Keyspace::len`],
//! [`Keyspace::keys`], [`Keyspace::scan`]) note nothing: their callers wait for the
//! whole log.
//!
//! # Full-state records
//! The keyspace does not log by itself: commands append records describing the
//! key's whole new state (see [`crate::log`]); [`Keyspace::apply`] replays them and
//! [`Keyspace::walk`] produces them for compaction.

pub mod glob;
mod key;
mod replay;

use std::cell::Cell;
use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::ops::Bound;

use crate::log::RecordRef;
pub use glob::glob_match;
pub use replay::{Replay, BATCH};

/// Hashes are kept below this (56 bits), so cursors are too.
pub const HASH_LIMIT: u64 = 1 << 56;

/// Bytes counted per key on top of its key and value (B-tree slot, bucket, entry,
/// allocation headers).
pub const PER_KEY_OVERHEAD: u64 = 96;

/// Bytes counted per key that has an expiry time (its slot in the expiry index).
pub const PER_EXPIRE_OVERHEAD: u64 = 32;

/// One key's value and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    value: Vec<u8>,
    /// The absolute expiry time (Unix ms); 8 bytes thanks to the niche (a time of 0,
    /// long passed, is kept as 1: both mean "expired").
    expire: Option<NonZeroU64>,
    /// The stamp of the command that last changed it (see the module doc).
    stamp: u64,
}

impl Entry {
    /// The value.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The absolute expiry time (Unix ms), if any.
    #[inline]
    pub fn expire_at_ms(&self) -> Option<u64> {
        self.expire.map(NonZeroU64::get)
    }

    /// Whether the entry has expired at `now_ms` (an expiry at `now_ms` has passed,
    /// as in Redis).
    #[inline]
    fn expired(&self, now_ms: u64) -> bool {
        matches!(self.expire_at_ms(), Some(at) if at <= now_ms)
    }
}

use key::Key;

type Slot = (Key, Entry);

/// The expiry as stored: 0 (long passed) is kept as 1, so that it fits the niche.
#[inline]
fn expiry(at_ms: Option<u64>) -> Option<NonZeroU64> {
    at_ms.map(|t| NonZeroU64::new(t.max(1)).expect("at least 1"))
}

/// The keys sharing one hash: one inline, the others (rare) in `rest`, which is one
/// pointer (allocated only for a collision) so that a bucket, which the B-tree holds
/// inline, stays 72 bytes.
struct Bucket {
    first: Slot,
    // One word instead of a Vec's three; the extra allocation happens only on a collision.
    #[allow(clippy::box_collection)]
    rest: Option<Box<Vec<Slot>>>,
}

// The B-tree's nodes hold buckets inline: their size is most of a key's memory.
const _: () = assert!(core::mem::size_of::<Bucket>() <= 72);

impl Bucket {
    fn new(first: Slot) -> Bucket {
        Bucket { first, rest: None }
    }

    fn rest(&self) -> &[Slot] {
        self.rest.as_deref().map_or(&[], |v| v.as_slice())
    }

    fn find(&self, key: &[u8]) -> Option<&Entry> {
        if &*self.first.0 == key {
            return Some(&self.first.1);
        }
        self.rest().iter().find(|s| &*s.0 == key).map(|s| &s.1)
    }

    fn find_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if &*self.first.0 == key {
            return Some(&mut self.first.1);
        }
        self.rest
            .as_deref_mut()?
            .iter_mut()
            .find(|s| &*s.0 == key)
            .map(|s| &mut s.1)
    }

    fn push(&mut self, slot: Slot) {
        self.rest.get_or_insert_with(Default::default).push(slot);
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        std::iter::once(&self.first).chain(self.rest().iter())
    }

    /// Removes `key`'s slot; `Err(())` when the bucket is left empty (then the
    /// caller drops the bucket, whose `first` is the removed slot).
    fn remove(&mut self, key: &[u8]) -> Option<Result<Slot, ()>> {
        let removed = if &*self.first.0 == key {
            match self.rest.as_deref_mut().and_then(|r| r.pop()) {
                Some(last) => Ok(std::mem::replace(&mut self.first, last)),
                None => return Some(Err(())),
            }
        } else {
            let rest = self.rest.as_deref_mut()?;
            let i = rest.iter().position(|s| &*s.0 == key)?;
            Ok(rest.swap_remove(i))
        };
        if self.rest.as_deref().is_some_and(|r| r.is_empty()) {
            self.rest = None;
        }
        Some(removed)
    }
}

/// A log record to replay, with its value owned and its key borrowed (`&[u8]`) or
/// already in the keyspace's form ([`Key`], as replay keeps it while it sorts).
enum Op<K> {
    Set {
        key: K,
        value: Vec<u8>,
        expire_at_ms: Option<u64>,
    },
    Del {
        key: K,
    },
    Expire {
        key: K,
        at_ms: Option<u64>,
    },
    Flush,
}

impl<'a> Op<&'a [u8]> {
    fn from_record(rec: RecordRef<'a>) -> Self {
        match rec {
            RecordRef::Set {
                key,
                value,
                expire_at_ms,
            } => Op::Set {
                key,
                value: value.to_vec(),
                expire_at_ms,
            },
            RecordRef::Del { key } => Op::Del { key },
            RecordRef::Expire { key, at_ms } => Op::Expire { key, at_ms },
            RecordRef::Flush => Op::Flush,
        }
    }
}

impl<K> Op<K> {
    fn key(&self) -> Option<&K> {
        match self {
            Op::Set { key, .. } | Op::Del { key } | Op::Expire { key, .. } => Some(key),
            Op::Flush => None,
        }
    }

    fn map_key<L>(self, f: impl FnOnce(K) -> L) -> Op<L> {
        match self {
            Op::Set {
                key,
                value,
                expire_at_ms,
            } => Op::Set {
                key: f(key),
                value,
                expire_at_ms,
            },
            Op::Del { key } => Op::Del { key: f(key) },
            Op::Expire { key, at_ms } => Op::Expire { key: f(key), at_ms },
            Op::Flush => Op::Flush,
        }
    }
}

/// Raises `seen` to `stamp` if it is lower.
#[inline]
fn raise(seen: &Cell<u64>, stamp: u64) {
    if stamp > seen.get() {
        seen.set(stamp);
    }
}

fn slot_memory(key_len: usize, e: &Entry) -> u64 {
    key_len as u64
        + e.value.len() as u64
        + PER_KEY_OVERHEAD
        + if e.expire.is_some() {
            PER_EXPIRE_OVERHEAD
        } else {
            0
        }
}

/// One shard's keys.
pub struct Keyspace {
    hasher: std::collections::hash_map::RandomState,
    /// `HASH_LIMIT - 1`; tests narrow it to force hash collisions.
    mask: u64,
    map: BTreeMap<u64, Bucket>,
    /// `(expire_at_ms, hash)` for every key with an expiry (one entry for several
    /// keys of one bucket with the same time).
    expires: BTreeSet<(u64, u64)>,
    len: usize,
    expires_count: usize,
    memory: u64,
    /// The running command's stamp (module doc: durability stamps).
    stamp: u64,
    /// The highest stamp the running command has read.
    seen: Cell<u64>,
    /// The highest stamp of any key removal (logged, or an expired key dropped).
    removed: u64,
}

impl Keyspace {
    /// An empty keyspace.
    pub fn new() -> Keyspace {
        Keyspace {
            hasher: Default::default(),
            mask: HASH_LIMIT - 1,
            map: BTreeMap::new(),
            expires: BTreeSet::new(),
            len: 0,
            expires_count: 0,
            memory: 0,
            stamp: 0,
            seen: Cell::new(0),
            removed: 0,
        }
    }

    /// A command with durability stamp `stamp` starts (module doc): what it changes
    /// carries `stamp`, and [`Keyspace::seen`] starts again from 0.
    pub fn begin(&mut self, stamp: u64) {
        self.stamp = stamp;
        self.seen.set(0);
    }

    /// The highest stamp the command since [`Keyspace::begin`] has read or written
    /// (0: only state that was already written).
    pub fn seen(&self) -> u64 {
        self.seen.get()
    }

    #[inline]
    fn saw(&self, stamp: u64) {
        raise(&self.seen, stamp);
    }

    /// Notes what a lookup of a key found: the entry, or a missing key.
    #[inline]
    fn saw_entry(&self, e: Option<&Entry>) {
        self.saw(e.map_or(self.removed, |e| e.stamp));
    }

    /// The 56-bit hash that orders `key` (and is its cursor position).
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key) & self.mask
    }

    /// The number of keys (expired keys not yet removed may be counted, as Redis's
    /// DBSIZE does).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of keys with an expiry time (expired ones not yet removed included).
    pub fn expires_count(&self) -> usize {
        self.expires_count
    }

    /// Approximate bytes used by keys, values and their bookkeeping.
    pub fn used_memory(&self) -> u64 {
        self.memory
    }

    // ---- the primitives ------------------------------------------------------------

    /// The live entry of `key` without removing an expired one (for `&self` readers).
    pub fn peek(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let e = self.map.get(&self.hash(key)).and_then(|b| b.find(key));
        self.saw_entry(e);
        let e = e?;
        (!e.expired(now_ms)).then_some(e)
    }

    /// The live entry of `key`; an expired one is removed (not logged) and `None`
    /// answered.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let h = self.hash(key);
        let found = self.map.get(&h).and_then(|b| b.find(key));
        self.saw_entry(found);
        let e: *const Entry = found?;
        // SAFETY: `e` points into the map, which is not touched between the search and
        // this read (today's borrow checker cannot see that returning the reference on
        // one branch and mutating the map on the other is fine: NLL problem case 3).
        if unsafe { &*e }.expired(now_ms) {
            self.remove_hashed(h, key);
            return None;
        }
        // SAFETY: as above; the returned reference borrows `self` mutably, so the map
        // cannot change while it lives.
        Some(unsafe { &*e })
    }

    /// Whether `key` exists (live) at `now_ms`; removes it if expired.
    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Sets `key` to `value` expiring at `expire_at_ms` (or never), replacing any
    /// previous value and expiry. An expiry already passed is stored (a time of 0 as 1,
    /// see [`expiry`]; the key then behaves as absent); commands remove the key instead.
    pub fn set(&mut self, key: &[u8], value: &[u8], expire_at_ms: Option<u64>) {
        self.set_hashed(self.hash(key), key, value.to_vec(), expire_at_ms)
    }

    /// [`Keyspace::set`] with the key's hash already computed; `key` is borrowed (copied
    /// only if new) or already a [`Key`] (replay's, moved in).
    fn set_hashed<K: AsRef<[u8]> + Into<Key>>(
        &mut self,
        h: u64,
        key: K,
        value: Vec<u8>,
        expire_at_ms: Option<u64>,
    ) {
        let key_len = key.as_ref().len();
        let expire = expiry(expire_at_ms);
        let expire_at_ms = expire.map(NonZeroU64::get);
        let new = Entry {
            value,
            expire,
            stamp: self.stamp,
        };
        self.saw(self.stamp);
        let add = slot_memory(key_len, &new);
        // One search of the tree, new key or not (start-up replays millions of sets).
        let bucket = match self.map.entry(h) {
            btree_map::Entry::Vacant(v) => {
                v.insert(Bucket::new((key.into(), new)));
                self.len += 1;
                self.memory += add;
                if let Some(at) = expire_at_ms {
                    self.expires.insert((at, h));
                    self.expires_count += 1;
                }
                return;
            }
            btree_map::Entry::Occupied(o) => o.into_mut(),
        };
        let old_expire = match bucket.find_mut(key.as_ref()) {
            Some(e) => {
                let old = std::mem::replace(e, new);
                self.memory -= slot_memory(key_len, &old);
                if old.expire.is_some() {
                    self.expires_count -= 1;
                }
                old.expire_at_ms()
            }
            None => {
                bucket.push((key.into(), new));
                self.len += 1;
                None
            }
        };
        self.memory += add;
        if expire_at_ms.is_some() {
            self.expires_count += 1;
        }
        if old_expire != expire_at_ms {
            if let Some(at) = old_expire {
                self.unindex(h, at);
            }
            if let Some(at) = expire_at_ms {
                self.expires.insert((at, h));
            }
        }
    }

    /// Removes `key`: whether a live key was removed (an expired one is removed too,
    /// answering `false`).
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.remove_live(self.hash(key), key, now_ms)
    }

    /// [`Keyspace::remove`] with the key's hash already computed.
    fn remove_live(&mut self, h: u64, key: &[u8], now_ms: u64) -> bool {
        match self.remove_hashed(h, key) {
            Some(e) if !e.expired(now_ms) => {
                // A live key removed: the command logs it.
                self.removed = self.removed.max(self.stamp);
                self.saw(self.stamp);
                true
            }
            Some(_) => false, // an expired one: `remove_hashed` noted its stamp
            None => {
                self.saw(self.removed);
                false
            }
        }
    }

    /// Sets or clears the expiry of a live `key`: whether the key exists.
    pub fn set_expire(&mut self, key: &[u8], at_ms: Option<u64>, now_ms: u64) -> bool {
        self.set_expire_hashed(self.hash(key), key, at_ms, now_ms)
    }

    /// [`Keyspace::set_expire`] with the key's hash already computed.
    fn set_expire_hashed(&mut self, h: u64, key: &[u8], at_ms: Option<u64>, now_ms: u64) -> bool {
        let Some(e) = self.map.get_mut(&h).and_then(|b| b.find_mut(key)) else {
            self.saw(self.removed);
            return false;
        };
        if e.expired(now_ms) {
            self.remove_hashed(h, key);
            return false;
        }
        e.stamp = self.stamp;
        raise(&self.seen, self.stamp); // (not `saw`: `e` borrows the map)
        let expire = expiry(at_ms);
        let at_ms = expire.map(NonZeroU64::get);
        let old = std::mem::replace(&mut e.expire, expire).map(NonZeroU64::get);
        if old == at_ms {
            return true;
        }
        match (old, at_ms) {
            (None, Some(_)) => {
                self.expires_count += 1;
                self.memory += PER_EXPIRE_OVERHEAD;
            }
            (Some(_), None) => {
                self.expires_count -= 1;
                self.memory -= PER_EXPIRE_OVERHEAD;
            }
            _ => {}
        }
        if let Some(at) = old {
            self.unindex(h, at);
        }
        if let Some(at) = at_ms {
            self.expires.insert((at, h));
        }
        true
    }

    /// Runs `f` on the value of a live `key` (APPEND, SETRANGE: in place, without
    /// copying the value), keeping the memory count right; `None` if there is no
    /// such key. The expiry is kept.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> Option<R> {
        let h = self.hash(key);
        let Some(e) = self.map.get_mut(&h).and_then(|b| b.find_mut(key)) else {
            self.saw(self.removed);
            return None;
        };
        if e.expired(now_ms) {
            self.remove_hashed(h, key);
            return None;
        }
        e.stamp = self.stamp;
        raise(&self.seen, self.stamp); // (not `saw`: `e` borrows the map)
        let before = e.value.len() as u64;
        let r = f(&mut e.value);
        self.memory = self.memory - before + e.value.len() as u64;
        Some(r)
    }

    fn remove_hashed(&mut self, h: u64, key: &[u8]) -> Option<Entry> {
        let bucket = self.map.get_mut(&h)?;
        let (k, e) = match bucket.remove(key)? {
            Ok(slot) => slot,
            Err(()) => self.map.remove(&h).expect("bucket just found").first,
        };
        self.len -= 1;
        self.memory -= slot_memory(k.len(), &e);
        // The key is gone: its absence shows the state its last change made (an expiry
        // time, for a key dropped as expired; a logged removal also notes its own).
        self.removed = self.removed.max(e.stamp);
        self.saw(e.stamp);
        if let Some(at) = e.expire_at_ms() {
            self.expires_count -= 1;
            self.unindex(h, at);
        }
        Some(e)
    }

    /// Removes `(at, h)` from the expiry index unless another key of bucket `h`
    /// still expires at `at`.
    fn unindex(&mut self, h: u64, at: u64) {
        let shared = self
            .map
            .get(&h)
            .is_some_and(|b| b.slots().any(|s| s.1.expire_at_ms() == Some(at)));
        if !shared {
            self.expires.remove(&(at, h));
        }
    }

    // ---- whole-keyspace operations -------------------------------------------------

    /// Replays one log record (recovery); `now_ms` drops keys already expired (a Set
    /// or Expire whose time has passed deletes the key).
    pub fn apply(&mut self, rec: RecordRef<'_>, now_ms: u64) {
        let op = Op::from_record(rec);
        let h = op.key().map_or(0, |k| self.hash(k));
        self.apply_hashed(h, op, now_ms)
    }

    /// [`Keyspace::apply`] of a record whose key hashes to `h` (any value for Flush);
    /// its value (and its key, if owned) move into the keyspace.
    fn apply_hashed<K: AsRef<[u8]> + Into<Key>>(&mut self, h: u64, op: Op<K>, now_ms: u64) {
        let passed = |at: Option<u64>| matches!(at, Some(at) if at <= now_ms);
        match op {
            Op::Set {
                key,
                value,
                expire_at_ms,
            } => {
                if passed(expire_at_ms) {
                    self.remove_live(h, key.as_ref(), now_ms);
                } else {
                    self.set_hashed(h, key, value, expire_at_ms);
                }
            }
            Op::Del { key } => {
                self.remove_live(h, key.as_ref(), now_ms);
            }
            Op::Expire { key, at_ms } => {
                if passed(at_ms) {
                    self.remove_live(h, key.as_ref(), now_ms);
                } else {
                    self.set_expire_hashed(h, key.as_ref(), at_ms, now_ms);
                }
            }
            Op::Flush => self.clear(),
        }
    }

    /// Removes every key and appends a Flush record to `log`.
    pub fn flush(&mut self, log: &mut Vec<u8>) {
        self.clear();
        crate::log::encode(&RecordRef::Flush, log);
    }

    fn clear(&mut self) {
        self.removed = self.removed.max(self.stamp);
        self.saw(self.stamp);
        self.map.clear();
        self.expires.clear();
        self.len = 0;
        self.expires_count = 0;
        self.memory = 0;
    }

    /// Removes up to `max_keys` keys whose expiry time has passed at `now_ms`, the
    /// earliest first; answers how many were removed. Costs O(log n) per key removed.
    pub fn expire_cycle(&mut self, now_ms: u64, max_keys: usize) -> usize {
        let mut removed = 0;
        while removed < max_keys {
            let Some(&(at, h)) = self.expires.first() else {
                break;
            };
            if at > now_ms {
                break;
            }
            self.expires.remove(&(at, h));
            // Every key of the bucket expiring at `at` goes (normally just one).
            let keys: Vec<Key> = match self.map.get(&h) {
                Some(b) => b
                    .slots()
                    .filter(|s| s.1.expire_at_ms() == Some(at))
                    .map(|s| s.0.clone())
                    .collect(),
                None => Vec::new(),
            };
            for k in keys {
                self.remove_hashed(h, &k);
                removed += 1;
            }
        }
        removed
    }

    /// Every live key matching the glob `pattern` (`*` alone matches every key, as
    /// in Redis, the empty key included).
    pub fn keys(&self, pattern: &[u8], now_ms: u64) -> Vec<Vec<u8>> {
        let all = pattern == b"*";
        let mut out = Vec::new();
        for b in self.map.values() {
            for (k, e) in b.slots() {
                if !e.expired(now_ms) && (all || glob_match(pattern, k)) {
                    out.push(k.to_vec());
                }
            }
        }
        out
    }

    /// One SCAN step: visits about `count` buckets from `cursor` (at least one key's
    /// worth unless the walk ends), answers the next cursor (0 when done) and the live
    /// keys visited that match `pattern`. See the module doc for the guarantee.
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
        now_ms: u64,
    ) -> (u64, Vec<Vec<u8>>) {
        let pattern = pattern.filter(|p| *p != b"*");
        let mut out = Vec::new();
        let next = self.visit(cursor, count.max(1), |k, e| {
            if !e.expired(now_ms) && pattern.is_none_or(|p| glob_match(p, k)) {
                out.push(k.to_vec());
            }
        });
        (next, out)
    }

    /// One compaction step: calls `f` with a `Set` record for each live key of about
    /// `max_keys` buckets from `cursor`; answers the next cursor (0 when done).
    pub fn walk(
        &self,
        cursor: u64,
        max_keys: usize,
        now_ms: u64,
        mut f: impl FnMut(RecordRef<'_>),
    ) -> u64 {
        self.visit(cursor, max_keys.max(1), |k, e| {
            if !e.expired(now_ms) {
                f(RecordRef::Set {
                    key: k,
                    value: &e.value,
                    expire_at_ms: e.expire_at_ms(),
                });
            }
        })
    }

    /// Visits `n` buckets from hash `cursor` on; the hash of the next bucket, or 0.
    fn visit(&self, cursor: u64, n: usize, mut f: impl FnMut(&[u8], &Entry)) -> u64 {
        if cursor >= HASH_LIMIT {
            return 0;
        }
        let mut it = self.map.range((Bound::Included(cursor), Bound::Unbounded));
        for (_, b) in it.by_ref().take(n) {
            for (k, e) in b.slots() {
                f(k, e);
            }
        }
        it.next().map_or(0, |(h, _)| *h)
    }
}

impl Default for Keyspace {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap as Model;

    /// With 2-bit hashes nearly every key collides: random operations must still
    /// agree with a plain map, and the counters and the index stay right.
    #[test]
    fn colliding_keys_behave_like_a_map() {
        let mut ks = Keyspace {
            mask: 3,
            ..Keyspace::new()
        };
        let mut model: Model<Vec<u8>, (Vec<u8>, Option<u64>)> = Model::new();
        let mut x: u64 = 12345;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..5000u64 {
            let key = format!("k{}", rnd(40)).into_bytes();
            match rnd(5) {
                0 | 1 => {
                    let at = if rnd(2) == 0 {
                        Some(1000 + rnd(100))
                    } else {
                        None
                    };
                    ks.set(&key, &vec![b'v'; rnd(5) as usize], at);
                    model.insert(key.clone(), (vec![b'v'; 0], at));
                    let v = ks.peek(&key, 0).unwrap().value().to_vec();
                    model.get_mut(&key).unwrap().0 = v;
                }
                2 => {
                    assert_eq!(ks.remove(&key, 0), model.remove(&key).is_some());
                }
                3 => {
                    let at = if rnd(2) == 0 {
                        Some(1000 + rnd(100))
                    } else {
                        None
                    };
                    let exists = ks.set_expire(&key, at, 0);
                    assert_eq!(exists, model.contains_key(&key));
                    if let Some(e) = model.get_mut(&key) {
                        e.1 = at;
                    }
                }
                _ => {
                    ks.update(&key, 0, |v| v.push(b'x'));
                    if let Some(e) = model.get_mut(&key) {
                        e.0.push(b'x');
                    }
                }
            }
            assert_eq!(ks.len(), model.len(), "step {step}");
            let mem: u64 = model
                .iter()
                .map(|(k, (v, at))| {
                    (k.len() + v.len()) as u64
                        + PER_KEY_OVERHEAD
                        + if at.is_some() { PER_EXPIRE_OVERHEAD } else { 0 }
                })
                .sum();
            assert_eq!(ks.used_memory(), mem, "step {step}");
            assert_eq!(
                ks.expires_count(),
                model.values().filter(|e| e.1.is_some()).count()
            );
        }
        for (k, (v, at)) in &model {
            let e = ks.peek(k, 0).unwrap();
            assert_eq!((e.value(), e.expire_at_ms()), (v.as_slice(), *at));
        }
        // Active expiry removes exactly the keys whose time has passed.
        let due = model
            .values()
            .filter(|e| e.1.is_some_and(|t| t <= 1050))
            .count();
        assert_eq!(ks.expire_cycle(1050, usize::MAX), due);
        let left = ks.expires_count();
        assert_eq!(ks.expire_cycle(u64::MAX, usize::MAX), left);
        assert_eq!(ks.expires_count(), 0);
        assert_eq!(ks.len(), model.values().filter(|e| e.1.is_none()).count());
    }

    /// Durability stamps: each read notes the stamp of the state it saw, each change
    /// the running command's stamp; a missing key shows the last removal's.
    #[test]
    fn reads_note_the_stamp_of_what_they_saw() {
        let mut ks = Keyspace::new();
        ks.set(b"old", b"v", None); // replayed at start-up: stamp 0
        ks.begin(5);
        ks.set(b"a", b"1", None);
        assert_eq!(ks.seen(), 5);
        ks.begin(9);
        ks.set(b"b", b"2", Some(1_000));
        ks.begin(10);
        assert!(ks.get(b"old", 0).is_some());
        assert_eq!(ks.seen(), 0, "recovered state is written");
        assert!(ks.get(b"a", 0).is_some());
        assert_eq!(ks.seen(), 5);
        assert!(ks.peek(b"nothing", 0).is_none());
        assert_eq!(
            ks.seen(),
            5,
            "nothing removed yet: a missing key needs nothing"
        );
        ks.begin(12);
        assert!(ks.remove(b"a", 0));
        assert_eq!(ks.seen(), 12);
        ks.begin(20);
        assert!(ks.get(b"a", 0).is_none());
        assert_eq!(ks.seen(), 12, "a missing key shows the last removal");
        // An expired key dropped on read shows the change that set its expiry.
        ks.begin(30);
        assert!(ks.remove(b"old", 0));
        ks.begin(40);
        assert!(ks.get(b"b", 2_000).is_none());
        assert_eq!(
            ks.seen(),
            9,
            "b's answer comes from its own expiry (stamp 9)"
        );
        ks.begin(41);
        assert_eq!(ks.update(b"zz", 0, |v| v.len()), None);
        assert_eq!(ks.seen(), 30, "a missing key shows the last removal");
        ks.set(b"c", b"3", None);
        ks.begin(50);
        assert!(ks.set_expire(b"c", Some(5_000), 0));
        assert_eq!(ks.seen(), 50);
        ks.begin(60);
        assert_eq!(ks.peek(b"c", 0).map(|e| e.stamp), Some(50));
        assert_eq!(ks.seen(), 50);
        ks.begin(70);
        ks.clear();
        ks.begin(80);
        assert!(ks.peek(b"c", 0).is_none());
        assert_eq!(ks.seen(), 70, "a flush is a removal of every key");
    }
}
