//! Syslets for C: `include/weft/syslet.h`, over [`weft_runtime::syslet`].
//!
//! A `weft_syslet_ctx *` is a boxed [`Context`] (a completion ring and the syslets in
//! flight). C programs write the atoms themselves (`struct syslet_uatom`, the layout of
//! the original Linux syslet patches: [`SysletUatom`]) and own them and everything they point to; submitting one
//! is [`Context::exec_raw`]. The executor already turns bad pointers into `-EFAULT`
//! results, so nothing here has to trust the atoms, except `weft_syslet_validate`,
//! which walks them before anything runs and reads each one with `process_vm_readv`
//! (a bad address is an error code, not a crash).
//!
//! Entry points that may park (`async_exec` and `weft_syslet_exec` with a
//! `SYSLET_SYNC` atom on a green thread, `async_wait`) run under
//! the internal `guard` of [`runtime`](crate::runtime): the runtime's shutdown unwind becomes `WEFT_ERR_SHUTDOWN`, a panic
//! `WEFT_ERR_INTERNAL`. The others cannot park and only catch panics.
//!
//! Completions are taken with [`Context::take`], not [`Context::pop`]: `take` also
//! forgets the syslet, so that `weft_syslet_in_flight` (and `weft_syslet_ctx_free`'s
//! check) see it gone; `pop` leaves a syslet submitted raw in the context's table.

use crate::runtime::guard;
use crate::{
    set_error, DWORD, WEFT_ERR_INTERNAL, WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_SYSLET_ASYNC_AND_SYNC,
    WEFT_ERR_SYSLET_BAD_ATOM, WEFT_ERR_SYSLET_BAD_FLAGS, WEFT_ERR_SYSLET_BUSY,
    WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL, WEFT_ERR_SYSLET_MISSING_ARGUMENT,
    WEFT_ERR_SYSLET_NOT_IN_FLIGHT, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL,
};
use core::cell::{Cell, RefCell};
use core::ffi::{c_char, c_int, c_long, CStr};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;
use std::time::Duration;
use weft_runtime::syslet::{
    self, Context, Handle, RawOutcome, SYSLET_ASYNC, SYSLET_FLAGS, SYSLET_SKIP_TO_NEXT_ON_STOP,
    SYSLET_SYNC,
};

pub use weft_runtime::syslet::SysletUatom;

/// The largest ring `weft_syslet_ctx_new` accepts (`WEFT_SYSLET_RING_MAX`): the ring is
/// allocated at once, 32 bytes a slot.
pub const WEFT_SYSLET_RING_MAX: usize = 1 << 20;

/// `weft_syslet_ctx` of `syslet.h`: a syslet context, opaque to C.
pub struct WeftSysletCtx {
    ctx: Context,
}

/// `struct weft_syslet_completion` of `syslet.h` (24 bytes): a finished syslet.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeftSysletCompletion {
    /// The atom the syslet ended at.
    pub atom: *mut SysletUatom,
    /// Its result: `>= 0`, or `-errno`.
    pub ret: i64,
    /// The handle `async_exec` gave it; 0 for a syslet that finished inline.
    pub handle: u64,
}

std::thread_local! {
    /// The result of this OS thread's last syslet that finished inline.
    static LAST_RET: Cell<i64> = const { Cell::new(0) };
    /// The message of this OS thread's last failed `weft_syslet_validate`.
    static VALIDATE_ERROR: RefCell<CString> = RefCell::new(c"no error".to_owned());
}

/// The context behind a `weft_syslet_ctx *`, or the invalid-argument code.
///
/// # Safety
/// `ctx` is NULL or a live context from `weft_syslet_ctx_new`.
unsafe fn context<'a>(ctx: *const WeftSysletCtx) -> Result<&'a Context, DWORD> {
    // SAFETY: per the contract.
    unsafe { ctx.as_ref() }
        .map(|c| &c.ctx)
        .ok_or(WEFT_ERR_INVALID_ARGUMENT)
}

