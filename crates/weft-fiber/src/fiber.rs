//! Fiber records and the switch protocol.
//!
//! # Ownership: who may run a fiber
//!
//! A fiber runs on at most one OS thread at a time, and may run on a different thread
//! each time it is resumed. Its `state` word is the lock that makes this true on SMP:
//!
//! ```text
//!          CAS READY -> RUNNING (Acquire)            store READY (Release)
//!   READY ---------------------------> RUNNING -----------------------------> READY
//!          by the thread that will                   by the *next* context to run on
//!          switch into it                            the thread it just left, once its
//!                                                    registers are saved
//! ```
//!
//! The subtle step is the release. A fiber cannot mark itself READY before switching
//! away: between the store and the moment its registers are saved, another thread could
//! take it and resume it from a stale stack pointer. So `arch::switch` hands the
//! outgoing fiber to the other side, and the resumed side releases it before returning
//! (in assembly: a Release store of READY is a plain `mov` on x86). By then the outgoing
//! fiber's stack pointer is stored and its stack is no longer in use, and the Release
//! store publishes both to the next thread that acquires it.
//!
//! A fiber that should not become READY again leaves a note in its `exit` field before
//! its last switch: `EXIT_FINISHED` (its function returned or panicked) or
//! `EXIT_DELETE` (its handle was dropped while it ran; free it), and leaves through
//! `arch::switch_exiting`, whose resumed side hands it to [`release_exited`]. The common
//! path thus has no branch on the note at all.
//!
//! # Signal handlers
//!
//! `SwitchToFiber` may be called from a signal handler (fibers time-sliced by SIGALRM).
//! The path allocates nothing, takes no lock and touches only static TLS. A signal that
//! lands *inside* a switch on the same thread must not start another one (the thread's
//! current fiber would be half-updated), so `ThreadState::in_switch` is set around the
//! critical section and a switch attempted meanwhile fails with `Error::Interrupted`.
//!
//! # Statistics
//!
//! A fiber's statistics live in its slot of the shared-memory registry (`registry.rs`),
//! so `weft ps` can read them from another process. The switcher owns both fibers (the
//! outgoing one because it runs it, the incoming one because it has just acquired it),
//! so it updates their slots with plain relaxed loads and stores inside each slot's
//! seqlock, no read-modify-write; only failed activations, which any thread may count,
//! use `fetch_add`. One time-stamp read closes the outgoing fiber's slice and opens the
//! incoming one's.

use crate::arch;
use crate::clock;
use crate::error::Error;
use crate::fls::FlsStorage;
use crate::pool;
use crate::registry::{self, LabelText, Slot};
use crate::sanitizer;
use crate::stack::Stack;
use crate::thread::{self, ThreadState};
use crate::tls;
use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{compiler_fence, AtomicPtr, AtomicU32, AtomicU64, Ordering::*};
use std::any::Any;

pub(crate) const READY: u32 = 0;
pub(crate) const RUNNING: u32 = 1;
pub(crate) const FINISHED: u32 = 2;
/// The record is free (in the pool, `pool.rs`): no switch or delete can take it.
pub(crate) const FREED: u32 = 3;

pub(crate) const EXIT_NONE: u32 = 0;
pub(crate) const EXIT_FINISHED: u32 = 1;
pub(crate) const EXIT_DELETE: u32 = 2;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How a fiber starts.
pub(crate) enum Start {
    /// A converted thread: it runs on the thread's own stack and never "starts".
    Thread,
    /// A Windows start routine; when it returns, the thread running it exits.
    C {
        routine: unsafe extern "C" fn(*mut c_void),
    },
    /// A Rust closure (boxed at `data`); when it returns or panics, control goes back to
    /// the fiber that last switched to it. `drop` frees the closure if it never ran.
    Rust {
        data: *mut (),
        call: unsafe fn(*mut (), *mut FiberRecord),
        drop: unsafe fn(*mut ()),
    },
    /// Already started (the closure has been taken).
    Started,
}

