//! The parts of `weft bench kv` driven by its own load generator (`kvload.rs`), and
//! redis-benchmark's default tests:
//!
//! - **load generator**: 50 connections over the Unix socket, GET and SET one command
//!   at a time (uniform keys; GET also Zipf), and 16 at a time (beside redis-benchmark's
//!   figure for the same row of part 2, as a cross-check); closed loop, the servers
//!   alternating run by run, median of the runs. Target on the one-at-a-time uniform
//!   rows: weft >= 1.5x redis-server's requests/s with a p99 no higher.
//! - **latency at a fixed rate**: GET from 50 connections at 50% and 90% of the rate
//!   redis-server reached in the closed-loop GET row (open loop: see `kvload.rs`),
//!   p50/p99/p99.9/max for both servers in the same run.
//! - **redis-benchmark's tests**: `-t set,get,incr,lpush,...,mset -c 50 -P 16` over the
//!   Unix socket. A test whose commands weft-kv does not answer yet (a probe on scratch
//!   keys says so) is reported as not supported yet, not run, and not counted.

use super::{
    children_cpu, emit_figures, find_on_path, key_space, median, progress, rb_runs, run_to_end,
    smoke, Conn, Options, RbMedians, Reply, Reporter, Server, TARGET_RATIO,
};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// Connections of the load generator's rows and of the fixed-rate latency rows.
const LOAD_CONNS: usize = 50;
/// Commands per closed-loop run: one at a time, and pipelined by 16.
const LOAD_REQUESTS: u64 = 200_000;
const LOAD_REQUESTS_P16: u64 = 1_000_000;
/// Seconds of commands per fixed-rate run.
const RATE_SECS: f64 = 3.0;
/// The shares of redis-server's closed-loop GET rate the fixed-rate rows run at.
const RATE_SHARES: [f64; 2] = [0.5, 0.9];
/// The target of redis-benchmark's fifteen tests: at least redis-server's requests/s
/// on every test, with a p99 no higher (the other tables aim at 1.5x).
const RB_TESTS_TARGET: f64 = 1.0;
/// redis-benchmark's tests of the last table, and the requests per test.
const RB_TESTS: [&str; 15] = [
    "set",
    "get",
    "incr",
    "lpush",
    "rpush",
    "lpop",
    "rpop",
    "sadd",
    "hset",
    "spop",
    "zadd",
    "zpopmin",
    "lrange_100",
    "lrange_600",
    "mset",
];
const RB_TESTS_REQUESTS: u64 = 100_000;

fn scaled(opts: &Options, n: u64) -> u64 {
    if smoke() {
        (n / 100).clamp(500, 10_000)
    } else if opts.quick {
        n / 10
    } else {
        n
    }
}

fn rate_secs(opts: &Options) -> f64 {
    if smoke() {
        0.2
    } else if opts.quick {
        1.0
    } else {
        RATE_SECS
    }
}

/// Estimated seconds of the parts here (two servers).
pub(super) fn estimate(opts: &Options) -> (f64, f64, f64) {
    let runs = rb_runs(opts) as f64;
    let p1 = scaled(opts, LOAD_REQUESTS) as f64 / 100e3;
    let p16 = scaled(opts, LOAD_REQUESTS_P16) as f64 / 800e3;
    let load = 2.0 * runs * (3.0 * p1 + 2.0 * p16);
    let rate = 2.0 * runs * RATE_SHARES.len() as f64 * rate_secs(opts);
    let tests =
        2.0 * runs * (RB_TESTS.len() as f64 * scaled(opts, RB_TESTS_REQUESTS) as f64) / 300e3;
    (load, rate, tests)
}

/// One run of the load generator: (requests/s, p50, p99, p99.9, max in us, late) and
/// the generator's CPU share of one CPU.
struct LoadRun {
    rps: f64,
    q: [f64; 4],
    late: f64,
    busy: f64,
}

