//! The `fibers` suite of `weft bench`: weft's fibers side by side with the
//! usual alternatives, in one run on one machine.
//!
//! Micro benchmarks (method: see `bench/mod.rs`; ns per operation):
//!
//! * `switch`: one context switch, from a ping-pong between two fibers
//!   (N round trips = 2N switches). "weft" is `SwitchToFiber` called from C
//!   (`peers.c`), the path a program using fibers.h takes, with statistics
//!   on as users get them; "weft-no-runtime" is the same with per-fiber
//!   run-time accounting turned off (`WEFT_RUN_TIME=off`: one `rdtsc` less
//!   per switch); "weft-no-stats" records no statistic and writes nothing to
//!   the registry (only to show what they cost); "weft-rust" calls it from Rust; "ucontext" is glibc
//!   swapcontext; "boost-fcontext" is Boost.Context's jump_fcontext (when
//!   installed).
//! * `create`: create + first switch in and back + delete, warm stack cache,
//!   64 KiB stacks: weft `CreateFiber`/`SwitchToFiber`/`DeleteFiber` vs
//!   ucontext (makecontext on a preallocated stack) vs an empty pthread.
//! * `fls-get`: `FlsGetValue` vs `pthread_getspecific` vs a C `__thread`
//!   read through a non-inlined function.
//!
//! Then the job system (`examples/c/job_system.c`): a fiber job system as game
//! engines build them, one worker thread per CPU running fibers from a shared
//! pool, whose jobs wait for sub-jobs by parking their fiber; jobs/s and waits/s
//! on weft and on ucontext (the same program built with `-DJOBS_UCONTEXT`), the
//! median of runs that alternate between the two.
//!
//! Then the many-fibers table: init and running time of the many-fibers workload
//! of the Unix Fibers report (A. Mastropietro, U. Mazziotta, AOSV final project,
//! Sapienza University of Rome, 2018/19) for 16..1024 fibers, 1 process and 4
//! processes at once, beside that report's published figures. The workload
//! ([`many_fibers_worker`]): one OS thread per CPU converts to a fiber; F fibers
//! in a shared pool; each fiber loops on a floating-point work unit, an FLS
//! write/read-back check and a `SwitchToFiber` to a random other fiber
//! (retrying another one when that fiber runs on another thread: ERROR_BUSY),
//! until a global count of work units reaches the total; then each thread's
//! running fiber switches back to that thread's own fiber. Every run is a fresh
//! child process (`weft bench-worker many-fibers`), 1 or 4 of them at once.

use std::cell::Cell;
use std::ffi::c_void;
use std::hint::black_box;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use weft_fiber::win::{
    ConvertFiberToThread, ConvertThreadToFiber, CreateFiber, DeleteFiber, FlsAlloc, FlsFree,
    FlsGetValue, FlsSetValue, GetLastError, SwitchToFiber, DWORD, LPVOID,
};

use super::progress::{self, Part};
use super::{
    measure_interleaved, median_of, peers, print_micro_table, print_target, Contender, Measurement,
    Options, Reporter, Suite,
};

/// Stack size of every fiber the suite creates.
const STACK_SIZE: usize = 64 * 1024;
/// `FlsAlloc`'s failure value.
const FLS_OUT_OF_INDEXES: DWORD = 0xFFFF_FFFF;
/// `GetLastError` after a switch to a fiber that runs on another thread.
const ERROR_BUSY: DWORD = 170;

/// The suite's parts for the progress line, with estimated seconds.
pub fn parts(opts: &Options) -> Vec<Part> {
    // A work unit takes about 4 ns an iteration on one CPU; the threads share the work,
    // 4 processes at once do 4 times as much.
    let per_process =
        (many_fibers_work(opts) * u64::from(WORK_ITERATIONS)) as f64 * 4e-9 / super::nproc() as f64;
    let many = MANY_FIBERS.len() as f64 * (per_process * 5.0 + 0.1);
    vec![
        Part::micro("switch", opts, 6),
        Part::micro("create", opts, 3),
        Part::micro("fls-get", opts, 3),
        Part::new("job system", job_system_seconds(opts)),
        Part::new("many fibers", many),
    ]
}

fn many_fibers_work(opts: &Options) -> u64 {
    if opts.quick {
        MANY_FIBERS_WORK_QUICK
    } else {
        MANY_FIBERS_WORK
    }
}

/// Runs the suite: the three micro benchmarks, then the many-fibers table.
pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    let home = convert_this_thread()?;
    check_switching(home)?;
    switch_rows(opts, rep, home)?;
    create_rows(opts, rep, home)?;
    fls_rows(opts, rep)?;
    job_system_rows(opts, rep)?;
    many_fibers_table(opts, rep)
}

/// Makes the calling thread a fiber (once) and returns its fiber.
fn convert_this_thread() -> Result<LPVOID, String> {
    thread_local! {
        static CONVERTED: Cell<LPVOID> = const { Cell::new(null_mut()) };
    }
    if let Some(f) = CONVERTED.with(|c| Some(c.get()).filter(|f| !f.is_null())) {
        return Ok(f);
    }
    // SAFETY: plain Windows-API call on this thread.
    let f = unsafe { ConvertThreadToFiber(null_mut()) };
    if f.is_null() {
        return Err(format!(
            "ConvertThreadToFiber failed on the benchmark thread (GetLastError = {}); \
             the thread could not become a fiber, which is a weft-fiber bug: please report it",
            last_error()
        ));
    }
    CONVERTED.with(|c| c.set(f));
    Ok(f)
}

