//! How a test says that it skipped something, so that the skip shows in the test run.
//!
//! cargo's test harness hides what a passing test prints, so a note printed with
//! `println!` inside a test that could not run is never seen. [`skip`] and [`note`]
//! write straight to the process's standard error, past the harness's capture, and,
//! when `make test` runs the tests (it sets `WEFT_TEST_SKIP_LOG`), append one line to
//! that file, which the run's summary counts and lists:
//!
//! - [`skip`]: the test could not run what it is for (a missing tool or device); the
//!   summary counts it as skipped, not passed;
//! - [`note`]: the test ran, but with less than it would on a machine that allows it
//!   (fewer fibers than asked for); the summary lists the note.
//!
//! Each crate's `tests/common` includes this file with `#[path]`.

#![allow(dead_code)]

use std::io::Write;

/// The test that called us, as the harness names it (its thread's name), or the binary.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "?".into()),
    }
}

fn report(kind: &str, reason: &str) {
    let name = test_name();
    let reason = reason.replace('\n', " ");
    let _ = writeln!(
        std::io::stderr().lock(),
        "{} {name}: {reason}",
        kind.to_uppercase()
    );
    if let Some(path) = std::env::var_os("WEFT_TEST_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            // One write per line: lines from parallel tests do not interleave.
            let _ = f.write_all(format!("{kind}\t{name}\t{reason}\n").as_bytes());
        }
    }
}

/// The calling test could not run what it is for: say why (and how to make it run).
/// The caller then returns; the summary of `make test` counts the test as skipped.
pub fn skip(reason: &str) {
    report("skipped", reason);
}

/// The calling test ran with less than it asks for on this machine: say what and why.
pub fn note(reason: &str) {
    report("note", reason);
}
