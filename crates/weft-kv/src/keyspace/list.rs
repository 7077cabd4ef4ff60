//! Lists: a small list packed in its entry, a big one in a boxed [`QuickList`] of
//! packed nodes, and the operations the list commands, replay and compaction use on
//! either.
//!
//! **Packed** (tag `LIST_PACKED`, OBJECT ENCODING `listpack`): the entry's value bytes
//! are the elements from head to tail as packed elements (`crate::packed`). A list
//! stays packed while it fits in one node (the threshold below); past it, it becomes a
//! quicklist and never goes back (invariant 3 of docs/kv-types.md).
//!
//! **Quicklist** (tag `LIST_QUICK`, `quicklist`): a double-ended queue of nodes, each a
//! run of packed elements within the threshold (an element larger than the threshold
//! sits alone in its node). Pushes and pops at either end touch one node; an index is
//! found by walking node counts from the nearer end. A node that a change takes past
//! the threshold (LSET of a longer value, LINSERT) is split in two or more. Its memory
//! count is its nodes' bytes plus [`NODE_OVERHEAD`] each.
//!
//! **Threshold** (`list-max-listpack-size`, Redis 7's name; `list-max-ziplist-size` is
//! its alias): -1 to -5 bound a node's packed bytes to 4, 8, 16, 32 or 64 KiB (the
//! default, -2: 8 KiB); a positive `n` bounds a node to `n` elements and 8 KiB.
//!
//! Positions count from 0 at the head. The functions here keep the encodings right;
//! the keyspace keeps memory, stamps and invariant 2 (no empty list) around them
//! (`Keyspace::modify`), and `commands/lists.rs` logs.

use super::entry::Entry;
use super::state;
use super::value::{self, tag};
use crate::log::{Items, RecordRef};
use crate::packed;
use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

static MAX_PACKED_SIZE: AtomicI64 = AtomicI64::new(-2);
static COMPRESS_DEPTH: AtomicI64 = AtomicI64::new(0);

/// `list-max-listpack-size` (-2 by default: 8 KiB per node).
pub fn max_packed_size() -> i64 {
    MAX_PACKED_SIZE.load(Relaxed)
}

/// Sets `list-max-listpack-size` (CONFIG SET): later writes pack and split by it.
pub fn set_max_packed_size(n: i64) {
    MAX_PACKED_SIZE.store(n, Relaxed);
}

/// `list-compress-depth`: kept for CONFIG GET; weft-kv does not compress nodes.
pub fn compress_depth() -> i64 {
    COMPRESS_DEPTH.load(Relaxed)
}

/// Sets `list-compress-depth` (accepted; it changes nothing).
pub fn set_compress_depth(n: i64) {
    COMPRESS_DEPTH.store(n, Relaxed);
}

/// The most packed bytes a node holds (whatever the element count).
fn max_node_bytes() -> usize {
    match max_packed_size() {
        n if n >= 0 => 8 << 10,
        -1 => 4 << 10,
        -2 => 8 << 10,
        -3 => 16 << 10,
        -4 => 32 << 10,
        _ => 64 << 10,
    }
}

/// Whether a node (or a packed list) of `count` elements in `bytes` packed bytes is
/// within the threshold.
fn fits(count: usize, bytes: usize) -> bool {
    let n = max_packed_size();
    bytes <= max_node_bytes() && (n <= 0 || count <= n as usize)
}

/// An upper bound of the nodes that `count` elements of `bytes` packed bytes take
/// (greedy packing: two neighbouring nodes together exceed the threshold).
pub fn nodes_bound(count: usize, bytes: usize) -> usize {
    let by_bytes = 2 * bytes / max_node_bytes() + 1;
    let by_count = match max_packed_size() {
        n if n > 0 => 2 * count / n as usize + 1,
        _ => 1,
    };
    (by_bytes.max(by_count) + 1).min(count.max(1))
}

/// Bytes a quicklist counts per node besides its elements: the node's header, its
/// buffer's allocation header and the queue's slot.
pub const NODE_OVERHEAD: u64 = 48;

/// Which end of a list: `Left` is the head (position 0), `Right` the tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The head.
    Left,
    /// The tail.
    Right,
}

impl End {
    /// `LEFT` or `RIGHT` (any case).
    pub fn parse(word: &[u8]) -> Option<End> {
        if word.eq_ignore_ascii_case(b"left") {
            Some(End::Left)
        } else if word.eq_ignore_ascii_case(b"right") {
            Some(End::Right)
        } else {
            None
        }
    }
}

