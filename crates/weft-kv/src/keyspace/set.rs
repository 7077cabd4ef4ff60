//! Sets: a small set of integers as sorted integers in its entry, a small set of other
//! members packed in its entry, a big one in a boxed table; and the operations the set
//! commands, replay and compaction use on any of them.
//!
//! **Integers** (tag `SET_INTS`, OBJECT ENCODING `intset`): while every member is an
//! integer as Redis reads one (`string2ll`: the text of a 64-bit integer, written back
//! the same) and there are at most [`max_ints`] of them, the entry's value bytes are
//! the integers, 8 bytes each (little-endian), in ascending order: a lookup is a binary
//! search, and the members come out in numeric order, as Redis's intset gives them.
//!
//! **Packed** (tag `SET_PACKED`, `listpack`): the members as packed elements
//! (`crate::packed`) in the order they were added, while there are at most
//! [`max_packed_entries`] of them and each is at most [`max_packed_value`] bytes. A
//! lookup scans them; a new member goes at the end.
//!
//! **Table** (tag `SET_TABLE`, `hashtable`): the big hash's table (`hash.rs`), each
//! member a field with an empty value: a B-tree in the order of a keyed hash of the
//! member, so that an SSCAN cursor is a hash with the keyspace's guarantee (a member
//! present for the whole scan is returned). Its memory count is the members' bytes
//! plus [`MEMBER_OVERHEAD`] each.
//!
//! A set of integers that gets a member that is not one becomes packed if it is small
//! enough for that, else a table; one that passes [`max_ints`] becomes a table; a
//! packed one that passes its thresholds becomes a table. None ever goes back
//! (invariant 3 of docs/kv-types.md). The keyspace keeps memory, stamps and invariant
//! 2 (no empty set) around these functions (`Keyspace::modify`).

use super::entry::Entry;
use super::hash::{HashTable, FIELD_OVERHEAD};
use super::state;
use super::value::{self, tag};
use crate::log::{Items, RecordRef};
use crate::packed;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static MAX_INTS: AtomicUsize = AtomicUsize::new(512);
static MAX_PACKED_ENTRIES: AtomicUsize = AtomicUsize::new(128);
static MAX_PACKED_VALUE: AtomicUsize = AtomicUsize::new(64);

/// The most members a set of integers has (`set-max-intset-entries`, 512).
#[inline]
pub fn max_ints() -> usize {
    MAX_INTS.load(Relaxed)
}

/// The most members a packed set has (`set-max-listpack-entries`, 128).
#[inline]
pub fn max_packed_entries() -> usize {
    MAX_PACKED_ENTRIES.load(Relaxed)
}

/// The longest member a packed set has (`set-max-listpack-value`, 64).
#[inline]
pub fn max_packed_value() -> usize {
    MAX_PACKED_VALUE.load(Relaxed)
}

/// Sets the thresholds (CONFIG SET): later writes convert by them.
pub fn set_thresholds(ints: Option<usize>, entries: Option<usize>, value: Option<usize>) {
    for (n, to) in [
        (ints, &MAX_INTS),
        (entries, &MAX_PACKED_ENTRIES),
        (value, &MAX_PACKED_VALUE),
    ] {
        if let Some(n) = n {
            to.store(n, Relaxed);
        }
    }
}

/// Bytes a table counts per member besides its bytes (the table's per-field count).
pub const MEMBER_OVERHEAD: u64 = FIELD_OVERHEAD;

/// The integer a member is, if it is one a set of integers may hold: the text Redis's
/// `string2ll` reads (no sign but `-`, no leading zero, no space), which the integer's
/// decimal text gives back exactly.
#[inline]
pub fn int_of(member: &[u8]) -> Option<i64> {
    crate::commands::parse_i64(member)
}

/// One member as the set holds it: bytes in the entry or the table, or an integer of a
/// set of integers, written out in decimal. Dereferences to its bytes.
pub enum Member<'a> {
    /// Bytes held by the set.
    Bytes(&'a [u8]),
    /// An integer's decimal text (at most 20 bytes) and its length.
    Int([u8; 20], u8),
}

