//! What the test files of the layer share: the runtime tests' helpers (patience,
//! backends, skips), and a few of their own.
#![allow(dead_code)] // each test file uses its own subset

use weft_runtime::{IoBackend, Runtime};

#[path = "../../../weft-runtime/tests/common/mod.rs"]
mod runtime_common;
#[allow(unused_imports)]
pub use runtime_common::{backends, note, skip, wait_until, PATIENCE};

/// A runtime of `workers` workers on backend `b`.
pub fn rt(b: IoBackend, workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .io_backend(b)
        .build()
        .unwrap()
}

/// A pipe (read end, write end), close-on-exec.
pub fn pipe() -> (i32, i32) {
    let mut p = [0; 2];
    // SAFETY: pipe2 into a local array.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (p[0], p[1])
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
