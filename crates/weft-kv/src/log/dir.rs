//! The data directory: its lock, its manifest, and where each shard's log lives.
//!
//! ```text
//! DIR/                    mode 0700
//!   LOCK                  flock(LOCK_EX) by the process using the directory; holds its pid
//!   weft-kv.meta          the manifest (below)
//!   shard-000.log ...     one append-only log per shard (see `log/mod.rs`)
//! ```
//!
//! **The lock.** [`DataDir::open`] takes an exclusive, non-blocking `flock` on `LOCK`
//! and keeps it for as long as the [`DataDir`] lives, so two servers (or a server and
//! an embedded store, or `check --repair`) never write the same logs. `flock` locks
//! belong to an open file description: a second `open` in the same process is refused
//! too, and the kernel drops the lock when the process dies however it dies (a stale
//! `LOCK` file is harmless). The pid written into it is only for the error message.
//!
//! **The manifest** fixes the number of shards when the directory is created (keys
//! map to shards by hash modulo that number, so a restart with another number of
//! workers must keep it) and names every log the directory holds, and the directory's
//! identity, a random id:
//!
//! ```text
//! weft-kv data directory
//! format 3
//! id 6b0f3c...                  32 hex digits, drawn at creation
//! shards 2
//! log shard-000.log
//! log shard-001.log
//! ```
//!
//! **The directory proves it is whole.** Each log's header names its shard, the shard
//! count and the directory's id (header.rs). Before anything is read, [`DataDir::open`]
//! checks that every log the manifest names is there with a header naming this
//! directory and that shard, and that no other `shard-NNN.log` lies beside them. A log
//! missing, emptied, from another directory or shard, or one too many, or logs without
//! a manifest, stop the start with the file and what to do: so a lost shard is never
//! taken for an empty one. `weft kv check` reports the same findings (check.rs).
//!
//! **Creation** writes every log (its header, fsynced), fsyncs the directory, then
//! writes the manifest (to a temporary file, fsynced, renamed, directory fsynced): the
//! manifest's appearance is the moment the directory exists. Logs without a manifest
//! that hold no record are a creation cut short and are created again.
//!
//! **Format 1** directories (a manifest with `format 1` and `shards N` only, logs with
//! the 16-byte header) are upgraded when a server or a store opens them: each log is
//! copied behind a new header to `shard-NNN.log.upgrade`, fsynced and renamed over the
//! log, then the new manifest is written. A crash midway leaves a format 1 manifest
//! and logs of either header; the next open finishes the work (logs already upgraded
//! give the id back). `check` reads format 1 as it is.
//!
//! **Format 2** directories (logs of strings in database 0 only, headers of version 2)
//! are upgraded in place: format 2 records are format 3 records, so only each log's
//! header changes. It is rewritten at offset 0 with version 3 (40 bytes in the file's
//! first sector: a crash leaves the old header or the new one, and both are read) and
//! fsynced, then the manifest is written with `format 3`. A crash midway leaves a
//! format 2 manifest over logs of either version; the next open finishes. A weft-kv
//! that knows only format 2 refuses the upgraded directory by its manifest, instead
//! of taking records of other types for damage.
//!
//! **Leftovers.** A `shard-NNN.log.rewrite` file is a compaction that did not publish
//! (the process died before the rename), a `.upgrade` file an upgrade that did not: the
//! shard's log is complete either way, so opening for service removes them, with a
//! line on stderr. `check` only reports them.

use super::header::{self, DirId, HeaderCheck, LogId, HEADER_LEN, V1_HEADER_LEN};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The manifest's file name.
pub const MANIFEST: &str = "weft-kv.meta";
/// The lock file's name.
pub const LOCK: &str = "LOCK";
/// The manifest format this code writes.
pub const FORMAT: u32 = 3;
/// The most shards a directory may have.
pub const MAX_SHARDS: usize = 4096;

/// An open, locked data directory (the lock is released on drop).
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    shards: usize,
    id: DirId,
    /// Holds the flock.
    _lock: fs::File,
    leftovers: Vec<PathBuf>,
    upgraded: bool,
}

