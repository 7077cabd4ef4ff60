//! The seed's syslet example as a working program: a whole server loop written as one
//! syslet, submitted with one call.
//!
//! ```text
//!   accept() ---------------------------> [ stop if negative ]
//!   setsockopt(TCP_NODELAY) ------------> [ stop if negative ]
//!   read() <-----------------------------.  [ loop while positive ]
//!     |  `--> umem_add(reads, 1) ---------'
//!     `--(0 or error: skip to the next atom)--> close()
//!   umem_add(clients_left, -1) ---------> [ stop at 0, else loop back to accept() ]
//! ```
//!
//! `cargo run --release -p weft-runtime --example syslet_server` starts the syslet on a
//! listening socket, connects five clients that each send a few messages and hang up,
//! and prints what the syslet counted. The accept blocks (no client yet), so the
//! syslet goes asynchronous at once (to the io_uring chain engine, or a cachemiss
//! thread: docs/syslets.md) and `exec` returns: the program's own thread is free while
//! the server runs.

use std::io::Write;
use std::os::fd::AsRawFd;
use weft_runtime::syslet::*;

const CLIENTS: i64 = 5;

fn main() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");

    let mut b = Builder::new();
    let (lfd, null) = (b.value(listener.as_raw_fd() as i64), b.value(0));
    let conn = b.var();
    let accept = b.atom(libc::SYS_accept, &[lfd, null, null]);
    b.ret(accept, conn).flags(accept, SYSLET_STOP_ON_NEGATIVE);

    let (tcp, nodelay, len4) = (
        b.value(libc::IPPROTO_TCP as i64),
        b.value(libc::TCP_NODELAY as i64),
        b.value(4),
    );
    let one_int = b.bytes(&1i32.to_ne_bytes());
    let set = b.atom(libc::SYS_setsockopt, &[conn, tcp, nodelay, one_int, len4]);
    b.flags(set, SYSLET_STOP_ON_NEGATIVE);

    let (buf, buflen, reads, one) = (b.buffer(4096), b.value(4096), b.value(0), b.value(1));
    let read = b.atom(libc::SYS_read, &[conn, buf, buflen]);
    // 0 (the client hung up) or an error: skip to the linearly next atom, the close.
    b.flags(
        read,
        SYSLET_STOP_ON_NON_POSITIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
    );
    let close = b.atom(libc::SYS_close, &[conn]);
    let count = b.umem_add(reads, one);
    b.next(read, Some(count)).next(count, Some(read)); // read while positive

    let (left, minus_one) = (b.value(CLIENTS), b.value(-1));
    let done = b.umem_add(left, minus_one);
    b.flags(done, SYSLET_STOP_ON_NON_POSITIVE); // the last client: stop
    b.next(close, Some(done)).next(done, Some(accept)); // else back to accept

    let program = b.build().expect("a valid syslet");
    let ctx = Context::new(16);
    let outcome = ctx.exec(program);
    let went_async = matches!(outcome, Outcome::Async(_));

    for i in 0..CLIENTS {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        for j in 0..3 {
            s.write_all(format!("client {i} message {j}\n").as_bytes())
                .expect("write");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    let d = match outcome {
        Outcome::Done(d) => d,
        Outcome::Async(h) => ctx.wait_for(h).expect("the server's completion"),
    };
    println!(
        "syslet server: {} clients served, {} reads, ended at atom {} with result {} ({})",
        CLIENTS - d.program.get(left),
        d.program.get(reads),
        d.atom,
        d.ret,
        if went_async {
            "went asynchronous (io_uring chain engine or cachemiss thread): exec returned at once"
        } else {
            "ran inline"
        }
    );
    assert_eq!(d.program.get(left), 0);
}
