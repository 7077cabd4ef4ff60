//! The runtime's core: spawning, joining, yielding, sleeping, waking across workers,
//! panics, and shutdown.

mod common;
use common::{wait_until, Flag, PATIENCE};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::park::{park, Unparker};
use weft_runtime::{current_worker, sleep, spawn, spawn_on, yield_now, Runtime, ThreadBuilder};

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
    // One worker: a green thread ticks and yields until the other is back from its sleep.
    // It can tick while the other sleeps only if that sleep left the worker free.
    let rt = rt(1);
    let (slept, ticks_during_the_sleep) = rt.block_on(|| {
        let ticks = Arc::new(AtomicUsize::new(0));
        let awake = Arc::new(AtomicBool::new(false));
        let (t2, a2) = (ticks.clone(), awake.clone());
        let busy = spawn_on(0, move || {
            while !a2.load(SeqCst) {
                t2.fetch_add(1, SeqCst);
                yield_now();
            }
        });
        let before = ticks.load(SeqCst);
        let t0 = Instant::now();
        sleep(Duration::from_millis(50));
        let slept = t0.elapsed();
        let during = ticks.load(SeqCst) - before;
        awake.store(true, SeqCst);
        busy.join().unwrap();
        (slept, during)
    });
    assert!(slept >= Duration::from_millis(50), "woke early: {slept:?}");
    assert!(slept < PATIENCE, "{slept:?}");
    assert!(
        ticks_during_the_sleep > 0,
        "the other green thread never ran while this one slept"
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
    // Every hand-off crosses workers (neighbours alternate). 160,000 wake-ups by
    // default; WEFT_STRESS_FULL=1 runs 2,000,000.
    const N: usize = 8;
    let rounds: usize = if std::env::var_os("WEFT_STRESS_FULL").is_some() {
        250_000
    } else {
        20_000
    };
    rt.block_on(move || {
        let turn = Arc::new(AtomicUsize::new(0));
        let slots: Arc<Vec<std::sync::Mutex<Option<Unparker>>>> =
            Arc::new((0..N).map(|_| std::sync::Mutex::new(None)).collect());
        let hs: Vec<_> = (0..N)
            .map(|i| {
                let (turn, slots) = (turn.clone(), slots.clone());
                spawn_on(i % 2, move || {
                    *slots[i].lock().unwrap() = Some(Unparker::current());
                    for _ in 0..rounds {
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
        assert_eq!(turn.load(Relaxed), N * rounds);
    });
}

#[test]
fn shutdown_unwinds_parked_threads() {
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

/// A thread parked in `join` of a thread that is itself parked forever: shutdown unwinds
/// both (in whichever order), and the joiner's published waiter is taken back as it leaves
/// (`task::JoinCell`): had the joined thread's completion still found it, it would have
/// read it from the joiner's stack, freed (and reusable) by then. Also run under
/// valgrind's memcheck (below).
#[test]
fn shutdown_unwinds_a_thread_joining_a_parked_thread() {
    for (tw, jw) in [(0, 0), (0, 1), (1, 0)] {
        let dropped = Arc::new(AtomicUsize::new(0));
        let rt = rt(2);
        let (f1, f2) = (Flag(dropped.clone()), Flag(dropped.clone()));
        let target = rt.spawn_on(tw, move || {
            let _f = f1;
            loop {
                park(); // never woken
            }
        });
        let tid = target.id();
        let joined = Arc::new(AtomicUsize::new(0));
        let j2 = joined.clone();
        let joiner = rt.spawn_on(jw, move || {
            let _f = f2;
            j2.store(1, SeqCst);
            let r = target.join();
            j2.store(2, SeqCst);
            r.is_err()
        });
        // Both have been switched out (after the flag, the joiner's next step is its
        // join): parked, the joined one for good, the joiner in its join.
        let jid = joiner.id();
        wait_until("both threads parked", || {
            joined.load(SeqCst) == 1
                && [tid, jid]
                    .iter()
                    .all(|&id| common::fiber(id).is_some_and(|f| f.deactivations >= 1))
        });
        drop(rt);
        assert_eq!(
            dropped.load(SeqCst),
            2,
            "both stacks were unwound ({tw}, {jw})"
        );
        // Either the joiner was unwound in its join (its handle reports the shutdown),
        // or the joined thread was unwound first and the join returned its shutdown
        // as an error (then the joiner went on and returned).
        match (joined.load(SeqCst), joiner.join()) {
            (1, Err(e)) => assert!(e.is::<weft_runtime::Shutdown>(), "({tw}, {jw})"),
            (2, Ok(joined_err)) => assert!(joined_err, "({tw}, {jw})"),
            (j, r) => panic!(
                "({tw}, {jw}): joined {j}, joiner {:?}",
                r.map_err(|_| "panic")
            ),
        }
    }
}

/// Runs `release` on another OS thread once the calling thread has gone to sleep in the
/// kernel for good: for the tests below, once it waits in `Runtime::drop` for the
/// workers, that is, after the drop has set the shutdown flag. ("For good": asleep at
/// every look for 20 looks in a row; a brief wait, for a lock in malloc say, ends
/// sooner.)
fn release_once_this_thread_waits(
    release: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    std::thread::spawn(move || {
        let stat = format!("/proc/self/task/{tid}/stat");
        // The state is the first field after the command name, which is in parentheses.
        let asleep = || {
            std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| Some(s[s.rfind(')')? + 1..].trim_start().starts_with('S')))
                .unwrap_or(false)
        };
        let mut looks = 0;
        wait_until("the dropping thread waits for its workers", || {
            looks = if asleep() { looks + 1 } else { 0 };
            looks >= 20
        });
        release();
    })
}

#[test]
fn shutdown_drops_never_run_threads() {
    let dropped = Arc::new(AtomicUsize::new(0));
    // Never-run threads: queued behind a thread that holds the only worker (preemption
    // off) until after the shutdown has begun. They never start; their closures (and
    // what those captured) are dropped and their join handles report `Shutdown`.
    let rt = Runtime::builder()
        .workers(1)
        .preempt(false)
        .build()
        .unwrap();
    // 0: not started; 1: holding the worker; 2: told to let go (once the drop below
    // has begun the shutdown).
    let holding = Arc::new(AtomicUsize::new(0));
    let h2 = holding.clone();
    let holder = rt.spawn(move || {
        h2.store(1, SeqCst);
        while h2.load(SeqCst) != 2 {
            std::hint::spin_loop();
        }
        park(); // the runtime is shutting down: this unwinds
    });
    while holding.load(SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let ran = Arc::new(AtomicUsize::new(0));
    let queued: Vec<_> = (0..5)
        .map(|_| {
            let (f, ran) = (Flag(dropped.clone()), ran.clone());
            rt.spawn(move || {
                let _f = f;
                ran.fetch_add(1, SeqCst);
            })
        })
        .collect();
    // Drop sets the shutdown flag at once, then waits for the worker; the holder lets go
    // once this thread waits there.
    let h3 = holding.clone();
    let releaser = release_once_this_thread_waits(move || h3.store(2, SeqCst));
    drop(rt);
    releaser.join().unwrap();
    assert_eq!(
        ran.load(SeqCst),
        0,
        "a never-run thread started after shutdown began"
    );
    assert_eq!(
        dropped.load(SeqCst),
        5,
        "the never-run closures were dropped"
    );
    assert!(holder.join().unwrap_err().is::<weft_runtime::Shutdown>());
    for h in queued {
        assert!(h.join().unwrap_err().is::<weft_runtime::Shutdown>());
    }
}

/// On the only worker of `rt`, a green thread spins with no runtime call until a ticker
/// beside it on the same worker has had `ticks` turns while it spun (the ticker yields
/// between turns, so each turn needs the spinner switched out again), then is told to
/// stop. Whether the ticker stopped the spinner; `false` if the spinner gave up after
/// PATIENCE, the ticker having had too few turns.
fn a_ticker_stops_a_spinner(rt: &Runtime, ticks: usize) -> bool {
    rt.block_on(move || {
        spawn_on(0, move || {
            let spinning = Arc::new(AtomicBool::new(true));
            let stop = Arc::new(AtomicBool::new(false));
            let (sp, st) = (spinning.clone(), stop.clone());
            let ticker = spawn_on(0, move || {
                let mut n = 0;
                while n < ticks && sp.load(SeqCst) {
                    n += 1;
                    yield_now();
                }
                st.store(true, SeqCst);
            });
            let t0 = Instant::now();
            let mut x = 0u64;
            'spin: while !stop.load(Relaxed) {
                for _ in 0..4096 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                    if stop.load(Relaxed) {
                        break 'spin;
                    }
                }
                if t0.elapsed() > PATIENCE {
                    break;
                }
            }
            let stopped = stop.load(SeqCst);
            spinning.store(false, SeqCst);
            ticker.join().unwrap();
            stopped
        })
        .join()
        .unwrap()
    })
}

/// On the only worker of `rt`, a green thread spawned `preemptible` (or not) spawns a
/// ticker on the same worker, then spins with no runtime call for `spin` (wall time: how
/// long it gives the ticker to cut in). Whether the ticker ran before the spinner was
/// done.
fn the_ticker_ran_before_the_spinner_was_done(
    rt: &Runtime,
    preemptible: bool,
    spin: Duration,
) -> bool {
    rt.block_on(move || {
        ThreadBuilder::new()
            .preemptible(preemptible)
            .spawn_on(0, move || {
                let done = Arc::new(AtomicBool::new(false));
                let d2 = done.clone();
                let ticker = spawn_on(0, move || !d2.load(SeqCst));
                let t0 = Instant::now();
                while t0.elapsed() < spin {
                    std::hint::black_box(0);
                }
                done.store(true, SeqCst);
                ticker.join().unwrap()
            })
            .unwrap()
            .join()
            .unwrap()
    })
}

#[test]
fn a_thread_that_never_yields_does_not_starve_its_worker() {
    // One worker: a green thread spins without any runtime call until another green
    // thread on the same worker has run 5 times beside it, yielding in between.
    assert!(
        a_ticker_stops_a_spinner(&rt(1), 5),
        "the ticker did not get 5 turns beside a spinner in {PATIENCE:?}"
    );
}

#[test]
fn without_preemption_the_spinner_keeps_its_worker() {
    let rt = Runtime::builder()
        .workers(1)
        .preempt(false)
        .build()
        .unwrap();
    assert!(
        !the_ticker_ran_before_the_spinner_was_done(&rt, true, Duration::from_millis(200)),
        "something preempted the spinner"
    );
    // The same setup with preemption: the ticker cuts in.
    assert!(
        a_ticker_stops_a_spinner(&rt_preempting(), 1),
        "preemption: the ticker never ran beside the spinner in {PATIENCE:?}"
    );
}

fn rt_preempting() -> Runtime {
    Runtime::builder().workers(1).preempt(true).build().unwrap()
}

#[test]
fn a_std_mutex_held_by_a_preempted_thread_does_not_deadlock_its_worker() {
    // A holds a std::sync::Mutex while it spins and is preempted; B, on the same single
    // worker, then blocks the OS thread in futex on that mutex. The preemption signal
    // switches B out of its futex wait (module worker/preempt.rs), A finishes and
    // unlocks, and B gets the lock.
    let rt = rt_preempting();
    let order = rt.block_on(|| {
        let m = Arc::new(std::sync::Mutex::new(Vec::new()));
        let m2 = m.clone();
        spawn_on(0, move || {
            let mut g = m2.lock().unwrap();
            let m3 = m2.clone();
            let b_started = Arc::new(AtomicBool::new(false));
            let b2 = b_started.clone();
            let b = spawn_on(0, move || {
                b2.store(true, SeqCst);
                m3.lock().unwrap().push("b")
            });
            // Spin (holding the lock) until B has started: B ran because A was
            // preempted, then went on to block in the lock; A sees the flag only once B
            // has been switched out of that wait.
            let t0 = Instant::now();
            while !b_started.load(SeqCst) {
                assert!(t0.elapsed() < PATIENCE, "B never ran beside the spinning A");
                std::hint::black_box(0);
            }
            g.push("a");
            drop(g);
            b
        })
        .join()
        .unwrap()
        .join()
        .unwrap();
        let v = m.lock().unwrap().clone();
        v
    });
    assert_eq!(order, vec!["a", "b"]);
}

#[test]
fn unstarted_threads_of_a_blocked_worker_are_taken_by_another() {
    // Worker 0's only running thread spawns more work there, then blocks its OS thread
    // in plain sleeps (no weft call) until that work has run: the monitor must wake
    // worker 1, which steals the never-run threads. The blocker is not preemptible, so
    // the signal never switches it out and worker 0 stays blocked.
    let rt = Runtime::builder().workers(2).preempt(true).build().unwrap();
    let ran = rt.block_on(|| {
        ThreadBuilder::new()
            .preemptible(false)
            .spawn_on(0, || {
                let blocked = Arc::new(AtomicBool::new(false));
                let ran = Arc::new(AtomicUsize::new(0));
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        let (b, r) = (blocked.clone(), ran.clone());
                        spawn(move || {
                            r.fetch_add(1, SeqCst);
                            (current_worker(), b.load(SeqCst))
                        })
                    })
                    .collect();
                blocked.store(true, SeqCst);
                let t0 = Instant::now();
                while ran.load(SeqCst) < 4 {
                    if t0.elapsed() > PATIENCE {
                        break; // the assertions below report it
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                blocked.store(false, SeqCst);
                hs
            })
            .unwrap()
            .join()
            .unwrap()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    // A spawn is a preemption point: had the monitor flagged the blocker while it was
    // spawning, a thread may have run on worker 0 before it blocked. Every thread that
    // ran while it was blocked must have run on worker 1, and some did.
    let while_blocked: Vec<_> = ran.iter().filter(|r| r.1).map(|r| r.0).collect();
    assert!(
        !while_blocked.is_empty(),
        "no never-run thread ran while worker 0 was blocked (for {PATIENCE:?}): {ran:?}"
    );
    assert!(while_blocked.iter().all(|w| *w == Some(1)), "{ran:?}");
}

#[test]
fn green_threads_are_in_the_introspection_registry() {
    // What `weft ps` reads: every green thread is a fiber with its activations and the
    // OS thread (a worker) it last ran on.
    let rt = rt(2);
    let stop = Arc::new(AtomicBool::new(false));
    let back = Arc::new(AtomicUsize::new(0));
    let hs: Vec<_> = (0..20)
        .map(|i| {
            let (stop, back) = (stop.clone(), back.clone());
            rt.spawn_on(i % 2, move || {
                let mut first = true;
                while !stop.load(Relaxed) {
                    sleep(Duration::from_millis(1));
                    if std::mem::take(&mut first) {
                        back.fetch_add(1, SeqCst);
                    }
                }
            })
        })
        .collect();
    // Each has run, parked in a sleep and run again: at least 2 activations.
    wait_until("every green thread back from a sleep", || {
        back.load(SeqCst) == 20
    });
    let snap = weft_fiber::introspect::read(std::process::id() as i32).unwrap();
    for h in &hs {
        let f = snap
            .fibers
            .iter()
            .find(|f| f.id == h.id())
            .unwrap_or_else(|| panic!("green thread {} not in the registry", h.id()));
        assert!(f.activations >= 2, "{f:?}");
        assert_ne!(f.last_tid, 0);
        assert!(!f.is_thread_fiber);
    }
    stop.store(true, Relaxed);
    let ids: Vec<u64> = hs.iter().map(|h| h.id()).collect();
    for h in hs {
        h.join().unwrap();
    }
    // A joiner may look a moment before the finished thread's slot is freed (by the
    // context that runs after it).
    let mut left = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < PATIENCE {
        let snap = weft_fiber::introspect::read(std::process::id() as i32).unwrap();
        left = snap
            .fibers
            .into_iter()
            .filter(|f| ids.contains(&f.id))
            .collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        left.is_empty(),
        "finished green threads leave the registry: {left:?}"
    );
}

/// A green thread's body that parks until `stop`.
fn parked(stop: Arc<AtomicBool>) -> impl FnOnce() + Send + 'static {
    move || {
        while !stop.load(Relaxed) {
            sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn green_threads_show_their_name_and_spawn_site() {
    // What `weft ps` shows of a green thread: the call that spawned it (every spawn
    // function passes its caller's location on), its closure's type, and its name.
    let rt = Runtime::builder()
        .workers(2)
        .name("labels-rt")
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut expect: Vec<(u64, u32, Option<&str>)> = Vec::new();
    let mut hs = Vec::new();
    let mut add = |h: weft_runtime::JoinHandle<()>, line: u32, name: Option<&'static str>| {
        expect.push((h.id(), line, name));
        hs.push(h);
    };
    let line = line!() + 1;
    let h = rt.spawn(parked(stop.clone()));
    add(h, line, None);
    let line = line!() + 1;
    let h = rt.spawn_on(1, parked(stop.clone()));
    add(h, line, None);
    let b = ThreadBuilder::new().name("built");
    let line = line!() + 1;
    let h = b.spawn_in(&rt, parked(stop.clone()));
    add(h.unwrap(), line, Some("built"));
    let b = ThreadBuilder::new().name("built on 0");
    let line = line!() + 1;
    let h = b.spawn_on_in(&rt, 0, parked(stop.clone()));
    add(h.unwrap(), line, Some("built on 0"));
    // From inside: the free functions and the builder's own spawns.
    let s2 = stop.clone();
    let block_on_line = line!() + 1;
    let (inner, me) = rt.block_on(move || {
        assert!(weft_runtime::set_name("block-on"));
        let mut v = Vec::new();
        let line = line!() + 1;
        let h = spawn(parked(s2.clone()));
        v.push((h, line, None));
        let line = line!() + 1;
        let h = spawn_on(1, parked(s2.clone()));
        v.push((h, line, None));
        let b = ThreadBuilder::new().name("inner");
        let line = line!() + 1;
        let h = b.spawn(parked(s2.clone()));
        v.push((h.unwrap(), line, Some("inner")));
        let b = ThreadBuilder::new().name("inner on 1");
        let line = line!() + 1;
        let h = b.spawn_on(1, parked(s2.clone()));
        v.push((h.unwrap(), line, Some("inner on 1")));
        let me = weft_fiber::introspect::read(0)
            .unwrap()
            .fibers
            .into_iter()
            .find(|f| Some(f.id) == weft_fiber::current_id())
            .expect("the block_on thread is listed");
        (v, me)
    });
    for (h, line, name) in inner {
        add(h, line, name);
    }
    assert_eq!(me.name.as_deref(), Some("block-on"), "it named itself");
    assert!(
        !weft_runtime::set_name("x"),
        "a plain thread has nothing to name"
    );
    let at = me.spawned_at.as_ref().expect("block_on records its caller");
    assert_eq!(
        (at.file.as_str(), at.line),
        (file!(), block_on_line),
        "{me:?}"
    );
    assert!(
        me.function.as_deref().is_some_and(
            |f| f.starts_with("runtime::green_threads_show_their_name_and_spawn_site::")
        ),
        "{me:?}"
    );

    let snap = weft_fiber::introspect::read(0).unwrap();
    for (id, line, name) in &expect {
        let f = snap
            .fibers
            .iter()
            .find(|f| f.id == *id)
            .unwrap_or_else(|| panic!("green thread {id} not in the registry"));
        assert_eq!(f.name.as_deref(), *name, "{f:?}");
        assert_eq!(
            f.function.as_deref(),
            Some("runtime::parked::{{closure}}"),
            "{f:?}"
        );
        let at = f.spawned_at.as_ref().expect("a spawn site");
        assert_eq!((at.file.as_str(), at.line), (file!(), *line), "{f:?}");
    }
    // The workers' own fibers carry their threads' names, once each worker has started
    // (a loaded machine may not have run worker 1 yet: eventually, not at once).
    for w in ["labels-rt-0", "labels-rt-1"] {
        let named = |snap: &weft_fiber::introspect::Snapshot| {
            snap.fibers
                .iter()
                .any(|f| f.is_thread_fiber && f.name.as_deref() == Some(w))
        };
        let t0 = std::time::Instant::now();
        while !named(&weft_fiber::introspect::read(0).unwrap()) {
            assert!(t0.elapsed() < PATIENCE, "no worker fiber named {w}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    stop.store(true, Relaxed);
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn shutdown_leaks_nothing_under_valgrind() {
    // The shutdown tests above, run again in this same binary under valgrind's
    // memcheck: no invalid access, nothing definitely lost (unwound stacks, freed fibers
    // and records). (The never-run test relies on timing that valgrind's one-thread-at-
    // a-time scheduling breaks; a leak there shows as a wrong drop count instead.) One
    // process per test keeps each run short. (What once looked like glibc handing a
    // second runtime the first one's thread stacks was memcheck's view of cached fiber
    // stacks: the fiber core now registers every stack and marks a reused one
    // addressable, `weft_fiber`'s `valgrind.rs`, and the whole binary runs clean in one
    // process, but for the tests that measure time.)
    for test in [
        "shutdown_unwinds_parked_threads",
        "shutdown_unwinds_a_thread_joining_a_parked_thread",
    ] {
        common::run_under_memcheck(
            &["--leak-check=full", "--errors-for-leak-kinds=definite"],
            &[test, "--exact", "--test-threads=1"],
            "1 passed",
        );
    }
}

#[test]
fn a_thread_spawned_not_preemptible_keeps_its_worker_and_bad_stacks_are_errors() {
    // The same spinner as above, spawned with preemption off in a preempting runtime:
    // the other thread waits for it.
    let rt = rt_preempting();
    assert!(
        !the_ticker_ran_before_the_spinner_was_done(&rt, false, Duration::from_millis(200)),
        "the thread spawned not preemptible was preempted"
    );
    // A stack the machine cannot map is an error, not a panic or an abort.
    let e = weft_runtime::ThreadBuilder::new()
        .stack_size(1 << 50)
        .spawn_in(&rt, || ())
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::OutOfMemory, "{e}");
    // And a small stack works.
    let h = weft_runtime::ThreadBuilder::new()
        .stack_size(32 * 1024)
        .spawn_in(&rt, || 7)
        .unwrap();
    assert_eq!(h.join().unwrap(), 7);
}

#[test]
fn spawn_on_threads_are_never_stolen() {
    // Worker 1 is busy (a spinner that never yields, preemption off) while threads are
    // spawned onto it; worker 0 is idle and steals what it may. Threads placed with
    // spawn_on must still run on worker 1, later.
    let rt = Runtime::builder()
        .workers(2)
        .preempt(false)
        .build()
        .unwrap();
    // The test body runs on worker 0 and parks (weft's sleep), so worker 0 idles and
    // tries to steal.
    let on = rt.spawn_on(0, || {
        let go = Arc::new(AtomicBool::new(false));
        let spinning = Arc::new(AtomicBool::new(false));
        let (g2, s2) = (go.clone(), spinning.clone());
        let spinner = spawn_on(1, move || {
            s2.store(true, SeqCst);
            while !g2.load(Relaxed) {
                std::hint::spin_loop();
            }
        });
        wait_until("the spinner holds worker 1", || spinning.load(SeqCst));
        let hs: Vec<_> = (0..8).map(|_| spawn_on(1, current_worker)).collect();
        // Worker 0 idles and may steal meanwhile: a window for the fault to show in,
        // not a condition of passing.
        sleep(Duration::from_millis(50));
        go.store(true, Relaxed);
        spinner.join().unwrap();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let on = on.join().unwrap();
    assert!(on.iter().all(|w| *w == Some(1)), "{on:?}");
}

#[test]
fn a_never_run_threads_closure_may_park_while_it_is_dropped() {
    // At shutdown a never-run thread's closure is dropped in the thread's own green
    // context, so a destructor that parks (here: locking a weft Mutex that a parked
    // thread holds until the shutdown unwinds it) waits like any green thread instead
    // of blocking the worker's OS thread for good.
    struct LockOnDrop(Arc<weft_runtime::sync::Mutex<u32>>, Arc<AtomicUsize>);
    impl Drop for LockOnDrop {
        fn drop(&mut self) {
            *self.0.lock() += 1;
            self.1.fetch_add(1, SeqCst);
        }
    }
    let rt = Runtime::builder()
        .workers(1)
        .preempt(false)
        .build()
        .unwrap();
    let m = Arc::new(weft_runtime::sync::Mutex::new(0u32));
    let m2 = m.clone();
    let stage = Arc::new(AtomicUsize::new(0));
    let s2 = stage.clone();
    // Holds the mutex and parks until the shutdown unwinds it (releasing the mutex);
    // then spins, holding the worker, until told to let go.
    let holder = rt.spawn(move || {
        let _g = m2.lock();
        s2.store(1, SeqCst);
        while s2.load(SeqCst) != 2 {
            std::hint::spin_loop();
        }
        park();
    });
    while stage.load(SeqCst) != 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let never = {
        let d = LockOnDrop(m.clone(), dropped.clone());
        rt.spawn(move || {
            let _d = d;
            unreachable!("never runs: queued behind the holder until shutdown");
        })
    };
    let s3 = stage.clone();
    let releaser = release_once_this_thread_waits(move || s3.store(2, SeqCst));
    drop(rt); // hangs if the destructor's park blocks the worker
    releaser.join().unwrap();
    assert_eq!(dropped.load(SeqCst), 1);
    assert_eq!(*m.lock(), 1);
    assert!(never.join().unwrap_err().is::<weft_runtime::Shutdown>());
    assert!(holder.join().unwrap_err().is::<weft_runtime::Shutdown>());
}

#[test]
fn blocking_pool_threads_are_not_pinned_to_the_workers_cpu() {
    // A pool thread started from a pinned worker must not inherit its single CPU.
    // SAFETY: sched_getaffinity fills a zeroed local CPU set of its own size.
    let cpus = |pid: i32| unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(pid, core::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        libc::CPU_COUNT(&set)
    };
    // SAFETY: getpid has no preconditions.
    let all = cpus(unsafe { libc::getpid() });
    let rt = Runtime::builder().workers(1).pin(true).build().unwrap();
    let (worker, pool) = rt.block_on(move || {
        let worker = cpus(0);
        let pool = weft_runtime::blocking(move || cpus(0));
        (worker, pool)
    });
    if all > 1 && worker == 1 {
        assert_eq!(pool, all, "the pool thread has the process's CPUs");
    }
}

/// Windows fiber code inside a green thread: a fiber it creates runs on the same worker
/// and switches back to the green thread with `SwitchToFiber` (the public API accepts a
/// green thread's fiber on the OS thread it runs on).
#[test]
fn a_fiber_made_inside_a_green_thread_switches_back_to_it() {
    use weft_fiber::win::{GetCurrentFiber, GetLastError, SwitchToFiber};
    let rt = Runtime::builder().workers(2).build().unwrap();
    let got = rt.block_on(|| {
        spawn_on(1, || {
            // SAFETY: a green thread is a fiber.
            let me = unsafe { GetCurrentFiber() } as usize;
            let f = weft_fiber::Fiber::new(move || {
                for _ in 0..3 {
                    // SAFETY: `me` is the green thread's live fiber, on this OS thread.
                    unsafe { SwitchToFiber(me as *mut core::ffi::c_void) };
                    // SAFETY: no precondition.
                    assert_eq!(unsafe { GetLastError() }, 0, "switching back failed");
                }
            })
            .unwrap();
            let mut rounds = 0;
            while !f.is_finished() {
                f.switch_to().unwrap();
                rounds += 1;
                weft_runtime::yield_now(); // the green thread still schedules normally
            }
            rounds
        })
        .join()
        .unwrap()
    });
    assert_eq!(got, 4);
}
