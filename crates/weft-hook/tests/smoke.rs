use weft_hook as _;
mod common;
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

#[test]
fn a_read_parks_only_its_green_thread() {
    for b in backends() {
        let rt = rt(b, 1);
        let got = rt.block_on(move || {
            let (r, w) = pipe();
            let ticks = Arc::new(AtomicUsize::new(0));
            let t2 = ticks.clone();
            let reader = weft_runtime::spawn(move || {
                let mut buf = [0u8; 5];
                // SAFETY: into a local buffer.
                let n = unsafe { libc::read(r, buf.as_mut_ptr().cast(), 5) };
                (n, buf, t2.load(SeqCst))
            });
            for _ in 0..10 {
                ticks.fetch_add(1, SeqCst);
                weft_runtime::yield_now();
            }
            // SAFETY: from a local buffer.
            unsafe { libc::write(w, b"hello".as_ptr().cast(), 5) };
            reader.join().unwrap()
        });
        assert_eq!(got.0, 5, "{b:?}");
        assert_eq!(&got.1, b"hello");
        assert_eq!(
            got.2, 10,
            "{b:?}: the worker ran the other thread while the read waited"
        );
    }
}
