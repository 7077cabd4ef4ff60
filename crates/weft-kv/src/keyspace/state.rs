//! A collection's whole state as log records: what compaction, COPY, RENAME, RESTORE
//! and the STORE commands log for a key (docs/kv-types.md, invariant 6).
//!
//! Every collection type logs its state the same way: a small one (its packed
//! encoding) as one record whose items are the entry's value copied whole; a big one
//! as a first record that creates the key with its expiry and its first items, then
//! records that add the rest, each of at most [`ITEMS_PER_RECORD`] bytes of items
//! unless one group of items (a field and its value, a list node) alone is larger.
//! A type says which two record kinds those are ([`Kinds`]) and hands its items to
//! [`records`]:
//!
//! ```ignore
//! const KINDS: state::Kinds = state::Kinds {
//!     packed: tag::HASH_PACKED,
//!     create: |key, expire_at_ms, items| RecordRef::Hash { key, expire_at_ms, items },
//!     add: |key, items| RecordRef::HSet { key, items },
//! };
//! state::records(e, &KINDS, f, |runs| {
//!     for (k, v) in table(e).iter() {
//!         runs.push(&[k, v]);
//!     }
//! });
//! ```

use super::entry::Entry;
use crate::log::{Items, RecordRef, ITEMS_PER_RECORD};
use crate::packed::{self, Chunks};

/// The records a collection type's whole state is logged as.
pub struct Kinds {
    /// The tag of the type's packed encoding: an entry with it is logged as one
    /// `create` record of its value.
    pub packed: u8,
    /// The record that makes the key hold a new collection of `items`, expiring at
    /// `expire_at_ms` (Unix milliseconds) or never.
    pub create: for<'r> fn(key: &'r [u8], expire_at_ms: Option<u64>, Items<'r>) -> RecordRef<'r>,
    /// The record that adds `items` to the collection the key holds.
    pub add: for<'r> fn(key: &'r [u8], Items<'r>) -> RecordRef<'r>,
}

/// Logs `e`'s whole state through `f`: an entry with the packed tag as one record of
/// its value, any other as the runs of the items `big` pushes, in the order it pushes
/// them (a `create` record, then `add` records).
pub fn records(
    e: &Entry,
    kinds: &Kinds,
    mut f: impl FnMut(RecordRef<'_>),
    big: impl FnOnce(&mut Runs<'_>),
) {
    let key = e.key();
    let expire_at_ms = e.expire_at_ms();
    if e.tag() == kinds.packed {
        let items = Items::Packed {
            n: packed::Iter::new(e.value()).count(),
            bytes: e.value(),
        };
        return f((kinds.create)(key, expire_at_ms, items));
    }
    piece(e, kinds, true, f, |runs| {
        big(runs);
        None
    });
}

/// Logs a piece of big entry `e`'s state through `f`: the runs of the items `big`
/// pushes, as a `create` record then `add` records if `first` (the piece that starts
/// the key), else as `add` records only. Answers what `big` answers: where the next
/// piece starts, or `None` after the last (a compaction writes a big key a piece at a
/// time: `crate::compact`).
pub fn piece(
    e: &Entry,
    kinds: &Kinds,
    first: bool,
    mut f: impl FnMut(RecordRef<'_>),
    big: impl FnOnce(&mut Runs<'_>) -> Option<u64>,
) -> Option<u64> {
    let key = e.key();
    let expire_at_ms = e.expire_at_ms();
    let mut first = first;
    let mut emit = |n: usize, bytes: &[u8]| {
        let items = Items::Packed { n, bytes };
        f(if std::mem::take(&mut first) {
            (kinds.create)(key, expire_at_ms, items)
        } else {
            (kinds.add)(key, items)
        });
    };
    let mut runs = Runs {
        chunks: Chunks::new(ITEMS_PER_RECORD),
        emit: &mut emit,
    };
    let next = big(&mut runs);
    runs.chunks.finish(runs.emit);
    next
}

/// The items of a big collection being packed into records ([`records`]).
pub struct Runs<'a> {
    chunks: Chunks,
    emit: &'a mut dyn FnMut(usize, &[u8]),
}

impl Runs<'_> {
    /// Adds a group of items kept in one record (a field and its value, a member and
    /// its score, a member alone).
    pub fn push(&mut self, group: &[&[u8]]) {
        self.chunks.push(group, self.emit);
    }

    /// Adds `n` items already packed as `bytes` (a list node), kept in one record.
    pub fn push_packed(&mut self, n: usize, bytes: &[u8]) {
        self.chunks.push_packed(n, bytes, self.emit);
    }
}

/// `e`'s whole-state records ([`super::Keyspace::state_records`]), each encoded as
/// the log holds it: what the types' tests rebuild their values from.
#[cfg(test)]
pub fn encoded(e: &Entry) -> Vec<Vec<u8>> {
    let mut recs = Vec::new();
    super::Keyspace::state_records(e, |r| {
        let mut out = Vec::new();
        crate::log::encode(&r, &mut out);
        recs.push(out);
    });
    recs
}
