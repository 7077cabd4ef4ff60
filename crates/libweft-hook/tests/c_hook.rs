//! The system-call layer from C: `tests/c/hook_echo.c`, an echo server written with
//! plain `accept`/`read`/`write` and a green thread per connection on two workers,
//! serves 10,000 connections held open at once, every byte checked by the client
//! here (plain blocking sockets, in this process), on both I/O backends; linked with
//! `-lweft-hook`, and linked with `-lweft` but run with `LD_PRELOAD=libweft-hook.so`.
//!
//! The libraries are the ones beside this test binary (`<target>/<profile>/`); the
//! harness runs `cargo build -p libweft -p libweft-hook` for that profile first (a
//! no-op when they are fresh), and links `-lweft-hook` through a link named
//! `libweft-hook.so` to cargo's `libweft_hook.so`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/nofile.rs"]
mod nofile;
#[path = "../../../tests/support/skip.rs"]
mod skip;
use nofile::raise_nofile;

const WANT: usize = 10_000;
const MSG: usize = 64;
/// A ceiling against a hang only.
const PATIENCE: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `<target>/<profile>`, with libweft and libweft-hook built, and the `-lweft-hook`
/// link.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "libweft", "-p", "libweft-hook"]);
    if dir.ends_with("release") {
        cmd.arg("--release");
    }
    let st = cmd
        .env("CARGO_TARGET_DIR", dir.parent().unwrap())
        .current_dir(workspace())
        .status()
        .expect("run cargo build");
    assert!(
        st.success(),
        "cargo build -p libweft -p libweft-hook failed: {st}"
    );
    let link = dir.join("libweft-hook.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libweft_hook.so", &link).unwrap();
    dir
}

/// Compiles tests/c/hook_echo.c against `-l<lib>`.
fn build(dir: &Path, lib: &str) -> PathBuf {
    let out = dir.join(format!("hook_echo_{}", lib.replace('-', "_")));
    let st = Command::new("cc")
        .args([
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            "-std=gnu11",
        ])
        .arg("-I")
        .arg(workspace().join("include"))
        .arg(workspace().join("tests/c/hook_echo.c"))
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(dir)
        .arg(format!("-l{lib}"))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .status()
        .expect("run cc");
    assert!(st.success(), "compiling hook_echo.c with -l{lib} failed");
    out
}

/// Whether this kernel lets the process make an io_uring.
fn uring_available() -> bool {
    let mut p = [0u8; 120]; // struct io_uring_params
                            // SAFETY: io_uring_setup with one entry and zeroed parameters; the ring is closed.
    unsafe {
        let fd = libc::syscall(libc::SYS_io_uring_setup, 1, p.as_mut_ptr());
        if fd >= 0 {
            libc::close(fd as i32);
        }
        fd >= 0
    }
}

/// Client `i`'s `round`-th message.
fn message(i: usize, round: u8) -> Vec<u8> {
    let mut m: Vec<u8> = (0..MSG)
        .map(|k| (k as u8).wrapping_mul(13) ^ (i as u8) ^ round)
        .collect();
    m[..8].copy_from_slice(&(i as u64).to_le_bytes());
    m[8] = round;
    m
}

/// Kills the server and fails with `what` and what the server said on stderr.
fn fail(
    child: &mut std::process::Child,
    err: &mut Option<std::thread::JoinHandle<String>>,
    what: String,
) -> ! {
    let _ = child.kill();
    let e = err.take().map(|t| t.join().unwrap()).unwrap_or_default();
    panic!("{what}; the server's stderr:\n{e}")
}

/// Runs the server `bin` (with `env`) for `n` connections and drives it: every
/// connection opened and held, two rounds of a message on each, every echo checked,
/// then all closed; returns the server's last line but one ("most ...").
fn serve_and_drive(bin: &Path, n: usize, env: &[(&str, &str)]) -> String {
    let mut child = Command::new(bin)
        .arg(n.to_string())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = stderr.read_to_string(&mut e);
        e
    });
    let mut err = Some(err);
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port: u16 = first
        .trim()
        .strip_prefix("port ")
        .unwrap_or_else(|| panic!("the server said {first:?}"))
        .parse()
        .unwrap();
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            s
        })
        .collect();
    let mut back = vec![0u8; MSG];
    for round in 0..2u8 {
        for (i, c) in conns.iter_mut().enumerate() {
            if let Err(e) = c.write_all(&message(i, round)) {
                fail(
                    &mut child,
                    &mut err,
                    format!("connection {i}, round {round}: {e}"),
                );
            }
        }
        for (i, c) in conns.iter_mut().enumerate() {
            if let Err(e) = c.read_exact(&mut back) {
                fail(
                    &mut child,
                    &mut err,
                    format!("connection {i}, round {round}: {e}"),
                );
            }
            assert_eq!(back, message(i, round), "connection {i}, round {round}");
        }
    }
    drop(conns);
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > PATIENCE {
            fail(&mut child, &mut err, "the server did not end".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let err = err.take().map(|t| t.join().unwrap()).unwrap_or_default();
    assert!(
        status.success() && rest.contains("all checks passed"),
        "the server failed: {status}\n{rest}\n{err}"
    );
    rest.lines().next().unwrap_or("").to_string()
}

#[test]
fn a_c_echo_server_holds_ten_thousand_connections_on_two_workers() {
    let dir = lib_dir();
    let bin = build(&dir, "weft-hook");
    // Each process holds one descriptor per connection (and a few more).
    let limit = raise_nofile(WANT as u64 + 256) as usize;
    let n = WANT.min(limit.saturating_sub(256));
    if n < WANT {
        skip::note(&format!(
            "RLIMIT_NOFILE is {limit} and cannot be raised: {n} connections instead of {WANT}"
        ));
    }
    for backend in ["uring", "threads"] {
        if backend == "uring" && !uring_available() {
            skip::note("io_uring cannot run here: the C echo ran on the thread fallback only");
            continue;
        }
        let line = serve_and_drive(&bin, n, &[("WEFT_IO_BACKEND", backend)]);
        assert_eq!(
            line,
            format!("most {n} live 0 echoed {}", 2 * n * MSG),
            "{backend}: the server did not hold every connection at once"
        );
    }
}

#[test]
fn ld_preload_puts_the_layer_under_a_program_linked_with_libweft() {
    let dir = lib_dir();
    let bin = build(&dir, "weft");
    let preload = dir.join("libweft-hook.so");
    let n = 1000;
    let line = serve_and_drive(&bin, n, &[("LD_PRELOAD", preload.to_str().unwrap())]);
    assert_eq!(line, format!("most {n} live 0 echoed {}", 2 * n * MSG));
}
