//! Appending to a shard's log.
//!
//! [`LogWriter::write`] writes one buffer (every record a shard buffered since the
//! previous call: group commit is the caller's) at the end of the log and, if asked,
//! makes it durable with `fdatasync`, so one fsync covers many commands.
//!
//! **Where the I/O runs.** On a weft green thread, a write with sync is one syslet of
//! two atoms, `pwrite64` then `fdatasync`; its first atom is `SYSLET_ASYNC`, so the
//! whole program goes to the io_uring chain engine, which submits both as one linked
//! io_uring chain (write, then fsync linked); on the threads I/O backend it runs on a
//! cachemiss thread. Only the green thread parks meanwhile. (The syslet owns a copy of
//! the buffer: a memcpy, small beside an fsync.) A write without sync goes through
//! `weft_runtime::fs` (an io_uring write on a green thread). On a plain OS thread (the
//! embedded store) everything is the plain system call: that is what
//! `weft_runtime::fs` does outside a green thread.
//!
//! **Write errors** (ENOSPC, EIO, a failed fsync): the file is truncated back to its
//! length before the call, so the log never holds part of a buffer followed by later
//! frames, and the error is returned (naming the file and offset). Nothing of the
//! buffer counts as written; the caller keeps it, answers its clients with an error,
//! and calls again later with the same buffer plus whatever came since: service
//! resumes when space returns. If even the truncation fails, the writer remembers it
//! and truncates before its next write. Writes are positioned (`pwrite` at the
//! writer's own idea of the end), never `O_APPEND`, so a stray tail is overwritten
//! rather than followed.

use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use weft_runtime::fs::{File, OpenOptions};
use weft_runtime::syslet::{self, Builder, Outcome};

use super::header::HEADER_LEN;

/// Appends to one shard's log (see the module doc).
pub struct LogWriter {
    file: File,
    path: PathBuf,
    len: u64,
    /// A failed write's bytes may lie past `len` (the truncation back failed).
    dirty: bool,
    /// Whether a write with sync on a green thread uses the write+fsync syslet.
    use_syslet: bool,
    ctx: Option<syslet::Context>,
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("dirty", &self.dirty)
            .finish()
    }
}

fn ctx_err(e: io::Error, what: &str, path: &Path, off: u64) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("{what} {} at offset {off}: {e}", path.display()),
    )
}

impl LogWriter {
    /// Opens the log at `path` for appending, positioned at its end. Call it after
    /// [`recover`](super::recover()) (which cuts a torn tail).
    pub fn open(path: &Path) -> io::Result<LogWriter> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        // SAFETY: lseek on a descriptor we own; no memory is passed.
        let end = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_END) };
        if end < 0 {
            return Err(ctx_err(
                io::Error::last_os_error(),
                "cannot find the end of",
                path,
                0,
            ));
        }
        if (end as usize) < HEADER_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {end} bytes long, shorter than a log header: recover it before writing",
                    path.display()
                ),
            ));
        }
        Ok(LogWriter {
            file,
            path: path.to_path_buf(),
            len: end as u64,
            dirty: false,
            use_syslet: true,
            ctx: None,
        })
    }

    /// The log's length (header included): where the next write goes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds only its header.
    pub fn is_empty(&self) -> bool {
        self.len <= HEADER_LEN as u64
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a write with sync on a green thread uses the write+fsync syslet (on by
    /// default); off, it is two `weft_runtime::fs` calls. For tests and measurements.
    #[doc(hidden)]
    pub fn set_syslet(&mut self, on: bool) {
        self.use_syslet = on;
    }

    /// Writes all of `buf` at the end of the log and, if `sync`, fdatasyncs it. On an
    /// error nothing of `buf` stays in the file (see the module doc) and the length is
    /// unchanged.
    pub fn write(&mut self, buf: &[u8], sync: bool) -> io::Result<()> {
        if self.dirty {
            self.truncate_to(self.len)?;
            self.dirty = false;
        }
        if buf.is_empty() {
            return if sync { self.sync() } else { Ok(()) };
        }
        let start = self.len;
        let res = if sync && self.use_syslet && weft_runtime::current_worker().is_some() {
            self.write_sync_syslet(buf, start)
        } else {
            self.write_plain(buf, start, sync)
        };
        match res {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                if self.truncate_to(start).is_err() {
                    self.dirty = true;
                }
                Err(ctx_err(e, "cannot append to", &self.path, start))
            }
        }
    }

    /// fdatasyncs the log (for `fsync everysec`).
    pub fn sync(&mut self) -> io::Result<()> {
        self.file
            .sync_data()
            .map_err(|e| ctx_err(e, "cannot fsync", &self.path, self.len))
    }

    fn write_plain(&self, buf: &[u8], start: u64, sync: bool) -> io::Result<()> {
        self.file.write_all_at(buf, start)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// `pwrite64` then `fdatasync`, one syslet (a linked chain on the io_uring engine).
    fn write_sync_syslet(&mut self, buf: &[u8], start: u64) -> io::Result<()> {
        let ctx = self.ctx.get_or_insert_with(|| syslet::Context::new(4));
        let mut b = Builder::new();
        let fd = b.value(self.file.as_raw_fd() as i64);
        let data = b.bytes(buf);
        let n = b.value(buf.len() as i64);
        let off = b.value(start as i64);
        let (wrote, synced) = (b.var(), b.var());
        let w = b.atom(libc::SYS_pwrite64, &[fd, data, n, off]);
        b.ret(w, wrote).flags(w, syslet::SYSLET_ASYNC);
        let s = b.atom(libc::SYS_fdatasync, &[fd]);
        b.ret(s, synced);
        let prog = b.build().map_err(|e| io::Error::other(e.to_string()))?;
        let done = match ctx.exec(prog) {
            Outcome::Done(d) => d,
            Outcome::Async(h) => ctx
                .wait_for(h)
                .ok_or_else(|| io::Error::other("the write+fsync syslet's completion was lost"))?,
        };
        if done.atom != 1 {
            // It ended at the write (cancelled): nothing says the data is on disk.
            return Err(io::Error::from_raw_os_error((-done.ret).max(1) as i32));
        }
        let wrote = done.program.get(wrote);
        if wrote < 0 {
            return Err(io::Error::from_raw_os_error(-wrote as i32));
        }
        let wrote = wrote as usize;
        if wrote < buf.len() {
            // A short write (the disk filling up, say): finish it, which gives the
            // error if there is one, then sync again.
            return self.write_plain(&buf[wrote..], start + wrote as u64, true);
        }
        if done.ret < 0 {
            return Err(io::Error::from_raw_os_error(-done.ret as i32));
        }
        Ok(())
    }

    fn truncate_to(&self, len: u64) -> io::Result<()> {
        // SAFETY: ftruncate on a descriptor we own; no memory is passed.
        if unsafe { libc::ftruncate(self.file.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(ctx_err(
                io::Error::last_os_error(),
                "cannot truncate",
                &self.path,
                len,
            ));
        }
        Ok(())
    }
}
