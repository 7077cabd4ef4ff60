//! The per-shard append-only log.
//!
//! Each shard keeps one file, `shard-NNN.log`, a header followed by CRC32C-framed
//! records (see [`record`] for the bytes). Records hold full states, not commands: a
//! `SET`, an `INCR` or an `APPEND` all log the key's whole new value with its absolute
//! expiry time, so replaying any suffix of the log that starts at or before a moment
//! over any state the keys passed through since that moment ends in the same state.
//! Compaction relies on that.

pub mod record;

pub use record::{decode, encode, DecodeError, Record, RecordRef};
