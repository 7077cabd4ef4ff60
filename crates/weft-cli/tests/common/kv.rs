//! Servers for the weft-kv durability tests: `weft kv serve` (the built binary) and a
//! redis-server of the same shape, each on a Unix socket in a temporary directory,
//! killed if still running when dropped; and `weft kv check`.
//!
//! Included with `#[path]` by the tests that need it (beside `mod common`).

#![allow(dead_code)] // each test binary uses its own subset

use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use weft_kv::client::{Addr, Client};
use weft_kv::resp::Reply;

pub const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// CRC32C (Castagnoli), bit by bit, as weft-kv computes it: where it places keys (the
/// shard is this modulo the shard count), and the checksum ending a DUMP payload.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82f6_3b78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// The generous ceiling for anything that should happen: a server starting, exiting.
pub const CEILING: Duration = Duration::from_secs(60);

/// A running server (weft-kv or redis-server) on a Unix socket.
pub struct KvServer {
    pub child: Child,
    pub socket: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl KvServer {
    /// `weft kv serve --port 0 --dir DIR --socket SOCKET EXTRA...`, once it answers
    /// PING; `Err` with what it printed if it exits first.
    pub fn weft(dir: &Path, socket: &Path, extra: &[&str]) -> Result<KvServer, String> {
        KvServer::weft_tcp(dir, socket, 0, extra)
    }

    /// [`KvServer::weft`], also on TCP `port` (0: no TCP), once the port accepts
    /// connections too.
    pub fn weft_tcp(
        dir: &Path,
        socket: &Path,
        port: u16,
        extra: &[&str],
    ) -> Result<KvServer, String> {
        let mut cmd = Command::new(WEFT);
        cmd.args(["kv", "serve", "--port", &port.to_string()])
            .args(extra)
            .arg("--dir")
            .arg(dir)
            .arg("--socket")
            .arg(socket)
            .env_remove("WEFT_KV_PASSWORD");
        let mut s = KvServer::spawn(cmd, socket, &log_next_to(socket))?;
        let deadline = Instant::now() + CEILING;
        while port != 0 && TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Some(st) = s.child.try_wait().unwrap() {
                return Err(format!("exited with {st}: {}", s.stderr()));
            }
            assert!(Instant::now() < deadline, "no TCP: {}", s.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(s)
    }

    /// A redis-server persisting into `dir` (`appendonly` yes or no, no RDB snapshots),
    /// or `None` (after `skip`) when redis-server is not installed.
    pub fn redis(dir: &Path, socket: &Path, appendonly: bool) -> Option<KvServer> {
        let exe = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|e| Command::new(e).arg("--version").output().is_ok())?;
        let mut cmd = Command::new(exe);
        cmd.args(["--port", "0", "--unixsocket"])
            .arg(socket)
            .args(["--save", ""])
            .args(["--appendonly", if appendonly { "yes" } else { "no" }])
            .args(["--appendfsync", "always", "--dir"])
            .arg(dir);
        Some(KvServer::spawn(cmd, socket, &log_next_to(socket)).expect("redis-server starts"))
    }

    fn spawn(mut cmd: Command, socket: &Path, log: &Path) -> Result<KvServer, String> {
        let err = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start the server");
        let mut s = KvServer {
            child,
            socket: socket.to_path_buf(),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + CEILING;
        loop {
            if let Some(st) = s.child.try_wait().unwrap() {
                return Err(format!("exited with {st}: {}", s.stderr()));
            }
            if let Ok(mut c) = s.client() {
                // Not for ever: what listens there may not be this server.
                c.set_timeout(Some(Duration::from_secs(1))).unwrap();
                // Up: PONG, or NOAUTH from a server that wants a password.
                let up = match c.command(&[b"PING"]) {
                    Ok(Reply::Simple(_)) => true,
                    Ok(Reply::Error(e)) => e.starts_with("NOAUTH"),
                    _ => false,
                };
                if up {
                    return Ok(s);
                }
            }
            assert!(
                Instant::now() < deadline,
                "the server did not start: {}",
                s.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn client(&self) -> std::io::Result<Client> {
        Client::connect(&Addr::Unix(self.socket.clone()))
    }

    /// A field of the server's `/proc/PID/status` in KiB (`VmRSS`, `VmHWM`, ...).
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
    }

    /// What the server printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (by number) to the server.
    pub fn signal(&self, signal: i32) {
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
    }

    /// Waits (up to [`CEILING`]) for the server to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + CEILING;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "the server did not exit: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL, and waits for the process to be gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `weft kv serve` on a fresh temporary directory (its data in `data/`, its socket
/// `kv.sock`), removed when dropped; it derefs to its [`KvServer`].
pub struct TempKv {
    pub server: KvServer,
    /// The data directory.
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl TempKv {
    /// Starts one with `extra` options, also on TCP `port` unless it is 0.
    pub fn start(port: u16, extra: &[&str]) -> TempKv {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let server = KvServer::weft_tcp(&dir, &tmp.path().join("kv.sock"), port, extra)
            .unwrap_or_else(|e| panic!("weft kv serve {extra:?}: {e}"));
        TempKv {
            server,
            dir,
            _tmp: tmp,
        }
    }
}

impl std::ops::Deref for TempKv {
    type Target = KvServer;
    fn deref(&self) -> &KvServer {
        &self.server
    }
}

impl std::ops::DerefMut for TempKv {
    fn deref_mut(&mut self) -> &mut KvServer {
        &mut self.server
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn log_next_to(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".stderr");
    PathBuf::from(name)
}

/// `weft kv check [--repair] --dir DIR`.
pub fn weft_check(dir: &Path, repair: bool) -> Output {
    let mut cmd = Command::new(WEFT);
    cmd.args(["kv", "check", "--dir"]).arg(dir);
    if repair {
        cmd.arg("--repair");
    }
    cmd.output().expect("run weft kv check")
}

/// Waits (up to [`CEILING`]) until `f` holds.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + CEILING;
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends one command (its words as text) and answers its reply.
pub fn run(c: &mut Client, args: &[&str]) -> Reply {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.command(&args).unwrap()
}

/// The reply `+OK`.
pub fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// A bulk string reply.
pub fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// A small deterministic random generator (xorshift64*), so a failing run can be
/// replayed from the number it prints.
pub struct Rng(pub u64);

impl Rng {
    pub fn from_time() -> u64 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        t ^ (u64::from(std::process::id()) << 32) | 1
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
