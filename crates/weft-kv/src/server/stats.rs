//! What INFO's commandstats, errorstats and stats sections count: per command (and
//! subcommand) its calls, the microseconds they took, the calls refused before they ran
//! and those that answered an error; per error word (`ERR`, `WRONGPASS`, ...) the error
//! replies; the bytes read and written.
//!
//! The request path only adds to counters of its own worker (each worker has its own
//! set, on its own cache lines, written by that worker alone: plain loads and stores,
//! no locked instruction), so counting takes no lock and no cache line moves between
//! workers; INFO adds the sets up. A command's time is measured with the processor's
//! time-stamp counter on x86-64 (a clock read costs several times more), converted to
//! microseconds when INFO shows it. The error counts, kept by the error's first word,
//! take a per-worker lock, only when an error is answered.

use crate::commands;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// When the first [`stamp`] was taken, by the clock and by the stamps.
static ORIGIN: OnceLock<(Instant, u64)> = OnceLock::new();

/// A point in time, cheap to take: the time-stamp counter on x86-64, nanoseconds of
/// the monotonic clock elsewhere. Only differences of stamps mean something; see
/// [`ticks_per_us`].
#[inline]
pub fn stamp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions: it reads the time-stamp counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        ORIGIN
            .get_or_init(|| (Instant::now(), 0))
            .0
            .elapsed()
            .as_nanos() as u64
    }
}

/// How many stamp units make a microsecond, measured over the time since the first
/// call (the counter runs at a constant rate on the processors Linux uses it on).
pub fn ticks_per_us() -> f64 {
    let (t0, s0) = *ORIGIN.get_or_init(|| (Instant::now(), stamp()));
    let us = t0.elapsed().as_secs_f64() * 1e6;
    if cfg!(not(target_arch = "x86_64")) || us < 1000.0 {
        // Nanoseconds; or too soon to tell (the counter ticks about once a nanosecond
        // or faster).
        return 1000.0;
    }
    (stamp().wrapping_sub(s0) as f64 / us).max(1.0)
}

/// At most this many distinct error words are counted (as Redis): errors are answered
/// from a fixed set of texts, but a limit keeps the map small whatever happens.
const MAX_ERROR_WORDS: usize = 128;

/// One worker's counters.
#[repr(align(128))]
struct Part {
    /// Per statistics id: calls, time (in [`stamp`] units), refused calls, calls
    /// answering an error.
    calls: Box<[AtomicU64]>,
    ticks: Box<[AtomicU64]>,
    rejected: Box<[AtomicU64]>,
    failed: Box<[AtomicU64]>,
    /// Bytes read from and written to clients; reads and writes made.
    net_in: AtomicU64,
    net_out: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    /// Error replies by their first word.
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Part {
    fn new(ids: usize) -> Part {
        let zeros = || (0..ids).map(|_| AtomicU64::new(0)).collect();
        Part {
            calls: zeros(),
            ticks: zeros(),
            rejected: zeros(),
            failed: zeros(),
            net_in: AtomicU64::new(0),
            net_out: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
        }
    }
}

/// One command's totals (INFO commandstats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandTotals {
    /// Calls that ran.
    pub calls: u64,
    /// Microseconds they took.
    pub usec: u64,
    /// Calls refused before running (arity, authentication, memory, a log that
    /// cannot be written).
    pub rejected: u64,
    /// Calls that ran and answered an error.
    pub failed: u64,
}

/// The server's counters: one set per worker, and one for threads outside the workers.
pub struct Stats {
    parts: Box<[Part]>,
}

impl Stats {
    /// Counters for `workers` workers.
    pub fn new(workers: usize) -> Stats {
        ORIGIN.get_or_init(|| (Instant::now(), stamp()));
        super::slowlog::init();
        let ids = commands::stat_ids();
        Stats {
            parts: (0..=workers).map(|_| Part::new(ids)).collect(),
        }
    }

