//! The list commands (Redis 7.0's t_list.c, for behaviour): LPUSH, RPUSH, LPUSHX,
//! RPUSHX, LPOP, RPOP, LLEN, LRANGE, LINDEX, LSET, LINSERT, LREM, LTRIM, LPOS, LMPOP,
//! LMOVE, RPOPLPUSH; and the primitives the blocking commands build on ([`push`],
//! [`pop`]).
//!
//! Each function checks its arguments first, then the key's type (`WRONGTYPE` for a
//! key of another type: nothing changes), then, for a write that may grow memory, what
//! it would add against `ctx.room` (Redis's OOM error, nothing changed, if it does not
//! fit), then changes and logs. A list that does not exist yet is logged as its whole
//! state once the command made it (a `List` record, and `RPush` records past 1 MiB); a
//! change of an existing list as the change: `LPush`/`RPush` of the elements pushed,
//! `LPop`/`RPop` of how many left an end, `LSet` of the index and value, `LInsert` of
//! the index the element took, `LRem` of the positions removed; nothing when nothing
//! changed (docs/kv-types.md). A list that loses its last element is removed, and
//! logged as `Del`. Commands keep the key's expiry. Each change fires Redis 7.0's
//! keyspace events (`new`, `lpush`, `rpop`, `lset`, `linsert`, `lrem`, `ltrim`, and
//! `del` for a list emptied), in Redis's order.
//!
//! LMOVE, RPOPLPUSH and LMPOP name several keys: when those fall on several shards the
//! server runs them as one transaction over the shards (`run_server`), so no client
//! sees an element in both lists or in neither; on one shard they are one closure
//! ([`lmove`], [`lmpop`]).
//!
//! Reply shapes: LPOP/RPOP without a count answer a bulk string or nil; with a count an
//! array, or a nil array (`*-1` in RESP2, `_` in RESP3) for a missing key; LMPOP
//! answers `[key, [elements]]` or a nil array.

use super::strings::make_room;
use super::{parse_i64, Ctx, ShardFn, NOT_INT, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::exec::{Acks, Held, ShardSet};
use crate::keyspace::list::{self, End, NODE_OVERHEAD};
use crate::keyspace::{tag, Entry, Keyspace, Type};
use crate::log::{encode_split, Items, RecordRef};
use crate::packed;
use crate::pubsub::{notify, GENERIC, LIST, NEW};
use crate::resp::Reply;

/// The live list in `key` (`None` if there is none), or `WRONGTYPE` if the key holds
/// another type.
#[inline]
fn list_of<'a>(ks: &'a mut Keyspace, key: &[u8], now_ms: u64) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if e.kind() != Type::List => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// At most what adding `count` elements of `bytes` packed bytes to the list `e` (or a
/// new list of `key`) adds to memory: the bytes, the nodes they may take, and for a
/// packed list the nodes its conversion may make.
pub(super) fn growth(e: Option<&Entry>, key: &[u8], count: usize, bytes: usize) -> u64 {
    let nodes = list::nodes_bound(count, bytes) as u64 + 1;
    let more = match e {
        None => Keyspace::entry_memory(key.len(), 0, false),
        Some(e) if e.tag() == tag::LIST_PACKED => {
            NODE_OVERHEAD * list::nodes_bound(list::len(e), e.value().len()) as u64
        }
        Some(_) => 0,
    };
    bytes as u64 + NODE_OVERHEAD * nodes + more
}

/// The packed bytes of `elems`.
pub(super) fn packed_len(elems: &[&[u8]]) -> usize {
    elems.iter().map(|x| packed::element_bytes(x.len())).sum()
}

