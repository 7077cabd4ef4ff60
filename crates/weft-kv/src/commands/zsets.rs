//! The sorted-set commands of one key (Redis 7.0's t_zset.c, for behaviour): ZADD,
//! ZINCRBY, ZREM, ZCARD, ZSCORE, ZMSCORE, ZRANK, ZREVRANK, ZCOUNT, ZLEXCOUNT, ZRANGE,
//! ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREVRANGE,
//! ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZPOPMIN, ZPOPMAX, ZRANDMEMBER,
//! ZSCAN; and the keyspace-level pop ([`pop`]) that ZMPOP and the blocking pops use.
//! The commands over several keys (ZUNION, ZINTER, ZDIFF, ZINTERCARD, the STORE forms,
//! ZRANGESTORE, ZMPOP) are in `zsets_multi.rs`, built on the shard functions here.
//!
//! Each function checks its arguments first, then the key's type (`WRONGTYPE` for a
//! key of another type: nothing changes), then, for a write that may grow memory, what
//! it would add against `ctx.room` (OOM, nothing changed), then changes and logs. A
//! sorted set that does not exist yet is logged as its whole state once the command
//! made it (a `ZSet` record); a change of an existing one as the change: `ZAdd` of the
//! members whose score changed, with their new scores (ZINCRBY logs the resulting
//! score, never "add"), `ZRem` of the members removed, or `Del` when a removal empties
//! it. A sorted set that loses its last member is removed. Commands keep the key's
//! expiry. A write that changed something fires Redis 7.0's keyspace events (`new`,
//! then `zadd` or `zincr`; `zrem`, `zremrangebyscore`, `zpopmin`, ..., then `del` if
//! the key went; a STORE form's own name on its destination).
//!
//! Scores are doubles: parsed as Redis's `getDoubleFromObject` (C's strtod over the
//! whole argument: `inf`, `-inf`, `1e3`, `0x10` are numbers; NaN, an empty string, a
//! leading space, a value out of range are not), answered as [`Reply::Double`] (a
//! RESP3 double; in RESP2 a bulk string of `%.17g`, as Redis 7.0). Replies of members
//! with scores are [`Reply::Pairs`] (RESP3: [member, score] arrays; RESP2: flat).

use super::strings::make_room;
use super::{parse_i64, Ctx, NOT_FLOAT, NOT_INT, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::keyspace::zset::{self, View, ELEMENT_OVERHEAD};
use crate::keyspace::{glob_match, Entry, Keyspace, Type};
use crate::log::{encode_split, Items, RecordRef};
use crate::pubsub::{notify, GENERIC, NEW, ZSET};
use crate::resp::Reply;
use std::collections::HashMap;

/// Redis's reply to an increment that makes a score NaN (`inf` plus `-inf`).
const NAN_ERR: Reply = Reply::err("ERR resulting score is not a number (NaN)");
/// Redis's reply to a score range bound that is not a number.
const RANGE_NOT_FLOAT: Reply = Reply::err("ERR min or max is not a float");
/// Redis's reply to a lexicographic range bound that is not `[x`, `(x`, `-` or `+`.
const RANGE_NOT_LEX: Reply = Reply::err("ERR min or max not valid string range item");

/// The live sorted set in `key` (`None` if there is none), or `WRONGTYPE` if the key
/// holds another type.
#[inline]
fn zset_of<'a>(ks: &'a mut Keyspace, key: &[u8], now_ms: u64) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if e.kind() != Type::ZSet => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// C's strtod over `b`: the value, how many bytes it read, and whether the value was
/// out of range (errno ERANGE). Parsing stops at a zero byte, as in C.
pub(super) fn strtod(b: &[u8]) -> (f64, usize, bool) {
    let mut buf = Vec::with_capacity(b.len() + 1);
    buf.extend_from_slice(b);
    buf.push(0);
    let mut end: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: `buf` is NUL-terminated and lives across the call; strtod only reads it
    // and sets `end` to a position inside it; errno is this thread's own.
    let (v, erange) = unsafe {
        *libc::__errno_location() = 0;
        let v = libc::strtod(buf.as_ptr() as *const libc::c_char, &mut end);
        (v, *libc::__errno_location() == libc::ERANGE)
    };
    (v, end as usize - buf.as_ptr() as usize, erange)
}

/// A score argument as Redis's `getDoubleFromObject` reads it: the whole argument is a
/// number (strtod), not empty, not starting with a space, not NaN, not out of range
/// (an overflow, or an underflow to zero).
pub fn parse_score(b: &[u8]) -> Option<f64> {
    if b.is_empty() || b[0].is_ascii_whitespace() || b[0] == 0x0b {
        return None;
    }
    let (v, n, erange) = strtod(b);
    if n != b.len() || v.is_nan() || (erange && (v.is_infinite() || v == 0.0)) {
        return None;
    }
    Some(v)
}

/// A score, or `ERR value is not a valid float`.
fn arg_score(b: &[u8]) -> Result<f64, Reply> {
    parse_score(b).ok_or(NOT_FLOAT)
}

/// A range of scores (ZRANGEBYSCORE's min and max): `(` before a bound excludes it.
#[derive(Clone, Copy, Debug)]
pub struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

