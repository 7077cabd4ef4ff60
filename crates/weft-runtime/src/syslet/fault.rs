//! Access to the submitter's memory that turns a bad address into an error, never a
//! crash: the kernel's `copy_from_user`/`put_user`, done in user space.
//!
//! A syslet's atoms, argument pointers, `ret_ptr`s and `umem_add` counters come from the
//! submitter, possibly a C caller. A bad pointer must give `-EFAULT` as that atom's
//! result, as it would in the kernel, not kill the process. A system call per access
//! (`process_vm_readv`) would do that but costs about a microsecond, several times per
//! atom; syslets must beat plain synchronous calls. So these functions cost what a plain
//! load or store costs (plus one already-initialised `Once` check), and the price is paid
//! only when an address is bad.
//!
//! ## How: the kernel's exception table
//!
//! Every access that may fault is a single instruction inside an `asm!` block (x86_64,
//! aarch64). The block records, in the linker section `weft_extable`, the address of that
//! instruction and of a *fixup* stub (in `.text.weft_fixup`) that sets the block's error
//! register to 1 and jumps back to just after the instruction; the error register is 0
//! when the instruction does not fault. Entries are 32-bit offsets relative to
//! themselves (no dynamic relocations; the section stays read-only) and the section is
//! marked `SHF_GNU_RETAIN` ("R") so `--gc-sections` keeps it with either linker; the
//! linker brackets it with `__start_weft_extable`/`__stop_weft_extable`. Each copy of a
//! block the compiler makes (inlining, duplication) brings its own entries.
//!
//! On first use, [`install`] puts a handler on SIGSEGV and SIGBUS (once per process,
//! `SA_SIGINFO | SA_ONSTACK`, every signal blocked while it runs: the runtime's
//! preemption signal must not switch a green thread out of it). For a fault raised by
//! the kernel (`si_code > 0`) whose program counter is one of the table's instructions,
//! the handler rewrites the saved program counter in the `ucontext` to the fixup and
//! returns: the access "returns" Err. Anything else goes to the handler that was installed before
//! this one, as the kernel would have run it:
//!
//! - `SA_SIGINFO` handler: called with the same `(sig, info, ucontext)`;
//! - plain `sa_handler`: called with `sig`;
//! - in both cases with the signal mask the kernel would have given it (the
//!   interrupted code's mask from the `ucontext`, plus its `sa_mask`, plus the signal
//!   unless it had `SA_NODEFER`) during the call, and with `SA_RESETHAND` honoured;
//! - `SIG_DFL`: the default action is restored and the handler returns, so the faulting
//!   instruction faults again and the process dies of the signal as it would have; a
//!   signal sent by a process (`kill`, `si_code <= 0`) is raised again instead, since
//!   there is no instruction to repeat;
//! - `SIG_IGN`: a fault cannot be ignored (the kernel would kill), so as `SIG_DFL`; a sent
//!   signal is dropped.
//!
//! ### Living with weft-fiber's stack-overflow handler
//!
//! `weft_fiber` installs its own SIGSEGV handler (overflow.rs) when a thread is first
//! converted to a fiber, and it chains to the handler it found. Both orders work:
//!
//! - fiber first, then this one: ours runs first, fixes up its own faults and passes
//!   everything else (a fiber's overflow) to the fiber handler;
//! - this one first, then fiber: the fiber handler runs first, reports overflows, and
//!   passes other faults (ours included) down to this handler.
//!
//! One gap in the second order: a bad user pointer into (or up to 64 KiB below) the
//! *running* fiber's own stack guard is taken by the fiber handler for an overflow.
//!
//! ### Async-signal safety
//!
//! The handler reads the table and the saved previous actions (written before the
//! handler is installed), and calls only `sigaction`, `sigemptyset`, `sigismember`,
//! `sigaddset`, `pthread_sigmask` and `raise`: no allocation, no lock. It runs on the
//! thread's alternate signal stack when there is one, so it also works when the fault
//! is a stack overflow to be passed on.
//!
//! ### Limits
//!
//! - A thread that blocks SIGSEGV/SIGBUS gets killed by the kernel on a fault (as for any
//!   program); weft's threads do not block them.
//! - A handler installed later by someone else that does not chain takes over.
//! - The previous action is read before ours is installed (so the handler never sees
//!   an unset one) and read again from the installation itself: a handler installed
//!   by another thread in between is chained, not lost (a fault in that microsecond
//!   would still go to the older one).

use core::arch::asm;
use core::mem::MaybeUninit;
use core::ptr;
use std::sync::Once;

/// One exception-table entry: where the faulting-capable instruction is and where to
/// resume if it faults, each as an offset from the field itself.
#[repr(C)]
struct Entry {
    insn: i32,
    fixup: i32,
}

