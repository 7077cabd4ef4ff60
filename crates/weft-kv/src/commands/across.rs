//! The commands whose keys may be on several shards, or in two databases, and that
//! are not a plain split (`Exec::Split`): BITOP, LCS, RENAME, RENAMENX, COPY, and
//! RANDOMKEY (which picks among every shard). The server and the embedded store both
//! run them from `exec::run_common`.
//!
//! When every key is on one shard (and in one database), the command is one shard
//! function run there, as any single-shard command ([`super::bits::bitop`],
//! [`super::lcs::lcs`], [`super::transfer::rename`], ...). Otherwise it is a
//! transaction (`ShardSet::atomically`, docs/kv-types.md): its steps run on their
//! shards one after another while it holds every one of them, so no client sees the
//! source removed and the destination not yet written, or reads the sources of a
//! BITOP between someone else's two writes. Each step is a shard function run with
//! `Shard::run`, so it logs, stamps and counts exactly as a command does.

use super::transfer::{self, copy_opts};
use super::{bits, borrow_args, keys, lcs, strings, Command, ShardFn, OOM};
use crate::exec::{precheck, Acks, Held, ShardSet};
use crate::resp::Reply;
use crate::route::shard_of;
use crate::shard::now_ms;

/// Runs `cmd` if it is one of this module's; `None` otherwise.
pub fn run(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    let argv = borrow_args(args);
    Some(match cmd.name {
        "bitop" => bitop(set, cmd, &argv, db, acks),
        "lcs" => lcs(set, &argv, db, acks),
        "rename" => rename(set, cmd, &argv, db, acks, false),
        "renamenx" => rename(set, cmd, &argv, db, acks, true),
        "copy" => copy(set, cmd, &argv, db, acks),
        "randomkey" => randomkey(set, db, acks),
        _ => return None,
    })
}

/// The shard function that runs `cmd` when all its keys are in one keyspace (BITOP,
/// LCS, RENAME, RENAMENX, COPY without another DB, PFCOUNT, PFMERGE); tests run them
/// on one keyspace.
pub fn one_keyspace(cmd: &Command) -> Option<ShardFn> {
    Some(match cmd.name {
        "bitop" => bits::bitop,
        "lcs" => lcs::lcs,
        "rename" => transfer::rename,
        "renamenx" => transfer::renamenx,
        "copy" => transfer::copy,
        "pfcount" => super::hll::pfcount,
        "pfmerge" => super::hll::pfmerge,
        "xread" => super::streams::xread,
        "xreadgroup" => super::streams::xreadgroup,
        _ => return None,
    })
}

/// Runs shard function `f` with `args` alone on shard `s`, in database `db`.
pub(super) fn alone(
    set: &impl ShardSet,
    s: usize,
    f: ShardFn,
    db: u8,
    args: &[&[u8]],
    acks: &mut Acks,
) -> Reply {
    let now = now_ms();
    let (reply, lsn) = set.with(s, |sh| sh.run(f, db, args, now, None));
    acks.note(s, lsn);
    reply
}

/// Runs shard function `f` with `args` on shard `s` (held by the transaction), in
/// database `db`.
pub(super) fn step(
    held: &dyn Held,
    s: usize,
    f: ShardFn,
    db: u8,
    args: &[&[u8]],
    acks: &mut Acks,
) -> Reply {
    let now = now_ms();
    let mut out = None;
    held.with(s, &mut |sh| out = Some(sh.run(f, db, args, now, None)));
    let (reply, lsn) = out.expect("the step ran");
    acks.note(s, lsn);
    reply
}

/// The values of the string `keys` (empty for a missing one), read on their shards
/// (held by the transaction); the reply of the first that is of another type.
pub(super) fn read_strings(
    held: &dyn Held,
    keys: &[&[u8]],
    db: u8,
    n: usize,
    acks: &mut Acks,
) -> Result<Vec<Vec<u8>>, Reply> {
    let mut values = Vec::with_capacity(keys.len());
    for &key in keys {
        let get = [&b"get"[..], key];
        match step(held, shard_of(key, n), strings::get, db, &get, acks) {
            Reply::Bulk(v) => values.push(v),
            Reply::Nil => values.push(Vec::new()),
            e => return Err(e),
        }
    }
    Ok(values)
}

