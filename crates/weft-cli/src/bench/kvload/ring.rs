//! The load generator's event-loop driver: one OS thread per CPU, each owning its
//! share of the connections and one io_uring, so that the generator costs the server
//! as little CPU as it can.
//!
//! Each thread runs one loop: it queues the commands of every connection that may send
//! (a `send` linked ahead of a `recv`, the send with no completion unless it fails; no
//! system call), reads the clock once, and makes one `io_uring_enter` that submits
//! them all and waits for at least one completion; it reads the clock again and
//! handles every completion: a `recv` appends bytes to its connection's buffer, whose
//! whole replies are checked (the same checks as the green-thread driver's); a
//! connection whose replies are all in records its latency and gets its next command.
//! So the system calls a request are one `io_uring_enter` divided by how many replies
//! each brings, the clock is read two or three times a loop, not a request, and nothing
//! is allocated once the connections are open.
//!
//! The ring is created on its thread with `IORING_SETUP_SINGLE_ISSUER` and
//! `IORING_SETUP_DEFER_TASKRUN` when the kernel has them (6.1+): the completions' work
//! then runs in that thread's own `io_uring_enter`, not in interrupts of whatever ran.
//!
//! What is measured is the green-thread driver's (module doc of `kvload.rs`): a
//! command's latency runs from the clock read just before the `io_uring_enter` that
//! sends it (or, in the open loop, from its due time when its connection was still
//! waiting for the previous reply then) to the clock read just after the one that
//! brings its reply's last bytes. A thread waits (without spinning) in that call, with
//! the earliest due time of its waiting connections as its timeout in the open loop.

use super::{reply_len, Cmds, Histogram, Outcome, Spec};
use io_uring::{opcode, squeue, types, IoUring};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a thread waits for any completion before the run fails (as the
/// green-thread driver's read timeout).
const STALL: Duration = Duration::from_secs(30);

/// One connection of the event loop.
struct RConn {
    fd: OwnedFd,
    cmds: Cmds,
    rbuf: Vec<u8>,
    /// Bytes of `rbuf` received, and of them the replies already checked.
    filled: usize,
    at: usize,
    /// Replies checked of the commands in flight.
    answered: usize,
    /// Commands in flight (sent or being sent).
    busy: bool,
    /// The in-flight commands' latency start; in the open loop, the next command's due
    /// time while the connection waits for it.
    t0: Instant,
    /// Open loop: this connection's index among all, its commands sent so far and its
    /// share of the commands.
    index: usize,
    k: u64,
    mine: u64,
    /// No more commands to send.
    finished: bool,
}

/// A thread's share of the run: its histogram and counts.
#[derive(Default)]
struct Share {
    hist: Histogram,
    done: u64,
    late: u64,
}

/// Runs `spec` on one thread per CPU with a ring each; `Ok(None)` when this kernel
/// gives the process no io_uring (the caller then uses the green-thread driver).
pub(super) fn run(spec: &Spec) -> Result<Option<Outcome>, String> {
    match IoUring::new(8) {
        Ok(r) if r.params().is_feature_skip_cqe_on_success() && r.params().is_feature_ext_arg() => {
        }
        _ => return Ok(None),
    }
    let threads = std::env::var("WEFT_KV_LOAD_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(super::super::nproc)
        .clamp(1, spec.conns.max(1));
    let cdf = (spec.dist == super::Dist::Zipf).then(|| Arc::new(super::zipf_cdf(spec.keys)));
    let mut per: Vec<Vec<RConn>> = (0..threads).map(|_| Vec::new()).collect();
    for i in 0..spec.conns {
        let fd = connect(spec)?;
        let conns = spec.conns as u64;
        per[i % threads].push(RConn {
            fd,
            cmds: Cmds::new(spec, i, &cdf),
            rbuf: vec![0; 16 << 10],
            filled: 0,
            at: 0,
            answered: 0,
            busy: false,
            t0: Instant::now(),
            index: i,
            k: 0,
            mine: spec.requests / conns + u64::from((i as u64) < spec.requests % conns),
            finished: false,
        });
    }
    let claimed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start_at = Instant::now() + Duration::from_millis(20);
    let mut handles = Vec::with_capacity(threads);
    for (t, conns) in per.into_iter().enumerate() {
        let (spec, claimed, stop) = (spec.clone(), claimed.clone(), stop.clone());
        let h = std::thread::Builder::new()
            .name(format!("kv-load {t}"))
            .spawn(move || {
                let r = Loop::new(&spec, conns, &claimed, &stop, start_at)
                    .and_then(|mut l| l.run().map(|()| std::mem::take(&mut l.share)));
                if r.is_err() {
                    stop.store(true, Relaxed);
                }
                r
            })
            .map_err(|e| format!("cannot start a load thread: {e}"))?;
        handles.push(h);
    }
    let mut total = Share::default();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(s)) => {
                total.hist.merge(&s.hist);
                total.done += s.done;
                total.late += s.late;
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert("a load thread panicked".to_string());
            }
        }
    }
    let secs = start_at.elapsed().as_secs_f64();
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok(Some(Outcome {
        requests: total.done,
        secs,
        hist: total.hist,
        late: total.late,
    }))
}

