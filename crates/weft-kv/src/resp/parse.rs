//! Bytes to commands: a per-connection, incremental parser of Redis requests.
//!
//! # The caller's side
//! The connection keeps a buffer of received bytes that are not yet consumed. It calls
//! [`Parser::parse`] with those bytes; on `Ok(Some((args, n)))` it runs the command and
//! drops the first `n` bytes; on `Ok(None)` it reads more bytes, appends them, and calls
//! again with the same start (the parser remembers how far it got); on `Err` it answers
//! `-ERR <text>` and closes the connection. Optionally, after `Ok(None)`, it may drop
//! [`Parser::take_consumed`] bytes (skipped empty lines, the finished arguments of a
//! command still arriving), so a client sending nothing but empty lines or a command
//! with a million arguments does not make the buffer keep what is already parsed.
//!
//! # Design
//! Two request types, chosen by the first byte of each request, as in Redis's
//! `processInputBuffer`:
//! - **multibulk** (`*N\r\n` then N times `$len\r\n<len bytes>\r\n`), parsed like
//!   Redis's `processMultibulkBuffer`: header lines end at the first `\r` (the byte
//!   after it is taken as the `\n` without looking), numbers follow Redis's
//!   `string2ll` (no `+`, no leading zeros, no `-0`), and the two bytes after a bulk's
//!   data are skipped without being checked, as Redis does. `*0` and negative counts
//!   are skipped (no command).
//! - **inline** (anything else): one line, ended by `\n` (a `\r` just before it is
//!   dropped), split as Redis's `sdssplitargs` (see [`split_inline`]). An empty or
//!   blank line is skipped.
//!
//! The parser is incremental: its state is the offset of the first byte not yet
//! taken (`pos`), how many bytes after it are known to hold no line end
//! (so a header or inline line arriving byte by byte is scanned once), the arguments
//! parsed so far and the count still expected, and the length of a bulk whose header
//! is read but whose data has not fully arrived. Waiting for a bulk's data is a length
//! comparison: a 100 MB value arriving in 64 KB pieces costs one copy at the end, not a
//! rescan per piece.
//!
//! # Limits, checked before allocating
//! A bulk length above [`Limits::max_bulk`] (or negative) is refused on its header; a
//! multibulk count above [`Limits::max_args`] likewise. A claimed count reserves at
//! most [`MAX_ARGS_RESERVE`] argument slots; a bulk is allocated only once all its
//! bytes are in the buffer (at its exact size). An inline line longer than
//! [`Limits::max_inline`] and a header line longer than [`MAX_HEADER_LINE`] are
//! refused as soon as that many bytes arrive without a line end. The error texts are
//! Redis 7's.
//!
//! Before AUTH (the server calls [`Parser::set_unauthenticated`] while a password is
//! set and the client has not given it), a multibulk may claim at most
//! [`UNAUTH_MAX_ARGS`] arguments and a bulk at most [`UNAUTH_MAX_BULK`] bytes: a
//! stranger cannot make the server wait for, or hold, a big command. Anything over is
//! refused on its header with Redis 7's texts (`Protocol error: unauthenticated
//! multibulk length` / `bulk length`); a length over the limits above still gets the
//! `invalid` text, as in Redis.

use std::fmt;

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
        Limits {
            max_bulk: 512 << 20,
            max_args: 1 << 20,
            max_inline: 64 << 10,
        }
    }
}

/// Why the bytes are not a command: the connection is answered with `-ERR Protocol
/// error: ...` and closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl ProtocolError {
    fn new(text: &'static str) -> ProtocolError {
        ProtocolError(text.to_string())
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// The longest `*N` or `$N` header line (Redis's PROTO_INLINE_MAX_SIZE, 64 KiB): a
/// longer one without its `\r` is refused.
pub const MAX_HEADER_LINE: usize = 64 << 10;

/// The most argument slots reserved from a claimed `*N` before the arguments arrive
/// (the vector grows past it as they do).
pub const MAX_ARGS_RESERVE: usize = 1024;

/// The most arguments a command may claim before AUTH (Redis 7's limit).
pub const UNAUTH_MAX_ARGS: usize = 10;

/// The largest bulk a command may carry before AUTH (Redis 7's limit, 16 KiB).
pub const UNAUTH_MAX_BULK: usize = 16 << 10;

/// A command: its arguments, `args[0]` being its name as sent.
pub type Args = Vec<Vec<u8>>;

/// What [`Parser::parse_borrowed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A command that was whole in the buffer: its arguments are the ranges pushed
    /// to the caller's vector (offsets in the buffer passed); it ends at byte `n`.
    Borrowed(usize),
    /// A command that arrived in pieces: its arguments, copied, and its end.
    Owned(Args, usize),
}