fn last_error() -> DWORD {
    // SAFETY: reads this thread's last error.
    unsafe { GetLastError() }
}

/// Start routine of the partner fibers of `switch` and `create`: `param` is
/// the fiber to bounce back to. Never returns (returning would end the thread).
unsafe extern "C" fn bounce(param: LPVOID) {
    loop {
        SwitchToFiber(param);
    }
}

/// Start routine of the check in [`check_switching`]: counts its bounces.
unsafe extern "C" fn bounce_counting(param: LPVOID) {
    let check = &*(param as *const SwitchCheck);
    loop {
        check.count.set(check.count.get() + 1);
        SwitchToFiber(check.home);
    }
}

struct SwitchCheck {
    home: LPVOID,
    count: Cell<u64>,
}

/// Before timing anything, checks that `SwitchToFiber` really switches (a
/// failing switch returns at once and would pass for a very fast one).
fn check_switching(home: LPVOID) -> Result<(), String> {
    let check = SwitchCheck {
        home,
        count: Cell::new(0),
    };
    // SAFETY: the fiber only touches `check`, which outlives it, and is
    // deleted while suspended.
    unsafe {
        let f = CreateFiber(
            STACK_SIZE,
            Some(bounce_counting),
            &check as *const SwitchCheck as LPVOID,
        );
        if f.is_null() {
            return Err(create_failed());
        }
        for _ in 0..10 {
            SwitchToFiber(f);
        }
        DeleteFiber(f);
    }
    if check.count.get() != 10 {
        return Err(format!(
            "SwitchToFiber does not switch: 10 switches to a new fiber ran it {} times \
             (GetLastError = {}); this is a weft-fiber bug, please report it",
            check.count.get(),
            last_error()
        ));
    }
    Ok(())
}

fn create_failed() -> String {
    format!(
        "CreateFiber({STACK_SIZE}, ...) returned NULL (GetLastError = {}); \
         out of memory or address space? Check `ulimit -v` and free memory",
        last_error()
    )
}

fn switch_rows(opts: &Options, rep: &mut Reporter, home: LPVOID) -> Result<(), String> {
    progress::part("switch");
    // SAFETY: `bounce` only switches back to `home`, this thread's fiber.
    let pong = unsafe { CreateFiber(STACK_SIZE, Some(bounce), home) };
    if pong.is_null() {
        return Err(create_failed());
    }
    let mut contenders = vec![
        Contender::new("weft", 2, peers::weft_c_pingpong),
        Contender::new("weft-no-runtime", 2, |n| {
            weft_fiber::set_run_time_accounting(false);
            let r = peers::weft_c_pingpong(n);
            weft_fiber::set_run_time_accounting(true);
            r
        }),
        Contender::new("weft-no-stats", 2, |n| {
            weft_fiber::set_statistics_enabled(false);
            let r = peers::weft_c_pingpong(n);
            weft_fiber::set_statistics_enabled(true);
            r
        }),
        Contender::new("weft-rust", 2, |n| {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: `pong` is alive and suspended; it switches straight back.
                unsafe { SwitchToFiber(pong) };
            }
            Ok(t.elapsed())
        }),
        Contender::new("ucontext", 2, peers::ucontext_pingpong),
        match peers::fcontext_unavailable() {
            None => Contender::new("boost-fcontext", 2, peers::fcontext_pingpong),
            Some(why) => Contender::unavailable("boost-fcontext", why),
        },
    ];
    let results = measure_interleaved(opts, &mut contenders);
    drop(contenders);
    // SAFETY: `pong` is suspended (it switched back to us).
    unsafe { DeleteFiber(pong) };
    let results = results?;

    print_micro_table(
        rep,
        Suite::Fibers,
        "switch",
        "one context switch, from a ping-pong between two fibers (2 switches per round trip)",
        &results,
    );
    let weft = median_of(&results, "weft");
    print_target(
        rep,
        "weft <= 10 ns per switch",
        &weft.map_or("-".into(), |w| format!("{w:.2} ns")),
        weft.map(|w| w <= 10.0),
    );
    let uc = median_of(&results, "ucontext");
    let ratio = weft.zip(uc).map(|(w, u)| u / w);
    print_target(
        rep,
        "weft >= 20x faster than ucontext",
        &ratio.map_or("-".into(), |r| format!("{r:.1}x")),
        ratio.map(|r| r >= 20.0),
    );
    Ok(())
}

fn create_rows(opts: &Options, rep: &mut Reporter, home: LPVOID) -> Result<(), String> {
    progress::part("create");
    let mut contenders = vec![
        Contender::new("weft", 1, |n| {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: the new fiber switches straight back to `home`
                // (this thread's fiber), and is deleted while suspended.
                unsafe {
                    let f = CreateFiber(STACK_SIZE, Some(bounce), home);
                    if f.is_null() {
                        return Err(create_failed());
                    }
                    SwitchToFiber(f);
                    DeleteFiber(f);
                }
            }
            Ok(t.elapsed())
        }),
        Contender::new("ucontext", 1, peers::ucontext_create),
        Contender::new("pthread", 1, peers::pthread_create_join),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    print_micro_table(
        rep,
        Suite::Fibers,
        "create",
        "create + first switch in and back + delete, 64 KiB stacks, warm stack cache \
         (pthread: create + join of an empty thread)",
        &results,
    );
    let weft = median_of(&results, "weft");
    print_target(
        rep,
        "weft <= 100 ns",
        &weft.map_or("-".into(), |w| format!("{w:.2} ns")),
        weft.map(|w| w <= 100.0),
    );
    Ok(())
}