extern "C" {
    // Defined by the linker around the `weft_extable` output section (GNU ld and lld both
    // do for a section whose name is a C identifier; protected visibility, so each module
    // of a process sees its own table).
    #[link_name = "__start_weft_extable"]
    static EXTABLE_START: u8;
    #[link_name = "__stop_weft_extable"]
    static EXTABLE_STOP: u8;
}

// A sentinel entry that matches no instruction (its "instruction" is the entry itself, in
// a data section), so the section exists in every link that includes this module.
core::arch::global_asm!(
    ".pushsection weft_extable,\"aR\"",
    ".balign 4",
    "2:",
    ".long 2b - .",
    ".long 2b - .",
    ".popsection",
);

/// Emits `asm!` for an access and its table entries. `[$body]` is the code, whose
/// faulting-capable instructions carry numeric labels (`2:`, `5:`), listed in `[$lab]` as
/// backward references (`"2b"`); each gets an entry pointing to the shared fixup `4:`,
/// which sets the operand `e` to 1 and jumps to `3:`, just after the code. `e` must be an
/// `inout` operand starting at 0.
macro_rules! guarded {
    ([$($body:literal),+], [$($lab:literal),+], $($operands:tt)*) => {
        asm!(
            $($body,)+
            "3:",
            ".pushsection weft_extable,\"aR\"",
            ".balign 4",
            $(concat!(".long ", $lab, " - ."), ".long 4f - .",)+
            ".popsection",
            ".pushsection .text.weft_fixup,\"ax\"",
            "4:",
            set_err!(),
            jump_back!(),
            ".popsection",
            $($operands)*
        )
    };
}

#[cfg(target_arch = "x86_64")]
macro_rules! set_err {
    () => {
        "mov {e:e}, 1"
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! jump_back {
    () => {
        "jmp 3b"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! set_err {
    () => {
        "mov {e:w}, #1"
    };
}
#[cfg(target_arch = "aarch64")]
macro_rules! jump_back {
    () => {
        "b 3b"
    };
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("syslet/fault.rs supports x86_64 and aarch64");

static INSTALL: Once = Once::new();
static mut PREV_SEGV: MaybeUninit<libc::sigaction> = MaybeUninit::zeroed();
static mut PREV_BUS: MaybeUninit<libc::sigaction> = MaybeUninit::zeroed();

/// Installs the fault handler (once per process). Called by every access; callers may
/// call it earlier to keep the first access fast.
#[inline]
pub(crate) fn install() {
    INSTALL.call_once(install_now);
}

#[cold]
fn install_now() {
    for (sig, prev) in [
        (
            libc::SIGSEGV,
            (&raw mut PREV_SEGV).cast::<libc::sigaction>(),
        ),
        (libc::SIGBUS, (&raw mut PREV_BUS).cast::<libc::sigaction>()),
    ] {
        // SAFETY: PREV_* are written here only, inside the Once: first before our handler
        // is installed for that signal (so it never reads an unset action), and again
        // only if another handler was installed between the query and ours (a racing
        // first use of weft-fiber on another thread), so that one is chained rather than
        // lost. sigaction is given valid structures.
        unsafe {
            libc::sigaction(sig, ptr::null(), prev);
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            // Everything blocked while it runs: above all the runtime's preemption signal
            // (SIGURG), whose handler could otherwise switch the green thread out while
            // this one runs on the thread's alternate stack.
            libc::sigfillset(&mut sa.sa_mask);
            let mut replaced: libc::sigaction = core::mem::zeroed();
            libc::sigaction(sig, &sa, &mut replaced);
            if replaced.sa_sigaction != (*prev).sa_sigaction {
                prev.write(replaced);
            }
        }
    }
}

/// Reads the u64 at `p`; Err(()) if the address is not readable.
#[inline]
pub(crate) fn read_u64(p: *const u64) -> Result<u64, ()> {
    install();
    let v: u64;
    let e: u32;
    // SAFETY: a single load from `p`; if `p` is not readable the load faults and the
    // handler resumes at the fixup, which sets `e`. The table entry is emitted with it.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        guarded!(["2: mov {v}, qword ptr [{p}]"], ["2b"],
            p = in(reg) p, v = lateout(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, readonly, preserves_flags));
        #[cfg(target_arch = "aarch64")]
        guarded!(["2: ldr {v}, [{p}]"], ["2b"],
            p = in(reg) p, v = lateout(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, readonly, preserves_flags));
    }
    if e == 0 {
        Ok(v)
    } else {
        Err(())
    }
}

/// Reads the byte at `p`; Err(()) if the address is not readable.
#[inline]
fn read_u8(p: *const u8) -> Result<u8, ()> {
    let v: u32;
    let e: u32;
    // SAFETY: as read_u64, one byte.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        guarded!(["2: movzx {v:e}, byte ptr [{p}]"], ["2b"],
            p = in(reg) p, v = lateout(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, readonly, preserves_flags));
        #[cfg(target_arch = "aarch64")]
        guarded!(["2: ldrb {v:w}, [{p}]"], ["2b"],
            p = in(reg) p, v = lateout(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, readonly, preserves_flags));
    }
    if e == 0 {
        Ok(v as u8)
    } else {
        Err(())
    }
}

/// Writes `v` at `p`; Err(()) if not writable.
///
/// The pointer is the submitter's: a valid but wrong address (into memory it does not
/// own) is written like the kernel's `put_user` would; only unmapped or read-only
/// addresses are caught.
#[inline]
pub(crate) fn write_i64(p: *mut i64, v: i64) -> Result<(), ()> {
    install();
    let e: u32;
    // SAFETY: a single store to `p`; a fault resumes at the fixup, which sets `e`.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        guarded!(["2: mov qword ptr [{p}], {v}"], ["2b"],
            p = in(reg) p, v = in(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, preserves_flags));
        #[cfg(target_arch = "aarch64")]
        guarded!(["2: str {v}, [{p}]"], ["2b"],
            p = in(reg) p, v = in(reg) v, e = inout(reg) 0u32 => e,
            options(nostack, preserves_flags));
    }
    if e == 0 {
        Ok(())
    } else {
        Err(())
    }
}

