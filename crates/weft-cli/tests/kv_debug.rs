//! DEBUG in `weft kv serve` (the built binary, two workers): PROTOCOL's replies byte
//! for byte in RESP2 and RESP3 (beside redis-server, when installed), SET-ACTIVE-EXPIRE (expired keys stay until a command
//! finds them, and that removal is logged), SLEEP, OBJECT, RELOAD and LOADAOF (the
//! keyspaces rebuilt from the log are what a restart loads, inside EXEC too), HELP
//! and the error for a subcommand weft-kv does not have; `enable-debug-command`
//! (who may run DEBUG: the Unix socket, loopback TCP, a client from the network), and
//! a DEBUG it refuses inside MULTI refused as it is queued (EXEC aborts).

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::KvServer;
use resp::{show, Wire};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn start(tmp: &Path) -> KvServer {
    let (dir, socket) = (tmp.join("data"), tmp.join("s"));
    KvServer::weft(&dir, &socket, &["--workers", "2"]).unwrap()
}

/// Sends `cmd` (words split at spaces) and then PING, in one write.
fn send_then_ping(s: &mut UnixStream, cmd: &str) {
    let words: Vec<&str> = cmd.split(' ').collect();
    let mut req = format!("*{}\r\n", words.len());
    for w in &words {
        req.push_str(&format!("${}\r\n{w}\r\n", w.len()));
    }
    req.push_str("*1\r\n$4\r\nPING\r\n");
    s.write_all(req.as_bytes()).unwrap();
}

/// Sends `cmd` (words) on a raw connection and reads exactly `want.len()` bytes: they
/// must be `want`; then PING must answer PONG (nothing else followed the reply).
fn raw(s: &mut UnixStream, cmd: &str, want: &[u8]) {
    send_then_ping(s, cmd);
    let mut got = vec![0; want.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(want),
        "{cmd}"
    );
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n", "{cmd}: nothing more");
}

/// Each type's reply, exactly as Redis 7.0 sends it, in RESP2 and in RESP3.
#[test]
fn protocol_answers_each_type_in_both_protocols() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut s = UnixStream::connect(tmp.path().join("s")).unwrap();
    s.set_read_timeout(Some(resp::EVENTUALLY)).unwrap();
    let both: [(&str, &[u8]); 5] = [
        ("string", b"$11\r\nHello World\r\n"),
        ("integer", b":12345\r\n"),
        ("array", b"*3\r\n:0\r\n:1\r\n:2\r\n"),
        ("STRING", b"$11\r\nHello World\r\n"),
        (
            "nosuch",
            b"-ERR unknown reply type: use string, integer, double, bignum, null, array, set, map, attrib, push, verbatim, true or false\r\n",
        ),
    ];
    let attrib = "$39\r\nSome real reply following the attribute\r\n";
    let resp2: Vec<(&str, Vec<u8>)> = vec![
        ("double", b"$5\r\n3.141\r\n".to_vec()),
        (
            "bignum",
            b"$37\r\n1234567999999999999999999999999999999\r\n".to_vec(),
        ),
        ("null", b"$-1\r\n".to_vec()),
        ("set", b"*3\r\n:0\r\n:1\r\n:2\r\n".to_vec()),
        (
            "map",
            b"*6\r\n:0\r\n:0\r\n:1\r\n:1\r\n:2\r\n:0\r\n".to_vec(),
        ),
        ("attrib", attrib.as_bytes().to_vec()),
        (
            "push",
            b"-ERR a push reply needs RESP3 (HELLO 3)\r\n".to_vec(),
        ),
        (
            "verbatim",
            b"$25\r\nThis is a verbatim\nstring\r\n".to_vec(),
        ),
        ("true", b":1\r\n".to_vec()),
        ("false", b":0\r\n".to_vec()),
    ];
    let resp3: Vec<(&str, Vec<u8>)> = vec![
        ("double", b",3.141\r\n".to_vec()),
        ("bignum", b"(1234567999999999999999999999999999999\r\n".to_vec()),
        ("null", b"_\r\n".to_vec()),
        ("set", b"~3\r\n:0\r\n:1\r\n:2\r\n".to_vec()),
        ("map", b"%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n".to_vec()),
        (
            "attrib",
            format!("|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n{attrib}")
                .into_bytes(),
        ),
        (
            "push",
            b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n$40\r\nSome real reply following the push reply\r\n"
                .to_vec(),
        ),
        ("verbatim", b"=29\r\ntxt:This is a verbatim\nstring\r\n".to_vec()),
        ("true", b"#t\r\n".to_vec()),
        ("false", b"#f\r\n".to_vec()),
    ];
    for (name, want) in both.iter().map(|(n, w)| (*n, w.to_vec())).chain(resp2) {
        raw(&mut s, &format!("DEBUG PROTOCOL {name}"), &want);
    }
    // HELLO 3 (its map, then PONG: read up to the PONG), then RESP3.
    s.write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n")
        .unwrap();
    let mut hello = Vec::new();
    while !hello.ends_with(b"+PONG\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        hello.push(b[0]);
    }
    assert_eq!(hello[0], b'%');
    for (name, want) in both.iter().map(|(n, w)| (*n, w.to_vec())).chain(resp3) {
        raw(&mut s, &format!("DEBUG PROTOCOL {name}"), &want);
    }
}

