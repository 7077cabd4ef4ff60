//! Streams: a boxed [`Stream`] (tag `STREAM`, OBJECT ENCODING `stream`), the record
//! bodies its changes are logged as, and their replay.
//!
//! A stream holds **entries** (an ID and its field, value pairs) in ID order, the last
//! ID it generated, the greatest ID deleted, the count of entries ever added, and its
//! **consumer groups**: each with its last delivered ID, its count of entries read
//! (unknown after some changes, as in Redis), its pending entry list (PEL: ID, owner,
//! delivery time, delivery count) and its consumers (name, seen time, own pending IDs).
//!
//! Entries are kept in a B-tree by ID. Redis keeps them in listpack *nodes* of at most
//! `stream-node-max-entries` (100) entries and `stream-node-max-bytes` (4096) bytes,
//! and its approximate trimming (`~`) removes whole nodes only; so each entry notes the
//! node it would be in, and `Stream::trim_point` decides as Redis does. Node numbers are
//! not logged: replay of the log rebuilds them as they were, a compacted image packs
//! the surviving entries into fresh nodes (which only changes which later `~` trims
//! remove nothing; each trim logs what it removed).
//!
//! Unlike the other collections, a stream may be empty (XDEL of every entry, XTRIM
//! MAXLEN 0, XGROUP CREATE ... MKSTREAM keep the key), as in Redis.
//!
//! **Records** (`log/record.rs` frames `RecordRef::Stream { kind, key, body }`; the body
//! is written and read here; IDs are `ms:u64le seq:u64le`, names `n:u32le bytes`):
//!
//! ```text
//! kind  body                                           change
//!  70   expire:opt last max_deleted added:u64 entries   XStream: the key holds a stream
//!                                                        of these entries, no groups
//!  71   last added:u64 entries                         XAdd: entries appended; the last
//!                                                        ID and the count of added set
//!  72   max_deleted n:u32 id*                          XDel: these entries removed
//!  73   below                                          XTrim: entries below this ID removed
//!  74   last added:u64 max_deleted                     XSetId
//!  75   group last read:i64le                          XGroup: created, or its last ID set
//!  76   group                                          XGroupDel
//!  77   group consumer seen:u64                        XConsumer: created if missing, seen
//!  78   group consumer                                 XConsumerDel (with its pending IDs)
//!  79   group consumer n:u32 (id time:u64 count:u64)*  XClaim: these IDs pending on it
//!  80   group n:u32 id*                                XAck: these IDs no longer pending
//! entries = n:u32 (id nfields:u32 element*nfields)*     element = LEB128 length, bytes
//! ```
//!
//! Every record is exact and absolute (times, IDs and counts as computed when the
//! command ran), so replay computes nothing from the clock.

use super::entry::Entry;
use super::value::{self, tag};
use crate::packed;
use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A stream entry's ID: milliseconds and a sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Id {
    /// The milliseconds part.
    pub ms: u64,
    /// The sequence part.
    pub seq: u64,
}

impl Id {
    /// `0-0`.
    pub const MIN: Id = Id { ms: 0, seq: 0 };
    /// The greatest ID.
    pub const MAX: Id = Id {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// The ID as Redis writes it: `ms-seq`.
    pub fn text(self) -> Vec<u8> {
        format!("{}-{}", self.ms, self.seq).into_bytes()
    }

    /// The next ID, if there is one.
    pub fn next(self) -> Option<Id> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(Id { ms: ms + 1, seq: 0 }),
            (ms, seq) => Some(Id { ms, seq: seq + 1 }),
        }
    }

    /// The previous ID, if there is one.
    pub fn prev(self) -> Option<Id> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(Id {
                ms: ms - 1,
                seq: u64::MAX,
            }),
            (ms, seq) => Some(Id { ms, seq: seq - 1 }),
        }
    }

    /// Parses `ms-seq` or `ms` (the sequence then `missing_seq`), as Redis's
    /// `streamParseID` reads each number: an integer as Redis writes one (not
    /// negative), else what C's `strtoull` takes whole (leading spaces, a sign, decimal
    /// digits, within 64 bits; a minus wraps around).
    pub fn parse(b: &[u8], missing_seq: u64) -> Option<Id> {
        if b.len() > 127 {
            return None;
        }
        let num = |t: &[u8]| -> Option<u64> {
            if let Some(v) = crate::commands::parse_i64(t) {
                return (v >= 0).then_some(v as u64);
            }
            let t = &t[t
                .iter()
                .take_while(|c| c.is_ascii_whitespace() || **c == 0x0b)
                .count()..];
            let (neg, digits) = match t.first() {
                Some(b'-') => (true, &t[1..]),
                Some(b'+') => (false, &t[1..]),
                _ => (false, t),
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
            Some(if neg { v.wrapping_neg() } else { v })
        };
        match b.iter().position(|&c| c == b'-') {
            Some(i) => Some(Id {
                ms: num(&b[..i])?,
                seq: num(&b[i + 1..])?,
            }),
            None => Some(Id {
                ms: num(b)?,
                seq: missing_seq,
            }),
        }
    }

    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.ms.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
    }
}

