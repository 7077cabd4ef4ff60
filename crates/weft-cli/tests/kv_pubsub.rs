//! Pub/sub and keyspace notifications, tried against the built `weft kv serve` with two
//! workers (connections are spread over them round-robin, so subscribers and
//! publishers sit on both):
//!
//! - PUBLISH reaches every channel and pattern subscriber on either worker, counts
//!   them, and sends Redis's message shapes (RESP2 arrays, RESP3 pushes);
//! - RESP2's subscribed mode: only the subscription commands, PING (`["pong", ...]`),
//!   QUIT and RESET; UNSUBSCRIBE with no argument; RESET leaves the mode;
//! - RESP3: normal commands beside pushes;
//! - PUBSUB CHANNELS, NUMSUB, NUMPAT; SSUBSCRIBE and SPUBLISH;
//! - a subscriber that never reads is disconnected past the output limit
//!   (`client-output-buffer-limit pubsub`), and the server's client memory stays
//!   bounded;
//! - keyspace notifications (`notify-keyspace-events`, and `--notify-keyspace-events`):
//!   the keyspace and keyevent messages of string, key, hash, list and expiry events,
//!   in Redis's order, and none when they are off.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::KvServer;
use resp::{bulk, int, show, Val, Wire, EVENTUALLY};
use std::io::Read;
use std::time::{Duration, Instant};

fn server(dir: &std::path::Path, extra: &[&str]) -> KvServer {
    let mut args = vec!["--workers", "2"];
    args.extend_from_slice(extra);
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &args).expect("weft kv serve starts")
}

/// A message as RESP2 sends it (`*`) or RESP3 (`>`): bulks, then an integer if given.
fn msg(kind: u8, parts: &[&str], count: Option<i64>) -> Val {
    let mut v: Vec<Val> = parts.iter().map(|p| bulk(p)).collect();
    v.extend(count.map(int));
    Val::Agg(kind, Some(v))
}

