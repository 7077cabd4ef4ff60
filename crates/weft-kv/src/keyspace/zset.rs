//! Sorted sets: a small one packed in its entry, a big one in a boxed [`ZTree`], and
//! the operations the sorted-set commands, replay and compaction use on either.
//!
//! Elements are ordered by (score, member): scores as doubles (never NaN; -0 and 0
//! compare equal, as in Redis), members of equal score by their bytes.
//!
//! **Packed** (tag `ZSET_PACKED`, OBJECT ENCODING `listpack`): the entry's value bytes
//! are member, score, member, score, ... as packed elements (`crate::packed`) in
//! (score, member) order, each score as 8 bytes (the double's bits, little-endian), so
//! a packed value is also the items of a `ZSet` record, copied whole either way. A
//! write decodes the at most 128 pairs, changes them and writes them back. A sorted
//! set stays packed while it has at most [`max_packed_entries`] members and every
//! member is at most [`max_packed_value`] bytes; past either it becomes a tree, never
//! to go back while the server runs. SORT makes a packed one a tree too, as Redis's
//! does ([`make_tree_now`]); the end of a replay packs a tree that fits the thresholds
//! again ([`pack_if_fits`]), as Redis 7.0 loads one.
//!
//! **Tree** (tag `ZSET_SKIP`, `skiplist`): a treap (a binary search tree kept balanced
//! by random priorities) over (score, member), each node counting the nodes below it,
//! so that a rank, the element of a rank and the number of elements before a score or
//! a member are found in O(log n); plus an index from a 63-bit keyed hash of the member
//! (SipHash with a per-process key, as the keyspace's own) to its node, ordered by
//! hash so that ZSCAN's cursor is a hash with the keyspace's guarantee (an element
//! present for the whole scan is returned). Nodes live in one vector, freed slots
//! reused. Its memory count is its members' bytes plus [`ELEMENT_OVERHEAD`] each.
//!
//! The functions here keep invariant 3 of docs/kv-types.md (encodings follow the
//! thresholds one way); the keyspace keeps memory, stamps and invariant 2 (no empty
//! sorted set) around them (`Keyspace::modify`).

use super::entry::Entry;
use super::state;
use super::value::{self, tag};
use crate::log::Items;
use crate::packed;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static MAX_PACKED_ENTRIES: AtomicUsize = AtomicUsize::new(128);
static MAX_PACKED_VALUE: AtomicUsize = AtomicUsize::new(64);

/// The most members a packed sorted set has (`zset-max-listpack-entries`, 128).
#[inline]
pub fn max_packed_entries() -> usize {
    MAX_PACKED_ENTRIES.load(Relaxed)
}

/// The longest member a packed sorted set has (`zset-max-listpack-value`, 64).
#[inline]
pub fn max_packed_value() -> usize {
    MAX_PACKED_VALUE.load(Relaxed)
}

/// Sets the thresholds (CONFIG SET): later writes convert by them.
pub fn set_thresholds(entries: Option<usize>, value: Option<usize>) {
    if let Some(n) = entries {
        MAX_PACKED_ENTRIES.store(n, Relaxed);
    }
    if let Some(n) = value {
        MAX_PACKED_VALUE.store(n, Relaxed);
    }
}

/// Bytes a tree counts per member besides the member's bytes: its node, its index
/// entry, the member's allocation header and rounding.
pub const ELEMENT_OVERHEAD: u64 = 80;

/// A score as it is packed and logged: the double's bits, little-endian.
#[inline]
pub fn score_bytes(score: f64) -> [u8; 8] {
    score.to_bits().to_le_bytes()
}

/// The score of packed score bytes (8 of them: [`valid_items`] checks a record's).
#[inline]
pub fn read_score(b: &[u8]) -> f64 {
    f64::from_bits(u64::from_le_bytes(b.try_into().expect("an 8-byte score")))
}

/// Whether `items` are whole (member, score) pairs with valid scores (8 bytes, not
/// NaN): what a record must hold to be replayed.
pub fn valid_items(items: &Items<'_>) -> bool {
    let mut n = 0;
    for (i, e) in items.iter().enumerate() {
        if i % 2 == 1 && (e.len() != 8 || read_score(e).is_nan()) {
            return false;
        }
        n += 1;
    }
    n % 2 == 0
}

/// The order of elements: by score, then by member.
#[inline]
pub fn cmp(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    match a.0.partial_cmp(&b.0) {
        Some(Ordering::Equal) | None => a.1.cmp(b.1),
        Some(o) => o,
    }
}

const NIL: u32 = u32::MAX;

struct Node {
    score: f64,
    member: Box<[u8]>,
    left: u32,
    right: u32,
    /// The nodes of this subtree, itself included.
    size: u32,
    prio: u32,
}

/// Where the node of a member hash is (members of equal hash, rare, share a slot).
enum Slot {
    One(u32),
    Many(Vec<u32>),
}

impl Slot {
    fn nodes(&self) -> &[u32] {
        match self {
            Slot::One(n) => std::slice::from_ref(n),
            Slot::Many(v) => v,
        }
    }
}

/// A big sorted set (module doc).
pub struct ZTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    index: BTreeMap<u64, Slot>,
    len: usize,
    memory: u64,
    seed: u32,
}

impl Default for ZTree {
    fn default() -> Self {
        ZTree {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            index: BTreeMap::new(),
            len: 0,
            memory: 0,
            seed: priority_seed(),
        }
    }
}

