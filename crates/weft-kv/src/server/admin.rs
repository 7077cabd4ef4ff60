//! The server's own commands: connection state (HELLO, AUTH, SELECT, QUIT, RESET,
//! CLIENT), introspection (INFO, CONFIG, COMMAND) and administration (SAVE,
//! BGREWRITEAOF, SHUTDOWN). One function per command.

use super::conn::Conn;
use super::{clients, command, info, Server};
use crate::commands::{self, Command};
use crate::exec::Acks;
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
        "select" => select(conn, args),
        "quit" => {
            conn.close = true;
            Reply::OK
        }
        "reset" => {
            // A transaction under way is discarded, every watched key forgotten.
            super::multi::discard(server, conn);
            super::tracking::end(conn);
            conn.set_proto(2);
            conn.set_name(b"");
            conn.reply = clients::ReplyMode::On;
            conn.authed = server.settings.password().is_none();
            conn.select(0);
            Reply::Simple("RESET".into())
        }
        "client" => clients::client(server, conn, args),
        "info" => info::info(server, args),
        "config" => config(server, args),
        "slowlog" => super::slowlog::slowlog(args),
        "latency" => super::slowlog::latency(args),
        "lolwut" => super::slowlog::lolwut(args),
        "debug" => crate::commands::debug::debug(server, conn, args),
        "memory" => super::memory::memory(server, conn, args),
        "command" => command::command(args),
        "save" => save(server),
        "bgsave" | "bgrewriteaof" => bgrewriteaof(server, cmd.name),
        "lastsave" => Reply::Int(server.last_save.load(Relaxed) as i64),
        "shutdown" => shutdown(server, args),
        "wait" => clients::wait(server, conn, args),
        "function" | "script" => scripting(cmd.name, args),
        // A primary without replicas.
        "role" => Reply::Array(vec![
            Reply::Bulk(b"master".to_vec()),
            Reply::Int(0),
            Reply::Array(vec![]),
        ]),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            no_scripting(cmd.name)
        }
        _ => return None,
    })
}

/// HELLO [protover [AUTH username password] [SETNAME name]]: switches the protocol
/// (2 or 3; anything else is `NOPROTO`), optionally authenticates and names the
/// connection, and answers the server's description as a map.
///
/// As Redis 7.0 does it, the options take effect in order, each at once (a later
/// error undoes nothing): AUTH authenticates (a wrong password answers WRONGPASS),
/// SETNAME names the connection (a name CLIENT SETNAME refuses is refused); then, if
/// the client is authenticated, the protocol changes.
fn hello(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let mut proto = conn.proto;
    if args.len() > 1 {
        match commands::parse_i64(&args[1]) {
            Some(v @ 2..=3) => proto = v as u8,
            Some(_) => return Reply::err("NOPROTO unsupported protocol version"),
            None => return Reply::err("ERR Protocol version is not an integer or out of range"),
        }
    }
    let mut i = 2;
    while i < args.len() {
        if eq(&args[i], "auth") && i + 2 < args.len() {
            let r = check_password(server, Some(&args[i + 1]), &args[i + 2]);
            if r.is_error() {
                return r;
            }
            conn.authed = true;
            i += 3;
        } else if eq(&args[i], "setname") && i + 1 < args.len() {
            if let Err(e) = check_name(&args[i + 1]) {
                return e;
            }
            conn.set_name(&args[i + 1]);
            i += 2;
        } else {
            return Reply::error(format!(
                "ERR Syntax error in HELLO option '{}'",
                text(&args[i])
            ));
        }
    }
    if !conn.authed {
        return Reply::err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    conn.set_proto(proto);
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

/// Checks a password for `user` (`None`: AUTH's one-argument form, the user
/// `default`). Only the user `default` exists. With no password set it needs none:
/// any password is right for it (Redis's `nopass`), but the one-argument form is
/// refused, as Redis refuses it, since it suggests a configuration mistake.
fn check_password(server: &Server, user: Option<&[u8]>, pass: &[u8]) -> Reply {
    const WRONGPASS: Reply =
        Reply::err("WRONGPASS invalid username-password pair or user is disabled.");
    match (server.settings.password(), user) {
        (None, None) => Reply::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        (None, Some(b"default")) => Reply::OK,
        (Some(p), None | Some(b"default")) if p.as_bytes() == pass => Reply::OK,
        _ => WRONGPASS,
    }
}

/// AUTH [username] password: only the user `default` exists.
fn auth(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let r = match args.len() {
        2 => check_password(server, None, &args[1]),
        3 => check_password(server, Some(&args[1]), &args[2]),
        _ => return Reply::err("ERR syntax error"),
    };
    if !r.is_error() {
        conn.authed = true;
    }
    r
}

/// A connection name must be printable ASCII without spaces (CLIENT SETNAME's and
/// HELLO SETNAME's rule, Redis's words on refusal).
pub(super) fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// SELECT index: the connection's commands run in database `index` (0 to 15) from
/// now on. Not an integer (Redis's string2ll, within 32 bits): `ERR value is not an
/// integer or out of range`; outside 0 to 15: `ERR DB index is out of range`.
fn select(conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    match crate::exec::parse_db(&args[1], "ERR DB index is out of range") {
        Ok(db) => {
            conn.select(db);
            Reply::OK
        }
        Err(e) => e,
    }
}

/// CONFIG GET pattern... | SET name value... | RESETSTAT | REWRITE.
fn config(server: &Arc<Server>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" if args.len() >= 3 => {
            let mut pairs = Vec::new();
            for (name, value) in server.settings.all(&server.config).into_iter().chain(super::slowlog::settings()) {
                if args[2..].iter().any(|p| crate::keyspace::glob_match(&p.to_ascii_lowercase(), name.as_bytes())) {
                    pairs.push((bulk(name), bulk(value)));
                }
            }
            Reply::Map(pairs)
        }
        b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            for kv in args[2..].chunks(2) {
                let name = text(&kv[0]).to_ascii_lowercase();
                let done = super::slowlog::set(server, &name, &text(&kv[1]));
                if let Err(e) = done.unwrap_or_else(|| server.settings.set(&name, &text(&kv[1]))) {
                    return Reply::error(e);
                }
            }
            // A lower limit or an evicting policy takes effect now, as in Redis: on a
            // thread of its own (this connection may be in EXEC, holding shards).
            if server.settings.maxmemory() != 0 && crate::evict::evicting() {
                let shards = server.shards.clone();
                let all: Vec<usize> = (0..shards.list().len()).collect();
                let _ = weft_runtime::ThreadBuilder::new()
                    .name("kv-evict")
                    .preemptible(false)
                    .spawn(move || shards.evict(&all));
            }
            Reply::OK
        }
        b"resetstat" => {
            server.commands.store(0, Relaxed);
            server.stats.reset();
            crate::evict::reset_count();
            Reply::OK
        }
        b"rewrite" => Reply::err("ERR weft-kv takes its configuration from the command line: give the option to `weft kv serve`"),
        b"help" => Reply::Array(
            [
                "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "GET <pattern> [<pattern> ...]",
                "    The settings whose names match a pattern, with their values.",
                "SET <name> <value> [<name> <value> ...]",
                "    Change settings while the server runs (those CONFIG GET shows that",
                "    can change: appendfsync, maxmemory, maxclients, requirepass, ...).",
                "RESETSTAT",
                "    Reset the statistics INFO shows.",
                "REWRITE",
                "    Refused: weft-kv takes its settings from the command line.",
                "HELP",
                "    This text.",
            ]
            .iter()
            .map(|l| Reply::Simple((*l).into()))
            .collect(),
        ),
        _ => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            text(&args[1])
        )),
    }
}

