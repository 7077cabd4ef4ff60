//! The green-thread synchronization primitives (`weft_runtime::sync`) under contention
//! across workers, mixed with plain OS threads: mutual exclusion, no lost wake-ups
//! (a hang is a failure), timeouts, notify_all, barrier generations.

// The runtime is not built under the `loom` feature (see lib.rs).
#![cfg(not(feature = "loom"))]

mod common;
use common::{wait_until, PATIENCE};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::sync::{Barrier, Condvar, Mutex, Semaphore};
use weft_runtime::{sleep, spawn_on, yield_now, Runtime};

fn rt(n: usize) -> Runtime {
    Runtime::builder().workers(n).build().unwrap()
}

/// Runs `f(i)` on `green` green threads (`spawn_on(i % 2)`) and `os` OS threads (with
/// indices after the green ones) and waits for all of them.
fn run_mixed<F>(rt: &Runtime, green: usize, os: usize, f: F)
where
    F: Fn(usize) + Send + Sync + 'static,
{
    let f = Arc::new(f);
    let gs: Vec<_> = (0..green)
        .map(|i| {
            let f = f.clone();
            rt.spawn_on(i % rt.workers(), move || f(i))
        })
        .collect();
    let ts: Vec<_> = (green..green + os)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || f(i))
        })
        .collect();
    for g in gs {
        g.join().unwrap();
    }
    for t in ts {
        t.join().unwrap();
    }
}

/// Non-atomic counter updates (read, maybe yield, write) through the guard: the total
/// is exact only if the mutex excludes.
#[test]
fn mutex_excludes_across_workers_and_os_threads() {
    let rt = rt(2);
    const GREEN: usize = 8;
    const OS: usize = 2;
    const ITERS: u64 = 2_000;
    let m = Arc::new(Mutex::new(0u64));
    let inside = Arc::new(AtomicBool::new(false));
    let (m2, inside2) = (m.clone(), inside.clone());
    run_mixed(&rt, GREEN, OS, move |_| {
        for k in 0..ITERS {
            let mut g = m2.lock();
            assert!(!inside2.swap(true, SeqCst), "two holders at once");
            let v = *g;
            if k % 16 == 0 {
                yield_now(); // holding a weft mutex across a switch is allowed
            }
            *g = v + 1;
            inside2.store(false, SeqCst);
        }
    });
    assert_eq!(*m.lock(), (GREEN + OS) as u64 * ITERS);
    let m = Arc::try_unwrap(m).unwrap();
    assert_eq!(m.into_inner(), (GREEN + OS) as u64 * ITERS);
}

/// A holder that parks (sleeps) with the lock, and a waiter parked on it, leave their
/// single worker free to run other green threads.
#[test]
fn mutex_waiters_and_parked_holders_let_the_worker_run() {
    let rt = rt(1);
    rt.block_on(|| {
        let m = Arc::new(Mutex::new(0));
        let ticks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let g = m.lock();
        let m2 = m.clone();
        let waiter = spawn_on(0, move || *m2.lock() += 1);
        let (t2, s2) = (ticks.clone(), stop.clone());
        let ticker = spawn_on(0, move || {
            while !s2.load(Relaxed) {
                t2.fetch_add(1, Relaxed);
                yield_now();
            }
        });
        // This holder parks (with the lock) until the ticker has had 10 turns: the
        // worker runs others while both the holder and the waiter are parked.
        wait_until("10 ticks beside a parked holder and waiter", || {
            ticks.load(Relaxed) > 10
        });
        assert!(!waiter.is_finished(), "the waiter waits for the lock");
        drop(g);
        waiter.join().unwrap();
        assert_eq!(*m.lock(), 1);
        stop.store(true, Relaxed);
        ticker.join().unwrap();
    });
}

