//! The Windows Fibers API, under its Windows names and types.
//!
//! These are the functions `include/weft/fibers.h` declares; `libweft` exports them
//! unchanged (crate `weft-capi`). Each sets the thread's last error on failure, as
//! Windows does, and returns the Windows failure value (NULL, FALSE, FLS_OUT_OF_INDEXES).
//!
//! Where Windows defines the behaviour, weft matches it. Where Windows leaves it
//! undefined (or crashes), weft chooses the safe answer and says so:
//!
//! | call | Windows | weft |
//! |---|---|---|
//! | `SwitchToFiber` on a thread that is not a fiber | undefined | fails, `ERROR_ALREADY_THREAD` |
//! | `SwitchToFiber` to a fiber running on another thread | undefined (corrupts) | fails at once, `ERROR_BUSY`, counts a failed activation |
//! | `SwitchToFiber` to a fiber whose start routine returned (its thread ended in it) | undefined | fails, `ERROR_INVALID_HANDLE` |
//! | `SwitchToFiber`, `DeleteFiber` with a deleted fiber's handle | undefined (freed memory) | fail, `ERROR_INVALID_HANDLE`; nothing else is touched |
//! | `SwitchToFiber`, `DeleteFiber` with NULL or a pointer that is no fiber handle | crashes | fail, `ERROR_INVALID_PARAMETER` |
//! | `DeleteFiber` of a fiber running on another thread | undefined | fails, `ERROR_BUSY` |
//! | `ConvertFiberToThread` in another thread's converted fiber | undefined (the thread goes on on a stack that the other thread's end frees) | fails, `ERROR_INVALID_PARAMETER` |
//!
//! What weft does not do as Windows does (docs/fibers.md says why):
//!
//! - `FIBER_FLAG_FLOAT_SWITCH` is always on: MXCSR's and the x87 control word's control
//!   bits are per fiber, as the System V ABI has compiled code expect.
//! - While a thread lives, only that thread may delete its converted fiber
//!   (`DeleteFiber` fails with `ERROR_INVALID_PARAMETER` elsewhere).
//! - A converted fiber whose thread ended while running another fiber lives on, as on
//!   Windows, if its frames are on a stack weft owns: threads started by libweft's
//!   `pthread_create` run their start routine on one (`thread_stack.rs`). Others (the
//!   process's main thread, a thread on a stack of the caller's own) have their frames
//!   on the thread's own stack, which glibc frees with the thread: their converted fiber
//!   cannot run again once the thread has ended (`thread.rs`).
//!
//! # Safety
//!
//! Every function here is `unsafe` for the reasons the Windows API is: callbacks and
//! start routines must be sound to call with the values given, and output pointers
//! must be valid for writes. Fiber handles need no care: a handle is an index and a
//! generation checked before anything else is read (`pool.rs`), so NULL, a deleted
//! fiber's handle or any other value fails with an error.

#![allow(non_snake_case, non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // one contract for the whole module, stated above

use crate::error::Error;
pub use crate::error::{
    message as weft_error_message_str, ERROR_ALREADY_FIBER, ERROR_ALREADY_THREAD, ERROR_BUSY,
    ERROR_INVALID_FUNCTION, ERROR_INVALID_HANDLE, ERROR_INVALID_PARAMETER, ERROR_NOT_ENOUGH_MEMORY,
    ERROR_SUCCESS,
};
use crate::fiber::{self, FiberRecord, Start};
pub use crate::fls::{FLS_MAXIMUM_AVAILABLE, FLS_OUT_OF_INDEXES};
use crate::stack::{self, Stack};
use crate::{fls, pool, stats, thread, tls};
use core::arch::naked_asm;
use core::ffi::{c_char, c_void};
use core::ptr;
use core::sync::atomic::Ordering::*;

