//! The bitmap commands (Redis 7.0's bitops.c): SETBIT, GETBIT, BITCOUNT, BITPOS,
//! BITOP, BITFIELD and BITFIELD_RO. A bitmap is a string: bit 0 is the most
//! significant bit of its first byte, and bits past its end read as 0.
//!
//! Logging (docs/kv-types.md, invariants 5 and 6): SETBIT and BITFIELD on an existing
//! string log only the bytes they change, as `SetRange` records (each a few bytes),
//! plus one zero byte at the new end when the string grew past every byte they wrote;
//! on a missing key they log an empty string's `Set` first. A write that changes
//! nothing (SETBIT of a bit to the value it has) logs nothing and leaves the value as
//! it was. BITOP stores its result with a `Set` (no expiry, whatever the destination
//! held), or removes the destination (`Del`) when every source is empty or missing.
//!
//! Keyspace events, as Redis's: `setbit` for a SETBIT or BITFIELD that changed the
//! string (and `new` for a key it created), `set` or `del` for BITOP's destination.
//!
//! Limits: a bit offset's byte is below the server's `proto-max-bulk-len`
//! (`--max-bulk`, [`max_string`]: 512 MB, so bits up to 2^32 - 1, by default), as in
//! Redis, so no command makes a string longer than that; the growth a write asks for
//! is checked against the memory limit before anything changes.
//!
//! BITOP's source keys may be on other shards than its destination: the server runs it
//! as a transaction (`commands/across.rs`); [`bitop`] is the whole command on one
//! keyspace, and [`bitop_compute`] the operation both use.

use super::strings::{clamp_range, fit, make_room, max_string, store, string};
use super::{arg_i64, parse_i64, Ctx, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::keyspace::value::encoding_name;
use crate::keyspace::Keyspace;
use crate::log::RecordRef;
use crate::pubsub::notify::notify;
use crate::pubsub::{GENERIC, NEW, STRING};
use crate::resp::Reply;
use std::collections::BTreeMap;

/// Redis's reply to a bit offset that is not a number in range.
const BAD_OFFSET: Reply = Reply::err("ERR bit offset is not an integer or out of range");
/// Redis's reply to SETBIT's value when it is not 0 or 1.
const BAD_BIT: Reply = Reply::err("ERR bit is not an integer or out of range");
/// Redis's reply to a BITFIELD type that is not `i1`..`i64` or `u1`..`u63`.
const BAD_TYPE: Reply = Reply::err(
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
);

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// A bit offset as Redis reads it: an integer from 0 whose byte is below the server's
/// `proto-max-bulk-len` ([`max_string`]; bits up to 2^32 - 1 by default); with
/// `unit` > 0 (BITFIELD), `#n` means n × `unit`.
fn bit_offset(arg: &[u8], unit: u32) -> Result<u64, Reply> {
    let (by_unit, digits) = match arg.first() {
        Some(b'#') if unit > 0 => (true, &arg[1..]),
        _ => (false, arg),
    };
    let mut n = parse_i64(digits).ok_or(BAD_OFFSET)?;
    if by_unit {
        n = n.checked_mul(unit as i64).ok_or(BAD_OFFSET)?;
    }
    if n < 0 || (n as u64 >> 3) >= max_string() {
        return Err(BAD_OFFSET);
    }
    Ok(n as u64)
}

/// The bit at `pos` of `v` (0 past its end).
#[inline]
fn bit_at(v: &[u8], pos: u64) -> u8 {
    v.get((pos >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (pos & 7))) & 1)
}

