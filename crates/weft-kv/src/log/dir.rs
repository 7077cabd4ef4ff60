//! The data directory: its lock, its manifest, and where each shard's log lives.
//!
//! ```text
//! DIR/                    mode 0700
//!   LOCK                  flock(LOCK_EX) by the process using the directory; holds its pid
//!   weft-kv.meta          the manifest: "weft-kv data directory\nformat 1\nshards N\n"
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
//! **The manifest** fixes the number of shards when the directory is created. Keys map
//! to shards by hash modulo that number, so a restart with another number of workers
//! must keep it (workers then own several shards, or none). The manifest is written to
//! a temporary file, fsynced and renamed, then the directory is fsynced: it is either
//! absent or whole.
//!
//! **Leftovers.** A `shard-NNN.log.rewrite` file is a compaction that did not publish
//! (the process died before the rename): the shard's log is still complete, so the
//! leftover is removed on open, with a line on stderr.

use super::header::{self, HEADER_LEN};
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The manifest's file name.
pub const MANIFEST: &str = "weft-kv.meta";
/// The lock file's name.
pub const LOCK: &str = "LOCK";
/// The manifest format this code writes and reads.
pub const FORMAT: u32 = 1;
/// The most shards a directory may have.
pub const MAX_SHARDS: usize = 4096;

/// An open, locked data directory (the lock is released on drop).
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    shards: usize,
    /// Holds the flock.
    _lock: fs::File,
    leftovers: Vec<PathBuf>,
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

