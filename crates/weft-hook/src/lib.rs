//! # weft-hook: blocking calls on green threads park only the green thread
//!
//! Linking this crate into a program overrides the blocking functions of the C library
//! (`read`, `write`, `accept`, `connect`, `recv`, `send`, `poll`, `epoll_wait`,
//! `nanosleep`, `open`, `fsync`, `getaddrinfo`, `waitpid`, ...). Made on a green thread
//! of a [`weft_runtime::Runtime`], such a call parks only that green thread, and its
//! worker runs others meanwhile; made anywhere else it is the C library's own. So
//! `std::net`, `std::fs`, `std::thread::sleep`, `std::process` and every crate built
//! on them (database drivers, HTTP clients, the `redis` crate) run on green threads
//! unchanged, without blocking their workers.
//!
//! ```no_run
//! use weft_hook as _; // links the layer into the program
//! use std::io::{Read, Write};
//!
//! let rt = weft_runtime::Runtime::builder().workers(2).build().unwrap();
//! rt.block_on(|| {
//!     let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = l.local_addr().unwrap();
//!     // 1,000 green threads each blocked in std's accept/read: two OS threads.
//!     for _ in 0..1000 {
//!         weft_runtime::spawn(move || {
//!             let mut c = std::net::TcpStream::connect(addr).unwrap();
//!             c.write_all(b"ping").unwrap();
//!         });
//!     }
//!     for _ in 0..1000 {
//!         let (mut s, _) = l.accept().unwrap();
//!         let mut b = [0u8; 4];
//!         s.read_exact(&mut b).unwrap();
//!     }
//! });
//! ```
//!
//! A program opts in by depending on this crate and naming it once (`use weft_hook as
//! _;`, or any item of it): the symbols are linked only into programs that use the
//! crate. C programs link `libweft-hook` instead (`-lweft-hook`, or `LD_PRELOAD`).
//! What is covered, what is not, and how to see what a program calls that is not:
//! `docs/hook.md`. The work is done by `weft_runtime::hook`; [`stats`] reads the
//! counters that `weft ps PID` shows.

#![warn(missing_docs)]

weft_runtime::weft_hook_symbols!();

/// The counters of the calls green threads made (see `weft_runtime::hook::stats`).
pub use weft_runtime::hook::stats;
/// Whether the layer works, and turning it off or on for the process (`WEFT_HOOK=off`
/// in the environment turns it off too).
pub use weft_runtime::hook::{enabled, set_enabled};
