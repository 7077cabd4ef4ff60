//! The channels (`weft_runtime::chan`) across workers and OS threads: exact accounting,
//! order per producer, disconnection, timeouts, back-pressure, and producers and
//! consumers sharing one worker. A hang is a failure (a lost wake-up).

// The runtime is not built under the `loom` feature (see lib.rs).
#![cfg(not(feature = "loom"))]

mod common;
use common::{wait_until, PATIENCE};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::chan::{
    self, oneshot, RecvError, RecvTimeoutError, SendError, SendTimeoutError, TryRecvError,
    TrySendError,
};
use weft_runtime::{sleep, spawn_on, yield_now, Runtime};

fn rt(n: usize) -> Runtime {
    Runtime::builder().workers(n).build().unwrap()
}

#[test]
fn oneshot_delivers_across_workers_and_os_threads() {
    let rt = rt(2);
    // Green to green, across workers, many times.
    let n = rt.block_on(|| {
        let mut n = 0u64;
        for i in 0..300u64 {
            let (tx, rx) = oneshot::channel();
            let (rtx, rrx) = oneshot::channel();
            let s = spawn_on((i % 2) as usize, move || tx.send(i).unwrap());
            let r = spawn_on(((i + 1) % 2) as usize, move || {
                rtx.send(rx.recv().unwrap()).unwrap()
            });
            n += rrx.recv().unwrap();
            s.join().unwrap();
            r.join().unwrap();
        }
        n
    });
    assert_eq!(n, 299 * 300 / 2);
    // Green to OS thread, and OS thread to green.
    let (tx, rx) = oneshot::channel();
    rt.spawn_on(1, move || {
        sleep(Duration::from_millis(10));
        tx.send("to os").unwrap()
    });
    assert_eq!(rx.recv(), Ok("to os"));
    let (tx, rx) = oneshot::channel();
    let h = rt.spawn_on(0, move || rx.recv());
    std::thread::sleep(Duration::from_millis(10));
    tx.send(7).unwrap();
    assert_eq!(h.join().unwrap(), Ok(7));
}

#[test]
fn oneshot_disconnection_and_errors() {
    let rt = rt(2);
    // A parked receiver is woken with an error when the sender is dropped unused.
    let (tx, rx) = oneshot::channel::<u32>();
    let r = rt.spawn_on(0, move || rx.recv());
    let s = rt.spawn_on(1, move || {
        sleep(Duration::from_millis(20));
        drop(tx);
    });
    assert_eq!(r.join().unwrap(), Err(RecvError));
    s.join().unwrap();
    // try_recv: Empty, then the value, then Disconnected.
    let (tx, mut rx) = oneshot::channel();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.send(1).unwrap();
    assert_eq!(rx.try_recv(), Ok(1));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    // A send to a dropped receiver gives the value back.
    let (tx, rx) = oneshot::channel();
    assert!(!tx.is_closed());
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(tx.send(String::from("back")), Err(String::from("back")));
    // Display and Error.
    let e: Box<dyn std::error::Error> = Box::new(RecvError);
    assert!(e.to_string().contains("senders are all gone"), "{e}");
}

#[test]
fn oneshot_recv_timeout_honours_the_timeout() {
    let rt = rt(2);
    rt.block_on(|| {
        let (tx, mut rx) = oneshot::channel();
        let t0 = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(50)),
            Err(RecvTimeoutError::Timeout)
        );
        let e = t0.elapsed();
        assert!(e >= Duration::from_millis(50), "returned early: {e:?}");
        assert!(e < PATIENCE, "late: {e:?}");
        let s = spawn_on(1, move || {
            sleep(Duration::from_millis(10));
            tx.send(3).unwrap();
        });
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(3));
        s.join().unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvTimeoutError::Disconnected)
        );
    });
}

