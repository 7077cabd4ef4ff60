//! A small blocking RESP client: what the `weft kv` subcommands (and tests) use to
//! talk to weft-kv, or to any Redis-protocol server.
//!
//! # Design
//! - Plain blocking std sockets ([`UnixStream`] or [`TcpStream`]): the command line
//!   runs on ordinary threads, so no runtime is involved.
//! - Requests are always RESP arrays of bulk strings, built into a write buffer.
//!   [`Client::command`] sends one and reads its reply; [`Client::send`] only queues a
//!   request, [`Client::flush`] writes the queue and [`Client::read_reply`] reads the
//!   next reply, which is how a caller pipelines. (A pipeline is written whole before
//!   any reply is read: keep it to what the socket buffers can hold in replies, a few
//!   thousand small commands, or the server blocks writing while we block writing.)
//! - Replies are read through a read buffer by a recursive reader that knows RESP2
//!   and RESP3 and produces the shared [`Reply`] type:
//!   `+ - : $ *` (RESP2) and `_ , # ( = % ~ > !` (RESP3); attributes (`|`) are read and
//!   dropped; a push (`>`) comes back as an [`Reply::Array`]; a big number (`(`) as a
//!   [`Reply::Bulk`] of its digits; a blob error (`!`) as a [`Reply::Error`]; a verbatim
//!   string (`=`) as a [`Reply::Verbatim`] when its format is `txt` or `mkd`, otherwise
//!   as a [`Reply::Bulk`] of the text after the format.
//! - Nothing on the wire is trusted for allocation: aggregate lengths only cap the
//!   initial capacity, a line longer than [`MAX_LINE`] or nesting deeper than
//!   [`MAX_DEPTH`] is refused. A malformed reply is an [`io::Error`] of kind
//!   `InvalidData`; the connection closing in the middle of a reply is one of kind
//!   `UnexpectedEof`. After either, the connection is out of step: drop the client.
//! - Connection errors name the address and hint at `weft kv serve`.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::resp::Reply;

/// The longest line (a simple string, an error, a number, a length) accepted in a
/// reply: 1 MiB.
pub const MAX_LINE: usize = 1 << 20;

/// The deepest nesting of aggregates accepted in a reply.
pub const MAX_DEPTH: usize = 512;

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// A Unix socket's path.
    Unix(PathBuf),
    /// A TCP address, `host:port`.
    Tcp(String),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "{}", p.display()),
            Addr::Tcp(a) => f.write_str(a),
        }
    }
}

/// The socket under a [`Client`].
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
    /// Shared memory with a server on this machine (`crate::shm`).
    Shm(crate::shm::ClientEnd),
}

impl Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
            Stream::Shm(s) => s.read(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.write_all(buf),
            Stream::Tcp(s) => s.write_all(buf),
            Stream::Shm(s) => s.write_all(buf),
        }
    }

    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Shm(s) => {
                s.set_timeout(t);
                Ok(())
            }
        }
    }
}

/// A blocking connection to a Redis-protocol server.
pub struct Client {
    stream: Stream,
    addr: Addr,
    /// Received bytes; `rbuf[rpos..]` are not consumed yet.
    rbuf: Vec<u8>,
    rpos: usize,
    /// Requests queued by [`Client::send`], written by [`Client::flush`].
    wbuf: Vec<u8>,
}

/// How much the read buffer asks the socket for at a time.
const READ_CHUNK: usize = 64 * 1024;

impl Client {
    /// Connects to `addr` (a TCP connection tries each address the host resolves to).
    pub fn connect(addr: &Addr) -> io::Result<Client> {
        Client::open(addr, None)
    }

    /// Connects to `addr`, giving up after `timeout` per address tried (TCP; a Unix
    /// socket connects or fails at once). The timeout does not apply to commands:
    /// see [`Client::set_timeout`].
    pub fn connect_timeout(addr: &Addr, timeout: Duration) -> io::Result<Client> {
        Client::open(addr, Some(timeout))
    }

