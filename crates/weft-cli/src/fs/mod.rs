//! `weft fs mount DIR` and `weft fs umount DIR`: a `/proc/<pid>/fibers` view of
//! every weft process, as a FUSE filesystem.
//!
//! A user-space library cannot add to `/proc`, so weft serves the same view
//! from a FUSE mount: `DIR/<pid>/fibers/<id>` is a text file with the
//! fiber's fields (whether the fiber is running, its entry point, the thread that
//! created it, its successful and failed activations and its total execution
//! time), read from the process's registry ([`weft_fiber::introspect`]) when
//! it is looked up, listed or opened. The tree and the text are in [`tree`].
//!
//! The mount uses the `fuser` crate without libfuse: as root it calls
//! mount(2) itself; as another user it goes through `fusermount3` (Debian
//! package `fuse3`), as libfuse would.
//!
//! Life cycle: `weft fs mount` mounts, says so on stderr and serves requests
//! in the foreground until
//!
//! * SIGINT (Ctrl-C), SIGTERM or SIGHUP: it unmounts DIR and exits 0; or
//! * `weft fs umount DIR` (or `umount DIR`, `fusermount3 -u DIR`) from
//!   elsewhere: its session ends and it exits 0.
//!
//! If DIR is busy at Ctrl-C (a shell has its working directory in it), the
//! mount is detached lazily (it disappears from the namespace at once and the
//! kernel ends it when the last user leaves).

mod tree;

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, Session};

/// The `weft fs` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum FsCommand {
    /// Mount the fiber filesystem on DIR: DIR/<pid>/fibers/<id> for every live
    /// process using weft. Runs in the foreground until Ctrl-C or `weft fs umount DIR`.
    Mount {
        /// An existing, empty directory.
        dir: PathBuf,
        /// Stay in the foreground (the default and only mode; accepted for
        /// command lines written for other FUSE programs).
        #[arg(short, long)]
        foreground: bool,
    },
    /// Unmount a `weft fs mount` from DIR; its `weft fs mount` process then exits 0.
    Umount {
        /// The mount point.
        dir: PathBuf,
        /// If DIR is busy (a process has its working directory or a file open
        /// in it), detach it now and let the kernel end it when it is no
        /// longer used (umount -l).
        #[arg(short, long)]
        lazy: bool,
    },
}

/// Runs a `weft fs` subcommand.
pub fn run(cmd: FsCommand) -> Result<(), String> {
    match cmd {
        FsCommand::Mount { dir, foreground: _ } => mount(&dir),
        FsCommand::Umount { dir, lazy } => umount(&dir, lazy),
    }
}

/// The source name our mounts carry in /proc/self/mountinfo.
const FS_NAME: &str = "weft";

/// One line of /proc/self/mountinfo, the fields we use.
#[derive(Debug)]
struct MountEntry {
    mount_point: PathBuf,
    fs_type: String,
    source: String,
}

impl MountEntry {
    fn is_weft(&self) -> bool {
        (self.fs_type == "fuse" || self.fs_type.starts_with("fuse.")) && self.source == FS_NAME
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let v = oct
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn mounts() -> io::Result<Vec<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in text.lines() {
        // id parent major:minor root mount-point options [optional...] - type source super-options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mp) = left.split(' ').nth(4) else {
            continue;
        };
        let mut r = right.split(' ');
        let fs_type = r.next().unwrap_or_default().to_string();
        let source = String::from_utf8_lossy(&unescape(r.next().unwrap_or_default())).into_owned();
        out.push(MountEntry {
            mount_point: PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(mp))),
            fs_type,
            source,
        });
    }
    Ok(out)
}

/// The mount on exactly `dir`, the last one if several are stacked.
fn mount_at(dir: &Path) -> Option<MountEntry> {
    mounts()
        .ok()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == dir)
}

