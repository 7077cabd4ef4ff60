//! The set commands (Redis 7.0's t_set.c, for behaviour): SADD, SREM, SCARD,
//! SISMEMBER, SMISMEMBER, SMEMBERS, SRANDMEMBER, SPOP, SSCAN on one key, and SMOVE,
//! SINTER, SINTERCARD, SUNION, SDIFF, SINTERSTORE, SUNIONSTORE, SDIFFSTORE over several.
//!
//! Each one-key function checks its arguments first, then the key's type (`WRONGTYPE`
//! for a key of another type: nothing changes), then, for a write that may grow memory,
//! what it would add against `ctx.room` (Redis's OOM error, nothing changed, if it does
//! not fit), then changes and logs. A set that does not exist yet is logged as its
//! whole state once the command made it (a `Members` record); a change of an existing
//! set as the change: `SAdd` of the members that were new, `SRem` of the members that
//! were there (SPOP's random picks included, so replay removes exactly those); nothing
//! when nothing changed (docs/kv-types.md). A set that loses its last member is
//! removed. Commands keep the key's expiry. A write fires Redis 7.0's keyspace events
//! (`sadd`, `srem`, `spop`, `sinterstore`, `sunionstore`, `sdiffstore`; `new` for a set
//! made, `del` for one removed), only when it changed something.
//!
//! The commands over several keys ([`run_multi`]) are transactions over the keys'
//! shards (`ShardSet::atomically`), written as steps, each a one-key function run on
//! its key's shard: read the sources (their sizes, then members), compute, then write
//! (SMOVE's removal and addition, a STORE form's destination, logged as its whole new
//! state), all under the gates, so no client sees a partial result.
//!
//! Reply shapes: SMEMBERS, SPOP with a count, SINTER, SUNION and SDIFF answer a set
//! (RESP3 `~`, an array in RESP2); SRANDMEMBER with a count and SMISMEMBER an array.

use super::hashes::{random, scan_options, MAX_RANDOM_REPEATS};
use super::steps::{transaction, Steps};
use super::strings::make_room;
use super::{arg_i64, Command, Ctx, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::exec::{Acks, ShardSet};
use crate::keyspace::set::{self, MEMBER_OVERHEAD};
use crate::keyspace::{glob_match, Entry, Keyspace, Type};
use crate::log::{encode_split, Items, RecordRef};
use crate::pubsub::{notify, GENERIC, NEW, SET};
use crate::resp::Reply;

/// The live set in `key` (`None` if there is none), or `WRONGTYPE` if the key holds
/// another type.
#[inline]
fn set_of<'a>(ks: &'a mut Keyspace, key: &[u8], now_ms: u64) -> Result<Option<&'a Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if e.kind() != Type::Set => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// Adds `members` to the set `key`, creating it if missing: the number that were new.
/// Checks the type, and the memory if `check_room`; logs the creation (`Members`) or
/// the members that were new (`SAdd`).
fn add_members(
    ks: &mut Keyspace,
    key: &[u8],
    members: &[&[u8]],
    ctx: &mut Ctx<'_>,
    check_room: bool,
) -> Result<i64, Reply> {
    let exists = set_of(ks, key, ctx.now_ms)?.is_some();
    if check_room && ctx.room != u64::MAX {
        // At most what the members take as new members of a table (more than packed).
        let grow: u64 = members
            .iter()
            .map(|m| m.len() as u64 + MEMBER_OVERHEAD)
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
        let added: Vec<&[u8]> = ks
            .modify(key, now, |e| {
                members.iter().copied().filter(|m| set::add(e, m)).collect()
            })
            .expect("the set is there");
        if !added.is_empty() {
            encode_split(
                ctx.db,
                &added,
                1,
                |items| RecordRef::SAdd { key, items },
                ctx.log,
            );
            notify(ctx, SET, "sadd", key);
        }
        return Ok(added.len() as i64);
    }
    let e = set::new_entry(key, Items::Slices(members), None, 0);
    let n = set::len(&e);
    ks.put(e);
    let e = ks.peek(key, now).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
    notify(ctx, NEW, "new", key);
    notify(ctx, SET, "sadd", key);
    Ok(n as i64)
}