/// Redis's `LONG_STR_SIZE`: a number of this many characters or more is invalid.
const LONG_STR_SIZE: usize = 21;

/// A parser for one connection's stream of commands.
#[derive(Debug, Default)]
pub struct Parser {
    limits: Limits,
    /// Bytes of the caller's buffer already taken (skipped, or copied into `args`).
    pos: usize,
    /// Bytes after `pos` known to hold no line end (`\r` in a multibulk header, `\n`
    /// in an inline line).
    scanned: usize,
    /// Arguments still expected by the multibulk in progress (0: between commands).
    remaining: usize,
    /// The length of the bulk whose header is read and whose data is awaited.
    bulk_len: Option<usize>,
    /// The arguments of the multibulk in progress.
    args: Args,
    /// The bytes of `args`' data.
    args_bytes: usize,
    /// The client has not authenticated: the smaller limits apply.
    unauth: bool,
}

/// What a header line (`*N` / `$N`) scan found.
enum Line {
    /// The line's end is not in the buffer yet.
    Partial,
    /// The line is `buf[start..cr]`; the next line starts at `cr + 2`.
    Complete(usize),
}

impl Parser {
    /// A parser with these limits, between commands.
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            ..Parser::default()
        }
    }

    /// The limits this parser enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Whether the client is still to authenticate: while it is, a multibulk may
    /// claim at most [`UNAUTH_MAX_ARGS`] arguments and a bulk at most
    /// [`UNAUTH_MAX_BULK`] bytes. Checked on each header, so a change applies from the
    /// next one.
    pub fn set_unauthenticated(&mut self, unauth: bool) {
        self.unauth = unauth;
    }

    /// The bytes of the command in progress that the parser holds (its arguments
    /// already copied out of the caller's buffer).
    pub fn buffered(&self) -> usize {
        self.args_bytes
    }

    /// The most arguments and the largest bulk accepted now.
    fn max_args_bulk(&self) -> (usize, usize) {
        if self.unauth {
            (
                self.limits.max_args.min(UNAUTH_MAX_ARGS),
                self.limits.max_bulk.min(UNAUTH_MAX_BULK),
            )
        } else {
            (self.limits.max_args, self.limits.max_bulk)
        }
    }

    /// Whether the parser holds part of a command (a caller seeing end of file here
    /// knows the client hung up mid-command).
    pub fn in_progress(&self) -> bool {
        self.remaining != 0 || self.scanned != 0
    }

    /// How many bytes at the start of the last buffer passed to [`Parser::parse`] are
    /// already taken into the parser's state (skipped empty lines, `*0`, the finished
    /// arguments of a command still arriving). The caller may drop them; it must then
    /// call `parse` with the buffer that follows them. Calling it is optional.
    pub fn take_consumed(&mut self) -> usize {
        std::mem::take(&mut self.pos)
    }

    /// Parses the next command from `buf`, the caller's unconsumed bytes.
    ///
    /// Returns `Ok(Some((args, n)))`: a command (`args[0]` is its name, as sent) made
    /// of the first `n` bytes of `buf`; `Ok(None)`: the command is not complete, call
    /// again with the same bytes plus more; `Err`: the bytes are not a request (answer
    /// `-ERR <text>` and close). After an error the parser's state is unspecified.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Option<(Args, usize)>, ProtocolError> {
        loop {
            if self.remaining == 0 {
                let Some(&first) = buf.get(self.pos) else {
                    return Ok(None);
                };
                if first == b'*' {
                    let cr = match self
                        .header_line(buf, "Protocol error: too big mbulk count string")?
                    {
                        Line::Partial => return Ok(None),
                        Line::Complete(cr) => cr,
                    };
                    let count = match string2ll(&buf[self.pos + 1..cr]) {
                        Some(n) if n <= 0 => {
                            // `*0` and `*-1`: nothing to run, as in Redis.
                            self.advance(cr + 2);
                            continue;
                        }
                        // Up to Redis's own bound on a count, the text says why.
                        Some(n)
                            if self.unauth
                                && n > UNAUTH_MAX_ARGS as i64
                                && n <= i64::from(i32::MAX) =>
                        {
                            return Err(ProtocolError::new(
                                "Protocol error: unauthenticated multibulk length",
                            ))
                        }
                        Some(n) if n as u64 <= self.limits.max_args as u64 => n as usize,
                        _ => {
                            return Err(ProtocolError::new(
                                "Protocol error: invalid multibulk length",
                            ))
                        }
                    };
                    self.advance(cr + 2);
                    self.remaining = count;
                    // The count is only a claim: reserve a bounded number of slots.
                    self.args = Vec::with_capacity(count.min(MAX_ARGS_RESERVE));
                    self.args_bytes = 0;
                } else {
                    match self.inline(buf)? {
                        None => return Ok(None),
                        Some(args) if args.is_empty() => continue,
                        Some(args) => return Ok(Some((args, std::mem::take(&mut self.pos)))),
                    }
                }
            } else if let Some(len) = self.bulk_len {
                // Data plus its two terminating bytes (skipped unchecked, as Redis).
                if (buf.len() - self.pos).saturating_sub(len) < 2 {
                    return Ok(None);
                }
                self.args.push(buf[self.pos..self.pos + len].to_vec());
                self.args_bytes += len;
                self.pos += len + 2;
                self.bulk_len = None;
                self.remaining -= 1;
                if self.remaining == 0 {
                    let args = std::mem::take(&mut self.args);
                    self.args_bytes = 0;
                    return Ok(Some((args, std::mem::take(&mut self.pos))));
                }
            } else {
                let cr = match self.header_line(buf, "Protocol error: too big bulk count string")? {
                    Line::Partial => return Ok(None),
                    Line::Complete(cr) => cr,
                };
                let first = buf[self.pos];
                if first != b'$' {
                    return Err(expected_dollar(first));
                }
                match string2ll(&buf[self.pos + 1..cr]) {
                    Some(n) if n >= 0 && n as u64 <= self.limits.max_bulk as u64 => {
                        if self.unauth && n as usize > UNAUTH_MAX_BULK {
                            return Err(ProtocolError::new(
                                "Protocol error: unauthenticated bulk length",
                            ));
                        }
                        self.bulk_len = Some(n as usize);
                        self.advance(cr + 2);
                    }
                    _ => return Err(ProtocolError::new("Protocol error: invalid bulk length")),
                }
            }
        }
    }

    /// [`Parser::parse`] without copying: a multibulk command that is whole in `buf`
    /// is answered as the ranges of its arguments in `buf` (pushed to `ranges`), so
    /// running it costs no allocation. A command that is not whole yet, an inline
    /// one, or bytes that are not a request take [`Parser::parse`]'s path (the same
    /// answers and errors): the arguments of a command arriving in pieces are copied
    /// as they arrive ([`Parsed::Owned`]).
    pub fn parse_borrowed(
        &mut self,
        buf: &[u8],
        ranges: &mut Vec<std::ops::Range<usize>>,
    ) -> Result<Option<Parsed>, ProtocolError> {
        if self.remaining == 0 && buf.get(self.pos) == Some(&b'*') {
            let mark = ranges.len();
            if let Some(end) = self.whole_multibulk(buf, ranges) {
                self.advance(0);
                return Ok(Some(Parsed::Borrowed(end)));
            }
            ranges.truncate(mark);
        }
        Ok(self.parse(buf)?.map(|(args, n)| Parsed::Owned(args, n)))
    }

    /// The multibulk command at `pos`, if it is whole and well formed: pushes its
    /// arguments' ranges and answers its end. Anything else (incomplete, `*0`, an
    /// error): `None`, and [`Parser::parse`] takes over (it finds the same lines and
    /// numbers by the same rules, and says what is wrong).
    fn whole_multibulk(
        &self,
        buf: &[u8],
        ranges: &mut Vec<std::ops::Range<usize>>,
    ) -> Option<usize> {
        // A header line at `from`: its `\r`, with the byte after it in the buffer.
        let line = |from: usize| -> Option<usize> {
            let cr = from + memchr::memchr(b'\r', &buf[from..])?;
            (cr + 1 < buf.len()).then_some(cr)
        };
        let (max_args, max_bulk) = self.max_args_bulk();
        let at = self.pos;
        let cr = line(at)?;
        let count = string2ll(&buf[at + 1..cr])?;
        if count <= 0 || count as u64 > max_args as u64 {
            return None;
        }
        let mut p = cr + 2;
        for _ in 0..count {
            if buf.get(p) != Some(&b'$') {
                return None;
            }
            let cr = line(p)?;
            let len = string2ll(&buf[p + 1..cr])?;
            if len < 0 || len as u64 > max_bulk as u64 {
                return None;
            }
            let (start, len) = (cr + 2, len as usize);
            // Data plus its two terminating bytes (skipped unchecked, as Redis).
            if buf.len() - start < len + 2 {
                return None;
            }
            ranges.push(start..start + len);
            p = start + len + 2;
        }
        Some(p)
    }

    /// Moves `pos` to `to` (the start of a new line): nothing after it is scanned yet.
    #[inline]
    fn advance(&mut self, to: usize) {
        self.pos = to;
        self.scanned = 0;
    }

    /// Finds the end of the header line at `pos`: its `\r`, with one more byte after it
    /// in the buffer. Refuses a line that passes [`MAX_HEADER_LINE`] without a `\r`.
    #[inline]
    fn header_line(&mut self, buf: &[u8], too_big: &'static str) -> Result<Line, ProtocolError> {
        let from = self.pos + self.scanned;
        match memchr::memchr(b'\r', &buf[from..]) {
            Some(i) => {
                let cr = from + i;
                if cr + 1 >= buf.len() {
                    // The `\n` is still to come; the `\r` is rescanned then.
                    self.scanned = cr - self.pos;
                    Ok(Line::Partial)
                } else {
                    Ok(Line::Complete(cr))
                }
            }
            None => {
                self.scanned = buf.len() - self.pos;
                if self.scanned > MAX_HEADER_LINE {
                    Err(ProtocolError::new(too_big))
                } else {
                    Ok(Line::Partial)
                }
            }
        }
    }

    /// Parses the inline line at `pos`: `Ok(None)` if its `\n` has not arrived,
    /// `Ok(Some(args))` (empty for a blank line) with `pos` moved past it.
    fn inline(&mut self, buf: &[u8]) -> Result<Option<Args>, ProtocolError> {
        let from = self.pos + self.scanned;
        let Some(i) = memchr::memchr(b'\n', &buf[from..]) else {
            self.scanned = buf.len() - self.pos;
            // The line will be at least this long: a last `\r` may be the one its
            // `\n` strips (found by cargo fuzz: a line of exactly the limit whose
            // `\r\n` arrived split was refused, but accepted when read whole).
            let at_least = self.scanned - usize::from(buf.last() == Some(&b'\r'));
            if at_least > self.limits.max_inline {
                return Err(ProtocolError::new("Protocol error: too big inline request"));
            }
            return Ok(None);
        };
        let nl = from + i;
        let mut line = &buf[self.pos..nl];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        // Refused whatever the chunking: Redis refuses such a line when it arrives in
        // reads of 16 KiB, i.e. almost always.
        if line.len() > self.limits.max_inline {
            return Err(ProtocolError::new("Protocol error: too big inline request"));
        }
        let args = split_inline(line)?;
        self.advance(nl + 1);
        Ok(Some(args))
    }
}

