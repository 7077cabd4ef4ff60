//! The `ipc` suite of `weft bench`: synchronous IPC between green threads
//! (`weft_runtime::ipc`), measured as section 16 of "Multiprocessor Support for the
//! Fiasco Microkernel" (Sven Schneider, diploma thesis, TU Chemnitz, 2006; "the
//! Fiasco-MP thesis" below) measured Fiasco-MP's, with its published figures printed
//! beside ours. Every row is one call/reply round trip: the client green thread calls
//! (`ipc::call`) a server green thread whose loop is `receive`, then `reply_and_wait`,
//! each reply being the request's word + 1 (checked by the client).
//!
//! Groups (method: `bench/mod.rs`, ns per round trip; with rdtsc, also TSC cycles):
//!
//! * `local`: client and server on worker 0 (the thesis's table 5, local IPC), vs "go"
//!   (two goroutines, unbuffered channels, GOMAXPROCS=1) and "mutex-condvar-1cpu" (two
//!   OS threads pinned to CPU 0 handing a turn over with std's futex-based Mutex +
//!   Condvar), beside the floor under any local round trip: "two-fiber-switches", two
//!   raw fibers switching to each other with the switch a local round trip makes (owned,
//!   entered and ended with jumps, without checks: `RawFiber::switch_to_ready_jump`),
//!   with the per-fiber statistics, and doing nothing else.
//! * `cross`: client on worker 0, server on worker 1 (the thesis's table 4, no
//!   additional load): "weft-busy": each worker also runs a green thread that yields in a
//!   loop (as the runtime suite's "weft-busy" row), so neither worker ever sleeps;
//!   "weft-idle": nothing else runs, a worker with nothing to do spins briefly before it
//!   sleeps; "weft-asleep": the client sleeps 200 us before each call, so both workers
//!   are asleep when the call starts (timed per call, not interleaved: K batches of a
//!   fixed number of calls); vs "raw-cacheline" (the hardware floor: two pinned threads
//!   bouncing one cache line), "mutex-condvar" (two OS threads on CPUs 0 and 1) and "go"
//!   (GOMAXPROCS=2).
//! * `cross-under-pingpong`: the cross round trip while a same-worker IPC ping-pong (a
//!   client and a server green thread calling each other as fast as they can) runs on
//!   the server's worker or on the client's (the thesis's table 4, "pingpong at one
//!   CPU"), beside the same round trip without it.
//! * `local-under-load`: the local round trip on worker 0 (a) alone, (b) while worker 1
//!   runs a local ping-pong of its own, (c) while a client on worker 1 keeps calling a
//!   server on worker 0 (the thesis's section 16.2, its cases a-c). On x86_64 each case
//!   is also sampled round trip by round trip with rdtsc (percentiles), as the thesis's
//!   figures 16 and 17 plot single samples.
//!
//! Targets: a local round trip <= 60 ns; a cross-worker one <= 1 us when the
//! server's worker is busy-polling.

