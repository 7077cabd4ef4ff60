//! The aarch64 (AAPCS64) context switch: the same protocol as `x86_64.rs`.
//!
//! A suspended fiber's stack pointer points at a 176-byte frame:
//!
//! ```text
//!   sp + 0    FPCR                  rounding mode, flush-to-zero (per fiber, like MXCSR)
//!   sp + 8    the fiber's own record
//!   sp + 16   x19 x20 x21 x22 x23 x24 x25 x26 x27 x28
//!   sp + 96   x29 (frame pointer), x30 (link register: where the switch returns to)
//!   sp + 112  d8 .. d15             callee-saved halves of v8-v15
//! ```
//!
//! Unlike x86, aarch64 does not order plain stores: the release of the previous fiber
//! is a store-release (`stlr`), which publishes its saved registers and stack pointer
//! to the next thread that takes it with an acquiring CAS.

use super::EntryFn;
use crate::fiber::{release_exited, FiberRecord};
use crate::thread::ThreadState;
use crate::thread_stack::StartCtx;
use core::arch::naked_asm;
use core::ffi::c_void;
use core::mem::offset_of;

const FRAME: usize = 176;

/// The end of every resume (`switch` and `switch_exiting`), with the fiber now running in
/// x3 and the one it came from (already released) in x2: clear the thread's `in_switch`,
/// return `prev` in x0, restore the callee-saved registers, and return.
macro_rules! finish_resume {
    () => {
        concat!(
            "ldr x9, [x3, #{thread}]\n",
            "strb wzr, [x9, #{in_switch}]\n",
            "mov x0, x2\n",
            "ldp x19, x20, [sp, #16]\n",
            "ldp x21, x22, [sp, #32]\n",
            "ldp x23, x24, [sp, #48]\n",
            "ldp x25, x26, [sp, #64]\n",
            "ldp x27, x28, [sp, #80]\n",
            "ldp x29, x30, [sp, #96]\n",
            "ldp d8, d9, [sp, #112]\n",
            "ldp d10, d11, [sp, #128]\n",
            "ldp d12, d13, [sp, #144]\n",
            "ldp d14, d15, [sp, #160]\n",
            "add sp, sp, #176\n",
            "ret",
        )
    };
}

/// Suspends `cur` and resumes `to`; see `x86_64::switch` for the contract.
///
/// # Safety
/// As for the x86_64 version.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch(
    cur: *mut FiberRecord, // x0
    to: *mut FiberRecord,  // x1
) -> *mut FiberRecord {
    naked_asm!(
        ".p2align 6",
        "sub sp, sp, #176",
        "stp x19, x20, [sp, #16]",
        "stp x21, x22, [sp, #32]",
        "stp x23, x24, [sp, #48]",
        "stp x25, x26, [sp, #64]",
        "stp x27, x28, [sp, #80]",
        "stp x29, x30, [sp, #96]",
        "stp d8, d9, [sp, #112]",
        "stp d10, d11, [sp, #128]",
        "stp d12, d13, [sp, #144]",
        "stp d14, d15, [sp, #160]",
        "mrs x9, fpcr",
        "stp x9, x0, [sp]",
        // Publish where we were suspended; hand ourselves to the other side as `prev`.
        "mov x9, sp",
        "str x9, [x0, #{sp}]",
        "mov x2, x0",
        // Move to the other stack and restore its state.
        "ldr x9, [x1, #{sp}]",
        "mov sp, x9",
        "ldp x9, x3, [sp]", // FPCR, me
        "msr fpcr, x9",
        // Release `prev`: a store-release of READY.
        "add x9, x2, #{state}",
        "stlr wzr, [x9]",
        // End the switch on the thread that runs us now, and return into the fiber.
        finish_resume!(),
        sp = const offset_of!(FiberRecord, sp),
        state = const offset_of!(FiberRecord, state),
        thread = const offset_of!(FiberRecord, thread),
        in_switch = const offset_of!(ThreadState, in_switch),
    )
}

