//! Packed elements: a run of byte strings, each written as its length in LEB128 (one
//! byte below 128) followed by its bytes.
//!
//! The same bytes are a small collection's value inside its keyspace entry (a packed
//! hash alternates field and value: docs/kv-types.md) and the elements of a log record
//! (`log/record.rs`), so a packed value goes into a record, and comes back out of one,
//! as one copy.

/// The most bytes a length takes (a `u64` in LEB128).
pub const MAX_LEN_BYTES: usize = 10;

/// The bytes `n` takes in LEB128.
#[inline]
pub fn len_bytes(n: usize) -> usize {
    let bits = usize::BITS - (n | 1).leading_zeros();
    bits.div_ceil(7) as usize
}

/// The bytes one element of `n` bytes takes, packed.
#[inline]
pub fn element_bytes(n: usize) -> usize {
    len_bytes(n) + n
}

/// Appends `n` in LEB128.
#[inline]
pub fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Writes `n` in LEB128 at the start of `to` (which has room: [`len_bytes`]); answers
/// the bytes written.
#[inline]
pub fn write_len(to: &mut [u8], mut n: usize) -> usize {
    let mut i = 0;
    while n >= 0x80 {
        to[i] = (n as u8) | 0x80;
        n >>= 7;
        i += 1;
    }
    to[i] = n as u8;
    i + 1
}

/// Appends one element.
#[inline]
pub fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads a LEB128 length at the start of `b`: the length and the bytes it took, or
/// `None` if `b` ends inside it or it does not fit a `usize`.
#[inline]
pub fn read_len(b: &[u8]) -> Option<(usize, usize)> {
    let first = *b.first()?;
    if first < 0x80 {
        return Some((first as usize, 1));
    }
    let mut n: u64 = 0;
    for (i, &c) in b.iter().enumerate().take(MAX_LEN_BYTES) {
        let part = (c & 0x7f) as u64;
        if i == 9 && part > 1 {
            return None;
        }
        n |= part << (7 * i);
        if c < 0x80 {
            return usize::try_from(n).ok().map(|n| (n, i + 1));
        }
    }
    None
}

/// Reads one element at the start of `b`: it and the bytes it took (length included),
/// or `None` if `b` does not hold a whole one.
#[inline]
pub fn read(b: &[u8]) -> Option<(&[u8], usize)> {
    let (n, k) = read_len(b)?;
    let end = k.checked_add(n)?;
    Some((b.get(k..end)?, end))
}

/// The elements of packed bytes, in order. Stops at the first element that is not
/// whole (callers check with [`count`] where the bytes come from outside).
#[derive(Clone)]
pub struct Iter<'a>(&'a [u8]);

impl<'a> Iter<'a> {
    /// The elements of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Iter<'a> {
        Iter(bytes)
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let (e, n) = read(self.0)?;
        self.0 = &self.0[n..];
        Some(e)
    }
}

/// How many whole elements `bytes` holds, or `None` if it does not end on an
/// element's end.
pub fn count(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        let (_, k) = read(&bytes[at..])?;
        at += k;
        n += 1;
    }
    Some(n)
}

/// Packs groups of elements (a field and its value, a member and its score) into runs
/// of at most `limit` bytes, a group alone possibly more: the whole state of a big
/// collection as records of bounded size. [`Chunks::push`] calls `f` with a run's
/// element count and bytes when the next group would not fit; [`Chunks::finish`] with
/// the last.
pub struct Chunks {
    buf: Vec<u8>,
    n: usize,
    limit: usize,
}

impl Chunks {
    /// Runs of at most `limit` bytes.
    pub fn new(limit: usize) -> Chunks {
        Chunks {
            buf: Vec::new(),
            n: 0,
            limit,
        }
    }

    /// Adds a group of elements, first handing the run so far to `f` if it would not
    /// fit in it.
    pub fn push(&mut self, group: &[&[u8]], f: &mut dyn FnMut(usize, &[u8])) {
        self.make_room(group.iter().map(|e| element_bytes(e.len())).sum(), f);
        for e in group {
            put(&mut self.buf, e);
        }
        self.n += group.len();
    }

    /// Adds `n` elements already packed as `bytes`, kept in one run, first handing the
    /// run so far to `f` if they would not fit in it.
    pub fn push_packed(&mut self, n: usize, bytes: &[u8], f: &mut dyn FnMut(usize, &[u8])) {
        self.make_room(bytes.len(), f);
        self.buf.extend_from_slice(bytes);
        self.n += n;
    }

    /// Hands the run so far to `f` if it holds something and `more` bytes would not
    /// fit in it.
    fn make_room(&mut self, more: usize, f: &mut dyn FnMut(usize, &[u8])) {
        if self.n > 0 && self.buf.len() + more > self.limit {
            f(self.n, &self.buf);
            self.buf.clear();
            self.n = 0;
        }
    }

    /// Hands the last run to `f`, if there is one.
    pub fn finish(self, f: &mut dyn FnMut(usize, &[u8])) {
        if self.n > 0 {
            f(self.n, &self.buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_round_trip() {
        for n in [
            0usize,
            1,
            127,
            128,
            300,
            16383,
            16384,
            1 << 30,
            u32::MAX as usize,
            usize::MAX,
        ] {
            let mut out = Vec::new();
            put_len(&mut out, n);
            assert_eq!(out.len(), len_bytes(n), "{n}");
            assert_eq!(read_len(&out), Some((n, out.len())), "{n}");
            let mut buf = [0u8; MAX_LEN_BYTES];
            assert_eq!(write_len(&mut buf, n), out.len());
            assert_eq!(&buf[..out.len()], out.as_slice());
            for cut in 0..out.len() {
                assert_eq!(read_len(&out[..cut]), None, "{n} cut at {cut}");
            }
        }
        // Eleven bytes, or a tenth byte above 1: not a u64.
        assert_eq!(read_len(&[0xff; 11]), None);
        let mut big = vec![0xff; 9];
        big.push(0x02);
        assert_eq!(read_len(&big), None);
    }

    #[test]
    fn elements_round_trip() {
        let items: Vec<Vec<u8>> = vec![vec![], b"a".to_vec(), vec![7; 200], vec![0; 127]];
        let mut out = Vec::new();
        for i in &items {
            put(&mut out, i);
        }
        assert_eq!(
            out.len(),
            items.iter().map(|i| element_bytes(i.len())).sum::<usize>()
        );
        assert_eq!(count(&out), Some(items.len()));
        let back: Vec<&[u8]> = Iter::new(&out).collect();
        assert_eq!(back, items.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(count(&out[..out.len() - 1]), None);
    }
}
