//! A key's entry: one allocation holding its metadata, its key and its value.
//!
//! ```text
//! [ e:1 tag:7 access:24 stamp:32 | key_len u32 | value_len u32 | (expire u64, if e) | key | value ... ]
//!   16 bytes of head                                                                       capacity(value_len)
//! ```
//!
//! The tag (the head word's top byte but one bit) is the value's type and encoding (`value.rs`): a string's bytes, a small collection packed,
//! or a pointer to a big collection's boxed structure, which the entry owns and frees.
//! The top bit `e` says whether the key has an expiry time, which then follows the head:
//! a key without one (most) spends no bytes on it. Giving a key an expiry, or taking it
//! away, moves the entry to a block of the other layout (EXPIRE and PERSIST are rare
//! next to reads).
//!
//! The next 24 bits are the key's access information (`access.rs`: an LRU clock or an
//! LFU counter, as Redis keeps in its objects' `lru` field), which every command's
//! lookup updates, through `&Entry` too (the word is atomic; a shard's entries are
//! only ever used by its worker, so the updates are plain loads and stores).
//!
//! The low 32 bits are the low bits of the key's durability stamp (the LSN of the
//! command that last changed it: keyspace doc). The keyspace gives it back whole from
//! the stamp of the command running now ([`Entry::stamp_at`]): the latest LSN at or
//! before that with those low bits. That is the true stamp unless the key was last
//! changed more than 4 GiB of records ago, and then a later LSN, no later than the
//! running command's: a read may then wait for other keys' records too, which is safe
//! (a stamp only ever tells a read what to wait for).
//!
//! One allocation per key (a 14-byte key with a 14-byte value takes 46 bytes, a 48-byte
//! malloc chunk), so a lookup that found the key's slot in the index costs one more
//! cache miss for key, value and expiry together. The value's room is a function of
//! its length ([`capacity`]: rounded up to 8 bytes, or to an eighth of its power of two
//! above 64), so the allocation's layout is known from the head alone, a SET of a value
//! of the same size class reuses the block, and APPEND grows it geometrically
//! (amortized constant time, as Redis's sds).

use super::value::{self, tag, Type};
use std::alloc::{alloc, dealloc, handle_alloc_error, realloc, Layout};
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[repr(C)]
struct Head {
    /// Whether an expiry follows (top bit), the value's tag (the next 7 bits), the
    /// access bits (24) and the low 32 bits of the stamp of the command that last
    /// changed the key (keyspace doc).
    word: AtomicU64,
    key_len: u32,
    value_len: u32,
}

const HEAD: usize = core::mem::size_of::<Head>();
const _: () = assert!(HEAD == 16);

/// The bytes of an expiry time after the head (the absolute time in Unix ms; 0, long
/// passed, is kept as 1).
const EXPIRE: usize = 8;

/// The stamp's bits kept (its low ones).
const STAMP_BITS: u32 = 32;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;
/// Where the access bits start.
const ACCESS_SHIFT: u32 = STAMP_BITS;
const ACCESS_MASK: u64 = ((1 << super::access::BITS) - 1) << ACCESS_SHIFT;
/// Where the tag starts.
const TAG_SHIFT: u32 = 56;
/// The stamp word's bit saying that an expiry follows the head.
const EXPIRES: u64 = 1 << 63;
/// The tag's bits, once shifted down.
const TAG_MASK: u64 = 0x7f;

/// The room kept for a value of `len` bytes: `len` rounded up to a multiple of 8 below
/// 64 bytes, else to a multiple of an eighth of its highest power of two (at most
/// 12.5% unused, and growth by steps of that fraction at least).
#[inline]
fn capacity(len: usize) -> usize {
    if len < 64 {
        (len + 7) & !7
    } else {
        let step = 1usize << (usize::BITS - 1 - len.leading_zeros() - 3);
        (len + step - 1) & !(step - 1)
    }
}

/// The bytes before the key: the head, and the expiry if there is one.
#[inline]
fn prefix(expires: bool) -> usize {
    HEAD + if expires { EXPIRE } else { 0 }
}

#[inline]
fn layout(key_len: usize, value_len: usize, expires: bool) -> Layout {
    Layout::from_size_align(prefix(expires) + key_len + capacity(value_len), 8).expect("entry size")
}

/// One key's entry (owned: dropping it frees the allocation). Transparent over a
/// non-null pointer, so `Option<Entry>` is one word and all-zero bytes are `None` (the
/// index allocates its tables zeroed).
#[repr(transparent)]
pub struct Entry(NonNull<Head>);

