//! Shared by the weft-cli integration tests: the workspace, a fresh libweft, and the C
//! target program (tests/c/introspect_target.c) compiled against it.

#![allow(dead_code)] // each test binary uses its own subset

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

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
            cmd.args(["build", "-p", "weft-capi"]);
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
            let st = cmd.status().expect("run cargo build -p weft-capi");
            assert!(st.success(), "cargo build -p weft-capi failed: {st}");
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