#[allow(clippy::too_many_arguments)]
fn load_run(
    exe: &Path,
    s: &Server,
    op: &str,
    dist: &str,
    pipeline: usize,
    requests: u64,
    rate: Option<f64>,
    seed: u64,
) -> Result<LoadRun, String> {
    let mut cmd = Command::new(exe);
    cmd.args(["bench-worker", "kv-load", "--addr"])
        .arg(&s.socket)
        .args(["--conns", &LOAD_CONNS.to_string()])
        .args(["--pipeline", &pipeline.to_string()])
        .args(["--requests", &requests.to_string()])
        .args(["--op", op, "--dist", dist])
        .args(["--keys", &key_space().to_string()])
        .args(["--seed", &seed.to_string()]);
    if let Some(r) = rate {
        cmd.args(["--rate", &format!("{r:.0}")]);
    }
    let (cpu0, t0) = (children_cpu(), Instant::now());
    let text = run_to_end(cmd, "the load generator")?;
    let busy = (children_cpu() - cpu0) / t0.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("the load generator printed {text:?}, not its JSON report ({e})"))?;
    let f = |k: &str| {
        v[k].as_f64()
            .ok_or_else(|| format!("the load generator's report lacks {k}: {text:?}"))
    };
    Ok(LoadRun {
        rps: f("rps")?,
        q: [f("p50_us")?, f("p99_us")?, f("p999_us")?, f("max_us")?],
        late: f("late")?,
        busy,
    })
}

/// The median of each figure over runs.
fn medians(runs: &[LoadRun]) -> LoadRun {
    let m = |f: &dyn Fn(&LoadRun) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        median(&mut v)
    };
    LoadRun {
        rps: m(&|r| r.rps),
        q: [
            m(&|r| r.q[0]),
            m(&|r| r.q[1]),
            m(&|r| r.q[2]),
            m(&|r| r.q[3]),
        ],
        late: m(&|r| r.late),
        busy: m(&|r| r.busy),
    }
}

fn emit_run(rep: &mut Reporter, name: &str, s: &Server, r: &LoadRun) {
    let figures = [
        ("rps", r.rps, "req/s"),
        ("p50", r.q[0], "us"),
        ("p99", r.q[1], "us"),
        ("p99.9", r.q[2], "us"),
        ("max", r.q[3], "us"),
    ];
    emit_figures(rep, name, s, &figures);
}

/// Runs `f` for each server, `runs` times, the servers taking turns (who goes first
/// alternating); the runs of each server.
fn alternate(
    servers: &[Server],
    runs: usize,
    mut f: impl FnMut(usize, &Server) -> Result<LoadRun, String>,
) -> Result<Vec<Vec<LoadRun>>, String> {
    let mut out: Vec<Vec<LoadRun>> = servers.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        for j in 0..servers.len() {
            let i = if run % 2 == 0 {
                j
            } else {
                servers.len() - 1 - j
            };
            out[i].push(f(run, &servers[i])?);
        }
    }
    Ok(out)
}