use super::gopeer::GoPeer;
use super::progress::{self, Part};
use super::runtime::{
    affinity, mutex_condvar, on_worker0, panic_text, pin, raw_cacheline, set_affinity,
};
use super::{
    fmt_ns, group, measure_interleaved, median, median_of, print_target, Contender, Measurement,
    MicroResult, Options, Reporter, Suite,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::ipc::{self, Message, Tid, Timeout};
use weft_runtime::{spawn_on, yield_now, JoinHandle, Runtime};

/// The targets IPC is held to (printed beside the results).
const TARGET_LOCAL_NS: f64 = 60.0;
const TARGET_CROSS_BUSY_NS: f64 = 1000.0;

/// The Fiasco-MP thesis, table 4: cross-processor IPC round trips in cycles (its
/// machine), with no additional load and with a ping-pong on one of the two CPUs.
const FIASCO_CROSS_SIBLING: f64 = 15_258.0;
const FIASCO_CROSS_PACKAGE: f64 = 31_764.0;
const FIASCO_CROSS_LOADED_SIBLING: f64 = 15_280.0;
const FIASCO_CROSS_LOADED_PACKAGE: f64 = 44_665.0;
/// The Fiasco-MP thesis, table 5: local IPC round trips (pingpong, warm) of Fiasco and
/// Fiasco-MP, sysenter and int30, with and without the shortcut: 1,298 to 2,904 cycles.
const FIASCO_LOCAL_MIN: f64 = 1_298.0;
const FIASCO_LOCAL_MAX: f64 = 2_904.0;
/// The Fiasco-MP thesis, section 16.2 (figures 16, 17): local IPC samples interrupted by
/// a cross-processor send request peak at 4,000-4,500 cycles.
const FIASCO_LOCAL_INTERRUPTED: (f64, f64) = (4_000.0, 4_500.0);

/// The word that ends a server (it replies, then returns).
const STOP: u64 = u64::MAX;
/// How long the client sleeps before each call of "weft-asleep": long past the spin
/// (a few us) an idle worker does before it sleeps.
const ASLEEP_GAP: Duration = Duration::from_micros(200);

/// The suite's parts for the progress line, with estimated seconds.
pub fn parts(opts: &Options) -> Vec<Part> {
    let asleep = opts.repetitions() as f64 * 64.0 * 250e-6;
    let samples = if opts.quick { 20_000.0 } else { 200_000.0 };
    let under_load = Part::micro("local-under-load", opts, 3).weight + 3.0 * samples * 200e-9;
    vec![
        Part::micro("local", opts, 4),
        Part::new("cross", Part::micro("cross", opts, 5).weight + asleep),
        Part::micro("cross-under-pingpong", opts, 3),
        Part::new("local-under-load", under_load),
    ]
}

pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // As in the runtime suite: what starts threads of its own (the runtime, whose workers
    // pin themselves, and the Go peer) starts before this thread pins itself to CPU 0.
    let all_cpus = affinity();
    let mut go = GoPeer::start();
    let rt = Runtime::builder()
        .workers(cpus.clamp(1, 2))
        .build()
        .map_err(|e| format!("cannot start a weft runtime: {e}"))?;
    let on_cpu0 = pin(0);
    let pinned = cpus >= 2 && on_cpu0;
    let tsc = tsc_per_ns(opts);
    rep.line("");
    rep.line(format!(
        "weft runtime: {} worker(s), pinned to the first CPUs; the client green thread runs \
         on worker 0 and times its calls; servers loop on receive + reply_and_wait",
        rt.workers()
    ));
    rep.line(if pinned {
        "OS-thread peers pinned to CPUs 0 and 1 (one CPU: both on CPU 0)".to_string()
    } else {
        format!("OS-thread peers NOT pinned ({cpus} CPU(s) available)")
    });
    rep.line(match &go {
        Ok(g) => format!("go peer: {}", g.description),
        Err(why) => format!("go peer: {why}: the go rows are skipped"),
    });
    rep.line(match tsc {
        Some(r) => format!(
            "cycles: TSC ticks (rdtsc) at {r:.3} GHz, calibrated against CLOCK_MONOTONIC; the \
             published figures are cycles of the CPUs of the Fiasco-MP thesis (S. Schneider, \
             \"Multiprocessor Support for the Fiasco Microkernel\", TU Chemnitz, 2006)"
        ),
        None => "cycles: not reported (no rdtsc on this architecture)".to_string(),
    });
    let ctx = Ctx {
        opts,
        rt: &rt,
        tsc,
        two: rt.workers() >= 2,
    };
    let local = local_rows(&ctx, rep, on_cpu0, &mut go)?;
    let idle = cross_rows(&ctx, rep, pinned, &mut go)?;
    drop(go);
    under_pingpong_rows(&ctx, rep, idle)?;
    local_under_load_rows(&ctx, rep, local)?;
    drop(rt);
    if let Some(set) = all_cpus {
        set_affinity(&set);
    }
    Ok(())
}

/// What every group needs.
struct Ctx<'a> {
    opts: &'a Options,
    rt: &'a Runtime,
    /// TSC ticks per ns, where there is an rdtsc.
    tsc: Option<f64>,
    /// Whether the runtime has 2 workers (the cross-worker rows need them).
    two: bool,
}

