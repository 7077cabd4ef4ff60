//! `weft bench kv --quick --json` (with the smoke sizes) runs to the end against the real weft-kv and a
//! redis-server and reports both sides of every row as JSON lines (servers started and
//! stopped, client workers checking every reply, redis-benchmark's CSV, how busy the
//! client was, the latency-under-load tables with their CPU hogs and disk writer, the
//! load generator's rows, the fixed-rate latency rows, and redis-benchmark's tests, of
//! which weft-kv may not answer every one yet). It is skipped (see
//! tests/support/skip.rs) where redis-server or redis-benchmark is missing.

use std::collections::BTreeSet;
use std::process::Command;

#[path = "../../../tests/support/skip.rs"]
mod skip;

fn on_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

#[test]
fn bench_kv_quick_json_has_both_impls_on_every_row() {
    if !on_path("redis-server") || !on_path("redis-benchmark") {
        skip::skip(
            "redis-server and redis-benchmark are needed (Debian: redis-server, redis-tools)",
        );
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "kv", "--quick", "--json"])
        // Tiny sizes: this proves the suite runs end to end, not how fast.
        .env("WEFT_BENCH_KV_SMOKE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "weft bench kv failed ({}):\n{stderr}",
        out.status
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut rows: BTreeSet<(String, String, String)> = BTreeSet::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["suite"], "kv", "{line}");
        assert!(v["value"].as_f64().unwrap() > 0.0, "{line}");
        let s = |k: &str| v[k].as_str().unwrap().to_string();
        rows.insert((s("name"), s("impl"), s("unit")));
    }
    let mut expected = BTreeSet::new();
    // weft-kv's clients over shared memory: the client-processes table only.
    for op in ["read", "write", "mixed"] {
        for procs in [1, 2, 4, 6, 8, 10] {
            expected.insert((
                format!("clients/{op}/{procs}proc"),
                "weft-shm".into(),
                "ms".into(),
            ));
        }
    }
    for imp in ["weft", "redis-server"] {
        for op in ["read", "write", "mixed"] {
            for procs in [1, 2, 4, 6, 8, 10] {
                expected.insert((format!("clients/{op}/{procs}proc"), imp.into(), "ms".into()));
            }
        }
        for conn in ["tcp", "unix"] {
            for p in [1, 16] {
                // How busy the client was, as a share of one CPU.
                expected.insert((
                    format!("redis-benchmark/{conn}/P{p}/client-busy"),
                    imp.into(),
                    "%".into(),
                ));
                for test in ["set", "get"] {
                    let name = format!("redis-benchmark/{conn}/P{p}/{test}");
                    expected.insert((format!("{name}/rps"), imp.into(), "req/s".into()));
                    expected.insert((format!("{name}/p50"), imp.into(), "ms".into()));
                    expected.insert((format!("{name}/p99"), imp.into(), "ms".into()));
                }
            }
        }
        // Latency under load: fsync every second and fsync always, three loads, an
        // existing and a new connection; the figures and how many tries they come from.
        for table in ["latency-under-load", "latency-under-load-always"] {
            for load in ["quiet", "cpu", "cpu-disk"] {
                for conn in ["existing", "new"] {
                    let name = format!("{table}/{load}/{conn}");
                    for p in ["p50", "p90", "p99", "p99.9", "max"] {
                        expected.insert((format!("{name}/{p}"), imp.into(), "us".into()));
                    }
                    expected.insert((format!("{name}/tries"), imp.into(), "count".into()));
                }
            }
        }
        // The load generator's rows, and the fixed-rate latency rows.
        let load = [
            ("P1", "get", "uniform"),
            ("P1", "set", "uniform"),
            ("P1", "get", "zipf"),
            ("P16", "get", "uniform"),
            ("P16", "set", "uniform"),
        ];
        let mut names: Vec<String> = load
            .iter()
            .map(|(p, op, dist)| format!("load/unix/{p}/{op}/{dist}"))
            .collect();
        names.extend([
            "latency-at-rate/50".to_string(),
            "latency-at-rate/90".into(),
        ]);
        for name in names {
            expected.insert((format!("{name}/rps"), imp.into(), "req/s".into()));
            for p in ["p50", "p99", "p99.9", "max"] {
                expected.insert((format!("{name}/{p}"), imp.into(), "us".into()));
            }
        }
    }
    // redis-benchmark's tests: every one against redis-server; against weft-kv those
    // whose commands it answers (the others are reported as not supported yet), at
    // least the string commands.
    let tests = [
        "set",
        "get",
        "incr",
        "lpush",
        "rpush",
        "lpop",
        "rpop",
        "sadd",
        "hset",
        "spop",
        "zadd",
        "zpopmin",
        "lrange_100",
        "lrange_600",
        "mset",
    ];
    let of = |imp: &str, t: &str| {
        [
            (
                format!("redis-benchmark-tests/unix/P16/{t}/rps"),
                imp.to_string(),
                "req/s".to_string(),
            ),
            (
                format!("redis-benchmark-tests/unix/P16/{t}/p99"),
                imp.to_string(),
                "ms".to_string(),
            ),
        ]
    };
    let mut weft_tests = 0;
    for t in tests {
        for r in of("redis-server", t) {
            assert!(rows.remove(&r), "no {r:?}");
        }
        let [a, b] = of("weft", t);
        match (rows.remove(&a), rows.remove(&b)) {
            (true, true) => weft_tests += 1,
            (false, false) => assert!(
                stderr.contains(&format!("{t:<11} | ")) && stderr.contains("not supported yet"),
                "{t}: {stderr}"
            ),
            _ => panic!("{t}: only one of weft's rps and p99"),
        }
    }
    assert!(weft_tests >= 4, "{weft_tests} tests against weft-kv");
    assert_eq!(rows, expected);
    // The table names what it measures and where the figures beside it come from.
    assert!(stderr.contains("client-processes table: "), "{stderr}");
    assert!(
        stderr.contains("published = Table 1 of a Linux kernel module's report"),
        "{stderr}"
    );
    assert!(
        stderr.contains("latency under load, fsync every second"),
        "{stderr}"
    );
    assert!(stderr.contains("disk writer: "), "{stderr}");
    assert!(!stderr.to_lowercase().contains("seed"), "{stderr}");
    assert_eq!(
        text.lines().count(),
        expected.len() + 2 * (tests.len() + weft_tests),
        "one line per measurement"
    );
    // Each target row says whether it is met.
    assert!(stderr.contains("target met on "), "{stderr}");
    assert!(stderr.contains("latency at a fixed rate: GET"), "{stderr}");
}