impl ScoreRange {
    /// Parses min and max as Redis's zslParseRange (strtod up to the end, or a zero
    /// byte; NaN refused): `ERR min or max is not a float` otherwise.
    pub fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
        let one = |b: &[u8]| -> Option<(f64, bool)> {
            let (ex, b) = match b.first() {
                Some(b'(') => (true, &b[1..]),
                _ => (false, b),
            };
            let (v, n, _) = strtod(b);
            (b.get(n).is_none_or(|&c| c == 0) && !v.is_nan()).then_some((v, ex))
        };
        match (one(min), one(max)) {
            (Some((min, minex)), Some((max, maxex))) => Ok(ScoreRange {
                min,
                max,
                minex,
                maxex,
            }),
            _ => Err(RANGE_NOT_FLOAT),
        }
    }

    fn below_min(&self, s: f64) -> bool {
        if self.minex {
            s <= self.min
        } else {
            s < self.min
        }
    }

    fn within_max(&self, s: f64) -> bool {
        if self.maxex {
            s < self.max
        } else {
            s <= self.max
        }
    }

    /// The ranks `from..to` of the elements of `v` inside the range.
    pub fn ranks(&self, v: &View<'_>) -> (usize, usize) {
        let from = v.count_before(|s, _| self.below_min(s));
        let to = v.count_before(|s, _| self.within_max(s));
        (from, to.max(from))
    }
}

/// One bound of a lexicographic range.
#[derive(Clone, Copy, Debug)]
enum Lex<'a> {
    Min,
    Max,
    Incl(&'a [u8]),
    Excl(&'a [u8]),
}

/// A range of members (ZRANGEBYLEX's min and max): `[x` includes x, `(x` excludes it,
/// `-` and `+` are the lowest and highest of all.
#[derive(Clone, Copy, Debug)]
pub struct LexRange<'a> {
    min: Lex<'a>,
    max: Lex<'a>,
}

impl<'a> LexRange<'a> {
    /// Parses min and max: `ERR min or max not valid string range item` for a bound
    /// that is not one of the four forms.
    pub fn parse(min: &'a [u8], max: &'a [u8]) -> Result<LexRange<'a>, Reply> {
        let one = |b: &'a [u8]| match b.first() {
            Some(b'+') if b.len() == 1 => Some(Lex::Max),
            Some(b'-') if b.len() == 1 => Some(Lex::Min),
            Some(b'[') => Some(Lex::Incl(&b[1..])),
            Some(b'(') => Some(Lex::Excl(&b[1..])),
            _ => None,
        };
        match (one(min), one(max)) {
            (Some(min), Some(max)) => Ok(LexRange { min, max }),
            _ => Err(RANGE_NOT_LEX),
        }
    }

    fn below_min(&self, m: &[u8]) -> bool {
        match self.min {
            Lex::Min => false,
            Lex::Max => true,
            Lex::Incl(x) => m < x,
            Lex::Excl(x) => m <= x,
        }
    }

    fn within_max(&self, m: &[u8]) -> bool {
        match self.max {
            Lex::Min => false,
            Lex::Max => true,
            Lex::Incl(x) => m <= x,
            Lex::Excl(x) => m < x,
        }
    }

    /// The ranks `from..to` of the elements of `v` inside the range (members compared
    /// as bytes: meaningful when every score is the same, as in Redis).
    pub fn ranks(&self, v: &View<'_>) -> (usize, usize) {
        let from = v.count_before(|_, m| self.below_min(m));
        let to = v.count_before(|_, m| self.within_max(m));
        (from, to.max(from))
    }
}

/// The ranks `from..to` that Redis's start and stop (negative: from the end) select of
/// `len` elements; empty when they select nothing.
fn rank_range(start: i64, stop: i64, len: usize) -> (usize, usize) {
    let n = len as i64;
    let mut start = if start < 0 { start + n } else { start };
    let mut stop = if stop < 0 { stop + n } else { stop };
    if start < 0 {
        start = 0;
    }
    if start > stop || start >= n {
        return (0, 0);
    }
    if stop >= n {
        stop = n - 1;
    }
    (start as usize, stop as usize + 1)
}

/// Members with their scores: [member, score] pairs in RESP3, flat in RESP2; or only
/// the members.
fn elements_reply<'a>(items: impl Iterator<Item = (&'a [u8], f64)>, withscores: bool) -> Reply {
    if withscores {
        Reply::Pairs(
            items
                .map(|(m, s)| (Reply::bulk(m), Reply::Double(s)))
                .collect(),
        )
    } else {
        Reply::Array(items.map(|(m, _)| Reply::bulk(m)).collect())
    }
}

/// The elements as 2n flat arguments (member, score bytes, ...), as records take them.
fn flat_pairs(pairs: &[(&[u8], f64)]) -> (Vec<[u8; 8]>, usize) {
    (
        pairs.iter().map(|&(_, s)| zset::score_bytes(s)).collect(),
        pairs.len(),
    )
}

