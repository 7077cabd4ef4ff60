//! The server's connections as the CLIENT command sees them: CLIENT LIST and INFO
//! (every connection, with Redis's fields), KILL (the old `ip:port` form and the
//! ID/ADDR/LADDR/USER/TYPE/SKIPME filters), PAUSE and UNPAUSE, REPLY, NO-EVICT, HELP;
//! and WAIT, which holds a connection as a pause does.
//!
//! Each connection registers a [`Client`] when it starts and removes it when it ends
//! (before its socket is closed). The registry is split in parts by connection id,
//! each behind its own mutex, taken only then and by CLIENT LIST and KILL: never on
//! the request path. What changes while a connection serves (its last command, its
//! buffers, when it last read) is in its `Client`'s atomics, which only that
//! connection writes, with relaxed stores, and CLIENT LIST reads; so the registry
//! works across workers and costs the request path nothing shared.
//!
//! CLIENT KILL shuts the other connection's socket down (`shutdown(2)`, under the
//! registry's lock, so the descriptor is still that connection's): its green thread,
//! wherever it waits (reading, writing, paused), wakes up and ends. A connection
//! killing itself gets its reply first, then closes.

use super::conn::Conn;
use super::Server;
use crate::commands::{self, flags};
use crate::resp::Reply;
use crate::shard::now_ms;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a held connection (CLIENT PAUSE, WAIT) looks whether it may go on.
const HOLD_TICK: Duration = Duration::from_millis(10);

/// A socket a connection is served on: its addresses as CLIENT LIST shows them.
pub trait Peer {
    /// (the client's address, the server's address) of a TCP socket; `None` for a
    /// Unix socket.
    fn tcp_addrs(&self) -> Option<(SocketAddr, SocketAddr)>;

    /// Given the connection's entry once it is made: a stream that must see CLIENT
    /// KILL itself (one that is not a socket the kill shuts down, `shm.rs`) keeps it.
    fn attach(&self, _client: &Arc<Client>) {}

    /// The memory the transport holds for the connection as long as it is open,
    /// besides the connection's buffers (a shared-memory connection's segment): counted
    /// in the client's memory (CLIENT LIST `tot-mem`, INFO's `mem_clients_normal`).
    fn fixed_memory(&self) -> usize {
        0
    }
}

impl Peer for weft_runtime::net::TcpStream {
    fn tcp_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        Some((self.peer_addr().ok()?, self.local_addr().ok()?))
    }
}

impl Peer for weft_runtime::net::UnixStream {
    fn tcp_addrs(&self) -> Option<(SocketAddr, SocketAddr)> {
        None
    }
}

/// One connection, as CLIENT LIST shows it.
pub struct Client {
    /// The connection's id (CLIENT ID).
    pub id: u64,
    /// `ip:port` of the client, or `<socket path>:0`.
    addr: String,
    /// `ip:port` the client connected to, or `<socket path>:0`.
    laddr: String,
    /// The socket's descriptor (valid while the client is registered).
    fd: RawFd,
    unix: bool,
    created: Instant,
    /// Unix time in ms when the connection last read.
    last_ms: AtomicU64,
    /// The statistics id of the last command, plus one (0: none yet).
    cmd: AtomicUsize,
    name: Mutex<Option<Vec<u8>>>,
    /// The protocol version (2, 3).
    pub(super) resp: AtomicU8,
    /// The selected database.
    pub(super) db: AtomicU8,
    /// Bytes received and not yet parsed; free space after them; the read buffer's size.
    qbuf: AtomicUsize,
    qbuf_free: AtomicUsize,
    rbs: AtomicUsize,
    /// Bytes of replies held, not yet sent.
    omem: AtomicUsize,
    /// CLIENT NO-EVICT ON.
    no_evict: AtomicBool,
    /// CLIENT KILL closed the socket.
    killed: AtomicBool,
    /// Held by WAIT or CLIENT PAUSE (not idle: the `timeout` setting spares it).
    held: AtomicBool,
    /// The wait of the blocking command it runs (BLPOP, ...), for CLIENT UNBLOCK and
    /// CLIENT LIST's flag `b`.
    waiter: Mutex<Option<Arc<super::blocking::Waiter>>>,
    /// In MULTI: the commands queued (-1: not in MULTI), and their bytes (CLIENT
    /// LIST's `multi`, `multi-mem` and flag `x`; `multi.rs`).
    pub(super) multi: std::sync::atomic::AtomicI64,
    pub(super) multi_mem: AtomicUsize,
    /// What the transport holds for the connection (`Peer::fixed_memory`), in
    /// `tot-mem`.
    fixed_mem: usize,
    /// A key it watches changed: its EXEC will fail (flag `d`; set by the shards).
    pub(super) dirty_cas: Arc<AtomicBool>,
    /// Its subscriptions and the messages queued for it, once it has subscribed.
    pub(crate) pubsub: std::sync::OnceLock<Arc<crate::pubsub::Subscriber>>,
    /// Its client-side caching, once CLIENT TRACKING turned it on (flags `t`, `R`,
    /// `B` and `redir`).
    pub(crate) tracking: std::sync::OnceLock<Arc<crate::pubsub::tracking::Tracking>>,
}

