//! The `runtime` suite of `weft bench`: what the runtime's green threads cost, side by
//! side with the usual alternatives, in one run.
//!
//! Micro benchmarks (method: see `bench/mod.rs`; ns per operation):
//!
//! * `cross-worker`: one round trip between two CPUs:
//!   * "raw-cacheline": the hardware floor, two pinned threads bouncing a value
//!     through one cache line by spinning on it;
//!   * "msgbox-spin" / "msgbox-wait": a message to the other worker through weft's
//!     message-box matrix and a reply back, both sides polling (busy workers: spin on
//!     `has_mail()`, then `poll()`) or calling `wait()` between messages (a spin of up
//!     to 20 us, then sleep on the doorbell);
//!   * "mutex-condvar": the usual futex-based hand-off (std's Mutex and Condvar);
//!   * "weft": green thread A on worker 0 unparks green thread B on worker 1 and parks;
//!     B does the reverse (`Unparker`/`park`). Nothing else runs, so each worker goes
//!     idle (spins briefly, then sleeps) between messages;
//!   * "weft-busy": the same while each worker also runs a green thread that yields in
//!     a loop, so the workers never sleep;
//!   * "go": two goroutines, unbuffered channels, GOMAXPROCS=2 (`peers/gopeer.go`).
//! * `spawn`: spawn + run + join of an empty green thread, timed from inside a green
//!   thread: "weft" on the default runtime (one worker per CPU), "weft-1-worker" on a
//!   runtime of one worker; vs "pthread" (pthread_create + pthread_join, from C) and
//!   "go" (`go func(){ wg.Done() }()` + `wg.Wait()`). "-no-runtime" rows: the same
//!   with the fiber core's per-fiber run-time accounting (an `rdtsc` per switch) off.
//! * `yield`: one yield between two green threads on one worker (`yield_now`) vs
//!   "weft-no-runtime" (the same without run-time accounting), "go"
//!   (`runtime.Gosched`, GOMAXPROCS=1) and "pthread-sched-yield" (two threads
//!   pinned to one CPU calling `sched_yield`).
//!
//! Then `parked`: N green threads (`--parked N`, default [`DEFAULT_PARKED`],
//! [`DEFAULT_PARKED_QUICK`] with `--quick`) with default stacks, spawned across the
//! workers in batches, each parked forever: resident memory (VmRSS) per thread and in
//! total, and how long the shutdown that unwinds them takes. Each stack is two mappings
//! (stack + guard), so this first checks `vm.max_map_count`. The default sizes fit the
//! kernel's default limit (65,530) and change nothing; the full measurement, a million
//! (about 4 GiB), runs only when asked for with `--parked 1000000`: as root it then
//! raises `vm.max_map_count` for the run (and restores it), without root it clamps N
//! to what the limit allows and says so. A default that does not fit (a lower limit)
//! is clamped, never raised.
//!
//! Targets: spawn <= 200 ns, yield <= 30 ns, a cross-worker round trip within
//! 2x of the raw cache-line one with busy workers and no worse than a futex round trip
//! with sleeping ones, 1M parked threads in < 4 GiB. Reference figures quoted with
//! those targets (measured on another machine, not here): Go spawn ~590 ns, pthread
//! create + join ~60 us.

use super::gopeer::GoPeer;
use super::progress::{self, Part};
use super::{
    measure_interleaved, median_of, peers, print_micro_table, print_target, Contender, Measurement,
    MicroResult, Options, Reporter, Suite,
};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Barrier, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};
use weft_runtime::msgbox::{matrix, Endpoint};
use weft_runtime::park::{park, Unparker};
use weft_runtime::{current_worker, spawn, spawn_on, yield_now, Runtime};

/// Reference figures set beside the targets (measured on another machine, not here).
const REFERENCE_GO_SPAWN_NS: f64 = 590.0;
const REFERENCE_PTHREAD_CREATE_JOIN_NS: f64 = 60_000.0;

/// The targets the runtime is held to (printed beside the results).
const TARGET_SPAWN_NS: f64 = 200.0;
const TARGET_YIELD_NS: f64 = 30.0;
const TARGET_PARKED_1M_BYTES: f64 = 4.0 * (1u64 << 30) as f64;

/// `parked`'s default counts: their mappings fit the kernel's default
/// `vm.max_map_count` (65,530).
pub const DEFAULT_PARKED: usize = 20_000;
pub const DEFAULT_PARKED_QUICK: usize = 2_000;

/// How many parked green threads this run creates (before the mapping limit).
fn parked_count(opts: &Options) -> usize {
    opts.parked.unwrap_or(if opts.quick {
        DEFAULT_PARKED_QUICK
    } else {
        DEFAULT_PARKED
    })
}