// SAFETY: an Entry owns its allocation alone (as a Box does), and its only interior
// mutability is the head word, an atomic, so it may move to another thread.
unsafe impl Send for Entry {}
// SAFETY: as above; `&Entry` only reads, but for the head word's access bits, which
// it changes with atomic operations (no data race whatever the threads).
unsafe impl Sync for Entry {}

impl Entry {
    /// A new string entry holding copies of `key` and `value`.
    pub fn new(key: &[u8], value: &[u8], expire: Option<NonZeroU64>, stamp: u64) -> Entry {
        Entry::with_tag(tag::STR, key, value, expire, stamp)
    }

    /// A new entry of tag `tag` holding copies of `key` and the value's bytes `value`
    /// (for a boxed tag, the pointer's bytes: the entry then owns the structure).
    pub fn with_tag(
        tag: u8,
        key: &[u8],
        value: &[u8],
        expire: Option<NonZeroU64>,
        stamp: u64,
    ) -> Entry {
        debug_assert!(tag as u64 <= TAG_MASK, "a tag of 7 bits");
        let word = (stamp & STAMP_MASK)
            | (super::access::initial() as u64) << ACCESS_SHIFT
            | (tag as u64) << TAG_SHIFT
            | if expire.is_some() { EXPIRES } else { 0 };
        let (key_len, value_len) = (
            u32::try_from(key.len()).expect("key under 4 GiB"),
            u32::try_from(value.len()).expect("value under 4 GiB"),
        );
        let layout = layout(key.len(), value.len(), expire.is_some());
        // SAFETY: the layout's size is at least HEAD, not zero.
        let p = unsafe { alloc(layout) } as *mut Head;
        let Some(p) = NonNull::new(p) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `p` is a new allocation of prefix + key.len() + capacity(value.len())
        // bytes, aligned to 8 (as Head and the expiry need): the head, the expiry (if
        // any), the key and the value are written inside it, and the sources do not
        // overlap it.
        unsafe {
            p.as_ptr().write(Head {
                word: AtomicU64::new(word),
                key_len,
                value_len,
            });
            let base = p.as_ptr() as *mut u8;
            if let Some(at) = expire {
                (base.add(HEAD) as *mut u64).write(at.get());
            }
            let data = base.add(prefix(expire.is_some()));
            core::ptr::copy_nonoverlapping(key.as_ptr(), data, key.len());
            core::ptr::copy_nonoverlapping(value.as_ptr(), data.add(key.len()), value.len());
        }
        Entry(p)
    }

    /// Whether an expiry follows the head.
    #[inline]
    fn expires(&self) -> bool {
        self.word() & EXPIRES != 0
    }

    /// The head word.
    #[inline]
    fn word(&self) -> u64 {
        self.head().word.load(Relaxed)
    }

    /// Sets the head word (only the entry's worker ever uses it: see the module doc).
    #[inline]
    fn set_word(&self, w: u64) {
        self.head().word.store(w, Relaxed);
    }

    #[inline]
    fn head(&self) -> &Head {
        // SAFETY: the pointer is to a live allocation that starts with an initialized
        // Head, owned by `self`.
        unsafe { self.0.as_ref() }
    }

    #[inline]
    fn head_mut(&mut self) -> &mut Head {
        // SAFETY: as in `head`, and `&mut self` makes the access unique.
        unsafe { self.0.as_mut() }
    }

    #[inline]
    fn data(&self) -> *mut u8 {
        // SAFETY: the allocation is at least the prefix its head says it has.
        unsafe { (self.0.as_ptr() as *mut u8).add(prefix(self.expires())) }
    }

