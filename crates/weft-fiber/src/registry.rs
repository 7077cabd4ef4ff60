//! The fiber registry: every fiber's statistics, in shared memory that other processes
//! can read without stopping or signalling this one (weft's `/proc/<pid>/fibers`).
//!
//! # Layout
//!
//! One file per process, `<dir>/weft-<pid>` (dir: `$WEFT_REGISTRY_DIR`, else
//! `/dev/shm`, else `$XDG_RUNTIME_DIR`), mode 0600 so only the same user (and root) can
//! read it. A 4 KiB [`Header`], then an array of 384-byte slots, one per fiber: the
//! 128-byte [`Slot`] of statistics, then the 256-byte [`Label`] that says what the
//! fiber is (its name, where it was spawned, the function it runs).
//! The file grows (doubling) as fibers are created; this process maps it into a
//! reservation of address space large enough that slots never move, so a fiber record
//! can keep a plain pointer to its slot. Freed slots are reused.
//!
//! # Consistency: a seqlock per slot
//!
//! Only the thread that owns a fiber (runs it, or has just acquired it to switch into
//! it) writes its slot, so each slot has a single writer at a time. The writer makes
//! the slot's `seq` odd, updates the fields, and makes it even again; a reader copies
//! the fields between two reads of an equal, even `seq` (see `introspect.rs`). On x86
//! this costs the switch two plain stores per slot and compiler fences. The one counter
//! other threads change, `failed_activations`, is a single atomic outside the seqlock.
//!
//! A label has a seqlock of its own, so that readers copy its 256 bytes without racing
//! the switches that keep changing the statistics' `seq`. It is written when the fiber
//! is created (before the slot shows the fiber) and when the running fiber renames
//! itself: by one thread at a time, as the statistics are. It repeats the fiber id, so
//! a reader can tell a label that belongs to the slot's next fiber.
//!
//! # Lifetime
//!
//! The file is created when the process first creates or converts a fiber and removed
//! at normal exit (`atexit`). A process that dies leaves it behind; readers recognise
//! it as stale (the pid is gone, or belongs to a process that started later), and the
//! next weft process of the same user to create its registry removes it (as does `weft
//! ps --prune`). A forked child copies the registry into a file of its own, so the parent's
//! statistics are never written by the child. If no registry can be created, weft keeps
//! working with private memory and says once on stderr that `weft ps` will not see it;
//! `WEFT_REGISTRY=off` asks for that quietly.

use core::sync::atomic::{fence, AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};
use std::ffi::CString;
use std::panic::Location;
use std::path::PathBuf;

/// Identifies a registry file (the header's `version` says which layout).
pub const MAGIC: [u8; 8] = *b"WEFTREG1";
/// The layout this process writes: 2 added the label after each slot's statistics.
pub const VERSION: u32 = 2;
pub const HEADER_SIZE: usize = 4096;
/// Bytes from one slot to the next: its statistics, then its label.
pub const SLOT_SIZE: usize = 384;
/// The slot size of version 1, which had no labels (readers still read it).
pub const SLOT_SIZE_V1: usize = 128;
/// Address space reserved for slots: 256 Mi fibers.
const RESERVE_SLOTS: usize = 256 << 20;
const FIRST_SLOTS: usize = 1024;

/// Slot states as readers see them.
pub const SLOT_FREE: u32 = 0;
pub const SLOT_READY: u32 = 1;
pub const SLOT_RUNNING: u32 = 2;
pub const SLOT_FINISHED: u32 = 3;
/// `flags` bit: the fiber is a converted thread.
pub const FLAG_THREAD: u32 = 1;

/// The start of a registry file.
#[repr(C)]
pub struct Header {
    pub magic: [u8; 8],
    pub version: u32,
    pub slot_size: u32,
    pub pid: AtomicI32,
    pub uid: u32,
    /// The process's start time (clock ticks after boot, /proc/PID/stat field 22), to
    /// tell this process from a later one that reuses its pid.
    pub start_time: AtomicU64,
    /// A time-stamp-counter reading and CLOCK_MONOTONIC (ns) taken together, so a
    /// reader can convert tick counts to time with its own pair.
    pub tsc0: u64,
    pub mono0_ns: u64,
    /// Slots the file holds now.
    pub capacity: AtomicU64,
    /// Slots ever handed out: readers scan `[0, used)`.
    pub used: AtomicU64,
    /// Time-stamp-counter ticks per second, measured once by this process: readers use
    /// it, so run times are converted alike by every reader and never go backwards.
    pub ticks_per_sec: f64,
}

