//! The 16 bytes at the start of every shard log (and of a compaction's temporary file).
//!
//! ```text
//! header = magic:"WEFTKVLG" version:u32le crc:u32le     crc = CRC32C(magic, version)
//! ```
//!
//! The magic says what the file is (so `check` and recovery refuse a file that is not
//! a weft-kv log instead of cutting it), the version lets a later format be told apart,
//! and the checksum catches a damaged header. A file that is a strict prefix of the
//! header (0 to 15 bytes, all of them the header's) is what a crash while creating the
//! log leaves: it holds no record, and recovery writes the header again.

/// The magic bytes.
pub const MAGIC: &[u8; 8] = b"WEFTKVLG";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// The header's size in bytes: the first frame starts here.
pub const HEADER_LEN: usize = 16;

/// The header's bytes.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What the first bytes of a file say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCheck {
    /// A whole, valid header.
    Valid,
    /// Fewer than [`HEADER_LEN`] bytes, all a prefix of the header: a creation that did
    /// not finish (no record can follow).
    Partial,
    /// Not a weft-kv log header; the reason says why.
    Bad(String),
}

/// Checks the first bytes of a file (`first` holds up to [`HEADER_LEN`] bytes, fewer
/// only if the file is that short).
pub fn check(first: &[u8]) -> HeaderCheck {
    let want = header();
    if first.len() < HEADER_LEN {
        return if want.starts_with(first) {
            HeaderCheck::Partial
        } else {
            HeaderCheck::Bad(format!(
                "the file is {} bytes long and does not start with a weft-kv log header",
                first.len()
            ))
        };
    }
    if &first[..8] != MAGIC {
        return HeaderCheck::Bad(format!(
            "it does not start with the weft-kv log magic {:?} (found {:?}): not a weft-kv log",
            String::from_utf8_lossy(MAGIC),
            String::from_utf8_lossy(&first[..8])
        ));
    }
    let crc = u32::from_le_bytes(first[12..16].try_into().unwrap());
    if crc32c::crc32c(&first[..12]) != crc {
        return HeaderCheck::Bad(
            "the header's checksum does not match: the header is damaged".into(),
        );
    }
    let version = u32::from_le_bytes(first[8..12].try_into().unwrap());
    if version != VERSION {
        return HeaderCheck::Bad(format!(
            "log format version {version} is not known to this weft-kv (it reads version {VERSION}); \
             open it with the weft-kv that wrote it"
        ));
    }
    HeaderCheck::Valid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_partial_bad() {
        let h = header();
        assert_eq!(check(&h), HeaderCheck::Valid);
        for n in 0..HEADER_LEN {
            assert_eq!(check(&h[..n]), HeaderCheck::Partial, "prefix of {n}");
        }
        for i in 0..HEADER_LEN {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(matches!(check(&bad), HeaderCheck::Bad(_)), "flip at {i}");
        }
        let mut v2 = h;
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&v2[..12]);
        v2[12..].copy_from_slice(&crc.to_le_bytes());
        match check(&v2) {
            HeaderCheck::Bad(why) => assert!(why.contains("version 2"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(check(b"hello"), HeaderCheck::Bad(_)));
    }
}
