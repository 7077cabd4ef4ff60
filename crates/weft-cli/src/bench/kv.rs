//! `weft bench kv`: weft-kv against redis-server (Debian's package), side by side in
//! one run, at the same durability (append-only log, fsync every second).
//!
//! The suite starts both servers itself, each on a fresh private temporary directory
//! with a Unix socket there and a free TCP port on 127.0.0.1:
//!
//! * **weft**: this very executable, `weft kv serve --dir D --socket S --port P
//!   --fsync everysec`;
//! * **redis-server**: `redis-server --appendonly yes --appendfsync everysec --save ''
//!   --port P --unixsocket S --dir D` (looked up on PATH; its rows are skipped with a
//!   note when it is not installed).
//!
//! A server is ready when a PING over its Unix socket answers PONG; it is stopped with
//! SIGTERM at the end (or on an error: [`Server`]'s `Drop`), and its directory removed.
//! `WEFT_BENCH_KV_SELF=redis` makes the "weft" side a second redis-server (impl name
//! `redis-stand-in`): it proves the suite itself without weft-kv, and the tests use it.
//! `WEFT_BENCH_KV_SMOKE=1` runs every part with tiny sizes (a key space of 1,000, 500
//! operations per cell, 20,000 redis-benchmark requests): it proves in seconds that the
//! suite runs end to end, as the tests do; its figures mean nothing.
//! `WEFT_BENCH_KV_ONLY=latency` runs only the third part (the latency-under-load
//! tables), to measure a change of the write path without the minutes of the others;
//! `WEFT_BENCH_KV_ONLY=clients` only the client-processes table, and
//! `WEFT_BENCH_KV_ONLY=load` only the load generator's rows, the fixed-rate latency
//! and redis-benchmark's tests. `WEFT_BENCH_KV_FSYNC=always` starts the first pair of
//! servers with fsync always (weft `--fsync always`, redis-server `--appendfsync
//! always`) instead of every second: with `WEFT_BENCH_KV_ONLY=clients` (and `--quick`,
//! as every write then waits for the disk) it gives the client-processes table at that
//! durability.
//!
//! Three parts:
//!
//! 1. **The client-processes table**, the benchmark of section 4 ("Performance
//!    analysis") of a Linux kernel module's report (a key-value store shared by
//!    processes over netlink: Operating Systems 5dv171, Umeå University, 2017): 100,000
//!    reads, 100,000 writes, and 100,000 reads + 100,000 writes mixed, split evenly over
//!    1, 2, 4, 6, 8 and 10 client processes (10,000 with `--quick`). The clients are re-executions of this
//!    binary (`weft bench-worker kv-client`, [`client_worker_main`]), each with its own
//!    connection over the Unix socket, one command at a time (no pipelining): `SET key
//!    value` / `GET key` on random keys of a key space of 100,000 keys, all populated
//!    before the table. Values are a function of the key, so every GET checks the
//!    value it got: a wrong or missing value is an error, not a figure. A worker
//!    connects, says "ready" and waits; the cell's clock starts when all are ready and
//!    are told to go, and stops when the last one has reported: the cell is that wall
//!    time (process start-up and connection excluded). One run per cell, the servers
//!    alternating cell by cell; the report's published figures (its Table 1) are
//!    printed beside. weft-kv's cells are run twice: over the Unix socket (`weft`) and
//!    with its clients over shared memory (`weft-shm`: `kv-client --shm`,
//!    `Client::connect_shm`), each with its ratio to redis-server.
//! 2. **redis-benchmark** (Debian's redis-tools; skipped with a note when absent):
//!    `-t set,get -n N -c 50 -r 100000 --csv`, without and with `-P 16`, over TCP and
//!    over the Unix socket, N = 200,000 (20,000 with `--quick`). The servers take turns
//!    run by run (weft, redis, weft, redis) so noise from the shared machine hits both
//!    alike; each figure is the median of 2 runs (1 with `--quick`). Reported: requests
//!    per second and p50/p99 latency (redis 7's CSV columns), the throughput ratio
//!    weft / redis and the p99 ratio weft / redis, and whether the row meets the
//!    target: at least 1.5x redis-server's throughput with a p99 no higher. Beside
//!    each pair of rows, how busy the client was: redis-benchmark's CPU time (from
//!    `getrusage(RUSAGE_CHILDREN)`) over its wall time. redis-benchmark runs on one
//!    thread, so when it is above 85% of a CPU against both servers it is what limits
//!    the row (without pipelining on a 2-CPU machine it is), and no server can show
//!    more than its rate there.
//!
//! 3. **Latency under load**: how long one small pipeline (PING, SET, GET, INCR, sent
//!    together over TCP on 127.0.0.1) takes from the send to its last reply, try after
//!    try, on a connection opened before and on a new connection per try (the connect
//!    counted), while the machine is (a) quiet, (b) busy with one busy-looping process
//!    per CPU (`weft bench-worker cpu-hog`), (c) busy with those and a disk writer
//!    (`weft bench-worker disk-writer`: appends 1 MiB to a file in the servers'
//!    directory and fdatasyncs it, again and again). The suite starts and stops these
//!    processes itself; they also stop when the suite dies (their stdin closes, and
//!    SIGKILL on their parent's death). Per load up to 2,000 rounds (300 with
//!    `--quick`) within 30 s (8 s); a round is one try per server and connection kind,
//!    the servers taking turns (who goes first alternating), each try followed by a 1 ms
//!    pause so the tries sample the load over time. Reported per row: the number of
//!    tries, p50, p90, p99, p99.9 and the maximum, and weft / redis for each. The table
//!    is measured at fsync every second on the servers above, then again on a fresh
//!    pair with fsync always (weft `--fsync always`, redis-server `--appendfsync
//!    always`; up to 500 rounds, 100 with `--quick`). JSON:
//!    `latency-under-load/<load>/<conn>/<p>` (and `latency-under-load-always/...`) with
//!    load `quiet`, `cpu` or `cpu-disk`, conn `existing` or `new`, p `p50`, `p90`,
//!    `p99`, `p99.9` or `max` in "us", and `.../tries` (a "count").
//!
//! Between parts 2 and 3 (`kv/rows.rs`, the load generator in `kvload.rs`):
//!
//! - **load generator**: `weft bench-worker kv-load`, 50 connections on one
//!   event-loop thread per CPU (an io_uring each), GET and SET one command at a time
//!   (uniform keys; GET also Zipf) and pipelined by 16, closed loop, p50/p99/p99.9 from a latency
//!   histogram; the pipelined rows print redis-benchmark's figure for the same load
//!   beside (a cross-check of both clients). Target on the one-at-a-time uniform rows:
//!   1.5x redis-server's requests/s with a p99 no higher. JSON
//!   `load/unix/P<p>/<op>/<dist>/{rps,p50,p99,p99.9,max}`.
//! - **latency at a fixed rate**: GET from 50 connections at 50% and 90% of
//!   redis-server's closed-loop GET rate (open loop, no coordinated omission), p50 to
//!   max beside each other. JSON `latency-at-rate/<pct>/...`.
//! - **redis-benchmark tests**: `-t set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,
//!   zadd,zpopmin,lrange_100,lrange_600,mset -c 50 -P 16` over the Unix socket; a test
//!   whose commands weft-kv does not answer yet is reported as not supported yet. Target:
//!   at least redis-server's requests/s on every test, with a p99 no higher. JSON
//!   `redis-benchmark-tests/unix/P16/<test>/{rps,p99}`.
//!
//! Units in JSON: the table cells in "ms", throughput in "req/s", redis-benchmark's
//! latencies in "ms", the latency-under-load figures in "us".

mod rows;

