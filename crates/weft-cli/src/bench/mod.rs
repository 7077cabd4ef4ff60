//! The benchmark runner behind `weft bench <suite>`.
//!
//! A suite is one module (`fibers.rs`, ...) with a `run(&Options, &mut Reporter)`
//! function; add a variant to [`Suite`] and an arm in [`run`] to add one. This
//! module holds what the suites share:
//!
//! * [`Measurement`]: one result, `{"suite","name","impl","value","unit"}` in
//!   JSON. With `--json`, stdout gets exactly one such object per line and
//!   nothing else; the human table then goes to stderr ([`Reporter`]).
//! * [`measure_interleaved`]: the micro-benchmark method. The machine this
//!   runs on is typically a shared, noisy VM, so each implementation runs K
//!   timed batches (K = 7, or 3 with `--quick`) sized to ~30 ms (~5 ms with
//!   `--quick`), the implementations take turns batch by batch (weft, peer,
//!   weft, peer, ...) so that noise hits them alike, and the reported value
//!   is the median time per operation.
//! * [`print_micro_table`]: prints such a group with ratios peer / weft.
//! * the table header ([`header_lines`]): date (UTC), `uname -r`, CPU model,
//!   nproc, and the load average (a busy machine makes noisy numbers).
//! * [`WorkerJob`]: workloads a suite runs in a fresh process by re-executing
//!   this binary as `weft bench-worker <job> ...` (hidden from `--help`).
//! * the progress line on a terminal's stderr ([`progress`]): each suite lists its
//!   parts with estimated durations (`parts(opts)` beside its `run`) and says which
//!   part and step runs.
//! * the charts ([`plot`]): `--plot DIR` draws the run's tables as SVG files, `weft
//!   bench plot FILE --out DIR` those of a run saved with `--json`.

mod echo;
pub mod fibers;
mod gopeer;
mod hooked;
mod ipc;
mod kv;
mod kvload;
mod peers;
pub mod plot;
pub mod progress;
pub mod runtime;
mod syslets;

