//! Pub/sub: channels, patterns and shard channels, their subscribers, and delivery of
//! messages to them from any worker; keyspace notifications ([`notify()`]) are messages
//! published from inside commands.
//!
//! # Structure
//! The subscriptions of the process are in one hub: each channel name maps to the
//! connections subscribed to it (the channels are split in parts by a hash of their
//! name, each part behind its own lock), and the patterns are in one map behind a
//! read-write lock. Every connection that has ever subscribed has a [`Subscriber`]:
//! its subscriptions as it sees them (SUBSCRIBE counts, UNSUBSCRIBE with no argument)
//! and its *outbox*, the messages published to it and not yet written to its socket.
//!
//! # Delivery
//! [`publish`] runs on the publisher's worker: it looks the channel up, then every
//! pattern, and appends the encoded message to each receiver's outbox (a short lock,
//! never across a switch), then wakes the receiver's writer (a green thread of the
//! receiving connection that writes its outbox, `server/pubsub.rs`). So a publisher
//! never waits for a subscriber, whatever worker the subscriber is on and however
//! slowly it reads, and PUBLISH to a channel nobody listens to costs two loads of a
//! counter (no lock, no lookup) while the process has no subscription at all, and one
//! lookup otherwise.
//!
//! # The output limit of subscribers
//! An outbox grows while its client does not read. As Redis's
//! `client-output-buffer-limit pubsub <hard> <soft> <seconds>` (32 MiB, 8 MiB, 60 s by
//! default) says: once it holds more than the hard limit, or has held more than the
//! soft limit for more than the given seconds (checked as each message is queued), its
//! messages are dropped and its socket is shut down at once (which also ends a write
//! its writer is stuck in), so the connection ends. What a subscriber holds (its
//! outbox, and what its writer took and has not written yet) is counted in
//! [`queued_bytes`] (INFO's client memory) and in its `omem`.
//!
//! # Scope
//! The hub belongs to the process: one weft-kv server per process, as `weft kv serve`
//! runs it (the embedded store publishes nothing: nobody can subscribe to it).

pub mod notify;
pub mod tracking;

pub use notify::{
    notify, EVICTED, EXPIRED, GENERIC, HASH, KEYEVENT, KEYSPACE, KEY_MISS, LIST, MODULE, NEW, SET,
    STREAM, STRING, ZSET,
};

use crate::keyspace::glob_match;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, RwLock};
use std::time::Instant;
use weft_runtime::park::Unparker;

/// What a subscription is to: a channel, a pattern of channels, or a shard channel
/// (SSUBSCRIBE: without a cluster, a channel of its own name space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE, PUBLISH.
    Channel = 0,
    /// PSUBSCRIBE: a glob pattern of channel names.
    Pattern = 1,
    /// SSUBSCRIBE, SPUBLISH.
    Shard = 2,
}

impl Kind {
    /// The name of the confirmation of a subscription to it, and of its removal.
    pub fn names(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Kind::Channel => (&b"subscribe"[..], &b"unsubscribe"[..]),
            Kind::Pattern => (&b"psubscribe"[..], &b"punsubscribe"[..]),
            Kind::Shard => (&b"ssubscribe"[..], &b"sunsubscribe"[..]),
        }
    }
}

/// Channel subscribers by channel name.
type Map = HashMap<Vec<u8>, Vec<Arc<Subscriber>>>;

/// How many parts the channels are split in.
const PARTS: usize = 16;

struct Hub {
    channels: [Mutex<Map>; PARTS],
    shard: [Mutex<Map>; PARTS],
    patterns: RwLock<Map>,
}

static HUB: LazyLock<Hub> = LazyLock::new(|| Hub {
    channels: std::array::from_fn(|_| Mutex::new(Map::new())),
    shard: std::array::from_fn(|_| Mutex::new(Map::new())),
    patterns: RwLock::new(Map::new()),
});

