//! The server's own commands: connection state (HELLO, AUTH, SELECT, QUIT, RESET,
//! CLIENT), introspection (INFO, CONFIG, COMMAND) and administration (SAVE,
//! BGREWRITEAOF, SHUTDOWN). One function per command.

use super::conn::Conn;
use super::Server;
use crate::commands::{self, flags, Command};
use crate::exec::{Acks, ShardSet};
use crate::resp::Reply;
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// The Redis version weft-kv answers to (the commands and replies it follows).
pub const REDIS_VERSION: &str = "7.0.0";

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn bulk(s: impl Into<String>) -> Reply {
    Reply::Bulk(s.into().into_bytes())
}

/// Runs `cmd` if it is one of the server's own; `None` otherwise.
pub fn run(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &Command,
    args: &[Vec<u8>],
    _acks: &mut Acks,
) -> Option<Reply> {
    Some(match cmd.name {
        "hello" => hello(server, conn, args),
        "auth" => auth(server, conn, args),
        "select" => select(args),
        "quit" => {
            conn.close = true;
            Reply::OK
        }
        "reset" => {
            conn.proto = 2;
            conn.name = None;
            conn.authed = server.settings.password().is_none();
            Reply::Simple("RESET".into())
        }
        "client" => client(conn, args),
        "info" => info(server, args),
        "config" => config(server, args),
        "command" => command(args),
        "save" => save(server),
        "bgsave" | "bgrewriteaof" => bgrewriteaof(server, cmd.name),
        "lastsave" => Reply::Int(server.last_save.load(Relaxed) as i64),
        "shutdown" => shutdown(server, args),
        "wait" => Reply::Int(0),
        _ => return None,
    })
}

/// HELLO [protover [AUTH username password] [SETNAME name]]: switches the protocol
/// (2 or 3; anything else is `NOPROTO`), optionally authenticates, and answers the
/// server's description as a map.
fn hello(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let mut proto = conn.proto;
    if args.len() > 1 {
        match std::str::from_utf8(&args[1])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(v @ 2..=3) => proto = v as u8,
            Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
            None => return Reply::err("ERR Protocol version is not an integer or out of range"),
        }
    }
    let mut i = 2;
    while i < args.len() {
        if eq(&args[i], "auth") && i + 2 < args.len() {
            let r = check_password(server, &args[i + 1], &args[i + 2]);
            if r.is_error() {
                return r;
            }
            conn.authed = true;
            i += 3;
        } else if eq(&args[i], "setname") && i + 1 < args.len() {
            conn.name = Some(args[i + 1].clone());
            i += 2;
        } else {
            return Reply::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                text(&args[i])
            ));
        }
    }
    if !conn.authed {
        return Reply::err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    conn.proto = proto;
    Reply::Map(vec![
        (bulk("server"), bulk("redis")),
        (bulk("version"), bulk(REDIS_VERSION)),
        (bulk("proto"), Reply::Int(proto as i64)),
        (bulk("id"), Reply::Int(conn.id as i64)),
        (bulk("mode"), bulk("standalone")),
        (bulk("role"), bulk("master")),
        (bulk("modules"), Reply::Array(vec![])),
    ])
}

fn check_password(server: &Server, user: &[u8], pass: &[u8]) -> Reply {
    match server.settings.password() {
        None => Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        Some(p) if user == b"default" && p.as_bytes() == pass => Reply::OK,
        Some(_) => Reply::err("WRONGPASS invalid username-password pair or user is disabled."),
    }
}

/// AUTH [username] password: only the user `default` exists.
fn auth(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let (user, pass): (&[u8], &[u8]) = match args.len() {
        2 => (b"default", &args[1]),
        3 => (&args[1], &args[2]),
        _ => return Reply::err("ERR syntax error"),
    };
    let r = check_password(server, user, pass);
    if !r.is_error() {
        conn.authed = true;
    }
    r
}

/// SELECT index: there is one database, 0.
fn select(args: &[Vec<u8>]) -> Reply {
    match std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        Some(0) => Reply::OK,
        Some(_) => Reply::err("ERR DB index is out of range"),
        None => Reply::err("ERR value is not an integer or out of range"),
    }
}

