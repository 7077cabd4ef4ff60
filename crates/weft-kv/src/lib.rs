//! weft-kv: a key-value store that the processes of one machine share, kept across
//! restarts and crashes, speaking the Redis protocol (RESP2 and RESP3).
//!
//! # Layers, bottom up
//! - [`resp`]: the wire protocol. A parser that turns bytes into commands (RESP arrays
//!   and inline commands, with limits checked before anything is allocated) and the
//!   [`resp::Reply`] type with its RESP2 and RESP3 encodings.
//! - [`log`]: the per-shard append-only log. CRC32C-framed [`log::Record`]s, recovery
//!   (a torn tail is cut, corruption in the middle stops start-up naming file and
//!   offset), and compaction (rewrite to a temporary file, fsync, rename, fsync of the
//!   directory).
//! - [`keyspace`]: one shard's keys: values, expiry times, memory accounting, the
//!   hash-ordered cursor that SCAN and compaction walk.
//! - [`commands`]: the command table (name, arity, which arguments are keys, how a
//!   multi-key command splits over shards) and one function per command, in the
//!   manner of Redis's t_string.c. A mutating command appends its effect to the log
//!   buffer as full-state records (see [`log`]).
//! - [`server`]: the daemon. One shard per worker of a weft runtime (shared-nothing);
//!   a connection served on one worker runs commands on its own worker's shard
//!   directly and forwards those on other shards through weft's IPC (whose requests
//!   cross workers in the message boxes). Each shard's log is written by a flusher
//!   green thread (group commit through io_uring).
//! - [`store`]: the embedded mode, `Store::open(dir)`: the same files and the same
//!   durability, in one process, without a server.
//! - [`client`]: a small blocking RESP client (the `weft kv` subcommands use it).

pub mod client;
pub mod commands;
pub mod exec;
pub mod keyspace;
pub mod log;
pub mod resp;
pub mod route;
pub mod server;
pub mod shard;
pub mod store;

// The Rust examples of docs/kv-resp.md, compiled and run as doc-tests so that they
// cannot rot (those of the README and the other guides are the `weft` crate's).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/kv-resp.md")]
struct KvProtocolGuideExamples;
