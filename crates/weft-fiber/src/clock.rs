//! The clock behind per-fiber run time: the CPU's time-stamp counter.
//!
//! A switch reads the counter once; the same reading closes the outgoing fiber's slice
//! and opens the incoming one's. Ticks become nanoseconds only when statistics are read,
//! with a rate calibrated once against `CLOCK_MONOTONIC`. weft assumes an invariant TSC
//! (`constant_tsc` and `nonstop_tsc` in /proc/cpuinfo), which every x86_64 machine of the
//! last decade and every mainstream hypervisor provides.

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

/// What switches record: every statistic (0), all but run time (1), nothing (2).
static MODE: AtomicU8 = AtomicU8::new(FULL);
pub(crate) const FULL: u8 = 0;
pub(crate) const NO_RUN_TIME: u8 = 1;
pub(crate) const NONE: u8 = 2;

/// What switches record now (one load on the switch path).
#[inline(always)]
pub(crate) fn statistics_mode() -> u8 {
    MODE.load(Relaxed)
}

/// Whether switches time the fibers they switch (on unless turned off).
#[inline(always)]
pub(crate) fn run_time_accounting() -> bool {
    statistics_mode() == FULL
}

/// Turns per-fiber run-time accounting on or off for the whole process.
///
/// Reading the time-stamp counter is most of what a switch costs beyond the bare context
/// switch (about 5.5 ns of 14 on the machine in docs/benchmarks.md), so a program that
/// needs the fastest switch and not per-fiber run time may turn it off, with this or
/// `WEFT_RUN_TIME=off` in the environment. Slices that begin while it is off are not
/// counted; every other statistic is kept either way.
pub fn set_run_time_accounting(on: bool) {
    MODE.store(if on { FULL } else { NO_RUN_TIME }, Relaxed);
}

/// Stops (or resumes) every per-fiber statistic and registry update in the switch.
///
/// For measuring what statistics cost (`weft bench fibers` reports the switch without
/// them); while off, `weft ps` shows counts frozen where they were. Not for production.
#[doc(hidden)]
pub fn set_statistics_enabled(on: bool) {
    MODE.store(if on { FULL } else { NONE }, Relaxed);
}

/// Applies `WEFT_RUN_TIME=off|0|no` once (called when a thread first uses weft).
pub(crate) fn read_environment() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Ok(v) = std::env::var("WEFT_RUN_TIME") {
            match v.as_str() {
                "off" | "0" | "no" | "false" => set_run_time_accounting(false),
                "on" | "1" | "yes" | "true" | "" => {}
                other => eprintln!(
                    "weft: WEFT_RUN_TIME={other:?} not understood; use on or off (keeping it on)"
                ),
            }
        }
    });
}

/// The current tick count.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU and has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The current tick count: the virtual counter, readable from user space on Linux.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    let t: u64;
    // SAFETY: reads a system register Linux lets user space read.
    unsafe {
        core::arch::asm!("mrs {}, cntvct_el0", out(reg) t, options(nomem, nostack, preserves_flags))
    };
    t
}

/// Ticks per second, measured once per process (about 1 ms the first time).
///
/// Each end of the measurement reads CLOCK_MONOTONIC between two counter reads and keeps
/// the tightest of a few tries, so the error is a few tens of nanoseconds over 1 ms
/// (well under 0.01%). The registry publishes this rate, so every reader converts ticks
/// with the same factor and run times never go backwards from one reading to the next.
pub(crate) fn ticks_per_second() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        #[cfg(target_arch = "aarch64")]
        {
            // The counter's frequency is architectural: no need to measure it.
            let f: u64;
            // SAFETY: reads a system register Linux lets user space read.
            unsafe { core::arch::asm!("mrs {}, cntfrq_el0", out(reg) f, options(nomem, nostack, preserves_flags)) };
            if f > 0 {
                return f as f64;
            }
        }
        let (c0, n0) = paired_reading();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(1) {
            std::hint::spin_loop();
        }
        let (c1, n1) = paired_reading();
        (c1 - c0) as f64 * 1e9 / (n1 - n0) as f64
    })
}

/// A (ticks, CLOCK_MONOTONIC ns) pair read as close together as this machine allows.
fn paired_reading() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..8 {
        let a = ticks();
        let n = monotonic_ns();
        let b = ticks();
        if b - a < best.0 {
            best = (b - a, a + (b - a) / 2, n);
        }
    }
    (best.1, best.2)
}

pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into our local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Converts a tick count to a duration.
pub(crate) fn ticks_to_duration(t: u64) -> Duration {
    Duration::from_nanos((t as f64 / ticks_per_second() * 1e9) as u64)
}
