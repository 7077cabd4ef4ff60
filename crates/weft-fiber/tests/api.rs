//! The Rust API: conversion, switching, finishing, panics, statistics, errors.

use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use weft_fiber::{convert_thread, Error, Fiber, FiberState};

/// Each test runs on its own fresh thread (the test harness reuses threads otherwise).
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().expect("test thread panicked")
}

#[test]
fn converting_twice_fails_and_converting_back_requires_a_fiber() {
    on_thread(|| {
        assert!(weft_fiber::current_id().is_none());
        let main = convert_thread().unwrap();
        assert!(matches!(convert_thread(), Err(Error::AlreadyFiber)));
        assert_eq!(weft_fiber::current_id(), Some(main.id()));
        drop(main); // converts back
        assert_eq!(weft_fiber::current_id(), None);
        assert!(convert_thread().is_ok());
    });
}

#[test]
fn switching_without_being_a_fiber_fails() {
    on_thread(|| {
        let f = Fiber::new(|| {}).unwrap(); // creating before conversion is allowed
        assert!(matches!(f.switch_to(), Err(Error::NotAFiber)));
        assert_eq!(f.stats().activations, 0);
        let _main = convert_thread().unwrap();
        f.switch_to().unwrap();
        assert!(f.is_finished());
    });
}

#[test]
fn ping_pong_counts_activations_exactly() {
    on_thread(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let f = Fiber::new(move || loop {
            h.fetch_add(1, Relaxed);
            back.switch_to().unwrap();
        })
        .unwrap();
        for _ in 0..1000 {
            f.switch_to().unwrap();
        }
        assert_eq!(hits.load(Relaxed), 1000);
        let s = f.stats();
        assert_eq!(s.activations, 1000);
        assert_eq!(s.failed_activations, 0);
        assert_eq!(s.state, FiberState::Ready);
        assert_eq!(main.stats().activations, 1000);
        assert_eq!(main.stats().state, FiberState::Running);
        // switching to yourself is a counted no-op
        main.switch_to().unwrap();
        assert_eq!(main.stats().activations, 1001);
    });
}

#[test]
fn a_returning_closure_goes_back_to_its_resumer_and_cannot_run_again() {
    on_thread(|| {
        let _main = convert_thread().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let f = Fiber::new(move || {
            r.fetch_add(1, Relaxed);
        })
        .unwrap();
        f.switch_to().unwrap();
        assert_eq!(ran.load(Relaxed), 1);
        assert!(f.is_finished());
        assert_eq!(f.stats().state, FiberState::Finished);
        assert!(matches!(f.switch_to(), Err(Error::Finished { fiber }) if fiber == f.id()));
        assert_eq!(f.stats().failed_activations, 1);
        assert_eq!(f.stats().activations, 1);
    });
}

#[test]
fn a_panic_is_caught_at_the_fiber_boundary_and_reported_to_the_resumer() {
    on_thread(|| {
        let _main = convert_thread().unwrap();
        let f = Fiber::new(|| panic!("boom in a fiber")).unwrap();
        match f.switch_to() {
            Err(Error::Panicked(p)) => {
                assert_eq!(*p.downcast::<&str>().unwrap(), "boom in a fiber")
            }
            other => panic!("expected Panicked, got {other:?}"),
        }
        assert!(f.is_finished());
    });
}

#[test]
fn run_time_and_threads_are_recorded() {
    on_thread(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let f = Fiber::new(move || {
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_millis(30) {
                std::hint::spin_loop();
            }
            back.switch_to().unwrap();
        })
        .unwrap();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        assert_eq!(f.stats().creator_tid, tid);
        assert_eq!(f.stats().last_tid, 0);
        let before = std::time::Instant::now();
        f.switch_to().unwrap();
        let wall = before.elapsed();
        let s = f.stats();
        assert_eq!(s.last_tid, tid);
        // Run time is wall-clock time while the fiber is current, so time the OS spends
        // running other threads mid-spin adds to it: the 30 ms spin is a floor however
        // loaded the machine (25 ms leaves room for the clock's calibration).
        assert!(
            s.run_time >= std::time::Duration::from_millis(25),
            "run time {:?}",
            s.run_time
        );
        // And the fiber ran only inside our switch: never longer than the switch took
        // (with 1% and 1 ms for converting clock ticks to time).
        assert!(
            s.run_time <= wall + wall / 100 + std::time::Duration::from_millis(1),
            "run time {:?} in a switch that took {wall:?}",
            s.run_time
        );
        assert_ne!(s.entry, 0);
        assert_eq!(s.stack_size, weft_fiber::stack::DEFAULT_STACK_SIZE);
    });
}

