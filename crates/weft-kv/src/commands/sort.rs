//! SORT and SORT_RO (Redis 7.0's t_sort.c, for behaviour): the elements of a list, a
//! set or a sorted set, sorted as numbers or as bytes, by themselves or by other keys
//! (`BY pattern`), cut by `LIMIT`, each answered as itself or as other keys' values
//! (`GET pattern`), or stored as a list (`STORE destination`).
//!
//! A pattern names a key by its first `*`, which the element replaces (`weight_*`
//! with element `3` names `weight_3`); a `->field` after the `*` reads that field of a
//! hash instead of a string (`obj_*->w`). `GET #` is the element itself. A key that is
//! missing, of another type, or a pattern without `*` gives nil (sorted as 0, or first
//! with ALPHA). `BY` with a pattern without `*` (`BY nosort`) does not sort: the
//! elements keep the list's or the sorted set's order (reversed by `DESC`, and a
//! sorted set's cut by `LIMIT` as ZRANGE would); a set with `BY nosort` and `STORE` is
//! sorted as bytes so the stored list does not depend on the set's inner order.
//!
//! The patterns and the destination may name keys on any shard. When they do (a `BY`
//! that sorts, a `GET` other than `#`, or a destination on another shard), SORT is
//! one transaction that holds every shard (`ShardSet::atomically`, as FLUSHALL):
//! nobody changes a weight between two reads or sees the destination half written.
//! Otherwise it holds only the key's shard. Its steps are shard functions of this
//! module run with `Shard::run` ([`read_source`], [`lookup`], [`store`]), so they log,
//! stamp and count as commands do. STORE logs the destination's whole state as a new
//! list (as an LPUSH onto a new key does), or `Del` when the result is empty: replay
//! and compaction need nothing of their own.
//!
//! As Redis 7.0's, SORT and SORT_RO of a sorted set make it a tree (OBJECT ENCODING
//! `skiplist`) if it was packed, however small. That is not logged (SORT_RO is a
//! read, and a read logs nothing): after a restart or DEBUG RELOAD a small sorted set
//! is packed again whatever made it a tree, as Redis 7.0 loads it
//! (`zset::pack_if_fits`), so the log need not say.

use super::lists::{growth, packed_len};
use super::steps::Steps;
use super::strings::make_room;
use super::{parse_i64, Ctx, NOT_INT, OOM, SYNTAX_ERR, WRONGTYPE};
use crate::exec::{Acks, ShardSet};
use crate::keyspace::{hash, list, set, tag, zset, Keyspace, Type};
use crate::log::{Items, RecordRef};
use crate::pubsub::{notify, GENERIC, LIST, NEW};
use crate::resp::Reply;
use crate::route::shard_of;
use crate::shard::now_ms;
use std::cmp::Ordering;
use std::collections::HashMap;

/// Redis's reply when numeric sorting meets a value that is not a number.
const NOT_DOUBLE: Reply = Reply::err("ERR One or more scores can't be converted into double");

/// SORT's options, as parsed.
struct Opts<'a> {
    by: Option<&'a [u8]>,
    dontsort: bool,
    limit: Option<(i64, i64)>,
    gets: Vec<&'a [u8]>,
    desc: bool,
    alpha: bool,
    store: Option<&'a [u8]>,
}

/// Parses the options after the key; `readonly` (SORT_RO) refuses STORE. Errors in
/// Redis's order: the first unknown word or missing argument is `ERR syntax error`,
/// a LIMIT that is not two integers `ERR value is not an integer or out of range`.
fn parse<'a>(args: &[&'a [u8]], readonly: bool) -> Result<Opts<'a>, Reply> {
    let mut o = Opts {
        by: None,
        dontsort: false,
        limit: None,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let w = args[j].to_ascii_lowercase();
        match w.as_slice() {
            b"asc" => o.desc = false,
            b"desc" => o.desc = true,
            b"alpha" => o.alpha = true,
            b"limit" if left >= 2 => {
                let start = parse_i64(args[j + 1]).ok_or(NOT_INT)?;
                let count = parse_i64(args[j + 2]).ok_or(NOT_INT)?;
                o.limit = Some((start, count));
                j += 2;
            }
            b"store" if left >= 1 && !readonly => {
                o.store = Some(args[j + 1]);
                j += 1;
            }
            b"by" if left >= 1 => {
                let p = args[j + 1];
                o.dontsort = !p.contains(&b'*');
                o.by = Some(p);
                j += 1;
            }
            b"get" if left >= 1 => {
                o.gets.push(args[j + 1]);
                j += 1;
            }
            _ => return Err(SYNTAX_ERR),
        }
        j += 1;
    }
    Ok(o)
}

