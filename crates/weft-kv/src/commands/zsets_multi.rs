//! The sorted-set commands over several keys (Redis 7.0's t_zset.c, for behaviour):
//! ZUNION, ZINTER, ZDIFF, ZINTERCARD, ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE,
//! ZRANGESTORE and ZMPOP.
//!
//! Each runs as one transaction over its keys' shards (`ShardSet::atomically`, as
//! MSETNX in `exec.rs`), in steps that are shard functions of `zsets.rs` run on their
//! key's shard: read each source (WRONGTYPE stops it there), compute here, then write
//! the destination on its shard (`zsets::store`: the destination's whole state is
//! logged, in records of at most 1 MiB). No client sees the sources change between
//! the reads and the write, nor the write half done. A destination whose shard cannot
//! write its log refuses the command before anything runs.

use super::steps::{transaction, Steps};
use super::zsets::{self, arg_count};
use super::{parse_i64, Command, NOT_INT, SYNTAX_ERR};
use crate::exec::{Acks, ShardSet};
use crate::keyspace::zset;
use crate::resp::Reply;
use crate::route::shard_of;
use std::collections::HashMap;

/// Members with their scores, in the order a step gives them.
pub(crate) type Scored = Vec<(Vec<u8>, f64)>;

/// The commands of this module: their reply, or `None` for another command.
pub fn run_multi(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    Some(match cmd.name {
        "zunion" => algebra(set, &argv, Op::Union, false, db, acks),
        "zinter" => algebra(set, &argv, Op::Inter, false, db, acks),
        "zdiff" => algebra(set, &argv, Op::Diff, false, db, acks),
        "zintercard" => algebra(set, &argv, Op::Card, false, db, acks),
        "zunionstore" => algebra(set, &argv, Op::Union, true, db, acks),
        "zinterstore" => algebra(set, &argv, Op::Inter, true, db, acks),
        "zdiffstore" => algebra(set, &argv, Op::Diff, true, db, acks),
        "zrangestore" => rangestore(set, &argv, db, acks),
        "zmpop" => zmpop(set, &argv, db, acks),
        _ => return None,
    })
}

impl Steps<'_> {
    /// The whole sorted set `key` (`None` if missing), or WRONGTYPE.
    fn read(&mut self, key: &[u8]) -> Result<Option<Scored>, Reply> {
        pairs(self.run(zsets::read_all, key, &[&b"zread"[..], key]))
    }
}

/// The elements a read step answered (`zsets::read_all`).
fn pairs(r: Reply) -> Result<Option<Scored>, Reply> {
    match r {
        Reply::Nil => Ok(None),
        Reply::Array(items) => {
            let mut out = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(Reply::Bulk(m)), Some(Reply::Bulk(s))) = (it.next(), it.next()) {
                out.push((m, zset::read_score(&s)));
            }
            Ok(Some(out))
        }
        e => Err(e),
    }
}

/// Stores `result` in `dst` (the last step of STORE form `name`): the count.
fn store(steps: &mut Steps<'_>, name: &[u8], dst: &[u8], result: &[(Vec<u8>, f64)]) -> Reply {
    let scores: Vec<[u8; 8]> = result.iter().map(|(_, s)| zset::score_bytes(*s)).collect();
    let mut args: Vec<&[u8]> = Vec::with_capacity(2 + 2 * result.len());
    args.push(name);
    args.push(dst);
    for (i, (m, _)) in result.iter().enumerate() {
        args.push(m);
        args.push(&scores[i]);
    }
    steps.run(zsets::store, dst, &args)
}

/// Members with their scores, or only the members.
fn reply(result: Scored, withscores: bool) -> Reply {
    if withscores {
        Reply::Pairs(
            result
                .into_iter()
                .map(|(m, s)| (Reply::Bulk(m), Reply::Double(s)))
                .collect(),
        )
    } else {
        Reply::Array(result.into_iter().map(|(m, _)| Reply::Bulk(m)).collect())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
    /// ZINTERCARD: the size of the intersection.
    Card,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Combines two weighted scores as Redis's zunionInterAggregate (a sum of `inf` and
    /// `-inf` is 0).
    fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            Aggregate::Sum => {
                let s = a + b;
                if s.is_nan() {
                    0.0
                } else {
                    s
                }
            }
            Aggregate::Min => a.min(b),
            Aggregate::Max => a.max(b),
        }
    }
}

/// A score times its weight (0 for `inf` times 0, as Redis).
fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// The options after the keys: WEIGHTS, AGGREGATE, WITHSCORES, LIMIT.
struct Options {
    weights: Vec<f64>,
    aggregate: Aggregate,
    withscores: bool,
    limit: usize,
}