#[test]
fn a_fiber_created_on_one_thread_runs_on_another() {
    let f = on_thread(|| {
        let main_tid = Arc::new(Mutex::new(Vec::new()));
        let seen = main_tid.clone();
        // The fiber records the thread it runs on, then switches to whoever is home.
        let f = Fiber::builder()
            .stack_size(64 * 1024)
            .spawn(move || loop {
                // SAFETY: gettid has no preconditions.
                seen.lock().unwrap().push(unsafe { libc::gettid() });
                if let Some(h) = HOME.with(|h| h.get()) {
                    // SAFETY: h is the home fiber of the thread that switched here,
                    // converted and waiting.
                    unsafe { weft_fiber::win::SwitchToFiber(h) };
                }
            })
            .unwrap();
        (f, main_tid)
    });
    let (f, seen) = f;
    let f = Arc::new(f);
    let mut tids = Vec::new();
    for _ in 0..3 {
        let f = f.clone();
        tids.push(on_thread(move || {
            let main = convert_thread().unwrap();
            HOME.with(|h| h.set(Some(main.as_raw())));
            f.switch_to().unwrap();
            f.switch_to().unwrap();
            // SAFETY: gettid has no preconditions.
            unsafe { libc::gettid() }
        }));
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 6);
    for (i, t) in tids.iter().enumerate() {
        assert_eq!(
            &seen[2 * i..2 * i + 2],
            &[*t, *t],
            "fiber ran on the thread that switched to it"
        );
    }
    assert_eq!(f.stats().activations, 6);
}

thread_local! {
    static HOME: std::cell::Cell<Option<*mut std::ffi::c_void>> = const { std::cell::Cell::new(None) };
}

#[test]
fn dropping_a_suspended_fiber_frees_it_without_running_it() {
    on_thread(|| {
        let _main = convert_thread().unwrap();
        let token = Arc::new(());
        let t = token.clone();
        let f = Fiber::new(move || drop(t)).unwrap();
        assert_eq!(Arc::strong_count(&token), 2);
        drop(f); // never ran: its closure (and the Arc it holds) is dropped
        assert_eq!(Arc::strong_count(&token), 1);
    });
}

/// The floating-point control register's rounding-mode field and the value for "round
/// toward +infinity": MXCSR.RC on x86_64, FPCR.RMode on aarch64.
#[cfg(target_arch = "x86_64")]
const ROUNDING: (u32, u32) = (0x6000, 0x4000);
#[cfg(target_arch = "aarch64")]
const ROUNDING: (u32, u32) = (0xC0_0000, 0x40_0000);

#[test]
fn floating_point_control_state_is_per_fiber() {
    on_thread(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let (mask, up) = ROUNDING;
        let f = Fiber::new(move || {
            set_fp_control((fp_control() & !mask) | up);
            back.switch_to().unwrap();
            assert_eq!(
                fp_control() & mask,
                up,
                "the fiber's rounding mode survived a switch"
            );
            back.switch_to().unwrap();
        })
        .unwrap();
        let before = fp_control();
        f.switch_to().unwrap();
        assert_eq!(
            fp_control() & mask,
            before & mask,
            "the fiber's rounding mode did not leak into main"
        );
        // Round-to-nearest still rules main's arithmetic.
        let third = std::hint::black_box(1.0f64) / std::hint::black_box(3.0f64);
        assert_eq!(third, 1.0 / 3.0);
        f.switch_to().unwrap();
        assert_eq!(fp_control() & mask, before & mask);
    });
}

