//! One client connection: read, parse, run, wait for durability, reply.
//!
//! A connection is a non-preemptible green thread. Each time it reads, it parses
//! the complete commands in its buffer (a pipeline), runs them, and sends their
//! replies in one write, after the shards they touched have written their logs that
//! far (so nothing is acknowledged that a crash could lose; one log write covers many
//! connections' commands: group commit).
//!
//! Running a pipeline: single-key commands of the connection's own worker's shards
//! run at once; those of other shards are gathered per shard and sent in one IPC call
//! per shard. Commands on different shards touch different keys, so running them in
//! that order is not observable; multi-key and server commands act as barriers (the
//! gathered commands run first).
//!
//! What a connection holds is bounded whatever the client sends and however slowly it
//! reads (backpressure, nothing dropped): a pipeline runs a part at a time, each part
//! ending once its replies pass the output limit (`--client-output-limit`, CONFIG SET
//! client-output-limit), and its replies are sent, waiting while the client does not
//! read, before the next part runs and before anything more is read. So the replies
//! held are about the limit plus one reply (a single larger reply is still sent
//! whole), and the input is one read buffer (which grows only for a command larger
//! than it) and at most [`MAX_BATCH`] parsed commands. The buffers' sizes add up in
//! INFO's `mem_clients_normal`.
//!
//! Before AUTH (a password being set) the connection parses and runs one command at a
//! time, with the parser's smaller limits for unauthenticated clients; protected mode
//! ([`protected_mode_refuses`]) turns away TCP clients of other machines when no
//! password is set.

use super::{admin, clients, multi, pubsub, slowlog, stats, Server};
use crate::commands::{self, flags, Command, Exec};
use crate::exec::{self, Acks, ShardSet};
use crate::resp::{Limits, Parsed, Parser, Reply};
use crate::route;
use crate::shard::now_ms;
use std::io::{Read, Write};
use std::net::IpAddr;
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
    /// The connection as CLIENT LIST shows it.
    pub client: Arc<clients::Client>,
    /// CLIENT REPLY, and whether the command running now answers nothing (SKIP).
    pub reply: clients::ReplyMode,
    pub skip_this: bool,
    /// The selected database (SELECT; 0 at the start and after RESET).
    pub db: u8,
    /// MULTI's queue and the watched keys (`multi.rs`).
    pub tx: multi::TxState,
    /// The socket, for the read-ahead of a blocked command, and that read-ahead
    /// (`server/blocking.rs`).
    pub sock: Option<super::blocking::Sock>,
    pub ahead: super::blocking::Ahead,
    /// CLIENT TRACKING's state, once turned on (`tracking.rs`).
    pub tracking: Option<Arc<crate::pubsub::tracking::Tracking>>,
}