use super::progress::{self, Part};
use super::{median, Measurement, Options, Reporter};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The suite the measurements belong to.
const SUITE: &str = "kv";
/// The key space of the client-processes table: keys `key:000000` .. `key:099999`.
const KEYS: u64 = 100_000;
/// The sizes of a smoke run (`WEFT_BENCH_KV_SMOKE=1`).
const SMOKE_KEYS: u64 = 1_000;
const SMOKE_OPS: u64 = 500;
// Not fewer: a pipelined run of fewer requests can end within redis-benchmark's 1 ms
// clock, which then reports an infinite rate.
const SMOKE_RB_REQUESTS: u64 = 20_000;
/// The client process counts (the kernel-module report's).
const PROCS: [usize; 6] = [1, 2, 4, 6, 8, 10];
/// Operations per table cell (each of read and write; mixed does both).
const TABLE_OPS: u64 = 100_000;
const TABLE_OPS_QUICK: u64 = 10_000;
/// The kernel-module report's Table 1 (one run of its benchmark script on the module),
/// in the order of [`PROCS`]: read, write, read/write. The report labels them
/// milliseconds.
const PUBLISHED_TABLE_1: [[f64; 3]; 6] = [
    [0.926, 3.082, 4.049],
    [0.897, 4.223, 5.596],
    [0.928, 8.076, 9.618],
    [1.316, 12.371, 15.067],
    [1.861, 16.568, 20.408],
    [2.363, 20.563, 25.690],
];
/// redis-benchmark: requests per test, concurrent clients, pipelined depth.
const RB_REQUESTS: u64 = 200_000;
const RB_REQUESTS_QUICK: u64 = 20_000;
const RB_CLIENTS: u32 = 50;
const RB_PIPELINE: u32 = 16;
/// The client-processes table's name for weft-kv with its clients over shared memory.
const SHM_IMPL: &str = "weft-shm";

/// The target: weft-kv's throughput at least this multiple of redis-server's.
const TARGET_RATIO: f64 = 1.5;
/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// A client read that waits this long means a stuck server: the worker fails.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one table cell or one redis-benchmark run may take in all.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// What a `kv-client` worker does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// GET of random populated keys; each value checked.
    Read,
    /// SET of random keys to their value.
    Write,
    /// SET then GET, alternately, on random keys (a GET's value checked).
    Mixed,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Mixed => "mixed",
        }
    }
}

/// How the "weft" side is started: the real weft-kv, or (WEFT_BENCH_KV_SELF=redis) a
/// redis-server standing in for it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum SelfKind {
    WeftKv,
    RedisStandIn,
}

impl SelfKind {
    fn from_env() -> Result<SelfKind, String> {
        match std::env::var("WEFT_BENCH_KV_SELF") {
            Err(_) => Ok(SelfKind::WeftKv),
            Ok(v) if v.is_empty() || v == "weft" => Ok(SelfKind::WeftKv),
            Ok(v) if v == "redis" => Ok(SelfKind::RedisStandIn),
            Ok(v) => Err(format!(
                "WEFT_BENCH_KV_SELF={v:?} is not understood: unset it to benchmark weft-kv, \
                 or set it to \"redis\" to put a second redis-server in weft-kv's place"
            )),
        }
    }

    fn impl_name(self) -> &'static str {
        match self {
            SelfKind::WeftKv => "weft",
            SelfKind::RedisStandIn => "redis-stand-in",
        }
    }
}

/// The method line of the table header.
pub fn method_line(opts: &Options) -> String {
    let first = match first_fsync() {
        Ok("always") => "fsync always",
        _ => "fsync every second",
    };
    format!(
        "method: both servers started by the suite (append-only log, {first}; \
         a second pair with fsync always for the last table); \
         client-processes table: one run per cell, {} operations, servers alternating cell \
         by cell; \
         redis-benchmark: median of {} run(s), servers alternating run by run; \
         latency under load: up to {} tries per row, servers alternating try by try; \
         redis / weft (time) and weft / redis (req/s) > 1 mean weft is faster",
        table_ops(opts),
        rb_runs(opts),
        lat_rounds(opts, Durability::EverySec)
    )
}

/// Whether this is a smoke run (`WEFT_BENCH_KV_SMOKE=1`, inherited by the client workers).
fn smoke() -> bool {
    std::env::var_os("WEFT_BENCH_KV_SMOKE").is_some_and(|v| v == "1")
}

/// Which parts run (`WEFT_BENCH_KV_ONLY`): every one, or one group of them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Only {
    All,
    /// `latency`: the latency-under-load tables.
    Latency,
    /// `clients`: the client-processes table.
    Clients,
    /// `load`: the load generator, the fixed-rate latency and redis-benchmark's tests.
    Load,
}

impl Only {
    fn from_env() -> Result<Only, String> {
        match std::env::var("WEFT_BENCH_KV_ONLY") {
            Err(_) => Ok(Only::All),
            Ok(v) if v.is_empty() => Ok(Only::All),
            Ok(v) if v == "latency" => Ok(Only::Latency),
            Ok(v) if v == "clients" => Ok(Only::Clients),
            Ok(v) if v == "load" => Ok(Only::Load),
            Ok(v) => Err(format!(
                "WEFT_BENCH_KV_ONLY={v:?} is not understood: unset it to run every part, or \
                 set it to \"latency\" (the latency-under-load tables), \"clients\" (the \
                 client-processes table) or \"load\" (the load generator, the fixed-rate \
                 latency and redis-benchmark's tests)"
            )),
        }
    }

    fn runs(self, part: Only) -> bool {
        self == Only::All || self == part
    }
}

/// The fsync policy of the first pair of servers (`WEFT_BENCH_KV_FSYNC`: `everysec`,
/// the default, or `always`), which every part but the fsync-always latency table runs
/// against.
fn first_fsync() -> Result<&'static str, String> {
    match std::env::var("WEFT_BENCH_KV_FSYNC") {
        Err(_) => Ok("everysec"),
        Ok(v) if v.is_empty() || v == "everysec" => Ok("everysec"),
        Ok(v) if v == "always" => Ok("always"),
        Ok(v) => Err(format!(
            "WEFT_BENCH_KV_FSYNC={v:?} is not understood: unset it (fsync every second) or \
             set it to \"always\" (weft kv serve --fsync always beside redis-server \
             --appendfsync always)"
        )),
    }
}

/// The key space: the client-processes table's, or a smoke run's.
fn key_space() -> u64 {
    if smoke() {
        SMOKE_KEYS
    } else {
        KEYS
    }
}

fn table_ops(opts: &Options) -> u64 {
    if smoke() {
        SMOKE_OPS
    } else if opts.quick {
        TABLE_OPS_QUICK
    } else {
        TABLE_OPS
    }
}

fn rb_runs(opts: &Options) -> usize {
    if opts.quick {
        1
    } else {
        2
    }
}

/// redis-benchmark's requests per test.
fn rb_requests(opts: &Options) -> u64 {
    if smoke() {
        SMOKE_RB_REQUESTS
    } else if opts.quick {
        RB_REQUESTS_QUICK
    } else {
        RB_REQUESTS
    }
}

/// The suite's parts for the progress line, with estimated seconds (two servers).
pub fn parts(opts: &Options) -> Vec<Part> {
    let ops = table_ops(opts) as f64;
    // A command one at a time over a Unix socket: ~20 us; read, write, mixed (twice the
    // commands), 6 process counts, 3 columns (weft-kv over its socket and over shared
    // memory, redis-server).
    let table = 4.0 * ops * PROCS.len() as f64 * 3.0 * 20e-6;
    // SET and GET at ~60,000 requests/s without pipelining, ~400,000 with.
    let n = rb_requests(opts) as f64;
    let rb = 2.0 * rb_runs(opts) as f64 * 2.0 * (2.0 * n / 60e3 + 2.0 * n / 400e3);
    let (load, rate, tests) = rows::estimate(opts);
    let only = Only::from_env().unwrap_or(Only::All);
    let when = |part: Only, secs: f64| if only.runs(part) { secs } else { 0.0 };
    let (table, rb, load, rate, tests) = (
        when(Only::Clients, table),
        when(Only::All, rb),
        when(Only::Load, load),
        when(Only::Load, rate),
        when(Only::Load, tests),
    );
    let latency = |d| when(Only::Latency, lat_estimate(opts, d));
    vec![
        Part::new("servers", 1.0 + 2.0 * key_space() as f64 * 10e-6),
        Part::new("client-processes table", table),
        Part::new("redis-benchmark", rb),
        Part::new("load generator", load),
        Part::new("latency at a fixed rate", rate),
        Part::new("redis-benchmark tests", tests),
        Part::new(Durability::EverySec.part(), latency(Durability::EverySec)),
        Part::new(Durability::Always.part(), 1.0 + latency(Durability::Always)),
    ]
}

