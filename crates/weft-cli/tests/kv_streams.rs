//! Streams against a running `weft kv serve` (the built binary, two workers): XREAD
//! and XREADGROUP with BLOCK, as clients see them: readers of keys on both shards woken
//! by an XADD from another connection (every XREAD reader gets the entry; of a group's
//! consumers, the first blocked), the RESP2 and RESP3 shapes of the reply, a timeout's
//! null array, BLOCK inside MULTI answering at once, XREAD over keys of both shards, a
//! group's pending entries after a restart, and the stream commands' keyspace events.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::{crc32c, KvServer, TempKv, CEILING};
use resp::{Val, Wire};
use std::time::{Duration, Instant};

/// A key named after `base` on shard `s` of 2.
fn key_on(base: &str, s: usize) -> String {
    (0..)
        .map(|i| format!("{base}:{i}"))
        .find(|k| crc32c(k.as_bytes()) % 2 == s as u32)
        .unwrap()
}

fn bulk(s: &str) -> Val {
    Val::Blob(b'$', Some(s.as_bytes().to_vec()))
}

fn arr(v: Vec<Val>) -> Val {
    Val::Agg(b'*', Some(v))
}

/// An entry: `[id, [field, value]]`.
fn entry(id: &str, f: &str, v: &str) -> Val {
    arr(vec![bulk(id), arr(vec![bulk(f), bulk(v)])])
}

fn send(w: &mut Wire, args: &[&str]) {
    let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    w.send(&args);
}

