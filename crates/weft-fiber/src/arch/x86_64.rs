//! The x86_64 (System V) context switch, in the manner of Boost.Context's
//! `jump_fcontext`: a few dozen instructions, no system call, no signal-mask change.
//!
//! A suspended fiber is just its saved stack pointer (`FiberRecord::sp`). At that
//! address lies:
//!
//! ```text
//!   sp + 0   MXCSR (4 bytes)        SSE control/status: rounding, flush-to-zero, masks
//!   sp + 4   x87 control word (2)   x87 precision and rounding
//!   sp + 8   the fiber's own record (so the resumed side knows who it is)
//!   sp + 16  r15
//!   sp + 24  r14
//!   sp + 32  r13
//!   sp + 40  r12
//!   sp + 48  rbx
//!   sp + 56  rbp
//!   sp + 64  return address         where the suspended call returns to when resumed
//! ```
//!
//! Only the callee-saved registers need saving: a switch is an ordinary call, so the
//! compiler already assumes every caller-saved register (and the status flags, and the
//! x87/SSE data registers) is clobbered. MXCSR and the x87 control word are
//! callee-saved by the ABI, which is why they are kept per fiber: a fiber that sets
//! round-up must not change the rounding of the fiber it switches to. Only their
//! control bits are callee-saved (MXCSR's six exception flags are status, which the
//! ABI does not preserve across a call), and a switch loads the other fiber's values
//! only when a control bit differs from the live ones: loading them stalls the
//! pipeline (~1.5 ns of a same-worker IPC round trip here), and two fibers seldom
//! differ.
//!
//! The resumed side finishes the ownership protocol of `fiber.rs` before returning: it
//! releases the fiber it came from (a Release store of READY, which on x86 is a plain
//! `mov`) and clears its thread's `in_switch`. A fiber that leaves for good switches
//! with `switch_exiting` instead, whose resumed side releases it according to its exit
//! note. Doing this here, rather than in Rust after the call, lets
//! `SwitchToFiber` tail-jump into the switch, so the switch returns straight to the
//! caller of `SwitchToFiber`: see `win::SwitchToFiber`.

use super::EntryFn;
use crate::fiber::{release_exited, FiberRecord};
use crate::thread::ThreadState;
use crate::thread_stack::StartCtx;
use core::arch::naked_asm;
use core::ffi::c_void;
use core::mem::offset_of;

/// The end of every resume (`switch` and `switch_exiting`), with the fiber now running
/// in rcx and the one it came from (already released) in rdx: clear the thread's
/// `in_switch`, return `prev` in rax, restore the callee-saved registers, and return
/// with `$ret`, one of:
///
/// - `jump_back!()`: pop + `jmp`. A `ret` is predicted from the return-stack buffer,
///   whose top is the return address of the *suspending* context's call; when two
///   fibers switch to each other from different call sites (the usual
///   `SwitchToFiber` ping-pong), that prediction is always wrong, while the indirect
///   jump's predictor learns the alternation. The public API uses this.
/// - `plain_return!()`: a plain `ret`. The jump leaves the return-stack buffer one entry out
///   of step (the switch's call pushed an entry no `ret` pops), so every `ret` above the
///   switch then mispredicts too, all the way up the resumed fiber's call chain. A
///   scheduler that always switches from one call site (weft-runtime: `worker::switch_to`)
///   has the switch's `ret` predicted right and keeps the buffer in step: a green
///   thread's yield went from 45 to 36 ns with it.
macro_rules! finish_resume {
    ($ret:expr) => {
        concat!(
            "mov rax, qword ptr [rcx + {thread}]\n",
            "mov byte ptr [rax + {in_switch}], 0\n",
            "mov rax, rdx\n",
            "pop r15\n",
            "pop r14\n",
            "pop r13\n",
            "pop r12\n",
            "pop rbx\n",
            "pop rbp\n",
            $ret,
        )
    };
}

/// See [`finish_resume`].
macro_rules! jump_back {
    () => {
        "pop r8\njmp r8"
    };
}
/// See [`finish_resume`].
macro_rules! plain_return {
    () => {
        "ret"
    };
}

