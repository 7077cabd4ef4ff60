//! Per-OS-thread state: which fiber runs here, the thread's own fiber, its stack cache,
//! its signal stack; conversion to and from a fiber; and what happens when a thread ends.
//!
//! # A thread's own fiber
//!
//! `ConvertThreadToFiber` wraps the running thread in a fiber record (`main`) that uses
//! the thread's own stack. Other fibers may switch to it from any thread, but because it
//! lives on this thread's stack, this thread must not exit while it runs elsewhere
//! (glibc would free the stack under it); weft checks this at exit and stops the process
//! with a message rather than corrupt memory.
//!
//! A thread that uses FLS without converting still gets a `main` record (Windows gives
//! every thread fiber-local storage), but `current` stays null: the thread is not a
//! fiber until it converts, and converting keeps its FLS values.
//!
//! # Ending a thread from a fiber
//!
//! On Windows, a fiber start routine that returns, or `DeleteFiber` on the running fiber,
//! ends the thread. weft does this with `pthread_exit` started from a frame marked as the
//! bottom of the stack (`arch::exit_thread_at`), after taking ownership of the thread's
//! own fiber so that no other thread resumes it while glibc jumps back onto its stack.
//! glibc then runs the thread-local destructors on the thread's own stack, where
//! [`ThreadGuard`] cleans up: FLS callbacks for the fiber that was running and for the
//! thread's own fiber, freeing them, returning cached stacks, removing the signal stack.
//!
//! Fibers the thread created are *not* deleted when it exits: any thread may switch to
//! them (fibers move between threads), so they live until `DeleteFiber`, as on Windows.
//! Rust `Fiber` handles delete their fiber when dropped.

use crate::arch;
use crate::error::Error;
use crate::fiber::{self, FiberRecord, Start, EXIT_DELETE, READY, RUNNING};
use crate::stack::StackCache;
use crate::tls;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering::*};

/// One OS thread's fiber state. Reached through `tls::thread()` before a switch and
/// through `FiberRecord::thread` after one.
pub(crate) struct ThreadState {
    /// The fiber running on this thread; null unless the thread is a fiber.
    pub current: *mut FiberRecord,
    /// The thread's own fiber (converted, or implicit for FLS); null if none.
    pub main: *mut FiberRecord,
    /// Set while a switch is half done (see `fiber.rs`, signal handlers).
    pub in_switch: AtomicBool,
    /// Set once the thread has taken its own fiber to end itself.
    pub exiting: bool,
    /// Kernel thread id (cached: `gettid` is a system call).
    pub tid: i32,
    pub stacks: StackCache,
    /// Registry slots freed on this thread, marked free, kept for reuse without the
    /// registry's lock (as `stacks` keeps stacks).
    pub slots: Vec<*mut crate::registry::Slot>,
    /// Fiber ids reserved for this thread: `next_id..id_end` (see [`take_id`]).
    pub next_id: u64,
    pub id_end: u64,
    pub altstack: Option<crate::overflow::AltStack>,
}

impl ThreadState {
    pub(crate) fn new(tid: i32) -> ThreadState {
        ThreadState {
            current: ptr::null_mut(),
            main: ptr::null_mut(),
            in_switch: AtomicBool::new(false),
            exiting: false,
            tid,
            stacks: StackCache::new(),
            slots: Vec::new(),
            next_id: 0,
            id_end: 0,
            altstack: None,
        }
    }
}

/// How many freed registry slots a thread keeps for reuse.
pub(crate) const THREAD_CACHE_SLOTS: usize = 64;

/// A registry slot for a new fiber: one this thread freed earlier, else a new one.
pub(crate) fn take_slot() -> *mut crate::registry::Slot {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state.
    if let Some(slot) = (!t.is_null())
        .then(|| unsafe { (*t).slots.pop() })
        .flatten()
    {
        return slot;
    }
    crate::registry::alloc_slot()
}

/// How many fiber ids a thread reserves at a time.
const ID_BLOCK: u64 = 64;