/// One fiber's statistics (two cache lines). Written by the fiber's owner under `seq`.
#[repr(C, align(64))]
pub struct Slot {
    pub seq: AtomicU32,
    /// SLOT_FREE / SLOT_READY / SLOT_RUNNING / SLOT_FINISHED.
    pub state: AtomicU32,
    pub id: AtomicU64,
    pub activations: AtomicU64,
    /// Switches away from the fiber: a consistent Running slot has one activation more.
    pub deactivations: AtomicU64,
    pub run_ticks: AtomicU64,
    pub switched_in_at: AtomicU64,
    pub last_tid: AtomicI32,
    pub creator_tid: AtomicI32,
    pub entry: AtomicU64,
    // ---- second line: not written by switches ----
    pub failed_activations: AtomicU64,
    pub stack_base: AtomicU64,
    pub stack_size: AtomicU64,
    pub flags: AtomicU32,
    _reserved: [u32; 9],
}

/// Label field sizes in bytes (UTF-8, padded with NULs; a text that fills its field
/// has no NUL).
pub const NAME_BYTES: usize = 48;
pub const FILE_BYTES: usize = 64;
pub const FUNCTION_BYTES: usize = 104;

/// What a fiber is, for people (256 bytes, right after its [`Slot`]): the name the
/// program gave it, where it was spawned, the function it runs. Empty texts mean
/// unknown. Written under its own `seq` (see the module comment).
#[repr(C, align(64))]
pub struct Label {
    pub seq: AtomicU32,
    /// Line of the spawn site (0: unknown).
    pub line: AtomicU32,
    /// The fiber this label describes (the slot's `id` once both are written).
    pub id: AtomicU64,
    /// Column of the spawn site.
    pub column: AtomicU32,
    _reserved: u32,
    /// The writer's own: which static texts `file` and `function` hold now (address and
    /// length in this process), so a reused slot skips copying the same ones again.
    /// Meaningless to readers.
    pub file_key: AtomicU64,
    pub function_key: AtomicU64,
    pub name: [AtomicU64; NAME_BYTES / 8],
    /// The spawn site's source file; a long path keeps its end.
    pub file: [AtomicU64; FILE_BYTES / 8],
    /// `std::any::type_name` of the closure or function; a long one keeps its start.
    pub function: [AtomicU64; FUNCTION_BYTES / 8],
}

/// A slot as this process lays it out: the statistics, then the label.
#[repr(C)]
pub(crate) struct SlotMem {
    slot: Slot,
    label: Label,
}

const _: () = assert!(core::mem::size_of::<Slot>() == SLOT_SIZE_V1);
const _: () = assert!(core::mem::size_of::<Label>() == 256);
const _: () = assert!(core::mem::size_of::<SlotMem>() == SLOT_SIZE);
const _: () = assert!(core::mem::size_of::<Header>() <= HEADER_SIZE);

impl Slot {
    /// Starts an update (the owner only): readers retry until `end_write`.
    #[inline(always)]
    pub(crate) fn begin_write(&self) {
        self.begin_write_from(self.seq.load(Relaxed));
    }
    #[inline(always)]
    pub(crate) fn end_write(&self) {
        self.seq
            .store(self.seq.load(Relaxed).wrapping_add(1), Release);
    }
    /// [`begin_write`](Self::begin_write) for an owner that read the sequence word
    /// already (`seq`, its value now).
    #[inline(always)]
    pub(crate) fn begin_write_from(&self, seq: u32) {
        self.seq.store(seq.wrapping_add(1), Relaxed);
        fence(Release);
    }
    /// [`end_write`](Self::end_write) after [`begin_write_from`](Self::begin_write_from)
    /// with the same `seq`.
    #[inline(always)]
    pub(crate) fn end_write_from(&self, seq: u32) {
        self.seq.store(seq.wrapping_add(2), Release);
    }
    /// A relaxed increment by the owner (inside an update).
    #[inline(always)]
    pub(crate) fn bump(c: &AtomicU64) {
        c.store(c.load(Relaxed) + 1, Relaxed);
    }

