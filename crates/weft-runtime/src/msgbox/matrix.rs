//! The n x n matrix of message boxes, and the endpoint each worker holds.
//!
//! Box `(from, to)` carries messages from worker `from` to worker `to`. Each worker gets
//! exactly one [`Endpoint`] (not `Clone`): the only producer of its row of boxes and the
//! only consumer of its column, which is what makes each box single-producer
//! single-consumer.
//!
//! Finding mail: after pushing into box `(from, to)` the sender notifies `to`'s doorbell
//! (`park.rs`), which makes sure `from`'s bit is set there (usually it already is: the
//! bits are sticky, so a busy pair of workers exchanges messages without writing the
//! doorbell at all). The receiver looks at the boxes of the senders whose bits are set:
//! one load of each box's next slot ([`Endpoint::has_mail`]), and it drains those that
//! have mail ([`Endpoint::poll`]). A bit whose boxes stay empty for
//! [`STICKY_POLLS`](super::park::STICKY_POLLS) polls is cleared, and the boxes looked at
//! once more after the clear, so nothing sent meanwhile is missed.
//!
//! Sending never blocks and never drops: if a box is full, the message waits in the
//! sender's own overflow list for that destination (in order, behind nothing newer) and
//! moves into the box on the sender's next send, poll or wait. A worker holding overflow
//! sleeps at most [`ROOM_RETRY`] at a time, so it retries while it keeps serving its own
//! boxes, as the processors of Fiasco's multiprocessor IPC keep serving incoming
//! requests while they wait on their own: two workers filling each other's boxes cannot deadlock.

use super::park::{Doorbell, CLASSES, CLASS_BITS, STICKY_POLLS, WOKEN};
use super::spsc::Spsc;
use crate::shim::{Arc, CachePadded};
use std::collections::VecDeque;
use std::time::Duration;

/// How long an idle worker keeps looking for mail before it goes to sleep.
///
/// Waking a sleeping worker costs a system call on the sender's side and, on the
/// sleeper's, a return from the kernel's idle path: tens of microseconds on a virtual
/// machine, where the wake-up is an inter-processor interrupt through the hypervisor
/// (a futex round trip takes 50-70 us on the 2-vCPU VMs of docs/benchmarks.md). A
/// partner that answers within this window (a cross-worker IPC call, a ping-pong)
/// is seen without either cost. The price is at most this much CPU each time a worker
/// runs out of work; a worker idle for longer sleeps. (The window was 200 spins
/// before: 2.4 us on an Intel VM whose `pause` takes 11 ns, shorter than a busy
/// cross-worker round trip there, so such round trips kept paying the wake-up.)
pub const SPIN_BEFORE_SLEEP: Duration = Duration::from_micros(20);

/// A bounded busy-wait: true from [`Spin::go_on`] until [`SPIN_BEFORE_SLEEP`] has
/// passed (or `limit`, if shorter). It reads the clock once every 16 turns; under
/// loom, whose state space each turn multiplies, it allows one turn.
pub struct Spin {
    start: Option<std::time::Instant>,
    limit: Duration,
    turns: u32,
}

impl Spin {
    /// A spin of at most [`SPIN_BEFORE_SLEEP`], or `limit` if shorter (a timer due
    /// sooner, say).
    pub fn new(limit: Option<Duration>) -> Spin {
        Spin::up_to(limit, SPIN_BEFORE_SLEEP)
    }

    /// A spin of at most `spin`, or `limit` if shorter.
    pub fn up_to(limit: Option<Duration>, spin: Duration) -> Spin {
        Spin {
            start: None,
            limit: limit.map_or(spin, |l| l.min(spin)),
            turns: 0,
        }
    }

    /// Pauses the CPU briefly; false once the spin's time is up.
    #[inline]
    pub fn go_on(&mut self) -> bool {
        self.turns += 1;
        if cfg!(feature = "loom") {
            if self.turns > 1 {
                return false;
            }
            crate::shim::spin_hint();
            return true;
        }
        if self.turns % 16 == 1 {
            let now = std::time::Instant::now();
            match self.start {
                None => self.start = Some(now),
                Some(s) if now.duration_since(s) >= self.limit => return false,
                Some(_) => {}
            }
        }
        crate::shim::spin_hint();
        true
    }
}

