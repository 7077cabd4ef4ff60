//! The server's diagnostics: the slow log (SLOWLOG), latency events (LATENCY),
//! memory reports (MEMORY), LOLWUT, and the idle-client timeout (`timeout`).
//!
//! The slow log keeps the last `slowlog-max-len` commands that took at least
//! `slowlog-log-slower-than` microseconds (negative: none; 0: every command), one list
//! for the whole server behind a lock taken only when a command is slow enough. On
//! the request path a command's time is already measured for INFO's commandstats
//! ([`super::stats`]); the slow log adds one comparison of that time with a
//! threshold kept in the same units ([`MIN_TICKS`]), so it costs nothing more while
//! unused. An entry holds at most 32 arguments, each cut to 128 bytes, as Redis
//! shows them: memory stays bounded whatever clients send.
//!
//! LATENCY records the event `command` (a command that took at least
//! `latency-monitor-threshold` milliseconds; 0, the default, records nothing, so
//! LATENCY LATEST and HISTORY answer empty arrays, as Redis): per event the last 160
//! samples, one per second, as Redis.
//!
//! The idle-client timeout closes a connection that sent nothing for more than
//! `timeout` seconds (0: never), except those waiting in a blocking command, held by
//! WAIT or CLIENT PAUSE, or subscribed (Redis's rule): a thread started at the first
//! nonzero setting looks once a second.

use super::clients::Client;
use super::stats;
use super::Server;
use crate::resp::Reply;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

/// A command slower than this many [`stats::stamp`] units goes to [`note`], which
/// decides by microseconds (a lower bound of the threshold; `u64::MAX`: off).
pub static MIN_TICKS: AtomicU64 = AtomicU64::new(u64::MAX);
/// `slowlog-log-slower-than` in microseconds (negative: off).
static SLOWER_THAN: AtomicI64 = AtomicI64::new(10_000);
/// `slowlog-max-len`.
static MAX_LEN: AtomicU64 = AtomicU64::new(128);
/// `latency-monitor-threshold` in milliseconds (0: off).
static LATENCY_MS: AtomicU64 = AtomicU64::new(0);
/// `timeout` in seconds (0: never).
static TIMEOUT: AtomicU64 = AtomicU64::new(0);

/// The most arguments an entry keeps (the last one says how many more there were).
const MAX_ARGS: usize = 32;
/// The most bytes an argument keeps (the rest is said as "... (N more bytes)").
const MAX_ARG_LEN: usize = 128;
/// Samples kept per latency event.
const LATENCY_SAMPLES: usize = 160;

/// One slow command.
struct Entry {
    id: u64,
    time: u64,
    usec: u64,
    args: Vec<Vec<u8>>,
    addr: String,
    name: Vec<u8>,
}

/// The slow log: newest first, and the next entry's id.
static LOG: Mutex<(VecDeque<Entry>, u64)> = Mutex::new((VecDeque::new(), 0));

/// One latency event's samples (unix seconds, milliseconds), oldest first, and its
/// highest.
struct Event {
    samples: VecDeque<(u64, u64)>,
    max: u64,
}

