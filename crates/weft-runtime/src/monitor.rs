//! The monitor: one OS thread per runtime that watches the workers from outside.
//!
//! Every millisecond it reads each worker's switch counter. A worker whose counter has
//! not moved for a [`SLICE`](crate::worker::preempt::SLICE) while a green thread holds
//! it is preempted: its `preempt_requested` flag is set and its OS thread gets the
//! preemption signal (`worker/preempt.rs` decides there whether to switch or only leave
//! the flag). If that signal did not switch the thread out (it landed in libc, say),
//! the next tick signals again, until the thread switches. While every worker is idle,
//! or asleep in a system call it declared ([`in_blocking_call`](crate::in_blocking_call):
//! a log's `fdatasync`, where a signal could not preempt it anyway), the monitor
//! checks ten times less often, instead of waking every millisecond of the call; such
//! a worker starts a fresh slice when the call returns.
//!
//! A worker held for a tick while never-run green threads wait in its spawn deque also
//! gets a sleeping worker woken, which steals them (the part of Go's hand-off that our
//! "started threads stay" rule allows).
//!
//! The monitor only reads atomics and sends signals: it never touches a worker's
//! queues, so it needs no lock and cannot stall a worker.

use crate::worker::{preempt, Shared};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(1);
const IDLE_TICK: Duration = Duration::from_millis(10);

/// Starts the monitor of `shared`; it ends when the runtime shuts down.
pub(crate) fn start(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    preempt::install();
    std::thread::Builder::new()
        .name("weft-monitor".into())
        .stack_size(64 * 1024)
        .spawn(move || run(&shared))
}

fn run(shared: &Shared) {
    let n = shared.workers.len();
    let mut last = vec![u64::MAX; n];
    let mut since = vec![Instant::now(); n];
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // A sleeping worker other than `i`, woken to steal `i`'s never-run threads.
    let hand_off = |i: usize| {
        if let Some(o) = (0..n).find(|&o| o != i && shared.remote.is_sleeping(o)) {
            shared.remote.wake(o);
        }
    };
    while !shared.shutdown.load(Acquire) {
        let now = Instant::now();
        let mut any_running = false;
        for (i, w) in shared.workers.iter().enumerate() {
            let sw = w.progress.switches.load(Relaxed);
            if sw != last[i] {
                last[i] = sw;
                since[i] = now;
            }
            if !w.progress.running.load(Relaxed) {
                continue;
            }
            let queued = || !(w.stealer.is_empty() && w.next.is_empty());
            if w.progress.blocked.load(Relaxed) {
                // Asleep in a system call on the worker (`in_blocking_call`): nothing
                // to preempt, and the slice starts again when it returns. Only the
                // hand-off of never-run threads keeps the monitor ticking for it.
                since[i] = now;
                if queued() {
                    any_running = true;
                    hand_off(i);
                }
                continue;
            }
            any_running = true;
            let stuck = now.duration_since(since[i]);
            // Hand-off of what may move: a worker held for a tick (in a long computation
            // or a blocking system call) with never-run threads queued gets a sleeping
            // worker woken to steal them. Started threads stay (docs/runtime.md).
            if stuck >= TICK && queued() {
                hand_off(i);
            }
            if stuck >= preempt::SLICE {
                w.progress.preempt_requested.store(true, Relaxed);
                let tid = w.tid.load(Relaxed);
                if tid > 0 {
                    // SAFETY: signals a thread of this process by its id; the handler
                    // is installed (`start`).
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, preempt::SIGNAL) };
                }
                // If the handler could not switch (the thread was in libc or the vDSO,
                // or inside the runtime), the counter will not have moved at the next
                // tick: signal again then, not a whole slice later.
                since[i] = now - preempt::SLICE + TICK;
            }
        }
        std::thread::sleep(if any_running { TICK } else { IDLE_TICK });
    }
}
