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

/// Set in the child process of `weft_hook_off_leaves_the_c_librarys_calls`.
const OFF_CHILD: &str = "WEFT_HOOK_TEST_OFF_CHILD";

/// `WEFT_HOOK=off` in the environment: the layer is off from the start, and a green
/// thread's read is the C library's (not counted by the layer). Checked in a child
/// process started with it.
#[test]
fn weft_hook_off_leaves_the_c_librarys_calls() {
    if std::env::var_os(OFF_CHILD).is_some() {
        assert!(!weft_hook::enabled(), "WEFT_HOOK=off left the layer on");
        let rt = rt(backends()[0], 1);
        let n = rt.block_on(|| {
            weft_runtime::spawn(|| {
                let (r, w) = pipe();
                let mut b = [0u8; 4];
                // SAFETY: from and into local buffers.
                unsafe {
                    libc::write(w, b"ping".as_ptr().cast(), 4);
                    libc::read(r, b.as_mut_ptr().cast(), 4)
                }
            })
            .join()
            .unwrap()
        });
        assert_eq!(n, 4);
        let calls = weft_hook::stats::snapshot()
            .get("read")
            .map_or(0, |c| c.calls);
        assert_eq!(calls, 0, "the layer counted a read while off");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "weft_hook_off_leaves_the_c_librarys_calls",
            "--nocapture",
        ])
        .env(OFF_CHILD, "1")
        .env("WEFT_HOOK", "off")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
    // And on in this process, the same read is the layer's.
    assert!(weft_hook::enabled());
}