/// The switch skips reloading the control state when the two fibers' are equal: a
/// difference in the x87 control word alone (MXCSR equal) must still be restored.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_x87_control_word_alone_is_per_fiber() {
    fn x87() -> u16 {
        let mut v = 0u16;
        // SAFETY: stores the x87 control word into a live local.
        unsafe { std::arch::asm!("fnstcw [{}]", in(reg) &mut v) };
        v
    }
    fn set_x87(v: u16) {
        // SAFETY: loads an x87 control word the test made from the current one.
        unsafe { std::arch::asm!("fldcw [{}]", in(reg) &v) };
    }
    const PC_MASK: u16 = 0x0300; // precision control
    on_thread(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let before = (x87(), fp_control());
        let f = Fiber::new(move || {
            set_x87(x87() & !PC_MASK); // single precision; MXCSR untouched
            back.switch_to().unwrap();
            assert_eq!(x87() & PC_MASK, 0, "the fiber's x87 precision survived");
            back.switch_to().unwrap();
        })
        .unwrap();
        f.switch_to().unwrap();
        assert_eq!((x87(), fp_control()), before, "nothing leaked into main");
        f.switch_to().unwrap();
        assert_eq!((x87(), fp_control()), before);
    });
}

#[cfg(target_arch = "x86_64")]
fn fp_control() -> u32 {
    let mut v = 0u32;
    // SAFETY: stores MXCSR into a live local.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v) };
    v
}
#[cfg(target_arch = "x86_64")]
fn set_fp_control(v: u32) {
    // SAFETY: loads an MXCSR value the test made from the current one.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v) };
}
#[cfg(target_arch = "aarch64")]
fn fp_control() -> u32 {
    let v: u64;
    // SAFETY: reads FPCR into a register.
    unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) v) };
    v as u32
}
#[cfg(target_arch = "aarch64")]
fn set_fp_control(v: u32) {
    // SAFETY: writes an FPCR value the test made from the current one.
    unsafe { std::arch::asm!("msr fpcr, {}", in(reg) v as u64) };
}

static OWN_HANDLE: std::sync::Mutex<Option<Fiber>> = std::sync::Mutex::new(None);
static FREED_SELF: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn count_freed(_: *mut std::ffi::c_void) {
    FREED_SELF.fetch_add(1, Relaxed);
}

#[test]
fn a_fiber_that_drops_its_own_handle_is_freed_when_it_switches_away() {
    on_thread(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let key = weft_fiber::FlsKey::new(Some(count_freed)).unwrap();
        let k = key.index();
        let f = Fiber::new(move || {
            // SAFETY: the Windows fiber calls take handles this test created and has not
            // deleted (or, where the test says so, deliberately bad ones, which the API
            // must refuse), and FLS values are integers it never dereferences.
            unsafe { weft_fiber::win::FlsSetValue(k, std::ptr::dangling_mut()) };
            drop(OWN_HANDLE.lock().unwrap().take()); // our own handle
            assert_eq!(FREED_SELF.load(Relaxed), 0, "still running: not freed yet");
            back.switch_to().unwrap();
            unreachable!("a fiber whose handle is gone is never resumed");
        })
        .unwrap();
        let raw = f.as_raw();
        *OWN_HANDLE.lock().unwrap() = Some(f);
        // SAFETY: the Windows fiber calls take handles this test created and has not
        // deleted (or, where the test says so, deliberately bad ones, which the API must
        // refuse), and FLS values are integers it never dereferences.
        unsafe { weft_fiber::win::SwitchToFiber(raw) };
        assert_eq!(
            FREED_SELF.load(Relaxed),
            1,
            "freed (FLS callback ran) as it switched away"
        );
        drop(key);
    });
}

#[test]
fn the_windows_api_neither_deletes_nor_converts_back_a_rust_fiber() {
    use weft_fiber::win::*;
    on_thread(|| {
        let main = convert_thread().unwrap();
        // SAFETY (all blocks below): Windows-API calls with no pointer arguments but
        // fiber handles, which the API checks.
        let f = Fiber::new(|| unsafe {
            // Its `Fiber` handle owns it: it stays a fiber.
            assert_eq!(ConvertFiberToThread(), FALSE);
            assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
            assert_eq!(IsThreadAFiber(), TRUE);
        })
        .unwrap();
        f.switch_to().unwrap();
        assert!(f.is_finished());
        // SAFETY: as above.
        unsafe {
            SetLastError(0);
            DeleteFiber(f.as_raw());
            assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        }
        assert_eq!(f.stats().state, FiberState::Finished);
        let raw = f.as_raw();
        // Dropping it frees it: its handle is stale now.
        drop(f);
        // SAFETY: as above; a stale handle is checked, not used.
        unsafe {
            SetLastError(0);
            SwitchToFiber(raw);
            assert_eq!(GetLastError(), ERROR_INVALID_HANDLE);
        }
        drop(main);
    });
}