/// A tree's first priority: unpredictable (a keyed hash of a counter, the key random
/// per process), so that no client can choose scores that line up with the priorities
/// and make a tree deep.
fn priority_seed() -> u32 {
    static TREES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = TREES.fetch_add(1, Relaxed);
    (super::hash::field_hash(&n.to_le_bytes()) as u32) | 1
}

impl ZTree {
    /// The number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it counts in the keyspace's memory.
    pub fn memory(&self) -> u64 {
        self.memory
    }

    #[inline]
    fn n(&self, t: u32) -> &Node {
        &self.nodes[t as usize]
    }

    #[inline]
    fn size(&self, t: u32) -> usize {
        if t == NIL {
            0
        } else {
            self.n(t).size as usize
        }
    }

    fn pull(&mut self, t: u32) {
        let (l, r) = (self.n(t).left, self.n(t).right);
        let s = 1 + self.size(l) + self.size(r);
        self.nodes[t as usize].size = s as u32;
    }

    /// Makes `child` the left (`left`) or right child of `parent`, or the root if
    /// `parent` is `NIL`.
    fn link(&mut self, parent: u32, left: bool, child: u32) {
        if parent == NIL {
            self.root = child;
        } else if left {
            self.nodes[parent as usize].left = child;
        } else {
            self.nodes[parent as usize].right = child;
        }
    }

    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.n(a).prio > self.n(b).prio {
            let m = self.merge(self.n(a).right, b);
            self.nodes[a as usize].right = m;
            self.pull(a);
            a
        } else {
            let m = self.merge(a, self.n(b).left);
            self.nodes[b as usize].left = m;
            self.pull(b);
            b
        }
    }

    /// Splits subtree `t` into the nodes for which `before` holds (a prefix of the
    /// order) and the rest.
    fn split(&mut self, t: u32, before: &dyn Fn(f64, &[u8]) -> bool) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        let n = self.n(t);
        let (goes_before, left, right) = (before(n.score, &n.member), n.left, n.right);
        if goes_before {
            let (a, b) = self.split(right, before);
            self.nodes[t as usize].right = a;
            self.pull(t);
            (t, b)
        } else {
            let (a, b) = self.split(left, before);
            self.nodes[t as usize].left = b;
            self.pull(t);
            (a, t)
        }
    }

    fn node_of(&self, member: &[u8]) -> Option<u32> {
        let slot = self.index.get(&super::hash::field_hash(member))?;
        slot.nodes()
            .iter()
            .copied()
            .find(|&n| &*self.n(n).member == member)
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.node_of(member).map(|n| self.n(n).score)
    }

    /// How many elements `before` holds for (a prefix of the order).
    pub fn count_before(&self, before: impl Fn(f64, &[u8]) -> bool) -> usize {
        let (mut t, mut n) = (self.root, 0);
        while t != NIL {
            let node = self.n(t);
            if before(node.score, &node.member) {
                n += self.size(node.left) + 1;
                t = node.right;
            } else {
                t = node.left;
            }
        }
        n
    }

    /// The elements of ranks `from..to` (ascending), in order, or in reverse with
    /// `rev`.
    pub fn range(&self, from: usize, to: usize, rev: bool) -> TreeIter<'_> {
        let to = to.min(self.len);
        let mut it = TreeIter {
            tree: self,
            stack: Vec::new(),
            left: to.saturating_sub(from),
            rev,
        };
        if it.left == 0 {
            return it;
        }
        // Descend to the first node yielded, keeping the ancestors still to come.
        let mut k = if rev { to - 1 } else { from };
        let mut t = self.root;
        while t != NIL {
            let n = self.n(t);
            let ls = self.size(n.left);
            match k.cmp(&ls) {
                Ordering::Equal => {
                    it.stack.push(t);
                    break;
                }
                Ordering::Less => {
                    if !rev {
                        it.stack.push(t);
                    }
                    t = n.left;
                }
                Ordering::Greater => {
                    if rev {
                        it.stack.push(t);
                    }
                    k -= ls + 1;
                    t = n.right;
                }
            }
        }
        it
    }

    /// Adds `member` (not in the tree) with `score`.
    fn insert(&mut self, member: &[u8], score: f64) {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 17;
        self.seed ^= self.seed << 5;
        let node = Node {
            score,
            member: member.into(),
            left: NIL,
            right: NIL,
            size: 1,
            prio: self.seed,
        };
        let t = match self.free.pop() {
            Some(t) => {
                self.nodes[t as usize] = node;
                t
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.place(t, member, score);
        match self.index.entry(super::hash::field_hash(member)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(Slot::One(t));
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                let s = o.get_mut();
                if let Slot::One(first) = *s {
                    *s = Slot::Many(vec![first]);
                }
                if let Slot::Many(v) = s {
                    v.push(t);
                }
            }
        }
        self.len += 1;
        self.memory += member.len() as u64 + ELEMENT_OVERHEAD;
    }

    /// The longest path from the root to a leaf (tests).
    #[cfg(test)]
    fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(self.root, 1)];
        while let Some((t, d)) = stack.pop() {
            if t != NIL {
                deepest = deepest.max(d);
                stack.push((self.n(t).left, d + 1));
                stack.push((self.n(t).right, d + 1));
            }
        }
        deepest
    }

    /// Puts node `t` (of `member` with `score`, out of the tree, no child) in the
    /// tree.
    fn place(&mut self, t: u32, member: &[u8], score: f64) {
        // Down from the root while the nodes stay above the new one (a higher
        // priority), each gaining it below; then the subtree found is split around it
        // and hangs below it, in its place: one walk from the root to a leaf.
        let prio = self.n(t).prio;
        let (mut parent, mut went_left, mut cur) = (NIL, false, self.root);
        while cur != NIL && self.n(cur).prio > prio {
            let n = self.n(cur);
            went_left = cmp((score, member), (n.score, &n.member)).is_lt();
            let next = if went_left { n.left } else { n.right };
            self.nodes[cur as usize].size += 1;
            (parent, cur) = (cur, next);
        }
        let (a, b) = self.split(cur, &|s, m| cmp((s, m), (score, member)).is_lt());
        let node = &mut self.nodes[t as usize];
        (node.left, node.right) = (a, b);
        self.pull(t);
        self.link(parent, went_left, t);
    }

    /// Sets `member`'s score (adding it if new): its score before, if it was there.
    /// A member already there keeps its node, member bytes and index entry: the node
    /// is only taken out of the tree and put back where its new score goes.
    fn set(&mut self, member: &[u8], score: f64) -> Option<f64> {
        let Some(t) = self.node_of(member) else {
            self.insert(member, score);
            return None;
        };
        let before = self.n(t).score;
        if before.to_bits() == score.to_bits() {
            return Some(before);
        }
        self.detach(t, member, before);
        let node = &mut self.nodes[t as usize];
        (node.score, node.left, node.right, node.size) = (score, NIL, NIL, 1);
        self.place(t, member, score);
        Some(before)
    }

    /// Removes `member`: its score, if it was there.
    fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let t = self.node_of(member)?;
        let score = self.n(t).score;
        self.detach(t, member, score);
        self.forget(t, member);
        Some(score)
    }

    /// Takes node `t` (of `member` with `score`) out of the tree.
    fn detach(&mut self, t: u32, member: &[u8], score: f64) {
        // Down from the root to the node, each node on the way losing one below it;
        // the node's two subtrees merged take its place.
        let (mut parent, mut went_left, mut cur) = (NIL, false, self.root);
        while cur != t {
            let n = self.n(cur);
            went_left = cmp((score, member), (n.score, &n.member)).is_lt();
            let next = if went_left { n.left } else { n.right };
            self.nodes[cur as usize].size -= 1;
            (parent, cur) = (cur, next);
        }
        let merged = self.merge(self.n(t).left, self.n(t).right);
        self.link(parent, went_left, merged);
    }

    /// Removes the lowest element (the highest with `last`): its member and score.
    fn pop_end(&mut self, last: bool) -> Option<(Box<[u8]>, f64)> {
        if self.root == NIL {
            return None;
        }
        // Down the left (right) edge, each node on the way losing one below it; the
        // end node's one subtree takes its place.
        let (mut parent, mut cur) = (NIL, self.root);
        loop {
            let n = self.n(cur);
            let next = if last { n.right } else { n.left };
            if next == NIL {
                break;
            }
            self.nodes[cur as usize].size -= 1;
            (parent, cur) = (cur, next);
        }
        let n = self.n(cur);
        let child = if last { n.left } else { n.right };
        self.link(parent, !last, child);
        let member = std::mem::take(&mut self.nodes[cur as usize].member);
        let score = self.n(cur).score;
        self.forget(cur, &member);
        Some((member, score))
    }

    /// Drops node `t`, of `member`, already out of the tree: from the index, the
    /// counts, and into the free slots.
    fn forget(&mut self, t: u32, member: &[u8]) {
        let h = super::hash::field_hash(member);
        let std::collections::btree_map::Entry::Occupied(mut o) = self.index.entry(h) else {
            unreachable!("an indexed member")
        };
        match o.get_mut() {
            Slot::One(_) => {
                o.remove();
            }
            Slot::Many(v) => {
                v.retain(|&n| n != t);
                if v.len() == 1 {
                    *o.get_mut() = Slot::One(v[0]);
                }
            }
        }
        self.memory -= member.len() as u64 + ELEMENT_OVERHEAD;
        self.nodes[t as usize].member = Box::default();
        self.free.push(t);
        self.len -= 1;
    }
}

