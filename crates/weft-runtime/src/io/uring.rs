//! The io_uring backend: one ring per worker (see `io/mod.rs` for the semantics).
//!
//! - **Wake-ups.** The worker's doorbell eventfd is registered with the ring
//!   (`IORING_REGISTER_EVENTFD`): every completion makes it readable, so a worker
//!   sleeping in `poll()` on it wakes. A worker about to sleep first submits
//!   ([`Ring::submit`]) and spins a little, watching [`Ring::has_completions`] (the CQ,
//!   and the flag that says completions wait for a syscall to run their task work), so
//!   none sits unreaped through a sleep.
//! - **Batching.** [`Ring::push`] only writes SQEs into the shared SQ; the syscall
//!   (`io_uring_enter`) happens in [`Ring::poll`] (the worker's `poll_events`, run before
//!   each sleep and every few dozen switches), in [`Ring::submit`] before a sleep, or
//!   when the SQ is full. A burst of green threads that each start one operation costs
//!   one syscall.
//! - **Completions.** An entry's `user_data` is an `Arc<Slot>` turned into a raw
//!   pointer (one count, held by the ring); 0 marks entries nobody waits for (closes,
//!   cancels, linked timeouts). Reaping first copies the CQEs out under the ring's
//!   borrow, then completes the slots: completing wakes green threads and dropping a
//!   slot may close a descriptor, which pushes a new SQE on this same ring.
//! - **Exit.** Dropping the ring (the worker ends) waits up to 2 s for the operations
//!   still in flight (cancelled ones, whose green threads were unwound at shutdown), and
//!   leaks the ring and their slots if some never complete.

use super::Slot;
use io_uring::{opcode, squeue, types, IoUring};
use std::cell::{Cell, RefCell};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SQ_ENTRIES: u32 = 256;
/// `IORING_ENTER_GETEVENTS` (the io-uring crate keeps its constants private).
const ENTER_GETEVENTS: u32 = 1;
/// Room for many operations in flight (the kernel keeps overflowing completions too).
const CQ_ENTRIES: u32 = 4096;

/// Whether this process may use io_uring with every operation the runtime needs; the
/// reason if not.
pub(crate) fn probe() -> Result<(), String> {
    let ring = match IoUring::new(8) {
        Ok(r) => r,
        Err(e) => {
            let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            return Err(match sysctl.as_str() {
                "1" | "2" => format!("kernel.io_uring_disabled={sysctl}: io_uring_setup: {e}"),
                _ => format!("io_uring_setup: {e}"),
            });
        }
    };
    let p = ring.params();
    if !p.is_feature_nodrop() || !p.is_feature_rw_cur_pos() {
        return Err("the kernel's io_uring is too old (needs NODROP and RW_CUR_POS, 5.6+)".into());
    }
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|e| format!("IORING_REGISTER_PROBE: {e}"))?;
    let needed = [
        (opcode::Read::CODE, "READ"),
        (opcode::Write::CODE, "WRITE"),
        (opcode::OpenAt::CODE, "OPENAT"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::Fsync::CODE, "FSYNC"),
        (opcode::Accept::CODE, "ACCEPT"),
        (opcode::Connect::CODE, "CONNECT"),
        (opcode::Send::CODE, "SEND"),
        (opcode::Recv::CODE, "RECV"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
        (opcode::LinkTimeout::CODE, "LINK_TIMEOUT"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
    ];
    for (code, name) in needed {
        if !probe.is_supported(code) {
            return Err(format!("the kernel lacks IORING_OP_{name}"));
        }
    }
    Ok(())
}

/// A worker's ring. Used only on its worker's OS thread, with preemption held off
/// (`io::with_ring`), never across a park.
pub(crate) struct Ring {
    ring: ManuallyDrop<RefCell<IoUring>>,
    /// Operations pushed with a slot whose completion has not been reaped.
    inflight: Cell<usize>,
    /// Completions reaped so far (a green thread compares it before and after it
    /// parks: did others' completions come with its own?).
    reaped: Cell<u64>,
    /// `io_uring_enter` calls made to submit (for tests: replies batched per turn).
    enters: Cell<u64>,
}

fn is_busy(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN))
}

