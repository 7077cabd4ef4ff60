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
        })
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
                self.wait(started, CLIENT_WAITS_REPLY, |s| {
                    s.u64_at(REP_HEAD).load(SeqCst) != tail
                })?;
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

    /// Waits until `ready` (checked after saying we wait, so no wake-up is lost), the
    /// server goes (an error), or the timeout. `flag` says what we wait for.
    fn wait(
        &self,
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