impl Ctx<'_> {
    /// A weft contender running [`ipc_batch`], or unavailable with one worker.
    fn weft<'a>(&'a self, name: &'static str, server: usize, env: Env) -> Contender<'a> {
        if (server == 1 || env.needs_two()) && !self.two {
            return Contender::unavailable(name, "needs 2 workers (1 CPU available)");
        }
        let rt = self.rt;
        Contender::new(name, 1, move |n| ipc_batch(rt, n, server, env))
    }
}

/// The Go contender running `test`, or why there is none.
fn go_contender<'a>(go: &'a mut Result<GoPeer, String>, test: &'static str) -> Contender<'a> {
    match go {
        Ok(g) => Contender::new("go", 1, move |n| g.run(test, n)),
        Err(why) => Contender::unavailable("go", why.clone()),
    }
}

/// Row 1: the local round trip. Returns weft's median (ns).
fn local_rows(
    ctx: &Ctx,
    rep: &mut Reporter,
    on_cpu0: bool,
    go: &mut Result<GoPeer, String>,
) -> Result<Option<f64>, String> {
    progress::part("local");
    let mut contenders = vec![
        ctx.weft("weft", 0, Env::Alone),
        go_contender(go, "pingpong1"),
        Contender::new("mutex-condvar-1cpu", 1, |n| {
            mutex_condvar(on_cpu0.then_some(0), n)
        }),
        Contender::new("two-fiber-switches", 1, two_fiber_switches),
    ];
    let results = measure_interleaved(ctx.opts, &mut contenders)?;
    drop(contenders);
    print_group(
        rep,
        ctx.tsc,
        "local",
        &format!(
            "one call/reply round trip, client and server green threads on worker 0 (go: \
             two goroutines, unbuffered channels, GOMAXPROCS=1; mutex-condvar-1cpu: two OS \
             threads {}, std Mutex + Condvar)",
            if on_cpu0 {
                "pinned to CPU 0"
            } else {
                "NOT pinned"
            }
        ),
        &results,
        "weft",
    );
    let weft = median_of(&results, "weft");
    if let (Some(w), Some(f)) = (weft, median_of(&results, "two-fiber-switches")) {
        rep.line(format!(
            "  floor: the two switches alone (two-fiber-switches) take {f:.2} ns; the \
             scheduling and IPC on top of them {:.2} ns",
            w - f
        ));
    }
    print_target(
        rep,
        &format!("local round trip <= {TARGET_LOCAL_NS} ns"),
        &weft.map_or("-".into(), |v| {
            format!("{v:.2} ns = {:.2}x the target", v / TARGET_LOCAL_NS)
        }),
        weft.map(|v| v <= TARGET_LOCAL_NS),
    );
    let mut line = format!(
        "  published (Fiasco-MP thesis, table 5, local IPC of Fiasco and Fiasco-MP, warm): \
         {}-{} cycles",
        group(FIASCO_LOCAL_MIN),
        group(FIASCO_LOCAL_MAX)
    );
    if let (Some(w), Some(r)) = (weft, ctx.tsc) {
        let c = w * r;
        line += &format!(
            "; weft here {} cycles: {:.1}-{:.1}x fewer",
            group(c),
            FIASCO_LOCAL_MIN / c,
            FIASCO_LOCAL_MAX / c
        );
    }
    rep.line(line);
    Ok(weft)
}

/// `n` round trips between two raw fibers on a thread of their own: each is two
/// switches of the kind a same-worker IPC round trip makes (the fiber core's owned
/// switch with the jump ending, `RawFiber::switch_to_owned_jump`), with the per-fiber
/// statistics, and nothing else: the floor under a local IPC round trip.
fn two_fiber_switches(n: u64) -> Result<Duration, String> {
    use weft_fiber::raw::RawFiber;
    std::thread::scope(|s| {
        s.spawn(move || {
            let main = weft_fiber::convert_thread().map_err(|e| e.to_string())?;
            let home = RawFiber::of_thread(&main);
            let pong = RawFiber::spawn(64 * 1024, move || loop {
                // SAFETY: `home` is the measuring thread's fiber, suspended in its loop;
                // only this thread switches to either fiber, each to the other, which
                // is suspended: the checks the switch skips hold.
                unsafe { home.switch_to_ready_jump() };
            })
            .map_err(|e| e.to_string())?;
            // SAFETY (both blocks): as above; `pong` switches straight back each time.
            // (The first switch, checked, starts it: not timed.) The switch is called
            // in the loop itself: from inside a helper, the helper's `ret` would
            // mispredict at every round, as a ping-pong's `ret`s do (fiber.rs,
            // `switch_to_owned_jump`).
            unsafe { pong.switch_to_owned_jump() }.map_err(|e| e.to_string())?;
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: pong is a fiber of this benchmark, ready and on this thread.
                unsafe { pong.switch_to_ready_jump() };
            }
            let d = t.elapsed();
            // SAFETY: `pong` is suspended (it switched back) and not used again.
            unsafe { pong.delete() };
            drop(main);
            Ok(d)
        })
        .join()
        .map_err(|p| format!("the fiber ping-pong panicked: {}", panic_text(&*p)))?
    })
}

