//! weft's C ABI: the Windows Fibers API as `libweft.so` / `libweft.a`.
//!
//! This crate contains no logic of its own. It exports, under their
//! Windows names and with the C calling convention, every function of
//! [`weft_fiber::win`] (`ConvertThreadToFiber`, `CreateFiber`,
//! `SwitchToFiber`, `DeleteFiber`, `FlsAlloc`, `GetLastError`, ...) plus the
//! weft extensions `weft_fiber_stats` and `weft_error_message`. Each
//! exported symbol is a thin `#[no_mangle]` wrapper that forwards to the
//! implementation in `weft-fiber`.
//!
//! The C declarations live in `include/weft/fibers.h` at the root of the
//! repository; a ported Windows program replaces `#include <windows.h>`
//! with `#include <weft/fibers.h>` and links with `-lweft`
//! (`pkg-config --cflags --libs weft` after `make install`). The header
//! and this file must be kept in sync: `crates/weft-capi/tests/c_api.rs`
//! compiles and runs the C tests in `tests/c/` against the built library,
//! including one that references every declared function.
//!
//! The types, constants and error codes are re-exported from
//! [`weft_fiber::win`] so that Rust users of this crate see the same names
//! as C users.

#![allow(non_snake_case)]

use core::ffi::c_char;

pub use weft_fiber::win::{
    WeftFiberStats, BOOL, DWORD, ERROR_ALREADY_FIBER, ERROR_ALREADY_THREAD, ERROR_BUSY,
    ERROR_INVALID_FUNCTION, ERROR_INVALID_HANDLE, ERROR_INVALID_PARAMETER, ERROR_NOT_ENOUGH_MEMORY,
    ERROR_SUCCESS, FALSE, FIBER_FLAG_FLOAT_SWITCH, FLS_MAXIMUM_AVAILABLE, FLS_OUT_OF_INDEXES,
    LPFIBER_START_ROUTINE, LPVOID, PFLS_CALLBACK_FUNCTION, PVOID, SIZE_T, TRUE,
};

/// Converts the calling thread into a fiber whose data is `param`.
///
/// # Safety
/// See `ConvertThreadToFiber` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ConvertThreadToFiber(param: LPVOID) -> LPVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::ConvertThreadToFiber(param) }
}

/// Converts the calling thread into a fiber, with flags (0 or
/// `FIBER_FLAG_FLOAT_SWITCH`).
///
/// # Safety
/// See `ConvertThreadToFiberEx` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ConvertThreadToFiberEx(param: LPVOID, flags: DWORD) -> LPVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::ConvertThreadToFiberEx(param, flags) }
}

/// Turns the calling thread's fiber back into a plain thread.
///
/// # Safety
/// See `ConvertFiberToThread` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ConvertFiberToThread() -> BOOL {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::ConvertFiberToThread() }
}

/// Creates a fiber with a stack of `stack_size` bytes (0 = default).
///
/// # Safety
/// See `CreateFiber` in `include/weft/fibers.h`; `start` must be a valid
/// function that may be called with `param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn CreateFiber(
    stack_size: SIZE_T,
    start: LPFIBER_START_ROUTINE,
    param: LPVOID,
) -> LPVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::CreateFiber(stack_size, start, param) }
}

/// Creates a fiber with separate commit and reserve sizes and flags.
///
/// # Safety
/// See `CreateFiberEx` in `include/weft/fibers.h`; `start` must be a valid
/// function that may be called with `param`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn CreateFiberEx(
    commit: SIZE_T,
    reserve: SIZE_T,
    flags: DWORD,
    start: LPFIBER_START_ROUTINE,
    param: LPVOID,
) -> LPVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::CreateFiberEx(commit, reserve, flags, start, param) }
}

/// Saves the current fiber's state and runs `fiber`.
///
/// # Safety
/// See `SwitchToFiber` in `include/weft/fibers.h`; `fiber` must be NULL or a
/// handle returned by this library and not yet deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn SwitchToFiber(fiber: LPVOID) {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::SwitchToFiber(fiber) }
}

/// Deletes `fiber`, running its FLS callbacks; deleting the current fiber
/// ends the calling thread.
///
/// # Safety
/// See `DeleteFiber` in `include/weft/fibers.h`; `fiber` must be NULL or a
/// handle returned by this library and not yet deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn DeleteFiber(fiber: LPVOID) {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::DeleteFiber(fiber) }
}

/// Returns the current fiber's handle, or NULL if the thread is not a fiber.
///
/// # Safety
/// Always safe to call from C; `unsafe` only to match the C ABI surface.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetCurrentFiber() -> LPVOID {
    // SAFETY: no preconditions beyond those of the forwarded function.
    unsafe { weft_fiber::win::GetCurrentFiber() }
}

/// Returns the data of the current fiber (its creation parameter).
///
/// # Safety
/// See `GetFiberData` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetFiberData() -> LPVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::GetFiberData() }
}

/// Returns TRUE if the calling thread is a fiber.
///
/// # Safety
/// Always safe to call from C; `unsafe` only to match the C ABI surface.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn IsThreadAFiber() -> BOOL {
    // SAFETY: no preconditions beyond those of the forwarded function.
    unsafe { weft_fiber::win::IsThreadAFiber() }
}

/// Allocates a fiber-local storage index.
///
/// # Safety
/// `cb`, if not NULL, must be a valid function that may be called with any
/// value later stored in the slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn FlsAlloc(cb: PFLS_CALLBACK_FUNCTION) -> DWORD {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::FlsAlloc(cb) }
}

/// Frees an FLS index, calling its callback for every non-null value.
///
/// # Safety
/// See `FlsFree` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn FlsFree(index: DWORD) -> BOOL {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::FlsFree(index) }
}

/// Reads the current fiber's value in an FLS slot.
///
/// # Safety
/// See `FlsGetValue` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn FlsGetValue(index: DWORD) -> PVOID {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::FlsGetValue(index) }
}

/// Stores the current fiber's value in an FLS slot.
///
/// # Safety
/// See `FlsSetValue` in `include/weft/fibers.h`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn FlsSetValue(index: DWORD, value: PVOID) -> BOOL {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::FlsSetValue(index, value) }
}

/// Returns the calling thread's last error code.
///
/// # Safety
/// Always safe to call from C; `unsafe` only to match the C ABI surface.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn GetLastError() -> DWORD {
    // SAFETY: no preconditions beyond those of the forwarded function.
    unsafe { weft_fiber::win::GetLastError() }
}

/// Sets the calling thread's last error code.
///
/// # Safety
/// Always safe to call from C; `unsafe` only to match the C ABI surface.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn SetLastError(code: DWORD) {
    // SAFETY: no preconditions beyond those of the forwarded function.
    unsafe { weft_fiber::win::SetLastError(code) }
}

/// weft extension: copies the statistics of `fiber` into `*out`.
///
/// # Safety
/// `fiber` must be NULL or a live fiber handle; `out` must be NULL or valid
/// for writing one `WeftFiberStats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_fiber_stats(fiber: LPVOID, out: *mut WeftFiberStats) -> BOOL {
    // SAFETY: same contract as the forwarded function; the caller upholds it.
    unsafe { weft_fiber::win::weft_fiber_stats(fiber, out) }
}

/// weft extension: a static, NUL-terminated description of an error code.
///
/// # Safety
/// Always safe to call from C; the returned text must not be freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_error_message(code: DWORD) -> *const c_char {
    // SAFETY: no preconditions beyond those of the forwarded function.
    unsafe { weft_fiber::win::weft_error_message(code) }
}
