//! The idiomatic Rust face of the fiber core: [`Fiber`], [`ThreadFiber`], [`FlsKey`].
//!
//! ```
//! use std::sync::Arc;
//! use weft_fiber::{convert_thread, Fiber};
//!
//! let main = Arc::new(convert_thread().unwrap());
//! let back = main.clone();
//! let f = Fiber::new(move || {
//!     // ... work ...
//!     back.switch_to().unwrap(); // symmetric switch back to the thread's fiber
//!     // ... more work when resumed; returning goes back to whoever resumed us
//! })
//! .unwrap();
//! f.switch_to().unwrap(); // runs until the fiber switches back
//! f.switch_to().unwrap(); // runs it to the end
//! assert!(f.is_finished());
//! ```
//!
//! Unlike a Windows start routine, a Rust fiber's closure may return: the fiber becomes
//! finished and control goes back to the fiber that last switched to it (whose
//! `switch_to` returns `Ok`). A panic inside the closure is caught at the fiber's
//! boundary (it never unwinds into foreign frames); it finishes the fiber in the same way
//! and that `switch_to` returns `Err(Error::Panicked(payload))`.
//!
//! A fiber may be switched to from any thread while it is not running, so it carries its
//! stack between OS threads. Values on that stack that are tied to one OS thread (a
//! `MutexGuard` of a pthread mutex, a reference into a `thread_local!`) must not be held
//! across a `switch_to` that might resume on another thread.

use crate::error::Error;
use crate::fiber::{self, FiberRecord, Start, FINISHED, READY, RUNNING};
use crate::registry::LabelText;
use crate::stack::{self, Stack};
use crate::stats::{self, FiberStats};
use crate::{fls, thread, tls};
use core::ffi::c_void;
use core::ptr::NonNull;
use core::sync::atomic::Ordering::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Makes the calling thread a fiber, so it can switch to other fibers and they back to it.
pub fn convert_thread() -> Result<ThreadFiber, Error> {
    let rec = thread::convert(core::ptr::null_mut())?;
    Ok(ThreadFiber {
        rec: NonNull::new(rec).expect("convert returned null"),
    })
}

/// Names the calling fiber (a green thread, a fiber, or a converted thread), as `weft
/// ps`, `weft top` and `weft fs` show it; `""` removes the name. A name longer than 48
/// bytes is shown cut, ending in `...`. Fails with `NotAFiber` if the calling thread is
/// not a fiber.
pub fn set_name(name: &str) -> Result<(), Error> {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's live state; its current fiber runs
    // here (this call), so this thread owns that fiber's slot and label.
    unsafe {
        if t.is_null() || (*t).current.is_null() {
            return Err(Error::NotAFiber);
        }
        (*(*t).current).slot().label().set_name(name);
    }
    Ok(())
}

/// The fiber a thread became with [`convert_thread`]. Dropping it on that thread while it
/// runs turns the thread back into a plain thread (`ConvertFiberToThread`).
#[derive(Debug)]
pub struct ThreadFiber {
    rec: NonNull<FiberRecord>,
}

// SAFETY: the record is shared through atomics; switching is arbitrated by its state.
unsafe impl Send for ThreadFiber {}
// SAFETY: as above.
unsafe impl Sync for ThreadFiber {}

impl ThreadFiber {
    /// Switches to this fiber (from another fiber). See [`Fiber::switch_to`].
    pub fn switch_to(&self) -> Result<(), Error> {
        // SAFETY: the record lives as long as this handle.
        unsafe { switch_to(self.rec.as_ptr()) }
    }
    /// This fiber's statistics.
    pub fn stats(&self) -> FiberStats {
        // SAFETY: live record.
        unsafe { stats::snapshot(self.rec.as_ptr()) }
    }
    /// This fiber's id.
    pub fn id(&self) -> u64 {
        // SAFETY: live record.
        unsafe { (*self.rec.as_ptr()).id }
    }
    /// The handle the Windows API uses for this fiber.
    pub fn as_raw(&self) -> *mut c_void {
        // SAFETY: live record.
        unsafe { (*self.rec.as_ptr()).handle() as *mut c_void }
    }

    /// The record (for `RawFiber::of_thread`).
    pub(crate) fn record(&self) -> NonNull<FiberRecord> {
        self.rec
    }
}