/// Waits (up to the ceiling) until INFO shows `n` blocked clients.
fn wait_blocked(c: &mut Wire, n: i64) {
    let deadline = Instant::now() + CEILING;
    while c.info_field("clients", "blocked_clients") != n {
        assert!(Instant::now() < deadline, "never {n} blocked clients");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn blocked_readers_are_woken_by_xadd() {
    let s = TempKv::start(0, &["--workers", "2"]);
    let mut c = Wire::connect(&s.socket);
    let (a, b) = (key_on("sa", 0), key_on("sb", 1));
    assert_eq!(c.call(&["XADD", &a, "1-1", "old", "x"]), bulk("1-1"));
    // Two XREAD readers of `$` (one in RESP3), one of both keys.
    let mut r1 = Wire::connect(&s.socket);
    let mut r2 = Wire::connect(&s.socket);
    assert_eq!(r2.call(&["HELLO", "3"]).kind(), b'%');
    send(
        &mut r1,
        &["XREAD", "BLOCK", "0", "STREAMS", &a, &b, "$", "$"],
    );
    wait_blocked(&mut c, 1);
    send(
        &mut r2,
        &["XREAD", "COUNT", "5", "BLOCK", "0", "STREAMS", &b, "$"],
    );
    wait_blocked(&mut c, 2);
    // An XADD on the other key wakes both: reading does not consume.
    assert_eq!(c.call(&["XADD", &b, "5-1", "f", "v"]), bulk("5-1"));
    assert_eq!(
        r1.read(),
        arr(vec![arr(vec![bulk(&b), arr(vec![entry("5-1", "f", "v")])])])
    );
    assert_eq!(
        r2.read(),
        Val::Agg(
            b'%',
            Some(vec![bulk(&b), arr(vec![entry("5-1", "f", "v")])])
        )
    );
    assert_eq!(c.info_field("clients", "blocked_clients"), 0);
    // An ID with entries after it answers at once; over keys of both shards.
    assert_eq!(
        c.call(&["XREAD", "BLOCK", "0", "STREAMS", &a, &b, "0", "5-1"]),
        arr(vec![arr(vec![
            bulk(&a),
            arr(vec![entry("1-1", "old", "x")])
        ])])
    );
    // A timeout answers a null array.
    assert_eq!(
        c.call(&["XREAD", "BLOCK", "10", "STREAMS", &a, "$"]),
        Val::Agg(b'*', None)
    );
    // Inside MULTI, BLOCK does not wait.
    c.call(&["MULTI"]);
    c.call(&["XREAD", "BLOCK", "0", "STREAMS", &a, "$"]);
    assert_eq!(c.call(&["EXEC"]), arr(vec![Val::Agg(b'*', None)]));
    // A reader blocked on a key that holds another type is answered WRONGTYPE.
    c.call(&["SET", "str", "x"]);
    assert_eq!(
        c.call(&["XREAD", "BLOCK", "0", "STREAMS", "str", "$"])
            .kind(),
        b'-'
    );
}

#[test]
fn consumers_of_a_group_are_served_first_blocked_first_and_their_pending_entries_survive_a_restart()
{
    let mut s = TempKv::start(0, &["--workers", "2"]);
    let mut c = Wire::connect(&s.socket);
    let key = key_on("jobs", 1);
    c.call(&["XGROUP", "CREATE", &key, "g", "$", "MKSTREAM"]);
    let mut w1 = Wire::connect(&s.socket);
    let mut w2 = Wire::connect(&s.socket);
    send(
        &mut w1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            &key,
            ">",
        ],
    );
    wait_blocked(&mut c, 1);
    send(
        &mut w2,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "BLOCK",
            "0",
            "STREAMS",
            &key,
            ">",
        ],
    );
    wait_blocked(&mut c, 2);
    // Each entry goes to one consumer, the first blocked first.
    c.call(&["XADD", &key, "1-1", "job", "1"]);
    assert_eq!(
        w1.read(),
        arr(vec![arr(vec![
            bulk(&key),
            arr(vec![entry("1-1", "job", "1")])
        ])])
    );
    wait_blocked(&mut c, 1);
    c.call(&["XADD", &key, "2-1", "job", "2"]);
    assert_eq!(
        w2.read(),
        arr(vec![arr(vec![
            bulk(&key),
            arr(vec![entry("2-1", "job", "2")])
        ])])
    );
    let pending = arr(vec![
        Val::Line(b':', "2".into()),
        bulk("1-1"),
        bulk("2-1"),
        arr(vec![
            arr(vec![bulk("alice"), bulk("1")]),
            arr(vec![bulk("bob"), bulk("1")]),
        ]),
    ]);
    assert_eq!(c.call(&["XPENDING", &key, "g"]), pending);
    // A consumer waiting on a key that is removed, or whose group is, gets an error.
    let other = key_on("gone", 0);
    for (drop, error) in [
        (
            vec!["DEL", other.as_str()],
            "UNBLOCKED the stream key no longer exists",
        ),
        (
            vec!["XGROUP", "DESTROY", other.as_str(), "g"],
            "NOGROUP the consumer group this client was blocked on no longer exists",
        ),
    ] {
        assert_eq!(
            c.call(&["XGROUP", "CREATE", &other, "g", "$", "MKSTREAM"]),
            Val::Line(b'+', "OK".into())
        );
        send(
            &mut w1,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                &other,
                ">",
            ],
        );
        wait_blocked(&mut c, 1);
        c.call(&drop);
        assert_eq!(w1.read(), Val::Line(b'-', error.into()));
        wait_blocked(&mut c, 0);
    }
    // After a restart the group, its consumers and pending entries are as they were.
    send(&mut c, &["SHUTDOWN"]);
    s.wait_exit();
    let again = KvServer::weft(&s.dir, &s.socket, &["--workers", "2"]).unwrap();
    let mut c = Wire::connect(&again.socket);
    assert_eq!(c.call(&["XPENDING", &key, "g"]), pending);
    assert_eq!(c.call(&["XLEN", &key]), Val::Line(b':', "2".into()));
}

/// Keyspace events of the stream commands (class `t`, and `n` for a stream made), in
/// the order the commands run, as Redis 7.0 sends them; none for a command that
/// changes nothing.
#[test]
fn stream_commands_publish_their_keyspace_events() {
    let s = TempKv::start(0, &["--workers", "2", "--notify-keyspace-events", "Etn"]);
    let mut c = Wire::connect(&s.socket);
    let mut sub = Wire::connect(&s.socket);
    sub.call(&["PSUBSCRIBE", "__keyevent@0__:*"]);
    let script: [&[&str]; 13] = [
        &["XADD", "s", "1-1", "f", "v"],
        &["XADD", "s", "2-1", "f", "v"],
        &["XADD", "s", "MAXLEN", "1", "3-1", "f", "v"],
        &["XDEL", "s", "9-9"],
        &["XDEL", "s", "3-1"],
        &["XTRIM", "s", "MAXLEN", "5"],
        &["XSETID", "s", "5-0"],
        &["XGROUP", "CREATE", "s", "g", "$"],
        &["XGROUP", "CREATECONSUMER", "s", "g", "c"],
        &["XGROUP", "SETID", "s", "g", "0"],
        &["XGROUP", "DELCONSUMER", "s", "g", "c"],
        &["XGROUP", "DESTROY", "s", "g"],
        &["XGROUP", "CREATE", "t", "g", "$", "MKSTREAM"],
    ];
    for line in script {
        c.call(line);
    }
    let want = [
        "new",
        "xadd",
        "xadd",
        "xadd",
        "xtrim",
        "xdel",
        "xsetid",
        "xgroup-create",
        "xgroup-createconsumer",
        "xgroup-setid",
        "xgroup-delconsumer",
        "xgroup-destroy",
        "new",
        "xgroup-create",
    ];
    for event in want {
        let m = sub.read();
        let items = m.items();
        assert_eq!(items[0].text(), "pmessage");
        assert_eq!(items[2].text(), format!("__keyevent@0__:{event}"));
    }
}