/// CLIENT ID | GETNAME | SETNAME name | SETINFO attr value | INFO | LIST | NO-EVICT |
/// NO-TOUCH | REPLY ON.
fn client(conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let sub = args
        .get(1)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    match (sub.as_slice(), args.len()) {
        (b"id", 2) => Reply::Int(conn.id as i64),
        (b"getname", 2) => conn.name.clone().map_or(Reply::Nil, Reply::Bulk),
        (b"setname", 3) => {
            if args[2].iter().any(|&c| c <= b' ' || c > b'~') {
                return Reply::err(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            conn.name = (!args[2].is_empty()).then(|| args[2].clone());
            Reply::OK
        }
        (b"setinfo", 4) => Reply::OK,
        (b"no-evict" | b"no-touch" | b"reply", 3) => Reply::OK,
        (b"info", 2) | (b"list", _) => {
            let name = conn.name.as_deref().map(text).unwrap_or_default();
            let line = format!("id={} name={} db=0 resp={}\n", conn.id, name, conn.proto);
            Reply::Verbatim("txt", line.into_bytes())
        }
        _ => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            text(args.get(1).map_or(&b""[..], |v| v))
        )),
    }
}

/// INFO [section ...]: server, clients, memory, persistence, stats, keyspace.
fn info(server: &Server, args: &[Vec<u8>]) -> Reply {
    let want = |name: &str| {
        args.len() == 1
            || args[1..]
                .iter()
                .any(|a| eq(a, name) || eq(a, "all") || eq(a, "everything") || eq(a, "default"))
    };
    let shards = server.shards.list();
    let mut out = String::new();
    if want("server") {
        out += &format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nweft_kv_version:{}\r\nredis_mode:standalone\r\nos:Linux\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nexecutable:weft\r\nshards:{}\r\nworkers:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            usize::BITS,
            std::process::id(),
            server.config.port,
            server.started.elapsed().as_secs(),
            shards.len(),
            server.workers,
        );
    }
    if want("clients") {
        out += &format!(
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            server.clients.load(Relaxed),
            server.settings.maxclients(),
        );
    }
    let used: u64 = shards.iter().map(|s| s.memory.load(Relaxed)).sum();
    if want("memory") {
        out += &format!(
            "# Memory\r\nused_memory:{used}\r\nmaxmemory:{}\r\nmaxmemory_policy:noeviction\r\nmem_clients_normal:{}\r\n\r\n",
            server.settings.maxmemory(),
            server.client_memory.load(Relaxed),
        );
    }
    if want("persistence") {
        let log: u64 = shards.iter().map(|s| s.log_len.load(Relaxed)).sum();
        let base: u64 = shards.iter().map(|s| s.log_base.load(Relaxed)).sum();
        let failing = (0..shards.len()).any(|s| server.shards.refuses_writes(s).is_some());
        out += &format!(
            "# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:{}\r\naof_last_write_status:{}\r\naof_current_size:{log}\r\naof_base_size:{base}\r\nappendfsync:{}\r\nrdb_last_save_time:{}\r\n\r\n",
            server.shards.rewriting() as u8,
            if failing { "err" } else { "ok" },
            server.settings.fsync().name(),
            server.last_save.load(Relaxed),
        );
    }
    if want("stats") {
        out += &format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nexpired_keys:{}\r\nexpired_time_cap_reached_count:{}\r\nexpire_cycle_cpu_milliseconds:{}\r\n\r\n",
            server.connections.load(Relaxed),
            server.commands.load(Relaxed),
            shards.iter().map(|s| s.expired.load(Relaxed)).sum::<u64>(),
            server.shards.expire_capped.load(Relaxed),
            server.shards.expire_us.load(Relaxed) / 1000,
        );
    }
    if want("keyspace") {
        let keys: u64 = shards.iter().map(|s| s.keys.load(Relaxed)).sum();
        let expires: u64 = shards.iter().map(|s| s.expires.load(Relaxed)).sum();
        out += "# Keyspace\r\n";
        if keys > 0 {
            out += &format!("db0:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
    Reply::Verbatim("txt", out.into_bytes())
}

/// CONFIG GET pattern... | SET name value... | RESETSTAT | REWRITE.
fn config(server: &Server, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" if args.len() >= 3 => {
            let mut pairs = Vec::new();
            for (name, value) in server.settings.all(&server.config) {
                if args[2..].iter().any(|p| crate::keyspace::glob_match(&p.to_ascii_lowercase(), name.as_bytes())) {
                    pairs.push((bulk(name), bulk(value)));
                }
            }
            Reply::Map(pairs)
        }
        b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            for kv in args[2..].chunks(2) {
                if let Err(e) = server.settings.set(&text(&kv[0]).to_ascii_lowercase(), &text(&kv[1])) {
                    return Reply::error(e);
                }
            }
            Reply::OK
        }
        b"resetstat" => {
            server.commands.store(0, Relaxed);
            Reply::OK
        }
        b"rewrite" => Reply::err("ERR weft-kv takes its configuration from the command line: give the option to `weft kv serve`"),
        _ => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            text(&args[1])
        )),
    }
}

