//! `weft bench kv`'s own RESP load generator: `weft bench-worker kv-load`.
//!
//! Many connections, each sending GET or SET commands on keys `key:000000`.. of a
//! populated key space, `pipeline` commands at a time, and reading their replies.
//! Every GET's value is checked (a key's value is a function of the key, as in the
//! client-processes table: [`super::kv`]'s `key_value`), so a wrong reply is an error,
//! not a figure.
//!
//! Two drivers run the connections; both measure the same thing:
//!
//! - **event loop** (`ring.rs`, the default): one OS thread per CPU, each owning its
//!   share of the connections and one io_uring, every connection's send and receive
//!   of a turn submitted in one `io_uring_enter` that also waits. It leaves the
//!   server the most CPU time (docs/benchmarks.md, 2026-11-29: 20-40% less CPU time a
//!   request than the green-thread driver, a tenth of its system calls; what is left
//!   is nearly all the kernel's socket work). `WEFT_KV_LOAD_THREADS=N` runs N threads
//!   instead of one per CPU.
//! - **green threads** (`WEFT_KV_LOAD_DRIVER=green`, or when the kernel gives the
//!   process no io_uring): a green thread a connection on a weft runtime of one worker
//!   per CPU (the connections spread over the workers round-robin; the workers do not
//!   spin when idle, so the generator leaves the server the CPU time it does not use).
//!
//! Two ways to drive the load:
//!
//! - **Closed loop** (no `--rate`): each connection sends its next pipeline as soon as
//!   the previous one is answered, until `requests` commands have been sent in all:
//!   the most the server answers with that many connections (as redis-benchmark).
//! - **Open loop** (`--rate R`): commands are due at a fixed total rate R, one command
//!   at a time per connection, connection `i`'s `k`-th command at
//!   `start + (k + i / C) * C / R`. A command's latency counts from when it was due
//!   whenever the connection was still waiting for the previous reply at that time (so a server
//!   that falls behind is charged the queueing it causes: no coordinated omission),
//!   and from its send otherwise (a timer that wakes late is the generator's delay,
//!   not the server's). The event loop sends a command up to 50 us before it is due
//!   together with one that is due (one wake-up for several); its latency then counts
//!   from that send.
//!
//! Keys are drawn uniformly or from a Zipf distribution (exponent 0.99, the most
//! popular key first: a few keys take most of the traffic), from a seed per
//! connection. Latencies go to a histogram of log-linear buckets (1/64 relative
//! width: under 1.6% error) per connection, merged at the end; the reported
//! quantiles are by nearest rank, each the upper edge of its bucket.
//!
//! The result is one JSON line: `{"requests":N,"secs":S,"rps":R,"p50_us":..,
//! "p99_us":..,"p999_us":..,"max_us":..,"late":L}` (`late`: open loop only, the
//! commands sent after their due time because the previous reply had not come).

mod ring;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the generator sends.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadOp {
    /// GET of a key (its value checked).
    Get,
    /// SET of a key to its value.
    Set,
}

impl LoadOp {
    pub fn name(self) -> &'static str {
        match self {
            LoadOp::Get => "GET",
            LoadOp::Set => "SET",
        }
    }
}

/// How keys are drawn.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Dist {
    /// Every key alike.
    Uniform,
    /// Zipf, exponent 0.99: key `k` drawn in proportion to `1 / (k + 1)^0.99`.
    Zipf,
}

/// One load run.
#[derive(Clone, Debug)]
pub struct Spec {
    /// A Unix socket's path, or `host:port` (TCP).
    pub addr: String,
    pub tcp: bool,
    pub conns: usize,
    pub pipeline: usize,
    pub requests: u64,
    pub op: LoadOp,
    pub dist: Dist,
    pub keys: u64,
    /// Open loop at this many commands a second in all (closed loop when `None`).
    pub rate: Option<f64>,
    pub seed: u64,
}

/// Log-linear latency histogram in nanoseconds: values below 128 have a bucket each;
/// above, each power of two is cut into 64 buckets.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const SUB: u32 = 64;
const BUCKETS: usize = (SUB as usize) * 58 + 2 * SUB as usize;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        let bits = 64 - v.leading_zeros();
        if bits <= 7 {
            return v as usize;
        }
        let shift = bits - 7;
        (shift * SUB) as usize + (v >> shift) as usize
    }

    /// The largest value of bucket `i`.
    fn upper(i: usize) -> u64 {
        if i < 2 * SUB as usize {
            return i as u64;
        }
        let shift = (i / SUB as usize - 1) as u32;
        let m = (i % SUB as usize) as u64 + SUB as u64;
        ((m + 1) << shift) - 1
    }

    pub fn record(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.total += 1;
        self.max = self.max.max(ns);
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.total += o.total;
        self.max = self.max.max(o.max);
    }

    /// The `q` quantile by nearest rank (the upper edge of its bucket, at most the
    /// maximum); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(i).min(self.max);
            }
        }
        self.max
    }
}