/// Removes `members` from the set `key` (which the caller found to be a set): the
/// members that were there, logged as `SRem`, and fires `event` (`srem`, `spop`) if
/// any was. A set left empty is removed (and fires `del`).
fn remove_members<'m>(
    ks: &mut Keyspace,
    key: &[u8],
    members: &[&'m [u8]],
    ctx: &mut Ctx<'_>,
    event: &str,
) -> Vec<&'m [u8]> {
    let (gone, emptied): (Vec<&[u8]>, bool) = ks
        .modify(key, ctx.now_ms, |e| {
            let gone = members
                .iter()
                .copied()
                .filter(|m| set::remove(e, m))
                .collect();
            (gone, set::is_empty(e))
        })
        .unwrap_or_default();
    if !gone.is_empty() {
        encode_split(
            ctx.db,
            &gone,
            1,
            |items| RecordRef::SRem { key, items },
            ctx.log,
        );
        notify(ctx, SET, event, key);
        if emptied {
            notify(ctx, GENERIC, "del", key);
        }
    }
    gone
}

/// SADD key member [member ...]: adds the members (creating the set), answers how many
/// were new. Over the memory limit: OOM, nothing added.
pub fn sadd(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    add_members(ks, args[1], &args[2..], ctx, true).map_or_else(|e| e, Reply::Int)
}

/// SADD without the memory check: the second half of SMOVE, which moves a member
/// from one set to another (it adds nothing to the memory of both together).
fn sadd_moved(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    add_members(ks, args[1], &args[2..], ctx, false).map_or_else(|e| e, Reply::Int)
}

/// SREM key member [member ...]: removes the members, answers how many were there; the
/// set goes with its last member. 0 for a missing key.
pub fn srem(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(None) => Reply::Int(0),
        Ok(Some(_)) => {
            Reply::Int(remove_members(ks, args[1], &args[2..], ctx, "srem").len() as i64)
        }
    }
}

/// SCARD key: the number of members, 0 for a missing key.
pub fn scard(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.map_or(0, set::len) as i64),
    }
}

/// SISMEMBER key member: 1 if the set has the member, else 0 (a missing key too).
pub fn sismember(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Int(e.is_some_and(|e| set::contains(e, args[2])) as i64),
    }
}

/// SMISMEMBER key member [member ...]: for each member, 1 if the set has it, else 0
/// (all 0 for a missing key), as an array.
pub fn smismember(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Array(
            args[2..]
                .iter()
                .map(|m| Reply::Int(e.is_some_and(|e| set::contains(e, m)) as i64))
                .collect(),
        ),
    }
}

/// SMEMBERS key: every member (a set of integers' in ascending order, a small set's
/// in the order they came, a big one's in no particular order); an empty set for a
/// missing key.
pub fn smembers(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => e,
        Ok(e) => Reply::Set(
            e.into_iter()
                .flat_map(set::iter)
                .map(|m| Reply::bulk(&m))
                .collect(),
        ),
    }
}

/// A random member of a set entry of `len` members.
fn random_member(e: &Entry, len: usize) -> set::Member<'_> {
    set::random(e, len, random)
}

/// `count` distinct random members of a set entry of `len` members (`count` < `len`):
/// random picks until that many distinct ones for few of many, else a partial
/// shuffle of all of them.
fn distinct_random(e: &Entry, len: usize, count: usize) -> Vec<Vec<u8>> {
    if e.tag() == crate::keyspace::tag::SET_TABLE && count * 3 <= len {
        let mut seen = std::collections::HashSet::with_capacity(count);
        let mut picked = Vec::with_capacity(count);
        while picked.len() < count {
            let m = random_member(e, len).to_vec();
            if seen.insert(m.clone()) {
                picked.push(m);
            }
        }
        return picked;
    }
    let mut all: Vec<Vec<u8>> = set::iter(e).map(|m| m.to_vec()).collect();
    for i in 0..count {
        let j = i + (random() % (all.len() - i) as u64) as usize;
        all.swap(i, j);
    }
    all.truncate(count);
    all
}