/// Bytes a stream counts besides its entries and groups.
pub const STREAM_OVERHEAD: u64 = 96;
/// Bytes an entry counts besides its fields and values.
pub const ENTRY_OVERHEAD: u64 = 48;
/// Bytes a group, a consumer or a pending entry counts besides its name.
pub const GROUP_OVERHEAD: u64 = 96;
/// See [`GROUP_OVERHEAD`].
pub const CONSUMER_OVERHEAD: u64 = 64;
/// See [`GROUP_OVERHEAD`].
pub const PENDING_OVERHEAD: u64 = 64;

static NODE_MAX_ENTRIES: AtomicU64 = AtomicU64::new(100);
static NODE_MAX_BYTES: AtomicU64 = AtomicU64::new(4096);

/// The most entries of a node (`stream-node-max-entries`, 100; 0: no bound).
pub fn node_max_entries() -> u64 {
    NODE_MAX_ENTRIES.load(Relaxed)
}

/// The most bytes of a node (`stream-node-max-bytes`, 4096; 0: 1 GiB).
pub fn node_max_bytes() -> u64 {
    NODE_MAX_BYTES.load(Relaxed)
}

/// Sets the node bounds (CONFIG SET): later entries go into nodes by them.
pub fn set_node_bounds(entries: Option<u64>, bytes: Option<u64>) {
    if let Some(n) = entries {
        NODE_MAX_ENTRIES.store(n, Relaxed);
    }
    if let Some(n) = bytes {
        NODE_MAX_BYTES.store(n, Relaxed);
    }
}

/// One entry: its fields and values (packed elements) and its node.
pub struct Item {
    node: u64,
    fields: Box<[u8]>,
}

impl Item {
    /// The fields and values, in order.
    pub fn fields(&self) -> packed::Iter<'_> {
        packed::Iter::new(&self.fields)
    }

    fn memory(&self) -> u64 {
        self.fields.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A listpack node as Redis would have it: live entries, entries ever put in it, and
/// about its bytes.
#[derive(Default)]
struct Node {
    live: u64,
    inserted: u64,
    bytes: u64,
}

/// A pending entry of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The consumer it was delivered to.
    pub consumer: Vec<u8>,
    /// When it was last delivered (Unix ms).
    pub delivery_time: u64,
    /// How many times it was delivered.
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Default, Debug)]
pub struct Consumer {
    /// When it last read or claimed (Unix ms).
    pub seen_time: u64,
    /// The IDs pending on it.
    pub pel: BTreeSet<Id>,
}

/// A consumer group.
#[derive(Default, Debug)]
pub struct Group {
    /// The last ID delivered to it.
    pub last_id: Id,
    /// Entries read (Redis's `entries-read`), -1 when unknown.
    pub entries_read: i64,
    /// Every pending entry, by ID.
    pub pel: BTreeMap<Id, Pending>,
    /// Its consumers, by name.
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

/// A stream (module doc).
#[derive(Default)]
pub struct Stream {
    entries: BTreeMap<Id, Item>,
    nodes: BTreeMap<u64, Node>,
    next_node: u64,
    /// The last ID added (or set by XSETID).
    pub last_id: Id,
    /// The greatest ID XDEL removed.
    pub max_deleted: Id,
    /// Entries ever added.
    pub entries_added: u64,
    /// Its groups, by name.
    pub groups: BTreeMap<Vec<u8>, Group>,
    memory: u64,
}

impl Stream {
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes it counts in the keyspace's memory.
    pub fn memory(&self) -> u64 {
        STREAM_OVERHEAD + self.memory
    }

    /// The number of listpack nodes Redis would hold (XINFO's `radix-tree-keys`).
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The entry of `id`.
    pub fn get(&self, id: Id) -> Option<&Item> {
        self.entries.get(&id)
    }

    /// The entries with IDs in `from..=to`, in order (or reversed).
    pub fn range(&self, from: Id, to: Id) -> impl DoubleEndedIterator<Item = (Id, &Item)> {
        let r = if from <= to {
            Some(self.entries.range(from..=to))
        } else {
            None
        };
        r.into_iter().flatten().map(|(id, it)| (*id, it))
    }

    /// The first entry.
    pub fn first(&self) -> Option<(Id, &Item)> {
        self.entries.iter().next().map(|(i, it)| (*i, it))
    }

    /// The last entry.
    pub fn last(&self) -> Option<(Id, &Item)> {
        self.entries.iter().next_back().map(|(i, it)| (*i, it))
    }

