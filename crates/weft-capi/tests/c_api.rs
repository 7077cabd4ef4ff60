//! Builds the C tests in `tests/c/` with the system C compiler against
//! `include/weft/fibers.h` and the libweft built by cargo, runs them, and
//! checks the outcome.
//!
//! - Most C tests link `libweft.so` (with an rpath) and must exit 0.
//! - `overflow` must die by SIGSEGV after printing "stack overflow", the
//!   fiber's id and its stack size to stderr.
//! - Every C test also runs under valgrind memcheck (set `WEFT_SKIP_VALGRIND=1`
//!   to skip those where valgrind cannot be installed), and built with
//!   `-fsanitize=address` against a libweft built with AddressSanitizer (see
//!   [`asan_lib_dir`]; `WEFT_SKIP_ASAN=1` skips them), which each such run is checked
//!   to have loaded (`tests/c/asan_probe.c`, [`assert_ran_on_asan_libweft`]). A few
//!   run under valgrind in a form it can run: see [`VALGRIND_TESTS`].
//! - One test links `libweft.a` statically, one installs with `make install`
//!   into a scratch prefix and builds with `pkg-config --cflags --libs weft`.
//! - `runtime_ipc` is a C program on `include/weft/runtime.h` and
//!   `include/weft/ipc.h` (green threads and their synchronous IPC), run
//!   linked dynamically and statically; `runtime_ipc_header` checks those
//!   headers alone as C99 and C++11.
//! - `syslet` is a C program on `include/weft/syslet.h` (syslets: programs of
//!   system calls run asynchronously), run linked dynamically and statically
//!   (the static link also checks that the EFAULT recovery's exception table
//!   survives in `libweft.a`); `syslet_header` checks that header alone as
//!   C99 and C++11.
//!
//! - `examples/c/job_system.c`, a fiber job system, runs on weft and on ucontext
//!   (the same program), and on weft under AddressSanitizer and valgrind.
//!
//! The library is the one next to this test binary (`<target>/<profile>/`,
//! where `cargo build -p libweft` puts `libweft.so` and `libweft.a`). If it
//! is missing or older than a source file of weft-fiber, weft-runtime or
//! weft-capi, the harness runs `cargo build -p libweft` for the same
//! profile first.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

#[path = "../../../tests/support/skip.rs"]
mod skip;

/// How long one C test may run before it counts as hung (a ceiling against a hang only:
/// the tests take a second or two, longer on a busy machine).
const TIMEOUT: Duration = Duration::from_secs(120);
/// Under valgrind everything is much slower, and slower still on a busy machine.
const VALGRIND_TIMEOUT: Duration = Duration::from_secs(600);

const CFLAGS: &[&str] = &["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `<target>/<profile>`: where cargo put libweft for this test run.
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = find_lib_dir();
        ensure_library_fresh(&dir);
        dir
    })
}

fn find_lib_dir() -> PathBuf {
    // The test binary is <target>/<profile>/deps/c_api-<hash>.
    let exe = std::env::current_exe().expect("current_exe");
    if let Some(profile_dir) = exe
        .parent()
        .filter(|d| d.ends_with("deps"))
        .and_then(Path::parent)
    {
        return profile_dir.to_path_buf();
    }
    // Fallback: CARGO_TARGET_DIR or the workspace's target/, and the profile
    // guessed from the path of this binary.
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        Some(d) => workspace().join(d),
        None => workspace().join("target"),
    };
    let profile = if exe.to_string_lossy().contains("/release/") {
        "release"
    } else {
        "debug"
    };
    target.join(profile)
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
    walk(&ws.join("crates/weft-runtime/src"), &mut newest);
    walk(&ws.join("crates/weft-capi/src"), &mut newest);
    newest
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Rebuilds libweft (same profile) if it is missing or older than a source.
fn ensure_library_fresh(dir: &Path) {
    let so = dir.join("libweft.so");
    let a = dir.join("libweft.a");
    let newest = newest_source_mtime();
    let fresh = |p: &Path| mtime(p).is_some_and(|m| m >= newest);
    if fresh(&so) && fresh(&a) {
        return;
    }
    let profile = dir.file_name().and_then(OsStr::to_str).unwrap_or("debug");
    let target_dir = dir.parent().expect("target dir");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(&cargo);
    cmd.arg("build").arg("-p").arg("libweft");
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.arg("--profile").arg(other);
        }
    }
    cmd.env("CARGO_TARGET_DIR", target_dir)
        .current_dir(workspace());
    eprintln!(
        "libweft in {} is missing or stale; running {cmd:?}",
        dir.display()
    );
    let status = cmd.status().expect("run cargo build -p libweft");
    assert!(status.success(), "cargo build -p libweft failed: {status}");
    // Cargo knows what libweft is built from: a newer source file it does not compile
    // (behind a feature libweft does not use) leaves the library as it is, and rightly.
    assert!(
        so.is_file() && a.is_file(),
        "cargo build -p libweft did not produce {} and {}",
        so.display(),
        a.display()
    );
}

/// Where compiled C tests go.
fn out_dir() -> PathBuf {
    let d = lib_dir().join("weft-c-tests");
    std::fs::create_dir_all(&d).expect("create C test output dir");
    d
}

fn c_src(name: &str) -> PathBuf {
    workspace().join("tests/c").join(format!("{name}.c"))
}

fn include_dir() -> PathBuf {
    workspace().join("include")
}

