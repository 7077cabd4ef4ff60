//! The README's quick start for the M:N runtime: an echo server on green threads, and
//! clients on green threads of the same runtime, with a channel collecting results.
//!
//! Run: `cargo run --release -p weft-runtime --example quickstart`

use std::io::{Read, Write};
use weft_runtime::net::{TcpListener, TcpStream};
use weft_runtime::{chan, spawn, Runtime};

fn main() -> std::io::Result<()> {
    let rt = Runtime::new()?; // one pinned worker per CPU
    let total = rt.block_on(|| -> std::io::Result<usize> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        // The server: one green thread per connection; each read parks only that thread.
        spawn(move || loop {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        });
        // 200 clients, each a green thread, reporting through a channel.
        let (tx, rx) = chan::unbounded();
        for i in 0..200 {
            let tx = tx.clone();
            spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let msg = format!("hello {i}");
                s.write_all(msg.as_bytes()).unwrap();
                let mut back = vec![0; msg.len()];
                s.read_exact(&mut back).unwrap();
                tx.send(back.len()).unwrap();
            });
        }
        drop(tx);
        Ok(rx.iter().sum())
    })?;
    println!(
        "echoed {total} bytes for 200 clients on {} workers ({} backend)",
        rt.workers(),
        weft_runtime::io_backend()
    );
    Ok(())
}
