//! How a connection takes its requests from the socket: on a Unix socket, it looks at
//! them first and takes them off the socket only once they are answered.
//!
//! Why: on a Unix stream socket, taking bytes off the socket frees the sender's send
//! buffer space, and the kernel then wakes every thread sleeping on the sender's
//! socket, including a client that sent one command and sleeps reading its reply.
//! That client wakes, finds no reply, and sleeps again: two context switches on the
//! client's side and a wake-up on the server's, for nothing, on most requests of a
//! client that sends one command at a time (measured: 1.8 voluntary context switches
//! per request in such a client, instead of 1). Peeking at the request
//! (`recv(MSG_PEEK)`) and removing it after the reply is sent moves that wake-up to a
//! moment when the client is already awake (its reply woke it), where it costs
//! nothing. The price is one `recv` per read, the removal, which always finds its
//! bytes there (this connection is the socket's only reader).
//!
//! Only a read of commands on keys (those the command table runs on a shard) waits to
//! be taken off: any other command (a blocking one, MULTI, SUBSCRIBE, ...) may read
//! the socket itself or change how the connection reads it, so its read is taken off
//! before it runs ([`may_defer`]).
//!
//! The removal goes with the read's last reply ([`Input::send_and_consume`]): on an
//! io_uring worker the send and the removal are one linked pair of operations in one
//! system call, which also carries the replies of the other connections the worker
//! served in the same turn (the connection parks until the worker has nothing left to
//! run and submits them all: one call a turn, not one a reply). As two calls, the client that the reply wakes is often run on the
//! server's CPU at the return of the send, before the removal: it reads its reply,
//! sends its next command and sleeps reading again, and the removal then wakes it for
//! nothing, the very wake-up the peek is there to avoid.
//!
//! TCP does not wake a sender when its bytes are read (only when its send buffer was
//! full), so a TCP connection simply reads.
//!
//! The read's last replies also wait for the connection's next read, and go with it
//! ([`Input::send_and_take`]): on an io_uring worker the send, the removal (a Unix
//! socket) and the next read (a peek on a Unix socket) are one linked chain of
//! operations, submitted with the turn's other replies, and the connection is woken
//! once, when the next request has come. So a request one at a time costs no system
//! call of its own (before: a `send` of the reply over TCP, and a receive tried at once
//! after each reply, which mostly found nothing yet), and the next read is in the
//! kernel from the moment the reply has gone out: requests of several connections are
//! still taken in the order they arrived (a read tried only after the worker ran other
//! connections' completions would come after theirs). Not chained: replies to a
//! subscriber or a tracking client (another thread may write its messages), and when a
//! blocked command's read-ahead reads the socket (the replies go first, then its bytes
//! are taken).

use crate::commands::{self, Exec};
use std::io;
use std::os::fd::AsRawFd;
use weft_runtime::net::{TcpStream, UnixStream};

/// A connection's socket as the connection reads it.
pub trait Input: AsRawFd {
    /// Whether [`Input::take`] reads (false) or peeks (true: the caller must
    /// [`Input::consume`] what it got before taking more).
    const PEEKS: bool;

    /// Waits for bytes and copies some into `buf` (0: the peer closed).
    fn take(&self, buf: &mut [u8]) -> io::Result<usize>;

    /// Sends all of `buf` (the last replies to a read), then removes the `n` bytes
    /// that [`Input::take`] peeked. A Unix socket does both in one system call on an
    /// io_uring worker (the module comment says why).
    fn send_and_consume(&self, buf: &[u8], n: usize) -> io::Result<()>
    where
        for<'a> &'a Self: io::Write,
    {
        let mut me = self;
        io::Write::write_all(&mut me, buf)?;
        self.consume(n)
    }

    /// Removes `n` bytes that [`Input::take`] peeked (they are queued: never waits).
    fn consume(&self, n: usize) -> io::Result<()>;

    /// Whether a read's last replies wait for the connection's next read, to go with it
    /// ([`Input::send_and_take`]; the module comment says why).
    const CHAINS: bool = false;

    /// [`Input::send_and_consume`] then [`Input::take`], as one chain of operations
    /// on an io_uring worker where [`Input::CHAINS`].
    fn send_and_take(&self, buf: &[u8], n: usize, rbuf: &mut [u8]) -> io::Result<usize>
    where
        for<'a> &'a Self: io::Write,
    {
        self.send_and_consume(buf, n)?;
        self.take(rbuf)
    }
}

impl Input for UnixStream {
    const PEEKS: bool = true;
    const CHAINS: bool = true;

    fn take(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.peek(buf)
    }

    fn send_and_consume(&self, buf: &[u8], n: usize) -> io::Result<()> {
        self.send_then_discard(buf, n)
    }

    fn consume(&self, n: usize) -> io::Result<()> {
        self.discard(n)
    }

    fn send_and_take(&self, buf: &[u8], n: usize, rbuf: &mut [u8]) -> io::Result<usize> {
        self.send_then_peek(buf, n, rbuf)
    }
}

impl Input for TcpStream {
    const PEEKS: bool = false;
    const CHAINS: bool = true;

    fn take(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }

    fn consume(&self, n: usize) -> io::Result<()> {
        self.discard(n)
    }

    fn send_and_take(&self, buf: &[u8], n: usize, rbuf: &mut [u8]) -> io::Result<usize> {
        self.send_then_read(buf, n, rbuf)
    }
}

/// Whether a peeked read holding the commands named `names` may stay on the socket
/// while they run: every one is a command on keys (run on a shard).
pub fn may_defer<'a>(mut names: impl Iterator<Item = &'a [u8]>) -> bool {
    names.all(|n| commands::lookup(n).is_some_and(|c| matches!(c.exec, Exec::Shard(_))))
}