/// Elements of a tree in order (or reverse order) from a rank: see [`ZTree::range`].
pub struct TreeIter<'a> {
    tree: &'a ZTree,
    stack: Vec<u32>,
    left: usize,
    rev: bool,
}

impl<'a> Iterator for TreeIter<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let t = self.stack.pop()?;
        self.left -= 1;
        let tree = self.tree;
        let n = tree.n(t);
        let mut c = if self.rev { n.left } else { n.right };
        while c != NIL {
            self.stack.push(c);
            let cn = tree.n(c);
            c = if self.rev { cn.right } else { cn.left };
        }
        Some((&n.member, n.score))
    }
}

/// The tree of a big sorted set, from its value bytes.
///
/// # Safety
/// `bytes` are the value of a live entry of tag [`tag::ZSET_SKIP`], which outlives the
/// borrow.
pub(super) unsafe fn tree_of(bytes: &[u8]) -> &ZTree {
    // SAFETY: per the contract, the bytes hold the pointer `Box::into_raw` gave when the
    // entry took the tree, and the entry (which owns it) outlives the borrow.
    unsafe { &*(value::read_ptr(bytes) as *const ZTree) }
}

/// Frees the tree of a big sorted set's value bytes.
///
/// # Safety
/// `bytes` hold the pointer of a tree boxed with `Box::into_raw`, which nothing uses
/// afterwards.
pub(super) unsafe fn drop_tree(bytes: &[u8]) {
    // SAFETY: per the contract, the pointer came from `Box::into_raw` and is dropped once.
    drop(unsafe { Box::from_raw(value::read_ptr(bytes) as *mut ZTree) })
}

