//! Client-side caching (CLIENT TRACKING), tried against the built `weft kv serve` with
//! two workers (connections are given out round-robin, so trackers and writers sit on
//! both, and keys are on the shards of both):
//!
//! - default mode over RESP3: a key read is told once when another connection writes
//!   it, on either worker, as a push after the reply of the tracker's own command; a
//!   key never read and a second write are not told;
//! - RESP2 through REDIRECT to a connection subscribed to `__redis__:invalidate`, and
//!   FLUSHALL's null invalidation;
//! - BCAST with prefixes (a command's keys of one shard in one message), NOLOOP,
//!   OPTIN with CLIENT CACHING yes, OPTOUT with CLIENT CACHING no, and expiry;
//! - `tracking-table-max-keys` bounds the remembered keys (the others are told);
//! - the option errors, GETREDIR and TRACKINGINFO, compared with redis-server's
//!   replies when it is installed;
//! - against weft-kv and redis-server alike: a REDIRECT target gone from its QUIT's
//!   reply or CLIENT KILL's on, FLUSHALL and FLUSHDB forgetting the keys read before
//!   them, a blocking command's own change told after its reply (and spared by
//!   NOLOOP), a SETBIT that changes no bit being no change, and a key evicted for a
//!   command told before its reply; an eviction noted once (weft-kv).

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::KvServer;
use resp::{show, Val, Wire};

fn server(dir: &std::path::Path) -> KvServer {
    server_with(dir, &["--workers", "2"])
}

/// `weft kv serve` in `dir` with options `extra`.
fn server_with(dir: &std::path::Path, extra: &[&str]) -> KvServer {
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), extra).expect("weft kv serve starts")
}

fn bulk(s: &str) -> Val {
    Val::Blob(b'$', Some(s.as_bytes().to_vec()))
}

fn ok() -> Val {
    Val::Line(b'+', "OK".into())
}

/// `["invalidate", [key]]` as a RESP3 push.
fn push(key: &str) -> Val {
    Val::Agg(
        b'>',
        Some(vec![
            bulk("invalidate"),
            Val::Agg(b'*', Some(vec![bulk(key)])),
        ]),
    )
}

/// A RESP3 connection.
fn resp3(s: &KvServer) -> Wire {
    let mut w = Wire::connect(&s.socket);
    assert_eq!(w.call(&["HELLO", "3"]).kind(), b'%');
    w
}

/// Reads replies until `want` (a reply, not a push) comes, returning the pushes read
/// before it.
fn pushes_until(w: &mut Wire, want: &Val) -> Vec<Val> {
    let mut got = Vec::new();
    loop {
        let v = w.read();
        if &v == want {
            return got;
        }
        assert_eq!(v.kind(), b'>', "a push or {}, got {}", show(want), show(&v));
        got.push(v);
    }
}

#[test]
fn default_mode_tells_each_read_key_once_whoever_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut t = resp3(&s);
    // Two writers: one on each worker.
    let mut w1 = Wire::connect(&s.socket);
    let mut w2 = Wire::connect(&s.socket);
    assert_eq!(t.call(&["CLIENT", "TRACKING", "ON"]), ok());
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for k in &keys {
        assert_eq!(w1.call(&["SET", k, "0"]), ok());
    }
    // Read one at a time, and with a command over several shards.
    assert_eq!(t.call(&["GET", "k0"]), bulk("0"));
    let mut mget = vec!["MGET"];
    mget.extend(keys[1..].iter().map(String::as_str));
    assert_eq!(t.call(&mget).items().len(), 7);
    // A key never read is not told.
    assert_eq!(w1.call(&["SET", "unread", "1"]), ok());
    for (i, k) in keys.iter().enumerate() {
        let w = if i % 2 == 0 { &mut w1 } else { &mut w2 };
        assert_eq!(w.call(&["SET", k, "1"]), ok());
    }
    for k in &keys {
        assert_eq!(t.read(), push(k));
    }
    // Told once: a second write of k0 says nothing, then k0 read again is told again.
    assert_eq!(w2.call(&["SET", "k0", "2"]), ok());
    assert_eq!(t.call(&["GET", "k0"]), bulk("2"));
    assert_eq!(w1.call(&["APPEND", "k0", "x"]).int(), Some(2));
    assert_eq!(t.read(), push("k0"));
    // Its own write: the push comes after the reply.
    assert_eq!(t.call(&["GET", "k1"]), bulk("1"));
    assert_eq!(t.call(&["INCR", "k1"]), Val::Line(b':', "2".into()));
    assert_eq!(t.read(), push("k1"));
    // A failed write changes nothing and tells nothing.
    assert_eq!(t.call(&["GET", "k2"]), bulk("1"));
    assert_eq!(w1.call(&["LPUSH", "k2", "x"]).kind(), b'-');
    assert_eq!(t.call(&["DEL", "k2"]).int(), Some(1));
    assert_eq!(t.read(), push("k2"));
    // OFF: nothing more.
    assert_eq!(t.call(&["GET", "k3"]), bulk("1"));
    assert_eq!(t.call(&["CLIENT", "TRACKING", "OFF"]), ok());
    assert_eq!(w2.call(&["SET", "k3", "9"]), ok());
    assert_eq!(t.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    assert_eq!(t.info_field("clients", "tracking_clients"), 0);
}