/// What running a pipeline needs, kept between reads so its buffers are reused.
struct Batch {
    /// The parsed commands.
    cmds: Vec<Cmd>,
    /// The first of `cmds` not run yet.
    next: usize,
    /// The bytes of the arguments of the [`Cmd::Owned`] commands.
    owned: usize,
    /// The arguments of [`Cmd::Buf`] commands: ranges of the read buffer.
    ranges: Vec<Range<usize>>,
    /// Where each command's reply is in `wbuf`, by position from the first command
    /// whose reply is not sent yet (`None`: not run yet).
    done: Vec<Option<Done>>,
    /// Per shard, the commands gathered for another worker's shard.
    pending: Vec<Vec<Pending>>,
    /// Their replies, by position, once run (encoded after the others), each after
    /// the messages to send just ahead of it (`Shard::run_before`).
    late: Vec<(usize, Vec<u8>, Reply)>,
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
pub(super) struct Pending {
    slot: usize,
    f: commands::ShardFn,
    db: u8,
    args: Vec<Vec<u8>>,
    /// Its statistics id, and whether its reply is dropped (CLIENT REPLY).
    id: usize,
    mute: bool,
    /// Keys of other shards were evicted to make room for it (`exec::precheck_room`):
    /// the connection's invalidations held so far go ahead of its reply.
    evicted: bool,
}

/// The read buffer's usual size; it grows only for a command larger than it.
const RBUF: usize = 16 << 10;

/// The output buffer's usual capacity; once sent, a buffer that grew past
/// [`WBUF_KEEP`] is given back.
const WBUF: usize = 16 << 10;
const WBUF_KEEP: usize = 1 << 20;

/// The most commands parsed ahead of running them, so that their bookkeeping stays
/// small even when a big read buffer is full of tiny commands.
const MAX_BATCH: usize = 4096;

/// How many commands ahead of the next one to run get their keys prefetched.
const MAX_PREFETCH: usize = 1024;

/// What a TCP client that protected mode refuses is told before its connection is
/// closed.
pub const PROTECTED_MODE_ERROR: &[u8] = b"-DENIED weft-kv is running in protected mode: no \
password is set, so only clients on this machine (loopback addresses and the Unix socket) \
may connect. To accept clients from other machines, set a password (weft kv serve \
--requirepass, or CONFIG SET requirepass from this machine), or, if every machine that can \
reach this port may read and write the store, turn protected mode off (weft kv serve \
--protected-mode no, or CONFIG SET protected-mode no from this machine).\r\n";

/// Whether protected mode refuses a TCP client from `peer`: it is on, no password is
/// set, and `peer` is not a loopback address (127.0.0.0/8, ::1, or 127.0.0.0/8 written
/// as an IPv4-mapped IPv6 address, as a dual-stack listener sees IPv4 clients). Unix
/// socket clients are on this machine: never refused.
pub fn protected_mode_refuses(server: &Server, peer: IpAddr) -> bool {
    !is_loopback(peer) && server.settings.protected_mode() && server.settings.password().is_none()
}

/// Whether `peer` is a loopback address (127.0.0.0/8, ::1, or 127.0.0.0/8 written as
/// an IPv4-mapped IPv6 address): a client on this machine.
pub fn is_loopback(peer: IpAddr) -> bool {
    match peer {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The connection's socket, and what the connection's buffers count in the server's
/// client memory (INFO's mem_clients_normal).
struct Out<'a, S> {
    stream: &'a S,
    server: &'a Server,
    /// The bytes this connection has added to `server.client_memory`.
    counted: usize,
    /// What the transport itself holds for the connection all along (a shared-memory
    /// connection's segment: `clients::Peer::fixed_memory`), counted with the buffers.
    fixed: usize,
    client: &'a clients::Client,
}

impl<S> Out<'_, S>
where
    S: super::input::Input,
    for<'b> &'b S: Write,
{
    /// Notes that the connection's buffers hold `bytes` now.
    fn count(&mut self, bytes: usize) {
        let bytes = bytes + self.fixed;
        let total = &self.server.client_memory;
        if bytes > self.counted {
            total.fetch_add(bytes - self.counted, Relaxed);
        } else if bytes < self.counted {
            total.fetch_sub(self.counted - bytes, Relaxed);
        }
        self.counted = bytes;
    }

    /// Sends all of `wbuf`, waiting as long as the client does not read (the
    /// backpressure: meanwhile the connection reads and runs nothing more), then
    /// empties it and gives back a grown allocation. `other`: the bytes the
    /// connection's other buffers hold. False when the connection failed.
    fn send(&mut self, wbuf: &mut Vec<u8>, other: usize) -> bool {
        self.send_and_consume(wbuf, other, 0)
    }

    /// As [`Out::send`], then takes the `peeked` bytes of the read these replies
    /// answer off the socket (`input.rs`), in one system call with the send where the
    /// socket can.
    fn send_and_consume(&mut self, wbuf: &mut Vec<u8>, other: usize, peeked: usize) -> bool {
        if wbuf.is_empty() {
            // Nothing to send (CLIENT REPLY OFF): messages held back go now.
            if let Some(s) = self.client.pubsub.get() {
                s.release();
            }
            return peeked == 0 || self.stream.consume(peeked).is_ok();
        }
        self.count(other + wbuf.capacity());
        self.client.note_output(wbuf.len());
        let mut stream = self.stream;
        // A subscriber's writer may be writing messages: one at a time.
        let sub = self.client.pubsub.get();
        let writing = sub.map(|s| s.writing.lock());
        let sent = if peeked > 0 {
            self.stream.send_and_consume(wbuf, peeked)
        } else {
            stream.write_all(wbuf)
        };
        if sent.is_err() {
            return false;
        }
        drop(writing);
        if let Some(s) = sub {
            s.release();
        }
        self.sent(wbuf, other);
        true
    }

    /// After `wbuf` was sent: empties it, gives back a grown allocation, and counts.
    fn sent(&mut self, wbuf: &mut Vec<u8>, other: usize) {
        self.server.stats.wrote(wbuf.len());
        self.client.note_output(0);
        wbuf.clear();
        if wbuf.capacity() > WBUF_KEEP {
            *wbuf = Vec::with_capacity(WBUF);
        }
        self.count(other + wbuf.capacity());
    }

    /// Whether a read's last replies may wait to go with the connection's next read
    /// ([`Out::send_and_take`]): not when there are none (CLIENT REPLY OFF), nor to a
    /// subscriber or a tracking client, whose messages another thread may be writing.
    fn chains(&self, wbuf: &[u8]) -> bool {
        S::CHAINS && !wbuf.is_empty() && self.client.pubsub.get().is_none()
    }

    /// As [`Out::send_and_consume`] (which `chains` allows), then the connection's
    /// next read into `rbuf`, as one chain of operations where the socket can
    /// (`input.rs`). An error when the send or the read failed (the connection ends).
    fn send_and_take(
        &mut self,
        wbuf: &mut Vec<u8>,
        other: usize,
        peeked: usize,
        rbuf: &mut [u8],
    ) -> std::io::Result<usize> {
        self.count(other + wbuf.capacity());
        self.client.note_output(wbuf.len());
        let got = self.stream.send_and_take(wbuf, peeked, rbuf)?;
        self.sent(wbuf, other);
        Ok(got)
    }
}

impl<S> Drop for Out<'_, S> {
    fn drop(&mut self) {
        self.server.client_memory.fetch_sub(self.counted, Relaxed);
    }
}

/// Serves one connection until it closes.
pub fn serve<S>(server: Arc<Server>, stream: S, id: u64)
where
    S: super::input::Input + clients::Peer + Send + Sync + 'static,
    for<'a> &'a S: Read + Write,
{
    // Shared with the writer of its messages, if it subscribes.
    let stream = Arc::new(stream);
    let mut writer = None;
    let client = clients::Client::new(&server, id, &*stream, stream.as_raw_fd());
    clients::Peer::attach(&*stream, &client);
    // Listed until it ends; removed before the socket is closed.
    let registered = server.registry.add(client.clone());
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
        client: client.clone(),
        reply: clients::ReplyMode::On,
        skip_this: false,
        db: 0,
        tx: multi::TxState::new(client.dirty_cas.clone()),
        sock: Some(super::blocking::Sock::of::<S>(
            std::borrow::Borrow::borrow(&stream),
            stream.as_raw_fd(),
        )),
        ahead: Default::default(),
        tracking: None,
    };
    let mut out = Out {
        stream: &*stream,
        server: &server,
        counted: 0,
        fixed: clients::Peer::fixed_memory(&*stream),
        client: &client,
    };
    out.count(0);
    // rbuf[start..end] holds received bytes not yet parsed. The buffer is zeroed once
    // and grows (doubling) only for a command larger than it; it shrinks back when a
    // big command is done. Parsed commands borrow their arguments from it until they
    // have run.
    let mut rbuf: Vec<u8> = vec![0; RBUF];
    let (mut start, mut end) = (0, 0);
    let mut b = Batch {
        cmds: Vec::new(),
        next: 0,
        owned: 0,
        ranges: Vec::new(),
        done: Vec::new(),
        pending: (0..server.shards.count()).map(|_| Vec::new()).collect(),
        late: Vec::new(),
        acks: Acks::default(),
        wbuf: Vec::with_capacity(WBUF),
        argv: Vec::new(),
        hashes: Vec::new(),
    };
    // A read's last replies kept to go with the next read (`input.rs`): what the
    // connection's input held then, and the bytes peeked for that read.
    let mut pending: Option<(usize, usize)> = None;
    'conn: loop {
        if rbuf.len() > RBUF * 64 && end - start < RBUF {
            // A big command is done: give its buffer back, keeping what follows it.
            let mut small = vec![0; RBUF];
            small[..end - start].copy_from_slice(&rbuf[start..end]);
            rbuf = small;
            end -= start;
            start = 0;
        }
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
        // The last read's replies go with this read, unless a blocked command's
        // read-ahead is making it (or made it already): then they go first.
        if let Some((h, k)) = pending.filter(|_| !conn.ahead.is_idle()) {
            pending = None;
            if !out.send_and_consume(&mut b.wbuf, h, k) {
                break;
            }
        }
        let early = conn.ahead.take(&mut rbuf[end..]);
        // A Unix socket's bytes are peeked, and taken off the socket once answered
        // (`input.rs`).
        let mut peeked = early.is_none() && S::PEEKS;
        // What the connection's input held when replies were kept to go with the
        // read's removal (for the memory count).
        let mut held = 0;
        // Whether this read's last replies wait for the end of the read (to go with
        // its removal, or with the next read).
        let mut last_held = false;
        let got = match (early, pending.take()) {
            (Some(got), kept) => {
                // A read ahead comes only once the held replies went (the loop's top).
                debug_assert!(kept.is_none(), "held replies dropped by a read ahead");
                got
            }
            (None, Some((h, k))) => out.send_and_take(&mut b.wbuf, h, k, &mut rbuf[end..]),
            (None, None) => stream.take(&mut rbuf[end..]),
        };
        let n = match got {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        end += n;
        server.pollers.note(weft_runtime::current_worker());
        server.stats.read(n);
        client.note_read(end - start, rbuf.len() - end, rbuf.len());
        out.count(rbuf.capacity() + parser.buffered() + b.wbuf.capacity() + conn.tx.memory());
        loop {
            // Parse the complete commands, at most MAX_BATCH of them; one at a time
            // before AUTH, as what a client may send depends on it.
            parser.set_unauthenticated(!conn.authed);
            let mut failed = None;
            // Every complete command of the buffer is parsed.
            let mut all_parsed = false;
            while b.cmds.len() < MAX_BATCH && (conn.authed || b.cmds.is_empty()) {
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
                        b.owned += args.iter().map(Vec::len).sum::<usize>();
                        b.cmds.push(Cmd::Owned(args));
                        start += used;
                    }
                    Ok(None) => {
                        // Bytes the parser is done with (empty lines, a partial
                        // command's finished arguments) may go.
                        start += parser.take_consumed();
                        all_parsed = true;
                        break;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if b.cmds.is_empty() && failed.is_none() {
                break;
            }
            let names = b.cmds.iter().map(|c| match c {
                Cmd::Buf(from, _) => &rbuf[b.ranges[*from].clone()],
                Cmd::Owned(args) => args[0].as_slice(),
            });
            if peeked && !super::input::may_defer(names) {
                // Not only commands on keys: off the socket first.
                if stream.consume(n).is_err() {
                    break 'conn;
                }
                peeked = false;
            }
            // Run them a part at a time, each part's replies sent before the next part
            // runs: what the connection holds stays near the output limit however much
            // the client sends and however slowly it reads.
            let limit = server.settings.client_output_limit();
            let input = rbuf.capacity() + parser.buffered() + b.owned + conn.tx.memory();
            while b.next < b.cmds.len() && !conn.close {
                let mut send = |w: &mut Vec<u8>, held: usize| out.send(w, input + held);
                let ran = run_pipeline(&server, &mut conn, &mut b, &rbuf, limit, &mut send);
                // The keys the pipeline changed, told to BCAST trackers together.
                crate::pubsub::tracking::flush_bcast();
                if writer.is_none() {
                    if let Some(s) = client.pubsub.get() {
                        writer = pubsub::spawn_writer(stream.clone(), s.clone());
                    }
                }
                if !ran {
                    break 'conn;
                }
                if (peeked || out.chains(&b.wbuf))
                    && all_parsed
                    && b.next == b.cmds.len()
                    && !conn.close
                {
                    // The read's last replies: sent as the read is taken off the
                    // socket, or with the next read, below (`input.rs`).
                    held = input;
                    last_held = true;
                    break;
                }
                if !out.send(&mut b.wbuf, input) {
                    break 'conn;
                }
            }
            b.cmds.clear();
            b.ranges.clear();
            b.next = 0;
            b.owned = 0;
            if let Some(e) = failed {
                // What came before it ran; answer the error and close.
                server.stats.error("ERR");
                Reply::error(format!("ERR {}", e.0)).encode(conn.proto, &mut b.wbuf);
                let _ = out.send(&mut b.wbuf, input);
                break 'conn;
            }
            if conn.close {
                break 'conn;
            }
        }
        let peeked = if peeked { n } else { 0 };
        if last_held && out.chains(&b.wbuf) {
            pending = Some((held, peeked));
        } else if (peeked > 0 || last_held) && !out.send_and_consume(&mut b.wbuf, held, peeked) {
            break;
        }
        debug_assert!(pending.is_some() || b.wbuf.is_empty());
        if start == end {
            start = 0;
            end = 0;
        }
    }
    // A blocked command's read-ahead ends before the socket does.
    conn.ahead.finish(conn.sock);
    // A transaction under way is discarded, its watched keys forgotten.
    multi::discard(&server, &mut conn);
    super::tracking::end(&mut conn);
    drop(out);
    if let Some(s) = client.pubsub.get() {
        pubsub::stop_writer(&*stream, s, writer);
    }
    drop(registered);
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

/// Runs the parsed commands from `b.next` on, in order, and appends their replies to
/// `b.wbuf` (empty on entry) in command order, once the shards they touched have
/// written what they did. Stops (`b.next` says where) after the command whose reply
/// takes the replies past `limit` bytes, after QUIT, and before a command that is not
/// for one shard while commands wait gathered for other workers' shards (those run
/// first). When the gathered commands' replies would pass the limit, the replies
/// before them are sent through `send` (given the bytes still held) and the rest run
/// after. False: sending failed.
fn run_pipeline(
    server: &Arc<Server>,
    conn: &mut Conn,
    b: &mut Batch,
    rbuf: &[u8],
    limit: usize,
    send: &mut dyn FnMut(&mut Vec<u8>, usize) -> bool,
) -> bool {
    let Batch {
        cmds,
        next,
        ranges,
        done,
        pending,
        late,
        acks,
        wbuf,
        argv: spare,
        hashes,
        ..
    } = b;
    debug_assert!(wbuf.is_empty());
    // The command whose reply is done[0].
    let mut first = *next;
    if cmds.len() - first > 1 {
        let ahead = &cmds[first..cmds.len().min(first + MAX_PREFETCH)];
        prefetch_keys(server, conn.db, ahead, ranges, rbuf, hashes);
    }
    let mut argv: Vec<&[u8]> = recycle(std::mem::take(spare));
    let me = weft_runtime::current_worker();
    done.clear();
    acks.lsn.clear();
    // Some commands wait gathered for another worker's shard (their replies come
    // after later ones').
    let mut gathered = false;
    // One clock reading for the pipeline's commands on this worker (they run within
    // microseconds of each other), and one update of the command counter.
    let now = now_ms();
    let mut slot = first;
    while slot < cmds.len() {
        argv.clear();
        match &cmds[slot] {
            Cmd::Buf(from, to) => argv.extend(ranges[*from..*to].iter().map(|r| &rbuf[r.clone()])),
            Cmd::Owned(args) => argv.extend(args.iter().map(Vec::as_slice)),
        }
        if gathered && commands::lookup(argv[0]).is_some_and(|c| !matches!(c.exec, Exec::Shard(_)))
        {
            // A barrier: the gathered commands run (below) before it does.
            break;
        }
        if slot > first && super::blocking::is_blocking(argv[0]) {
            // A blocking command runs once the replies before it are sent.
            break;
        }
        let start = wbuf.len();
        slot += 1;
        let Some(reply) = run_command(server, conn, &argv, me, now, slot - 1, pending, acks, wbuf)
        else {
            gathered = true;
            done.push(None);
            continue;
        };
        reply.encode(conn.proto, wbuf);
        done.push(Some(Done {
            start,
            end: wbuf.len(),
            error: reply.is_error(),
        }));
        if conn.close || wbuf.len() >= limit {
            break;
        }
    }
    server.commands.fetch_add((slot - first) as u64, Relaxed);
    *next = slot;
    *spare = recycle(argv);
    // The gathered commands' replies, after the others (`done` has the order).
    loop {
        let all = run_pending(
            server,
            Some(&*conn.client),
            pending,
            late,
            acks,
            limit.saturating_sub(wbuf.len()),
        );
        for (slot, before, r) in late.drain(..) {
            let start = wbuf.len();
            wbuf.extend_from_slice(&before);
            r.encode(conn.proto, wbuf);
            done[slot - first] = Some(Done {
                start,
                end: wbuf.len(),
                error: r.is_error(),
            });
        }
        if all {
            break;
        }
        // Too much to hold at once: send the replies before the first command still
        // gathered, keep the later ones, and run the rest.
        let upto = pending
            .iter()
            .filter_map(|l| l.first())
            .map(|p| p.slot)
            .min()
            .expect("a command is still gathered");
        let misconf = wait_durable(server, acks);
        let encoded = wbuf.split_off(0);
        put_in_order(
            &done[..upto - first],
            &encoded,
            misconf.as_ref(),
            conn.proto,
            wbuf,
        );
        if !send(wbuf, encoded.len()) {
            return false;
        }
        for d in done[upto - first..].iter_mut().flatten() {
            let start = wbuf.len();
            wbuf.extend_from_slice(&encoded[d.start..d.end]);
            (d.start, d.end) = (start, wbuf.len());
        }
        done.drain(..upto - first);
        first = upto;
    }
    let misconf = wait_durable(server, acks);
    if gathered || misconf.is_some() {
        // Put the replies in command order (some came back from other workers' shards
        // after later ones were encoded), or replace those that are not errors.
        let encoded = wbuf.split_off(0);
        put_in_order(done, &encoded, misconf.as_ref(), conn.proto, wbuf);
    }
    true
}

/// Waits until every shard the commands touched has written what they saw: `None`, or
/// the MISCONF error that replaces their replies when a log cannot be written.
fn wait_durable(server: &Server, acks: &Acks) -> Option<Reply> {
    for (s, &lsn) in acks.lsn.iter().enumerate() {
        if lsn == 0 {
            continue;
        }
        if let Err(e) = server.shards.wait_durable(s, lsn) {
            // The commands ran in memory, but their records are not written yet
            // (they will be when the log can be written again): tell the writers.
            return Some(Reply::error(format!(
                "MISCONF Errors writing to the append only file: {e}"
            )));
        }
    }
    None
}

/// Appends the replies `done` locates in `encoded` to `wbuf`, in command order; with
/// `misconf`, it replaces every reply that is not an error.
fn put_in_order(
    done: &[Option<Done>],
    encoded: &[u8],
    misconf: Option<&Reply>,
    proto: u8,
    wbuf: &mut Vec<u8>,
) {
    for d in done.iter().flatten() {
        match misconf {
            // (An empty reply is one CLIENT REPLY drops: it stays unsent.)
            Some(r) if !d.error && d.end > d.start => r.encode(proto, wbuf),
            _ => wbuf.extend_from_slice(&encoded[d.start..d.end]),
        }
    }
}

/// Runs the commands gathered for other workers' shards, one IPC call per shard, each
/// shard's in order, until their replies pass `budget` bytes (the first gathered
/// command runs whatever the budget, so that each call makes progress); their replies
/// go to `late`. Those not run stay gathered. True when none is left.
fn run_pending(
    server: &Arc<Server>,
    client: Option<&clients::Client>,
    pending: &mut [Vec<Pending>],
    late: &mut Vec<(usize, Vec<u8>, Reply)>,
    acks: &mut Acks,
    budget: usize,
) -> bool {
    let Some(earliest) = pending
        .iter()
        .filter_map(|l| l.first())
        .map(|p| p.slot)
        .min()
    else {
        return true;
    };
    let mut left = budget;
    for (s, list) in pending.iter_mut().enumerate() {
        let Some(head) = list.first() else { continue };
        let must = head.slot == earliest;
        if left == 0 && !must {
            continue;
        }
        let now = now_ms();
        let batch = std::mem::take(list);
        let (out, lsn, rest, used) = server.shards.with(s, move |sh| {
            let (mut need, mut used) = (0, 0);
            let mut out: Vec<(usize, Vec<u8>, Reply)> = Vec::new();
            let mut rest = Vec::new();
            for p in batch {
                if !rest.is_empty() || (used >= left && !(must && out.is_empty())) {
                    rest.push(p);
                    continue;
                }
                let t0 = stats::stamp();
                let args = commands::borrow_args(&p.args);
                let writer = client.map_or(0, |c| c.id);
                // What keys evicted before it tell the connection comes ahead of its
                // reply, as for a command run on the connection's own worker.
                let mut before = Vec::new();
                let (r, lsn) = crate::pubsub::tracking::as_writer(writer, || {
                    if p.evicted {
                        crate::pubsub::tracking::flush_writer_into(&mut before);
                    }
                    sh.run_before(p.f, p.db, &args, now, &mut before)
                });
                let r = answered(server, p.id, t0, r, p.mute, (client, &p.args));
                need = need.max(lsn);
                used += r.size_hint();
                out.push((p.slot, before, r));
            }
            (out, need, rest, used)
        });
        acks.note(s, lsn);
        late.extend(out);
        *list = rest;
        left = left.saturating_sub(used);
    }
    pending.iter().all(Vec::is_empty)
}

/// Starts loading what the single-key commands of this worker's shards in a pipeline
/// will read (first every key's index slots, then, those being on their way, every
/// key's entry), so that their cache misses overlap instead of coming one after
/// another as the commands run. Only a hint: nothing changes (the keys are looked for
/// in database `db`, the selected one when the pipeline starts).
fn prefetch_keys(
    server: &Server,
    db: u8,
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
        let prefetched = shards.read_local(s, db, |ks| {
            let h = ks.hash(key);
            ks.prefetch(h);
            h
        });
        if let Some(h) = prefetched {
            hashes.push((s, h));
        }
    }
    for &(s, h) in hashes.iter() {
        shards.read_local(s, db, |ks| ks.prefetch_entry(h));
    }
}

/// Runs one command: its reply, or `None` when it is gathered for another worker's
/// shard (`pending`). A command of this worker's shards may write its reply into
/// `wbuf` itself ([`Reply::Written`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_command(
    server: &Arc<Server>,
    conn: &mut Conn,
    args: &[&[u8]],
    me: Option<usize>,
    now: u64,
    slot: usize,
    pending: &mut [Vec<Pending>],
    acks: &mut Acks,
    wbuf: &mut Vec<u8>,
) -> Option<Reply> {
    let shards = &server.shards;
    conn.start_command();
    let mark = wbuf.len();
    // A reply refused before the command ran (counted as rejected), maybe dropped.
    let refuse = |conn: &mut Conn, id: Option<usize>, r: Reply, wbuf: &mut Vec<u8>| {
        // In MULTI, a command refused while queueing makes EXEC abort.
        conn.tx.refused();
        if let Some(id) = id {
            server.stats.reject(id);
        }
        if let Reply::Error(e) = &r {
            server.stats.error(e);
        }
        Some(muted(conn, r, wbuf, mark))
    };
    let Some(cmd) = commands::lookup(args[0]) else {
        return refuse(conn, None, commands::unknown(args), wbuf);
    };
    let id = commands::stat_id(cmd, args);
    if let Err(r) = commands::check_arity(cmd, args) {
        return refuse(conn, id, r, wbuf);
    }
    // (A command that passed its arity check names no unknown subcommand.)
    let id = id.unwrap_or(cmd.id());
    // CLIENT SETINFO only labels the connection: clients (redis-py) send it on
    // connect, before AUTH, and give up on the connection if it is refused.
    let labels =
        cmd.name == "client" && args.len() == 4 && args[1].eq_ignore_ascii_case(b"setinfo");
    if !conn.authed && cmd.flags & flags::NOAUTH == 0 && !labels {
        return refuse(
            conn,
            Some(id),
            Reply::err("NOAUTH Authentication required."),
            wbuf,
        );
    }
    conn.client.note_command(id);
    // In MULTI: queued (or refused), not run (`multi.rs`).
    if conn.tx.in_multi() {
        if let Some(r) = multi::queue(server, conn, cmd, args) {
            if r.is_error() {
                return refuse(conn, Some(id), r, wbuf);
            }
            return Some(muted(conn, r, wbuf, mark));
        }
    }
    clients::wait_pause(server, conn, cmd, args);
    if let Some(t) = &conn.tracking {
        super::tracking::before_command(t, cmd, args, conn.tx.executing());
    }
    let t0 = stats::stamp();
    if pubsub::wants(conn, cmd) {
        if let Some(r) = pubsub::run(conn, cmd, args, wbuf) {
            let r = answered(server, id, t0, r, false, (Some(&*conn.client), args));
            // A confirmation is sent whatever CLIENT REPLY says.
            return Some(match r {
                Reply::Written => r,
                r => muted(conn, r, wbuf, mark),
            });
        }
    }
    let r = match cmd.exec {
        Exec::Shard(f) => {
            let s = route::shard_of_command(cmd, args, shards.count()).unwrap_or(0);
            let evicted = match exec::precheck_room(&**shards, cmd, s) {
                Err(r) => return refuse(conn, Some(id), r, wbuf),
                Ok(evicted) => evicted,
            };
            if me == Some(shards.owner(s)) || conn.tx.executing() {
                // (Inside EXEC every command runs at once, wherever its shard is.)
                let (db, me) = (conn.db, conn.id);
                let (r, lsn) = shards.with(s, |sh| {
                    crate::pubsub::tracking::as_writer(me, || {
                        if evicted {
                            // Keys of other shards evicted to make room: their
                            // invalidations come ahead of the reply.
                            crate::pubsub::tracking::flush_writer_into(wbuf);
                        }
                        sh.run(f, db, args, now, Some(wbuf))
                    })
                });
                acks.note(s, lsn);
                r
            } else {
                let args = args.iter().map(|a| a.to_vec()).collect();
                let mute = conn.muted();
                pending[s].push(Pending {
                    slot,
                    f,
                    db: conn.db,
                    args,
                    id,
                    mute,
                    evicted,
                });
                return None;
            }
        }
        _ => {
            if let Some(r) = multi::run(server, conn, cmd, args, me, pending, acks, wbuf) {
                let r = answered(server, id, t0, r, false, (Some(&*conn.client), args));
                return Some(muted(conn, r, wbuf, mark));
            }
            // No command waits gathered here: the pipeline stops before a barrier
            // until they have run.
            let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
            run_other(server, conn, cmd, &args, acks)
        }
    };
    let r = answered(server, id, t0, r, false, (Some(&*conn.client), args));
    Some(muted(conn, r, wbuf, mark))
}

