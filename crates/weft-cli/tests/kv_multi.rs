//! MULTI, EXEC, DISCARD, WATCH and UNWATCH in `weft kv serve` (the built binary, two
//! workers, so a transaction's keys fall on shards of both): scripts of commands over
//! two connections, each reply checked exactly as weft-kv sends it (the RESP type of
//! every value), in RESP2 and in RESP3; and, when redis-server is installed, the same
//! scripts sent to it must get the same replies.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::KvServer;
use resp::{show, Wire};
use std::path::Path;
use std::time::{Duration, Instant};

/// One step of a script: which connection (0 or 1) sends the command, and the reply
/// expected in RESP2 and in RESP3 (`None`: the same as RESP2), as [`show`] writes it.
struct Step {
    conn: usize,
    cmd: &'static str,
    resp2: &'static str,
    resp3: Option<&'static str>,
}

const fn s(conn: usize, cmd: &'static str, resp2: &'static str) -> Step {
    Step {
        conn,
        cmd,
        resp2,
        resp3: None,
    }
}

const fn s3(conn: usize, cmd: &'static str, resp2: &'static str, resp3: &'static str) -> Step {
    Step {
        conn,
        cmd,
        resp2,
        resp3: Some(resp3),
    }
}

const OK: &str = "+\"OK\"";
const Q: &str = "+\"QUEUED\"";
const ABORTED: &str = "-\"EXECABORT Transaction discarded because of previous errors.\"";

