//! `weft bench runtime --quick --json` runs to the end (a lost wake-up in the message
//! boxes once made it hang) and reports every row as JSON: the message boxes, the
//! green-thread spawn, yield and cross-worker round trips (with their Go rows when `go`
//! is installed), and the parked-threads memory rows (the default count, which changes
//! no system setting). The ipc and syslets suites likewise, syslets' uncached rows with
//! tiny sizes (as root and as another user), and `--plot` beside a run. With stderr a
//! pipe, no progress line is drawn.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn bench_runtime_quick_json_reports_every_row() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "runtime", "--quick", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("weft bench runtime did not finish in 120 s (a lost wake-up?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "weft bench runtime failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stderr);
    no_progress_line(&table);
    // The default count fits the default limit: nothing raised, nothing clamped.
    assert!(
        table.contains("(the default count; the full million: --parked 1000000"),
        "{table}"
    );
    assert!(!table.contains("vm.max_map_count"), "{table}");
    // The reference figures beside spawn say where they come from.
    assert!(
        table.contains(
            "reference (quoted with the targets, measured on another machine): pthread \
             create + join ~"
        ),
        "{table}"
    );
    assert!(!table.to_lowercase().contains("seed"), "{table}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &rows {
        assert_eq!(r["suite"], "runtime");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
    }
    let names: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["impl"].as_str().unwrap()))
        .collect();
    // Go's rows are there exactly when the Go peer could be built: all three or none.
    let go = names.iter().filter(|(_, i)| *i == "go").count();
    assert!(go == 0 || go == 3, "some Go rows only: {names:?}");
    let with_go = |mut v: Vec<(&'static str, &'static str)>, name, at| {
        if go == 3 {
            v.insert(at, (name, "go"));
        }
        v
    };
    let mut expected = with_go(
        vec![
            ("cross-worker", "raw-cacheline"),
            ("cross-worker", "msgbox-spin"),
            ("cross-worker", "msgbox-wait"),
            ("cross-worker", "mutex-condvar"),
            ("cross-worker", "weft"),
            ("cross-worker", "weft-busy"),
        ],
        "cross-worker",
        6,
    );
    expected.extend(with_go(
        vec![
            ("spawn", "weft"),
            ("spawn", "weft-1-worker"),
            ("spawn", "weft-1w-no-runtime"),
            ("spawn", "pthread"),
        ],
        "spawn",
        4,
    ));
    expected.extend(with_go(
        vec![
            ("yield", "weft"),
            ("yield", "weft-no-runtime"),
            ("yield", "pthread-sched-yield"),
        ],
        "yield",
        2,
    ));
    // A covered C library call off a green thread, against the plain call.
    expected.extend([
        ("hooked-call", "libc"),
        ("hooked-call", "weft-hooked"),
        ("hooked-call", "libc-read"),
        ("hooked-call", "weft-hooked-read"),
    ]);
    // The TCP echo rows: weft on io_uring (when this kernel allows it) and on the thread
    // fallback, std::net on hooked green threads (both backends), against a
    // pthread-per-connection server and an epoll loop.
    let uring = weft_runtime::io_backend() == "io_uring";
    for size in ["64B", "16KiB"] {
        for server in [
            "weft-uring",
            "weft-threads",
            "weft-hooked",
            "weft-hooked-threads",
            "pthread-per-conn",
            "epoll-loop",
        ] {
            if (server == "weft-uring" || server == "weft-hooked") && !uring {
                continue;
            }
            for what in ["requests", "throughput"] {
                let name: &'static str =
                    Box::leak(format!("tcp-echo/{size}/c8/{what}").into_boxed_str());
                expected.push((name, server));
            }
        }
    }
    // 1,000 connections' memory: hooked green threads against OS threads.
    for imp in ["weft-hooked", "os-threads"] {
        for what in ["rss-per-connection", "rss-total", "page-tables"] {
            let name: &'static str =
                Box::leak(format!("connections-memory/1000/{what}").into_boxed_str());
            expected.push((name, imp));
        }
    }
    expected.extend([
        ("parked", "weft"),
        ("parked/rss-total", "weft"),
        ("parked/rss-per-thread", "weft"),
        ("parked/page-tables", "weft"),
        ("parked/spawn", "weft"),
        ("parked/shutdown", "weft"),
    ]);
    // With one CPU the runtime has one worker and the cross-worker green rows are
    // skipped.
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        expected.retain(|&(n, i)| !(n == "cross-worker" && i.starts_with("weft")));
    }
    assert_eq!(names, expected);
    let unit = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .map(|r| r["unit"].as_str().unwrap().to_string())
    };
    assert_eq!(unit("spawn").as_deref(), Some("ns"));
    assert_eq!(unit("parked").as_deref(), Some("count"));
    assert_eq!(unit("parked/rss-total").as_deref(), Some("bytes"));
    assert_eq!(unit("parked/shutdown").as_deref(), Some("s"));
    // --quick's default count.
    let parked = rows.iter().find(|r| r["name"] == "parked").unwrap();
    assert_eq!(parked["value"].as_f64(), Some(2000.0));
}

