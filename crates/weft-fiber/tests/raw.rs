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

/// The jump-ended owned switch (with its checks, and without them: `switch_to_ready_jump`)
/// is entered without a `call` (`arch::switch_jump`): the
/// compiler sees an inline block, not a function. Whatever it keeps live across the
/// block must survive: values in callee-saved and spilled registers, floats, the
/// rounding mode of each side, and the frames the switch is made from (returns out of
/// a recursion that switches at every level land where they should).
#[test]
fn the_call_less_switch_keeps_what_the_compiler_keeps_live() {
    use std::hint::black_box;
    /// Switches to `to` at every level of a recursion `depth` deep, with a dozen
    /// values live across each switch; returns their sum over all levels.
    #[inline(never)]
    fn switching_recursion(to: RawFiber, depth: u64, seed: u64) -> u64 {
        if depth == 0 {
            return 0;
        }
        let v: [u64; 12] = std::array::from_fn(|i| black_box(seed * 31 + i as u64));
        let x = black_box(seed as f64) / 3.0;
        // SAFETY: `to` is the other side of the ping-pong, suspended while we run.
        unsafe { to.switch_to_owned_jump().unwrap() };
        let inner = switching_recursion(to, depth - 1, seed + 1);
        assert_eq!(x, seed as f64 / 3.0, "a float live across the switch");
        v.iter().sum::<u64>() + inner
    }
    /// `n` switches to `to` from a loop with no call in it, so that the compiler may
    /// keep values in any register it believes the switch preserves; returns a sum of
    /// values (integers and floats) each live across one switch.
    #[inline(never)]
    fn switching_loop(to: RawFiber, n: u64, seed: u64) -> (u64, f64) {
        let (mut sum, mut fsum) = (0u64, 0f64);
        for k in 0..n {
            let v: [u64; 14] = std::array::from_fn(|i| black_box((seed + k) * 31 + i as u64));
            let f: [f64; 8] = std::array::from_fn(|i| black_box((seed + k + i as u64) as f64));
            // Every other switch without the checks (the caller guarantees them: `to`
            // is the other side, suspended while we run).
            if k % 2 == 0 {
                // SAFETY: as in `switching_recursion`; the failure path is cold.
                if unsafe { to.switch_to_owned_jump() }.is_err() {
                    std::process::abort();
                }
            } else {
                // SAFETY: as above, and the checks pass (see above).
                unsafe { to.switch_to_ready_jump() };
            }
            // (Combined with a value read after the switch, so that the compiler
            // cannot fold them before it.)
            let one = black_box(1u64);
            sum = sum.wrapping_add(v.iter().fold(0, |a, x| a ^ (x * one).rotate_left(7)));
            fsum += f.iter().map(|x| x * one as f64).sum::<f64>();
        }
        (sum, fsum)
    }
    fn expected_loop(n: u64, seed: u64) -> (u64, f64) {
        let (mut sum, mut fsum) = (0u64, 0f64);
        for k in 0..n {
            let v: [u64; 14] = std::array::from_fn(|i| (seed + k) * 31 + i as u64);
            sum = sum.wrapping_add(v.iter().fold(0, |a, x| a ^ x.rotate_left(7)));
            fsum += (0..8).map(|i| (seed + k + i) as f64).sum::<f64>();
        }
        (sum, fsum)
    }
    fn expected(depth: u64, seed: u64) -> u64 {
        (0..depth)
            .map(|d| (0..12).map(|i| (seed + d) * 31 + i).sum::<u64>())
            .sum()
    }
    on_thread(|| {
        let main = convert_thread().unwrap();
        let back = RawFiber::of_thread(&main);
        let sums = Arc::new(AtomicU64::new(0));
        let s2 = sums.clone();
        let f = RawFiber::spawn(0, move || {
            #[cfg(target_arch = "x86_64")]
            set_rounding_up();
            for round in 0..50u64 {
                let got = switching_recursion(back, 8, 1000 + round);
                assert_eq!(got, expected(8, 1000 + round));
                assert_eq!(switching_loop(back, 20, round), expected_loop(20, round));
                #[cfg(target_arch = "x86_64")]
                assert!(rounds_up(), "the fiber's rounding mode survived");
                s2.fetch_add(1, SeqCst);
            }
            // SAFETY: `back` is live and suspended; this fiber never runs again.
            unsafe { back.exit_to_owned() }
        })
        .unwrap();
        // SAFETY: `f` is live and not started.
        unsafe { f.switch_to_owned_jump().unwrap() };
        for round in 0..50u64 {
            // (The last round's last switch is answered by the fiber's exit.)
            let got = switching_recursion(f, 8, round);
            assert_eq!(got, expected(8, round));
            let seed = 1_000_000 + round;
            assert_eq!(switching_loop(f, 20, seed), expected_loop(20, seed));
            #[cfg(target_arch = "x86_64")]
            assert!(!rounds_up(), "the fiber's rounding mode did not leak");
        }
        // The fiber finished its 50th recursion and exited back to us.
        assert_eq!(sums.load(SeqCst), 50);
    });
}