/// `dir` made absolute without touching it (a dead FUSE mount cannot be
/// stat'ed: ENOTCONN), `.` and `..` removed lexically.
fn absolute(dir: &Path) -> io::Result<PathBuf> {
    let joined = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()?.join(dir)
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `name` is a program on PATH (or an absolute path to one).
fn have_program(name: &str) -> bool {
    let candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
        .unwrap_or_default();
    candidates
        .iter()
        .chain(
            [
                PathBuf::from("/bin").join(name),
                PathBuf::from("/usr/bin").join(name),
            ]
            .iter(),
        )
        .any(|p| p.is_file())
}

const INSTALL_FUSE3: &str =
    "install fusermount3 (Debian/Ubuntu: apt-get install fuse3), or run weft fs mount as root";

/// Checks that `dir` can be mounted on; returns its canonical path.
fn check_mount_point(dir: &Path) -> Result<PathBuf, String> {
    let shown = dir.display();
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{shown} does not exist: create an empty directory first (mkdir -p {shown})"
            ))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(format!(
                "{shown} is a FUSE mount whose process has died: run `weft fs umount {shown}` first"
            ))
        }
        Err(e) => return Err(format!("cannot use {shown}: {e}")),
    };
    if !meta.is_dir() {
        return Err(format!(
            "{shown} is not a directory: give an empty directory to mount on"
        ));
    }
    let canon = dir
        .canonicalize()
        .map_err(|e| format!("cannot use {shown}: {e}"))?;
    if let Some(m) = mount_at(&canon) {
        return Err(if m.is_weft() {
            format!("{shown} is already a weft fs mount: unmount it first (weft fs umount {shown})")
        } else {
            format!(
                "{shown} is already a mount point ({} from {}): choose another, empty directory",
                m.fs_type, m.source
            )
        });
    }
    let mut entries = std::fs::read_dir(&canon).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if entries.next().is_some() {
        return Err(format!(
            "{shown} is not empty: mounting on it would hide what it holds; use an empty directory"
        ));
    }
    Ok(canon)
}

/// Checks that FUSE can be used at all, before trying: says what to install.
fn check_fuse_available() -> Result<(), String> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        return Err(
            "FUSE is not available: /dev/fuse does not exist. Load the kernel module \
                    (modprobe fuse); in a container, start it with --device /dev/fuse \
                    (and CAP_SYS_ADMIN to mount as root)"
                .into(),
        );
    }
    // SAFETY: a valid NUL-terminated path.
    let usable = unsafe { libc::access(c"/dev/fuse".as_ptr(), libc::R_OK | libc::W_OK) } == 0;
    if !is_root() && !usable {
        return Err(
            "FUSE is not usable by this user: /dev/fuse is not readable and writable \
                    for it (it is usually mode 0666: chmod 0666 /dev/fuse as root), or run \
                    weft fs mount as root"
                .into(),
        );
    }
    if !is_root() && !have_program("fusermount3") && !have_program("fusermount") {
        return Err(format!(
            "FUSE cannot be mounted by a non-root user without fusermount3: {INSTALL_FUSE3}"
        ));
    }
    Ok(())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and so in the threads
/// it starts afterwards) and returns the set, to take them with sigtimedwait.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: the set is initialised by sigemptyset before use; the calls
    // only read and write it and this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; returns it, or None.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `set` is a valid, initialised signal set; `ts` lives across the call.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

