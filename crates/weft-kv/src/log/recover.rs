//! Recovery: replaying a shard's log at start-up, cutting a torn tail, and refusing to
//! go on past corruption in the middle.
//!
//! The log is read front to back through a window (a reusable buffer holding the
//! frames being decoded, refilled in 256 KiB reads), so a log of many gigabytes needs
//! memory for its largest record only. Each good frame's record is handed to `apply`.
//!
//! **The rule.** At the first frame that does not decode (cut short by the end of the
//! file, a CRC32C that does not match, a length above [`MAX_PAYLOAD`], or a matching
//! checksum over a payload that is not a record), the rest of the file is searched for
//! any offset where a whole frame decodes to a record with a valid checksum:
//! - one: the damage is **corruption in the middle**. Cutting there would drop the
//!   valid records after it, so recovery stops with [`RecoverError::Corrupt`] naming
//!   the file, the offset and the reason, and changes nothing; `weft kv check --repair`
//!   cuts it deliberately, keeping a backup.
//! - none, and the bad frame is what a write cut short leaves (its bytes end with the
//!   file before the frame does, or everything from it to the end is zero bytes, which
//!   a file system leaves when a crash came between growing the file and writing it):
//!   a **torn tail**. The file is truncated to the end of the last good frame and
//!   fsynced; [`Recovered::torn_bytes`] says how much was cut, for the log line. A
//!   write cut short was not finished, so with `fsync always` it was never
//!   acknowledged.
//! - none, but the bad frame is whole (its length fits the file and its checksum does
//!   not match, or its checksum matches the bytes up to the end of the file though the
//!   length field says otherwise): a **damaged last record**. No crash writes a whole
//!   frame with a wrong checksum, so this is damage to a record already written, and
//!   that record may have been acknowledged. Recovery stops with
//!   [`RecoverError::DamagedTail`] and changes nothing; cutting it is the user's
//!   decision (`weft kv check --repair`).
//!
//! A length field pointing past the end of the file is not taken as proof of a torn
//! tail: a flipped bit in a length field in the middle looks the same, and the search
//! tells them apart. A frame of length 0 with checksum 0 (eight zero bytes) has a
//! matching checksum but no record, so zero-filled tails count as torn.
//!
//! The same scan, without changing anything, is what `check` reports (see `check.rs`).

use super::header::{self, HeaderCheck, HEADER_LEN};
pub use super::record::MAX_PAYLOAD;
use super::record::{decode_frame, DecodeError, Record, RecordRef, FRAME_HEADER};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// What recovery did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovered {
    /// Records applied.
    pub records: u64,
    /// The log's length now (header included): the end of the last good frame, where
    /// appending continues.
    pub bytes: u64,
    /// Bytes of torn tail cut off at offset `bytes` (0 if none).
    pub torn_bytes: u64,
}

/// Why recovery stopped.
#[derive(Debug)]
pub enum RecoverError {
    /// Reading, truncating or creating the log failed.
    Io { path: PathBuf, error: io::Error },
    /// The header is not a weft-kv log header (nothing was changed).
    Header { path: PathBuf, reason: String },
    /// A damaged frame with valid frames after it (nothing was changed).
    Corrupt {
        path: PathBuf,
        /// Where the damaged frame starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// The first offset after it where a valid frame was found.
        next_valid: u64,
        /// The file's length.
        file_len: u64,
    },
    /// The last frame is whole but damaged, and nothing valid follows: not a write a
    /// crash cut short (nothing was changed).
    DamagedTail {
        path: PathBuf,
        /// Where the damaged frame starts.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// The file's length.
        file_len: u64,
    },
}

fn dir_of(path: &Path) -> String {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".to_string(),
    }
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            RecoverError::Header { path, reason } => write!(
                f,
                "{}: bad log header: {reason}. Nothing was changed; if the file is not a \
                 weft-kv log, move it out of the data directory",
                path.display()
            ),
            RecoverError::Corrupt {
                path,
                offset,
                reason,
                next_valid,
                file_len,
            } => write!(
                f,
                "{}: corrupt record at offset {offset}: {reason} (a valid record follows at \
                 offset {next_valid}, so this is damage in the middle of the log, not a torn \
                 tail). The log was left as it is. Run `weft kv check --repair --dir {}` to \
                 cut the log at that offset (a backup copy is kept; the {} bytes from that \
                 offset on are lost)",
                path.display(),
                dir_of(path),
                file_len - offset
            ),
            RecoverError::DamagedTail {
                path,
                offset,
                reason,
                file_len,
            } => write!(
                f,
                "{}: the last record, at offset {offset}, is damaged: {reason}. The record is \
                 whole, so this is not a write that a crash cut short but damage to a record \
                 already written, which may have been acknowledged (with --fsync always, it \
                 was). The log was left as it is. Run `weft kv check --repair --dir {}` to cut \
                 the log at that offset (a backup copy is kept; the {} bytes from that offset \
                 on are lost)",
                path.display(),
                dir_of(path),
                file_len - offset
            ),
        }
    }
}