    /// The allocation's address (for a prefetch).
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.0.as_ptr() as *const u8
    }

    /// The key.
    #[inline]
    pub fn key(&self) -> &[u8] {
        // SAFETY: the key's `key_len` bytes follow the head, initialized.
        unsafe { core::slice::from_raw_parts(self.data(), self.head().key_len as usize) }
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &[u8] {
        let h = self.head();
        // SAFETY: the value's `value_len` initialized bytes follow the key.
        unsafe {
            core::slice::from_raw_parts(self.data().add(h.key_len as usize), h.value_len as usize)
        }
    }

    /// The value, to change in place.
    #[inline]
    pub fn value_mut(&mut self) -> &mut [u8] {
        let (k, v) = (self.head().key_len as usize, self.head().value_len as usize);
        // SAFETY: as in `value`; `&mut self` makes the access unique.
        unsafe { core::slice::from_raw_parts_mut(self.data().add(k), v) }
    }

    /// The absolute expiry time (Unix ms), if any.
    #[inline]
    pub fn expire_at_ms(&self) -> Option<u64> {
        self.expire().map(NonZeroU64::get)
    }

    /// The expiry as stored.
    #[inline]
    pub(super) fn expire(&self) -> Option<NonZeroU64> {
        if !self.expires() {
            return None;
        }
        // SAFETY: the head says the 8 bytes after it, aligned (the head is 16 bytes
        // at the start of an 8-aligned block), hold the expiry.
        NonZeroU64::new(unsafe { ((self.0.as_ptr() as *const u8).add(HEAD) as *const u64).read() })
    }

    /// Sets the stored expiry; answers the previous one. Giving a key its first expiry
    /// or taking its last away moves the entry to a block of the other layout.
    pub(super) fn replace_expire(&mut self, expire: Option<NonZeroU64>) -> Option<NonZeroU64> {
        let old = self.expire();
        if old.is_some() == expire.is_some() {
            if let Some(at) = expire {
                // SAFETY: as in `expire`; `&mut self` makes the access unique.
                unsafe { ((self.0.as_ptr() as *mut u8).add(HEAD) as *mut u64).write(at.get()) };
            }
            return old;
        }
        let h = self.head();
        let (key_len, value_len) = (h.key_len as usize, h.value_len as usize);
        let (from, to) = (
            layout(key_len, value_len, old.is_some()),
            layout(key_len, value_len, expire.is_some()),
        );
        // SAFETY: the new layout's size is at least HEAD, not zero.
        let p = unsafe { alloc(to) } as *mut Head;
        let Some(p) = NonNull::new(p) else {
            handle_alloc_error(to)
        };
        // SAFETY: `p` is a new block of the layout for the new expiry; the old block
        // (of layout `from`, which its head gives) holds the head, then the key and
        // the value after its own prefix; the copies stay inside both blocks, which do
        // not overlap; the old block is freed with the layout it was allocated with
        // and not used again (`self` now points to the new one).
        unsafe {
            let (src, dst) = (self.0.as_ptr() as *mut u8, p.as_ptr() as *mut u8);
            let word = (self.word() & !EXPIRES) | if expire.is_some() { EXPIRES } else { 0 };
            p.as_ptr().write(Head {
                word: AtomicU64::new(word),
                key_len: key_len as u32,
                value_len: value_len as u32,
            });
            if let Some(at) = expire {
                (dst.add(HEAD) as *mut u64).write(at.get());
            }
            core::ptr::copy_nonoverlapping(
                src.add(prefix(old.is_some())),
                dst.add(prefix(expire.is_some())),
                key_len + value_len,
            );
            dealloc(src, from);
        }
        self.0 = p;
        old
    }

    /// The low 32 bits of the stamp of the command that last changed the key.
    #[inline]
    pub fn stamp(&self) -> u64 {
        self.word() & STAMP_MASK
    }

    /// The stamp of the command that last changed the key, or a later one no later
    /// than `now` (the stamp of the command running now; module doc).
    #[inline]
    pub fn stamp_at(&self, now: u64) -> u64 {
        let back = now.wrapping_sub(self.stamp()) & STAMP_MASK;
        // A stamp is never past `now`; were it, `now` is the safe answer.
        now.checked_sub(back).unwrap_or(now)
    }

    #[inline]
    pub(super) fn set_stamp(&mut self, stamp: u64) {
        let w = self.word();
        self.set_word((w & !STAMP_MASK) | (stamp & STAMP_MASK));
    }

    /// The access bits (`access.rs`).
    #[inline]
    pub fn access(&self) -> u32 {
        ((self.word() & ACCESS_MASK) >> ACCESS_SHIFT) as u32
    }

    /// Sets the access bits (a lookup through `&Entry` may: module doc).
    #[inline]
    pub fn set_access(&self, bits: u32) {
        let w = self.word();
        self.set_word((w & !ACCESS_MASK) | ((bits as u64) << ACCESS_SHIFT & ACCESS_MASK));
    }

    /// The value's tag: its type and encoding ([`value::tag`]).
    #[inline]
    pub fn tag(&self) -> u8 {
        ((self.word() >> TAG_SHIFT) & TAG_MASK) as u8
    }

    /// The value's type.
    #[inline]
    pub fn kind(&self) -> Type {
        value::type_of(self.tag())
    }

    /// Whether the value is a string.
    #[inline]
    pub fn is_string(&self) -> bool {
        self.tag() <= tag::STR_RAW || self.tag() == tag::STR_EMB
    }

    /// Forgets how a string was made, so that its bytes alone decide its encoding
    /// (RESTORE: Redis encodes a loaded string anew).
    pub fn forget_string_origin(&mut self) {
        if self.is_string() {
            self.set_tag(tag::STR);
        }
    }

    /// Sets the tag, keeping the value's bytes (a change of encoding the caller has
    /// made in the bytes, or a string marked raw).
    #[inline]
    pub(super) fn set_tag(&mut self, tag: u8) {
        let w = self.word();
        self.set_word((w & !(TAG_MASK << TAG_SHIFT)) | (tag as u64) << TAG_SHIFT);
    }

    /// The bytes the value counts in the keyspace's memory (`value.rs`).
    #[inline]
    pub fn value_memory(&self) -> u64 {
        value::memory(self.tag(), self.value())
    }

    /// Frees the boxed structure of a boxed value (then the value's bytes are
    /// meaningless: the caller replaces them).
    fn drop_boxed(&mut self) {
        if value::is_boxed(self.tag()) {
            // SAFETY: a boxed tag's bytes hold the pointer to the structure the entry
            // owns; the caller replaces the bytes and tag before any other use.
            unsafe { value::drop_boxed(self.tag(), self.value()) };
            self.set_tag(tag::STR);
        }
    }

    /// Makes the value `len` bytes long: bytes past the old end are zero. The block is
    /// reallocated only when the size class changes.
    pub fn resize(&mut self, len: usize) {
        let (key_len, old) = (self.head().key_len as usize, self.head().value_len as usize);
        let len32 = u32::try_from(len).expect("value under 4 GiB");
        if capacity(len) != capacity(old) {
            let exp = self.expires();
            let (from, to) = (layout(key_len, old, exp), layout(key_len, len, exp));
            // SAFETY: the block was allocated with `from` (the layout depends only on
            // the key's length, the value's size class and whether there is an expiry,
            // unchanged since); the new size is not zero. realloc keeps the head, the
            // expiry and the key (and the value's first min(old, len) bytes).
            let p = unsafe { realloc(self.0.as_ptr() as *mut u8, from, to.size()) } as *mut Head;
            self.0 = NonNull::new(p).unwrap_or_else(|| handle_alloc_error(to));
        }
        if len > old {
            // SAFETY: the block has room for `capacity(len)` >= len value bytes after
            // the key; bytes old..len are inside it (`data` reads the new block).
            unsafe { core::ptr::write_bytes(self.data().add(key_len + old), 0, len - old) };
        }
        self.head_mut().value_len = len32;
    }

    /// Replaces the value with the string `value` (in place when the size class is the
    /// same), freeing a boxed value first.
    pub fn set_value(&mut self, value: &[u8]) {
        self.set_payload(tag::STR, value);
    }

    /// Replaces the value with bytes `value` of tag `tag` (a boxed tag's pointer: the
    /// entry then owns the structure), freeing a boxed value first.
    pub fn set_payload(&mut self, tag: u8, value: &[u8]) {
        self.drop_boxed();
        self.resize(value.len());
        self.value_mut().copy_from_slice(value);
        self.set_tag(tag);
    }

    /// Replaces the value's bytes `range` with `with`, moving the bytes after it (the
    /// block is reallocated only when the size class changes).
    pub fn splice(&mut self, range: core::ops::Range<usize>, with: &[u8]) {
        self.splice_parts(range, &[with]);
    }

    /// [`Entry::splice`] with the concatenation of `parts` (nothing is allocated to
    /// join them).
    pub fn splice_parts(&mut self, range: core::ops::Range<usize>, parts: &[&[u8]]) {
        let old = self.value().len();
        debug_assert!(range.start <= range.end && range.end <= old);
        let with: usize = parts.iter().map(|p| p.len()).sum();
        let new = old - range.len() + with;
        if new > old {
            self.resize(new);
            self.value_mut()
                .copy_within(range.end..old, range.start + with);
        } else {
            self.value_mut()
                .copy_within(range.end..old, range.start + with);
            self.resize(new);
        }
        let mut at = range.start;
        let v = self.value_mut();
        for p in parts {
            v[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.drop_boxed();
        let h = self.head();
        let layout = layout(h.key_len as usize, h.value_len as usize, self.expires());
        // SAFETY: the block was allocated with this layout (see `resize`), and is
        // not used again.
        unsafe { dealloc(self.0.as_ptr() as *mut u8, layout) }
    }
}

impl core::fmt::Debug for Entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("tag", &self.tag())
            .field("value", &String::from_utf8_lossy(self.value()))
            .field("expire_at_ms", &self.expire_at_ms())
            .field("stamp", &self.stamp())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_classes() {
        assert_eq!(capacity(0), 0);
        assert_eq!(capacity(1), 8);
        assert_eq!(capacity(14), 16);
        assert_eq!(capacity(64), 64);
        assert_eq!(capacity(65), 72);
        assert_eq!(capacity(1000), 1024);
        for n in 0..5000 {
            assert!(capacity(n) >= n && capacity(n) <= n + n / 8 + 8, "{n}");
        }
    }

    /// Giving a key an expiry and taking it away moves it between the two layouts,
    /// keeping key, value, tag and stamp; changing an expiry stays in place.
    #[test]
    fn expiry_comes_and_goes() {
        for (klen, vlen) in [(0, 0), (1, 7), (14, 14), (40, 300), (3, 5000)] {
            let key: Vec<u8> = (0..klen).map(|i| i as u8).collect();
            let value: Vec<u8> = (0..vlen).map(|i| (i * 7) as u8).collect();
            let mut e = Entry::with_tag(tag::STR_RAW, &key, &value, None, 11);
            for round in 0..6u64 {
                let at = (round % 3 != 2).then(|| NonZeroU64::new(100 + round).unwrap());
                e.replace_expire(at);
                assert_eq!(e.expire(), at, "{klen} {vlen} {round}");
                assert_eq!((e.key(), e.value()), (key.as_slice(), value.as_slice()));
                assert_eq!((e.tag(), e.stamp()), (tag::STR_RAW, 11));
                e.set_stamp(11);
            }
            e.resize(vlen + 100);
            assert_eq!(&e.value()[..vlen], value.as_slice());
            assert_eq!(e.key(), key.as_slice());
        }
        let e = Entry::new(b"k", b"v", NonZeroU64::new(5), 1);
        assert_eq!(
            (e.expire_at_ms(), e.key(), e.value()),
            (Some(5), &b"k"[..], &b"v"[..])
        );
    }

    #[test]
    fn splice_and_tags() {
        let mut e = Entry::new(b"k", b"abcdef", None, 5);
        assert_eq!((e.tag(), e.stamp(), e.kind()), (tag::STR, 5, Type::String));
        e.splice(1..3, b"XYZ");
        assert_eq!(e.value(), b"aXYZdef");
        e.splice(0..7, b"");
        assert_eq!(e.value(), b"");
        let long = vec![b'q'; 300];
        e.splice(0..0, &long);
        e.splice(300..300, b"end");
        assert_eq!(&e.value()[298..], b"qqend");
        e.splice(1..299, b"");
        assert_eq!(e.value(), b"qqend");
        e.set_tag(tag::STR_RAW);
        e.set_stamp(9);
        assert_eq!((e.tag(), e.stamp()), (tag::STR_RAW, 9));
        e.set_payload(tag::HASH_PACKED, b"xy");
        assert_eq!(
            (e.tag(), e.stamp(), e.value()),
            (tag::HASH_PACKED, 9, &b"xy"[..])
        );
        assert_eq!(e.key(), b"k");
    }

    #[test]
    fn key_value_resize_keep_bytes() {
        for klen in [0, 1, 14, 40] {
            let key: Vec<u8> = (0..klen as u8).collect();
            let mut e = Entry::new(&key, b"hello", NonZeroU64::new(7), 3);
            assert_eq!((e.key(), e.value()), (key.as_slice(), &b"hello"[..]));
            assert_eq!((e.expire_at_ms(), e.stamp()), (Some(7), 3));
            let mut model = b"hello".to_vec();
            for step in 0..300usize {
                let more = vec![step as u8; step % 37];
                let len = model.len() + more.len();
                let old = model.len();
                e.resize(len);
                e.value_mut()[old..].copy_from_slice(&more);
                model.extend_from_slice(&more);
                assert_eq!(e.value(), model.as_slice());
                assert_eq!(e.key(), key.as_slice());
            }
            e.resize(3);
            assert_eq!(e.value(), &model[..3]);
            e.resize(10);
            assert_eq!(
                e.value(),
                &[model[0], model[1], model[2], 0, 0, 0, 0, 0, 0, 0]
            );
            e.set_value(b"x");
            assert_eq!(e.value(), b"x");
            assert_eq!(e.replace_expire(None), NonZeroU64::new(7));
            assert_eq!(e.expire_at_ms(), None);
        }
    }
}