/// The body of `switch` and `switch_ret`, ending with `$ret` (see [`finish_resume`]).
macro_rules! switch_body {
    ($ret:expr) => {
        naked_asm!(
            // Align the switch to a cache line so its layout, and so how the CPU predicts
            // its final indirect jump, is the same in every binary. (Here, moving that
            // jump by one byte changed a switch from 7 to 14 ns.)
            ".p2align 6",
            // Save the FP control state first, where the frame's last slot will be (in
            // the red zone until the pushes reach it), so that it can be read back below
            // without waiting for the stores; then the callee-saved registers and our
            // own record.
            "stmxcsr dword ptr [rsp - 64]",
            "fnstcw word ptr [rsp - 60]",
            "push rbp",
            "push rbx",
            "push r12",
            "push r13",
            "push r14",
            "push r15",
            "push rdi",
            "sub rsp, 8",
            "mov r8d, dword ptr [rsp]",
            "movzx r9d, word ptr [rsp + 4]",
            // Publish where we were suspended; hand ourselves to the other side as `prev`.
            "mov qword ptr [rdi + {sp}], rsp",
            "mov rdx, rdi",
            // Move to the other stack and restore its state. The FP control state is
            // loaded only if it differs from ours (`3:` below): loading it stalls the
            // pipeline, and two fibers seldom differ. MXCSR's low six bits are the
            // exception flags, status the ABI does not preserve across a call: a
            // difference there alone loads nothing.
            "mov rsp, qword ptr [rsi + {sp}]",
            "xor r8d, dword ptr [rsp]",
            "movzx r10d, word ptr [rsp + 4]",
            "xor r9d, r10d",
            "and r8d, -64",
            "or r8d, r9d",
            "jnz 3f",
            "4:",
            "add rsp, 8",
            "pop rcx", // me: the fiber now running
            // Release `prev` (rdx): a Release store of READY (a plain store on x86).
            "mov dword ptr [rdx + {state}], 0",
            // End the switch on the thread that runs us now.
            finish_resume!($ret),
            // The other side's FP control state differs from ours: load it.
            "3:",
            "ldmxcsr dword ptr [rsp]",
            "fldcw word ptr [rsp + 4]",
            "jmp 4b",
            sp = const offset_of!(FiberRecord, sp),
            state = const offset_of!(FiberRecord, state),
            thread = const offset_of!(FiberRecord, thread),
            in_switch = const offset_of!(ThreadState, in_switch),
        )
    };
}

/// The body of `switch_exiting` and `switch_exiting_ret`, ending with `$ret`.
macro_rules! switch_exiting_body {
    ($ret:expr) => {
        naked_asm!(
            // Nothing of `cur` needs saving: it never runs again.
            "mov rdx, rdi",
            "mov rsp, qword ptr [rsi + {sp}]",
            "ldmxcsr dword ptr [rsp]",
            "fldcw word ptr [rsp + 4]",
            "add rsp, 8",
            "pop rcx", // me
            // release_exited(me, prev), with rsp aligned for the call (it is 8 mod 16
            // here).
            "push rcx",
            "push rdx",
            "sub rsp, 8",
            "mov rdi, rcx",
            "mov rsi, rdx",
            "call {release_exited}",
            "add rsp, 8",
            "pop rdx",
            "pop rcx",
            finish_resume!($ret),
            sp = const offset_of!(FiberRecord, sp),
            thread = const offset_of!(FiberRecord, thread),
            in_switch = const offset_of!(ThreadState, in_switch),
            release_exited = sym release_exited,
        )
    };
}

/// Suspends `cur` and resumes `to`. Returns, when `cur` is resumed later (perhaps on
/// another OS thread), the fiber that resumed it, already released.
///
/// # Safety
/// `cur` is the fiber running on this thread and has no exit note (see
/// [`switch_exiting`]); `to` is a suspended fiber (or one made by `init_stack`) that the
/// caller has acquired; both records stay alive. The caller has set `to.thread` to this
/// thread's state and `in_switch` on it.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch(
    cur: *mut FiberRecord, // rdi
    to: *mut FiberRecord,  // rsi
) -> *mut FiberRecord {
    switch_body!(jump_back!())
}

