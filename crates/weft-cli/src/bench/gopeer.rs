//! The Go peer of `bench runtime` and `bench ipc` (`peers/gopeer.go`): built at bench
//! time with the local `go` toolchain into a temporary directory (stdlib only: no module
//! download, no network), then run as one long-lived child process that times each
//! batch itself and answers on a line protocol (see the Go file), so its runtime stays
//! warm between batches as weft's does.
//!
//! `go` is looked up on PATH; `WEFT_BENCH_GO=/path/to/go` overrides that and
//! `WEFT_BENCH_GO=off` skips the Go rows.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const SOURCE: &str = include_str!("../../peers/gopeer.go");

/// A running Go peer.
pub struct GoPeer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    /// `go version` and the build time, for the table.
    pub description: String,
}

/// Finds `go`, or says why there is none.
fn find_go() -> Result<PathBuf, String> {
    match std::env::var_os("WEFT_BENCH_GO") {
        Some(v) if v == "off" => return Err("skipped (WEFT_BENCH_GO=off)".into()),
        Some(v) if !v.is_empty() => return Ok(PathBuf::from(v)),
        _ => {}
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("go"))
        .find(|p| p.is_file())
        .ok_or_else(|| "not installed (no `go` on PATH; install Go to get these rows)".to_string())
}

impl GoPeer {
    /// Builds and starts the peer; `Err` says why the Go rows are skipped.
    pub fn start() -> Result<GoPeer, String> {
        let go = find_go()?;
        let dir = std::env::temp_dir().join(format!("weft-bench-go-{}", std::process::id()));
        let cleanup = |e: String| {
            let _ = std::fs::remove_dir_all(&dir);
            e
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        std::fs::write(dir.join("go.mod"), "module weftgopeer\n\ngo 1.21\n")
            .and_then(|()| std::fs::write(dir.join("main.go"), SOURCE))
            .map_err(|e| cleanup(format!("cannot write the Go source: {e}")))?;
        let version = Command::new(&go)
            .arg("version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let t = Instant::now();
        let mut build = Command::new(&go);
        build
            .args(["build", "-o", "gopeer", "."])
            .current_dir(&dir)
            // Never reach the network: the program uses the standard library only.
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-buildvcs=false");
        if std::env::var_os("HOME").is_none() && std::env::var_os("XDG_CACHE_HOME").is_none() {
            build.env("GOCACHE", dir.join("cache"));
        }
        let out = build
            .output()
            .map_err(|e| cleanup(format!("cannot run {}: {e}", go.display())))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(cleanup(format!(
                "`go build` failed ({}): {}",
                out.status,
                err.lines().next().unwrap_or("no message")
            )));
        }
        let built = t.elapsed();
        let mut child = Command::new(dir.join("gopeer"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| cleanup(format!("cannot start the Go peer: {e}")))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        Ok(GoPeer {
            child,
            stdin,
            stdout,
            dir,
            description: format!(
                "{} (helper built in {:.1} s)",
                if version.is_empty() { "go" } else { &version },
                built.as_secs_f64()
            ),
        })
    }

    /// Runs one batch of `test` with count `n` in the peer; the time its loop took.
    pub fn run(&mut self, test: &str, n: u64) -> Result<Duration, String> {
        writeln!(self.stdin, "{test} {n}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("Go peer: cannot send the request: {e}"))?;
        let mut line = String::new();
        let got = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| format!("Go peer: cannot read the reply: {e}"))?;
        if got == 0 {
            return Err("the Go peer exited".into());
        }
        line.trim()
            .parse::<u64>()
            .map(Duration::from_nanos)
            .map_err(|_| format!("Go peer: {}", line.trim()))
    }
}

impl Drop for GoPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