impl Drop for DataDir {
    /// Unlocks explicitly rather than by closing the file: a `flock` belongs to the open
    /// file description, which a child process forked meanwhile (between its fork and
    /// its exec) shares, so closing our descriptor alone could leave the directory
    /// locked for a moment after we are done with it.
    fn drop(&mut self) {
        // SAFETY: `flock` on a descriptor this struct owns; no memory is involved.
        unsafe { libc::flock(self._lock.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn err(kind: io::ErrorKind, msg: String) -> io::Error {
    io::Error::new(kind, msg)
}

/// Shard `shard`'s log in `dir`: `dir/shard-NNN.log`.
pub fn log_path(dir: &Path, shard: usize) -> PathBuf {
    dir.join(log_name(shard))
}

fn log_name(shard: usize) -> String {
    format!("shard-{shard:03}.log")
}

impl DataDir {
    /// Opens (creating it with mode 0700 if missing) the data directory at `path`,
    /// locks it, reads its manifest, or creates the directory's logs and manifest with
    /// `default_shards` shards if it has none yet, upgrades a format 1 directory, checks
    /// that the directory is whole (module doc), and removes leftovers.
    ///
    /// Errors: another process (or another `DataDir` in this one) holds the lock; the
    /// manifest is damaged or of an unknown format; a log is missing, emptied, not this
    /// directory's or not named by the manifest (each with the file and what to do);
    /// `default_shards` is 0 or above [`MAX_SHARDS`] when a directory is to be created;
    /// I/O errors (with the path).
    pub fn open(path: &Path, default_shards: usize) -> io::Result<DataDir> {
        if !path.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(|e| {
                    err(
                        e.kind(),
                        format!("cannot create data directory {}: {e}", path.display()),
                    )
                })?;
        }
        let lock = lock(path, true)?.expect("a lock that may create its file");
        let mut survey = Survey::read(path)?;
        let mut upgraded = false;
        let manifest = match survey.manifest.take() {
            Some(m) => m?,
            None => {
                let with_data = survey.logs_with_data()?;
                if !with_data.is_empty() {
                    return Err(err(
                        io::ErrorKind::InvalidData,
                        no_manifest_message(path, &with_data),
                    ));
                }
                if default_shards == 0 || default_shards > MAX_SHARDS {
                    return Err(err(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "a data directory needs 1 to {MAX_SHARDS} shards, not {default_shards}"
                        ),
                    ));
                }
                // Logs without a manifest that hold no record: a creation cut short.
                for p in survey.logs.values() {
                    fs::remove_file(p).map_err(|e| {
                        err(e.kind(), format!("cannot remove {}: {e}", p.display()))
                    })?;
                }
                create(path, default_shards)?
            }
        };
        let manifest = if manifest.format == 1 {
            let m = upgrade(path, &manifest, &survey)?;
            upgraded = true;
            m
        } else {
            manifest
        };
        let survey = Survey::read(path)?;
        let manifest = if manifest.format == 2 && problems(path, &manifest, &survey)?.is_empty() {
            upgraded = true;
            upgrade_2(path, &manifest)?
        } else {
            manifest
        };
        let survey = Survey::read(path)?;
        let problems = problems(path, &manifest, &survey)?;
        if !problems.is_empty() {
            let mut msg = format!(
                "the data directory {} is not whole; nothing was changed:",
                path.display()
            );
            for p in &problems {
                msg.push_str("\n  ");
                msg.push_str(p);
            }
            return Err(err(io::ErrorKind::InvalidData, msg));
        }
        let id = manifest.id.expect("a format 2 or 3 manifest has an id");
        let mut dir = DataDir {
            path: path.to_path_buf(),
            shards: manifest.shards,
            id,
            _lock: lock,
            leftovers: Vec::new(),
            upgraded,
        };
        for left in &survey.leftovers {
            match fs::remove_file(left) {
                Ok(()) => {
                    eprintln!(
                        "weft-kv: removed {}, left by {} that did not finish (the shard's log is complete)",
                        left.display(),
                        leftover_of(left)
                    );
                    dir.leftovers.push(left.clone());
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(err(
                        e.kind(),
                        format!("cannot remove {}: {e}", left.display()),
                    ))
                }
            }
        }
        if !dir.leftovers.is_empty() {
            sync_dir(path)?;
        }
        Ok(dir)
    }

    /// The number of shards (fixed when the directory was created).
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's identity (in its manifest and every log's header).
    pub fn id(&self) -> DirId {
        self.id
    }

    /// What shard `shard`'s log header says.
    pub fn log_id(&self, shard: usize) -> LogId {
        LogId {
            dir: self.id,
            shard: shard as u32,
            shards: self.shards as u32,
        }
    }

    /// Shard `shard`'s log: `DIR/shard-NNN.log`.
    pub fn log_path(&self, shard: usize) -> PathBuf {
        log_path(&self.path, shard)
    }

    /// Shard `shard`'s compaction temporary file: `DIR/shard-NNN.log.rewrite`.
    pub fn rewrite_path(&self, shard: usize) -> PathBuf {
        self.path.join(format!("shard-{shard:03}.log.rewrite"))
    }

    /// The compaction or upgrade leftovers this open removed.
    pub fn leftovers_removed(&self) -> &[PathBuf] {
        &self.leftovers
    }

    /// Whether this open upgraded a directory of an older format.
    pub fn upgraded(&self) -> bool {
        self.upgraded
    }
}

/// The manifest's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub format: u32,
    pub shards: usize,
    /// `None` in format 1 only.
    pub id: Option<DirId>,
}

