//! The weft-kv daemon: `serve(config)`.
//!
//! ```text
//!   listeners (unix, tcp) ── accept ──> one green thread per connection, spread over
//!                                       the workers round-robin        (conn.rs)
//!   connection on worker w ── commands on w's shards: run in place
//!                          └─ commands on other shards: IPC call to the shard's
//!                             server thread, one per shard per pipeline (shards.rs)
//!   each shard ── flusher green thread: group commit of its log (shards.rs)
//!   each worker ── housekeeping: active expiry, automatic compaction (shards.rs)
//! ```
//!
//! Start-up: check the Unix socket's path (nothing there, or a stale socket), take the
//! data directory (its lock excludes a second server or an embedded store on the same
//! files; it must prove it is whole: `log/dir.rs`), recover every shard's log (in
//! parallel, one OS thread per shard), then start the runtime, the shards' threads and
//! the listeners. Shut-down (SHUTDOWN, SIGTERM, SIGINT): compaction stopped, every log
//! written and fsynced and no write left under way (`Shards::close`), the Unix socket
//! removed, exit.

pub(crate) mod admin;
pub(crate) mod blocking;
pub(crate) mod clients;
pub(crate) mod command;
pub mod config;
pub(crate) mod conn;
pub(crate) mod info;
pub(crate) mod input;
pub(crate) mod keyspecs;
pub(crate) mod memory;
pub(crate) mod multi;
pub(crate) mod poll;
pub(crate) mod pubsub;
pub(crate) mod shards;
pub(crate) mod shm;
pub(crate) mod slowlog;
pub(crate) mod stats;
pub(crate) mod tracking;

pub use config::{Config, DebugCommand, Fsync};

use crate::keyspace::{access, Keyspace, Replay};
use crate::log::{self, DataDir, LogWriter};
use shards::Shards;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use weft_runtime::{Runtime, ThreadBuilder};

/// The settings CONFIG SET may change while the server runs.
pub(crate) struct Settings {
    fsync: AtomicU8,
    maxmemory: AtomicU64,
    maxclients: AtomicUsize,
    password: std::sync::Mutex<Option<String>>,
    rewrite_min: AtomicU64,
    rewrite_pct: AtomicU64,
    client_output_limit: AtomicUsize,
    protected_mode: AtomicBool,
    /// Keys whose time has passed are removed in the background (DEBUG
    /// SET-ACTIVE-EXPIRE turns it off: they are then removed only when a command
    /// finds them).
    active_expire: AtomicBool,
    /// DEBUG PAUSE-CRON 1: each worker's periodic work (active expiry, automatic
    /// compaction) waits until PAUSE-CRON 0.
    cron_paused: AtomicBool,
}

