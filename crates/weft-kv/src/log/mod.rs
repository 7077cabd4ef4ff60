//! The per-shard append-only log.
//!
//! Each shard keeps one file, `DIR/shard-NNN.log`, a 40-byte header naming the shard
//! and the directory, followed by CRC32C-framed records (docs/kv-log.md has the whole
//! story):
//!
//! ```text
//! log    = header frame*
//! header = "WEFTKVLG" version:u32le shard:u32le shards:u32le dir:16 crc:u32le  (header.rs)
//! frame  = len:u32le crc:u32le payload[len]            (record.rs; crc = CRC32C(payload))
//! ```
//!
//! A key or value is at most [`MAX_VALUE`] (1 GiB) bytes, the one limit that
//! `--max-bulk`, the commands and the embedded store keep, and recovery reads every
//! record that limit allows.
//!
//! Records hold a key's whole state when a command creates it, and the change when a
//! command changes an existing key (APPEND logs the appended bytes, HSET the fields
//! set), each with its database; replaying the log in order from its start rebuilds
//! every key exactly (docs/kv-types.md has the rules; `record.rs` the kinds).
//!
//! - [`DataDir`] (dir.rs): the directory, its `LOCK` (an exclusive flock: one process
//!   at a time), its manifest `weft-kv.meta` (format version, the directory's id, the
//!   shard count, fixed at creation so the key-to-shard mapping never changes, and
//!   every log's name), the log paths. Opening checks that the directory is whole:
//!   every log the manifest names is there with a header naming this directory and
//!   shard, and no other log lies beside them; it upgrades format 1 directories.
//! - [`recover()`] (recover.rs): replays a log at start-up. The first frame that does not
//!   decode ends the good part; if no valid frame follows anywhere after it and it is
//!   what a write cut short leaves, it is a **torn tail** and the file is cut there
//!   (and fsynced) and reported; if it is a whole frame that is damaged, it is
//!   [`RecoverError::DamagedTail`] (that record may have been acknowledged); if a
//!   valid frame follows, it is **corruption in the middle**: [`RecoverError::Corrupt`].
//!   Both name file, offset and reason, say to run `weft kv check --repair --dir DIR`,
//!   and leave the file untouched. A damaged header is an error too.
//! - [`check()`] (check.rs): the same checks as a report, changing nothing, and with
//!   `repair` the cut (after copying the file to `shard-NNN.log.corrupt-<unix time>`).
//! - [`LogWriter`] (writer.rs): appends. **Group commit** is the caller's: one
//!   `write(buf, sync)` covers every record buffered since the previous call; with
//!   `sync` it is, on a green thread, one syslet `pwrite64` → `fdatasync` that runs as
//!   a linked io_uring chain. **Write errors** (ENOSPC, EIO) truncate the file back to
//!   its length before the call and return the error: the log never holds a partial
//!   frame followed by later ones, and the caller retries its buffer later.
//! - [`Rewriter`] (rewrite.rs): compaction's publish protocol: write
//!   `shard-NNN.log.rewrite`, fsync it, rename it over the log, fsync the directory. A
//!   leftover `.rewrite` (a crash during compaction) is removed by `DataDir::open`.
//! - `tx.rs`: a transaction's part on one shard is one `Tx` frame; recovery holds back
//!   the part that ends a log and keeps it only if every participant has it.

pub mod check;
pub mod dir;
pub mod header;
pub mod record;
pub mod recover;
pub mod rewrite;
pub mod tx;
pub mod writer;

pub use check::{check, CheckReport, DirFinding, Repair, ShardCheck, ShardState};
pub use dir::DataDir;
pub use header::{DirId, LogId, HEADER_LEN};
pub use record::{
    decode, decode_frame, decode_ref, encode, encode_in, encode_split, DecodeError, Items, Record,
    RecordRef, StrEnc, DATABASES, ITEMS_PER_RECORD, MAX_VALUE,
};
pub use recover::{recover, recover_refs, BadFrame, RecoverError, Recovered, MAX_PAYLOAD};
pub use rewrite::Rewriter;
pub use writer::LogWriter;
