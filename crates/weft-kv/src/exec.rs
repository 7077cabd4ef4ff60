//! Running commands over a set of shards, the same for the server and the embedded
//! store: routing a single-key command to its shard, splitting a multi-key command
//! and merging its parts, and the commands that concern every shard (DBSIZE, KEYS,
//! SCAN, FLUSHDB, FLUSHALL, SWAPDB, ...) or two databases of one (MOVE). Every command
//! runs in a database (`db`: the connection's selected one).
//!
//! A [`ShardSet`] says how to reach a shard: the server runs a closure on the shard's
//! own worker (directly when the caller is there, through weft IPC when not); the
//! store takes the shard's lock.

use crate::commands::{borrow_args, flags, Command, Exec, Merge, OOM};
use crate::keyspace::Keyspace;
use crate::resp::Reply;
use crate::route::{self, Part};
use crate::shard::{now_ms, Shard};

/// A set of shards that commands run on.
pub trait ShardSet {
    /// How many shards there are.
    fn count(&self) -> usize;
    /// Runs `f` on shard `s`, wherever that shard lives, and returns its result (once
    /// no transaction holds the shard).
    fn with<R: Send>(&self, s: usize, f: impl FnOnce(&mut Shard) -> R + Send) -> R;
    /// Runs `f` as a transaction over `shards` (sorted, distinct): `f` reaches them
    /// through the [`Held`] it is given, and no other command runs on any of them
    /// from before its first part until every part's records are written, so none
    /// sees some parts without the others (docs/kv-types.md).
    fn atomically<R>(&self, shards: &[usize], f: impl FnOnce(&dyn Held) -> R) -> R;
    /// The bytes of memory that may still be added before the configured limit, as
    /// the shards last said (`u64::MAX`: no limit).
    fn room(&self) -> u64;
    /// Why shard `s` refuses writes now (its log cannot be written), if it does.
    fn refuses_writes(&self, s: usize) -> Option<Reply>;
    /// Before a write on shard `s`, under a memory limit and an evicting policy: has
    /// the other shards evict if the server is over the limit and shard `s` cannot
    /// make room itself (`evict.rs`); whether any key was evicted.
    fn make_room(&self, _s: usize) -> bool {
        false
    }
}

/// The shards a transaction holds ([`ShardSet::atomically`]).
pub trait Held {
    /// Runs `f` on shard `s` (one of the transaction's).
    fn with(&self, s: usize, f: &mut (dyn FnMut(&mut Shard) + Send));
}

/// The LSNs a connection must see written before it sends its replies: per shard,
/// the end of the log at the time its last command on that shard ran.
#[derive(Default, Debug)]
pub struct Acks {
    /// Indexed by shard; 0: nothing to wait for.
    pub lsn: Vec<u64>,
}

impl Acks {
    /// Notes that the replies wait for shard `s` to have written `lsn`.
    #[inline]
    pub fn note(&mut self, s: usize, lsn: u64) {
        if lsn == 0 {
            return;
        }
        if self.lsn.len() <= s {
            self.lsn.resize(s + 1, 0);
        }
        if self.lsn[s] < lsn {
            self.lsn[s] = lsn;
        }
    }
}

/// Refusals that apply before a shard command runs: a log that cannot be written,
/// for a write. (The memory limit is checked by the command itself, on its shard,
/// against what it would add: see [`crate::commands::Ctx::room`].)
pub fn precheck(set: &impl ShardSet, cmd: &Command, s: usize) -> Option<Reply> {
    precheck_room(set, cmd, s).err()
}

/// [`precheck`], and before a write, room made on other shards if its own cannot
/// ([`ShardSet::make_room`]): `Ok(true)` if keys were evicted there.
pub fn precheck_room(set: &impl ShardSet, cmd: &Command, s: usize) -> Result<bool, Reply> {
    if cmd.flags & flags::WRITE != 0 {
        if let Some(r) = set.refuses_writes(s) {
            return Err(r);
        }
        return Ok(set.make_room(s));
    }
    Ok(false)
}