/// `SRANDMEMBER key [count]` (Redis 7.0's srandmemberCommand):
///
/// - No count: a random member, or nil for a missing key.
/// - A count: an array (empty for a missing key or a count of 0). A positive count
///   answers that many distinct members (all of them if the set has no more); a
///   negative one answers |count| members that may repeat.
/// - The count not an integer: `ERR value is not an integer or out of range`; -2^63:
///   `ERR value is out of range, value must between -9223372036854775807 and
///   9223372036854775807`; more arguments: `ERR syntax error`.
/// - weft-kv refuses a negative count beyond -1048576 on an existing set (the reply
///   would be that large, whatever the set's size) with `ERR count is too large ...`.
pub fn srandmember(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if args.len() > 3 {
        return SYNTAX_ERR;
    }
    let count = match args.get(2).map(|a| arg_i64(a)) {
        None => None,
        Some(Ok(i64::MIN)) => {
            return Reply::err(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            )
        }
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => return e,
    };
    let e = match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let Some(l) = count else {
        return match e {
            None => Reply::Nil,
            Some(e) => Reply::bulk(&random_member(e, set::len(e))),
        };
    };
    let Some(e) = e else {
        return Reply::Array(vec![]);
    };
    let size = set::len(e);
    if l < 0 {
        if l.unsigned_abs() > MAX_RANDOM_REPEATS {
            return Reply::error(format!(
                "ERR count is too large: weft-kv answers at most {MAX_RANDOM_REPEATS} random members at once"
            ));
        }
        return Reply::Array(
            (0..l.unsigned_abs())
                .map(|_| Reply::bulk(&random_member(e, size)))
                .collect(),
        );
    }
    if l as u64 >= size as u64 {
        return Reply::Array(set::iter(e).map(|m| Reply::bulk(&m)).collect());
    }
    Reply::Array(
        distinct_random(e, size, l as usize)
            .into_iter()
            .map(Reply::Bulk)
            .collect(),
    )
}

/// `SPOP key [count]` (Redis 7.0's spopCommand): removes random members and answers
/// them.
///
/// - No count: one member, or nil for a missing key.
/// - A count: a set of that many distinct members (every member if the set has no
///   more: the key is removed); an empty set for a missing key or a count of 0 (after
///   the type check).
/// - The count not an integer or negative: `ERR value is out of range, must be
///   positive`; more arguments: `ERR syntax error`.
///
/// Logged as an `SRem` of the members removed (a `Del` when all go), so replay removes
/// exactly those.
pub fn spop(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    if args.len() > 3 {
        return SYNTAX_ERR;
    }
    let count = match args.get(2).map(|a| super::parse_i64(a)) {
        None => None,
        Some(Some(n)) if n >= 0 => Some(n as u64),
        Some(_) => return Reply::err("ERR value is out of range, must be positive"),
    };
    let key = args[1];
    let e = match set_of(ks, key, ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let Some(e) = e else {
        return match count {
            None => Reply::Nil,
            Some(_) => Reply::Set(vec![]),
        };
    };
    let size = set::len(e);
    let picked: Vec<Vec<u8>> = match count {
        Some(0) => return Reply::Set(vec![]),
        None => vec![random_member(e, size).to_vec()],
        Some(n) if n >= size as u64 => {
            let all: Vec<Reply> = set::iter(e).map(|m| Reply::bulk(&m)).collect();
            ks.remove(key, ctx.now_ms);
            ctx.record(&RecordRef::Del { key });
            notify(ctx, SET, "spop", key);
            notify(ctx, GENERIC, "del", key);
            return Reply::Set(all);
        }
        Some(n) => distinct_random(e, size, n as usize),
    };
    let members: Vec<&[u8]> = picked.iter().map(Vec::as_slice).collect();
    remove_members(ks, key, &members, ctx, "spop");
    match count {
        None => Reply::Bulk(picked.into_iter().next().expect("one member")),
        Some(_) => Reply::Set(picked.into_iter().map(Reply::Bulk).collect()),
    }
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]: [next cursor, [member, ...]] of the
/// members matching the pattern. A small set answers all of its members at once with
/// cursor 0 (as Redis's intsets and listpacks do); a big one about COUNT (10) hashes of
/// members per call, with the keyspace SCAN's guarantee: every member present for the
/// whole scan is returned. Errors as HSCAN's: a cursor that is not a number, `ERR
/// invalid cursor` (before the key is looked at); then WRONGTYPE; a missing key answers
/// an empty scan whatever the options; COUNT not an integer, `ERR value is not an
/// integer or out of range`; below 1, or an unknown option, `ERR syntax error`.
pub fn sscan(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Some(cursor) = crate::exec::parse_cursor(args[2]) else {
        return Reply::err("ERR invalid cursor");
    };
    let e = match set_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![Reply::bulk(b"0"), Reply::Array(vec![])]),
        Ok(Some(e)) => e,
    };
    let (pattern, count) = match scan_options(&args[3..]) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut items = Vec::new();
    let next = set::scan(e, cursor, count, |m| {
        if pattern.is_none_or(|p| glob_match(p, m)) {
            items.push(Reply::bulk(m));
        }
    });
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(items),
    ])
}

