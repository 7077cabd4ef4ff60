//! `weft kv ...`: the weft-kv store from the command line.
//!
//! * `weft kv serve` builds a [`weft_kv::server::Config`] from its options (on top of
//!   the embedded defaults, so it starts with none) and runs the daemon.
//! * `set`, `get`, `del`, `keys`, `stats` are small clients: each connects with
//!   [`weft_kv::client::Client`] (the default Unix socket if it exists, else TCP
//!   127.0.0.1:7379), sends one or a few commands and prints the answer for people
//!   and scripts. They speak plain Redis protocol, so they work against a
//!   redis-server too.
//! * `check` verifies (and with `--repair` repairs) a data directory offline.
//!
//! Exit statuses, the same for every `weft kv` subcommand: 0 success; 1 the answer
//! is "no" (`get`: the key does not exist; `check`: corruption remains); 2 an error
//! (bad options, connection failure, an error reply), printed on stderr.

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use weft_kv::client::{Addr, Client};
use weft_kv::resp::Reply;
use weft_kv::server::config::DEFAULT_PORT;
use weft_kv::server::{Config, Fsync};

const EXIT_STATUSES: &str = "Exit status: 0 success; 1 the answer is no (get: the key does \
not exist; check: corruption remains); 2 an error (bad options, connection failure, an \
error reply), printed on stderr.";

/// The `weft kv` subcommands.
#[derive(clap::Subcommand, Debug)]
#[command(after_help = EXIT_STATUSES)]
pub enum KvCommand {
    /// Run the weft-kv server in the foreground.
    ///
    /// With no options: data in the per-user directory ($XDG_DATA_HOME/weft-kv or ~/.local/share/weft-kv), a Unix
    /// socket there (weft-kv.sock), TCP on 127.0.0.1:7379, fsync every second.
    Serve(ServeArgs),
    /// Set KEY to VALUE; prints `created` (the key was new) or `updated`.
    #[command(after_help = EXIT_STATUSES)]
    Set {
        key: OsString,
        value: OsString,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print KEY's value (its bytes, then a newline).
    #[command(
        after_help = "Exit status: 0 the value was printed; 1 the key does not \
exist (`(nil): key 'KEY' does not exist` on stderr); 2 an error (connection failure, an \
error reply such as WRONGTYPE or NOAUTH), printed on stderr."
    )]
    Get {
        key: OsString,
        #[command(flatten)]
        conn: Conn,
    },
    /// Delete the KEYs; prints how many existed (and were deleted).
    #[command(after_help = EXIT_STATUSES)]
    Del {
        #[arg(required = true)]
        keys: Vec<OsString>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print the keys matching PATTERN, one per line.
    ///
    /// PATTERN is a glob: * ? [abc] [^a] [a-z] \x. Walks the store with SCAN, so a big store is not blocked; a key that is
    /// created or deleted meanwhile may or may not be listed.
    #[command(after_help = EXIT_STATUSES)]
    Keys {
        #[arg(default_value = "*")]
        pattern: OsString,
        #[command(flatten)]
        conn: Conn,
    },
    /// Print the server's version, uptime, keys, memory, clients, commands processed.
    ///
    /// Also its fsync policy and log size: whichever of these it reports in INFO.
    #[command(after_help = EXIT_STATUSES)]
    Stats {
        #[command(flatten)]
        conn: Conn,
    },
    /// Check a data directory and its logs (with the server stopped); prints what it
    /// found, one line per log, and changes nothing.
    ///
    /// It finds what stops `serve` from starting: damaged records, a log missing,
    /// emptied or from another directory, logs the manifest does not name, no manifest.
    /// With --repair, each damaged log is cut at its first damaged record (a copy is
    /// kept), a missing or emptied log is created empty, a missing manifest is rebuilt
    /// from the logs' headers, and leftover compaction files are removed.
    #[command(after_help = EXIT_STATUSES)]
    Check {
        /// The data directory [default: the per-user one, as `serve`'s].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Repair: drop every record from the first damaged one on, in each log (the
        /// data they held is lost; the rest is kept); start a missing or emptied log
        /// empty (its keys are lost); rebuild a missing manifest.
        #[arg(long)]
        repair: bool,
    },
}

