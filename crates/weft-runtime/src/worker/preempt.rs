//! Preemption: a green thread that runs for 10 ms without giving up its worker is
//! switched out, or asked to yield, by a signal.
//!
//! The monitor thread (`crate::monitor`) watches each worker's switch counter. When a
//! green thread has held a worker for [`SLICE`], it sets the worker's
//! `preempt_requested` flag and sends the worker's OS thread `SIGURG` (as Go does; its
//! default action is to ignore it, and few programs use it). The handler decides:
//!
//! **It switches** (requeues the thread at the back of the run queue and runs the next
//! one, exactly as `yield_now` would) only when all of these hold:
//! 1. the worker is running a green thread, not its scheduler;
//! 2. the thread is not inside the runtime (the worker's `depth` counter is 0: every
//!    runtime entry point that touches the worker's queues, timers or I/O raises it);
//! 3. the thread is not inside a context switch (the fiber core refuses that itself);
//! 4. the thread was spawned preemptible (the default; see `Builder::preempt`);
//! 5. the interrupted instruction is in the **main executable's own code** (only when
//!    the program allocates with the system allocator, in libc: a `#[global_allocator]`
//!    compiled into the program keeps per-thread caches there that the next green
//!    thread would re-enter), or is a `futex` system call made through libc's
//!    `syscall()` (how `std`'s locks wait) being restarted. Code in libc, the dynamic loader, the vDSO or
//!    another shared library is never switched out of: it may hold a lock or per-thread
//!    state (malloc's caches, a stdio lock) that the next green thread on the same OS
//!    thread would then find half-updated. A thread blocked in `futex` holds nothing of
//!    libc's, and switching out of it is what lets a green thread that waits for a
//!    `std::sync::Mutex` held by a preempted green thread of the same worker step aside
//!    (otherwise the two would deadlock on one OS thread); the futex call restarts when
//!    the thread is resumed.
//!
//! **Otherwise it only leaves the flag set**, and the thread yields at its next runtime
//! call (a park, a yield, I/O, a channel or lock operation). The monitor signals again
//! every millisecond while the thread keeps the worker, so a loop that spends most of
//! its time in libc or the vDSO (`Instant::now`) is still caught in its own code soon.
//!
//! Switching inside a signal handler is safe here because the fiber core's switch path
//! allocates nothing and takes no lock, the handler runs on the green thread's own
//! stack (no `SA_ONSTACK`: an alternate stack is per OS thread and would be reused by
//! the next preempted thread), and `SA_NODEFER` keeps `SIGURG` unblocked for the green
//! thread that runs next; when the preempted one is resumed, the handler returns and
//! the kernel restores its registers and signal mask.
//!
//! What remains the user's to know (docs/runtime.md): a green thread preempted while
//! it holds a `std::sync::Mutex` keeps it until it runs again, and `std`'s per-OS-
//! thread state (the stdout lock is re-entrant per OS thread) is shared by all green
//! threads of a worker. Threads that must not be switched out are spawned with
//! preemption off, or the runtime is built with `Builder::preempt(false)` (or
//! `WEFT_PREEMPT=off`).

use super::{current, mine, Worker};
use core::sync::atomic::{compiler_fence, AtomicUsize, Ordering::*};
use std::time::Duration;

/// How long a green thread may hold its worker before it is preempted.
pub const SLICE: Duration = Duration::from_millis(10);

/// The signal the monitor sends.
pub(crate) const SIGNAL: libc::c_int = libc::SIGURG;

/// The main executable's executable segments ([start, end) pairs; up to 4).
static TEXT: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
/// The handler that was installed before ours (called for signals that are not ours).
static PREVIOUS: AtomicUsize = AtomicUsize::new(0);
static INSTALL: std::sync::Once = std::sync::Once::new();

/// Raises the worker's runtime depth: the preemption handler only sets a flag until
/// the matching [`leave`].
///
/// # Safety
/// `w` is this thread's worker.
#[inline(always)]
pub(crate) unsafe fn enter(w: *mut Worker) {
    // SAFETY: per the contract; only this OS thread (and its signal handler) touches it.
    unsafe { (*w).depth.set((*w).depth.get() + 1) };
    compiler_fence(SeqCst);
}

/// Lowers the runtime depth raised by [`enter`].
///
/// # Safety
/// As [`enter`].
#[inline(always)]
pub(crate) unsafe fn leave(w: *mut Worker) {
    compiler_fence(SeqCst);
    // SAFETY: per the contract.
    unsafe { (*w).depth.set((*w).depth.get() - 1) };
}

