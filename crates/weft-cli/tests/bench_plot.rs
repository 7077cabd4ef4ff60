//! `weft bench plot FILE --out DIR` draws the charts of a run saved with `--json`: fed a
//! small JSON-lines file written here (rows of every suite's tables), it writes one SVG
//! file per table, each an SVG document naming its series; from stdin too; a file with
//! nothing to draw is an error.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn line(suite: &str, name: &str, imp: &str, value: f64, unit: &str) -> String {
    format!(
        "{{\"suite\":\"{suite}\",\"name\":\"{name}\",\"impl\":\"{imp}\",\"value\":{value},\"unit\":\"{unit}\"}}\n"
    )
}

/// A run of every suite, made small: each table with a few rows.
fn fixture() -> String {
    let mut s = String::new();
    for (imp, v) in [("weft", 17.6), ("ucontext", 190.0), ("boost-fcontext", 9.5)] {
        s += &line("fibers", "switch", imp, v, "ns");
    }
    for (procs, fibers, init, run) in [
        (1, 16, 1.2e-5, 0.31),
        (1, 1024, 5.6e-4, 0.35),
        (4, 16, 1.4e-5, 1.25),
        (4, 1024, 6.0e-4, 1.4),
    ] {
        let base = format!("many-fibers/{procs}proc/{fibers}");
        s += &line("fibers", &format!("{base}/init"), "weft", init, "s");
        s += &line("fibers", &format!("{base}/run"), "weft", run, "s");
        s += &line("fibers", &format!("{base}/switches"), "weft", 1e5, "count");
    }
    for (imp, v) in [("weft", 236.0), ("pthread", 21000.0), ("go", 410.0)] {
        s += &line("runtime", "spawn", imp, v, "ns");
    }
    for (imp, v) in [("weft", 36.0), ("go", 95.0), ("pthread-sched-yield", 480.0)] {
        s += &line("runtime", "yield", imp, v, "ns");
    }
    for imp in ["weft-uring", "epoll-loop"] {
        s += &line("runtime", "tcp-echo/64B/c8/requests", imp, 150.0, "kreq/s");
        s += &line("runtime", "tcp-echo/64B/c8/throughput", imp, 9.6, "MB/s");
    }
    s += &line("runtime", "parked", "weft", 2000.0, "count");
    for (imp, ns) in [("weft", 58.0), ("go", 360.0)] {
        s += &line("ipc", "local", imp, ns, "ns");
        s += &line("ipc", "local", imp, ns * 2.6, "cycles");
    }
    for (imp, v) in [
        ("sync", 2100.0),
        ("syslets-1-worker", 2300.0),
        ("io_uring-raw", 2600.0),
    ] {
        s += &line("syslets", "cached", imp, v, "ns");
    }
    for imp in ["weft", "redis-server"] {
        for op in ["read", "write", "mixed"] {
            for procs in [1, 2, 4] {
                s += &line(
                    "kv",
                    &format!("clients/{op}/{procs}proc"),
                    imp,
                    2000.0,
                    "ms",
                );
            }
        }
        s += &line(
            "kv",
            "redis-benchmark/tcp/P1/set/rps",
            imp,
            60000.0,
            "req/s",
        );
        s += &line("kv", "redis-benchmark/tcp/P1/set/p99", imp, 0.9, "ms");
        s += &line("kv", "redis-benchmark/tcp/P1/client-busy", imp, 90.0, "%");
        for p in ["p99", "max"] {
            s += &line(
                "kv",
                &format!("latency-under-load/cpu/new/{p}"),
                imp,
                900.0,
                "us",
            );
        }
        s += &line(
            "kv",
            "latency-under-load/cpu/new/tries",
            imp,
            2000.0,
            "count",
        );
    }
    // Not measured: left out of the charts.
    s += "{\"suite\":\"fibers\",\"name\":\"switch\",\"impl\":\"absent\",\"value\":null,\"unit\":\"ns\"}\n";
    s
}

