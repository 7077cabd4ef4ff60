//! The progress line of `weft bench` is drawn when stderr is a terminal: run with its
//! stderr on a pseudo-terminal, `weft bench syslets --quick --json` draws it there (the
//! suite, its bar, an estimate of the time left) while stdout still carries nothing but
//! JSON lines. (With stderr a pipe there is none: tests/bench.rs checks that.)

use std::fs::File;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

#[path = "../../../tests/support/skip.rs"]
mod skip;

/// A pseudo-terminal of 40 rows and 160 columns: (master, slave); None where the system
/// has none to give.
fn open_pty() -> Option<(File, File)> {
    // SAFETY: plain calls on the descriptor opened here, each checked; the name buffer
    // is NUL-terminated by ptsname_r (its length is passed).
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if master < 0 {
            return None;
        }
        let master = OwnedFd::from_raw_fd(master);
        use std::os::fd::AsRawFd;
        let m = master.as_raw_fd();
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(m, name.as_mut_ptr(), name.len()),
            0,
            "ptsname_r"
        );
        let slave = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(
            slave >= 0,
            "open the slave: {}",
            std::io::Error::last_os_error()
        );
        let size = libc::winsize {
            ws_row: 40,
            ws_col: 160,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        assert_eq!(libc::ioctl(slave, libc::TIOCSWINSZ, &size), 0, "TIOCSWINSZ");
        Some((File::from(master), File::from_raw_fd(slave)))
    }
}

#[test]
fn on_a_terminal_the_progress_line_is_drawn_on_stderr_only() {
    let Some((mut master, slave)) = open_pty() else {
        skip::skip(&format!(
            "no pseudo-terminal to draw on (posix_openpt: {})",
            std::io::Error::last_os_error()
        ));
        return;
    };
    let child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["bench", "syslets", "--quick", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    // Read the terminal until the child (the slave's last holder) is gone: then the
    // master's read fails (EIO) or ends.
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        seen
    });
    let out = child.wait_with_output().unwrap();
    let terminal = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    assert!(out.status.success(), "({}):\n{terminal}", out.status);
    // The line: the suite, a bar, a share done and an estimate of the time left.
    assert!(terminal.contains("bench syslets ["), "{terminal:?}");
    assert!(terminal.contains("% "), "{terminal:?}");
    assert!(terminal.contains(" left"), "{terminal:?}");
    // The table (stderr with --json) is there too, whole lines among the redraws.
    assert!(
        terminal.contains("cached: the files in the page cache"),
        "{terminal:?}"
    );
    // stdout: JSON lines and nothing else.
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.is_empty());
    for l in stdout.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?} is not JSON: {e}"));
        assert_eq!(v["suite"], "syslets");
    }
}