/// SETBIT key offset value: sets or clears one bit, answering the bit's old value.
///
/// - A missing key becomes a string of zero bytes long enough for the bit; a shorter
///   string is padded with zero bytes. Its expiry is kept.
/// - Errors, before anything changes: `ERR bit offset is not an integer or out of
///   range` (negative, not an integer, or at 2^32 and beyond), `ERR bit is not an
///   integer or out of range` (a value other than 0 or 1), `WRONGTYPE`, OOM when the
///   growth does not fit under the memory limit.
/// - Setting a bit to the value it already has, within the string, changes nothing.
pub fn setbit(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let offset = match bit_offset(args[2], 0) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let on = match parse_i64(args[3]) {
        Some(b @ (0 | 1)) => b as u8,
        _ => return BAD_BIT,
    };
    let key = args[1];
    let byte = (offset >> 3) as usize;
    let (cur, was) = match string(ks, key, ctx.now_ms) {
        Ok(Some(e)) => (Some(e.value().len()), e.value().get(byte).copied()),
        Ok(None) => (None, None),
        Err(e) => return e,
    };
    let shift = 7 - (offset & 7);
    let old = (was.unwrap_or(0) >> shift) & 1;
    if was.is_some() && old == on {
        unshare(ks, key, ctx);
        return Reply::Int(old as i64);
    }
    let mut w = Writer::new(key, cur, byte + 1);
    if let Err(e) = w.admit(ks, ctx) {
        return e;
    }
    w.bytes
        .insert(byte, was.unwrap_or(0) & !(1 << shift) | (on << shift));
    w.finish(ks, ctx);
    Reply::Int(old as i64)
}

/// A SETBIT or BITFIELD that writes an existing string and changes none of its bytes
/// leaves it `raw`, as Redis does (it makes the string its own, changeable copy before
/// looking at the bits): an `int` or `embstr` string is turned `raw` and that is logged
/// as a `SetRange` of nothing at offset 0, which replays as that encoding and changes
/// no byte (so it is no change of the key for WATCH, client-side caching or the count
/// of changes, `Shard::note_logged`). A string `raw` already logs nothing.
fn unshare(ks: &mut Keyspace, key: &[u8], ctx: &mut Ctx<'_>) {
    let Some(e) = ks.peek(key, ctx.now_ms) else {
        return;
    };
    if encoding_name(e.tag(), e.value()) == "raw" {
        return;
    }
    ks.update(key, ctx.now_ms, |len| len, |_| {});
    ctx.record(&RecordRef::SetRange {
        key,
        offset: 0,
        piece: &[],
    });
}

/// A write of some bytes of a string (SETBIT, BITFIELD): creates or grows the string
/// as needed, writes the bytes, logs the change.
struct Writer<'k> {
    key: &'k [u8],
    /// The string's length before the command (`None`: no key).
    cur: Option<usize>,
    /// Its length after.
    len: usize,
    /// The bytes to write, by offset, with their new values.
    bytes: BTreeMap<usize, u8>,
}

