//! The string commands (Redis 7.0's t_string.c): GET, SET and its variants, MGET,
//! MSET, the counters, APPEND, STRLEN, GETRANGE, SETRANGE.
//!
//! Each function takes the whole argument list (arity already checked by the server)
//! and, when it changes a key, logs it (`ctx.record`): a `Set` with the whole value and
//! the absolute expiry, or a `Del`; APPEND and SETRANGE on an existing string log only
//! their piece (`Append`, `SetRange`: docs/kv-types.md). Nothing is logged when nothing
//! changed. A relative expiry (EX, PX, SETEX...) is turned into an absolute time
//! against `ctx.now_ms`; a time already passed deletes the key.
//!
//! A key of another type: the commands that read the value answer `WRONGTYPE` and
//! change nothing; SET, SETNX, SETEX, PSETEX and MSET replace it (SET with GET answers
//! `WRONGTYPE` instead); MGET answers nil for it.
//!
//! Under a memory limit, every command that may grow memory (Redis's DENYOOM ones:
//! SET and its variants, MSET, the counters, APPEND, SETRANGE) works out, before it
//! changes anything, how many bytes it would add (`ctx.room` says how many it may),
//! from its arguments and the key's present size; one that would pass the limit
//! first reclaims expired keys of its shard, and answers Redis's OOM error, changing
//! nothing, if that is not enough. So no single command, however large its argument
//! or its offset, takes memory past the limit.

use super::{
    arg_i64, float80, invalid_expire, Ctx, MAX_STRING, NOT_FLOAT, OOM, SYNTAX_ERR, TOO_LONG,
    WRONGTYPE,
};
use crate::keyspace::Entry;
use crate::keyspace::Keyspace;
use crate::log::{RecordRef, StrEnc};
use crate::pubsub::{notify, GENERIC, NEW, STRING};
use crate::resp::Reply;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The longest string APPEND, SETRANGE, SETBIT and RESTORE make ([`max_string`]).
static MAX_BULK: AtomicU64 = AtomicU64::new(MAX_STRING);

/// The longest string APPEND, SETRANGE, SETBIT (and BITFIELD) and RESTORE make: the
/// server's `proto-max-bulk-len` (`--max-bulk`), as in Redis; [`MAX_STRING`] (512 MB)
/// until a server sets another.
#[inline]
pub fn max_string() -> u64 {
    MAX_BULK.load(Relaxed)
}

/// Sets the longest string [`max_string`] names (the server at start, from
/// `--max-bulk`), at most [`super::MAX_ARG`] (what the log holds).
pub fn set_max_string(n: u64) {
    MAX_BULK.store(n.min(super::MAX_ARG as u64), Relaxed);
}

/// The live string in `key` (`None` if there is none), or `WRONGTYPE` if the key holds
/// another type. (An expired key is removed, as by `Keyspace::get`.)
#[inline]
pub(super) fn string<'a>(
    ks: &'a mut Keyspace,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if !e.is_string() => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// The most expired keys one write reclaims before it is refused for memory: a
/// bound on how long it holds its shard (about a millisecond).
const RECLAIM_MAX_KEYS: usize = 8192;

/// Admits a write that adds `grow` bytes to its shard's memory: `Ok` if that fits
/// under the limit, after reclaiming expired keys of the shard if it did not; else
/// Redis's OOM error, and the caller must change nothing.
pub(super) fn make_room(ks: &mut Keyspace, grow: u64, ctx: &mut Ctx<'_>) -> Result<(), Reply> {
    if grow <= ctx.room {
        return Ok(());
    }
    ctx.room += ks.reclaim(ctx.now_ms, grow - ctx.room, RECLAIM_MAX_KEYS);
    if grow <= ctx.room {
        Ok(())
    } else {
        Err(OOM)
    }
}

/// The bytes that storing a value of `len` bytes in `key` (with an expiry or not)
/// adds to the shard's memory: its new size less its present one, 0 if it shrinks.
fn growth(ks: &Keyspace, key: &[u8], len: usize, expires: bool, now_ms: u64) -> u64 {
    Keyspace::entry_memory(key.len(), len, expires).saturating_sub(ks.memory_of(key, now_ms))
}