fn fls_rows(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("fls-get");
    static VALUE: u8 = 0;
    let value = &VALUE as *const u8 as *mut c_void;
    // SAFETY: plain Windows-API calls on this (fiber) thread.
    let slot = unsafe { FlsAlloc(None) };
    if slot == FLS_OUT_OF_INDEXES {
        return Err(format!(
            "FlsAlloc failed (GetLastError = {}): no free FLS slot; this bench needs one",
            last_error()
        ));
    }
    // SAFETY: `slot` was just allocated.
    let stored = unsafe { FlsSetValue(slot, value) != 0 && FlsGetValue(slot) == value };
    if !stored {
        return Err(format!(
            "FlsSetValue/FlsGetValue do not round-trip a value on FLS slot {slot} \
             (GetLastError = {}); this is a weft-fiber bug, please report it",
            last_error()
        ));
    }
    let mut contenders = vec![
        Contender::new("weft", 1, |n| {
            let t = Instant::now();
            for _ in 0..n {
                // SAFETY: `slot` is allocated and this thread is a fiber.
                black_box(unsafe { FlsGetValue(black_box(slot)) });
            }
            Ok(t.elapsed())
        }),
        Contender::new("pthread_getspecific", 1, peers::pthread_getspecific),
        Contender::new("__thread", 1, peers::thread_local_get),
    ];
    let results = measure_interleaved(opts, &mut contenders);
    drop(contenders);
    // SAFETY: `slot` was allocated above and is no longer used.
    unsafe { FlsFree(slot) };
    let results = results?;
    print_micro_table(
        rep,
        Suite::Fibers,
        "fls-get",
        "read this fiber's (thread's) value: FlsGetValue vs pthread_getspecific vs a C \
         __thread variable read through a non-inlined function",
        &results,
    );
    let weft = median_of(&results, "weft");
    print_target(
        rep,
        "weft a few ns (<= 5 ns)",
        &weft.map_or("-".into(), |w| format!("{w:.2} ns")),
        weft.map(|w| w <= 5.0),
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// The many-fibers workload and table.

/// Fiber counts of the many-fibers table (the Unix Fibers report's).
const MANY_FIBERS: [usize; 5] = [16, 64, 128, 512, 1024];
/// Work units per run (`--quick`: a tenth).
const MANY_FIBERS_WORK: u64 = 200_000;
const MANY_FIBERS_WORK_QUICK: u64 = 20_000;
/// Iterations of the floating-point loop in one work unit.
const WORK_ITERATIONS: u32 = 2000;
/// A worker taking longer than this is considered hung and killed.
const WORKER_TIMEOUT: Duration = Duration::from_secs(300);

/// The Unix Fibers report's published figures (s), for 16/64/128/512/1024 fibers,
/// measured on its authors' VM (4-core i7-7700HQ), as printed in the report.
struct PublishedFigures {
    mono_init: [&'static str; 5],
    mono_run: [&'static str; 5],
    multi_init: [&'static str; 5],
    multi_run: [&'static str; 5],
}

#[rustfmt::skip]
const USER_SPACE_LIBRARY: PublishedFigures = PublishedFigures {
    mono_init: ["0.0000000", "0.0010000", "0.0010000", "0.0040000", "0.0080000"],
    mono_run: ["0.2570630", "0.2624060", "0.2526880", "0.2488140", "0.2778080"],
    multi_init: ["0.0035000", "0.0105000", "0.0097500", "0.0167500", "0.0200000"],
    multi_run: ["0.8582655", "0.9955703", "1.1404298", "0.9817238", "1.0038593"],
};

#[rustfmt::skip]
const KERNEL_MODULE: PublishedFigures = PublishedFigures {
    mono_init: ["0", "0.001", "0.001", "0.003", "0.006"],
    mono_run: ["0.301438", "0.289719", "0.293227", "0.286602", "0.288016"],
    multi_init: ["0.00775", "0.0065", "0.0065", "0.00775", "0.01925"],
    multi_run: ["1.040703", "1.152488", "1.25908", "1.3222558", "1.737544"],
};

/// One line of the published figures, for the charts.
pub(super) struct Published {
    /// Whose figures.
    pub who: &'static str,
    pub procs: usize,
    /// "init" or "run".
    pub metric: &'static str,
    /// (fibers, seconds).
    pub points: Vec<(usize, f64)>,
}

/// The published figures as numbers, for the charts.
pub(super) fn published() -> Vec<Published> {
    let mut out = Vec::new();
    for (who, f) in [
        ("user-space library", &USER_SPACE_LIBRARY),
        ("kernel module", &KERNEL_MODULE),
    ] {
        for (procs, metric, values) in [
            (1, "init", &f.mono_init),
            (1, "run", &f.mono_run),
            (4, "init", &f.multi_init),
            (4, "run", &f.multi_run),
        ] {
            let points = MANY_FIBERS
                .iter()
                .zip(values.iter())
                .filter_map(|(&n, v)| Some((n, v.parse::<f64>().ok()?)))
                .collect();
            out.push(Published {
                who,
                procs,
                metric,
                points,
            });
        }
    }
    out
}

/// What one worker process reports (its one JSON line).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManyFibersRun {
    pub fibers: usize,
    pub threads: usize,
    pub work: u64,
    /// Seconds to create the F fibers.
    pub init_s: f64,
    /// Seconds from the threads' release until all are back on their own fiber.
    pub run_s: f64,
    /// Work units done (a few above `work`: threads finishing their unit).
    pub units: u64,
    /// Successful `SwitchToFiber` calls.
    pub switches: u64,
    /// `SwitchToFiber` calls that returned at once (target busy elsewhere).
    pub failed_switches: u64,
    /// Of those, how many did not set ERROR_BUSY.
    pub failed_not_busy: u64,
    /// FLS read-backs that did not return the fiber's own last value.
    pub fls_errors: u64,
}

impl ManyFibersRun {
    fn to_json(&self) -> String {
        serde_json::json!({
            "fibers": self.fibers,
            "threads": self.threads,
            "work": self.work,
            "init_s": self.init_s,
            "run_s": self.run_s,
            "units": self.units,
            "switches": self.switches,
            "failed_switches": self.failed_switches,
            "failed_not_busy": self.failed_not_busy,
            "fls_errors": self.fls_errors,
        })
        .to_string()
    }

    fn from_json(line: &str) -> Result<ManyFibersRun, String> {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("not JSON ({e})"))?;
        let u = |k: &str| {
            v[k].as_u64()
                .ok_or_else(|| format!("no unsigned integer \"{k}\""))
        };
        let f = |k: &str| v[k].as_f64().ok_or_else(|| format!("no number \"{k}\""));
        Ok(ManyFibersRun {
            fibers: u("fibers")? as usize,
            threads: u("threads")? as usize,
            work: u("work")?,
            init_s: f("init_s")?,
            run_s: f("run_s")?,
            units: u("units")?,
            switches: u("switches")?,
            failed_switches: u("failed_switches")?,
            failed_not_busy: u("failed_not_busy")?,
            fls_errors: u("fls_errors")?,
        })
    }
}

/// `weft bench-worker many-fibers --fibers F --work W`: runs the workload
/// once in this process and prints its [`ManyFibersRun`] as one JSON line.
pub fn many_fibers_worker_main(fibers: usize, work: u64) -> Result<(), String> {
    let run = many_fibers_worker(fibers, work)?;
    println!("{}", run.to_json());
    Ok(())
}

/// Shared by all threads and fibers of one run.
struct PoolShared {
    /// The pool; set once before any thread starts switching.
    fibers: OnceLock<Vec<FiberHandle>>,
    slot: DWORD,
    total: u64,
    units: AtomicU64,
    done: AtomicBool,
}

#[derive(Clone, Copy)]
struct FiberHandle(LPVOID);
// SAFETY: a fiber handle is an address that any thread may switch to; weft
// arbitrates (ERROR_BUSY) when two threads want the same fiber.
unsafe impl Send for FiberHandle {}
unsafe impl Sync for FiberHandle {}

/// One pool fiber's own record, its start routine's parameter. Only that
/// fiber touches it while the run lasts (wherever it runs), and the main
/// thread reads it after all threads have finished.
struct PoolFiber {
    shared: *const PoolShared,
    index: usize,
    /// Left in [`PENDING`] before each switch: see [`attempt_switch`].
    token: usize,
    rng: Cell<u64>,
    acc: Cell<f64>,
    fls_last: Cell<usize>,
    fls_seq: Cell<u64>,
    fls_errors: Cell<u64>,
    stats: SwitchStats,
}

#[derive(Default)]
struct SwitchStats {
    attempts: Cell<u64>,
    failed: Cell<u64>,
    failed_not_busy: Cell<u64>,
}

/// Token of the threads' own fibers (pool fibers have index + 1).
const HOME_TOKEN: usize = usize::MAX;

thread_local! {
    /// This OS thread's own fiber (from ConvertThreadToFiber).
    static HOME: Cell<LPVOID> = const { Cell::new(null_mut()) };
    /// The token of the last fiber that started a switch on this thread.
    static PENDING: Cell<usize> = const { Cell::new(0) };
}

// A fiber migrates between OS threads: after a SwitchToFiber returns it may
// run on another thread than before. The compiler may keep a thread-local's
// address across a call, so these are never inlined: each call reads the
// thread-local of the thread it runs on now.

#[inline(never)]
fn home_fiber() -> LPVOID {
    black_box(HOME.with(Cell::get))
}

#[inline(never)]
fn set_pending(token: usize) {
    PENDING.with(|p| p.set(black_box(token)));
}

#[inline(never)]
fn pending() -> usize {
    black_box(PENDING.with(Cell::get))
}

/// Tries to switch to `to` from the fiber identified by `token`; true if the
/// switch happened (we are now resumed, possibly on another thread), false
/// if it failed at once (ERROR_BUSY: `to` runs on another thread).
///
/// `SwitchToFiber` returns nothing and a successful one leaves the last
/// error alone, so the caller cannot tell "it failed" from "someone switched
/// back to me" by itself. It leaves its token in the thread's [`PENDING`]:
/// a failed switch comes back to the same thread with nothing run in
/// between, so the token is still there; whoever resumes us later left its
/// own token, different from ours, on the thread we resume on.
///
/// # Safety
/// Must run on a fiber; `to` must be a live fiber.
unsafe fn attempt_switch(token: usize, to: LPVOID, stats: &SwitchStats) -> bool {
    stats.attempts.set(stats.attempts.get() + 1);
    set_pending(token);
    SwitchToFiber(to);
    if pending() != token {
        return true;
    }
    stats.failed.set(stats.failed.get() + 1);
    if GetLastError() != ERROR_BUSY {
        stats.failed_not_busy.set(stats.failed_not_busy.get() + 1);
    }
    false
}

fn xorshift(state: &Cell<u64>) -> u64 {
    let mut x = state.get();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    state.set(x);
    x
}

/// One work unit: a dependent chain of floating-point multiply-adds with
/// square roots.
#[inline(never)]
fn work_unit(start: f64) -> f64 {
    let mut x = black_box(start);
    let mut y = black_box(2.0f64);
    for _ in 0..WORK_ITERATIONS {
        x = x * 1.000_000_1 + y.sqrt();
        y += 1.0;
    }
    black_box(x)
}

/// Start routine of the pool fibers. Never returns.
unsafe extern "C" fn pool_fiber_main(param: LPVOID) {
    let me = &*(param as *const PoolFiber);
    let shared = &*me.shared;
    let Some(fibers) = shared.fibers.get() else {
        fatal("a pool fiber started before the pool was complete");
    };
    let others = fibers.len() as u64 - 1;
    loop {
        if shared.done.load(Ordering::Acquire) {
            // Back to the fiber of the thread we run on *now*.
            if !attempt_switch(me.token, home_fiber(), &me.stats) {
                fatal("SwitchToFiber to the thread's own fiber failed");
            }
            continue;
        }

        me.acc.set(me.acc.get() + work_unit(me.index as f64));

        // FLS: the value this fiber stored last time must still be there,
        // whatever thread it ran on since (null before the first store).
        let got = FlsGetValue(shared.slot) as usize;
        if got != me.fls_last.get() {
            me.fls_errors.set(me.fls_errors.get() + 1);
        }
        let seq = me.fls_seq.get() + 1;
        me.fls_seq.set(seq);
        let value = (me.token << 32) | (seq as usize & 0xFFFF_FFFF);
        if FlsSetValue(shared.slot, value as *mut c_void) == 0 {
            me.fls_errors.set(me.fls_errors.get() + 1);
        }
        me.fls_last.set(value);

        if shared.units.fetch_add(1, Ordering::Relaxed) + 1 >= shared.total {
            shared.done.store(true, Ordering::Release);
            continue;
        }

        // Switch to a random other fiber; if it is busy, try another.
        loop {
            let mut j = (xorshift(&me.rng) % others) as usize;
            if j >= me.index {
                j += 1;
            }
            if attempt_switch(me.token, fibers[j].0, &me.stats)
                || shared.done.load(Ordering::Acquire)
            {
                break;
            }
        }
    }
}

/// Ends the worker process from inside a fiber, where no error can be returned.
fn fatal(what: &str) -> ! {
    eprintln!("weft: error: bench worker: {what}; this is a weft-fiber bug, please report it");
    std::process::exit(2);
}

/// What one OS thread of the run reports.
struct ThreadReport {
    home_at: Instant,
    stats: SwitchStats,
}

/// One OS thread of the run: becomes a fiber, waits for the release, then
/// switches into random pool fibers until one of them brings it home after
/// the work is done.
fn pool_thread(
    shared: &PoolShared,
    index: usize,
    ready: &AtomicUsize,
    go: &AtomicBool,
) -> Result<ThreadReport, String> {
    // SAFETY: plain Windows-API call on this new thread.
    let home = unsafe { ConvertThreadToFiber(null_mut()) };
    ready.fetch_add(1, Ordering::AcqRel);
    if home.is_null() {
        return Err(format!(
            "ConvertThreadToFiber failed on worker thread {index} (GetLastError = {}); \
             this is a weft-fiber bug, please report it",
            last_error()
        ));
    }
    HOME.with(|h| h.set(home));
    while !go.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let fibers = shared.fibers.get().map(Vec::as_slice).unwrap_or(&[]);
    let rng = Cell::new(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1));
    let stats = SwitchStats::default();
    while !shared.done.load(Ordering::Acquire) && !fibers.is_empty() {
        let j = (xorshift(&rng) % fibers.len() as u64) as usize;
        // SAFETY: this thread is a fiber and the pool fibers are alive.
        unsafe { attempt_switch(HOME_TOKEN, fibers[j].0, &stats) };
    }
    let home_at = Instant::now();
    HOME.with(|h| h.set(null_mut()));
    // SAFETY: we are on this thread's own fiber again.
    if unsafe { ConvertFiberToThread() } == 0 {
        return Err(format!(
            "ConvertFiberToThread failed on worker thread {index} back on its own fiber \
             (GetLastError = {}); this is a weft-fiber bug, please report it",
            last_error()
        ));
    }
    Ok(ThreadReport { home_at, stats })
}

/// Runs the many-fibers workload once in this process: `fibers` pool fibers,
/// `work` units, one OS thread per CPU.
pub fn many_fibers_worker(fibers: usize, work: u64) -> Result<ManyFibersRun, String> {
    if fibers < 2 {
        return Err(format!(
            "--fibers {fibers}: the workload switches between fibers, give at least 2"
        ));
    }
    if work == 0 {
        return Err("--work 0: give at least 1 work unit".to_string());
    }
    let threads = super::nproc();
    // SAFETY: plain Windows-API call.
    let slot = unsafe { FlsAlloc(None) };
    if slot == FLS_OUT_OF_INDEXES {
        return Err(format!(
            "FlsAlloc failed (GetLastError = {}): no free FLS slot; the workload needs one",
            last_error()
        ));
    }
    let shared = PoolShared {
        fibers: OnceLock::new(),
        slot,
        total: work,
        units: AtomicU64::new(0),
        done: AtomicBool::new(false),
    };
    let records: Vec<PoolFiber> = (0..fibers)
        .map(|index| PoolFiber {
            shared: &shared,
            index,
            token: index + 1,
            rng: Cell::new(0x2545_F491_4F6C_DD1D ^ ((index as u64 + 1) << 20)),
            acc: Cell::new(0.0),
            fls_last: Cell::new(0),
            fls_seq: Cell::new(0),
            fls_errors: Cell::new(0),
            stats: SwitchStats::default(),
        })
        .collect();

    // Init: create the F fibers.
    let mut handles = Vec::with_capacity(fibers);
    let t = Instant::now();
    for r in &records {
        // SAFETY: `r` outlives the fiber (deleted below, before `records`).
        let f = unsafe {
            CreateFiber(
                STACK_SIZE,
                Some(pool_fiber_main),
                r as *const PoolFiber as LPVOID,
            )
        };
        if f.is_null() {
            let e = create_failed();
            for h in handles {
                // SAFETY: created above and never run.
                unsafe { DeleteFiber(h) };
            }
            // SAFETY: allocated above.
            unsafe { FlsFree(slot) };
            return Err(format!("creating fiber {} of {fibers}: {e}", r.index));
        }
        handles.push(f);
    }
    let init = t.elapsed();
    let _ = shared
        .fibers
        .set(handles.iter().map(|&h| FiberHandle(h)).collect());

    // Run: release the threads, wait until all are home.
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let (start, reports) = std::thread::scope(|s| {
        let joins: Vec<_> = (0..threads)
            .map(|i| {
                let (shared, ready, go) = (&shared, &ready, &go);
                s.spawn(move || pool_thread(shared, i, ready, go))
            })
            .collect();
        while ready.load(Ordering::Acquire) < threads {
            std::thread::yield_now();
        }
        let start = Instant::now();
        go.store(true, Ordering::Release);
        let reports: Vec<Result<ThreadReport, String>> = joins
            .into_iter()
            .map(|j| {
                j.join()
                    .unwrap_or_else(|_| Err("a worker thread panicked".to_string()))
            })
            .collect();
        (start, reports)
    });
    let reports = reports.into_iter().collect::<Result<Vec<_>, _>>()?;
    let end = reports.iter().map(|r| r.home_at).max().unwrap_or(start);

    for &h in &handles {
        // SAFETY: every pool fiber is suspended now (all threads are home).
        unsafe { DeleteFiber(h) };
    }
    // SAFETY: allocated above, no fiber uses it any more.
    unsafe { FlsFree(slot) };

    let all_stats = records
        .iter()
        .map(|r| &r.stats)
        .chain(reports.iter().map(|r| &r.stats));
    let (mut attempts, mut failed, mut failed_not_busy) = (0, 0, 0);
    for s in all_stats {
        attempts += s.attempts.get();
        failed += s.failed.get();
        failed_not_busy += s.failed_not_busy.get();
    }
    black_box(records.iter().map(|r| r.acc.get()).sum::<f64>());
    Ok(ManyFibersRun {
        fibers,
        threads,
        work,
        init_s: init.as_secs_f64(),
        run_s: end.saturating_duration_since(start).as_secs_f64(),
        units: shared.units.load(Ordering::Relaxed),
        switches: attempts - failed,
        failed_switches: failed,
        failed_not_busy,
        fls_errors: records.iter().map(|r| r.fls_errors.get()).sum(),
    })
}

/// Starts `procs` workers at once and returns their reports.
fn run_workers(procs: usize, fibers: usize, work: u64) -> Result<Vec<ManyFibersRun>, String> {
    let exe = std::env::current_exe().map_err(|e| {
        format!(
            "cannot find this program's path to start bench workers ({e}); run weft from its file"
        )
    })?;
    let mut children: Vec<Child> = Vec::with_capacity(procs);
    for _ in 0..procs {
        let child = Command::new(&exe)
            .args(["bench-worker", "many-fibers", "--fibers"])
            .arg(fibers.to_string())
            .arg("--work")
            .arg(work.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!(
                    "cannot start bench worker {} ({e}); check `ulimit -u` and free memory",
                    exe.display()
                ));
            }
        }
    }
    let deadline = Instant::now() + WORKER_TIMEOUT;
    let mut runs = Vec::with_capacity(procs);
    for i in 0..children.len() {
        let status = loop {
            match children[i].try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    kill_all(&mut children);
                    return Err(format!(
                        "bench worker ({fibers} fibers, {work} units) still running after {} s: \
                         killed; the workload probably hangs in weft-fiber, \
                         run `{} bench-worker many-fibers --fibers {fibers} --work {work}` \
                         under a debugger",
                        WORKER_TIMEOUT.as_secs(),
                        exe.display()
                    ));
                }
                Err(e) => {
                    kill_all(&mut children);
                    return Err(format!("cannot wait for bench worker: {e}"));
                }
            }
        };
        let mut out = String::new();
        if let Some(mut stdout) = children[i].stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        if !status.success() {
            kill_all(&mut children);
            return Err(format!(
                "bench worker ({fibers} fibers, {work} units) failed: {status}; \
                 its error message is above"
            ));
        }
        let line = out.lines().last().unwrap_or("");
        runs.push(
            ManyFibersRun::from_json(line).map_err(|e| {
                format!("bench worker printed {line:?}, not its one JSON report: {e}")
            })?,
        );
    }
    Ok(runs)
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Averages of a group of concurrent runs, per process.
fn average(runs: &[ManyFibersRun]) -> ManyFibersRun {
    let n = runs.len().max(1);
    let sum_u = |f: fn(&ManyFibersRun) -> u64| runs.iter().map(f).sum::<u64>() / n as u64;
    ManyFibersRun {
        fibers: runs.first().map_or(0, |r| r.fibers),
        threads: runs.first().map_or(0, |r| r.threads),
        work: runs.first().map_or(0, |r| r.work),
        init_s: runs.iter().map(|r| r.init_s).sum::<f64>() / n as f64,
        run_s: runs.iter().map(|r| r.run_s).sum::<f64>() / n as f64,
        units: sum_u(|r| r.units),
        switches: sum_u(|r| r.switches),
        failed_switches: sum_u(|r| r.failed_switches),
        // Problems are summed, not averaged: any is one too many.
        failed_not_busy: runs.iter().map(|r| r.failed_not_busy).sum(),
        fls_errors: runs.iter().map(|r| r.fls_errors).sum(),
    }
}