impl DataDir {
    /// Opens (creating it with mode 0700 if missing) the data directory at `path`,
    /// locks it, and reads its manifest, or writes one with `default_shards` shards if
    /// the directory has none yet. Removes compaction leftovers (see the module doc).
    ///
    /// Errors: another process (or another `DataDir` in this one) holds the lock; the
    /// manifest is damaged or of an unknown format; `default_shards` is 0 or above
    /// [`MAX_SHARDS`] when a manifest is to be created; I/O errors (with the path).
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
        Self::open_inner(path, Some(default_shards))
    }

    /// Opens an existing data directory (one with a manifest), locked, without
    /// creating anything: what `weft kv check` uses.
    pub fn open_existing(path: &Path) -> io::Result<DataDir> {
        if !path.is_dir() {
            return Err(err(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not a directory (no weft-kv data there)",
                    path.display()
                ),
            ));
        }
        Self::open_inner(path, None)
    }

    fn open_inner(path: &Path, default_shards: Option<usize>) -> io::Result<DataDir> {
        let lock = lock(path)?;
        let manifest = path.join(MANIFEST);
        let shards = match fs::read(&manifest) {
            Ok(text) => parse_manifest(&manifest, &text)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => match default_shards {
                None => {
                    return Err(err(
                        io::ErrorKind::NotFound,
                        format!(
                            "{} has no manifest ({MANIFEST}): it is not a weft-kv data directory",
                            path.display()
                        ),
                    ))
                }
                Some(n) => {
                    if n == 0 || n > MAX_SHARDS {
                        return Err(err(
                            io::ErrorKind::InvalidInput,
                            format!("a data directory needs 1 to {MAX_SHARDS} shards, not {n}"),
                        ));
                    }
                    write_manifest(path, n)?;
                    n
                }
            },
            Err(e) => {
                return Err(err(
                    e.kind(),
                    format!("cannot read {}: {e}", manifest.display()),
                ))
            }
        };
        let mut dir = DataDir {
            path: path.to_path_buf(),
            shards,
            _lock: lock,
            leftovers: Vec::new(),
        };
        for shard in 0..shards {
            let left = dir.rewrite_path(shard);
            match fs::remove_file(&left) {
                Ok(()) => {
                    eprintln!(
                        "weft-kv: removed {}, left by a compaction that did not finish (the shard's log is complete)",
                        left.display()
                    );
                    dir.leftovers.push(left);
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

    /// Shard `shard`'s log: `DIR/shard-NNN.log`.
    pub fn log_path(&self, shard: usize) -> PathBuf {
        self.path.join(format!("shard-{shard:03}.log"))
    }

    /// Shard `shard`'s compaction temporary file: `DIR/shard-NNN.log.rewrite`.
    pub fn rewrite_path(&self, shard: usize) -> PathBuf {
        self.path.join(format!("shard-{shard:03}.log.rewrite"))
    }

    /// The compaction leftovers this open removed.
    pub fn leftovers_removed(&self) -> &[PathBuf] {
        &self.leftovers
    }
}

/// Opens and flocks `dir/LOCK`, then writes our pid into it.
fn lock(dir: &Path) -> io::Result<fs::File> {
    let path = dir.join(LOCK);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| err(e.kind(), format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut s = String::new();
            let _ = f.read_to_string(&mut s);
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
    f.set_len(0)?;
    f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
    Ok(f)
}

fn parse_manifest(path: &Path, text: &[u8]) -> io::Result<usize> {
    let bad = |why: String| {
        err(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {why}; a weft-kv manifest holds the lines `format {FORMAT}` and `shards N` \
                 (restore it from a backup, or move the directory away to start empty)",
                path.display()
            ),
        )
    };
    let text = std::str::from_utf8(text).map_err(|_| bad("not text".into()))?;
    let (mut format, mut shards) = (None, None);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line == "weft-kv data directory")
        {
            continue;
        }
        let (k, v) = line
            .split_once(' ')
            .ok_or_else(|| bad(format!("line {}: {line:?} is not `key value`", i + 1)))?;
        let n: u64 = v
            .trim()
            .parse()
            .map_err(|_| bad(format!("line {}: {:?} is not a number", i + 1, v.trim())))?;
        match k {
            "format" => format = Some(n),
            "shards" => shards = Some(n),
            _ => return Err(bad(format!("line {}: unknown key {k:?}", i + 1))),
        }
    }
    match format {
        None => return Err(bad("no `format` line".into())),
        Some(f) if f != FORMAT as u64 => {
            return Err(err(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: data format {f} is not known to this weft-kv (it reads format {FORMAT}); \
                     use the weft-kv that wrote this directory",
                    path.display()
                ),
            ))
        }
        _ => {}
    }
    match shards {
        None => Err(bad("no `shards` line".into())),
        Some(n) if n == 0 || n > MAX_SHARDS as u64 => {
            Err(bad(format!("shards {n} is not between 1 and {MAX_SHARDS}")))
        }
        Some(n) => Ok(n as usize),
    }
}

fn write_manifest(dir: &Path, shards: usize) -> io::Result<()> {
    let path = dir.join(MANIFEST);
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let text = format!("weft-kv data directory\nformat {FORMAT}\nshards {shards}\n");
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

/// Creates a log file at `path` holding just the header, fsynced, and fsyncs its
/// directory. Fails if it exists.
pub(crate) fn create_log(path: &Path) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| err(e.kind(), format!("cannot create {}: {e}", path.display())))?;
    let h: [u8; HEADER_LEN] = header::header();
    f.write_all(&h)?;
    f.sync_all()?;
    sync_parent(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_parsing() {
        let p = Path::new("/x/weft-kv.meta");
        assert_eq!(
            parse_manifest(p, b"weft-kv data directory\nformat 1\nshards 7\n").unwrap(),
            7
        );
        assert_eq!(parse_manifest(p, b"shards 3\nformat 1").unwrap(), 3);
        let e = parse_manifest(p, b"format 9\nshards 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("format 9 is not known"), "{e}");
        for bad in [
            &b"garbage"[..],
            b"format 1\n",
            b"format 1\nshards 0\n",
            b"format x\n",
            b"\xff\xfe",
        ] {
            let e = parse_manifest(p, bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("/x/weft-kv.meta"), "{e}");
        }
    }
}
