//! The bytes at the start of every shard log (and of a compaction's temporary file).
//!
//! ```text
//! header   = magic:"WEFTKVLG" version:u32le=3 shard:u32le shards:u32le dir:16 bytes crc:u32le
//!            (version 2: the same, of a format 2 directory: records of kinds 1 to 4 only)
//! (old)    = magic:"WEFTKVLG" version:u32le=1 crc:u32le          format 1, read to upgrade
//!                                                 crc = CRC32C(every byte before it)
//! ```
//!
//! The magic says what the file is (so `check` and recovery refuse a file that is not
//! a weft-kv log instead of cutting it), the version tells the formats apart, and the
//! checksum catches a damaged header. A version 2 header also says **whose** log it
//! is: shard `shard` of `shards`, of the data directory whose manifest holds the id
//! `dir` (a random number drawn when the directory was created). So a log copied from
//! another directory, renamed to another shard's name, or left from a directory with
//! another shard count is told apart from the right one (dir.rs checks every log's
//! header against the manifest before anything is read).
//!
//! Version 1 logs (16-byte header, no identity) and version 2 logs (records of strings
//! in database 0 only) are what weft-kv wrote before; a data directory of format 1 or
//! 2 is upgraded when a server or store opens it (dir.rs: a version 2 header is
//! rewritten in place, since the records stay as they are), and `check` reads them as
//! they are. Version 3 logs hold the records of every type and database
//! (docs/kv-types.md), which a weft-kv that knows only version 2 must not take for
//! damage. A file that is a strict prefix of a header is what a
//! crash while creating a log leaves.

use std::fmt;

/// The magic bytes.
pub const MAGIC: &[u8; 8] = b"WEFTKVLG";
/// The format version this code writes.
pub const VERSION: u32 = 3;
/// The previous version, of the same layout (read, and upgraded in place).
pub const V2: u32 = 2;
/// The header's size in bytes: the first frame starts here.
pub const HEADER_LEN: usize = 40;
/// The size of a version 1 header (format 1 directories, read for the upgrade).
pub const V1_HEADER_LEN: usize = 16;

/// A data directory's identity: 16 random bytes drawn when it was created, kept in
/// its manifest and in every log's header.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirId(pub [u8; 16]);

impl DirId {
    /// A new random id (from the kernel's random source; the time and pid if that
    /// fails, which still tells directories of one machine apart).
    pub fn random() -> DirId {
        let mut b = [0u8; 16];
        // SAFETY: getrandom writes at most `b.len()` bytes into the buffer we own.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        if n != b.len() as isize {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            b.copy_from_slice(&(t ^ (u128::from(std::process::id()) << 96)).to_le_bytes());
        }
        DirId(b)
    }

    /// Parses the 32 hexadecimal digits [`Display`](fmt::Display) writes.
    pub fn parse(s: &str) -> Option<DirId> {
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(DirId(b))
    }
}

impl fmt::Display for DirId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for DirId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DirId({self})")
    }
}

/// Whose log a file is: shard `shard` of `shards` of directory `dir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogId {
    pub dir: DirId,
    pub shard: u32,
    pub shards: u32,
}

/// The header of `id`'s log.
pub fn header(id: &LogId) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&id.shard.to_le_bytes());
    h[16..20].copy_from_slice(&id.shards.to_le_bytes());
    h[20..36].copy_from_slice(&id.dir.0);
    let crc = crc32c::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The version a header's first bytes name, if they are long enough to.
pub fn version(first: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(first.get(8..12)?.try_into().ok()?))
}