/// The payload of `src`'s value ([`transfer::dump`] on its shard, held by the
/// transaction), or `None` if it is missing.
fn payload(held: &dyn Held, src: &[u8], db: u8, n: usize, acks: &mut Acks) -> Option<Vec<u8>> {
    let dump = [&b"dump"[..], src];
    match step(held, shard_of(src, n), transfer::dump, db, &dump, acks) {
        Reply::Bulk(p) => Some(p),
        _ => None,
    }
}

/// The distinct shards of `keys`, sorted.
pub(super) fn shards_of(set: &impl ShardSet, keys: &[&[u8]]) -> Vec<usize> {
    let mut shards: Vec<usize> = keys.iter().map(|k| shard_of(k, set.count())).collect();
    shards.sort_unstable();
    shards.dedup();
    shards
}

/// The first refusal of a write on any of `shards` (a log that cannot be written).
pub(super) fn refused(set: &impl ShardSet, cmd: &Command, shards: &[usize]) -> Option<Reply> {
    shards.iter().find_map(|&s| precheck(set, cmd, s))
}

/// BITOP op destkey key...: on one shard, [`bits::bitop`]; over several, the sources
/// are read (GET: a key of another type answers `WRONGTYPE`, the first in order) and
/// the result stored on the destination's shard, under one transaction.
fn bitop(set: &impl ShardSet, cmd: &Command, args: &[&[u8]], db: u8, acks: &mut Acks) -> Reply {
    let op = match bits::bitop_parse(args) {
        Ok(op) => op,
        Err(e) => return e,
    };
    let shards = shards_of(set, &args[2..]);
    if let Some(r) = refused(set, cmd, &shards) {
        return r;
    }
    if let [s] = shards[..] {
        return alone(set, s, bits::bitop, db, args, acks);
    }
    let n = set.count();
    set.atomically(&shards, |held| {
        let values = match read_strings(held, &args[3..], db, n, acks) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let sources: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        let result = bits::bitop_compute(op, &sources);
        drop(values);
        let dest = args[2];
        step(
            held,
            shard_of(dest, n),
            bitop_put,
            db,
            &[&b"bitop"[..], dest, &result],
            acks,
        )
    })
}

/// BITOP's last step over several shards: stores `args[2]` in `args[1]`
/// ([`bits::bitop_store`]).
fn bitop_put(
    ks: &mut crate::keyspace::Keyspace,
    args: &[&[u8]],
    ctx: &mut super::Ctx<'_>,
) -> Reply {
    if ctx.over_memory {
        return OOM;
    }
    bits::bitop_store(ks, args[1], args[2], ctx)
}

/// LCS key1 key2 ...: on one shard, [`lcs::lcs`]; over two, both values are read under
/// one transaction, and the answer worked out after it.
fn lcs(set: &impl ShardSet, args: &[&[u8]], db: u8, acks: &mut Acks) -> Reply {
    let shards = shards_of(set, &args[1..3]);
    if let [s] = shards[..] {
        return alone(set, s, lcs::lcs, db, args, acks);
    }
    let n = set.count();
    let values = set.atomically(&shards, |held| {
        read_strings(held, &args[1..3], db, n, acks).map_err(|_| lcs::NOT_STRINGS)
    });
    match values {
        Ok(v) => lcs::lcs_reply(&v[0], &v[1], &args[3..]),
        Err(e) => e,
    }
}

