//! What the I/O test files share: running a case on every backend this machine has.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::{IoBackend, Runtime};

#[path = "../../../../tests/support/skip.rs"]
mod skip;
#[allow(unused_imports)] // each test file uses its own subset
pub use skip::{note, skip};

/// How long a test waits for something that must happen before it calls it a hang. Only
/// a broken runtime reaches it, however loaded the machine: tests check that things
/// happen and in which order, never how fast.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Waits until `done()` holds, checking every millisecond (a green thread parks, an OS
/// thread sleeps); fails naming `what` if it still does not hold after [`PATIENCE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < PATIENCE, "{what}: not after {PATIENCE:?}");
        weft_runtime::sleep(Duration::from_millis(1));
    }
}

/// The green thread `id` (its `JoinHandle::id`) as the fiber registry reports it; `None`
/// while the registry has no consistent entry for it.
pub fn fiber(id: u64) -> Option<weft_fiber::introspect::FiberInfo> {
    weft_fiber::introspect::read(std::process::id() as i32)
        .ok()?
        .fibers
        .into_iter()
        .find(|f| f.id == id)
}

/// From a green thread of a ONE-worker runtime: returns once the green thread `id` is
/// parked. It has run, and one of our yields did not let it run again: a runnable
/// thread of the same worker would have run before our yield returned.
pub fn wait_parked(id: u64) {
    let t0 = Instant::now();
    let mut last = None;
    loop {
        let now = fiber(id).map(|f| f.activations);
        if now.is_some_and(|a| a > 0) && now == last {
            return;
        }
        last = now;
        assert!(
            t0.elapsed() < PATIENCE,
            "green thread {id} did not park in {PATIENCE:?}"
        );
        weft_runtime::yield_now();
    }
}

/// Whether the descriptor `fd` has data to read now (a zero-timeout poll).
pub fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack; zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// How many turns [`ticks_during`]'s ticker must get for a test to call its worker free.
pub const TICKS: usize = 20;

/// Runs `work` on the calling green thread while another green thread on worker 0 (the
/// same one, in a one-worker runtime) counts its turns in `ticks` (one 1 ms sleep each);
/// returns `work`'s value and the turns counted while it ran. A `work` that blocks its
/// OS thread leaves the ticker no turn. The side that ends `work` (a peer writing, say)
/// waits for the turns with [`wait_for_ticks`] on a clone of `ticks`.
pub fn ticks_during<T>(ticks: Arc<AtomicUsize>, work: impl FnOnce() -> T) -> (T, usize) {
    let done = Arc::new(AtomicBool::new(false));
    let (t2, d2) = (ticks.clone(), done.clone());
    let ticker = weft_runtime::spawn_on(0, move || {
        while !d2.load(SeqCst) {
            t2.fetch_add(1, SeqCst);
            weft_runtime::sleep(Duration::from_millis(1));
        }
    });
    let out = work();
    let seen = ticks.load(SeqCst);
    done.store(true, SeqCst);
    ticker.join().unwrap();
    (out, seen)
}

/// For the other side of [`ticks_during`] (an OS thread): waits until the ticker has had
/// [`TICKS`] turns, or for [`PATIENCE`] (then the caller's check of the count fails).
pub fn wait_for_ticks(ticks: &AtomicUsize) {
    let t0 = Instant::now();
    while ticks.load(SeqCst) < TICKS && t0.elapsed() < PATIENCE {
        std::thread::sleep(Duration::from_millis(1));
    }
}

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
        Err(e) => {
            // Once per test binary: every test of it asks.
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                note(&format!(
                    "io_uring cannot run here ({e}): only the thread-pool backend was tested"
                ))
            });
        }
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
