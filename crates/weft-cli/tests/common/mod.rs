//! Shared by the weft-cli integration tests: the workspace, a fresh libweft, and the C
//! target program (tests/c/introspect_target.c) compiled against it.

#![allow(dead_code)] // each test binary uses its own subset

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::SystemTime;
use std::time::{Duration, Instant};

#[path = "../../../../tests/support/skip.rs"]
mod skip;
#[allow(unused_imports)] // each test binary uses its own subset
pub use skip::{note, skip};

pub const WEFT: &str = env!("CARGO_BIN_EXE_weft");

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `<target>/<profile>`, where cargo put the weft binary (and libweft).
pub fn profile_dir() -> PathBuf {
    Path::new(WEFT)
        .parent()
        .expect("weft's directory")
        .to_path_buf()
}

fn newest_source_mtime() -> SystemTime {
    fn walk(dir: &Path, newest: &mut SystemTime) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, newest);
            } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                *newest = (*newest).max(m);
            }
        }
    }
    let ws = workspace();
    let mut newest = SystemTime::UNIX_EPOCH;
    walk(&ws.join("crates/weft-fiber/src"), &mut newest);
    walk(&ws.join("crates/weft-capi/src"), &mut newest);
    newest
}

/// The directory holding a fresh libweft.so (built now if missing or stale).
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir();
        let so = dir.join("libweft.so");
        let fresh = std::fs::metadata(&so)
            .and_then(|m| m.modified())
            .is_ok_and(|m| m >= newest_source_mtime());
        if !fresh {
            let profile = dir.file_name().and_then(OsStr::to_str).unwrap_or("debug");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-p", "libweft"]);
            match profile {
                "debug" => {}
                "release" => {
                    cmd.arg("--release");
                }
                other => {
                    cmd.args(["--profile", other]);
                }
            }
            cmd.env("CARGO_TARGET_DIR", dir.parent().expect("target dir"))
                .current_dir(workspace());
            eprintln!(
                "libweft.so in {} is missing or stale; running {cmd:?}",
                dir.display()
            );
            let st = cmd.status().expect("run cargo build -p libweft");
            assert!(st.success(), "cargo build -p libweft failed: {st}");
            assert!(so.exists(), "cargo build did not produce {}", so.display());
        }
        dir
    })
}

/// tests/c/introspect_target.c compiled against libweft.so (once per test run).
pub fn target_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let lib = lib_dir();
        let out_dir = lib.join("weft-c-tests");
        std::fs::create_dir_all(&out_dir).unwrap();
        // Built under a name of its own, then renamed: two test runs sharing the target
        // directory never see a half-written binary.
        let out = out_dir.join("introspect_target");
        let tmp = out_dir.join(format!("introspect_target.{}.tmp", std::process::id()));
        let ws = workspace();
        let mut cmd = Command::new("cc");
        cmd.args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"])
            .arg("-I")
            .arg(ws.join("include"))
            .arg(ws.join("tests/c/introspect_target.c"))
            .arg("-o")
            .arg(&tmp)
            .arg("-L")
            .arg(lib)
            .arg("-lweft")
            .arg(format!("-Wl,-rpath,{}", lib.display()));
        let o = cmd.output().expect("run cc (is a C compiler installed?)");
        assert!(
            o.status.success(),
            "compiling introspect_target failed: {cmd:?}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::rename(&tmp, &out).unwrap();
        out
    })
}

/// A running introspect_target, killed when dropped.
pub struct Target {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    /// Its "key value..." lines up to and including "ready".
    pub lines: HashMap<String, Vec<String>>,
    /// The "stack <id> <size>" lines.
    pub stacks: HashMap<u64, u64>,
    /// The "wall <id> <ns>" lines: how long the target's main fiber spent in its
    /// switches to each fiber (so the most run time that fiber can have).
    pub walls: HashMap<u64, u64>,
}

impl Target {
    /// Starts the target with `args`, its registry in `registry_dir`, and reads its
    /// output up to its "ready" line.
    pub fn start(registry_dir: &Path, args: &[&str]) -> Target {
        let mut child = Command::new(target_bin())
            .args(args)
            .env("WEFT_REGISTRY_DIR", registry_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start introspect_target");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut lines = HashMap::new();
        let mut stacks = HashMap::new();
        let mut walls = HashMap::new();
        loop {
            let mut l = String::new();
            let n = out.read_line(&mut l).expect("read the target's stdout");
            assert!(
                n > 0,
                "introspect_target {args:?} exited before it was ready"
            );
            let mut words = l.split_whitespace().map(str::to_string);
            let Some(key) = words.next() else { continue };
            let rest: Vec<String> = words.collect();
            let per_fiber = match key.as_str() {
                "stack" => Some(&mut stacks),
                "wall" => Some(&mut walls),
                _ => None,
            };
            if let Some(map) = per_fiber {
                map.insert(rest[0].parse().unwrap(), rest[1].parse().unwrap());
                continue;
            }
            let done = key == "ready";
            lines.insert(key, rest);
            if done {
                break;
            }
        }
        Target {
            child,
            stdin,
            lines,
            stacks,
            walls,
        }
    }
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    pub fn value(&self, key: &str) -> &str {
        &self.lines[key][0]
    }
    pub fn tid(&self) -> i32 {
        self.value("tid").parse().unwrap()
    }
    pub fn addr(&self, key: &str) -> u64 {
        let v = self.value(key);
        u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
    }
    pub fn ready_ids(&self) -> Vec<u64> {
        self.lines["ready"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect()
    }
    /// Closes its stdin: it exits normally (removing its registry). Returns its status.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "target did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs the `weft` binary with `args`, reading registries from `registry_dir`.
pub fn weft(registry_dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(WEFT)
        .args(args)
        .env("WEFT_REGISTRY_DIR", registry_dir)
        .stdin(Stdio::null())
        .output()
        .expect("run weft")
}

/// A command's status and output, for assertion messages.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
