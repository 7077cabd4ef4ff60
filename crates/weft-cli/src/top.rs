//! `weft top PID`: a refreshing view of one process's fibers, like top(1).
//!
//! Every `--interval` seconds it reads the registry, computes per-fiber rates from the
//! previous sample (activations per second, run time as a percentage of wall time) and
//! redraws: a header (pid, command, fibers, switches per second over all fibers) and
//! the fibers sorted by run-time rate or activation rate (ties by the totals).
//!
//! A rate needs two samples: the first frame shows `-` for every rate (and for a fiber
//! the previous sample could not account for), never a made-up 0.
//!
//! Interactive, when stdout is a terminal: the screen is cleared with ANSI escapes at
//! each refresh and the view is cut to the terminal's height; `q` or Ctrl-C quits.
//! When stdin is a terminal it is put in non-canonical, no-echo mode (signals still
//! work) and restored on exit, also on Ctrl-C, which is caught rather than left to kill
//! the process.
//!
//! When stdout is not a terminal (`weft top PID > file`), frames are printed one after
//! the other, each starting with its header line and followed by a blank line, with no
//! escape codes and every fiber listed; it runs until interrupted, as on a terminal.
//!
//! `--iterations N`: batch mode (like `top -b -n N`): N frames printed that way, the
//! terminal left alone.

use std::collections::HashMap;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_fiber::introspect::{self as reg, FiberInfo, IntrospectError};
use weft_fiber::FiberState;

use crate::introspect::{self as intro, Details};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// Run time per second (then total run time).
    Runtime,
    /// Activations per second (then total activations).
    Activations,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The process to watch.
    pub pid: i32,
    /// What to sort the fibers by.
    #[arg(long, value_enum, default_value = "runtime")]
    pub sort: SortKey,
    /// Seconds between refreshes (fractions allowed).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes and print them one after the other, without
    /// clearing the screen (batch mode, for scripts and tests).
    #[arg(long)]
    pub iterations: Option<u64>,
}

/// One fiber's row: the sample and its rates over the last interval (`None` until
/// they are known: a previous sample that accounts for the fiber is needed).
struct Row<'a> {
    f: &'a FiberInfo,
    /// Activations per second since the previous sample.
    act_rate: Option<f64>,
    /// Run time over the interval as a percentage of wall time.
    cpu: Option<f64>,
}

/// The previous sample: activations and run time by fiber id, when it was taken, and
/// whether it saw every fiber (no slot was unreadable).
struct Prev {
    totals: Totals,
    taken: Instant,
    complete: bool,
}

/// A fiber's rates since `prev`, taken `dt` seconds earlier. A fiber missing from a
/// complete previous sample was created since, from zero; one missing from an
/// incomplete sample has no known rate.
fn rates(f: &FiberInfo, prev: &Prev, dt: f64) -> Option<(f64, f64)> {
    if dt <= 0.0 {
        return None;
    }
    let (a0, r0) = match prev.totals.get(&f.id) {
        Some(&t) => t,
        None if prev.complete => (0, Duration::ZERO),
        None => return None,
    };
    Some((
        f.activations.saturating_sub(a0) as f64 / dt,
        f.run_time.saturating_sub(r0).as_secs_f64() / dt * 100.0,
    ))
}

/// A rate in a column: `-` until known.
fn rate_text(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

/// Activations and run time by fiber id.
type Totals = HashMap<u64, (u64, Duration)>;

static QUIT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    QUIT.store(true, Ordering::Relaxed);
}

/// Puts the terminal back as it was and shows the cursor again.
struct TermGuard {
    saved: Option<libc::termios>,
}

