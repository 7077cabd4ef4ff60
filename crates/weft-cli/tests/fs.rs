//! `weft fs mount DIR` / `weft fs umount DIR`: the FUSE view of the fiber
//! registries, against a live C program (`tests/c/introspect_target.c`,
//! compiled here against `include/` and the libweft.so cargo built).
//!
//! The tests mount for real. If FUSE cannot be mounted here (no /dev/fuse, no
//! permission, no fusermount3 for a non-root user) they FAIL and say why; set
//! `WEFT_SKIP_FUSE=1` to skip them where FUSE is known to be unavailable.
//!
//! All tests of this binary share one registry directory (`WEFT_REGISTRY_DIR`,
//! set for this process too, so `weft_fiber::introspect::read` here reads the
//! same registries as the mount); each test looks only at its own target's pid.
//!
//! libweft is the one in `<target>/<profile>/`, next to the `weft` binary; if it
//! is missing or older than a source file of weft-fiber or weft-capi, the
//! harness runs `cargo build -p libweft` for the same profile first.

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use weft_fiber::introspect::{self, FiberInfo};
use weft_fiber::FiberState;

mod common;
use common::{profile_dir, skip, text, weft, Target, WEFT};

// ---- libweft, the target program, the registry directory ------------------------

/// This binary's scratch directory (`<target>/<profile>/weft-fs-tests/<pid>`);
/// its `registry/` is `WEFT_REGISTRY_DIR` for this process, the targets and
/// the mounts.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Under the target directory, so `cargo clean` removes what a failed
        // run leaves behind.
        let parent = profile_dir().join("weft-fs-tests");
        // Remove what earlier runs left (their test process is gone).
        for e in std::fs::read_dir(&parent).into_iter().flatten().flatten() {
            let name = e.file_name();
            let gone = name
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
            if gone && !is_mount_point(&e.path()) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        let d = parent.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("registry")).unwrap();
        // Set once, before any test of this binary reads it.
        std::env::set_var("WEFT_REGISTRY_DIR", d.join("registry"));
        d
    })
}

fn registry_dir() -> PathBuf {
    scratch().join("registry")
}

