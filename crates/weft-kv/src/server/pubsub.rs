//! The pub/sub commands of a connection (SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE,
//! PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB), subscribed mode,
//! and the writer that sends a subscriber its messages.
//!
//! A connection that subscribes gets a [`Subscriber`] (in its `Client`, for CLIENT
//! LIST) and a *writer*: a green thread on the connection's worker that waits for
//! messages in the subscriber's outbox and writes them to the socket, while the
//! connection's own thread goes on reading commands. Both write under the
//! subscriber's `writing` lock, so a message is never cut into a reply.
//!
//! Order: a change of subscriptions is confirmed in the connection's replies, in
//! command order; the messages queued before it are put before the confirmation (so
//! that a message of a channel always comes before the confirmation that the
//! connection left it), and the writer holds the messages queued after it until the
//! connection has sent its replies (so that a message of a channel never comes before
//! the confirmation that the connection joined it).
//!
//! Subscribed mode: a RESP2 connection with at least one subscription may only send
//! (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING (answered `["pong", message]`), QUIT and
//! RESET, as in Redis; any other command is refused. RESP3 connections receive
//! messages as push replies and may send any command meanwhile. Confirmations are
//! sent even under CLIENT REPLY OFF (Redis 7 sends pushes whatever the reply mode).

use super::conn::Conn;
use crate::commands::{self, Command};
use crate::pubsub::{self, Kind, Subscriber, Take};
use crate::resp::Reply;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Runs `cmd` if it is a pub/sub command, or refuses it in subscribed mode; `None`
/// otherwise (RESET leaves subscribed mode here, then runs as usual). Confirmations
/// are written into `wbuf` (answered [`Reply::Written`], which CLIENT REPLY does not
/// drop).
pub(super) fn run(
    conn: &mut Conn,
    cmd: &Command,
    args: &[&[u8]],
    wbuf: &mut Vec<u8>,
) -> Option<Reply> {
    let subscribed = conn.client.pubsub.get().is_some_and(|s| s.subscribed());
    Some(match cmd.name {
        "subscribe" => subscribe(conn, Kind::Channel, &args[1..], wbuf),
        "psubscribe" => subscribe(conn, Kind::Pattern, &args[1..], wbuf),
        "ssubscribe" => subscribe(conn, Kind::Shard, &args[1..], wbuf),
        "unsubscribe" => unsubscribe(conn, Kind::Channel, &args[1..], wbuf),
        "punsubscribe" => unsubscribe(conn, Kind::Pattern, &args[1..], wbuf),
        "sunsubscribe" => unsubscribe(conn, Kind::Shard, &args[1..], wbuf),
        "publish" | "spublish" => publish(conn, args, wbuf),
        "pubsub" => pubsub_command(args),
        "ping" if subscribed && conn.proto == 2 => {
            if args.len() > 2 {
                return None; // the arity error PING answers anyway
            }
            Reply::Array(vec![
                Reply::bulk(b"pong"),
                Reply::bulk(args.get(1).copied().unwrap_or_default()),
            ])
        }
        "reset" => {
            if let Some(s) = conn.client.pubsub.get() {
                for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
                    s.unsubscribe_all(kind, |_, _| {});
                }
            }
            return None;
        }
        "quit" => {
            // Gone for everyone from its reply on, as in Redis (which frees a client
            // that sent QUIT once its reply is written): what was published to it
            // comes before the reply, and a REDIRECT to it finds it gone at once.
            if let Some(s) = conn.client.pubsub.get() {
                s.hold(wbuf);
                s.close();
            }
            return None;
        }
        _ if subscribed && conn.proto == 2 => Reply::error(format!(
            "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / \
             RESET are allowed in this context",
            cmd.sub(args).map_or(cmd.name, |s| s.name)
        )),
        _ => return None,
    })
}

/// PUBLISH channel message (SPUBLISH shardchannel message): queues the message for
/// every subscriber of the channel (and every pattern it matches), answers their
/// number. A connection subscribed to the channel itself gets its message before the
/// reply, as in Redis.
fn publish(conn: &Conn, args: &[&[u8]], wbuf: &mut Vec<u8>) -> Reply {
    let n = if args[0].eq_ignore_ascii_case(b"spublish") {
        pubsub::publish_shard(args[1], args[2])
    } else {
        if pubsub::has_subscribers() {
            // The connections already woken on this worker run first: a change of
            // subscriptions that reached the server before this PUBLISH takes effect
            // before it, as in Redis's single event loop.
            weft_runtime::yield_now();
        }
        pubsub::publish(args[1], args[2])
    };
    if let Some(s) = conn.client.pubsub.get() {
        s.hold(wbuf);
    }
    if !conn.muted() {
        Reply::Int(n as i64).encode(conn.proto, wbuf);
    }
    Reply::Written
}

/// Whether [`run`] must see a command before it runs: a server command, or any
/// command of a connection that has subscribed (subscribed mode).
#[inline]
pub(super) fn wants(conn: &Conn, cmd: &Command) -> bool {
    matches!(cmd.exec, commands::Exec::Server) || conn.client.pubsub.get().is_some()
}

