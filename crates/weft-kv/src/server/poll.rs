//! Busy-polling while requests keep coming: one green thread per worker that keeps
//! its worker awake for a short window after each request, giving the CPU to any
//! other runnable process of the machine at each turn. Off unless the server's
//! environment has `WEFT_KV_POLL=1` ([`enabled`]).
//!
//! Why: a worker with nothing to run spins a little, then sleeps; the next request
//! then costs a wake-up (on a virtual machine, an interrupt through the hypervisor and
//! the kernel's idle exit: microseconds, more than the request's own work). With a
//! few client processes sending one command at a time, requests come a few
//! microseconds apart, and the worker would sleep and be woken for most of them.
//!
//! How: each connection notes its reads ([`Pollers::note`]: a store, and a wake-up
//! only when the worker's poller is parked). The poller, once woken, loops: it yields
//! to the worker's other green threads (the worker looks at its I/O completions on
//! the way), then calls `sched_yield(2)` so that any process waiting for this CPU (a
//! client, typically) runs first: the loop only takes CPU time nobody else wants. When
//! no request came for [`WINDOW`], it parks again and the worker sleeps as before. So
//! an idle server uses no CPU, and a busy one never waits for a wake-up.
//!
//! A side effect that matters as much: a worker that keeps its CPU busy keeps the
//! scheduler from placing the clients it wakes on that CPU, where they would take
//! turns with the worker (a context switch each way per request); they run on the
//! other CPUs while the worker keeps its own.
//!
//! Other processes that run for whole time slices (a build, a CPU hog) are another
//! matter: a `sched_yield` then hands the CPU over for milliseconds, and a request
//! arriving meanwhile waits for it, where a sleeping worker would be run at once by
//! the wake-up. So when a yield took longer than [`CROWDED`], the poller parks and
//! does not poll again for a while (10 ms, doubling up to 1 s while it keeps finding
//! the CPU crowded).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};
use weft_runtime::sync::{Condvar, Mutex};

/// How long the poller keeps its worker awake after the last request.
pub const WINDOW: Duration = Duration::from_micros(200);

/// A `sched_yield` that took this long gave the CPU to a process that runs for time
/// slices: the poller stops (module doc).
pub const CROWDED: Duration = Duration::from_micros(100);

/// How long polling stays off after a crowded yield: doubling, for each crowded yield
/// in a row, from the first to the second.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Green-thread yields between two `sched_yield` calls: enough that the worker looks
/// at its I/O completions in between (it does once every few dozen picks).
const YIELDS: u32 = 64;

/// One worker's poller.
#[derive(Default)]
struct Poller {
    /// Reads noted on this worker (only its own green threads write it).
    reads: AtomicU64,
    /// The poller is parked, or about to: a read must wake it.
    parked: AtomicBool,
    wake_m: Mutex<bool>,
    wake_cv: Condvar,
}

/// Whether the server polls: only with `WEFT_KV_POLL=1` in its environment, for now
/// (measured on a shared 2-CPU machine it gave no clear gain, and it loses where the
/// clients spin themselves: docs/benchmarks.md, "weft-kv against redis-server: where
/// the time goes").
pub fn enabled() -> bool {
    std::env::var("WEFT_KV_POLL").is_ok_and(|v| v == "1")
}

/// Every worker's poller.
pub struct Pollers {
    list: Vec<Poller>,
    on: bool,
}

impl Pollers {
    /// Pollers for `workers` workers; `on` false makes every call a no-op (the server
    /// then sleeps as soon as its runtime's own short spin ends).
    pub fn new(workers: usize, on: bool) -> Pollers {
        Pollers {
            list: (0..workers).map(|_| Poller::default()).collect(),
            on,
        }
    }

    /// A connection on worker `w` read a request.
    #[inline]
    pub fn note(&self, w: Option<usize>) {
        if !self.on {
            return;
        }
        let Some(p) = w.and_then(|w| self.list.get(w)) else {
            return;
        };
        p.reads
            .store(p.reads.load(Relaxed).wrapping_add(1), Relaxed);
        if p.parked.load(Relaxed) {
            p.parked.store(false, Relaxed);
            let mut g = p.wake_m.lock();
            *g = true;
            p.wake_cv.notify_one();
        }
    }

    /// Starts the pollers, one green thread on each worker.
    pub fn start(self: &std::sync::Arc<Self>) -> std::io::Result<()> {
        if !self.on {
            return Ok(());
        }
        for w in 0..self.list.len() {
            let me = self.clone();
            weft_runtime::ThreadBuilder::new()
                .name(format!("kv-poll {w}"))
                .preemptible(false)
                .spawn_on(w, move || me.run(w))?;
        }
        Ok(())
    }

    fn run(&self, w: usize) {
        let p = &self.list[w];
        // After a crowded yield: no polling until then.
        let mut crowded_until: Option<Instant> = None;
        let mut backoff = BACKOFF_MIN;
        loop {
            {
                let mut g = p.wake_m.lock();
                p.parked.store(true, SeqCst);
                while !*g {
                    g = p.wake_cv.wait(g);
                }
                *g = false;
            }
            if crowded_until.is_some_and(|t| Instant::now() < t) {
                continue;
            }
            let mut last = p.reads.load(Relaxed);
            let mut quiet_since = Instant::now();
            loop {
                for _ in 0..YIELDS {
                    weft_runtime::yield_now();
                }
                let before = Instant::now();
                // SAFETY: sched_yield takes no arguments and touches no memory of ours.
                unsafe { libc::sched_yield() };
                let after = Instant::now();
                if after - before >= CROWDED {
                    // Other processes want this CPU for whole time slices (a build, a
                    // CPU hog): a thread that yields waits behind them, where a sleeping
                    // one is run at once when a request wakes it. Sleep, then, and do
                    // not poll again for a while (longer each time in a row).
                    crowded_until = Some(after + backoff);
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    break;
                }
                let now = p.reads.load(Relaxed);
                if now != last {
                    last = now;
                    quiet_since = after;
                } else if after - quiet_since >= WINDOW {
                    backoff = BACKOFF_MIN;
                    break;
                }
            }
        }
    }
}
