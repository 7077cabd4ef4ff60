//! The scheduler face (`weft_fiber::raw`): the owned switch (`switch_to_owned`,
//! `exit_to_owned`) keeps the checks and the statistics of the public switch, and mixes
//! with it (a fiber suspended by one is resumed by the other).

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use weft_fiber::raw::RawFiber;
use weft_fiber::{convert_thread, Error};

fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().expect("test thread panicked")
}

#[test]
fn owned_switches_count_like_public_ones_and_mix_with_them() {
    on_thread(|| {
        let main = convert_thread().unwrap();
        let back = RawFiber::of_thread(&main);
        let rounds = Arc::new(AtomicU64::new(0));
        let r2 = rounds.clone();
        let f = RawFiber::spawn(0, move || {
            for i in 0..10u64 {
                r2.fetch_add(1, SeqCst);
                // Alternate the owned and the public switch back.
                // SAFETY: `back` is the test thread's live fiber, suspended here.
                unsafe {
                    if i % 2 == 0 {
                        back.switch_to_owned().unwrap();
                    } else {
                        back.switch_to().unwrap();
                    }
                }
            }
            // SAFETY: this raw fiber is never switched to again; `back` is live.
            unsafe { back.exit_to_owned() }
        })
        .unwrap();
        let id = f.id();
        for i in 0..10u64 {
            // SAFETY: `f` is live until it exits (after the 10th round, below).
            unsafe {
                if i % 3 == 0 {
                    f.switch_to().unwrap();
                } else {
                    f.switch_to_owned().unwrap();
                }
            }
            assert_eq!(rounds.load(SeqCst), i + 1);
            let st = f.stats();
            assert_eq!(st.id, id);
            assert_eq!(st.activations, i + 1, "every switch in counts once");
            assert_eq!(st.failed_activations, 0);
        }
        // Switching (owned) to the fiber this thread runs is a counted no-op, as with
        // the public switch.
        let before = back.stats().activations;
        // SAFETY: `back` is live (the running fiber).
        unsafe { back.switch_to_owned().unwrap() };
        assert_eq!(back.stats().activations, before + 1);
        // The 11th switch lets the fiber exit back to us; it frees itself on the way.
        // SAFETY: `f` is live until that exit.
        unsafe { f.switch_to_owned().unwrap() };
        assert_eq!(rounds.load(SeqCst), 10);
    });
}

#[test]
fn an_owned_switch_checks_like_the_public_one() {
    on_thread(|| {
        let f = RawFiber::spawn(0, || unreachable!("never switched to")).unwrap();
        // Not a fiber yet: refused, nothing counted.
        // SAFETY: `f` is live and not running.
        assert!(matches!(
            unsafe { f.switch_to_owned() },
            Err(Error::NotAFiber)
        ));
        assert_eq!(f.stats().activations, 0);
        // SAFETY: as above; nothing uses `f` afterwards.
        unsafe { f.delete() };
    });
}