impl Client {
    /// Whether the client is on this machine: the Unix socket, or a loopback address.
    pub fn is_local(&self) -> bool {
        self.unix
            || self
                .addr
                .parse::<SocketAddr>()
                .is_ok_and(|a| super::conn::is_loopback(a.ip()))
    }

    /// The client of a connection `id` on `stream`, whose descriptor is `fd`.
    pub fn new<S: Peer>(server: &Server, id: u64, stream: &S, fd: RawFd) -> Arc<Client> {
        let (addr, laddr, unix) = match stream.tcp_addrs() {
            Some((peer, local)) => (peer.to_string(), local.to_string(), false),
            None => {
                let path = server
                    .config
                    .unix_socket
                    .as_ref()
                    .map_or(String::new(), |p| p.display().to_string());
                (format!("{path}:0"), format!("{path}:0"), true)
            }
        };
        Arc::new(Client {
            id,
            addr,
            laddr,
            fd,
            unix,
            created: Instant::now(),
            last_ms: AtomicU64::new(now_ms()),
            cmd: AtomicUsize::new(0),
            name: Mutex::new(None),
            resp: AtomicU8::new(2),
            db: AtomicU8::new(0),
            qbuf: AtomicUsize::new(0),
            qbuf_free: AtomicUsize::new(0),
            rbs: AtomicUsize::new(0),
            omem: AtomicUsize::new(0),
            no_evict: AtomicBool::new(false),
            killed: AtomicBool::new(false),
            held: AtomicBool::new(false),
            waiter: Mutex::new(None),
            multi: std::sync::atomic::AtomicI64::new(-1),
            multi_mem: AtomicUsize::new(0),
            fixed_mem: stream.fixed_memory(),
            dirty_cas: Arc::new(AtomicBool::new(false)),
            pubsub: std::sync::OnceLock::new(),
            tracking: std::sync::OnceLock::new(),
        })
    }

    /// The connection read: `qbuf` bytes wait to be parsed, `free` more fit in its read
    /// buffer of `size` bytes.
    #[inline]
    pub fn note_read(&self, qbuf: usize, free: usize, size: usize) {
        self.last_ms.store(now_ms(), Relaxed);
        self.qbuf.store(qbuf, Relaxed);
        self.qbuf_free.store(free, Relaxed);
        self.rbs.store(size, Relaxed);
    }

    /// The connection holds `bytes` of replies not yet sent.
    #[inline]
    pub fn note_output(&self, bytes: usize) {
        self.omem.store(bytes, Relaxed);
    }

    /// The connection runs the command whose statistics id is `id`.
    #[inline]
    pub fn note_command(&self, id: usize) {
        self.cmd.store(id + 1, Relaxed);
    }

    /// The bytes received and not parsed yet, with the read buffer's free space.
    pub fn input_bytes(&self) -> usize {
        self.qbuf.load(Relaxed) + self.qbuf_free.load(Relaxed)
    }

    /// The bytes of replies held, not sent yet.
    pub fn output_bytes(&self) -> usize {
        self.omem.load(Relaxed)
    }

