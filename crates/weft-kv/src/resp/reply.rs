//! [`Reply`]: what a command answers, and its RESP2/RESP3 encodings.
//!
//! A command builds a [`Reply`] without knowing the connection's protocol version;
//! [`Reply::encode`] writes it in RESP2 or RESP3 (`proto` 2 or 3, as chosen by
//! `HELLO`). The RESP3-only types fall back as Redis does: a map is a flat array of
//! keys and values, a set an array, a double a bulk string, a boolean the integer 1
//! or 0, a verbatim string a bulk string, and both nils become `$-1` / `*-1`.
//!
//! Encoding appends to the connection's output buffer. Integers and lengths are
//! written with `itoa` (no formatting machinery on the hot path). A double is written
//! as Redis 7.0's addReplyDouble does, C's `%.17g` (`1.1000000000000001`, `inf`:
//! [`format_g17`]): in RESP3 as a double (`,1.5`), in RESP2 as a bulk string, which
//! clients of RESP2 see as a sorted set's score. ([`format_double`] is Redis 7.2's
//! shorter form, `1.1`, kept for a later version's replies.) A CR or LF in a
//! status or error text (which the type forbids) is written as a space, as Redis's
//! addReplyErrorFormat does, so one bad text cannot break the stream.

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
    /// An array of n two-element arrays in RESP3; a flat array of 2n elements in RESP2
    /// (HRANDFIELD ... WITHVALUES, ZRANGE ... WITHSCORES).
    Pairs(Vec<(Reply, Reply)>),
    /// `%n` in RESP3; an array of n two-element arrays in RESP2 (XREAD's streams).
    KeyedPairs(Vec<(Reply, Reply)>),
    /// `~n` in RESP3; an array in RESP2.
    Set(Vec<Reply>),
    /// `,3.14` in RESP3; a bulk string in RESP2.
    Double(f64),
    /// A double in Redis's human form (its addReplyHumanLongDouble: C's `%.17Lf`
    /// without trailing zeros, `13.36138933897018433`): `,text` in RESP3, a bulk
    /// string in RESP2 (GEOPOS and the coordinates of GEOSEARCH ... WITHCOORD).
    HumanDouble(f64),
    /// `#t` / `#f` in RESP3; the integer 1 / 0 in RESP2.
    Bool(bool),
    /// Already encoded into the connection's output buffer by the command itself (GET
    /// writes its value straight there): encodes to nothing.
    Written,
    /// `=n\r\ntxt:...` in RESP3 (the format is three characters, e.g. `txt`); a bulk
    /// string in RESP2.
    Verbatim(&'static str, Vec<u8>),
    /// `(digits` in RESP3 (a big number); a bulk string in RESP2.
    BigNum(String),
    /// `|n` and n (name, value) pairs, then the reply they describe, in RESP3; the
    /// reply alone in RESP2 (DEBUG PROTOCOL ATTRIB).
    Attribute(Vec<(Reply, Reply)>, Box<Reply>),
    /// `>n` and n elements (out-of-band data), then the reply, in RESP3; in RESP2 an
    /// array, then the reply (DEBUG PROTOCOL PUSH, which answers only in RESP3).
    Push(Vec<Reply>, Box<Reply>),
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

    /// About how many bytes this reply holds, and so its encoding takes: its
    /// strings' bytes plus a few for each element's header (what a connection counts
    /// against its output limit before the reply is encoded).
    pub fn size_hint(&self) -> usize {
        const HEADER: usize = 16;
        HEADER
            + match self {
                Reply::Simple(t) | Reply::Error(t) => t.len(),
                Reply::Bulk(d) | Reply::Verbatim(_, d) => d.len(),
                Reply::BigNum(t) => t.len(),
                Reply::Attribute(pairs, r) => {
                    r.size_hint()
                        + pairs
                            .iter()
                            .map(|(k, v)| k.size_hint() + v.size_hint())
                            .sum::<usize>()
                }
                Reply::Push(items, r) => {
                    r.size_hint() + items.iter().map(Reply::size_hint).sum::<usize>()
                }
                Reply::Array(items) | Reply::Set(items) => items.iter().map(Reply::size_hint).sum(),
                Reply::Map(pairs) | Reply::Pairs(pairs) | Reply::KeyedPairs(pairs) => pairs
                    .iter()
                    .map(|(k, v)| k.size_hint() + v.size_hint())
                    .sum(),
                Reply::Int(_)
                | Reply::Nil
                | Reply::NilArray
                | Reply::Double(_)
                | Reply::HumanDouble(_)
                | Reply::Bool(_)
                | Reply::Written => 0,
            }
    }
}