    /// Appends an entry of `id` (above every entry) with `fields` (field, value, ...).
    pub fn push<'a>(&mut self, id: Id, fields: impl IntoIterator<Item = &'a [u8]>) {
        let mut b = Vec::new();
        let mut n = 0u64;
        for f in fields {
            packed::put(&mut b, f);
            n += 1;
        }
        let bytes = b.len() as u64 + 2 * n + 8;
        let max_entries = node_max_entries();
        let max_bytes = match node_max_bytes() {
            0 => 1 << 30,
            b => b.min(1 << 30),
        };
        let node = match self.nodes.iter_mut().next_back() {
            Some((&k, nd))
                if (max_entries == 0 || nd.inserted < max_entries)
                    && nd.bytes + bytes < max_bytes =>
            {
                nd.live += 1;
                nd.inserted += 1;
                nd.bytes += bytes;
                k
            }
            _ => {
                let k = self.next_node;
                self.next_node += 1;
                self.nodes.insert(
                    k,
                    Node {
                        live: 1,
                        inserted: 1,
                        bytes: 16 + bytes,
                    },
                );
                k
            }
        };
        let item = Item {
            node,
            fields: b.into_boxed_slice(),
        };
        self.memory += item.memory();
        if let Some(old) = self.entries.insert(id, item) {
            // Never for a command's ID (it is above the last); replay of a damaged log
            // keeps counts right all the same.
            self.memory -= old.memory();
            self.unnode(old.node);
        }
    }

    fn unnode(&mut self, node: u64) {
        if let Some(nd) = self.nodes.get_mut(&node) {
            nd.live -= 1;
            if nd.live == 0 {
                self.nodes.remove(&node);
            }
        }
    }

    /// Removes the entry `id`: whether it was there.
    pub fn remove(&mut self, id: Id) -> bool {
        match self.entries.remove(&id) {
            Some(item) => {
                self.memory -= item.memory();
                self.unnode(item.node);
                true
            }
            None => false,
        }
    }

    /// Removes the entries below `below`; how many.
    pub fn remove_below(&mut self, below: Id) -> u64 {
        let ids: Vec<Id> = self.entries.range(..below).map(|(i, _)| *i).collect();
        for &id in &ids {
            self.remove(id);
        }
        ids.len() as u64
    }

    /// Where trimming stops, as Redis's `streamTrim` decides: the entries below the
    /// ID answered go (`None`: none). `maxlen` keeps at most that many entries, else
    /// `minid` keeps the entries from that ID on. Approximate trimming removes whole
    /// nodes only, at most `limit` entries (0: no limit).
    pub fn trim_point(
        &self,
        maxlen: Option<u64>,
        minid: Option<Id>,
        approx: bool,
        limit: u64,
    ) -> Option<Id> {
        let mut len = self.entries.len() as u64;
        let mut removed = 0u64;
        let mut below: Option<Id> = None;
        for (&k, nd) in &self.nodes {
            if matches!(maxlen, Some(m) if len <= m) {
                break;
            }
            if limit != 0 && removed + nd.live > limit {
                break;
            }
            let ids = self
                .entries
                .range(below.unwrap_or(Id::MIN)..)
                .take_while(|(_, it)| it.node == k)
                .map(|(i, _)| *i);
            let first_of_next: Option<Id>;
            let whole = match (maxlen, minid) {
                (Some(m), _) => len - nd.live >= m,
                (None, Some(min)) => {
                    let last = ids.clone().last();
                    last.is_some_and(|l| l < min)
                }
                (None, None) => false,
            };
            if whole {
                let last = ids.last();
                first_of_next = last.and_then(Id::next);
                len -= nd.live;
                removed += nd.live;
                below = first_of_next.or(below);
                continue;
            }
            if approx {
                break;
            }
            // Exact: entries of this node one by one.
            for id in ids {
                let stop = match (maxlen, minid) {
                    (Some(m), _) => len <= m,
                    (None, Some(min)) => id >= min,
                    (None, None) => true,
                };
                if stop {
                    break;
                }
                len -= 1;
                below = id.next();
            }
            break;
        }
        below
    }

    /// The entries at or after `from` up to `to` with each's fields, owned (for records).
    fn owned(&self, items: &[(Id, &Item)]) -> Vec<(Id, Vec<Vec<u8>>)> {
        items
            .iter()
            .map(|(id, it)| (*id, it.fields().map(<[u8]>::to_vec).collect()))
            .collect()
    }

    // ---- groups ----------------------------------------------------------------------

    fn group_memory(name: &[u8]) -> u64 {
        name.len() as u64 + GROUP_OVERHEAD
    }