/// The suite's parts for the progress line, with estimated seconds.
pub fn parts(opts: &Options) -> Vec<Part> {
    vec![
        Part::micro("cross-worker", opts, 7),
        Part::micro("spawn", opts, 5),
        Part::micro("yield", opts, 4),
        Part::micro("hooked-call", opts, 4),
        Part::new("tcp-echo", super::echo::estimate(opts.quick)),
        // Connecting and serving each connection once, twice over.
        Part::new("connections-memory", 2.0 * hooked_conns(opts) as f64 * 1e-4),
        // Spawn and shutdown take a few microseconds a thread.
        Part::new("parked", 0.2 + parked_count(opts) as f64 * 5e-6),
    ]
}

pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Everything that starts threads of its own (the runtimes, whose workers pin
    // themselves, and the Go peer) starts before this thread pins itself to CPU 0:
    // threads inherit their creator's CPU mask.
    let all_cpus = affinity();
    let mut go = GoPeer::start();
    let rt1 = Runtime::builder()
        .workers(1)
        .build()
        .map_err(|e| format!("cannot start a weft runtime of 1 worker: {e}"))?;
    let rtd = Runtime::new().map_err(|e| format!("cannot start the default weft runtime: {e}"))?;
    let on_cpu0 = pin(0);
    let pinned = cpus >= 2 && on_cpu0;
    rep.line("");
    rep.line(if pinned {
        "threads pinned to CPUs 0 and 1; each batch starts its own partner thread".to_string()
    } else {
        format!("threads NOT pinned ({cpus} CPU(s) available): round trips include scheduling")
    });
    rep.line(match &go {
        Ok(g) => format!("go peer: {}", g.description),
        Err(why) => format!("go peer: {why}: the go rows are skipped"),
    });
    rep.line(format!(
        "weft runtimes: one of 1 worker, and the default one ({} workers, pinned); \
         green-thread rows are timed from inside a green thread",
        rtd.workers()
    ));
    cross_worker_rows(opts, rep, pinned, &rtd, &mut go)?;
    spawn_rows(opts, rep, &rt1, &rtd, &mut go)?;
    yield_rows(opts, rep, on_cpu0, &rt1, &mut go)?;
    hooked_call_rows(opts, rep)?;
    drop(go);
    drop(rt1);
    drop(rtd);
    if let Some(set) = all_cpus {
        set_affinity(&set);
    }
    super::echo::run(rep, opts.quick)?;
    progress::part("connections-memory");
    super::hooked::memory(rep, hooked_conns(opts))?;
    parked_rows(opts, rep)
}

/// The Go contender for `test`, or why there is none.
fn go_contender<'a>(
    go: &'a mut Result<GoPeer, String>,
    test: &'static str,
    ops_per_iter: u64,
) -> Contender<'a> {
    match go {
        Ok(g) => Contender::new("go", ops_per_iter, move |n| g.run(test, n)),
        Err(why) => Contender::unavailable("go", why.clone()),
    }
}

