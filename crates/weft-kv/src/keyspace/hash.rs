//! Hashes: a small hash packed in its entry, a big one in a boxed [`HashTable`], and the
//! operations the hash commands, replay and compaction use on either.
//!
//! **Packed** (tag `HASH_PACKED`, OBJECT ENCODING `listpack`): the entry's value bytes
//! are field, value, field, value, ... as packed elements (`crate::packed`), in the
//! order the fields were added. A lookup scans them; a new field goes at the end; a
//! changed value is spliced in place. A hash stays packed while it has at most
//! [`max_packed_entries`] fields and every field and value is at most
//! [`max_packed_value`] bytes; past either it becomes a table, never to go back.
//!
//! **Table** (tag `HASH_TABLE`, `hashtable`): a B-tree keyed by a 63-bit keyed hash of
//! the field (SipHash with a per-process random key), each node one field and value in
//! one allocation (fields of equal hash, rare, share a node). In hash order, so an
//! HSCAN cursor is a hash, with the keyspace's guarantee: a field present for the whole
//! scan is returned. Its memory count is its fields' and values' bytes plus
//! [`FIELD_OVERHEAD`] each.
//!
//! The functions here keep invariant 3 of docs/kv-types.md (encodings follow the
//! thresholds one way); the keyspace keeps memory, stamps and invariant 2 (no empty
//! hash) around them (`Keyspace::modify`).

use super::entry::Entry;
use super::state;
use super::value::{self, tag};
use crate::log::Items;
use crate::packed;
use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

static MAX_PACKED_ENTRIES: AtomicUsize = AtomicUsize::new(128);
static MAX_PACKED_VALUE: AtomicUsize = AtomicUsize::new(64);

/// The most fields a packed hash has (`hash-max-listpack-entries`, 128 by default).
#[inline]
pub fn max_packed_entries() -> usize {
    MAX_PACKED_ENTRIES.load(Relaxed)
}

/// The longest field or value a packed hash has (`hash-max-listpack-value`, 64).
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

/// Bytes a table counts per field besides its field and value: the tree's share, the
/// node's allocation header and rounding.
pub const FIELD_OVERHEAD: u64 = 64;

/// The hash of a field in a table (63 bits, keyed per process).
pub(super) fn field_hash(field: &[u8]) -> u64 {
    static HASHER: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    HASHER.get_or_init(Default::default).hash_one(field) & (u64::MAX >> 1)
}

/// One field and its value in one allocation: the field's length (LEB128), the
/// field, the value.
struct Pair(Box<[u8]>);

impl Pair {
    fn new(field: &[u8], value: &[u8]) -> Pair {
        let mut b = Vec::with_capacity(packed::element_bytes(field.len()) + value.len());
        packed::put(&mut b, field);
        b.extend_from_slice(value);
        Pair(b.into_boxed_slice())
    }

    fn split(&self) -> (&[u8], &[u8]) {
        let (field, n) = packed::read(&self.0).expect("a pair starts with its field");
        (field, &self.0[n..])
    }

    fn memory(&self) -> u64 {
        let (f, v) = self.split();
        (f.len() + v.len()) as u64 + FIELD_OVERHEAD
    }
}

/// The fields of one hash value.
enum Node {
    One(Pair),
    Many(Vec<Pair>),
}

impl Node {
    fn pairs(&self) -> &[Pair] {
        match self {
            Node::One(p) => std::slice::from_ref(p),
            Node::Many(v) => v,
        }
    }
}

/// A big hash (module doc).
#[derive(Default)]
pub struct HashTable {
    map: BTreeMap<u64, Node>,
    len: usize,
    memory: u64,
}

impl HashTable {
    /// The number of fields.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no field.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes it counts in the keyspace's memory.
    pub fn memory(&self) -> u64 {
        self.memory
    }

    pub(super) fn get(&self, field: &[u8]) -> Option<&[u8]> {
        let node = self.map.get(&field_hash(field))?;
        node.pairs()
            .iter()
            .map(Pair::split)
            .find(|(f, _)| *f == field)
            .map(|(_, v)| v)
    }

