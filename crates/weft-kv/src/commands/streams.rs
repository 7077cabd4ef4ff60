//! The stream commands (Redis 7.0's t_stream.c, for behaviour): XADD, XLEN, XRANGE,
//! XREVRANGE, XDEL, XTRIM, XSETID, XREAD, XREADGROUP, XGROUP, XACK, XPENDING, XCLAIM,
//! XAUTOCLAIM, XINFO.
//!
//! Each function checks its arguments first (in Redis's order, so the same error
//! wins), then the key's type (`WRONGTYPE`: nothing changes), then, for XADD and
//! XGROUP CREATE, what it would add against `ctx.room`, then changes and logs. A
//! stream a command creates (XADD, XGROUP CREATE ... MKSTREAM) is logged as its whole
//! state; a change of an existing one as its change records (`keyspace/stream.rs` has
//! the kinds: entries added, removed or trimmed, a group or consumer made, moved or
//! removed, entries pending or acknowledged), each absolute (IDs, times, counts as
//! computed here), so replay computes nothing. A stream may be empty; only DEL (and
//! the other key commands) removes one.
//!
//! Reply shapes, as Redis 7.0's: an entry is `[id, [field, value, ...]]`; XREAD and
//! XREADGROUP answer a map of key to entries in RESP3 and an array of `[key, entries]`
//! in RESP2 (nil when nothing is served); XINFO answers maps (flat arrays in RESP2).
//!
//! XREAD and XREADGROUP over keys of several shards run as one transaction
//! ([`run_multi`]): every key is checked in order (type, group, ID) before any is
//! served, then each is served on its own shard. Here they never wait: with BLOCK and
//! nothing to serve they answer a null array, as inside MULTI. The server parks a
//! connection whose BLOCK finds nothing (`server/blocking.rs`), and serves it with
//! [`xread`] or [`xreadgroup`] of the one key that got entries ([`has_new`] says when).

use super::strings::make_room;
use super::{parse_i64, Ctx, NOT_INT, SYNTAX_ERR, WRONGTYPE};
use crate::exec::{Acks, ShardSet};
use crate::keyspace::stream::{self, Change, Id, Item, Stream};
use crate::keyspace::{Entry, Keyspace, Type};
use crate::log::RecordRef;
use crate::pubsub::{notify, NEW, STREAM};
use crate::resp::Reply;
use crate::route::shard_of;

const INVALID_ID: Reply = Reply::err("ERR Invalid stream ID specified as stream command argument");
const NO_KEY: Reply = Reply::err("ERR no such key");