fn tree(e: &Entry) -> &ZTree {
    debug_assert_eq!(e.tag(), tag::ZSET_SKIP);
    // SAFETY: the entry's tag says its bytes hold its tree, which lives as long as it.
    unsafe { tree_of(e.value()) }
}

fn tree_mut(e: &mut Entry) -> &mut ZTree {
    debug_assert_eq!(e.tag(), tag::ZSET_SKIP);
    // SAFETY: as in `tree`; `&mut Entry` makes this the only reference to the tree.
    unsafe { &mut *(value::read_ptr(e.value()) as *mut ZTree) }
}

/// The (member, score) pairs of packed bytes, in order.
fn unpack(bytes: &[u8]) -> Vec<(&[u8], f64)> {
    let mut it = packed::Iter::new(bytes);
    let mut out = Vec::new();
    while let (Some(m), Some(s)) = (it.next(), it.next()) {
        out.push((m, read_score(s)));
    }
    out
}

/// Packed bytes of `pairs`. A score of -0 is packed as 0, as Redis's listpack keeps
/// it (its text `-0` is stored as the integer 0); a tree keeps -0.
fn pack<'a>(pairs: impl Iterator<Item = (&'a [u8], f64)>) -> Vec<u8> {
    let mut out = Vec::new();
    for (m, s) in pairs {
        packed::put(&mut out, m);
        packed::put(&mut out, &score_bytes(if s == 0.0 { 0.0 } else { s }));
    }
    out
}

/// A sorted set entry's elements, to read: decoded pairs of a packed one, or its tree.
pub enum View<'a> {
    /// A packed sorted set's pairs, in order.
    Packed(Vec<(&'a [u8], f64)>),
    /// A big one's tree.
    Tree(&'a ZTree),
}

/// The elements of a sorted set entry, to read.
pub fn view(e: &Entry) -> View<'_> {
    match e.tag() {
        tag::ZSET_PACKED => View::Packed(unpack(e.value())),
        _ => View::Tree(tree(e)),
    }
}

impl<'a> View<'a> {
    /// The number of members.
    pub fn len(&self) -> usize {
        match self {
            View::Packed(p) => p.len(),
            View::Tree(t) => t.len(),
        }
    }

    /// Whether there is no member (never, for a live entry).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            View::Packed(p) => p.iter().find(|(m, _)| *m == member).map(|&(_, s)| s),
            View::Tree(t) => t.score(member),
        }
    }

    /// How many elements `before` holds for; they must be a prefix of the order.
    pub fn count_before(&self, before: impl Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            View::Packed(p) => p.partition_point(|&(m, s)| before(s, m)),
            View::Tree(t) => t.count_before(before),
        }
    }

    /// The rank of `member` (0 for the lowest) and its score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        let score = self.score(member)?;
        Some((
            self.count_before(|s, m| cmp((s, m), (score, member)).is_lt()),
            score,
        ))
    }

    /// The elements of ranks `from..to` in order, or from `to - 1` down to `from` with
    /// `rev`.
    pub fn range(
        &self,
        from: usize,
        to: usize,
        rev: bool,
    ) -> Box<dyn Iterator<Item = (&'a [u8], f64)> + '_> {
        let to = to.min(self.len());
        let from = from.min(to);
        match self {
            View::Packed(p) if rev => Box::new(p[from..to].iter().rev().copied()),
            View::Packed(p) => Box::new(p[from..to].iter().copied()),
            View::Tree(t) => Box::new(t.range(from, to, rev)),
        }
    }

    /// Every element, in order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&'a [u8], f64)> + '_> {
        self.range(0, usize::MAX, false)
    }
}

/// The number of members of a sorted set entry.
pub fn len(e: &Entry) -> usize {
    match e.tag() {
        tag::ZSET_PACKED => packed::Iter::new(e.value()).count() / 2,
        _ => tree(e).len(),
    }
}

/// The score of `member` in a sorted set entry.
pub fn score(e: &Entry, member: &[u8]) -> Option<f64> {
    match e.tag() {
        tag::ZSET_PACKED => {
            let mut it = packed::Iter::new(e.value());
            while let (Some(m), Some(s)) = (it.next(), it.next()) {
                if m == member {
                    return Some(read_score(s));
                }
            }
            None
        }
        _ => tree(e).score(member),
    }
}

/// Whether a sorted set entry has no member left.
pub fn is_empty(e: &Entry) -> bool {
    match e.tag() {
        tag::ZSET_PACKED => e.value().is_empty(),
        _ => tree(e).is_empty(),
    }
}

/// Whether `n` members, the longest `longest` bytes, fit a packed sorted set.
fn fits_packed(n: usize, longest: usize) -> bool {
    n <= max_packed_entries() && longest <= max_packed_value()
}