/// How long a worker whose messages wait for room in a full box sleeps at most before
/// it tries again.
pub const ROOM_RETRY: Duration = Duration::from_micros(50);

struct Matrix<T> {
    n: usize,
    /// Box (from, to) at `from * n + to`.
    boxes: Box<[Spsc<T>]>,
    doorbells: Box<[CachePadded<Doorbell>]>,
}

/// A worker's end of the matrix: it sends to every worker (itself included) and
/// receives from every worker.
pub struct Endpoint<T> {
    id: usize,
    m: Arc<Matrix<T>>,
    /// This worker's doorbell, `m.doorbells[id]` (which `m` keeps in place): read at
    /// every switch (`has_mail`), so without the index and its bounds check.
    bell: *const Doorbell,
    /// Messages waiting for room, per destination.
    overflow: Vec<VecDeque<T>>,
    overflowing: usize,
    /// Per doorbell class: how many polls in a row found its boxes empty.
    idle_polls: [u8; CLASSES],
    /// How long [`Endpoint::wait_or`] spins before it sleeps ([`SPIN_BEFORE_SLEEP`]
    /// unless set).
    spin: Duration,
}

/// Builds the matrix for `workers` workers, with boxes of `capacity` messages, and
/// returns their endpoints, in worker order.
pub fn matrix<T: Send>(workers: usize, capacity: usize) -> std::io::Result<Vec<Endpoint<T>>> {
    assert!(
        workers > 0,
        "a message-box matrix needs at least one worker"
    );
    let m = Arc::new(Matrix {
        n: workers,
        boxes: (0..workers * workers)
            .map(|_| Spsc::new(capacity))
            .collect(),
        doorbells: (0..workers)
            .map(|_| Doorbell::new().map(CachePadded))
            .collect::<Result<_, _>>()?,
    });
    Ok((0..workers)
        .map(|id| Endpoint {
            id,
            bell: &*m.doorbells[id] as *const Doorbell,
            m: m.clone(),
            overflow: (0..workers).map(|_| VecDeque::new()).collect(),
            overflowing: 0,
            idle_polls: [0; CLASSES],
            spin: SPIN_BEFORE_SLEEP,
        })
        .collect())
}

// SAFETY: `bell` only points into the matrix that `m` shares: the endpoint may move
// to another thread exactly when its other fields may (the bounds derived without it).
unsafe impl<T> Send for Endpoint<T>
where
    Arc<Matrix<T>>: Send,
    VecDeque<T>: Send,
{
}

impl<T: Send> Endpoint<T> {
    /// Sets how long a wait spins before it sleeps (the runtime's `idle_spin`).
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// How long a wait spins before it sleeps.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// This worker's doorbell.
    #[inline(always)]
    fn bell(&self) -> &Doorbell {
        // SAFETY: `bell` points into `m`'s doorbells, which live as long as `m`.
        unsafe { &*self.bell }
    }

    /// This worker's index.
    pub fn id(&self) -> usize {
        self.id
    }

    /// How many workers the matrix connects.
    pub fn workers(&self) -> usize {
        self.m.n
    }

    /// Sends `msg` to worker `to` (waking it if it sleeps). Never blocks, never drops.
    pub fn send(&mut self, to: usize, msg: T) {
        assert!(
            to < self.m.n,
            "worker {to} does not exist ({} workers)",
            self.m.n
        );
        if self.overflow[to].is_empty() {
            // SAFETY: this endpoint is the only producer of row `self.id`.
            match unsafe { self.m.boxes[self.id * self.m.n + to].push(msg) } {
                Ok(()) => return self.m.doorbells[to].notify(self.id),
                Err(msg) => self.overflow[to].push_back(msg),
            }
        } else {
            self.overflow[to].push_back(msg);
        }
        self.overflowing += 1;
        self.flush_to(to);
    }

    /// Moves waiting overflow into boxes that have room; true if some is still waiting.
    pub fn flush(&mut self) -> bool {
        if self.overflowing > 0 {
            for to in 0..self.m.n {
                self.flush_to(to);
            }
        }
        self.overflowing > 0
    }