/// The live stream in `key` (`None` if there is none), or `WRONGTYPE`.
fn stream_of<'a>(ks: &'a mut Keyspace, key: &[u8], now: u64) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now) {
        Some(e) if e.kind() != Type::Stream => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// Logs `c` about `key`.
fn log(ctx: &mut Ctx<'_>, key: &[u8], c: &Change) {
    let body = c.body();
    ctx.record(&RecordRef::Stream {
        kind: c.kind(),
        key,
        body: &body,
    });
}

/// Logs the whole state of the stream `key` (just created).
fn log_state(ks: &Keyspace, key: &[u8], ctx: &mut Ctx<'_>) {
    let e = ks.peek(key, ctx.now_ms).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
}

/// Runs `f` on the stream `key` (which the caller found).
fn change<R>(ks: &mut Keyspace, key: &[u8], now: u64, f: impl FnOnce(&mut Stream) -> R) -> R {
    ks.modify(key, now, |e| f(stream::of_mut(e)))
        .expect("the stream is there")
}

fn id_reply(id: Id) -> Reply {
    Reply::Bulk(id.text())
}

/// An entry as Redis answers one: `[id, [field, value, ...]]`.
fn entry_reply(id: Id, item: &Item) -> Reply {
    Reply::Array(vec![
        id_reply(id),
        Reply::Array(item.fields().map(Reply::bulk).collect()),
    ])
}

/// A strict ID argument (`ms-seq` or `ms`, the sequence `missing_seq`).
fn strict_id(b: &[u8], missing_seq: u64) -> Result<Id, Reply> {
    Id::parse(b, missing_seq).ok_or(INVALID_ID)
}

/// An ID that may also be `-` or `+`.
fn loose_id(b: &[u8], missing_seq: u64) -> Result<Id, Reply> {
    match b {
        b"-" => Ok(Id::MIN),
        b"+" => Ok(Id::MAX),
        _ => strict_id(b, missing_seq),
    }
}

/// An interval bound: `-`, `+`, an ID, or `(` and an ID (exclusive, moved by one).
fn bound(b: &[u8], start: bool) -> Result<Id, Reply> {
    let missing = if start { 0 } else { u64::MAX };
    if b.len() > 1 && b[0] == b'(' {
        let id = strict_id(&b[1..], missing)?;
        let moved = if start { id.next() } else { id.prev() };
        return moved.ok_or(Reply::err(if start {
            "ERR invalid start ID for the interval"
        } else {
            "ERR invalid end ID for the interval"
        }));
    }
    loose_id(b, missing)
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn int(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or(NOT_INT)
}

fn nogroup(key: &[u8], group: &[u8]) -> Reply {
    Reply::error(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

// ---- entries -----------------------------------------------------------------------

/// A trimming strategy (XADD's and XTRIM's MAXLEN and MINID options).
#[derive(Default)]
struct Trim {
    maxlen: Option<u64>,
    minid: Option<Id>,
    approx: bool,
    limit: Option<u64>,
}

impl Trim {
    fn any(&self) -> bool {
        self.maxlen.is_some() || self.minid.is_some()
    }
}

/// Parses trimming options from `args[i..]`; for XADD also NOMKSTREAM, stopping at
/// the first argument that is none (the ID). Answers the options and where they end.
fn parse_trim(args: &[&[u8]], mut i: usize, xadd: bool) -> Result<(Trim, bool, usize), Reply> {
    let mut t = Trim::default();
    let mut nomk = false;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let a = args[i];
        if xadd && a == b"*" {
            break;
        } else if (eq(a, "maxlen") || eq(a, "minid")) && more >= 1 {
            if t.any() {
                return Err(Reply::err(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            let max = eq(a, "maxlen");
            i += 1;
            if args[i] == b"~" || args[i] == b"=" {
                t.approx = args[i] == b"~";
                if more < 2 {
                    return Err(SYNTAX_ERR);
                }
                i += 1;
            }
            if max {
                let n = int(args[i])?;
                if n < 0 {
                    return Err(Reply::err("ERR The MAXLEN argument must be >= 0."));
                }
                t.maxlen = Some(n as u64);
            } else {
                t.minid = Some(strict_id(args[i], 0)?);
            }
            i += 1;
        } else if eq(a, "limit") && more >= 1 {
            let n = int(args[i + 1])?;
            if n < 0 {
                return Err(Reply::err("ERR The LIMIT argument must be >= 0."));
            }
            t.limit = Some(n as u64);
            i += 2;
        } else if xadd && eq(a, "nomkstream") {
            nomk = true;
            i += 1;
        } else if xadd {
            // The ID, checked here (before the options' combinations, as Redis).
            xadd_id(a)?;
            break;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    if t.limit.is_some() && !t.any() {
        return Err(Reply::err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ));
    }
    if t.limit.is_some() && !t.approx {
        return Err(Reply::err(
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ));
    }
    Ok((t, nomk, i))
}

/// XADD's ID argument: `*` (`None`), `ms-*` (`Some((ms, None))`) or an ID.
fn xadd_id(idarg: &[u8]) -> Result<Option<(u64, Option<u64>)>, Reply> {
    if idarg == b"*" {
        return Ok(None);
    }
    if let Some(ms) = idarg.strip_suffix(b"-*") {
        return match Id::parse(ms, 0) {
            Some(id) if !ms.contains(&b'-') => Ok(Some((id.ms, None))),
            _ => Err(INVALID_ID),
        };
    }
    let id = strict_id(idarg, 0)?;
    Ok(Some((id.ms, Some(id.seq))))
}

/// Trims the stream `key` as `t` says: the entries removed (logged as `XTrim`).
fn apply_trim(ks: &mut Keyspace, key: &[u8], t: &Trim, ctx: &mut Ctx<'_>, log_it: bool) -> u64 {
    if !t.any() {
        return 0;
    }
    // Redis's default limit for `~` is 100 nodes' worth of entries.
    let limit = if t.approx {
        t.limit.unwrap_or(match stream::node_max_entries() {
            0 => 10_000,
            n => n.saturating_mul(100),
        })
    } else {
        0
    };
    let now = ctx.now_ms;
    let n = change(ks, key, now, |s| {
        s.trim_point(t.maxlen, t.minid, t.approx, limit)
            .map(|below| (below, s.remove_below(below)))
    });
    match n {
        Some((below, n)) if n > 0 => {
            if log_it {
                log(ctx, key, &Change::Trim { below });
            }
            n
        }
        _ => 0,
    }
}

/// XADD key \[NOMKSTREAM\] \[MAXLEN|MINID \[=|~\] threshold \[LIMIT count\]\] *|id field value
/// [field value ...]: appends an entry and answers its ID (nil with NOMKSTREAM and
/// no stream). The ID is `*` (the time in ms, or the last ID's ms with the next
/// sequence), `ms-*` (the next sequence in that ms) or `ms-seq`, above the last ID
/// (`ERR The ID specified in XADD is equal or smaller than the target stream top
/// item`), never `0-0`. Then trims. Events: `xadd`, then `xtrim` if it removed any.
pub fn xadd(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let (trim, nomk, at) = match parse_trim(args, 2, true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let arity = Reply::err("ERR wrong number of arguments for 'xadd' command");
    let Some(&idarg) = args.get(at) else {
        return arity;
    };
    // The ID (checked before the number of fields, as Redis).
    let wanted = match xadd_id(idarg) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let fields = &args[at + 1..];
    if fields.is_empty() || !fields.len().is_multiple_of(2) {
        return arity;
    }
    if wanted == Some((0, Some(0))) {
        return Reply::err("ERR The ID specified in XADD must be greater than 0-0");
    }
    if ctx.over_memory {
        return super::OOM;
    }
    let now = ctx.now_ms;
    let exists = match stream_of(ks, key, now) {
        Err(e) => return e,
        Ok(None) if nomk => return Reply::Nil,
        Ok(e) => e.map(|e| stream::of(e).last_id),
    };
    let last = exists.unwrap_or(Id::MIN);
    if last == Id::MAX {
        return Reply::err(
            "ERR The stream has exhausted the last possible ID, unable to add more items",
        );
    }
    let smaller = Reply::err(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item",
    );
    let id = match wanted {
        None if now > last.ms => Id { ms: now, seq: 0 },
        None => last.next().expect("below the greatest"),
        Some((ms, None)) if ms == last.ms => match last.next() {
            Some(id) if id.ms == ms => id,
            _ => return smaller,
        },
        Some((ms, None)) if ms > last.ms => Id { ms, seq: 0 },
        Some((_, None)) => return smaller,
        Some((ms, Some(seq))) => {
            let id = Id { ms, seq };
            if exists.is_some() && id <= last {
                return smaller;
            }
            id
        }
    };
    let grow = fields.iter().map(|f| f.len() as u64 + 2).sum::<u64>()
        + stream::ENTRY_OVERHEAD
        + if exists.is_some() {
            0
        } else {
            Keyspace::entry_memory(key.len(), 8, false) + stream::STREAM_OVERHEAD
        };
    if let Err(e) = make_room(ks, grow, ctx) {
        return e;
    }
    if exists.is_none() {
        ks.put(stream::new_entry(key, Stream::default(), None, 0));
    }
    let added = change(ks, key, now, |s| {
        s.push(id, fields.iter().copied());
        s.last_id = id;
        s.entries_added += 1;
        s.entries_added
    });
    if exists.is_some() {
        log(
            ctx,
            key,
            &Change::Add {
                last_id: id,
                entries_added: added,
                entries: vec![(id, fields.iter().map(|f| f.to_vec()).collect())],
            },
        );
    }
    let trimmed = apply_trim(ks, key, &trim, ctx, exists.is_some());
    if exists.is_none() {
        log_state(ks, key, ctx);
        notify(ctx, NEW, "new", key);
    }
    notify(ctx, STREAM, "xadd", key);
    if trimmed > 0 {
        notify(ctx, STREAM, "xtrim", key);
    }
    id_reply(id)
}

/// XLEN key: the number of entries (0 for a missing key).
pub fn xlen(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match stream_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.map_or(0, |e| stream::of(e).len() as i64)),
    }
}

fn range(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, rev: bool) -> Reply {
    let (a, b) = if rev {
        (args[3], args[2])
    } else {
        (args[2], args[3])
    };
    let from = match bound(a, true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let to = match bound(b, false) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut count: Option<usize> = None;
    let mut i = 4;
    while i < args.len() {
        if eq(args[i], "count") && i + 1 < args.len() {
            match int(args[i + 1]) {
                Ok(n) => count = Some(n.max(0) as usize),
                Err(e) => return e,
            }
            i += 2;
        } else {
            return SYNTAX_ERR;
        }
    }
    let e = match stream_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(e)) => e,
    };
    if count == Some(0) {
        return Reply::NilArray;
    }
    let s = stream::of(e);
    let n = count.unwrap_or(usize::MAX);
    let it = s.range(from, to);
    let out: Vec<Reply> = if rev {
        it.rev().take(n).map(|(i, it)| entry_reply(i, it)).collect()
    } else {
        it.take(n).map(|(i, it)| entry_reply(i, it)).collect()
    };
    Reply::Array(out)
}

/// XRANGE key start end [COUNT count]: the entries from start to end (`-` and `+` the
/// ends, `(` before an ID excludes it; a bare `ms` is `ms-0` as a start, `ms-max` as an
/// end). COUNT 0 or less: nil array. A missing key: empty array.
pub fn xrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range(ks, args, ctx, false)
}

/// XREVRANGE key end start [COUNT count]: XRANGE from the end.
pub fn xrevrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range(ks, args, ctx, true)
}

/// XDEL key id [id ...]: removes the entries, answers how many were there (0 for a
/// missing key, whatever the IDs; an invalid ID: nothing removed). The greatest removed ID becomes the stream's max
/// deleted ID if above it. Event `xdel` if any was removed.
pub fn xdel(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    match stream_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(_)) => {}
    }
    let mut ids = Vec::with_capacity(args.len() - 2);
    for a in &args[2..] {
        match strict_id(a, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    let (gone, max) = change(ks, key, ctx.now_ms, |s| {
        let gone: Vec<Id> = ids.iter().copied().filter(|&id| s.remove(id)).collect();
        if let Some(&m) = gone.iter().max() {
            s.max_deleted = s.max_deleted.max(m);
        }
        (gone, s.max_deleted)
    });
    if gone.is_empty() {
        return Reply::Int(0);
    }
    let n = gone.len() as i64;
    log(
        ctx,
        key,
        &Change::Del {
            max_deleted: max,
            ids: gone,
        },
    );
    notify(ctx, STREAM, "xdel", key);
    Reply::Int(n)
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]: trims, answers how many
/// entries went (0 for a missing key). Event `xtrim` if any did.
pub fn xtrim(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let trim = match parse_trim(args, 2, false) {
        Ok((t, _, _)) => t,
        Err(e) => return e,
    };
    if !trim.any() {
        return SYNTAX_ERR;
    }
    match stream_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(_)) => {}
    }
    let n = apply_trim(ks, key, &trim, ctx, true);
    if n > 0 {
        notify(ctx, STREAM, "xtrim", key);
    }
    Reply::Int(n as i64)
}

/// XSETID key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]:
/// sets the stream's last ID (not below its last entry), and
/// optionally its count of added entries (not below its length) and its max deleted
/// ID. `ERR no such key` for a missing key. Event `xsetid`.
pub fn xsetid(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let id = match strict_id(args[2], 0) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut added: Option<u64> = None;
    let mut maxdel = Id::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq(args[i], "entriesadded") && more {
            match int(args[i + 1]) {
                Ok(n) if n < 0 => return Reply::err("ERR entries_added must be positive"),
                Ok(n) => added = Some(n as u64),
                Err(e) => return e,
            }
        } else if eq(args[i], "maxdeletedid") && more {
            match strict_id(args[i + 1], 0) {
                Ok(m) if id < m => {
                    return Reply::err(
                        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                    )
                }
                Ok(m) => maxdel = m,
                Err(e) => return e,
            }
        } else {
            return SYNTAX_ERR;
        }
        i += 2;
    }
    let s = match stream_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return NO_KEY,
        Ok(Some(e)) => stream::of(e),
    };
    if let Some((top, _)) = s.last() {
        if id < top {
            return Reply::err(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            );
        }
        if added.is_some_and(|a| a < s.len() as u64) {
            return Reply::err(
                "ERR The entries_added specified in XSETID is smaller than the target stream length",
            );
        }
    }
    let c = change(ks, key, ctx.now_ms, |s| {
        s.last_id = id;
        if let Some(a) = added {
            s.entries_added = a;
        }
        if maxdel != Id::MIN {
            s.max_deleted = maxdel;
        }
        Change::SetId {
            last_id: s.last_id,
            entries_added: s.entries_added,
            max_deleted: s.max_deleted,
        }
    });
    log(ctx, key, &c);
    notify(ctx, STREAM, "xsetid", key);
    Reply::OK
}

