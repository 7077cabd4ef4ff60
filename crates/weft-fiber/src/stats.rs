//! Per-fiber statistics: the fields the seed's `/proc/<pid>/fibers/<id>` shows, kept for
//! every fiber from its creation. The switch updates them (see `fiber.rs`); this module
//! reads them into a snapshot. A snapshot taken while the fiber runs elsewhere is
//! approximate (fields are read one by one), never torn within a field.

use crate::clock;
use crate::fiber::{FiberRecord, FINISHED, READY, RUNNING};
use core::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Whether a fiber is running, ready to run, or done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiberState {
    /// Suspended; any thread may switch to it.
    Ready,
    /// Running on some thread now.
    Running,
    /// Its function returned or panicked (Rust fibers, or a C fiber whose return ended
    /// its thread); it cannot run again.
    Finished,
}

/// A snapshot of one fiber's statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiberStats {
    /// Process-unique id, never reused.
    pub id: u64,
    pub state: FiberState,
    /// Address of the start routine (0 for a converted thread).
    pub entry: usize,
    /// Kernel thread id of the thread that created (or converted) it.
    pub creator_tid: i32,
    /// Kernel thread id of the thread it last ran on (0 if it never ran).
    pub last_tid: i32,
    /// Successful switches into it (switching to oneself counts).
    pub activations: u64,
    /// Switches into it that failed (it was running elsewhere, or finished).
    pub failed_activations: u64,
    /// Total time it has run.
    pub run_time: Duration,
    /// Usable stack bytes (0 for a converted thread, which uses the thread's stack).
    pub stack_size: usize,
}

/// Reads `rec`'s statistics.
///
/// # Safety
/// `rec` must be a live record.
pub(crate) unsafe fn snapshot(rec: *const FiberRecord) -> FiberStats {
    // SAFETY: per the contract; every mutable field read here is atomic.
    let r = unsafe { &*rec };
    let state = match r.state.load(Relaxed) {
        READY => FiberState::Ready,
        RUNNING => FiberState::Running,
        FINISHED => FiberState::Finished,
        _ => FiberState::Finished,
    };
    let mut ticks = r.run_ticks.load(Relaxed);
    if state == FiberState::Running
        && r.activations.load(Relaxed) + u64::from(r.is_thread_fiber()) > 0
    {
        ticks += clock::ticks().saturating_sub(r.switched_in_at.load(Relaxed));
    }
    FiberStats {
        id: r.id,
        state,
        entry: r.entry,
        creator_tid: r.creator_tid,
        last_tid: r.last_tid.load(Relaxed),
        activations: r.activations.load(Relaxed),
        failed_activations: r.failed_activations.load(Relaxed),
        run_time: clock::ticks_to_duration(ticks),
        stack_size: r.stack_size,
    }
}
