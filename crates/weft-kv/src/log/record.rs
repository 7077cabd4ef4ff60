//! A log record and its bytes.
//!
//! ```text
//! frame   = len:u32le crc:u32le payload[len]      crc = CRC32C(payload)
//! payload = kind:u8 db:u8 body                     format 3 (kinds 10 and up)
//!         | kind:u8 body                           format 2 (kinds 1 to 4: database 0)
//!
//! kind  body                                       record
//!  10   key:bytes value:bytes expire:opt            Set: the key holds this string
//!  11   key:bytes                                   Del
//!  12   key:bytes expire:opt                        Expire (PERSIST is Expire(None))
//!  13   -                                           Flush: every key of the database
//!  14   -                                           FlushAll: every key of every database
//!  15   other:u8                                    SwapDb: databases db and other swap
//!  16   key:bytes piece:bytes                       Append
//!  17   key:bytes offset:u64le piece:bytes          SetRange (zero-padded up to offset)
//!  18   key:bytes value:bytes expire:opt enc:u8     SetStr: Set of a string whose making
//!                                                   decides its encoding (enc 1: changed
//!                                                   in place, `raw`; 2: from a float)
//!  20   key:bytes expire:opt items                  Hash: the key holds a hash of these
//!                                                   fields (field value field value ...)
//!  21   key:bytes items                             HSet: these fields are set
//!  22   key:bytes items                             HDel: these fields are removed
//!  50   key:bytes expire:opt items                  ZSet: the key holds a sorted set of
//!                                                   these (member score member score ...,
//!                                                   each score 8 bytes: a double's bits, LE)
//!  51   key:bytes items                             ZAdd: these members get these scores
//!  52   key:bytes items                             ZRem: these members are removed
//!  40   key:bytes expire:opt items                  Members: the key holds a set of these
//!  41   key:bytes items                             SAdd: these members are added
//!  42   key:bytes items                             SRem: these members are removed
//!  30   key:bytes expire:opt items                  List: the key holds a list of these
//!                                                   elements (head to tail)
//!  31   key:bytes items                             LPush: pushed at the head, one by one
//!  32   key:bytes items                             RPush: pushed at the tail, one by one
//!  33   key:bytes n:u64le                           LPop: n elements leave the head
//!  34   key:bytes n:u64le                           RPop: n elements leave the tail
//!  35   key:bytes index:u64le value:bytes           LSet: the element at index is replaced
//!  36   key:bytes index:u64le value:bytes           LInsert: the value is inserted at index
//!  37   key:bytes items                             LRem: the elements at these positions
//!                                                   (8-byte LE each, descending) go
//!  70-80 key:bytes body                           a stream's whole state (70) or change
//!                                                   (71-80): `keyspace/stream.rs` has
//!                                                   the bodies
//!   1   key:bytes value:bytes expire:opt            (format 2) Set in database 0
//!   2   key:bytes                                   (format 2) Del in database 0
//!   3   key:bytes expire:opt                        (format 2) Expire in database 0
//!   4   -                                           (format 2) Flush of database 0
//! bytes = n:u32le byte[n]
//! opt   = 0 | 1 ms:u64le                            absolute Unix time in milliseconds
//! items = n:u32le element*n                         element = LEB128 length, bytes
//! ```
//!
//! A creation is a full state (`Set`, `Hash`); a change of an existing key may be a
//! change record (`Append`, `SetRange`, `HSet`, `HDel`): docs/kv-types.md has the rules
//! and why replay is exact. Items are packed as in a small collection's value
//! (`crate::packed`), so a packed hash is copied into a record whole, and out of one.

use crate::packed;

/// Elements of a record (fields and values of a hash, ...): borrowed from a command's
/// arguments, owned, or packed (as a record or a packed value holds them).
#[derive(Clone, Copy, Debug)]
pub enum Items<'a> {
    /// One slice per element.
    Slices(&'a [&'a [u8]]),
    /// One vector per element.
    Owned(&'a [Vec<u8>]),
    /// `n` packed elements ([`crate::packed`]).
    Packed { n: usize, bytes: &'a [u8] },
}

impl<'a> Items<'a> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        match *self {
            Items::Slices(s) => s.len(),
            Items::Owned(o) => o.len(),
            Items::Packed { n, .. } => n,
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (s, o, p): (&'a [&'a [u8]], &'a [Vec<u8>], &'a [u8]) = match *self {
            Items::Slices(s) => (s, &[], &[]),
            Items::Owned(o) => (&[], o, &[]),
            Items::Packed { bytes, .. } => (&[], &[], bytes),
        };
        s.iter()
            .copied()
            .chain(o.iter().map(Vec::as_slice))
            .chain(packed::Iter::new(p))
    }

    /// The bytes the elements take packed.
    pub fn packed_len(&self) -> usize {
        match *self {
            Items::Packed { bytes, .. } => bytes.len(),
            _ => self.iter().map(|e| packed::element_bytes(e.len())).sum(),
        }
    }

    /// Owned copies of the elements.
    pub fn to_vec(&self) -> Vec<Vec<u8>> {
        self.iter().map(<[u8]>::to_vec).collect()
    }
}

impl PartialEq for Items<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Items<'_> {}

/// How a string was made, where that (not only its bytes) decides its OBJECT ENCODING:
/// the `enc` byte of a `SetStr` record (kind 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrEnc {
    /// Changed in place (APPEND, SETRANGE): `raw`.
    Raw = 1,
    /// Made from a float (INCRBYFLOAT): `embstr` up to 44 bytes, `raw` past, never `int`.
    Float = 2,
}

