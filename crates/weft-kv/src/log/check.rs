//! `weft kv check [--repair]`: report on a data directory and each shard's log, and
//! repair what can be repaired.
//!
//! The check finds what [`DataDir::open`](super::DataDir::open) and recovery would
//! find, with the same code: per shard, ok with N records, a torn tail of N bytes
//! (which the next start cuts by itself), corruption at offset X and why, a damaged
//! last record, a log missing, emptied or not this directory's (all of which stop the
//! start); and for the directory, logs the manifest does not name, a missing manifest,
//! and leftovers of a compaction or upgrade. Without `--repair` it **changes nothing**:
//! it writes no pid into `LOCK` (and creates none), removes no leftover, upgrades no
//! format 1 or 2 directory. It takes the directory's lock, so it refuses to run while a
//! server or an embedded store uses the directory.
//!
//! **Repair** (as `redis-check-aof --fix`): a damaged log is first copied to
//! `shard-NNN.log.corrupt-<unix time>` (fsynced), then truncated at the first bad
//! offset and fsynced. What followed the damage is lost, valid records included; the
//! report says how many bytes were cut, and the backup keeps them for whoever wants to
//! dig. A log that is missing or emptied is created empty (that shard's keys are lost;
//! an emptied file is copied aside first); a missing manifest is rebuilt from the logs'
//! headers when they agree; leftovers are removed. A bad header, a log of another
//! directory or shard, and logs the manifest does not name are not repaired: the
//! report says which file to move.

use super::dir::{self, log_state, LogState, Manifest, Survey};
use super::header::HeaderCheck;
use super::recover::{scan, BadFrame, Scan, Verdict};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the check found for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardState {
    /// Every frame is good.
    Ok,
    /// No log yet, in a format 1 directory (the upgrade on the next start creates it).
    NotCreated,
    /// The manifest names the log but it is missing (start-up refuses; repair creates
    /// it empty: the shard's keys are lost).
    Missing,
    /// The file holds `len` bytes, fewer than a header (start-up refuses in a format 2
    /// directory; repair creates the log anew).
    Emptied { len: u64 },
    /// A torn tail of `bytes` bytes at `offset` (start-up cuts it by itself).
    TornTail { offset: u64, bytes: u64 },
    /// A bad frame at `offset` with valid frames after it (start-up refuses); cutting
    /// there loses `lost_bytes`.
    Corrupt {
        offset: u64,
        reason: String,
        next_valid: u64,
        lost_bytes: u64,
    },
    /// The last frame, at `offset`, is whole but damaged: not a write a crash cut short
    /// (start-up refuses: that record may have been acknowledged); cutting there loses
    /// `lost_bytes`.
    DamagedTail {
        offset: u64,
        reason: String,
        lost_bytes: u64,
    },
    /// Not a weft-kv log header (never repaired).
    BadHeader(String),
    /// A valid header naming another directory, shard or shard count (never repaired).
    Foreign(String),
}

/// A repair done on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The copy of the damaged file (none for a missing or empty one).
    pub backup: Option<PathBuf>,
    /// Where the log was cut (its new length); for a log created anew, its header's
    /// length.
    pub cut_at: u64,
    /// How many bytes were cut off.
    pub bytes_cut: u64,
}

/// One shard's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardCheck {
    /// The shard's log.
    pub path: PathBuf,
    /// What was found (before any repair).
    pub state: ShardState,
    /// Good records before the damage (all of them if `Ok`).
    pub records: u64,
    /// The repair, if one was done.
    pub repair: Option<Repair>,
}

/// A finding about the directory rather than one shard's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirFinding {
    /// The file.
    pub path: PathBuf,
    /// What it is and what to do.
    pub what: String,
    /// Whether it stops start-up.
    pub blocks: bool,
    /// What the repair did, if it did something.
    pub repaired: Option<String>,
}

/// The check of a whole data directory, one line per shard when displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The directory.
    pub dir: PathBuf,
    /// The manifest's format (below the current one: upgraded on the next start; 0: no
    /// manifest).
    pub format: u32,
    /// Per shard, in order.
    pub shards: Vec<ShardCheck>,
    /// The directory's findings: logs the manifest does not name, a missing manifest,
    /// leftovers.
    pub findings: Vec<DirFinding>,
}