/// Runs the suite: starts the servers, the client-processes table, redis-benchmark,
/// then the latency-under-load tables (fsync every second on those servers, then on a
/// fresh pair with fsync always).
pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("servers");
    let me = SelfKind::from_env()?;
    let exe = std::env::current_exe().map_err(|e| {
        format!(
            "cannot find this program's path to start weft-kv and the bench workers ({e}); \
             run weft from its file"
        )
    })?;
    let redis_path = find_on_path("redis-server");
    let base = TempDir::new()?;
    rep.line("");
    let servers = start_servers(
        rep,
        me,
        &exe,
        redis_path.as_deref(),
        &base.0,
        "",
        first_fsync()?,
    )?;
    let only = Only::from_env()?;
    if only != Only::Latency {
        for s in &servers {
            populate(&s.socket).map_err(|e| format!("populating {}: {e}", s.impl_name))?;
        }
    }
    if only.runs(Only::Clients) {
        clients_table(opts, rep, &exe, &servers)?;
    }
    let rb = if only == Only::All {
        redis_benchmark(opts, rep, &servers)?
    } else {
        RbMedians::new()
    };
    if only.runs(Only::Load) {
        let base = rows::load_generator(opts, rep, &exe, &servers, &rb)?;
        rows::latency_at_rate(opts, rep, &exe, &servers, base)?;
        rows::rb_tests(opts, rep, &servers)?;
    }
    if !only.runs(Only::Latency) {
        stop_servers(rep, servers);
        return Ok(());
    }
    latency_under_load(opts, rep, &exe, &base.0, &servers, Durability::EverySec)?;
    stop_servers(rep, servers);
    progress::part("latency under load, fsync always");
    rep.line("");
    let servers = start_servers(
        rep,
        me,
        &exe,
        redis_path.as_deref(),
        &base.0,
        "-always",
        "always",
    )?;
    latency_under_load(opts, rep, &exe, &base.0, &servers, Durability::Always)?;
    stop_servers(rep, servers);
    Ok(())
}

/// Starts the "weft" side (weft-kv, or its redis stand-in) and, when installed,
/// redis-server, both with `fsync` (`everysec` or `always`), in `base/weft<suffix>` and
/// `base/redis<suffix>`, and says so in the table.
fn start_servers(
    rep: &mut Reporter,
    me: SelfKind,
    exe: &Path,
    redis_path: Option<&Path>,
    base: &Path,
    suffix: &str,
    fsync: &str,
) -> Result<Vec<Server>, String> {
    let weft_dir = base.join(format!("weft{suffix}"));
    let weft = match me {
        SelfKind::WeftKv => Server::start_weft(exe, &weft_dir, me.impl_name(), fsync)?,
        SelfKind::RedisStandIn => {
            let path = redis_path.ok_or_else(|| {
                "WEFT_BENCH_KV_SELF=redis needs redis-server on PATH (Debian: apt-get install \
                 redis-server)"
                    .to_string()
            })?;
            Server::start_redis(path, &weft_dir, me.impl_name(), fsync)?
        }
    };
    rep.line(format!("servers: {} ({})", weft.impl_name, weft.describe));
    if me == SelfKind::RedisStandIn {
        rep.line(
            "  NOTE: WEFT_BENCH_KV_SELF=redis: the \"weft\" side is a second redis-server \
             (impl redis-stand-in), not weft-kv: these figures prove the suite, not weft-kv",
        );
    }
    let redis = match redis_path {
        Some(path) => Some(Server::start_redis(
            path,
            &base.join(format!("redis{suffix}")),
            "redis-server",
            fsync,
        )?),
        None => {
            rep.line(
                "  redis-server: not installed (no redis-server on PATH; Debian: apt-get \
                 install redis-server): its rows are skipped",
            );
            None
        }
    };
    if let Some(r) = &redis {
        rep.line(format!("  {} ({})", r.impl_name, r.describe));
    }
    let mut servers: Vec<Server> = vec![weft];
    servers.extend(redis);
    Ok(servers)
}

/// Stops the servers, noting in the table any that did not exit cleanly.
fn stop_servers(rep: &mut Reporter, servers: Vec<Server>) {
    for mut s in servers {
        if let Some(warning) = s.stop() {
            rep.line(format!("  warning: {warning}"));
        }
    }
}

/// The key of index `k` and the value every writer stores under it.
pub(crate) fn key_value(k: u64) -> (String, String) {
    (format!("key:{k:06}"), format!("value-of-{k:06}"))
}