impl<'k> Writer<'k> {
    /// A write of `key` (of length `cur`, `None` if missing) that needs at least
    /// `need` bytes.
    fn new(key: &'k [u8], cur: Option<usize>, need: usize) -> Writer<'k> {
        Writer {
            key,
            cur,
            len: cur.unwrap_or(0).max(need),
            bytes: BTreeMap::new(),
        }
    }

    /// Checks the growth against the memory limit (OOM if it does not fit).
    fn admit(&self, ks: &mut Keyspace, ctx: &mut Ctx<'_>) -> Result<(), Reply> {
        let grow = match self.cur {
            Some(len) => (self.len - len) as u64,
            None => Keyspace::entry_memory(self.key.len(), self.len, false),
        };
        make_room(ks, grow, ctx)
    }

    /// Byte `at` as the command sees it: what it wrote, else the string's (`v`), else 0.
    fn read(&self, v: &[u8], at: usize) -> u8 {
        match self.bytes.get(&at) {
            Some(&b) => b,
            None => v.get(at).copied().unwrap_or(0),
        }
    }

    /// Creates or grows the string, writes the bytes and logs them: nothing at all if
    /// the string exists, keeps its length, and no byte differs.
    fn finish(self, ks: &mut Keyspace, ctx: &mut Ctx<'_>) {
        let key = self.key;
        let grows = self.cur != Some(self.len);
        if !grows {
            let v = ks.peek(key, ctx.now_ms).map_or(&[][..], |e| e.value());
            if self.bytes.iter().all(|(&at, &b)| v[at] == b) {
                unshare(ks, key, ctx);
                return;
            }
        }
        if self.cur.is_none() {
            ks.set(key, b"", None);
            ctx.record(&RecordRef::Set {
                key,
                value: b"",
                expire_at_ms: None,
            });
            notify(ctx, NEW, "new", key);
        }
        let len = self.len;
        ks.update(
            key,
            ctx.now_ms,
            |l| l.max(len),
            |v| {
                for (&at, &b) in &self.bytes {
                    v[at] = b;
                }
            },
        );
        // The bytes written, in runs of neighbours.
        let mut runs: Vec<(usize, Vec<u8>)> = Vec::new();
        for (&at, &b) in &self.bytes {
            match runs.last_mut() {
                Some((start, run)) if *start + run.len() == at => run.push(b),
                _ => runs.push((at, vec![b])),
            }
        }
        for (offset, piece) in &runs {
            ctx.record(&RecordRef::SetRange {
                key,
                offset: *offset as u64,
                piece,
            });
        }
        // A string that grew past every byte written: its new end (zero) says how long.
        let reaches_end = runs.last().is_some_and(|(s, r)| s + r.len() == len);
        if grows && !reaches_end {
            ctx.record(&RecordRef::SetRange {
                key,
                offset: len as u64 - 1,
                piece: &[0],
            });
        }
        notify(ctx, STRING, "setbit", key);
    }
}

/// GETBIT key offset: the bit (0 past the end of the string, or for a missing key).
/// Errors: the offset's (as SETBIT), `WRONGTYPE`.
pub fn getbit(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let offset = match bit_offset(args[2], 0) {
        Ok(o) => o,
        Err(e) => return e,
    };
    match string(ks, args[1], ctx.now_ms) {
        Ok(e) => Reply::Int(e.map_or(0, |e| bit_at(e.value(), offset)) as i64),
        Err(e) => e,
    }
}

/// The bits `start..=end` of a string of `len` bytes, BITCOUNT's and BITPOS's way:
/// indexes in bytes, or in bits with `in_bits`; negative ones count from the end; then
/// clamped to the string. `None`: the range is empty.
fn bit_range(start: i64, end: i64, in_bits: bool, len: usize) -> Option<(u64, u64)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let (s, e) = clamp_range(start, end, total)?;
    Some(if in_bits { (s, e) } else { (s * 8, e * 8 + 7) })
}

/// BIT or BYTE (any case), else a syntax error.
fn unit(arg: &[u8]) -> Result<bool, Reply> {
    if eq(arg, "bit") {
        Ok(true)
    } else if eq(arg, "byte") {
        Ok(false)
    } else {
        Err(SYNTAX_ERR)
    }
}

/// The number of 1 bits of `v`.
fn popcount(v: &[u8]) -> u64 {
    let words = v.chunks_exact(8);
    let rest: u64 = words
        .remainder()
        .iter()
        .map(|b| b.count_ones() as u64)
        .sum();
    words
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")).count_ones() as u64)
        .sum::<u64>()
        + rest
}