/// Windows' untyped pointer: fiber handles, fiber data and FLS values.
pub type LPVOID = *mut c_void;
/// Windows' untyped pointer (the same as [`LPVOID`]).
pub type PVOID = *mut c_void;
/// Windows' 32-bit unsigned integer: error codes, flags and FLS indexes.
pub type DWORD = u32;
/// Windows' boolean: [`TRUE`] (any nonzero value) or [`FALSE`].
pub type BOOL = i32;
/// A size in bytes (stack sizes).
pub type SIZE_T = usize;
/// A fiber's start routine: called with the `lpParameter` given to `CreateFiber`. If it
/// returns, the thread running it exits, as on Windows.
pub type LPFIBER_START_ROUTINE = Option<unsafe extern "C" fn(LPVOID)>;
/// An FLS callback (`FlsAlloc`'s argument): called with a fiber's non-NULL value when
/// the value goes away: the fiber is deleted, its thread exits, or the index is freed.
pub type PFLS_CALLBACK_FUNCTION = Option<unsafe extern "C" fn(PVOID)>;

/// The [`BOOL`] for true.
pub const TRUE: BOOL = 1;
/// The [`BOOL`] for false: the function failed (see `GetLastError`).
pub const FALSE: BOOL = 0;
/// Flag for `CreateFiberEx` and `ConvertThreadToFiberEx`: also save and restore the
/// floating-point control state (MXCSR, the x87 control word) on a switch. weft always
/// does, so the flag is accepted and changes nothing.
pub const FIBER_FLAG_FLOAT_SWITCH: DWORD = 0x1;

/// Per-fiber statistics for C (`struct weft_fiber_stats` in fibers.h).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct WeftFiberStats {
    /// Process-unique id, never reused.
    pub id: u64,
    /// Address of the start routine (0 for a converted thread).
    pub entry: usize,
    /// Usable stack bytes (0 for a converted thread).
    pub stack_size: usize,
    /// Successful switches into the fiber.
    pub activations: u64,
    /// Switches into the fiber that were refused (it was running on another thread, or
    /// had finished).
    pub failed_activations: u64,
    /// Time the fiber has run, in nanoseconds.
    pub run_time_ns: u64,
    /// 0 ready, 1 running, 2 finished.
    pub state: u32,
    /// Kernel thread id (`gettid`) of the thread that created or converted it.
    pub creator_tid: i32,
    /// Kernel thread id of the thread that ran it last (0 if it never ran).
    pub last_tid: i32,
    /// Always 0 (padding to 64 bytes).
    pub _reserved: u32,
}

#[inline(always)]
fn fail(e: Error) {
    tls::set_last_error(e.code());
}

/// Sets the last error for a handle that names no fiber: kept out of line, so that the
/// switch's own code stays together.
#[cold]
#[inline(never)]
fn bad_handle(f: LPVOID) {
    fail(pool::invalid(f as u64));
}

/// The record a fiber handle names, or why the handle is not valid (`pool.rs`).
#[inline(always)]
fn record(f: LPVOID) -> Result<*mut FiberRecord, Error> {
    pool::lookup(f as u64).ok_or_else(|| pool::invalid(f as u64))
}

fn check_flags(flags: DWORD) -> Result<(), Error> {
    if flags & !FIBER_FLAG_FLOAT_SWITCH != 0 {
        return Err(Error::InvalidParameter(
            "fiber flags: only FIBER_FLAG_FLOAT_SWITCH is defined",
        ));
    }
    Ok(())
}

/// Makes the calling thread a fiber; `param` is what `GetFiberData` returns.
#[inline]
pub unsafe extern "C" fn ConvertThreadToFiber(param: LPVOID) -> LPVOID {
    // SAFETY: forwards to the Ex form with no flags.
    unsafe { ConvertThreadToFiberEx(param, 0) }
}

/// `ConvertThreadToFiber` with flags (only `FIBER_FLAG_FLOAT_SWITCH`, always on in weft).
pub unsafe extern "C" fn ConvertThreadToFiberEx(param: LPVOID, flags: DWORD) -> LPVOID {
    match check_flags(flags).and_then(|_| thread::convert(param)) {
        // SAFETY: a live record this call just made or converted.
        Ok(f) => unsafe { (*f).handle() as LPVOID },
        Err(e) => {
            fail(e);
            ptr::null_mut()
        }
    }
}