/// Runs a compiler command and panics with its output if it fails.
fn run_compiler(cmd: Command, what: &str) {
    let shown = format!("{cmd:?}");
    let r = run_with_timeout(cmd, TIMEOUT);
    assert!(
        r.status.success(),
        "compiling {what} failed: {shown}\n{}",
        r.describe()
    );
}

/// Compiles tests/c/<name>.c against libweft.so; returns the binary.
fn build_c(name: &str) -> PathBuf {
    build_with("cc", name, &[], name)
}

/// Compiles tests/c/<src>.c with `compiler`, extra flags, into <out_name>.
fn build_with(compiler: &str, src: &str, extra: &[&str], out_name: &str) -> PathBuf {
    build_against(lib_dir(), compiler, &c_src(src), extra, out_name)
}

/// Compiles the C file `src` with `compiler` and extra flags into <out_name>, linked
/// against the libweft in `lib`.
fn build_against(
    lib: &Path,
    compiler: &str,
    src: &Path,
    extra: &[&str],
    out_name: &str,
) -> PathBuf {
    let out = out_dir().join(out_name);
    let mut cmd = Command::new(compiler);
    cmd.args(CFLAGS)
        .args(extra)
        .arg("-I")
        .arg(include_dir())
        .arg(src)
        .args(["-x", "none"]) // what follows is not source, whatever -x said
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(lib)
        .arg("-lweft")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lm");
    run_compiler(cmd, out_name);
    out
}

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs a command with a timeout, capturing its output.
fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (is it installed?)"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for child") {
            break st;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let st = child.wait().expect("wait for killed child");
            let stdout = String::from_utf8_lossy(&out_t.join().unwrap()).into_owned();
            let stderr = String::from_utf8_lossy(&err_t.join().unwrap()).into_owned();
            panic!(
                "{cmd:?} did not finish within {timeout:?} (hung?); killed\n{}",
                Run {
                    status: st,
                    stdout,
                    stderr
                }
                .describe()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Run {
        status,
        stdout: String::from_utf8_lossy(&out_t.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_t.join().unwrap()).into_owned(),
    }
}

fn run_bin(bin: &Path, args: &[&str]) -> Run {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    run_with_timeout(cmd, TIMEOUT)
}

fn assert_passed(r: &Run, name: &str) {
    assert!(r.status.success(), "C test {name} failed\n{}", r.describe());
    assert!(
        r.stdout.contains("all checks passed"),
        "C test {name} exited 0 without reporting success\n{}",
        r.describe()
    );
}

/// Compiles tests/c/<name>.c, runs it, and asserts it passed.
fn c_test(name: &str) {
    let bin = build_c(name);
    let r = run_bin(&bin, &[]);
    assert_passed(&r, name);
}

// ---- the C tests ----------------------------------------------------------

#[test]
fn c_convert() {
    c_test("convert");
}

#[test]
fn c_create_switch() {
    c_test("create_switch");
}

#[test]
fn c_delete() {
    c_test("delete");
}

#[test]
fn c_fls() {
    c_test("fls");
}

#[test]
fn c_fpu() {
    c_test("fpu");
}

#[test]
fn c_migrate_contention() {
    c_test("migrate_contention");
}

#[test]
fn c_signal_switch() {
    c_test("signal_switch");
}

#[test]
fn c_thread_exit() {
    c_test("thread_exit");
}

/// A thread that ends in a fiber it created leaves its converted fiber behind, and
/// another thread resumes it where it stopped, as on Windows.
#[test]
fn c_thread_outlived() {
    c_test("thread_outlived");
}

/// Deleted fibers' handles and values that never were handles: errors, nothing touched.
#[test]
fn c_stale_handles() {
    c_test("stale_handles");
}

/// exit() from a fiber: atexit handlers switch and use FLS; FLS callbacks at exit; a
/// thread stuck in its FLS callback does not stop the process from exiting.
#[test]
fn c_process_exit() {
    c_test("process_exit");
}

/// What Windows's own fiber tests check, apart from Windows internals.
#[test]
fn c_windows_behaviour() {
    c_test("windows_behaviour");
}

/// examples/c/job_system.c: a fiber job system (2 workers, 20 frames: a short run) on
/// weft, and the same program on ucontext; then on weft under AddressSanitizer and
/// valgrind.
#[test]
fn c_job_system_example() {
    let src = workspace().join("examples/c/job_system.c");
    let args = ["2", "20"];
    let weft = build_against(lib_dir(), "cc", &src, &[], "job_system");
    assert_passed(&run_bin(&weft, &args), "job_system");
    let ucontext = build_against(lib_dir(), "cc", &src, &["-DJOBS_UCONTEXT"], "job_system_uc");
    assert_passed(&run_bin(&ucontext, &args), "job_system (ucontext)");
    if let Some(lib) = asan_lib_dir() {
        let bin = build_asan(lib, &src, "job_system_asan");
        let r = {
            let mut cmd = asan_command(lib, &bin);
            cmd.args(args);
            run_with_timeout(cmd, TIMEOUT)
        };
        assert_no_asan_report(&r, "job_system");
        assert_ran_on_asan_libweft(&r, lib, "job_system");
        assert_passed(&r, "job_system (AddressSanitizer)");
    }
    if let Some(valgrind) = valgrind() {
        let mut cmd = Command::new(valgrind);
        cmd.args([
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--error-exitcode=9",
        ])
        .arg(&weft)
        .args(["2", "5"]);
        assert_passed(
            &run_with_timeout(cmd, VALGRIND_TIMEOUT),
            "job_system (valgrind)",
        );
    }
}

/// weft_introspect (include/weft/introspect.h), with a registry directory of
/// its own: the test makes a stale registry on purpose.
#[test]
fn c_introspect() {
    let bin = build_c("introspect");
    let dir = out_dir().join(format!("introspect-registry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the registry directory");
    let mut cmd = Command::new(&bin);
    cmd.env("WEFT_REGISTRY_DIR", &dir);
    let r = run_with_timeout(cmd, TIMEOUT);
    let _ = std::fs::remove_dir_all(&dir);
    assert_passed(&r, "introspect");
}

/// The languages a ported program may be written in: the header must work in both.
#[derive(Clone, Copy)]
enum Lang {
    C99,
    Cxx11,
}

/// Compiles tests/c/<name>.c as `lang` (pedantic), runs it, and asserts it passed.
fn c_test_as(name: &str, lang: Lang) {
    let (compiler, flags, label): (&str, &[&str], &str) = match lang {
        Lang::C99 => ("cc", &["-std=c99", "-pedantic"], "c99"),
        Lang::Cxx11 => ("c++", &["-std=c++11", "-pedantic", "-x", "c++"], "cxx11"),
    };
    let bin = build_with(compiler, name, flags, &format!("{name}_{label}"));
    assert_passed(&run_bin(&bin, &[]), &format!("{name} ({label})"));
}

#[test]
fn c_windows_program_c99() {
    c_test_as("windows_program", Lang::C99);
}

#[test]
fn c_windows_program_cxx11() {
    c_test_as("windows_program", Lang::Cxx11);
}

#[test]
fn c_header_c99() {
    c_test_as("header_check", Lang::C99);
}

#[test]
fn c_header_cxx11() {
    c_test_as("header_check", Lang::Cxx11);
}

/// Green threads and IPC from C (runtime.h, ipc.h): a server answering calls from
/// clients on both workers, payloads, timeouts, unknown ids, calls from a plain
/// thread, cancellation, partner death, shutdown.
#[test]
fn c_runtime_ipc() {
    c_test("runtime_ipc");
}

#[test]
fn c_runtime_ipc_header_c99() {
    c_test_as("runtime_ipc_header", Lang::C99);
}

#[test]
fn c_runtime_ipc_header_cxx11() {
    c_test_as("runtime_ipc_header", Lang::Cxx11);
}

/// Syslets from C (syslet.h): open -> read -> close with results feeding arguments, a
/// failing open naming atom 0, a skip branch, umem_add loops, asynchronous pipe reads,
/// cancel, NO_COMPLETE, bad pointers (-EFAULT), validation errors, ring overflow, the
/// seed's server loop, async_wait from a green thread, NULL arguments.
#[test]
fn c_syslet() {
    c_test("syslet");
}

#[test]
fn c_syslet_header_c99() {
    c_test_as("syslet_header", Lang::C99);
}

#[test]
fn c_syslet_header_cxx11() {
    c_test_as("syslet_header", Lang::Cxx11);
}

/// The Rust definitions of the syslet atom and completion have the layouts syslet.h
/// declares (the atom is the seed's `struct syslet_uatom`).
#[test]
fn syslet_layouts_match_header() {
    use core::mem::{offset_of, size_of};
    use weft_capi::{SysletUatom as A, WeftSysletCompletion as C};
    assert_eq!(size_of::<A>(), 88);
    assert_eq!(offset_of!(A, flags), 0);
    assert_eq!(offset_of!(A, nr), 8);
    assert_eq!(offset_of!(A, ret_ptr), 16);
    assert_eq!(offset_of!(A, next), 24);
    assert_eq!(offset_of!(A, arg_ptr), 32);
    assert_eq!(offset_of!(A, private), 80);
    assert_eq!(size_of::<C>(), 24);
    assert_eq!(offset_of!(C, atom), 0);
    assert_eq!(offset_of!(C, ret), 8);
    assert_eq!(offset_of!(C, handle), 16);
    use weft_runtime::syslet as s;
    assert_eq!(
        [
            s::SYSLET_ASYNC,
            s::SYSLET_SYNC,
            s::SYSLET_NO_COMPLETE,
            s::SYSLET_STOP_ON_NONZERO,
            s::SYSLET_STOP_ON_ZERO,
            s::SYSLET_STOP_ON_NEGATIVE,
            s::SYSLET_STOP_ON_NON_POSITIVE,
            s::SYSLET_SKIP_TO_NEXT_ON_STOP,
        ],
        [0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80],
        "the SYSLET_* values of syslet.h"
    );
    assert_eq!(s::SYS_UMEM_ADD, 0x10_0000, "SYS_UMEM_ADD of syslet.h");
}

/// The Rust definition of the IPC message has the layout ipc.h declares.
#[test]
fn ipc_msg_layout_matches_header() {
    use core::mem::{offset_of, size_of};
    use weft_capi::WeftIpcMsg as M;
    assert_eq!(size_of::<M>(), 48);
    assert_eq!(offset_of!(M, words), 0);
    assert_eq!(offset_of!(M, payload), 32);
    assert_eq!(offset_of!(M, payload_len), 40);
}

/// The Rust definition of the stats struct has the layout the header declares.
#[test]
fn stats_layout_matches_header() {
    use core::mem::{offset_of, size_of};
    use weft_capi::WeftFiberStats as S;
    assert_eq!(size_of::<S>(), 64);
    assert_eq!(offset_of!(S, id), 0);
    assert_eq!(offset_of!(S, entry), 8);
    assert_eq!(offset_of!(S, stack_size), 16);
    assert_eq!(offset_of!(S, activations), 24);
    assert_eq!(offset_of!(S, failed_activations), 32);
    assert_eq!(offset_of!(S, run_time_ns), 40);
    assert_eq!(offset_of!(S, state), 48);
    assert_eq!(offset_of!(S, creator_tid), 52);
    assert_eq!(offset_of!(S, last_tid), 56);
    assert_eq!(offset_of!(S, _reserved), 60);
}

/// The Rust definition of the introspection record has the layout the header declares.
#[test]
fn fiber_info_layout_matches_header() {
    use core::mem::{offset_of, size_of};
    use weft_capi::WeftFiberInfo as I;
    assert_eq!(size_of::<I>(), 80);
    assert_eq!(offset_of!(I, id), 0);
    assert_eq!(offset_of!(I, state), 8);
    assert_eq!(offset_of!(I, is_thread_fiber), 12);
    assert_eq!(offset_of!(I, entry), 16);
    assert_eq!(offset_of!(I, creator_tid), 24);
    assert_eq!(offset_of!(I, running_on), 28);
    assert_eq!(offset_of!(I, last_tid), 32);
    assert_eq!(offset_of!(I, flags), 36);
    assert_eq!(offset_of!(I, activations), 40);
    assert_eq!(offset_of!(I, failed_activations), 48);
    assert_eq!(offset_of!(I, run_time_ns), 56);
    assert_eq!(offset_of!(I, stack_base), 64);
    assert_eq!(offset_of!(I, stack_size), 72);
}

/// A fiber the reader could not copy as one (`FiberInfo::consistent` false, `?` in
/// `weft ps`) carries `WEFT_FIBER_INFO_INCONSISTENT` in the C record's `flags` (the
/// field that was reserved); a consistent one has `flags` 0, as before.
#[test]
fn fiber_info_flags_mark_a_fiber_not_read_consistently() {
    use weft_capi::{WeftFiberInfo, WEFT_FIBER_INFO_INCONSISTENT};
    use weft_fiber::introspect::FiberInfo;
    let fiber = |consistent| FiberInfo {
        id: 42,
        state: weft_fiber::FiberState::Running,
        is_thread_fiber: false,
        entry: 0x1000,
        creator_tid: 7,
        running_on: Some(8),
        last_tid: 8,
        activations: 5,
        failed_activations: 1,
        deactivations: 4,
        run_time: Duration::from_nanos(1234),
        stack_base: 0x7000_0000,
        stack_size: 65536,
        name: None,
        function: None,
        spawned_at: None,
        consistent,
    };
    let expected = |flags| WeftFiberInfo {
        id: 42,
        state: 1,
        is_thread_fiber: 0,
        entry: 0x1000,
        creator_tid: 7,
        running_on: 8,
        last_tid: 8,
        flags,
        activations: 5,
        failed_activations: 1,
        run_time_ns: 1234,
        stack_base: 0x7000_0000,
        stack_size: 65536,
    };
    assert_eq!(WEFT_FIBER_INFO_INCONSISTENT, 1);
    assert_eq!(WeftFiberInfo::from(&fiber(true)), expected(0));
    assert_eq!(
        WeftFiberInfo::from(&fiber(false)),
        expected(WEFT_FIBER_INFO_INCONSISTENT)
    );
}

// ---- stack overflow --------------------------------------------------------

fn overflow(mode: &str) {
    // One binary per mode: the two tests run in parallel and must not write the same file.
    let bin = build_with("cc", "overflow", &[], &format!("overflow_{mode}"));
    let mut cmd = Command::new(&bin);
    // It dies by SIGSEGV on purpose: leave no stale registry behind.
    cmd.arg(mode).env("WEFT_REGISTRY", "off");
    let r = run_with_timeout(cmd, TIMEOUT);
    let id: u64 = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("overflow fiber id "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "overflow ({mode}) did not print its fiber id\n{}",
                r.describe()
            )
        });
    assert_eq!(
        r.status.signal(),
        Some(libc::SIGSEGV),
        "overflow ({mode}) should die by SIGSEGV\n{}",
        r.describe()
    );
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("stack overflow"))
        .unwrap_or_else(|| {
            panic!(
                "overflow ({mode}): no \"stack overflow\" line on stderr\n{}",
                r.describe()
            )
        });
    let tokens: Vec<&str> = line
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    assert!(
        tokens.contains(&id.to_string().as_str()),
        "overflow ({mode}): the stack overflow line does not name fiber {id}: {line:?}\n{}",
        r.describe()
    );
    assert!(
        tokens.contains(&"65536"),
        "overflow ({mode}): the stack overflow line does not give the stack size 65536: {line:?}\n{}",
        r.describe()
    );
}

