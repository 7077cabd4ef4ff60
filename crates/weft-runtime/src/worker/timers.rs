//! A worker's timers: the deadlines at which its parked green threads are woken.
//!
//! Timers are per worker, like everything else on the hot path: a green thread sets a
//! timer only on the worker that owns it, and that worker fires it, so no lock is
//! needed. The structure is a binary heap ordered by deadline (O(log n) insert and
//! fire; the next deadline in O(1), which is what the worker's sleep needs). A hashed
//! timing wheel would make insertion O(1), but the heap's exact deadlines and its
//! simplicity win at the sizes measured here (see docs/runtime.md).
//!
//! Cancellation is lazy: a task remembers the sequence number of the one timer that
//! may wake it (`Task::timer_seq`); cancelling sets that to 0, and an entry whose
//! number no longer matches is discarded when it reaches the top of the heap. So
//! cancelling (every park with a timeout that ends early) costs a store; when cancelled
//! entries come to outnumber live ones, the heap is rebuilt without them.

use crate::task::{self, Task};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Instant;

struct Entry {
    deadline: Instant,
    seq: u32,
    task: Arc<Task>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed, so the max-heap's top is the earliest deadline.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.deadline, o.seq).cmp(&(self.deadline, self.seq))
    }
}

/// One worker's timers.
#[derive(Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Entry>,
    next_seq: u32,
    /// Cancelled entries still in the heap (an upper bound: some may have been
    /// dropped from the top already).
    stale: usize,
}

impl Timers {
    /// Wakes `task` at `deadline` (replacing any timer it had).
    pub(crate) fn add(&mut self, deadline: Instant, task: Arc<Task>) {
        // 32 bits (the task record is kept small), wrapping past 0. A stale entry could
        // match again only after 2^32 timers on this worker while it stays in the heap:
        // then its thread gets a spurious wake-up, which every park allows.
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let seq = self.next_seq;
        task.timer_seq.set(seq);
        self.heap.push(Entry {
            deadline,
            seq,
            task,
        });
    }

    /// Cancels `task`'s timer, if it has one. The entry stays in the heap until it
    /// reaches the top, unless cancelled entries come to outnumber live ones (many
    /// long timeouts that end early): then the heap is rebuilt without them, so memory
    /// stays proportional to the live timers.
    #[inline]
    pub(crate) fn cancel(&mut self, task: &Task) {
        if task.timer_seq.replace(0) != 0 {
            self.stale += 1;
            if self.stale > 64 && self.stale * 2 > self.heap.len() {
                self.heap.retain(|e| e.task.timer_seq.get() == e.seq);
                self.stale = 0;
            }
        }
    }

    fn drop_cancelled(&mut self) {
        while let Some(top) = self.heap.peek() {
            if top.task.timer_seq.get() == top.seq {
                break;
            }
            self.heap.pop();
            self.stale = self.stale.saturating_sub(1);
        }
    }

    /// The earliest live deadline.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_cancelled();
        self.heap.peek().map(|e| e.deadline)
    }

    /// Fires every timer due at `now`; returns how many woke a thread.
    pub(crate) fn fire(&mut self, now: Instant) -> usize {
        let mut n = 0;
        loop {
            self.drop_cancelled();
            match self.heap.peek() {
                Some(top) if top.deadline <= now => {}
                _ => return n,
            }
            let e = self.heap.pop().expect("peeked");
            e.task.timer_seq.set(0);
            task::unpark(&e.task);
            n += 1;
        }
    }

    /// Drops every timer (shutdown).
    pub(crate) fn clear(&mut self) {
        for e in self.heap.drain() {
            e.task.timer_seq.set(0);
        }
    }
}
