//! The x86_64 (System V) context switch, in the manner of Boost.Context's
//! `jump_fcontext`: a few dozen instructions, no system call, no signal-mask change.
//!
//! A suspended context is just a stack pointer. At that address lies:
//!
//! ```text
//!   sp + 0   MXCSR (4 bytes)        SSE control/status: rounding, flush-to-zero, masks
//!   sp + 4   x87 control word (2)   x87 precision and rounding
//!   sp + 8   r15
//!   sp + 16  r14
//!   sp + 24  r13
//!   sp + 32  r12
//!   sp + 40  rbx
//!   sp + 48  rbp
//!   sp + 56  return address         where `switch` returns to when resumed
//! ```
//!
//! Only the callee-saved registers need saving: `switch` is an ordinary call, so the
//! compiler already assumes every caller-saved register (and the status flags, and the
//! x87/SSE data registers) is clobbered. MXCSR and the x87 control word are
//! callee-saved by the ABI, which is why they are kept per fiber: a fiber that sets
//! round-to-nearest-up must not change the rounding of the fiber it switches to.

use super::EntryFn;
use core::arch::naked_asm;
use core::ffi::c_void;

/// Suspends the current context into `*save` and resumes `to`, handing it `transfer`.
///
/// Returns (when this context is resumed later, possibly on another OS thread) the
/// `transfer` value given by whoever resumed it.
///
/// # Safety
/// `to` must be a stack pointer produced by an earlier `switch` or by `init_stack`, whose
/// context is not running anywhere and is owned by the caller. `save` must be valid for
/// a write.
#[unsafe(naked)]
pub(crate) unsafe extern "C" fn switch(
    save: *mut *mut u8,    // rdi
    to: *mut u8,           // rsi
    transfer: *mut c_void, // rdx
) -> *mut c_void {
    naked_asm!(
        // Save the callee-saved integer registers on the current stack.
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        // Save the floating-point control state below them.
        "sub rsp, 8",
        "stmxcsr dword ptr [rsp]",
        "fnstcw word ptr [rsp + 4]",
        // Publish where this context was suspended, and move to the other stack.
        "mov qword ptr [rdi], rsp",
        "mov rsp, rsi",
        // Restore the other context's floating-point control state and registers.
        "ldmxcsr dword ptr [rsp]",
        "fldcw word ptr [rsp + 4]",
        "add rsp, 8",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        // The resumed side sees `transfer` as the return value of its own `switch`
        // (or, on a new stack, in rax when `fiber_entry` starts).
        "mov rax, rdx",
        // Return with pop + jmp rather than `ret`: `ret` would be predicted from the
        // return-stack buffer, which holds *this* context's caller, and so mispredict
        // on every switch (measured here: 12.7 ns per switch with `ret`, 6.1 with jmp;
        // Boost.Context does the same).
        "pop r8",
        "jmp r8",
    )
}

/// The first code a new fiber runs: `init_stack` made `switch` "return" here, with the
/// entry function in r13, its argument in r12 and the transfer value in rax.
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

/// Lays out a new stack whose first `switch` enters `main(transfer, arg)`.
///
/// The new context inherits the caller's MXCSR and x87 control word, as a new thread
/// inherits its creator's.
///
/// # Safety
/// `top` must be the (exclusive) upper end of a writable region of at least 128 bytes.
pub(crate) unsafe fn init_stack(top: *mut u8, main: EntryFn, arg: *mut c_void) -> *mut u8 {
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
    // 16 bytes of padding at the top, then the 64-byte frame that `switch` pops. After
    // its `ret`, rsp = sp + 64 is 16-byte aligned, so `call r13` enters `main` with the
    // ABI's alignment (rsp = 8 mod 16).
    let sp = (top - 80) as *mut u64;
    let frame: [u64; 10] = [
        fpu,                                      // MXCSR | x87 CW << 32
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
    // SAFETY: the caller guarantees the 80 bytes below `top` are ours to write.
    unsafe { core::ptr::copy_nonoverlapping(frame.as_ptr(), sp, frame.len()) };
    sp as *mut u8
}

/// Ends the calling OS thread with `pthread_exit(NULL)`, called from a frame at `sp` that
/// is marked as the bottom of the stack.
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
pub(crate) unsafe extern "C" fn exit_thread_at(sp: *mut u8) -> ! {
    naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip",
        "mov rsp, rdi",
        "and rsp, -16",
        "xor edi, edi",
        "call {exit}",
        "ud2",
        ".cfi_endproc",
        exit = sym libc::pthread_exit,
    )
}
