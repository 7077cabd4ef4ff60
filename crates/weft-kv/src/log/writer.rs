//! Appending to a shard's log.
//!
//! [`LogWriter::write`] writes one buffer (every record a shard buffered since the
//! previous call: group commit is the caller's) at the end of the log and, if asked,
//! makes it durable with `fdatasync`, so one fsync covers many commands.
//!
//! **Where the I/O runs.** On a weft green thread, a write with sync is the write
//! below (a `pwrite` on the worker) then an `fdatasync` through `weft_runtime::fs` (an
//! io_uring fsync on the worker's own ring, which the kernel runs on one of its
//! io_uring helper threads; only the green thread parks meanwhile). It used to be one
//! syslet of two atoms, `pwrite64` then `fdatasync`, sent whole to the io_uring chain
//! engine as one linked chain ([`LogWriter::set_syslet`] still does): that cost a
//! helper thread's wake-up for the write too (ext4 takes no buffered write without
//! blocking from io_uring) and the engine thread's wake-up for the completion, which
//! then woke the worker, about three times the server's CPU time a write under
//! `--fsync always` that redis-server spends (docs/benchmarks.md, "The write path
//! under fsync always").
//!
//! With [`LogWriter::set_sync_on_worker`] (the server's flusher sets it when its worker
//! owns no other shard and either no command that logged nothing, a read, ran on the
//! shard since its last write, or every connection waits for a write, or no read ran
//! during its last fsync through the ring) the
//! `fdatasync` is a plain system call on the worker too, which
//! sleeps in it as redis-server's main thread does: no helper thread to wake, no
//! completion to wake the worker, no idle spin while the disk flushes, about half the
//! server's CPU time a write of the ring's fsync (docs/benchmarks.md, "Writes under
//! fsync always"). The worker's other green threads wait for the fsync meanwhile, as
//! redis-server's clients wait for its fsync; the requests they would have served are
//! served right after it, and the writes among them go into the next fsync together
//! (group commit), which could not have started earlier anyway. A read would wait for
//! the fsync too (p99 of a lone reader beside four writers: 4 ms on a busy disk against
//! 0.1 ms), which is why the flusher keeps the ring's fsync while reads come and some
//! connection could send one.
//!
//! A write without sync on a green thread is a plain `pwrite` on the worker, as Redis
//! writes its log from its main thread: a write to the page cache takes microseconds,
//! while an io_uring write to a file whose filesystem cannot write to the page cache
//! without blocking (ext4 refuses `RWF_NOWAIT` for buffered writes, and io_uring then
//! hands every such write to one of its worker threads) costs two thread wake-ups (the
//! helper's, then the worker's for the completion). Should such a write sleep (the
//! worker's voluntary context switches, from `getrusage(RUSAGE_THREAD)`, went up
//! during the call: it waited for the filesystem's journal or for dirty pages to be
//! written back; the count before the call is the one read after the previous write
//! when the worker has not waited for work since, so a busy worker pays one
//! `getrusage` a write, not two), the writes of the next [`ASYNC_AFTER_SLEEP`] go through
//! `weft_runtime::fs` (an io_uring write, which parks only the green thread), so a
//! worker never keeps sleeping in the log's writes while its other green threads wait.
//! [`LogWriter::sync_handle`] lets an fsync run on another green thread while writes
//! go on (`everysec`). On a plain OS thread (the embedded store) everything is the
//! plain system call: that is what `weft_runtime::fs` does outside a green thread.
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
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::fs::{File, OpenOptions};
use weft_runtime::syslet::{self, Builder, Outcome};

use super::header::HEADER_LEN;

/// After a write on the worker slept, how long writes go through io_uring instead.
pub const ASYNC_AFTER_SLEEP: Duration = Duration::from_secs(1);

