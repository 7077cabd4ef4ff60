//! `weft kv check [--repair]`: report on each shard's log, and cut damaged ones.
//!
//! The check reads every log with the scan recovery uses (`recover.rs`), changing
//! nothing, and says per shard: ok with N records, a torn tail of N bytes (which the
//! next start cuts by itself), corruption at offset X and why (which stops start-up),
//! or a bad header. It takes the directory's lock ([`DataDir::open_existing`]), so it
//! refuses to run while a server or an embedded store uses the directory.
//!
//! **Repair** (as `redis-check-aof --fix`): a damaged log is first copied to
//! `shard-NNN.log.corrupt-<unix time>` (fsynced), then truncated at the first bad
//! offset and fsynced. What followed the damage is lost, valid records included; the
//! report says how many bytes were cut, and the backup keeps them for whoever wants to
//! dig. A bad header is not repaired (the file may not be a weft-kv log at all).

use super::dir::{sync_parent, DataDir};
use super::header::HeaderCheck;
use super::recover::{scan, BadFrame, Scan};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the check found for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardState {
    /// Every frame is good.
    Ok,
    /// There is no log (the shard never wrote; start-up creates it).
    Missing,
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
    /// Not a weft-kv log header (never repaired).
    BadHeader(String),
}

/// A repair done on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The copy of the damaged file.
    pub backup: PathBuf,
    /// Where the log was cut (its new length).
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

/// The check of a whole data directory, one line per shard when displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckReport {
    /// The directory.
    pub dir: PathBuf,
    /// Per shard, in order.
    pub shards: Vec<ShardCheck>,
}

impl CheckReport {
    /// Whether every log is usable as it is now: ok, missing, torn (start-up cuts it),
    /// or repaired. False if a corrupt log or a bad header remains (exit status 1).
    pub fn usable(&self) -> bool {
        self.shards.iter().all(|s| match s.state {
            ShardState::Ok | ShardState::Missing | ShardState::TornTail { .. } => true,
            ShardState::Corrupt { .. } => s.repair.is_some(),
            ShardState::BadHeader(_) => false,
        })
    }

    /// Whether every log was found intact (no torn tail, corruption or bad header).
    pub fn clean(&self) -> bool {
        self.shards
            .iter()
            .all(|s| matches!(s.state, ShardState::Ok | ShardState::Missing))
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.shards {
            let name = s
                .path
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            write!(f, "{name}: ")?;
            match &s.state {
                ShardState::Ok => write!(f, "ok, {} records", s.records)?,
                ShardState::Missing => write!(f, "no log yet (created on start)")?,
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
                ShardState::BadHeader(why) => write!(f, "bad header: {why} (not repaired)")?,
            }
            match &s.repair {
                Some(r) => write!(
                    f,
                    "; repaired: cut {} bytes at offset {}, backup in {}",
                    r.bytes_cut,
                    r.cut_at,
                    r.backup.display()
                )?,
                None if matches!(s.state, ShardState::Corrupt { .. }) => write!(
                    f,
                    "; run `weft kv check --repair --dir {}` to cut it there (a backup copy is kept)",
                    self.dir.display()
                )?,
                None => {}
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Checks every shard's log in `dir` and, with `repair`, cuts damaged ones at their
/// first bad offset after copying them aside (see the module doc). Takes the
/// directory's lock: fails while a server or store uses it.
pub fn check(dir: &Path, repair: bool) -> io::Result<CheckReport> {
    let data = DataDir::open_existing(dir)?;
    let mut shards = Vec::with_capacity(data.shards());
    for shard in 0..data.shards() {
        shards.push(check_one(&data.log_path(shard), repair)?);
    }
    Ok(CheckReport {
        dir: dir.to_path_buf(),
        shards,
    })
}

fn check_one(path: &Path, repair: bool) -> io::Result<ShardCheck> {
    let with = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let file = match fs::OpenOptions::new().read(true).write(repair).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(ShardCheck {
                path: path.into(),
                state: ShardState::Missing,
                records: 0,
                repair: None,
            })
        }
        Err(e) => return Err(with(e)),
    };
    let (state, records, cut) = match scan(&file, &mut |_| {}).map_err(with)? {
        Scan::Clean { records, .. } => (ShardState::Ok, records, None),
        Scan::Header(HeaderCheck::Partial) => (
            ShardState::TornTail {
                offset: 0,
                bytes: file.metadata()?.len(),
            },
            0,
            None,
        ),
        Scan::Header(h) => {
            let why = match h {
                HeaderCheck::Bad(why) => why,
                _ => "unreadable".into(),
            };
            (ShardState::BadHeader(why), 0, None)
        }
        Scan::Bad {
            records,
            good_end,
            next_valid: None,
            file_len,
            ..
        } => (
            ShardState::TornTail {
                offset: good_end,
                bytes: file_len - good_end,
            },
            records,
            Some((good_end, file_len)),
        ),
        Scan::Bad {
            records,
            good_end,
            reason,
            next_valid: Some(next),
            file_len,
        } => (
            ShardState::Corrupt {
                offset: good_end,
                reason: describe(reason),
                next_valid: next,
                lost_bytes: file_len - good_end,
            },
            records,
            Some((good_end, file_len)),
        ),
    };
    let repair = match (repair, cut) {
        (true, Some((at, len))) => Some(cut_log(path, &file, at, len).map_err(with)?),
        _ => None,
    };
    Ok(ShardCheck {
        path: path.into(),
        state,
        records,
        repair,
    })
}

fn describe(b: BadFrame) -> String {
    b.to_string()
}

/// Copies `path` aside, then truncates it to `at`.
fn cut_log(path: &Path, file: &fs::File, at: u64, len: u64) -> io::Result<Repair> {
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
    file.set_len(at)?;
    file.sync_all()?;
    sync_parent(path)?;
    Ok(Repair {
        backup,
        cut_at: at,
        bytes_cut: len - at,
    })
}
