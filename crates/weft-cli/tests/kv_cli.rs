//! `weft kv`'s client subcommands, run as a user runs them (the built `weft` binary),
//! against a real redis-server (Debian's package) on a temporary Unix socket: they
//! speak plain Redis protocol, so what they print and their exit statuses are checked
//! without needing the weft-kv server. Without redis-server those tests print why and
//! pass without checking. Also `weft kv serve`'s option checking, which fails before
//! any server starts.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../tests/support/skip.rs"]
mod skip;

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// A redis-server of one test on a Unix socket only, killed when dropped.
struct Redis {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Option<Redis> {
        let exe = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|e| Command::new(e).arg("--version").output().is_ok());
        let Some(exe) = exe else {
            skip::skip("redis-server is not installed (apt-get install redis-server)");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("redis.sock");
        let child = Command::new(exe)
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis {
            child,
            socket,
            _dir: dir,
        })
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `weft kv <args...> --socket <socket>`, without a password in the environment.
fn kv(socket: &Path, args: &[&str]) -> Output {
    Command::new(WEFT)
        .arg("kv")
        .args(args)
        .arg("--socket")
        .arg(socket)
        .env_remove("WEFT_KV_PASSWORD")
        .output()
        .expect("run weft")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn set_reports_created_then_updated() {
    let Some(r) = Redis::start() else {
        return;
    };
    let o = kv(&r.socket, &["set", "k", "v1"]);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "created\n"),
        "{}",
        stderr(&o)
    );
    let o = kv(&r.socket, &["set", "k", "v2"]);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "updated\n"),
        "{}",
        stderr(&o)
    );
    let o = kv(&r.socket, &["get", "k"]);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "v2\n"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn get_exit_statuses() {
    let Some(r) = Redis::start() else {
        return;
    };
    assert_eq!(
        kv(&r.socket, &["set", "here", "a value with spaces"])
            .status
            .code(),
        Some(0)
    );
    let o = kv(&r.socket, &["get", "here"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o), "a value with spaces\n");

    let o = kv(&r.socket, &["get", "missing"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o), "");
    assert_eq!(stderr(&o), "(nil): key 'missing' does not exist\n");

    // An error reply (a list is not a string) is an error, not "missing".
    let mut cli = Command::new("redis-cli");
    cli.arg("-s").arg(&r.socket).args(["RPUSH", "alist", "x"]);
    if cli.output().is_ok_and(|o| o.status.success()) {
        let o = kv(&r.socket, &["get", "alist"]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("WRONGTYPE"), "{}", stderr(&o));
    } else {
        skip::note("redis-cli did not run: the WRONGTYPE case was not checked");
    }
}

#[test]
fn connection_failure_is_exit_2_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("weft-kv.sock");
    let o = kv(&socket, &["get", "k"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!(
            "weft: error: cannot connect to weft-kv at {}: No such file or directory \
             (is `weft kv serve` running?)\n",
            socket.display()
        )
    );
}

#[test]
fn del_keys_stats() {
    let Some(r) = Redis::start() else {
        return;
    };
    for k in ["user:1", "user:2", "user:3", "other"] {
        assert_eq!(kv(&r.socket, &["set", k, "x"]).status.code(), Some(0));
    }
    let o = kv(&r.socket, &["keys", "user:*"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut listed: Vec<String> = stdout(&o).lines().map(String::from).collect();
    listed.sort();
    assert_eq!(listed, ["user:1", "user:2", "user:3"]);
    let o = kv(&r.socket, &["keys"]);
    assert_eq!(stdout(&o).lines().count(), 4);

    let o = kv(&r.socket, &["stats"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.lines().any(|l| l == "keys: 4"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("version: ")), "{text}");

    let o = kv(&r.socket, &["del", "user:1", "user:2", "nope"]);
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "2\n"),
        "{}",
        stderr(&o)
    );
    let o = kv(&r.socket, &["keys", "user:*"]);
    assert_eq!(stdout(&o), "user:3\n");
    let o = kv(&r.socket, &["stats"]);
    assert!(stdout(&o).lines().any(|l| l == "keys: 2"), "{}", stdout(&o));
}

#[test]
fn many_keys_are_all_listed() {
    let Some(r) = Redis::start() else {
        return;
    };
    // More keys than one SCAN batch (COUNT 1000), written with redis-cli's pipe mode.
    let mut cli = Command::new("redis-cli")
        .arg("-s")
        .arg(&r.socket)
        .arg("--pipe")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn();
    let Ok(cli) = cli.as_mut() else {
        skip::skip("redis-cli is not installed (apt-get install redis-tools)");
        return;
    };
    let mut cmds = String::new();
    for i in 0..5000 {
        cmds.push_str(&format!("SET key:{i} v\r\n"));
    }
    use std::io::Write;
    cli.stdin
        .take()
        .unwrap()
        .write_all(cmds.as_bytes())
        .unwrap();
    assert!(cli.wait().unwrap().success());
    let o = kv(&r.socket, &["keys", "key:*"]);
    let mut listed: Vec<String> = stdout(&o).lines().map(String::from).collect();
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 5000);
}

#[test]
fn password_from_the_environment() {
    let Some(r) = Redis::start() else {
        return;
    };
    let o = kv(&r.socket, &["set", "k", "v"]);
    assert_eq!(o.status.code(), Some(0));
    let mut cli = Command::new("redis-cli");
    cli.arg("-s")
        .arg(&r.socket)
        .args(["CONFIG", "SET", "requirepass", "pw"]);
    if !cli.output().is_ok_and(|o| o.status.success()) {
        skip::skip("redis-cli did not run (apt-get install redis-tools)");
        return;
    }
    let o = kv(&r.socket, &["get", "k"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("NOAUTH") && stderr(&o).contains("--password"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(WEFT)
        .args(["kv", "get", "k", "--socket"])
        .arg(&r.socket)
        .env("WEFT_KV_PASSWORD", "pw")
        .output()
        .unwrap();
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), "v\n"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(WEFT)
        .args(["kv", "get", "k", "--password", "wrong", "--socket"])
        .arg(&r.socket)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("refused AUTH"), "{}", stderr(&o));
}

#[test]
fn serve_rejects_a_bad_size() {
    let o = Command::new(WEFT)
        .args(["kv", "serve", "--maxmemory", "12xb"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "invalid size '12xb': use a number with an optional k, kb, m, mb, g, gb suffix"
        ),
        "{}",
        stderr(&o)
    );
    let o = Command::new(WEFT)
        .args(["kv", "serve", "--fsync", "sometimes"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown fsync policy 'sometimes'"),
        "{}",
        stderr(&o)
    );
}