/// Installs the handler (once per process) and records the main program's code.
pub(crate) fn install() {
    INSTALL.call_once(|| {
        if system_allocator() {
            find_main_text();
        }
        // SAFETY: installs a handler that follows the rules in the module comment; the
        // previous action is kept and chained to.
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = core::mem::zeroed();
            if libc::sigaction(SIGNAL, &sa, &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && old.sa_sigaction != libc::SIG_IGN
            {
                PREVIOUS.store(old.sa_sigaction, Relaxed);
            }
        }
    });
}

/// Whether the program allocates with the system allocator (malloc, in libc): true
/// if its symbol table has std's default allocator shim (`__rdl_alloc`). A program with
/// a `#[global_allocator]` of its own (jemalloc, mimalloc...) has its allocator in its
/// own code, with per-thread caches a switch could interrupt; so does any program whose
/// symbols were stripped, as far as we can tell. For those the handler does not switch
/// in the program's own code (futex waits only; otherwise the flag).
fn system_allocator() -> bool {
    use object::{Object, ObjectSymbol};
    let Ok(bytes) = std::fs::read("/proc/self/exe") else {
        return false;
    };
    let Ok(file) = object::File::parse(&*bytes) else {
        return false;
    };
    file.symbols()
        .chain(file.dynamic_symbols())
        .any(|s| s.name().is_ok_and(|n| n.contains("__rdl_alloc")))
}

/// Records the executable PT_LOAD segments of the main program (the first object
/// `dl_iterate_phdr` reports).
fn find_main_text() {
    unsafe extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        _data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid info block with `dlpi_phnum` headers.
        unsafe {
            let info = &*info;
            let mut k = 0;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 && k < 4 {
                    let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    TEXT[2 * k].store(start, Relaxed);
                    TEXT[2 * k + 1].store(start + ph.p_memsz as usize, Relaxed);
                    k += 1;
                }
            }
        }
        1 // the first object is the main program: stop
    }
    // SAFETY: the callback only reads what the loader passes.
    unsafe { libc::dl_iterate_phdr(Some(cb), core::ptr::null_mut()) };
}

fn in_main_text(pc: usize) -> bool {
    (0..4).any(|k| {
        let (s, e) = (TEXT[2 * k].load(Relaxed), TEXT[2 * k + 1].load(Relaxed));
        s <= pc && pc < e
    })
}

/// The interrupted instruction pointer, and whether the thread is in a `futex` call
/// that the kernel is about to restart (rip at a `syscall` instruction, rax = SYS_futex).
#[cfg(target_arch = "x86_64")]
unsafe fn interrupted(ctx: *mut libc::c_void) -> (usize, bool) {
    // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
    unsafe {
        let uc = &*(ctx as *const libc::ucontext_t);
        let pc = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
        let rax = uc.uc_mcontext.gregs[libc::REG_RAX as usize];
        // Only futex calls made through libc's `syscall()` (how std's and parking_lot's
        // locks wait), not glibc's internal lock waits, which happen inside malloc and
        // stdio with their state half-updated.
        let sys = libc::syscall as *const () as usize;
        let in_syscall_fn = pc >= sys && pc < sys + 128;
        // SAFETY: `pc` is the instruction the kernel interrupted: mapped and readable.
        let at_syscall =
            in_syscall_fn && core::ptr::read_unaligned(pc as *const [u8; 2]) == [0x0f, 0x05];
        (pc, at_syscall && rax == libc::SYS_futex)
    }
}

#[cfg(target_arch = "aarch64")]
unsafe fn interrupted(ctx: *mut libc::c_void) -> (usize, bool) {
    // SAFETY: the kernel passes a ucontext_t to an SA_SIGINFO handler.
    unsafe {
        let uc = &*(ctx as *const libc::ucontext_t);
        (uc.uc_mcontext.pc as usize, false)
    }
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let w = current();
    if w.is_null() {
        chain(sig, info, ctx);
        return;
    }
    // SAFETY: `w` is this thread's worker; everything below is allocation- and lock-free
    // until the switch, which follows the rules of the module comment.
    unsafe {
        if (*w).depth.get() != 0 {
            return; // inside the runtime: the flag is enough
        }
        if super::shared_of(w).shutdown.load(Relaxed) {
            return; // shutting down: no switch from a signal handler
        }
        let Some(task) = (*w).current.as_ref() else {
            return;
        };
        if !task.preemptible() {
            return;
        }
        let (pc, in_futex) = interrupted(ctx);
        if !(in_main_text(pc) || in_futex) {
            return;
        }
        enter(w);
        mine(w).progress.preempt_requested.store(false, Relaxed);
        super::switch_away(w, true);
        let w = current();
        leave(w);
    }
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.load(Relaxed);
    if prev != 0 {
        // SAFETY: `prev` was installed as an SA_SIGINFO-style handler for this signal by
        // someone else before us; calling it with the same arguments is what the kernel
        // would have done.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                core::mem::transmute(prev);
            f(sig, info, ctx);
        }
    }
}
