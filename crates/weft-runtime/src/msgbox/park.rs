//! A worker's doorbell, and sleeping on it without losing a wake-up.
//!
//! The doorbell is one 64-bit word per receiver. Bits 0..62 say which senders have
//! mail: sender `s` sets bit `s % 62`, so a bit stands for a class of senders and the
//! receiver looks at the boxes of every sender in a class it finds set (an empty box
//! costs one look). Bit 62, [`WOKEN`], is a wake-up without mail (shutdown); bit 63,
//! [`SLEEPING`], says the receiver sleeps or is about to.
//!
//! Everything a sender and a sleeping receiver do to each other is a read-modify-write
//! of this one word, so their steps are totally ordered and no wake-up can slip between
//! them:
//!
//! - the receiver sets `SLEEPING` with `fetch_or`; if the old value had mail bits it
//!   clears the bit again and does not sleep;
//! - a sender sets its mail bit (or `WOKEN`) with `fetch_or`; if the old value had
//!   `SLEEPING` it clears it (`fetch_and`, so only one sender does) and notifies.
//!
//! Either the receiver's `fetch_or` comes first, and the sender sees `SLEEPING` and
//! wakes it, or the sender's comes first, and the receiver sees the mail and stays up.
//! The wake-up itself is an eventfd: level-triggered, so a notification that lands
//! before the receiver blocks is not lost, and the same descriptor is what the worker's
//! io_uring will wait on once workers have one.

use crate::shim::AtomicU64;
use core::sync::atomic::Ordering::*;
use std::time::Duration;

/// The doorbell bit that says the receiver sleeps.
pub(crate) const SLEEPING: u64 = 1 << 63;
/// The doorbell bit of a wake-up without mail: kept until the receiver looks, so a
/// wake-up that comes before the receiver sleeps is not lost.
pub(crate) const WOKEN: u64 = 1 << 62;
/// How many sender classes the doorbell distinguishes (bits 0..62).
pub(crate) const CLASSES: usize = 62;
const CLASS_BITS: u64 = (1 << CLASSES) - 1;

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

    /// Sender: says sender `from` has mail, and wakes the receiver if it sleeps.
    pub(crate) fn ring(&self, from: usize) {
        self.set(1 << (from % CLASSES));
    }

    /// Wakes the receiver without mail (for shutdown): it returns from its sleep, or
    /// does not go to sleep, until it looks at its doorbell again.
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

    /// Receiver: the classes of senders with mail, clearing them (and a `WOKEN`).
    pub(crate) fn take(&self) -> u64 {
        if self.word.load(Relaxed) & !SLEEPING == 0 {
            return 0;
        }
        self.word.fetch_and(SLEEPING, Acquire) & CLASS_BITS
    }

    /// Receiver: whether any sender has rung since the last `take`.
    pub(crate) fn rung(&self) -> bool {
        self.word.load(Acquire) & !SLEEPING != 0
    }

    /// Whether the receiver sleeps or is about to (a hint for who to wake).
    pub(crate) fn is_sleeping(&self) -> bool {
        self.word.load(Relaxed) & SLEEPING != 0
    }

    /// Receiver: sleeps until a sender rings, `wake_up` is called, or `timeout` passes;
    /// returns at once if mail is already there.
    pub(crate) fn sleep(&self, timeout: Option<Duration>) {
        let old = self.word.fetch_or(SLEEPING, AcqRel);
        if old & !SLEEPING == 0 {
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