    /// Sets `field`: whether it is new.
    pub(super) fn set(&mut self, field: &[u8], value: &[u8]) -> bool {
        let pair = Pair::new(field, value);
        self.memory += pair.memory();
        let h = field_hash(field);
        let node = match self.map.entry(h) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(Node::One(pair));
                self.len += 1;
                return true;
            }
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
        };
        let pairs: &mut Vec<Pair> = match node {
            Node::One(p) if p.split().0 == field => {
                self.memory -= p.memory();
                *p = pair;
                return false;
            }
            Node::One(_) => {
                let Node::One(first) = std::mem::replace(node, Node::Many(Vec::new())) else {
                    unreachable!()
                };
                let Node::Many(v) = node else { unreachable!() };
                v.push(first);
                v
            }
            Node::Many(v) => v,
        };
        if let Some(p) = pairs.iter_mut().find(|p| p.split().0 == field) {
            self.memory -= p.memory();
            *p = pair;
            return false;
        }
        pairs.push(pair);
        self.len += 1;
        true
    }

    /// Removes `field`: whether it was there.
    pub(super) fn remove(&mut self, field: &[u8]) -> bool {
        // One descent: the entry found is the one removed.
        let std::collections::btree_map::Entry::Occupied(mut o) = self.map.entry(field_hash(field))
        else {
            return false;
        };
        let gone = match o.get_mut() {
            Node::One(p) if p.split().0 == field => {
                let m = p.memory();
                o.remove();
                m
            }
            Node::One(_) => return false,
            Node::Many(v) => {
                let Some(i) = v.iter().position(|p| p.split().0 == field) else {
                    return false;
                };
                let p = v.swap_remove(i);
                if v.is_empty() {
                    o.remove();
                }
                p.memory()
            }
        };
        self.memory -= gone;
        self.len -= 1;
        true
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.map
            .values()
            .flat_map(|n| n.pairs().iter().map(Pair::split))
    }

    /// A field chosen uniformly at random, from the random numbers `rnd` gives:
    /// a small table's by its place; a big one's by windows of hashes each expected
    /// to hold 32 fields, one of the first 64 places of a window drawn, tried again
    /// if the window has no field there. Every field lies in a window starting in
    /// the same span of hashes and has the same 1/64 chance in it, so all are equally
    /// likely (as long as no window holds more than 64, twice the mean, which random
    /// hashes make negligible); about 2 tries, each one descent of the tree and a
    /// walk along it.
    pub(super) fn random_uniform(&self, mut rnd: impl FnMut() -> u64) -> Option<(&[u8], &[u8])> {
        const SPACE: u64 = 1 << 63;
        const PLACES: u64 = 64;
        const EXPECTED: u64 = 32;
        if self.len as u64 <= PLACES {
            let n = self.len.max(1) as u64;
            return self.iter().nth((rnd() % n) as usize);
        }
        let width = SPACE / self.len as u64 * EXPECTED;
        loop {
            let start = rnd() & (SPACE - 1);
            let place = (rnd() % PLACES) as usize;
            let end = start + width;
            let wrapped = (end > SPACE).then(|| self.map.range(..end - SPACE));
            let window = self
                .map
                .range(start..)
                .take_while(|&(&h, _)| h < end)
                .chain(wrapped.into_iter().flatten())
                .flat_map(|(_, node)| node.pairs());
            if let Some(p) = window.take(PLACES as usize).nth(place) {
                return Some(p.split());
            }
        }
    }

    /// Calls `f` with the fields of about `count` hashes from `cursor` on; the next
    /// cursor, or 0 when done (HSCAN, SSCAN).
    pub(super) fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], &[u8])) -> u64 {
        let mut it = self.map.range(cursor..);
        for _ in 0..count.max(1) {
            let Some((_, node)) = it.next() else {
                return 0;
            };
            for p in node.pairs() {
                let (k, v) = p.split();
                f(k, v);
            }
        }
        it.next().map_or(0, |(&h, _)| h)
    }
}

/// The fields and values of a hash entry, in its order.
pub enum Iter<'a> {
    /// Of a packed hash.
    Packed(packed::Iter<'a>),
    /// Of a table.
    Table(Box<dyn Iterator<Item = (&'a [u8], &'a [u8])> + 'a>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Packed(p) => Some((p.next()?, p.next()?)),
            Iter::Table(t) => t.next(),
        }
    }
}

/// The table of a big hash entry.
fn table(e: &Entry) -> &HashTable {
    debug_assert_eq!(e.tag(), tag::HASH_TABLE);
    // SAFETY: the entry's tag says its bytes hold its table, which lives as long as it.
    unsafe { value::table(e.value()) }
}