/// Adds `v` to the i64 at `p` atomically (sequentially consistent on x86_64,
/// acquire-release on aarch64) and returns the new value (wrapping), for `sys_umem_add`.
/// Err(()) if the address is not writable, or not 8-aligned (an atomic access needs
/// alignment; a misaligned one would fault with SIGBUS on aarch64 and split a lock on
/// x86_64).
#[inline]
pub(crate) fn add_i64(p: *mut i64, v: i64) -> Result<i64, ()> {
    if !(p as usize).is_multiple_of(8) {
        return Err(());
    }
    install();
    let e: u32;
    let old: i64;
    // SAFETY: one atomic read-modify-write of `p` (x86_64: one `lock xadd`; aarch64: a
    // load-exclusive/store-exclusive loop whose two accesses both have entries); a fault
    // resumes at the fixup, which sets `e`, with memory unchanged.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        guarded!(["2: lock xadd qword ptr [{p}], {v}"], ["2b"],
            p = in(reg) p, v = inout(reg) v => old, e = inout(reg) 0u32 => e,
            options(nostack));
        #[cfg(target_arch = "aarch64")]
        guarded!(
            ["2: ldaxr {old}, [{p}]",
            "add {new}, {old}, {v}",
            "5: stlxr {st:w}, {new}, [{p}]",
            "cbnz {st:w}, 2b"],
            ["2b", "5b"],
            p = in(reg) p, v = in(reg) v, old = out(reg) old, new = out(reg) _,
            st = out(reg) _, e = inout(reg) 0u32 => e,
            options(nostack));
    }
    if e == 0 {
        Ok(old.wrapping_add(v))
    } else {
        Err(())
    }
}

/// Copies `len` bytes from `src` (the submitter's memory) into `dst` (ours), for reading a
/// whole atom; Err(()) if any source byte is not readable (`dst` may then be partly
/// written).
///
/// `dst` must be valid for `len` bytes of writes (any alignment): the executor passes its
/// own local. (A crate-private safe function by the executor's choice; it does not check
/// `dst`.)
#[inline]
pub(crate) fn copy_in(dst: *mut u8, src: *const u8, len: usize) -> Result<(), ()> {
    install();
    let mut i = 0;
    if (src as usize).is_multiple_of(8) {
        while len - i >= 8 {
            let w = read_u64(src.wrapping_add(i).cast())?;
            // SAFETY: dst is valid for len bytes (the contract above); i + 8 <= len.
            unsafe { dst.add(i).cast::<u64>().write_unaligned(w) };
            i += 8;
        }
    }
    while i < len {
        let b = read_u8(src.wrapping_add(i))?;
        // SAFETY: as above, i < len.
        unsafe { dst.add(i).write(b) };
        i += 1;
    }
    Ok(())
}

/// The first entry whose instruction is at `pc`: the fixup address.
fn lookup(pc: usize) -> Option<usize> {
    let start = (&raw const EXTABLE_START).cast::<Entry>();
    let stop = (&raw const EXTABLE_STOP).cast::<Entry>();
    let mut e = start;
    while e < stop {
        // SAFETY: `e` is within the linker-built table (between its bounds, whole entries
        // of 8 bytes, 4-aligned); the offsets are relative to each field's own address.
        unsafe {
            let insn_field = (&raw const (*e).insn) as usize;
            let insn = insn_field.wrapping_add((*e).insn as isize as usize);
            if insn == pc {
                let fix_field = (&raw const (*e).fixup) as usize;
                return Some(fix_field.wrapping_add((*e).fixup as isize as usize));
            }
            e = e.add(1);
        }
    }
    None
}

