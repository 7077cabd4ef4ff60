//! The shared-memory transport (`weft_kv::shm`, `server/shm.rs`) against the built
//! `weft kv serve`: a client over shared memory gets exactly the replies a client over
//! the Unix socket gets (RESP2 and RESP3, errors, transactions, blocking commands,
//! pub/sub), values larger than a ring go through whole, pipelined replies come back in
//! order, writes are logged and recovered as any others; a client that goes (closed,
//! killed, or in the middle of a request) leaves no connection behind; a client that
//! writes garbage into its segment loses only its own connection; CLIENT KILL and a
//! server that goes end the client's wait with an error; a connection's segment counts
//! in its client's memory (CLIENT LIST `tot-mem`, INFO's `mem_clients_normal`) for as
//! long as it is open. The client's spin before it
//! sleeps: replies that come within it need no futex sleep, it stops when replies are
//! slow, and the replies are the same with it, without it, and over the socket.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{bulk, eventually, ok, run, TempKv};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::Duration;
use weft_kv::client::Client;
use weft_kv::resp::Reply;
use weft_kv::shm::Spin;

/// A spin long enough for any reply of a live server: every wait spins until it.
const SPIN_ALWAYS: Spin = Spin {
    max_ns: 10_000_000_000,
    adaptive: false,
    yield_ns: 0,
    busy_below: 0,
};

fn shm_client(s: &TempKv) -> Client {
    let c = Client::connect_shm(&s.socket).expect("connect over shared memory");
    c.set_timeout(Some(kv::CEILING)).unwrap();
    c
}

/// INFO's connected_clients.
fn connected(c: &mut Client) -> i64 {
    info_number(c, "clients", "connected_clients")
}

/// A script of commands of every kind, run once per transport on a fresh database.
const SCRIPT: &[&[&str]] = &[
    &["SET", "s", "v"],
    &["GET", "s"],
    &["INCR", "n"],
    &["INCRBY", "n", "41"],
    &["INCR", "s"],
    &["LPUSH", "l", "a", "b", "c"],
    &["LRANGE", "l", "0", "-1"],
    &["GET", "l"],
    &["HSET", "h", "f", "1", "g", "2"],
    &["HGETALL", "h"],
    &["SADD", "set", "x", "y"],
    &["SMEMBERS", "set"],
    &["ZADD", "z", "1.5", "a", "2", "b"],
    &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    &["NOSUCHCOMMAND"],
    &["GET"],
    &["MULTI"],
    &["SET", "t", "1"],
    &["INCR", "t"],
    &["EXEC"],
    &["MGET", "s", "t", "missing"],
    &["EXPIRE", "s", "100"],
    &["TTL", "s"],
    &["DEL", "s", "n", "l"],
    &["EXISTS", "s", "n", "l", "h"],
    &["HELLO", "3"],
    &["HGETALL", "h"],
    &["ZSCORE", "z", "a"],
    &["GET", "missing"],
    &["SMISMEMBER", "set", "x", "q"],
    &["HELLO", "2"],
    &["ZSCORE", "z", "a"],
];