/// Writes `pairs` (member, score; each member once) into the sorted set `key` (which
/// exists as a sorted set if `exists`, else is created) after checking the memory it
/// may add; logs `ZAdd` of them, or the new key's whole state.
fn write_pairs(
    ks: &mut Keyspace,
    key: &[u8],
    pairs: &[(&[u8], f64)],
    exists: bool,
    ctx: &mut Ctx<'_>,
) -> Result<(), Reply> {
    if ctx.room != u64::MAX {
        let grow: u64 = pairs
            .iter()
            .map(|(m, _)| m.len() as u64 + ELEMENT_OVERHEAD)
            .sum::<u64>()
            + if exists {
                0
            } else {
                Keyspace::entry_memory(key.len(), 0, false)
            };
        make_room(ks, grow, ctx)?;
    }
    let (scores, n) = flat_pairs(pairs);
    let mut elements: Vec<&[u8]> = Vec::with_capacity(2 * n);
    for (i, (m, _)) in pairs.iter().enumerate() {
        elements.push(m);
        elements.push(&scores[i]);
    }
    let now = ctx.now_ms;
    if exists {
        ks.modify(key, now, |e| {
            for &(m, s) in pairs {
                zset::set(e, m, s);
            }
        })
        .expect("the sorted set is there");
        encode_split(
            ctx.db,
            &elements,
            2,
            |items| RecordRef::ZAdd { key, items },
            ctx.log,
        );
    } else {
        ks.put(zset::new_entry(key, Items::Slices(&elements), None, 0));
        let e = ks.peek(key, now).expect("just made");
        Keyspace::state_records(e, |r| ctx.record(&r));
    }
    Ok(())
}

/// ZADD's options.
#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// ZADD and ZINCRBY once their arguments are read: `pairs` are (score, member) in
/// argument order, applied one after another as Redis's zsetAdd does.
fn add(
    ks: &mut Keyspace,
    key: &[u8],
    f: AddFlags,
    pairs: &[(f64, &[u8])],
    ctx: &mut Ctx<'_>,
) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    let exists = match zset_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e.is_some(),
    };
    let nothing = |processed: bool, last: f64| {
        if f.incr {
            if processed {
                Reply::Double(last)
            } else {
                Reply::Nil
            }
        } else {
            Reply::Int(0)
        }
    };
    if !exists && f.xx {
        return nothing(false, 0.0);
    }
    // The final score of each member changed, in the order first changed.
    let mut changes: Vec<(&[u8], f64)> = Vec::new();
    let mut at: HashMap<&[u8], usize> = HashMap::new();
    let (mut added, mut updated, mut processed, mut last) = (0i64, 0i64, false, 0.0);
    {
        let view = ks.peek(key, ctx.now_ms).map(zset::view);
        for &(score, member) in pairs {
            let cur = match at.get(member) {
                Some(&i) => Some(changes[i].1),
                None => view.as_ref().and_then(|v| v.score(member)),
            };
            let new = match cur {
                Some(cur) => {
                    if f.nx {
                        continue;
                    }
                    let s = if f.incr { score + cur } else { score };
                    if s.is_nan() {
                        return NAN_ERR;
                    }
                    if (f.lt && s >= cur) || (f.gt && s <= cur) {
                        continue;
                    }
                    processed = true;
                    last = s;
                    if s == cur {
                        continue;
                    }
                    updated += 1;
                    s
                }
                None if f.xx => continue,
                None => {
                    processed = true;
                    last = score;
                    added += 1;
                    score
                }
            };
            match at.get(member) {
                Some(&i) => changes[i].1 = new,
                None => {
                    at.insert(member, changes.len());
                    changes.push((member, new));
                }
            }
        }
    }
    if !changes.is_empty() {
        if let Err(e) = write_pairs(ks, key, &changes, exists, ctx) {
            return e;
        }
        if !exists {
            notify(ctx, NEW, "new", key);
        }
        notify(ctx, ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    if f.incr {
        nothing(processed, last)
    } else {
        Reply::Int(if f.ch { added + updated } else { added })
    }
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`: sets the
/// members' scores (adding those missing; creating the sorted set), answers how many
/// were added (with CH: added or changed).
///
/// - NX: only add new members; XX: only change existing ones (a missing key stays
///   missing). GT / LT: change an existing member only to a greater / lower score
///   (new members are still added). CH: count changed scores too.
/// - INCR: add the score to the member's (0 if new), as ZINCRBY; answers the new
///   score, or nil if an option stopped it.
/// - Errors, before anything changes: an odd number or no pair, `ERR syntax error`;
///   NX with XX, `ERR XX and NX options at the same time are not compatible`; GT, LT
///   and NX together, `ERR GT, LT, and/or NX options at the same time are not
///   compatible`; INCR with several pairs, `ERR INCR option supports a single
///   increment-element pair`; a score that is not a number, `ERR value is not a valid
///   float`; an INCR that makes NaN, `ERR resulting score is not a number (NaN)`.
pub fn zadd(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let a = args[i];
        let flag = if a.eq_ignore_ascii_case(b"nx") {
            &mut f.nx
        } else if a.eq_ignore_ascii_case(b"xx") {
            &mut f.xx
        } else if a.eq_ignore_ascii_case(b"gt") {
            &mut f.gt
        } else if a.eq_ignore_ascii_case(b"lt") {
            &mut f.lt
        } else if a.eq_ignore_ascii_case(b"ch") {
            &mut f.ch
        } else if a.eq_ignore_ascii_case(b"incr") {
            &mut f.incr
        } else {
            break;
        };
        *flag = true;
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return SYNTAX_ERR;
    }
    if f.nx && f.xx {
        return Reply::err("ERR XX and NX options at the same time are not compatible");
    }
    if [f.gt, f.lt, f.nx].iter().filter(|&&on| on).count() > 1 {
        return Reply::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && rest.len() > 2 {
        return Reply::err("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks_exact(2) {
        match arg_score(p[0]) {
            Ok(s) => pairs.push((s, p[1])),
            Err(e) => return e,
        }
    }
    add(ks, args[1], f, &pairs, ctx)
}

/// `ZINCRBY key increment member`: adds the increment to the member's score (0 if the
/// member or the sorted set is missing: both are created), answers the new score.
/// Errors: the increment not a number, `ERR value is not a valid float`; a NaN result
/// (`inf` plus `-inf`), `ERR resulting score is not a number (NaN)`. Logged as the
/// resulting score.
pub fn zincrby(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let by = match arg_score(args[2]) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    add(ks, args[1], f, &[(by, args[3])], ctx)
}

/// Logs the removal of `members` from `key` by the command whose keyspace event is
/// `event`: `Del` if it emptied the sorted set, else `ZRem` records of them (at most 1
/// MiB of members each); fires `event`, then `del` if the key went.
fn log_removed(key: &[u8], members: &[&[u8]], emptied: bool, event: &str, ctx: &mut Ctx<'_>) {
    if members.is_empty() {
        return;
    }
    log_removal(key, members, emptied, ctx);
    notify(ctx, ZSET, event, key);
    if emptied {
        notify(ctx, GENERIC, "del", key);
    }
}

/// The records of [`log_removed`].
fn log_removal(key: &[u8], members: &[&[u8]], emptied: bool, ctx: &mut Ctx<'_>) {
    if emptied {
        ctx.record(&RecordRef::Del { key });
    } else {
        encode_split(
            ctx.db,
            members,
            1,
            |items| RecordRef::ZRem { key, items },
            ctx.log,
        );
    }
}

/// `ZREM key member [member ...]`: removes the members, answers how many were there;
/// the sorted set is removed with its last member. Logged (`ZRem` of the members
/// removed, or `Del`) only if one was removed.
pub fn zrem(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let len = match zset_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(e)) => zset::len(e),
    };
    let members = &args[2..];
    let gone: Vec<&[u8]> = ks
        .modify(key, ctx.now_ms, |e| {
            members
                .iter()
                .copied()
                .filter(|m| zset::remove(e, m).is_some())
                .collect()
        })
        .expect("the sorted set is there");
    log_removed(key, &gone, gone.len() == len, "zrem", ctx);
    Reply::Int(gone.len() as i64)
}

/// `ZCARD key`: the number of members, 0 for a missing key.
pub fn zcard(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.map_or(0, zset::len) as i64),
    }
}

