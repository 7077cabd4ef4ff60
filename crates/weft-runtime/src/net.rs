//! TCP and Unix stream sockets whose operations park only the calling green thread.
//!
//! The types mirror `std::net` / `std::os::unix::net`: [`TcpListener`], [`TcpStream`],
//! [`UnixListener`], [`UnixStream`]. Sockets are created close-on-exec. On a green
//! thread accept, connect, read and write go through the worker's I/O backend
//! (io_uring operations, or a nonblocking call plus the epoll poller on the threads
//! backend; see `io/mod.rs`); on any other thread they are the plain blocking calls.
//! Binding, listening and socket options never block and are plain calls everywhere.
//!
//! Host names given to `bind`/`connect` are resolved with the system resolver on the
//! calling thread (a numeric address never blocks); on a green thread, resolve names
//! with `weft_runtime::blocking(|| ("host", 80).to_socket_addrs())` first.
//!
//! ```
//! use std::io::{Read, Write};
//! use weft_runtime::net::{TcpListener, TcpStream};
//! let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
//! let got = rt.block_on(|| {
//!     let l = TcpListener::bind("127.0.0.1:0").unwrap();
//!     let addr = l.local_addr().unwrap();
//!     let server = weft_runtime::spawn(move || {
//!         let (mut s, _) = l.accept().unwrap();
//!         let mut b = [0u8; 5];
//!         s.read_exact(&mut b).unwrap();
//!         s.write_all(&b).unwrap();
//!     });
//!     let mut c = TcpStream::connect(addr).unwrap();
//!     c.write_all(b"hello").unwrap();
//!     let mut b = [0u8; 5];
//!     c.read_exact(&mut b).unwrap();
//!     server.join().unwrap();
//!     b
//! });
//! assert_eq!(&got, b"hello");
//! ```

use crate::io::{self as rio, Fd, SockAddr};
use std::io;
use std::net::{Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A new stream socket of `domain`, close-on-exec.
fn socket(domain: libc::c_int) -> io::Result<Fd> {
    // SAFETY: creates a descriptor that the returned Fd owns.
    let fd = cvt(unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    Ok(Fd::new(fd, false))
}

fn to_sockaddr(a: &SocketAddr) -> SockAddr {
    let mut s = SockAddr::default();
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe {
                core::ptr::write((&mut s.storage as *mut libc::sockaddr_storage).cast(), sin)
            };
            s.len = core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe {
                core::ptr::write((&mut s.storage as *mut libc::sockaddr_storage).cast(), sin6)
            };
            s.len = core::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        }
    }
    s
}

fn from_sockaddr(s: &SockAddr) -> io::Result<SocketAddr> {
    match s.storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in for AF_INET.
            let sin: libc::sockaddr_in =
                unsafe { core::ptr::read((&s.storage as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                sin.sin_addr.s_addr.to_ne_bytes().into(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the kernel wrote a sockaddr_in6 for AF_INET6.
            let sin6: libc::sockaddr_in6 =
                unsafe { core::ptr::read((&s.storage as *const libc::sockaddr_storage).cast()) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        f => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not an IP socket address (family {f})"),
        )),
    }
}

fn unix_addr(path: &Path) -> io::Result<SockAddr> {
    let bytes = path.as_os_str().as_bytes();
    let mut s = SockAddr::default();
    // SAFETY: sockaddr_storage can hold a sockaddr_un.
    let sun = unsafe {
        &mut *(&mut s.storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_un>()
    };
    if bytes.len() >= sun.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unix socket path {path:?} is too long or contains a NUL byte"),
        ));
    }
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in sun.sun_path.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    s.len = (core::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    Ok(s)
}

fn name_of(fd: RawFd, peer: bool) -> io::Result<SockAddr> {
    let mut s = SockAddr::default();
    // SAFETY: the kernel writes at most `len` bytes into the storage.
    cvt(unsafe {
        let p = (&mut s.storage as *mut libc::sockaddr_storage).cast();
        if peer {
            libc::getpeername(fd, p, &mut s.len)
        } else {
            libc::getsockname(fd, p, &mut s.len)
        }
    })?;
    Ok(s)
}

fn bind_listen(fd: &Fd, a: &SockAddr) -> io::Result<()> {
    // SAFETY: plain socket calls with an address owned by the caller.
    unsafe {
        cvt(libc::bind(
            fd.raw(),
            (&a.storage as *const libc::sockaddr_storage).cast(),
            a.len,
        ))?;
        cvt(libc::listen(fd.raw(), 1024))?;
    }
    Ok(())
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: passes a local int.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            core::mem::size_of::<i32>() as libc::socklen_t,
        )
    })
    .map(drop)
}