/// What a data directory holds, read without changing anything.
#[derive(Debug)]
pub(crate) struct Survey {
    /// The manifest (`None`: there is none; `Some(Err)`: it cannot be used).
    pub manifest: Option<io::Result<Manifest>>,
    /// Every `shard-NNN.log` file, by shard number.
    pub logs: BTreeMap<usize, PathBuf>,
    /// `.rewrite` and `.upgrade` files, and a manifest's temporary file.
    pub leftovers: Vec<PathBuf>,
}

impl Survey {
    /// Lists `dir` and reads its manifest.
    pub fn read(dir: &Path) -> io::Result<Survey> {
        let path = dir.join(MANIFEST);
        let manifest = match fs::read(&path) {
            Ok(text) => Some(parse_manifest(&path, &text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => Some(Err(err(
                e.kind(),
                format!("cannot read {}: {e}", path.display()),
            ))),
        };
        let mut logs = BTreeMap::new();
        let mut leftovers = Vec::new();
        let entries = fs::read_dir(dir)
            .map_err(|e| err(e.kind(), format!("cannot list {}: {e}", dir.display())))?;
        for e in entries {
            let e = e.map_err(|e| err(e.kind(), format!("cannot list {}: {e}", dir.display())))?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(n) = shard_number(name) {
                logs.insert(n, e.path());
            } else if name == format!("{MANIFEST}.tmp")
                || [".log.rewrite", ".log.upgrade"].iter().any(|end| {
                    name.strip_suffix(end)
                        .is_some_and(|s| shard_number(&format!("{s}.log")).is_some())
                })
            {
                leftovers.push(e.path());
            }
        }
        leftovers.sort();
        Ok(Survey {
            manifest,
            logs,
            leftovers,
        })
    }

    /// The logs that hold records (or a header that is not a weft-kv log's, which may
    /// be anything): what starting without a manifest would lose.
    pub fn logs_with_data(&self) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for p in self.logs.values() {
            let (check, len) = read_header(p)?;
            let empty = match check {
                HeaderCheck::Partial => true,
                h @ HeaderCheck::Valid(_) => len <= h.header_len().unwrap() as u64,
                HeaderCheck::Bad(_) => false,
            };
            if !empty {
                out.push(p.clone());
            }
        }
        Ok(out)
    }
}

/// What left a leftover file behind, for the messages.
pub(crate) fn leftover_of(path: &Path) -> &'static str {
    let name = path.as_os_str().to_string_lossy();
    if name.ends_with(".rewrite") {
        "a compaction"
    } else if name.ends_with(".upgrade") {
        "an upgrade"
    } else {
        "a manifest's writing"
    }
}

/// The shard number of a log's file name (`shard-007.log`: 7), if it is one as this
/// code names them.
fn shard_number(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("shard-")?.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 9 {
        return None;
    }
    let n: usize = digits.parse().ok()?;
    (log_name(n) == name).then_some(n)
}

