//! The keyspace's index: a hash table kept in hash order, grown incrementally.
//!
//! # Layout
//! Open addressing with linear probing over slots of 16 bytes (the key's 56-bit hash
//! and a pointer to its [`Entry`]). A key's *home* slot is the top `bits` bits of its
//! hash, so home slots are in hash order, and every cluster (run of occupied slots) is
//! kept **sorted by hash**: an insert goes after the entries of smaller or equal hash
//! and shifts the later ones right by one; a removal shifts the displaced entries that
//! follow it back by one. So the occupied slots of the whole table are in hash order
//! (an entry at slot `i` has its home at or before `i`, and everything between is
//! occupied), and:
//! - a lookup goes from the home slot and stops at the first empty slot or larger
//!   hash: at a load of at most 0.8, a few slots of one or two cache lines, found or
//!   not; keys sharing a hash are neighbours, compared by key;
//! - a walk in hash order (SCAN, compaction) is a walk through the slots, and a cursor
//!   (a hash) is resumed from its home slot, skipping smaller hashes.
//!
//! There is no wrap-around: a cluster that runs past the last home slot goes on into
//! slack slots at the end, more of which are added if ever needed.
//!
//! # Growth, a few entries at a time
//! When an insert would take the load past 0.8, a table of twice as many slots starts
//! (allocated zeroed: pages are only touched as they fill), and the old one is drained
//! from its first slot on: each insert or removal moves the entries of a few old slots
//! (`MIGRATE_STEP`) into the new table. Meanwhile new keys go into the new table, a
//! lookup that misses there looks in the old one, and a walk merges the two tables'
//! hash orders (each entry is in exactly one of them, and moving an entry does not
//! change its hash, so a cursor means the same before and after). No operation waits
//! for a whole rehash, and the old table only empties: it never fills past the load
//! it had, whatever order keys arrive in (start-up inserts them sorted by hash). Peak
//! memory is the old table plus the new one (three times the old table's slots)
//! while it drains.
//! Positions change as entries move, so a [`Pos`] is valid only until the next insert
//! or removal.

use super::entry::Entry;

/// A load (entries per home slot) above which the table grows: 4/5.
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;

/// Slots examined (moved or skipped) in the old table per insert or removal while
/// the table grows.
const MIGRATE_STEP: usize = 32;

/// The smallest table: 2^MIN_BITS home slots.
const MIN_BITS: u32 = 4;

/// One slot: empty when `entry` is `None`.
#[derive(Default)]
struct Slot {
    hash: u64,
    entry: Option<Entry>,
}

const _: () = assert!(core::mem::size_of::<Slot>() == 16);

/// One table: `2^bits` home slots, then slack.
struct Table {
    bits: u32,
    slots: Vec<Slot>,
}

impl Table {
    fn with_bits(bits: u32) -> Table {
        let homes = 1usize << bits;
        let n = homes + 32 + homes / 64;
        let layout = std::alloc::Layout::array::<Slot>(n).expect("table size");
        // SAFETY: the layout is not empty; all-zero bytes are a valid Slot (hash 0,
        // entry None: Entry is a repr(transparent) NonNull, so `Option<Entry>` is None
        // when null), so the Vec built over the zeroed allocation has `n` initialized
        // elements, with the capacity and alignment it was allocated with by the
        // global allocator, as a Vec's own. (Zeroed memory comes from fresh pages for a
        // large table: nothing is touched until used.)
        let slots = unsafe {
            let p = std::alloc::alloc_zeroed(layout) as *mut Slot;
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Vec::from_raw_parts(p, n, n)
        };
        Table { bits, slots }
    }

    #[inline]
    fn homes(&self) -> usize {
        1 << self.bits
    }

    #[inline]
    fn home(&self, h: u64) -> usize {
        (h >> (56 - self.bits)) as usize
    }