/// The load generator's table (module doc); returns redis-server's closed-loop GET
/// rate with one command at a time (the fixed-rate rows' base), when measured.
pub(super) fn load_generator(
    opts: &Options,
    rep: &mut Reporter,
    exe: &Path,
    servers: &[Server],
    rb: &RbMedians,
) -> Result<Option<f64>, String> {
    progress::part("load generator");
    let runs = rb_runs(opts);
    rep.line("");
    rep.line(format!(
        "load generator (weft bench-worker kv-load: {LOAD_CONNS} connections on {} \
         event-loop threads with an io_uring each, closed loop, every GET's value checked), Unix socket, median of \
         {runs} run(s), servers alternating run by run; it shares the CPUs with the server, \
         alike for both",
        super::super::nproc()
    ));
    rep.line(format!(
        "  target on the one-at-a-time uniform rows: weft >= {TARGET_RATIO}x redis-server's \
         requests/s with a p99 no higher; the pipelined rows show redis-benchmark's figure \
         for the same load (part above) as a cross-check"
    ));
    let names: Vec<&str> = servers.iter().map(|s| s.impl_name).collect();
    let mut head = format!("  {:>3} {:<4} {:<7}", "P", "op", "keys");
    for n in &names {
        head.push_str(&format!(" | {:>34}", format!("{n} req/s p50 p99 p99.9 us")));
    }
    head.push_str(" | req/s w/r p99 w/r | target");
    rep.line(head);
    let rows: [(usize, &str, &str, bool); 5] = [
        (1, "get", "uniform", true),
        (1, "set", "uniform", true),
        (1, "get", "zipf", false),
        (16, "get", "uniform", false),
        (16, "set", "uniform", false),
    ];
    let mut redis_get = None;
    let mut verdicts = (0, 0);
    let total = rows.len() * runs * servers.len();
    let mut step = 0;
    for (p, op, dist, target) in rows {
        let requests = scaled(
            opts,
            if p == 1 {
                LOAD_REQUESTS
            } else {
                LOAD_REQUESTS_P16
            },
        );
        let per = alternate(servers, runs, |run, s| {
            progress::step(
                format_args!("-P {p} {op} {dist}, {}, run {}", s.impl_name, run + 1),
                step,
                total,
            );
            step += 1;
            load_run(exe, s, op, dist, p, requests, None, 7 + run as u64).map_err(|e| {
                format!(
                    "load generator, {} -P {p} on {}: {e}",
                    op.to_uppercase(),
                    s.impl_name
                )
            })
        })?;
        let meds: Vec<LoadRun> = per.iter().map(|r| medians(r)).collect();
        let test = op.to_uppercase();
        let mut line = format!("  {p:>3} {test:<4} {dist:<7}");
        for (s, m) in servers.iter().zip(&meds) {
            emit_run(rep, &format!("load/unix/P{p}/{op}/{dist}"), s, m);
            line.push_str(&format!(
                " | {:>10.0} {:>7.1} {:>7.1} {:>7.1}",
                m.rps, m.q[0], m.q[1], m.q[2]
            ));
        }
        if let [w, r] = meds.as_slice() {
            let thr = w.rps / r.rps;
            let p99 = w.q[1] / r.q[1];
            line.push_str(&format!(" | {thr:>8.2}x {p99:>7.2} | "));
            if target {
                let met = thr >= TARGET_RATIO && w.q[1] <= r.q[1];
                verdicts.1 += 1;
                if met {
                    verdicts.0 += 1;
                }
                line.push_str(if met { "met" } else { "MISSED" });
            } else {
                line.push('-');
            }
            if p == 1 && op == "get" && dist == "uniform" {
                redis_get = Some(r.rps);
            }
        }
        rep.line(line);
        let busy: Vec<String> = servers
            .iter()
            .zip(&meds)
            .map(|(s, m)| format!("{} {:.0}%", s.impl_name, m.busy * 100.0))
            .collect();
        let mut note = format!("        generator busy (of one CPU): {}", busy.join(", "));
        if let Some(rbv) = rb.get(&format!("unix/{p}/{test}")) {
            let v: Vec<String> = servers
                .iter()
                .zip(rbv)
                .map(|(s, x)| format!("{} {x:.0}", s.impl_name))
                .collect();
            note.push_str(&format!(
                "; redis-benchmark, same load: {} req/s",
                v.join(", ")
            ));
        }
        rep.line(note);
    }
    if verdicts.1 > 0 {
        rep.line(format!(
            "  target met on {} of {} rows",
            verdicts.0, verdicts.1
        ));
    }
    Ok(redis_get)
}

