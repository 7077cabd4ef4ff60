//! INFO, CLIENT and COMMAND as a Redis 7 server gives them, tried against the built
//! `weft kv serve` with two workers (so that connections and shards are spread over
//! both):
//!
//! - CLIENT LIST and INFO show every connection with Redis's fields; CLIENT KILL
//!   closes other connections (by id, address, user; the caller after its reply);
//! - CLIENT PAUSE WRITE holds writes, not reads, until CLIENT UNPAUSE;
//! - CLIENT REPLY OFF and SKIP really send nothing, for commands of either worker;
//! - WAIT holds the connection until its client goes, and the server lets it go;
//! - INFO has Redis's sections and fields, and counts calls, refusals, failures and
//!   errors per command and per error, over both workers;
//! - COMMAND describes each command with Redis 7's ten fields;
//! - FUNCTION FLUSH and SCRIPT FLUSH answer OK, other scripting a clear error.

mod common;
#[path = "common/kv.rs"]
mod kv;
#[path = "common/resp.rs"]
mod resp;

use kv::{eventually, KvServer, CEILING, WEFT};
use resp::{int, ok, Val, Wire};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `weft kv serve` with two workers on `dir`, on its Unix socket and, if `port` is
/// not 0, on TCP.
fn server(dir: &Path, port: u16) -> KvServer {
    let socket = dir.join("kv.sock");
    let log = dir.join("kv.stderr");
    let child = Command::new(WEFT)
        .args(["kv", "serve", "--workers", "2", "--port", &port.to_string()])
        .arg("--dir")
        .arg(dir.join("data"))
        .arg("--socket")
        .arg(&socket)
        .env_remove("WEFT_KV_PASSWORD")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start weft kv serve");
    let s = KvServer { child, socket, log };
    let deadline = Instant::now() + CEILING;
    while std::os::unix::net::UnixStream::connect(&s.socket).is_err()
        || (port != 0 && std::net::TcpStream::connect(("127.0.0.1", port)).is_err())
    {
        assert!(
            Instant::now() < deadline,
            "weft kv serve did not start: {}",
            s.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    s
}

/// The `key=value` fields of a CLIENT LIST line.
fn line_fields(line: &str) -> Vec<(String, String)> {
    line.split(' ')
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whether the server closed the connection: a PING gets no reply, the socket ends.
fn closed(c: &mut Wire) -> bool {
    use std::io::{BufRead, Write};
    let _ = c.w.write_all(b"PING\r\n");
    let mut line = Vec::new();
    matches!(c.r.read_until(b'\n', &mut line), Ok(0) | Err(_))
}

/// An inline command over TCP, and its reply line (empty: the connection ended).
fn tcp_call(c: &mut std::net::TcpStream, line: &str) -> String {
    use std::io::{Read, Write};
    let _ = c.write_all(format!("{line}\r\n").as_bytes());
    let mut got = Vec::new();
    let mut byte = [0u8];
    while !got.ends_with(b"\r\n") {
        match c.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).trim_end().to_string()
}

/// Redis 7.0's CLIENT LIST fields, in order.
const FIELDS: [&str; 28] = [
    "id",
    "addr",
    "laddr",
    "fd",
    "name",
    "age",
    "idle",
    "flags",
    "db",
    "sub",
    "psub",
    "ssub",
    "multi",
    "qbuf",
    "qbuf-free",
    "argv-mem",
    "multi-mem",
    "rbs",
    "rbp",
    "obl",
    "oll",
    "omem",
    "tot-mem",
    "events",
    "cmd",
    "user",
    "redir",
    "resp",
];

#[test]
fn client_list_shows_every_connection_and_kill_closes_them() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let s = server(dir.path(), port);
    let mut me = Wire::connect(&s.socket);
    let mut others: Vec<(Wire, i64)> = (0..4)
        .map(|i| {
            let mut c = Wire::connect(&s.socket);
            assert_eq!(c.call(&["CLIENT", "SETNAME", &format!("c{i}")]), ok());
            if i == 3 {
                c.call(&["HELLO", "3"]);
            }
            let id = c.call(&["CLIENT", "ID"]).int().unwrap();
            (c, id)
        })
        .collect();
    // One over TCP: its address and the server's, as ip:port.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(CEILING)).unwrap();
    let tcp_addr = tcp.local_addr().unwrap().to_string();
    assert_eq!(tcp_call(&mut tcp, "CLIENT SETNAME t"), "+OK");
    let my_id = me.call(&["CLIENT", "ID"]).int().unwrap();

    let list = me.call(&["CLIENT", "LIST"]).text();
    let lines: Vec<Vec<(String, String)>> = list.lines().map(line_fields).collect();
    assert_eq!(lines.len(), 6, "every connection is listed:\n{list}");
    for l in &lines {
        let names: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, FIELDS, "Redis's fields in Redis's order:\n{list}");
    }
    let by_id = |id: i64| {
        lines
            .iter()
            .find(|l| l[0].1 == id.to_string())
            .unwrap_or_else(|| panic!("no line for id {id}:\n{list}"))
            .iter()
            .cloned()
            .collect::<std::collections::HashMap<_, _>>()
    };
    let mine = by_id(my_id);
    assert_eq!(mine["cmd"], "client|list");
    assert_eq!(mine["flags"], "U");
    assert_eq!(mine["addr"], format!("{}:0", s.socket.display()));
    for (i, (_, id)) in others.iter().enumerate() {
        let l = by_id(*id);
        assert_eq!(l["name"], format!("c{i}"));
        assert_eq!(l["cmd"], "client|id");
        assert_eq!(l["resp"], if i == 3 { "3" } else { "2" });
    }
    let t = lines
        .iter()
        .find(|l| l[4].1 == "t")
        .expect("the TCP client is listed");
    assert_eq!(t[1].1, tcp_addr, "addr is the client's ip:port");
    assert_eq!(t[2].1, format!("127.0.0.1:{port}"), "laddr is the server's");
    assert_eq!(t[7].1, "N", "a TCP client's flags");
    // CLIENT INFO is the caller's line.
    let info_line = line_fields(&me.call(&["CLIENT", "INFO"]).text());
    assert_eq!(info_line[0].1, my_id.to_string());
    assert_eq!(info_line[24].1, "client|info");

    // KILL by id: that connection is closed, whichever worker serves it.
    let victim = others.remove(1);
    assert_eq!(
        me.call(&["CLIENT", "KILL", "ID", &victim.1.to_string()]),
        int(1)
    );
    let mut victim = victim.0;
    eventually("the killed connection is closed", || closed(&mut victim));
    // The old form, by address: the TCP client.
    assert_eq!(me.call(&["CLIENT", "KILL", &tcp_addr]), ok());
    eventually("the TCP connection is closed", || {
        tcp_call(&mut tcp, "PING").is_empty()
    });
    assert_eq!(
        me.call(&["CLIENT", "KILL", &tcp_addr]),
        Val::Line(b'-', "ERR No such client".into())
    );
    // Every other connection of user default (SKIPME yes by default).
    assert_eq!(me.call(&["CLIENT", "KILL", "USER", "default"]), int(3));
    for (c, _) in &mut others {
        eventually("killed by user", || closed(c));
    }
    eventually("only the caller is left", || {
        me.call(&["CLIENT", "LIST"]).text().lines().count() == 1
    });
    // SKIPME no: the caller too, after its reply.
    assert_eq!(
        me.call(&[
            "CLIENT",
            "KILL",
            "ADDR",
            &format!("{}:0", s.socket.display()),
            "SKIPME",
            "no"
        ]),
        int(1)
    );
    assert!(closed(&mut me));
}

#[test]
fn client_pause_write_holds_writes_until_unpause() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut admin = Wire::connect(&s.socket);
    let mut writer = Wire::connect(&s.socket);
    let mut reader = Wire::connect(&s.socket);
    assert_eq!(admin.call(&["SET", "k", "before"]), ok());
    assert_eq!(admin.call(&["CLIENT", "PAUSE", "60000", "WRITE"]), ok());
    writer.send(&[b"SET".to_vec(), b"k".to_vec(), b"during".to_vec()]);
    // The write waits, held: the server counts it blocked, and reads still run.
    eventually("the write is held", || {
        reader.info("clients", "blocked_clients") == "1"
    });
    assert_eq!(
        reader.call(&["GET", "k"]),
        Val::Blob(b'$', Some(b"before".to_vec()))
    );
    assert_eq!(admin.call(&["CLIENT", "UNPAUSE"]), ok());
    assert_eq!(writer.read(), ok());
    assert_eq!(
        reader.call(&["GET", "k"]),
        Val::Blob(b'$', Some(b"during".to_vec()))
    );
    assert_eq!(reader.info("clients", "blocked_clients"), "0");
}

