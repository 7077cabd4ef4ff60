//! The blocking commands of `weft kv serve` (the built binary, two workers, so keys
//! fall on shards of both and connections are served by both): BLPOP, BRPOP, BLMOVE,
//! BRPOPLPUSH, BLMPOP and CLIENT UNBLOCK against a running server, as clients see
//! them: first blocked first served, woken by a push from a connection of the other
//! worker, a BLPOP over keys of both shards served once, BLMOVE across shards under
//! pushers and blockers with short timeouts losing and duplicating no element, a
//! client that closes its connection while blocked, timeouts, the replies' shapes in
//! RESP2 and RESP3, and the state after a restart (the served pops were logged).
//!
//! `WEFT_KV_STRESS=1` runs the stress longer (more pushers, blockers and elements).

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::{KvServer, TempKv, CEILING};
use resp::{bulk, show, Val, Wire};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shard of `key` among `shards`, as weft-kv places keys (CRC32C of the key).
fn shard_of(key: &str, shards: usize) -> usize {
    let mut crc = !0u32;
    for &b in key.as_bytes() {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    (!crc) as usize % shards
}

/// A key named after `base` on shard `s` of 2.
fn key_on(base: &str, s: usize) -> String {
    (0..)
        .map(|i| format!("{base}:{i}"))
        .find(|k| shard_of(k, 2) == s)
        .unwrap()
}

fn server() -> TempKv {
    TempKv::start(0, &["--workers", "2"])
}

fn wire(s: &KvServer) -> Wire {
    Wire::connect(&s.socket)
}

fn arr(v: Vec<Val>) -> Val {
    Val::Agg(b'*', Some(v))
}

/// `[key, element]`, as BLPOP answers.
fn popped(key: &str, elem: &str) -> Val {
    arr(vec![bulk(key), bulk(elem)])
}

/// The number of blocked clients INFO shows.
fn blocked_clients(c: &mut Wire) -> i64 {
    c.info_field("clients", "blocked_clients")
}

/// Waits (up to the ceiling) until INFO shows `n` blocked clients.
fn wait_blocked(c: &mut Wire, n: i64) {
    let deadline = Instant::now() + CEILING;
    while blocked_clients(c) != n {
        assert!(Instant::now() < deadline, "never {n} blocked clients");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn send(w: &mut Wire, args: &[&str]) {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    w.send(&args);
}

#[test]
fn waiters_of_a_key_are_served_first_blocked_first() {
    let s = server();
    let mut c = wire(&s);
    let mut waiters: Vec<Wire> = (0..3).map(|_| wire(&s)).collect();
    for (i, w) in waiters.iter_mut().enumerate() {
        send(w, &["BLPOP", "queue", "0"]);
        wait_blocked(&mut c, i as i64 + 1);
    }
    // CLIENT LIST shows them blocked (flag b).
    let list = c.call(&["CLIENT", "LIST"]).text();
    assert_eq!(
        list.lines().filter(|l| l.contains(" flags=b")).count(),
        3,
        "{list}"
    );
    // One push of three elements serves the three, in the order they blocked, each
    // before the pusher's next command runs.
    assert_eq!(
        c.call(&["RPUSH", "queue", "a", "b", "c", "d"]).int(),
        Some(4)
    );
    assert_eq!(
        c.call(&["LRANGE", "queue", "0", "-1"]),
        arr(vec![bulk("d")])
    );
    for (w, e) in waiters.iter_mut().zip(["a", "b", "c"]) {
        assert_eq!(w.read(), popped("queue", e));
    }
    assert_eq!(blocked_clients(&mut c), 0);
    // BRPOP from the tail; a key named twice is waited on once.
    send(&mut waiters[0], &["BRPOP", "queue2", "queue2", "0"]);
    wait_blocked(&mut c, 1);
    c.call(&["RPUSH", "queue2", "x", "y"]);
    assert_eq!(waiters[0].read(), popped("queue2", "y"));
    assert_eq!(
        c.call(&["LRANGE", "queue2", "0", "-1"]),
        arr(vec![bulk("x")])
    );
}

#[test]
fn a_push_on_the_other_worker_wakes_the_waiter() {
    let s = server();
    // Connections go round-robin to the workers: of two in a row, one is on each.
    for shard in 0..2 {
        let key = key_on("wake", shard);
        let mut pair = [wire(&s), wire(&s)];
        for turn in 0..2 {
            let (x, y) = pair.split_at_mut(1);
            let (blocker, pusher) = if turn == 0 {
                (&mut x[0], &mut y[0])
            } else {
                (&mut y[0], &mut x[0])
            };
            send(blocker, &["BLPOP", &key, "0"]);
            wait_blocked(pusher, 1);
            assert_eq!(pusher.call(&["LPUSH", &key, "hello"]).int(), Some(1));
            assert_eq!(blocker.read(), popped(&key, "hello"));
            assert_eq!(pusher.call(&["EXISTS", &key]).int(), Some(0));
        }
    }
}

#[test]
fn a_transaction_that_pushes_wakes_the_waiter_once_it_is_over() {
    let s = server();
    let (src, dst) = (key_on("tx-src", 0), key_on("tx-dst", 1));
    let mut c = wire(&s);
    let mut w = wire(&s);
    c.call(&["RPUSH", &src, "a", "b"]);
    send(&mut w, &["BLPOP", &dst, "0"]);
    wait_blocked(&mut c, 1);
    // LMOVE over two shards is one transaction: the waiter is served after it, and
    // the pusher's next command sees the element taken.
    assert_eq!(c.call(&["LMOVE", &src, &dst, "LEFT", "RIGHT"]), bulk("a"));
    assert_eq!(w.read(), popped(&dst, "a"));
    assert_eq!(c.call(&["EXISTS", &dst]).int(), Some(0));
    assert_eq!(c.call(&["LRANGE", &src, "0", "-1"]), arr(vec![bulk("b")]));
}

#[test]
fn a_waiter_on_keys_of_both_shards_is_served_once() {
    let s = server();
    let (k0, k1) = (key_on("both", 0), key_on("both", 1));
    let mut c = wire(&s);
    let mut w = wire(&s);
    send(&mut w, &["BLPOP", &k0, &k1, "0"]);
    wait_blocked(&mut c, 1);
    // Two pushes on two shards in one pipeline: the waiter takes one element only.
    send(&mut c, &["RPUSH", &k1, "one"]);
    send(&mut c, &["RPUSH", &k0, "zero"]);
    c.read();
    c.read();
    let got = w.read();
    assert!(
        got == popped(&k1, "one") || got == popped(&k0, "zero"),
        "{}",
        show(&got)
    );
    let left = c.call(&["LLEN", &k0]).int().unwrap() + c.call(&["LLEN", &k1]).int().unwrap();
    assert_eq!(left, 1, "exactly one element was taken");
    assert_eq!(blocked_clients(&mut c), 0);
    // A key with data is served at once, the first one in the order given.
    assert_eq!(
        c.call(&["BLPOP", "nothing", &k0, &k1, "0"]).items().len(),
        2
    );
}

#[test]
fn timeouts_errors_and_reply_shapes() {
    let s = server();
    let mut c = wire(&s);
    for (args, err) in [
        (vec!["BLPOP", "k", "-1"], "ERR timeout is negative"),
        (
            vec!["BLPOP", "k", "abc"],
            "ERR timeout is not a float or out of range",
        ),
        (
            vec!["BRPOP", "k", "0x7FFFFFFFFFFFFF"],
            "ERR timeout is negative",
        ),
        (
            vec!["BLMOVE", "a", "b", "UP", "LEFT", "0"],
            "ERR syntax error",
        ),
        (
            vec!["BLMPOP", "0", "0", "k", "LEFT"],
            "ERR numkeys should be greater than 0",
        ),
        (vec!["BLMPOP", "0", "2", "k", "LEFT"], "ERR syntax error"),
        (
            vec!["BLMPOP", "0", "1", "k", "LEFT", "COUNT", "0"],
            "ERR count should be greater than 0",
        ),
        (
            vec!["CLIENT", "UNBLOCK", "1", "MAYBE"],
            "ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR",
        ),
        (
            vec!["CLIENT", "UNBLOCK", "abc"],
            "ERR value is not an integer or out of range",
        ),
    ] {
        assert_eq!(c.call(&args), Val::Line(b'-', err.into()), "{args:?}");
    }
    c.call(&["SET", "str", "x"]);
    let wrong = Val::Line(
        b'-',
        "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
    );
    assert_eq!(c.call(&["BLPOP", "missing", "str", "0"]), wrong);
    // The timeout: not before it, and a null array (RESP2), `_` (RESP3).
    for (proto, nothing) in [
        ("2", Val::Agg(b'*', None)),
        ("3", Val::Line(b'_', String::new())),
    ] {
        c.call(&["HELLO", proto]);
        let t0 = Instant::now();
        assert_eq!(c.call(&["BLPOP", "missing", "0.2"]), nothing);
        assert!(t0.elapsed() >= Duration::from_millis(200));
        assert_eq!(
            c.call(&["BLMOVE", "missing", "dst", "LEFT", "LEFT", "0.01"]),
            nothing
        );
    }
    c.call(&["HELLO", "2"]);
    // BLMPOP answers [key, [elements]]; the count is what is there at most.
    c.call(&["RPUSH", "m", "1", "2", "3"]);
    assert_eq!(
        c.call(&["BLMPOP", "0", "2", "none", "m", "RIGHT", "COUNT", "2"]),
        arr(vec![bulk("m"), arr(vec![bulk("3"), bulk("2")])])
    );
    // INFO counts a client blocked with a timeout in its timeout table.
    let mut t = wire(&s);
    send(&mut t, &["BLPOP", "missing", "30"]);
    wait_blocked(&mut c, 1);
    let info = c.call(&["INFO", "clients"]).text();
    assert!(info.contains("clients_in_timeout_table:1\r\n"), "{info}");
    drop(t);
    wait_blocked(&mut c, 0);
    let info = c.call(&["INFO", "clients"]).text();
    assert!(info.contains("clients_in_timeout_table:0\r\n"), "{info}");
    // CLIENT UNBLOCK: as a timeout, or with an error; 0 for a client not blocked.
    let mut w = wire(&s);
    let id = w.call(&["CLIENT", "ID"]).int().unwrap().to_string();
    assert_eq!(c.call(&["CLIENT", "UNBLOCK", &id]).int(), Some(0));
    send(&mut w, &["BLPOP", "missing", "0"]);
    wait_blocked(&mut c, 1);
    assert_eq!(
        c.call(&["CLIENT", "UNBLOCK", &id, "TIMEOUT"]).int(),
        Some(1)
    );
    assert_eq!(w.read(), Val::Agg(b'*', None));
    send(&mut w, &["BLPOP", "missing", "0"]);
    wait_blocked(&mut c, 1);
    assert_eq!(c.call(&["CLIENT", "UNBLOCK", &id, "ERROR"]).int(), Some(1));
    assert_eq!(
        w.read(),
        Val::Line(b'-', "UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
    );
    assert_eq!(blocked_clients(&mut c), 0);
    // A key set to another type serves no one: the waiter goes on waiting.
    send(&mut w, &["BLPOP", "later", "0"]);
    wait_blocked(&mut c, 1);
    c.call(&["SET", "later", "x"]);
    c.call(&["DEL", "later"]);
    c.call(&["RPUSH", "later", "y"]);
    assert_eq!(w.read(), popped("later", "y"));
    // A BLMOVE whose destination holds another type when its source gets data: the
    // error, and the element stays.
    send(&mut w, &["BRPOPLPUSH", "src", "str", "0"]);
    wait_blocked(&mut c, 1);
    c.call(&["RPUSH", "src", "e"]);
    assert_eq!(w.read(), wrong);
    assert_eq!(c.call(&["LRANGE", "src", "0", "-1"]), arr(vec![bulk("e")]));
}

#[test]
fn inside_multi_they_do_not_block_and_exec_wakes_waiters_after_it() {
    let s = server();
    let mut c = wire(&s);
    let (k, other) = (key_on("multi", 0), key_on("multi", 1));
    // Queued, they act as their non-blocking forms.
    assert_eq!(c.call(&["MULTI"]), Val::Line(b'+', "OK".into()));
    for cmd in [
        vec!["BLPOP", "missing", "0"],
        vec!["BLMOVE", "missing", "dst", "LEFT", "LEFT", "0"],
        vec!["RPUSH", &k, "a"],
        vec!["BLPOP", "missing", &k, "0"],
        vec!["BZPOPMIN", "missing", "0"],
    ] {
        assert_eq!(c.call(&cmd), Val::Line(b'+', "QUEUED".into()));
    }
    assert_eq!(
        c.call(&["EXEC"]),
        arr(vec![
            Val::Agg(b'*', None),
            Val::Blob(b'$', None),
            Val::Line(b':', "1".into()),
            popped(&k, "a"),
            Val::Agg(b'*', None),
        ])
    );
    // A waiter sees the transaction whole: served after it, with its state.
    let mut w = wire(&s);
    send(&mut w, &["BLPOP", &k, "0"]);
    wait_blocked(&mut c, 1);
    c.call(&["MULTI"]);
    for cmd in [
        vec!["RPUSH", &k, "x"],
        vec!["RPUSH", &other, "o"],
        vec!["RPUSH", &k, "y"],
    ] {
        c.call(&cmd);
    }
    c.call(&["EXEC"]);
    assert_eq!(w.read(), popped(&k, "x"));
    assert_eq!(c.call(&["LRANGE", &k, "0", "-1"]), arr(vec![bulk("y")]));
    // A key pushed and deleted in one transaction wakes no one.
    c.call(&["DEL", &k]);
    send(&mut w, &["BLPOP", &k, "0"]);
    wait_blocked(&mut c, 1);
    c.call(&["MULTI"]);
    c.call(&["LPUSH", &k, "gone"]);
    c.call(&["DEL", &k]);
    c.call(&["EXEC"]);
    assert_eq!(blocked_clients(&mut c), 1);
    c.call(&["RPUSH", &k, "z"]);
    assert_eq!(w.read(), popped(&k, "z"));
}

/// Every blocking command, served at once, served after blocking (woken by a push of
/// another connection) and timed out, in RESP2 and RESP3: the replies as sent. (Scores
/// are exact in binary: weft-kv writes RESP3 doubles as Redis 7.2 does, the shortest
/// decimal, where 7.0 writes 17 digits.)
fn every_blocking_command(s: &KvServer) -> Vec<Val> {
    let mut out = Vec::new();
    for proto in ["2", "3"] {
        let (mut c, mut w) = (wire(s), wire(s));
        c.call(&["HELLO", proto]);
        w.call(&["HELLO", proto]);
        let cases: [(&[&str], &[&str]); 8] = [
            (&["BLPOP", "l", "l2", "0"], &["RPUSH", "l", "a", "b"]),
            (&["BRPOP", "l", "0"], &["RPUSH", "l", "a", "b"]),
            (
                &["BLMPOP", "0", "2", "l2", "l", "RIGHT", "COUNT", "3"],
                &["RPUSH", "l", "a", "b"],
            ),
            (
                &["BLMOVE", "l", "d", "RIGHT", "LEFT", "0"],
                &["RPUSH", "l", "a", "b"],
            ),
            (&["BRPOPLPUSH", "l", "d", "0"], &["LPUSH", "l", "c"]),
            (
                &["BZPOPMIN", "z", "0"],
                &["ZADD", "z", "1.5", "m", "-2", "n"],
            ),
            (&["BZPOPMAX", "z2", "z", "0"], &["ZADD", "z", "3", "o"]),
            (
                &["BZMPOP", "0", "1", "z", "MIN", "COUNT", "5"],
                &["ZADD", "z", "0.25", "p"],
            ),
        ];
        for (cmd, push) in cases {
            c.call(&["DEL", "l", "l2", "d", "z", "z2"]);
            // Served at once.
            out.push(c.call(push));
            out.push(c.call(cmd));
            // Served after blocking.
            c.call(&["DEL", "l", "l2", "z", "z2"]);
            send(&mut w, cmd);
            wait_blocked(&mut c, 1);
            out.push(c.call(push));
            out.push(w.read());
            // Timed out.
            c.call(&["DEL", "l", "l2", "z", "z2"]);
            let mut short: Vec<&str> = cmd.to_vec();
            let at = if matches!(cmd[0], "BLMPOP" | "BZMPOP") {
                1
            } else {
                cmd.len() - 1
            };
            short[at] = "0.01";
            out.push(c.call(&short));
        }
    }
    out
}

#[test]
fn replies_are_redis_servers() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("r")).unwrap();
    let Some(redis) = KvServer::redis(&tmp.path().join("r"), &tmp.path().join("r.sock"), false)
    else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let weft = server();
    let mut want = every_blocking_command(&redis);
    let mut got = every_blocking_command(&weft);
    // COMMAND INFO: the flags of each that weft-kv's table has (write, denyoom,
    // blocking, fast; not Redis's noscript and movablekeys).
    for name in [
        "blpop",
        "brpop",
        "brpoplpush",
        "blmove",
        "blmpop",
        "bzpopmin",
        "bzpopmax",
        "bzmpop",
    ] {
        for (s, out) in [(&redis, &mut want), (&*weft, &mut got)] {
            let info = wire(s).call(&["COMMAND", "INFO", name]);
            let flags = info.items()[0].items()[2].items();
            let known = ["write", "denyoom", "blocking", "fast"];
            let kept = flags
                .iter()
                .filter(|f| known.contains(&&*f.text()))
                .cloned();
            out.push(arr(kept.collect()));
        }
    }
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(show(g), show(w), "reply {i}");
    }
    assert_eq!(got.len(), want.len());
}

#[test]
fn keys_made_by_rename_copy_restore_move_and_store_commands_wake_their_waiters() {
    let s = server();
    let mut c = wire(&s);
    let mut w = wire(&s);
    let (here, there) = (key_on("made", 0), key_on("made", 1));
    // Each way of making a list or sorted set under the waited key, from a key of
    // the same shard and of the other.
    for from in [key_on("from", 0), key_on("from", 1)] {
        let lists: [&[&str]; 4] = [
            &["RENAME", &from, &here],
            &["COPY", &from, &here],
            &["RESTORE", &here, "0", "<dump>"],
            &["LMOVE", &from, &here, "LEFT", "LEFT"],
        ];
        for make in lists {
            c.call(&["DEL", &from, &here]);
            c.call(&["RPUSH", &from, "v"]);
            let dump = c.call(&["DUMP", &from]);
            send(&mut w, &["BLPOP", &here, "0"]);
            wait_blocked(&mut c, 1);
            let mut args: Vec<Vec<u8>> = make.iter().map(|a| a.as_bytes().to_vec()).collect();
            if make[0] == "RESTORE" {
                let Val::Blob(_, Some(payload)) = &dump else {
                    panic!("DUMP: {}", show(&dump))
                };
                args[3] = payload.clone();
            }
            c.send(&args);
            let r = c.read();
            assert!(r.kind() != b'-', "{make:?}: {}", show(&r));
            assert_eq!(w.read(), popped(&here, "v"), "{make:?}");
        }
        // A sorted set made by a STORE command.
        c.call(&["DEL", &from, &here]);
        c.call(&["ZADD", &from, "2", "m"]);
        send(&mut w, &["BZPOPMIN", &here, "0"]);
        wait_blocked(&mut c, 1);
        assert_eq!(c.call(&["ZUNIONSTORE", &here, "1", &from]).int(), Some(1));
        assert_eq!(w.read(), arr(vec![bulk(&here), bulk("m"), bulk("2")]));
    }
    // MOVE from another database into the waited one.
    c.call(&["DEL", &there]);
    c.call(&["SELECT", "1"]);
    c.call(&["RPUSH", &there, "moved"]);
    send(&mut w, &["BLPOP", &there, "0"]);
    wait_blocked(&mut c, 1);
    assert_eq!(c.call(&["MOVE", &there, "0"]).int(), Some(1));
    assert_eq!(w.read(), popped(&there, "moved"));
}

#[test]
fn a_client_gone_while_blocked_takes_nothing() {
    let s = server();
    let mut c = wire(&s);
    for key in [key_on("gone", 0), key_on("gone", 1)] {
        let mut w = wire(&s);
        send(&mut w, &["BLPOP", &key, "0"]);
        wait_blocked(&mut c, 1);
        drop(w);
        wait_blocked(&mut c, 0);
        c.call(&["RPUSH", &key, "kept"]);
        assert_eq!(
            c.call(&["LRANGE", &key, "0", "-1"]),
            arr(vec![bulk("kept")])
        );
    }
    // CLIENT KILL of a blocked client, too.
    let mut w = wire(&s);
    let id = w.call(&["CLIENT", "ID"]).int().unwrap().to_string();
    send(&mut w, &["BLPOP", "killed", "0"]);
    wait_blocked(&mut c, 1);
    assert_eq!(c.call(&["CLIENT", "KILL", "ID", &id]).int(), Some(1));
    wait_blocked(&mut c, 0);
}

/// Pushers push numbered elements to a source list on one shard while blockers
/// BLMOVE them to a destination on the other shard (and BLPOP from it) with short
/// timeouts: at the end every element is in exactly one place (the source, the
/// destination, or a BLPOP's reply), and every BLMOVE reply is in the destination or
/// was popped from it.
#[test]
fn blmove_across_shards_loses_and_duplicates_nothing() {
    let stress = std::env::var_os("WEFT_KV_STRESS").is_some();
    let (npush, nmove, per) = if stress { (4, 6, 5000) } else { (2, 3, 300) };
    let mut s = server();
    let (src, dst) = (key_on("src", 0), key_on("dst", 1));
    let done = Arc::new(AtomicBool::new(false));
    let movers: Vec<_> = (0..nmove)
        .map(|m| {
            let mut w = wire(&s);
            let (src, dst, done) = (src.clone(), dst.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut moved, mut taken) = (Vec::new(), Vec::new());
                // Until the pushers are done and nothing came for a few timeouts.
                let mut idle = 0;
                while !done.load(SeqCst) || idle < 4 {
                    let r = if m % 3 == 2 {
                        // Some take from the destination instead.
                        let r = w.call(&["BLPOP", &dst, "0.05"]);
                        if let [_, e] = r.items() {
                            taken.push(e.text());
                        }
                        r
                    } else {
                        let r = w.call(&["BLMOVE", &src, &dst, "LEFT", "RIGHT", "0.05"]);
                        if let Val::Blob(_, Some(e)) = &r {
                            moved.push(String::from_utf8(e.clone()).unwrap());
                        }
                        r
                    };
                    idle = if r == Val::Agg(b'*', None) {
                        idle + 1
                    } else {
                        0
                    };
                }
                (moved, taken)
            })
        })
        .collect();
    let pushers: Vec<_> = (0..npush)
        .map(|p| {
            let mut w = wire(&s);
            let src = src.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    let e = format!("p{p}:{i}");
                    assert!(w.call(&["RPUSH", &src, &e]).int().is_some());
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    done.store(true, SeqCst);
    let (mut moved, mut taken) = (Vec::new(), Vec::new());
    for m in movers {
        let (a, b) = m.join().unwrap();
        moved.extend(a);
        taken.extend(b);
    }
    let mut c = wire(&s);
    let list = |c: &mut Wire, k: &str| -> Vec<String> {
        c.call(&["LRANGE", k, "0", "-1"])
            .items()
            .iter()
            .map(Val::text)
            .collect()
    };
    let (in_src, in_dst) = (list(&mut c, &src), list(&mut c, &dst));
    let mut seen: HashMap<String, usize> = HashMap::new();
    for e in in_src.iter().chain(&in_dst).chain(&taken) {
        *seen.entry(e.clone()).or_default() += 1;
    }
    assert_eq!(seen.len(), npush * per, "every element is somewhere");
    assert!(
        seen.values().all(|&n| n == 1),
        "no element is in two places"
    );
    // What the movers were told they moved is what reached the destination.
    let mut arrived: Vec<&String> = in_dst.iter().chain(&taken).collect();
    let mut told: Vec<&String> = moved.iter().collect();
    arrived.sort();
    told.sort();
    assert_eq!(arrived, told);
    // Each pusher's elements arrived in the order it pushed them.
    let pos: HashMap<&String, usize> = in_dst.iter().enumerate().map(|(i, e)| (e, i)).collect();
    for p in 0..npush {
        let mine: Vec<usize> = (0..per)
            .filter_map(|i| pos.get(&format!("p{p}:{i}")).copied())
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "pusher {p}'s order");
    }
    // After a restart the lists are as they were: the served moves were logged.
    send(&mut c, &["SHUTDOWN"]);
    s.wait_exit();
    let again = KvServer::weft(&s.dir, &s.socket, &["--workers", "2"]).unwrap();
    let mut c = Wire::connect(&again.socket);
    assert_eq!(list(&mut c, &src), in_src);
    assert_eq!(list(&mut c, &dst), in_dst);
}
