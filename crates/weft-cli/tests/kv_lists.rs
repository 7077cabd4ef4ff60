//! Lists in `weft kv serve` (the built binary, two workers, so a command's keys fall on
//! shards of both and connections are served by both):
//!
//! - LMOVE and RPOPLPUSH over two shards are atomic and isolated: while writers move
//!   elements between eight lists, readers on every worker, reading all eight lists in
//!   one MULTI/EXEC, never see an element in two lists or in none; after a restart from
//!   the logs the lists are the same;
//! - CONFIG GET and SET of list-max-listpack-size (and its alias
//!   list-max-ziplist-size), which later writes pack by, and of list-compress-depth.
//!
//! `WEFT_KV_STRESS=1` runs 20,000 moves per writer instead of 100.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{run, KvServer, Rng, CEILING};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use weft_kv::client::Client;
use weft_kv::resp::Reply;

const LISTS: usize = 8;
const ELEMENTS: usize = 100;

fn list_name(i: usize) -> String {
    format!("lists:{i}")
}

fn elements(r: Reply) -> Vec<String> {
    let Reply::Array(v) = r else {
        panic!("not elements: {r:?}")
    };
    v.into_iter()
        .map(|m| match m {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            m => panic!("not an element: {m:?}"),
        })
        .collect()
}

fn server(dir: &std::path::Path) -> KvServer {
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &["--workers", "2"])
        .expect("weft kv serve starts")
}

/// Every list's elements, in order.
fn all_lists(c: &mut Client) -> Vec<Vec<String>> {
    (0..LISTS)
        .map(|i| elements(run(c, &["LRANGE", &list_name(i), "0", "-1"])))
        .collect()
}

#[test]
fn readers_never_see_an_element_in_two_lists_or_in_none() {
    let moves = if std::env::var_os("WEFT_KV_STRESS").is_some() {
        20_000
    } else {
        100
    };
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut c = s.client().unwrap();
    // Every element in exactly one of the lists.
    for e in 0..ELEMENTS {
        let r = run(&mut c, &["RPUSH", &list_name(e % LISTS), &format!("e{e}")]);
        assert!(matches!(r, Reply::Int(_)), "{r:?}");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (mut c, stop, checks) = (s.client().unwrap(), stop.clone(), checks.clone());
            std::thread::spawn(move || {
                while !stop.load(Relaxed) {
                    // The eight lists read as one transaction hold every element once.
                    assert_eq!(run(&mut c, &["MULTI"]), Reply::Simple("OK".into()));
                    for i in 0..LISTS {
                        let r = run(&mut c, &["LRANGE", &list_name(i), "0", "-1"]);
                        assert_eq!(r, Reply::Simple("QUEUED".into()));
                    }
                    let Reply::Array(lists) = run(&mut c, &["EXEC"]) else {
                        panic!("EXEC did not answer an array")
                    };
                    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
                    for l in lists {
                        for e in elements(l) {
                            *seen.entry(e).or_default() += 1;
                        }
                    }
                    assert_eq!(seen.len(), ELEMENTS, "an element missing: {seen:?}");
                    assert!(seen.values().all(|&n| n == 1), "an element twice: {seen:?}");
                    checks.fetch_add(1, Relaxed);
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let mut c = s.client().unwrap();
            std::thread::spawn(move || {
                let mut rng = Rng(Rng::from_time() ^ w as u64);
                for _ in 0..moves {
                    let (a, b) = (rng.below(LISTS as u64), rng.below(LISTS as u64));
                    let (a, b) = (list_name(a as usize), list_name(b as usize));
                    let r = if rng.below(3) == 0 {
                        run(&mut c, &["RPOPLPUSH", &a, &b])
                    } else {
                        let from = ["LEFT", "RIGHT"][rng.below(2) as usize];
                        let to = ["LEFT", "RIGHT"][rng.below(2) as usize];
                        run(&mut c, &["LMOVE", &a, &b, from, to])
                    };
                    assert!(matches!(r, Reply::Bulk(_) | Reply::Nil), "{r:?}");
                }
            })
        })
        .collect();
    let deadline = Instant::now() + CEILING;
    for w in writers {
        w.join().expect("a writer saw a wrong reply");
    }
    // Readers have checked during the moves and go on until they have checked some.
    while checks.load(Relaxed) < 20 {
        assert!(Instant::now() < deadline, "the readers did not get to read");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    stop.store(true, Relaxed);
    for r in readers {
        r.join()
            .expect("a reader saw an element in two lists or in none");
    }
    // After a restart from the logs, the same lists in the same order.
    let before = all_lists(&mut c);
    assert_eq!(before.iter().map(Vec::len).sum::<usize>(), ELEMENTS);
    drop(c);
    drop(s);
    let s = server(dir.path());
    let mut c = s.client().unwrap();
    assert_eq!(all_lists(&mut c), before);
}

/// CONFIG GET and SET of list-max-listpack-size (list-max-ziplist-size is the same
/// setting): later writes pack by it, and a list never goes back to a listpack;
/// list-compress-depth is accepted and shown; a value that is not a number is refused.
#[test]
fn config_sets_the_list_node_size() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut c = s.client().unwrap();
    let get = |c: &mut Client, name: &str| match run(c, &["CONFIG", "GET", name]) {
        Reply::Array(v) => v[1].clone(),
        r => panic!("{r:?}"),
    };
    let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
    let ok = Reply::Simple("OK".into());
    assert_eq!(get(&mut c, "list-max-listpack-size"), bulk("-2"));
    assert_eq!(get(&mut c, "list-max-ziplist-size"), bulk("-2"));
    assert_eq!(get(&mut c, "list-compress-depth"), bulk("0"));
    assert_eq!(
        run(&mut c, &["CONFIG", "SET", "list-max-ziplist-size", "2"]),
        ok
    );
    assert_eq!(get(&mut c, "list-max-listpack-size"), bulk("2"));
    let enc = |c: &mut Client, k: &str| run(c, &["OBJECT", "ENCODING", k]);
    run(&mut c, &["RPUSH", "l", "a", "b"]);
    assert_eq!(enc(&mut c, "l"), bulk("listpack"));
    run(&mut c, &["RPUSH", "l", "c"]);
    assert_eq!(enc(&mut c, "l"), bulk("quicklist"));
    run(&mut c, &["LPOP", "l", "2"]);
    assert_eq!(enc(&mut c, "l"), bulk("quicklist"), "never back");
    assert_eq!(
        run(&mut c, &["CONFIG", "SET", "list-compress-depth", "1"]),
        ok
    );
    assert_eq!(get(&mut c, "list-compress-depth"), bulk("1"));
    let r = run(&mut c, &["CONFIG", "SET", "list-max-listpack-size", "many"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.contains("list-max-listpack-size")),
        "{r:?}"
    );
    assert_eq!(
        run(&mut c, &["CONFIG", "SET", "list-max-listpack-size", "-2"]),
        ok
    );
    run(&mut c, &["RPUSH", "m", "a", "b", "c"]);
    assert_eq!(enc(&mut c, "m"), bulk("listpack"));
    assert_eq!(
        elements(run(&mut c, &["LRANGE", "l", "0", "-1"])),
        ["c".to_string()]
    );
}