/// The scripts, each run on fresh connections after FLUSHALL.
fn scripts() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            "basics: queued, then run in order with keyless commands in place",
            vec![
                s(0, "MULTI", OK),
                s(0, "SET a 1", Q),
                s(0, "INCR a", Q),
                s(0, "GET a", Q),
                s(0, "PING", Q),
                s(0, "ECHO hi", Q),
                s3(1, "GET a", "$nil", "_\"\""),
                s3(
                    0,
                    "EXEC",
                    "*[+\"OK\", :\"2\", $\"2\", +\"PONG\", $\"hi\"]",
                    "*[+\"OK\", :\"2\", $\"2\", +\"PONG\", $\"hi\"]",
                ),
                s(1, "GET a", "$\"2\""),
                s(0, "MULTI", OK),
                s(0, "EXEC", "*[]"),
            ],
        ),
        (
            "keys of several shards in one EXEC; SELECT inside it",
            vec![
                s(0, "MULTI", OK),
                s(0, "MSET k1 a k2 b k3 c k4 d k5 e k6 f", Q),
                s(0, "MGET k1 k2 k3 k4 k5 k6", Q),
                s(0, "SELECT 3", Q),
                s(0, "SET k1 z", Q),
                s(0, "SELECT 0", Q),
                s(0, "DEL k2 k3 k4", Q),
                s(0, "MSETNX k2 x k7 y", Q),
                s(0, "EXISTS k1 k2 k3 k7", Q),
                s(0, "DBSIZE", Q),
                s(
                    0,
                    "EXEC",
                    "*[+\"OK\", *[$\"a\", $\"b\", $\"c\", $\"d\", $\"e\", $\"f\"], +\"OK\", \
                     +\"OK\", +\"OK\", :\"3\", :\"1\", :\"3\", :\"5\"]",
                ),
                s(1, "MGET k1 k2 k7", "*[$\"a\", $\"x\", $\"y\"]"),
                s(1, "SELECT 3", OK),
                s(1, "GET k1", "$\"z\""),
            ],
        ),
        (
            "runtime errors are replies inside the array; the rest runs",
            vec![
                s(0, "SET s x", OK),
                s(0, "MULTI", OK),
                s(0, "INCR s", Q),
                s(0, "SET t 1", Q),
                s(0, "HSET s f v", Q),
                s(0, "INCR t", Q),
                s(
                    0,
                    "EXEC",
                    "*[-\"ERR value is not an integer or out of range\", +\"OK\", \
                     -\"WRONGTYPE Operation against a key holding the wrong kind of value\", \
                     :\"2\"]",
                ),
            ],
        ),
        (
            "a command refused while queueing aborts EXEC; nothing runs",
            vec![
                s(0, "MULTI", OK),
                s(0, "SET foo1 bar1", Q),
                s(
                    0,
                    "NOSUCHCOMMAND x",
                    "-\"ERR unknown command 'NOSUCHCOMMAND', with args beginning with: 'x' \"",
                ),
                s(0, "SET foo2 bar2", Q),
                s(0, "EXEC", ABORTED),
                s(0, "EXISTS foo1 foo2", ":\"0\""),
                s(0, "MULTI", OK),
                s(
                    0,
                    "SET foo1",
                    "-\"ERR wrong number of arguments for 'set' command\"",
                ),
                s(0, "EXEC", ABORTED),
                s(0, "PING", "+\"PONG\""),
                s(0, "MULTI", OK),
                s(0, "SET foo bar", Q),
                s(
                    0,
                    "SAVE",
                    "-\"ERR Command not allowed inside a transaction\"",
                ),
                s(
                    0,
                    "SHUTDOWN",
                    "-\"ERR Command not allowed inside a transaction\"",
                ),
                s(0, "EXEC", ABORTED),
                s3(0, "GET foo", "$nil", "_\"\""),
            ],
        ),
        (
            "MULTI, WATCH, EXEC and DISCARD where they are not allowed",
            vec![
                s(0, "EXEC", "-\"ERR EXEC without MULTI\""),
                s(0, "DISCARD", "-\"ERR DISCARD without MULTI\""),
                s(0, "MULTI", OK),
                s(0, "MULTI", "-\"ERR MULTI calls can not be nested\""),
                s(0, "WATCH x", "-\"ERR WATCH inside MULTI is not allowed\""),
                s(0, "SET x 1", Q),
                s(0, "EXEC", "*[+\"OK\"]"),
                s(0, "MULTI", OK),
                s(0, "SET x 2", Q),
                s(0, "DISCARD", OK),
                s(0, "GET x", "$\"1\""),
                s(0, "MULTI", OK),
                s(0, "SET x 3", Q),
                s3(0, "RESET", "+\"RESET\"", "+\"RESET\""),
                s(0, "EXEC", "-\"ERR EXEC without MULTI\""),
                s(0, "GET x", "$\"1\""),
            ],
        ),
        (
            "WATCH: a write by another connection, or by this one, aborts EXEC",
            vec![
                s(0, "SET x 30", OK),
                s(0, "WATCH a b x k z", OK),
                s(1, "SET x 40", OK),
                s(0, "MULTI", OK),
                s(0, "SET a 1", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s3(0, "GET a", "$nil", "_\"\""),
                // After EXEC nothing is watched any more.
                s(1, "SET x 50", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "WATCH x", OK),
                s(0, "SET x 60", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH x{a} y{b} z{c}", OK),
                s(0, "WATCH k", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
            ],
        ),
        (
            "UNWATCH, DISCARD and the dirty flag",
            vec![
                s(0, "UNWATCH", OK),
                s(0, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(1, "SET x 40", OK),
                s(0, "UNWATCH", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "WATCH x", OK),
                s(0, "SET x 10", OK),
                s(0, "MULTI", OK),
                s(0, "DISCARD", OK),
                s(0, "MULTI", OK),
                s(0, "INCR x", Q),
                s(0, "EXEC", "*[:\"11\"]"),
                s(0, "WATCH x", OK),
                s(0, "MULTI", OK),
                s(0, "UNWATCH", Q),
                s(0, "EXEC", "*[+\"OK\"]"),
            ],
        ),
        (
            "FLUSHDB, FLUSHALL and SWAPDB touch the watched keys they change",
            vec![
                s(0, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(1, "FLUSHDB", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH x", OK),
                s(1, "FLUSHDB", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(1, "FLUSHALL", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH x", OK),
                s(1, "FLUSHALL", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(1, "SWAPDB 0 1", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(1, "FLUSHALL", OK),
                s(1, "SELECT 1", OK),
                s(1, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(1, "SWAPDB 0 1", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH nothere", OK),
                s(1, "SWAPDB 0 1", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(1, "FLUSHALL", OK),
                s(0, "MSET a a b b", OK),
                s(0, "WATCH b a", OK),
                s(0, "FLUSHALL", OK),
                s(0, "PING", "+\"PONG\""),
            ],
        ),
        (
            "WATCH remembers the database; EXPIRE and MOVE touch the key",
            vec![
                s(0, "SELECT 5", OK),
                s(0, "SET x 30", OK),
                s(0, "WATCH x", OK),
                s(0, "SELECT 1", OK),
                s(0, "SET x 10", OK),
                s(0, "SELECT 5", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "SELECT 0", OK),
                s(0, "SET x foo", OK),
                s(0, "WATCH x", OK),
                s(1, "EXPIRE x 10", ":\"1\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH x", OK),
                s(1, "MOVE x 2", ":\"1\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                // RENAME touches its source and its destination (of two shards).
                s(1, "SET src 1", OK),
                s(0, "WATCH src", OK),
                s(1, "RENAME src dst", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH dst", OK),
                s(1, "SET other 2", OK),
                s(1, "RENAME other dst", OK),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
            ],
        ),
        (
            "a write of any type to a watched key aborts EXEC; a command that changes \\
             nothing does not",
            vec![
                s(0, "WATCH h", OK),
                s(1, "HSET h f v", ":\"1\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(1, "SADD s a", ":\"1\""),
                s(0, "WATCH s", OK),
                s(1, "SADD s a", ":\"0\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "WATCH s", OK),
                s(1, "SADD s b", ":\"1\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH l", OK),
                s(1, "LPUSH l x", ":\"1\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(1, "ZADD z 1 m", ":\"1\""),
                s(0, "WATCH z", OK),
                s(1, "ZADD z 1 m", ":\"0\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "WATCH z", OK),
                s3(1, "ZINCRBY z 2 m", "$\"3\"", ",\"3\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(1, "SET k v", OK),
                s(0, "WATCH k", OK),
                s(1, "PERSIST k", ":\"0\""),
                s(1, "GETEX k", "$\"v\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
                s(0, "WATCH k", OK),
                s(1, "APPEND k x", ":\"2\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s3(0, "EXEC", "*nil", "_\"\""),
                s(0, "WATCH nokey", OK),
                s(1, "DEL nokey", ":\"0\""),
                s(1, "HDEL h nof", ":\"0\""),
                s(1, "SREM s nom", ":\"0\""),
                s(0, "MULTI", OK),
                s(0, "PING", Q),
                s(0, "EXEC", "*[+\"PONG\"]"),
            ],
        ),
        (
            "hashes and maps inside EXEC, in each protocol's shape",
            vec![
                s(0, "MULTI", OK),
                s(0, "HSET h f v", Q),
                s(0, "HGETALL h", Q),
                s(0, "HGET h nosuch", Q),
                s3(
                    0,
                    "EXEC",
                    "*[:\"1\", *[$\"f\", $\"v\"], $nil]",
                    "*[:\"1\", %[$\"f\", $\"v\"], _\"\"]",
                ),
            ],
        ),
    ]
}

/// Runs every script on the server at `socket`, in protocol `proto`: the replies as
/// [`show`] writes them, per script.
fn run(socket: &Path, proto: u8) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (_, steps) in scripts() {
        let mut c = [Wire::connect(socket), Wire::connect(socket)];
        for w in &mut c {
            if proto == 3 {
                w.call(&["HELLO", "3"]);
            }
        }
        c[0].call(&["FLUSHALL"]);
        let mut got = Vec::new();
        for st in &steps {
            let args: Vec<&str> = st.cmd.split(' ').collect();
            got.push(show(&c[st.conn].call(&args)));
        }
        out.push(got);
    }
    out
}

fn start(tmp: &Path) -> KvServer {
    let (dir, socket) = (tmp.join("data"), tmp.join("s"));
    KvServer::weft(&dir, &socket, &["--workers", "2", "--fsync", "always"]).unwrap()
}

/// Every script's replies are the expected ones, in RESP2 and RESP3; redis-server,
/// if installed, answers the same.
#[test]
fn transactions_answer_as_redis() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let socket = tmp.path().join("s");
    let redis_tmp = tempfile::tempdir().unwrap();
    let redis = KvServer::redis(redis_tmp.path(), &redis_tmp.path().join("r"), false);
    for proto in [2u8, 3] {
        let got = run(&socket, proto);
        let theirs = redis
            .as_ref()
            .map(|_| run(&redis_tmp.path().join("r"), proto));
        for (i, (name, steps)) in scripts().into_iter().enumerate() {
            for (j, st) in steps.iter().enumerate() {
                let want = match proto {
                    3 => st.resp3.unwrap_or(st.resp2),
                    _ => st.resp2,
                };
                assert_eq!(
                    got[i][j], want,
                    "RESP{proto}, {name}: step {j} `{}`",
                    st.cmd
                );
                if let Some(t) = &theirs {
                    assert_eq!(
                        got[i][j], t[i][j],
                        "RESP{proto}, {name}: step {j} `{}`: weft-kv and redis-server differ",
                        st.cmd
                    );
                }
            }
        }
    }
    if redis.is_none() {
        common::skip("redis-server is not installed: only weft-kv's own expectations checked");
    }
}

/// A watched key that was live when watched and whose time passed aborts EXEC, even
/// before anything removed it; a key already expired when watched does not.
#[test]
fn watched_keys_that_expire_abort_exec() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let mut c = Wire::connect(&tmp.path().join("s"));
    let wait_gone = |c: &mut Wire, key: &str| {
        let deadline = Instant::now() + resp::EVENTUALLY;
        while c.call(&["PTTL", key]).int() != Some(-2) {
            assert!(Instant::now() < deadline, "{key} did not expire");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    assert_eq!(show(&c.call(&["SET", "x", "foo", "PX", "30"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["WATCH", "x"])), "+\"OK\"");
    wait_gone(&mut c, "x");
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["PING"])), "+\"QUEUED\"");
    assert_eq!(show(&c.call(&["EXEC"])), "*nil");
    // Stale when watched: its removal changes nothing.
    assert_eq!(show(&c.call(&["SET", "y", "foo", "PX", "1"])), "+\"OK\"");
    wait_gone(&mut c, "y");
    assert_eq!(show(&c.call(&["WATCH", "y"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["PING"])), "+\"QUEUED\"");
    assert_eq!(show(&c.call(&["EXEC"])), "*[+\"PONG\"]");
}

/// Over the memory limit a write is refused while queueing (and DISCARD works), EXEC
/// of a queue with a write aborts with OOM, and a queue of reads runs.
#[test]
fn memory_limit_and_transactions() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let socket = tmp.path().join("s");
    let (mut c, mut admin) = (Wire::connect(&socket), Wire::connect(&socket));
    let oom = "-\"OOM command not allowed when used memory > 'maxmemory'.\"";
    assert_eq!(show(&c.call(&["SET", "x", "value"])), "+\"OK\"");
    assert_eq!(
        show(&admin.call(&["CONFIG", "SET", "maxmemory", "1"])),
        "+\"OK\""
    );
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["SET", "x", "1"])), oom);
    assert_eq!(show(&c.call(&["DISCARD"])), "+\"OK\"");
    assert_eq!(
        show(&admin.call(&["CONFIG", "SET", "maxmemory", "0"])),
        "+\"OK\""
    );

    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["GET", "x"])), "+\"QUEUED\"");
    assert_eq!(show(&c.call(&["PING"])), "+\"QUEUED\"");
    assert_eq!(
        show(&admin.call(&["CONFIG", "SET", "maxmemory", "1"])),
        "+\"OK\""
    );
    assert_eq!(show(&c.call(&["EXEC"])), "*[$\"value\", +\"PONG\"]");

    assert_eq!(
        show(&c.call(&["CONFIG", "SET", "maxmemory", "0"])),
        "+\"OK\""
    );
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["SET", "x", "1"])), "+\"QUEUED\"");
    assert_eq!(show(&c.call(&["GET", "x"])), "+\"QUEUED\"");
    assert_eq!(
        show(&admin.call(&["CONFIG", "SET", "maxmemory", "1"])),
        "+\"OK\""
    );
    assert_eq!(
        show(&c.call(&["EXEC"])),
        "-\"EXECABORT Transaction discarded because of: OOM command not allowed when used \
         memory > 'maxmemory'.\""
    );
    assert_eq!(
        show(&admin.call(&["CONFIG", "SET", "maxmemory", "0"])),
        "+\"OK\""
    );
    assert_eq!(show(&c.call(&["GET", "x"])), "$\"value\"");
}

/// A connection in MULTI that goes away discards its queue; its watched keys no
/// longer count in the client memory INFO shows.
#[test]
fn a_connection_that_ends_discards() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let socket = tmp.path().join("s");
    let mut admin = Wire::connect(&socket);
    let before = admin.info_field("memory", "mem_clients_normal");
    {
        let mut c = Wire::connect(&socket);
        let keys: Vec<String> = (0..2000).map(|i| format!("watched:{i:0>60}")).collect();
        let mut watch = vec!["WATCH"];
        watch.extend(keys.iter().map(String::as_str));
        assert_eq!(show(&c.call(&watch)), "+\"OK\"");
        assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
        assert_eq!(show(&c.call(&["SET", "gone", "1"])), "+\"QUEUED\"");
        // The watched keys count in its client memory.
        let with = admin.info_field("memory", "mem_clients_normal");
        assert!(with >= before + 2000 * 60, "{before} then {with}");
    }
    let deadline = Instant::now() + resp::EVENTUALLY;
    while admin.info_field("clients", "connected_clients") != 1 {
        assert!(Instant::now() < deadline, "the connection did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(show(&admin.call(&["GET", "gone"])), "$nil");
    assert!(admin.info_field("memory", "mem_clients_normal") < before + 2000 * 60);
}

/// CLIENT LIST shows a connection in MULTI (flag `x`, `multi=` its queued commands,
/// `multi-mem=` their bytes) and one whose watched key changed (flag `d`).
#[test]
fn client_list_shows_transactions() {
    let tmp = tempfile::tempdir().unwrap();
    let _server = start(tmp.path());
    let socket = tmp.path().join("s");
    let (mut c, mut admin) = (Wire::connect(&socket), Wire::connect(&socket));
    let id = c.call(&["CLIENT", "ID"]).int().unwrap();
    let line = |admin: &mut Wire| -> String {
        let all = admin.call(&["CLIENT", "LIST"]).text();
        all.lines()
            .find(|l| l.starts_with(&format!("id={id} ")))
            .unwrap()
            .to_string()
    };
    let field = |l: &str, name: &str| -> String {
        l.split(' ')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_string()
    };
    let l = line(&mut admin);
    assert_eq!(
        (field(&l, "flags"), field(&l, "multi")),
        ("U".into(), "-1".into())
    );
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["SET", "a", "b"])), "+\"QUEUED\"");
    assert_eq!(show(&c.call(&["PING"])), "+\"QUEUED\"");
    let l = line(&mut admin);
    assert_eq!(
        (field(&l, "flags"), field(&l, "multi")),
        ("xU".into(), "2".into())
    );
    assert!(field(&l, "multi-mem").parse::<u64>().unwrap() >= 13);
    assert_eq!(show(&c.call(&["DISCARD"])), "+\"OK\"");
    // A watched key changed: what is queued now is not kept (EXEC fails anyway).
    assert_eq!(show(&c.call(&["WATCH", "w"])), "+\"OK\"");
    assert_eq!(show(&admin.call(&["SET", "w", "1"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["MULTI"])), "+\"OK\"");
    assert_eq!(show(&c.call(&["SET", "a", "b"])), "+\"QUEUED\"");
    let l = line(&mut admin);
    assert_eq!(
        (
            field(&l, "flags"),
            field(&l, "multi"),
            field(&l, "multi-mem")
        ),
        ("xdU".into(), "0".into(), "0".into())
    );
    assert_eq!(show(&c.call(&["EXEC"])), "*nil");
    let l = line(&mut admin);
    assert_eq!(
        (
            field(&l, "flags"),
            field(&l, "multi"),
            field(&l, "multi-mem")
        ),
        ("U".into(), "-1".into(), "0".into())
    );
}