#[cfg(target_arch = "x86_64")]
fn rounds_up() -> bool {
    let mut v = 0u32;
    // SAFETY: stores MXCSR into a local.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v) };
    v & 0x6000 == 0x4000
}
#[cfg(target_arch = "x86_64")]
fn set_rounding_up() {
    let mut v = 0u32;
    // SAFETY: reads and writes MXCSR through a local: only the rounding field changes.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut v);
        v = (v & !0x6000) | 0x4000;
        std::arch::asm!("ldmxcsr [{}]", in(reg) &v);
    }
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

/// A switch in two halves (`prepare_ready_jump`, then `ReadySwitch::switch`): a prepared
/// switch that is dropped changes nothing, and one made counts exactly as a one-piece
/// switch, its run time included: the slice of the fiber that prepared it ends at the
/// switch, not at the preparation (each side here spins between the two halves, and
/// that time must be in its run time).
#[test]
fn a_prepared_switch_changes_nothing_until_made_and_then_counts_like_one() {
    use std::time::{Duration, Instant};
    const ROUNDS: u32 = 20;
    const SPIN: Duration = Duration::from_micros(300);
    fn spin(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }
    on_thread(|| {
        let main = convert_thread().unwrap();
        let back = RawFiber::of_thread(&main);
        let f = RawFiber::spawn(0, move || {
            loop {
                // SAFETY: `back` is the test thread's fiber, suspended while we run;
                // nothing else switches before the prepared switch is made.
                let sw = unsafe { back.prepare_ready_jump() };
                spin(SPIN);
                // SAFETY: as above.
                unsafe { sw.switch() };
            }
        })
        .unwrap();
        // SAFETY: `f` is live and not started; the first switch has the checks.
        unsafe { f.switch_to_owned_jump().unwrap() };
        let before = (f.stats(), back.stats());
        assert_eq!(before.0.activations, 1);
        // Prepared and dropped: nothing moves.
        // SAFETY: `f` is suspended, and we run another fiber.
        let _ = unsafe { f.prepare_ready_jump() };
        let after = (f.stats(), back.stats());
        assert_eq!(after.0.activations, before.0.activations);
        assert_eq!(after.1.activations, before.1.activations);
        assert_eq!(after.0.state, before.0.state);
        assert_eq!(after.0.run_time, before.0.run_time);
        for _ in 0..ROUNDS {
            // SAFETY: as above.
            let sw = unsafe { f.prepare_ready_jump() };
            spin(SPIN);
            // SAFETY: as above.
            unsafe { sw.switch() };
        }
        let (fs, ms) = (f.stats(), back.stats());
        // (The test thread's fiber runs now: its run time counts up to this reading.)
        assert_eq!(fs.activations, 1 + u64::from(ROUNDS));
        assert_eq!(ms.activations, before.1.activations + u64::from(ROUNDS));
        // The fiber spun SPIN before each of its ROUNDS + 1 switches back, all after it
        // prepared them; so did we, before ours, while it was suspended.
        assert!(
            fs.run_time >= SPIN * (ROUNDS + 1),
            "the fiber's run time {:?} misses the time between its preparations and \
             its switches ({:?})",
            fs.run_time,
            SPIN * (ROUNDS + 1)
        );
        // And ours is in our run time (charged to the fiber, it would be missing here).
        assert!(
            ms.run_time >= SPIN * ROUNDS,
            "our run time {:?} misses our spins before our switches ({:?})",
            ms.run_time,
            SPIN * ROUNDS
        );
        // SAFETY: `f` is suspended (the public API never deletes a raw fiber).
        unsafe { f.delete() };
    });
}
