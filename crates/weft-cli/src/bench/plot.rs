//! Charts of `weft bench` results as SVG files: `weft bench <suite> --plot DIR` draws
//! those of the run it makes, `weft bench plot FILE --out DIR` those of a run saved with
//! `--json` (the same charts from the same lines, so a run's charts can be drawn again).
//!
//! Which charts ([`charts`]), each file named `<suite>-<table>.svg`:
//!
//! * every group of rows measured for two implementations or more (a micro benchmark
//!   such as `fibers switch`, `runtime spawn`, `ipc local`, `syslets cached`): one
//!   horizontal bar per implementation, weft's in blue, the others in other colours,
//!   the value written at the end of each bar (`ipc`'s cycles repeat its ns rows and
//!   are left out);
//! * `fibers`' many-fibers table: init and run time against the number of fibers (a
//!   log2 axis), 1 process and 4 at once, beside the published figures the table
//!   prints (dashed);
//! * `kv`'s client-processes table: time against client processes, weft-kv beside
//!   redis-server, one chart each for reads, writes and mixed; redis-benchmark's
//!   requests per second and p99 latency as grouped bars; the latency-under-load
//!   tables' p99 and maximum as grouped bars, per load and connection kind;
//! * `runtime`'s TCP echo: thousand requests per second per server, by message size.
//!
//! Every chart has a title saying what is measured, a line saying what is compared
//! (and whether lower or higher is better), a legend, and axis labels with units.
//! Times are shown in the unit that suits their size (ns, µs, ms or s).
//!
//! Only plotters' SVG backend is used, without a font feature: the text is written as
//! SVG text for the viewer to draw, so nothing here reads font files (no fontconfig).
//! Text widths are estimated from the number of characters.

use super::Measurement;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// One result, as a `--json` line has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub suite: String,
    pub name: String,
    pub impl_name: String,
    pub value: f64,
    pub unit: String,
}

impl Row {
    /// The row of a measurement with a value.
    pub fn of(m: &Measurement) -> Option<Row> {
        Some(Row {
            suite: m.suite.to_string(),
            name: m.name.clone(),
            impl_name: m.impl_name.clone(),
            value: m.value.filter(|v| v.is_finite())?,
            unit: m.unit.to_string(),
        })
    }
}

/// The names of the big tables' rows: `fibers`' many-fibers table
/// (`many-fibers/<P>proc/<F>/<init|run|...>`) and `kv`'s client-processes table
/// (`clients/<op>/<P>proc`).
const MANY_FIBERS: &str = "many-fibers/";
const CLIENTS: &str = "clients/";
/// The one first part both tables' names had in runs saved before 2026-11-28
/// (docs/benchmarks.md); such rows are read under their new names.
const OLD_TABLE_PREFIX: &str = "seed/";

/// A row's name as this version writes it: the big tables' names of older runs renamed
/// ([`OLD_TABLE_PREFIX`]), any other name as it is.
fn current_name(suite: &str, name: String) -> String {
    let new = match suite {
        "fibers" => MANY_FIBERS,
        "kv" => CLIENTS,
        _ => return name,
    };
    match name.strip_prefix(OLD_TABLE_PREFIX) {
        Some(rest) => format!("{new}{rest}"),
        None => name,
    }
}

/// Parses the JSON lines of `weft bench --json`. Blank lines are skipped, and so are
/// rows whose value is null (not measured).
pub fn parse_json_lines(text: &str) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("line {}", i + 1);
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("{}: not a JSON object ({e}): {line}", at()))?;
        let text = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_str())
                .map(str::to_string)
                .ok_or_else(|| format!("{}: no text \"{k}\" in {line}", at()))
        };
        let value = match v.get("value") {
            Some(serde_json::Value::Null) => continue,
            Some(x) => x
                .as_f64()
                .ok_or_else(|| format!("{}: \"value\" is not a number in {line}", at()))?,
            None => return Err(format!("{}: no \"value\" in {line}", at())),
        };
        let suite = text("suite")?;
        let name = current_name(&suite, text("name")?);
        rows.push(Row {
            suite,
            name,
            impl_name: text("impl")?,
            value,
            unit: text("unit")?,
        });
    }
    Ok(rows)
}

/// Draws every chart `rows` make into `dir` (created if need be) and returns the files.
pub fn write_charts(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for chart in charts(rows) {
        let svg = render(&chart).map_err(|e| format!("drawing {}: {e}", chart.file))?;
        let path = dir.join(&chart.file);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        files.push(path);
    }
    Ok(files)
}

// ---------------------------------------------------------------------------------------
// What to draw

/// One chart: its file name, its two header lines and its body.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    /// `<suite>-<table>.svg`.
    pub file: String,
    /// What is measured.
    pub title: String,
    /// What is compared, and which way is better.
    pub subtitle: String,
    pub body: Body,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    Lines(Lines),
    Bars(Bars),
}

/// Lines: y against x, one line per series.
#[derive(Clone, Debug, PartialEq)]
pub struct Lines {
    pub x_label: String,
    /// The y axis' label without its unit (added with the unit chosen to show it in).
    pub y_label: String,
    /// The unit of the y values.
    pub unit: String,
    /// x on a log2 axis (ticks at powers of two).
    pub x_log2: bool,
    /// y on a log10 axis (ticks at powers of ten).
    pub y_log10: bool,
    pub series: Vec<Series>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// A published figure (another machine): drawn dashed.
    pub published: bool,
}