// ---- reading, with and without a group ---------------------------------------------

/// XREAD's and XREADGROUP's arguments.
pub struct ReadArgs<'a> {
    /// COUNT (0: no limit).
    pub count: usize,
    /// BLOCK's milliseconds.
    pub block: Option<u64>,
    /// GROUP's group and consumer.
    pub group: Option<(&'a [u8], &'a [u8])>,
    /// NOACK.
    pub noack: bool,
    /// The streams' keys.
    pub keys: Vec<&'a [u8]>,
    /// Their IDs, as given.
    pub ids: Vec<&'a [u8]>,
}

/// Parses XREAD's (or XREADGROUP's) options, in Redis's order of errors.
pub fn parse_read<'a>(args: &[&'a [u8]], group_cmd: bool) -> Result<ReadArgs<'a>, Reply> {
    let name = if group_cmd { "XREADGROUP" } else { "XREAD" };
    let mut r = ReadArgs {
        count: 0,
        block: None,
        group: None,
        noack: false,
        keys: vec![],
        ids: vec![],
    };
    let mut streams = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let a = args[i];
        if eq(a, "block") && more >= 1 {
            i += 1;
            match int(args[i]) {
                Ok(n) if n < 0 => return Err(Reply::err("ERR timeout is negative")),
                Ok(n) => r.block = Some(n as u64),
                Err(_) => return Err(Reply::err("ERR timeout is not an integer or out of range")),
            }
        } else if eq(a, "count") && more >= 1 {
            i += 1;
            r.count = int(args[i])?.max(0) as usize;
        } else if eq(a, "streams") && more >= 1 {
            let n = args.len() - i - 1;
            if !n.is_multiple_of(2) {
                return Err(Reply::error(format!(
                    "ERR Unbalanced {name} list of streams: for each stream key an ID or '$' must be specified."
                )));
            }
            streams = Some(i + 1);
            break;
        } else if eq(a, "group") && more >= 2 {
            if !group_cmd {
                return Err(Reply::err(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((args[i + 1], args[i + 2]));
            i += 2;
        } else if eq(a, "noack") {
            if !group_cmd {
                return Err(Reply::err(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(SYNTAX_ERR);
        }
        i += 1;
    }
    let Some(at) = streams else {
        return Err(SYNTAX_ERR);
    };
    if group_cmd && r.group.is_none() {
        return Err(Reply::err("ERR Missing GROUP option for XREADGROUP"));
    }
    let n = (args.len() - at) / 2;
    r.keys = args[at..at + n].to_vec();
    r.ids = args[at + n..].to_vec();
    Ok(r)
}

/// Checks one key of a read: its type, its group, its ID argument.
fn check_read(
    ks: &mut Keyspace,
    key: &[u8],
    idarg: &[u8],
    group: Option<&[u8]>,
    now: u64,
) -> Result<(), Reply> {
    let e = stream_of(ks, key, now)?;
    if let Some(g) = group {
        if !e.is_some_and(|e| stream::of(e).groups.contains_key(g)) {
            return Err(Reply::error(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(g)
            )));
        }
    }
    match idarg {
        b"$" if group.is_some() => Err(Reply::err(
            "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
        )),
        b"$" => Ok(()),
        b">" if group.is_none() => Err(Reply::err(
            "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
        )),
        b">" => Ok(()),
        _ => strict_id(idarg, 0).map(|_| ()),
    }
}

/// COUNT, GROUP's group and consumer, NOACK.
type ServeArgs<'a> = (usize, Option<(&'a [u8], &'a [u8])>, bool);

/// Serves one key of a read (checked): its entries, or `None` when it has nothing to
/// serve (it is then left out of the reply).
fn serve_read(
    ks: &mut Keyspace,
    key: &[u8],
    idarg: &[u8],
    r: ServeArgs<'_>,
    ctx: &mut Ctx<'_>,
) -> Option<Reply> {
    let (count, group, noack) = r;
    let now = ctx.now_ms;
    let e = ks.get(key, now)?;
    let s = stream::of(e);
    let n = if count == 0 { usize::MAX } else { count };
    let Some((gname, cname)) = group else {
        let after = if idarg == b"$" {
            s.last_id
        } else {
            strict_id(idarg, 0).ok()?
        };
        let (top, _) = s.last()?;
        if top <= after {
            return None;
        }
        let from = after.next()?;
        return Some(Reply::Array(
            s.range(from, Id::MAX)
                .take(n)
                .map(|(i, it)| entry_reply(i, it))
                .collect(),
        ));
    };
    let g = &s.groups[gname];
    let history = idarg != b">";
    if !history {
        match s.last() {
            Some((top, _)) if top > g.last_id => {}
            _ => return None,
        }
    }
    let made = !g.consumers.contains_key(cname);
    let (reply, changes) = change(ks, key, now, |s| {
        let mut changes = Vec::new();
        s.touch_consumer(gname, cname, now);
        changes.push(Change::Consumer {
            group: gname.to_vec(),
            name: cname.to_vec(),
            seen: now,
        });
        let mut out = Vec::new();
        let mut claims = Vec::new();
        if history {
            // The pending entries after the ID given.
            let after = strict_id(idarg, 0).expect("checked");
            let g = &s.groups[gname];
            let ids: Vec<Id> = match after.next() {
                Some(from) => g.consumers[cname]
                    .pel
                    .range(from..)
                    .take(n)
                    .copied()
                    .collect(),
                None => Vec::new(),
            };
            for id in ids {
                match s.get(id) {
                    Some(it) => {
                        out.push(entry_reply(id, it));
                        let count = s.groups[gname].pel[&id].delivery_count + 1;
                        claims.push((id, now, count));
                    }
                    None => out.push(Reply::Array(vec![id_reply(id), Reply::NilArray])),
                }
            }
            for &(id, t, c) in &claims {
                s.claim(gname, cname, id, t, c);
            }
        } else {
            let after = s.groups[gname].last_id;
            let from = after.next().expect("below the top");
            let ids: Vec<Id> = s.range(from, Id::MAX).take(n).map(|(i, _)| i).collect();
            for id in ids {
                out.push(entry_reply(id, s.get(id).expect("in range")));
                let (tomb, est) = (s.range_has_tombstone(id, Id::MAX), s.estimate_read(id));
                let g = s.groups.get_mut(gname).expect("checked");
                if g.entries_read != -1 && !tomb {
                    g.entries_read += 1;
                } else if s.entries_added != 0 {
                    g.entries_read = est;
                }
                g.last_id = id;
                if !noack {
                    claims.push((id, now, 1));
                }
            }
            for &(id, t, c) in &claims {
                s.claim(gname, cname, id, t, c);
            }
            let g = &s.groups[gname];
            changes.push(Change::Group {
                name: gname.to_vec(),
                last_id: g.last_id,
                entries_read: g.entries_read,
            });
        }
        if !claims.is_empty() {
            changes.push(Change::Claim {
                group: gname.to_vec(),
                consumer: cname.to_vec(),
                items: claims,
            });
        }
        (Reply::Array(out), changes)
    });
    for c in &changes {
        log(ctx, key, c);
    }
    if made {
        notify(ctx, STREAM, "xgroup-createconsumer", key);
    }
    Some(reply)
}

fn read_all(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, group_cmd: bool) -> Reply {
    let r = match parse_read(args, group_cmd) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let gname = r.group.map(|g| g.0);
    for (k, id) in r.keys.iter().zip(&r.ids) {
        if let Err(e) = check_read(ks, k, id, gname, ctx.now_ms) {
            return e;
        }
    }
    let mut out = Vec::new();
    for (k, id) in r.keys.iter().zip(&r.ids) {
        if let Some(entries) = serve_read(ks, k, id, (r.count, r.group, r.noack), ctx) {
            out.push((Reply::bulk(k), entries));
        }
    }
    if out.is_empty() {
        return Reply::NilArray;
    }
    Reply::KeyedPairs(out)
}

/// XREAD [COUNT count] [BLOCK ms] STREAMS key [key ...] id [id ...]: for each stream
/// with entries after its ID (`$`: its last ID), those entries (at most COUNT each);
/// nil when none has any. Every key is checked (type, ID) before any is read.
pub fn xread(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    read_all(ks, args, ctx, false)
}

/// XREADGROUP GROUP group consumer \[COUNT count\] \[BLOCK ms\] \[NOACK\] STREAMS key \[key
/// ...] id [id ...]: with `>`, the entries the group has not delivered yet (the group's
/// last ID moves on, and each becomes pending on the consumer unless NOACK); with an
/// ID, the consumer's pending entries after it (not the ID itself) (each delivered once more; a pending
/// entry no longer in the stream is `[id, nil]`). The consumer is made if missing
/// (event `xgroup-createconsumer`). `NOGROUP` for a missing key or group.
pub fn xreadgroup(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    read_all(ks, args, ctx, true)
}

/// Whether the stream `e` has entries for a blocked reader: above `after` (XREAD), or
/// above the group's last ID (XREADGROUP with `>`; a group that no longer exists
/// counts, so that the reader gets its error).
pub fn has_new(e: &Entry, after: Option<Id>, group: Option<&[u8]>) -> bool {
    if e.kind() != Type::Stream {
        return false;
    }
    let s = stream::of(e);
    let Some((top, _)) = s.last() else {
        return group.is_some_and(|g| !s.groups.contains_key(g));
    };
    match group {
        Some(g) => s.groups.get(g).is_none_or(|g| top > g.last_id),
        None => top > after.unwrap_or(Id::MIN),
    }
}

/// Whether the stream `e` has the group `g`.
pub fn has_group(e: &Entry, g: &[u8]) -> bool {
    stream::of(e).groups.contains_key(g)
}

/// The ID a blocked XREAD waits after, for its argument `idarg` on `e` (`$`: the
/// stream's last ID, 0-0 for a missing key); `None` for `>`.
pub fn wait_after(e: Option<&Entry>, idarg: &[u8]) -> Option<Id> {
    match idarg {
        b">" => None,
        b"$" => Some(
            e.filter(|e| e.kind() == Type::Stream)
                .map_or(Id::MIN, |e| stream::of(e).last_id),
        ),
        _ => Some(Id::parse(idarg, 0).unwrap_or(Id::MAX)),
    }
}

/// One key's check of a read over several shards (not a command of the table):
/// `[name, key, id, group]`.
fn read_check_step(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match check_read(ks, args[1], args[2], args.get(3).copied(), ctx.now_ms) {
        Ok(()) => Reply::OK,
        Err(e) => e,
    }
}

/// One key's serving of a read over several shards: `[name, key, id, count, noack,
/// group, consumer]`; nil when it has nothing.
fn read_serve_step(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let count = parse_i64(args[3]).unwrap_or(0) as usize;
    let group = args.get(5).map(|g| (*g, args[6]));
    serve_read(ks, args[1], args[2], (count, group, args[4] == b"1"), ctx).unwrap_or(Reply::Nil)
}

/// XREAD and XREADGROUP through the server: one transaction over the keys' shards.
pub fn run_multi(
    set: &impl ShardSet,
    name: &str,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Reply {
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let group_cmd = name == "xreadgroup";
    let r = match parse_read(&argv, group_cmd) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let n = set.count();
    if group_cmd {
        for k in &r.keys {
            if let Some(e) = set.refuses_writes(shard_of(k, n)) {
                return e;
            }
        }
    }
    let mut shards: Vec<usize> = r.keys.iter().map(|k| shard_of(k, n)).collect();
    shards.sort_unstable();
    shards.dedup();
    let now = crate::shard::now_ms();
    let count = r.count.to_string().into_bytes();
    set.atomically(&shards, |held| {
        let mut run = |f: super::ShardFn, key: &[u8], a: &[&[u8]]| {
            let s = shard_of(key, n);
            let mut out = None;
            held.with(s, &mut |sh| out = Some(sh.run(f, db, a, now, None)));
            let (reply, lsn) = out.expect("the step ran");
            acks.note(s, lsn);
            reply
        };
        for (k, id) in r.keys.iter().zip(&r.ids) {
            let mut a: Vec<&[u8]> = vec![argv[0], k, id];
            if let Some((g, _)) = r.group {
                a.push(g);
            }
            let rep = run(read_check_step, k, &a);
            if rep.is_error() {
                return rep;
            }
        }
        let mut out = Vec::new();
        let noack: &[u8] = if r.noack { b"1" } else { b"0" };
        for (k, id) in r.keys.iter().zip(&r.ids) {
            let mut a: Vec<&[u8]> = vec![argv[0], k, id, &count, noack];
            if let Some((g, c)) = r.group {
                a.push(g);
                a.push(c);
            }
            match run(read_serve_step, k, &a) {
                Reply::Nil => {}
                entries => out.push((Reply::bulk(k), entries)),
            }
        }
        if out.is_empty() {
            return Reply::NilArray;
        }
        Reply::KeyedPairs(out)
    })
}

// ---- groups ------------------------------------------------------------------------

/// XGROUP CREATE key group id|$ \[MKSTREAM\] \[ENTRIESREAD n\], SETID key group id|$
/// [ENTRIESREAD n], DESTROY key group, CREATECONSUMER key group consumer, DELCONSUMER
/// key group consumer, HELP. The key must exist (CREATE with MKSTREAM makes an empty
/// stream); the group must exist but for CREATE (`BUSYGROUP` if it does) and DESTROY
/// (0 if it does not). DELCONSUMER answers the consumer's pending count, dropping its
/// pending entries. Events `xgroup-create`, `xgroup-setid`, `xgroup-destroy`,
/// `xgroup-createconsumer`, `xgroup-delconsumer`.
pub fn xgroup(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" {
        return help(&[
            "XGROUP CREATE <key> <group> <id>|$ [MKSTREAM] [ENTRIESREAD <n>]",
            "    Makes a consumer group reading after <id> ($: the stream's last entry).",
            "    MKSTREAM makes an empty stream if the key is missing.",
            "XGROUP SETID <key> <group> <id>|$ [ENTRIESREAD <n>]",
            "    Sets the last ID the group was given.",
            "XGROUP DESTROY <key> <group>",
            "    Removes the group and its pending entries.",
            "XGROUP CREATECONSUMER <key> <group> <consumer>",
            "    Makes a consumer in the group.",
            "XGROUP DELCONSUMER <key> <group> <consumer>",
            "    Removes the consumer and its pending entries.",
            "XGROUP HELP",
            "    Shows this text.",
        ]);
    }
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
            String::from_utf8_lossy(args[1])
        ))
    };
    if args.len() < 4 {
        return syntax();
    }
    let (key, gname) = (args[2], args[3]);
    let create = sub == b"create";
    let mut mkstream = false;
    let mut entries_read: i64 = -1;
    if create || sub == b"setid" {
        let mut i = 5;
        while i < args.len() {
            if create && eq(args[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if eq(args[i], "entriesread") && i + 1 < args.len() {
                match int(args[i + 1]) {
                    Ok(n) if n < -1 => {
                        return Reply::err("ERR value for ENTRIESREAD must be positive or -1")
                    }
                    Ok(n) => entries_read = n,
                    Err(e) => return e,
                }
                i += 2;
            } else {
                return syntax();
            }
        }
    }
    let now = ctx.now_ms;
    let s = match stream_of(ks, key, now) {
        Err(e) => return e,
        Ok(e) => e.map(stream::of),
    };
    if s.is_none() && !mkstream {
        return Reply::err(
            "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
        );
    }
    let has_group = s.is_some_and(|s| s.groups.contains_key(gname));
    let needs_group = matches!(&sub[..], b"setid" | b"createconsumer" | b"delconsumer");
    if !has_group && needs_group {
        return Reply::error(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(gname),
            String::from_utf8_lossy(key)
        ));
    }
    match (&sub[..], args.len()) {
        (b"create", 5..=8) => {
            let id = match args[4] {
                b"$" => s.map_or(Id::MIN, |s| s.last_id),
                a => match strict_id(a, 0) {
                    Ok(id) => id,
                    Err(e) => return e,
                },
            };
            if has_group {
                return Reply::err("BUSYGROUP Consumer Group name already exists");
            }
            let exists = s.is_some();
            let grow = gname.len() as u64
                + stream::GROUP_OVERHEAD
                + if exists {
                    0
                } else {
                    Keyspace::entry_memory(key.len(), 8, false) + stream::STREAM_OVERHEAD
                };
            if ctx.over_memory {
                return super::OOM;
            }
            if let Err(e) = make_room(ks, grow, ctx) {
                return e;
            }
            if !exists {
                ks.put(stream::new_entry(key, Stream::default(), None, 0));
            }
            change(ks, key, now, |s| s.set_group(gname, id, entries_read));
            if exists {
                log(
                    ctx,
                    key,
                    &Change::Group {
                        name: gname.to_vec(),
                        last_id: id,
                        entries_read,
                    },
                );
            } else {
                log_state(ks, key, ctx);
                notify(ctx, NEW, "new", key);
            }
            notify(ctx, STREAM, "xgroup-create", key);
            Reply::OK
        }
        (b"setid", 5 | 7) => {
            let id = match args[4] {
                b"$" => s.expect("checked").last_id,
                a => match loose_id(a, 0) {
                    Ok(id) => id,
                    Err(e) => return e,
                },
            };
            change(ks, key, now, |s| s.set_group(gname, id, entries_read));
            log(
                ctx,
                key,
                &Change::Group {
                    name: gname.to_vec(),
                    last_id: id,
                    entries_read,
                },
            );
            notify(ctx, STREAM, "xgroup-setid", key);
            Reply::OK
        }
        (b"destroy", 4) => {
            if !has_group {
                return Reply::Int(0);
            }
            change(ks, key, now, |s| s.remove_group(gname));
            log(
                ctx,
                key,
                &Change::GroupDel {
                    name: gname.to_vec(),
                },
            );
            notify(ctx, STREAM, "xgroup-destroy", key);
            Reply::Int(1)
        }
        (b"createconsumer", 5) => {
            let cname = args[4];
            if s.expect("checked").groups[gname]
                .consumers
                .contains_key(cname)
            {
                return Reply::Int(0);
            }
            if ctx.over_memory {
                return super::OOM;
            }
            change(ks, key, now, |s| s.touch_consumer(gname, cname, now));
            log(
                ctx,
                key,
                &Change::Consumer {
                    group: gname.to_vec(),
                    name: cname.to_vec(),
                    seen: now,
                },
            );
            notify(ctx, STREAM, "xgroup-createconsumer", key);
            Reply::Int(1)
        }
        (b"delconsumer", 5) => {
            let cname = args[4];
            let n = change(ks, key, now, |s| s.remove_consumer(gname, cname));
            if n.is_some() {
                log(
                    ctx,
                    key,
                    &Change::ConsumerDel {
                        group: gname.to_vec(),
                        name: cname.to_vec(),
                    },
                );
            }
            notify(ctx, STREAM, "xgroup-delconsumer", key);
            Reply::Int(n.unwrap_or(0) as i64)
        }
        _ => syntax(),
    }
}

fn help(lines: &[&str]) -> Reply {
    Reply::Array(
        lines
            .iter()
            .map(|l| Reply::Simple(l.to_string().into()))
            .collect(),
    )
}

/// XACK key group id [id ...]: acknowledges the pending entries, answers how many
/// were pending (0 for a missing key or group, whatever the IDs). Every ID is checked
/// before any is acknowledged.
pub fn xack(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, gname) = (args[1], args[2]);
    let has = match stream_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e.is_some_and(|e| stream::of(e).groups.contains_key(gname)),
    };
    if !has {
        return Reply::Int(0);
    }
    let mut ids = Vec::with_capacity(args.len() - 3);
    for a in &args[3..] {
        match strict_id(a, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return e,
        }
    }
    let acked: Vec<Id> = change(ks, key, ctx.now_ms, |s| {
        ids.iter().copied().filter(|&id| s.ack(gname, id)).collect()
    });
    if !acked.is_empty() {
        let n = acked.len() as i64;
        log(
            ctx,
            key,
            &Change::Ack {
                group: gname.to_vec(),
                ids: acked,
            },
        );
        return Reply::Int(n);
    }
    Reply::Int(0)
}