/// `ZSCORE key member`: the member's score, or nil (missing member or key).
pub fn zscore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => e
            .and_then(|e| zset::score(e, args[2]))
            .map_or(Reply::Nil, Reply::Double),
    }
}

/// `ZMSCORE key member [member ...]`: each member's score or nil (all nil for a
/// missing key).
pub fn zmscore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Array(
            args[2..]
                .iter()
                .map(|m| {
                    e.and_then(|e| zset::score(e, m))
                        .map_or(Reply::Nil, Reply::Double)
                })
                .collect(),
        ),
    }
}

fn rank(ks: &mut Keyspace, args: &[&[u8]], ctx: &Ctx<'_>, rev: bool) -> Reply {
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(None) => Reply::Nil,
        Ok(Some(e)) => {
            let v = zset::view(e);
            match v.rank(args[2]) {
                Some((r, _)) if rev => Reply::Int((v.len() - 1 - r) as i64),
                Some((r, _)) => Reply::Int(r as i64),
                None => Reply::Nil,
            }
        }
    }
}

/// `ZRANK key member`: the member's rank by ascending score (0 first), or nil.
pub fn zrank(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    rank(ks, args, ctx, false)
}

/// `ZREVRANK key member`: the member's rank by descending score (0 first), or nil.
pub fn zrevrank(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    rank(ks, args, ctx, true)
}