/// Horizontal bars: per category, one bar for each series that has a value there.
#[derive(Clone, Debug, PartialEq)]
pub struct Bars {
    /// The value axis' label without its unit.
    pub value_label: String,
    pub unit: String,
    pub categories: Vec<String>,
    /// (series name, a value per category).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

/// The charts `rows` make (a later row of the same suite, name, implementation and unit
/// replaces an earlier one).
pub fn charts(rows: &[Row]) -> Vec<Chart> {
    let rows = last_of_each(rows);
    let mut out = Vec::new();
    let suites = in_order(rows.iter().map(|r| r.suite.as_str()));
    for suite in suites {
        let of: Vec<&Row> = rows.iter().filter(|r| r.suite == suite).collect();
        match suite {
            "fibers" => out.extend(many_fibers(&of)),
            "kv" => {
                out.extend(kv_clients(&of));
                out.extend(kv_redis_benchmark(&of));
                out.extend(kv_latency(&of));
            }
            "runtime" => out.extend(tcp_echo(&of)),
            _ => {}
        }
        out.extend(groups(suite, &of));
    }
    out
}

/// The rows, each (suite, name, impl, unit) once: the last one, where the first was.
fn last_of_each(rows: &[Row]) -> Vec<Row> {
    let key = |r: &Row| {
        (
            r.suite.clone(),
            r.name.clone(),
            r.impl_name.clone(),
            r.unit.clone(),
        )
    };
    let mut out: Vec<Row> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|o| key(o) == key(r)) {
            Some(o) => *o = r.clone(),
            None => out.push(r.clone()),
        }
    }
    out
}

/// The distinct items of `it`, in the order they first come.
fn in_order<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in it {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Rows drawn by a chart of their own rather than as a group of bars.
fn has_own_chart(r: &Row) -> bool {
    match r.suite.as_str() {
        "fibers" => r.name.starts_with(MANY_FIBERS),
        "kv" => true,
        "runtime" => r.name.starts_with("tcp-echo/") || r.name.starts_with("parked"),
        _ => false,
    }
}

/// What a group of rows measures, and per what.
fn group_words(suite: &str, name: &str) -> (String, &'static str) {
    let (what, per) = match (suite, name) {
        ("fibers", "switch") => ("One context switch between two fibers", "switch"),
        ("fibers", "create") => ("Create, first switch into and delete a fiber", "fiber"),
        ("fibers", "fls-get") => ("Read the running fiber's (thread's) local value", "read"),
        ("runtime", "cross-worker") => ("Round trip between two threads on two CPUs", "round trip"),
        ("runtime", "spawn") => ("Spawn, run and join an empty thread", "thread"),
        ("runtime", "yield") => ("Yield between two threads on one CPU", "yield"),
        ("ipc", "local") => (
            "IPC call and reply, client and server on one worker",
            "round trip",
        ),
        ("ipc", "cross") => ("IPC call and reply across two workers", "round trip"),
        ("ipc", "cross-under-pingpong") => (
            "IPC across two workers while a ping-pong runs beside it",
            "round trip",
        ),
        ("ipc", "local-under-load") => (
            "IPC on one worker while the other worker is busy",
            "round trip",
        ),
        ("syslets", "cached") => (
            "open + read + close of small files in the page cache",
            "file",
        ),
        ("syslets", "uncached") => (
            "open + read + close of small files not in the page cache",
            "file",
        ),
        _ => return (format!("{suite}: {name}"), "operation"),
    };
    (what.to_string(), per)
}

/// "weft vs a, b and c".
fn versus(impls: &[&str]) -> String {
    let weft: Vec<&str> = impls.iter().copied().filter(|i| is_weft(i)).collect();
    let peers: Vec<&str> = impls.iter().copied().filter(|i| !is_weft(i)).collect();
    let ours = if weft.iter().all(|i| i.starts_with("syslets")) {
        "weft's syslets"
    } else {
        "weft"
    };
    let list = |v: &[&str]| match v {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    };
    if weft.is_empty() {
        format!("{} compared", list(&peers))
    } else if peers.is_empty() {
        format!("{} variants of {ours}", weft.len())
    } else {
        format!("{ours} vs {}", list(&peers))
    }
}

/// Whether an implementation is weft's (its syslets too).
fn is_weft(name: &str) -> bool {
    name.starts_with("weft") || name.starts_with("syslets")
}

/// Groups of rows (same suite and name) with two implementations or more: bars.
fn groups(suite: &str, rows: &[&Row]) -> Vec<Chart> {
    let names = in_order(
        rows.iter()
            .filter(|r| !has_own_chart(r))
            .map(|r| r.name.as_str()),
    );
    let mut out = Vec::new();
    for name in names {
        let of: Vec<&&Row> = rows.iter().filter(|r| r.name == name).collect();
        // ipc reports each row in ns and in cycles: draw the ns.
        let unit = if of.iter().any(|r| r.unit == "ns") {
            "ns".to_string()
        } else {
            of[0].unit.clone()
        };
        let of: Vec<&&Row> = of.into_iter().filter(|r| r.unit == unit).collect();
        if of.len() < 2 {
            continue;
        }
        let impls: Vec<&str> = of.iter().map(|r| r.impl_name.as_str()).collect();
        let (what, per) = group_words(suite, name);
        let time = seconds_per(&unit).is_some();
        out.push(Chart {
            file: file_name(suite, name),
            title: what,
            subtitle: format!(
                "{}; {} is better",
                versus(&impls),
                if time { "lower" } else { "higher" }
            ),
            body: Body::Bars(Bars {
                value_label: if time {
                    format!("time per {per}")
                } else {
                    unit_words(&unit).to_string()
                },
                unit: unit.clone(),
                categories: impls.iter().map(|s| s.to_string()).collect(),
                series: of
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        let mut v = vec![None; of.len()];
                        v[i] = Some(r.value);
                        (r.impl_name.clone(), v)
                    })
                    .collect(),
            }),
        });
    }
    out
}