/// A process-unique id for a new fiber: from a block of [`ID_BLOCK`] ids this thread
/// reserved with one atomic add (a locked instruction per fiber otherwise, ~7 ns on a
/// spawn). Ids are never reused; they increase per thread, not across threads.
pub(crate) fn take_id(global: &core::sync::atomic::AtomicU64) -> u64 {
    use core::sync::atomic::Ordering::Relaxed;
    let t = tls::thread();
    if t.is_null() {
        return global.fetch_add(1, Relaxed);
    }
    // SAFETY: a non-null pointer is this thread's live state, touched by it alone.
    unsafe {
        if (*t).next_id == (*t).id_end {
            (*t).next_id = global.fetch_add(ID_BLOCK, Relaxed);
            (*t).id_end = (*t).next_id + ID_BLOCK;
        }
        (*t).next_id += 1;
        (*t).next_id - 1
    }
}

/// The kernel id of the calling thread.
pub(crate) fn gettid() -> i32 {
    let t = tls::thread();
    if t.is_null() {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::gettid() }
    } else {
        // SAFETY: a non-null pointer is this thread's live state.
        unsafe { (*t).tid }
    }
}

std::thread_local! {
    /// Registered when a thread first gets state; its destructor is the thread's cleanup.
    static GUARD: ThreadGuard = const { ThreadGuard };
}

struct ThreadGuard;

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        // SAFETY: runs once, on this thread, during its TLS destruction.
        unsafe { cleanup_exiting_thread() }
    }
}

/// This thread's state, created on first use (not signal-safe: never called on the
/// switch path).
pub(crate) fn ensure() -> *mut ThreadState {
    let t = tls::thread();
    if !t.is_null() {
        return t;
    }
    crate::clock::read_environment();
    // SAFETY: gettid has no preconditions.
    let t = Box::into_raw(Box::new(ThreadState::new(unsafe { libc::gettid() })));
    tls::set_thread(t);
    // Registering the destructor may fail only during thread teardown, in which case
    // cleanup has already run or is running; nothing more to do then.
    let _ = GUARD.try_with(|_| ());
    t
}

/// This thread's own fiber record, created (not yet converted) if needed.
pub(crate) fn ensure_main(t: *mut ThreadState) -> *mut FiberRecord {
    // SAFETY: `t` is this thread's state.
    unsafe {
        if (*t).main.is_null() {
            let rec = Box::into_raw(Box::new(FiberRecord::new(
                Start::Thread,
                0,
                ptr::null_mut(),
                None,
                &Default::default(),
            )));
            (*rec).state.store(RUNNING, Relaxed);
            (*rec).thread.store(t, Relaxed);
            (*t).main = rec;
        }
        (*t).main
    }
}

/// Makes the calling thread a fiber (Windows `ConvertThreadToFiber`).
pub(crate) fn convert(param: *mut c_void) -> Result<*mut FiberRecord, Error> {
    let t = ensure();
    // SAFETY: `t` is this thread's state.
    unsafe {
        if !(*t).current.is_null() {
            return Err(Error::AlreadyFiber);
        }
        let main = ensure_main(t);
        (*main).param = param;
        // Show the thread's fiber in the registry: running here, timed from now.
        let sl = (*main).slot();
        sl.begin_write();
        sl.last_tid.store((*t).tid, Relaxed);
        sl.switched_in_at.store(
            if crate::clock::run_time_accounting() {
                crate::clock::ticks()
            } else {
                0
            },
            Relaxed,
        );
        sl.state.store(crate::registry::SLOT_RUNNING, Relaxed);
        sl.end_write();
        crate::overflow::install_for_thread(t);
        (*t).current = main;
        Ok(main)
    }
}