/// Admits storing a value of `len` bytes in `key` expiring at `at` (as [`store`]
/// would) under the memory limit: see [`make_room`]. A time already passed removes
/// the key, which never grows memory.
pub(super) fn fit(
    ks: &mut Keyspace,
    key: &[u8],
    len: usize,
    at: Option<u64>,
    ctx: &mut Ctx<'_>,
) -> Result<(), Reply> {
    if ctx.room == u64::MAX || matches!(at, Some(t) if t <= ctx.now_ms) {
        return Ok(());
    }
    let grow = growth(ks, key, len, at.is_some(), ctx.now_ms);
    make_room(ks, grow, ctx)
}

/// Stores `value` in `key` with the absolute expiry `at` and logs it; an expiry
/// already passed removes the key instead (logged as `Del` if the key existed).
pub(super) fn store(
    ks: &mut Keyspace,
    key: &[u8],
    value: &[u8],
    at: Option<u64>,
    ctx: &mut Ctx<'_>,
) {
    store_as(ks, key, value, at, None, ctx)
}

/// [`store`] of a string made as `enc` says (`None`: as SET makes it), logged as
/// `SetStr` then.
fn store_as(
    ks: &mut Keyspace,
    key: &[u8],
    value: &[u8],
    at: Option<u64>,
    enc: Option<StrEnc>,
    ctx: &mut Ctx<'_>,
) {
    if matches!(at, Some(t) if t <= ctx.now_ms) {
        if ks.remove(key, ctx.now_ms) {
            ctx.record(&RecordRef::Del { key });
        }
        return;
    }
    ctx.record(&match enc {
        None => RecordRef::Set {
            key,
            value,
            expire_at_ms: at,
        },
        Some(enc) => RecordRef::SetStr {
            key,
            value,
            expire_at_ms: at,
            enc,
        },
    });
    let new = crate::pubsub::notify::enabled(NEW) && !ks.contains(key, ctx.now_ms);
    ks.set_string(key, value, at, enc);
    if new {
        notify(ctx, NEW, "new", key);
    }
}

/// GET key: the value, or nil.
pub fn get(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match string(ks, args[1], ctx.now_ms) {
        Ok(Some(e)) => ctx.bulk(e.value()),
        Ok(None) => Reply::Nil,
        Err(e) => e,
    }
}

/// The options of SET and GETEX (Redis's `parseExtendedStringArgumentsOrReply`).
#[derive(Default)]
struct Opts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// EX/PX/EXAT/PXAT: (argument, in seconds, absolute).
    expire: Option<(&'a [u8], bool, bool)>,
}