/// `<suite>-<name>.svg`, the name's characters other than letters and digits as '-'.
fn file_name(suite: &str, table: &str) -> String {
    let clean: String = table
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{suite}-{}.svg", clean.trim_matches('-'))
}

/// The many-fibers table: `many-fibers/<P>proc/<F>/<init|run>` in seconds.
fn many_fibers(rows: &[&Row]) -> Vec<Chart> {
    // (procs, fibers, metric, seconds)
    let cells: Vec<(usize, f64, &str, f64)> = rows
        .iter()
        .filter(|r| r.impl_name == "weft" && r.unit == "s")
        .filter_map(|r| {
            let mut it = r.name.strip_prefix(MANY_FIBERS)?.split('/');
            let procs = it.next()?.strip_suffix("proc")?.parse().ok()?;
            let fibers: f64 = it.next()?.parse().ok()?;
            let metric = it.next()?;
            Some((procs, fibers, metric, r.value))
        })
        .collect();
    let mut out = Vec::new();
    for (metric, title, log) in [
        ("init", "Many fibers: time to create F fibers", true),
        (
            "run",
            "Many fibers: wall time of the workload (F fibers shared by one thread per CPU)",
            false,
        ),
    ] {
        let mine: Vec<_> = cells.iter().filter(|c| c.2 == metric).collect();
        if mine.is_empty() {
            continue;
        }
        let mut procs: Vec<usize> = mine.iter().map(|c| c.0).collect();
        procs.sort_unstable();
        procs.dedup();
        let mut series: Vec<Series> = procs
            .iter()
            .map(|&p| Series {
                name: if p == 1 {
                    "weft, 1 process".to_string()
                } else {
                    format!("weft, {p} processes at once")
                },
                points: mine
                    .iter()
                    .filter(|c| c.0 == p)
                    .map(|c| (c.1, c.3))
                    .collect(),
                published: false,
            })
            .collect();
        for f in super::fibers::published() {
            if f.metric == metric && procs.contains(&f.procs) {
                series.push(Series {
                    name: format!(
                        "{}, {} {} (published)",
                        f.who,
                        f.procs,
                        if f.procs == 1 { "process" } else { "processes" }
                    ),
                    points: f.points.iter().map(|&(n, s)| (n as f64, s)).collect(),
                    published: true,
                });
            }
        }
        out.push(Chart {
            file: format!("fibers-many-fibers-{metric}.svg"),
            title: title.to_string(),
            subtitle: "weft on this machine (solid) beside the published figures of a \
                       user-space library and a kernel module on their machine (dashed); \
                       lower is better"
                .to_string(),
            body: Body::Lines(Lines {
                x_label: "fibers (F)".to_string(),
                y_label: if metric == "init" {
                    "time to create them".to_string()
                } else {
                    "wall time".to_string()
                },
                unit: "s".to_string(),
                x_log2: true,
                y_log10: log,
                series,
            }),
        });
    }
    out
}

/// kv's client-processes table: `clients/<op>/<N>proc` in ms, per implementation.
fn kv_clients(rows: &[&Row]) -> Vec<Chart> {
    let cells: Vec<(&str, f64, &Row)> = rows
        .iter()
        .filter_map(|r| {
            let mut it = r.name.strip_prefix(CLIENTS)?.split('/');
            let op = it.next()?;
            let procs: f64 = it.next()?.strip_suffix("proc")?.parse().ok()?;
            Some((op, procs, *r))
        })
        .collect();
    let mut out = Vec::new();
    for op in in_order(cells.iter().map(|c| c.0)) {
        let of: Vec<_> = cells.iter().filter(|c| c.0 == op).collect();
        let impls = in_order(of.iter().map(|c| c.2.impl_name.as_str()));
        let what = match op {
            "read" => "reads (GET)",
            "write" => "writes (SET)",
            "mixed" => "reads and writes mixed",
            other => other,
        };
        out.push(Chart {
            file: format!("kv-clients-{op}.svg"),
            title: format!("weft-kv: {what} split over 1 to 10 client processes"),
            subtitle: format!(
                "{}, one command at a time per client over a Unix socket; time until the \
                 last client is done, lower is better",
                versus(&impls).replacen("weft", "weft-kv", 1)
            ),
            body: Body::Lines(Lines {
                x_label: "client processes".to_string(),
                y_label: "time".to_string(),
                unit: of[0].2.unit.clone(),
                x_log2: false,
                y_log10: false,
                series: impls
                    .iter()
                    .map(|&i| Series {
                        name: i.to_string(),
                        points: of
                            .iter()
                            .filter(|c| c.2.impl_name == i)
                            .map(|c| (c.1, c.2.value))
                            .collect(),
                        published: false,
                    })
                    .collect(),
            }),
        });
    }
    out
}