/// `BITCOUNT key [start end [BYTE|BIT]]`: the number of 1 bits of the string, or of its
/// range (Redis 7.0's order of checks, which this keeps: a missing key answers 0
/// whatever the other arguments; `WRONGTYPE`; start and end must be integers; both
/// negative with start > end answers 0 before BYTE/BIT is read; a wrong unit, or a
/// start without an end, or more arguments, is `ERR syntax error`). The range is
/// inclusive and clamped as GETRANGE's; an empty one counts 0.
pub fn bitcount(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let v = match string(ks, args[1], ctx.now_ms) {
        Ok(Some(e)) => e.value(),
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let range = match args.len() {
        2 => bit_range(0, -1, false, v.len()),
        4 | 5 => {
            let (start, end) = match (arg_i64(args[2]), arg_i64(args[3])) {
                (Ok(s), Ok(e)) => (s, e),
                (Err(e), _) | (_, Err(e)) => return e,
            };
            if start < 0 && end < 0 && start > end {
                return Reply::Int(0);
            }
            let in_bits = match args.get(4).map(|a| unit(a)) {
                Some(Err(e)) => return e,
                Some(Ok(b)) => b,
                None => false,
            };
            bit_range(start, end, in_bits, v.len())
        }
        _ => return SYNTAX_ERR,
    };
    let Some((first, last)) = range else {
        return Reply::Int(0);
    };
    let (b0, b1) = ((first >> 3) as usize, (last >> 3) as usize);
    let before = v[b0] & !(0xffu8 >> (first & 7));
    let after = ((v[b1] as u16) & (0xffu16 >> ((last & 7) + 1))) as u8;
    let n = popcount(&v[b0..=b1]) - before.count_ones() as u64 - after.count_ones() as u64;
    Reply::Int(n as i64)
}

/// The first bit equal to `want` among bits `first..=last` of `v`.
fn find_bit(v: &[u8], first: u64, last: u64, want: u8) -> Option<u64> {
    let mut pos = first;
    while pos <= last {
        if pos & 7 == 0 && last - pos >= 7 {
            // A whole byte: skip it at once if it has no such bit.
            let at = (pos >> 3) as usize;
            let whole = ((last + 1 - pos) >> 3) as usize;
            let skip = if want == 1 { 0x00 } else { 0xff };
            match v[at..at + whole].iter().position(|&b| b != skip) {
                Some(i) => {
                    let b = if want == 1 { v[at + i] } else { !v[at + i] };
                    return Some(((at + i) as u64) * 8 + b.leading_zeros() as u64);
                }
                None => pos += whole as u64 * 8,
            }
            continue;
        }
        if bit_at(v, pos) == want {
            return Some(pos);
        }
        pos += 1;
    }
    None
}

/// `BITPOS key bit [start [end [BYTE|BIT]]]`: the position of the first bit equal to
/// `bit` (counted from the string's first bit, whatever the range).
///
/// - `bit` not an integer: `ERR value is not an integer or out of range`; neither 0
///   nor 1: `ERR The bit argument must be 1 or 0.` (both before the key is read).
/// - A missing key is an endless run of 0 bits: 0 for bit 0, -1 for bit 1, whatever
///   the other arguments.
/// - Not found: -1; but looking for a 0 without an explicit end answers the first bit
///   after the string (its length × 8), as if the string went on with zeros.
/// - An empty range: -1. Errors after the key: `WRONGTYPE`, start/end not integers,
///   a wrong unit or too many arguments (`ERR syntax error`).
pub fn bitpos(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let want = match arg_i64(args[2]) {
        Ok(b @ (0 | 1)) => b as u8,
        Ok(_) => return Reply::err("ERR The bit argument must be 1 or 0."),
        Err(e) => return e,
    };
    let v = match string(ks, args[1], ctx.now_ms) {
        Ok(Some(e)) => e.value(),
        Ok(None) => return Reply::Int(if want == 1 { -1 } else { 0 }),
        Err(e) => return e,
    };
    let mut end_given = false;
    let range = match args.len() {
        3 => bit_range(0, -1, false, v.len()),
        4..=6 => {
            let start = match arg_i64(args[3]) {
                Ok(s) => s,
                Err(e) => return e,
            };
            let in_bits = match args.get(5).map(|a| unit(a)) {
                Some(Err(e)) => return e,
                Some(Ok(b)) => b,
                None => false,
            };
            let end = match args.get(4) {
                Some(a) => match arg_i64(a) {
                    Ok(e) => {
                        end_given = true;
                        e
                    }
                    Err(e) => return e,
                },
                None => -1,
            };
            bit_range(start, end, in_bits, v.len())
        }
        _ => return SYNTAX_ERR,
    };
    let Some((first, last)) = range else {
        return Reply::Int(-1);
    };
    Reply::Int(match find_bit(v, first, last, want) {
        Some(p) => p as i64,
        None if want == 0 && !end_given => last as i64 + 1,
        None => -1,
    })
}

/// BITOP's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP's operation (`args[1]`) and its check of the sources: `ERR syntax error` for
/// another name, `ERR BITOP NOT must be called with a single source key.`.
pub fn bitop_parse(args: &[&[u8]]) -> Result<BitOp, Reply> {
    let op = match args[1].to_ascii_lowercase().as_slice() {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return Err(SYNTAX_ERR),
    };
    if op == BitOp::Not && args.len() != 4 {
        return Err(Reply::err(
            "ERR BITOP NOT must be called with a single source key.",
        ));
    }
    Ok(op)
}

/// The result of BITOP `op` over `sources` (a missing key is empty): as long as the
/// longest, shorter ones read as zero bytes past their end. Empty if all are empty.
pub fn bitop_compute(op: BitOp, sources: &[&[u8]]) -> Vec<u8> {
    let len = sources.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![0u8; len];
    if len == 0 {
        return out;
    }
    out[..sources[0].len()].copy_from_slice(sources[0]);
    if op == BitOp::Not {
        out.iter_mut().for_each(|b| *b = !*b);
        return out;
    }
    for s in &sources[1..] {
        let (head, tail) = out.split_at_mut(s.len());
        match op {
            BitOp::And => {
                head.iter_mut().zip(s.iter()).for_each(|(o, b)| *o &= b);
                tail.fill(0);
            }
            BitOp::Or => head.iter_mut().zip(s.iter()).for_each(|(o, b)| *o |= b),
            BitOp::Xor => head.iter_mut().zip(s.iter()).for_each(|(o, b)| *o ^= b),
            BitOp::Not => unreachable!("NOT has one source"),
        }
    }
    out
}

/// Stores BITOP's result in `dest` as a string without expiry, whatever it held; an
/// empty result removes it. Answers the result's length, or OOM (nothing changed).
pub fn bitop_store(ks: &mut Keyspace, dest: &[u8], result: &[u8], ctx: &mut Ctx<'_>) -> Reply {
    if result.is_empty() {
        if ks.remove(dest, ctx.now_ms) {
            ctx.record(&RecordRef::Del { key: dest });
            notify(ctx, GENERIC, "del", dest);
        }
        return Reply::Int(0);
    }
    if let Err(e) = fit(ks, dest, result.len(), None, ctx) {
        return e;
    }
    store(ks, dest, result, None, ctx);
    notify(ctx, STRING, "set", dest);
    Reply::Int(result.len() as i64)
}

/// `BITOP AND|OR|XOR|NOT destkey key [key ...]`: stores the bitwise operation of the
/// source strings in `destkey` (see [`bitop_compute`], [`bitop_store`]) and answers
/// its length. A source of another type: `WRONGTYPE` (the first in order, a missing
/// key before it being no error), and nothing changes. This is the command on one
/// keyspace; over several shards the server reads the sources and stores the result
/// as one transaction.
pub fn bitop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let op = match bitop_parse(args) {
        Ok(op) => op,
        Err(e) => return e,
    };
    let mut sources: Vec<&[u8]> = Vec::with_capacity(args.len() - 3);
    for key in &args[3..] {
        match ks.peek(key, ctx.now_ms) {
            Some(e) if !e.is_string() => return WRONGTYPE,
            Some(e) => sources.push(e.value()),
            None => sources.push(&[]),
        }
    }
    let result = bitop_compute(op, &sources);
    bitop_store(ks, args[2], &result, ctx)
}

