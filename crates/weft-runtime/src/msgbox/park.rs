//! A worker's doorbell: which boxes to look at, and sleeping without losing a wake-up.
//!
//! The doorbell is one 64-bit word per receiver. Bits 0..62 say which senders' boxes
//! the receiver must look at: sender `s` owns bit `s % 62` (with more than 62 workers a
//! bit stands for a class of senders, and the receiver looks at every box of a class it
//! finds set: an empty box costs one look). Bit 62, [`WOKEN`], is a wake-up without mail
//! (shutdown, the inbox); bit 63, [`SLEEPING`], says the receiver sleeps or is about to.
//!
//! **Sticky bits.** A class bit is not cleared when the receiver drains the box: it
//! stays set while the sender keeps sending, and the receiver looks at the boxes of the
//! set classes (one load of each box's next slot, `spsc.rs`) whenever it checks for
//! mail. A sender whose bit is already set (and the receiver awake) therefore writes
//! nothing but its box: the doorbell's line stays shared in both caches, and a message
//! costs the one cache line of its slot. The receiver clears a bit only after the
//! class's boxes were found empty at [`STICKY_POLLS`] polls in a row.
//!
//! **No lost mail, no lost wake-up.** Two store-then-load races are closed with
//! sequentially consistent fences (Dekker's pattern; loom checks it with the real
//! code, `tests/loom_msgbox.rs`):
//!
//! - a sender stores its message, fences, and loads the word ([`Doorbell::notify`]);
//!   if its bit is clear or `SLEEPING` is set, it sets its bit with `fetch_or` (and if
//!   that finds `SLEEPING`, clears it with `fetch_and`, so only one sender does, and
//!   writes the eventfd);
//! - the receiver clearing a bit ([`Doorbell::clear`]) does the `fetch_and`, fences,
//!   and then looks at the class's boxes once more; going to sleep
//!   ([`Doorbell::sleep`]) it sets `SLEEPING` with `fetch_or`, fences, and looks at the
//!   boxes of every class set in the word it replaced.
//!
//! Either the sender's fence comes first in the fences' total order, and the
//! receiver's look after its own fence sees the message; or the receiver's comes
//! first, and the sender's load sees the cleared bit or `SLEEPING`, and rings. A bit
//! the sender saw set may have been cleared only by a clear whose look comes after,
//! and that look finds the message. The wake-up itself is an eventfd: level-triggered,
//! so a notification that lands before the receiver blocks is not lost, and the same
//! descriptor is what the worker's io_uring completions write to.

use crate::shim::{fence, AtomicU64};
use core::sync::atomic::Ordering::*;
use std::time::Duration;

/// The doorbell bit that says the receiver sleeps.
pub(crate) const SLEEPING: u64 = 1 << 63;
/// The doorbell bit of a wake-up without mail: kept until the receiver looks, so a
/// wake-up that comes before the receiver sleeps is not lost.
pub(crate) const WOKEN: u64 = 1 << 62;
/// How many sender classes the doorbell distinguishes (bits 0..62).
pub(crate) const CLASSES: usize = 62;
pub(crate) const CLASS_BITS: u64 = (1 << CLASSES) - 1;
/// How many polls in a row must find a class's boxes empty before the receiver clears
/// its bit (once under loom, so the models reach the clearing path quickly).
pub(crate) const STICKY_POLLS: u8 = if cfg!(feature = "loom") { 1 } else { 64 };

pub(crate) struct Doorbell {
    word: AtomicU64,
    wake: Wake,
}

impl Doorbell {
    pub(crate) fn new() -> std::io::Result<Doorbell> {
        Ok(Doorbell {
            word: AtomicU64::new(0),
            wake: Wake::new()?,
        })
    }

    /// The bit of sender `from`.
    #[inline]
    pub(crate) fn bit(from: usize) -> u64 {
        1 << (from % CLASSES)
    }

    /// Sender, after putting a message in its box: makes sure the receiver will look
    /// at the box, and wakes it if it sleeps. Usually a fence and a load of a line both
    /// sides only read.
    #[inline]
    pub(crate) fn notify(&self, from: usize) {
        let bit = Self::bit(from);
        fence(SeqCst);
        let w = self.word.load(Relaxed);
        if w & bit == 0 || w & SLEEPING != 0 {
            self.set(bit);
        }
    }