impl Reply {
    /// Appends this reply's encoding in protocol version `proto` (2 or 3; anything
    /// above 2 is RESP3) to `out`.
    pub fn encode(&self, proto: u8, out: &mut Vec<u8>) {
        let resp3 = proto >= 3;
        match self {
            Reply::Simple(text) => line(b'+', text.as_bytes(), out),
            Reply::Error(text) => line(b'-', text.as_bytes(), out),
            Reply::Int(n) => header(b':', *n, out),
            Reply::Bulk(data) => bulk(data, out),
            Reply::Written => {}
            Reply::Nil => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" }),
            Reply::NilArray => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"*-1\r\n" }),
            Reply::Array(items) => {
                header(b'*', items.len() as i64, out);
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(b'%', pairs.len() as i64, out);
                } else {
                    header(b'*', 2 * pairs.len() as i64, out);
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Pairs(pairs) => {
                header(b'*', pairs.len() as i64 * if resp3 { 1 } else { 2 }, out);
                for (k, v) in pairs {
                    if resp3 {
                        header(b'*', 2, out);
                    }
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::KeyedPairs(pairs) => {
                header(if resp3 { b'%' } else { b'*' }, pairs.len() as i64, out);
                for (k, v) in pairs {
                    if !resp3 {
                        header(b'*', 2, out);
                    }
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Set(items) => {
                header(if resp3 { b'~' } else { b'*' }, items.len() as i64, out);
                for item in items {
                    item.encode(proto, out);
                }
            }
            Reply::Double(d) => {
                let mut text = Vec::with_capacity(32);
                format_g17(*d, &mut text);
                if resp3 {
                    line(b',', &text, out);
                } else {
                    bulk(&text, out);
                }
            }
            Reply::HumanDouble(d) => {
                let text = format_human(*d);
                if resp3 {
                    line(b',', text.as_bytes(), out);
                } else {
                    bulk(text.as_bytes(), out);
                }
            }
            Reply::Bool(b) => out.extend_from_slice(match (resp3, b) {
                (true, true) => b"#t\r\n",
                (true, false) => b"#f\r\n",
                (false, true) => b":1\r\n",
                (false, false) => b":0\r\n",
            }),
            Reply::Verbatim(format, data) => {
                if resp3 {
                    // `=<len>\r\n<fmt>:<data>\r\n`, the length counting `fmt:`.
                    header(b'=', (format.len() + 1 + data.len()) as i64, out);
                    out.extend_from_slice(format.as_bytes());
                    out.push(b':');
                    out.extend_from_slice(data);
                    out.extend_from_slice(b"\r\n");
                } else {
                    bulk(data, out);
                }
            }
            Reply::BigNum(digits) => {
                if resp3 {
                    line(b'(', digits.as_bytes(), out);
                } else {
                    bulk(digits.as_bytes(), out);
                }
            }
            Reply::Attribute(pairs, r) => {
                if resp3 {
                    header(b'|', pairs.len() as i64, out);
                    for (k, v) in pairs {
                        k.encode(proto, out);
                        v.encode(proto, out);
                    }
                }
                r.encode(proto, out);
            }
            Reply::Push(items, r) => {
                header(if resp3 { b'>' } else { b'*' }, items.len() as i64, out);
                for item in items {
                    item.encode(proto, out);
                }
                r.encode(proto, out);
            }
        }
    }

    /// This reply's encoding in protocol version `proto`, in a new vector.
    pub fn encode_to_vec(&self, proto: u8) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(proto, &mut out);
        out
    }
}

/// `<tag><n>\r\n`.
#[inline]
fn header(tag: u8, n: i64, out: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    out.push(tag);
    out.extend_from_slice(digits.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `$<len>\r\n<data>\r\n`.
#[inline]
pub fn bulk(data: &[u8], out: &mut Vec<u8>) {
    out.reserve(data.len() + 16);
    header(b'$', data.len() as i64, out);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `<tag><text>\r\n`, a CR or LF inside `text` written as a space.
#[inline]
fn line(tag: u8, text: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    if memchr::memchr2(b'\r', b'\n', text).is_none() {
        out.extend_from_slice(text);
    } else {
        out.extend(
            text.iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends the text of a double that both formats write alike (`nan`, `inf`, `-inf`,
/// `0`, `-0`): whether `d` was one.
fn special(d: f64, out: &mut Vec<u8>) -> bool {
    let text: &[u8] = if d.is_nan() {
        b"nan"
    } else if d.is_infinite() {
        if d < 0.0 {
            b"-inf"
        } else {
            b"inf"
        }
    } else if d == 0.0 {
        if d.is_sign_negative() {
            b"-0"
        } else {
            b"0"
        }
    } else {
        return false;
    };
    out.extend_from_slice(text);
    true
}

/// Appends `d` as C's `printf("%.17g")` writes it (Redis 7.0's replies of a double
/// in RESP2, and its listpack scores): 17 significant digits without trailing zeros,
/// in exponent form (`1e+20`, `1.5e-07`) when the exponent is below -4 or above 16;
/// `inf`, `-inf`, `nan`, `-0`.
pub fn format_g17(d: f64, out: &mut Vec<u8>) {
    if special(d, out) {
        return;
    }
    // An integer below 10^17 in magnitude has at most 17 digits: `%.17g` writes
    // them all, exactly (the common score, without formatting through text).
    if d.fract() == 0.0 && d.abs() < 1e17 {
        out.extend_from_slice(itoa::Buffer::new().format(d as i64).as_bytes());
        return;
    }
    let sci = format!("{d:.16e}");
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let strip = |t: &str| -> String {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t.to_string()
        }
    };
    if !(-4..17).contains(&exponent) {
        out.extend_from_slice(strip(mantissa).as_bytes());
        out.push(b'e');
        out.push(if exponent < 0 { b'-' } else { b'+' });
        if exponent.abs() < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(itoa::Buffer::new().format(exponent.abs()).as_bytes());
    } else {
        let fixed = format!("{:.*}", (16 - exponent) as usize, d);
        out.extend_from_slice(strip(&fixed).as_bytes());
    }
}

/// Appends `d` as Redis 7.2's `d2string` writes it (see the module doc).
pub fn format_double(d: f64, out: &mut Vec<u8>) {
    if special(d, out) {
        return;
    }
    // Redis's double2ll: within +-(LLONG_MAX / 2), an integer-valued double is written
    // as that integer.
    let bound = (i64::MAX / 2) as f64;
    if (-bound..=bound).contains(&d) && (d as i64) as f64 == d {
        out.extend_from_slice(itoa::Buffer::new().format(d as i64).as_bytes());
        return;
    }
    // The shortest round-trip digits, from Rust's `{:e}` (`-1.2345e-7`), laid out as
    // fpconv's emit_digits: `digits * 10^k`.
    let sci = format!("{:e}", d.abs());
    let (mantissa, exponent) = sci.split_once('e').expect("`{:e}` writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let digits: Vec<u8> = mantissa.bytes().filter(|&b| b != b'.').collect();
    let nd = digits.len() as i32;
    let k = exponent - (nd - 1);
    if d < 0.0 {
        out.push(b'-');
    }
    let exp = (k + nd - 1).abs();
    if k >= 0 && exp < nd + 7 {
        // A plain integer (only above 2^62 here): the digits and k zeros.
        out.extend_from_slice(&digits);
        out.resize(out.len() + k as usize, b'0');
    } else if k < 0 && (k > -7 || exp < 4) {
        // A decimal without exponent.
        let offset = nd + k;
        if offset <= 0 {
            out.extend_from_slice(b"0.");
            out.resize(out.len() + (-offset) as usize, b'0');
            out.extend_from_slice(&digits);
        } else {
            out.extend_from_slice(&digits[..offset as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[offset as usize..]);
        }
    } else {
        // Scientific: d.ddde+X / d.ddde-X, the exponent without leading zeros.
        out.push(digits[0]);
        if nd > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        out.push(if k + nd - 1 < 0 { b'-' } else { b'+' });
        out.extend_from_slice(itoa::Buffer::new().format(exp).as_bytes());
    }
}

/// `d` as Redis's ld2string in its human mode writes it: C's `%.17Lf` (of the double's
/// exact value), trailing zeros after the point removed, then the point if nothing
/// follows it; `-0` becomes `0`.
pub fn format_human(d: f64) -> String {
    let mut t = format!("{d:.17}");
    if t.contains('.') {
        let trimmed = t.trim_end_matches('0').trim_end_matches('.').len();
        t.truncate(trimmed);
    }
    if t == "-0" {
        t = "0".into();
    }
    t
}