/// redis-benchmark's rows, `redis-benchmark/<conn>/P<n>/<test>/<rps|p99>`: grouped bars.
fn kv_redis_benchmark(rows: &[&Row]) -> Vec<Chart> {
    let mut out = Vec::new();
    for (what, file, label, better) in [
        ("rps", "rps", "requests per second", "higher"),
        ("p99", "p99", "99th percentile latency", "lower"),
    ] {
        // (category, row)
        let cells: Vec<(String, &Row)> = rows
            .iter()
            .filter_map(|r| {
                let parts: Vec<&str> = r
                    .name
                    .strip_prefix("redis-benchmark/")?
                    .split('/')
                    .collect();
                let [conn, pipe, test, w] = parts.as_slice() else {
                    return None;
                };
                if *w != what {
                    return None;
                }
                let conn = match *conn {
                    "tcp" => "TCP",
                    "unix" => "Unix socket",
                    c => c,
                };
                let pipe = match pipe.strip_prefix('P') {
                    Some("1") => "no pipelining".to_string(),
                    Some(n) => format!("pipelines of {n}"),
                    None => pipe.to_string(),
                };
                Some((format!("{}, {conn}, {pipe}", test.to_uppercase()), *r))
            })
            .collect();
        if cells.is_empty() {
            continue;
        }
        out.push(grouped(
            format!("kv-redis-benchmark-{file}.svg"),
            format!("weft-kv: redis-benchmark's {label} (50 clients)"),
            better,
            label,
            &cells,
        ));
    }
    out
}

/// The latency-under-load tables, `latency-under-load[-always]/<load>/<conn>/<p>` in
/// us: grouped bars of the p99 and of the maximum, a category per load and connection.
fn kv_latency(rows: &[&Row]) -> Vec<Chart> {
    let mut out = Vec::new();
    for (table, fsync) in [
        ("latency-under-load", "fsync every second"),
        ("latency-under-load-always", "fsync always"),
    ] {
        for (what, label) in [("p99", "99th percentile"), ("max", "maximum")] {
            let cells: Vec<(String, &Row)> = rows
                .iter()
                .filter_map(|r| {
                    let parts: Vec<&str> = r.name.strip_prefix(table)?.split('/').collect();
                    let ["", load, conn, w] = parts.as_slice() else {
                        return None;
                    };
                    if *w != what {
                        return None;
                    }
                    let load = match *load {
                        "quiet" => "quiet",
                        "cpu" => "CPU hogs",
                        "cpu-disk" => "CPU hogs + disk writer",
                        l => l,
                    };
                    let conn = match *conn {
                        "existing" => "open connection",
                        "new" => "new connection",
                        c => c,
                    };
                    Some((format!("{load}, {conn}"), *r))
                })
                .collect();
            if cells.is_empty() {
                continue;
            }
            out.push(grouped(
                format!("kv-{table}-{what}.svg"),
                format!(
                    "weft-kv: {label} latency of a pipeline (PING, SET, GET, INCR) under load, \
                     {fsync}"
                ),
                "lower",
                &format!("{label} latency"),
                &cells,
            ));
        }
    }
    out
}

/// runtime's TCP echo: `tcp-echo/<size>/c<N>/requests` in kreq/s, per server.
fn tcp_echo(rows: &[&Row]) -> Vec<Chart> {
    let cells: Vec<(String, &Row)> = rows
        .iter()
        .filter_map(|r| {
            let parts: Vec<&str> = r.name.strip_prefix("tcp-echo/")?.split('/').collect();
            let [size, conns, "requests"] = parts.as_slice() else {
                return None;
            };
            let conns = conns.strip_prefix('c').unwrap_or(conns);
            Some((format!("{size} messages, {conns} connections"), *r))
        })
        .collect();
    if cells.is_empty() {
        return Vec::new();
    }
    vec![grouped(
        "runtime-tcp-echo.svg".to_string(),
        "TCP echo on 127.0.0.1: requests served per second".to_string(),
        "higher",
        "thousand requests per second",
        &cells,
    )]
}

/// Grouped bars: a category per distinct first item, a series per implementation.
fn grouped(
    file: String,
    title: String,
    better: &str,
    value_label: &str,
    cells: &[(String, &Row)],
) -> Chart {
    let categories: Vec<String> = in_order(cells.iter().map(|c| c.0.as_str()))
        .into_iter()
        .map(String::from)
        .collect();
    let impls = in_order(cells.iter().map(|c| c.1.impl_name.as_str()));
    let series = impls
        .iter()
        .map(|&i| {
            let values = categories
                .iter()
                .map(|cat| {
                    cells
                        .iter()
                        .find(|c| &c.0 == cat && c.1.impl_name == i)
                        .map(|c| c.1.value)
                })
                .collect();
            (i.to_string(), values)
        })
        .collect();
    let unit = cells[0].1.unit.clone();
    Chart {
        file,
        title,
        subtitle: format!("{}; {better} is better", versus(&impls)),
        body: Body::Bars(Bars {
            value_label: value_label.to_string(),
            unit,
            categories,
            series,
        }),
    }
}