/// `weft kv serve`'s options; each one left out keeps its default.
#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_STATUSES)]
pub struct ServeArgs {
    /// The data directory (created, readable by its owner only).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The Unix socket's path [default: DIR/weft-kv.sock]. A socket left there by a
    /// server that is gone is replaced; anything else there is refused.
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    socket: Option<PathBuf>,
    /// Serve no Unix socket.
    #[arg(long)]
    no_socket: bool,
    /// Do not serve clients over shared memory (by default, weft-kv's own client on
    /// this machine may connect through SOCKET.shm, beside the Unix socket).
    #[arg(long)]
    no_shm: bool,
    /// The address TCP listens on [default: 127.0.0.1]. Anything but a loopback
    /// address makes the store reachable from the network: set a password (until
    /// then, protected mode refuses clients from other machines).
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// Protected mode: while no password is set, TCP clients that do not connect
    /// from this machine are refused with a DENIED error. `no` lets any client that
    /// can reach the port read and write without a password [default: yes].
    #[arg(long, value_name = "yes|no", value_parser = parse_yes_no)]
    protected_mode: Option<bool>,
    /// The TCP port; 0: no TCP [default: 7379].
    #[arg(long, value_name = "N")]
    port: Option<u16>,
    /// When the log is flushed to the disk: always (a write is acknowledged once on
    /// the disk), everysec (at most about a second lost if the machine crashes) or no
    /// (the kernel decides) [default: everysec].
    #[arg(long, value_name = "POLICY")]
    fsync: Option<Fsync>,
    /// The memory limit (e.g. 100mb, 2gb, or bytes; k/m/g are powers of 1000, kb/mb/gb
    /// of 1024): the keys' memory the server keeps under, by --maxmemory-policy
    /// [default: none].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    maxmemory: Option<u64>,
    /// What happens over --maxmemory: noeviction (writes that grow memory fail with
    /// an OOM error), or keys are evicted to make room: allkeys-lru (the least
    /// recently used), allkeys-lfu (the least frequently used), allkeys-random, or
    /// the same among keys with an expiry time only: volatile-lru, volatile-lfu,
    /// volatile-random, volatile-ttl (the nearest expiry first) [default: noeviction].
    #[arg(long, value_name = "POLICY", value_parser = parse_policy)]
    maxmemory_policy: Option<weft_kv::keyspace::access::Policy>,
    /// The password clients must give with AUTH [default: none].
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "WEFT_KV_PASSWORD",
        hide_env_values = true
    )]
    requirepass: Option<String>,
    /// The most client connections at once [default: 10000].
    #[arg(long, value_name = "N")]
    max_clients: Option<usize>,
    /// The largest string a request may carry, refused before it is read (at most
    /// 1gb, the longest key or value the log holds) [default: 512mb].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_bulk: Option<u64>,
    /// The most bytes of replies a connection holds unsent: past it, the server
    /// runs no more of that connection's commands (and reads no more of them) until
    /// the client has read its replies. Nothing is dropped; a single larger reply is
    /// still sent whole [default: 32mb].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    client_output_limit: Option<u64>,
    /// Worker threads; 0: half the CPUs, at least one, leaving the others to the clients.
    /// A new data directory gets one shard per worker; an existing one keeps its shards,
    /// shared out among the workers [default: 0].
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// The keyspace notifications to publish, as Redis's notify-keyspace-events
    /// letters: K and/or E (the channels), and the classes of events: g generic, $
    /// strings, l lists, s sets, h hashes, z sorted sets, x expired, e evicted, t
    /// streams, m key misses, n new keys, A all but m and n [default: none].
    #[arg(long, value_name = "LETTERS")]
    notify_keyspace_events: Option<String>,
    /// Who may run DEBUG (commands for tools and test suites; some hold the store
    /// for a while): yes (every client), local (clients on this machine: the Unix
    /// socket and loopback addresses) or no [default: local].
    #[arg(long, value_name = "yes|local|no")]
    enable_debug_command: Option<weft_kv::server::DebugCommand>,
}