/// RENAME / RENAMENX key newkey: on one shard, [`transfer::rename`]; over two, as one
/// transaction: the source's payload ([`transfer::dump`]; missing: `ERR no such key`);
/// under NX an existing destination answers 0 and nothing changes; then the source is
/// removed ([`transfer::rename_source`]) and the payload put in place on the
/// destination's shard ([`transfer::put_value`]).
fn rename(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[&[u8]],
    db: u8,
    acks: &mut Acks,
    nx: bool,
) -> Reply {
    let shards = shards_of(set, &args[1..3]);
    if let Some(r) = refused(set, cmd, &shards) {
        return r;
    }
    if let [s] = shards[..] {
        let f = if nx {
            transfer::renamenx
        } else {
            transfer::rename
        };
        return alone(set, s, f, db, args, acks);
    }
    let (src, dst, n) = (args[1], args[2], set.count());
    set.atomically(&shards, |held| {
        let Some(payload) = payload(held, src, db, n, acks) else {
            return Reply::err("ERR no such key");
        };
        let exists = [&b"exists"[..], dst];
        if nx && step(held, shard_of(dst, n), keys::exists, db, &exists, acks) != Reply::Int(0) {
            return Reply::Int(0);
        }
        // In Redis's order of events: the source goes, then the destination is written
        // (which cannot fail: RENAME is not refused for memory, and the payload is one
        // just made).
        let from = [&b"rename"[..], src];
        step(
            held,
            shard_of(src, n),
            transfer::rename_source,
            db,
            &from,
            acks,
        );
        let put = [&b"rename"[..], dst, &payload, b"replace"];
        let r = step(held, shard_of(dst, n), transfer::put_value, db, &put, acks);
        debug_assert_eq!(r, Reply::Int(1), "the destination takes the value");
        if nx {
            Reply::Int(1)
        } else {
            Reply::OK
        }
    })
}

/// `COPY source destination [DB db] [REPLACE]`: in one database of one shard,
/// [`transfer::copy`]; otherwise the source's payload is read and put in place on the
/// destination's shard and database, as one transaction.
fn copy(set: &impl ShardSet, cmd: &Command, args: &[&[u8]], db: u8, acks: &mut Acks) -> Reply {
    let o = match copy_opts(args) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let to = o.db.unwrap_or(db);
    let (src, dst, n) = (args[1], args[2], set.count());
    if to == db && src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let shards = shards_of(set, &args[1..3]);
    if let Some(r) = refused(set, cmd, &shards) {
        return r;
    }
    if shards.len() == 1 && to == db {
        return alone(set, shards[0], transfer::copy, db, args, acks);
    }
    set.atomically(&shards, |held| {
        let Some(payload) = payload(held, src, db, n, acks) else {
            return Reply::Int(0);
        };
        let mode: &[u8] = if o.replace { b"replace" } else { b"nx" };
        let put = [&b"copy"[..], dst, &payload, mode, b"oom"];
        step(held, shard_of(dst, n), transfer::put_value, to, &put, acks)
    })
}

/// RANDOMKEY: a live key of the database picked at random (nil if there is none): a
/// shard drawn by its number of keys, then the key after a random hash there. Keys
/// whose time has passed are skipped; if random draws find none, the shards are
/// walked in order for one. It shows every shard's state, so it waits for each
/// shard's whole log (as DBSIZE).
fn randomkey(set: &impl ShardSet, db: u8, acks: &mut Acks) -> Reply {
    let now = now_ms();
    let counts: Vec<usize> = (0..set.count())
        .map(|s| {
            let (n, lsn) = set.with(s, |sh| (sh.db(db).len(), sh.appended));
            acks.note(s, lsn);
            n
        })
        .collect();
    let total: usize = counts.iter().sum();
    if total == 0 {
        return Reply::Nil;
    }
    for _ in 0..16 {
        let mut pick = (super::hashes::random() % total as u64) as usize;
        let s = counts
            .iter()
            .position(|&c| {
                let here = pick < c;
                pick = pick.saturating_sub(c);
                here
            })
            .unwrap_or(0);
        let cursor = super::hashes::random() % crate::keyspace::HASH_LIMIT;
        let found = set.with(s, |sh| {
            let ks = sh.db(db);
            let (next, keys) = ks.scan(cursor, 4, None, now);
            match keys.into_iter().next() {
                Some(k) => Some(k),
                None if next == 0 => ks.scan(0, 4, None, now).1.into_iter().next(),
                None => None,
            }
        });
        if let Some(k) = found {
            return Reply::Bulk(k);
        }
    }
    // Mostly keys whose time has passed: walk for a live one.
    for s in 0..set.count() {
        let found = set.with(s, |sh| {
            let ks = sh.db(db);
            let mut cursor = 0;
            loop {
                let (next, keys) = ks.scan(cursor, 1024, None, now);
                if let Some(k) = keys.into_iter().next() {
                    return Some(k);
                }
                if next == 0 {
                    return None;
                }
                cursor = next;
            }
        });
        if let Some(k) = found {
            return Reply::Bulk(k);
        }
    }
    Reply::Nil
}