/// The saved program counter of an interrupted context.
///
/// # Safety
/// `uc` is the `ucontext_t` the kernel passed to a SA_SIGINFO handler.
#[cfg(target_arch = "x86_64")]
unsafe fn pc_slot(uc: *mut libc::ucontext_t) -> *mut u64 {
    // SAFETY: per the contract; REG_RIP indexes gregs.
    unsafe { (&raw mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize]).cast() }
}

/// The saved program counter of an interrupted context.
///
/// # Safety
/// `uc` is the `ucontext_t` the kernel passed to a SA_SIGINFO handler.
#[cfg(target_arch = "aarch64")]
unsafe fn pc_slot(uc: *mut libc::ucontext_t) -> *mut u64 {
    // SAFETY: per the contract.
    unsafe { &raw mut (*uc).uc_mcontext.pc }
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to a SA_SIGINFO handler (and
    // so does a chaining handler). Only async-signal-safe work follows: table reads, a
    // write to the saved context, and `chain`.
    unsafe {
        let from_kernel = !info.is_null() && (*info).si_code > 0;
        if from_kernel && !ctx.is_null() {
            let pc = pc_slot(ctx.cast());
            if let Some(fix) = lookup(*pc as usize) {
                *pc = fix as u64;
                return;
            }
        }
        let prev = if sig == libc::SIGBUS {
            &*(&raw const PREV_BUS).cast::<libc::sigaction>()
        } else {
            &*(&raw const PREV_SEGV).cast::<libc::sigaction>()
        };
        chain(prev, sig, info, ctx, from_kernel);
    }
}

/// Runs the previous action for `sig` as the kernel would have. (Its `SA_ONSTACK`
/// matters not: this handler already runs on the alternate stack if there is one.)
///
/// # Safety
/// Called from the signal handler with its arguments.
unsafe fn chain(
    prev: &libc::sigaction,
    sig: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
    from_kernel: bool,
) {
    // SAFETY: async-signal-safe calls only (sigaction, sigemptyset, sigismember,
    // sigaddset, pthread_sigmask, raise); `ctx` is the kernel's ucontext (or NULL); the
    // previous handler is called with the arguments the kernel gave us.
    unsafe {
        match prev.sa_sigaction {
            libc::SIG_DFL => {
                set_default(sig);
                if !from_kernel {
                    // A sent signal: no instruction repeats it; raise it again (it is
                    // delivered when this handler returns, if blocked now).
                    libc::raise(sig);
                }
            }
            libc::SIG_IGN => {
                if from_kernel {
                    set_default(sig); // the kernel kills on an ignored fault
                }
            }
            h => {
                if prev.sa_flags & libc::SA_RESETHAND != 0 {
                    set_default(sig);
                }
                // The mask the kernel would have set for it: the interrupted code's
                // (saved in the ucontext), plus its sa_mask, plus the signal itself
                // unless SA_NODEFER. (Signals 1..=64: the kernel's sigset; the rest of
                // libc's sigset_t in a kernel-made ucontext is not a mask.)
                let uc = ctx.cast::<libc::ucontext_t>();
                let mut mask: libc::sigset_t = core::mem::zeroed();
                libc::sigemptyset(&mut mask);
                for s in 1..=64 {
                    let interrupted = !uc.is_null() && libc::sigismember(&(*uc).uc_sigmask, s) == 1;
                    if interrupted || libc::sigismember(&prev.sa_mask, s) == 1 {
                        libc::sigaddset(&mut mask, s);
                    }
                }
                if prev.sa_flags & libc::SA_NODEFER == 0 {
                    libc::sigaddset(&mut mask, sig);
                }
                let mut old: libc::sigset_t = core::mem::zeroed();
                libc::pthread_sigmask(libc::SIG_SETMASK, &mask, &mut old);
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        core::mem::transmute(h);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = core::mem::transmute(h);
                    f(sig);
                }
                libc::pthread_sigmask(libc::SIG_SETMASK, &old, ptr::null_mut());
            }
        }
    }
}