/// Each chart file: its series (the names the chart must show).
fn expected() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (
            "fibers-switch.svg",
            vec!["weft", "ucontext", "boost-fcontext"],
        ),
        (
            "fibers-many-fibers-init.svg",
            vec![
                "weft, 1 process",
                "weft, 4 processes at once",
                "user-space library, 1 process (published)",
                "kernel module, 4 processes (published)",
            ],
        ),
        (
            "fibers-many-fibers-run.svg",
            vec!["weft, 1 process", "weft, 4 processes at once"],
        ),
        ("runtime-spawn.svg", vec!["weft", "pthread", "go"]),
        (
            "runtime-yield.svg",
            vec!["weft", "go", "pthread-sched-yield"],
        ),
        ("runtime-tcp-echo.svg", vec!["weft-uring", "epoll-loop"]),
        ("ipc-local.svg", vec!["weft", "go"]),
        (
            "syslets-cached.svg",
            vec!["sync", "syslets-1-worker", "io_uring-raw"],
        ),
        ("kv-clients-read.svg", vec!["weft", "redis-server"]),
        ("kv-clients-write.svg", vec!["weft", "redis-server"]),
        ("kv-clients-mixed.svg", vec!["weft", "redis-server"]),
        ("kv-redis-benchmark-rps.svg", vec!["weft", "redis-server"]),
        ("kv-redis-benchmark-p99.svg", vec!["weft", "redis-server"]),
        (
            "kv-latency-under-load-p99.svg",
            vec!["weft", "redis-server"],
        ),
        (
            "kv-latency-under-load-max.svg",
            vec!["weft", "redis-server"],
        ),
    ]
}

fn check_charts(dir: &Path, printed: &str) {
    let want = expected();
    let files: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let names: BTreeSet<String> = want.iter().map(|w| w.0.to_string()).collect();
    assert_eq!(files, names, "the chart files");
    // One line per file written, its path.
    assert_eq!(printed.lines().count(), want.len(), "{printed}");
    for (file, series) in want {
        let path = dir.join(file);
        assert!(printed.contains(&path.display().to_string()), "{printed}");
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<svg"), "{file} is not SVG: {svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{file} is cut short");
        for s in series {
            assert!(svg.contains(&format!("\n{s}\n")), "{file} lacks {s:?}");
        }
        assert!(!svg.contains("absent"), "{file} shows a row without value");
        // A title, axis labels with units, and no word of the project's history.
        assert!(svg.contains("is better"), "{file}");
        assert!(!svg.contains("seed"), "{file}");
    }
    let init = std::fs::read_to_string(dir.join("fibers-many-fibers-init.svg")).unwrap();
    assert!(init.contains("fibers (F)"), "x axis label");
    assert!(
        init.contains("ms, log scale)"),
        "y axis label with its unit"
    );
    let spawn = std::fs::read_to_string(dir.join("runtime-spawn.svg")).unwrap();
    assert!(
        spawn.contains("time per thread (µs)"),
        "value axis label with its unit"
    );
}

/// Runs `weft bench plot FILE --out DIR` on `text` saved in FILE, and checks its charts.
fn plot_and_check(text: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("run.jsonl");
    std::fs::write(&input, text).unwrap();
    let out_dir = tmp.path().join("charts");
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "plot"])
        .arg(&input)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weft bench plot failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    check_charts(&out_dir, &String::from_utf8(out.stdout).unwrap());
}

#[test]
fn plot_draws_one_svg_per_table_with_its_series() {
    plot_and_check(&fixture());
}

/// Runs saved before the big tables' rows were renamed (`many-fibers/...` and
/// `clients/...` were both `seed/...`) still draw the same charts.
#[test]
fn plot_reads_the_older_names_of_the_big_tables() {
    let old = fixture()
        .replace("\"many-fibers/", "\"seed/")
        .replace("\"clients/", "\"seed/");
    assert!(old.contains("\"name\":\"seed/4proc/16/run\""), "{old}");
    assert!(old.contains("\"name\":\"seed/mixed/4proc\""), "{old}");
    plot_and_check(&old);
}

#[test]
fn plot_reads_stdin_with_a_dash() {
    let tmp = tempfile::tempdir().unwrap();
    let out_dir = tmp.path().join("charts");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "plot", "-", "--out"])
        .arg(&out_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(fixture().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_charts(&out_dir, &String::from_utf8(out.stdout).unwrap());
}

#[test]
fn plot_of_nothing_to_draw_or_of_garbage_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    for (text, says) in [
        (
            line("runtime", "parked", "weft", 2000.0, "count"),
            "no table to draw",
        ),
        ("not json\n".to_string(), "line 1: not a JSON object"),
    ] {
        let input = tmp.path().join("run.jsonl");
        std::fs::write(&input, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["bench", "plot"])
            .arg(&input)
            .arg("--out")
            .arg(tmp.path().join("charts"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("weft: error: "), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
