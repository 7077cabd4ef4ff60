//! Client-side caching (CLIENT TRACKING, as Redis 7.0 defines it): which keys each
//! tracking connection has read, and the invalidation messages it gets when one of
//! them changes.
//!
//! # Modes
//! - **Default**: a read-only command run by a tracking connection *remembers* its
//!   keys (in the *tracking table*, key name to connection ids). The first change of
//!   such a key, by any connection, on any worker and shard (a write, an expiry, a
//!   removal to make room), takes the key out of the table and sends each of its
//!   connections one invalidation: the connection reads the key again to be told of
//!   the next change. OPTIN remembers only the keys of the command after `CLIENT
//!   CACHING yes`; OPTOUT all but those of the command after `CLIENT CACHING no`.
//! - **BCAST**: nothing is remembered; every change of a key that starts with one of
//!   the connection's prefixes (every key, with none) sends it an invalidation: the
//!   keys are noted, and sent one message per prefix once the writing connection has
//!   run its pipeline (a transaction's keys together), as Redis sends them once a
//!   round of its event loop ([`flush_bcast`]).
//! - **NOLOOP**: a connection is not told of the changes it makes itself.
//!
//! # Messages
//! An invalidation is `["invalidate", [key, ...]]`: a RESP3 push on the tracking
//! connection itself, or, with REDIRECT, on the connection it redirects to: a push if
//! that one speaks RESP3, else a pub/sub message of the channel
//! `__redis__:invalidate` if that one is subscribed (to anything, as Redis checks),
//! else nothing. FLUSHDB and FLUSHALL
//! send every tracking connection one invalidation with a null instead of keys, and
//! empty the table. A RESP3 connection whose REDIRECT target is gone is told
//! `["tracking-redir-broken", id]` instead.
//!
//! Messages go through the receiver's pub/sub outbox (`pubsub/mod.rs`), so a change
//! never waits for the connections it tells, and its subscriber output limit applies.
//!
//! # Where it hooks in
//! The shards call [`written`] for the key of each record a command logs (every change
//! is logged, invariant 5 of docs/kv-types.md; a record of a string's encoding only,
//! `RecordRef::only_encoding`, is no change) and for each key that expires, only
//! while some connection tracks (one load otherwise). A connection remembers a
//! command's keys *before* running it: a change that comes between is then told
//! (the client reads the new value anyway), and none can be missed.
//!
//! # Bounds
//! The table holds at most `tracking-table-max-keys` keys (1,000,000 by default, 0: no
//! limit); past it, keys are taken out and their connections told, as if they had
//! changed (Redis does the same), so a client cannot make the server hold unbounded
//! memory by reading keys. A key's list of connections holds each connection once.

use super::Subscriber;
use std::cell::Cell;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, RwLock};

/// BCAST: told of changes to keys of its prefixes, remembers nothing.
pub const BCAST: u8 = 1;
/// OPTIN: remembers the keys of a command only after `CLIENT CACHING yes`.
pub const OPTIN: u8 = 2;
/// OPTOUT: remembers the keys of every command but the one after `CLIENT CACHING no`.
pub const OPTOUT: u8 = 4;
/// NOLOOP: not told of its own changes.
pub const NOLOOP: u8 = 8;

/// The channel RESP2 connections get invalidations on (through REDIRECT).
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// How many parts the table is split in (each behind its own lock).
const PARTS: usize = 16;

type Table = HashMap<Box<[u8]>, Vec<u64>>;

static TABLE: LazyLock<[Mutex<Table>; PARTS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(Table::new())));
/// Keys in the table, and (key, connection) pairs.
static KEYS: AtomicUsize = AtomicUsize::new(0);
static ITEMS: AtomicUsize = AtomicUsize::new(0);
/// `tracking-table-max-keys`.
static MAX_KEYS: AtomicUsize = AtomicUsize::new(1_000_000);
/// The part the next removal to make room looks in first.
static EVICT_AT: AtomicUsize = AtomicUsize::new(0);

