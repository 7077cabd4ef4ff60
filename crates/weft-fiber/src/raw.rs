//! The low-level face of the fiber core, for the runtime built on it (weft-runtime).
//!
//! [`RawFiber`] is a copyable handle with no ownership rules of its own: the layer above
//! decides who may switch to a fiber and when it is freed. It exists so a scheduler can
//! keep fibers in its own queues and let a finished green thread free itself *as it
//! leaves* ([`RawFiber::exit_to`]), which the owning [`Fiber`](crate::Fiber) handle
//! cannot express.
//!
//! The contract of a raw fiber's closure: it must not return. It ends by calling
//! [`RawFiber::exit_to`] with the next fiber to run, after dropping everything it owns
//! (what is still on its stack then is freed without being dropped). If it returns
//! anyway, the fiber core's rule for returning Rust fibers applies (control goes back
//! to the fiber that last switched to it) and the record is then leaked.
//!
//! Switching and the statistics are exactly those of the public API: a green thread is
//! a fiber, so `weft ps` shows it, its activations and its run time.

use crate::error::Error;
use crate::fiber::{self, FiberRecord, Start};
use crate::registry::LabelText;
use crate::stack::{self, Stack};
use crate::{thread, tls};
use core::ptr::NonNull;

/// What `weft ps`, `weft top` and `weft fs` show about a new fiber besides its
/// statistics (see [`RawFiber::spawn_with`]). Empty fields are shown as unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpawnInfo<'a> {
    /// A name for people (`""`: none); cut to 48 bytes.
    pub name: &'a str,
    /// The function the fiber runs, as `std::any::type_name` spells it (`""`: readers
    /// show the entry point's symbol instead).
    pub function: &'static str,
    /// Where the fiber was spawned.
    pub location: Option<&'static core::panic::Location<'static>>,
    /// The entry point address readers resolve to a symbol, for a fiber that runs a
    /// foreign function (a C green thread's start routine); 0: the fiber's own.
    pub entry: usize,
}

/// A fiber handle without ownership (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFiber(NonNull<FiberRecord>);

// SAFETY: a record is shared through atomics; who may switch is the caller's contract.
unsafe impl Send for RawFiber {}
// SAFETY: as above.
unsafe impl Sync for RawFiber {}