    /// The slot of `key` (hash `h`).
    #[inline]
    fn find(&self, h: u64, key: &[u8]) -> Option<usize> {
        let mut i = self.home(h);
        while let Some(Slot {
            hash,
            entry: Some(e),
        }) = self.slots.get(i)
        {
            if *hash > h {
                return None;
            }
            if *hash == h && e.key() == key {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// The first slot at or after `h`'s home holding a hash `>= h` (or an empty slot,
    /// or the end).
    #[inline]
    fn seek(&self, h: u64) -> usize {
        let mut i = self.home(h);
        while let Some(Slot {
            hash,
            entry: Some(_),
        }) = self.slots.get(i)
        {
            if *hash >= h {
                break;
            }
            i += 1;
        }
        i
    }

    /// Inserts (the key is not there); answers its slot.
    fn insert(&mut self, h: u64, e: Entry) -> usize {
        let mut i = self.home(h);
        while matches!(self.slots.get(i), Some(s) if s.entry.is_some() && s.hash <= h) {
            i += 1;
        }
        let mut free = i;
        while matches!(self.slots.get(free), Some(s) if s.entry.is_some()) {
            free += 1;
        }
        if free == self.slots.len() {
            // Past the slack (never seen in practice): more slack.
            let more = 32 + self.homes() / 64;
            self.slots
                .resize_with(self.slots.len() + more, Slot::default);
        }
        // Shift i..free right by one: the empty slot at `free` comes to `i`.
        self.slots[i..=free].rotate_right(1);
        self.slots[i] = Slot {
            hash: h,
            entry: Some(e),
        };
        i
    }

    /// Removes the entry at `i`, shifting back the displaced entries after it.
    fn remove(&mut self, i: usize) -> Entry {
        let e = self.slots[i].entry.take().expect("an occupied slot");
        let mut end = i + 1;
        while matches!(self.slots.get(end), Some(s) if s.entry.is_some() && self.home(s.hash) < end)
        {
            end += 1;
        }
        // The empty slot at `i` goes to `end - 1`.
        self.slots[i..end].rotate_left(1);
        e
    }

    /// The entries with hash `>= from`, in hash order.
    fn iter_from(&self, from: u64) -> impl Iterator<Item = (u64, &Entry)> {
        self.slots[self.seek(from)..]
            .iter()
            .filter_map(move |s| Some((s.hash, s.entry.as_ref()?)))
            .filter(move |&(h, _)| h >= from)
    }
}

/// How far ahead of its visits [`Index::visit`] starts loading entries.
const VISIT_AHEAD: usize = 8;

/// Where an entry is: valid until the next insert or removal.
#[derive(Clone, Copy, Debug)]
pub struct Pos {
    old: bool,
    i: usize,
}

/// The index: hash to entry, in hash order.
pub struct Index {
    /// The table (while growing, the new one).
    new: Table,
    /// While growing: the old table, being drained.
    old: Option<Table>,
    /// While growing: no entry of the old table is before this slot.
    drained: usize,
    len: usize,
}

impl Index {
    /// An empty index.
    pub fn new() -> Index {
        Index {
            new: Table::with_bits(MIN_BITS),
            old: None,
            drained: 0,
            len: 0,
        }
    }

    /// The number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The tables, the old one (while growing) last.
    #[inline]
    fn tables(&self) -> impl Iterator<Item = &Table> {
        std::iter::once(&self.new).chain(self.old.as_ref())
    }

    /// Where `key` (hash `h`) is.
    #[inline]
    pub fn find(&self, h: u64, key: &[u8]) -> Option<Pos> {
        if let Some(i) = self.new.find(h, key) {
            return Some(Pos { old: false, i });
        }
        let i = self.old.as_ref()?.find(h, key)?;
        Some(Pos { old: true, i })
    }

    fn table_of(&self, old: bool) -> &Table {
        if old {
            self.old.as_ref().expect("growing")
        } else {
            &self.new
        }
    }

    /// The entry at `p`.
    #[inline]
    pub fn at(&self, p: Pos) -> &Entry {
        self.table_of(p.old).slots[p.i]
            .entry
            .as_ref()
            .expect("an occupied slot")
    }

    /// The entry at `p`, to change (its key must stay the same).
    #[inline]
    pub fn at_mut(&mut self, p: Pos) -> &mut Entry {
        let t = if p.old {
            self.old.as_mut().expect("growing")
        } else {
            &mut self.new
        };
        t.slots[p.i].entry.as_mut().expect("an occupied slot")
    }

    /// Inserts an entry whose key is not in the index.
    pub fn insert(&mut self, h: u64, e: Entry) {
        if self.len + 1 > self.new.homes() / LOAD_DEN * LOAD_NUM && self.new.bits < 56 {
            if self.old.is_some() {
                // Grown again before the last growth finished (not with this step
                // and load): finish it first.
                self.migrate(usize::MAX);
            }
            let bigger = Table::with_bits(self.new.bits + 1);
            self.old = Some(std::mem::replace(&mut self.new, bigger));
            self.drained = 0;
        }
        self.new.insert(h, e);
        self.len += 1;
        self.migrate(MIGRATE_STEP);
    }

    /// Makes room for `n` entries in all, at once (start-up, before a batch of keys
    /// sorted by hash: inserted in that order into a table sized for fewer keys, they
    /// would all pile into one cluster at its start, since the table's size follows the
    /// count so far, not the hashes' range).
    pub fn reserve(&mut self, n: usize) {
        let mut bits = self.new.bits;
        while n > (1usize << bits) / LOAD_DEN * LOAD_NUM && bits < 56 {
            bits += 1;
        }
        if bits == self.new.bits {
            return;
        }
        self.migrate(usize::MAX);
        let mut old = std::mem::replace(&mut self.new, Table::with_bits(bits));
        for s in old.slots.iter_mut() {
            if let Some(e) = s.entry.take() {
                self.new.insert(s.hash, e);
            }
        }
    }

    /// Removes the entry at `p`.
    pub fn remove(&mut self, p: Pos) -> Entry {
        let e = if p.old {
            self.old.as_mut().expect("growing").remove(p.i)
        } else {
            self.new.remove(p.i)
        };
        self.len -= 1;
        self.migrate(MIGRATE_STEP);
        e
    }

    /// Moves entries from the old table to the new one, from its first slot on,
    /// examining about `budget` old slots; drops the old table when it is empty.
    fn migrate(&mut self, mut budget: usize) {
        let Some(old) = &mut self.old else {
            return;
        };
        while budget > 0 {
            let i = self.drained;
            let Some(slot) = old.slots.get(i) else {
                self.old = None;
                return;
            };
            budget -= 1;
            if slot.entry.is_none() {
                self.drained += 1;
                continue;
            }
            // The first entry of the old table (removing it shifts the next ones of its
            // cluster back into slot `i`).
            let h = slot.hash;
            let e = old.remove(i);
            self.new.insert(h, e);
        }
    }

    /// Where the first entry of hash `h` that `pred` accepts is (keys of one hash are
    /// few: normally one).
    pub fn find_with(&self, h: u64, mut pred: impl FnMut(&Entry) -> bool) -> Option<Pos> {
        for (old, t) in [(false, Some(&self.new)), (true, self.old.as_ref())] {
            let Some(t) = t else { continue };
            let mut i = t.seek(h);
            while let Some(Slot {
                hash,
                entry: Some(e),
            }) = t.slots.get(i)
            {
                if *hash != h {
                    break;
                }
                if pred(e) {
                    return Some(Pos { old, i });
                }
                i += 1;
            }
        }
        None
    }

    /// The entries whose hash is `h` (keys that collide), in no particular order.
    pub fn with_hash(&self, h: u64) -> impl Iterator<Item = &Entry> {
        self.tables().flat_map(move |t| {
            t.iter_from(h)
                .take_while(move |&(g, _)| g == h)
                .map(|(_, e)| e)
        })
    }

    /// Every entry with hash `>= from`, in hash order (while growing, the two tables'
    /// orders merged).
    pub fn iter_from(&self, from: u64) -> impl Iterator<Item = (u64, &Entry)> {
        let mut a = self.new.iter_from(from).peekable();
        let mut b = self
            .old
            .iter()
            .flat_map(move |t| t.iter_from(from))
            .peekable();
        std::iter::from_fn(move || match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if y.0 < x.0 => b.next(),
            (Some(_), _) => a.next(),
            (None, _) => b.next(),
        })
    }

    /// Calls `f` with the entries of `n` hashes from hash `cursor` on (all entries of a
    /// hash together), in hash order; answers the next hash, or 0 when there is none.
    /// (The keyspace's SCAN and compaction steps.)
    ///
    /// The entries are spread over the heap: a second iterator runs
    /// [`VISIT_AHEAD`] entries ahead and starts loading each, so a long walk does not
    /// wait for a cache miss on every key.
    pub fn visit(&self, cursor: u64, n: usize, mut f: impl FnMut(&Entry)) -> u64 {
        let mut it = self.iter_from(cursor).peekable();
        let mut ahead = self.iter_from(cursor);
        for (_, e) in ahead.by_ref().take(VISIT_AHEAD.min(n)) {
            super::prefetch(e.as_ptr());
        }
        let mut hashes = 0;
        while let Some((h, e)) = it.next() {
            if let Some((_, a)) = ahead.next() {
                super::prefetch(a.as_ptr());
            }
            f(e);
            match it.peek() {
                Some(&(g, _)) if g == h => {}
                Some(&(g, _)) => {
                    hashes += 1;
                    if hashes == n {
                        return g;
                    }
                }
                None => return 0,
            }
        }
        0
    }

    /// Removes every entry (and returns to the smallest table).
    pub fn clear(&mut self) {
        *self = Index::new();
    }

    /// Starts loading the slot where `h` would be (a hint for a lookup soon after).
    #[inline]
    pub fn prefetch(&self, h: u64) {
        for t in self.tables() {
            if let Some(s) = t.slots.get(t.home(h)) {
                super::prefetch(s as *const Slot as *const u8);
            }
        }
    }

    /// Starts loading the entry of the first key with hash `h`, if the slots are in the
    /// cache by now (after [`Index::prefetch`]).
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        for t in self.tables() {
            if let Some(Slot {
                hash,
                entry: Some(e),
            }) = t.slots.get(t.seek(h))
            {
                if *hash == h {
                    super::prefetch(e.as_ptr());
                    return;
                }
            }
        }
    }

    #[cfg(test)]
    fn check(&self) {
        // Every table is sorted, every entry at or after its home with no gap between.
        let mut n = 0;
        for t in self.tables() {
            let mut last = 0;
            let mut empty = None; // the last empty slot seen
            for (i, s) in t.slots.iter().enumerate() {
                let Some(_) = &s.entry else {
                    empty = Some(i);
                    continue;
                };
                n += 1;
                assert!(s.hash >= last, "sorted");
                last = s.hash;
                let home = t.home(s.hash);
                assert!(home <= i);
                assert!(empty.is_none_or(|j| j < home), "no gap");
            }
        }
        assert_eq!(n, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rnd(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// The model: (hash, key) to value, in hash order (then key, which the index
    /// does not promise within one hash; compared as sets per hash).
    type Model = BTreeMap<(u64, Vec<u8>), Vec<u8>>;

    fn same(ix: &Index, model: &Model) {
        ix.check();
        let mut got: Vec<(u64, Vec<u8>, Vec<u8>)> = ix
            .iter_from(0)
            .map(|(h, e)| (h, e.key().to_vec(), e.value().to_vec()))
            .collect();
        got.sort();
        let want: Vec<_> = model
            .iter()
            .map(|((h, k), v)| (*h, k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want);
    }

    /// Random inserts and removals against a BTreeMap, with hashes of every width
    /// (narrow ones: long runs of colliding hashes and clusters into the slack),
    /// through several growths.
    #[test]
    fn behaves_like_a_sorted_map() {
        let mut x = 0x1234_5678_9abc_def1u64;
        for mask in [0u64, 3, 0xff, (1 << 56) - 1] {
            let mut ix = Index::new();
            let mut model = Model::new();
            let keys = if mask < 0x100 { 300 } else { 5000 };
            for step in 0..20_000 {
                let k = rnd(&mut x) % keys;
                let key = format!("k{k}").into_bytes();
                // A hash that is a function of the key, narrowed.
                let h = (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & mask;
                let found = ix.find(h, &key);
                assert_eq!(found.is_some(), model.contains_key(&(h, key.clone())));
                if !rnd(&mut x).is_multiple_of(3) {
                    let v = format!("v{step}").into_bytes();
                    match found {
                        Some(p) => ix.at_mut(p).set_value(&v),
                        None => ix.insert(h, Entry::new(&key, &v, None, 0)),
                    }
                    model.insert((h, key), v);
                } else if let Some(p) = found {
                    let e = ix.remove(p);
                    assert_eq!(e.key(), key.as_slice());
                    model.remove(&(h, key));
                }
                if step % 997 == 0 {
                    same(&ix, &model);
                }
            }
            same(&ix, &model);
            // Hash order, and `with_hash` finds exactly the colliding keys.
            let hashes: Vec<u64> = ix.iter_from(0).map(|(h, _)| h).collect();
            assert!(hashes.windows(2).all(|w| w[0] <= w[1]));
            for &h in hashes.iter().step_by(7) {
                let mut got: Vec<Vec<u8>> = ix.with_hash(h).map(|e| e.key().to_vec()).collect();
                got.sort();
                let want: Vec<Vec<u8>> = model
                    .range((h, vec![])..(h + 1, vec![]))
                    .map(|((_, k), _)| k.clone())
                    .collect();
                assert_eq!(got, want);
            }
            // Removing everything empties it, growth or not.
            for ((h, k), _) in std::mem::take(&mut model) {
                let p = ix.find(h, &k).expect("present");
                ix.remove(p);
            }
            same(&ix, &model);
        }
    }

    /// A walk in hash order, resumed from cursors while the table grows (and keys are
    /// inserted and removed between steps), returns every key present throughout
    /// exactly once.
    #[test]
    fn walk_across_growth_sees_each_stable_key_once() {
        let mut x = 0xdead_beef_cafe_f00du64;
        for mask in [0xffu64, (1 << 56) - 1] {
            let mut ix = Index::new();
            let hash = |k: u64| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & mask;
            // Stable keys: present for the whole walk.
            for k in 0..3000u64 {
                ix.insert(
                    hash(k),
                    Entry::new(format!("s{k}").as_bytes(), b"", None, 0),
                );
            }
            let mut churn: Vec<u64> = Vec::new();
            let mut next_churn = 1_000_000u64;
            let mut seen: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
            let mut cursor = 0u64;
            let mut grew = false;
            let per_step = if mask < 0x100 { 2 } else { 50 };
            loop {
                // One step: a few hashes' worth from the cursor (with narrow hashes, few).
                let next = ix.visit(cursor, per_step, |e| {
                    *seen.entry(e.key().to_vec()).or_default() += 1;
                });
                // Between steps: inserts (forcing growth) and removals of other keys.
                for _ in 0..10 {
                    let k = next_churn;
                    next_churn += 1;
                    ix.insert(
                        hash(k),
                        Entry::new(format!("c{k}").as_bytes(), b"", None, 0),
                    );
                    churn.push(k);
                    if rnd(&mut x).is_multiple_of(3) {
                        let j = (rnd(&mut x) as usize) % churn.len();
                        let k = churn.swap_remove(j);
                        let key = format!("c{k}").into_bytes();
                        let p = ix.find(hash(k), &key).expect("churn key");
                        ix.remove(p);
                    }
                }
                grew |= ix.old.is_some();
                ix.check();
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            assert!(grew, "the walk crossed a growth");
            for k in 0..3000u64 {
                assert_eq!(seen.get(format!("s{k}").as_bytes()), Some(&1), "s{k}");
            }
            assert!(seen.values().all(|&n| n == 1));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
            ..Default::default()
        })]

        /// Random inserts, updates, removals and walk steps, over hashes narrowed to
        /// force collisions (or not): the index agrees with a BTreeMap after every
        /// operation (through growths, removals during growth included), and a walk
        /// returns every key present from its start to its end exactly once.
        #[test]
        fn random_operations_and_walks_agree_with_a_model(
            ops in proptest::collection::vec((0u8..8, 0u64..600), 1..2500),
            mask in proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                proptest::strategy::Just(0xfu64),
                proptest::strategy::Just(0x3ffu64),
                proptest::strategy::Just((1u64 << 56) - 1),
            ],
            per_step in 1usize..8,
        ) {
            let hash = |k: u64| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 8) & mask;
            let mut ix = Index::new();
            let mut model = Model::new();
            // The walk: its cursor, the keys present at its start and never removed
            // since, and what it returned.
            let mut cursor = 0u64;
            let mut stable: Vec<Vec<u8>> = Vec::new();
            let mut seen: Vec<Vec<u8>> = Vec::new();
            for (i, &(op, k)) in ops.iter().enumerate() {
                let key = format!("k{k}").into_bytes();
                let h = hash(k);
                match op {
                    0..=3 => {
                        let v = format!("v{i}").into_bytes();
                        match ix.find(h, &key) {
                            Some(p) => ix.at_mut(p).set_value(&v),
                            None => ix.insert(h, Entry::new(&key, &v, None, 0)),
                        }
                        model.insert((h, key), v);
                    }
                    4 | 5 => {
                        let p = ix.find(h, &key);
                        proptest::prop_assert_eq!(p.is_some(), model.remove(&(h, key.clone())).is_some());
                        if let Some(p) = p {
                            let e = ix.remove(p);
                            proptest::prop_assert_eq!(e.key(), key.as_slice());
                        }
                        stable.retain(|s| *s != key);
                    }
                    _ => {
                        if cursor == 0 && seen.is_empty() {
                            stable = model.keys().map(|(_, k)| k.clone()).collect();
                        }
                        cursor = ix.visit(cursor, per_step, |e| seen.push(e.key().to_vec()));
                        if cursor == 0 {
                            for s in &stable {
                                let n = seen.iter().filter(|x| *x == s).count();
                                proptest::prop_assert_eq!(n, 1, "{:?} returned {} times", s, n);
                            }
                            seen.clear();
                        }
                    }
                }
                proptest::prop_assert_eq!(ix.len(), model.len());
            }
            same(&ix, &model);
        }
    }
}
