//! Per-OS-thread state: which fiber runs here, the thread's own fiber, its stack cache,
//! its signal stack; conversion to and from a fiber; and what happens when a thread ends.
//!
//! # A thread's own record
//!
//! `main` is the thread's own record. While the thread is not a fiber it holds the
//! thread's fiber-local storage (Windows gives every thread FLS, so a thread that uses
//! FLS without converting gets one); `ConvertThreadToFiber` makes it the thread's fiber,
//! with a handle, and keeps those values. Its frames are on the stack the thread's start
//! routine runs on. For a thread weft started (`thread_stack.rs`), that is a stack weft
//! owns, which the record takes over (`start_stack`) and which is freed with it: such a
//! record is like any fiber of the thread's. Otherwise (the process's main thread, a
//! thread on a stack of the caller's own) it is the thread's own stack: other fibers may
//! switch to the record from any thread, but because it lives on this thread's stack,
//! this thread must not end while it runs elsewhere (glibc would free the stack under
//! it): weft checks this when the thread ends and stops the process with a message
//! rather than corrupt memory.
//!
//! `ConvertFiberToThread` on the thread's own fiber withdraws its handle and keeps its
//! FLS values for the thread. Called from a fiber the thread created, as Windows allows,
//! the thread goes on as a plain thread on that fiber's stack, with that fiber's FLS
//! values: the fiber's record becomes `main` (its handle withdrawn, its stack kept until
//! the thread ends), and the converted fiber stays a fiber that any thread may switch to
//! (`home`, while its frames are on this thread's stack).
//!
//! # Ending a thread from a fiber
//!
//! On Windows, a fiber start routine that returns, or `DeleteFiber` on the running fiber,
//! ends the thread. weft does this with `pthread_exit` started from a frame marked as the
//! bottom of the stack (`arch::exit_thread_at`), after taking ownership of the converted
//! fibers whose frames are on the thread's own stack, so that no other thread resumes
//! one while glibc jumps back onto that stack. glibc then runs the thread's destructors
//! there, and weft cleans up in a pthread key destructor (`cleanup_exiting_thread`).
//!
//! A key destructor runs when a thread ends (its start routine returns, or it calls
//! `pthread_exit`), and not when the process exits: `exit()` leaves every record alone,
//! so atexit handlers, and the threads still running, may go on switching fibers and
//! using FLS. After the atexit handlers, the FLS callbacks of the fiber that called
//! `exit()` run (`at_process_exit`), as Windows runs them at `ExitProcess`.
//!
//! # What survives a thread
//!
//! As on Windows: the fiber running when the thread ended has its FLS callbacks run and
//! stays a (finished) fiber until `DeleteFiber`; fibers the thread created live on,
//! since any thread may switch to them; a plain thread's values get their callbacks.
//!
//! A converted fiber whose thread ended in another fiber lives on, as on Windows, when
//! its frames are on a stack weft owns (a thread weft started, or one that had taken
//! over a created fiber's stack): any thread may switch to it, and if the thread's start
//! routine then returns there, that thread ends (`thread_stack::start_returned`). On
//! the thread's own stack, which glibc tears down and reuses when the thread ends, it
//! cannot: such a fiber keeps its record, its handle and its FLS values (`FlsFree`
//! reaches them; `DeleteFiber` runs their callbacks and frees it, as on Windows), but is
//! FINISHED: switching to it fails with `ERROR_INVALID_HANDLE`.

use crate::arch;
use crate::error::Error;
use crate::fiber::{self, FiberRecord, Start, EXIT_DELETE, EXIT_NONE, READY, RUNNING};
use crate::pool::{self, NO_HANDLE};
use crate::registry;
use crate::stack::{Stack, StackCache};
use crate::tls;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicBool, Ordering::*};

