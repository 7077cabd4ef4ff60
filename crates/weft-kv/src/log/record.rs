//! A log record and its bytes.
//!
//! ```text
//! frame   = len:u32le crc:u32le payload[len]      crc = CRC32C(payload)
//! payload = 1 key:bytes value:bytes expire:opt     Set
//!         | 2 key:bytes                            Del
//!         | 3 key:bytes expire:opt                 Expire (PERSIST is Expire(None))
//!         | 4                                      Flush (all keys of the shard)
//! bytes   = n:u32le byte[n]
//! opt     = 0 | 1 ms:u64le                         absolute Unix time in milliseconds
//! ```

/// A record borrowed from the keyspace (what a command appends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordRef<'a> {
    /// The key now holds `value`, expiring at `expire_at_ms` (Unix ms) or never.
    Set {
        key: &'a [u8],
        value: &'a [u8],
        expire_at_ms: Option<u64>,
    },
    /// The key no longer exists.
    Del { key: &'a [u8] },
    /// The key (if it exists) now expires at `at_ms`, or never.
    Expire { key: &'a [u8], at_ms: Option<u64> },
    /// Every key of the shard is gone.
    Flush,
}

/// An owned record (what recovery reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// See [`RecordRef::Set`].
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        expire_at_ms: Option<u64>,
    },
    /// See [`RecordRef::Del`].
    Del { key: Vec<u8> },
    /// See [`RecordRef::Expire`].
    Expire { key: Vec<u8>, at_ms: Option<u64> },
    /// See [`RecordRef::Flush`].
    Flush,
}

impl RecordRef<'_> {
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
            RecordRef::Del { key } => Record::Del { key: key.to_vec() },
            RecordRef::Expire { key, at_ms } => Record::Expire {
                key: key.to_vec(),
                at_ms,
            },
            RecordRef::Flush => Record::Flush,
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
            Record::Del { key } => RecordRef::Del { key },
            Record::Expire { key, at_ms } => RecordRef::Expire { key, at_ms: *at_ms },
            Record::Flush => RecordRef::Flush,
        }
    }
}

/// The size of a frame's header (length and checksum).
pub const FRAME_HEADER: usize = 8;

/// The longest key or value a record holds (1 GiB). It is the one limit every part
/// agrees on: `--max-bulk` may not be set above it (so no request argument is longer),
/// APPEND and SETRANGE stop below it, the embedded store refuses longer arguments, and
/// recovery accepts every frame up to [`MAX_PAYLOAD`], the largest record of a key and
/// a value of this length. So every value the server acknowledges can be read back.
pub const MAX_VALUE: usize = 1 << 30;

/// The payload length of a `Set` record of a `key`-byte key and a `value`-byte value
/// with an expiry time: the largest record those lengths can make (a `Set` without
/// expiry is 8 bytes shorter, `Del` and `Expire` shorter still).
pub const fn set_payload_len(key: usize, value: usize) -> usize {
    1 + 4 + key + 4 + value + 1 + 8
}

/// The largest payload a frame may declare: a `Set` of a [`MAX_VALUE`] key and a
/// [`MAX_VALUE`] value with an expiry. A longer length field is damage.
pub const MAX_PAYLOAD: usize = set_payload_len(MAX_VALUE, MAX_VALUE);

// The length field is 32 bits: the largest record must fit in it.
const _: () = assert!(MAX_PAYLOAD <= u32::MAX as usize);

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

/// Appends `rec`'s frame to `out`.
pub fn encode(rec: &RecordRef<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    match *rec {
        RecordRef::Set {
            key,
            value,
            expire_at_ms,
        } => {
            out.push(1);
            put_bytes(out, key);
            put_bytes(out, value);
            put_opt(out, expire_at_ms);
        }
        RecordRef::Del { key } => {
            out.push(2);
            put_bytes(out, key);
        }
        RecordRef::Expire { key, at_ms } => {
            out.push(3);
            put_bytes(out, key);
            put_opt(out, at_ms);
        }
        RecordRef::Flush => out.push(4),
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
}

/// Decodes the frame at the start of `buf`: the record and the frame's length.
pub fn decode(buf: &[u8]) -> Result<(Record, usize), DecodeError> {
    decode_ref(buf).map(|(r, n)| (r.to_record(), n))
}

/// [`decode`], the record borrowing from `buf`.
pub fn decode_ref(buf: &[u8]) -> Result<(RecordRef<'_>, usize), DecodeError> {
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
    let rec = match r.u8()? {
        1 => RecordRef::Set {
            key: r.bytes()?,
            value: r.bytes()?,
            expire_at_ms: r.opt()?,
        },
        2 => RecordRef::Del { key: r.bytes()? },
        3 => RecordRef::Expire {
            key: r.bytes()?,
            at_ms: r.opt()?,
        },
        4 => RecordRef::Flush,
        _ => return Err(DecodeError::Malformed),
    };
    if !r.0.is_empty() {
        return Err(DecodeError::Malformed);
    }
    Ok((rec, FRAME_HEADER + len))
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
        ];
        for rec in &recs {
            let mut buf = Vec::new();
            encode(&rec.as_ref(), &mut buf);
            assert_eq!(decode(&buf), Ok((rec.clone(), buf.len())));
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
        assert_eq!(MAX_PAYLOAD, set_payload_len(MAX_VALUE, MAX_VALUE));
        assert!(MAX_PAYLOAD as u64 <= u64::from(u32::MAX));
        assert_eq!(MAX_VALUE, 1 << 30);
    }
}
