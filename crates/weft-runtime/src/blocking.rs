//! Running blocking code without stalling a worker.
//!
//! [`blocking`] sends a closure to a pool of OS threads (the threads I/O backend's
//! blocking pool: grown on demand, idle threads exit; see `io/threads.rs`) and parks
//! only the calling green thread until it returns. The closure must be `'static`: if the
//! runtime shuts down while the green thread waits, the green thread is unwound and the
//! closure still runs to its end on the pool, its result dropped.

use crate::io::{threads, NoPreempt};
use crate::park::{self, Unparker};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};

struct Cell<T> {
    done: AtomicBool,
    out: Mutex<Option<std::thread::Result<T>>>,
    waker: Unparker,
}

/// Runs `f` on a pool thread and returns its result, parking only the calling green
/// thread meanwhile (its worker runs other green threads). A panic in `f` is resumed
/// in the caller. Called outside a green thread, `f` simply runs on the calling thread.
///
/// ```
/// let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
/// let n = rt.block_on(|| weft_runtime::blocking(|| {
///     std::thread::sleep(std::time::Duration::from_millis(10)); // blocks a pool thread
///     42
/// }));
/// assert_eq!(n, 42);
/// ```
pub fn blocking<T, F>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if crate::worker::current_worker().is_none() {
        return f();
    }
    let cell = Arc::new(Cell {
        done: AtomicBool::new(false),
        out: Mutex::new(None),
        waker: Unparker::current(),
    });
    let c2 = cell.clone();
    {
        let _np = NoPreempt::new();
        threads::blocking_pool().execute(Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(f));
            *c2.out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            c2.done.store(true, Release);
            c2.waker.unpark();
        }));
    }
    while !cell.done.load(Acquire) {
        park::park();
    }
    let out = {
        let _np = NoPreempt::new();
        cell.out.lock().unwrap_or_else(|e| e.into_inner()).take()
    };
    match out.expect("a finished blocking job left its result") {
        Ok(v) => v,
        Err(p) => resume_unwind(p),
    }
}
