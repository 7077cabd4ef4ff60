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
//! operations per cell, 2,000 redis-benchmark requests): it proves in seconds that the
//! suite runs end to end, as the tests do; its figures mean nothing.
//!
//! Two parts:
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
//!    printed beside.
//! 2. **redis-benchmark** (Debian's redis-tools; skipped with a note when absent):
//!    `-t set,get -n N -c 50 -r 100000 --csv`, without and with `-P 16`, over TCP and
//!    over the Unix socket, N = 200,000 (20,000 with `--quick`). The servers take turns
//!    run by run (weft, redis, weft, redis) so noise from the shared machine hits both
//!    alike; each figure is the median of 2 runs (1 with `--quick`). Reported: requests
//!    per second and p50/p99 latency (redis 7's CSV columns), the throughput ratio
//!    weft / redis and the p99 ratio weft / redis, and whether the row meets issue 7's
//!    target: at least 1.5x redis-server's throughput with a p99 no higher. Beside
//!    each pair of rows, how busy the client was: redis-benchmark's CPU time (from
//!    `getrusage(RUSAGE_CHILDREN)`) over its wall time. redis-benchmark runs on one
//!    thread, so when it is above 85% of a CPU against both servers it is what limits
//!    the row (without pipelining on a 2-CPU machine it is), and no server can show
//!    more than its rate there.
//!
//! Units in JSON: the table cells in "ms", throughput in "req/s", latencies in "ms".

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
const SMOKE_RB_REQUESTS: u64 = 2_000;
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
/// Issue 7's target: weft-kv's throughput at least this multiple of redis-server's.
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
    format!(
        "method: both servers started by the suite (append-only log, fsync every second); \
         client-processes table: one run per cell, {} operations, servers alternating cell \
         by cell; \
         redis-benchmark: median of {} run(s), servers alternating run by run; \
         redis / weft (time) and weft / redis (req/s) > 1 mean weft is faster",
        table_ops(opts),
        rb_runs(opts)
    )
}

/// Whether this is a smoke run (`WEFT_BENCH_KV_SMOKE=1`, inherited by the client workers).
fn smoke() -> bool {
    std::env::var_os("WEFT_BENCH_KV_SMOKE").is_some_and(|v| v == "1")
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
    // commands), 6 process counts, 2 servers.
    let table = 4.0 * ops * PROCS.len() as f64 * 2.0 * 20e-6;
    // SET and GET at ~60,000 requests/s without pipelining, ~400,000 with.
    let n = rb_requests(opts) as f64;
    let rb = 2.0 * rb_runs(opts) as f64 * 2.0 * (2.0 * n / 60e3 + 2.0 * n / 400e3);
    vec![
        Part::new("servers", 1.0 + 2.0 * key_space() as f64 * 10e-6),
        Part::new("client-processes table", table),
        Part::new("redis-benchmark", rb),
    ]
}