impl CheckReport {
    /// Whether the directory can be started as it is now: nothing found that stops
    /// start-up, or only what the repair fixed. False (exit status 1) otherwise.
    pub fn usable(&self) -> bool {
        let shards = self.shards.iter().all(|s| match s.state {
            ShardState::Ok | ShardState::NotCreated | ShardState::TornTail { .. } => true,
            ShardState::Corrupt { .. }
            | ShardState::DamagedTail { .. }
            | ShardState::Missing
            | ShardState::Emptied { .. } => s.repair.is_some(),
            ShardState::BadHeader(_) | ShardState::Foreign(_) => false,
        });
        shards
            && self
                .findings
                .iter()
                .all(|f| !f.blocks || f.repaired.is_some())
    }

    /// Whether every log was found intact and nothing else was found (no torn tail,
    /// damage, missing file, leftover or stray log).
    pub fn clean(&self) -> bool {
        self.findings.is_empty()
            && self
                .shards
                .iter()
                .all(|s| matches!(s.state, ShardState::Ok | ShardState::NotCreated))
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let repair = format!("`weft kv check --repair --dir {}`", self.dir.display());
        if (1..dir::FORMAT).contains(&self.format) {
            writeln!(
                f,
                "{}: data format {}: the next `weft kv serve` (or store) upgrades it to format {}",
                dir::MANIFEST,
                self.format,
                dir::FORMAT
            )?;
        }
        for s in &self.shards {
            let name = s
                .path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            write!(f, "{name}: ")?;
            match &s.state {
                ShardState::Ok => write!(f, "ok, {} records", s.records)?,
                ShardState::NotCreated => write!(f, "no log yet (created on start)")?,
                ShardState::Missing => write!(
                    f,
                    "missing: the manifest names it; start-up refuses until it is back (from a \
                     backup) or created empty by {repair} (that shard's keys are lost)"
                )?,
                ShardState::Emptied { len } => write!(
                    f,
                    "holds {len} bytes, less than a log header: it was emptied or cut; start-up \
                     refuses until it is back (from a backup) or created anew by {repair} (that \
                     shard's keys are lost)"
                )?,
                ShardState::TornTail { offset, bytes } => write!(
                    f,
                    "torn tail of {bytes} bytes at offset {offset} after {} good records (start-up cuts it)",
                    s.records
                )?,
                ShardState::Corrupt { offset, reason, next_valid, lost_bytes } => write!(
                    f,
                    "corrupt at offset {offset}: {reason} (a valid record follows at offset {next_valid}; \
                     {} good records before it; cutting there loses {lost_bytes} bytes)",
                    s.records
                )?,
                ShardState::DamagedTail { offset, reason, lost_bytes } => write!(
                    f,
                    "the last record, at offset {offset}, is damaged: {reason}; it is whole, so \
                     no crash cut it short, and it may have been acknowledged ({} good records \
                     before it; cutting there loses {lost_bytes} bytes)",
                    s.records
                )?,
                ShardState::BadHeader(why) => write!(
                    f,
                    "bad header: {why} (not repaired: if the file is not a weft-kv log, move it \
                     out of the data directory)"
                )?,
                ShardState::Foreign(why) => write!(
                    f,
                    "{why}: it is not this directory's log (not repaired: put this directory's \
                     own file back, or move this one away and run {repair} to start the shard empty)"
                )?,
            }
            match &s.repair {
                Some(r) => {
                    if matches!(s.state, ShardState::Missing | ShardState::Emptied { .. }) {
                        write!(f, "; repaired: created empty (that shard's keys are lost)")?;
                    } else {
                        write!(
                            f,
                            "; repaired: cut {} bytes at offset {}",
                            r.bytes_cut, r.cut_at
                        )?;
                    }
                    if let Some(b) = &r.backup {
                        write!(f, ", backup in {}", b.display())?;
                    }
                }
                None if matches!(
                    s.state,
                    ShardState::Corrupt { .. } | ShardState::DamagedTail { .. }
                ) =>
                {
                    write!(f, "; run {repair} to cut it there (a backup copy is kept)")?
                }
                None => {}
            }
            writeln!(f)?;
        }
        for d in &self.findings {
            let name = d
                .path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            write!(f, "{name}: {}", d.what)?;
            if let Some(r) = &d.repaired {
                write!(f, "; repaired: {r}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Checks the data directory `dir` and every shard's log in it and, with `repair`,
/// repairs what can be (see the module doc). Takes the directory's lock: fails while
/// a server or store uses it. Without `repair`, changes nothing.
pub fn check(dir: &Path, repair: bool) -> io::Result<CheckReport> {
    if !dir.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} is not a directory (no weft-kv data there)",
                dir.display()
            ),
        ));
    }
    let _lock = dir::lock(dir, repair)?;
    let survey = Survey::read(dir)?;
    let mut report = CheckReport {
        dir: dir.to_path_buf(),
        format: 0,
        shards: Vec::new(),
        findings: Vec::new(),
    };
    let manifest = match &survey.manifest {
        Some(Ok(m)) => m.clone(),
        Some(Err(e)) => return Err(io::Error::new(e.kind(), e.to_string())),
        None if survey.logs.is_empty() => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} has no manifest ({}): it is not a weft-kv data directory",
                    dir.display(),
                    dir::MANIFEST
                ),
            ))
        }
        None => {
            let path = dir.join(dir::MANIFEST);
            let mut finding = DirFinding {
                path: path.clone(),
                what: String::new(),
                blocks: true,
                repaired: None,
            };
            match dir::rebuild_manifest(&survey)? {
                Ok(m) => {
                    finding.what = format!(
                        "missing, beside shard logs: start-up refuses; the logs' headers agree \
                         ({} shards, directory {}), so `--repair` rebuilds it from them",
                        m.shards,
                        m.id.expect("rebuilt manifests have an id")
                    );
                    if repair {
                        dir::write_manifest(dir, &m)?;
                        finding.repaired = Some("rebuilt from the logs' headers".into());
                        report.findings.push(finding);
                        m
                    } else {
                        report.findings.push(finding);
                        return Ok(report);
                    }
                }
                Err(why) => {
                    finding.what = format!(
                        "missing, beside shard logs: start-up refuses. It cannot be rebuilt from \
                         the logs ({why}): put it back from a backup"
                    );
                    report.findings.push(finding);
                    return Ok(report);
                }
            }
        }
    };
    report.format = manifest.format;
    let mut tails = vec![super::tx::TxTail::default(); manifest.shards];
    for (shard, tail) in tails.iter_mut().enumerate() {
        report
            .shards
            .push(check_one(dir, &manifest, shard, repair, tail)?);
    }
    // A transaction's part that ends a log is kept by start-up only if every
    // participant has it (`log/tx.rs`): say which ones start-up cuts.
    let kept = super::tx::settle(&tails);
    for (shard, t) in tails.iter().enumerate() {
        let Some(h) = t.held.as_ref().filter(|_| !kept[shard]) else {
            continue;
        };
        report.findings.push(DirFinding {
            path: dir::log_path(dir, shard),
            what: format!(
                "ends with {} bytes of transaction {} over shards {:?}, which {}: it was \
                 never acknowledged, and start-up cuts it",
                h.frames.len(),
                h.id,
                h.shards,
                if h.whole {
                    "another of those shards does not have"
                } else {
                    "lacks its last frame"
                }
            ),
            blocks: false,
            repaired: None,
        });
    }
    for p in dir::extra_logs(&manifest, &survey) {
        report.findings.push(DirFinding {
            what: format!(
                "not one of the manifest's {} shard logs, and it may hold keys the shards would \
                 not see: start-up refuses. Move it out of the data directory, or put back the \
                 manifest that names it (not repaired)",
                manifest.shards
            ),
            path: p,
            blocks: true,
            repaired: None,
        });
    }
    for p in &survey.leftovers {
        let mut finding = DirFinding {
            path: p.clone(),
            what: format!(
                "left by {} that did not finish (the logs are complete; start-up removes it)",
                dir::leftover_of(p)
            ),
            blocks: false,
            repaired: None,
        };
        if repair {
            fs::remove_file(p).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot remove {}: {e}", p.display()))
            })?;
            dir::sync_dir(dir)?;
            finding.repaired = Some("removed".into());
        }
        report.findings.push(finding);
    }
    Ok(report)
}