/// Producers and consumers on both workers and on OS threads: every value received
/// exactly once, and each producer's values in order at every consumer.
fn exact_accounting(tx: chan::Sender<(usize, u64)>, rx: chan::Receiver<(usize, u64)>) {
    let rt = rt(2);
    const GREEN_P: usize = 4;
    const GREEN_C: usize = 3;
    const PER: u64 = 2_000;
    let producers = GREEN_P + 1;
    let mut ps = Vec::new();
    for p in 0..GREEN_P {
        let tx = tx.clone();
        ps.push(rt.spawn_on(p % 2, move || {
            for k in 0..PER {
                tx.send((p, k)).unwrap();
                if k % 100 == 0 {
                    yield_now();
                }
            }
        }));
    }
    let os_p = std::thread::spawn(move || {
        for k in 0..PER {
            tx.send((GREEN_P, k)).unwrap();
        }
    });
    let consume = |rx: chan::Receiver<(usize, u64)>| {
        let mut got = Vec::new();
        for v in rx.iter() {
            got.push(v);
        }
        got
    };
    let mut cs = Vec::new();
    for c in 0..GREEN_C {
        let rx = rx.clone();
        cs.push(rt.spawn_on(c % 2, move || consume(rx)));
    }
    let rx2 = rx.clone();
    let os_c = std::thread::spawn(move || consume(rx2));
    drop(rx);
    for p in ps {
        p.join().unwrap();
    }
    os_p.join().unwrap();
    let mut all: Vec<Vec<(usize, u64)>> = cs.into_iter().map(|c| c.join().unwrap()).collect();
    all.push(os_c.join().unwrap());
    let mut seen: HashMap<(usize, u64), usize> = HashMap::new();
    for got in &all {
        let mut last: HashMap<usize, u64> = HashMap::new();
        for &(p, k) in got {
            if let Some(&l) = last.get(&p) {
                assert!(k > l, "producer {p}: {k} received after {l}");
            }
            last.insert(p, k);
            *seen.entry((p, k)).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), producers * PER as usize, "every value arrived");
    assert!(seen.values().all(|&n| n == 1), "no value arrived twice");
}

#[test]
fn bounded_exact_accounting_and_order_across_workers_and_os_threads() {
    let (tx, rx) = chan::bounded(4);
    assert_eq!(tx.capacity(), Some(4));
    exact_accounting(tx, rx);
}

#[test]
fn unbounded_exact_accounting_and_order_across_workers_and_os_threads() {
    let (tx, rx) = chan::unbounded();
    assert_eq!(rx.capacity(), None);
    exact_accounting(tx, rx);
}