/// Every tracking connection, by id.
static CLIENTS: LazyLock<RwLock<HashMap<u64, Arc<Tracking>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));
/// Tracking connections, and those in BCAST mode.
static ON: AtomicUsize = AtomicUsize::new(0);
static BCASTS: LazyLock<RwLock<Vec<Arc<Tracking>>>> = LazyLock::new(|| RwLock::new(Vec::new()));
static BCAST_N: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The connection whose command runs on this thread now (0: none known), for
    /// NOLOOP.
    static WRITER: Cell<u64> = const { Cell::new(0) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn part(key: &[u8]) -> usize {
    let fixed =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    fixed.hash_one(key) as usize % PARTS
}

/// Runs `f` (a command of connection `id`, run on this thread without a switch) with
/// `id` known as the connection making its changes (NOLOOP).
#[inline]
pub fn as_writer<R>(id: u64, f: impl FnOnce() -> R) -> R {
    if ON.load(Relaxed) == 0 {
        return f();
    }
    let before = WRITER.replace(id);
    let r = f();
    WRITER.set(before);
    r
}

/// Moves the messages held for the connection whose command runs on this thread now
/// (see [`as_writer`]) into `out`, its output ahead of the command's reply: what keys
/// evicted before the command runs tell it comes before its reply, as in Redis.
pub fn flush_writer_into(out: &mut Vec<u8>) {
    let id = WRITER.get();
    if ON.load(Relaxed) == 0 || id == 0 {
        return;
    }
    let t = CLIENTS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&id)
        .cloned();
    if let Some(t) = t {
        t.own.flush_held(out);
    }
}

/// Whether a change must be looked at: some key is remembered or some connection is
/// in BCAST mode.
#[inline]
pub fn active() -> bool {
    KEYS.load(Relaxed) + BCAST_N.load(Relaxed) > 0
}

/// Key `key` changed (written, removed, expired): its remembering connections and the
/// BCAST connections of its prefixes are told (one load when none tracks).
#[inline]
pub fn written(key: &[u8]) {
    if active() {
        changed(&[key]);
        flush_bcast();
    }
}

/// The keys of the records `records` (whole frames a command logged on a shard)
/// changed: each remembering connection is told of each key, each BCAST connection
/// once of all its keys (as Redis gathers them).
pub(crate) fn written_records(records: &[u8]) {
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let (_, rec, n) =
            crate::log::decode_frame(&records[at..]).expect("a command logs whole records");
        if let Some(key) = rec.key().filter(|_| !rec.only_encoding()) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        at += n;
    }
    if !keys.is_empty() {
        changed(&keys);
    }
}

#[cold]
fn changed(keys: &[&[u8]]) {
    let writer = WRITER.get();
    if KEYS.load(Relaxed) > 0 {
        for key in keys {
            let ids = lock(&TABLE[part(key)]).remove(*key);
            if let Some(ids) = ids {
                KEYS.fetch_sub(1, Relaxed);
                ITEMS.fetch_sub(ids.len(), Relaxed);
                tell(&ids, key, writer);
            }
        }
    }
    if BCAST_N.load(Relaxed) > 0 {
        let mut noted = false;
        for t in BCASTS.read().unwrap_or_else(|p| p.into_inner()).iter() {
            noted |= t.changed_bcast(keys, writer);
        }
        if noted {
            PENDING.store(true, Relaxed);
        }
    }
}

/// BCAST connections have keys noted and not yet sent.
static PENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends the BCAST connections the keys noted for them: one message per prefix. A
/// connection calls it once it has run a pipeline (so a transaction's keys come
/// together, as Redis sends them once a round of its event loop); an expiry, at once.
#[inline]
pub fn flush_bcast() {
    if PENDING.load(Relaxed) {
        flush_pending();
    }
}

#[cold]
fn flush_pending() {
    PENDING.store(false, Relaxed);
    for t in BCASTS.read().unwrap_or_else(|p| p.into_inner()).iter() {
        t.send_pending();
    }
}

/// Tells the connections `ids` (that remembered `key`) of its change.
fn tell(ids: &[u64], key: &[u8], writer: u64) {
    let clients = CLIENTS.read().unwrap_or_else(|p| p.into_inner());
    for id in ids {
        if let Some(t) = clients.get(id) {
            t.changed_default(key, writer);
        }
    }
}

/// FLUSHDB or FLUSHALL ran: every tracking connection is told (a null invalidation)
/// and the table is emptied.
pub fn flushed() {
    if ON.load(Relaxed) > 0 {
        for t in CLIENTS.read().unwrap_or_else(|p| p.into_inner()).values() {
            t.send(None);
        }
    }
    if KEYS.load(Relaxed) > 0 {
        for p in TABLE.iter() {
            let mut m = lock(p);
            let items: usize = m.values().map(Vec::len).sum();
            KEYS.fetch_sub(m.len(), Relaxed);
            ITEMS.fetch_sub(items, Relaxed);
            *m = Table::new();
        }
    }
}

