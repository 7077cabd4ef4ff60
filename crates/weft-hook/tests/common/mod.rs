//! What the test files of the layer share: the runtime tests' helpers (patience,
//! backends, skips), and a few of their own.
#![allow(dead_code)] // each test file uses its own subset

use weft_runtime::{IoBackend, Runtime};

#[path = "../../../../tests/support/nofile.rs"]
mod nofile;
#[path = "../../../weft-runtime/tests/common/mod.rs"]
mod runtime_common;
pub use nofile::raise_nofile;
#[allow(unused_imports)]
pub use runtime_common::{backends, note, skip, wait_until, PATIENCE};

/// A runtime of `workers` workers on backend `b`.
pub fn rt(b: IoBackend, workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .io_backend(b)
        .build()
        .unwrap()
}

/// A pipe (read end, write end), close-on-exec.
pub fn pipe() -> (i32, i32) {
    let mut p = [0; 2];
    // SAFETY: pipe2 into a local array.
    assert_eq!(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (p[0], p[1])
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// How many connections of a test that wants `want` fit in the descriptor limit (each
/// takes `per` descriptors, plus a margin); says so when fewer.
pub fn connections_that_fit(want: usize, per: usize) -> usize {
    let limit = raise_nofile((want * per + 256) as u64) as usize;
    let n = want.min(limit.saturating_sub(256) / per);
    if n < want {
        note(&format!(
            "RLIMIT_NOFILE is {limit} and cannot be raised: {n} connections instead of {want}"
        ));
    }
    n
}

/// The `weft` command beside this test binary (`<target>/<profile>/weft`), built
/// (or found fresh) with `cargo build -p weft-cli` for that profile first.
pub fn weft_command() -> std::path::PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "-q", "-p", "weft-cli", "--bin", "weft"]);
        if profile_dir.ends_with("release") {
            cmd.arg("--release");
        }
        cmd.env("CARGO_TARGET_DIR", profile_dir.parent().unwrap())
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
        let st = cmd.status().expect("run cargo build -p weft-cli");
        assert!(st.success(), "cargo build -p weft-cli failed: {st}");
    });
    profile_dir.join("weft")
}
