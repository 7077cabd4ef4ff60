//! One message box: a bounded single-producer single-consumer ring whose slots say
//! themselves whether they are full.
//!
//! Each slot carries a sequence word beside its message, on the same cache line. The
//! producer, at its private position `t`, writes the message and then stores `t + 1`
//! in the slot's sequence word with Release; the consumer, at its position `h`, takes
//! the slot when its sequence word reads `h + 1` with Acquire (a slot still holding
//! the previous lap's `h + 1 - capacity`, or the initial 0, is empty). So a message
//! costs the consumer one cache line, the one the producer wrote: there is no shared
//! tail index to fetch as well (Lamport's queue moves the tail's line and the slot's
//! line per message; in a cross-worker ping-pong that doubled the box's cost).
//!
//! The consumer publishes `head` (Release, on its own line) after each take, so the
//! producer knows which slots are free again; the producer keeps its last view of it
//! (`head_seen`) and reads the consumer's line only when the box looks full by that
//! view. The consumer never writes a slot, so it never pulls a slot's line away from
//! the producer.
//!
//! The single producer and single consumer are guaranteed by the matrix: each box is
//! reachable only through one sending endpoint and one receiving endpoint
//! (`matrix.rs`). `tail` and `head_seen` are the producer's alone.

use crate::shim::{AtomicUsize, CachePadded, UnsafeCell};
use core::mem::MaybeUninit;
use core::sync::atomic::Ordering::*;

/// A slot: its sequence word (`t + 1` once the producer at `t` has filled it) and the
/// message, side by side and aligned to a cache line, so that one line brings both (for
/// a message of up to 56 bytes, as the runtime's `Mail` is).
#[repr(C, align(64))]
struct Slot<T> {
    seq: AtomicUsize,
    val: UnsafeCell<MaybeUninit<T>>,
}

/// The producer's private state.
struct Producer {
    /// Next position to fill.
    tail: usize,
    /// The producer's last view of the consumer's `head`.
    head_seen: usize,
}

pub(crate) struct Spsc<T> {
    /// Next position to take (written by the consumer only; read by the producer when
    /// the box looks full).
    head: CachePadded<AtomicUsize>,
    /// The producer's alone.
    producer: CachePadded<UnsafeCell<Producer>>,
    slots: Box<[Slot<T>]>,
    mask: usize,
}

// SAFETY: values move from the producer's thread to the consumer's: T must be Send.
// Shared access is arbitrated by the sequence words and `head` (one producer, one
// consumer).
unsafe impl<T: Send> Send for Spsc<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Spsc<T> {}

