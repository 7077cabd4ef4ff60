//! The blocking client (`weft_kv::client`) against a real redis-server (Debian's
//! package): each test starts its own on a temporary Unix socket and a free TCP port,
//! without persistence, and kills it at the end. Without /usr/bin/redis-server (or
//! `redis-server` on the PATH) the tests print why and pass without checking.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weft_kv::client::{Addr, Client};
use weft_kv::resp::Reply;

/// A redis-server of one test, killed when dropped.
struct Redis {
    child: Child,
    socket: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts a redis-server, or `None` (with a message) if there is none.
    fn start() -> Option<Redis> {
        let exe = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|e| Command::new(e).arg("--version").output().is_ok());
        let Some(exe) = exe else {
            common::skip("redis-server is not installed (apt-get install redis-server)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("redis.sock");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(exe)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&socket)
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let r = Redis {
            child,
            socket,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Client::connect(&r.unix()).is_err() || Client::connect(&r.tcp()).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(r)
    }

    fn unix(&self) -> Addr {
        Addr::Unix(self.socket.clone())
    }

    fn tcp(&self) -> Addr {
        Addr::Tcp(format!("127.0.0.1:{}", self.port))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ok() -> Reply {
    Reply::OK
}

fn bulk(b: &[u8]) -> Reply {
    Reply::bulk(b)
}

#[test]
fn set_get_nil_errors_integers_arrays() {
    let Some(r) = Redis::start() else {
        return;
    };
    for addr in [r.unix(), r.tcp()] {
        let mut c = Client::connect(&addr).unwrap();
        let k = format!("k-{addr}");
        let k = k.as_bytes();
        assert_eq!(c.command(&[b"DEL", k]).unwrap(), Reply::Int(0));
        assert_eq!(c.command(&[b"GET", k]).unwrap(), Reply::Nil);
        assert_eq!(c.command(&[b"SET", k, b"v1"]).unwrap(), ok());
        assert_eq!(c.command(&[b"GET", k]).unwrap(), bulk(b"v1"));
        // SET ... GET answers the old value: the CLI's created/updated.
        assert_eq!(c.command(&[b"SET", k, b"v2", b"GET"]).unwrap(), bulk(b"v1"));
        assert_eq!(
            c.command(&[b"INCR", k]).unwrap(),
            Reply::error("ERR value is not an integer or out of range".into())
        );
        assert_eq!(c.command(&[b"SET", k, b"41"]).unwrap(), ok());
        assert_eq!(c.command(&[b"INCR", k]).unwrap(), Reply::Int(42));
        assert_eq!(c.command(&[b"INCRBY", k, b"-50"]).unwrap(), Reply::Int(-8));
        match c.command(&[b"NOSUCHCOMMAND", b"x"]).unwrap() {
            Reply::Error(e) => assert!(e.starts_with("ERR unknown command"), "{e}"),
            other => panic!("unknown command answered {other:?}"),
        }
        assert_eq!(
            c.command(&[b"MGET", k, b"missing-key"]).unwrap(),
            Reply::Array(vec![bulk(b"-8"), Reply::Nil])
        );
        assert_eq!(c.command(&[b"DEL", k]).unwrap(), Reply::Int(1));
    }
}

#[test]
fn hello_3_and_maps() {
    let Some(r) = Redis::start() else {
        return;
    };
    let mut c = Client::connect(&r.unix()).unwrap();
    let Reply::Map(hello) = c.hello(3).unwrap() else {
        panic!("HELLO 3 did not answer a map");
    };
    let get = |m: &[(Reply, Reply)], k: &str| {
        m.iter()
            .find(|(key, _)| *key == bulk(k.as_bytes()))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get(&hello, "server"), Some(bulk(b"redis")));
    assert_eq!(get(&hello, "proto"), Some(Reply::Int(3)));
    assert!(matches!(get(&hello, "modules"), Some(Reply::Array(_))));

    // After HELLO 3, CONFIG GET answers a map, a missing value is `_`.
    assert_eq!(
        c.command(&[b"CONFIG", b"GET", b"appendonly"]).unwrap(),
        Reply::Map(vec![(bulk(b"appendonly"), bulk(b"no"))])
    );
    assert_eq!(c.command(&[b"GET", b"missing"]).unwrap(), Reply::Nil);
    // A double and a verbatim string, RESP3-only types.
    assert_eq!(c.command(&[b"SET", b"f", b"1.5"]).unwrap(), ok());
    assert_eq!(
        c.command(&[b"INCRBYFLOAT", b"f", b"1"]).unwrap(),
        bulk(b"2.5"),
        "INCRBYFLOAT answers a bulk string even in RESP3"
    );
    match c.command(&[b"INFO", b"server"]).unwrap() {
        Reply::Verbatim("txt", text) => {
            assert!(String::from_utf8(text).unwrap().contains("redis_version:"))
        }
        other => panic!("INFO in RESP3 answered {other:?}"),
    }
    // HELLO 4 is refused with the server's message.
    let e = c.hello(4).unwrap_err();
    assert!(e.to_string().contains("NOPROTO"), "{e}");
}

#[test]
fn auth_refused_and_accepted() {
    let Some(r) = Redis::start() else {
        return;
    };
    let mut c = Client::connect(&r.tcp()).unwrap();
    let e = c.auth("nope").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(e.to_string().contains("AUTH"), "{e}");
    assert_eq!(
        c.command(&[b"CONFIG", b"SET", b"requirepass", b"s3cret"])
            .unwrap(),
        ok()
    );
    let mut d = Client::connect(&r.tcp()).unwrap();
    match d.command(&[b"GET", b"k"]).unwrap() {
        Reply::Error(e) => assert!(e.starts_with("NOAUTH"), "{e}"),
        other => panic!("unauthenticated GET answered {other:?}"),
    }
    d.auth("s3cret").unwrap();
    assert_eq!(d.command(&[b"GET", b"k"]).unwrap(), Reply::Nil);
}

#[test]
fn pipelining_1000_commands() {
    let Some(r) = Redis::start() else {
        return;
    };
    let mut c = Client::connect(&r.unix()).unwrap();
    for i in 0..1000 {
        let k = format!("key:{i}");
        c.send(&[b"SET", k.as_bytes(), i.to_string().as_bytes()]);
        c.send(&[b"INCR", k.as_bytes()]);
    }
    c.flush().unwrap();
    for i in 0..1000 {
        assert_eq!(c.read_reply().unwrap(), ok(), "SET {i}");
        assert_eq!(c.read_reply().unwrap(), Reply::Int(i + 1), "INCR {i}");
    }
    assert_eq!(c.command(&[b"DBSIZE"]).unwrap(), Reply::Int(1000));
    assert_eq!(c.command(&[b"GET", b"key:999"]).unwrap(), bulk(b"1000"));
}

#[test]
fn large_and_binary_values() {
    let Some(r) = Redis::start() else {
        return;
    };
    for addr in [r.unix(), r.tcp()] {
        let mut c = Client::connect(&addr).unwrap();
        // 10 MB of a pattern that is not periodic in the read buffer's chunk size.
        let big: Vec<u8> = (0..10_000_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(c.command(&[b"SET", b"big", &big]).unwrap(), ok());
        assert_eq!(
            c.command(&[b"STRLEN", b"big"]).unwrap(),
            Reply::Int(10_000_000)
        );
        assert_eq!(c.command(&[b"GET", b"big"]).unwrap(), Reply::Bulk(big));

        // Every byte value, CRLFs and NULs included, in the key and in the value.
        let bin: Vec<u8> = (0..=255u8).chain([b'\r', b'\n', 0, b'\r']).collect();
        let key = b"bin\r\nkey\0";
        assert_eq!(c.command(&[b"SET", key, &bin]).unwrap(), ok());
        assert_eq!(c.command(&[b"GET", key]).unwrap(), Reply::Bulk(bin.clone()));
        assert_eq!(c.command(&[b"SET", b"empty", b""]).unwrap(), ok());
        assert_eq!(c.command(&[b"GET", b"empty"]).unwrap(), bulk(b""));
    }
}

#[test]
fn server_gone_is_an_error() {
    let Some(mut r) = Redis::start() else {
        return;
    };
    let mut c = Client::connect(&r.unix()).unwrap();
    assert_eq!(c.command(&[b"PING"]).unwrap(), Reply::Simple("PONG".into()));
    r.child.kill().unwrap();
    r.child.wait().unwrap();
    // The write may still succeed into the dead socket; the read cannot.
    assert!(c.command(&[b"PING"]).is_err());
    let e = Client::connect(&r.tcp())
        .err()
        .expect("connect to a dead server");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "cannot connect to weft-kv at 127.0.0.1:{}: ",
            r.port
        )) && msg.ends_with("(is `weft kv serve` running?)"),
        "{msg}"
    );
}
