//! The string and key commands run through the command table on one keyspace: their
//! replies, the records they log, and the state a replay of those records rebuilds.

mod common;
use common::*;
use weft_kv::log::StrEnc;

fn set_rec(k: &str, v: &str, at: Option<u64>) -> Record {
    Record::Set {
        key: k.into(),
        value: v.into(),
        expire_at_ms: at,
    }
}

#[test]
fn get_set_basic_and_logged() {
    let mut t = T::new();
    assert_eq!(t.run(&["GET", "k"]), Reply::Nil);
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["set", "k", "v"]), Reply::OK);
    assert_eq!(t.logged(), vec![set_rec("k", "v", None)]);
    assert_eq!(t.run(&["get", "k"]), bulk("v"));
    assert_eq!(
        t.run(&["get", "k", "x"]),
        err("ERR wrong number of arguments for 'get' command")
    );
    t.check_replay();
}

#[test]
fn set_options() {
    let mut t = T::new();
    // NX / XX
    assert_eq!(t.run(&["set", "k", "1", "xx"]), Reply::Nil);
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["set", "k", "1", "nx"]), Reply::OK);
    assert_eq!(t.run(&["set", "k", "2", "nx"]), Reply::Nil);
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["set", "k", "2", "XX"]), Reply::OK);
    assert_eq!(
        t.run(&["set", "k", "3", "nx", "xx"]),
        err("ERR syntax error")
    );
    // GET (also when NX stops it)
    assert_eq!(t.run(&["set", "k", "3", "get"]), bulk("2"));
    assert_eq!(t.run(&["set", "k", "4", "nx", "get"]), bulk("3"));
    assert_eq!(t.run(&["get", "k"]), bulk("3"));
    assert_eq!(t.run(&["set", "new", "x", "get"]), Reply::Nil);
    // EX / PX / EXAT / PXAT
    assert_eq!(t.run(&["set", "k", "v", "ex", "10"]), Reply::OK);
    assert_eq!(t.logged(), vec![set_rec("k", "v", Some(NOW + 10_000))]);
    assert_eq!(t.run(&["set", "k", "v", "px", "10"]), Reply::OK);
    assert_eq!(t.logged(), vec![set_rec("k", "v", Some(NOW + 10))]);
    let at = (NOW / 1000 + 100).to_string();
    assert_eq!(t.run(&["set", "k", "v", "exat", &at]), Reply::OK);
    assert_eq!(
        t.logged(),
        vec![set_rec("k", "v", Some((NOW / 1000 + 100) * 1000))]
    );
    let at = (NOW + 5).to_string();
    assert_eq!(t.run(&["set", "k", "v", "pxat", &at]), Reply::OK);
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(5));
    // repeated EX overrides; mixed kinds are a syntax error
    assert_eq!(t.run(&["set", "k", "v", "ex", "10", "ex", "20"]), Reply::OK);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(20));
    assert_eq!(
        t.run(&["set", "k", "v", "ex", "10", "px", "20"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["set", "k", "v", "ex", "10", "keepttl"]),
        err("ERR syntax error")
    );
    assert_eq!(t.run(&["set", "k", "v", "ex"]), err("ERR syntax error"));
    assert_eq!(
        t.run(&["set", "k", "v", "persist"]),
        err("ERR syntax error")
    );
    // KEEPTTL keeps it, a plain SET drops it
    assert_eq!(t.run(&["set", "k", "w", "keepttl"]), Reply::OK);
    assert_eq!(t.logged(), vec![set_rec("k", "w", Some(NOW + 20_000))]);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(20));
    assert_eq!(t.run(&["set", "k", "w"]), Reply::OK);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(-1));
    // bad expire times
    for (opt, v) in [
        ("ex", "0"),
        ("px", "-1"),
        ("ex", "9223372036854776"),
        ("px", "9223372036854775807"),
    ] {
        assert_eq!(
            t.run(&["set", "k", "v", opt, v]),
            err("ERR invalid expire time in 'set' command"),
            "{opt} {v}"
        );
    }
    assert_eq!(
        t.run(&["set", "k", "v", "ex", "abc"]),
        err("ERR value is not an integer or out of range")
    );
    assert_eq!(t.run(&["get", "k"]), bulk("w"));
    // an absolute time already passed: the key is gone, logged as Del
    assert_eq!(t.run(&["set", "k", "v", "pxat", "1"]), Reply::OK);
    assert_eq!(t.logged(), vec![Record::Del { key: b"k".to_vec() }]);
    assert_eq!(t.run(&["exists", "k"]), Reply::Int(0));
    t.check_replay();
}

