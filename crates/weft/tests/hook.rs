//! The `hook` feature of the weft crate links the system-call layer: a blocking sleep
//! from the standard library on a green thread parks only that green thread.
#![cfg(feature = "hook")]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use weft::hook as _;

#[test]
fn std_sleep_on_a_green_thread_lets_the_worker_run_others() {
    assert!(weft::hook::enabled(), "the layer is linked and on");
    let rt = weft::runtime::Runtime::builder()
        .workers(1)
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let seen = rt.block_on({
        let ran = ran.clone();
        move || {
            // On the one worker, the other green thread runs only while this one
            // sleeps if the sleep parks the green thread, not the worker.
            let other = weft::runtime::spawn({
                let ran = ran.clone();
                move || ran.fetch_add(1, SeqCst)
            });
            std::thread::sleep(Duration::from_millis(20));
            let seen = ran.load(SeqCst);
            other.join().unwrap();
            seen
        }
    });
    assert_eq!(seen, 1, "the other green thread ran during the sleep");
    let stats = weft::hook::stats::snapshot();
    let sleeps: u64 = ["nanosleep", "clock_nanosleep"]
        .iter()
        .filter_map(|n| stats.get(n))
        .map(|c| c.parked)
        .sum();
    assert!(sleeps >= 1, "the sleep was parked by the layer");
}
