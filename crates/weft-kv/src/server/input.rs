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
//! TCP does not wake a sender when its bytes are read (only when its send buffer was
//! full), so a TCP connection simply reads.

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

    /// Removes `n` bytes that [`Input::take`] peeked (they are queued: never waits).
    fn consume(&self, n: usize) -> io::Result<()> {
        let mut scratch = [0u8; 4096];
        let mut left = n;
        while left > 0 {
            let want = left.min(scratch.len());
            // SAFETY: `scratch` is `want` (<= its length) writable bytes of ours.
            let r = unsafe {
                libc::recv(
                    self.as_raw_fd(),
                    scratch.as_mut_ptr().cast(),
                    want,
                    libc::MSG_DONTWAIT,
                )
            };
            match r {
                r if r > 0 => left -= r as usize,
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Input for UnixStream {
    const PEEKS: bool = true;

    fn take(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.peek(buf)
    }
}

impl Input for TcpStream {
    const PEEKS: bool = false;

    fn take(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }
}

/// Whether a peeked read holding the commands named `names` may stay on the socket
/// while they run: every one is a command on keys (run on a shard).
pub fn may_defer<'a>(mut names: impl Iterator<Item = &'a [u8]>) -> bool {
    names.all(|n| commands::lookup(n).is_some_and(|c| matches!(c.exec, Exec::Shard(_))))
}