    /// Creates the group `name`, or sets its last ID and entries read.
    pub fn set_group(&mut self, name: &[u8], last_id: Id, entries_read: i64) {
        if !self.groups.contains_key(name) {
            self.memory += Self::group_memory(name);
        }
        let g = self.groups.entry(name.to_vec()).or_default();
        g.last_id = last_id;
        g.entries_read = entries_read;
    }

    /// Removes the group `name`: whether it was there.
    pub fn remove_group(&mut self, name: &[u8]) -> bool {
        let Some(g) = self.groups.remove(name) else {
            return false;
        };
        self.memory -= Self::group_memory(name)
            + g.pel.len() as u64 * PENDING_OVERHEAD
            + g.consumers
                .keys()
                .map(|c| c.len() as u64 + CONSUMER_OVERHEAD)
                .sum::<u64>();
        true
    }

    /// Creates the consumer (if missing) and sets its seen time: whether it was made.
    pub fn touch_consumer(&mut self, group: &[u8], name: &[u8], seen: u64) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        let made = !g.consumers.contains_key(name);
        if made {
            self.memory += name.len() as u64 + CONSUMER_OVERHEAD;
        }
        g.consumers.entry(name.to_vec()).or_default().seen_time = seen;
        made
    }

    /// Removes a consumer and its pending entries: how many were pending.
    pub fn remove_consumer(&mut self, group: &[u8], name: &[u8]) -> Option<u64> {
        let g = self.groups.get_mut(group)?;
        let c = g.consumers.remove(name)?;
        for id in &c.pel {
            g.pel.remove(id);
        }
        let n = c.pel.len() as u64;
        self.memory -= name.len() as u64 + CONSUMER_OVERHEAD + n * PENDING_OVERHEAD;
        Some(n)
    }

    /// Makes `id` pending on `consumer` (created if missing) with this time and count.
    pub fn claim(&mut self, group: &[u8], consumer: &[u8], id: Id, time: u64, count: u64) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        if !g.consumers.contains_key(consumer) {
            self.memory += consumer.len() as u64 + CONSUMER_OVERHEAD;
            g.consumers.insert(consumer.to_vec(), Consumer::default());
        }
        let p = Pending {
            consumer: consumer.to_vec(),
            delivery_time: time,
            delivery_count: count,
        };
        match g.pel.insert(id, p) {
            Some(old) => {
                if let Some(c) = g.consumers.get_mut(&old.consumer) {
                    c.pel.remove(&id);
                }
            }
            None => self.memory += PENDING_OVERHEAD,
        }
        g.consumers
            .get_mut(consumer)
            .expect("made above")
            .pel
            .insert(id);
    }

    /// Acknowledges `id` in `group`: whether it was pending.
    pub fn ack(&mut self, group: &[u8], id: Id) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        let Some(p) = g.pel.remove(&id) else {
            return false;
        };
        if let Some(c) = g.consumers.get_mut(&p.consumer) {
            c.pel.remove(&id);
        }
        self.memory -= PENDING_OVERHEAD;
        true
    }

    /// Redis's `streamEstimateDistanceFromFirstEverEntry`: the entries read of a group
    /// whose last ID is `id`, or -1 when it cannot be known.
    pub fn estimate_read(&self, id: Id) -> i64 {
        if self.entries_added == 0 {
            return 0;
        }
        if self.entries.is_empty() && id <= self.last_id {
            return self.entries_added as i64;
        }
        if id == self.last_id {
            return self.entries_added as i64;
        }
        if id > self.last_id {
            return -1;
        }
        let first = self.first_id();
        if self.max_deleted == Id::MIN || self.max_deleted < first {
            let before = (self.entries_added - self.len() as u64) as i64;
            if id < first {
                return before;
            }
            if id == first {
                return before + 1;
            }
        }
        -1
    }

    /// The first entry's ID, or `0-0` when empty (XINFO's `recorded-first-entry-id`).
    pub fn first_id(&self) -> Id {
        self.first().map_or(Id::MIN, |(i, _)| i)
    }

    /// Redis's lag of a group: entries not yet read, or `None` when unknown.
    pub fn lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read >= 0 && !self.range_has_tombstone(g.last_id, Id::MAX) {
            return Some(self.entries_added as i64 - g.entries_read);
        }
        let read = self.estimate_read(g.last_id);
        (read >= 0).then(|| self.entries_added as i64 - read)
    }

    /// Whether entries were deleted (XDEL) after `from` and up to `to`: Redis's
    /// `streamRangeHasTombstones` (over a stream's first and max deleted IDs).
    pub fn range_has_tombstone(&self, from: Id, to: Id) -> bool {
        if self.entries.is_empty() || self.max_deleted == Id::MIN {
            return false;
        }
        if self.first_id() > self.max_deleted {
            return false;
        }
        from <= self.max_deleted && self.max_deleted <= to
    }
}

