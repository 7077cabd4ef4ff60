//! The system-call layer (`weft-hook`) in `weft bench runtime`: the memory of idle
//! connections held by hooked green threads or by OS threads ([`memory`]), and the C
//! library's own functions for `hooked-call` ([`libc_read`], [`libc_clock_nanosleep`]). (`tcp-echo`'s `weft-hooked`
//! server is in `echo.rs`.)
//!
//! The `weft` command links the layer but turns it off before `main` (`main.rs`): its
//! other commands (`weft kv serve`) keep the C library's calls, and a benchmark turns it
//! on for what it measures. The memory is measured in a child process, this binary
//! re-executed as `weft bench-worker hooked-conns --mode green|threads`: a server holding
//! connections idle, each served by a green thread blocked in `std::net`'s read (the
//! layer on) or by an OS thread per connection. It prints `port P` once it listens on
//! 127.0.0.1:P and ends when its standard input closes.

use super::{Measurement, Reporter};

#[path = "../../../../tests/support/nofile.rs"]
mod nofile;
use nofile::raise_nofile;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;
use weft_runtime::Runtime;

/// How `hooked-conns` serves its connections.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A green thread per connection, blocked in std's read through the layer.
    Green,
    /// An OS thread per connection (std's default stack), blocked in read.
    Threads,
}

/// In the child: says where it listens, and ends the process when the parent closes
/// its standard input.
fn listen_and_watch_stdin() -> Result<TcpListener, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    // A long accept queue: the memory benchmark connects thousands at once.
    // SAFETY: listen again on our listening socket, with a longer queue.
    unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 65_535) };
    let port = l
        .local_addr()
        .map_err(|e| format!("local_addr: {e}"))?
        .port();
    println!("port {port}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::spawn(|| {
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        std::process::exit(0);
    });
    Ok(l)
}

/// Echoes until end of stream with a buffer of `buf` bytes.
fn echo(mut s: TcpStream, buf: usize) {
    let mut b = vec![0u8; buf];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&b[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// `weft bench-worker hooked-conns`: holds connections idle (module comment).
pub fn conns_main(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Green => {
            weft_hook::set_enabled(true);
            let rt = Runtime::builder()
                .build()
                .map_err(|e| format!("runtime: {e}"))?;
            let l = listen_and_watch_stdin()?;
            rt.block_on(move || loop {
                match l.accept() {
                    Ok((s, _)) => drop(weft_runtime::spawn(move || echo(s, 64))),
                    Err(e) => return Err(format!("accept: {e}")),
                }
            })
        }
        Mode::Threads => {
            let l = listen_and_watch_stdin()?;
            loop {
                let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
                std::thread::Builder::new()
                    .spawn(move || echo(s, 64))
                    .map_err(|e| format!("thread: {e}"))?;
            }
        }
    }
}

/// A child process of this binary running a `bench-worker` job that listens.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    pub addr: SocketAddr,
}

impl Worker {
    /// Starts `weft bench-worker <args>` and waits for its `port P` line.
    pub fn start(args: &[&str]) -> Result<Worker, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut child = Command::new(exe)
            .arg("bench-worker")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start weft bench-worker {}: {e}", args.join(" ")))?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .map_err(|e| format!("bench-worker {}: {e}", args.join(" ")))?;
        let port: u16 = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                let _ = child.kill();
                format!("bench-worker {} did not start: {line:?}", args.join(" "))
            })?;
        Ok(Worker {
            child,
            stdin,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the child (it exits when its standard input closes).
    pub fn stop(mut self) -> Result<(), String> {
        drop(self.stdin.take());
        let st = self.child.wait().map_err(|e| e.to_string())?;
        if st.success() {
            Ok(())
        } else {
            Err(format!("the bench-worker ended with {st}"))
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A "Key:  123 kB" field of /proc/PID/status, in bytes.
fn status_field(pid: u32, key: &str) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let v = rest.trim().trim_end_matches("kB").trim();
            v.parse::<u64>()
                .ok()
                .map(|v| if key == "Threads" { v } else { v * 1024 })
        })
        .ok_or_else(|| format!("no {key} in /proc/{pid}/status"))
}

/// What [`memory`] measured for one server.
struct Held {
    /// Resident memory (VmRSS) the connections added, and page tables (VmPTE).
    rss: u64,
    pte: u64,
    threads: u64,
}

/// Connects `n` clients to a `hooked-conns` child in `mode`, each served once (a byte
/// and its echo, so its server is blocked in read again), and measures the child.
fn hold(n: usize, mode: &str) -> Result<Held, String> {
    let w = Worker::start(&["hooked-conns", "--mode", mode])?;
    // Let the child settle (its runtime's workers started) before the baseline.
    std::thread::sleep(Duration::from_millis(50));
    let rss0 = status_field(w.pid(), "VmRSS")?;
    let pte0 = status_field(w.pid(), "VmPTE")?;
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut c =
            TcpStream::connect(w.addr).map_err(|e| format!("connection {i}: connect: {e}"))?;
        c.set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        c.write_all(&[i as u8])
            .and_then(|_| {
                let mut b = [0u8];
                c.read_exact(&mut b)?;
                if b[0] != i as u8 {
                    return Err(std::io::Error::other("a wrong echo"));
                }
                Ok(())
            })
            .map_err(|e| format!("connection {i}: {e}"))?;
        conns.push(c);
    }
    let held = Held {
        rss: status_field(w.pid(), "VmRSS")?.saturating_sub(rss0),
        pte: status_field(w.pid(), "VmPTE")?.saturating_sub(pte0),
        threads: status_field(w.pid(), "Threads")?,
    };
    drop(conns);
    w.stop()?;
    Ok(held)
}

