//! Green threads for C: `include/weft/runtime.h`, over [`weft_runtime`].
//!
//! A `weft_runtime *` is a boxed [`Runtime`]; a `weft_thread *` a boxed
//! [`JoinHandle`] of the thread's `void *` result (kept as a `usize`, which is
//! `Send`), with the thread's IPC identity once `weft_thread_id` has asked for
//! it.
//!
//! ## Panics and the shutdown unwind
//!
//! Nothing may unwind into C. The runtime's own unwind is the one to watch:
//! when a runtime shuts down, a green thread parked in it is resumed with a
//! [`Shutdown`] unwind raised from its park, meant to unwind the thread to its
//! base. A C thread's stack has C frames in the way, so every entry point that
//! can park runs under an internal `guard` function, which catches it and returns
//! `WEFT_ERR_SHUTDOWN` instead: the C function is told to return.
//!
//! The runtime raises that unwind once per thread; later parks of the thread
//! return at once, which would turn a retry loop in C (or the IPC protocol's
//! own wait loop, resumed in a half-finished operation) into a busy loop that
//! keeps the shutdown waiting. So a thread that has seen it is remembered
//! (the internal `shutdown` module) until its function returns, and every
//! blocking call it makes meanwhile fails with `WEFT_ERR_SHUTDOWN` without
//! entering the runtime.

use crate::{
    set_error, DWORD, ERROR_NOT_ENOUGH_MEMORY, WEFT_ERR_INTERNAL, WEFT_ERR_INVALID_ARGUMENT,
    WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_SHUTDOWN, WEFT_ERR_SYSTEM, WEFT_ERR_WRONG_THREAD,
};
use core::ffi::{c_char, c_uint, c_void};
use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;
use weft_runtime::ipc::Tid;
use weft_runtime::{JoinHandle, Runtime, Shutdown, ThreadBuilder};

/// The function a green thread runs (`weft_thread_fn`); None is C's NULL.
pub type WeftThreadFn = Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>;

/// `weft_runtime` of `runtime.h`: a runtime, opaque to C.
pub struct WeftRuntime {
    rt: Runtime,
}

/// `weft_thread` of `runtime.h`: a green thread's handle, opaque to C.
pub struct WeftThread {
    handle: JoinHandle<usize>,
    /// The thread's IPC identity, made by the first `weft_thread_id`: it keeps
    /// the id known to `Tid::from_id` while the handle exists.
    tid: OnceLock<Tid>,
}

/// The threads that have seen the shutdown unwind and not yet returned (see the
/// module comment).
pub(crate) mod shutdown {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering::*};
    use std::sync::Mutex;
    use weft_runtime::ipc;

    /// How many ids the set holds: the fast path of `is_marked` reads only this.
    static COUNT: AtomicUsize = AtomicUsize::new(0);

    fn with_set<R>(f: impl FnOnce(&mut HashSet<u64>) -> R) -> R {
        static SET: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
        let mut g = SET.lock().unwrap_or_else(|e| e.into_inner());
        f(g.get_or_insert_with(HashSet::new))
    }

    /// Remembers that the calling green thread has seen the shutdown unwind.
    pub(crate) fn mark() {
        if let Some(me) = ipc::try_me() {
            if with_set(|s| s.insert(me.id())) {
                COUNT.fetch_add(1, Release);
            }
        }
    }

    /// Whether the calling green thread has seen the shutdown unwind.
    pub(crate) fn is_marked() -> bool {
        COUNT.load(Acquire) > 0
            && ipc::try_me().is_some_and(|me| with_set(|s| s.contains(&me.id())))
    }

    /// The calling green thread's function has returned: forget it.
    pub(crate) fn thread_returned() {
        if COUNT.load(Acquire) == 0 {
            return;
        }
        if let Some(me) = ipc::try_me() {
            if with_set(|s| s.remove(&me.id())) {
                COUNT.fetch_sub(1, Release);
            }
        }
    }
}

