//! A big key's state in pieces, for a compaction that must not hold its worker for
//! the whole of one key (`crate::compact`).
//!
//! A hash, set, sorted set, list or stream of more than a piece is logged as its
//! usual whole-state records ([`Keyspace::state_records`]) cut at piece boundaries: the
//! first piece starts with the record that creates the key (replacing whatever the key
//! held), each later piece adds to it with the type's add records (`HSet`, `SAdd`,
//! `ZAdd`, `RPush`, `XAdd`; a stream's last piece also has its groups, consumers and
//! pending entries, whole). A position says where the next piece starts: a scan
//! cursor for a hash or set (their tables are ordered by field hash), the last
//! (score, member) written for a sorted set, a node for a list, an entry's ID for a
//! stream ([`At`]). A hash's, set's and sorted set's positions are elements of their
//! order, which a change to other elements does not move ([`goes_on`]): the compaction
//! goes on over such a key's current state when it changes between pieces. A list's
//! and a stream's hold only while the key is unchanged: the compaction starts such a
//! key over when it changes.
//!
//! ```text
//! walk_deferring(cursor, keys, now, size, f, defer)   a walk step; big keys to `defer`
//! piece_len(e, size)                                   the elements of a piece of `e`
//! is_big(e, size)                                      more than one piece
//! state_piece(e, from, n, f)                           one piece; the next position
//! goes_on(e), identity(e)                              pieces over a changing key
//! ```
//!
//! A piece has at most [`Size::elements`] elements, and fewer if the key's elements
//! are large: as many as take about [`Size::bytes`] of the key's memory on average.
//!
//! Strings are written whole.

use super::{hash, list, set, stream, tag, value, zset, Entry, Keyspace};
use crate::log::RecordRef;

/// The size of a piece: at most `elements` elements and about `bytes` of memory.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// The most elements a piece has.
    pub elements: usize,
    /// The memory a piece's elements take, about (by the key's average element).
    pub bytes: u64,
}

impl Keyspace {
    /// One compaction step as [`Keyspace::walk`], except that each live key of more
    /// than one piece of `size` ([`is_big`]) goes to `defer` instead of `f`: the
    /// caller writes it in pieces.
    pub fn walk_deferring(
        &self,
        cursor: u64,
        max_keys: usize,
        now_ms: u64,
        size: Size,
        mut f: impl FnMut(RecordRef<'_>),
        mut defer: impl FnMut(&[u8]),
    ) -> u64 {
        self.visit(cursor, max_keys.max(1), |e| {
            if e.expired(now_ms) {
            } else if is_big(e, size) {
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

/// The elements of a hash, set, sorted set or list kept in a table, tree or
/// quicklist, or the entries of a stream (the encodings written in pieces); 0 for any
/// other entry.
fn elements(e: &Entry) -> usize {
    match e.tag() {
        tag::HASH_TABLE => hash::len(e),
        tag::SET_TABLE => set::len(e),
        tag::ZSET_SKIP => zset::len(e),
        tag::LIST_QUICK => list::len(e),
        tag::STREAM => stream::of(e).len(),
        _ => 0,
    }
}

/// The elements of a piece of `e`: at most `size.elements`, and as many as take
/// about `size.bytes` of its memory on average (at least one).
pub fn piece_len(e: &Entry, size: Size) -> usize {
    let memory = e.value_memory().max(1) as u128;
    let by_bytes = size.bytes as u128 * elements(e) as u128 / memory;
    size.elements
        .min(by_bytes.min(usize::MAX as u128) as usize)
        .max(1)
}

/// Whether `e` is a hash, set, sorted set, list or stream of more than one piece (one the
/// compaction writes in pieces).
pub fn is_big(e: &Entry, size: Size) -> bool {
    let n = elements(e);
    n > 1 && n > piece_len(e, size)
}

/// Where the next piece of a big key starts ([`state_piece`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum At {
    /// The first piece, which creates the key.
    #[default]
    Start,
    /// A hash's or set's scan cursor (a field hash), a list's node, a stream's ID.
    Pos(u128),
    /// A sorted set's last member written, with its score.
    After(f64, Box<[u8]>),
}

/// Whether the pieces of `e` go on over its current state after it changes: its
/// records set each element's state (never a relative change) and its pieces are
/// taken in an order of the elements themselves (a hash's or set's field hashes, a
/// sorted set's (score, member) order), so an element never moves across the position
/// unless it is written to. Not a list (positions shift) nor a stream.
pub fn goes_on(e: &Entry) -> bool {
    matches!(e.tag(), tag::HASH_TABLE | tag::SET_TABLE | tag::ZSET_SKIP)
}

/// What the pieces of a key go on over: its type and encoding (its tag) and the
/// address of its table or tree. A key removed and made again, or given another value,
/// has another (the address of a freed table may come back, harmlessly: `compact.rs`).
pub fn identity(e: &Entry) -> (u8, usize) {
    let at = if goes_on(e) {
        value::read_ptr(e.value()) as usize
    } else {
        0
    };
    (e.tag(), at)
}

/// Logs through `f` the piece of big entry `e`'s state ([`is_big`]) that starts at
/// `from` ([`At::Start`]: the first, which creates the key) and has about `most`
/// elements ([`piece_len`]); answers where the next piece starts, or `None` after the
/// last.
pub fn state_piece(
    e: &Entry,
    from: &At,
    most: usize,
    mut f: impl FnMut(RecordRef<'_>),
) -> Option<At> {
    let pos = match from {
        At::Pos(p) => *p,
        _ => 0,
    };
    let at = pos as u64;
    let next = match e.tag() {
        tag::HASH_TABLE => hash::state_piece(e, at, most, f),
        tag::SET_TABLE => set::state_piece(e, at, most, f),
        tag::ZSET_SKIP => {
            let after = match from {
                At::After(s, m) => Some((*s, &**m)),
                _ => None,
            };
            return zset::state_piece(e, after, most, f).map(|(s, m)| At::After(s, m));
        }
        tag::LIST_QUICK => list::state_piece(e, at, most, f),
        tag::STREAM => {
            let key = e.key();
            return stream::state_piece(e, pos, most, |kind, body| {
                f(RecordRef::Stream { kind, key, body })
            })
            .map(At::Pos);
        }
        _ => {
            debug_assert_eq!(*from, At::Start, "a key not in pieces starts at its start");
            Keyspace::state_records(e, f);
            None
        }
    };
    next.map(|n| At::Pos(n.into()))
}