#[test]
fn c_overflow_main_thread() {
    overflow("main");
}

#[test]
fn c_overflow_other_thread() {
    overflow("thread");
}

/// A converted thread whose start routine runs off the start stack weft gave it (the
/// interposed `pthread_create`, `thread_stack.rs`): the line names the thread, its
/// start stack and that stack's size (the fiber's, 0, is not shown), and advises the
/// thread's stack size, not CreateFiber's.
#[test]
fn c_overflow_thread_start_stack() {
    let bin = build_with("cc", "overflow", &[], "overflow_start");
    let mut cmd = Command::new(&bin);
    cmd.arg("start").env("WEFT_REGISTRY", "off");
    let r = run_with_timeout(cmd, TIMEOUT);
    let (tid, size) = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("overflow thread tid "))
        .and_then(|rest| {
            let mut w = rest.split_whitespace();
            Some((w.next()?.to_string(), w.nth(1)?.to_string()))
        })
        .unwrap_or_else(|| panic!("overflow start: no thread id\n{}", r.describe()));
    assert_eq!(r.status.signal(), Some(libc::SIGSEGV), "{}", r.describe());
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("stack overflow"))
        .unwrap_or_else(|| panic!("no \"stack overflow\" line on stderr\n{}", r.describe()));
    let head = format!("weft: stack overflow in thread {tid}'s start routine (on the start stack weft gave the thread, {size} bytes; its converted fiber ");
    assert!(line.starts_with(&head), "{line:?}\n{}", r.describe());
    assert!(
        line.contains("give the thread a larger stack: pthread_attr_setstacksize"),
        "{line:?}"
    );
    assert!(!line.contains("CreateFiber"), "{line:?}");
}