/// Appends to one shard's log (see the module doc).
pub struct LogWriter {
    file: Arc<File>,
    path: PathBuf,
    len: u64,
    /// A failed write's bytes may lie past `len` (the truncation back failed).
    dirty: bool,
    /// Whether a write with sync on a green thread uses the write+fsync syslet.
    use_syslet: bool,
    /// Whether a write with sync on a green thread fdatasyncs on the worker itself.
    sync_here: bool,
    ctx: Option<syslet::Context>,
    /// Until when writes without sync on a green thread go through io_uring (a write
    /// on the worker slept).
    async_until: Option<Instant>,
    /// The worker's voluntary context switches after the last watched write, and its
    /// rests then (`weft_runtime::worker_rests`): while the rests have not moved since,
    /// that count is the next write's "before" (one `getrusage` a write, not two).
    last_switches: Option<(i64, u64)>,
    stats: WriteStats,
}

/// How a [`LogWriter`]'s writes without sync on a green thread went (for tests and
/// measurements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Written with `pwrite` on the worker.
    pub direct: u64,
    /// Of those, writes during which the worker slept.
    pub slept: u64,
    /// Written through io_uring, as a write that slept asked.
    pub deferred: u64,
    /// Writes with sync whose fdatasync ran on the worker itself
    /// ([`LogWriter::set_sync_on_worker`]).
    pub synced_here: u64,
    /// Writes with sync whose fdatasync went through the worker's ring.
    pub synced_ring: u64,
    /// `getrusage` calls made to tell whether a write slept.
    pub sleep_checks: u64,
}

/// The log file, shared with an fsync running beside the writer
/// ([`LogWriter::sync_handle`]).
#[derive(Clone, Debug)]
pub struct SyncHandle {
    file: Arc<File>,
    path: PathBuf,
}

impl SyncHandle {
    /// fdatasyncs the file (parking only the green thread on a runtime). The file stays
    /// open while the handle lives, even if the writer moved on to another file.
    pub fn sync(&self) -> io::Result<()> {
        self.file
            .sync_data()
            .map_err(|e| ctx_err(e, "cannot fsync", &self.path, 0))
    }
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
            file: Arc::new(file),
            path: path.to_path_buf(),
            len: end as u64,
            dirty: false,
            use_syslet: false,
            sync_here: false,
            ctx: None,
            async_until: None,
            last_switches: None,
            stats: WriteStats::default(),
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

    /// Whether a write with sync on a green thread uses the write+fsync syslet (off by
    /// default: the module doc says why); off, it is a `pwrite` on the worker and a
    /// `weft_runtime::fs` fdatasync. For tests and measurements.
    #[doc(hidden)]
    pub fn set_syslet(&mut self, on: bool) {
        self.use_syslet = on;
    }

    /// Whether a write with sync on a green thread runs its `fdatasync` on the worker
    /// itself, which then sleeps in it as redis-server's main thread does (on), or
    /// through the worker's ring, which parks only the calling green thread (off, the
    /// default). On costs the worker's other green threads the fsync's wait; off costs
    /// two thread wake-ups and the worker's idle spin per fsync (the module doc).
    pub fn set_sync_on_worker(&mut self, on: bool) {
        self.sync_here = on;
    }

    /// How the writes on a green thread went so far.
    #[doc(hidden)]
    pub fn stats(&self) -> WriteStats {
        self.stats
    }

