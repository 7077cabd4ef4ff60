//! libweft: the C library. Every C entry point is a `#[no_mangle]` function of the
//! `weft-capi` crate; linking that crate here makes this crate's `cdylib` export them
//! and its `staticlib` contain them, under the names C programs link against
//! (`libweft.so`, `libweft.a`).

pub use weft_capi::*;

// `pthread_create` and `pthread_getattr_np`, in front of the C library's (see the macro).
weft_capi::export_pthread_create!();
