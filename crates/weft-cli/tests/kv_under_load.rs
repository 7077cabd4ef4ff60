//! `weft kv serve` under pressure: a memory limit, a backlog of expired keys, busy
//! CPUs. Through real processes (the `weft` binary, a client on its Unix socket):
//!
//! - a write whose own growth (known from its arguments: a large SET, a far SETRANGE,
//!   an APPEND, an MSET over several shards) would pass the limit is refused with
//!   Redis's OOM error, and neither the keys nor the memory count change; the limit is
//!   the whole server's, whatever shard a key is on; over the limit, writes that free
//!   memory (DEL, EXPIRE, PERSIST) still run, and writes that may grow it do not;
//! - keys whose time has passed are reclaimed without any client touching them
//!   (DBSIZE and `used_memory` fall to 0, INFO's `expired_keys` counts them all);
//! - keys that have expired never make a write that fits without them fail with OOM;
//! - every thread of the server, its workers and their io_uring helper threads
//!   included, may run on every CPU the process may run on. A worker pinned to one
//!   CPU waits behind that CPU's other threads each time a request wakes it, even while
//!   another CPU is free: under two CPU hogs, a pinned worker waited up to 96 ms
//!   between its wake-up and running, and trivial pipelines took 0.1 s and more where
//!   redis-server took a few milliseconds. The cause is checked here, not a time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use weft_kv::client::Client;
use weft_kv::resp::Reply;

#[path = "common/kv.rs"]
mod kv;
#[path = "../../../tests/support/skip.rs"]
mod skip;
use kv::{run, TempKv};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// A ceiling against hangs only: what the tests wait for comes long before.
const EVENTUALLY: Duration = Duration::from_secs(60);

/// A `weft kv serve` on a fresh directory, Unix socket only, killed when dropped.
struct Server(TempKv);

impl Server {
    fn start(extra: &[&str]) -> Server {
        Server(TempKv::start(0, extra))
    }

    fn client(&self) -> std::io::Result<Client> {
        self.0.client()
    }

    /// The server's process id.
    fn pid(&self) -> u32 {
        self.0.child.id()
    }

    /// The server's peak resident memory (VmHWM), in KiB.
    fn peak_rss_kib(&self) -> u64 {
        self.0.status_kib("VmHWM")
    }

    /// The size of each shard's log, in shard order.
    fn log_sizes(&self) -> Vec<u64> {
        let mut sizes = Vec::new();
        while let Ok(m) = std::fs::metadata(log_path(&self.0.dir, sizes.len())) {
            sizes.push(m.len());
        }
        sizes
    }
}

fn log_path(dir: &Path, shard: usize) -> PathBuf {
    dir.join(format!("shard-{shard:03}.log"))
}

fn run_bytes(c: &mut Client, args: &[&[u8]]) -> Reply {
    c.command(args).unwrap()
}

fn oom() -> Reply {
    Reply::Error(OOM.into())
}

