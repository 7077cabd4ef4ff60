//! weft-kv: a key-value store that the processes of one machine share, kept across
//! restarts and crashes, speaking the Redis protocol (RESP2 and RESP3).
//!
//! # Three ways in
//! - [`Store`]: the embedded mode. [`Store::open`] gives one process the keys of a data
//!   directory, with the same files, durability and commands as the server, without a
//!   server.
//! - [`serve`] with a [`Config`]: the daemon that `weft kv serve` runs. Any Redis client
//!   (redis-cli, redis-py, ...) talks to it over its Unix socket or its TCP port.
//! - [`Client`]: a small blocking client for that daemon (or any Redis-protocol server)
//!   at an [`Addr`]; it returns each reply as a [`Reply`].
//!
//! Both modes write every change to a per-shard log before answering; [`Fsync`] says
//! when the log reaches the disk. A data directory is locked while open, so a store and
//! a server take turns on it. [`resp`] is the wire protocol on its own: the request
//! parser and the [`Reply`] encodings.
//!
//! ```
//! # fn main() -> std::io::Result<()> {
//! use weft_kv::{Reply, SetOutcome, Store};
//!
//! let dir = std::env::temp_dir().join(format!("weft-kv-crate-doc-{}", std::process::id()));
//! let store = Store::open(&dir)?;
//! assert_eq!(store.set(b"greeting", b"hello")?, SetOutcome::Created);
//! assert_eq!(store.get(b"greeting")?.as_deref(), Some(&b"hello"[..]));
//! assert_eq!(store.exec(&[b"APPEND".as_slice(), b"greeting", b"!"]), Reply::Int(6));
//! drop(store);
//! std::fs::remove_dir_all(&dir)
//! # }
//! ```
//!
//! # How it is built, bottom up
//! The internal layers (their design is in the repository's `docs/kv.md`):
//! - `resp`: the wire protocol. A parser that turns bytes into commands (RESP arrays
//!   and inline commands, with limits checked before anything is allocated) and the
//!   [`Reply`] type with its RESP2 and RESP3 encodings.
//! - `log`: the per-shard append-only log. CRC32C-framed records, recovery (a torn tail
//!   is cut, corruption in the middle stops start-up naming file and offset), and
//!   compaction (rewrite to a temporary file, fsync, rename, fsync of the directory).
//! - `keyspace`: one shard's keys: values, expiry times, memory accounting, the
//!   hash-ordered cursor that SCAN and compaction walk.
//! - `commands`: the command table (name, arity, which arguments are keys, how a
//!   multi-key command splits over shards) and one function per command, in the
//!   manner of Redis's t_string.c. A mutating command appends its effect to the log
//!   buffer as full-state records.
//! - [`server`]: the daemon. One shard per worker of a weft runtime (shared-nothing);
//!   a connection served on one worker runs commands on its own worker's shard
//!   directly and forwards those on other shards through weft's IPC (whose requests
//!   cross workers in the message boxes). Each shard's log is written by a flusher
//!   green thread (group commit through io_uring).
//! - [`store`]: the embedded mode: the same files and the same durability, in one
//!   process, without a server.
//! - [`client`]: the blocking RESP client (the `weft kv` subcommands use it).

#![warn(missing_docs)]

pub mod client;
// Internals: public only for weft's own tests and the `weft` command, not part of the API.
#[doc(hidden)]
pub mod commands;
pub(crate) mod compact;
pub(crate) mod evict;
pub(crate) mod exec;
#[doc(hidden)]
pub mod keyspace;
#[doc(hidden)]
pub mod log;
#[doc(hidden)]
pub mod packed;
pub mod pubsub;
pub mod resp;
pub(crate) mod route;
pub mod server;
pub(crate) mod shard;
pub mod shm;
pub mod store;
pub(crate) mod watch;

pub use client::{Addr, Client};
pub use resp::Reply;
pub use server::{serve, Config, Fsync};
pub use store::{SetOutcome, Store};

// The Rust examples of docs/kv-resp.md, compiled and run as doc-tests so that they
// cannot rot (those of the README and the other guides are the `weft` crate's).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/kv-resp.md")]
struct KvProtocolGuideExamples;
