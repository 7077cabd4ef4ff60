//! The embedded store (`weft_kv::store::Store`) from outside the crate: what a
//! program linking weft-kv sees.
//!
//! - set/get/del/keys/len and `exec` with any key command, the replies telling a new
//!   key from an updated one and a missing key from an error;
//! - data persists across drop and reopen, under `Fsync::EverySec` (the default) and
//!   `Fsync::Always`;
//! - a second `Store::open` on a directory already open fails with a message naming
//!   the lock holder, and succeeds once the first store is dropped;
//! - the files a store writes are the server's format: the manifest's shard logs
//!   replay with `weft_kv::log::recover` (the server's own recovery) into exactly the
//!   records written, and `weft_kv::log::check` finds them clean;
//! - 8 OS threads at once: disjoint keys, shared INCR counters (totals exact) and a key
//!   all of them overwrite, checked after a reopen.
//!
//! Each test uses its own temporary directory; nothing here starts a server.

use std::collections::HashMap;
use std::sync::Arc;
use weft_kv::log::{recover, Record};
use weft_kv::resp::Reply;
use weft_kv::server::Fsync;
use weft_kv::store::{SetOutcome, Store};

fn bulk(r: Reply) -> Vec<u8> {
    match r {
        Reply::Bulk(b) => b,
        r => panic!("expected a bulk string, got {r:?}"),
    }
}

fn int(r: Reply) -> i64 {
    match r {
        Reply::Int(n) => n,
        r => panic!("expected an integer, got {r:?}"),
    }
}

#[test]
fn set_get_del_keys_exec() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path().join("kv")).unwrap();
    assert!(s.is_empty());
    assert_eq!(s.set(b"k1", b"v1").unwrap(), SetOutcome::Created);
    assert_eq!(s.set(b"k1", b"v1b").unwrap(), SetOutcome::Updated);
    assert_eq!(s.set(b"k2", b"").unwrap(), SetOutcome::Created);
    assert_eq!(s.get(b"k1").unwrap().as_deref(), Some(&b"v1b"[..]));
    assert_eq!(s.get(b"k2").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(s.get(b"nope").unwrap(), None);
    assert_eq!(s.len(), 2);

    let mut keys = s.keys(b"k*").unwrap();
    keys.sort();
    assert_eq!(keys, vec![b"k1".to_vec(), b"k2".to_vec()]);
    assert_eq!(s.keys(b"x*").unwrap(), Vec::<Vec<u8>>::new());

    assert!(s.del(b"k2").unwrap());
    assert!(!s.del(b"k2").unwrap());
    assert_eq!(s.get(b"k2").unwrap(), None);

    // exec: any key command, with the server's replies and error words.
    assert_eq!(int(s.exec(&[b"INCRBY", b"n", b"5"])), 5);
    assert_eq!(int(s.exec(&[b"incr", b"n"])), 6);
    assert_eq!(int(s.exec(&[b"APPEND", b"k1", b"!"])), 4);
    assert_eq!(bulk(s.exec(&[b"GET", b"k1"])), b"v1b!");
    assert_eq!(int(s.exec(&[b"DBSIZE"])), 2);
    assert_eq!(int(s.exec(&[b"EXISTS", b"k1", b"n", b"zz"])), 2);
    match s.exec(&[b"incr", b"k1"]) {
        Reply::Error(e) => assert!(e.starts_with("ERR value is not an integer"), "{e}"),
        r => panic!("INCR on a string: {r:?}"),
    }
    match s.exec(&[b"nosuchcmd", b"x"]) {
        Reply::Error(e) => assert!(e.starts_with("ERR unknown command"), "{e}"),
        r => panic!("unknown command: {r:?}"),
    }
    match s.exec(&[b"get"]) {
        Reply::Error(e) => assert!(e.contains("wrong number of arguments"), "{e}"),
        r => panic!("GET without a key: {r:?}"),
    }
    // MSET/MGET cross shards.
    assert_eq!(
        s.exec(&[b"MSET", b"a", b"1", b"b", b"2", b"c", b"3"]),
        Reply::Simple("OK".into())
    );
    match s.exec(&[b"MGET", b"a", b"b", b"zz", b"c"]) {
        Reply::Array(v) => assert_eq!(
            v,
            vec![
                Reply::Bulk(b"1".to_vec()),
                Reply::Bulk(b"2".to_vec()),
                Reply::Nil,
                Reply::Bulk(b"3".to_vec())
            ]
        ),
        r => panic!("MGET: {r:?}"),
    }
    assert_eq!(s.exec(&[b"FLUSHALL"]), Reply::Simple("OK".into()));
    assert!(s.is_empty());
}