// ---- the entry ---------------------------------------------------------------------

/// The stream of a stream entry.
pub fn of(e: &Entry) -> &Stream {
    debug_assert_eq!(e.tag(), tag::STREAM);
    // SAFETY: the entry's tag says its bytes hold its stream, which lives as long as it.
    unsafe { stream_of(e.value()) }
}

/// [`of`], to change.
pub fn of_mut(e: &mut Entry) -> &mut Stream {
    debug_assert_eq!(e.tag(), tag::STREAM);
    // SAFETY: as in `of`; the unique borrow of the entry makes this the only reference.
    unsafe { &mut *(value::read_ptr(e.value()) as *mut Stream) }
}

/// The stream a stream value's bytes point to.
///
/// # Safety
/// `bytes` are the value of a live entry of tag [`tag::STREAM`].
pub(super) unsafe fn stream_of(bytes: &[u8]) -> &Stream {
    // SAFETY: per the contract, the bytes hold the pointer `Box::into_raw` gave when the
    // entry took the stream, and the entry (which owns it) outlives the borrow.
    unsafe { &*(value::read_ptr(bytes) as *const Stream) }
}

/// Frees the stream of a stream value's bytes.
///
/// # Safety
/// `bytes` hold the pointer of a stream boxed with `Box::into_raw`, which nothing uses
/// afterwards.
pub(super) unsafe fn drop_stream(bytes: &[u8]) {
    // SAFETY: per the contract, the pointer came from `Box::into_raw` and is dropped once.
    drop(unsafe { Box::from_raw(value::read_ptr(bytes) as *mut Stream) })
}

/// A new entry for `key` owning `s`.
pub fn new_entry(key: &[u8], s: Stream, expire: Option<NonZeroU64>, stamp: u64) -> Entry {
    let p = Box::into_raw(Box::new(s)) as *mut u8;
    Entry::with_tag(tag::STREAM, key, &value::ptr_bytes(p), expire, stamp)
}

// ---- records -----------------------------------------------------------------------

/// The first and last record kinds of streams.
pub const KINDS: std::ops::RangeInclusive<u8> = 70..=80;

/// A logged change of a stream (module doc's table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// 71: entries appended.
    Add {
        last_id: Id,
        entries_added: u64,
        entries: Vec<(Id, Vec<Vec<u8>>)>,
    },
    /// 72: entries removed by XDEL.
    Del { max_deleted: Id, ids: Vec<Id> },
    /// 73: entries below an ID removed.
    Trim { below: Id },
    /// 74: XSETID.
    SetId {
        last_id: Id,
        entries_added: u64,
        max_deleted: Id,
    },
    /// 75: a group made or moved.
    Group {
        name: Vec<u8>,
        last_id: Id,
        entries_read: i64,
    },
    /// 76: a group removed.
    GroupDel { name: Vec<u8> },
    /// 77: a consumer made if missing, its seen time set.
    Consumer {
        group: Vec<u8>,
        name: Vec<u8>,
        seen: u64,
    },
    /// 78: a consumer removed.
    ConsumerDel { group: Vec<u8>, name: Vec<u8> },
    /// 79: entries pending on a consumer, with delivery times and counts.
    Claim {
        group: Vec<u8>,
        consumer: Vec<u8>,
        items: Vec<(Id, u64, u64)>,
    },
    /// 80: entries no longer pending.
    Ack { group: Vec<u8>, ids: Vec<Id> },
}

