//! The per-OS-thread words the fiber core reads on its hot paths: a pointer to the
//! thread's [`ThreadState`] and the Windows "last error".
//!
//! Two rules shape this module:
//!
//! 1. **No lazy initialisation.** `SwitchToFiber` may run inside a signal handler, where
//!    allocating or registering a destructor is not allowed. The block is zero-initialised
//!    static TLS, so reading it never allocates.
//! 2. **No cached address across a switch.** A fiber may be suspended on one OS thread
//!    and resumed on another. If the compiler computed the address of a thread-local
//!    before a switch and reused it after, the fiber would read the *old* thread's
//!    storage. Every access here recomputes the address from the thread pointer (`fs`)
//!    in an `asm!` block the compiler may not merge or hoist (it is not `pure`), and code
//!    that runs after a switch does not use this module at all: it reaches its thread
//!    through the fiber record (`FiberRecord::thread`), which the switcher filled in.
//!
//! On x86_64 and aarch64 the block is declared in assembly and reached with the
//! initial-exec TLS model (`@GOTTPOFF`, `:gottprel:`): one load from the GOT plus an `fs`-relative access, with no call
//! to `__tls_get_addr`, even inside `libweft.so`. (Rust's own `thread_local!` would use
//! the general-dynamic model in a shared library.) The block is 32 bytes; glibc reserves
//! static TLS space for initial-exec variables even in libraries loaded with `dlopen`.

use crate::thread::ThreadState;

/// The per-thread block. Zero means: no thread state yet, last error 0.
#[repr(C)]
pub(crate) struct TlsBlock {
    pub thread: *mut ThreadState,
    pub last_error: u32,
    _pad: u32,
    /// A word for the layer above (weft-runtime keeps its worker pointer here), read
    /// with the same never-cached access as the rest of the block.
    pub user: *mut core::ffi::c_void,
    _pad2: usize,
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::TlsBlock;

    core::arch::global_asm!(
        ".pushsection .tbss.weft_fiber_tls,\"awT\",@nobits",
        ".globl weft_fiber_tls",
        ".hidden weft_fiber_tls",
        ".type weft_fiber_tls,@object",
        ".size weft_fiber_tls,32",
        ".p2align 4",
        "weft_fiber_tls:",
        ".zero 32",
        ".popsection",
    );

    #[inline(always)]
    pub(crate) fn block() -> *mut TlsBlock {
        let p: *mut TlsBlock;
        // SAFETY: fs:[0] is the thread pointer (the TCB's self pointer, x86_64 TLS ABI)
        // and weft_fiber_tls@GOTTPOFF is our block's offset from it. Not `pure`, so the
        // compiler recomputes it at every use (see the module comment).
        unsafe {
            core::arch::asm!(
                "mov {p}, qword ptr fs:[0]",
                "add {p}, qword ptr [rip + weft_fiber_tls@GOTTPOFF]",
                p = out(reg) p,
                options(nostack, readonly),
            )
        };
        p
    }
}

#[cfg(all(target_arch = "aarch64", target_os = "linux"))]
mod imp {
    use super::TlsBlock;

    core::arch::global_asm!(
        ".pushsection .tbss.weft_fiber_tls,\"awT\",%nobits",
        ".globl weft_fiber_tls",
        ".hidden weft_fiber_tls",
        ".type weft_fiber_tls,%object",
        ".size weft_fiber_tls,32",
        ".p2align 4",
        "weft_fiber_tls:",
        ".zero 32",
        ".popsection",
    );

    #[inline(always)]
    pub(crate) fn block() -> *mut TlsBlock {
        let p: *mut TlsBlock;
        // SAFETY: tpidr_el0 is the thread pointer; :gottprel: gives our block's offset
        // from it (initial-exec). Not `pure`: recomputed at every use.
        unsafe {
            core::arch::asm!(
                "mrs {p}, tpidr_el0",
                "adrp {t}, :gottprel:weft_fiber_tls",
                "ldr {t}, [{t}, #:gottprel_lo12:weft_fiber_tls]",
                "add {p}, {p}, {t}",
                p = out(reg) p,
                t = out(reg) _,
                options(nostack, readonly),
            )
        };
        p
    }
}

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_os = "linux"
)))]
mod imp {
    use super::TlsBlock;
    use core::cell::UnsafeCell;
    thread_local! {
        static BLOCK: UnsafeCell<TlsBlock> = const {
            UnsafeCell::new(TlsBlock { thread: core::ptr::null_mut(), last_error: 0, _pad: 0, user: core::ptr::null_mut(), _pad2: 0 })
        };
    }
    #[inline(never)]
    pub(crate) fn block() -> *mut TlsBlock {
        BLOCK.with(|b| b.get())
    }
}

/// This OS thread's state, or null if the thread has never used weft.
#[inline(always)]
pub(crate) fn thread() -> *mut ThreadState {
    // SAFETY: the block is valid static TLS for the life of the thread.
    unsafe { core::ptr::read_volatile(&(*imp::block()).thread) }
}

#[inline(always)]
pub(crate) fn set_thread(t: *mut ThreadState) {
    // SAFETY: as above; only this thread writes its own block.
    unsafe { core::ptr::write_volatile(&mut (*imp::block()).thread, t) }
}

/// The calling thread's last error (Windows `GetLastError`).
#[inline(always)]
pub fn last_error() -> u32 {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&(*imp::block()).last_error) }
}

/// Sets the calling thread's last error (Windows `SetLastError`).
#[inline(always)]
pub fn set_last_error(code: u32) {
    // SAFETY: as above.
    unsafe { core::ptr::write_volatile(&mut (*imp::block()).last_error, code) }
}

/// The layer above's word for this OS thread (null until set).
#[inline(always)]
pub fn user_word() -> *mut core::ffi::c_void {
    // SAFETY: as above.
    unsafe { core::ptr::read_volatile(&(*imp::block()).user) }
}

/// Sets the layer above's word for this OS thread.
#[inline(always)]
pub fn set_user_word(p: *mut core::ffi::c_void) {
    // SAFETY: as above; only this thread writes its own block.
    unsafe { core::ptr::write_volatile(&mut (*imp::block()).user, p) }
}