/// What a pattern names for `elem`: the element itself (`#`), nothing (no `*`), or a
/// key and maybe a hash field.
enum Named {
    Itself,
    Nothing,
    Key(Vec<u8>, Option<Vec<u8>>),
}

/// Substitutes `elem` for the first `*` of `pat`; a `->` after the `*` followed by
/// at least one byte splits off a hash field.
fn name(pat: &[u8], elem: &[u8]) -> Named {
    if pat == b"#" {
        return Named::Itself;
    }
    let Some(star) = pat.iter().position(|&c| c == b'*') else {
        return Named::Nothing;
    };
    let rest = &pat[star + 1..];
    let arrow = rest.windows(2).position(|w| w == b"->");
    let (tail, field) = match arrow {
        Some(a) if a + 2 < rest.len() => (&rest[..a], Some(rest[a + 2..].to_vec())),
        _ => (rest, None),
    };
    let mut key = Vec::with_capacity(pat.len() + elem.len());
    key.extend_from_slice(&pat[..star]);
    key.extend_from_slice(elem);
    key.extend_from_slice(tail);
    Named::Key(key, field)
}

/// A sort weight as Redis reads it: C's `strtod` over the whole text (leading white
/// space, decimal or hexadecimal, `inf`; an empty text is 0), refused if anything is
/// left over, if it is out of range (an overflow, or an underflow, subnormals
/// included) or NaN.
fn weight(b: &[u8]) -> Option<f64> {
    let (v, n, erange) = super::zsets::strtod(b);
    (n == b.len() && !erange && !v.is_nan()).then_some(v)
}

/// SORT's read of its key (not a command of the table): `[type, elements...]` with
/// type `l`, `s` or `z` (a sorted set's members in score order), nil for a missing
/// key, WRONGTYPE for a string or a hash. A packed sorted set becomes a tree
/// (`skiplist`), as Redis's SORT and SORT_RO leave it, whatever follows (an error
/// of the sort included). Not logged: a read logs nothing (SORT_RO is one), and the
/// encoding would not survive a restart anyway (replay packs a small sorted set again,
/// as Redis loads one: `zset::pack_if_fits`).
pub fn read_source(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let key = args[1];
    // Only a packed one changes: a tree is left alone (no new stamp for a read).
    if ks.get(key, ctx.now_ms).map(|e| e.tag()) == Some(tag::ZSET_PACKED) {
        ks.modify(key, ctx.now_ms, zset::make_tree_now);
    }
    let Some(e) = ks.get(key, ctx.now_ms) else {
        return Reply::Nil;
    };
    let (kind, items): (&[u8], Vec<Reply>) = match e.kind() {
        Type::List => (b"l", list::iter_from(e, 0).map(Reply::bulk).collect()),
        Type::Set => (b"s", set::iter(e).map(|m| Reply::bulk(&m)).collect()),
        Type::ZSet => (
            b"z",
            zset::view(e).iter().map(|(m, _)| Reply::bulk(m)).collect(),
        ),
        _ => return WRONGTYPE,
    };
    let mut out = Vec::with_capacity(items.len() + 1);
    out.push(Reply::bulk(kind));
    out.extend(items);
    Reply::Array(out)
}

/// SORT's read of the keys its patterns name (not a command of the table): `args`
/// after the name are pairs of a key and a field (empty: none, `-` prefixed: the
/// field after the `-`); answers one value or nil per pair: a string key's value, a
/// hash's field; nil for a missing key or field, or a key of another type.
pub fn lookup(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let now = ctx.now_ms;
    Reply::Array(
        args[1..]
            .chunks(2)
            .map(|p| {
                let v = match ks.get(p[0], now) {
                    Some(e) if p[1].is_empty() && e.kind() == Type::String => Some(e.value()),
                    Some(e) if !p[1].is_empty() && e.kind() == Type::Hash => {
                        hash::get(e, &p[1][1..])
                    }
                    _ => None,
                };
                v.map_or(Reply::Nil, Reply::bulk)
            })
            .collect(),
    )
}

