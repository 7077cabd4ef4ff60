//! The shared-memory transport for clients on the same machine: the segment both
//! sides map, and the client's end of it ([`ClientEnd`]; the server's is
//! `server/shm.rs`).
//!
//! # Design
//! - A client connects to the server's second Unix socket, `<socket>.shm`. The server
//!   answers with a segment: a memfd of [`SEGMENT`] bytes, sealed so that its size can
//!   never change (a client cannot shrink it under the server's mapping), passed with
//!   `SCM_RIGHTS` after the [`MAGIC`] bytes. Who may connect is who may open the
//!   socket: its permissions are the main socket's.
//! - The segment holds two byte rings of [`RING`] bytes, requests (client to server)
//!   and replies (server to client), each with a producer position (`head`) and a
//!   consumer position (`tail`) that only grow. The bytes are RESP, exactly what the
//!   socket would carry, so every command works, and a request or reply larger than a
//!   ring simply goes through in pieces.
//! - Waking: the server polls a connection's request ring while it has other work
//!   (its green thread yields to the others of its worker) and, after a short while
//!   with nothing, sets `server_sleeping` and waits on the socket. A client that finds
//!   that flag set after publishing bytes (or freeing reply space) clears it and
//!   writes one byte to the socket: the doorbell. The client waits for replies (or
//!   request space) on a futex, `client_bell`, having set `client_waits_reply` (or `client_waits_room`); the server
//!   bumps the bell and wakes it only when that flag is set. So a busy server makes no
//!   system call for a request but the reply's futex wake, and a client one futex wait.
//! - The socket stays open for the connection's life: its end is the connection's end.
//!   A client that dies closes it, the server's wait sees the end of stream, and the
//!   connection goes as a socket connection would (nothing is left behind). A client
//!   that sees the socket end knows the server is gone.
//! - Nothing in the segment is trusted by the server: it keeps its own positions and
//!   only publishes them; the other side's are checked (a ring never holds more than
//!   [`RING`] bytes: anything else closes the connection); bytes are copied out once
//!   and parsed as from a socket, with the same limits. A client writing garbage hurts
//!   only its own connection.
//! - The flags and positions are atomics on both sides (`SeqCst` where a flag is set
//!   and a position then read, or the other way: the two sides' store-then-load pairs
//!   must not pass each other, or a wake-up is lost).
//!
//! # The client's spin
//! Waking a client that sleeps on its futex costs the server a few microseconds (on a
//! virtual machine, an interrupt to a halted CPU) and the client more before it runs.
//! So before it sleeps, a client waiting for a reply looks at the reply ring for a
//! short while ([`Spin`]): a reply that comes within that spin needs no futex at all.
//! Spinning pays only while the reply comes soon and the CPU it holds is not needed by
//! the server or another client, so by default the spin adapts, as adaptive mutexes
//! do: a reply caught after t makes the spin at least 2t long and at least half of
//! [`Spin::max_ns`] (at most that); a spin that runs out halves the next; a few in a row turn
//! spinning off, and then only one wait in 32 spins (a probe), until one catches its
//! reply again. A spin during which the client lost its CPU for a while counts as
//! one that ran out: the CPUs are taken. The server also publishes in the segment how
//! many of its shared-memory connections are busy (`server_busy`): by default a
//! client spins only while they are at most twice its CPUs, since beyond that the
//! clients that spin take the CPUs the server and the others need. It also publishes
//! the CPU it answered from (`server_cpu`): a client on that CPU does not spin, since
//! the server cannot answer while it holds the CPU (a client woken from its futex is
//! often moved to the CPU of the server that woke it, and there a spin could never
//! catch a reply).
//! `WEFT_KV_SHM_SPIN` changes the defaults (see [`Spin::from_env`]).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

/// The bytes of each ring.
pub const RING: usize = 128 << 10;

/// Where the rings start: the positions and flags fill the first page.
const HEADER: usize = 4096;

/// The segment's size: the header, the request ring, the reply ring.
pub const SEGMENT: usize = HEADER + 2 * RING;

/// What the server sends with the segment's descriptor (its version in the last byte).
pub const MAGIC: &[u8; 8] = b"WEFTSHM1";