static EVENTS: Mutex<Vec<(&'static str, Event)>> = Mutex::new(Vec::new());

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Recomputes [`MIN_TICKS`] from both thresholds.
fn update_min() {
    let slow = SLOWER_THAN.load(Relaxed);
    let lat = LATENCY_MS.load(Relaxed);
    let mut us = if slow >= 0 { slow as u64 } else { u64::MAX };
    if lat > 0 {
        us = us.min(lat.saturating_mul(1000));
    }
    MIN_TICKS.store(
        if us == u64::MAX {
            u64::MAX
        } else {
            // Half the measured rate: a lower bound, [`note`] decides exactly.
            (us as f64 * stats::ticks_per_us() / 2.0) as u64
        },
        Relaxed,
    );
}

/// Sets [`MIN_TICKS`] for the default thresholds (at the server's start).
pub fn init() {
    update_min();
}

/// The settings this module keeps, as CONFIG GET shows them.
pub fn settings() -> Vec<(&'static str, String)> {
    vec![
        (
            "slowlog-log-slower-than",
            SLOWER_THAN.load(Relaxed).to_string(),
        ),
        ("slowlog-max-len", MAX_LEN.load(Relaxed).to_string()),
        (
            "latency-monitor-threshold",
            LATENCY_MS.load(Relaxed).to_string(),
        ),
        ("timeout", TIMEOUT.load(Relaxed).to_string()),
    ]
}

/// CONFIG SET of one of this module's settings: `None` if `name` is not one.
pub fn set(server: &Arc<Server>, name: &str, value: &str) -> Option<Result<(), String>> {
    let parsed = |min: i64, max: i64| {
        match value.trim().parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between {min} and {max} inclusive"
        )),
        Err(_) => Err(format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"
        )),
    }
    };
    let r = match name {
        "slowlog-log-slower-than" => parsed(-1, i64::MAX).map(|n| SLOWER_THAN.store(n, Relaxed)),
        "slowlog-max-len" => parsed(0, i32::MAX as i64).map(|n| {
            MAX_LEN.store(n as u64, Relaxed);
            LOG.lock()
                .unwrap_or_else(|p| p.into_inner())
                .0
                .truncate(n as usize);
        }),
        "latency-monitor-threshold" => {
            parsed(0, i64::MAX).map(|n| LATENCY_MS.store(n as u64, Relaxed))
        }
        "timeout" => parsed(0, i32::MAX as i64).map(|n| {
            TIMEOUT.store(n as u64, Relaxed);
            if n > 0 {
                start_reaper(server);
            }
        }),
        _ => return None,
    };
    update_min();
    Some(r)
}

/// A command that took `ticks` stamp units (at least [`MIN_TICKS`]) ran for
/// `client` with `args`: logged if slow enough.
#[cold]
pub fn note<A: AsRef<[u8]>>(client: Option<&Client>, args: &[A], ticks: u64) {
    let usec = (ticks as f64 / stats::ticks_per_us()) as u64;
    let lat = LATENCY_MS.load(Relaxed);
    if lat > 0 && usec / 1000 >= lat {
        latency_add("command", usec / 1000);
    }
    let slow = SLOWER_THAN.load(Relaxed);
    if slow < 0 || usec < slow as u64 {
        return;
    }
    let Some(first) = args.first() else { return };
    let name = first.as_ref();
    // EXEC is not logged: the commands it runs are, each by itself (as Redis).
    if name.eq_ignore_ascii_case(b"exec") {
        return;
    }
    let hidden = secrets(args);
    let max = MAX_LEN.load(Relaxed) as usize;
    let mut kept: Vec<Vec<u8>> = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let a = if hidden.contains(&i) {
            &b"(redacted)"[..]
        } else {
            a.as_ref()
        };
        if i == MAX_ARGS - 1 && args.len() > MAX_ARGS {
            kept.push(format!("... ({} more arguments)", args.len() - i).into_bytes());
            break;
        }
        if a.len() > MAX_ARG_LEN {
            let mut v = a[..MAX_ARG_LEN].to_vec();
            v.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_LEN).as_bytes());
            kept.push(v);
        } else {
            kept.push(a.to_vec());
        }
    }
    let (addr, name) = client.map_or((String::new(), Vec::new()), |c| {
        (c.addr().to_string(), c.name_bytes())
    });
    let mut log = LOG.lock().unwrap_or_else(|p| p.into_inner());
    let id = log.1;
    log.1 += 1;
    log.0.push_front(Entry {
        id,
        time: now_s(),
        usec,
        args: kept,
        addr,
        name,
    });
    log.0.truncate(max);
}

/// The positions of the arguments the slow log must not show (passwords), as Redis
/// hides them: AUTH's, HELLO's after AUTH, CONFIG SET requirepass's value.
fn secrets<A: AsRef<[u8]>>(args: &[A]) -> Vec<usize> {
    let is = |i: usize, w: &str| {
        args.get(i)
            .is_some_and(|a| a.as_ref().eq_ignore_ascii_case(w.as_bytes()))
    };
    if is(0, "auth") {
        return (1..args.len()).collect();
    }
    if is(0, "hello") {
        return (2..args.len())
            .find(|&i| is(i, "auth"))
            .map_or(Vec::new(), |i| vec![i + 1, i + 2]);
    }
    if is(0, "config") && is(1, "set") {
        return (2..args.len())
            .step_by(2)
            .filter(|&i| is(i, "requirepass"))
            .map(|i| i + 1)
            .collect();
    }
    Vec::new()
}