/// Everything weft knows about one fiber. Records live in the pool (`pool.rs`); a
/// fiber handle names one by its index and generation.
#[repr(C)]
pub(crate) struct FiberRecord {
    // ---- the switch path ----
    /// The handle this record has issued, or `pool::NO_HANDLE`: what a handle is checked
    /// against (`pool.rs`).
    pub handle: AtomicU64,
    /// READY, RUNNING, FINISHED or FREED: see the module comment.
    pub state: AtomicU32,
    /// How many handles this record's slot has issued (`pool.rs`).
    pub generation: AtomicU32,
    /// Saved stack pointer while suspended.
    pub sp: UnsafeCell<*mut u8>,
    /// The OS thread running this fiber now (set by whoever switched into it).
    pub thread: AtomicPtr<ThreadState>,
    /// The fiber that last switched into this one (where a finished Rust fiber returns).
    pub resumer: UnsafeCell<*mut FiberRecord>,
    /// This fiber's statistics, in the shared-memory registry (`registry.rs`).
    pub slot: *mut Slot,
    pub id: u64,
    // ---- the rest ----
    pub param: *mut c_void,
    pub start: UnsafeCell<Start>,
    /// The fiber's own stack; None for a thread's record, whose frames are on the
    /// thread's own stack.
    pub stack: Option<Stack>,
    pub fls: AtomicPtr<FlsStorage>,
    pub panic: UnsafeCell<Option<Box<dyn Any + Send + 'static>>>,
    /// Note for the releasing side (EXIT_*); written only by the fiber itself. A fiber
    /// with a note leaves through `arch::switch_exiting`.
    pub exit: UnsafeCell<u32>,
    /// This record's slot in the pool.
    pub index: u32,
    /// Made by a scheduler (`RawFiber::spawn`: a weft-runtime green thread), which
    /// switches to it with `switch_to_owned` and frees it itself. The public API may
    /// only switch to it from the OS thread it last ran on (a user fiber inside the
    /// green thread switching back to it), and never deletes it: from anywhere else, it
    /// could race with the scheduler's acquire, which takes no lock.
    pub scheduled: bool,
    /// Made by the Rust API (`Fiber`): freed when its `Fiber` is dropped, so
    /// `DeleteFiber` and `ConvertFiberToThread` refuse it.
    pub rust_owned: bool,
    /// The thread whose own record this is (its `main` or `home`, `thread.rs`), or null:
    /// only that thread may free it while it lives.
    pub owner: AtomicPtr<ThreadState>,
    /// What AddressSanitizer is told about this fiber's stack at a switch
    /// (`sanitizer.rs`; empty unless weft is built with ASan).
    pub asan: sanitizer::FiberAsan,
}

/// Makes the pool slot `rec` a new fiber's record, without a handle yet (see
/// [`issue_handle`]): READY (RUNNING for a thread's record), with a fresh id and
/// registry slot.
///
/// # Safety
/// `rec` comes from `pool::alloc` and nothing else uses it: its previous record, if
/// any, was freed by [`destroy`], which left nothing in it to drop.
pub(crate) unsafe fn init(
    rec: *mut FiberRecord,
    start: Start,
    entry: usize,
    param: *mut c_void,
    stack: Option<Stack>,
    label: &LabelText<'_>,
) {
    let id = thread::take_id(&NEXT_ID);
    let slot = thread::take_slot();
    // SAFETY: a fresh slot is ours until the record is freed.
    unsafe {
        let sl = &*slot;
        // The label first: a reader that sees the new id in the slot finds the
        // label written for it.
        sl.label().write(id, label);
        sl.begin_write();
        sl.id.store(id, Relaxed);
        sl.activations.store(0, Relaxed);
        sl.deactivations.store(0, Relaxed);
        sl.run_ticks.store(0, Relaxed);
        sl.switched_in_at.store(0, Relaxed);
        sl.last_tid.store(0, Relaxed);
        sl.creator_tid.store(thread::gettid(), Relaxed);
        sl.entry.store(entry as u64, Relaxed);
        sl.failed_activations.store(0, Relaxed);
        let thread_fiber = matches!(start, Start::Thread);
        // A thread's record shows no stack, whichever stack its frames are on.
        let (base, size) = stack
            .as_ref()
            .filter(|_| !thread_fiber)
            .map_or((0, 0), |s| (s.guard().end as u64, s.usable_size() as u64));
        sl.stack_base.store(base, Relaxed);
        sl.stack_size.store(size, Relaxed);
        sl.flags.store(
            if thread_fiber {
                registry::FLAG_THREAD
            } else {
                0
            },
            Relaxed,
        );
        // A thread's own record is not shown until the thread converts (it may exist
        // only to hold the thread's FLS values).
        sl.state.store(
            if thread_fiber {
                registry::SLOT_FREE
            } else {
                registry::SLOT_READY
            },
            Relaxed,
        );
        sl.end_write();
    }
    // SAFETY: per the contract. The fields a stale handle may reach (`handle`, `state`,
    // `generation`: atomics) are stored, never overwritten wholesale; the others are
    // written in place, their previous values already taken out by `destroy`.
    unsafe {
        (*rec).handle.store(pool::NO_HANDLE, Relaxed);
        ptr::write(&raw mut (*rec).sp, UnsafeCell::new(ptr::null_mut()));
        (*rec).thread.store(ptr::null_mut(), Relaxed);
        ptr::write(&raw mut (*rec).resumer, UnsafeCell::new(ptr::null_mut()));
        ptr::write(&raw mut (*rec).slot, slot);
        ptr::write(&raw mut (*rec).id, id);
        ptr::write(&raw mut (*rec).param, param);
        let thread_fiber = matches!(start, Start::Thread);
        ptr::write(&raw mut (*rec).start, UnsafeCell::new(start));
        // A thread's record announces the stack its frames are on, which ASan knows.
        let own_stack = stack
            .as_ref()
            .filter(|_| !thread_fiber)
            .map(|s| (s.guard().end, s.top() as usize));
        ptr::write(&raw mut (*rec).asan, sanitizer::FiberAsan::new(own_stack));
        ptr::write(&raw mut (*rec).stack, stack);
        (*rec).fls.store(ptr::null_mut(), Relaxed);
        ptr::write(&raw mut (*rec).panic, UnsafeCell::new(None));
        ptr::write(&raw mut (*rec).exit, UnsafeCell::new(EXIT_NONE));
        ptr::write(&raw mut (*rec).index, pool::index_of(rec));
        ptr::write(&raw mut (*rec).scheduled, false);
        ptr::write(&raw mut (*rec).rust_owned, false);
        (*rec).owner.store(ptr::null_mut(), Relaxed);
        // Release: a switch that takes this record through an old handle of its slot
        // sees, once it owns it, that the handle no longer matches. A thread's record
        // is born RUNNING: its thread runs it.
        let state = if matches!(*(*rec).start.get(), Start::Thread) {
            RUNNING
        } else {
            READY
        };
        (*rec).state.store(state, Release);
    }
}