/// SORT ... STORE's write (not a command of the table): `args` after the name are the
/// destination and the elements. Elements: the destination becomes a new list of
/// them, whatever it held (logged as its whole state, event `sortstore`); none: the
/// destination is removed if it exists (logged as `Del`, event `del`). Answers the
/// list's length. Checks the memory first (OOM: nothing changes).
pub fn store(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let (key, elems) = (args[1], &args[2..]);
    let now = ctx.now_ms;
    if elems.is_empty() {
        if ks.remove(key, now) {
            ctx.record(&RecordRef::Del { key });
            notify(ctx, GENERIC, "del", key);
        }
        return Reply::Int(0);
    }
    if ctx.over_memory {
        return OOM;
    }
    if ctx.room != u64::MAX {
        let grow = growth(None, key, elems.len(), packed_len(elems))
            .saturating_sub(ks.memory_of(key, now));
        if let Err(e) = make_room(ks, grow, ctx) {
            return e;
        }
    }
    let existed = ks.contains(key, now);
    ks.put(list::new_entry(key, Items::Slices(elems), None, 0));
    let e = ks.peek(key, now).expect("just made");
    Keyspace::state_records(e, |r| ctx.record(&r));
    if !existed {
        notify(ctx, NEW, "new", key);
    }
    notify(ctx, LIST, "sortstore", key);
    Reply::Int(elems.len() as i64)
}

/// What `pat` gives for each of `elems` (nil for nothing): one [`lookup`] step per
/// shard that holds a named key.
fn values(steps: &mut Steps<'_>, pat: &[u8], elems: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
    let mut out: Vec<Option<Vec<u8>>> = vec![None; elems.len()];
    // Per shard: the lookup's arguments and the places of its answers.
    let mut asks: HashMap<usize, (Vec<Vec<u8>>, Vec<usize>)> = HashMap::new();
    for (i, el) in elems.iter().enumerate() {
        match name(pat, el) {
            Named::Itself => out[i] = Some(el.clone()),
            Named::Nothing => {}
            Named::Key(key, field) => {
                let a = asks.entry(shard_of(&key, steps.shards)).or_default();
                a.0.push(key);
                a.0.push(field.map_or(Vec::new(), |f| [&b"-"[..], &f].concat()));
                a.1.push(i);
            }
        }
    }
    for (_, (keys, places)) in asks {
        let mut argv: Vec<&[u8]> = vec![b"sortlookup"];
        argv.extend(keys.iter().map(Vec::as_slice));
        if let Reply::Array(vals) = steps.run(lookup, &keys[0], &argv) {
            for (v, &i) in vals.into_iter().zip(&places) {
                if let Reply::Bulk(b) = v {
                    out[i] = Some(b);
                }
            }
        }
    }
    out
}

/// Whether SORT with `o` on `key` reads or writes keys off the key's shard.
fn needs_every_shard(o: &Opts<'_>, key: &[u8], shards: usize) -> bool {
    (o.by.is_some() && !o.dontsort)
        || o.gets.iter().any(|g| *g != b"#")
        || o.store
            .is_some_and(|d| shard_of(d, shards) != shard_of(key, shards))
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA]
/// [STORE destination]`, and SORT_RO (`readonly`: the same without STORE).
///
/// Numeric sorting (the default) reads each weight (the element, or what BY names)
/// as a double; one that is not a number fails the whole command with `ERR One or
/// more scores can't be converted into double` (nothing stored). Equal weights are
/// ordered by the elements' bytes. ALPHA compares bytes; with BY, a missing weight
/// comes first. DESC reverses the order. LIMIT offset count answers `count` elements
/// from `offset` (a negative offset is 0, a negative count is all the rest). Without
/// GET the elements are answered, with GETs one value per GET per element (nil for
/// what is missing). With STORE the answer is the stored list's length (nils stored
/// as empty strings). A missing key is an empty list; a string or hash key WRONGTYPE
/// (after the options are checked).
pub fn sort(
    set: &impl ShardSet,
    args: &[Vec<u8>],
    db: u8,
    readonly: bool,
    acks: &mut Acks,
) -> Reply {
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let o = match parse(&argv, readonly) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let key = argv[1];
    let n = set.count();
    if let Some(d) = o.store {
        if let Some(r) = set.refuses_writes(shard_of(d, n)) {
            return r;
        }
    }
    let shards: Vec<usize> = if needs_every_shard(&o, key, n) {
        (0..n).collect()
    } else {
        vec![shard_of(key, n)]
    };
    let now = now_ms();
    set.atomically(&shards, |held| {
        let mut steps = Steps {
            held,
            shards: n,
            db,
            now,
            acks,
        };
        run(&mut steps, &o, key)
    })
}

