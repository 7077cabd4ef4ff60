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
use crate::resp::{Limits, Parsed, Parser, Reply};
use crate::route;
use crate::shard::now_ms;
use std::io::{Read, Write};
use std::ops::Range;
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
    cmds: Vec<Cmd>,
    /// The arguments of [`Cmd::Buf`] commands: ranges of the read buffer.
    ranges: Vec<Range<usize>>,
    /// Where each command's reply is in `wbuf`, by position (`None`: not run).
    done: Vec<Option<Done>>,
    /// Per shard, the commands gathered for another worker's shard.
    pending: Vec<Vec<Pending>>,
    /// Their replies, by position, once run (encoded after the others).
    late: Vec<(usize, Reply)>,
    /// What the replies wait for.
    acks: Acks,
    /// The replies, encoded.
    wbuf: Vec<u8>,
    /// The allocation of the borrowed argument list, reused (always empty here).
    argv: Vec<&'static [u8]>,
    /// The shard and key hash of each command whose key is prefetched.
    hashes: Vec<(usize, u64)>,
}

/// One parsed command.
enum Cmd {
    /// Whole in the read buffer: its arguments are `ranges[from..to]`.
    Buf(usize, usize),
    /// Arrived in pieces: its arguments, copied.
    Owned(Vec<Vec<u8>>),
}

/// Where a command's encoded reply is in the output buffer.
#[derive(Clone, Copy)]
struct Done {
    start: usize,
    end: usize,
    error: bool,
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
    // big command is done. Parsed commands borrow their arguments from it until they
    // have run.
    const RBUF: usize = 16 << 10;
    let mut rbuf: Vec<u8> = vec![0; RBUF];
    let (mut start, mut end) = (0, 0);
    let mut b = Batch {
        cmds: Vec::new(),
        ranges: Vec::new(),
        done: Vec::new(),
        pending: (0..server.shards.count()).map(|_| Vec::new()).collect(),
        late: Vec::new(),
        acks: Acks::default(),
        wbuf: Vec::with_capacity(16 << 10),
        argv: Vec::new(),
        hashes: Vec::new(),
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
            let from = b.ranges.len();
            match parser.parse_borrowed(&rbuf[start..end], &mut b.ranges) {
                Ok(Some(Parsed::Borrowed(used))) => {
                    for r in &mut b.ranges[from..] {
                        *r = r.start + start..r.end + start;
                    }
                    b.cmds.push(Cmd::Buf(from, b.ranges.len()));
                    start += used;
                }
                Ok(Some(Parsed::Owned(args, used))) => {
                    b.cmds.push(Cmd::Owned(args));
                    start += used;
                }
                Ok(None) => {
                    // Bytes the parser is done with (empty lines, a partial
                    // command's finished arguments) may go.
                    start += parser.take_consumed();
                    break;
                }
                Err(e) => {
                    // Run what came before, then answer the error and close.
                    run_pipeline(&server, &mut conn, &mut b, &rbuf);
                    Reply::error(format!("ERR {}", e.0)).encode(conn.proto, &mut b.wbuf);
                    let _ = (&stream).write_all(&b.wbuf);
                    break 'conn;
                }
            }
        }
        if !b.cmds.is_empty() {
            run_pipeline(&server, &mut conn, &mut b, &rbuf);
        }
        if start == end {
            start = 0;
            end = 0;
            if rbuf.len() > RBUF * 64 {
                rbuf = vec![0; RBUF];
            }
        }
        if b.wbuf.is_empty() {
            continue;
        }
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

/// A vector's allocation, emptied, for elements of another lifetime (`collect` of an
/// empty `vec::IntoIter` through `map` reuses the allocation in place).
fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!() })
        .collect()
}

/// Runs the parsed commands (whose arguments are in `rbuf` or their own) and appends
/// their replies to `wbuf` in order (after the durability wait).
fn run_pipeline(server: &Arc<Server>, conn: &mut Conn, b: &mut Batch, rbuf: &[u8]) {
    let Batch {
        cmds,
        ranges,
        done,
        pending,
        late,
        acks,
        wbuf,
        argv: spare,
        hashes,
    } = b;
    if cmds.len() > 1 {
        prefetch_keys(server, cmds, ranges, rbuf, hashes);
    }
    let mut argv: Vec<&[u8]> = recycle(std::mem::take(spare));
    let shards = &server.shards;
    let me = weft_runtime::current_worker();
    let base = wbuf.len();
    done.clear();
    done.resize(cmds.len(), None);
    acks.lsn.clear();
    let mut quit_at = None;
    let mut in_order = true;
    // One clock reading for the pipeline's commands on this worker (they run within
    // microseconds of each other), and one update of the command counter.
    let now = now_ms();
    let mut ran = 0;
    for (slot, cmd) in cmds.iter().enumerate() {
        if quit_at.is_some() {
            break;
        }
        ran += 1;
        argv.clear();
        match cmd {
            Cmd::Buf(from, to) => argv.extend(ranges[*from..*to].iter().map(|r| &rbuf[r.clone()])),
            Cmd::Owned(args) => argv.extend(args.iter().map(Vec::as_slice)),
        }
        let start = wbuf.len();
        let reply = match run_command(
            server, conn, &argv, me, now, slot, pending, late, acks, wbuf,
        ) {
            Some(r) => r,
            None => {
                // Gathered for another worker's shard: its reply comes later.
                in_order = false;
                continue;
            }
        };
        if conn.close {
            quit_at = Some(slot);
        }
        reply.encode(conn.proto, wbuf);
        done[slot] = Some(Done {
            start,
            end: wbuf.len(),
            error: reply.is_error(),
        });
    }
    server.commands.fetch_add(ran, Relaxed);
    run_pending(server, pending, late, acks);
    // The replies of other workers' shards, after the others (`done` has the order).
    for (slot, r) in late.drain(..) {
        let start = wbuf.len();
        r.encode(conn.proto, wbuf);
        done[slot] = Some(Done {
            start,
            end: wbuf.len(),
            error: r.is_error(),
        });
    }
    *spare = recycle(argv);
    cmds.clear();
    ranges.clear();
    // Wait until every shard touched has written what these commands saw.
    let mut misconf = None;
    for (s, &lsn) in acks.lsn.iter().enumerate() {
        if lsn == 0 {
            continue;
        }
        if let Err(e) = shards.wait_durable(s, lsn) {
            // The commands ran in memory, but their records are not written yet
            // (they will be when the log can be written again): tell the writers.
            misconf = Some(Reply::error(format!(
                "MISCONF Errors writing to the append only file: {e}"
            )));
            break;
        }
    }
    if in_order && misconf.is_none() {
        return;
    }
    // Put the replies in command order (some came back from other workers' shards
    // after later ones were encoded), or replace those that are not errors.
    let encoded = wbuf.split_off(base);
    for d in done.iter().flatten() {
        match &misconf {
            Some(r) if !d.error => r.encode(conn.proto, wbuf),
            _ => wbuf.extend_from_slice(&encoded[d.start - base..d.end - base]),
        }
    }
}