    /// Notes the wait of the blocking command the connection runs now (`None`: it
    /// runs none).
    pub fn set_waiter(&self, w: Option<Arc<super::blocking::Waiter>>) {
        *self.waiter.lock().unwrap_or_else(|p| p.into_inner()) = w;
    }

    /// `ip:port` of the client, or `<socket path>:0` (the slow log's client address).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The connection's name (empty: none).
    pub fn name_bytes(&self) -> Vec<u8> {
        self.name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// CLIENT KILL closed this connection's socket.
    pub fn killed(&self) -> bool {
        self.killed.load(Relaxed)
    }

    /// Whether the client has gone: killed, or its peer closed the socket (what a
    /// connection held by WAIT or CLIENT PAUSE, not reading, looks at).
    fn gone(&self) -> bool {
        if self.killed() {
            return true;
        }
        let mut byte = 0u8;
        // SAFETY: `fd` is this connection's open socket (the connection calls this
        // itself, while registered); a one-byte peek into a local changes nothing.
        let n = unsafe {
            libc::recv(
                self.fd,
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
            || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
    }

    /// Its line in CLIENT LIST (`argv_mem`: the bytes of the command running now, for
    /// the caller).
    fn line(&self, argv_mem: usize) -> String {
        let name = self.name.lock().unwrap_or_else(|p| p.into_inner());
        let name = String::from_utf8_lossy(name.as_deref().unwrap_or_default()).into_owned();
        let mut fl = String::new();
        if self.subscribed() {
            fl.push('P');
        }
        let multi = self.multi.load(Relaxed);
        if multi >= 0 {
            fl.push('x');
        }
        let waiter = self.waiter.lock().unwrap_or_else(|p| p.into_inner());
        if waiter.is_some() {
            fl.push('b');
        }
        drop(waiter);
        let tracking = self.tracking.get().map(|t| t.state().clone());
        let tracking = tracking.filter(|s| s.on);
        if let Some(s) = &tracking {
            fl.push('t');
            if s.broken {
                fl.push('R');
            }
            if s.flags & crate::pubsub::tracking::BCAST != 0 {
                fl.push('B');
            }
        }
        let redir = tracking.map_or(-1, |s| s.redirect as i64);
        if self.dirty_cas.load(Relaxed) {
            fl.push('d');
        }
        if self.unix {
            fl.push('U');
        }
        if self.no_evict.load(Relaxed) {
            fl.push('e');
        }
        if fl.is_empty() {
            fl.push('N');
        }
        let cmd = match self.cmd.load(Relaxed) {
            0 => "NULL",
            id => commands::stat_name(id - 1),
        };
        let (qbuf, free, rbs) = (
            self.qbuf.load(Relaxed),
            self.qbuf_free.load(Relaxed),
            self.rbs.load(Relaxed),
        );
        let (sub, psub, ssub, queued) = self.pubsub.get().map_or((0, 0, 0, 0), |s| {
            use crate::pubsub::Kind;
            let n = |k| s.count(k);
            (
                n(Kind::Channel),
                n(Kind::Pattern),
                n(Kind::Shard),
                s.queued(),
            )
        });
        let omem = self.omem.load(Relaxed) + queued;
        let idle = now_ms().saturating_sub(self.last_ms.load(Relaxed)) / 1000;
        format!(
            "id={} addr={} laddr={} fd={} name={name} age={} idle={idle} flags={fl} db={} sub={sub} psub={psub} ssub={ssub} multi={multi} qbuf={qbuf} qbuf-free={free} argv-mem={argv_mem} multi-mem={} rbs={rbs} rbp={rbs} obl=0 oll=0 omem={omem} tot-mem={} events=r cmd={cmd} user=default redir={redir} resp={}\n",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            self.created.elapsed().as_secs(),
            self.db.load(Relaxed),
            self.multi_mem.load(Relaxed),
            rbs + omem
                + argv_mem
                + self.multi_mem.load(Relaxed)
                + self.fixed_mem
                + std::mem::size_of::<Client>(),
            self.resp.load(Relaxed),
        )
    }
}

/// CLIENT REPLY's state: whether a connection's replies are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    /// Every reply is sent.
    On,
    /// No reply is sent (CLIENT REPLY OFF, until CLIENT REPLY ON).
    Off,
    /// The next command's reply is not sent (CLIENT REPLY SKIP).
    SkipNext,
}

impl Conn {
    /// Whether the reply of the command about to run is dropped: call before running
    /// it, then [`Conn::muted`] after.
    #[inline]
    pub fn start_command(&mut self) {
        self.skip_this = self.reply == ReplyMode::SkipNext;
        if self.skip_this {
            self.reply = ReplyMode::On;
        }
    }

    /// Whether the reply of the command that just ran is dropped (CLIENT REPLY OFF or
    /// SKIP; an error too, as in Redis). CLIENT REPLY OFF drops its own reply, ON sends
    /// its own.
    #[inline]
    pub fn muted(&self) -> bool {
        self.skip_this || self.reply == ReplyMode::Off
    }

    /// Sets the protocol version (HELLO, RESET).
    pub fn set_proto(&mut self, proto: u8) {
        self.proto = proto;
        self.client.resp.store(proto, Relaxed);
        if let Some(s) = self.client.pubsub.get() {
            s.set_proto(proto);
        }
    }

    /// Selects database `db` (SELECT, RESET).
    pub fn select(&mut self, db: u8) {
        self.db = db;
        self.client.db.store(db, Relaxed);
    }

    /// Names the connection (`CLIENT SETNAME`, `HELLO ... SETNAME`); an empty name
    /// removes it. The name is checked by the caller.
    pub fn set_name(&mut self, name: &[u8]) {
        self.name = (!name.is_empty()).then(|| name.to_vec());
        *self.client.name.lock().unwrap_or_else(|p| p.into_inner()) = self.name.clone();
    }
}

/// CLIENT PAUSE's state: until when (Unix ms, 0: not paused), and whether every
/// command waits or only writes.
struct Pause {
    until: AtomicU64,
    all: AtomicBool,
}

/// A part of the registry: the connections whose ids fall in it.
type Part = Mutex<HashMap<u64, Arc<Client>>>;

/// Every connection of the server, and CLIENT PAUSE.
pub struct Registry {
    parts: Box<[Part]>,
    pause: Pause,
    /// Connections held by WAIT or a pause now (INFO's blocked_clients).
    blocked: AtomicUsize,
    /// Connections in a blocking command with a timeout (INFO's
    /// clients_in_timeout_table).
    in_timeout: AtomicUsize,
}

/// A registered connection; removes it from the registry when dropped (which the
/// connection does before it closes its socket).
pub struct Registered<'a> {
    registry: &'a Registry,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.registry
            .part(self.id)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

impl Registry {
    /// An empty registry of `parts` parts.
    pub fn new(parts: usize) -> Registry {
        Registry {
            parts: (0..parts.max(1))
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            pause: Pause {
                until: AtomicU64::new(0),
                all: AtomicBool::new(false),
            },
            blocked: AtomicUsize::new(0),
            in_timeout: AtomicUsize::new(0),
        }
    }

    fn part(&self, id: u64) -> &Part {
        &self.parts[id as usize % self.parts.len()]
    }

    /// Registers a connection until the returned guard is dropped.
    pub fn add(&self, client: Arc<Client>) -> Registered<'_> {
        let id = client.id;
        self.part(id)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, client);
        Registered { registry: self, id }
    }