#[test]
fn mutex_try_lock_and_lock_timeout() {
    let rt = rt(2);
    let m = Arc::new(Mutex::new(5));
    let held = Arc::new(AtomicBool::new(false));
    let (m2, held2) = (m.clone(), held.clone());
    // The holder keeps the lock until told to let go.
    let (let_go, told) = weft_runtime::chan::oneshot::channel::<()>();
    let holder = rt.spawn_on(0, move || {
        let g = m2.lock();
        held2.store(true, SeqCst);
        let _ = told.recv();
        drop(g);
    });
    wait_until("the holder took the lock", || held.load(SeqCst));
    let m3 = m.clone();
    rt.block_on(move || {
        assert!(m3.try_lock().is_none());
        assert!(m3.is_locked());
        let t0 = Instant::now();
        assert!(m3.lock_timeout(Duration::from_millis(50)).is_none());
        let e = t0.elapsed();
        assert!(e >= Duration::from_millis(50), "returned early: {e:?}");
        assert!(e < PATIENCE, "late: {e:?}");
    });
    // From an OS thread too.
    let t0 = Instant::now();
    assert!(m.lock_timeout(Duration::from_millis(20)).is_none());
    assert!(t0.elapsed() >= Duration::from_millis(20));
    // A long timeout succeeds once the holder lets go.
    let m4 = m.clone();
    let_go.send(()).unwrap();
    let v = rt.block_on(move || *m4.lock_timeout(PATIENCE).expect("got it"));
    assert_eq!(v, 5);
    holder.join().unwrap();
    let mut m = Arc::try_unwrap(m).unwrap();
    *m.get_mut() += 1;
    assert_eq!(*m.try_lock().unwrap(), 6);
    assert_eq!(m.into_inner(), 6);
}

/// Short timed locks racing with hand-offs: a waiter that times out just as the lock is
/// handed to it must keep it (or the mutex stays locked forever and this hangs).
#[test]
fn mutex_timed_locks_racing_with_hand_off_lose_nothing() {
    let rt = rt(2);
    let m = Arc::new(Mutex::new(0u64));
    let got = Arc::new(AtomicU64::new(0));
    let (m2, got2) = (m.clone(), got.clone());
    run_mixed(&rt, 6, 1, move |i| {
        for k in 0..1_500u32 {
            if let Some(mut g) = m2.lock_timeout(Duration::from_micros(20 + (k % 7) as u64 * 10)) {
                *g += 1;
                got2.fetch_add(1, Relaxed);
                if (k + i as u32).is_multiple_of(8) {
                    yield_now();
                }
            }
        }
    });
    assert_eq!(*m.lock(), got.load(Relaxed));
    assert!(m.try_lock().is_some(), "the mutex ended unlocked");
}

/// A bounded buffer built from a mutex and two condition variables (notify_one), with
/// producers and consumers on both workers and on OS threads: exact accounting.
#[test]
fn condvar_notify_one_bounded_buffer_across_workers_and_os_threads() {
    let rt = rt(2);
    const PRODUCERS: usize = 4; // 3 green + 1 OS
    const PER: u64 = 1_000;
    struct Q {
        buf: std::collections::VecDeque<u64>,
        done_producers: usize,
    }
    let shared = Arc::new((
        Mutex::new(Q {
            buf: Default::default(),
            done_producers: 0,
        }),
        Condvar::new(), // not empty
        Condvar::new(), // not full
    ));
    let sum = Arc::new(AtomicU64::new(0));
    let count = Arc::new(AtomicU64::new(0));
    let (s2, sum2, count2) = (shared.clone(), sum.clone(), count.clone());
    // Indices 0..3 and 6 produce (6 is the first OS thread), 3..6 and 7 consume.
    run_mixed(&rt, 6, 2, move |i| {
        let (m, not_empty, not_full) = &*s2;
        let producer = i < 3 || i == 6;
        if producer {
            for k in 0..PER {
                let mut q = not_full.wait_while(m.lock(), |q| q.buf.len() >= 2);
                q.buf.push_back(k);
                drop(q);
                not_empty.notify_one();
            }
            m.lock().done_producers += 1;
            not_empty.notify_all();
        } else {
            loop {
                let mut q = not_empty.wait_while(m.lock(), |q| {
                    q.buf.is_empty() && q.done_producers < PRODUCERS
                });
                let Some(v) = q.buf.pop_front() else {
                    break; // empty and every producer is done
                };
                drop(q);
                not_full.notify_one();
                sum2.fetch_add(v, Relaxed);
                count2.fetch_add(1, Relaxed);
            }
        }
    });
    assert_eq!(count.load(Relaxed), PRODUCERS as u64 * PER);
    assert_eq!(sum.load(Relaxed), PRODUCERS as u64 * (PER * (PER - 1) / 2));
}

