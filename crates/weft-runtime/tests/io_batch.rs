//! Replies batched per turn: the green threads of one worker that each send a reply
//! and take their peeked request off the socket (`send_then_discard`, what a server's
//! connection does after a read; `send_then_peek`, the same with its next read) in the
//! same turn have their sends go to the kernel together, in the one `io_uring_enter`
//! the worker makes when it has nothing left to run, not one system call each. Every
//! reply still arrives whole, and exactly the peeked bytes are taken off each socket
//! (what follows them stays, and the next peek sees it), on both backends.

use std::io::{Read, Write};
use weft_runtime::net::UnixStream;
use weft_runtime::{spawn, IoBackend};

mod common;
use common::*;

/// Connections served in the one turn.
const CONNS: usize = 16;

/// Each of [`CONNS`] server threads peeks its request and answers it with `answer`
/// (the reply, the peeked length and the socket; what it returns is what it read
/// next), all in one turn; then checks every reply, what the server read next and
/// what is left on its socket, and the `io_uring_enter` calls the turn made.
fn one_turn(answer: fn(&UnixStream, &[u8], usize) -> Vec<u8>, next: &[u8]) {
    for b in backends() {
        let rt = rt1(b);
        let (enters, replies) = rt.block_on(move || {
            // Every request is on its socket before any server thread runs: each one
            // peeks its request without waiting, so all of them reach their send in
            // the same turn of the worker.
            let mut clients = Vec::new();
            let mut servers = Vec::new();
            for i in 0..CONNS {
                let (server, mut client) = UnixStream::pair().unwrap();
                client
                    .write_all(format!("request {i:02};next").as_bytes())
                    .unwrap();
                clients.push(client);
                servers.push(server);
            }
            let before = weft_runtime::ring_enters();
            let threads: Vec<_> = servers
                .into_iter()
                .enumerate()
                .map(|(i, server)| {
                    spawn(move || {
                        let mut buf = [0u8; 10];
                        let mut seen = 0;
                        while seen < buf.len() {
                            seen = server.peek(&mut buf).unwrap();
                        }
                        assert_eq!(&buf, format!("request {i:02}").as_bytes());
                        let got = answer(&server, format!("reply {i:02}").as_bytes(), buf.len());
                        (server, got)
                    })
                })
                .collect();
            let servers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            let after = weft_runtime::ring_enters();
            // What each client got, and what is left on each server's socket.
            let mut replies = Vec::new();
            for (mut client, (server, got)) in clients.into_iter().zip(servers) {
                let mut reply = [0u8; 8];
                client.read_exact(&mut reply).unwrap();
                let mut rest = [0u8; 5];
                (&server).read_exact(&mut rest).unwrap();
                replies.push((reply, got, rest));
            }
            (before.zip(after).map(|(a, b)| b - a), replies)
        });
        for (i, (reply, got, rest)) in replies.iter().enumerate() {
            assert_eq!(reply, format!("reply {i:02}").as_bytes(), "{b:?}");
            assert_eq!(got, next, "{b:?}");
            assert_eq!(rest, b";next", "{b:?}");
        }
        match b {
            // One call for the turn's sixteen replies; a few more at most if the worker
            // polled in between (it polls every few dozen switches), never one a reply.
            IoBackend::Uring => {
                let n = enters.expect("an io_uring worker counts its calls");
                assert!(n <= 3, "{n} io_uring_enter calls for {CONNS} replies");
            }
            IoBackend::Threads => assert_eq!(enters, None),
        }
    }
}

#[test]
fn replies_of_one_turn_go_out_in_one_system_call() {
    one_turn(
        |server, reply, peeked| {
            server.send_then_discard(reply, peeked).unwrap();
            Vec::new()
        },
        b"",
    );
}

/// The same with each connection's next read in the chain: it sees what followed its
/// request, still queued.
#[test]
fn replies_and_next_peeks_of_one_turn_go_out_in_one_system_call() {
    one_turn(
        |server, reply, peeked| {
            let mut next = [0u8; 16];
            let n = server.send_then_peek(reply, peeked, &mut next).unwrap();
            next[..n].to_vec()
        },
        b";next",
    );
}