fn persists_with(open: impl Fn(&std::path::Path) -> Store) {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    {
        let s = open(&dir);
        for i in 0..1000 {
            s.set(format!("key:{i}").as_bytes(), format!("v{i}").as_bytes())
                .unwrap();
        }
        for i in (0..1000).step_by(3) {
            assert!(s.del(format!("key:{i}").as_bytes()).unwrap());
        }
        s.set(b"key:1", b"over").unwrap();
        assert_eq!(int(s.exec(&[b"incrby", b"ctr", b"41"])), 41);
        assert_eq!(int(s.exec(&[b"expire", b"key:2", b"100000"])), 1);
        s.set(b"bin\0\r\n", &[0u8, 255, 13, 10]).unwrap();
    }
    let s = open(&dir);
    for i in 0..1000 {
        let got = s.get(format!("key:{i}").as_bytes()).unwrap();
        let want = if i % 3 == 0 {
            None
        } else if i == 1 {
            Some(b"over".to_vec())
        } else {
            Some(format!("v{i}").into_bytes())
        };
        assert_eq!(got, want, "key:{i} after reopen");
    }
    assert_eq!(int(s.exec(&[b"incr", b"ctr"])), 42);
    let ttl = int(s.exec(&[b"ttl", b"key:2"]));
    assert!(ttl > 99_000 && ttl <= 100_000, "TTL after reopen: {ttl}");
    assert_eq!(int(s.exec(&[b"ttl", b"key:4"])), -1);
    assert_eq!(
        s.get(b"bin\0\r\n").unwrap().as_deref(),
        Some(&[0u8, 255, 13, 10][..])
    );
    assert_eq!(s.len(), 1000 - 334 + 2);
}

#[test]
fn reopen_keeps_data_everysec() {
    persists_with(|p| Store::open(p).unwrap());
}

#[test]
fn reopen_keeps_data_fsync_always() {
    persists_with(|p| Store::open_with(p, Fsync::Always).unwrap());
}