/// Sets `tracking-table-max-keys` (0: no limit); the table is cut down to it at once.
pub fn set_max_keys(n: usize) {
    MAX_KEYS.store(n, Relaxed);
    make_room();
}

/// `tracking-table-max-keys`.
pub fn max_keys() -> usize {
    MAX_KEYS.load(Relaxed)
}

/// INFO's figures: tracking connections, keys in the table, (key, connection) pairs,
/// BCAST prefixes.
pub fn info() -> (usize, usize, usize, usize) {
    let prefixes = if BCAST_N.load(Relaxed) == 0 {
        0
    } else {
        let mut all: Vec<Vec<u8>> = BCASTS
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .flat_map(|t| t.state().prefixes.clone())
            .collect();
        all.sort();
        all.dedup();
        all.len()
    };
    (
        ON.load(Relaxed),
        KEYS.load(Relaxed),
        ITEMS.load(Relaxed),
        prefixes,
    )
}

/// Takes keys out of the table (telling their connections) while it holds more than
/// `tracking-table-max-keys`.
fn make_room() {
    loop {
        let max = MAX_KEYS.load(Relaxed);
        if max == 0 || KEYS.load(Relaxed) <= max {
            return;
        }
        let mut taken = None;
        for _ in 0..PARTS {
            let p = EVICT_AT.fetch_add(1, Relaxed) % PARTS;
            let mut m = lock(&TABLE[p]);
            let Some(key) = m.keys().next().cloned() else {
                continue;
            };
            taken = m.remove_entry(&key);
            break;
        }
        let Some((key, ids)) = taken else { return };
        KEYS.fetch_sub(1, Relaxed);
        ITEMS.fetch_sub(ids.len(), Relaxed);
        tell(&ids, &key, 0);
    }
}

/// A BCAST prefix and the keys of it changed since the last message.
type Pending = (Vec<u8>, Vec<Vec<u8>>);

/// What CLIENT TRACKING set.
#[derive(Clone, Default)]
pub struct State {
    /// Tracking is on.
    pub on: bool,
    /// [`BCAST`], [`OPTIN`], [`OPTOUT`], [`NOLOOP`].
    pub flags: u8,
    /// The connection invalidations are sent to (0: this one).
    pub redirect: u64,
    /// That connection's outbox.
    target: Option<Arc<Subscriber>>,
    /// BCAST's prefixes, sorted (the empty prefix: every key).
    pub prefixes: Vec<Vec<u8>>,
    /// The REDIRECT connection is gone.
    pub broken: bool,
}

/// One connection's tracking.
pub struct Tracking {
    /// The connection's id.
    pub id: u64,
    /// Its own outbox (RESP3 pushes).
    own: Arc<Subscriber>,
    state: Mutex<State>,
    /// CLIENT CACHING was given for the next command (only the connection touches
    /// it): 0 no, 1 yes, 2 yes, and EXEC ran (it ends at the next command).
    caching: AtomicU8,
    /// BCAST: the keys changed since its last message, by prefix (sent by
    /// [`flush_bcast`]).
    pending: Mutex<Vec<Pending>>,
}

impl Tracking {
    /// The tracking of connection `id`, whose outbox is `own`; off until [`Tracking::on`].
    pub fn new(id: u64, own: Arc<Subscriber>) -> Arc<Tracking> {
        Arc::new(Tracking {
            id,
            own,
            state: Mutex::new(State::default()),
            caching: AtomicU8::new(0),
            pending: Mutex::new(Vec::new()),
        })
    }

    /// What CLIENT TRACKING set.
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// CLIENT CACHING was given (checked by the caller) for the next command.
    pub fn set_caching(&self) {
        self.caching.store(1, Relaxed);
    }

    /// Whether CLIENT CACHING was given for the command running now.
    pub fn caching(&self) -> bool {
        self.caching.load(Relaxed) != 0
    }