    fn flush_to(&mut self, to: usize) {
        let b = &self.m.boxes[self.id * self.m.n + to];
        let q = &mut self.overflow[to];
        let mut moved = false;
        while let Some(msg) = q.pop_front() {
            // SAFETY: this endpoint is the only producer of row `self.id`.
            match unsafe { b.push(msg) } {
                Ok(()) => {
                    moved = true;
                    self.overflowing -= 1;
                }
                Err(msg) => {
                    q.push_front(msg);
                    break;
                }
            }
        }
        if moved {
            self.m.doorbells[to].notify(self.id);
        }
    }

    /// Wakes worker `to` if it sleeps, without a message (for shutdown, say).
    pub fn wake(&self, to: usize) {
        self.m.doorbells[to].wake_up();
    }

    /// Handles every message waiting for this worker: `f(from, msg)`, in order per
    /// sender. Returns how many there were.
    pub fn poll(&mut self, mut f: impl FnMut(usize, T)) -> usize {
        self.flush();
        let bell = self.bell();
        let bits = bell.bits();
        if bits & WOKEN != 0 {
            bell.clear(WOKEN);
        }
        let mut n = 0;
        let mut quiet = 0u64;
        for class in classes_in(bits & CLASS_BITS) {
            let got = self.drain_class(class, &mut f);
            n += got;
            if got > 0 {
                self.idle_polls[class] = 0;
            } else {
                quiet |= self.went_quiet(class);
            }
        }
        if quiet != 0 {
            // Clear the bits of classes that went quiet, then look at their boxes once
            // more: a sender that saw its bit still set before the clear did not ring,
            // and its message is found here (park.rs: no lost mail).
            self.bell().clear(quiet);
            for class in classes_in(quiet) {
                n += self.drain_class(class, &mut f);
            }
        }
        n
    }

    /// A poll that [`has_mail`](Self::has_mail) has just said would find nothing, done
    /// without draining: the classes whose bits are set count one more empty poll, as
    /// in [`poll`](Self::poll), and those gone quiet have their bits cleared. Returns
    /// whether mail waits now (a box had a message after all, or one came in as a bit
    /// was cleared): then the caller polls.
    ///
    /// For a scheduler that skips `poll` when there is no mail (IPC's direct switch).
    /// Without it, a bit set by the last message from some worker stayed set for as
    /// long as no real poll ran, and every `has_mail` looked at that worker's box: a
    /// same-worker IPC round trip measured ~6 ns slower on a worker that had ever
    /// received mail.
    #[cold]
    #[inline(never)]
    pub fn poll_empty(&mut self) -> bool {
        let bits = self.bell().bits() & CLASS_BITS;
        let mut quiet = 0u64;
        for class in classes_in(bits) {
            if self.mail_in(1 << class) {
                return true;
            }
            quiet |= self.went_quiet(class);
        }
        if quiet != 0 {
            // As in `poll`: cleared, then looked at once more.
            self.bell().clear(quiet);
            return self.mail_in(quiet);
        }
        false
    }

    /// The class bits set in this worker's doorbell (for tests).
    #[cfg(test)]
    pub(crate) fn class_bits(&self) -> u64 {
        self.bell().bits() & CLASS_BITS
    }

    /// Counts a poll that found the boxes of `class` empty; returns `class`'s bit once
    /// they have been empty for [`STICKY_POLLS`] polls in a row (the count restarts),
    /// else 0.
    fn went_quiet(&mut self, class: usize) -> u64 {
        let idle = &mut self.idle_polls[class];
        *idle += 1;
        if *idle >= STICKY_POLLS {
            *idle = 0;
            1 << class
        } else {
            0
        }
    }

    /// The boxes of this worker's column whose senders are of doorbell class `class`,
    /// with their senders.
    fn class_boxes(&self, class: usize) -> impl Iterator<Item = (usize, &Spsc<T>)> {
        (class..self.m.n)
            .step_by(CLASSES)
            .map(|from| (from, &self.m.boxes[from * self.m.n + self.id]))
    }

    /// Drains the boxes of the senders of doorbell class `class`; how many messages.
    fn drain_class(&self, class: usize, f: &mut impl FnMut(usize, T)) -> usize {
        let mut n = 0;
        for (from, b) in self.class_boxes(class) {
            // SAFETY: this endpoint is the only consumer of column `self.id`.
            while let Some(msg) = unsafe { b.pop() } {
                f(from, msg);
                n += 1;
            }
        }
        n
    }