/// Where the client subcommands connect, and with which password.
#[derive(clap::Args, Debug)]
pub struct Conn {
    /// Connect to this Unix socket [default: the default data directory's
    /// weft-kv.sock if it exists, else TCP 127.0.0.1:7379].
    #[arg(long, value_name = "PATH", conflicts_with_all = ["host", "port"])]
    socket: Option<PathBuf>,
    /// Connect over TCP to this host [default: 127.0.0.1 when --port is given].
    #[arg(long, value_name = "HOST")]
    host: Option<String>,
    /// Connect over TCP to this port [default: 7379 when --host is given].
    #[arg(long, value_name = "N")]
    port: Option<u16>,
    /// The server's password (sent with AUTH).
    #[arg(
        long,
        value_name = "P",
        env = "WEFT_KV_PASSWORD",
        hide_env_values = true
    )]
    password: Option<String>,
}

/// A subcommand's outcome when it did not fail.
enum Answer {
    Yes,
    No,
}

/// Runs a `weft kv` subcommand; returns the documented exit status.
pub fn run(cmd: KvCommand) -> ExitCode {
    let result = match cmd {
        KvCommand::Serve(args) => serve(args),
        KvCommand::Set { key, value, conn } => set(&conn, &key, &value),
        KvCommand::Get { key, conn } => get(&conn, &key),
        KvCommand::Del { keys, conn } => del(&conn, &keys),
        KvCommand::Keys { pattern, conn } => keys(&conn, &pattern),
        KvCommand::Stats { conn } => stats(&conn),
        KvCommand::Check { dir, repair } => check(dir, repair),
    };
    match result {
        Ok(Answer::Yes) => ExitCode::SUCCESS,
        Ok(Answer::No) => ExitCode::from(1),
        // `| head` closing stdout early is not an error.
        Err(e) if e.is_empty() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft: error: {e}");
            ExitCode::from(2)
        }
    }
}

// ---- serve -----------------------------------------------------------------------

fn serve(a: ServeArgs) -> Result<Answer, String> {
    let mut config = Config::with_dir(a.dir.unwrap_or_else(Config::default_dir));
    if a.no_socket {
        config.unix_socket = None;
    } else if let Some(s) = a.socket {
        config.unix_socket = Some(s);
    }
    config.shm = !a.no_shm;
    if let Some(b) = a.bind {
        config.bind = b;
    }
    if let Some(p) = a.port {
        config.port = p;
    }
    if let Some(f) = a.fsync {
        config.fsync = f;
    }
    if let Some(m) = a.maxmemory {
        config.maxmemory = m;
    }
    if let Some(p) = a.maxmemory_policy {
        config.maxmemory_policy = p;
    }
    config.password = a.requirepass.filter(|p| !p.is_empty());
    if let Some(n) = a.max_clients {
        config.max_clients = n;
    }
    if let Some(n) = a.max_bulk {
        let most = weft_kv::log::MAX_VALUE;
        if n > most as u64 {
            return Err(format!(
                "--max-bulk {n} is too large: at most {most} (1gb), the longest key or value \
                 the log holds (a larger one could not be read back at the next start)"
            ));
        }
        config.max_bulk = n as usize;
    }
    if let Some(n) = a.workers {
        config.workers = n;
    }
    if let Some(n) = a.client_output_limit {
        config.client_output_limit = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(on) = a.protected_mode {
        config.protected_mode = on;
    }
    if let Some(letters) = a.notify_keyspace_events {
        if weft_kv::pubsub::notify::parse(letters.as_bytes()).is_none() {
            return Err(format!(
                "--notify-keyspace-events {letters}: each letter must be one of \
                 KEg$lshzxetmdnA (see --help)"
            ));
        }
        config.notify_keyspace_events = letters;
    }
    if let Some(d) = a.enable_debug_command {
        config.enable_debug_command = d;
    }
    if config.port != 0 && !is_loopback(&config.bind) {
        let why = match (&config.password, config.protected_mode) {
            (Some(_), _) => "",
            (None, true) => "; without a password, protected mode refuses clients from other machines: set one with --requirepass (or WEFT_KV_PASSWORD)",
            (None, false) => "; any client that reaches it may read and write without a password: set one with --requirepass (or WEFT_KV_PASSWORD)",
        };
        eprintln!(
            "weft: warning: TCP listens on {}:{}: the store is reachable from the network{why}",
            config.bind, config.port,
        );
    }
    weft_kv::server::serve(config).map_err(|e| e.to_string())?;
    Ok(Answer::Yes)
}

/// Whether `bind` names only this machine (`localhost`, 127.0.0.0/8, ::1).
fn is_loopback(bind: &str) -> bool {
    let b = bind.trim_start_matches('[').trim_end_matches(']');
    b.eq_ignore_ascii_case("localhost") || b.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `yes` or `no` (any case), as Redis's configuration takes booleans.
fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("invalid value '{s}': use yes or no")),
    }
}

