//! `weft ps PID` shows the layer's counters of a process linked with it: the calls its
//! green threads made, and the uncovered ones (`weft ps PID --calls --json`, one line
//! per call).

use std::process::Command;
use weft_hook as _;
use weft_runtime::Runtime;

mod common;
use common::*;

#[test]
fn weft_ps_shows_the_calls_of_green_threads() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let (r, w) = pipe();
        let reader = weft_runtime::spawn(move || {
            let mut b = [0u8; 4];
            // SAFETY: into a local buffer.
            unsafe { libc::read(r, b.as_mut_ptr().cast(), 4) }
        });
        std::thread::sleep(std::time::Duration::from_millis(10));
        // SAFETY: from a local buffer.
        unsafe { libc::write(w, b"ping".as_ptr().cast(), 4) };
        assert_eq!(reader.join().unwrap(), 4);
        // An uncovered call: a stdio flush of nothing.
        // SAFETY: flushes every open output stream.
        unsafe { libc::fflush(core::ptr::null_mut()) };
    });
    let pid = std::process::id().to_string();
    let out = Command::new(weft_command())
        .args(["ps", &pid, "--calls", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = |call: &str| rows.iter().find(|r| r["call"] == call).cloned();
    let read = row("read").expect("a row for read");
    assert_eq!(read["covered"], true);
    assert!(read["calls"].as_u64().unwrap() >= 1 && read["parked"].as_u64().unwrap() >= 1);
    let sleep = row("clock_nanosleep")
        .or_else(|| row("nanosleep"))
        .expect("a sleep row");
    assert!(sleep["parked"].as_u64().unwrap() >= 1);
    let fflush = row("fflush").expect("a row for fflush");
    assert_eq!(fflush["covered"], false);
    assert!(fflush["calls"].as_u64().unwrap() >= 1);
    // And the table after the fibers.
    let out = Command::new(weft_command())
        .args(["ps", &pid])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("system calls of green threads (weft-hook)"),
        "{text}"
    );
    assert!(text.contains("not covered"), "{text}");
}