/// A context whose ring holds `ring_size` completions (1 ..= `WEFT_SYSLET_RING_MAX`);
/// NULL with `WEFT_ERR_INVALID_ARGUMENT` for another size.
#[unsafe(no_mangle)]
pub extern "C" fn weft_syslet_ctx_new(ring_size: usize) -> *mut WeftSysletCtx {
    if ring_size == 0 || ring_size > WEFT_SYSLET_RING_MAX {
        set_error(WEFT_ERR_INVALID_ARGUMENT);
        return core::ptr::null_mut();
    }
    match catch_unwind(|| {
        Box::new(WeftSysletCtx {
            ctx: Context::new(ring_size),
        })
    }) {
        Ok(b) => Box::into_raw(b),
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            core::ptr::null_mut()
        }
    }
}

/// Frees `ctx`, unless syslets are in flight in it (`WEFT_ERR_SYSLET_BUSY`, and `ctx` is
/// left as it was). Returns 0 or an error code.
///
/// # Safety
/// `ctx` is NULL or a live context that no other call uses from now on (unless this
/// one fails).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_ctx_free(ctx: *mut WeftSysletCtx) -> DWORD {
    // SAFETY: per the contract.
    let c = match unsafe { context(ctx) } {
        Ok(c) => c,
        Err(e) => return set_error(e),
    };
    match catch_unwind(AssertUnwindSafe(|| c.in_flight())) {
        Ok(0) => {}
        Ok(_) => return set_error(WEFT_ERR_SYSLET_BUSY),
        Err(_) => return set_error(WEFT_ERR_INTERNAL),
    }
    // SAFETY: a live context from weft_syslet_ctx_new (a Box), given up by the caller;
    // nothing is in flight, so no cachemiss thread will post to it (they hold only the
    // ring, shared, and a weak reference to the rest).
    let b = unsafe { Box::from_raw(ctx) };
    match catch_unwind(AssertUnwindSafe(move || drop(b))) {
        Ok(()) => 0,
        Err(_) => set_error(WEFT_ERR_INTERNAL),
    }
}

/// Starts the syslet at `first` in `ctx` (see `Context::exec_raw`).
///
/// # Safety
/// `ctx` is NULL or a live context; `first` is NULL or the first atom of a syslet whose
/// memory stays valid until it completes (the contract in `syslet.h`).
unsafe fn exec(ctx: *mut WeftSysletCtx, first: *mut SysletUatom) -> Result<RawOutcome, DWORD> {
    // SAFETY: per the contract.
    let c = unsafe { context(ctx) }?;
    if first.is_null() {
        return Err(WEFT_ERR_INVALID_ARGUMENT);
    }
    // A SYSLET_SYNC atom that would block parks a green thread (it may see the
    // shutdown unwind).
    // SAFETY: the syslet's memory per the contract; bad pointers are the executor's
    // -EFAULT.
    let r = guard(|| Ok(unsafe { c.exec_raw(first) }), |e| e)?;
    if let RawOutcome::Done(_, ret) = r {
        let _ = LAST_RET.try_with(|l| l.set(ret));
    }
    Ok(r)
}

/// The original syslets' `sys_async_exec`: runs the syslet at `first`; returns its final atom when
/// it finished inline (`*handle` = 0, result in `weft_syslet_last_ret()`), or NULL when
/// it went asynchronous (`*handle` = its handle) or on error (`*handle` = 0, the code as
/// `GetLastError`).
///
/// # Safety
/// `ctx` is NULL or a live context; `first` is NULL or a syslet whose memory stays
/// valid until it completes; `handle` is NULL or valid for writing a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn async_exec(
    ctx: *mut WeftSysletCtx,
    first: *mut SysletUatom,
    handle: *mut u64,
) -> *mut SysletUatom {
    // SAFETY: per the contract.
    let r = unsafe { exec(ctx, first) };
    let (atom, h) = match r {
        Ok(RawOutcome::Done(atom, _)) => (atom, 0),
        Ok(RawOutcome::Async(Handle(h))) => (core::ptr::null_mut(), h),
        Err(e) => {
            set_error(e);
            (core::ptr::null_mut(), 0)
        }
    };
    if !handle.is_null() {
        // SAFETY: not NULL, so valid for writing (the contract).
        unsafe { handle.write(h) };
    }
    atom
}

