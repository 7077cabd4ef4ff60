//! weft's C ABI: the Windows Fibers API and fiber introspection as
//! `libweft.so` / `libweft.a`.
//!
//! It exports, under their Windows names and with the C calling convention,
//! every function of [`weft_fiber::win`] (`ConvertThreadToFiber`,
//! `CreateFiber`, `SwitchToFiber`, `DeleteFiber`, `FlsAlloc`, `GetLastError`,
//! ...) plus the weft extensions `weft_fiber_stats` and `weft_error_message`:
//! each a thin `#[no_mangle]` wrapper that forwards to `weft-fiber`. The one
//! part with logic of its own is the introspection API (`weft_introspect`,
//! `weft_introspect_error`, declared in `include/weft/introspect.h`), which
//! copies [`weft_fiber::introspect::read`]'s result into the caller's buffer,
//! sorted by fiber id, and maps its errors to errno values.
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
//!
//! Green threads and their IPC have C APIs of their own: [`runtime`]
//! (`include/weft/runtime.h`: a runtime, spawn, join) and [`ipc`]
//! (`include/weft/ipc.h`: synchronous IPC between green threads), over
//! `weft_runtime`, and so do syslets, [`syslet`] (`include/weft/syslet.h`:
//! programs of system calls run asynchronously, with completions in a ring).
//! They report errors with weft's own codes ([`WEFT_ERR_INVALID_ARGUMENT`]
//! and the other `WEFT_ERR_*` constants, which `weft_error_message` explains
//! too), returned and set as `GetLastError`. No Rust panic, and no
//! runtime shutdown unwind, crosses into C: each entry point that could see
//! one catches it and returns an error code.

#![allow(non_snake_case)]
#![warn(missing_docs)]

use core::ffi::c_char;

pub mod ipc;
pub mod runtime;
pub mod syslet;

pub use ipc::WeftIpcMsg;
pub use weft_fiber::thread_stack;

/// Defines `pthread_create` and `pthread_getattr_np` in the crate that invokes it
/// (libweft, libweft-hook), in front of the C library's: the new thread's start routine
/// runs on a stack weft owns, so that its converted fiber outlives the thread as on
/// Windows, and code on that stack that asks for its thread's stack is told about it
/// ([`weft_fiber::thread_stack`]; `WEFT_THREAD_STACKS=off` turns the first off). Only
/// the C libraries define them, so Rust programs that use weft's crates keep glibc's.
#[macro_export]
macro_rules! export_pthread_create {
    () => {
        /// `pthread_create` with the start routine on a stack weft owns.
        ///
        /// # Safety
        /// As for `pthread_create`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn pthread_create(
            thread: *mut $crate::thread_stack::pthread_t,
            attr: *const $crate::thread_stack::pthread_attr_t,
            start: Option<$crate::thread_stack::StartRoutine>,
            arg: *mut core::ffi::c_void,
        ) -> core::ffi::c_int {
            // SAFETY: the caller's arguments, under pthread_create's own contract.
            unsafe { $crate::thread_stack::pthread_create(thread, attr, start, arg) }
        }

        /// `pthread_getattr_np` that describes the start stack to code running on it.
        ///
        /// # Safety
        /// As for `pthread_getattr_np`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn pthread_getattr_np(
            thread: $crate::thread_stack::pthread_t,
            attr: *mut $crate::thread_stack::pthread_attr_t,
        ) -> core::ffi::c_int {
            // SAFETY: the caller's arguments, under pthread_getattr_np's own contract.
            unsafe { $crate::thread_stack::pthread_getattr_np(thread, attr) }
        }
    };
}
pub use syslet::{SysletUatom, WeftSysletCompletion};

// ---- weft's own error codes: include/weft/runtime.h, ipc.h and syslet.h ---------
//
// Bit 29 set: the bit Windows reserves for application error codes, so these never
// collide with the ERROR_* codes above.