impl<'a> Member<'a> {
    fn int(v: i64) -> Member<'a> {
        let mut b = itoa::Buffer::new();
        let t = b.format(v).as_bytes();
        let mut out = [0u8; 20];
        out[..t.len()].copy_from_slice(t);
        Member::Int(out, t.len() as u8)
    }
}

impl std::ops::Deref for Member<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Member::Bytes(b) => b,
            Member::Int(b, n) => &b[..*n as usize],
        }
    }
}

/// The `i`-th integer of a set of integers' bytes.
#[inline]
fn int_at(bytes: &[u8], i: usize) -> i64 {
    i64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// Where `v` is in a set of integers' bytes (`Ok`), or where it would go (`Err`).
fn find_int(bytes: &[u8], v: i64) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, bytes.len() / 8);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match int_at(bytes, mid).cmp(&v) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// Where `member` is in packed bytes: its element's start and end.
fn find_packed(bytes: &[u8], member: &[u8]) -> Option<(usize, usize)> {
    let mut at = 0;
    while at < bytes.len() {
        let (m, n) = packed::read(&bytes[at..]).expect("whole packed members");
        if m == member {
            return Some((at, at + n));
        }
        at += n;
    }
    None
}

/// The table of a big set entry.
fn table(e: &Entry) -> &HashTable {
    debug_assert_eq!(e.tag(), tag::SET_TABLE);
    // SAFETY: the entry's tag says its bytes hold its table, which lives as long as it.
    unsafe { value::table(e.value()) }
}

fn table_mut(e: &mut Entry) -> &mut HashTable {
    debug_assert_eq!(e.tag(), tag::SET_TABLE);
    // SAFETY: as in `table`; `&mut Entry` makes the access unique.
    unsafe { value::table_mut(e.value_mut()) }
}

/// The number of members of a set entry.
pub fn len(e: &Entry) -> usize {
    match e.tag() {
        tag::SET_INTS => e.value().len() / 8,
        tag::SET_PACKED => packed::Iter::new(e.value()).count(),
        _ => table(e).len(),
    }
}

/// Whether a set entry has no member left.
pub fn is_empty(e: &Entry) -> bool {
    match e.tag() {
        tag::SET_INTS | tag::SET_PACKED => e.value().is_empty(),
        _ => table(e).is_empty(),
    }
}

/// Whether a set entry has `member`.
pub fn contains(e: &Entry, member: &[u8]) -> bool {
    match e.tag() {
        tag::SET_INTS => int_of(member).is_some_and(|v| find_int(e.value(), v).is_ok()),
        tag::SET_PACKED => find_packed(e.value(), member).is_some(),
        _ => table(e).get(member).is_some(),
    }
}

/// The members of a set entry, one after another.
pub enum Iter<'a> {
    /// Of a set of integers, in ascending order.
    Ints(std::slice::ChunksExact<'a, u8>),
    /// Of a packed set, in the order they were added.
    Packed(packed::Iter<'a>),
    /// Of a table, in hash order.
    Table(Box<dyn Iterator<Item = (&'a [u8], &'a [u8])> + 'a>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        match self {
            Iter::Ints(c) => c
                .next()
                .map(|b| Member::int(i64::from_le_bytes(b.try_into().expect("8 bytes")))),
            Iter::Packed(p) => p.next().map(Member::Bytes),
            Iter::Table(t) => t.next().map(|(m, _)| Member::Bytes(m)),
        }
    }
}

/// The members of a set entry: a set of integers' in ascending order, a packed set's
/// in the order they were added, a table's in hash order.
pub fn iter(e: &Entry) -> Iter<'_> {
    match e.tag() {
        tag::SET_INTS => Iter::Ints(e.value().chunks_exact(8)),
        tag::SET_PACKED => Iter::Packed(packed::Iter::new(e.value())),
        _ => Iter::Table(Box::new(table(e).iter())),
    }
}