fn getsockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut v: i32 = 0;
    let mut len = core::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: reads into a local int.
    cvt(unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut i32).cast(), &mut len) })?;
    Ok(v)
}

fn shutdown_fd(fd: RawFd, how: Shutdown) -> io::Result<()> {
    let how = match how {
        Shutdown::Read => libc::SHUT_RD,
        Shutdown::Write => libc::SHUT_WR,
        Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: a plain call on our descriptor.
    cvt(unsafe { libc::shutdown(fd, how) }).map(drop)
}

fn check_timeout(d: Option<Duration>) -> io::Result<()> {
    if d == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a zero timeout is not allowed (use None for no timeout)",
        ));
    }
    Ok(())
}

/// The stream parts common to TCP and Unix sockets. Timeouts are atomics (nanoseconds,
/// 0 for none): no lock a preempted green thread could hold.
struct Stream {
    fd: Fd,
    read_timeout: AtomicU64,
    write_timeout: AtomicU64,
}

impl Stream {
    fn new(fd: Fd) -> Stream {
        Stream {
            fd,
            read_timeout: AtomicU64::new(0),
            write_timeout: AtomicU64::new(0),
        }
    }
    fn deadline(t: &AtomicU64) -> Option<Instant> {
        Self::get(t).map(|d| Instant::now() + d)
    }
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        rio::recv(&self.fd, buf, Self::deadline(&self.read_timeout))
    }
    fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        rio::recv_flags(
            &self.fd,
            buf,
            Self::deadline(&self.read_timeout),
            libc::MSG_PEEK,
        )
    }
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        rio::send(&self.fd, buf, Self::deadline(&self.write_timeout))
    }
    fn discard(&self, n: usize) -> io::Result<()> {
        rio::discard_queued(&self.fd, n)
    }
    fn send_then_discard(&self, buf: &[u8], discard: usize) -> io::Result<()> {
        rio::send_then_discard(&self.fd, buf, discard, Self::deadline(&self.write_timeout))
    }
    fn send_then_recv(
        &self,
        buf: &[u8],
        discard: usize,
        rbuf: &mut [u8],
        flags: libc::c_int,
    ) -> io::Result<usize> {
        rio::send_then_recv(
            &self.fd,
            buf,
            discard,
            rbuf,
            flags,
            Self::deadline(&self.write_timeout),
            Self::deadline(&self.read_timeout),
        )
    }
    fn set(t: &AtomicU64, d: Option<Duration>) -> io::Result<()> {
        check_timeout(d)?;
        let ns = d.map_or(0, |d| d.as_nanos().clamp(1, u64::MAX as u128) as u64);
        t.store(ns, Relaxed);
        Ok(())
    }
    fn get(t: &AtomicU64) -> Option<Duration> {
        match t.load(Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }
}