#[test]
fn client_reply_off_and_skip_send_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    let keys: Vec<String> = (0..16).map(|i| format!("key{i}")).collect();
    // Keys of both workers' shards: the replies of some come from the other worker.
    for k in &keys {
        assert_eq!(c.call(&["SET", k, k]), ok());
    }
    let cmd =
        |words: &[&str]| -> Vec<Vec<u8>> { words.iter().map(|w| w.as_bytes().to_vec()).collect() };
    // One pipeline: nothing while OFF, then ON's OK and the ECHO; each GET after a
    // SKIP sends nothing; then the PING.
    c.send(&cmd(&["CLIENT", "REPLY", "OFF"]));
    for k in &keys {
        c.send(&cmd(&["GET", k]));
    }
    c.send(&cmd(&["SET", "x", "1"]));
    c.send(&cmd(&["NOSUCHCOMMAND"]));
    c.send(&cmd(&["CLIENT", "REPLY", "ON"]));
    c.send(&cmd(&["ECHO", "a"]));
    for k in &keys {
        c.send(&cmd(&["CLIENT", "REPLY", "SKIP"]));
        c.send(&cmd(&["GET", k]));
    }
    c.send(&cmd(&["GET", "x"]));
    c.send(&cmd(&["PING"]));
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), Val::Blob(b'$', Some(b"a".to_vec())));
    assert_eq!(
        c.read(),
        Val::Blob(b'$', Some(b"1".to_vec())),
        "SET x ran, silently"
    );
    assert_eq!(c.read(), Val::Line(b'+', "PONG".into()));
    // Nothing more: the next reply is this ECHO's.
    assert_eq!(
        c.call(&["ECHO", "end"]),
        Val::Blob(b'$', Some(b"end".to_vec()))
    );
}