/// Subscriptions to channels and patterns in the process (PUBLISH's fast path: none).
static SUBSCRIPTIONS: AtomicUsize = AtomicUsize::new(0);
/// Subscriptions to patterns (a publish matches them only if there are some).
static PATTERN_SUBSCRIPTIONS: AtomicUsize = AtomicUsize::new(0);
/// Subscriptions to shard channels.
static SHARD_SUBSCRIPTIONS: AtomicUsize = AtomicUsize::new(0);
/// Bytes in every outbox.
static QUEUED: AtomicUsize = AtomicUsize::new(0);
/// Subscribers closed for passing their output limit, ever.
static DISCONNECTED: AtomicU64 = AtomicU64::new(0);

/// The output limit of subscribers: (hard bytes, soft bytes, soft seconds); 0 is no
/// limit.
static HARD: AtomicU64 = AtomicU64::new(32 << 20);
static SOFT: AtomicU64 = AtomicU64::new(8 << 20);
static SOFT_SECS: AtomicU64 = AtomicU64::new(60);

/// Sets the output limit of subscribers (`client-output-buffer-limit pubsub`).
pub fn set_limit(hard: u64, soft: u64, soft_secs: u64) {
    HARD.store(hard, Relaxed);
    SOFT.store(soft, Relaxed);
    SOFT_SECS.store(soft_secs, Relaxed);
}

/// The output limit of subscribers: (hard bytes, soft bytes, soft seconds).
pub fn limit() -> (u64, u64, u64) {
    (
        HARD.load(Relaxed),
        SOFT.load(Relaxed),
        SOFT_SECS.load(Relaxed),
    )
}

/// The bytes published and not yet written to subscribers' sockets.
pub fn queued_bytes() -> usize {
    QUEUED.load(Relaxed)
}

/// Subscribers closed for passing their output limit, since the process started.
pub fn limit_disconnections() -> u64 {
    DISCONNECTED.load(Relaxed)
}