    /// The label that follows this slot.
    #[inline(always)]
    pub(crate) fn label(&self) -> &Label {
        // SAFETY: every slot this process writes is the start of a `SlotMem` (registry
        // slots are SLOT_SIZE apart, private ones are allocated as `SlotMem`), so its
        // label follows it, live as long as the slot.
        unsafe { &(*(self as *const Slot).cast::<SlotMem>()).label }
    }
}

/// What a new fiber's label says (see [`Label`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LabelText<'a> {
    pub name: &'a str,
    pub function: &'static str,
    pub location: Option<&'static Location<'static>>,
}

impl Label {
    /// Writes the label of fiber `id` (the slot's owner, before the slot shows it).
    pub(crate) fn write(&self, id: u64, text: &LabelText<'_>) {
        let seq = self.seq.load(Relaxed);
        self.seq.store(seq.wrapping_add(1), Relaxed);
        fence(Release);
        self.id.store(id, Relaxed);
        let (file, line, column) = text
            .location
            .map_or(("", 0, 0), |l| (l.file(), l.line(), l.column()));
        self.line.store(line, Relaxed);
        self.column.store(column, Relaxed);
        store_static(&self.file, &self.file_key, file, Keep::End);
        store_static(
            &self.function,
            &self.function_key,
            text.function,
            Keep::Start,
        );
        store_text(&self.name, text.name, Keep::Start);
        self.seq.store(seq.wrapping_add(2), Release);
    }

    /// Renames the fiber (its owner only).
    pub(crate) fn set_name(&self, name: &str) {
        let seq = self.seq.load(Relaxed);
        self.seq.store(seq.wrapping_add(1), Relaxed);
        fence(Release);
        store_text(&self.name, name, Keep::Start);
        self.seq.store(seq.wrapping_add(2), Release);
    }
}

/// Which end of a text too long for its field is kept (the other becomes `...`).
#[derive(Clone, Copy)]
enum Keep {
    Start,
    End,
}

/// `s` cut to fit `cap` bytes: whole characters only, `...` where text was cut off.
fn fit(s: &str, cap: usize, keep: Keep) -> (&str, &str, &str) {
    if s.len() <= cap {
        return ("", s, "");
    }
    let room = cap - 3;
    match keep {
        Keep::Start => {
            let mut end = room;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            ("", &s[..end], "...")
        }
        Keep::End => {
            let mut start = s.len() - room;
            while !s.is_char_boundary(start) {
                start += 1;
            }
            ("...", &s[start..], "")
        }
    }
}

/// Stores `s` (cut to fit) in `field`, NUL-padded; words past the NUL are left as they
/// are (readers stop at the first NUL).
fn store_text(field: &[AtomicU64], s: &str, keep: Keep) {
    let cap = field.len() * 8;
    debug_assert!(cap <= FUNCTION_BYTES);
    let (pre, mid, post) = fit(s, cap, keep);
    let mut buf = [0u8; FUNCTION_BYTES];
    let len = pre.len() + mid.len() + post.len();
    buf[..pre.len()].copy_from_slice(pre.as_bytes());
    buf[pre.len()..pre.len() + mid.len()].copy_from_slice(mid.as_bytes());
    buf[pre.len() + mid.len()..len].copy_from_slice(post.as_bytes());
    // The words holding the text and its NUL (none when it fills the field).
    let words = (len + 1).div_ceil(8).min(field.len());
    for (w, chunk) in field[..words].iter().zip(buf.chunks_exact(8)) {
        w.store(u64::from_ne_bytes(chunk.try_into().unwrap()), Relaxed);
    }
}

/// [`store_text`] for a static text, skipped when `key` says the field holds it already.
fn store_static(field: &[AtomicU64], key: &AtomicU64, s: &'static str, keep: Keep) {
    // Address and length, told apart as long as addresses fit in 48 bits; else 0,
    // which is never taken as "already there".
    let addr = s.as_ptr() as u64;
    let k = if addr < (1 << 48) && s.len() < (1 << 16) && !s.is_empty() {
        addr | ((s.len() as u64) << 48)
    } else {
        0
    };
    if k != 0 && key.load(Relaxed) == k {
        return;
    }
    store_text(field, s, keep);
    key.store(k, Relaxed);
}

