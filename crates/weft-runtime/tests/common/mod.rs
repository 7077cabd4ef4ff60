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

/// Runs this test binary again under valgrind's memcheck, with `valgrind_args` (beside
/// `--error-exitcode=9 -q --fair-sched=yes`) and then `test_args`, the thread I/O
/// backend and no preemption (io_uring and signal-driven switching are not ground
/// valgrind models). Valgrind runs one thread at a time; with its default, unfair lock
/// a thread that never blocks (a worker in a same-worker IPC ping-pong, which makes no
/// system call) could take it back at the end of every time slice, starving the
/// threads it waits for: `io_completes_beside_a_local_ping_pong` failed 2 runs in 7
/// (its read never completed in 20 s) and runs took 8-270 s. Fair scheduling hands the
/// lock round.
/// Fails on any memcheck error, or if the run's output lacks `ran` (the sign the tests
/// ran). Says so and returns when valgrind is not installed.
pub fn run_under_memcheck(valgrind_args: &[&str], test_args: &[&str], ran: &str) {
    if std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("valgrind not installed: memcheck run NOT done");
        return;
    }
    let out = std::process::Command::new("valgrind")
        .args(["--error-exitcode=9", "-q", "--fair-sched=yes"])
        .args(valgrind_args)
        .arg(std::env::current_exe().unwrap())
        .args(test_args)
        .env("WEFT_IO_BACKEND", "threads")
        .env("WEFT_PREEMPT", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{test_args:?}: memcheck found errors ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(ran),
        "{test_args:?}: the tests did not run under memcheck:\n{stdout}"
    );
}

/// Every test of this binary but `skip` (the calling test itself, at least) under
/// memcheck, in one process ([`run_under_memcheck`]).
pub fn memcheck_this_binary(skip: &[&str]) {
    let mut args = vec!["--test-threads=1"];
    for s in skip {
        args.extend(["--skip", s]);
    }
    run_under_memcheck(&[], &args, "test result: ok");
}

/// Counts its drops (in the counter it shares): a test that a thread's stack was
/// unwound holds one on that stack.
pub struct Flag(pub std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Flag {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}