impl Drop for ThreadFiber {
    fn drop(&mut self) {
        let t = tls::thread();
        // SAFETY: reads this thread's state.
        let mine = !t.is_null() && unsafe { (*t).current } == self.rec.as_ptr();
        if mine {
            if let Err(e) = thread::convert_back() {
                eprintln!("weft: ThreadFiber dropped but its thread could not convert back ({e}); it stays a fiber");
            }
        } else {
            eprintln!(
                "weft: ThreadFiber {} dropped while it does not run on this thread; it stays a fiber until its thread ends",
                self.id()
            );
        }
    }
}

/// A fiber running a Rust closure on its own stack. Dropping the handle deletes the fiber.
#[derive(Debug)]
pub struct Fiber {
    rec: NonNull<FiberRecord>,
}

// SAFETY: the record is shared through atomics; switching and deletion are arbitrated
// by its state word, and the closure is `Send`.
unsafe impl Send for Fiber {}
// SAFETY: as above: `switch_to(&self)` from two threads at once lets exactly one win.
unsafe impl Sync for Fiber {}

/// Options for a new fiber.
#[derive(Debug, Clone)]
pub struct Builder {
    stack_size: usize,
    name: String,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            stack_size: crate::stack::DEFAULT_STACK_SIZE,
            name: String::new(),
        }
    }
}

impl Builder {
    /// Usable stack bytes (rounded up to pages; at least 16 KiB). Default 1 MiB, reserved
    /// lazily: only the pages the fiber touches use memory.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }

    /// A name for the fiber, shown by `weft ps`, `weft top` and `weft fs` (default
    /// none). A name longer than 48 bytes is shown cut, ending in `...`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Creates the fiber; it starts running `f` on its first `switch_to`. The caller's
    /// source location and `f`'s type name are recorded for `weft ps`.
    #[track_caller]
    pub fn spawn<F: FnOnce() + Send + 'static>(self, f: F) -> Result<Fiber, Error> {
        unsafe fn call<F: FnOnce()>(data: *mut (), me: *mut FiberRecord) {
            // SAFETY: `data` is the Box<F> made in `spawn`, taken exactly once.
            let f = unsafe { Box::from_raw(data.cast::<F>()) };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                // SAFETY: `me` is the running fiber; only it writes `panic` while running.
                unsafe { *(*me).panic.get() = Some(payload) };
            }
        }
        unsafe fn drop_box<F>(data: *mut ()) {
            // SAFETY: the never-run Box<F> made in `spawn`.
            drop(unsafe { Box::from_raw(data.cast::<F>()) });
        }
        let t = thread::ensure();
        let size = Stack::round_size(self.stack_size);
        // SAFETY: `t` is this thread's state.
        let stack =
            stack::acquire(Some(unsafe { &mut (*t).stacks }), size).map_err(Error::OutOfMemory)?;
        let data = Box::into_raw(Box::new(f)).cast::<()>();
        let start = Start::Rust {
            data,
            call: call::<F>,
            drop: drop_box::<F>,
        };
        let rec = match fiber::create(
            start,
            call::<F> as *const () as usize,
            core::ptr::null_mut(),
            stack,
            &LabelText {
                name: &self.name,
                function: core::any::type_name::<F>(),
                location: Some(core::panic::Location::caller()),
            },
        ) {
            Ok(rec) => rec,
            Err((e, stack)) => {
                // SAFETY: the closure was never run; `t` is this thread's state.
                unsafe {
                    drop_box::<F>(data);
                    stack::release(Some(&mut (*t).stacks), stack);
                }
                return Err(e);
            }
        };
        // SAFETY: a fresh record, not yet shared.
        unsafe { (*rec).rust_owned = true };
        Ok(Fiber {
            rec: NonNull::new(rec).expect("create returned null"),
        })
    }
}