/// Rows 2, 3 and 6: the cross-worker round trip, busy, idle and asleep, and its peers.
/// Returns weft-idle's median (ns).
fn cross_rows(
    ctx: &Ctx,
    rep: &mut Reporter,
    pinned: bool,
    go: &mut Result<GoPeer, String>,
) -> Result<Option<f64>, String> {
    progress::part("cross");
    let mut contenders = vec![
        Contender::new("raw-cacheline", 1, |n| raw_cacheline(pinned, n)),
        ctx.weft("weft-busy", 1, Env::Fillers),
        ctx.weft("weft-idle", 1, Env::Alone),
        Contender::new("mutex-condvar", 1, |n| {
            mutex_condvar(pinned.then_some(1), n)
        }),
        go_contender(go, "pingpong"),
    ];
    let mut results = measure_interleaved(ctx.opts, &mut contenders)?;
    drop(contenders);
    results.insert(3, asleep(ctx)?);
    print_group(
        rep,
        ctx.tsc,
        "cross",
        "one round trip, client green thread on worker 0, server on worker 1 (weft-busy: \
         each worker also runs a green thread yielding in a loop; weft-idle: nothing else \
         runs; weft-asleep: the client sleeps 200 us before each call, so both workers are \
         asleep when it starts, timed call by call in batches of its own; raw-cacheline: \
         two pinned threads bouncing one cache line; mutex-condvar: two OS threads on CPUs \
         0 and 1; go: GOMAXPROCS=2)",
        &results,
        "weft-busy",
    );
    let busy = median_of(&results, "weft-busy");
    print_target(
        rep,
        &format!("cross-worker round trip, busy workers, <= {TARGET_CROSS_BUSY_NS} ns"),
        &busy.map_or("-".into(), |v| {
            format!(
                "{} ns = {:.2}x the target",
                fmt_ns(v),
                v / TARGET_CROSS_BUSY_NS
            )
        }),
        busy.map(|v| v <= TARGET_CROSS_BUSY_NS),
    );
    if let Some(r) = ctx.tsc {
        let mut line = format!(
            "  published (Fiasco-MP thesis, table 4, no additional load): {} cycles cross \
             sibling, {} cross package; here",
            group(FIASCO_CROSS_SIBLING),
            group(FIASCO_CROSS_PACKAGE)
        );
        for name in ["weft-busy", "weft-idle", "weft-asleep"] {
            if let Some(v) = median_of(&results, name) {
                line += &format!(
                    " {name} {} (sibling figure / this = {:.1}x),",
                    group(v * r),
                    FIASCO_CROSS_SIBLING / (v * r)
                );
            }
        }
        rep.line(line.trim_end_matches(','));
    }
    if median_of(&results, "go").is_some() {
        rep.line(
            "  note: go's scheduler usually runs both goroutines on one P (the channel hands \
             the receiver to the sender's P), so its row is mostly not a cross-core round trip",
        );
    }
    Ok(median_of(&results, "weft-idle"))
}