/// Runs the syslet at `first`: returns 0 with `*handle` = 0 and `*done` (if not NULL)
/// filled when it finished inline, or 0 with `*handle` = its handle when it went
/// asynchronous; or an error code (out parameters untouched).
///
/// # Safety
/// As `async_exec`; `done` is NULL or valid for writing a `WeftSysletCompletion`;
/// `handle` is NULL (an error) or valid for writing a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_exec(
    ctx: *mut WeftSysletCtx,
    first: *mut SysletUatom,
    done: *mut WeftSysletCompletion,
    handle: *mut u64,
) -> DWORD {
    if handle.is_null() {
        return set_error(WEFT_ERR_INVALID_ARGUMENT);
    }
    // SAFETY: per the contract.
    match unsafe { exec(ctx, first) } {
        Ok(RawOutcome::Done(atom, ret)) => {
            // SAFETY: `handle` is not NULL and `done` is NULL or valid (the contract).
            unsafe {
                handle.write(0);
                if !done.is_null() {
                    done.write(WeftSysletCompletion {
                        atom,
                        ret,
                        handle: 0,
                    });
                }
            }
            0
        }
        Ok(RawOutcome::Async(Handle(h))) => {
            // SAFETY: not NULL, so valid for writing (the contract).
            unsafe { handle.write(h) };
            0
        }
        Err(e) => set_error(e),
    }
}

/// The result of the calling OS thread's last syslet that finished inline (through
/// `async_exec` or `weft_syslet_exec`); 0 before the first.
#[unsafe(no_mangle)]
pub extern "C" fn weft_syslet_last_ret() -> i64 {
    LAST_RET.try_with(Cell::get).unwrap_or(0)
}

/// The original syslets' `sys_async_wait`: waits until at least `min_completions` completions are
/// in the ring of `ctx`, or `timeout_ns` passes (-1: no limit; 0: do not wait); returns
/// how many are there, or -1 with the error as `GetLastError`.
///
/// # Safety
/// `ctx` is NULL or a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn async_wait(
    ctx: *mut WeftSysletCtx,
    min_completions: usize,
    timeout_ns: i64,
) -> c_int {
    // SAFETY: per the contract.
    let r = unsafe { context(ctx) }.and_then(|c| {
        let timeout = match timeout_ns {
            -1 => None,
            n if n >= 0 => Some(Duration::from_nanos(n.unsigned_abs())),
            _ => return Err(WEFT_ERR_INVALID_ARGUMENT),
        };
        guard(|| Ok(c.wait(min_completions, timeout)), |e| e)
    });
    match r {
        Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
        Err(e) => {
            set_error(e);
            -1
        }
    }
}

