//! The geo commands: replies as Redis 7.0 gives them (the digits of positions,
//! distances and geohashes, errors), the sorted set of geohashes they keep (its scores
//! and what a replay of the log rebuilds), RESP2 and RESP3 shapes; and the forms that
//! store, through the embedded store of four shards, recovered by reopening it.

mod common;
use common::*;

/// The RESP2 and RESP3 encodings of a reply, as text.
fn wire(r: &Reply) -> (String, String) {
    let (mut two, mut three) = (Vec::new(), Vec::new());
    r.encode(2, &mut two);
    r.encode(3, &mut three);
    (
        String::from_utf8(two).unwrap(),
        String::from_utf8(three).unwrap(),
    )
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Palermo and Catania, as in Redis's documentation.
fn sicily(t: &mut T) {
    assert_eq!(
        t.run(&[
            "geoadd",
            "Sicily",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania"
        ]),
        Reply::Int(2)
    );
}

#[test]
fn geoadd_keeps_a_sorted_set_of_redis_geohashes_and_logs_as_zadd() {
    let mut t = T::new();
    sicily(&mut t);
    // The scores are the 52-bit geohashes Redis gives these points.
    let (mut two, _) = wire(&t.run(&["zrange", "Sicily", "0", "-1", "withscores"]));
    two = two.replace("\r\n", " ");
    assert_eq!(
        two,
        "*4 $7 Palermo $16 3479099956230698 $7 Catania $16 3479447370796909 "
    );
    // NX: only new members; XX: only existing ones; CH counts moved ones.
    assert_eq!(
        t.run(&["geoadd", "Sicily", "nx", "1", "1", "Palermo", "2", "2", "x"]),
        Reply::Int(1)
    );
    assert_eq!(
        t.run(&["geoadd", "Sicily", "xx", "ch", "1", "1", "Palermo", "3", "3", "y"]),
        Reply::Int(1)
    );
    assert_eq!(t.run(&["zcard", "Sicily"]), Reply::Int(3));
    assert_eq!(
        t.run(&["geoadd", "Sicily", "ch", "1", "1", "Palermo", "2", "2", "x"]),
        Reply::Int(0)
    );
    t.check_replay();
}

#[test]
fn geoadd_errors_change_nothing() {
    let mut t = T::new();
    sicily(&mut t);
    assert_eq!(
        t.run(&["geoadd", "Sicily", "200", "100", "x"]),
        err("ERR invalid longitude,latitude pair 200.000000,100.000000")
    );
    assert_eq!(
        t.run(&["geoadd", "Sicily", "1", "85.06", "x"]),
        err("ERR invalid longitude,latitude pair 1.000000,85.060000")
    );
    assert_eq!(
        t.run(&["geoadd", "Sicily", "1", "2", "a", "x", "2", "b"]),
        err("ERR value is not a valid float")
    );
    assert_eq!(
        t.run(&["geoadd", "Sicily", "xx", "nx", "1", "2", "x"]),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&["geoadd", "Sicily", "nx", "1", "2", "a", "b"]),
        err("ERR syntax error")
    );
    assert!(t.last.is_empty());
    assert_eq!(t.run(&["zcard", "Sicily"]), Reply::Int(2));
    t.run(&["set", "s", "x"]);
    assert_eq!(t.run(&["geoadd", "s", "1", "2", "a"]), err(WRONGTYPE));
    t.check_replay();
}

#[test]
fn geopos_geohash_and_geodist_print_redis_digits() {
    let mut t = T::new();
    sicily(&mut t);
    let pos = t.run(&["geopos", "Sicily", "Palermo", "nope"]);
    assert_eq!(
        pos,
        Reply::Array(vec![
            Reply::Array(vec![
                Reply::HumanDouble(13.361389338970184),
                Reply::HumanDouble(38.1155563954963)
            ]),
            Reply::NilArray
        ])
    );
    assert_eq!(
        wire(&pos),
        (
            "*2\r\n*2\r\n$20\r\n13.36138933897018433\r\n$20\r\n38.11555639549629859\r\n*-1\r\n"
                .to_string(),
            "*2\r\n*2\r\n,13.36138933897018433\r\n,38.11555639549629859\r\n_\r\n".to_string()
        )
    );
    assert_eq!(
        t.run(&["geopos", "nokey", "a"]),
        Reply::Array(vec![Reply::NilArray])
    );
    assert_eq!(
        t.run(&["geohash", "Sicily", "Palermo", "Catania", "nope"]),
        Reply::Array(vec![bulk("sqc8b49rny0"), bulk("sqdtr74hyu0"), Reply::Nil])
    );
    assert_eq!(
        t.run(&["geodist", "Sicily", "Palermo", "Catania"]),
        bulk("166274.1516")
    );
    assert_eq!(
        t.run(&["geodist", "Sicily", "Palermo", "Catania", "KM"]),
        bulk("166.2742")
    );
    assert_eq!(
        t.run(&["geodist", "Sicily", "Palermo", "Catania", "mi"]),
        bulk("103.3182")
    );
    assert_eq!(
        t.run(&["geodist", "Sicily", "Palermo", "Catania", "yd"]),
        err("ERR unsupported unit provided. please use M, KM, FT, MI")
    );
    assert_eq!(t.run(&["geodist", "Sicily", "Palermo", "nope"]), Reply::Nil);
    assert_eq!(t.run(&["geodist", "nokey", "a", "b"]), Reply::Nil);
    t.run(&["set", "s", "x"]);
    assert_eq!(t.run(&["geopos", "s", "a"]), err(WRONGTYPE));
    assert_eq!(t.run(&["geohash", "s", "a"]), err(WRONGTYPE));
    assert_eq!(t.run(&["geodist", "s", "a", "b"]), err(WRONGTYPE));
}