/// A member of a set entry of `len` members chosen uniformly at random, from the random
/// numbers `rnd` gives (a table's: `HashTable::random_uniform`).
pub fn random(e: &Entry, len: usize, mut rnd: impl FnMut() -> u64) -> Member<'_> {
    match e.tag() {
        tag::SET_INTS => Member::int(int_at(e.value(), (rnd() % len as u64) as usize)),
        tag::SET_PACKED => iter(e)
            .nth((rnd() % len as u64) as usize)
            .expect("a member"),
        _ => Member::Bytes(table(e).random_uniform(rnd).expect("a member").0),
    }
}

/// One SSCAN step over a set entry: calls `f` with the members of about `count` hashes
/// from `cursor` on (a small set: all of them at once), and answers the next cursor, or
/// 0 when done.
pub fn scan(e: &Entry, cursor: u64, count: usize, mut f: impl FnMut(&[u8])) -> u64 {
    if e.tag() == tag::SET_TABLE {
        return table(e).scan(cursor, count, |m, _| f(m));
    }
    for m in iter(e) {
        f(&m);
    }
    0
}

/// Converts a set entry of integers or packed members to a table.
fn to_table(e: &mut Entry) {
    let mut t = HashTable::default();
    for m in iter(e) {
        t.set(&m, b"");
    }
    let p = Box::into_raw(Box::new(t)) as *mut u8;
    e.set_payload(tag::SET_TABLE, &value::ptr_bytes(p));
}

/// Converts a set entry of integers to packed members (in ascending order).
fn to_packed(e: &mut Entry) {
    let mut b = Vec::with_capacity(e.value().len() / 8 * 21);
    for m in iter(e) {
        packed::put(&mut b, &m);
    }
    e.set_payload(tag::SET_PACKED, &b);
}

/// Adds `member` to a set entry (converting it past the thresholds): whether it is new.
pub fn add(e: &mut Entry, member: &[u8]) -> bool {
    if e.tag() == tag::SET_INTS {
        match int_of(member) {
            Some(v) => {
                let Err(at) = find_int(e.value(), v) else {
                    return false;
                };
                if e.value().len() / 8 < max_ints() {
                    e.splice(at * 8..at * 8, &v.to_le_bytes());
                    return true;
                }
                to_table(e);
            }
            None => {
                let n = e.value().len() / 8;
                let max = max_packed_value();
                // The longest integer's text, of the smallest or the largest.
                let longest = match n {
                    0 => 0,
                    _ => Member::int(int_at(e.value(), 0))
                        .len()
                        .max(Member::int(int_at(e.value(), n - 1)).len()),
                };
                if n < max_packed_entries() && member.len() <= max && longest <= max {
                    to_packed(e);
                } else {
                    to_table(e);
                }
            }
        }
    }
    if e.tag() == tag::SET_PACKED {
        if find_packed(e.value(), member).is_some() {
            return false;
        }
        if len(e) < max_packed_entries() && member.len() <= max_packed_value() {
            let mut n = [0u8; packed::MAX_LEN_BYTES];
            let k = packed::write_len(&mut n, member.len());
            let at = e.value().len();
            e.splice_parts(at..at, &[&n[..k], member]);
            return true;
        }
        to_table(e);
    }
    table_mut(e).set(member, b"")
}

/// Removes `member` from a set entry: whether it was there. (The caller removes a set
/// left empty.)
pub fn remove(e: &mut Entry, member: &[u8]) -> bool {
    match e.tag() {
        tag::SET_INTS => {
            let Some(Ok(at)) = int_of(member).map(|v| find_int(e.value(), v)) else {
                return false;
            };
            e.splice(at * 8..at * 8 + 8, b"");
            true
        }
        tag::SET_PACKED => {
            let Some((start, end)) = find_packed(e.value(), member) else {
                return false;
            };
            e.splice(start..end, b"");
            true
        }
        _ => table_mut(e).remove(member),
    }
}

/// A new set entry for `key` holding the members of `items` (a repeated one once), in
/// the smallest encoding they fit. `items` must not be empty.
pub fn new_entry(key: &[u8], items: Items<'_>, expire: Option<NonZeroU64>, stamp: u64) -> Entry {
    debug_assert!(!items.is_empty());
    let mut e = Entry::with_tag(tag::SET_INTS, key, b"", expire, stamp);
    if items.len() > max_ints() && items.len() > max_packed_entries() {
        // Big from the start: straight to a table (no conversion on the way).
        to_table(&mut e);
    }
    for m in items.iter() {
        add(&mut e, m);
    }
    e
}