/// SETs every key of the key space, 1,000 commands per pipelined batch.
fn populate(socket: &Path) -> Result<(), String> {
    let mut conn = Conn::connect(socket)?;
    let mut k = 0;
    let keys = key_space();
    while k < keys {
        let end = (k + 1000).min(keys);
        for i in k..end {
            let (key, value) = key_value(i);
            conn.queue(&[b"SET", key.as_bytes(), value.as_bytes()]);
        }
        conn.flush()?;
        for _ in k..end {
            conn.expect_ok()?;
        }
        k = end;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Part 1: the client-processes table.

fn clients_table(
    opts: &Options,
    rep: &mut Reporter,
    exe: &Path,
    servers: &[Server],
) -> Result<(), String> {
    progress::part("client-processes table");
    let ops = table_ops(opts);
    rep.line("");
    rep.line(format!(
        "client-processes table: {ops} reads, {ops} writes, and {ops} reads + {ops} writes \
         mixed, split over P client processes, each with its own connection on the Unix \
         socket, one command at a time; random keys of a key space of {} (all populated), \
         every GET's value checked",
        key_space()
    ));
    rep.line(
        "  cell = wall time from the go signal (all clients connected) until the last client \
         is done, one run; redis / weft > 1 means weft is faster",
    );
    rep.line(
        "  published = Table 1 of a Linux kernel module's report (a key-value map shared by \
         processes over netlink; one run, on its authors' VM); it says milliseconds, but \
         100,000 round trips in 0.9 ms (9 ns each) cannot be, so they are most likely \
         seconds: indicative only",
    );
    // The columns: each server over its Unix socket, and weft-kv over shared memory
    // too (its clients on `<socket>.shm`), beside its socket column.
    let mut columns: Vec<(&Server, bool, String)> = Vec::new();
    for s in servers {
        columns.push((s, false, s.impl_name.to_string()));
        if s.impl_name == SelfKind::WeftKv.impl_name() {
            columns.push((s, true, SHM_IMPL.to_string()));
        }
    }
    let shm_col = columns.iter().position(|c| c.1);
    if shm_col.is_some() {
        rep.line(format!(
            "  {SHM_IMPL} = weft-kv with its clients over shared memory (Client::connect_shm: \
             request and reply rings in a segment per connection) instead of the Unix socket"
        ));
    }
    let mut head = format!("  {:>5} {:<6}", "procs", "op");
    for (_, _, n) in &columns {
        head.push_str(&format!(" {:>16}", format!("{n} ms")));
    }
    head.push_str(&format!(" {:>12}", "redis / weft"));
    if shm_col.is_some() {
        head.push_str(&format!(" {:>12}", "redis / shm"));
    }
    head.push_str(&format!(" {:>10}", "published"));
    rep.line(head);
    for (oi, op) in [Op::Read, Op::Write, Op::Mixed].into_iter().enumerate() {
        for (pi, &procs) in PROCS.iter().enumerate() {
            let mut cells: Vec<f64> = Vec::with_capacity(columns.len());
            for (ci, (s, shm, name)) in columns.iter().enumerate() {
                progress::step(
                    format_args!("{}, {procs} processes, {name}", op.name()),
                    (oi * PROCS.len() + pi) * columns.len() + ci,
                    3 * PROCS.len() * columns.len(),
                );
                let took = run_cell(exe, &s.socket, *shm, op, ops, procs).map_err(|e| {
                    format!(
                        "client-processes table, {} with {procs} processes on {name}: {e}",
                        op.name(),
                    )
                })?;
                let ms = took.as_secs_f64() * 1e3;
                rep.emit(&Measurement {
                    suite: SUITE,
                    name: format!("clients/{}/{procs}proc", op.name()),
                    impl_name: name.clone(),
                    value: Some(ms),
                    unit: "ms",
                    note: None,
                });
                cells.push(ms);
            }
            let mut line = format!("  {procs:>5} {:<6}", op.name());
            for ms in &cells {
                line.push_str(&format!(" {ms:>16.1}"));
            }
            // redis-server's time over weft's (socket, then shared memory).
            let redis = columns
                .iter()
                .position(|c| c.0.impl_name == "redis-server")
                .map(|i| cells[i]);
            let ratio = |col: Option<usize>| match (redis, col.map(|i| cells[i])) {
                (Some(r), Some(w)) if w > 0.0 => format!("{:.2}", r / w),
                _ => "-".to_string(),
            };
            line.push_str(&format!(" {:>12}", ratio(Some(0))));
            if shm_col.is_some() {
                line.push_str(&format!(" {:>12}", ratio(shm_col)));
            }
            line.push_str(&format!(" {:>10.3}", PUBLISHED_TABLE_1[pi][oi]));
            rep.line(line);
        }
    }
    Ok(())
}

/// One running `kv-client` worker.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// Runs one table cell: `procs` workers sharing `ops` operations (mixed: `ops` reads and
/// `ops` writes), and returns the wall time from the go signal until the last report.
fn run_cell(
    exe: &Path,
    socket: &Path,
    shm: bool,
    op: Op,
    ops: u64,
    procs: usize,
) -> Result<Duration, String> {
    let per_proc = |i: usize| {
        let n = ops / procs as u64 + u64::from((i as u64) < ops % procs as u64);
        if op == Op::Mixed {
            2 * n
        } else {
            n
        }
    };
    let mut workers: Vec<Worker> = Vec::with_capacity(procs);
    let kill_all = |workers: &mut Vec<Worker>| {
        for w in workers.iter_mut() {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    };
    for i in 0..procs {
        let child = Command::new(exe)
            .args(["bench-worker", "kv-client", "--socket"])
            .arg(socket)
            .args(["--op", op.name(), "--ops"])
            .arg(per_proc(i).to_string())
            .arg("--seed")
            .arg((0x9e37_79b9_7f4a_7c15u64 ^ ((i as u64 + 1) * 0x1000_0001)).to_string())
            .args(shm.then_some("--shm"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        match child {
            Ok(mut c) => {
                let stdin = c.stdin.take();
                let stdout = BufReader::new(c.stdout.take().expect("piped stdout"));
                workers.push(Worker {
                    child: c,
                    stdin,
                    stdout,
                });
            }
            Err(e) => {
                kill_all(&mut workers);
                return Err(format!(
                    "cannot start bench worker {} ({e}); check `ulimit -u` and free memory",
                    exe.display()
                ));
            }
        }
    }
    // A worker that fails prints why on stderr (inherited) and exits: its stdout ends.
    for w in workers.iter_mut() {
        let mut line = String::new();
        let _ = w.stdout.read_line(&mut line);
        if line.trim() != "ready" {
            kill_all(&mut workers);
            return Err(format!(
                "a client worker did not get ready (it said {line:?}); its error message is above"
            ));
        }
    }
    let t0 = Instant::now();
    for w in workers.iter_mut() {
        if let Some(mut stdin) = w.stdin.take() {
            let _ = stdin.write_all(b"g");
        }
    }
    let mut done = 0u64;
    for w in workers.iter_mut() {
        let mut line = String::new();
        let _ = w.stdout.read_line(&mut line);
        let v: Option<u64> = serde_json::from_str::<serde_json::Value>(&line)
            .ok()
            .and_then(|v| v["ops"].as_u64());
        match v {
            Some(n) => done += n,
            None => {
                kill_all(&mut workers);
                return Err(format!(
                    "a client worker printed {line:?}, not its JSON report; its error message \
                     is above"
                ));
            }
        }
    }
    let took = t0.elapsed();
    for w in workers.iter_mut() {
        match w.child.wait() {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(format!("a client worker failed after its report: {s}")),
            Err(e) => return Err(format!("cannot wait for a client worker: {e}")),
        }
    }
    let expected: u64 = (0..procs).map(per_proc).sum();
    if done != expected {
        return Err(format!(
            "the workers reported {done} commands in all, {expected} were asked for"
        ));
    }
    Ok(took)
}

/// `weft bench-worker kv-client`: connects to `socket`, prints "ready", waits for a byte
/// on stdin, runs `ops` commands (`op`, random keys from `seed`) one at a time, checking
/// each reply, and prints `{"ops":N,"elapsed_s":S}` (over shared memory with the
/// waits' counts after it: `"sleeps"`, `"spins"`, `"caught"`, `"given_up"`, `"same_cpu"`).
pub fn client_worker_main(
    socket: &Path,
    op: Op,
    ops: u64,
    seed: u64,
    shm: bool,
) -> Result<(), String> {
    let mut conn = if shm {
        Conn::connect_shm(socket)?
    } else {
        Conn::connect(socket)?
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write to the bench runner: {e}"))?;
    let mut go = [0u8; 1];
    match std::io::stdin().read(&mut go) {
        Ok(1) => {}
        _ => return Err("the bench runner went away before the go signal".to_string()),
    }
    let keys = key_space();
    let mut rng = seed | 1;
    let mut next_key = || {
        // xorshift64
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        key_value(rng % keys)
    };
    let t0 = Instant::now();
    for i in 0..ops {
        let (key, value) = next_key();
        let write = match op {
            Op::Read => false,
            Op::Write => true,
            Op::Mixed => i % 2 == 0,
        };
        if write {
            conn.queue(&[b"SET", key.as_bytes(), value.as_bytes()]);
            conn.flush()?;
            conn.expect_ok()?;
        } else {
            conn.queue(&[b"GET", key.as_bytes()]);
            conn.flush()?;
            match conn.read_reply()? {
                Reply::Bulk(v) if v == value.as_bytes() => {}
                other => {
                    return Err(format!(
                        "GET {key} answered {other:?}, expected {value:?} (every key was set to \
                         it): the server lost or corrupted a value"
                    ))
                }
            }
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    // Over shared memory, also how the waits for replies went (futex sleeps, spins).
    let waits = conn.0.shm_wait_counts().map_or(String::new(), |w| {
        format!(
            ",\"sleeps\":{},\"spins\":{},\"caught\":{},\"given_up\":{},\"same_cpu\":{}",
            w.sleeps, w.spins, w.caught, w.given_up, w.same_cpu
        )
    });
    writeln!(out, "{{\"ops\":{ops},\"elapsed_s\":{elapsed}{waits}}}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write to the bench runner: {e}"))
}

// ---------------------------------------------------------------------------
// Part 2: redis-benchmark.

/// One redis-benchmark CSV row: the test, requests/s, p50 and p99 in ms.
#[derive(Clone, Debug, PartialEq)]
struct RbRow {
    test: String,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Parses redis-benchmark's `--csv` output: a header line naming the columns
/// ("test","rps",...,"p50_latency_ms",...,"p99_latency_ms",...) and one row per test.
fn parse_rb_csv(text: &str) -> Result<Vec<RbRow>, String> {
    let fields = |l: &str| -> Vec<String> {
        l.trim()
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = fields(lines.next().ok_or("redis-benchmark printed nothing")?);
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| {
            format!(
                "redis-benchmark's CSV has no {name:?} column (header {header:?}); redis-benchmark \
                 7 or later is needed for the latency columns"
            )
        })
    };
    let (c_test, c_rps, c_p50, c_p99) = (
        col("test")?,
        col("rps")?,
        col("p50_latency_ms")?,
        col("p99_latency_ms")?,
    );
    let mut rows = Vec::new();
    for l in lines {
        let f = fields(l);
        let num = |c: usize| {
            f.get(c).and_then(|v| v.parse::<f64>().ok()).ok_or_else(|| {
                format!("redis-benchmark CSV line {l:?}: column {c} is not a number")
            })
        };
        rows.push(RbRow {
            test: f.get(c_test).cloned().unwrap_or_default(),
            rps: num(c_rps)?,
            p50_ms: num(c_p50)?,
            p99_ms: num(c_p99)?,
        });
    }
    if rows.is_empty() {
        return Err(format!("redis-benchmark printed no result rows: {text:?}"));
    }
    Ok(rows)
}

/// The transports redis-benchmark reaches a server on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Transport {
    Tcp,
    Unix,
}

/// redis-benchmark's medians of part 2, by "conn/P/TEST" (e.g. "unix/16/GET"): the
/// requests/s per server, for the load generator's cross-check.
pub(crate) type RbMedians = std::collections::HashMap<String, Vec<f64>>;

fn redis_benchmark(
    opts: &Options,
    rep: &mut Reporter,
    servers: &[Server],
) -> Result<RbMedians, String> {
    let mut medians = RbMedians::new();
    progress::part("redis-benchmark");
    let n = rb_requests(opts);
    rep.line("");
    let Some(rb) = find_on_path("redis-benchmark") else {
        rep.line(
            "redis-benchmark: not installed (no redis-benchmark on PATH; Debian: apt-get install \
             redis-tools): skipped",
        );
        return Ok(medians);
    };
    let runs = rb_runs(opts);
    let keys = key_space();
    rep.line(format!(
        "redis-benchmark: -t set,get -n {n} -c {RB_CLIENTS} -r {keys} --csv, without and with \
         -P {RB_PIPELINE}, over TCP (127.0.0.1) and the Unix socket; median of {runs} run(s), \
         servers alternating run by run; it shares the CPUs with the server, alike for both"
    ));
    rep.line(format!(
        "  target: weft >= {TARGET_RATIO}x redis-server's requests/s with a p99 no \
         higher"
    ));
    let mut head = format!("  {:<5} {:>3} {:<4}", "conn", "P", "test");
    for s in servers {
        head.push_str(&format!(
            " | {:>22}",
            format!("{} req/s p50 p99", s.impl_name)
        ));
    }
    head.push_str(&format!(" | {:>12} {:>7} | target", "req/s w/r", "p99 w/r"));
    rep.line(head);
    let mut verdicts = (0, 0);
    let steps = 2 * 2 * runs * servers.len();
    let mut step = 0;
    for transport in [Transport::Tcp, Transport::Unix] {
        for pipeline in [1, RB_PIPELINE] {
            // samples[server] = runs of rows (SET, GET); busy[server] = the client's CPU
            // time over its wall time, per run.
            let mut samples: Vec<Vec<Vec<RbRow>>> = vec![Vec::new(); servers.len()];
            let mut busy: Vec<Vec<f64>> = vec![Vec::new(); servers.len()];
            for run in 0..runs {
                for (i, s) in servers.iter().enumerate() {
                    progress::step(
                        format_args!(
                            "{}, -P {pipeline}, {}, run {} of {runs}",
                            match transport {
                                Transport::Tcp => "TCP",
                                Transport::Unix => "Unix socket",
                            },
                            s.impl_name,
                            run + 1
                        ),
                        step,
                        steps,
                    );
                    step += 1;
                    let mut cmd = Command::new(&rb);
                    match transport {
                        Transport::Tcp => {
                            cmd.args(["-h", "127.0.0.1", "-p"]).arg(s.port.to_string())
                        }
                        Transport::Unix => cmd.arg("-s").arg(&s.socket),
                    };
                    cmd.args(["-t", "set,get", "-n"])
                        .arg(n.to_string())
                        .arg("-c")
                        .arg(RB_CLIENTS.to_string())
                        .arg("-r")
                        .arg(key_space().to_string())
                        .arg("-P")
                        .arg(pipeline.to_string())
                        .arg("--csv");
                    let (cpu0, t0) = (children_cpu(), Instant::now());
                    let text = run_to_end(cmd, "redis-benchmark")?;
                    busy[i].push((children_cpu() - cpu0) / t0.elapsed().as_secs_f64());
                    let rows = parse_rb_csv(&text)
                        .map_err(|e| format!("redis-benchmark against {}: {e}", s.impl_name))?;
                    samples[i].push(rows);
                }
            }
            let conn = match transport {
                Transport::Tcp => "tcp",
                Transport::Unix => "unix",
            };
            for test in ["SET", "GET"] {
                let mut meds: Vec<(f64, f64, f64)> = Vec::new();
                for (i, s) in servers.iter().enumerate() {
                    let pick = |f: fn(&RbRow) -> f64| -> Result<f64, String> {
                        let mut v = samples[i]
                            .iter()
                            .map(|rows| {
                                rows.iter().find(|r| r.test == test).map(f).ok_or_else(|| {
                                    format!(
                                        "redis-benchmark against {} printed no {test} row",
                                        s.impl_name
                                    )
                                })
                            })
                            .collect::<Result<Vec<f64>, String>>()?;
                        Ok(median(&mut v))
                    };
                    let m = (pick(|r| r.rps)?, pick(|r| r.p50_ms)?, pick(|r| r.p99_ms)?);
                    let name = format!(
                        "redis-benchmark/{conn}/P{pipeline}/{}",
                        test.to_ascii_lowercase()
                    );
                    emit_figures(
                        rep,
                        &name,
                        s,
                        &[
                            ("rps", m.0, "req/s"),
                            ("p50", m.1, "ms"),
                            ("p99", m.2, "ms"),
                        ],
                    );
                    meds.push(m);
                }
                medians.insert(
                    format!("{conn}/{pipeline}/{test}"),
                    meds.iter().map(|m| m.0).collect(),
                );
                let mut line = format!("  {conn:<5} {pipeline:>3} {test:<4}");
                for m in &meds {
                    line.push_str(&format!(" | {:>10.0} {:>5.3} {:>5.3}", m.0, m.1, m.2));
                }
                match meds.as_slice() {
                    [w, r] => {
                        let thr = w.0 / r.0;
                        let p99 = w.2 / r.2;
                        let met = thr >= TARGET_RATIO && w.2 <= r.2;
                        if met {
                            verdicts.0 += 1;
                        }
                        verdicts.1 += 1;
                        line.push_str(&format!(
                            " | {thr:>11.2}x {p99:>7.2} | {}",
                            if met { "met" } else { "MISSED" }
                        ));
                    }
                    _ => line.push_str(" | - | not measured"),
                }
                rep.line(line);
            }
            client_busy(
                rep,
                &format!("redis-benchmark/{conn}/P{pipeline}"),
                servers,
                &mut busy,
            );
        }
    }
    if verdicts.1 > 0 {
        rep.line(format!(
            "  target met on {} of {} rows (p99 ratio weft / redis <= 1: no worse)",
            verdicts.0, verdicts.1
        ));
    }
    Ok(medians)
}

/// Emits `name/<what>` for each (what, value, unit) of `s`'s figures.
fn emit_figures(rep: &mut Reporter, name: &str, s: &Server, figures: &[(&str, f64, &'static str)]) {
    for &(what, value, unit) in figures {
        rep.emit(&Measurement {
            suite: SUITE,
            name: format!("{name}/{what}"),
            impl_name: s.impl_name.to_string(),
            value: Some(value),
            unit,
            note: None,
        });
    }
}

/// Above this share of one CPU, the single-threaded redis-benchmark client is the
/// bottleneck of a row: a faster server cannot make it send faster.
const CLIENT_BOUND: f64 = 0.85;

/// CPU seconds (user + system) used by this process's reaped children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes the struct we pass.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Reports, for one transport and pipeline depth, the median share of a CPU that
/// redis-benchmark (one thread) used against each server (JSON: `<name>/client-busy`,
/// in %), and whether that makes the client the bottleneck of the rows.
fn client_busy(rep: &mut Reporter, name: &str, servers: &[Server], busy: &mut [Vec<f64>]) {
    let shares: Vec<f64> = busy.iter_mut().map(|b| median(b)).collect();
    let mut line = String::from("        client (redis-benchmark, one thread) busy:");
    for (s, b) in servers.iter().zip(&shares) {
        line.push_str(&format!(" {} {:.0}%", s.impl_name, b * 100.0));
        rep.emit(&Measurement {
            suite: SUITE,
            name: format!("{name}/client-busy"),
            impl_name: s.impl_name.to_string(),
            value: Some(b * 100.0),
            unit: "%",
            note: None,
        });
    }
    line.push_str(" of a CPU");
    if shares.iter().all(|&b| b >= CLIENT_BOUND) {
        line.push_str(&format!(
            ": above {:.0}% for every server, so the client bounds these rows",
            CLIENT_BOUND * 100.0
        ));
    }
    rep.line(line);
}

/// Runs `cmd` to its end (at most [`RUN_TIMEOUT`]) and returns its stdout; a failure
/// or a timeout is an error carrying its stderr.
fn run_to_end(mut cmd: Command, what: &str) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{what} still running after {} s: killed (a stuck server?)",
                    RUN_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for {what}: {e}")),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{what} failed ({status}): {}", err.trim()));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Part 3: latency under load.

/// The durability both servers run at in a latency table.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Durability {
    /// weft `--fsync everysec`, redis-server `--appendfsync everysec`.
    EverySec,
    /// weft `--fsync always`, redis-server `--appendfsync always`.
    Always,
}

impl Durability {
    /// The first part of the table's row names in JSON.
    fn table(self) -> &'static str {
        match self {
            Durability::EverySec => "latency-under-load",
            Durability::Always => "latency-under-load-always",
        }
    }

    /// The table's part on the progress line.
    fn part(self) -> &'static str {
        match self {
            Durability::EverySec => "latency under load",
            Durability::Always => "latency under load, fsync always",
        }
    }

    fn words(self) -> &'static str {
        match self {
            Durability::EverySec => {
                "fsync every second (weft --fsync everysec, redis-server appendfsync everysec)"
            }
            Durability::Always => {
                "fsync before every reply to a write (weft --fsync always, redis-server \
                 appendfsync always)"
            }
        }
    }
}

/// What else runs on the machine while a latency table is measured.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Load {
    /// Nothing started by the suite.
    Quiet,
    /// One busy-looping process per CPU.
    Cpu,
    /// The CPU hogs, and a process appending to a file and fdatasyncing it after each
    /// MiB, on the servers' filesystem.
    CpuDisk,
}

const LOADS: [Load; 3] = [Load::Quiet, Load::Cpu, Load::CpuDisk];

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Quiet => "quiet",
            Load::Cpu => "cpu",
            Load::CpuDisk => "cpu-disk",
        }
    }

    fn words(self, hogs: usize) -> String {
        match self {
            Load::Quiet => "quiet (nothing started by the suite)".to_string(),
            Load::Cpu => format!("{hogs} CPU hogs (one busy-looping process per CPU)"),
            Load::CpuDisk => format!(
                "{hogs} CPU hogs and a disk writer (appends 1 MiB and fdatasyncs, again and \
                 again, on the servers' filesystem)"
            ),
        }
    }
}