fn parse_options(rest: &[&[u8]], n: usize, op: Op, store: bool) -> Result<Options, Reply> {
    let mut o = Options {
        weights: vec![1.0; n],
        aggregate: Aggregate::Sum,
        withscores: false,
        limit: 0,
    };
    let mut j = 0;
    while j < rest.len() {
        let a = rest[j];
        let left = rest.len() - j;
        let weighs = op == Op::Union || op == Op::Inter;
        if weighs && left > n && a.eq_ignore_ascii_case(b"weights") {
            for i in 0..n {
                o.weights[i] = zsets::parse_score(rest[j + 1 + i])
                    .ok_or(Reply::err("ERR weight value is not a float"))?;
            }
            j += 1 + n;
        } else if weighs && left >= 2 && a.eq_ignore_ascii_case(b"aggregate") {
            let v = rest[j + 1];
            o.aggregate = if v.eq_ignore_ascii_case(b"sum") {
                Aggregate::Sum
            } else if v.eq_ignore_ascii_case(b"min") {
                Aggregate::Min
            } else if v.eq_ignore_ascii_case(b"max") {
                Aggregate::Max
            } else {
                return Err(SYNTAX_ERR);
            };
            j += 2;
        } else if op == Op::Card && left >= 2 && a.eq_ignore_ascii_case(b"limit") {
            o.limit = match parse_i64(rest[j + 1]) {
                Some(l) if l >= 0 => l as usize,
                _ => return Err(Reply::err("ERR LIMIT can't be negative")),
            };
            j += 2;
        } else if op != Op::Card && !store && a.eq_ignore_ascii_case(b"withscores") {
            o.withscores = true;
            j += 1;
        } else {
            return Err(SYNTAX_ERR);
        }
    }
    Ok(o)
}

/// The result of `op` over `inputs` (each with its weight; a missing key is empty),
/// in (score, member) order; for Card, the intersection up to `limit` (0: all).
fn compute(op: Op, inputs: Vec<Option<Scored>>, o: &Options) -> Scored {
    let mut inputs: Vec<(Scored, f64)> = inputs
        .into_iter()
        .zip(&o.weights)
        .map(|(i, &w)| (i.unwrap_or_default(), w))
        .collect();
    let mut out: Scored = match op {
        Op::Diff => {
            let others: Vec<HashMap<Vec<u8>, f64>> = inputs
                .drain(1..)
                .map(|(i, _)| i.into_iter().collect())
                .collect();
            let (first, _) = inputs.pop().expect("at least one key");
            first
                .into_iter()
                .filter(|(m, _)| !others.iter().any(|h| h.contains_key(m)))
                .collect()
        }
        Op::Inter | Op::Card => {
            // The smallest first, as Redis (the order of a sum's terms).
            inputs.sort_by_key(|(i, _)| i.len());
            let mut it = inputs.into_iter();
            let (first, w0) = it.next().expect("at least one key");
            let others: Vec<(HashMap<Vec<u8>, f64>, f64)> =
                it.map(|(i, w)| (i.into_iter().collect(), w)).collect();
            let mut out = Vec::new();
            'member: for (m, s) in first {
                let mut score = weighted(s, w0);
                for (h, w) in &others {
                    match h.get(&m) {
                        Some(&t) => score = o.aggregate.apply(score, weighted(t, *w)),
                        None => continue 'member,
                    }
                }
                out.push((m, score));
                if op == Op::Card && o.limit > 0 && out.len() == o.limit {
                    break;
                }
            }
            out
        }
        Op::Union => {
            inputs.sort_by_key(|(i, _)| i.len());
            let mut at: HashMap<Vec<u8>, usize> = HashMap::new();
            let mut out: Scored = Vec::new();
            for (input, w) in inputs {
                for (m, s) in input {
                    let v = weighted(s, w);
                    match at.get(&m) {
                        Some(&i) => out[i].1 = o.aggregate.apply(out[i].1, v),
                        None => {
                            at.insert(m.clone(), out.len());
                            out.push((m, v));
                        }
                    }
                }
            }
            out
        }
    };
    if op != Op::Card {
        out.sort_by(|a, b| zset::cmp((a.1, &a.0), (b.1, &b.0)));
    }
    out
}