#[test]
fn resp2_invalidations_go_to_the_redirect_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut sub = Wire::connect(&s.socket);
    let id = sub.call(&["CLIENT", "ID"]).int().unwrap().to_string();
    sub.call(&["SUBSCRIBE", "__redis__:invalidate"]);
    let mut t = Wire::connect(&s.socket);
    let mut w = Wire::connect(&s.socket);
    assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), ok());
    assert_eq!(
        t.call(&["CLIENT", "GETREDIR"]).int(),
        Some(id.parse().unwrap())
    );
    assert_eq!(t.call(&["HGET", "h", "f"]), Val::Blob(b'$', None));
    assert_eq!(w.call(&["HSET", "h", "f", "v"]).int(), Some(1));
    let message = |payload: Val| {
        Val::Agg(
            b'*',
            Some(vec![bulk("message"), bulk("__redis__:invalidate"), payload]),
        )
    };
    assert_eq!(sub.read(), message(Val::Agg(b'*', Some(vec![bulk("h")]))));
    // FLUSHALL: one null invalidation, and nothing remembered any more.
    assert_eq!(t.call(&["HGET", "h", "f"]), bulk("v"));
    assert_eq!(w.call(&["FLUSHALL"]), ok());
    assert_eq!(sub.read(), message(Val::Blob(b'$', None)));
    assert_eq!(w.info_field("stats", "tracking_total_keys"), 0);
    // The subscriber gone: RESP2 says nothing; GETREDIR still names it.
    drop(sub);
    assert_eq!(t.call(&["GET", "x"]), Val::Blob(b'$', None));
    assert_eq!(w.call(&["SET", "x", "1"]), ok());
    assert_eq!(
        t.call(&["CLIENT", "GETREDIR"]).int(),
        Some(id.parse().unwrap())
    );
}