// The header: each word on its own cache line.
const REQ_HEAD: usize = 0;
const REQ_TAIL: usize = 64;
const REP_HEAD: usize = 128;
const REP_TAIL: usize = 192;
const SERVER_SLEEPING: usize = 256;
const CLIENT_WAITS_REPLY: usize = 320;
const CLIENT_BELL: usize = 384;
const CLIENT_WAITS_ROOM: usize = 448;
/// How many of the server's shared-memory connections are busy (not asleep on their
/// socket), published with each reply: a hint for the client's spin.
const SERVER_BUSY: usize = 512;
/// The CPU the server's thread ran on when it sent the last reply, plus one (0: not
/// known): a client on that CPU does not spin, as its spin would keep the server off
/// the CPU it needs to answer.
const SERVER_CPU: usize = 576;

/// The path of the shared-memory socket beside the Unix socket `socket`.
pub fn socket_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".shm");
    PathBuf::from(p)
}

/// A mapped segment.
pub struct Segment {
    ptr: *mut u8,
}

// SAFETY: the mapping is shared memory accessed only through atomics and the copies
// below; the pointer stays valid until drop.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: our own mapping of SEGMENT bytes, no longer used.
        unsafe { libc::munmap(self.ptr.cast(), SEGMENT) };
    }
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Segment {
    /// A new segment (the server's side): a memfd of [`SEGMENT`] bytes whose size is
    /// sealed, mapped; and its descriptor, to pass to the client.
    pub fn create() -> io::Result<(Segment, OwnedFd)> {
        // SAFETY: a NUL-terminated name; flags as documented.
        let fd = unsafe {
            libc::memfd_create(
                c"weft-kv-shm".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(last_error("cannot create a shared-memory segment"));
        }
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain calls on our own descriptor.
        let ok = unsafe {
            libc::ftruncate(fd.as_raw_fd(), SEGMENT as libc::off_t) == 0
                && libc::fcntl(
                    fd.as_raw_fd(),
                    libc::F_ADD_SEALS,
                    libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
                ) == 0
        };
        if !ok {
            return Err(last_error("cannot size the shared-memory segment"));
        }
        Ok((Segment::map(&fd)?, fd))
    }

    /// Maps the segment `fd` (the client's side), which must be [`SEGMENT`] bytes.
    pub fn map(fd: &OwnedFd) -> io::Result<Segment> {
        // SAFETY: fstat into a local.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(last_error("cannot look at the shared-memory segment"));
        }
        if st.st_size as usize != SEGMENT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the shared-memory segment has {} bytes, not {SEGMENT}",
                    st.st_size
                ),
            ));
        }
        // SAFETY: a fresh shared mapping of the whole descriptor (checked size).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SEGMENT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(last_error("cannot map the shared-memory segment"));
        }
        Ok(Segment { ptr: ptr.cast() })
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is one of the header's 64-byte aligned words, inside the
        // mapping (page aligned), which lives as long as `self`.
        unsafe { &*self.ptr.add(off).cast::<AtomicU64>() }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `u64_at`.
        unsafe { &*self.ptr.add(off).cast::<AtomicU32>() }
    }

    /// Copies `dst.len()` bytes out of a ring (`reply`: the reply ring, else the
    /// request ring) from position `pos` on (wrapping at the ring's end).
    fn copy_out(&self, reply: bool, pos: u64, dst: &mut [u8]) {
        let ring = self.ring(reply);
        let at = (pos % RING as u64) as usize;
        let first = dst.len().min(RING - at);
        // SAFETY: both ranges lie in the ring (at + first <= RING, the rest from 0
        // and dst.len() <= RING by the callers); the other side may write these bytes
        // meanwhile (only a faulty one does: they are its own published bytes), which
        // changes what we copy but nothing else: they are copied once and then parsed.
        unsafe {
            std::ptr::copy_nonoverlapping(ring.add(at), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(ring, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Copies `src` into a ring from position `pos` on (wrapping).
    fn copy_in(&self, reply: bool, pos: u64, src: &[u8]) {
        let ring = self.ring(reply);
        let at = (pos % RING as u64) as usize;
        let first = src.len().min(RING - at);
        // SAFETY: as in `copy_out`; these bytes are free space the other side does
        // not read until the head is published.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), ring.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), ring, src.len() - first);
        }
    }

    fn ring(&self, reply: bool) -> *mut u8 {
        let off = HEADER + if reply { RING } else { 0 };
        // SAFETY: inside the mapping.
        unsafe { self.ptr.add(off) }
    }
}

/// The bytes a ring holds between `tail` and `head`, or an error if the positions
/// cannot be a ring's (the other side wrote garbage).
fn held(head: u64, tail: u64) -> io::Result<usize> {
    let n = head.wrapping_sub(tail);
    if n > RING as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the shared-memory ring's positions are broken",
        ));
    }
    Ok(n as usize)
}

