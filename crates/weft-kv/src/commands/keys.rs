//! The generic key commands (Redis 7.0's db.c, expire.c and object.c): DEL, UNLINK,
//! EXISTS, TOUCH, the EXPIRE family, TTL and its variants, PERSIST, TYPE, OBJECT. They
//! take a key of any type as it is (an expiry is the key's, whatever its value).
//!
//! Logging: a removed key is logged as `Del`, a changed expiry as `Expire`; an
//! expiry time already passed removes the key (logged as `Del`). Nothing is logged
//! when nothing changed.

use super::{arg_i64, invalid_expire, Ctx};
use crate::keyspace::{access, Keyspace};
use crate::log::RecordRef;
use crate::pubsub::{notify, GENERIC};
use crate::resp::Reply;

/// DEL key... (and UNLINK): the number of keys removed. (Split by shard; the parts'
/// counts are summed.)
pub fn del(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let mut n = 0;
    for key in &args[1..] {
        if ks.remove(key, ctx.now_ms) {
            ctx.record(&RecordRef::Del { key });
            notify(ctx, GENERIC, "del", key);
            n += 1;
        }
    }
    Reply::Int(n)
}

/// EXISTS key... (and TOUCH): the number of keys that exist; a key named twice is
/// counted twice (as Redis does). TOUCH counts as an access of each key (its idle
/// time starts again, its LFU counter may grow); EXISTS does not.
pub fn exists(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let touch = args[0].eq_ignore_ascii_case(b"touch");
    Reply::Int(
        args[1..]
            .iter()
            .filter(|k| {
                if touch {
                    ks.contains(k, ctx.now_ms)
                } else {
                    ks.contains_quiet(k, ctx.now_ms)
                }
            })
            .count() as i64,
    )
}

const NX: u8 = 1;
const XX: u8 = 2;
const GT: u8 = 4;
const LT: u8 = 8;

