//! libweft-hook: libweft (every C entry point of `weft-capi`: fibers, green threads,
//! IPC, syslets) together with the system-call layer (the crate `weft-hook`: `read`,
//! `write`, `accept`, `poll`, `nanosleep`, ... park only the calling green thread).
//!
//! A C program links it instead of libweft (`-lweft-hook`), or a program linked with
//! libweft that cannot be relinked runs with `LD_PRELOAD=libweft-hook.so`: the
//! preloaded library's definitions come first, so the program's green threads and the
//! layer are this library's. See docs/hook.md.

pub use hook::stats;
pub use weft_capi::*;

// `pthread_create` and `pthread_getattr_np`, in front of the C library's, as libweft has it.
weft_capi::export_pthread_create!();