/// A required pointer is NULL, or a value is out of range.
pub const WEFT_ERR_INVALID_ARGUMENT: DWORD = 0x2000_0001;
/// The call needs a green thread and was made from a plain OS thread.
pub const WEFT_ERR_NOT_GREEN_THREAD: DWORD = 0x2000_0002;
/// The runtime is shutting down: the green thread must return.
pub const WEFT_ERR_SHUTDOWN: DWORD = 0x2000_0003;
/// `weft_runtime_free` was called from a runtime's own thread.
pub const WEFT_ERR_WRONG_THREAD: DWORD = 0x2000_0004;
/// A system call failed while creating a runtime; errno says which error.
pub const WEFT_ERR_SYSTEM: DWORD = 0x2000_0005;
/// A Rust panic stopped at the C boundary: a bug in weft.
pub const WEFT_ERR_INTERNAL: DWORD = 0x2000_0006;
/// An IPC timeout passed (with timeout zero: the partner was not ready).
pub const WEFT_ERR_TIMED_OUT: DWORD = 0x2000_0101;
/// An IPC operation was cancelled by `weft_ipc_cancel`.
pub const WEFT_ERR_CANCELLED: DWORD = 0x2000_0102;
/// The IPC partner has ended.
pub const WEFT_ERR_PARTNER_DEAD: DWORD = 0x2000_0103;
/// No green thread has this id.
pub const WEFT_ERR_NO_SUCH_THREAD: DWORD = 0x2000_0104;
/// The IPC partner is the caller itself, or a thread of another runtime.
pub const WEFT_ERR_INVALID_PARTNER: DWORD = 0x2000_0105;
/// A syslet atom names a system call number weft's syslet table does not know.
pub const WEFT_ERR_SYSLET_UNKNOWN_SYSCALL: DWORD = 0x2000_0201;
/// A syslet atom names a system call that cannot run in a syslet (fork, exec, exit...).
pub const WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL: DWORD = 0x2000_0202;
/// A syslet atom has fewer argument pointers than its system call takes.
pub const WEFT_ERR_SYSLET_MISSING_ARGUMENT: DWORD = 0x2000_0203;
/// A syslet atom has flag bits that are not `SYSLET_*` flags.
pub const WEFT_ERR_SYSLET_BAD_FLAGS: DWORD = 0x2000_0204;
/// A syslet atom has both `SYSLET_ASYNC` and `SYSLET_SYNC`.
pub const WEFT_ERR_SYSLET_ASYNC_AND_SYNC: DWORD = 0x2000_0205;
/// A syslet atom (the first, a `next`, a skip target) cannot be read: a bad pointer.
pub const WEFT_ERR_SYSLET_BAD_ATOM: DWORD = 0x2000_0206;
/// `weft_syslet_ctx_free` while syslets are in flight in the context.
pub const WEFT_ERR_SYSLET_BUSY: DWORD = 0x2000_0207;
/// No syslet of the context has this handle (any more).
pub const WEFT_ERR_SYSLET_NOT_IN_FLIGHT: DWORD = 0x2000_0208;

/// The description of one of weft's own codes, None for other codes.
fn weft_code_message(code: DWORD) -> Option<&'static core::ffi::CStr> {
    Some(match code {
        WEFT_ERR_INVALID_ARGUMENT => c"invalid argument: a required pointer is NULL, or a value is out of range (a worker index at or above weft_runtime_workers(), a negative timeout other than WEFT_IPC_TIMEOUT_NEVER, a NULL payload with a nonzero length); see the function's comment in weft/runtime.h or weft/ipc.h",
        WEFT_ERR_NOT_GREEN_THREAD => c"this call needs a green thread: make it from a function run by weft_runtime_run() or weft_spawn() (plain OS threads have no IPC identity)",
        WEFT_ERR_SHUTDOWN => c"the runtime is shutting down (weft_runtime_free): return from the green thread's function; for a join, the thread was cancelled before it ran",
        WEFT_ERR_WRONG_THREAD => c"weft_runtime_free cannot be called from a runtime's own threads (its workers cannot be joined from inside): call it from a plain OS thread, such as the one that created the runtime",
        WEFT_ERR_SYSTEM => c"a system call failed while starting the runtime (worker threads, io_uring, memory mappings): errno says which; check the process's limits (threads, memory, locked memory for io_uring)",
        WEFT_ERR_INTERNAL => c"internal error in weft (a panic stopped at the C boundary; its message is on stderr): a bug in weft, please report it",
        WEFT_ERR_TIMED_OUT => c"IPC timed out: the timeout passed, or with WEFT_IPC_TIMEOUT_ZERO the partner was not ready (not waiting to receive from this sender, or no sender waiting); retry, or use a longer timeout",
        WEFT_ERR_CANCELLED => c"IPC cancelled: another thread called weft_ipc_cancel() on this thread while it waited",
        WEFT_ERR_PARTNER_DEAD => c"IPC partner dead: the thread has ended (before the operation, or while this one waited)",
        WEFT_ERR_NO_SUCH_THREAD => c"no such thread: no green thread has this id (it never existed, or it ended and nothing refers to it any more); ids come from weft_ipc_self(), weft_thread_id() or a receive",
        WEFT_ERR_INVALID_PARTNER => c"invalid IPC partner: a thread cannot send to or receive from itself, and both threads must belong to the same runtime",
        WEFT_ERR_SYSLET_UNKNOWN_SYSCALL => c"syslet: unknown system call number (not in weft's syslet table): use the SYS_* numbers of <sys/syscall.h>, weft_syslet_nr(\"name\"), or SYS_UMEM_ADD; weft_syslet_validate_error() names the atom",
        WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL => c"syslet: this system call cannot run in a syslet (fork, clone, execve, exit...: it would act on the executor's thread, not the program); call it directly; weft_syslet_validate_error() names the atom",
        WEFT_ERR_SYSLET_MISSING_ARGUMENT => c"syslet: an atom has fewer argument pointers than its system call takes (the arguments end at the first NULL arg_ptr); weft_syslet_validate_error() names the atom and the call",
        WEFT_ERR_SYSLET_BAD_FLAGS => c"syslet: an atom has flag bits that are not SYSLET_* flags; weft_syslet_validate_error() names the atom and the bits",
        WEFT_ERR_SYSLET_ASYNC_AND_SYNC => c"syslet: an atom has both SYSLET_ASYNC (go to a cachemiss thread at once) and SYSLET_SYNC (never go asynchronous): keep one; weft_syslet_validate_error() names the atom",
        WEFT_ERR_SYSLET_BAD_ATOM => c"syslet: an atom cannot be read (a bad first pointer, next pointer, or the linearly next atom after one with SYSLET_SKIP_TO_NEXT_ON_STOP); weft_syslet_validate_error() says which",
        WEFT_ERR_SYSLET_BUSY => c"syslet context busy: syslets are still in flight (weft_syslet_in_flight() > 0: running, or completed and not popped); cancel them (weft_syslet_cancel), wait (async_wait) and pop their completions (weft_syslet_pop), then free the context",
        WEFT_ERR_SYSLET_NOT_IN_FLIGHT => c"no syslet of this context has this handle: it never went asynchronous here, or its completion was already popped",
        _ => return None,
    })
}

