//! The scheduler face (`weft_fiber::raw`): the owned switch (`switch_to_owned`,
//! `exit_to_owned`) keeps the checks and the statistics of the public switch, and mixes
//! with it (a fiber suspended by one is resumed by the other); the public API refuses a
//! raw fiber from any thread but the one it last ran on, and never deletes one.

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
                // (The first switch is the scheduler's: the public one only resumes a
                // raw fiber on the thread it last ran on.)
                if i % 3 == 1 {
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

/// The jump-ended owned switch (a ping-pong's) counts and checks like the others, and
/// mixes with them: a fiber suspended by one kind is resumed by another.
#[test]
fn the_jump_ended_owned_switch_counts_and_mixes_with_the_others() {
    on_thread(|| {
        let main = convert_thread().unwrap();
        let back = RawFiber::of_thread(&main);
        let rounds = Arc::new(AtomicU64::new(0));
        let r2 = rounds.clone();
        let f = RawFiber::spawn(0, move || loop {
            let i = r2.fetch_add(1, SeqCst);
            // SAFETY: `back` is the test thread's live fiber, suspended here.
            unsafe {
                if i.is_multiple_of(2) {
                    back.switch_to_owned_jump().unwrap();
                } else {
                    back.switch_to_owned().unwrap();
                }
            }
        })
        .unwrap();
        for i in 0..9u64 {
            // SAFETY: `f` is live and suspended (or never run).
            unsafe {
                match i % 3 {
                    0 => f.switch_to_owned_jump().unwrap(),
                    1 => f.switch_to_owned().unwrap(),
                    _ => f.switch_to().unwrap(),
                }
            }
            assert_eq!(rounds.load(SeqCst), i + 1);
            assert_eq!(f.stats().activations, i + 1, "every switch in counts once");
        }
        // Switching to the running fiber: a counted no-op, as with the other kinds.
        let before = back.stats().activations;
        // SAFETY: `back` is live (the running fiber).
        unsafe { back.switch_to_owned_jump().unwrap() };
        assert_eq!(back.stats().activations, before + 1);
        assert_eq!(f.stats().failed_activations, 0);
        // SAFETY: suspended, and nothing uses `f` afterwards.
        unsafe { f.delete() };
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

#[test]
fn the_public_api_refuses_a_raw_fiber_elsewhere_and_never_deletes_one() {
    use weft_fiber::error_codes::{ERROR_BUSY, ERROR_INVALID_PARAMETER};
    use weft_fiber::win::{DeleteFiber, GetCurrentFiber, GetLastError, SwitchToFiber};
    on_thread(|| {
        let main = convert_thread().unwrap();
        let back = RawFiber::of_thread(&main);
        let handle = Arc::new(AtomicU64::new(0));
        let h2 = handle.clone();
        let f = RawFiber::spawn(0, move || {
            // SAFETY: called on a fiber.
            h2.store(unsafe { GetCurrentFiber() } as u64, SeqCst);
            loop {
                // SAFETY: `back` is the test thread's live fiber.
                unsafe { back.switch_to_owned().unwrap() };
            }
        })
        .unwrap();
        // Never run: the public switch refuses it (it has no thread yet).
        // SAFETY: `f` is live.
        assert!(matches!(unsafe { f.switch_to() }, Err(Error::Busy { .. })));
        assert_eq!(f.stats().failed_activations, 1);
        // SAFETY: as above.
        unsafe { f.switch_to_owned().unwrap() };
        let p = handle.load(SeqCst) as *mut core::ffi::c_void;
        // From another thread (a fiber there), SwitchToFiber refuses it with
        // ERROR_BUSY and DeleteFiber with ERROR_INVALID_PARAMETER.
        let p2 = p as usize;
        let (switch_err, delete_err) = std::thread::spawn(move || {
            let _t = convert_thread().unwrap();
            // SAFETY: a live fiber handle; both calls are refused before any switch.
            unsafe {
                SwitchToFiber(p2 as *mut core::ffi::c_void);
                let s = GetLastError();
                DeleteFiber(p2 as *mut core::ffi::c_void);
                (s, GetLastError())
            }
        })
        .join()
        .unwrap();
        assert_eq!(switch_err, ERROR_BUSY);
        assert_eq!(delete_err, ERROR_INVALID_PARAMETER);
        // On this thread (where it last ran) DeleteFiber still refuses it.
        // SAFETY: as above.
        unsafe { DeleteFiber(p) };
        // SAFETY: no precondition.
        assert_eq!(unsafe { GetLastError() }, ERROR_INVALID_PARAMETER);
        assert_eq!(f.stats().failed_activations, 2);
        // The scheduler frees it (never to run again).
        // SAFETY: suspended, and nothing uses `f` afterwards.
        unsafe { f.delete() };
    });
}