/// A `maxmemory-policy` by its name.
fn parse_policy(s: &str) -> Result<weft_kv::keyspace::access::Policy, String> {
    weft_kv::keyspace::access::Policy::parse(s).ok_or_else(|| {
        "one of noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, \
         volatile-lfu, volatile-random, volatile-ttl"
            .to_string()
    })
}

/// A size as Redis's configuration takes them: bytes, or a number followed by k, m, g
/// (powers of 1000) or kb, mb, gb (powers of 1024), in any case.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &lower[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1000 * 1000,
        "mb" => 1 << 20,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1 << 30,
        _ => u64::MAX,
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|_| unit != u64::MAX)
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| {
            format!("invalid size '{s}': use a number with an optional k, kb, m, mb, g, gb suffix")
        })
}

// ---- the client subcommands ------------------------------------------------------

impl Conn {
    /// The address to connect to (see the options' defaults).
    fn addr(&self) -> Addr {
        if let Some(s) = &self.socket {
            return Addr::Unix(s.clone());
        }
        if self.host.is_none() && self.port.is_none() {
            if let Some(s) = Config::default().unix_socket.filter(|s| s.exists()) {
                return Addr::Unix(s);
            }
        }
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        let port = self.port.unwrap_or(DEFAULT_PORT);
        if host.contains(':') && !host.starts_with('[') {
            Addr::Tcp(format!("[{host}]:{port}"))
        } else {
            Addr::Tcp(format!("{host}:{port}"))
        }
    }

    /// A connection, authenticated if a password was given.
    fn connect(&self) -> Result<Client, String> {
        let mut c = Client::connect_timeout(&self.addr(), Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        if let Some(p) = &self.password {
            c.auth(p).map_err(|e| e.to_string())?;
        }
        Ok(c)
    }
}

/// Sends one command; an error reply becomes an error naming the server.
fn call(c: &mut Client, args: &[&[u8]]) -> Result<Reply, String> {
    match c.command(args).map_err(|e| e.to_string())? {
        Reply::Error(e) => {
            let hint = if e.starts_with("NOAUTH") {
                " (give the password with --password or WEFT_KV_PASSWORD)"
            } else {
                ""
            };
            Err(format!("weft-kv at {} answered: {e}{hint}", c.addr()))
        }
        r => Ok(r),
    }
}

fn unexpected(cmd: &str, r: &Reply) -> String {
    format!("unexpected reply to {cmd}: {r:?}")
}

/// Writes to stdout; a closed pipe (`| head`) ends the command quietly.
fn out(bytes: &[u8]) -> Result<(), String> {
    match io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(String::new()),
        r => r.map_err(|e| format!("cannot write to stdout: {e}")),
    }
}

/// `SET KEY VALUE GET`: the old value tells a new key from an updated one.
fn set(conn: &Conn, key: &OsString, value: &OsString) -> Result<Answer, String> {
    let mut c = conn.connect()?;
    match call(&mut c, &[b"SET", key.as_bytes(), value.as_bytes(), b"GET"])? {
        Reply::Nil => out(b"created\n")?,
        Reply::Bulk(_) => out(b"updated\n")?,
        r => return Err(unexpected("SET", &r)),
    }
    Ok(Answer::Yes)
}

fn get(conn: &Conn, key: &OsString) -> Result<Answer, String> {
    let mut c = conn.connect()?;
    match call(&mut c, &[b"GET", key.as_bytes()])? {
        Reply::Bulk(mut v) => {
            v.push(b'\n');
            out(&v)?;
            Ok(Answer::Yes)
        }
        Reply::Nil => {
            eprintln!("(nil): key '{}' does not exist", key.to_string_lossy());
            Ok(Answer::No)
        }
        r => Err(unexpected("GET", &r)),
    }
}