    /// Wakes the receiver without mail (for shutdown, the inbox): it returns from its
    /// sleep, or does not go to sleep, until it looks at its doorbell again.
    pub(crate) fn wake_up(&self) {
        self.set(WOKEN);
    }

    fn set(&self, bits: u64) {
        let old = self.word.fetch_or(bits, AcqRel);
        // If it sleeps, clear SLEEPING (only one of several setters sees it set) and
        // notify.
        if old & SLEEPING != 0 && self.word.fetch_and(!SLEEPING, AcqRel) & SLEEPING != 0 {
            self.wake.notify();
        }
    }

    /// Receiver: the word as it stands (the classes to look at, and `WOKEN`).
    #[inline]
    pub(crate) fn bits(&self) -> u64 {
        self.word.load(Acquire)
    }

    /// Receiver: clears `bits` (classes whose boxes were found empty, or `WOKEN`). The
    /// caller must then look at those classes' boxes once more (module comment).
    pub(crate) fn clear(&self, bits: u64) {
        self.word.fetch_and(!bits, AcqRel);
        fence(SeqCst);
    }

    /// Whether the receiver sleeps or is about to (a hint for who to wake).
    pub(crate) fn is_sleeping(&self) -> bool {
        self.word.load(Relaxed) & SLEEPING != 0
    }

    /// Receiver: sleeps until a sender rings, `wake_up` is called, or `timeout` passes,
    /// unless `has_mail(classes)` finds a message in the boxes of `classes` (the word's
    /// class bits at the moment `SLEEPING` was set), or `WOKEN` was set.
    pub(crate) fn sleep(&self, timeout: Option<Duration>, has_mail: impl FnOnce(u64) -> bool) {
        let old = self.word.fetch_or(SLEEPING, AcqRel);
        fence(SeqCst);
        if old & WOKEN == 0 && !has_mail(old & CLASS_BITS) {
            self.wake.wait(timeout);
        }
        self.word.fetch_and(!SLEEPING, AcqRel);
    }

    /// The eventfd a sleeping receiver waits on (for an event loop to wait on instead).
    #[cfg(not(feature = "loom"))]
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        self.wake.fd
    }
}

#[cfg(not(feature = "loom"))]
struct Wake {
    fd: std::os::fd::RawFd,
}

#[cfg(not(feature = "loom"))]
impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: creates a descriptor we own (closed in Drop).
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Wake { fd })
    }

    fn wait(&self, timeout: Option<Duration>) {
        // ppoll, not poll: poll's milliseconds would turn a sub-millisecond timeout
        // (a short timer, ROOM_RETRY) into a busy loop of poll(0).
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const libc::timespec);
        let mut p = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: polls and reads our own eventfd into a local; `tsp` is null or points
        // to a local timespec.
        unsafe {
            libc::ppoll(&mut p, 1, tsp, core::ptr::null());
            let mut v = 0u64;
            libc::read(self.fd, (&mut v as *mut u64).cast(), 8);
        }
    }

    fn notify(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes to our own eventfd.
        unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
    }
}

#[cfg(not(feature = "loom"))]
impl Drop for Wake {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor we own.
        unsafe { libc::close(self.fd) };
    }
}

/// Under loom: a level-triggered flag with a mutex and a condition variable, the same
/// semantics as the eventfd (a notification before the wait is kept). Timeouts are not
/// modelled: the loom tests never rely on one.
#[cfg(feature = "loom")]
struct Wake {
    flag: loom::sync::Mutex<bool>,
    cv: loom::sync::Condvar,
}

#[cfg(feature = "loom")]
impl Wake {
    fn new() -> std::io::Result<Wake> {
        Ok(Wake {
            flag: loom::sync::Mutex::new(false),
            cv: loom::sync::Condvar::new(),
        })
    }
    fn wait(&self, _timeout: Option<Duration>) {
        let mut f = self.flag.lock().unwrap();
        while !*f {
            f = self.cv.wait(f).unwrap();
        }
        *f = false;
    }
    fn notify(&self) {
        *self.flag.lock().unwrap() = true;
        self.cv.notify_one();
    }
}
