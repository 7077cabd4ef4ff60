//! The bare context switch, for benchmarks: `arch::switch` between two fibers without
//! the ownership CAS, the statistics or any check (`weft bench fibers` reports it beside
//! `SwitchToFiber` to show what the bookkeeping costs).

use crate::arch;
use crate::fiber::{FiberRecord, Start, RUNNING};
use crate::stack::Stack;
use crate::thread::ThreadState;
use core::ffi::c_void;
use core::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

struct PingPong {
    main: *mut FiberRecord,
    fiber: *mut FiberRecord,
}

unsafe extern "C" fn bounce(_prev: *mut c_void, arg: *mut c_void) -> ! {
    let pp = arg.cast::<PingPong>();
    loop {
        // SAFETY: `pp` outlives the ping-pong; main is suspended whenever we run.
        unsafe { arch::switch((*pp).fiber, (*pp).main) };
    }
}

/// Times `round_trips` round trips (2 switches each) between this thread and a fiber
/// using only the architecture's context switch.
pub fn pingpong(round_trips: u64) -> Duration {
    let stack = Stack::map(64 * 1024).expect("cannot map a 64 KiB stack");
    let top = stack.top();
    let thread = Box::into_raw(Box::new(ThreadState::new(0)));
    let main = Box::into_raw(FiberRecord::new(
        Start::Thread,
        0,
        core::ptr::null_mut(),
        None,
    ));
    let fiber = Box::into_raw(FiberRecord::new(
        Start::Thread,
        0,
        core::ptr::null_mut(),
        None,
    ));
    let mut pp = PingPong { main, fiber };
    let p: *mut PingPong = &mut pp;
    // SAFETY: the stack is fresh and ours; the records, `thread` and `pp` live until the
    // end of this function, and the fiber (left suspended at the end) is never resumed
    // after its stack is dropped. No ownership CAS: only this thread touches them.
    unsafe {
        for r in [main, fiber] {
            (*r).thread.store(thread, Relaxed);
            (*r).state.store(RUNNING, Relaxed);
        }
        *(*fiber).sp.get() = arch::init_stack(top, fiber, bounce, p.cast());
        arch::switch(main, fiber);
        let t0 = Instant::now();
        for _ in 0..round_trips {
            arch::switch(main, fiber);
        }
        let elapsed = t0.elapsed();
        drop(Box::from_raw(main));
        drop(Box::from_raw(thread));
        drop(Box::from_raw(fiber));
        drop(stack);
        elapsed
    }
}
