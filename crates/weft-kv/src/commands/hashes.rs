//! The hash commands (Redis 7.0's t_hash.c, for behaviour): HSET, HSETNX, HMSET, HGET,
//! HMGET, HDEL, HLEN, HSTRLEN, HEXISTS, HKEYS, HVALS, HGETALL, HINCRBY, HINCRBYFLOAT,
//! HRANDFIELD, HSCAN.
//!
//! Each function checks its arguments first, then the key's type (`WRONGTYPE` for a
//! key of another type: nothing changes), then, for a write that may grow memory, what
//! it would add against `ctx.room` (Redis's OOM error, nothing changed, if it does not
//! fit), then changes and logs. A hash that does not exist yet is logged as its whole
//! state once the command made it (a `Hash` record: the fields it was given); a change
//! of an existing hash as the change (`HSet` of the fields set, `HDel` of the fields
//! given); nothing when nothing changed (docs/kv-types.md). A hash that loses its last
//! field is removed. Commands keep the key's expiry.
//!
//! Reply shapes: HGETALL is a map (RESP3) or a flat array (RESP2); HRANDFIELD with
//! WITHVALUES is an array of [field, value] pairs in RESP3, flat in RESP2.

use super::strings::make_room;
use super::{arg_i64, float80, Ctx, NOT_FLOAT, NOT_INT, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::keyspace::hash::{self, FIELD_OVERHEAD};
use crate::keyspace::{glob_match, Entry, Keyspace, Type};
use crate::log::{encode_split, Items, RecordRef};
use crate::pubsub::{notify, GENERIC, HASH, NEW};
use crate::resp::Reply;

/// The live hash in `key` (`None` if there is none), or `WRONGTYPE` if the key holds
/// another type.
#[inline]
fn hash_of<'a>(ks: &'a mut Keyspace, key: &[u8], now_ms: u64) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if e.kind() != Type::Hash => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// Sets the fields and values of `pairs` (field, value, ...) in the hash `key`,
/// creating it if missing: the number of fields that were new. Checks the type and
/// the memory first; logs.
fn write_fields(
    ks: &mut Keyspace,
    key: &[u8],
    pairs: &[&[u8]],
    ctx: &mut Ctx<'_>,
) -> Result<i64, Reply> {
    let exists = hash_of(ks, key, ctx.now_ms)?.is_some();
    if ctx.room != u64::MAX {
        // At most what the pairs take as new fields of a table (more than packed).
        let grow: u64 = pairs
            .chunks_exact(2)
            .map(|p| (p[0].len() + p[1].len()) as u64 + FIELD_OVERHEAD)
            .sum::<u64>()
            + if exists {
                0
            } else {
                Keyspace::entry_memory(key.len(), 0, false)
            };
        make_room(ks, grow, ctx)?;
    }
    let now = ctx.now_ms;
    if exists {
        let new = ks
            .modify(key, now, |e| {
                pairs
                    .chunks_exact(2)
                    .filter(|p| hash::set(e, p[0], p[1]))
                    .count()
            })
            .expect("the hash is there");
        encode_split(
            ctx.db,
            pairs,
            2,
            |items| RecordRef::HSet { key, items },
            ctx.log,
        );
        return Ok(new as i64);
    }
    let e = hash::new_entry(key, Items::Slices(pairs), None, 0);
    let new = hash::len(&e);
    ks.put(e);
    let e = ks.peek(key, now).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
    notify(ctx, NEW, "new", key);
    Ok(new as i64)
}

fn wrong_args(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// HSET key field value [field value ...]: sets the fields (creating the hash),
/// answers how many were new. An odd number of field and value arguments: `ERR wrong
/// number of arguments for 'hset' command`.
pub fn hset(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if !args.len().is_multiple_of(2) {
        return wrong_args("hset");
    }
    if ctx.over_memory {
        return OOM;
    }
    let r = write_fields(ks, args[1], &args[2..], ctx).map_or_else(|e| e, Reply::Int);
    if !r.is_error() {
        notify(ctx, HASH, "hset", args[1]);
    }
    r
}

/// HMSET key field value [field value ...]: HSET answering `OK` (the arity error
/// names 'hmset').
pub fn hmset(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if !args.len().is_multiple_of(2) {
        return wrong_args("hmset");
    }
    if ctx.over_memory {
        return OOM;
    }
    let r = write_fields(ks, args[1], &args[2..], ctx).map_or_else(|e| e, |_| Reply::OK);
    if !r.is_error() {
        notify(ctx, HASH, "hset", args[1]);
    }
    r
}

/// HSETNX key field value: sets the field only if the hash lacks it (creating the
/// hash): 1 if set, 0 if the field was there (nothing changes).
pub fn hsetnx(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(Some(e)) if hash::get(e, args[2]).is_some() => Reply::Int(0),
        Ok(_) => match write_fields(ks, args[1], &args[2..4], ctx) {
            Ok(_) => {
                notify(ctx, HASH, "hset", args[1]);
                Reply::Int(1)
            }
            Err(e) => e,
        },
    }
}