macro_rules! stream_impls {
    ($t:ty) => {
        impl $t {
            /// Reads what is available (at least one byte, or 0 at end of stream),
            /// waiting at most the read timeout (`TimedOut`).
            pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
                self.s.read(buf)
            }
            /// As [`read`](Self::read), but the bytes stay queued: the next read or
            /// peek returns them again (`recv(2)` with `MSG_PEEK`).
            pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
                self.s.peek(buf)
            }
            /// Writes some of `buf`, waiting at most the write timeout (`TimedOut`).
            pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
                self.s.write(buf)
            }
            /// Takes `n` bytes that a [`peek`](Self::peek) saw off the socket, never
            /// waiting for them: an error if fewer are queued (nobody else may read
            /// the socket).
            pub fn discard(&self, n: usize) -> io::Result<()> {
                self.s.discard(n)
            }
            /// Writes all of `buf`, then takes `discard` bytes that a
            /// [`peek`](Self::peek) saw off the socket, never waiting for them (they must
            /// be queued, and nobody else may read the socket). On an io_uring worker
            /// both go to the kernel in one system call, with the other green threads'
            /// operations of the worker's turn (the caller parks until the worker has
            /// nothing left to run): nothing runs in between, not even a peer the
            /// write woke (a server answering a request it peeked frees the client's
            /// send-buffer space, which wakes the client, only while it is awake
            /// anyway). Waits at most the write timeout for the write (`TimedOut`).
            pub fn send_then_discard(&self, buf: &[u8], discard: usize) -> io::Result<()> {
                self.s.send_then_discard(buf, discard)
            }
            /// Writes all of `buf`, takes `discard` bytes that a [`peek`](Self::peek)
            /// saw off the socket (0: none; as [`send_then_discard`](Self::send_then_discard)),
            /// then reads into `rbuf` as [`read`](Self::read) does: a server's reply
            /// and its next read. On an io_uring worker the three go to the kernel as
            /// one linked chain, with the other green threads' operations of the
            /// worker's turn, and the caller is woken once, when the read has bytes
            /// (or fails): the reply costs no system call of its own, and the read is
            /// waiting in the kernel from the moment the reply has gone. Waits at most
            /// the write timeout for the write and the read timeout for the read.
            pub fn send_then_read(
                &self,
                buf: &[u8],
                discard: usize,
                rbuf: &mut [u8],
            ) -> io::Result<usize> {
                self.s.send_then_recv(buf, discard, rbuf, 0)
            }
            /// As [`send_then_read`](Self::send_then_read), but the bytes read stay
            /// queued, as with [`peek`](Self::peek).
            pub fn send_then_peek(
                &self,
                buf: &[u8],
                discard: usize,
                rbuf: &mut [u8],
            ) -> io::Result<usize> {
                self.s.send_then_recv(buf, discard, rbuf, libc::MSG_PEEK)
            }
            /// Shuts down the read, write or both halves.
            pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
                shutdown_fd(self.s.fd.raw(), how)
            }
            /// Limits how long a read waits (None: forever; zero is refused).
            pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                Stream::set(&self.s.read_timeout, d)
            }
            /// Limits how long a write waits (None: forever; zero is refused).
            pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                Stream::set(&self.s.write_timeout, d)
            }
            /// The read timeout.
            pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
                Ok(Stream::get(&self.s.read_timeout))
            }
            /// The write timeout.
            pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
                Ok(Stream::get(&self.s.write_timeout))
            }
        }
        impl io::Read for $t {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.s.read(buf)
            }
        }
        impl io::Read for &$t {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.s.read(buf)
            }
        }
        impl io::Write for $t {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.s.write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl io::Write for &$t {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.s.write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl AsRawFd for $t {
            fn as_raw_fd(&self) -> RawFd {
                self.s.fd.raw()
            }
        }
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("fd", &self.s.fd.raw())
                    .finish()
            }
        }
    };
}

/// A TCP connection.
pub struct TcpStream {
    s: Stream,
}

stream_impls!(TcpStream);