/// Consumers of one group on two streams (one on each shard), blocking with short
/// timeouts while a producer adds entries to both: every entry is delivered to exactly
/// one consumer, and once all are acknowledged nothing is pending.
/// `WEFT_KV_STRESS=1` adds more entries and consumers.
#[test]
fn a_group_delivers_every_entry_once_under_blocked_consumers() {
    let stress = std::env::var("WEFT_KV_STRESS").is_ok_and(|v| v == "1");
    let (entries, consumers) = if stress { (5000u64, 8) } else { (300u64, 3) };
    let s = TempKv::start(0, &["--workers", "2"]);
    let (a, b) = (key_on("qa", 0), key_on("qb", 1));
    let mut c = Wire::connect(&s.socket);
    for k in [&a, &b] {
        c.call(&["XGROUP", "CREATE", k, "g", "$", "MKSTREAM"]);
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..consumers)
        .map(|i| {
            let (sock, a, b, done) = (s.socket.clone(), a.clone(), b.clone(), done.clone());
            std::thread::spawn(move || {
                let mut w = Wire::connect(&sock);
                let name = format!("c{i}");
                let mut got: Vec<String> = Vec::new();
                let deadline = Instant::now() + CEILING;
                loop {
                    let r = w.call(&[
                        "XREADGROUP",
                        "GROUP",
                        "g",
                        &name,
                        "COUNT",
                        "7",
                        "BLOCK",
                        "20",
                        "STREAMS",
                        &a,
                        &b,
                        ">",
                        ">",
                    ]);
                    let mut n = 0;
                    for stream in r.items() {
                        let key = stream.items()[0].text();
                        for e in stream.items()[1].items() {
                            let id = e.items()[0].text();
                            assert_eq!(w.call(&["XACK", &key, "g", &id]).int(), Some(1));
                            got.push(format!("{key}/{id}"));
                            n += 1;
                        }
                    }
                    if n == 0 && done.load(std::sync::atomic::Ordering::SeqCst) {
                        return got;
                    }
                    assert!(Instant::now() < deadline, "consumer {name} never finished");
                }
            })
        })
        .collect();
    for i in 1..=entries {
        let k = if i % 2 == 0 { &a } else { &b };
        c.call(&["XADD", k, &format!("{i}-1"), "n", &i.to_string()]);
    }
    // Every entry is delivered before the consumers may stop: wait until the groups
    // have delivered the last one.
    let deadline = Instant::now() + CEILING;
    loop {
        let pending_or_new = [&a, &b].iter().any(|k| {
            let info = c.call(&["XINFO", "GROUPS", k]);
            let g = info.items()[0].items();
            let lag = g
                .chunks(2)
                .find(|p| p[0].text() == "lag")
                .and_then(|p| p[1].int());
            lag != Some(0)
        });
        if !pending_or_new {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the entries were never all delivered"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut all: Vec<String> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    all.sort();
    let mut want: Vec<String> = (1..=entries)
        .map(|i| format!("{}/{i}-1", if i % 2 == 0 { &a } else { &b }))
        .collect();
    want.sort();
    assert_eq!(all, want, "each entry once");
    for k in [&a, &b] {
        assert_eq!(
            c.call(&["XPENDING", k, "g"]).items()[0].int(),
            Some(0),
            "nothing pending on {k}"
        );
    }
}
