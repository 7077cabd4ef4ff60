//! `tcp-echo`: TCP echo throughput of weft's green-thread sockets against the two
//! classic ways of writing a server, all in this process, on 127.0.0.1.
//!
//! The servers, each run in turn:
//!
//! * `weft-uring` / `weft-threads`: a weft [`Runtime`] with its default number of
//!   workers, a green thread looping on [`weft_runtime::net::TcpListener::accept`] and
//!   one green thread per connection echoing with blocking-style `read` then
//!   `write_all` (only the green thread parks). Once on the io_uring backend (skipped,
//!   with a note, where the kernel refuses io_uring) and once on the thread fallback
//!   (nonblocking calls plus the epoll poller), chosen with `Builder::io_backend`.
//! * `weft-hooked` / `weft-hooked-threads`: the same server written with `std::net`
//!   (`TcpListener::accept`, `TcpStream::read`, `write_all`, the code of
//!   `pthread-per-conn`) on green threads, whose blocking calls the system-call layer
//!   (weft-hook, linked into this binary and turned on while the server runs) turns
//!   into parks; on io_uring and on the thread fallback. Their target: within 10% of
//!   weft's own sockets.
//! * `pthread-per-conn`: `std::net::TcpListener` and one OS thread per connection,
//!   blocking `read` then `write_all`.
//! * `epoll-loop`: one OS thread, nonblocking sockets, level-triggered epoll; each
//!   connection has a buffer, and while an echo is only partly written the connection
//!   waits for `EPOLLOUT` instead of reading more (so no byte is ever dropped).
//!
//! Every server echoes with a 64 KiB buffer and sets `TCP_NODELAY` on its connections.
//!
//! The workload: C client connections (64, 8 with `--quick`) each send a message of a
//! fixed size (64 B, then 16 KiB) and read the echo back before sending the next one,
//! so exactly C requests are in flight at any time (a closed loop). The client checks
//! every echoed byte: each message carries its connection id and sequence number over
//! a per-connection pattern, so a lost, reordered, mixed-up or corrupted echo is an
//! error, not a figure.
//!
//! Fairness:
//!
//! * **One client for all.** The same driver, on plain OS threads with blocking std
//!   sockets (`TCP_NODELAY` set), measures every server: 2 client threads, each owning
//!   half of the connections and running them in lockstep rounds (write one message
//!   on each of its connections, then read the echo of each). Its costs are identical
//!   for every server, so the ratios compare the servers alone, even though on a small
//!   machine the client shares the CPUs with the server under test.
//! * **Interleaved runs.** A case (one message size, one server) gets ~2 s (~0.2 s with
//!   `--quick`), split into 5 (3) runs; the servers take turns run by run (weft-uring,
//!   weft-threads, pthread, epoll, weft-uring, ...), so noise from a shared machine
//!   hits them alike, and the median run is reported (min..max shown).
//! * **Fresh servers, steady state.** Each run starts its server, connects the C
//!   connections (not timed), runs untimed rounds for a short warm-up (stacks, buffers,
//!   socket autotuning), then counts the requests completed in the timed window; the
//!   connections are then closed and the server stopped and joined, so no run sees
//!   another's threads.
//!
//! Figures: `kreq/s` is thousands of completed request/response pairs per second, all
//! connections together; `MB/s` is the payload echoed per second (10^6 bytes, one
//! direction: requests/s x message size). Ratios are weft / peer: above 1 means weft
//! served more requests per second.

use super::{median, progress, Measurement, Reporter};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};
use weft_runtime::{IoBackend, Runtime};

/// The suite the measurements belong to.
const SUITE: &str = "runtime";
/// The message sizes, one row set each.
const SIZES: [usize; 2] = [64, 16 * 1024];
/// Client OS threads (fewer if there are fewer connections).
const CLIENT_THREADS: usize = 2;
/// The echo buffer of every server.
pub(super) const SERVER_BUF: usize = 64 * 1024;
/// A client read or write that waits this long means a broken server: an error.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much to run.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Concurrent client connections.
    conns: usize,
    /// Timed runs per case; the servers take turns run by run.
    runs: usize,
    /// The timed part of one run.
    window: Duration,
    /// Untimed rounds before it.
    warmup: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                conns: 8,
                runs: 3,
                window: Duration::from_millis(200) / 3,
                warmup: Duration::from_millis(10),
            }
        } else {
            Plan {
                conns: 64,
                runs: 5,
                window: Duration::from_millis(400),
                warmup: Duration::from_millis(50),
            }
        }
    }
}