impl RawFiber {
    /// Creates a fiber with a stack of `stack_size` usable bytes (0: the default) that
    /// will run `f` on its first switch. `f` must end with [`RawFiber::exit_to`]. The
    /// caller's source location and `f`'s type name are recorded for `weft ps`.
    #[track_caller]
    pub fn spawn<F: FnOnce() + Send + 'static>(stack_size: usize, f: F) -> Result<RawFiber, Error> {
        let info = SpawnInfo {
            function: core::any::type_name::<F>(),
            location: Some(core::panic::Location::caller()),
            ..SpawnInfo::default()
        };
        Self::spawn_with(stack_size, &info, f)
    }

    /// [`spawn`](Self::spawn), with what `weft ps` shows about the fiber given by the
    /// caller (a scheduler names the function its user gave it, not its own wrapper).
    pub fn spawn_with<F: FnOnce() + Send + 'static>(
        stack_size: usize,
        info: &SpawnInfo<'_>,
        f: F,
    ) -> Result<RawFiber, Error> {
        unsafe fn call<F: FnOnce()>(data: *mut (), _me: *mut FiberRecord) {
            // SAFETY: `data` is the closure written at the top of this fiber's stack by
            // `spawn`, read exactly once (moved onto the frame below before it runs).
            let f = unsafe { core::ptr::read(data.cast::<F>()) };
            f();
        }
        unsafe fn drop_in_place<F>(data: *mut ()) {
            // SAFETY: the never-run closure written by `spawn`; the stack is still
            // mapped when `destroy` calls this.
            unsafe { core::ptr::drop_in_place(data.cast::<F>()) };
        }
        let t = thread::ensure();
        let size = Stack::round_size(stack_size);
        // SAFETY: `t` is this thread's state.
        let stack =
            stack::acquire(Some(unsafe { &mut (*t).stacks }), size).map_err(Error::OutOfMemory)?;
        // The closure lives at the very top of the fiber's own stack, above its first
        // frame: no heap allocation, and the page is touched anyway.
        let align = core::mem::align_of::<F>().max(64);
        let room = core::mem::size_of::<F>().div_ceil(align) * align;
        assert!(
            room <= stack.usable_size() / 4,
            "a green thread's closure of {} bytes does not fit on its {}-byte stack: box \
             the large captures",
            core::mem::size_of::<F>(),
            stack.usable_size()
        );
        let data = (stack.top() as usize - room) & !(align - 1);
        // SAFETY: `data` is inside the fresh stack (we own it), aligned for F.
        unsafe { core::ptr::write(data as *mut F, f) };
        let start = Start::Rust {
            data: data as *mut (),
            call: call::<F>,
            drop: drop_in_place::<F>,
        };
        let entry = match info.entry {
            0 => call::<F> as *const () as usize,
            e => e,
        };
        let rec = match fiber::create_scheduled(
            start,
            entry,
            core::ptr::null_mut(),
            stack,
            data as *mut u8,
            &LabelText {
                name: info.name,
                function: info.function,
                location: info.location,
            },
        ) {
            Ok(rec) => rec,
            Err((e, stack)) => {
                // SAFETY: the closure was written at `data` and never run; `t` is this
                // thread's state.
                unsafe {
                    core::ptr::drop_in_place(data as *mut F);
                    stack::release(Some(&mut (*t).stacks), stack);
                }
                return Err(e);
            }
        };
        Ok(RawFiber(NonNull::new(rec).expect("create returned null")))
    }

    /// The handle of a thread's fiber (from [`crate::convert_thread`]).
    pub fn of_thread(t: &crate::ThreadFiber) -> RawFiber {
        RawFiber(t.record())
    }

    /// The fiber running on this thread, if the thread is a fiber.
    #[inline]
    pub fn current() -> Option<RawFiber> {
        let t = tls::thread();
        // SAFETY: a non-null pointer is this thread's state.
        unsafe {
            if t.is_null() {
                None
            } else {
                NonNull::new((*t).current).map(RawFiber)
            }
        }
    }

    /// Switches from the running fiber to this one; returns when some fiber switches
    /// back. Fails without switching if this fiber is running or finished, or the
    /// thread is not a fiber, or (as `SwitchToFiber` does for a raw fiber) if the calling
    /// thread is not the one this fiber last ran on: a raw fiber belongs to its
    /// scheduler, which switches to it with [`switch_to_owned`](Self::switch_to_owned).
    ///
    /// # Safety
    /// The fiber must be live (not yet freed by [`RawFiber::exit_to`] or
    /// [`RawFiber::delete`]).
    #[inline]
    pub unsafe fn switch_to(self) -> Result<(), Error> {
        // SAFETY: per the contract.
        unsafe {
            fiber::switch_to(self.0.as_ptr())
                .map(|_| ())
                .map_err(|e| e.into_error(self.0.as_ptr()))
        }
    }

    /// [`switch_to`](Self::switch_to) for a scheduler switching to one of its own fibers:
    /// the same checks and statistics, but the fiber is acquired without a locked
    /// instruction (about 8 ns less a switch), which is sound only because no other
    /// thread competes for it.
    ///
    /// # Safety
    /// As [`switch_to`](Self::switch_to); and no other thread may switch to this fiber
    /// or delete it while this call runs (weft-runtime: a green thread is switched to by
    /// its own worker only).
    #[inline]
    pub unsafe fn switch_to_owned(self) -> Result<(), Error> {
        // SAFETY: per the contract.
        unsafe {
            fiber::switch_to_owned(self.0.as_ptr())
                .map(|_| ())
                .map_err(|e| e.into_error(self.0.as_ptr()))
        }
    }

    /// [`switch_to_owned`](Self::switch_to_owned) for two fibers that switch to each
    /// other from call sites of their own and go on from there without returning (a
    /// ping-pong): the switch ends with an indirect jump, as the public switch does,
    /// instead of a `ret`, which would mispredict at every switch there (see
    /// `fiber::switch_to_owned_jump`). A scheduler switching from one call site should
    /// keep `switch_to_owned`.
    ///
    /// # Safety
    /// As [`switch_to_owned`](Self::switch_to_owned).
    #[inline]
    pub unsafe fn switch_to_owned_jump(self) -> Result<(), Error> {
        // SAFETY: per the contract.
        unsafe {
            fiber::switch_to_owned_jump(self.0.as_ptr())
                .map(|_| ())
                .map_err(|e| e.into_error(self.0.as_ptr()))
        }
    }

    /// [`switch_to_owned_jump`](Self::switch_to_owned_jump) without its checks, for a
    /// scheduler whose own state guarantees that they pass (debug builds assert them).
    ///
    /// # Safety
    /// As [`switch_to_owned`](Self::switch_to_owned), and: the calling OS thread runs a
    /// fiber other than this one and is not inside a switch (a signal handler that
    /// interrupted one), this fiber is suspended (not running, not finished), and the
    /// running fiber is not being deleted.
    #[inline]
    pub unsafe fn switch_to_ready_jump(self) {
        // SAFETY: per the contract.
        unsafe { fiber::switch_to_ready_jump(self.0.as_ptr()) };
    }

    /// [`switch_to_ready_jump`](Self::switch_to_ready_jump) in two halves: this one
    /// loads what the switch will read and changes nothing (drop the result to not
    /// switch); [`ReadySwitch::switch`] does the switch. A scheduler with other work
    /// to do before the switch calls this first: the switch's time-stamp read then no
    /// longer waits for those loads (see `fiber::prepare_ready`).
    ///
    /// # Safety
    /// The calling OS thread runs a fiber other than this one. Until the switch, it
    /// switches nowhere else.
    #[inline(always)]
    pub unsafe fn prepare_ready_jump(self) -> ReadySwitch {
        // SAFETY: per the contract.
        ReadySwitch(unsafe { fiber::prepare_ready(self.0.as_ptr()) })
    }

    /// Ends the running fiber and switches to this one. The running fiber (which must
    /// have been made by [`RawFiber::spawn`]) is freed by the fiber that runs next, once
    /// it is off its stack: its stack goes back to the cache, its registry slot is
    /// freed. Values still on its stack are not dropped.
    ///
    /// If the switch cannot happen (this fiber is running elsewhere or finished), the
    /// process is aborted with a message: there is nowhere to go back to.
    ///
    /// # Safety
    /// This fiber must be live; the caller's fiber must be a raw fiber that nothing will
    /// switch to again.
    pub unsafe fn exit_to(self) -> ! {
        // SAFETY: per the contract.
        unsafe { self.exit_to_inner::<false>() }
    }

    /// [`exit_to`](Self::exit_to) to a fiber acquired as by
    /// [`switch_to_owned`](Self::switch_to_owned).
    ///
    /// # Safety
    /// The contracts of both.
    pub unsafe fn exit_to_owned(self) -> ! {
        // SAFETY: per the contract.
        unsafe { self.exit_to_inner::<true>() }
    }

    unsafe fn exit_to_inner<const OWNER: bool>(self) -> ! {
        let t = tls::thread();
        // SAFETY: per the contract, the current fiber is ours to end.
        unsafe {
            let cur = (*t).current;
            *(*cur).exit.get() = fiber::EXIT_DELETE;
            let done = if OWNER {
                fiber::switch_to_owned(self.0.as_ptr())
            } else {
                fiber::switch_to(self.0.as_ptr())
            };
            match done {
                Ok(_) => unreachable!("an exiting fiber was resumed"),
                Err(e) => thread::die(format_args!(
                    "fiber {} could not exit to fiber {}: {}",
                    (*cur).id,
                    (*self.0.as_ptr()).id,
                    e.into_error(self.0.as_ptr())
                )),
            }
        }
    }

    /// Frees a fiber that is not running (never started, or suspended: its stack is
    /// freed without unwinding it).
    ///
    /// # Safety
    /// The fiber must be live and not running, and nothing may use the handle after.
    pub unsafe fn delete(self) {
        // SAFETY: per the contract.
        unsafe {
            if crate::api::take_for_delete(self.0.as_ptr()).is_err() {
                thread::die(format_args!(
                    "RawFiber::delete: fiber {} is running",
                    (*self.0.as_ptr()).id
                ));
            }
            fiber::destroy(self.0.as_ptr(), tls::thread());
        }
    }

    /// This fiber's process-unique id (as `weft ps` shows it).
    pub fn id(self) -> u64 {
        // SAFETY: live record (caller's contract for every handle use).
        unsafe { (*self.0.as_ptr()).id }
    }

    /// This fiber's statistics.
    pub fn stats(self) -> crate::FiberStats {
        // SAFETY: live record.
        unsafe { crate::stats::snapshot(self.0.as_ptr()) }
    }
}

/// The layer above's per-OS-thread word (weft-runtime: the worker this thread runs).
/// Read through the fiber core's never-cached TLS access, so it is safe to read after a
/// switch (unlike a `thread_local!` whose address the compiler may have kept).
#[inline(always)]
pub fn thread_word() -> *mut core::ffi::c_void {
    tls::user_word()
}

/// Sets [`thread_word`] for the calling OS thread.
#[inline(always)]
pub fn set_thread_word(p: *mut core::ffi::c_void) {
    tls::set_user_word(p)
}

/// A switch to a fiber, loaded by [`RawFiber::prepare_ready_jump`] and not yet done.
/// Not `Send`: it belongs to the thread that prepared it.
pub struct ReadySwitch(fiber::Prepared);

impl ReadySwitch {
    /// Does the switch: [`RawFiber::switch_to_ready_jump`]. Returns once the caller's
    /// fiber runs again.
    ///
    /// # Safety
    /// As [`RawFiber::switch_to_ready_jump`]: the guarantees it asks for hold now, and
    /// the calling thread runs the fiber it ran when this was prepared.
    #[inline(always)]
    pub unsafe fn switch(self) {
        // SAFETY: per the contract.
        unsafe { self.0.switch_jump() };
    }
}
