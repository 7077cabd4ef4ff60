//! Per-fiber statistics: the fields `weft fs` shows in `<pid>/fibers/<id>`, kept for
//! every fiber from its creation. The switch updates them (see `fiber.rs`); this module
//! reads them into a snapshot. A snapshot taken while the fiber runs elsewhere is
//! approximate (fields are read one by one), never torn within a field.

use crate::clock;
use crate::fiber::{FiberRecord, READY, RUNNING};
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
    /// Whether it was ready, running or finished when the snapshot was taken.
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
    // SAFETY: per the contract; every field read here is atomic.
    let r = unsafe { &*rec };
    // Our own slot: its owner (the running thread, or none) is not stuck mid-update.
    let s = crate::introspect::read_slot(r.slot(), clock::ticks()).unwrap_or_default();
    FiberStats {
        id: s.id,
        state: match r.state.load(Relaxed) {
            READY => FiberState::Ready,
            RUNNING => FiberState::Running,
            _ => FiberState::Finished,
        },
        entry: s.entry as usize,
        creator_tid: s.creator_tid,
        last_tid: s.last_tid,
        activations: s.activations,
        failed_activations: s.failed_activations,
        run_time: clock::ticks_to_duration(s.run_ticks),
        stack_size: s.stack_size as usize,
    }
}