// ---------------------------------------------------------------------------------------
// Units and numbers

/// Seconds in one `unit`, for the units of time.
fn seconds_per(unit: &str) -> Option<f64> {
    Some(match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return None,
    })
}

/// The unit to show values of `unit` up to `max` in, and the factor to get there.
fn display_unit(unit: &str, max: f64) -> (f64, String) {
    let Some(per) = seconds_per(unit) else {
        return (1.0, unit.to_string());
    };
    let s = max * per;
    let (to, name) = if s >= 10.0 {
        (1.0, "s")
    } else if s >= 1e-2 {
        (1e-3, "ms")
    } else if s >= 1e-5 {
        (1e-6, "µs")
    } else {
        (1e-9, "ns")
    };
    (per / to, name.to_string())
}

/// Words for a unit that is not a time.
fn unit_words(unit: &str) -> &str {
    match unit {
        "req/s" => "requests per second",
        "kreq/s" => "thousand requests per second",
        "MB/s" => "megabytes per second",
        "%" => "percent",
        other => other,
    }
}

/// Three significant digits, thousands separated: 12.3, 1.23, 0.0123, 12,345.
fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 {
        let g = super::group(a);
        if v < 0.0 {
            format!("-{g}")
        } else {
            g
        }
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.2}")
    } else {
        let digits = (2.0 - a.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

/// An axis tick: as [`fmt_num`], without trailing zeros (0, 0.5, 50, 2,000).
fn fmt_tick(v: f64) -> String {
    let s = fmt_num(v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `text` cut at spaces into lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

// ---------------------------------------------------------------------------------------
// Drawing

const WIDTH: u32 = 960;
const FONT: &str = "sans-serif";
/// Estimated width of a character of the legend's and labels' text (14 px), in pixels.
const CHAR_PX: f64 = 7.2;
/// Characters of the subtitle on one line.
const SUBTITLE_CHARS: usize = 118;

/// weft's series in blues, the others in other colours.
const WEFT_COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(107, 174, 214),
    RGBColor(8, 69, 148),
    RGBColor(66, 146, 198),
    RGBColor(158, 202, 225),
];
const OTHER_COLORS: [RGBColor; 8] = [
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// One colour per series name: weft's from the blues, the others' from the rest.
fn colors(names: &[&str]) -> Vec<RGBColor> {
    let (mut w, mut o) = (0, 0);
    names
        .iter()
        .map(|n| {
            if is_weft(n) {
                w += 1;
                WEFT_COLORS[(w - 1) % WEFT_COLORS.len()]
            } else {
                o += 1;
                OTHER_COLORS[(o - 1) % OTHER_COLORS.len()]
            }
        })
        .collect()
}

/// A legend entry: name, colour, and whether its line is dashed (bars: a box).
struct Entry {
    name: String,
    color: RGBColor,
    mark: Mark,
}

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    Box,
    Line,
    Dashed,
}

fn pe(e: impl std::fmt::Display) -> String {
    e.to_string()
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The SVG text of `chart`.
pub fn render(chart: &Chart) -> Result<String, String> {
    let entries: Vec<Entry> = match &chart.body {
        Body::Lines(l) => {
            let names: Vec<&str> = l.series.iter().map(|s| s.name.as_str()).collect();
            l.series
                .iter()
                .zip(colors(&names))
                .map(|(s, color)| Entry {
                    name: s.name.clone(),
                    color,
                    mark: if s.published {
                        Mark::Dashed
                    } else {
                        Mark::Line
                    },
                })
                .collect()
        }
        Body::Bars(b) => {
            let names: Vec<&str> = b.series.iter().map(|s| s.0.as_str()).collect();
            names
                .iter()
                .zip(colors(&names))
                .map(|(n, color)| Entry {
                    name: n.to_string(),
                    color,
                    mark: Mark::Box,
                })
                .collect()
        }
    };
    let rows = legend_rows(&entries);
    let subtitle = wrap(&chart.subtitle, SUBTITLE_CHARS);
    let legend_y = 52 + 22 * subtitle.len() as i32;
    let header = legend_y as u32 + 22 * rows.len() as u32;
    let height = header
        + match &chart.body {
            Body::Lines(_) => 500,
            Body::Bars(b) => 70 + (26.0 * bar_units(b)).round() as u32,
        };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(pe)?;
        draw_header(&root, &chart.title, &subtitle, legend_y, &entries, &rows)?;
        let (_, body) = root.split_vertically(header);
        match &chart.body {
            Body::Lines(l) => draw_lines(&body, l, &entries)?,
            Body::Bars(b) => draw_bars(&root, &body, b, &entries)?,
        }
        root.present().map_err(pe)?;
    }
    Ok(svg)
}

/// The legend's entries laid out in rows that fit the width: indices per row.
fn legend_rows(entries: &[Entry]) -> Vec<Vec<usize>> {
    let mut rows: Vec<Vec<usize>> = Vec::new();
    let mut x = f64::INFINITY;
    for (i, e) in entries.iter().enumerate() {
        let w = entry_width(e);
        if x + w > f64::from(WIDTH) - 20.0 {
            rows.push(Vec::new());
            x = 20.0;
        }
        rows.last_mut().expect("a row").push(i);
        x += w;
    }
    rows
}

fn entry_width(e: &Entry) -> f64 {
    30.0 + CHAR_PX * e.name.chars().count() as f64 + 22.0
}

/// The title, the subtitle's lines, and the legend's rows from `legend_y` on.
fn draw_header(
    root: &Area,
    title: &str,
    subtitle: &[String],
    legend_y: i32,
    entries: &[Entry],
    rows: &[Vec<usize>],
) -> Result<(), String> {
    let left = Pos::new(HPos::Left, VPos::Center);
    let bold = (FONT, 22)
        .into_font()
        .style(FontStyle::Bold)
        .color(&BLACK)
        .pos(left);
    root.draw(&Text::new(title.to_string(), (20, 20), bold))
        .map_err(pe)?;
    let sub = (FONT, 16)
        .into_font()
        .color(&RGBColor(60, 60, 60))
        .pos(left);
    for (i, line) in subtitle.iter().enumerate() {
        root.draw(&Text::new(
            line.clone(),
            (20, 46 + 20 * i as i32),
            sub.clone(),
        ))
        .map_err(pe)?;
    }
    let text = (FONT, 16).into_font().color(&BLACK).pos(left);
    for (r, row) in rows.iter().enumerate() {
        let y = legend_y + 22 * r as i32;
        let mut x = 20.0;
        for &i in row {
            let e = &entries[i];
            let x0 = x as i32;
            match e.mark {
                Mark::Box => root
                    .draw(&Rectangle::new(
                        [(x0, y - 7), (x0 + 22, y + 7)],
                        e.color.filled(),
                    ))
                    .map_err(pe)?,
                Mark::Line => root
                    .draw(&PathElement::new(
                        vec![(x0, y), (x0 + 24, y)],
                        e.color.stroke_width(3),
                    ))
                    .map_err(pe)?,
                Mark::Dashed => {
                    for d in [0, 10, 20] {
                        root.draw(&PathElement::new(
                            vec![(x0 + d, y), (x0 + d + 5, y)],
                            e.color.stroke_width(3),
                        ))
                        .map_err(pe)?;
                    }
                }
            }
            root.draw(&Text::new(e.name.clone(), (x0 + 30, y), text.clone()))
                .map_err(pe)?;
            x += entry_width(e);
        }
    }
    Ok(())
}

/// The value of `v` on an axis: log2 / log10 or as is.
fn to_axis(v: f64, log2: bool, log10: bool) -> Option<f64> {
    if log2 || log10 {
        if v <= 0.0 {
            return None;
        }
        Some(if log2 { v.log2() } else { v.log10() })
    } else {
        Some(v)
    }
}

fn draw_lines(body: &Area, l: &Lines, entries: &[Entry]) -> Result<(), String> {
    let all = l.series.iter().flat_map(|s| s.points.iter());
    let max_y = all.clone().map(|p| p.1).fold(0.0, f64::max);
    let (factor, unit) = display_unit(&l.unit, max_y);
    // Every point in axis coordinates (scaled to the display unit first).
    let series: Vec<Vec<(f64, f64)>> = l
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter_map(|&(x, y)| {
                    Some((
                        to_axis(x, l.x_log2, false)?,
                        to_axis(y * factor, false, l.y_log10)?,
                    ))
                })
                .collect()
        })
        .collect();
    let pts = series.iter().flatten();
    let (x0, x1) = pts
        .clone()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.0), b.max(p.0))
        });
    let (y0, y1) = pts
        .clone()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p.1), b.max(p.1))
        });
    if !x0.is_finite() || !y0.is_finite() {
        return Err("no point to draw".to_string());
    }
    let pad = if l.x_log2 { 0.3 } else { 0.5 };
    let xr = (x0 - pad)..(x1 + pad);
    let yr = if l.y_log10 {
        y0.floor()..(y1.ceil().max(y0.floor() + 1.0))
    } else {
        0.0..(y1 * 1.1).max(1e-12)
    };
    let mut chart = ChartBuilder::on(body)
        .margin_left(12)
        .margin_right(30)
        .margin_top(8)
        .margin_bottom(8)
        .x_label_area_size(56)
        .y_label_area_size(96)
        .build_cartesian_2d(xr, yr.clone())
        .map_err(pe)?;
    let x_fmt = |v: &f64| {
        let r = v.round();
        if (v - r).abs() > 1e-6 {
            String::new()
        } else if l.x_log2 {
            format!("{}", 2f64.powf(r))
        } else {
            format!("{r}")
        }
    };
    let y_fmt = |v: &f64| {
        if l.y_log10 {
            let r = v.round();
            if (v - r).abs() > 1e-6 {
                String::new()
            } else {
                fmt_tick(10f64.powf(r))
            }
        } else {
            fmt_tick(*v)
        }
    };
    let decades = (yr.end - yr.start).round() as usize;
    let x_ticks = (xr_span(&series) + 1).clamp(2, 12);
    chart
        .configure_mesh()
        .x_desc(l.x_label.clone())
        .y_desc(format!(
            "{} ({unit}{})",
            l.y_label,
            if l.y_log10 { ", log scale" } else { "" }
        ))
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_labels(x_ticks)
        .y_labels(if l.y_log10 { decades + 1 } else { 8 })
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()
        .map_err(pe)?;
    for (points, e) in series.iter().zip(entries) {
        let style = e.color.stroke_width(2);
        if e.mark == Mark::Dashed {
            chart
                .draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, style))
                .map_err(pe)?;
        } else {
            chart
                .draw_series(LineSeries::new(points.iter().copied(), style))
                .map_err(pe)?;
        }
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, e.color.filled())))
            .map_err(pe)?;
    }
    Ok(())
}

