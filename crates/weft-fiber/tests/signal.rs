//! SwitchToFiber from a signal handler: SIGALRM time-slices fibers that never yield.
//! The switch path must not allocate, lock or lazily initialise anything.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};
use weft_fiber::win::*;

const FIBERS: usize = 3;
static COUNTERS: [AtomicU64; FIBERS] = [const { AtomicU64::new(0) }; FIBERS];
static TICKS: AtomicUsize = AtomicUsize::new(0);
static INTERRUPTED: AtomicUsize = AtomicUsize::new(0);
static OTHER_ERRORS: AtomicUsize = AtomicUsize::new(0);
static ALREADY_THERE: AtomicUsize = AtomicUsize::new(0);
static mut HANDLES: [LPVOID; FIBERS + 1] = [std::ptr::null_mut(); FIBERS + 1];
const STOP_AFTER: usize = 300;

unsafe extern "C" fn spinner(param: LPVOID) {
    let i = param as usize;
    loop {
        COUNTERS[i].fetch_add(1, Relaxed); // never yields by itself
    }
}

extern "C" fn on_alarm(_: libc::c_int) {
    let tick = TICKS.fetch_add(1, Relaxed) + 1;
    // Round robin over the spinners; after STOP_AFTER ticks, back to the main fiber.
    let next = if tick >= STOP_AFTER {
        FIBERS
    } else {
        tick % FIBERS
    };
    // SAFETY: the handler and the thread switch among fibers the test created and never
    // deletes while the timer runs; HANDLES is written before the timer starts.
    unsafe {
        // A handler leaves the thread's last error as it found it, as it would errno: a
        // tick can land just after another handler's switch has succeeded and before
        // that handler reads GetLastError, and must not make that switch look refused.
        let saved = GetLastError();
        // After a refused tick the round robin is one behind, and a tick may aim at the
        // spinner it interrupted: nothing to switch, and nothing activated. Counted.
        if tick < STOP_AFTER && GetCurrentFiber() == HANDLES[next] {
            ALREADY_THERE.fetch_add(1, Relaxed);
            return;
        }
        SetLastError(0);
        SwitchToFiber(HANDLES[next]);
        // A tick that lands while this thread is in the middle of a switch (often under
        // emulation) must not start another: it fails with ERROR_BUSY. Count those of
        // the ticks aimed at the spinners.
        match GetLastError() {
            0 => {}
            ERROR_BUSY if tick < STOP_AFTER => {
                INTERRUPTED.fetch_add(1, Relaxed);
            }
            ERROR_BUSY => {}
            e => OTHER_ERRORS.store(e as usize, Relaxed),
        }
        SetLastError(saved);
    }
}

#[test]
#[allow(clippy::needless_range_loop)] // HANDLES is a static mut, indexed on purpose
fn a_sigalrm_handler_time_slices_fibers_that_never_yield() {
    // SAFETY: the handler and the thread switch among fibers the test created and never
    // deletes while the timer runs; HANDLES is written before the timer starts.
    std::thread::spawn(|| unsafe {
        HANDLES[FIBERS] = ConvertThreadToFiber(std::ptr::null_mut());
        for i in 0..FIBERS {
            HANDLES[i] = CreateFiber(64 * 1024, Some(spinner), i as LPVOID);
        }
        // A POSIX timer aimed at this thread (SIGEV_THREAD_ID), so the other threads of
        // the test process never receive the signal.
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_alarm as *const () as usize;
        sa.sa_flags = libc::SA_NODEFER | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut()), 0);
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = libc::SIGALRM;
        sev.sigev_notify_thread_id = libc::gettid();
        let mut timer: libc::timer_t = std::mem::zeroed();
        assert_eq!(
            libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer),
            0
        );
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 500_000,
            },
            it_value: libc::timespec {
                tv_sec: 0,
                tv_nsec: 500_000,
            },
        };
        assert_eq!(
            libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()),
            0
        );
        // Start the first spinner; the handler takes it from there and comes back here.
        SwitchToFiber(HANDLES[0]);
        libc::timer_delete(timer);
        assert!(TICKS.load(Relaxed) >= STOP_AFTER);
        for (i, c) in COUNTERS.iter().enumerate() {
            assert!(c.load(Relaxed) > 1000, "fiber {i} ran: {}", c.load(Relaxed));
        }
        let mut total = 0;
        for h in &HANDLES[..FIBERS] {
            let mut s = WeftFiberStats::default();
            weft_fiber_stats(*h, &mut s);
            total += s.activations;
        }
        // Exact accounting: the first switch from main, then every tick before the stop
        // either switched (one activation of a spinner), failed with ERROR_BUSY, or found
        // its spinner already running.
        let interrupted = INTERRUPTED.load(Relaxed) as u64 + ALREADY_THERE.load(Relaxed) as u64;
        assert_eq!(
            OTHER_ERRORS.load(Relaxed),
            0,
            "only ERROR_BUSY may stop a switch"
        );
        assert_eq!(
            total + interrupted,
            STOP_AFTER as u64,
            "activations {total}, interrupted {interrupted}"
        );
        assert!(
            total > STOP_AFTER as u64 / 4,
            "most ticks switch: {total} of {STOP_AFTER}"
        );
        eprintln!(
            "ticks {} activations {total} interrupted {}",
            TICKS.load(Relaxed),
            INTERRUPTED.load(Relaxed)
        );
    })
    .join()
    .unwrap();
}
