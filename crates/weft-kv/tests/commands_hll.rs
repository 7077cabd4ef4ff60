//! The HyperLogLog commands (PFADD, PFCOUNT, PFMERGE) run through the command table:
//! their exact replies and values, the records they log (only the changed bytes where
//! the length is kept), the state a replay of the log rebuilds, their errors, and the
//! estimates within HyperLogLog's error bound. Over several shards: an embedded store
//! of four, and its state after a restart.

mod common;
use common::*;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// An empty HyperLogLog as PFADD makes it: the header (cache marked not known) and
/// one run of 16384 zero registers.
const EMPTY: &[u8] = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80\x7f\xff";

fn value(t: &mut T, key: &str) -> Vec<u8> {
    match t.run(&["get", key]) {
        Reply::Bulk(v) => v,
        r => panic!("GET {key}: {r:?}"),
    }
}

#[test]
fn pfadd_makes_the_key_and_answers_whether_it_changed() {
    let mut t = T::new();
    assert_eq!(t.run(&["pfadd", "h"]), Reply::Int(1));
    assert_eq!(value(&mut t, "h"), EMPTY);
    assert_eq!(t.run(&["type", "h"]), Reply::Simple("string".into()));
    assert_eq!(t.run(&["pfadd", "h"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["pfadd", "h", "a", "b", "c"]), Reply::Int(1));
    assert_eq!(t.run(&["pfadd", "h", "a", "b", "c"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["pfcount", "h"]), Reply::Int(3));
    assert_eq!(t.run(&["pfcount", "missing"]), Reply::Int(0));
    assert_eq!(t.run(&["exists", "missing"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn pfcount_caches_its_count_in_the_header_and_logs_those_bytes() {
    let mut t = T::new();
    t.run(&["pfadd", "h", "a", "b", "c", "d"]);
    let before = value(&mut t, "h");
    assert_eq!(before[15] & 0x80, 0x80, "not known after a PFADD");
    assert_eq!(t.run(&["pfcount", "h"]), Reply::Int(4));
    assert_eq!(
        t.logged(),
        vec![Record::SetRange {
            key: b"h".to_vec(),
            offset: 8,
            piece: vec![4, 0, 0, 0, 0, 0, 0, 0],
        }]
    );
    let after = value(&mut t, "h");
    assert_eq!(&after[8..16], &4u64.to_le_bytes());
    assert_eq!(&after[16..], &before[16..]);
    // Known now: the second count writes nothing.
    assert_eq!(t.run(&["pfcount", "h"]), Reply::Int(4));
    assert!(t.logged().is_empty());
    t.check_replay();
}

#[test]
fn a_dense_write_logs_only_the_changed_bytes_and_keeps_the_expiry() {
    let mut t = T::new();
    let mut add = vec!["pfadd".to_string(), "h".to_string()];
    add.extend((0..3000).map(|i| format!("e{i}")));
    let add: Vec<&str> = add.iter().map(String::as_str).collect();
    assert_eq!(t.run(&add), Reply::Int(1));
    let v = value(&mut t, "h");
    assert_eq!((v[4], v.len()), (0, 16 + 12288), "dense");
    let at = (NOW + 100_000).to_string();
    t.run(&["pexpireat", "h", &at]);
    // Within 3 standard errors (1.04/sqrt(16384) = 0.81%) of 3000.
    let Reply::Int(n) = t.run(&["pfcount", "h"]) else {
        panic!("PFCOUNT answers an integer")
    };
    assert!((n - 3000).abs() <= 73, "estimate {n} of 3000");
    assert_eq!(t.run(&["pfadd", "h", "one more"]), Reply::Int(1));
    let logged = t.logged();
    assert_eq!(logged.len(), 1);
    match &logged[0] {
        Record::SetRange { offset, piece, .. } => {
            assert_eq!(*offset, 15, "from the cache flag");
            assert!(piece.len() < 12288, "a piece, not the whole value");
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(
        t.run(&["pexpiretime", "h"]),
        Reply::Int(NOW as i64 + 100_000)
    );
    t.check_replay();
}

#[test]
fn a_sparse_value_growing_past_its_limit_turns_dense_and_is_logged_whole() {
    let mut t = T::new();
    let mut i = 0;
    let logged = loop {
        t.run(&["pfadd", "h", &format!("x{i}")]);
        let logged = t.logged();
        i += 1;
        let v = value(&mut t, "h");
        if v[4] == 0 {
            break logged;
        }
        assert!(v.len() <= 3000, "sparse within 3000 bytes");
    };
    assert!(matches!(&logged[..], [Record::Set { value, .. }] if value.len() == 12304));
    t.check_replay();
}

#[test]
fn estimates_are_within_the_error_bound() {
    let mut t = T::new();
    for n in [10usize, 100, 1000, 20_000] {
        let key = format!("k{n}");
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut add = vec!["pfadd".to_string(), key.clone()];
            add.extend(chunk.iter().map(|i| format!("{n}:{i}")));
            let add: Vec<&str> = add.iter().map(String::as_str).collect();
            t.run(&add);
        }
        let Reply::Int(got) = t.run(&["pfcount", &key]) else {
            panic!()
        };
        // 5 standard errors, and exact below 100 as Redis's estimator is there.
        let bound = (n as f64 * 0.0406).max(1.0) as i64;
        assert!((got - n as i64).abs() <= bound, "{got} for {n}");
    }
    t.check_replay();
}

#[test]
fn pfmerge_stores_the_union() {
    let mut t = T::new();
    t.run(&["pfadd", "a", "1", "2", "3"]);
    t.run(&["pfadd", "b", "3", "4", "5"]);
    assert_eq!(t.run(&["pfcount", "a", "b", "missing"]), Reply::Int(5));
    assert_eq!(t.run(&["exists", "missing"]), Reply::Int(0));
    assert_eq!(t.run(&["pfmerge", "u", "a", "b"]), Reply::OK);
    assert_eq!(t.run(&["pfcount", "u"]), Reply::Int(5));
    assert_eq!(t.run(&["pfmerge", "a", "b"]), Reply::OK);
    assert_eq!(t.run(&["pfcount", "a"]), Reply::Int(5));
    assert_eq!(value(&mut t, "a")[16..], value(&mut t, "u")[16..]);
    assert_eq!(t.run(&["pfmerge", "e"]), Reply::OK);
    assert_eq!(value(&mut t, "e"), EMPTY);
    t.check_replay();
}

#[test]
fn errors_change_nothing() {
    let mut t = T::new();
    t.run(&["set", "s", "not a hyperloglog"]);
    t.run(&["lpush", "l", "x"]);
    t.run(&["pfadd", "h", "a"]);
    let h = value(&mut t, "h");
    // Runs covering more than 16384 registers.
    let bad = [EMPTY, &[0x7f, 0xff][..]].concat();
    t.run_bytes(&[b"set".to_vec(), b"bad".to_vec(), bad.clone()]);
    for (cmd, e) in [
        (vec!["pfadd", "s", "a"], NOT_HLL),
        (vec!["pfcount", "s"], NOT_HLL),
        (vec!["pfcount", "h", "s"], NOT_HLL),
        (vec!["pfmerge", "h", "s"], NOT_HLL),
        (vec!["pfmerge", "s", "h"], NOT_HLL),
        (vec!["pfadd", "l", "a"], WRONGTYPE),
        (vec!["pfcount", "l"], WRONGTYPE),
        (vec!["pfcount", "h", "l"], WRONGTYPE),
        (vec!["pfmerge", "h", "l"], WRONGTYPE),
        (vec!["pfcount", "bad"], CORRUPT),
        (vec!["pfcount", "bad", "h"], CORRUPT),
        (vec!["pfmerge", "h", "bad"], CORRUPT),
    ] {
        assert_eq!(t.run(&cmd), err(e), "{cmd:?}");
        assert!(t.logged().is_empty());
    }
    assert_eq!(value(&mut t, "bad"), bad);
    assert_eq!(value(&mut t, "h"), h);
    assert_eq!(
        t.run(&["pfadd"]),
        err("ERR wrong number of arguments for 'pfadd' command")
    );
    t.check_replay();
}

#[test]
fn over_several_shards() {
    let (dir, store) = four_shards();
    let k = keys_on_shards("hk", 4);
    let run = |line: &[&str]| {
        let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        store.exec(&args)
    };
    assert_eq!(run(&["pfadd", &k[0], "1", "2", "3"]), Reply::Int(1));
    assert_eq!(run(&["pfadd", &k[1], "3", "4", "5", "6"]), Reply::Int(1));
    assert_eq!(run(&["pfcount", &k[0], &k[1], &k[3]]), Reply::Int(6));
    assert_eq!(run(&["exists", &k[3]]), Reply::Int(0));
    assert_eq!(run(&["pfmerge", &k[2], &k[0], &k[1]]), Reply::OK);
    assert_eq!(run(&["pfcount", &k[2]]), Reply::Int(6));
    run(&["lpush", &k[3], "x"]);
    assert_eq!(run(&["pfmerge", &k[2], &k[3]]), err(WRONGTYPE));
    assert_eq!(run(&["pfcount", &k[0], &k[3]]), err(WRONGTYPE));
    run(&["set", &k[3], "text"]);
    assert_eq!(run(&["pfmerge", &k[0], &k[3]]), err(NOT_HLL));
    let merged = run(&["get", &k[2]]);
    drop(store);
    let store = weft_kv::Store::open(dir.path()).unwrap();
    assert_eq!(store.exec(&[b"get", k[2].as_bytes()]), merged);
    assert_eq!(store.exec(&[b"pfcount", k[2].as_bytes()]), Reply::Int(6));
}

#[test]
fn pfdebug_looks_inside() {
    let mut t = T::new();
    t.run(&["pfadd", "h", "a"]);
    assert_eq!(
        t.run(&["pfdebug", "encoding", "h"]),
        Reply::Simple("sparse".into())
    );
    let Reply::Bulk(runs) = t.run(&["pfdebug", "decode", "h"]) else {
        panic!("DECODE answers a string")
    };
    let runs = String::from_utf8(runs).unwrap();
    assert!(runs.starts_with("Z:") && runs.contains(" v:"), "{runs}");
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["pfdebug", "todense", "h"]), Reply::Int(1));
    assert!(matches!(&t.logged()[..], [Record::Set { value, .. }] if value.len() == 12304));
    assert_eq!(t.run(&["pfdebug", "todense", "h"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["pfdebug", "encoding", "h"]),
        Reply::Simple("dense".into())
    );
    assert_eq!(
        t.run(&["pfdebug", "decode", "h"]),
        err("ERR HLL encoding is not sparse")
    );
    let Reply::Array(regs) = t.run(&["pfdebug", "getreg", "h"]) else {
        panic!("GETREG answers an array")
    };
    assert_eq!(regs.len(), 16384);
    assert_eq!(regs.iter().filter(|r| **r != Reply::Int(0)).count(), 1);
    assert_eq!(t.run(&["pfcount", "h"]), Reply::Int(1));
    assert_eq!(
        t.run(&["pfdebug", "getreg", "missing"]),
        err("ERR The specified key does not exist")
    );
    assert_eq!(
        t.run(&["pfdebug", "other", "h"]),
        err("ERR Unknown PFDEBUG subcommand 'other'")
    );
    t.check_replay();
}

#[test]
fn pfselftest_passes() {
    let (_dir, store) = four_shards();
    assert_eq!(store.exec(&[b"pfselftest"]), Reply::OK);
}