/// "weft-asleep": K batches of a fixed number of calls, each after a 200 us sleep of the
/// client, timed call by call; the batch's value is its mean.
fn asleep(ctx: &Ctx) -> Result<MicroResult, String> {
    let name = "weft-asleep";
    if !ctx.two {
        return Ok(MicroResult {
            impl_name: name,
            median_ns: None,
            min_ns: f64::NAN,
            max_ns: f64::NAN,
            note: Some("needs 2 workers (1 CPU available)".into()),
        });
    }
    let calls: u64 = if ctx.opts.quick { 16 } else { 64 };
    let mut s = Vec::new();
    for k in 0..ctx.opts.repetitions() {
        progress::step(
            format_args!("{name}, batch {} of {}", k + 1, ctx.opts.repetitions()),
            k,
            ctx.opts.repetitions(),
        );
        let rt = ctx.rt;
        let took = on_worker0(rt, move || {
            let server = Server::start(1);
            let r = (|| {
                round_trip(&server.tid, 0)?;
                let mut sum = Duration::ZERO;
                for i in 1..=calls {
                    weft_runtime::sleep(ASLEEP_GAP);
                    let t = Instant::now();
                    round_trip(&server.tid, i)?;
                    sum += t.elapsed();
                }
                Ok(sum)
            })();
            server.stop().and(r)
        })?;
        s.push(took.as_nanos() as f64 / calls as f64);
    }
    let m = median(&mut s);
    Ok(MicroResult {
        impl_name: name,
        median_ns: Some(m),
        min_ns: s[0],
        max_ns: s[s.len() - 1],
        note: None,
    })
}

/// Row 4: the cross round trip while a same-worker ping-pong runs on one of the workers.
fn under_pingpong_rows(
    ctx: &Ctx,
    rep: &mut Reporter,
    idle_before: Option<f64>,
) -> Result<(), String> {
    progress::part("cross-under-pingpong");
    let mut contenders = vec![
        ctx.weft("weft", 1, Env::Alone),
        ctx.weft("weft-pingpong-on-server-worker", 1, Env::Load(1, 1)),
        ctx.weft("weft-pingpong-on-client-worker", 1, Env::Load(0, 0)),
    ];
    let results = measure_interleaved(ctx.opts, &mut contenders)?;
    drop(contenders);
    print_group(
        rep,
        ctx.tsc,
        "cross-under-pingpong",
        "the cross round trip (client on worker 0, server on worker 1) alone, and while a \
         client and a server green thread on one worker call each other in a loop, on the \
         server's worker or on the client's",
        &results,
        "weft",
    );
    if let Some(i) = idle_before {
        rep.line(format!(
            "  (weft alone = cross/weft-idle, measured again here beside the loaded rows; it \
             was {} ns above)",
            fmt_ns(i)
        ));
    }
    let base = median_of(&results, "weft");
    let mut line = format!(
        "  published (Fiasco-MP thesis, table 4, pingpong at one CPU): {} cycles cross \
         sibling ({:.2}x its no-load figure), {} cross package ({:.2}x)",
        group(FIASCO_CROSS_LOADED_SIBLING),
        FIASCO_CROSS_LOADED_SIBLING / FIASCO_CROSS_SIBLING,
        group(FIASCO_CROSS_LOADED_PACKAGE),
        FIASCO_CROSS_LOADED_PACKAGE / FIASCO_CROSS_PACKAGE
    );
    if let Some(b) = base {
        let here: Vec<String> = [
            ("weft-pingpong-on-server-worker", "on the server's worker"),
            ("weft-pingpong-on-client-worker", "on the client's worker"),
        ]
        .into_iter()
        .filter_map(|(name, what)| {
            let v = median_of(&results, name)?;
            Some(match ctx.tsc {
                Some(r) => format!("{what} {:.2}x alone ({} cycles)", v / b, group(v * r)),
                None => format!("{what} {:.2}x alone", v / b),
            })
        })
        .collect();
        if !here.is_empty() {
            line += &format!("; here: {}", here.join(", "));
        }
    }
    rep.line(line);
    Ok(())
}