/// How a try reaches the server.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum ConnKind {
    /// One connection per server, opened before the tries.
    Existing,
    /// A new connection per try; the connect is part of the try's time.
    New,
}

const CONNS: [ConnKind; 2] = [ConnKind::Existing, ConnKind::New];

impl ConnKind {
    fn name(self) -> &'static str {
        match self {
            ConnKind::Existing => "existing",
            ConnKind::New => "new",
        }
    }
}

/// The figures of a latency row as named in JSON, and their quantile (1 = the maximum).
const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("max", 1.0),
];

/// Rounds per load (a round is one try per server and connection kind): fsync every
/// second, and fsync always (each try then waits for a disk flush, slow under the disk
/// writer).
const LAT_ROUNDS: usize = 2000;
const LAT_ROUNDS_QUICK: usize = 300;
const LAT_ROUNDS_ALWAYS: usize = 500;
const LAT_ROUNDS_ALWAYS_QUICK: usize = 100;
const LAT_ROUNDS_SMOKE: usize = 10;
/// The most time the rounds of one load may take; fewer rounds then (the table says how
/// many tries each row has).
const LAT_BUDGET: Duration = Duration::from_secs(30);
const LAT_BUDGET_QUICK: Duration = Duration::from_secs(8);
/// The pause after each try: the tries sample the load over time rather than in a burst.
const LAT_GAP: Duration = Duration::from_millis(1);
/// How long a load runs before the first try.
const LOAD_SETTLE: Duration = Duration::from_secs(1);
const LOAD_SETTLE_SMOKE: Duration = Duration::from_millis(100);
/// The longest a CPU hog or the disk writer runs, should nothing stop it.
const HELPER_CAP_S: u64 = 1800;
/// How long a stopped CPU hog or disk writer may take to exit before it is killed.
const HELPER_STOP: Duration = Duration::from_secs(10);
/// The disk writer's chunk (one fdatasync after each) and the size at which its file
/// starts over.
const DISK_CHUNK: usize = 1 << 20;
const DISK_FILE_MAX: u64 = 256 << 20;