    /// Every connection, by id.
    pub fn all(&self) -> Vec<Arc<Client>> {
        let mut all: Vec<Arc<Client>> = self
            .parts
            .iter()
            .flat_map(|p| {
                let p = p.lock().unwrap_or_else(|p| p.into_inner());
                p.values().cloned().collect::<Vec<_>>()
            })
            .collect();
        all.sort_by_key(|c| c.id);
        all
    }

    /// Connections held by WAIT or a pause, or blocked by a blocking command, now.
    pub fn blocked(&self) -> usize {
        self.blocked.load(Relaxed)
    }

    /// A connection starts (`on`) or ends waiting in a blocking command, with a
    /// timeout (`timed`) or not.
    pub fn note_blocked(&self, on: bool, timed: bool) {
        let counters = [&self.blocked, &self.in_timeout];
        for c in &counters[..1 + timed as usize] {
            if on {
                c.fetch_add(1, Relaxed);
            } else {
                c.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Connections in a blocking command with a timeout now.
    pub fn in_timeout(&self) -> usize {
        self.in_timeout.load(Relaxed)
    }

    /// Connection `id`, if it is registered.
    pub fn get(&self, id: u64) -> Option<Arc<Client>> {
        let part = self.part(id).lock().unwrap_or_else(|p| p.into_inner());
        part.get(&id).cloned()
    }

    /// The wait of connection `id`'s blocking command, if it runs one.
    pub fn waiter_of(&self, id: u64) -> Option<Arc<super::blocking::Waiter>> {
        let part = self.part(id).lock().unwrap_or_else(|p| p.into_inner());
        let c = part.get(&id)?;
        let w = c.waiter.lock().unwrap_or_else(|p| p.into_inner()).clone();
        w
    }

    /// Closes every other connection that `matches` says, and says whether the caller
    /// (`me`) matched too (it closes itself after its reply). Returns how many matched,
    /// the caller included.
    fn kill(&self, me: u64, matches: impl Fn(&Client) -> bool) -> (i64, bool) {
        let (mut n, mut myself) = (0, false);
        for part in self.parts.iter() {
            let part = part.lock().unwrap_or_else(|p| p.into_inner());
            for c in part.values() {
                if c.killed() || !matches(c) {
                    continue;
                }
                n += 1;
                if c.id == me {
                    myself = true;
                    continue;
                }
                c.killed.store(true, Relaxed);
                // SAFETY: while registered (and this part's lock is held), `fd` is the
                // connection's open socket: it leaves the registry before closing it.
                // shutdown(2) only wakes its reads and writes; the connection closes it.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
                // Gone for everyone at once, as Redis frees it: no more subscriptions
                // or messages (a REDIRECT to it finds it gone), no more tracking.
                if let Some(sub) = c.pubsub.get() {
                    sub.close();
                }
                if let Some(t) = c.tracking.get() {
                    t.off();
                }
            }
        }
        (n, myself)
    }

    /// Closes every connection that read nothing for more than `secs` seconds, but
    /// those waiting in a blocking command, held by WAIT or CLIENT PAUSE, or
    /// subscribed (the `timeout` setting).
    pub fn close_idle(&self, secs: u64) {
        let now = now_ms();
        let idle = |c: &Client| {
            now.saturating_sub(c.last_ms.load(Relaxed)) > secs * 1000
                && !c.held.load(Relaxed)
                && c.waiter.lock().unwrap_or_else(|p| p.into_inner()).is_none()
                && !c.subscribed()
        };
        self.kill(0, idle);
    }

    /// Whether a command with `flags` must wait now because of CLIENT PAUSE.
    #[inline]
    pub fn paused(&self, flags: u32) -> bool {
        let until = self.pause.until.load(Relaxed);
        until != 0
            && (self.pause.all.load(Relaxed) || flags & flags::WRITE != 0)
            && now_ms() < until
    }

    fn pause(&self, until: u64, all: bool) {
        // A pause in effect is only extended and widened, as in Redis.
        if self.pause.until.load(Relaxed) <= now_ms() {
            self.pause.all.store(all, Relaxed);
        } else if all {
            self.pause.all.store(true, Relaxed);
        }
        self.pause.until.fetch_max(until, Relaxed);
    }

    fn unpause(&self) {
        self.pause.until.store(0, Relaxed);
        self.pause.all.store(false, Relaxed);
    }

    /// Holds the calling connection while `wait` says so, or until its client has
    /// gone: the green thread sleeps, others run.
    pub fn hold(&self, client: &Client, mut wait: impl FnMut() -> bool) {
        self.blocked.fetch_add(1, Relaxed);
        client.held.store(true, Relaxed);
        while wait() && !client.gone() {
            weft_runtime::sleep(HOLD_TICK);
        }
        client.held.store(false, Relaxed);
        self.blocked.fetch_sub(1, Relaxed);
    }
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A timeout in milliseconds as Redis reads one (WAIT, CLIENT PAUSE): a 64-bit
/// integer, not negative.
fn timeout_ms(arg: &[u8]) -> Result<u64, Reply> {
    match commands::parse_i64(arg) {
        None => Err(Reply::err("ERR timeout is not an integer or out of range")),
        Some(t) if t < 0 => Err(Reply::err("ERR timeout is negative")),
        Some(t) => Ok(t as u64),
    }
}

/// WAIT numreplicas timeout: weft-kv has no replicas, so no write ever reaches one.
/// Asking for none answers 0 at once; asking for some holds the connection for
/// `timeout` ms (0: until the client goes, as Redis does) and then answers 0.
pub fn wait(server: &Server, conn: &Conn, args: &[Vec<u8>]) -> Reply {
    let Some(replicas) = commands::parse_i64(&args[1]) else {
        return commands::NOT_INT;
    };
    let timeout = match timeout_ms(&args[2]) {
        Ok(t) => t,
        Err(e) => return e,
    };
    if replicas > 0 {
        let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout));
        server
            .registry
            .hold(&conn.client, || deadline.is_none_or(|d| Instant::now() < d));
    }
    Reply::Int(0)
}

/// Holds a command that CLIENT PAUSE stops (a write, or any command under PAUSE ALL)
/// until the pause ends or the client goes. CLIENT UNPAUSE itself is never held
/// (Redis holds it under PAUSE ALL too, so that only the timeout could end such a
/// pause).
pub fn wait_pause(server: &Server, conn: &Conn, cmd: &commands::Command, args: &[&[u8]]) {
    let flags = cmd.sub(args).map_or(cmd.flags, |s| s.flags);
    if !server.registry.paused(flags) || (cmd.name == "client" && eq(args[1], "unpause")) {
        return;
    }
    server
        .registry
        .hold(&conn.client, || server.registry.paused(flags));
}

/// CLIENT subcommand ... (arity and the subcommand checked by the caller).
pub fn client(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    let on_off = |arg: &[u8]| {
        if eq(arg, "on") {
            Ok(true)
        } else if eq(arg, "off") {
            Ok(false)
        } else {
            Err(commands::SYNTAX_ERR)
        }
    };
    match sub.as_slice() {
        b"id" => Reply::Int(conn.id as i64),
        b"getname" => conn.name.clone().map_or(Reply::Nil, Reply::Bulk),
        b"setname" => match super::admin::check_name(&args[2]) {
            Ok(()) => {
                conn.set_name(&args[2]);
                Reply::OK
            }
            Err(e) => e,
        },
        // Client library labels (Redis 7.2): accepted, not shown.
        b"setinfo" => Reply::OK,
        b"info" => Reply::Verbatim("txt", conn.client.line(argv_mem(args)).into_bytes()),
        b"list" => list(server, conn, args),
        b"kill" => kill(server, conn, args),
        b"pause" => {
            let timeout = match timeout_ms(&args[2]) {
                Ok(t) => t,
                Err(e) => return e,
            };
            let all = match args.get(3) {
                _ if args.len() > 4 => return commands::sub_syntax_error(args),
                None => true,
                Some(m) if eq(m, "all") => true,
                Some(m) if eq(m, "write") => false,
                Some(_) => return Reply::err("ERR CLIENT PAUSE mode must be WRITE or ALL"),
            };
            server.registry.pause(now_ms().saturating_add(timeout), all);
            Reply::OK
        }
        b"unpause" => {
            server.registry.unpause();
            Reply::OK
        }
        b"reply" => {
            let mode = &args[2];
            if eq(mode, "on") {
                conn.reply = ReplyMode::On;
                conn.skip_this = false;
                Reply::OK
            } else if eq(mode, "off") {
                conn.reply = ReplyMode::Off;
                Reply::OK
            } else if eq(mode, "skip") {
                if conn.reply != ReplyMode::Off {
                    conn.reply = ReplyMode::SkipNext;
                }
                // No reply of its own.
                Reply::Written
            } else {
                commands::SYNTAX_ERR
            }
        }
        b"no-evict" => match on_off(&args[2]) {
            Ok(on) => {
                conn.client.no_evict.store(on, Relaxed);
                Reply::OK
            }
            Err(e) => e,
        },
        b"no-touch" => on_off(&args[2]).map_or_else(|e| e, |_| Reply::OK),
        b"unblock" => super::blocking::client_unblock(server, args),
        b"tracking" => super::tracking::client_tracking(server, conn, args),
        b"caching" => super::tracking::client_caching(conn, args),
        b"getredir" => super::tracking::client_getredir(conn),
        b"trackinginfo" => super::tracking::client_trackinginfo(conn),
        b"help" => help(),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            text(&args[1])
        )),
    }
}