fn check_one(
    dir: &Path,
    m: &Manifest,
    shard: usize,
    repair: bool,
    tx: &mut super::tx::TxTail,
) -> io::Result<ShardCheck> {
    let path = dir::log_path(dir, shard);
    let with = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let mut out = ShardCheck {
        path: path.clone(),
        state: ShardState::Ok,
        records: 0,
        repair: None,
    };
    match log_state(dir, m, shard)? {
        LogState::Fine => {}
        LogState::Missing if m.format == 1 => {
            out.state = ShardState::NotCreated;
            return Ok(out);
        }
        LogState::Missing => {
            out.state = ShardState::Missing;
            if repair {
                out.repair = Some(recreate(dir, m, shard, None)?);
            }
            return Ok(out);
        }
        LogState::Partial(len) if m.format == 1 => {
            // A creation cut short, in a format 1 directory: the upgrade writes it anew.
            out.state = ShardState::TornTail {
                offset: 0,
                bytes: len,
            };
            return Ok(out);
        }
        LogState::Partial(len) => {
            out.state = ShardState::Emptied { len };
            if repair {
                let backup = if len > 0 {
                    Some(backup_copy(&path).map_err(with)?)
                } else {
                    None
                };
                out.repair = Some(recreate(dir, m, shard, backup)?);
            }
            return Ok(out);
        }
        LogState::BadHeader(why) => {
            out.state = ShardState::BadHeader(why);
            return Ok(out);
        }
        LogState::Foreign(why) => {
            out.state = ShardState::Foreign(why);
            return Ok(out);
        }
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .write(repair)
        .open(&path)
        .map_err(with)?;
    let mut txs = super::tx::TxReplay::new(|_, _| {});
    let scanned = scan(&file, &mut |db, r| txs.push(db, r)).map_err(with)?;
    *tx = txs.finish();
    let (state, records, cut) = match scanned {
        Scan::Clean { records, .. } => (ShardState::Ok, records, None),
        Scan::Header(h) => {
            // The header was read a moment ago; it changed under us.
            let why = match h {
                HeaderCheck::Bad(why) => why,
                _ => "the file changed while it was checked".into(),
            };
            (ShardState::BadHeader(why), 0, None)
        }
        Scan::Bad {
            records,
            good_end,
            reason,
            verdict,
            file_len,
        } => {
            let lost_bytes = file_len - good_end;
            let state = match verdict {
                Verdict::Torn => ShardState::TornTail {
                    offset: good_end,
                    bytes: lost_bytes,
                },
                Verdict::DamagedTail => ShardState::DamagedTail {
                    offset: good_end,
                    reason: describe(reason),
                    lost_bytes,
                },
                Verdict::Middle(next) => ShardState::Corrupt {
                    offset: good_end,
                    reason: describe(reason),
                    next_valid: next,
                    lost_bytes,
                },
            };
            (state, records, Some((good_end, file_len)))
        }
    };
    out.state = state;
    out.records = records;
    if let (true, Some((at, len))) = (repair, cut) {
        out.repair = Some(cut_log(&path, &file, at, len).map_err(with)?);
    }
    Ok(out)
}

fn describe(b: BadFrame) -> String {
    b.to_string()
}

/// Creates shard `shard`'s log anew (header only), replacing what is there.
fn recreate(dir: &Path, m: &Manifest, shard: usize, backup: Option<PathBuf>) -> io::Result<Repair> {
    let path = dir::log_path(dir, shard);
    let id = match m.id {
        Some(d) => super::header::LogId {
            dir: d,
            shard: shard as u32,
            shards: m.shards as u32,
        },
        None => unreachable!("format 1 logs are created by the upgrade, not repaired"),
    };
    dir::create_log(&path, &id, true)?;
    Ok(Repair {
        backup,
        cut_at: super::header::HEADER_LEN as u64,
        bytes_cut: 0,
    })
}

/// Copies `path` to `path.corrupt-<unix time>` (a free name), fsynced.
fn backup_copy(path: &Path) -> io::Result<PathBuf> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".corrupt-{now}"));
    let mut backup = PathBuf::from(name);
    let mut n = 1;
    while backup.exists() {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".corrupt-{now}.{n}"));
        backup = PathBuf::from(name);
        n += 1;
    }
    fs::copy(path, &backup).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot copy to {}: {e}", backup.display()),
        )
    })?;
    fs::File::open(&backup)?.sync_all()?;
    Ok(backup)
}

/// Copies `path` aside, then truncates it to `at`.
fn cut_log(path: &Path, file: &fs::File, at: u64, len: u64) -> io::Result<Repair> {
    let backup = backup_copy(path)?;
    file.set_len(at)?;
    file.sync_all()?;
    dir::sync_parent(path)?;
    Ok(Repair {
        backup: Some(backup),
        cut_at: at,
        bytes_cut: len - at,
    })
}