/// Reads the first bytes of `path`: the header's verdict and the file's length.
pub(crate) fn read_header(path: &Path) -> io::Result<(HeaderCheck, u64)> {
    let with = |e: io::Error| err(e.kind(), format!("cannot read {}: {e}", path.display()));
    let f = fs::File::open(path).map_err(with)?;
    let len = f.metadata().map_err(with)?.len();
    let mut first = Vec::with_capacity(HEADER_LEN);
    f.take(HEADER_LEN as u64)
        .read_to_end(&mut first)
        .map_err(with)?;
    Ok((header::check(&first), len))
}

/// How one log the manifest names stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LogState {
    /// Its header names this directory and shard (or it is a version 1 log in a
    /// format 1 directory).
    Fine,
    /// There is no file.
    Missing,
    /// The file holds this many bytes, fewer than a header, all of them a header's.
    Partial(u64),
    /// Not a weft-kv log header.
    BadHeader(String),
    /// A valid header that names another directory, shard or shard count.
    Foreign(String),
}

/// Checks shard `shard`'s log against the manifest.
pub(crate) fn log_state(dir: &Path, m: &Manifest, shard: usize) -> io::Result<LogState> {
    let path = log_path(dir, shard);
    let (check, len) = match read_header(&path) {
        Ok(x) => x,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(LogState::Missing),
        Err(e) => return Err(e),
    };
    Ok(match check {
        HeaderCheck::Partial => LogState::Partial(len),
        HeaderCheck::Bad(why) => LogState::BadHeader(why),
        HeaderCheck::Valid(None) if m.format == 1 => LogState::Fine,
        HeaderCheck::Valid(None) => LogState::Foreign(format!(
            "its header is of format 1 (it names no directory), in a format {} directory",
            m.format
        )),
        HeaderCheck::Valid(Some(id)) => {
            let want = (shard as u32, m.shards as u32);
            let dir_ok = m.id.is_none_or(|d| d == id.dir);
            if dir_ok && (id.shard, id.shards) == want {
                LogState::Fine
            } else {
                let mut why = format!(
                    "its header says it is shard {} of {} of the data directory {}",
                    id.shard, id.shards, id.dir
                );
                match m.id {
                    Some(d) => why.push_str(&format!(
                        ", but this file is shard {shard} of {} of the data directory {d}",
                        m.shards
                    )),
                    None => {
                        why.push_str(&format!(", but this file is shard {shard} of {}", m.shards))
                    }
                }
                LogState::Foreign(why)
            }
        }
    })
}

/// The logs beside the manifest's: `shard-NNN.log` files numbered past its count.
pub(crate) fn extra_logs(m: &Manifest, s: &Survey) -> Vec<PathBuf> {
    s.logs.range(m.shards..).map(|(_, p)| p.clone()).collect()
}

/// Everything that stops a start (module doc), one line each with the file and what
/// to do; `check` reports the same findings.
fn problems(dir: &Path, m: &Manifest, s: &Survey) -> io::Result<Vec<String>> {
    let repair = format!("`weft kv check --repair --dir {}`", dir.display());
    let mut out = Vec::new();
    for shard in 0..m.shards {
        let path = log_path(dir, shard).display().to_string();
        match log_state(dir, m, shard)? {
            LogState::Fine => {}
            LogState::Missing => out.push(format!(
                "{path} is missing: the manifest names it as shard {shard} of {}, which holds \
                 that shard's keys. Put it back (from a backup), or run {repair} to start that \
                 shard empty (its keys are lost)",
                m.shards
            )),
            LogState::Partial(len) => out.push(format!(
                "{path} holds {len} bytes, less than a log header: it was emptied or cut, and \
                 shard {shard}'s keys are not in it. Put it back from a backup, or run {repair} \
                 to start that shard empty (its keys are lost; a copy of the file is kept)"
            )),
            LogState::BadHeader(why) => out.push(format!(
                "{path}: bad log header: {why}. If the file is not a weft-kv log, move it out \
                 of the data directory"
            )),
            LogState::Foreign(why) => out.push(format!(
                "{path}: {why}: it is not this directory's log. Put this directory's own file \
                 back, or move this one away and run {repair} to start shard {shard} empty"
            )),
        }
    }
    for p in extra_logs(m, s) {
        out.push(format!(
            "{}: the manifest names {} shard logs (shard-000.log to {}), not this one, which \
             may hold keys the shards would not see. Move it out of the data directory, or put \
             back the manifest that names it",
            p.display(),
            m.shards,
            log_name(m.shards - 1)
        ));
    }
    Ok(out)
}