/// Parses options from `args[from..]`; `set` says SET's options (NX, XX, GET,
/// KEEPTTL) are allowed, otherwise GETEX's (PERSIST). As in Redis, a repeated
/// EX/PX/... overrides the earlier one, while mixing different kinds, or NX with
/// XX, is a syntax error.
fn parse_opts<'a>(args: &[&'a [u8]], from: usize, set: bool) -> Result<Opts<'a>, Reply> {
    let mut o = Opts::default();
    let mut j = from;
    while j < args.len() {
        let opt = args[j];
        let next = args.get(j + 1).copied();
        let is = |s: &str| opt.eq_ignore_ascii_case(s.as_bytes());
        let exp_kind = o.expire.map(|(_, secs, abs)| (secs, abs));
        if is("nx") && !o.xx && set {
            o.nx = true;
        } else if is("xx") && !o.nx && set {
            o.xx = true;
        } else if is("get") && set {
            o.get = true;
        } else if is("keepttl") && !o.persist && o.expire.is_none() && set {
            o.keepttl = true;
        } else if is("persist") && !set && o.expire.is_none() && !o.keepttl {
            o.persist = true;
        } else if let (Some(kind), Some(n)) = (
            match () {
                _ if is("ex") => Some((true, false)),
                _ if is("px") => Some((false, false)),
                _ if is("exat") => Some((true, true)),
                _ if is("pxat") => Some((false, true)),
                _ => None,
            },
            next,
        ) {
            if o.keepttl || o.persist || exp_kind.is_some_and(|k| k != kind) {
                return Err(SYNTAX_ERR);
            }
            o.expire = Some((n, kind.0, kind.1));
            j += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    Ok(o)
}

/// Turns an EX/PX/EXAT/PXAT argument into an absolute Unix time in ms (Redis's
/// `getExpireMillisecondsOrReply`): not an integer → `ERR value is not an integer or
/// out of range`; ≤ 0 or overflowing → `ERR invalid expire time in '<cmd>' command`.
fn expire_at(args: &[&[u8]], arg: &[u8], secs: bool, abs: bool, now_ms: u64) -> Result<u64, Reply> {
    let v = arg_i64(arg)?;
    if v <= 0 || (secs && v > i64::MAX / 1000) {
        return Err(invalid_expire(args));
    }
    let ms = if secs { v * 1000 } else { v };
    let when = if abs {
        Some(ms)
    } else {
        ms.checked_add(now_ms as i64)
    };
    match when {
        Some(w) if w > 0 => Ok(w as u64),
        _ => Err(invalid_expire(args)),
    }
}

/// SET key value [NX|XX] \[GET\] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
///
/// - Without KEEPTTL the key's old expiry is dropped; with EX/PX/EXAT/PXAT the new
///   one is set (a time already passed removes the key, answering as if set).
/// - NX on an existing key or XX on a missing one: nil and nothing changes.
/// - GET answers the old value (or nil) instead of OK, also when NX/XX stopped it.
/// - Errors (checked before anything changes): syntax, expire time not an integer,
///   ≤ 0 or overflowing (`ERR invalid expire time in 'set' command`).
pub fn set(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let o = match parse_opts(args, 3, true) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let at = match o.expire {
        Some((arg, secs, abs)) => match expire_at(args, arg, secs, abs, ctx.now_ms) {
            Ok(at) => Some(at),
            Err(e) => return e,
        },
        None => None,
    };
    let key = &args[1];
    let old = ks.get(key, ctx.now_ms);
    if o.get && old.is_some_and(|e| !e.is_string()) {
        return WRONGTYPE;
    }
    let found = old.is_some();
    let old_expire = old.and_then(|e| e.expire_at_ms());
    let reply = if o.get {
        old.map_or(Reply::Nil, |e| Reply::bulk(e.value()))
    } else {
        Reply::OK
    };
    if (o.nx && found) || (o.xx && !found) {
        return if o.get { reply } else { Reply::Nil };
    }
    let at = if o.keepttl { old_expire } else { at };
    if let Err(e) = fit(ks, key, args[2].len(), at, ctx) {
        return e;
    }
    store(ks, key, args[2], at, ctx);
    notify(ctx, STRING, "set", key);
    if at.is_some() && !o.keepttl {
        notify(ctx, GENERIC, "expire", key);
    }
    reply
}

/// SETNX key value: 1 if the key was set, 0 (nothing changes) if it existed.
pub fn setnx(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    if ks.contains(args[1], ctx.now_ms) {
        return Reply::Int(0);
    }
    if let Err(e) = fit(ks, args[1], args[2].len(), None, ctx) {
        return e;
    }
    store(ks, args[1], args[2], None, ctx);
    notify(ctx, STRING, "set", args[1]);
    Reply::Int(1)
}

fn setex_generic(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, secs: bool) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    match expire_at(args, args[2], secs, false, ctx.now_ms) {
        Ok(at) => {
            if let Err(e) = fit(ks, args[1], args[3].len(), Some(at), ctx) {
                return e;
            }
            store(ks, args[1], args[3], Some(at), ctx);
            notify(ctx, STRING, "set", args[1]);
            notify(ctx, GENERIC, "expire", args[1]);
            Reply::OK
        }
        Err(e) => e,
    }
}

/// SETEX key seconds value: SET with EX. `seconds` ≤ 0: `ERR invalid expire time in
/// 'setex' command`.
pub fn setex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    setex_generic(ks, args, ctx, true)
}

/// PSETEX key milliseconds value: SET with PX.
pub fn psetex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    setex_generic(ks, args, ctx, false)
}

/// GETSET key value: the old value (or nil); the key now holds `value` with no expiry.
pub fn getset(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let reply = match string(ks, args[1], ctx.now_ms) {
        Ok(old) => old.map_or(Reply::Nil, |e| Reply::bulk(e.value())),
        Err(e) => return e,
    };
    if let Err(e) = fit(ks, args[1], args[2].len(), None, ctx) {
        return e;
    }
    store(ks, args[1], args[2], None, ctx);
    notify(ctx, STRING, "set", args[1]);
    reply
}