/// The destination step of a STORE form (`[name, dest, member ...]`): `dest` becomes
/// a set of the members (whatever it held, its expiry gone), logged as its whole state,
/// firing the command's event (`sinterstore`, ...); no member removes it (logged as
/// `Del`, firing `del`, if it existed). Answers the set's size. Checks the memory first
/// (OOM: nothing changes).
fn store(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, members) = (args[1], &args[2..]);
    if members.is_empty() {
        if ks.remove(key, ctx.now_ms) {
            ctx.record(&RecordRef::Del { key });
            notify(ctx, GENERIC, "del", key);
        }
        return Reply::Int(0);
    }
    if ctx.over_memory {
        return OOM;
    }
    if ctx.room != u64::MAX {
        let grow = Keyspace::entry_memory(key.len(), 0, false)
            + members
                .iter()
                .map(|m| m.len() as u64 + MEMBER_OVERHEAD)
                .sum::<u64>();
        let grow = grow.saturating_sub(ks.memory_of(key, ctx.now_ms));
        if let Err(e) = make_room(ks, grow, ctx) {
            return e;
        }
    }
    let existed = ks.contains(key, ctx.now_ms);
    let e = set::new_entry(key, Items::Slices(members), None, 0);
    let n = set::len(&e);
    ks.put(e);
    let e = ks.peek(key, ctx.now_ms).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
    if !existed {
        notify(ctx, NEW, "new", key);
    }
    notify(
        ctx,
        SET,
        std::str::from_utf8(args[0]).unwrap_or("sinterstore"),
        key,
    );
    Reply::Int(n as i64)
}

impl Steps<'_> {
    /// The size of the set `key` (0 if missing), or WRONGTYPE.
    fn card(&mut self, key: &[u8]) -> Result<usize, Reply> {
        match self.run(scard, key, &[b"scard", key]) {
            Reply::Int(n) => Ok(n as usize),
            e => Err(e),
        }
    }

    /// The members of the set `key`.
    fn members(&mut self, key: &[u8]) -> Vec<Vec<u8>> {
        match self.run(smembers, key, &[b"smembers", key]) {
            Reply::Set(v) => v.into_iter().map(bulk_bytes).collect(),
            r => unreachable!("SMEMBERS of a set answered {r:?}"),
        }
    }

    /// Of `candidates`, those the set `key` has (`keep`) or has not (`!keep`).
    fn filter(&mut self, key: &[u8], candidates: Vec<Vec<u8>>, keep: bool) -> Vec<Vec<u8>> {
        if candidates.is_empty() {
            return candidates;
        }
        let mut args: Vec<&[u8]> = vec![b"smismember", key];
        args.extend(candidates.iter().map(Vec::as_slice));
        let Reply::Array(flags) = self.run(smismember, key, &args) else {
            unreachable!("SMISMEMBER of a set answers an array")
        };
        candidates
            .into_iter()
            .zip(flags)
            .filter(|(_, f)| (*f == Reply::Int(1)) == keep)
            .map(|(m, _)| m)
            .collect()
    }
}