/// True (and reported as a skip) when the FUSE tests are to be skipped.
fn skip_fuse() -> bool {
    if std::env::var_os("WEFT_SKIP_FUSE").is_some_and(|v| v == "1") {
        skip("WEFT_SKIP_FUSE=1: this test mounts a FUSE filesystem");
        return true;
    }
    false
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("wait for a child") {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `dir` is a mount point (in /proc/self/mountinfo).
fn is_mount_point(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(dir))
}

/// A `weft fs mount DIR` process; stopped and unmounted when dropped.
struct Mount {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl Mount {
    /// Creates an empty DIR under the scratch directory and mounts on it.
    fn start(name: &str) -> Mount {
        let dir = scratch().join(format!("mnt-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = scratch().join(format!("mount-{name}.log"));
        let child = Command::new(WEFT)
            .args(["fs", "mount"])
            .arg(&dir)
            .env("WEFT_REGISTRY_DIR", registry_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run weft fs mount");
        Mount { child, dir, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `DIR/<rel>` exists. Fails clearly if the mount process
    /// exits first (FUSE unavailable, ...) or nothing appears in 60 s.
    fn wait_for(&mut self, rel: &str) {
        let path = self.dir.join(rel);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!(
                    "`weft fs mount {}` exited ({st}) before {} appeared: FUSE could not be \
                     mounted in this environment. It needs /dev/fuse and root (CAP_SYS_ADMIN) or \
                     fusermount3 (apt-get install fuse3); set WEFT_SKIP_FUSE=1 to skip the FUSE \
                     tests where FUSE is unavailable.\n--- its stderr ---\n{}",
                    self.dir.display(),
                    path.display(),
                    self.log()
                );
            }
            if path.exists() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not appear within 60 s of `weft fs mount`\n--- its stderr ---\n{}",
                path.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: signalling our own child by its pid.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            if wait_exit(&mut self.child, Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        if is_mount_point(&self.dir) {
            let c = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
            // SAFETY: a valid path; detaching a mount this test made.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.log);
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn fiber(pid: i32, id: u64) -> FiberInfo {
    introspect::read(pid)
        .unwrap_or_else(|e| panic!("introspect::read({pid}): {e}"))
        .fibers
        .into_iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("fiber {id} not in the registry of {pid}"))
}

/// Parses "total execution time: 1.234567 ms" into nanoseconds.
fn parse_ms(v: &str) -> u128 {
    let num = v
        .strip_suffix(" ms")
        .unwrap_or_else(|| panic!("time without \" ms\": {v:?}"));
    let (whole, frac) = num
        .split_once('.')
        .unwrap_or_else(|| panic!("time without decimals: {v:?}"));
    assert_eq!(frac.len(), 6, "time with nanosecond precision: {v:?}");
    whole.parse::<u128>().unwrap() * 1_000_000 + frac.parse::<u128>().unwrap()
}

/// `lo <= shown <= hi`, give or take 1% and 1 us (the reader converts clock
/// ticks to time with a rate it measures at each read).
fn assert_time_between(shown: u128, lo: Duration, hi: Duration, what: &str) {
    let (lo, hi) = (lo.as_nanos(), hi.as_nanos());
    // (Saturating: a lower bound under about 1 us would otherwise underflow.)
    let lo = lo.saturating_sub(lo / 100 + 1000);
    let hi = hi + hi / 100 + 1000;
    assert!(
        (lo..=hi).contains(&shown),
        "{what}: total execution time {shown} ns is not within [{lo}, {hi}] ns"
    );
}

// ---- the tests ------------------------------------------------------------------

/// Every fiber file of a live target, field by field against the registry and
/// what the target did; listings, modes, missing names; then `weft fs umount`.
#[test]
fn fs_shows_every_fiber_and_umount_ends_the_mount() {
    if skip_fuse() {
        return;
    }
    const K: usize = 8;
    let t = Target::start(&registry_dir(), &[&K.to_string()]);
    let pid = t.pid();
    let tid = t.tid();
    let ids = t.ready_ids();
    assert_eq!(ids.len(), K);
    let main_id: u64 = t.value("main").parse().unwrap();
    let (alpha, beta) = (t.addr("alpha"), t.addr("beta"));

    let mut m = Mount::start("fields");
    m.wait_for(&format!("{pid}/fibers"));
    let root = m.dir.clone();

    // Listings: the target at the root, "fibers" in it, one file per fiber.
    assert!(
        names(&root).contains(&pid.to_string()),
        "{} does not list {pid}: {:?}",
        root.display(),
        names(&root)
    );
    for n in names(&root) {
        let p: i32 = n.parse().unwrap_or_else(|_| panic!("not a pid: {n:?}"));
        assert!(
            introspect::list()
                .unwrap()
                .iter()
                .any(|e| e.pid == p && e.alive),
            "{p} is listed but is not a live process in the registry"
        );
    }
    assert_eq!(names(&root.join(pid.to_string())), ["fibers"]);
    let fibers_dir = root.join(format!("{pid}/fibers"));
    let snap = introspect::read(pid).unwrap();
    let mut expected: Vec<String> = snap.fibers.iter().map(|f| f.id.to_string()).collect();
    expected.sort();
    assert_eq!(names(&fibers_dir), expected);
    assert_eq!(snap.fibers.len(), K + 1, "K fibers and the main thread");

    // Modes and owner: directories 0555, files 0444, the mounting user's.
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for d in [root.join(pid.to_string()), fibers_dir.clone()] {
        let md = std::fs::metadata(&d).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.permissions().mode() & 0o7777, 0o555, "{}", d.display());
        assert_eq!(md.uid(), uid);
    }

    let expected_keys = [
        "running",
        "entry point",
        "parent thread",
        "activations",
        "failed activations",
        "total execution time",
    ];
    for f in &snap.fibers {
        let path = fibers_dir.join(f.id.to_string());
        let md = std::fs::metadata(&path).unwrap();
        assert!(md.is_file());
        assert_eq!(
            md.permissions().mode() & 0o7777,
            0o444,
            "{}",
            path.display()
        );
        assert_eq!(md.uid(), uid);

        let before = fiber(pid, f.id);
        let body = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cat {}: {e}", path.display()));
        let after = fiber(pid, f.id);
        let what = format!("{}:\n{body}", path.display());

        let lines: Vec<(&str, &str)> = body
            .lines()
            .map(|l| {
                l.split_once(": ")
                    .unwrap_or_else(|| panic!("line {l:?} is not \"key: value\" in {what}"))
            })
            .collect();
        let keys: Vec<&str> = lines.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, expected_keys, "{what}");
        assert!(body.ends_with('\n'), "{what}");
        let v: HashMap<&str, &str> = lines.into_iter().collect();

        // Fields that do not change while the target is parked: exact.
        assert_eq!(before.activations, after.activations, "{what}");
        assert_eq!(v["activations"], before.activations.to_string(), "{what}");
        assert_eq!(
            v["failed activations"],
            before.failed_activations.to_string(),
            "{what}"
        );
        assert_eq!(v["parent thread"], tid.to_string(), "{what}");
        assert_eq!(v["parent thread"], before.creator_tid.to_string(), "{what}");
        let running = match before.state {
            FiberState::Running => "yes",
            FiberState::Ready => "no",
            FiberState::Finished => "no (finished)",
        };
        assert_eq!(v["running"], running, "{what}");
        let shown = parse_ms(v["total execution time"]);
        assert_time_between(shown, before.run_time, after.run_time, &what);

        if f.id == main_id {
            // The converted main thread, parked in read(2) on its own fiber.
            assert_eq!(v["running"], "yes", "{what}");
            assert_eq!(v["entry point"], "none (converted thread)", "{what}");
            assert_eq!(v["activations"], (K * (K + 1) / 2).to_string(), "{what}");
            assert_eq!(v["failed activations"], "3", "{what}");
            assert!(shown > 0, "{what}");
            continue;
        }
        let i = ids
            .iter()
            .position(|id| *id == f.id)
            .unwrap_or_else(|| panic!("fiber {} is not one the target made\n{what}", f.id));
        let (entry, name) = if i % 2 == 0 {
            (alpha, "weft_target_alpha")
        } else {
            (beta, "weft_target_beta")
        };
        assert_eq!(v["running"], "no", "{what}");
        assert_eq!(v["entry point"], format!("{entry:#x} ({name})"), "{what}");
        assert_eq!(before.entry, entry, "{what}");
        assert_eq!(v["activations"], (i + 1).to_string(), "{what}");
        assert_eq!(v["failed activations"], "0", "{what}");
        // Run time is wall time while the fiber is current: no more than the target
        // spent switching to it (with 1% and 1 ms for converting clock ticks).
        let wall = u128::from(t.walls[&f.id]);
        assert!(
            shown <= wall + wall / 100 + 1_000_000,
            "{what}: run time beyond the {wall} ns the target spent switching to it"
        );
        if i == 0 {
            assert!(shown >= 50_000_000, "fiber 0 spins 50 ms\n{what}");
        }
        assert_eq!(md.len(), body.len() as u64, "size of {what}");
    }

    // What is not there, and what cannot be done.
    assert!(!fibers_dir.join("999999").exists());
    assert!(!fibers_dir.join(format!("0{main_id}")).exists());
    assert!(!root.join(format!("{pid}/other")).exists());
    assert!(!root.join("1").exists(), "pid 1 does not use weft");
    let w = std::fs::OpenOptions::new()
        .write(true)
        .open(fibers_dir.join(main_id.to_string()));
    assert!(w.is_err(), "a fiber file opened for writing");
    assert!(std::fs::create_dir(root.join("new")).is_err());

    // A process that exits leaves the listing.
    let st = t.finish();
    assert!(st.success(), "the target failed: {st}");
    std::thread::sleep(Duration::from_millis(300)); // past the kernel's 100 ms entry cache
    assert!(
        !names(&root).contains(&pid.to_string()),
        "{pid} exited but is still listed"
    );
    assert!(!root.join(pid.to_string()).exists());

    // weft fs umount: succeeds, the mount process exits 0, DIR is empty again.
    let o = weft(&registry_dir(), &["fs", "umount", root.to_str().unwrap()]);
    assert!(o.status.success(), "weft fs umount failed\n{}", text(&o));
    let st = wait_exit(&mut m.child, Duration::from_secs(60)).unwrap_or_else(|| {
        panic!(
            "weft fs mount did not exit within 60 s of weft fs umount\n{}",
            m.log()
        )
    });
    assert!(
        st.success(),
        "weft fs mount exited with {st} after weft fs umount\n{}",
        m.log()
    );
    assert!(
        !is_mount_point(&root),
        "{} is still mounted",
        root.display()
    );
    assert!(names(&root).is_empty(), "{} is not empty", root.display());

    // Unmounting again says there is nothing mounted.
    let o = weft(&registry_dir(), &["fs", "umount", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a mount point"),
        "{}",
        text(&o)
    );
}

/// A fiber's file ends with its name when it has one (here C green threads: a name,
/// but no Rust spawn site or function).
#[test]
fn fs_shows_green_thread_names() {
    if skip_fuse() {
        return;
    }
    let t = Target::start(&registry_dir(), &["green"]);
    let pid = t.pid();
    let ids = t.ready_ids();
    let mut m = Mount::start("names");
    m.wait_for(&format!("{pid}/fibers"));
    let cat = |id: u64| {
        let path = m.dir.join(format!("{pid}/fibers/{id}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cat {}: {e}", path.display()))
    };
    let named = cat(ids[0]);
    assert!(
        named.ends_with(" ms\nname: green-alpha\n"),
        "the name after the fields:\n{named}"
    );
    assert!(named.contains("(weft_target_green)\n"), "{named}");
    let renamed = cat(ids[3]);
    assert!(
        renamed.ends_with("\nname: renamed-by-itself\n"),
        "{renamed}"
    );
    let unnamed = cat(ids[2]);
    assert!(
        unnamed.ends_with(" ms\n") && !unnamed.contains("name:"),
        "no name line without a name:\n{unnamed}"
    );
    assert!(t.finish().success());
}

/// Ctrl-C (SIGINT) to `weft fs mount`: it unmounts and exits 0; so does SIGTERM.
#[test]
fn fs_sigint_and_sigterm_unmount_cleanly() {
    if skip_fuse() {
        return;
    }
    let t = Target::start(&registry_dir(), &["2"]);
    let pid = t.pid();
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let mut m = Mount::start(&format!("signal-{name}"));
        m.wait_for(&format!("{pid}/fibers"));
        assert!(is_mount_point(&m.dir));
        // A second mount on the same directory is refused clearly.
        let o = weft(&registry_dir(), &["fs", "mount", m.dir.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("already a weft fs mount"),
            "{}",
            text(&o)
        );

        // SAFETY: signalling our own child by its pid.
        assert_eq!(unsafe { libc::kill(m.pid(), sig) }, 0);
        let st = wait_exit(&mut m.child, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("weft fs mount did not exit within 60 s of {name}"));
        assert!(
            st.success(),
            "weft fs mount exited with {st} (signal {:?}) after {name}\n{}",
            st.signal(),
            m.log()
        );
        assert!(m.log().contains(name), "{}", m.log());
        assert!(
            !is_mount_point(&m.dir),
            "{} still mounted after {name}",
            m.dir.display()
        );
        assert!(names(&m.dir).is_empty());
    }
    assert!(t.finish().success());
}

/// Errors that need no FUSE: clear messages, exit status 1.
#[test]
fn fs_mount_and_umount_refuse_bad_directories() {
    let base = scratch().join("bad-dirs");
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("full")).unwrap();
    std::fs::write(base.join("full/x"), "x").unwrap();
    std::fs::write(base.join("file"), "x").unwrap();
    std::fs::create_dir_all(base.join("empty")).unwrap();

    let cases: [(&[&str], PathBuf, &str); 5] = [
        (&["fs", "mount"], base.join("missing"), "does not exist"),
        (&["fs", "mount"], base.join("file"), "not a directory"),
        (&["fs", "mount"], base.join("full"), "not empty"),
        (&["fs", "umount"], base.join("empty"), "not a mount point"),
        (
            &["fs", "umount"],
            PathBuf::from("/proc"),
            "not a weft fs mount",
        ),
    ];
    for (args, dir, expected) in cases {
        let mut all: Vec<&str> = args.to_vec();
        all.push(dir.to_str().unwrap());
        let o = weft(&registry_dir(), &all);
        assert_eq!(o.status.code(), Some(1), "weft {all:?}\n{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(expected) && err.contains("weft: error:"),
            "weft {all:?}: expected {expected:?}\n{}",
            text(&o)
        );
    }
    assert!(is_mount_point(Path::new("/proc")), "/proc was touched");
    let _ = std::fs::remove_dir_all(&base);
}