/// Turns the calling thread back into a plain thread. As on Windows, the running fiber
/// (the thread's own, or one it created) is no longer a fiber: its handle stops working,
/// and the thread keeps its FLS values and goes on on its stack.
pub unsafe extern "C" fn ConvertFiberToThread() -> BOOL {
    match thread::convert_back() {
        Ok(()) => TRUE,
        Err(e) => {
            fail(e);
            FALSE
        }
    }
}

/// Creates a fiber with a `stack_size`-byte stack (0: 1 MiB) that will run
/// `start(param)` when first switched to.
pub unsafe extern "C" fn CreateFiber(
    stack_size: SIZE_T,
    start: LPFIBER_START_ROUTINE,
    param: LPVOID,
) -> LPVOID {
    // SAFETY: forwards.
    unsafe { CreateFiberEx(stack_size, 0, 0, start, param) }
}

/// `CreateFiber` with commit and reserve sizes (the stack is the larger, committed
/// lazily either way) and flags.
pub unsafe extern "C" fn CreateFiberEx(
    commit: SIZE_T,
    reserve: SIZE_T,
    flags: DWORD,
    start: LPFIBER_START_ROUTINE,
    param: LPVOID,
) -> LPVOID {
    match create(commit.max(reserve), flags, start, param) {
        // SAFETY: a live record this call just made or converted.
        Ok(f) => unsafe { (*f).handle() as LPVOID },
        Err(e) => {
            fail(e);
            ptr::null_mut()
        }
    }
}

fn create(
    size: usize,
    flags: DWORD,
    start: LPFIBER_START_ROUTINE,
    param: LPVOID,
) -> Result<*mut FiberRecord, Error> {
    check_flags(flags)?;
    let routine = start.ok_or(Error::InvalidParameter("start routine is NULL"))?;
    let t = thread::ensure();
    let size = Stack::round_size(size);
    // SAFETY: `t` is this thread's state.
    let stack =
        stack::acquire(Some(unsafe { &mut (*t).stacks }), size).map_err(Error::OutOfMemory)?;
    fiber::create(
        Start::C { routine },
        routine as usize,
        param,
        stack,
        &Default::default(),
    )
    .map_err(|(e, stack)| {
        // SAFETY: `t` is this thread's state.
        stack::release(Some(unsafe { &mut (*t).stacks }), stack);
        e
    })
}

/// Switches to `fiber`. On failure the caller keeps running and `GetLastError` says why.
/// Safe to call from a signal handler.
///
/// This is the hot path, so it is shaped like Boost.Context's `jump_fcontext`: a Rust
/// function does the checks, the ownership CAS and the statistics, and then this entry
/// point *tail-jumps* into `arch::switch`, which returns (when the caller is resumed)
/// straight to the caller of `SwitchToFiber`. An ordinary Rust wrapper would add a
/// `ret` that mispredicts on nearly every switch, because the two fibers of a switch call
/// `SwitchToFiber` from different places (measured here: 22 ns against 13).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
pub unsafe extern "C" fn SwitchToFiber(fiber: LPVOID) {
    naked_asm!(
        ".cfi_startproc",
        "push rdi", // align the stack for the call (rsp was 8 mod 16)
        ".cfi_adjust_cfa_offset 8",
        "call {prepare}", // rax = current fiber (0: nothing to switch), rdx = target
        "add rsp, 8",
        ".cfi_adjust_cfa_offset -8",
        "test rax, rax",
        "jz 2f",
        "mov rdi, rax",
        "mov rsi, rdx",
        "jmp {switch}",
        "2:",
        "ret",
        ".cfi_endproc",
        prepare = sym prepare_switch,
        switch = sym crate::fiber::public_switch,
    )
}