fn futex_wait(word: &AtomicU32, val: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a shared futex on a word of a live mapping; returns at a wake, a
    // change of value, a signal or the timeout, all of which the callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            val,
            &ts as *const libc::timespec,
        )
    };
}

/// The CPU this thread runs on, plus one (0 if not known).
fn this_cpu() -> u32 {
    // SAFETY: a plain call with no arguments (the kernel's rseq area or vDSO: cheap).
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_or(0, |c| c.wrapping_add(1))
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: a shared futex wake on a word of a live mapping.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1) };
}

/// The server's side of the positions and flags (it keeps its own positions: the
/// segment's copies are only published).
pub struct ServerSide {
    seg: Segment,
}

impl ServerSide {
    /// The server's view of `seg`.
    pub fn new(seg: Segment) -> ServerSide {
        ServerSide { seg }
    }

    /// The request bytes from `tail` on (checked).
    pub fn requests(&self, tail: u64) -> io::Result<usize> {
        held(self.seg.u64_at(REQ_HEAD).load(SeqCst), tail)
    }

    /// Copies requests out from `tail` into `dst` and publishes the new tail (waking
    /// a client that waits for space). `dst` is no longer than what [`Self::requests`]
    /// found.
    pub fn take(&self, tail: u64, dst: &mut [u8]) -> u64 {
        self.seg.copy_out(false, tail, dst);
        let tail = tail + dst.len() as u64;
        self.seg.u64_at(REQ_TAIL).store(tail, SeqCst);
        self.wake_client(CLIENT_WAITS_ROOM);
        tail
    }

    /// The free bytes of the reply ring for a server at `head` (checked).
    pub fn reply_room(&self, head: u64) -> io::Result<usize> {
        Ok(RING - held(head, self.seg.u64_at(REP_TAIL).load(SeqCst))?)
    }

    /// Copies `src` (no longer than [`Self::reply_room`]) into the reply ring at
    /// `head`, publishes it and wakes the client if it waits.
    pub fn put(&self, head: u64, src: &[u8]) -> u64 {
        self.seg.copy_in(true, head, src);
        let head = head + src.len() as u64;
        self.seg.u64_at(REP_HEAD).store(head, SeqCst);
        self.wake_client(CLIENT_WAITS_REPLY);
        head
    }

    /// Publishes how many of the server's shared-memory connections are busy (a hint
    /// for the client's spin; see the module comment).
    pub fn publish_busy(&self, busy: u32) {
        self.seg.u32_at(SERVER_BUSY).store(busy, Relaxed);
        self.seg.u32_at(SERVER_CPU).store(this_cpu(), Relaxed);
    }

    /// Wakes the client if it waits for what `flag` says (replies, or room for
    /// requests): only then, so that taking a request does not wake a client that
    /// waits for its reply.
    fn wake_client(&self, flag: usize) {
        if self.seg.u32_at(flag).swap(0, SeqCst) != 0 {
            let bell = self.seg.u32_at(CLIENT_BELL);
            bell.fetch_add(1, SeqCst);
            futex_wake(bell);
        }
    }

    /// Says the server is about to wait on the socket for the client's doorbell.
    pub fn sleeping(&self) {
        self.seg.u32_at(SERVER_SLEEPING).store(1, SeqCst);
    }

    /// Takes the flag back (the server found work after setting it).
    pub fn awake(&self) {
        self.seg.u32_at(SERVER_SLEEPING).store(0, SeqCst);
    }
}

