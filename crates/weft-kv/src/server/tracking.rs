//! The connection's side of client-side caching (`pubsub/tracking.rs` keeps the
//! tables and sends the messages): CLIENT TRACKING, CACHING, GETREDIR and
//! TRACKINGINFO as Redis 7.0 answers them, remembering the keys of a command before
//! it runs, and the connection's id given to the shards its commands run on, so that
//! NOLOOP knows whose change it is.

use super::conn::Conn;
use super::Server;
use crate::commands::{self, flags, Command};
use crate::exec::{Held, ShardSet};
use crate::pubsub::tracking::{self, Tracking, BCAST, NOLOOP, OPTIN, OPTOUT};
use crate::pubsub::Subscriber;
use crate::resp::Reply;
use crate::shard::Shard;
use std::sync::Arc;

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// The connection's tracking, made at its first CLIENT TRACKING ON (with its outbox,
/// whose writer the connection starts after the command).
fn of(conn: &mut Conn) -> Arc<Tracking> {
    if let Some(t) = &conn.tracking {
        return t.clone();
    }
    let own = conn
        .client
        .pubsub
        .get_or_init(|| Subscriber::new(conn.id, conn.proto))
        .clone();
    let t = Tracking::new(conn.id, own);
    conn.tracking = Some(t.clone());
    let _ = conn.client.tracking.set(t.clone());
    t
}

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX prefix ...] [BCAST] [OPTIN] [OPTOUT]
/// [NOLOOP] (arity checked by the caller).
///
/// ON checks, in Redis's order: PREFIX needs BCAST; BCAST cannot be switched on or
/// off while tracking; BCAST goes with neither OPTIN nor OPTOUT; OPTIN and OPTOUT
/// exclude each other and cannot be switched while tracking; prefixes must not overlap
/// each other or those already given. ON again changes the options (prefixes add
/// up). OFF forgets them. REDIRECT names a connection that exists now.
pub fn client_tracking(server: &Server, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let (mut fl, mut redirect, mut prefixes) = (0u8, 0u64, Vec::<&[u8]>::new());
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = &args[j];
        if eq(a, "redirect") && more {
            j += 1;
            if redirect != 0 {
                return Reply::err("ERR A client can only redirect to a single other client");
            }
            let Some(id) = commands::parse_i64(&args[j]) else {
                return commands::NOT_INT;
            };
            // Redis keeps the id as given; only a live connection is accepted.
            if id <= 0 || server.registry.get(id as u64).is_none() {
                return Reply::err("ERR The client ID you want redirect to does not exist");
            }
            redirect = id as u64;
        } else if eq(a, "bcast") {
            fl |= BCAST;
        } else if eq(a, "optin") {
            fl |= OPTIN;
        } else if eq(a, "optout") {
            fl |= OPTOUT;
        } else if eq(a, "noloop") {
            fl |= NOLOOP;
        } else if eq(a, "prefix") && more {
            j += 1;
            prefixes.push(&args[j]);
        } else {
            return commands::SYNTAX_ERR;
        }
        j += 1;
    }
    if eq(&args[2], "off") {
        if let Some(t) = &conn.tracking {
            t.off();
        }
        return Reply::OK;
    }
    if !eq(&args[2], "on") {
        return commands::SYNTAX_ERR;
    }
    let now = conn.tracking.as_ref().map(|t| t.state().clone());
    let (was_on, was) = now.as_ref().map_or((false, 0), |s| (s.on, s.flags));
    if fl & BCAST == 0 && !prefixes.is_empty() {
        return Reply::err("ERR PREFIX option requires BCAST mode to be enabled");
    }
    if was_on && (was & BCAST) != (fl & BCAST) {
        return Reply::err(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this \
             client, and then re-enabling it with a different mode.",
        );
    }
    if fl & BCAST != 0 && fl & (OPTIN | OPTOUT) != 0 {
        return Reply::err("ERR OPTIN and OPTOUT are not compatible with BCAST");
    }
    if fl & OPTIN != 0 && fl & OPTOUT != 0 {
        return Reply::err("ERR You can't specify both OPTIN mode and OPTOUT mode");
    }
    if was_on && ((fl & OPTIN != 0 && was & OPTOUT != 0) || (fl & OPTOUT != 0 && was & OPTIN != 0))
    {
        return Reply::err(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this \
             client, and then re-enabling it with a different mode.",
        );
    }
    if fl & BCAST != 0 {
        let old = now.map(|s| s.prefixes).unwrap_or_default();
        for (i, p) in prefixes.iter().enumerate() {
            let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
            if let Some(o) = old.iter().find(|o| overlap(o, p)) {
                return Reply::error(format!(
                    "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a \
                     single client must not overlap.",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(o)
                ));
            }
            if let Some(o) = prefixes[i + 1..].iter().find(|o| overlap(o, p)) {
                return Reply::error(format!(
                    "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes \
                     for a single client must not overlap.",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(o)
                ));
            }
        }
    }
    let target = if redirect == 0 {
        None
    } else {
        let Some(c) = server.registry.get(redirect) else {
            return Reply::err("ERR The client ID you want redirect to does not exist");
        };
        let proto = c.resp.load(std::sync::atomic::Ordering::Relaxed);
        Some(
            c.pubsub
                .get_or_init(|| Subscriber::new(redirect, proto))
                .clone(),
        )
    };
    of(conn).on(fl, redirect, target, &prefixes);
    Reply::OK
}