fn bulk_bytes(r: Reply) -> Vec<u8> {
    match r {
        Reply::Bulk(b) => b,
        r => unreachable!("a member is a bulk string, not {r:?}"),
    }
}

/// What a command of the set algebra computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The commands over several keys (SMOVE, SINTER, SINTERCARD, SUNION, SDIFF and the
/// STORE forms), each one transaction over its keys' shards; `None` for another
/// command.
pub fn run_multi(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    let (op, store_to) = match cmd.name {
        "smove" => return Some(smove(set, args, db, acks)),
        "sintercard" => return Some(sintercard(set, args, db, acks)),
        "sinter" => (Op::Inter, false),
        "sunion" => (Op::Union, false),
        "sdiff" => (Op::Diff, false),
        "sinterstore" => (Op::Inter, true),
        "sunionstore" => (Op::Union, true),
        "sdiffstore" => (Op::Diff, true),
        _ => return None,
    };
    let (dest, keys) = match store_to {
        true => (Some(args[1].as_slice()), &args[2..]),
        false => (None, &args[1..]),
    };
    Some(algebra(set, op, cmd.name, keys, dest, db, acks))
}

/// The sizes of the sets `keys` (0 for a missing key), or the first key's WRONGTYPE
/// (every key is checked, as Redis does, even after a missing one).
fn cards(steps: &mut Steps<'_>, keys: &[&[u8]]) -> Result<Vec<usize>, Reply> {
    keys.iter().map(|k| steps.card(k)).collect()
}