    /// Connects over shared memory to the server whose Unix socket is `socket` (it
    /// listens for such clients on `<socket>.shm`): requests and replies go through
    /// a segment the two processes share, with no socket call on a busy server's
    /// side. Same machine only; otherwise the client is the same.
    pub fn connect_shm(socket: &std::path::Path) -> io::Result<Client> {
        let path = crate::shm::socket_path(socket);
        let end = crate::shm::ClientEnd::connect(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot connect to weft-kv over shared memory at {}: {} (is `weft kv \
                     serve` running with this socket?)",
                    path.display(),
                    os_message(&e)
                ),
            )
        })?;
        Ok(Client {
            stream: Stream::Shm(end),
            addr: Addr::Unix(socket.to_path_buf()),
            rbuf: Vec::with_capacity(READ_CHUNK),
            rpos: 0,
            wbuf: Vec::new(),
        })
    }

    fn open(addr: &Addr, timeout: Option<Duration>) -> io::Result<Client> {
        let stream = match addr {
            Addr::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
            Addr::Tcp(a) => connect_tcp(a, timeout).map(Stream::Tcp),
        }
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot connect to weft-kv at {addr}: {} (is `weft kv serve` running?)",
                    os_message(&e)
                ),
            )
        })?;
        Ok(Client {
            stream,
            addr: addr.clone(),
            rbuf: Vec::with_capacity(READ_CHUNK),
            rpos: 0,
            wbuf: Vec::new(),
        })
    }

    /// The address this client connected to.
    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// Sets how long one read or write on the socket may block (`None`: for ever,
    /// the default). A timed-out read is an error of kind `WouldBlock` or `TimedOut`.
    pub fn set_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_timeout(timeout)
    }

    /// Over shared memory, sets how the waits for replies spin before they sleep
    /// (`crate::shm::Spin`); other connections have no spin: false.
    pub fn set_shm_spin(&mut self, spin: crate::shm::Spin) -> bool {
        match &mut self.stream {
            Stream::Shm(s) => {
                s.set_spin(spin);
                true
            }
            _ => false,
        }
    }

    /// Over shared memory, what the waits for replies did so far (futex sleeps, spins);
    /// `None` over a socket.
    pub fn shm_wait_counts(&self) -> Option<crate::shm::WaitCounts> {
        match &self.stream {
            Stream::Shm(s) => Some(s.wait_counts()),
            _ => None,
        }
    }

    /// Sends one command (its name and arguments, as a RESP array) and reads its
    /// reply. A server error is `Ok(Reply::Error(..))`; `Err` means the connection
    /// failed or the reply was malformed.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.send(args);
        self.flush()?;
        self.read_reply()
    }

    /// Queues one command without writing it (see [`Client::flush`]).
    pub fn send(&mut self, args: &[&[u8]]) {
        let w = &mut self.wbuf;
        w.push(b'*');
        w.extend_from_slice(args.len().to_string().as_bytes());
        w.extend_from_slice(b"\r\n");
        for a in args {
            w.push(b'$');
            w.extend_from_slice(a.len().to_string().as_bytes());
            w.extend_from_slice(b"\r\n");
            w.extend_from_slice(a);
            w.extend_from_slice(b"\r\n");
        }
    }

    /// Writes every queued command.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.wbuf);
        self.wbuf.clear();
        r
    }

    /// `AUTH password`. A refusal (wrong password, no password set) is an error of
    /// kind `PermissionDenied` carrying the server's message.
    pub fn auth(&mut self, password: &str) -> io::Result<()> {
        match self.command(&[b"AUTH", password.as_bytes()])? {
            Reply::Error(e) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} refused AUTH: {e}", self.addr),
            )),
            _ => Ok(()),
        }
    }

    /// `HELLO proto`: switches the connection to RESP`proto` (2 or 3) and returns the
    /// server's description (a map). A refusal (e.g. `NOPROTO`, `NOAUTH`) is an error
    /// of kind `Other` carrying the server's message.
    pub fn hello(&mut self, proto: u8) -> io::Result<Reply> {
        let p = proto.to_string();
        match self.command(&[b"HELLO", p.as_bytes()])? {
            Reply::Error(e) => Err(io::Error::other(format!(
                "{} refused HELLO {proto}: {e}",
                self.addr
            ))),
            r => Ok(r),
        }
    }

    /// Reads the next reply (of a command sent earlier, or a push).
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        // A clean end before the first byte of a reply is still an unexpected end
        // here: a reply was expected.
        if self.rpos == self.rbuf.len() && self.fill()? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} closed the connection", self.addr),
            ));
        }
        self.reply(0)
    }

    // ---- the reader ------------------------------------------------------------

    /// Reads more bytes into the buffer; returns how many (0: end of stream).
    fn fill(&mut self) -> io::Result<usize> {
        if self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        } else if self.rpos > 0 && self.rbuf.len() + READ_CHUNK > self.rbuf.capacity() {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
        let len = self.rbuf.len();
        self.rbuf.resize(len + READ_CHUNK, 0);
        let r = loop {
            match self.stream.read(&mut self.rbuf[len..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        self.rbuf.truncate(len + *r.as_ref().unwrap_or(&0));
        r
    }

    fn eof(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{} closed the connection in the middle of a reply",
                self.addr
            ),
        )
    }

    /// The next line without its CRLF.
    fn line(&mut self) -> io::Result<Vec<u8>> {
        // Bytes after `rpos` known to start no CRLF (fill() may move the unconsumed
        // bytes to the front of the buffer, but keeps their order).
        let mut checked = 0;
        loop {
            let avail = &self.rbuf[self.rpos..];
            if let Some(i) = avail[checked..].windows(2).position(|w| w == b"\r\n") {
                let end = self.rpos + checked + i;
                let line = self.rbuf[self.rpos..end].to_vec();
                self.rpos = end + 2;
                return Ok(line);
            }
            if avail.len() > MAX_LINE {
                return Err(invalid(format!(
                    "a reply line is longer than {MAX_LINE} bytes"
                )));
            }
            checked = avail.len().saturating_sub(1);
            if self.fill()? == 0 {
                return Err(self.eof());
            }
        }
    }

    /// Exactly `n` bytes followed by CRLF.
    fn blob(&mut self, n: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(64 << 20));
        while out.len() < n {
            if self.rpos == self.rbuf.len() && self.fill()? == 0 {
                return Err(self.eof());
            }
            let take = (n - out.len()).min(self.rbuf.len() - self.rpos);
            out.extend_from_slice(&self.rbuf[self.rpos..self.rpos + take]);
            self.rpos += take;
        }
        while self.rbuf.len() - self.rpos < 2 {
            if self.fill()? == 0 {
                return Err(self.eof());
            }
        }
        if &self.rbuf[self.rpos..self.rpos + 2] != b"\r\n" {
            return Err(invalid(format!(
                "a {n}-byte string in a reply is not followed by CRLF"
            )));
        }
        self.rpos += 2;
        Ok(out)
    }

    /// One reply, `depth` aggregates deep.
    fn reply(&mut self, depth: usize) -> io::Result<Reply> {
        if depth > MAX_DEPTH {
            return Err(invalid(format!(
                "a reply nests aggregates more than {MAX_DEPTH} deep"
            )));
        }
        let line = self.line()?;
        let Some((&kind, rest)) = line.split_first() else {
            return Err(invalid("an empty line where a reply was expected".into()));
        };
        Ok(match kind {
            b'+' => Reply::Simple(Cow::Owned(text(rest))),
            b'-' => Reply::Error(Cow::Owned(text(rest))),
            b':' => Reply::Int(number(rest, "an integer")?),
            b'_' => Reply::Nil,
            b',' => Reply::Double(
                std::str::from_utf8(rest)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| invalid(format!("bad double in a reply: {:?}", text(rest))))?,
            ),
            b'#' => match rest {
                b"t" => Reply::Bool(true),
                b"f" => Reply::Bool(false),
                _ => return Err(invalid(format!("bad boolean in a reply: {:?}", text(rest)))),
            },
            b'(' => {
                let digits = rest.strip_prefix(b"-").unwrap_or(rest);
                if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                    return Err(invalid(format!(
                        "bad big number in a reply: {:?}",
                        text(rest)
                    )));
                }
                Reply::Bulk(rest.to_vec())
            }
            b'$' => match length(rest)? {
                None => Reply::Nil,
                Some(n) => Reply::Bulk(self.blob(n)?),
            },
            b'!' => {
                let n = length(rest)?.ok_or_else(|| invalid("a blob error of length -1".into()))?;
                Reply::Error(Cow::Owned(text(&self.blob(n)?)))
            }
            b'=' => {
                let n = length(rest)?
                    .ok_or_else(|| invalid("a verbatim string of length -1".into()))?;
                let mut b = self.blob(n)?;
                if b.len() < 4 || b[3] != b':' {
                    return Err(invalid(
                        "a verbatim string without its `xxx:` format".into(),
                    ));
                }
                let format = match &b[..3] {
                    b"txt" => Some("txt"),
                    b"mkd" => Some("mkd"),
                    _ => None,
                };
                b.drain(..4);
                match format {
                    Some(f) => Reply::Verbatim(f, b),
                    None => Reply::Bulk(b),
                }
            }
            b'*' | b'>' | b'~' => match length(rest)? {
                None if kind == b'*' => Reply::NilArray,
                None => return Err(invalid("an aggregate of length -1".into())),
                Some(n) => {
                    let mut items = Vec::with_capacity(n.min(1024));
                    for _ in 0..n {
                        items.push(self.reply(depth + 1)?);
                    }
                    if kind == b'~' {
                        Reply::Set(items)
                    } else {
                        Reply::Array(items)
                    }
                }
            },
            b'%' | b'|' => {
                let n = length(rest)?.ok_or_else(|| invalid("a map of length -1".into()))?;
                let mut pairs = Vec::with_capacity(n.min(1024));
                for _ in 0..n {
                    let k = self.reply(depth + 1)?;
                    let v = self.reply(depth + 1)?;
                    pairs.push((k, v));
                }
                if kind == b'|' {
                    // Attributes describe the reply that follows: skip them.
                    return self.reply(depth);
                }
                Reply::Map(pairs)
            }
            _ => {
                return Err(invalid(format!(
                    "unknown reply type byte {:?} (line {:?}): is this a Redis-protocol server?",
                    kind as char,
                    text(&line)
                )))
            }
        })
    }
}

