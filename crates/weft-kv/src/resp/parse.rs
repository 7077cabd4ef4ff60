//! Bytes to commands (to be written).

/// Limits on what one request may carry.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest bulk string (default 512 MiB, Redis's proto-max-bulk-len).
    pub max_bulk: usize,
    /// The most arguments in one command (default 1,048,576).
    pub max_args: usize,
    /// The longest inline command line (default 64 KiB).
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bulk: 512 << 20, max_args: 1 << 20, max_inline: 64 << 10 }
    }
}

/// Why the bytes are not a command: the connection is answered with `-ERR Protocol
/// error: ...` and closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// A parser for one connection's stream of commands.
#[derive(Debug, Default)]
pub struct Parser {}