/// `WEFT_BENCH_KV_FSYNC=always` with `WEFT_BENCH_KV_ONLY=clients`: the client-processes
/// table against both servers started with fsync always, every cell on both sides; an
/// unknown policy is refused by name before anything starts.
#[test]
fn bench_kv_clients_table_under_fsync_always() {
    if !on_path("redis-server") {
        skip::skip("redis-server is needed (Debian: redis-server)");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "kv", "--quick", "--json"])
        .env("WEFT_BENCH_KV_SMOKE", "1")
        .env("WEFT_BENCH_KV_ONLY", "clients")
        .env("WEFT_BENCH_KV_FSYNC", "always")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}:\n{stderr}", out.status);
    assert!(stderr.contains("weft kv serve --fsync always"), "{stderr}");
    let mut rows = BTreeSet::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        rows.insert((
            v["name"].as_str().unwrap().to_string(),
            v["impl"].as_str().unwrap().to_string(),
        ));
    }
    let mut expected = BTreeSet::new();
    for imp in ["weft", "weft-shm", "redis-server"] {
        for op in ["read", "write", "mixed"] {
            for procs in [1, 2, 4, 6, 8, 10] {
                expected.insert((format!("clients/{op}/{procs}proc"), imp.to_string()));
            }
        }
    }
    assert_eq!(rows, expected);

    let bad = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "kv", "--quick", "--json"])
        .env("WEFT_BENCH_KV_SMOKE", "1")
        .env("WEFT_BENCH_KV_ONLY", "clients")
        .env("WEFT_BENCH_KV_FSYNC", "sometimes")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("WEFT_BENCH_KV_FSYNC=\"sometimes\" is not understood"),
        "{err}"
    );
}
