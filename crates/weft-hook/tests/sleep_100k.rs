//! 100,000 green threads each call `std::thread::sleep(100 ms)` at once: the layer's
//! counters show all of them asleep at the same moment (none waited for another's
//! sleep: not serialised), and each slept at least 100 ms. The wall time is reported as
//! a note, not checked (a loaded machine would miss any bound).
//!
//! One worker without preemption, so that the check holds however slow the machine: the
//! threads meet at a barrier, and the last to arrive (a green thread of the same worker)
//! queues them all at once; the worker runs them in that order, and a sleep that ends
//! queues its thread behind the ones still to start theirs. So all are asleep before the
//! first returns.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_hook as _;
use weft_runtime::hook::stats;
use weft_runtime::sync::Barrier;
use weft_runtime::Runtime;

mod common;
use common::note;

const WANT: usize = 100_000;
const NAP: Duration = Duration::from_millis(100);

/// How many green threads the mapping limit allows (each stack is two mappings: the
/// stack and its guard), at most `want`.
fn fit_map_count(want: usize) -> usize {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(65_530);
    let used = std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.lines().count())
        .unwrap_or(1000);
    let room = limit.saturating_sub(used + 8192) / 2;
    room.min(want)
}

#[test]
fn a_hundred_thousand_green_threads_sleep_at_once() {
    let n = fit_map_count(WANT);
    if n < WANT {
        note(&format!(
            "vm.max_map_count allows {n} green threads, not {WANT} (each stack is two \
             mappings; sysctl -w vm.max_map_count=262144 for the full count)"
        ));
    }
    // Without preemption: the last to arrive at the barrier queues the others in one go
    // (a preempted leader would let the first sleepers start, and their 100 ms run out,
    // before it queued the last ones: on a slow machine, or a debug build).
    let rt = Runtime::builder()
        .workers(1)
        .preempt(false)
        .build()
        .unwrap();
    let short = Arc::new(AtomicUsize::new(0));
    // When the last sleep ended, in ns after `base`.
    let last_end = Arc::new(AtomicU64::new(0));
    let base = Instant::now();
    let (s2, e2) = (short.clone(), last_end.clone());
    let (released, woke, joined) = rt.block_on(move || {
        let go = Arc::new(Barrier::new(n + 1));
        let done = Arc::new(Barrier::new(n + 1));
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let (go, done) = (go.clone(), done.clone());
                let (short, end) = (s2.clone(), e2.clone());
                weft_runtime::spawn(move || {
                    go.wait();
                    let t = Instant::now();
                    std::thread::sleep(NAP);
                    let now = Instant::now();
                    if now - t < NAP {
                        short.fetch_add(1, SeqCst);
                    }
                    end.fetch_max((now - base).as_nanos() as u64, SeqCst);
                    // Ended only once every sleep has: the threads' exits (their
                    // stacks unmapped) come after, apart.
                    done.wait();
                })
            })
            .collect();
        // The first to arrive, so the first released.
        go.wait();
        let released = Instant::now();
        done.wait();
        let woke = Instant::now();
        for h in handles {
            h.join().unwrap();
        }
        (released, woke, Instant::now())
    });
    let slept = Duration::from_nanos(last_end.load(SeqCst)).saturating_sub(released - base);
    let all_woke = woke - released;
    let took = joined - released;
    let s = stats::snapshot();
    assert_eq!(short.load(SeqCst), 0, "a sleep was shorter than asked");
    assert_eq!(s.asleep, 0);
    assert_eq!(
        s.asleep_max as usize, n,
        "not all {n} green threads were asleep at the same moment"
    );
    let calls = s.get("clock_nanosleep").unwrap().calls + s.get("nanosleep").unwrap().calls;
    assert!(calls >= n as u64, "{calls} sleeps counted");
    note(&format!(
        "{n} green threads each slept {NAP:?} (std::thread::sleep) on one worker: the last \
         sleep ended {:.0} ms after their release, all had met again after {:.0} ms, and \
         the last had ended (its stack unmapped) after {:.0} ms (wall time)",
        slept.as_secs_f64() * 1e3,
        all_woke.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e3
    ));
}
