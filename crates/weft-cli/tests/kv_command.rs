//! COMMAND as redis-server 7.0 answers it, for every command weft-kv has, compared
//! with a running redis-server (skipped when it is not installed), in RESP2 and RESP3:
//!
//! - COMMAND INFO of each command and subcommand: name, arity, flags (those weft-kv
//!   has: see [`FLAGS`]), first key, last key, step, ACL categories, and key
//!   specifications (without Redis's free-text notes); the differences that remain
//!   are listed in [`KNOWN`] with their reasons;
//! - COMMAND GETKEYS and GETKEYSANDFLAGS of command lines whose keys are found in
//!   every way Redis finds them: a range, a count of keys (ZUNION, LMPOP, EVAL, ...),
//!   a keyword (GEORADIUS STORE, XREAD STREAMS), SORT's STORE, a subcommand's key
//!   (MEMORY USAGE), and their errors.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::KvServer;
use resp::{show, Val, Wire};
use std::collections::BTreeMap;

/// The command flags weft-kv has; Redis's others (loading, stale, noscript,
/// allow_busy, may_replicate, pubsub, skip_monitor, skip_slowlog, no_multi,
/// no_mandatory_keys, no_async_loading, ...) are about replication, scripting,
/// loading and cluster, which weft-kv does not have, and are not shown.
const FLAGS: [&str; 8] = [
    "write",
    "readonly",
    "denyoom",
    "admin",
    "blocking",
    "fast",
    "no_auth",
    "movablekeys",
];

/// What differs, and why (compared with everything else left out).
const KNOWN: [(&str, &str); 8] = [
    (
        "ssubscribe",
        "keys: Redis counts shard channels as keys (for cluster slots); without a cluster, \
         weft-kv's table gives them none",
    ),
    ("sunsubscribe", "keys: as ssubscribe"),
    ("spublish", "keys: as ssubscribe"),
    (
        "function|delete",
        "flags: weft-kv has no functions (the command is refused), so it writes nothing",
    ),
    (
        "client|setinfo",
        "a Redis 7.2 subcommand that redis-server 7.0 does not have",
    ),
    (
        "client|no-touch",
        "a Redis 7.2 subcommand that redis-server 7.0 does not have",
    ),
    (
        "latency|graph",
        "not in weft-kv (it keeps the samples LATENCY HISTORY shows, but draws no graph)",
    ),
    (
        "latency|histogram",
        "not in weft-kv (no per-command latency histograms)",
    ),
];

fn known(name: &str) -> bool {
    KNOWN.iter().any(|(n, _)| *n == name)
}

fn wire(s: &KvServer, proto: &str) -> Wire {
    let mut w = Wire::connect(&s.socket);
    w.call(&["HELLO", proto]);
    w
}

/// weft-kv and redis-server side by side in `dir`, or `None` (said) without
/// redis-server.
fn servers(dir: &std::path::Path) -> Option<(KvServer, KvServer)> {
    let weft =
        KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &[]).expect("weft kv serve starts");
    std::fs::create_dir(dir.join("r")).unwrap();
    let redis = KvServer::redis(&dir.join("r"), &dir.join("r.sock"), false);
    if redis.is_none() {
        eprintln!("skipped: no redis-server");
    }
    Some((weft, redis?))
}

/// A COMMAND INFO entry as compared: the flags weft-kv has, no tips, key
/// specifications without notes, and the subcommands apart (added to `out`).
fn view(entry: &Val, out: &mut BTreeMap<String, String>) {
    let items = entry.items();
    let name = items[0].text();
    let mut fields = items.to_vec();
    let kind = |v: &Val| v.kind();
    fields[2] = Val::Agg(
        kind(&items[2]),
        Some(
            items[2]
                .items()
                .iter()
                .filter(|f| FLAGS.contains(&f.text().as_str()))
                .cloned()
                .collect(),
        ),
    );
    fields[7] = Val::Agg(kind(&items[7]), Some(vec![]));
    let specs = items[8]
        .items()
        .iter()
        .map(|spec| {
            let kept: Vec<Val> = spec
                .items()
                .chunks(2)
                .filter(|kv| kv[0].text() != "notes")
                .flat_map(|kv| kv.to_vec())
                .collect();
            Val::Agg(spec.kind(), Some(kept))
        })
        .collect();
    fields[8] = Val::Agg(kind(&items[8]), Some(specs));
    for sub in items[9].items() {
        view(sub, out);
    }
    fields[9] = Val::Agg(kind(&items[9]), Some(vec![]));
    out.insert(name, show(&Val::Agg(b'*', Some(fields))));
}

