//! Crash consistency: writers against `weft kv serve`, `kill -9` at a random moment, a
//! restart, and every acknowledged write checked against what a linearizable store
//! could hold.
//!
//! Each round, four writers (two one command at a time, two pipelining 1 to 32
//! commands) run SET, SET EX, INCR, APPEND, DEL and EXPIRE on keys of their own and on
//! keys they share, and HSET, HDEL, HINCRBY, DEL and EXPIRE on hashes of their own and
//! HINCRBY and HSET on hashes they share, SADD, SREM, DEL and EXPIRE on sets of their
//! own and SADD and SREM on sets they share, ZADD, ZREM, ZINCRBY, DEL and EXPIRE on
//! sorted sets of their own, recording for each command when it was sent
//! and when (if ever) its reply came. Once a random number of replies has come, the server is killed with
//! SIGKILL; it is restarted on the same directory, and every key is read back (value
//! and whether it has a time to live). A command whose reply came is *acknowledged*
//! and must have taken effect; one sent without a reply is *in flight* and may or may
//! not have. The checks:
//!
//! - a key of one writer holds exactly the state its acknowledged commands lead to, or
//!   the state after some of its in-flight commands too (in order);
//! - a shared counter (INCR only) holds at least the acknowledged increments and at most
//!   those plus the in-flight ones;
//! - a shared register (SET, SET EX, DEL, EXPIRE) holds the result of a command that
//!   could have been the last one: no acknowledged command had to come after it (it
//!   was sent after that one's reply, or later on the same connection); its time to
//!   live agrees (SET EX leaves one, SET none unless an EXPIRE could come after it);
//! - a shared APPEND key holds each acknowledged piece once, no piece twice, and no
//!   two pieces in an order that contradicts the replies (a piece acknowledged before
//!   another was sent comes first);
//! - a writer's own hash is checked as a writer's own key (its fields and values, and
//!   whether it has a time to live); a shared hash holds in each counter field at least
//!   the acknowledged HINCRBYs and at most those plus the ones in flight, every field
//!   whose HSET was acknowledged, and no field never sent;
//! - a writer's own set is checked as a writer's own key (its members, and whether it
//!   has a time to live), and so is a writer's own sorted set (its members and
//!   scores); a shared set holds every member whose SADD was acknowledged
//!   unless an SREM of it could have come after, and no member never sent.
//!
//! Lists: each writer also runs LPUSH, RPUSH, LPOP, RPOP, DEL and EXPIRE on lists of
//! its own, checked as a writer's own key (its elements in order, and whether it has a
//! time to live).
//!
//! Streams: each writer also runs XADD (explicit, increasing IDs), XDEL, XTRIM MAXLEN,
//! DEL and EXPIRE on streams of its own, checked as a writer's own key (its entries in
//! order, and whether it has a time to live; a stream XDEL emptied still exists).
//!
//! What is promised, and so checked: `kill -9` is a crash of the process, not of the
//! machine, and docs/kv.md promises that such a crash loses nothing acknowledged under
//! every `--fsync` policy (under `everysec` and `no` the written records are in the
//! kernel's page cache, which outlives the process; only a crash of the machine may
//! lose the last second). So `always` and `everysec` are held to the same check.
//!
//! The checker is shown to work both ways with redis-server (skipped when it is not
//! installed): with `appendonly no` it finds lost writes; with `appendonly yes` and
//! `appendfsync always` it finds nothing. The default run does a few rounds (seconds);
//! `WEFT_KV_CRASH_ITERS=N` runs N rounds of each weft-kv policy.
//!
//! Commands over several shards (MSET, EXEC) are checked to be kept whole or not at
//! all by `kv_crash_tx.rs`, the same kill under `--fsync always`.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{KvServer, Rng, CEILING};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_kv::client::Client;
use weft_kv::resp::Reply;

/// What a command does to its key.
#[derive(Clone, Debug)]
enum Op {
    Set(String),
    SetEx(String),
    Incr,
    Append(String),
    Del,
    Expire,
    /// HSET field value.
    HSet(String, String),
    /// HDEL field.
    HDel(String),
    /// HINCRBY field 1.
    HIncr(String),
    /// SADD member.
    SAdd(String),
    /// SREM member.
    SRem(String),
    /// ZADD score member.
    ZAdd(String, String),
    /// ZREM member.
    ZRem(String),
    /// ZINCRBY 1 member.
    ZIncr(String),
    /// LPUSH element.
    LPush(String),
    /// RPUSH element.
    RPush(String),
    /// LPOP.
    LPop,
    /// RPOP.
    RPop,
    /// XADD key <n>-1 f value.
    XAdd(u64, String),
    /// XDEL key <n>-1.
    XDel(u64),
    /// XTRIM key MAXLEN 2.
    XTrim,
}

/// A key's state: its value (a hash's: its fields as `field=value;` in field order)
/// and whether it has a time to live.
type State = Option<(String, bool)>;

/// A hash's fields from its state's text.
fn fields(text: &str) -> BTreeMap<String, String> {
    text.split(';')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (f, v) = p.split_once('=').expect("field=value");
            (f.to_string(), v.to_string())
        })
        .collect()
}

/// A hash's state text from its fields (a hash without fields does not exist).
fn hash_state(fields: &BTreeMap<String, String>, ttl: bool) -> State {
    (!fields.is_empty()).then(|| {
        let text = fields.iter().map(|(f, v)| format!("{f}={v};")).collect();
        (text, ttl)
    })
}