impl TermGuard {
    fn new(interactive: bool) -> TermGuard {
        if !interactive || !io::stdin().is_terminal() {
            return TermGuard { saved: None };
        }
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return TermGuard { saved: None };
            }
            let saved = t;
            t.c_lflag &= !(libc::ICANON | libc::ECHO);
            t.c_cc[libc::VMIN] = 1;
            t.c_cc[libc::VTIME] = 0;
            libc::tcsetattr(0, libc::TCSANOW, &t);
            TermGuard { saved: Some(saved) }
        }
    }
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        if let Some(t) = self.saved {
            // SAFETY: restores the attributes read in new().
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, &t);
            }
        }
    }
}

fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic. No SA_RESTART, so poll() returns
    // EINTR and the loop sees QUIT at once.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
}

/// Waits up to `d`, returning early with true if the user asked to quit.
fn wait(d: Duration, read_keys: bool) -> bool {
    let deadline = Instant::now() + d;
    loop {
        if QUIT.load(Ordering::Relaxed) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let nfds = u64::from(read_keys);
        // SAFETY: one pollfd (or none) that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, nfds as libc::nfds_t, ms) };
        if n > 0 && pfd.revents != 0 {
            let mut b = [0u8; 64];
            // SAFETY: reads into a local buffer of that size.
            let r = unsafe { libc::read(0, b.as_mut_ptr().cast(), b.len()) };
            if r <= 0 {
                return true; // the terminal went away
            }
            if b[..r as usize]
                .iter()
                .any(|&c| c == b'q' || c == b'Q' || c == 3)
            {
                return true;
            }
        }
    }
}

fn terminal_rows() -> Option<usize> {
    // SAFETY: TIOCGWINSZ fills a winsize we own.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        (libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_row > 0)
            .then_some(ws.ws_row as usize)
    }
}