/// Runs `f`, an entry point's work that may park, with no unwind escaping: the
/// shutdown unwind becomes `WEFT_ERR_SHUTDOWN` (and the thread is remembered,
/// see the module comment), any other panic `WEFT_ERR_INTERNAL`. A thread that
/// has already seen the shutdown gets `WEFT_ERR_SHUTDOWN` at once.
pub(crate) fn guard<T, E>(
    f: impl FnOnce() -> Result<T, E>,
    err: impl Fn(DWORD) -> E,
) -> Result<T, E> {
    if shutdown::is_marked() {
        return Err(err(WEFT_ERR_SHUTDOWN));
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) if p.is::<Shutdown>() => {
            // The marking itself must not unwind either.
            let _ = catch_unwind(shutdown::mark);
            Err(err(WEFT_ERR_SHUTDOWN))
        }
        Err(_) => Err(err(WEFT_ERR_INTERNAL)),
    }
}

/// `guard` for entry points whose error is a plain code.
fn guarded<T>(f: impl FnOnce() -> Result<T, DWORD>) -> Result<T, DWORD> {
    guard(f, |c| c)
}

/// Returns 0 for Ok, or records and returns the error code.
fn code(r: Result<(), DWORD>) -> DWORD {
    match r {
        Ok(()) => 0,
        Err(c) => set_error(c),
    }
}

/// A green thread's body: runs the C function, then forgets the thread's
/// shutdown mark if it had one.
fn body(f: unsafe extern "C" fn(*mut c_void) -> *mut c_void, arg: usize) -> usize {
    // SAFETY: the caller of weft_spawn / weft_runtime_run promised that `f` may be
    // called with `arg` on a green thread (the contract in runtime.h). An unwind
    // cannot come out of an `extern "C"` function.
    let r = unsafe { f(arg as *mut c_void) } as usize;
    // Must not unwind: the thread's base would take a panic here for the thread's.
    let _ = catch_unwind(shutdown::thread_returned);
    r
}

/// The runtime behind a `weft_runtime *`, or the invalid-argument code.
///
/// # Safety
/// `rt` is NULL or a live runtime from `weft_runtime_new`.
unsafe fn runtime<'a>(rt: *const WeftRuntime) -> Result<&'a Runtime, DWORD> {
    // SAFETY: per the contract.
    unsafe { rt.as_ref() }
        .map(|r| &r.rt)
        .ok_or(WEFT_ERR_INVALID_ARGUMENT)
}

/// Starts a runtime with `workers` workers (0: one per CPU); NULL on failure,
/// with the error as `GetLastError` (and errno for `WEFT_ERR_SYSTEM`).
#[unsafe(no_mangle)]
pub extern "C" fn weft_runtime_new(workers: c_uint) -> *mut WeftRuntime {
    let built = catch_unwind(|| {
        let mut b = Runtime::builder();
        if workers > 0 {
            b = b.workers(workers as usize);
        }
        b.build()
    });
    match built {
        Ok(Ok(rt)) => Box::into_raw(Box::new(WeftRuntime { rt })),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::OutOfMemory => {
            set_error(ERROR_NOT_ENOUGH_MEMORY);
            core::ptr::null_mut()
        }
        Ok(Err(e)) => {
            // SAFETY: __errno_location returns this thread's errno, always valid.
            unsafe { *libc::__errno_location() = e.raw_os_error().unwrap_or(libc::EIO) };
            set_error(WEFT_ERR_SYSTEM);
            core::ptr::null_mut()
        }
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            core::ptr::null_mut()
        }
    }
}

/// The number of workers of `rt` (0 with `WEFT_ERR_INVALID_ARGUMENT` if NULL).
///
/// # Safety
/// `rt` is NULL or a live runtime from `weft_runtime_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_runtime_workers(rt: *const WeftRuntime) -> c_uint {
    // SAFETY: per the contract.
    match unsafe { runtime(rt) } {
        Ok(rt) => c_uint::try_from(rt.workers()).unwrap_or(c_uint::MAX),
        Err(c) => {
            set_error(c);
            0
        }
    }
}

/// Runs `f(arg)` as a green thread of `rt` and waits for it; its result goes to
/// `*result` when `result` is not NULL. Returns 0 or an error code.
///
/// # Safety
/// `rt` is NULL or a live runtime; `f` is NULL or a function that may be called
/// with `arg` on another thread; `result` is NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_runtime_run(
    rt: *mut WeftRuntime,
    f: WeftThreadFn,
    arg: *mut c_void,
    result: *mut *mut c_void,
) -> DWORD {
    // SAFETY: per the contract (`rt`, `f` and `arg` as for weft_spawn, `result` as
    // for join).
    let r = unsafe { spawn(rt, None, "", f, arg).and_then(|t| join(t, result)) };
    code(r)
}