/// A set's members from its state's text (`member;member;...`, sorted).
fn members(text: &str) -> BTreeSet<String> {
    text.split(';')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// A set's state text from its members (a set without members does not exist).
fn set_state(members: &BTreeSet<String>, ttl: bool) -> State {
    (!members.is_empty()).then(|| {
        let text = members.iter().map(|m| format!("{m};")).collect();
        (text, ttl)
    })
}

/// A list's elements from its state's text (`element;element;...`, head first).
fn elements(text: &str) -> std::collections::VecDeque<String> {
    text.split(';')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect()
}

/// What the command does to `state`, as Redis defines it.
fn apply(state: &State, op: &Op) -> State {
    match op {
        // A stream's state: its entries as `id=value;` in ID order (an empty stream
        // exists: XDEL and XTRIM keep the key).
        Op::XAdd(..) | Op::XDel(_) | Op::XTrim => {
            let (mut entries, ttl): (BTreeMap<u64, String>, bool) = match state {
                None => (BTreeMap::new(), false),
                Some((text, ttl)) => (
                    fields(text)
                        .into_iter()
                        .map(|(id, v)| (id.trim_end_matches("-1").parse().unwrap(), v))
                        .collect(),
                    *ttl,
                ),
            };
            match op {
                Op::XAdd(n, v) => {
                    entries.insert(*n, v.clone());
                }
                Op::XDel(n) => {
                    entries.remove(n);
                }
                _ => {
                    while entries.len() > 2 {
                        entries.pop_first();
                    }
                }
            }
            if state.is_none() && !matches!(op, Op::XAdd(..)) {
                return None;
            }
            let text = entries.iter().map(|(n, v)| format!("{n}-1={v};")).collect();
            Some((text, ttl))
        }
        Op::LPush(_) | Op::RPush(_) | Op::LPop | Op::RPop => {
            let (mut l, ttl) = match state {
                None => (Default::default(), false),
                Some((text, ttl)) => (elements(text), *ttl),
            };
            match op {
                Op::LPush(x) => l.push_front(x.clone()),
                Op::RPush(x) => l.push_back(x.clone()),
                Op::LPop => drop(l.pop_front()),
                _ => drop(l.pop_back()),
            }
            (!l.is_empty()).then(|| (l.iter().map(|x| format!("{x};")).collect(), ttl))
        }
        Op::Set(v) => Some((v.clone(), false)),
        Op::SetEx(v) => Some((v.clone(), true)),
        Op::Del => None,
        Op::Expire => state.as_ref().map(|(v, _)| (v.clone(), true)),
        Op::Append(s) => Some(match state {
            None => (s.clone(), false),
            Some((v, ttl)) => (format!("{v}{s}"), *ttl),
        }),
        Op::Incr => match state {
            None => Some(("1".into(), false)),
            Some((v, ttl)) => match v.parse::<i64>() {
                // Only a canonical integer (no leading zeros or signs) counts.
                Ok(n) if n.to_string() == *v => Some(((n + 1).to_string(), *ttl)),
                _ => state.clone(), // an error reply; nothing changes
            },
        },
        // A sorted set's state is its members and scores, as a hash's fields.
        Op::HSet(..) | Op::HDel(_) | Op::HIncr(_) | Op::ZAdd(..) | Op::ZRem(_) | Op::ZIncr(_) => {
            let (mut f, ttl) = match state {
                None => (BTreeMap::new(), false),
                Some((text, ttl)) => (fields(text), *ttl),
            };
            match op {
                Op::HSet(k, v) | Op::ZAdd(v, k) => {
                    f.insert(k.clone(), v.clone());
                }
                Op::HDel(k) | Op::ZRem(k) => {
                    f.remove(k);
                }
                Op::HIncr(k) | Op::ZIncr(k) => {
                    let n: i64 = f.get(k).map_or(0, |v| v.parse().expect("a counter field"));
                    f.insert(k.clone(), (n + 1).to_string());
                }
                _ => unreachable!(),
            }
            hash_state(&f, ttl)
        }
        Op::SAdd(m) | Op::SRem(m) => {
            let (mut set, ttl) = match state {
                None => (BTreeSet::new(), false),
                Some((text, ttl)) => (members(text), *ttl),
            };
            if matches!(op, Op::SAdd(_)) {
                set.insert(m.clone());
            } else {
                set.remove(m);
            }
            set_state(&set, ttl)
        }
    }
}

/// The kinds of keys.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Private,
    Counter,
    Register,
    Appends,
    /// A writer's own hash.
    PrivateHash,
    /// A hash the writers share: counter fields and fields of their own.
    SharedHash,
    /// A writer's own set.
    PrivateSet,
    /// A set the writers share: members of their own.
    SharedSet,
    /// A writer's own list.
    PrivateList,
    /// A writer's own sorted set.
    PrivateZset,
    /// A writer's own stream.
    PrivateStream,
}

/// One command a writer sent.
#[derive(Clone, Debug)]
struct Call {
    key: String,
    op: Op,
    /// The writer (one connection each) and the command's place on its connection.
    conn: usize,
    seq: u64,
    /// Before it was written to the socket.
    sent: Instant,
    /// After its reply was read; `None`: in flight when the server died.
    acked: Option<Instant>,
}

impl Call {
    /// Whether `self` must come after `other` in any order the server may have run
    /// them in: `self` took effect (its reply came) and was sent after `other`'s reply,
    /// or later on the same connection.
    fn forced_after(&self, other: &Call) -> bool {
        self.acked.is_some()
            && (other.acked.is_some_and(|r| self.sent > r)
                || (self.conn == other.conn && self.seq > other.seq))
    }
}

const WRITERS: usize = 4;