/// [`switch`] ending with a plain `ret`, for a scheduler that switches from one call
/// site (see [`finish_resume`]).
///
/// # Safety
/// As for [`switch`].
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch_ret(
    cur: *mut FiberRecord, // rdi
    to: *mut FiberRecord,  // rsi
) -> *mut FiberRecord {
    switch_body!(plain_return!())
}

/// [`switch`] entered without a `call`: the return address is pushed by hand and the
/// switch is reached with a `jmp`, so neither end of the switch touches the
/// return-stack buffer.
///
/// A `call` pushes an entry on that buffer; `switch`'s jump ending pops none. Two
/// fibers that switch to each other this way would each leave one entry behind per
/// switch, and the first `ret` the resumed side makes afterwards (out of the function
/// that switched) is predicted from the other fiber's entry and mispredicts. Entered
/// with a `jmp`, the buffer is exactly as the resumed side left it when it suspended,
/// and its `ret`s are predicted right. The frame is the same as a call's (the return
/// address on top of the stack, pushed with the stack aligned for a call), so a fiber
/// suspended here may be resumed by any switch, and the other way round.
///
/// # Safety
/// As for [`switch`].
#[inline(always)]
pub(crate) unsafe fn switch_jump(cur: *mut FiberRecord, to: *mut FiberRecord) -> *mut FiberRecord {
    let prev: *mut FiberRecord;
    // SAFETY: per the contract, `switch` may run. The block behaves as a call to it
    // under the C ABI (hence `clobber_abi("C")`, and no `nostack`, which gives the
    // stack a call's alignment at the push and keeps the red zone free): the push makes
    // the call's frame, `switch` saves the callee-saved registers on it and restores
    // them when this fiber is resumed, popping the return address and jumping to `2:`,
    // with the stack pointer back where the block found it.
    unsafe {
        core::arch::asm!(
            "lea rax, [rip + 2f]",
            "push rax",
            "jmp {switch}",
            "2:",
            switch = sym switch,
            in("rdi") cur,
            in("rsi") to,
            lateout("rax") prev,
            clobber_abi("C"),
        )
    };
    prev
}

/// Leaves `cur` for good (it finished, or is to be freed) and resumes `to`. Never
/// returns.
///
/// The resumed side runs *this* function's second half, not `switch`'s: it hands the
/// fiber it came from to `release_exited`, which acts on its exit note, instead of
/// marking it READY. Keeping this case out of `switch` keeps that one free of
/// conditional branches.
///
/// # Safety
/// As for [`switch`], except that `cur` has an exit note and is never resumed.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch_exiting(
    cur: *mut FiberRecord, // rdi
    to: *mut FiberRecord,  // rsi
) -> ! {
    switch_exiting_body!(jump_back!())
}

/// [`switch_exiting`] ending with a plain `ret` (see [`switch_ret`]).
///
/// # Safety
/// As for [`switch_exiting`].
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch_exiting_ret(
    cur: *mut FiberRecord, // rdi
    to: *mut FiberRecord,  // rsi
) -> ! {
    switch_exiting_body!(plain_return!())
}

/// The first code a new fiber runs: `init_stack` made `switch` "return" here, with the
/// entry function in r13, its argument in r12 and the fiber it came from (already
/// released) in rax.
///
/// Its return address is marked undefined for the unwinder: this frame is the bottom of
/// the fiber's stack, so a backtrace or a forced unwind (`pthread_exit`) stops here.
#[unsafe(naked)]
unsafe extern "C" fn fiber_entry() -> ! {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip",
        "mov rdi, rax", // transfer: the fiber we came from
        "mov rsi, r12", // arg
        "call r13",     // main(transfer, arg): never returns
        "ud2",
        ".cfi_endproc",
    )
}

