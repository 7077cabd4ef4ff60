//! The bare context switch, for benchmarks: what a switch costs without ownership,
//! statistics or any bookkeeping (`weft bench fibers` reports it beside `SwitchToFiber`).

use crate::arch;
use crate::stack::Stack;
use core::ffi::c_void;
use std::time::{Duration, Instant};

struct PingPong {
    main_sp: *mut u8,
    fiber_sp: *mut u8,
}

unsafe extern "C" fn bounce(_transfer: *mut c_void, arg: *mut c_void) -> ! {
    let pp = arg.cast::<PingPong>();
    loop {
        // SAFETY: `pp` outlives the ping-pong; main is suspended whenever we run.
        unsafe {
            arch::switch(
                &raw mut (*pp).fiber_sp,
                (*pp).main_sp,
                core::ptr::null_mut(),
            )
        };
    }
}

/// Times `round_trips` round trips (2 switches each) between this thread and a fiber
/// using only the architecture's context switch.
pub fn pingpong(round_trips: u64) -> Duration {
    let stack = Stack::map(64 * 1024).expect("cannot map a 64 KiB stack");
    let mut pp = PingPong {
        main_sp: core::ptr::null_mut(),
        fiber_sp: core::ptr::null_mut(),
    };
    let p: *mut PingPong = &mut pp;
    // SAFETY: the stack is fresh and ours; `pp` lives until the end of this function, and
    // the fiber (left suspended at the end) is never resumed after its stack is dropped.
    unsafe {
        (*p).fiber_sp = arch::init_stack(stack.top(), bounce, p.cast());
        arch::switch(&raw mut (*p).main_sp, (*p).fiber_sp, core::ptr::null_mut());
        let t0 = Instant::now();
        for _ in 0..round_trips {
            arch::switch(&raw mut (*p).main_sp, (*p).fiber_sp, core::ptr::null_mut());
        }
        t0.elapsed()
    }
}