use std::fmt::Display;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `weft bench`: run a suite, or draw the charts of a saved run.
#[derive(clap::Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    disable_help_subcommand = true,
    after_help = "While a suite runs, a progress line (the part and step running, how far \
                  the suite is, an estimate of the time left) is shown on stderr when \
                  stderr is a terminal; never in a pipe or a file."
)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Which suite to run.
    #[arg(value_enum, required = true)]
    suite: Option<Suite>,
    /// Print one JSON object per line on stdout, {"suite","name","impl","value","unit"},
    /// and nothing else there (the human-readable table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Shorter run: 3 repetitions of ~5 ms batches and a 10x smaller workload
    /// for the long benchmarks. Fine for a smoke test, noisier numbers.
    #[arg(long)]
    quick: bool,
    /// `bench runtime` only: how many parked green threads the memory benchmark creates
    /// (default 20000, 2000 with --quick: sizes that fit the system's default limit on
    /// memory mappings; 0 skips it). The full measurement is --parked 1000000: about 4
    /// GiB of memory, and as root it raises vm.max_map_count for the run (restored
    /// afterwards); without root it is clamped to what the limit allows.
    #[arg(long, value_name = "N")]
    parked: Option<usize>,
    /// Also draw the tables as SVG charts into DIR (created if need be), one file per
    /// table named <suite>-<table>.svg; the table lists the files.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Draw the charts of a run saved with --json: the same SVG files as --plot.
    Plot {
        /// The run's JSON lines (`weft bench <suite> --json > FILE`; several runs may be
        /// in one file, a later row replacing the same earlier one); - reads stdin.
        file: PathBuf,
        /// The directory to write the charts into (created if need be).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

/// Runs `weft bench ...`.
pub fn main(args: Args) -> Result<(), String> {
    match (args.command, args.suite) {
        (Some(Command::Plot { file, out }), _) => plot_file(&file, &out),
        (None, Some(suite)) => run(
            suite,
            Options {
                json: args.json,
                quick: args.quick,
                parked: args.parked,
            },
            args.plot.as_deref(),
        ),
        (None, None) => Err("name a suite to run (see weft bench --help)".to_string()),
    }
}

/// `weft bench plot FILE --out DIR`.
fn plot_file(file: &Path, out: &Path) -> Result<(), String> {
    let text = if file == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        s
    } else {
        std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?
    };
    let rows = plot::parse_json_lines(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let files = plot::write_charts(&rows, out)?;
    if files.is_empty() {
        return Err(format!(
            "{}: no table to draw ({} rows; a chart needs a table measured for two \
             implementations or more)",
            file.display(),
            rows.len()
        ));
    }
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// The benchmark suites `weft bench` knows.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    /// Fibers: context switch, create, FLS read vs ucontext/Boost/pthread, and a
    /// many-fibers workload (F fibers over one OS thread per CPU, in P processes) beside
    /// the Unix Fibers report's published figures of a user-space and a kernel fiber
    /// implementation.
    Fibers,
    /// Green threads: spawn, yield and cross-worker round trips vs pthreads and Go, the
    /// message boxes vs the raw cache-line and futex round trips, and the memory of N
    /// parked green threads (`--parked N`).
    Runtime,
    /// Synchronous IPC between green threads (call / reply_and_wait): the local and
    /// cross-worker round trips, idle, busy and under load, vs a futex hand-off and Go
    /// channels, beside the Fiasco microkernel's published IPC figures (ns and TSC
    /// cycles).
    Ipc,
    /// Syslets: open+read+close of 1,000 small files, cached and uncached (the suite
    /// evicts its own files from the page cache before each uncached pass), sync vs
    /// syslets on one worker and on every worker vs a hand-written io_uring loop, beside
    /// the published figures of Ingo Molnar's async-test (2007).
    Syslets,
    /// weft-kv vs redis-server at the same durability: 100,000 reads / writes / mixed
    /// over 1-10 client processes (beside a Linux kernel module's published figures),
    /// redis-benchmark (set, get; TCP and Unix socket; with and without pipelining),
    /// against a target of 1.5x redis-server, and the latency of a small pipeline on a
    /// quiet machine, beside CPU hogs, and beside CPU hogs and a disk writer.
    Kv,
}

impl Suite {
    /// The suite's parts for the progress line, with estimated durations.
    fn parts(self, opts: &Options) -> Vec<progress::Part> {
        match self {
            Suite::Fibers => fibers::parts(opts),
            Suite::Runtime => runtime::parts(opts),
            Suite::Ipc => ipc::parts(opts),
            Suite::Syslets => syslets::parts(opts),
            Suite::Kv => kv::parts(opts),
        }
    }

    /// The suite's name as typed on the command line and written in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Fibers => "fibers",
            Suite::Runtime => "runtime",
            Suite::Ipc => "ipc",
            Suite::Syslets => "syslets",
            Suite::Kv => "kv",
        }
    }
}