/// XPENDING key group \[\[IDLE min-idle-time\] start end count \[consumer\]\]: without a
/// range, `[count, first ID, last ID, [[consumer, count], ...]]` (nils when nothing is
/// pending); with one, up to `count` pending entries from start to end (of one
/// consumer, if named; idle at least IDLE ms), each `[id, consumer, idle ms,
/// deliveries]`. `NOGROUP` for a missing key or group.
pub fn xpending(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, gname) = (args[1], args[2]);
    let n = args.len();
    if n != 3 && !(6..=9).contains(&n) {
        return SYNTAX_ERR;
    }
    let mut minidle = 0i64;
    let mut window = None;
    if n >= 6 {
        let mut at = 3;
        if eq(args[3], "idle") {
            match int(args[4]) {
                Ok(v) => minidle = v,
                Err(e) => return e,
            }
            if n < 8 {
                return SYNTAX_ERR;
            }
            at += 2;
        }
        let count = match int(args[at + 2]) {
            Ok(c) => c.max(0) as usize,
            Err(e) => return e,
        };
        let from = match bound(args[at], true) {
            Ok(x) => x,
            Err(e) => return e,
        };
        let to = match bound(args[at + 1], false) {
            Ok(x) => x,
            Err(e) => return e,
        };
        window = Some((from, to, count, args.get(at + 3).copied()));
    }
    let now = ctx.now_ms;
    let s = match stream_of(ks, key, now) {
        Err(e) => return e,
        Ok(Some(e)) => stream::of(e),
        Ok(None) => return nogroup(key, gname),
    };
    let Some(g) = s.groups.get(gname) else {
        return nogroup(key, gname);
    };
    let Some((from, to, count, consumer)) = window else {
        if g.pel.is_empty() {
            return Reply::Array(vec![Reply::Int(0), Reply::Nil, Reply::Nil, Reply::NilArray]);
        }
        let first = *g.pel.keys().next().expect("not empty");
        let last = *g.pel.keys().next_back().expect("not empty");
        let cons = g
            .consumers
            .iter()
            .filter(|(_, c)| !c.pel.is_empty())
            .map(|(name, c)| {
                Reply::Array(vec![
                    Reply::bulk(name),
                    Reply::Bulk(c.pel.len().to_string().into_bytes()),
                ])
            })
            .collect();
        return Reply::Array(vec![
            Reply::Int(g.pel.len() as i64),
            id_reply(first),
            id_reply(last),
            Reply::Array(cons),
        ]);
    };
    let ids: Vec<Id> = match consumer {
        Some(c) => match g.consumers.get(c) {
            None => return Reply::Array(vec![]),
            Some(c) => c.pel.range(from..).copied().collect(),
        },
        None => g.pel.range(from..).map(|(i, _)| *i).collect(),
    };
    let mut out = Vec::new();
    for id in ids {
        if out.len() >= count || id > to {
            break;
        }
        let p = &g.pel[&id];
        let idle = now as i64 - p.delivery_time as i64;
        if minidle != 0 && idle < minidle {
            continue;
        }
        out.push(Reply::Array(vec![
            id_reply(id),
            Reply::bulk(&p.consumer),
            Reply::Int(idle.max(0)),
            Reply::Int(p.delivery_count as i64),
        ]));
    }
    Reply::Array(out)
}