/// `SwitchToFiber` on aarch64: the same shape as on x86_64.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
pub unsafe extern "C" fn SwitchToFiber(fiber: LPVOID) {
    naked_asm!(
        ".cfi_startproc",
        "stp x29, x30, [sp, #-16]!",
        ".cfi_def_cfa_offset 16",
        ".cfi_offset x30, -8",
        ".cfi_offset x29, -16",
        "bl {prepare}", // x0 = current fiber (0: nothing to switch), x1 = target
        "ldp x29, x30, [sp], #16",
        ".cfi_def_cfa_offset 0",
        "cbz x0, 2f",
        "b {switch}",
        "2:",
        "ret",
        ".cfi_endproc",
        prepare = sym prepare_switch,
        switch = sym crate::fiber::public_switch,
    )
}

/// The two fibers of a switch that `SwitchToFiber` is about to make.
#[repr(C)]
struct Prepared {
    cur: *mut FiberRecord,
    to: *mut FiberRecord,
}

/// `SwitchToFiber` up to the context switch: validates the handle and runs
/// `fiber::begin_switch`. Returns null fibers when there is nothing to switch (the last
/// error says why, or it was a switch to the running fiber).
unsafe extern "C" fn prepare_switch(fiber: LPVOID) -> Prepared {
    const NONE: Prepared = Prepared {
        cur: ptr::null_mut(),
        to: ptr::null_mut(),
    };
    // SAFETY: `record` validates the handle; `begin_switch` checks it again once it owns
    // the record. The error path builds no heap value (the errors hold static strings),
    // so this stays fit for signal handlers.
    unsafe {
        let Some(to) = pool::lookup(fiber as u64) else {
            bad_handle(fiber);
            return NONE;
        };
        match fiber::begin_switch::<false>(to, fiber as u64) {
            Ok(Some(cur)) => Prepared { cur, to },
            Ok(None) => NONE,
            Err(e) => {
                tls::set_last_error(e.code());
                NONE
            }
        }
    }
}

/// Deletes `fiber`, running its FLS callbacks. Deleting the running fiber ends the thread.
pub unsafe extern "C" fn DeleteFiber(fiber: LPVOID) {
    // SAFETY: the handle is validated before anything else is read; the record is taken
    // (and its handle checked again) before it is freed.
    unsafe {
        let r = match record(fiber) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        if (*r).scheduled {
            return fail(Error::InvalidParameter(
                "DeleteFiber of a green thread's fiber: a green thread ends by returning, and its runtime frees it",
            ));
        }
        if (*r).rust_owned {
            return fail(Error::InvalidParameter(
                "DeleteFiber of a fiber made by the Rust API: drop its Fiber handle instead",
            ));
        }
        let t = tls::thread();
        let owner = (*r).owner.load(Acquire);
        if !owner.is_null() && owner != t {
            // Its frames are on that thread's stack, which lives as long as the thread
            // (and deleting it here while it runs would end this thread on that stack).
            return fail(Error::InvalidParameter(
                "DeleteFiber of another thread's converted fiber; that thread must call ConvertFiberToThread, or end",
            ));
        }
        if !t.is_null() && (*t).current == r {
            // Ends the thread; its cleanup runs the FLS callbacks and frees `r`.
            thread::delete_current(t, r);
        }
        let was = match crate::api::take_for_delete(r) {
            Ok(was) => was,
            Err(e) => return fail(e),
        };
        if (*r).handle() != fiber as u64 {
            // Deleted, and its record reused, since `record` checked it: give it back.
            (*r).state.store(was, Release);
            return fail(Error::StaleHandle);
        }
        if owner == t && !t.is_null() {
            // This thread's own converted fiber, suspended: its frames stay on the
            // thread's stack, unused, until the thread ends.
            if (*t).main == r {
                (*t).main = ptr::null_mut();
            }
            if (*t).home == r {
                (*t).home = ptr::null_mut();
            }
        }
        fiber::destroy(r, t);
    }
}

/// The running fiber's handle, or NULL on a thread that is not a fiber.
pub unsafe extern "C" fn GetCurrentFiber() -> LPVOID {
    let t = tls::thread();
    if t.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a non-null pointer is this thread's live state; its running fiber is live.
    unsafe {
        let cur = (*t).current;
        if cur.is_null() {
            ptr::null_mut()
        } else {
            (*cur).handle() as LPVOID
        }
    }
}