/// Passes the segment `fd` over the connected Unix socket `sock` (with [`MAGIC`]).
pub fn send_segment(sock: RawFd, fd: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: MAGIC.as_ptr() as *mut libc::c_void,
        iov_len: MAGIC.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = [0u64; 8];
    debug_assert!(space <= std::mem::size_of_val(&cbuf));
    // SAFETY: a zeroed msghdr pointing at locals that outlive the call; the control
    // message is built inside `cbuf` with the CMSG macros.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != MAGIC.len() as isize {
            return Err(last_error("cannot pass the shared-memory segment"));
        }
    }
    Ok(())
}

/// Receives the segment's descriptor that [`send_segment`] passed.
pub fn recv_segment(sock: RawFd) -> io::Result<OwnedFd> {
    let mut got = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: got.as_mut_ptr().cast(),
        iov_len: got.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: a zeroed msghdr pointing at locals that outlive the call; the control
    // messages are read with the CMSG macros within `msg_controllen`.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_WAITALL);
        if n < 0 {
            return Err(last_error("cannot receive the shared-memory segment"));
        }
        let mut fd = None;
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let f = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(f));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
        match fd {
            Some(fd) if n as usize == MAGIC.len() && &got == MAGIC => Ok(fd),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the server did not answer with a shared-memory segment (an older server, \
                 or not weft-kv)",
            )),
        }
    }
}

/// How long a waiting client sleeps at most before it checks that the server is
/// still there.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// How a client waits for a reply before it sleeps on its futex (the module comment's
/// "The client's spin").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spin {
    /// The longest spin, in nanoseconds (0: never spin).
    pub max_ns: u64,
    /// Whether the spin's length follows the recent replies (else it is always
    /// `max_ns`).
    pub adaptive: bool,
    /// Lets other runnable threads have the CPU (`sched_yield`) every this many
    /// nanoseconds of a spin (0: never).
    pub yield_ns: u64,
    /// Spins only while fewer than this many of the server's shared-memory connections
    /// are busy, and not on the CPU the server last answered from (0: however many,
    /// and on any CPU: the server's hints are not used).
    pub busy_below: u32,
}

/// A gap this long between two looks of a spin means the client lost its CPU: the
/// CPUs are taken, and spinning only takes more. An adaptive spin then stops, as if
/// it had run out.
const PREEMPTED_NS: u64 = 20_000;

/// The shortest adaptive spin, in nanoseconds: a shorter one cannot catch a reply.
const MIN_SPIN_NS: u64 = 1_000;
/// Spins in a row that run out before spinning goes off.
const MISSES_OFF: u32 = 3;
/// While spinning is off, one wait in this many spins (the longest spin) to see
/// whether replies come fast again. Not a shorter one: while clients sleep, the
/// server's replies come later than while they spin (each wake-up costs the server
/// too), and a short probe would never see them come.
const PROBE_EVERY: u32 = 32;

impl Spin {
    /// Never spin: sleep on the futex at once.
    pub const OFF: Spin = Spin {
        max_ns: 0,
        adaptive: false,
        yield_ns: 0,
        busy_below: 0,
    };

    /// The default without its hint: adaptive, up to 20 us.
    pub const ADAPTIVE: Spin = Spin {
        max_ns: 20_000,
        adaptive: true,
        yield_ns: 0,
        busy_below: 0,
    };

    /// The default: [`Spin::ADAPTIVE`], only while the server's busy shared-memory
    /// connections are at most twice the CPUs this process may run on (measured on
    /// two CPUs: spinning wins with 4 client processes, loses with 6).
    pub fn default_for_this_machine() -> Spin {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Spin {
            busy_below: (2 * cpus + 1).min(u32::MAX as usize) as u32,
            ..Spin::ADAPTIVE
        }
    }