/// Records `code` as the calling thread's last error and returns it.
pub(crate) fn set_error(code: DWORD) -> DWORD {
    // SAFETY: SetLastError only writes this OS thread's last-error word.
    unsafe { weft_fiber::win::SetLastError(code) };
    code
}

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

/// Turns the calling thread back into a plain thread, from whichever fiber it runs.
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

/// weft extension: a static, NUL-terminated description of an error code:
/// the Windows `ERROR_*` codes of `fibers.h` and weft's own `WEFT_ERR_*`
/// codes of `runtime.h`, `ipc.h` and `syslet.h`.
///
/// # Safety
/// Always safe to call from C; the returned text must not be freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_error_message(code: DWORD) -> *const c_char {
    match weft_code_message(code) {
        Some(m) => m.as_ptr(),
        // SAFETY: no preconditions beyond those of the forwarded function.
        None => unsafe { weft_fiber::win::weft_error_message(code) },
    }
}

// ---- introspection: include/weft/introspect.h ---------------------------------

/// One fiber as `weft_introspect` reports it: `struct weft_fiber_info` of
/// `include/weft/introspect.h` (80 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeftFiberInfo {
    /// Process-unique id, never reused.
    pub id: u64,
    /// `WEFT_FIBER_READY` (0), `WEFT_FIBER_RUNNING` (1) or `WEFT_FIBER_FINISHED` (2).
    pub state: u32,
    /// 1 for a converted thread, 0 for a created fiber.
    pub is_thread_fiber: u32,
    /// Start routine address in the target process (0 for a converted thread).
    pub entry: u64,
    /// Kernel thread id of the thread that created (or converted) it.
    pub creator_tid: i32,
    /// Kernel thread id of the thread it runs on now; 0 when the fiber is not running.
    pub running_on: i32,
    /// Kernel thread id of the thread it last ran on (0 if it never ran).
    pub last_tid: i32,
    /// [`WEFT_FIBER_INFO_INCONSISTENT`] if the record was not copied as one; else 0.
    /// (A reserved field, always 0, before: the layout is unchanged.)
    pub flags: u32,
    /// Successful switches into it.
    pub activations: u64,
    /// Switches into it that were refused (running on another thread, or finished).
    pub failed_activations: u64,
    /// Time it has run, in nanoseconds.
    pub run_time_ns: u64,
    /// Lowest usable stack address (0 for a converted thread).
    pub stack_base: u64,
    /// Usable stack bytes (0 for a converted thread).
    pub stack_size: u64,
}

/// In [`WeftFiberInfo::flags`]: the fiber's record was kept busy by its process for the
/// reader's whole patience, so its fields were copied one by one, not as one
/// (`FiberInfo::consistent` is false; `weft ps` shows its state with a `?`).
pub const WEFT_FIBER_INFO_INCONSISTENT: u32 = 1;

