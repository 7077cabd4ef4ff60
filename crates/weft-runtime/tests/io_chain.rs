//! A reply and the next read as one chain (`send_then_read`, `send_then_peek`: what a
//! server's connection does at the end of a read): the reply arrives whole, exactly
//! the peeked bytes are taken off, and the read waits for bytes the peer sends only
//! once it has the reply, on both backends, over Unix and TCP sockets; a peer gone
//! before the reply is an error, a peer that closes after it an end of stream (one
//! turn's chains in one system call: `io_batch.rs`).

use std::io::{Read, Write};
use weft_runtime::net::{TcpListener, UnixStream};

mod common;
use common::*;

/// Requests and replies of one conversation.
const ROUNDS: usize = 5;

fn request(i: usize) -> Vec<u8> {
    format!("request {i}\n").into_bytes()
}

/// Reply `i`: a few bytes, and one larger than a socket's buffer (the send waits
/// while the peer does not read; the read comes after it).
fn reply(i: usize) -> Vec<u8> {
    if i == 2 {
        vec![b'R'; 512 << 10]
    } else {
        format!("reply {i}\n").into_bytes()
    }
}

/// The peer: sends request `i` only once it has read reply `i - 1`, then closes.
fn peer(mut c: impl Read + Write) {
    for i in 0..ROUNDS {
        c.write_all(&request(i)).unwrap();
        let mut back = vec![0u8; reply(i).len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, reply(i), "reply {i}");
    }
}

#[test]
fn a_peeked_request_is_answered_and_taken_off_and_the_next_one_peeked() {
    for b in backends() {
        let rt = rt1(b);
        let (ends, last) = rt.block_on(move || {
            let (server, client) = UnixStream::pair().unwrap();
            let peer = std::thread::spawn(move || peer(client));
            let mut buf = vec![0u8; 64];
            let mut got = 0;
            while got < request(0).len() {
                got = server.peek(&mut buf).unwrap();
            }
            let mut ends = Vec::new();
            for i in 0..ROUNDS {
                // A peek always sees the whole request: each comes only after the
                // previous reply, and nothing of it was taken before its answer.
                assert_eq!(&buf[..got], request(i), "{b:?}");
                got = server.send_then_peek(&reply(i), got, &mut buf).unwrap();
                // (A request may come in pieces: the peek sees all that came.)
                while i + 1 < ROUNDS && got < request(0).len() {
                    got = server.peek(&mut buf).unwrap();
                }
                ends.push(got);
            }
            peer.join().unwrap();
            (ends, server.read(&mut buf).unwrap())
        });
        // The last chain's peek saw the peer's end of stream.
        assert_eq!(ends.last(), Some(&0), "{b:?}");
        assert_eq!(last, 0, "{b:?}");
    }
}

#[test]
fn a_tcp_reply_goes_with_the_next_read() {
    for b in backends() {
        let rt = rt1(b);
        let got = rt.block_on(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let peer =
                std::thread::spawn(move || peer(std::net::TcpStream::connect(addr).unwrap()));
            let (server, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 64];
            let mut got = 0;
            while got < request(0).len() {
                got += server.read(&mut buf[got..]).unwrap();
            }
            let mut seen = Vec::new();
            for i in 0..ROUNDS {
                seen.push(buf[..got].to_vec());
                got = server.send_then_read(&reply(i), 0, &mut buf).unwrap();
                while got > 0 && got < request(0).len() {
                    got += server.read(&mut buf[got..]).unwrap();
                }
            }
            peer.join().unwrap();
            (seen, got)
        });
        assert_eq!(got.0, (0..ROUNDS).map(request).collect::<Vec<_>>(), "{b:?}");
        assert_eq!(got.1, 0, "{b:?}");
    }
}

#[test]
fn a_reply_to_a_peer_that_is_gone_is_an_error() {
    for b in backends() {
        let rt = rt1(b);
        let r = rt.block_on(move || {
            let (server, client) = UnixStream::pair().unwrap();
            drop(client);
            let mut buf = [0u8; 16];
            server
                .send_then_read(b"reply", 0, &mut buf)
                .map_err(|e| e.kind())
        });
        assert!(r.is_err(), "{b:?}: {r:?}");
    }
}