/// A blocking connection to the server (the ring does the I/O).
fn connect(spec: &Spec) -> Result<OwnedFd, String> {
    let err = |e: std::io::Error| format!("cannot connect to {}: {e}", spec.addr);
    if spec.tcp {
        let s = std::net::TcpStream::connect(spec.addr.as_str()).map_err(err)?;
        let _ = s.set_nodelay(true);
        Ok(s.into())
    } else {
        Ok(std::os::unix::net::UnixStream::connect(&spec.addr)
            .map_err(err)?
            .into())
    }
}

/// Open loop: how long before its due time a command may go with one that is due
/// (one wake-up for several: each costs the VM's CPUs 10-20 us, docs/benchmarks.md;
/// about the timer slack by which a sleeping thread's wake-up may come late).
const EARLY: Duration = Duration::from_micros(50);

/// `user_data` of a connection's operations: its index and which one.
const SEND: u64 = 0;
const RECV: u64 = 1;

/// One thread's event loop.
struct Loop<'a> {
    spec: &'a Spec,
    ring: IoUring,
    conns: Vec<RConn>,
    claimed: &'a AtomicU64,
    stop: &'a AtomicBool,
    start: Instant,
    share: Share,
    /// Receives submitted and not completed (each connection's send is linked ahead of
    /// its receive, and has a completion only when it fails).
    inflight: usize,
    /// Connections whose commands go in the next `io_uring_enter`, their latency
    /// counted from it.
    fresh: Vec<usize>,
    /// The completions of one `io_uring_enter` (reused).
    batch: Vec<(u64, i32)>,
}