// ---- valgrind ------------------------------------------------------------------

/// How a C test runs under valgrind: its arguments and environment (`clean_env`: only
/// that, PATH and HOME), and a suppressions file for what it does wrong on purpose.
struct Vg {
    name: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    clean_env: bool,
    supp: Option<&'static str>,
}

/// The C tests run under valgrind: all of them but `fpu`, whose subject (arithmetic
/// under other rounding modes) valgrind does not emulate (it computes SSE arithmetic
/// rounded to nearest whatever MXCSR says), so its checks fail under valgrind alone.
/// `syslet` runs with its thread backends (valgrind does not understand io_uring) and
/// with `tests/c/valgrind.supp`, which names the reads, writes and system call
/// arguments through pointers that the test makes bad on purpose (the EFAULT checks).
/// Those checks take SIGSEGVs on the main thread, and valgrind 3.19 cannot deliver them
/// ("Can't extend stack ... during signal delivery") when the process starts with an
/// environment as large as cargo's, with any libweft: it runs with a small one.
/// `overflow` dies by SIGSEGV on purpose, as it does outside valgrind. `runtime_ipc`
/// runs with the thread backend (valgrind does not understand io_uring's shared rings).
const VALGRIND_TESTS: &[Vg] = &[
    Vg::plain("convert"),
    Vg::plain("create_switch"),
    Vg::plain("delete"),
    Vg::plain("fls"),
    Vg::plain("migrate_contention"),
    Vg::plain("signal_switch"),
    Vg::plain("thread_exit"),
    Vg::plain("thread_outlived"),
    Vg::plain("stale_handles"),
    Vg::plain("process_exit"),
    Vg::plain("windows_behaviour"),
    Vg::plain("windows_program"),
    Vg::plain("header_check"),
    Vg::plain("runtime_ipc_header"),
    Vg::plain("syslet_header"),
    Vg::plain("introspect"),
    Vg {
        name: "runtime_ipc",
        args: &[],
        env: &[("WEFT_IO_BACKEND", "threads")],
        clean_env: false,
        supp: None,
    },
    Vg {
        name: "syslet",
        args: &[],
        env: &[("WEFT_IO_BACKEND", "threads"), ("WEFT_SYSLET_URING", "off")],
        clean_env: true,
        supp: Some("valgrind.supp"),
    },
];