/// The reply to a scripting command: weft-kv has no scripting.
fn no_scripting(what: &str) -> Reply {
    Reply::error(format!(
        "ERR weft-kv has no scripting: {} is not supported (EVAL, EVALSHA, FCALL, FUNCTION \
         and SCRIPT run nothing; FUNCTION FLUSH and SCRIPT FLUSH answer OK, there being \
         nothing to flush)",
        what.to_ascii_uppercase()
    ))
}

/// FUNCTION and SCRIPT: FLUSH [ASYNC|SYNC] answers OK (there is nothing to flush:
/// test suites flush before each test), HELP says so, the rest is refused.
fn scripting(name: &str, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    let upper = name.to_ascii_uppercase();
    match sub.as_slice() {
        b"flush" => match args.get(2) {
            _ if args.len() > 3 && name == "function" => commands::sub_syntax_error(args),
            None => Reply::OK,
            Some(m) if args.len() == 3 && (eq(m, "async") || eq(m, "sync")) => Reply::OK,
            Some(_) if name == "function" => {
                Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
            }
            Some(_) => Reply::err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
        },
        b"help" => Reply::Array(
            [
                format!("{upper} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
                "FLUSH [ASYNC|SYNC]".to_string(),
                "    Answers OK: weft-kv has no scripting, so there is nothing to flush."
                    .to_string(),
                "HELP".to_string(),
                "    This text.".to_string(),
            ]
            .into_iter()
            .map(|l| Reply::Simple(l.into()))
            .collect(),
        ),
        _ => no_scripting(&format!("{name} {}", text(&args[1]))),
    }
}

/// SAVE: every shard's log written and fsynced.
fn save(server: &Server) -> Reply {
    match server.shards.fsync_all() {
        Ok(()) => {
            server
                .last_save
                .store(crate::shard::now_ms() / 1000, Relaxed);
            server.info.saves.fetch_add(1, Relaxed);
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
    let bgsave = name == "bgsave";
    server.info.bgsave.store(bgsave, Relaxed);
    let counter = if bgsave {
        &server.info.saves
    } else {
        &server.info.rewrites
    };
    counter.fetch_add(1, Relaxed);
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