impl Settings {
    fn new(c: &Config) -> Settings {
        // Checked by `weft kv serve`; a bad value here leaves notifications off.
        let _ = crate::pubsub::notify::set(&c.notify_keyspace_events);
        crate::keyspace::access::set_policy(c.maxmemory_policy);
        Settings {
            fsync: AtomicU8::new(c.fsync as u8),
            maxmemory: AtomicU64::new(c.maxmemory),
            maxclients: AtomicUsize::new(c.max_clients),
            password: std::sync::Mutex::new(c.password.clone()),
            rewrite_min: AtomicU64::new(64 << 20),
            rewrite_pct: AtomicU64::new(100),
            client_output_limit: AtomicUsize::new(c.client_output_limit),
            protected_mode: AtomicBool::new(c.protected_mode),
            active_expire: AtomicBool::new(true),
            cron_paused: AtomicBool::new(false),
        }
    }
    /// The fsync policy.
    pub fn fsync(&self) -> Fsync {
        match self.fsync.load(Relaxed) {
            x if x == Fsync::Always as u8 => Fsync::Always,
            x if x == Fsync::No as u8 => Fsync::No,
            _ => Fsync::EverySec,
        }
    }
    /// The memory limit (0: none).
    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Relaxed)
    }
    /// The connection limit.
    pub fn maxclients(&self) -> usize {
        self.maxclients.load(Relaxed)
    }
    /// The password, if one is set.
    pub fn password(&self) -> Option<String> {
        self.password.lock().unwrap().clone()
    }
    /// The most bytes of replies a connection holds unsent.
    pub fn client_output_limit(&self) -> usize {
        self.client_output_limit.load(Relaxed)
    }
    /// Whether protected mode is on (it refuses clients from other machines only
    /// while no password is set).
    pub fn protected_mode(&self) -> bool {
        self.protected_mode.load(Relaxed)
    }
    /// Whether keys whose time has passed are removed in the background.
    pub fn active_expire(&self) -> bool {
        self.active_expire.load(Relaxed)
    }
    /// Turns the background removal of expired keys on or off (DEBUG).
    pub fn set_active_expire(&self, on: bool) {
        self.active_expire.store(on, Relaxed);
    }
    /// Whether each worker's periodic work is paused (DEBUG PAUSE-CRON).
    pub fn cron_paused(&self) -> bool {
        self.cron_paused.load(Relaxed)
    }
    /// Pauses or resumes each worker's periodic work (DEBUG PAUSE-CRON).
    pub fn set_cron_paused(&self, paused: bool) {
        self.cron_paused.store(paused, Relaxed);
    }
    /// Automatic compaction: (minimum log size, growth percentage; 0 = off).
    pub fn auto_rewrite(&self) -> (u64, u64) {
        (
            self.rewrite_min.load(Relaxed),
            self.rewrite_pct.load(Relaxed),
        )
    }

    /// Every setting CONFIG GET knows, with its value.
    pub fn all(&self, c: &Config) -> Vec<(&'static str, String)> {
        let path = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        };
        vec![
            ("appendonly", "yes".into()),
            ("aof-use-rdb-preamble", "no".into()),
            ("appendfsync", self.fsync().name().into()),
            ("save", String::new()),
            ("maxmemory", self.maxmemory().to_string()),
            ("maxmemory-policy", access::policy().name().into()),
            ("maxmemory-samples", access::samples().to_string()),
            ("lfu-log-factor", access::log_factor().to_string()),
            ("lfu-decay-time", access::decay_time().to_string()),
            ("maxclients", self.maxclients().to_string()),
            ("requirepass", self.password().unwrap_or_default()),
            ("port", c.port.to_string()),
            ("bind", c.bind.clone()),
            ("unixsocket", path(&c.unix_socket)),
            ("unixsocketperm", "600".into()),
            ("dir", c.dir.display().to_string()),
            ("databases", crate::log::DATABASES.to_string()),
            (
                "hash-max-listpack-entries",
                crate::keyspace::hash::max_packed_entries().to_string(),
            ),
            (
                "hash-max-listpack-value",
                crate::keyspace::hash::max_packed_value().to_string(),
            ),
            (
                "hash-max-ziplist-entries",
                crate::keyspace::hash::max_packed_entries().to_string(),
            ),
            (
                "hash-max-ziplist-value",
                crate::keyspace::hash::max_packed_value().to_string(),
            ),
            (
                "list-max-listpack-size",
                crate::keyspace::list::max_packed_size().to_string(),
            ),
            (
                "list-max-ziplist-size",
                crate::keyspace::list::max_packed_size().to_string(),
            ),
            (
                "list-compress-depth",
                crate::keyspace::list::compress_depth().to_string(),
            ),
            (
                "set-max-intset-entries",
                crate::keyspace::set::max_ints().to_string(),
            ),
            (
                "set-max-listpack-entries",
                crate::keyspace::set::max_packed_entries().to_string(),
            ),
            (
                "set-max-listpack-value",
                crate::keyspace::set::max_packed_value().to_string(),
            ),
            (
                "zset-max-listpack-entries",
                crate::keyspace::zset::max_packed_entries().to_string(),
            ),
            (
                "zset-max-listpack-value",
                crate::keyspace::zset::max_packed_value().to_string(),
            ),
            (
                "zset-max-ziplist-entries",
                crate::keyspace::zset::max_packed_entries().to_string(),
            ),
            (
                "zset-max-ziplist-value",
                crate::keyspace::zset::max_packed_value().to_string(),
            ),
            (
                "stream-node-max-entries",
                crate::keyspace::stream::node_max_entries().to_string(),
            ),
            (
                "stream-node-max-bytes",
                crate::keyspace::stream::node_max_bytes().to_string(),
            ),
            (
                "hll-sparse-max-bytes",
                crate::commands::hll::sparse_max_bytes().to_string(),
            ),
            (
                "tracking-table-max-keys",
                crate::pubsub::tracking::max_keys().to_string(),
            ),
            ("proto-max-bulk-len", c.max_bulk.to_string()),
            (
                "auto-aof-rewrite-percentage",
                self.rewrite_pct.load(Relaxed).to_string(),
            ),
            (
                "auto-aof-rewrite-min-size",
                self.rewrite_min.load(Relaxed).to_string(),
            ),
            ("io-threads", "1".into()),
            (
                "client-output-limit",
                self.client_output_limit().to_string(),
            ),
            (
                "protected-mode",
                if self.protected_mode() { "yes" } else { "no" }.into(),
            ),
            ("notify-keyspace-events", crate::pubsub::notify::get()),
            ("enable-debug-command", c.enable_debug_command.name().into()),
            (
                "client-output-buffer-limit",
                self::pubsub::output_buffer_limit(),
            ),
        ]
    }

    /// CONFIG SET name value: an error text for unknown names and bad values.
    pub fn set(&self, name: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| {
            parse_size(v).ok_or_else(|| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer")
            })
        };
        let signed = |v: &str, min: i64| {
            match v.trim().parse::<i64>() {
            Ok(n) if (min..=i32::MAX as i64).contains(&n) => Ok(n),
            Ok(_) => Err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between {min} and {} inclusive",
                i32::MAX
            )),
            Err(_) => Err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"
            )),
        }
        };
        match name {
            "appendfsync" => {
                let f: Fsync = value.parse().map_err(|e| {
                    format!("ERR Invalid argument '{value}' for CONFIG SET 'appendfsync' - {e}")
                })?;
                self.fsync.store(f as u8, Relaxed);
            }
            "maxmemory" => self.maxmemory.store(num(value)?, Relaxed),
            // Over the memory limit: which keys are evicted, if any (`evict.rs`).
            "maxmemory-policy" => access::set_policy(access::Policy::parse(value).ok_or_else(|| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument(s) must be one of the following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, allkeys-random, noeviction")
            })?),
            "maxmemory-samples" => access::set_samples(signed(value, 1)? as u32),
            "lfu-log-factor" => access::set_log_factor(signed(value, 0)? as u32),
            "lfu-decay-time" => access::set_decay_time(signed(value, 0)? as u32),
            "maxclients" => self.maxclients.store(num(value)? as usize, Relaxed),
            "requirepass" => {
                *self.password.lock().unwrap() = (!value.is_empty()).then(|| value.to_string())
            }
            "auto-aof-rewrite-min-size" => self.rewrite_min.store(num(value)?, Relaxed),
            // A hash stays packed within these (later writes convert by them).
            "hash-max-listpack-entries" | "hash-max-ziplist-entries" => {
                crate::keyspace::hash::set_thresholds(Some(num(value)? as usize), None)
            }
            "hash-max-listpack-value" | "hash-max-ziplist-value" => {
                crate::keyspace::hash::set_thresholds(None, Some(num(value)? as usize))
            }
            // A sorted set stays packed within these (later writes convert by them).
            "zset-max-listpack-entries" | "zset-max-ziplist-entries" => {
                crate::keyspace::zset::set_thresholds(Some(num(value)? as usize), None)
            }
            "zset-max-listpack-value" | "zset-max-ziplist-value" => {
                crate::keyspace::zset::set_thresholds(None, Some(num(value)? as usize))
            }
            // A list node's size (later writes pack and split by it).
            "list-max-listpack-size" | "list-max-ziplist-size" => {
                crate::keyspace::list::set_max_packed_size(signed(value, i32::MIN as i64)?)
            }
            // Accepted and shown; weft-kv does not compress list nodes.
            "list-compress-depth" => crate::keyspace::list::set_compress_depth(signed(value, 0)?),
            // A set stays of integers, or packed, within these.
            "set-max-intset-entries" => {
                crate::keyspace::set::set_thresholds(Some(num(value)? as usize), None, None)
            }
            "set-max-listpack-entries" => {
                crate::keyspace::set::set_thresholds(None, Some(num(value)? as usize), None)
            }
            "set-max-listpack-value" => {
                crate::keyspace::set::set_thresholds(None, None, Some(num(value)? as usize))
            }
            // A stream's entries go into nodes of these bounds (approximate trimming
            // removes whole nodes).
            "stream-node-max-entries" => {
                crate::keyspace::stream::set_node_bounds(Some(num(value)?), None)
            }
            "stream-node-max-bytes" => {
                crate::keyspace::stream::set_node_bounds(None, Some(num(value)?))
            }
            // A sparse HyperLogLog turns dense past this.
            "hll-sparse-max-bytes" => {
                crate::commands::hll::set_sparse_max_bytes(num(value)? as usize)
            }
            // Keys remembered for client-side caching, past which some are taken out
            // (their connections told); 0: no limit.
            "tracking-table-max-keys" => {
                crate::pubsub::tracking::set_max_keys(num(value)? as usize)
            }
            "auto-aof-rewrite-percentage" => self.rewrite_pct.store(num(value)?, Relaxed),
            "client-output-limit" => {
                let n = usize::try_from(num(value)?).unwrap_or(usize::MAX);
                self.client_output_limit.store(n, Relaxed)
            }
            "protected-mode" => match value.to_ascii_lowercase().as_str() {
                "yes" => self.protected_mode.store(true, Relaxed),
                "no" => self.protected_mode.store(false, Relaxed),
                _ => {
                    return Err("ERR CONFIG SET failed (possibly related to argument 'protected-mode') - argument must be 'yes' or 'no'".into())
                }
            },
            // Who may run DEBUG is the server's start's to say, as in Redis.
            "enable-debug-command" => {
                return Err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set \
                     protected config: give it when starting the server (weft kv serve \
                     --enable-debug-command)"
                ))
            }
            "notify-keyspace-events" => crate::pubsub::notify::set(value).map_err(|e| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")
            })?,
            "client-output-buffer-limit" => self::pubsub::set_output_buffer_limit(value).map_err(|e| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")
            })?,
            "save" | "appendonly" if value.is_empty() || value == "yes" => {}
            // The log is never an RDB file with records after it: "no" is what it is.
            "aof-use-rdb-preamble" if value == "no" => {}
            _ => {
                return Err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                ))
            }
        }
        Ok(())
    }
}