fn table_mut(e: &mut Entry) -> &mut HashTable {
    debug_assert_eq!(e.tag(), tag::HASH_TABLE);
    // SAFETY: as in `table`; `&mut Entry` makes the access unique.
    unsafe { value::table_mut(e.value_mut()) }
}

/// Where `field` is in packed bytes: (its element's start, its value's element's
/// start, its value's element's end).
fn find_packed(bytes: &[u8], field: &[u8]) -> Option<(usize, usize, usize)> {
    let mut at = 0;
    while at < bytes.len() {
        let (f, fl) = packed::read(&bytes[at..]).expect("whole packed fields");
        let (_, vl) = packed::read(&bytes[at + fl..]).expect("whole packed values");
        if f == field {
            return Some((at, at + fl, at + fl + vl));
        }
        at += fl + vl;
    }
    None
}

/// The number of fields of a hash entry.
pub fn len(e: &Entry) -> usize {
    match e.tag() {
        tag::HASH_PACKED => packed::Iter::new(e.value()).count() / 2,
        _ => table(e).len(),
    }
}

/// The value of `field` in a hash entry.
pub fn get<'a>(e: &'a Entry, field: &[u8]) -> Option<&'a [u8]> {
    match e.tag() {
        tag::HASH_PACKED => {
            let (_, v, end) = find_packed(e.value(), field)?;
            packed::read(&e.value()[v..end]).map(|(v, _)| v)
        }
        _ => table(e).get(field),
    }
}

/// The fields and values of a hash entry: a packed one's in the order they were
/// added, a table's in hash order.
pub fn iter(e: &Entry) -> Iter<'_> {
    match e.tag() {
        tag::HASH_PACKED => Iter::Packed(packed::Iter::new(e.value())),
        _ => Iter::Table(Box::new(table(e).iter())),
    }
}

/// A field and its value of a hash entry of `len` fields chosen uniformly at random,
/// from the random numbers `rnd` gives (a packed hash's by its place, a table's:
/// `HashTable::random_uniform`).
pub fn random(e: &Entry, len: usize, mut rnd: impl FnMut() -> u64) -> (&[u8], &[u8]) {
    let picked = match e.tag() {
        tag::HASH_PACKED => iter(e).nth((rnd() % len as u64) as usize),
        _ => table(e).random_uniform(rnd),
    };
    picked.expect("a field of the hash")
}

/// One HSCAN step over a hash entry: calls `f` with the fields and values of about
/// `count` hashes from `cursor` on (a packed hash: all of them at once), and answers
/// the next cursor, or 0 when done.
pub fn scan(e: &Entry, cursor: u64, count: usize, mut f: impl FnMut(&[u8], &[u8])) -> u64 {
    match e.tag() {
        tag::HASH_PACKED => {
            for (k, v) in iter(e) {
                f(k, v);
            }
            0
        }
        _ => table(e).scan(cursor, count, f),
    }
}

/// Whether a packed hash of `fields` fields can take a new field of `field` and
/// `value` bytes.
fn fits_packed(fields: usize, field: usize, value: usize, new: bool) -> bool {
    let max = max_packed_value();
    field <= max && value <= max && (!new || fields < max_packed_entries())
}

/// Converts a packed hash entry to a table.
fn convert(e: &mut Entry) {
    let mut t = HashTable::default();
    for (f, v) in iter(e) {
        t.set(f, v);
    }
    let p = Box::into_raw(Box::new(t)) as *mut u8;
    e.set_payload(tag::HASH_TABLE, &value::ptr_bytes(p));
}

/// Makes a table small enough to be packed (at most [`max_packed_entries`] fields,
/// no field or value longer than [`max_packed_value`]) packed again: whether it did.
/// Only the end of a replay does it (a restart, DEBUG RELOAD), as Redis 7.0 loads a
/// small hash as a listpack whatever it was when saved; commands never convert back.
pub fn pack_if_fits(e: &mut Entry) -> bool {
    if e.tag() != tag::HASH_TABLE || len(e) > max_packed_entries() {
        return false;
    }
    let max = max_packed_value();
    let t = table(e);
    if t.iter().any(|(f, v)| f.len() > max || v.len() > max) {
        return false;
    }
    let mut bytes = Vec::new();
    for (f, v) in t.iter() {
        packed::put(&mut bytes, f);
        packed::put(&mut bytes, v);
    }
    e.set_payload(tag::HASH_PACKED, &bytes);
    true
}