/// Row 5: the local round trip alone, beside a ping-pong on the other worker, and while
/// cross-worker calls involve its worker (the Fiasco-MP thesis's 16.2, cases a-c).
fn local_under_load_rows(
    ctx: &Ctx,
    rep: &mut Reporter,
    local_before: Option<f64>,
) -> Result<(), String> {
    progress::part("local-under-load");
    let cases = [
        ("weft", Env::Alone),
        ("weft-pingpong-other-worker", Env::Load(1, 1)),
        ("weft-cross-traffic", Env::Load(1, 0)),
    ];
    let mut contenders: Vec<_> = cases
        .iter()
        .map(|&(name, env)| ctx.weft(name, 0, env))
        .collect();
    let results = measure_interleaved(ctx.opts, &mut contenders)?;
    drop(contenders);
    print_group(
        rep,
        ctx.tsc,
        "local-under-load",
        "the local round trip (client and server on worker 0): (a) alone; (b) while worker \
         1 runs a same-worker ping-pong of its own; (c) while a client on worker 1 calls a \
         server on worker 0 in a loop",
        &results,
        "weft",
    );
    if let Some(l) = local_before {
        rep.line(format!(
            "  (weft alone = local/weft, measured again here; it was {} ns above)",
            fmt_ns(l)
        ));
    }
    if ctx.tsc.is_some() {
        let samples = if ctx.opts.quick { 20_000 } else { 200_000 };
        rep.line(format!(
            "  single round trips, {samples} rdtsc samples per case (the rdtsc pair adds a \
             few tens of cycles), in cycles:"
        ));
        rep.line(format!(
            "    {:<28} {:>8} {:>8} {:>8} {:>8} {:>10} {:>14}",
            "case", "p50", "p90", "p99", "p99.9", "max", "> 4,000 cycles"
        ));
        for (k, (name, env)) in cases.into_iter().enumerate() {
            if env.needs_two() && !ctx.two {
                continue;
            }
            progress::step(format_args!("{name}, single samples"), k, cases.len());
            let rt = ctx.rt;
            let mut s = on_worker0_vec(rt, move || sample_local(samples, env))?;
            s.sort_unstable();
            let q = |p: f64| s[((s.len() - 1) as f64 * p) as usize];
            let over = s.iter().filter(|&&c| c > 4000).count();
            rep.line(format!(
                "    {:<28} {:>8} {:>8} {:>8} {:>8} {:>10} {:>13.3}%",
                name,
                group(q(0.5) as f64),
                group(q(0.9) as f64),
                group(q(0.99) as f64),
                group(q(0.999) as f64),
                group(s[s.len() - 1] as f64),
                100.0 * over as f64 / s.len() as f64
            ));
        }
        rep.line(format!(
            "  published (Fiasco-MP thesis, 16.2, figures 16-17): local IPC samples \
             interrupted by a cross-processor send request peak at {}-{} cycles; \
             uninterrupted ones are table 5's {}-{}",
            group(FIASCO_LOCAL_INTERRUPTED.0),
            group(FIASCO_LOCAL_INTERRUPTED.1),
            group(FIASCO_LOCAL_MIN),
            group(FIASCO_LOCAL_MAX)
        ));
    }
    Ok(())
}

/// What runs beside the measured pair.
#[derive(Clone, Copy)]
enum Env {
    /// Nothing.
    Alone,
    /// A green thread yielding in a loop on each of workers 0 and 1.
    Fillers,
    /// An IPC ping-pong: a client on the first worker calling a server on the second.
    Load(usize, usize),
}

impl Env {
    fn needs_two(self) -> bool {
        match self {
            Env::Alone => false,
            Env::Fillers => true,
            Env::Load(c, s) => c == 1 || s == 1,
        }
    }
}

/// The measured pair's server, or one of a load.
struct Server {
    tid: Tid,
    handle: JoinHandle<Result<(), String>>,
}

impl Server {
    /// Starts a server on `worker` of the caller's runtime and waits until it runs.
    ///
    /// (A call to a thread that has not started yet waits for it with a short timed
    /// park, and timers do not fire on a worker where two green threads keep handing
    /// off to each other with no mail arriving: see the runtime's `switch_away_to`. So
    /// the first call of a client sharing its worker with a load pair could hang.)
    fn start(worker: usize) -> Server {
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let handle = spawn_on(worker, move || {
            s.store(true, Release);
            serve()
        });
        while !started.load(Acquire) && !handle.is_finished() {
            yield_now();
        }
        Server {
            tid: handle.tid(),
            handle,
        }
    }