fn many_fibers_table(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("many fibers");
    let work = many_fibers_work(opts);
    let threads = super::nproc();
    rep.line("");
    rep.line(format!(
        "many-fibers table: F fibers shared by {threads} OS threads (one per CPU, each \
         converted to a fiber); {work} work units in all, each {WORKING} FP iterations + an \
         FLS write/read-back check, then SwitchToFiber to a random other fiber (another one \
         on ERROR_BUSY)",
        WORKING = WORK_ITERATIONS
    ));
    rep.line(
        "  init = time to create the F fibers; run = wall time from the threads' release until \
         all are back on their own fiber; each run is a fresh process (1, or 4 at once: \
         per-process averages)",
    );
    rep.line(
        "  published = the figures of the Unix Fibers report (Windows fibers on Linux as a \
         user-space library and as a kernel module), measured on its authors' VM (4-core \
         i7-7700HQ): its workload is not published in detail, so the comparison is indicative",
    );
    rep.line(format!(
        "  {:>6} {:>5} | {:<41} | {:<45}",
        "", "", "weft, this machine", "published (Unix Fibers report, 4-core i7-7700HQ VM)"
    ));
    rep.line(format!(
        "  {:>6} {:>5} | {:<41} | {:<21} | {:<21}",
        "", "", "", "user-space library", "kernel module"
    ));
    rep.line(format!(
        "  {:>6} {:>5} | {:>10} {:>10} {:>10} {:>8} | {:>10} {:>10} | {:>10} {:>10}",
        "fibers",
        "procs",
        "init s",
        "run s",
        "switches",
        "failed",
        "init s",
        "run s",
        "init s",
        "run s"
    ));
    let mut problems = Vec::new();
    for (i, &fibers) in MANY_FIBERS.iter().enumerate() {
        for (j, procs) in [1usize, 4].into_iter().enumerate() {
            progress::step(
                format!(
                    "{fibers} fibers, {procs} {}",
                    if procs == 1 {
                        "process"
                    } else {
                        "processes at once"
                    }
                ),
                2 * i + j,
                2 * MANY_FIBERS.len(),
            );
            let runs = run_workers(procs, fibers, work)?;
            let avg = average(&runs);
            let (user, kernel) = if procs == 1 {
                (
                    (
                        USER_SPACE_LIBRARY.mono_init[i],
                        USER_SPACE_LIBRARY.mono_run[i],
                    ),
                    (KERNEL_MODULE.mono_init[i], KERNEL_MODULE.mono_run[i]),
                )
            } else {
                (
                    (
                        USER_SPACE_LIBRARY.multi_init[i],
                        USER_SPACE_LIBRARY.multi_run[i],
                    ),
                    (KERNEL_MODULE.multi_init[i], KERNEL_MODULE.multi_run[i]),
                )
            };
            rep.line(format!(
                "  {:>6} {:>5} | {:>10.7} {:>10.7} {:>10} {:>8} | {:>10} {:>10} | {:>10} {:>10}",
                fibers,
                procs,
                avg.init_s,
                avg.run_s,
                avg.switches,
                avg.failed_switches,
                user.0,
                user.1,
                kernel.0,
                kernel.1
            ));
            let base = format!("many-fibers/{procs}proc/{fibers}");
            for (metric, value, unit) in [
                ("init", avg.init_s, "s"),
                ("run", avg.run_s, "s"),
                ("switches", avg.switches as f64, "count"),
                ("failed-switches", avg.failed_switches as f64, "count"),
            ] {
                rep.emit(&Measurement {
                    suite: Suite::Fibers.name(),
                    name: format!("{base}/{metric}"),
                    impl_name: "weft".to_string(),
                    value: Some(value),
                    unit,
                    note: None,
                });
            }
            if avg.fls_errors > 0 {
                problems.push(format!(
                    "{fibers} fibers, {procs} proc: {} FLS read-backs returned another value \
                     than the fiber stored",
                    avg.fls_errors
                ));
            }
            if avg.failed_not_busy > 0 {
                problems.push(format!(
                    "{fibers} fibers, {procs} proc: {} failed switches did not set ERROR_BUSY",
                    avg.failed_not_busy
                ));
            }
        }
    }
    rep.line("  switches, failed: SwitchToFiber calls per process that switched / returned at once (ERROR_BUSY)");
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the many-fibers workload found weft-fiber misbehaving (a weft-fiber bug, please \
             report it): {}",
            problems.join("; ")
        ))
    }
}