fn part(name: &[u8]) -> usize {
    // A fixed hash: it only spreads channels over the parts' locks.
    let fixed =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    fixed.hash_one(name) as usize % PARTS
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes a message's header and bulks take, written into `out`: a RESP2 array or a
/// RESP3 push of `parts`, then `tail` (an integer, for confirmations) if given.
pub fn encode(proto: u8, parts: &[Option<&[u8]>], tail: Option<i64>, out: &mut Vec<u8>) {
    let n = parts.len() + tail.is_some() as usize;
    let mut digits = itoa::Buffer::new();
    out.push(if proto >= 3 { b'>' } else { b'*' });
    out.extend_from_slice(digits.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        match p {
            Some(p) => crate::resp::reply::bulk(p, out),
            None if proto >= 3 => out.extend_from_slice(b"_\r\n"),
            None => out.extend_from_slice(b"$-1\r\n"),
        }
    }
    if let Some(t) = tail {
        out.push(b':');
        out.extend_from_slice(digits.format(t).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// What a subscriber's writer is told to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// Write these bytes (the outbox's content, taken).
    Write,
    /// Nothing to write now: the writer parks until woken.
    Wait,
    /// The connection is ending: the writer stops.
    Stop,
    /// The output limit was passed: the writer closes the connection and stops.
    Overflow,
}

/// Messages published to a connection and not yet written.
struct Outbox {
    buf: Vec<u8>,
    /// The connection has replies to send before these messages (a subscription's
    /// confirmation it has not sent yet): the writer waits.
    hold: bool,
    /// The connection ends: nothing more is queued.
    closed: bool,
    /// The output limit was passed (the messages were dropped).
    overflow: bool,
    /// Since when the outbox holds more than the soft limit.
    over_soft: Option<Instant>,
    /// The writer, parked until there is something to write.
    waiter: Option<Unparker>,
}

/// A connection's subscriptions as it sees them (only its own thread changes them).
#[derive(Default)]
struct Mine {
    sets: [HashSet<Vec<u8>>; 3],
}

/// A connection that has subscribed (at least once): its subscriptions and outbox.
pub struct Subscriber {
    /// The connection's id.
    pub id: u64,
    /// The protocol messages are encoded in (HELLO changes it).
    proto: AtomicU8,
    out: Mutex<Outbox>,
    mine: Mutex<Mine>,
    /// How many channels, patterns and shard channels it is subscribed to.
    counts: [AtomicUsize; 3],
    /// The bytes held for it: in its outbox, and taken by its writer and not yet
    /// written.
    queued: AtomicUsize,
    /// Its connection's socket, once its writer runs (-1 before): shut down when it
    /// passes its output limit.
    fd: AtomicI32,
    /// Held while anything is written to the connection's socket (its replies or its
    /// messages), so that neither is cut into the other.
    pub writing: weft_runtime::sync::Mutex<()>,
}

impl Subscriber {
    /// A connection `id` speaking protocol `proto`, subscribed to nothing yet.
    pub fn new(id: u64, proto: u8) -> Arc<Subscriber> {
        Arc::new(Subscriber {
            id,
            proto: AtomicU8::new(proto),
            out: Mutex::new(Outbox {
                buf: Vec::new(),
                hold: false,
                closed: false,
                overflow: false,
                over_soft: None,
                waiter: None,
            }),
            mine: Mutex::new(Mine::default()),
            counts: Default::default(),
            queued: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            writing: weft_runtime::sync::Mutex::new(()),
        })
    }

    /// Its connection's socket, `fd`, is written by its writer from now on.
    pub fn set_fd(&self, fd: i32) {
        self.fd.store(fd, Relaxed);
    }

    /// Sets the protocol its messages are encoded in.
    pub fn set_proto(&self, proto: u8) {
        self.proto.store(proto, Relaxed);
    }

    /// How many subscriptions of `kind` it has.
    pub fn count(&self, kind: Kind) -> usize {
        self.counts[kind as usize].load(Relaxed)
    }

    /// Channels and patterns: the count SUBSCRIBE and PSUBSCRIBE confirm with (and a
    /// RESP2 connection with any is in subscribed mode, with shard channels).
    pub fn subscriptions(&self) -> usize {
        self.count(Kind::Channel) + self.count(Kind::Pattern)
    }

    /// Whether it has any subscription at all.
    pub fn subscribed(&self) -> bool {
        self.subscriptions() + self.count(Kind::Shard) > 0
    }

    /// The bytes of messages queued for it.
    pub fn queued(&self) -> usize {
        self.queued.load(Relaxed)
    }

    /// The protocol its messages are encoded in.
    pub fn proto(&self) -> u8 {
        self.proto.load(Relaxed)
    }

    /// Whether its connection has ended.
    pub fn is_closed(&self) -> bool {
        lock(&self.out).closed
    }

    /// Queues a message (an array or push of `parts`), unless its connection is
    /// ending; then applies the output limit.
    fn deliver(&self, parts: &[Option<&[u8]>]) {
        self.deliver_with(|proto, out| encode(proto, parts, None, out));
    }

    /// Queues the message `write` encodes (given the protocol; it may write nothing),
    /// unless its connection is ending; then applies the output limit.
    pub fn deliver_with(&self, write: impl FnOnce(u8, &mut Vec<u8>)) {
        let mut o = lock(&self.out);
        if o.closed || o.overflow {
            return;
        }
        let before = o.buf.len();
        write(self.proto.load(Relaxed), &mut o.buf);
        let added = o.buf.len() - before;
        if added == 0 {
            return;
        }
        self.queued.fetch_add(added, Relaxed);
        QUEUED.fetch_add(added, Relaxed);
        // Everything held for it: the outbox, and what its writer took and has not
        // written yet.
        let len = self.queued.load(Relaxed) as u64;
        let over = past_limit(len, limit(), &mut o.over_soft, Instant::now());
        if over {
            o.overflow = true;
            DISCONNECTED.fetch_add(1, Relaxed);
            let dropped = std::mem::take(&mut o.buf);
            self.queued.fetch_sub(dropped.len(), Relaxed);
            QUEUED.fetch_sub(dropped.len(), Relaxed);
            let fd = self.fd.load(Relaxed);
            if fd >= 0 {
                // The writer may be stuck in a write the client does not read: the
                // socket's shutdown ends it, and the connection.
                // SAFETY: `fd` is the connection's open socket: a message is only
                // delivered to a subscriber found in the hub under its lock, and the
                // connection leaves the hub (`close`, which takes that lock) before it
                // closes its socket. shutdown(2) only ends reads and writes.
                unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
            }
        }
        let w = o.waiter.take();
        drop(o);
        if let Some(w) = w {
            w.unpark_owned();
        }
    }

    /// The writer's step: swaps the outbox's bytes into `buf` (emptied first, its
    /// bytes counted as written) and says what to do. On [`Take::Wait`] the writer is
    /// noted as the one to wake.
    pub fn take(&self, buf: &mut Vec<u8>) -> Take {
        if !buf.is_empty() {
            self.queued.fetch_sub(buf.len(), Relaxed);
            QUEUED.fetch_sub(buf.len(), Relaxed);
            buf.clear();
        }
        let mut o = lock(&self.out);
        if o.overflow {
            Take::Overflow
        } else if o.closed {
            Take::Stop
        } else if o.hold || o.buf.is_empty() {
            o.waiter = Some(Unparker::current());
            Take::Wait
        } else {
            std::mem::swap(&mut o.buf, buf);
            Take::Write
        }
    }

    /// The connection is about to confirm a change of its subscriptions: the messages
    /// queued so far are appended to `wbuf` (before the confirmation), and the writer
    /// holds what comes after until [`Subscriber::release`] (after the connection
    /// sent `wbuf`).
    pub fn hold(&self, wbuf: &mut Vec<u8>) {
        let mut o = lock(&self.out);
        o.hold = true;
        if !o.buf.is_empty() {
            let n = o.buf.len();
            wbuf.extend_from_slice(&o.buf);
            o.buf.clear();
            self.queued.fetch_sub(n, Relaxed);
            QUEUED.fetch_sub(n, Relaxed);
        }
    }

    /// The connection is about to run a command whose messages to itself must come
    /// after its reply (client-side caching): the writer holds what is queued until
    /// [`Subscriber::release`].
    pub fn hold_back(&self) {
        lock(&self.out).hold = true;
    }

    /// While the writer holds the messages back ([`Subscriber::hold_back`]): moves
    /// those queued so far to `wbuf`, the connection's output (before the reply it is
    /// about to add there).
    pub fn flush_held(&self, wbuf: &mut Vec<u8>) {
        let mut o = lock(&self.out);
        if o.hold && !o.buf.is_empty() && !o.overflow {
            let n = o.buf.len();
            wbuf.extend_from_slice(&o.buf);
            o.buf.clear();
            self.queued.fetch_sub(n, Relaxed);
            QUEUED.fetch_sub(n, Relaxed);
        }
    }

    /// The connection sent its replies: the writer may write the messages queued
    /// after them.
    pub fn release(&self) {
        let mut o = lock(&self.out);
        if !o.hold {
            return;
        }
        o.hold = false;
        let w = if o.buf.is_empty() || o.overflow {
            None
        } else {
            o.waiter.take()
        };
        drop(o);
        if let Some(w) = w {
            w.unpark_owned();
        }
    }

    /// The connection ends: its subscriptions are removed, nothing more is queued,
    /// what was is dropped, and the writer is told to stop.
    pub fn close(self: &Arc<Self>) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            self.unsubscribe_all(kind, |_, _| {});
        }
        let mut o = lock(&self.out);
        o.closed = true;
        let n = std::mem::take(&mut o.buf).len();
        self.queued.fetch_sub(n, Relaxed);
        QUEUED.fetch_sub(n, Relaxed);
        let w = o.waiter.take();
        drop(o);
        if let Some(w) = w {
            w.unpark_owned();
        }
    }

    /// Subscribes to `name` (a channel, pattern or shard channel): false if it already
    /// was.
    pub fn subscribe(self: &Arc<Self>, kind: Kind, name: &[u8]) -> bool {
        if !lock(&self.mine).sets[kind as usize].insert(name.to_vec()) {
            return false;
        }
        in_map(kind, name, |m| {
            m.entry(name.to_vec()).or_default().push(self.clone())
        });
        self.counts[kind as usize].fetch_add(1, Relaxed);
        counter(kind).fetch_add(1, Relaxed);
        true
    }

    /// Unsubscribes from `name`: false if it was not subscribed.
    pub fn unsubscribe(&self, kind: Kind, name: &[u8]) -> bool {
        if !lock(&self.mine).sets[kind as usize].remove(name) {
            return false;
        }
        in_map(kind, name, |m| {
            if let Some(v) = m.get_mut(name) {
                v.retain(|s| s.id != self.id);
                if v.is_empty() {
                    m.remove(name);
                }
            }
        });
        self.counts[kind as usize].fetch_sub(1, Relaxed);
        counter(kind).fetch_sub(1, Relaxed);
        true
    }

    /// Unsubscribes from every subscription of `kind`, calling `each` with each name
    /// and the count left after it.
    pub fn unsubscribe_all(&self, kind: Kind, mut each: impl FnMut(&[u8], usize)) {
        let names: Vec<Vec<u8>> = lock(&self.mine).sets[kind as usize]
            .iter()
            .cloned()
            .collect();
        for name in names {
            self.unsubscribe(kind, &name);
            let left = match kind {
                Kind::Shard => self.count(Kind::Shard),
                _ => self.subscriptions(),
            };
            each(&name, left);
        }
    }
}

/// Runs `f` on the map that holds `name`'s subscribers, under its lock.
fn in_map<R>(kind: Kind, name: &[u8], f: impl FnOnce(&mut Map) -> R) -> R {
    match kind {
        Kind::Pattern => f(&mut HUB.patterns.write().unwrap_or_else(|p| p.into_inner())),
        _ => f(&mut lock(&parts(kind)[part(name)])),
    }
}

/// The parts of channels (`Kind::Channel`) or of shard channels.
fn parts(kind: Kind) -> &'static [Mutex<Map>; PARTS] {
    match kind {
        Kind::Shard => &HUB.shard,
        _ => &HUB.channels,
    }
}

