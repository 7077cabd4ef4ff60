//! Stack-overflow detection: a fiber that runs off its stack gets a clear message naming
//! it and its stack size, never silent corruption. A converted thread whose start
//! routine runs off the start stack weft gave it (`thread_stack.rs`) gets one naming the
//! thread and that stack, and how to give a thread a larger one.
//!
//! Every fiber stack has a `PROT_NONE` guard below it (`stack.rs`). Touching it raises
//! SIGSEGV on the overflowing thread, whose stack is exhausted, so the handler runs on
//! an alternate signal stack that each converted thread gets. The handler checks whether
//! the faulting address is in (or just below) the running fiber's guard; if so it writes
//! the message with `write(2)` (no allocation, no lock, no formatting machinery), restores
//! the default action and returns, so the faulting instruction faults again and the
//! process dies of SIGSEGV as it would have. Any other fault goes to the handler that was
//! installed before weft's (Rust's own stack-overflow reporter, for instance), or to the
//! default action.

use crate::thread::ThreadState;
use crate::tls;
use core::ptr;
use core::sync::atomic::Ordering::Relaxed;
use std::sync::Once;

const ALTSTACK_SIZE: usize = 64 * 1024;
/// Faults this far below a guard still count as that fiber's overflow (a large frame
/// can step over the guard).
const BELOW_GUARD_SLACK: usize = 64 * 1024;

/// A thread's alternate signal stack, if weft installed it.
pub(crate) struct AltStack {
    base: *mut libc::c_void,
}

impl AltStack {
    /// Disables and unmaps the alternate stack (at thread exit).
    pub(crate) fn remove(self) {
        let ss = libc::stack_t {
            ss_sp: ptr::null_mut(),
            ss_flags: libc::SS_DISABLE,
            ss_size: 0,
        };
        // SAFETY: disabling the alternate stack of the calling thread, then unmapping the
        // memory we mapped for it; no handler runs on it now (we are not in one).
        unsafe {
            libc::sigaltstack(&ss, ptr::null_mut());
            libc::munmap(self.base, ALTSTACK_SIZE);
        }
    }
}

static INSTALL: Once = Once::new();
static mut PREVIOUS: core::mem::MaybeUninit<libc::sigaction> = core::mem::MaybeUninit::zeroed();

/// Installs the process-wide handler (once) and gives this thread an alternate signal
/// stack if it has none.
pub(crate) fn install_for_thread(t: *mut ThreadState) {
    INSTALL.call_once(|| {
        // SAFETY: installing a SIGSEGV handler. PREVIOUS is read from the kernel *before*
        // ours goes in (the old action that `sigaction` hands back is copied out only
        // after the new one is live, so a fault on another thread in between would find
        // PREVIOUS empty), then set again from the installing call in case another
        // handler went in meanwhile; it is only read afterwards.
        unsafe {
            libc::sigaction(libc::SIGSEGV, ptr::null(), (&raw mut PREVIOUS).cast());
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_sigsegv as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = core::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, &sa, &mut old);
            (&raw mut PREVIOUS).cast::<libc::sigaction>().write(old);
        }
    });
    // SAFETY: queries and sets the calling thread's alternate stack; `t` is its state.
    unsafe {
        let mut old: libc::stack_t = core::mem::zeroed();
        libc::sigaltstack(ptr::null(), &mut old);
        if old.ss_flags & libc::SS_DISABLE == 0 {
            return; // the thread already has one (Rust's runtime gives its threads one)
        }
        let base = libc::mmap(
            ptr::null_mut(),
            ALTSTACK_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return; // no detection on this thread; everything else still works
        }
        let ss = libc::stack_t {
            ss_sp: base,
            ss_flags: 0,
            ss_size: ALTSTACK_SIZE,
        };
        libc::sigaltstack(&ss, ptr::null_mut());
        (*t).altstack = Some(AltStack { base });
    }
}

