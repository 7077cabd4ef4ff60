//! The Redis serialization protocol (RESP2, and RESP3 after `HELLO 3`).
//!
//! - [`parse`]: bytes to commands. A per-connection, incremental [`Parser`]: a command
//!   is an array of bulk strings (what every client library sends) or an inline command
//!   (a line of words, what `telnet` and redis-benchmark's inline PING send). It keeps
//!   its progress between calls, so bytes arriving in pieces are looked at once. Limits
//!   are checked before anything is allocated: a bulk length above
//!   [`Limits::max_bulk`] is refused as soon as its header is read, a claimed argument
//!   count reserves only a bounded number of slots. Errors are Redis 7's texts
//!   ([`ProtocolError`]); the connection answers `-ERR <text>` and closes.
//! - [`reply`]: the [`Reply`] type and its encodings ([`Reply::encode`]). One value
//!   encodes to RESP2 or RESP3 depending on the connection's protocol version (a map is
//!   a flat array in RESP2, a nil is `$-1` in RESP2 and `_` in RESP3, ...).
//!
//! The design is described in docs/kv-resp.md.

pub mod parse;
pub mod reply;

pub use parse::{Args, Limits, Parsed, Parser, ProtocolError};
pub use reply::Reply;
