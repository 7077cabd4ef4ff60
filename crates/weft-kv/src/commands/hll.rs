//! The HyperLogLog commands (Redis 7.0's hyperloglog.c): PFADD, PFCOUNT, PFMERGE,
//! PFDEBUG to look inside one, and PFSELFTEST.
//!
//! A HyperLogLog is a string value (`TYPE` says string) in Redis's own representation,
//! byte for byte, so GET and SET of one move it between weft-kv and redis-server, and
//! PFCOUNT gives the same estimate for the same elements:
//!
//! - a 16-byte header: `HYLL`, the encoding (0 dense, 1 sparse), three zero bytes,
//!   and the cached cardinality (8 bytes, little-endian; the top bit of the last byte
//!   set means "not known, count again");
//! - dense: 16384 registers of 6 bits, packed from the lowest bit of each byte
//!   (12288 bytes);
//! - sparse: runs of registers as opcodes: `00xxxxxx` (1 to 64 zero registers),
//!   `01xxxxxx yyyyyyyy` (1 to 16384 zero registers), `1vvvvvxx` (1 to 4 registers of
//!   value 1 to 32). A sparse value turns dense when a register passes 32 or the
//!   value would pass `hll-sparse-max-bytes` (3000 unless CONFIG SET changes it).
//!
//! An element goes to register `h & 16383` of its 64-bit MurmurHash64A (seed
//! `0xadc83b19`), which keeps the length of the run of zero bits after the 14 index
//! bits, plus one, if that is more than it held. The count is Otmar Ertl's estimator
//! from the histogram of the registers, as Redis 7 computes it.
//!
//! A string that is not a HyperLogLog (too short, another magic or encoding, a dense
//! one of the wrong length) answers `WRONGTYPE Key is not a valid HyperLogLog string
//! value.`; a key of another type the usual `WRONGTYPE`; a sparse value whose runs do
//! not cover exactly the 16384 registers `INVALIDOBJ Corrupted HLL object detected`.
//! An error changes nothing.
//!
//! Logging: a write that keeps the value's length (a dense HyperLogLog, or a sparse
//! one changing in place, PFCOUNT storing its count in the header) logs only the
//! bytes from its first to its last change (`SetRange`); one that changes the length
//! logs the whole new value (`Set`, with the key's expiry). PFCOUNT over several keys
//! and PFMERGE whose keys are on several shards run as one transaction over those
//! shards ([`run_server`], with the helpers of `across.rs`).

use super::across::{alone, refused, shards_of, step};
use super::strings::get as get_string;
use super::strings::{fit, store, string};
use super::{Command, Ctx, OOM};
use crate::exec::{Acks, Held, ShardSet};
use crate::keyspace::Keyspace;
use crate::log::RecordRef;
use crate::pubsub::{notify, STRING};
use crate::resp::Reply;
use crate::route::shard_of;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The header's length.
const HDR: usize = 16;
/// The number of registers (2^14).
const REGISTERS: usize = 1 << 14;
/// The index bits of a hash.
const P: u32 = 14;
/// The bits of a hash left after the index.
const Q: usize = 64 - P as usize;
/// A dense value's length.
const DENSE_SIZE: usize = HDR + REGISTERS * 6 / 8;
/// The largest sparse value (`hll-sparse-max-bytes`, 3000 as in Redis).
static SPARSE_MAX_BYTES: AtomicUsize = AtomicUsize::new(3000);

/// The largest sparse value, header included (`hll-sparse-max-bytes`): a write that
/// would make one longer turns it dense.
#[inline]
pub fn sparse_max_bytes() -> usize {
    SPARSE_MAX_BYTES.load(Relaxed)
}

/// Sets `hll-sparse-max-bytes` (CONFIG SET): later writes go by it.
pub fn set_sparse_max_bytes(n: usize) {
    SPARSE_MAX_BYTES.store(n, Relaxed);
}
/// The encodings (header byte 4).
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// The largest register value and run length a sparse VAL opcode holds.
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
/// The longest run a ZERO opcode holds (longer: XZERO).
const ZERO_MAX_LEN: usize = 64;