/// Pushes `elems` one after another at `end` of the list `key` (LPUSH a b c leaves c
/// at the head), creating the list unless `only_existing`: the list's new length, or
/// `None` when `only_existing` and there is no list (nothing changes). Errors (nothing
/// changed): `WRONGTYPE`; OOM over the memory limit or if the elements do not fit.
/// Logged: a new list as its whole state, an existing one as `LPush`/`RPush` of
/// `elems` (split into records of at most 1 MiB). `elems` must not be empty.
pub fn push(
    ks: &mut Keyspace,
    key: &[u8],
    end: End,
    elems: &[&[u8]],
    only_existing: bool,
    ctx: &mut Ctx<'_>,
) -> Result<Option<usize>, Reply> {
    if ctx.over_memory {
        return Err(OOM);
    }
    let now = ctx.now_ms;
    let e = list_of(ks, key, now)?;
    let exists = e.is_some();
    if !exists && only_existing {
        return Ok(None);
    }
    if ctx.room != u64::MAX {
        let grow = growth(e, key, elems.len(), packed_len(elems));
        make_room(ks, grow, ctx)?;
    }
    if exists {
        let n = ks
            .modify(key, now, |e| {
                list::push(e, end, elems.iter().copied());
                list::len(e)
            })
            .expect("the list is there");
        encode_split(
            ctx.db,
            elems,
            1,
            |items| match end {
                End::Left => RecordRef::LPush { key, items },
                End::Right => RecordRef::RPush { key, items },
            },
            ctx.log,
        );
        notify(ctx, LIST, push_event(end), key);
        return Ok(Some(n));
    }
    let e = match end {
        End::Right => list::new_entry(key, Items::Slices(elems), None, 0),
        End::Left => {
            let rev: Vec<&[u8]> = elems.iter().rev().copied().collect();
            list::new_entry(key, Items::Slices(&rev), None, 0)
        }
    };
    ks.put(e);
    let e = ks.peek(key, now).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
    notify(ctx, NEW, "new", key);
    notify(ctx, LIST, push_event(end), key);
    Ok(Some(elems.len()))
}

/// The event a push at `end` fires.
fn push_event(end: End) -> &'static str {
    match end {
        End::Left => "lpush",
        End::Right => "rpush",
    }
}

/// The event a pop from `end` fires.
fn pop_event(end: End) -> &'static str {
    match end {
        End::Left => "lpop",
        End::Right => "rpop",
    }
}

/// Pops up to `count` elements from `end` of the list `key`, in the order they leave
/// (from the tail first for `Right`): `None` if there is no list, an empty vector for
/// a count of 0. `WRONGTYPE` for a key of another type. Logged as `LPop`/`RPop` of how
/// many left, or `Del` when the list is emptied (and removed).
pub fn pop(
    ks: &mut Keyspace,
    key: &[u8],
    end: End,
    count: usize,
    ctx: &mut Ctx<'_>,
) -> Result<Option<Vec<Vec<u8>>>, Reply> {
    let now = ctx.now_ms;
    let len = match list_of(ks, key, now)? {
        None => return Ok(None),
        Some(e) => list::len(e),
    };
    if count == 0 {
        return Ok(Some(Vec::new()));
    }
    let mut out = Vec::with_capacity(count.min(len));
    ks.modify(key, now, |e| {
        list::pop(e, end, count, &mut |x| out.push(x.to_vec()))
    })
    .expect("the list is there");
    if count >= len {
        ctx.record(&RecordRef::Del { key });
    } else {
        let count = count as u64;
        ctx.record(&match end {
            End::Left => RecordRef::LPop { key, count },
            End::Right => RecordRef::RPop { key, count },
        });
    }
    notify(ctx, LIST, pop_event(end), key);
    if count >= len {
        notify(ctx, GENERIC, "del", key);
    }
    Ok(Some(out))
}

fn push_command(
    ks: &mut Keyspace,
    args: &[&[u8]],
    ctx: &mut Ctx<'_>,
    end: End,
    only_existing: bool,
) -> Reply {
    match push(ks, args[1], end, &args[2..], only_existing, ctx) {
        Ok(n) => Reply::Int(n.unwrap_or(0) as i64),
        Err(e) => e,
    }
}

/// LPUSH key element [element ...]: pushes each element at the head in turn
/// (creating the list), answers the new length.
pub fn lpush(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    push_command(ks, args, ctx, End::Left, false)
}

/// RPUSH key element [element ...]: pushes each element at the tail in turn.
pub fn rpush(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    push_command(ks, args, ctx, End::Right, false)
}

/// LPUSHX key element [element ...]: LPUSH only onto an existing list; 0 (nothing
/// changed) for a missing key.
pub fn lpushx(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    push_command(ks, args, ctx, End::Left, true)
}

/// RPUSHX key element [element ...]: RPUSH only onto an existing list.
pub fn rpushx(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    push_command(ks, args, ctx, End::Right, true)
}

