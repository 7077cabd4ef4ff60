//! The log's fsyncs, seen from a client: INFO persistence's `aof_fsyncs` (the logs'
//! fsyncs finished) and `aof_fsynced_size` (how much of the logs a finished fsync
//! covers) beside `aof_current_size`.
//!
//! Under `--fsync always` a write is acknowledged only once an fsync covering it has
//! finished: after every reply to a SET (one client, nothing else writing) the fsynced
//! size is the log's whole size and one more fsync has finished; with several clients
//! writing at once, one fsync covers the writes that arrived while the previous one ran
//! (group commit), so there are never more fsyncs than writes. Under `everysec` the
//! fsync comes within about a second, without the write waiting for it; after a
//! compaction the new log is fsynced whole.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{eventually, ok, run, KvServer};
use std::collections::HashMap;
use weft_kv::client::Client;
use weft_kv::resp::Reply;

/// INFO persistence's fields.
fn persistence(c: &mut Client) -> HashMap<String, String> {
    info(c, "persistence")
}

/// The fields of INFO's `section`.
fn info(c: &mut Client, section: &str) -> HashMap<String, String> {
    let Reply::Bulk(b) = run(c, &["INFO", section]) else {
        panic!("INFO answered no bulk string");
    };
    String::from_utf8(b)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(f: &HashMap<String, String>, k: &str) -> u64 {
    f.get(k)
        .unwrap_or_else(|| panic!("INFO persistence has no {k}: {f:?}"))
        .parse()
        .unwrap()
}

/// (fsyncs finished, fsynced size, the logs' size).
fn sizes(c: &mut Client) -> (u64, u64, u64) {
    let f = persistence(c);
    (
        num(&f, "aof_fsyncs"),
        num(&f, "aof_fsynced_size"),
        num(&f, "aof_current_size"),
    )
}

/// A fresh server with `args`, and a client of it.
fn start(args: &[&str]) -> (tempfile::TempDir, KvServer, Client) {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("d"), tmp.path().join("s"));
    let s = KvServer::weft(&dir, &socket, args).unwrap();
    let c = s.client().unwrap();
    (tmp, s, c)
}

#[test]
fn under_always_every_reply_to_a_write_follows_its_fsync() {
    let (_tmp, _s, mut c) = start(&["--fsync", "always", "--workers", "1"]);
    let (mut fsyncs, synced, len) = sizes(&mut c);
    assert_eq!(synced, len, "a fresh log is all on disk");
    for i in 0..50 {
        assert_eq!(run(&mut c, &["SET", &format!("k{i}"), "v"]), ok());
        let (f, synced, len) = sizes(&mut c);
        assert_eq!(
            synced, len,
            "after the reply to SET number {i}, all is fsynced"
        );
        assert!(
            f > fsyncs,
            "SET number {i} was acknowledged without an fsync"
        );
        fsyncs = f;
    }
    // A command that fails changes nothing: no record, no fsync.
    assert!(matches!(
        run(&mut c, &["INCR", "k0"]),
        Reply::Error(e) if e.contains("not an integer")
    ));
    assert_eq!(sizes(&mut c).0, fsyncs);
}

#[test]
fn under_always_one_fsync_covers_the_writes_that_arrive_meanwhile() {
    let (_tmp, s, mut c) = start(&["--fsync", "always", "--workers", "1"]);
    let (before, _, _) = sizes(&mut c);
    const CLIENTS: usize = 8;
    const WRITES: usize = 100;
    std::thread::scope(|sc| {
        for t in 0..CLIENTS {
            let s = &s;
            sc.spawn(move || {
                let mut c = s.client().unwrap();
                for i in 0..WRITES {
                    assert_eq!(run(&mut c, &["SET", &format!("k{t}.{i}"), "v"]), ok());
                }
            });
        }
    });
    let (after, synced, len) = sizes(&mut c);
    assert_eq!(synced, len);
    let fsyncs = after - before;
    assert!(fsyncs >= 1);
    assert!(
        fsyncs <= (CLIENTS * WRITES) as u64,
        "{fsyncs} fsyncs for {} writes",
        CLIENTS * WRITES
    );
    assert_eq!(
        run(&mut c, &["DBSIZE"]),
        Reply::Int((CLIENTS * WRITES) as i64)
    );
}