/// Gives `rec` a new handle (a new generation of its slot), which stops any previous
/// one from working, and returns it.
///
/// # Safety
/// `rec` is a live record the caller owns (running it, or making it).
pub(crate) unsafe fn issue_handle(rec: *mut FiberRecord) -> u64 {
    // SAFETY: per the contract.
    unsafe {
        let mut generation = (*rec).generation.load(Relaxed).wrapping_add(1);
        if generation == 0 {
            generation = 1;
        }
        (*rec).generation.store(generation, Relaxed);
        let h = (u64::from(generation) << 32) | u64::from((*rec).index);
        (*rec).handle.store(h, Relaxed);
        h
    }
}

/// Withdraws `rec`'s handle: from now on it is stale (`Error::StaleHandle`).
///
/// # Safety
/// `rec` is a live record.
pub(crate) unsafe fn revoke_handle(rec: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe { (*rec).handle.store(pool::NO_HANDLE, Relaxed) };
}

impl FiberRecord {
    /// The handle the Windows API knows this fiber by (`pool.rs`), or
    /// `pool::NO_HANDLE`.
    #[inline(always)]
    pub(crate) fn handle(&self) -> u64 {
        self.handle.load(Relaxed)
    }

    /// This fiber's statistics slot.
    #[inline(always)]
    pub(crate) fn slot(&self) -> &Slot {
        // SAFETY: the slot lives (mapped, never moved) as long as the record.
        unsafe { &*self.slot }
    }

    /// Whether this record's frames are on an OS thread's own stack (a thread's record
    /// that has not taken over a fiber's stack, nor a start stack of weft's): they go
    /// away when that thread ends.
    pub(crate) fn on_thread_stack(&self) -> bool {
        self.stack.is_none()
    }

    /// Whether this is a thread's own record (`thread.rs`), whichever stack its frames
    /// are on: its FLS storage exists from the start, as a thread's does on Windows.
    ///
    /// # Safety
    /// Called by the thread running this record (or owning it): `start` is written only
    /// there.
    pub(crate) unsafe fn is_thread_record(&self) -> bool {
        // SAFETY: per the contract, nothing writes `start` meanwhile.
        matches!(unsafe { &*self.start.get() }, Start::Thread)
    }
}

/// Creates a fiber that will start in `fiber_main` on `stack`, with its handle issued.
/// Returns the record, owned by the caller (freed by [`destroy`]), or the error and the
/// stack back.
pub(crate) fn create(
    start: Start,
    entry: usize,
    param: *mut c_void,
    stack: Stack,
    label: &LabelText<'_>,
) -> Result<*mut FiberRecord, (Error, Stack)> {
    let rec = match thread::take_record() {
        Ok(rec) => rec,
        Err(e) => return Err((e, stack)),
    };
    let top = stack.top();
    // SAFETY: a slot from the pool is ours; the stack is ours and unused, and the record
    // outlives every run of the fiber.
    unsafe {
        init(rec, start, entry, param, Some(stack), label);
        issue_handle(rec);
        *(*rec).sp.get() = arch::init_stack(top, rec, fiber_main, rec.cast());
    }
    Ok(rec)
}

/// As [`create`], for a scheduler's fiber (`FiberRecord::scheduled`) whose first frame
/// goes below `top` (inside `stack`: the bytes above are the caller's).
pub(crate) fn create_scheduled(
    start: Start,
    entry: usize,
    param: *mut c_void,
    stack: Stack,
    top: *mut u8,
    label: &LabelText<'_>,
) -> Result<*mut FiberRecord, (Error, Stack)> {
    let rec = match thread::take_record() {
        Ok(rec) => rec,
        Err(e) => return Err((e, stack)),
    };
    // SAFETY: as in `create`; `top` lies inside the stack, below the caller's bytes.
    unsafe {
        init(rec, start, entry, param, Some(stack), label);
        (*rec).scheduled = true;
        issue_handle(rec);
        *(*rec).sp.get() = arch::init_stack(top, rec, fiber_main, rec.cast());
    }
    Ok(rec)
}

/// Why a switch did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwitchFail {
    NotAFiber,
    Interrupted,
    Busy,
    Finished,
    /// The handle no longer names this record (it was deleted, and its slot reused,
    /// while the switch validated it).
    Stale,
}

impl SwitchFail {
    /// The Windows error code (no allocation: used on the signal-safe path).
    pub(crate) fn code(self) -> u32 {
        use crate::error::*;
        match self {
            SwitchFail::NotAFiber => ERROR_ALREADY_THREAD,
            SwitchFail::Interrupted | SwitchFail::Busy => ERROR_BUSY,
            SwitchFail::Finished | SwitchFail::Stale => ERROR_INVALID_HANDLE,
        }
    }