/// A redis-server with DEBUG allowed, on a Unix socket in `dir`; killed when dropped.
struct RedisWithDebug(std::process::Child);

impl Drop for RedisWithDebug {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts one (`None` when redis-server is not installed), and connects to it.
fn redis_with_debug(dir: &Path) -> Option<(RedisWithDebug, UnixStream)> {
    redis_with(dir, "yes")
}

/// Starts a redis-server whose `enable-debug-command` is `debug` (`None` when
/// redis-server is not installed), and connects to it.
fn redis_with(dir: &Path, debug: &str) -> Option<(RedisWithDebug, UnixStream)> {
    let socket = dir.join("r");
    let child = std::process::Command::new("redis-server")
        .args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            debug,
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let server = RedisWithDebug(child);
    let t0 = Instant::now();
    loop {
        if let Ok(s) = UnixStream::connect(&socket) {
            s.set_read_timeout(Some(resp::EVENTUALLY)).unwrap();
            return Some((server, s));
        }
        assert!(t0.elapsed() < resp::EVENTUALLY, "redis-server starts");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `cmd` (words) and then PING; answers the bytes before PING's PONG.
fn reply_bytes(s: &mut UnixStream, cmd: &str) -> Vec<u8> {
    send_then_ping(s, cmd);
    let mut got = Vec::new();
    while !got.ends_with(b"+PONG\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        got.push(b[0]);
    }
    got.truncate(got.len() - 7);
    got
}

/// PROTOCOL's reply of each type, byte for byte as redis-server's (when installed),
/// in RESP2 and RESP3; only the texts of the errors differ.
#[test]
fn protocol_answers_as_redis_server() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let Some((_redis, mut r)) = redis_with_debug(tmp.path()) else {
        return;
    };
    let mut w = UnixStream::connect(tmp.path().join("s")).unwrap();
    w.set_read_timeout(Some(resp::EVENTUALLY)).unwrap();
    let types = [
        "string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib",
        "verbatim", "true", "false",
    ];
    for proto in ["2", "3"] {
        reply_bytes(&mut w, &format!("HELLO {proto}"));
        reply_bytes(&mut r, &format!("HELLO {proto}"));
        for t in types
            .iter()
            .chain(if proto == "3" { &["push"][..] } else { &[][..] })
        {
            let cmd = format!("DEBUG PROTOCOL {t}");
            assert_eq!(
                String::from_utf8_lossy(&reply_bytes(&mut w, &cmd)),
                String::from_utf8_lossy(&reply_bytes(&mut r, &cmd)),
                "RESP{proto} {cmd}"
            );
        }
        for cmd in ["DEBUG PROTOCOL nosuch", "DEBUG NOSUCH"] {
            assert_eq!(reply_bytes(&mut w, cmd)[0], b'-', "{cmd}");
            assert_eq!(reply_bytes(&mut r, cmd)[0], b'-', "{cmd}");
        }
    }
}

/// HELP names what exists; a subcommand weft-kv does not have gets Redis's error.
#[test]
fn help_and_unknown_subcommands() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    let help = show(&c.call(&["DEBUG", "HELP"]));
    for sub in [
        "PROTOCOL",
        "SET-ACTIVE-EXPIRE",
        "PAUSE-CRON",
        "SLEEP",
        "OBJECT",
        "RELOAD",
        "LOADAOF",
    ] {
        assert!(help.contains(&format!("\"{sub}")), "{sub} in {help}");
    }
    for (cmd, sub) in [
        (&["DEBUG", "JMAP"][..], "JMAP"),
        (
            &["DEBUG", "quicklist-packed-threshold", "100"][..],
            "quicklist-packed-threshold",
        ),
        (&["DEBUG", "object"][..], "object"),
        (&["DEBUG", "help", "extra"][..], "help"),
    ] {
        assert_eq!(
            show(&c.call(cmd)),
            format!("-\"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try DEBUG HELP.\"")
        );
    }
    assert_eq!(
        show(&c.call(&["DEBUG"])),
        "-\"ERR wrong number of arguments for 'debug' command\""
    );
    assert_eq!(show(&c.call(&["DEBUG", "SLEEP", "0"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["DEBUG", "SLEEP", "0.01"])), "+\"OK\"");
    for bad in ["abc", "-1", "nan", "90000"] {
        assert_eq!(
            show(&c.call(&["DEBUG", "SLEEP", bad])),
            "-\"ERR the time to sleep must be a number of seconds from 0 to 86400\"",
            "{bad}"
        );
    }
    assert_eq!(
        show(&c.call(&["DEBUG", "SET-ACTIVE-EXPIRE", "x"])),
        "-\"ERR value is not an integer or out of range\""
    );
}

/// DEBUG OBJECT: the value's encoding and bytes, refcount 1, its access clock and idle
/// seconds (numbers); a missing key is an error.
#[test]
fn object_describes_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    c.call(&["SET", "n", "12345"]);
    c.call(&["RPUSH", "l", "a", "b"]);
    c.call(&["SADD", "s", "1", "2"]);
    for (key, enc, len) in [("n", "int", 5), ("l", "listpack", 4), ("s", "intset", 16)] {
        let line = c.call(&["DEBUG", "OBJECT", key]);
        assert_eq!(line.kind(), b'+');
        let text = line.text();
        assert!(text.starts_with("Value at:0x"), "{text}");
        let fields: Vec<&str> = text.split(' ').skip(2).collect();
        assert_eq!(
            fields[..3],
            [
                "refcount:1".to_string(),
                format!("encoding:{enc}"),
                format!("serializedlength:{len}"),
            ],
            "{key}"
        );
        let number = |f: &str, name: &str| {
            f.strip_prefix(name)
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{text}"))
        };
        assert!(number(fields[3], "lru:") < 1 << 24, "{text}");
        number(fields[4], "lru_seconds_idle:");
        assert_eq!(fields.len(), 5, "{text}");
    }
    assert_eq!(
        show(&c.call(&["DEBUG", "OBJECT", "missing"])),
        "-\"ERR no such key\""
    );
}

/// The number of keys DBSIZE counts.
fn dbsize(c: &mut Wire) -> i64 {
    c.call(&["DBSIZE"]).int().unwrap()
}

/// With active expiry off, a key whose time has passed stays (DBSIZE counts it) until
/// a command finds it; that removal is logged (a reload, as a restart, does not
/// bring it back). Turned on again, expired keys go by themselves.
#[test]
fn set_active_expire_leaves_expired_keys_to_commands() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    assert_eq!(
        show(&c.call(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"])),
        "+\"OK\""
    );
    for k in ["a", "b", "c"] {
        c.call(&["SET", k, "v", "PX", "1"]);
    }
    c.call(&["SET", "kept", "v"]);
    // Several of the background expiry's periods (100 ms each) pass: nothing goes.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(dbsize(&mut c), 4);
    assert_eq!(show(&c.call(&["GET", "a"])), "$nil");
    assert_eq!(dbsize(&mut c), 3);
    assert_eq!(show(&c.call(&["EXISTS", "b"])), ":\"0\"");
    assert_eq!(dbsize(&mut c), 2);
    assert_eq!(show(&c.call(&["DEBUG", "RELOAD"])), "+\"OK\"");
    // "c" was never found: the reload, as a restart, drops it as expired.
    assert_eq!(dbsize(&mut c), 1);
    assert_eq!(
        show(&c.call(&["DEBUG", "SET-ACTIVE-EXPIRE", "1"])),
        "+\"OK\""
    );
    c.call(&["SET", "d", "v", "PX", "1"]);
    let t0 = Instant::now();
    while dbsize(&mut c) != 1 {
        assert!(
            t0.elapsed() < resp::EVENTUALLY,
            "the background expiry removes d"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every key's type, value and time to live, as a client reads them.
fn state(c: &mut Wire) -> Vec<String> {
    let mut keys: Vec<String> = c
        .call(&["KEYS", "*"])
        .items()
        .iter()
        .map(|k| k.text())
        .collect();
    keys.sort();
    keys.iter()
        .map(|k| {
            let ty = c.call(&["TYPE", k]).text();
            let v = match ty.as_str() {
                "string" => c.call(&["GET", k]),
                "hash" => c.call(&["HGETALL", k]),
                "list" => c.call(&["LRANGE", k, "0", "-1"]),
                "set" => c.call(&["SORT", k, "ALPHA"]),
                "zset" => c.call(&["ZRANGE", k, "0", "-1", "WITHSCORES"]),
                other => panic!("type {other}"),
            };
            let ttl = c.call(&["TTL", k]).int().unwrap();
            format!("{k} {ty} {} {}", show(&v), ttl > 0)
        })
        .collect()
}

/// OBJECT ENCODING before and after DEBUG RELOAD, beside redis-server (when
/// installed): a sorted set SORT_RO made a tree, a sorted set and a hash that grew past
/// the thresholds and shrank, come back packed (`listpack`), as Redis 7.0 loads them;
/// those still past a threshold stay as they were; the values are unchanged.
#[test]
fn reload_packs_small_sorted_sets_and_hashes_as_redis_server_does() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    let long = "x".repeat(100);
    // Past both servers' thresholds (a hash: 512 fields in Redis 7.0, 128 here).
    let many: Vec<String> = (0..600).map(|i| format!("m{i:03}")).collect();
    let mut zadd: Vec<&str> = vec!["ZADD", "zs"];
    let mut hset: Vec<&str> = vec!["HSET", "hbig"];
    for m in &many {
        zadd.extend(["1", m]);
        hset.extend([m.as_str(), "v"]);
    }
    let script: Vec<Vec<&str>> = vec![
        vec!["ZADD", "z", "1", "a", "2", "b"],
        vec!["SORT_RO", "z", "ALPHA"],
        zadd,
        vec!["ZREMRANGEBYRANK", "zs", "2", "-1"],
        vec!["HSET", "h", "f", &long],
        vec!["HSET", "h", "f", "v", "g", "w"],
        hset,
        vec!["ZADD", "zlong", "1", &long],
    ];
    let keys = ["z", "zs", "h", "hbig", "zlong"];
    let run = |c: &mut Wire| -> Vec<String> {
        let mut out: Vec<String> = script.iter().map(|cmd| show(&c.call(cmd))).collect();
        for phase in 0..2 {
            if phase == 1 {
                out.push(show(&c.call(&["DEBUG", "RELOAD"])));
            }
            for k in keys {
                out.push(format!("{k} {}", show(&c.call(&["OBJECT", "ENCODING", k]))));
            }
            out.push(show(&c.call(&["ZRANGE", "z", "0", "-1", "WITHSCORES"])));
            out.push(show(&c.call(&["ZRANGE", "zs", "0", "-1", "WITHSCORES"])));
            out.push(show(&c.call(&["HGET", "h", "f"])));
            out.push(show(&c.call(&["HLEN", "hbig"])));
        }
        out
    };
    let ours = run(&mut c);
    let encodings = |phase: usize| -> Vec<&str> {
        let at = script.len() + phase * (keys.len() + 4) + phase;
        ours[at..at + keys.len()]
            .iter()
            .map(String::as_str)
            .collect()
    };
    assert_eq!(
        encodings(0),
        [
            "z $\"skiplist\"",
            "zs $\"skiplist\"",
            "h $\"hashtable\"",
            "hbig $\"hashtable\"",
            "zlong $\"skiplist\""
        ]
    );
    assert_eq!(
        encodings(1),
        [
            "z $\"listpack\"",
            "zs $\"listpack\"",
            "h $\"listpack\"",
            "hbig $\"hashtable\"",
            "zlong $\"skiplist\""
        ]
    );
    if let Some((_redis, _)) = redis_with_debug(tmp.path()) {
        let theirs = run(&mut Wire::connect(&tmp.path().join("r")));
        assert_eq!(ours, theirs);
    }
}

/// DEBUG RELOAD and LOADAOF give back the same keys (every type, across shards, with
/// their expiry), as a restart of the server loads them; inside EXEC, an error.
#[test]
fn reload_gives_what_a_restart_loads() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    for i in 0..40 {
        let k = |t: &str| format!("{t}{i}");
        c.call(&["SET", &k("s"), "12"]);
        c.call(&["APPEND", &k("s"), "ab"]);
        c.call(&["HSET", &k("h"), "f", "1", "g", "2"]);
        c.call(&["HINCRBY", &k("h"), "f", "5"]);
        c.call(&["RPUSH", &k("l"), "a", "b", "c"]);
        c.call(&["LPOP", &k("l")]);
        c.call(&["SADD", &k("t"), "x", "y", "z"]);
        c.call(&["SREM", &k("t"), "y"]);
        c.call(&["ZADD", &k("z"), "1", "m", "2.5", "n"]);
        c.call(&["ZINCRBY", &k("z"), "1", "m"]);
        c.call(&["EXPIRE", &k("z"), "1000"]);
    }
    c.call(&["MSET", "m1", "1", "m2", "2"]);
    c.call(&["DEL", "s0", "h1"]);
    let before = state(&mut c);
    assert_eq!(before.len(), 40 * 5 + 2 - 2);
    assert_eq!(show(&c.call(&["DEBUG", "RELOAD"])), "+\"OK\"");
    assert_eq!(state(&mut c), before);
    c.call(&["RPUSH", "l2", "more"]);
    let before = state(&mut c);
    assert_eq!(show(&c.call(&["DEBUG", "LOADAOF"])), "+\"OK\"");
    assert_eq!(state(&mut c), before);
    // Inside EXEC the transaction's own changes are not in the log yet: refused
    // there, and the commands around it run.
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    c.call(&["INCR", "m1"]);
    c.call(&["DEBUG", "RELOAD"]);
    c.call(&["GET", "m1"]);
    assert_eq!(
        show(&c.call(&["EXEC"])),
        "*[:\"2\", -\"ERR DEBUG RELOAD cannot run inside a transaction (its changes are not in the log yet)\", $\"2\"]"
    );
    let before = state(&mut c);
    // What a restart loads is the same.
    drop(c);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit().success());
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    assert_eq!(state(&mut c), before);
}

/// The machine's address on its network (not a loopback one), if it has one: the
/// local address a UDP socket would send from (nothing is sent).
fn network_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind(("0.0.0.0", 0)).ok()?;
    s.connect(("192.0.2.1", 9)).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// `enable-debug-command`: `local` by default (the Unix socket and loopback TCP may
/// run DEBUG; a client from the network may not), `no` refuses everyone, `yes`
/// allows everyone; CONFIG GET shows it and CONFIG SET cannot change it.
#[test]
fn enable_debug_command_says_who_may_run_debug() {
    let refused = |c: &mut Wire| {
        let r = show(&c.call(&["DEBUG", "SLEEP", "0"]));
        assert!(r.starts_with("-\"ERR DEBUG command not allowed."), "{r}");
    };
    let allowed = |c: &mut Wire| assert_eq!(show(&c.call(&["DEBUG", "SLEEP", "0"])), "+\"OK\"");
    let network = network_address();
    for (option, unix_ok, network_ok) in [
        (None, true, false),
        (Some("local"), true, false),
        (Some("no"), false, false),
        (Some("yes"), true, true),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind(("0.0.0.0", 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut extra = vec!["--bind", "0.0.0.0", "--protected-mode", "no"];
        if let Some(o) = option {
            extra.extend(["--enable-debug-command", o]);
        }
        let _server = KvServer::weft_tcp(
            &tmp.path().join("data"),
            &tmp.path().join("s"),
            port,
            &extra,
        )
        .unwrap();
        let mut c = Wire::connect(&tmp.path().join("s"));
        let name = option.unwrap_or("local");
        assert_eq!(
            show(&c.call(&["CONFIG", "GET", "enable-debug-command"])),
            format!("*[$\"enable-debug-command\", $\"{name}\"]")
        );
        let set = show(&c.call(&["CONFIG", "SET", "enable-debug-command", "yes"]));
        assert!(set.starts_with("-\"ERR CONFIG SET failed"), "{set}");
        if unix_ok {
            allowed(&mut c);
        } else {
            refused(&mut c);
        }
        // Loopback TCP is on this machine, as the Unix socket.
        let on_tcp = |ip, ok: bool| {
            let line = debug_over_tcp(ip, port);
            if ok {
                assert_eq!(line, "+OK\r\n", "{name} from {ip}");
            } else {
                assert!(
                    line.starts_with("-ERR DEBUG command not allowed."),
                    "{name} from {ip}: {line}"
                );
            }
        };
        on_tcp(std::net::Ipv4Addr::LOCALHOST.into(), unix_ok);
        if let Some(ip) = network {
            on_tcp(ip, network_ok);
        }
    }
}

/// The replies to a transaction that queues a DEBUG the connection may not run: DEBUG
/// is refused as it is queued (not at EXEC), so EXEC aborts and the transaction's
/// other commands never run, as in redis-server (compared beside it when installed;
/// only the texts of DEBUG's refusal differ).
#[test]
fn debug_refused_in_multi_aborts_the_transaction() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let _server = KvServer::weft(&dir, &socket, &["--enable-debug-command", "no"]).unwrap();
    let script: [&[&str]; 5] = [
        &["MULTI"],
        &["DEBUG", "SLEEP", "0"],
        &["SET", "a", "1"],
        &["EXEC"],
        &["GET", "a"],
    ];
    let replies = |c: &mut Wire| -> Vec<String> {
        let mut lines: Vec<String> = script.iter().map(|cmd| show(&c.call(cmd))).collect();
        // DEBUG's refusal: its first words only.
        lines[1] = lines[1].split('.').next().unwrap().to_string();
        lines
    };
    let want = [
        "+\"OK\"",
        "-\"ERR DEBUG command not allowed",
        "+\"QUEUED\"",
        "-\"EXECABORT Transaction discarded because of previous errors.\"",
        "$nil",
    ];
    let ours = replies(&mut Wire::connect(&socket));
    assert_eq!(ours, want);
    if let Some((_redis, _)) = redis_with(tmp.path(), "no") {
        let theirs = replies(&mut Wire::connect(&tmp.path().join("r")));
        assert_eq!(ours, theirs);
    }
}

/// The first line of the reply to DEBUG SLEEP 0 sent over TCP to `ip`:`port`.
fn debug_over_tcp(ip: std::net::IpAddr, port: u16) -> String {
    let mut tcp = std::net::TcpStream::connect((ip, port)).unwrap();
    tcp.set_read_timeout(Some(resp::EVENTUALLY)).unwrap();
    tcp.write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n0\r\n")
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(tcp), &mut line).unwrap();
    line
}

/// PAUSE-CRON 1 pauses the workers' periodic work: keys whose time has passed stay
/// (DBSIZE counts them) until a command finds them; PAUSE-CRON 0 resumes it and they
/// go by themselves.
#[test]
fn pause_cron_pauses_the_background_expiry() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    assert_eq!(show(&c.call(&["DEBUG", "PAUSE-CRON", "1"])), "+\"OK\"");
    for k in ["a", "b"] {
        c.call(&["SET", k, "v", "PX", "1"]);
    }
    // Several of the background expiry's periods (100 ms each) pass: nothing goes.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(dbsize(&mut c), 2);
    assert_eq!(show(&c.call(&["GET", "a"])), "$nil");
    assert_eq!(dbsize(&mut c), 1);
    assert_eq!(show(&c.call(&["DEBUG", "PAUSE-CRON", "0"])), "+\"OK\"");
    kv::eventually("the expired key goes", || dbsize(&mut c) == 0);
    assert_eq!(
        show(&c.call(&["DEBUG", "PAUSE-CRON", "x"])),
        "-\"ERR value is not an integer or out of range\""
    );
}