impl Vg {
    const fn plain(name: &'static str) -> Vg {
        Vg {
            name,
            args: &[],
            env: &[],
            clean_env: false,
            supp: None,
        }
    }
}

/// valgrind's path, or None (the test is skipped) with `WEFT_SKIP_VALGRIND=1`.
fn valgrind() -> Option<PathBuf> {
    if std::env::var_os("WEFT_SKIP_VALGRIND").is_some_and(|v| v == "1") {
        skip::skip("WEFT_SKIP_VALGRIND=1: the valgrind runs of the C tests are skipped");
        return None;
    }
    let found = ["/usr/bin/valgrind", "/usr/local/bin/valgrind"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| {
            Command::new("valgrind")
                .arg("--version")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| PathBuf::from("valgrind"))
        })
        .unwrap_or_else(|| {
            panic!(
                "valgrind is not installed: install it (apt-get install valgrind) to run the \
                 C tests under memcheck, or set WEFT_SKIP_VALGRIND=1 to skip them"
            )
        });
    Some(found)
}

/// Runs one C test under memcheck: no error, no definite leak, and it passes.
fn valgrind_test(name: &str) {
    let Some(valgrind) = valgrind() else { return };
    let vg = VALGRIND_TESTS
        .iter()
        .find(|v| v.name == name)
        .expect("a test of VALGRIND_TESTS");
    let bin = build_with("cc", vg.name, &[], &format!("{}_vg", vg.name));
    let dir = out_dir().join(format!("{}-vg-registry-{}", vg.name, std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a registry directory");
    let mut cmd = Command::new(valgrind);
    cmd.args([
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--error-exitcode=9",
    ]);
    if let Some(supp) = vg.supp {
        cmd.arg(format!(
            "--suppressions={}",
            workspace().join("tests/c").join(supp).display()
        ));
    }
    if vg.clean_env {
        cmd.env_clear();
        for keep in ["PATH", "HOME"] {
            if let Some(v) = std::env::var_os(keep) {
                cmd.env(keep, v);
            }
        }
    }
    cmd.arg(&bin)
        .args(vg.args)
        .envs(vg.env.iter().copied())
        .env("WEFT_REGISTRY_DIR", &dir);
    let r = run_with_timeout(cmd, VALGRIND_TIMEOUT);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        r.status.success(),
        "{name} under valgrind failed (exit 9 = valgrind found errors or definite leaks)\n{}",
        r.describe()
    );
    assert!(r.stdout.contains("all checks passed"), "{}", r.describe());
}

macro_rules! valgrind_tests {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            valgrind_test($name);
        }
    )*};
}

