//! What green threads called: a counter per call, visible in `weft ps PID`.
//!
//! For every call the layer overrides, the counters say how many times green threads
//! made it, how many of those parked the green thread, and how many are parked in it
//! now (and the header, how many green threads are asleep now and the most ever asleep
//! at once). For the blocking calls it does **not**
//! cover (it overrides them only to count them: `fread`, `system`, `flock`, ...),
//! they say how many times a green thread made them, each time blocking its worker
//! for as long as the call took. Calls made off green threads are not counted.
//!
//! The counters live in a shared-memory file beside the fiber registry,
//! `<dir>/weft-hook-<pid>` (the directory of `weft_fiber::introspect::registry_dir`),
//! made when a green thread first makes an overridden call and removed at exit; `weft
//! ps PID` reads it ([`read`]). Where it cannot be made they live in private memory,
//! and [`snapshot`] still reads them.
//!
//! `WEFT_HOOK_LOG=1` also writes a line to standard error the first time a green
//! thread makes each uncovered call (`WEFT_HOOK_LOG=all`: every time).
//!
//! Format (version 1, native endianness): a 64-byte header (magic `WEFTHOOK`, version
//! u32, calls u32, slots u32, pid u32, process start time u64 (field 22 of
//! /proc/PID/stat), green threads asleep now u64, most asleep at once u64, 16 bytes of
//! padding); one 32-byte entry per call (name, 24 bytes NUL-padded; covered, u8: 1
//! covered, 0 not; 7 bytes of padding); then, from the next multiple of 64 bytes,
//! `slots` slots, each a whole number of 64-byte lines holding per call three u64:
//! calls, parked, parked now. An OS thread counts in a slot of its own (round robin once
//! they are all taken), so the workers do not share a cache line; a reader sums the
//! slots.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::*};
use std::sync::OnceLock;

macro_rules! calls {
    (covered { $($c:ident = $cn:literal,)* } uncovered { $($u:ident = $un:literal,)* }) => {
        /// A call the layer counts.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(non_camel_case_types, missing_docs)]
        pub enum Call { $($c,)* $($u,)* }
        /// Every call, in the order of [`Call`]: name and whether it is covered.
        pub const CALLS: &[(&str, bool)] = &[$(($cn, true),)* $(($un, false),)*];
    };
}

calls! {
    covered {
        read = "read", readv = "readv", pread = "pread", write = "write", writev = "writev",
        pwrite = "pwrite", recv = "recv", recvfrom = "recvfrom", recvmsg = "recvmsg",
        send = "send", sendto = "sendto", sendmsg = "sendmsg", accept = "accept",
        accept4 = "accept4", connect = "connect", poll = "poll", ppoll = "ppoll",
        select = "select", pselect = "pselect", epoll_wait = "epoll_wait",
        epoll_pwait = "epoll_pwait", nanosleep = "nanosleep",
        clock_nanosleep = "clock_nanosleep", usleep = "usleep", sleep = "sleep",
        fsync = "fsync", fdatasync = "fdatasync", open = "open", openat = "openat",
        close = "close", getaddrinfo = "getaddrinfo", waitpid = "waitpid", wait = "wait",
        ppoll_mask = "ppoll(sigmask)", pselect_mask = "pselect(sigmask)",
        epoll_pwait_mask = "epoll_pwait(sigmask)",
    }
    uncovered {
        fread = "fread", fwrite = "fwrite", fgets = "fgets", getline = "getline",
        getdelim = "getdelim", fflush = "fflush", fclose = "fclose", system = "system",
        popen = "popen", pclose = "pclose", wait3 = "wait3", wait4 = "wait4",
        waitid = "waitid", sigwait = "sigwait", sigwaitinfo = "sigwaitinfo",
        sigtimedwait = "sigtimedwait", sigsuspend = "sigsuspend", pause = "pause",
        flock = "flock", lockf = "lockf", fcntl_lock = "fcntl(F_SETLKW)",
        recvmmsg = "recvmmsg", sendmmsg = "sendmmsg", sendfile = "sendfile",
        splice = "splice", copy_file_range = "copy_file_range", preadv = "preadv",
        pwritev = "pwritev", gethostbyname = "gethostbyname",
        getnameinfo = "getnameinfo",
        pthread_join = "pthread_join", sem_wait = "sem_wait",
        sem_timedwait = "sem_timedwait", msgrcv = "msgrcv", msgsnd = "msgsnd",
    }
}