    /// Turns tracking on with `flags`, invalidations going to `target` (connection
    /// `redirect`; 0 and `None`: this one), adding `prefixes` to BCAST's (the empty
    /// prefix when none is given). The caller checked the options.
    pub fn on(
        self: &Arc<Self>,
        flags: u8,
        redirect: u64,
        target: Option<Arc<Subscriber>>,
        prefixes: &[&[u8]],
    ) {
        let mut st = lock(&self.state);
        let was = st.on;
        st.on = true;
        st.flags = flags;
        st.redirect = redirect;
        st.target = target;
        st.broken = false;
        if flags & BCAST != 0 {
            let add: Vec<&[u8]> = if prefixes.is_empty() {
                vec![&b""[..]]
            } else {
                prefixes.to_vec()
            };
            for p in add {
                if !st.prefixes.iter().any(|x| x == p) {
                    st.prefixes.push(p.to_vec());
                }
            }
            st.prefixes.sort();
        }
        drop(st);
        if !was {
            CLIENTS
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(self.id, self.clone());
            ON.fetch_add(1, Relaxed);
            if flags & BCAST != 0 {
                BCASTS
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(self.clone());
                BCAST_N.fetch_add(1, Relaxed);
            }
        }
    }

    /// Turns tracking off (CLIENT TRACKING OFF, RESET, the connection's end): its
    /// prefixes and flags go; what it remembered stays in the table until changed,
    /// and is then skipped.
    pub fn off(&self) {
        let mut st = lock(&self.state);
        if !st.on {
            return;
        }
        let bcast = st.flags & BCAST != 0;
        *st = State::default();
        drop(st);
        lock(&self.pending).clear();
        self.caching.store(0, Relaxed);
        CLIENTS
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        ON.fetch_sub(1, Relaxed);
        if bcast {
            BCASTS
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|t| t.id != self.id);
            BCAST_N.fetch_sub(1, Relaxed);
        }
    }

    /// Before the connection runs a command (not one queued in MULTI; `client_cmd`: a
    /// CLIENT subcommand, which changes nothing here): remembers the
    /// command's keys (`keys`, called only if needed) if it reads and the mode says
    /// so, and ends CLIENT CACHING's effect after the command it was given for
    /// (`in_exec`: the command runs inside EXEC, which keeps it). The messages the
    /// connection is sent meanwhile are held until its reply is sent, as Redis sends
    /// them after the reply (a command that blocks lets them go while it waits, and
    /// holds them again once served: `server/blocking.rs`).
    pub fn before_command<'a, K: IntoIterator<Item = &'a [u8]>>(
        &self,
        name: &str,
        client_cmd: bool,
        readonly: bool,
        in_exec: bool,
        keys: impl FnOnce() -> K,
    ) {
        if client_cmd {
            return;
        }
        let mut given = self.caching.load(Relaxed);
        if given == 2 && !in_exec {
            given = 0;
            self.caching.store(0, Relaxed);
        }
        let st = lock(&self.state);
        let (on, flags, redirect) = (st.on, st.flags, st.redirect);
        drop(st);
        if on && redirect == 0 {
            // What the command makes it send itself comes after its reply.
            self.own.hold_back();
        }
        if readonly {
            let skip = flags & BCAST != 0
                || (flags & OPTIN != 0 && given == 0)
                || (flags & OPTOUT != 0 && given != 0);
            if on && !skip {
                for key in keys() {
                    self.remember(key);
                }
                make_room();
            }
        }
        if given != 0 && !in_exec {
            match name {
                "multi" => {}
                "exec" => self.caching.store(2, Relaxed),
                _ => self.caching.store(0, Relaxed),
            }
        }
    }

    fn remember(&self, key: &[u8]) {
        let mut m = lock(&TABLE[part(key)]);
        match m.get_mut(key) {
            Some(ids) => {
                if !ids.contains(&self.id) {
                    ids.push(self.id);
                    ITEMS.fetch_add(1, Relaxed);
                }
            }
            None => {
                m.insert(key.into(), vec![self.id]);
                KEYS.fetch_add(1, Relaxed);
                ITEMS.fetch_add(1, Relaxed);
            }
        }
    }

    /// A key it remembered changed, by connection `writer`.
    fn changed_default(&self, key: &[u8], writer: u64) {
        let st = lock(&self.state);
        if !st.on || st.flags & BCAST != 0 || (st.flags & NOLOOP != 0 && writer == self.id) {
            return;
        }
        self.send_locked(st, Some(&[key]));
    }

    /// Keys changed, by connection `writer`: noted for its next message if it is in
    /// BCAST mode and they start with one of its prefixes (true: some were).
    fn changed_bcast(&self, keys: &[&[u8]], writer: u64) -> bool {
        let st = lock(&self.state);
        if !st.on || st.flags & BCAST == 0 || (st.flags & NOLOOP != 0 && writer == self.id) {
            return false;
        }
        let mut noted = false;
        let mut pending = lock(&self.pending);
        for k in keys {
            let Some(p) = st.prefixes.iter().find(|p| k.starts_with(p)) else {
                continue;
            };
            let at = match pending.iter().position(|(q, _)| q == p) {
                Some(at) => at,
                None => {
                    pending.push((p.clone(), Vec::new()));
                    pending.len() - 1
                }
            };
            let list = &mut pending[at].1;
            if !list.iter().any(|x| x == k) {
                list.push(k.to_vec());
                noted = true;
            }
        }
        noted
    }

    /// Sends what [`Tracking::changed_bcast`] noted: one message per prefix.
    fn send_pending(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        for (_, keys) in pending {
            let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.send(Some(&keys));
        }
    }

    /// Sends an invalidation of `keys` (`None`: every key, after a flush).
    fn send(&self, keys: Option<&[&[u8]]>) {
        let st = lock(&self.state);
        if st.on {
            self.send_locked(st, keys);
        }
    }

    fn send_locked(&self, mut st: MutexGuard<'_, State>, keys: Option<&[&[u8]]>) {
        // A flush's null, as the tracking connection's protocol writes it.
        let null: &[u8] = if self.own.proto() >= 3 {
            b"_\r\n"
        } else {
            b"$-1\r\n"
        };
        let payload = |out: &mut Vec<u8>| match keys {
            Some(keys) => {
                out.push(b'*');
                out.extend_from_slice(itoa::Buffer::new().format(keys.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                for k in keys {
                    crate::resp::reply::bulk(k, out);
                }
            }
            None => out.extend_from_slice(null),
        };
        let Some(target) = st.target.clone() else {
            drop(st);
            if self.own.proto() >= 3 {
                self.own.deliver_with(|_, out| {
                    out.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
                    payload(out);
                });
            }
            return;
        };
        if target.is_closed() {
            st.broken = true;
            let redirect = st.redirect;
            drop(st);
            if self.own.proto() >= 3 {
                self.own.deliver_with(|_, out| {
                    out.extend_from_slice(b">2\r\n$21\r\ntracking-redir-broken\r\n");
                    out.push(b':');
                    out.extend_from_slice(itoa::Buffer::new().format(redirect).as_bytes());
                    out.extend_from_slice(b"\r\n");
                });
            }
            return;
        }
        drop(st);
        let subscribed = target.subscribed();
        target.deliver_with(|proto, out| {
            if proto >= 3 {
                out.extend_from_slice(b">2\r\n$10\r\ninvalidate\r\n");
            } else if subscribed {
                out.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n");
                crate::resp::reply::bulk(CHANNEL, out);
            } else {
                // RESP2 without a subscription: nowhere to put it.
                return;
            }
            payload(out);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pubsub::Take;

    fn taken(s: &Subscriber) -> Vec<u8> {
        // (As the connection does once its replies are sent.)
        s.release();
        let mut buf = Vec::new();
        assert_eq!(s.take(&mut buf), Take::Write);
        buf
    }

    fn nothing(s: &Subscriber) {
        s.release();
        let mut buf = Vec::new();
        assert_eq!(s.take(&mut buf), Take::Wait);
    }

    /// A remembered key is told once, to RESP3 on the connection itself; NOLOOP spares
    /// the writer; a flush sends a null. (One test: the tables are the process's.)
    #[test]
    fn remembered_keys_are_told_once_and_flushes_with_a_null() {
        let own = Subscriber::new(2_000_001, 3);
        let t = Tracking::new(2_000_001, own.clone());
        t.on(0, 0, None, &[]);
        t.before_command("get", false, true, false, || [&b"unit.tk"[..]]);
        assert!(KEYS.load(Relaxed) >= 1);
        written(b"unit.tk");
        assert_eq!(
            taken(&own),
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\nunit.tk\r\n"
        );
        written(b"unit.tk");
        nothing(&own);
        // NOLOOP: its own change is not told, another's is.
        t.on(NOLOOP, 0, None, &[]);
        t.before_command("get", false, true, false, || [&b"unit.tk"[..]]);
        as_writer(2_000_001, || written(b"unit.tk"));
        nothing(&own);
        t.before_command("get", false, true, false, || [&b"unit.tk"[..]]);
        as_writer(7, || written(b"unit.tk"));
        assert_eq!(
            taken(&own),
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\nunit.tk\r\n"
        );
        flushed();
        assert_eq!(taken(&own), b">2\r\n$10\r\ninvalidate\r\n_\r\n");
        t.off();
        written(b"unit.tk");
        nothing(&own);
        own.close();
    }
}
