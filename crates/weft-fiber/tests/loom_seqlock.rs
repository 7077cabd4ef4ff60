//! A loom model of the registry's seqlock (`src/registry.rs`, `src/introspect.rs`).
//!
//! The registry's memory is shared with other processes, so its code uses core atomics
//! and cannot run under loom; this models its memory operations exactly. The writer (the
//! fiber's owner) makes `seq` odd (`begin_write`: store, then a Release fence), stores
//! the fields with Relaxed, and makes `seq` even with a Release store (`end_write`). A
//! reader loads `seq` with Acquire, copies the fields with Relaxed loads, issues an
//! Acquire fence, and accepts the copy only if `seq` is unchanged and even
//! (`try_read_slot`).
//!
//! The writer keeps two fields equal at every even `seq` (as a switch keeps a slot's
//! activations, deactivations and state in step); a reader that accepts a copy with
//! them unequal has seen a torn slot. loom explores every interleaving allowed by the
//! memory model.

use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};
use loom::sync::Arc;
use loom::thread;

struct Slot {
    seq: AtomicU32,
    a: AtomicU64,
    b: AtomicU64,
}

fn write(s: &Slot, v: u64) {
    s.seq.store(s.seq.load(Relaxed).wrapping_add(1), Relaxed); // begin_write
    fence(Release);
    s.a.store(v, Relaxed);
    s.b.store(v, Relaxed);
    s.seq.store(s.seq.load(Relaxed).wrapping_add(1), Release); // end_write
}

fn try_read(s: &Slot) -> Option<(u64, u64)> {
    let before = s.seq.load(Acquire);
    if before & 1 == 1 {
        return None;
    }
    let copy = (s.a.load(Relaxed), s.b.load(Relaxed));
    fence(Acquire);
    (s.seq.load(Relaxed) == before).then_some(copy)
}

#[test]
fn a_reader_never_accepts_a_torn_slot() {
    loom::model(|| {
        let s = Arc::new(Slot {
            seq: AtomicU32::new(0),
            a: AtomicU64::new(0),
            b: AtomicU64::new(0),
        });
        let w = s.clone();
        // Two updates explore more (about 40 s in a debug build): WEFT_LOOM_FULL=1.
        let updates: u64 = if std::env::var_os("WEFT_LOOM_FULL").is_some() {
            2
        } else {
            1
        };
        let writer = thread::spawn(move || {
            for v in 1..=updates {
                write(&w, v);
            }
        });
        for _ in 0..2 {
            if let Some((a, b)) = try_read(&s) {
                assert_eq!(a, b, "torn read accepted");
            }
        }
        writer.join().unwrap();
        let last = if std::env::var_os("WEFT_LOOM_FULL").is_some() {
            2
        } else {
            1
        };
        assert_eq!(
            try_read(&s),
            Some((last, last)),
            "a quiet slot is always readable"
        );
    });
}