/// The header of `id`'s log as format 2 wrote it (version 2; tests make old
/// directories with it).
pub fn header_v2(id: &LogId) -> [u8; HEADER_LEN] {
    let mut h = header(id);
    h[8..12].copy_from_slice(&V2.to_le_bytes());
    let crc = crc32c::crc32c(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A version 1 header (what a format 1 directory's logs start with).
pub fn header_v1() -> [u8; V1_HEADER_LEN] {
    let mut h = [0u8; V1_HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What the first bytes of a file say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A whole, valid header: version 2 with its identity, or version 1 (`None`).
    Valid(Option<LogId>),
    /// Fewer bytes than a header, all of them a prefix of one: a creation that did not
    /// finish, or a file emptied or cut (no record can follow).
    Partial,
    /// Not a weft-kv log header; the reason says why.
    Bad(String),
}

impl HeaderCheck {
    /// The header's length for a valid one.
    pub fn header_len(&self) -> Option<usize> {
        match self {
            HeaderCheck::Valid(Some(_)) => Some(HEADER_LEN),
            HeaderCheck::Valid(None) => Some(V1_HEADER_LEN),
            _ => None,
        }
    }
}

/// Checks the first bytes of a file (`first` holds up to [`HEADER_LEN`] bytes, fewer
/// only if the file is that short).
pub fn check(first: &[u8]) -> HeaderCheck {
    let n = first.len();
    if !MAGIC.starts_with(&first[..n.min(8)]) {
        return HeaderCheck::Bad(if n < 8 {
            format!("the file is {n} bytes long and does not start with a weft-kv log header")
        } else {
            format!(
                "it does not start with the weft-kv log magic {:?} (found {:?}): not a weft-kv log",
                String::from_utf8_lossy(MAGIC),
                String::from_utf8_lossy(&first[..8])
            )
        });
    }
    if n < 12 {
        // The version is cut: a prefix of version 1's or version 2's.
        let seen = &first[8.min(n)..];
        return if [1, V2, VERSION]
            .iter()
            .any(|v: &u32| v.to_le_bytes().starts_with(seen))
        {
            HeaderCheck::Partial
        } else {
            HeaderCheck::Bad(format!(
                "the file is {n} bytes long and does not start with a weft-kv log header"
            ))
        };
    }
    let version = u32::from_le_bytes(first[8..12].try_into().unwrap());
    let len = match version {
        1 => V1_HEADER_LEN,
        V2 | VERSION => HEADER_LEN,
        v => {
            return HeaderCheck::Bad(format!(
                "log format version {v} is not known to this weft-kv (it reads versions 1 to \
                 {VERSION}); open it with the weft-kv that wrote it"
            ))
        }
    };
    if n < len {
        return HeaderCheck::Partial;
    }
    let crc = u32::from_le_bytes(first[len - 4..len].try_into().unwrap());
    if crc32c::crc32c(&first[..len - 4]) != crc {
        return HeaderCheck::Bad(
            "the header's checksum does not match: the header is damaged".into(),
        );
    }
    if version == 1 {
        return HeaderCheck::Valid(None);
    }
    let word = |at: usize| u32::from_le_bytes(first[at..at + 4].try_into().unwrap());
    HeaderCheck::Valid(Some(LogId {
        shard: word(12),
        shards: word(16),
        dir: DirId(first[20..36].try_into().unwrap()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> LogId {
        LogId {
            dir: DirId([7; 16]),
            shard: 3,
            shards: 4,
        }
    }

    #[test]
    fn valid_partial_bad() {
        let h = header(&id());
        assert_eq!(check(&h), HeaderCheck::Valid(Some(id())));
        for n in 0..HEADER_LEN {
            assert_eq!(check(&h[..n]), HeaderCheck::Partial, "prefix of {n}");
        }
        for i in 0..HEADER_LEN {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(matches!(check(&bad), HeaderCheck::Bad(_)), "flip at {i}");
        }
        let v1 = header_v1();
        assert_eq!(check(&v1), HeaderCheck::Valid(None));
        for n in 0..V1_HEADER_LEN {
            assert_eq!(check(&v1[..n]), HeaderCheck::Partial, "v1 prefix of {n}");
        }
        let v2 = header_v2(&id());
        assert_eq!(check(&v2), HeaderCheck::Valid(Some(id())));
        assert_eq!((version(&v2), version(&h)), (Some(2), Some(3)));
        for n in 0..HEADER_LEN {
            assert_eq!(check(&v2[..n]), HeaderCheck::Partial, "v2 prefix of {n}");
        }
        let mut v4 = v1;
        v4[8..12].copy_from_slice(&4u32.to_le_bytes());
        let crc = crc32c::crc32c(&v4[..12]);
        v4[12..].copy_from_slice(&crc.to_le_bytes());
        match check(&v4) {
            HeaderCheck::Bad(why) => assert!(why.contains("version 4"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(check(b"hello"), HeaderCheck::Bad(_)));
    }

    #[test]
    fn dir_id_text_round_trip() {
        let a = DirId::random();
        assert_ne!(a, DirId::random());
        assert_eq!(DirId::parse(&a.to_string()), Some(a));
        assert_eq!(a.to_string().len(), 32);
        assert_eq!(DirId::parse("xyz"), None);
    }
}