/// Workloads run in a child process (`weft bench-worker <job>`); each prints
/// one JSON line on stdout.
#[derive(clap::Subcommand, Debug)]
pub enum WorkerJob {
    /// `bench runtime`'s idle connections, each held by a hooked green thread or an OS
    /// thread (see `hooked.rs`): prints "port P", ends when its stdin closes.
    #[command(name = "hooked-conns")]
    HookedConns {
        #[arg(long, value_enum)]
        mode: hooked::Mode,
    },
    /// The many-fibers workload of `bench fibers`: F fibers shared by one OS thread per CPU.
    #[command(name = "many-fibers")]
    ManyFibers {
        /// Number of fibers in the shared pool (at least 2).
        #[arg(long)]
        fibers: usize,
        /// Total number of work units to run (at least 1).
        #[arg(long)]
        work: u64,
    },
    /// `bench kv`'s client: one connection, "ready", then (after a byte on stdin) OPS
    /// commands one at a time, each reply checked.
    #[command(name = "kv-client")]
    KvClient {
        /// The server's Unix socket.
        #[arg(long)]
        socket: std::path::PathBuf,
        /// What to run.
        #[arg(long, value_enum)]
        op: kv::Op,
        /// How many commands.
        #[arg(long)]
        ops: u64,
        /// The seed of the random key sequence.
        #[arg(long)]
        seed: u64,
        /// Connect over shared memory (`<socket>.shm`) instead of the Unix socket.
        #[arg(long)]
        shm: bool,
    },
    /// `bench kv`'s load generator: CONNS connections on one event-loop thread per CPU
    /// (an io_uring each; WEFT_KV_LOAD_DRIVER=green: on green threads, one worker per
    /// CPU), GET or SET of keys drawn uniformly or Zipf, PIPELINE commands at a time,
    /// REQUESTS in all (closed loop) or at RATE commands a second (open loop); prints
    /// requests/s and latency quantiles.
    #[command(name = "kv-load")]
    KvLoad {
        /// The server's Unix socket path, or host:port with --tcp.
        #[arg(long)]
        addr: String,
        #[arg(long)]
        tcp: bool,
        #[arg(long)]
        conns: usize,
        #[arg(long, default_value_t = 1)]
        pipeline: usize,
        #[arg(long)]
        requests: u64,
        #[arg(long, value_enum)]
        op: kvload::LoadOp,
        #[arg(long, value_enum, default_value = "uniform")]
        dist: kvload::Dist,
        #[arg(long)]
        keys: u64,
        /// Open loop: commands a second in all.
        #[arg(long)]
        rate: Option<f64>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// `bench kv`'s CPU hog: busy-loops until its stdin closes (at most SECONDS).
    #[command(name = "cpu-hog")]
    CpuHog {
        #[arg(long)]
        seconds: u64,
    },
    /// `bench kv`'s disk writer: appends to FILE and fdatasyncs after each MiB until its
    /// stdin closes (at most SECONDS).
    #[command(name = "disk-writer")]
    DiskWriter {
        #[arg(long)]
        file: std::path::PathBuf,
        #[arg(long)]
        seconds: u64,
    },
}

/// Command-line options common to all suites.
#[derive(Copy, Clone, Debug)]
pub struct Options {
    /// JSON lines on stdout, table on stderr.
    pub json: bool,
    /// Fewer repetitions, shorter batches, smaller workloads.
    pub quick: bool,
    /// `bench runtime`: how many parked green threads the memory benchmark creates
    /// (None: its default, 20,000, or 2,000 with `--quick`; 0 skips it).
    pub parked: Option<usize>,
}

impl Options {
    /// K: how many timed batches per implementation.
    pub fn repetitions(&self) -> usize {
        if self.quick {
            3
        } else {
            7
        }
    }

