//! The runtime's core: spawning, joining, yielding, sleeping, waking across workers,
//! panics, and shutdown.

use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::park::{park, Unparker};
use weft_runtime::{current_worker, sleep, spawn, spawn_on, yield_now, Runtime};

fn rt(n: usize) -> Runtime {
    Runtime::builder().workers(n).build().unwrap()
}

#[test]
fn block_on_returns_the_value_and_spawned_threads_join() {
    let rt = rt(2);
    let sum = rt.block_on(|| {
        let hs: Vec<_> = (0..100u64).map(|i| spawn(move || i * 2)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 9900);
}

#[test]
fn a_panic_in_a_green_thread_reaches_its_joiner_and_the_worker_goes_on() {
    let rt = rt(1);
    let seven = std::hint::black_box(7);
    let r = rt.block_on(move || spawn(move || -> u32 { panic!("boom {seven}") }).join());
    let p = r.unwrap_err();
    assert_eq!(
        p.downcast_ref::<String>().map(String::as_str),
        Some("boom 7")
    );
    assert_eq!(rt.block_on(|| 5), 5, "the worker survived the panic");
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(|| panic!("from block_on"))
    }));
    assert!(caught.is_err(), "block_on resumes the panic in the caller");
}

#[test]
fn yield_interleaves_threads_of_one_worker() {
    let rt = rt(1);
    let log = rt.block_on(|| {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let log = log.clone();
                spawn_on(0, move || {
                    for r in 0..3 {
                        log.lock().unwrap().push((r, i));
                        yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    });
    // Round r of every thread comes before round r+1 of any.
    for w in log.windows(2) {
        assert!(w[0].0 <= w[1].0, "not round-robin: {log:?}");
    }
    assert_eq!(log.len(), 9);
}

#[test]
fn sleep_parks_only_the_green_thread() {
    let rt = rt(1);
    let (slept, ticks) = rt.block_on(|| {
        let ticks = Arc::new(AtomicUsize::new(0));
        let t2 = ticks.clone();
        let busy = spawn_on(0, move || {
            let end = Instant::now() + Duration::from_millis(100);
            while Instant::now() < end {
                t2.fetch_add(1, Relaxed);
                yield_now();
            }
        });
        let t0 = Instant::now();
        sleep(Duration::from_millis(50));
        let slept = t0.elapsed();
        busy.join().unwrap();
        (slept, ticks.load(Relaxed))
    });
    assert!(slept >= Duration::from_millis(50), "{slept:?}");
    assert!(slept < Duration::from_secs(5), "{slept:?}");
    assert!(
        ticks > 10,
        "the other green thread ran while this one slept ({ticks})"
    );
}

#[test]
fn spawn_on_places_threads_and_they_stay() {
    let rt = rt(2);
    let r = rt.block_on(|| {
        let a = spawn_on(0, || {
            let w = current_worker();
            for _ in 0..100 {
                yield_now();
                assert_eq!(current_worker(), w);
            }
            w
        });
        let b = spawn_on(1, current_worker);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(r, (Some(0), Some(1)));
}

#[test]
fn wakeups_across_workers_are_not_lost() {
    // A token passed around a ring of green threads on both workers, many times: a lost
    // wake-up hangs the ring.
    let rt = rt(2);
    const N: usize = 8;
    const ROUNDS: usize = 20_000;
    rt.block_on(|| {
        let turn = Arc::new(AtomicUsize::new(0));
        let slots: Arc<Vec<std::sync::Mutex<Option<Unparker>>>> =
            Arc::new((0..N).map(|_| std::sync::Mutex::new(None)).collect());
        let hs: Vec<_> = (0..N)
            .map(|i| {
                let (turn, slots) = (turn.clone(), slots.clone());
                spawn_on(i % 2, move || {
                    *slots[i].lock().unwrap() = Some(Unparker::current());
                    for _ in 0..ROUNDS {
                        while turn.load(Acquire) % N != i {
                            park();
                        }
                        let next = (i + 1) % N;
                        turn.fetch_add(1, Release);
                        loop {
                            if let Some(u) = slots[next].lock().unwrap().as_ref() {
                                u.unpark();
                                break;
                            }
                            yield_now();
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(turn.load(Relaxed), N * ROUNDS);
    });
}

#[test]
fn shutdown_unwinds_parked_threads_and_drops_unstarted_ones() {
    struct Flag(Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let rt = rt(2);
    let mut handles = Vec::new();
    for i in 0..10 {
        let f = Flag(dropped.clone());
        let started = started.clone();
        handles.push(rt.spawn_on(i % 2, move || {
            let _f = f;
            started.fetch_add(1, SeqCst);
            loop {
                park(); // never woken
            }
        }));
    }
    while started.load(SeqCst) < 10 {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(rt);
    assert_eq!(
        dropped.load(SeqCst),
        10,
        "every parked thread's stack was unwound"
    );
    for h in handles {
        let e = h.join().unwrap_err();
        assert!(e.is::<weft_runtime::Shutdown>());
    }
}