/// GETDEL key: the value (or nil), and the key is removed.
pub fn getdel(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = &args[1];
    let e = match string(ks, key, ctx.now_ms) {
        Ok(Some(e)) => e,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let reply = Reply::bulk(e.value());
    ks.remove(key, ctx.now_ms);
    ctx.record(&RecordRef::Del { key });
    notify(ctx, GENERIC, "del", key);
    reply
}

/// GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST]: the value (or nil), then the expiry
/// is changed as asked.
///
/// As Redis 7.0: a missing key answers nil before the expire time is validated; an
/// EXAT/PXAT time already passed removes the key (after answering its value).
pub fn getex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let o = match parse_opts(args, 2, false) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let key = &args[1];
    let e = match string(ks, key, ctx.now_ms) {
        Ok(Some(e)) => e,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let reply = Reply::bulk(e.value());
    let had_expire = e.expire_at_ms().is_some();
    if let Some((arg, secs, abs)) = o.expire {
        match expire_at(args, arg, secs, abs, ctx.now_ms) {
            Ok(at) if at <= ctx.now_ms => {
                ks.remove(key, ctx.now_ms);
                ctx.record(&RecordRef::Del { key });
                notify(ctx, GENERIC, "del", key);
            }
            Ok(at) => {
                ks.set_expire(key, Some(at), ctx.now_ms);
                ctx.record(&RecordRef::Expire {
                    key,
                    at_ms: Some(at),
                });
                notify(ctx, GENERIC, "expire", key);
            }
            Err(e) => return e,
        }
    } else if o.persist && had_expire {
        ks.set_expire(key, None, ctx.now_ms);
        ctx.record(&RecordRef::Expire { key, at_ms: None });
        notify(ctx, GENERIC, "persist", key);
    }
    reply
}

/// MGET key...: one element per key, the value or nil. (Split by shard: the server
/// puts the parts back in the keys' order.)
pub fn mget(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    Reply::Array(
        args[1..]
            .iter()
            .map(|k| {
                ks.get(k, ctx.now_ms)
                    .filter(|e| e.is_string())
                    .map_or(Reply::Nil, |e| Reply::bulk(e.value()))
            })
            .collect(),
    )
}

/// MSET key value [key value...]: sets each key (no expiry). An odd number of
/// arguments after the name: `ERR wrong number of arguments for 'mset' command`.
/// A key given twice ends with its last value.
pub fn mset(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if args.len().is_multiple_of(2) {
        return Reply::err("ERR wrong number of arguments for 'mset' command");
    }
    if ctx.over_memory {
        return OOM;
    }
    if ctx.room != u64::MAX {
        // What each key adds, 0 for one that shrinks: never less than what they add
        // together, whatever order and repeats.
        let now = ctx.now_ms;
        let grow = args[1..]
            .chunks_exact(2)
            .map(|kv| growth(ks, kv[0], kv[1].len(), false, now))
            .sum();
        if let Err(e) = make_room(ks, grow, ctx) {
            return e;
        }
    }
    for kv in args[1..].chunks_exact(2) {
        store(ks, kv[0], kv[1], None, ctx);
        notify(ctx, STRING, "set", kv[0]);
    }
    Reply::OK
}

/// INCR/DECR/INCRBY/DECRBY's common part: adds `by` to the integer in `key` (0 if
/// missing), keeping the expiry. A value that is not an integer (Redis's string2ll:
/// no spaces, no `+`, no leading zeros, at most 20 bytes): `ERR value is not an
/// integer or out of range`; overflow: `ERR increment or decrement would overflow`.
fn incr_by(ks: &mut Keyspace, key: &[u8], by: i64, ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let (old, at) = match string(ks, key, ctx.now_ms) {
        Ok(Some(e)) => match super::parse_i64(e.value()) {
            Some(v) => (v, e.expire_at_ms()),
            None => return super::NOT_INT,
        },
        Ok(None) => (0, None),
        Err(e) => return e,
    };
    let Some(new) = old.checked_add(by) else {
        return Reply::err("ERR increment or decrement would overflow");
    };
    let text = new.to_string();
    if let Err(e) = fit(ks, key, text.len(), at, ctx) {
        return e;
    }
    store(ks, key, text.as_bytes(), at, ctx);
    notify(ctx, STRING, "incrby", key);
    Reply::Int(new)
}

/// INCR key: see `incr_by`.
pub fn incr(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    incr_by(ks, args[1], 1, ctx)
}

/// DECR key: see `incr_by`.
pub fn decr(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    incr_by(ks, args[1], -1, ctx)
}

/// INCRBY key increment: see `incr_by`; a bad increment is `ERR value is not an
/// integer or out of range`.
pub fn incrby(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match arg_i64(args[2]) {
        Ok(by) => incr_by(ks, args[1], by, ctx),
        Err(e) => e,
    }
}

/// DECRBY key decrement: see `incr_by`; a decrement of i64::MIN cannot be negated:
/// `ERR decrement would overflow` (Redis 7.0's words).
pub fn decrby(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match arg_i64(args[2]) {
        Ok(i64::MIN) => Reply::err("ERR decrement would overflow"),
        Ok(by) => incr_by(ks, args[1], -by, ctx),
        Err(e) => e,
    }
}

/// INCRBYFLOAT key increment: adds a float, keeping the expiry; answers the new value
/// as a bulk string, computed as Redis computes it (extended precision, printed with
/// 17 decimals and trimmed: `-84` + `0.1` is `-83.9`; see [`super::float80`]).
///
/// The value and the increment are read as C's `strtold` reads them (decimal or
/// hexadecimal such as `0x1p3`, `inf`): a text that is not such a number, has a
/// leading space, is 5120 bytes or longer, or overflows or underflows is `ERR value is
/// not a valid float`; an infinite result (or NaN) is `ERR increment would produce NaN
/// or Infinity`. The stored text is the answered text, a string made from a float:
/// `embstr` (`raw` past 44 bytes) even when the text is an integer, as in Redis.
pub fn incrbyfloat(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let key = &args[1];
    let (old, at) = match string(ks, key, ctx.now_ms) {
        Ok(Some(e)) => match float80::parse(e.value()) {
            Ok(v) => (v, e.expire_at_ms()),
            Err(_) => return NOT_FLOAT,
        },
        Ok(None) => (float80::F80::Zero(false), None),
        Err(e) => return e,
    };
    let Ok(by) = float80::parse(args[2]) else {
        return NOT_FLOAT;
    };
    let new = match float80::add(old, by) {
        Some(v) if !v.is_inf() => v,
        _ => return Reply::err("ERR increment would produce NaN or Infinity"),
    };
    let text = float80::format(new).into_bytes();
    if let Err(e) = fit(ks, key, text.len(), at, ctx) {
        return e;
    }
    store_as(ks, key, &text, at, Some(StrEnc::Float), ctx);
    notify(ctx, STRING, "incrbyfloat", key);
    Reply::Bulk(text)
}

/// APPEND key value: appends (creating the key if missing, keeping the expiry);
/// answers the new length. Longer than the server's `proto-max-bulk-len` ([`max_string`],
/// 512 MB by default): `ERR string exceeds maximum allowed size (proto-max-bulk-len)`
/// and nothing changes. Appending to a missing key creates
/// it even with an empty value (as Redis does). Logged: the piece appended (`Append`),
/// or the new key's `Set`.
pub fn append(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let (key, more) = (&args[1], &args[2]);
    let len = match string(ks, key, ctx.now_ms) {
        Ok(None) => {
            if let Err(e) = fit(ks, key, more.len(), None, ctx) {
                return e;
            }
            store(ks, key, more, None, ctx);
            notify(ctx, STRING, "append", key);
            return Reply::Int(more.len() as i64);
        }
        Ok(Some(e)) => e.value().len() as u64,
        Err(e) => return e,
    };
    if len + more.len() as u64 > max_string() {
        return TOO_LONG;
    }
    if let Err(e) = make_room(ks, more.len() as u64, ctx) {
        return e;
    }
    let new_len = ks.update(
        key,
        ctx.now_ms,
        |len| len + more.len(),
        |v| {
            let at = v.len() - more.len();
            v[at..].copy_from_slice(more);
            v.len()
        },
    );
    if !more.is_empty() {
        ctx.record(&RecordRef::Append { key, piece: more });
    }
    notify(ctx, STRING, "append", key);
    Reply::Int(new_len.unwrap_or(0) as i64)
}

/// STRLEN key: the value's length, 0 if missing.
pub fn strlen(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match string(ks, args[1], ctx.now_ms) {
        Ok(e) => Reply::Int(e.map_or(0, |e| e.value().len() as i64)),
        Err(e) => e,
    }
}

/// GETRANGE key start end (and SUBSTR): the bytes from `start` to `end` inclusive;
/// negative indexes count from the end; out of range indexes are clamped; an empty
/// range (or missing key) is the empty string. Both negative with start > end is
/// empty (Redis 7.0's rule).
pub fn getrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (start, end) = match (arg_i64(args[2]), arg_i64(args[3])) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let e = match string(ks, args[1], ctx.now_ms) {
        Ok(Some(e)) => e,
        Ok(None) => return Reply::Bulk(Vec::new()),
        Err(e) => return e,
    };
    let v = e.value();
    if start < 0 && end < 0 && start > end {
        return Reply::Bulk(Vec::new());
    }
    match clamp_range(start, end, v.len() as i64) {
        Some((start, end)) => Reply::bulk(&v[start as usize..=end as usize]),
        None => Reply::Bulk(Vec::new()),
    }
}