    /// The calling worker's counters, and whether only this thread writes them (a
    /// worker's green threads run one at a time, and those of the server are not
    /// preempted; threads outside the workers share the last set).
    #[inline]
    fn part(&self) -> (&Part, bool) {
        let last = self.parts.len() - 1;
        match weft_runtime::current_worker() {
            Some(w) if w < last => (&self.parts[w], true),
            _ => (&self.parts[last], false),
        }
    }

    /// Adds `v` to a counter of a part written by this thread alone (`own`: a plain
    /// load and store) or shared.
    #[inline]
    fn add(c: &AtomicU64, v: u64, own: bool) {
        if own {
            c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
        } else {
            c.fetch_add(v, Relaxed);
        }
    }

    /// A call of the command numbered `id`, which started at [`stamp`] `start`, has
    /// run, and answered an error if `failed`; returns the stamp units it took.
    #[inline]
    pub fn call(&self, id: usize, start: u64, failed: bool) -> u64 {
        let took = stamp().saturating_sub(start);
        let (p, own) = self.part();
        Self::add(&p.calls[id], 1, own);
        Self::add(&p.ticks[id], took, own);
        if failed {
            Self::add(&p.failed[id], 1, own);
        }
        took
    }

    /// A call of the command numbered `id` was refused before it ran.
    pub fn reject(&self, id: usize) {
        let (p, own) = self.part();
        Self::add(&p.rejected[id], 1, own);
    }

    /// An error reply was answered (counted by its first word).
    pub fn error(&self, text: &str) {
        let word = text.split(' ').next().unwrap_or("");
        let mut map = self
            .part()
            .0
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(word) {
            *n += 1;
        } else if map.len() < MAX_ERROR_WORDS {
            map.insert(word.to_string(), 1);
        }
    }

    /// `n` bytes were read from a client.
    #[inline]
    pub fn read(&self, n: usize) {
        let (p, own) = self.part();
        Self::add(&p.net_in, n as u64, own);
        Self::add(&p.reads, 1, own);
    }

    /// `n` bytes were written to a client.
    #[inline]
    pub fn wrote(&self, n: usize) {
        let (p, own) = self.part();
        Self::add(&p.net_out, n as u64, own);
        Self::add(&p.writes, 1, own);
    }

    /// Every command's totals, by statistics id (see [`commands::stat_name`]).
    pub fn commands(&self) -> Vec<CommandTotals> {
        let sum = |f: fn(&Part) -> &[AtomicU64], id: usize| -> u64 {
            self.parts.iter().map(|p| f(p)[id].load(Relaxed)).sum()
        };
        let per_us = ticks_per_us();
        (0..commands::stat_ids())
            .map(|id| CommandTotals {
                calls: sum(|p| &p.calls, id),
                usec: (sum(|p| &p.ticks, id) as f64 / per_us) as u64,
                rejected: sum(|p| &p.rejected, id),
                failed: sum(|p| &p.failed, id),
            })
            .collect()
    }

    /// Error replies by their first word.
    pub fn errors(&self) -> BTreeMap<String, u64> {
        let mut all = BTreeMap::new();
        for p in self.parts.iter() {
            let map = p.errors.lock().unwrap_or_else(|p| p.into_inner());
            for (word, n) in map.iter() {
                *all.entry(word.clone()).or_insert(0) += n;
            }
        }
        all
    }

    /// (bytes read, bytes written, reads, writes).
    pub fn net(&self) -> (u64, u64, u64, u64) {
        let sum = |f: fn(&Part) -> &AtomicU64| self.parts.iter().map(|p| f(p).load(Relaxed)).sum();
        (
            sum(|p| &p.net_in),
            sum(|p| &p.net_out),
            sum(|p| &p.reads),
            sum(|p| &p.writes),
        )
    }

    /// CONFIG RESETSTAT: every counter back to zero.
    pub fn reset(&self) {
        for p in self.parts.iter() {
            for v in [&p.calls, &p.ticks, &p.rejected, &p.failed] {
                v.iter().for_each(|c| c.store(0, Relaxed));
            }
            for c in [&p.net_in, &p.net_out, &p.reads, &p.writes] {
                c.store(0, Relaxed);
            }
            p.errors.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }
}