/// The fixed-rate latency rows (module doc), at shares of `base` requests/s.
pub(super) fn latency_at_rate(
    opts: &Options,
    rep: &mut Reporter,
    exe: &Path,
    servers: &[Server],
    base: Option<f64>,
) -> Result<(), String> {
    progress::part("latency at a fixed rate");
    rep.line("");
    let Some(base) = base.filter(|b| *b > 0.0) else {
        rep.line(
            "latency at a fixed rate: skipped (it needs redis-server's closed-loop GET rate \
             from the load generator's table)",
        );
        return Ok(());
    };
    let runs = rb_runs(opts);
    let secs = rate_secs(opts);
    rep.line(format!(
        "latency at a fixed rate: GET from {LOAD_CONNS} connections (Unix socket, uniform \
         keys, one command at a time) at {} of redis-server's closed-loop rate ({base:.0} \
         req/s), {secs:.0} s of commands per run, open loop (a command's time counts from \
         when it was due if the previous reply was late); median of {runs} run(s), servers \
         alternating",
        RATE_SHARES
            .iter()
            .map(|s| format!("{:.0}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(" and ")
    ));
    rep.line(format!(
        "    {:<6} {:<16} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}  (us)",
        "rate", "impl", "req/s", "late", "p50", "p99", "p99.9", "max"
    ));
    let total = RATE_SHARES.len() * runs * servers.len();
    let mut step = 0;
    for share in RATE_SHARES {
        let rate = base * share;
        let requests = (rate * secs).max(LOAD_CONNS as f64) as u64;
        let pct = format!("{:.0}%", share * 100.0);
        let per = alternate(servers, runs, |run, s| {
            progress::step(
                format_args!("{pct}, {}, run {}", s.impl_name, run + 1),
                step,
                total,
            );
            step += 1;
            load_run(
                exe,
                s,
                "get",
                "uniform",
                1,
                requests,
                Some(rate),
                11 + run as u64,
            )
            .map_err(|e| format!("latency at {pct} on {}: {e}", s.impl_name))
        })?;
        let meds: Vec<LoadRun> = per.iter().map(|r| medians(r)).collect();
        for (s, m) in servers.iter().zip(&meds) {
            emit_run(rep, &format!("latency-at-rate/{:.0}", share * 100.0), s, m);
            rep.line(format!(
                "    {pct:<6} {:<16} {:>10.0} {:>8.0} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
                s.impl_name, m.rps, m.late, m.q[0], m.q[1], m.q[2], m.q[3]
            ));
        }
        if let [w, r] = meds.as_slice() {
            let mut line = format!("    {:<6} {:<16} {:>10} {:>8}", "", "weft / redis", "", "");
            for i in 0..4 {
                line.push_str(&format!(" {:>8.2}", w.q[i] / r.q[i]));
            }
            line.push_str(if w.q[1] <= r.q[1] && w.q[2] <= r.q[2] {
                "  p99 and p99.9 no higher: met"
            } else {
                "  p99 or p99.9 higher: MISSED"
            });
            rep.line(line);
        }
    }
    Ok(())
}

/// A probe of one redis-benchmark test's commands on scratch keys: true when the
/// server answers them (no error).
fn supports(s: &Server, test: &str) -> Result<bool, String> {
    let key = format!("weft-bench:probe:{test}");
    let k = key.as_str();
    let probes: Vec<Vec<&str>> = match test {
        "set" => vec![vec!["SET", k, "x"]],
        "get" => vec![vec!["GET", k]],
        "incr" => vec![vec!["INCR", k]],
        "lpush" => vec![vec!["LPUSH", k, "x"]],
        "rpush" => vec![vec!["RPUSH", k, "x"]],
        "lpop" => vec![vec!["RPUSH", k, "x"], vec!["LPOP", k]],
        "rpop" => vec![vec!["RPUSH", k, "x"], vec!["RPOP", k]],
        "sadd" => vec![vec!["SADD", k, "x"]],
        "hset" => vec![vec!["HSET", k, "f", "x"]],
        "spop" => vec![vec!["SADD", k, "x"], vec!["SPOP", k]],
        "zadd" => vec![vec!["ZADD", k, "1", "x"]],
        "zpopmin" => vec![vec!["ZADD", k, "1", "x"], vec!["ZPOPMIN", k]],
        "lrange_100" | "lrange_600" => vec![vec!["LPUSH", k, "x"], vec!["LRANGE", k, "0", "99"]],
        "mset" => vec![vec!["MSET", k, "x"]],
        _ => return Ok(false),
    };
    let mut c = Conn::connect(&s.socket)?;
    let mut ok = true;
    let del = vec!["DEL", k];
    for p in probes.iter().chain([&del]) {
        let args: Vec<&[u8]> = p.iter().map(|a| a.as_bytes()).collect();
        c.queue(&args);
        c.flush()?;
        if matches!(c.read_reply()?, Reply::Error(_)) {
            ok = false;
        }
    }
    Ok(ok)
}

/// The CSV row of `test` (redis-benchmark names LRANGE's rows "LRANGE_100 (first 100
/// elements)" and also prints the LPUSH that fills their list, which is not a test of
/// ours).
fn row_of<'a>(rows: &'a [super::RbRow], test: &str) -> Option<&'a super::RbRow> {
    let want = test.to_ascii_uppercase();
    rows.iter().find(|r| {
        let first = r.test.split_whitespace().next().unwrap_or("");
        first == want && !r.test.contains("needed")
    })
}

