//! A loom model of the fiber ownership protocol in `src/fiber.rs`.
//!
//! The real switch is assembly and cannot run under loom, so this models its memory
//! operations exactly: a fiber's saved context (its stack pointer and stack contents) is
//! an `UnsafeCell`; a thread that wants to run it CASes `state` READY -> RUNNING with
//! Acquire, "restores" the context (reads it), runs, "saves" it (writes it), and the
//! *next* context on that thread releases it with a Release store of READY, after the
//! save. loom explores every interleaving and reports any data race on the context (which
//! would mean two threads ran the fiber at once, or one resumed it from a stale save) and
//! any violated assertion.
//!
//! The second model checks the transition that makes releasing after the switch
//! necessary: a thread that finishes a fiber (FINISHED) while another tries to take it.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, Ordering::*};
use loom::sync::Arc;
use loom::thread;

const READY: u32 = 0;
const RUNNING: u32 = 1;
const FINISHED: u32 = 2;

struct Fiber {
    state: AtomicU32,
    /// The saved context: how many times the fiber has run so far.
    context: UnsafeCell<u64>,
}

/// One attempt to switch into `f`, run it, and switch away (releasing it afterwards).
fn try_run(f: &Fiber) -> bool {
    if f.state
        .compare_exchange(READY, RUNNING, Acquire, Relaxed)
        .is_err()
    {
        return false; // ERROR_BUSY: the caller keeps running
    }
    // Restore, run, save.
    // SAFETY: loom checks this very access: the model says whether two threads touch the
    // cell at once.
    let n = f.context.with(|p| unsafe { *p });
    // SAFETY: loom checks this very access: the model fails if two threads touch the cell
    // at once.
    f.context.with_mut(|p| unsafe { *p = n + 1 });
    // The next context on this thread releases the fiber, after the save above.
    f.state.store(READY, Release);
    true
}

#[test]
fn a_fiber_runs_on_one_thread_at_a_time_and_resumes_from_its_last_save() {
    loom::model(|| {
        let f = Arc::new(Fiber {
            state: AtomicU32::new(READY),
            context: UnsafeCell::new(0),
        });
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let f = f.clone();
                thread::spawn(move || (try_run(&f) as u64) + (try_run(&f) as u64))
            })
            .collect();
        let ran: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert!(ran >= 1);
        // Every successful run saw the previous run's save: no lost or doubled run.
        // SAFETY: loom checks this very access: the model says whether two threads touch
        // the cell at once.
        assert_eq!(f.context.with(|p| unsafe { *p }), ran);
    });
}

#[test]
fn a_finished_fiber_is_never_resumed() {
    loom::model(|| {
        let f = Arc::new(Fiber {
            state: AtomicU32::new(RUNNING),
            context: UnsafeCell::new(0),
        });
        let f2 = f.clone();
        // The thread running it: the closure returns; its last switch leaves the note
        // FINISHED, and the next context publishes it.
        let finisher = thread::spawn(move || {
            // SAFETY: loom checks this very access: the model says whether two threads
            // touch the cell at once.
            f2.context.with_mut(|p| unsafe { *p = 99 });
            f2.state.store(FINISHED, Release);
        });
        let taken = try_run(&f);
        finisher.join().unwrap();
        assert!(!taken, "a RUNNING or FINISHED fiber cannot be taken");
        assert_eq!(f.state.load(Acquire), FINISHED);
        // SAFETY: loom checks this very access: the model says whether two threads touch
        // the cell at once.
        assert_eq!(f.context.with(|p| unsafe { *p }), 99);
    });
}