impl std::error::Error for RecoverError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecoverError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<RecoverError> for io::Error {
    fn from(e: RecoverError) -> io::Error {
        let kind = match &e {
            RecoverError::Io { error, .. } => error.kind(),
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Recovers the log at `path`: applies every good record in order, cuts a torn tail
/// (see the module doc), and returns what it did. The log must exist with a whole
/// header ([`DataDir::open`](super::DataDir::open) creates a directory's logs and
/// checks their headers name it). Uses blocking std I/O: run it before serving, or
/// inside `weft_runtime::blocking` on a green thread.
/// Each record is handed over owned and without its database (for tests and tools:
/// start-up uses [`recover_refs`]).
pub fn recover(path: &Path, mut apply: impl FnMut(Record)) -> Result<Recovered, RecoverError> {
    recover_refs(path, |_, r| apply(r.to_record()))
}

/// [`recover`], each record handed over with its database, borrowed from the read
/// buffer (start-up's replay copies only what it keeps).
pub fn recover_refs(
    path: &Path,
    mut apply: impl FnMut(u8, RecordRef<'_>),
) -> Result<Recovered, RecoverError> {
    let io_err = |error: io::Error| RecoverError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err)?;
    match scan(&file, &mut apply).map_err(io_err)? {
        Scan::Header(HeaderCheck::Partial) => Err(RecoverError::Header {
            path: path.to_path_buf(),
            reason: format!(
                "the file holds {} bytes, only part of a header",
                file.metadata().map_or(0, |m| m.len())
            ),
        }),
        Scan::Header(HeaderCheck::Bad(reason)) => Err(RecoverError::Header {
            path: path.to_path_buf(),
            reason,
        }),
        Scan::Header(HeaderCheck::Valid(_)) => unreachable!("scan reports only a bad header"),
        Scan::Clean { records, end } => Ok(Recovered {
            records,
            bytes: end,
            ..Default::default()
        }),
        Scan::Bad {
            records,
            good_end,
            verdict: Verdict::Torn,
            file_len,
            ..
        } => {
            file.set_len(good_end).map_err(io_err)?;
            file.sync_all().map_err(io_err)?;
            Ok(Recovered {
                records,
                bytes: good_end,
                torn_bytes: file_len - good_end,
            })
        }
        Scan::Bad {
            good_end,
            reason,
            verdict: Verdict::DamagedTail,
            file_len,
            ..
        } => Err(RecoverError::DamagedTail {
            path: path.to_path_buf(),
            offset: good_end,
            reason: reason.to_string(),
            file_len,
        }),
        Scan::Bad {
            good_end,
            reason,
            verdict: Verdict::Middle(next_valid),
            file_len,
            ..
        } => Err(RecoverError::Corrupt {
            path: path.to_path_buf(),
            offset: good_end,
            reason: reason.to_string(),
            next_valid,
            file_len,
        }),
    }
}

/// Why a frame is bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadFrame {
    /// The decoder's verdict.
    Decode(DecodeError),
    /// The declared payload length is above [`MAX_PAYLOAD`].
    TooLong(u32),
}

impl fmt::Display for BadFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadFrame::Decode(DecodeError::Truncated) => {
                f.write_str("the record is cut short by the end of the file")
            }
            BadFrame::Decode(e) => write!(f, "{e}"),
            BadFrame::TooLong(n) => {
                write!(f, "the record's length field says {n} bytes, more than any record ({MAX_PAYLOAD})")
            }
        }
    }
}

/// What the first bad frame of a log is (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// What a write cut short leaves, with nothing valid after it: cut it.
    Torn,
    /// A whole frame that is damaged, with nothing valid after it: refuse.
    DamagedTail,
    /// A valid frame follows at this offset: refuse.
    Middle(u64),
}

/// What a scan of a whole log found.
#[derive(Debug)]
pub(crate) enum Scan {
    /// The header is partial or bad (never `Valid`).
    Header(HeaderCheck),
    /// Every frame is good; the file ends at `end`.
    Clean { records: u64, end: u64 },
    /// The frame at `good_end` is bad; `verdict` says what it is.
    Bad {
        records: u64,
        good_end: u64,
        reason: BadFrame,
        verdict: Verdict,
        file_len: u64,
    },
}

