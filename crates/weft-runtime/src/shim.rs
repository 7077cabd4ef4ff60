//! The atomics the message boxes use: std's, or loom's when the `loom` feature builds
//! the crate for model checking (tests/loom_msgbox.rs). Everything lock-free in
//! `msgbox` goes through here so that the code loom checks is the code that runs.

#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::fence;
#[cfg(feature = "loom")]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(feature = "loom")]
pub(crate) use loom::sync::Arc;

#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::fence;
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
#[cfg(not(feature = "loom"))]
pub(crate) use std::sync::Arc;

/// A value alone on its cache line(s), so two workers' hot fields never share one.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// An `UnsafeCell` with loom's closure API (so loom can check every access).
#[cfg(feature = "loom")]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(feature = "loom"))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(feature = "loom"))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Inside a busy-wait: a CPU hint, or a yield under loom (which must see progress).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(feature = "loom")]
    loom::thread::yield_now();
    #[cfg(not(feature = "loom"))]
    core::hint::spin_loop();
}
