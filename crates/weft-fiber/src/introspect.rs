//! Reading fiber registries, this process's or another's (`weft ps`, `weft top`,
//! `weft fs`, and `weft_introspect` in C).
//!
//! A reader maps a registry file read-only and copies each slot under its seqlock: read
//! `seq`; if it is odd the owner is writing, so retry; copy the fields; read `seq`
//! again; if it changed, retry. A copy taken this way is never torn, even while the
//! target switches millions of times a second, and the target never waits for readers.
//!
//! A slot its owner keeps busy for the reader's whole patience (a fiber switching
//! without pause while the reader is descheduled, or a writer stopped mid-update) is
//! still listed, from a copy of each field on its own, marked as not consistent (see
//! [`FiberInfo::consistent`]): a snapshot lists every live fiber once.
//!
//! Tick counts become time with the registry's (TSC, CLOCK_MONOTONIC) pair and one taken
//! now: the time-stamp counter is the same on every CPU of the machine.

use crate::registry::{self, Header, Label, Slot, HEADER_SIZE, MAGIC, SLOT_SIZE, SLOT_SIZE_V1};
use crate::stats::FiberState;
use core::sync::atomic::{fence, Ordering::*};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use registry::registry_dir;

/// One registry file found in [`registry_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessEntry {
    /// The process id the registry belongs to.
    pub pid: i32,
    /// The registry file.
    pub path: PathBuf,
    /// Owner of the file (the user the process runs as).
    pub uid: u32,
    /// False when the process is gone, or its pid now belongs to a later process: the
    /// registry is stale (the process died without removing it).
    pub alive: bool,
}

/// Every fiber of one process at one moment (each fiber consistent on its own).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The process read.
    pub pid: i32,
    /// Its fibers (created fibers, converted threads and green threads), in slot order.
    pub fibers: Vec<FiberInfo>,
    /// Slots whose owner kept them busy for longer than [`READ_PATIENCE`] and which
    /// could not be told to belong to a fiber (their label did not name the fiber the
    /// slot did: the slot was being given to a new fiber). They are not in `fibers`.
    /// A busy slot whose label names its fiber is listed, marked not
    /// [`consistent`](FiberInfo::consistent).
    pub unreadable: usize,
}

/// One fiber as a reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiberInfo {
    /// Process-unique id, never reused.
    pub id: u64,
    /// Ready, running or finished.
    pub state: FiberState,
    /// A converted thread rather than a created fiber.
    pub is_thread_fiber: bool,
    /// Start routine address in the target (0 for converted threads).
    pub entry: u64,
    /// Kernel thread id of the thread that created (or converted) it.
    pub creator_tid: i32,
    /// The thread it runs on now (only when running).
    pub running_on: Option<i32>,
    /// The thread it last ran on (0 if it never ran).
    pub last_tid: i32,
    /// Successful switches into it.
    pub activations: u64,
    /// Switches into it that were refused (it was running on another thread, or had
    /// finished).
    pub failed_activations: u64,
    /// Switches away from it. A consistent running fiber has one activation more than
    /// this, a ready one as many; a converted thread starts running without an
    /// activation (converting is not a switch), so it has one fewer than that.
    pub deactivations: u64,
    /// Total time it has run, including the current slice if it is running (slices run
    /// while run-time accounting is off, `WEFT_RUN_TIME=off`, are not counted).
    pub run_time: Duration,
    /// Lowest usable stack address (0 for converted threads).
    pub stack_base: u64,
    /// Usable stack bytes (0 for converted threads).
    pub stack_size: u64,
    /// The name the program gave it (a green thread's `ThreadBuilder::name`, C's
    /// `weft_spawn_named`, `weft_fiber::set_name`), cut to 48 bytes.
    pub name: Option<String>,
    /// The function it runs as `std::any::type_name` spells it (Rust fibers and green
    /// threads; for others, [`entry`](Self::entry) says), cut to 104 bytes.
    pub function: Option<String>,
    /// Where it was spawned (Rust fibers and green threads).
    pub spawned_at: Option<SpawnSite>,
    /// True when the statistics were copied as one (under the slot's seqlock). False
    /// when the owner kept the slot busy for the reader's whole patience: each field
    /// is then a value it held while the reader looked, but not necessarily all from
    /// the same moment (the state may be a switch behind or ahead of the counts, and
    /// the run time leaves out a current slice). The id, stack and label are the
    /// fiber's.
    pub consistent: bool,
}

