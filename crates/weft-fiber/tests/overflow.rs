//! A fiber that overflows its stack is named in a clear message, and the process dies
//! of SIGSEGV rather than corrupting memory. Runs the overflow in a child process.

mod common;

use std::os::unix::process::ExitStatusExt;
use weft_fiber::win::*;

#[inline(never)]
fn recurse(depth: u64) -> u64 {
    let buf = std::hint::black_box([depth as u8; 1024]);
    if std::hint::black_box(depth) == u64::MAX {
        return 0;
    }
    recurse(depth + 1) + buf[7] as u64
}

unsafe extern "C" fn overflows(_: LPVOID) {
    recurse(0);
}

#[test]
fn stack_overflow_names_the_fiber_and_its_stack_size() {
    if std::env::var_os("WEFT_OVERFLOW_CHILD").is_some() {
        // SAFETY: in the child process only: the fiber overflows its stack on purpose,
        // which the guard page turns into the report the parent checks.
        unsafe {
            ConvertThreadToFiber(std::ptr::null_mut());
            let f = CreateFiber(64 * 1024, Some(overflows), std::ptr::null_mut());
            let mut s = WeftFiberStats::default();
            weft_fiber_stats(f, &mut s);
            eprintln!("child: fiber id {}", s.id);
            SwitchToFiber(f);
        }
        unreachable!();
    }
    let out = common::self_command()
        .args([
            "stack_overflow_names_the_fiber_and_its_stack_size",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WEFT_OVERFLOW_CHILD", "1")
        .env("WEFT_REGISTRY", "off") // it dies by SIGSEGV: leave no stale registry
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "child status {:?}, stderr:\n{err}",
        out.status
    );
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("child: fiber id "))
        .expect("child printed its fiber id");
    let line = err
        .lines()
        .find(|l| l.contains("stack overflow"))
        .unwrap_or_else(|| panic!("no message in:\n{err}"));
    assert!(
        line.starts_with(&format!("weft: stack overflow in fiber {id} ")),
        "{line}"
    );
    assert!(line.contains("stack size 65536 bytes"), "{line}");
    assert!(
        line.contains("larger stack"),
        "the message says what to do: {line}"
    );
}
