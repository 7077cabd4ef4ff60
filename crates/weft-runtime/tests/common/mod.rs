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

/// Runs this test binary again under valgrind's memcheck, every test but `skip` (the
/// calling test itself, at least), one test thread, with the thread I/O backend and no
/// preemption (io_uring and signal-driven switching are not ground valgrind models).
/// Fails on any memcheck error; says so and returns when valgrind is not installed.
pub fn memcheck_this_binary(skip: &[&str]) {
    if std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("valgrind not installed: memcheck run NOT done");
        return;
    }
    let mut cmd = std::process::Command::new("valgrind");
    cmd.args(["--error-exitcode=9", "-q"])
        .arg(std::env::current_exe().unwrap())
        .arg("--test-threads=1")
        .env("WEFT_IO_BACKEND", "threads")
        .env("WEFT_PREEMPT", "off");
    for s in skip {
        cmd.args(["--skip", s]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memcheck found errors ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("test result: ok"),
        "the tests did not run under memcheck:\n{stdout}"
    );
}