/// A source location: where a fiber was spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSite {
    /// The source file as the compiler named it; a path longer than 64 bytes keeps
    /// its end, after `...`.
    pub file: String,
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub column: u32,
}

impl fmt::Display for SpawnSite {
    /// `file:line`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Why a registry could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum IntrospectError {
    /// The process exists but has no registry (it does not use weft, or has not created
    /// or converted a fiber yet, or runs with WEFT_REGISTRY=off).
    NotUsingWeft {
        /// The process asked for.
        pid: i32,
    },
    /// No process has this id.
    NoSuchProcess {
        /// The process asked for.
        pid: i32,
    },
    /// A registry whose process died without removing it.
    Stale {
        /// The process that owned the registry.
        pid: i32,
    },
    /// The registry belongs to another user (registries are readable only by the user
    /// the process runs as, and root).
    PermissionDenied {
        /// The process asked for.
        pid: i32,
        /// Its registry file.
        path: PathBuf,
    },
    /// The file is not a registry this version of weft can read (another format version,
    /// or damaged).
    BadFormat {
        /// The registry file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// Any other I/O error while reading the registry.
    Io(io::Error),
}

impl fmt::Display for IntrospectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntrospectError::NotUsingWeft { pid } => write!(
                f,
                "process {pid} has no fiber registry: it does not use weft (or has not created a \
                 fiber yet, or runs with WEFT_REGISTRY=off, or uses another WEFT_REGISTRY_DIR than \
                 {})",
                registry_dir().display()
            ),
            IntrospectError::NoSuchProcess { pid } => write!(f, "no process {pid}"),
            IntrospectError::Stale { pid } => write!(
                f,
                "process {pid} died without removing its fiber registry (stale); `weft ps --prune` \
                 removes stale registries"
            ),
            IntrospectError::PermissionDenied { pid, path } => write!(
                f,
                "not allowed to read the fiber registry of process {pid} ({}): registries are \
                 readable only by the user the process runs as; run as that user or as root",
                path.display()
            ),
            IntrospectError::BadFormat { path, what } => {
                write!(
                    f,
                    "{} is not a weft registry this version can read: {what}",
                    path.display()
                )
            }
            IntrospectError::Io(e) => write!(f, "cannot read a fiber registry: {e}"),
        }
    }
}

impl std::error::Error for IntrospectError {}

/// The fields of one slot, copied consistently.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RawSlot {
    pub state: u32,
    pub id: u64,
    pub activations: u64,
    pub deactivations: u64,
    /// Including the current slice if the fiber is running.
    pub run_ticks: u64,
    pub last_tid: i32,
    pub creator_tid: i32,
    pub entry: u64,
    pub failed_activations: u64,
    pub stack_base: u64,
    pub stack_size: u64,
    pub flags: u32,
}

/// Copies a slot under its seqlock; `now` is the current tick count. `None` if the
/// owner kept the slot busy for [`READ_PATIENCE`] (a writer stopped in the middle of an
/// update, by a debugger say): the caller counts it rather than show a torn copy.
pub(crate) fn read_slot(s: &Slot, now: u64) -> Option<RawSlot> {
    with_patience(|| try_read_slot(s, now))
}