/// The message for logs with data but no manifest.
fn no_manifest_message(dir: &Path, logs: &[PathBuf]) -> String {
    let names: Vec<String> = logs
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    format!(
        "{} holds shard logs with data ({}) but no manifest ({MANIFEST}): starting would \
         ignore them. Nothing was changed. Put the manifest back from a backup, or run \
         `weft kv check --repair --dir {}` to rebuild it from the logs' headers",
        dir.display(),
        names.join(", "),
        dir.display()
    )
}

/// A manifest rebuilt from the headers of the logs present: they must all be of
/// format 2 or 3 and agree on the directory and the shard count. `Err` says why not.
pub(crate) fn rebuild_manifest(s: &Survey) -> io::Result<Result<Manifest, String>> {
    let mut found: Option<(DirId, u32)> = None;
    for (&n, p) in &s.logs {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        let (check, _) = read_header(p)?;
        let id = match check {
            HeaderCheck::Valid(Some(id)) => id,
            HeaderCheck::Valid(None) => {
                return Ok(Err(format!(
                    "{name} has a format 1 header, which does not say how many shards there are"
                )))
            }
            _ => return Ok(Err(format!("{name} has no valid log header"))),
        };
        if id.shard as usize != n {
            return Ok(Err(format!(
                "{name}'s header says it is shard {}",
                id.shard
            )));
        }
        match found {
            None => found = Some((id.dir, id.shards)),
            Some(f) if f == (id.dir, id.shards) => {}
            Some((d, c)) => {
                return Ok(Err(format!(
                    "the logs disagree: one says shard of {c} of directory {d}, {name} says of {} of {}",
                    id.shards, id.dir
                )))
            }
        }
    }
    let Some((dir, shards)) = found else {
        return Ok(Err("there is no log".into()));
    };
    let shards = shards as usize;
    if shards == 0 || shards > MAX_SHARDS || s.logs.range(shards..).next().is_some() {
        return Ok(Err(format!(
            "the logs' headers say {shards} shards, which their names do not fit"
        )));
    }
    Ok(Ok(Manifest {
        format: FORMAT,
        shards,
        id: Some(dir),
    }))
}

/// Creates a new directory's logs, then its manifest.
fn create(dir: &Path, shards: usize) -> io::Result<Manifest> {
    let m = Manifest {
        format: FORMAT,
        shards,
        id: Some(DirId::random()),
    };
    for shard in 0..shards {
        create_log(&log_path(dir, shard), &log_id(&m, shard), false)?;
    }
    sync_dir(dir)?;
    write_manifest(dir, &m)?;
    Ok(m)
}

fn log_id(m: &Manifest, shard: usize) -> LogId {
    LogId {
        dir: m.id.expect("a format 2 manifest"),
        shard: shard as u32,
        shards: m.shards as u32,
    }
}