fn latency_add(event: &'static str, ms: u64) {
    let now = now_s();
    let mut events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    let i = match events.iter().position(|(n, _)| *n == event) {
        Some(i) => i,
        None => {
            events.push((
                event,
                Event {
                    samples: VecDeque::new(),
                    max: 0,
                },
            ));
            events.len() - 1
        }
    };
    let e = &mut events[i].1;
    e.max = e.max.max(ms);
    match e.samples.back_mut() {
        // One sample a second: the highest.
        Some(last) if last.0 == now => last.1 = last.1.max(ms),
        _ => {
            e.samples.push_back((now, ms));
            if e.samples.len() > LATENCY_SAMPLES {
                e.samples.pop_front();
            }
        }
    }
}

/// A HELP reply: one simple string per line.
pub(super) fn lines(text: &[&'static str]) -> Reply {
    Reply::Array(text.iter().map(|l| Reply::Simple((*l).into())).collect())
}

/// The reply to an unknown subcommand of `args[0]`, or one with the wrong arguments.
pub(super) fn sub_error(args: &[Vec<u8>]) -> Reply {
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&args[1]),
        String::from_utf8_lossy(&args[0]).to_uppercase()
    ))
}

/// SLOWLOG GET [count] | LEN | RESET | HELP. GET answers the newest `count` entries
/// (10 without it; -1: all), each [id, unix time, microseconds, [arguments], client
/// address, client name].
pub fn slowlog(args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.len()) {
        (b"get", 2 | 3) => {
            // Read as Redis reads it (no sign, spaces or leading zeros), and anything
            // else answered with its one message.
            let count = match args.get(2) {
                None => 10,
                Some(a) => match crate::commands::parse_i64(a) {
                    Some(n) if n >= -1 => n,
                    _ => return Reply::err("ERR count should be greater than or equal to -1"),
                },
            };
            let log = LOG.lock().unwrap_or_else(|p| p.into_inner());
            let n = if count < 0 {
                log.0.len()
            } else {
                count as usize
            };
            Reply::Array(
                log.0
                    .iter()
                    .take(n)
                    .map(|e| {
                        Reply::Array(vec![
                            Reply::Int(e.id as i64),
                            Reply::Int(e.time as i64),
                            Reply::Int(e.usec as i64),
                            Reply::Array(e.args.iter().map(|a| Reply::Bulk(a.clone())).collect()),
                            Reply::Bulk(e.addr.clone().into_bytes()),
                            Reply::Bulk(e.name.clone()),
                        ])
                    })
                    .collect(),
            )
        }
        (b"len", 2) => Reply::Int(LOG.lock().unwrap_or_else(|p| p.into_inner()).0.len() as i64),
        (b"reset", 2) => {
            LOG.lock().unwrap_or_else(|p| p.into_inner()).0.clear();
            Reply::OK
        }
        (b"help", 2) => lines(&[
            "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET [<count>]",
            "    The newest <count> entries of the slow log (10 without it; -1: all).",
            "    Each: id, unix time, microseconds taken, arguments, client address,",
            "    client name.",
            "LEN",
            "    How many entries the slow log holds.",
            "RESET",
            "    Empties the slow log.",
            "HELP",
            "    This text.",
        ]),
        _ => sub_error(args),
    }
}