/// Lays out a new stack for fiber `rec` whose first `switch` enters
/// `main(prev, arg)`.
///
/// The new context inherits the caller's MXCSR and x87 control word, as a new thread
/// inherits its creator's.
///
/// # Safety
/// `top` must be the (exclusive) upper end of a writable region of at least 128 bytes.
pub(crate) unsafe fn init_stack(
    top: *mut u8,
    rec: *mut FiberRecord,
    main: EntryFn,
    arg: *mut c_void,
) -> *mut u8 {
    let mut fpu: u64 = 0;
    // SAFETY: stores the current control registers into a local.
    unsafe {
        core::arch::asm!(
            "stmxcsr dword ptr [{p}]",
            "fnstcw word ptr [{p} + 4]",
            p = in(reg) &mut fpu as *mut u64,
            options(nostack, preserves_flags),
        )
    };
    let top = (top as usize) & !15;
    // 16 bytes of padding at the top, then the 72-byte frame that `switch` pops. After
    // its final pop, rsp = sp + 72 is 16-byte aligned, so `call r13` enters `main` with
    // the ABI's alignment (rsp = 8 mod 16).
    let sp = (top - 88) as *mut u64;
    let frame: [u64; 11] = [
        fpu,                                      // MXCSR | x87 CW << 32
        rec as u64,                               // the fiber's own record
        0,                                        // r15
        0,                                        // r14
        main as *const () as usize as u64,        // r13
        arg as u64,                               // r12
        0,                                        // rbx
        0,                                        // rbp
        fiber_entry as *const () as usize as u64, // return address
        0,
        0,
    ];
    // SAFETY: the caller guarantees the 88 bytes below `top` are ours to write.
    unsafe { core::ptr::copy_nonoverlapping(frame.as_ptr(), sp, frame.len()) };
    sp as *mut u8
}

/// Ends the calling OS thread with `pthread_exit(value)`, called from a frame at `sp`
/// that is marked as the bottom of the stack.
///
/// glibc's `pthread_exit` unwinds with a forced unwind; when it reaches the end of the
/// stack it jumps straight back to the thread's start frame (on the thread's own stack),
/// runs the thread-local destructors and exits. Starting the unwind here means no Rust
/// frame (and no foreign C frame) between the caller and the thread's start is ever
/// unwound: they are abandoned, which is what ending a thread from a fiber means.
///
/// # Safety
/// `sp` must point into writable memory of the current stack (below every live frame the
/// exit path still needs) or into a stack that nothing else uses; the thread's own stack
/// must not be in use by any other thread.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn exit_thread_at(sp: *mut u8, value: *mut c_void) -> ! {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip",
        "mov rsp, rdi",
        "and rsp, -16",
        "mov rdi, rsi",
        "call {exit}",
        "ud2",
        ".cfi_endproc",
        exit = sym libc::pthread_exit,
    )
}

/// Runs a thread's start routine on a stack weft owns (`thread_stack.rs`): saves the
/// thread's own stack pointer in `ctx`, moves to the stack just below `ctx`, calls
/// `ctx.routine(ctx.arg)` and then `start_returned(ctx, value)`. That returns only on
/// the thread this call was made on; this then moves back to the thread's own stack and
/// returns the value.
///
/// The frame is marked as the bottom of the stack, as `fiber_entry` is: a forced unwind
/// (`pthread_exit` in the start routine) stops here and glibc jumps back to the thread's
/// start frame on its own stack.
///
/// # Safety
/// `ctx` is 16-byte aligned at the top of a stack nothing else uses, below which the
/// routine may use the whole stack.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn run_on_stack(ctx: *mut StartCtx) -> *mut c_void {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip",
        "push rbp",
        "push rbx",
        "sub rsp, 8",
        "mov [rdi + {g_sp}], rsp",
        "mov rbx, rdi",
        "mov rsp, rdi",
        "xor ebp, ebp",
        "mov rdi, [rbx + {arg}]",
        "call [rbx + {routine}]",
        "mov rdi, rbx",
        "mov rsi, rax",
        "call {returned}",
        "mov rsp, [rbx + {g_sp}]",
        "add rsp, 8",
        "pop rbx",
        "pop rbp",
        "ret",
        ".cfi_endproc",
        g_sp = const offset_of!(StartCtx, g_sp),
        arg = const offset_of!(StartCtx, arg),
        routine = const offset_of!(StartCtx, routine),
        returned = sym crate::thread_stack::start_returned,
    )
}
