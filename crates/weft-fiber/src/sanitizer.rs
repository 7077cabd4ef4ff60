//! Telling AddressSanitizer about fiber stacks, when the process runs under it.
//!
//! ASan poisons the red zones around a function's stack variables when the function is
//! entered and clears them when it returns. A fiber whose frames never return (deleted
//! while suspended, a green thread that ends by switching away, a thread that ends
//! inside a fiber) leaves its red zones poisoned on its stack. When that stack is reused
//! for another fiber, or its addresses for another mapping, ASan would report the new
//! owner's ordinary accesses. So weft clears a stack's shadow when the stack is taken
//! from the cache and before it is unmapped.
//!
//! weft finds ASan's `__asan_unpoison_memory_region` at run time, once (`dlsym`): a
//! process without ASan pays one lookup, and a switch never pays anything.
//!
//! # Stack switches (`cfg(weft_asan)`)
//!
//! When weft itself is compiled with ASan (`-Zsanitizer=address`; `build.rs` sets
//! `cfg(weft_asan)` then), every context switch is announced to ASan:
//! `__sanitizer_start_switch_fiber` with the stack being entered before it,
//! `__sanitizer_finish_switch_fiber` on the resumed side after it. Without them ASan
//! believes every thread runs on the stack it started on. A panic's unwind (a green
//! thread's shutdown unwind, caught by libweft's entry points) starts with
//! `__asan_handle_no_return`, which clears the shadow of the frames being unwound, from
//! the stack pointer to the top of the stack ASan believes in; on a fiber's stack that
//! range is absurd, so ASan refuses ("ASan is ignoring requested
//! `__asan_handle_no_return`"), the unwound frames keep their scope poison, and the next
//! call that lays its frame there (`shutdown::mark` after `catch_unwind`) is reported as
//! a stack-use-after-scope. With the switches announced, ASan knows the fiber's stack
//! and clears the right range. The announcements also carry each fiber's fake stack
//! (`detect_stack_use_after_return`) across its switches, and free it when the fiber
//! leaves for good.
//!
//! A fiber made with a stack of its own announces that stack. A thread's own record
//! (its frames are on the stack the thread runs on) announces the stack ASan knew when
//! the record was first left, asked of ASan then (`current_bounds`).
//!
//! A signal handler that switches (weft-runtime's preemption, `SwitchToFiber` from
//! SIGALRM) must not start a switch between the two halves: ASan aborts on a switch
//! started inside another. The assembly clears `in_switch` before the resumed side
//! finishes the announcement, so `ThreadState::asan_switching` covers that gap, and
//! `fiber::begin_switch` refuses a switch while it is set, as it does inside a switch.
//!
//! Builds without `cfg(weft_asan)` compile all of this to nothing: `FiberAsan` and
//! `ThreadAsan` are empty, the hooks are empty inline functions.

use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// ASan's `void __asan_unpoison_memory_region(void const volatile *addr, size_t size)`.
type Unpoison = unsafe extern "C" fn(*const u8, usize);

/// Clears ASan's shadow of `lo..hi` (a whole fiber stack) if the process runs under
/// ASan; does nothing otherwise.
pub(crate) fn unpoison_stack(lo: usize, hi: usize) {
    // 0: not looked up yet, 1: no ASan, else the function's address.
    static FN: AtomicUsize = AtomicUsize::new(0);
    let mut f = FN.load(Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol
        // up.
        let p = unsafe {
            libc::dlsym(
                libc::RTLD_DEFAULT,
                c"__asan_unpoison_memory_region".as_ptr(),
            )
        };
        f = if p.is_null() { 1 } else { p as usize };
        FN.store(f, Relaxed);
    }
    if f != 1 {
        // SAFETY: `f` is ASan's function of that name and signature; `lo..hi` is a
        // stack we own and nothing runs on.
        unsafe { core::mem::transmute::<usize, Unpoison>(f)(lo as *const u8, hi - lo) };
    }
}

pub(crate) use switch::{after_switch, before_switch, switching, FiberAsan, ThreadAsan};

#[cfg(weft_asan)]
mod switch {
    use crate::fiber::FiberRecord;
    use crate::thread::ThreadState;
    use crate::tls;
    use core::cell::{Cell, UnsafeCell};
    use core::ffi::c_void;
    use core::ptr;
    use core::sync::atomic::{compiler_fence, Ordering::SeqCst};

    unsafe extern "C" {
        /// `void __sanitizer_start_switch_fiber(void **fake_stack_save, const void
        /// *bottom, size_t size)`: the thread is about to move to `bottom..bottom+size`.
        fn __sanitizer_start_switch_fiber(
            fake_stack_save: *mut *mut c_void,
            bottom: *const c_void,
            size: usize,
        );
        /// `void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void
        /// **bottom_old, size_t *size_old)`: the move is done.
        fn __sanitizer_finish_switch_fiber(
            fake_stack_save: *mut c_void,
            bottom_old: *mut *const c_void,
            size_old: *mut usize,
        );
    }

    /// What ASan is told about one fiber: its stack (size 0: not known yet, a thread's
    /// own record) and its fake stack while it is suspended.
    pub(crate) struct FiberAsan(UnsafeCell<Inner>);

    struct Inner {
        bottom: usize,
        size: usize,
        fake: *mut c_void,
    }