/// Whether a subscriber holding `len` bytes at `now` is past the output limit
/// `(hard, soft, secs)` (0: no limit): more than `hard`, or more than `soft` both when
/// first seen over it (`over_soft`, kept here) and more than `secs` whole seconds
/// later, as Redis's `client-output-buffer-limit` says.
fn past_limit(
    len: u64,
    (hard, soft, secs): (u64, u64, u64),
    over_soft: &mut Option<Instant>,
    now: Instant,
) -> bool {
    if hard > 0 && len > hard {
        return true;
    }
    if soft == 0 || len <= soft {
        *over_soft = None;
        return false;
    }
    match *over_soft {
        None => {
            *over_soft = Some(now);
            false
        }
        Some(since) => now.saturating_duration_since(since).as_secs() > secs,
    }
}

fn counter(kind: Kind) -> &'static AtomicUsize {
    match kind {
        Kind::Channel => &SUBSCRIPTIONS,
        Kind::Pattern => &PATTERN_SUBSCRIPTIONS,
        Kind::Shard => &SHARD_SUBSCRIPTIONS,
    }
}

/// Publishes `message` to `channel`: queues it for every connection subscribed to the
/// channel (a `message`) and for every pattern subscription the channel matches (a
/// `pmessage`, once per matching pattern); answers how many it was queued for. Never
/// waits for a subscriber.
pub fn publish(channel: &[u8], message: &[u8]) -> usize {
    if SUBSCRIPTIONS.load(Relaxed) == 0 && PATTERN_SUBSCRIPTIONS.load(Relaxed) == 0 {
        return 0;
    }
    let mut n = 0;
    if SUBSCRIPTIONS.load(Relaxed) > 0 {
        let part = lock(&HUB.channels[part(channel)]);
        if let Some(subs) = part.get(channel) {
            for s in subs {
                s.deliver(&[Some(&b"message"[..]), Some(channel), Some(message)]);
            }
            n += subs.len();
        }
    }
    if PATTERN_SUBSCRIPTIONS.load(Relaxed) > 0 {
        let patterns = HUB.patterns.read().unwrap_or_else(|p| p.into_inner());
        for (pattern, subs) in patterns.iter() {
            if glob_match(pattern, channel) {
                for s in subs {
                    s.deliver(&[
                        Some(&b"pmessage"[..]),
                        Some(pattern),
                        Some(channel),
                        Some(message),
                    ]);
                }
                n += subs.len();
            }
        }
    }
    n
}