#[test]
fn expired_keys_behave_as_absent() {
    let mut t = T::new();
    t.run(&["set", "k", "v", "px", "100"]);
    t.now += 100;
    assert_eq!(t.run(&["get", "k"]), Reply::Nil);
    assert_eq!(t.run(&["set", "k", "n", "nx"]), Reply::OK);
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(-1));
    t.run(&["set", "e", "5", "px", "10"]);
    t.now += 10;
    assert_eq!(t.run(&["incr", "e"]), Reply::Int(1));
    assert_eq!(t.run(&["append", "e2", "x"]), Reply::Int(1));
    t.check_replay();
}

#[test]
fn setnx_setex_psetex_getset_getdel() {
    let mut t = T::new();
    assert_eq!(t.run(&["setnx", "k", "a"]), Reply::Int(1));
    assert_eq!(t.run(&["setnx", "k", "b"]), Reply::Int(0));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["setex", "k", "10", "c"]), Reply::OK);
    assert_eq!(t.logged(), vec![set_rec("k", "c", Some(NOW + 10_000))]);
    assert_eq!(
        t.run(&["setex", "k", "0", "c"]),
        err("ERR invalid expire time in 'setex' command")
    );
    assert_eq!(
        t.run(&["psetex", "k", "-5", "c"]),
        err("ERR invalid expire time in 'psetex' command")
    );
    assert_eq!(t.run(&["psetex", "k", "1500", "d"]), Reply::OK);
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(1500));
    assert_eq!(t.run(&["getset", "k", "e"]), bulk("d"));
    assert_eq!(t.run(&["ttl", "k"]), Reply::Int(-1));
    assert_eq!(t.run(&["getset", "n", "e"]), Reply::Nil);
    assert_eq!(t.run(&["getdel", "k"]), bulk("e"));
    assert_eq!(t.logged(), vec![Record::Del { key: b"k".to_vec() }]);
    assert_eq!(t.run(&["getdel", "k"]), Reply::Nil);
    assert!(t.logged().is_empty());
    t.check_replay();
}

#[test]
fn getex() {
    let mut t = T::new();
    assert_eq!(t.run(&["getex", "k"]), Reply::Nil);
    // a missing key answers nil before the time is validated (Redis 7.0)
    assert_eq!(t.run(&["getex", "k", "ex", "0"]), Reply::Nil);
    t.run(&["set", "k", "v"]);
    assert_eq!(t.run(&["getex", "k"]), bulk("v"));
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["getex", "k", "ex", "0"]),
        err("ERR invalid expire time in 'getex' command")
    );
    assert_eq!(t.run(&["getex", "k", "ex", "100"]), bulk("v"));
    assert_eq!(
        t.logged(),
        vec![Record::Expire {
            key: b"k".to_vec(),
            at_ms: Some(NOW + 100_000)
        }]
    );
    assert_eq!(t.run(&["getex", "k", "persist"]), bulk("v"));
    assert_eq!(
        t.logged(),
        vec![Record::Expire {
            key: b"k".to_vec(),
            at_ms: None
        }]
    );
    assert_eq!(t.run(&["getex", "k", "persist"]), bulk("v"));
    assert!(t.logged().is_empty());
    assert_eq!(
        t.run(&["getex", "k", "persist", "ex", "1"]),
        err("ERR syntax error")
    );
    assert_eq!(t.run(&["getex", "k", "nx"]), err("ERR syntax error"));
    assert_eq!(t.run(&["getex", "k", "pxat", "1"]), bulk("v"));
    assert_eq!(t.logged(), vec![Record::Del { key: b"k".to_vec() }]);
    assert_eq!(t.run(&["get", "k"]), Reply::Nil);
    t.check_replay();
}