#[test]
fn publish_reaches_channel_and_pattern_subscribers_on_both_workers() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    // Four channel subscribers and two pattern subscribers: with connections given out
    // round-robin, three of them on each worker.
    let mut subs: Vec<Wire> = (0..6).map(|_| Wire::connect(&s.socket)).collect();
    for (i, w) in subs.iter_mut().enumerate() {
        if i < 4 {
            assert_eq!(
                w.call(&["SUBSCRIBE", "news"]),
                msg(b'*', &["subscribe", "news"], Some(1))
            );
        } else {
            assert_eq!(
                w.call(&["PSUBSCRIBE", "n*"]),
                msg(b'*', &["psubscribe", "n*"], Some(1))
            );
        }
    }
    let mut p = Wire::connect(&s.socket);
    let mut p2 = Wire::connect(&s.socket);
    assert_eq!(p.call(&["PUBLISH", "news", "hello"]), int(6));
    assert_eq!(p2.call(&["PUBLISH", "nothing-here", "x"]), int(2));
    assert_eq!(p2.call(&["PUBLISH", "other", "x"]), int(0));
    for (i, w) in subs.iter_mut().enumerate() {
        if i < 4 {
            assert_eq!(w.read(), msg(b'*', &["message", "news", "hello"], None));
        } else {
            assert_eq!(
                w.read(),
                msg(b'*', &["pmessage", "n*", "news", "hello"], None)
            );
            assert_eq!(
                w.read(),
                msg(b'*', &["pmessage", "n*", "nothing-here", "x"], None)
            );
        }
    }
    // PUBSUB's view of it.
    assert_eq!(
        p.call(&["PUBSUB", "CHANNELS"]),
        Val::Agg(b'*', Some(vec![bulk("news")]))
    );
    assert_eq!(
        p.call(&["PUBSUB", "CHANNELS", "x*"]),
        Val::Agg(b'*', Some(vec![]))
    );
    assert_eq!(
        p.call(&["PUBSUB", "NUMSUB", "news", "none"]),
        Val::Agg(b'*', Some(vec![bulk("news"), int(4), bulk("none"), int(0)]))
    );
    assert_eq!(p.call(&["PUBSUB", "NUMPAT"]), int(1));
    assert_eq!(p.info_field("stats", "pubsub_channels"), 1);
    assert_eq!(p.info_field("stats", "pubsub_patterns"), 1);
    let list = p.call(&["CLIENT", "LIST"]).text();
    assert_eq!(list.matches(" sub=1 psub=0 ").count(), 4, "{list}");
    assert_eq!(list.matches(" sub=0 psub=1 ").count(), 2, "{list}");
    // Subscribed connections are of type pubsub (flag P), the others normal.
    let pubsub = p.call(&["CLIENT", "LIST", "TYPE", "pubsub"]).text();
    assert_eq!(pubsub.lines().count(), 6, "{pubsub}");
    assert!(pubsub.lines().all(|l| l.contains(" flags=P")), "{pubsub}");
    // p and p2; a connection closed just before (the start-up check's) may still be
    // listed until its worker reads the end of its stream, so "eventually".
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let normal = p.call(&["CLIENT", "LIST", "TYPE", "normal"]).text();
        if normal.lines().count() == 2 {
            break;
        }
        assert!(
            normal.lines().count() > 2 && Instant::now() < deadline,
            "{normal}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A subscriber that leaves is no longer counted; one that closes neither.
    assert_eq!(
        subs[0].call(&["UNSUBSCRIBE", "news"]),
        msg(b'*', &["unsubscribe", "news"], Some(0))
    );
    drop(subs.pop());
    let deadline = Instant::now() + EVENTUALLY;
    while p.call(&["PUBSUB", "NUMPAT"]) != int(1) || p.call(&["PUBLISH", "news", "again"]) != int(4)
    {
        assert!(
            Instant::now() < deadline,
            "the closed subscriber is still counted"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn resp2_subscribed_mode_allows_only_subscriptions_ping_quit_reset() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let mut w = Wire::connect(&s.socket);
    w.send(&[
        b"SUBSCRIBE".to_vec(),
        b"a".to_vec(),
        b"b".to_vec(),
        b"a".to_vec(),
    ]);
    assert_eq!(w.read(), msg(b'*', &["subscribe", "a"], Some(1)));
    assert_eq!(w.read(), msg(b'*', &["subscribe", "b"], Some(2)));
    assert_eq!(w.read(), msg(b'*', &["subscribe", "a"], Some(2)));
    assert_eq!(
        w.call(&["PSUBSCRIBE", "c*"]),
        msg(b'*', &["psubscribe", "c*"], Some(3))
    );
    assert_eq!(
        w.call(&["GET", "k"]),
        Val::Line(
            b'-',
            "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context"
                .into()
        )
    );
    assert_eq!(
        w.call(&["CLIENT", "ID"]).text(),
        "ERR Can't execute 'client|id': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / \
         QUIT / RESET are allowed in this context"
    );
    assert_eq!(w.call(&["PING"]), msg(b'*', &["pong", ""], None));
    assert_eq!(w.call(&["PING", "hi"]), msg(b'*', &["pong", "hi"], None));
    // UNSUBSCRIBE with no argument leaves every channel (in some order), not patterns.
    w.send(&[b"UNSUBSCRIBE".to_vec()]);
    let left = [w.read(), w.read()];
    let mut names: Vec<String> = left.iter().map(|m| m.items()[1].text()).collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    for (m, count) in left.iter().zip([2, 1]) {
        assert_eq!(m.items()[0], bulk("unsubscribe"), "{}", show(m));
        assert_eq!(m.items()[2], int(count), "{}", show(m));
    }
    // Still subscribed to a pattern: still in subscribed mode.
    assert_eq!(w.call(&["PING"]), msg(b'*', &["pong", ""], None));
    assert_eq!(
        w.call(&["PUNSUBSCRIBE"]),
        msg(b'*', &["punsubscribe", "c*"], Some(0))
    );
    assert_eq!(w.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    // With nothing to leave, one confirmation with a nil name.
    assert_eq!(
        w.call(&["UNSUBSCRIBE"]),
        Val::Agg(
            b'*',
            Some(vec![bulk("unsubscribe"), Val::Blob(b'$', None), int(0)])
        )
    );
    assert_eq!(
        w.call(&["UNSUBSCRIBE", "x", "y"]),
        msg(b'*', &["unsubscribe", "x"], Some(0))
    );
    assert_eq!(w.read(), msg(b'*', &["unsubscribe", "y"], Some(0)));
    // RESET leaves subscribed mode, and the channel.
    assert_eq!(
        w.call(&["SUBSCRIBE", "z"]),
        msg(b'*', &["subscribe", "z"], Some(1))
    );
    assert_eq!(w.call(&["RESET"]), Val::Line(b'+', "RESET".into()));
    assert_eq!(w.call(&["SET", "k", "v"]), Val::Line(b'+', "OK".into()));
    let mut p = Wire::connect(&s.socket);
    assert_eq!(p.call(&["PUBLISH", "z", "m"]), int(0));
}

#[test]
fn resp3_pushes_beside_normal_commands_and_shard_channels() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let mut w = Wire::connect(&s.socket);
    assert_eq!(w.call(&["HELLO", "3"]).kind(), b'%');
    assert_eq!(
        w.call(&["SUBSCRIBE", "c"]),
        msg(b'>', &["subscribe", "c"], Some(1))
    );
    // Any command may run in RESP3.
    assert_eq!(w.call(&["SET", "k", "v"]), Val::Line(b'+', "OK".into()));
    assert_eq!(w.call(&["GET", "k"]), bulk("v"));
    assert_eq!(w.call(&["PING"]), Val::Line(b'+', "PONG".into()));
    let mut p = Wire::connect(&s.socket);
    assert_eq!(p.call(&["PUBLISH", "c", "m"]), int(1));
    assert_eq!(w.read(), msg(b'>', &["message", "c", "m"], None));
    // Its own message comes before the reply to its PUBLISH.
    assert_eq!(
        w.call(&["PUBLISH", "c", "self"]),
        msg(b'>', &["message", "c", "self"], None)
    );
    assert_eq!(w.read(), int(1));
    // Shard channels are a name space of their own.
    assert_eq!(
        w.call(&["SSUBSCRIBE", "c"]),
        msg(b'>', &["ssubscribe", "c"], Some(1))
    );
    assert_eq!(p.call(&["SPUBLISH", "c", "s"]), int(1));
    assert_eq!(w.read(), msg(b'>', &["smessage", "c", "s"], None));
    assert_eq!(
        p.call(&["PUBSUB", "SHARDNUMSUB", "c"]),
        Val::Agg(b'*', Some(vec![bulk("c"), int(1)]))
    );
    assert_eq!(
        p.call(&["PUBSUB", "SHARDCHANNELS"]),
        Val::Agg(b'*', Some(vec![bulk("c")]))
    );
    assert_eq!(p.call(&["PUBLISH", "c", "n"]), int(1));
    assert_eq!(w.read(), msg(b'>', &["message", "c", "n"], None));
    // Confirmations are sent under CLIENT REPLY OFF too; replies are not.
    w.send(&[b"CLIENT".to_vec(), b"REPLY".to_vec(), b"OFF".to_vec()]);
    w.send(&[b"GET".to_vec(), b"k".to_vec()]);
    assert_eq!(
        w.call(&["UNSUBSCRIBE", "c"]),
        msg(b'>', &["unsubscribe", "c"], Some(0))
    );
    assert_eq!(
        w.call(&["SUNSUBSCRIBE"]),
        msg(b'>', &["sunsubscribe", "c"], Some(0))
    );
}

#[test]
fn a_subscriber_that_never_reads_is_disconnected_past_its_output_limit() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let mut p = Wire::connect(&s.socket);
    assert_eq!(
        p.call(&["CONFIG", "GET", "client-output-buffer-limit"]),
        Val::Agg(
            b'*',
            Some(vec![
                bulk("client-output-buffer-limit"),
                bulk("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
            ])
        )
    );
    assert_eq!(
        p.call(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "pubsub 1mb 256kb 60"
        ]),
        Val::Line(b'+', "OK".into())
    );
    assert!(p
        .call(&["CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb"])
        .text()
        .starts_with("ERR CONFIG SET failed"));
    let mut slow = Wire::connect(&s.socket);
    assert_eq!(
        slow.call(&["SUBSCRIBE", "flood"]),
        msg(b'*', &["subscribe", "flood"], Some(1))
    );
    // 64 MiB published in 64 KiB messages, 64 times the limit; the subscriber reads
    // nothing meanwhile.
    let payload = "x".repeat(64 << 10);
    let mut max_memory = 0;
    for _ in 0..1024 {
        p.send(&[
            b"PUBLISH".to_vec(),
            b"flood".to_vec(),
            payload.clone().into_bytes(),
        ]);
        let n = p.read().int().expect("PUBLISH answers a count");
        assert!(n <= 1);
        max_memory = max_memory.max(p.info_field("memory", "mem_clients_normal"));
    }
    // Disconnected, as Redis does: counted, gone from the channel and the client list.
    assert_eq!(
        p.info_field("stats", "client_output_buffer_limit_disconnections"),
        1
    );
    // What the server held for it never passed the limit plus one message by much
    // (plus the publisher's own buffers).
    assert!(
        max_memory < 4 << 20,
        "client memory reached {max_memory} bytes"
    );
    // The subscriber finds its connection closed after what the socket held.
    let deadline = Instant::now() + EVENTUALLY;
    let mut sink = vec![0; 1 << 20];
    let mut total = 0usize;
    loop {
        match slow.r.read(&mut sink) {
            Ok(0) => break,
            Ok(n) => total += n,
            Err(e) => panic!("the subscriber's connection was not closed: {e}"),
        }
        assert!(Instant::now() < deadline);
    }
    assert!(total < 64 << 20, "all {total} bytes were delivered");
    let deadline = Instant::now() + EVENTUALLY;
    // (Once its connection has seen the shutdown: a publisher meanwhile still counts
    // it, its messages dropped.)
    while p.call(&["PUBLISH", "flood", "late"]) != int(0)
        || p.call(&["CLIENT", "LIST"]).text().lines().count() != 1
    {
        assert!(Instant::now() < deadline, "the subscriber is still listed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = p.info_field("memory", "mem_clients_normal");
    assert!(
        left < 1 << 20,
        "client memory {left} bytes once the subscriber is gone"
    );
}

/// Reads the next message of a pattern subscriber: (channel, payload).
fn pmessage(w: &mut Wire) -> (String, String) {
    let m = w.read();
    let items = m.items();
    assert_eq!(items.len(), 4, "not a pmessage: {}", show(&m));
    assert_eq!(items[0].text(), "pmessage");
    (items[2].text(), items[3].text())
}

fn pair(channel: &str, payload: &str) -> (String, String) {
    (channel.to_string(), payload.to_string())
}

#[test]
fn keyspace_notifications_follow_the_events_and_classes_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &["--notify-keyspace-events", "KEA"]);
    let mut c = Wire::connect(&s.socket);
    assert_eq!(
        c.call(&["CONFIG", "GET", "notify-keyspace-events"]),
        Val::Agg(
            b'*',
            Some(vec![bulk("notify-keyspace-events"), bulk("AKE")])
        )
    );
    let mut sub = Wire::connect(&s.socket);
    assert_eq!(
        sub.call(&["PSUBSCRIBE", "__key*__:*"]),
        msg(b'*', &["psubscribe", "__key*__:*"], Some(1))
    );
    c.call(&["SET", "foo", "bar"]);
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:foo", "set"));
    assert_eq!(pmessage(&mut sub), pair("__keyevent@0__:set", "foo"));
    c.call(&["SET", "foo", "bar", "EX", "100"]);
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:foo", "set"));
    assert_eq!(pmessage(&mut sub), pair("__keyevent@0__:set", "foo"));
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:foo", "expire"));
    assert_eq!(pmessage(&mut sub), pair("__keyevent@0__:expire", "foo"));
    // Only keyspace channels from here, and generic, string, hash and expired events.
    assert_eq!(
        c.call(&["CONFIG", "SET", "notify-keyspace-events", "Kg$hx"]),
        Val::Line(b'+', "OK".into())
    );
    assert_eq!(
        c.call(&["CONFIG", "GET", "notify-keyspace-events"]).items()[1],
        bulk("g$hxK")
    );
    c.call(&["INCRBY", "n", "5"]);
    c.call(&["APPEND", "n", "0"]);
    c.call(&["HSET", "h", "f", "1", "g", "2"]);
    c.call(&["HINCRBY", "h", "f", "1"]);
    c.call(&["HDEL", "h", "f", "g"]);
    c.call(&["SET", "m", "v"]);
    c.call(&["MOVE", "m", "5"]);
    c.call(&["PERSIST", "foo"]);
    c.call(&["DEL", "foo", "n", "missing"]);
    c.call(&["SELECT", "3"]);
    c.call(&["SET", "k3", "v"]);
    c.call(&["SELECT", "0"]);
    for (ch, ev) in [
        ("__keyspace@0__:n", "incrby"),
        ("__keyspace@0__:n", "append"),
        ("__keyspace@0__:h", "hset"),
        ("__keyspace@0__:h", "hincrby"),
        ("__keyspace@0__:h", "hdel"),
        ("__keyspace@0__:h", "del"),
        ("__keyspace@0__:m", "set"),
        ("__keyspace@0__:m", "move_from"),
        ("__keyspace@5__:m", "move_to"),
        ("__keyspace@0__:foo", "persist"),
        ("__keyspace@0__:foo", "del"),
        ("__keyspace@0__:n", "del"),
        ("__keyspace@3__:k3", "set"),
    ] {
        assert_eq!(pmessage(&mut sub), pair(ch, ev));
    }
    // A key whose time passes: `expired`, found by the active cycle or a read.
    c.call(&["SET", "short", "v", "PX", "1"]);
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:short", "set"));
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:short", "expire"));
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:short", "expired"));
    // New keys (n) only when asked for; an overwrite is not new.
    c.call(&["CONFIG", "SET", "notify-keyspace-events", "En"]);
    c.call(&["SET", "a", "1"]);
    c.call(&["SET", "a", "2"]);
    c.call(&["HSET", "b", "f", "v"]);
    assert_eq!(pmessage(&mut sub), pair("__keyevent@0__:new", "a"));
    assert_eq!(pmessage(&mut sub), pair("__keyevent@0__:new", "b"));
    // Off: nothing is published (the next message is one published after).
    c.call(&["CONFIG", "SET", "notify-keyspace-events", ""]);
    c.call(&["SET", "quiet", "1"]);
    c.call(&["DEL", "quiet"]);
    assert_eq!(c.call(&["PUBLISH", "__keyspace@0__:marker", "m"]), int(1));
    assert_eq!(pmessage(&mut sub), pair("__keyspace@0__:marker", "m"));
    assert!(c
        .call(&["CONFIG", "SET", "notify-keyspace-events", "KQ"])
        .text()
        .contains("Invalid event class character"));
}

/// Messages from publishers on both workers reach subscribers on both workers, every
/// one, each publisher's in the order it published them, while subscriptions come and
/// go beside them. 200 messages per publisher; `WEFT_KV_STRESS=1`: 20,000.
#[test]
fn every_message_arrives_once_in_each_publishers_order() {
    let per = if std::env::var_os("WEFT_KV_STRESS").is_some() {
        20_000
    } else {
        200
    };
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &[]);
    let mut subs: Vec<Wire> = (0..4).map(|_| Wire::connect(&s.socket)).collect();
    for (i, w) in subs.iter_mut().enumerate() {
        // Two by channel, two by pattern.
        let (cmd, name) = if i % 2 == 0 {
            ("SUBSCRIBE", "load")
        } else {
            ("PSUBSCRIBE", "lo*")
        };
        assert_eq!(w.call(&[cmd, name]).items()[2], int(1));
    }
    let socket = s.socket.clone();
    let publishers: Vec<_> = (0..2)
        .map(|p| {
            let socket = socket.clone();
            std::thread::spawn(move || {
                let mut w = Wire::connect(&socket);
                let mut churn = Wire::connect(&socket);
                for n in 0..per {
                    // Pipelined: every reply is read at the end.
                    let m = format!("{p}:{n}");
                    w.send(&[b"PUBLISH".to_vec(), b"load".to_vec(), m.into_bytes()]);
                    if n % 50 == 0 {
                        // A subscriber of another channel comes and goes meanwhile.
                        churn.call(&["SUBSCRIBE", "other"]);
                        churn.call(&["UNSUBSCRIBE", "other"]);
                    }
                }
                for _ in 0..per {
                    assert_eq!(w.read(), int(4));
                }
            })
        })
        .collect();
    for w in subs.iter_mut() {
        let mut next = [0usize; 2];
        for _ in 0..2 * per {
            let m = w.read();
            let payload = m.items().last().expect("a message").text();
            let (p, n) = payload.split_once(':').unwrap();
            let (p, n): (usize, usize) = (p.parse().unwrap(), n.parse().unwrap());
            assert_eq!(n, next[p], "publisher {p}'s messages out of order or lost");
            next[p] += 1;
        }
        assert_eq!(next, [per, per]);
    }
    for p in publishers {
        p.join().unwrap();
    }
}