/// The byte offset of element `k` in packed bytes (their length if `k` is past the
/// last).
fn offset_of(bytes: &[u8], k: usize) -> usize {
    let mut at = 0;
    for _ in 0..k {
        match packed::read(&bytes[at..]) {
            Some((_, n)) => at += n,
            None => break,
        }
    }
    at
}

/// One element's packed form (length and bytes), as two parts for a splice.
fn parts<'a>(len: &'a mut [u8; packed::MAX_LEN_BYTES], x: &'a [u8]) -> [&'a [u8]; 2] {
    let k = packed::write_len(len, x.len());
    [&len[..k], x]
}

/// A run of elements of a quicklist.
struct Node {
    bytes: Vec<u8>,
    count: usize,
}

impl Node {
    fn of(x: &[u8]) -> Node {
        let mut bytes = Vec::with_capacity(packed::element_bytes(x.len()));
        packed::put(&mut bytes, x);
        Node { bytes, count: 1 }
    }
}

/// A big list (module doc).
#[derive(Default)]
pub struct QuickList {
    nodes: VecDeque<Node>,
    len: usize,
    bytes: usize,
    /// Where each element of the back node starts in its bytes, or empty when not
    /// known: made by the first pop from the tail of a node (one scan), then kept
    /// by pushes and pops at the tail, so a run of RPOPs costs O(1) each instead of
    /// a scan of the node. Any other change of the back node empties it. At most 2
    /// bytes per element of one node (each at least 1 byte packed), and not counted
    /// in the memory: it holds no data, and a node's elements are within its bounds.
    tail: Vec<u16>,
}

impl QuickList {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it counts in the keyspace's memory.
    pub fn memory(&self) -> u64 {
        self.bytes as u64 + NODE_OVERHEAD * self.nodes.len() as u64
    }

    fn push(&mut self, end: End, x: &[u8]) {
        let add = packed::element_bytes(x.len());
        let single = self.nodes.len() == 1;
        let node = match end {
            End::Left => self.nodes.front_mut(),
            End::Right => self.nodes.back_mut(),
        };
        match node {
            Some(n) if fits(n.count + 1, n.bytes.len() + add) => {
                match end {
                    End::Left => {
                        let mut len = [0u8; packed::MAX_LEN_BYTES];
                        let [l, b] = parts(&mut len, x);
                        n.bytes.splice(0..0, l.iter().chain(b).copied());
                        if single {
                            self.tail.clear();
                        }
                    }
                    End::Right => {
                        if !self.tail.is_empty() {
                            match u16::try_from(n.bytes.len()) {
                                Ok(at) => self.tail.push(at),
                                Err(_) => self.tail.clear(),
                            }
                        }
                        packed::put(&mut n.bytes, x)
                    }
                }
                n.count += 1;
            }
            _ => match end {
                End::Left => self.nodes.push_front(Node::of(x)),
                End::Right => {
                    self.tail.clear();
                    self.nodes.push_back(Node::of(x))
                }
            },
        }
        self.len += 1;
        self.bytes += add;
    }

    /// Removes `n` elements (at most all) from `end`, handing each to `out` in the
    /// order they leave (from the tail first for `Right`).
    fn pop(&mut self, end: End, n: usize, out: &mut dyn FnMut(&[u8])) {
        let mut left = n.min(self.len);
        while left > 0 {
            let single = self.nodes.len() == 1;
            let node = match end {
                End::Left => self.nodes.front_mut(),
                End::Right => self.nodes.back_mut(),
            }
            .expect("elements left");
            let take = left.min(node.count);
            let cut = match end {
                End::Left => offset_of(&node.bytes, take),
                End::Right => {
                    let keep = node.count - take;
                    if self.tail.is_empty() {
                        Self::tail_starts(&node.bytes, &mut self.tail);
                    }
                    match self.tail.get(keep) {
                        Some(&at) if self.tail.len() == node.count => {
                            self.tail.truncate(keep);
                            at as usize
                        }
                        _ => {
                            self.tail.clear();
                            offset_of(&node.bytes, keep)
                        }
                    }
                }
            };
            match end {
                End::Left => {
                    packed::Iter::new(&node.bytes[..cut]).for_each(&mut *out);
                    node.bytes.drain(..cut);
                    self.bytes -= cut;
                    if single {
                        self.tail.clear();
                    }
                }
                End::Right => {
                    let gone: Vec<&[u8]> = packed::Iter::new(&node.bytes[cut..]).collect();
                    gone.into_iter().rev().for_each(&mut *out);
                    self.bytes -= node.bytes.len() - cut;
                    node.bytes.truncate(cut);
                }
            }
            node.count -= take;
            if node.count == 0 {
                match end {
                    End::Left => self.nodes.pop_front(),
                    End::Right => self.nodes.pop_back(),
                };
                if end == End::Right || self.nodes.is_empty() {
                    self.tail.clear();
                }
            }
            self.len -= take;
            left -= take;
        }
    }