    /// Ends the server (it answers STOP, then returns) and joins it.
    fn stop(self) -> Result<(), String> {
        let r = ipc::call(&self.tid, Message::word(STOP), Timeout::Never)
            .map(|_| ())
            .map_err(|e| format!("stopping the server: {e}"));
        let joined = self
            .handle
            .join()
            .map_err(|p| format!("a server panicked: {}", panic_text(&*p)))?;
        joined.and(r)
    }
}

/// The server loop: replies word + 1 to each request; STOP ends it after its reply.
fn serve() -> Result<(), String> {
    let (mut client, mut req) =
        ipc::receive(None, Timeout::Never).map_err(|e| format!("server: {e}"))?;
    loop {
        let w = req.words[0];
        let reply = Message::word(w.wrapping_add(1));
        if w == STOP {
            return ipc::send(&client, reply, Timeout::Zero)
                .map_err(|e| format!("server: the last reply: {e}"));
        }
        (client, req) = ipc::reply_and_wait(&client, reply, Timeout::Never)
            .map_err(|e| format!("server: {e}"))?;
    }
}

/// One call with word `i`, checking the reply.
#[inline]
fn round_trip(server: &Tid, i: u64) -> Result<(), String> {
    let r =
        ipc::call(server, Message::word(i), Timeout::Never).map_err(|e| format!("client: {e}"))?;
    if r.words[0] != i.wrapping_add(1) {
        return Err(format!("client: reply {} to request {i}", r.words[0]));
    }
    Ok(())
}

/// What runs beside the measured pair, started and stopped by the client.
struct Beside {
    stop: Arc<AtomicBool>,
    fillers: Vec<JoinHandle<()>>,
    /// The load's client (it stops its server before it returns).
    load: Option<JoinHandle<Result<(), String>>>,
}

impl Beside {
    /// Starts `env` and waits until it runs.
    fn start(env: Env) -> Beside {
        let stop = Arc::new(AtomicBool::new(false));
        let mut b = Beside {
            stop: stop.clone(),
            fillers: Vec::new(),
            load: None,
        };
        match env {
            Env::Alone => {}
            Env::Fillers => {
                b.fillers = (0..2)
                    .map(|w| {
                        let stop = stop.clone();
                        spawn_on(w, move || {
                            while !stop.load(Relaxed) {
                                yield_now();
                            }
                        })
                    })
                    .collect()
            }
            Env::Load(cw, sw) => {
                let done = Arc::new(AtomicU64::new(0));
                let d = done.clone();
                let client = spawn_on(cw, move || {
                    let server = Server::start(sw);
                    let r = (|| {
                        let mut i = 0;
                        while !stop.load(Relaxed) {
                            round_trip(&server.tid, i)?;
                            i += 1;
                            d.store(i, Relaxed);
                        }
                        Ok(())
                    })();
                    server.stop().and(r)
                });
                // Wait until the load's round trips run.
                while done.load(Relaxed) < 100 && !client.is_finished() {
                    yield_now();
                }
                b.load = Some(client);
            }
        }
        b
    }

    /// Stops it and joins its threads.
    fn stop(self) -> Result<(), String> {
        self.stop.store(true, Relaxed);
        let mut r = Ok(());
        for f in self.fillers {
            if let Err(p) = f.join() {
                r = Err(format!(
                    "a yielding green thread panicked: {}",
                    panic_text(&*p)
                ));
            }
        }
        if let Some(client) = self.load {
            let l = client
                .join()
                .map_err(|p| format!("the load's client panicked: {}", panic_text(&*p)))
                .and_then(|l| l.map_err(|e| format!("the load: {e}")));
            r = r.and(l);
        }
        r
    }
}

/// One batch of `n` round trips from a client on worker 0 to a server on `server`, with
/// `env` running beside them.
fn ipc_batch(rt: &Runtime, n: u64, server: usize, env: Env) -> Result<Duration, String> {
    on_worker0(rt, move || {
        let beside = Beside::start(env);
        let s = Server::start(server);
        let r = (|| {
            round_trip(&s.tid, 0)?; // the server has started
            let t = Instant::now();
            for i in 1..=n {
                round_trip(&s.tid, i)?;
            }
            Ok(t.elapsed())
        })();
        let stopped = s.stop();
        let r = beside.stop().and(stopped).and(r)?;
        if weft_runtime::current_worker() != Some(0) {
            return Err("the client left worker 0".into());
        }
        Ok(r)
    })
}