/// CLIENT CACHING YES|NO: the next command's keys are remembered (OPTIN) or not
/// (OPTOUT).
pub fn client_caching(conn: &Conn, args: &[Vec<u8>]) -> Reply {
    let state = conn.tracking.as_ref().map(|t| t.state().clone());
    let Some(st) = state.filter(|s| s.on) else {
        return Reply::err(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with \
             OPTIN or OPTOUT mode enabled",
        );
    };
    let t = conn.tracking.as_ref().expect("tracking is on");
    if eq(&args[2], "yes") {
        if st.flags & OPTIN == 0 {
            return Reply::err(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if eq(&args[2], "no") {
        if st.flags & OPTOUT == 0 {
            return Reply::err(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return commands::SYNTAX_ERR;
    }
    t.set_caching();
    Reply::OK
}

/// The connection's tracking state, if on.
fn state(conn: &Conn) -> Option<tracking::State> {
    conn.tracking
        .as_ref()
        .map(|t| t.state().clone())
        .filter(|s| s.on)
}

/// CLIENT GETREDIR: the connection invalidations go to (0: this one), -1 when not
/// tracking.
pub fn client_getredir(conn: &Conn) -> Reply {
    Reply::Int(state(conn).map_or(-1, |s| s.redirect as i64))
}

/// CLIENT TRACKINGINFO: `flags` (off, or on and its options: bcast, optin, optout,
/// caching-yes, caching-no, noloop, broken_redirect), `redirect` (-1 when off) and
/// `prefixes`.
pub fn client_trackinginfo(conn: &Conn) -> Reply {
    let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
    let st = state(conn);
    let caching = conn.tracking.as_ref().is_some_and(|t| t.caching());
    let mut names = Vec::new();
    match &st {
        None => names.push("off"),
        Some(s) => {
            names.push("on");
            for (bit, name) in [(BCAST, "bcast"), (OPTIN, "optin"), (OPTOUT, "optout")] {
                if s.flags & bit != 0 {
                    names.push(name);
                }
            }
            if caching && s.flags & OPTIN != 0 {
                names.push("caching-yes");
            }
            if caching && s.flags & OPTOUT != 0 {
                names.push("caching-no");
            }
            if s.flags & NOLOOP != 0 {
                names.push("noloop");
            }
            if s.broken {
                names.push("broken_redirect");
            }
        }
    }
    Reply::Map(vec![
        (
            bulk("flags"),
            Reply::Set(names.into_iter().map(bulk).collect()),
        ),
        (
            bulk("redirect"),
            Reply::Int(st.as_ref().map_or(-1, |s| s.redirect as i64)),
        ),
        (
            bulk("prefixes"),
            Reply::Array(
                st.map(|s| s.prefixes)
                    .unwrap_or_default()
                    .into_iter()
                    .map(Reply::Bulk)
                    .collect(),
            ),
        ),
    ])
}

/// Before a command of a tracking connection runs (not one queued in MULTI):
/// remembers its keys if it reads, and ends CLIENT CACHING's effect after the command
/// it was for.
pub fn before_command(t: &Tracking, cmd: &Command, args: &[&[u8]], in_exec: bool) {
    // Any CLIENT subcommand keeps CLIENT CACHING's effect for the next command.
    let client_cmd = cmd.name == "client";
    let readonly = cmd.flags & flags::READONLY != 0;
    t.before_command(cmd.name, client_cmd, readonly, in_exec, || {
        super::command::key_indexes(cmd, args)
            .into_iter()
            .map(|i| args[i])
    });
}

/// The connection's own outbox if it tracks keys without REDIRECT (its invalidations
/// are pushed on it): a blocked command holds it from the moment it is served until
/// its reply is sent (`server/blocking.rs`).
pub fn own_outbox(conn: &Conn) -> Option<Arc<Subscriber>> {
    state(conn).filter(|s| s.redirect == 0)?;
    conn.client.pubsub.get().cloned()
}

/// The connection ends (or RESET): tracking off.
pub fn end(conn: &mut Conn) {
    if let Some(t) = &conn.tracking {
        t.off();
    }
}

/// Shards as a connection reaches them: every closure run on a shard knows the
/// connection as the one making its changes (NOLOOP).
pub struct AsWriter<'a, S: ShardSet> {
    /// The shards.
    pub inner: &'a S,
    /// The connection's id.
    pub id: u64,
}

struct HeldAs<'a> {
    inner: &'a dyn Held,
    id: u64,
}

impl Held for HeldAs<'_> {
    fn with(&self, s: usize, f: &mut (dyn FnMut(&mut Shard) + Send)) {
        let id = self.id;
        self.inner
            .with(s, &mut |sh| tracking::as_writer(id, || f(sh)));
    }
}

impl<S: ShardSet> ShardSet for AsWriter<'_, S> {
    fn count(&self) -> usize {
        self.inner.count()
    }

    fn with<R: Send>(&self, s: usize, f: impl FnOnce(&mut Shard) -> R + Send) -> R {
        let id = self.id;
        self.inner
            .with(s, move |sh| tracking::as_writer(id, || f(sh)))
    }

    fn atomically<R>(&self, shards: &[usize], f: impl FnOnce(&dyn Held) -> R) -> R {
        let id = self.id;
        self.inner
            .atomically(shards, |h| f(&HeldAs { inner: h, id }))
    }

    fn room(&self) -> u64 {
        self.inner.room()
    }

    fn refuses_writes(&self, s: usize) -> Option<Reply> {
        self.inner.refuses_writes(s)
    }

    fn make_room(&self, s: usize) -> bool {
        self.inner.make_room(s)
    }
}