/// HGET key field: the value, or nil (missing field or key).
pub fn hget(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => match e.and_then(|e| hash::get(e, args[2])) {
            Some(v) => ctx.bulk(v),
            None => Reply::Nil,
        },
    }
}

/// HMGET key field [field ...]: one element per field, its value or nil (all nil for
/// a missing key).
pub fn hmget(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Array(
            args[2..]
                .iter()
                .map(|f| {
                    e.and_then(|e| hash::get(e, f))
                        .map_or(Reply::Nil, Reply::bulk)
                })
                .collect(),
        ),
    }
}

/// HDEL key field [field ...]: removes the fields, answers how many were there; the
/// hash is removed with its last field. Logged (`HDel` of the fields given) only if
/// one was removed.
pub fn hdel(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    match hash_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(_)) => {}
    }
    let fields = &args[2..];
    let n = ks
        .modify(key, ctx.now_ms, |e| {
            fields.iter().filter(|f| hash::remove(e, f)).count()
        })
        .expect("the hash is there");
    if n > 0 {
        encode_split(
            ctx.db,
            fields,
            1,
            |items| RecordRef::HDel { key, items },
            ctx.log,
        );
        notify(ctx, HASH, "hdel", key);
        if ks.peek(key, ctx.now_ms).is_none() {
            notify(ctx, GENERIC, "del", key);
        }
    }
    Reply::Int(n as i64)
}

/// HLEN key: the number of fields, 0 for a missing key.
pub fn hlen(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.map_or(0, hash::len) as i64),
    }
}

/// HSTRLEN key field: the length of the field's value, 0 if missing.
pub fn hstrlen(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.and_then(|e| hash::get(e, args[2])).map_or(0, |v| v.len()) as i64),
    }
}

/// HEXISTS key field: 1 if the hash has the field, else 0.
pub fn hexists(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.and_then(|e| hash::get(e, args[2])).is_some() as i64),
    }
}

/// Every field (`keys`), value (`vals`) or both of a hash, in its order; empty for a
/// missing key.
fn all(ks: &mut Keyspace, args: &[&[u8]], ctx: &Ctx<'_>, keys: bool, vals: bool) -> Reply {
    let e = match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let it = e.into_iter().flat_map(hash::iter);
    match (keys, vals) {
        (true, true) => Reply::Map(it.map(|(f, v)| (Reply::bulk(f), Reply::bulk(v))).collect()),
        (true, false) => Reply::Array(it.map(|(f, _)| Reply::bulk(f)).collect()),
        _ => Reply::Array(it.map(|(_, v)| Reply::bulk(v)).collect()),
    }
}

/// HKEYS key: the fields (empty array for a missing key).
pub fn hkeys(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    all(ks, args, ctx, true, false)
}

/// HVALS key: the values.
pub fn hvals(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    all(ks, args, ctx, false, true)
}

/// HGETALL key: the fields and values, as a map in RESP3 (a flat array in RESP2).
pub fn hgetall(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    all(ks, args, ctx, true, true)
}