#[test]
fn bcast_prefixes_noloop_optin_optout_and_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut w = Wire::connect(&s.socket);
    // BCAST with two prefixes and NOLOOP: its own writes are not told.
    let mut b = resp3(&s);
    let on = [
        "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a:", "PREFIX", "b:", "NOLOOP",
    ];
    assert_eq!(b.call(&on), ok());
    assert_eq!(b.call(&["SET", "a:mine", "1"]), ok());
    for k in ["a:1", "c:1", "b:2", "ab"] {
        assert_eq!(w.call(&["SET", k, "1"]), ok());
    }
    assert_eq!(b.read(), push("a:1"));
    assert_eq!(b.read(), push("b:2"));
    // The keys one command changes come in one message per shard (the keys of a
    // shard, together), as Redis gathers them.
    assert_eq!(w.call(&["MSET", "a:x", "1", "c:2", "2", "a:y", "3"]), ok());
    let mut got = Vec::new();
    let mut messages = 0;
    while got.len() < 2 {
        let m = b.read();
        assert_eq!(m.kind(), b'>');
        assert_eq!(m.items()[0], bulk("invalidate"));
        got.extend(m.items()[1].items().iter().map(Val::text));
        messages += 1;
    }
    got.sort();
    assert_eq!(got, ["a:x", "a:y"]);
    assert!(messages <= 2);
    assert_eq!(w.info_field("stats", "tracking_total_prefixes"), 2);
    assert_eq!(b.call(&["CLIENT", "TRACKING", "OFF"]), ok());

    // OPTIN: only the command after CLIENT CACHING yes remembers its keys.
    let mut i = resp3(&s);
    assert_eq!(i.call(&["CLIENT", "TRACKING", "ON", "OPTIN"]), ok());
    assert_eq!(i.call(&["GET", "in1"]), Val::Line(b'_', String::new()));
    assert_eq!(i.call(&["CLIENT", "CACHING", "YES"]), ok());
    assert_eq!(i.call(&["GET", "in2"]), Val::Line(b'_', String::new()));
    assert_eq!(i.call(&["GET", "in3"]), Val::Line(b'_', String::new()));
    // OPTOUT: every command but the one after CLIENT CACHING no.
    let mut o = resp3(&s);
    assert_eq!(o.call(&["CLIENT", "TRACKING", "ON", "OPTOUT"]), ok());
    assert_eq!(o.call(&["CLIENT", "CACHING", "NO"]), ok());
    assert_eq!(o.call(&["GET", "out1"]), Val::Line(b'_', String::new()));
    assert_eq!(o.call(&["GET", "out2"]), Val::Line(b'_', String::new()));
    for k in ["in1", "in2", "in3", "out1", "out2"] {
        assert_eq!(w.call(&["SET", k, "1"]), ok());
    }
    assert_eq!(i.read(), push("in2"));
    assert_eq!(o.read(), push("out2"));
    assert_eq!(i.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    assert_eq!(o.call(&["PING"]), Val::Line(b'+', "PONG".into()));

    // A key read, then expired by the server's own cycle, is told (a longer time if
    // the machine was too slow to read it before it expired).
    for px in ["200", "5000", "60000"] {
        assert_eq!(w.call(&["SET", "soon", "1", "PX", px]), ok());
        if o.call(&["GET", "soon"]) == bulk("1") {
            assert_eq!(o.read(), push("soon"));
            break;
        }
    }
}

#[test]
fn the_remembered_keys_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut t = resp3(&s);
    assert_eq!(
        t.call(&["CONFIG", "SET", "tracking-table-max-keys", "3"]),
        ok()
    );
    assert_eq!(t.call(&["CLIENT", "TRACKING", "ON"]), ok());
    let keys: Vec<String> = (0..10).map(|i| format!("key{i}")).collect();
    let mut mget = vec![b"MGET".to_vec()];
    mget.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
    t.send(&mget);
    let reply = Val::Agg(b'*', Some(vec![Val::Line(b'_', String::new()); 10]));
    // Seven keys are taken out, each told once.
    let mut told = pushes_until(&mut t, &reply);
    while told.len() < 7 {
        told.push(t.read());
    }
    told.sort();
    told.dedup();
    assert_eq!(told.len(), 7);
    assert!(told.iter().all(|p| keys.iter().any(|k| *p == push(k))));
    assert_eq!(t.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    assert_eq!(t.info_field("stats", "tracking_total_keys"), 3);
    assert_eq!(
        t.call(&["CONFIG", "GET", "tracking-table-max-keys"])
            .items()[1],
        bulk("3")
    );
}

