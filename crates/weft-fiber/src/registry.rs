//! The fiber registry: every fiber's statistics, in shared memory that other processes
//! can read without stopping or signalling this one (weft's `/proc/<pid>/fibers`).
//!
//! # Layout
//!
//! One file per process, `<dir>/weft-<pid>` (dir: `$WEFT_REGISTRY_DIR`, else
//! `/dev/shm`, else `$XDG_RUNTIME_DIR`), mode 0600 so only the same user (and root) can
//! read it. A 4 KiB [`Header`], then an array of 128-byte [`Slot`]s, one per fiber.
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
use std::path::PathBuf;

/// Identifies a registry file and its layout version.
pub const MAGIC: [u8; 8] = *b"WEFTREG1";
pub const HEADER_SIZE: usize = 4096;
pub const SLOT_SIZE: usize = 128;
/// Address space reserved for slots: 512 Mi fibers.
const RESERVE_SLOTS: usize = 512 << 20;
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

const _: () = assert!(core::mem::size_of::<Slot>() == SLOT_SIZE);
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
    // SAFETY: not in the registry, so it came from `private_slot`.
    drop(unsafe { Box::from_raw(slot) });
}

/// A slot outside the registry (it is full, or could not be made): the fiber works, but
/// readers do not see it.
fn private_slot() -> *mut Slot {
    // SAFETY: a Slot is plain atomics, valid when zeroed.
    Box::into_raw(Box::new(unsafe { core::mem::zeroed::<Slot>() }))
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
            h.version = 1;
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
    }
}