#[test]
fn every_reply_is_the_one_the_socket_gives() {
    let s = TempKv::start(0, &[]);
    let mut replies = Vec::new();
    // The socket, then shared memory with the default spin, none, and one that always
    // catches its reply.
    for spin in [
        None,
        Some(Spin::from_env()),
        Some(Spin::OFF),
        Some(SPIN_ALWAYS),
    ] {
        let mut c = match spin {
            Some(spin) => {
                let mut c = shm_client(&s);
                assert!(c.set_shm_spin(spin));
                c
            }
            None => s.client().unwrap(),
        };
        assert_eq!(run(&mut c, &["FLUSHALL"]), ok());
        let mut got = Vec::new();
        for cmd in SCRIPT {
            let mut r = run(&mut c, cmd);
            // HELLO names the connection's id, which differs.
            if cmd[0] == "HELLO" {
                r = Reply::Simple("hello".into());
            }
            got.push((cmd.join(" "), r));
        }
        if spin == Some(SPIN_ALWAYS) {
            let w = c.shm_wait_counts().unwrap();
            assert_eq!((w.sleeps, w.given_up), (0, 0), "{w:?}");
        }
        if spin == Some(Spin::OFF) {
            assert_eq!(c.shm_wait_counts().unwrap().spins, 0);
        }
        replies.push(got);
    }
    for r in &replies[2..] {
        assert_eq!(&replies[0], r);
    }
    assert_eq!(replies[0], replies[1]);
    // And they are the right ones (a few, as a check that the script ran).
    let shm = &replies[1];
    assert_eq!(shm[1].1, bulk("v"));
    assert_eq!(shm[3].1, Reply::Int(42));
    assert!(matches!(&shm[7].1, Reply::Error(e) if e.starts_with("WRONGTYPE")));
    assert_eq!(shm[19].1, Reply::Array(vec![ok(), Reply::Int(2)]));
    assert!(matches!(&shm[26].1, Reply::Map(_)), "{:?}", shm[26].1);
    assert_eq!(shm[27].1, Reply::Double(1.5));
    assert_eq!(shm[28].1, Reply::Nil);
    assert_eq!(shm[31].1, bulk("1.5"));
}

#[test]
fn replies_that_come_within_the_spin_need_no_futex_sleep() {
    let s = TempKv::start(0, &[]);
    let mut c = shm_client(&s);
    assert!(c.set_shm_spin(SPIN_ALWAYS));
    for i in 0..300 {
        let k = format!("k{}", i % 7);
        assert_eq!(run(&mut c, &["SET", &k, &i.to_string()]), ok());
        assert_eq!(run(&mut c, &["GET", &k]), bulk(&i.to_string()));
    }
    let w = c.shm_wait_counts().unwrap();
    assert_eq!(w.sleeps, 0, "{w:?}");
    assert_eq!(w.given_up, 0, "{w:?}");
    // A reply may be there before the client looks: then it does not spin at all.
    assert_eq!(w.caught, w.spins);
    assert!(w.spins <= 600, "{w:?}");
    // Over the socket there is nothing to count.
    assert_eq!(s.client().unwrap().shm_wait_counts(), None);
}

/// Pins thread or process `tid` (0: this thread) to `cpu` alone.
fn pin(tid: i32, cpu: usize) {
    // SAFETY: a zeroed CPU set filled with the macros, passed by reference.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set),
            0
        );
    }
}

#[test]
fn a_client_on_the_servers_cpu_does_not_spin() {
    let s = TempKv::start(0, &[]);
    // The server's threads and this one on one CPU: a spin there would only keep the
    // server from answering.
    // SAFETY: a plain call with no arguments.
    let cpu = unsafe { libc::sched_getcpu() } as usize;
    pin(0, cpu);
    for t in std::fs::read_dir(format!("/proc/{}/task", s.child.id())).unwrap() {
        pin(
            t.unwrap().file_name().to_str().unwrap().parse().unwrap(),
            cpu,
        );
    }
    let mut c = shm_client(&s);
    assert!(c.set_shm_spin(Spin::default_for_this_machine()));
    for i in 0..50 {
        assert_eq!(run(&mut c, &["SET", "k", &i.to_string()]), ok());
    }
    assert_eq!(run(&mut c, &["GET", "k"]), bulk("49"));
    let w = c.shm_wait_counts().unwrap();
    // Only the first wait may spin: the server has said where it runs only with its
    // first reply.
    assert!(w.spins <= 1, "{w:?}");
    assert!(w.same_cpu > 0, "{w:?}");
}

