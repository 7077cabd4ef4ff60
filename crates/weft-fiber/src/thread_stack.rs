//! Threads whose start routine runs on a stack weft owns, so that their converted fiber
//! outlives them as on Windows.
//!
//! On Windows every stack belongs to a fiber: a thread that ends while it runs a fiber
//! it created leaves its converted fiber behind, and any thread may switch to it later
//! (its start routine goes on from where it stopped). On Linux a thread's frames are on
//! the stack glibc gave it, and glibc frees or reuses that stack when the thread ends;
//! worse, the thread's exit path (`pthread_exit` jumps back to glibc's start frame and
//! runs the thread's destructors there) writes over the frames just below that start
//! frame, which is where the start routine's frames are.
//!
//! So a thread created through [`pthread_create`] (which `libweft` exports under that
//! name, in front of glibc's) runs its start routine on a second stack, one of weft's
//! (`stack.rs`), the size the caller asked for (glibc's default if none). glibc's own
//! stack keeps only glibc's start frame and, below it, what runs when the thread ends.
//! The stack waits in the thread's state (`ThreadState::start_stack`) and goes to the
//! thread's own record once the thread has one (it converts, or uses FLS): that record's
//! frames are then on a stack the record owns, which is freed with the record (when it
//! is deleted, or when the thread ends in it). Nothing else changes hands, so the rules
//! are those of a fiber made by `CreateFiber`:
//!
//! - The thread ends in its own record (the start routine returns, or `pthread_exit`):
//!   the record and the stack are freed by the thread's cleanup, which runs on glibc's
//!   stack, after the start routine's stack is left for good.
//! - The thread ends in another fiber: its converted fiber is suspended on its own stack
//!   and lives on; any thread may switch to it, and `DeleteFiber` frees it with its
//!   stack.
//! - The start routine returns on another thread (the converted fiber was resumed there):
//!   as on Windows, that thread ends (`start_returned`), and its `pthread_join` returns
//!   the routine's value. Only the thread the routine started on goes back to glibc's
//!   start frame, which is on its own stack.
//!
//! The stack switch is `arch::run_on_stack`. Its frame is marked as the bottom of the
//! new stack, so a `pthread_exit` (or a cancellation) in the start routine unwinds the
//! routine's frames, as glibc would, stops there and jumps back to glibc's start frame.
//!
//! Not covered: the process's main thread (glibc starts it, on the process stack), a
//! thread created with a stack of the caller's own (`pthread_attr_setstack`: that memory
//! is the caller's), threads started before `libweft` was loaded, and every thread when
//! `WEFT_THREAD_STACKS=off`. For those, the converted fiber's frames are on the thread's
//! own stack, so after the thread ends in another fiber that fiber cannot run again
//! (`thread.rs`).
//!
//! Code that asks for its own thread's stack (`pthread_getattr_np(pthread_self())`:
//! AddressSanitizer when a thread starts, Rust's std, garbage collectors) must find the
//! stack it runs on. So `libweft` exports [`pthread_getattr_np`] too: asked about the
//! calling thread from its start stack, it describes that stack. Asked about another
//! thread, it describes that thread's glibc stack, as glibc does.

use crate::stack::{self, Stack};
use crate::{arch, thread, tls};
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};

pub use libc::{pthread_attr_t, pthread_t};

/// A thread's start routine (`void *(*)(void *)`).
pub type StartRoutine = unsafe extern "C" fn(*mut c_void) -> *mut c_void;

/// `pthread_create`'s C signature.
pub type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    Option<StartRoutine>,
    *mut c_void,
) -> c_int;

/// What a new thread needs to start on its stack: handed over by [`pthread_create`].
struct Launch {
    routine: StartRoutine,
    arg: *mut c_void,
    stack: Stack,
}

/// Kept at the top of the start routine's stack, where it lives as long as the routine's
/// frames (`arch::run_on_stack` reads the offsets).
#[repr(C)]
pub(crate) struct StartCtx {
    pub routine: StartRoutine,
    pub arg: *mut c_void,
    /// The thread's own stack pointer, saved by `run_on_stack`.
    pub g_sp: *mut c_void,
    /// Which start this is: equal to `ThreadState::start_serial` on the thread it was
    /// made on, and on no other.
    pub serial: u64,
}