/// LPOP / RPOP key [count]. Without a count: the element, or nil for a missing key.
/// With one: an array of up to count elements (empty for 0 on an existing list), or a
/// nil array for a missing key. The count not an integer, or negative: `ERR value is
/// out of range, must be positive` (checked before the key); more arguments: `ERR
/// wrong number of arguments for 'lpop' command`.
fn pop_command(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, end: End) -> Reply {
    if args.len() > 3 {
        return Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(args[0]).to_ascii_lowercase()
        ));
    }
    let count = match args.get(2) {
        None => None,
        Some(c) => match parse_i64(c) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Reply::err("ERR value is out of range, must be positive"),
        },
    };
    match (pop(ks, args[1], end, count.unwrap_or(1), ctx), count) {
        (Err(e), _) => e,
        (Ok(None), None) => Reply::Nil,
        (Ok(None), Some(_)) => Reply::NilArray,
        (Ok(Some(mut v)), None) => Reply::Bulk(v.pop().expect("one element")),
        (Ok(Some(v)), Some(_)) => Reply::Array(v.into_iter().map(Reply::Bulk).collect()),
    }
}

/// LPOP key \[count\]: pops from the head (see `pop_command`).
pub fn lpop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    pop_command(ks, args, ctx, End::Left)
}

/// RPOP key \[count\]: pops from the tail, the last element first.
pub fn rpop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    pop_command(ks, args, ctx, End::Right)
}

/// LLEN key: the number of elements, 0 for a missing key.
pub fn llen(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match list_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.map_or(0, list::len) as i64),
    }
}

/// A position from the head for `index` (negative: from the tail, -1 the last) in a
/// list of `len`, if it is inside.
fn position(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 {
        index.checked_add(len as i64)?
    } else {
        index
    };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// LINDEX key index: the element at the index (negative counts from the tail), nil if
/// out of range or for a missing key. The key is looked at first (a missing key
/// answers nil whatever the index; WRONGTYPE), then the index must be an integer.
pub fn lindex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let e = match list_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Nil,
        Ok(Some(e)) => e,
    };
    let Some(index) = parse_i64(args[2]) else {
        return NOT_INT;
    };
    match position(index, list::len(e)).and_then(|i| list::get(e, i)) {
        Some(x) => ctx.bulk(x),
        None => Reply::Nil,
    }
}

/// The range `start..=stop` (Redis's inclusive, negative-from-the-tail indexes) of a
/// list of `len`, clamped; `None` if empty.
fn clamp(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

/// LRANGE key start stop: the elements from start to stop inclusive (negative indexes
/// count from the tail; out-of-range ones are clamped); empty for a missing key or an
/// empty range. Either index not an integer: `ERR value is not an integer or out of
/// range` (before the key).
pub fn lrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (Some(start), Some(stop)) = (parse_i64(args[2]), parse_i64(args[3])) else {
        return NOT_INT;
    };
    let e = match list_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(e)) => e,
    };
    let Some((from, to)) = clamp(start, stop, list::len(e)) else {
        return Reply::Array(vec![]);
    };
    let n = to - from + 1;
    ctx.bulk_array(n, list::iter_from(e, from).take(n))
}

/// LSET key index element: replaces the element at the index (negative from the
/// tail), answers OK. A missing key: `ERR no such key`; then WRONGTYPE; then the index
/// not an integer: `ERR value is not an integer or out of range`; outside the list:
/// `ERR index out of range`. Logged as `LSet` of the index from the head.
pub fn lset(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let key = args[1];
    let e = match list_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::err("ERR no such key"),
        Ok(Some(e)) => e,
    };
    let Some(index) = parse_i64(args[2]) else {
        return NOT_INT;
    };
    let Some(i) = position(index, list::len(e)) else {
        return Reply::err("ERR index out of range");
    };
    if ctx.room != u64::MAX {
        let grow = growth(Some(e), key, 1, packed::element_bytes(args[3].len()));
        if let Err(r) = make_room(ks, grow, ctx) {
            return r;
        }
    }
    let value = args[3];
    ks.modify(key, ctx.now_ms, |e| list::set(e, i, value))
        .expect("the list is there");
    ctx.record(&RecordRef::LSet {
        key,
        index: i as u64,
        value,
    });
    notify(ctx, LIST, "lset", key);
    Reply::OK
}

