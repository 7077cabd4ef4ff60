//! Keyspace notifications: the events commands fire, as messages on
//! `__keyspace@<db>__:<key>` (the message is the event) and `__keyevent@<db>__:<event>`
//! (the message is the key), filtered by `notify-keyspace-events`.
//!
//! A command fires an event by calling [`notify`] once its change is made, with the
//! event's class and Redis 7.0's name for it (`notify(ctx, LIST, "lpush", key)`), in the
//! order Redis fires them. The classes a user turns on are one word: with
//! notifications off (the default) a call is one load and a test.
//!
//! The setting's letters, as Redis 7.0 defines them: `K` keyspace channel, `E`
//! keyevent channel (one of the two is needed for anything to be sent), `g` generic
//! commands (DEL, EXPIRE, RENAME, ...), `$` strings, `l` lists, `s` sets, `h` hashes,
//! `z` sorted sets, `x` expired keys, `e` evicted keys, `t` streams, `m` key misses,
//! `d` module events, `n` new keys, and `A` for `g$lshzxetd`.

use crate::commands::Ctx;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// `K`: events are published on `__keyspace@<db>__:<key>`.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: events are published on `__keyevent@<db>__:<event>`.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: commands on keys of any type (del, expire, persist, rename_from, ...).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key removed because its time passed (`expired`).
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key evicted for memory (`evicted`).
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: a read of a missing key (`keymiss`; not part of `A`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module events.
pub const MODULE: u32 = 1 << 13;
/// `n`: a key created (`new`; not part of `A`).
pub const NEW: u32 = 1 << 14;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The classes turned on (`notify-keyspace-events`).
static FLAGS: AtomicU32 = AtomicU32::new(0);

/// Fires event `event` of class `class` (one of [`GENERIC`], [`STRING`], [`LIST`],
/// [`SET`], [`HASH`], [`ZSET`], [`EXPIRED`], [`EVICTED`], [`STREAM`], [`KEY_MISS`],
/// [`NEW`]) on `key` in the command's database: publishes it on the key's keyspace
/// channel and on the event's keyevent channel, as `notify-keyspace-events` asks.
///
/// Call it after the change the event names is made (the key's new state is what a
/// subscriber that reads it sees), once per event, in Redis's order; never for a
/// command that changed nothing (an error, SADD of members already there). The event
/// names are Redis 7.0's (`set`, `del`, `expire`, `hset`, `lpush`, `sadd`, `zadd`, ...).
#[inline]
pub fn notify(ctx: &Ctx<'_>, class: u32, event: &str, key: &[u8]) {
    notify_db(ctx.db, class, event, key);
}

/// [`notify`] in database `db`, for code that has no command context (active expiry).
#[inline]
pub fn notify_db(db: u8, class: u32, event: &str, key: &[u8]) {
    let on = FLAGS.load(Relaxed);
    if on & class != 0 {
        publish_event(on, db, event, key);
    }
}

/// Whether events of `class` are published now (to skip work that only an event
/// needs).
#[inline]
pub fn enabled(class: u32) -> bool {
    FLAGS.load(Relaxed) & class != 0
}

#[cold]
fn publish_event(on: u32, db: u8, event: &str, key: &[u8]) {
    let mut channel = Vec::with_capacity(16 + key.len().max(event.len()));
    let prefix = |what: &[u8], channel: &mut Vec<u8>| {
        channel.clear();
        channel.extend_from_slice(what);
        channel.extend_from_slice(itoa::Buffer::new().format(db).as_bytes());
        channel.extend_from_slice(b"__:");
    };
    if on & KEYSPACE != 0 {
        prefix(b"__keyspace@", &mut channel);
        channel.extend_from_slice(key);
        super::publish(&channel, event.as_bytes());
    }
    if on & KEYEVENT != 0 {
        prefix(b"__keyevent@", &mut channel);
        channel.extend_from_slice(event.as_bytes());
        super::publish(&channel, key);
    }
}

/// Parses `notify-keyspace-events`' letters (see the module doc); `None` for a letter
/// that names no class.
pub fn parse(s: &[u8]) -> Option<u32> {
    let mut flags = 0;
    for &c in s {
        flags |= match c {
            b'A' => ALL,
            b'g' => GENERIC,
            b'$' => STRING,
            b'l' => LIST,
            b's' => SET,
            b'h' => HASH,
            b'z' => ZSET,
            b'x' => EXPIRED,
            b'e' => EVICTED,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b't' => STREAM,
            b'm' => KEY_MISS,
            b'd' => MODULE,
            b'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The letters of `flags`, as CONFIG GET shows them (as Redis 7.0 does): `A` for all
/// of it (`n` is then not shown), else each class in a fixed order, then `K`, `E`, `m`.
pub fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// Sets `notify-keyspace-events` from its letters; an error text for a letter that
/// names no class (nothing changes then).
pub fn set(letters: &str) -> Result<(), String> {
    match parse(letters.as_bytes()) {
        Some(f) => {
            FLAGS.store(f, Relaxed);
            Ok(())
        }
        None => Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into()),
    }
}

/// `notify-keyspace-events` as CONFIG GET shows it.
pub fn get() -> String {
    format(FLAGS.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_round_trip_as_redis_shows_them() {
        let show = |s: &str| format(parse(s.as_bytes()).unwrap());
        assert_eq!(show("gKE"), "gKE");
        assert_eq!(show("$lshzxeKE"), "$lshzxeKE");
        assert_eq!(show("KA"), "AK");
        assert_eq!(show("EA"), "AE");
        assert_eq!(show("AKEm"), "AKEm");
        assert_eq!(show("nK"), "nK");
        assert_eq!(show(""), "");
        assert_eq!(parse(b"Kq"), None);
        assert_eq!(parse(b"A").unwrap() & (NEW | KEY_MISS), 0);
    }
}