/// HINCRBY key field increment: adds the integer to the field's value (0 if the field
/// or the hash is missing: both are created), answers the new value. The increment
/// not an integer: `ERR value is not an integer or out of range`; the value not an
/// integer (Redis's string2ll): `ERR hash value is not an integer`; overflow: `ERR
/// increment or decrement would overflow`. Logged as the field's new value.
pub fn hincrby(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let by = match arg_i64(args[3]) {
        Ok(by) => by,
        Err(e) => return e,
    };
    if ctx.over_memory {
        return OOM;
    }
    let old = match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => match e.and_then(|e| hash::get(e, args[2])) {
            None => 0,
            Some(v) => match super::parse_i64(v) {
                Some(n) => n,
                None => return Reply::err("ERR hash value is not an integer"),
            },
        },
    };
    let Some(new) = old.checked_add(by) else {
        return Reply::err("ERR increment or decrement would overflow");
    };
    let mut buf = itoa::Buffer::new();
    let text = buf.format(new).as_bytes();
    match write_fields(ks, args[1], &[args[2], text], ctx) {
        Ok(_) => {
            notify(ctx, HASH, "hincrby", args[1]);
            Reply::Int(new)
        }
        Err(e) => e,
    }
}

/// HINCRBYFLOAT key field increment: adds in extended precision, as INCRBYFLOAT does
/// (`super::float80`), answers the new value's text, which the field then holds. The
/// increment not a float (C's strtold, as Redis reads it): `ERR value is not a valid
/// float`; an infinite increment: `ERR value is NaN or Infinity`; the value not a
/// float: `ERR hash value is not a float`; an infinite sum: `ERR increment would
/// produce NaN or Infinity`.
pub fn hincrbyfloat(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Ok(by) = float80::parse(args[3]) else {
        return NOT_FLOAT;
    };
    if by.is_inf() {
        return Reply::err("ERR value is NaN or Infinity");
    }
    if ctx.over_memory {
        return OOM;
    }
    let old = match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => match e.and_then(|e| hash::get(e, args[2])) {
            None => float80::F80::Zero(false),
            Some(v) => match float80::parse(v) {
                Ok(v) => v,
                Err(_) => return Reply::err("ERR hash value is not a float"),
            },
        },
    };
    let new = match float80::add(old, by) {
        Some(v) if !v.is_inf() => v,
        _ => return Reply::err("ERR increment would produce NaN or Infinity"),
    };
    let text = float80::format(new).into_bytes();
    match write_fields(ks, args[1], &[args[2], &text], ctx) {
        Ok(_) => {
            notify(ctx, HASH, "hincrbyfloat", args[1]);
            Reply::Bulk(text)
        }
        Err(e) => e,
    }
}

/// A random number: the keyspace's per-thread generator.
pub(super) use crate::keyspace::access::random;

/// A random field and value of a hash entry of `len` fields, each field equally likely.
fn random_pair(e: &Entry, len: usize) -> (&[u8], &[u8]) {
    hash::random(e, len, random)
}

/// The most fields HRANDFIELD (members SRANDMEMBER) answers with a negative count
/// (they may repeat, so the reply's size is the count's, whatever the hash's): a bound
/// on one reply.
pub(super) const MAX_RANDOM_REPEATS: u64 = 1 << 20;

/// HRANDFIELD's and ZRANDMEMBER's arguments after the key: the count, if given, and
/// whether `word` (WITHVALUES, WITHSCORES) follows it. Errors as [`hrandfield`] says.
pub(super) fn random_count(args: &[&[u8]], word: &[u8]) -> Result<(Option<i64>, bool), Reply> {
    if args.len() < 3 {
        return Ok((None, false));
    }
    let l = match arg_i64(args[2])? {
        i64::MIN => {
            return Err(Reply::err(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ))
        }
        l => l,
    };
    if args.len() > 4 || (args.len() == 4 && !args[3].eq_ignore_ascii_case(word)) {
        return Err(SYNTAX_ERR);
    }
    let with = args.len() == 4;
    if with && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(Reply::err("ERR value is out of range"));
    }
    Ok((Some(l), with))
}