/// LINSERT key BEFORE|AFTER pivot element: inserts the element before or after the
/// first element equal to the pivot (from the head), answers the new length; -1 if
/// there is no such pivot, 0 for a missing key (nothing changes). Another word than
/// BEFORE or AFTER: `ERR syntax error` (before the key). Logged as `LInsert` of the
/// index the element took.
pub fn linsert(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let after = if args[2].eq_ignore_ascii_case(b"after") {
        true
    } else if args[2].eq_ignore_ascii_case(b"before") {
        false
    } else {
        return SYNTAX_ERR;
    };
    if ctx.over_memory {
        return OOM;
    }
    let (key, pivot, value) = (args[1], args[3], args[4]);
    let e = match list_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(e)) => e,
    };
    let Some(at) = list::iter_from(e, 0).position(|x| x == pivot) else {
        return Reply::Int(-1);
    };
    let i = at + after as usize;
    if ctx.room != u64::MAX {
        let grow = growth(Some(e), key, 1, packed::element_bytes(value.len()));
        if let Err(r) = make_room(ks, grow, ctx) {
            return r;
        }
    }
    let n = ks
        .modify(key, ctx.now_ms, |e| {
            list::insert(e, i, value);
            list::len(e)
        })
        .expect("the list is there");
    ctx.record(&RecordRef::LInsert {
        key,
        index: i as u64,
        value,
    });
    notify(ctx, LIST, "linsert", key);
    Reply::Int(n as i64)
}

/// Removes the elements at `positions` (ascending, distinct) of the list `key` of
/// `len` elements, and logs it: `Del` if that is all of them, else `LRem` of the
/// positions (descending, in records of at most 1 MiB: each exact on its own).
fn remove_logged(
    ks: &mut Keyspace,
    key: &[u8],
    positions: &[usize],
    len: usize,
    ctx: &mut Ctx<'_>,
) {
    if positions.is_empty() {
        return;
    }
    ks.modify(key, ctx.now_ms, |e| list::remove(e, positions))
        .expect("the list is there");
    notify(ctx, LIST, "lrem", key);
    if positions.len() == len {
        ctx.record(&RecordRef::Del { key });
        return notify(ctx, GENERIC, "del", key);
    }
    let words: Vec<[u8; 8]> = positions
        .iter()
        .rev()
        .map(|&p| (p as u64).to_le_bytes())
        .collect();
    let slices: Vec<&[u8]> = words.iter().map(|w| &w[..]).collect();
    encode_split(
        ctx.db,
        &slices,
        1,
        |positions| RecordRef::LRem { key, positions },
        ctx.log,
    );
}

/// LREM key count element: removes elements equal to the element: the first `count`
/// from the head (count > 0), the last |count| from the tail (count < 0), or all
/// (0); answers how many. The count not an integer: `ERR value is not an integer or
/// out of range` (before the key); a missing key: 0.
pub fn lrem(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Some(count) = parse_i64(args[2]) else {
        return NOT_INT;
    };
    let (key, value) = (args[1], args[3]);
    let e = match list_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(e)) => e,
    };
    let len = list::len(e);
    let most = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs().min(usize::MAX as u64) as usize
    };
    let mut positions: Vec<usize> = if count >= 0 {
        list::iter_from(e, 0)
            .enumerate()
            .filter(|(_, x)| *x == value)
            .map(|(i, _)| i)
            .take(most)
            .collect()
    } else {
        list::iter_rev(e)
            .enumerate()
            .filter(|(_, x)| *x == value)
            .map(|(i, _)| len - 1 - i)
            .take(most)
            .collect()
    };
    positions.sort_unstable();
    remove_logged(ks, key, &positions, len, ctx);
    Reply::Int(positions.len() as i64)
}