/// Serial numbers of started threads (0: none).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// The C library's definition of `name` (the next one after weft's), looked up once
/// into `cache` (0: not yet); 0 if there is none.
fn next_definition(cache: &AtomicUsize, name: &core::ffi::CStr) -> usize {
    let mut f = cache.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only looks a symbol up.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        cache.store(f, Relaxed);
    }
    f
}

/// glibc's `pthread_create`.
fn next_pthread_create() -> Option<PthreadCreate> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next_definition(&NEXT, c"pthread_create");
    // SAFETY: a non-null result is the C library's `pthread_create`, of this signature.
    (f != 0).then(|| unsafe { core::mem::transmute::<usize, PthreadCreate>(f) })
}

/// Whether new threads get a start stack of weft's: yes unless `WEFT_THREAD_STACKS=off`.
fn enabled() -> bool {
    // 0: not read yet, 1: off, 2: on.
    static ON: AtomicU8 = AtomicU8::new(0);
    match ON.load(Relaxed) {
        0 => {
            let on = std::env::var_os("WEFT_THREAD_STACKS").is_none_or(|v| v != "off");
            ON.store(if on { 2 } else { 1 }, Relaxed);
            on
        }
        v => v == 2,
    }
}

// SAFETY: the declaration is glibc's prototype of the function.
unsafe extern "C" {
    /// glibc's: the stack address set with `pthread_attr_setstack` (or its older forms),
    /// NULL if none.
    fn pthread_attr_getstackaddr(
        attr: *const libc::pthread_attr_t,
        addr: *mut *mut c_void,
    ) -> c_int;
}

/// The stack size a thread made with `attr` gets (glibc's default when `attr` is NULL
/// or sets none), and whether `attr` gives a stack of the caller's own.
///
/// # Safety
/// `attr` is NULL or an initialised attribute object.
unsafe fn requested_stack(attr: *const libc::pthread_attr_t) -> (usize, bool) {
    // SAFETY: per the contract; a default attribute object is initialised here and
    // destroyed after use.
    unsafe {
        let mut size: usize = 0;
        if attr.is_null() {
            let mut a: libc::pthread_attr_t = core::mem::zeroed();
            if libc::pthread_attr_init(&mut a) == 0 {
                libc::pthread_attr_getstacksize(&a, &mut size);
                libc::pthread_attr_destroy(&mut a);
            }
            return (size, false);
        }
        let mut addr: *mut c_void = core::ptr::null_mut();
        let own = pthread_attr_getstackaddr(attr, &mut addr) == 0 && !addr.is_null();
        libc::pthread_attr_getstacksize(attr, &mut size);
        (size, own)
    }
}

/// `pthread_create` with the start routine on a stack of weft's (see the module
/// comment): `libweft` exports this as `pthread_create`. A Rust program gets the same
/// for its threads by defining `pthread_create` the same way, forwarding to this.
///
/// Falls back to glibc's own thread when the caller gives a stack of its own, when
/// `WEFT_THREAD_STACKS=off`, or when `start` is NULL. Returns `EAGAIN` if no stack can
/// be mapped, as glibc does.
///
/// # Safety
/// As for `pthread_create`: `thread` is valid for a write, `attr` is NULL or
/// initialised, and `start(arg)` is sound to call on the new thread.
pub unsafe fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: Option<StartRoutine>,
    arg: *mut c_void,
) -> c_int {
    let Some(next) = next_pthread_create() else {
        return libc::ENOSYS;
    };
    // SAFETY: per the contract.
    let (size, own) = unsafe { requested_stack(attr) };
    let Some(routine) = start.filter(|_| enabled() && !own) else {
        // SAFETY: the caller's arguments, unchanged.
        return unsafe { next(thread, attr, start, arg) };
    };
    let Ok(stack) = stack::acquire(None, Stack::round_size(size)) else {
        return libc::EAGAIN;
    };
    let launch = Box::into_raw(Box::new(Launch {
        routine,
        arg,
        stack,
    }));
    // SAFETY: the caller's thread and attr; `thread_start` takes `launch` over.
    let rc = unsafe { next(thread, attr, Some(thread_start), launch.cast()) };
    if rc != 0 {
        // SAFETY: no thread was made, so `launch` is still ours.
        let launch = unsafe { Box::from_raw(launch) };
        stack::release(None, launch.stack);
    }
    rc
}