/// The NX/XX/GT/LT options of the EXPIRE family (Redis's
/// `parseExtendedExpireArgumentsOrReply`, with its error texts).
fn expire_flags(args: &[&[u8]]) -> Result<u8, Reply> {
    let mut f = 0;
    for opt in &args[3..] {
        f |= match opt.to_ascii_lowercase().as_slice() {
            b"nx" => NX,
            b"xx" => XX,
            b"gt" => GT,
            b"lt" => LT,
            _ => {
                return Err(Reply::error(format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                )))
            }
        };
    }
    if f & NX != 0 && f & (XX | GT | LT) != 0 {
        return Err(Reply::err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f & GT != 0 && f & LT != 0 {
        return Err(Reply::err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

/// The EXPIRE family (Redis's `expireGenericCommand`): `basetime` is now for the
/// relative forms and 0 for the absolute ones; `secs` says the unit.
///
/// - Not an integer: `ERR value is not an integer or out of range`; overflow of the
///   unit conversion or of the addition: `ERR invalid expire time in '<cmd>' command`.
/// - Missing key: 0. NX: only if the key has no expiry; XX: only if it has one; GT:
///   only if the new time is later (no expiry counts as infinite, so GT never
///   applies to it); LT: only if earlier (no expiry counts as infinite). Otherwise 0.
/// - A time at or before now deletes the key (logged `Del`), answering 1.
fn expire_generic(
    ks: &mut Keyspace,
    args: &[&[u8]],
    ctx: &mut Ctx<'_>,
    basetime: i64,
    secs: bool,
) -> Reply {
    let f = match expire_flags(args) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let mut when = match arg_i64(args[2]) {
        Ok(w) => w,
        Err(e) => return e,
    };
    if secs {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return invalid_expire(args);
        }
        when *= 1000;
    }
    if when > i64::MAX - basetime {
        return invalid_expire(args);
    }
    when += basetime;
    let key = &args[1];
    let Some(e) = ks.get(key, ctx.now_ms) else {
        return Reply::Int(0);
    };
    let cur = e.expire_at_ms().map(|t| t as i64);
    if (f & NX != 0 && cur.is_some())
        || (f & XX != 0 && cur.is_none())
        || (f & GT != 0 && cur.is_none_or(|c| when <= c))
        || (f & LT != 0 && cur.is_some_and(|c| when >= c))
    {
        return Reply::Int(0);
    }
    if when <= ctx.now_ms as i64 {
        ks.remove(key, ctx.now_ms);
        ctx.record(&RecordRef::Del { key });
        notify(ctx, GENERIC, "del", key);
    } else {
        if cur != Some(when) {
            ks.set_expire(key, Some(when as u64), ctx.now_ms);
            ctx.record(&RecordRef::Expire {
                key,
                at_ms: Some(when as u64),
            });
        }
        notify(ctx, GENERIC, "expire", key);
    }
    Reply::Int(1)
}

/// EXPIRE key seconds [NX|XX|GT|LT]: see `expire_generic`.
pub fn expire(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let now = ctx.now_ms as i64;
    expire_generic(ks, args, ctx, now, true)
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]: see `expire_generic`.
pub fn pexpire(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let now = ctx.now_ms as i64;
    expire_generic(ks, args, ctx, now, false)
}

/// EXPIREAT key unix-seconds [NX|XX|GT|LT]: see `expire_generic`.
pub fn expireat(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    expire_generic(ks, args, ctx, 0, true)
}

/// PEXPIREAT key unix-ms [NX|XX|GT|LT]: see `expire_generic`.
pub fn pexpireat(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    expire_generic(ks, args, ctx, 0, false)
}

/// TTL and its variants: -2 for a missing key, -1 for no expiry, otherwise the time
/// left (`abs` false, never below 0) or the absolute time (`abs` true), in ms or in
/// seconds rounded to the nearest (Redis's `(ms + 500) / 1000`).
fn ttl_generic(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, ms: bool, abs: bool) -> Reply {
    // Not an access of the key (as in Redis).
    let Some(e) = ks.get_quiet(args[1], ctx.now_ms) else {
        return Reply::Int(-2);
    };
    let Some(at) = e.expire_at_ms() else {
        return Reply::Int(-1);
    };
    let t = if abs {
        at as i64
    } else {
        (at as i64 - ctx.now_ms as i64).max(0)
    };
    // Rounded without overflow: a PXAT of i64::MAX is 9223372036854776 seconds.
    Reply::Int(if ms {
        t
    } else {
        t / 1000 + (t % 1000 >= 500) as i64
    })
}

/// TTL key: seconds left, rounded; -1 no expiry; -2 missing.
pub fn ttl(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    ttl_generic(ks, args, ctx, false, false)
}

/// PTTL key: milliseconds left; -1 no expiry; -2 missing.
pub fn pttl(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    ttl_generic(ks, args, ctx, true, false)
}

/// EXPIRETIME key: the absolute expiry in Unix seconds (rounded); -1; -2.
pub fn expiretime(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    ttl_generic(ks, args, ctx, false, true)
}

/// PEXPIRETIME key: the absolute expiry in Unix ms; -1; -2.
pub fn pexpiretime(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    ttl_generic(ks, args, ctx, true, true)
}

/// PERSIST key: 1 if an expiry was removed (logged `Expire None`), 0 if the key is
/// missing or has none.
pub fn persist(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = &args[1];
    match ks.get(key, ctx.now_ms) {
        Some(e) if e.expire_at_ms().is_some() => {
            ks.set_expire(key, None, ctx.now_ms);
            ctx.record(&RecordRef::Expire { key, at_ms: None });
            notify(ctx, GENERIC, "persist", key);
            Reply::Int(1)
        }
        _ => Reply::Int(0),
    }
}

/// TYPE key: the value's type (`string`, `hash`), or `none` for a missing key.
pub fn type_(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    Reply::Simple(
        ks.get_quiet(args[1], ctx.now_ms)
            .map_or("none", |e| e.kind().name())
            .into(),
    )
}

/// OBJECT ENCODING|FREQ|IDLETIME|REFCOUNT|HELP (Redis 7.0's object.c, for what
/// weft-kv keeps):
///
/// - ENCODING key: the value's encoding (`int`, `embstr`, `raw`, `listpack`,
///   `hashtable`, `quicklist`, `intset`); nil for a missing key.
/// - REFCOUNT key: 1 (values are never shared). IDLETIME key: the seconds since the
///   key's last access, under a policy other than an LFU one (else Redis's error);
///   FREQ key: its access counter, decayed to now, under an LFU policy (else Redis's
///   error). Each nil for a missing key. OBJECT itself is not an access.
/// - Any other subcommand, or the wrong number of arguments: Redis's `ERR unknown
///   subcommand or wrong number of arguments for '...'. Try OBJECT HELP.`
pub fn object(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" && args.len() == 2 {
        return Reply::Array(
            [
                "OBJECT <subcommand> <key>: what weft-kv keeps about a key's value.",
                "ENCODING <key>",
                "    How the value is held: int, embstr or raw for a string; listpack or",
                "    hashtable for a hash; listpack or quicklist for a list; intset, listpack",
                "    or hashtable for a set.",
                "FREQ <key>",
                "    The key's logarithmic access counter (under an LFU maxmemory-policy).",
                "IDLETIME <key>",
                "    The seconds since the key was last read or written (under a",
                "    maxmemory-policy other than an LFU one).",
                "REFCOUNT <key>",
                "    1: values are never shared.",
                "HELP",
                "    This help.",
            ]
            .into_iter()
            .map(|l| Reply::Simple(l.into()))
            .collect(),
        );
    }
    if args.len() != 3 || !matches!(&sub[..], b"encoding" | b"freq" | b"idletime" | b"refcount") {
        return super::sub_syntax_error(args);
    }
    let Some(e) = ks.get_quiet(args[2], ctx.now_ms) else {
        return Reply::Nil;
    };
    let lfu = crate::keyspace::access::policy().lfu();
    match &sub[..] {
        b"encoding" => Reply::Bulk(
            crate::keyspace::value::encoding_name(e.tag(), e.value())
                .as_bytes()
                .to_vec(),
        ),
        b"refcount" => Reply::Int(1),
        b"idletime" if !lfu => Reply::Int((access::idle_ms(e.access()) / 1000) as i64),
        b"idletime" => Reply::err(
            "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
        b"freq" if lfu => Reply::Int(access::frequency(e.access()) as i64),
        _ => Reply::err(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
    }
}