/// `struct jobs_config` of examples/c/job_system.c.
#[repr(C)]
struct JobsConfig {
    workers: std::ffi::c_int,
    frames: std::ffi::c_int,
    entities: std::ffi::c_int,
    subjobs: std::ffi::c_int,
    work: std::ffi::c_int,
}

/// `struct jobs_result` of examples/c/job_system.c.
#[repr(C)]
#[derive(Default)]
struct JobsResult {
    seconds: f64,
    jobs: u64,
    waits: u64,
    migrations: u64,
    switches: u64,
}

extern "C" {
    /// examples/c/job_system.c on weft's fibers (built by build.rs).
    fn peer_jobs_weft(cfg: *const JobsConfig, res: *mut JobsResult) -> std::ffi::c_int;
    /// The same program on glibc's ucontext.
    fn peer_jobs_ucontext(cfg: *const JobsConfig, res: *mut JobsResult) -> std::ffi::c_int;
}

/// Frames per job-system run, and runs per implementation.
fn job_system_size(opts: &Options) -> (i32, usize) {
    if opts.quick {
        (100, 3)
    } else {
        (1000, 5)
    }
}

/// The job system's estimated seconds, for the progress line (about 6 us a frame).
fn job_system_seconds(opts: &Options) -> f64 {
    let (frames, runs) = job_system_size(opts);
    2.0 * runs as f64 * f64::from(frames) * 6e-6 * 64.0 / super::nproc() as f64
}