impl Ring {
    /// A ring whose completions ring `wake_fd`.
    pub(crate) fn new(wake_fd: RawFd) -> io::Result<Ring> {
        // Deferred task running (6.1+; the ring is this worker's alone, made on its
        // thread): completions are posted only when the worker asks for them
        // (`io_uring_enter` with GETEVENTS, after it submits what is queued), in the
        // order their events came, and never by an interrupt into whatever it is
        // running. The order matters: two sockets' requests are then taken in the order
        // they arrived, as with epoll (a server must run a client's request before
        // another client's that came after it). With cooperative task running, a
        // completion could be posted on any return from the kernel (a preemption of
        // the worker) before the receive of a socket whose bytes came first was even
        // submitted: the later request ran first. The flag tells `submit_pending` when
        // such work waits. Older kernels refuse the flags: cooperative task running
        // (5.19+), then the plain ring.
        let ring = IoUring::builder()
            .setup_cqsize(CQ_ENTRIES)
            .setup_clamp()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(SQ_ENTRIES)
            .or_else(|_| {
                IoUring::builder()
                    .setup_cqsize(CQ_ENTRIES)
                    .setup_clamp()
                    .setup_coop_taskrun()
                    .setup_taskrun_flag()
                    .build(SQ_ENTRIES)
            })
            .or_else(|_| {
                IoUring::builder()
                    .setup_cqsize(CQ_ENTRIES)
                    .setup_clamp()
                    .build(SQ_ENTRIES)
            })?;
        ring.submitter().register_eventfd(wake_fd)?;
        Ok(Ring {
            ring: ManuallyDrop::new(RefCell::new(ring)),
            inflight: Cell::new(0),
            reaped: Cell::new(0),
            enters: Cell::new(0),
        })
    }

