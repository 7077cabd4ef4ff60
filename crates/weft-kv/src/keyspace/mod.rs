//! One shard's keys: the values, their expiry times and the memory they take.
//!
//! # Structure
//! Every key is ordered by a 56-bit keyed hash (SipHash with a per-process random key,
//! std's `RandomState`: an attacker who picks keys cannot aim them at one place).
//! - The index (`index.rs`) maps hashes to entries and keeps them **in hash order**: an
//!   open-addressing table with linear probing whose home slot is the hash's top bits
//!   and whose clusters are kept sorted by hash, grown by doubling a few slots per
//!   insert or removal. A lookup reads its home slot and the few after it (one or two
//!   cache lines), then the entry. Keys whose hashes are equal (probability ≈ n²/2⁵⁷)
//!   sit side by side, compared by key.
//! - Each key is one allocation ([`Entry`]: tag and stamp, expiry, key, value). The
//!   tag is the value's type and encoding (`value.rs`): a string, a small collection
//!   packed in the entry (`hash.rs`), or a pointer to a big one's boxed structure
//!   (docs/kv-types.md).
//!
//! # The cursor (SCAN and compaction)
//! A cursor is a position in hash order: "every key whose hash is ≥ cursor is still
//! to be visited". 0 starts a walk, and a returned 0 ends it. Since a key's hash never
//! changes and a walk only moves forward, every key present for the whole walk is
//! returned (at least once: exactly once in fact, unless it is removed and added
//! again), whatever else is inserted or removed between calls. The index's growth
//! moves entries between tables but never changes their hashes, and a walk merges the
//! tables in hash order, so growth is invisible to a cursor. Hashes are below 2⁵⁶ so
//! that the server can put a shard index in a cursor's top 8 bits. A step visits
//! whole hashes (all keys of one hash together); the next cursor is the next hash,
//! which is never 0 (hash 0 can only come first), so 0 unambiguously means done.
//!
//! # Expiry
//! Each key has an optional absolute expiry time in Unix milliseconds. Expiry is lazy
//! (an expired key behaves as absent, and is removed when an operation with `&mut`
//! access finds it) and active: [`Keyspace::expire_cycle`] pops the earliest entries
//! of an index ordered by `(expire_at_ms, hash)`, kept in step with every change of
//! a key's expiry. Neither removal is logged: replaying the log drops keys whose
//! absolute expiry time has passed, so the log need not say so. A write that would
//! pass the memory limit first calls [`Keyspace::reclaim`], which removes expired
//! keys until enough is freed.
//!
//! # Memory accounting
//! [`Keyspace::used_memory`] is the sum over keys of key length + value length +
//! [`PER_KEY_OVERHEAD`] (+ [`PER_EXPIRE_OVERHEAD`] for a key with an expiry), kept
//! up to date by every primitive that changes a key. It approximates what the heap
//! holds (index slots, entry heads, allocation headers) without asking the allocator.
//! [`Keyspace::entry_memory`] and [`Keyspace::memory_of`] let a command work out what
//! it would add before it changes anything (the memory limit's check).
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
//! # Records
//! The keyspace does not log by itself: commands append records, a key's whole state
//! when they create it and the change when they change it (see [`crate::log`] and
//! docs/kv-types.md). [`Keyspace::apply`] and [`Replay`] replay them exactly, with no
//! regard for the clock (a change may follow a record whose time has passed), and
//! [`Replay::finish`] then drops the keys whose time has passed; [`Keyspace::walk`]
//! produces a key's full state for compaction.

pub mod access;
mod entry;
pub mod evict;
pub mod glob;
pub mod hash;
mod index;
mod key;
pub mod list;
pub mod pieces;
mod replay;
pub mod set;
pub mod state;
pub mod stream;
pub mod value;
pub mod zset;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::num::NonZeroU64;

use crate::log::{Items, RecordRef, StrEnc};
pub use glob::glob_match;
pub use replay::{Replay, BATCH};
pub use value::{tag, Type};

/// Hashes are kept below this (56 bits), so cursors are too.
pub const HASH_LIMIT: u64 = 1 << 56;

/// Bytes counted per key on top of its key and value: its index slot (16 bytes at a
/// load between 0.4 and 0.8), its entry's head (24), the allocator's header and
/// rounding.
pub const PER_KEY_OVERHEAD: u64 = 64;

/// Bytes counted per key that has an expiry time (its slot in the expiry index).
pub const PER_EXPIRE_OVERHEAD: u64 = 32;

pub use entry::Entry;
use index::{Index, Pos};
use key::Key;

/// Notes an access of `e` by a command (`access.rs`); the entry is written only when
/// its bits change (an LRU clock counts seconds: most reads under load change nothing).
#[inline]
fn touch(e: &Entry) {
    let (old, new) = (e.access(), access::touched(e.access()));
    if new != old {
        e.set_access(new);
    }
}