    pub(crate) fn into_error(self, to: *mut FiberRecord) -> Error {
        // SAFETY: `to` was a live record when the switch was attempted.
        let fiber = unsafe { (*to).id };
        match self {
            SwitchFail::NotAFiber => Error::NotAFiber,
            SwitchFail::Interrupted => Error::Interrupted,
            SwitchFail::Busy => Error::Busy { fiber },
            SwitchFail::Finished => Error::Finished { fiber },
            SwitchFail::Stale => Error::StaleHandle,
        }
    }
}

/// Switches from the calling thread's current fiber to `to`.
///
/// Returns, once the caller is resumed, the fiber that resumed it. Fails at once (and
/// counts a failed activation on `to`) if `to` is running, finished, or if the thread is
/// not a fiber. Switching to the current fiber is a counted no-op.
///
/// # Safety
/// `to` must be a live fiber record.
#[inline(always)]
pub(crate) unsafe fn switch_to(to: *mut FiberRecord) -> Result<*mut FiberRecord, SwitchFail> {
    // SAFETY: per the contract; `begin_switch` leaves us owning `to`.
    unsafe {
        match begin_switch::<false>(to, 0)? {
            None => Ok(to),
            Some(cur) => {
                sanitizer::before_switch(cur, to, false);
                let prev = arch::switch(cur, to);
                sanitizer::after_switch();
                Ok(prev)
            }
        }
    }
}

/// [`switch_to`] for a fiber that only the calling thread ever switches to while this
/// call runs (a scheduler's own fiber: a worker's green thread, switched to by its
/// worker alone). The checks and their failures are the same; `to` is acquired with a
/// plain load and store instead of a compare-exchange, which is sound because no other
/// thread competes for it. (A release by the thread that ran `to` before is ordered
/// before this call by whatever handed `to` to this thread: a queue, a message.)
///
/// # Safety
/// `to` must be a live fiber record, and no other thread may try to acquire it (switch
/// to it, delete it) until this call has returned.
#[inline(always)]
pub(crate) unsafe fn switch_to_owned(to: *mut FiberRecord) -> Result<*mut FiberRecord, SwitchFail> {
    // SAFETY: per the contract; `begin_switch` leaves us owning `to`.
    unsafe {
        match begin_switch::<true>(to, 0)? {
            None => Ok(to),
            Some(cur) => {
                sanitizer::before_switch(cur, to, false);
                let prev = arch::switch_ret(cur, to);
                sanitizer::after_switch();
                Ok(prev)
            }
        }
    }
}

/// [`switch_to_owned`] ending the way [`switch_to`] does, with an indirect jump to the
/// resumed fiber's return address instead of a `ret`: for two fibers that switch to
/// each other, each from a call site of its own, and go on without returning (a
/// same-worker IPC ping-pong, weft-runtime's `ipc_direct_switch`). A `ret` is predicted
/// from the return-stack buffer, whose top is always the *other* side's call site
/// there, so it would mispredict at every switch; the indirect jump's predictor learns
/// the alternation (two fibers' round trip: 54 ns through `ret`, 29 ns through the
/// jump, on a 2-CPU x86_64 VM; docs/benchmarks.md has the record).
///
/// # Safety
/// As [`switch_to_owned`].
#[inline(always)]
pub(crate) unsafe fn switch_to_owned_jump(
    to: *mut FiberRecord,
) -> Result<*mut FiberRecord, SwitchFail> {
    // SAFETY: per the contract; `begin_switch` leaves us owning `to`.
    unsafe {
        match begin_switch::<true>(to, 0)? {
            None => Ok(to),
            Some(cur) => {
                sanitizer::before_switch(cur, to, false);
                let prev = arch::switch_jump(cur, to);
                sanitizer::after_switch();
                Ok(prev)
            }
        }
    }
}

/// [`switch_to_owned_jump`] for a caller whose own state guarantees every check of
/// [`begin_switch`]: the calling thread runs a fiber other than `to`, is not inside a
/// switch, `to` is suspended (READY), and the running fiber has no exit note. Debug
/// builds assert them; release builds go straight to the acquire, the statistics and
/// the switch (a dozen loads and branches fewer a switch: weft-runtime's IPC direct
/// switch, whose target is a thread it parked itself). [`prepare_ready`] and
/// [`Prepared::switch_jump`] are its two halves, for a caller with work to do between.
///
/// # Safety
/// As [`switch_to_owned`], and the guarantees above.
#[inline(always)]
pub(crate) unsafe fn switch_to_ready_jump(to: *mut FiberRecord) -> *mut FiberRecord {
    // SAFETY: per the contract.
    unsafe { prepare_ready(to).switch_jump() }
}