    /// Fills `tail` (empty) with where each element of `bytes` starts; leaves it empty
    /// if an offset does not fit 16 bits (a node past the largest threshold).
    fn tail_starts(bytes: &[u8], tail: &mut Vec<u16>) {
        let mut at = 0;
        while let Some((_, n)) = packed::read(&bytes[at..]) {
            let Ok(start) = u16::try_from(at) else {
                tail.clear();
                return;
            };
            tail.push(start);
            at += n;
        }
    }

    /// The node holding position `i` (< len) and the element's place in it.
    fn locate(&self, i: usize) -> (usize, usize) {
        if i < self.len / 2 {
            let mut base = 0;
            for (ni, n) in self.nodes.iter().enumerate() {
                if i < base + n.count {
                    return (ni, i - base);
                }
                base += n.count;
            }
        } else {
            let mut end = self.len;
            for (ni, n) in self.nodes.iter().enumerate().rev() {
                if i >= end - n.count {
                    return (ni, i - (end - n.count));
                }
                end -= n.count;
            }
        }
        unreachable!("position {i} of a list of {}", self.len)
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len {
            return None;
        }
        let (ni, k) = self.locate(i);
        packed::Iter::new(&self.nodes[ni].bytes).nth(k)
    }

    /// Replaces node `ni`'s element range `range` (bytes) with `with` (`count_change`
    /// elements more or fewer), then splits the node if it no longer fits.
    fn splice(&mut self, ni: usize, range: std::ops::Range<usize>, with: &[&[u8]], more: isize) {
        self.tail.clear();
        let node = &mut self.nodes[ni];
        let before = node.bytes.len();
        node.bytes
            .splice(range, with.iter().flat_map(|p| p.iter()).copied());
        node.count = (node.count as isize + more) as usize;
        self.bytes = self.bytes + node.bytes.len() - before;
        self.len = (self.len as isize + more) as usize;
        if node.count == 0 {
            self.nodes.remove(ni);
        } else if node.count > 1 && !fits(node.count, node.bytes.len()) {
            let old = self.nodes.remove(ni).expect("the node");
            let mut split: Vec<Node> = Vec::new();
            for x in packed::Iter::new(&old.bytes) {
                let add = packed::element_bytes(x.len());
                match split.last_mut() {
                    Some(n) if fits(n.count + 1, n.bytes.len() + add) => {
                        packed::put(&mut n.bytes, x);
                        n.count += 1;
                    }
                    _ => split.push(Node::of(x)),
                }
            }
            for (j, n) in split.into_iter().enumerate() {
                self.nodes.insert(ni + j, n);
            }
        }
    }

    fn set(&mut self, i: usize, x: &[u8]) {
        let (ni, k) = self.locate(i);
        let b = &self.nodes[ni].bytes;
        let at = offset_of(b, k);
        let end = at + packed::read(&b[at..]).expect("the element").1;
        let mut len = [0u8; packed::MAX_LEN_BYTES];
        self.splice(ni, at..end, &parts(&mut len, x), 0);
    }

    fn insert(&mut self, i: usize, x: &[u8]) {
        if i >= self.len {
            return self.push(End::Right, x);
        }
        let (ni, k) = self.locate(i);
        let at = offset_of(&self.nodes[ni].bytes, k);
        let mut len = [0u8; packed::MAX_LEN_BYTES];
        self.splice(ni, at..at, &parts(&mut len, x), 1);
    }