/// redis-benchmark's tests with -P 16 (module doc).
pub(super) fn rb_tests(
    opts: &Options,
    rep: &mut Reporter,
    servers: &[Server],
) -> Result<(), String> {
    progress::part("redis-benchmark tests");
    rep.line("");
    let Some(rb) = find_on_path("redis-benchmark") else {
        rep.line("redis-benchmark tests: skipped (redis-benchmark is not installed)");
        return Ok(());
    };
    // Not below 20,000 even in a smoke run: fewer pipelined requests can all be
    // answered within redis-benchmark's 1 ms clock, which then reports an infinite rate.
    let n = if smoke() {
        20_000
    } else {
        scaled(opts, RB_TESTS_REQUESTS)
    };
    let runs = rb_runs(opts);
    rep.line(format!(
        "redis-benchmark tests: -t {} -n {n} -c 50 -P 16 -r {} --csv over the Unix socket; \
         median of {runs} run(s), servers alternating run by run",
        RB_TESTS.join(","),
        key_space()
    ));
    rep.line(format!(
        "  target: weft >= {RB_TESTS_TARGET}x redis-server's requests/s with a p99 no higher; a \
         test whose commands weft-kv does not answer yet is not run (not supported yet)"
    ));
    let mut supported: Vec<Vec<&str>> = Vec::new();
    for s in servers {
        let mut v = Vec::new();
        for t in RB_TESTS {
            if supports(s, t)? {
                v.push(t);
            }
        }
        supported.push(v);
    }
    let per = {
        let mut out: Vec<Vec<Vec<super::RbRow>>> = servers.iter().map(|_| Vec::new()).collect();
        let mut step = 0;
        let total = runs * servers.len();
        for run in 0..runs {
            for j in 0..servers.len() {
                let i = if run % 2 == 0 {
                    j
                } else {
                    servers.len() - 1 - j
                };
                let s = &servers[i];
                progress::step(
                    format_args!("{}, run {} of {runs}", s.impl_name, run + 1),
                    step,
                    total,
                );
                step += 1;
                if supported[i].is_empty() {
                    out[i].push(Vec::new());
                    continue;
                }
                let mut cmd = Command::new(&rb);
                cmd.arg("-s")
                    .arg(&s.socket)
                    .args(["-t", &supported[i].join(","), "-n", &n.to_string()])
                    .args([
                        "-c",
                        "50",
                        "-P",
                        "16",
                        "-r",
                        &key_space().to_string(),
                        "--csv",
                    ]);
                let text = run_to_end(cmd, "redis-benchmark")?;
                out[i].push(
                    super::parse_rb_csv(&text)
                        .map_err(|e| format!("redis-benchmark against {}: {e}", s.impl_name))?,
                );
            }
        }
        out
    };
    rep.line(format!(
        "  {:<11} | {:>24} | {:>24} | {:>9} {:>7} | target",
        "test",
        format!("{} req/s p99 ms", servers[0].impl_name),
        servers
            .get(1)
            .map_or("-".to_string(), |s| format!("{} req/s p99 ms", s.impl_name)),
        "req/s w/r",
        "p99 w/r"
    ));
    let mut verdicts = (0, 0, 0);
    for t in RB_TESTS {
        let mut figures: Vec<Option<(f64, f64)>> = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            if !supported[i].contains(&t) {
                figures.push(None);
                continue;
            }
            let mut rps = Vec::new();
            let mut p99 = Vec::new();
            for rows in &per[i] {
                let r = row_of(rows, t).ok_or_else(|| {
                    format!(
                        "redis-benchmark against {} printed no row for {t}",
                        s.impl_name
                    )
                })?;
                rps.push(r.rps);
                p99.push(r.p99_ms);
            }
            let m = (median(&mut rps), median(&mut p99));
            emit_figures(
                rep,
                &format!("redis-benchmark-tests/unix/P16/{t}"),
                s,
                &[("rps", m.0, "req/s"), ("p99", m.1, "ms")],
            );
            figures.push(Some(m));
        }
        let cell = |f: Option<&Option<(f64, f64)>>| match f {
            Some(Some((r, p))) => format!("{r:>14.0} {p:>9.3}"),
            Some(None) => format!("{:>24}", "not supported yet"),
            None => format!("{:>24}", "-"),
        };
        let mut line = format!(
            "  {t:<11} | {} | {}",
            cell(figures.first()),
            cell(figures.get(1))
        );
        match figures.as_slice() {
            [Some(w), Some(r)] => {
                let met = w.0 / r.0 >= RB_TESTS_TARGET && w.1 <= r.1;
                verdicts.1 += 1;
                if met {
                    verdicts.0 += 1;
                }
                line.push_str(&format!(
                    " | {:>8.2}x {:>7.2} | {}",
                    w.0 / r.0,
                    w.1 / r.1,
                    if met { "met" } else { "MISSED" }
                ));
            }
            [None, _] => {
                verdicts.2 += 1;
                line.push_str(&format!(" | {:>9} {:>7} | not supported yet", "-", "-"));
            }
            _ => line.push_str(&format!(" | {:>9} {:>7} | not measured", "-", "-")),
        }
        rep.line(line);
    }
    rep.line(format!(
        "  target met on {} of {} tests measured; {} not supported yet",
        verdicts.0, verdicts.1, verdicts.2
    ));
    Ok(())
}