/// The text of a label field: up to its first NUL.
pub(crate) fn load_text(field: &[AtomicU64]) -> Vec<u8> {
    let mut out = Vec::new();
    for w in field {
        let b = w.load(Relaxed).to_ne_bytes();
        match b.iter().position(|&c| c == 0) {
            Some(n) => {
                out.extend_from_slice(&b[..n]);
                break;
            }
            None => out.extend_from_slice(&b),
        }
    }
    out
}

/// The directory registries live in.
pub fn registry_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WEFT_REGISTRY_DIR") {
        return PathBuf::from(d);
    }
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        return shm;
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// A process's start time in clock ticks after boot, from the stat file of its main
/// thread (`/proc/<pid>/task/<pid>/stat`: the same value as `/proc/<pid>/stat`, which
/// qemu-user fakes for the emulated process itself).
pub fn process_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).ok()?;
    // Fields after the command (which may contain spaces and parentheses).
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

struct Registry {
    /// Start of the reservation: the header, then the slots.
    base: *mut u8,
    /// Slots the reservation can hold (0: none could be made).
    reserve: usize,
    fd: i32,
    path: Option<CString>,
    pid: i32,
    capacity: usize,
    used: usize,
    free: Vec<u32>,
}

/// The registry, behind a spin lock (not a Mutex: the fork handlers must be able to
/// take and reset it).
struct Global {
    lock: AtomicBool,
    reg: core::cell::UnsafeCell<Option<Registry>>,
}
// SAFETY: `reg` is only touched with `lock` held.
unsafe impl Sync for Global {}

static GLOBAL: Global = Global {
    lock: AtomicBool::new(false),
    reg: core::cell::UnsafeCell::new(None),
};

fn lock() {
    while GLOBAL
        .lock
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}
fn unlock() {
    GLOBAL.lock.store(false, Release);
}

/// Hands out a zeroed slot for a new fiber. Never fails: without a shared registry,
/// slots come from private memory.
pub(crate) fn alloc_slot() -> *mut Slot {
    lock();
    // SAFETY: the lock is held.
    let reg = unsafe { &mut *GLOBAL.reg.get() };
    if reg.is_none() {
        *reg = Some(Registry::create());
    }
    let r = reg.as_mut().expect("registry just created");
    let index = match r.free.pop() {
        Some(i) => i as usize,
        None => {
            if r.used == r.capacity && !r.grow() {
                unlock();
                return private_slot();
            }
            r.used += 1;
            r.header().used.store(r.used as u64, Release);
            r.used - 1
        }
    };
    let slot = r.slot(index);
    unlock();
    slot
}

/// Marks a slot free (its fiber has been freed): readers skip it from now on.
pub(crate) fn mark_free(slot: *mut Slot) {
    // SAFETY: `slot` came from `alloc_slot` and its fiber is gone: we are its owner.
    let s = unsafe { &*slot };
    s.begin_write();
    s.state.store(SLOT_FREE, Relaxed);
    s.end_write();
}

/// Returns a slot marked free to the registry for any thread to reuse.
pub(crate) fn free_slot(slot: *mut Slot) {
    lock();
    // SAFETY: the lock is held.
    if let Some(r) = unsafe { &mut *GLOBAL.reg.get() } {
        let start = r.base as usize + HEADER_SIZE;
        if r.reserve > 0 && (start..start + r.capacity * SLOT_SIZE).contains(&(slot as usize)) {
            r.free.push(((slot as usize - start) / SLOT_SIZE) as u32);
            unlock();
            return;
        }
    }
    unlock();
    // SAFETY: not in the registry, so it came from `private_slot`: a Box<SlotMem>.
    drop(unsafe { Box::from_raw(slot.cast::<SlotMem>()) });
}

/// A slot outside the registry (it is full, or could not be made): the fiber works, but
/// readers do not see it.
fn private_slot() -> *mut Slot {
    // SAFETY: a SlotMem is plain atomics (and a reserved word), valid when zeroed.
    Box::into_raw(Box::new(unsafe { core::mem::zeroed::<SlotMem>() })).cast()
}

impl Registry {
    fn header(&self) -> &Header {
        // SAFETY: the header is mapped for the life of the process.
        unsafe { &*self.base.cast::<Header>() }
    }

