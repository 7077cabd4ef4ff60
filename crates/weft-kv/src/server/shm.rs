//! The server's end of the shared-memory transport (`crate::shm` describes the
//! segment and the protocol): the listener on `<socket>.shm` and [`ShmStream`], a
//! connection's stream that `conn.rs` serves exactly as it serves a socket.
//!
//! A connection's green thread takes its requests from the request ring. When the ring
//! is empty it yields to the other green threads of its worker and looks again, for
//! up to [`POLL`]: with several busy clients the worker goes round its connections'
//! rings with no system call. After that it sets the segment's `server_sleeping` flag
//! and reads the socket, where the client's doorbell byte (or the end of stream, when
//! the client has gone or CLIENT KILL shut the socket down) wakes it. Replies go into
//! the reply ring; when it is full (a client reading a big reply slowly) the writer
//! waits the same way for the client to free room.
//!
//! The server counts its shared-memory connections that are busy (all but those
//! asleep on their socket) and publishes that count in the segment with each reply:
//! a client does not spin for its reply while they outnumber the CPUs (`crate::shm`,
//! "The client's spin").
//!
//! The stream's descriptor (CLIENT LIST's `fd`, what CLIENT KILL and a blocked
//! command's read-ahead shut down) is the socket's. As a connection that polls its
//! ring does not read that socket, it also looks at its entry's kill flag each time
//! it looks for a request: a killed connection runs nothing more.

use super::{clients, input::Input, Server};
use crate::shm::{self, Segment, ServerSide};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_runtime::net::{UnixListener, UnixStream};

/// How long a connection with nothing to do polls its ring before it sleeps.
const POLL: Duration = Duration::from_micros(50);

/// How long a writer waiting for room in the reply ring sleeps between looks.
const NAP: Duration = Duration::from_micros(100);

/// How many shared-memory connections are busy: counted from their start until they
/// end, except while they sleep on their socket.
static BUSY: AtomicU32 = AtomicU32::new(0);

/// A shared-memory connection, as `conn.rs` reads and writes it.
pub struct ShmStream {
    sock: UnixStream,
    side: ServerSide,
    /// The request ring's tail: what we took (only the connection's reader moves it).
    tail: AtomicU64,
    /// The reply ring's head, under the lock that keeps writers one at a time.
    head: weft_runtime::sync::Mutex<u64>,
    /// The connection's entry, for CLIENT KILL: a connection that polls its ring does
    /// not read the socket that the kill shuts down.
    client: std::sync::OnceLock<Arc<clients::Client>>,
    /// Whether this connection counts in [`BUSY`].
    busy: AtomicBool,
}

impl Drop for ShmStream {
    fn drop(&mut self) {
        self.set_busy(false);
    }
}

impl ShmStream {
    /// Serves `sock`, a new connection to the shared-memory socket: passes it a fresh
    /// segment.
    fn new(sock: UnixStream) -> io::Result<ShmStream> {
        let (seg, fd) = Segment::create()?;
        shm::send_segment(sock.as_raw_fd(), fd.as_raw_fd())?;
        Ok(ShmStream {
            sock,
            side: ServerSide::new(seg),
            tail: AtomicU64::new(0),
            head: weft_runtime::sync::Mutex::new(0),
            client: std::sync::OnceLock::new(),
            busy: AtomicBool::new(false),
        })
        .inspect(|s| s.set_busy(true))
    }

    /// Counts this connection in [`BUSY`] or takes it out.
    fn set_busy(&self, busy: bool) {
        if self.busy.swap(busy, Relaxed) != busy {
            if busy {
                BUSY.fetch_add(1, Relaxed);
            } else {
                BUSY.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Waits until `ready`: Ok(false) when the socket ended (the client went, or the
    /// connection was shut down). It polls for [`POLL`], yielding to the worker's
    /// other green threads; then the reader (`doorbell`) sleeps on the socket until
    /// the client rings, while a writer (waiting for room in the reply ring) sleeps
    /// [`NAP`] at a time: two green threads reading one socket could take each
    /// other's doorbell.
    fn wait(&self, doorbell: bool, ready: impl Fn() -> io::Result<bool>) -> io::Result<bool> {
        let mut since = None::<Instant>;
        let mut looks = 0u32;
        loop {
            if self.killed() {
                return Ok(false);
            }
            if ready()? {
                return Ok(true);
            }
            // The clock is read every few looks only (a look is a yield: cheap).
            looks = looks.wrapping_add(1);
            let t0 = *since.get_or_insert_with(Instant::now);
            if !looks.is_multiple_of(8) || t0.elapsed() < POLL {
                weft_runtime::yield_now();
                continue;
            }
            if !doorbell {
                if self.ended() {
                    return Ok(false);
                }
                weft_runtime::sleep(NAP);
                continue;
            }
            self.side.sleeping();
            if ready()? {
                self.side.awake();
                return Ok(true);
            }
            let mut bells = [0u8; 64];
            self.set_busy(false);
            let got = self.sock.read(&mut bells);
            self.set_busy(true);
            match got {
                Ok(0) => return Ok(false),
                Ok(_) => since = None,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether CLIENT KILL closed this connection.
    fn killed(&self) -> bool {
        self.client.get().is_some_and(|c| c.killed())
    }

    /// Whether the socket has ended: the client closed it, or it was shut down here.
    fn ended(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: a poll of one open descriptor that returns at once.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    fn read_ring(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let tail = self.tail.load(Relaxed);
        if !self.wait(true, || Ok(self.side.requests(tail)? > 0))? {
            return Ok(0);
        }
        let n = self.side.requests(tail)?.min(buf.len());
        self.tail
            .store(self.side.take(tail, &mut buf[..n]), Relaxed);
        Ok(n)
    }

    fn write_ring(&self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut head = self.head.lock();
        let h = *head;
        if !self.wait(false, || Ok(self.side.reply_room(h)? > 0))? {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the client closed the connection",
            ));
        }
        let n = self.side.reply_room(h)?.min(buf.len());
        self.side.publish_busy(BUSY.load(Relaxed));
        *head = self.side.put(h, &buf[..n]);
        Ok(n)
    }
}

impl io::Read for &ShmStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_ring(buf)
    }
}

impl io::Write for &ShmStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_ring(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for ShmStream {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl Input for ShmStream {
    const PEEKS: bool = false;

    fn take(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_ring(buf)
    }

    fn consume(&self, _n: usize) -> io::Result<()> {
        Ok(())
    }
}

impl clients::Peer for ShmStream {
    fn tcp_addrs(&self) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
        None
    }

    fn attach(&self, client: &Arc<clients::Client>) {
        let _ = self.client.set(client.clone());
    }

    /// The segment, mapped for as long as the connection is open.
    fn fixed_memory(&self) -> usize {
        shm::SEGMENT
    }
}

/// Listens on `path` (the Unix socket's path with `.shm` after it, with the same
/// permissions) and serves each connection over a segment of its own.
pub(super) fn bind(
    path: &std::path::Path,
    s: Arc<Server>,
) -> io::Result<weft_runtime::JoinHandle<()>> {
    use std::os::unix::fs::PermissionsExt;
    super::clear_socket_path(path)?;
    let l = UnixListener::bind(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", path.display()),
        )
    })?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    eprintln!(
        "weft-kv: listening on unix {} (shared memory)",
        path.display()
    );
    Ok(super::spawn_named("kv-listen shm".into(), move || loop {
        if let Ok(c) = l.accept() {
            match ShmStream::new(c) {
                Ok(c) => super::accept(&s, c),
                Err(e) => eprintln!("weft-kv: a shared-memory client: {e}"),
            }
        }
    }))
}