fn lat_rounds(opts: &Options, d: Durability) -> usize {
    match (smoke(), opts.quick, d) {
        (true, _, _) => LAT_ROUNDS_SMOKE,
        (false, false, Durability::EverySec) => LAT_ROUNDS,
        (false, true, Durability::EverySec) => LAT_ROUNDS_QUICK,
        (false, false, Durability::Always) => LAT_ROUNDS_ALWAYS,
        (false, true, Durability::Always) => LAT_ROUNDS_ALWAYS_QUICK,
    }
}

fn lat_budget(opts: &Options) -> Duration {
    if opts.quick || smoke() {
        LAT_BUDGET_QUICK
    } else {
        LAT_BUDGET
    }
}

fn load_settle() -> Duration {
    if smoke() {
        LOAD_SETTLE_SMOKE
    } else {
        LOAD_SETTLE
    }
}

/// Estimated seconds of one latency table: per load the settling time and the rounds
/// (4 tries and their pauses; ~1.3 ms a try with fsync every second, ~5 ms with fsync
/// always), at most the budget.
fn lat_estimate(opts: &Options, d: Durability) -> f64 {
    let per_try = match d {
        Durability::EverySec => 1.3e-3,
        Durability::Always => 5e-3,
    };
    let rounds = (lat_rounds(opts, d) as f64 * 4.0 * per_try).min(lat_budget(opts).as_secs_f64());
    LOADS.len() as f64 * (load_settle().as_secs_f64() + rounds)
}

/// The `q` quantile of `sorted` by nearest rank (`q` = 1: the maximum); NaN when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    let rank = (q * n as f64).ceil().max(1.0) as usize;
    sorted[rank.min(n) - 1]
}

/// One try: PING, SET, GET, INCR as one pipeline, on `conn` or (None) on a new
/// connection to `addr`; every reply checked. Returns the time from the connect (or
/// the send) to the last reply.
fn one_try(addr: &Addr, conn: Option<&mut Conn>, i: u64) -> Result<Duration, String> {
    let key = format!("latency:{}", i % 1000);
    let value = format!("value-{i}");
    let t0 = Instant::now();
    let mut fresh;
    let c = match conn {
        Some(c) => c,
        None => {
            fresh = Conn::connect_to(addr)?;
            &mut fresh
        }
    };
    c.queue(&[b"PING"]);
    c.queue(&[b"SET", key.as_bytes(), value.as_bytes()]);
    c.queue(&[b"GET", key.as_bytes()]);
    c.queue(&[b"INCR", b"latency:counter"]);
    c.flush()?;
    let replies = [
        c.read_reply()?,
        c.read_reply()?,
        c.read_reply()?,
        c.read_reply()?,
    ];
    let took = t0.elapsed();
    match &replies {
        [Reply::Simple(p), Reply::Simple(ok), Reply::Bulk(v), Reply::Int(_)]
            if p == "PONG" && ok == "OK" && v == value.as_bytes() =>
        {
            Ok(took)
        }
        _ => Err(format!(
            "the pipeline PING, SET {key} {value}, GET {key}, INCR latency:counter was \
             answered {replies:?}"
        )),
    }
}

/// A process loading the machine (a CPU hog or the disk writer): this binary as `weft
/// bench-worker <job>`. It stops when its stdin closes ([`Helper::stop`]), which also
/// happens when the suite dies; it is killed on drop if still running.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    what: &'static str,
}

impl Helper {
    fn start(exe: &Path, args: &[&std::ffi::OsStr], what: &'static str) -> Result<Helper, String> {
        let mut child = Command::new(exe)
            .arg("bench-worker")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the {what} ({e})"))?;
        let stdin = child.stdin.take();
        Ok(Helper { child, stdin, what })
    }