valgrind_tests! {
    c_convert_valgrind: "convert",
    c_create_switch_valgrind: "create_switch",
    c_delete_valgrind: "delete",
    c_fls_valgrind: "fls",
    c_migrate_contention_valgrind: "migrate_contention",
    c_signal_switch_valgrind: "signal_switch",
    c_thread_exit_valgrind: "thread_exit",
    c_thread_outlived_valgrind: "thread_outlived",
    c_stale_handles_valgrind: "stale_handles",
    c_process_exit_valgrind: "process_exit",
    c_windows_behaviour_valgrind: "windows_behaviour",
    c_windows_program_valgrind: "windows_program",
    c_header_check_valgrind: "header_check",
    c_runtime_ipc_header_valgrind: "runtime_ipc_header",
    c_syslet_header_valgrind: "syslet_header",
    c_introspect_valgrind: "introspect",
    c_runtime_ipc_valgrind: "runtime_ipc",
    c_syslet_valgrind: "syslet",
}

/// `overflow` under valgrind: it still names the fiber and dies by SIGSEGV.
#[test]
fn c_overflow_valgrind() {
    let Some(valgrind) = valgrind() else { return };
    let bin = build_with("cc", "overflow", &[], "overflow_vg");
    let mut cmd = Command::new(valgrind);
    cmd.arg("--error-exitcode=9")
        .arg(&bin)
        .arg("thread")
        .env("WEFT_REGISTRY", "off");
    assert_overflow_death(&run_with_timeout(cmd, VALGRIND_TIMEOUT), "valgrind");
}

/// `overflow` run under a tool died as it does without: the message, then SIGSEGV.
fn assert_overflow_death(r: &Run, tool: &str) {
    assert_eq!(
        r.status.signal(),
        Some(libc::SIGSEGV),
        "overflow under {tool} should die by SIGSEGV\n{}",
        r.describe()
    );
    assert!(
        r.stderr.contains("weft: stack overflow in fiber"),
        "{}",
        r.describe()
    );
}

// ---- AddressSanitizer -----------------------------------------------------------

/// Where the AddressSanitizer build of libweft is, building it first: with nightly
/// Rust (`-Zsanitizer=address`, which stable Rust does not accept) into
/// `<target>/asan`, so that weft's own code is instrumented (and its context switches
/// announced to ASan: weft-fiber's `sanitizer.rs`). The C tests are built with
/// `-fsanitize=address` against it, and the C compiler's ASan runtime serves both. The
/// library is checked to be instrumented, and each run to have loaded it
/// ([`assert_ran_on_asan_libweft`]).
///
/// Without a nightly toolchain (`rustup toolchain install nightly`), the C tests are
/// built with `-fsanitize=address` against the ordinary libweft instead, and the run
/// says so: ASan then checks the tests' own code and every malloc/free in the process
/// (double frees, frees of foreign pointers, leaks), but not weft's own loads and
/// stores. Returns None when `WEFT_SKIP_ASAN=1`.
fn asan_lib_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        if std::env::var_os("WEFT_SKIP_ASAN").is_some_and(|v| v == "1") {
            return None;
        }
        let target = lib_dir().parent().expect("target dir").join("asan");
        let triple = "x86_64-unknown-linux-gnu";
        let nightly = Command::new("rustup")
            .args(["run", "nightly", "rustc", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !nightly || !cfg!(target_arch = "x86_64") {
            skip::note(
                "no nightly Rust toolchain (rustup toolchain install nightly): the C tests are \
                 built with -fsanitize=address against the ordinary libweft, so ASan checks \
                 their code and every malloc/free, but not weft's own memory accesses",
            );
            return Some(lib_dir().to_path_buf());
        }
        let mut cmd = Command::new("rustup");
        cmd.args(["run", "nightly", "cargo", "build", "-p", "libweft"])
            .args(["--target", triple])
            .env("CARGO_TARGET_DIR", &target)
            .env("RUSTFLAGS", "-Zsanitizer=address")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTUP_TOOLCHAIN")
            .current_dir(workspace());
        eprintln!("building libweft with AddressSanitizer: {cmd:?}");
        let status = cmd.status().expect("run rustup");
        assert!(
            status.success(),
            "the AddressSanitizer build of libweft failed"
        );
        let dir = target.join(triple).join("debug");
        assert_instrumented(&dir.join("libweft.so"));
        Some(dir)
    })
    .as_deref()
}

/// `so` is a libweft built with AddressSanitizer: it calls ASan's checks, and its
/// context switch announces stack switches to ASan.
fn assert_instrumented(so: &Path) {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(so)
        .output()
        .unwrap_or_else(|e| panic!("cannot run readelf ({e}); install binutils"));
    let syms = String::from_utf8_lossy(&out.stdout);
    for sym in ["__asan_report_load8", "__sanitizer_start_switch_fiber"] {
        assert!(
            syms.contains(sym),
            "{} is not an AddressSanitizer build of libweft: it does not use {sym}",
            so.display()
        );
    }
}

/// tests/c/asan_probe.c: linked into every C test built with AddressSanitizer.
fn asan_probe() -> PathBuf {
    c_src("asan_probe")
}

/// Compiles the C file `src` with `-fsanitize=address` (and the probe) against the
/// libweft in `lib`.
fn build_asan(lib: &Path, src: &Path, out_name: &str) -> PathBuf {
    let probe = asan_probe();
    let flags = [
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        probe.to_str().expect("a UTF-8 path"),
    ];
    build_against(lib, "cc", src, &flags, out_name)
}