/// Turns the calling thread back into a plain thread (Windows `ConvertFiberToThread`),
/// running the FLS callbacks of its fiber and freeing it.
pub(crate) fn convert_back() -> Result<(), Error> {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state.
    unsafe {
        if t.is_null() || (*t).current.is_null() {
            return Err(Error::NotAFiber);
        }
        if (*t).current != (*t).main {
            return Err(Error::NotThreadFiber);
        }
        let main = (*t).main;
        (*t).current = ptr::null_mut();
        (*t).main = ptr::null_mut();
        fiber::destroy(main, t);
        Ok(())
    }
}

/// A C start routine returned: end the thread, as Windows does.
pub(crate) unsafe fn exit_from_returned_fiber(me: *mut FiberRecord) -> ! {
    // SAFETY: `me` runs on this thread; its `thread` is this thread's state.
    unsafe { exit_thread_from((*me).thread.load(Relaxed), me) }
}

/// Ends the calling thread, which is running fiber `me` (a start routine returned, or
/// `DeleteFiber` of the running fiber). Never returns.
pub(crate) unsafe fn exit_thread_from(t: *mut ThreadState, me: *mut FiberRecord) -> ! {
    // SAFETY: `t` is this thread's state and `me` its running fiber.
    unsafe {
        let main = (*t).main;
        if main != me
            && (*main)
                .state
                .compare_exchange(READY, RUNNING, Acquire, Relaxed)
                .is_err()
        {
            die(format_args!(
                "fiber {} ended thread {} (its start routine returned or it deleted itself), but \
                 that thread's own fiber is running on another thread, on this thread's stack; \
                 ending the thread would free that stack. Switch back to the thread's own \
                 fiber before ending it",
                (*me).id,
                (*t).tid
            ));
        }
        (*t).exiting = true;
        // Leave 256 bytes below our frame (the red zone and more) and exit from there.
        arch::exit_thread_at((arch::stack_pointer() - 256) as *mut u8)
    }
}

/// `DeleteFiber` of the running fiber: frees it and ends the thread.
pub(crate) unsafe fn delete_current(t: *mut ThreadState, me: *mut FiberRecord) -> ! {
    // SAFETY: as for `exit_thread_from`.
    unsafe {
        *(*me).exit.get() = EXIT_DELETE;
        exit_thread_from(t, me)
    }
}

/// The thread is ending (its TLS destructors run): clean up what weft holds for it.
unsafe fn cleanup_exiting_thread() {
    let t = tls::thread();
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is this thread's state; the thread runs no fiber code any more.
    unsafe {
        let cur = (*t).current;
        let main = (*t).main;
        if !cur.is_null() && cur != main {
            // The thread ended while running a created fiber (its routine returned, it
            // deleted itself, or it called pthread_exit). Its stack is no longer in use:
            // we are back on the thread's own stack.
            if *(*cur).exit.get() == EXIT_DELETE {
                fiber::destroy(cur, t);
            } else {
                crate::fls::run_callbacks(cur);
                fiber::mark_finished(cur);
            }
            if !(*t).exiting {
                // Ended from inside a fiber by other means (pthread_exit): the thread's
                // own fiber must not be running elsewhere.
                if (*main)
                    .state
                    .compare_exchange(READY, RUNNING, Acquire, Relaxed)
                    .is_err()
                {
                    die(format_args!(
                        "thread {} ended while its own fiber runs on another thread, on this \
                         thread's stack; end threads only from their own fiber",
                        (*t).tid
                    ));
                }
            }
        }
        if !main.is_null() {
            (*t).main = ptr::null_mut();
            fiber::destroy(main, t);
        }
        (*t).current = ptr::null_mut();
        (*t).stacks.drain_to_global();
        for slot in (*t).slots.drain(..) {
            crate::registry::free_slot(slot);
        }
        if let Some(alt) = (*t).altstack.take() {
            alt.remove();
        }
        tls::set_thread(ptr::null_mut());
        drop(Box::from_raw(t));
    }
}

/// Prints `weft: <message>` and aborts: for states weft cannot continue from safely.
pub(crate) fn die(msg: core::fmt::Arguments<'_>) -> ! {
    eprintln!("weft: {msg}");
    std::process::abort()
}