fn cross_worker_rows(
    opts: &Options,
    rep: &mut Reporter,
    pinned: bool,
    rt: &Runtime,
    go: &mut Result<GoPeer, String>,
) -> Result<(), String> {
    progress::part("cross-worker");
    let two = rt.workers() >= 2;
    let green = |busy: bool| {
        if two {
            Contender::new(if busy { "weft-busy" } else { "weft" }, 1, move |n| {
                green_pingpong(rt, n, busy)
            })
        } else {
            Contender::unavailable(
                if busy { "weft-busy" } else { "weft" },
                "needs 2 workers (1 CPU available)",
            )
        }
    };
    let mut contenders = vec![
        Contender::new("raw-cacheline", 1, |n| raw_cacheline(pinned, n)),
        Contender::new("msgbox-spin", 1, |n| msgbox(pinned, n, false)),
        Contender::new("msgbox-wait", 1, |n| msgbox(pinned, n, true)),
        Contender::new("mutex-condvar", 1, |n| {
            mutex_condvar(pinned.then_some(1), n)
        }),
        green(false),
        green(true),
        go_contender(go, "pingpong", 1),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    drop(contenders);
    print_micro_table(
        rep,
        Suite::Runtime,
        "cross-worker",
        "one round trip between two threads on two CPUs (weft: green threads on workers 0 \
         and 1, unpark + park; weft-busy: each worker also runs a yielding green thread)",
        &results,
    );
    let raw = median_of(&results, "raw-cacheline");
    let spin = median_of(&results, "msgbox-spin");
    let sleep = median_of(&results, "msgbox-wait");
    let futex = median_of(&results, "mutex-condvar");
    let weft = median_of(&results, "weft");
    let busy = median_of(&results, "weft-busy");
    if let (Some(raw), Some(spin)) = (raw, spin) {
        print_target(
            rep,
            "busy workers: message-box round trip within 2x of the raw cache-line round trip",
            &format!("{:.2}x", spin / raw),
            Some(spin <= 2.0 * raw),
        );
    }
    if let (Some(futex), Some(sleep)) = (futex, sleep) {
        print_target(
            rep,
            "idle workers: message-box round trip (wait) no worse than a futex round trip",
            &format!("{:.2}x", sleep / futex),
            Some(sleep <= futex),
        );
    }
    if let Some(raw) = raw {
        print_target(
            rep,
            "busy workers: green-thread round trip (weft-busy) within 2x of raw-cacheline",
            &busy.map_or("-".into(), |b| format!("{:.2} ns = {:.2}x", b, b / raw)),
            busy.map(|b| b <= 2.0 * raw),
        );
        if let Some(w) = weft {
            rep.line(format!(
                "  (idle workers: green-thread round trip (weft) = {:.2}x raw-cacheline; no \
                 target)",
                w / raw
            ));
        }
    }
    if let Some(futex) = futex {
        print_target(
            rep,
            "sleeping workers: green-thread round trip (weft) no worse than a futex round trip",
            &weft.map_or("-".into(), |w| {
                format!("{:.2}x of mutex-condvar", w / futex)
            }),
            weft.map(|w| w <= futex),
        );
    }
    if median_of(&results, "go").is_some() {
        rep.line(
            "  note: go's scheduler usually runs both goroutines on one P (the channel hands \
             the receiver to the sender's P), so its row is mostly not a cross-core round trip",
        );
    }
    Ok(())
}

fn spawn_rows(
    opts: &Options,
    rep: &mut Reporter,
    rt1: &Runtime,
    rtd: &Runtime,
    go: &mut Result<GoPeer, String>,
) -> Result<(), String> {
    progress::part("spawn");
    let mut contenders = vec![
        Contender::new("weft", 1, |n| green_spawn(rtd, n)),
        Contender::new("weft-1-worker", 1, |n| green_spawn(rt1, n)),
        Contender::new("weft-1w-no-runtime", 1, |n| {
            without_run_time(|| green_spawn(rt1, n))
        }),
        Contender::new("pthread", 1, peers::pthread_create_join),
        go_contender(go, "spawn", 1),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    drop(contenders);
    print_micro_table(
        rep,
        Suite::Runtime,
        "spawn",
        "spawn + run + join of an empty green thread (weft: default runtime; weft-1-worker: \
         a runtime of 1 worker; weft-1w-no-runtime: the same without per-fiber run-time \
         accounting; pthread: create + join; go: go func + WaitGroup)",
        &results,
    );
    for name in ["weft", "weft-1-worker"] {
        let v = median_of(&results, name);
        print_target(
            rep,
            &format!("{name} spawn + run + join <= {TARGET_SPAWN_NS} ns"),
            &v.map_or("-".into(), |v| format!("{v:.2} ns")),
            v.map(|v| v <= TARGET_SPAWN_NS),
        );
    }
    reference_line(rep, &results, "go", "go spawn", REFERENCE_GO_SPAWN_NS);
    reference_line(
        rep,
        &results,
        "pthread",
        "pthread create + join",
        REFERENCE_PTHREAD_CREATE_JOIN_NS,
    );
    Ok(())
}

/// "reference (...): <what> ~X ns on another machine; here Y ns; reference / weft here
/// = Z x".
fn reference_line(
    rep: &mut Reporter,
    results: &[MicroResult],
    name: &str,
    what: &str,
    reference: f64,
) {
    let here = median_of(results, name);
    let weft = median_of(results, "weft");
    let mut line = format!(
        "  reference (quoted with the targets, measured on another machine): {what} ~{} ns",
        fmt_big(reference)
    );
    if let Some(h) = here {
        line += &format!("; here {} ns", fmt_big(h));
    }
    if let Some(w) = weft {
        line += &format!("; reference / weft here = {:.1}x", reference / w);
    }
    rep.line(line);
}

fn fmt_big(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn yield_rows(
    opts: &Options,
    rep: &mut Reporter,
    on_cpu0: bool,
    rt1: &Runtime,
    go: &mut Result<GoPeer, String>,
) -> Result<(), String> {
    progress::part("yield");
    let mut contenders = vec![
        Contender::new("weft", 2, |n| green_yield(rt1, n)),
        Contender::new("weft-no-runtime", 2, |n| {
            without_run_time(|| green_yield(rt1, n))
        }),
        go_contender(go, "yield", 2),
        Contender::new("pthread-sched-yield", 2, |n| pthread_yield(on_cpu0, n)),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    drop(contenders);
    print_micro_table(
        rep,
        Suite::Runtime,
        "yield",
        &format!(
            "one yield between two green threads on one worker (weft-no-runtime: without \
             per-fiber run-time accounting; go: Gosched, GOMAXPROCS=1; pthread: \
             sched_yield, two threads {})",
            if on_cpu0 {
                "pinned to CPU 0"
            } else {
                "NOT pinned"
            }
        ),
        &results,
    );
    let v = median_of(&results, "weft");
    print_target(
        rep,
        &format!("weft yield <= {TARGET_YIELD_NS} ns"),
        &v.map_or("-".into(), |v| format!("{v:.2} ns")),
        v.map(|v| v <= TARGET_YIELD_NS),
    );
    Ok(())
}

/// Runs `f` with the fiber core's per-fiber run-time accounting (one `rdtsc` per
/// switch) turned off, as `WEFT_RUN_TIME=off` would: the "-no-runtime" rows show what it
/// costs.
fn without_run_time<T>(f: impl FnOnce() -> T) -> T {
    weft_fiber::set_run_time_accounting(false);
    let r = f();
    weft_fiber::set_run_time_accounting(true);
    r
}

/// How many idle connections `connections-memory` holds.
fn hooked_conns(opts: &Options) -> usize {
    if opts.quick {
        1_000
    } else {
        10_000
    }
}

/// The system-call layer's target: a covered call made off a green thread costs at most
/// this much more than the C library's.
const TARGET_HOOKED_CALL_NS: f64 = 2.0;

/// `hooked-call`: covered calls off green threads, through the C library's own function
/// and through the layer's (this binary links weft-hook, whose functions test the
/// thread word and call the C library's). `clock_nanosleep` on a CPU-time clock fails
/// in the C library without entering the kernel, so its pair shows the layer's cost
/// alone (the target's figure); `read(-1, buf, 0)` shows it beside a system call
/// (the kernel says EBADF), whose own spread is larger than the difference.
fn hooked_call_rows(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("hooked-call");
    let libc_read = super::hooked::libc_read();
    let libc_clock = super::hooked::libc_clock_nanosleep();
    let mut buf = [0u8; 1];
    let p: *mut libc::c_void = buf.as_mut_ptr().cast();
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1,
    };
    let t: *const libc::timespec = &ts;
    let cpu = libc::CLOCK_THREAD_CPUTIME_ID;
    let mut contenders = vec![
        Contender::new("libc", 1, move |n| {
            let s = Instant::now();
            for _ in 0..n {
                // SAFETY: a relative sleep on the thread's CPU clock, which the C
                // library refuses (EINVAL); the timespec outlives the call.
                black_box(unsafe { libc_clock(black_box(cpu), 0, t, core::ptr::null_mut()) });
            }
            Ok(s.elapsed())
        }),
        Contender::new("weft-hooked", 1, move |n| {
            let s = Instant::now();
            for _ in 0..n {
                // SAFETY: as above; `clock_nanosleep` is weft-hook's here.
                black_box(unsafe {
                    libc::clock_nanosleep(black_box(cpu), 0, t, core::ptr::null_mut())
                });
            }
            Ok(s.elapsed())
        }),
        Contender::new("libc-read", 1, move |n| {
            let s = Instant::now();
            for _ in 0..n {
                // SAFETY: a zero-length read of a descriptor that is not open.
                black_box(unsafe { libc_read(black_box(-1), p, 0) });
            }
            Ok(s.elapsed())
        }),
        Contender::new("weft-hooked-read", 1, move |n| {
            let s = Instant::now();
            for _ in 0..n {
                // SAFETY: as above; `read` is weft-hook's here.
                black_box(unsafe { libc::read(black_box(-1), p, 0) });
            }
            Ok(s.elapsed())
        }),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    drop(contenders);
    print_micro_table(
        rep,
        Suite::Runtime,
        "hooked-call",
        "covered calls off green threads, the C library's and weft-hook's (one thread-local \
         test, then the C library's): clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, ..) \
         (EINVAL in the C library, no system call) and, -read, read(-1, buf, 0) (EBADF \
         from the kernel)",
        &results,
    );
    let diff = |a: &str, b: &str| Some(median_of(&results, b)? - median_of(&results, a)?);
    if let Some(d) = diff("libc-read", "weft-hooked-read") {
        rep.line(format!(
            "  read(-1): weft-hooked {d:+.2} ns beside libc (a system call's spread)"
        ));
    }
    if let Some(d) = diff("libc", "weft-hooked") {
        print_target(
            rep,
            &format!(
                "a covered call off a green thread costs at most {TARGET_HOOKED_CALL_NS} ns \
                 more than the C library's"
            ),
            &format!("{d:+.2} ns"),
            Some(d <= TARGET_HOOKED_CALL_NS),
        );
    }
    Ok(())
}

/// A green thread's panic payload as text.
pub(super) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a green thread panicked".into())
}

/// Runs `f` on worker 0 of `rt` and returns its result.
pub(super) fn on_worker0(
    rt: &Runtime,
    f: impl FnOnce() -> Result<Duration, String> + Send + 'static,
) -> Result<Duration, String> {
    rt.spawn_on(0, f)
        .join()
        .map_err(|p| format!("the timing green thread panicked: {}", panic_text(&*p)))?
}

/// `n` times: spawn an empty green thread and join it, from a green thread on worker 0.
fn green_spawn(rt: &Runtime, n: u64) -> Result<Duration, String> {
    on_worker0(rt, move || {
        let t = Instant::now();
        for _ in 0..n {
            spawn(|| black_box(()))
                .join()
                .map_err(|p| format!("an empty green thread panicked: {}", panic_text(&*p)))?;
        }
        Ok(t.elapsed())
    })
}

/// Two green threads on worker 0 yielding `n` times each (2n yields).
fn green_yield(rt: &Runtime, n: u64) -> Result<Duration, String> {
    on_worker0(rt, move || {
        let t = Instant::now();
        let other = spawn(move || {
            for _ in 0..n {
                yield_now();
            }
            current_worker()
        });
        for _ in 0..n {
            yield_now();
        }
        let w = other
            .join()
            .map_err(|p| format!("the yielding partner panicked: {}", panic_text(&*p)))?;
        let took = t.elapsed();
        if w != current_worker() {
            return Err(format!(
                "the yielding partner ran on worker {w:?}, not on {:?}",
                current_worker()
            ));
        }
        Ok(took)
    })
}

/// Two threads calling `sched_yield` `n` times each, on CPU 0 (when `on_cpu0`: the
/// calling thread is already pinned there).
fn pthread_yield(on_cpu0: bool, n: u64) -> Result<Duration, String> {
    let go = Arc::new(Barrier::new(2));
    let g2 = go.clone();
    let h = std::thread::spawn(move || {
        if on_cpu0 {
            pin(0);
        }
        g2.wait();
        for _ in 0..n {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    });
    go.wait();
    let t = Instant::now();
    for _ in 0..n {
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    h.join()
        .map_err(|_| "the sched_yield partner panicked".to_string())?;
    Ok(t.elapsed())
}

/// The ball's value that ends a green ping-pong.
const STOP: u64 = u64::MAX;

/// `n` round trips between green thread A on worker 0 and B on worker 1: A sets the
/// ball to an odd value and unparks B, then parks until B has answered with the next
/// even value and unparked A. With `busy`, each worker also runs a green thread that
/// yields in a loop, so neither worker ever goes idle.
fn green_pingpong(rt: &Runtime, n: u64, busy: bool) -> Result<Duration, String> {
    on_worker0(rt, move || {
        let ball = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let spinners: Vec<_> = if busy {
            (0..2)
                .map(|w| {
                    let stop = stop.clone();
                    spawn_on(w, move || {
                        while !stop.load(Relaxed) {
                            yield_now();
                        }
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let slot = Arc::new(OnceLock::<Unparker>::new());
        let a = Unparker::current();
        let (b_ball, b_slot) = (ball.clone(), slot.clone());
        let b = spawn_on(1, move || {
            let _ = b_slot.set(Unparker::current());
            a.unpark();
            let mut expect = 1;
            loop {
                let v = b_ball.load(Acquire);
                if v == STOP {
                    break;
                }
                if v == expect {
                    b_ball.store(expect + 1, Release);
                    a.unpark();
                    expect += 2;
                } else {
                    park();
                }
            }
            current_worker()
        });
        let ub = loop {
            if let Some(u) = slot.get() {
                break u.clone();
            }
            park();
        };
        let t = Instant::now();
        for i in 0..n {
            ball.store(2 * i + 1, Release);
            ub.unpark();
            while ball.load(Acquire) != 2 * i + 2 {
                park();
            }
        }
        let took = t.elapsed();
        ball.store(STOP, Release);
        ub.unpark();
        let b_on = b
            .join()
            .map_err(|p| format!("green thread B panicked: {}", panic_text(&*p)))?;
        stop.store(true, Relaxed);
        for s in spinners {
            s.join()
                .map_err(|p| format!("a spinning green thread panicked: {}", panic_text(&*p)))?;
        }
        if b_on != Some(1) || current_worker() != Some(0) {
            return Err(format!(
                "the ping-pong ran on workers {:?} and {b_on:?}, not 0 and 1",
                current_worker()
            ));
        }
        Ok(took)
    })
}

/// Runs one batch: starts `partner` on CPU `partner_cpu` (None: not pinned; it must
/// return when `stop` is set, after `wake` is called), waits until it runs, times
/// `main`, then stops the partner.
fn with_partner(
    partner_cpu: Option<usize>,
    partner: impl FnOnce(&AtomicBool) + Send + 'static,
    main: impl FnOnce() -> Duration,
    wake: impl FnOnce(),
) -> Result<Duration, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (s, r) = (stop.clone(), ready.clone());
    let h = std::thread::spawn(move || {
        if let Some(cpu) = partner_cpu {
            pin(cpu);
        }
        r.store(true, Release);
        partner(&s);
    });
    while !ready.load(Acquire) {
        std::hint::spin_loop();
    }
    let took = main();
    stop.store(true, Release);
    wake();
    h.join()
        .map_err(|_| "the partner thread panicked".to_string())?;
    Ok(took)
}

/// Two threads bouncing a value through one cache line: the hardware floor.
pub(super) fn raw_cacheline(pinned: bool, n: u64) -> Result<Duration, String> {
    let ball = Arc::new(AtomicU64::new(0));
    let b = ball.clone();
    with_partner(
        pinned.then_some(1),
        move |stop| {
            let mut expect = 1u64;
            while !stop.load(Relaxed) {
                if b.load(Acquire) == expect {
                    b.store(expect + 1, Release);
                    expect += 2;
                } else {
                    std::hint::spin_loop();
                }
            }
        },
        || {
            let t = Instant::now();
            for i in 0..n {
                ball.store(2 * i + 1, Release);
                while ball.load(Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            t.elapsed()
        },
        || {},
    )
}

/// A message to the partner worker through the matrix and the reply back; both sides
/// busy-poll (spin on `has_mail`, then `poll`, as a busy worker looks at every pick),
/// or wait (`Endpoint::wait`: a short spin, then sleep on the doorbell) between
/// messages.
fn msgbox(pinned: bool, n: u64, sleep: bool) -> Result<Duration, String> {
    let mut e =
        matrix::<u64>(2, 64).map_err(|e| format!("cannot create the message boxes: {e}"))?;
    let mut partner = e.pop().expect("two endpoints");
    let mut me = e.pop().expect("two endpoints");
    let waker = Arc::new(Mutex::new(None::<Endpoint<u64>>));
    with_partner(
        pinned.then_some(1),
        move |stop| {
            let mut got = Vec::new();
            while !stop.load(Relaxed) {
                partner.poll(|_, m| got.push(m));
                for m in got.drain(..) {
                    partner.send(0, m);
                }
                if sleep {
                    partner.wait(None);
                } else {
                    // As a busy worker does between picks: look, poll when mail is there.
                    while !partner.has_mail() && !stop.load(Relaxed) {
                        std::hint::spin_loop();
                    }
                }
            }
        },
        || {
            let t = Instant::now();
            for i in 0..n {
                me.send(1, i);
                let mut back = false;
                while !back {
                    me.poll(|_, m| back = m == i);
                    if !back {
                        if sleep {
                            me.wait(None);
                        } else {
                            while !me.has_mail() {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }
            }
            let took = t.elapsed();
            *waker.lock().unwrap() = Some(me);
            took
        },
        || {
            if let Some(me) = waker.lock().unwrap().as_ref() {
                me.wake(1);
            }
        },
    )
}

/// The futex-based hand-off: a turn counter under std's Mutex, waited on with Condvar,
/// the partner thread pinned to `partner_cpu` (the calling thread stays where it is).
pub(super) fn mutex_condvar(partner_cpu: Option<usize>, n: u64) -> Result<Duration, String> {
    let turn = Arc::new((Mutex::new(0u64), Condvar::new()));
    let (t2, t3) = (turn.clone(), turn.clone());
    with_partner(
        partner_cpu,
        move |stop| {
            let (m, cv) = &*t2;
            let mut g = m.lock().unwrap();
            loop {
                while *g % 2 == 0 && !stop.load(Acquire) {
                    g = cv.wait(g).unwrap();
                }
                if stop.load(Acquire) {
                    return;
                }
                *g += 1;
                cv.notify_one();
            }
        },
        || {
            let (m, cv) = &*turn;
            let t = Instant::now();
            for _ in 0..n {
                let mut g = m.lock().unwrap();
                *g += 1;
                cv.notify_one();
                while *g % 2 == 1 {
                    g = cv.wait(g).unwrap();
                }
            }
            t.elapsed()
        },
        move || {
            let _g = t3.0.lock().unwrap();
            t3.1.notify_all();
        },
    )
}

/// Pins the calling thread to `cpu`; false if the system refuses.
pub(super) fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET sets one bit of it
    // (it ignores CPUs beyond the set's size).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    set_affinity(&set)
}

/// The calling thread's CPU mask.
pub(super) fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is valid; the call fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then_some(set)
    }
}

/// Applies `set` to the calling thread; false if the system refuses.
pub(super) fn set_affinity(set: &libc::cpu_set_t) -> bool {
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
}
/// Mappings kept free for everything else the process maps while `n` parked threads
/// exist (the registry's growth, the allocator, the workers' stacks, ...).
fn map_margin(n: usize) -> usize {
    4096 + n / 16
}
/// Green threads each spawner (one per worker) spawns per round of `parked`.
const PARKED_BATCH: usize = 8192;
const MAX_MAP_COUNT: &str = "/proc/sys/vm/max_map_count";

/// Puts `vm.max_map_count` back to its value when dropped.
struct RestoreMapCount(Option<usize>);

impl Drop for RestoreMapCount {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            let _ = std::fs::write(MAX_MAP_COUNT, format!("{v}\n"));
        }
    }
}

/// One line of JSON (and nothing in the table: the caller prints its own line).
fn emit(rep: &mut Reporter, name: &str, value: f64, unit: &'static str) {
    rep.emit(&Measurement {
        suite: Suite::Runtime.name(),
        name: name.to_string(),
        impl_name: "weft".to_string(),
        value: Some(value),
        unit,
        note: None,
    });
}

/// A "Key:  123 kB" field of /proc/self/status or /proc/meminfo, in bytes.
fn kb_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Memory of this process from /proc/self/status, in bytes.
struct Rss {
    /// VmRSS: resident pages (anonymous + file + shared memory).
    total: u64,
    anon: u64,
    shmem: u64,
    /// VmPTE: page tables (not part of VmRSS).
    page_tables: u64,
}

fn rss() -> Result<Rss, String> {
    let s = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let f = |k| kb_field(&s, k).ok_or_else(|| format!("no {k} in /proc/self/status"));
    Ok(Rss {
        total: f("VmRSS")?,
        anon: f("RssAnon")?,
        shmem: f("RssShmem").unwrap_or(0),
        page_tables: f("VmPTE").unwrap_or(0),
    })
}

fn mem_available() -> Option<u64> {
    kb_field(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable",
    )
}

fn mib(bytes: f64) -> String {
    if bytes >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", bytes / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
    }
}

/// How many green threads the mapping limit allows: `want`, after raising
/// `vm.max_map_count` if `asked` for (`--parked N`) and root, else fewer (with a line
/// saying why).
fn allowed_by_map_count(
    rep: &mut Reporter,
    want: usize,
    asked: bool,
    restore: &mut RestoreMapCount,
) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.lines().count())
        .unwrap_or(1000);
    let Some(limit) = std::fs::read_to_string(MAX_MAP_COUNT)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
    else {
        rep.line(format!(
            "  cannot read {MAX_MAP_COUNT}: assuming {want} threads fit"
        ));
        return want;
    };
    let need = maps + 2 * want + map_margin(want);
    if limit >= need {
        return want;
    }
    // SAFETY: no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if asked && root && std::fs::write(MAX_MAP_COUNT, format!("{need}\n")).is_ok() {
        restore.0 = Some(limit);
        rep.line(format!(
            "  raised vm.max_map_count from {limit} to {need} for this run (each stack is 2 \
             mappings: stack + guard); it is restored afterwards"
        ));
        return want;
    }
    // The largest n with 2n + margin(n) <= room.
    let room = limit.saturating_sub(maps) as f64;
    let n = ((room - 4096.0) / (2.0 + 1.0 / 16.0)).max(0.0) as usize;
    rep.line(format!(
        "  CLAMPED to {n} threads: vm.max_map_count is {limit} and each green thread's stack \
         is 2 mappings (stack + guard), so {want} threads need about {need}; {}",
        if asked {
            format!("run as root, or `sysctl -w vm.max_map_count={need}`, for the full count")
        } else {
            "ask for a count with --parked N (as root it raises the limit for the run)".to_string()
        }
    ));
    n
}

/// N green threads parked forever: resident memory, spawn rate, shutdown time.
fn parked_rows(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("parked");
    let want = parked_count(opts);
    rep.line("");
    if want == 0 {
        rep.line("parked: skipped (--parked 0)");
        return Ok(());
    }
    rep.line(format!(
        "parked: {want} green threads with default stacks (1 MiB usable each, committed \
         lazily), spawned across the workers in batches of {PARKED_BATCH} per worker, each \
         parked forever; resident memory from VmRSS (/proc/self/status) before and after{}",
        if opts.parked.is_none() {
            " (the default count; the full million: --parked 1000000, about 4 GiB)"
        } else {
            ""
        }
    ));
    let mut restore = RestoreMapCount(None);
    let mut n = allowed_by_map_count(rep, want, opts.parked.is_some(), &mut restore);
    if n == 0 {
        rep.line("  no room for any green thread: skipped");
        return Ok(());
    }
    let rt = Runtime::new().map_err(|e| format!("cannot start the default weft runtime: {e}"))?;
    let workers = rt.workers();
    let started = Arc::new(AtomicUsize::new(0));
    let before = rss()?;
    let t0 = Instant::now();
    let mut spawned = 0usize;
    while spawned < n {
        progress::step(format_args!("{spawned} of {n} threads spawned"), spawned, n);
        let round = (n - spawned).min(PARKED_BATCH * workers);
        let target = spawned + round;
        let spawners: Vec<_> = (0..workers)
            .map(|w| {
                let k = round / workers + usize::from(w < round % workers);
                let started = started.clone();
                rt.spawn_on(w, move || {
                    for _ in 0..k {
                        let s = started.clone();
                        drop(spawn(move || {
                            s.fetch_add(1, Release);
                            loop {
                                park(); // never woken: the shutdown unwinds it
                            }
                        }));
                    }
                    while started.load(Acquire) < target {
                        yield_now();
                    }
                })
            })
            .collect();
        for s in spawners {
            s.join()
                .map_err(|p| format!("a spawning green thread panicked: {}", panic_text(&*p)))?;
        }
        spawned = target;
        // Stop early rather than push the machine into swap or the OOM killer.
        if spawned < n {
            let grown = rss()?.total.saturating_sub(before.total) as f64;
            let projected = grown / spawned as f64 * (n - spawned) as f64;
            if let Some(avail) = mem_available() {
                if projected > 0.8 * avail as f64 {
                    rep.line(format!(
                        "  STOPPED at {spawned} threads: {} more would need ~{} and only {} \
                         is available",
                        n - spawned,
                        mib(projected),
                        mib(avail as f64)
                    ));
                    n = spawned;
                }
            }
        }
    }
    let spawn_time = t0.elapsed();
    let with = rss()?;
    progress::step("shutdown", n, n);
    let t = Instant::now();
    drop(rt);
    let shutdown = t.elapsed();
    let after = rss()?;
    drop(restore);

    let total = with.total.saturating_sub(before.total) as f64;
    let per = total / n as f64;
    let pte = with.page_tables.saturating_sub(before.page_tables) as f64;
    let spawn_ns = spawn_time.as_nanos() as f64 / n as f64;
    rep.line(format!(
        "  {n} threads spawned, run and parked in {:.3} s ({:.0} ns per thread, {workers} \
         workers)",
        spawn_time.as_secs_f64(),
        spawn_ns
    ));
    rep.line(format!(
        "  resident (VmRSS): {} before, {} with them parked: {} in total, {:.0} bytes ({:.2} \
         KiB) per thread (anonymous {}, shared memory {}: the fiber registry)",
        mib(before.total as f64),
        mib(with.total as f64),
        mib(total),
        per,
        per / 1024.0,
        mib(with.anon.saturating_sub(before.anon) as f64),
        mib(with.shmem.saturating_sub(before.shmem) as f64),
    ));
    rep.line(format!(
        "  page tables (VmPTE, not in VmRSS): {} more, {:.0} bytes per thread",
        mib(pte),
        pte / n as f64
    ));
    rep.line(format!(
        "  shutdown (unwinds every parked thread, frees the stacks): {:.3} s ({:.0} ns per \
         thread); resident afterwards {}",
        shutdown.as_secs_f64(),
        shutdown.as_nanos() as f64 / n as f64,
        mib(after.total as f64)
    ));
    let for_1m = per * 1e6;
    print_target(
        rep,
        "1M parked green threads in < 4 GiB resident",
        &if n >= 1_000_000 {
            format!("{} for {n}", mib(total))
        } else {
            format!("{} extrapolated from {n}", mib(for_1m))
        },
        Some(for_1m < TARGET_PARKED_1M_BYTES),
    );
    emit(rep, "parked", n as f64, "count");
    emit(rep, "parked/rss-total", total, "bytes");
    emit(rep, "parked/rss-per-thread", per, "bytes");
    emit(rep, "parked/page-tables", pte, "bytes");
    emit(rep, "parked/spawn", spawn_ns, "ns");
    emit(rep, "parked/shutdown", shutdown.as_secs_f64(), "s");
    Ok(())
}