impl From<&weft_fiber::introspect::FiberInfo> for WeftFiberInfo {
    fn from(f: &weft_fiber::introspect::FiberInfo) -> Self {
        use weft_fiber::FiberState;
        WeftFiberInfo {
            id: f.id,
            state: match f.state {
                FiberState::Ready => 0,
                FiberState::Running => 1,
                FiberState::Finished => 2,
            },
            is_thread_fiber: f.is_thread_fiber.into(),
            entry: f.entry,
            creator_tid: f.creator_tid,
            running_on: f.running_on.unwrap_or(0),
            last_tid: f.last_tid,
            flags: if f.consistent {
                0
            } else {
                WEFT_FIBER_INFO_INCONSISTENT
            },
            activations: f.activations,
            failed_activations: f.failed_activations,
            run_time_ns: u64::try_from(f.run_time.as_nanos()).unwrap_or(u64::MAX),
            stack_base: f.stack_base,
            stack_size: f.stack_size,
        }
    }
}

std::thread_local! {
    /// The message `weft_introspect_error` returns on this thread.
    static INTROSPECT_ERROR: core::cell::RefCell<std::ffi::CString> =
        core::cell::RefCell::new(c"no error".to_owned());
}

/// Records a failure of `weft_introspect` on this thread: errno and message.
fn introspect_fail(errno: i32, message: String) -> core::ffi::c_long {
    let message = std::ffi::CString::new(message.replace('\0', " "))
        .unwrap_or_else(|_| c"weft_introspect failed".to_owned());
    // The thread-local may be gone while this thread exits; errno still tells.
    let _ = INTROSPECT_ERROR.try_with(|m| *m.borrow_mut() = message);
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = errno };
    -1
}

/// The errno and message of a reader error.
fn introspect_errno(e: &weft_fiber::introspect::IntrospectError) -> (i32, String) {
    use weft_fiber::introspect::IntrospectError as E;
    let errno = match e {
        E::NotUsingWeft { .. } | E::NoSuchProcess { .. } => libc::ESRCH,
        E::Stale { .. } => libc::ESTALE,
        E::PermissionDenied { .. } => libc::EACCES,
        E::BadFormat { .. } => libc::EINVAL,
        E::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EIO,
    };
    (errno, e.to_string())
}

/// weft extension: reads the fibers of process `pid` (0: this one) into
/// `out[0..cap]`, sorted by id, and returns how many fibers it has (possibly
/// more than `cap`), or -1 with errno set.
///
/// # Safety
/// `out` must be NULL (then `cap` must be 0, or the call fails with EINVAL) or
/// valid for writing `cap` `WeftFiberInfo`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_introspect(
    pid: core::ffi::c_int,
    out: *mut WeftFiberInfo,
    cap: usize,
) -> core::ffi::c_long {
    if pid < 0 {
        return introspect_fail(
            libc::EINVAL,
            format!(
                "weft_introspect: pid {pid} is negative: pass a process id, or 0 for this process"
            ),
        );
    }
    if out.is_null() && cap > 0 {
        return introspect_fail(
            libc::EINVAL,
            format!(
                "weft_introspect: out is NULL but cap is {cap}: pass a buffer of cap entries, \
                 or cap 0 to ask only for the number of fibers"
            ),
        );
    }
    // A panic must not unwind into C.
    let result = std::panic::catch_unwind(|| weft_fiber::introspect::read(pid));
    let snapshot = match result {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let (errno, message) = introspect_errno(&e);
            return introspect_fail(errno, message);
        }
        Err(_) => {
            return introspect_fail(
                libc::EIO,
                "weft_introspect: internal error while reading the registry (a bug in weft: \
                 please report it)"
                    .into(),
            )
        }
    };
    let mut fibers: Vec<WeftFiberInfo> = snapshot.fibers.iter().map(WeftFiberInfo::from).collect();
    fibers.sort_unstable_by_key(|f| f.id);
    let n = fibers.len().min(cap);
    if n > 0 {
        // SAFETY: out is not NULL (cap > 0) and valid for cap >= n entries (the
        // caller's contract); the source is our own vector, so they do not overlap.
        unsafe { core::ptr::copy_nonoverlapping(fibers.as_ptr(), out, n) };
    }
    core::ffi::c_long::try_from(fibers.len()).unwrap_or(core::ffi::c_long::MAX)
}

/// weft extension: the message of the last `weft_introspect` failure on this
/// thread ("no error" before the first).
///
/// # Safety
/// Always safe to call from C; the text must not be freed, and is valid until
/// the next `weft_introspect` call on this thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_introspect_error() -> *const c_char {
    INTROSPECT_ERROR
        .try_with(|m| m.borrow().as_ptr())
        .unwrap_or(c"weft_introspect_error: called while this thread exits".as_ptr())
}
