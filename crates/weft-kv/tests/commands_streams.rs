//! The stream commands run through the command table on one keyspace: replies (Redis
//! 7.0's, edge cases and errors included), the records they log (a new stream's whole
//! state, an existing one's change), the state a replay of those records rebuilds, the
//! compaction image, the key commands that move a stream whole, memory, RESP2 and RESP3
//! shapes.

mod common;
use common::*;
use weft_kv::keyspace::stream::{Change, Full, Id};

fn arr(v: Vec<Reply>) -> Reply {
    Reply::Array(v)
}

/// An entry reply: `[id, [field, value, ...]]`.
fn entry(id: &str, fields: &[&str]) -> Reply {
    arr(vec![
        bulk(id),
        arr(fields.iter().map(|f| bulk(f)).collect()),
    ])
}

fn id(ms: u64, seq: u64) -> Id {
    Id { ms, seq }
}

/// The stream change a record is (`None` for other records; kind 70 as `Full`'s body).
fn change(r: &Record) -> Option<(u8, Option<Change>)> {
    match r {
        Record::Stream { kind: 70, .. } => Some((70, None)),
        Record::Stream { kind, body, .. } => Some((*kind, Change::decode(*kind, body))),
        _ => None,
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn xadd_logs_a_whole_stream_then_its_changes() {
    let mut t = T::new();
    assert_eq!(t.run(&["xadd", "s", "1-1", "a", "1"]), bulk("1-1"));
    // A new stream: its whole state.
    let logged = t.logged();
    assert_eq!(logged.len(), 1);
    let Record::Stream {
        kind: 70,
        key,
        body,
    } = &logged[0]
    else {
        panic!("{logged:?}")
    };
    assert_eq!(key, b"s");
    let full = Full::decode(body).unwrap();
    assert_eq!(
        (full.last_id, full.entries_added, full.entries.clone()),
        (id(1, 1), 1, vec![(id(1, 1), items(&["a", "1"]))])
    );
    // An existing one: the entry added, with the last ID and count it sets.
    assert_eq!(
        t.run(&["xadd", "s", "1-*", "b", "2", "c", "3"]),
        bulk("1-2")
    );
    assert_eq!(
        change(&t.logged()[0]),
        Some((
            71,
            Some(Change::Add {
                last_id: id(1, 2),
                entries_added: 2,
                entries: vec![(id(1, 2), items(&["b", "2", "c", "3"]))],
            })
        ))
    );
    // `*` takes the clock, or the last ID's next sequence when the clock is behind.
    assert_eq!(
        t.run(&["xadd", "s", "*", "d", "4"]),
        Reply::Bulk(format!("{NOW}-0").into_bytes())
    );
    t.now -= 5;
    assert_eq!(
        t.run(&["xadd", "s", "*", "d", "4"]),
        Reply::Bulk(format!("{NOW}-1").into_bytes())
    );
    // Errors change nothing and log nothing.
    for (line, e) in [
        (
            vec!["xadd", "s", "1-1", "a", "1"],
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        ),
        (
            vec!["xadd", "s", "0-0", "a", "1"],
            "ERR The ID specified in XADD must be greater than 0-0",
        ),
        (
            vec!["xadd", "s", "x", "a", "1"],
            "ERR Invalid stream ID specified as stream command argument",
        ),
        (
            vec!["xadd", "s", "*", "a"],
            "ERR wrong number of arguments for 'xadd' command",
        ),
        (
            vec!["xadd", "s", "maxlen", "1", "minid", "1", "*", "a", "1"],
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
        (
            vec!["xadd", "s", "maxlen", "1", "limit", "1", "*", "a", "1"],
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ),
    ] {
        assert_eq!(t.run(&line), err(e), "{line:?}");
        assert!(t.logged().is_empty());
    }
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(4));
    assert_eq!(t.run(&["type", "s"]), Reply::Simple("stream".into()));
    assert_eq!(t.run(&["object", "encoding", "s"]), bulk("stream"));
    assert_eq!(t.run(&["set", "str", "x"]), Reply::OK);
    assert_eq!(t.run(&["xadd", "str", "*", "a", "1"]), err(WRONGTYPE));
    assert_eq!(t.run(&["xlen", "str"]), err(WRONGTYPE));
    // NOMKSTREAM on a missing key: nil, nothing made.
    assert_eq!(
        t.run(&["xadd", "no", "nomkstream", "*", "a", "1"]),
        Reply::Nil
    );
    assert_eq!(t.run(&["exists", "no"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn ranges_deletes_and_trims() {
    let mut t = T::new();
    for i in 1..=5 {
        let idt = format!("{i}-0");
        t.run(&["xadd", "s", &idt, "n", &i.to_string()]);
    }
    assert_eq!(
        t.run(&["xrange", "s", "(2-0", "4", "count", "5"]),
        arr(vec![entry("3-0", &["n", "3"]), entry("4-0", &["n", "4"])])
    );
    assert_eq!(
        t.run(&["xrevrange", "s", "+", "-", "count", "2"]),
        arr(vec![entry("5-0", &["n", "5"]), entry("4-0", &["n", "4"])])
    );
    assert_eq!(
        t.run(&["xrange", "s", "-", "+", "count", "0"]),
        Reply::NilArray
    );
    assert_eq!(t.run(&["xrange", "nokey", "-", "+"]), arr(vec![]));
    assert_eq!(
        t.run(&["xrange", "s", "(0-0", "(0-0"]),
        err("ERR invalid end ID for the interval")
    );
    // XDEL: the entries there, the max deleted ID, logged as the IDs removed.
    assert_eq!(t.run(&["xdel", "s", "2-0", "9-0"]), Reply::Int(1));
    assert_eq!(
        change(&t.logged()[0]),
        Some((
            72,
            Some(Change::Del {
                max_deleted: id(2, 0),
                ids: vec![id(2, 0)]
            })
        ))
    );
    assert_eq!(t.run(&["xdel", "s", "9-0"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    // XTRIM: logged as the ID below which entries went.
    assert_eq!(t.run(&["xtrim", "s", "maxlen", "2"]), Reply::Int(2));
    assert_eq!(
        change(&t.logged()[0]),
        Some((73, Some(Change::Trim { below: id(3, 1) })))
    );
    // Approximate trimming removes whole nodes only: nothing here.
    assert_eq!(t.run(&["xtrim", "s", "maxlen", "~", "1"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["xtrim", "s", "minid", "5"]), Reply::Int(1));
    // A stream emptied by XDEL stays, with its last ID.
    assert_eq!(t.run(&["xdel", "s", "5-0"]), Reply::Int(1));
    assert_eq!(t.run(&["exists", "s"]), Reply::Int(1));
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(0));
    assert_eq!(
        t.run(&["xadd", "s", "5-0", "a", "1"]),
        err("ERR The ID specified in XADD is equal or smaller than the target stream top item")
    );
    assert_eq!(t.run(&["xsetid", "s", "3-0"]), Reply::OK);
    assert_eq!(
        change(&t.logged()[0]),
        Some((
            74,
            Some(Change::SetId {
                last_id: id(3, 0),
                entries_added: 5,
                max_deleted: id(5, 0)
            })
        ))
    );
    assert_eq!(t.run(&["xadd", "s", "4-0", "a", "1"]), bulk("4-0"));
    assert_eq!(t.run(&["xsetid", "nokey", "1-1"]), err("ERR no such key"));
    t.check_replay();
}

/// XADD with MAXLEN ~: Redis's nodes of 100 entries go whole.
#[test]
fn approximate_trims_follow_redis_nodes() {
    let mut t = T::new();
    for i in 1..=250 {
        let idt = format!("{i}-0");
        t.run(&["xadd", "s", &idt, "f", "v"]);
    }
    assert_eq!(
        t.run(&["xtrim", "s", "maxlen", "~", "120"]),
        Reply::Int(100)
    );
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(150));
    assert_eq!(
        t.run(&["xadd", "s", "maxlen", "~", "10", "limit", "50", "251-0", "f", "v"]),
        bulk("251-0")
    );
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(151));
    assert_eq!(
        t.run(&["xadd", "s", "maxlen", "=", "10", "252-0", "f", "v"]),
        bulk("252-0")
    );
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(10));
    t.check_replay();
}

#[test]
fn groups_pending_entries_and_their_replay() {
    let mut t = T::new();
    for i in 1..=4 {
        let idt = format!("{i}-0");
        t.run(&["xadd", "s", &idt, "n", &i.to_string()]);
    }
    assert_eq!(t.run(&["xgroup", "create", "s", "g", "0"]), Reply::OK);
    assert_eq!(
        t.run(&["xgroup", "create", "s", "g", "0"]),
        err("BUSYGROUP Consumer Group name already exists")
    );
    assert_eq!(
        t.run(&["xgroup", "create", "nokey", "g", "0"]),
        err("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.")
    );
    // `>`: new entries, pending on the consumer (made), the group's last ID moved.
    let r = t.run(&[
        "xreadgroup",
        "group",
        "g",
        "alice",
        "count",
        "2",
        "streams",
        "s",
        ">",
    ]);
    assert_eq!(
        r,
        Reply::KeyedPairs(vec![(
            bulk("s"),
            arr(vec![entry("1-0", &["n", "1"]), entry("2-0", &["n", "2"])])
        )])
    );
    // RESP2: [[key, entries]]; RESP3: a map.
    assert!(r
        .encode_to_vec(2)
        .starts_with(b"*1\r\n*2\r\n$1\r\ns\r\n*2\r\n"));
    assert!(r.encode_to_vec(3).starts_with(b"%1\r\n$1\r\ns\r\n*2\r\n"));
    let kinds: Vec<u8> = t.logged().iter().filter_map(change).map(|c| c.0).collect();
    assert_eq!(kinds, vec![77, 75, 79]);
    t.now += 100;
    assert_eq!(
        t.run(&[
            "xreadgroup",
            "group",
            "g",
            "bob",
            "noack",
            "streams",
            "s",
            ">"
        ]),
        Reply::KeyedPairs(vec![(
            bulk("s"),
            arr(vec![entry("3-0", &["n", "3"]), entry("4-0", &["n", "4"])])
        )])
    );
    assert_eq!(
        t.run(&["xreadgroup", "group", "g", "bob", "streams", "s", ">"]),
        Reply::NilArray
    );
    assert_eq!(
        t.run(&["xpending", "s", "g"]),
        arr(vec![
            Reply::Int(2),
            bulk("1-0"),
            bulk("2-0"),
            arr(vec![arr(vec![bulk("alice"), bulk("2")])])
        ])
    );
    assert_eq!(
        t.run(&["xpending", "s", "g", "-", "+", "10"]),
        arr(vec![
            arr(vec![
                bulk("1-0"),
                bulk("alice"),
                Reply::Int(100),
                Reply::Int(1)
            ]),
            arr(vec![
                bulk("2-0"),
                bulk("alice"),
                Reply::Int(100),
                Reply::Int(1)
            ]),
        ])
    );
    // History: delivered again (count 2).
    t.run(&["xreadgroup", "group", "g", "alice", "streams", "s", "0"]);
    // XCLAIM to bob, idle at least 0.
    assert_eq!(
        t.run(&["xclaim", "s", "g", "bob", "0", "1-0", "justid"]),
        arr(vec![bulk("1-0")])
    );
    // An entry deleted while pending: XAUTOCLAIM drops it.
    t.run(&["xdel", "s", "2-0"]);
    assert_eq!(
        t.run(&["xautoclaim", "s", "g", "carol", "0", "0"]),
        arr(vec![
            bulk("0-0"),
            arr(vec![entry("1-0", &["n", "1"])]),
            arr(vec![bulk("2-0")])
        ])
    );
    assert_eq!(
        t.run(&["xpending", "s", "g", "-", "+", "10"]),
        arr(vec![arr(vec![
            bulk("1-0"),
            bulk("carol"),
            Reply::Int(0),
            Reply::Int(3)
        ])])
    );
    t.check_replay();
    assert_eq!(t.run(&["xack", "s", "g", "1-0", "9-0"]), Reply::Int(1));
    assert_eq!(
        change(&t.logged()[0]),
        Some((
            80,
            Some(Change::Ack {
                group: b"g".to_vec(),
                ids: vec![id(1, 0)]
            })
        ))
    );
    assert_eq!(
        t.run(&["xgroup", "createconsumer", "s", "g", "dave"]),
        Reply::Int(1)
    );
    assert_eq!(
        t.run(&["xgroup", "delconsumer", "s", "g", "alice"]),
        Reply::Int(0)
    );
    assert_eq!(
        t.run(&["xinfo", "groups", "s"]),
        Reply::Array(vec![Reply::Map(vec![
            (bulk("name"), bulk("g")),
            (bulk("consumers"), Reply::Int(3)),
            (bulk("pending"), Reply::Int(0)),
            (bulk("last-delivered-id"), bulk("4-0")),
            (bulk("entries-read"), Reply::Int(4)),
            (bulk("lag"), Reply::Int(0)),
        ])])
    );
    assert_eq!(t.run(&["xgroup", "setid", "s", "g", "0"]), Reply::OK);
    assert_eq!(t.run(&["xgroup", "destroy", "s", "g"]), Reply::Int(1));
    assert_eq!(t.run(&["xgroup", "destroy", "s", "g"]), Reply::Int(0));
    t.check_replay();
}

/// The compaction image (the walk's full-state records) rebuilds a stream with its
/// groups, consumers and pending entries; so do COPY, RENAME and DUMP/RESTORE.
#[test]
fn a_stream_is_compacted_copied_and_restored_whole() {
    let mut t = T::new();
    // Big enough that its entries take several records.
    let big = "v".repeat(40_000);
    for i in 1..=60 {
        let idt = format!("{i}-1");
        t.run(&["xadd", "s", &idt, "f", &big, "i", &i.to_string()]);
    }
    t.run(&["xgroup", "create", "s", "g", "0"]);
    t.run(&["xgroup", "create", "s", "h", "$", "entriesread", "60"]);
    t.run(&[
        "xreadgroup",
        "group",
        "g",
        "c1",
        "count",
        "5",
        "streams",
        "s",
        ">",
    ]);
    t.run(&[
        "xreadgroup",
        "group",
        "g",
        "c2",
        "count",
        "3",
        "streams",
        "s",
        ">",
    ]);
    t.run(&["pexpire", "s", "100000"]);
    let mut image = Vec::new();
    let mut cur = 0;
    loop {
        cur = t.ks.walk(cur, 16, t.now, |r| {
            weft_kv::log::encode(&r, &mut image);
        });
        if cur == 0 {
            break;
        }
    }
    let recs = records(&image);
    assert!(
        recs.iter()
            .filter(|r| matches!(r, Record::Stream { kind: 71, .. }))
            .count()
            >= 2
    );
    let mut fresh = Keyspace::new();
    for r in &recs {
        fresh.apply(r.as_ref(), t.now);
    }
    assert_eq!(dump(&fresh, t.now), dump(&t.ks, t.now));
    // COPY, DUMP and RESTORE carry the groups too.
    assert_eq!(t.run(&["copy", "s", "s2"]), Reply::Int(1));
    let Reply::Bulk(payload) = t.run(&["dump", "s"]) else {
        panic!()
    };
    let restore = [b"restore".to_vec(), b"s3".to_vec(), b"0".to_vec(), payload];
    assert_eq!(t.run_bytes(&restore), Reply::OK);
    assert_eq!(
        t.run(&["xinfo", "groups", "s3"]),
        t.run(&["xinfo", "groups", "s"])
    );
    assert_eq!(
        t.run(&["xrange", "s3", "-", "+"]),
        t.run(&["xrange", "s", "-", "+"])
    );
    assert_eq!(
        t.run(&["xinfo", "groups", "s2"]),
        t.run(&["xinfo", "groups", "s"])
    );
    assert_eq!(
        t.run(&["xpending", "s2", "g"]),
        t.run(&["xpending", "s", "g"])
    );
    t.check_replay();
}

/// XADD checks memory first: over the limit it answers OOM and changes nothing.
#[test]
fn xadd_refuses_past_the_memory_limit() {
    let mut t = T::new();
    t.run(&["xadd", "s", "1-1", "a", "1"]);
    t.room = 10;
    let big = "x".repeat(1000);
    let r = t.run(&["xadd", "s", "2-1", "a", &big]);
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with("OOM")),
        "{r:?}"
    );
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["xlen", "s"]), Reply::Int(1));
    let r = t.run(&["xgroup", "create", "new", "g", "$", "mkstream"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with("OOM")),
        "{r:?}"
    );
    assert_eq!(t.run(&["exists", "new"]), Reply::Int(0));
}

#[test]
fn xinfo_stream_answers_a_map() {
    let mut t = T::new();
    t.run(&["xadd", "s", "1-1", "a", "1"]);
    t.run(&["xadd", "s", "2-1", "b", "2"]);
    t.run(&["xdel", "s", "1-1"]);
    let Reply::Map(m) = t.run(&["xinfo", "stream", "s"]) else {
        panic!()
    };
    let get = |k: &str| {
        m.iter()
            .find(|(f, _)| *f == bulk(k))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("length"), Some(Reply::Int(1)));
    assert_eq!(get("last-generated-id"), Some(bulk("2-1")));
    assert_eq!(get("max-deleted-entry-id"), Some(bulk("1-1")));
    assert_eq!(get("entries-added"), Some(Reply::Int(2)));
    assert_eq!(get("recorded-first-entry-id"), Some(bulk("2-1")));
    assert_eq!(get("groups"), Some(Reply::Int(0)));
    assert_eq!(get("first-entry"), Some(entry("2-1", &["b", "2"])));
    assert_eq!(t.run(&["xinfo", "stream", "nokey"]), err("ERR no such key"));
    assert_eq!(
        t.run(&["xinfo", "consumers", "s", "g"]),
        err("NOGROUP No such consumer group 'g' for key name 's'")
    );
}