/// Whether any connection is subscribed to a channel or a pattern.
pub fn has_subscribers() -> bool {
    SUBSCRIPTIONS.load(Relaxed) + PATTERN_SUBSCRIPTIONS.load(Relaxed) > 0
}

/// SPUBLISH: publishes `message` to the shard channel `channel` (an `smessage` for
/// each of its subscribers); answers how many it was queued for.
pub fn publish_shard(channel: &[u8], message: &[u8]) -> usize {
    if SHARD_SUBSCRIPTIONS.load(Relaxed) == 0 {
        return 0;
    }
    let part = lock(&HUB.shard[part(channel)]);
    let Some(subs) = part.get(channel) else {
        return 0;
    };
    for s in subs {
        s.deliver(&[Some(&b"smessage"[..]), Some(channel), Some(message)]);
    }
    subs.len()
}

/// The channels (or shard channels) with at least one subscriber whose names match
/// `pattern` (every one without a pattern): PUBSUB CHANNELS, SHARDCHANNELS.
pub fn channels(kind: Kind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for p in parts(kind) {
        for name in lock(p).keys() {
            if pattern.is_none_or(|pat| glob_match(pat, name)) {
                out.push(name.clone());
            }
        }
    }
    out
}

/// How many connections are subscribed to `channel` (PUBSUB NUMSUB, SHARDNUMSUB).
pub fn numsub(kind: Kind, channel: &[u8]) -> usize {
    lock(&parts(kind)[part(channel)])
        .get(channel)
        .map_or(0, Vec::len)
}