#[test]
fn wait_holds_the_connection_until_its_client_goes() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    // No replica: asking for none answers at once, asking for one waits the timeout.
    assert_eq!(c.call(&["WAIT", "0", "0"]), int(0));
    assert_eq!(c.call(&["WAIT", "1", "10"]), int(0));
    let mut waiting = Wire::connect(&s.socket);
    waiting.send(&[b"WAIT".to_vec(), b"1".to_vec(), b"0".to_vec()]);
    eventually("WAIT 1 0 holds its connection", || {
        c.info("clients", "blocked_clients") == "1"
    });
    assert_eq!(c.info("clients", "connected_clients"), "2");
    drop(waiting);
    eventually("the server lets the connection go", || {
        c.info("clients", "connected_clients") == "1" && c.info("clients", "blocked_clients") == "0"
    });
}

#[test]
fn info_counts_calls_refusals_failures_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    for (field, want) in [
        ("server", "redis_mode", "standalone"),
        ("cluster", "cluster_enabled", "0"),
        ("memory", "mem_allocator", "libc"),
        ("persistence", "rdb_bgsave_in_progress", "0"),
        ("persistence", "aof_enabled", "1"),
        ("replication", "role", "master"),
    ]
    .map(|(sec, f, v)| ((sec, f), v))
    {
        assert_eq!(c.info(field.0, field.1), want);
    }
    let all = c.call(&["INFO"]).text();
    for section in [
        "# CPU",
        "# Errorstats",
        "# Cluster",
        "# Replication",
        "# Keyspace",
    ] {
        assert!(all.contains(section), "INFO shows {section} by default");
    }
    assert!(
        !all.contains("# Commandstats"),
        "not by default, as in Redis"
    );
    assert!(c.call(&["INFO", "all"]).text().contains("# Commandstats"));
    let cpu: f64 = c.info("cpu", "used_cpu_user").parse().unwrap();
    assert!(cpu >= 0.0);

    assert_eq!(c.call(&["CONFIG", "RESETSTAT"]), ok());
    // GETs on keys of both workers' shards, run by both workers.
    for i in 0..8 {
        assert_eq!(c.call(&["GET", &format!("key{i}")]), Val::Blob(b'$', None));
    }
    assert_eq!(c.call(&["GET"]).kind(), b'-'); // refused: arity
    assert_eq!(c.call(&["SET", "s", "text"]), ok());
    assert_eq!(c.call(&["INCR", "s"]).kind(), b'-'); // ran, failed
    assert_eq!(c.call(&["NOSUCH"]).kind(), b'-'); // no command: only an error
    assert_eq!(c.call(&["CLIENT", "UNPAUSE", "x"]).kind(), b'-'); // refused subcommand
    let stats = c.call(&["INFO", "commandstats"]).text();
    let line = |name: &str| {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| {
                panic!(
                    "no cmdstat_{name}:
{stats}"
                )
            })
            .to_string()
    };
    let field = |name: &str, f: &str| -> u64 {
        line(name)
            .split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{f}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(field("get", "calls"), 8);
    assert_eq!(field("get", "rejected_calls"), 1);
    assert_eq!(field("get", "failed_calls"), 0);
    assert_eq!(field("incr", "calls"), 1);
    assert_eq!(field("incr", "failed_calls"), 1);
    assert_eq!(field("client|unpause", "rejected_calls"), 1);
    assert!(field("get", "usec") <= field("get", "calls") * 60_000_000);
    assert_eq!(c.info("errorstats", "errorstat_ERR"), "count=4");
    assert_eq!(c.info("stats", "total_error_replies"), "4");
    assert!(
        c.info("stats", "total_net_input_bytes")
            .parse::<u64>()
            .unwrap()
            > 0
    );
}