    /// Removes the elements at `positions` (ascending, distinct, each < len).
    fn remove(&mut self, positions: &[usize]) {
        self.tail.clear();
        let mut base = 0;
        let mut at = 0;
        let mut ni = 0;
        while ni < self.nodes.len() && at < positions.len() {
            let count = self.nodes[ni].count;
            if positions[at] >= base + count {
                base += count;
                ni += 1;
                continue;
            }
            let node = &mut self.nodes[ni];
            let mut kept = Vec::with_capacity(node.bytes.len());
            let mut removed = 0;
            for (k, x) in packed::Iter::new(&node.bytes).enumerate() {
                if at < positions.len() && positions[at] == base + k {
                    at += 1;
                    removed += 1;
                } else {
                    packed::put(&mut kept, x);
                }
            }
            self.bytes = self.bytes + kept.len() - node.bytes.len();
            self.len -= removed;
            node.bytes = kept;
            node.count -= removed;
            base += count;
            if node.count == 0 {
                self.nodes.remove(ni);
            } else {
                ni += 1;
            }
        }
    }

    /// The elements from position `i` on, head to tail.
    fn iter_from(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        let (ni, k) = if i >= self.len {
            (self.nodes.len(), 0)
        } else {
            self.locate(i)
        };
        self.nodes
            .range(ni..)
            .enumerate()
            .flat_map(move |(j, n)| packed::Iter::new(&n.bytes).skip(if j == 0 { k } else { 0 }))
    }
}

/// The quicklist of a big list entry.
fn quick(e: &Entry) -> &QuickList {
    debug_assert_eq!(e.tag(), tag::LIST_QUICK);
    // SAFETY: the entry's tag says its bytes hold the pointer `Box::into_raw` gave for
    // its quicklist, which the entry owns and which lives as long as it.
    unsafe { &*(value::read_ptr(e.value()) as *const QuickList) }
}

fn quick_mut(e: &mut Entry) -> &mut QuickList {
    debug_assert_eq!(e.tag(), tag::LIST_QUICK);
    // SAFETY: as in `quick`; `&mut Entry` makes the access unique.
    unsafe { &mut *(value::read_ptr(e.value()) as *mut QuickList) }
}

/// Frees the quicklist a list entry's value bytes point to.
///
/// # Safety
/// `bytes` hold the pointer `Box::into_raw` gave for a quicklist, and nothing uses it
/// afterwards.
pub(super) unsafe fn drop_quick(bytes: &[u8]) {
    // SAFETY: per the contract, the pointer came from `Box::into_raw` and is dropped
    // once.
    drop(unsafe { Box::from_raw(value::read_ptr(bytes) as *mut QuickList) })
}

/// The memory a quicklist counts, from its entry's value bytes.
///
/// # Safety
/// `bytes` are the value of a live entry of tag [`tag::LIST_QUICK`].
pub(super) unsafe fn quick_memory(bytes: &[u8]) -> u64 {
    // SAFETY: per the contract, the bytes hold the live quicklist's pointer.
    unsafe { &*(value::read_ptr(bytes) as *const QuickList) }.memory()
}

/// Makes a packed list entry a quicklist (it passed the threshold).
fn convert(e: &mut Entry) {
    let mut q = QuickList::default();
    for x in packed::Iter::new(e.value()) {
        q.push(End::Right, x);
    }
    let p = Box::into_raw(Box::new(q)) as *mut u8;
    e.set_payload(tag::LIST_QUICK, &value::ptr_bytes(p));
}

/// Converts a packed list that no longer fits its threshold.
fn check_packed(e: &mut Entry) {
    if e.tag() == tag::LIST_PACKED {
        let v = e.value();
        if !fits(packed::Iter::new(v).count(), v.len()) {
            convert(e);
        }
    }
}

/// The number of elements of a list entry.
pub fn len(e: &Entry) -> usize {
    match e.tag() {
        tag::LIST_PACKED => packed::Iter::new(e.value()).count(),
        _ => quick(e).len(),
    }
}

/// Whether a list entry has no element left.
pub fn is_empty(e: &Entry) -> bool {
    match e.tag() {
        tag::LIST_PACKED => e.value().is_empty(),
        _ => quick(e).is_empty(),
    }
}

/// The element at position `i`, if the list has it.
pub fn get(e: &Entry, i: usize) -> Option<&[u8]> {
    match e.tag() {
        tag::LIST_PACKED => packed::Iter::new(e.value()).nth(i),
        _ => quick(e).get(i),
    }
}