fn put_name(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_entries<'a, F>(out: &mut Vec<u8>, entries: &[(Id, F)])
where
    F: AsRef<[Vec<u8>]> + 'a,
{
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (id, fields) in entries {
        id.put(out);
        let fields = fields.as_ref();
        out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
        for f in fields {
            packed::put(out, f);
        }
    }
}

impl Change {
    /// The record kind.
    pub fn kind(&self) -> u8 {
        match self {
            Change::Add { .. } => 71,
            Change::Del { .. } => 72,
            Change::Trim { .. } => 73,
            Change::SetId { .. } => 74,
            Change::Group { .. } => 75,
            Change::GroupDel { .. } => 76,
            Change::Consumer { .. } => 77,
            Change::ConsumerDel { .. } => 78,
            Change::Claim { .. } => 79,
            Change::Ack { .. } => 80,
        }
    }

    /// The record body.
    pub fn body(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Change::Add {
                last_id,
                entries_added,
                entries,
            } => {
                last_id.put(&mut out);
                out.extend_from_slice(&entries_added.to_le_bytes());
                put_entries(&mut out, entries);
            }
            Change::Del { max_deleted, ids } => {
                max_deleted.put(&mut out);
                out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
                ids.iter().for_each(|i| i.put(&mut out));
            }
            Change::Trim { below } => below.put(&mut out),
            Change::SetId {
                last_id,
                entries_added,
                max_deleted,
            } => {
                last_id.put(&mut out);
                out.extend_from_slice(&entries_added.to_le_bytes());
                max_deleted.put(&mut out);
            }
            Change::Group {
                name,
                last_id,
                entries_read,
            } => {
                put_name(&mut out, name);
                last_id.put(&mut out);
                out.extend_from_slice(&entries_read.to_le_bytes());
            }
            Change::GroupDel { name } => put_name(&mut out, name),
            Change::Consumer { group, name, seen } => {
                put_name(&mut out, group);
                put_name(&mut out, name);
                out.extend_from_slice(&seen.to_le_bytes());
            }
            Change::ConsumerDel { group, name } => {
                put_name(&mut out, group);
                put_name(&mut out, name);
            }
            Change::Claim {
                group,
                consumer,
                items,
            } => {
                put_name(&mut out, group);
                put_name(&mut out, consumer);
                out.extend_from_slice(&(items.len() as u32).to_le_bytes());
                for (id, t, c) in items {
                    id.put(&mut out);
                    out.extend_from_slice(&t.to_le_bytes());
                    out.extend_from_slice(&c.to_le_bytes());
                }
            }
            Change::Ack { group, ids } => {
                put_name(&mut out, group);
                out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
                ids.iter().for_each(|i| i.put(&mut out));
            }
        }
        out
    }

    /// The change a record of `kind` with `body` is (`None`: not a valid one; kind 70
    /// is a whole state: [`decode_full`]).
    pub fn decode(kind: u8, body: &[u8]) -> Option<Change> {
        let mut r = Reader(body);
        let c = match kind {
            71 => Change::Add {
                last_id: r.id()?,
                entries_added: r.u64()?,
                entries: r.entries()?,
            },
            72 => Change::Del {
                max_deleted: r.id()?,
                ids: r.ids()?,
            },
            73 => Change::Trim { below: r.id()? },
            74 => Change::SetId {
                last_id: r.id()?,
                entries_added: r.u64()?,
                max_deleted: r.id()?,
            },
            75 => Change::Group {
                name: r.name()?,
                last_id: r.id()?,
                entries_read: r.u64()? as i64,
            },
            76 => Change::GroupDel { name: r.name()? },
            77 => Change::Consumer {
                group: r.name()?,
                name: r.name()?,
                seen: r.u64()?,
            },
            78 => Change::ConsumerDel {
                group: r.name()?,
                name: r.name()?,
            },
            79 => {
                let group = r.name()?;
                let consumer = r.name()?;
                let n = r.u32()? as usize;
                let mut items = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    items.push((r.id()?, r.u64()?, r.u64()?));
                }
                Change::Claim {
                    group,
                    consumer,
                    items,
                }
            }
            80 => Change::Ack {
                group: r.name()?,
                ids: r.ids()?,
            },
            _ => return None,
        };
        r.0.is_empty().then_some(c)
    }

    /// Applies the change to the stream of `e`.
    pub fn apply(&self, e: &mut Entry) {
        let s = of_mut(e);
        match self {
            Change::Add {
                last_id,
                entries_added,
                entries,
            } => {
                for (id, fields) in entries {
                    s.push(*id, fields.iter().map(Vec::as_slice));
                }
                s.last_id = *last_id;
                s.entries_added = *entries_added;
            }
            Change::Del { max_deleted, ids } => {
                for id in ids {
                    s.remove(*id);
                }
                s.max_deleted = *max_deleted;
            }
            Change::Trim { below } => {
                s.remove_below(*below);
            }
            Change::SetId {
                last_id,
                entries_added,
                max_deleted,
            } => {
                s.last_id = *last_id;
                s.entries_added = *entries_added;
                s.max_deleted = *max_deleted;
            }
            Change::Group {
                name,
                last_id,
                entries_read,
            } => s.set_group(name, *last_id, *entries_read),
            Change::GroupDel { name } => {
                s.remove_group(name);
            }
            Change::Consumer { group, name, seen } => {
                s.touch_consumer(group, name, *seen);
            }
            Change::ConsumerDel { group, name } => {
                s.remove_consumer(group, name);
            }
            Change::Claim {
                group,
                consumer,
                items,
            } => {
                for &(id, t, c) in items {
                    s.claim(group, consumer, id, t, c);
                }
            }
            Change::Ack { group, ids } => {
                for id in ids {
                    s.ack(group, *id);
                }
            }
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn id(&mut self) -> Option<Id> {
        Some(Id {
            ms: self.u64()?,
            seq: self.u64()?,
        })
    }
    fn name(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        Some(self.take(n)?.to_vec())
    }
    fn ids(&mut self) -> Option<Vec<Id>> {
        let n = self.u32()? as usize;
        let mut v = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            v.push(self.id()?);
        }
        Some(v)
    }
    fn opt(&mut self) -> Option<Option<u64>> {
        match self.take(1)?[0] {
            0 => Some(None),
            1 => Some(Some(self.u64()?)),
            _ => None,
        }
    }
    fn entries(&mut self) -> Option<Vec<(Id, Vec<Vec<u8>>)>> {
        let n = self.u32()? as usize;
        let mut v = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let id = self.id()?;
            let k = self.u32()? as usize;
            let mut fields = Vec::with_capacity(k.min(1 << 16));
            for _ in 0..k {
                let (f, used) = packed::read(self.0)?;
                fields.push(f.to_vec());
                self.0 = &self.0[used..];
            }
            v.push((id, fields));
        }
        Some(v)
    }
}