/// A size: a number with an optional k, kb, m, mb, g, gb suffix (as Redis's config).
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = [
        ("gb", 1u64 << 30),
        ("g", 1_000_000_000),
        ("mb", 1 << 20),
        ("m", 1_000_000),
        ("kb", 1 << 10),
        ("k", 1000),
        ("b", 1),
    ]
    .iter()
    .find_map(|(suf, mul)| s.strip_suffix(suf).map(|n| (n.to_string(), *mul)))
    .unwrap_or((s.clone(), 1));
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// The running server: its configuration, shards and counters.
pub(crate) struct Server {
    /// The configuration it started with.
    pub config: Config,
    /// What CONFIG SET may change.
    pub settings: Arc<Settings>,
    /// The shards.
    pub shards: Arc<Shards>,
    /// Worker threads.
    pub workers: usize,
    /// Connections open now, and ever (the flushers read the first:
    /// `Shards::count_clients`).
    pub clients: Arc<AtomicUsize>,
    /// The bytes the connections' buffers hold (input and output; INFO's
    /// mem_clients_normal).
    pub client_memory: AtomicUsize,
    pub connections: AtomicU64,
    /// Commands processed.
    pub commands: AtomicU64,
    /// Unix time of the last SAVE.
    pub last_save: AtomicU64,
    /// Every connection (CLIENT LIST, KILL, PAUSE).
    pub registry: clients::Registry,
    /// Command, error and network counters (INFO).
    pub stats: stats::Stats,
    /// What INFO keeps between calls.
    pub info: info::InfoState,
    /// When it started.
    pub started: Instant,
    /// The workers' busy-pollers (`poll.rs`).
    pub pollers: Arc<poll::Pollers>,
    exiting: AtomicBool,
}