    impl FiberAsan {
        /// For a new record: `stack` is the usable range of the fiber's own stack, or
        /// None for a thread's own record.
        pub(crate) fn new(stack: Option<(usize, usize)>) -> FiberAsan {
            let (bottom, hi) = stack.unwrap_or((0, 0));
            FiberAsan(UnsafeCell::new(Inner {
                bottom,
                size: hi - bottom,
                fake: ptr::null_mut(),
            }))
        }
    }

    /// Per OS thread: set from the start of an announced switch until its resumed side
    /// has finished it (see the module comment).
    pub(crate) struct ThreadAsan(Cell<bool>);

    impl ThreadAsan {
        pub(crate) const fn new() -> ThreadAsan {
            ThreadAsan(Cell::new(false))
        }
    }

    /// Whether `thread` is between the two halves of an announced switch.
    ///
    /// # Safety
    /// `thread` is the calling thread's live state.
    #[inline(always)]
    pub(crate) unsafe fn switching(thread: *mut ThreadState) -> bool {
        // SAFETY: per the contract.
        unsafe { (*thread).asan.0.get() }
    }

    /// The bounds of the stack ASan believes the calling thread runs on, asked of ASan
    /// by announcing a switch to nowhere and finishing it (which reports the stack left),
    /// then a switch back to that stack. No code runs in between.
    fn current_bounds() -> (usize, usize) {
        let mut fake: *mut c_void = ptr::null_mut();
        let mut bottom: *const c_void = ptr::null();
        let mut size = 0usize;
        // SAFETY: two complete announcements on this thread, outside any other (the
        // caller has set `asan_switching`); the fake stack saved by each start is the
        // one its finish restores.
        unsafe {
            __sanitizer_start_switch_fiber(&mut fake, ptr::null(), 0);
            __sanitizer_finish_switch_fiber(fake, &mut bottom, &mut size);
            __sanitizer_start_switch_fiber(&mut fake, bottom, size);
            __sanitizer_finish_switch_fiber(fake, ptr::null_mut(), ptr::null_mut());
        }
        (bottom as usize, size)
    }

    /// The first half of a switch from `cur` (running on this thread) to `to` (acquired
    /// by this thread): call right before `arch::switch*`. `exiting`: `cur` never runs
    /// again (its fake stack is freed).
    ///
    /// # Safety
    /// As for the `arch::switch*` call that follows, which must follow at once.
    #[inline(always)]
    pub(crate) unsafe fn before_switch(cur: *mut FiberRecord, to: *mut FiberRecord, exiting: bool) {
        // SAFETY: per the contract, this thread owns both records; `tls::thread()` is its
        // live state.
        unsafe {
            let thread = tls::thread();
            (*thread).asan.0.set(true);
            compiler_fence(SeqCst);
            let c = &mut *(*cur).asan.0.get();
            if c.size == 0 {
                (c.bottom, c.size) = current_bounds();
            }
            let t = &*(*to).asan.0.get();
            let save = if exiting {
                ptr::null_mut()
            } else {
                &raw mut c.fake
            };
            __sanitizer_start_switch_fiber(save, t.bottom as *const c_void, t.size);
        }
    }

    /// The second half, on the resumed side: right after `arch::switch*` returns, and
    /// first thing in a new fiber.
    ///
    /// # Safety
    /// The calling thread has just been switched into its current fiber by a switch
    /// announced with [`before_switch`].
    #[inline(always)]
    pub(crate) unsafe fn after_switch() {
        // SAFETY: per the contract; the current fiber is ours, and so is its record.
        unsafe {
            let thread = tls::thread();
            let me = (*thread).current;
            let fake = core::mem::replace(&mut (*(*me).asan.0.get()).fake, ptr::null_mut());
            __sanitizer_finish_switch_fiber(fake, ptr::null_mut(), ptr::null_mut());
            compiler_fence(SeqCst);
            (*thread).asan.0.set(false);
        }
    }
}

#[cfg(not(weft_asan))]
mod switch {
    use crate::fiber::FiberRecord;
    use crate::thread::ThreadState;

    /// Nothing: ASan is told nothing in this build (see the module comment).
    pub(crate) struct FiberAsan;

    impl FiberAsan {
        #[inline(always)]
        pub(crate) fn new(_stack: Option<(usize, usize)>) -> FiberAsan {
            FiberAsan
        }
    }

    /// Nothing: see [`FiberAsan`].
    pub(crate) struct ThreadAsan;

    impl ThreadAsan {
        pub(crate) const fn new() -> ThreadAsan {
            ThreadAsan
        }
    }

    /// Never: no switch is announced in this build.
    ///
    /// # Safety
    /// None needed; unsafe as its `cfg(weft_asan)` twin is.
    #[inline(always)]
    pub(crate) unsafe fn switching(_thread: *mut ThreadState) -> bool {
        false
    }

    /// Nothing in this build.
    ///
    /// # Safety
    /// None needed; unsafe as its `cfg(weft_asan)` twin is.
    #[inline(always)]
    pub(crate) unsafe fn before_switch(
        _cur: *mut FiberRecord,
        _to: *mut FiberRecord,
        _exiting: bool,
    ) {
    }

    /// Nothing in this build.
    ///
    /// # Safety
    /// None needed; unsafe as its `cfg(weft_asan)` twin is.
    #[inline(always)]
    pub(crate) unsafe fn after_switch() {}
}