    /// The spin `WEFT_KV_SHM_SPIN` asks for, else [`Spin::default_for_this_machine`]: `off`, or words
    /// separated by commas that change the default: `max=US` (the longest spin in
    /// microseconds), `fixed` (always the longest), `yield=US` (let other threads run
    /// every US microseconds of a spin), `busy=N` (spin only while fewer than N of the
    /// server's shared-memory connections are busy; 0: however many). A word it does
    /// not know is ignored.
    pub fn from_env() -> Spin {
        static SPIN: std::sync::OnceLock<Spin> = std::sync::OnceLock::new();
        *SPIN.get_or_init(|| match std::env::var("WEFT_KV_SHM_SPIN") {
            Ok(v) => Spin::parse(&v, Spin::default_for_this_machine()),
            Err(_) => Spin::default_for_this_machine(),
        })
    }

    /// `v`'s words (see [`Spin::from_env`]) applied to `spin`.
    fn parse(v: &str, mut spin: Spin) -> Spin {
        for word in v.split(',').map(str::trim) {
            let num = |w: &str| w.parse::<u64>().ok();
            match word.split_once('=') {
                None if word == "off" => return Spin::OFF,
                None if word == "fixed" => spin.adaptive = false,
                Some(("max", n)) => spin.max_ns = num(n).map_or(spin.max_ns, |n| n * 1000),
                Some(("yield", n)) => spin.yield_ns = num(n).map_or(spin.yield_ns, |n| n * 1000),
                Some(("busy", n)) => {
                    spin.busy_below =
                        num(n).map_or(spin.busy_below, |n| n.min(u32::MAX as u64) as u32)
                }
                _ => {}
            }
        }
        spin
    }
}

/// What a client's waits for replies did (for tests and measurements): see
/// [`ClientEnd::wait_counts`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCounts {
    /// Futex waits (each a sleep, unless the bell rang first).
    pub sleeps: u64,
    /// Spins begun.
    pub spins: u64,
    /// Spins that saw their reply come.
    pub caught: u64,
    /// Spins that ran out and went on to sleep.
    pub given_up: u64,
    /// How many of the server's shared-memory connections were busy, as published
    /// with the last reply.
    pub server_busy: u32,
    /// Waits that did not spin because the client ran on the server's CPU.
    pub same_cpu: u64,
}

/// The adaptive spin's state: how long the next spin is.
#[derive(Debug)]
struct SpinState {
    spin: Spin,
    /// The next spin's length (0: spinning is off).
    next_ns: u64,
    /// Spins in a row that ran out.
    misses: u32,
    /// Waits since spinning went off.
    off_waits: u32,
}

impl SpinState {
    fn new(spin: Spin) -> SpinState {
        SpinState {
            spin,
            next_ns: spin.max_ns,
            misses: 0,
            off_waits: 0,
        }
    }

    /// How long the next wait spins (0: it sleeps at once).
    fn next(&mut self) -> u64 {
        if !self.spin.adaptive || self.next_ns > 0 {
            return self.next_ns.min(self.spin.max_ns);
        }
        self.off_waits += 1;
        if self.off_waits.is_multiple_of(PROBE_EVERY) {
            self.spin.max_ns
        } else {
            0
        }
    }

    /// A spin saw its reply `ns` after it began: the next is at least twice that, and
    /// at least half the longest (a shorter one would run out at the first reply a
    /// little later than this one, and two more such turn spinning off).
    fn caught(&mut self, ns: u64) {
        if self.spin.adaptive {
            self.misses = 0;
            self.off_waits = 0;
            self.next_ns = self
                .next_ns
                .max(ns.saturating_mul(2))
                .max(self.spin.max_ns / 2)
                .clamp(MIN_SPIN_NS, self.spin.max_ns.max(MIN_SPIN_NS));
        }
    }

    /// A spin ran out.
    fn gave_up(&mut self) {
        if self.spin.adaptive {
            self.misses += 1;
            self.next_ns /= 2;
            if self.misses >= MISSES_OFF || self.next_ns < MIN_SPIN_NS {
                self.next_ns = 0;
            }
        }
    }
}

/// The client's end of a shared-memory connection: blocking, for ordinary threads.
pub struct ClientEnd {
    sock: UnixStream,
    seg: Segment,
    /// Our positions: the request ring's head, the reply ring's tail.
    req_head: u64,
    rep_tail: u64,
    /// How long a read or write waits at most, in nanoseconds (`u64::MAX`: forever;
    /// an atomic so that the client stays `Sync`, as a socket's is).
    timeout_ns: AtomicU64,
    /// How the next wait for a reply spins.
    spin: SpinState,
    counts: WaitCounts,
}

