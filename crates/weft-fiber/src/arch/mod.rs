//! The machine-dependent part of the fiber core: the context switch and the
//! first frame of a new fiber's stack.
//!
//! Everything above this module is portable. An architecture provides:
//!
//! - `switch(cur, to) -> prev`: save the callee-saved registers and the floating-point
//!   control state on `cur`'s stack and its stack pointer in `cur`, load `to`'s, and on
//!   the resumed side release the fiber it came from and clear its thread's
//!   `in_switch` (the resume half of the protocol in `fiber.rs`), then return that
//!   fiber.
//! - `switch_exiting(cur, to) -> !`: the same for a fiber that will never run again; the
//!   resumed side hands it to `fiber::release_exited`, which acts on its exit note.
//! - `switch_ret` and `switch_exiting_ret`: the same two, ending in the way that suits a
//!   scheduler switching from a single call site (see `x86_64::finish_resume`).
//! - `init_stack(top, rec, main, arg) -> sp`: lay out a stack so that the first `switch`
//!   to it enters `main(prev, arg)`, which must never return.
//! - `exit_thread_at(sp, value) -> !`: move to `sp` and call `pthread_exit(value)` from
//!   a frame marked as the end of the stack, so the unwinder that `pthread_exit` starts
//!   stops at once and glibc jumps back to the thread's start frame, without unwinding
//!   any Rust frame.
//! - `run_on_stack(ctx) -> value`: run a thread's start routine on a stack weft owns,
//!   from a frame marked as the bottom of that stack, and come back to the thread's own
//!   stack when it returns there (`thread_stack.rs`).

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub(crate) use x86_64::{
    exit_thread_at, init_stack, run_on_stack, switch, switch_exiting, switch_exiting_ret,
    switch_jump, switch_ret,
};

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::{
    exit_thread_at, init_stack, run_on_stack, stack_pointer, switch, switch_exiting,
};
// aarch64's switch already returns with `ret` (through the link register), which its
// return-address predictor handles as the x86_64 `_ret` variants do.
#[cfg(target_arch = "aarch64")]
pub(crate) use aarch64::{
    switch as switch_ret, switch as switch_jump, switch_exiting as switch_exiting_ret,
};

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("weft's fiber core supports x86_64 and aarch64");

/// The signature of the function a new fiber starts in: `main(transfer, arg)`.
pub(crate) type EntryFn = unsafe extern "C" fn(*mut core::ffi::c_void, *mut core::ffi::c_void) -> !;

/// Reads the current stack pointer.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register; touches no memory.
    unsafe {
        core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}