impl Entry {
    /// Whether the entry has expired at `now_ms` (an expiry at `now_ms` has passed,
    /// as in Redis).
    #[inline]
    fn expired(&self, now_ms: u64) -> bool {
        matches!(self.expire_at_ms(), Some(at) if at <= now_ms)
    }
}

/// The expiry as stored: 0 (long passed) is kept as 1, so that it fits the niche.
#[inline]
fn expiry(at_ms: Option<u64>) -> Option<NonZeroU64> {
    at_ms.map(|t| NonZeroU64::new(t.max(1)).expect("at least 1"))
}

/// Starts loading the cache line at `p` (a hint; nothing on other architectures).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unused_unsafe)]
    // SAFETY: a prefetch is a hint that never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A log record to replay, with what it carries owned and its key borrowed (`&[u8]`)
/// or already in the keyspace's form ([`Key`], as replay keeps it while it sorts).
enum Op<K> {
    /// The key's new entry, a whole state (key, value, expiry; its stamp is set when
    /// applied).
    Put(Entry),
    Del {
        key: K,
    },
    Expire {
        key: K,
        at_ms: Option<u64>,
    },
    Append {
        key: K,
        piece: Box<[u8]>,
    },
    SetRange {
        key: K,
        offset: u64,
        piece: Box<[u8]>,
    },
    /// Packed field, value, ... to set.
    HSet {
        key: K,
        items: Box<[u8]>,
    },
    /// Packed fields to remove.
    HDel {
        key: K,
        items: Box<[u8]>,
    },
    /// Packed members to add to a set.
    SAdd {
        key: K,
        items: Box<[u8]>,
    },
    /// Packed members to remove from a set.
    SRem {
        key: K,
        items: Box<[u8]>,
    },
    /// A list's change (`list::Change`).
    List {
        key: K,
        change: list::Change,
    },
    /// Packed member, score pairs to set in a sorted set.
    ZAdd {
        key: K,
        items: Box<[u8]>,
    },
    /// Packed members to remove from a sorted set.
    ZRem {
        key: K,
        items: Box<[u8]>,
    },
    /// A change of a stream.
    Stream {
        key: K,
        change: Box<stream::Change>,
    },
    /// Every key of the keyspace goes.
    Flush,
}

fn packed_bytes(items: Items<'_>) -> Box<[u8]> {
    match items {
        Items::Packed { bytes, .. } => bytes.into(),
        _ => {
            let mut out = Vec::with_capacity(items.packed_len());
            for e in items.iter() {
                crate::packed::put(&mut out, e);
            }
            out.into()
        }
    }
}

impl<'a> Op<&'a [u8]> {
    /// The operation of a record about one keyspace (`None` for FlushAll and SwapDb,
    /// which are about the shard's databases: [`Replay`] applies them).
    fn from_record(rec: RecordRef<'a>) -> Option<Self> {
        Some(match rec {
            RecordRef::Set {
                key,
                value,
                expire_at_ms,
            } => Op::Put(Entry::new(key, value, expiry(expire_at_ms), 0)),
            RecordRef::SetStr {
                key,
                value,
                expire_at_ms,
                enc,
            } => Op::Put(Entry::with_tag(
                str_tag(enc),
                key,
                value,
                expiry(expire_at_ms),
                0,
            )),
            RecordRef::Del { key } => Op::Del { key },
            RecordRef::Expire { key, at_ms } => Op::Expire { key, at_ms },
            RecordRef::Flush => Op::Flush,
            RecordRef::FlushAll | RecordRef::SwapDb { .. } | RecordRef::Tx { .. } => return None,
            RecordRef::Append { key, piece } => Op::Append {
                key,
                piece: piece.into(),
            },
            RecordRef::SetRange { key, offset, piece } => Op::SetRange {
                key,
                offset,
                piece: piece.into(),
            },
            RecordRef::Hash {
                key,
                expire_at_ms,
                items,
            } if !items.is_empty() => Op::Put(hash::new_entry(key, items, expiry(expire_at_ms), 0)),
            RecordRef::Hash { key, .. } => Op::Del { key },
            RecordRef::HSet { key, items } => Op::HSet {
                key,
                items: packed_bytes(items),
            },
            RecordRef::HDel { key, items } => Op::HDel {
                key,
                items: packed_bytes(items),
            },
            RecordRef::ZSet {
                key,
                expire_at_ms,
                items,
            } if !items.is_empty() => Op::Put(zset::new_entry(key, items, expiry(expire_at_ms), 0)),
            RecordRef::ZSet { key, .. } => Op::Del { key },
            RecordRef::ZAdd { key, items } => Op::ZAdd {
                key,
                items: packed_bytes(items),
            },
            RecordRef::ZRem { key, items } => Op::ZRem {
                key,
                items: packed_bytes(items),
            },
            RecordRef::Members {
                key,
                expire_at_ms,
                items,
            } if !items.is_empty() => Op::Put(set::new_entry(key, items, expiry(expire_at_ms), 0)),
            RecordRef::Members { key, .. } => Op::Del { key },
            RecordRef::SAdd { key, items } => Op::SAdd {
                key,
                items: packed_bytes(items),
            },
            RecordRef::SRem { key, items } => Op::SRem {
                key,
                items: packed_bytes(items),
            },
            RecordRef::List {
                key,
                expire_at_ms,
                items,
            } if !items.is_empty() => Op::Put(list::new_entry(key, items, expiry(expire_at_ms), 0)),
            RecordRef::List { key, .. } => Op::Del { key },
            RecordRef::LPush { key, .. }
            | RecordRef::RPush { key, .. }
            | RecordRef::LPop { key, .. }
            | RecordRef::RPop { key, .. }
            | RecordRef::LSet { key, .. }
            | RecordRef::LInsert { key, .. }
            | RecordRef::LRem { key, .. } => Op::List {
                key,
                change: list::Change::of(&rec).expect("a list change"),
            },
            RecordRef::Stream {
                kind: 70,
                key,
                body,
            } => {
                let full = stream::Full::decode(body).expect("a checked stream record");
                Op::Put(full.entry(key, 0))
            }
            RecordRef::Stream { kind, key, body } => Op::Stream {
                key,
                change: Box::new(
                    stream::Change::decode(kind, body).expect("a checked stream record"),
                ),
            },
        })
    }
}