/// `HRANDFIELD key [count [WITHVALUES]]` (Redis 7.0's hrandfieldCommand):
///
/// - No count: a random field, or nil for a missing key.
/// - A count: an array (empty for a missing key or a count of 0). A positive count
///   answers that many distinct fields (all of them, in the hash's order, if it has
///   no more); a negative one answers |count| fields that may repeat, in random order.
///   WITHVALUES pairs each with its value ([field, value] arrays in RESP3, flat in
///   RESP2).
/// - The count not an integer: `ERR value is not an integer or out of range`; below
///   -(2^63 - 1): `ERR value is out of range, value must between -9223372036854775807
///   and 9223372036854775807`; with WITHVALUES beyond ±(2^62 - 1): `ERR value is out of
///   range`; another word than WITHVALUES, or more arguments: `ERR syntax error`.
/// - weft-kv refuses a negative count beyond -1048576 on an existing hash (the reply
///   would be that large, whatever the hash's size) with `ERR count is too large ...`.
pub fn hrandfield(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (count, with_values) = match random_count(args, b"withvalues") {
        Ok(c) => c,
        Err(e) => return e,
    };
    let e = match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let Some(l) = count else {
        return match e {
            None => Reply::Nil,
            Some(e) => Reply::bulk(random_pair(e, hash::len(e)).0),
        };
    };
    let Some(e) = e else {
        return Reply::Array(vec![]);
    };
    let size = hash::len(e);
    let reply = |picked: Vec<(&[u8], &[u8])>| {
        if with_values {
            Reply::Pairs(
                picked
                    .into_iter()
                    .map(|(f, v)| (Reply::bulk(f), Reply::bulk(v)))
                    .collect(),
            )
        } else {
            Reply::Array(picked.into_iter().map(|(f, _)| Reply::bulk(f)).collect())
        }
    };
    if l < 0 {
        if l.unsigned_abs() > MAX_RANDOM_REPEATS {
            return Reply::error(format!(
                "ERR count is too large: weft-kv answers at most {MAX_RANDOM_REPEATS} random fields at once"
            ));
        }
        return reply(
            (0..l.unsigned_abs())
                .map(|_| random_pair(e, size))
                .collect(),
        );
    }
    let count = l as u64;
    if count >= size as u64 {
        return reply(hash::iter(e).collect());
    }
    let count = count as usize;
    if e.tag() == crate::keyspace::tag::HASH_TABLE && count * 3 <= size {
        // Few of many: random picks until `count` distinct ones.
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut picked = Vec::with_capacity(count);
        while picked.len() < count {
            let p = random_pair(e, size);
            if seen.insert(p.0) {
                picked.push(p);
            }
        }
        return reply(picked);
    }
    // A partial shuffle of all of them.
    let mut all: Vec<(&[u8], &[u8])> = hash::iter(e).collect();
    for i in 0..count {
        let j = i + (random() % (all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(count);
    reply(all)
}

/// The options of HSCAN and SSCAN after the cursor, `[MATCH pattern] [COUNT count]`:
/// the pattern (`None` for none, or `*`) and the count (10 if not given). COUNT not an
/// integer: `ERR value is not an integer or out of range`; below 1, an unknown option
/// or one without its value: `ERR syntax error`.
pub(super) fn scan_options<'a>(opts: &[&'a [u8]]) -> Result<(Option<&'a [u8]>, usize), Reply> {
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    for pair in opts.chunks(2) {
        let [name, v] = pair else {
            return Err(SYNTAX_ERR);
        };
        if name.eq_ignore_ascii_case(b"match") {
            pattern = Some(*v).filter(|p| *p != b"*");
        } else if name.eq_ignore_ascii_case(b"count") {
            match super::parse_i64(v) {
                Some(n) if n >= 1 => count = n as usize,
                Some(_) => return Err(SYNTAX_ERR),
                None => return Err(NOT_INT),
            }
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok((pattern, count))
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]: [next cursor, [field, value, ...]]
/// of the fields matching the pattern. A packed hash answers all of its fields at
/// once with cursor 0 (as Redis's listpacks do); a big one about COUNT (10) hashes of
/// fields per call, with the keyspace SCAN's guarantee. Errors: a cursor that is not
/// a number, `ERR invalid cursor` (before the key is looked at); then WRONGTYPE; a
/// missing key answers an empty scan whatever the options; COUNT not an integer,
/// `ERR value is not an integer or out of range`; below 1, or an unknown option,
/// `ERR syntax error`.
pub fn hscan(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Some(cursor) = crate::exec::parse_cursor(args[2]) else {
        return Reply::err("ERR invalid cursor");
    };
    let empty = || Reply::Array(vec![Reply::bulk(b"0"), Reply::Array(vec![])]);
    let e = match hash_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return empty(),
        Ok(Some(e)) => e,
    };
    let (pattern, count) = match scan_options(&args[3..]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut items = Vec::new();
    let next = hash::scan(e, cursor, count, |f, v| {
        if pattern.is_none_or(|p| glob_match(p, f)) {
            items.push(Reply::bulk(f));
            items.push(Reply::bulk(v));
        }
    });
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(items),
    ])
}