/// The progress line is for a terminal only: a piped stderr (here the table's, with
/// --json) has none of its carriage returns, escape sequences or estimates.
fn no_progress_line(stderr: &str) {
    assert!(!stderr.contains('\r'), "{stderr:?}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!stderr.contains(" left"), "{stderr}");
}

/// `weft bench --help` says what the default run measures, how to ask for the full
/// million parked threads, and how to draw charts.
#[test]
fn bench_help_tells_the_parked_default_and_the_charts() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for words in [
        "--parked <N>",
        "default 20000",
        "--parked 1000000",
        "vm.max_map_count",
        "--plot <DIR>",
        "plot",
        "progress line",
    ] {
        assert!(help.contains(words), "{words:?} not in:\n{help}");
    }
    for history in ["issue", "seed", "stop "] {
        assert!(
            !help.to_lowercase().contains(history),
            "{history:?} in:\n{help}"
        );
    }
}

/// `weft bench ipc --quick --json` runs to the end and reports every row of every group in
/// ns and, on x86_64, in TSC cycles (the Go rows when `go` is installed).
#[test]
fn bench_ipc_quick_json_reports_every_row() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "ipc", "--quick", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("weft bench ipc did not finish in 120 s (a lost wake-up?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weft bench ipc failed ({}):\n{table}",
        out.status
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &rows {
        assert_eq!(r["suite"], "ipc");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
    }
    let units: Vec<&str> = if cfg!(target_arch = "x86_64") {
        vec!["ns", "cycles"]
    } else {
        vec!["ns"]
    };
    let got: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["impl"].as_str().unwrap(),
                r["unit"].as_str().unwrap(),
            )
        })
        .collect();
    // Go's rows are there exactly when the Go peer could be built: local and cross, or none.
    let go = got
        .iter()
        .filter(|(_, i, u)| *i == "go" && *u == "ns")
        .count();
    assert!(go == 0 || go == 2, "some Go rows only: {got:?}");
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let groups: [(&str, &[(&str, bool)]); 4] = [
        (
            "local",
            &[
                ("weft", false),
                ("go", false),
                ("mutex-condvar-1cpu", false),
                ("two-fiber-switches", false),
            ],
        ),
        (
            "cross",
            &[
                ("raw-cacheline", false),
                ("weft-busy", true),
                ("weft-idle", true),
                ("weft-asleep", true),
                ("mutex-condvar", false),
                ("go", false),
            ],
        ),
        (
            "cross-under-pingpong",
            &[
                ("weft", true),
                ("weft-pingpong-on-server-worker", true),
                ("weft-pingpong-on-client-worker", true),
            ],
        ),
        (
            "local-under-load",
            &[
                ("weft", false),
                ("weft-pingpong-other-worker", true),
                ("weft-cross-traffic", true),
            ],
        ),
    ];
    let mut expected = Vec::new();
    for (name, impls) in groups {
        for &(imp, needs_two) in impls {
            if (needs_two && !two) || (imp == "go" && go == 0) {
                continue;
            }
            for &u in &units {
                expected.push((name, imp, u));
            }
        }
    }
    assert_eq!(got, expected, "table:\n{table}");
    // The table shows the targets and the published figures, saying where they are from.
    assert!(
        table.contains("target: local round trip <= 60 ns"),
        "{table}"
    );
    assert!(
        table.contains("floor: the two switches alone (two-fiber-switches)"),
        "{table}"
    );
    assert!(
        table.contains("published (Fiasco-MP thesis, table 4"),
        "{table}"
    );
    assert!(
        table.contains("published (Fiasco-MP thesis, table 5"),
        "{table}"
    );
    assert!(!table.to_lowercase().contains("seed"), "{table}");
}

