//! What the I/O test files share: running a case on every backend this machine has.
#![allow(dead_code)] // each test file uses its own subset

use weft_runtime::{IoBackend, Runtime};

/// The backends this machine can run: the thread pool always, io_uring where the kernel
/// allows it (skipped with a note otherwise).
pub fn backends() -> Vec<IoBackend> {
    let mut v = vec![IoBackend::Threads];
    match Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Uring)
        .build()
    {
        Ok(_) => v.push(IoBackend::Uring),
        Err(e) => eprintln!("note: io_uring tests skipped: {e}"),
    }
    v
}

/// A runtime of one worker on backend `b`.
pub fn rt1(b: IoBackend) -> Runtime {
    Runtime::builder().workers(1).io_backend(b).build().unwrap()
}