/// The servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    WeftUring,
    WeftThreads,
    WeftHooked,
    WeftHookedThreads,
    PthreadPerConn,
    EpollLoop,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::WeftUring,
        Kind::WeftThreads,
        Kind::WeftHooked,
        Kind::WeftHookedThreads,
        Kind::PthreadPerConn,
        Kind::EpollLoop,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::WeftUring => "weft-uring",
            Kind::WeftThreads => "weft-threads",
            Kind::WeftHooked => "weft-hooked",
            Kind::WeftHookedThreads => "weft-hooked-threads",
            Kind::PthreadPerConn => "pthread-per-conn",
            Kind::EpollLoop => "epoll-loop",
        }
    }

    fn start(self) -> Result<Server, String> {
        match self {
            Kind::WeftUring => start_weft(IoBackend::Uring),
            Kind::WeftThreads => start_weft(IoBackend::Threads),
            Kind::WeftHooked => start_hooked(IoBackend::Uring),
            Kind::WeftHookedThreads => start_hooked(IoBackend::Threads),
            Kind::PthreadPerConn => start_pthread(),
            Kind::EpollLoop => start_epoll(),
        }
    }

    /// Whether this server runs on io_uring.
    fn uring(self) -> bool {
        matches!(self, Kind::WeftUring | Kind::WeftHooked)
    }
}

/// About how long [`run`] takes, in seconds (for the progress line).
pub fn estimate(quick: bool) -> f64 {
    let plan = Plan::new(quick);
    // Each run also starts a server, connects and stops: ~50 ms.
    let run = (plan.window + plan.warmup).as_secs_f64() + 0.05;
    (SIZES.len() * Kind::ALL.len() * plan.runs) as f64 * run
}