/// The replies of the tracking commands, errors included, are redis-server's.
#[test]
fn options_errors_and_info_match_redis() {
    let dir = tempfile::tempdir().unwrap();
    let weft = server(dir.path());
    std::fs::create_dir(dir.path().join("r")).unwrap();
    let Some(redis) = KvServer::redis(&dir.path().join("r"), &dir.path().join("r.sock"), false)
    else {
        return;
    };
    let script: &[&[&str]] = &[
        &["CLIENT", "TRACKINGINFO"],
        &["CLIENT", "GETREDIR"],
        &["CLIENT", "CACHING", "YES"],
        &["CLIENT", "TRACKING", "MAYBE"],
        &["CLIENT", "TRACKING", "ON", "PREFIX", "a"],
        &["CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"],
        &["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"],
        &["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"],
        &["CLIENT", "TRACKING", "ON", "REDIRECT", "x"],
        &["CLIENT", "TRACKING", "ON", "BOGUS"],
        &[
            "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab", "PREFIX", "a",
        ],
        &["CLIENT", "TRACKING", "ON", "OPTIN", "NOLOOP"],
        &["CLIENT", "TRACKINGINFO"],
        &["CLIENT", "CACHING", "NO"],
        &["CLIENT", "CACHING", "MAYBE"],
        &["CLIENT", "CACHING", "YES"],
        &["CLIENT", "TRACKINGINFO"],
        &["CLIENT", "TRACKING", "ON", "OPTOUT"],
        &["CLIENT", "TRACKING", "ON", "BCAST"],
        &["CLIENT", "GETREDIR"],
        &["CLIENT", "TRACKING", "OFF"],
        &[
            "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x:", "PREFIX", "y:",
        ],
        &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "x:1"],
        &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "z:"],
        &["CLIENT", "TRACKINGINFO"],
        &["CLIENT", "TRACKING", "OFF"],
        &["CLIENT", "TRACKINGINFO"],
    ];
    for proto in ["2", "3"] {
        let mut a = Wire::connect(&weft.socket);
        let mut b = Wire::connect(&redis.socket);
        a.call(&["HELLO", proto]);
        b.call(&["HELLO", proto]);
        for cmd in script {
            let (x, y) = (a.call(cmd), b.call(cmd));
            assert_eq!(show(&x), show(&y), "RESP{proto} {cmd:?}");
        }
        // CLIENT INFO's flags (t: tracking, B: BCAST) and redir.
        let fields = |w: &mut Wire| {
            let info = w.call(&["CLIENT", "INFO"]).text();
            info.split_whitespace()
                .filter(|f| f.starts_with("flags=") || f.starts_with("redir="))
                .map(String::from)
                .collect::<Vec<_>>()
        };
        for on in [
            &["CLIENT", "TRACKING", "ON", "BCAST"][..],
            &["CLIENT", "TRACKING", "OFF"],
        ] {
            a.call(on);
            b.call(on);
            assert_eq!(fields(&mut a), fields(&mut b), "RESP{proto} after {on:?}");
        }
    }
}

/// Runs `f` against weft-kv, then against redis-server when it is installed (the
/// behaviour asserted is Redis's).
fn on_weft_and_redis(f: impl Fn(&KvServer)) {
    on_weft_with_and_redis(&["--workers", "2"], f)
}

/// [`on_weft_and_redis`], weft-kv started with `extra`.
fn on_weft_with_and_redis(extra: &[&str], f: impl Fn(&KvServer)) {
    let dir = tempfile::tempdir().unwrap();
    f(&server_with(dir.path(), extra));
    std::fs::create_dir(dir.path().join("r")).unwrap();
    if let Some(redis) = KvServer::redis(&dir.path().join("r"), &dir.path().join("r.sock"), false) {
        f(&redis);
    }
}

/// `["tracking-redir-broken", id]` as a RESP3 push.
fn redir_broken(id: &str) -> Val {
    Val::Agg(
        b'>',
        Some(vec![
            bulk("tracking-redir-broken"),
            Val::Line(b':', id.into()),
        ]),
    )
}

/// A REDIRECT target that sent QUIT is gone from its reply on: the next write of a
/// remembered key finds it gone at once (a push to the tracker, and TRACKINGINFO's
/// `broken_redirect`), not only once its socket has closed. Messages published to it
/// before come before its QUIT reply. Many rounds: the target's end races the write.
#[test]
fn a_redirect_target_that_quit_is_gone_from_its_reply_on() {
    on_weft_and_redis(|s| {
        let mut t = resp3(s);
        let mut w = Wire::connect(&s.socket);
        for round in 0..20 {
            let mut target = Wire::connect(&s.socket);
            let id = target.call(&["CLIENT", "ID"]).int().unwrap().to_string();
            target.call(&["SUBSCRIBE", "__redis__:invalidate", "news"]);
            target.read();
            assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), ok());
            let key = format!("k{round}");
            assert_eq!(w.call(&["SET", &key, "1"]), ok());
            assert_eq!(t.call(&["GET", &key]), bulk("1"));
            assert_eq!(w.call(&["PUBLISH", "news", "hello"]).int(), Some(1));
            target.send(&[b"QUIT".to_vec()]);
            let message = Val::Agg(
                b'*',
                Some(vec![bulk("message"), bulk("news"), bulk("hello")]),
            );
            assert_eq!(target.read(), message);
            assert_eq!(target.read(), ok());
            assert_eq!(w.call(&["SET", &key, "2"]), ok());
            assert_eq!(t.read(), redir_broken(&id), "round {round}");
            let info = t.call(&["CLIENT", "TRACKINGINFO"]);
            assert_eq!(
                info.items()[1],
                Val::Agg(b'~', Some(vec![bulk("on"), bulk("broken_redirect")]))
            );
            assert_eq!(t.call(&["CLIENT", "TRACKING", "OFF"]), ok());
        }
    });
}