#[test]
fn second_open_of_the_same_dir_fails_clearly() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    let first = Store::open(&dir).unwrap();
    first.set(b"k", b"v").unwrap();
    let err = match Store::open(&dir) {
        Ok(_) => panic!("a second Store::open on {} succeeded", dir.display()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("in use"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(err.contains("pid"), "{err}");
    // The first store is unharmed; after it is dropped the directory opens again.
    assert_eq!(first.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(first);
    let again = Store::open_with(&dir, Fsync::Always).unwrap();
    assert_eq!(again.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// The shard logs listed in the directory (the server's layout: shard-NNN.log).
fn shard_logs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("shard-") && n.ends_with(".log")
        })
        .collect();
    logs.sort();
    logs
}

#[test]
fn files_are_the_servers_format() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    let mut want: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    {
        let s = Store::open_with(&dir, Fsync::Always).unwrap();
        for i in 0..200 {
            let (k, v) = (format!("f{i}").into_bytes(), format!("{i}").into_bytes());
            s.set(&k, &v).unwrap();
            want.insert(k, v);
        }
        s.del(b"f7").unwrap();
        want.remove(&b"f7"[..]);
    }
    let logs = shard_logs(&dir);
    assert!(!logs.is_empty(), "no shard-NNN.log in {}", dir.display());
    // Replaying every shard log with the server's recovery gives exactly the store's
    // keys, each in one shard only.
    let mut got: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for log in &logs {
        let rec = recover(log, |r| match r {
            Record::Set { key, value, .. } => {
                got.insert(key, value);
            }
            Record::Del { key } => {
                got.remove(&key);
            }
            other => panic!("unexpected record {other:?}"),
        })
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        assert_eq!(rec.torn_bytes, 0, "{}", log.display());
    }
    assert_eq!(got, want);
    let report = weft_kv::log::check(&dir, false).unwrap();
    assert!(report.clean(), "check: {report:?}");
}

#[test]
fn eight_threads_disjoint_and_shared_keys() {
    const THREADS: usize = 8;
    const N: usize = 2000;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kv");
    let s = Arc::new(Store::open(&dir).unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    let k = format!("t{t}:{i}");
                    assert_eq!(
                        s.set(k.as_bytes(), format!("{i}").as_bytes()).unwrap(),
                        SetOutcome::Created,
                        "{k}"
                    );
                    s.exec(&[b"incr", b"shared:total"]);
                    s.exec(&[b"incrby", format!("shared:c{}", i % 4).as_bytes(), b"2"]);
                    s.set(b"shared:last", format!("{t}:{i}").as_bytes())
                        .unwrap();
                    if i % 10 == 0 {
                        assert!(s.del(format!("t{t}:{}", i / 2).as_bytes()).is_ok());
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a writer thread panicked");
    }
    let check = |s: &Store| {
        assert_eq!(
            bulk(s.exec(&[b"get", b"shared:total"])),
            format!("{}", THREADS * N).into_bytes()
        );
        for c in 0..4 {
            assert_eq!(
                bulk(s.exec(&[b"get", format!("shared:c{c}").as_bytes()])),
                format!("{}", THREADS * N / 4 * 2).into_bytes()
            );
        }
        let last = String::from_utf8(s.get(b"shared:last").unwrap().unwrap()).unwrap();
        assert!(
            last.ends_with(&format!(":{}", N - 1)),
            "shared:last = {last}: the last write of some thread"
        );
        let deleted: std::collections::HashSet<usize> = (0..N).step_by(10).map(|i| i / 2).collect();
        let mut present = 0;
        for t in 0..THREADS {
            for i in 0..N {
                let v = s.get(format!("t{t}:{i}").as_bytes()).unwrap();
                if deleted.contains(&i) {
                    assert_eq!(v, None, "t{t}:{i} was deleted");
                } else {
                    assert_eq!(v, Some(format!("{i}").into_bytes()), "t{t}:{i}");
                    present += 1;
                }
            }
        }
        assert_eq!(s.len(), present + 6);
    };
    check(&s);
    drop(Arc::try_unwrap(s).ok().expect("threads ended"));
    let s = Store::open(&dir).unwrap();
    check(&s);
}

/// A key or value longer than the log holds (1 GiB, the limit recovery reads back) is
/// refused with an error naming its size, not a panic; nothing is stored. (The argument
/// is zeroed memory the test never touches: it costs no resident memory.)
#[test]
fn an_argument_over_the_limit_is_refused_clearly() {
    assert_eq!(weft_kv::commands::MAX_ARG, weft_kv::log::MAX_VALUE);
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path().join("kv")).unwrap();
    let huge = vec![0u8; weft_kv::commands::MAX_ARG + 1];
    match s.exec(&[b"set", b"k", &huge]) {
        Reply::Error(e) => assert!(
            e.contains("exceeds maximum allowed size") && e.contains("1073741825 bytes"),
            "{e}"
        ),
        r => panic!("{r:?}"),
    }
    let e = s.set(&huge, b"v").unwrap_err();
    assert!(e.to_string().contains("at most 1073741824 bytes"), "{e}");
    assert_eq!(s.len(), 0, "nothing stored");
    assert_eq!(s.exec(&[b"set", b"k", b"v"]), Reply::OK);
}

/// MSETNX over keys of several shards (a directory of four): all set or none, a key of
/// any type counting as there; the store's transactions keep it whole after a reopen.
#[test]
fn msetnx_sets_all_or_none_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    drop(weft_kv::log::DataDir::open(dir.path(), 4).unwrap());
    let store = Store::open(dir.path()).unwrap();
    let run = |args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        store.exec(&args)
    };
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut first = vec!["msetnx"];
    for k in &keys {
        first.extend([k.as_str(), "1"]);
    }
    assert_eq!(run(&first), Reply::Int(1));
    assert_eq!(
        run(&["msetnx", "new1", "x", "k7", "2", "new2", "y"]),
        Reply::Int(0)
    );
    assert_eq!(run(&["exists", "new1", "new2"]), Reply::Int(0), "none set");
    assert_eq!(bulk(run(&["get", "k7"])), b"1");
    run(&["hset", "h", "f", "v"]);
    assert_eq!(
        run(&["msetnx", "new1", "x", "h", "2"]),
        Reply::Int(0),
        "a hash is a key"
    );
    assert_eq!(
        run(&["msetnx", "a", "1", "b"]),
        Reply::Error("ERR wrong number of arguments for 'msetnx' command".into())
    );
    assert_eq!(run(&["msetnx", "new1", "x", "new2", "y"]), Reply::Int(1));
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.len(), 23);
    assert_eq!(store.get(b"new2").unwrap().as_deref(), Some(&b"y"[..]));
}