    /// How long one timed batch should take.
    pub fn batch_target(&self) -> Duration {
        if self.quick {
            Duration::from_millis(5)
        } else {
            Duration::from_millis(30)
        }
    }
}

/// Runs `suite`, printing its table (and JSON lines with `--json`), and with `plot`
/// draws its charts there.
pub fn run(suite: Suite, opts: Options, plot: Option<&Path>) -> Result<(), String> {
    let mut rep = Reporter::new(opts.json);
    for line in header_lines(suite, &opts) {
        rep.line(line);
    }
    let line = progress::start(suite.name(), suite.parts(&opts));
    match suite {
        Suite::Fibers => fibers::run(&opts, &mut rep),
        Suite::Runtime => runtime::run(&opts, &mut rep),
        Suite::Ipc => ipc::run(&opts, &mut rep),
        Suite::Syslets => syslets::run(&opts, &mut rep),
        Suite::Kv => kv::run(&opts, &mut rep),
    }?;
    drop(line);
    if let Some(dir) = plot {
        let rows: Vec<plot::Row> = rep.measured.iter().filter_map(plot::Row::of).collect();
        let files = plot::write_charts(&rows, dir)?;
        rep.line("");
        if files.is_empty() {
            rep.line("charts: none (no table was measured for two implementations or more)");
        } else {
            rep.line(format!("charts ({}):", dir.display()));
            for f in files {
                rep.line(format!("  {}", f.display()));
            }
        }
    }
    Ok(())
}

/// Runs a `bench-worker` job in this process.
pub fn run_worker(job: WorkerJob) -> Result<(), String> {
    match job {
        WorkerJob::HookedConns { mode } => hooked::conns_main(mode),
        WorkerJob::ManyFibers { fibers, work } => fibers::many_fibers_worker_main(fibers, work),
        WorkerJob::KvClient {
            socket,
            op,
            ops,
            seed,
            shm,
        } => kv::client_worker_main(&socket, op, ops, seed, shm),
        WorkerJob::KvLoad {
            addr,
            tcp,
            conns,
            pipeline,
            requests,
            op,
            dist,
            keys,
            rate,
            seed,
        } => kvload::run(kvload::Spec {
            addr,
            tcp,
            conns: conns.max(1),
            pipeline: pipeline.max(1),
            requests,
            op,
            dist,
            keys,
            rate,
            seed,
        })
        .map(|o| println!("{}", o.json())),
        WorkerJob::CpuHog { seconds } => kv::cpu_hog_main(seconds),
        WorkerJob::DiskWriter { file, seconds } => kv::disk_writer_main(&file, seconds),
    }
}

/// One benchmark result.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub suite: &'static str,
    /// What was measured, e.g. "switch" or "many-fibers/4proc/1024/run".
    pub name: String,
    /// Which implementation: "weft", "ucontext", ...
    pub impl_name: String,
    /// `None` when the implementation could not be measured (see `note`);
    /// such a measurement appears in the table only, never in JSON.
    pub value: Option<f64>,
    /// "ns" (per operation), "s", "bytes" or "count".
    pub unit: &'static str,
    /// Shown in the table, e.g. "not installed".
    pub note: Option<String>,
}

impl Measurement {
    /// The JSON line for `--json`, or `None` if there is no value.
    pub fn json_line(&self) -> Option<String> {
        let value = self.value?;
        Some(json_line(
            self.suite,
            &self.name,
            &self.impl_name,
            value,
            self.unit,
        ))
    }
}

/// `{"suite":..,"name":..,"impl":..,"value":..,"unit":..}` in this key order
/// (serde_json's own maps would sort the keys). Non-finite values become null.
pub fn json_line(suite: &str, name: &str, impl_name: &str, value: f64, unit: &str) -> String {
    let s = |v: &str| serde_json::Value::from(v).to_string();
    format!(
        "{{\"suite\":{},\"name\":{},\"impl\":{},\"value\":{},\"unit\":{}}}",
        s(suite),
        s(name),
        s(impl_name),
        serde_json::Value::from(value),
        s(unit)
    )
}

/// Where output goes: the table to stdout (to stderr with `--json`), the JSON
/// lines to stdout.
pub struct Reporter {
    json: bool,
    /// Every measurement with a value so far (`--plot` draws them).
    measured: Vec<Measurement>,
    /// Every line, kept here instead of written out (tests).
    #[cfg(test)]
    kept: Option<Vec<String>>,
}

impl Reporter {
    pub fn new(json: bool) -> Self {
        Reporter {
            json,
            measured: Vec::new(),
            #[cfg(test)]
            kept: None,
        }
    }

    /// A reporter that keeps its lines (table and JSON) for the test to look at, so that
    /// none reaches the test run's output.
    #[cfg(test)]
    pub fn kept(json: bool) -> Self {
        Reporter {
            json,
            measured: Vec::new(),
            kept: Some(Vec::new()),
        }
    }

    /// The lines kept so far (see [`Reporter::kept`]).
    #[cfg(test)]
    pub fn lines(&self) -> &[String] {
        self.kept.as_deref().unwrap_or_default()
    }

    /// One line of the human-readable table.
    pub fn line(&mut self, text: impl Display) {
        #[cfg(test)]
        if let Some(kept) = self.kept.as_mut() {
            kept.push(text.to_string());
            return;
        }
        // A closed pipe (`weft bench fibers | head`) is not worth a panic. The progress
        // line, if any, leaves the screen while the text is written.
        progress::suspend(|| {
            let _ = if self.json {
                writeln!(std::io::stderr().lock(), "{text}")
            } else {
                writeln!(std::io::stdout().lock(), "{text}")
            };
        });
    }