/// FLUSHALL (and FLUSHDB) forget every remembered key: a key read before it, by a
/// connection that turned tracking off and on again meanwhile, is not told when it is
/// written after it (Redis clears its whole table).
#[test]
fn a_flush_forgets_the_keys_read_before_it() {
    on_weft_and_redis(|s| {
        let mut sub = Wire::connect(&s.socket);
        let id = sub.call(&["CLIENT", "ID"]).int().unwrap().to_string();
        sub.call(&["SUBSCRIBE", "__redis__:invalidate"]);
        let mut t = Wire::connect(&s.socket);
        let mut w = Wire::connect(&s.socket);
        for flush in ["FLUSHALL", "FLUSHDB"] {
            assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), ok());
            assert_eq!(t.call(&["MGET", "a", "b", "c", "d"]).items().len(), 4);
            assert_eq!(t.call(&["CLIENT", "TRACKING", "OFF"]), ok());
            assert_eq!(w.info_field("stats", "tracking_total_keys"), 4);
            assert_eq!(t.call(&[flush]), ok());
            assert_eq!(w.info_field("stats", "tracking_total_keys"), 0);
            assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), ok());
            for k in ["a", "b", "c", "d"] {
                assert_eq!(w.call(&["SET", k, "1"]), ok());
            }
            // Nothing came before the PING's answer.
            assert_eq!(
                sub.call(&["PING"]),
                Val::Agg(b'*', Some(vec![bulk("pong"), bulk("")]))
            );
            assert_eq!(t.call(&["CLIENT", "TRACKING", "OFF"]), ok());
            assert_eq!(w.call(&["DEL", "a", "b", "c", "d"]).int(), Some(4));
        }
    });
}

/// A blocking command's own change is told after its reply, as Redis sends it: when
/// it is served later (BLMOVE woken by a push) and when it is served at once.
#[test]
fn a_blocking_commands_own_change_is_told_after_its_reply() {
    on_weft_and_redis(|s| {
        let mut t = resp3(s);
        let mut w = Wire::connect(&s.socket);
        assert_eq!(t.call(&["CLIENT", "TRACKING", "ON"]), ok());
        for round in 0..10 {
            assert_eq!(w.call(&["RPUSH", "dst", "a"]).int(), Some(1));
            assert_eq!(t.call(&["LRANGE", "dst", "0", "-1"]).items().len(), 1);
            assert_eq!(t.call(&["GET", "other"]), Val::Line(b'_', String::new()));
            let blmove = ["BLMOVE", "src", "dst", "LEFT", "LEFT", "0"];
            t.send(&blmove.map(|a| a.as_bytes().to_vec()));
            kv::eventually("the BLMOVE blocks", || {
                w.info_field("clients", "blocked_clients") == 1
            });
            // Meanwhile a change of another remembered key is told at once.
            assert_eq!(w.call(&["SET", "other", "1"]), ok());
            assert_eq!(t.read(), push("other"));
            assert_eq!(w.call(&["RPUSH", "src", "foo"]).int(), Some(1));
            assert_eq!(t.read(), bulk("foo"), "round {round}");
            assert_eq!(t.read(), push("dst"));
            // Served at once: the same order.
            assert_eq!(t.call(&["LRANGE", "dst", "0", "-1"]).items().len(), 2);
            assert_eq!(w.call(&["RPUSH", "src", "bar"]).int(), Some(1));
            t.send(&blmove.map(|a| a.as_bytes().to_vec()));
            assert_eq!(t.read(), bulk("bar"));
            assert_eq!(t.read(), push("dst"));
            assert_eq!(w.call(&["DEL", "dst", "other"]).int(), Some(2));
        }
    });
}