impl<K: AsRef<[u8]>> Op<K> {
    fn key(&self) -> Option<&[u8]> {
        match self {
            Op::Put(e) => Some(e.key()),
            Op::Del { key }
            | Op::Expire { key, .. }
            | Op::Append { key, .. }
            | Op::SetRange { key, .. }
            | Op::HSet { key, .. }
            | Op::HDel { key, .. }
            | Op::ZAdd { key, .. }
            | Op::ZRem { key, .. }
            | Op::SAdd { key, .. }
            | Op::SRem { key, .. }
            | Op::List { key, .. }
            | Op::Stream { key, .. } => Some(key.as_ref()),
            Op::Flush => None,
        }
    }

    fn map_key<L>(self, f: impl FnOnce(K) -> L) -> Op<L> {
        match self {
            Op::Put(e) => Op::Put(e),
            Op::Del { key } => Op::Del { key: f(key) },
            Op::Expire { key, at_ms } => Op::Expire { key: f(key), at_ms },
            Op::Append { key, piece } => Op::Append { key: f(key), piece },
            Op::SetRange { key, offset, piece } => Op::SetRange {
                key: f(key),
                offset,
                piece,
            },
            Op::HSet { key, items } => Op::HSet { key: f(key), items },
            Op::HDel { key, items } => Op::HDel { key: f(key), items },
            Op::ZAdd { key, items } => Op::ZAdd { key: f(key), items },
            Op::ZRem { key, items } => Op::ZRem { key: f(key), items },
            Op::SAdd { key, items } => Op::SAdd { key: f(key), items },
            Op::SRem { key, items } => Op::SRem { key: f(key), items },
            Op::List { key, change } => Op::List {
                key: f(key),
                change,
            },
            Op::Stream { key, change } => Op::Stream {
                key: f(key),
                change,
            },
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

fn slot_memory(e: &Entry) -> u64 {
    e.key().len() as u64
        + e.value_memory()
        + PER_KEY_OVERHEAD
        + if e.expire().is_some() {
            PER_EXPIRE_OVERHEAD
        } else {
            0
        }
}

/// Whether an entry is a collection left without elements (removed at once:
/// invariant 2 of docs/kv-types.md).
fn is_empty_collection(e: &Entry) -> bool {
    match e.kind() {
        Type::String => false,
        Type::Hash => hash::is_empty(e),
        Type::ZSet => zset::is_empty(e),
        Type::Set => set::is_empty(e),
        Type::List => list::is_empty(e),
        // A stream may be empty (XDEL of every entry keeps it, as in Redis).
        Type::Stream => false,
    }
}

/// One shard's keys.
pub struct Keyspace {
    hasher: std::collections::hash_map::RandomState,
    /// `HASH_LIMIT - 1`; tests narrow it to force hash collisions.
    mask: u64,
    index: Index,
    /// `(expire_at_ms, hash)` for every key with an expiry (one entry for several
    /// keys of one hash with the same time).
    expires: BTreeSet<(u64, u64)>,
    expires_count: usize,
    memory: u64,
    /// The running command's stamp (module doc: durability stamps).
    stamp: u64,
    /// The highest stamp the running command has read.
    seen: Cell<u64>,
    /// The highest stamp of any key removal (logged, or an expired key dropped).
    removed: u64,
    /// Every read notes at least this stamp: the last SWAPDB's, which changed what
    /// every key of the keyspace reads as.
    floor: u64,
    /// Keys removed because their time had passed (found expired by a command, or by
    /// the active cycle), ever.
    expired: u64,
    /// The database it is (its `expired` events name it; SWAPDB leaves it in place).
    db: u8,
}

impl Keyspace {
    /// An empty keyspace.
    pub fn new() -> Keyspace {
        Keyspace {
            hasher: Default::default(),
            mask: HASH_LIMIT - 1,
            index: Index::new(),
            expires: BTreeSet::new(),
            expires_count: 0,
            memory: 0,
            stamp: 0,
            seen: Cell::new(0),
            removed: 0,
            floor: 0,
            expired: 0,
            db: 0,
        }
    }

    /// Says which database this keyspace is (for its keyspace notifications).
    pub fn set_db(&mut self, db: u8) {
        self.db = db;
    }

    /// A key was removed because its time had passed: counted, and its `expired`
    /// event fired.
    fn note_expired(&mut self, e: &Entry) {
        self.expired += 1;
        crate::pubsub::notify::notify_db(self.db, crate::pubsub::EXPIRED, "expired", e.key());
        crate::pubsub::tracking::written(e.key());
    }

    /// Swaps the keys of two keyspaces (SWAPDB) by command stamp `stamp`: from now on
    /// every read of either waits for that command's record (their `floor`).
    pub fn swap(a: &mut Keyspace, b: &mut Keyspace, stamp: u64) {
        std::mem::swap(a, b);
        std::mem::swap(&mut a.db, &mut b.db);
        for ks in [a, b] {
            ks.floor = ks.floor.max(stamp);
            ks.removed = ks.removed.max(stamp);
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
        raise(&self.seen, stamp.max(self.floor));
    }

    /// Notes what a lookup of a key found: the entry, or a missing key.
    #[inline]
    fn saw_entry(&self, e: Option<&Entry>) {
        self.saw(e.map_or(self.removed, |e| e.stamp_at(self.stamp)));
    }

    /// The 56-bit hash that orders `key` (and is its cursor position).
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key) & self.mask
    }

    /// The number of keys (expired keys not yet removed may be counted, as Redis's
    /// DBSIZE does).
    pub fn len(&self) -> usize {
        self.index.len()
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

    /// The bytes [`Keyspace::used_memory`] counts for one key: its key and value and
    /// their bookkeeping (with `expires`, its place in the expiry index too).
    pub fn entry_memory(key_len: usize, value_len: usize, expires: bool) -> u64 {
        key_len as u64
            + value_len as u64
            + PER_KEY_OVERHEAD
            + if expires { PER_EXPIRE_OVERHEAD } else { 0 }
    }

    /// The bytes the live `key` counts for now (0 if there is no such key): what
    /// replacing it would give back.
    pub fn memory_of(&self, key: &[u8], now_ms: u64) -> u64 {
        self.peek(key, now_ms).map_or(0, slot_memory)
    }

    /// How many keys were removed because their time had passed (by a command that
    /// found them expired, or by the active cycle), ever.
    pub fn expired_count(&self) -> u64 {
        self.expired
    }

    /// The earliest expiry time of any key (passed or not), if some key has one.
    pub fn next_expiry(&self) -> Option<u64> {
        self.expires.first().map(|&(at, _)| at)
    }

    // ---- the primitives ------------------------------------------------------------

    /// Starts loading what a lookup of a key of hash `h` will read first (its slots),
    /// so that the cache misses of several keys of a pipeline overlap.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        self.index.prefetch(h);
    }

    /// After [`Keyspace::prefetch`]: starts loading the entry of a key of hash `h`.
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        self.index.prefetch_entry(h);
    }

    /// Makes room for `more` keys beyond those there now, at once (start-up replay).
    fn reserve(&mut self, more: usize) {
        self.index.reserve(self.len() + more);
    }

    /// The live entry of `key` without removing an expired one (for `&self` readers).
    /// Counts as an access of the key (`access.rs`).
    pub fn peek(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let e = self.peek_quiet(key, now_ms)?;
        touch(e);
        Some(e)
    }

    /// [`Keyspace::peek`] that does not count as an access (OBJECT, TYPE, DEBUG).
    pub fn peek_quiet(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let e = self
            .index
            .find(self.hash(key), key)
            .map(|p| self.index.at(p));
        self.saw_entry(e);
        let e = e?;
        (!e.expired(now_ms)).then_some(e)
    }

    /// Where the live `key` (hash `h`) is; an expired one is removed (not logged).
    /// Notes the stamp of what it found, and the access.
    #[inline]
    fn find_live(&mut self, h: u64, key: &[u8], now_ms: u64) -> Option<Pos> {
        let p = self.find_live_quiet(h, key, now_ms)?;
        touch(self.index.at(p));
        Some(p)
    }

    /// [`Keyspace::find_live`] that does not count as an access.
    fn find_live_quiet(&mut self, h: u64, key: &[u8], now_ms: u64) -> Option<Pos> {
        let Some(p) = self.index.find(h, key) else {
            self.saw(self.removed);
            return None;
        };
        let e = self.index.at(p);
        self.saw(e.stamp_at(self.stamp));
        if e.expired(now_ms) {
            let e = self.remove_at(h, p);
            self.note_expired(&e);
            return None;
        }
        Some(p)
    }

    /// [`Keyspace::get`] that does not count as an access (OBJECT, TYPE, TTL, ...).
    pub fn get_quiet(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let p = self.find_live_quiet(self.hash(key), key, now_ms)?;
        Some(self.index.at(p))
    }

    /// Whether `key` exists (live) at `now_ms`, without counting as an access (EXISTS);
    /// removes it if expired.
    pub fn contains_quiet(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.find_live_quiet(self.hash(key), key, now_ms).is_some()
    }

    /// The live entry of `key`; an expired one is removed (not logged) and `None`
    /// answered.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let p = self.find_live(self.hash(key), key, now_ms)?;
        Some(self.index.at(p))
    }

