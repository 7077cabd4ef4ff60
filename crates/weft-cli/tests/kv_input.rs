//! How `weft kv serve` takes requests off a Unix socket (`server/input.rs`) and how
//! its workers busy-poll (`server/poll.rs`), against the built binary: a request of
//! commands on keys stays on the socket (peeked) until it is answered, then leaves
//! it; a request holding any other command (BLPOP, SELECT, SUBSCRIBE) leaves it before
//! it runs; requests split across many writes, large values and pipelines mixing both
//! kinds are answered exactly; an idle server stops polling (with `WEFT_KV_POLL=1`).
//!
//! Whether a request is still on the socket is read on the client's side: the bytes
//! its socket has sent that the server has not taken yet (`ioctl(SIOCOUTQ)`).

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::{eventually, TempKv};
use resp::{bulk, show, Val, Wire};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Bytes the client's socket sent that the server has not taken off yet.
fn unread(w: &Wire) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int into `n`, on a socket we own.
    let r = unsafe { libc::ioctl(w.w.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    assert_eq!(r, 0, "SIOCOUTQ: {}", std::io::Error::last_os_error());
    n
}

/// The `cmd=` of the connection named `name` in CLIENT LIST.
fn last_command(admin: &mut Wire, name: &str) -> String {
    let list = admin.call(&["CLIENT", "LIST"]).text();
    list.lines()
        .find(|l| l.contains(&format!(" name={name} ")))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("cmd=")))
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_request_of_commands_on_keys_stays_on_the_socket_until_answered() {
    let s = TempKv::start(0, &[]);
    let mut admin = Wire::connect(&s.socket);
    let mut c = Wire::connect(&s.socket);
    assert_eq!(show(&c.call(&["CLIENT", "SETNAME", "writer"])), "+\"OK\"");
    // Answered, then taken off.
    assert_eq!(show(&c.call(&["SET", "k", "v"])), "+\"OK\"");
    eventually("the SET taken off the socket", || unread(&c) == 0);
    // A write that waits (CLIENT PAUSE WRITE) has been read, and is still there.
    assert_eq!(
        show(&admin.call(&["CLIENT", "PAUSE", "600000", "WRITE"])),
        "+\"OK\""
    );
    c.send(&[b"SET".to_vec(), b"k".to_vec(), b"v2".to_vec()]);
    eventually("the paused SET parsed", || {
        last_command(&mut admin, "writer") == "set"
    });
    assert!(unread(&c) > 0, "a waiting SET was taken off the socket");
    assert_eq!(show(&admin.call(&["CLIENT", "UNPAUSE"])), "+\"OK\"");
    assert_eq!(show(&c.read()), "+\"OK\"");
    eventually("the SET taken off once answered", || unread(&c) == 0);
    assert_eq!(show(&c.call(&["GET", "k"])), "$\"v2\"");
}

#[test]
fn a_blocking_command_leaves_the_socket_before_it_waits() {
    let s = TempKv::start(0, &[]);
    let mut admin = Wire::connect(&s.socket);
    let mut c = Wire::connect(&s.socket);
    assert_eq!(show(&c.call(&["CLIENT", "SETNAME", "blocker"])), "+\"OK\"");
    c.send(&[b"BLPOP".to_vec(), b"list".to_vec(), b"0".to_vec()]);
    eventually("the BLPOP blocked", || {
        last_command(&mut admin, "blocker") == "blpop"
    });
    eventually("the BLPOP taken off the socket", || unread(&c) == 0);
    assert_eq!(show(&admin.call(&["RPUSH", "list", "a"])), ":\"1\"");
    let got = c.read();
    assert_eq!(got, Val::Agg(b'*', Some(vec![bulk("list"), bulk("a")])));
    // The connection reads on as before.
    assert_eq!(show(&c.call(&["PING"])), "+\"PONG\"");
    eventually("the PING taken off the socket", || unread(&c) == 0);
}

#[test]
fn requests_in_pieces_and_mixed_pipelines_are_answered_exactly() {
    let s = TempKv::start(0, &[]);
    let mut c = Wire::connect(&s.socket);
    // A 300 KB value (several reads of the server's buffer), sent in 997-byte pieces.
    let value: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut req = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n*2\r\n$6\r\nSTRLEN\r\n$3\r\nbig\r\n");
    for piece in req.chunks(997) {
        c.w.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_eq!(show(&c.read()), "+\"OK\"");
    assert_eq!(show(&c.read()), ":\"300000\"");
    // One write: commands on keys around commands of the connection (SELECT).
    let pipeline = "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n\
                    *2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n\
                    *2\r\n$3\r\nGET\r\n$1\r\na\r\n\
                    *2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n\
                    *2\r\n$4\r\nINCR\r\n$1\r\na\r\n";
    c.w.write_all(pipeline.as_bytes()).unwrap();
    let replies: Vec<String> = (0..5).map(|_| show(&c.read())).collect();
    assert_eq!(replies, ["+\"OK\"", "+\"OK\"", "$nil", "+\"OK\"", ":\"2\""]);
    // Many small pipelines, one byte at a time for the first.
    for (i, b) in b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n".iter().enumerate() {
        c.w.write_all(&[*b]).unwrap();
        if i % 5 == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    assert_eq!(show(&c.read()), "$\"2\"");
    for i in 0..200 {
        let k = format!("k{i}");
        let v = format!("v{i}");
        c.w.write_all(
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                k.len(),
                v.len()
            )
            .as_bytes(),
        )
        .unwrap();
        c.w.write_all(format!("*2\r\n$3\r\nGET\r\n${}\r\n{k}\r\n", k.len()).as_bytes())
            .unwrap();
    }
    for i in 0..200 {
        assert_eq!(show(&c.read()), "+\"OK\"");
        assert_eq!(show(&c.read()), format!("$\"v{i}\""));
    }
    // A subscription (not a command on keys) in the middle of a pipeline.
    c.w.write_all(
        b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n*1\r\n$4\r\nPING\r\n",
    )
    .unwrap();
    assert_eq!(show(&c.read()), "$\"2\"");
    assert_eq!(show(&c.read()), "*[$\"subscribe\", $\"ch\", :\"1\"]");
    assert_eq!(show(&c.read()), "*[$\"pong\", $\"\"]");
    eventually("everything taken off the socket", || unread(&c) == 0);
}

/// The server's CPU time (user + system) in seconds, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf reads a constant.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn an_idle_server_stops_polling() {
    // The poller is on only when asked for (the server inherits this environment;
    // the other tests here do not care whether it polls).
    std::env::set_var("WEFT_KV_POLL", "1");
    let s = TempKv::start(0, &[]);
    let mut c = Wire::connect(&s.socket);
    // A burst of requests wakes the poller...
    for i in 0..2000 {
        assert_eq!(show(&c.call(&["SET", "k", &i.to_string()])), "+\"OK\"");
    }
    drop(c);
    // ... which parks once they stop: two idle seconds cost the server a small part of
    // a CPU second (a poller that went on would take most of two).
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_seconds(s.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(s.child.id()) - before;
    assert!(used < 0.5, "an idle server used {used} s of CPU in 2 s");
}