/// Reads `file` from the start, handing each good record to `apply`. Changes nothing.
pub(crate) fn scan(file: &File, apply: &mut dyn FnMut(u8, RecordRef<'_>)) -> io::Result<Scan> {
    let mut w = Window::new(file)?;
    let first = w.get(0, HEADER_LEN)?;
    let mut pos = match header::check(first) {
        h @ HeaderCheck::Valid(_) => h.header_len().expect("a valid header's length") as u64,
        other => return Ok(Scan::Header(other)),
    };
    let mut records = 0;
    loop {
        if pos == w.file_len {
            return Ok(Scan::Clean { records, end: pos });
        }
        match frame_at(&mut w, pos)? {
            Ok((db, rec, n)) => {
                apply(db, rec);
                records += 1;
                pos += n as u64;
            }
            Err(reason) => {
                let verdict = match find_valid(&mut w, pos + 1)? {
                    Some(next) => Verdict::Middle(next),
                    None if torn(&mut w, pos, reason)? => Verdict::Torn,
                    None => Verdict::DamagedTail,
                };
                return Ok(Scan::Bad {
                    records,
                    good_end: pos,
                    reason,
                    verdict,
                    file_len: w.file_len,
                });
            }
        }
    }
}

/// Decodes the frame at `pos`.
fn frame_at<'w>(
    w: &'w mut Window<'_>,
    pos: u64,
) -> io::Result<Result<(u8, RecordRef<'w>, usize), BadFrame>> {
    let head = w.get(pos, FRAME_HEADER)?;
    if head.len() < FRAME_HEADER {
        return Ok(Err(BadFrame::Decode(DecodeError::Truncated)));
    }
    let len = u32::from_le_bytes(head[..4].try_into().unwrap());
    if len as usize > MAX_PAYLOAD {
        return Ok(Err(BadFrame::TooLong(len)));
    }
    let buf = w.get(pos, FRAME_HEADER + len as usize)?;
    Ok(decode_frame(buf).map_err(BadFrame::Decode))
}

/// Whether the bad last frame at `pos` (nothing valid follows it) is what a write cut
/// short leaves: zero bytes from `pos` to the end of the file, or a frame that the end
/// of the file cuts (see the module doc). A frame whose length field runs past the end
/// but whose checksum matches the bytes that are there is whole, its length damaged.
fn torn(w: &mut Window<'_>, pos: u64, reason: BadFrame) -> io::Result<bool> {
    let mut at = pos;
    let zeros = loop {
        if at >= w.file_len {
            break true;
        }
        let n = (w.file_len - at).min(CHUNK as u64) as usize;
        if w.get(at, n)?.iter().any(|&b| b != 0) {
            break false;
        }
        at += n as u64;
    };
    if zeros {
        return Ok(true);
    }
    let cut_short = match reason {
        BadFrame::Decode(DecodeError::Truncated) => true,
        BadFrame::TooLong(_) | BadFrame::Decode(_) => false,
    };
    let rest = w.file_len - pos;
    if rest <= FRAME_HEADER as u64 || rest - FRAME_HEADER as u64 > MAX_PAYLOAD as u64 {
        return Ok(cut_short);
    }
    let frame = w.get(pos, rest as usize)?;
    let crc = u32::from_le_bytes(frame[4..8].try_into().unwrap());
    let whole = crc32c::crc32c(&frame[FRAME_HEADER..]) == crc;
    Ok(cut_short && !whole)
}

/// The first offset at or after `from` where a whole frame decodes to a record.
fn find_valid(w: &mut Window<'_>, from: u64) -> io::Result<Option<u64>> {
    let mut pos = from;
    while pos + FRAME_HEADER as u64 <= w.file_len {
        let head = w.get(pos, FRAME_HEADER)?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap()) as u64;
        // Only a frame that fits in the file can be a valid one.
        if len > 0 && len <= MAX_PAYLOAD as u64 && pos + FRAME_HEADER as u64 + len <= w.file_len {
            let buf = w.get(pos, FRAME_HEADER + len as usize)?;
            if decode_frame(buf).is_ok() {
                return Ok(Some(pos));
            }
        }
        pos += 1;
    }
    Ok(None)
}

/// A sliding window over a file: `get(off, n)` gives the bytes at `off`, `n` of them or
/// as many as the file has. Offsets asked for never go backwards by more than what is
/// still buffered (scans move forward).
struct Window<'a> {
    file: &'a File,
    file_len: u64,
    buf: Vec<u8>,
    /// The file offset of `buf[0]`.
    start: u64,
}