fn command_info(c: &Command) -> Reply {
    let mut fl = Vec::new();
    for (bit, name) in [
        (flags::WRITE, "write"),
        (flags::READONLY, "readonly"),
        (flags::DENYOOM, "denyoom"),
        (flags::ADMIN, "admin"),
        (flags::NOAUTH, "no_auth"),
        (flags::FAST, "fast"),
    ] {
        if c.flags & bit != 0 {
            fl.push(Reply::Simple(name.into()));
        }
    }
    Reply::Array(vec![
        bulk(c.name),
        Reply::Int(c.arity as i64),
        Reply::Set(fl),
        Reply::Int(c.first_key as i64),
        Reply::Int(c.last_key as i64),
        Reply::Int(c.step as i64),
    ])
}

/// COMMAND | COMMAND COUNT | COMMAND INFO name... | COMMAND DOCS (empty) | COMMAND
/// LIST.
fn command(args: &[Vec<u8>]) -> Reply {
    let table = commands::table();
    let sub = args
        .get(1)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    match sub.as_slice() {
        b"" => Reply::Array(table.iter().map(command_info).collect()),
        b"count" => Reply::Int(table.len() as i64),
        b"docs" => Reply::Map(vec![]),
        b"list" => Reply::Array(table.iter().map(|c| bulk(c.name)).collect()),
        b"info" => Reply::Array(
            args[2..]
                .iter()
                .map(|n| commands::lookup(n).map_or(Reply::NilArray, command_info))
                .collect(),
        ),
        _ => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try COMMAND HELP.",
            text(&args[1])
        )),
    }
}

/// SAVE: every shard's log written and fsynced.
fn save(server: &Server) -> Reply {
    match server.shards.fsync_all() {
        Ok(()) => {
            server
                .last_save
                .store(crate::shard::now_ms() / 1000, Relaxed);
            Reply::OK
        }
        Err(e) => Reply::error(format!("ERR cannot write the append only file: {e}")),
    }
}

/// BGREWRITEAOF (and BGSAVE): compacts every shard's log in the background.
fn bgrewriteaof(server: &Arc<Server>, name: &str) -> Reply {
    if !server.shards.rewrite_all() {
        return Reply::err("ERR Background append only file rewriting already in progress");
    }
    Reply::Simple(if name == "bgsave" {
        "Background saving started".into()
    } else {
        "Background append only file rewriting started".into()
    })
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: writes and fsyncs every log and stops
/// writing them (`Shards::close`), removes the Unix socket and exits. ABORT has nothing
/// to abort.
fn shutdown(server: &Server, args: &[Vec<u8>]) -> Reply {
    let force = args[1..].iter().any(|a| eq(a, "force"));
    for a in &args[1..] {
        if eq(a, "abort") {
            return Reply::err("ERR No shutdown in progress.");
        }
        if !["nosave", "save", "now", "force"].iter().any(|w| eq(a, w)) {
            return Reply::err("ERR syntax error");
        }
    }
    if let Err(e) = server.shards.close() {
        if !force {
            return Reply::error(format!("ERR Errors trying to SHUTDOWN. Check logs. ({e})"));
        }
    }
    server.exit()
}