    /// Emits the JSON line of `m` (with `--json` and a value only), and keeps `m` for
    /// the charts.
    pub fn emit(&mut self, m: &Measurement) {
        if m.value.is_some() {
            self.measured.push(m.clone());
        }
        if !self.json {
            return;
        }
        if let Some(line) = m.json_line() {
            #[cfg(test)]
            if let Some(kept) = self.kept.as_mut() {
                kept.push(line);
                return;
            }
            progress::suspend(|| {
                let _ = writeln!(std::io::stdout().lock(), "{line}");
            });
        }
    }
}

/// The median of `samples` (the mean of the two middle ones for an even
/// count); NaN for an empty slice. Sorts `samples`.
pub fn median(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Runs `iters` iterations of an implementation and returns the time its
/// timed part took (setup excluded), or an error message.
pub type BatchFn<'a> = Box<dyn FnMut(u64) -> Result<Duration, String> + 'a>;

/// One implementation taking part in a micro benchmark.
pub struct Contender<'a> {
    pub impl_name: &'static str,
    /// Operations per iteration: 2 for a ping-pong round trip (2 switches).
    pub ops_per_iter: u64,
    /// The batch, or why it cannot run (e.g. "not installed").
    pub batch: Result<BatchFn<'a>, String>,
}

impl<'a> Contender<'a> {
    pub fn new(
        impl_name: &'static str,
        ops_per_iter: u64,
        batch: impl FnMut(u64) -> Result<Duration, String> + 'a,
    ) -> Self {
        Contender {
            impl_name,
            ops_per_iter,
            batch: Ok(Box::new(batch)),
        }
    }

    pub fn unavailable(impl_name: &'static str, why: impl Into<String>) -> Self {
        Contender {
            impl_name,
            ops_per_iter: 1,
            batch: Err(why.into()),
        }
    }
}

/// The result of one implementation in a micro benchmark, in ns per operation.
#[derive(Clone, Debug)]
pub struct MicroResult {
    pub impl_name: &'static str,
    /// `None` when not measured (`note` says why).
    pub median_ns: Option<f64>,
    pub min_ns: f64,
    pub max_ns: f64,
    pub note: Option<String>,
}

/// Finds how many iterations make one batch last about `target`. The runs
/// made here double as warm-up.
fn calibrate(batch: &mut BatchFn<'_>, target: Duration) -> Result<u64, String> {
    let mut iters: u64 = 1;
    loop {
        let took = batch(iters)?;
        if took >= target / 8 || iters >= 1 << 40 {
            let scale = target.as_secs_f64() / took.as_secs_f64().max(1e-9);
            return Ok(((iters as f64) * scale).ceil().max(1.0) as u64);
        }
        iters *= if took < target / 100 { 10 } else { 2 };
    }
}