/// Shuts `rt` down (see `runtime.h`) and frees it. Returns 0 or an error code.
///
/// # Safety
/// `rt` is NULL or a live runtime that no other call uses from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_runtime_free(rt: *mut WeftRuntime) -> DWORD {
    if rt.is_null() {
        return set_error(WEFT_ERR_INVALID_ARGUMENT);
    }
    // From inside a runtime, dropping would panic (its own) or block a worker on
    // the other's shutdown: refuse both, leaving `rt` as it was.
    if weft_runtime::workers().is_some() {
        return set_error(WEFT_ERR_WRONG_THREAD);
    }
    // SAFETY: a live runtime from weft_runtime_new (a Box), no longer used by anyone.
    let rt = unsafe { Box::from_raw(rt) };
    code(catch_unwind(AssertUnwindSafe(move || drop(rt))).map_err(|_| WEFT_ERR_INTERNAL))
}

/// Spawns `f(arg)` in `rt`, on `worker` if given, named `name` ("" for none).
///
/// # Safety
/// As `weft_spawn`.
unsafe fn spawn(
    rt: *mut WeftRuntime,
    worker: Option<c_uint>,
    name: &str,
    f: WeftThreadFn,
    arg: *mut c_void,
) -> Result<Box<WeftThread>, DWORD> {
    // SAFETY: per the contract.
    let rt = unsafe { runtime(rt) }?;
    let f = f.ok_or(WEFT_ERR_INVALID_ARGUMENT)?;
    let arg = arg as usize;
    let worker = match worker {
        Some(w) if w as usize >= rt.workers() => return Err(WEFT_ERR_INVALID_ARGUMENT),
        Some(w) => Some(w as usize),
        None => None,
    };
    // `weft ps` shows the C function as the thread's entry point.
    let b = ThreadBuilder::new().name(name).foreign_entry(f as usize);
    // Spawning may yield (a preemption point), so it may see the shutdown unwind.
    let handle = guarded(|| {
        match worker {
            None => b.spawn_in(rt, move || body(f, arg)),
            Some(w) => b.spawn_on_in(rt, w, move || body(f, arg)),
        }
        .map_err(|_| ERROR_NOT_ENOUGH_MEMORY)
    })?;
    Ok(Box::new(WeftThread {
        handle,
        tid: OnceLock::new(),
    }))
}

/// Waits for the thread of `t` and gives its result to `*result` (if not NULL).
///
/// # Safety
/// `result` is NULL or valid for writing a pointer.
unsafe fn join(t: Box<WeftThread>, result: *mut *mut c_void) -> Result<(), DWORD> {
    let v = guarded(move || match t.handle.join() {
        Ok(v) => Ok(v),
        // Cancelled before it ran (shutdown); a C function cannot panic.
        Err(p) if p.is::<Shutdown>() => Err(WEFT_ERR_SHUTDOWN),
        Err(_) => Err(WEFT_ERR_INTERNAL),
    })?;
    if !result.is_null() {
        // SAFETY: not NULL, so valid for writing a pointer (the contract).
        unsafe { *result = v as *mut c_void };
    }
    Ok(())
}

/// Starts `f(arg)` as a green thread of `rt`; returns its handle, or NULL with
/// the error as `GetLastError`.
///
/// # Safety
/// `rt` is NULL or a live runtime; `f` is NULL or a function that may be called
/// with `arg` on another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_spawn(
    rt: *mut WeftRuntime,
    f: WeftThreadFn,
    arg: *mut c_void,
) -> *mut WeftThread {
    // SAFETY: per the contract.
    let r = unsafe { spawn(rt, None, "", f, arg) };
    handle_or_null(r)
}

/// The text of a C string for a name: "" for NULL, invalid UTF-8 replaced.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn name_of<'a>(name: *const c_char) -> std::borrow::Cow<'a, str> {
    if name.is_null() {
        return "".into();
    }
    // SAFETY: a NUL-terminated string (the contract).
    unsafe { CStr::from_ptr(name) }.to_string_lossy()
}