/// A command running `bin` (built by [`build_asan`]) against the libweft in `lib` and
/// no other: cargo's test runner puts `<target>/debug` on `LD_LIBRARY_PATH`, which the
/// dynamic loader searches before the binary's runpath, and the ordinary libweft.so is
/// there. So the child's library path is `lib` alone.
fn asan_command(lib: &Path, bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env("LD_LIBRARY_PATH", lib)
        .env("ASAN_OPTIONS", "detect_leaks=1");
    cmd
}

/// The probe's line in `r` says that the process ran with ASan's runtime and loaded
/// `<lib>/libweft.so`, the AddressSanitizer build (or, without nightly Rust, the ordinary
/// one that stands in for it).
fn assert_ran_on_asan_libweft(r: &Run, lib: &Path, name: &str) {
    let want = lib
        .join("libweft.so")
        .canonicalize()
        .expect("the ASan libweft.so");
    let line = r
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("weft-asan-probe: "))
        .unwrap_or_else(|| {
            panic!(
                "{name} under AddressSanitizer: no line from tests/c/asan_probe.c\n{}",
                r.describe()
            )
        });
    let loaded = line.strip_prefix("asan=yes libweft=").map(|p| {
        Path::new(p)
            .canonicalize()
            .unwrap_or_else(|_| PathBuf::from(p))
    });
    assert_eq!(
        loaded.as_deref(),
        Some(want.as_path()),
        "{name} under AddressSanitizer did not run with ASan and {} (probe: {line})\n{}",
        want.display(),
        r.describe()
    );
}

/// Builds tests/c/<name>.c with `-fsanitize=address` against the ASan libweft, runs it
/// with `args`, checks that it ran on that libweft, and returns how it ran (None when
/// skipped).
fn asan_run(name: &str, args: &[&str], env: &[(&str, &str)]) -> Option<Run> {
    let lib = asan_lib_dir()?;
    let out = build_asan(lib, &c_src(name), &format!("{name}_asan"));
    let dir = out_dir().join(format!("{name}-asan-registry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a registry directory");
    let mut cmd = asan_command(lib, &out);
    cmd.args(args)
        .envs(env.iter().copied())
        .env("WEFT_REGISTRY_DIR", &dir);
    let r = run_with_timeout(cmd, TIMEOUT);
    let _ = std::fs::remove_dir_all(&dir);
    assert_ran_on_asan_libweft(&r, lib, name);
    Some(r)
}

/// No AddressSanitizer or LeakSanitizer report in `r`.
fn assert_no_asan_report(r: &Run, name: &str) {
    for what in ["ERROR: AddressSanitizer", "ERROR: LeakSanitizer"] {
        assert!(
            !r.stderr.contains(what),
            "{name} under AddressSanitizer: {what}\n{}",
            r.describe()
        );
    }
}

fn asan_test(name: &str) {
    let Some(r) = asan_run(name, &[], &[]) else {
        skip::skip("WEFT_SKIP_ASAN=1: the AddressSanitizer runs of the C tests are skipped");
        return;
    };
    assert_no_asan_report(&r, name);
    assert_passed(&r, &format!("{name} (AddressSanitizer)"));
}

macro_rules! asan_tests {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            asan_test($name);
        }
    )*};
}

asan_tests! {
    c_convert_asan: "convert",
    c_create_switch_asan: "create_switch",
    c_delete_asan: "delete",
    c_fls_asan: "fls",
    c_fpu_asan: "fpu",
    c_migrate_contention_asan: "migrate_contention",
    c_signal_switch_asan: "signal_switch",
    c_thread_exit_asan: "thread_exit",
    c_thread_outlived_asan: "thread_outlived",
    c_stale_handles_asan: "stale_handles",
    c_process_exit_asan: "process_exit",
    c_windows_behaviour_asan: "windows_behaviour",
    c_windows_program_asan: "windows_program",
    c_header_check_asan: "header_check",
    c_runtime_ipc_header_asan: "runtime_ipc_header",
    c_syslet_header_asan: "syslet_header",
    c_runtime_ipc_asan: "runtime_ipc",
    c_syslet_asan: "syslet",
    c_introspect_asan: "introspect",
}

/// `overflow` under AddressSanitizer: it still names the fiber and dies by SIGSEGV.
#[test]
fn c_overflow_asan() {
    if let Some(r) = asan_run("overflow", &["thread"], &[("WEFT_REGISTRY", "off")]) {
        assert_overflow_death(&r, "AddressSanitizer");
    }
}

// ---- static linking -----------------------------------------------------------

fn build_static(src: &str, extra: &[&str], out_name: &str, compiler: &str) -> PathBuf {
    let out = out_dir().join(out_name);
    let mut cmd = Command::new(compiler);
    cmd.args(CFLAGS)
        .args(extra)
        .arg("-I")
        .arg(include_dir())
        .arg(c_src(src))
        .args(["-x", "none"]) // what follows is not source, whatever -x said
        .arg("-o")
        .arg(&out)
        .arg(lib_dir().join("libweft.a"))
        // What `cargo rustc -- --print native-static-libs` lists.
        .args([
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ]);
    run_compiler(cmd, out_name);
    out
}

fn assert_not_linked_to_libweft_so(bin: &Path) {
    let out = Command::new("readelf").arg("-d").arg(bin).output();
    if let Ok(out) = out {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("libweft"),
            "{} should not need libweft.so:\n{text}",
            bin.display()
        );
    }
}