#[test]
fn command_info_is_redis_servers() {
    let dir = tempfile::tempdir().unwrap();
    let Some((weft, redis)) = servers(dir.path()) else {
        return;
    };
    for proto in ["2", "3"] {
        let (mut a, mut b) = (wire(&weft, proto), wire(&redis, proto));
        let all = a.call(&["COMMAND"]);
        assert_eq!(
            a.call(&["COMMAND", "COUNT"]).int(),
            Some(all.items().len() as i64)
        );
        let (mut ours, mut theirs) = (BTreeMap::new(), BTreeMap::new());
        for entry in all.items() {
            let name = entry.items()[0].text();
            let r = b.call(&["COMMAND", "INFO", &name]);
            let r = &r.items()[0];
            assert_ne!(r.kind(), b'_', "redis-server has no {name}");
            assert!(
                !matches!(r, Val::Agg(_, None) | Val::Blob(_, None)),
                "redis-server has no {name}"
            );
            view(entry, &mut ours);
            view(r, &mut theirs);
            // No tips: weft-kv gives none (they are for cluster proxies).
            assert!(entry.items()[7].items().is_empty(), "{name}");
        }
        let mut compared = 0;
        for name in ours.keys().chain(theirs.keys()) {
            if known(name) {
                continue;
            }
            // Redis's subcommands of a container weft-kv has: each must be there.
            assert_eq!(ours.get(name), theirs.get(name), "RESP{proto} {name}");
            compared += 1;
        }
        assert!(compared > 250, "{compared}");
    }
}

/// Command lines, and how each finds its keys.
const LINES: &[&str] = &[
    "mset a 1 b 2",
    "mset a 1 b",
    "get a",
    "get",
    "ping",
    "nosuch a",
    "client list",
    "client nosuch",
    "set a b",
    "set a b get",
    "bitfield k get u8 0",
    "bitfield k set u8 0 1",
    "lmove a b left right",
    "rename a b",
    "copy a b",
    "bitop and d a b",
    "smove a b m",
    "pfmerge d a b",
    "sinterstore d a b",
    "memory usage k",
    "object encoding k",
    "zunion 2 a b",
    "zunion 2 a b WEIGHTS 1 2",
    "zunion 3 a b",
    "zunion 0 a",
    "zunion x a",
    "zintercard 2 a b LIMIT 3",
    "sintercard 1 a",
    "zunionstore d 2 a b",
    "zdiffstore d 3 a b",
    "lmpop 2 a b LEFT",
    "blmpop 0 2 a b LEFT",
    "bzmpop 1 2 a b MAX",
    "zmpop 1 a MIN",
    "eval s 3 k1 k2 k3 a1",
    "eval s 0",
    "eval s 5 k",
    "evalsha_ro s 1 k",
    "sort k",
    "sort k STORE d STORE e",
    "sort k STORE",
    "sort k store limit 1 2",
    "sort k by store get store store x",
    "sort_ro k by x",
    "georadius k 0 0 1 km STORE d STOREDIST e",
    "georadius k 0 0 1 km STORE",
    "georadiusbymember k m 1 km STOREDIST d",
    "xread COUNT 2 STREAMS a b 0 0",
    "xread STREAMS a b 0",
    "xreadgroup GROUP g c STREAMS a 0",
    "xgroup create k g $",
    "xinfo stream k",
];

#[test]
fn getkeys_is_redis_servers() {
    let dir = tempfile::tempdir().unwrap();
    let Some((weft, redis)) = servers(dir.path()) else {
        return;
    };
    for proto in ["2", "3"] {
        let (mut a, mut b) = (wire(&weft, proto), wire(&redis, proto));
        for line in LINES {
            for sub in ["GETKEYS", "GETKEYSANDFLAGS"] {
                let mut args = vec!["COMMAND", sub];
                args.extend(line.split_whitespace());
                let (x, y) = (a.call(&args), b.call(&args));
                assert_eq!(show(&x), show(&y), "RESP{proto} COMMAND {sub} {line}");
            }
        }
        // The movable ones say so.
        for name in ["zunion", "lmpop", "sort", "georadius", "xread", "eval"] {
            let info = a.call(&["COMMAND", "INFO", name]);
            assert!(
                info.items()[0].items()[2]
                    .items()
                    .iter()
                    .any(|f| f.text() == "movablekeys"),
                "{name}"
            );
        }
    }
}
