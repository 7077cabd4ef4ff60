//! The per-shard append-only log.
//!
//! Each shard keeps one file, `DIR/shard-NNN.log`, a 16-byte header followed by
//! CRC32C-framed records (docs/kv-log.md has the whole story):
//!
//! ```text
//! log    = header frame*
//! header = "WEFTKVLG" version:u32le crc:u32le          (header.rs)
//! frame  = len:u32le crc:u32le payload[len]            (record.rs; crc = CRC32C(payload))
//! ```
//!
//! Records hold full states, not commands: a `SET`, an `INCR` or an `APPEND` all log
//! the key's whole new value with its absolute expiry time, so replaying any suffix of
//! the log that starts at or before a moment over any state the keys passed through
//! since that moment ends in the same state. Compaction relies on that.
//!
//! - [`DataDir`] (dir.rs): the directory, its `LOCK` (an exclusive flock: one process
//!   at a time), its manifest `weft-kv.meta` (format version and the shard count, fixed
//!   at creation so the key-to-shard mapping never changes), the log paths.
//! - [`recover()`] (recover.rs): replays a log at start-up. The first frame that does not
//!   decode ends the good part; if no valid frame follows anywhere after it, it is a
//!   **torn tail** and the file is cut there (and fsynced) and reported; if one does,
//!   it is **corruption in the middle**: [`RecoverError::Corrupt`] names file, offset
//!   and reason, says to run `weft kv check --repair --dir DIR`, and the file is left
//!   untouched. A damaged header is an error too.
//! - [`check()`] (check.rs): the same scan as a report, and with `repair` the cut
//!   (after copying the file to `shard-NNN.log.corrupt-<unix time>`).
//! - [`LogWriter`] (writer.rs): appends. **Group commit** is the caller's: one
//!   `write(buf, sync)` covers every record buffered since the previous call; with
//!   `sync` it is, on a green thread, one syslet `pwrite64` → `fdatasync` that runs as
//!   a linked io_uring chain. **Write errors** (ENOSPC, EIO) truncate the file back to
//!   its length before the call and return the error: the log never holds a partial
//!   frame followed by later ones, and the caller retries its buffer later.
//! - [`Rewriter`] (rewrite.rs): compaction's publish protocol: write
//!   `shard-NNN.log.rewrite`, fsync it, rename it over the log, fsync the directory. A
//!   leftover `.rewrite` (a crash during compaction) is removed by `DataDir::open`.

pub mod check;
pub mod dir;
pub mod header;
pub mod record;
pub mod recover;
pub mod rewrite;
pub mod writer;

pub use check::{check, CheckReport, Repair, ShardCheck, ShardState};
pub use dir::DataDir;
pub use header::HEADER_LEN;
pub use record::{decode, decode_ref, encode, DecodeError, Record, RecordRef};
pub use recover::{recover, recover_refs, BadFrame, RecoverError, Recovered, MAX_PAYLOAD};
pub use rewrite::Rewriter;
pub use writer::LogWriter;