    /// Closes its stdin, waits for it to exit (killing it after [`HELPER_STOP`]) and
    /// returns the line it printed.
    fn stop(mut self) -> Result<String, String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + HELPER_STOP;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(format!(
                        "the {} did not stop within {} s of being told to: killed",
                        self.what,
                        HELPER_STOP.as_secs()
                    ));
                }
                Err(e) => return Err(format!("cannot wait for the {}: {e}", self.what)),
            }
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if !status.success() {
            return Err(format!(
                "the {} failed ({status}); its message is above",
                self.what
            ));
        }
        Ok(out.trim().to_string())
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The latency table at durability `d` on `servers`: see the module doc.
fn latency_under_load(
    opts: &Options,
    rep: &mut Reporter,
    exe: &Path,
    base: &Path,
    servers: &[Server],
    d: Durability,
) -> Result<(), String> {
    progress::part(d.part());
    let rounds = lat_rounds(opts, d);
    let budget = lat_budget(opts);
    let hogs_n = super::nproc();
    rep.line("");
    rep.line(format!(
        "latency under load, {}: one pipeline (PING, SET, GET, INCR) per try over TCP \
         (127.0.0.1), from the send to the last reply, on a connection opened before \
         (existing) and on a new connection per try (new; the connect included); every \
         reply checked",
        d.words()
    ));
    rep.line(format!(
        "  per load up to {rounds} rounds or {} s; a round is one try per server and \
         connection kind, the servers taking turns try by try, a {} ms pause after each \
         try; the load runs {:.1} s before the first; p99.9 of fewer than 1,000 tries is \
         nearly the maximum",
        budget.as_secs(),
        LAT_GAP.as_millis(),
        load_settle().as_secs_f64()
    ));
    let addrs: Vec<Addr> = servers
        .iter()
        .map(|s| Addr::Tcp(format!("127.0.0.1:{}", s.port)))
        .collect();
    let mut hogs: Vec<Helper> = Vec::new();
    let mut i = 0u64;
    for (li, &load) in LOADS.iter().enumerate() {
        let mut writer = None;
        match load {
            Load::Quiet => {}
            Load::Cpu => {
                let cap = HELPER_CAP_S.to_string();
                for _ in 0..hogs_n {
                    hogs.push(Helper::start(
                        exe,
                        &["cpu-hog".as_ref(), "--seconds".as_ref(), cap.as_ref()],
                        "CPU hog",
                    )?);
                }
            }
            Load::CpuDisk => {
                let cap = HELPER_CAP_S.to_string();
                let file = base.join("disk-writer.dat");
                writer = Some(Helper::start(
                    exe,
                    &[
                        "disk-writer".as_ref(),
                        "--file".as_ref(),
                        file.as_os_str(),
                        "--seconds".as_ref(),
                        cap.as_ref(),
                    ],
                    "disk writer",
                )?);
            }
        }
        std::thread::sleep(load_settle());
        let load_avg = super::load_average();
        let mut conns: Vec<Conn> = addrs
            .iter()
            .map(Conn::connect_to)
            .collect::<Result<_, _>>()?;
        // samples[conn kind][server], in microseconds.
        let mut samples: Vec<Vec<Vec<f64>>> =
            vec![vec![Vec::with_capacity(rounds); servers.len()]; CONNS.len()];
        let fail = |s: &Server, kind: ConnKind, e: String| {
            format!(
                "latency under load ({}, {} connection) on {}: {e}",
                load.name(),
                kind.name(),
                s.impl_name
            )
        };
        // A first try per server and kind, not counted (the key's first SET, the
        // counter's creation, cold caches).
        for (si, s) in servers.iter().enumerate() {
            for kind in CONNS {
                i += 1;
                let c = (kind == ConnKind::Existing).then(|| &mut conns[si]);
                one_try(&addrs[si], c, i).map_err(|e| fail(s, kind, e))?;
            }
        }
        let t0 = Instant::now();
        let mut done = 0;
        while done < rounds && (done == 0 || t0.elapsed() < budget) {
            progress::step(
                format_args!("{}, round {} of {rounds}", load.name(), done + 1),
                li * rounds + done,
                LOADS.len() * rounds,
            );
            for (ki, &kind) in CONNS.iter().enumerate() {
                for j in 0..servers.len() {
                    // Who goes first alternates round by round.
                    let si = if done % 2 == 0 {
                        j
                    } else {
                        servers.len() - 1 - j
                    };
                    i += 1;
                    let c = (kind == ConnKind::Existing).then(|| &mut conns[si]);
                    let took =
                        one_try(&addrs[si], c, i).map_err(|e| fail(&servers[si], kind, e))?;
                    samples[ki][si].push(took.as_secs_f64() * 1e6);
                    std::thread::sleep(LAT_GAP);
                }
            }
            done += 1;
        }
        let took = t0.elapsed();
        drop(conns);
        let writer_report = writer.map(Helper::stop).transpose()?;
        rep.line(format!(
            "  {}: {done} rounds in {:.1} s; load average {load_avg} before the first try",
            load.words(hogs_n),
            took.as_secs_f64()
        ));
        if let Some(line) = writer_report {
            rep.line(format!("    disk writer: {}", disk_writer_words(&line)));
        }
        rep.line(format!(
            "    {:<9} {:<16} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  (us)",
            "conn", "impl", "tries", "p50", "p90", "p99", "p99.9", "max"
        ));
        for (ki, kind) in CONNS.iter().enumerate() {
            let mut figures: Vec<Vec<f64>> = Vec::new();
            for (si, s) in servers.iter().enumerate() {
                let v = &mut samples[ki][si];
                v.sort_by(f64::total_cmp);
                let name = format!("{}/{}/{}", d.table(), load.name(), kind.name());
                let f: Vec<f64> = PERCENTILES.iter().map(|&(_, q)| quantile(v, q)).collect();
                for ((p, _), &value) in PERCENTILES.iter().zip(&f) {
                    rep.emit(&Measurement {
                        suite: SUITE,
                        name: format!("{name}/{p}"),
                        impl_name: s.impl_name.to_string(),
                        value: Some(value),
                        unit: "us",
                        note: None,
                    });
                }
                rep.emit(&Measurement {
                    suite: SUITE,
                    name: format!("{name}/tries"),
                    impl_name: s.impl_name.to_string(),
                    value: Some(v.len() as f64),
                    unit: "count",
                    note: None,
                });
                let mut line = format!("    {:<9} {:<16} {:>6}", kind.name(), s.impl_name, v.len());
                for x in &f {
                    line.push_str(&format!(" {:>8}", super::group(*x)));
                }
                rep.line(line);
                figures.push(f);
            }
            if let [w, r] = figures.as_slice() {
                let mut line = format!("    {:<9} {:<16} {:>6}", "", "weft / redis", "");
                for (a, b) in w.iter().zip(r) {
                    line.push_str(&format!(" {:>8}", format!("{:.2}", a / b)));
                }
                rep.line(line);
            }
        }
    }
    for h in hogs {
        if let Err(e) = h.stop() {
            rep.line(format!("  warning: {e}"));
        }
    }
    Ok(())
}

/// The disk writer's report (`{"bytes":N,"fsyncs":M,"secs":S}`) in words.
fn disk_writer_words(line: &str) -> String {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(_) => return format!("no report ({line:?})"),
    };
    let (Some(bytes), Some(fsyncs), Some(secs)) = (
        v["bytes"].as_f64(),
        v["fsyncs"].as_f64(),
        v["secs"].as_f64(),
    ) else {
        return format!("no report ({line:?})");
    };
    let secs = secs.max(1e-9);
    format!(
        "{:.0} MiB in {secs:.1} s ({:.1} MiB/s, {:.1} fdatasync/s)",
        bytes / (1 << 20) as f64,
        bytes / (1 << 20) as f64 / secs,
        fsyncs / secs
    )
}

/// What a load process does first: it dies with the suite (SIGKILL when its parent
/// goes away), and the flag it returns is set when its stdin closes (the suite's
/// [`Helper::stop`], or the suite's end).
fn helper_setup() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        flag.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    stop
}

/// `weft bench-worker cpu-hog`: busy-loops on one CPU until its stdin closes (or its
/// parent dies, or `seconds` pass), then prints `{"spun_s":S}`.
pub fn cpu_hog_main(seconds: u64) -> Result<(), String> {
    let stop = helper_setup();
    let cap = Duration::from_secs(seconds);
    let t0 = Instant::now();
    let mut x = 1u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && t0.elapsed() < cap {
        for _ in 0..100_000 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
    println!("{{\"spun_s\":{}}}", t0.elapsed().as_secs_f64());
    Ok(())
}

/// `weft bench-worker disk-writer`: appends 1 MiB chunks to `file`, each followed by an
/// fdatasync, starting the file over at 256 MiB, until its stdin closes (or its parent
/// dies, or `seconds` pass); then removes the file and prints
/// `{"bytes":N,"fsyncs":M,"secs":S}`.
pub fn disk_writer_main(file: &Path, seconds: u64) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let stop = helper_setup();
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(file)
        .map_err(|e| format!("disk writer: cannot create {}: {e}", file.display()))?;
    let chunk: Vec<u8> = (0..DISK_CHUNK).map(|i| (i * 131 % 251) as u8).collect();
    let cap = Duration::from_secs(seconds);
    let t0 = Instant::now();
    let (mut pos, mut bytes, mut fsyncs) = (0u64, 0u64, 0u64);
    let err = |e: std::io::Error| format!("disk writer: {}: {e}", file.display());
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && t0.elapsed() < cap {
        if pos >= DISK_FILE_MAX {
            f.set_len(0).map_err(err)?;
            pos = 0;
        }
        f.write_all_at(&chunk, pos).map_err(err)?;
        f.sync_data().map_err(err)?;
        pos += chunk.len() as u64;
        bytes += chunk.len() as u64;
        fsyncs += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(file);
    println!("{{\"bytes\":{bytes},\"fsyncs\":{fsyncs},\"secs\":{secs}}}");
    Ok(())
}

// ---------------------------------------------------------------------------
// The servers.

/// A temporary directory (mode 0700), removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let mut base = std::env::temp_dir();
        // A Unix socket path must fit in sun_path (108 bytes): fall back to /tmp.
        if base.as_os_str().len() > 60 {
            base = PathBuf::from("/tmp");
        }
        let dir = base.join(format!("weft-bench-kv-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                format!(
                    "cannot create {}: {e}; set TMPDIR to a writable directory",
                    dir.display()
                )
            })?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server started by the suite; SIGTERM and wait on drop.