/// The bytes of a command's arguments (CLIENT LIST's argv-mem of the caller).
fn argv_mem(args: &[Vec<u8>]) -> usize {
    args.iter().map(Vec::len).sum()
}

/// CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]: every connection
/// (of type pubsub while it has a subscription, else normal).
fn list(server: &Server, conn: &Conn, args: &[Vec<u8>]) -> Reply {
    let mut ids: Option<Vec<u64>> = None;
    let mut class = None;
    if args.len() == 4 && eq(&args[2], "type") {
        match client_type(&args[3]) {
            Some(t) => class = Some(t),
            None => return Reply::error(format!("ERR Unknown client type '{}'", text(&args[3]))),
        }
    } else if args.len() >= 4 && eq(&args[2], "id") {
        let mut v = Vec::new();
        for a in &args[3..] {
            match commands::parse_i64(a) {
                Some(id) if id > 0 => v.push(id as u64),
                _ => return Reply::err("ERR Invalid client ID"),
            }
        }
        ids = Some(v);
    } else if args.len() != 2 {
        return commands::SYNTAX_ERR;
    }
    let mut out = String::new();
    for c in server.registry.all() {
        if class.is_some_and(|t| !c.is(t)) || ids.as_ref().is_some_and(|ids| !ids.contains(&c.id)) {
            continue;
        }
        out += &c.line(if c.id == conn.id { argv_mem(args) } else { 0 });
    }
    Reply::Verbatim("txt", out.into_bytes())
}

