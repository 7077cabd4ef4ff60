//! What a key's value is: its type and encoding (the entry's tag), their names for
//! TYPE and OBJECT ENCODING, and the big encodings' boxed structures (dropped and
//! counted here, in one `match` over the tags).
//!
//! A tag is 7 bits of the entry's stamp word's top byte (`entry.rs`). A *packed* encoding
//! keeps the value's bytes in the entry; a *boxed* one keeps there an 8-byte pointer to
//! a structure the entry owns (docs/kv-types.md, "How is a value held?").

use super::hash::HashTable;

/// The tags: a type and its encoding.
pub mod tag {
    /// A string, as SET leaves it (`int` or `embstr` by its bytes).
    pub const STR: u8 = 0;
    /// A string changed in place (APPEND, SETRANGE): `raw`.
    pub const STR_RAW: u8 = 1;
    /// A small hash: packed field, value, field, value ... in insertion order.
    pub const HASH_PACKED: u8 = 2;
    /// A big hash: a pointer to a [`super::HashTable`].
    pub const HASH_TABLE: u8 = 3;
    /// A small sorted set: packed member, score pairs in (score, member) order
    /// (`listpack`).
    pub const ZSET_PACKED: u8 = 9;
    /// A big sorted set: a pointer to a [`crate::keyspace::zset::ZTree`] (`skiplist`).
    pub const ZSET_SKIP: u8 = 10;
    /// A small list: packed elements from head to tail (`listpack`).
    pub const LIST_PACKED: u8 = 4;
    /// A big list: a pointer to a [`crate::keyspace::list::QuickList`] (`quicklist`).
    pub const LIST_QUICK: u8 = 5;
    /// A small set of integers: sorted 64-bit integers (`intset`).
    pub const SET_INTS: u8 = 6;
    /// A small set: packed members in insertion order (`listpack`).
    pub const SET_PACKED: u8 = 7;
    /// A big set: a pointer to a [`super::HashTable`] of members with empty values.
    pub const SET_TABLE: u8 = 8;
    /// A stream: a pointer to a [`crate::keyspace::stream::Stream`] (`stream`).
    pub const STREAM: u8 = 11;
    /// A string made from a float (INCRBYFLOAT's result): `embstr` up to 44 bytes,
    /// `raw` past, never `int` even when its text is an integer (as Redis makes it).
    pub const STR_EMB: u8 = 12;
}

/// A value's type, as TYPE names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A byte string.
    String,
    /// Fields and values.
    Hash,
    /// Elements in order.
    List,
    /// Distinct members ordered by score.
    ZSet,
    /// Distinct members.
    Set,
    /// Entries by ID, and consumer groups.
    Stream,
}