#[test]
fn the_server_publishes_its_busy_connections_and_forgets_those_that_went() {
    let s = TempKv::start(0, &[]);
    let mut a = shm_client(&s);
    assert_eq!(run(&mut a, &["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(a.shm_wait_counts().unwrap().server_busy, 1);
    let mut others: Vec<Client> = (0..4).map(|_| shm_client(&s)).collect();
    for c in &mut others {
        assert_eq!(run(c, &["PING"]), Reply::Simple("PONG".into()));
    }
    // Each counts from its start, until it sleeps on its socket (after some 50 us
    // with nothing to do): the last one's reply counts it, at most all five.
    let busy = others[3].shm_wait_counts().unwrap().server_busy;
    assert!((1..=5).contains(&busy), "{busy}");
    // Those that go are no longer counted.
    drop(others);
    eventually("the connections that went are forgotten", || {
        run(&mut a, &["PING"]);
        a.shm_wait_counts().unwrap().server_busy == 1
    });
}

#[test]
fn the_spin_stops_when_replies_are_slow_and_the_replies_stay_the_same() {
    let s = TempKv::start(0, &[]);
    let mut c = shm_client(&s);
    assert!(c.set_shm_spin(Spin::ADAPTIVE));
    // Replies that come 20 ms late: the first spins run out (each shorter), then the
    // client sleeps at once.
    for _ in 0..10 {
        assert_eq!(run(&mut c, &["DEBUG", "SLEEP", "0.02"]), ok());
    }
    let w = c.shm_wait_counts().unwrap();
    assert_eq!((w.spins, w.given_up, w.caught), (3, 3, 0), "{w:?}");
    assert!(w.sleeps >= 10, "{w:?}");
    // A blocking command that times out: the same, no spin.
    assert_eq!(run(&mut c, &["BLPOP", "nothing", "0.02"]), Reply::NilArray);
    assert_eq!(c.shm_wait_counts().unwrap().spins, 3);
    // Fast replies again: writes and reads are right whether or not a probe caught one
    // (a probe spins once in every few waits while spinning is off).
    for i in 0..100 {
        assert_eq!(run(&mut c, &["SET", "k", &i.to_string()]), ok());
    }
    assert_eq!(run(&mut c, &["GET", "k"]), bulk("99"));
    let after = c.shm_wait_counts().unwrap();
    assert!(after.spins > 3, "a probe spins: {after:?}");
}

#[test]
fn values_larger_than_a_ring_and_pipelines_come_back_whole_and_in_order() {
    let s = TempKv::start(0, &[]);
    let mut c = shm_client(&s);
    let ring = weft_kv::shm::RING;
    for len in [ring - 1, ring, ring + 1, 5 * ring + 17] {
        let v: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        assert_eq!(c.command(&[b"SET", b"big", &v]).unwrap(), ok());
        assert_eq!(c.command(&[b"GET", b"big"]).unwrap(), Reply::Bulk(v));
        assert_eq!(
            c.command(&[b"STRLEN", b"big"]).unwrap(),
            Reply::Int(len as i64)
        );
    }
    // A pipeline whose requests and replies are each more than a ring's worth.
    let n = 3000;
    let pad = vec![b'p'; 60];
    for i in 0..n {
        c.send(&[b"INCR", b"counter"]);
        c.send(&[b"ECHO", format!("{i}").as_bytes()]);
        c.send(&[b"SET", format!("k{i}").as_bytes(), &pad]);
    }
    c.flush().unwrap();
    for i in 0..n {
        assert_eq!(c.read_reply().unwrap(), Reply::Int(i as i64 + 1));
        assert_eq!(c.read_reply().unwrap(), bulk(&i.to_string()));
        assert_eq!(c.read_reply().unwrap(), ok());
    }
    // Clients over both transports see each other's writes at once.
    let mut d = s.client().unwrap();
    assert_eq!(run(&mut d, &["GET", "counter"]), bulk(&n.to_string()));
    assert_eq!(run(&mut d, &["SET", "from-socket", "1"]), ok());
    assert_eq!(run(&mut c, &["GET", "from-socket"]), bulk("1"));
}

#[test]
fn writes_over_shared_memory_are_logged_and_recovered() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, sock) = (tmp.path().join("data"), tmp.path().join("kv.sock"));
    {
        let mut s = kv::KvServer::weft(&dir, &sock, &[]).unwrap();
        let mut c = Client::connect_shm(&sock).unwrap();
        assert_eq!(run(&mut c, &["SET", "a", "1"]), ok());
        assert_eq!(run(&mut c, &["RPUSH", "l", "x", "y"]), Reply::Int(2));
        assert_eq!(run(&mut c, &["HSET", "h", "f", "v"]), Reply::Int(1));
        let _ = c.command(&[b"SHUTDOWN"]);
        assert!(s.wait_exit().success());
        assert!(
            !weft_kv::shm::socket_path(&sock).exists(),
            "removed at exit"
        );
    }
    let _s = kv::KvServer::weft(&dir, &sock, &[]).unwrap();
    let mut c = Client::connect_shm(&sock).unwrap();
    assert_eq!(run(&mut c, &["GET", "a"]), bulk("1"));
    assert_eq!(
        run(&mut c, &["LRANGE", "l", "0", "-1"]),
        Reply::Array(vec![bulk("x"), bulk("y")])
    );
    assert_eq!(run(&mut c, &["HGET", "h", "f"]), bulk("v"));
}

#[test]
fn blocking_commands_and_pubsub_work_over_shared_memory() {
    let s = TempKv::start(0, &[]);
    let mut waiter = shm_client(&s);
    let mut other = s.client().unwrap();
    waiter.send(&[b"BLPOP", b"q", b"0"]);
    waiter.flush().unwrap();
    eventually("BLPOP blocked", || {
        matches!(run(&mut other, &["CLIENT", "LIST"]), Reply::Bulk(l)
            if String::from_utf8_lossy(&l).contains("cmd=blpop"))
    });
    assert_eq!(run(&mut other, &["RPUSH", "q", "item"]), Reply::Int(1));
    assert_eq!(
        waiter.read_reply().unwrap(),
        Reply::Array(vec![bulk("q"), bulk("item")])
    );
    // A subscriber over shared memory gets what another client publishes.
    let mut sub = shm_client(&s);
    assert_eq!(
        run(&mut sub, &["SUBSCRIBE", "ch"]),
        Reply::Array(vec![bulk("subscribe"), bulk("ch"), Reply::Int(1)])
    );
    for i in 0..200 {
        assert_eq!(
            run(&mut other, &["PUBLISH", "ch", &format!("m{i}")]),
            Reply::Int(1)
        );
    }
    for i in 0..200 {
        assert_eq!(
            sub.read_reply().unwrap(),
            Reply::Array(vec![bulk("message"), bulk("ch"), bulk(&format!("m{i}"))])
        );
    }
}

#[test]
fn a_client_that_goes_leaves_no_connection_behind() {
    let s = TempKv::start(0, &[]);
    let mut admin = s.client().unwrap();
    let base = connected(&mut admin);
    // Closed after a command; closed in the middle of a request.
    let mut c = shm_client(&s);
    assert_eq!(run(&mut c, &["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(connected(&mut admin), base + 1);
    drop(c);
    eventually("the closed client gone", || connected(&mut admin) == base);
    let mut end = weft_kv::shm::ClientEnd::connect(&weft_kv::shm::socket_path(&s.socket)).unwrap();
    end.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk").unwrap();
    eventually("the half-sent client counted", || {
        connected(&mut admin) == base + 1
    });
    drop(end);
    eventually("the half-sent client gone", || {
        connected(&mut admin) == base
    });
    assert_eq!(run(&mut admin, &["EXISTS", "k"]), Reply::Int(0));
    // A process killed while it waits for its reply.
    let mut child = std::process::Command::new(kv::WEFT)
        .args(["bench-worker", "kv-client", "--socket"])
        .arg(&s.socket)
        .args([
            "--op",
            "read",
            "--ops",
            "1000000000",
            "--seed",
            "1",
            "--shm",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    use std::io::Read;
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    assert_eq!(&ready, b"ready\n");
    child.stdin.as_mut().unwrap().write_all(b"g").unwrap();
    eventually("the worker's GETs counted", || {
        let Reply::Bulk(info) = run(&mut admin, &["INFO", "commandstats"]) else {
            return false;
        };
        String::from_utf8_lossy(&info).contains("cmdstat_get:calls=")
    });
    child.kill().unwrap();
    child.wait().unwrap();
    eventually("the killed client gone", || connected(&mut admin) == base);
}

#[test]
fn garbage_in_a_segment_closes_only_its_own_connection() {
    let s = TempKv::start(0, &[]);
    let mut good = shm_client(&s);
    assert_eq!(run(&mut good, &["SET", "k", "v"]), ok());
    let mut admin = s.client().unwrap();
    let base = connected(&mut admin);
    // A hand-made client: the handshake, then a request head far past the ring.
    let sock =
        std::os::unix::net::UnixStream::connect(weft_kv::shm::socket_path(&s.socket)).unwrap();
    let fd = weft_kv::shm::recv_segment(sock.as_raw_fd()).unwrap();
    // SAFETY: a fresh shared mapping of the segment's SEGMENT bytes.
    let seg = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            weft_kv::shm::SEGMENT,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    assert_ne!(seg, libc::MAP_FAILED);
    eventually("counted", || connected(&mut admin) == base + 1);
    // The request ring's head is the segment's first word (`weft_kv::shm`'s layout).
    // SAFETY: the first, aligned word of our mapping.
    unsafe { std::ptr::write_volatile(seg.cast::<u64>(), u64::MAX / 3) };
    (&sock).write_all(b"!").unwrap();
    let mut buf = [0u8; 8];
    use std::io::Read;
    // Closed (reset: the doorbell byte was left unread).
    match (&sock).read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the server should have closed it: {other:?}"),
    }
    eventually("the broken client gone", || connected(&mut admin) == base);
    // SAFETY: our own mapping.
    unsafe { libc::munmap(seg, weft_kv::shm::SEGMENT) };
    // A segment cannot be resized under the server (its size is sealed).
    // SAFETY: ftruncate on a descriptor we hold.
    assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0);
    // Garbage as RESP: a protocol error, as over a socket, then closed.
    let mut bad = weft_kv::shm::ClientEnd::connect(&weft_kv::shm::socket_path(&s.socket)).unwrap();
    bad.write_all(b"*1\r\n$-5\r\n").unwrap();
    let n = bad.read(&mut buf).unwrap();
    assert_eq!(&buf[..n.min(4)], b"-ERR");
    // The good client never noticed.
    assert_eq!(run(&mut good, &["GET", "k"]), bulk("v"));
}

#[test]
fn client_kill_and_a_server_that_goes_end_the_wait() {
    let mut s = TempKv::start(0, &[]);
    let mut c = shm_client(&s);
    let Reply::Int(id) = run(&mut c, &["CLIENT", "ID"]) else {
        panic!("CLIENT ID")
    };
    let mut admin = s.client().unwrap();
    assert_eq!(
        run(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]),
        Reply::Int(1)
    );
    // Nothing more runs: the next command fails.
    assert!(c.command(&[b"PING"]).is_err(), "killed");
    assert_eq!(
        run(&mut admin, &["CLIENT", "KILL", "ID", &id.to_string()]),
        Reply::Int(0),
        "gone"
    );
    // A client waiting for a reply when the server is killed gets an error.
    let mut c = shm_client(&s);
    c.set_timeout(None).unwrap();
    c.send(&[b"BLPOP", b"never", b"0"]);
    c.flush().unwrap();
    let t = std::thread::spawn(move || c.read_reply().map_err(|e| e.kind()));
    std::thread::sleep(Duration::from_millis(50));
    s.kill9();
    assert_eq!(
        t.join().unwrap(),
        Err(std::io::ErrorKind::UnexpectedEof),
        "the server went"
    );
}

/// The server's CPU time so far (every thread), in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf reads a constant.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

#[test]
fn a_connected_idle_client_lets_the_server_sleep() {
    let s = TempKv::start(0, &[]);
    let mut c = shm_client(&s);
    for i in 0..2000 {
        assert_eq!(run(&mut c, &["SET", "k", &i.to_string()]), ok());
    }
    // Still connected, sending nothing: the connection stops looking at its ring and
    // sleeps (one that went on would take most of two CPU seconds).
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_seconds(s.child.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(s.child.id()) - before;
    assert!(used < 0.5, "an idle server used {used} s of CPU in 2 s");
    // And it wakes for the next request.
    assert_eq!(run(&mut c, &["GET", "k"]), bulk("1999"));
}

/// Clients on threads at once, each with its own keys and values of every size up to
/// a few rings, each checking every reply. `WEFT_KV_STRESS=1` makes it longer.
#[test]
fn many_clients_at_once_each_get_their_own_replies() {
    let s = TempKv::start(0, &[]);
    let rounds = if std::env::var_os("WEFT_KV_STRESS").is_some() {
        20_000
    } else {
        200
    };
    let seed = kv::Rng::from_time();
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let mut c = shm_client(&s);
            std::thread::spawn(move || {
                let mut rng = kv::Rng(seed ^ ((t + 1) * 0x9e37_79b9));
                for i in 0..rounds {
                    let key = format!("t{t}:{}", rng.below(50));
                    let len = match rng.below(20) {
                        0 => rng.below(3 * weft_kv::shm::RING as u64) as usize,
                        _ => rng.below(200) as usize,
                    };
                    let v: Vec<u8> = (0..len).map(|j| (j as u64 + i) as u8).collect();
                    let set = c.command(&[b"SET", key.as_bytes(), &v]).unwrap();
                    assert_eq!(set, ok(), "seed {seed}");
                    let got = c.command(&[b"GET", key.as_bytes()]).unwrap();
                    assert_eq!(got, Reply::Bulk(v), "seed {seed}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn no_shm_serves_the_socket_only() {
    let s = TempKv::start(0, &["--no-shm"]);
    assert!(!weft_kv::shm::socket_path(&s.socket).exists());
    let e = Client::connect_shm(&s.socket)
        .err()
        .expect("no shared memory");
    assert!(e.to_string().contains(".shm"), "{e}");
    let mut c = s.client().unwrap();
    assert_eq!(run(&mut c, &["PING"]), Reply::Simple("PONG".into()));
}

/// An INFO field of section `section`, as a number.
fn info_number(c: &mut Client, section: &str, field: &str) -> i64 {
    let Reply::Bulk(info) = run(c, &["INFO", section]) else {
        panic!("INFO")
    };
    let prefix = format!("{field}:");
    String::from_utf8(info)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {field}"))
}

/// CLIENT LIST's `tot-mem` of the connection that asks.
fn own_tot_mem(c: &mut Client) -> i64 {
    let Reply::Bulk(line) = run(c, &["CLIENT", "INFO"]) else {
        panic!("CLIENT INFO")
    };
    String::from_utf8(line)
        .unwrap()
        .split_whitespace()
        .find_map(|w| w.strip_prefix("tot-mem="))
        .and_then(|v| v.parse().ok())
        .expect("tot-mem")
}

#[test]
fn a_connections_segment_counts_in_its_clients_memory() {
    let s = TempKv::start(0, &[]);
    let mut admin = s.client().unwrap();
    let segment = weft_kv::shm::SEGMENT as i64;
    let socket_mem = own_tot_mem(&mut admin);
    assert!(socket_mem < segment, "{socket_mem}");
    let before = info_number(&mut admin, "memory", "mem_clients_normal");
    let mut c = shm_client(&s);
    let shm_mem = own_tot_mem(&mut c);
    assert!(
        shm_mem >= segment && shm_mem < segment + socket_mem + (64 << 10),
        "tot-mem {shm_mem} for a segment of {segment}"
    );
    let with = info_number(&mut admin, "memory", "mem_clients_normal");
    assert!(with >= before + segment, "{with} with, {before} before");
    drop(c);
    eventually("the segment no longer counted", || {
        info_number(&mut admin, "memory", "mem_clients_normal") < before + segment
    });
}
