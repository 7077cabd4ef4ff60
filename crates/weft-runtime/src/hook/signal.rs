//! Signals and the calls they interrupt.
//!
//! A thread blocked in the kernel is interrupted by a signal handled on it: its call
//! fails with `EINTR`, or is restarted if the handler was installed with `SA_RESTART`
//! (and the call is one the kernel restarts). A green thread parked in a hooked call is
//! not in the kernel, so the layer does this itself:
//!
//! - `sigaction` and `signal` are overridden: a handler the program installs (for any
//!   signal but the synchronous ones, `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`,
//!   `SIGTRAP`, `SIGSYS`, and the runtime's `SIGURG`) is installed behind a trampoline.
//!   The program still sees its own handler (in `oldact`, and when the signal comes).
//! - The trampoline calls the program's handler, then, if it ran on a worker thread,
//!   writes the worker and `SA_RESTART` into a pipe (both async-signal-safe).
//! - A relay thread reads the pipe and wakes every green thread of that worker parked
//!   in a hooked call, marking it interrupted: each fails with `EINTR` or goes on
//!   waiting, as the kernel would have decided for a thread blocked in that call.
//!
//! So a signal handled on a worker interrupts the hooked calls of that worker's green
//! threads (they share its OS thread, as they share `pthread_self()`): a
//! `pthread_kill` of the thread a green thread ran on reaches it. A signal handled on
//! any other thread interrupts none, as it would interrupt no other thread's call.
//! Green threads register only once a handler has been wrapped: a program with no
//! handlers pays nothing.

use super::real;
use super::wait::Stop;
use crate::io::NoPreempt;
use crate::park::Unparker;
use crate::worker;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// Signals 1..=64 (index by number).
const NSIG: usize = 65;

/// Whether a handler has been wrapped (green threads then register while parked).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The program's handler and flags per signal, read by the trampoline.
static HANDLER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
static FLAGS: [AtomicI32; NSIG] = [const { AtomicI32::new(0) }; NSIG];
/// Whether the signal's action is ours (the trampoline) now.
static WRAPPED: [AtomicBool; NSIG] = [const { AtomicBool::new(false) }; NSIG];
/// The program's whole `sigaction` per signal (for `oldact`), and the lock that
/// orders changes of the action.
static USER: Mutex<Vec<Option<libc::sigaction>>> = Mutex::new(Vec::new());
/// The pipe's write end (-1 before the relay starts).
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// A parked call's place on the signal list.
struct Node {
    worker: usize,
    /// 0: nothing; 1: a signal whose handler has SA_RESTART; 2: one without.
    flag: AtomicU8,
    waker: Unparker,
    /// Its index in `LIST` (changed under its lock).
    idx: AtomicUsize,
}

/// The parked calls (addresses of their nodes).
static LIST: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A call's registration on the signal list; taken off when dropped.
pub(crate) struct SigLink(Box<Node>);

/// Registers the calling green thread (`me`) while it waits, if the program has a
/// wrapped handler.
pub(crate) fn register(me: &Unparker) -> Option<SigLink> {
    if !ACTIVE.load(Acquire) {
        return None;
    }
    let node = Box::new(Node {
        worker: worker::current() as usize,
        flag: AtomicU8::new(0),
        waker: me.clone(),
        idx: AtomicUsize::new(0),
    });
    let _np = NoPreempt::new();
    let mut l = LIST.lock().unwrap_or_else(|e| e.into_inner());
    node.idx.store(l.len(), Relaxed);
    l.push(&*node as *const Node as usize);
    Some(SigLink(node))
}

impl SigLink {
    /// The signal that came since the call registered (or since [`SigLink::clear`]).
    pub(crate) fn pending(&self) -> Option<Stop> {
        match self.0.flag.load(Acquire) {
            0 => None,
            1 => Some(Stop::Signal { restart: true }),
            _ => Some(Stop::Signal { restart: false }),
        }
    }

    /// The call goes on waiting after a restartable signal.
    pub(crate) fn clear(&self) {
        self.0.flag.store(0, Release);
    }
}

impl Drop for SigLink {
    fn drop(&mut self) {
        let _np = NoPreempt::new();
        let mut l = LIST.lock().unwrap_or_else(|e| e.into_inner());
        let i = self.0.idx.load(Relaxed);
        l.swap_remove(i);
        if let Some(&moved) = l.get(i) {
            // SAFETY: nodes on the list are alive (each is taken off before it dies).
            unsafe { (*(moved as *const Node)).idx.store(i, Relaxed) };
        }
    }
}

/// Signals never wrapped: the synchronous ones (their handlers must run as installed,
/// as the fiber core's and the syslets' fault handlers do), the runtime's preemption
/// signal, and those that cannot be caught.
fn excluded(sig: c_int) -> bool {
    !(1..NSIG as c_int).contains(&sig)
        || matches!(
            sig,
            libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGILL
                | libc::SIGFPE
                | libc::SIGTRAP
                | libc::SIGSYS
                | libc::SIGURG
                | libc::SIGKILL
                | libc::SIGSTOP
        )
}