/// A SETBIT that changes no bit makes an `int` string `raw` and is no change of the
/// key: a tracker is not told, a WATCH of it still lets EXEC run, INFO's count of
/// changes does not move (as in Redis).
#[test]
fn a_setbit_that_changes_no_bit_is_no_change() {
    on_weft_and_redis(|s| {
        let mut t = resp3(s);
        let mut w = Wire::connect(&s.socket);
        assert_eq!(w.call(&["SET", "n", "1"]), ok());
        assert_eq!(t.call(&["CLIENT", "TRACKING", "ON"]), ok());
        assert_eq!(t.call(&["GET", "n"]), bulk("1"));
        assert_eq!(w.call(&["WATCH", "n"]), ok());
        let changes = w.info_field("persistence", "rdb_changes_since_last_save");
        // '1' is 0x31: bit 2 is set already.
        assert_eq!(w.call(&["SETBIT", "n", "2", "1"]).int(), Some(1));
        assert_eq!(w.call(&["OBJECT", "ENCODING", "n"]), bulk("raw"));
        assert_eq!(
            w.info_field("persistence", "rdb_changes_since_last_save"),
            changes
        );
        assert_eq!(w.call(&["MULTI"]), ok());
        assert_eq!(w.call(&["PING"]), Val::Line(b'+', "QUEUED".into()));
        assert_eq!(
            w.call(&["EXEC"]),
            Val::Agg(b'*', Some(vec![Val::Line(b'+', "PONG".into())]))
        );
        // Nothing came before PING's answer; a real change is told.
        assert_eq!(t.call(&["PING"]), Val::Line(b'+', "PONG".into()));
        assert_eq!(w.call(&["SETBIT", "n", "2", "0"]).int(), Some(1));
        assert_eq!(t.read(), push("n"));
    });
}

/// A key evicted to make room for a command is told before that command's reply (the
/// eviction comes first, as in Redis), to the tracker that runs the command. (One
/// shard: a command evicts keys of its own shard.)
#[test]
fn an_eviction_for_a_command_is_told_before_its_reply() {
    on_weft_with_and_redis(&["--workers", "1"], |s| {
        let mut t = resp3(s);
        let mut w = Wire::connect(&s.socket);
        // Only the command evicts (weft-kv's workers evict periodically too; a
        // redis-server without DEBUG evicts only for commands).
        w.call(&["DEBUG", "PAUSE-CRON", "1"]);
        let used = w.info_field("memory", "used_memory");
        // Room to spare: what a server counts moves a little with its clients' buffers.
        let limit = (used + 400 * 1024).to_string();
        assert_eq!(w.call(&["CONFIG", "SET", "maxmemory", &limit]), ok());
        assert_eq!(
            w.call(&["CONFIG", "SET", "maxmemory-policy", "volatile-random"]),
            ok()
        );
        assert_eq!(t.call(&["CLIENT", "TRACKING", "ON"]), ok());
        assert_eq!(t.call(&["SETEX", "volatile-key", "10000", "x"]), ok());
        assert_eq!(t.call(&["GET", "volatile-key"]), bulk("x"));
        // 800 KB: over the limit after it.
        assert_eq!(
            t.call(&["SETBIT", "big-key", "6400000", "0"]),
            Val::Line(b':', "0".into())
        );
        t.send(&[b"GETBIT".to_vec(), b"big-key".to_vec(), b"0".to_vec()]);
        assert_eq!(t.read(), push("volatile-key"));
        assert_eq!(t.read().int(), Some(0));
        assert_eq!(w.call(&["CONFIG", "SET", "maxmemory", "0"]), ok());
        w.call(&["DEBUG", "PAUSE-CRON", "0"]);
    });
}

/// The keys a command evicts before it runs are noted once each: INFO's count of
/// changes grows by the keys evicted, and a read that evicts changes nothing more.
#[test]
fn an_eviction_is_noted_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = server_with(dir.path(), &["--workers", "1"]);
    let mut w = Wire::connect(&s.socket);
    // Only the command evicts (not the workers' periodic work).
    assert_eq!(w.call(&["DEBUG", "PAUSE-CRON", "1"]), ok());
    let used = w.info_field("memory", "used_memory");
    let limit = (used + 100 * 1024).to_string();
    assert_eq!(w.call(&["CONFIG", "SET", "maxmemory", &limit]), ok());
    assert_eq!(
        w.call(&["CONFIG", "SET", "maxmemory-policy", "volatile-random"]),
        ok()
    );
    for i in 0..5 {
        assert_eq!(w.call(&["SETEX", &format!("v{i}"), "10000", "x"]), ok());
    }
    assert_eq!(w.call(&["SETBIT", "big", "1600000", "0"]).int(), Some(0));
    let changes = |w: &mut Wire| w.info_field("persistence", "rdb_changes_since_last_save");
    let evicted = |w: &mut Wire| w.info_field("stats", "evicted_keys");
    let (c0, e0) = (changes(&mut w), evicted(&mut w));
    assert_eq!(w.call(&["GETBIT", "big", "0"]).int(), Some(0));
    let (c1, e1) = (changes(&mut w), evicted(&mut w));
    assert!(e1 > e0, "the read evicted keys");
    assert_eq!(c1 - c0, e1 - e0);
}