impl ClientEnd {
    /// Connects to the shared-memory socket `path` (see [`socket_path`]).
    pub fn connect(path: &Path) -> io::Result<ClientEnd> {
        let sock = UnixStream::connect(path)?;
        let fd = recv_segment(sock.as_raw_fd())?;
        let seg = Segment::map(&fd)?;
        Ok(ClientEnd {
            sock,
            seg,
            req_head: 0,
            rep_tail: 0,
            timeout_ns: AtomicU64::new(u64::MAX),
            spin: SpinState::new(Spin::from_env()),
            counts: WaitCounts::default(),
        })
    }

    /// Sets how the waits for replies spin from now on (the default is
    /// [`Spin::from_env`]).
    pub fn set_spin(&mut self, spin: Spin) {
        self.spin = SpinState::new(spin);
    }

    /// What the waits for replies did so far.
    pub fn wait_counts(&self) -> WaitCounts {
        WaitCounts {
            server_busy: self.seg.u32_at(SERVER_BUSY).load(Relaxed),
            ..self.counts
        }
    }

    /// Sets how long a read or write waits at most.
    pub fn set_timeout(&self, t: Option<Duration>) {
        let ns = t.map_or(u64::MAX, |t| t.as_nanos().min(u64::MAX as u128 - 1) as u64);
        self.timeout_ns.store(ns, Relaxed);
    }

    /// Writes all of `buf` into the request ring, waiting for room as needed.
    pub fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        let started = Instant::now();
        while !buf.is_empty() {
            let tail = self.seg.u64_at(REQ_TAIL).load(SeqCst);
            let room = RING - held(self.req_head, tail)?;
            if room == 0 {
                self.wait(started, CLIENT_WAITS_ROOM, |s| {
                    s.u64_at(REQ_TAIL).load(SeqCst) != tail
                })?;
                continue;
            }
            let n = room.min(buf.len());
            self.seg.copy_in(false, self.req_head, &buf[..n]);
            self.req_head += n as u64;
            self.seg.u64_at(REQ_HEAD).store(self.req_head, SeqCst);
            self.ring_server()?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Reads what the reply ring holds into `buf` (at least one byte), waiting for it.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let started = Instant::now();
        loop {
            let head = self.seg.u64_at(REP_HEAD).load(SeqCst);
            let n = held(head, self.rep_tail)?.min(buf.len());
            if n == 0 {
                let tail = self.rep_tail;
                let ready = |s: &Segment| s.u64_at(REP_HEAD).load(SeqCst) != tail;
                if !self.spin_for(ready) {
                    self.wait(started, CLIENT_WAITS_REPLY, ready)?;
                }
                continue;
            }
            self.seg.copy_out(true, self.rep_tail, &mut buf[..n]);
            self.rep_tail += n as u64;
            self.seg.u64_at(REP_TAIL).store(self.rep_tail, SeqCst);
            // The server may be waiting for the room this frees.
            self.ring_server()?;
            return Ok(n);
        }
    }