/// `cap` empty slots (sequence word 0). Outside loom, from zeroed memory: a large box
/// costs no resident memory until it is used (all-zero bytes are an empty slot: a 0
/// sequence word and an uninitialised message).
fn empty_slots<T>(cap: usize) -> Box<[Slot<T>]> {
    #[cfg(not(feature = "loom"))]
    if let Some(slots) = zeroed_slots(cap) {
        return slots;
    }
    (0..cap)
        .map(|_| Slot {
            seq: AtomicUsize::new(0),
            val: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect()
}

/// `cap` empty slots from `alloc_zeroed` (None for a zero-sized array).
#[cfg(not(feature = "loom"))]
fn zeroed_slots<T>(cap: usize) -> Option<Box<[Slot<T>]>> {
    let layout = std::alloc::Layout::array::<Slot<T>>(cap).expect("box size overflows");
    if layout.size() == 0 {
        return None;
    }
    // SAFETY: `layout` has a non-zero size; a `Slot` of zero bytes is valid (an
    // `AtomicUsize` 0, and any bytes are a valid `MaybeUninit` inside our transparent
    // `UnsafeCell`), so the zeroed array is `cap` initialised slots, allocated by the
    // global allocator with the layout `Box<[Slot<T>]>` frees with.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<Slot<T>>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Some(Box::from_raw(core::ptr::slice_from_raw_parts_mut(p, cap)))
    }
}

impl<T> Spsc<T> {
    /// A box for `capacity` messages (rounded up to a power of two, at least 2).
    pub(crate) fn new(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        Spsc {
            head: CachePadded(AtomicUsize::new(0)),
            producer: CachePadded(UnsafeCell::new(Producer {
                tail: 0,
                head_seen: 0,
            })),
            slots: empty_slots(cap),
            mask: cap - 1,
        }
    }

    /// Producer: appends `v`, or hands it back if the box is full.
    ///
    /// # Safety
    /// Only the box's single producer may call this.
    pub(crate) unsafe fn push(&self, v: T) -> Result<(), T> {
        // SAFETY: the producer state is the single producer's alone.
        self.producer.with_mut(|p| unsafe {
            let p = &mut *p;
            let t = p.tail;
            if t.wrapping_sub(p.head_seen) > self.mask {
                p.head_seen = self.head.load(Acquire);
                if t.wrapping_sub(p.head_seen) > self.mask {
                    return Err(v);
                }
            }
            let s = &self.slots[t & self.mask];
            // The slot is free: the consumer has taken what it held (its `head`, read
            // with Acquire, is past it), and only we write it.
            s.val.with_mut(|m| (*m).write(v));
            s.seq.store(t.wrapping_add(1), Release);
            p.tail = t.wrapping_add(1);
            Ok(())
        })
    }

    /// Consumer: whether a message is waiting (one load of the next slot's sequence
    /// word: cheap enough to ask at every scheduling decision).
    ///
    /// # Safety
    /// Only the box's single consumer may call this.
    #[inline]
    pub(crate) unsafe fn is_ready(&self) -> bool {
        let h = self.head.load(Relaxed);
        self.slots[h & self.mask].seq.load(Relaxed) == h.wrapping_add(1)
    }

    /// Consumer: takes the oldest message, if any.
    ///
    /// # Safety
    /// Only the box's single consumer may call this.
    pub(crate) unsafe fn pop(&self) -> Option<T> {
        let h = self.head.load(Relaxed);
        let s = &self.slots[h & self.mask];
        if s.seq.load(Acquire) != h.wrapping_add(1) {
            return None;
        }
        // SAFETY: the producer filled slot `h` before storing its sequence word, which
        // we read with Acquire; only we read it, and it is not written again until our
        // `head` (stored below with Release) has passed it.
        let v = s.val.with(|m| unsafe { (*m).assume_init_read() });
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
                              // SAFETY: one thread pushes and pops, so there is one producer and one consumer, as
                              // push and pop require.
        unsafe {
            assert!(!b.is_ready());
            for i in 0..4 {
                assert!(b.push(i).is_ok());
            }
            assert!(b.is_ready());
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
            assert!(!b.is_ready(), "a slot of the previous lap reads as empty");
        }
    }

    #[test]
    fn many_laps_keep_order() {
        let b = Spsc::new(2);
        // SAFETY: one thread pushes and pops, so there is one producer and one consumer, as
        // push and pop require.
        unsafe {
            for i in 0..1000u32 {
                b.push(2 * i).unwrap();
                b.push(2 * i + 1).unwrap();
                assert_eq!(b.push(7), Err(7));
                assert_eq!(b.pop(), Some(2 * i));
                assert_eq!(b.pop(), Some(2 * i + 1));
                assert_eq!(b.pop(), None);
            }
        }
    }

    #[test]
    fn queued_messages_are_dropped_with_the_box() {
        let token = std::sync::Arc::new(());
        let b = Spsc::new(4);
        // SAFETY: one thread pushes and pops, so there is one producer and one consumer, as
        // push and pop require.
        unsafe {
            b.push(token.clone()).unwrap();
            b.push(token.clone()).unwrap();
        }
        drop(b);
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
    }

    #[test]
    fn two_threads_stream_a_million_messages_in_order() {
        let b = std::sync::Arc::new(Spsc::new(64));
        let p = b.clone();
        const N: u64 = 1_000_000;
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                // SAFETY: this thread is the only producer.
                while let Err(back) = unsafe { p.push(v) } {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        let mut expect = 0;
        while expect < N {
            // SAFETY: this thread is the only consumer.
            match unsafe { b.pop() } {
                Some(v) => {
                    assert_eq!(v, expect);
                    expect += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        producer.join().unwrap();
    }
}