/// The reply to a string that is not a HyperLogLog.
const NOT_HLL: Reply = Reply::err("WRONGTYPE Key is not a valid HyperLogLog string value.");
/// The reply to a HyperLogLog whose sparse runs are broken.
const CORRUPT: Reply = Reply::err("INVALIDOBJ Corrupted HLL object detected");

/// A broken sparse representation.
struct Corrupt;

/// MurmurHash64A (Austin Appleby's 64-bit hash for 64-bit machines) of `data`, with
/// its 8-byte blocks read little-endian, as Redis does.
fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for b in &mut blocks {
        let mut k = u64::from_le_bytes(b.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= (b as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element goes to and the value it offers (1 to 51).
fn position(element: &[u8]) -> (usize, u8) {
    let h = murmur64a(element, 0xadc8_3b19);
    let index = (h & (REGISTERS as u64 - 1)) as usize;
    let rest = (h >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A new, empty HyperLogLog: sparse, one XZERO run over every register, its cached
/// count 0 (valid).
fn empty() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR + 2);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.extend_from_slice(&[0; 11]);
    push_zeros(&mut v, REGISTERS);
    v
}

/// Whether `v` is a HyperLogLog as Redis checks it (magic, encoding, dense length).
fn valid(v: &[u8]) -> bool {
    v.len() >= HDR
        && &v[..4] == b"HYLL"
        && v[4] <= SPARSE
        && (v[4] != DENSE || v.len() == DENSE_SIZE)
}

/// Register `i` of the dense registers `regs`.
fn dense_get(regs: &[u8], i: usize) -> u8 {
    let bit = i * 6;
    let (b, s) = (bit / 8, bit % 8);
    let lo = (regs[b] >> s) as u16;
    let hi = regs.get(b + 1).map_or(0, |&x| (x as u16) << (8 - s));
    ((lo | hi) & 63) as u8
}

/// Sets register `i` of the dense registers `regs` to `v` (at most 63).
fn dense_put(regs: &mut [u8], i: usize, v: u8) {
    let bit = i * 6;
    let (b, s) = (bit / 8, bit % 8);
    regs[b] &= !(63u8 << s);
    regs[b] |= v << s;
    if s > 2 {
        regs[b + 1] &= !(63u8 >> (8 - s));
        regs[b + 1] |= v >> (8 - s);
    }
}

/// Raises register `i` of `regs` to `v`; whether it was lower.
fn dense_raise(regs: &mut [u8], i: usize, v: u8) -> bool {
    if dense_get(regs, i) < v {
        dense_put(regs, i, v);
        true
    } else {
        false
    }
}

/// Appends opcodes for a run of `len` (1 to 16384) zero registers: one ZERO or XZERO.
fn push_zeros(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        out.push(0x40 | (l >> 8) as u8);
        out.push((l & 0xff) as u8);
    } else {
        out.push((len - 1) as u8);
    }
}

/// A VAL opcode: `len` (1 to 4) registers of value `v` (1 to 32).
fn val_op(v: u8, len: usize) -> u8 {
    0x80 | ((v - 1) << 2) | (len - 1) as u8
}

/// One sparse opcode: its length in bytes, the registers it covers, their value.
fn opcode(s: &[u8], at: usize) -> (usize, usize, u8) {
    let b = s[at];
    if b & 0x80 != 0 {
        (1, (b & 3) as usize + 1, ((b >> 2) & 31) + 1)
    } else if b & 0x40 != 0 {
        let lo = s.get(at + 1).copied().unwrap_or(0) as usize;
        (2, (((b & 0x3f) as usize) << 8 | lo) + 1, 0)
    } else {
        (1, (b & 0x3f) as usize + 1, 0)
    }
}

/// Runs `f(first register, run length, value)` over the runs of the sparse opcodes
/// `s`; `Corrupt` unless they cover exactly the 16384 registers.
fn sparse_runs(s: &[u8], mut f: impl FnMut(usize, usize, u8)) -> Result<(), Corrupt> {
    let (mut at, mut i) = (0, 0);
    while at < s.len() {
        let (oplen, len, v) = opcode(s, at);
        if oplen == 2 && at + 1 >= s.len() || i + len > REGISTERS {
            return Err(Corrupt);
        }
        f(i, len, v);
        i += len;
        at += oplen;
    }
    if i == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

/// Turns the sparse HyperLogLog `v` dense (the header kept but the encoding); a dense
/// one is left as it is.
fn to_dense(v: &mut Vec<u8>) -> Result<(), Corrupt> {
    if v[4] == DENSE {
        return Ok(());
    }
    let mut regs = vec![0u8; DENSE_SIZE - HDR];
    sparse_runs(&v[HDR..], |first, len, val| {
        if val != 0 {
            for i in first..first + len {
                dense_put(&mut regs, i, val);
            }
        }
    })?;
    v.truncate(HDR);
    v[4] = DENSE;
    v.extend_from_slice(&regs);
    Ok(())
}

/// Raises register `index` of the sparse HyperLogLog `v` to `count` as Redis does
/// (the covering opcode split in up to five, then neighbouring VAL opcodes of one
/// value joined), turning it dense when the value passes 32 or the result would pass
/// `max_bytes`. Whether the register changed.
fn sparse_raise(
    v: &mut Vec<u8>,
    index: usize,
    count: u8,
    max_bytes: usize,
) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    // The opcode covering `index`, the one before it, and its first register.
    let (mut at, mut first, mut prev) = (HDR, 0usize, None);
    let (oplen, span, val) = loop {
        if at >= v.len() {
            return Err(Corrupt);
        }
        let (oplen, span, val) = opcode(v, at);
        if index < first + span {
            break (oplen, span, val);
        }
        prev = Some(at);
        at += oplen;
        first += span;
    };
    let is_val = v[at] & 0x80 != 0;
    if is_val && val >= count {
        return Ok(false);
    }
    if span == 1 && (is_val || oplen == 1) {
        v[at] = val_op(count, 1);
    } else {
        let last = first + span - 1;
        let mut seq = Vec::with_capacity(5);
        if is_val {
            if index != first {
                seq.push(val_op(val, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(val, last - index));
            }
        } else {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        }
        if seq.len() > oplen && v.len() + seq.len() - oplen > max_bytes {
            return promote(v, index, count);
        }
        v.splice(at..at + oplen, seq);
    }
    // Join neighbouring VAL opcodes of one value, looking at five opcodes at most
    // from the one before the change.
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let b = v[p];
        if b & 0x80 == 0 {
            p += if b & 0x40 != 0 { 2 } else { 1 };
            continue;
        }
        if p + 1 < v.len() && v[p + 1] & 0x80 != 0 {
            let (_, l1, v1) = opcode(v, p);
            let (_, l2, v2) = opcode(v, p + 1);
            if v1 == v2 && l1 + l2 <= VAL_MAX_LEN {
                v[p + 1] = val_op(v1, l1 + l2);
                v.remove(p);
                continue;
            }
        }
        p += 1;
    }
    Ok(true)
}

/// Turns `v` dense and raises register `index` there.
fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(v)?;
    Ok(dense_raise(&mut v[HDR..], index, count))
}

/// Raises register `index` of the HyperLogLog `v` (either encoding) to `count`.
fn raise(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    if v[4] == DENSE {
        Ok(dense_raise(&mut v[HDR..], index, count))
    } else {
        sparse_raise(v, index, count, sparse_max_bytes())
    }
}

/// Adds `element` to the HyperLogLog `v`; whether a register changed.
fn add(v: &mut Vec<u8>, element: &[u8]) -> Result<bool, Corrupt> {
    let (index, count) = position(element);
    raise(v, index, count)
}

/// Marks the cached count of `v` as not known.
fn invalidate(v: &mut [u8]) {
    v[15] |= 0x80;
}

/// Raises each of `max`'s registers to the value in the HyperLogLog `v`.
fn merge_into(max: &mut [u8], v: &[u8]) -> Result<(), Corrupt> {
    if v[4] == DENSE {
        for (i, m) in max.iter_mut().enumerate() {
            *m = (*m).max(dense_get(&v[HDR..], i));
        }
        return Ok(());
    }
    sparse_runs(&v[HDR..], |first, len, val| {
        for m in &mut max[first..first + len] {
            *m = (*m).max(val);
        }
    })
}

/// Ertl's sigma function (Redis 7's `hllSigma`).
fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

/// Ertl's tau function (Redis 7's `hllTau`).
fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// The estimate from the histogram of register values.
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histo[Q + 1] as f64) / m);
    for j in (1..=Q).rev() {
        z += histo[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histo[0] as f64 / m);
    (0.721_347_520_444_481_7 * m * m / z).round() as u64
}

