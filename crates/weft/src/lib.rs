//! weft: lightweight concurrency for Linux.
//!
//! This crate is the one to depend on. It gathers weft's parts, each behind a feature.
//!
//! # Features
//!
//! | feature | module | what |
//! |---|---|---|
//! | `fibers` (default) | [`fiber`] | fibers with the Windows Fibers API ([`fiber::win`]) and a Rust API ([`fiber::Fiber`]), fiber-local storage, per-fiber statistics, and reading another process's fibers ([`fiber::introspect`]) |
//! | `runtime` | [`runtime`] | green threads over one pinned worker per CPU ([`runtime::Runtime`], [`runtime::spawn`]), locks and channels that park only the green thread, files and sockets on io_uring, synchronous IPC ([`runtime::ipc`]) and syslets ([`runtime::syslet`]) |
//! | `kv` | [`kv`] | the weft-kv store embedded in a program ([`kv::Store`]), on the same files as the `weft kv serve` daemon, and a client for that daemon ([`kv::Client`]) |
//! | `hook` | [`hook`] | the system-call layer: blocking C library calls (`std::net`, `std::fs`, `std::thread::sleep`, and every crate built on them) made on a green thread park only that green thread; turned on in a binary by this feature and `use weft::hook as _;` |
//!
//! Links to a part whose feature was off when these docs were built lead back to this
//! table; `cargo doc -p weft --all-features` documents every part.
//!
//! ```toml
//! [dependencies]
//! weft = { version = "0.1", features = ["runtime", "kv"] }
//! ```
//!
//! # Where to start
//!
//! - **Porting Windows code that uses fibers**: from C, include `weft/fibers.h` and link
//!   `libweft` (the README says how); from Rust, [`fiber::win`] has the same functions
//!   with the same names and error codes. [`fiber::Fiber`] is the safe Rust form: a
//!   panic inside a fiber comes back as an error from the switch that ran it.
//! - **Writing a server with many connections**: build a [`runtime::Runtime`], and
//!   write plain blocking-style code on green threads: [`runtime::net::TcpStream`]'s
//!   reads park only the green thread, not the worker.
//! - **Talking between green threads**: [`runtime::chan`] for queues;
//!   [`runtime::ipc`] for synchronous request and reply, the partner on the same
//!   worker or on another.
//! - **Many system calls at once without threads**: [`runtime::syslet`].
//! - **A store shared by processes**: run `weft kv serve` and use any Redis client, or
//!   embed [`kv::Store`] in one process.
//!
//! # Environment
//!
//! - `WEFT_IO_BACKEND=threads`: the thread pool instead of io_uring (the semantics are
//!   the same).
//! - `WEFT_PREEMPT=off`: green threads are never preempted.
//! - `WEFT_RUN_TIME=off`: no per-fiber run-time accounting (switches are cheaper).
//!
//! The guides in the repository's `docs/` say how each part is built and what it
//! promises.
#![cfg_attr(
    not(feature = "runtime"),
    doc = "",
    doc = "[`runtime`]: #features",
    doc = "[`runtime::Runtime`]: #features",
    doc = "[`runtime::spawn`]: #features",
    doc = "[`runtime::ipc`]: #features",
    doc = "[`runtime::syslet`]: #features",
    doc = "[`runtime::net::TcpStream`]: #features",
    doc = "[`runtime::chan`]: #features"
)]
#![cfg_attr(
    not(feature = "kv"),
    doc = "",
    doc = "[`kv`]: #features",
    doc = "[`kv::Store`]: #features",
    doc = "[`kv::Client`]: #features"
)]
#![cfg_attr(not(feature = "hook"), doc = "", doc = "[`hook`]: #features")]
#![warn(missing_docs)]

pub use weft_fiber as fiber;

#[cfg(feature = "runtime")]
pub use weft_runtime as runtime;

/// The system-call layer (the `weft-hook` crate): naming it once in a binary (`use
/// weft::hook as _;`) links its overrides of the C library's blocking calls, so that
/// such a call made on a green thread parks only that green thread. What is covered
/// and what is not: `docs/hook.md`.
#[cfg(feature = "hook")]
pub use weft_hook as hook;

/// The weft-kv store embedded in a program: the same files, durability and commands as
/// the `weft kv serve` daemon, in one process ([`Store`](kv::Store)), and a blocking
/// client for that daemon ([`Client`](kv::Client)). [`Fsync`](kv::Fsync) says when writes
/// reach the disk; both answer commands with a [`Reply`](kv::Reply).
///
/// ```
/// # fn main() -> std::io::Result<()> {
/// let dir = std::env::temp_dir().join(format!("weft-kv-doc-{}", std::process::id()));
/// let store = weft::kv::Store::open(&dir)?;
/// store.set(b"visits", b"1")?;
/// let reply = store.exec(&[b"INCRBY".as_slice(), b"visits", b"5"]); // any key command
/// assert_eq!(reply, weft::kv::Reply::Int(6));
/// drop(store);
/// std::fs::remove_dir_all(&dir)
/// # }
/// ```
#[cfg(feature = "kv")]
pub mod kv {
    pub use weft_kv::{Addr, Client, Fsync, Reply, SetOutcome, Store};
}

// The Rust snippets of the README and of docs/runtime.md and ipc.md, compiled and run as
// doc-tests so that they cannot rot. (This crate's dev-dependency on itself turns on
// every feature for its tests.)
#[cfg(all(doctest, feature = "runtime", feature = "kv"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

#[cfg(all(doctest, feature = "runtime", feature = "kv"))]
#[doc = include_str!("../../../docs/runtime.md")]
pub struct RuntimeGuideDoctests;

#[cfg(all(doctest, feature = "runtime", feature = "kv"))]
#[doc = include_str!("../../../docs/ipc.md")]
pub struct IpcGuideDoctests;