pub fn run(args: Args) -> Result<(), String> {
    if !(args.interval > 0.0 && args.interval.is_finite()) {
        return Err(format!(
            "--interval must be a positive number of seconds, not {}",
            args.interval
        ));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let batch = args.iterations.is_some();
    let pid = args.pid;

    // The first sample, before touching the terminal: a bad pid fails plainly.
    let mut snap = reg::read(pid).map_err(|e| crate::ps::explain(&e))?;
    let mut taken = Instant::now();
    let command = intro::command(pid).unwrap_or_default();
    let mut details = Details::symbols_only(pid);

    install_signal_handlers();
    let interactive = !batch;
    // Redrawn in place only on a terminal; anything else gets plain frames.
    let redraw = interactive && io::stdout().is_terminal();
    let read_keys = interactive && io::stdin().is_terminal();
    let _term = TermGuard::new(interactive);
    let mut out = io::stdout().lock();

    let mut prev: Option<Prev> = None;
    let mut shown = 0u64;
    loop {
        let dt = prev
            .as_ref()
            .map(|p| taken.duration_since(p.taken).as_secs_f64());
        let mut rows: Vec<Row<'_>> = snap
            .fibers
            .iter()
            .map(|f| {
                let r = prev.as_ref().zip(dt).and_then(|(p, dt)| rates(f, p, dt));
                Row {
                    f,
                    act_rate: r.map(|r| r.0),
                    cpu: r.map(|r| r.1),
                }
            })
            .collect();
        // Unknown rates sort after known ones.
        let key = |v: Option<f64>| v.unwrap_or(f64::NEG_INFINITY);
        match args.sort {
            SortKey::Runtime => rows.sort_by(|a, b| {
                key(b.cpu)
                    .total_cmp(&key(a.cpu))
                    .then(b.f.run_time.cmp(&a.f.run_time))
                    .then(a.f.id.cmp(&b.f.id))
            }),
            SortKey::Activations => rows.sort_by(|a, b| {
                key(b.act_rate)
                    .total_cmp(&key(a.act_rate))
                    .then(b.f.activations.cmp(&a.f.activations))
                    .then(a.f.id.cmp(&b.f.id))
            }),
        }
        let limit = if redraw {
            terminal_rows().map_or(usize::MAX, |r| r.saturating_sub(5).max(1))
        } else {
            usize::MAX
        };
        let text = render(pid, &command, &rows, dt, args.sort, limit, &mut details);
        let written = if redraw {
            // Home, clear the screen, draw.
            write!(out, "\x1b[H\x1b[2J{text}")
        } else {
            writeln!(out, "{text}")
        };
        if let Err(e) = written.and_then(|()| out.flush()) {
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(format!("writing the output: {e}"));
        }
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        if wait(interval, read_keys) {
            if redraw {
                let _ = writeln!(out);
            }
            return Ok(());
        }
        prev = Some(Prev {
            totals: snap
                .fibers
                .iter()
                .map(|f| (f.id, (f.activations, f.run_time)))
                .collect(),
            taken,
            complete: snap.unreadable == 0,
        });
        snap = match reg::read(pid) {
            Ok(s) => s,
            Err(
                IntrospectError::NoSuchProcess { .. }
                | IntrospectError::Stale { .. }
                | IntrospectError::NotUsingWeft { .. },
            ) => {
                drop(_term);
                let _ = writeln!(out, "\nweft top: process {pid} has exited");
                return Ok(());
            }
            Err(e) => return Err(crate::ps::explain(&e)),
        };
        taken = Instant::now();
    }
}

fn render(
    pid: i32,
    command: &str,
    rows: &[Row<'_>],
    dt: Option<f64>,
    sort: SortKey,
    limit: usize,
    details: &mut Details,
) -> String {
    use std::fmt::Write as _;
    let running = rows
        .iter()
        .filter(|r| r.f.state == FiberState::Running)
        .count();
    let finished = rows
        .iter()
        .filter(|r| r.f.state == FiberState::Finished)
        .count();
    // Over the fibers whose rate is known (all but those the previous sample missed).
    let switches: f64 = rows.iter().filter_map(|r| r.act_rate).sum();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "weft top - pid {pid} ({command}) - {} fibers: {running} running, {} ready, \
         {finished} finished",
        rows.len(),
        rows.len() - running - finished,
    );
    let _ = writeln!(
        s,
        "switches/s: {}   sorted by {}",
        if dt.is_some() {
            format!("{switches:.0}")
        } else {
            "-".to_string()
        },
        match sort {
            SortKey::Runtime => "run time",
            SortKey::Activations => "activations",
        }
    );
    let _ = writeln!(s);
    let shown = &rows[..rows.len().min(limit)];
    // NAME and SPAWNED-AT as wide as the widest shown.
    let sites: Vec<String> = shown.iter().map(|r| intro::site_label(r.f)).collect();
    let name_w = shown
        .iter()
        .map(|r| intro::name_label(r.f).chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    let site_w = sites
        .iter()
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(0)
        .max(10);
    let _ = writeln!(
        s,
        "{:>8}  {:<8}  {:>8}  {:>12}  {:>10}  {:>12}  {:>6}  {:>8}  {:<name_w$}  {:<site_w$}  ENTRY",
        "ID",
        "STATE",
        "ON",
        "ACTIVATIONS",
        "ACT/S",
        "RUN-TIME",
        "%TIME",
        "FAILED",
        "NAME",
        "SPAWNED-AT"
    );
    for (r, site) in shown.iter().zip(&sites) {
        let f = r.f;
        let _ = writeln!(
            s,
            "{:>8}  {:<8}  {:>8}  {:>12}  {:>10}  {:>12}  {:>6}  {:>8}  {:<name_w$}  {:<site_w$}  {}",
            f.id,
            intro::state_label(f),
            f.running_on
                .map_or_else(|| "-".to_string(), |t| t.to_string()),
            f.activations,
            rate_text(r.act_rate, 0),
            intro::human_duration(f.run_time),
            rate_text(r.cpu, 1),
            f.failed_activations,
            intro::name_label(f),
            site,
            details.entry_label(f),
        );
    }
    if rows.len() > limit {
        let _ = writeln!(s, "... {} more", rows.len() - limit);
    }
    s
}
