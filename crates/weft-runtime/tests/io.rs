//! Files, pipes and `blocking()` through green threads, on both I/O backends (each test
//! runs once per backend: the thread pool always, io_uring where this kernel has it).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use weft_runtime::fs::{self, File};
use weft_runtime::{blocking, io_backend, IoBackend};

mod common;
use common::*;

fn temp(name: &str, b: IoBackend) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "weft-io-test-{}-{name}-{}",
        std::process::id(),
        b.name()
    ))
}

fn pipe() -> (File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors we then own.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors, owned from here on.
    unsafe {
        (
            File::from(OwnedFd::from_raw_fd(fds[0])),
            OwnedFd::from_raw_fd(fds[1]),
        )
    }
}

#[test]
fn file_round_trip_and_positioned_io() {
    for b in backends() {
        let rt = rt1(b);
        let path = temp("rt", b);
        let p2 = path.clone();
        let (name, data, at, tail) = rt.block_on(move || {
            let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
            fs::write(&p2, &data).unwrap();
            let back = fs::read(&p2).unwrap();
            assert_eq!(back, data, "whole-file round trip");

            let f = File::options().read(true).write(true).open(&p2).unwrap();
            f.write_all_at(b"hello", 1000).unwrap();
            let mut five = [0u8; 5];
            f.read_exact_at(&mut five, 1000).unwrap();
            // Positioned I/O leaves the position alone: a plain read starts at 0.
            let mut first = [0u8; 4];
            (&f).read_exact(&mut first).unwrap();
            assert_eq!(first[..], data[..4]);
            // Append at the end through Write.
            let mut f2 = File::options().append(true).open(&p2).unwrap();
            f2.write_all(b"TAIL").unwrap();
            f2.sync_all().unwrap();
            f.sync_data().unwrap();
            let mut tail = [0u8; 4];
            f.read_exact_at(&mut tail, data.len() as u64).unwrap();
            (io_backend(), data, five, tail)
        });
        assert_eq!(name, b.name(), "the green thread runs on the asked backend");
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(&at, b"hello");
        assert_eq!(&on_disk[1000..1005], b"hello");
        assert_eq!(&tail, b"TAIL");
        assert_eq!(on_disk.len(), data.len() + 4);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn open_missing_file_is_not_found_and_create_new_is_already_exists() {
    for b in backends() {
        let rt = rt1(b);
        let path = temp("missing", b);
        let (e1, e2) = rt.block_on(move || {
            let e1 = File::open(&path).unwrap_err();
            fs::write(&path, b"x").unwrap();
            let e2 = File::options()
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap_err();
            std::fs::remove_file(&path).unwrap();
            (e1, e2)
        });
        assert_eq!(e1.kind(), std::io::ErrorKind::NotFound, "{b:?}: {e1}");
        assert!(
            e1.to_string().contains("weft-io-test"),
            "the path is named: {e1}"
        );
        assert_eq!(e2.kind(), std::io::ErrorKind::AlreadyExists, "{b:?}: {e2}");
    }
    // And on a plain OS thread.
    let e = File::open("/nonexistent/weft").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

/// While one green thread waits for a pipe, another on the same single worker keeps
/// counting: the writer writes only once it has counted enough.
#[test]
fn a_slow_pipe_read_does_not_stall_the_worker() {
    for b in backends() {
        let rt = rt1(b);
        let (r, w) = pipe();
        let ticks = Arc::new(AtomicUsize::new(0));
        let t2 = ticks.clone();
        let writer = std::thread::spawn(move || {
            wait_for_ticks(&t2);
            let mut w = std::fs::File::from(w);
            w.write_all(b"late").unwrap();
        });
        let (got, ticks) = rt.block_on(move || {
            let mut buf = [0u8; 16];
            let (n, seen) = ticks_during(ticks, || r.read(&mut buf).unwrap());
            (buf[..n].to_vec(), seen)
        });
        writer.join().unwrap();
        assert_eq!(got, b"late", "{b:?}");
        assert!(
            ticks >= TICKS,
            "{b:?}: the other green thread ran only {ticks} times while the read waited"
        );
    }
}

#[test]
fn blocking_returns_values_propagates_panics_and_does_not_stall() {
    for b in backends() {
        let rt = rt1(b);
        let (v, ticks) = rt.block_on(|| {
            // The pool thread returns only once the worker has run another green thread
            // meanwhile.
            let ticks = Arc::new(AtomicUsize::new(0));
            let t2 = ticks.clone();
            ticks_during(ticks, || {
                blocking(move || {
                    wait_for_ticks(&t2);
                    String::from("from the pool")
                })
            })
        });
        assert_eq!(v, "from the pool");
        assert!(
            ticks >= TICKS,
            "{b:?}: the worker stalled ({ticks} ticks while blocking() ran)"
        );

        let p = rt.block_on(|| {
            std::panic::catch_unwind(|| blocking(|| -> u32 { panic!("pool boom") })).unwrap_err()
        });
        assert_eq!(p.downcast_ref::<&str>(), Some(&"pool boom"));
        assert_eq!(
            rt.block_on(|| blocking(|| 5)),
            5,
            "still works after a panic"
        );
    }
    // Outside the runtime it just runs.
    assert_eq!(blocking(|| 9), 9);
}

/// A green thread parked in a read that never completes does not hold up shutdown, and
/// its abandoned operation completes (later) without harm.
#[test]
fn shutdown_with_a_green_thread_parked_in_a_pipe_read() {
    for b in backends() {
        let rt = rt1(b);
        let (r, w) = pipe();
        let started = Arc::new(AtomicBool::new(false));
        let s2 = started.clone();
        let h = rt.spawn(move || {
            s2.store(true, Release);
            let mut buf = [0u8; 8];
            let _ = r.read(&mut buf);
            unreachable!("no data ever comes");
        });
        wait_until("the reader started", || started.load(Acquire));
        // Parked in its read (seen from a green thread of the same, only worker).
        let id = h.id();
        rt.spawn(move || wait_parked(id)).join().unwrap();
        let t0 = Instant::now();
        drop(rt);
        assert!(
            t0.elapsed() < PATIENCE,
            "{b:?}: shutdown took {:?}",
            t0.elapsed()
        );
        assert!(h.join().is_err(), "the parked thread was unwound");
        // Complete the abandoned read (the thread backend's pool thread is still in it).
        drop(std::fs::File::from(w));
    }
}
