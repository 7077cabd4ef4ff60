//! One message box: a bounded single-producer single-consumer ring (Lamport's queue).
//!
//! The producer owns `tail`, the consumer owns `head`; each reads the other's index with
//! Acquire and publishes its own with Release, so a slot's contents are visible before
//! the index that hands it over. No locked instruction on either side. The producer
//! keeps its last view of `head` (`head_seen`) and reads the consumer's line again only
//! when the box looks full by that view: in a ping-pong, where the box never fills, a
//! push moves no line but the slot's and the tail's. The single
//! producer and single consumer are guaranteed by the matrix: each box is reachable
//! only through one sending endpoint and one receiving endpoint (`matrix.rs`).

use crate::shim::{AtomicUsize, CachePadded, UnsafeCell};
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering::*;

pub(crate) struct Spsc<T> {
    /// Next slot to pop (written by the consumer).
    head: CachePadded<AtomicUsize>,
    /// Next slot to push (written by the producer).
    tail: CachePadded<AtomicUsize>,
    /// The producer's last view of `head` (the producer's alone; beside nothing the
    /// consumer touches).
    head_seen: CachePadded<UnsafeCell<usize>>,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
}

// SAFETY: values move from the producer's thread to the consumer's: T must be Send.
// Shared access is arbitrated by the head/tail protocol (one producer, one consumer).
unsafe impl<T: Send> Send for Spsc<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Spsc<T> {}

impl<T> Spsc<T> {
    /// A box for `capacity` messages (rounded up to a power of two, at least 2).
    pub(crate) fn new(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        Spsc {
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
            head_seen: CachePadded(UnsafeCell::new(0)),
            slots: (0..cap)
                .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
                .collect(),
            mask: cap - 1,
        }
    }

    /// Producer: appends `v`, or hands it back if the box is full.
    ///
    /// # Safety
    /// Only the box's single producer may call this.
    pub(crate) unsafe fn push(&self, v: T) -> Result<(), T> {
        let t = self.tail.load(Relaxed);
        // SAFETY: `head_seen` is the single producer's alone.
        let mut h = self.head_seen.with(|p| unsafe { *p });
        if t.wrapping_sub(h) > self.mask {
            h = self.head.load(Acquire);
            // SAFETY: as above.
            self.head_seen.with_mut(|p| unsafe { *p = h });
            if t.wrapping_sub(h) > self.mask {
                return Err(v);
            }
        }
        // SAFETY: slot `t` is free (the consumer is past it) and only we write it.
        self.slots[t & self.mask].with_mut(|p| unsafe { (*p).write(v) });
        self.tail.store(t.wrapping_add(1), Release);
        Ok(())
    }

    /// Consumer: takes the oldest message, if any.
    ///
    /// # Safety
    /// Only the box's single consumer may call this.
    pub(crate) unsafe fn pop(&self) -> Option<T> {
        let h = self.head.load(Relaxed);
        let t = self.tail.load(Acquire);
        if h == t {
            return None;
        }
        // SAFETY: slot `h` was written before `tail` passed it, and only we read it.
        let v = self.slots[h & self.mask].with(|p| unsafe { (*p).assume_init_read() });
        self.head.store(h.wrapping_add(1), Release);
        Some(v)
    }
}

impl<T> Drop for Spsc<T> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no producer or consumer is left; drop what is queued.
        while unsafe { self.pop() }.is_some() {}
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn fifo_until_full_then_hands_the_message_back() {
        let b = Spsc::new(3); // rounded up to 4
        unsafe {
            for i in 0..4 {
                assert!(b.push(i).is_ok());
            }
            assert_eq!(
                b.push(99),
                Err(99),
                "full: the message comes back, not lost"
            );
            assert_eq!(b.pop(), Some(0));
            assert!(b.push(4).is_ok());
            assert_eq!(
                (1..=4).map(|_| b.pop().unwrap()).collect::<Vec<_>>(),
                vec![1, 2, 3, 4]
            );
            assert_eq!(b.pop(), None);
        }
    }

    #[test]
    fn queued_messages_are_dropped_with_the_box() {
        let token = std::sync::Arc::new(());
        let b = Spsc::new(4);
        unsafe {
            b.push(token.clone()).unwrap();
            b.push(token.clone()).unwrap();
        }
        drop(b);
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
    }
}