#[test]
fn command_describes_each_command_with_ten_fields() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    let all = c.call(&["COMMAND"]);
    let count = c.call(&["COMMAND", "COUNT"]).int().unwrap();
    assert_eq!(all.items().len() as i64, count);
    let names: Vec<String> = all.items().iter().map(|e| e.items()[0].text()).collect();
    for e in all.items() {
        assert_eq!(e.items().len(), 10, "{e:?}");
    }
    let list: Vec<String> = c
        .call(&["COMMAND", "LIST"])
        .items()
        .iter()
        .map(Val::text)
        .collect();
    assert!(list.contains(&"client|kill".to_string()) && list.contains(&"get".to_string()));
    let docs = c.call(&["COMMAND", "DOCS"]);
    assert_eq!(
        docs.items().len() as i64,
        2 * count,
        "every command is documented"
    );
    for name in &names {
        let d = c.call(&["COMMAND", "DOCS", name]);
        let fields: Vec<String> = d.items()[1]
            .items()
            .iter()
            .step_by(2)
            .map(Val::text)
            .collect();
        assert!(
            fields.starts_with(&[
                "summary".into(),
                "since".into(),
                "group".into(),
                "complexity".into()
            ]),
            "{name}: {fields:?}"
        );
    }
    for (args, want) in [
        (&["MSET", "a", "1", "b", "2"][..], &["a", "b"][..]),
        (&["del", "x", "y", "z"], &["x", "y", "z"]),
        (&["set", "k", "v", "EX", "10"], &["k"]),
    ] {
        let mut a = vec!["COMMAND", "GETKEYS"];
        a.extend(args);
        let keys: Vec<String> = c.call(&a).items().iter().map(Val::text).collect();
        assert_eq!(keys, want, "{args:?}");
    }
    let client = c.call(&["COMMAND", "INFO", "client"]);
    let subs = client.items()[0].items()[9].items();
    assert!(subs.iter().any(|s| s.items()[0].text() == "client|pause"));
}