/// LTRIM key start stop: keeps only the elements from start to stop inclusive (as
/// LRANGE reads them), answers OK; an empty range removes the key. Either index not an
/// integer: `ERR value is not an integer or out of range` (before the key); a missing
/// key: OK. Logged as `LPop` and `RPop` of what left each end (`Del` if all did).
pub fn ltrim(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (Some(start), Some(stop)) = (parse_i64(args[2]), parse_i64(args[3])) else {
        return NOT_INT;
    };
    let key = args[1];
    let len = match list_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::OK,
        Ok(Some(e)) => list::len(e),
    };
    let (left, right) = match clamp(start, stop, len) {
        None => (len, 0),
        Some((from, to)) => (from, len - 1 - to),
    };
    if left == len {
        ks.remove(key, ctx.now_ms);
        ctx.record(&RecordRef::Del { key });
        notify(ctx, LIST, "ltrim", key);
        notify(ctx, GENERIC, "del", key);
        return Reply::OK;
    }
    for (end, n) in [(End::Left, left), (End::Right, right)] {
        if n > 0 {
            ks.modify(key, ctx.now_ms, |e| list::pop(e, end, n, &mut |_| {}));
            let count = n as u64;
            ctx.record(&match end {
                End::Left => RecordRef::LPop { key, count },
                End::Right => RecordRef::RPop { key, count },
            });
        }
    }
    notify(ctx, LIST, "ltrim", key);
    Reply::OK
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]` (Redis 7.0's
/// lposCommand): the position of the first match (nil if none), or with COUNT an
/// array of up to num-matches positions (0: all; empty if none). RANK n starts from
/// the n-th match, a negative rank searching from the tail; MAXLEN compares at most
/// that many elements (0: all). Options are read before the key: RANK not an integer,
/// `ERR value is not an integer or out of range`; RANK 0: Redis's error (and -2^63
/// reads as -1, as in Redis 7.0); COUNT or MAXLEN not an integer or negative: `ERR COUNT can't be negative`
/// (`MAXLEN ...`); another word, or one without its value: `ERR syntax error`. A
/// missing key answers nil (an empty array with COUNT).
pub fn lpos(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let mut rank: i64 = 1;
    let mut count: Option<usize> = None;
    let mut maxlen: usize = 0;
    let mut i = 3;
    while i < args.len() {
        if i + 1 >= args.len() {
            return SYNTAX_ERR;
        }
        let (opt, v) = (args[i], args[i + 1]);
        if opt.eq_ignore_ascii_case(b"rank") {
            rank = match parse_i64(v) {
                None => return NOT_INT,
                // Redis 7.0 negates it in C, where it stays itself: the first match
                // from the tail.
                Some(i64::MIN) => -1,
                Some(0) => {
                    return Reply::err(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    )
                }
                Some(r) => r,
            };
        } else if opt.eq_ignore_ascii_case(b"count") {
            match parse_i64(v) {
                Some(n) if n >= 0 => count = Some(n as usize),
                _ => return Reply::err("ERR COUNT can't be negative"),
            }
        } else if opt.eq_ignore_ascii_case(b"maxlen") {
            match parse_i64(v) {
                Some(n) if n >= 0 => maxlen = n as usize,
                _ => return Reply::err("ERR MAXLEN can't be negative"),
            }
        } else {
            return SYNTAX_ERR;
        }
        i += 2;
    }
    let e = match list_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) if count.is_some() => return Reply::Array(vec![]),
        Ok(None) => return Reply::Nil,
        Ok(Some(e)) => e,
    };
    let len = list::len(e);
    let limit = if maxlen == 0 { len } else { maxlen.min(len) };
    let want = match count {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => 1,
    };
    let skip = (rank.unsigned_abs() - 1).min(usize::MAX as u64) as usize;
    let value = args[2];
    let found: Vec<Reply> = if rank > 0 {
        list::iter_from(e, 0)
            .take(limit)
            .enumerate()
            .filter(|(_, x)| *x == value)
            .map(|(i, _)| Reply::Int(i as i64))
            .skip(skip)
            .take(want)
            .collect()
    } else {
        list::iter_rev(e)
            .take(limit)
            .enumerate()
            .filter(|(_, x)| *x == value)
            .map(|(i, _)| Reply::Int((len - 1 - i) as i64))
            .skip(skip)
            .take(want)
            .collect()
    };
    match count {
        Some(_) => Reply::Array(found),
        None => found.into_iter().next().unwrap_or(Reply::Nil),
    }
}

/// LMPOP's parsed arguments: the keys' range in the arguments, the end and the count.
struct Mpop {
    keys: std::ops::Range<usize>,
    end: End,
    count: usize,
}