/// The estimate of the HyperLogLog `v`.
fn count(v: &[u8]) -> Result<u64, Corrupt> {
    let mut histo = [0u32; 64];
    if v[4] == DENSE {
        for i in 0..REGISTERS {
            histo[dense_get(&v[HDR..], i) as usize] += 1;
        }
    } else {
        sparse_runs(&v[HDR..], |_, len, val| histo[val as usize] += len as u32)?;
    }
    Ok(estimate(&histo))
}

/// The estimate of plain registers (one byte each).
fn count_registers(max: &[u8]) -> u64 {
    let mut histo = [0u32; 64];
    for &r in max {
        histo[r as usize] += 1;
    }
    estimate(&histo)
}

/// The HyperLogLog in `key` (a copy; `None` if the key is missing), or the error for a
/// key of another type or a string that is not one.
fn lookup(ks: &mut Keyspace, key: &[u8], now_ms: u64) -> Result<Option<Vec<u8>>, Reply> {
    match string(ks, key, now_ms)? {
        None => Ok(None),
        Some(e) if valid(e.value()) => Ok(Some(e.value().to_vec())),
        Some(_) => Err(NOT_HLL),
    }
}

/// Merges into `max` the HyperLogLogs of `keys` (the missing ones left out), read on
/// their shards, held by a transaction, in the command's order and each checked and
/// merged as it is read, so the error is the first bad key's, as in Redis (WRONGTYPE
/// for another type, the HyperLogLog error for a string that is not one, INVALIDOBJ
/// for a damaged one). Answers whether any of them is dense.
fn merge_held(
    held: &dyn Held,
    keys: &[&[u8]],
    db: u8,
    n: usize,
    max: &mut [u8],
    acks: &mut Acks,
) -> Result<bool, Reply> {
    let mut dense = false;
    for &key in keys {
        let get = [&b"get"[..], key];
        match step(held, shard_of(key, n), get_string, db, &get, acks) {
            Reply::Bulk(v) if valid(&v) => {
                dense |= v[4] == DENSE;
                merge_into(max, &v).map_err(|_| CORRUPT)?;
            }
            Reply::Bulk(_) => return Err(NOT_HLL),
            Reply::Nil => {}
            e => return Err(e),
        }
    }
    Ok(dense)
}