#[test]
fn function_and_script_flush_answer_ok_and_other_scripting_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    assert_eq!(c.call(&["FUNCTION", "FLUSH"]), ok());
    assert_eq!(c.call(&["FUNCTION", "FLUSH", "ASYNC"]), ok());
    assert_eq!(c.call(&["SCRIPT", "FLUSH"]), ok());
    for cmd in [
        &["FUNCTION", "LIST"][..],
        &["EVAL", "return 1", "0"],
        &["SCRIPT", "LOAD", "x"],
    ] {
        let r = c.call(cmd);
        assert_eq!(r.kind(), b'-');
        assert!(
            r.text().contains("weft-kv has no scripting"),
            "{cmd:?}: {r:?}"
        );
    }
}

/// INFO's `rdb_changes_since_last_save` counts the changes logged since the last SAVE
/// or compaction (Redis's `dirty`): a write that changes nothing (SETBIT or BITFIELD
/// SET of the value already there, a read) counts none, one over several shards or in
/// a transaction each change once; SAVE and a finished BGREWRITEAOF bring it to 0.
#[test]
fn info_counts_changes_since_the_last_save() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), 0);
    let mut c = Wire::connect(&s.socket);
    // INFO on a connection of its own (the other one is in a transaction at times).
    let mut admin = Wire::connect(&s.socket);
    let mut changes = || admin.info_field("persistence", "rdb_changes_since_last_save");
    assert_eq!(changes(), 0);
    let mut expect = |c: &mut Wire, line: &[&str], more: i64| {
        let before = changes();
        c.call(line);
        assert_eq!(changes(), before + more, "{line:?}");
    };
    expect(&mut c, &["SETBIT", "foo", "0", "0"], 1); // creates the key
    expect(&mut c, &["SETBIT", "foo", "0", "0"], 0);
    expect(&mut c, &["SETBIT", "foo", "0", "1"], 1);
    expect(&mut c, &["SETBIT", "foo", "0", "1"], 0);
    expect(&mut c, &["SETBIT", "foo", "90", "0"], 1); // only longer
    expect(&mut c, &["BITFIELD", "bar", "SET", "i5", "0", "0"], 1);
    expect(&mut c, &["BITFIELD", "bar", "SET", "i5", "0", "0"], 0);
    expect(&mut c, &["BITFIELD", "bar", "INCRBY", "i5", "0", "1"], 1);
    expect(&mut c, &["GET", "foo"], 0);
    expect(&mut c, &["DEL", "missing"], 0);
    expect(&mut c, &["MSET", "a", "1", "b", "2", "c", "3", "d", "4"], 4);
    assert_eq!(c.call(&["MULTI"]), Val::Line(b'+', "OK".into()));
    // Two changes, and a SETBIT of the bit already set.
    c.call(&["SET", "a", "5"]);
    c.call(&["INCR", "n"]);
    c.call(&["SETBIT", "foo", "0", "1"]);
    expect(&mut c, &["EXEC"], 2);
    drop(expect);
    assert_eq!(c.call(&["SAVE"]), ok());
    assert_eq!(changes(), 0);
    c.call(&["SET", "k", "v"]);
    assert_eq!(changes(), 1);
    assert_eq!(
        c.call(&["BGREWRITEAOF"]).text(),
        "Background append only file rewriting started"
    );
    eventually("the compaction ends", || {
        c.info("persistence", "aof_rewrite_in_progress") == "0"
    });
    assert_eq!(changes(), 0);
}