/// `ZUNION|ZINTER|ZDIFF numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE
/// SUM|MIN|MAX] [WITHSCORES]`, `ZINTERCARD numkeys key [key ...] [LIMIT limit]` and
/// `ZUNIONSTORE|ZINTERSTORE|ZDIFFSTORE destination numkeys key [key ...] [WEIGHTS w
/// ...] [AGGREGATE SUM|MIN|MAX]` (Redis 7.0's zunionInterDiffGenericCommand):
///
/// - Union: every member of any input, its weighted scores aggregated (SUM by
///   default; a sum of `inf` and `-inf`, or `inf` times a weight of 0, is 0). Inter:
///   the members of every input. Diff: the members of the first input that no other
///   has, with their scores (no WEIGHTS nor AGGREGATE). A missing key is an empty
///   input. The result is in (score, member) order; WITHSCORES adds the scores.
/// - ZINTERCARD answers the size of the intersection, counting at most LIMIT (0: no
///   limit).
/// - A STORE form replaces the destination (any type, its expiry dropped) with the
///   result, or removes it if the result is empty, and answers the result's size.
/// - Errors: numkeys not an integer, `ERR value is not an integer or out of range`;
///   below 1, `ERR at least 1 input key is needed for 'zunionstore' command`; more
///   than the arguments, `ERR syntax error`; then a key of another type than a sorted
///   set or a set (whose members count with score 1), WRONGTYPE; then the options: a
///   weight that is not a number, `ERR weight value is not a float`; LIMIT not an
///   integer or negative, `ERR LIMIT can't be negative`; anything else (WITHSCORES in
///   a STORE form), `ERR syntax error`.
fn algebra(
    set: &impl ShardSet,
    args: &[&[u8]],
    op: Op,
    store_to: bool,
    db: u8,
    acks: &mut Acks,
) -> Reply {
    let at = if store_to { 2 } else { 1 };
    let n = match parse_i64(args[at]) {
        None => return NOT_INT,
        Some(n) if n < 1 => {
            return Reply::error(format!(
                "ERR at least 1 input key is needed for '{}' command",
                String::from_utf8_lossy(args[0]).to_ascii_lowercase()
            ))
        }
        Some(n) if n as u64 > (args.len() - at - 1) as u64 => return SYNTAX_ERR,
        Some(n) => n as usize,
    };
    let keys = &args[at + 1..at + 1 + n];
    let options = parse_options(&args[at + 1 + n..], n, op, store_to);
    let dst = store_to.then(|| args[1]);
    let mut all: Vec<&[u8]> = keys.to_vec();
    all.extend(dst);
    let run = transaction(set, &all, dst.as_slice(), db, acks, |steps| {
        let mut inputs = Vec::with_capacity(n);
        for k in keys {
            inputs.push(steps.read(k)?);
        }
        let o = options?;
        let result = compute(op, inputs, &o);
        Ok(match (op, dst) {
            (Op::Card, _) => Reply::Int(result.len() as i64),
            (_, Some(d)) => store(steps, args[0], d, &result),
            (_, None) => reply(result, o.withscores),
        })
    });
    match run {
        Ok(Ok(r)) | Ok(Err(r)) | Err(r) => r,
    }
}

/// `ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]`: stores
/// the elements ZRANGE would select of `src` in `dst` (replacing it; removing it if
/// none), answers their count. Errors as ZRANGE's (WITHSCORES is a syntax error here),
/// then WRONGTYPE for a `src` of another type.
fn rangestore(set: &impl ShardSet, args: &[&[u8]], db: u8, acks: &mut Acks) -> Reply {
    if let Err(e) = zsets::parse_query(args, 3, true, zsets::By::Any, false) {
        return e;
    }
    let run = transaction(set, &[args[1], args[2]], &[args[1]], db, acks, |steps| {
        let picked = pairs(steps.run(zsets::read_range, args[2], args))?;
        Ok(store(steps, args[0], args[1], &picked.unwrap_or_default()))
    });
    match run {
        Ok(Ok(r)) | Ok(Err(r)) | Err(r) => r,
    }
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]`: pops up to `count` (1) members
/// of the lowest (MIN) or highest (MAX) scores from the first of the keys that is not
/// empty: [key, [[member, score], ...]], or nil if every key is missing. Errors:
/// numkeys not an integer or below 1, `ERR numkeys should be greater than 0`; too few
/// arguments, no MIN or MAX, or another word, `ERR syntax error`; COUNT not an integer
/// or below 1, `ERR count should be greater than 0`; then the first key (in order, up
/// to the first that is not empty) of another type: WRONGTYPE.
fn zmpop(set: &impl ShardSet, args: &[&[u8]], db: u8, acks: &mut Acks) -> Reply {
    let n = match parse_i64(args[1]) {
        Some(n) if n >= 1 => n as u64,
        _ => return Reply::err("ERR numkeys should be greater than 0"),
    };
    let where_at = 2 + n;
    if where_at >= args.len() as u64 {
        return SYNTAX_ERR;
    }
    let where_at = where_at as usize;
    let side = args[where_at];
    if !side.eq_ignore_ascii_case(b"min") && !side.eq_ignore_ascii_case(b"max") {
        return SYNTAX_ERR;
    }
    let mut count: Option<i64> = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && args[j].eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            match arg_count(args[j + 1], 1, "ERR count should be greater than 0") {
                Ok(c) => count = Some(c),
                Err(e) => return e,
            }
            j += 2;
        } else {
            return SYNTAX_ERR;
        }
    }
    let count = count.unwrap_or(1).to_string();
    let keys = &args[2..where_at];
    for k in keys {
        if let Some(r) = set.refuses_writes(shard_of(k, set.count())) {
            return r;
        }
    }
    let run = transaction(set, keys, &[], db, acks, |steps| {
        for k in keys {
            match steps.run(
                zsets::mpop_one,
                k,
                &[&b"zmpop"[..], k, side, count.as_bytes()],
            ) {
                Reply::Nil => continue,
                r => return r,
            }
        }
        Reply::NilArray
    });
    match run {
        Ok(r) | Err(r) => r,
    }
}