/// Upgrades a format 1 directory (module doc) and returns its new manifest.
fn upgrade(dir: &Path, old: &Manifest, s: &Survey) -> io::Result<Manifest> {
    let n = old.shards;
    let bad = |msg: String| {
        err(
            io::ErrorKind::InvalidData,
            format!(
                "cannot upgrade the data directory {} to format {FORMAT}; nothing was changed: {msg}",
                dir.display()
            ),
        )
    };
    if let Some(p) = extra_logs(old, s).first() {
        return Err(bad(format!(
            "{} is not one of the manifest's {n} shards and may hold keys they would not see; \
             move it out of the data directory, or put back the manifest that names it",
            p.display()
        )));
    }
    // Look at every log first, so a refusal changes nothing.
    let mut id = None;
    let mut states = Vec::with_capacity(n);
    for shard in 0..n {
        let path = log_path(dir, shard);
        let state = match read_header(&path) {
            Ok((h, _)) => Some(h),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        match &state {
            Some(HeaderCheck::Bad(why)) => {
                return Err(bad(format!(
                    "{}: bad log header: {why}; if the file is not a weft-kv log, move it out of the data directory",
                    path.display()
                )))
            }
            Some(HeaderCheck::Valid(Some(l))) => {
                // Upgraded by an open that did not finish: it gives the id back.
                if l.shard as usize != shard || l.shards as usize != n || id.is_some_and(|d| d != l.dir) {
                    return Err(bad(format!(
                        "{}: its header says it is shard {} of {} of the data directory {}, \
                         not shard {shard} of {n} of this one; put back this directory's own file",
                        path.display(),
                        l.shard,
                        l.shards,
                        l.dir
                    )));
                }
                id = Some(l.dir);
            }
            _ => {}
        }
        states.push(state);
    }
    let m = Manifest {
        format: FORMAT,
        shards: n,
        id: Some(id.unwrap_or_else(DirId::random)),
    };
    for (shard, state) in states.into_iter().enumerate() {
        let path = log_path(dir, shard);
        match state {
            Some(HeaderCheck::Valid(Some(_))) => {}
            Some(HeaderCheck::Valid(None)) => copy_upgraded(&path, &log_id(&m, shard))?,
            // None yet, or a creation cut short: a log that holds nothing.
            _ => create_log(&path, &log_id(&m, shard), true)?,
        }
    }
    sync_dir(dir)?;
    write_manifest(dir, &m)?;
    eprintln!(
        "weft-kv: upgraded the data directory {} to format {FORMAT}: its manifest and each log's header now name the directory and the shard",
        dir.display()
    );
    Ok(m)
}

/// Upgrades a whole format 2 directory (module doc): each log's version 2 header is
/// rewritten in place as version 3 and fsynced, then the manifest says format 3.
fn upgrade_2(dir: &Path, old: &Manifest) -> io::Result<Manifest> {
    let m = Manifest {
        format: FORMAT,
        ..old.clone()
    };
    for shard in 0..m.shards {
        let path = log_path(dir, shard);
        let with = |e: io::Error| {
            err(
                e.kind(),
                format!(
                    "cannot upgrade {} to format {FORMAT} (its header is rewritten in place): {e}",
                    path.display()
                ),
            )
        };
        let mut first = [0u8; HEADER_LEN];
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(with)?;
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut first, 0).map_err(with)?;
        if header::version(&first) == Some(header::V2) {
            std::os::unix::fs::FileExt::write_all_at(&f, &header::header(&log_id(&m, shard)), 0)
                .map_err(with)?;
            f.sync_data().map_err(with)?;
        }
    }
    write_manifest(dir, &m)?;
    eprintln!(
        "weft-kv: upgraded the data directory {} to format {FORMAT}: its logs may now hold \
         values of every type and database (a weft-kv that knows only format 2 refuses it)",
        dir.display()
    );
    Ok(m)
}

/// Rewrites a version 1 log behind a version 2 header: a copy, fsynced, renamed over.
fn copy_upgraded(path: &Path, id: &LogId) -> io::Result<()> {
    let tmp = upgrade_path(path);
    let run = || -> io::Result<()> {
        let mut from = fs::File::open(path)?;
        from.seek(SeekFrom::Start(V1_HEADER_LEN as u64))?;
        let mut to = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        to.write_all(&header::header(id))?;
        io::copy(&mut from, &mut to)?;
        to.sync_all()?;
        fs::rename(&tmp, path)
    };
    run().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        err(
            e.kind(),
            format!(
                "cannot upgrade {} (through {}): {e}",
                path.display(),
                tmp.display()
            ),
        )
    })
}

fn upgrade_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".upgrade");
    PathBuf::from(name)
}