/// Makes entry `e` a tree holding `pairs`.
fn make_tree<'a>(e: &mut Entry, pairs: impl Iterator<Item = (&'a [u8], f64)>) {
    let mut t = ZTree::default();
    for (m, s) in pairs {
        t.insert(m, s);
    }
    let p = Box::into_raw(Box::new(t)) as *mut u8;
    e.set_payload(tag::ZSET_SKIP, &value::ptr_bytes(p));
}

/// Makes a packed sorted set entry a tree holding the same elements, as Redis's SORT
/// does to the sorted set it reads: whether it was packed (a tree stays as it is).
pub fn make_tree_now(e: &mut Entry) -> bool {
    if e.tag() != tag::ZSET_PACKED {
        return false;
    }
    let pairs = unpack(e.value());
    let owned = owned_pairs(&pairs);
    make_tree(e, owned.iter().map(|(m, s)| (m.as_slice(), *s)));
    true
}

/// Makes a tree small enough to be packed (at most [`max_packed_entries`] members,
/// none longer than [`max_packed_value`]) packed again: whether it did. Only the end of
/// a replay does it (a restart, DEBUG RELOAD), as Redis 7.0 loads a small sorted set
/// as a listpack whatever it was when saved; commands never convert back.
pub fn pack_if_fits(e: &mut Entry) -> bool {
    if e.tag() != tag::ZSET_SKIP || len(e) > max_packed_entries() {
        return false;
    }
    let t = tree(e);
    if t.range(0, usize::MAX, false)
        .any(|(m, _)| m.len() > max_packed_value())
    {
        return false;
    }
    let bytes = pack(t.range(0, usize::MAX, false));
    e.set_payload(tag::ZSET_PACKED, &bytes);
    true
}

/// `pairs` copied, so that an entry whose bytes they borrow can be rewritten.
fn owned_pairs(pairs: &[(&[u8], f64)]) -> Vec<(Vec<u8>, f64)> {
    pairs.iter().map(|&(m, s)| (m.to_vec(), s)).collect()
}

/// Sets `member`'s score to `score` in a sorted set entry (adding it if new,
/// converting a packed one to a tree past the thresholds): its previous score, if it
/// had one.
pub fn set(e: &mut Entry, member: &[u8], score: f64) -> Option<f64> {
    debug_assert!(!score.is_nan());
    if e.tag() == tag::ZSET_PACKED {
        let mut pairs = unpack(e.value());
        let old = pairs.iter().position(|(m, _)| *m == member);
        let before = old.map(|i| pairs.remove(i).1);
        if before == Some(score) {
            return before;
        }
        let at = pairs.partition_point(|&(m, s)| cmp((s, m), (score, member)).is_lt());
        pairs.insert(at, (member, score));
        let bytes = if fits_packed(pairs.len(), member.len()) {
            Some(pack(pairs.iter().copied()))
        } else {
            None
        };
        match bytes {
            Some(b) => e.set_payload(tag::ZSET_PACKED, &b),
            None => {
                let owned = owned_pairs(&pairs);
                make_tree(e, owned.iter().map(|(m, s)| (m.as_slice(), *s)));
            }
        }
        return before;
    }
    tree_mut(e).set(member, score)
}

/// Removes `member` from a sorted set entry: its score, if it was there. (The caller
/// removes a sorted set left empty.)
pub fn remove(e: &mut Entry, member: &[u8]) -> Option<f64> {
    if e.tag() == tag::ZSET_PACKED {
        let mut at = 0;
        let bytes = e.value();
        while at < bytes.len() {
            let (m, ml) = packed::read(&bytes[at..]).expect("whole packed members");
            let (s, sl) = packed::read(&bytes[at + ml..]).expect("whole packed scores");
            if m == member {
                let score = read_score(s);
                e.splice(at..at + ml + sl, b"");
                return Some(score);
            }
            at += ml + sl;
        }
        return None;
    }
    tree_mut(e).remove(member)
}

/// Removes the `n` lowest elements of a sorted set entry (the `n` highest with `max`):
/// them, with their scores, lowest first (highest first with `max`). (The caller
/// removes a sorted set left empty.)
pub fn pop(e: &mut Entry, n: usize, max: bool) -> Vec<(Vec<u8>, f64)> {
    if e.tag() == tag::ZSET_PACKED {
        let len = len(e);
        let n = n.min(len);
        let (from, to) = if max { (len - n, len) } else { (0, n) };
        let got = view(e)
            .range(from, to, max)
            .map(|(m, s)| (m.to_vec(), s))
            .collect();
        remove_range(e, from, to);
        return got;
    }
    let t = tree_mut(e);
    (0..n)
        .map_while(|_| t.pop_end(max))
        .map(|(m, s)| (m.into_vec(), s))
        .collect()
}

/// Removes the elements of ranks `from..to` (ascending) from a sorted set entry:
/// their members, in order. (The caller removes a sorted set left empty.)
pub fn remove_range(e: &mut Entry, from: usize, to: usize) -> Vec<Vec<u8>> {
    let gone: Vec<Vec<u8>> = view(e)
        .range(from, to, false)
        .map(|(m, _)| m.to_vec())
        .collect();
    if e.tag() == tag::ZSET_PACKED {
        let left: Vec<u8> = {
            let pairs = unpack(e.value());
            let to = to.min(pairs.len());
            let from = from.min(to);
            pack(pairs[..from].iter().chain(&pairs[to..]).copied())
        };
        e.set_payload(tag::ZSET_PACKED, &left);
    } else {
        let t = tree_mut(e);
        for m in &gone {
            t.remove(m);
        }
    }
    gone
}