/// The elements from position `i` on, head to tail.
pub fn iter_from(e: &Entry, i: usize) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    match e.tag() {
        tag::LIST_PACKED => Box::new(packed::Iter::new(e.value()).skip(i)),
        _ => Box::new(quick(e).iter_from(i)),
    }
}

/// The elements from the tail to the head.
pub fn iter_rev(e: &Entry) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    match e.tag() {
        tag::LIST_PACKED => {
            let v: Vec<&[u8]> = packed::Iter::new(e.value()).collect();
            Box::new(v.into_iter().rev())
        }
        _ => Box::new(quick(e).nodes.iter().rev().flat_map(|n| {
            let v: Vec<&[u8]> = packed::Iter::new(&n.bytes).collect();
            v.into_iter().rev()
        })),
    }
}

/// Pushes `elems` one after another at `end` (LPUSH a b c leaves c at the head),
/// converting a packed list that passes the threshold.
pub fn push<'a>(e: &mut Entry, end: End, elems: impl IntoIterator<Item = &'a [u8]>) {
    // A packed list's element count, while it stays packed.
    let mut packed_count =
        (e.tag() == tag::LIST_PACKED).then(|| packed::Iter::new(e.value()).count());
    for x in elems {
        if let Some(n) = packed_count {
            let v = e.value();
            if fits(n + 1, v.len() + packed::element_bytes(x.len())) {
                let at = match end {
                    End::Left => 0,
                    End::Right => v.len(),
                };
                let mut len = [0u8; packed::MAX_LEN_BYTES];
                e.splice_parts(at..at, &parts(&mut len, x));
                packed_count = Some(n + 1);
                continue;
            }
            convert(e);
            packed_count = None;
        }
        quick_mut(e).push(end, x);
    }
}

/// Removes up to `n` elements from `end`, handing each to `out` in the order they
/// leave (from the tail first for `Right`). The caller removes a list left empty.
pub fn pop(e: &mut Entry, end: End, n: usize, out: &mut dyn FnMut(&[u8])) {
    if e.tag() != tag::LIST_PACKED {
        return quick_mut(e).pop(end, n, out);
    }
    let v = e.value();
    let count = packed::Iter::new(v).count();
    let take = n.min(count);
    let range = match end {
        End::Left => 0..offset_of(v, take),
        End::Right => offset_of(v, count - take)..v.len(),
    };
    match end {
        End::Left => packed::Iter::new(&v[range.clone()]).for_each(&mut *out),
        End::Right => {
            let gone: Vec<&[u8]> = packed::Iter::new(&v[range.clone()]).collect();
            gone.into_iter().rev().for_each(&mut *out);
        }
    }
    e.splice(range, b"");
}

/// Replaces the element at position `i` (< len) with `x`.
pub fn set(e: &mut Entry, i: usize, x: &[u8]) {
    if e.tag() != tag::LIST_PACKED {
        return quick_mut(e).set(i, x);
    }
    let v = e.value();
    let at = offset_of(v, i);
    let end = at + packed::read(&v[at..]).expect("the element").1;
    let mut len = [0u8; packed::MAX_LEN_BYTES];
    e.splice_parts(at..end, &parts(&mut len, x));
    check_packed(e);
}

/// Inserts `x` so that it is at position `i` (at most len: `len` appends it).
pub fn insert(e: &mut Entry, i: usize, x: &[u8]) {
    if e.tag() != tag::LIST_PACKED {
        return quick_mut(e).insert(i, x);
    }
    let at = offset_of(e.value(), i);
    let mut len = [0u8; packed::MAX_LEN_BYTES];
    e.splice_parts(at..at, &parts(&mut len, x));
    check_packed(e);
}

/// Removes the elements at `positions` (ascending, distinct, each below len). The
/// caller removes a list left empty.
pub fn remove(e: &mut Entry, positions: &[usize]) {
    if e.tag() != tag::LIST_PACKED {
        return quick_mut(e).remove(positions);
    }
    let mut kept = Vec::with_capacity(e.value().len());
    let mut at = 0;
    for (k, x) in packed::Iter::new(e.value()).enumerate() {
        if at < positions.len() && positions[at] == k {
            at += 1;
        } else {
            packed::put(&mut kept, x);
        }
    }
    e.set_payload(tag::LIST_PACKED, &kept);
}