struct Server {
    impl_name: &'static str,
    /// The command line, for the table.
    describe: String,
    child: Child,
    socket: PathBuf,
    port: u16,
    log: PathBuf,
    stopped: bool,
}

impl Server {
    /// `weft kv serve` with `--fsync fsync` (`everysec` or `always`).
    fn start_weft(
        exe: &Path,
        dir: &Path,
        impl_name: &'static str,
        fsync: &str,
    ) -> Result<Server, String> {
        let port = free_port()?;
        let data = dir.join("data");
        let socket = dir.join("kv.sock");
        let mut cmd = Command::new(exe);
        cmd.args(["kv", "serve", "--dir"])
            .arg(&data)
            .arg("--socket")
            .arg(&socket)
            .args(["--port", &port.to_string(), "--fsync", fsync]);
        Server::start(
            cmd,
            dir,
            socket,
            port,
            impl_name,
            &format!("weft kv serve --fsync {fsync}"),
        )
    }

    /// redis-server with an append-only log and `--appendfsync fsync`.
    fn start_redis(
        path: &Path,
        dir: &Path,
        impl_name: &'static str,
        fsync: &str,
    ) -> Result<Server, String> {
        let port = free_port()?;
        let data = dir.join("data");
        let socket = dir.join("kv.sock");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&data)
            .map_err(|e| format!("cannot create {}: {e}", data.display()))?;
        let mut cmd = Command::new(path);
        cmd.args(["--appendonly", "yes", "--appendfsync", fsync, "--save", ""])
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--unixsocket")
            .arg(&socket)
            .args([
                "--unixsocketperm",
                "700",
                "--daemonize",
                "no",
                "--logfile",
                "",
            ])
            .arg("--dir")
            .arg(&data);
        let version = Command::new(path)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let describe = format!(
            "{} --appendonly yes --appendfsync {fsync} --save ''; {version}",
            path.display()
        );
        Server::start(cmd, dir, socket, port, impl_name, &describe)
    }

    /// Starts `cmd` with its output in `dir/server.log` and waits for PONG on `socket`.
    fn start(
        mut cmd: Command,
        dir: &Path,
        socket: PathBuf,
        port: u16,
        impl_name: &'static str,
        describe: &str,
    ) -> Result<Server, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let log = dir.join("server.log");
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let file2 = file
            .try_clone()
            .map_err(|e| format!("cannot duplicate {}: {e}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(file2)
            .spawn()
            .map_err(|e| format!("cannot start {impl_name} ({cmd:?}): {e}"))?;
        let mut server = Server {
            impl_name,
            describe: describe.to_string(),
            child,
            socket,
            port,
            log,
            stopped: false,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Polls PING over the Unix socket until PONG, the server's exit or the timeout.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stopped = true;
                return Err(format!(
                    "{} exited at start-up ({status}){}; its output:\n{}",
                    self.impl_name,
                    if self.impl_name == "weft" {
                        " (a weft without `weft kv serve`? WEFT_BENCH_KV_SELF=redis runs the \
                         suite with a redis-server in its place)"
                    } else {
                        ""
                    },
                    self.log_tail()
                ));
            }
            if self.socket.exists() {
                match Conn::connect(&self.socket).and_then(|mut c| {
                    c.queue(&[b"PING"]);
                    c.flush()?;
                    c.read_reply()
                }) {
                    Ok(Reply::Simple(s)) if s == "PONG" => return Ok(()),
                    Ok(other) => last = format!("PING answered {other:?}"),
                    Err(e) => last = e,
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not answer PING on {} within {} s ({}); its output:\n{}",
                    self.impl_name,
                    self.socket.display(),
                    START_TIMEOUT.as_secs(),
                    if last.is_empty() { "no socket" } else { &last },
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// SIGTERM, then waits up to [`STOP_TIMEOUT`] (SIGKILL after it). Returns a warning
    /// when the server did not exit cleanly.
    fn stop(&mut self) -> Option<String> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which has not been reaped (try_wait
        // has not returned its status), so the pid cannot have been reused.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return None,
                Ok(Some(s)) => {
                    return Some(format!(
                        "{} exited with {s} after SIGTERM; its output:\n{}",
                        self.impl_name,
                        self.log_tail()
                    ))
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Some(format!(
                        "{} did not exit within {} s of SIGTERM: killed",
                        self.impl_name,
                        STOP_TIMEOUT.as_secs()
                    ));
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(w) = self.stop() {
            eprintln!("weft bench kv: warning: {w}");
        }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free TCP port on 127.0.0.1: {e}"))
}

/// `name` in a directory of PATH.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------
// The bench's connection: weft-kv's blocking client over a Unix socket, with the
// bench's error texts.

use weft_kv::client::{Addr, Client};
use weft_kv::resp::Reply;

/// One connection over a Unix socket.
struct Conn(Client);

impl Conn {
    fn connect(socket: &Path) -> Result<Conn, String> {
        Conn::connect_to(&Addr::Unix(socket.to_path_buf()))
    }

    /// One connection over shared memory to the server of Unix socket `socket`.
    fn connect_shm(socket: &Path) -> Result<Conn, String> {
        Conn::timed(Client::connect_shm(socket).map_err(|e| e.to_string())?)
    }

    fn connect_to(addr: &Addr) -> Result<Conn, String> {
        Conn::timed(Client::connect(addr).map_err(|e| e.to_string())?)
    }

    fn timed(c: Client) -> Result<Conn, String> {
        c.set_timeout(Some(CLIENT_TIMEOUT))
            .map_err(|e| format!("cannot set a read timeout: {e}"))?;
        Ok(Conn(c))
    }

    /// Appends one command to the write buffer.
    fn queue(&mut self, args: &[&[u8]]) {
        self.0.send(args);
    }

    /// Writes the queued commands.
    fn flush(&mut self) -> Result<(), String> {
        self.0
            .flush()
            .map_err(|e| format!("cannot send to the server: {e}"))
    }

    fn expect_ok(&mut self) -> Result<(), String> {
        match self.read_reply()? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            other => Err(format!("SET answered {other:?}, expected +OK")),
        }
    }

    fn read_reply(&mut self) -> Result<Reply, String> {
        self.0.read_reply().map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                "no reply from the server within {} s (stuck?)",
                CLIENT_TIMEOUT.as_secs()
            ),
            _ => format!("reading a reply: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis7_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\
                    \"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"SET\",\"56022.41\",\"0.476\",\"0.208\",\"0.463\",\"0.575\",\"0.967\",\"3.279\"\n\
                    \"GET\",\"75187.97\",\"0.353\",\"0.128\",\"0.327\",\"0.471\",\"0.863\",\"4.791\"\n";
        let rows = parse_rb_csv(text).unwrap();
        assert_eq!(
            rows,
            vec![
                RbRow {
                    test: "SET".into(),
                    rps: 56022.41,
                    p50_ms: 0.463,
                    p99_ms: 0.967
                },
                RbRow {
                    test: "GET".into(),
                    rps: 75187.97,
                    p50_ms: 0.327,
                    p99_ms: 0.863
                },
            ]
        );
    }

    #[test]
    fn old_csv_without_latency_is_an_error() {
        let err = parse_rb_csv("\"SET\",\"56022.41\"\n").unwrap_err();
        assert!(err.contains("no \"test\" column"), "{err}");
        assert!(parse_rb_csv("").is_err());
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 500.0);
        assert_eq!(quantile(&v, 0.99), 990.0);
        assert_eq!(quantile(&v, 0.999), 999.0);
        assert_eq!(quantile(&v, 1.0), 1000.0);
        // Ten tries: p99 and p99.9 are the maximum.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.9), 9.0);
        assert_eq!(quantile(&v, 0.99), 10.0);
        assert_eq!(quantile(&[7.0], 0.5), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn the_disk_writers_report_reads_in_words() {
        let w = disk_writer_words(r#"{"bytes":104857600,"fsyncs":100,"secs":2.0}"#);
        assert_eq!(w, "100 MiB in 2.0 s (50.0 MiB/s, 50.0 fdatasync/s)");
        assert!(disk_writer_words("garbage").starts_with("no report"));
    }

    #[test]
    fn key_values_are_distinct_and_fixed() {
        assert_eq!(
            key_value(7),
            ("key:000007".into(), "value-of-000007".into())
        );
        assert_ne!(key_value(1).1, key_value(2).1);
    }
}