    fn slot(&self, index: usize) -> *mut Slot {
        // SAFETY: index < capacity, inside the mapped part of the reservation.
        unsafe { self.base.add(HEADER_SIZE + index * SLOT_SIZE).cast() }
    }

    fn create() -> Registry {
        // Reserve address space for the slots; under tools that limit it (valgrind) or
        // a tight `ulimit -v`, settle for less: past it, fibers still work, unseen.
        let (base, reserve) = [RESERVE_SLOTS, 32 << 20, 1 << 20, 64 << 10, FIRST_SLOTS]
            .into_iter()
            .find_map(|slots| {
                // SAFETY: reserves address space only (PROT_NONE, no memory).
                let p = unsafe {
                    libc::mmap(
                        core::ptr::null_mut(),
                        HEADER_SIZE + slots * SLOT_SIZE,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                (p != libc::MAP_FAILED).then_some((p, slots))
            })
            .unwrap_or((core::ptr::null_mut(), 0));
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut r = Registry {
            base: base.cast(),
            reserve,
            fd: -1,
            path: None,
            pid,
            capacity: 0,
            used: 0,
            free: Vec::new(),
        };
        if reserve == 0 {
            eprintln!("weft: no address space for the fiber registry; `weft ps` will not see this process");
            return r;
        }
        let off = matches!(
            std::env::var("WEFT_REGISTRY").as_deref(),
            Ok("off" | "0" | "no")
        );
        if !off {
            match open_file(pid) {
                Ok((fd, path)) => {
                    r.fd = fd;
                    r.path = Some(path);
                }
                Err(e) => eprintln!(
                    "weft: cannot create the fiber registry in {} ({e}); this process works \
                     normally but `weft ps` will not see it (set WEFT_REGISTRY_DIR to a writable \
                     directory, or WEFT_REGISTRY=off to silence this)",
                    registry_dir().display()
                ),
            }
        }
        r.map_range(0, HEADER_SIZE + FIRST_SLOTS * SLOT_SIZE);
        r.capacity = FIRST_SLOTS;
        // SAFETY: the header was just mapped, zeroed, and nothing else uses it yet.
        unsafe {
            let h = &mut *r.base.cast::<Header>();
            h.magic = MAGIC;
            h.version = VERSION;
            h.slot_size = SLOT_SIZE as u32;
            h.pid.store(pid, Relaxed);
            h.uid = libc::getuid();
            h.start_time
                .store(process_start_time(pid).unwrap_or(0), Relaxed);
            h.tsc0 = crate::clock::ticks();
            h.mono0_ns = crate::clock::monotonic_ns();
            h.ticks_per_sec = crate::clock::ticks_per_second();
            h.capacity.store(FIRST_SLOTS as u64, Release);
        }
        if r.path.is_some() {
            // Registries left by this user's processes that died (killed, or crashed
            // before exit) are removed by the next weft process that starts, so they do
            // not pile up; a listing (`weft ps`) only reports them. Ours is alive: its
            // header already holds this process's start time.
            let _ = crate::introspect::clean_stale();
            // SAFETY: registering process-wide hooks once, when the registry is created.
            unsafe {
                libc::atexit(remove_at_exit);
                libc::pthread_atfork(
                    Some(before_fork),
                    Some(after_fork_parent),
                    Some(after_fork_child),
                );
            }
        }
        r
    }

    /// Maps `[offset, offset + len)` of the registry (file-backed if there is a file).
    fn map_range(&mut self, offset: usize, len: usize) {
        // SAFETY: the range lies inside our reservation; MAP_FIXED replaces only it.
        unsafe {
            let addr = self.base.add(offset).cast();
            let p = if self.fd >= 0 {
                if libc::ftruncate(self.fd, (offset + len) as libc::off_t) != 0 {
                    self.fall_back_to_private(offset);
                    return self.map_range(offset, len);
                }
                libc::mmap(
                    addr,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    self.fd,
                    offset as libc::off_t,
                )
            } else {
                libc::mmap(
                    addr,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            assert!(p != libc::MAP_FAILED, "weft: cannot map the fiber registry");
        }
    }

    /// The file could not grow (no space in /dev/shm): stop sharing. The slots already
    /// mapped stay shared; readers see them, and see `capacity` stop growing.
    fn fall_back_to_private(&mut self, _offset: usize) {
        eprintln!("weft: the fiber registry cannot grow (no space?); new fibers will not be visible to `weft ps`");
        // SAFETY: closing our own descriptor; the mappings stay valid.
        unsafe { libc::close(self.fd) };
        self.fd = -1;
    }

    /// Doubles the slots the registry holds; false when the reservation is full.
    fn grow(&mut self) -> bool {
        let new = (self.capacity * 2).min(self.reserve);
        if new <= self.capacity {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Relaxed) {
                eprintln!(
                    "weft: the fiber registry is full ({} fibers); more fibers work, but `weft ps` \
                     will not see them",
                    self.capacity
                );
            }
            return false;
        }
        self.map_range(
            HEADER_SIZE + self.capacity * SLOT_SIZE,
            (new - self.capacity) * SLOT_SIZE,
        );
        self.capacity = new;
        self.header().capacity.store(new as u64, Release);
        true
    }
}

fn open_file(pid: i32) -> std::io::Result<(i32, CString)> {
    let path = registry_dir().join(format!("weft-{pid}"));
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    for attempt in 0..2 {
        // SAFETY: opening a path we own the string of.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 {
            // SAFETY: our own descriptor; makes the mode 0600 whatever the umask.
            unsafe { libc::fchmod(fd, 0o600) };
            return Ok((fd, c));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) && attempt == 0 {
            // Left by an earlier process with our pid that died: it is stale.
            // SAFETY: removing a path we named.
            unsafe { libc::unlink(c.as_ptr()) };
            continue;
        }
        return Err(e);
    }
    Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists))
}