fn key_name(round: u64, class: Class, owner: usize, n: u64) -> String {
    match class {
        Class::Private => format!("r{round}:p{owner}:{n}"),
        Class::Counter => format!("r{round}:c{n}"),
        Class::Register => format!("r{round}:g{n}"),
        Class::Appends => format!("r{round}:a{n}"),
        Class::PrivateHash => format!("r{round}:hp{owner}:{n}"),
        Class::SharedHash => format!("r{round}:hs{n}"),
        Class::PrivateSet => format!("r{round}:sp{owner}:{n}"),
        Class::SharedSet => format!("r{round}:ss{n}"),
        Class::PrivateZset => format!("r{round}:zp{owner}:{n}"),
        Class::PrivateList => format!("r{round}:lp{owner}:{n}"),
        Class::PrivateStream => format!("r{round}:xp{owner}:{n}"),
    }
}

fn class_of(key: &str) -> Class {
    let k = key.split(':').nth(1).unwrap_or("");
    match k.chars().next() {
        Some('p') => Class::Private,
        Some('c') => Class::Counter,
        Some('g') => Class::Register,
        Some('h') if k.starts_with("hp") => Class::PrivateHash,
        Some('h') => Class::SharedHash,
        Some('s') if k.starts_with("sp") => Class::PrivateSet,
        Some('s') => Class::SharedSet,
        Some('z') => Class::PrivateZset,
        Some('l') => Class::PrivateList,
        Some('x') => Class::PrivateStream,
        _ => Class::Appends,
    }
}