/// Reads `LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]` (Redis 7.0's
/// lmpopGenericCommand): numkeys not an integer or below 1, `ERR numkeys should be
/// greater than 0`; fewer keys than it says, no LEFT or RIGHT where it should be, or
/// another word after it, `ERR syntax error`; COUNT not an integer or below 1, `ERR
/// count should be greater than 0`.
fn parse_mpop<A: AsRef<[u8]>>(args: &[A]) -> Result<Mpop, Reply> {
    let numkeys = match parse_i64(args[1].as_ref()) {
        Some(n) if n >= 1 => n as u64,
        _ => return Err(Reply::err("ERR numkeys should be greater than 0")),
    };
    let where_at = 2u64.saturating_add(numkeys);
    if where_at >= args.len() as u64 {
        return Err(SYNTAX_ERR);
    }
    let where_at = where_at as usize;
    let end = End::parse(args[where_at].as_ref()).ok_or(SYNTAX_ERR)?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && args[j].as_ref().eq_ignore_ascii_case(b"count") && j + 1 < args.len()
        {
            match parse_i64(args[j + 1].as_ref()) {
                Some(n) if n >= 1 => count = Some(n as usize),
                _ => return Err(Reply::err("ERR count should be greater than 0")),
            }
            j += 2;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok(Mpop {
        keys: 2..where_at,
        end,
        count: count.unwrap_or(1),
    })
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count], with every key on this shard:
/// pops up to count elements from the first key (in the order given) that holds a
/// list, answering `[key, [elements]]`, or a nil array if none does. A key of another
/// type met before a list answers WRONGTYPE. (Keys of several shards: `run_server`.)
pub fn lmpop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let m = match parse_mpop(args) {
        Ok(m) => m,
        Err(e) => return e,
    };
    for &key in &args[m.keys] {
        match pop(ks, key, m.end, m.count, ctx) {
            Err(e) => return e,
            Ok(None) => {}
            Ok(Some(v)) => {
                return Reply::Array(vec![
                    Reply::bulk(key),
                    Reply::Array(v.into_iter().map(Reply::Bulk).collect()),
                ])
            }
        }
    }
    Reply::NilArray
}