/// Runs `f` on worker 0 of `rt` and returns its samples.
fn on_worker0_vec(
    rt: &Runtime,
    f: impl FnOnce() -> Result<Vec<u64>, String> + Send + 'static,
) -> Result<Vec<u64>, String> {
    rt.spawn_on(0, f)
        .join()
        .map_err(|p| format!("the sampling green thread panicked: {}", panic_text(&*p)))?
}

/// `samples` local round trips on worker 0, each timed with rdtsc, with `env` beside.
fn sample_local(samples: usize, env: Env) -> Result<Vec<u64>, String> {
    let beside = Beside::start(env);
    let s = Server::start(0);
    let mut out = Vec::with_capacity(samples);
    let r = (|| {
        for i in 0..1000 {
            round_trip(&s.tid, i)?; // warm-up
        }
        for i in 0..samples as u64 {
            let t0 = ticks();
            round_trip(&s.tid, i)?;
            out.push(ticks().wrapping_sub(t0));
        }
        Ok(())
    })();
    let stopped = s.stop();
    beside.stop().and(stopped).and(r)?;
    Ok(out)
}

/// The time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ticks() -> u64 {
    // SAFETY: rdtsc exists on every x86_64 CPU and has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    0
}

/// TSC ticks per nanosecond, measured against `Instant` (CLOCK_MONOTONIC) over 20 ms
/// (5 ms with `--quick`); None without rdtsc.
fn tsc_per_ns(opts: &Options) -> Option<f64> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    let span = Duration::from_millis(if opts.quick { 5 } else { 20 });
    // The tightest (ticks, instant) pair of a few tries.
    let pair = || {
        (0..8)
            .map(|_| {
                let a = ticks();
                let t = Instant::now();
                let b = ticks();
                (b.wrapping_sub(a), a + (b.wrapping_sub(a)) / 2, t)
            })
            .min_by_key(|p| p.0)
            .map(|(_, c, t)| (c, t))
            .expect("8 tries")
    };
    let (c0, t0) = pair();
    while t0.elapsed() < span {
        std::hint::spin_loop();
    }
    let (c1, t1) = pair();
    Some(c1.wrapping_sub(c0) as f64 / (t1 - t0).as_nanos() as f64)
}

/// Prints a group (title; per implementation the median ns, min..max over the batches,
/// the median in cycles and the ratio to `reference`) and emits its JSON lines: one in
/// ns and, with rdtsc, one in cycles per measured row.
fn print_group(
    rep: &mut Reporter,
    tsc: Option<f64>,
    name: &str,
    title: &str,
    results: &[MicroResult],
    reference: &str,
) {
    let base = median_of(results, reference);
    rep.line("");
    rep.line(format!("{name}: {title}"));
    rep.line(format!(
        "  {:<32} {:>10} {:>22} {:>10} {:>12}",
        "impl",
        "median ns",
        "min..max ns",
        "cycles",
        format!("/ {reference}")
    ));
    for r in results {
        let mut emit = |value: Option<f64>, unit: &'static str| {
            rep.emit(&Measurement {
                suite: Suite::Ipc.name(),
                name: name.to_string(),
                impl_name: r.impl_name.to_string(),
                value,
                unit,
                note: r.note.clone(),
            })
        };
        emit(r.median_ns, "ns");
        if let Some(k) = tsc {
            emit(r.median_ns.map(|v| v * k), "cycles");
        }
        match r.median_ns {
            Some(v) => rep.line(format!(
                "  {:<32} {:>10} {:>22} {:>10} {:>12}",
                r.impl_name,
                fmt_ns(v),
                format!("{}..{}", fmt_ns(r.min_ns), fmt_ns(r.max_ns)),
                tsc.map_or("-".into(), |k| group(v * k)),
                base.filter(|b| *b > 0.0)
                    .map_or("-".into(), |b| format!("{:.2}", v / b))
            )),
            None => rep.line(format!(
                "  {:<32} {:>10}   ({})",
                r.impl_name,
                "-",
                r.note.as_deref().unwrap_or("not measured")
            )),
        }
    }
}