/// Measures the contenders with the method described at the top of this
/// file: calibrate each, then K rounds in which every contender runs one
/// batch in turn; report the median ns per operation of each.
pub fn measure_interleaved(
    opts: &Options,
    contenders: &mut [Contender<'_>],
) -> Result<Vec<MicroResult>, String> {
    let target = opts.batch_target();
    let running = contenders.iter().filter(|c| c.batch.is_ok()).count();
    let steps = running * (opts.repetitions() + 1);
    let mut step = 0;
    let mut iters = Vec::with_capacity(contenders.len());
    for c in contenders.iter_mut() {
        iters.push(match &mut c.batch {
            Ok(batch) => {
                progress::step(format_args!("{}, calibrating", c.impl_name), step, steps);
                step += 1;
                calibrate(batch, target).map_err(|e| {
                    format!("{} (while calibrating {}): {e}", c.impl_name, c.impl_name)
                })?
            }
            Err(_) => 0,
        });
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for round in 0..opts.repetitions() {
        for (i, c) in contenders.iter_mut().enumerate() {
            if let Ok(batch) = &mut c.batch {
                progress::step(
                    format_args!(
                        "{}, batch {} of {}",
                        c.impl_name,
                        round + 1,
                        opts.repetitions()
                    ),
                    step,
                    steps,
                );
                step += 1;
                let took = batch(iters[i]).map_err(|e| format!("{}: {e}", c.impl_name))?;
                let ops = (iters[i] * c.ops_per_iter) as f64;
                samples[i].push(took.as_nanos() as f64 / ops);
            }
        }
    }
    Ok(contenders
        .iter()
        .zip(samples.iter_mut())
        .map(|(c, s)| match &c.batch {
            Ok(_) => MicroResult {
                impl_name: c.impl_name,
                median_ns: Some(median(s)),
                min_ns: s.first().copied().unwrap_or(f64::NAN),
                max_ns: s.last().copied().unwrap_or(f64::NAN),
                note: None,
            },
            Err(why) => MicroResult {
                impl_name: c.impl_name,
                median_ns: None,
                min_ns: f64::NAN,
                max_ns: f64::NAN,
                note: Some(why.clone()),
            },
        })
        .collect())
}

/// Prints a micro-benchmark group (title, one row per implementation with
/// median, min..max over the K batches, and the ratio impl / weft) and emits
/// its JSON lines. `name` is the measurement name, e.g. "switch".
pub fn print_micro_table(
    rep: &mut Reporter,
    suite: Suite,
    name: &str,
    title: &str,
    results: &[MicroResult],
) {
    let weft = results
        .iter()
        .find(|r| r.impl_name == "weft")
        .and_then(|r| r.median_ns);
    rep.line("");
    rep.line(format!("{name}: {title}"));
    rep.line(format!(
        "  {:<20} {:>12} {:>25} {:>12}",
        "impl", "median ns/op", "min..max ns/op", "impl / weft"
    ));
    for r in results {
        let m = Measurement {
            suite: suite.name(),
            name: name.to_string(),
            impl_name: r.impl_name.to_string(),
            value: r.median_ns,
            unit: "ns",
            note: r.note.clone(),
        };
        rep.emit(&m);
        match r.median_ns {
            Some(v) => {
                let ratio = match weft {
                    Some(w) if w > 0.0 => format!("{:.2}", v / w),
                    _ => "-".to_string(),
                };
                let range = format!("{}..{}", fmt_ns(r.min_ns), fmt_ns(r.max_ns));
                rep.line(format!(
                    "  {:<20} {:>12} {:>25} {:>12}",
                    r.impl_name,
                    fmt_ns(v),
                    range,
                    ratio
                ));
            }
            None => rep.line(format!(
                "  {:<20} {:>12}   ({})",
                r.impl_name,
                "-",
                r.note.as_deref().unwrap_or("not measured")
            )),
        }
    }
}

/// `v` rounded, with thousands separated by commas: 1,298 (as the published figures
/// the tables quote are printed).
pub fn group(v: f64) -> String {
    let s = format!("{:.0}", v.max(0.0));
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A ns value with 2 decimals below 1000, 1 decimal above.
pub fn fmt_ns(v: f64) -> String {
    if v < 1000.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// Prints "target: <what>: <detail>: met/MISSED".
pub fn print_target(rep: &mut Reporter, what: &str, detail: &str, met: Option<bool>) {
    let verdict = match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    };
    rep.line(format!("  target: {what}: {detail}: {verdict}"));
}

/// The median of `impl_name` in `results`, if measured.
pub fn median_of(results: &[MicroResult], impl_name: &str) -> Option<f64> {
    results
        .iter()
        .find(|r| r.impl_name == impl_name)
        .and_then(|r| r.median_ns)
}

/// The table header: suite, date (UTC), kernel release, CPU model, nproc,
/// load average and the method.
pub fn header_lines(suite: Suite, opts: &Options) -> Vec<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    vec![
        format!(
            "weft bench {}{}",
            suite.name(),
            if opts.quick { " --quick" } else { "" }
        ),
        format!(
            "date: {}   kernel: {}   cpu: {}   nproc: {}   load average: {}",
            format_utc(now),
            kernel_release(),
            cpu_model(),
            nproc(),
            load_average()
        ),
        match suite {
            Suite::Syslets => syslets::method_line(opts),
            Suite::Kv => kv::method_line(opts),
            _ => format!(
                "method: per implementation the median of {} timed batches of ~{} ms, \
                 implementations taking turns batch by batch; impl / weft > 1 means weft is \
                 faster",
                opts.repetitions(),
                opts.batch_target().as_millis()
            ),
        },
    ]
}

/// `secs` since the Unix epoch as "YYYY-MM-DD hh:mm:ss UTC".
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// What `uname -r` prints.
pub fn kernel_release() -> String {
    // SAFETY: uname fills the struct; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown (uname failed)".to_string();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// The first "model name" of /proc/cpuinfo.
pub fn cpu_model() -> String {
    match std::fs::read_to_string("/proc/cpuinfo") {
        Ok(text) => cpu_model_from(&text)
            .unwrap_or_else(|| "unknown (no \"model name\" in /proc/cpuinfo)".to_string()),
        Err(e) => format!("unknown (cannot read /proc/cpuinfo: {e})"),
    }
}

fn cpu_model_from(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// The 1, 5 and 15 minute load averages from /proc/loadavg: on a shared
/// machine, a load near nproc before the run means noisy numbers.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// The number of CPUs this process may run on, as `nproc` prints it.
pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_has_the_five_keys_in_order() {
        let line = json_line("fibers", "switch", "weft", 8.25, "ns");
        assert_eq!(
            line,
            r#"{"suite":"fibers","name":"switch","impl":"weft","value":8.25,"unit":"ns"}"#
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["value"].as_f64(), Some(8.25));
    }

    #[test]
    fn json_line_escapes_and_handles_non_finite() {
        let line = json_line("fibers", "a\"b", "x\\y", f64::NAN, "ns");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["name"], "a\"b");
        assert_eq!(v["impl"], "x\\y");
        assert!(v["value"].is_null());
    }

    #[test]
    fn measurement_without_value_has_no_json() {
        let m = Measurement {
            suite: "fibers",
            name: "switch".into(),
            impl_name: "boost-fcontext".into(),
            value: None,
            unit: "ns",
            note: Some("not installed".into()),
        };
        assert_eq!(m.json_line(), None);
        let m = Measurement {
            value: Some(3.0),
            ..m
        };
        assert_eq!(
            m.json_line().unwrap(),
            r#"{"suite":"fibers","name":"switch","impl":"boost-fcontext","value":3.0,"unit":"ns"}"#
        );
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
        assert!(median(&mut []).is_nan());
        // An outlier does not move it.
        assert_eq!(
            median(&mut [10.0, 10.0, 1000.0, 9.0, 11.0, 10.0, 10.0]),
            10.0
        );
    }

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(group(0.4), "0");
        assert_eq!(group(999.0), "999");
        assert_eq!(group(1_298.0), "1,298");
        assert_eq!(group(15_258.2), "15,258");
        assert_eq!(group(1_234_567.0), "1,234,567");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t: x\nmodel name\t: other\n";
        assert_eq!(cpu_model_from(text).as_deref(), Some("AMD EPYC"));
        assert_eq!(cpu_model_from("processor: 0\n"), None);
    }

    #[test]
    fn interleaved_medians_per_operation() {
        let opts = Options {
            json: false,
            quick: true,
            parked: None,
        };
        let mut contenders = vec![
            Contender::new("weft", 2, |n| Ok(Duration::from_nanos(10 * n))),
            Contender::unavailable("absent", "not installed"),
        ];
        let r = measure_interleaved(&opts, &mut contenders).unwrap();
        assert_eq!(r[0].median_ns, Some(5.0));
        assert_eq!(r[1].median_ns, None);
        assert_eq!(r[1].note.as_deref(), Some("not installed"));
    }
}