/// Logs a set entry's whole state as records, through `f`: one `Members` record (for a
/// big set, of its first members), then `SAdd` records of the rest, each of at most
/// [`crate::log::ITEMS_PER_RECORD`] bytes of members unless one member alone is
/// larger (compaction, a set's creation, the STORE commands).
pub fn state_records(e: &Entry, f: impl FnMut(RecordRef<'_>)) {
    state::records(e, &KINDS, f, |runs| {
        for m in iter(e) {
            runs.push(&[&m]);
        }
    });
}

/// The records a set's state is logged as ([`state::Kinds`]).
const KINDS: state::Kinds = state::Kinds {
    packed: tag::SET_PACKED,
    create: |key, expire_at_ms, items| RecordRef::Members {
        key,
        expire_at_ms,
        items,
    },
    add: |key, items| RecordRef::SAdd { key, items },
};

/// A piece of a big set's state ([`state::piece`]): the members of about `most`
/// hashes from scan cursor `from` (0: the first piece, which creates the key; a set
/// that is not a table: all of it); the cursor of the next piece, or `None` after
/// the last.
pub fn state_piece(e: &Entry, from: u64, most: usize, f: impl FnMut(RecordRef<'_>)) -> Option<u64> {
    state::piece(e, &KINDS, from == 0, f, |runs| {
        let next = scan(e, from, most, |m| runs.push(&[m]));
        (next != 0).then_some(next)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet as Model;

    fn check(e: &Entry, model: &Model<Vec<u8>>) {
        assert_eq!(len(e), model.len());
        for m in model {
            assert!(contains(e, m), "{m:?}");
        }
        let mut all: Vec<Vec<u8>> = iter(e).map(|m| m.to_vec()).collect();
        all.sort();
        assert_eq!(all, model.iter().cloned().collect::<Vec<_>>());
        let mut walked = Vec::new();
        let mut cursor = 0;
        loop {
            cursor = scan(e, cursor, 3, |m| walked.push(m.to_vec()));
            if cursor == 0 {
                break;
            }
        }
        walked.sort();
        assert_eq!(walked, all);
        let m = match e.tag() {
            tag::SET_TABLE => model.iter().map(|m| m.len() as u64 + MEMBER_OVERHEAD).sum(),
            _ => e.value().len() as u64,
        };
        assert_eq!(e.value_memory(), m);
    }

    /// Random adds and removals agree with a set in every encoding and across each
    /// conversion: integers to packed (a word), integers to a table (count), packed to
    /// a table (count, length).
    #[test]
    fn behaves_like_a_set_in_every_encoding() {
        let mut x: u64 = 7;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // (members drawn from, words among them, the tag it ends in)
        let rounds = [
            (100u64, false, tag::SET_INTS),
            (2000, false, tag::SET_TABLE),
            (60, true, tag::SET_PACKED),
            (400, true, tag::SET_TABLE),
        ];
        for (space, words, want) in rounds {
            let mut e = new_entry(b"s", Items::Slices(&[b"5"]), None, 1);
            assert_eq!(e.tag(), tag::SET_INTS);
            let mut model = Model::from([b"5".to_vec()]);
            for _ in 0..4000 {
                let v = rnd(space) as i64 - space as i64 / 2;
                let m = if words && rnd(4) == 0 {
                    format!("w{v}").into_bytes()
                } else {
                    v.to_string().into_bytes()
                };
                if rnd(3) == 0 {
                    assert_eq!(remove(&mut e, &m), model.remove(&m));
                    if model.is_empty() {
                        assert!(is_empty(&e));
                        add(&mut e, b"5");
                        model.insert(b"5".to_vec());
                    }
                } else {
                    assert_eq!(add(&mut e, &m), model.insert(m));
                }
                match e.tag() {
                    tag::SET_INTS => assert!(model.len() <= max_ints()),
                    tag::SET_PACKED => assert!(model.len() <= max_packed_entries()),
                    _ => {}
                }
            }
            check(&e, &model);
            assert_eq!(e.tag(), want);
        }
        // Integers come out in order; "01", "+1" and "-0" are not integers.
        let e = new_entry(b"s", Items::Slices(&[b"3", b"-2", b"10", b"3"]), None, 1);
        let order: Vec<Vec<u8>> = iter(&e).map(|m| m.to_vec()).collect();
        assert_eq!(order, [&b"-2"[..], b"3", b"10"]);
        for not in [&b"01"[..], b"+1", b"-0", b" 1", b"99999999999999999999"] {
            let mut e = new_entry(b"s", Items::Slices(&[b"1"]), None, 1);
            assert!(!contains(&e, not));
            add(&mut e, not);
            assert_eq!(e.tag(), tag::SET_PACKED, "{not:?}");
            assert!(contains(&e, not) && contains(&e, b"1"));
        }
        let mut e = new_entry(b"s", Items::Slices(&[b"1", b"a"]), None, 1);
        add(&mut e, &[b'z'; 65]);
        assert_eq!(e.tag(), tag::SET_TABLE, "a long member converts");
    }

    /// A random member of a big set is drawn uniformly: 200,000 draws from 1,000
    /// members give each about 200 (a member drawn fewer than 100 or more than 320
    /// times has a chance below 10^-9 under a uniform draw), and a set of few members
    /// in a table draws each too.
    #[test]
    fn random_members_of_a_table_are_uniform() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let items: Vec<Vec<u8>> = (0..1000)
            .map(|i| format!("member{i}").into_bytes())
            .collect();
        let e = new_entry(b"s", Items::Owned(&items), None, 1);
        assert_eq!(e.tag(), tag::SET_TABLE);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..200_000 {
            *counts
                .entry(random(&e, 1000, &mut rnd).to_vec())
                .or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 1000);
        for (m, n) in &counts {
            assert!(
                (100..=320).contains(n),
                "{} drawn {n} times",
                String::from_utf8_lossy(m)
            );
        }
        let mut small = new_entry(b"t", Items::Owned(&items), None, 1);
        for m in &items[3..] {
            remove(&mut small, m);
        }
        assert_eq!((small.tag(), len(&small)), (tag::SET_TABLE, 3));
        let drawn: Model<Vec<u8>> = (0..300)
            .map(|_| random(&small, 3, &mut rnd).to_vec())
            .collect();
        assert_eq!(drawn.len(), 3);
    }

    /// A set's state records rebuild it: a packed one as one record copied whole, a big
    /// one as a Members and SAdd records of bounded size.
    #[test]
    fn state_records_rebuild_the_set() {
        for (n, wide) in [(3usize, false), (3, true), (300, false), (9000, true)] {
            let items: Vec<Vec<u8>> = (0..n)
                .map(|i| match wide {
                    true => format!("member{i}-{}", "x".repeat(200)).into_bytes(),
                    false => i.to_string().into_bytes(),
                })
                .collect();
            let e = new_entry(b"k", Items::Owned(&items), NonZeroU64::new(77), 1);
            let recs = state::encoded(&e);
            assert_eq!(recs.len() > 1, n == 9000);
            let mut back: Option<Entry> = None;
            for r in &recs {
                let (rec, _) = crate::log::decode_ref(r).unwrap();
                match rec {
                    RecordRef::Members {
                        key,
                        expire_at_ms,
                        items,
                    } => {
                        assert_eq!((key, expire_at_ms), (&b"k"[..], Some(77)));
                        back = Some(new_entry(key, items, NonZeroU64::new(77), 0));
                    }
                    RecordRef::SAdd { items, .. } => {
                        assert!(items.packed_len() <= crate::log::ITEMS_PER_RECORD);
                        let b = back.as_mut().unwrap();
                        for m in items.iter() {
                            add(b, m);
                        }
                    }
                    r => panic!("{r:?}"),
                }
            }
            let back = back.unwrap();
            assert_eq!(back.tag(), e.tag());
            let mut a: Vec<Vec<u8>> = iter(&e).map(|m| m.to_vec()).collect();
            let mut b: Vec<Vec<u8>> = iter(&back).map(|m| m.to_vec()).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b);
        }
    }
}