fn mib(b: f64) -> String {
    format!("{:.1} MiB", b / (1u64 << 20) as f64)
}

/// `connections-memory`: `n` idle connections each served by a hooked green thread
/// blocked in std's read, against each served by an OS thread blocked in read: the
/// resident memory they add to the server process, per connection.
pub fn memory(rep: &mut Reporter, want: usize) -> Result<(), String> {
    // This process holds the clients' ends, the child the servers'.
    let limit = raise_nofile(want as u64 + 256) as usize;
    let n = want.min(limit.saturating_sub(256));
    rep.line("");
    rep.line(format!(
        "connections-memory: {n} idle TCP connections held by one server process, each \
         served by a green thread blocked in std's read through weft-hook, or by an OS \
         thread (std's default stack) blocked in read; resident memory (VmRSS) and page \
         tables (VmPTE) they add to the server"
    ));
    if n < want {
        rep.line(format!(
            "  CLAMPED to {n} connections: RLIMIT_NOFILE is {limit} and cannot be raised"
        ));
    }
    rep.line(format!(
        "  {:<20} {:>14} {:>16} {:>14} {:>10}",
        "impl", "resident", "per connection", "page tables", "threads"
    ));
    let mut per = Vec::new();
    for (name, mode) in [("weft-hooked", "green"), ("os-threads", "threads")] {
        let h = hold(n, mode)?;
        let p = h.rss as f64 / n.max(1) as f64;
        per.push(p);
        rep.line(format!(
            "  {:<20} {:>14} {:>13.0} B {:>14} {:>10}",
            name,
            mib(h.rss as f64),
            p,
            mib(h.pte as f64),
            h.threads
        ));
        for (what, value, unit) in [
            ("rss-per-connection", p, "bytes"),
            ("rss-total", h.rss as f64, "bytes"),
            ("page-tables", h.pte as f64, "bytes"),
        ] {
            rep.emit(&Measurement {
                suite: "runtime",
                name: format!("connections-memory/{n}/{what}"),
                impl_name: name.to_string(),
                value: Some(value),
                unit,
                note: None,
            });
        }
    }
    rep.line(format!(
        "  an OS thread per connection takes {:.1}x the resident memory of a hooked green \
         thread (and a kernel stack each, 16 KiB on x86_64, not in VmRSS)",
        per[1] / per[0].max(1.0)
    ));
    Ok(())
}

/// The C library's own function `name` (the program's is weft-hook's), looked up by
/// name in the already loaded C library.
fn libc_sym(name: &core::ffi::CStr) -> *mut libc::c_void {
    // SAFETY: dlopen of the already loaded C library (no load), dlsym of a name.
    let p = unsafe {
        let h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        libc::dlsym(h, name.as_ptr())
    };
    assert!(!p.is_null(), "the C library has no {name:?}");
    p
}

/// `read(2)` as the C library has it.
pub fn libc_read() -> unsafe extern "C" fn(i32, *mut libc::c_void, usize) -> isize {
    // SAFETY: the C library's read has this type.
    unsafe {
        core::mem::transmute::<
            *mut libc::c_void,
            unsafe extern "C" fn(i32, *mut libc::c_void, usize) -> isize,
        >(libc_sym(c"read"))
    }
}

/// `clock_nanosleep(2)`'s type.
pub type ClockNanosleep =
    unsafe extern "C" fn(libc::clockid_t, i32, *const libc::timespec, *mut libc::timespec) -> i32;

/// `clock_nanosleep(2)` as the C library has it.
pub fn libc_clock_nanosleep() -> ClockNanosleep {
    // SAFETY: the C library's clock_nanosleep has this type.
    unsafe {
        core::mem::transmute::<*mut libc::c_void, ClockNanosleep>(libc_sym(c"clock_nanosleep"))
    }
}