const MAGIC: &[u8; 8] = b"WEFTHOOK";
const VERSION: u32 = 1;
const HEADER: usize = 64;
/// A call's name and kind.
const NAME: usize = 32;
/// A call's counters in one slot: calls, parked, parked now.
const COUNTERS: usize = 24;
/// Slots of counters: each OS thread that counts takes one (round robin past the last),
/// so two workers never write one cache line.
const SLOTS: usize = 64;

#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    entries: u32,
    slots: u32,
    pid: u32,
    start: u64,
    asleep: AtomicU64,
    asleep_max: AtomicU64,
    _pad: [u8; 16],
}

#[repr(C)]
struct Name {
    name: [u8; 24],
    covered: u8,
    _pad: [u8; 7],
}

#[repr(C)]
struct Counters {
    calls: AtomicU64,
    parked: AtomicU64,
    waiting: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<Header>() == HEADER);
const _: () = assert!(core::mem::size_of::<Name>() == NAME);
const _: () = assert!(core::mem::size_of::<Counters>() == COUNTERS);

/// Bytes of one slot (a whole number of cache lines).
fn slot_size(entries: usize) -> usize {
    (entries * COUNTERS).div_ceil(64) * 64
}

/// Where the slots begin.
fn slots_at(entries: usize) -> usize {
    (HEADER + entries * NAME).div_ceil(64) * 64
}

fn size() -> usize {
    slots_at(CALLS.len()) + SLOTS * slot_size(CALLS.len())
}

/// The counters' memory (the mapped file, or private memory), made at first use.
static BASE: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());

#[inline]
fn base() -> *mut u8 {
    let b = BASE.load(Acquire);
    if b.is_null() {
        init()
    } else {
        b
    }
}

#[cold]
fn init() -> *mut u8 {
    static INIT: OnceLock<usize> = OnceLock::new();
    // Runtime depth raised: the calls made here (the file's open, /proc's read) are the
    // C library's, so this green thread does not park holding the lock that the next
    // one to count would wait for.
    let _np = crate::io::NoPreempt::new();
    *INIT.get_or_init(|| {
        let mem = map_file().unwrap_or_else(|| {
            let layout = std::alloc::Layout::from_size_align(size(), 64).expect("small");
            // SAFETY: a non-zero size; zeroed memory is a valid header and counters.
            unsafe { std::alloc::alloc_zeroed(layout) }
        });
        assert!(!mem.is_null(), "weft-hook: no memory for the call counters");
        // SAFETY: `mem` is `size()` zeroed bytes, 64-aligned, ours until published.
        unsafe {
            let h = &mut *(mem as *mut Header);
            h.magic = *MAGIC;
            h.version = VERSION;
            h.entries = CALLS.len() as u32;
            h.slots = SLOTS as u32;
            h.pid = std::process::id();
            h.start = start_time(std::process::id()).unwrap_or(0);
            for (i, (name, covered)) in CALLS.iter().enumerate() {
                let c = &mut *(mem.add(HEADER + i * NAME) as *mut Name);
                let n = name.len().min(23);
                c.name[..n].copy_from_slice(&name.as_bytes()[..n]);
                c.covered = *covered as u8;
            }
        }
        BASE.store(mem, Release);
        mem as usize
    }) as *mut u8
}

/// The file's path for `pid`.
fn path(pid: u32) -> std::path::PathBuf {
    weft_fiber::introspect::registry_dir().join(format!("weft-hook-{pid}"))
}