/// Under `always`, a worker owning its shard alone runs the fdatasync itself while only
/// writes come, and through io_uring once reads come between the writes (they could
/// then be served while the disk flushes), unless every connection waits for that
/// fsync; and after a ring's fsync during which no read came, on the worker again but
/// for one in eight fsyncs (`RING_PROBE`), which look through the ring whether reads
/// come now.
#[test]
fn under_always_writes_alone_fsync_on_the_worker_and_reads_between_send_it_to_the_ring() {
    let (_tmp, s, mut c) = start(&["--fsync", "always", "--workers", "1"]);
    // Another connection, idle: it could send a read during any fsync.
    let idle = s.client().unwrap();
    let on_worker = |c: &mut Client| num(&persistence(c), "aof_fsyncs_on_worker");
    let (f0, w0) = (sizes(&mut c).0, on_worker(&mut c));
    for i in 0..20 {
        assert_eq!(run(&mut c, &["SET", &format!("k{i}"), "v"]), ok());
    }
    let (f1, w1) = (sizes(&mut c).0, on_worker(&mut c));
    assert!(f1 - f0 >= 20, "{} fsyncs for 20 lone SETs", f1 - f0);
    assert!(
        w1 - w0 >= 19,
        "{} of 20 lone SETs fsynced on the worker",
        w1 - w0
    );
    for i in 0..20 {
        assert_eq!(run(&mut c, &["GET", &format!("k{i}")]), kv::bulk("v"));
        assert_eq!(run(&mut c, &["SET", &format!("k{i}"), "w"]), ok());
    }
    let (f2, w2) = (sizes(&mut c).0, on_worker(&mut c));
    assert!(f2 - f1 >= 20, "{} fsyncs for 20 SETs after GETs", f2 - f1);
    // The first through the ring; nothing read during it (the only busy connection
    // waits for its SET), so the next seven on the worker, the eighth through the ring
    // again, and so on: 3 of 20 through the ring, 17 on the worker.
    assert_eq!(
        w2 - w1,
        17,
        "SETs after GETs of one connection fsynced on the worker ({} fsyncs)",
        f2 - f1
    );
    // The idle connection gone, the one left waits for each fsync itself: nobody can be
    // served meanwhile, so its SETs after GETs fsync on the worker.
    drop(idle);
    eventually("the idle connection is gone", || {
        num(&info(&mut c, "clients"), "connected_clients") == 1
    });
    for i in 0..20 {
        assert_eq!(run(&mut c, &["GET", &format!("k{i}")]), kv::bulk("w"));
        assert_eq!(run(&mut c, &["SET", &format!("k{i}"), "x"]), ok());
    }
    let w3 = on_worker(&mut c);
    assert!(
        w3 - w2 >= 18,
        "{} of 20 SETs of the only connection fsynced on the worker",
        w3 - w2
    );
}

#[test]
fn under_everysec_the_fsync_follows_within_a_while() {
    let (_tmp, _s, mut c) = start(&["--fsync", "everysec"]);
    let (before, _, _) = sizes(&mut c);
    assert_eq!(run(&mut c, &["SET", "k", "v"]), ok());
    let (_, _, len) = sizes(&mut c);
    eventually("the everysec fsync covers the SET", || {
        let (f, synced, _) = sizes(&mut c);
        f > before && synced >= len
    });
    // A compaction publishes a new, shorter log, fsynced whole: the fsynced size
    // follows it down (an fsync of the old file counts for nothing in the new one).
    for i in 0..200 {
        assert_eq!(run(&mut c, &["SET", "k", &format!("v{i}")]), ok());
    }
    assert!(matches!(run(&mut c, &["BGREWRITEAOF"]), Reply::Simple(_)));
    eventually("the compaction is published", || {
        let f = persistence(&mut c);
        num(&f, "aof_rewrite_in_progress") == 0 && num(&f, "aof_rewrites") >= 1
    });
    eventually("the compacted log is all fsynced", || {
        let (_, synced, len) = sizes(&mut c);
        assert!(synced <= len, "{synced} fsynced of a log of {len}");
        synced == len
    });
    let (_, _, len) = sizes(&mut c);
    assert!(len < 200 * 20, "the log was compacted: {len} bytes");
}

/// Under `always`, reads that come while a ring's fsync runs (a second connection
/// reading without pause beside a writer) keep the writes' fsyncs on the ring, where
/// those reads are served during the flush: more of them go through the ring than the
/// one in eight that looks again after one without reads.
#[test]
fn under_always_reads_during_the_fsync_keep_it_on_the_ring() {
    let (_tmp, s, mut c) = start(&["--fsync", "always", "--workers", "1"]);
    assert_eq!(run(&mut c, &["SET", "r", "v"]), ok());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut reader = s.client().unwrap();
    let stop2 = stop.clone();
    let reads = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            assert_eq!(run(&mut reader, &["GET", "r"]), kv::bulk("v"));
            n += 1;
        }
        n
    });
    eventually(
        "most fsyncs beside a busy reader go through the ring",
        || {
            let f = persistence(&mut c);
            let (f0, w0) = (num(&f, "aof_fsyncs"), num(&f, "aof_fsyncs_on_worker"));
            for i in 0..40 {
                assert_eq!(run(&mut c, &["SET", &format!("k{i}"), "v"]), ok());
            }
            let f = persistence(&mut c);
            let ring = (num(&f, "aof_fsyncs") - f0) - (num(&f, "aof_fsyncs_on_worker") - w0);
            // Without reads during the ring's fsyncs: 40 / 8 + 1 at most.
            ring > 40 / 8 + 2
        },
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reads.join().unwrap() > 0);
}