const CHUNK: usize = 256 * 1024;

impl<'a> Window<'a> {
    fn new(file: &'a File) -> io::Result<Window<'a>> {
        let file_len = file.metadata()?.len();
        let mut f = file;
        f.seek(SeekFrom::Start(0))?;
        Ok(Window {
            file,
            file_len,
            buf: Vec::with_capacity(CHUNK),
            start: 0,
        })
    }

    fn get(&mut self, off: u64, n: usize) -> io::Result<&[u8]> {
        let want_end = (off + n as u64).min(self.file_len);
        let have_end = self.start + self.buf.len() as u64;
        if off < self.start || off > have_end {
            // Not sequential: start the window afresh at `off`.
            let mut f = self.file;
            f.seek(SeekFrom::Start(off))?;
            self.buf.clear();
            self.start = off;
        } else if want_end > have_end {
            // Drop what lies before `off`, then read on.
            let drop = (off - self.start) as usize;
            self.buf.drain(..drop);
            self.start = off;
        }
        let mut have_end = self.start + self.buf.len() as u64;
        if want_end > have_end {
            // Read at least a chunk (but not past the end of the file).
            let target = want_end.max((have_end + CHUNK as u64).min(self.file_len));
            let mut f = self.file;
            let mut more = (target - have_end) as usize;
            let old = self.buf.len();
            self.buf.resize(old + more, 0);
            let mut at = old;
            while more > 0 {
                match f.read(&mut self.buf[at..])? {
                    0 => break, // the file shrank under us: give what there is
                    k => {
                        at += k;
                        more -= k;
                    }
                }
            }
            self.buf.truncate(at);
            have_end = self.start + self.buf.len() as u64;
        }
        let a = (off - self.start) as usize;
        let b = (want_end.min(have_end) - self.start) as usize;
        Ok(&self.buf[a..b.max(a)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{encode, RecordRef};

    #[test]
    fn window_reads_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..(CHUNK * 3 + 17)).map(|i| (i * 7 % 251) as u8).collect();
        fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let mut w = Window::new(&f).unwrap();
        let mut off = 0u64;
        for n in [1usize, 100, CHUNK, 3, CHUNK * 2, 5000] {
            let got = w.get(off, n).unwrap().to_vec();
            let end = (off as usize + n).min(data.len());
            assert_eq!(got, &data[off as usize..end], "at {off} len {n}");
            off += (n / 2) as u64;
        }
        assert_eq!(w.get(data.len() as u64, 10).unwrap(), b"");
        assert_eq!(w.get(5, 3).unwrap(), &data[5..8]); // backwards: refetched
    }

    #[test]
    fn too_long_length_in_the_middle_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("shard-000.log");
        let mut bytes = header::header(&header::LogId {
            dir: header::DirId([1; 16]),
            shard: 0,
            shards: 1,
        })
        .to_vec();
        for i in 0..3u8 {
            encode(
                &RecordRef::Set {
                    key: &[i],
                    value: b"v",
                    expire_at_ms: None,
                },
                &mut bytes,
            );
        }
        let second = HEADER_LEN + (bytes.len() - HEADER_LEN) / 3;
        bytes[second + 3] = 0xff; // length now far above MAX_PAYLOAD
        fs::write(&p, &bytes).unwrap();
        match recover(&p, |_| {}) {
            Err(RecoverError::Corrupt { offset, reason, .. }) => {
                assert_eq!(offset, second as u64);
                assert!(reason.contains("length field"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(fs::read(&p).unwrap(), bytes);
    }

    /// A frame may declare up to [`MAX_PAYLOAD`] bytes (the largest record the limits
    /// let the server write): at that length it is a frame cut short by the end of
    /// this small file, one byte more is a length no record has.
    #[test]
    fn the_length_limit_is_the_largest_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for (len, too_long) in [(MAX_PAYLOAD, false), (MAX_PAYLOAD + 1, true)] {
            let mut bytes = (len as u32).to_le_bytes().to_vec();
            bytes.extend_from_slice(&[0xab; 100]);
            fs::write(&p, &bytes).unwrap();
            let f = File::open(&p).unwrap();
            let mut w = Window::new(&f).unwrap();
            let got = frame_at(&mut w, 0).unwrap().map(|_| ());
            let want = if too_long {
                BadFrame::TooLong(len as u32)
            } else {
                BadFrame::Decode(DecodeError::Truncated)
            };
            assert_eq!(got, Err(want), "length {len}");
        }
    }
}
