//! One client connection: read, parse, run, wait for durability, reply.
//!
//! A connection is a non-preemptible green thread. Each time it reads, it parses
//! every complete command in its buffer (a pipeline), runs them, and sends all their
//! replies in one write, after the shards they touched have written their logs that
//! far (so nothing is acknowledged that a crash could lose; one log write covers many
//! connections' commands: group commit).
//!
//! Running a pipeline: single-key commands of the connection's own worker's shards
//! run at once; those of other shards are gathered per shard and sent in one IPC call
//! per shard. Commands on different shards touch different keys, so running them in
//! that order is not observable; multi-key and server commands act as barriers (the
//! gathered commands run first).

use super::{admin, Server};
use crate::commands::{self, flags, Command, Exec};
use crate::exec::{self, Acks, ShardSet};
use crate::resp::{Limits, Parser, Reply};
use crate::route;
use crate::shard::now_ms;
use std::io::{Read, Write};
use std::sync::atomic::Ordering::*;
use std::sync::Arc;

/// A connection's state that commands may change.
pub struct Conn {
    /// 2 or 3 (HELLO).
    pub proto: u8,
    /// AUTH succeeded, or no password is set.
    pub authed: bool,
    /// CLIENT SETNAME.
    pub name: Option<Vec<u8>>,
    /// The connection's id (CLIENT ID, HELLO).
    pub id: u64,
    /// Close after the replies are sent (QUIT, a protocol error).
    pub close: bool,
}

/// What running a pipeline needs, kept between reads so its buffers are reused.
struct Batch {
    /// The parsed commands.
    cmds: Vec<Vec<Vec<u8>>>,
    /// Their replies, by position.
    replies: Vec<Option<Reply>>,
    /// Per shard, the commands gathered for another worker's shard.
    pending: Vec<Vec<Pending>>,
    /// What the replies wait for.
    acks: Acks,
    /// The replies, encoded.
    wbuf: Vec<u8>,
}

/// A command waiting to run on another worker's shard.
struct Pending {
    slot: usize,
    f: commands::ShardFn,
    args: Vec<Vec<u8>>,
}