/// Opens a TCP connection to `host:port`, trying each address it resolves to.
fn connect_tcp(addr: &str, timeout: Option<Duration>) -> io::Result<TcpStream> {
    let Some(t) = timeout else {
        let s = TcpStream::connect(addr)?;
        let _ = s.set_nodelay(true);
        return Ok(s);
    };
    let mut last = None;
    for a in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, t) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "the host resolves to no address")
    }))
}

/// An OS error's text without std's ` (os error N)` suffix.
fn os_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed reply: {msg}"),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn number(b: &[u8], what: &str) -> io::Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("bad {what} in a reply: {:?}", text(b))))
}

/// A length: `-1` is `None`; anything else negative is malformed.
fn length(b: &[u8]) -> io::Result<Option<usize>> {
    match number(b, "length")? {
        -1 => Ok(None),
        n if n < 0 => Err(invalid(format!("negative length {n} in a reply"))),
        n => usize::try_from(n)
            .map(Some)
            .map_err(|_| invalid(format!("length {n} in a reply is too large"))),
    }
}

#[cfg(test)]
mod tests {
    //! The reader against hand-written bytes (the real-server tests are in
    //! tests/client.rs).
    use super::*;

    /// A client whose server already sent `bytes` and then closed.
    fn client_reading(bytes: &[u8]) -> Client {
        let (a, mut b) = UnixStream::pair().unwrap();
        let bytes = bytes.to_vec();
        // From a thread: more than the socket buffer holds would block here. The
        // reader may stop early and drop its end: ignore that write error.
        std::thread::spawn(move || {
            let _ = b.write_all(&bytes);
        });
        Client {
            stream: Stream::Unix(a),
            addr: Addr::Unix("test".into()),
            rbuf: Vec::new(),
            rpos: 0,
            wbuf: Vec::new(),
        }
    }