/// Writer `w`'s next command.
fn next_op(rng: &mut Rng, round: u64, w: usize, seq: u64) -> (String, Op) {
    let unique = |rng: &mut Rng| {
        let mut v = format!("w{w}.{seq}");
        if rng.below(8) == 0 {
            // Now and then a value of several pages, so a write spans pages.
            v.push_str(&".".repeat(3000 + rng.below(9000) as usize));
        }
        v
    };
    match rng.below(39) {
        36..=38 => {
            let key = key_name(round, Class::PrivateStream, w, rng.below(3));
            let op = match rng.below(10) {
                0..=4 => Op::XAdd(seq, unique(rng)),
                5..=6 => Op::XDel(seq.saturating_sub(1 + rng.below(6))),
                7 => Op::XTrim,
                _ if rng.below(2) == 0 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        33..=35 => {
            let key = key_name(round, Class::PrivateZset, w, rng.below(3));
            let op = match rng.below(10) {
                0..=3 => Op::ZAdd(rng.below(5).to_string(), format!("m{}", rng.below(6))),
                4..=5 => Op::ZRem(format!("m{}", rng.below(6))),
                6..=7 => Op::ZIncr(format!("m{}", rng.below(6))),
                _ if rng.below(2) == 0 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        30..=32 => {
            let key = key_name(round, Class::PrivateList, w, rng.below(3));
            let op = match rng.below(10) {
                0..=2 => Op::LPush(format!("e{seq}")),
                3..=5 => Op::RPush(format!("e{seq}")),
                6 => Op::LPop,
                7 => Op::RPop,
                _ if rng.below(2) == 0 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        26..=27 => {
            let key = key_name(round, Class::PrivateSet, w, rng.below(3));
            let op = match rng.below(10) {
                0..=4 => Op::SAdd(format!("m{}", rng.below(6))),
                5..=7 => Op::SRem(format!("m{}", rng.below(6))),
                _ if rng.below(2) == 0 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        28..=29 => {
            let key = key_name(round, Class::SharedSet, 0, rng.below(2));
            // A member of its own, added, or now and then removed again.
            let op = match rng.below(4) {
                0 => Op::SRem(format!("w{w}.{}", seq.saturating_sub(1 + rng.below(8)))),
                _ => Op::SAdd(format!("w{w}.{seq}")),
            };
            (key, op)
        }
        20..=22 => {
            let key = key_name(round, Class::PrivateHash, w, rng.below(3));
            let op = match rng.below(10) {
                0..=3 => Op::HSet(format!("f{}", rng.below(4)), unique(rng)),
                4..=5 => Op::HDel(format!("f{}", rng.below(4))),
                6..=7 => Op::HIncr(format!("n{}", rng.below(2))),
                8 => Op::HDel(format!("n{}", rng.below(2))),
                _ if rng.below(2) == 0 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        23..=25 => {
            let key = key_name(round, Class::SharedHash, 0, rng.below(2));
            let op = match rng.below(3) {
                0 => Op::HSet(format!("w{w}.{seq}"), "1".into()),
                _ => Op::HIncr(format!("c{}", rng.below(2))),
            };
            (key, op)
        }
        0..=9 => {
            let key = key_name(round, Class::Private, w, rng.below(6));
            let op = match rng.below(12) {
                0..=1 => Op::Set(rng.below(1000).to_string()),
                2..=3 => Op::Set(unique(rng)),
                4 => Op::SetEx(rng.below(1000).to_string()),
                5..=7 => Op::Incr,
                8 => Op::Append(format!("+{seq}")),
                9 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        10..=12 => (key_name(round, Class::Counter, 0, rng.below(2)), Op::Incr),
        13..=17 => {
            let key = key_name(round, Class::Register, 0, rng.below(3));
            let op = match rng.below(8) {
                0..=3 => Op::Set(unique(rng)),
                4 => Op::SetEx(unique(rng)),
                5 => Op::Del,
                _ => Op::Expire,
            };
            (key, op)
        }
        _ => (
            key_name(round, Class::Appends, 0, rng.below(2)),
            Op::Append(format!("|w{w}.{seq}")),
        ),
    }
}

fn send(c: &mut Client, key: &str, op: &Op) {
    let k = key.as_bytes();
    match op {
        Op::Set(v) => c.send(&[b"SET", k, v.as_bytes()]),
        Op::SetEx(v) => c.send(&[b"SET", k, v.as_bytes(), b"EX", b"100000"]),
        Op::Incr => c.send(&[b"INCR", k]),
        Op::Append(s) => c.send(&[b"APPEND", k, s.as_bytes()]),
        Op::Del => c.send(&[b"DEL", k]),
        Op::Expire => c.send(&[b"EXPIRE", k, b"100000"]),
        Op::HSet(f, v) => c.send(&[b"HSET", k, f.as_bytes(), v.as_bytes()]),
        Op::HDel(f) => c.send(&[b"HDEL", k, f.as_bytes()]),
        Op::HIncr(f) => c.send(&[b"HINCRBY", k, f.as_bytes(), b"1"]),
        Op::LPush(x) => c.send(&[b"LPUSH", k, x.as_bytes()]),
        Op::RPush(x) => c.send(&[b"RPUSH", k, x.as_bytes()]),
        Op::LPop => c.send(&[b"LPOP", k]),
        Op::RPop => c.send(&[b"RPOP", k]),
        Op::SAdd(m) => c.send(&[b"SADD", k, m.as_bytes()]),
        Op::SRem(m) => c.send(&[b"SREM", k, m.as_bytes()]),
        Op::ZAdd(s, m) => c.send(&[b"ZADD", k, s.as_bytes(), m.as_bytes()]),
        Op::ZRem(m) => c.send(&[b"ZREM", k, m.as_bytes()]),
        Op::ZIncr(m) => c.send(&[b"ZINCRBY", k, b"1", m.as_bytes()]),
        Op::XAdd(n, v) => c.send(&[b"XADD", k, format!("{n}-1").as_bytes(), b"f", v.as_bytes()]),
        Op::XDel(n) => c.send(&[b"XDEL", k, format!("{n}-1").as_bytes()]),
        Op::XTrim => c.send(&[b"XTRIM", k, b"MAXLEN", b"2"]),
    }
}

/// Writer `w` until its connection fails: one command at a time (even `w`) or
/// pipelines of 1 to 32.
fn writer(
    mut c: Client,
    w: usize,
    round: u64,
    mut rng: Rng,
    calls: Arc<Mutex<Vec<Call>>>,
    replies: Arc<AtomicUsize>,
) {
    let mut seq = 0u64;
    loop {
        let batch = if w.is_multiple_of(2) {
            1
        } else {
            1 + rng.below(32)
        };
        let first = calls.lock().unwrap().len();
        let now = Instant::now();
        for _ in 0..batch {
            seq += 1;
            let (key, op) = next_op(&mut rng, round, w, seq);
            send(&mut c, &key, &op);
            calls.lock().unwrap().push(Call {
                key,
                op,
                conn: w,
                seq,
                sent: now,
                acked: None,
            });
        }
        if c.flush().is_err() {
            return;
        }
        for i in first..first + batch as usize {
            match c.read_reply() {
                Ok(r) => {
                    if let Reply::Error(e) = &r {
                        // INCR of a value that is not a number is expected; no other.
                        let call = &calls.lock().unwrap()[i];
                        assert!(
                            matches!(call.op, Op::Incr) && e.contains("not an integer"),
                            "{call:?} answered {e}"
                        );
                    }
                    calls.lock().unwrap()[i].acked = Some(Instant::now());
                    replies.fetch_add(1, SeqCst);
                }
                Err(_) => return,
            }
        }
    }
}

fn text_of(v: Reply) -> String {
    match v {
        Reply::Bulk(v) => String::from_utf8(v).unwrap(),
        other => panic!("not a string: {other:?}"),
    }
}

/// Reads every key's state (value, or a hash's fields, and whether TTL says it has a
/// time to live).
fn read_states(c: &mut Client, keys: &[String]) -> HashMap<String, State> {
    let hash = |k: &str| matches!(class_of(k), Class::PrivateHash | Class::SharedHash);
    let set = |k: &str| matches!(class_of(k), Class::PrivateSet | Class::SharedSet);
    for k in keys {
        if class_of(k) == Class::PrivateStream {
            c.send(&[b"XRANGE", k.as_bytes(), b"-", b"+"]);
            c.send(&[b"TTL", k.as_bytes()]);
            continue;
        }
        if class_of(k) == Class::PrivateList {
            c.send(&[b"LRANGE", k.as_bytes(), b"0", b"-1"]);
            c.send(&[b"TTL", k.as_bytes()]);
            continue;
        }
        let read: &[u8] = match k {
            k if hash(k) => b"HGETALL",
            k if set(k) => b"SMEMBERS",
            k if class_of(k) == Class::PrivateZset => {
                c.send(&[b"ZRANGE", k.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
                c.send(&[b"TTL", k.as_bytes()]);
                continue;
            }
            _ => b"GET",
        };
        c.send(&[read, k.as_bytes()]);
        c.send(&[b"TTL", k.as_bytes()]);
    }
    c.flush().unwrap();
    let mut out = HashMap::new();
    let text = |v: Reply| match v {
        Reply::Bulk(v) => String::from_utf8(v).unwrap(),
        other => panic!("not a string: {other:?}"),
    };
    for k in keys {
        let v = c.read_reply().unwrap();
        let ttl = c.read_reply().unwrap();
        let state = match (v, ttl) {
            (_, Reply::Int(-2)) if class_of(k) == Class::PrivateStream => None,
            (Reply::Array(items), Reply::Int(t)) if class_of(k) == Class::PrivateStream => {
                // Entries `[id, [f, value]]`.
                let mut text = String::new();
                for e in items {
                    let Reply::Array(e) = e else {
                        panic!("{k}: an entry")
                    };
                    let mut e = e.into_iter();
                    let id = text_of(e.next().unwrap());
                    let Some(Reply::Array(fv)) = e.next() else {
                        panic!("{k}: fields")
                    };
                    text.push_str(&format!(
                        "{id}={};",
                        text_of(fv.into_iter().nth(1).unwrap())
                    ));
                }
                Some((text, t >= 0))
            }
            (Reply::Nil, _) => None,
            (Reply::Bulk(v), Reply::Int(t)) => Some((String::from_utf8(v).unwrap(), t >= 0)),
            (Reply::Array(items), Reply::Int(t)) if hash(k) => {
                let mut f = BTreeMap::new();
                let mut it = items.into_iter();
                while let (Some(name), Some(value)) = (it.next(), it.next()) {
                    f.insert(text(name), text(value));
                }
                hash_state(&f, t >= 0)
            }
            (Reply::Array(items), Reply::Int(t)) if class_of(k) == Class::PrivateZset => {
                // Members and scores (RESP2: flat; integer scores, written as integers).
                let mut z = BTreeMap::new();
                let mut it = items.into_iter();
                while let (Some(m), Some(s)) = (it.next(), it.next()) {
                    z.insert(text(m), text(s));
                }
                hash_state(&z, t >= 0)
            }
            (Reply::Array(items) | Reply::Set(items), Reply::Int(t)) if set(k) => {
                set_state(&items.into_iter().map(text).collect(), t >= 0)
            }
            (Reply::Array(items), Reply::Int(t)) if class_of(k) == Class::PrivateList => {
                let l: String = items.into_iter().map(|x| format!("{};", text(x))).collect();
                (!l.is_empty()).then_some((l, t >= 0))
            }
            other => panic!("{k}: {other:?}"),
        };
        out.insert(k.clone(), state);
    }
    out
}

fn show(s: &State) -> String {
    match s {
        None => "(missing)".into(),
        Some((v, ttl)) => {
            let v = if v.len() > 40 {
                format!("{}...({} bytes)", &v[..40], v.len())
            } else {
                v.clone()
            };
            format!("{v:?}{}", if *ttl { " with a TTL" } else { "" })
        }
    }
}

/// The checks of the module doc, for one key: `None` if `got` is allowed.
fn check_key(key: &str, calls: &[&Call], got: &State) -> Option<String> {
    let acked = calls.iter().filter(|c| c.acked.is_some()).count();
    let fail = |why: String| Some(format!("{key}: found {}: {why}", show(got)));
    match class_of(key) {
        Class::Private
        | Class::PrivateList
        | Class::PrivateHash
        | Class::PrivateSet
        | Class::PrivateZset
        | Class::PrivateStream => {
            // One writer: its acknowledged commands are a prefix of its commands.
            let mut states = vec![None];
            for c in calls {
                states.push(apply(states.last().unwrap(), &c.op));
            }
            if states[acked..].contains(got) {
                None
            } else {
                fail(format!(
                    "the {acked} acknowledged commands lead to {}, and the {} in flight \
                     could lead only to {}",
                    show(&states[acked]),
                    calls.len() - acked,
                    states[acked + 1..]
                        .iter()
                        .map(show)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
        }
        Class::Counter => {
            let n = match got {
                None => 0,
                Some((v, _)) => v.parse::<usize>().unwrap_or(usize::MAX),
            };
            if (acked..=calls.len()).contains(&n) {
                None
            } else {
                fail(format!(
                    "{acked} increments were acknowledged and {} in flight",
                    calls.len() - acked
                ))
            }
        }
        Class::Register => {
            let setters: Vec<&&Call> = calls
                .iter()
                .filter(|c| !matches!(c.op, Op::Expire))
                .collect();
            let expires: Vec<&&Call> = calls
                .iter()
                .filter(|c| matches!(c.op, Op::Expire))
                .collect();
            // Nothing ran: only if no value-setting command was acknowledged.
            if got.is_none() && setters.iter().all(|c| c.acked.is_none()) {
                return None;
            }
            let possible = setters.iter().any(|last| {
                let value = match &last.op {
                    Op::Set(v) | Op::SetEx(v) => Some(v),
                    _ => None,
                };
                if value != got.as_ref().map(|(v, _)| v) {
                    return false;
                }
                let other = |x: &&Call| !(x.seq == last.seq && x.conn == last.conn);
                if setters.iter().any(|x| other(x) && x.forced_after(last)) {
                    return false;
                }
                match (got, &last.op) {
                    (None, _) => true,
                    (Some((_, ttl)), Op::SetEx(_)) => *ttl,
                    (Some((_, true)), _) => expires.iter().any(|e| {
                        // Unless it had to come before `last`, it may come after.
                        let before = e.acked.is_some_and(|r| r < last.sent)
                            || (e.conn == last.conn && e.seq < last.seq);
                        !before
                    }),
                    (Some((_, false)), _) => !expires.iter().any(|e| e.forced_after(last)),
                }
            });
            if possible {
                None
            } else {
                fail(format!(
                    "no order of the {acked} acknowledged and {} in-flight commands ends so",
                    calls.len() - acked
                ))
            }
        }
        Class::SharedHash => {
            let got = got.as_ref().map_or_else(BTreeMap::new, |(t, _)| fields(t));
            for c in ["c0", "c1"] {
                let incr = |x: &&&Call| matches!(&x.op, Op::HIncr(f) if f == c);
                let acked = calls
                    .iter()
                    .filter(incr)
                    .filter(|x| x.acked.is_some())
                    .count();
                let sent = calls.iter().filter(incr).count();
                let n = got
                    .get(c)
                    .map_or(0, |v| v.parse::<usize>().unwrap_or(usize::MAX));
                if !(acked..=sent).contains(&n) {
                    return fail(format!(
                        "field {c} is {n}: {acked} increments were acknowledged and {} in flight",
                        sent - acked
                    ));
                }
            }
            for c in calls {
                if let Op::HSet(f, _) = &c.op {
                    if c.acked.is_some() && !got.contains_key(f) {
                        return fail(format!("the acknowledged field {f} is lost"));
                    }
                }
            }
            for f in got.keys().filter(|f| !f.starts_with('c')) {
                let sent = calls
                    .iter()
                    .any(|c| matches!(&c.op, Op::HSet(g, _) if g == f));
                if !sent {
                    return fail(format!("the field {f} was never sent"));
                }
            }
            None
        }
        Class::SharedSet => {
            let got = got.as_ref().map_or_else(BTreeSet::new, |(t, _)| members(t));
            for c in calls.iter().filter(|c| c.acked.is_some()) {
                let Op::SAdd(m) = &c.op else { continue };
                // An SREM of the member that need not come before this SADD may have
                // removed it.
                let removable = calls
                    .iter()
                    .any(|r| matches!(&r.op, Op::SRem(x) if x == m) && !c.forced_after(r));
                if !removable && !got.contains(m) {
                    return fail(format!("the acknowledged member {m} is lost"));
                }
            }
            for m in &got {
                if !calls.iter().any(|c| matches!(&c.op, Op::SAdd(x) if x == m)) {
                    return fail(format!("the member {m} was never sent"));
                }
            }
            None
        }
        Class::Appends => {
            let pieces: Vec<String> = match got {
                None => vec![],
                Some((v, _)) => v
                    .split('|')
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("|{p}"))
                    .collect(),
            };
            let by_piece: HashMap<&str, &&Call> = calls
                .iter()
                .map(|c| match &c.op {
                    Op::Append(p) => (p.as_str(), c),
                    _ => unreachable!(),
                })
                .collect();
            let mut seen = HashSet::new();
            for p in &pieces {
                if !by_piece.contains_key(p.as_str()) {
                    return fail(format!("{p} was never sent"));
                }
                if !seen.insert(p.as_str()) {
                    return fail(format!("{p} is there twice"));
                }
            }
            for c in calls.iter().filter(|c| c.acked.is_some()) {
                let Op::Append(p) = &c.op else { unreachable!() };
                if !seen.contains(p.as_str()) {
                    return fail(format!("the acknowledged {p} is lost"));
                }
            }
            for (i, a) in pieces.iter().enumerate() {
                for b in &pieces[i + 1..] {
                    let (ca, cb) = (by_piece[a.as_str()], by_piece[b.as_str()]);
                    let b_first = cb.acked.is_some_and(|r| ca.sent > r)
                        || (ca.conn == cb.conn && cb.seq < ca.seq);
                    if b_first {
                        return fail(format!("{a} comes before {b}, which had to come first"));
                    }
                }
            }
            None
        }
    }
}

/// What a round runs against.
#[derive(Clone, Copy, Debug)]
enum Target {
    Weft { fsync: &'static str },
    Redis { appendonly: bool },
}

impl Target {
    fn start(&self, dir: &Path, socket: &Path, workers: usize) -> KvServer {
        match *self {
            Target::Weft { fsync } => {
                let w = workers.to_string();
                KvServer::weft(dir, socket, &["--fsync", fsync, "--workers", &w])
                    .unwrap_or_else(|e| panic!("weft kv serve: {e}"))
            }
            Target::Redis { appendonly } => {
                KvServer::redis(dir, socket, appendonly).expect("redis-server was found before")
            }
        }
    }
}

/// One round on `server` (started): writers, a kill at a random moment, a restart;
/// returns the restarted server and what the checks found wrong.
fn round(
    target: Target,
    mut server: KvServer,
    dir: &Path,
    round: u64,
    rng: &mut Rng,
) -> (KvServer, Vec<String>) {
    let replies = Arc::new(AtomicUsize::new(0));
    let calls: Vec<Arc<Mutex<Vec<Call>>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let c = server.client().unwrap();
            let (calls, replies) = (calls[w].clone(), replies.clone());
            let r = Rng(rng.next() | 1);
            std::thread::spawn(move || writer(c, w, round, r, calls, replies))
        })
        .collect();
    let kill_after = 50 + rng.below(800) as usize;
    let deadline = Instant::now() + CEILING;
    while replies.load(SeqCst) < kill_after {
        assert!(Instant::now() < deadline, "the writers made no progress");
        std::thread::sleep(Duration::from_micros(200));
    }
    std::thread::sleep(Duration::from_micros(rng.below(3000)));
    server.kill9();
    for t in threads {
        t.join().expect("a writer panicked");
    }
    let socket = server.socket.clone();
    drop(server);
    let workers = 1 + rng.below(2) as usize;
    let server = target.start(dir, &socket, workers);
    let mut by_key: BTreeMap<String, Vec<Call>> = BTreeMap::new();
    for list in &calls {
        for c in list.lock().unwrap().iter() {
            by_key.entry(c.key.clone()).or_default().push(c.clone());
        }
    }
    let keys: Vec<String> = by_key.keys().cloned().collect();
    let states = read_states(&mut server.client().unwrap(), &keys);
    let mut wrong = Vec::new();
    for (key, list) in &by_key {
        let mut list: Vec<&Call> = list.iter().collect();
        list.sort_by_key(|c| (c.conn, c.seq));
        if let Some(w) = check_key(key, &list, &states[key]) {
            wrong.push(w);
        }
    }
    let acked: usize = calls
        .iter()
        .map(|l| {
            l.lock()
                .unwrap()
                .iter()
                .filter(|c| c.acked.is_some())
                .count()
        })
        .sum();
    assert!(acked >= kill_after, "{acked} acknowledged");
    (server, wrong)
}

/// `iters` rounds against `target` on one directory; all that the checks found.
fn run(target: Target, iters: u64) -> Vec<String> {
    let seed = match std::env::var("WEFT_KV_CRASH_SEED") {
        Ok(s) => s.parse().expect("WEFT_KV_CRASH_SEED is a number"),
        Err(_) => Rng::from_time(),
    };
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    std::fs::create_dir(&dir).unwrap();
    let mut server = target.start(&dir, &socket, 2);
    let mut wrong = Vec::new();
    for r in 0..iters {
        let (next, found) = round(target, server, &dir, r, &mut rng);
        server = next;
        wrong.extend(found.into_iter().map(|w| format!("round {r}: {w}")));
    }
    if !wrong.is_empty() {
        eprintln!(
            "{target:?} (WEFT_KV_CRASH_SEED={seed}): {} keys wrong",
            wrong.len()
        );
    }
    wrong
}

fn iters(default: u64) -> u64 {
    std::env::var("WEFT_KV_CRASH_ITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn assert_nothing_lost(target: Target, wrong: &[String]) {
    assert!(
        wrong.is_empty(),
        "{target:?}: {} keys not as any order of the acknowledged and in-flight writes \
         leaves them:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn weft_fsync_always_loses_nothing_acknowledged() {
    let t = Target::Weft { fsync: "always" };
    assert_nothing_lost(t, &run(t, iters(3)));
}

#[test]
fn weft_fsync_everysec_loses_nothing_acknowledged_in_a_process_crash() {
    let t = Target::Weft { fsync: "everysec" };
    assert_nothing_lost(t, &run(t, iters(3)));
}

fn redis_found() -> bool {
    let found = ["/usr/bin/redis-server", "redis-server"]
        .into_iter()
        .any(|e| {
            std::process::Command::new(e)
                .arg("--version")
                .output()
                .is_ok()
        });
    if !found {
        common::skip("redis-server is not installed (apt-get install redis-server)");
    }
    found
}

/// The checker catches a store that loses acknowledged writes: redis-server without
/// its append-only file keeps nothing across `kill -9`.
#[test]
fn the_checker_finds_lost_writes_in_redis_without_appendonly() {
    if !redis_found() {
        return;
    }
    let t = Target::Redis { appendonly: false };
    let wrong = run(t, 2);
    assert!(
        !wrong.is_empty(),
        "no lost write found in redis-server with appendonly no"
    );
    assert!(
        wrong.iter().any(|w| w.contains(":p")),
        "a writer's own key is among the lost: {wrong:?}"
    );
}

/// The checker does not cry wolf: redis-server with `appendonly yes` and
/// `appendfsync always` passes it.
#[test]
fn the_checker_finds_nothing_in_redis_with_appendfsync_always() {
    if !redis_found() {
        return;
    }
    let t = Target::Redis { appendonly: true };
    assert_nothing_lost(t, &run(t, iters(2).min(5)));
}

/// The checks themselves, on hand-made histories.
#[test]
fn the_checks_tell_allowed_from_lost() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let call = |key: &str, op: Op, conn, seq, sent, acked: Option<u64>| Call {
        key: key.into(),
        op,
        conn,
        seq,
        sent: at(sent),
        acked: acked.map(at),
    };
    let some = |v: &str, ttl| Some((v.to_string(), ttl));
    // A writer's own key: acknowledged SET 5, INCR; in flight APPEND.
    let p = [
        call("r0:p0:1", Op::Set("5".into()), 0, 1, 0, Some(1)),
        call("r0:p0:1", Op::Incr, 0, 2, 2, Some(3)),
        call("r0:p0:1", Op::Append("x".into()), 0, 3, 4, None),
    ];
    let p: Vec<&Call> = p.iter().collect();
    assert_eq!(check_key("r0:p0:1", &p, &some("6", false)), None);
    assert_eq!(check_key("r0:p0:1", &p, &some("6x", false)), None);
    assert!(check_key("r0:p0:1", &p, &some("5", false)).is_some());
    assert!(check_key("r0:p0:1", &p, &None).is_some());
    // A counter: 2 acknowledged, 1 in flight.
    let c = [
        call("r0:c0", Op::Incr, 0, 1, 0, Some(1)),
        call("r0:c0", Op::Incr, 1, 1, 0, Some(1)),
        call("r0:c0", Op::Incr, 2, 1, 0, None),
    ];
    let c: Vec<&Call> = c.iter().collect();
    for (n, ok) in [(1, false), (2, true), (3, true), (4, false)] {
        let got = some(&n.to_string(), false);
        assert_eq!(check_key("r0:c0", &c, &got).is_none(), ok, "{n}");
    }
    // A register: a acknowledged at 1, b sent at 2 (after a's reply) and acknowledged,
    // c in flight since 0 (concurrent with both).
    let g = [
        call("r0:g0", Op::Set("a".into()), 0, 1, 0, Some(1)),
        call("r0:g0", Op::Set("b".into()), 1, 1, 2, Some(3)),
        call("r0:g0", Op::Set("c".into()), 2, 1, 0, None),
        call("r0:g0", Op::Expire, 3, 1, 4, Some(5)),
    ];
    let g: Vec<&Call> = g.iter().collect();
    assert_eq!(check_key("r0:g0", &g, &some("b", true)), None);
    assert_eq!(check_key("r0:g0", &g, &some("c", true)), None);
    assert!(
        check_key("r0:g0", &g, &some("a", true)).is_some(),
        "b came after a"
    );
    assert!(
        check_key("r0:g0", &g, &some("b", false)).is_some(),
        "the EXPIRE came after"
    );
    assert!(check_key("r0:g0", &g, &None).is_some());
    // Appends: x acknowledged before y was sent.
    let a = [
        call("r0:a0", Op::Append("|x".into()), 0, 1, 0, Some(1)),
        call("r0:a0", Op::Append("|y".into()), 1, 1, 2, Some(3)),
        call("r0:a0", Op::Append("|z".into()), 2, 1, 0, None),
    ];
    let a: Vec<&Call> = a.iter().collect();
    assert_eq!(check_key("r0:a0", &a, &some("|x|y", false)), None);
    assert_eq!(check_key("r0:a0", &a, &some("|z|x|y", false)), None);
    assert!(check_key("r0:a0", &a, &some("|y|x", false)).is_some());
    assert!(check_key("r0:a0", &a, &some("|x", false)).is_some());
    assert!(check_key("r0:a0", &a, &some("|x|y|y", false)).is_some());
    // A writer's own hash: acknowledged HSET a, HINCRBY n0, HDEL a; in flight HSET b.
    let hp = [
        call(
            "r0:hp0:1",
            Op::HSet("a".into(), "1".into()),
            0,
            1,
            0,
            Some(1),
        ),
        call("r0:hp0:1", Op::HIncr("n0".into()), 0, 2, 2, Some(3)),
        call("r0:hp0:1", Op::HDel("a".into()), 0, 3, 4, Some(5)),
        call("r0:hp0:1", Op::HSet("b".into(), "2".into()), 0, 4, 6, None),
    ];
    let hp: Vec<&Call> = hp.iter().collect();
    assert_eq!(check_key("r0:hp0:1", &hp, &some("n0=1;", false)), None);
    assert_eq!(check_key("r0:hp0:1", &hp, &some("b=2;n0=1;", false)), None);
    assert!(check_key("r0:hp0:1", &hp, &some("a=1;n0=1;", false)).is_some());
    assert!(check_key("r0:hp0:1", &hp, &None).is_some());
    // A shared hash: two acknowledged increments of c0, one in flight; w1's field
    // acknowledged.
    let hs = [
        call("r0:hs0", Op::HIncr("c0".into()), 0, 1, 0, Some(1)),
        call("r0:hs0", Op::HIncr("c0".into()), 1, 1, 0, Some(1)),
        call("r0:hs0", Op::HIncr("c0".into()), 2, 1, 0, None),
        call(
            "r0:hs0",
            Op::HSet("w1.2".into(), "1".into()),
            1,
            2,
            2,
            Some(3),
        ),
    ];
    let hs: Vec<&Call> = hs.iter().collect();
    assert_eq!(check_key("r0:hs0", &hs, &some("c0=2;w1.2=1;", false)), None);
    assert_eq!(check_key("r0:hs0", &hs, &some("c0=3;w1.2=1;", false)), None);
    assert!(check_key("r0:hs0", &hs, &some("c0=1;w1.2=1;", false)).is_some());
    assert!(check_key("r0:hs0", &hs, &some("c0=2;", false)).is_some());
    assert!(check_key("r0:hs0", &hs, &some("c0=2;w1.2=1;w9.9=1;", false)).is_some());
    // A writer's own set: acknowledged SADD a, SADD b, SREM a; in flight SADD c.
    let sp = [
        call("r0:sp0:1", Op::SAdd("a".into()), 0, 1, 0, Some(1)),
        call("r0:sp0:1", Op::SAdd("b".into()), 0, 2, 2, Some(3)),
        call("r0:sp0:1", Op::SRem("a".into()), 0, 3, 4, Some(5)),
        call("r0:sp0:1", Op::SAdd("c".into()), 0, 4, 6, None),
    ];
    let sp: Vec<&Call> = sp.iter().collect();
    assert_eq!(check_key("r0:sp0:1", &sp, &some("b;", false)), None);
    assert_eq!(check_key("r0:sp0:1", &sp, &some("b;c;", false)), None);
    assert!(check_key("r0:sp0:1", &sp, &some("a;b;", false)).is_some());
    assert!(check_key("r0:sp0:1", &sp, &None).is_some());
    // A shared set: w0's member acknowledged, w1's acknowledged and then removed by an
    // SREM in flight, w2's in flight.
    let ss = [
        call("r0:ss0", Op::SAdd("w0.1".into()), 0, 1, 0, Some(1)),
        call("r0:ss0", Op::SAdd("w1.1".into()), 1, 1, 0, Some(1)),
        call("r0:ss0", Op::SRem("w1.1".into()), 1, 2, 2, None),
        call("r0:ss0", Op::SAdd("w2.1".into()), 2, 1, 0, None),
    ];
    let ss: Vec<&Call> = ss.iter().collect();
    assert_eq!(check_key("r0:ss0", &ss, &some("w0.1;", false)), None);
    assert_eq!(
        check_key("r0:ss0", &ss, &some("w0.1;w1.1;w2.1;", false)),
        None
    );
    assert!(check_key("r0:ss0", &ss, &some("w1.1;", false)).is_some());
    assert!(check_key("r0:ss0", &ss, &some("w0.1;w9.9;", false)).is_some());
}