/// As `weft_spawn`, naming the thread `name` (NULL or "": no name) for `weft
/// ps`, `weft top` and `weft fs`.
///
/// # Safety
/// As `weft_spawn`; `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_spawn_named(
    rt: *mut WeftRuntime,
    name: *const c_char,
    f: WeftThreadFn,
    arg: *mut c_void,
) -> *mut WeftThread {
    // SAFETY: per the contract.
    let r = catch_unwind(AssertUnwindSafe(|| unsafe {
        spawn(rt, None, &name_of(name), f, arg)
    }))
    .unwrap_or(Err(WEFT_ERR_INTERNAL));
    handle_or_null(r)
}

/// Names the calling green thread (or fiber) `name` (NULL or "": no name) for
/// `weft ps`, `weft top` and `weft fs`. Returns 0, or
/// `WEFT_ERR_NOT_GREEN_THREAD` from a thread that is not a fiber.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_thread_set_name(name: *const c_char) -> DWORD {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: per the contract.
        let name = unsafe { name_of(name) };
        weft_fiber::set_name(&name).map_err(|_| WEFT_ERR_NOT_GREEN_THREAD)
    }))
    .unwrap_or(Err(WEFT_ERR_INTERNAL));
    code(r)
}

/// As `weft_spawn`, on worker `worker`, where the thread stays.
///
/// # Safety
/// As `weft_spawn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_spawn_on(
    rt: *mut WeftRuntime,
    worker: c_uint,
    f: WeftThreadFn,
    arg: *mut c_void,
) -> *mut WeftThread {
    // SAFETY: per the contract.
    let r = unsafe { spawn(rt, Some(worker), "", f, arg) };
    handle_or_null(r)
}

/// The handle for C, or NULL with the error recorded.
fn handle_or_null(r: Result<Box<WeftThread>, DWORD>) -> *mut WeftThread {
    match r {
        Ok(t) => Box::into_raw(t),
        Err(c) => {
            set_error(c);
            core::ptr::null_mut()
        }
    }
}

/// The thread's id (its IPC address and fiber id), or 0 with
/// `WEFT_ERR_INVALID_ARGUMENT` if `t` is NULL.
///
/// # Safety
/// `t` is NULL or a live handle (not yet joined or detached).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_thread_id(t: *const WeftThread) -> u64 {
    // SAFETY: per the contract.
    let Some(t) = (unsafe { t.as_ref() }) else {
        set_error(WEFT_ERR_INVALID_ARGUMENT);
        return 0;
    };
    // Making the identity registers the id for Tid::from_id (the handle's own id
    // alone is not enough: a thread that has not used IPC yet has no identity).
    match catch_unwind(AssertUnwindSafe(|| {
        t.tid.get_or_init(|| t.handle.tid()).id()
    })) {
        Ok(id) => id,
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            0
        }
    }
}

/// Waits for the thread, frees its handle, and stores its result in `*result`
/// when `result` is not NULL. Returns 0 or an error code.
///
/// # Safety
/// `t` is NULL or a live handle, not used again after this call; `result` is
/// NULL or valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_thread_join(t: *mut WeftThread, result: *mut *mut c_void) -> DWORD {
    if t.is_null() {
        return set_error(WEFT_ERR_INVALID_ARGUMENT);
    }
    // SAFETY: a live handle from weft_spawn (a Box), given up by the caller.
    let t = unsafe { Box::from_raw(t) };
    // SAFETY: `result` per the contract.
    code(unsafe { join(t, result) })
}

/// Frees the handle without waiting for the thread. NULL is ignored.
///
/// # Safety
/// `t` is NULL or a live handle, not used again after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_thread_detach(t: *mut WeftThread) {
    if !t.is_null() {
        // SAFETY: a live handle from weft_spawn (a Box), given up by the caller.
        let t = unsafe { Box::from_raw(t) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(t)));
    }
}

/// Lets the other ready green threads of this worker run. Returns 0 or
/// `WEFT_ERR_SHUTDOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn weft_yield() -> DWORD {
    code(guarded(|| {
        weft_runtime::yield_now();
        Ok(())
    }))
}

/// Parks the calling green thread (or sleeps the OS thread) for `ns`
/// nanoseconds. Returns 0 or `WEFT_ERR_SHUTDOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn weft_sleep_ns(ns: u64) -> DWORD {
    code(guarded(|| {
        weft_runtime::sleep(Duration::from_nanos(ns));
        Ok(())
    }))
}