/// One OS thread's fiber state. Reached through `tls::thread()` before a switch and
/// through `FiberRecord::thread` after one.
pub(crate) struct ThreadState {
    /// The fiber running on this thread; null unless the thread is a fiber.
    pub current: *mut FiberRecord,
    /// The thread's own record: its fiber once converted, else what holds its FLS
    /// values; null if none (see the module comment).
    pub main: *mut FiberRecord,
    /// A converted fiber whose frames are on this thread's own stack while `main` is
    /// another record (the thread converted back from a fiber it created); null
    /// otherwise.
    pub home: *mut FiberRecord,
    /// Set while a switch is half done (see `fiber.rs`, signal handlers).
    pub in_switch: AtomicBool,
    /// Set while a switch announced to AddressSanitizer is half done (`sanitizer.rs`;
    /// empty unless weft is built with ASan).
    #[cfg_attr(not(weft_asan), allow(dead_code))]
    pub asan: crate::sanitizer::ThreadAsan,
    /// Set once the thread has taken its own fiber to end itself.
    pub exiting: bool,
    /// Kernel thread id (cached: `gettid` is a system call).
    pub tid: i32,
    pub stacks: StackCache,
    /// Registry slots freed on this thread, marked free, kept for reuse without the
    /// registry's lock (as `stacks` keeps stacks).
    pub slots: Vec<*mut crate::registry::Slot>,
    /// Fiber record slots freed on this thread, kept for reuse without the pool's lock.
    pub records: Vec<u32>,
    /// Fiber ids reserved for this thread: `next_id..id_end` (see [`take_id`]).
    pub next_id: u64,
    pub id_end: u64,
    pub altstack: Option<crate::overflow::AltStack>,
    /// The stack the thread's start routine runs on, when weft started the thread
    /// (`thread_stack.rs`), until the thread's own record takes it.
    pub start_stack: Option<Stack>,
    /// Nonzero when weft started the thread: tells a return of its start routine on this
    /// thread from one on another thread (`thread_stack::start_returned`).
    pub start_serial: u64,
    /// The usable range of that start stack (empty if none), which
    /// `thread_stack::pthread_getattr_np` reports to code running on it.
    pub start_range: core::ops::Range<usize>,
}