impl Server {
    /// Writes and fsyncs every log (the caller did), removes the Unix socket, exits.
    pub fn exit(&self) -> ! {
        self.exiting.store(true, SeqCst);
        if let Some(p) = &self.config.unix_socket {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_file(crate::shm::socket_path(p));
        }
        eprintln!("weft-kv: logs written and fsynced; exiting");
        std::process::exit(0)
    }
}

/// How many workers the server runs when `--workers` is not given, and how many shards
/// a new data directory gets (from the server or from [`crate::store::Store::open`]):
/// half the CPUs, at least one.
///
/// A local store's clients are processes of the same machine, and each request costs
/// a client about as much CPU as the server, so the server leaves them half the CPUs.
/// A data directory keeps the shard count it was created with; when it differs from
/// the worker count, shard `s` belongs to worker `s % workers`.
pub fn default_workers() -> usize {
    // Measured on 2 CPUs (redis-benchmark -c 50 -P 16 over the Unix socket): 1 worker
    // did GET 700k/s and SET 326k/s, 2 workers 350k/s and 166k/s, at twice the CPU per
    // request: the second worker competed with the client for a core and sent half of
    // every connection's commands across workers. Measured again on 2 CPUs with the
    // event-loop load generator (docs/benchmarks.md, 2026-11-29, "The default worker
    // count"): 2 workers took 5-15x the CPU per request of 1 and answered 3-9x fewer
    // requests, one command at a time and pipelined, over the Unix socket and shared
    // memory; most of the difference was the idle spin waiting on the other worker.
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// Runs the server until SHUTDOWN, SIGTERM or SIGINT, or a fatal error: creates the
/// data directory if needed, recovers every shard's log, binds the sockets and serves.
pub fn serve(config: Config) -> io::Result<()> {
    let workers = if config.workers == 0 {
        default_workers()
    } else {
        config.workers
    };
    if config.max_bulk > log::MAX_VALUE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the largest bulk string ({} bytes) is above {} bytes (1gb), the longest key \
                 or value the log holds",
                config.max_bulk,
                log::MAX_VALUE
            ),
        ));
    }
    // APPEND and SETRANGE make strings up to proto-max-bulk-len, as in Redis.
    crate::commands::strings::set_max_string(config.max_bulk as u64);
    if let Some(p) = &config.unix_socket {
        clear_socket_path(p)?;
    }
    let t0 = Instant::now();
    let dir = Arc::new(DataDir::open(&config.dir, workers)?);
    let (spaces, last_tx, highest_tx) = recover_all(&dir)?;
    let keys: usize = spaces
        .iter()
        .flat_map(|(dbs, _, _)| dbs.iter().map(Keyspace::len))
        .sum();
    eprintln!(
        "weft-kv {}: recovered {keys} keys from {} shards in {} in {:.1} ms",
        env!("CARGO_PKG_VERSION"),
        dir.shards(),
        config.dir.display(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    let (spaces, writers): (Vec<_>, Vec<_>) = spaces
        .into_iter()
        .map(|(ks, len, w)| ((ks, len), w))
        .unzip();

    // SIGTERM and SIGINT are taken by a thread of ours (blocked in every other
    // thread, which inherit this mask), which shuts down cleanly.
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on this thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };

    // The workers are not pinned to CPUs: the server shares the machine with its
    // clients and whatever else runs there, and a worker pinned to a busy CPU waits
    // behind that CPU's other threads each time it wakes (under two CPU hogs, a
    // pinned worker waited up to 96 ms to run after a request arrived, and trivial
    // pipelines took 0.1 s and more), while the scheduler would have run it on
    // another CPU at once.
    let rt = Arc::new(
        Runtime::builder()
            .workers(workers)
            .pin(false)
            .name("weft-kv")
            .build()?,
    );
    let settings = Arc::new(Settings::new(&config));
    let shards = Arc::new(
        Shards::new(spaces, workers, dir.clone(), settings.clone())
            .with_tx_ids(&last_tx, highest_tx),
    );
    let clients = Arc::new(AtomicUsize::new(0));
    shards.count_clients(clients.clone());
    let server = Arc::new(Server {
        config,
        settings,
        shards,
        workers,
        clients,
        client_memory: AtomicUsize::new(0),
        connections: AtomicU64::new(0),
        commands: AtomicU64::new(0),
        last_save: AtomicU64::new(crate::shard::now_ms() / 1000),
        registry: clients::Registry::new(workers * 4),
        stats: stats::Stats::new(workers),
        info: info::InfoState::new(),
        started: Instant::now(),
        pollers: Arc::new(poll::Pollers::new(workers, poll::enabled())),
        exiting: AtomicBool::new(false),
    });

    {
        let rt = rt.clone();
        let server = server.clone();
        std::thread::Builder::new()
            .name("weft-kv-signals".into())
            .spawn(move || {
                let mut sig = 0;
                // SAFETY: waits for the signals blocked above.
                unsafe { libc::sigwait(&set, &mut sig) };
                eprintln!("weft-kv: signal {sig}: shutting down");
                let s = server.clone();
                let b = ThreadBuilder::new().name("kv-shutdown");
                let _ = b.spawn_in(&rt, move || {
                    if let Err(e) = s.shards.close() {
                        eprintln!("weft-kv: cannot write the logs before exiting: {e}");
                        std::process::exit(1);
                    }
                    s.exit()
                });
            })?;
    }

    let s = server.clone();
    rt.block_on(move || -> io::Result<()> {
        weft_runtime::set_name("kv-main");
        s.shards.start(writers)?;
        s.pollers.start()?;
        let mut listeners = Vec::new();
        if let Some(path) = s.config.unix_socket.clone() {
            listeners.push(bind_unix(&path, s.clone())?);
            // Shared memory for local clients, beside the socket (`shm.rs`); without
            // it (a path too long for one more socket, say) the socket still serves.
            if s.config.shm {
                match shm::bind(&crate::shm::socket_path(&path), s.clone()) {
                    Ok(l) => listeners.push(l),
                    Err(e) => eprintln!("weft-kv: no shared-memory clients: {e}"),
                }
            }
        }
        if s.config.port != 0 {
            let addr = tcp_addr(&s.config.bind, s.config.port);
            let l = weft_runtime::net::TcpListener::bind(&addr).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot listen on tcp {addr}: {e}"))
            })?;
            eprintln!("weft-kv: listening on tcp {addr}");
            let s2 = s.clone();
            listeners.push(spawn_named(format!("kv-listen tcp {addr}"), move || loop {
                if let Ok((c, peer)) = l.accept() {
                    if conn::protected_mode_refuses(&s2, peer.ip()) {
                        use std::io::Write;
                        let _ = (&c).write_all(conn::PROTECTED_MODE_ERROR);
                        continue;
                    }
                    let _ = c.set_nodelay(true);
                    accept(&s2, c);
                }
            }));
        }
        eprintln!(
            "weft-kv: ready ({} workers, fsync {})",
            s.workers,
            s.settings.fsync().name()
        );
        for l in listeners {
            let _ = l.join();
        }
        Ok(())
    })
}