/// The ends of an LMOVE (`from`, `to`), or RIGHT, LEFT for RPOPLPUSH; `ERR syntax
/// error` for another word than LEFT or RIGHT.
fn move_ends<A: AsRef<[u8]>>(args: &[A]) -> Result<(End, End), Reply> {
    if args.len() == 3 {
        return Ok((End::Right, End::Left));
    }
    match (End::parse(args[3].as_ref()), End::parse(args[4].as_ref())) {
        (Some(from), Some(to)) => Ok((from, to)),
        _ => Err(SYNTAX_ERR),
    }
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT, and RPOPLPUSH source destination
/// (RIGHT, LEFT), with both keys on this shard: pops an element from one end of the
/// source and pushes it at an end of the destination (created if missing), answering
/// it; nil if the source is missing. The ends are read first (`ERR syntax error`);
/// then WRONGTYPE for the source, then for the destination. Source and destination the
/// same list rotates it. (Keys of two shards: `run_server`.)
pub fn lmove(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (from, to) = match move_ends(args) {
        Ok(ends) => ends,
        Err(e) => return e,
    };
    if ctx.over_memory {
        return OOM;
    }
    let (src, dst) = (args[1], args[2]);
    let (x, len) = match list_of(ks, src, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Nil,
        Ok(Some(e)) => {
            let len = list::len(e);
            let at = if from == End::Left { 0 } else { len - 1 };
            (list::get(e, at).expect("an end").to_vec(), len)
        }
    };
    if src == dst {
        // A rotation: nothing changes for one element, or the same end.
        // It adds no element, so it checks no memory (a pop then a refused push would
        // lose the element).
        if len > 1 && from != to {
            ks.modify(src, ctx.now_ms, |e| {
                list::pop(e, from, 1, &mut |_| {});
                list::push(e, to, [&x[..]]);
            })
            .expect("the list is there");
            let one = [&x[..]];
            let (key, items) = (src, Items::Slices(&one));
            ctx.record(&match from {
                End::Left => RecordRef::LPop { key, count: 1 },
                End::Right => RecordRef::RPop { key, count: 1 },
            });
            ctx.record(&match to {
                End::Left => RecordRef::LPush { key, items },
                End::Right => RecordRef::RPush { key, items },
            });
        }
        // Redis fires both events whatever the list's length or ends.
        notify(ctx, LIST, push_event(to), src);
        notify(ctx, LIST, pop_event(from), src);
        return Reply::Bulk(x);
    }
    if let Err(e) = list_of(ks, dst, ctx.now_ms) {
        return e;
    }
    // The push checks memory (and changes nothing if it fails) before the pop.
    if let Err(e) = push(ks, dst, to, &[&x], false, ctx) {
        return e;
    }
    if let Err(e) = pop(ks, src, from, 1, ctx) {
        return e;
    }
    Reply::Bulk(x)
}

/// Runs `f` with `args` on held shard `s` as a command part: its reply, and the LSN
/// its reply waits for noted in `acks`.
fn part(
    held: &dyn Held,
    s: usize,
    f: ShardFn,
    db: u8,
    args: &[&[u8]],
    now: u64,
    acks: &mut Acks,
) -> Reply {
    let mut out = None;
    held.with(s, &mut |sh| out = Some(sh.run(f, db, args, now, None)));
    let (reply, lsn) = out.expect("the part ran");
    acks.note(s, lsn);
    reply
}

/// LMOVE, RPOPLPUSH and LMPOP as the server (and the embedded store) run them. Keys of
/// one shard run as one closure there ([`lmove`], [`lmpop`]); keys of several shards
/// as one transaction over their shards (`ShardSet::atomically`): LMOVE reads the
/// source's end element, pushes it onto the destination (which checks its type and
/// the memory, changing nothing if it refuses), then pops it from the source; LMPOP
/// tries its keys in order. No client sees the element in both lists or in neither.
pub(crate) fn run_server(
    set: &impl ShardSet,
    name: &str,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Reply {
    let count = set.count();
    let argv = super::borrow_args(args);
    let (f, keys): (ShardFn, Vec<&[u8]>) = match name {
        "lmpop" => match parse_mpop(&argv) {
            Ok(m) => (lmpop, argv[m.keys].to_vec()),
            Err(e) => return e,
        },
        _ => {
            if let Err(e) = move_ends(&argv) {
                return e;
            }
            (lmove, argv[1..3].to_vec())
        }
    };
    let mut shards: Vec<usize> = keys
        .iter()
        .map(|k| crate::route::shard_of(k, count))
        .collect();
    for &s in &shards {
        if let Some(r) = set.refuses_writes(s) {
            return r;
        }
    }
    let now = crate::shard::now_ms();
    shards.sort_unstable();
    shards.dedup();
    if let [s] = shards[..] {
        let (reply, lsn) = set.with(s, |sh| sh.run(f, db, &argv, now, None));
        acks.note(s, lsn);
        return reply;
    }
    set.atomically(&shards, |held| {
        let shard = |k: &[u8]| crate::route::shard_of(k, count);
        if name == "lmpop" {
            let m = parse_mpop(&argv).expect("parsed above");
            let n = m.count.to_string().into_bytes();
            let end: &[u8] = if m.end == End::Left {
                b"left"
            } else {
                b"right"
            };
            for &key in &argv[m.keys] {
                let one: [&[u8]; 6] = [b"lmpop", b"1", key, end, b"count", &n];
                let r = part(held, shard(key), lmpop, db, &one, now, acks);
                if r != Reply::NilArray {
                    return r;
                }
            }
            return Reply::NilArray;
        }
        let (from, to) = move_ends(&argv).expect("parsed above");
        let (src, dst) = (argv[1], argv[2]);
        let at: &[u8] = if from == End::Left { b"0" } else { b"-1" };
        let x = match part(
            held,
            shard(src),
            lindex,
            db,
            &[b"lindex", src, at],
            now,
            acks,
        ) {
            Reply::Bulk(x) => x,
            r => return r,
        };
        let (push_fn, pop_fn): (ShardFn, ShardFn) = (
            if to == End::Left { lpush } else { rpush },
            if from == End::Left { lpop } else { rpop },
        );
        let r = part(
            held,
            shard(dst),
            push_fn,
            db,
            &[b"push", dst, &x],
            now,
            acks,
        );
        if r.is_error() {
            return r;
        }
        part(held, shard(src), pop_fn, db, &[b"pop", src], now, acks)
    })
}