/// `ZCOUNT key min max`: how many members have a score within the range (`(` excludes
/// a bound; `-inf`, `+inf`). The range is read first: `ERR min or max is not a float`;
/// then the key (0 if missing). O(log n).
pub fn zcount(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let r = match ScoreRange::parse(args[2], args[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(None) => Reply::Int(0),
        Ok(Some(e)) => {
            let (from, to) = r.ranks(&zset::view(e));
            Reply::Int((to - from) as i64)
        }
    }
}

/// `ZLEXCOUNT key min max`: how many members are within the lexicographic range
/// (`[a`, `(a`, `-`, `+`; meaningful when every score is the same). A bad bound: `ERR
/// min or max not valid string range item`.
pub fn zlexcount(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let r = match LexRange::parse(args[2], args[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(None) => Reply::Int(0),
        Ok(Some(e)) => {
            let (from, to) = r.ranks(&zset::view(e));
            Reply::Int((to - from) as i64)
        }
    }
}

/// What a range selects: ranks, scores or members.
#[derive(Clone, Copy, Debug)]
pub enum Spec<'a> {
    /// Start and stop ranks (negative: from the end).
    Rank(i64, i64),
    /// A range of scores.
    Score(ScoreRange),
    /// A range of members.
    Lex(LexRange<'a>),
}

/// A parsed ZRANGE (of any of its forms).
#[derive(Clone, Copy, Debug)]
pub struct Query<'a> {
    /// What it selects.
    pub spec: Spec<'a>,
    /// From the highest score down.
    pub rev: bool,
    /// Answer the scores too.
    pub withscores: bool,
    /// LIMIT's offset (negative: nothing).
    pub offset: i64,
    /// LIMIT's count (negative: all).
    pub count: i64,
}

/// How a ZRANGE form fixes what its arguments select.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// ZRANGE and ZRANGESTORE: ranks, unless BYSCORE or BYLEX says otherwise.
    Any,
    /// ZREVRANGE.
    Rank,
    /// Z\[REV\]RANGEBYSCORE.
    Score,
    /// Z\[REV\]RANGEBYLEX.
    Lex,
}

/// Parses a ZRANGE form's arguments from the range's two bounds (`args[at]`,
/// `args[at + 1]`) on, as Redis's zrangeGenericCommand: the options first (WITHSCORES
/// unless `store`, LIMIT offset count, and for ZRANGE and ZRANGESTORE: REV, BYSCORE,
/// BYLEX; anything else is `ERR syntax error`; LIMIT's numbers not integers, `ERR value
/// is not an integer or out of range`), then their conflicts (LIMIT without BYSCORE or
/// BYLEX: `ERR syntax error, LIMIT is only supported in combination with either BYSCORE
/// or BYLEX`; WITHSCORES with BYLEX: `ERR syntax error, WITHSCORES not supported in
/// combination with BYLEX`), then the bounds (given max first when reversed by score
/// or member).
pub fn parse_query<'a>(
    args: &[&'a [u8]],
    at: usize,
    store: bool,
    by: By,
    rev: bool,
) -> Result<Query<'a>, Reply> {
    let (mut by, mut rev, mut withscores) = (by, rev, false);
    let fixed = by != By::Any;
    let (mut offset, mut count, mut limit) = (0, -1, false);
    let mut j = at + 2;
    while j < args.len() {
        let a = args[j];
        let left = args.len() - j - 1;
        if !store && a.eq_ignore_ascii_case(b"withscores") {
            withscores = true;
        } else if a.eq_ignore_ascii_case(b"limit") && left >= 2 {
            match (parse_i64(args[j + 1]), parse_i64(args[j + 2])) {
                (Some(o), Some(c)) => (offset, count, limit) = (o, c, true),
                _ => return Err(NOT_INT),
            }
            j += 2;
        } else if !fixed && !rev && a.eq_ignore_ascii_case(b"rev") {
            rev = true;
        } else if by == By::Any && a.eq_ignore_ascii_case(b"bylex") {
            by = By::Lex;
        } else if by == By::Any && a.eq_ignore_ascii_case(b"byscore") {
            by = By::Score;
        } else {
            return Err(SYNTAX_ERR);
        }
        j += 1;
    }
    if by == By::Any {
        by = By::Rank;
    }
    if limit && by == By::Rank {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(Reply::err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    let (mut lo, mut hi) = (args[at], args[at + 1]);
    if rev && by != By::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let spec = match by {
        By::Score => Spec::Score(ScoreRange::parse(lo, hi)?),
        By::Lex => Spec::Lex(LexRange::parse(lo, hi)?),
        _ => match (parse_i64(lo), parse_i64(hi)) {
            (Some(a), Some(b)) => Spec::Rank(a, b),
            _ => return Err(NOT_INT),
        },
    };
    Ok(Query {
        spec,
        rev,
        withscores,
        offset,
        count,
    })
}

/// The elements `q` selects of `v`, in its order.
pub fn select<'a>(v: &View<'a>, q: &Query<'_>) -> Vec<(&'a [u8], f64)> {
    let len = v.len();
    let (from, to) = match q.spec {
        Spec::Rank(start, stop) => {
            let (a, b) = rank_range(start, stop, len);
            // Ranks of a reversed range count from the highest.
            return if q.rev {
                v.range(len - b, len - a, true).collect()
            } else {
                v.range(a, b, false).collect()
            };
        }
        Spec::Score(r) => r.ranks(v),
        Spec::Lex(r) => r.ranks(v),
    };
    if q.offset < 0 || q.offset as u64 >= (to - from) as u64 {
        return Vec::new();
    }
    let n = to - from - q.offset as usize;
    let n = if q.count < 0 {
        n
    } else {
        n.min(q.count as usize)
    };
    let skip = q.offset as usize;
    if q.rev {
        v.range(from, to - skip, true).take(n).collect()
    } else {
        v.range(from + skip, to, false).take(n).collect()
    }
}