/// Checks the Unix socket's path before anything starts: nothing there, or a stale
/// socket (one nobody listens on), which is removed. Anything else is refused: a file
/// that is not a socket is never replaced, and a socket in use belongs to a live server.
fn clear_socket_path(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot look at the socket path {}: {e}", path.display()),
            ))
        }
    };
    if !meta.file_type().is_socket() {
        let what = if meta.is_dir() {
            "a directory"
        } else if meta.file_type().is_symlink() {
            "a symbolic link"
        } else if meta.is_file() {
            "a regular file"
        } else {
            "not a socket"
        };
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is {what}, not a socket: weft-kv does not replace it. Move it \
                 away, or give another --socket",
                path.display()
            ),
        ));
    }
    // A server killed a moment ago may still accept for a little while: the kernel
    // releases a listening socket that a dead process's io_uring holds only when it
    // has torn that ring down. So a socket that accepts is tried again for a while.
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    let mut tried = std::os::unix::net::UnixStream::connect(path);
    while tried.is_ok() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        tried = std::os::unix::net::UnixStream::connect(path);
    }
    match tried {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "another server listens on {}: stop it or give another --socket",
                path.display()
            ),
        )),
        // Nobody listens: a socket left by a server that did not remove it.
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => std::fs::remove_file(path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot remove the stale socket {}: {e}", path.display()),
                )
            }),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "{} is a socket that cannot be tried ({e}): give another --socket",
                path.display()
            ),
        )),
    }
}

