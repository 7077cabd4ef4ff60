//! Compaction's file mechanics: writing a shard's live data to a temporary log and
//! publishing it in place of the old one.
//!
//! ```text
//! create   shard-NNN.log.rewrite   header written (any old leftover replaced)
//! append   frames ...              buffered, 1 MiB writes
//! sync     write what is buffered, fsync the temporary file (optional, repeatable)
//! finish   write the rest, fsync the temporary file,
//!          rename it over shard-NNN.log, fsync the directory,
//!          open a LogWriter at the new end
//! abort    remove the temporary file
//! ```
//!
//! A crash before the rename leaves the old log complete and a `.rewrite` leftover,
//! which `DataDir::open` removes. A crash after the rename but before the directory's
//! fsync leaves one of the two whole files under the name, both complete. The new log
//! is durable before it has a name, so no crash leaves a partial log under the log's
//! name.
//!
//! What goes into it is the caller's: a snapshot of the shard's keys as full-state
//! records, then the records appended to the old log since the snapshot began (full-
//! state records make replaying those over the snapshot exact; see `log/mod.rs`). The
//! caller swaps its old [`LogWriter`] for the one `finish` returns, and holds back its
//! group commit between appending that catch-up and the swap.
//!
//! I/O goes through `weft_runtime::fs` (it parks only the green thread on a worker; a
//! plain system call elsewhere); the rename and the directory fsync run in
//! `weft_runtime::blocking`.

use super::dir::{sync_dir, DataDir};
use super::header;
use super::writer::LogWriter;
use std::io;
use std::path::{Path, PathBuf};
use weft_runtime::fs::{File, OpenOptions};

const FLUSH_AT: usize = 1 << 20;

/// A compaction's temporary log (see the module doc).
#[derive(Debug)]
pub struct Rewriter {
    file: Option<File>,
    tmp: PathBuf,
    target: PathBuf,
    dir: PathBuf,
    buf: Vec<u8>,
    written: u64,
}

fn with(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

impl Rewriter {
    /// Creates `shard-NNN.log.rewrite` in `dir` (replacing any leftover), with the
    /// shard's log header (naming the shard and the directory).
    pub fn create(dir: &DataDir, shard: usize) -> io::Result<Rewriter> {
        if shard >= dir.shards() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "shard {shard} does not exist ({} has {})",
                    dir.path().display(),
                    dir.shards()
                ),
            ));
        }
        let tmp = dir.rewrite_path(shard);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut buf = Vec::with_capacity(FLUSH_AT + FLUSH_AT / 4);
        buf.extend_from_slice(&header::header(&dir.log_id(shard)));
        Ok(Rewriter {
            file: Some(file),
            tmp,
            target: dir.log_path(shard),
            dir: dir.path().to_path_buf(),
            buf,
            written: 0,
        })
    }

    /// Appends encoded frames (buffered).
    pub fn append(&mut self, frames: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(frames);
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// The temporary file's length so far, buffered bytes included.
    pub fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }

    /// Whether nothing but the header was appended.
    pub fn is_empty(&self) -> bool {
        self.len() <= header::HEADER_LEN as u64
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let f = self.file.as_ref().expect("open until finish or abort");
        f.write_all_at(&self.buf, self.written)
            .map_err(|e| with(e, "cannot write", &self.tmp))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes what is buffered and fsyncs the temporary file, which stays open for more
    /// appends: done before [`Rewriter::finish`], the fsync there only has what was
    /// appended since to write out.
    pub fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        let f = self.file.as_ref().expect("open until finish or abort");
        f.sync_data()
            .map_err(|e| with(e, "cannot fsync", &self.tmp))
    }

    /// Publishes the new log: flush, fsync, rename over the shard's log, fsync of the
    /// directory; returns a writer at its end. On an error the temporary file is
    /// removed and the old log stays in force.
    pub fn finish(mut self) -> io::Result<LogWriter> {
        let res = self.publish();
        if res.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        res?;
        LogWriter::open(&self.target)
    }

    fn publish(&mut self) -> io::Result<()> {
        self.flush()?;
        let f = self.file.take().expect("open until finish or abort");
        f.sync_all()
            .map_err(|e| with(e, "cannot fsync", &self.tmp))?;
        drop(f);
        let (tmp, target, dir) = (self.tmp.clone(), self.target.clone(), self.dir.clone());
        weft_runtime::blocking(move || {
            std::fs::rename(&tmp, &target).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot rename {} to {}: {e}",
                        tmp.display(),
                        target.display()
                    ),
                )
            })?;
            sync_dir(&dir)
        })
    }

    /// Drops the rewrite: removes the temporary file (the old log stays in force).
    /// Dropping a `Rewriter` without `finish` does the same.
    pub fn abort(self) {}
}

impl Drop for Rewriter {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let tmp = self.tmp.clone();
            let _ = weft_runtime::blocking(move || std::fs::remove_file(tmp));
        }
    }
}
