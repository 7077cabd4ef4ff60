//! What a client can make `weft kv serve` hold, and who may talk to it, tried from
//! outside with raw sockets against the built `weft` binary:
//!
//! - replies a client never reads: the connection stops running its commands once
//!   its unsent replies pass `--client-output-limit` (or CONFIG SET), so the server's
//!   client memory (INFO `mem_clients_normal`, and the process's RSS) stays near the
//!   limit; once the client reads, every reply arrives, in order, intact;
//! - before AUTH: at most 10 arguments and bulks of at most 16 KiB, refused on the
//!   header with Redis 7's errors and the connection closed (compared byte for byte
//!   with a real redis-server when one is installed);
//! - protected mode: with no password, TCP clients from another address than
//!   loopback are refused with DENIED, until a password is set or protected mode is
//!   turned off.

mod common;
#[path = "common/kv.rs"]
mod kv;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::skip;
use kv::TempKv;

/// However long a busy machine takes; the ceiling only stops a hang.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// A `weft kv serve` on a temporary directory, killed when dropped.
struct Server(TempKv);

impl Server {
    /// Starts a server with `args`, on its Unix socket and, when `port` is not 0, on
    /// TCP; returns once both accept connections.
    fn start(port: u16, args: &[&str]) -> Server {
        Server(TempKv::start(port, args))
    }

    fn unix(&self) -> UnixStream {
        let c = UnixStream::connect(&self.0.socket).unwrap();
        c.set_read_timeout(Some(EVENTUALLY)).unwrap();
        c
    }

    /// The process's resident memory, in bytes.
    fn rss(&self) -> u64 {
        self.0.status_kib("VmRSS") << 10
    }
}

/// A TCP port that was free a moment ago (on every address).
fn free_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `args` as a RESP multibulk request.
fn request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply and returns its bytes, whole (bulk data and array elements
/// included).
fn reply<R: BufRead>(r: &mut R) -> Vec<u8> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).unwrap();
    assert!(
        line.ends_with(b"\r\n"),
        "cut reply: {:?}",
        String::from_utf8_lossy(&line)
    );
    let n = || -> i64 {
        std::str::from_utf8(&line[1..line.len() - 2])
            .unwrap()
            .parse()
            .unwrap()
    };
    match line[0] {
        b'$' | b'=' if n() >= 0 => {
            let (at, n) = (line.len(), n() as usize);
            line.resize(at + n + 2, 0);
            r.read_exact(&mut line[at..]).unwrap();
        }
        b'*' | b'~' | b'%' => {
            let items = n().max(0) * if line[0] == b'%' { 2 } else { 1 };
            for _ in 0..items {
                let item = reply(r);
                line.extend(item);
            }
        }
        _ => {}
    }
    line
}

/// Sends one command and reads its reply.
fn call<S: Read + Write>(c: &mut BufReader<S>, args: &[&str]) -> Vec<u8> {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.get_mut().write_all(&request(&a)).unwrap();
    reply(c)
}

