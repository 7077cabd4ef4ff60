//! The `runtime` suite of `weft bench`: what the runtime's cross-worker operations
//! cost, measured on the parts that exist so far (issue 4 is in progress).
//!
//! `cross-worker`: one round trip between two threads pinned to two CPUs:
//!
//! * "raw-cacheline": the hardware floor, two threads bouncing a value through one
//!   cache line by spinning on it;
//! * "msgbox-spin": a message to the other worker through weft's message-box matrix and
//!   a reply back, both sides polling without sleeping (busy workers);
//! * "msgbox-wait": the same with both sides calling `wait()` between messages, as idle
//!   workers will: a short spin on the doorbell, then sleep on its eventfd (a reply that
//!   comes within the spin is caught without sleeping);
//! * "mutex-condvar": the usual futex-based hand-off (std's Mutex and Condvar).
//!
//! Issue 4's target for green threads on different workers is within 2x of the raw
//! round trip when workers are busy, and no worse than a futex round trip when they
//! sleep; the message boxes are the transport those round trips will use.

use super::{
    measure_interleaved, median_of, print_micro_table, print_target, Contender, Options, Reporter,
    Suite,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use weft_runtime::msgbox::{matrix, Endpoint};

pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = cpus >= 2 && pin(0);
    rep.line("");
    rep.line(if pinned {
        "threads pinned to CPUs 0 and 1; each batch starts its own partner thread".to_string()
    } else {
        format!("threads NOT pinned ({cpus} CPU(s) available): round trips include scheduling")
    });
    let mut contenders = vec![
        Contender::new("raw-cacheline", 1, |n| raw_cacheline(pinned, n)),
        Contender::new("msgbox-spin", 1, |n| msgbox(pinned, n, false)),
        Contender::new("msgbox-wait", 1, |n| msgbox(pinned, n, true)),
        Contender::new("mutex-condvar", 1, |n| mutex_condvar(pinned, n)),
    ];
    let results = measure_interleaved(opts, &mut contenders)?;
    drop(contenders);
    print_micro_table(
        rep,
        Suite::Runtime,
        "cross-worker",
        "one round trip between two threads on two CPUs",
        &results,
    );
    let raw = median_of(&results, "raw-cacheline");
    let spin = median_of(&results, "msgbox-spin");
    let sleep = median_of(&results, "msgbox-wait");
    let futex = median_of(&results, "mutex-condvar");
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
    Ok(())
}

/// Runs one batch: starts `partner` on CPU 1 (it must return when `stop` is set, after
/// `wake` is called), waits until it runs, times `main`, then stops the partner.
fn with_partner(
    pinned: bool,
    partner: impl FnOnce(&AtomicBool) + Send + 'static,
    main: impl FnOnce() -> Duration,
    wake: impl FnOnce(),
) -> Result<Duration, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let (s, r) = (stop.clone(), ready.clone());
    let h = std::thread::spawn(move || {
        if pinned {
            pin(1);
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
fn raw_cacheline(pinned: bool, n: u64) -> Result<Duration, String> {
    let ball = Arc::new(AtomicU64::new(0));
    let b = ball.clone();
    with_partner(
        pinned,
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
/// busy-poll, or sleep on their doorbell between messages.
fn msgbox(pinned: bool, n: u64, sleep: bool) -> Result<Duration, String> {
    let mut e =
        matrix::<u64>(2, 64).map_err(|e| format!("cannot create the message boxes: {e}"))?;
    let mut partner = e.pop().expect("two endpoints");
    let mut me = e.pop().expect("two endpoints");
    let waker = Arc::new(Mutex::new(None::<Endpoint<u64>>));
    with_partner(
        pinned,
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
                    std::hint::spin_loop();
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
                            std::hint::spin_loop();
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

/// The futex-based hand-off: a turn counter under std's Mutex, waited on with Condvar.
fn mutex_condvar(pinned: bool, n: u64) -> Result<Duration, String> {
    let turn = Arc::new((Mutex::new(0u64), Condvar::new()));
    let (t2, t3) = (turn.clone(), turn.clone());
    with_partner(
        pinned,
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
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; we set one bit and apply it to
    // the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