impl Type {
    /// The name TYPE answers and SCAN's TYPE option takes.
    pub fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Hash => "hash",
            Type::ZSet => "zset",
            Type::Set => "set",
            Type::List => "list",
            Type::Stream => "stream",
        }
    }

    /// The type TYPE calls `name` (any case), if weft-kv has it.
    pub fn from_name(name: &[u8]) -> Option<Type> {
        [
            Type::String,
            Type::Hash,
            Type::Set,
            Type::List,
            Type::ZSet,
            Type::Stream,
        ]
        .into_iter()
        .find(|t| t.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// The type of a tag.
#[inline]
pub fn type_of(tag: u8) -> Type {
    match tag {
        tag::STR | tag::STR_RAW | tag::STR_EMB => Type::String,
        tag::HASH_PACKED | tag::HASH_TABLE => Type::Hash,
        tag::ZSET_PACKED | tag::ZSET_SKIP => Type::ZSet,
        tag::SET_INTS | tag::SET_PACKED | tag::SET_TABLE => Type::Set,
        tag::LIST_PACKED | tag::LIST_QUICK => Type::List,
        tag::STREAM => Type::Stream,
        t => unreachable!("no value has tag {t}"),
    }
}

/// Whether a tag's value bytes are a pointer to a boxed structure.
#[inline]
pub fn is_boxed(tag: u8) -> bool {
    tag == tag::HASH_TABLE
        || tag == tag::SET_TABLE
        || tag == tag::LIST_QUICK
        || tag == tag::ZSET_SKIP
        || tag == tag::STREAM
}

/// What OBJECT ENCODING answers for a value of tag `tag` whose bytes (in the entry)
/// are `bytes`. Strings follow Redis's choice: an integer of at most 20 characters
/// that reads back the same is `int`, another string of at most 44 bytes `embstr`,
/// a longer one, or one changed in place, `raw`; one made from a float is never `int`.
pub fn encoding_name(tag: u8, bytes: &[u8]) -> &'static str {
    match tag {
        tag::STR if bytes.len() <= 20 && crate::commands::parse_i64(bytes).is_some() => "int",
        tag::STR | tag::STR_EMB if bytes.len() <= 44 => "embstr",
        tag::STR | tag::STR_RAW | tag::STR_EMB => "raw",
        tag::HASH_PACKED => "listpack",
        tag::LIST_PACKED => "listpack",
        tag::LIST_QUICK => "quicklist",
        tag::HASH_TABLE | tag::SET_TABLE => "hashtable",
        tag::ZSET_PACKED => "listpack",
        tag::ZSET_SKIP => "skiplist",
        tag::SET_INTS => "intset",
        tag::SET_PACKED => "listpack",
        tag::STREAM => "stream",
        t => unreachable!("no value has tag {t}"),
    }
}

/// Reads the pointer a boxed value's bytes hold.
#[inline]
pub(super) fn read_ptr(bytes: &[u8]) -> *mut u8 {
    let word: [u8; 8] = bytes[..8]
        .try_into()
        .expect("a boxed value holds a pointer");
    usize::from_ne_bytes(word) as *mut u8
}

/// The bytes that hold `p` in a boxed value.
#[inline]
pub(super) fn ptr_bytes(p: *mut u8) -> [u8; 8] {
    (p as usize).to_ne_bytes()
}

/// The boxed structure of a big hash (or a big set's), from its value bytes.
///
/// # Safety
/// `bytes` are the value of a live entry of tag [`tag::HASH_TABLE`] or
/// [`tag::SET_TABLE`].
#[inline]
pub(super) unsafe fn table(bytes: &[u8]) -> &HashTable {
    // SAFETY: per the contract, the bytes hold the pointer `Box::into_raw` gave when the
    // entry took the table, and the entry (which owns it) outlives the borrow.
    unsafe { &*(read_ptr(bytes) as *const HashTable) }
}

/// [`table`], to change.
///
/// # Safety
/// As [`table`], and the caller has the entry uniquely.
#[inline]
pub(super) unsafe fn table_mut(bytes: &mut [u8]) -> &mut HashTable {
    // SAFETY: as in `table`; the caller's unique access to the entry makes this the
    // only reference to the table.
    unsafe { &mut *(read_ptr(bytes) as *mut HashTable) }
}

/// Frees the boxed structure of a value of tag `tag` whose bytes are `bytes`.
///
/// # Safety
/// `tag` is boxed, `bytes` hold the pointer its structure was boxed to, and nothing
/// uses the structure afterwards.
pub(super) unsafe fn drop_boxed(tag: u8, bytes: &[u8]) {
    match tag {
        // SAFETY: per the contract, the pointer came from `Box::into_raw` of a table
        // and is dropped once.
        tag::HASH_TABLE | tag::SET_TABLE => {
            drop(unsafe { Box::from_raw(read_ptr(bytes) as *mut HashTable) })
        }
        // SAFETY: per the contract (the same as `drop_quick`'s).
        tag::LIST_QUICK => unsafe { super::list::drop_quick(bytes) },
        // SAFETY: per the contract (the same as `drop_tree`'s).
        tag::ZSET_SKIP => unsafe { super::zset::drop_tree(bytes) },
        // SAFETY: per the contract (the same as `drop_stream`'s).
        tag::STREAM => unsafe { super::stream::drop_stream(bytes) },
        t => unreachable!("tag {t} is not boxed"),
    }
}

/// The bytes a value of tag `tag` counts in the keyspace's memory: its bytes, or its
/// boxed structure's own count.
#[inline]
pub(super) fn memory(tag: u8, bytes: &[u8]) -> u64 {
    match tag {
        // SAFETY: an entry's bytes of this tag hold its table, alive while it is.
        tag::HASH_TABLE | tag::SET_TABLE => unsafe { table(bytes) }.memory(),
        // SAFETY: an entry's bytes of this tag hold its quicklist, alive while it is.
        tag::LIST_QUICK => unsafe { super::list::quick_memory(bytes) },
        // SAFETY: an entry's bytes of this tag hold its tree, alive while it is.
        tag::ZSET_SKIP => unsafe { super::zset::tree_of(bytes) }.memory(),
        // SAFETY: an entry's bytes of this tag hold its stream, alive while it is.
        tag::STREAM => unsafe { super::stream::stream_of(bytes) }.memory(),
        _ => bytes.len() as u64,
    }
}