/// The client types of CLIENT LIST/KILL TYPE.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    /// Subscribed to a channel, pattern or shard channel.
    Pubsub,
    /// A replica or a primary: weft-kv has none.
    Replication,
}

/// A client type of CLIENT LIST/KILL TYPE, `None` for no type.
fn client_type(name: &[u8]) -> Option<ClientType> {
    if eq(name, "normal") {
        Some(ClientType::Normal)
    } else if eq(name, "pubsub") {
        Some(ClientType::Pubsub)
    } else if ["master", "replica", "slave"].iter().any(|t| eq(name, t)) {
        Some(ClientType::Replication)
    } else {
        None
    }
}

impl Client {
    /// Whether it has a subscription (Redis's pubsub client type, flag `P`).
    fn subscribed(&self) -> bool {
        self.pubsub.get().is_some_and(|s| s.subscribed())
    }

    /// Whether it is of type `t`.
    fn is(&self, t: ClientType) -> bool {
        match t {
            ClientType::Normal => !self.subscribed(),
            ClientType::Pubsub => self.subscribed(),
            ClientType::Replication => false,
        }
    }
}

/// CLIENT KILL ip:port | CLIENT KILL [ID id] [ADDR ip:port] [LADDR ip:port]
/// [USER name] [TYPE type] [SKIPME yes|no]: closes the connections that match every
/// filter given (the caller too with SKIPME no, after its reply).
fn kill(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    if args.len() == 3 {
        let addr = &args[2];
        let (n, myself) = server
            .registry
            .kill(conn.id, |c| c.addr.as_bytes() == addr.as_slice());
        if myself {
            conn.close = true;
        }
        return if n == 0 {
            Reply::err("ERR No such client")
        } else {
            Reply::OK
        };
    }
    let (mut id, mut addr, mut laddr) = (None, None, None);
    let (mut class, mut skip_me) = (None, true);
    for pair in args[2..].chunks(2) {
        let [opt, value] = pair else {
            return commands::SYNTAX_ERR;
        };
        if eq(opt, "id") {
            match commands::parse_i64(value) {
                Some(v) if v > 0 => id = Some(v as u64),
                _ => return Reply::err("ERR client-id should be greater than 0"),
            }
        } else if eq(opt, "type") {
            match client_type(value) {
                Some(t) => class = Some(t),
                None => return Reply::error(format!("ERR Unknown client type '{}'", text(value))),
            }
        } else if eq(opt, "addr") {
            addr = Some(value);
        } else if eq(opt, "laddr") {
            laddr = Some(value);
        } else if eq(opt, "user") {
            if value.as_slice() != b"default" {
                return Reply::error(format!("ERR No such user '{}'", text(value)));
            }
        } else if eq(opt, "skipme") {
            if eq(value, "yes") {
                skip_me = true;
            } else if eq(value, "no") {
                skip_me = false;
            } else {
                return commands::SYNTAX_ERR;
            }
        } else {
            return commands::SYNTAX_ERR;
        }
    }
    let me = conn.id;
    let (n, myself) = server.registry.kill(me, |c| {
        class.is_none_or(|t| c.is(t))
            && id.is_none_or(|id| c.id == id)
            && addr.is_none_or(|a| c.addr.as_bytes() == a.as_slice())
            && laddr.is_none_or(|a| c.laddr.as_bytes() == a.as_slice())
            && !(skip_me && c.id == me)
    });
    if myself {
        conn.close = true;
    }
    Reply::Int(n)
}