/// Takes the oldest completion of `ctx` into `*out`: 1 if there was one, 0 if none
/// (`*out` untouched), -1 with the error as `GetLastError`. No system call.
///
/// # Safety
/// `ctx` is NULL or a live context; `out` is NULL or valid for writing a
/// `WeftSysletCompletion`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_pop(
    ctx: *mut WeftSysletCtx,
    out: *mut WeftSysletCompletion,
) -> c_int {
    // SAFETY: per the contract.
    let c = match unsafe { context(ctx) } {
        Ok(c) if !out.is_null() => c,
        _ => {
            set_error(WEFT_ERR_INVALID_ARGUMENT);
            return -1;
        }
    };
    // `take`, not `pop`: it also forgets the syslet (see the module comment).
    let taken = catch_unwind(AssertUnwindSafe(|| {
        c.take().map(|r| match r {
            Err(raw) => WeftSysletCompletion {
                atom: raw.atom,
                ret: raw.ret,
                handle: raw.id,
            },
            // Only the Rust `exec` keeps a program; a C context has none. Say what we
            // know.
            Ok(d) => WeftSysletCompletion {
                atom: core::ptr::null_mut(),
                ret: d.ret,
                handle: d.id,
            },
        })
    }));
    match taken {
        Ok(Some(comp)) => {
            // SAFETY: not NULL, so valid for writing (the contract).
            unsafe { out.write(comp) };
            1
        }
        Ok(None) => 0,
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            -1
        }
    }
}

/// Cancels the syslet `handle` of `ctx` (see `Context::cancel`). Returns 0, or
/// `WEFT_ERR_SYSLET_NOT_IN_FLIGHT` if no syslet of `ctx` has that handle any more.
///
/// # Safety
/// `ctx` is NULL or a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_cancel(ctx: *mut WeftSysletCtx, handle: u64) -> DWORD {
    // SAFETY: per the contract.
    let c = match unsafe { context(ctx) } {
        Ok(c) => c,
        Err(e) => return set_error(e),
    };
    match catch_unwind(AssertUnwindSafe(|| c.cancel(Handle(handle)))) {
        Ok(true) => 0,
        Ok(false) => set_error(WEFT_ERR_SYSLET_NOT_IN_FLIGHT),
        Err(_) => set_error(WEFT_ERR_INTERNAL),
    }
}

/// Runs `f` on the context, for the counters: `f`'s value, or 0 with the error set.
///
/// # Safety
/// `ctx` is NULL or a live context.
unsafe fn counter<T: Default>(ctx: *const WeftSysletCtx, f: impl FnOnce(&Context) -> T) -> T {
    // SAFETY: per the contract.
    let r = unsafe { context(ctx) }
        .and_then(|c| catch_unwind(AssertUnwindSafe(|| f(c))).map_err(|_| WEFT_ERR_INTERNAL));
    r.unwrap_or_else(|e| {
        set_error(e);
        T::default()
    })
}

/// How many syslets of `ctx` are in flight (went asynchronous, completion not taken).
///
/// # Safety
/// `ctx` is NULL or a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_in_flight(ctx: *const WeftSysletCtx) -> usize {
    // SAFETY: per the contract.
    unsafe { counter(ctx, Context::in_flight) }
}

/// How many completions wait in the ring of `ctx`.
///
/// # Safety
/// `ctx` is NULL or a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_ready(ctx: *const WeftSysletCtx) -> usize {
    // SAFETY: per the contract.
    unsafe { counter(ctx, Context::ready) }
}

/// How many completions found the ring of `ctx` full (and waited in its overflow list).
///
/// # Safety
/// `ctx` is NULL or a live context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_overflowed(ctx: *const WeftSysletCtx) -> u64 {
    // SAFETY: per the contract.
    unsafe { counter(ctx, Context::overflowed) }
}

/// The number of the system call called `name` in weft's syslet table (`"read"`,
/// `"openat"`, `"umem_add"`...), or -1.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_nr(name: *const c_char) -> c_long {
    if name.is_null() {
        set_error(WEFT_ERR_INVALID_ARGUMENT);
        return -1;
    }
    // SAFETY: not NULL, so NUL-terminated (the contract).
    let name = unsafe { CStr::from_ptr(name) };
    let nr = name.to_str().ok().and_then(syslet::syscall_number);
    match nr.and_then(|n| c_long::try_from(n).ok()) {
        Some(n) => n,
        None => {
            set_error(WEFT_ERR_SYSLET_UNKNOWN_SYSCALL);
            -1
        }
    }
}