/// Leaves `cur` for good and resumes `to`; see `x86_64::switch_exiting`.
///
/// # Safety
/// As for the x86_64 version.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch_exiting(
    cur: *mut FiberRecord, // x0
    to: *mut FiberRecord,  // x1
) -> ! {
    naked_asm!(
        "mov x2, x0",
        "ldr x9, [x1, #{sp}]",
        "mov sp, x9",
        "ldp x9, x3, [sp]",
        "msr fpcr, x9",
        // release_exited(me, prev), keeping both across the call.
        "stp x2, x3, [sp, #-16]!",
        "mov x0, x3",
        "mov x1, x2",
        "bl {release_exited}",
        "ldp x2, x3, [sp], #16",
        finish_resume!(),
        sp = const offset_of!(FiberRecord, sp),
        thread = const offset_of!(FiberRecord, thread),
        in_switch = const offset_of!(ThreadState, in_switch),
        release_exited = sym release_exited,
    )
}

/// The first code a new fiber runs: entry function in x21, its argument in x20, the
/// fiber it came from (already released) in x0. The bottom frame of the fiber's stack.
#[unsafe(naked)]
unsafe extern "C" fn fiber_entry() -> ! {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined x30",
        "mov x1, x20",
        "blr x21",
        "brk #0",
        ".cfi_endproc",
    )
}

/// Lays out a new stack for fiber `rec` whose first `switch` enters `main(prev, arg)`;
/// the new context inherits the caller's FPCR.
///
/// # Safety
/// `top` must be the (exclusive) upper end of a writable region of at least 256 bytes.
pub(crate) unsafe fn init_stack(
    top: *mut u8,
    rec: *mut FiberRecord,
    main: EntryFn,
    arg: *mut c_void,
) -> *mut u8 {
    let fpcr: u64;
    // SAFETY: reads a system register.
    unsafe {
        core::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack, preserves_flags))
    };
    let top = (top as usize) & !15;
    let sp = (top - 16 - FRAME) as *mut u64;
    let mut frame = [0u64; FRAME / 8];
    frame[0] = fpcr;
    frame[1] = rec as u64;
    frame[3] = arg as u64; // x20
    frame[4] = main as *const () as usize as u64; // x21
    frame[13] = fiber_entry as *const () as usize as u64; // x30
                                                          // SAFETY: the caller guarantees the bytes below `top` are ours to write.
    unsafe { core::ptr::copy_nonoverlapping(frame.as_ptr(), sp, frame.len()) };
    sp as *mut u8
}

/// Ends the calling thread with `pthread_exit(value)` from a frame at `sp` marked as the
/// bottom of the stack; see the x86_64 version.
///
/// # Safety
/// As for the x86_64 version.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn exit_thread_at(sp: *mut u8, value: *mut c_void) -> ! {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined x30",
        "and sp, x0, #0xfffffffffffffff0",
        "mov x0, x1",
        "bl {exit}",
        "brk #0",
        ".cfi_endproc",
        exit = sym libc::pthread_exit,
    )
}

/// Reads the current stack pointer.
#[inline(always)]
pub(crate) fn stack_pointer() -> usize {
    let sp: usize;
    // SAFETY: reads a register; touches no memory.
    unsafe {
        core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    sp
}

/// Runs a thread's start routine on a stack weft owns; see the x86_64 version.
///
/// # Safety
/// As for the x86_64 version.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn run_on_stack(ctx: *mut StartCtx) -> *mut c_void {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined x30",
        "stp x29, x30, [sp, #-32]!",
        "str x19, [sp, #16]",
        "mov x9, sp",
        "str x9, [x0, #{g_sp}]",
        "mov x19, x0",
        "mov sp, x0",
        "mov x29, #0",
        "ldr x9, [x19, #{routine}]",
        "ldr x0, [x19, #{arg}]",
        "blr x9",
        "mov x1, x0",
        "mov x0, x19",
        "bl {returned}",
        "ldr x9, [x19, #{g_sp}]",
        "mov sp, x9",
        "ldr x19, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "ret",
        ".cfi_endproc",
        g_sp = const offset_of!(StartCtx, g_sp),
        arg = const offset_of!(StartCtx, arg),
        routine = const offset_of!(StartCtx, routine),
        returned = sym crate::thread_stack::start_returned,
    )
}