fn bind_unix(path: &std::path::Path, s: Arc<Server>) -> io::Result<weft_runtime::JoinHandle<()>> {
    use std::os::unix::fs::PermissionsExt;
    clear_socket_path(path)?;
    let l = weft_runtime::net::UnixListener::bind(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    eprintln!("weft-kv: listening on unix {}", path.display());
    Ok(spawn_named("kv-listen unix".into(), move || loop {
        if let Ok(c) = l.accept() {
            accept(&s, c);
        }
    }))
}

/// Spawns `f` as a green thread named `name`, as `weft ps` shows it (as
/// `weft_runtime::spawn` does, which panics when no stack can be made).
#[track_caller]
fn spawn_named<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> weft_runtime::JoinHandle<T> {
    ThreadBuilder::new()
        .name(name)
        .spawn(f)
        .unwrap_or_else(|e| panic!("weft-kv: cannot create a green thread: {e}"))
}

/// Takes a new connection: refused when the server is full, else served by a green
/// thread on the next worker (round-robin).
fn accept<S>(s: &Arc<Server>, stream: S)
where
    S: Send + Sync + 'static + input::Input + clients::Peer,
    for<'a> &'a S: io::Read + io::Write,
{
    use std::io::Write;
    if s.clients.fetch_add(1, AcqRel) >= s.settings.maxclients() {
        s.clients.fetch_sub(1, AcqRel);
        let _ = (&stream).write_all(b"-ERR max number of clients reached\r\n");
        return;
    }
    let id = s.connections.fetch_add(1, Relaxed) + 1;
    let worker = (id as usize) % s.workers;
    let s2 = s.clone();
    let spawned = ThreadBuilder::new()
        .name(format!("kv-conn {id}"))
        .preemptible(false)
        .spawn_on(worker, move || conn::serve(s2, stream, id));
    if spawned.is_err() {
        s.clients.fetch_sub(1, AcqRel);
    }
}

/// What recovery gives each shard: its keys, its log's size, its writer.
type Recovered = Vec<(Vec<Keyspace>, u64, LogWriter)>;

/// Recovers every shard (one OS thread each): its keys, its log's size, its writer;
/// and the highest transaction id of each shard and of all (the held-back last parts
/// of transactions kept or cut: `log/tx.rs`).
fn recover_all(dir: &DataDir) -> io::Result<(Recovered, Vec<u64>, u64)> {
    let now = crate::shard::now_ms();
    let replayed = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..dir.shards())
            .map(|s| {
                let path = dir.log_path(s);
                scope.spawn(move || -> io::Result<(Vec<Keyspace>, u64, log::tx::TxTail)> {
                    let mut dbs: Vec<Keyspace> =
                        (0..log::DATABASES).map(|_| Keyspace::new()).collect();
                    let mut replay = Replay::new(&mut dbs, now);
                    let mut txs = log::tx::TxReplay::new(|db, r| replay.push(db, r));
                    let rec = log::recover_refs(&path, |db, r| txs.push(db, r))
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    let tail = txs.finish();
                    replay.finish();
                    if rec.torn_bytes > 0 {
                        eprintln!(
                            "weft-kv: {}: cut a torn tail of {} bytes at offset {}: the last write did not reach the file whole (a crash stopped it). With --fsync always it had not been acknowledged; with everysec or no, a crash of the machine may lose the last second of acknowledged writes, as those policies allow",
                            path.display(),
                            rec.torn_bytes,
                            rec.bytes
                        );
                    }
                    Ok((dbs, rec.bytes, tail))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("recovery thread panicked"))
            .collect::<io::Result<Vec<_>>>()
    })?;
    let paths: Vec<_> = (0..dir.shards()).map(|s| dir.log_path(s)).collect();
    let (mut spaces, mut ends, mut tails) = (Vec::new(), Vec::new(), Vec::new());
    for (dbs, end, tail) in replayed {
        spaces.push(dbs);
        ends.push(end);
        tails.push(tail);
    }
    let (last, highest) = log::tx::settle_shards(&paths, &ends, &tails, |s, held| {
        let mut replay = Replay::new(&mut spaces[s], now);
        held.apply(|db, r| replay.push(db, r));
        replay.finish();
    })?;
    let mut out = Vec::with_capacity(spaces.len());
    for (s, dbs) in spaces.into_iter().enumerate() {
        let w = LogWriter::open(&paths[s])?;
        out.push((dbs, w.len(), w));
    }
    Ok((out, last, highest))
}

/// `bind:port` as a socket address: an IPv6 address gets its brackets (`::` listens
/// on every address, `[::1]` is taken as written).
fn tcp_addr(bind: &str, port: u16) -> String {
    if bind.contains(':') && !bind.starts_with('[') {
        format!("[{bind}]:{port}")
    } else {
        format!("{bind}:{port}")
    }
}