/// Runs a command of kind Shard or Split (the caller has checked arity and
/// authentication). Server-kind commands: `None`.
pub fn run_keyed(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    match cmd.exec {
        Exec::Shard(f) => {
            let Some(s) = route::shard_of_command(cmd, args, set.count()) else {
                return Some(Reply::err("ERR the command names no key"));
            };
            if let Some(r) = precheck(set, cmd, s) {
                return Some(r);
            }
            let now = now_ms();
            let argv = borrow_args(args);
            let (reply, lsn) = set.with(s, |sh| sh.run(f, db, &argv, now, None));
            acks.note(s, lsn);
            Some(reply)
        }
        Exec::Split(f, how) => Some(run_split(set, cmd, f, how, args, db, acks)),
        Exec::Server => None,
    }
}

fn run_split(
    set: &impl ShardSet,
    cmd: &Command,
    f: crate::commands::ShardFn,
    how: Merge,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Reply {
    // Key groups must be whole (MSET's key value pairs): Redis's arity error if not.
    let (first, step) = (cmd.first_key.max(1) as usize, cmd.step.max(1) as usize);
    if (args.len().saturating_sub(first)) % step != 0 {
        return Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            cmd.name
        ));
    }
    let parts: Vec<Part> = route::split(cmd, args, set.count());
    for p in &parts {
        if let Some(r) = precheck(set, cmd, p.shard) {
            return r;
        }
    }
    let now = now_ms();
    if cmd.flags & flags::DENYOOM != 0 && parts.len() > 1 && !split_fits(set, &parts, now) {
        return OOM;
    }
    let mut replies = Vec::with_capacity(parts.len());
    if let [p] = &parts[..] {
        let argv = borrow_args(&p.args);
        let (reply, lsn) = set.with(p.shard, |sh| sh.run(f, db, &argv, now, None));
        acks.note(p.shard, lsn);
        replies.push(reply);
        return route::merge(how, &parts, replies);
    }
    // Keys of several shards: one transaction, so that no client sees some parts
    // without the others.
    let mut shards: Vec<usize> = parts.iter().map(|p| p.shard).collect();
    shards.sort_unstable();
    set.atomically(&shards, |held| {
        for p in &parts {
            let argv = borrow_args(&p.args);
            let mut out = None;
            held.with(p.shard, &mut |sh| {
                out = Some(sh.run(f, db, &argv, now, None))
            });
            let (reply, lsn) = out.expect("the part ran");
            acks.note(p.shard, lsn);
            replies.push(reply);
        }
    });
    route::merge(how, &parts, replies)
}

/// The most expired keys each shard reclaims to make room for a write over several
/// shards.
const RECLAIM_SPLIT_KEYS: usize = 8192;