    /// Whether `key` exists (live) at `now_ms`; removes it if expired.
    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Sets `key` to `value` expiring at `expire_at_ms` (or never), replacing any
    /// previous value and expiry. An expiry already passed is stored (a time of 0 as 1,
    /// see the private `expiry` helper; the key then behaves as absent); commands remove
    /// the key instead.
    pub fn set(&mut self, key: &[u8], value: &[u8], expire_at_ms: Option<u64>) {
        self.set_string(key, value, expire_at_ms, None)
    }

    /// [`Keyspace::set`] of a string made as `enc` says (`None`: by SET).
    pub fn set_string(
        &mut self,
        key: &[u8],
        value: &[u8],
        expire_at_ms: Option<u64>,
        enc: Option<StrEnc>,
    ) {
        let t = enc.map_or(tag::STR, str_tag);
        let h = self.hash(key);
        let expire = expiry(expire_at_ms);
        match self.index.find(h, key) {
            // An existing key: its block is reused when the value's size class is the
            // same.
            Some(p) => {
                let e = self.index.at_mut(p);
                let before = slot_memory(e);
                e.set_payload(t, value);
                let old = e.replace_expire(expire);
                e.set_stamp(self.stamp);
                touch(e);
                let after = slot_memory(e);
                self.memory = self.memory - before + after;
                self.saw(self.stamp);
                self.expiry_changed(h, old.map(NonZeroU64::get), expire_at_ms.map(|t| t.max(1)));
            }
            None => self.insert(h, Entry::with_tag(t, key, value, expire, self.stamp)),
        }
    }