/// The field `name` of `INFO section`, as a number.
fn info(c: &mut Client, section: &str, name: &str) -> u64 {
    let text = match run(c, &["INFO", section]) {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8(b).unwrap(),
        r => panic!("INFO answered {r:?}"),
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in INFO {section}:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

fn used_memory(c: &mut Client) -> u64 {
    info(c, "memory", "used_memory")
}

/// The shard that holds `key`, seen from the log that grows when the key is set
/// (`--fsync always`: the record is written before the reply). The key is then
/// deleted again.
fn shard_of(srv: &Server, c: &mut Client, key: &str) -> usize {
    let before = srv.log_sizes();
    assert_eq!(run(c, &["SET", key, "x"]), Reply::Simple("OK".into()));
    let after = srv.log_sizes();
    assert_eq!(run(c, &["DEL", key]), Reply::Int(1));
    (0..after.len())
        .find(|&s| after[s] > before[s])
        .expect("some shard's log grew")
}

/// Sends `commands` as one pipeline; answers how many replies were the OOM error
/// (any other error fails the test). The caller keeps pipelines to a few hundred
/// kilobytes: the client writes all before it reads, and the server stops reading
/// while its replies wait in a full socket.
fn pipeline(c: &mut Client, commands: &[Vec<Vec<u8>>]) -> usize {
    for a in commands {
        let a: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
        c.send(&a);
    }
    c.flush().unwrap();
    let mut refused = 0;
    for _ in commands {
        match c.read_reply().unwrap() {
            r if r == oom() => refused += 1,
            Reply::Error(e) => panic!("error {e}"),
            _ => {}
        }
    }
    refused
}

fn set_px(key: String, value: &[u8], px: Option<u64>) -> Vec<Vec<u8>> {
    let mut a = vec![b"SET".to_vec(), key.into_bytes(), value.to_vec()];
    if let Some(ms) = px {
        a.push(b"PX".to_vec());
        a.push(ms.to_string().into_bytes());
    }
    a
}

#[test]
fn maxmemory_refuses_what_a_write_would_add_over_the_whole_server() {
    let srv = Server::start(&["--workers", "2", "--fsync", "always", "--maxmemory", "10mb"]);
    let mut c = srv.client().unwrap();
    assert_eq!(used_memory(&mut c), 0);
    let peak_before = srv.peak_rss_kib();

    // One SET larger than the limit, and SETRANGEs that would make a 400 MB value
    // from a few bytes of arguments: refused, nothing stored.
    let big = vec![b'v'; 11 << 20];
    assert_eq!(run_bytes(&mut c, &[b"SET", b"big", &big]), oom());
    assert_eq!(run(&mut c, &["SETRANGE", "far", "400000000", "x"]), oom());
    assert_eq!(
        run(&mut c, &["SET", "small", "12345"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(run(&mut c, &["SETRANGE", "small", "400000000", "x"]), oom());
    assert_eq!(run(&mut c, &["EXISTS", "big", "far"]), Reply::Int(0));
    assert_eq!(run(&mut c, &["STRLEN", "small"]), Reply::Int(5));
    let small = used_memory(&mut c);
    assert!(
        small > 0 && small < 1000,
        "used_memory {small} for one small key"
    );
    // The 11 MB argument was read (the connection's buffer), the 400 MB never made.
    let grown = srv.peak_rss_kib().saturating_sub(peak_before);
    assert!(
        grown < 100 << 10,
        "the server's peak memory grew by {grown} KiB on refused writes"
    );

    // 6 MB fits; 6 MB more does not, on whichever shard it lands.
    let six = vec![b'a'; 6 << 20];
    assert_eq!(
        run_bytes(&mut c, &[b"SET", b"a", &six]),
        Reply::Simple("OK".into())
    );
    let after_a = used_memory(&mut c);
    assert!(after_a > 6 << 20);
    assert_eq!(run_bytes(&mut c, &[b"APPEND", b"a", &six]), oom());
    assert_eq!(
        run_bytes(&mut c, &[b"GETSET", b"a", &vec![b'b'; 11 << 20]]),
        oom()
    );
    let shard_a = shard_of(&srv, &mut c, "a-probe-0");
    let other = (0..)
        .map(|i| format!("b{i}"))
        .find(|k| shard_of(&srv, &mut c, k) != shard_a)
        .unwrap();
    // `other` is on the shard that holds nothing: the limit counts both shards.
    assert_eq!(run_bytes(&mut c, &[b"SET", other.as_bytes(), &six]), oom());
    assert_eq!(
        run_bytes(&mut c, &[b"SETEX", other.as_bytes(), b"100", &six]),
        oom()
    );
    // An MSET over both shards that does not fit changes neither.
    let part = vec![b'm'; 400 << 10];
    let mut mset: Vec<Vec<u8>> = vec![b"MSET".to_vec()];
    let keys: Vec<String> = (0..16).map(|i| format!("m{i}")).collect();
    for k in &keys {
        mset.push(k.clone().into_bytes());
        mset.push(part.clone());
    }
    assert_eq!(pipeline(&mut c, &[mset]), 1);
    let mut exists = vec!["EXISTS"];
    exists.extend(keys.iter().map(String::as_str));
    assert_eq!(run(&mut c, &exists), Reply::Int(0));
    assert_eq!(used_memory(&mut c), after_a);
    // What fits still runs.
    assert_eq!(run(&mut c, &["INCR", "n"]), Reply::Int(1));
    assert_eq!(run(&mut c, &["APPEND", "small", "678"]), Reply::Int(8));

    // Over the limit (lowered under what is held): writes that may grow memory are
    // refused, even small ones; those that free it run.
    assert_eq!(
        run(&mut c, &["CONFIG", "SET", "maxmemory", "1mb"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(run(&mut c, &["SET", "tiny", "1"]), oom());
    assert_eq!(run(&mut c, &["INCR", "n"]), oom());
    assert_eq!(run(&mut c, &["SET", "small", "1"]), oom());
    assert_eq!(run(&mut c, &["EXPIRE", "small", "100"]), Reply::Int(1));
    assert_eq!(run(&mut c, &["PERSIST", "small"]), Reply::Int(1));
    assert_eq!(run(&mut c, &["GETDEL", "n"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(run(&mut c, &["DEL", "a"]), Reply::Int(1));
    // Back under it: writes run again.
    assert_eq!(
        run(&mut c, &["SET", "tiny", "1"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(run(&mut c, &["DBSIZE"]), Reply::Int(2));
}

#[test]
fn expired_keys_are_reclaimed_without_being_touched() {
    const KEYS: usize = 150_000;
    let srv = Server::start(&["--workers", "1"]);
    let mut c = srv.client().unwrap();
    let batch: Vec<Vec<Vec<u8>>> = (0..KEYS)
        .map(|i| set_px(format!("key:{i}"), b"some value", Some(10)))
        .collect();
    for chunk in batch.chunks(1_000) {
        assert_eq!(pipeline(&mut c, chunk), 0);
    }
    // No command touches a key from here on: DBSIZE and INFO only.
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let left = run(&mut c, &["DBSIZE"]);
        if left == Reply::Int(0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left:?} of {KEYS} expired keys still held after {EVENTUALLY:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(info(&mut c, "stats", "expired_keys"), KEYS as u64);
    assert_eq!(used_memory(&mut c), 0);
}

#[test]
fn expired_keys_never_cause_an_oom_refusal() {
    // 40,000 keys of 1 KB that expire at once, then 40,000 new ones of 1 KB: either
    // set fits under 50 MB, both do not.
    const KEYS: usize = 40_000;
    let srv = Server::start(&["--workers", "2", "--maxmemory", "50mb"]);
    let mut c = srv.client().unwrap();
    let value = vec![b'x'; 1024];
    let old: Vec<_> = (0..KEYS)
        .map(|i| set_px(format!("old:{i}"), &value, Some(1)))
        .collect();
    for chunk in old.chunks(200) {
        assert_eq!(pipeline(&mut c, chunk), 0, "the first keys fit");
    }
    // Every old key's time has passed (PX 1); none has been touched since.
    std::thread::sleep(Duration::from_millis(10));
    let new: Vec<_> = (0..KEYS)
        .map(|i| set_px(format!("new:{i}"), &value, None))
        .collect();
    let refused: usize = new.chunks(200).map(|chunk| pipeline(&mut c, chunk)).sum();
    assert_eq!(refused, 0, "writes refused for memory held by expired keys");
    assert_eq!(
        run(&mut c, &["GET", &format!("new:{}", KEYS - 1)]),
        Reply::Bulk(value)
    );
    assert!(used_memory(&mut c) <= 50 << 20);
}

/// The `Cpus_allowed_list` of a `/proc/.../status` text.
fn allowed(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in status")
        .trim()
        .to_string()
}

#[test]
fn server_threads_may_run_on_every_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        skip::skip("one CPU: a pinned thread and a free one cannot be told apart");
        return;
    }
    let srv = Server::start(&["--workers", "2"]);
    let mut c = srv.client().unwrap();
    // A write, so that the workers have done I/O (and made their helper threads).
    assert_eq!(run(&mut c, &["SET", "k", "v"]), Reply::Simple("OK".into()));
    let pid = srv.pid();
    let all = allowed(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap());
    let mut workers = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap().path();
        let (Ok(name), Ok(status)) = (
            std::fs::read_to_string(t.join("comm")),
            std::fs::read_to_string(t.join("status")),
        ) else {
            continue; // ended meanwhile
        };
        let (name, list) = (name.trim(), allowed(&status));
        assert_eq!(
            list, all,
            "thread {name} may run on CPUs {list}, the process on {all}"
        );
        workers += name
            .strip_prefix("weft-kv-")
            .is_some_and(|n| n.parse::<usize>().is_ok()) as usize;
    }
    assert_eq!(workers, 2, "the two workers' threads were seen");
}