/// `weft bench syslets --quick --json` runs to the end (every pass checks the bytes it
/// read) and reports the cached rows of the four implementations (the raw io_uring one
/// where this kernel has io_uring); the uncached rows are skipped with --quick, and the
/// table says so, shows the targets and the published figures, and leaves no files behind.
#[test]
fn bench_syslets_quick_json_reports_the_cached_rows() {
    let charts = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "syslets", "--quick", "--json", "--plot"])
        .arg(charts.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("weft bench syslets did not finish in 120 s (a lost completion?)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weft bench syslets failed ({}):\n{table}",
        out.status
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &rows {
        assert_eq!(r["suite"], "syslets");
        assert_eq!(r["unit"], "ns");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
    }
    let got: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["impl"].as_str().unwrap()))
        .collect();
    let mut expected = vec![
        ("cached", "sync"),
        ("cached", "syslets-1-worker"),
        ("cached", "syslets-all-workers"),
        ("cached", "inline-floor"),
        ("cached", "inline-floor-all-threads"),
        ("cached", "io_uring-raw"),
    ];
    if !got.contains(&("cached", "io_uring-raw")) {
        // Only where io_uring cannot run here, and the table says why.
        assert!(
            table.contains("io_uring-raw: ") && table.contains("its rows are skipped")
                || table.contains("its first pass failed"),
            "{table}"
        );
        expected.pop();
    }
    assert_eq!(got, expected, "table:\n{table}");
    assert!(
        table.contains("target: cached, syslets on one worker no slower than sync"),
        "{table}"
    );
    assert!(
        table.contains("floor: the inline path's own calls by hand (inline-floor) are"),
        "{table}"
    );
    assert!(table.contains("uncached: skipped with --quick"), "{table}");
    assert!(
        table.contains("published (Ingo Molnar's async-test of syslets, 2007"),
        "{table}"
    );
    assert!(!table.to_lowercase().contains("seed"), "{table}");
    no_progress_line(&table);
    // --plot: the cached table's chart, listed under the table (stdout stays JSON).
    let svg_path = charts.path().join("syslets-cached.svg");
    assert!(
        table.contains(&format!("  {}", svg_path.display())),
        "{table}"
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("<svg"));
    for (_, imp) in &got {
        assert!(
            svg.contains(&format!("\n{imp}\n")),
            "{imp} not in the chart"
        );
    }
    for base in ["/var/tmp".into(), std::env::temp_dir()] {
        let left = base.join(format!("weft-bench-syslets-{pid}"));
        assert!(!left.exists(), "{} left behind", left.display());
    }
}

/// `weft bench syslets` with tiny sizes (WEFT_BENCH_SYSLETS_SMOKE=1) measures the uncached
/// rows too: the suite evicts its own files from the page cache (no privilege needed,
/// nothing else evicted) and checks they are out. Run as this user and, when this is
/// root, as another user (nobody) too. Where the files land on tmpfs the rows are
/// skipped and the table says why.
#[test]
fn bench_syslets_evicts_its_own_files_for_the_uncached_rows() {
    let run = |as_nobody: bool| -> Option<(String, Vec<(String, String)>)> {
        let mut cmd = if as_nobody {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_weft"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_weft"))
        };
        let out = cmd
            .args(["bench", "syslets", "--json"])
            .env("WEFT_BENCH_SYSLETS_SMOKE", "1")
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        let table = String::from_utf8_lossy(&out.stderr).into_owned();
        if as_nobody && !out.status.success() && table.contains("Permission denied") {
            return None; // this binary's directory is closed to other users
        }
        assert!(out.status.success(), "({}):\n{table}", out.status);
        let rows = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["name"].as_str().unwrap().to_string(),
                    v["impl"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        Some((table, rows))
    };
    let mut users = vec![false];
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 && std::path::Path::new("/usr/bin/setpriv").exists() {
        users.push(true);
    }
    for as_nobody in users {
        let Some((table, rows)) = run(as_nobody) else {
            continue;
        };
        if table.contains("uncached: skipped: the files are on tmpfs") {
            continue;
        }
        assert!(
            table.contains("the files' pages are evicted from the page cache"),
            "{table}"
        );
        assert!(!table.contains("warning:"), "{table}");
        assert!(!table.contains("drop_caches"), "{table}");
        let uncached: Vec<&str> = rows
            .iter()
            .filter(|r| r.0 == "uncached")
            .map(|r| r.1.as_str())
            .collect();
        for imp in [
            "sync",
            "syslets-1-worker",
            "syslets-all-workers",
            "inline-floor",
        ] {
            assert!(uncached.contains(&imp), "no uncached {imp} row:\n{table}");
        }
    }
}
