//! `weft bench runtime --quick --json` runs to the end (a lost wake-up in the message
//! boxes once made it hang) and reports every row as JSON.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn bench_runtime_quick_json_reports_every_row() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "runtime", "--quick", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
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
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let impls: Vec<&str> = rows.iter().map(|r| r["impl"].as_str().unwrap()).collect();
    assert_eq!(
        impls,
        [
            "raw-cacheline",
            "msgbox-spin",
            "msgbox-wait",
            "mutex-condvar"
        ]
    );
    for r in &rows {
        assert_eq!(r["suite"], "runtime");
        assert_eq!(r["unit"], "ns");
        assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
    }
}
