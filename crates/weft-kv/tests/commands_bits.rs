//! The bitmap commands: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD and
//! BITFIELD_RO. Exact replies and errors, the records each write logs (only the bytes
//! it changes), replay of the log, the memory limit, and BITOP over keys of several
//! shards (an embedded store of four shards).

mod common;
use common::*;

fn set_rec(k: &str, v: &[u8]) -> Record {
    Record::Set {
        key: k.into(),
        value: v.to_vec(),
        expire_at_ms: None,
    }
}

fn range_rec(k: &str, offset: u64, piece: &[u8]) -> Record {
    Record::SetRange {
        key: k.into(),
        offset,
        piece: piece.to_vec(),
    }
}

/// Runs a command given as bytes.
fn bytes(t: &mut T, line: &[&[u8]]) -> Reply {
    let args: Vec<Vec<u8>> = line.iter().map(|a| a.to_vec()).collect();
    t.run_bytes(&args)
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

#[test]
fn setbit_and_getbit() {
    let mut t = T::new();
    assert_eq!(t.run(&["setbit", "k", "7", "1"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![set_rec("k", b""), range_rec("k", 0, &[1])]);
    assert_eq!(t.run(&["get", "k"]), Reply::Bulk(vec![1]));
    // The same value again: nothing changes, nothing is logged.
    assert_eq!(t.run(&["setbit", "k", "7", "1"]), Reply::Int(1));
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["object", "encoding", "k"]),
        Reply::Bulk(b"raw".to_vec())
    );
    // Far past the end: the string grows with zeros; only the byte is logged.
    assert_eq!(t.run(&["setbit", "k", "100", "1"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![range_rec("k", 12, &[0b0000_1000])]);
    assert_eq!(t.run(&["strlen", "k"]), Reply::Int(13));
    // Clearing a bit past the end still grows the string (as Redis does).
    assert_eq!(t.run(&["setbit", "k", "120", "0"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![range_rec("k", 15, &[0])]);
    assert_eq!(t.run(&["strlen", "k"]), Reply::Int(16));
    assert_eq!(t.run(&["getbit", "k", "100"]), Reply::Int(1));
    assert_eq!(t.run(&["getbit", "k", "99"]), Reply::Int(0));
    assert_eq!(t.run(&["getbit", "k", "4294967295"]), Reply::Int(0));
    assert_eq!(t.run(&["getbit", "nokey", "0"]), Reply::Int(0));
    assert_eq!(t.run(&["setbit", "k", "7", "0"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![range_rec("k", 0, &[0])]);
    // A string set by SET: bits of its bytes ('1' is 0x31).
    t.run(&["set", "n", "1"]);
    assert_eq!(t.run(&["getbit", "n", "2"]), Reply::Int(1));
    assert_eq!(t.run(&["getbit", "n", "3"]), Reply::Int(1));
    assert_eq!(t.run(&["getbit", "n", "4"]), Reply::Int(0));
    assert_eq!(t.run(&["setbit", "n", "6", "1"]), Reply::Int(0));
    assert_eq!(t.run(&["get", "n"]), Reply::Bulk(b"3".to_vec()));
    // The expiry is kept.
    t.run(&["set", "e", "a", "px", "100000"]);
    t.run(&["setbit", "e", "20", "1"]);
    assert_eq!(t.run(&["pttl", "e"]), Reply::Int(100000));
    t.check_replay();
}

#[test]
fn setbit_and_getbit_errors_change_nothing() {
    let mut t = T::new();
    t.run(&["hset", "h", "f", "v"]);
    let bad_offset = err("ERR bit offset is not an integer or out of range");
    let bad_bit = err("ERR bit is not an integer or out of range");
    assert_eq!(t.run(&["setbit", "k", "-1", "1"]), bad_offset);
    assert_eq!(t.run(&["setbit", "k", "4294967296", "1"]), bad_offset);
    assert_eq!(t.run(&["setbit", "k", "x", "1"]), bad_offset);
    assert_eq!(t.run(&["setbit", "k", "0", "2"]), bad_bit);
    assert_eq!(t.run(&["setbit", "k", "0", "-1"]), bad_bit);
    assert_eq!(t.run(&["setbit", "k", "0", "x"]), bad_bit);
    assert_eq!(t.run(&["getbit", "k", "-1"]), bad_offset);
    assert_eq!(t.run(&["setbit", "h", "0", "1"]), err(WRONGTYPE));
    assert_eq!(t.run(&["getbit", "h", "0"]), err(WRONGTYPE));
    assert_eq!(t.run(&["exists", "k"]), Reply::Int(0));
    assert_eq!(t.ks.len(), 1);
    t.check_replay();
}

#[test]
fn growth_past_the_memory_limit_is_refused() {
    let mut t = T::new();
    t.run(&["set", "k", "ab"]);
    t.room = 1000;
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(t.run(&["setbit", "k", "4000000000", "1"]), oom);
    assert_eq!(t.run(&["setbit", "new", "80000", "1"]), oom);
    assert_eq!(t.run(&["bitfield", "k", "set", "u8", "#100000", "1"]), oom);
    assert_eq!(t.run(&["strlen", "k"]), Reply::Int(2));
    assert_eq!(t.run(&["exists", "new"]), Reply::Int(0));
    // Within the room, it runs.
    assert_eq!(t.run(&["setbit", "k", "800", "1"]), Reply::Int(0));
    assert_eq!(t.run(&["strlen", "k"]), Reply::Int(101));
    t.check_replay();
}

#[test]
fn bitcount_ranges() {
    let mut t = T::new();
    t.run(&["set", "k", "foobar"]);
    assert_eq!(t.run(&["bitcount", "k"]), Reply::Int(26));
    assert_eq!(t.run(&["bitcount", "k", "0", "0"]), Reply::Int(4));
    assert_eq!(t.run(&["bitcount", "k", "1", "1"]), Reply::Int(6));
    assert_eq!(t.run(&["bitcount", "k", "1", "1", "byte"]), Reply::Int(6));
    assert_eq!(t.run(&["bitcount", "k", "5", "30", "BIT"]), Reply::Int(17));
    assert_eq!(t.run(&["bitcount", "k", "-2", "-1"]), Reply::Int(7));
    assert_eq!(t.run(&["bitcount", "k", "-1", "-2"]), Reply::Int(0));
    assert_eq!(t.run(&["bitcount", "k", "0", "1000"]), Reply::Int(26));
    assert_eq!(t.run(&["bitcount", "k", "1000", "2000"]), Reply::Int(0));
    assert_eq!(t.run(&["bitcount", "k", "0", "-1", "bit"]), Reply::Int(26));
    assert_eq!(t.run(&["bitcount", "k", "3", "3", "bit"]), Reply::Int(0));
    assert_eq!(t.run(&["bitcount", "k", "1", "2", "bit"]), Reply::Int(2));
    assert_eq!(t.run(&["bitcount", "nokey"]), Reply::Int(0));
    assert_eq!(t.run(&["bitcount", "nokey", "0"]), Reply::Int(0));
    assert_eq!(t.run(&["bitcount", "k", "0"]), err("ERR syntax error"));
    assert_eq!(
        t.run(&["bitcount", "k", "0", "1", "bits"]),
        err("ERR syntax error")
    );
    // Both negative, start after end: 0 before the unit is read.
    assert_eq!(t.run(&["bitcount", "k", "-1", "-2", "bits"]), Reply::Int(0));
    assert_eq!(
        t.run(&["bitcount", "k", "x", "1"]),
        err("ERR value is not an integer or out of range")
    );
    t.run(&["set", "e", ""]);
    assert_eq!(t.run(&["bitcount", "e", "0", "-1"]), Reply::Int(0));
    t.run(&["hset", "h", "f", "v"]);
    assert_eq!(t.run(&["bitcount", "h"]), err(WRONGTYPE));
}

#[test]
fn bitpos_finds_bits() {
    let mut t = T::new();
    bytes(&mut t, &[b"set", b"k", &[0, 0x0f, 0x7f]]);
    assert_eq!(t.run(&["bitpos", "k", "1"]), Reply::Int(12));
    assert_eq!(t.run(&["bitpos", "k", "0"]), Reply::Int(0));
    assert_eq!(t.run(&["bitpos", "k", "1", "2"]), Reply::Int(17));
    assert_eq!(
        t.run(&["bitpos", "k", "1", "13", "-1", "bit"]),
        Reply::Int(13)
    );
    assert_eq!(
        t.run(&["bitpos", "k", "0", "17", "-1", "bit"]),
        Reply::Int(-1)
    );
    // Four arguments after the key: the fourth is the end, not the unit.
    assert_eq!(
        t.run(&["bitpos", "k", "0", "17", "bit"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(t.run(&["bitpos", "k", "0", "2"]), Reply::Int(16));
    // Looking for a 0 in a full string: past its end without an end, -1 with one.
    bytes(&mut t, &[b"set", b"ones", &[0xff]]);
    assert_eq!(t.run(&["bitpos", "ones", "0"]), Reply::Int(8));
    assert_eq!(t.run(&["bitpos", "ones", "0", "0"]), Reply::Int(8));
    assert_eq!(t.run(&["bitpos", "ones", "0", "0", "-1"]), Reply::Int(-1));
    assert_eq!(t.run(&["bitpos", "ones", "1", "5", "2"]), Reply::Int(-1));
    assert_eq!(t.run(&["bitpos", "nokey", "0"]), Reply::Int(0));
    assert_eq!(t.run(&["bitpos", "nokey", "1"]), Reply::Int(-1));
    // A missing key answers before the other arguments are read.
    assert_eq!(t.run(&["bitpos", "nokey", "1", "x"]), Reply::Int(-1));
    assert_eq!(
        t.run(&["bitpos", "k", "2"]),
        err("ERR The bit argument must be 1 or 0.")
    );
    assert_eq!(
        t.run(&["bitpos", "k", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["bitpos", "k", "1", "0", "1", "word"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["bitpos", "k", "1", "0", "1", "bit", "x"]),
        err("ERR syntax error")
    );
    t.run(&["set", "e", ""]);
    assert_eq!(t.run(&["bitpos", "e", "0"]), Reply::Int(-1));
    assert_eq!(t.run(&["bitpos", "e", "1"]), Reply::Int(-1));
}

#[test]
fn bitop_on_one_keyspace() {
    let mut t = T::new();
    bytes(&mut t, &[b"set", b"a", &[0xf0, 0x0f, 0xff]]);
    bytes(&mut t, &[b"set", b"b", &[0xff]]);
    assert_eq!(t.run(&["bitop", "and", "d", "a", "b"]), Reply::Int(3));
    assert_eq!(t.logged(), vec![set_rec("d", &[0xf0, 0, 0])]);
    assert_eq!(t.run(&["get", "d"]), Reply::Bulk(vec![0xf0, 0, 0]));
    assert_eq!(
        t.run(&["bitop", "OR", "d", "a", "b", "nokey"]),
        Reply::Int(3)
    );
    assert_eq!(t.run(&["get", "d"]), Reply::Bulk(vec![0xff, 0x0f, 0xff]));
    assert_eq!(t.run(&["bitop", "xor", "d", "a", "b"]), Reply::Int(3));
    assert_eq!(t.run(&["get", "d"]), Reply::Bulk(vec![0x0f, 0x0f, 0xff]));
    assert_eq!(t.run(&["bitop", "not", "d", "b"]), Reply::Int(1));
    assert_eq!(t.run(&["get", "d"]), Reply::Bulk(vec![0]));
    // The destination is a source too; its expiry goes (the key is replaced).
    t.run(&["expire", "d", "100"]);
    assert_eq!(t.run(&["bitop", "or", "d", "d", "a"]), Reply::Int(3));
    assert_eq!(t.run(&["ttl", "d"]), Reply::Int(-1));
    // Only missing or empty sources: the destination is removed.
    t.run(&["set", "e", ""]);
    assert_eq!(t.run(&["bitop", "and", "d", "nokey", "e"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![Record::Del { key: "d".into() }]);
    assert_eq!(t.run(&["exists", "d"]), Reply::Int(0));
    assert_eq!(t.run(&["bitop", "and", "d", "nokey"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    // Errors change nothing.
    t.run(&["hset", "h", "f", "v"]);
    assert_eq!(
        t.run(&["bitop", "or", "d", "nokey", "h", "a"]),
        err(WRONGTYPE)
    );
    assert_eq!(t.run(&["bitop", "nand", "d", "a"]), err("ERR syntax error"));
    assert_eq!(
        t.run(&["bitop", "not", "d", "a", "b"]),
        err("ERR BITOP NOT must be called with a single source key.")
    );
    assert_eq!(t.run(&["exists", "d"]), Reply::Int(0));
    // Any type is replaced by the result.
    assert_eq!(t.run(&["bitop", "or", "h", "a"]), Reply::Int(3));
    assert_eq!(t.run(&["type", "h"]), Reply::Simple("string".into()));
    t.check_replay();
}

#[test]
fn bitfield_reads_and_writes() {
    let mut t = T::new();
    assert_eq!(
        t.run(&["bitfield", "k", "set", "i8", "0", "-100", "get", "u4", "0", "get", "i8", "0"]),
        ints(&[0, 9, -100])
    );
    assert_eq!(
        t.logged(),
        vec![set_rec("k", b""), range_rec("k", 0, &[0x9c])]
    );
    assert_eq!(
        t.run(&["bitfield", "k", "incrby", "i8", "0", "-100"]),
        ints(&[56])
    );
    assert_eq!(
        t.run(&[
            "bitfield", "k", "overflow", "sat", "incrby", "i8", "0", "100", "incrby", "u2", "100",
            "7"
        ]),
        ints(&[127, 3])
    );
    // Each byte written is logged, and the string's new end (102 bits: byte 12).
    assert_eq!(
        t.logged(),
        vec![
            range_rec("k", 0, &[0x7f]),
            range_rec("k", 12, &[0b0000_1100])
        ]
    );
    assert_eq!(
        t.run(&[
            "bitfield", "k", "overflow", "fail", "incrby", "u2", "100", "1", "set", "i4", "#0",
            "8", "overflow", "wrap", "set", "i4", "#0", "8"
        ]),
        Reply::Array(vec![Reply::Nil, Reply::Nil, Reply::Int(7)])
    );
    assert_eq!(
        t.run(&["bitfield", "k", "get", "i4", "0", "get", "u63", "0", "get", "i64", "8"]),
        ints(&[-8, 0x4780_0000_0000_0000, 0])
    );
    // FAIL writes nothing but the key is still created and padded (as Redis does).
    assert_eq!(
        t.run(&["bitfield", "f", "overflow", "fail", "set", "u2", "30", "9"]),
        Reply::Array(vec![Reply::Nil])
    );
    assert_eq!(t.logged(), vec![set_rec("f", b""), range_rec("f", 3, &[0])]);
    assert_eq!(t.run(&["strlen", "f"]), Reply::Int(4));
    // Writing the value a field has: nothing logged.
    assert_eq!(t.run(&["bitfield", "f", "set", "u8", "0", "0"]), ints(&[0]));
    assert!(t.logged().is_empty());
    // Only GETs: a read (a missing key reads as zeros, nothing is created).
    assert_eq!(t.run(&["bitfield", "nokey", "get", "u8", "0"]), ints(&[0]));
    assert_eq!(t.run(&["bitfield_ro", "k", "get", "i4", "0"]), ints(&[-8]));
    assert_eq!(t.run(&["bitfield", "nokey"]), Reply::Array(vec![]));
    assert_eq!(t.run(&["exists", "nokey"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn bitfield_overflows() {
    let mut t = T::new();
    let mut one = |op: &[&str]| -> Reply {
        let mut line = vec!["bitfield", "o"];
        line.extend_from_slice(op);
        match t.run(&line) {
            Reply::Array(mut v) => v.pop().unwrap(),
            e => e,
        }
    };
    assert_eq!(one(&["set", "u8", "0", "255"]), Reply::Int(0));
    assert_eq!(one(&["incrby", "u8", "0", "10"]), Reply::Int(9));
    assert_eq!(one(&["incrby", "u8", "0", "-10"]), Reply::Int(255));
    assert_eq!(
        one(&["overflow", "sat", "incrby", "u8", "0", "10"]),
        Reply::Int(255)
    );
    assert_eq!(
        one(&["overflow", "sat", "incrby", "u8", "0", "-300"]),
        Reply::Int(0)
    );
    assert_eq!(
        one(&["overflow", "sat", "set", "u8", "0", "-1"]),
        Reply::Int(0)
    );
    assert_eq!(one(&["get", "u8", "0"]), Reply::Int(255));
    assert_eq!(one(&["set", "u8", "0", "-1"]), Reply::Int(255));
    assert_eq!(one(&["set", "i8", "0", "200"]), Reply::Int(-1));
    assert_eq!(one(&["get", "i8", "0"]), Reply::Int(-56));
    assert_eq!(
        one(&["overflow", "sat", "set", "i8", "0", "200"]),
        Reply::Int(-56)
    );
    assert_eq!(one(&["get", "i8", "0"]), Reply::Int(127));
    assert_eq!(
        one(&["overflow", "sat", "incrby", "i8", "0", "-1000"]),
        Reply::Int(-128)
    );
    assert_eq!(one(&["incrby", "i8", "0", "-1"]), Reply::Int(127));
    // The byte after the string reads as zeros.
    assert_eq!(
        one(&["set", "i64", "0", "9223372036854775807"]),
        Reply::Int(0x7f00_0000_0000_0000)
    );
    assert_eq!(one(&["incrby", "i64", "0", "1"]), Reply::Int(i64::MIN));
    assert_eq!(
        one(&["overflow", "sat", "incrby", "i64", "0", "-1"]),
        Reply::Int(i64::MIN)
    );
    assert_eq!(
        one(&["overflow", "fail", "incrby", "i64", "0", "-1"]),
        Reply::Nil
    );
    assert_eq!(
        one(&["set", "u63", "0", "9223372036854775807"]),
        Reply::Int(0x4000_0000_0000_0000)
    );
    assert_eq!(one(&["incrby", "u63", "0", "1"]), Reply::Int(0));
    assert_eq!(one(&["set", "i1", "0", "1"]), Reply::Int(0));
    assert_eq!(one(&["get", "i1", "0"]), Reply::Int(-1));
    assert_eq!(
        one(&["overflow", "fail", "set", "u1", "0", "2"]),
        Reply::Nil
    );
    t.check_replay();
}

#[test]
fn bitfield_errors_change_nothing() {
    let mut t = T::new();
    let ty = err("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.");
    let offset = err("ERR bit offset is not an integer or out of range");
    assert_eq!(t.run(&["bitfield", "k", "set", "u64", "0", "1"]), ty);
    assert_eq!(t.run(&["bitfield", "k", "set", "i65", "0", "1"]), ty);
    assert_eq!(t.run(&["bitfield", "k", "set", "I8", "0", "1"]), ty);
    assert_eq!(t.run(&["bitfield", "k", "set", "u0", "0", "1"]), ty);
    assert_eq!(t.run(&["bitfield", "k", "get", "u8", "-1"]), offset);
    assert_eq!(t.run(&["bitfield", "k", "get", "u8", "#-1"]), offset);
    assert_eq!(t.run(&["bitfield", "k", "get", "u8", "4294967296"]), offset);
    assert_eq!(t.run(&["bitfield", "k", "get", "u8", "#536870912"]), offset);
    assert_eq!(
        t.run(&["bitfield", "k", "set", "u8", "0", "x"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(
        t.run(&["bitfield", "k", "set", "u8", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["bitfield", "k", "what", "u8", "0"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["bitfield", "k", "overflow", "up", "set", "u8", "0", "1"]),
        err("ERR Invalid OVERFLOW type specified")
    );
    assert_eq!(
        t.run(&["bitfield_ro", "k", "get", "u8", "0", "set", "u8", "0", "1"]),
        err("ERR BITFIELD_RO only supports the GET subcommand")
    );
    t.run(&["hset", "h", "f", "v"]);
    assert_eq!(t.run(&["bitfield", "h", "get", "u8", "0"]), err(WRONGTYPE));
    assert_eq!(
        t.run(&["bitfield", "h", "set", "u8", "0", "1"]),
        err(WRONGTYPE)
    );
    assert_eq!(
        t.run(&["bitfield_ro", "h", "get", "u8", "0"]),
        err(WRONGTYPE)
    );
    assert_eq!(t.run(&["exists", "k"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn bitop_over_several_shards() {
    let (dir, store) = four_shards();
    let k = keys_on_shards("bk", 4);
    let run = |line: &[&str]| {
        let args: Vec<&[u8]> = line.iter().map(|a| a.as_bytes()).collect();
        store.exec(&args)
    };
    store.exec(&[b"set", k[0].as_bytes(), &[0xf0, 0xff]]);
    store.exec(&[b"set", k[1].as_bytes(), &[0x3c]]);
    assert_eq!(run(&["bitop", "and", &k[2], &k[0], &k[1]]), Reply::Int(2));
    assert_eq!(run(&["get", &k[2]]), Reply::Bulk(vec![0x30, 0]));
    assert_eq!(
        run(&["bitop", "xor", &k[3], &k[0], &k[1], &k[2]]),
        Reply::Int(2)
    );
    assert_eq!(run(&["get", &k[3]]), Reply::Bulk(vec![0xfc, 0xff]));
    run(&["del", &k[1]]);
    run(&["hset", &k[1], "f", "v"]);
    assert_eq!(run(&["bitop", "or", &k[2], &k[0], &k[1]]), err(WRONGTYPE));
    assert_eq!(run(&["get", &k[2]]), Reply::Bulk(vec![0x30, 0]));
    assert_eq!(run(&["bitop", "or", &k[2], &k[3], "nokey"]), Reply::Int(2));
    assert_eq!(run(&["bitop", "or", &k[2], "nokey"]), Reply::Int(0));
    assert_eq!(run(&["exists", &k[2]]), Reply::Int(0));
    // After a restart, the same.
    drop(store);
    let store = weft_kv::Store::open(dir.path()).unwrap();
    let get = |k: &str| store.exec(&[b"get", k.as_bytes()]);
    assert_eq!(get(&k[3]), Reply::Bulk(vec![0xfc, 0xff]));
    assert_eq!(get(&k[2]), Reply::Nil);
}

/// OBJECT ENCODING of `key` in a keyspace made by replaying `t`'s whole log.
fn replayed_encoding(t: &T, key: &str) -> String {
    let mut fresh = weft_kv::keyspace::Keyspace::new();
    for r in records(&t.log) {
        fresh.apply(r.as_ref(), t.now);
    }
    let e = fresh.peek(key.as_bytes(), t.now).expect("the key replayed");
    weft_kv::keyspace::value::encoding_name(e.tag(), e.value()).to_string()
}

/// A SETBIT or BITFIELD that changes no bit of an `int` or `embstr` string leaves it
/// `raw`, as Redis does: logged as a `SetRange` of nothing at offset 0 (replayed as
/// `raw`, the bytes unchanged); a string already `raw` logs nothing. BITFIELD with
/// GET alone, or a failed command, changes nothing.
#[test]
fn a_bit_write_that_changes_nothing_leaves_the_string_raw() {
    let mut t = T::new();
    let enc = |t: &mut T, k: &str| t.run(&["object", "encoding", k]);
    t.run(&["set", "n", "1"]);
    t.run(&["set", "s", "hello"]);
    t.run(&["set", "b", "2"]);
    t.run(&["set", "g", "3"]);
    assert_eq!(enc(&mut t, "n"), bulk("int"));
    // '1' is 0x31: bit 2 is 1 already, bit 0 is 0.
    assert_eq!(t.run(&["setbit", "n", "2", "1"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![range_rec("n", 0, b"")]);
    assert_eq!(t.run(&["setbit", "s", "0", "0"]), Reply::Int(0));
    assert_eq!(t.logged(), vec![range_rec("s", 0, b"")]);
    assert_eq!(
        t.run(&["bitfield", "b", "set", "u8", "0", "50"]),
        ints(&[50])
    );
    assert_eq!(t.logged(), vec![range_rec("b", 0, b"")]);
    for k in ["n", "s", "b"] {
        assert_eq!(enc(&mut t, k), bulk("raw"), "{k}");
        assert_eq!(replayed_encoding(&t, k), "raw", "{k}");
    }
    assert_eq!(t.run(&["get", "n"]), bulk("1"));
    assert_eq!(t.run(&["get", "s"]), bulk("hello"));
    assert_eq!(t.run(&["get", "b"]), bulk("2"));
    // Raw already: nothing more is logged.
    assert_eq!(t.run(&["setbit", "n", "2", "1"]), Reply::Int(1));
    assert!(t.logged().is_empty());
    // Reads and errors leave the encoding.
    assert_eq!(t.run(&["bitfield", "g", "get", "u8", "0"]), ints(&[51]));
    assert_eq!(t.run(&["bitfield_ro", "g", "get", "u8", "0"]), ints(&[51]));
    assert_eq!(t.run(&["getbit", "g", "0"]), Reply::Int(0));
    assert_eq!(
        t.run(&["setbit", "g", "0", "2"]),
        err("ERR bit is not an integer or out of range")
    );
    assert!(t.logged().is_empty());
    assert_eq!(enc(&mut t, "g"), bulk("int"));
    // The record is the encoding's only: its bytes replay unchanged.
    t.check_replay();
}
