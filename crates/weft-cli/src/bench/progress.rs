//! The progress line of `weft bench` on a terminal: which suite, which part (a table or
//! a group of rows) and which step (a cell, a batch) runs, how far the suite is, and an
//! estimate of the time left.
//!
//! It is drawn on stderr, and only when stderr is a terminal: a pipe or a file never
//! sees it, and stdout (the table, or the JSON lines with `--json`) never does.
//! Everything the suites print goes through [`suspend`] (the [`super::Reporter`] does
//! it), which takes the line off the screen while the text is written and draws it
//! again below.
//!
//! A suite declares its parts up front ([`start`]), each with an estimate of how long
//! it takes (seconds, as on a quiet machine; only their proportions matter). Entering a
//! part ([`part`]) moves the line to the part's start, whatever came before it (a part
//! skipped on this machine costs nothing); inside a part, [`step`] says which of its n
//! steps runs and moves the line in proportion. The time left is the estimate left,
//! scaled by how fast this run has gone through the estimates so far.
//!
//! There is one line at a time, in a global: the suites reach it from any function
//! without passing it down (as [`super::measure_interleaved`] does for its batches).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::fmt::Display;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

/// One part of a suite and its estimated duration.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    /// As shown on the line, e.g. "switch" or "clients table".
    pub name: &'static str,
    /// Estimated seconds.
    pub weight: f64,
}

impl Part {
    pub fn new(name: &'static str, weight: f64) -> Part {
        Part { name, weight }
    }

    /// A micro-benchmark group of `contenders` measured with
    /// [`super::measure_interleaved`]: each calibrated, then K batches each.
    pub fn micro(name: &'static str, opts: &super::Options, contenders: usize) -> Part {
        let batches = (opts.repetitions() + 2) * contenders;
        Part::new(name, batches as f64 * opts.batch_target().as_secs_f64())
    }
}

/// Units of the bar per estimated second.
const SCALE: f64 = 1000.0;

/// Where the line is: the parts, the current one, and the bar (None: no terminal).
struct Line {
    bar: ProgressBar,
    parts: Vec<Part>,
    /// The current part's index in `parts`, if it is one of them.
    current: Option<usize>,
    /// The current part's name (also for a part not declared).
    name: String,
}

static LINE: Mutex<Option<Line>> = Mutex::new(None);

fn line() -> std::sync::MutexGuard<'static, Option<Line>> {
    LINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes the line off the screen when dropped (also on an error's early return).
pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(l) = line().take() {
            l.bar.finish_and_clear();
        }
    }
}

/// Starts the line of `suite` with its `parts`, if stderr is a terminal.
pub fn start(suite: &str, parts: Vec<Part>) -> Guard {
    if std::io::stderr().is_terminal() {
        let total: f64 = parts.iter().map(|p| p.weight).sum();
        let bar = ProgressBar::with_draw_target(
            Some(units(total).max(1)),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        bar.set_style(style());
        bar.set_prefix(format!("bench {suite}"));
        bar.set_message("starting");
        // Redraws the elapsed time and the estimate during long steps.
        bar.enable_steady_tick(Duration::from_secs(1));
        *line() = Some(Line {
            bar,
            parts,
            current: None,
            name: String::new(),
        });
    }
    Guard(())
}

fn style() -> ProgressStyle {
    ProgressStyle::with_template("{prefix} [{bar:24}] {percent:>3}% {wide_msg} {left}")
        .expect("a valid template")
        .progress_chars("=> ")
        .with_key("left", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let left = time_left(s.pos(), s.len().unwrap_or(0), s.elapsed());
            let _ = write!(w, "{}", fmt_left(left));
        })
}

fn units(seconds: f64) -> u64 {
    (seconds.max(0.0) * SCALE).round() as u64
}

/// Enters the part `name`: the line moves to where that part starts.
pub fn part(name: &'static str) {
    if let Some(l) = line().as_mut() {
        l.current = l.parts.iter().position(|p| p.name == name);
        l.name = name.to_string();
        if let Some(i) = l.current {
            let start: f64 = l.parts[..i].iter().map(|p| p.weight).sum();
            l.bar.set_position(units(start));
        }
        l.bar.set_message(name.to_string());
    }
}

/// Step `done + 1` of `total` of the current part starts: `what` it is (a cell, a batch).
pub fn step(what: impl Display, done: usize, total: usize) {
    if let Some(l) = line().as_mut() {
        if let Some(i) = l.current {
            let start: f64 = l.parts[..i].iter().map(|p| p.weight).sum();
            let share = done.min(total) as f64 / total.max(1) as f64;
            l.bar.set_position(units(start + l.parts[i].weight * share));
        }
        l.bar.set_message(format!(
            "{} ({}/{}): {what}",
            l.name,
            (done + 1).min(total),
            total
        ));
    }
}

/// Runs `f` (which prints) with the line taken off the screen, then draws it again.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let bar = line().as_ref().map(|l| l.bar.clone());
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// The estimated time left: the estimate of what is left (`len - pos` units), scaled
/// by this run's own pace once it has gone through 5% of the estimates and 2 s.
fn time_left(pos: u64, len: u64, elapsed: Duration) -> Duration {
    let left = len.saturating_sub(pos) as f64;
    let secs = if pos as f64 >= 0.05 * len as f64 && elapsed >= Duration::from_secs(2) {
        elapsed.as_secs_f64() * left / pos as f64
    } else {
        left / SCALE
    };
    Duration::from_secs_f64(secs.clamp(0.0, 1e7))
}

/// "about 2m 05s left", "about 40s left", "about 1h 02m left".
fn fmt_left(d: Duration) -> String {
    let s = d.as_secs();
    let t = if s >= 3600 {
        format!("{}h {:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    };
    format!("about {t} left")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_starts_from_the_estimates_then_follows_the_run() {
        // Before 5% of the estimates: what the estimates say (len - pos units).
        assert_eq!(
            time_left(0, 100_000, Duration::from_secs(1)),
            Duration::from_secs(100)
        );
        // A run that went through a quarter of the estimates in 50 s (twice as slow as
        // estimated) has 150 s left.
        assert_eq!(
            time_left(25_000, 100_000, Duration::from_secs(50)),
            Duration::from_secs(150)
        );
        assert_eq!(
            time_left(100_000, 100_000, Duration::from_secs(9)),
            Duration::ZERO
        );
        assert_eq!(time_left(5, 0, Duration::from_secs(9)), Duration::ZERO);
    }

    #[test]
    fn left_reads_in_minutes_and_hours() {
        assert_eq!(fmt_left(Duration::from_secs(40)), "about 40s left");
        assert_eq!(fmt_left(Duration::from_secs(125)), "about 2m 05s left");
        assert_eq!(fmt_left(Duration::from_secs(3720)), "about 1h 02m left");
    }

    #[test]
    fn a_micro_part_weighs_its_batches() {
        let opts = super::super::Options {
            json: false,
            quick: true,
            parked: None,
        };
        // 3 contenders, (3 batches + calibration) each, of 5 ms.
        let p = Part::micro("switch", &opts, 3);
        assert!((p.weight - 0.075).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn without_a_line_the_calls_do_nothing_and_text_still_passes() {
        part("switch");
        step("weft", 0, 3);
        assert_eq!(suspend(|| 7), 7);
    }
}