/// Draws keys: uniform or Zipf (a cumulative table and a binary search).
struct Keys {
    rng: u64,
    n: u64,
    cdf: Option<Arc<Vec<f64>>>,
}

impl Keys {
    fn next_u64(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn next(&mut self) -> u64 {
        let r = self.next_u64();
        match &self.cdf {
            None => r % self.n,
            Some(cdf) => {
                let u = (r >> 11) as f64 / (1u64 << 53) as f64;
                cdf.partition_point(|&c| c < u).min(self.n as usize - 1) as u64
            }
        }
    }
}

/// The Zipf distribution's cumulative table over `n` keys (exponent 0.99).
fn zipf_cdf(n: u64) -> Vec<f64> {
    let w: Vec<f64> = (0..n).map(|k| 1.0 / ((k + 1) as f64).powf(0.99)).collect();
    let sum: f64 = w.iter().sum();
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x / sum;
            acc
        })
        .collect()
}

/// The length of the first whole reply in `b`: `Some(Ok(len))`, `Some(Err)` for an
/// error reply or bytes that are not RESP, `None` when it is not whole yet. Aggregates
/// (arrays, maps, sets) are walked element by element.
fn reply_len(b: &[u8]) -> Option<Result<usize, String>> {
    let line_end = |from: usize| b[from..].windows(2).position(|w| w == b"\r\n");
    let end = line_end(0)?;
    let head = &b[1..end];
    let num = || -> Result<i64, String> {
        std::str::from_utf8(head)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("a reply's length is not a number: {:?}", head))
    };
    match b.first()? {
        b'+' | b':' | b'_' | b',' | b'#' | b'(' => Some(Ok(end + 2)),
        b'-' => Some(Err(format!(
            "the server answered an error: {}",
            String::from_utf8_lossy(head)
        ))),
        b'$' | b'=' | b'!' => {
            let n = match num() {
                Ok(n) => n,
                Err(e) => return Some(Err(e)),
            };
            if n < 0 {
                return Some(Ok(end + 2));
            }
            let total = end + 2 + n as usize + 2;
            (b.len() >= total).then_some(Ok(total))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let n = match num() {
                Ok(n) => n,
                Err(e) => return Some(Err(e)),
            };
            let items = if b[0] == b'%' { 2 * n.max(0) } else { n.max(0) };
            let mut at = end + 2;
            for _ in 0..items {
                match reply_len(&b[at..])? {
                    Ok(l) => at += l,
                    Err(e) => return Some(Err(e)),
                }
            }
            Some(Ok(at))
        }
        other => Some(Err(format!("a reply starts with byte {other}, not RESP"))),
    }
}

/// A connection to the server under test, either kind.
enum Stream {
    Unix(weft_runtime::net::UnixStream),
    Tcp(weft_runtime::net::TcpStream),
}

impl Stream {
    fn connect(spec: &Spec) -> Result<Stream, String> {
        let s = if spec.tcp {
            let s = weft_runtime::net::TcpStream::connect(spec.addr.as_str())
                .map_err(|e| format!("cannot connect to {}: {e}", spec.addr))?;
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        } else {
            Stream::Unix(
                weft_runtime::net::UnixStream::connect(&spec.addr)
                    .map_err(|e| format!("cannot connect to {}: {e}", spec.addr))?,
            )
        };
        let t = Some(Duration::from_secs(30));
        let r = match &s {
            Stream::Unix(u) => u.set_read_timeout(t),
            Stream::Tcp(c) => c.set_read_timeout(t),
        };
        r.map_err(|e| format!("cannot set a read timeout: {e}"))?;
        Ok(s)
    }