/// Calls `attempt` until it gives a consistent copy, for up to [`READ_PATIENCE`] and
/// at least [`READ_TRIES`] attempts.
#[inline(always)]
fn with_patience<T>(mut attempt: impl FnMut() -> Option<T>) -> Option<T> {
    let mut deadline = None;
    let mut tries = 0u32;
    loop {
        if let Some(r) = attempt() {
            return Some(r);
        }
        tries += 1;
        if tries.is_multiple_of(64) {
            // A writer that switches every few nanoseconds can keep beating a spinning
            // reader; give up the CPU now and then, and bound the wait by time. By
            // tries too: on a loaded machine the yields alone can use up the time (a
            // reader descheduled for 20 ms at each would give up after 256 tries).
            let d = *deadline.get_or_insert_with(|| std::time::Instant::now() + READ_PATIENCE);
            if tries >= READ_TRIES && std::time::Instant::now() > d {
                return None;
            }
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// How long a reader retries a slot its owner keeps busy.
pub const READ_PATIENCE: Duration = Duration::from_millis(50);
/// How many times, at least, a reader tries a slot its owner keeps busy.
const READ_TRIES: u32 = 4096;

/// A label's texts, copied consistently.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawLabel {
    pub id: u64,
    pub line: u32,
    pub column: u32,
    pub name: Vec<u8>,
    pub file: Vec<u8>,
    pub function: Vec<u8>,
}

/// Copies a label under its own seqlock, giving up as [`read_slot`] does. Its writers
/// are rare (a fiber's creation, a rename), so the first try nearly always succeeds.
pub(crate) fn read_label(l: &Label) -> Option<RawLabel> {
    with_patience(|| {
        let before = l.seq.load(Acquire);
        if before & 1 == 1 {
            return None;
        }
        let r = RawLabel {
            id: l.id.load(Relaxed),
            line: l.line.load(Relaxed),
            column: l.column.load(Relaxed),
            name: registry::load_text(&l.name),
            file: registry::load_text(&l.file),
            function: registry::load_text(&l.function),
        };
        fence(Acquire);
        (l.seq.load(Relaxed) == before).then_some(r)
    })
}

/// A label field's text, or None when empty.
fn text(bytes: &[u8]) -> Option<String> {
    (!bytes.is_empty()).then(|| String::from_utf8_lossy(bytes).into_owned())
}

/// The fields of the slot's first line (those a switch writes, and the ones set with
/// them when the slot is filled), each loaded on its own; the others left 0.
#[inline(always)]
fn load_first_line(s: &Slot) -> RawSlot {
    RawSlot {
        state: s.state.load(Relaxed),
        id: s.id.load(Relaxed),
        activations: s.activations.load(Relaxed),
        deactivations: s.deactivations.load(Relaxed),
        run_ticks: s.run_ticks.load(Relaxed),
        last_tid: s.last_tid.load(Relaxed),
        creator_tid: s.creator_tid.load(Relaxed),
        entry: s.entry.load(Relaxed),
        ..RawSlot::default()
    }
}

/// Adds the fields no switch writes (set when the slot is filled) to `r`.
#[inline(always)]
fn load_second_line(s: &Slot, r: &mut RawSlot) {
    r.failed_activations = s.failed_activations.load(Relaxed);
    r.stack_base = s.stack_base.load(Relaxed);
    r.stack_size = s.stack_size.load(Relaxed);
    r.flags = s.flags.load(Relaxed);
}

#[inline(always)]
fn try_read_slot(s: &Slot, now: u64) -> Option<RawSlot> {
    let before = s.seq.load(Acquire);
    if before & 1 == 1 {
        return None;
    }
    let mut r = load_first_line(s);
    let start = s.switched_in_at.load(Relaxed);
    fence(Acquire);
    if s.seq.load(Relaxed) != before {
        return None;
    }
    if r.state == registry::SLOT_RUNNING && start != 0 {
        r.run_ticks += now.saturating_sub(start);
    }
    // Read after the check: no switch writes them.
    load_second_line(s, &mut r);
    Some(r)
}

/// A copy of a slot its owner kept busy for the reader's whole patience: each field on
/// its own, with no consistency between them. `None` when the slot shows no fiber
/// (free) or its fiber id changed while it was copied (it is being given to a new
/// fiber).
fn read_slot_unchecked(s: &Slot) -> Option<RawSlot> {
    // The run time leaves out the current slice: its start may belong to another
    // switch than the total read here.
    let mut r = load_first_line(s);
    load_second_line(s, &mut r);
    fence(Acquire);
    (r.state != registry::SLOT_FREE && s.id.load(Relaxed) == r.id).then_some(r)
}

/// Lists every registry in [`registry_dir`], live or stale.
pub fn list() -> io::Result<Vec<ProcessEntry>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for e in std::fs::read_dir(registry_dir())? {
        let e = e?;
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("weft-"))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(meta) = e.metadata() else { continue };
        let path = e.path();
        let alive = is_alive(pid, &path);
        out.push(ProcessEntry {
            pid,
            path,
            uid: meta.uid(),
            alive,
        });
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// Removes the stale registries this user may remove; returns their pids.
pub fn clean_stale() -> io::Result<Vec<i32>> {
    let mut removed = Vec::new();
    for p in list()? {
        if !p.alive && std::fs::remove_file(&p.path).is_ok() {
            removed.push(p.pid);
        }
    }
    Ok(removed)
}

/// Whether the registry at `path` belongs to a running process (not a dead one whose
/// pid was reused since).
fn is_alive(pid: i32, path: &Path) -> bool {
    let Some(now_start) = registry::process_start_time(pid) else {
        return false;
    };
    match read_header_start_time(path) {
        Some(0) | None => true, // cannot tell (unreadable, or written without one)
        Some(t) => t == now_start,
    }
}

fn read_header_start_time(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut buf = [0u8; core::mem::size_of::<Header>()];
    std::fs::File::open(path).ok()?.read_exact(&mut buf).ok()?;
    if buf[..8] != MAGIC {
        return None;
    }
    let off = core::mem::offset_of!(Header, start_time);
    Some(u64::from_ne_bytes(buf[off..off + 8].try_into().ok()?))
}

/// Reads every fiber of process `pid` (0: this process).
pub fn read(pid: i32) -> Result<Snapshot, IntrospectError> {
    // SAFETY: getpid has no preconditions.
    let pid = if pid == 0 {
        unsafe { libc::getpid() }
    } else {
        pid
    };
    if pid < 0 {
        return Err(IntrospectError::NoSuchProcess { pid });
    }
    let path = registry_dir().join(format!("weft-{pid}"));
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(if Path::new(&format!("/proc/{pid}")).exists() {
                IntrospectError::NotUsingWeft { pid }
            } else {
                IntrospectError::NoSuchProcess { pid }
            })
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(IntrospectError::PermissionDenied { pid, path })
        }
        Err(e) => return Err(IntrospectError::Io(e)),
    };
    if !is_alive(pid, &path) {
        return Err(IntrospectError::Stale { pid });
    }
    let map = Mapping::new(&file, &path)?;
    let h = map.header();
    let bad = |what: &str| IntrospectError::BadFormat {
        path: path.clone(),
        what: what.to_string(),
    };
    if h.magic != MAGIC {
        return Err(bad("wrong magic number"));
    }
    // Version 1 (slots without labels) is still read: a process linked with an
    // older weft.
    let labels = match (h.version, h.slot_size as usize) {
        (1, SLOT_SIZE_V1) => false,
        (registry::VERSION, SLOT_SIZE) => true,
        (v, size) => {
            return Err(bad(&format!("version {v} with {size}-byte slots")));
        }
    };
    let stride = h.slot_size as usize;
    let map = map.with_stride(stride);
    let h = map.header();
    // The rate the process published: the same for every reader, so run times never
    // go backwards between readings.
    if h.ticks_per_sec.is_nan() || h.ticks_per_sec <= 0.0 {
        return Err(bad("no tick rate in the header"));
    }
    let ns_per_tick = 1e9 / h.ticks_per_sec;
    let used = (h.used.load(Acquire) as usize).min(map.slots());
    let now = crate::clock::ticks();
    let mut fibers = Vec::with_capacity(used);
    let mut unreadable = 0;
    'slots: for i in 0..used {
        let mut attempts = 0;
        let (r, label, consistent) = loop {
            let Some(r) = read_slot(map.slot(i), now) else {
                // Busy for the whole patience: list the fiber from a copy of each
                // field, if its label (written only when the fiber is created or
                // renamed) says the slot is that fiber's. Version 1 has no label.
                let fiber = labels
                    .then(|| read_slot_unchecked(map.slot(i)))
                    .flatten()
                    .and_then(|r| {
                        let l = read_label(map.label(i)).filter(|l| l.id == r.id)?;
                        Some((r, Some(l), false))
                    });
                match fiber {
                    Some(f) => break f,
                    None => {
                        unreadable += 1;
                        continue 'slots;
                    }
                }
            };
            if !labels || r.state == registry::SLOT_FREE {
                break (r, None, true);
            }
            match read_label(map.label(i)) {
                Some(l) if l.id == r.id => break (r, Some(l), true),
                // The slot was freed and given to another fiber between the two
                // copies (or its label is being written): read both again, a few
                // times, then show the fiber without its label.
                _ if attempts < 3 => attempts += 1,
                _ => break (r, None, true),
            }
        };
        let state = match r.state {
            registry::SLOT_READY => FiberState::Ready,
            registry::SLOT_RUNNING => FiberState::Running,
            registry::SLOT_FINISHED => FiberState::Finished,
            _ => continue,
        };
        let label = label.unwrap_or_default();
        fibers.push(FiberInfo {
            id: r.id,
            state,
            is_thread_fiber: r.flags & registry::FLAG_THREAD != 0,
            entry: r.entry,
            creator_tid: r.creator_tid,
            running_on: (state == FiberState::Running).then_some(r.last_tid),
            last_tid: r.last_tid,
            activations: r.activations,
            failed_activations: r.failed_activations,
            deactivations: r.deactivations,
            run_time: Duration::from_nanos((r.run_ticks as f64 * ns_per_tick) as u64),
            stack_base: r.stack_base,
            stack_size: r.stack_size,
            name: text(&label.name),
            function: text(&label.function),
            spawned_at: text(&label.file).map(|file| SpawnSite {
                file,
                line: label.line,
                column: label.column,
            }),
            consistent,
        });
    }
    Ok(Snapshot {
        pid,
        fibers,
        unreadable,
    })
}