/// Runs the commands gathered for other workers' shards (one IPC call per shard);
/// their replies go to `late`.
fn run_pending(
    server: &Arc<Server>,
    pending: &mut [Vec<Pending>],
    late: &mut Vec<(usize, Reply)>,
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
                    let (r, lsn) = sh.run(p.f, &commands::borrow_args(&p.args), now, None);
                    need = need.max(lsn);
                    (p.slot, r)
                })
                .collect();
            (out, need)
        });
        acks.note(s, lsn);
        late.extend(out);
    }
}

/// Starts loading what the single-key commands of this worker's shards in a pipeline
/// will read (first every key's index slots, then, those being on their way, every
/// key's entry), so that their cache misses overlap instead of coming one after
/// another as the commands run. Only a hint: nothing changes.
fn prefetch_keys(
    server: &Server,
    cmds: &[Cmd],
    ranges: &[Range<usize>],
    rbuf: &[u8],
    hashes: &mut Vec<(usize, u64)>,
) {
    let shards = &server.shards;
    hashes.clear();
    for cmd in cmds {
        let Cmd::Buf(from, to) = *cmd else { continue };
        if to - from < 2 {
            continue;
        }
        let Some(c) = commands::lookup(&rbuf[ranges[from].clone()]) else {
            continue;
        };
        if !matches!(c.exec, Exec::Shard(_)) || c.first_key != 1 {
            continue;
        }
        let key = &rbuf[ranges[from + 1].clone()];
        let s = route::shard_of(key, shards.count());
        let prefetched = shards.read_local(s, |ks| {
            let h = ks.hash(key);
            ks.prefetch(h);
            h
        });
        if let Some(h) = prefetched {
            hashes.push((s, h));
        }
    }
    for &(s, h) in hashes.iter() {
        shards.read_local(s, |ks| ks.prefetch_entry(h));
    }
}

/// Runs one command: its reply, or `None` when it is gathered for another worker's
/// shard (`pending`). A command of this worker's shards may write its reply into
/// `wbuf` itself ([`Reply::Written`]).
#[allow(clippy::too_many_arguments)]
fn run_command(
    server: &Arc<Server>,
    conn: &mut Conn,
    args: &[&[u8]],
    me: Option<usize>,
    now: u64,
    slot: usize,
    pending: &mut [Vec<Pending>],
    late: &mut Vec<(usize, Reply)>,
    acks: &mut Acks,
    wbuf: &mut Vec<u8>,
) -> Option<Reply> {
    let shards = &server.shards;
    let Some(cmd) = commands::lookup(args[0]) else {
        return Some(commands::unknown(args));
    };
    if let Err(r) = commands::check_arity(cmd, args) {
        return Some(r);
    }
    // CLIENT SETINFO only labels the connection: clients (redis-py) send it on
    // connect, before AUTH, and give up on the connection if it is refused.
    let labels =
        cmd.name == "client" && args.len() == 4 && args[1].eq_ignore_ascii_case(b"setinfo");
    if !conn.authed && cmd.flags & flags::NOAUTH == 0 && !labels {
        return Some(Reply::err("NOAUTH Authentication required."));
    }
    match cmd.exec {
        Exec::Shard(f) => {
            let s = route::shard_of_command(cmd, args, shards.count()).unwrap_or(0);
            if let Some(r) = exec::precheck(&**shards, cmd, s) {
                Some(r)
            } else if me == Some(shards.owner(s)) {
                let (r, lsn) = shards.with(s, |sh| sh.run(f, args, now, Some(wbuf)));
                acks.note(s, lsn);
                Some(r)
            } else {
                let args = args.iter().map(|a| a.to_vec()).collect();
                pending[s].push(Pending { slot, f, args });
                None
            }
        }
        _ => {
            run_pending(server, pending, late, acks);
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
            Some(run_other(server, conn, cmd, &args, acks))
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