/// The intersection of the sets `keys` of sizes `sizes`: the members of the smallest
/// that every other one has (empty at once if one is empty or missing).
///
/// With a `limit` (SINTERCARD's, 0: none) the smallest set's members are checked a
/// chunk at a time, and it stops once `limit` are found: at most `limit` come back.
fn intersection(
    steps: &mut Steps<'_>,
    keys: &[&[u8]],
    sizes: &[usize],
    limit: usize,
) -> Vec<Vec<u8>> {
    if sizes.contains(&0) {
        return vec![];
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let first = steps.members(keys[order[0]]);
    let chunk = if limit == 0 { first.len() } else { LIMIT_CHUNK };
    let mut out = Vec::new();
    for part in first.chunks(chunk.max(1)) {
        let mut found = part.to_vec();
        for &i in &order[1..] {
            if keys[i] != keys[order[0]] {
                found = steps.filter(keys[i], found, true);
            }
        }
        out.extend(found);
        if limit > 0 && out.len() >= limit {
            out.truncate(limit);
            break;
        }
    }
    out
}

/// How many of the smallest set's members SINTERCARD with a LIMIT checks at a time.
const LIMIT_CHUNK: usize = 1024;

/// SINTER, SUNION, SDIFF (`dest` `None`) and their STORE forms (Redis 7.0's
/// sinterGenericCommand and sunionDiffGenericCommand):
///
/// - A missing key is an empty set; a key of another type: `WRONGTYPE`, for every
///   key (even after a missing one), before anything changes.
/// - SINTER: the members every set has; SUNION: the members of any; SDIFF: the first
///   set's members that none of the others has.
/// - The read forms answer a set; the STORE forms make `dest` a set of the result
///   (whatever it held, no expiry kept), or remove it if the result is empty, and
///   answer the result's size. The destination is logged as its whole new state. Over
///   the memory limit a STORE form answers OOM and changes nothing.
fn algebra(
    set: &impl ShardSet,
    op: Op,
    name: &str,
    keys: &[Vec<u8>],
    dest: Option<&[u8]>,
    db: u8,
    acks: &mut Acks,
) -> Reply {
    let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    let mut all = keys.clone();
    all.extend(dest);
    let writes: Vec<&[u8]> = dest.into_iter().collect();
    let run = transaction(set, &all, &writes, db, acks, |steps| {
        let sizes = cards(steps, &keys)?;
        let result = match op {
            Op::Inter => intersection(steps, &keys, &sizes, 0),
            Op::Union => {
                let mut seen = std::collections::HashSet::new();
                let mut out = Vec::new();
                for (k, &n) in keys.iter().zip(&sizes) {
                    if n > 0 {
                        out.extend(
                            steps
                                .members(k)
                                .into_iter()
                                .filter(|m| seen.insert(m.clone())),
                        );
                    }
                }
                out
            }
            Op::Diff => {
                let mut out = match sizes[0] {
                    0 => vec![],
                    _ => steps.members(keys[0]),
                };
                for (k, &n) in keys.iter().zip(&sizes).skip(1) {
                    if n > 0 {
                        out = steps.filter(k, out, false);
                    }
                }
                out
            }
        };
        Ok(match dest {
            None => Reply::Set(result.into_iter().map(Reply::Bulk).collect()),
            Some(dest) => {
                let mut args: Vec<&[u8]> = vec![name.as_bytes(), dest];
                args.extend(result.iter().map(Vec::as_slice));
                steps.run(store, args[1], &args)
            }
        })
    });
    match run {
        Ok(Ok(r)) | Ok(Err(r)) | Err(r) => r,
    }
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]: the size of the intersection of
/// the sets, at most `limit` if one is given (0: no limit). Errors, before the keys are
/// looked at: numkeys not an integer or below 1, `ERR numkeys should be greater than
/// 0`; more than the keys given, `ERR Number of keys can't be greater than number of
/// args`; LIMIT not an integer or negative, `ERR LIMIT can't be negative`; anything
/// else after the keys, `ERR syntax error`. Then WRONGTYPE for any key of another
/// type.
fn sintercard(set: &impl ShardSet, args: &[Vec<u8>], db: u8, acks: &mut Acks) -> Reply {
    let numkeys = match super::parse_i64(&args[1]) {
        Some(n) if n >= 1 => n as u64,
        _ => return Reply::err("ERR numkeys should be greater than 0"),
    };
    if numkeys > (args.len() - 2) as u64 {
        return Reply::err("ERR Number of keys can't be greater than number of args");
    }
    let end = 2 + numkeys as usize;
    let mut limit = 0u64;
    let mut i = end;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"limit") && i + 1 < args.len() {
            match super::parse_i64(&args[i + 1]) {
                Some(n) if n >= 0 => limit = n as u64,
                _ => return Reply::err("ERR LIMIT can't be negative"),
            }
            i += 2;
        } else {
            return SYNTAX_ERR;
        }
    }
    let keys: Vec<&[u8]> = args[2..end].iter().map(Vec::as_slice).collect();
    let run = transaction(set, &keys, &[], db, acks, |steps| {
        let sizes = cards(steps, &keys)?;
        let n = intersection(steps, &keys, &sizes, limit as usize).len();
        Ok(Reply::Int(n as i64))
    });
    match run {
        Ok(Ok(r)) | Ok(Err(r)) | Err(r) => r,
    }
}

/// SMOVE source destination member (Redis 7.0's smoveCommand): moves the member from
/// one set to the other (creating the destination), answering 1; 0 if the source is
/// missing or lacks the member (nothing changes). A source of another type, or a
/// destination of another type while the source exists: `WRONGTYPE`. The same key
/// twice: 1 if the set has the member, else 0, and nothing changes. Logged as an
/// `SRem` of the member in the source (a set emptied is removed) and its addition to
/// the destination, in one transaction over both shards.
fn smove(set: &impl ShardSet, args: &[Vec<u8>], db: u8, acks: &mut Acks) -> Reply {
    let (src, dst, member) = (&args[1][..], &args[2][..], &args[3][..]);
    let run = transaction(set, &[src, dst], &[src, dst], db, acks, |steps| {
        if steps.card(src)? == 0 {
            return Ok(Reply::Int(0));
        }
        steps.card(dst)?;
        if src == dst {
            return Ok(steps.run(sismember, src, &[b"sismember", src, member]));
        }
        if steps.run(srem, src, &[b"srem", src, member]) != Reply::Int(1) {
            return Ok(Reply::Int(0));
        }
        steps.run(sadd_moved, dst, &[b"sadd", dst, member]);
        Ok(Reply::Int(1))
    });
    match run {
        Ok(Ok(r)) | Ok(Err(r)) | Err(r) => r,
    }
}