impl ThreadState {
    pub(crate) fn new(tid: i32) -> ThreadState {
        ThreadState {
            current: ptr::null_mut(),
            main: ptr::null_mut(),
            home: ptr::null_mut(),
            in_switch: AtomicBool::new(false),
            asan: crate::sanitizer::ThreadAsan::new(),
            exiting: false,
            tid,
            stacks: StackCache::new(),
            slots: Vec::new(),
            records: Vec::new(),
            next_id: 0,
            id_end: 0,
            altstack: None,
            start_stack: None,
            start_serial: 0,
            start_range: 0..0,
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

/// A pool slot for a new fiber record: one this thread freed earlier, else another.
pub(crate) fn take_record() -> Result<*mut FiberRecord, Error> {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state.
    pool::alloc((!t.is_null()).then(|| unsafe { &mut (*t).records }))
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

/// The pthread key whose destructor cleans up after a thread that used weft (see the
/// module comment); `None` if no key could be made (a thread then leaks its state).
fn cleanup_key() -> Option<libc::pthread_key_t> {
    static KEY: std::sync::OnceLock<Option<libc::pthread_key_t>> = std::sync::OnceLock::new();
    *KEY.get_or_init(|| {
        let mut key: libc::pthread_key_t = 0;
        // SAFETY: `thread_ended` is a valid destructor for any value we store.
        if unsafe { libc::pthread_key_create(&mut key, Some(thread_ended)) } == 0 {
            Some(key)
        } else {
            eprintln!(
                "weft: cannot create a pthread key (the process has used them all); threads \
                 that use fibers will not be cleaned up when they end"
            );
            None
        }
    })
}

/// The key's destructor: the thread has ended.
unsafe extern "C" fn thread_ended(_: *mut c_void) {
    // SAFETY: runs once per ending thread, on that thread, after its start routine.
    unsafe { cleanup_exiting_thread() }
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
    if let Some(key) = cleanup_key() {
        // SAFETY: a valid key; a non-null value makes glibc call its destructor when the
        // thread ends (again, if the thread is already running destructors).
        unsafe { libc::pthread_setspecific(key, t.cast()) };
    }
    t
}

/// This thread's own record, created (not a fiber yet: no handle) if needed.
pub(crate) fn ensure_main(t: *mut ThreadState) -> Result<*mut FiberRecord, Error> {
    // SAFETY: `t` is this thread's state.
    unsafe {
        if (*t).main.is_null() {
            let rec = pool::alloc(Some(&mut (*t).records))?;
            // Its frames are on the start stack if weft started the thread, which the
            // record now owns, else on the thread's own stack.
            fiber::init(
                rec,
                Start::Thread,
                0,
                ptr::null_mut(),
                (*t).start_stack.take(),
                &Default::default(),
            );
            (*rec).thread.store(t, Relaxed);
            (*rec).owner.store(t, Relaxed);
            (*t).main = rec;
        }
        Ok((*t).main)
    }
}

/// Makes the calling thread a fiber (Windows `ConvertThreadToFiber`): its own record
/// gets a handle and keeps its FLS values.
pub(crate) fn convert(param: *mut c_void) -> Result<*mut FiberRecord, Error> {
    let t = ensure();
    // SAFETY: `t` is this thread's state.
    unsafe {
        if !(*t).current.is_null() {
            return Err(Error::AlreadyFiber);
        }
        let main = ensure_main(t)?;
        (*main).param = param;
        fiber::issue_handle(main);
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
        sl.state.store(registry::SLOT_RUNNING, Relaxed);
        sl.end_write();
        crate::overflow::install_for_thread(t);
        (*t).current = main;
        Ok(main)
    }
}

/// Turns the calling thread back into a plain thread (Windows `ConvertFiberToThread`).
/// As on Windows, the running fiber's handle stops working and the thread keeps that
/// fiber's FLS values; it may be a fiber the thread created (see the module comment).
pub(crate) fn convert_back() -> Result<(), Error> {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state; its running fiber runs
    // here (this call), so the thread owns it.
    unsafe {
        if t.is_null() || (*t).current.is_null() {
            return Err(Error::NotAFiber);
        }
        let cur = (*t).current;
        if (*cur).scheduled || (*cur).rust_owned {
            // Its runtime, or its `Fiber` handle, owns it and would free it.
            return Err(Error::NotThreadFiber);
        }
        let owner = (*cur).owner.load(Relaxed);
        if !owner.is_null() && owner != t {
            // The thread would go on on the other thread's stack, which that thread
            // frees when it ends.
            return Err(Error::InvalidParameter(
                "ConvertFiberToThread in another thread's converted fiber: its frames are on \
                 that thread's stack; switch to a fiber of this thread first",
            ));
        }
        if cur != (*t).main {
            // The thread goes on as a plain thread on `cur`'s stack, with `cur`'s FLS
            // values: `cur` becomes its own record. The converted fiber stays a fiber.
            let old = (*t).main;
            if !old.is_null() {
                if (*old).on_thread_stack() {
                    debug_assert!((*t).home.is_null(), "two fibers on the thread's stack");
                    (*t).home = old;
                } else {
                    // On a stack of its own: an independent fiber from now on.
                    (*old).owner.store(ptr::null_mut(), Release);
                }
            }
            if (*t).home == cur {
                // The converted fiber on this thread's stack is its own record again.
                (*t).home = ptr::null_mut();
            }
            *(*cur).start.get() = Start::Thread;
            *(*cur).exit.get() = EXIT_NONE;
            (*cur).owner.store(t, Relaxed);
            (*t).main = cur;
        }
        fiber::revoke_handle(cur);
        // No longer shown as a fiber (as a thread's record is not, until it converts).
        let sl = (*cur).slot();
        sl.begin_write();
        sl.flags.store(registry::FLAG_THREAD, Relaxed);
        sl.state.store(registry::SLOT_FREE, Relaxed);
        sl.end_write();
        (*t).current = ptr::null_mut();
        Ok(())
    }
}

/// The converted fibers whose frames are on this thread's own stack: `main` while the
/// thread is a fiber (unless it has taken over a fiber's stack), and `home`.
///
/// # Safety
/// `t` is the calling thread's state.
unsafe fn on_own_stack(t: *mut ThreadState) -> [*mut FiberRecord; 2] {
    // SAFETY: per the contract.
    unsafe {
        let main = (*t).main;
        let main = if !(*t).current.is_null() && !main.is_null() && (*main).on_thread_stack() {
            main
        } else {
            ptr::null_mut()
        };
        [main, (*t).home]
    }
}

/// Takes the converted fibers on this thread's own stack, except `me` (running here), so
/// that no other thread resumes one while the thread ends and its stack goes away. If
/// one runs on another thread, stops the process: ending the thread would free a stack
/// in use.
///
/// # Safety
/// `t` is the calling thread's state, which is ending.
unsafe fn take_own_stack_fibers(t: *mut ThreadState, me: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe {
        for r in on_own_stack(t) {
            if r.is_null() || r == me {
                continue;
            }
            if (*r)
                .state
                .compare_exchange(READY, RUNNING, Acquire, Relaxed)
                .is_err()
            {
                die(format_args!(
                    "thread {} is ending, but fiber {}, a converted fiber whose frames are on \
                     that thread's stack, is running on another thread; ending the thread \
                     would free that stack. Switch back to it (or away from it) before the \
                     thread ends",
                    (*t).tid,
                    (*r).id
                ));
            }
        }
    }
}

/// A C start routine returned: end the thread, as Windows does.
pub(crate) unsafe fn exit_from_returned_fiber(me: *mut FiberRecord) -> ! {
    // SAFETY: `me` runs on this thread; its `thread` is this thread's state.
    unsafe { exit_thread_from((*me).thread.load(Relaxed), me) }
}

/// Ends the calling thread, which is running `me` (a start routine returned, or
/// `DeleteFiber` of the running fiber). Never returns.
pub(crate) unsafe fn exit_thread_from(t: *mut ThreadState, me: *mut FiberRecord) -> ! {
    // SAFETY: as for `exit_thread_with`.
    unsafe { exit_thread_with(t, me, ptr::null_mut()) }
}

/// Ends the calling thread, which is running `me` (null: no fiber), with `value` for
/// `pthread_join`. Never returns.
///
/// # Safety
/// `t` is this thread's state and `me` runs on it.
unsafe fn exit_thread_with(t: *mut ThreadState, me: *mut FiberRecord, value: *mut c_void) -> ! {
    // SAFETY: per the contract.
    unsafe {
        take_own_stack_fibers(t, me);
        (*t).exiting = true;
        // Leave 256 bytes below our frame (the red zone and more) and exit from there.
        arch::exit_thread_at((arch::stack_pointer() - 256) as *mut u8, value)
    }
}

/// Ends the calling thread, whatever it runs, with `value` for `pthread_join`: a start
/// routine returned `value` on a thread other than its own
/// (`thread_stack::start_returned`), which ends the thread running it, as on Windows.
///
/// # Safety
/// `t` is null or this thread's state.
pub(crate) unsafe fn end_running_thread(t: *mut ThreadState, value: *mut c_void) -> ! {
    if t.is_null() {
        // SAFETY: no weft state: nothing to take; the exit frame goes below ours.
        unsafe { arch::exit_thread_at((arch::stack_pointer() - 256) as *mut u8, value) }
    }
    // SAFETY: `t` is this thread's state; its running fiber, if any, runs here.
    unsafe { exit_thread_with(t, (*t).current, value) }
}

/// `DeleteFiber` of the running fiber: frees it and ends the thread.
pub(crate) unsafe fn delete_current(t: *mut ThreadState, me: *mut FiberRecord) -> ! {
    // SAFETY: as for `exit_thread_from`.
    unsafe {
        *(*me).exit.get() = EXIT_DELETE;
        exit_thread_from(t, me)
    }
}

/// The thread has ended (its key destructor runs): clean up what weft holds for it, as
/// the module comment says.
unsafe fn cleanup_exiting_thread() {
    let t = tls::thread();
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is this thread's state; the thread runs no fiber code any more (we are
    // back on the thread's own stack, below its start frame).
    unsafe {
        let cur = (*t).current;
        let own = on_own_stack(t);
        if !(*t).exiting {
            // Ended by other means than weft's (pthread_exit, or the start routine
            // returned): take the fibers on this stack now.
            take_own_stack_fibers(t, cur);
        }
        let main = (*t).main;
        if !main.is_null()
            && main != cur
            && !(*main).on_thread_stack()
            && (*main).handle() != NO_HANDLE
        {
            // The thread's converted fiber, on a stack of its own and not running here:
            // it lives on like any fiber. It is let go first, so that a thread that sees
            // the fiber the thread ended in finished may delete it too. Nothing here
            // touches it afterwards: another thread may free it from now on.
            (*t).main = ptr::null_mut();
            (*main).owner.store(ptr::null_mut(), Release);
        }
        if !cur.is_null() && cur != (*t).main {
            let owner = (*cur).owner.load(Relaxed);
            let foreign = !owner.is_null() && owner != t;
            if foreign && (*cur).on_thread_stack() {
                die(format_args!(
                    "thread {} ended (pthread_exit) while running fiber {}, another thread's \
                     converted fiber, on that thread's stack; end a thread only from its own \
                     fibers",
                    (*t).tid,
                    (*cur).id
                ));
            }
            // The fiber running when the thread ended: its FLS callbacks run, and it
            // stays a finished fiber until DeleteFiber (freed now if it deleted itself).
            // Another thread's converted fiber (on a stack of its own) stays that
            // thread's record: only it may delete it while it lives.
            if !foreign {
                (*cur).owner.store(ptr::null_mut(), Release);
            }
            if *(*cur).exit.get() == EXIT_DELETE {
                fiber::destroy(cur, t);
            } else {
                crate::fls::run_callbacks(cur);
                fiber::mark_finished(cur);
            }
        }
        for r in own {
            if r.is_null() || r == cur {
                continue;
            }
            // A converted fiber left on this stack, taken above: it can never run again
            // (see the module comment). Its record and values wait for DeleteFiber.
            (*r).owner.store(ptr::null_mut(), Release);
            fiber::mark_finished(r);
            if (*t).main == r {
                (*t).main = ptr::null_mut();
            }
        }
        (*t).home = ptr::null_mut();
        let main = (*t).main;
        (*t).main = ptr::null_mut();
        if !main.is_null() {
            if main == cur || (*main).handle() == NO_HANDLE {
                // The thread ended in its own record, or it was not a fiber: its values
                // get their callbacks, its stack (if it took one over) is freed.
                fiber::destroy(main, t);
            } else {
                // A converted fiber on a stack of its own, not running here: it lives
                // on like any fiber.
                (*main).owner.store(ptr::null_mut(), Release);
            }
        }
        (*t).current = ptr::null_mut();
        if let Some(stack) = (*t).start_stack.take() {
            // The start stack no record took: the thread is back on its own stack.
            crate::stack::release(Some(&mut (*t).stacks), stack);
        }
        (*t).stacks.drain_to_global();
        for slot in (*t).slots.drain(..) {
            registry::free_slot(slot);
        }
        pool::give_back(&mut (*t).records);
        if let Some(alt) = (*t).altstack.take() {
            alt.remove();
        }
        tls::set_thread(ptr::null_mut());
        drop(Box::from_raw(t));
    }
}

/// Runs at process exit, after the atexit handlers (from `.fini_array`): the FLS
/// callbacks of the fiber, or plain thread, that called `exit()`, as Windows runs them
/// at `ExitProcess`. Nothing is freed: other threads may still be running.
extern "C" fn at_process_exit() {
    let t = tls::thread();
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is this thread's live state (its key destructor has not run: the
    // thread is exiting the process, not ending), and its running fiber or own record
    // is live and owned by this thread.
    unsafe {
        let f = if (*t).current.is_null() {
            (*t).main
        } else {
            (*t).current
        };
        if !f.is_null() {
            crate::fls::run_callbacks(f);
        }
    }
}

#[used]
#[unsafe(link_section = ".fini_array")]
static AT_PROCESS_EXIT: extern "C" fn() = at_process_exit;

/// Prints `weft: <message>` and aborts: for states weft cannot continue from safely.
pub(crate) fn die(msg: core::fmt::Arguments<'_>) -> ! {
    eprintln!("weft: {msg}");
    std::process::abort()
}