/// The group and whether the consumer is new, for XCLAIM and XAUTOCLAIM.
fn claim_target(ks: &mut Keyspace, key: &[u8], gname: &[u8], now: u64) -> Result<(), Reply> {
    match stream_of(ks, key, now)? {
        Some(e) if stream::of(e).groups.contains_key(gname) => Ok(()),
        _ => Err(nogroup(key, gname)),
    }
}

/// Claims (or drops, for entries no longer in the stream) the pending entries of
/// `plan` for the consumer: the records and whether the consumer was made.
struct Claimed {
    changes: Vec<Change>,
    made: bool,
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-ms]
/// \[RETRYCOUNT count\] \[FORCE\] \[JUSTID\] \[LASTID id\]: gives the consumer the pending
/// entries idle at least min-idle-time (FORCE: also entries not pending, if in the
/// stream), setting their delivery time (now, or IDLE/TIME) and count (RETRYCOUNT, or
/// one more unless JUSTID); a pending entry no longer in the stream is dropped from
/// the pending list. Answers the claimed entries (their IDs with JUSTID).
pub fn xclaim(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, gname, cname) = (args[1], args[2], args[3]);
    let now = ctx.now_ms;
    if let Err(e) = claim_target(ks, key, gname, now) {
        return e;
    }
    let minidle = match parse_i64(args[4]) {
        Some(v) => v.max(0),
        None => return Reply::err("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match Id::parse(args[j], 0) {
            Some(id) => ids.push(id),
            None => break,
        }
        j += 1;
    }
    let (mut force, mut justid) = (false, false);
    let mut retry: Option<u64> = None;
    let mut time: Option<i64> = None;
    let mut lastid = Id::MIN;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = args[j];
        if eq(a, "force") {
            force = true;
        } else if eq(a, "justid") {
            justid = true;
        } else if eq(a, "idle") && more {
            j += 1;
            match parse_i64(args[j]) {
                Some(v) => time = Some(now as i64 - v),
                None => return Reply::err("ERR Invalid IDLE option argument for XCLAIM"),
            }
        } else if eq(a, "time") && more {
            j += 1;
            match parse_i64(args[j]) {
                Some(v) => time = Some(v),
                None => return Reply::err("ERR Invalid TIME option argument for XCLAIM"),
            }
        } else if eq(a, "retrycount") && more {
            j += 1;
            match parse_i64(args[j]) {
                Some(v) => retry = (v >= 0).then_some(v as u64),
                None => return Reply::err("ERR Invalid RETRYCOUNT option argument for XCLAIM"),
            }
        } else if eq(a, "lastid") && more {
            j += 1;
            match strict_id(args[j], 0) {
                Ok(id) => lastid = id,
                Err(e) => return e,
            }
        } else {
            return Reply::error(format!(
                "ERR Unrecognized XCLAIM option '{}'",
                String::from_utf8_lossy(a)
            ));
        }
        j += 1;
    }
    let time = match time {
        Some(t) if t >= 0 && t <= now as i64 => t as u64,
        _ => now,
    };
    let (out, claimed) = change(ks, key, now, |s| {
        let mut changes = Vec::new();
        let mut made = false;
        let mut out = Vec::new();
        let g = &s.groups[gname];
        if lastid > g.last_id {
            let er = g.entries_read;
            s.set_group(gname, lastid, er);
            changes.push(Change::Group {
                name: gname.to_vec(),
                last_id: lastid,
                entries_read: er,
            });
        }
        let mut drops = Vec::new();
        let mut claims = Vec::new();
        let mut touched = false;
        for id in ids {
            let g = &s.groups[gname];
            let pending = g.pel.get(&id).cloned();
            if s.get(id).is_none() {
                if pending.is_some() {
                    s.ack(gname, id);
                    drops.push(id);
                }
                continue;
            }
            let (count, fresh) = match pending {
                Some(p) => {
                    if minidle != 0 && (now as i64 - p.delivery_time as i64) < minidle {
                        continue;
                    }
                    (p.delivery_count, false)
                }
                None if force => (1, true),
                None => continue,
            };
            let _ = fresh;
            if !touched {
                made = s.touch_consumer(gname, cname, now);
                touched = true;
            }
            let count = match retry {
                Some(r) => r,
                None if justid => count,
                None => count + 1,
            };
            s.claim(gname, cname, id, time, count);
            claims.push((id, time, count));
            out.push(if justid {
                id_reply(id)
            } else {
                match s.get(id) {
                    Some(it) => entry_reply(id, it),
                    None => Reply::Nil,
                }
            });
        }
        claim_changes(
            &mut changes,
            (gname, cname),
            drops,
            touched.then_some(now),
            claims,
        );
        (out, Claimed { changes, made })
    });
    finish_claim(ctx, key, claimed);
    Reply::Array(out)
}