/// Runs the program's handler, then tells the relay which worker it ran on.
extern "C" fn trampoline(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: errno is this thread's; saved and restored around what we do.
    let errno = unsafe { *libc::__errno_location() };
    let s = sig as usize;
    let h = HANDLER[s].load(Acquire);
    let fl = FLAGS[s].load(Acquire);
    if fl & libc::SA_RESETHAND != 0 {
        // The kernel has reset the action to the default as it delivered this one.
        WRAPPED[s].store(false, Release);
    }
    if h != libc::SIG_DFL && h != libc::SIG_IGN {
        // SAFETY: `h` is the handler the program installed for `sig`, with the
        // signature its flags say.
        unsafe {
            if fl & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    core::mem::transmute(h);
                f(sig, info, ctx);
            } else {
                let f: extern "C" fn(c_int) = core::mem::transmute(h);
                f(sig);
            }
        }
    }
    let w = worker::current() as usize;
    let fd = PIPE.load(Acquire);
    if w != 0 && fd >= 0 {
        let kind: u64 = if fl & libc::SA_RESTART != 0 { 1 } else { 2 };
        let rec = [w as u64, kind];
        // SAFETY: write(2) of a local array is async-signal-safe; the write end is
        // non-blocking (a full pipe drops the record: the relay is far behind anyway).
        unsafe { real::write()(fd, rec.as_ptr().cast(), 16) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Starts the relay thread and its pipe (once).
fn start_relay() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut p = [0; 2];
        // SAFETY: pipe2 into a local array; fcntl on our own descriptor.
        unsafe {
            if real::pipe2()(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return;
            }
            let fl = real::fcntl()(p[1], libc::F_GETFL);
            real::fcntl()(p[1], libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let rd = p[0];
        let spawned = std::thread::Builder::new()
            .name("weft-hook-signals".into())
            .stack_size(64 * 1024)
            .spawn(move || relay(rd));
        if spawned.is_ok() {
            PIPE.store(p[1], Release);
        }
    });
}

/// The relay: reads (worker, kind) records and wakes that worker's parked calls.
fn relay(fd: c_int) {
    // SAFETY: blocks every signal on this thread only: the program's handlers run on
    // its own threads.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, core::ptr::null_mut());
    }
    let mut rec = [0u64; 2];
    loop {
        // SAFETY: reads one record into a local array.
        let n = unsafe { real::read()(fd, rec.as_mut_ptr().cast(), 16) };
        if n != 16 {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return;
            }
            continue;
        }
        let (w, kind) = (rec[0] as usize, rec[1] as u8);
        let wake: Vec<Unparker> = {
            let l = LIST.lock().unwrap_or_else(|e| e.into_inner());
            l.iter()
                .filter_map(|&n| {
                    // SAFETY: nodes on the list are alive while it is locked.
                    let n = unsafe { &*(n as *const Node) };
                    (n.worker == w).then(|| {
                        n.flag.fetch_max(kind, AcqRel);
                        n.waker.clone()
                    })
                })
                .collect()
        };
        for u in wake {
            u.unpark_owned();
        }
    }
}

/// `sigaction(2)`, installing the program's handlers behind the trampoline.
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    oldact: *mut libc::sigaction,
) -> c_int {
    if excluded(sig) || !super::enabled() {
        // SAFETY: the caller's arguments, passed on.
        return unsafe { real::sigaction()(sig, act, oldact) };
    }
    let s = sig as usize;
    let _np = NoPreempt::new();
    let mut user = USER.lock().unwrap_or_else(|e| e.into_inner());
    if user.len() < NSIG {
        user.resize(NSIG, None);
    }
    // SAFETY: the caller's pointers are valid or null (sigaction's contract).
    unsafe {
        let mut old: libc::sigaction = core::mem::zeroed();
        let wrapped = WRAPPED[s].load(Acquire);
        if !oldact.is_null() || act.is_null() {
            if real::sigaction()(sig, core::ptr::null(), &mut old) != 0 {
                return -1;
            }
            if wrapped {
                if let Some(u) = user[s] {
                    old = u;
                }
            }
        }
        if !act.is_null() {
            let a = *act;
            if a.sa_sigaction == libc::SIG_DFL || a.sa_sigaction == libc::SIG_IGN {
                if real::sigaction()(sig, act, core::ptr::null_mut()) != 0 {
                    return -1;
                }
                WRAPPED[s].store(false, Release);
                user[s] = None;
            } else {
                // Make sure what the trampoline calls is ready before it can run.
                real::write();
                start_relay();
                HANDLER[s].store(a.sa_sigaction, Release);
                FLAGS[s].store(a.sa_flags, Release);
                let mut k = a;
                k.sa_sigaction = trampoline as *const () as usize;
                k.sa_flags |= libc::SA_SIGINFO;
                if real::sigaction()(sig, &k, core::ptr::null_mut()) != 0 {
                    return -1;
                }
                user[s] = Some(a);
                WRAPPED[s].store(true, Release);
                ACTIVE.store(true, Release);
            }
        }
        if !oldact.is_null() {
            *oldact = old;
        }
    }
    0
}

/// `signal(3)`, as glibc's (BSD semantics: `SA_RESTART`, the signal blocked while its
/// handler runs), through [`sigaction`].
///
/// # Safety
/// As `signal(3)`.
pub unsafe fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if excluded(sig) || !super::enabled() {
        // SAFETY: passed on.
        return unsafe { real::signal()(sig, handler) };
    }
    // SAFETY: a zeroed sigaction is valid; sigemptyset/sigaddset fill its mask.
    unsafe {
        let mut a: libc::sigaction = core::mem::zeroed();
        a.sa_sigaction = handler;
        libc::sigemptyset(&mut a.sa_mask);
        libc::sigaddset(&mut a.sa_mask, sig);
        a.sa_flags = libc::SA_RESTART;
        let mut old: libc::sigaction = core::mem::zeroed();
        if sigaction(sig, &a, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}
