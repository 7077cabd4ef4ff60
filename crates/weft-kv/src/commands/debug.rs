//! DEBUG: the subcommands of Redis's DEBUG that mean something for weft-kv, for the
//! tools and test suites that use them. Who may run it is `enable-debug-command`
//! (`weft kv serve --enable-debug-command`, shown by CONFIG GET, set only at the
//! start): `local` by default (clients on this machine), `yes` (every client) or `no`
//! (none, as Redis's default); a client it does not allow is refused with an error. Each answers as Redis 7.0 does where weft-kv
//! can do the same thing truthfully; the others (Redis's allocator, hash tables,
//! list nodes, replication) are unknown subcommands, answered with Redis's error.
//!
//! - `DEBUG HELP`: what exists.
//! - `DEBUG PROTOCOL <type>`: one reply of each RESP3 type (string, integer, double,
//!   bignum, null, array, set, map, attrib, push, verbatim, true, false), with its
//!   RESP2 form on a RESP2 connection, so a client's parser can be tested.
//! - `DEBUG SET-ACTIVE-EXPIRE 0|1`: turns the background removal of expired keys
//!   off or on (for every shard). Off, a key whose time has passed stays until a
//!   command finds it (and removes it): DBSIZE still counts it.
//! - `DEBUG PAUSE-CRON 0|1`: pauses (1) or resumes (0) each worker's periodic work,
//!   as Redis's pauses its `serverCron`: the background removal of expired keys and
//!   the start of automatic compactions (weft-kv's other limits, such as
//!   `tracking-table-max-keys`, apply at once, not periodically).
//! - `DEBUG SLEEP <seconds>`: the connection waits that long, then answers OK. Redis
//!   stops its one thread; weft-kv serves the other clients meanwhile.
//! - `DEBUG OBJECT <key>`: a line about the key's value: its address, reference
//!   count (1: values are never shared), encoding, the bytes its value takes
//!   (`serializedlength`: as held, not as an RDB file would), its access bits (`lru`:
//!   `keyspace/access.rs`) and its idle time in seconds (`lru_seconds_idle`, read as
//!   Redis reads it whatever the policy). Not an access of the key. `ERR no such key`
//!   when it is missing.
//! - `DEBUG RELOAD` and `DEBUG LOADAOF`: every shard's keyspaces rebuilt from its log
//!   on disk, as a restart would load them (`server/reload.rs`).

use super::{Ctx, Reply};
use crate::exec::ShardSet;
use crate::keyspace::Keyspace;
use crate::server::conn::Conn;
use crate::server::Server;
use std::sync::Arc;
use std::time::Duration;

/// The most DEBUG SLEEP waits (a day): longer is surely a mistake.
const MAX_SLEEP: f64 = 86_400.0;

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// Why the connection may not run DEBUG (`enable-debug-command`), if it may not: the
/// command is refused before it runs, and in MULTI as it is queued (so EXEC aborts, as
/// in Redis).
pub(crate) fn refusal(server: &Server, conn: &Conn) -> Option<Reply> {
    let allowed = server.config.enable_debug_command;
    if allowed.allows(conn.client.is_local()) {
        return None;
    }
    Some(Reply::error(format!(
        "ERR DEBUG command not allowed. This server lets {} run it (its \
         enable-debug-command is '{}'): start it with --enable-debug-command yes, or \
         local to allow clients on its machine.",
        if allowed == crate::server::DebugCommand::No {
            "no client"
        } else {
            "only clients on its machine"
        },
        allowed.name()
    )))
}

/// DEBUG subcommand [arguments]: runs it (arity checked by the table: at least one
/// argument).
pub(crate) fn debug(server: &Arc<Server>, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    if let Some(r) = refusal(server, conn) {
        return r;
    }
    let sub = &args[1];
    match args.len() {
        2 if eq(sub, "help") => help(),
        3 if eq(sub, "protocol") => protocol(&args[2], conn.proto),
        3 if eq(sub, "set-active-expire") => match parse_int(&args[2]) {
            Some(n) => {
                server.settings.set_active_expire(n != 0);
                Reply::OK
            }
            None => Reply::err("ERR value is not an integer or out of range"),
        },
        3 if eq(sub, "pause-cron") => match parse_int(&args[2]) {
            Some(n) => {
                server.settings.set_cron_paused(n != 0);
                Reply::OK
            }
            None => Reply::err("ERR value is not an integer or out of range"),
        },
        3 if eq(sub, "sleep") => sleep(&args[2]),
        3 if eq(sub, "object") => object(server, conn.db, &args[2]),
        2 if eq(sub, "reload") || eq(sub, "loadaof") => server.shards.reload(),
        _ => super::sub_syntax_error(args),
    }
}

fn parse_int(a: &[u8]) -> Option<i64> {
    std::str::from_utf8(a).ok()?.parse().ok()
}