/// SUBSCRIBE channel... (PSUBSCRIBE pattern..., SSUBSCRIBE shardchannel...): joins
/// each, and confirms each with `[subscribe, name, count]`, where the count is the
/// connection's channels and patterns (its shard channels for SSUBSCRIBE) after it.
/// Joining a channel twice confirms it again with the same count.
fn subscribe(conn: &mut Conn, kind: Kind, names: &[&[u8]], wbuf: &mut Vec<u8>) -> Reply {
    let sub = conn
        .client
        .pubsub
        .get_or_init(|| Subscriber::new(conn.id, conn.proto))
        .clone();
    sub.hold(wbuf);
    for name in names {
        sub.subscribe(kind, name);
        let count = match kind {
            Kind::Shard => sub.count(Kind::Shard),
            _ => sub.subscriptions(),
        };
        pubsub::encode(
            conn.proto,
            &[Some(kind.names().0), Some(*name)],
            Some(count as i64),
            wbuf,
        );
    }
    Reply::Written
}

/// UNSUBSCRIBE [channel...] (PUNSUBSCRIBE, SUNSUBSCRIBE): leaves each channel given,
/// or every one it is subscribed to when none is given, and confirms each with
/// `[unsubscribe, name, count]` (the count after it), a channel it was not subscribed
/// to included. With none given and none subscribed, one confirmation with a nil name
/// and the count.
fn unsubscribe(conn: &mut Conn, kind: Kind, names: &[&[u8]], wbuf: &mut Vec<u8>) -> Reply {
    let sub = conn.client.pubsub.get().cloned();
    let left = |s: Option<&Arc<Subscriber>>| {
        s.map_or(0, |s| match kind {
            Kind::Shard => s.count(Kind::Shard),
            _ => s.subscriptions(),
        })
    };
    let mut done: Vec<(Vec<u8>, usize)> = Vec::new();
    if names.is_empty() {
        if let Some(s) = &sub {
            s.unsubscribe_all(kind, |name, n| done.push((name.to_vec(), n)));
        }
    } else {
        for name in names {
            if let Some(s) = &sub {
                s.unsubscribe(kind, name);
            }
            done.push((name.to_vec(), left(sub.as_ref())));
        }
    }
    // The messages queued before, then the confirmations.
    if let Some(s) = &sub {
        s.hold(wbuf);
    }
    let word = kind.names().1;
    if done.is_empty() {
        pubsub::encode(
            conn.proto,
            &[Some(word), None],
            Some(left(sub.as_ref()) as i64),
            wbuf,
        );
    }
    for (name, n) in done {
        pubsub::encode(
            conn.proto,
            &[Some(word), Some(name.as_slice())],
            Some(n as i64),
            wbuf,
        );
    }
    Reply::Written
}

/// PUBSUB CHANNELS [pattern] | NUMSUB [channel...] | NUMPAT | SHARDCHANNELS [pattern] |
/// SHARDNUMSUB [channel...] | HELP.
///
/// CHANNELS: the channels with at least one subscriber (matching the pattern), in no
/// order. NUMSUB: for each channel given, its name and its number of subscribers, one
/// flat list (in RESP3 too, as Redis). NUMPAT: the distinct patterns subscribed to.
fn pubsub_command(args: &[&[u8]]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    let names = |v: Vec<Vec<u8>>| Reply::Array(v.into_iter().map(Reply::Bulk).collect());
    let numsub = |kind: Kind| {
        let mut out = Vec::with_capacity(2 * (args.len() - 2));
        for ch in &args[2..] {
            out.push(Reply::bulk(ch));
            out.push(Reply::Int(pubsub::numsub(kind, ch) as i64));
        }
        Reply::Array(out)
    };
    match sub.as_slice() {
        b"channels" if args.len() <= 3 => names(pubsub::channels(Kind::Channel, args.get(2).copied())),
        b"shardchannels" if args.len() <= 3 => names(pubsub::channels(Kind::Shard, args.get(2).copied())),
        b"numsub" => numsub(Kind::Channel),
        b"shardnumsub" => numsub(Kind::Shard),
        b"numpat" if args.len() == 2 => Reply::Int(pubsub::numpat() as i64),
        b"help" if args.len() == 2 => Reply::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "    Return the currently active channels matching a <pattern> (default: '*').",
                "NUMPAT",
                "    Return number of subscriptions to patterns.",
                "NUMSUB [<channel> ...]",
                "    Return the number of subscribers for the specified channels, excluding",
                "    pattern subscriptions(default: no channels).",
                "SHARDCHANNELS [<pattern>]",
                "    Return the currently active shard level channels matching a <pattern> (default: '*').",
                "SHARDNUMSUB [<shardchannel> ...]",
                "    Return the number of subscribers for the specified shard level channel(s)",
                "HELP",
                "    Prints this help.",
            ]
            .iter()
            .map(|l| Reply::Simple((*l).into()))
            .collect(),
        ),
        _ => commands::sub_syntax_error(args),
    }
}