    #[test]
    fn resp3_types() {
        let mut c = client_reading(
            b"_\r\n,3.5\r\n,-inf\r\n#t\r\n(-12345678901234567890\r\n=8\r\ntxt:abcd\r\n\
              !9\r\nERR blob!\r\n>2\r\n+a\r\n:1\r\n~1\r\n$1\r\nx\r\n\
              |1\r\n+key\r\n+val\r\n%1\r\n+k\r\n:2\r\n=7\r\nzzz:abc\r\n",
        );
        assert_eq!(c.read_reply().unwrap(), Reply::Nil);
        assert_eq!(c.read_reply().unwrap(), Reply::Double(3.5));
        assert_eq!(c.read_reply().unwrap(), Reply::Double(f64::NEG_INFINITY));
        assert_eq!(c.read_reply().unwrap(), Reply::Bool(true));
        assert_eq!(
            c.read_reply().unwrap(),
            Reply::bulk(b"-12345678901234567890")
        );
        assert_eq!(
            c.read_reply().unwrap(),
            Reply::Verbatim("txt", b"abcd".to_vec())
        );
        assert_eq!(c.read_reply().unwrap(), Reply::error("ERR blob!".into()));
        assert_eq!(
            c.read_reply().unwrap(),
            Reply::Array(vec![Reply::Simple("a".into()), Reply::Int(1)])
        );
        assert_eq!(c.read_reply().unwrap(), Reply::Set(vec![Reply::bulk(b"x")]));
        assert_eq!(
            c.read_reply().unwrap(),
            Reply::Map(vec![(Reply::Simple("k".into()), Reply::Int(2))])
        );
        assert_eq!(c.read_reply().unwrap(), Reply::bulk(b"abc"));
        let e = c.read_reply().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn nil_forms() {
        let mut c = client_reading(b"$-1\r\n*-1\r\n*0\r\n$0\r\n\r\n");
        assert_eq!(c.read_reply().unwrap(), Reply::Nil);
        assert_eq!(c.read_reply().unwrap(), Reply::NilArray);
        assert_eq!(c.read_reply().unwrap(), Reply::Array(vec![]));
        assert_eq!(c.read_reply().unwrap(), Reply::bulk(b""));
    }

    #[test]
    fn malformed_is_invalid_data() {
        for bad in [
            &b"?what\r\n"[..],
            b":12x\r\n",
            b"$-2\r\n",
            b"$3\r\nabcde\r\n",
            b"#x\r\n",
            b"(12a\r\n",
            b"\r\n",
        ] {
            let e = client_reading(bad).read_reply().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{bad:?}: {e}");
            assert!(e.to_string().starts_with("malformed reply: "), "{e}");
        }
    }

    #[test]
    fn eof_mid_reply_is_unexpected_eof() {
        for cut in [&b"$5\r\nab"[..], b"*2\r\n:1\r\n", b"+OK", b"%1\r\n+k\r\n"] {
            let e = client_reading(cut).read_reply().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{cut:?}: {e}");
            assert!(e.to_string().contains("in the middle of a reply"), "{e}");
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let bytes = b"*1\r\n".repeat(MAX_DEPTH + 2);
        let e = client_reading(&bytes).read_reply().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn endless_line_is_refused() {
        let mut bytes = b"+".to_vec();
        bytes.resize(MAX_LINE + READ_CHUNK * 2, b'a');
        let e = client_reading(&bytes).read_reply().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn requests_are_resp_arrays() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut c = Client {
            stream: Stream::Unix(a),
            addr: Addr::Unix("test".into()),
            rbuf: Vec::new(),
            rpos: 0,
            wbuf: Vec::new(),
        };
        c.send(&[b"SET", b"k", b"a\r\nb"]);
        c.send(&[b"PING"]);
        c.flush().unwrap();
        drop(c);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(
            got,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n*1\r\n$4\r\nPING\r\n"
        );
    }

    #[test]
    fn connection_error_names_address_and_hints() {
        let addr = Addr::Unix("/nonexistent-dir/weft-kv.sock".into());
        let e = Client::connect(&addr).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            e.to_string(),
            "cannot connect to weft-kv at /nonexistent-dir/weft-kv.sock: \
             No such file or directory (is `weft kv serve` running?)"
        );
    }
}