/// The first half of [`switch_to_ready_jump`]: loads what the switch's bookkeeping
/// reads (the running fiber, both statistics slots and their sequence words, the
/// statistics mode) and changes nothing, so a caller may drop the result and not
/// switch.
///
/// Why in two halves: the time-stamp counter read that closes one fiber's slice and
/// opens the other's (`rdtsc`) waits, on the Intel machines of docs/benchmarks.md, for
/// every older instruction to complete, loads included. Loaded at the switch, the chain
/// thread -> running fiber -> slot -> sequence word is four dependent loads that it
/// waited for, at each switch. Loaded ahead, while the caller does other work, they are
/// done by then.
///
/// # Safety
/// As [`switch_to_ready_jump`]'s guarantees, which must still hold when
/// [`Prepared::switch_jump`] is called; until then this thread switches nowhere and
/// writes no statistics of the two fibers.
#[inline(always)]
pub(crate) unsafe fn prepare_ready(to: *mut FiberRecord) -> Prepared {
    // SAFETY: per the contract.
    unsafe {
        let thread = tls::thread();
        debug_assert!(!thread.is_null(), "not a fiber thread");
        let cur = (*thread).current;
        debug_assert!(
            !cur.is_null() && cur != to,
            "no running fiber, or `to` runs"
        );
        Prepared::load(thread, cur, to)
    }
}

/// What a switch from `cur` to `to` reads for its bookkeeping, loaded ahead of it (see
/// [`prepare_ready`]). The sequence words are copied: only their fibers' owner, this
/// thread, writes them.
pub(crate) struct Prepared {
    thread: *mut ThreadState,
    cur: *mut FiberRecord,
    to: *mut FiberRecord,
    mode: u8,
    cs: *const Slot,
    ts: *const Slot,
    cseq: u32,
    tseq: u32,
}

impl Prepared {
    /// # Safety
    /// `thread` is this thread's state, `cur` its running fiber, `to` a live record
    /// this thread owns.
    #[inline(always)]
    unsafe fn load(thread: *mut ThreadState, cur: *mut FiberRecord, to: *mut FiberRecord) -> Self {
        // SAFETY: per the contract.
        unsafe {
            let mut p = Prepared::load_cur(thread, cur, to);
            p.tseq = (*p.ts).seq.load(Relaxed);
            p
        }
    }

    /// [`load`](Self::load) but for `to`'s sequence word (left 0), which only `to`'s
    /// owner may read: for the public switch, before it acquires `to`.
    ///
    /// # Safety
    /// `thread` is this thread's state, `cur` its running fiber, `to` a live record.
    #[inline(always)]
    unsafe fn load_cur(
        thread: *mut ThreadState,
        cur: *mut FiberRecord,
        to: *mut FiberRecord,
    ) -> Self {
        // SAFETY: per the contract.
        unsafe {
            let cs = (*cur).slot;
            Prepared {
                thread,
                cur,
                to,
                mode: clock::statistics_mode(),
                cs,
                ts: (*to).slot,
                cseq: (*cs).seq.load(Relaxed),
                tseq: 0,
            }
        }
    }

    /// The second half of [`switch_to_ready_jump`]: acquires `to`, records the switch
    /// and switches. Returns, once the caller is resumed, the fiber that resumed it.
    ///
    /// # Safety
    /// As [`prepare_ready`], which made this.
    #[inline(always)]
    pub(crate) unsafe fn switch_jump(self) -> *mut FiberRecord {
        // SAFETY: per the contract.
        unsafe {
            let (thread, cur, to) = (self.thread, self.cur, self.to);
            debug_assert_eq!((*thread).current, cur, "switched since prepared");
            debug_assert!(!(*thread).in_switch.load(Relaxed), "inside a switch");
            debug_assert_eq!((*to).state.load(Relaxed), READY, "`to` is not suspended");
            debug_assert_eq!(
                *(*cur).exit.get(),
                EXIT_NONE,
                "the running fiber is leaving"
            );
            // The acquire of `begin_switch::<true>`: only this thread acquires `to`.
            (*to).state.store(RUNNING, Relaxed);
            self.record();
            sanitizer::before_switch(cur, to, false);
            let prev = arch::switch_jump(cur, to);
            sanitizer::after_switch();
            prev
        }
    }

    /// The bookkeeping of a switch from `cur` to `to`, which this thread now owns.
    ///
    /// # Safety
    /// The thread owns both fibers, and nothing changed what `load` read.
    #[inline(always)]
    unsafe fn record(self) {
        // SAFETY: per the contract.
        unsafe {
            (*self.thread).in_switch.store(true, Relaxed);
            compiler_fence(SeqCst);
            if self.mode != clock::NONE {
                let (cs, ts) = (&*self.cs, &*self.ts);
                debug_assert_eq!(cs.seq.load(Relaxed), self.cseq);
                debug_assert_eq!(ts.seq.load(Relaxed), self.tseq);
                cs.begin_write_from(self.cseq);
                ts.begin_write_from(self.tseq);
                // Run time: one time-stamp read closes `cur`'s slice and opens `to`'s.
                // A slice start of 0 means "not timed" (accounting was off when it
                // began). Read inside the seqlocks: read before them, a preemption
                // between the read and the update would let a reader extend the open
                // slice past the time it is then closed at, and see run time go
                // backwards.
                let now = if self.mode == clock::FULL {
                    clock::ticks()
                } else {
                    0
                };
                self.update_slots(now, now);
                cs.end_write_from(self.cseq);
                ts.end_write_from(self.tseq);
            }
            self.install();
        }
    }