/// Whether a write over several shards (MSET) fits under the memory limit even if
/// every key is new: checked before any part runs, so that a refusal changes no
/// shard (each part checks its exact growth again as it runs). Expired keys of those
/// shards are reclaimed first if it does not fit.
fn split_fits(set: &impl ShardSet, parts: &[Part], now: u64) -> bool {
    let room = set.room();
    if room == u64::MAX {
        return true;
    }
    let grow = |p: &Part| -> u64 {
        p.args[1..]
            .chunks_exact(2)
            .map(|kv| Keyspace::entry_memory(kv[0].len(), kv[1].len(), false))
            .sum()
    };
    let total: u64 = parts.iter().map(grow).sum();
    if total <= room {
        return true;
    }
    for p in parts {
        let need = total - room;
        set.with(p.shard, |sh| sh.reclaim(now, need, RECLAIM_SPLIT_KEYS));
    }
    total <= set.room()
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// The commands about every shard, or about none, that the server and the store share
/// (PING, ECHO, TIME, DBSIZE, KEYS, SCAN, FLUSHDB, FLUSHALL, SWAPDB, MOVE, MSETNX), run
/// in database `db`. Other commands: `None`.
pub fn run_common(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    Some(match cmd.name {
        "ping" => match args.len() {
            1 => Reply::Simple("PONG".into()),
            2 => Reply::Bulk(args[1].clone()),
            _ => Reply::err("ERR wrong number of arguments for 'ping' command"),
        },
        "echo" => Reply::Bulk(args[1].clone()),
        "time" => {
            let d = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Reply::Array(vec![
                Reply::Bulk(d.as_secs().to_string().into_bytes()),
                Reply::Bulk(d.subsec_micros().to_string().into_bytes()),
            ])
        }
        // Whole-keyspace reads show every key's state: they wait for each shard's
        // whole log.
        "dbsize" => Reply::Int(
            (0..set.count())
                .map(|s| {
                    let (n, lsn) = set.with(s, |sh| (sh.db(db).len(), sh.appended));
                    acks.note(s, lsn);
                    n
                })
                .sum::<usize>() as i64,
        ),
        "keys" => {
            let now = now_ms();
            let pat = &args[1];
            let mut all = Vec::new();
            for s in 0..set.count() {
                let (keys, lsn) = set.with(s, |sh| (sh.db(db).keys(pat, now), sh.appended));
                acks.note(s, lsn);
                all.extend(keys);
            }
            Reply::Array(all.into_iter().map(Reply::Bulk).collect())
        }
        "scan" => scan(set, args, db, acks),
        "swapdb" => swapdb(set, args, acks),
        "msetnx" => msetnx(set, cmd, args, db, acks),
        "smove" | "sinter" | "sintercard" | "sunion" | "sdiff" | "sinterstore" | "sunionstore"
        | "sdiffstore" => return crate::commands::sets::run_multi(set, cmd, args, db, acks),
        "bitop" | "lcs" | "rename" | "renamenx" | "copy" | "randomkey" => {
            return crate::commands::across::run(set, cmd, args, db, acks)
        }
        "pfcount" | "pfmerge" | "pfselftest" => {
            return crate::commands::hll::run_server(set, cmd, args, db, acks)
        }
        "lmove" | "rpoplpush" | "lmpop" => {
            crate::commands::lists::run_server(set, cmd.name, args, db, acks)
        }
        "zunion" | "zinter" | "zdiff" | "zintercard" | "zunionstore" | "zinterstore"
        | "zdiffstore" | "zrangestore" | "zmpop" => {
            return crate::commands::zsets_multi::run_multi(set, cmd, args, db, acks)
        }
        "georadius" | "georadiusbymember" | "geosearchstore" => {
            return crate::commands::geo::run_multi(set, cmd, args, db, acks)
        }
        "xread" | "xreadgroup" => {
            crate::commands::streams::run_multi(set, cmd.name, args, db, acks)
        }
        "sort" | "sort_ro" => {
            crate::commands::sort::sort(set, args, db, cmd.name == "sort_ro", acks)
        }
        "move" => move_key(set, args, db, acks),
        "flushdb" | "flushall" => {
            if args.len() > 2
                || (args.len() == 2 && !eq(&args[1], "async") && !eq(&args[1], "sync"))
            {
                return Some(Reply::err("ERR syntax error"));
            }
            for s in 0..set.count() {
                if let Some(r) = set.refuses_writes(s) {
                    return Some(r);
                }
            }
            let all = cmd.name == "flushall";
            on_every_shard(set, acks, &mut |sh| {
                if all {
                    sh.flush_all();
                } else {
                    sh.flush_db(db);
                }
            });
            crate::pubsub::tracking::flushed();
            Reply::OK
        }
        _ => return None,
    })
}

/// A SCAN cursor as Redis reads it (C's `strtoul` in base 10, the whole text): an
/// optional sign, digits; a minus wraps around (`-1` is the largest cursor), an empty
/// text is 0; a leading space, anything left over or a value past 2^64 - 1 is refused.
pub(crate) fn parse_cursor(text: &[u8]) -> Option<u64> {
    let (neg, digits) = match text.first() {
        None => return Some(0),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().try_fold(0u64, |v, &c| {
        v.checked_mul(10)?.checked_add((c - b'0') as u64)
    })?;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Bits of a SCAN cursor below the shard index.
const SHARD_SHIFT: u32 = 56;

/// A database index as SELECT and MOVE read it (Redis's `getIntFromObjectOrReply`): not
/// an integer, `ERR value is not an integer or out of range`; beyond 32 bits, `ERR
/// value is out of range, value must between -2147483648 and 2147483647`; then 0 to
/// 15 (`out_of_range` otherwise).
pub fn parse_db(arg: &[u8], out_of_range: &'static str) -> Result<u8, Reply> {
    match crate::commands::parse_i64(arg) {
        None => Err(crate::commands::NOT_INT),
        Some(n) if i32::try_from(n).is_err() => Err(Reply::err(
            "ERR value is out of range, value must between -2147483648 and 2147483647",
        )),
        Some(n) if (0..crate::log::DATABASES as i64).contains(&n) => Ok(n as u8),
        Some(_) => Err(Reply::err(out_of_range)),
    }
}

/// An integer as Redis's `getIntFromObject` reads it: string2ll, within 32 bits.
fn parse_int32(arg: &[u8]) -> Option<i64> {
    crate::commands::parse_i64(arg).filter(|n| i32::try_from(*n).is_ok())
}

/// SWAPDB index1 index2: every shard swaps the two databases' keys (logged), shard
/// after shard. Errors: `ERR invalid first DB index` / `ERR invalid second DB index`
/// for an argument that is not an integer, `ERR DB index is out of range` for one
/// outside 0 to 15.
fn swapdb(set: &impl ShardSet, args: &[Vec<u8>], acks: &mut Acks) -> Reply {
    // Both are read before either is checked against the range, as Redis does.
    let (Some(a), Some(b)) = (parse_int32(&args[1]), parse_int32(&args[2])) else {
        return Reply::err(if parse_int32(&args[1]).is_none() {
            "ERR invalid first DB index"
        } else {
            "ERR invalid second DB index"
        });
    };
    let dbs = 0..crate::log::DATABASES as i64;
    if !dbs.contains(&a) || !dbs.contains(&b) {
        return Reply::err("ERR DB index is out of range");
    }
    let (a, b) = (a as u8, b as u8);
    for s in 0..set.count() {
        if let Some(r) = set.refuses_writes(s) {
            return r;
        }
    }
    on_every_shard(set, acks, &mut |sh| sh.swap_dbs(a, b));
    Reply::OK
}

/// MSETNX key value [key value ...]: sets every key (no expiry) if none of them exists,
/// answering 1; else sets none, answering 0. A key of any type exists. One transaction
/// over the keys' shards: no key appears between the check and the sets, and no client
/// sees some keys set and not the others. An odd number of arguments: `ERR wrong number
/// of arguments for 'msetnx' command`; a log that cannot be written, or the memory
/// limit (counted as if every key were new), refuse it before anything changes.
fn msetnx(set: &impl ShardSet, cmd: &Command, args: &[Vec<u8>], db: u8, acks: &mut Acks) -> Reply {
    if args.len().is_multiple_of(2) {
        return Reply::err("ERR wrong number of arguments for 'msetnx' command");
    }
    let parts: Vec<Part> = route::split(cmd, args, set.count());
    for p in &parts {
        if let Some(r) = precheck(set, cmd, p.shard) {
            return r;
        }
    }
    let now = now_ms();
    if !split_fits(set, &parts, now) {
        return OOM;
    }
    let mut shards: Vec<usize> = parts.iter().map(|p| p.shard).collect();
    shards.sort_unstable();
    set.atomically(&shards, |held| {
        let mut run = |p: &Part, f: crate::commands::ShardFn, args: &[&[u8]]| {
            let mut out = None;
            held.with(p.shard, &mut |sh| {
                out = Some(sh.run(f, db, args, now, None))
            });
            let (reply, lsn) = out.expect("the part ran");
            acks.note(p.shard, lsn);
            reply
        };
        for p in &parts {
            let mut keys: Vec<&[u8]> = vec![b"exists"];
            keys.extend(p.args[1..].iter().step_by(2).map(Vec::as_slice));
            if run(p, crate::commands::keys::exists, &keys) != Reply::Int(0) {
                return Reply::Int(0);
            }
        }
        for p in &parts {
            let r = run(p, crate::commands::strings::mset, &borrow_args(&p.args));
            if r.is_error() {
                return r;
            }
        }
        Reply::Int(1)
    })
}

/// Runs `f` on every shard as one transaction (FLUSHDB, FLUSHALL, SWAPDB: no client
/// sees some shards changed and others not).
fn on_every_shard(set: &impl ShardSet, acks: &mut Acks, f: &mut (dyn FnMut(&mut Shard) + Send)) {
    let shards: Vec<usize> = (0..set.count()).collect();
    set.atomically(&shards, |held| {
        for &s in &shards {
            let mut lsn = 0;
            held.with(s, &mut |sh| {
                f(sh);
                lsn = sh.appended;
            });
            acks.note(s, lsn);
        }
    });
}

/// MOVE key db: moves the key from database `db` to the other database, on its shard
/// (the database does not change a key's shard): 1 if moved; 0 if the key is missing
/// or the target already has it. Target the same database: `ERR source and destination
/// objects are the same`; not an integer: `ERR value is not an integer or out of
/// range`; outside 0 to 15: `ERR DB index is out of range`.
fn move_key(set: &impl ShardSet, args: &[Vec<u8>], db: u8, acks: &mut Acks) -> Reply {
    let to = match parse_db(&args[2], "ERR DB index is out of range") {
        Ok(to) => to,
        Err(e) => return e,
    };
    if to == db {
        return Reply::err("ERR source and destination objects are the same");
    }
    let s = route::shard_of(&args[1], set.count());
    if let Some(r) = set.refuses_writes(s) {
        return r;
    }
    let now = now_ms();
    let (moved, lsn) = set.with(s, |sh| {
        let moved = sh.move_key(&args[1], db, to, now);
        if moved {
            use crate::pubsub::{notify::notify_db, GENERIC};
            notify_db(db, GENERIC, "move_from", &args[1]);
            notify_db(to, GENERIC, "move_to", &args[1]);
        }
        (moved, sh.appended)
    });
    acks.note(s, lsn);
    Reply::Int(moved as i64)
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: the cursor's top 8 bits
/// name the shard, the rest is that shard's own cursor; shards are walked in order.
/// A TYPE weft-kv has no keys of (`list`, `zset`, anything) matches none.
fn scan(set: &impl ShardSet, args: &[Vec<u8>], db: u8, acks: &mut Acks) -> Reply {
    let Some(cursor) = parse_cursor(&args[1]) else {
        return Reply::err("ERR invalid cursor");
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count = 10usize;
    // TYPE: `Some(None)` names a type no key has.
    let mut only: Option<Option<crate::keyspace::Type>> = None;
    let mut i = 2;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Reply::err("ERR syntax error");
        }
        let v = &args[i + 1];
        if eq(&args[i], "match") {
            pattern = Some(v);
        } else if eq(&args[i], "count") {
            match crate::commands::parse_i64(v) {
                Some(n) if n >= 1 => count = n as usize,
                Some(_) => return Reply::err("ERR syntax error"),
                None => return Reply::err("ERR value is not an integer or out of range"),
            }
        } else if eq(&args[i], "type") {
            only = Some(crate::keyspace::Type::from_name(v));
        } else {
            return Reply::err("ERR syntax error");
        }
        i += 2;
    }
    let mut shard = (cursor >> SHARD_SHIFT) as usize;
    let mut inner = cursor & ((1 << SHARD_SHIFT) - 1);
    let mut keys = Vec::new();
    let now = now_ms();
    while shard < set.count() && keys.len() < count {
        let (next, found, lsn) = set.with(shard, |sh| {
            let ks = sh.db(db);
            let (next, found) = match only {
                Some(None) => (ks.scan(inner, count - keys.len(), pattern, now).0, vec![]),
                Some(t) => ks.scan_typed(inner, count - keys.len(), pattern, t, now),
                None => ks.scan(inner, count - keys.len(), pattern, now),
            };
            (next, found, sh.appended)
        });
        acks.note(shard, lsn);
        keys.extend(found);
        if next == 0 {
            shard += 1;
            inner = 0;
        } else {
            inner = next;
            break;
        }
    }
    let next = if shard >= set.count() {
        0
    } else {
        ((shard as u64) << SHARD_SHIFT) | inner
    };
    Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
    ])
}
