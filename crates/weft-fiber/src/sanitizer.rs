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