fn del(conn: &Conn, keys: &[OsString]) -> Result<Answer, String> {
    let mut c = conn.connect()?;
    let mut args: Vec<&[u8]> = vec![b"DEL"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    match call(&mut c, &args)? {
        Reply::Int(n) => out(format!("{n}\n").as_bytes())?,
        r => return Err(unexpected("DEL", &r)),
    }
    Ok(Answer::Yes)
}

/// `SCAN cursor MATCH pattern COUNT 1000` until the cursor comes back to 0.
fn keys(conn: &Conn, pattern: &OsString) -> Result<Answer, String> {
    let mut c = conn.connect()?;
    let mut cursor = b"0".to_vec();
    loop {
        let r = call(
            &mut c,
            &[
                b"SCAN",
                &cursor,
                b"MATCH",
                pattern.as_bytes(),
                b"COUNT",
                b"1000",
            ],
        )?;
        let Reply::Array(mut parts) = r else {
            return Err(unexpected("SCAN", &r));
        };
        let (Some(Reply::Array(batch)), Some(Reply::Bulk(next))) = (parts.pop(), parts.pop())
        else {
            return Err(unexpected("SCAN", &Reply::Array(parts)));
        };
        let mut lines = Vec::new();
        for k in batch {
            let Reply::Bulk(k) = k else {
                return Err(unexpected("SCAN", &k));
            };
            lines.extend_from_slice(&k);
            lines.push(b'\n');
        }
        out(&lines)?;
        if next == b"0" {
            return Ok(Answer::Yes);
        }
        cursor = next;
    }
}

/// What `stats` prints: a label and the INFO fields that may hold it, best first.
const STATS: &[(&str, &[&str])] = &[
    ("version", &["weft_kv_version", "redis_version"]),
    ("uptime (s)", &["uptime_in_seconds"]),
    ("keys", &["keys"]),
    ("used memory", &["used_memory_human", "used_memory"]),
    ("connected clients", &["connected_clients"]),
    ("commands processed", &["total_commands_processed"]),
    ("fsync policy", &["appendfsync", "aof_fsync", "fsync"]),
    (
        "log size",
        &["log_size_human", "log_size", "aof_current_size"],
    ),
];

fn stats(conn: &Conn) -> Result<Answer, String> {
    let mut c = conn.connect()?;
    let info = match call(&mut c, &[b"INFO", b"everything"])? {
        Reply::Bulk(t) | Reply::Verbatim(_, t) => String::from_utf8_lossy(&t).into_owned(),
        r => return Err(unexpected("INFO", &r)),
    };
    let mut fields: Vec<(&str, String)> = info
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim().to_string()))
        .collect();
    // The keys: a `keys` field if the server has one, else the sum of the keyspace's
    // `db0:keys=N,expires=...` lines (none: an empty store).
    if !fields.iter().any(|(k, _)| *k == "keys") {
        let n: u64 = fields
            .iter()
            .filter(|(k, _)| k.starts_with("db") && k[2..].parse::<u32>().is_ok())
            .filter_map(|(_, v)| v.split(',').find_map(|kv| kv.strip_prefix("keys=")))
            .filter_map(|n| n.parse::<u64>().ok())
            .sum();
        if n > 0 || info.contains("# Keyspace") {
            fields.push(("keys", n.to_string()));
        }
    }
    let mut text = String::new();
    for (label, names) in STATS {
        let found = names
            .iter()
            .find_map(|n| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v));
        if let Some(v) = found {
            text.push_str(&format!("{label}: {v}\n"));
        }
    }
    out(text.as_bytes())?;
    Ok(Answer::Yes)
}

// ---- check -----------------------------------------------------------------------

fn check(dir: Option<PathBuf>, repair: bool) -> Result<Answer, String> {
    let dir = dir.unwrap_or_else(Config::default_dir);
    let report = weft_kv::log::check(&dir, repair)
        .map_err(|e| format!("cannot check {}: {e}", dir.display()))?;
    out(format!("{report}\n").as_bytes())?;
    Ok(if !report.usable() {
        Answer::No
    } else {
        Answer::Yes
    })
}