/// A new sorted set entry for `key` holding `items` (member, score bytes, ...; a
/// repeated member keeps its last score), packed if they fit the thresholds. `items`
/// must be valid ([`valid_items`]) and not empty.
pub fn new_entry(key: &[u8], items: Items<'_>, expire: Option<NonZeroU64>, stamp: u64) -> Entry {
    debug_assert!(!items.is_empty() && valid_items(&items));
    // Packed items in strict order that fit are the packed value itself (one copy):
    // the records a sorted set's state is logged as are so.
    if let Items::Packed { n, bytes } = items {
        if n / 2 <= max_packed_entries() {
            let pairs = unpack(bytes);
            let longest = pairs.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
            let ordered = pairs
                .windows(2)
                .all(|w| cmp((w[0].1, w[0].0), (w[1].1, w[1].0)).is_lt());
            if ordered && fits_packed(pairs.len(), longest) {
                return Entry::with_tag(tag::ZSET_PACKED, key, bytes, expire, stamp);
            }
        }
    }
    let mut e = Entry::with_tag(tag::ZSET_PACKED, key, b"", expire, stamp);
    let mut it = items.iter();
    while let (Some(m), Some(s)) = (it.next(), it.next()) {
        set(&mut e, m, read_score(s));
    }
    e
}

/// The packed bytes of `pairs` (member, score), as [`new_entry`] and records take them.
pub fn pack_pairs<'a>(pairs: impl Iterator<Item = (&'a [u8], f64)>) -> Vec<u8> {
    pack(pairs)
}

