//! [`Reply`]: what a command answers, and its RESP2/RESP3 encodings.

use std::borrow::Cow;

/// A reply, independent of the protocol version it will be encoded in.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`: a status line (no CR or LF inside).
    Simple(Cow<'static, str>),
    /// `-ERR ...`: the whole line after the `-`, starting with Redis's error word
    /// (`ERR`, `WRONGTYPE`, `NOAUTH`, `OOM`, ...). No CR or LF inside.
    Error(Cow<'static, str>),
    /// `:42`.
    Int(i64),
    /// `$3\r\nfoo`.
    Bulk(Vec<u8>),
    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    Nil,
    /// A missing array (e.g. a timed-out blocking pop): `*-1` in RESP2, `_` in RESP3.
    NilArray,
    /// `*n`.
    Array(Vec<Reply>),
    /// `%n` in RESP3; a flat array of 2n elements in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// `~n` in RESP3; an array in RESP2.
    Set(Vec<Reply>),
    /// `,3.14` in RESP3; a bulk string in RESP2.
    Double(f64),
    /// `#t` / `#f` in RESP3; the integer 1 / 0 in RESP2.
    Bool(bool),
    /// `=n\r\ntxt:...` in RESP3 (the format is three characters, e.g. `txt`); a bulk
    /// string in RESP2.
    Verbatim(&'static str, Vec<u8>),
}

impl Reply {
    /// `+OK`.
    pub const OK: Reply = Reply::Simple(Cow::Borrowed("OK"));

    /// An error reply from a static text (which starts with its error word).
    pub const fn err(text: &'static str) -> Reply {
        Reply::Error(Cow::Borrowed(text))
    }

    /// An error reply from a formatted text (which starts with its error word).
    pub fn error(text: String) -> Reply {
        Reply::Error(Cow::Owned(text))
    }

    /// A bulk string copied from `bytes`.
    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(bytes.to_vec())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}