/// How many whole units the x values span (for the number of ticks).
fn xr_span(series: &[Vec<(f64, f64)>]) -> usize {
    let xs = series.iter().flatten().map(|p| p.0);
    let (a, b) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if a.is_finite() {
        (b - a).round() as usize
    } else {
        1
    }
}

/// The gap between two categories, in bar heights.
const GAP: f64 = 0.8;

/// The height of the bars' area in bar heights.
fn bar_units(b: &Bars) -> f64 {
    (0..b.categories.len())
        .map(|c| b.series.iter().filter(|s| s.1[c].is_some()).count() as f64 + GAP)
        .sum()
}

fn draw_bars(root: &Area, body: &Area, b: &Bars, entries: &[Entry]) -> Result<(), String> {
    let max = b
        .series
        .iter()
        .flat_map(|s| s.1.iter().flatten())
        .fold(0.0, |m: f64, &v| m.max(v));
    let (factor, unit) = display_unit(&b.unit, max);
    let total = bar_units(b);
    let longest = b
        .categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(4);
    let label_area = (CHAR_PX * longest as f64 + 24.0).clamp(60.0, 420.0) as u32;
    let mut chart = ChartBuilder::on(body)
        .margin_left(12)
        .margin_right(80)
        .margin_top(4)
        .margin_bottom(8)
        .x_label_area_size(56)
        .y_label_area_size(label_area)
        .build_cartesian_2d(0.0..(max * factor * 1.05).max(1e-12), 0.0..total)
        .map_err(pe)?;
    let x_fmt = |v: &f64| fmt_tick(*v);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc(format!("{} ({unit})", b.value_label))
        .x_label_formatter(&x_fmt)
        .x_labels(8)
        .label_style((FONT, 15))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
        .map_err(pe)?;
    let label = (FONT, 15)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Right, VPos::Center));
    let value = (FONT, 14)
        .into_font()
        .color(&RGBColor(40, 40, 40))
        .pos(Pos::new(HPos::Left, VPos::Center));
    let mut y = total;
    for (c, name) in b.categories.iter().enumerate() {
        y -= GAP / 2.0;
        let top = y;
        for (s, e) in b.series.iter().zip(entries) {
            let Some(v) = s.1[c] else { continue };
            let v = v * factor;
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y - 0.9), (v, y - 0.1)],
                    e.color.filled(),
                )))
                .map_err(pe)?;
            let (px, py) = chart.backend_coord(&(v, y - 0.5));
            root.draw(&Text::new(fmt_num(v), (px + 5, py), value.clone()))
                .map_err(pe)?;
            y -= 1.0;
        }
        let (px, py) = chart.backend_coord(&(0.0, (top + y) / 2.0));
        root.draw(&Text::new(name.clone(), (px - 8, py), label.clone()))
            .map_err(pe)?;
        y -= GAP / 2.0;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(suite: &str, name: &str, imp: &str, value: f64, unit: &str) -> Row {
        Row {
            suite: suite.into(),
            name: name.into(),
            impl_name: imp.into(),
            value,
            unit: unit.into(),
        }
    }

    #[test]
    fn json_lines_parse_and_nulls_are_skipped() {
        let text = "{\"suite\":\"fibers\",\"name\":\"switch\",\"impl\":\"weft\",\"value\":17.5,\"unit\":\"ns\"}\n\
                    \n\
                    {\"suite\":\"fibers\",\"name\":\"switch\",\"impl\":\"ucontext\",\"value\":null,\"unit\":\"ns\"}\n";
        assert_eq!(
            parse_json_lines(text).unwrap(),
            vec![row("fibers", "switch", "weft", 17.5, "ns")]
        );
        let err = parse_json_lines("{\"suite\":\"fibers\"}\nnot json\n").unwrap_err();
        assert!(err.starts_with("line 1: no \"value\""), "{err}");
        let err = parse_json_lines("not json").unwrap_err();
        assert!(err.starts_with("line 1: not a JSON object"), "{err}");
    }

    #[test]
    fn older_runs_big_table_names_are_read_under_the_new_ones() {
        let line = |suite: &str, name: &str| {
            format!(
                "{{\"suite\":\"{suite}\",\"name\":\"{name}\",\"impl\":\"weft\",\"value\":1.5,\
                 \"unit\":\"s\"}}\n"
            )
        };
        let old = |rest: &str| format!("{OLD_TABLE_PREFIX}{rest}");
        let text = line("fibers", &old("4proc/1024/run"))
            + &line("kv", &old("read/4proc"))
            + &line("fibers", "many-fibers/1proc/16/init")
            + &line("kv", "clients/write/2proc")
            + &line("syslets", &old("x"));
        let names: Vec<String> = parse_json_lines(&text)
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(
            names,
            [
                "many-fibers/4proc/1024/run",
                "clients/read/4proc",
                "many-fibers/1proc/16/init",
                "clients/write/2proc",
                // Only the two big tables had the old prefix: another suite's name stays.
                old("x").as_str(),
            ]
        );
    }

    #[test]
    fn a_group_of_two_implementations_is_a_bar_chart_and_one_alone_is_none() {
        let rows = vec![
            row("fibers", "switch", "weft", 17.5, "ns"),
            row("fibers", "switch", "ucontext", 190.0, "ns"),
            row("fibers", "create", "weft", 60.0, "ns"),
        ];
        let c = charts(&rows);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].file, "fibers-switch.svg");
        assert_eq!(c[0].subtitle, "weft vs ucontext; lower is better");
        let Body::Bars(b) = &c[0].body else {
            panic!("{c:?}")
        };
        assert_eq!(b.categories, ["weft", "ucontext"]);
        assert_eq!(b.value_label, "time per switch");
    }

    #[test]
    fn ipc_draws_its_ns_rows_not_its_cycles() {
        let rows = vec![
            row("ipc", "local", "weft", 58.0, "ns"),
            row("ipc", "local", "weft", 150.0, "cycles"),
            row("ipc", "local", "go", 360.0, "ns"),
            row("ipc", "local", "go", 900.0, "cycles"),
        ];
        let c = charts(&rows);
        assert_eq!(c.len(), 1);
        let Body::Bars(b) = &c[0].body else {
            panic!("{c:?}")
        };
        assert_eq!(b.unit, "ns");
        assert_eq!(b.series[1], ("go".to_string(), vec![None, Some(360.0)]));
    }

    #[test]
    fn the_many_fibers_table_has_weft_and_the_published_lines() {
        let mut rows = Vec::new();
        for (p, f, v) in [(1, 16, 0.2), (1, 1024, 0.3), (4, 16, 0.9), (4, 1024, 1.1)] {
            rows.push(row(
                "fibers",
                &format!("many-fibers/{p}proc/{f}/run"),
                "weft",
                v,
                "s",
            ));
            rows.push(row(
                "fibers",
                &format!("many-fibers/{p}proc/{f}/init"),
                "weft",
                v / 1e4,
                "s",
            ));
            rows.push(row(
                "fibers",
                &format!("many-fibers/{p}proc/{f}/switches"),
                "weft",
                9.0,
                "count",
            ));
        }
        let c = charts(&rows);
        let files: Vec<&str> = c.iter().map(|c| c.file.as_str()).collect();
        assert_eq!(
            files,
            ["fibers-many-fibers-init.svg", "fibers-many-fibers-run.svg"]
        );
        let Body::Lines(l) = &c[1].body else {
            panic!("{c:?}")
        };
        let names: Vec<&str> = l.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            &names[..2],
            ["weft, 1 process", "weft, 4 processes at once"]
        );
        assert!(l.series[2..]
            .iter()
            .all(|s| s.published && s.points.len() == 5));
        assert_eq!(l.series[0].points, [(16.0, 0.2), (1024.0, 0.3)]);
    }

    #[test]
    fn units_follow_the_size_of_the_values() {
        assert_eq!(display_unit("ns", 190.0), (1.0, "ns".to_string()));
        assert_eq!(display_unit("ns", 25_000.0), (1e-3, "µs".to_string()));
        assert_eq!(display_unit("ms", 4_000.0), (1.0, "ms".to_string()));
        assert_eq!(display_unit("ms", 40_000.0), (1e-3, "s".to_string()));
        assert_eq!(display_unit("s", 0.002), (1e6, "µs".to_string()));
        assert_eq!(display_unit("kreq/s", 5.0), (1.0, "kreq/s".to_string()));
    }

    #[test]
    fn numbers_have_three_significant_digits() {
        assert_eq!(fmt_num(17.56), "17.6");
        assert_eq!(fmt_num(1.234), "1.23");
        assert_eq!(fmt_num(0.01234), "0.0123");
        assert_eq!(fmt_num(123.4), "123");
        assert_eq!(fmt_num(56022.4), "56,022");
        assert_eq!(fmt_num(0.0), "0.00");
    }

    #[test]
    fn ticks_drop_trailing_zeros_and_long_lines_wrap() {
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_tick(50.0), "50");
        assert_eq!(fmt_tick(0.5), "0.5");
        assert_eq!(fmt_tick(0.01), "0.01");
        assert_eq!(fmt_tick(2000.0), "2,000");
        assert_eq!(wrap("a bb ccc dd", 6), ["a bb", "ccc dd"]);
        assert_eq!(wrap("short", 60), ["short"]);
    }

    #[test]
    fn the_subtitle_says_who_is_compared() {
        assert_eq!(versus(&["weft", "go", "pthread"]), "weft vs go and pthread");
        assert_eq!(
            versus(&["sync", "syslets-1-worker", "io_uring-raw"]),
            "weft's syslets vs sync and io_uring-raw"
        );
        assert_eq!(versus(&["a", "b"]), "a and b compared");
        assert_eq!(versus(&["weft", "weft-busy"]), "2 variants of weft");
    }

    #[test]
    fn file_names_keep_letters_and_digits() {
        assert_eq!(
            file_name("ipc", "cross-under-pingpong"),
            "ipc-cross-under-pingpong.svg"
        );
        assert_eq!(file_name("x", "a/b c"), "x-a-b-c.svg");
    }
}