    /// The statistics of the switch, inside both seqlocks: `cur`'s slice closes at
    /// `now`, `to`'s opens at `to_start`.
    ///
    /// # Safety
    /// As [`record`](Self::record), both seqlocks open.
    #[inline(always)]
    unsafe fn update_slots(&self, now: u64, to_start: u64) {
        // SAFETY: per the contract.
        unsafe {
            let (cs, ts) = (&*self.cs, &*self.ts);
            let start = cs.switched_in_at.load(Relaxed);
            if now != 0 && start != 0 {
                cs.run_ticks.store(
                    cs.run_ticks.load(Relaxed) + now.wrapping_sub(start),
                    Relaxed,
                );
            }
            Slot::bump(&cs.deactivations);
            cs.state.store(registry::SLOT_READY, Relaxed);
            ts.switched_in_at.store(to_start, Relaxed);
            Slot::bump(&ts.activations);
            ts.last_tid.store((*self.thread).tid, Relaxed);
            ts.state.store(registry::SLOT_RUNNING, Relaxed);
        }
    }

    /// `to` becomes the thread's running fiber (the end of every switch's bookkeeping).
    ///
    /// # Safety
    /// As [`record`](Self::record).
    #[inline(always)]
    unsafe fn install(self) {
        // SAFETY: per the contract.
        unsafe {
            let t = &*self.to;
            t.thread.store(self.thread, Relaxed);
            *t.resumer.get() = self.cur;
            (*self.thread).current = self.to;
            compiler_fence(SeqCst);
        }
    }

    /// The public switch's bookkeeping, first half, before it acquires `to` (see
    /// [`begin_switch`]): marks the thread as switching, opens `cur`'s seqlock and
    /// reads the clock inside it (0: run time not kept). If the acquire then fails,
    /// [`abandon`](Self::abandon) undoes it; else
    /// [`record_acquired`](Self::record_acquired) finishes.
    ///
    /// # Safety
    /// The thread runs `cur`, and nothing changed what `load` read about it.
    #[inline(always)]
    unsafe fn open_cur(&self) -> u64 {
        // SAFETY: per the contract.
        unsafe {
            // First, as in `record`: a signal handler that would switch (a preemption)
            // must see the switch in progress before any slot is touched.
            (*self.thread).in_switch.store(true, Relaxed);
            compiler_fence(SeqCst);
            if self.mode == clock::NONE {
                return 0;
            }
            debug_assert_eq!((*self.cs).seq.load(Relaxed), self.cseq);
            (*self.cs).begin_write_from(self.cseq);
            if self.mode == clock::FULL {
                clock::ticks()
            } else {
                0
            }
        }
    }

    /// Undoes [`open_cur`](Self::open_cur) for a switch that does not happen: `cur`'s
    /// seqlock closes with nothing changed, the thread is no longer switching.
    ///
    /// # Safety
    /// As [`open_cur`](Self::open_cur), which was called.
    #[inline(always)]
    unsafe fn abandon(&self) {
        // SAFETY: per the contract.
        unsafe {
            if self.mode != clock::NONE {
                (*self.cs).end_write_from(self.cseq);
            }
            compiler_fence(SeqCst);
            (*self.thread).in_switch.store(false, Relaxed);
        }
    }

    /// The public switch's bookkeeping, second half, once `to` is acquired, with the
    /// clock reading `now` that [`open_cur`](Self::open_cur) took.
    ///
    /// `cur`'s slice closes at `now`, and its slot keeps that time; `to`'s opens at
    /// `now`, or at the end of its last slice if that is later: read before the
    /// acquire, `now` may precede the moment another thread let `to` go, closing its
    /// slice at a later reading, and the two slices must not overlap. (A READY slot's
    /// `switched_in_at` is the end of its last slice if a public switch closed it, else
    /// its start: either way no later than its end.)
    ///
    /// # Safety
    /// The thread owns both fibers, `open_cur` was called, and `tseq` was read once `to`
    /// was acquired.
    #[inline(always)]
    unsafe fn record_acquired(self, now: u64) {
        // SAFETY: per the contract.
        unsafe {
            if self.mode != clock::NONE {
                let (cs, ts) = (&*self.cs, &*self.ts);
                debug_assert_eq!(ts.seq.load(Relaxed), self.tseq);
                ts.begin_write_from(self.tseq);
                let to_start = if now == 0 {
                    0
                } else {
                    now.max(ts.switched_in_at.load(Relaxed))
                };
                self.update_slots(now, to_start);
                cs.switched_in_at.store(now, Relaxed);
                cs.end_write_from(self.cseq);
                ts.end_write_from(self.tseq);
            }
            self.install();
        }
    }
}

/// A switch to `to` that found it in state `s` (not READY): counted as a failed
/// activation, and why.
///
/// # Safety
/// As for [`count_failed`].
#[cold]
unsafe fn failed_acquire(to: *mut FiberRecord, s: u32, expect: u64) -> SwitchFail {
    // SAFETY: per the contract.
    if !unsafe { count_failed(to, expect) } {
        return SwitchFail::Stale;
    }
    if s == FINISHED {
        SwitchFail::Finished
    } else {
        SwitchFail::Busy
    }
}

/// Counts a failed activation of `to`, unless `to` is no longer the fiber `expect`
/// names (see [`begin_switch`]; 0: no check), in which case it touches nothing and
/// returns false.
///
/// # Safety
/// `to` must be a live fiber record, or (with `expect` nonzero) a pool slot.
#[cold]
unsafe fn count_failed(to: *mut FiberRecord, expect: u64) -> bool {
    // SAFETY: per the contract; `handle` is an atomic of a slot that stays mapped.
    unsafe {
        if expect != 0 && (*to).handle.load(Relaxed) != expect {
            return false;
        }
        (*to).slot().failed_activations.fetch_add(1, Relaxed);
    }
    true
}