/// DEBUG HELP.
fn help() -> Reply {
    Reply::Array(
        [
            "DEBUG <subcommand> [<arg> ...]: for tests and tools.",
            "PROTOCOL <type>",
            "    Answers one reply of a RESP3 type: string, integer, double, bignum, null,",
            "    array, set, map, attrib, push, verbatim, true or false (in its RESP2 form",
            "    on a RESP2 connection).",
            "SET-ACTIVE-EXPIRE <0|1>",
            "    Turns the background removal of expired keys off (0) or on (1). Off, an",
            "    expired key stays until a command finds it.",
            "PAUSE-CRON <0|1>",
            "    Pauses (1) or resumes (0) each worker's periodic work: the background",
            "    removal of expired keys and the start of automatic compactions.",
            "SLEEP <seconds>",
            "    Waits that long before answering (other clients are served meanwhile).",
            "OBJECT <key>",
            "    Describes the key's value: address, encoding, bytes held.",
            "RELOAD",
            "    Rebuilds every keyspace from the log on disk, as a restart would.",
            "LOADAOF",
            "    The same as RELOAD (weft-kv's only file is its log).",
            "HELP",
            "    This help.",
        ]
        .into_iter()
        .map(|l| Reply::Simple(l.into()))
        .collect(),
    )
}

/// DEBUG PROTOCOL type: Redis 7.0's sample reply of each type. A name it does not
/// know is an error listing the names; PUSH on a RESP2 connection is an error (RESP2
/// has no out-of-band data).
#[allow(clippy::approx_constant)] // 3.141 is Redis's sample double, not an approximation of pi
fn protocol(name: &[u8], proto: u8) -> Reply {
    let name = name.to_ascii_lowercase();
    match &name[..] {
        b"string" => bulk("Hello World"),
        b"integer" => Reply::Int(12345),
        b"double" => Reply::Double(3.141),
        b"bignum" => Reply::BigNum("1234567999999999999999999999999999999".into()),
        b"null" => Reply::Nil,
        b"array" => Reply::Array((0..3).map(Reply::Int).collect()),
        b"set" => Reply::Set((0..3).map(Reply::Int).collect()),
        b"map" => Reply::Map((0..3).map(|i| (Reply::Int(i), Reply::Bool(i == 1))).collect()),
        b"attrib" => Reply::Attribute(
            vec![(
                bulk("key-popularity"),
                Reply::Array(vec![bulk("key:123"), Reply::Int(90)]),
            )],
            Box::new(bulk("Some real reply following the attribute")),
        ),
        b"push" if proto < 3 => Reply::err("ERR a push reply needs RESP3 (HELLO 3)"),
        b"push" => Reply::Push(
            vec![bulk("server-cpu-usage"), Reply::Int(42)],
            Box::new(bulk("Some real reply following the push reply")),
        ),
        b"verbatim" => Reply::Verbatim("txt", b"This is a verbatim\nstring".to_vec()),
        b"true" => Reply::Bool(true),
        b"false" => Reply::Bool(false),
        _ => Reply::err(
            "ERR unknown reply type: use string, integer, double, bignum, null, array, set, map, attrib, push, verbatim, true or false",
        ),
    }
}

/// DEBUG SLEEP seconds: a decimal number of seconds (0 answers at once); not a
/// number, negative or more than a day is an error.
fn sleep(arg: &[u8]) -> Reply {
    let secs = std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.0..=MAX_SLEEP).contains(s));
    let Some(secs) = secs else {
        return Reply::err("ERR the time to sleep must be a number of seconds from 0 to 86400");
    };
    if secs > 0.0 {
        weft_runtime::sleep(Duration::from_secs_f64(secs));
    }
    Reply::OK
}

/// DEBUG OBJECT key, on the key's shard.
fn object(server: &Arc<Server>, db: u8, key: &[u8]) -> Reply {
    let s = crate::route::shard_of(key, server.shards.count());
    let now = crate::shard::now_ms();
    let key = key.to_vec();
    server
        .shards
        .with(s, move |sh| {
            let a: [&[u8]; 3] = [b"debug", b"object", &key];
            sh.run(object_on_shard, db, &a, now, None)
        })
        .0
}

/// The line DEBUG OBJECT answers for `args[2]`, or `ERR no such key`.
fn object_on_shard(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let Some(e) = ks.get_quiet(args[2], ctx.now_ms) else {
        return Reply::err("ERR no such key");
    };
    let encoding = crate::keyspace::value::encoding_name(e.tag(), e.value());
    let bits = e.access();
    Reply::Simple(
        format!(
            "Value at:{:p} refcount:1 encoding:{encoding} serializedlength:{} lru:{bits} lru_seconds_idle:{}",
            e.value().as_ptr(),
            e.value_memory(),
            crate::keyspace::access::idle_ms(bits) / 1000
        )
        .into(),
    )
}
