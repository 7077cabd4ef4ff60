//! A big key's state in pieces, for a compaction that must not hold its worker for
//! the whole of one key (`crate::compact`).
//!
//! A hash, set, sorted set or list of more than a piece's elements is logged as its
//! usual whole-state records ([`Keyspace::state_records`]) cut at piece boundaries: the
//! first piece starts with the record that creates the key (replacing whatever the key
//! held), each later piece adds to it with the type's add records (`HSet`, `SAdd`,
//! `ZAdd`, `RPush`). A position says where the next piece starts: a scan cursor for a
//! hash or set (their tables are ordered by field hash), a rank for a sorted set, a
//! node for a list; 0 is the start. The positions hold only while the key is
//! unchanged: the compaction starts a key over when it changes between its pieces.
//!
//! ```text
//! walk_deferring(cursor, keys, now, most, f, defer)   a walk step; big keys to `defer`
//! is_big(e, most)                                      more than `most` elements
//! state_piece(e, from, most, f)                        one piece; the next position
//! ```
//!
//! Strings and streams are written whole.

use super::{hash, list, set, tag, zset, Entry, Keyspace};
use crate::log::RecordRef;

impl Keyspace {
    /// One compaction step as [`Keyspace::walk`], except that each live key of more
    /// than `most` elements ([`is_big`]) goes to `defer` instead of `f`: the caller
    /// writes it in pieces.
    pub fn walk_deferring(
        &self,
        cursor: u64,
        max_keys: usize,
        now_ms: u64,
        most: usize,
        mut f: impl FnMut(RecordRef<'_>),
        mut defer: impl FnMut(&[u8]),
    ) -> u64 {
        self.visit(cursor, max_keys.max(1), |e| {
            if e.expired(now_ms) {
            } else if is_big(e, most) {
                defer(e.key());
            } else {
                Self::state_records(e, &mut f);
            }
        })
    }

    /// The live entry of `key` for a compaction: unlike [`Keyspace::peek`], it counts
    /// as no access and as no read.
    pub fn for_compaction(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let e = self.index.at(self.index.find(self.hash(key), key)?);
        (!e.expired(now_ms)).then_some(e)
    }
}

/// Whether `e` is a hash, set, sorted set or list of more than `most` elements (one
/// the compaction writes in pieces).
pub fn is_big(e: &Entry, most: usize) -> bool {
    match e.tag() {
        tag::HASH_TABLE => hash::len(e) > most,
        tag::SET_TABLE => set::len(e) > most,
        tag::ZSET_SKIP => zset::len(e) > most,
        tag::LIST_QUICK => list::len(e) > most,
        _ => false,
    }
}

/// Logs through `f` the piece of big entry `e`'s state ([`is_big`]) that starts at
/// position `from` (0: the first, which creates the key) and has about `most`
/// elements; answers the position of the next piece, or `None` after the last.
pub fn state_piece(e: &Entry, from: u64, most: usize, f: impl FnMut(RecordRef<'_>)) -> Option<u64> {
    match e.tag() {
        tag::HASH_TABLE => hash::state_piece(e, from, most, f),
        tag::SET_TABLE => set::state_piece(e, from, most, f),
        tag::ZSET_SKIP => zset::state_piece(e, from, most, f),
        tag::LIST_QUICK => list::state_piece(e, from, most, f),
        _ => {
            debug_assert_eq!(from, 0, "a key not in pieces starts at 0");
            Keyspace::state_records(e, f);
            None
        }
    }
}