/// A connection closed by CLIENT KILL is gone from the kill's reply on: a REDIRECT to
/// it finds it gone at the next write, a PUBLISH to its channel reaches nobody, and it
/// no longer counts as tracking.
#[test]
fn a_killed_connection_is_gone_from_the_kills_reply_on() {
    on_weft_and_redis(|s| {
        let mut t = resp3(s);
        let mut w = Wire::connect(&s.socket);
        for round in 0..10 {
            let mut target = Wire::connect(&s.socket);
            let id = target.call(&["CLIENT", "ID"]).int().unwrap().to_string();
            target.call(&["SUBSCRIBE", "__redis__:invalidate"]);
            let mut other = Wire::connect(&s.socket);
            assert_eq!(other.call(&["CLIENT", "TRACKING", "ON", "BCAST"]), ok());
            let other_id = other.call(&["CLIENT", "ID"]).int().unwrap().to_string();
            assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "REDIRECT", &id]), ok());
            let key = format!("k{round}");
            assert_eq!(t.call(&["GET", &key]), Val::Line(b'_', String::new()));
            assert_eq!(w.info_field("clients", "tracking_clients"), 2);
            assert_eq!(w.call(&["CLIENT", "KILL", "ID", &id]).int(), Some(1));
            assert_eq!(w.call(&["CLIENT", "KILL", "ID", &other_id]).int(), Some(1));
            assert_eq!(
                w.call(&["PUBLISH", "__redis__:invalidate", "x"]).int(),
                Some(0),
                "round {round}"
            );
            assert_eq!(w.info_field("clients", "tracking_clients"), 1);
            assert_eq!(w.call(&["SET", &key, "1"]), ok());
            assert_eq!(t.read(), redir_broken(&id), "round {round}");
            assert_eq!(t.call(&["CLIENT", "TRACKING", "OFF"]), ok());
        }
    });
}

/// NOLOOP: a blocking command's own change is its own, also when another connection's
/// write serves it (Redis serves it as the blocked connection): its tracker is not
/// told, another tracker is.
#[test]
fn noloop_spares_a_served_blocking_commands_own_change() {
    on_weft_and_redis(|s| {
        let mut t = resp3(s);
        let mut other = resp3(s);
        let mut w = Wire::connect(&s.socket);
        assert_eq!(t.call(&["CLIENT", "TRACKING", "ON", "NOLOOP"]), ok());
        assert_eq!(other.call(&["CLIENT", "TRACKING", "ON"]), ok());
        assert_eq!(w.call(&["RPUSH", "dst", "a"]).int(), Some(1));
        for c in [&mut t, &mut other] {
            assert_eq!(c.call(&["LRANGE", "dst", "0", "-1"]).items().len(), 1);
        }
        let blmove = ["BLMOVE", "src", "dst", "LEFT", "LEFT", "0"];
        t.send(&blmove.map(|a| a.as_bytes().to_vec()));
        kv::eventually("the BLMOVE blocks", || {
            w.info_field("clients", "blocked_clients") == 1
        });
        assert_eq!(w.call(&["RPUSH", "src", "foo"]).int(), Some(1));
        assert_eq!(t.read(), bulk("foo"));
        assert_eq!(other.read(), push("dst"));
        // Nothing for the NOLOOP tracker before PING's answer.
        assert_eq!(t.call(&["PING"]), Val::Line(b'+', "PONG".into()));
        // Served at once: the same.
        assert_eq!(t.call(&["LRANGE", "dst", "0", "-1"]).items().len(), 2);
        assert_eq!(w.call(&["RPUSH", "src", "bar"]).int(), Some(1));
        t.send(&blmove.map(|a| a.as_bytes().to_vec()));
        assert_eq!(t.read(), bulk("bar"));
        assert_eq!(t.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    });
}