impl<'a> Loop<'a> {
    fn new(
        spec: &'a Spec,
        conns: Vec<RConn>,
        claimed: &'a AtomicU64,
        stop: &'a AtomicBool,
        start: Instant,
    ) -> Result<Loop<'a>, String> {
        // Two operations a connection at most, and room for a batch beside them.
        let conns_len = conns.len();
        let entries = (2 * conns_len as u32 + 8).next_power_of_two();
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| IoUring::new(entries))
            .map_err(|e| format!("cannot create the load thread's io_uring: {e}"))?;
        Ok(Loop {
            spec,
            ring,
            conns,
            claimed,
            stop,
            start,
            fresh: Vec::with_capacity(conns_len),
            batch: Vec::with_capacity(2 * conns_len),
            share: Share::default(),
            inflight: 0,
        })
    }

    fn run(&mut self) -> Result<(), String> {
        let now = Instant::now();
        if self.start > now {
            std::thread::sleep(self.start - now);
        }
        let open = self.spec.rate.is_some();
        for c in 0..self.conns.len() {
            if open {
                self.plan_due(c);
            } else if self.claim(c) {
                self.send(c, true)?;
            }
        }
        let mut last_progress = Instant::now();
        loop {
            // Open loop: the waiting connections whose command is due go now, and with
            // them those due within `EARLY` (one wake-up for several).
            let mut next_due: Option<Instant> = None;
            if open {
                let now = Instant::now();
                let idle = |c: &RConn| !c.busy && !c.finished;
                let horizon = if self.conns.iter().any(|c| idle(c) && c.t0 <= now) {
                    now + EARLY
                } else {
                    now
                };
                for c in 0..self.conns.len() {
                    let conn = &self.conns[c];
                    if !idle(conn) {
                        continue;
                    }
                    if conn.t0 <= horizon {
                        self.send(c, true)?;
                    } else {
                        next_due = Some(next_due.map_or(conn.t0, |d| d.min(conn.t0)));
                    }
                }
            }
            if self.inflight == 0 && next_due.is_none() {
                return Ok(());
            }
            // Everything queued goes in this one call, which also waits; the commands
            // it sends count from here.
            let t_send = Instant::now();
            for &c in &self.fresh {
                self.conns[c].t0 = t_send;
            }
            self.fresh.clear();
            let wait = next_due.map_or(STALL, |d| d.saturating_duration_since(t_send));
            let ts = types::Timespec::from(wait);
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                    ) => {}
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            let t_back = Instant::now();
            // Completions are copied out first: handling one queues new entries.
            let mut batch = std::mem::take(&mut self.batch);
            batch.extend(self.ring.completion().map(|e| (e.user_data(), e.result())));
            let any = !batch.is_empty();
            for &(ud, res) in &batch {
                let c = (ud >> 1) as usize;
                if ud & 1 == SEND {
                    // Only a send that failed (or was cut short) has a completion.
                    let why = if res < 0 {
                        std::io::Error::from_raw_os_error(-res).to_string()
                    } else {
                        format!("{res} bytes of {} sent", self.conns[c].cmds.wbuf.len())
                    };
                    return Err(format!("cannot send to the server: {why}"));
                }
                self.inflight -= 1;
                self.received(c, res, t_back)?;
            }
            batch.clear();
            self.batch = batch;
            if any {
                last_progress = t_back;
            } else if self.inflight > 0 && t_back - last_progress > STALL {
                return Err(format!("no reply from the server in {} s", STALL.as_secs()));
            }
        }
    }

    /// Closed loop: claims the connection's next commands, or finishes it.
    fn claim(&mut self, c: usize) -> bool {
        let p = self.spec.pipeline as u64;
        let from = self.claimed.fetch_add(p, Relaxed);
        if from >= self.spec.requests || self.stop.load(Relaxed) {
            self.conns[c].finished = true;
            return false;
        }
        let n = p.min(self.spec.requests - from);
        for _ in 0..n {
            self.conns[c].cmds.queue(self.spec.op);
        }
        true
    }

    /// Open loop: sets the connection's next due time, or finishes it.
    fn plan_due(&mut self, c: usize) {
        let rate = self.spec.rate.unwrap_or(1.0);
        let conn = &mut self.conns[c];
        if conn.k >= conn.mine || self.stop.load(Relaxed) {
            conn.finished = true;
            return;
        }
        let gap = self.spec.conns as f64 / rate;
        let offset = conn.index as f64 / rate;
        conn.t0 = self.start + Duration::from_secs_f64(offset + conn.k as f64 * gap);
    }

    /// Queues the connection's commands (in `cmds.wbuf`; in the open loop its next
    /// one is queued here) and the receive of their replies. `stamp`: their latency
    /// counts from the `io_uring_enter` that sends them (else from `t0` as it is).
    fn send(&mut self, c: usize, stamp: bool) -> Result<(), String> {
        if stamp {
            self.fresh.push(c);
        }
        if self.spec.rate.is_some() {
            self.conns[c].cmds.queue(self.spec.op);
            self.conns[c].k += 1;
        }
        let conn = &mut self.conns[c];
        conn.busy = true;
        conn.answered = 0;
        let b = &conn.cmds.wbuf;
        // All of it before the link goes on (MSG_WAITALL); no completion when it
        // succeeds: the receive's is the one that matters.
        let e = opcode::Send::new(types::Fd(conn.fd.as_raw_fd()), b.as_ptr(), b.len() as u32)
            .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
            .build()
            .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
            .user_data(((c as u64) << 1) | SEND);
        self.push(e, false)?;
        self.push_recv(c)
    }

    fn push_recv(&mut self, c: usize) -> Result<(), String> {
        let conn = &mut self.conns[c];
        if conn.filled == conn.rbuf.len() {
            if conn.at > 0 {
                conn.rbuf.copy_within(conn.at..conn.filled, 0);
                conn.filled -= conn.at;
                conn.at = 0;
            } else {
                conn.rbuf.resize(conn.rbuf.len() * 2, 0);
            }
        }
        let b = &mut conn.rbuf[conn.filled..];
        let e = opcode::Recv::new(
            types::Fd(conn.fd.as_raw_fd()),
            b.as_mut_ptr(),
            b.len() as u32,
        )
        .build()
        .user_data(((c as u64) << 1) | RECV);
        self.push(e, true)
    }

    /// Pushes `e` (a receive when `recv`: counted in flight).
    fn push(&mut self, e: squeue::Entry, recv: bool) -> Result<(), String> {
        // SAFETY: the buffer the entry points to is its connection's (`cmds.wbuf` or
        // `rbuf`), neither touched nor moved while the operation is in flight (each
        // connection has at most one send and one receive in flight, the send linked
        // ahead of the receive, and its buffers change only once the receive's
        // completion is handled); the connections live until the loop returns, and
        // the loop returns only with nothing in flight (or on an error, when they are
        // leaked: see `Drop`). A send and its receive go in the same submission: the
        // room for both is made before the send is pushed.
        let room = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if !recv && room < 2 {
            self.ring
                .submit()
                .map_err(|e| format!("io_uring_enter: {e}"))?;
        }
        while unsafe { self.ring.submission().push(&e) }.is_err() {
            self.ring
                .submit()
                .map_err(|e| format!("io_uring_enter: {e}"))?;
        }
        self.inflight += usize::from(recv);
        Ok(())
    }

    /// A receive completed with `res` (read at `now`).
    fn received(&mut self, c: usize, res: i32, now: Instant) -> Result<(), String> {
        let op = self.spec.op;
        let conn = &mut self.conns[c];
        if res < 0 {
            return Err(format!(
                "reading a reply: {}",
                std::io::Error::from_raw_os_error(-res)
            ));
        }
        if res == 0 {
            return Err("the server closed the connection".into());
        }
        conn.filled += res as usize;
        while conn.answered < conn.cmds.sent.len() {
            let Some(len) = reply_len(&conn.rbuf[conn.at..conn.filled]) else {
                break;
            };
            let len = len?;
            let (i, at) = (conn.answered, conn.at);
            conn.cmds.check(op, i, &conn.rbuf[at..at + len])?;
            conn.at += len;
            conn.answered += 1;
        }
        if conn.answered < conn.cmds.sent.len() {
            return self.push_recv(c);
        }
        if conn.at != conn.filled {
            return Err("the server sent more replies than commands".into());
        }
        self.next(c, now)
    }

    /// The connection's replies are all in (`now`: the return of the `io_uring_enter`
    /// that brought the last of them): records the latency, starts the next command.
    fn next(&mut self, c: usize, now: Instant) -> Result<(), String> {
        let conn = &mut self.conns[c];
        let n = conn.cmds.sent.len() as u64;
        let ns = now.saturating_duration_since(conn.t0).as_nanos() as u64;
        for _ in 0..n {
            self.share.hist.record(ns);
        }
        self.share.done += n;
        conn.busy = false;
        conn.cmds.sent.clear();
        conn.cmds.wbuf.clear();
        conn.filled = 0;
        conn.at = 0;
        if self.spec.rate.is_some() {
            self.plan_due(c);
            let conn = &mut self.conns[c];
            if !conn.finished && conn.t0 <= now {
                // The previous reply came after this command was due: the server's
                // delay, counted from the due time.
                self.share.late += 1;
                return self.send(c, false);
            }
            return Ok(());
        }
        if self.claim(c) {
            return self.send(c, true);
        }
        Ok(())
    }
}

impl Drop for Loop<'_> {
    fn drop(&mut self) {
        // On an error, operations may still be in flight on the connections' buffers,
        // and the kernel may write into them until it cancels them (the ring's drop):
        // the buffers are leaked rather than freed (the process is ending).
        if self.inflight > 0 {
            std::mem::forget(std::mem::take(&mut self.conns));
        }
    }
}
