//! `weft ps [PID] [--json]`: the processes using weft, or the fibers of one of them.
//!
//! Without a PID: one row per process that has a fiber registry (pid, user, fibers,
//! command). Listing changes nothing: registries left behind by processes that died are
//! counted in one line on stderr. `--prune` removes those this user may remove (a
//! starting weft process also removes its own user's).
//!
//! With a PID: one row per fiber: whether it runs and on which thread, the thread that
//! created it, its activations, failed activations and run time, its stack size and
//! stack high-water mark, its name and spawn site (from the registry's label), and its
//! entry: the function it runs (a Rust closure's type name) or the entry point resolved
//! to a symbol. The registry is read once, the target's maps and smaps once, and each
//! distinct entry address is resolved once, so 100,000 fibers take well under a second.
//!
//! A process linked with the system-call layer (weft-hook) also has counters of the C
//! library calls its green threads made: the table of its fibers is followed by them,
//! and `--calls` shows them alone (see `hookcalls.rs`).
//!
//! `--json`: one JSON object per line (per process, per fiber, or with `--calls` per
//! call) and nothing else on stdout. A fiber's object has `"inconsistent": true` when
//! its record could not be copied as one (the table's `?` after its state; see
//! `FiberInfo::consistent`), else `false`.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};

use weft_fiber::introspect::{self as reg, FiberInfo, IntrospectError};

use crate::hookcalls;
use crate::introspect::{self as intro, Details};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A process using weft: list its fibers. Without it, list the processes using weft.
    pub pid: Option<i32>,
    /// One JSON object per line on stdout (per fiber, or per process).
    #[arg(long)]
    pub json: bool,
    /// Remove the registries left behind by processes that died (those this user may
    /// remove), then list.
    #[arg(long, conflicts_with = "pid")]
    pub prune: bool,
    /// With a PID: only the C library calls its green threads made, per call (the
    /// counters of the system-call layer, weft-hook, for a process linked with it).
    #[arg(long, requires = "pid")]
    pub calls: bool,
}