/// `Protocol error: expected '$', got 'X'`, with a CR or LF shown as a space (as
/// Redis's addReplyErrorFormat does, so the reply stays one line).
fn expected_dollar(got: u8) -> ProtocolError {
    let c = match got {
        b'\r' | b'\n' => ' ',
        b => char::from(b),
    };
    ProtocolError(format!("Protocol error: expected '$', got '{c}'"))
}

/// Redis's `string2ll`: an optional `-`, then `0` alone or a digit 1-9 followed by
/// digits, fewer than 21 characters, within `i64`. Anything else is `None`.
#[inline]
pub fn string2ll(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() >= LONG_STR_SIZE {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    if negative {
        if v > (i64::MAX as u64) + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// Splits an inline command line into arguments as Redis's `sdssplitargs`.
///
/// - Arguments are separated by blanks (space, `\t`, `\n`, `\r`, `\v`, `\f` between
///   arguments; inside an unquoted argument only space, `\t`, `\n`, `\r` end it).
/// - `"double quotes"` take the escapes `\n \r \t \b \a`, `\xHH` (two hex digits), and
///   `\<any>` for that character itself (so `\\` and `\"`).
/// - `'single quotes'` take only `\'`; every other byte (a backslash too) is itself.
/// - A quote may open in the middle of an argument (`a"b c"` is `ab c`); a closing
///   quote must be followed by a blank or the end of the line.
/// - An unterminated quote, or a closing quote followed by something else, is
///   `Protocol error: unbalanced quotes in request`.
/// - A NUL byte ends the line (Redis works on a C string here).
///
/// A blank line gives no arguments (the caller skips it).
pub fn split_inline(line: &[u8]) -> Result<Args, ProtocolError> {
    let line = match memchr::memchr(0, line) {
        Some(nul) => &line[..nul],
        None => line,
    };
    let unbalanced = || ProtocolError::new("Protocol error: unbalanced quotes in request");
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut args = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i == n {
            return Ok(args);
        }
        let mut cur = Vec::new();
        // Unquoted run: copy up to the next byte that ends the argument or opens a quote.
        let start = i;
        while i < n && !matches!(line[i], b' ' | b'\t' | b'\n' | b'\r' | b'"' | b'\'') {
            i += 1;
        }
        cur.extend_from_slice(&line[start..i]);
        if i < n && matches!(line[i], b'"' | b'\'') {
            i = quoted(line, i, &mut cur)?;
            // The closing quote must be followed by a blank or the end.
            if i < n && !is_space(line[i]) {
                return Err(unbalanced());
            }
        }
        args.push(cur);
    }
}

/// Appends the quoted text opening at `line[open]` (a `"` or a `'`) to `cur`, with its
/// escapes applied; returns the index after the closing quote.
fn quoted(line: &[u8], open: usize, cur: &mut Vec<u8>) -> Result<usize, ProtocolError> {
    let double = line[open] == b'"';
    let n = line.len();
    let mut i = open + 1;
    loop {
        let Some(&b) = line.get(i) else {
            return Err(ProtocolError::new(
                "Protocol error: unbalanced quotes in request",
            ));
        };
        if double {
            if b == b'\\' && i + 1 < n {
                let e = line[i + 1];
                if e == b'x'
                    && i + 3 < n
                    && line[i + 2].is_ascii_hexdigit()
                    && line[i + 3].is_ascii_hexdigit()
                {
                    cur.push(hex(line[i + 2]) << 4 | hex(line[i + 3]));
                    i += 4;
                    continue;
                }
                cur.push(match e {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
                continue;
            }
            if b == b'"' {
                return Ok(i + 1);
            }
        } else {
            if b == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                cur.push(b'\'');
                i += 2;
                continue;
            }
            if b == b'\'' {
                return Ok(i + 1);
            }
        }
        cur.push(b);
        i += 1;
    }
}

/// The value of an ASCII hex digit (the caller checked it is one).
#[inline]
fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Result<Vec<String>, ProtocolError> {
        split_inline(line.as_bytes()).map(|v| {
            v.into_iter()
                .map(|a| String::from_utf8(a).unwrap())
                .collect()
        })
    }

    #[test]
    fn string2ll_follows_redis() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"123"), Some(123));
        assert_eq!(string2ll(b"-5"), Some(-5));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b"1a",
            b" 1",
            b"9223372036854775808",
            b"99999999999999999999",
        ] {
            assert_eq!(string2ll(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn split_inline_quotes_and_escapes() {
        assert_eq!(words("set a b").unwrap(), ["set", "a", "b"]);
        assert_eq!(words("  set\t a  ").unwrap(), ["set", "a"]);
        assert_eq!(words(r#"set "a b" 'c d'"#).unwrap(), ["set", "a b", "c d"]);
        assert_eq!(
            words(r#""\n\r\t\b\a\\\"\x41\q""#).unwrap(),
            ["\n\r\t\x08\x07\\\"Aq"]
        );
        assert_eq!(words(r#"'it\'s' 'a\b'"#).unwrap(), ["it's", "a\\b"]);
        assert_eq!(
            words(r#"a"b c"d"#),
            Err(ProtocolError::new(
                "Protocol error: unbalanced quotes in request"
            ))
        );
        assert_eq!(words(r#"a"b c""#).unwrap(), ["ab c"]);
        assert_eq!(words(r#""" ''"#).unwrap(), ["", ""]);
        assert_eq!(words(r#""\x4""#).unwrap(), ["x4"]);
        assert!(words("\"abc").is_err());
        assert!(words("'abc").is_err());
        assert!(words("\"abc\\\"").is_err());
        assert!(words("''x").is_err());
        assert_eq!(words("").unwrap(), Vec::<String>::new());
        assert_eq!(words(" \t\x0b").unwrap(), Vec::<String>::new());
        assert_eq!(words("a\x0bb").unwrap(), ["a\x0bb"]);
        assert_eq!(words("a\0b c").unwrap(), ["a"]);
    }

    #[test]
    fn unauthenticated_limits() {
        let refused = |input: &[u8]| {
            let mut p = Parser::new(Limits::default());
            p.set_unauthenticated(true);
            let mut ranges = Vec::new();
            p.parse_borrowed(input, &mut ranges)
                .map(|_| ())
                .unwrap_err()
                .0
        };
        let mbulk = "Protocol error: unauthenticated multibulk length";
        let bulk = "Protocol error: unauthenticated bulk length";
        assert_eq!(refused(b"*11\r\n"), mbulk);
        assert_eq!(refused(b"*2147483647\r\n"), mbulk);
        assert_eq!(
            refused(b"*2147483648\r\n"),
            "Protocol error: invalid multibulk length"
        );
        assert_eq!(refused(b"*2\r\n$3\r\nGET\r\n$16385\r\n"), bulk);
        assert_eq!(
            refused(b"*2\r\n$3\r\nGET\r\n$536870913\r\n"),
            "Protocol error: invalid bulk length"
        );
        // Whole in the buffer (the borrowing path) or not, the same answer.
        let mut whole = b"*2\r\n$4\r\nECHO\r\n$16385\r\n".to_vec();
        whole.extend(vec![b'x'; 16385]);
        whole.extend(b"\r\n");
        assert_eq!(refused(&whole), bulk);
        let mut eleven = b"*11\r\n".to_vec();
        for _ in 0..11 {
            eleven.extend(b"$1\r\na\r\n");
        }
        assert_eq!(refused(&eleven), mbulk);
        // At the limits, and once authenticated, commands pass.
        let mut p = Parser::new(Limits::default());
        p.set_unauthenticated(true);
        let mut at_limit = b"*10\r\n".to_vec();
        for _ in 0..9 {
            at_limit.extend(b"$1\r\na\r\n");
        }
        at_limit.extend(b"$16384\r\n");
        at_limit.extend(vec![b'y'; 16384]);
        at_limit.extend(b"\r\n");
        let (args, n) = p.parse(&at_limit).unwrap().unwrap();
        assert_eq!((args.len(), args[9].len(), n), (10, 16384, at_limit.len()));
        p.set_unauthenticated(false);
        assert!(matches!(p.parse(&whole), Ok(Some(_))));
        assert!(matches!(p.parse(&eleven), Ok(Some(_))));
    }

    #[test]
    fn take_consumed_rebases() {
        let mut p = Parser::new(Limits::default());
        let mut buf = b"\r\n*0\r\n*2\r\n$3\r\nGET\r\n$1".to_vec();
        assert_eq!(p.parse(&buf), Ok(None));
        let k = p.take_consumed();
        assert_eq!(
            &buf[..k],
            b"\r\n*0\r\n*2\r\n$3\r\nGET\r\n$1\r\n"[..k]
                .to_vec()
                .as_slice()
        );
        buf.drain(..k);
        buf.extend_from_slice(b"\r\nk\r\n");
        let (args, n) = p.parse(&buf).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(n, buf.len());
    }
}