/// Starts the writer of a connection that has subscribed: a green thread on the
/// calling worker that writes the subscriber's messages to `stream` until the
/// connection ends ([`Subscriber::close`]), or closes the connection (shuts its
/// socket down) when the subscriber passed its output limit.
pub(super) fn spawn_writer<S>(
    stream: Arc<S>,
    sub: Arc<Subscriber>,
) -> Option<weft_runtime::JoinHandle<()>>
where
    S: AsRawFd + Send + Sync + 'static,
    for<'a> &'a S: Write,
{
    let b = weft_runtime::ThreadBuilder::new()
        .name(format!("kv-pubsub {}", sub.id))
        .preemptible(false);
    sub.set_fd(stream.as_raw_fd());
    let f = move || write_messages(&stream, &sub);
    match weft_runtime::current_worker() {
        Some(w) => b.spawn_on(w, f).ok(),
        None => b.spawn(f).ok(),
    }
}

fn write_messages<S>(stream: &Arc<S>, sub: &Subscriber)
where
    S: AsRawFd,
    for<'a> &'a S: Write,
{
    let mut buf = Vec::new();
    loop {
        // The lock first, then the bytes: what the connection drains into its own
        // replies meanwhile comes after what this writer took before.
        let guard = sub.writing.lock();
        match sub.take(&mut buf) {
            Take::Write => {
                let ok = (&**stream).write_all(&buf).is_ok();
                drop(guard);
                if !ok {
                    sub.take(&mut buf);
                    return;
                }
                if buf.capacity() > 1 << 20 {
                    sub.take(&mut buf);
                    buf = Vec::new();
                }
            }
            Take::Wait => {
                drop(guard);
                weft_runtime::park::park();
            }
            Take::Stop => return,
            Take::Overflow => {
                drop(guard);
                // SAFETY: the descriptor is the connection's open socket (`stream`,
                // held here, keeps it open); shutdown(2) only ends its reads and
                // writes, so that the connection's thread sees the end and closes.
                unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
                return;
            }
        }
    }
}

/// The limits of CLIENT's classes other than pubsub, as given to CONFIG SET (shown by
/// CONFIG GET; weft-kv's own `client-output-limit` governs normal clients, and there
/// are no replicas).
static OTHER_LIMITS: std::sync::Mutex<[(u64, u64, u64); 2]> =
    std::sync::Mutex::new([(0, 0, 0), (256 << 20, 64 << 20, 60)]);

/// `client-output-buffer-limit` as CONFIG GET shows it: `normal <hard> <soft>
/// <seconds> slave ... pubsub ...`.
pub(super) fn output_buffer_limit() -> String {
    let other = *OTHER_LIMITS.lock().unwrap_or_else(|p| p.into_inner());
    let (h, s, secs) = pubsub::limit();
    format!(
        "normal {} {} {} slave {} {} {} pubsub {h} {s} {secs}",
        other[0].0, other[0].1, other[0].2, other[1].0, other[1].1, other[1].2
    )
}

/// CONFIG SET client-output-buffer-limit `<class> <hard> <soft> <seconds>...`: the
/// class `normal`, `replica` (or `slave`) or `pubsub`, sizes with Redis's units (`32mb`,
/// `8m`, bytes). All of it is checked before any of it is set.
pub(super) fn set_output_buffer_limit(value: &str) -> Result<(), String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut sets = Vec::new();
    for w in words.chunks(4) {
        let class = match w[0].to_ascii_lowercase().as_str() {
            "normal" => 0,
            "replica" | "slave" => 1,
            "pubsub" => 2,
            _ => {
                return Err("Invalid client class specified in buffer limit configuration.".into())
            }
        };
        let size = |s: &str| super::parse_size(s);
        let secs = w[3].parse::<u64>().ok();
        let (Some(h), Some(s), Some(t)) = (size(w[1]), size(w[2]), secs) else {
            return Err(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration.".into(),
            );
        };
        sets.push((class, (h, s, t)));
    }
    for (class, (h, s, t)) in sets {
        if class == 2 {
            pubsub::set_limit(h, s, t);
        } else {
            OTHER_LIMITS.lock().unwrap_or_else(|p| p.into_inner())[class] = (h, s, t);
        }
    }
    Ok(())
}

/// The connection on `stream` ends: its subscriptions are removed, nothing more is
/// queued, and its writer (if it has one) stops; a writer stuck in a write the client
/// does not read is woken by the socket's shutdown (the connection's replies are sent
/// by now).
pub(super) fn stop_writer<S: AsRawFd>(
    stream: &S,
    sub: &Arc<Subscriber>,
    writer: Option<weft_runtime::JoinHandle<()>>,
) {
    sub.close();
    if let Some(w) = writer {
        // SAFETY: `stream` is the connection's open socket; shutdown(2) only ends its
        // reads and writes (the connection closes it after this).
        unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
        let _ = w.join();
    }
}