extern "C" fn remove_at_exit() {
    lock();
    // SAFETY: the lock is held.
    if let Some(r) = unsafe { &*GLOBAL.reg.get() } {
        // Only the process that created the file removes it (not a forked child that
        // kept the parent's registry because it could not make its own).
        // SAFETY: getpid and unlink of our own path.
        if r.pid == unsafe { libc::getpid() } {
            if let Some(p) = &r.path {
                unsafe { libc::unlink(p.as_ptr()) };
            }
        }
    }
    unlock();
}

extern "C" fn before_fork() {
    lock();
}
extern "C" fn after_fork_parent() {
    unlock();
}

/// In a forked child: copy the registry into a file of the child's own, mapped over the
/// same addresses, so the child's fibers never write the parent's statistics.
extern "C" fn after_fork_child() {
    // SAFETY: the child has one thread, and `before_fork` took the lock for us.
    unsafe {
        if let Some(r) = (*GLOBAL.reg.get())
            .as_mut()
            .filter(|r| r.reserve > 0 && r.path.is_some())
        {
            let pid = libc::getpid();
            let len = HEADER_SIZE + r.capacity * SLOT_SIZE;
            match open_file(pid) {
                Ok((fd, path)) => {
                    let data = std::slice::from_raw_parts(r.base, len);
                    let ok = libc::ftruncate(fd, len as libc::off_t) == 0
                        && libc::pwrite(fd, data.as_ptr().cast(), len, 0) == len as isize;
                    if ok {
                        libc::mmap(
                            r.base.cast(),
                            len,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_SHARED | libc::MAP_FIXED,
                            fd,
                            0,
                        );
                        if r.fd >= 0 {
                            libc::close(r.fd);
                        }
                        r.fd = fd;
                        r.path = Some(path);
                        r.pid = pid;
                        let h = &*r.base.cast::<Header>();
                        h.pid.store(pid, Relaxed);
                        h.start_time
                            .store(process_start_time(pid).unwrap_or(0), Relaxed);
                    } else {
                        libc::close(fd);
                        libc::unlink(path.as_ptr());
                    }
                }
                Err(_) => {
                    // Keep writing privately rather than into the parent's file.
                    let copy = std::slice::from_raw_parts(r.base, len).to_vec();
                    libc::mmap(
                        r.base.cast(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    );
                    core::ptr::copy_nonoverlapping(copy.as_ptr(), r.base, len);
                    r.fd = -1;
                    r.path = None;
                }
            }
        }
    }
    unlock();
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::offset_of;

    /// The layout docs/introspection.md documents for other readers.
    #[test]
    fn layout_matches_the_documented_format() {
        assert_eq!(
            [
                offset_of!(Header, version),
                offset_of!(Header, slot_size),
                offset_of!(Header, pid),
                offset_of!(Header, uid),
                offset_of!(Header, start_time),
                offset_of!(Header, tsc0),
                offset_of!(Header, mono0_ns),
                offset_of!(Header, capacity),
                offset_of!(Header, used),
                offset_of!(Header, ticks_per_sec),
            ],
            [8, 12, 16, 20, 24, 32, 40, 48, 56, 64]
        );
        assert_eq!(
            [
                offset_of!(Slot, state),
                offset_of!(Slot, id),
                offset_of!(Slot, activations),
                offset_of!(Slot, deactivations),
                offset_of!(Slot, run_ticks),
                offset_of!(Slot, switched_in_at),
                offset_of!(Slot, last_tid),
                offset_of!(Slot, creator_tid),
                offset_of!(Slot, entry),
                offset_of!(Slot, failed_activations),
                offset_of!(Slot, stack_base),
                offset_of!(Slot, stack_size),
                offset_of!(Slot, flags),
            ],
            [4, 8, 16, 24, 32, 40, 48, 52, 56, 64, 72, 80, 88]
        );
        assert_eq!(core::mem::size_of::<Slot>(), 128);
        // The label, from the start of the slot.
        let l = |o: usize| offset_of!(SlotMem, label) + o;
        assert_eq!(
            [
                l(offset_of!(Label, seq)),
                l(offset_of!(Label, line)),
                l(offset_of!(Label, id)),
                l(offset_of!(Label, column)),
                l(offset_of!(Label, file_key)),
                l(offset_of!(Label, function_key)),
                l(offset_of!(Label, name)),
                l(offset_of!(Label, file)),
                l(offset_of!(Label, function)),
            ],
            [128, 132, 136, 144, 152, 160, 168, 216, 280]
        );
        assert_eq!(core::mem::size_of::<SlotMem>(), 384);
    }

    fn label_texts(l: &Label) -> [String; 3] {
        [&l.name[..], &l.file[..], &l.function[..]]
            .map(|f| String::from_utf8(load_text(f)).expect("whole characters"))
    }

    #[test]
    fn long_texts_are_cut_at_characters_and_marked() {
        // SAFETY: a Label is plain atomics (and a reserved word), valid when zeroed.
        let l: Box<Label> = Box::new(unsafe { core::mem::zeroed() });
        // A name of 2-byte characters: cut between two, with room for "...".
        let name = "é".repeat(40);
        let function: &'static str =
            Box::leak(format!("a::{}::{{{{closure}}}}", "b".repeat(200)).into());
        let at: &'static Location<'static> = Location::caller();
        l.write(
            7,
            &LabelText {
                name: &name,
                function,
                location: Some(at),
            },
        );
        let [n, f, fun] = label_texts(&l);
        assert_eq!(n, format!("{}...", "é".repeat(22)));
        assert!(n.len() <= NAME_BYTES);
        assert_eq!(f, at.file());
        assert_eq!(fun.len(), FUNCTION_BYTES);
        assert!(fun.starts_with("a::bbb") && fun.ends_with("bb..."), "{fun}");
        assert_eq!(l.id.load(Relaxed), 7);
        assert_eq!(l.line.load(Relaxed), at.line());
        assert_eq!(l.seq.load(Relaxed) % 2, 0);

        // A shorter text over a longer one: the NUL ends it; an empty name clears it.
        l.write(
            8,
            &LabelText {
                name: "",
                function: "short",
                location: None,
            },
        );
        assert_eq!(label_texts(&l), ["", "", "short"].map(String::from));
        l.set_name("renamed");
        assert_eq!(label_texts(&l)[0], "renamed");
        // Exactly the field's size: no NUL, all of it.
        let full = "n".repeat(NAME_BYTES);
        l.set_name(&full);
        assert_eq!(label_texts(&l)[0], full);
        assert_eq!(l.id.load(Relaxed), 8);

        // A long path keeps its end (the file's name), after "...", from a whole
        // character (the cut would fall inside one here).
        let file = format!("{}/xy.rs", "é".repeat(50));
        store_text(&l.file, &file, Keep::End);
        let f = String::from_utf8(load_text(&l.file)).unwrap();
        assert_eq!(f, format!("...{}/xy.rs", "é".repeat(27)));
        assert!(f.len() <= FILE_BYTES);
    }
}