/// Stores `new` in `key`, which held `old` (`None`: missing): only the changed bytes
/// (`SetRange`) when the length is kept, else the whole value (`Set`, the expiry kept).
/// Checks memory first; `Err` (nothing changed) if there is no room.
fn write(
    ks: &mut Keyspace,
    key: &[u8],
    old: Option<&[u8]>,
    new: &[u8],
    ctx: &mut Ctx<'_>,
) -> Result<(), Reply> {
    match old {
        Some(old) if old.len() == new.len() => {
            let Some(from) = old.iter().zip(new).position(|(a, b)| a != b) else {
                return Ok(());
            };
            let to = old.len()
                - old
                    .iter()
                    .rev()
                    .zip(new.iter().rev())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
            let piece = &new[from..to];
            ks.update(
                key,
                ctx.now_ms,
                |len| len,
                |v| v[from..to].copy_from_slice(piece),
            );
            ctx.record(&RecordRef::SetRange {
                key,
                offset: from as u64,
                piece,
            });
            Ok(())
        }
        _ => {
            let at = ks.peek(key, ctx.now_ms).and_then(|e| e.expire_at_ms());
            fit(ks, key, new.len(), at, ctx)?;
            store(ks, key, new, at, ctx);
            Ok(())
        }
    }
}

/// PFADD key [element ...]: adds the elements to the HyperLogLog in `key` (made empty
/// first if the key is missing) and answers 1 if a register changed or the key was
/// made, else 0 (no element: only makes the key). A change (making the key too) marks
/// the cached count as not known and fires `pfadd`. Errors: `WRONGTYPE` (another type, or a string that is
/// not a HyperLogLog), `INVALIDOBJ` (broken sparse runs), OOM; each changes nothing.
pub fn pfadd(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let key = args[1];
    let old = match lookup(ks, key, ctx.now_ms) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let mut v = old.clone().unwrap_or_else(empty);
    let mut changed = old.is_none();
    for element in &args[2..] {
        match add(&mut v, element) {
            Ok(c) => changed |= c,
            Err(Corrupt) => return CORRUPT,
        }
    }
    if !changed {
        return Reply::Int(0);
    }
    invalidate(&mut v);
    if let Err(e) = write(ks, key, old.as_deref(), &v, ctx) {
        return e;
    }
    notify(ctx, STRING, "pfadd", key);
    Reply::Int(1)
}

