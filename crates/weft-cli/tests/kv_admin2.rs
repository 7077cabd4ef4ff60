//! The diagnostics commands as a Redis 7 server gives them, tried against the built
//! `weft kv serve` with two workers, and beside redis-server where the replies do not
//! depend on timing:
//!
//! - SLOWLOG keeps the commands slower than `slowlog-log-slower-than`, newest first,
//!   with id, time, duration, arguments trimmed as Redis trims them, client address
//!   and name, at most `slowlog-max-len`; LEN, RESET, GET count; passwords hidden
//!   and EXEC's commands logged instead of EXEC, as redis-server does;
//! - LATENCY answers empty replies while `latency-monitor-threshold` is 0;
//! - MEMORY USAGE counts a key's bytes, nil for a missing key; MEMORY STATS has
//!   Redis's fields (a flat array in RESP2, a map in RESP3);
//! - `timeout` closes idle clients, but not one waiting in a blocking command or
//!   held by CLIENT PAUSE;
//! - LOLWUT shows the version line.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::{KvServer, CEILING};
use resp::{bulk, int, ok, Val, Wire};
use std::time::{Duration, Instant};

fn weft(dir: &std::path::Path) -> KvServer {
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &["--workers", "2"]).unwrap()
}

/// The arguments of each entry of a SLOWLOG GET reply, newest first.
fn logged(reply: &Val) -> Vec<Vec<String>> {
    reply
        .items()
        .iter()
        .map(|e| e.items()[3].items().iter().map(Val::text).collect())
        .collect()
}

#[test]
fn slowlog_keeps_slow_commands_newest_first_trimmed_as_redis() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft(dir.path());
    let mut c = Wire::connect(&s.socket);
    let mut other = Wire::connect(&s.socket);
    // The defaults, as Redis's.
    let defaults = c.call(&["CONFIG", "GET", "slowlog-*"]);
    let mut pairs: Vec<String> = defaults.items().iter().map(Val::text).collect();
    pairs.sort();
    assert_eq!(
        pairs,
        ["10000", "128", "slowlog-log-slower-than", "slowlog-max-len"]
    );
    // Nothing takes a million seconds: nothing logged.
    let huge = "1000000000000";
    assert_eq!(
        c.call(&["CONFIG", "SET", "slowlog-log-slower-than", huge]),
        ok()
    );
    assert_eq!(c.call(&["SLOWLOG", "RESET"]), ok());
    c.call(&["SET", "k", "v"]);
    assert_eq!(c.call(&["SLOWLOG", "LEN"]), int(0));
    assert_eq!(c.call(&["SLOWLOG", "GET"]), Val::Agg(b'*', Some(vec![])));

    assert_eq!(
        c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        ok()
    );
    assert_eq!(c.call(&["CLIENT", "SETNAME", "me"]), ok());
    assert_eq!(c.call(&["SLOWLOG", "RESET"]), ok());
    c.call(&["GET", "k"]);
    // A command of the other connection (maybe of the other worker) is logged too.
    other.call(&["GET", "k2"]);
    let long = "x".repeat(200);
    let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    c.call(&["ECHO", &long]);
    let mut del = vec!["DEL"];
    del.extend(many.iter().map(String::as_str));
    c.call(&del);
    let got = c.call(&["SLOWLOG", "GET", "-1"]);
    let args = logged(&got);
    assert_eq!(args.len(), 5, "{got:?}");
    // DEL with 41 arguments: 31 kept, then how many more.
    let mut want_del = vec!["DEL".to_string()];
    want_del.extend((0..30).map(|i| i.to_string()));
    want_del.push("... (10 more arguments)".into());
    assert_eq!(args[0], want_del);
    assert_eq!(
        args[1],
        [
            "ECHO".to_string(),
            format!("{}... (72 more bytes)", &long[..128])
        ]
    );
    assert_eq!(args[2], ["GET", "k2"]);
    assert_eq!(args[3], ["GET", "k"]);
    assert_eq!(args[4], ["SLOWLOG", "RESET"]);
    // Each entry: id, unix time, microseconds, arguments, address, name.
    let ids: Vec<i64> = got
        .items()
        .iter()
        .map(|e| e.items()[0].int().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1] + 1), "{ids:?}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for e in got.items() {
        assert_eq!(e.items().len(), 6);
        let t = e.items()[1].int().unwrap();
        assert!(t <= now && t > now - 3600, "{t}");
        assert!(e.items()[2].int().unwrap() >= 0);
    }
    let sock = format!("{}:0", s.socket.display());
    assert_eq!(got.items()[3].items()[4], bulk(&sock));
    assert_eq!(got.items()[3].items()[5], bulk("me"));
    assert_eq!(got.items()[2].items()[5], bulk(""));
    // GET count: the newest; LEN counts them all (SLOWLOG GET itself is logged).
    assert_eq!(
        logged(&c.call(&["SLOWLOG", "GET", "1"]))[0][..2],
        ["SLOWLOG", "GET"]
    );
    assert_eq!(c.call(&["SLOWLOG", "LEN"]), int(7));
    // At most slowlog-max-len entries, the newest.
    assert_eq!(c.call(&["CONFIG", "SET", "slowlog-max-len", "2"]), ok());
    assert_eq!(c.call(&["SLOWLOG", "LEN"]), int(2));
    c.call(&["PING"]);
    assert_eq!(logged(&c.call(&["SLOWLOG", "GET"]))[0], ["PING"]);
    // Negative: none.
    assert_eq!(
        c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]),
        ok()
    );
    assert_eq!(c.call(&["SLOWLOG", "RESET"]), ok());
    c.call(&["PING"]);
    assert_eq!(c.call(&["SLOWLOG", "LEN"]), int(0));
    // Errors.
    assert_eq!(
        c.call(&["SLOWLOG", "GET", "-2"]),
        Val::Line(
            b'-',
            "ERR count should be greater than or equal to -1".into()
        )
    );
    // Not a number, or not written as Redis reads numbers: the same error, as Redis.
    for bad in ["x", "+5", "007"] {
        assert_eq!(
            c.call(&["SLOWLOG", "GET", bad]),
            Val::Line(
                b'-',
                "ERR count should be greater than or equal to -1".into()
            )
        );
    }
    assert_eq!(c.call(&["SLOWLOG", "NOPE"]).kind(), b'-');
}