/// Every name of the table, NUL-terminated, by number.
fn names() -> &'static HashMap<u64, CString> {
    static NAMES: OnceLock<HashMap<u64, CString>> = OnceLock::new();
    NAMES.get_or_init(|| {
        (0..1024)
            .chain([syslet::SYS_UMEM_ADD])
            .filter_map(|nr| Some((nr, CString::new(syslet::syscall_name(nr)?).ok()?)))
            .collect()
    })
}

/// The name of system call `nr` in weft's syslet table (static text), or NULL.
#[unsafe(no_mangle)]
pub extern "C" fn weft_syslet_name(nr: u64) -> *const c_char {
    match catch_unwind(|| names().get(&nr).map(|n| n.as_ptr())) {
        Ok(Some(p)) => p,
        Ok(None) => {
            set_error(WEFT_ERR_SYSLET_UNKNOWN_SYSCALL);
            core::ptr::null()
        }
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            core::ptr::null()
        }
    }
}

// ---- validation ------------------------------------------------------------------

/// Reads atoms of the caller's memory without trusting their addresses.
struct Reader {
    /// A pipe to copy through, made when `process_vm_readv` is not allowed.
    pipe: Option<(OwnedFd, OwnedFd)>,
}

const ATOM_SIZE: usize = core::mem::size_of::<SysletUatom>();

impl Reader {
    /// The atom at `p`, or None if its memory cannot be read (entirely).
    fn read(&mut self, p: *const SysletUatom) -> Option<SysletUatom> {
        let mut a = SysletUatom::default();
        let local = libc::iovec {
            iov_base: (&mut a as *mut SysletUatom).cast(),
            iov_len: ATOM_SIZE,
        };
        let remote = libc::iovec {
            iov_base: p.cast_mut().cast(),
            iov_len: ATOM_SIZE,
        };
        if self.pipe.is_none() {
            // SAFETY: the kernel checks the remote range (EFAULT, or a short count) and
            // writes only into `a`, which is ours and ATOM_SIZE bytes long.
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            if n == ATOM_SIZE as isize {
                return Some(a);
            }
            // SAFETY: this thread's errno.
            let errno = unsafe { *libc::__errno_location() };
            if n >= 0 || errno == libc::EFAULT {
                return None;
            }
            // Not allowed here (seccomp, an old kernel): copy through a pipe instead.
            self.pipe = Some(make_pipe()?);
        }
        let (r, w) = self.pipe.as_ref()?;
        Self::through_pipe(r, w, p, &mut a).then_some(a)
    }

    /// Copies the atom at `p` into `a` by writing it to a pipe (the kernel says EFAULT
    /// for a bad address) and reading it back.
    fn through_pipe(r: &OwnedFd, w: &OwnedFd, p: *const SysletUatom, a: &mut SysletUatom) -> bool {
        // SAFETY: write only reads `p` through the kernel, which checks it.
        let n = unsafe { libc::write(w.as_raw_fd(), p.cast(), ATOM_SIZE) };
        if n <= 0 {
            return false;
        }
        // SAFETY: reads at most ATOM_SIZE bytes into `a`, ours.
        let back = unsafe {
            libc::read(
                r.as_raw_fd(),
                (a as *mut SysletUatom).cast(),
                n.unsigned_abs(),
            )
        };
        back == n && n == ATOM_SIZE as isize
    }
}