/// Field 22 of /proc/PID/stat (start time in clock ticks after boot).
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// Makes and maps this process's counter file (see the module comment); removed at
/// exit.
fn map_file() -> Option<*mut u8> {
    if std::env::var_os("WEFT_REGISTRY").is_some_and(|v| v == "off") {
        return None;
    }
    let p = path(std::process::id());
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: plain calls on a descriptor of our own; the C library's open and close
    // (the layer's own would count this call).
    unsafe {
        let fd = super::real::open()(
            c.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        );
        if fd < 0 {
            return None;
        }
        let ok = libc::ftruncate(fd, size() as libc::off_t) == 0;
        let m = if ok {
            libc::mmap(
                core::ptr::null_mut(),
                size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        super::real::close()(fd);
        if m == libc::MAP_FAILED {
            libc::unlink(c.as_ptr());
            return None;
        }
        extern "C" fn remove() {
            let p = path(std::process::id());
            if let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) {
                // SAFETY: unlinks our own file by its NUL-terminated path.
                unsafe { libc::unlink(c.as_ptr()) };
            }
        }
        libc::atexit(remove);
        Some(m.cast())
    }
}

thread_local! {
    /// This OS thread's slot plus one (0: none taken yet).
    static SLOT: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

#[cold]
fn take_slot() -> usize {
    static NEXT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
    let s = NEXT.fetch_add(1, Relaxed) % SLOTS;
    SLOT.with(|c| c.set(s + 1));
    s
}

/// Call `c`'s counters in the calling thread's slot.
#[inline]
fn counters(c: Call) -> &'static Counters {
    let slot = match SLOT.with(|s| s.get()) {
        0 => take_slot(),
        s => s - 1,
    };
    let n = CALLS.len();
    // SAFETY: the memory holds SLOTS slots of one entry per call and lives as long as
    // the process.
    unsafe {
        &*(base().add(slots_at(n) + slot * slot_size(n) + c as usize * COUNTERS) as *const Counters)
    }
}

fn header() -> &'static Header {
    // SAFETY: as above.
    unsafe { &*(base() as *const Header) }
}

/// A green thread made call `c`.
#[inline]
pub(crate) fn call(c: Call) {
    counters(c).calls.fetch_add(1, Relaxed);
}

/// A green thread made uncovered call `c` (counted, and logged if asked).
#[inline]
pub(crate) fn uncovered(c: Call) {
    call(c);
    log(c);
}

/// While alive: a green thread is parked (or about to park) in call `c`. Dropped on
/// the thread that made it (a green thread stays on its worker), so the slot is the
/// same.
pub(crate) struct Waiting(&'static Counters, bool);

impl Waiting {
    /// `asleep`: the call is a sleep (counted in the header's sleep gauge too).
    pub(crate) fn new(c: Call, asleep: bool) -> Waiting {
        let k = counters(c);
        k.parked.fetch_add(1, Relaxed);
        k.waiting.fetch_add(1, Relaxed);
        if asleep {
            let h = header();
            let now = h.asleep.fetch_add(1, Relaxed) + 1;
            h.asleep_max.fetch_max(now, Relaxed);
        }
        Waiting(k, asleep)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Relaxed);
        if self.1 {
            header().asleep.fetch_sub(1, Relaxed);
        }
    }
}

/// One call's counters, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallStats {
    /// The call's name (`read`, `fread`, `fcntl(F_SETLKW)`, ...).
    pub name: String,
    /// Whether the layer covers it (parks the green thread); false: it only counts it.
    pub covered: bool,
    /// Calls made by green threads.
    pub calls: u64,
    /// Of those, how many parked the green thread (covered calls only).
    pub parked: u64,
    /// Green threads parked in it now.
    pub waiting: u64,
}

/// A process's counters, as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// One entry per call.
    pub calls: Vec<CallStats>,
    /// Green threads parked in a sleep (`nanosleep`, `clock_nanosleep`, `usleep`,
    /// `sleep`, and `poll` or `select` without descriptors) now.
    pub asleep: u64,
    /// The most green threads ever asleep at once.
    pub asleep_max: u64,
}