impl TcpStream {
    /// Connects to the first address of `addr` that accepts (errors of the last one
    /// are returned: `ConnectionRefused` when nothing listens).
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match Self::connect_one(&a) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(context(e, format!("connect to {a}"))),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "connect: no address to connect to",
            )
        }))
    }

    /// Connects to `addr`, giving up with `TimedOut` after `timeout` (as
    /// `std::net::TcpStream::connect_timeout`).
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        Self::connect_one_until(addr, Some(Instant::now() + timeout))
            .map_err(|e| context(e, format!("connect to {addr}")))
    }

    fn connect_one(a: &SocketAddr) -> io::Result<TcpStream> {
        Self::connect_one_until(a, None)
    }

    fn connect_one_until(a: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
        let domain = if a.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        let fd = socket(domain)?;
        rio::connect(&fd, to_sockaddr(a), deadline)?;
        Ok(TcpStream { s: Stream::new(fd) })
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        from_sockaddr(&name_of(self.s.fd.raw(), true)?)
    }
    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        from_sockaddr(&name_of(self.s.fd.raw(), false)?)
    }
    /// Sets TCP_NODELAY (no Nagle delay for small writes).
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        setsockopt_int(
            self.s.fd.raw(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            on as i32,
        )
    }
    /// Whether TCP_NODELAY is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(getsockopt_int(self.s.fd.raw(), libc::IPPROTO_TCP, libc::TCP_NODELAY)? != 0)
    }
}

/// A TCP socket listening for connections.
pub struct TcpListener {
    fd: Fd,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("fd", &self.fd.raw())
            .finish()
    }
}

impl TcpListener {
    /// Binds to the first address of `addr` that works (SO_REUSEADDR set) and listens.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            let r = (|| {
                let fd = socket(if a.is_ipv4() {
                    libc::AF_INET
                } else {
                    libc::AF_INET6
                })?;
                setsockopt_int(fd.raw(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
                bind_listen(&fd, &to_sockaddr(&a))?;
                Ok(TcpListener { fd })
            })();
            match r {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(context(e, format!("bind {a}"))),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "bind: no address to bind to")
        }))
    }

    /// Waits for a connection; the new stream and its peer's address.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (fd, a) = rio::accept(&self.fd, None)?;
        Ok((TcpStream { s: Stream::new(fd) }, from_sockaddr(&a)?))
    }

    /// As [`accept`](Self::accept), giving up with `TimedOut` after `timeout`.
    pub fn accept_timeout(&self, timeout: Duration) -> io::Result<(TcpStream, SocketAddr)> {
        let (fd, a) = rio::accept(&self.fd, Some(Instant::now() + timeout))?;
        Ok((TcpStream { s: Stream::new(fd) }, from_sockaddr(&a)?))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        from_sockaddr(&name_of(self.fd.raw(), false)?)
    }
}

impl AsRawFd for TcpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.raw()
    }
}

/// A Unix stream connection.
pub struct UnixStream {
    s: Stream,
}

stream_impls!(UnixStream);

impl UnixStream {
    /// Connects to the socket at `path`.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let fd = socket(libc::AF_UNIX)?;
        rio::connect(&fd, unix_addr(path)?, None)
            .map_err(|e| context(e, format!("connect to {}", path.display())))?;
        Ok(UnixStream { s: Stream::new(fd) })
    }

    /// A connected pair (socketpair(2)).
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors we then own.
        cvt(unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        })?;
        Ok((
            UnixStream {
                s: Stream::new(Fd::new(fds[0], false)),
            },
            UnixStream {
                s: Stream::new(Fd::new(fds[1], false)),
            },
        ))
    }
}

/// A Unix socket listening for connections at a path.
pub struct UnixListener {
    fd: Fd,
    path: PathBuf,
}

impl std::fmt::Debug for UnixListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnixListener")
            .field("fd", &self.fd.raw())
            .field("path", &self.path)
            .finish()
    }
}

impl UnixListener {
    /// Binds to `path` (which must not exist) and listens.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let path = path.as_ref();
        let fd = socket(libc::AF_UNIX)?;
        bind_listen(&fd, &unix_addr(path)?)
            .map_err(|e| context(e, format!("bind {}", path.display())))?;
        Ok(UnixListener {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Waits for a connection.
    pub fn accept(&self) -> io::Result<UnixStream> {
        let (fd, _) = rio::accept(&self.fd, None)?;
        Ok(UnixStream { s: Stream::new(fd) })
    }

    /// The path it was bound to.
    pub fn local_path(&self) -> &Path {
        &self.path
    }
}

impl AsRawFd for UnixListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.raw()
    }
}