/// Runs the benchmark: for each message size, every server with the same client; one
/// table per size and ratio lines. An echo that differs from its request is an error.
pub fn run(rep: &mut Reporter, quick: bool) -> Result<(), String> {
    progress::part("tcp-echo");
    let plan = Plan::new(quick);
    // Which servers can run: io_uring may be refused by the kernel or a seccomp filter.
    let uring = Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Uring)
        .build()
        .map(drop)
        .map_err(|e| format!("io_uring unavailable: {e}"));
    let available: Vec<(Kind, Result<(), String>)> = Kind::ALL
        .iter()
        .map(|&k| {
            let ok = match k {
                k if k.uring() => uring.clone(),
                _ => Ok(()),
            };
            (k, ok)
        })
        .collect();
    let workers = super::nproc();
    rep.line("");
    rep.line(format!(
        "tcp-echo: {} connections on 127.0.0.1, request/response in lockstep, every echoed byte \
         checked; one client for all servers ({} OS threads, blocking sockets, TCP_NODELAY)",
        plan.conns,
        CLIENT_THREADS.min(plan.conns)
    ));
    rep.line(format!(
        "  servers: weft (runtime of {workers} workers, a green thread per connection; io_uring \
         and thread backends), pthread-per-conn (an OS thread per connection), epoll-loop (one \
         thread, level-triggered)"
    ));
    rep.line(format!(
        "  method: per server the median of {} runs of {} ms (after {} ms of warm-up), servers \
         taking turns run by run; MB/s = payload echoed per second (one direction)",
        plan.runs,
        plan.window.as_millis(),
        plan.warmup.as_millis()
    ));
    let servers = available.iter().filter(|a| a.1.is_ok()).count();
    let steps = SIZES.len() * plan.runs * servers;
    let mut step = 0;
    for size in SIZES {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); available.len()];
        for run in 0..plan.runs {
            for (i, (kind, ok)) in available.iter().enumerate() {
                if ok.is_err() {
                    continue;
                }
                progress::step(
                    format_args!(
                        "{} messages, {}, run {} of {}",
                        size_label(size),
                        kind.name(),
                        run + 1,
                        plan.runs
                    ),
                    step,
                    steps,
                );
                step += 1;
                let rate = measure(*kind, &plan, size).map_err(|e| {
                    format!("tcp-echo {} with {}: {e}", size_label(size), kind.name())
                })?;
                samples[i].push(rate);
            }
        }
        let mut medians = Vec::with_capacity(available.len());
        rep.line("");
        rep.line(format!(
            "tcp-echo/{}: {} connections, {} B messages",
            size_label(size),
            plan.conns,
            size
        ));
        rep.line(format!(
            "  {:<20} {:>12} {:>23} {:>12}",
            "impl", "kreq/s", "min..max kreq/s", "MB/s"
        ));
        for ((kind, ok), s) in available.iter().zip(samples.iter_mut()) {
            let value = ok.as_ref().ok().map(|_| median(s) / 1e3);
            medians.push((*kind, value));
            let name = format!("tcp-echo/{}/c{}", size_label(size), plan.conns);
            let note = ok.as_ref().err().cloned();
            rep.emit(&Measurement {
                suite: SUITE,
                name: format!("{name}/requests"),
                impl_name: kind.name().to_string(),
                value,
                unit: "kreq/s",
                note: note.clone(),
            });
            rep.emit(&Measurement {
                suite: SUITE,
                name: format!("{name}/throughput"),
                impl_name: kind.name().to_string(),
                value: value.map(|k| k * 1e3 * size as f64 / 1e6),
                unit: "MB/s",
                note: note.clone(),
            });
            match value {
                Some(k) => {
                    let range = format!(
                        "{:.1}..{:.1}",
                        s.first().copied().unwrap_or(f64::NAN) / 1e3,
                        s.last().copied().unwrap_or(f64::NAN) / 1e3
                    );
                    rep.line(format!(
                        "  {:<20} {:>12.1} {:>23} {:>12.1}",
                        kind.name(),
                        k,
                        range,
                        k * 1e3 * size as f64 / 1e6
                    ));
                }
                None => rep.line(format!(
                    "  {:<20} {:>12}   ({})",
                    kind.name(),
                    "-",
                    note.as_deref().unwrap_or("not measured")
                )),
            }
        }
        let of = |k: Kind| medians.iter().find(|m| m.0 == k).and_then(|m| m.1);
        for (hooked, net) in [
            (Kind::WeftHooked, Kind::WeftUring),
            (Kind::WeftHookedThreads, Kind::WeftThreads),
        ] {
            if let (Some(h), Some(n)) = (of(hooked), of(net)) {
                super::print_target(
                    rep,
                    &format!(
                        "{} (std::net, hooked) within 10% of {} (weft's net) at {}",
                        hooked.name(),
                        net.name(),
                        size_label(size)
                    ),
                    &format!("{:.2}x requests/s", h / n),
                    Some(h >= 0.9 * n),
                );
            }
        }
        for weft in [Kind::WeftUring, Kind::WeftThreads] {
            for peer in [Kind::PthreadPerConn, Kind::EpollLoop] {
                if let (Some(w), Some(p)) = (of(weft), of(peer)) {
                    rep.line(format!(
                        "  ratio {} / {}: {:.2}x requests/s (> 1: weft faster)",
                        weft.name(),
                        peer.name(),
                        w / p
                    ));
                }
            }
        }
    }
    Ok(())
}

/// "64B", "16KiB".
fn size_label(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{}KiB", size / 1024)
    } else {
        format!("{size}B")
    }
}

