//! MEMORY: what weft-kv's memory accounting says. USAGE answers the bytes the
//! keyspace counts for a key (its key, value and overhead, as `used_memory` sums
//! them: [`crate::keyspace::Keyspace::memory_of`]), read on the key's shard; STATS
//! answers Redis's field names with weft-kv's figures; DOCTOR, MALLOC-STATS and PURGE
//! answer what weft-kv can say (it uses the system allocator and keeps no
//! allocator statistics).

use super::conn::Conn;
use super::Server;
use crate::commands::Ctx;
use crate::exec::ShardSet;
use crate::keyspace::Keyspace;
use crate::resp::Reply;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// MEMORY USAGE on the key's shard: the key's bytes, or nil if it does not exist.
fn usage_on_shard(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    match ks.memory_of(args[2], ctx.now_ms) {
        0 => Reply::Nil,
        n => Reply::Int(n as i64),
    }
}

/// MEMORY USAGE key [SAMPLES count] | STATS | DOCTOR | MALLOC-STATS | PURGE | HELP.
///
/// USAGE counts every element whatever SAMPLES says (the keyspace keeps each key's
/// exact count); SAMPLES must still be a non-negative integer, and any other option
/// is a syntax error, as Redis.
pub fn memory(server: &Arc<Server>, conn: &Conn, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"usage", 3 | 5) => {
            if args.len() == 5 {
                if !args[3].eq_ignore_ascii_case(b"samples") {
                    return Reply::err("ERR syntax error");
                }
                let n = std::str::from_utf8(&args[4])
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok());
                match n {
                    None => return Reply::err("ERR value is not an integer or out of range"),
                    Some(n) if n < 0 => return Reply::err("ERR syntax error"),
                    Some(_) => {}
                }
            }
            let s = crate::route::shard_of(&args[2], server.shards.count());
            let (db, now) = (conn.db, crate::shard::now_ms());
            let key = args[2].clone();
            server
                .shards
                .with(s, move |sh| {
                    let a: [&[u8]; 3] = [b"memory", b"usage", &key];
                    sh.run(usage_on_shard, db, &a, now, None)
                })
                .0
        }
        (b"stats", 2) => stats(server),
        (b"doctor", 2) => Reply::Verbatim(
            "txt",
            b"No memory problem to report. weft-kv counts the bytes of its keys and values \
              (MEMORY STATS, INFO memory) and uses the system allocator, which keeps no \
              fragmentation figures.\n"
                .to_vec(),
        ),
        (b"malloc-stats", 2) => Reply::Verbatim(
            "txt",
            b"weft-kv uses the system allocator, which keeps no statistics to show.\n".to_vec(),
        ),
        (b"purge", 2) => Reply::OK,
        (b"help", 2) => super::slowlog::lines(&[
            "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    A report on the server's memory.",
            "MALLOC-STATS",
            "    The allocator's statistics (weft-kv uses the system allocator: none).",
            "PURGE",
            "    Asks the allocator to give back memory (nothing to do in weft-kv).",
            "STATS",
            "    The server's memory figures.",
            "USAGE <key> [SAMPLES <count>]",
            "    The bytes the key and its value take, as weft-kv counts them.",
            "HELP",
            "    This text.",
        ]),
        _ => super::slowlog::sub_error(args),
    }
}

/// MEMORY STATS: Redis's field names, weft-kv's figures (the keyspace's count for the
/// data, the connections' buffers for the overhead).
fn stats(server: &Server) -> Reply {
    let shards = server.shards.list();
    let used: u64 = shards.iter().map(|s| s.memory.load(Relaxed)).sum();
    let clients = (server.client_memory.load(Relaxed) + crate::pubsub::queued_bytes()) as u64;
    let keys: u64 = shards
        .iter()
        .map(|s| s.keys.iter().map(|k| k.load(Relaxed)).sum::<u64>())
        .sum();
    let int = |n: u64| Reply::Int(n as i64);
    let mut m = vec![
        (bulk("peak.allocated"), int(used + clients)),
        (bulk("total.allocated"), int(used + clients)),
        (bulk("startup.allocated"), int(0)),
        (bulk("replication.backlog"), int(0)),
        (bulk("clients.slaves"), int(0)),
        (bulk("clients.normal"), int(clients)),
        (bulk("cluster.links"), int(0)),
        (bulk("aof.buffer"), int(0)),
        (bulk("lua.caches"), int(0)),
        (bulk("functions.caches"), int(0)),
    ];
    for db in 0..crate::log::DATABASES as usize {
        let k: u64 = shards.iter().map(|s| s.keys[db].load(Relaxed)).sum();
        if k == 0 {
            continue;
        }
        let e: u64 = shards.iter().map(|s| s.expires[db].load(Relaxed)).sum();
        m.push((
            bulk(&format!("db.{db}")),
            Reply::Map(vec![
                (bulk("overhead.hashtable.main"), int(0)),
                (bulk("overhead.hashtable.expires"), int(e)),
            ]),
        ));
    }
    let per_key = used.checked_div(keys).unwrap_or(0);
    let total = used + clients;
    let pct = |a: u64| {
        if total == 0 {
            0.0
        } else {
            a as f64 * 100.0 / total as f64
        }
    };
    m.extend([
        (bulk("overhead.total"), int(clients)),
        (bulk("keys.count"), int(keys)),
        (bulk("keys.bytes-per-key"), int(per_key)),
        (bulk("dataset.bytes"), int(used)),
        (bulk("dataset.percentage"), Reply::Double(pct(used))),
        (bulk("peak.percentage"), Reply::Double(100.0)),
        (bulk("allocator.allocated"), int(total)),
        (bulk("allocator.active"), int(total)),
        (bulk("allocator.resident"), int(total)),
        (bulk("allocator-fragmentation.ratio"), Reply::Double(1.0)),
        (bulk("allocator-fragmentation.bytes"), int(0)),
        (bulk("allocator.rss-ratio"), Reply::Double(1.0)),
        (bulk("allocator.rss-bytes"), int(0)),
        (bulk("rss-overhead.ratio"), Reply::Double(1.0)),
        (bulk("rss-overhead.bytes"), int(0)),
        (bulk("fragmentation"), Reply::Double(1.0)),
        (bulk("fragmentation.bytes"), int(0)),
    ]);
    Reply::Map(m)
}