/// The records of a claim: the pending entries dropped (no longer in the stream), the
/// consumer's seen time (if it claimed any), the entries claimed.
fn claim_changes(
    changes: &mut Vec<Change>,
    (gname, cname): (&[u8], &[u8]),
    drops: Vec<Id>,
    seen: Option<u64>,
    claims: Vec<(Id, u64, u64)>,
) {
    if !drops.is_empty() {
        changes.push(Change::Ack {
            group: gname.to_vec(),
            ids: drops,
        });
    }
    if let Some(seen) = seen {
        changes.push(Change::Consumer {
            group: gname.to_vec(),
            name: cname.to_vec(),
            seen,
        });
    }
    if !claims.is_empty() {
        changes.push(Change::Claim {
            group: gname.to_vec(),
            consumer: cname.to_vec(),
            items: claims,
        });
    }
}

fn finish_claim(ctx: &mut Ctx<'_>, key: &[u8], c: Claimed) {
    for ch in &c.changes {
        log(ctx, key, ch);
    }
    if c.made {
        notify(ctx, STREAM, "xgroup-createconsumer", key);
    }
}

/// XAUTOCLAIM key group consumer min-idle-time start \[COUNT count\] \[JUSTID\]: XCLAIM
/// of the pending entries from start on idle at least min-idle-time, at most COUNT
/// (100) of them, looking at ten times as many. Answers `[next start (0-0 when the
/// list is done), claimed entries, IDs dropped because no longer in the stream]`.
pub fn xautoclaim(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, gname, cname) = (args[1], args[2], args[3]);
    let now = ctx.now_ms;
    let minidle = match parse_i64(args[4]) {
        Some(v) => v.max(0),
        None => return Reply::err("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match bound(args[5], true) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut count: u64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = j + 1 < args.len();
        if eq(args[j], "count") && more {
            match parse_i64(args[j + 1]) {
                Some(v) if (1..=(i64::MAX / 16)).contains(&v) => count = v as u64,
                _ => return Reply::err("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if eq(args[j], "justid") {
            justid = true;
        } else {
            return SYNTAX_ERR;
        }
        j += 1;
    }
    if let Err(e) = claim_target(ks, key, gname, now) {
        return e;
    }
    let (reply, claimed) = change(ks, key, now, |s| {
        let mut attempts = count * 10;
        let mut left = count;
        let pel: Vec<Id> = s.groups[gname]
            .pel
            .range(start..)
            .map(|(i, _)| *i)
            .collect();
        let mut it = pel.into_iter();
        let (mut out, mut drops, mut claims) = (Vec::new(), Vec::new(), Vec::new());
        let mut made = false;
        let mut touched = false;
        while attempts > 0 && left > 0 {
            attempts -= 1;
            let Some(id) = it.next() else { break };
            if s.get(id).is_none() {
                s.ack(gname, id);
                drops.push(id);
                left -= 1;
                continue;
            }
            let p = s.groups[gname].pel[&id].clone();
            if minidle != 0 && (now as i64 - p.delivery_time as i64) < minidle {
                continue;
            }
            if !touched {
                made = s.touch_consumer(gname, cname, now);
                touched = true;
            }
            let c = if justid {
                p.delivery_count
            } else {
                p.delivery_count + 1
            };
            s.claim(gname, cname, id, now, c);
            claims.push((id, now, c));
            out.push(if justid {
                id_reply(id)
            } else {
                entry_reply(id, s.get(id).expect("checked"))
            });
            left -= 1;
        }
        let next = it.next().unwrap_or(Id::MIN);
        let mut changes = Vec::new();
        let dropped = Reply::Array(drops.iter().map(|&i| id_reply(i)).collect());
        claim_changes(
            &mut changes,
            (gname, cname),
            drops,
            touched.then_some(now),
            claims,
        );
        (
            Reply::Array(vec![id_reply(next), Reply::Array(out), dropped]),
            Claimed { changes, made },
        )
    });
    finish_claim(ctx, key, claimed);
    reply
}

// ---- XINFO -------------------------------------------------------------------------

fn field(name: &str, v: Reply) -> (Reply, Reply) {
    (Reply::Bulk(name.as_bytes().to_vec()), v)
}

fn entry_or_nil(e: Option<(Id, &Item)>) -> Reply {
    e.map_or(Reply::Nil, |(i, it)| entry_reply(i, it))
}

fn lag_reply(s: &Stream, g: &stream::Group) -> Reply {
    s.lag(g).map_or(Reply::Nil, Reply::Int)
}

fn entries_read_reply(g: &stream::Group) -> Reply {
    if g.entries_read == -1 {
        Reply::Nil
    } else {
        Reply::Int(g.entries_read)
    }
}

/// XINFO STREAM key [FULL [COUNT count]], GROUPS key, CONSUMERS key group, HELP: the
/// stream's, its groups' or a group's consumers' state, as maps (Redis 7.0's fields).
/// `ERR no such key` for a missing key; `NOGROUP` for a missing group.
pub fn xinfo(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" {
        return help(&[
            "XINFO STREAM <key> [FULL [COUNT <n>]]",
            "    What the stream holds (FULL: its entries and groups too, COUNT of each).",
            "XINFO GROUPS <key>",
            "    The stream's consumer groups.",
            "XINFO CONSUMERS <key> <group>",
            "    The consumers of the group.",
            "XINFO HELP",
            "    Shows this text.",
        ]);
    }
    let now = ctx.now_ms;
    let syntax = || {
        Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
            String::from_utf8_lossy(args[1])
        ))
    };
    if args.len() < 3 {
        return syntax();
    }
    let key = args[2];
    let s = match stream_of(ks, key, now) {
        Err(e) => return e,
        Ok(None) => return NO_KEY,
        Ok(Some(e)) => stream::of(e),
    };
    // STREAM's options.
    let mut full = false;
    let mut count = 10usize;
    if sub == b"stream" {
        match args.len() {
            3 => {}
            4 | 6 if eq(args[3], "full") => {
                full = true;
                if args.len() == 6 {
                    if !eq(args[4], "count") {
                        return SYNTAX_ERR;
                    }
                    match int(args[5]) {
                        Ok(n) => count = if n <= 0 { usize::MAX } else { n as usize },
                        Err(e) => return e,
                    }
                }
            }
            _ => return SYNTAX_ERR,
        }
    }
    match &sub[..] {
        b"stream" => {
            let mut m = vec![
                field("length", Reply::Int(s.len() as i64)),
                field("radix-tree-keys", Reply::Int(s.nodes() as i64)),
                field("radix-tree-nodes", Reply::Int(s.nodes() as i64 + 1)),
                field("last-generated-id", id_reply(s.last_id)),
                field("max-deleted-entry-id", id_reply(s.max_deleted)),
                field("entries-added", Reply::Int(s.entries_added as i64)),
                field("recorded-first-entry-id", id_reply(s.first_id())),
            ];
            if !full {
                m.push(field("groups", Reply::Int(s.groups.len() as i64)));
                m.push(field("first-entry", entry_or_nil(s.first())));
                m.push(field("last-entry", entry_or_nil(s.last())));
                return Reply::Map(m);
            }
            m.push(field(
                "entries",
                Reply::Array(
                    s.range(Id::MIN, Id::MAX)
                        .take(count)
                        .map(|(i, it)| entry_reply(i, it))
                        .collect(),
                ),
            ));
            let groups = s
                .groups
                .iter()
                .map(|(name, g)| {
                    let pel = g
                        .pel
                        .iter()
                        .take(count)
                        .map(|(id, p)| {
                            Reply::Array(vec![
                                id_reply(*id),
                                Reply::bulk(&p.consumer),
                                Reply::Int(p.delivery_time as i64),
                                Reply::Int(p.delivery_count as i64),
                            ])
                        })
                        .collect();
                    let consumers = g
                        .consumers
                        .iter()
                        .map(|(cname, c)| {
                            let pending = c
                                .pel
                                .iter()
                                .take(count)
                                .map(|id| {
                                    let p = &g.pel[id];
                                    Reply::Array(vec![
                                        id_reply(*id),
                                        Reply::Int(p.delivery_time as i64),
                                        Reply::Int(p.delivery_count as i64),
                                    ])
                                })
                                .collect();
                            Reply::Map(vec![
                                field("name", Reply::bulk(cname)),
                                field("seen-time", Reply::Int(c.seen_time as i64)),
                                field("pel-count", Reply::Int(c.pel.len() as i64)),
                                field("pending", Reply::Array(pending)),
                            ])
                        })
                        .collect();
                    Reply::Map(vec![
                        field("name", Reply::bulk(name)),
                        field("last-delivered-id", id_reply(g.last_id)),
                        field("entries-read", entries_read_reply(g)),
                        field("lag", lag_reply(s, g)),
                        field("pel-count", Reply::Int(g.pel.len() as i64)),
                        field("pending", Reply::Array(pel)),
                        field("consumers", Reply::Array(consumers)),
                    ])
                })
                .collect();
            m.push(field("groups", Reply::Array(groups)));
            Reply::Map(m)
        }
        b"groups" if args.len() == 3 => Reply::Array(
            s.groups
                .iter()
                .map(|(name, g)| {
                    Reply::Map(vec![
                        field("name", Reply::bulk(name)),
                        field("consumers", Reply::Int(g.consumers.len() as i64)),
                        field("pending", Reply::Int(g.pel.len() as i64)),
                        field("last-delivered-id", id_reply(g.last_id)),
                        field("entries-read", entries_read_reply(g)),
                        field("lag", lag_reply(s, g)),
                    ])
                })
                .collect(),
        ),
        b"consumers" if args.len() == 4 => {
            let gname = args[3];
            let Some(g) = s.groups.get(gname) else {
                return Reply::error(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(gname),
                    String::from_utf8_lossy(key)
                ));
            };
            Reply::Array(
                g.consumers
                    .iter()
                    .map(|(name, c)| {
                        Reply::Map(vec![
                            field("name", Reply::bulk(name)),
                            field("pending", Reply::Int(c.pel.len() as i64)),
                            field("idle", Reply::Int((now as i64 - c.seen_time as i64).max(0))),
                        ])
                    })
                    .collect(),
            )
        }
        _ => syntax(),
    }
}

