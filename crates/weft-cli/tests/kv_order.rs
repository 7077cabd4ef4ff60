//! Requests of different clients run in the order they reach the server (Redis's
//! rule, which its own suite relies on): a client's EXEC sent just before another
//! client's LPUSH runs first, so the LPUSH (and the BRPOPLPUSH it wakes, which writes
//! the watched key) cannot abort it. `weft kv serve` with one worker, over its Unix
//! socket and over TCP, many rounds. (The runtime's `tests/io_order.rs` reproduces
//! the cause, the order of two sockets' completions on one worker, deterministically.)

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::KvServer;
use std::time::Instant;
use weft_kv::client::{Addr, Client};
use weft_kv::resp::Reply;

/// Rounds of the scenario per transport.
const ROUNDS: usize = 30;

fn call(c: &mut Client, args: &[&str]) -> Reply {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.command(&args).unwrap()
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// One round of Redis's "BRPOPLPUSH does not affect WATCH while still blocked", on
/// new connections to `addr` (and `r`): EXEC's reply.
fn round(addr: &Addr, r: &mut Client) -> Reply {
    call(r, &["DEL", "src", "dst", "k"]);
    call(r, &["SET", "k", "v"]);
    let connect = || {
        let c = Client::connect(addr).unwrap();
        c.set_timeout(Some(kv::CEILING)).unwrap();
        c
    };
    let (mut blocked, mut watching) = (connect(), connect());
    blocked.send(&[b"BRPOPLPUSH", b"src", b"dst", b"0"]);
    blocked.flush().unwrap();
    let t0 = Instant::now();
    loop {
        let (Reply::Verbatim(_, info) | Reply::Bulk(info)) = call(r, &["INFO", "clients"]) else {
            panic!("INFO's text")
        };
        if String::from_utf8_lossy(&info).contains("blocked_clients:1") {
            break;
        }
        assert!(t0.elapsed() < kv::CEILING, "the BRPOPLPUSH blocks");
    }
    assert_eq!(call(&mut watching, &["WATCH", "dst"]), Reply::OK);
    assert_eq!(call(&mut watching, &["MULTI"]), Reply::OK);
    assert_eq!(
        call(&mut watching, &["GET", "k"]),
        Reply::Simple("QUEUED".into())
    );
    // EXEC, then (without waiting for its reply) another client's LPUSH.
    watching.send(&[b"EXEC"]);
    watching.flush().unwrap();
    assert_eq!(call(r, &["LPUSH", "src", "e"]), Reply::Int(1));
    let exec = watching.read_reply().unwrap();
    assert_eq!(blocked.read_reply().unwrap(), bulk("e"));
    exec
}

#[test]
fn an_exec_sent_before_another_clients_write_runs_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let _server = KvServer::weft_tcp(&dir, &socket, port, &["--workers", "1"]).unwrap();
    for addr in [
        Addr::Unix(socket.clone()),
        Addr::Tcp(format!("127.0.0.1:{port}")),
    ] {
        let mut r = Client::connect(&addr).unwrap();
        let aborted = (0..ROUNDS)
            .map(|_| round(&addr, &mut r))
            .filter(|e| *e != Reply::Array(vec![bulk("v")]))
            .count();
        assert_eq!(
            aborted, 0,
            "{addr}: EXEC aborted in {aborted} of {ROUNDS} rounds"
        );
    }
}