/// CLIENT HELP.
fn help() -> Reply {
    let lines = [
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ID",
        "    The connection's id.",
        "GETNAME",
        "    The connection's name, or nil.",
        "SETNAME <name>",
        "    Name the connection (printable characters, no spaces; empty: no name).",
        "SETINFO <LIB-NAME|LIB-VER> <value>",
        "    Accepted and ignored (client libraries send it).",
        "INFO",
        "    This connection's line of CLIENT LIST.",
        "LIST [TYPE <NORMAL|MASTER|REPLICA|PUBSUB>] [ID <id> [<id> ...]]",
        "    One line per connection: its id, addresses, age, idle time, buffers, last",
        "    command and protocol.",
        "KILL <ip:port>",
        "    Close the connection from <ip:port> (<socket path>:0 for the Unix socket).",
        "KILL <filter> <value> [<filter> <value> ...]",
        "    Close the connections matching every filter given; answers how many.",
        "    Filters: ID <id>, ADDR <ip:port>, LADDR <ip:port>, USER <name>,",
        "    TYPE <NORMAL|MASTER|REPLICA|PUBSUB>, SKIPME <YES|NO> (default YES: not",
        "    this connection).",
        "PAUSE <timeout> [WRITE|ALL]",
        "    Hold the commands of every client (ALL, the default) or only writes",
        "    (WRITE) for <timeout> milliseconds.",
        "UNPAUSE",
        "    End a pause now.",
        "REPLY <ON|OFF|SKIP>",
        "    Send replies (ON), send none (OFF), or skip the next command's reply.",
        "NO-EVICT <ON|OFF>",
        "    Mark the connection (weft-kv never evicts clients).",
        "NO-TOUCH <ON|OFF>",
        "    Accepted (weft-kv keeps no access times).",
        "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
        "         [OPTIN] [OPTOUT] [NOLOOP]",
        "    Client-side caching: be told when keys this connection read change.",
        "TRACKINGINFO",
        "    The connection's tracking: its options, redirection and prefixes.",
        "GETREDIR",
        "    The connection invalidations are sent to (0: this one, -1: not tracking).",
        "CACHING (YES|NO)",
        "    Whether the next command's keys are remembered (OPTIN: YES, OPTOUT: NO).",
        "UNBLOCK <clientid> [TIMEOUT|ERROR]",
        "    End the wait of a connection blocked by BLPOP, BZPOPMIN and the like, as",
        "    if its time ran out (TIMEOUT, the default) or with an error (ERROR).",
        "HELP",
        "    This text.",
    ];
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}