/// The same requests to weft-kv and redis-server: the same replies.
#[test]
fn latency_memory_and_settings_answer_as_redis() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft(dir.path());
    let rdir = tempfile::tempdir().unwrap();
    let Some(r) = KvServer::redis(rdir.path(), &rdir.path().join("r.sock"), false) else {
        return;
    };
    for proto in ["2", "3"] {
        let mut w = Wire::connect(&s.socket);
        let mut rc = Wire::connect(&r.socket);
        w.call(&["HELLO", proto]);
        rc.call(&["HELLO", proto]);
        let mut both = |args: &[&str]| {
            let (a, b) = (w.call(args), rc.call(args));
            assert_eq!(a, b, "{args:?} in RESP{proto}");
            a
        };
        both(&["CONFIG", "GET", "latency-monitor-threshold"]);
        both(&["CONFIG", "GET", "timeout"]);
        both(&["LATENCY", "LATEST"]);
        both(&["LATENCY", "HISTORY", "command"]);
        both(&["LATENCY", "RESET"]);
        both(&["CONFIG", "SET", "timeout", "70", "maxmemory", "100"]);
        both(&["CONFIG", "GET", "timeout"]);
        both(&["CONFIG", "SET", "timeout", "0", "maxmemory", "0"]);
        both(&["CONFIG", "SET", "timeout", "-1"]);
        both(&["CONFIG", "GET", "timeout"]);
        both(&["SET", "k", "v"]);
        both(&["MEMORY", "USAGE", "missing"]);
        both(&["MEMORY", "USAGE", "k", "SAMPLES", "x"]);
        both(&["MEMORY", "USAGE", "k", "NOPE", "1"]);
        both(&["MEMORY", "PURGE"]);
        both(&["SLOWLOG", "NOPE"]);
        both(&["DEL", "k"]);
    }
}