    fn write_all(&self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => (&*s).write_all(b),
            Stream::Tcp(s) => (&*s).write_all(b),
        }
    }

    fn read(&self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

/// One connection's commands: its key draws, the commands queued and not yet sent,
/// and the keys of those in flight (both drivers use it).
struct Cmds {
    keys: Keys,
    wbuf: Vec<u8>,
    /// The key index of each command in flight (GETs' values are checked).
    sent: Vec<u64>,
    /// The reply a GET expects (reused).
    want: Vec<u8>,
}

/// One connection of the green-thread driver: its socket, commands and reply buffer.
struct Conn {
    s: Stream,
    cmds: Cmds,
    rbuf: Vec<u8>,
}

/// `k` as at least 6 decimal digits (zero-padded), as `format!("{k:06}")` writes it.
fn digits(k: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut n = k;
    let mut i = out.len();
    while n > 0 || out.len() - i < 6 {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    &out[i..]
}

/// Appends a RESP bulk string of `parts` joined.
fn bulk(w: &mut Vec<u8>, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let _ = write!(w, "${len}\r\n");
    for p in parts {
        w.extend_from_slice(p);
    }
    w.extend_from_slice(b"\r\n");
}

impl Cmds {
    fn new(spec: &Spec, i: usize, cdf: &Option<Arc<Vec<f64>>>) -> Cmds {
        Cmds {
            keys: Keys {
                rng: (spec.seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1,
                n: spec.keys.max(1),
                cdf: cdf.clone(),
            },
            wbuf: Vec::with_capacity(64 * spec.pipeline),
            sent: Vec::with_capacity(spec.pipeline),
            want: Vec::new(),
        }
    }

    /// Queues one command on a key drawn from the distribution (without allocating:
    /// the key and value are those of [`super::kv::key_value`]).
    fn queue(&mut self, op: LoadOp) {
        let k = self.keys.next();
        let mut d = [0u8; 20];
        let d = digits(k, &mut d);
        match op {
            LoadOp::Get => {
                self.wbuf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
                bulk(&mut self.wbuf, &[b"key:", d]);
            }
            LoadOp::Set => {
                self.wbuf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
                bulk(&mut self.wbuf, &[b"key:", d]);
                bulk(&mut self.wbuf, &[b"value-of-", d]);
            }
        }
        self.sent.push(k);
    }

    /// Checks `reply`, the whole reply to the `i`-th command in flight.
    fn check(&mut self, op: LoadOp, i: usize, reply: &[u8]) -> Result<(), String> {
        let k = self.sent[i];
        let ok = match op {
            LoadOp::Set => reply == b"+OK\r\n",
            LoadOp::Get => {
                let mut d = [0u8; 20];
                let d = digits(k, &mut d);
                self.want.clear();
                bulk(&mut self.want, &[b"value-of-", d]);
                reply == self.want.as_slice()
            }
        };
        if !ok {
            return Err(format!(
                "{} of key {k} answered {:?}",
                op.name(),
                String::from_utf8_lossy(reply)
            ));
        }
        Ok(())
    }
}

impl Conn {
    /// Sends the queued commands and reads one reply per command, checking each.
    fn round_trip(&mut self, op: LoadOp) -> Result<(), String> {
        self.s
            .write_all(&self.cmds.wbuf)
            .map_err(|e| format!("cannot send to the server: {e}"))?;
        self.cmds.wbuf.clear();
        let mut at = 0;
        let mut filled = 0;
        for i in 0..self.cmds.sent.len() {
            let len = loop {
                if let Some(r) = reply_len(&self.rbuf[at..filled]) {
                    break r?;
                }
                if filled == self.rbuf.len() {
                    if at > 0 {
                        self.rbuf.copy_within(at..filled, 0);
                        filled -= at;
                        at = 0;
                    } else {
                        self.rbuf.resize(self.rbuf.len() * 2, 0);
                    }
                }
                let n = self
                    .s
                    .read(&mut self.rbuf[filled..])
                    .map_err(|e| format!("reading a reply: {e}"))?;
                if n == 0 {
                    return Err("the server closed the connection".into());
                }
                filled += n;
            };
            self.cmds.check(op, i, &self.rbuf[at..at + len])?;
            at += len;
        }
        if at != filled {
            return Err("the server sent more replies than commands".into());
        }
        self.cmds.sent.clear();
        Ok(())
    }
}

/// What one run measured.
pub struct Outcome {
    pub requests: u64,
    pub secs: f64,
    pub hist: Histogram,
    pub late: u64,
}

impl Outcome {
    pub fn json(&self) -> String {
        let us = |q: f64| self.hist.quantile(q) as f64 / 1e3;
        format!(
            "{{\"requests\":{},\"secs\":{},\"rps\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"late\":{}}}",
            self.requests,
            self.secs,
            self.requests as f64 / self.secs.max(1e-9),
            us(0.5),
            us(0.99),
            us(0.999),
            self.hist.max as f64 / 1e3,
            self.late
        )
    }
}

/// Runs `spec`: every connection opened first, then the clock starts. The event-loop
/// driver ([`ring`]) when the kernel gives the process io_uring and
/// `WEFT_KV_LOAD_DRIVER` is not `green`, else the green-thread driver.
pub fn run(spec: Spec) -> Result<Outcome, String> {
    let green = match std::env::var("WEFT_KV_LOAD_DRIVER") {
        Ok(v) if v == "green" => true,
        Ok(v) if v.is_empty() || v == "ring" => false,
        Err(_) => false,
        Ok(v) => {
            return Err(format!(
                "WEFT_KV_LOAD_DRIVER={v:?} is not understood: use ring (the default) or green"
            ))
        }
    };
    if !green {
        if let Some(o) = ring::run(&spec)? {
            return Ok(o);
        }
    }
    run_green(spec)
}

/// Runs `spec` on a runtime of one worker per CPU, a green thread a connection.
fn run_green(spec: Spec) -> Result<Outcome, String> {
    let workers = super::nproc();
    let rt = weft_runtime::Runtime::builder()
        .workers(workers)
        .pin(false)
        // No spin when idle: the generator shares the CPUs with the server it measures,
        // and a spinning client takes CPU time from it (docs/benchmarks.md).
        .idle_spin(Duration::ZERO)
        .name("kv-load")
        .build()
        .map_err(|e| format!("cannot start the load generator's runtime: {e}"))?;
    let spec = Arc::new(spec);
    rt.block_on(move || drive(spec, workers))
}

fn drive(spec: Arc<Spec>, workers: usize) -> Result<Outcome, String> {
    let cdf = (spec.dist == Dist::Zipf).then(|| Arc::new(zipf_cdf(spec.keys)));
    let mut conns = Vec::with_capacity(spec.conns);
    for i in 0..spec.conns {
        conns.push(Conn {
            s: Stream::connect(&spec)?,
            cmds: Cmds::new(&spec, i, &cdf),
            rbuf: vec![0; 16 << 10],
        });
    }
    // Claimed commands (closed loop); the first error; the merged histogram.
    let claimed = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let merged = Arc::new(Mutex::new((Histogram::default(), 0u64, 0u64)));
    let stop = Arc::new(AtomicBool::new(false));
    let start_at = Instant::now() + Duration::from_millis(20);
    let mut handles = Vec::with_capacity(spec.conns);
    for (i, mut c) in conns.into_iter().enumerate() {
        let (spec, claimed, failed, merged, stop) = (
            spec.clone(),
            claimed.clone(),
            failed.clone(),
            merged.clone(),
            stop.clone(),
        );
        let h = weft_runtime::ThreadBuilder::new()
            .name(format!("kv-load {i}"))
            .spawn_on(i % workers, move || {
                let now = Instant::now();
                if start_at > now {
                    weft_runtime::sleep(start_at - now);
                }
                let mut hist = Histogram::default();
                let (mut done, mut late) = (0u64, 0u64);
                let r = match spec.rate {
                    None => closed_loop(&spec, &mut c, &claimed, &stop, &mut hist, &mut done),
                    Some(rate) => open_loop(
                        &spec, &mut c, i, rate, start_at, &stop, &mut hist, &mut done, &mut late,
                    ),
                };
                if let Err(e) = r {
                    stop.store(true, Relaxed);
                    failed.lock().unwrap().get_or_insert(e);
                }
                let mut m = merged.lock().unwrap();
                m.0.merge(&hist);
                m.1 += done;
                m.2 += late;
            })
            .map_err(|e| format!("cannot start a load connection: {e}"))?;
        handles.push(h);
    }
    for h in handles {
        let _ = h.join();
    }
    let secs = start_at.elapsed().as_secs_f64();
    if let Some(e) = failed.lock().unwrap().take() {
        return Err(e);
    }
    let m = merged.lock().unwrap();
    Ok(Outcome {
        requests: m.1,
        secs,
        hist: m.0.clone(),
        late: m.2,
    })
}

fn closed_loop(
    spec: &Spec,
    c: &mut Conn,
    claimed: &AtomicU64,
    stop: &AtomicBool,
    hist: &mut Histogram,
    done: &mut u64,
) -> Result<(), String> {
    let p = spec.pipeline as u64;
    loop {
        let from = claimed.fetch_add(p, Relaxed);
        if from >= spec.requests || stop.load(Relaxed) {
            return Ok(());
        }
        let n = p.min(spec.requests - from);
        for _ in 0..n {
            c.cmds.queue(spec.op);
        }
        let t0 = Instant::now();
        c.round_trip(spec.op)?;
        let ns = t0.elapsed().as_nanos() as u64;
        for _ in 0..n {
            hist.record(ns);
        }
        *done += n;
    }
}

#[allow(clippy::too_many_arguments)]
fn open_loop(
    spec: &Spec,
    c: &mut Conn,
    i: usize,
    rate: f64,
    start: Instant,
    stop: &AtomicBool,
    hist: &mut Histogram,
    done: &mut u64,
    late: &mut u64,
) -> Result<(), String> {
    let conns = spec.conns as u64;
    // This connection's share of the commands, and the gap between two of its own.
    let mine = spec.requests / conns + u64::from((i as u64) < spec.requests % conns);
    let gap = conns as f64 / rate;
    let offset = i as f64 / rate;
    for k in 0..mine {
        if stop.load(Relaxed) {
            return Ok(());
        }
        let due = start + Duration::from_secs_f64(offset + k as f64 * gap);
        let now = Instant::now();
        let from = if now < due {
            weft_runtime::sleep(due - now);
            Instant::now()
        } else {
            // The previous reply came after this command was due: the server's delay.
            *late += 1;
            due
        };
        c.cmds.queue(spec.op);
        c.round_trip(spec.op)?;
        hist.record(from.elapsed().as_nanos() as u64);
        *done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for v in [
            0u64,
            1,
            127,
            128,
            129,
            255,
            256,
            1000,
            123_456,
            10_000_000_000,
        ] {
            let i = Histogram::index(v);
            assert!(i >= last, "{v}");
            last = i;
            assert!(
                Histogram::upper(i) >= v,
                "{v}: upper {}",
                Histogram::upper(i)
            );
            assert!(
                Histogram::upper(i) as f64 <= v as f64 * 1.016 + 1.0,
                "{v}: upper {}",
                Histogram::upper(i)
            );
        }
        assert!(Histogram::index(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let mut h = Histogram::default();
        for v in 1..=100u64 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        let mut h2 = Histogram::default();
        h2.record(1_000_000);
        h.merge(&h2);
        assert_eq!(h.total, 101);
        assert_eq!(h.quantile(1.0), 1_000_000);
    }

    #[test]
    fn replies_are_measured_whole_or_not_at_all() {
        assert_eq!(reply_len(b"+OK\r\n"), Some(Ok(5)));
        assert_eq!(reply_len(b"+OK\r"), None);
        assert_eq!(reply_len(b"$3\r\nabc\r\n+OK"), Some(Ok(9)));
        assert_eq!(reply_len(b"$3\r\nab"), None);
        assert_eq!(reply_len(b"$-1\r\n"), Some(Ok(5)));
        assert_eq!(reply_len(b"*2\r\n:1\r\n$1\r\nx\r\n"), Some(Ok(15)));
        assert_eq!(reply_len(b"*2\r\n:1\r\n"), None);
        assert!(matches!(reply_len(b"-ERR no\r\n"), Some(Err(_))));
    }

    #[test]
    fn keys_and_values_are_the_tables() {
        for k in [0u64, 7, 99_999, 1_234_567] {
            let (key, value) = super::super::kv::key_value(k);
            let mut d = [0u8; 20];
            let d = digits(k, &mut d);
            assert_eq!([b"key:".as_slice(), d].concat(), key.as_bytes());
            assert_eq!([b"value-of-".as_slice(), d].concat(), value.as_bytes());
        }
        let mut w = Vec::new();
        bulk(&mut w, &[b"ab", b"c"]);
        assert_eq!(w, b"$3\r\nabc\r\n");
    }

    /// A stand-in server on a Unix socket in a fresh directory: answers `GET key:D`
    /// with `value-of-D` (or, when `wrong`, another value) and SET with `+OK`; counts
    /// the commands it answered.
    fn fake_server(wrong: bool) -> (tempdir::Dir, Arc<AtomicU64>) {
        use std::io::{BufRead, BufReader, Read};
        let dir = tempdir::Dir::new();
        let l = std::os::unix::net::UnixListener::bind(dir.path.join("s")).unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let n = count.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let n = n.clone();
                std::thread::spawn(move || {
                    let mut w = s.try_clone().unwrap();
                    let mut r = BufReader::new(s);
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let argc: usize = line[1..].trim().parse().unwrap();
                        let mut args = Vec::new();
                        for _ in 0..argc {
                            line.clear();
                            r.read_line(&mut line).unwrap();
                            let len: usize = line[1..].trim().parse().unwrap();
                            let mut b = vec![0; len + 2];
                            r.read_exact(&mut b).unwrap();
                            b.truncate(len);
                            args.push(b);
                        }
                        let reply = if args[0] == b"GET" {
                            let d = &args[1][4..];
                            let v = [
                                if wrong {
                                    b"value-of-x".as_slice()
                                } else {
                                    b"value-of-"
                                },
                                d,
                            ]
                            .concat();
                            let mut o = Vec::new();
                            bulk(&mut o, &[&v]);
                            o
                        } else {
                            b"+OK\r\n".to_vec()
                        };
                        n.fetch_add(1, Relaxed);
                        if w.write_all(&reply).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (dir, count)
    }

    mod tempdir {
        /// A fresh directory under the system's temporary one, removed on drop.
        pub struct Dir {
            pub path: std::path::PathBuf,
        }

        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "weft-kvload-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    fn spec(addr: &std::path::Path, op: LoadOp, pipeline: usize, rate: Option<f64>) -> Spec {
        Spec {
            addr: addr.to_str().unwrap().to_string(),
            tcp: false,
            conns: 7,
            pipeline,
            requests: 1000,
            op,
            dist: Dist::Uniform,
            keys: 1000,
            rate,
            seed: 3,
        }
    }

    /// The event loop sends exactly the commands asked for, one or sixteen at a time,
    /// checks every reply, and gives every command a latency.
    #[test]
    fn the_event_loop_sends_every_command_once_and_times_each() {
        for (op, pipeline) in [(LoadOp::Get, 1), (LoadOp::Set, 1), (LoadOp::Get, 16)] {
            let (dir, count) = fake_server(false);
            let Some(o) = ring::run(&spec(&dir.path.join("s"), op, pipeline, None)).unwrap() else {
                eprintln!("no io_uring here: the event loop is not tried");
                return;
            };
            assert_eq!(o.requests, 1000, "{op:?} by {pipeline}");
            assert_eq!(o.hist.total, 1000);
            assert_eq!(count.load(Relaxed), 1000);
            assert_eq!(o.late, 0);
            assert!(o.hist.quantile(0.5) > 0);
        }
    }

    /// At a fixed rate the event loop sends each connection's share, every command once.
    #[test]
    fn the_event_loop_at_a_fixed_rate_sends_every_command_once() {
        let (dir, count) = fake_server(false);
        let mut sp = spec(&dir.path.join("s"), LoadOp::Get, 1, Some(20_000.0));
        sp.requests = 500;
        let Some(o) = ring::run(&sp).unwrap() else {
            return;
        };
        assert_eq!(o.requests, 500);
        assert_eq!(o.hist.total, 500);
        assert_eq!(count.load(Relaxed), 500);
    }

    /// A wrong value is an error naming the key, not a figure; so is a server that is
    /// not there.
    #[test]
    fn the_event_loop_fails_on_a_wrong_reply() {
        let (dir, _count) = fake_server(true);
        match ring::run(&spec(&dir.path.join("s"), LoadOp::Get, 1, None)) {
            Err(e) => assert!(e.contains("GET of key") && e.contains("value-of-x"), "{e}"),
            Ok(None) => {}
            Ok(Some(o)) => panic!("a wrong reply gave figures: {}", o.json()),
        }
        match ring::run(&spec(&dir.path.join("none"), LoadOp::Get, 1, None)) {
            Err(e) => assert!(e.starts_with("cannot connect to"), "{e}"),
            Ok(None) => {}
            Ok(Some(o)) => panic!("no server gave figures: {}", o.json()),
        }
    }

    #[test]
    fn zipf_favours_the_first_keys() {
        let cdf = Arc::new(zipf_cdf(1000));
        let mut k = Keys {
            rng: 12345,
            n: 1000,
            cdf: Some(cdf),
        };
        let draws: Vec<u64> = (0..10_000).map(|_| k.next()).collect();
        assert!(draws.iter().all(|&d| d < 1000));
        let first = draws.iter().filter(|&&d| d == 0).count();
        let last = draws.iter().filter(|&&d| d == 999).count();
        assert!(first > 10 * last.max(1), "{first} {last}");
    }
}