/// The elements a ZRANGE form selects of `key`, or `WRONGTYPE` (none for a missing
/// key).
fn range_of(
    ks: &mut Keyspace,
    key: &[u8],
    q: &Query<'_>,
    now_ms: u64,
    f: impl FnOnce(Vec<(&[u8], f64)>) -> Reply,
) -> Reply {
    match zset_of(ks, key, now_ms) {
        Err(e) => e,
        Ok(None) => f(Vec::new()),
        Ok(Some(e)) => {
            let v = zset::view(e);
            f(select(&v, q))
        }
    }
}

fn range_cmd(ks: &mut Keyspace, args: &[&[u8]], ctx: &Ctx<'_>, by: By, rev: bool) -> Reply {
    let q = match parse_query(args, 2, false, by, rev) {
        Ok(q) => q,
        Err(e) => return e,
    };
    range_of(ks, args[1], &q, ctx.now_ms, |items| {
        elements_reply(items.into_iter(), q.withscores)
    })
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]`:
/// the members of ranks start to stop (negative: from the end; clamped), or with
/// BYSCORE of scores within min and max (`(` excludes, `-inf`, `+inf`), or with BYLEX
/// of members within min and max (`[a`, `(a`, `-`, `+`); REV reads from the highest
/// score down (and takes max before min for BYSCORE and BYLEX); LIMIT skips `offset`
/// elements (a negative one: none answered) and answers at most `count` (negative:
/// all). Errors are [`parse_query`]'s, then WRONGTYPE; a missing key answers an empty
/// array.
pub fn zrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Any, false)
}

/// `ZREVRANGE key start stop [WITHSCORES]`: ZRANGE ... REV.
pub fn zrevrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Rank, true)
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`: ZRANGE ... BYSCORE.
pub fn zrangebyscore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Score, false)
}

/// `ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]`: ZRANGE ...
/// BYSCORE REV.
pub fn zrevrangebyscore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Score, true)
}

/// `ZRANGEBYLEX key min max [LIMIT offset count]`: ZRANGE ... BYLEX.
pub fn zrangebylex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Lex, false)
}

/// `ZREVRANGEBYLEX key max min [LIMIT offset count]`: ZRANGE ... BYLEX REV.
pub fn zrevrangebylex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    range_cmd(ks, args, ctx, By::Lex, true)
}

/// The ZREMRANGEBY* commands: the range is read first (its errors), then the key
/// (WRONGTYPE; 0 if missing); the members in it are removed, the sorted set with its
/// last member; answers how many. Logged as `ZRem` of the members removed (`Del` if
/// all went).
fn remrange(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, by: By) -> Reply {
    let spec = match by {
        By::Score => ScoreRange::parse(args[2], args[3]).map(Spec::Score),
        By::Lex => LexRange::parse(args[2], args[3]).map(Spec::Lex),
        _ => match (parse_i64(args[2]), parse_i64(args[3])) {
            (Some(a), Some(b)) => Ok(Spec::Rank(a, b)),
            _ => Err(NOT_INT),
        },
    };
    let spec = match spec {
        Ok(s) => s,
        Err(e) => return e,
    };
    let key = args[1];
    let (from, to, len) = match zset_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Int(0),
        Ok(Some(e)) => {
            let v = zset::view(e);
            let (a, b) = match spec {
                Spec::Rank(a, b) => rank_range(a, b, v.len()),
                Spec::Score(r) => r.ranks(&v),
                Spec::Lex(r) => r.ranks(&v),
            };
            (a, b, v.len())
        }
    };
    if from == to {
        return Reply::Int(0);
    }
    let gone = ks
        .modify(key, ctx.now_ms, |e| zset::remove_range(e, from, to))
        .expect("the sorted set is there");
    let refs: Vec<&[u8]> = gone.iter().map(Vec::as_slice).collect();
    let event = match by {
        By::Score => "zremrangebyscore",
        By::Lex => "zremrangebylex",
        _ => "zremrangebyrank",
    };
    log_removed(key, &refs, gone.len() == len, event, ctx);
    Reply::Int(gone.len() as i64)
}

/// `ZREMRANGEBYRANK key start stop`: removes the members of ranks start to stop
/// (negative: from the end). Not integers: `ERR value is not an integer or out of
/// range`.
pub fn zremrangebyrank(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    remrange(ks, args, ctx, By::Rank)
}

/// `ZREMRANGEBYSCORE key min max`: removes the members of scores within the range.
pub fn zremrangebyscore(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    remrange(ks, args, ctx, By::Score)
}

/// `ZREMRANGEBYLEX key min max`: removes the members within the lexicographic range.
pub fn zremrangebylex(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    remrange(ks, args, ctx, By::Lex)
}