/// What COMMAND DOCS says of a stream command or subcommand (`None` for another).
pub fn doc(name: &str) -> Option<super::docs::Doc> {
    const O1: &str = "O(1)";
    const IDS: &str = "O(N) where N is the number of IDs given";
    const RANGE: &str = "O(log(N)+M) where N is the number of entries and M the number answered";
    let (summary, since, complexity) = match name {
        "xadd" => (
            "Appends an entry to a stream, making it if missing",
            "5.0.0",
            O1,
        ),
        "xlen" => ("Returns the number of entries of a stream", "5.0.0", O1),
        "xrange" => (
            "Returns the entries of a stream within a range of IDs",
            "5.0.0",
            RANGE,
        ),
        "xrevrange" => (
            "Returns the entries of a stream within a range of IDs, last first",
            "5.0.0",
            RANGE,
        ),
        "xdel" => ("Removes entries from a stream", "5.0.0", IDS),
        "xtrim" => ("Removes the oldest entries of a stream", "5.0.0", RANGE),
        "xsetid" => ("Sets a stream's last ID", "5.0.0", O1),
        "xread" => (
            "Returns the entries of streams after given IDs",
            "5.0.0",
            RANGE,
        ),
        "xreadgroup" => (
            "Returns the entries of streams for a consumer of a group",
            "5.0.0",
            RANGE,
        ),
        "xack" => (
            "Acknowledges entries pending in a consumer group",
            "5.0.0",
            IDS,
        ),
        "xpending" => (
            "Returns the entries pending in a consumer group",
            "5.0.0",
            RANGE,
        ),
        "xclaim" => (
            "Gives pending entries of a group to another consumer",
            "5.0.0",
            IDS,
        ),
        "xautoclaim" => (
            "Gives the pending entries idle long enough to another consumer",
            "6.2.0",
            RANGE,
        ),
        "xgroup" => (
            "A container for consumer group commands",
            "5.0.0",
            "Depends on the subcommand",
        ),
        "xgroup|create" => ("Makes a consumer group", "5.0.0", O1),
        "xgroup|createconsumer" => ("Makes a consumer in a consumer group", "6.2.0", O1),
        "xgroup|delconsumer" => ("Removes a consumer from a consumer group", "5.0.0", O1),
        "xgroup|destroy" => ("Removes a consumer group", "5.0.0", O1),
        "xgroup|setid" => (
            "Sets the last delivered ID of a consumer group",
            "5.0.0",
            O1,
        ),
        "xgroup|help" => ("What XGROUP's subcommands do", "5.0.0", O1),
        "xinfo" => (
            "A container for stream introspection commands",
            "5.0.0",
            "Depends on the subcommand",
        ),
        "xinfo|stream" => ("Returns what a stream holds", "5.0.0", O1),
        "xinfo|groups" => ("Returns a stream's consumer groups", "5.0.0", O1),
        "xinfo|consumers" => ("Returns the consumers of a consumer group", "5.0.0", O1),
        "xinfo|help" => ("What XINFO's subcommands do", "5.0.0", O1),
        _ => return None,
    };
    Some(super::docs::Doc {
        summary,
        since,
        group: "stream",
        complexity,
    })
}