impl Stats {
    /// The counters of the call named `name`.
    pub fn get(&self, name: &str) -> Option<&CallStats> {
        self.calls.iter().find(|c| c.name == name)
    }
}

/// Parses counters from `mem` (the file's bytes, or ours), summing the slots.
///
/// # Safety
/// `mem` is readable for `len` bytes and 8-aligned.
unsafe fn parse(mem: *const u8, len: usize) -> Option<Stats> {
    if len < HEADER {
        return None;
    }
    // SAFETY: per the contract; every read is checked against `len`.
    unsafe {
        let h = &*(mem as *const Header);
        if &h.magic != MAGIC || h.version != VERSION {
            return None;
        }
        let (n, slots) = (h.entries as usize, h.slots as usize);
        if len < slots_at(n) + slots * slot_size(n) {
            return None;
        }
        let calls = (0..n)
            .map(|i| {
                let c = &*(mem.add(HEADER + i * NAME) as *const Name);
                let end = c.name.iter().position(|&b| b == 0).unwrap_or(24);
                let mut s = CallStats {
                    name: String::from_utf8_lossy(&c.name[..end]).into_owned(),
                    covered: c.covered != 0,
                    calls: 0,
                    parked: 0,
                    waiting: 0,
                };
                for slot in 0..slots {
                    let k = &*(mem.add(slots_at(n) + slot * slot_size(n) + i * COUNTERS)
                        as *const Counters);
                    s.calls += k.calls.load(Relaxed);
                    s.parked += k.parked.load(Relaxed);
                    s.waiting = s.waiting.wrapping_add(k.waiting.load(Relaxed));
                }
                s
            })
            .collect();
        Some(Stats {
            calls,
            asleep: h.asleep.load(Relaxed),
            asleep_max: h.asleep_max.load(Relaxed),
        })
    }
}

/// This process's counters.
pub fn snapshot() -> Stats {
    let b = base();
    // SAFETY: our own memory, `size()` bytes.
    unsafe { parse(b, size()) }.expect("our own counters parse")
}

/// The counters of process `pid` from its file, if it has one (it has made an
/// overridden call on a green thread) that is not stale (left by a dead process whose
/// pid was reused).
pub fn read(pid: u32) -> Option<Stats> {
    let bytes = std::fs::read(path(pid)).ok()?;
    let mut aligned = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: copies the file's bytes into 8-aligned memory of at least their length.
    unsafe {
        core::ptr::copy_nonoverlapping(bytes.as_ptr(), aligned.as_mut_ptr().cast(), bytes.len())
    };
    // SAFETY: `aligned` is readable for `bytes.len()` bytes and 8-aligned.
    let s = unsafe { parse(aligned.as_ptr().cast(), bytes.len())? };
    // SAFETY: parse checked the header is there.
    let h = unsafe { &*(aligned.as_ptr() as *const Header) };
    (h.start == 0 || start_time(pid) == Some(h.start)).then_some(s)
}

/// Writes the log line of uncovered call `c`, if `WEFT_HOOK_LOG` asks for it.
fn log(c: Call) {
    static MODE: OnceLock<u8> = OnceLock::new();
    let mode = *MODE.get_or_init(|| match std::env::var("WEFT_HOOK_LOG").as_deref() {
        Ok("all") => 2,
        Ok("") | Ok("0") | Err(_) => 0,
        Ok(_) => 1,
    });
    static LOGGED: [AtomicBool; CALLS.len()] = [const { AtomicBool::new(false) }; CALLS.len()];
    if mode == 0 || (mode == 1 && LOGGED[c as usize].swap(true, Relaxed)) {
        return;
    }
    let worker = crate::worker::current_worker().unwrap_or(0);
    let line = format!(
        "weft-hook: {} on a green thread (worker {worker}) is not covered: it blocks the \
         worker while it waits\n",
        CALLS[c as usize].0
    );
    // SAFETY: a write of a local buffer to standard error, with the C library's write
    // (ours could park).
    unsafe { super::real::write()(2, line.as_ptr().cast(), line.len()) };
}
