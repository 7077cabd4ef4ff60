//! A key's value moved or copied whole, whatever its type: DUMP and RESTORE, and the
//! parts of RENAME, RENAMENX and COPY (Redis 7.0's db.c and cluster.c).
//!
//! A value travels as its **full-state records**: the records `Keyspace::walk` writes
//! for compaction and replay applies ([`Keyspace::state_records`]). So every type that
//! can be compacted and replayed can be renamed, copied, dumped and restored, with no
//! code of its own here.
//!
//! - [`payload_of`] writes a value's records, each for database 0 and the empty key,
//!   between a version and a checksum: DUMP's reply (weft-kv's own format, not
//!   Redis's RDB; docs/kv.md).
//! - [`value_of`] checks a payload and replays its records, under the key they are to
//!   have, into a scratch keyspace: the entry it leaves is the value, built before
//!   anything real changes. A payload that is not whole, or whose records do not make
//!   one key, is refused.
//! - [`install`] puts such an entry in place of whatever its key holds and logs its
//!   full state (invariant 6 of docs/kv-types.md: the key is created).
//!
//! Keyspace events, as Redis's: `rename_from` and `rename_to`, `copy_to`, `restore`
//! (and `new` for a key created; `del` for RESTORE REPLACE of a time already passed).
//!
//! RENAME and COPY over keys of one shard and one database run as one function here
//! ([`rename`], [`renamenx`], [`copy`]); over two shards (or two databases) the server
//! runs [`dump`] on the source, [`put_value`] on the destination, and for RENAME
//! [`rename_source`] on the source, as one transaction (`commands/across.rs`).

use super::strings::{make_room, max_string};
use super::{arg_i64, Ctx, OOM, SYNTAX_ERR};
use crate::keyspace::{Entry, Keyspace};
use crate::log::{self, RecordRef};
use crate::pubsub::{notify, GENERIC, NEW};
use crate::resp::Reply;

/// The first byte of a payload: `W`, for weft-kv.
const MAGIC: u8 = b'W';
/// The payload format's version.
const VERSION: u8 = 1;

/// Redis's reply to a payload that is not a whole one of this format.
pub const BAD_PAYLOAD: Reply = Reply::err("ERR DUMP payload version or checksum are wrong");
/// Redis's reply to a whole payload whose contents make no value.
const BAD_DATA: Reply = Reply::err("ERR Bad data format");