    /// Puts `e` (stamped now) in place of any entry of its key (hash `h`).
    fn set_entry(&mut self, h: u64, mut e: Entry) {
        e.set_stamp(self.stamp);
        match self.index.find(h, e.key()) {
            Some(p) => {
                let at = e.expire_at_ms();
                let old = std::mem::replace(self.index.at_mut(p), e);
                let new = self.index.at(p);
                self.memory = self.memory - slot_memory(&old) + slot_memory(new);
                self.saw(self.stamp);
                self.expiry_changed(h, old.expire_at_ms(), at);
            }
            None => self.insert(h, e),
        }
    }

    /// Adds the entry of a key that is not there.
    fn insert(&mut self, h: u64, e: Entry) {
        self.saw(self.stamp);
        self.memory += slot_memory(&e);
        if let Some(at) = e.expire_at_ms() {
            self.expires.insert((at, h));
            self.expires_count += 1;
        }
        self.index.insert(h, e);
    }

    /// Keeps the count and index of expiry times in step with a key of hash `h` whose
    /// expiry went from `old` to `new` (the entry already holds `new`; the caller
    /// counts its memory).
    fn expiry_changed(&mut self, h: u64, old: Option<u64>, new: Option<u64>) {
        if old == new {
            return;
        }
        match (old, new) {
            (None, Some(_)) => self.expires_count += 1,
            (Some(_), None) => self.expires_count -= 1,
            _ => {}
        }
        if let Some(at) = old {
            self.unindex(h, at);
        }
        if let Some(at) = new {
            self.expires.insert((at, h));
        }
    }

    /// Removes `key`: whether a live key was removed (an expired one is removed too,
    /// answering `false`).
    pub fn remove(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.remove_live(self.hash(key), key, now_ms)
    }

    /// Removes the live `key` and hands its entry over (MOVE; the caller logs it).
    pub fn take(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        let h = self.hash(key);
        let p = self.find_live(h, key, now_ms)?;
        self.removed = self.removed.max(self.stamp);
        self.saw(self.stamp);
        Some(self.remove_at(h, p))
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
            Some(e) => {
                // An expired one: `remove_at` noted its stamp.
                self.note_expired(&e);
                false
            }
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
        let Some(p) = self.find_live(h, key, now_ms) else {
            return false;
        };
        let e = self.index.at_mut(p);
        e.set_stamp(self.stamp);
        let expire = expiry(at_ms);
        let before = slot_memory(e);
        let old = e.replace_expire(expire);
        self.memory = self.memory - before + slot_memory(e);
        self.saw(self.stamp);
        self.expiry_changed(h, old.map(NonZeroU64::get), expire.map(NonZeroU64::get));
        true
    }