/// Pops up to `count` members of the lowest scores (with `max`, the highest) from the
/// sorted set `key`, the primitive of ZPOPMIN, ZPOPMAX, ZMPOP and the blocking pops:
///
/// - `Ok(None)`: the key is missing (nothing changes, nothing is logged).
/// - `Err(WRONGTYPE)`: the key holds another type.
/// - `Ok(Some(popped))`: the members and scores removed, in pop order (lowest first,
///   or highest first with `max`); empty for a `count` of 0. The sorted set is
///   removed with its last member. Logged in `ctx`: `ZRem` of the members popped, or
///   `Del` when the sorted set is emptied; the keyspace events `zpopmin` (`zpopmax`),
///   then `del` if the key went, fired.
///
/// It never blocks and never grows memory; the caller has checked its arguments.
pub fn pop(
    ks: &mut Keyspace,
    key: &[u8],
    count: usize,
    max: bool,
    ctx: &mut Ctx<'_>,
) -> Result<Option<super::zsets_multi::Scored>, Reply> {
    let len = match zset_of(ks, key, ctx.now_ms)? {
        None => return Ok(None),
        Some(e) => zset::len(e),
    };
    let n = count.min(len);
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    let popped: Vec<(Vec<u8>, f64)> = ks
        .modify(key, ctx.now_ms, |e| zset::pop(e, n, max))
        .expect("the sorted set is there");
    let refs: Vec<&[u8]> = popped.iter().map(|(m, _)| m.as_slice()).collect();
    let event = if max { "zpopmax" } else { "zpopmin" };
    log_removed(key, &refs, n == len, event, ctx);
    Ok(Some(popped))
}

/// A count as Redis's getRangeLongFromObjectOrReply reads it between `min` and
/// i64::MAX: `msg` (a whole error line) if it is not an integer or is below `min`.
pub fn arg_count(b: &[u8], min: i64, msg: &'static str) -> Result<i64, Reply> {
    match parse_i64(b) {
        Some(n) if n >= min => Ok(n),
        _ => Err(Reply::err(msg)),
    }
}

fn zpop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>, max: bool) -> Reply {
    if args.len() > 3 {
        return SYNTAX_ERR;
    }
    let count = match args.get(2) {
        None => None,
        Some(c) => match arg_count(c, 0, "ERR value is out of range, must be positive") {
            Ok(n) => Some(n as usize),
            Err(e) => return e,
        },
    };
    match pop(ks, args[1], count.unwrap_or(1), max, ctx) {
        Err(e) => e,
        Ok(None) => Reply::Array(vec![]),
        Ok(Some(popped)) => match count {
            None => Reply::Array(
                popped
                    .into_iter()
                    .flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)])
                    .collect(),
            ),
            Some(_) => Reply::Pairs(
                popped
                    .into_iter()
                    .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s)))
                    .collect(),
            ),
        },
    }
}

/// `ZPOPMIN key [count]`: removes and answers the member of the lowest score (no
/// count: [member, score], or an empty array for a missing key), or the `count` lowest
/// ([member, score] pairs in RESP3, flat in RESP2). A count below 0: `ERR value is out
/// of range, must be positive`; WRONGTYPE even for a count of 0.
pub fn zpopmin(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    zpop(ks, args, ctx, false)
}

/// `ZPOPMAX key [count]`: ZPOPMIN from the highest score.
pub fn zpopmax(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    zpop(ks, args, ctx, true)
}

/// `ZRANDMEMBER key [count [WITHSCORES]]` (Redis 7.0's zrandmemberCommand):
///
/// - No count: a random member, or nil for a missing key.
/// - A count: an array (empty for a missing key or a count of 0). A positive count
///   answers that many distinct members (all of them, in order, if there are no
///   more); a negative one answers |count| members that may repeat. WITHSCORES pairs
///   each with its score ([member, score] arrays in RESP3, flat in RESP2).
/// - The count's errors are HRANDFIELD's (`hashes::random_count`), and so is
///   weft-kv's bound on a negative count.
pub fn zrandmember(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    use super::hashes::{random_count, MAX_RANDOM_REPEATS};
    let (count, withscores) = match random_count(args, b"withscores") {
        Ok(c) => c,
        Err(e) => return e,
    };
    let e = match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let Some(e) = e else {
        return if count.is_some() {
            Reply::Array(vec![])
        } else {
            Reply::Nil
        };
    };
    let v = zset::view(e);
    let size = v.len();
    let at = |r: usize| {
        v.range(r, r + 1, false)
            .next()
            .expect("a member of the rank")
    };
    let random = || (super::hashes::random() % size as u64) as usize;
    let Some(l) = count else {
        return Reply::bulk(at(random()).0);
    };
    let reply = |picked: Vec<(&[u8], f64)>| elements_reply(picked.into_iter(), withscores);
    if l < 0 {
        if l.unsigned_abs() > MAX_RANDOM_REPEATS {
            return Reply::error(format!(
                "ERR count is too large: weft-kv answers at most {MAX_RANDOM_REPEATS} random members at once"
            ));
        }
        return reply((0..l.unsigned_abs()).map(|_| at(random())).collect());
    }
    let count = l as u64;
    if count >= size as u64 {
        return reply(v.iter().collect());
    }
    let count = count as usize;
    if count * 3 <= size {
        // Few of many: random ranks until `count` distinct ones.
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut picked = Vec::with_capacity(count);
        while picked.len() < count {
            let r = random();
            if seen.insert(r) {
                picked.push(at(r));
            }
        }
        return reply(picked);
    }
    // A partial shuffle of all of them.
    let mut all: Vec<(&[u8], f64)> = v.iter().collect();
    for i in 0..count {
        let j = i + (super::hashes::random() % (all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(count);
    reply(all)
}

/// A score as Redis 7.0 writes it in ZSCAN's replies (C's `%.17g`).
fn score_text(s: f64) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    crate::resp::reply::format_g17(s, &mut out);
    out
}

/// `ZSCAN key cursor [MATCH pattern] [COUNT count]`: [next cursor, [member, score,
/// ...]] of the members matching the pattern, each score as text. A packed sorted set
/// answers all of its members at once with cursor 0; a big one about COUNT (10)
/// member hashes per call, with the keyspace SCAN's guarantee. Errors: a cursor that
/// is not a number, `ERR invalid cursor` (before the key is looked at); then
/// WRONGTYPE; a missing key answers an empty scan whatever the options; COUNT not an
/// integer, `ERR value is not an integer or out of range`; below 1, or an unknown
/// option, `ERR syntax error`.
pub fn zscan(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Some(cursor) = crate::exec::parse_cursor(args[2]) else {
        return Reply::err("ERR invalid cursor");
    };
    let empty = || Reply::Array(vec![Reply::bulk(b"0"), Reply::Array(vec![])]);
    let e = match zset_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return empty(),
        Ok(Some(e)) => e,
    };
    let (pattern, count) = match super::hashes::scan_options(&args[3..]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut items = Vec::new();
    let next = zset::scan(e, cursor, count, |m, s| {
        if pattern.is_none_or(|p| glob_match(p, m)) {
            items.push(Reply::bulk(m));
            items.push(Reply::Bulk(score_text(s)));
        }
    });
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(items),
    ])
}