fn make_pipe() -> Option<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return None;
    }
    // SAFETY: two new descriptors, ours alone.
    Some(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The index of the atom at `p` in an array of atoms that starts at `first`
/// (`WEFT_SYSLET_NO_INDEX`, `isize::MIN`, if `p` is not a whole number of atoms away).
fn index_of(first: *const SysletUatom, p: *const SysletUatom) -> isize {
    let d = (p as usize).wrapping_sub(first as usize) as isize;
    if d % ATOM_SIZE as isize == 0 {
        d / ATOM_SIZE as isize
    } else {
        isize::MIN
    }
}

/// How an atom was reached by the walk.
#[derive(Clone, Copy)]
enum Via {
    First,
    Next(*const SysletUatom),
    Skip(*const SysletUatom),
}

/// A validation failure: its code, the atom, and the message.
struct Problem {
    code: DWORD,
    atom: *const SysletUatom,
    message: String,
}

/// Walks the syslet at `first` and checks each atom reached (see `syslet.h`).
fn validate(first: *const SysletUatom) -> Result<(), Problem> {
    let label = |p: *const SysletUatom| match index_of(first, p) {
        isize::MIN => format!("syslet atom at {p:p}"),
        i => format!("syslet atom {i} (at {p:p})"),
    };
    let mut reader = Reader { pipe: None };
    let mut seen = HashSet::new();
    let mut todo = vec![(first, Via::First)];
    while let Some((p, from)) = todo.pop() {
        if !seen.insert(p as usize) {
            continue;
        }
        let fail = |code, what: String| Problem {
            code,
            atom: p,
            message: format!("{}: {what}", label(p)),
        };
        let Some(a) = reader.read(p) else {
            let how = match from {
                Via::First => "the first atom".to_owned(),
                Via::Next(q) => format!("the next of {}", label(q)),
                Via::Skip(q) => format!(
                    "the linearly next atom after {}, which has SYSLET_SKIP_TO_NEXT_ON_STOP",
                    label(q)
                ),
            };
            return Err(fail(
                WEFT_ERR_SYSLET_BAD_ATOM,
                format!("cannot be read: a bad pointer ({how})"),
            ));
        };
        let name = syslet::syscall_name(a.nr);
        let Some(takes) = syslet::syscall_arity(a.nr) else {
            return Err(fail(
                WEFT_ERR_SYSLET_UNKNOWN_SYSCALL,
                format!(
                    "unknown system call number {} (use SYS_* from <sys/syscall.h>, weft_syslet_nr(), or SYS_UMEM_ADD)",
                    a.nr
                ),
            ));
        };
        let name = name.unwrap_or("?");
        if syslet::syscall_forbidden(a.nr) {
            return Err(fail(
                WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL,
                format!(
                    "{name} cannot run in a syslet (it would act on the executor's thread, not the program); call it directly"
                ),
            ));
        }
        let given = a.arg_ptr.iter().take_while(|p| !p.is_null()).count();
        if given < takes as usize {
            return Err(fail(
                WEFT_ERR_SYSLET_MISSING_ARGUMENT,
                format!(
                    "{name} takes {takes} arguments, {given} given (arg_ptr[{given}] is NULL: the arguments end at the first NULL pointer)"
                ),
            ));
        }
        if a.flags & !SYSLET_FLAGS != 0 {
            return Err(fail(
                WEFT_ERR_SYSLET_BAD_FLAGS,
                format!(
                    "unknown flag bits {:#x} in flags {:#x} (only the SYSLET_* flags, {SYSLET_FLAGS:#x}, are defined)",
                    a.flags & !SYSLET_FLAGS,
                    a.flags
                ),
            ));
        }
        if a.flags & SYSLET_ASYNC != 0 && a.flags & SYSLET_SYNC != 0 {
            return Err(fail(
                WEFT_ERR_SYSLET_ASYNC_AND_SYNC,
                format!(
                    "SYSLET_ASYNC with SYSLET_SYNC (flags {:#x}): an atom cannot both go to a cachemiss thread at once and never go asynchronous",
                    a.flags
                ),
            ));
        }
        // Depth first, `next` before the skip target.
        if a.flags & SYSLET_SKIP_TO_NEXT_ON_STOP != 0 {
            todo.push((p.wrapping_add(1), Via::Skip(p)));
        }
        if !a.next.is_null() {
            todo.push((a.next.cast_const(), Via::Next(p)));
        }
    }
    Ok(())
}

/// Checks the syslet at `first` before it runs (see `syslet.h`). Returns 0, or the
/// code of the first problem found, with the atom at fault in `*bad_atom` and its index
/// from `first` in `*bad_index` (each if not NULL), and a message for
/// `weft_syslet_validate_error`.
///
/// # Safety
/// `bad_atom` and `bad_index` are NULL or valid for writing. `first` may be anything:
/// the atoms are read without trusting their addresses.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_validate(
    first: *const SysletUatom,
    bad_atom: *mut *const SysletUatom,
    bad_index: *mut isize,
) -> DWORD {
    if first.is_null() {
        remember(c"weft_syslet_validate: first is NULL".to_owned());
        return set_error(WEFT_ERR_INVALID_ARGUMENT);
    }
    let problem = match catch_unwind(|| validate(first)) {
        Ok(Ok(())) => return 0,
        Ok(Err(p)) => p,
        Err(_) => {
            remember(c"weft_syslet_validate: internal error (a bug in weft)".to_owned());
            return set_error(WEFT_ERR_INTERNAL);
        }
    };
    // SAFETY: each is NULL or valid for writing (the contract).
    unsafe {
        if !bad_atom.is_null() {
            bad_atom.write(problem.atom);
        }
        if !bad_index.is_null() {
            bad_index.write(index_of(first, problem.atom));
        }
    }
    let message = CString::new(problem.message.replace('\0', " "))
        .unwrap_or_else(|_| c"weft_syslet_validate failed".to_owned());
    remember(message);
    set_error(problem.code)
}