/// A new thread's first function, on glibc's stack: moves to the start stack and runs
/// the start routine there.
unsafe extern "C" fn thread_start(launch: *mut c_void) -> *mut c_void {
    // SAFETY: `pthread_create` handed this thread the `Launch` it boxed.
    let Launch {
        routine,
        arg,
        stack,
    } = *unsafe { Box::from_raw(launch.cast::<Launch>()) };
    let t = thread::ensure();
    let range = stack.guard().end..stack.top() as usize;
    let serial = NEXT_SERIAL.fetch_add(1, Relaxed);
    let ctx = ((stack.top() as usize - core::mem::size_of::<StartCtx>()) & !15) as *mut StartCtx;
    // SAFETY: `t` is this new thread's state; `ctx` lies at the top of the stack, which
    // nothing uses yet. The stack stays in the thread's state (or, later, its own
    // record) for as long as the routine's frames may be on it.
    unsafe {
        ctx.write(StartCtx {
            routine,
            arg,
            g_sp: core::ptr::null_mut(),
            serial,
        });
        (*t).start_serial = serial;
        (*t).start_range = range;
        (*t).start_stack = Some(stack);
        arch::run_on_stack(ctx)
    }
}

/// The start routine returned `value` (called by `arch::run_on_stack`, on the start
/// stack). On the thread it started on, returns `value`, and `run_on_stack` goes back to
/// glibc's start frame. On another thread, which had switched to the thread's converted
/// fiber, ends that thread, as Windows does.
///
/// # Safety
/// `ctx` is the `StartCtx` at the top of the stack the caller runs on.
pub(crate) unsafe extern "C" fn start_returned(
    ctx: *mut StartCtx,
    value: *mut c_void,
) -> *mut c_void {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state; `ctx` is per the contract.
    unsafe {
        if !t.is_null() && (*t).start_serial == (*ctx).serial {
            return value;
        }
        thread::end_running_thread(t, value)
    }
}

/// glibc's `pthread_getattr_np`.
fn next_getattr_np() -> Option<PthreadGetattrNp> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let f = next_definition(&NEXT, c"pthread_getattr_np");
    // SAFETY: a non-null result is the C library's `pthread_getattr_np`, of this
    // signature.
    (f != 0).then(|| unsafe { core::mem::transmute::<usize, PthreadGetattrNp>(f) })
}

/// `pthread_getattr_np`'s C signature.
pub type PthreadGetattrNp =
    unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> c_int;

/// `pthread_getattr_np` that knows start stacks (see the module comment): `libweft`
/// exports this as `pthread_getattr_np`. For the calling thread, while it runs on its
/// start stack, the attributes describe that stack; otherwise they are glibc's.
///
/// # Safety
/// As for `pthread_getattr_np`: `attr` is valid for writes (and is initialised by the
/// call on success).
pub unsafe fn pthread_getattr_np(
    thread: libc::pthread_t,
    attr: *mut libc::pthread_attr_t,
) -> c_int {
    let Some(next) = next_getattr_np() else {
        return libc::ENOSYS;
    };
    // SAFETY: the caller's arguments, unchanged.
    let rc = unsafe { next(thread, attr) };
    if rc != 0 {
        return rc;
    }
    let t = tls::thread();
    let sp = arch::stack_pointer();
    // SAFETY: `pthread_self` has no preconditions; a non-null `t` is this thread's live
    // state; `attr` was initialised by the call above.
    unsafe {
        if t.is_null() || libc::pthread_equal(thread, libc::pthread_self()) == 0 {
            return rc;
        }
        let range = (*t).start_range.clone();
        if range.contains(&sp) {
            libc::pthread_attr_setstack(attr, range.start as *mut c_void, range.end - range.start);
        }
    }
    rc
}