#[test]
fn geosearch_finds_by_radius_and_box_with_its_options() {
    let mut t = T::new();
    sicily(&mut t);
    let with = t.run(&[
        "georadius_ro",
        "Sicily",
        "15",
        "37",
        "200",
        "km",
        "withdist",
        "withcoord",
        "withhash",
        "asc",
    ]);
    assert_eq!(
        with,
        Reply::Array(vec![
            Reply::Array(vec![
                bulk("Catania"),
                bulk("56.4413"),
                Reply::Int(3479447370796909),
                Reply::Array(vec![
                    Reply::HumanDouble(15.087267458438873),
                    Reply::HumanDouble(37.50266842333162)
                ])
            ]),
            Reply::Array(vec![
                bulk("Palermo"),
                bulk("190.4424"),
                Reply::Int(3479099956230698),
                Reply::Array(vec![
                    Reply::HumanDouble(13.361389338970184),
                    Reply::HumanDouble(38.1155563954963)
                ])
            ])
        ])
    );
    let s = |t: &mut T, a: &[&str]| t.run(&[&["geosearch", "Sicily"][..], a].concat());
    assert_eq!(
        s(
            &mut t,
            &[
                "fromlonlat",
                "15",
                "37",
                "bybox",
                "400",
                "400",
                "km",
                "desc"
            ]
        ),
        bulks(&["Palermo", "Catania"])
    );
    assert_eq!(
        s(
            &mut t,
            &["fromlonlat", "15", "37", "bybox", "200", "200", "km"]
        ),
        bulks(&["Catania"])
    );
    assert_eq!(
        s(&mut t, &["frommember", "Palermo", "byradius", "100", "km"]),
        bulks(&["Palermo"])
    );
    // COUNT without ASC or DESC sorts nearest first.
    assert_eq!(
        s(
            &mut t,
            &[
                "frommember",
                "Catania",
                "byradius",
                "500",
                "km",
                "count",
                "1"
            ]
        ),
        bulks(&["Catania"])
    );
    assert_eq!(
        t.run(&[
            "georadiusbymember_ro",
            "Sicily",
            "Palermo",
            "200",
            "km",
            "desc"
        ]),
        bulks(&["Catania", "Palermo"])
    );
    assert_eq!(
        t.run(&[
            "geosearch",
            "nokey",
            "frommember",
            "a",
            "byradius",
            "1",
            "km"
        ]),
        Reply::Array(vec![])
    );
}

#[test]
fn geosearch_errors_as_redis() {
    let mut t = T::new();
    sicily(&mut t);
    let s = |t: &mut T, a: &[&str]| t.run(&[&["geosearch", "Sicily"][..], a].concat());
    assert_eq!(
        s(&mut t, &["frommember", "Palermo", "count", "1", "asc"]),
        err("ERR exactly one of BYRADIUS and BYBOX can be specified for geosearch")
    );
    assert_eq!(
        s(&mut t, &["byradius", "1", "km", "count", "1"]),
        err("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for geosearch")
    );
    assert_eq!(
        s(
            &mut t,
            &["frommember", "Palermo", "byradius", "1", "km", "any"]
        ),
        err("ERR the ANY argument requires COUNT argument")
    );
    assert_eq!(
        s(&mut t, &["frommember", "nope", "byradius", "1", "km"]),
        err("ERR could not decode requested zset member")
    );
    assert_eq!(
        s(&mut t, &["frommember", "Palermo", "byradius", "-1", "km"]),
        err("ERR radius cannot be negative")
    );
    assert_eq!(
        s(&mut t, &["frommember", "Palermo", "byradius", "a", "km"]),
        err("ERR need numeric radius")
    );
    assert_eq!(
        s(
            &mut t,
            &["fromlonlat", "15", "37", "bybox", "-1", "1", "km"]
        ),
        err("ERR height or width cannot be negative")
    );
    assert_eq!(
        s(
            &mut t,
            &["frommember", "Palermo", "byradius", "1", "km", "count", "0"]
        ),
        err("ERR COUNT must be > 0")
    );
    assert_eq!(
        s(
            &mut t,
            &["frommember", "Palermo", "byradius", "1", "km", "store"]
        ),
        err("ERR syntax error")
    );
    assert_eq!(
        t.run(&[
            "georadius_ro",
            "Sicily",
            "15",
            "37",
            "200",
            "km",
            "store",
            "x"
        ]),
        err("ERR syntax error")
    );
    t.run(&["set", "s", "x"]);
    assert_eq!(
        t.run(&["geosearch", "s", "frommember", "a", "bybox", "1", "1", "km"]),
        err(WRONGTYPE)
    );
}