/// Timed sends and receives racing with wake-ups: a waiter woken just as its timeout
/// expires must take what it was woken for, or a value is stranded (a hang) or lost.
#[test]
fn timed_sends_and_receives_under_contention_lose_nothing() {
    let rt = rt(2);
    let (tx, rx) = chan::bounded::<u64>(2);
    const PER: u64 = 1_500;
    let mut ps = Vec::new();
    for p in 0..3u64 {
        let tx = tx.clone();
        ps.push(rt.spawn_on(p as usize % 2, move || {
            for k in 0..PER {
                let mut v = p * PER + k;
                loop {
                    match tx.send_timeout(v, Duration::from_micros(30)) {
                        Ok(()) => break,
                        Err(SendTimeoutError::Timeout(back)) => v = back,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    drop(tx);
    let total = Arc::new(AtomicUsize::new(0));
    let mut cs = Vec::new();
    for c in 0..3usize {
        let (rx, total) = (rx.clone(), total.clone());
        cs.push(rt.spawn_on(c % 2, move || {
            let mut sum = 0u64;
            loop {
                match rx.recv_timeout(Duration::from_micros(25)) {
                    Ok(v) => {
                        sum += v;
                        total.fetch_add(1, Relaxed);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return sum,
                }
            }
        }));
    }
    drop(rx);
    for p in ps {
        p.join().unwrap();
    }
    let sum: u64 = cs.into_iter().map(|c| c.join().unwrap()).sum();
    let n = 3 * PER;
    assert_eq!(total.load(Relaxed), n as usize);
    assert_eq!(sum, n * (n - 1) / 2);
}

#[test]
fn dropping_every_receiver_fails_sends_with_the_value() {
    let rt = rt(2);
    // Directly.
    let (tx, rx) = chan::bounded(2);
    let rx2 = rx.clone();
    drop(rx);
    tx.send(1).unwrap(); // one receiver is left
    drop(rx2);
    assert!(tx.is_disconnected());
    assert_eq!(tx.send(2), Err(SendError(2)));
    assert_eq!(tx.try_send(3), Err(TrySendError::Disconnected(3)));
    assert_eq!(
        tx.send_timeout(4, Duration::from_millis(1)),
        Err(SendTimeoutError::Disconnected(4))
    );
    // A sender parked on a full channel is woken by the last receiver going away.
    let (tx, rx) = chan::bounded(1);
    tx.send(String::from("fills it")).unwrap();
    let s = rt.spawn_on(0, move || tx.send(String::from("parked")));
    let r = rt.spawn_on(1, move || {
        sleep(Duration::from_millis(20));
        drop(rx);
    });
    let e = s.join().unwrap().unwrap_err();
    assert_eq!(e.into_inner(), "parked", "the value came back");
    r.join().unwrap();
    // Buffered values are dropped when the last receiver goes.
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = chan::unbounded();
    for _ in 0..3 {
        tx.send(Counted(drops.clone())).map_err(|_| ()).unwrap();
    }
    drop(rx);
    assert_eq!(drops.load(SeqCst), 3);
    let e = tx.send(Counted(drops.clone())).unwrap_err();
    assert_eq!(
        drops.load(SeqCst),
        3,
        "the failed value is given back, not dropped"
    );
    assert!(e.to_string().contains("receivers are all gone"), "{e}");
    let e: Box<dyn std::error::Error> = Box::new(e);
    drop(e);
}

#[test]
fn dropping_every_sender_ends_receives_after_the_buffer_drains() {
    let rt = rt(2);
    let (tx, rx) = chan::bounded(4);
    let tx2 = tx.clone();
    tx.send(1).unwrap();
    tx2.send(2).unwrap();
    drop(tx);
    drop(tx2);
    assert!(rx.is_disconnected());
    assert_eq!(rx.len(), 2);
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    assert_eq!(rx.recv(), Err(RecvError));
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Disconnected)
    );
    // Receivers parked on both workers and on an OS thread all wake with an error when
    // the last sender goes.
    let (tx, rx) = chan::unbounded::<u32>();
    let rs: Vec<_> = (0..4)
        .map(|i| {
            let rx = rx.clone();
            rt.spawn_on(i % 2, move || rx.recv())
        })
        .collect();
    let os = std::thread::spawn(move || rx.recv());
    let s = rt.spawn_on(1, move || {
        sleep(Duration::from_millis(20));
        drop(tx);
    });
    for r in rs {
        assert_eq!(r.join().unwrap(), Err(RecvError));
    }
    assert_eq!(os.join().unwrap(), Err(RecvError));
    s.join().unwrap();
    assert_eq!(
        TryRecvError::Empty.to_string(),
        "receiving on an empty channel"
    );
}

#[test]
fn timeouts_are_honoured() {
    let rt = rt(2);
    rt.block_on(|| {
        let (tx, rx) = chan::bounded(1);
        let t0 = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(50)),
            Err(RecvTimeoutError::Timeout)
        );
        let e = t0.elapsed();
        assert!(e >= Duration::from_millis(50), "recv returned early: {e:?}");
        assert!(e < PATIENCE, "recv late: {e:?}");
        tx.send(1).unwrap();
        assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
        let t0 = Instant::now();
        assert_eq!(
            tx.send_timeout(3, Duration::from_millis(50)),
            Err(SendTimeoutError::Timeout(3))
        );
        let e = t0.elapsed();
        assert!(e >= Duration::from_millis(50), "send returned early: {e:?}");
        assert!(e < PATIENCE, "send late: {e:?}");
        // A timed receive that gets a value from the other worker in time.
        assert_eq!(rx.recv(), Ok(1));
        let tx2 = tx.clone();
        let s = spawn_on(1, move || {
            sleep(Duration::from_millis(10));
            tx2.send(9).unwrap();
        });
        assert_eq!(rx.recv_timeout(PATIENCE), Ok(9));
        s.join().unwrap();
    });
    // On an OS thread too.
    let (_tx, rx) = chan::unbounded::<()>();
    let t0 = Instant::now();
    assert_eq!(
        rx.recv_timeout(Duration::from_millis(20)),
        Err(RecvTimeoutError::Timeout)
    );
    assert!(t0.elapsed() >= Duration::from_millis(20));
}

/// A sender on a full channel parks; the other green threads of its (single) worker
/// keep running meanwhile.
#[test]
fn a_full_bounded_channel_parks_only_the_sender() {
    let rt = rt(1);
    rt.block_on(|| {
        let (tx, rx) = chan::bounded(2);
        let sent = Arc::new(AtomicUsize::new(0));
        let ticks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = sent.clone();
        let producer = spawn_on(0, move || {
            for i in 0..10 {
                tx.send(i).unwrap();
                s2.fetch_add(1, SeqCst);
            }
        });
        let (t2, st2) = (ticks.clone(), stop.clone());
        let ticker = spawn_on(0, move || {
            while !st2.load(Relaxed) {
                t2.fetch_add(1, Relaxed);
                yield_now();
            }
        });
        // Once the producer has filled the channel, the ticker keeps getting turns while
        // this thread sleeps: the producer parked.
        wait_until("the channel filled", || sent.load(SeqCst) >= 2);
        let t = ticks.load(Relaxed);
        wait_until("10 ticks beside the parked producer", || {
            ticks.load(Relaxed) > t + 10
        });
        assert_eq!(
            sent.load(SeqCst),
            2,
            "the producer parks on the full channel"
        );
        assert!(!producer.is_finished());
        let got: Vec<i32> = rx.iter().collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        producer.join().unwrap();
        stop.store(true, Relaxed);
        ticker.join().unwrap();
    });
}

/// Producers and consumers that all share one worker, through a bounded(1) channel:
/// each blocked side must let the other run.
#[test]
fn producers_and_consumers_share_one_worker() {
    let rt = rt(1);
    let (sum, n) = rt.block_on(|| {
        let (tx, rx) = chan::bounded::<u64>(1);
        const PER: u64 = 5_000;
        let ps: Vec<_> = (0..2u64)
            .map(|p| {
                let tx = tx.clone();
                spawn_on(0, move || {
                    (0..PER).for_each(|k| tx.send(p * PER + k).unwrap())
                })
            })
            .collect();
        drop(tx);
        let cs: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                spawn_on(0, move || {
                    rx.iter().fold((0u64, 0u64), |(s, n), v| (s + v, n + 1))
                })
            })
            .collect();
        drop(rx);
        ps.into_iter().for_each(|p| p.join().unwrap());
        cs.into_iter()
            .map(|c| c.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(n, 10_000);
    assert_eq!(sum, 10_000 * 9_999 / 2);
}

#[test]
#[should_panic(expected = "rendezvous")]
fn bounded_zero_is_rejected() {
    let _ = chan::bounded::<u8>(0);
}

/// Every test of this file again under valgrind's memcheck, in one process: no invalid
/// access, no use of uninitialised memory (the fiber core registers its stacks with
/// valgrind, so memcheck follows the switches).
#[test]
fn chan_tests_run_clean_under_memcheck() {
    common::memcheck_this_binary(&["chan_tests_run_clean_under_memcheck"]);
}