    /// Changes the value of a live `key` in place (APPEND, SETRANGE: without copying
    /// the value): makes it `len` bytes long (new bytes zero), then runs `f` on it,
    /// keeping the memory count right; `None` if there is no such key. The expiry is
    /// kept.
    pub fn update<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        len: impl FnOnce(usize) -> usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        let p = self.find_live(self.hash(key), key, now_ms)?;
        let e = self.index.at_mut(p);
        debug_assert!(e.is_string(), "update changes strings");
        e.set_stamp(self.stamp);
        e.set_tag(tag::STR_RAW);
        let before = e.value().len() as u64;
        e.resize(len(e.value().len()));
        let r = f(e.value_mut());
        let after = e.value().len() as u64;
        self.memory = self.memory - before + after;
        self.saw(self.stamp);
        Some(r)
    }

    /// Runs `f` on the live entry of `key` to change its value in place (a hash's
    /// fields, ...), keeping memory, stamp and expiry right; a collection `f` leaves
    /// empty is removed (the command's record says so). `None` if there is no such key
    /// (an expired one is removed). The caller has checked the type.
    pub fn modify<R>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let h = self.hash(key);
        let p = self.find_live(h, key, now_ms)?;
        Some(self.change_at(h, p, f))
    }

    /// [`Keyspace::modify`] of the entry at `p` (hash `h`), live or not.
    fn change_at<R>(&mut self, h: u64, p: Pos, f: impl FnOnce(&mut Entry) -> R) -> R {
        let e = self.index.at_mut(p);
        let before = slot_memory(e);
        e.set_stamp(self.stamp);
        let r = f(e);
        let (after, empty) = (slot_memory(e), is_empty_collection(e));
        self.memory = self.memory - before + after;
        self.saw(self.stamp);
        if empty {
            self.remove_at(h, p);
        }
        r
    }

    /// Puts `e` (a whole new value, built by its type's module) in place of whatever
    /// its key holds, stamped now.
    pub fn put(&mut self, e: Entry) {
        let h = self.hash(e.key());
        self.set_entry(h, e);
    }

    fn remove_hashed(&mut self, h: u64, key: &[u8]) -> Option<Entry> {
        let p = self.index.find(h, key)?;
        Some(self.remove_at(h, p))
    }

    /// Removes the entry at `p` (hash `h`), keeping the counts and index right.
    fn remove_at(&mut self, h: u64, p: Pos) -> Entry {
        let e = self.index.remove(p);
        self.memory -= slot_memory(&e);
        // The key is gone: its absence shows the state its last change made (an expiry
        // time, for a key dropped as expired; a logged removal also notes its own).
        let stamp = e.stamp_at(self.stamp);
        self.removed = self.removed.max(stamp);
        self.saw(stamp);
        if let Some(at) = e.expire_at_ms() {
            self.expires_count -= 1;
            self.unindex(h, at);
        }
        e
    }

    /// Removes `(at, h)` from the expiry index unless another key of hash `h`
    /// still expires at `at`.
    fn unindex(&mut self, h: u64, at: u64) {
        let shared = self
            .index
            .with_hash(h)
            .any(|e| e.expire_at_ms() == Some(at));
        if !shared {
            self.expires.remove(&(at, h));
        }
    }

    // ---- whole-keyspace operations -------------------------------------------------

    /// Replays one log record about this keyspace, exactly (module doc): a time that
    /// has passed is kept like any other (remove such keys afterwards with
    /// [`Keyspace::expire_cycle`], as [`Replay::finish`] does). FlushAll empties this
    /// keyspace; SwapDb, about two databases, is [`Replay`]'s.
    pub fn apply(&mut self, rec: RecordRef<'_>, _now_ms: u64) {
        match Op::from_record(rec) {
            Some(op) => {
                let h = op.key().map_or(0, |k| self.hash(k));
                self.apply_hashed(h, op)
            }
            None if rec == RecordRef::FlushAll => self.clear(),
            None => {}
        }
    }

    /// [`Keyspace::apply`] of a record whose key hashes to `h` (any value for Flush);
    /// its value (and its key, if owned) move into the keyspace.
    fn apply_hashed<K: AsRef<[u8]>>(&mut self, h: u64, op: Op<K>) {
        match op {
            Op::Put(e) => self.set_entry(h, e),
            Op::Del { key } => {
                if let Some(p) = self.index.find(h, key.as_ref()) {
                    self.removed = self.removed.max(self.stamp);
                    self.remove_at(h, p);
                }
            }
            Op::Expire { key, at_ms } => {
                if let Some(p) = self.index.find(h, key.as_ref()) {
                    let expire = expiry(at_ms);
                    let old = self.change_at(h, p, |e| e.replace_expire(expire));
                    self.expiry_changed(h, old.map(NonZeroU64::get), expire.map(NonZeroU64::get));
                }
            }
            Op::Append { key, piece } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::String) {
                    self.change_at(h, p, |e| {
                        let at = e.value().len();
                        e.resize(at + piece.len());
                        e.value_mut()[at..].copy_from_slice(&piece);
                        e.set_tag(tag::STR_RAW);
                    });
                }
            }
            Op::SetRange { key, offset, piece } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::String) {
                    self.change_at(h, p, |e| {
                        let (at, end) = (offset as usize, offset as usize + piece.len());
                        if end > e.value().len() {
                            e.resize(end);
                        }
                        e.value_mut()[at..end].copy_from_slice(&piece);
                        e.set_tag(tag::STR_RAW);
                    });
                }
            }
            Op::HSet { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::Hash) {
                    self.change_at(h, p, |e| {
                        let mut it = crate::packed::Iter::new(&items);
                        while let (Some(f), Some(v)) = (it.next(), it.next()) {
                            hash::set(e, f, v);
                        }
                    });
                }
            }
            Op::HDel { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::Hash) {
                    self.removed = self.removed.max(self.stamp);
                    self.change_at(h, p, |e| {
                        for f in crate::packed::Iter::new(&items) {
                            hash::remove(e, f);
                        }
                    });
                }
            }
            Op::SAdd { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::Set) {
                    self.change_at(h, p, |e| {
                        for m in crate::packed::Iter::new(&items) {
                            set::add(e, m);
                        }
                    });
                }
            }
            Op::SRem { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::Set) {
                    self.removed = self.removed.max(self.stamp);
                    self.change_at(h, p, |e| {
                        for m in crate::packed::Iter::new(&items) {
                            set::remove(e, m);
                        }
                    });
                }
            }
            Op::List { key, change } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::List) {
                    self.change_at(h, p, |e| change.apply(e));
                }
            }
            Op::ZAdd { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::ZSet) {
                    self.change_at(h, p, |e| {
                        // No members: the sorted set becomes a tree (SORT, compaction).
                        if items.is_empty() {
                            zset::make_tree_now(e);
                        }
                        let mut it = crate::packed::Iter::new(&items);
                        while let (Some(m), Some(s)) = (it.next(), it.next()) {
                            zset::set(e, m, zset::read_score(s));
                        }
                    });
                }
            }
            Op::ZRem { key, items } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::ZSet) {
                    self.removed = self.removed.max(self.stamp);
                    self.change_at(h, p, |e| {
                        for m in crate::packed::Iter::new(&items) {
                            zset::remove(e, m);
                        }
                    });
                }
            }
            Op::Stream { key, change } => {
                if let Some(p) = self.find_typed(h, key.as_ref(), Type::Stream) {
                    self.change_at(h, p, |e| change.apply(e));
                }
            }
            Op::Flush => self.clear(),
        }
    }

    /// Where the entry of `key` (hash `h`) is if it holds a value of type `t`, live or
    /// not (replay: a change record applies only to its own type's key).
    fn find_typed(&self, h: u64, key: &[u8], t: Type) -> Option<Pos> {
        self.index
            .find(h, key)
            .filter(|&p| self.index.at(p).kind() == t)
    }

    /// Removes every key (FLUSHDB, FLUSHALL; the caller logs it).
    pub fn flush(&mut self) {
        self.clear();
    }

    fn clear(&mut self) {
        self.removed = self.removed.max(self.stamp);
        self.saw(self.stamp);
        self.index.clear();
        self.expires.clear();
        self.expires_count = 0;
        self.memory = 0;
    }

    /// Forgets the count of keys removed because their time had passed (after
    /// start-up's replay dropped them: they expired while nothing ran).
    pub fn reset_expired_count(&mut self) {
        self.expired = 0;
    }

    /// Removes up to `max_keys` keys whose expiry time has passed at `now_ms`, the
    /// earliest first; answers how many were removed. Costs O(log n) per key removed
    /// and allocates nothing: every key it looks at is one to remove (the expiry index
    /// is in time order), so it never samples in vain.
    pub fn expire_cycle(&mut self, now_ms: u64, max_keys: usize) -> usize {
        let mut removed = 0;
        while removed < max_keys {
            let Some(&(at, h)) = self.expires.first() else {
                break;
            };
            if at > now_ms {
                break;
            }
            // A key of hash `h` expiring at `at` (normally the only one); removing the
            // last such key takes `(at, h)` out of the expiry index.
            match self.index.find_with(h, |e| e.expire_at_ms() == Some(at)) {
                Some(p) => {
                    let e = self.remove_at(h, p);
                    self.note_expired(&e);
                    removed += 1;
                }
                None => {
                    // Never left behind (the index is kept in step); drop it anyway.
                    self.expires.remove(&(at, h));
                }
            }
        }
        removed
    }

    /// Removes expired keys, the earliest first, until `bytes` bytes are freed or
    /// `max_keys` keys removed (or none is left expired); answers the bytes freed. A
    /// write that would not fit under the memory limit calls this before refusing.
    pub fn reclaim(&mut self, now_ms: u64, bytes: u64, max_keys: usize) -> u64 {
        let before = self.memory;
        let mut n = 0;
        while before - self.memory < bytes && n < max_keys {
            if self.expire_cycle(now_ms, 1) == 0 {
                break;
            }
            n += 1;
        }
        before - self.memory
    }

    /// Every live key matching the glob `pattern` (`*` alone matches every key, as
    /// in Redis, the empty key included).
    pub fn keys(&self, pattern: &[u8], now_ms: u64) -> Vec<Vec<u8>> {
        let all = pattern == b"*";
        let mut out = Vec::new();
        for (_, e) in self.index.iter_from(0) {
            if !e.expired(now_ms) && (all || glob_match(pattern, e.key())) {
                out.push(e.key().to_vec());
            }
        }
        out
    }

    /// One SCAN step: visits about `count` hashes from `cursor` (at least one key's
    /// worth unless the walk ends), answers the next cursor (0 when done) and the live
    /// keys visited that match `pattern`. See the module doc for the guarantee.
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
        now_ms: u64,
    ) -> (u64, Vec<Vec<u8>>) {
        self.scan_typed(cursor, count, pattern, None, now_ms)
    }

    /// [`Keyspace::scan`] answering only keys of type `only` (SCAN's TYPE option), if
    /// given.
    pub fn scan_typed(
        &self,
        cursor: u64,
        count: usize,
        pattern: Option<&[u8]>,
        only: Option<Type>,
        now_ms: u64,
    ) -> (u64, Vec<Vec<u8>>) {
        let pattern = pattern.filter(|p| *p != b"*");
        let mut out = Vec::new();
        let next = self.visit(cursor, count.max(1), |e| {
            if !e.expired(now_ms)
                && only.is_none_or(|t| e.kind() == t)
                && pattern.is_none_or(|p| glob_match(p, e.key()))
            {
                out.push(e.key().to_vec());
            }
        });
        (next, out)
    }

    /// One compaction step: calls `f` with the whole-state records of each live key of
    /// about `max_keys` hashes from `cursor` ([`Keyspace::state_records`]); answers the
    /// next cursor (0 when done).
    pub fn walk(
        &self,
        cursor: u64,
        max_keys: usize,
        now_ms: u64,
        mut f: impl FnMut(RecordRef<'_>),
    ) -> u64 {
        self.visit(cursor, max_keys.max(1), |e| {
            if !e.expired(now_ms) {
                Self::state_records(e, &mut f);
            }
        })
    }

    /// Calls `f` with records that create `e`'s key as it is: a string's `Set`, a
    /// hash's `Hash` (and `HSet`s for a big one: `hash::state_records`), a set's
    /// `Members` (and `SAdd`s for a big one: `set::state_records`); every collection
    /// type the same way ([`state::records`]).
    pub fn state_records(e: &Entry, mut f: impl FnMut(RecordRef<'_>)) {
        match e.kind() {
            Type::String => match str_enc(e.tag()) {
                None => f(RecordRef::Set {
                    key: e.key(),
                    value: e.value(),
                    expire_at_ms: e.expire_at_ms(),
                }),
                Some(enc) => f(RecordRef::SetStr {
                    key: e.key(),
                    value: e.value(),
                    expire_at_ms: e.expire_at_ms(),
                    enc,
                }),
            },
            Type::Hash => hash::state_records(e, f),
            Type::ZSet => zset::state_records(e, f),
            Type::Set => set::state_records(e, f),
            Type::List => list::state_records(e, f),
            Type::Stream => {
                let key = e.key();
                stream::state_records(e, |kind, body| f(RecordRef::Stream { kind, key, body }))
            }
        }
    }

    /// Visits the keys of `n` hashes from hash `cursor` on (all keys of a hash
    /// together); the next hash, or 0.
    fn visit(&self, cursor: u64, n: usize, f: impl FnMut(&Entry)) -> u64 {
        if cursor >= HASH_LIMIT {
            return 0;
        }
        self.index.visit(cursor, n, f)
    }
}

/// The tag of a string made as `enc` says.
fn str_tag(enc: StrEnc) -> u8 {
    match enc {
        StrEnc::Raw => tag::STR_RAW,
        StrEnc::Float => tag::STR_EMB,
    }
}

/// How a string of tag `t` was made, if that decides its encoding (its `SetStr`).
fn str_enc(t: u8) -> Option<StrEnc> {
    match t {
        tag::STR_RAW => Some(StrEnc::Raw),
        tag::STR_EMB => Some(StrEnc::Float),
        _ => None,
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
                    ks.update(&key, 0, |n| n + 1, |v| *v.last_mut().unwrap() = b'x');
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
        assert_eq!(ks.update(b"zz", 0, |n| n, |v| v.len()), None);
        assert_eq!(ks.seen(), 30, "a missing key shows the last removal");
        ks.set(b"c", b"3", None);
        ks.begin(50);
        assert!(ks.set_expire(b"c", Some(5_000), 0));
        assert_eq!(ks.seen(), 50);
        ks.begin(60);
        assert_eq!(ks.peek(b"c", 0).map(|e| e.stamp()), Some(50));
        assert_eq!(ks.seen(), 50);
        ks.begin(70);
        ks.clear();
        ks.begin(80);
        assert!(ks.peek(b"c", 0).is_none());
        assert_eq!(ks.seen(), 70, "a flush is a removal of every key");
    }
}