pub fn run(args: Args) -> Result<(), String> {
    let out = io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let r = match args.pid {
        Some(pid) if args.calls => calls(pid, args.json, &mut out),
        Some(pid) => fibers(pid, args.json, &mut out),
        None => processes(args.json, args.prune, &mut out),
    };
    let r = r.and_then(|()| out.flush().map_err(Error::Io));
    match r {
        Ok(()) => Ok(()),
        // `weft ps | head`: the reader left; not an error.
        Err(Error::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(Error::Io(e)) => Err(format!("writing the output: {e}")),
        Err(Error::Msg(m)) => Err(m),
    }
}

/// Why `ps` failed: a message for the user, or an error writing stdout.
pub(crate) enum Error {
    Msg(String),
    Io(io::Error),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// The message for a registry that cannot be read.
/// For a registry another user owns, it also says whose it is.
pub(crate) fn explain(e: &IntrospectError) -> String {
    use std::os::unix::fs::MetadataExt;
    match e {
        IntrospectError::PermissionDenied { path, .. } => match std::fs::metadata(path) {
            Ok(m) => format!(
                "{e} (the registry belongs to user {}, uid {})",
                intro::user_name(m.uid()),
                m.uid()
            ),
            Err(_) => e.to_string(),
        },
        _ => e.to_string(),
    }
}

// ---- weft ps -------------------------------------------------------------------

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

struct ProcRow {
    pid: i32,
    uid: u32,
    user: String,
    command: String,
    /// None when the registry cannot be read (another user's).
    fibers: Option<usize>,
    running: Option<usize>,
}

fn processes(json: bool, prune: bool, out: &mut impl Write) -> Result<(), Error> {
    let dir = reg::registry_dir();
    let list = || {
        reg::list().map_err(|e| {
            Error::Msg(format!(
                "cannot list the registries in {}: {e}",
                dir.display()
            ))
        })
    };
    let mut entries = list()?;
    if prune {
        let removed = reg::clean_stale().map_err(|e| {
            Error::Msg(format!(
                "cannot prune the registries in {}: {e}",
                dir.display()
            ))
        })?;
        eprintln!(
            "weft ps: removed {} stale {}",
            removed.len(),
            plural(removed.len(), "registry", "registries")
        );
        entries = list()?;
    }
    // Stale registries: one line, whatever their number.
    let stale: Vec<&reg::ProcessEntry> = entries.iter().filter(|e| !e.alive).collect();
    if !stale.is_empty() {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let mine = stale.iter().filter(|e| e.uid == me).count();
        let hint = if prune || mine == 0 {
            "other users' (their owners or root can remove them with weft ps --prune)"
        } else {
            "weft ps --prune removes them"
        };
        eprintln!(
            "weft ps: {} stale {} in {} (left by processes that died): {hint}",
            stale.len(),
            plural(stale.len(), "registry", "registries"),
            dir.display()
        );
    }

    let mut rows: Vec<ProcRow> = Vec::new();
    for e in entries.iter().filter(|e| e.alive) {
        let (fibers, running) = match reg::read(e.pid) {
            Ok(s) => (
                Some(s.fibers.len()),
                Some(
                    s.fibers
                        .iter()
                        .filter(|f| f.state == weft_fiber::FiberState::Running)
                        .count(),
                ),
            ),
            Err(IntrospectError::PermissionDenied { .. }) => (None, None),
            // It exited (or died) since list(): not a weft process any more.
            Err(
                IntrospectError::NoSuchProcess { .. }
                | IntrospectError::Stale { .. }
                | IntrospectError::NotUsingWeft { .. },
            ) => continue,
            Err(err) => {
                eprintln!("weft ps: pid {}: {}", e.pid, explain(&err));
                (None, None)
            }
        };
        rows.push(ProcRow {
            pid: e.pid,
            uid: e.uid,
            user: intro::user_name(e.uid),
            command: intro::command(e.pid).unwrap_or_default(),
            fibers,
            running,
        });
    }
    rows.sort_by_key(|r| r.pid);

    if json {
        for r in &rows {
            let v = serde_json::json!({
                "pid": r.pid,
                "uid": r.uid,
                "user": r.user,
                "command": r.command,
                "fibers": r.fibers,
                "running": r.running,
            });
            writeln!(out, "{v}")?;
        }
        return Ok(());
    }
    if rows.is_empty() {
        eprintln!(
            "weft ps: no process using weft (no registry in {})",
            dir.display()
        );
        return Ok(());
    }
    let user_w = rows.iter().map(|r| r.user.len()).max().unwrap_or(0).max(4);
    writeln!(
        out,
        "{:>7}  {:<user_w$}  {:>7}  {:>7}  COMMAND",
        "PID", "USER", "FIBERS", "RUNNING"
    )?;
    let unreadable = rows.iter().any(|r| r.fibers.is_none());
    for r in &rows {
        let n = |v: Option<usize>| v.map_or_else(|| "?".to_string(), |n| n.to_string());
        writeln!(
            out,
            "{:>7}  {:<user_w$}  {:>7}  {:>7}  {}",
            r.pid,
            r.user,
            n(r.fibers),
            n(r.running),
            r.command
        )?;
    }
    if unreadable {
        writeln!(
            out,
            "(?: the registry belongs to another user; run weft ps as that user or as root)"
        )?;
    }
    Ok(())
}

// ---- weft ps PID ---------------------------------------------------------------

fn fibers(pid: i32, json: bool, out: &mut impl Write) -> Result<(), Error> {
    let mut snap = reg::read(pid).map_err(|e| Error::Msg(explain(&e)))?;
    snap.fibers.sort_by_key(|f| f.id);
    let mut details = Details::gather(pid);
    if json {
        write_json(pid, &snap.fibers, &mut details, out)
    } else {
        write_table(&snap.fibers, &mut details, out)?;
        if let Some(s) = hookcalls::read(pid) {
            writeln!(out)?;
            hookcalls::write_table(&s, out)?;
        }
        Ok(())
    }
}

/// `weft ps PID --calls`.
fn calls(pid: i32, json: bool, out: &mut impl Write) -> Result<(), Error> {
    let s = hookcalls::read(pid).ok_or_else(|| {
        Error::Msg(format!(
            "process {pid} has no system-call counters: it does not link weft-hook, or none \
             of its green threads has made an overridden call yet"
        ))
    })?;
    if json {
        hookcalls::write_json(pid, &s, out)?;
    } else {
        hookcalls::write_table(&s, out)?;
    }
    Ok(())
}

fn write_json(
    pid: i32,
    fibers: &[FiberInfo],
    details: &mut Details,
    out: &mut impl Write,
) -> Result<(), Error> {
    // The entry part of a line, once per distinct entry address.
    let mut entry_json: HashMap<(u64, bool), String> = HashMap::new();
    for f in fibers {
        let entry = entry_json
            .entry((f.entry, f.is_thread_fiber))
            .or_insert_with(|| {
                let sym = if f.is_thread_fiber {
                    None
                } else {
                    details.entry_symbol(f.entry)
                };
                let (name, object) = match &sym {
                    Some(s) => (
                        serde_json::to_string(&s.to_string()).unwrap(),
                        serde_json::to_string(&s.object.to_string_lossy()).unwrap(),
                    ),
                    None => ("null".to_string(), "null".to_string()),
                };
                format!(
                    "\"entry\":\"{:#x}\",\"entry_symbol\":{name},\"entry_object\":{object}",
                    f.entry
                )
            });
        let opt = |v: Option<u64>| v.map_or_else(|| "null".to_string(), |n| n.to_string());
        let site = f.spawned_at.as_ref();
        writeln!(
            out,
            "{{\"pid\":{pid},\"id\":{},\"state\":\"{}\",\"is_thread_fiber\":{},\
             \"running_on\":{},{entry},\"creator_tid\":{},\"last_tid\":{},\
             \"activations\":{},\"failed_activations\":{},\"run_time_ns\":{},\
             \"deactivations\":{},\"stack_base\":\"{:#x}\",\"stack_size\":{},\
             \"stack_high_water\":{},\"name\":{},\"function\":{},\"spawn_file\":{},\
             \"spawn_line\":{},\"spawn_column\":{},\"inconsistent\":{}}}",
            f.id,
            intro::state_name(f.state),
            f.is_thread_fiber,
            opt(f.running_on.map(|t| t as u64)),
            f.creator_tid,
            f.last_tid,
            f.activations,
            f.failed_activations,
            f.run_time.as_nanos(),
            f.deactivations,
            f.stack_base,
            f.stack_size,
            opt(details.stack_high_water(f)),
            serde_json::to_string(&f.name).unwrap(),
            serde_json::to_string(&f.function).unwrap(),
            serde_json::to_string(&site.map(|s| &s.file)).unwrap(),
            opt(site.map(|s| u64::from(s.line))),
            opt(site.map(|s| u64::from(s.column))),
            !f.consistent,
        )?;
    }
    Ok(())
}

fn write_table(
    fibers: &[FiberInfo],
    details: &mut Details,
    out: &mut impl Write,
) -> Result<(), Error> {
    // Column text first (entry labels once per distinct entry), then widths.
    let mut labels: HashMap<(u64, bool), String> = HashMap::new();
    let rows: Vec<[String; 13]> = fibers
        .iter()
        .map(|f| {
            let entry = labels
                .entry((f.entry, f.is_thread_fiber))
                .or_insert_with(|| details.entry_label(f))
                .clone();
            let (stack, high) = if f.is_thread_fiber {
                ("-".to_string(), "-".to_string())
            } else {
                (
                    intro::human_bytes(f.stack_size),
                    details
                        .stack_high_water(f)
                        .map_or_else(|| "?".to_string(), intro::human_bytes),
                )
            };
            [
                f.id.to_string(),
                intro::state_label(f),
                f.running_on
                    .map_or_else(|| "-".to_string(), |t| t.to_string()),
                f.creator_tid.to_string(),
                if f.last_tid == 0 {
                    "-".to_string()
                } else {
                    f.last_tid.to_string()
                },
                f.activations.to_string(),
                f.failed_activations.to_string(),
                intro::human_duration(f.run_time),
                stack,
                high,
                intro::name_label(f).to_string(),
                intro::site_label(f),
                entry,
            ]
        })
        .collect();
    const HEAD: [&str; 13] = [
        "ID",
        "STATE",
        "ON",
        "CREATOR",
        "LAST",
        "ACTIVATIONS",
        "FAILED",
        "RUN-TIME",
        "STACK",
        "HIGH-WATER",
        "NAME",
        "SPAWNED-AT",
        "ENTRY",
    ];
    let mut w = HEAD.map(str::len);
    for r in &rows {
        for (wi, c) in w.iter_mut().zip(r.iter()) {
            *wi = (*wi).max(c.chars().count());
        }
    }
    // STATE, NAME and SPAWNED-AT are text, aligned left; the numbers right; ENTRY, the
    // last column, is not padded.
    let line = |out: &mut dyn Write, c: [&str; 13]| -> io::Result<()> {
        let mut l = String::new();
        for (i, (text, width)) in c.iter().zip(w).enumerate() {
            if i + 1 == c.len() {
                l.push_str(text);
            } else if matches!(i, 1 | 10 | 11) {
                l.push_str(&format!("{text:<width$}  "));
            } else {
                l.push_str(&format!("{text:>width$}  "));
            }
        }
        writeln!(out, "{l}")
    };
    line(out, HEAD)?;
    for r in &rows {
        line(out, r.each_ref().map(String::as_str))?;
    }
    Ok(())
}