/// Serves one connection until it closes.
pub fn serve<S>(server: Arc<Server>, stream: S, id: u64)
where
    for<'a> &'a S: Read + Write,
{
    let limits = Limits {
        max_bulk: server.config.max_bulk,
        ..Limits::default()
    };
    let mut parser = Parser::new(limits);
    let mut conn = Conn {
        proto: 2,
        authed: server.settings.password().is_none(),
        name: None,
        id,
        close: false,
    };
    // rbuf[start..end] holds received bytes not yet parsed. The buffer is zeroed once
    // and grows (doubling) only for a command larger than it; it shrinks back when a
    // big command is done.
    const RBUF: usize = 16 << 10;
    let mut rbuf: Vec<u8> = vec![0; RBUF];
    let (mut start, mut end) = (0, 0);
    let mut b = Batch {
        cmds: Vec::new(),
        replies: Vec::new(),
        pending: (0..server.shards.count()).map(|_| Vec::new()).collect(),
        acks: Acks::default(),
        wbuf: Vec::with_capacity(16 << 10),
    };
    'conn: loop {
        if end == rbuf.len() {
            if start > 0 {
                rbuf.copy_within(start..end, 0);
                end -= start;
                start = 0;
            } else {
                let grow = rbuf.len().min(1 << 20);
                rbuf.resize(rbuf.len() + grow, 0);
            }
        }
        let n = match (&stream).read(&mut rbuf[end..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        end += n;
        // Parse every complete command.
        loop {
            match parser.parse(&rbuf[start..end]) {
                Ok(Some((args, used))) => {
                    start += used;
                    b.cmds.push(args);
                }
                Ok(None) => {
                    // Bytes the parser is done with (empty lines, a partial
                    // command's finished arguments) may go.
                    start += parser.take_consumed();
                    break;
                }
                Err(e) => {
                    // Run what came before, then answer the error and close.
                    run_pipeline(&server, &mut conn, &mut b);
                    Reply::error(format!("ERR {}", e.0)).encode(conn.proto, &mut b.wbuf);
                    let _ = (&stream).write_all(&b.wbuf);
                    break 'conn;
                }
            }
        }
        if start == end {
            start = 0;
            end = 0;
            if rbuf.len() > RBUF * 64 {
                rbuf = vec![0; RBUF];
            }
        }
        if b.cmds.is_empty() {
            continue;
        }
        run_pipeline(&server, &mut conn, &mut b);
        if (&stream).write_all(&b.wbuf).is_err() {
            break;
        }
        b.wbuf.clear();
        if conn.close {
            break;
        }
    }
    server.clients.fetch_sub(1, Relaxed);
    drop(stream);
}

/// Runs the parsed commands `cmds` and appends their replies to `wbuf` (after the
/// durability wait).
fn run_pipeline(server: &Arc<Server>, conn: &mut Conn, b: &mut Batch) {
    let Batch {
        cmds,
        replies,
        pending,
        acks,
        wbuf,
    } = b;
    let shards = &server.shards;
    let me = weft_runtime::current_worker();
    replies.clear();
    replies.resize(cmds.len(), None);
    acks.lsn.clear();
    let mut quit_at = None;
    for (slot, args) in cmds.iter_mut().enumerate() {
        if quit_at.is_some() {
            break;
        }
        server.commands.fetch_add(1, Relaxed);
        let args = std::mem::take(args);
        let Some(cmd) = commands::lookup(&args[0]) else {
            replies[slot] = Some(commands::unknown(&args));
            continue;
        };
        if let Err(r) = commands::check_arity(cmd, &args) {
            replies[slot] = Some(r);
            continue;
        }
        // CLIENT SETINFO only labels the connection: clients (redis-py) send it on
        // connect, before AUTH, and give up on the connection if it is refused.
        let labels =
            cmd.name == "client" && args.len() == 4 && args[1].eq_ignore_ascii_case(b"setinfo");
        if !conn.authed && cmd.flags & flags::NOAUTH == 0 && !labels {
            replies[slot] = Some(Reply::err("NOAUTH Authentication required."));
            continue;
        }
        match cmd.exec {
            Exec::Shard(f) => {
                let s = route::shard_of_command(cmd, &args, shards.count()).unwrap_or(0);
                if let Some(r) = exec::precheck(&**shards, cmd, s) {
                    replies[slot] = Some(r);
                } else if me == Some(shards.owner(s)) {
                    let now = now_ms();
                    let (r, lsn) = shards.with(s, |sh| sh.run(f, &args, now));
                    acks.note(s, lsn);
                    replies[slot] = Some(r);
                } else {
                    pending[s].push(Pending { slot, f, args });
                }
            }
            _ => {
                run_pending(server, pending, replies, acks);
                let r = run_other(server, conn, cmd, &args, acks);
                if conn.close {
                    quit_at = Some(slot);
                }
                replies[slot] = Some(r);
            }
        }
    }
    run_pending(server, pending, replies, acks);
    cmds.clear();
    // Wait until every shard touched has written what these commands saw.
    for (s, &lsn) in acks.lsn.iter().enumerate() {
        if lsn == 0 {
            continue;
        }
        if let Err(e) = shards.wait_durable(s, lsn) {
            // The commands ran in memory, but their records are not written yet
            // (they will be when the log can be written again): tell the writers.
            let msg = format!("MISCONF Errors writing to the append only file: {e}");
            for r in replies.iter_mut().flatten() {
                if !r.is_error() {
                    *r = Reply::error(msg.clone());
                }
            }
            break;
        }
    }
    for r in replies
        .iter()
        .take(quit_at.map_or(usize::MAX, |q| q + 1))
        .flatten()
    {
        r.encode(conn.proto, wbuf);
    }
}

/// Runs the commands gathered for other workers' shards: one IPC call per shard.
fn run_pending(
    server: &Arc<Server>,
    pending: &mut [Vec<Pending>],
    replies: &mut [Option<Reply>],
    acks: &mut Acks,
) {
    for (s, list) in pending.iter_mut().enumerate() {
        if list.is_empty() {
            continue;
        }
        let now = now_ms();
        let batch = std::mem::take(list);
        let (out, lsn) = server.shards.with(s, move |sh| {
            let mut need = 0;
            let out: Vec<(usize, Reply)> = batch
                .into_iter()
                .map(|p| {
                    let (r, lsn) = sh.run(p.f, &p.args, now);
                    need = need.max(lsn);
                    (p.slot, r)
                })
                .collect();
            (out, need)
        });
        acks.note(s, lsn);
        for (slot, r) in out {
            replies[slot] = Some(r);
        }
    }
}

/// Runs a Split or Server command.
fn run_other(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &'static Command,
    args: &[Vec<u8>],
    acks: &mut Acks,
) -> Reply {
    let shards = &*server.shards;
    if let Some(r) = exec::run_keyed(shards, cmd, args, acks) {
        return r;
    }
    if let Some(r) = admin::run(server, conn, cmd, args, acks) {
        return r;
    }
    if let Some(r) = exec::run_common(shards, cmd, args, acks) {
        return r;
    }
    Reply::error(format!(
        "ERR command '{}' is not supported by weft-kv",
        cmd.name
    ))
}