/// One run: starts the server, drives it, stops it; requests per second.
fn measure(kind: Kind, plan: &Plan, size: usize) -> Result<f64, String> {
    let server = kind.start()?;
    let driven = drive(server.addr, plan, size);
    // Stop the server even if the client failed; the client's error comes first.
    let stopped = (server.stop)();
    let rate = driven?;
    stopped?;
    Ok(rate)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

// ---------------------------------------------------------------------------------
// The client.

/// One client connection and its request in flight.
struct ClientConn {
    id: u64,
    stream: StdStream,
    seq: u64,
    /// The request; kept to check the echo.
    msg: Vec<u8>,
    /// Where the echo is read.
    back: Vec<u8>,
}

impl ClientConn {
    fn connect(addr: SocketAddr, id: u64, size: usize) -> Result<ClientConn, String> {
        let e = |what: &str, e: io::Error| format!("client connection {id}: {what}: {e}");
        let stream = StdStream::connect(addr).map_err(|x| e("connect", x))?;
        stream.set_nodelay(true).map_err(|x| e("TCP_NODELAY", x))?;
        stream
            .set_read_timeout(Some(CLIENT_TIMEOUT))
            .map_err(|x| e("read timeout", x))?;
        stream
            .set_write_timeout(Some(CLIENT_TIMEOUT))
            .map_err(|x| e("write timeout", x))?;
        // A pattern that differs between connections and along the message.
        let msg = (0..size)
            .map(|i| (i as u64).wrapping_mul(7).wrapping_add(id.wrapping_mul(13)) as u8)
            .collect();
        Ok(ClientConn {
            id,
            stream,
            seq: 0,
            msg,
            back: vec![0; size],
        })
    }

    /// Sends the next request: the sequence number and the connection id, then the
    /// connection's pattern.
    fn send(&mut self) -> Result<(), String> {
        self.seq += 1;
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&self.seq.to_le_bytes());
        head[8..].copy_from_slice(&self.id.to_le_bytes());
        let n = head.len().min(self.msg.len());
        self.msg[..n].copy_from_slice(&head[..n]);
        self.stream.write_all(&self.msg).map_err(|e| {
            format!(
                "client connection {}: sending request {}: {e}",
                self.id, self.seq
            )
        })
    }

    /// Reads the echo of the request in flight and checks every byte.
    fn receive(&mut self) -> Result<(), String> {
        self.stream.read_exact(&mut self.back).map_err(|e| {
            format!(
                "client connection {}: reading the echo of request {}: {e}",
                self.id, self.seq
            )
        })?;
        if self.back != self.msg {
            let at = self
                .back
                .iter()
                .zip(&self.msg)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(format!(
                "client connection {}: the echo of request {} differs from it at byte {at} of {} \
                 (sent {:#04x}, got {:#04x})",
                self.id,
                self.seq,
                self.msg.len(),
                self.msg[at],
                self.back[at]
            ));
        }
        Ok(())
    }
}

/// Drives the server at `addr` with `plan.conns` connections sending `size`-byte
/// messages; the requests per second completed in the timed window.
fn drive(addr: SocketAddr, plan: &Plan, size: usize) -> Result<f64, String> {
    let nthreads = CLIENT_THREADS.min(plan.conns).max(1);
    let mut groups: Vec<Vec<ClientConn>> = (0..nthreads).map(|_| Vec::new()).collect();
    for id in 0..plan.conns {
        groups[id % nthreads].push(ClientConn::connect(addr, id as u64, size)?);
    }
    let barrier = Barrier::new(nthreads);
    let results: Vec<Result<(u64, Duration), String>> = thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|g| {
                let barrier = &barrier;
                thread::Builder::new()
                    .name("echo-client".into())
                    .spawn_scoped(scope, move || client_thread(g, barrier, plan))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|p| {
                    Err(format!("a client thread panicked: {}", panic_text(&*p)))
                }),
                Err(e) => Err(format!("cannot start a client thread: {e}")),
            })
            .collect()
    });
    let mut rate = 0.0;
    for r in results {
        let (requests, took) = r?;
        rate += requests as f64 / took.as_secs_f64().max(1e-9);
    }
    Ok(rate)
}

/// One client thread: lockstep rounds over its connections (send on each, then read
/// each echo) until the timed window is over; the requests completed in the window and
/// its length. The connections close when it returns, with no request in flight.
fn client_thread(
    mut conns: Vec<ClientConn>,
    barrier: &Barrier,
    plan: &Plan,
) -> Result<(u64, Duration), String> {
    // All threads start their rounds together (connecting was done before).
    barrier.wait();
    let warm_end = Instant::now() + plan.warmup;
    let mut since: Option<Instant> = None;
    let mut requests = 0u64;
    loop {
        let now = Instant::now();
        match since {
            None if now >= warm_end => since = Some(now),
            Some(t) if now >= t + plan.window => return Ok((requests, now - t)),
            _ => {}
        }
        for c in conns.iter_mut() {
            c.send()?;
        }
        for c in conns.iter_mut() {
            c.receive()?;
        }
        if since.is_some() {
            requests += conns.len() as u64;
        }
    }
}

// ---------------------------------------------------------------------------------
// The servers.