/// A whole state's parts (kind 70).
pub struct Full {
    /// The key's expiry.
    pub expire_at_ms: Option<u64>,
    /// See [`Stream::last_id`].
    pub last_id: Id,
    /// See [`Stream::max_deleted`].
    pub max_deleted: Id,
    /// See [`Stream::entries_added`].
    pub entries_added: u64,
    /// The first entries.
    pub entries: Vec<(Id, Vec<Vec<u8>>)>,
}

impl Full {
    /// The record body.
    pub fn body(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self.expire_at_ms {
            None => out.push(0),
            Some(ms) => {
                out.push(1);
                out.extend_from_slice(&ms.to_le_bytes());
            }
        }
        self.last_id.put(&mut out);
        self.max_deleted.put(&mut out);
        out.extend_from_slice(&self.entries_added.to_le_bytes());
        put_entries(&mut out, &self.entries);
        out
    }

    /// Reads a body of kind 70.
    pub fn decode(body: &[u8]) -> Option<Full> {
        let mut r = Reader(body);
        let f = Full {
            expire_at_ms: r.opt()?,
            last_id: r.id()?,
            max_deleted: r.id()?,
            entries_added: r.u64()?,
            entries: r.entries()?,
        };
        r.0.is_empty().then_some(f)
    }

    /// The entry it makes for `key`.
    pub fn entry(&self, key: &[u8], stamp: u64) -> Entry {
        let mut s = Stream {
            last_id: self.last_id,
            max_deleted: self.max_deleted,
            entries_added: self.entries_added,
            ..Stream::default()
        };
        for (id, fields) in &self.entries {
            s.push(*id, fields.iter().map(Vec::as_slice));
        }
        let expire = self.expire_at_ms.and_then(NonZeroU64::new);
        new_entry(key, s, expire, stamp)
    }
}

/// Whether `body` is a valid body of a stream record of `kind`.
pub fn valid_body(kind: u8, body: &[u8]) -> bool {
    if kind == 70 {
        Full::decode(body).is_some()
    } else {
        Change::decode(kind, body).is_some()
    }
}

/// Calls `f` with (kind, body) of records that make `e`'s stream as it is: `XStream`
/// with its first entries, `XAdd` of the rest (each of at most
/// [`crate::log::ITEMS_PER_RECORD`] bytes unless one entry is larger), then each
/// group, its consumers and their pending entries.
pub fn state_records(e: &Entry, f: impl FnMut(u8, &[u8])) {
    state_piece(e, 0, usize::MAX, f);
}