/// A field of INFO's text.
fn info_field(c: &mut BufReader<UnixStream>, section: &str, field: &str) -> u64 {
    let text = String::from_utf8(call(c, &["INFO", section])).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// A value of `len` bytes that says which key it is everywhere in it.
fn value(key: usize, len: usize) -> Vec<u8> {
    format!("<value of k{key}>")
        .into_bytes()
        .into_iter()
        .cycle()
        .take(len)
        .collect()
}

/// Pipelines `gets` (each a key number and its request) on a connection that does not
/// read; watches the server's client memory and RSS until it stops running them
/// (blocked on the unread replies), then reads every reply and checks it.
/// Returns the most client memory and RSS growth seen.
fn pipeline_unread(s: &Server, values: &[Vec<u8>], gets: Vec<(usize, Vec<u8>)>) -> (u64, u64) {
    let mut admin = BufReader::new(s.unix());
    let rss_before = s.rss();
    let processed =
        |admin: &mut BufReader<UnixStream>| info_field(admin, "stats", "total_commands_processed");
    let base = processed(&mut admin);
    let mut infos = 1; // the INFO that read `base` counts after it
    let reader = s.unix();
    let mut writer = reader.try_clone().unwrap();
    let expected: Vec<usize> = gets.iter().map(|(k, _)| *k).collect();
    let sender = std::thread::spawn(move || {
        let all: Vec<u8> = gets.into_iter().flat_map(|(_, r)| r).collect();
        writer.write_all(&all).unwrap();
    });
    // Until the count of commands run stops moving for a while (the server waits for
    // the client to read), note the peaks.
    let (mut peak_mem, mut peak_rss, mut last, mut still) = (0, 0, u64::MAX, 0);
    let deadline = Instant::now() + EVENTUALLY;
    while still < 25 {
        assert!(
            Instant::now() < deadline,
            "the server never stopped running the pipeline"
        );
        std::thread::sleep(Duration::from_millis(20));
        peak_mem = peak_mem.max(info_field(&mut admin, "memory", "mem_clients_normal"));
        peak_rss = peak_rss.max(s.rss().saturating_sub(rss_before));
        infos += 1;
        let ran = processed(&mut admin) - base - infos;
        infos += 1;
        assert!(
            ran < expected.len() as u64,
            "every GET ran while no reply was read"
        );
        if ran == last {
            still += 1;
        } else {
            (last, still) = (ran, 0);
        }
    }
    // Now read: every reply, in order, intact.
    let mut r = BufReader::with_capacity(1 << 20, reader);
    for (i, &k) in expected.iter().enumerate() {
        let got = reply(&mut r);
        let want = [
            format!("${}\r\n", values[k].len()).as_bytes(),
            &values[k],
            b"\r\n",
        ]
        .concat();
        assert!(
            got == want,
            "reply {i} (GET k{k}) differs: {} bytes",
            got.len()
        );
    }
    sender.join().unwrap();
    (peak_mem, peak_rss)
}

/// Sets `values` as keys k0, k1, ...
fn set_values(s: &Server, values: &[Vec<u8>]) {
    let mut c = BufReader::new(s.unix());
    for (k, v) in values.iter().enumerate() {
        c.get_mut()
            .write_all(&request(&[b"SET", format!("k{k}").as_bytes(), v]))
            .unwrap();
        assert_eq!(reply(&mut c), b"+OK\r\n");
    }
}

#[test]
fn unread_replies_stop_the_connection_at_the_output_limit() {
    // 2 workers: the keys' shards belong to both, so the replies of gathered commands
    // (another worker's shard) are held to the limit too.
    let s = Server::start(0, &["--workers", "2", "--client-output-limit", "1mb"]);
    let limit = 1u64 << 20;
    let values: Vec<Vec<u8>> = (0..8).map(|k| value(k, 256 << 10)).collect();
    set_values(&s, &values);
    // 2000 inline GETs: 512 MB of replies for 14 KB of requests.
    let gets = (0..2000)
        .map(|i| (i % 8, format!("GET k{}\r\n", i % 8).into_bytes()))
        .collect();
    let (mem, rss) = pipeline_unread(&s, &values, gets);
    assert!(mem > 0, "INFO mem_clients_normal counted nothing");
    assert!(
        mem <= 8 * limit,
        "the connections held {mem} bytes, limit {limit}"
    );
    assert!(rss <= 64 << 20, "the server grew by {rss} bytes of RSS");
}

#[test]
fn a_reply_larger_than_the_limit_is_sent_whole() {
    let s = Server::start(0, &["--workers", "1"]);
    let mut admin = BufReader::new(s.unix());
    // Set at run time: CONFIG GET says it, and the connections follow it.
    assert_eq!(
        call(
            &mut admin,
            &["CONFIG", "SET", "client-output-limit", "256kb"]
        ),
        b"+OK\r\n"
    );
    assert_eq!(
        call(&mut admin, &["CONFIG", "GET", "client-output-limit"]),
        b"*2\r\n$19\r\nclient-output-limit\r\n$6\r\n262144\r\n"
    );
    let limit = 256u64 << 10;
    let values = vec![value(0, 2 << 20), value(1, 1000)];
    set_values(&s, &values);
    // 200 multibulk GETs, alternating a 2 MB value (8 times the limit) and a small one.
    let gets = (0..200)
        .map(|i| (i % 2, request(&[b"GET", format!("k{}", i % 2).as_bytes()])))
        .collect();
    let (mem, rss) = pipeline_unread(&s, &values, gets);
    let big = values[0].len() as u64;
    assert!(
        mem <= 4 * (limit + big),
        "the connections held {mem} bytes for replies of {big}"
    );
    assert!(rss <= 64 << 20, "the server grew by {rss} bytes of RSS");
}

// ---- before AUTH -----------------------------------------------------------------

/// An exchange that checks the limits before AUTH (the password is `pw`): what is
/// sent, the whole answer, and whether the connection is closed after it.
struct Case {
    what: &'static str,
    send: Vec<u8>,
    answer: &'static str,
    closes: bool,
}

fn unauthenticated_cases() -> Vec<Case> {
    const MBULK: &str = "-ERR Protocol error: unauthenticated multibulk length\r\n";
    const BULK: &str = "-ERR Protocol error: unauthenticated bulk length\r\n";
    const NOAUTH: &str = "-NOAUTH Authentication required.\r\n";
    let case = |what, send: Vec<u8>, answer, closes| Case {
        what,
        send,
        answer,
        closes,
    };
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for _ in 0..10 {
        mset.extend([&b"k"[..], b"v"]);
    }
    let big = vec![b'z'; 1 << 20];
    let auth_then_big = [
        request(&[b"AUTH", b"pw"]),
        request(&[b"SET", b"big", &big]),
        request(&mset),
        request(&[b"STRLEN", b"big"]),
    ];
    vec![
        // Only a header is sent: the refusal does not wait for what it announces.
        case("11 arguments", b"*11\r\n".to_vec(), MBULK, true),
        case("a count of 1048576", b"*1048576\r\n".to_vec(), MBULK, true),
        case(
            "a count past 2^31",
            b"*3000000000\r\n".to_vec(),
            "-ERR Protocol error: invalid multibulk length\r\n",
            true,
        ),
        case("a 16385-byte bulk", b"*2\r\n$4\r\nECHO\r\n$16385\r\n".to_vec(), BULK, true),
        case("a 300 MB bulk", b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$300000000\r\n".to_vec(), BULK, true),
        case(
            "a bulk past --max-bulk",
            b"*2\r\n$3\r\nSET\r\n$600000000\r\n".to_vec(),
            "-ERR Protocol error: invalid bulk length\r\n",
            true,
        ),
        case(
            "a command, then 12 arguments",
            [request(&[b"PING"]), b"*12\r\n".to_vec()].concat(),
            "-NOAUTH Authentication required.\r\n-ERR Protocol error: unauthenticated multibulk length\r\n",
            true,
        ),
        case(
            "a wrong password, then 11 arguments",
            [request(&[b"AUTH", b"no"]), b"*11\r\n".to_vec()].concat(),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n-ERR Protocol error: unauthenticated multibulk length\r\n",
            true,
        ),
        // At the limits: answered, and the connection stays.
        case("10 arguments", request(&[&b"EXISTS"[..]; 10]), NOAUTH, false),
        case("a 16384-byte bulk", request(&[b"ECHO", &[b'y'; 16 << 10]]), NOAUTH, false),
        // Authenticated, in the same write: big commands are fine.
        case(
            "AUTH, then big commands",
            auth_then_big.concat(),
            "+OK\r\n+OK\r\n+OK\r\n:1048576\r\n",
            false,
        ),
    ]
}

/// Runs every case on fresh connections from `connect`; a message per difference.
fn check_unauthenticated<S: Read + Write>(server: &str, connect: impl Fn() -> S) {
    for c in unauthenticated_cases() {
        let mut conn = connect();
        conn.write_all(&c.send).unwrap();
        let mut got = vec![0; c.answer.len()];
        let read = conn.read_exact(&mut got);
        let got = String::from_utf8_lossy(&got).into_owned();
        assert!(
            read.is_ok() && got == c.answer,
            "{server}, {}: got {got:?}, want {:?}",
            c.what,
            c.answer
        );
        // Then the connection is closed (end of stream, or reset), or still answers.
        let _ = conn.write_all(&request(&[b"PING"]));
        let answered = conn.read(&mut [0; 64]).unwrap_or(0) > 0;
        assert_eq!(
            answered, !c.closes,
            "{server}, {}: answered after it: {answered}",
            c.what
        );
    }
}

#[test]
fn before_auth_commands_are_small() {
    let s = Server::start(0, &["--requirepass", "pw"]);
    check_unauthenticated("weft-kv", || s.unix());
}

/// The same exchanges against a real redis-server 7 with a password: the texts and
/// the closing are Redis's.
#[test]
fn before_auth_limits_are_redis_s() {
    let Some(exe) = ["/usr/bin/redis-server", "redis-server"]
        .into_iter()
        .find(|e| Command::new(e).arg("--version").output().is_ok())
    else {
        skip("redis-server is not installed (apt-get install redis-server)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock");
    let mut child = Command::new(exe)
        .args([
            "--port",
            "0",
            "--requirepass",
            "pw",
            "--save",
            "",
            "--appendonly",
            "no",
            "--unixsocket",
        ])
        .arg(&socket)
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let deadline = Instant::now() + EVENTUALLY;
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let connect = || {
        let c = UnixStream::connect(&socket).unwrap();
        c.set_read_timeout(Some(EVENTUALLY)).unwrap();
        c
    };
    let result = std::panic::catch_unwind(|| check_unauthenticated("redis-server", connect));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

// ---- protected mode ----------------------------------------------------------------

/// This machine's addresses that are not loopback, from its interfaces (IPv6
/// link-local ones left out: they need an interface to connect to).
fn non_loopback_addrs() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list that freeifaddrs releases below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return found;
    }
    let mut p = list;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs made, not freed yet.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr; its family says which one, and the
        // casts below follow it.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            }
        };
        let link_local = matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
        if !ip.is_loopback() && !link_local {
            found.push(ip);
        }
    }
    // SAFETY: the list getifaddrs made, no longer used.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// One of this machine's IPv4 addresses that is not loopback, or a skip.
fn other_ipv4() -> Option<Ipv4Addr> {
    let v4 = non_loopback_addrs().into_iter().find_map(|ip| match ip {
        IpAddr::V4(v4) => Some(v4),
        IpAddr::V6(_) => None,
    });
    if v4.is_none() {
        skip("this machine has no IPv4 address but loopback to connect from");
    }
    v4
}

/// Connects to `ip:port` (from `ip`: the kernel picks the destination's own address
/// as the source) and sends PING; the whole answer up to the first line.
fn ping_from(ip: IpAddr, port: u16) -> (String, TcpStream) {
    let mut c = TcpStream::connect(SocketAddr::new(ip, port)).unwrap();
    c.set_read_timeout(Some(EVENTUALLY)).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    // Refused clients are told before they send anything: read first.
    let mut line = String::new();
    c.write_all(b"PING\r\n").unwrap_or(());
    r.read_line(&mut line).unwrap_or(0);
    (line, c)
}

/// A client from `ip` is refused with the DENIED explanation, then disconnected.
fn assert_denied(ip: IpAddr, port: u16) {
    let mut c = TcpStream::connect(SocketAddr::new(ip, port)).unwrap();
    c.set_read_timeout(Some(EVENTUALLY)).unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("-DENIED ") && text.ends_with("\r\n") && text.lines().count() == 1,
        "from {ip}: {text:?}"
    );
    assert!(
        text.contains("protected mode") && text.contains("--requirepass"),
        "{text}"
    );
}