/// A read-only mapping of a registry file.
struct Mapping {
    base: *const u8,
    len: usize,
    /// Bytes from one slot to the next (the header's `slot_size`, once checked).
    stride: usize,
}

impl Mapping {
    fn new(file: &std::fs::File, path: &Path) -> Result<Mapping, IntrospectError> {
        use std::os::fd::AsRawFd;
        let len = file.metadata().map_err(IntrospectError::Io)?.len() as usize;
        if len < HEADER_SIZE {
            return Err(IntrospectError::BadFormat {
                path: path.to_path_buf(),
                what: format!("only {len} bytes"),
            });
        }
        // SAFETY: a read-only shared mapping of a file we opened; unmapped on drop.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(IntrospectError::Io(io::Error::last_os_error()));
        }
        Ok(Mapping {
            base: p.cast(),
            len,
            stride: SLOT_SIZE,
        })
    }
    /// The mapping, reading slots `stride` bytes apart (one of the checked sizes).
    fn with_stride(mut self, stride: usize) -> Mapping {
        debug_assert!(stride == SLOT_SIZE || stride == SLOT_SIZE_V1);
        self.stride = stride;
        self
    }
    fn header(&self) -> &Header {
        // SAFETY: the mapping holds at least the header.
        unsafe { &*self.base.cast::<Header>() }
    }
    fn slots(&self) -> usize {
        (self.len - HEADER_SIZE) / self.stride
    }
    fn slot(&self, i: usize) -> &Slot {
        // SAFETY: i < slots(): the whole slot is inside the mapping (a Slot is the
        // first 128 bytes of a slot of either version).
        unsafe { &*self.base.add(HEADER_SIZE + i * self.stride).cast::<Slot>() }
    }
    /// The label of slot `i` (version 2 only).
    fn label(&self, i: usize) -> &Label {
        debug_assert_eq!(self.stride, SLOT_SIZE);
        // SAFETY: i < slots() and slots are SLOT_SIZE bytes apart, so the label (bytes
        // 128..384 of the slot) is inside the mapping.
        unsafe {
            &*self
                .base
                .add(HEADER_SIZE + i * self.stride + SLOT_SIZE_V1)
                .cast::<Label>()
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}