/// Opens and flocks `dir/LOCK`. For service (`for_writing`) it creates the file and
/// writes our pid into it; otherwise (a check that changes nothing) it creates and
/// writes nothing, and returns `None` if there is no `LOCK` file (no process ever used
/// the directory, so none uses it now).
pub(crate) fn lock(dir: &Path, for_writing: bool) -> io::Result<Option<fs::File>> {
    let path = dir.join(LOCK);
    let opened = fs::OpenOptions::new()
        .read(true)
        .write(for_writing)
        .create(for_writing)
        .truncate(false)
        .mode(0o600)
        .open(&path);
    let mut f = match opened {
        Ok(f) => f,
        Err(e) if !for_writing && e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(err(
                e.kind(),
                format!("cannot open {}: {e}", path.display()),
            ))
        }
    };
    // A lock that names this process, taken by a descriptor this process has closed,
    // can outlive the close for a moment: a child forked by another thread holds a copy
    // of the descriptor until it execs (the file is close-on-exec). Such a lock is
    // retried for up to 2 s; a directory this process really has open still fails.
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(2);
    // SAFETY: flock on a descriptor we own; no memory is passed.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut s = String::new();
            let _ = std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0));
            let _ = f.read_to_string(&mut s);
            let ours = s.trim().parse::<u32>() == Ok(std::process::id());
            if ours && std::time::Instant::now() < patience {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            let pid = match s.trim().parse::<u32>() {
                Ok(p) if p == std::process::id() => format!("pid {p}, this process"),
                Ok(p) => format!("pid {p}"),
                Err(_) => "pid unknown".to_string(),
            };
            return Err(err(
                io::ErrorKind::WouldBlock,
                format!(
                    "data directory {} is in use by another weft-kv process ({pid}); stop it or choose another --dir",
                    dir.display()
                ),
            ));
        }
        return Err(err(
            e.kind(),
            format!("cannot lock {}: {e}", path.display()),
        ));
    }
    if for_writing {
        f.set_len(0)?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    }
    Ok(Some(f))
}

pub(crate) fn parse_manifest(path: &Path, text: &[u8]) -> io::Result<Manifest> {
    let bad = |why: String| {
        err(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {why}; a weft-kv manifest holds the lines `format {FORMAT}`, `id ...`, \
                 `shards N` and one `log shard-NNN.log` per shard. Nothing was changed. Restore \
                 it from a backup, or remove it and run `weft kv check --repair --dir {}` to \
                 rebuild it from the logs' headers",
                path.display(),
                path.parent().unwrap_or(Path::new(".")).display()
            ),
        )
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not text".into()))?;
    let (mut format, mut shards, mut id, mut logs) = (None, None, None, Vec::new());
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line == "weft-kv data directory")
        {
            continue;
        }
        let (k, v) = line
            .split_once(' ')
            .ok_or_else(|| bad(format!("line {}: {line:?} is not `key value`", i + 1)))?;
        let v = v.trim();
        let num = || {
            v.parse::<u64>()
                .map_err(|_| bad(format!("line {}: {v:?} is not a number", i + 1)))
        };
        match k {
            "format" => format = Some(num()?),
            "shards" => shards = Some(num()?),
            "id" => {
                id =
                    Some(DirId::parse(v).ok_or_else(|| {
                        bad(format!("line {}: {v:?} is not a directory id", i + 1))
                    })?)
            }
            "log" => logs.push(v.to_string()),
            _ => return Err(bad(format!("line {}: unknown key {k:?}", i + 1))),
        }
    }
    let format = match format {
        None => return Err(bad("no `format` line".into())),
        Some(f) if (1..=FORMAT as u64).contains(&f) => f as u32,
        Some(f) => {
            return Err(err(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: data format {f} is not known to this weft-kv (it reads formats 1 to \
                     {FORMAT}); use the weft-kv that wrote this directory",
                    path.display()
                ),
            ))
        }
    };
    let shards = match shards {
        None => return Err(bad("no `shards` line".into())),
        Some(n) if n == 0 || n > MAX_SHARDS as u64 => {
            return Err(bad(format!("shards {n} is not between 1 and {MAX_SHARDS}")))
        }
        Some(n) => n as usize,
    };
    if format == 1 {
        if id.is_some() || !logs.is_empty() {
            return Err(bad("a format 1 manifest has no `id` or `log` lines".into()));
        }
        return Ok(Manifest {
            format,
            shards,
            id: None,
        });
    }
    let id = id.ok_or_else(|| bad("no `id` line".into()))?;
    let want: Vec<String> = (0..shards).map(log_name).collect();
    if logs != want {
        return Err(bad(format!(
            "it says `shards {shards}` but names {} logs ({}), where {shards} shards have the \
             logs shard-000.log to {}",
            logs.len(),
            if logs.is_empty() {
                "none".to_string()
            } else {
                logs.join(", ")
            },
            log_name(shards - 1)
        )));
    }
    Ok(Manifest {
        format,
        shards,
        id: Some(id),
    })
}