/// examples/c/job_system.c on weft and on ucontext: per frame 64 entity jobs, each
/// starting 8 sub-jobs of 50 iterations and waiting for them, the frame waiting for
/// its entities. Runs alternate between the two implementations.
fn job_system_rows(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    progress::part("job system");
    let (frames, runs) = job_system_size(opts);
    let workers = super::nproc() as i32;
    let cfg = JobsConfig {
        workers,
        frames,
        entities: 64,
        subjobs: 8,
        work: 50,
    };
    type Run = unsafe extern "C" fn(*const JobsConfig, *mut JobsResult) -> std::ffi::c_int;
    let impls: [(&str, Run); 2] = [("weft", peer_jobs_weft), ("ucontext", peer_jobs_ucontext)];
    let mut samples = [
        (Vec::new(), Vec::new(), 0u64),
        (Vec::new(), Vec::new(), 0u64),
    ];
    for _ in 0..runs {
        for ((name, run), (jobs, waits, moved)) in impls.iter().zip(samples.iter_mut()) {
            let mut r = JobsResult::default();
            // SAFETY: valid configuration and result pointers; the program runs to its
            // end (its own threads are joined) before it returns.
            if unsafe { run(&cfg, &mut r) } != 0 || r.seconds <= 0.0 {
                return Err(format!("the {name} job system run failed"));
            }
            jobs.push(r.jobs as f64 / r.seconds);
            waits.push(r.waits as f64 / r.seconds);
            *moved = r.migrations * 100 / r.waits.max(1);
        }
    }
    rep.line("");
    rep.line(format!(
        "job system: {workers} workers run fibers from a shared pool; a frame is 64 entity \
         jobs that each start 8 sub-jobs and wait for them (the fiber parks, its thread runs \
         others), and waits for its entities; jobs find their context through FLS \
         (examples/c/job_system.c; the same program on ucontext); {frames} frames, median of \
         {runs} runs"
    ));
    rep.line(format!(
        "  {:<12} {:>14} {:>14} {:>26}",
        "impl", "jobs/s", "waits/s", "waits resumed elsewhere"
    ));
    for ((name, _), (jobs, waits, moved)) in impls.iter().zip(samples.iter_mut()) {
        let (j, w) = (super::median(jobs), super::median(waits));
        rep.line(format!(
            "  {name:<12} {:>14} {:>14} {:>25}%",
            super::group(j),
            super::group(w),
            moved
        ));
        for (metric, value, unit) in [("jobs", j, "jobs/s"), ("waits", w, "waits/s")] {
            rep.emit(&Measurement {
                suite: Suite::Fibers.name(),
                name: format!("job-system/{metric}"),
                impl_name: name.to_string(),
                value: Some(value),
                unit,
                note: None,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_fibers_run_json_round_trip() {
        let run = ManyFibersRun {
            fibers: 64,
            threads: 2,
            work: 20_000,
            init_s: 0.000_123,
            run_s: 0.5,
            units: 20_001,
            switches: 20_100,
            failed_switches: 7,
            failed_not_busy: 0,
            fls_errors: 0,
        };
        assert_eq!(ManyFibersRun::from_json(&run.to_json()), Ok(run));
        assert!(ManyFibersRun::from_json("{\"fibers\":1}").is_err());
        assert!(ManyFibersRun::from_json("garbage").is_err());
    }

    #[test]
    fn average_is_per_process_but_problems_add_up() {
        let a = ManyFibersRun {
            init_s: 1.0,
            run_s: 2.0,
            switches: 10,
            fls_errors: 1,
            ..ManyFibersRun::default()
        };
        let b = ManyFibersRun {
            init_s: 3.0,
            run_s: 4.0,
            switches: 30,
            fls_errors: 2,
            ..ManyFibersRun::default()
        };
        let avg = average(&[a, b]);
        assert_eq!((avg.init_s, avg.run_s, avg.switches), (2.0, 3.0, 20));
        assert_eq!(avg.fls_errors, 3);
    }

    #[test]
    fn xorshift_never_sticks_at_zero_from_a_nonzero_state() {
        let s = Cell::new(1);
        for _ in 0..1000 {
            assert_ne!(xorshift(&s), 0);
        }
    }
}