/// Round after round, every waiter (green on both workers, and OS threads) is parked
/// on the condvar, and one notify_all must wake them all.
#[test]
fn condvar_notify_all_wakes_every_waiter() {
    let rt = rt(2);
    const GREEN: usize = 6;
    const OS: usize = 2;
    const N: usize = GREEN + OS;
    const ROUNDS: u64 = 30;
    struct S {
        round: u64,
        waiting: usize,
    }
    let shared = Arc::new((
        Mutex::new(S {
            round: 0,
            waiting: 0,
        }),
        Condvar::new(),
    ));
    let woke = Arc::new(AtomicUsize::new(0));
    let (s2, woke2) = (shared.clone(), woke.clone());
    let waiters = std::thread::spawn({
        let rt_handle = Arc::new(rt);
        let rt2 = rt_handle.clone();
        move || {
            run_mixed(&rt2, GREEN, OS, move |_| {
                let (m, cv) = &*s2;
                for r in 1..=ROUNDS {
                    let mut g = m.lock();
                    g.waiting += 1;
                    let g = cv.wait_while(g, |s| s.round < r);
                    drop(g);
                    woke2.fetch_add(1, SeqCst);
                }
            });
            rt_handle
        }
    });
    let (m, cv) = &*shared;
    for r in 1..=ROUNDS {
        // Wait until all N are parked in round r (they register before unlocking).
        let deadline = Instant::now() + PATIENCE;
        loop {
            let mut g = m.lock();
            if g.waiting == N {
                g.waiting = 0;
                g.round = r;
                drop(g);
                cv.notify_all();
                break;
            }
            drop(g);
            assert!(Instant::now() < deadline, "waiters did not all arrive");
            std::thread::sleep(Duration::from_micros(200));
        }
        let deadline = Instant::now() + PATIENCE;
        while woke.load(SeqCst) < N * r as usize {
            assert!(
                Instant::now() < deadline,
                "notify_all woke {} of {N} in round {r}",
                woke.load(SeqCst) - N * (r as usize - 1)
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    drop(waiters.join().unwrap());
}

#[test]
fn condvar_wait_timeout_honours_the_timeout_and_reports_notifications() {
    let rt = rt(2);
    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p2 = pair.clone();
    rt.block_on(move || {
        let (m, cv) = &*p2;
        // Nobody notifies: times out, not before the timeout.
        let t0 = Instant::now();
        let (g, timed_out) = cv.wait_timeout(m.lock(), Duration::from_millis(50));
        let e = t0.elapsed();
        assert!(timed_out);
        assert!(e >= Duration::from_millis(50), "returned early: {e:?}");
        assert!(e < PATIENCE, "late: {e:?}");
        drop(g);
        // Notified from the other worker after 20 ms: not a timeout.
        let p3 = p2.clone();
        let n = spawn_on(1, move || {
            sleep(Duration::from_millis(20));
            *p3.0.lock() = true;
            p3.1.notify_one();
        });
        let (g, timed_out) = cv.wait_timeout_while(m.lock(), PATIENCE, |ready| !*ready);
        assert!(!timed_out);
        assert!(*g);
        drop(g);
        n.join().unwrap();
        // wait_timeout_while whose condition never turns: times out with it still true.
        let t0 = Instant::now();
        let (_g, timed_out) =
            cv.wait_timeout_while(m.lock(), Duration::from_millis(30), |ready| *ready);
        assert!(timed_out);
        assert!(t0.elapsed() >= Duration::from_millis(30));
    });
    // And on an OS thread.
    let (m, cv) = &*pair;
    let t0 = Instant::now();
    let (_g, timed_out) = cv.wait_timeout(m.lock(), Duration::from_millis(30));
    assert!(timed_out);
    assert!(t0.elapsed() >= Duration::from_millis(30));
}

#[test]
fn semaphore_limits_concurrency_across_workers_and_os_threads() {
    let rt = rt(2);
    const PERMITS: usize = 3;
    let sem = Arc::new(Semaphore::new(PERMITS));
    let inflight = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicUsize::new(0));
    let (s2, in2, max2, total2) = (sem.clone(), inflight.clone(), max.clone(), total.clone());
    run_mixed(&rt, 8, 2, move |i| {
        for k in 0..400 {
            let p = if k % 5 == 0 {
                match s2.acquire_timeout(Duration::from_micros(50)) {
                    Some(p) => p,
                    None => continue,
                }
            } else {
                s2.acquire()
            };
            let now = in2.fetch_add(1, SeqCst) + 1;
            assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
            max2.fetch_max(now, SeqCst);
            if (k + i) % 4 == 0 {
                yield_now();
            }
            in2.fetch_sub(1, SeqCst);
            total2.fetch_add(1, SeqCst);
            drop(p);
        }
    });
    assert_eq!(sem.available_permits(), PERMITS, "every permit came back");
    assert!(total.load(SeqCst) > 0);
    assert!(max.load(SeqCst) <= PERMITS);
}

#[test]
fn semaphore_try_acquire_timeout_hand_off_and_add_permits() {
    let rt = rt(2);
    rt.block_on(|| {
        let sem = Arc::new(Semaphore::new(1));
        let p = sem.acquire();
        assert_eq!(sem.available_permits(), 0);
        assert!(sem.try_acquire().is_none());
        let t0 = Instant::now();
        assert!(sem.acquire_timeout(Duration::from_millis(40)).is_none());
        assert!(t0.elapsed() >= Duration::from_millis(40));
        // A waiter on the other worker gets the permit handed over when it is dropped.
        let s2 = sem.clone();
        let w = spawn_on(1, move || {
            let p = s2.acquire();
            p.forget(); // keep it: it is given back with release() below
        });
        sleep(Duration::from_millis(20));
        assert!(!w.is_finished());
        drop(p);
        w.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
        sem.release();
        assert_eq!(sem.available_permits(), 1);
        sem.add_permits(2);
        assert_eq!(sem.available_permits(), 3);
        let _a = sem.try_acquire().unwrap();
        assert_eq!(sem.available_permits(), 2);
    });
    // Plain OS thread waiting for a green thread's release.
    let sem = Arc::new(Semaphore::new(0));
    let s2 = sem.clone();
    let h = rt.spawn_on(0, move || {
        sleep(Duration::from_millis(20));
        s2.add_permits(1);
    });
    let p = sem.acquire_timeout(PATIENCE);
    assert!(p.is_some());
    h.join().unwrap();
}

#[test]
fn barrier_generations_across_workers_and_os_threads() {
    let rt = rt(2);
    const GREEN: usize = 4;
    const OS: usize = 2;
    const N: usize = GREEN + OS;
    const GENS: usize = 300;
    let b = Arc::new(Barrier::new(N));
    let arrived: Arc<Vec<AtomicUsize>> = Arc::new((0..GENS).map(|_| AtomicUsize::new(0)).collect());
    let leaders: Arc<Vec<AtomicUsize>> = Arc::new((0..GENS).map(|_| AtomicUsize::new(0)).collect());
    let (b2, a2, l2) = (b.clone(), arrived.clone(), leaders.clone());
    run_mixed(&rt, GREEN, OS, move |i| {
        for g in 0..GENS {
            a2[g].fetch_add(1, SeqCst);
            if (g + i) % 3 == 0 {
                yield_now();
            }
            let r = b2.wait();
            assert_eq!(a2[g].load(SeqCst), N, "released from generation {g} early");
            if r.is_leader() {
                l2[g].fetch_add(1, SeqCst);
            }
        }
    });
    for g in 0..GENS {
        assert_eq!(leaders[g].load(SeqCst), 1, "generation {g} had one leader");
    }
    assert_eq!(b.generation(), GENS as u64);
}

#[test]
fn barrier_of_one_never_waits() {
    let b = Barrier::new(1);
    assert!(b.wait().is_leader());
    assert!(b.wait().is_leader());
    assert!(Barrier::new(0).wait().is_leader());
}

/// Every test of this file again under valgrind's memcheck, in one process: no invalid
/// access, no use of uninitialised memory (the fiber core registers its stacks with
/// valgrind, so memcheck follows the switches).
#[test]
fn sync_tests_run_clean_under_memcheck() {
    common::memcheck_this_binary(&["sync_tests_run_clean_under_memcheck"]);
}