/// The list commands' keyspace events, in Redis 7.0's order: `new` for a list made,
/// then the command's own event; `del` after the event of a command that empties a
/// list; nothing for a command that changes nothing; RPOPLPUSH and LMOVE fire the
/// destination's push before the source's pop (the keys here may be on two shards).
#[test]
fn list_commands_fire_their_keyspace_events() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), &["--notify-keyspace-events", "KAn"]);
    let mut c = Wire::connect(&s.socket);
    let mut sub = Wire::connect(&s.socket);
    assert_eq!(
        sub.call(&["PSUBSCRIBE", "__keyspace@0__:*"]),
        msg(b'*', &["psubscribe", "__keyspace@0__:*"], Some(1))
    );
    for cmd in [
        &["RPUSH", "l", "a", "b", "c"][..],
        &["LPUSH", "l", "z"],
        &["LINSERT", "l", "BEFORE", "b", "x"],
        &["LINSERT", "l", "BEFORE", "nothing", "x"],
        &["LSET", "l", "0", "y"],
        &["LREM", "l", "0", "x"],
        &["LREM", "l", "0", "nothing"],
        &["LTRIM", "l", "0", "-1"],
        &["RPOPLPUSH", "l", "m"],
        &["LMOVE", "m", "m", "LEFT", "RIGHT"],
        &["LPOP", "m"],
        &["LPOP", "nothing"],
        &["LTRIM", "l", "5", "1"],
    ] {
        c.call(cmd);
    }
    for (key, event) in [
        ("l", "new"),
        ("l", "rpush"),
        ("l", "lpush"),
        ("l", "linsert"),
        ("l", "lset"),
        ("l", "lrem"),
        ("l", "ltrim"),
        ("m", "new"),
        ("m", "lpush"),
        ("l", "rpop"),
        ("m", "rpush"),
        ("m", "lpop"),
        ("m", "lpop"),
        ("m", "del"),
        ("l", "ltrim"),
        ("l", "del"),
    ] {
        let ch = format!("__keyspace@0__:{key}");
        assert_eq!(pmessage(&mut sub), pair(&ch, event));
    }
}