/// The forms that store, with their source and destination on different shards, and
/// the destinations after the store is opened again.
#[test]
fn store_forms_run_across_shards_and_recover() {
    let (dir, store) = four_shards();
    let keys = keys_on_shards("geo", 3);
    let (src, d1, d2) = (&keys[0], &keys[1], &keys[2]);
    let ex = |store: &weft_kv::Store, args: &[&str]| {
        let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        store.exec(&v)
    };
    ex(
        &store,
        &[
            "geoadd",
            src,
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
        ],
    );
    assert_eq!(
        ex(
            &store,
            &["georadius", src, "15", "37", "200", "km", "store", d1]
        ),
        Reply::Int(2)
    );
    assert_eq!(
        ex(
            &store,
            &["georadius", src, "15", "37", "200", "km", "withdist", "store", d1]
        ),
        err("ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
    );
    assert_eq!(
        ex(
            &store,
            &[
                "geosearchstore",
                d2,
                src,
                "frommember",
                "Palermo",
                "byradius",
                "300",
                "km",
                "storedist",
                "desc"
            ]
        ),
        Reply::Int(2)
    );
    // Without STORE, GEORADIUS answers as GEORADIUS_RO.
    assert_eq!(
        ex(&store, &["georadiusbymember", src, "Catania", "100", "km"]),
        bulks(&["Catania"])
    );
    // No result (or no source) removes the destination.
    ex(&store, &["set", "gone", "x"]);
    assert_eq!(
        ex(
            &store,
            &[
                "georadiusbymember",
                "nokey",
                "a",
                "1",
                "km",
                "store",
                "gone"
            ]
        ),
        Reply::Int(0)
    );
    assert_eq!(ex(&store, &["exists", "gone"]), Reply::Int(0));
    let state = |store: &weft_kv::Store| {
        [
            ex(store, &["zrange", d1, "0", "-1", "withscores"]),
            ex(store, &["zrange", d2, "0", "-1", "withscores"]),
        ]
    };
    let before = state(&store);
    assert_eq!(
        before[0],
        Reply::Pairs(vec![
            (bulk("Palermo"), Reply::Double(3479099956230698.0)),
            (bulk("Catania"), Reply::Double(3479447370796909.0)),
        ])
    );
    assert_eq!(
        before[1],
        Reply::Pairs(vec![
            (bulk("Palermo"), Reply::Double(0.0)),
            (bulk("Catania"), Reply::Double(166.27415156960032)),
        ])
    );
    drop(store);
    let store = weft_kv::Store::open(dir.path()).unwrap();
    assert_eq!(state(&store), before);
}

/// Every geo command is in the table, with its arity, and COMMAND DOCS describes it.
#[test]
fn every_geo_command_is_documented() {
    for name in [
        "geoadd",
        "geodist",
        "geohash",
        "geopos",
        "geosearch",
        "geosearchstore",
        "georadius",
        "georadius_ro",
        "georadiusbymember",
        "georadiusbymember_ro",
    ] {
        assert!(lookup(name.to_uppercase().as_bytes()).is_some(), "{name}");
        let d = weft_kv::commands::docs::doc(name).expect(name);
        assert_eq!(d.group, "geo", "{name}");
    }
    let mut t = T::new();
    assert_eq!(
        t.run(&["geoadd", "g", "1", "2"]),
        err("ERR wrong number of arguments for 'geoadd' command")
    );
    assert_eq!(
        t.run(&["geosearch", "g", "frommember", "a", "byradius", "1"]),
        err("ERR wrong number of arguments for 'geosearch' command")
    );
}

/// GEOADD checks the memory it would add first: refused, it changes and logs nothing.
#[test]
fn geoadd_over_the_memory_limit_changes_nothing() {
    let mut t = T::new();
    sicily(&mut t);
    t.room = 10;
    let long = "m".repeat(100);
    assert_eq!(t.run(&["geoadd", "Sicily", "1", "2", &long]), commands::OOM);
    assert!(t.last.is_empty());
    assert_eq!(t.run(&["geoadd", "other", "1", "2", "a"]), commands::OOM);
    assert!(t.last.is_empty());
    assert_eq!(t.run(&["zcard", "Sicily"]), Reply::Int(2));
    assert_eq!(t.run(&["exists", "other"]), Reply::Int(0));
    t.check_replay();
}