/// A switch acquired `to` through a handle that, meanwhile, stopped naming it (see
/// [`begin_switch`]): gives `to` back and undoes the switch's bookkeeping.
///
/// # Safety
/// As for `Prepared::abandon`; this thread has just acquired `to` (READY -> RUNNING).
#[cold]
unsafe fn lost_to_delete(p: &Prepared, to: *mut FiberRecord) -> SwitchFail {
    // SAFETY: per the contract.
    unsafe {
        (*to).state.store(READY, Release);
        p.abandon();
    }
    SwitchFail::Stale
}

/// Everything a switch does before the context switch itself: the checks, acquiring
/// `to`, the statistics, and marking the thread as switching. `Ok(Some(cur))` means the
/// caller must now call `arch::switch(cur, to)` and nothing else; `Ok(None)` means `to`
/// is already running here (a counted no-op).
///
/// `expect`: 0, or the handle `to` was found through (`SwitchToFiber`): once `to` is
/// acquired, its handle is checked again, so that a switch that lost a race with
/// `DeleteFiber` and a `CreateFiber` reusing the record gives the record back and fails
/// (`Stale`) instead of running an unrelated fiber.
///
/// # Safety
/// `to` must be a live fiber record, or (with `expect` nonzero) a pool slot.
/// `OWNER`: the caller is the only thread that may acquire `to` (see
/// [`switch_to_owned`]).
#[inline(always)]
pub(crate) unsafe fn begin_switch<const OWNER: bool>(
    to: *mut FiberRecord,
    expect: u64,
) -> Result<Option<*mut FiberRecord>, SwitchFail> {
    let thread = tls::thread();
    // SAFETY: a non-null thread pointer is this thread's live state; `to` is live.
    unsafe {
        let cur = if thread.is_null() {
            ptr::null_mut()
        } else {
            (*thread).current
        };
        if cur.is_null() {
            return Err(SwitchFail::NotAFiber);
        }
        if cur == to {
            let sl = (*cur).slot();
            sl.begin_write();
            Slot::bump(&sl.activations);
            Slot::bump(&sl.deactivations);
            sl.end_write();
            return Ok(None);
        }
        if (*thread).in_switch.load(Relaxed) || sanitizer::switching(thread) {
            count_failed(to, expect);
            return Err(SwitchFail::Interrupted);
        }
        if !OWNER && (*to).scheduled && (*to).thread.load(Relaxed) != thread {
            // A scheduler's fiber, from a thread it is not on (see `scheduled`).
            count_failed(to, expect);
            return Err(SwitchFail::Busy);
        }
        if OWNER {
            // The caller is the only thread that ever acquires `to` (see
            // `switch_to_owned`): a check and a plain store do what the compare-exchange
            // does, without its locked instruction (~8 ns: it drains the store buffer
            // this switch has just filled).
            let s = (*to).state.load(Relaxed);
            if s != READY {
                return Err(failed_acquire(to, s, 0));
            }
            (*to).state.store(RUNNING, Relaxed);
            prepare_acquired(thread, cur, to);
        } else {
            // The clock is read before the compare-exchange, inside `cur`'s seqlock
            // only: read after it, the read waited for the locked instruction, which
            // waits for the store buffer to drain (~7 ns a switch, `weft bench
            // fibers`: 26-27 -> 20 ns). `to`'s sequence word is read once `to` is ours.
            let mut p = Prepared::load_cur(thread, cur, to);
            let now = p.open_cur();
            if let Err(s) = (*to)
                .state
                .compare_exchange(READY, RUNNING, Acquire, Relaxed)
            {
                p.abandon();
                return Err(failed_acquire(to, s, expect));
            }
            if expect != 0 && (*to).handle.load(Relaxed) != expect {
                return Err(lost_to_delete(&p, to));
            }
            p.tseq = (*p.ts).seq.load(Relaxed);
            p.record_acquired(now);
        }
        if *(*cur).exit.get() != EXIT_NONE {
            // The running fiber dropped its own handle: it is freed as it leaves.
            sanitizer::before_switch(cur, to, true);
            if OWNER {
                arch::switch_exiting_ret(cur, to);
            }
            arch::switch_exiting(cur, to);
        }
        Ok(Some(cur))
    }
}

/// The bookkeeping of a switch from `cur` to `to`, which this thread now owns (state
/// RUNNING by our CAS): [`Prepared::record`], loaded on the spot.
///
/// # Safety
/// `thread` is the calling thread's state, `cur` its running fiber, `to` a fiber this
/// thread has just acquired.
#[inline(always)]
unsafe fn prepare_acquired(thread: *mut ThreadState, cur: *mut FiberRecord, to: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe { Prepared::load(thread, cur, to).record() }
}

/// The release done by `arch::switch_exiting`'s resumed side: `prev` left an exit note.
///
/// # Safety
/// Called only by `arch::switch_exiting` on the resumed side: `me` runs on this thread and
/// `prev` is off its stack and still owned by us.
pub(crate) unsafe extern "C" fn release_exited(me: *mut FiberRecord, prev: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe {
        if *(*prev).exit.get() == EXIT_DELETE {
            destroy(prev, (*me).thread.load(Relaxed));
        } else {
            mark_finished(prev);
        }
    }
}