/// A record borrowed from the keyspace (what a command appends), without its database
/// (which the frame carries: [`encode_in`], [`decode_frame`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordRef<'a> {
    /// The key now holds the string `value`, expiring at `expire_at_ms` (Unix ms) or
    /// never, whatever it held before.
    Set {
        key: &'a [u8],
        value: &'a [u8],
        expire_at_ms: Option<u64>,
    },
    /// As `Set`, for a string whose encoding its making decides ([`StrEnc`]).
    SetStr {
        key: &'a [u8],
        value: &'a [u8],
        expire_at_ms: Option<u64>,
        enc: StrEnc,
    },
    /// The key no longer exists.
    Del { key: &'a [u8] },
    /// The key (if it exists) now expires at `at_ms`, or never.
    Expire { key: &'a [u8], at_ms: Option<u64> },
    /// Every key of the database is gone.
    Flush,
    /// Every key of every database of the shard is gone.
    FlushAll,
    /// The database and database `other` swap their keys.
    SwapDb { other: u8 },
    /// A transaction's part on this shard (`log/tx.rs`): the frames of the records it
    /// logged (`body`), its id, its participant shards (u32le each), and whether more
    /// frames of the part follow.
    Tx {
        id: u64,
        more: bool,
        shards: &'a [u8],
        body: &'a [u8],
    },
    /// `piece` is appended to the existing string.
    Append { key: &'a [u8], piece: &'a [u8] },
    /// `piece` is written into the existing string at `offset` (zero bytes fill any gap).
    SetRange {
        key: &'a [u8],
        offset: u64,
        piece: &'a [u8],
    },
    /// The key now holds a hash of `items` (field, value, field, value, ...), expiring
    /// at `expire_at_ms` or never, whatever it held before.
    Hash {
        key: &'a [u8],
        expire_at_ms: Option<u64>,
        items: Items<'a>,
    },
    /// The fields of `items` (field, value, ...) are set in the existing hash.
    HSet { key: &'a [u8], items: Items<'a> },
    /// The fields of `items` are removed from the existing hash (an emptied hash is
    /// removed).
    HDel { key: &'a [u8], items: Items<'a> },
    /// The key now holds a sorted set of `items` (member, score, member, score, ...;
    /// each score 8 bytes, the double's bits little-endian), expiring at
    /// `expire_at_ms` or never, whatever it held before.
    ZSet {
        key: &'a [u8],
        expire_at_ms: Option<u64>,
        items: Items<'a>,
    },
    /// The members of `items` (member, score, ...) get those scores in the existing
    /// sorted set (added if missing).
    ZAdd { key: &'a [u8], items: Items<'a> },
    /// The members of `items` are removed from the existing sorted set (an emptied
    /// one is removed).
    ZRem { key: &'a [u8], items: Items<'a> },
    /// The key now holds a set of the members `items`, expiring at `expire_at_ms` or
    /// never, whatever it held before.
    Members {
        key: &'a [u8],
        expire_at_ms: Option<u64>,
        items: Items<'a>,
    },
    /// The members of `items` are added to the existing set.
    SAdd { key: &'a [u8], items: Items<'a> },
    /// The members of `items` are removed from the existing set (an emptied set is
    /// removed).
    SRem { key: &'a [u8], items: Items<'a> },
    /// The key now holds a list of `items` (head to tail), expiring at
    /// `expire_at_ms` or never, whatever it held before.
    List {
        key: &'a [u8],
        expire_at_ms: Option<u64>,
        items: Items<'a>,
    },
    /// `items` are pushed one after another at the head of the existing list.
    LPush { key: &'a [u8], items: Items<'a> },
    /// `items` are pushed one after another at the tail of the existing list.
    RPush { key: &'a [u8], items: Items<'a> },
    /// `count` elements leave the head of the existing list (an emptied list is
    /// removed).
    LPop { key: &'a [u8], count: u64 },
    /// `count` elements leave the tail of the existing list.
    RPop { key: &'a [u8], count: u64 },
    /// The element at `index` of the existing list becomes `value`.
    LSet {
        key: &'a [u8],
        index: u64,
        value: &'a [u8],
    },
    /// `value` is inserted into the existing list so that it is at `index`.
    LInsert {
        key: &'a [u8],
        index: u64,
        value: &'a [u8],
    },
    /// The elements at `positions` (each 8 bytes, little-endian, in descending
    /// order) of the existing list are removed.
    LRem { key: &'a [u8], positions: Items<'a> },
    /// A stream's whole state (kind 70) or one of its changes (71 to 80): the body is
    /// `keyspace/stream.rs`'s.
    Stream {
        kind: u8,
        key: &'a [u8],
        body: &'a [u8],
    },
}

/// An owned record (what [`decode`] reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// See [`RecordRef::Set`].
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        expire_at_ms: Option<u64>,
    },
    /// See [`RecordRef::SetStr`].
    SetStr {
        key: Vec<u8>,
        value: Vec<u8>,
        expire_at_ms: Option<u64>,
        enc: StrEnc,
    },
    /// See [`RecordRef::Del`].
    Del { key: Vec<u8> },
    /// See [`RecordRef::Expire`].
    Expire { key: Vec<u8>, at_ms: Option<u64> },
    /// See [`RecordRef::Flush`].
    Flush,
    /// See [`RecordRef::FlushAll`].
    FlushAll,
    /// See [`RecordRef::SwapDb`].
    SwapDb { other: u8 },
    /// See [`RecordRef::Tx`].
    Tx {
        id: u64,
        more: bool,
        shards: Vec<u8>,
        body: Vec<u8>,
    },
    /// See [`RecordRef::Append`].
    Append { key: Vec<u8>, piece: Vec<u8> },
    /// See [`RecordRef::SetRange`].
    SetRange {
        key: Vec<u8>,
        offset: u64,
        piece: Vec<u8>,
    },
    /// See [`RecordRef::Hash`].
    Hash {
        key: Vec<u8>,
        expire_at_ms: Option<u64>,
        items: Vec<Vec<u8>>,
    },
    /// See [`RecordRef::HSet`].
    HSet { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::HDel`].
    HDel { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::ZSet`].
    ZSet {
        key: Vec<u8>,
        expire_at_ms: Option<u64>,
        items: Vec<Vec<u8>>,
    },
    /// See [`RecordRef::ZAdd`].
    ZAdd { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::ZRem`].
    ZRem { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::Members`].
    Members {
        key: Vec<u8>,
        expire_at_ms: Option<u64>,
        items: Vec<Vec<u8>>,
    },
    /// See [`RecordRef::SAdd`].
    SAdd { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::SRem`].
    SRem { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::List`].
    List {
        key: Vec<u8>,
        expire_at_ms: Option<u64>,
        items: Vec<Vec<u8>>,
    },
    /// See [`RecordRef::LPush`].
    LPush { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::RPush`].
    RPush { key: Vec<u8>, items: Vec<Vec<u8>> },
    /// See [`RecordRef::LPop`].
    LPop { key: Vec<u8>, count: u64 },
    /// See [`RecordRef::RPop`].
    RPop { key: Vec<u8>, count: u64 },
    /// See [`RecordRef::LSet`].
    LSet {
        key: Vec<u8>,
        index: u64,
        value: Vec<u8>,
    },
    /// See [`RecordRef::LInsert`].
    LInsert {
        key: Vec<u8>,
        index: u64,
        value: Vec<u8>,
    },
    /// See [`RecordRef::LRem`].
    LRem {
        key: Vec<u8>,
        positions: Vec<Vec<u8>>,
    },
    /// See [`RecordRef::Stream`].
    Stream {
        kind: u8,
        key: Vec<u8>,
        body: Vec<u8>,
    },
}

impl<'a> RecordRef<'a> {
    /// An owned copy.
    pub fn to_record(&self) -> Record {
        match *self {
            RecordRef::Set {
                key,
                value,
                expire_at_ms,
            } => Record::Set {
                key: key.to_vec(),
                value: value.to_vec(),
                expire_at_ms,
            },
            RecordRef::SetStr {
                key,
                value,
                expire_at_ms,
                enc,
            } => Record::SetStr {
                key: key.to_vec(),
                value: value.to_vec(),
                expire_at_ms,
                enc,
            },
            RecordRef::Del { key } => Record::Del { key: key.to_vec() },
            RecordRef::Expire { key, at_ms } => Record::Expire {
                key: key.to_vec(),
                at_ms,
            },
            RecordRef::Flush => Record::Flush,
            RecordRef::FlushAll => Record::FlushAll,
            RecordRef::Tx {
                id,
                more,
                shards,
                body,
            } => Record::Tx {
                id,
                more,
                shards: shards.to_vec(),
                body: body.to_vec(),
            },
            RecordRef::SwapDb { other } => Record::SwapDb { other },
            RecordRef::Append { key, piece } => Record::Append {
                key: key.to_vec(),
                piece: piece.to_vec(),
            },
            RecordRef::SetRange { key, offset, piece } => Record::SetRange {
                key: key.to_vec(),
                offset,
                piece: piece.to_vec(),
            },
            RecordRef::Hash {
                key,
                expire_at_ms,
                items,
            } => Record::Hash {
                key: key.to_vec(),
                expire_at_ms,
                items: items.to_vec(),
            },
            RecordRef::HSet { key, items } => Record::HSet {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::HDel { key, items } => Record::HDel {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::ZSet {
                key,
                expire_at_ms,
                items,
            } => Record::ZSet {
                key: key.to_vec(),
                expire_at_ms,
                items: items.to_vec(),
            },
            RecordRef::ZAdd { key, items } => Record::ZAdd {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::ZRem { key, items } => Record::ZRem {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::Members {
                key,
                expire_at_ms,
                items,
            } => Record::Members {
                key: key.to_vec(),
                expire_at_ms,
                items: items.to_vec(),
            },
            RecordRef::SAdd { key, items } => Record::SAdd {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::SRem { key, items } => Record::SRem {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::List {
                key,
                expire_at_ms,
                items,
            } => Record::List {
                key: key.to_vec(),
                expire_at_ms,
                items: items.to_vec(),
            },
            RecordRef::LPush { key, items } => Record::LPush {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::RPush { key, items } => Record::RPush {
                key: key.to_vec(),
                items: items.to_vec(),
            },
            RecordRef::LPop { key, count } => Record::LPop {
                key: key.to_vec(),
                count,
            },
            RecordRef::RPop { key, count } => Record::RPop {
                key: key.to_vec(),
                count,
            },
            RecordRef::LSet { key, index, value } => Record::LSet {
                key: key.to_vec(),
                index,
                value: value.to_vec(),
            },
            RecordRef::LInsert { key, index, value } => Record::LInsert {
                key: key.to_vec(),
                index,
                value: value.to_vec(),
            },
            RecordRef::LRem { key, positions } => Record::LRem {
                key: key.to_vec(),
                positions: positions.to_vec(),
            },
            RecordRef::Stream { kind, key, body } => Record::Stream {
                kind,
                key: key.to_vec(),
                body: body.to_vec(),
            },
        }
    }

    /// Whether the record changes no byte of any value, only an encoding: a
    /// `SetRange` of nothing at offset 0 makes the string `raw` (SETBIT or BITFIELD
    /// that changed no bit); a `ZAdd` of no members makes the sorted set a tree
    /// (`skiplist`: SORT of a sorted set). It is then no change of its key for WATCH,
    /// client-side caching or the count of changes.
    pub fn only_encoding(&self) -> bool {
        matches!(self, RecordRef::SetRange { offset: 0, piece, .. } if piece.is_empty())
            || matches!(self, RecordRef::ZAdd { items, .. } if items.is_empty())
    }

    /// The key the record is about (`None` for the records about whole databases).
    pub fn key(&self) -> Option<&'a [u8]> {
        match *self {
            RecordRef::Set { key, .. }
            | RecordRef::SetStr { key, .. }
            | RecordRef::Del { key }
            | RecordRef::Expire { key, .. }
            | RecordRef::Append { key, .. }
            | RecordRef::SetRange { key, .. }
            | RecordRef::Hash { key, .. }
            | RecordRef::HSet { key, .. }
            | RecordRef::HDel { key, .. }
            | RecordRef::ZSet { key, .. }
            | RecordRef::ZAdd { key, .. }
            | RecordRef::ZRem { key, .. }
            | RecordRef::Members { key, .. }
            | RecordRef::SAdd { key, .. }
            | RecordRef::SRem { key, .. }
            | RecordRef::List { key, .. }
            | RecordRef::LPush { key, .. }
            | RecordRef::RPush { key, .. }
            | RecordRef::LPop { key, .. }
            | RecordRef::RPop { key, .. }
            | RecordRef::LSet { key, .. }
            | RecordRef::LInsert { key, .. }
            | RecordRef::LRem { key, .. }
            | RecordRef::Stream { key, .. } => Some(key),
            RecordRef::Flush
            | RecordRef::FlushAll
            | RecordRef::SwapDb { .. }
            | RecordRef::Tx { .. } => None,
        }
    }
}

impl Record {
    /// This record, borrowed.
    pub fn as_ref(&self) -> RecordRef<'_> {
        match self {
            Record::Set {
                key,
                value,
                expire_at_ms,
            } => RecordRef::Set {
                key,
                value,
                expire_at_ms: *expire_at_ms,
            },
            Record::SetStr {
                key,
                value,
                expire_at_ms,
                enc,
            } => RecordRef::SetStr {
                key,
                value,
                expire_at_ms: *expire_at_ms,
                enc: *enc,
            },
            Record::Del { key } => RecordRef::Del { key },
            Record::Expire { key, at_ms } => RecordRef::Expire { key, at_ms: *at_ms },
            Record::Flush => RecordRef::Flush,
            Record::FlushAll => RecordRef::FlushAll,
            Record::Tx {
                id,
                more,
                shards,
                body,
            } => RecordRef::Tx {
                id: *id,
                more: *more,
                shards,
                body,
            },
            Record::SwapDb { other } => RecordRef::SwapDb { other: *other },
            Record::Append { key, piece } => RecordRef::Append { key, piece },
            Record::SetRange { key, offset, piece } => RecordRef::SetRange {
                key,
                offset: *offset,
                piece,
            },
            Record::Hash {
                key,
                expire_at_ms,
                items,
            } => RecordRef::Hash {
                key,
                expire_at_ms: *expire_at_ms,
                items: Items::Owned(items),
            },
            Record::HSet { key, items } => RecordRef::HSet {
                key,
                items: Items::Owned(items),
            },
            Record::HDel { key, items } => RecordRef::HDel {
                key,
                items: Items::Owned(items),
            },
            Record::ZSet {
                key,
                expire_at_ms,
                items,
            } => RecordRef::ZSet {
                key,
                expire_at_ms: *expire_at_ms,
                items: Items::Owned(items),
            },
            Record::ZAdd { key, items } => RecordRef::ZAdd {
                key,
                items: Items::Owned(items),
            },
            Record::ZRem { key, items } => RecordRef::ZRem {
                key,
                items: Items::Owned(items),
            },
            Record::Members {
                key,
                expire_at_ms,
                items,
            } => RecordRef::Members {
                key,
                expire_at_ms: *expire_at_ms,
                items: Items::Owned(items),
            },
            Record::SAdd { key, items } => RecordRef::SAdd {
                key,
                items: Items::Owned(items),
            },
            Record::SRem { key, items } => RecordRef::SRem {
                key,
                items: Items::Owned(items),
            },
            Record::List {
                key,
                expire_at_ms,
                items,
            } => RecordRef::List {
                key,
                expire_at_ms: *expire_at_ms,
                items: Items::Owned(items),
            },
            Record::LPush { key, items } => RecordRef::LPush {
                key,
                items: Items::Owned(items),
            },
            Record::RPush { key, items } => RecordRef::RPush {
                key,
                items: Items::Owned(items),
            },
            Record::LPop { key, count } => RecordRef::LPop { key, count: *count },
            Record::RPop { key, count } => RecordRef::RPop { key, count: *count },
            Record::LSet { key, index, value } => RecordRef::LSet {
                key,
                index: *index,
                value,
            },
            Record::LInsert { key, index, value } => RecordRef::LInsert {
                key,
                index: *index,
                value,
            },
            Record::LRem { key, positions } => RecordRef::LRem {
                key,
                positions: Items::Owned(positions),
            },
            Record::Stream { kind, key, body } => RecordRef::Stream {
                kind: *kind,
                key,
                body,
            },
        }
    }
}

/// The number of databases (SELECT 0 to 15); a record of another is damage.
pub const DATABASES: u8 = 16;

/// The size of a frame's header (length and checksum).
pub const FRAME_HEADER: usize = 8;

/// The longest key or value a record holds (1 GiB). It is the one limit every part
/// agrees on: `--max-bulk` may not be set above it (so no request argument is longer),
/// APPEND and SETRANGE stop below it, the embedded store refuses longer arguments, and
/// recovery accepts every frame up to [`MAX_PAYLOAD`], the largest record that
/// arguments of this length make. So every value the server acknowledges can be read
/// back.
pub const MAX_VALUE: usize = 1 << 30;

/// The payload length of a `Set` record of a `key`-byte key and a `value`-byte value
/// with an expiry time (a `Set` without expiry is 8 bytes shorter, `Del` and `Expire`
/// shorter still).
pub const fn set_payload_len(key: usize, value: usize) -> usize {
    2 + 4 + key + 4 + value + 1 + 8
}

/// Records of several elements (HSET of many fields) are split so that each holds at
/// most this many bytes of elements, unless one element alone is larger: the split
/// records are each exact, so splitting changes nothing replay makes.
pub const ITEMS_PER_RECORD: usize = 1 << 20;

/// The largest payload a frame may declare: an `HSet` of one field of a [`MAX_VALUE`]
/// key, field and value (the largest record the limits let a command log, since
/// records of several elements are split). A longer length field is damage.
/// (A transaction's `Tx` frame holding that record adds at most
/// [`super::tx::TX_OVERHEAD`].)
pub const MAX_PAYLOAD: usize = 2
    + 4
    + MAX_VALUE
    + 4
    + 2 * (packed::MAX_LEN_BYTES + MAX_VALUE)
    + 1
    + 8
    + super::tx::TX_OVERHEAD;

// The length field is 32 bits: the largest record must fit in it.
const _: () = assert!(MAX_PAYLOAD <= u32::MAX as usize);
const _: () = assert!(set_payload_len(MAX_VALUE, MAX_VALUE) <= MAX_PAYLOAD);

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_opt(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => out.push(0),
        Some(ms) => {
            out.push(1);
            out.extend_from_slice(&ms.to_le_bytes());
        }
    }
}

fn put_items(out: &mut Vec<u8>, items: &Items<'_>) {
    out.extend_from_slice(&(items.len() as u32).to_le_bytes());
    match *items {
        Items::Packed { bytes, .. } => out.extend_from_slice(bytes),
        _ => {
            for e in items.iter() {
                packed::put(out, e);
            }
        }
    }
}

/// Appends `rec`'s frame to `out`, in database 0 (tests and tools; commands log
/// through `Ctx::record`, which names their database).
pub fn encode(rec: &RecordRef<'_>, out: &mut Vec<u8>) {
    encode_in(0, rec, out)
}

/// Appends `rec`'s frame to `out`, for database `db`.
pub fn encode_in(db: u8, rec: &RecordRef<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    let kind = |out: &mut Vec<u8>, k: u8| {
        out.push(k);
        out.push(db);
    };
    match *rec {
        RecordRef::Set {
            key,
            value,
            expire_at_ms,
        } => {
            kind(out, 10);
            put_bytes(out, key);
            put_bytes(out, value);
            put_opt(out, expire_at_ms);
        }
        RecordRef::SetStr {
            key,
            value,
            expire_at_ms,
            enc,
        } => {
            kind(out, 18);
            put_bytes(out, key);
            put_bytes(out, value);
            put_opt(out, expire_at_ms);
            out.push(enc as u8);
        }
        RecordRef::Del { key } => {
            kind(out, 11);
            put_bytes(out, key);
        }
        RecordRef::Expire { key, at_ms } => {
            kind(out, 12);
            put_bytes(out, key);
            put_opt(out, at_ms);
        }
        RecordRef::Flush => kind(out, 13),
        RecordRef::FlushAll => kind(out, 14),
        RecordRef::Tx {
            id,
            more,
            shards,
            body,
        } => {
            kind(out, super::tx::TX_KIND);
            out.push(more as u8);
            out.extend_from_slice(&id.to_le_bytes());
            put_bytes(out, shards);
            out.extend_from_slice(body);
        }
        RecordRef::SwapDb { other } => {
            kind(out, 15);
            out.push(other);
        }
        RecordRef::Append { key, piece } => {
            kind(out, 16);
            put_bytes(out, key);
            put_bytes(out, piece);
        }
        RecordRef::SetRange { key, offset, piece } => {
            kind(out, 17);
            put_bytes(out, key);
            out.extend_from_slice(&offset.to_le_bytes());
            put_bytes(out, piece);
        }
        RecordRef::Hash {
            key,
            expire_at_ms,
            items,
        } => {
            kind(out, 20);
            put_bytes(out, key);
            put_opt(out, expire_at_ms);
            put_items(out, &items);
        }
        RecordRef::HSet { key, items } => {
            kind(out, 21);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::HDel { key, items } => {
            kind(out, 22);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::ZSet {
            key,
            expire_at_ms,
            items,
        } => {
            kind(out, 50);
            put_bytes(out, key);
            put_opt(out, expire_at_ms);
            put_items(out, &items);
        }
        RecordRef::ZAdd { key, items } => {
            kind(out, 51);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::ZRem { key, items } => {
            kind(out, 52);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::Members {
            key,
            expire_at_ms,
            items,
        } => {
            kind(out, 40);
            put_bytes(out, key);
            put_opt(out, expire_at_ms);
            put_items(out, &items);
        }
        RecordRef::SAdd { key, items } => {
            kind(out, 41);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::SRem { key, items } => {
            kind(out, 42);
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::List {
            key,
            expire_at_ms,
            items,
        } => {
            kind(out, 30);
            put_bytes(out, key);
            put_opt(out, expire_at_ms);
            put_items(out, &items);
        }
        RecordRef::LPush { key, items } | RecordRef::RPush { key, items } => {
            kind(
                out,
                if matches!(rec, RecordRef::LPush { .. }) {
                    31
                } else {
                    32
                },
            );
            put_bytes(out, key);
            put_items(out, &items);
        }
        RecordRef::LPop { key, count } | RecordRef::RPop { key, count } => {
            kind(
                out,
                if matches!(rec, RecordRef::LPop { .. }) {
                    33
                } else {
                    34
                },
            );
            put_bytes(out, key);
            out.extend_from_slice(&count.to_le_bytes());
        }
        RecordRef::LSet { key, index, value } | RecordRef::LInsert { key, index, value } => {
            kind(
                out,
                if matches!(rec, RecordRef::LSet { .. }) {
                    35
                } else {
                    36
                },
            );
            put_bytes(out, key);
            out.extend_from_slice(&index.to_le_bytes());
            put_bytes(out, value);
        }
        RecordRef::LRem { key, positions } => {
            kind(out, 37);
            put_bytes(out, key);
            put_items(out, &positions);
        }
        RecordRef::Stream { kind: k, key, body } => {
            kind(out, k);
            put_bytes(out, key);
            out.extend_from_slice(body);
        }
    }
    let payload = &out[start + FRAME_HEADER..];
    debug_assert!(
        payload.len() <= MAX_PAYLOAD,
        "a record longer than recovery reads"
    );
    let len = payload.len() as u32;
    let crc = crc32c::crc32c(payload);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends the records of a change of many elements (`make` builds one from a run of
/// whole elements, `step` of them at a time: 2 for field-value pairs), split so that
/// each holds at most [`ITEMS_PER_RECORD`] bytes of elements unless one step alone
/// is larger.
pub fn encode_split<'a>(
    db: u8,
    elements: &'a [&'a [u8]],
    step: usize,
    make: impl Fn(Items<'a>) -> RecordRef<'a>,
    out: &mut Vec<u8>,
) {
    let mut from = 0;
    while from < elements.len() {
        let mut to = from;
        let mut bytes = 0;
        while to < elements.len() {
            let more: usize = elements[to..to + step]
                .iter()
                .map(|e| packed::element_bytes(e.len()))
                .sum();
            if to > from && bytes + more > ITEMS_PER_RECORD {
                break;
            }
            bytes += more;
            to += step;
        }
        encode_in(db, &make(Items::Slices(&elements[from..to])), out);
        from = to;
    }
}

/// Why the bytes at some offset are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends inside the frame: more bytes are needed (at the end of a file,
    /// a torn tail).
    Truncated,
    /// The frame is complete but its checksum does not match its payload.
    BadChecksum,
    /// The checksum matches but the payload is not a record (an unknown kind, or
    /// lengths that do not add up).
    Malformed,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::Truncated => "the record is cut short",
            DecodeError::BadChecksum => "the record's CRC32C does not match its contents",
            DecodeError::Malformed => "the record's contents are not a valid record",
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Malformed);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn opt(&mut self) -> Result<Option<u64>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u64()?)),
            _ => Err(DecodeError::Malformed),
        }
    }
    /// `n:u32le` packed elements; the rest of the payload must be exactly those.
    fn items(&mut self) -> Result<Items<'a>, DecodeError> {
        let n = self.u32()? as usize;
        let bytes = std::mem::take(&mut self.0);
        match packed::count(bytes) {
            Some(m) if m == n => Ok(Items::Packed { n, bytes }),
            _ => Err(DecodeError::Malformed),
        }
    }
}

/// Decodes the frame at the start of `buf`: the record (its database dropped: see
/// [`decode_frame`]) and the frame's length. For tests and tools.
pub fn decode(buf: &[u8]) -> Result<(Record, usize), DecodeError> {
    decode_ref(buf).map(|(r, n)| (r.to_record(), n))
}

/// [`decode`], the record borrowing from `buf`.
pub fn decode_ref(buf: &[u8]) -> Result<(RecordRef<'_>, usize), DecodeError> {
    decode_frame(buf).map(|(_, r, n)| (r, n))
}

/// Decodes the frame at the start of `buf`: the record's database, the record
/// (borrowing from `buf`) and the frame's length.
pub fn decode_frame(buf: &[u8]) -> Result<(u8, RecordRef<'_>, usize), DecodeError> {
    if buf.len() < FRAME_HEADER {
        return Err(DecodeError::Truncated);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    let Some(payload) = buf.get(FRAME_HEADER..FRAME_HEADER + len) else {
        return Err(DecodeError::Truncated);
    };
    if crc32c::crc32c(payload) != crc {
        return Err(DecodeError::BadChecksum);
    }
    let mut r = Reader(payload);
    let kind = r.u8()?;
    let db = if kind >= 10 { r.u8()? } else { 0 };
    if db >= DATABASES {
        return Err(DecodeError::Malformed);
    }
    let rec = match kind {
        1 | 10 => RecordRef::Set {
            key: r.bytes()?,
            value: r.bytes()?,
            expire_at_ms: r.opt()?,
        },
        18 => RecordRef::SetStr {
            key: r.bytes()?,
            value: r.bytes()?,
            expire_at_ms: r.opt()?,
            enc: match r.u8()? {
                1 => StrEnc::Raw,
                2 => StrEnc::Float,
                _ => return Err(DecodeError::Malformed),
            },
        },
        2 | 11 => RecordRef::Del { key: r.bytes()? },
        3 | 12 => RecordRef::Expire {
            key: r.bytes()?,
            at_ms: r.opt()?,
        },
        4 | 13 => RecordRef::Flush,
        14 => RecordRef::FlushAll,
        super::tx::TX_KIND => {
            let more = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(DecodeError::Malformed),
            };
            let id = r.u64()?;
            let shards = r.bytes()?;
            let body = std::mem::take(&mut r.0);
            if shards.len() % 4 != 0 || !super::tx::valid_body(body) {
                return Err(DecodeError::Malformed);
            }
            RecordRef::Tx {
                id,
                more,
                shards,
                body,
            }
        }
        15 => match r.u8()? {
            other if other < DATABASES => RecordRef::SwapDb { other },
            _ => return Err(DecodeError::Malformed),
        },
        16 => RecordRef::Append {
            key: r.bytes()?,
            piece: r.bytes()?,
        },
        17 => RecordRef::SetRange {
            key: r.bytes()?,
            offset: r.u64()?,
            piece: r.bytes()?,
        },
        20 => RecordRef::Hash {
            key: r.bytes()?,
            expire_at_ms: r.opt()?,
            items: r.items()?,
        },
        21 => RecordRef::HSet {
            key: r.bytes()?,
            items: r.items()?,
        },
        22 => RecordRef::HDel {
            key: r.bytes()?,
            items: r.items()?,
        },
        50 => RecordRef::ZSet {
            key: r.bytes()?,
            expire_at_ms: r.opt()?,
            items: r.items()?,
        },
        51 => RecordRef::ZAdd {
            key: r.bytes()?,
            items: r.items()?,
        },
        52 => RecordRef::ZRem {
            key: r.bytes()?,
            items: r.items()?,
        },
        40 => RecordRef::Members {
            key: r.bytes()?,
            expire_at_ms: r.opt()?,
            items: r.items()?,
        },
        41 => RecordRef::SAdd {
            key: r.bytes()?,
            items: r.items()?,
        },
        42 => RecordRef::SRem {
            key: r.bytes()?,
            items: r.items()?,
        },
        30 => RecordRef::List {
            key: r.bytes()?,
            expire_at_ms: r.opt()?,
            items: r.items()?,
        },
        31 => RecordRef::LPush {
            key: r.bytes()?,
            items: r.items()?,
        },
        32 => RecordRef::RPush {
            key: r.bytes()?,
            items: r.items()?,
        },
        33 => RecordRef::LPop {
            key: r.bytes()?,
            count: r.u64()?,
        },
        34 => RecordRef::RPop {
            key: r.bytes()?,
            count: r.u64()?,
        },
        35 => RecordRef::LSet {
            key: r.bytes()?,
            index: r.u64()?,
            value: r.bytes()?,
        },
        36 => RecordRef::LInsert {
            key: r.bytes()?,
            index: r.u64()?,
            value: r.bytes()?,
        },
        37 => match (r.bytes()?, r.items()?) {
            (key, positions) if positions.iter().all(|p| p.len() == 8) => {
                RecordRef::LRem { key, positions }
            }
            _ => return Err(DecodeError::Malformed),
        },
        k if crate::keyspace::stream::KINDS.contains(&k) => {
            let key = r.bytes()?;
            let body = std::mem::take(&mut r.0);
            if !crate::keyspace::stream::valid_body(k, body) {
                return Err(DecodeError::Malformed);
            }
            RecordRef::Stream { kind: k, key, body }
        }
        _ => return Err(DecodeError::Malformed),
    };
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed);
    }
    if let RecordRef::Hash { items, .. } | RecordRef::HSet { items, .. } = rec {
        if items.len() % 2 != 0 {
            return Err(DecodeError::Malformed);
        }
    }
    // A sorted set's pairs: whole, each score 8 bytes and a number.
    if let RecordRef::ZSet { items, .. } | RecordRef::ZAdd { items, .. } = rec {
        if !crate::keyspace::zset::valid_items(&items) {
            return Err(DecodeError::Malformed);
        }
    }
    Ok((db, rec, FRAME_HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let recs = [
            Record::Set {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                expire_at_ms: None,
            },
            Record::Set {
                key: vec![],
                value: vec![0; 300],
                expire_at_ms: Some(u64::MAX),
            },
            Record::SetStr {
                key: b"k".to_vec(),
                value: b"1000".to_vec(),
                expire_at_ms: Some(9),
                enc: StrEnc::Float,
            },
            Record::SetStr {
                key: b"k".to_vec(),
                value: vec![],
                expire_at_ms: None,
                enc: StrEnc::Raw,
            },
            Record::Del {
                key: b"gone".to_vec(),
            },
            Record::Expire {
                key: b"k".to_vec(),
                at_ms: Some(17),
            },
            Record::Expire {
                key: b"k".to_vec(),
                at_ms: None,
            },
            Record::Flush,
            Record::FlushAll,
            Record::SwapDb { other: 15 },
            Record::Append {
                key: b"k".to_vec(),
                piece: b"more".to_vec(),
            },
            Record::SetRange {
                key: b"k".to_vec(),
                offset: 1 << 40,
                piece: vec![],
            },
            Record::Hash {
                key: b"h".to_vec(),
                expire_at_ms: Some(5),
                items: vec![b"f".to_vec(), vec![9; 200], vec![], b"v".to_vec()],
            },
            Record::HSet {
                key: b"h".to_vec(),
                items: vec![b"f".to_vec(), b"v".to_vec()],
            },
            Record::HDel {
                key: b"h".to_vec(),
                items: vec![b"f".to_vec(), vec![1; 130], vec![]],
            },
            Record::ZSet {
                key: b"z".to_vec(),
                expire_at_ms: Some(3),
                items: vec![
                    b"a".to_vec(),
                    (-1.5f64).to_bits().to_le_bytes().to_vec(),
                    vec![8; 200],
                    f64::INFINITY.to_bits().to_le_bytes().to_vec(),
                ],
            },
            Record::ZAdd {
                key: b"z".to_vec(),
                items: vec![vec![], 0.25f64.to_bits().to_le_bytes().to_vec()],
            },
            Record::ZRem {
                key: b"z".to_vec(),
                items: vec![b"a".to_vec(), vec![]],
            },
            Record::Members {
                key: b"s".to_vec(),
                expire_at_ms: Some(9),
                items: vec![b"m".to_vec(), vec![7; 300], vec![]],
            },
            Record::SAdd {
                key: b"s".to_vec(),
                items: vec![b"-12".to_vec()],
            },
            Record::SRem {
                key: b"s".to_vec(),
                items: vec![b"m".to_vec(), vec![]],
            },
            Record::List {
                key: b"l".to_vec(),
                expire_at_ms: None,
                items: vec![b"a".to_vec(), vec![3; 200], vec![]],
            },
            Record::LPush {
                key: b"l".to_vec(),
                items: vec![b"x".to_vec()],
            },
            Record::RPush {
                key: b"l".to_vec(),
                items: vec![vec![], b"y".to_vec()],
            },
            Record::LPop {
                key: b"l".to_vec(),
                count: 3,
            },
            Record::RPop {
                key: b"l".to_vec(),
                count: u64::MAX,
            },
            Record::LSet {
                key: b"l".to_vec(),
                index: 7,
                value: b"v".to_vec(),
            },
            Record::LInsert {
                key: b"l".to_vec(),
                index: 0,
                value: vec![],
            },
            Record::LRem {
                key: b"l".to_vec(),
                positions: vec![9u64.to_le_bytes().to_vec(), 2u64.to_le_bytes().to_vec()],
            },
        ];
        for (i, rec) in recs.iter().enumerate() {
            let mut buf = Vec::new();
            let db = (i % 16) as u8;
            encode_in(db, &rec.as_ref(), &mut buf);
            assert_eq!(decode(&buf), Ok((rec.clone(), buf.len())));
            let (got_db, got, n) = decode_frame(&buf).unwrap();
            assert_eq!((got_db, got, n), (db, rec.as_ref(), buf.len()));
            for cut in 0..buf.len() {
                assert_eq!(
                    decode(&buf[..cut]),
                    Err(DecodeError::Truncated),
                    "cut at {cut}"
                );
            }
            for i in FRAME_HEADER..buf.len() {
                let mut bad = buf.clone();
                bad[i] ^= 0x40;
                assert_eq!(decode(&bad), Err(DecodeError::BadChecksum), "flip at {i}");
            }
        }
    }

    /// A `SetStr` whose encoding byte names no encoding is not a record.
    #[test]
    fn set_str_of_an_unknown_encoding_is_malformed() {
        let mut buf = Vec::new();
        let rec = RecordRef::SetStr {
            key: b"k",
            value: b"v",
            expire_at_ms: None,
            enc: StrEnc::Raw,
        };
        encode_in(0, &rec, &mut buf);
        for bad in [0u8, 3, 255] {
            let mut payload = buf[FRAME_HEADER..].to_vec();
            *payload.last_mut().unwrap() = bad;
            let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
            frame.extend_from_slice(&payload);
            assert_eq!(decode(&frame), Err(DecodeError::Malformed), "enc {bad}");
        }
    }

    /// Format 2's records (kinds 1 to 4, no database byte) are read as database 0.
    #[test]
    fn format_2_records_are_database_0() {
        let frame = |payload: &[u8]| {
            let mut f = (payload.len() as u32).to_le_bytes().to_vec();
            f.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
            f.extend_from_slice(payload);
            f
        };
        let mut set = vec![1];
        set.extend_from_slice(&1u32.to_le_bytes());
        set.push(b'k');
        set.extend_from_slice(&2u32.to_le_bytes());
        set.extend_from_slice(b"vv");
        set.extend_from_slice(&[1, 7, 0, 0, 0, 0, 0, 0, 0]);
        let mut del = vec![2];
        del.extend_from_slice(&1u32.to_le_bytes());
        del.push(b'k');
        let mut expire = vec![3];
        expire.extend_from_slice(&1u32.to_le_bytes());
        expire.push(b'k');
        expire.push(0);
        let cases = [
            (
                set,
                RecordRef::Set {
                    key: b"k",
                    value: b"vv",
                    expire_at_ms: Some(7),
                },
            ),
            (del, RecordRef::Del { key: b"k" }),
            (
                expire,
                RecordRef::Expire {
                    key: b"k",
                    at_ms: None,
                },
            ),
            (vec![4], RecordRef::Flush),
        ];
        for (payload, want) in cases {
            let f = frame(&payload);
            assert_eq!(decode_frame(&f), Ok((0, want, f.len())));
        }
        // A format 3 kind with a database out of range, an odd hash, an unknown kind.
        let mut bad_db = vec![11, 16];
        bad_db.extend_from_slice(&0u32.to_le_bytes());
        let mut odd = vec![21, 0];
        odd.extend_from_slice(&0u32.to_le_bytes());
        odd.extend_from_slice(&1u32.to_le_bytes());
        odd.extend_from_slice(&[1, b'f']);
        let mut short = vec![22, 0];
        short.extend_from_slice(&0u32.to_le_bytes());
        short.extend_from_slice(&2u32.to_le_bytes());
        short.extend_from_slice(&[1, b'f']);
        // A sorted set's score of 7 bytes, and a NaN score.
        let zadd = |score: &[u8]| {
            let mut p = vec![51, 0];
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&2u32.to_le_bytes());
            p.extend_from_slice(&[1, b'm', score.len() as u8]);
            p.extend_from_slice(score);
            p
        };
        let (short_score, nan) = (zadd(&[0; 7]), zadd(&f64::NAN.to_bits().to_le_bytes()));
        for payload in [
            bad_db,
            odd,
            short,
            vec![9],
            vec![15, 0, 16],
            short_score,
            nan,
        ] {
            assert_eq!(
                decode_frame(&frame(&payload)),
                Err(DecodeError::Malformed),
                "{payload:?}"
            );
        }
    }

    /// A change of many elements is split into records of at most ITEMS_PER_RECORD
    /// bytes of elements (one element alone may be larger), whole pairs each, which
    /// together hold every element in order.
    #[test]
    fn many_elements_are_split_into_whole_records() {
        let big = vec![b'x'; ITEMS_PER_RECORD + 5];
        let small: Vec<Vec<u8>> = (0..3000).map(|i| vec![i as u8; 700]).collect();
        let mut elements: Vec<&[u8]> = small.iter().map(Vec::as_slice).collect();
        elements.insert(10, &big);
        elements.insert(11, b"v");
        let mut out = Vec::new();
        encode_split(
            3,
            &elements,
            2,
            |items| RecordRef::HSet { key: b"h", items },
            &mut out,
        );
        let mut at = 0;
        let mut back: Vec<Vec<u8>> = Vec::new();
        let mut records = 0;
        while at < out.len() {
            let (db, rec, n) = decode_frame(&out[at..]).unwrap();
            assert_eq!(db, 3);
            let RecordRef::HSet { key, items } = rec else {
                panic!("{rec:?}")
            };
            assert_eq!(key, b"h");
            assert_eq!(items.len() % 2, 0);
            assert!(items.packed_len() <= ITEMS_PER_RECORD || items.len() == 2);
            back.extend(items.to_vec());
            at += n;
            records += 1;
        }
        assert!(records > 2, "{records}");
        assert_eq!(
            back,
            elements.iter().map(|e| e.to_vec()).collect::<Vec<_>>()
        );
    }

    /// The largest record that the limits let the server write is one recovery reads:
    /// the length of an encoded `Set` is what [`set_payload_len`] says, and a key and a
    /// value of [`MAX_VALUE`] bytes each make exactly [`MAX_PAYLOAD`], which the 32-bit
    /// length field holds.
    #[test]
    fn the_largest_record_fits_the_limit() {
        for (k, v, exp) in [(0, 0, None), (3, 1000, Some(5)), (1, 70_000, None)] {
            let (key, value) = (vec![b'k'; k], vec![b'v'; v]);
            let mut buf = Vec::new();
            encode(
                &RecordRef::Set {
                    key: &key,
                    value: &value,
                    expire_at_ms: exp,
                },
                &mut buf,
            );
            let payload = buf.len() - FRAME_HEADER;
            let most = set_payload_len(k, v);
            assert_eq!(payload, if exp.is_some() { most } else { most - 8 });
        }
        assert!(set_payload_len(MAX_VALUE, MAX_VALUE) <= MAX_PAYLOAD);
        assert!(MAX_PAYLOAD as u64 <= u64::from(u32::MAX));
        assert_eq!(MAX_VALUE, 1 << 30);
    }
}