/// LATENCY LATEST | HISTORY event | RESET [event ...] | DOCTOR | HELP.
pub fn latency(args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    let mut events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    match (sub.as_slice(), args.len()) {
        (b"latest", 2) => Reply::Array(
            events
                .iter()
                .filter_map(|(name, e)| {
                    let last = e.samples.back()?;
                    Some(Reply::Array(vec![
                        Reply::Bulk(name.as_bytes().to_vec()),
                        Reply::Int(last.0 as i64),
                        Reply::Int(last.1 as i64),
                        Reply::Int(e.max as i64),
                    ]))
                })
                .collect(),
        ),
        (b"history", 3) => Reply::Array(
            events
                .iter()
                .find(|(name, _)| name.as_bytes().eq_ignore_ascii_case(&args[2]))
                .map_or(Vec::new(), |(_, e)| {
                    e.samples
                        .iter()
                        .map(|&(t, ms)| {
                            Reply::Array(vec![Reply::Int(t as i64), Reply::Int(ms as i64)])
                        })
                        .collect()
                }),
        ),
        (b"reset", _) => {
            let before = events.len();
            if args.len() == 2 {
                events.clear();
            } else {
                events.retain(|(name, _)| {
                    !args[2..]
                        .iter()
                        .any(|a| name.as_bytes().eq_ignore_ascii_case(a))
                });
            }
            Reply::Int((before - events.len()) as i64)
        }
        (b"doctor", 2) => {
            let mut text = String::new();
            if LATENCY_MS.load(Relaxed) == 0 {
                text.push_str(
                    "Latency monitoring is off (latency-monitor-threshold is 0): CONFIG SET \
                     latency-monitor-threshold <milliseconds> turns it on.\n",
                );
            } else if events.is_empty() {
                text.push_str("No latency spike was recorded since the server started.\n");
            } else {
                for (name, e) in events.iter() {
                    let avg =
                        e.samples.iter().map(|s| s.1).sum::<u64>() / e.samples.len().max(1) as u64;
                    text.push_str(&format!(
                        "{name}: {} latency spikes (average {avg}ms, worst {}ms): commands took longer than latency-monitor-threshold. Look at SLOWLOG GET for which.\n",
                        e.samples.len(),
                        e.max
                    ));
                }
            }
            Reply::Verbatim("txt", text.into_bytes())
        }
        (b"help", 2) => lines(&[
            "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "DOCTOR",
            "    A report on the latency events recorded.",
            "LATEST",
            "    The latest sample of each event: name, unix time, milliseconds, highest.",
            "HISTORY <event>",
            "    The samples of <event> (one a second, the last 160): unix time,",
            "    milliseconds.",
            "RESET [<event> ...]",
            "    Forgets the samples of the events named (of all without a name).",
            "HELP",
            "    This text.",
        ]),
        _ => sub_error(args),
    }
}

/// LOLWUT [VERSION v] [...]: a small picture, and the version line.
pub fn lolwut(args: &[Vec<u8>]) -> Reply {
    let mut i = 1;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"version") && i + 1 < args.len() {
            if std::str::from_utf8(&args[i + 1])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .is_none()
            {
                return Reply::err("ERR value is not an integer or out of range");
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    // A weave: warp threads crossing weft threads.
    let mut text = String::new();
    for row in 0..8 {
        for col in 0..32 {
            text.push(if (row + col / 2) % 2 == 0 {
                '\u{2588}'
            } else {
                '\u{2591}'
            });
        }
        text.push('\n');
    }
    text.push_str(&format!(
        "\nweft-kv, the key-value store of weft. Redis ver. {}\n",
        super::admin::REDIS_VERSION
    ));
    Reply::Verbatim("txt", text.into_bytes())
}

/// Starts, once, the thread that closes idle clients.
fn start_reaper(server: &Arc<Server>) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let weak: Weak<Server> = Arc::downgrade(server);
    STARTED.call_once(move || {
        let _ = std::thread::Builder::new()
            .name("kv-idle-timeout".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let Some(server) = weak.upgrade() else { return };
                let secs = TIMEOUT.load(Relaxed);
                if secs > 0 {
                    server.registry.close_idle(secs);
                }
            });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    /// Latency samples: one a second (the highest), LATEST shows the last and the
    /// highest, HISTORY each sample, RESET forgets and counts the events it forgot.
    #[test]
    fn latency_events_keep_their_samples_and_highest() {
        latency_add("command", 5);
        latency_add("command", 9);
        latency_add("command", 7);
        let Reply::Array(latest) = latency(&args(&["LATENCY", "LATEST"])) else {
            panic!()
        };
        assert_eq!(latest.len(), 1);
        let Reply::Array(ev) = &latest[0] else {
            panic!()
        };
        assert_eq!(ev[0], Reply::Bulk(b"command".to_vec()));
        assert_eq!(ev[3], Reply::Int(9));
        let Reply::Array(hist) = latency(&args(&["LATENCY", "HISTORY", "COMMAND"])) else {
            panic!()
        };
        // Three samples within at most three seconds.
        assert!((1..=3).contains(&hist.len()), "{hist:?}");
        assert_eq!(
            latency(&args(&["LATENCY", "HISTORY", "other"])),
            Reply::Array(vec![])
        );
        assert_eq!(
            latency(&args(&["LATENCY", "RESET", "other"])),
            Reply::Int(0)
        );
        assert_eq!(latency(&args(&["LATENCY", "RESET"])), Reply::Int(1));
        assert_eq!(latency(&args(&["LATENCY", "LATEST"])), Reply::Array(vec![]));
    }
}