    /// Wakes the server if it said it sleeps: one byte on the socket.
    fn ring_server(&mut self) -> io::Result<()> {
        if self.seg.u32_at(SERVER_SLEEPING).swap(0, SeqCst) != 0 {
            // SAFETY: a one-byte send from a static on our open socket.
            let n = unsafe {
                libc::send(
                    self.sock.as_raw_fd(),
                    b"!".as_ptr().cast(),
                    1,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            // A full socket already holds doorbells the server has not read: enough.
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the server closed the connection",
                ));
            }
        }
        Ok(())
    }

    /// Spins until `ready` for as long as the spin's state says (see the module
    /// comment): whether it came.
    fn spin_for(&mut self, ready: impl Fn(&Segment) -> bool) -> bool {
        let spin = self.spin.spin;
        if spin.busy_below > 0 && self.seg.u32_at(SERVER_BUSY).load(Relaxed) >= spin.busy_below {
            return false;
        }
        // On the server's own CPU a spin only keeps the server from answering (a
        // client woken from its futex is often moved there).
        let server_cpu = self.seg.u32_at(SERVER_CPU).load(Relaxed);
        if spin.busy_below > 0 && server_cpu != 0 && server_cpu == this_cpu() {
            self.counts.same_cpu += 1;
            return false;
        }
        let budget = self.spin.next();
        if budget == 0 {
            return false;
        }
        self.counts.spins += 1;
        let t0 = Instant::now();
        let mut yielded = 0;
        let mut last = 0;
        let mut looks = 0u32;
        loop {
            if ready(&self.seg) {
                self.counts.caught += 1;
                self.spin.caught(t0.elapsed().as_nanos() as u64);
                return true;
            }
            looks = looks.wrapping_add(1);
            // The clock is read every few looks only.
            if looks.is_multiple_of(16) {
                let ns = t0.elapsed().as_nanos() as u64;
                if ns >= budget || (spin.adaptive && ns - last > PREEMPTED_NS) {
                    self.counts.given_up += 1;
                    self.spin.gave_up();
                    return false;
                }
                if spin.yield_ns > 0 && ns - yielded >= spin.yield_ns {
                    yielded = ns;
                    // SAFETY: a plain system call with no arguments.
                    unsafe { libc::sched_yield() };
                }
                last = ns;
            }
            std::hint::spin_loop();
        }
    }

    /// Waits until `ready` (checked after saying we wait, so no wake-up is lost), the
    /// server goes (an error), or the timeout. `flag` says what we wait for.
    fn wait(
        &mut self,
        started: Instant,
        flag: usize,
        ready: impl Fn(&Segment) -> bool,
    ) -> io::Result<()> {
        let bell = self.seg.u32_at(CLIENT_BELL);
        let waiting = self.seg.u32_at(flag);
        loop {
            let b = bell.load(SeqCst);
            waiting.store(1, SeqCst);
            if ready(&self.seg) {
                waiting.store(0, SeqCst);
                return Ok(());
            }
            let mut slice = CHECK_EVERY;
            let ns = self.timeout_ns.load(Relaxed);
            if ns != u64::MAX {
                let t = Duration::from_nanos(ns);
                let left = t.saturating_sub(started.elapsed());
                if left.is_zero() {
                    waiting.store(0, SeqCst);
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the server did not answer in time",
                    ));
                }
                slice = slice.min(left);
            }
            self.counts.sleeps += 1;
            futex_wait(bell, b, slice);
            if bell.load(SeqCst) == b && self.server_gone() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
        }
    }

    /// Whether the server closed its end of the socket.
    fn server_gone(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: a one-byte peek into a local on our open socket.
        let n = unsafe {
            libc::recv(
                self.sock.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0 || (n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_end_is_send_and_sync_as_a_socket_is() {
        fn both<T: Send + Sync>() {}
        both::<ClientEnd>();
        both::<ServerSide>();
    }

    #[test]
    fn a_ring_holds_at_most_its_size() {
        assert_eq!(held(10, 10).unwrap(), 0);
        assert_eq!(held(RING as u64 + 5, 5).unwrap(), RING);
        assert!(held(RING as u64 + 6, 5).is_err());
        // A head behind the tail is garbage too.
        assert!(held(4, 5).is_err());
        // Positions that wrapped around u64 are fine.
        assert_eq!(held(3, u64::MAX - 1).unwrap(), 5);
    }

    #[test]
    fn bytes_wrap_around_the_ring_end_whole() {
        let (seg, _fd) = Segment::create().unwrap();
        let side = ServerSide::new(seg);
        let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        // A reply that starts 300 bytes before the ring's end: 700 bytes wrap.
        let at = 5 * RING as u64 - 300;
        side.seg.u64_at(REP_TAIL).store(at, SeqCst);
        assert_eq!(side.reply_room(at).unwrap(), RING);
        let head = side.put(at, &msg);
        assert_eq!(head, at + 1000);
        assert_eq!(side.reply_room(head).unwrap(), RING - 1000);
        let mut back = vec![0u8; 1000];
        side.seg.copy_out(true, at, &mut back);
        assert_eq!(back, msg);
        // The same on the request side, through `take`.
        side.seg.copy_in(false, at, &msg);
        side.seg.u64_at(REQ_HEAD).store(at + 1000, SeqCst);
        assert_eq!(side.requests(at).unwrap(), 1000);
        let mut got = vec![0u8; 1000];
        assert_eq!(side.take(at, &mut got), at + 1000);
        assert_eq!(got, msg);
        assert_eq!(side.seg.u64_at(REQ_TAIL).load(SeqCst), at + 1000);
    }

    #[test]
    fn the_spin_setting_reads_its_words() {
        assert_eq!(Spin::parse("", Spin::ADAPTIVE), Spin::ADAPTIVE);
        assert_eq!(Spin::parse("off", Spin::ADAPTIVE), Spin::OFF);
        assert_eq!(Spin::parse("max=5, busy=3,nonsense", Spin::ADAPTIVE), {
            let mut s = Spin::ADAPTIVE;
            s.max_ns = 5_000;
            s.busy_below = 3;
            s
        });
        let s = Spin::parse("fixed,max=10,yield=2", Spin::ADAPTIVE);
        assert!(!s.adaptive);
        assert_eq!((s.max_ns, s.yield_ns), (10_000, 2_000));
        // A number that is not one leaves the default.
        assert_eq!(
            Spin::parse("max=ten", Spin::ADAPTIVE).max_ns,
            Spin::ADAPTIVE.max_ns
        );
    }

    #[test]
    fn the_adaptive_spin_follows_the_replies_and_stops_when_they_are_slow() {
        let max = Spin::ADAPTIVE.max_ns;
        let mut st = SpinState::new(Spin::ADAPTIVE);
        assert_eq!(st.next(), max);
        // Replies caught soon keep the spin; one caught late lengthens it up to max.
        st.caught(3_000);
        assert_eq!(st.next(), max);
        // A spin that runs out halves the next; three in a row turn spinning off.
        st.gave_up();
        assert_eq!(st.next(), max / 2);
        st.caught(1_000);
        assert_eq!(
            st.next(),
            max / 2,
            "a hit resets the misses, not the length"
        );
        st.caught(8_000);
        assert_eq!(st.next(), 16_000);
        st.gave_up();
        st.gave_up();
        assert_eq!(st.next(), 4_000);
        st.gave_up();
        // Off: no spin, but one probe of the longest in PROBE_EVERY waits.
        let spins: Vec<u64> = (0..2 * PROBE_EVERY).map(|_| st.next()).collect();
        let probes: Vec<usize> = (0..spins.len()).filter(|&i| spins[i] > 0).collect();
        assert_eq!(
            probes,
            [PROBE_EVERY as usize - 1, 2 * PROBE_EVERY as usize - 1]
        );
        assert!(probes.iter().all(|&i| spins[i] == max));
        // A probe that misses leaves it off; one that catches turns it on again, as
        // long as twice the reply's time, at least half the longest.
        st.gave_up();
        assert_eq!(st.next(), 0);
        st.caught(300);
        assert_eq!(st.next(), max / 2);
        st.caught(6_000);
        assert_eq!(st.next(), 12_000);
    }

    #[test]
    fn a_fixed_spin_never_changes_and_off_never_spins() {
        let fixed = Spin::parse("fixed,max=7", Spin::ADAPTIVE);
        let mut st = SpinState::new(fixed);
        for _ in 0..10 {
            st.gave_up();
        }
        st.caught(1);
        assert_eq!(st.next(), 7_000);
        let mut off = SpinState::new(Spin::OFF);
        assert!((0..100).all(|_| off.next() == 0));
    }

    #[test]
    fn a_segment_of_another_size_is_refused() {
        let (_seg, fd) = Segment::create().unwrap();
        assert!(Segment::map(&fd).is_ok());
        // SAFETY: a fresh memfd of our own, resized.
        let other = unsafe {
            let f = libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC);
            assert!(f >= 0);
            assert_eq!(libc::ftruncate(f, 4096), 0);
            OwnedFd::from_raw_fd(f)
        };
        assert_eq!(
            Segment::map(&other).err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidData)
        );
    }
}