/// Runs the suite: starts the servers, the client-processes table, then redis-benchmark.
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
    let weft = match me {
        SelfKind::WeftKv => Server::start_weft(&exe, &base.0.join("weft"), me.impl_name())?,
        SelfKind::RedisStandIn => {
            let path = redis_path.as_ref().ok_or_else(|| {
                "WEFT_BENCH_KV_SELF=redis needs redis-server on PATH (Debian: apt-get install \
                 redis-server)"
                    .to_string()
            })?;
            Server::start_redis(path, &base.0.join("weft"), me.impl_name())?
        }
    };
    rep.line("");
    rep.line(format!("servers: {} ({})", weft.impl_name, weft.describe));
    if me == SelfKind::RedisStandIn {
        rep.line(
            "  NOTE: WEFT_BENCH_KV_SELF=redis: the \"weft\" side is a second redis-server \
             (impl redis-stand-in), not weft-kv: these figures prove the suite, not weft-kv",
        );
    }
    let redis = match &redis_path {
        Some(path) => Some(Server::start_redis(
            path,
            &base.0.join("redis"),
            "redis-server",
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
    for s in &servers {
        populate(&s.socket).map_err(|e| format!("populating {}: {e}", s.impl_name))?;
    }
    clients_table(opts, rep, &exe, &servers)?;
    redis_benchmark(opts, rep, &servers)?;
    for mut s in servers {
        if let Some(warning) = s.stop() {
            rep.line(format!("  warning: {warning}"));
        }
    }
    Ok(())
}

/// The key of index `k` and the value every writer stores under it.
fn key_value(k: u64) -> (String, String) {
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
    let names: Vec<&str> = servers.iter().map(|s| s.impl_name).collect();
    let mut head = format!("  {:>5} {:<6}", "procs", "op");
    for n in &names {
        head.push_str(&format!(" {:>16}", format!("{n} ms")));
    }
    head.push_str(&format!(" {:>12} {:>10}", "redis / weft", "published"));
    rep.line(head);
    for (oi, op) in [Op::Read, Op::Write, Op::Mixed].into_iter().enumerate() {
        for (pi, &procs) in PROCS.iter().enumerate() {
            let mut cells: Vec<f64> = Vec::with_capacity(servers.len());
            for (si, s) in servers.iter().enumerate() {
                progress::step(
                    format_args!("{}, {procs} processes, {}", op.name(), s.impl_name),
                    (oi * PROCS.len() + pi) * servers.len() + si,
                    3 * PROCS.len() * servers.len(),
                );
                let took = run_cell(exe, &s.socket, op, ops, procs).map_err(|e| {
                    format!(
                        "client-processes table, {} with {procs} processes on {}: {e}",
                        op.name(),
                        s.impl_name
                    )
                })?;
                let ms = took.as_secs_f64() * 1e3;
                rep.emit(&Measurement {
                    suite: SUITE,
                    name: format!("clients/{}/{procs}proc", op.name()),
                    impl_name: s.impl_name.to_string(),
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
            let ratio = match cells.as_slice() {
                [w, r] if *w > 0.0 => format!("{:.2}", r / w),
                _ => "-".to_string(),
            };
            line.push_str(&format!(" {ratio:>12} {:>10.3}", PUBLISHED_TABLE_1[pi][oi]));
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
fn run_cell(exe: &Path, socket: &Path, op: Op, ops: u64, procs: usize) -> Result<Duration, String> {
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
/// each reply, and prints `{"ops":N,"elapsed_s":S}`.
pub fn client_worker_main(socket: &Path, op: Op, ops: u64, seed: u64) -> Result<(), String> {
    let mut conn = Conn::connect(socket)?;
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
    writeln!(out, "{{\"ops\":{ops},\"elapsed_s\":{elapsed}}}")
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

fn redis_benchmark(opts: &Options, rep: &mut Reporter, servers: &[Server]) -> Result<(), String> {
    progress::part("redis-benchmark");
    let n = rb_requests(opts);
    rep.line("");
    let Some(rb) = find_on_path("redis-benchmark") else {
        rep.line(
            "redis-benchmark: not installed (no redis-benchmark on PATH; Debian: apt-get install \
             redis-tools): skipped",
        );
        return Ok(());
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
                    for (what, value, unit) in [
                        ("rps", m.0, "req/s"),
                        ("p50", m.1, "ms"),
                        ("p99", m.2, "ms"),
                    ] {
                        rep.emit(&Measurement {
                            suite: SUITE,
                            name: format!("{name}/{what}"),
                            impl_name: s.impl_name.to_string(),
                            value: Some(value),
                            unit,
                            note: None,
                        });
                    }
                    meds.push(m);
                }
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
    Ok(())
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
    fn start_weft(exe: &Path, dir: &Path, impl_name: &'static str) -> Result<Server, String> {
        let port = free_port()?;
        let data = dir.join("data");
        let socket = dir.join("kv.sock");
        let mut cmd = Command::new(exe);
        cmd.args(["kv", "serve", "--dir"])
            .arg(&data)
            .arg("--socket")
            .arg(&socket)
            .args(["--port", &port.to_string(), "--fsync", "everysec"]);
        Server::start(
            cmd,
            dir,
            socket,
            port,
            impl_name,
            "weft kv serve --fsync everysec",
        )
    }

    fn start_redis(path: &Path, dir: &Path, impl_name: &'static str) -> Result<Server, String> {
        let port = free_port()?;
        let data = dir.join("data");
        let socket = dir.join("kv.sock");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&data)
            .map_err(|e| format!("cannot create {}: {e}", data.display()))?;
        let mut cmd = Command::new(path);
        cmd.args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ])
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
            "{} --appendonly yes --appendfsync everysec --save ''; {version}",
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
        let c = Client::connect(&Addr::Unix(socket.to_path_buf())).map_err(|e| e.to_string())?;
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
    fn key_values_are_distinct_and_fixed() {
        assert_eq!(
            key_value(7),
            ("key:000007".into(), "value-of-000007".into())
        );
        assert_ne!(key_value(1).1, key_value(2).1);
    }
}
