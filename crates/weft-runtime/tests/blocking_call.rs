//! `in_blocking_call`: a system call that sleeps on the worker itself (a log's
//! `fdatasync`). The monitor does not wake every millisecond of it, yet still hands
//! the worker's never-run threads to another worker and still preempts the thread
//! once it is back and spinning.

mod common;
use common::PATIENCE;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_runtime::{current_worker, in_blocking_call, spawn, spawn_on, worker_rests, Runtime};

/// One runtime at a time in this file: the monitor is found among the process's
/// threads by its name, as the one that appeared with the runtime.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn monitors() -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() == "weft-monitor" {
            v.push(e.file_name().to_string_lossy().parse().unwrap());
        }
    }
    v
}

/// The thread's voluntary context switches: how often it went to sleep.
fn sleeps(tid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_monitor_does_not_tick_every_millisecond_of_a_blocking_call() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = monitors();
    let rt = Runtime::builder().workers(1).build().unwrap();
    // The monitor names itself once it runs, which on a busy machine can be a while
    // after `build` returns: wait for it (another test binary's runtime cannot appear
    // here; ours must, eventually).
    let t0 = Instant::now();
    let mine = loop {
        let mine: Vec<u32> = monitors()
            .into_iter()
            .filter(|t| !before.contains(t))
            .collect();
        if mine.len() == 1 || t0.elapsed() > PATIENCE {
            break mine;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        mine.len(),
        1,
        "expected one new monitor thread, found {mine:?}"
    );
    let monitor = mine[0];
    let nap = Duration::from_millis(300);
    let (wakes, rests) = rt.block_on(move || {
        let rests = worker_rests().unwrap();
        let w0 = sleeps(monitor);
        // A sleep stands in for an fdatasync: a system call that sleeps on the worker.
        in_blocking_call(|| std::thread::sleep(nap));
        (sleeps(monitor) - w0, worker_rests().unwrap() - rests)
    });
    // The monitor sleeps 10 ms a round while no worker runs anything it could
    // preempt: at most 30 rounds in 300 ms, however busy the machine (a busy machine
    // only makes its sleeps longer). Ticking every millisecond it would wake about 300
    // times on a quiet machine (on a loaded one its 1 ms sleeps stretch too, which
    // this bound cannot tell apart).
    assert!(
        wakes <= 30 + 2,
        "the monitor woke {wakes} times during a {nap:?} blocking call"
    );
    assert!(rests >= 1, "the blocking call was not counted as a rest");
    assert_eq!(
        in_blocking_call(|| 7),
        7,
        "outside a green thread it just runs"
    );
}

#[test]
fn a_blocked_worker_still_hands_its_never_run_threads_over() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = Runtime::builder().workers(2).build().unwrap();
    let ran_on = rt.block_on(|| {
        spawn_on(0, || {
            let ran = Arc::new(Mutex::new(None));
            let r2 = ran.clone();
            // Queued on this worker (a plain spawn: stealable, unlike spawn_on's),
            // which then sleeps in a blocking call until the thread has run: only
            // another worker can run it.
            let h = spawn(move || *r2.lock().unwrap() = current_worker());
            in_blocking_call(|| {
                let t0 = Instant::now();
                while ran.lock().unwrap().is_none() {
                    assert!(t0.elapsed() < PATIENCE, "the queued thread never ran");
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            h.join().unwrap();
            let on = ran.lock().unwrap().unwrap();
            on
        })
        .join()
        .unwrap()
    });
    assert_eq!(ran_on, 1, "the never-run thread ran on the other worker");
}

#[test]
fn a_thread_back_from_a_blocking_call_is_still_preempted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = Runtime::builder().workers(1).preempt(true).build().unwrap();
    let ticked = rt.block_on(|| {
        spawn_on(0, || {
            let ticked = Arc::new(AtomicBool::new(false));
            let t2 = ticked.clone();
            in_blocking_call(|| std::thread::sleep(Duration::from_millis(30)));
            let ticker = spawn_on(0, move || t2.store(true, SeqCst));
            // Spins with no runtime call: only the monitor's preemption lets the
            // ticker run on the only worker.
            let t0 = Instant::now();
            while !ticked.load(SeqCst) && t0.elapsed() < PATIENCE {
                std::hint::black_box(0);
            }
            ticker.join().unwrap();
            ticked.load(SeqCst)
        })
        .join()
        .unwrap()
    });
    assert!(ticked, "nothing preempted the spinner in {PATIENCE:?}");
}