/// Sets `field` to `value` in a hash entry (converting it to a table past the
/// thresholds): whether the field is new.
pub fn set(e: &mut Entry, field: &[u8], value: &[u8]) -> bool {
    if e.tag() == tag::HASH_PACKED {
        let found = find_packed(e.value(), field);
        let fields = if found.is_some() { 0 } else { len(e) };
        if fits_packed(fields, field.len(), value.len(), found.is_none()) {
            let mut n = [0u8; packed::MAX_LEN_BYTES];
            let k = packed::write_len(&mut n, value.len());
            match found {
                Some((_, v, end)) => e.splice_parts(v..end, &[&n[..k], value]),
                None => {
                    let mut m = [0u8; packed::MAX_LEN_BYTES];
                    let j = packed::write_len(&mut m, field.len());
                    let at = e.value().len();
                    e.splice_parts(at..at, &[&m[..j], field, &n[..k], value]);
                }
            }
            return found.is_none();
        }
        convert(e);
    }
    table_mut(e).set(field, value)
}

/// Removes `field` from a hash entry: whether it was there. (The caller removes a hash
/// left empty.)
pub fn remove(e: &mut Entry, field: &[u8]) -> bool {
    if e.tag() == tag::HASH_PACKED {
        let Some((start, _, end)) = find_packed(e.value(), field) else {
            return false;
        };
        e.splice(start..end, b"");
        return true;
    }
    table_mut(e).remove(field)
}

/// Whether a hash entry has no field left.
pub fn is_empty(e: &Entry) -> bool {
    match e.tag() {
        tag::HASH_PACKED => e.value().is_empty(),
        _ => table(e).is_empty(),
    }
}

/// A new hash entry for `key` holding the fields and values `items` (field, value,
/// ...; a repeated field keeps its last value), packed if they fit the thresholds.
/// `items` must not be empty.
pub fn new_entry(key: &[u8], items: Items<'_>, expire: Option<NonZeroU64>, stamp: u64) -> Entry {
    debug_assert!(!items.is_empty() && items.len().is_multiple_of(2));
    // A packed record whose fields fit is the packed value itself (one copy): the
    // records a hash's state is logged as have each field once.
    if let Items::Packed { n, bytes } = items {
        let max = max_packed_value();
        if n / 2 <= max_packed_entries() && packed::Iter::new(bytes).all(|x| x.len() <= max) {
            return Entry::with_tag(tag::HASH_PACKED, key, bytes, expire, stamp);
        }
    }
    let mut e = Entry::with_tag(tag::HASH_PACKED, key, b"", expire, stamp);
    let mut it = items.iter();
    while let (Some(f), Some(v)) = (it.next(), it.next()) {
        set(&mut e, f, v);
    }
    e
}