/// Counts a call of the command numbered `id` that started at [`stats::stamp`] `t0`
/// and answered `r`; the reply, or nothing if `mute`.
/// A call slow enough goes to the slow log (`slowlog.rs`: one comparison otherwise).
fn answered<A: AsRef<[u8]>>(
    server: &Server,
    id: usize,
    t0: u64,
    r: Reply,
    mute: bool,
    who: (Option<&clients::Client>, &[A]),
) -> Reply {
    let took = server.stats.call(id, t0, r.is_error());
    if took >= slowlog::MIN_TICKS.load(Relaxed) {
        slowlog::note(who.0, who.1, took);
    }
    if let Reply::Error(e) = &r {
        server.stats.error(e);
    }
    if mute {
        Reply::Written
    } else {
        r
    }
}

/// The reply `r` of the command that just ran, or nothing if CLIENT REPLY drops it
/// (then what it wrote into `wbuf` from `mark` on is taken back).
fn muted(conn: &Conn, r: Reply, wbuf: &mut Vec<u8>, mark: usize) -> Reply {
    if conn.muted() {
        wbuf.truncate(mark);
        return Reply::Written;
    }
    r
}

/// Runs a Split or Server command.
pub(crate) fn run_other(
    server: &Arc<Server>,
    conn: &mut Conn,
    cmd: &'static Command,
    args: &[Vec<u8>],
    acks: &mut Acks,
) -> Reply {
    let shards = &super::tracking::AsWriter {
        inner: &*server.shards,
        id: conn.id,
    };
    if let Some(r) = super::blocking::run(server, conn, cmd, args, acks) {
        return r;
    }
    if let Some(r) = exec::run_keyed(shards, cmd, args, conn.db, acks) {
        return r;
    }
    if let Some(r) = admin::run(server, conn, cmd, args, acks) {
        return r;
    }
    if let Some(r) = exec::run_common(shards, cmd, args, conn.db, acks) {
        return r;
    }
    Reply::error(format!(
        "ERR command '{}' is not supported by weft-kv",
        cmd.name
    ))
}