/// Marks a fiber that will never run again as FINISHED (ownership word and slot).
///
/// # Safety
/// The caller owns `rec` (it is off its stack and nobody else can take it).
pub(crate) unsafe fn mark_finished(rec: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe {
        let sl = (*rec).slot();
        sl.begin_write();
        sl.state.store(registry::SLOT_FINISHED, Relaxed);
        sl.end_write();
        (*rec).state.store(FINISHED, Release);
    }
}

/// Where every new fiber starts (called by the arch entry trampoline).
unsafe extern "C" fn fiber_main(prev: *mut c_void, me: *mut c_void) -> ! {
    let me = me.cast::<FiberRecord>();
    // SAFETY: `me` is the record `create` set up; it stays alive while the fiber runs.
    // The switch that started it was announced to ASan (`sanitizer.rs`).
    unsafe {
        sanitizer::after_switch();
        let _ = prev; // already released by `arch::switch`
        match core::mem::replace(&mut *(*me).start.get(), Start::Started) {
            Start::C { routine } => {
                routine((*me).param);
                thread::exit_from_returned_fiber(me)
            }
            Start::Rust { data, call, .. } => {
                call(data, me);
                finish(me)
            }
            Start::Thread | Start::Started => unreachable!("fiber {} started twice", (*me).id),
        }
    }
}

/// Ends a Rust fiber whose closure has returned (or panicked): it becomes FINISHED and
/// control goes to the fiber that last switched to it, or failing that to the thread's
/// own fiber.
unsafe fn finish(me: *mut FiberRecord) -> ! {
    // SAFETY: `me` is running on this thread; the thread state is live.
    unsafe {
        *(*me).exit.get() = if *(*me).exit.get() == EXIT_DELETE {
            EXIT_DELETE
        } else {
            EXIT_FINISHED
        };
        let thread = (*me).thread.load(Relaxed);
        let resumer = *(*me).resumer.get();
        let target = [resumer, (*thread).main].into_iter().find(|&f| {
            !f.is_null()
                && (*f)
                    .state
                    .compare_exchange(READY, RUNNING, Acquire, Relaxed)
                    .is_ok()
        });
        let Some(target) = target else {
            thread::die(format_args!(
                "fiber {} finished, but neither the fiber that last switched to it nor this \
                 thread's own fiber can run now (both are running elsewhere); keep one of \
                 them free to return to, or switch away before the closure ends",
                (*me).id
            ))
        };
        prepare_acquired(thread, me, target);
        sanitizer::before_switch(me, target, true);
        arch::switch_exiting(me, target)
    }
}

/// `arch::switch` announced to AddressSanitizer (`sanitizer.rs`), for `SwitchToFiber`
/// to tail-jump into when weft is built with ASan; the same as `arch::switch` otherwise.
///
/// # Safety
/// As for `arch::switch`.
#[cfg(weft_asan)]
pub(crate) unsafe extern "C" fn public_switch(
    cur: *mut FiberRecord,
    to: *mut FiberRecord,
) -> *mut FiberRecord {
    // SAFETY: per the contract.
    unsafe {
        sanitizer::before_switch(cur, to, false);
        let prev = arch::switch(cur, to);
        sanitizer::after_switch();
        prev
    }
}

#[cfg(not(weft_asan))]
pub(crate) use arch::switch as public_switch;

/// Frees a fiber that no thread runs (state acquired by the caller, or finished and
/// unreachable): runs its FLS callbacks, drops a closure that never ran, returns its
/// stack to `thread`'s cache (or the global one), withdraws its handle and gives its
/// record back to the pool.
///
/// # Safety
/// Nothing runs on `rec` and nothing will; `thread` is null or the calling thread's state.
pub(crate) unsafe fn destroy(rec: *mut FiberRecord, thread: *mut ThreadState) {
    // SAFETY: per the contract, we own `rec` exclusively. Its fields are taken out in
    // place (the record stays a pool slot, which stale handles may still reach).
    unsafe {
        crate::fls::run_callbacks_and_free(rec);
        if let Start::Rust { data, drop, .. } =
            core::mem::replace(&mut *(*rec).start.get(), Start::Started)
        {
            drop(data);
        }
        revoke_handle(rec);
        (*rec).state.store(FREED, Release);
        drop((*(*rec).panic.get()).take());
        let slot = (*rec).slot;
        registry::mark_free(slot);
        let stack = (*rec).stack.take();
        match thread.as_mut() {
            Some(t) => {
                if t.slots.len() < thread::THREAD_CACHE_SLOTS {
                    t.slots.push(slot);
                } else {
                    registry::free_slot(slot);
                }
                crate::pool::free(rec, Some(&mut t.records), thread::THREAD_CACHE_SLOTS);
            }
            None => {
                registry::free_slot(slot);
                crate::pool::free(rec, None, 0);
            }
        }
        if let Some(stack) = stack {
            let local = if thread.is_null() {
                None
            } else {
                Some(&mut (*thread).stacks)
            };
            crate::stack::release(local, stack);
        }
    }
}