impl Fiber {
    /// Creates a fiber with the default stack that will run `f`.
    #[track_caller]
    pub fn new<F: FnOnce() + Send + 'static>(f: F) -> Result<Fiber, Error> {
        Builder::default().spawn(f)
    }

    /// Options for a new fiber (stack size).
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Suspends the calling fiber and runs this one, until some fiber switches back to
    /// the caller (or this one finishes and returns to it).
    ///
    /// Fails at once, without switching, if the calling thread is not a fiber
    /// (`NotAFiber`), if this fiber runs on another thread (`Busy`) or has finished
    /// (`Finished`). Returns `Err(Panicked)` if this fiber panicked and so came back.
    pub fn switch_to(&self) -> Result<(), Error> {
        // SAFETY: the record lives as long as this handle.
        unsafe { switch_to(self.rec.as_ptr()) }
    }

    /// True once the closure has returned or panicked.
    pub fn is_finished(&self) -> bool {
        // SAFETY: live record.
        unsafe { (*self.rec.as_ptr()).state.load(Acquire) == FINISHED }
    }

    /// This fiber's statistics.
    pub fn stats(&self) -> FiberStats {
        // SAFETY: live record.
        unsafe { stats::snapshot(self.rec.as_ptr()) }
    }

    /// This fiber's process-unique id.
    pub fn id(&self) -> u64 {
        // SAFETY: live record.
        unsafe { (*self.rec.as_ptr()).id }
    }

    /// The handle the Windows API uses for this fiber (valid while `self` lives).
    pub fn as_raw(&self) -> *mut c_void {
        // SAFETY: live record.
        unsafe { (*self.rec.as_ptr()).handle() as *mut c_void }
    }
}

impl Drop for Fiber {
    /// Deletes the fiber. If it is suspended mid-closure, its stack is freed without
    /// unwinding it: values still live on that stack are leaked, as with `mem::forget`.
    /// If it is running on this thread (a fiber dropping its own handle), it is freed
    /// when it next switches away. If it is running on another thread, this waits until
    /// it switches away.
    fn drop(&mut self) {
        let r = self.rec.as_ptr();
        let t = tls::thread();
        // SAFETY: `t` is null or this thread's state; `r` is live until destroyed here.
        unsafe {
            if !t.is_null() && (*t).current == r {
                *(*r).exit.get() = fiber::EXIT_DELETE;
                return;
            }
            while take_for_delete(r).is_err() {
                std::thread::yield_now();
            }
            fiber::destroy(r, t);
        }
    }
}

/// Takes a fiber that is not running, for deletion; returns the state it was in.
pub(crate) fn take_for_delete(r: *mut FiberRecord) -> Result<u32, Error> {
    // SAFETY: `r` is a pool slot (records stay mapped); `state` is an atomic.
    let st = unsafe { &(*r).state };
    for from in [READY, FINISHED] {
        if st.compare_exchange(from, RUNNING, Acquire, Relaxed).is_ok() {
            return Ok(from);
        }
    }
    // SAFETY: as above.
    Err(Error::Busy {
        fiber: unsafe { (*r).id },
    })
}

/// The switch for the Rust API: errors as `Error`, a panic of the target delivered.
unsafe fn switch_to(to: *mut FiberRecord) -> Result<(), Error> {
    // SAFETY: `to` is live (borrowed through its handle).
    unsafe {
        match fiber::switch_to(to) {
            Ok(prev) => {
                if prev == to && (*to).state.load(Acquire) == FINISHED {
                    if let Some(p) = (*(*to).panic.get()).take() {
                        return Err(Error::Panicked(p));
                    }
                }
                Ok(())
            }
            Err(e) => Err(e.into_error(to)),
        }
    }
}

/// The id of the fiber running on this thread, if the thread is a fiber.
pub fn current_id() -> Option<u64> {
    let t = tls::thread();
    // SAFETY: a non-null pointer is this thread's state; its current fiber is live.
    unsafe {
        if t.is_null() || (*t).current.is_null() {
            None
        } else {
            Some((*(*t).current).id)
        }
    }
}

/// A fiber-local storage slot: each fiber sees its own value, NULL until set.
#[derive(Debug)]
pub struct FlsKey {
    index: u32,
}

impl FlsKey {
    /// Allocates a slot. `callback` runs for a fiber's non-null value when the fiber is
    /// deleted, when its thread exits, or when the key is dropped.
    pub fn new(callback: Option<fls::FlsCallback>) -> Result<FlsKey, Error> {
        Ok(FlsKey {
            index: fls::alloc(callback)?,
        })
    }
    /// The running fiber's value (NULL if never set).
    #[inline]
    pub fn get(&self) -> *mut c_void {
        fls::get(self.index).unwrap_or(core::ptr::null_mut())
    }
    /// Sets the running fiber's value.
    pub fn set(&self, value: *mut c_void) {
        fls::set(self.index, value).expect("an FlsKey's index stays allocated while the key lives")
    }
    /// The index, for the Windows API (`FlsGetValue(index)`).
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl Drop for FlsKey {
    fn drop(&mut self) {
        let _ = fls::free(self.index);
    }
}