/// What BITFIELD does when a value does not fit its type.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    IncrBy,
}

/// One BITFIELD operation.
#[derive(Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    /// SET's value, INCRBY's increment.
    value: i64,
    overflow: Overflow,
}

/// A BITFIELD type: `i1`..`i64` or `u1`..`u63` (lower case, as Redis).
fn field_type(arg: &[u8]) -> Result<(bool, u32), Reply> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(BAD_TYPE),
    };
    match parse_i64(&arg[1..]) {
        Some(n) if n >= 1 && n <= if signed { 64 } else { 63 } => Ok((signed, n as u32)),
        _ => Err(BAD_TYPE),
    }
}

/// Parses BITFIELD's operations (Redis's bitfieldGeneric): each error as Redis words
/// it, in the order of the arguments.
fn parse_fields(args: &[&[u8]]) -> Result<Vec<Field>, Reply> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let rest = args.len() - j - 1;
        let name = args[j];
        let op = if eq(name, "get") && rest >= 2 {
            FieldOp::Get
        } else if eq(name, "set") && rest >= 3 {
            FieldOp::Set
        } else if eq(name, "incrby") && rest >= 3 {
            FieldOp::IncrBy
        } else if eq(name, "overflow") && rest >= 1 {
            let how = args[j + 1];
            overflow = if eq(how, "wrap") {
                Overflow::Wrap
            } else if eq(how, "sat") {
                Overflow::Sat
            } else if eq(how, "fail") {
                Overflow::Fail
            } else {
                return Err(Reply::err("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        } else {
            return Err(SYNTAX_ERR);
        };
        let (signed, bits) = field_type(args[j + 1])?;
        let offset = bit_offset(args[j + 2], bits)?;
        let value = if op == FieldOp::Get {
            0
        } else {
            arg_i64(args[j + 3])?
        };
        ops.push(Field {
            op,
            signed,
            bits,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(ops)
}

/// The `bits` bits at `offset`, as an unsigned number (the first bit highest), read
/// through `byte`.
fn get_field(byte: &dyn Fn(usize) -> u8, offset: u64, bits: u32) -> u64 {
    (offset..offset + bits as u64).fold(0u64, |v, pos| {
        (v << 1) | ((byte((pos >> 3) as usize) >> (7 - (pos & 7))) & 1) as u64
    })
}

/// `raw` (the low `bits` bits) as a signed number.
fn sign_extend(raw: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((raw << shift) as i64) >> shift
}

/// `v` wrapped to `bits` bits (two's complement), as BITFIELD's WRAP does.
fn wrap(v: u64, bits: u32, signed: bool) -> i64 {
    let raw = if bits == 64 {
        v
    } else {
        v & ((1u64 << bits) - 1)
    };
    if signed {
        sign_extend(raw, bits)
    } else {
        raw as i64
    }
}

/// Whether `value + incr` passes the bounds of a field of `bits` bits: 1 above, -1
/// below, 0 within. This is Redis's test, word for word in what it answers, with its
/// two's complement arithmetic: for a signed field it also reports "above" in a few
/// cases where a value far below the bounds makes its margin wrap around (SET i37 of
/// -2^63 saturates to the maximum there, so it does here).
fn overflow(value: u64, incr: i64, bits: u32, signed: bool) -> i32 {
    if signed {
        let value = value as i64;
        let max = if bits == 64 {
            i64::MAX
        } else {
            (1i64 << (bits - 1)) - 1
        };
        let min = -max - 1;
        let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
        let minincr = min.wrapping_sub(value);
        if value > max
            || (bits != 64 && incr > maxincr)
            || (value >= 0 && incr > 0 && incr > maxincr)
        {
            1
        } else if value < min
            || (bits != 64 && incr < minincr)
            || (value < 0 && incr < 0 && incr < minincr)
        {
            -1
        } else {
            0
        }
    } else {
        let max = (1u64 << bits) - 1;
        let maxincr = max.wrapping_sub(value) as i64;
        let minincr = 0u64.wrapping_sub(value) as i64;
        if value > max || (incr > 0 && incr > maxincr) {
            1
        } else if incr < 0 && incr < minincr {
            -1
        } else {
            0
        }
    }
}

/// What a SET or INCRBY makes of the field that holds `old` (its raw bits): the
/// value to store, or `None` when it overflows under FAIL (nothing is written).
fn field_result(f: &Field, old: u64) -> Option<i64> {
    // The value before the addition: the field's, or SET's (whose increment is 0).
    let (base, incr): (u64, i64) = match f.op {
        FieldOp::IncrBy if f.signed => (sign_extend(old, f.bits) as u64, f.value),
        FieldOp::IncrBy => (old, f.value),
        _ => (f.value as u64, 0),
    };
    let sum = base.wrapping_add(incr as u64);
    let over = overflow(base, incr, f.bits, f.signed);
    if over == 0 {
        return Some(sum as i64);
    }
    let (min, max) = if f.signed {
        let max = if f.bits == 64 {
            i64::MAX
        } else {
            (1i64 << (f.bits - 1)) - 1
        };
        (-max - 1, max)
    } else {
        (0, ((1u64 << f.bits) - 1) as i64)
    };
    match f.overflow {
        Overflow::Fail => None,
        Overflow::Sat => Some(if over > 0 { max } else { min }),
        Overflow::Wrap => Some(wrap(sum, f.bits, f.signed)),
    }
}

/// `BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset
/// increment] [OVERFLOW WRAP|SAT|FAIL] ...`: reads and writes integers of 1 to 64 bits
/// (`i1`..`i64`, `u1`..`u63`) at any bit offset (`#n`: the n-th field of that width).
/// Answers one element per GET, SET and INCRBY: the value read, the old value, the new
/// value; nil for a SET or INCRBY that overflows under OVERFLOW FAIL (which then writes
/// nothing). OVERFLOW applies to the operations after it (WRAP by default: two's
/// complement wrap; SAT: the type's bound).
///
/// - Every argument is checked before anything is read: `ERR syntax error` (an unknown
///   operation or missing arguments), `ERR Invalid OVERFLOW type specified`, the type's
///   and the offset's errors, `ERR value is not an integer or out of range`.
/// - With only GETs it reads (a missing key reads as zeros); with a write, a missing key
///   is created and a shorter string padded with zeros up to the last bit any write
///   reaches, even if each write fails. `WRONGTYPE` for a key of another type.
pub fn bitfield(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    bitfield_generic(ks, args, ctx, false)
}

/// `BITFIELD_RO key [GET type offset] ...`: BITFIELD's GETs; any other operation is
/// `ERR BITFIELD_RO only supports the GET subcommand` (after the arguments are checked).
pub fn bitfield_ro(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    bitfield_generic(ks, args, ctx, true)
}

fn bitfield_generic(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, ro: bool) -> Reply {
    let ops = match parse_fields(args) {
        Ok(ops) => ops,
        Err(e) => return e,
    };
    let key = args[1];
    let last_written = ops
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| f.offset + f.bits as u64 - 1)
        .max();
    let Some(last) = last_written else {
        let v = match string(ks, key, ctx.now_ms) {
            Ok(e) => e.map_or(&[][..], |e| e.value()),
            Err(e) => return e,
        };
        let byte = |at: usize| v.get(at).copied().unwrap_or(0);
        return Reply::Array(
            ops.iter()
                .map(|f| {
                    let raw = get_field(&byte, f.offset, f.bits);
                    Reply::Int(if f.signed {
                        sign_extend(raw, f.bits)
                    } else {
                        raw as i64
                    })
                })
                .collect(),
        );
    };
    if ro {
        return Reply::err("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let cur = match string(ks, key, ctx.now_ms) {
        Ok(e) => e.map(|e| e.value().len()),
        Err(e) => return e,
    };
    let mut w = Writer::new(key, cur, (last >> 3) as usize + 1);
    if let Err(e) = w.admit(ks, ctx) {
        return e;
    }
    let mut replies = Vec::with_capacity(ops.len());
    {
        let v: &[u8] = ks.peek(key, ctx.now_ms).map_or(&[], |e| e.value());
        for f in &ops {
            let old = get_field(&|at| w.read(v, at), f.offset, f.bits);
            let old_value = if f.signed {
                sign_extend(old, f.bits)
            } else {
                old as i64
            };
            if f.op == FieldOp::Get {
                replies.push(Reply::Int(old_value));
                continue;
            }
            let Some(new) = field_result(f, old) else {
                replies.push(Reply::Nil);
                continue;
            };
            replies.push(Reply::Int(if f.op == FieldOp::Set {
                old_value
            } else {
                new
            }));
            // Each bit of the field, the first highest.
            for i in 0..f.bits as u64 {
                let pos = f.offset + i;
                let bit = ((new as u64) >> (f.bits as u64 - 1 - i)) as u8 & 1;
                let shift = 7 - (pos & 7);
                let at = (pos >> 3) as usize;
                let b = w.read(v, at);
                w.bytes.insert(at, b & !(1 << shift) | (bit << shift));
            }
        }
    }
    w.finish(ks, ctx);
    Reply::Array(replies)
}