/// A piece of a big stream's state, as [`state_records`] makes it: `most` entries
/// from the one of ID position `from` (the ID as `ms << 64 | seq`; 0: the first
/// piece, which creates the key with `XStream`, the later ones add with `XAdd`), and
/// after the last entries every group, consumer and pending entry; the position of
/// the next piece, or `None` after the last (a compaction: `crate::compact`).
pub fn state_piece(
    e: &Entry,
    from: u128,
    most: usize,
    mut f: impl FnMut(u8, &[u8]),
) -> Option<u128> {
    let s = of(e);
    let start = Id {
        ms: (from >> 64) as u64,
        seq: from as u64,
    };
    let mut chunk: Vec<(Id, &Item)> = Vec::new();
    let mut bytes = 0usize;
    let mut first = from == 0;
    let mut emit = |chunk: &mut Vec<(Id, &Item)>, first: &mut bool| {
        let entries = s.owned(chunk);
        chunk.clear();
        if std::mem::take(first) {
            let full = Full {
                expire_at_ms: e.expire_at_ms(),
                last_id: s.last_id,
                max_deleted: s.max_deleted,
                entries_added: s.entries_added,
                entries,
            };
            f(70, &full.body());
        } else {
            let c = Change::Add {
                last_id: s.last_id,
                entries_added: s.entries_added,
                entries,
            };
            f(71, &c.body());
        }
    };
    let mut next = None;
    for (n, (id, it)) in s.entries.range(start..).enumerate() {
        if n == most.max(1) {
            next = Some((id.ms as u128) << 64 | id.seq as u128);
            break;
        }
        if !chunk.is_empty() && bytes + it.fields.len() > crate::log::ITEMS_PER_RECORD {
            emit(&mut chunk, &mut first);
            bytes = 0;
        }
        bytes += it.fields.len() + 24;
        chunk.push((*id, it));
    }
    if first || !chunk.is_empty() {
        emit(&mut chunk, &mut first);
    }
    if next.is_some() {
        return next;
    }
    for (name, g) in &s.groups {
        let c = Change::Group {
            name: name.clone(),
            last_id: g.last_id,
            entries_read: g.entries_read,
        };
        f(c.kind(), &c.body());
        for (cname, cons) in &g.consumers {
            let c = Change::Consumer {
                group: name.clone(),
                name: cname.clone(),
                seen: cons.seen_time,
            };
            f(c.kind(), &c.body());
            let ids: Vec<Id> = cons.pel.iter().copied().collect();
            for part in ids.chunks(1 << 15) {
                let items = part
                    .iter()
                    .map(|id| {
                        let p = &g.pel[id];
                        (*id, p.delivery_time, p.delivery_count)
                    })
                    .collect();
                let c = Change::Claim {
                    group: name.clone(),
                    consumer: cname.clone(),
                    items,
                };
                f(c.kind(), &c.body());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_and_step() {
        assert_eq!(Id::parse(b"5-3", 0), Some(Id { ms: 5, seq: 3 }));
        assert_eq!(Id::parse(b"5", 7), Some(Id { ms: 5, seq: 7 }));
        assert_eq!(Id::parse(b"5-", 0), None);
        assert_eq!(Id::parse(b"-5", 0), None);
        assert_eq!(Id::parse(b"18446744073709551616", 0), None);
        // As C's strtoull takes them: a plus sign, leading spaces; not a bare minus.
        assert_eq!(Id::parse(b"+5- 2", 0), Some(Id { ms: 5, seq: 2 }));
        assert_eq!(Id::parse(b"-1", 0), None);
        assert_eq!(Id::parse(b"", 0), None);
        assert_eq!(
            Id {
                ms: 1,
                seq: u64::MAX
            }
            .next(),
            Some(Id { ms: 2, seq: 0 })
        );
        assert_eq!(Id::MAX.next(), None);
        assert_eq!(
            Id { ms: 2, seq: 0 }.prev(),
            Some(Id {
                ms: 1,
                seq: u64::MAX
            })
        );
    }

    #[test]
    fn changes_round_trip() {
        let cs = [
            Change::Add {
                last_id: Id { ms: 9, seq: 1 },
                entries_added: 4,
                entries: vec![(Id { ms: 9, seq: 1 }, vec![b"a".to_vec(), b"1".to_vec()])],
            },
            Change::Del {
                max_deleted: Id { ms: 3, seq: 0 },
                ids: vec![Id { ms: 3, seq: 0 }],
            },
            Change::Trim {
                below: Id { ms: 2, seq: 2 },
            },
            Change::Group {
                name: b"g".to_vec(),
                last_id: Id::MIN,
                entries_read: -1,
            },
            Change::Claim {
                group: b"g".to_vec(),
                consumer: b"c".to_vec(),
                items: vec![(Id { ms: 1, seq: 1 }, 5, 2)],
            },
            Change::Ack {
                group: b"g".to_vec(),
                ids: vec![Id { ms: 1, seq: 1 }],
            },
        ];
        for c in cs {
            assert_eq!(Change::decode(c.kind(), &c.body()), Some(c.clone()));
        }
    }

    #[test]
    fn approximate_trims_remove_whole_nodes() {
        let mut s = Stream::default();
        for i in 1..=250u64 {
            s.push(Id { ms: i, seq: 0 }, [&b"f"[..], b"v"]);
        }
        assert_eq!(s.nodes(), 3);
        // MAXLEN ~ 150: the first node (100 entries) goes, leaving 150.
        assert_eq!(
            s.trim_point(Some(150), None, true, 0),
            Some(Id { ms: 100, seq: 1 })
        );
        // MAXLEN ~ 240: no whole node can go.
        assert_eq!(s.trim_point(Some(240), None, true, 0), None);
        // MAXLEN = 240: ten entries.
        assert_eq!(
            s.trim_point(Some(240), None, false, 0),
            Some(Id { ms: 10, seq: 1 })
        );
        // MINID = 5: four entries.
        assert_eq!(
            s.trim_point(None, Some(Id { ms: 5, seq: 0 }), false, 0),
            Some(Id { ms: 4, seq: 1 })
        );
        // A limit below a node's entries stops approximate trimming.
        assert_eq!(s.trim_point(Some(0), None, true, 50), None);
    }
}