/// Rewrites the record `frame` (one whole frame of a keyed record) for database `db`
/// and key `key`, appending it to `out`. Every record about one key starts with its
/// kind, its database and the key (`log/record.rs`); `None` if `frame` does not.
fn rekey(frame: &[u8], db: u8, key: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let payload = frame.get(log::record::FRAME_HEADER..)?;
    let kind = *payload.first()?;
    let old_len = u32::from_le_bytes(payload.get(2..6)?.try_into().ok()?) as usize;
    let rest = payload.get(6 + old_len..)?;
    if kind < 10 {
        return None;
    }
    let start = out.len();
    out.extend_from_slice(&[0; log::record::FRAME_HEADER]);
    out.extend_from_slice(&[kind, db]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(rest);
    let body = &out[start + log::record::FRAME_HEADER..];
    let (len, crc) = (body.len() as u32, crc32c::crc32c(body));
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// The payload of `e`'s value (with its expiry): `W`, the version, the full-state
/// records for database 0 and the empty key, and the CRC32C of all that.
pub fn payload_of(e: &Entry) -> Vec<u8> {
    let mut out = vec![MAGIC, VERSION];
    let mut frame = Vec::new();
    Keyspace::state_records(e, |r| {
        frame.clear();
        log::encode_in(0, &r, &mut frame);
        rekey(&frame, 0, b"", &mut out).expect("a state record is about its key");
    });
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The value a payload holds, as an entry of `key` (its memory as the keyspace
/// counts it beside): its records replayed into a scratch keyspace, then its expiry
/// set to `expire` if given (`Some(None)`: none). `BAD_PAYLOAD` for a payload of
/// another format or version, or one changed since it was made; `ERR Bad data format`
/// for records that do not make one live key.
pub fn value_of(
    payload: &[u8],
    key: &[u8],
    expire: Option<Option<u64>>,
) -> Result<(Entry, u64), Reply> {
    let Some(body_len) = payload.len().checked_sub(4).filter(|&n| n >= 2) else {
        return Err(BAD_PAYLOAD);
    };
    let (body, crc) = payload.split_at(body_len);
    if body[0] != MAGIC || body[1] != VERSION || crc32c::crc32c(body).to_le_bytes() != crc[..] {
        return Err(BAD_PAYLOAD);
    }
    let mut scratch = Keyspace::new();
    let mut frames = &body[2..];
    let mut buf = Vec::new();
    while !frames.is_empty() {
        let Ok((0, rec, n)) = log::decode_frame(frames) else {
            return Err(BAD_DATA);
        };
        if rec.key() != Some(b"") {
            return Err(BAD_DATA);
        }
        // A change that would grow a string past the server's `proto-max-bulk-len` (a
        // payload weft-kv never makes, but one a client could send): refused before
        // anything is allocated.
        if let RecordRef::SetRange { offset, piece, .. } = rec {
            if offset.saturating_add(piece.len() as u64) > max_string() {
                return Err(BAD_DATA);
            }
        }
        buf.clear();
        rekey(&frames[..n], 0, key, &mut buf).ok_or(BAD_DATA)?;
        let (_, rec, _) = log::decode_frame(&buf).map_err(|_| BAD_DATA)?;
        scratch.apply(rec, 0);
        frames = &frames[n..];
    }
    if let Some(at_ms) = expire {
        scratch.apply(RecordRef::Expire { key, at_ms }, 0);
    }
    let memory = scratch.used_memory();
    // At time 0 nothing has expired: the entry is taken whatever its expiry.
    match scratch.take(key, 0) {
        Some(e) if scratch.is_empty() => Ok((e, memory)),
        _ => Err(BAD_DATA),
    }
}

/// Puts `e` in place of whatever its key holds in `ks`, logging its full state (and
/// the `new` event if the key was not there).
pub fn install(ks: &mut Keyspace, e: Entry, ctx: &mut Ctx<'_>) {
    Keyspace::state_records(&e, |r| ctx.record(&r));
    let new = notify::enabled(NEW) && !ks.contains(e.key(), ctx.now_ms);
    let key = new.then(|| e.key().to_vec());
    ks.put(e);
    if let Some(key) = key {
        notify::notify(ctx, NEW, "new", &key);
    }
}

/// DUMP key: the key's value in weft-kv's own payload format (its type and contents,
/// its expiry too, which RESTORE replaces by its own), or nil for a missing key.
pub fn dump(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match ks.get(args[1], ctx.now_ms) {
        Some(e) => Reply::Bulk(payload_of(e)),
        None => Reply::Nil,
    }
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`:
/// creates `key` with the value DUMP gave (of any type), expiring in `ttl` ms (0:
/// never; with ABSTTL, `ttl` is a Unix time in ms). IDLETIME (seconds) sets the key's
/// last access that long ago, under a policy other than an LFU one; FREQ sets its
/// access counter, under an LFU policy (`keyspace/access.rs`); else they are checked
/// and ignored, as in Redis.
///
/// Errors, in Redis's order, each changing nothing: a wrong option (`ERR syntax
/// error`; IDLETIME with FREQ is one), `ERR Invalid IDLETIME value, must be >= 0`,
/// `ERR Invalid FREQ value, must be >= 0 and <= 255`; without REPLACE, an existing key
/// (`BUSYKEY Target key name already exists.`); a ttl that is not an integer, or
/// negative (`ERR Invalid TTL value, must be >= 0`); a payload weft-kv did not make,
/// or one changed since (`ERR DUMP payload version or checksum are wrong`); OOM.
/// A time already passed answers OK and creates nothing (with REPLACE, the old key is
/// removed).
pub fn restore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let (mut replace, mut abs) = (false, false);
    let (mut idle, mut freq) = (None, None);
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        let opt = args[j].to_ascii_lowercase();
        match opt.as_slice() {
            b"replace" => replace = true,
            b"absttl" => abs = true,
            b"idletime" if more && freq.is_none() => {
                match arg_i64(args[j + 1]) {
                    Ok(n) if n < 0 => {
                        return Reply::err("ERR Invalid IDLETIME value, must be >= 0")
                    }
                    Ok(n) => idle = Some(n as u64),
                    Err(e) => return e,
                }
                j += 1;
            }
            b"freq" if more && idle.is_none() => {
                match arg_i64(args[j + 1]) {
                    Ok(n) if !(0..=255).contains(&n) => {
                        return Reply::err("ERR Invalid FREQ value, must be >= 0 and <= 255")
                    }
                    Ok(n) => freq = Some(n as u32),
                    Err(e) => return e,
                }
                j += 1;
            }
            _ => return SYNTAX_ERR,
        }
        j += 1;
    }
    let key = args[1];
    if !replace && ks.contains(key, ctx.now_ms) {
        return Reply::err("BUSYKEY Target key name already exists.");
    }
    let ttl = match arg_i64(args[2]) {
        Ok(t) if t < 0 => return Reply::err("ERR Invalid TTL value, must be >= 0"),
        Ok(t) => t as u64,
        Err(e) => return e,
    };
    let at = match ttl {
        0 => None,
        t if abs => Some(t),
        t => Some(t.saturating_add(ctx.now_ms)),
    };
    let (mut e, memory) = match value_of(args[3], key, Some(at)) {
        Ok(v) => v,
        Err(e) => return e,
    };
    // Redis encodes a restored string by its bytes alone ("1000" is `int` again);
    // RENAME, COPY and MOVE keep how it was made.
    e.forget_string_origin();
    if let Some(bits) = crate::keyspace::access::restored(idle, freq) {
        e.set_access(bits);
    }
    if at.is_some_and(|t| t <= ctx.now_ms) {
        if replace && ks.remove(key, ctx.now_ms) {
            ctx.record(&RecordRef::Del { key });
            notify::notify(ctx, GENERIC, "del", key);
        }
        return Reply::OK;
    }
    let grow = memory.saturating_sub(ks.memory_of(key, ctx.now_ms));
    if let Err(e) = make_room(ks, grow, ctx) {
        return e;
    }
    install(ks, e, ctx);
    notify::notify(ctx, GENERIC, "restore", key);
    Reply::OK
}

/// The destination's part of RENAME, RENAMENX and COPY over two shards or databases
/// (`args`: the command's name, the destination key, the source's payload, `replace`
/// or `nx`, and `oom` to check the memory limit): 1 when the value was put in place,
/// 0 under `nx` when the key exists (nothing changes).
pub fn put_value(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, payload) = (args[1], args[2]);
    let oom = args.get(4).is_some_and(|a| *a == b"oom");
    if oom && ctx.over_memory {
        return OOM;
    }
    if args[3] == b"nx" && ks.contains(key, ctx.now_ms) {
        return Reply::Int(0);
    }
    let (e, memory) = match value_of(payload, key, None) {
        Ok(v) => v,
        Err(e) => return e,
    };
    if oom {
        let grow = memory.saturating_sub(ks.memory_of(key, ctx.now_ms));
        if let Err(e) = make_room(ks, grow, ctx) {
            return e;
        }
    }
    install(ks, e, ctx);
    let event = if args[0] == b"rename" {
        "rename_to"
    } else {
        "copy_to"
    };
    notify::notify(ctx, GENERIC, event, key);
    Reply::Int(1)
}

/// The source's last part of RENAME and RENAMENX over two shards (`args`: the
/// command's name and the source): the key is removed (logged as `Del`), with the
/// `rename_from` event.
pub fn rename_source(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let removed = ks.remove(key, ctx.now_ms);
    if removed {
        ctx.record(&RecordRef::Del { key });
        notify::notify(ctx, GENERIC, "rename_from", key);
    }
    Reply::Int(removed as i64)
}

/// RENAME and RENAMENX in one keyspace (Redis's renameGenericCommand): a missing source
/// is `ERR no such key`; a source renamed to itself answers OK (RENAMENX: 0) and
/// changes nothing; under `nx` an existing destination answers 0. Otherwise the value
/// (with its expiry) leaves the source and replaces whatever the destination held.
/// Logged: the source's `Del` and the destination's full state.
fn rename_generic(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, nx: bool) -> Reply {
    let (src, dst) = (args[1], args[2]);
    let Some(e) = ks.get(src, ctx.now_ms) else {
        return Reply::err("ERR no such key");
    };
    let done = if nx { Reply::Int(1) } else { Reply::OK };
    if src == dst {
        return if nx { Reply::Int(0) } else { Reply::OK };
    }
    let payload = payload_of(e);
    if nx && ks.contains(dst, ctx.now_ms) {
        return Reply::Int(0);
    }
    let (e, _) = value_of(&payload, dst, None).expect("a payload just made");
    rename_source(ks, &[b"rename", src], ctx);
    install(ks, e, ctx);
    notify::notify(ctx, GENERIC, "rename_to", dst);
    done
}

/// RENAME key newkey: see `rename_generic`.
pub fn rename(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    rename_generic(ks, args, ctx, false)
}

/// RENAMENX key newkey: see `rename_generic`.
pub fn renamenx(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    rename_generic(ks, args, ctx, true)
}

/// COPY's options: REPLACE, and the destination database (`None`: the same).
pub struct CopyOpts {
    /// An existing destination is replaced (else COPY answers 0).
    pub replace: bool,
    /// DB n.
    pub db: Option<u8>,
}

/// Parses COPY's options (`args[3..]`): `ERR syntax error` for another word, DB's
/// errors as SELECT's (`ERR DB index is out of range`).
pub fn copy_opts(args: &[&[u8]]) -> Result<CopyOpts, Reply> {
    let mut o = CopyOpts {
        replace: false,
        db: None,
    };
    let mut j = 3;
    while j < args.len() {
        if args[j].eq_ignore_ascii_case(b"replace") {
            o.replace = true;
        } else if args[j].eq_ignore_ascii_case(b"db") && j + 1 < args.len() {
            o.db = Some(crate::exec::parse_db(
                args[j + 1],
                "ERR DB index is out of range",
            )?);
            j += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    Ok(o)
}

/// `COPY source destination [DB db] [REPLACE]`, in one keyspace (a DB naming another
/// database runs over two: `commands/across.rs`). Answers 1 when copied (the value and
/// its expiry; the source is unchanged), 0 for a missing source or an existing
/// destination without REPLACE. The same key in the same database: `ERR source and
/// destination objects are the same`. Logged: the destination's full state.
pub fn copy(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let o = match copy_opts(args) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if o.db.is_some_and(|d| d != ctx.db) {
        return Reply::err("ERR COPY to another database runs over two keyspaces");
    }
    let (src, dst) = (args[1], args[2]);
    if src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let Some(e) = ks.get(src, ctx.now_ms) else {
        return Reply::Int(0);
    };
    let payload = payload_of(e);
    let mode: &[u8] = if o.replace { b"replace" } else { b"nx" };
    put_value(ks, &[&b"copy"[..], dst, &payload, mode, b"oom"], ctx)
}