    /// Queues `entries` (an operation and its linked timeout, kept adjacent), of which
    /// `slots` carry a slot pointer; submits only if the SQ is full.
    ///
    /// # Safety
    /// Everything the entries point to stays valid until their completions are reaped.
    pub(crate) unsafe fn push(&self, entries: &[squeue::Entry], slots: usize) -> io::Result<()> {
        loop {
            let submitted = {
                let mut ring = self.ring.borrow_mut();
                let mut sq = ring.submission();
                if sq.capacity() - sq.len() >= entries.len() {
                    // SAFETY: per the contract; room was checked.
                    unsafe { sq.push_multiple(entries) }
                        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                    self.inflight.set(self.inflight.get() + slots);
                    return Ok(());
                }
                drop(sq);
                ring.submit()
            };
            match submitted {
                Ok(_) => {}
                Err(e) if is_busy(&e) => {
                    // The completion side is full: make room, then try again.
                    if self.reap_and_complete() == 0 {
                        std::thread::yield_now();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Queues an entry nobody waits for (user_data 0); false if the SQ stays full.
    fn push_untracked(&self, e: squeue::Entry) -> bool {
        for _ in 0..2 {
            let mut ring = self.ring.borrow_mut();
            {
                let mut sq = ring.submission();
                // SAFETY: the entries pushed here point to no memory of ours.
                if unsafe { sq.push(&e) }.is_ok() {
                    return true;
                }
            }
            let _ = ring.submit();
        }
        false
    }

    /// Queues a close of `fd` (it completes on its own); false if that was impossible.
    pub(crate) fn close(&self, fd: RawFd) -> bool {
        // Submitted at once, not at the worker's next poll: a dropped socket or file must
        // be closed when its drop returns (a rebind of the port, the peer's end-of-file,
        // a lock released), as with std. The kernel usually completes a close inline.
        let queued = self.push_untracked(opcode::Close::new(types::Fd(fd)).build().user_data(0));
        if queued {
            self.submit_pending();
        }
        queued
    }

    /// Asks the kernel to cancel the operation with `user_data` (a slot pointer).
    pub(crate) fn cancel(&self, user_data: u64) {
        self.push_untracked(opcode::AsyncCancel::new(user_data).build().user_data(0));
    }

    /// Submits what is queued, if anything.
    fn submit_pending(&self) {
        let mut ring = self.ring.borrow_mut();
        // Completions whose task work waits for us (the ring was set up for
        // cooperative task running) also need the syscall.
        if ring.submission().is_empty() && !ring.submission().taskrun() {
            return;
        }
        // With GETEVENTS (and no completion waited for): the call also runs the task
        // work its submissions made, so a linked entry after one that completed inline
        // (a reply's send and its request's removal, `io::send_then_discard`) runs in
        // this same call, and what completed is in the CQ when it returns. An error
        // (EBUSY: completions to reap first) leaves the entries queued for the next
        // call, which comes after a reap.
        let n = ring.submission().len() as u32;
        self.enters.set(self.enters.get() + 1);
        // SAFETY: the submission queue's entries were pushed under `push`'s contract; the
        // call waits for no completion (0) and passes no argument.
        let _ = unsafe {
            ring.submitter()
                .enter::<libc::sigset_t>(n, 0, ENTER_GETEVENTS, None)
        };
    }

    /// Copies the waiting completions out (under the borrow only).
    fn reap(&self) -> Vec<(u64, i32)> {
        let mut ring = self.ring.borrow_mut();
        ring.completion()
            .filter(|c| c.user_data() != 0)
            .map(|c| (c.user_data(), c.result()))
            .collect()
    }

    /// Completes reaped operations (no borrow held: this wakes and drops).
    fn complete(&self, done: Vec<(u64, i32)>) -> usize {
        let n = done.len();
        self.reaped.set(self.reaped.get() + n as u64);
        for (ud, res) in done {
            self.inflight.set(self.inflight.get() - 1);
            // SAFETY: `ud` is the count `io::run` gave the ring with this entry, and
            // this is its one completion.
            let slot = unsafe { Arc::from_raw(ud as *const Slot) };
            slot.complete(res as i64);
        }
        n
    }

    fn reap_and_complete(&self) -> usize {
        let d = self.reap();
        self.complete(d)
    }

    /// Submits what is queued and completes what finished; how many finished.
    pub(crate) fn poll(&self) -> usize {
        self.submit_pending();
        self.reap_and_complete()
    }

    /// Submits what is queued (before the worker sleeps: the completions of what is
    /// submitted write its eventfd).
    pub(crate) fn submit(&self) {
        self.submit_pending();
    }

    /// Completions reaped on this ring so far.
    pub(crate) fn reaped(&self) -> u64 {
        self.reaped.get()
    }

    /// `io_uring_enter` calls made to submit or run task work so far (not the
    /// sleeps'): what batching saves shows here.
    pub(crate) fn enters(&self) -> u64 {
        self.enters.get()
    }

    /// Whether a poll would do nothing: no submission queued, no completion to reap.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        ring.submission().is_empty() && !ring.submission().taskrun() && ring.completion().is_empty()
    }

    /// Whether completions wait to be reaped: CQEs in the ring, or (the ring runs task
    /// work cooperatively) completions whose task work waits for our next syscall. A
    /// few loads: cheap enough for a spinning worker to ask each turn.
    #[inline]
    pub(crate) fn has_completions(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        !ring.completion().is_empty() || ring.submission().taskrun()
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        let fd = self.ring.borrow().as_raw_fd();
        loop {
            self.submit_pending();
            self.reap_and_complete();
            if self.inflight.get() == 0 {
                // SAFETY: dropped once, here; nothing in flight refers to it.
                unsafe { ManuallyDrop::drop(&mut self.ring) };
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = (deadline - now).as_millis().max(1) as i32;
            // SAFETY: polls the ring's own descriptor.
            unsafe { libc::poll(&mut p, 1, ms) };
        }
        eprintln!(
            "weft: {} io_uring operations did not finish at worker exit; their ring and buffers are leaked",
            self.inflight.get()
        );
    }
}