    /// Whether a box of a sender class in `classes` has a message for this worker.
    /// (Plain loops: the scheduler asks at every switch, and the iterator version cost
    /// it twice the instructions. Out of line: `has_mail`'s own test, inline, is all
    /// a switch runs while no bit is set.)
    #[inline(never)]
    fn mail_in(&self, classes: u64) -> bool {
        let (n, col) = (self.m.n, &self.m.boxes[self.id..]);
        let mut bits = classes;
        while bits != 0 {
            let mut from = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            while from < n {
                // SAFETY: this endpoint is the only consumer of column `self.id`.
                if unsafe { col[from * n].is_ready() } {
                    return true;
                }
                from += CLASSES;
            }
        }
        false
    }

    /// Waits until mail may have arrived or `timeout` passes (None: forever): a short
    /// spin looking for mail ([`SPIN_BEFORE_SLEEP`]), then sleep. Returns at once if
    /// mail is waiting, or if it could move some of this endpoint's own waiting
    /// messages (the caller's loop then looks again); while some still wait for room it
    /// sleeps at most [`ROOM_RETRY`].
    pub fn wait(&mut self, timeout: Option<Duration>) {
        self.wait_or(timeout, || false)
    }

    /// As [`Endpoint::wait`], also ending the spin when `ready()` says the caller has
    /// other work (I/O completions, say: whatever ends the sleep must then also write
    /// this endpoint's eventfd, [`Endpoint::wake_fd`]).
    pub fn wait_or(&mut self, timeout: Option<Duration>, mut ready: impl FnMut() -> bool) {
        let pending = self.overflowing;
        if pending > 0 && (!self.flush() || self.overflowing < pending) {
            return;
        }
        let mut spin = Spin::up_to(timeout, self.spin);
        loop {
            if self.has_mail() || ready() {
                return;
            }
            if !spin.go_on() {
                break;
            }
        }
        let timeout = if self.overflowing > 0 {
            Some(timeout.map_or(ROOM_RETRY, |t| t.min(ROOM_RETRY)))
        } else {
            timeout
        };
        self.bell().sleep(timeout, |classes| self.mail_in(classes));
    }

    /// A handle that threads outside the matrix (a blocking pool, a plain thread that
    /// spawns) use to wake workers.
    pub fn remote(&self) -> Remote<T> {
        Remote { m: self.m.clone() }
    }

    /// Whether mail is waiting: a box of a sender whose doorbell bit is set has a
    /// message, or a wake-up without mail came (a load of the doorbell and one of the
    /// next slot of each box it names: cheap enough for a scheduler to ask at every
    /// switch).
    #[inline(always)]
    pub fn has_mail(&self) -> bool {
        let bits = self.bell().bits();
        bits & WOKEN != 0 || (bits & CLASS_BITS != 0 && self.mail_in(bits & CLASS_BITS))
    }

    /// The eventfd this worker sleeps on, for an event loop that waits on it instead.
    #[cfg(not(feature = "loom"))]
    pub fn wake_fd(&self) -> std::os::fd::RawFd {
        self.bell().fd()
    }
}

/// The doorbell classes whose bits are set in `bits`, lowest first.
fn classes_in(mut bits: u64) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        (bits != 0).then(|| {
            let class = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            class
        })
    })
}

/// Wakes workers from outside the matrix (see [`Endpoint::remote`]).
pub struct Remote<T> {
    m: Arc<Matrix<T>>,
}

impl<T> Clone for Remote<T> {
    fn clone(&self) -> Self {
        Remote { m: self.m.clone() }
    }
}

impl<T> Remote<T> {
    /// Wakes worker `to` if it sleeps (or keeps it from sleeping until it next looks).
    pub fn wake(&self, to: usize) {
        self.m.doorbells[to].wake_up();
    }
    /// Whether worker `to` sleeps or is about to.
    pub fn is_sleeping(&self, to: usize) -> bool {
        self.m.doorbells[to].is_sleeping()
    }