/// Logs a hash entry's whole state as records, through `f`: one `Hash` record (for a
/// table, of its first fields), then `HSet` records of the rest, each of at most
/// [`crate::log::ITEMS_PER_RECORD`] bytes of fields and values unless one pair alone
/// is larger (compaction, and a hash's creation).
pub fn state_records(e: &Entry, f: impl FnMut(crate::log::RecordRef<'_>)) {
    state::records(e, &KINDS, f, |runs| {
        for (k, v) in table(e).iter() {
            runs.push(&[k, v]);
        }
    });
}

/// The records a hash's state is logged as ([`state::Kinds`]).
const KINDS: state::Kinds = state::Kinds {
    packed: tag::HASH_PACKED,
    create: |key, expire_at_ms, items| crate::log::RecordRef::Hash {
        key,
        expire_at_ms,
        items,
    },
    add: |key, items| crate::log::RecordRef::HSet { key, items },
};

/// A piece of a big hash's state ([`state::piece`]): the fields of about `most`
/// hashes from scan cursor `from` (0: the first piece, which creates the key); the
/// cursor of the next piece, or `None` after the last.
pub fn state_piece(
    e: &Entry,
    from: u64,
    most: usize,
    f: impl FnMut(crate::log::RecordRef<'_>),
) -> Option<u64> {
    state::piece(e, &KINDS, from == 0, f, |runs| {
        let next = table(e).scan(from, most, |k, v| runs.push(&[k, v]));
        (next != 0).then_some(next)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap as Model;

    fn check(e: &Entry, model: &Model<Vec<u8>, Vec<u8>>) {
        assert_eq!(len(e), model.len());
        for (k, v) in model {
            assert_eq!(get(e, k), Some(v.as_slice()));
        }
        let mut all: Vec<(Vec<u8>, Vec<u8>)> =
            iter(e).map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        all.sort();
        assert_eq!(all, model.clone().into_iter().collect::<Vec<_>>());
        let mut walked = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = scan(e, cursor, 3, |k, _| walked.push(k.to_vec()));
            if cursor == 0 {
                break;
            }
        }
        walked.sort();
        assert_eq!(walked, model.keys().cloned().collect::<Vec<_>>());
        let m = match e.tag() {
            tag::HASH_PACKED => e.value().len() as u64,
            _ => model
                .iter()
                .map(|(k, v)| (k.len() + v.len()) as u64 + FIELD_OVERHEAD)
                .sum(),
        };
        assert_eq!(e.value_memory(), m);
    }

    /// Random sets and removals agree with a map, packed and as a table, across the
    /// conversion (by count and by length), and a packed hash keeps insertion order.
    #[test]
    fn behaves_like_a_map_in_both_encodings() {
        let mut x: u64 = 99;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..6 {
            let mut e = new_entry(b"h", Items::Slices(&[b"f0", b"v"]), None, 1);
            let mut model = Model::new();
            model.insert(b"f0".to_vec(), b"v".to_vec());
            let fields = if round < 3 { 60 } else { 400 };
            for _ in 0..3000 {
                let f = format!("f{}", rnd(fields)).into_bytes();
                if rnd(3) == 0 {
                    assert_eq!(remove(&mut e, &f), model.remove(&f).is_some());
                    if model.is_empty() {
                        assert!(is_empty(&e));
                        model.insert(f.clone(), b"x".to_vec());
                        set(&mut e, &f, b"x");
                    }
                } else {
                    let long = round % 3 == 2 && rnd(500) == 0;
                    let v = vec![b'a' + rnd(26) as u8; if long { 65 } else { rnd(10) as usize }];
                    assert_eq!(set(&mut e, &f, &v), model.insert(f, v).is_none());
                }
                if e.tag() == tag::HASH_PACKED {
                    assert!(model.len() <= max_packed_entries());
                }
            }
            check(&e, &model);
            if round == 0 {
                assert_eq!(e.tag(), tag::HASH_PACKED);
            }
            if round >= 3 {
                assert_eq!(e.tag(), tag::HASH_TABLE);
            }
        }
        let mut e = new_entry(
            b"h",
            Items::Slices(&[b"b", b"1", b"a", b"2", b"b", b"3"]),
            None,
            1,
        );
        let order: Vec<&[u8]> = iter(&e).map(|(k, _)| k).collect();
        assert_eq!(order, [&b"b"[..], b"a"]);
        assert_eq!(get(&e, b"b"), Some(&b"3"[..]));
        set(&mut e, b"c", &[b'z'; 65]);
        assert_eq!(e.tag(), tag::HASH_TABLE, "a long value converts");
    }

    /// A hash's state records rebuild it: a packed one as one record copied whole, a
    /// big one as a Hash and HSet records of bounded size.
    #[test]
    fn state_records_rebuild_the_hash() {
        for n in [3usize, 5000] {
            let items: Vec<Vec<u8>> = (0..n)
                .flat_map(|i| [format!("field{i}").into_bytes(), vec![b'v'; 300]])
                .collect();
            let e = new_entry(b"k", Items::Owned(&items), NonZeroU64::new(77), 1);
            let recs = state::encoded(&e);
            assert_eq!(recs.len() > 1, n > 3);
            let mut back: Option<Entry> = None;
            for r in &recs {
                let (rec, _) = crate::log::decode_ref(r).unwrap();
                match rec {
                    crate::log::RecordRef::Hash {
                        key,
                        expire_at_ms,
                        items,
                    } => {
                        assert_eq!((key, expire_at_ms), (&b"k"[..], Some(77)));
                        back = Some(new_entry(key, items, NonZeroU64::new(77), 0));
                    }
                    crate::log::RecordRef::HSet { items, .. } => {
                        assert!(items.packed_len() <= crate::log::ITEMS_PER_RECORD);
                        let b = back.as_mut().unwrap();
                        let mut it = items.iter();
                        while let (Some(f), Some(v)) = (it.next(), it.next()) {
                            set(b, f, v);
                        }
                    }
                    r => panic!("{r:?}"),
                }
            }
            let back = back.unwrap();
            assert_eq!(back.tag(), e.tag());
            let mut a: Vec<_> = iter(&e).collect();
            let mut b: Vec<_> = iter(&back).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b);
        }
    }
}