// ---- shard functions of the commands over several keys (`zsets_multi.rs`) --------

/// Reads the whole sorted set `args[1]` (not a command of the table), as an input of
/// ZUNION, ZINTER, ZDIFF and their kin: nil if missing; a plain set is read as its
/// members each of score 1 (as Redis does); another type is WRONGTYPE; else a flat
/// array of member and 8-byte score bulks.
pub fn read_all(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let pair = |m: &[u8], s: f64| [Reply::bulk(m), Reply::bulk(&zset::score_bytes(s))];
    match ks.get(args[1], ctx.now_ms) {
        None => Reply::Nil,
        Some(e) if e.kind() == Type::Set => Reply::Array(
            crate::keyspace::set::iter(e)
                .flat_map(|m| pair(&m, 1.0))
                .collect(),
        ),
        Some(e) if e.kind() != Type::ZSet => WRONGTYPE,
        Some(e) => Reply::Array(zset::view(e).iter().flat_map(|(m, s)| pair(m, s)).collect()),
    }
}

/// ZRANGESTORE's read of its source (not a command of the table; `args` are
/// ZRANGESTORE's own): the elements selected, as [`read_all`] answers them.
pub fn read_range(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let q = match parse_query(args, 3, true, By::Any, false) {
        Ok(q) => q,
        Err(e) => return e,
    };
    range_of(ks, args[2], &q, ctx.now_ms, |items| {
        Reply::Array(
            items
                .into_iter()
                .flat_map(|(m, s)| [Reply::bulk(m), Reply::bulk(&zset::score_bytes(s))])
                .collect(),
        )
    })
}

/// Stores a STORE form's result in `args[1]` (not a command of the table; `args[0]`
/// names the command, its keyspace event): `args[2..]` are member, 8-byte score, ...
/// in order, each member once. Whatever the key held is
/// replaced (its expiry dropped) and logged as the new sorted set's whole state
/// (`ZSet`, then `ZAdd` records of at most 1 MiB); no element removes the key (logged
/// as `Del` if it was there, firing `del`). Checks the memory it adds first. Answers the
/// count.
pub fn store(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    let elements = &args[2..];
    let now = ctx.now_ms;
    if elements.is_empty() {
        if ks.remove(key, now) {
            ctx.record(&RecordRef::Del { key });
            notify(ctx, GENERIC, "del", key);
        }
        return Reply::Int(0);
    }
    if ctx.over_memory {
        return OOM;
    }
    let e = zset::new_entry(key, Items::Slices(elements), None, 0);
    if ctx.room != u64::MAX {
        let grow = Keyspace::entry_memory(key.len(), e.value_memory() as usize, false)
            .saturating_sub(ks.memory_of(key, now));
        if let Err(r) = make_room(ks, grow, ctx) {
            return r;
        }
    }
    let n = zset::len(&e);
    let existed = ks.contains(key, now);
    ks.put(e);
    let e = ks.peek(key, now).expect("just stored");
    Keyspace::state_records(e, |r| ctx.record(&r));
    if !existed {
        notify(ctx, NEW, "new", key);
    }
    let event = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    notify(ctx, ZSET, &event, key);
    Reply::Int(n as i64)
}

/// ZMPOP's pop of one key (not a command of the table): `args` are [_, key, MIN|MAX,
/// count]; nil if the key is missing, WRONGTYPE, else [key, [[member, score], ...]].
pub fn mpop_one(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let max = args[2].eq_ignore_ascii_case(b"max");
    let count = parse_i64(args[3]).unwrap_or(1).max(0) as usize;
    match pop(ks, args[1], count, max, ctx) {
        Err(e) => e,
        Ok(None) => Reply::Nil,
        Ok(Some(popped)) => Reply::Array(vec![
            Reply::bulk(args[1]),
            Reply::Array(
                popped
                    .into_iter()
                    .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]))
                    .collect(),
            ),
        ]),
    }
}