#[test]
fn memory_usage_counts_the_key_and_stats_has_redis_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft(dir.path());
    let mut c = Wire::connect(&s.socket);
    c.call(&["SET", "a", "v"]);
    let small = c.call(&["MEMORY", "USAGE", "a"]).int().unwrap();
    assert!(small >= 2, "{small}");
    c.call(&["SET", "a", &"v".repeat(1000)]);
    let big = c.call(&["MEMORY", "USAGE", "a", "SAMPLES", "0"]);
    let big = big.int().unwrap_or_else(|| panic!("{big:?}"));
    assert_eq!(big - small, 999, "the value's growth, byte for byte");
    c.call(&["HSET", "h", "f", "x"]);
    assert!(c.call(&["MEMORY", "USAGE", "h"]).int().unwrap() > 0);
    assert_eq!(c.call(&["MEMORY", "USAGE", "nope"]), Val::Blob(b'$', None));
    // STATS: a flat array in RESP2 with keys.count, db.0 a nested array.
    let st = c.call(&["MEMORY", "STATS"]);
    assert_eq!(st.kind(), b'*');
    let items = st.items();
    let at = |name: &str| {
        items
            .chunks(2)
            .find(|p| p[0].text() == name)
            .map(|p| p[1].clone())
            .unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(at("keys.count"), int(2));
    assert_eq!(at("db.0").kind(), b'*');
    for f in [
        "peak.allocated",
        "total.allocated",
        "dataset.bytes",
        "overhead.total",
    ] {
        assert!(at(f).int().is_some(), "{f}");
    }
    c.call(&["HELLO", "3"]);
    assert_eq!(c.call(&["MEMORY", "STATS"]).kind(), b'%');
    assert_eq!(c.call(&["MEMORY", "DOCTOR"]).kind(), b'=');
    assert_eq!(c.call(&["MEMORY", "MALLOC-STATS"]).kind(), b'=');
    let lol = c.call(&["LOLWUT", "VERSION", "5", "1", "2"]);
    assert_eq!(lol.kind(), b'=');
    assert!(lol.text().contains("Redis ver. "), "{lol:?}");
}

#[test]
fn timeout_closes_idle_clients_but_not_blocked_or_paused_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft(dir.path());
    let mut admin = Wire::connect(&s.socket);
    let mut blocked = Wire::connect(&s.socket);
    blocked.send(&[b"BLPOP".to_vec(), b"list".to_vec(), b"0".to_vec()]);
    // One held by CLIENT PAUSE too.
    assert_eq!(admin.call(&["CLIENT", "PAUSE", "600000", "WRITE"]), ok());
    let mut paused = Wire::connect(&s.socket);
    paused.send(&[b"SET".to_vec(), b"p".to_vec(), b"1".to_vec()]);
    // Held by BLPOP and the pause before the timeout is set.
    let deadline = Instant::now() + CEILING;
    while admin.info_field("clients", "blocked_clients") != 2 {
        assert!(Instant::now() < deadline, "BLPOP never blocked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut idle = Wire::connect(&s.socket);
    assert_eq!(idle.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "1"]), ok());
    // The idle one is closed (its read ends) ...
    use std::io::BufRead;
    let mut line = Vec::new();
    assert!(
        matches!(idle.r.read_until(b'\n', &mut line), Ok(0) | Err(_)),
        "{line:?}"
    );
    // ... the blocked one, idle longer, is not: it gets its element.
    let mut admin = Wire::connect(&s.socket);
    assert_eq!(admin.call(&["CONFIG", "SET", "timeout", "0"]), ok());
    assert_eq!(admin.call(&["CLIENT", "UNPAUSE"]), ok());
    assert_eq!(paused.read(), ok());
    admin.call(&["RPUSH", "list", "x"]);
    assert_eq!(
        blocked.read(),
        Val::Agg(b'*', Some(vec![bulk("list"), bulk("x")]))
    );
}

/// Passwords never reach the slow log, and EXEC is not logged but the commands it
/// runs are: the same entries as redis-server's.
#[test]
fn slowlog_hides_passwords_and_logs_what_exec_runs() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft(dir.path());
    let rdir = tempfile::tempdir().unwrap();
    let Some(r) = KvServer::redis(rdir.path(), &rdir.path().join("r.sock"), false) else {
        return;
    };
    let mut entries = Vec::new();
    for socket in [&s.socket, &r.socket] {
        let mut c = Wire::connect(socket);
        assert_eq!(
            c.call(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
            ok()
        );
        assert_eq!(c.call(&["SLOWLOG", "RESET"]), ok());
        c.call(&["AUTH", "pw"]);
        c.call(&["AUTH", "default", "pw"]);
        c.call(&["HELLO", "2", "AUTH", "default", "secret", "SETNAME", "n"]);
        c.call(&["CONFIG", "SET", "requirepass", "x", "maxclients", "100"]);
        c.call(&["CONFIG", "SET", "requirepass", ""]);
        c.call(&["MULTI"]);
        c.call(&["SET", "a", "1"]);
        c.call(&["INCR", "a"]);
        c.call(&["EXEC"]);
        let got = c.call(&["SLOWLOG", "GET", "-1"]);
        entries.push(logged(&got));
    }
    assert_eq!(entries[0], entries[1]);
    let text = format!("{:?}", entries[0]);
    assert!(!text.contains("secret") && !text.contains("pw") && !text.contains("EXEC"));
}