/// A new list entry for `key` holding `items` from head to tail, packed if they fit
/// the threshold. `items` must not be empty.
pub fn new_entry(key: &[u8], items: Items<'_>, expire: Option<NonZeroU64>, stamp: u64) -> Entry {
    debug_assert!(!items.is_empty());
    if fits(items.len(), items.packed_len()) {
        if let Items::Packed { bytes, .. } = items {
            return Entry::with_tag(tag::LIST_PACKED, key, bytes, expire, stamp);
        }
        let mut bytes = Vec::with_capacity(items.packed_len());
        for x in items.iter() {
            packed::put(&mut bytes, x);
        }
        return Entry::with_tag(tag::LIST_PACKED, key, &bytes, expire, stamp);
    }
    let mut q = QuickList::default();
    for x in items.iter() {
        q.push(End::Right, x);
    }
    let p = Box::into_raw(Box::new(q)) as *mut u8;
    Entry::with_tag(tag::LIST_QUICK, key, &value::ptr_bytes(p), expire, stamp)
}

/// Logs a list entry's whole state through `f`: one `List` record (for a quicklist, of
/// its first nodes), then `RPush` records of the rest, each of at most
/// [`crate::log::ITEMS_PER_RECORD`] bytes of elements unless one node alone is larger
/// (compaction, and a list's creation).
pub fn state_records(e: &Entry, f: impl FnMut(RecordRef<'_>)) {
    state::records(e, &KINDS, f, |runs| {
        for node in &quick(e).nodes {
            runs.push_packed(node.count, &node.bytes);
        }
    });
}

/// The records a list's state is logged as ([`state::Kinds`]).
const KINDS: state::Kinds = state::Kinds {
    packed: tag::LIST_PACKED,
    create: |key, expire_at_ms, items| RecordRef::List {
        key,
        expire_at_ms,
        items,
    },
    add: |key, items| RecordRef::RPush { key, items },
};

/// A piece of a big list's state ([`state::piece`]): whole nodes from node `from`
/// (0: the first piece, which creates the key) until at least `most` elements; the
/// node of the next piece, or `None` after the last.
pub fn state_piece(e: &Entry, from: u64, most: usize, f: impl FnMut(RecordRef<'_>)) -> Option<u64> {
    let nodes = &quick(e).nodes;
    state::piece(e, &KINDS, from == 0, f, |runs| {
        let (mut at, mut n) = (from as usize, 0);
        while at < nodes.len() && n < most.max(1) {
            runs.push_packed(nodes[at].count, &nodes[at].bytes);
            n += nodes[at].count;
            at += 1;
        }
        (at < nodes.len()).then_some(at as u64)
    })
}

/// A change record of a list, owned for replay.
pub enum Change {
    /// Elements (packed) pushed one after another at an end.
    Push(End, Box<[u8]>),
    /// `n` elements popped from an end.
    Pop(End, u64),
    /// The element at a position replaced.
    Set(u64, Box<[u8]>),
    /// An element inserted to be at a position.
    Insert(u64, Box<[u8]>),
    /// The elements at these positions (of the list before the record) removed.
    Remove(Vec<usize>),
}

impl Change {
    /// The change a list change record makes (`None` for other records).
    pub fn of(rec: &RecordRef<'_>) -> Option<Change> {
        let packed = |items: &Items<'_>| -> Box<[u8]> {
            match *items {
                Items::Packed { bytes, .. } => bytes.into(),
                _ => {
                    let mut out = Vec::with_capacity(items.packed_len());
                    items.iter().for_each(|x| packed::put(&mut out, x));
                    out.into()
                }
            }
        };
        Some(match rec {
            RecordRef::LPush { items, .. } => Change::Push(End::Left, packed(items)),
            RecordRef::RPush { items, .. } => Change::Push(End::Right, packed(items)),
            RecordRef::LPop { count, .. } => Change::Pop(End::Left, *count),
            RecordRef::RPop { count, .. } => Change::Pop(End::Right, *count),
            RecordRef::LSet { index, value, .. } => Change::Set(*index, (*value).into()),
            RecordRef::LInsert { index, value, .. } => Change::Insert(*index, (*value).into()),
            RecordRef::LRem { positions, .. } => Change::Remove(
                positions
                    .iter()
                    .map(|p| u64::from_le_bytes(p.try_into().expect("8-byte positions")) as usize)
                    .collect(),
            ),
            _ => return None,
        })
    }

    /// Applies the change to a list entry (exactly as the command that logged it
    /// changed the list; positions past the end are ignored).
    pub fn apply(&self, e: &mut Entry) {
        match self {
            Change::Push(end, items) => push(e, *end, packed::Iter::new(items)),
            Change::Pop(end, n) => pop(e, *end, *n as usize, &mut |_| {}),
            Change::Set(i, x) => {
                if (*i as usize) < len(e) {
                    set(e, *i as usize, x)
                }
            }
            Change::Insert(i, x) => {
                if (*i as usize) <= len(e) {
                    insert(e, *i as usize, x)
                }
            }
            Change::Remove(positions) => {
                let n = len(e);
                let mut p: Vec<usize> = positions.iter().copied().filter(|&p| p < n).collect();
                p.sort_unstable();
                p.dedup();
                remove(e, &p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(e: &Entry) -> Vec<Vec<u8>> {
        iter_from(e, 0).map(<[u8]>::to_vec).collect()
    }

    /// Random pushes, pops, sets, inserts and removals agree with a VecDeque, packed
    /// and as a quicklist, across the conversion; reverse and offset iteration agree;
    /// the memory count is the nodes' bytes plus their overhead.
    #[test]
    fn behaves_like_a_deque_in_both_encodings() {
        let mut x: u64 = 7;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..4 {
            let mut e = new_entry(b"l", Items::Slices(&[b"first"]), None, 1);
            let mut model: VecDeque<Vec<u8>> = VecDeque::from([b"first".to_vec()]);
            let steps = if round < 2 { 300 } else { 4000 };
            for _ in 0..steps {
                let v =
                    vec![b'a' + rnd(26) as u8; if rnd(50) == 0 { 3000 } else { rnd(20) as usize }];
                let end = if rnd(2) == 0 { End::Left } else { End::Right };
                match rnd(8) {
                    0..=2 => {
                        push(&mut e, end, [v.as_slice()]);
                        match end {
                            End::Left => model.push_front(v),
                            End::Right => model.push_back(v),
                        }
                    }
                    3 => {
                        let n = rnd(4) as usize;
                        let mut got = Vec::new();
                        pop(&mut e, end, n, &mut |x| got.push(x.to_vec()));
                        let mut want = Vec::new();
                        for _ in 0..n.min(model.len()) {
                            want.push(match end {
                                End::Left => model.pop_front().unwrap(),
                                End::Right => model.pop_back().unwrap(),
                            });
                        }
                        assert_eq!(got, want);
                    }
                    4 if !model.is_empty() => {
                        let i = rnd(model.len() as u64) as usize;
                        set(&mut e, i, &v);
                        model[i] = v;
                    }
                    5 => {
                        let i = rnd(model.len() as u64 + 1) as usize;
                        insert(&mut e, i, &v);
                        model.insert(i, v);
                    }
                    6 if !model.is_empty() => {
                        let mut p: Vec<usize> = (0..rnd(4))
                            .map(|_| rnd(model.len() as u64) as usize)
                            .collect();
                        p.sort_unstable();
                        p.dedup();
                        remove(&mut e, &p);
                        for &i in p.iter().rev() {
                            model.remove(i);
                        }
                    }
                    _ => {}
                }
                if model.is_empty() {
                    assert!(is_empty(&e));
                    push(&mut e, End::Right, [&b"again"[..]]);
                    model.push_back(b"again".to_vec());
                }
                assert_eq!(len(&e), model.len());
            }
            assert_eq!(all(&e), model.iter().cloned().collect::<Vec<_>>());
            let rev: Vec<Vec<u8>> = iter_rev(&e).map(<[u8]>::to_vec).collect();
            assert_eq!(rev, model.iter().rev().cloned().collect::<Vec<_>>());
            for i in [
                0,
                1,
                model.len() / 2,
                model.len().saturating_sub(1),
                model.len(),
            ] {
                assert_eq!(get(&e, i), model.get(i).map(Vec::as_slice));
                let from: Vec<&[u8]> = iter_from(&e, i).collect();
                assert_eq!(from.len(), model.len().saturating_sub(i));
            }
            if e.tag() == tag::LIST_QUICK {
                let q = quick(&e);
                let bytes: usize = q.nodes.iter().map(|n| n.bytes.len()).sum();
                assert_eq!(q.bytes, bytes);
                assert!(q
                    .nodes
                    .iter()
                    .all(|n| n.count == 1 || fits(n.count, n.bytes.len())));
                assert_eq!(
                    e.value_memory(),
                    bytes as u64 + NODE_OVERHEAD * q.nodes.len() as u64
                );
            } else {
                assert!(fits(model.len(), e.value().len()));
            }
            if round >= 2 {
                assert_eq!(e.tag(), tag::LIST_QUICK);
            }
        }
    }

    /// Runs of pops from the tail (which keep where the last node's elements start)
    /// mixed with every other change near the tail agree with a VecDeque, elements
    /// larger than a node included.
    #[test]
    fn tail_pops_agree_after_any_change() {
        let mut x: u64 = 99;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let items: Vec<Vec<u8>> = (0..5000).map(|i| format!("e{i}").into_bytes()).collect();
        let mut e = new_entry(b"l", Items::Owned(&items), None, 1);
        let mut model: VecDeque<Vec<u8>> = items.into_iter().collect();
        for _ in 0..20_000 {
            let size = if rnd(200) == 0 { 9000 } else { rnd(12) };
            let v = vec![b'a' + rnd(26) as u8; size as usize];
            let near_tail = |r: u64, len: usize| len - 1 - (r as usize % len.min(5));
            match rnd(12) {
                0..=5 => {
                    let n = rnd(3) as usize + 1;
                    let mut got = Vec::new();
                    pop(&mut e, End::Right, n, &mut |x| got.push(x.to_vec()));
                    let want: Vec<Vec<u8>> = (0..n.min(model.len()))
                        .map(|_| model.pop_back().unwrap())
                        .collect();
                    assert_eq!(got, want);
                }
                6 => {
                    push(&mut e, End::Right, [v.as_slice()]);
                    model.push_back(v);
                }
                7 => {
                    push(&mut e, End::Left, [v.as_slice()]);
                    model.push_front(v);
                }
                8 => {
                    let mut got = Vec::new();
                    pop(&mut e, End::Left, 1, &mut |x| got.push(x.to_vec()));
                    assert_eq!(got, model.pop_front().into_iter().collect::<Vec<_>>());
                }
                9 if !model.is_empty() => {
                    let i = near_tail(rnd(100), model.len());
                    set(&mut e, i, &v);
                    model[i] = v;
                }
                10 if !model.is_empty() => {
                    let i = near_tail(rnd(100), model.len());
                    insert(&mut e, i, &v);
                    model.insert(i, v);
                }
                11 if !model.is_empty() => {
                    let i = near_tail(rnd(100), model.len());
                    remove(&mut e, &[i]);
                    model.remove(i);
                }
                _ => {}
            }
            if model.is_empty() {
                let more: Vec<Vec<u8>> = (0..rnd(3000) + 1)
                    .map(|i| format!("r{i}").into_bytes())
                    .collect();
                push(&mut e, End::Right, more.iter().map(Vec::as_slice));
                model.extend(more);
            }
            assert_eq!(len(&e), model.len());
            assert_eq!(get(&e, model.len() - 1), model.back().map(Vec::as_slice));
        }
        assert_eq!(all(&e), model.iter().cloned().collect::<Vec<_>>());
    }

    /// A list's state records rebuild it: a packed one as one record copied whole, a
    /// big one as a List and RPush records of bounded size.
    #[test]
    fn state_records_rebuild_the_list() {
        for n in [3usize, 20_000] {
            let items: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("element{i}").repeat(10).into_bytes())
                .collect();
            let e = new_entry(b"k", Items::Owned(&items), NonZeroU64::new(77), 1);
            assert_eq!(e.tag() == tag::LIST_PACKED, n == 3);
            let recs = state::encoded(&e);
            assert_eq!(recs.len() > 1, n > 3);
            let mut back: Option<Entry> = None;
            for r in &recs {
                let (rec, _) = crate::log::decode_ref(r).unwrap();
                match rec {
                    RecordRef::List {
                        key,
                        expire_at_ms,
                        items,
                    } => {
                        assert_eq!((key, expire_at_ms), (&b"k"[..], Some(77)));
                        back = Some(new_entry(key, items, NonZeroU64::new(77), 0));
                    }
                    RecordRef::RPush { items, .. } => {
                        assert!(items.packed_len() <= crate::log::ITEMS_PER_RECORD);
                        push(back.as_mut().unwrap(), End::Right, items.iter());
                    }
                    r => panic!("{r:?}"),
                }
            }
            assert_eq!(all(&back.unwrap()), items);
        }
    }
}