#[test]
fn c_static_link() {
    for (src, extra, name, compiler) in [
        ("windows_program", &[][..], "windows_program_static", "cc"),
        ("create_switch", &[][..], "create_switch_static", "cc"),
        ("runtime_ipc", &[][..], "runtime_ipc_static", "cc"),
        ("syslet", &[][..], "syslet_static", "cc"),
        (
            "header_check",
            &["-std=c++11", "-x", "c++"][..],
            "header_check_static_cxx",
            "c++",
        ),
    ] {
        let bin = build_static(src, extra, name, compiler);
        assert_not_linked_to_libweft_so(&bin);
        let mut cmd = Command::new(&bin);
        cmd.env_remove("LD_LIBRARY_PATH");
        let r = run_with_timeout(cmd, TIMEOUT);
        assert_passed(&r, name);
    }
}

// ---- make install + pkg-config ------------------------------------------------

#[test]
fn make_install_and_pkg_config() {
    let lib = lib_dir();
    let prefix = out_dir().join(format!("prefix-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&prefix);
    let make = |target: &str| {
        let mut cmd = Command::new("make");
        cmd.arg("-s")
            .arg("-C")
            .arg(workspace())
            .arg(target)
            .arg(format!("PREFIX={}", prefix.display()))
            .arg(format!("BUILD_DIR={}", lib.display()))
            .arg("NO_BUILD=1");
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run make ({e}); install make"));
        assert!(
            out.status.success(),
            "{cmd:?} failed\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    make("install");
    for f in [
        "lib/libweft.so",
        "lib/libweft.a",
        "lib/pkgconfig/weft.pc",
        "include/weft/fibers.h",
        "include/weft/introspect.h",
        "include/weft/runtime.h",
        "include/weft/ipc.h",
        "include/weft/syslet.h",
    ] {
        assert!(prefix.join(f).is_file(), "make install did not install {f}");
    }
    // The weft command goes to bin/ too (with NO_BUILD=1, when cargo has built it).
    let cli_built = lib.join("weft").is_file();
    if cli_built {
        let out = Command::new(prefix.join("bin/weft"))
            .arg("--version")
            .output()
            .expect("make install did not install bin/weft");
        assert!(out.status.success(), "installed weft --version failed");
    }
    for h in ["fibers.h", "introspect.h", "runtime.h", "ipc.h", "syslet.h"] {
        assert_eq!(
            std::fs::read(prefix.join("include/weft").join(h)).unwrap(),
            std::fs::read(include_dir().join("weft").join(h)).unwrap(),
            "installed {h} differs from include/weft/{h}"
        );
    }

    let pkgconfig_dir = prefix.join("lib/pkgconfig");
    let pkg_config = |args: &[&str]| -> String {
        let out = Command::new("pkg-config")
            .args(args)
            .arg("weft")
            .env("PKG_CONFIG_PATH", &pkgconfig_dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run pkg-config ({e}); install pkg-config"));
        assert!(
            out.status.success(),
            "pkg-config {args:?} weft failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(pkg_config(&["--modversion"]), env!("CARGO_PKG_VERSION"));
    let flags = pkg_config(&["--cflags", "--libs"]);
    assert!(flags.contains("-lweft"), "pkg-config flags: {flags}");
    assert!(
        flags.contains(&format!("-I{}/include", prefix.display())),
        "pkg-config flags: {flags}"
    );

    let bin = prefix.join("windows_program_pkgconfig");
    let mut cmd = Command::new("cc");
    cmd.args(CFLAGS)
        .arg(c_src("windows_program"))
        .arg("-o")
        .arg(&bin)
        .args(flags.split_whitespace());
    run_compiler(cmd, "windows_program with pkg-config flags");
    let mut cmd = Command::new(&bin);
    cmd.env("LD_LIBRARY_PATH", prefix.join("lib"));
    assert_passed(
        &run_with_timeout(cmd, TIMEOUT),
        "windows_program (pkg-config)",
    );

    // Static linking through pkg-config --static.
    let static_flags = pkg_config(&["--static", "--cflags", "--libs"]);
    let bin_static = prefix.join("windows_program_pkgconfig_static");
    let mut cmd = Command::new("cc");
    cmd.args(CFLAGS)
        .arg(c_src("windows_program"))
        .arg("-o")
        .arg(&bin_static)
        .arg(format!("-I{}/include", prefix.display()))
        .arg(prefix.join("lib/libweft.a"))
        .args(
            static_flags
                .split_whitespace()
                .filter(|f| f.starts_with("-l") && *f != "-lweft"),
        );
    run_compiler(cmd, "windows_program with pkg-config --static flags");
    let mut cmd = Command::new(&bin_static);
    cmd.env_remove("LD_LIBRARY_PATH");
    assert_passed(
        &run_with_timeout(cmd, TIMEOUT),
        "windows_program (pkg-config --static)",
    );

    make("uninstall");
    for f in [
        "lib/libweft.so",
        "lib/libweft.a",
        "lib/pkgconfig/weft.pc",
        "include/weft/fibers.h",
        "include/weft/introspect.h",
        "include/weft/runtime.h",
        "include/weft/ipc.h",
        "include/weft/syslet.h",
    ] {
        assert!(!prefix.join(f).exists(), "make uninstall left {f}");
    }
    assert!(
        !prefix.join("bin/weft").exists(),
        "make uninstall left bin/weft"
    );
    let _ = std::fs::remove_dir_all(&prefix);
}
