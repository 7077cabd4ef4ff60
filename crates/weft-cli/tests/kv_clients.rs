//! weft-kv through real clients: runs the pytest suite `tests/kv` (redis-py 8,
//! redis-cli, redis-benchmark, the differential test against Debian's redis-server,
//! the kill -9 crash test, 200 concurrent connections, security and bad input) against
//! the `weft` binary cargo built for this test.
//!
//! The suite is Python because the proof is that *real* clients work unchanged; this
//! harness lets `cargo test` run it: `python3 -m pytest -q tests/kv` from the
//! repository root, with `WEFT_BIN` set to this build's `weft` and `KV_TARGET=weft`
//! (unless `KV_TARGET` is set already: `KV_TARGET=redis` runs the same suite against
//! redis-server alone, which checks the tests). `make test` runs pytest as a phase of its
//! own instead (tests/run-all), so that each Python test counts in its summary.
//!
//! When python3, pytest, redis-py 8, redis-server, redis-cli or redis-benchmark is
//! missing, the test says what is missing and how to install it, and is skipped (see
//! tests/support/skip.rs); with `WEFT_REQUIRE_KV_CLIENTS=1` (CI sets it, after
//! installing them) a missing tool is a failure instead. pytest's output is printed
//! (`--nocapture` shows it on success too) and the test fails when pytest does, or when
//! it runs longer than 15 minutes (it takes about a minute alone).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/skip.rs"]
mod skip;

/// How long the suite may take before it is killed: a ceiling against a hang only.
const SUITE_LIMIT: Duration = Duration::from_secs(15 * 60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// What the suite needs and is not there, each with how to get it.
fn missing_tools() -> Vec<String> {
    let mut missing = Vec::new();
    let py = Command::new("python3")
        .args([
            "-c",
            "import pytest, redis; v = int(redis.__version__.split('.')[0]); \
             assert v >= 8, 'redis-py ' + redis.__version__ + ' is older than 8'",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match py {
        Err(e) => missing.push(format!("python3 ({e}): apt-get install python3")),
        Ok(o) if !o.status.success() => missing.push(format!(
            "pytest or redis-py 8 ({}): python3 -m pip install pytest 'redis>=8,<9'",
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        )),
        Ok(_) => {}
    }
    for tool in ["redis-server", "redis-cli", "redis-benchmark"] {
        if !on_path(tool) {
            missing.push(format!("{tool}: apt-get install redis-server redis-tools"));
        }
    }
    missing
}

#[test]
fn real_clients_against_weft_kv() {
    let missing = missing_tools();
    if !missing.is_empty() {
        let msg = format!(
            "the weft-kv client suite (tests/kv) needs what is not installed:\n  {}",
            missing.join("\n  ")
        );
        if std::env::var("WEFT_REQUIRE_KV_CLIENTS").is_ok_and(|v| v == "1") {
            panic!("{msg}\n(WEFT_REQUIRE_KV_CLIENTS=1: a missing tool is a failure)");
        }
        skip::skip(&msg);
        return;
    }

    let root = repo_root();
    let log = std::env::temp_dir().join(format!("weft-kv-clients-{}.log", std::process::id()));
    let out = std::fs::File::create(&log).expect("create the pytest log file");
    let target = std::env::var("KV_TARGET").unwrap_or_else(|_| "weft".into());
    let mut child = Command::new("python3")
        .args(["-m", "pytest", "-q", "tests/kv"])
        .current_dir(&root)
        .env("WEFT_BIN", env!("CARGO_BIN_EXE_weft"))
        .env("KV_TARGET", &target)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup the log file"))
        .stderr(out)
        .spawn()
        .expect("run python3 -m pytest");
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for pytest") {
            break Some(st);
        }
        if start.elapsed() > SUITE_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    println!("---- python3 -m pytest -q tests/kv (KV_TARGET={target}) ----\n{text}");
    match status {
        None => panic!("the tests/kv suite ran longer than {SUITE_LIMIT:?} and was killed"),
        Some(st) => assert!(
            st.success(),
            "the tests/kv suite failed ({st}) against {target}; its output is above. \
             Re-run one part with: KV_TARGET={target} WEFT_BIN={} python3 -m pytest -q tests/kv -k NAME",
            env!("CARGO_BIN_EXE_weft")
        ),
    }
}