#[test]
fn mget_mset() {
    let mut t = T::new();
    assert_eq!(t.run(&["mset", "a", "1", "b", "2", "a", "3"]), Reply::OK);
    assert_eq!(t.logged().len(), 3);
    assert_eq!(
        t.run(&["mget", "a", "x", "b"]),
        Reply::Array(vec![bulk("3"), Reply::Nil, bulk("2")])
    );
    assert_eq!(
        t.run(&["mset", "a", "1", "b"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    assert_eq!(
        t.run(&["mset", "a"]),
        err("ERR wrong number of arguments for 'mset' command")
    );
    t.check_replay();
}

#[test]
fn counters() {
    let mut t = T::new();
    assert_eq!(t.run(&["incr", "n"]), Reply::Int(1));
    assert_eq!(t.logged(), vec![set_rec("n", "1", None)]);
    assert_eq!(t.run(&["incrby", "n", "41"]), Reply::Int(42));
    assert_eq!(t.run(&["decr", "n"]), Reply::Int(41));
    assert_eq!(t.run(&["decrby", "n", "-9"]), Reply::Int(50));
    t.run(&["expire", "n", "100"]);
    assert_eq!(t.run(&["incr", "n"]), Reply::Int(51));
    assert_eq!(t.logged(), vec![set_rec("n", "51", Some(NOW + 100_000))]);
    assert_eq!(t.run(&["ttl", "n"]), Reply::Int(100));
    for bad in [
        "007",
        "+1",
        " 1",
        "1 ",
        "",
        "1.0",
        "abc",
        "-0",
        "99999999999999999999",
    ] {
        t.run(&["set", "b", bad]);
        assert_eq!(
            t.run(&["incr", "b"]),
            err("ERR value is not an integer or out of range"),
            "{bad:?}"
        );
    }
    assert_eq!(
        t.run(&["incrby", "n", "x"]),
        err("ERR value is not an integer or out of range")
    );
    t.run(&["set", "m", "9223372036854775807"]);
    assert_eq!(
        t.run(&["incr", "m"]),
        err("ERR increment or decrement would overflow")
    );
    assert!(t.logged().is_empty());
    t.run(&["set", "m", "-9223372036854775808"]);
    assert_eq!(
        t.run(&["decr", "m"]),
        err("ERR increment or decrement would overflow")
    );
    assert_eq!(
        t.run(&["decrby", "m", "-9223372036854775808"]),
        err("ERR decrement would overflow")
    );
    assert_eq!(
        t.run(&["incrby", "m", "9223372036854775807"]),
        Reply::Int(-1)
    );
    t.check_replay();
}

#[test]
fn incrbyfloat() {
    let mut t = T::new();
    assert_eq!(t.run(&["incrbyfloat", "f", "0.1"]), bulk("0.1"));
    assert_eq!(t.run(&["incrbyfloat", "f", "0.2"]), bulk("0.3"));
    assert_eq!(t.logged(), vec![float_rec("f", "0.3", None)]);
    assert_eq!(t.run(&["get", "f"]), bulk("0.3"));
    assert_eq!(
        t.run(&["incrbyfloat", "f", "1e-16"]),
        bulk("0.3000000000000001")
    );
    assert_eq!(t.run(&["incrbyfloat", "g", "5.0e3"]), bulk("5000"));
    assert_eq!(t.run(&["incrbyfloat", "g", "-5000"]), bulk("0"));
    assert_eq!(t.run(&["incrbyfloat", "g", "-1.5"]), bulk("-1.5"));
    assert_eq!(
        t.run(&["incrbyfloat", "g", "abc"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        t.run(&["incrbyfloat", "g", " 1"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        t.run(&["incrbyfloat", "g", "inf"]),
        err("ERR increment would produce NaN or Infinity")
    );
    t.run(&["set", "s", "x"]);
    assert_eq!(
        t.run(&["incrbyfloat", "s", "1"]),
        err("ERR value is not a valid float")
    );
    t.run(&["set", "i", "10"]);
    assert_eq!(t.run(&["incrbyfloat", "i", "0.5"]), bulk("10.5"));
    assert_eq!(t.logged(), vec![float_rec("i", "10.5", None)]);
    t.check_replay();
}

/// A `SetStr` record of a string made from a float.
fn float_rec(k: &str, v: &str, at: Option<u64>) -> Record {
    Record::SetStr {
        key: k.into(),
        value: v.into(),
        expire_at_ms: at,
        enc: StrEnc::Float,
    }
}

/// A string's encoding follows how it was made, as in Redis 7.0: INCRBYFLOAT's
/// result is `embstr` even when its text is an integer (`raw` past 44 bytes), APPEND
/// and SETRANGE make `raw`, SET and INCR decide by the bytes again; each is logged so
/// that a replay rebuilds the same encoding.
#[test]
fn string_encoding_follows_how_it_was_made() {
    let mut t = T::new();
    let enc = |t: &mut T, k: &str| t.run(&["object", "encoding", k]);
    assert_eq!(t.run(&["incrbyfloat", "f", "1e3"]), bulk("1000"));
    assert_eq!(t.logged(), vec![float_rec("f", "1000", None)]);
    assert_eq!(enc(&mut t, "f"), bulk("embstr"));
    t.run(&["set", "e", "1000", "px", "100000"]);
    assert_eq!(t.run(&["incrbyfloat", "e", "0"]), bulk("1000"));
    let at = Some(t.now + 100000);
    assert_eq!(t.logged(), vec![float_rec("e", "1000", at)]);
    assert_eq!(enc(&mut t, "e"), bulk("embstr"));
    let long = "1".to_string() + &"0".repeat(50);
    assert!(!t.run(&["incrbyfloat", "l", "1e50"]).is_error());
    assert_eq!(enc(&mut t, "l"), bulk("raw"));
    t.run(&["set", "a", "12"]);
    assert_eq!(enc(&mut t, "a"), bulk("int"));
    t.run(&["append", "a", "3"]);
    assert_eq!(enc(&mut t, "a"), bulk("raw"));
    t.run(&["set", "r", "abc"]);
    t.run(&["setrange", "r", "0", "1"]);
    assert_eq!(enc(&mut t, "r"), bulk("raw"));
    t.check_replay();
    // SET and INCR make the string anew.
    t.run(&["set", "l", &long]);
    assert_eq!(enc(&mut t, "l"), bulk("raw"));
    t.run(&["set", "l", "7"]);
    assert_eq!(enc(&mut t, "l"), bulk("int"));
    assert_eq!(t.run(&["incr", "f"]), Reply::Int(1001));
    assert_eq!(enc(&mut t, "f"), bulk("int"));
    // An error changes nothing.
    t.run(&["incrbyfloat", "g", "2.5"]);
    assert!(t.run(&["incrbyfloat", "g", "inf"]).is_error());
    assert!(t.logged().is_empty());
    assert_eq!(enc(&mut t, "g"), bulk("embstr"));
    t.check_replay();
}

/// INCRBYFLOAT computes and prints as Redis (C's long double, 17 decimals, trimmed),
/// which an f64 computation does not: each answer here is redis-server 7's.
#[test]
fn incrbyfloat_in_extended_precision() {
    let mut t = T::new();
    t.run(&["set", "k", "-84"]);
    assert_eq!(t.run(&["incrbyfloat", "k", "0.1"]), bulk("-83.9"));
    t.run(&["set", "k", "9223372036854775807"]);
    assert_eq!(
        t.run(&["incrbyfloat", "k", "-1.25"]),
        bulk("9223372036854775806")
    );
    // Hexadecimal numbers, as C's strtold reads them.
    t.run(&["set", "k", "0x10"]);
    assert_eq!(t.run(&["incrbyfloat", "k", "0x1p3"]), bulk("24"));
    assert_eq!(t.run(&["incrbyfloat", "k", "0X.8P1"]), bulk("25"));
    // 1e400 is within long double's range: its exact binary value is printed.
    t.run(&["set", "k", "1"]);
    let Reply::Bulk(big) = t.run(&["incrbyfloat", "k", "1e400"]) else {
        panic!("not a bulk")
    };
    assert_eq!(big.len(), 401);
    assert!(big.starts_with(b"10000000000000000000281880683947586514586453433629"));
    // 0.3 + 1500 keeps long double's extra digits.
    t.run(&["set", "k", "0.3"]);
    assert_eq!(
        t.run(&["incrbyfloat", "k", "1500"]),
        bulk("1500.30000000000000004")
    );
    // A sum that rounds to -0 prints 0; tiny values print as 0.
    t.run(&["set", "k", "-1e-30"]);
    assert_eq!(t.run(&["incrbyfloat", "k", "0"]), bulk("0"));
    // Refused as strtold or Redis refuses them.
    for bad in [
        "1e5000", "-1e5000", "1e-5000", "nan", "-nan", "1e", "0x", "0x1p", " 1", "1 ", "", "1_0",
        ".", "infin",
    ] {
        assert_eq!(
            t.run(&["incrbyfloat", "k", bad]),
            err("ERR value is not a valid float"),
            "{bad:?}"
        );
    }
    for inf in ["inf", "-Infinity", "+INF"] {
        assert_eq!(
            t.run(&["incrbyfloat", "k", inf]),
            err("ERR increment would produce NaN or Infinity"),
            "{inf:?}"
        );
    }
    // The longest accepted number text is 5119 bytes.
    let long = format!("1.{}", "0".repeat(5117));
    assert_eq!(t.run(&["incrbyfloat", "z", &long]), bulk("1"));
    let longer = format!("1.{}", "0".repeat(5118));
    assert_eq!(
        t.run(&["incrbyfloat", "z", &longer]),
        err("ERR value is not a valid float")
    );
    t.check_replay();
}

#[test]
fn append_strlen() {
    let mut t = T::new();
    assert_eq!(t.run(&["append", "k", "ab"]), Reply::Int(2));
    assert_eq!(
        t.logged(),
        vec![set_rec("k", "ab", None)],
        "a new key: its state"
    );
    assert_eq!(t.run(&["append", "k", "cd"]), Reply::Int(4));
    // An existing one: only the piece.
    let piece = |p: &str| Record::Append {
        key: b"k".to_vec(),
        piece: p.as_bytes().to_vec(),
    };
    assert_eq!(t.logged(), vec![piece("cd")]);
    assert_eq!(t.run(&["append", "k", ""]), Reply::Int(4));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["strlen", "k"]), Reply::Int(4));
    assert_eq!(t.run(&["strlen", "nope"]), Reply::Int(0));
    t.run(&["pexpire", "k", "500"]);
    t.run(&["append", "k", "e"]);
    assert_eq!(t.logged(), vec![piece("e")]);
    assert_eq!(t.run(&["pttl", "k"]), Reply::Int(500), "the expiry is kept");
    assert_eq!(t.run(&["append", "empty", ""]), Reply::Int(0));
    assert_eq!(t.run(&["exists", "empty"]), Reply::Int(1));
    t.check_replay();
}

#[test]
fn getrange() {
    let mut t = T::new();
    t.run(&["set", "k", "This is a string"]);
    let cases = [
        ("0", "3", "This"),
        ("-3", "-1", "ing"),
        ("0", "-1", "This is a string"),
        ("10", "100", "string"),
        ("-100", "3", "This"),
        ("5", "3", ""),
        ("-1", "-5", ""),
        ("100", "200", ""),
        ("-1", "-1", "g"),
    ];
    for (s, e, want) in cases {
        assert_eq!(t.run(&["getrange", "k", s, e]), bulk(want), "{s} {e}");
    }
    assert_eq!(t.run(&["getrange", "none", "0", "-1"]), bulk(""));
    assert_eq!(
        t.run(&["getrange", "k", "a", "1"]),
        err("ERR value is not an integer or out of range")
    );
    t.run(&["set", "e", ""]);
    assert_eq!(t.run(&["getrange", "e", "0", "-1"]), bulk(""));
}

#[test]
fn setrange() {
    let mut t = T::new();
    assert_eq!(t.run(&["setrange", "k", "5", "ab"]), Reply::Int(7));
    // A new key: an empty string, then the piece at its offset (not the padding).
    let piece = |offset: u64, p: &str| Record::SetRange {
        key: b"k".to_vec(),
        offset,
        piece: p.as_bytes().to_vec(),
    };
    assert_eq!(t.logged(), vec![set_rec("k", "", None), piece(5, "ab")]);
    assert_eq!(t.run(&["get", "k"]), Reply::Bulk(b"\0\0\0\0\0ab".to_vec()));
    assert_eq!(t.run(&["setrange", "k", "0", "xy"]), Reply::Int(7));
    assert_eq!(t.logged(), vec![piece(0, "xy")]);
    assert_eq!(t.run(&["get", "k"]), Reply::Bulk(b"xy\0\0\0ab".to_vec()));
    assert_eq!(t.run(&["setrange", "k", "100", ""]), Reply::Int(7));
    assert!(t.logged().is_empty());
    assert_eq!(t.run(&["setrange", "none", "3", ""]), Reply::Int(0));
    assert_eq!(t.run(&["exists", "none"]), Reply::Int(0));
    assert_eq!(
        t.run(&["setrange", "k", "-1", "a"]),
        err("ERR offset is out of range")
    );
    assert_eq!(
        t.run(&["setrange", "k", "536870912", "a"]),
        err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
    );
    assert_eq!(t.run(&["setrange", "k", "536870911", ""]), Reply::Int(7));
    t.check_replay();
}

#[test]
fn table_lookup_arity_unknown() {
    assert_eq!(lookup(b"GeT").unwrap().name, "get");
    assert_eq!(lookup(b"INCRBYFLOAT").unwrap().name, "incrbyfloat");
    assert!(lookup(b"gett").is_none());
    assert!(lookup(b"").is_none());
    assert!(lookup(&[b'a'; 40]).is_none());
    for c in commands::table() {
        let found = lookup(c.name.to_uppercase().as_bytes()).expect(c.name);
        assert_eq!(found.name, c.name);
    }
    for name in [
        "ping", "hello", "auth", "keys", "scan", "flushall", "wait", "shutdown", "info", "config",
    ] {
        assert!(
            matches!(lookup(name.as_bytes()).unwrap().exec, Exec::Server),
            "{name}"
        );
    }
    let auth = lookup(b"auth").unwrap();
    assert_ne!(auth.flags & commands::flags::NOAUTH, 0);
    assert_eq!(lookup(b"get").unwrap().flags & commands::flags::NOAUTH, 0);
    let mset = lookup(b"mset").unwrap();
    assert_eq!((mset.first_key, mset.last_key, mset.step), (1, -1, 2));
    assert!(matches!(mset.exec, Exec::Split(_, commands::Merge::AllOk)));
    let args = |v: &[&str]| v.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>();
    assert!(check_arity(lookup(b"set").unwrap(), &args(&["set", "k"])).is_err());
    assert!(check_arity(lookup(b"set").unwrap(), &args(&["set", "k", "v", "nx"])).is_ok());
    assert_eq!(
        check_arity(lookup(b"SET").unwrap(), &args(&["SET", "k"])),
        Err(err("ERR wrong number of arguments for 'set' command"))
    );
    assert_eq!(
        commands::unknown(&args(&["foo", "a", "b"])),
        err("ERR unknown command 'foo', with args beginning with: 'a' 'b' ")
    );
    assert_eq!(
        commands::unknown(&args(&["foo"])),
        err("ERR unknown command 'foo', with args beginning with: ")
    );
}