/// Writes `m` as the manifest: a temporary file, fsynced, renamed, directory fsynced.
pub(crate) fn write_manifest(dir: &Path, m: &Manifest) -> io::Result<()> {
    let path = dir.join(MANIFEST);
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let mut text = format!("weft-kv data directory\nformat {}\n", m.format);
    if let Some(id) = m.id {
        text.push_str(&format!("id {id}\n"));
    }
    text.push_str(&format!("shards {}\n", m.shards));
    if m.format >= 2 {
        for shard in 0..m.shards {
            text.push_str(&format!("log {}\n", log_name(shard)));
        }
    }
    let write = || -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(dir)
    };
    write().map_err(|e| err(e.kind(), format!("cannot write {}: {e}", path.display())))
}

/// fsyncs a directory (so a rename or a new file in it survives a crash).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| {
        err(
            e.kind(),
            format!("cannot fsync directory {}: {e}", dir.display()),
        )
    })
}

/// fsyncs the directory that holds `path` (the current directory for a bare name).
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => sync_dir(p),
        _ => sync_dir(Path::new(".")),
    }
}

/// Creates a log file at `path` holding just `id`'s header, fsynced. With `replace`,
/// through a temporary file renamed over `path` (so an existing file is replaced
/// whole or not at all) and the directory fsynced; without, the file must not exist
/// and the caller fsyncs the directory.
pub(crate) fn create_log(path: &Path, id: &LogId, replace: bool) -> io::Result<()> {
    let target = if replace {
        upgrade_path(path)
    } else {
        path.to_path_buf()
    };
    let run = || -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(replace)
            .create_new(!replace)
            .mode(0o600)
            .open(&target)?;
        f.write_all(&header::header(id))?;
        f.sync_all()?;
        if replace {
            fs::rename(&target, path)?;
            sync_parent(path)?;
        }
        Ok(())
    };
    run().map_err(|e| {
        if replace {
            let _ = fs::remove_file(&target);
        }
        err(e.kind(), format!("cannot create {}: {e}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "000102030405060708090a0b0c0d0e0f";

    #[test]
    fn manifest_parsing() {
        let p = Path::new("/x/weft-kv.meta");
        let two = format!(
            "weft-kv data directory\nformat 2\nid {ID}\nshards 2\nlog shard-000.log\nlog shard-001.log\n"
        );
        assert_eq!(
            parse_manifest(p, two.as_bytes()).unwrap(),
            Manifest {
                format: 2,
                shards: 2,
                id: DirId::parse(ID)
            }
        );
        assert_eq!(
            parse_manifest(p, b"weft-kv data directory\nformat 1\nshards 7\n").unwrap(),
            Manifest {
                format: 1,
                shards: 7,
                id: None
            }
        );
        assert_eq!(parse_manifest(p, b"shards 3\nformat 1").unwrap().shards, 3);
        let e = parse_manifest(p, b"format 9\nshards 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("format 9 is not known"), "{e}");
        // The shard count edited without the logs: refused, saying what is wrong.
        let edited = two.replace("shards 2", "shards 3");
        let e = parse_manifest(p, edited.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("says `shards 3` but names 2 logs"), "{e}");
        for bad in [
            &b"garbage"[..],
            b"format 1\n",
            b"format 1\nshards 0\n",
            b"format x\n",
            b"\xff\xfe",
            b"format 2\nshards 1\nlog shard-000.log\n",
            b"format 2\nid 12\nshards 1\nlog shard-000.log\n",
            b"format 1\nshards 1\nlog shard-000.log\n",
        ] {
            let e = parse_manifest(p, bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("/x/weft-kv.meta"), "{e}");
        }
    }

    #[test]
    fn log_names() {
        assert_eq!(shard_number("shard-000.log"), Some(0));
        assert_eq!(shard_number("shard-1234.log"), Some(1234));
        for not in [
            "shard-1.log",
            "shard-000.log.rewrite",
            "shard-x.log",
            "shard-.log",
        ] {
            assert_eq!(shard_number(not), None, "{not}");
        }
    }
}