/// A running server: where it listens and how to stop it (after the clients closed
/// their connections). Stopping joins every thread the server started.
struct Server {
    addr: SocketAddr,
    stop: Box<dyn FnOnce() -> Result<(), String>>,
}

/// Wakes an accept loop blocked in accept, so that it sees its stop flag. An error
/// means the loop has already ended (its own error is reported by its join).
fn wake_acceptor(addr: SocketAddr) {
    let _ = StdStream::connect(addr);
}

/// The weft server: a green thread accepting, a green thread per connection.
fn start_weft(backend: IoBackend) -> Result<Server, String> {
    let rt = Runtime::builder()
        .io_backend(backend)
        .build()
        .map_err(|e| format!("cannot start a weft runtime on {}: {e}", backend.name()))?;
    let listener = weft_runtime::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("weft server: bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("weft server: local_addr: {e}"))?;
    let accept = move || {
        let (s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        Ok(s)
    };
    Ok(green_server(rt, addr, "weft", accept, weft_echo, ()))
}

/// A server of green threads on `rt`, listening at `addr`: a green thread accepting
/// with `accept`, a green thread per connection running `serve`. Stopping it sets a
/// flag, wakes the accept, joins it and drops the runtime, then `keep`.
fn green_server<S: Send + 'static>(
    rt: Runtime,
    addr: SocketAddr,
    what: &'static str,
    mut accept: impl FnMut() -> io::Result<S> + Send + 'static,
    serve: fn(S),
    keep: impl Sized + 'static,
) -> Server {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let acceptor = rt.spawn(move || -> io::Result<()> {
        loop {
            let s = accept()?;
            if stop2.load(Ordering::Acquire) {
                return Ok(());
            }
            weft_runtime::spawn(move || serve(s));
        }
    });
    Server {
        addr,
        stop: Box::new(move || {
            stop.store(true, Ordering::Release);
            wake_acceptor(addr);
            let r = match acceptor.join() {
                Ok(r) => r.map_err(|e| format!("{what} accept loop: {e}")),
                Err(p) => Err(format!("{what} accept loop panicked: {}", panic_text(&*p))),
            };
            // The connections' green threads end at the clients' end of stream; the
            // drop waits for the workers (and unwinds anything still parked).
            drop(rt);
            drop(keep);
            r
        }),
    }
}

/// A weft connection: read what is there, write it back, until end of stream. Errors
/// end the connection; the client reports them.
fn weft_echo(mut s: weft_runtime::net::TcpStream) {
    let mut buf = vec![0u8; SERVER_BUF];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// The hooked server: `std::net` on green threads, its blocking calls parked by the
/// system-call layer, which this binary links and turns on for the server's life (off
/// again when it stops; the client's calls, on OS threads, are the C library's either
/// way).
fn start_hooked(backend: IoBackend) -> Result<Server, String> {
    let on = HookOn::new();
    let started = (|| -> Result<_, String> {
        let rt = Runtime::builder()
            .io_backend(backend)
            .build()
            .map_err(|e| format!("cannot start a weft runtime on {}: {e}", backend.name()))?;
        let listener =
            StdListener::bind("127.0.0.1:0").map_err(|e| format!("hooked server: bind: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("hooked server: local_addr: {e}"))?;
        Ok((rt, listener, addr))
    })();
    let (rt, listener, addr) = started?;
    let accept = move || {
        let (s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        Ok(s)
    };
    Ok(green_server(rt, addr, "hooked", accept, pthread_echo, on))
}

/// The system-call layer on while one is alive (several hooked servers may run at once:
/// the unit tests of this file run side by side).
struct HookOn;

static HOOK_ON: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

impl HookOn {
    fn new() -> HookOn {
        let mut n = HOOK_ON.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        weft_hook::set_enabled(true);
        HookOn
    }
}

impl Drop for HookOn {
    fn drop(&mut self) {
        let mut n = HOOK_ON.lock().unwrap_or_else(|e| e.into_inner());
        *n -= 1;
        if *n == 0 {
            weft_hook::set_enabled(false);
        }
    }
}

/// The pthread server: an OS thread accepting, an OS thread per connection.
fn start_pthread() -> Result<Server, String> {
    let listener =
        StdListener::bind("127.0.0.1:0").map_err(|e| format!("pthread server: bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("pthread server: local_addr: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let acceptor = thread::Builder::new()
        .name("echo-pthread-accept".into())
        .spawn(move || -> io::Result<()> {
            let mut conns = Vec::new();
            let r = (|| loop {
                let (s, _) = listener.accept()?;
                if stop2.load(Ordering::Acquire) {
                    return Ok(());
                }
                s.set_nodelay(true)?;
                conns.push(
                    thread::Builder::new()
                        .name("echo-pthread-conn".into())
                        .spawn(move || pthread_echo(s))?,
                );
            })();
            for c in conns {
                let _ = c.join();
            }
            r
        })
        .map_err(|e| format!("pthread server: cannot start the accept thread: {e}"))?;
    Ok(Server {
        addr,
        stop: Box::new(move || {
            stop.store(true, Ordering::Release);
            wake_acceptor(addr);
            match acceptor.join() {
                Ok(r) => r.map_err(|e| format!("pthread accept loop: {e}")),
                Err(p) => Err(format!("pthread accept loop panicked: {}", panic_text(&*p))),
            }
        }),
    })
}

/// A pthread connection: as [`weft_echo`], on std's blocking socket.
fn pthread_echo(mut s: StdStream) {
    let mut buf = vec![0u8; SERVER_BUF];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The epoll server: one thread, level-triggered epoll, stopped through an eventfd.
fn start_epoll() -> Result<Server, String> {
    let listener =
        StdListener::bind("127.0.0.1:0").map_err(|e| format!("epoll server: bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("epoll server: local_addr: {e}"))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("epoll server: O_NONBLOCK: {e}"))?;
    // SAFETY: eventfd has no memory arguments; it returns a new descriptor or -1.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if efd < 0 {
        return Err(format!(
            "epoll server: eventfd: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: `efd` is a fresh descriptor nothing else owns.
    let stopper = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
    let stopper2 = stopper.clone();
    let server = thread::Builder::new()
        .name("echo-epoll".into())
        .spawn(move || epoll_loop(listener, &stopper2))
        .map_err(|e| format!("epoll server: cannot start its thread: {e}"))?;
    Ok(Server {
        addr,
        stop: Box::new(move || {
            let one = 1u64.to_ne_bytes();
            // The write cannot fail while the loop runs (the counter is far from full);
            // a loop that has already ended reports its own error through the join.
            // SAFETY: writes 8 bytes from a local array to the eventfd, which `stopper`
            // keeps open.
            let _ = unsafe { libc::write(stopper.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            match server.join() {
                Ok(r) => r.map_err(|e| format!("epoll loop: {e}")),
                Err(p) => Err(format!("epoll loop panicked: {}", panic_text(&*p))),
            }
        }),
    })
}

/// An epoll instance.
struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: no memory arguments; returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call.
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits for events (no timeout); the number filled in (0 after a signal).
    fn wait(&self, events: &mut [libc::epoll_event]) -> io::Result<usize> {
        let max = events.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: the kernel writes at most `max` events into `events`.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, -1) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }
}

const EV_IN: u32 = libc::EPOLLIN as u32;
const EV_OUT: u32 = libc::EPOLLOUT as u32;
/// Tokens of the listener and the stop eventfd; connections use their slot index.
const TOKEN_LISTENER: u64 = u64::MAX;
const TOKEN_STOP: u64 = u64::MAX - 1;

/// An epoll connection: its buffer holds the echo not yet written, `buf[start..end]`.
struct EpollConn {
    stream: StdStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Registered for EPOLLOUT (an echo is partly written) rather than EPOLLIN.
    writing: bool,
}

impl EpollConn {
    /// Handles readiness: reads if nothing is pending, writes what is pending, and
    /// switches between EPOLLIN and EPOLLOUT. False: close the connection.
    fn ready(&mut self, ep: &Epoll, token: u64) -> io::Result<bool> {
        if self.start == self.end {
            match (&self.stream).read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) =>
                {
                    return Ok(true)
                }
                Err(_) => return Ok(false),
            }
        }
        while self.start < self.end {
            match (&self.stream).write(&self.buf[self.start..self.end]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.start += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(false),
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let writing = self.start < self.end;
        if writing != self.writing {
            let events = if writing { EV_OUT } else { EV_IN };
            ep.modify(self.stream.as_raw_fd(), events, token)?;
            self.writing = writing;
        }
        Ok(true)
    }
}

fn epoll_loop(listener: StdListener, stopper: &OwnedFd) -> io::Result<()> {
    let ep = Epoll::new()?;
    ep.add(listener.as_raw_fd(), EV_IN, TOKEN_LISTENER)?;
    ep.add(stopper.as_raw_fd(), EV_IN, TOKEN_STOP)?;
    let mut conns: Vec<Option<EpollConn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    loop {
        let n = ep.wait(&mut events)?;
        for ev in &events[..n] {
            // By value: the struct is packed on x86-64.
            let token = ev.u64;
            match token {
                TOKEN_STOP => return Ok(()),
                TOKEN_LISTENER => loop {
                    let s = match listener.accept() {
                        Ok((s, _)) => s,
                        Err(e) => match e.kind() {
                            io::ErrorKind::WouldBlock => break,
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => {
                                continue
                            }
                            _ => return Err(e),
                        },
                    };
                    s.set_nonblocking(true)?;
                    s.set_nodelay(true)?;
                    let slot = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    ep.add(s.as_raw_fd(), EV_IN, slot as u64)?;
                    conns[slot] = Some(EpollConn {
                        stream: s,
                        buf: vec![0; SERVER_BUF].into_boxed_slice(),
                        start: 0,
                        end: 0,
                        writing: false,
                    });
                },
                slot => {
                    let slot = slot as usize;
                    // A slot closed earlier in this batch (and maybe reused): a spurious
                    // wake-up at worst, which the nonblocking calls absorb.
                    let keep = match conns.get_mut(slot).and_then(Option::as_mut) {
                        Some(c) => c.ready(&ep, slot as u64)?,
                        None => true,
                    };
                    if !keep {
                        if let Some(c) = conns[slot].take() {
                            ep.delete(c.stream.as_raw_fd())?;
                            free.push(slot);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every server echoes every byte (the client checks them; a difference is an
    /// error), in quick mode, with JSON lines (kept, not printed): one requests and one
    /// throughput line per server and size.
    #[test]
    fn quick_run_every_server_echoes_exactly() {
        let mut rep = Reporter::kept(true);
        run(&mut rep, true).unwrap();
        let rows: Vec<serde_json::Value> = rep
            .lines()
            .iter()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!rows.is_empty(), "no JSON line: {:?}", rep.lines());
        for r in &rows {
            assert!(r["value"].as_f64().unwrap() > 0.0, "{r}");
            let name = r["name"].as_str().unwrap();
            assert!(name.starts_with("tcp-echo/"), "{r}");
        }
    }

    /// Each server, driven directly: requests complete, at both sizes.
    #[test]
    fn each_server_serves_both_sizes() {
        let plan = Plan {
            conns: 3,
            runs: 1,
            window: Duration::from_millis(20),
            warmup: Duration::from_millis(2),
        };
        for kind in Kind::ALL {
            if kind.uring()
                && Runtime::builder()
                    .workers(1)
                    .io_backend(IoBackend::Uring)
                    .build()
                    .is_err()
            {
                continue;
            }
            for size in SIZES {
                let rate = measure(kind, &plan, size).unwrap();
                assert!(rate > 0.0, "{} {size}: {rate}", kind.name());
            }
        }
    }

    /// The client's check works: a server that changes one byte is an error.
    #[test]
    fn a_corrupted_echo_is_an_error() {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            s.read_exact(&mut buf).unwrap();
            buf[40] ^= 1;
            s.write_all(&buf).unwrap();
        });
        let plan = Plan {
            conns: 1,
            runs: 1,
            window: Duration::from_millis(50),
            warmup: Duration::ZERO,
        };
        let err = drive(addr, &plan, 64).unwrap_err();
        assert!(err.contains("differs from it at byte 40"), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(64), "64B");
        assert_eq!(size_label(16 * 1024), "16KiB");
        assert_eq!(size_label(1000), "1000B");
    }

    /// The full benchmark, release figures: `cargo test --release -p weft-cli --bins
    /// echo -- --ignored --nocapture`.
    #[test]
    #[ignore = "the full echo benchmark (minutes, prints its tables): run it by hand for figures"]
    fn full_run() {
        let mut rep = Reporter::new(false);
        run(&mut rep, false).unwrap();
    }
}