/// The inclusive range `start..=end` of a sequence of `len` items, as Redis reads one
/// (GETRANGE, BITCOUNT, BITPOS): negative indexes count from the end, then both are
/// clamped to the sequence. `None`: the range is empty.
pub(super) fn clamp_range(start: i64, end: i64, len: i64) -> Option<(u64, u64)> {
    let start = if start < 0 { start + len } else { start }.max(0);
    let end = if end < 0 { end + len } else { end }.max(0).min(len - 1);
    (start <= end).then_some((start as u64, end as u64))
}

/// SETRANGE key offset value: overwrites from `offset`, padding with zero bytes;
/// answers the new length. Logged as the piece and its offset (`SetRange`), after an
/// empty string's `Set` for a new key. A negative offset: `ERR offset is out of range`;
/// longer than the server's `proto-max-bulk-len` ([`max_string`], 512 MB by default):
/// `ERR string exceeds maximum allowed size (proto-max-bulk-len)`. An empty
/// value changes nothing (on a missing key: 0 and no key created).
pub fn setrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let offset = match arg_i64(args[2]) {
        Ok(o) if o < 0 => return Reply::err("ERR offset is out of range"),
        Ok(o) => o as u64,
        Err(e) => return e,
    };
    let (key, val) = (&args[1], &args[3]);
    let cur = match string(ks, key, ctx.now_ms) {
        Ok(e) => e.map(|e| e.value().len() as u64),
        Err(e) => return e,
    };
    if val.is_empty() {
        return Reply::Int(cur.unwrap_or(0) as i64);
    }
    if offset + val.len() as u64 > max_string() {
        return TOO_LONG;
    }
    let end = offset as usize + val.len();
    // The zero bytes up to `offset` count as much as the value: this is where a
    // small command could ask for a large allocation.
    let grow = match cur {
        Some(len) => (end as u64).saturating_sub(len),
        None => Keyspace::entry_memory(key.len(), end, false),
    };
    if let Err(e) = make_room(ks, grow, ctx) {
        return e;
    }
    if cur.is_none() {
        // A new key: logged as an empty string, then the piece (zero-padded on replay).
        ks.set(key, b"", None);
        ctx.record(&RecordRef::Set {
            key,
            value: b"",
            expire_at_ms: None,
        });
        notify(ctx, NEW, "new", key);
    }
    let new_len = ks
        .update(
            key,
            ctx.now_ms,
            |len| len.max(end),
            |v| {
                v[offset as usize..end].copy_from_slice(val);
                v.len()
            },
        )
        .unwrap_or(0);
    ctx.record(&RecordRef::SetRange {
        key,
        offset,
        piece: val,
    });
    notify(ctx, STRING, "setrange", key);
    Reply::Int(new_len as i64)
}