fn assert_pong(ip: IpAddr, port: u16) {
    let (line, _) = ping_from(ip, port);
    assert_eq!(line, "+PONG\r\n", "from {ip}");
}

#[test]
fn protected_mode_refuses_other_machines_until_a_password_is_set() {
    let Some(other) = other_ipv4() else {
        return;
    };
    let port = free_port();
    let s = Server::start(port, &["--bind", "0.0.0.0"]);
    assert_denied(other.into(), port);
    // This machine is served: loopback, and the Unix socket.
    assert_pong(Ipv4Addr::LOCALHOST.into(), port);
    let mut admin = BufReader::new(s.unix());
    assert_eq!(call(&mut admin, &["PING"]), b"+PONG\r\n");
    assert_eq!(
        call(&mut admin, &["CONFIG", "GET", "protected-mode"]),
        b"*2\r\n$14\r\nprotected-mode\r\n$3\r\nyes\r\n"
    );
    // Turned off at run time, then on again.
    assert_eq!(
        call(&mut admin, &["CONFIG", "SET", "protected-mode", "no"]),
        b"+OK\r\n"
    );
    assert_pong(other.into(), port);
    assert_eq!(
        call(&mut admin, &["CONFIG", "SET", "protected-mode", "yes"]),
        b"+OK\r\n"
    );
    assert_denied(other.into(), port);
    // A password lifts it: the client is asked for the password.
    assert_eq!(
        call(&mut admin, &["CONFIG", "SET", "requirepass", "pw"]),
        b"+OK\r\n"
    );
    let (line, c) = ping_from(other.into(), port);
    assert_eq!(line, "-NOAUTH Authentication required.\r\n");
    let mut c = BufReader::new(c);
    assert_eq!(call(&mut c, &["AUTH", "pw"]), b"+OK\r\n");
    assert_eq!(call(&mut c, &["PING"]), b"+PONG\r\n");
}

#[test]
fn protected_mode_no_lets_other_machines_in() {
    let Some(other) = other_ipv4() else {
        return;
    };
    let port = free_port();
    let _s = Server::start(port, &["--bind", "0.0.0.0", "--protected-mode", "no"]);
    assert_pong(other.into(), port);
}

/// On a dual-stack listener IPv4 clients arrive as IPv4-mapped IPv6 addresses:
/// `::ffff:127.0.0.1` is loopback, `::ffff:<other>` is not.
#[test]
fn ipv4_mapped_loopback_is_loopback() {
    let Some(other) = other_ipv4() else {
        return;
    };
    if std::net::TcpListener::bind("[::]:0").is_err() {
        skip("this machine cannot listen on IPv6 [::]");
        return;
    }
    // With and without the brackets of an IPv6 address.
    for bind in ["[::]", "::"] {
        let port = free_port();
        let _s = Server::start(port, &["--bind", bind]);
        assert_pong(Ipv4Addr::LOCALHOST.into(), port);
        assert_pong(Ipv6Addr::LOCALHOST.into(), port);
        assert_denied(other.into(), port);
    }
}