/// SORT's steps, under the transaction.
fn run(steps: &mut Steps<'_>, o: &Opts<'_>, key: &[u8]) -> Reply {
    let (kind, mut elems) = match steps.run(read_source, key, &[b"sortread", key]) {
        Reply::Nil => (b'l', Vec::new()),
        Reply::Array(items) => {
            let mut it = items.into_iter().map(|r| match r {
                Reply::Bulk(b) => b,
                _ => Vec::new(),
            });
            let kind = it.next().map_or(b'l', |k| k[0]);
            (kind, it.collect::<Vec<_>>())
        }
        e => return e,
    };
    let (mut dontsort, mut alpha, mut by) = (o.dontsort, o.alpha, o.by);
    if dontsort && kind == b's' && o.store.is_some() {
        // A set's inner order must not decide what is stored.
        (dontsort, alpha, by) = (false, true, None);
    }
    let len = elems.len() as i64;
    let (start, end) = match o.limit {
        None => (0, len - 1),
        Some((s, c)) => {
            let start = s.max(0);
            let mut end = if c < 0 {
                len - 1
            } else {
                start.saturating_add(c - 1)
            };
            let (start, e2) = if start >= len {
                (len - 1, len - 2)
            } else {
                (start, end)
            };
            end = e2.min(len - 1);
            (start, end)
        }
    };
    if dontsort {
        if o.desc && kind != b's' {
            elems.reverse();
        }
    } else {
        let by_vals = by.map(|p| values(steps, p, &elems));
        let mut order: Vec<usize> = (0..elems.len()).collect();
        if alpha {
            let cmp = |a: &usize, b: &usize| -> Ordering {
                match &by_vals {
                    Some(v) => match (&v[*a], &v[*b]) {
                        (Some(x), Some(y)) => x.cmp(y),
                        (x, y) => x.is_some().cmp(&y.is_some()),
                    },
                    None => elems[*a].cmp(&elems[*b]),
                }
            };
            order.sort_by(|a, b| if o.desc { cmp(b, a) } else { cmp(a, b) });
        } else {
            let mut scores = Vec::with_capacity(elems.len());
            for (i, el) in elems.iter().enumerate() {
                let w = match &by_vals {
                    Some(v) => v[i].as_deref(),
                    None => Some(el.as_slice()),
                };
                match w.map_or(Some(0.0), weight) {
                    Some(s) => scores.push(s),
                    None => return NOT_DOUBLE,
                }
            }
            let cmp = |a: &usize, b: &usize| -> Ordering {
                scores[*a]
                    .partial_cmp(&scores[*b])
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| elems[*a].cmp(&elems[*b]))
            };
            order.sort_by(|a, b| if o.desc { cmp(b, a) } else { cmp(a, b) });
        }
        let mut taken: Vec<Option<Vec<u8>>> = order
            .into_iter()
            .map(|i| Some(std::mem::take(&mut elems[i])))
            .collect();
        elems = taken
            .iter_mut()
            .map(|e| e.take().unwrap_or_default())
            .collect();
    }
    let picked: Vec<Vec<u8>> = if start <= end {
        elems
            .into_iter()
            .skip(start as usize)
            .take((end - start + 1) as usize)
            .collect()
    } else {
        Vec::new()
    };
    let out: Vec<Option<Vec<u8>>> = if o.gets.is_empty() {
        picked.into_iter().map(Some).collect()
    } else {
        let cols: Vec<Vec<Option<Vec<u8>>>> =
            o.gets.iter().map(|g| values(steps, g, &picked)).collect();
        (0..picked.len())
            .flat_map(|i| cols.iter().map(move |c| c[i].clone()))
            .collect()
    };
    match o.store {
        None => Reply::Array(
            out.into_iter()
                .map(|v| v.map_or(Reply::Nil, Reply::Bulk))
                .collect(),
        ),
        Some(dest) => {
            let vals: Vec<Vec<u8>> = out.into_iter().map(Option::unwrap_or_default).collect();
            let mut argv: Vec<&[u8]> = vec![b"sortstore", dest];
            argv.extend(vals.iter().map(Vec::as_slice));
            steps.run(store, dest, &argv)
        }
    }
}