extern "C" fn on_sigsegv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: only async-signal-safe operations: static TLS reads, reads of the running
    // fiber's record (alive while it runs), write(2), sigaction(2).
    unsafe {
        let addr = (*info).si_addr() as usize;
        let t = tls::thread();
        if !t.is_null() {
            let cur = (*t).current;
            if !cur.is_null() {
                if let Some(stack) = &(*cur).stack {
                    let g = stack.guard();
                    if addr < g.end && addr >= g.start.saturating_sub(BELOW_GUARD_SLACK) {
                        report(&*cur, stack.usable_size(), addr);
                        reset_default();
                        return;
                    }
                }
            }
        }
        let prev = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
        match prev.sa_sigaction {
            libc::SIG_DFL | libc::SIG_IGN => reset_default(),
            h if prev.sa_flags & libc::SA_SIGINFO != 0 => {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    core::mem::transmute(h);
                f(sig, info, ctx)
            }
            h => {
                let f: extern "C" fn(libc::c_int) = core::mem::transmute(h);
                f(sig)
            }
        }
    }
}

unsafe fn reset_default() {
    // SAFETY: restoring the default action is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGSEGV, &sa, ptr::null_mut());
    }
}

/// Writes "weft: stack overflow in fiber N ..." to stderr without allocating; for a
/// thread's own record (its frames on the start stack weft gave the thread,
/// `thread_stack.rs`), "weft: stack overflow in thread T's start routine ...", with
/// what gives a thread a larger stack (the fiber's advice, CreateFiber's size, does
/// not apply). `stack_size` is the usable size of the stack.
fn report(f: &crate::fiber::FiberRecord, stack_size: usize, addr: usize) {
    let mut buf = [0u8; 512];
    let mut w = Writer {
        buf: &mut buf,
        len: 0,
    };
    let sl = f.slot();
    // A thread's own record from its start (no entry; not a created fiber the thread
    // went on in after ConvertFiberToThread, which keeps its entry and its stack): its
    // stack is the start stack. Its slot shows no stack: the size is the stack's own.
    if sl.flags.load(Relaxed) & crate::registry::FLAG_THREAD != 0 && sl.entry.load(Relaxed) == 0 {
        w.s("weft: stack overflow in thread ");
        w.dec(sl.creator_tid.load(Relaxed) as u64);
        w.s("'s start routine (on the start stack weft gave the thread, ");
        w.dec(stack_size as u64);
        w.s(" bytes; its converted fiber ");
        w.dec(f.id);
        w.s(", fault at 0x");
        w.hex(addr as u64);
        w.s(
            "); give the thread a larger stack: pthread_attr_setstacksize before \
             pthread_create, or a larger default (ulimit -s); WEFT_THREAD_STACKS=off runs \
             start routines on glibc's stacks instead, of the same size\n",
        );
        // SAFETY: write(2) of our own buffer to stderr is async-signal-safe.
        unsafe { libc::write(2, w.buf.as_ptr().cast(), w.len) };
        return;
    }
    w.s("weft: stack overflow in fiber ");
    w.dec(f.id);
    w.s(" (entry 0x");
    w.hex(sl.entry.load(Relaxed));
    w.s(", stack size ");
    w.dec(sl.stack_size.load(Relaxed));
    w.s(" bytes, fault at 0x");
    w.hex(addr as u64);
    w.s(", created by thread ");
    w.dec(sl.creator_tid.load(Relaxed) as u64);
    w.s("); give it a larger stack: CreateFiber(size, ...) or Fiber::builder().stack_size(size)\n");
    let n = w.len;
    // SAFETY: write(2) of our own buffer to stderr is async-signal-safe.
    unsafe { libc::write(2, buf.as_ptr().cast(), n) };
}

struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn s(&mut self, s: &str) {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
    }
    fn digits(&mut self, mut v: u64, base: u64) {
        let mut tmp = [0u8; 20];
        let mut n = 0;
        loop {
            tmp[n] = b"0123456789abcdef"[(v % base) as usize];
            n += 1;
            v /= base;
            if v == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            if self.len < self.buf.len() {
                self.buf[self.len] = tmp[n];
                self.len += 1;
            }
        }
    }
    fn dec(&mut self, v: u64) {
        self.digits(v, 10)
    }
    fn hex(&mut self, v: u64) {
        self.digits(v, 16)
    }
}