    /// The file, for an fsync on another green thread while this writer goes on: that
    /// fsync covers every write that returned before it started.
    pub fn sync_handle(&self) -> SyncHandle {
        SyncHandle {
            file: self.file.clone(),
            path: self.path.clone(),
        }
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
        let green = weft_runtime::current_worker().is_some();
        let res = if sync && self.use_syslet && green {
            self.write_sync_syslet(buf, start)
        } else if sync && green && self.sync_here {
            // Both on the worker, which sleeps in the fdatasync (see the module doc).
            self.stats.synced_here += 1;
            self.write_on_worker(buf, start, false)
                .and_then(|()| fdatasync_here(self.file.as_raw_fd()))
        } else if sync && green {
            // The write on the worker, the fsync through the worker's own ring.
            self.stats.synced_ring += 1;
            self.write_on_worker(buf, start, true)
                .and_then(|()| self.file.sync_data())
        } else if !sync && green && self.async_until.is_some_and(|t| Instant::now() < t) {
            self.stats.deferred += 1;
            self.write_plain(buf, start, false)
        } else if !sync && green {
            self.write_on_worker(buf, start, true)
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

    /// fdatasyncs the log (for `fsync everysec`; on the worker itself with
    /// [`LogWriter::set_sync_on_worker`]).
    pub fn sync(&mut self) -> io::Result<()> {
        let res = if self.sync_here && weft_runtime::current_worker().is_some() {
            fdatasync_here(self.file.as_raw_fd())
        } else {
            self.file.sync_data()
        };
        res.map_err(|e| ctx_err(e, "cannot fsync", &self.path, self.len))
    }

    fn write_plain(&self, buf: &[u8], start: u64, sync: bool) -> io::Result<()> {
        self.file.write_all_at(buf, start)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// `pwrite` on the calling thread (a worker: see the module doc); if `watch`, a
    /// write during which the thread slept sends the next [`ASYNC_AFTER_SLEEP`] of
    /// writes through io_uring. (Not watched: a write the worker's own fdatasync
    /// follows, as the worker sleeps in that anyway; two system calls fewer a write.)
    fn write_on_worker(&mut self, buf: &[u8], start: u64, watch: bool) -> io::Result<()> {
        let before = if watch { self.switches_before() } else { 0 };
        let fd = self.file.as_raw_fd();
        let mut done = 0;
        let res = loop {
            if done == buf.len() {
                break Ok(());
            }
            let rest = &buf[done..];
            // SAFETY: pwrite reads `rest` (in bounds of `buf`, alive for the call) into
            // the log's descriptor, which `self.file` keeps open.
            let r = unsafe {
                libc::pwrite(
                    fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    (start + done as u64) as libc::off_t,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break Err(e);
            }
            if r == 0 {
                break Err(io::ErrorKind::WriteZero.into());
            }
            done += r as usize;
        };
        self.stats.direct += 1;
        if watch {
            let after = self.voluntary_switches();
            self.last_switches = weft_runtime::worker_rests().map(|r| (after, r));
            if after > before {
                self.stats.slept += 1;
                self.async_until = Some(Instant::now() + ASYNC_AFTER_SLEEP);
            }
        }
        res
    }

    /// The worker's voluntary context switches before a watched write: those after the
    /// last one if the worker has not rested since (it did not wait for work nor go
    /// into a declared blocking call: so it did not sleep, unless some call of its
    /// own slept, which the write then counts as its own, as a sleep the write caused
    /// would be), else a fresh `getrusage`.
    fn switches_before(&mut self) -> i64 {
        match self.last_switches {
            Some((n, rests)) if Some(rests) == weft_runtime::worker_rests() => n,
            _ => self.voluntary_switches(),
        }
    }

    fn voluntary_switches(&mut self) -> i64 {
        self.stats.sleep_checks += 1;
        voluntary_switches()
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

/// The calling thread's voluntary context switches so far (times it slept).
fn voluntary_switches() -> i64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes the struct we pass, which lives for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_nvcsw as i64
}

/// fdatasync on the calling thread, which sleeps in it (declared to the runtime, whose
/// monitor then does not tick every millisecond of it: `weft_runtime::in_blocking_call`).
fn fdatasync_here(fd: i32) -> io::Result<()> {
    weft_runtime::in_blocking_call(|| fdatasync_retrying(fd))
}

fn fdatasync_retrying(fd: i32) -> io::Result<()> {
    loop {
        // SAFETY: fdatasync on a descriptor the caller keeps open; no memory is passed.
        if unsafe { libc::fdatasync(fd) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