/// The `param` the running fiber was created (or converted) with.
pub unsafe extern "C" fn GetFiberData() -> LPVOID {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state; its running fiber is live.
    unsafe {
        if t.is_null() || (*t).current.is_null() {
            ptr::null_mut()
        } else {
            (*(*t).current).param
        }
    }
}

/// TRUE if the calling thread is a fiber.
pub unsafe extern "C" fn IsThreadAFiber() -> BOOL {
    // SAFETY: reads this thread's state.
    unsafe { (!GetCurrentFiber().is_null()) as BOOL }
}

/// Allocates an FLS index (1..=4079), or returns FLS_OUT_OF_INDEXES
/// (`ERROR_NOT_ENOUGH_MEMORY`).
pub unsafe extern "C" fn FlsAlloc(callback: PFLS_CALLBACK_FUNCTION) -> DWORD {
    match fls::alloc(callback) {
        Ok(i) => i,
        Err(e) => {
            fail(e);
            FLS_OUT_OF_INDEXES
        }
    }
}

/// Frees an FLS index, calling its callback for every fiber's non-null value.
pub unsafe extern "C" fn FlsFree(index: DWORD) -> BOOL {
    match fls::free(index) {
        Ok(()) => TRUE,
        Err(e) => {
            fail(e);
            FALSE
        }
    }
}

/// The running fiber's value at `index` (any index 1..=4079, allocated or not); on
/// success the last error is cleared, so a NULL value is told apart from a failure. As
/// on Windows, it fails with `ERROR_INVALID_PARAMETER` in a fiber that has no FLS yet
/// (see `fls.rs`).
#[inline]
pub unsafe extern "C" fn FlsGetValue(index: DWORD) -> PVOID {
    match fls::get(index) {
        Ok(v) => {
            tls::set_last_error(ERROR_SUCCESS);
            v
        }
        Err(e) => {
            fail(e);
            ptr::null_mut()
        }
    }
}

/// Stores the running fiber's value at `index` (any index 1..=4079, allocated or not).
#[inline]
pub unsafe extern "C" fn FlsSetValue(index: DWORD, value: PVOID) -> BOOL {
    match fls::set(index, value) {
        Ok(()) => TRUE,
        Err(e) => {
            fail(e);
            FALSE
        }
    }
}

/// The calling thread's last error.
#[inline]
pub unsafe extern "C" fn GetLastError() -> DWORD {
    tls::last_error()
}

/// Sets the calling thread's last error.
#[inline]
pub unsafe extern "C" fn SetLastError(code: DWORD) {
    tls::set_last_error(code)
}

/// Fills `*out` with `fiber`'s statistics (weft extension).
pub unsafe extern "C" fn weft_fiber_stats(fiber: LPVOID, out: *mut WeftFiberStats) -> BOOL {
    // SAFETY: the handle is validated; `out` is the caller's to write.
    unsafe {
        let r = match record(fiber) {
            Ok(r) if !out.is_null() => r,
            Ok(_) => {
                fail(Error::InvalidParameter("stats output pointer is NULL"));
                return FALSE;
            }
            Err(e) => {
                fail(e);
                return FALSE;
            }
        };
        let s = stats::snapshot(r);
        *out = WeftFiberStats {
            id: s.id,
            entry: s.entry,
            stack_size: s.stack_size,
            activations: s.activations,
            failed_activations: s.failed_activations,
            run_time_ns: s.run_time.as_nanos() as u64,
            state: s.state as u32,
            creator_tid: s.creator_tid,
            last_tid: s.last_tid,
            _reserved: 0,
        };
        TRUE
    }
}

/// A static, NUL-terminated description of a Windows error code: what went wrong and
/// what to do (weft extension).
pub unsafe extern "C" fn weft_error_message(code: DWORD) -> *const c_char {
    crate::error::message(code).as_ptr()
}