/// Keeps `m` as this thread's last validation message.
fn remember(m: CString) {
    let _ = VALIDATE_ERROR.try_with(|e| *e.borrow_mut() = m);
}

/// The message of the calling OS thread's last failed `weft_syslet_validate` ("no
/// error" before the first): which atom, and what is wrong with it.
///
/// # Safety
/// Always safe to call from C; the text must not be freed, and is valid until the
/// next `weft_syslet_validate` on this thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_syslet_validate_error() -> *const c_char {
    VALIDATE_ERROR
        .try_with(|m| m.borrow().as_ptr())
        .unwrap_or(c"weft_syslet_validate_error: called while this thread exits".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_layout() {
        use core::mem::{offset_of, size_of};
        assert_eq!(size_of::<WeftSysletCompletion>(), 24);
        assert_eq!(offset_of!(WeftSysletCompletion, atom), 0);
        assert_eq!(offset_of!(WeftSysletCompletion, ret), 8);
        assert_eq!(offset_of!(WeftSysletCompletion, handle), 16);
    }

    #[test]
    fn the_pipe_fallback_reads_good_atoms_and_refuses_bad_ones() {
        let (r, w) = make_pipe().unwrap();
        let good = SysletUatom {
            nr: 7,
            flags: 3,
            ..SysletUatom::default()
        };
        let mut a = SysletUatom::default();
        assert!(Reader::through_pipe(&r, &w, &good, &mut a));
        assert_eq!((a.nr, a.flags), (7, 3));
        // Address 8: never mapped.
        let bad = core::ptr::dangling::<SysletUatom>();
        assert!(!Reader::through_pipe(&r, &w, bad, &mut a));
        // Nothing left behind in the pipe: the next read is the next atom.
        assert!(Reader::through_pipe(&r, &w, &good, &mut a));
        assert_eq!(a.nr, 7);
    }

    #[test]
    fn index_of_counts_atoms() {
        let atoms = [SysletUatom::default(); 3];
        let f = atoms.as_ptr();
        assert_eq!(index_of(f, f.wrapping_add(2)), 2);
        assert_eq!(index_of(f.wrapping_add(2), f), -2);
        assert_eq!(
            index_of(f, f.cast::<u8>().wrapping_add(8).cast()),
            isize::MIN
        );
    }
}