    /// Takes every message still in any box (and the senders' overflow is gone with
    /// their endpoints): for the owner of the matrix once all workers have ended.
    ///
    /// # Safety
    /// No [`Endpoint`] of this matrix may be alive (none may push or pop).
    pub unsafe fn drain(&self, mut f: impl FnMut(T)) {
        for b in self.m.boxes.iter() {
            // SAFETY: no endpoint is alive: we are the only producer and consumer.
            while let Some(msg) = unsafe { b.pop() } {
                f(msg);
            }
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn messages_arrive_in_order_per_sender_and_overflow_is_kept() {
        let mut e = matrix::<u32>(3, 4).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        for i in 0..10 {
            a.send(1, i); // box capacity 4: six wait in a's overflow
        }
        b.send(1, 100);
        let mut got = Vec::new();
        while got.len() < 11 {
            b.poll(|from, m| got.push((from, m)));
            a.flush();
        }
        let from_a: Vec<u32> = got
            .iter()
            .filter(|(f, _)| *f == 0)
            .map(|(_, m)| *m)
            .collect();
        assert_eq!(from_a, (0..10).collect::<Vec<_>>(), "in order, none lost");
        assert!(got.contains(&(1, 100)), "a worker can send to itself");
        assert!(!a.flush(), "overflow drained");
    }

    #[test]
    fn senders_beyond_63_share_doorbell_bits_and_are_still_found() {
        let mut e = matrix::<usize>(130, 2).unwrap();
        let mut r = e.remove(0);
        for s in &mut e {
            let id = s.id();
            s.send(0, id); // senders 1, 64 and 127 share bit 1; 63 and 126 share bit 0 ...
        }
        let mut got = Vec::new();
        r.poll(|from, m| {
            assert_eq!(from, m);
            got.push(from)
        });
        got.sort();
        assert_eq!(got, (1..130).collect::<Vec<_>>());
    }

    #[test]
    fn empty_polls_clear_a_quiet_bit_and_never_hide_mail() {
        let mut e = matrix::<u32>(2, 4).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        a.send(1, 1);
        let mut got = Vec::new();
        b.poll(|_, m| got.push(m));
        assert_eq!(got, [1]);
        assert_ne!(b.class_bits(), 0, "the bit is sticky");
        assert!(!b.has_mail());
        // A message found by an empty poll is reported, and the bit stays.
        a.send(1, 2);
        assert!(b.poll_empty(), "mail in a box whose bit is set");
        assert_ne!(b.class_bits(), 0);
        b.poll(|_, m| got.push(m));
        assert_eq!(got, [1, 2]);
        // Empty polls: the bit goes after STICKY_POLLS of them, not before.
        for _ in 1..STICKY_POLLS {
            assert!(!b.poll_empty());
        }
        assert_ne!(b.class_bits(), 0, "cleared too early");
        assert!(!b.poll_empty());
        assert_eq!(b.class_bits(), 0, "a quiet bit is cleared");
        // Mail after the clear rings the doorbell again and is found.
        a.send(1, 3);
        assert!(b.has_mail());
        b.poll(|_, m| got.push(m));
        assert_eq!(got, [1, 2, 3]);
    }

    #[test]
    fn wait_returns_when_mail_arrives_from_another_thread() {
        let mut e = matrix::<u64>(2, 8).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            a.send(1, 7);
            a
        });
        let t0 = std::time::Instant::now();
        let mut got = None;
        while got.is_none() {
            b.wait(None); // sleeps on the eventfd until the message arrives
            b.poll(|_, m| got = Some(m));
        }
        assert_eq!(got, Some(7));
        assert!(t0.elapsed() < Duration::from_secs(60));
        t.join().unwrap();
    }

    #[test]
    fn wait_honours_its_timeout_and_wake_ends_it() {
        let mut e = matrix::<u8>(2, 2).unwrap();
        let t0 = std::time::Instant::now();
        e[0].wait(Some(Duration::from_millis(30)));
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(25) && waited < Duration::from_secs(60),
            "{waited:?}"
        );
        let waker = e.pop().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            waker.wake(0);
            waker
        });
        let t0 = std::time::Instant::now();
        e[0].wait(Some(Duration::from_secs(120)));
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "wake ended the sleep"
        );
        t.join().unwrap();
    }
}