fn mount(dir: &Path) -> Result<(), String> {
    check_fuse_available()?;
    let canon = check_mount_point(dir)?;
    let shown = dir.display();

    // Before any thread exists, so that every thread inherits the mask and
    // only sigtimedwait below takes these signals.
    let signals = block_stop_signals();

    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(FS_NAME.into()),
        MountOption::Subtype("weft".into()),
        MountOption::RO,
        MountOption::NoSuid,
        MountOption::NoDev,
        MountOption::NoExec,
        MountOption::NoAtime,
        MountOption::DefaultPermissions,
    ];
    let session = Session::new(tree::FiberFs::new(), &canon, &config).map_err(|e| {
        let hint = if e.kind() == io::ErrorKind::NotFound && !is_root() {
            format!(" ({INSTALL_FUSE3})")
        } else if e.kind() == io::ErrorKind::PermissionDenied {
            " (mounting needs root with CAP_SYS_ADMIN, or fusermount3 from the fuse3 package, \
             and read-write access to /dev/fuse)"
                .to_string()
        } else {
            String::new()
        };
        format!("cannot mount the FUSE filesystem on {shown}: {e}{hint}")
    })?;
    let bg = session
        .spawn()
        .map_err(|e| format!("cannot start the FUSE session thread: {e}"))?;

    eprintln!(
        "weft fs: fibers of weft processes mounted on {} (registry {}); \
         Ctrl-C or `weft fs umount {shown}` to unmount",
        canon.display(),
        weft_fiber::introspect::registry_dir().display()
    );

    loop {
        if bg.guard.is_finished() {
            // Unmounted from elsewhere (weft fs umount, umount, fusermount3 -u).
            return match bg.join() {
                Ok(()) => {
                    eprintln!("weft fs: {shown} was unmounted; exiting");
                    Ok(())
                }
                Err(e) => Err(format!(
                    "the FUSE session on {shown} ended with an error: {e}"
                )),
            };
        }
        if let Some(sig) = wait_signal(&signals, Duration::from_millis(100)) {
            eprintln!("weft fs: {}: unmounting {shown}", signal_name(sig));
            let detached_lazily = unmount_path(&canon, false).or_else(|e| {
                if e.raw_os_error() == Some(libc::EBUSY) {
                    eprintln!("weft fs: {shown} is busy; detaching it lazily");
                    unmount_path(&canon, true).map(|_| true)
                } else {
                    Err(e)
                }
            });
            match detached_lazily {
                Ok(false) => {
                    // The session thread sees the connection end (ENODEV) at once.
                    let start = Instant::now();
                    while !bg.guard.is_finished() && start.elapsed() < Duration::from_secs(5) {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if bg.guard.is_finished() {
                        let _ = bg.join();
                    } else {
                        std::mem::forget(bg);
                    }
                    return Ok(());
                }
                Ok(true) => {
                    // Exiting closes /dev/fuse, which ends the detached mount.
                    std::mem::forget(bg);
                    return Ok(());
                }
                Err(e) => {
                    // Leave nothing behind: exiting closes /dev/fuse, which
                    // aborts the connection (the mount point then answers
                    // ENOTCONN until unmounted).
                    std::mem::forget(bg);
                    return Err(format!(
                        "cannot unmount {shown}: {e}; run `weft fs umount --lazy {shown}`"
                    ));
                }
            }
        }
    }
}

/// Unmounts `path`: umount2(2) as root, fusermount3 -u otherwise. Returns
/// whether the unmount was lazy.
fn unmount_path(path: &Path, lazy: bool) -> io::Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path.
    let r = unsafe { libc::umount2(c.as_ptr(), flags) };
    if r == 0 {
        return Ok(lazy);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    // Not root: the setuid helper unmounts FUSE mounts of the calling user.
    let helper = ["fusermount3", "fusermount"]
        .into_iter()
        .find(|p| have_program(p))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("umount2 needs root, and fusermount3 is not installed: {INSTALL_FUSE3}"),
            )
        })?;
    let mut cmd = Command::new(helper);
    cmd.arg("-u").arg("-q");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(path).output()?;
    if out.status.success() {
        return Ok(lazy);
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if msg.contains("busy") {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    Err(io::Error::other(format!("{helper} -u failed: {msg}")))
}

fn umount(dir: &Path, lazy: bool) -> Result<(), String> {
    let shown = dir.display();
    // Canonical when possible; a dead mount cannot be stat'ed, so fall back
    // to the lexical absolute path.
    let path = dir
        .canonicalize()
        .or_else(|_| absolute(dir))
        .map_err(|e| format!("cannot use {shown}: {e}"))?;
    let entry = mount_at(&path).ok_or_else(|| {
        format!("{shown} is not a mount point: nothing to unmount (is `weft fs mount` running on another directory?)")
    })?;
    if !entry.is_weft() {
        return Err(format!(
            "{shown} is a {} mount from {}, not a weft fs mount: not unmounting it",
            entry.fs_type, entry.source
        ));
    }
    match unmount_path(&path, lazy) {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(format!(
            "{shown} is busy (a process has its working directory or a file open in it): \
             leave it and retry, or detach it now with `weft fs umount --lazy {shown}`"
        )),
        Err(e) => Err(format!("cannot unmount {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape(r"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape(r"/tmp/x\134y"), b"/tmp/x\\y");
        assert_eq!(unescape(r"/plain"), b"/plain");
        assert_eq!(unescape(r"/end\04"), b"/end\\04");
    }

    #[test]
    fn absolute_is_lexical() {
        assert_eq!(
            absolute(Path::new("/a/./b/../c")).unwrap(),
            Path::new("/a/c")
        );
    }
}