/// PFCOUNT key [key ...]: the estimated number of distinct elements added to the
/// HyperLogLog in `key` (0 for a missing key); over several keys, of their union (a
/// missing key adds nothing, and no key changes). With one key the count is cached in
/// the header: when it is not known it is counted and stored there (logged as those
/// 8 bytes). Errors as PFADD's (the first key in order), changing nothing.
pub fn pfcount(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if let [_, key] = args {
        let v = match lookup(ks, key, ctx.now_ms) {
            Ok(Some(v)) => v,
            Ok(None) => return Reply::Int(0),
            Err(e) => return e,
        };
        if v[15] & 0x80 == 0 {
            return Reply::Int(u64::from_le_bytes(v[8..16].try_into().expect("8 bytes")) as i64);
        }
        let Ok(n) = count(&v) else {
            return CORRUPT;
        };
        let mut new = v.clone();
        new[8..16].copy_from_slice(&n.to_le_bytes());
        if let Err(e) = write(ks, key, Some(&v), &new, ctx) {
            return e;
        }
        return Reply::Int(n as i64);
    }
    let mut max = vec![0u8; REGISTERS];
    for key in &args[1..] {
        match lookup(ks, key, ctx.now_ms) {
            Ok(Some(v)) => {
                if merge_into(&mut max, &v).is_err() {
                    return CORRUPT;
                }
            }
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    Reply::Int(count_registers(&max) as i64)
}

/// PFMERGE destkey [sourcekey ...]: `destkey` becomes the union of itself and the
/// sources (made empty first if missing; dense if any of them is dense), its cached
/// count marked not known; answers OK and fires `pfadd`. Errors as PFADD's (the first
/// key in order, `destkey` first), changing nothing.
pub fn pfmerge(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for key in &args[1..] {
        match lookup(ks, key, ctx.now_ms) {
            Ok(Some(v)) => {
                dense |= v[4] == DENSE;
                if merge_into(&mut max, &v).is_err() {
                    return CORRUPT;
                }
            }
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    merge_store(ks, args[1], &max, dense, ctx)
}

/// PFMERGE's write: raises the registers of the HyperLogLog in `dest` (made empty if
/// missing; turned dense if `dense`) to `max`.
fn merge_store(
    ks: &mut Keyspace,
    dest: &[u8],
    max: &[u8],
    dense: bool,
    ctx: &mut Ctx<'_>,
) -> Reply {
    let old = match lookup(ks, dest, ctx.now_ms) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let mut v = old.clone().unwrap_or_else(empty);
    if dense && to_dense(&mut v).is_err() {
        return CORRUPT;
    }
    for (i, &m) in max.iter().enumerate() {
        if m != 0 && raise(&mut v, i, m).is_err() {
            return CORRUPT;
        }
    }
    invalidate(&mut v);
    if let Err(e) = write(ks, dest, old.as_deref(), &v, ctx) {
        return e;
    }
    notify(ctx, STRING, "pfadd", dest);
    Reply::OK
}

/// PFMERGE's last step over several shards: `args` = [pfmerge, dest, registers,
/// dense flag].
fn merge_put(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    merge_store(ks, args[1], args[2], args[3] == b"1", ctx)
}

/// PFDEBUG subcommand key: looks inside a HyperLogLog. `GETREG`: its 16384 registers
/// (a sparse one is turned dense first, and stays so); `DECODE`: a sparse one's runs
/// as text (`z:len` a ZERO run, `Z:len` an XZERO run, `v:value,len`), `ERR HLL
/// encoding is not sparse` for a dense one; `ENCODING`: `sparse` or `dense`;
/// `TODENSE`: turns a sparse one dense, answering 1, or 0 if it was dense already.
/// A missing key: `ERR The specified key does not exist`; another subcommand:
/// `ERR Unknown PFDEBUG subcommand '...'`; errors of the value as PFADD's.
pub fn pfdebug(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[2];
    let old = match lookup(ks, key, ctx.now_ms) {
        Ok(Some(v)) => v,
        Ok(None) => return Reply::err("ERR The specified key does not exist"),
        Err(e) => return e,
    };
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"getreg" | b"todense" => {
            let mut v = old.clone();
            if to_dense(&mut v).is_err() {
                return CORRUPT;
            }
            if v.len() != old.len() {
                if ctx.over_memory {
                    return OOM;
                }
                if let Err(e) = write(ks, key, Some(&old), &v, ctx) {
                    return e;
                }
            }
            if sub == b"todense" {
                return Reply::Int((v.len() != old.len()) as i64);
            }
            Reply::Array(
                (0..REGISTERS)
                    .map(|i| Reply::Int(dense_get(&v[HDR..], i) as i64))
                    .collect(),
            )
        }
        b"decode" => {
            if old[4] != SPARSE {
                return Reply::err("ERR HLL encoding is not sparse");
            }
            let mut text = Vec::new();
            let mut at = HDR;
            while at < old.len() {
                let (oplen, len, val) = opcode(&old, at);
                let b = old[at];
                let item = if b & 0x80 != 0 {
                    format!("v:{val},{len} ")
                } else if b & 0x40 != 0 {
                    format!("Z:{len} ")
                } else {
                    format!("z:{len} ")
                };
                text.extend_from_slice(item.as_bytes());
                at += oplen;
            }
            text.pop_if(|b| *b == b' ');
            Reply::Bulk(text)
        }
        b"encoding" => Reply::Simple(if old[4] == DENSE { "dense" } else { "sparse" }.into()),
        _ => Reply::error(format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(args[1])
        )),
    }
}

/// PFSELFTEST: checks this implementation on the spot and answers OK, or a
/// `TESTFAILED` error saying what went wrong: every register of a dense HyperLogLog
/// keeps what is written to it, and the estimate of 1 to 100,000 distinct elements,
/// added to one kept sparse as long as it may and to one dense from the start, is the
/// same for both and within six standard errors (6 x 1.04 / sqrt(16384)).
pub fn selftest() -> Reply {
    let mut regs = vec![0u8; REGISTERS * 6 / 8];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..16 {
        let mut want = vec![0u8; REGISTERS];
        for (i, w) in want.iter_mut().enumerate() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *w = (seed & 63) as u8;
            dense_put(&mut regs, i, *w);
        }
        if let Some(i) = (0..REGISTERS).find(|&i| dense_get(&regs, i) != want[i]) {
            return Reply::error(format!("TESTFAILED Register error at index {i}"));
        }
    }
    let mut sparse = empty();
    let mut dense = empty();
    if to_dense(&mut dense).is_err() {
        return Reply::err("TESTFAILED an empty HyperLogLog could not turn dense");
    }
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint = 1;
    for j in 1..=100_000u64 {
        let element = j.to_le_bytes();
        if add(&mut sparse, &element).is_err() || add(&mut dense, &element).is_err() {
            return Reply::err("TESTFAILED a HyperLogLog was found corrupted");
        }
        if j != checkpoint {
            continue;
        }
        checkpoint *= 10;
        let (Ok(a), Ok(b)) = (count(&sparse), count(&dense)) else {
            return Reply::err("TESTFAILED a HyperLogLog was found corrupted");
        };
        let maxerr = if j < 10 { 1.0 } else { relerr * 6.0 * j as f64 };
        let abserr = (a as f64 - j as f64).abs();
        if a != b || abserr > maxerr {
            return Reply::error(format!(
                "TESTFAILED too big error. card:{j} sparse:{a} dense:{b} abserr:{abserr}"
            ));
        }
    }
    Reply::OK
}

/// PFCOUNT, PFMERGE and PFSELFTEST as the server runs them: on one shard the shard function;
/// with keys on several, the values are read (GET) and, for PFMERGE, the union stored
/// on the destination's shard, under one transaction over those shards. `None` for
/// another command.
pub fn run_server(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    let argv = super::borrow_args(args);
    let f = match cmd.name {
        "pfselftest" => return Some(selftest()),
        "pfcount" => pfcount,
        "pfmerge" => pfmerge,
        _ => return None,
    };
    let shards = shards_of(set, &argv[1..]);
    if let Some(r) = refused(set, cmd, &shards) {
        return Some(r);
    }
    if let [s] = shards[..] {
        return Some(alone(set, s, f, db, &argv, acks));
    }
    let n = set.count();
    Some(set.atomically(&shards, |held| {
        let mut max = vec![0u8; REGISTERS];
        let dense = match merge_held(held, &argv[1..], db, n, &mut max, acks) {
            Ok(dense) => dense,
            Err(e) => return e,
        };
        if cmd.name == "pfcount" {
            return Reply::Int(count_registers(&max) as i64);
        }
        let dest = argv[1];
        let flag: &[u8] = if dense { b"1" } else { b"0" };
        step(
            held,
            shard_of(dest, n),
            merge_put,
            db,
            &[&b"pfmerge"[..], dest, &max, flag],
            acks,
        )
    }))
}

/// What COMMAND DOCS says of the HyperLogLog commands.
pub fn doc(name: &str) -> Option<super::docs::Doc> {
    let (summary, since, complexity) = match name {
        "pfadd" => (
            "Adds elements to a HyperLogLog key, making it if missing",
            "2.8.9",
            "O(1) for each element added",
        ),
        "pfcount" => (
            "The estimated number of distinct elements of HyperLogLog keys (of their union for several)",
            "2.8.9",
            "O(1) for one key, O(N) where N is the number of keys given",
        ),
        "pfmerge" => (
            "Stores the union of HyperLogLog keys in a key",
            "2.8.9",
            "O(N) where N is the number of keys given",
        ),
        "pfselftest" => (
            "Checks the HyperLogLog implementation on the spot",
            "2.8.9",
            "N/A",
        ),
        "pfdebug" => (
            "Looks inside a HyperLogLog: its registers, runs or encoding",
            "2.8.9",
            "O(N)",
        ),
        _ => return None,
    };
    Some(super::docs::Doc {
        summary,
        since,
        group: "hyperloglog",
        complexity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_registers_round_trip() {
        let mut regs = vec![0u8; REGISTERS * 6 / 8];
        for i in 0..REGISTERS {
            dense_put(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8);
        }
    }

    #[test]
    fn empty_is_one_xzero() {
        let v = empty();
        assert_eq!(v.len(), 18);
        assert_eq!(&v[16..], &[0x7f, 0xff]);
        assert_eq!(count(&v).ok(), Some(0));
    }
}