/// Logs a sorted set entry's whole state as records, through `f`: one `ZSet` record
/// (for a tree, of its first members), then `ZAdd` records of the rest, each of at
/// most [`crate::log::ITEMS_PER_RECORD`] bytes of members and scores unless one pair
/// alone is larger (compaction, a creation, a STORE's destination).
pub fn state_records(e: &Entry, mut f: impl FnMut(crate::log::RecordRef<'_>)) {
    state::records(e, &KINDS, &mut f, |runs| {
        for (m, s) in tree(e).range(0, usize::MAX, false) {
            runs.push(&[m, &score_bytes(s)]);
        }
    });
}

/// The records a sorted set's state is logged as ([`state::Kinds`]).
const KINDS: state::Kinds = state::Kinds {
    packed: tag::ZSET_PACKED,
    create: |key, expire_at_ms, items| crate::log::RecordRef::ZSet {
        key,
        expire_at_ms,
        items,
    },
    add: |key, items| crate::log::RecordRef::ZAdd { key, items },
};

/// A piece of a big sorted set's state ([`state::piece`]): at most `most` members
/// after `after` in (score, member) order (`None`: the first piece, which creates the
/// key); the last member written, where the next piece goes on, or `None` after the
/// last piece (which ends as [`state_records`] does). The position is an element of
/// the order, not a rank: members added or removed before it do not move it, so a
/// member never written to is in exactly one piece however the set changes between
/// pieces.
pub fn state_piece(
    e: &Entry,
    after: Option<(f64, &[u8])>,
    most: usize,
    mut f: impl FnMut(crate::log::RecordRef<'_>),
) -> Option<(f64, Box<[u8]>)> {
    let t = tree(e);
    let from = after.map_or(0, |a| {
        t.count_before(|s, m| cmp((s, m), a) != Ordering::Greater)
    });
    let to = from + most.max(1);
    let mut last = None;
    state::piece(e, &KINDS, after.is_none(), &mut f, |runs| {
        for (m, s) in t.range(from, to, false) {
            runs.push(&[m, &score_bytes(s)]);
            last = Some((s, m));
        }
        None
    });
    match last {
        Some((s, m)) if to < t.len() => Some((s, m.into())),
        _ => None,
    }
}

/// One ZSCAN step over a sorted set entry: calls `f` with the members and scores of
/// about `count` member hashes from `cursor` on (a packed sorted set: all of them at
/// once), and answers the next cursor, or 0 when done.
pub fn scan(e: &Entry, cursor: u64, count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
    if e.tag() == tag::ZSET_PACKED {
        for (m, s) in unpack(e.value()) {
            f(m, s);
        }
        return 0;
    }
    let t = tree(e);
    let mut it = t.index.range(cursor..);
    for _ in 0..count.max(1) {
        let Some((_, slot)) = it.next() else {
            return 0;
        };
        for &n in slot.nodes() {
            let node = t.n(n);
            f(&node.member, node.score);
        }
    }
    it.next().map_or(0, |(&h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap as Model;

    fn sorted(model: &Model<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<(Vec<u8>, f64)> = model.iter().map(|(m, &s)| (m.clone(), s)).collect();
        v.sort_by(|a, b| cmp((a.1, &a.0), (b.1, &b.0)));
        v
    }

    fn check(e: &Entry, model: &Model<Vec<u8>, f64>) {
        let want = sorted(model);
        assert_eq!(len(e), want.len());
        let v = view(e);
        let got: Vec<(Vec<u8>, f64)> = v.iter().map(|(m, s)| (m.to_vec(), s)).collect();
        assert_eq!(got, want);
        for (i, (m, s)) in want.iter().enumerate() {
            assert_eq!(score(e, m), Some(*s));
            assert_eq!(v.rank(m), Some((i, *s)));
        }
        let n = want.len();
        for (a, b) in [(0, n), (1, 3), (n / 2, n), (n.saturating_sub(2), n + 5)] {
            let fw: Vec<(Vec<u8>, f64)> =
                v.range(a, b, false).map(|(m, s)| (m.to_vec(), s)).collect();
            let b2 = b.min(n);
            let a2 = a.min(b2);
            assert_eq!(fw, want[a2..b2].to_vec(), "range {a}..{b}");
            let mut bw: Vec<(Vec<u8>, f64)> =
                v.range(a, b, true).map(|(m, s)| (m.to_vec(), s)).collect();
            bw.reverse();
            assert_eq!(bw, fw);
        }
        let below = v.count_before(|s, _| s < 50.0);
        assert_eq!(below, want.iter().filter(|(_, s)| *s < 50.0).count());
        let mut walked = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = scan(e, cursor, 3, |m, _| walked.push(m.to_vec()));
            if cursor == 0 {
                break;
            }
        }
        walked.sort();
        assert_eq!(walked, model.keys().cloned().collect::<Vec<_>>());
        let m = match e.tag() {
            tag::ZSET_PACKED => e.value().len() as u64,
            _ => model
                .keys()
                .map(|k| k.len() as u64 + ELEMENT_OVERHEAD)
                .sum(),
        };
        assert_eq!(e.value_memory(), m);
    }

    /// Random sets, removals and range removals agree with a map, packed and as a
    /// tree, across the conversion (by count and by length).
    #[test]
    fn behaves_like_an_ordered_map_in_both_encodings() {
        let mut x: u64 = 77;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // WEFT_KV_STRESS=1: many more operations over many more members.
        let stress = std::env::var_os("WEFT_KV_STRESS").is_some();
        let (ops, big) = if stress {
            (200_000, 20_000)
        } else {
            (3000, 500)
        };
        for round in 0..6 {
            let first = [&b"m0"[..], &score_bytes(1.0)];
            let mut e = new_entry(b"z", Items::Slices(&first), None, 1);
            let mut model = Model::new();
            model.insert(b"m0".to_vec(), 1.0);
            let members = if round < 3 { 60 } else { big };
            for _ in 0..ops {
                let m = format!("m{}", rnd(members)).into_bytes();
                match rnd(10) {
                    0..=2 => {
                        assert_eq!(remove(&mut e, &m), model.remove(&m));
                    }
                    // (A range removal sorts the model: rarer over many members.)
                    3 if model.len() > 3 && rnd(if stress { 500 } else { 1 }) == 0 => {
                        let from = rnd(model.len() as u64) as usize;
                        let to = from + rnd(3) as usize;
                        let want: Vec<Vec<u8>> = sorted(&model)
                            .into_iter()
                            .skip(from)
                            .take(to - from)
                            .map(|(m, _)| m)
                            .collect();
                        let gone = remove_range(&mut e, from, to);
                        assert_eq!(gone, want);
                        for g in gone {
                            model.remove(&g);
                        }
                    }
                    _ => {
                        let long = round % 3 == 2 && rnd(500) == 0;
                        let m = if long { vec![b'l'; 65] } else { m };
                        let s = (rnd(100) as f64) - if rnd(2) == 0 { 0.5 } else { 0.0 };
                        assert_eq!(set(&mut e, &m, s), model.insert(m, s));
                    }
                }
                if model.is_empty() {
                    assert!(is_empty(&e));
                    set(&mut e, b"again", 3.0);
                    model.insert(b"again".to_vec(), 3.0);
                }
                if e.tag() == tag::ZSET_PACKED {
                    assert!(model.len() <= max_packed_entries());
                }
            }
            check(&e, &model);
            if round == 0 {
                assert_eq!(e.tag(), tag::ZSET_PACKED);
            }
            if round >= 3 {
                assert_eq!(e.tag(), tag::ZSET_SKIP);
            }
        }
    }

    /// Pops from either end, of a packed set and of a tree, answer the lowest (highest)
    /// elements in order and leave the rest as a map would, ranks included.
    #[test]
    fn pops_from_either_end_agree_with_a_map() {
        let mut x: u64 = 5;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for members in [50u64, 3000] {
            let first = [&b"m0"[..], &score_bytes(1.0)];
            let mut e = new_entry(b"z", Items::Slices(&first), None, 1);
            let mut model = Model::new();
            model.insert(b"m0".to_vec(), 1.0);
            for i in 1..members {
                let s = rnd(40) as f64 - 0.5 * rnd(2) as f64;
                let m = format!("m{i}").into_bytes();
                set(&mut e, &m, s);
                model.insert(m, s);
            }
            while !model.is_empty() {
                let max = rnd(2) == 1;
                let n = rnd(4) as usize;
                let mut want = sorted(&model);
                if max {
                    want.reverse();
                }
                want.truncate(n);
                assert_eq!(pop(&mut e, n, max), want);
                for (m, _) in &want {
                    model.remove(m);
                }
                if rnd(3) == 0 && !model.is_empty() {
                    let m = format!("m{}", rnd(members)).into_bytes();
                    let s = rnd(40) as f64;
                    assert_eq!(set(&mut e, &m, s), model.insert(m, s));
                }
                if !model.is_empty() && rnd(50) == 0 {
                    check(&e, &model);
                }
            }
            assert!(is_empty(&e));
            assert_eq!(e.tag() == tag::ZSET_SKIP, members > 128);
        }
    }

    /// A new score for a member of a tree moves its node (no node, member copy or
    /// index entry made or dropped): order, ranks, ranges and SCAN agree with a map
    /// after many moves, the memory count and the nodes stay as they were, the tree
    /// stays shallow, and a score equal to the old one (or -0 for 0, kept as given)
    /// answers the old score.
    #[test]
    fn a_new_score_moves_the_node_and_agrees_with_a_map() {
        let mut x: u64 = 11;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let first = [&b"m0"[..], &score_bytes(0.0)];
        let mut e = new_entry(b"z", Items::Slices(&first), None, 1);
        let mut model = Model::new();
        model.insert(b"m0".to_vec(), 0.0);
        for i in 1..2000 {
            let m = format!("m{i}").into_bytes();
            let s = rnd(100) as f64;
            assert_eq!(set(&mut e, &m, s), None);
            model.insert(m, s);
        }
        assert_eq!(e.tag(), tag::ZSET_SKIP);
        let (memory, nodes) = (tree(&e).memory(), tree(&e).nodes.len());
        for _ in 0..20_000 {
            let m = format!("m{}", rnd(2000)).into_bytes();
            let s = rnd(100) as f64 - 0.5 * rnd(2) as f64;
            assert_eq!(set(&mut e, &m, s), model.insert(m, s));
        }
        check(&e, &model);
        assert_eq!(tree(&e).memory(), memory);
        assert_eq!(tree(&e).nodes.len(), nodes);
        assert!(tree(&e).free.is_empty());
        assert!(tree(&e).depth() <= 100, "depth {}", tree(&e).depth());
        assert_eq!(set(&mut e, b"m0", 7.0), model.insert(b"m0".to_vec(), 7.0));
        assert_eq!(set(&mut e, b"m0", 7.0), Some(7.0));
        set(&mut e, b"m0", 0.0);
        assert_eq!(set(&mut e, b"m0", -0.0), Some(0.0));
        assert!(score(&e, b"m0").unwrap().is_sign_negative());
        model.insert(b"m0".to_vec(), -0.0);
        check(&e, &model);
    }

    /// Members added in score order (the worst order for a plain search tree) leave a
    /// tree of logarithmic depth, and so do removals from one end.
    #[test]
    fn a_tree_stays_shallow_whatever_the_order() {
        let mut t = ZTree::default();
        let n = 20_000;
        for i in 0..n {
            t.insert(format!("m{i:06}").as_bytes(), i as f64);
        }
        assert!(t.depth() <= 100, "depth {} for {n} members", t.depth());
        for i in 0..n / 2 {
            assert_eq!(t.remove(format!("m{i:06}").as_bytes()), Some(i as f64));
        }
        assert_eq!(t.len(), n / 2);
        assert!(
            t.depth() <= 100,
            "depth {} for {} members",
            t.depth(),
            n / 2
        );
        let first: Vec<_> = t.range(0, 2, false).collect();
        assert_eq!(
            first,
            [(&b"m010000"[..], 10000.0), (&b"m010001"[..], 10001.0)]
        );
    }

    /// A sorted set's state records rebuild it: a packed one as one record copied
    /// whole, a big one as a ZSet and ZAdd records of bounded size.
    #[test]
    fn state_records_rebuild_the_sorted_set() {
        for n in [3usize, 5000] {
            let members: Vec<Vec<u8>> = (0..n)
                .map(|i| format!("member{i:0300}").into_bytes())
                .collect();
            let mut items: Vec<Vec<u8>> = Vec::new();
            for (i, m) in members.iter().enumerate() {
                items.push(if n == 3 { m[..10].to_vec() } else { m.clone() });
                items.push(score_bytes((i % 7) as f64).to_vec());
            }
            let e = new_entry(b"k", Items::Owned(&items), NonZeroU64::new(77), 1);
            let recs = state::encoded(&e);
            assert_eq!(recs.len() > 1, n > 3);
            let mut back: Option<Entry> = None;
            for r in &recs {
                let (rec, _) = crate::log::decode_ref(r).unwrap();
                match rec {
                    crate::log::RecordRef::ZSet {
                        key,
                        expire_at_ms,
                        items,
                    } => {
                        assert_eq!((key, expire_at_ms), (&b"k"[..], Some(77)));
                        back = Some(new_entry(key, items, NonZeroU64::new(77), 0));
                    }
                    crate::log::RecordRef::ZAdd { items, .. } => {
                        assert!(items.packed_len() <= crate::log::ITEMS_PER_RECORD);
                        let b = back.as_mut().unwrap();
                        let mut it = items.iter();
                        while let (Some(m), Some(s)) = (it.next(), it.next()) {
                            set(b, m, read_score(s));
                        }
                    }
                    r => panic!("{r:?}"),
                }
            }
            let back = back.unwrap();
            assert_eq!(back.tag(), e.tag());
            let a: Vec<_> = view(&e).iter().collect();
            let b: Vec<_> = view(&back).iter().collect();
            assert_eq!(a, b);
        }
    }
}