/// How many distinct patterns have subscribers (PUBSUB NUMPAT).
pub fn numpat() -> usize {
    if PATTERN_SUBSCRIPTIONS.load(Relaxed) == 0 {
        return 0;
    }
    HUB.patterns.read().unwrap_or_else(|p| p.into_inner()).len()
}

/// INFO's counts: channels and patterns with subscribers, shard channels.
pub fn info_counts() -> (usize, usize, usize) {
    let count = |parts: &[Mutex<Map>; PARTS], n: &AtomicUsize| {
        if n.load(Relaxed) == 0 {
            return 0;
        }
        parts.iter().map(|p| lock(p).len()).sum()
    };
    (
        count(&HUB.channels, &SUBSCRIPTIONS),
        numpat(),
        count(&HUB.shard, &SHARD_SUBSCRIPTIONS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(s: &Subscriber) -> Vec<u8> {
        let mut buf = Vec::new();
        assert_eq!(s.take(&mut buf), Take::Write);
        buf
    }

    #[test]
    fn messages_reach_channels_and_patterns_in_each_protocol() {
        let a = Subscriber::new(1_000_001, 2);
        let b = Subscriber::new(1_000_002, 3);
        assert!(a.subscribe(Kind::Channel, b"unit.ch"));
        assert!(!a.subscribe(Kind::Channel, b"unit.ch"));
        assert!(b.subscribe(Kind::Pattern, b"unit.c?"));
        assert_eq!((a.subscriptions(), b.subscriptions()), (1, 1));
        assert_eq!(publish(b"unit.ch", b"hi"), 2);
        assert_eq!(publish(b"unit.none", b"hi"), 0);
        assert_eq!(
            taken(&a),
            b"*3\r\n$7\r\nmessage\r\n$7\r\nunit.ch\r\n$2\r\nhi\r\n"
        );
        assert_eq!(
            taken(&b),
            b">4\r\n$8\r\npmessage\r\n$7\r\nunit.c?\r\n$7\r\nunit.ch\r\n$2\r\nhi\r\n"
        );
        assert_eq!(numsub(Kind::Channel, b"unit.ch"), 1);
        assert!(channels(Kind::Channel, Some(b"unit.*")).contains(&b"unit.ch".to_vec()));
        a.close();
        b.close();
        assert_eq!(publish(b"unit.ch", b"hi"), 0);
        assert_eq!(numsub(Kind::Channel, b"unit.ch"), 0);
        let mut buf = Vec::new();
        assert_eq!(a.take(&mut buf), Take::Stop);
    }

    #[test]
    fn the_output_limit_is_redis_hard_and_soft_limit() {
        use std::time::Duration;
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut since = None;
        let lim = (1000, 100, 2);
        // Hard: at once.
        assert!(past_limit(1001, lim, &mut since, at(0)));
        // Soft: noted, then past once over it for more than 2 whole seconds.
        assert!(!past_limit(101, lim, &mut since, at(0)));
        assert!(!past_limit(500, lim, &mut since, at(2)));
        assert!(past_limit(500, lim, &mut since, at(3)));
        // Back under the soft limit: the time starts again.
        assert!(!past_limit(100, lim, &mut since, at(4)));
        assert_eq!(since, None);
        assert!(!past_limit(101, lim, &mut since, at(10)));
        assert!(!past_limit(101, lim, &mut since, at(12)));
        // 0: no limit.
        assert!(!past_limit(u64::MAX, (0, 0, 0), &mut None, at(0)));
    }

    #[test]
    fn confirmations_encode_nil_names_and_counts() {
        let mut out = Vec::new();
        encode(2, &[Some(&b"unsubscribe"[..]), None], Some(0), &mut out);
        assert_eq!(out, b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
        out.clear();
        encode(3, &[Some(&b"unsubscribe"[..]), None], Some(0), &mut out);
        assert_eq!(out, b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n");
    }

    #[test]
    fn a_held_outbox_is_drained_before_a_confirmation() {
        let s = Subscriber::new(1_000_003, 2);
        s.subscribe(Kind::Channel, b"unit.hold");
        publish(b"unit.hold", b"1");
        let mut wbuf = b"+OK\r\n".to_vec();
        s.hold(&mut wbuf);
        assert_eq!(
            wbuf,
            b"+OK\r\n*3\r\n$7\r\nmessage\r\n$9\r\nunit.hold\r\n$1\r\n1\r\n"
        );
        publish(b"unit.hold", b"2");
        let mut buf = Vec::new();
        // Held until the connection sent its replies.
        assert_eq!(s.take(&mut buf), Take::Wait);
        s.release();
        assert_eq!(s.take(&mut buf), Take::Write);
        assert_eq!(
            buf,
            b"*3\r\n$7\r\nmessage\r\n$9\r\nunit.hold\r\n$1\r\n2\r\n"
        );
        assert_eq!(s.queued(), buf.len());
        s.close();
    }
}
