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

/// Raises this process's limit of open descriptors to `want` if it can (the soft limit
/// up to the hard one; as root the hard one too); returns the limit now.
pub fn raise_nofile(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur >= want {
            return r.rlim_cur;
        }
        let up = libc::rlimit {
            rlim_cur: want,
            rlim_max: r.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &up) != 0 {
            let soft = libc::rlimit {
                rlim_cur: r.rlim_max.min(want),
                rlim_max: r.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}

/// How many connections of a test that wants `want` fit in the descriptor limit (each
/// takes `per` descriptors, plus a margin); says so when fewer.
pub fn connections_that_fit(want: usize, per: usize) -> usize {
    let limit = raise_nofile((want * per + 256) as u64) as usize;
    let n = want.min(limit.saturating_sub(256) / per);
    if n < want {
        note(&format!(
            "RLIMIT_NOFILE is {limit} and cannot be raised: {n} connections instead of {want}"
        ));
    }
    n
}