/// Restores the default action of `sig`.
///
/// # Safety
/// Async-signal-safe; changes the process's disposition.
unsafe fn set_default(sig: libc::c_int) {
    // SAFETY: sigaction with a zeroed (SIG_DFL) action.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &sa, ptr::null_mut());
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Output};

    fn page() -> usize {
        // SAFETY: sysconf has no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    /// Held by the tests that map pages here: a page one test unmaps to probe must not
    /// be mapped again by another meanwhile (the kernel reuses the freshest hole).
    static MAPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn maps() -> std::sync::MutexGuard<'static, ()> {
        MAPS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Maps `pages` anonymous pages with `prot`.
    fn map(pages: usize, prot: libc::c_int) -> *mut u8 {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                pages * page(),
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p.cast()
    }

    fn unmap(p: *mut u8, pages: usize) {
        // SAFETY: unmapping a mapping made by `map`, no longer referenced.
        unsafe { libc::munmap(p.cast(), pages * page()) };
    }

    /// Every access, on one address that must fault.
    fn all_fail(p: *mut u8) {
        assert_eq!(read_u64(p.cast()), Err(()), "read_u64 {p:p}");
        assert_eq!(read_u8(p), Err(()), "read_u8 {p:p}");
        assert_eq!(write_i64(p.cast(), 7), Err(()), "write_i64 {p:p}");
        let aligned = (p as usize & !7) as *mut i64;
        assert_eq!(add_i64(aligned, 1), Err(()), "add_i64 {aligned:p}");
        let mut buf = [0u8; 88];
        assert_eq!(copy_in(buf.as_mut_ptr(), p, 88), Err(()), "copy_in {p:p}");
        assert_eq!(
            copy_in(buf.as_mut_ptr(), p.wrapping_add(1), 3),
            Err(()),
            "copy_in bytes {p:p}"
        );
    }

    #[test]
    fn valid_memory_reads_writes_and_adds() {
        let mut x: i64 = 40;
        assert_eq!(read_u64((&raw const x).cast()), Ok(40));
        assert_eq!(write_i64(&raw mut x, -5), Ok(()));
        assert_eq!(x, -5);
        assert_eq!(add_i64(&raw mut x, 47), Ok(42));
        assert_eq!(add_i64(&raw mut x, 0), Ok(42));
        assert_eq!(add_i64(&raw mut x, -50), Ok(-8));
        assert_eq!(x, -8);
        x = i64::MAX;
        assert_eq!(add_i64(&raw mut x, 1), Ok(i64::MIN), "wraps");
        // Unaligned reads and writes are fine (only the atomic add needs alignment).
        let mut b = [0u8; 24];
        assert_eq!(write_i64(b.as_mut_ptr().wrapping_add(3).cast(), -1), Ok(()));
        assert_eq!(read_u64(b.as_ptr().wrapping_add(3).cast()), Ok(u64::MAX));
        assert_eq!(b[2], 0);
        assert_eq!(b[11], 0);
        assert_eq!(add_i64(b.as_mut_ptr().wrapping_add(4).cast(), 1), Err(()));
        // copy_in: every length and source alignment, word and byte paths.
        let src: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
        for off in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 88, 95, 190] {
                let mut dst = vec![0xeeu8; len + 2];
                assert_eq!(
                    copy_in(dst.as_mut_ptr().wrapping_add(1), src[off..].as_ptr(), len),
                    Ok(())
                );
                assert_eq!(&dst[1..=len], &src[off..off + len], "off {off} len {len}");
                assert_eq!((dst[0], dst[len + 1]), (0xee, 0xee), "no overrun");
            }
        }
    }

    #[test]
    fn bad_addresses_give_err_and_the_process_lives_on() {
        let _maps = maps();
        all_fail(ptr::null_mut());
        all_fail(0x10 as *mut u8);
        all_fail(0xfff as *mut u8);
        // Kernel half (a fault with si_code SEGV_MAPERR or, on x86_64, a #GP).
        all_fail(0xffff_ffff_ffff_f000usize as *mut u8);
        // Non-canonical on x86_64 (#GP: SIGSEGV with si_code SI_KERNEL, address 0).
        #[cfg(target_arch = "x86_64")]
        all_fail(0x8000_0000_0000_0000usize as *mut u8);
        // An unmapped page: a one-page hole between two pages we keep, so that no
        // mapping made meanwhile by another test thread (stacks, rings: all larger, or
        // under MAPS) can land there, as it could at the edge of the free area.
        let r = map(3, libc::PROT_NONE);
        let p = r.wrapping_add(page());
        unmap(p, 1);
        all_fail(p);
        all_fail(p.wrapping_add(page() - 8));
        unmap(r, 1);
        unmap(r.wrapping_add(2 * page()), 1);
        // A PROT_NONE page.
        let q = map(1, libc::PROT_NONE);
        all_fail(q);
        all_fail(q.wrapping_add(100));
        unmap(q, 1);
    }

    #[test]
    fn read_only_page_reads_but_refuses_writes() {
        let _maps = maps();
        let p = map(1, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: p is a fresh writable page.
        unsafe { p.cast::<i64>().write(11) };
        // SAFETY: making our own page read-only.
        assert_eq!(
            unsafe { libc::mprotect(p.cast(), page(), libc::PROT_READ) },
            0
        );
        assert_eq!(read_u64(p.cast()), Ok(11));
        assert_eq!(write_i64(p.cast(), 5), Err(()));
        assert_eq!(add_i64(p.cast(), 5), Err(()));
        assert_eq!(read_u64(p.cast()), Ok(11), "unchanged");
        unmap(p, 1);
    }

    #[test]
    fn copy_in_across_into_a_bad_page_fails() {
        let _maps = maps();
        let p = map(2, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the second page of our own mapping.
        assert_eq!(
            unsafe { libc::mprotect(p.add(page()).cast(), page(), libc::PROT_NONE) },
            0
        );
        let mut buf = [0u8; 88];
        let near_end = p.wrapping_add(page() - 88);
        assert_eq!(copy_in(buf.as_mut_ptr(), near_end, 88), Ok(()));
        assert_eq!(
            copy_in(buf.as_mut_ptr(), near_end.wrapping_add(8), 88),
            Err(())
        );
        assert_eq!(
            copy_in(buf.as_mut_ptr(), near_end.wrapping_add(3), 88),
            Err(())
        );
        unmap(p, 2);
    }

    #[test]
    fn sigbus_past_the_end_of_a_file_mapping_gives_err() {
        let _maps = maps();
        let f = tempfile("bus");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: our own file: one page long, mapped shared, then truncated to 0.
        let p = unsafe {
            assert_eq!(libc::ftruncate(fd, page() as i64), 0);
            let p = libc::mmap(
                ptr::null_mut(),
                page(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            assert_eq!(libc::ftruncate(fd, 0), 0);
            p.cast::<u8>()
        };
        all_fail(p);
        unmap(p, 1);
    }

    fn tempfile(tag: &str) -> std::fs::File {
        let path = std::env::temp_dir().join(format!(
            "weft-fault-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    #[test]
    fn faults_on_many_threads_at_once() {
        let _maps = maps();
        let q = map(1, libc::PROT_NONE) as usize;
        let threads: Vec<_> = (0..4)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut good: i64 = t;
                    for i in 0..20_000 {
                        assert_eq!(read_u64((q + (i % 64) * 8) as *const u64), Err(()));
                        assert_eq!(add_i64(&raw mut good, 1), Ok(t + i as i64 + 1));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        unmap(q as *mut u8, 1);
    }

    #[test]
    fn faults_on_a_fiber_stack() {
        // On its own thread: the fiber handler is installed too (in whichever order the
        // tests run; the child-process tests below fix the order).
        std::thread::spawn(|| {
            let _me = weft_fiber::convert_thread().unwrap();
            let f = weft_fiber::Fiber::builder()
                .stack_size(64 * 1024)
                .spawn(|| {
                    all_fail(ptr::null_mut());
                    let mut x = 1i64;
                    assert_eq!(add_i64(&raw mut x, 1), Ok(2));
                })
                .unwrap();
            f.switch_to().unwrap();
            assert!(f.is_finished());
        })
        .join()
        .unwrap();
    }

    /// Rough cost of the fast path; `cargo test --release -- --ignored --nocapture
    /// read_u64_cost`.
    #[test]
    #[ignore = "a measurement, not a check: run it by hand (see above)"]
    fn read_u64_cost() {
        const N: u64 = 100_000_000;
        let v: Vec<u64> = (0..64).collect();
        install();
        for round in 0..3 {
            let t = std::time::Instant::now();
            let mut s = 0u64;
            for i in 0..N {
                let p = std::hint::black_box(&v[(i & 63) as usize] as *const u64);
                s = s.wrapping_add(read_u64(p).unwrap_or(0));
            }
            let fast = t.elapsed().as_nanos() as f64 / N as f64;
            std::hint::black_box(s);
            let t = std::time::Instant::now();
            let mut s = 0u64;
            for i in 0..N {
                let p = std::hint::black_box(&v[(i & 63) as usize] as *const u64);
                // SAFETY: p points into v.
                s = s.wrapping_add(unsafe { p.read_volatile() });
            }
            let plain = t.elapsed().as_nanos() as f64 / N as f64;
            std::hint::black_box(s);
            let t = std::time::Instant::now();
            let mut x = 0i64;
            for _ in 0..N {
                let _ = add_i64(std::hint::black_box(&raw mut x), 1);
            }
            let add = t.elapsed().as_nanos() as f64 / N as f64;
            let mut atom = [0u8; 88];
            let src = [7u64; 11];
            let t = std::time::Instant::now();
            for _ in 0..N / 10 {
                let _ = copy_in(
                    atom.as_mut_ptr(),
                    std::hint::black_box(src.as_ptr().cast()),
                    88,
                );
            }
            let copy = t.elapsed().as_nanos() as f64 / (N / 10) as f64;
            let bad = 0x10 as *const u64;
            let t = std::time::Instant::now();
            for _ in 0..100_000 {
                let _ = read_u64(std::hint::black_box(bad));
            }
            let fault = t.elapsed().as_nanos() as f64 / 100_000.0;
            println!(
                "round {round}: read_u64 {fast:.2} ns, plain volatile load {plain:.2} ns, \
                 add_i64 {add:.2} ns, copy_in(88) {copy:.2} ns, faulting read {fault:.0} ns"
            );
        }
    }

    // ---- Child processes: real faults elsewhere still reach the previous handler. ----

    /// A command running this test binary (through the emulator when under one).
    fn self_command() -> Command {
        let exe = std::env::current_exe().unwrap();
        match std::env::var("WEFT_TEST_RUNNER") {
            Ok(r) if !r.trim().is_empty() => {
                let mut w = r.split_whitespace();
                let mut c = Command::new(w.next().unwrap());
                c.args(w).arg(exe);
                c
            }
            _ => Command::new(exe),
        }
    }

    fn child(mode: &str) -> (Output, String) {
        let name = format!(
            "{}::child_entry",
            module_path!().split_once("::").unwrap().1
        );
        let out = self_command()
            .args([&name, "--exact", "--nocapture", "--test-threads=1"])
            .env("WEFT_FAULT_CHILD", mode)
            .env("WEFT_REGISTRY", "off")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("child: fault.rs caught its faults"),
            "{mode}: the child got to its real fault: {:?}\n{err}",
            out.status
        );
        (out, err)
    }

    #[inline(never)]
    fn recurse(depth: u64) -> u64 {
        let buf = std::hint::black_box([depth as u8; 1024]);
        if std::hint::black_box(depth) == u64::MAX {
            return 0;
        }
        recurse(depth + 1) + buf[7] as u64
    }

    fn use_fault_rs() {
        all_fail(ptr::null_mut());
        all_fail(0x10 as *mut u8);
    }

    fn real_null_write() -> ! {
        // SAFETY: none: this is the crash under test.
        unsafe { ptr::write_volatile(std::hint::black_box(ptr::null_mut::<u64>()), 1) };
        unreachable!("survived a null write")
    }

    fn overflow_a_fiber() -> ! {
        let f = weft_fiber::Fiber::builder()
            .stack_size(64 * 1024)
            .spawn(|| {
                recurse(0);
            })
            .unwrap();
        f.switch_to().unwrap();
        unreachable!("survived an overflow")
    }

    extern "C" fn prev_siginfo(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        let m = b"previous SA_SIGINFO handler ran\n";
        // SAFETY: write and _exit are async-signal-safe; info is the kernel's.
        unsafe {
            let code = if (*info).si_addr().is_null() { 42 } else { 41 };
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::_exit(code);
        }
    }

    extern "C" fn prev_plain(_: libc::c_int) {
        let m = b"previous sa_handler ran\n";
        // SAFETY: write and _exit are async-signal-safe.
        unsafe {
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::_exit(43);
        }
    }

    extern "C" fn prev_checks_mask(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: sigprocmask-style query, write and _exit are async-signal-safe.
        unsafe {
            let mut cur: libc::sigset_t = core::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), &mut cur);
            let has = |s| libc::sigismember(&cur, s) == 1;
            // Its sa_mask (SIGUSR1) and the signal (no SA_NODEFER) blocked, as the kernel
            // would; the interrupted code's SIGUSR2 too; not SIGURG or SIGTERM (our
            // handler's own full mask does not leak).
            let ok = has(libc::SIGUSR1)
                && has(libc::SIGSEGV)
                && has(libc::SIGUSR2)
                && !has(libc::SIGURG)
                && !has(libc::SIGTERM);
            let m = b"previous handler checked its mask\n";
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::_exit(if ok { 44 } else { 45 });
        }
    }

    fn set_handler(sig: libc::c_int, h: usize, flags: libc::c_int) {
        // SAFETY: installing a test handler in the child.
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = h;
            sa.sa_flags = flags;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, ptr::null_mut());
        }
    }

    /// The child side: what runs depends on WEFT_FAULT_CHILD; nothing without it.
    #[test]
    fn child_entry() {
        let Ok(mode) = std::env::var("WEFT_FAULT_CHILD") else {
            return;
        };
        let mut _fiber = None;
        match mode.as_str() {
            "null" => use_fault_rs(),
            "prev-siginfo" => {
                set_handler(
                    libc::SIGSEGV,
                    prev_siginfo as *const () as usize,
                    libc::SA_SIGINFO,
                );
                use_fault_rs();
            }
            "prev-plain" => {
                set_handler(libc::SIGSEGV, prev_plain as *const () as usize, 0);
                use_fault_rs();
            }
            "prev-mask" => {
                // SAFETY: installing a test handler with SIGUSR1 in its mask, and
                // blocking SIGUSR2 in the code that will fault.
                unsafe {
                    let mut sa: libc::sigaction = core::mem::zeroed();
                    sa.sa_sigaction = prev_checks_mask as *const () as usize;
                    sa.sa_flags = libc::SA_SIGINFO;
                    libc::sigemptyset(&mut sa.sa_mask);
                    libc::sigaddset(&mut sa.sa_mask, libc::SIGUSR1);
                    libc::sigaction(libc::SIGSEGV, &sa, ptr::null_mut());
                    let mut b: libc::sigset_t = core::mem::zeroed();
                    libc::sigemptyset(&mut b);
                    libc::sigaddset(&mut b, libc::SIGUSR2);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &b, ptr::null_mut());
                }
                use_fault_rs();
            }
            "kill-dfl" => {
                set_handler(libc::SIGSEGV, libc::SIG_DFL, 0);
                use_fault_rs();
            }
            "bus" => use_fault_rs(),
            m if m.starts_with("fiber-first") => {
                _fiber = Some(weft_fiber::convert_thread().unwrap());
                use_fault_rs();
            }
            m if m.starts_with("fault-first") => {
                use_fault_rs();
                _fiber = Some(weft_fiber::convert_thread().unwrap());
                use_fault_rs(); // through the fiber handler's chain
            }
            m => panic!("unknown mode {m}"),
        }
        if _fiber.is_some() {
            // Faults on a fiber's stack too.
            let f = weft_fiber::Fiber::new(use_fault_rs).unwrap();
            f.switch_to().unwrap();
        }
        eprintln!("child: fault.rs caught its faults");
        if mode.ends_with("overflow") {
            overflow_a_fiber();
        }
        if mode == "kill-dfl" {
            // SAFETY: sending ourselves SIGSEGV, whose previous action was the default.
            unsafe { libc::kill(libc::getpid(), libc::SIGSEGV) };
            std::thread::sleep(std::time::Duration::from_secs(1));
            unreachable!("survived a sent SIGSEGV");
        }
        if mode == "bus" {
            let f = tempfile("childbus");
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            // SAFETY: as in the in-process SIGBUS test, then a real access past the end.
            unsafe {
                libc::ftruncate(fd, page() as i64);
                let p = libc::mmap(
                    ptr::null_mut(),
                    page(),
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                libc::ftruncate(fd, 0);
                assert_eq!(read_u64(p.cast()), Err(()));
                std::hint::black_box(ptr::read_volatile(p.cast::<u64>()));
            }
            unreachable!("survived a SIGBUS");
        }
        real_null_write();
    }

    fn died_of(out: &Output, sig: libc::c_int, err: &str) {
        assert_eq!(out.status.signal(), Some(sig), "{:?}\n{err}", out.status);
    }

    #[test]
    fn a_real_segfault_elsewhere_still_kills() {
        let (out, err) = child("null");
        died_of(&out, libc::SIGSEGV, &err);
    }

    #[test]
    fn a_real_sigbus_elsewhere_still_kills() {
        let (out, err) = child("bus");
        died_of(&out, libc::SIGBUS, &err);
    }

    #[test]
    fn a_sent_sigsegv_still_kills() {
        let (out, err) = child("kill-dfl");
        died_of(&out, libc::SIGSEGV, &err);
    }

    #[test]
    fn chains_to_a_previous_siginfo_handler() {
        let (out, err) = child("prev-siginfo");
        assert_eq!(out.status.code(), Some(42), "{:?}\n{err}", out.status);
        assert!(err.contains("previous SA_SIGINFO handler ran"), "{err}");
    }

    #[test]
    fn chains_to_a_previous_plain_handler() {
        let (out, err) = child("prev-plain");
        assert_eq!(out.status.code(), Some(43), "{:?}\n{err}", out.status);
        assert!(err.contains("previous sa_handler ran"), "{err}");
    }

    #[test]
    fn a_previous_handler_runs_with_the_mask_the_kernel_would_give_it() {
        let (out, err) = child("prev-mask");
        assert_eq!(out.status.code(), Some(44), "{:?}\n{err}", out.status);
    }

    fn assert_overflow_message(out: &Output, err: &str) {
        died_of(out, libc::SIGSEGV, err);
        let line = err
            .lines()
            .find(|l| l.contains("stack overflow"))
            .unwrap_or_else(|| panic!("no overflow message in:\n{err}"));
        assert!(line.starts_with("weft: stack overflow in fiber "), "{line}");
        assert!(line.contains("stack size 65536 bytes"), "{line}");
    }

    fn assert_no_overflow_message(out: &Output, err: &str) {
        died_of(out, libc::SIGSEGV, err);
        assert!(!err.contains("stack overflow"), "{err}");
    }

    #[test]
    fn fiber_handler_first_then_ours_overflow_still_reported() {
        let (out, err) = child("fiber-first-overflow");
        assert_overflow_message(&out, &err);
    }

    #[test]
    fn ours_first_then_fiber_handler_overflow_still_reported() {
        let (out, err) = child("fault-first-overflow");
        assert_overflow_message(&out, &err);
    }

    #[test]
    fn fiber_handler_first_then_ours_null_still_kills() {
        let (out, err) = child("fiber-first-null");
        assert_no_overflow_message(&out, &err);
    }

    #[test]
    fn ours_first_then_fiber_handler_null_still_kills() {
        let (out, err) = child("fault-first-null");
        assert_no_overflow_message(&out, &err);
    }
}
