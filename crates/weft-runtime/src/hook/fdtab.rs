//! The layer's idea of each descriptor: a table indexed by descriptor number.
//!
//! An entry holds:
//!
//! - a **generation**, changed whenever the number stops naming what it named: a close,
//!   a `dup2`/`dup3` onto it, or a descriptor the layer sees created with that number
//!   (`socket`, `accept`, `open`, `pipe`, ...). It is odd while a close is under way.
//! - the green threads **waiting** on the descriptor (an intrusive list of [`Link`]s
//!   that live in the waiters' frames), so that a close wakes them: each sees the
//!   generation change and fails with `EBADF`.
//! - **facts** learned from the kernel the first time a call had to wait: what kind of
//!   file it is (socket, disk file, or something pollable), whether the program made it
//!   non-blocking, and a socket's `SO_RCVTIMEO`/`SO_SNDTIMEO`. Each fact is tagged with
//!   the generation it was learned in, and the flag and the timeouts also with a
//!   process-wide epoch that every `fcntl(F_SETFL)`, `ioctl(FIONBIO)` and
//!   `setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)` moves: those change what is shared by every
//!   descriptor of one open file (a `dup`, a `fork`), so after one the facts of all
//!   descriptors are asked for again.
//!
//! Entries are made on demand, 1024 at a time, and never freed; descriptors from
//! [`LIMIT`] on have none (the layer then asks the kernel at every wait, and a close
//! does not wake their waiters).

use crate::io::threads::Registration;
use crate::io::NoPreempt;
use crate::park::Unparker;
use core::cell::{Cell, UnsafeCell};
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;

const CHUNK: usize = 1024;
const DIRS: usize = 4096;
/// Descriptors below this have an entry.
pub(crate) const LIMIT: usize = CHUNK * DIRS;

static TABLE: [AtomicPtr<Entry>; DIRS] = [const { AtomicPtr::new(core::ptr::null_mut()) }; DIRS];

/// Moved by every change of a descriptor's status flags (`O_NONBLOCK`).
pub(crate) static FLAG_EPOCH: AtomicU32 = AtomicU32::new(1);
/// Moved by every change of a socket's timeouts.
pub(crate) static TIMEO_EPOCH: AtomicU32 = AtomicU32::new(1);

/// What kind of file a descriptor names, as far as waiting goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// A socket: readiness, and its timeouts.
    Socket = 1,
    /// A regular file or block device: never "not ready", waits are for the disk.
    Disk = 2,
    /// Anything else that can be polled (a pipe, a terminal, an eventfd, ...).
    Other = 3,
}

/// One descriptor number (module comment). All zero is the initial state.
pub(crate) struct Entry {
    gen: AtomicU32,
    lock: AtomicBool,
    head: UnsafeCell<*const Link>,
    /// `gen << 32 | kind` (0: not known).
    kind: AtomicU64,
    /// `gen << 32 | epoch << 1 | nonblocking` (epoch 31 bits).
    nonblock: AtomicU64,
    /// `gen << 32 | epoch` of the two timeouts below.
    timeo_tag: AtomicU64,
    rcvtimeo_us: AtomicU64,
    sndtimeo_us: AtomicU64,
    /// The descriptor's registration with the thread fallback's epoll thread (an
    /// `Arc::into_raw`, or null), made at its first wait there; changed under `lock`.
    reg: AtomicPtr<Registration>,
    /// How many socket reads in a row had to wait (a hint: see [`Entry::waited`]).
    waits: AtomicU32,
}

// SAFETY: `head` and the links it leads to are only touched with `lock` held.
unsafe impl Sync for Entry {}

/// A waiter's place in an entry's list; lives in the waiter's frame (or a box it owns)
/// from [`Entry::register`] to [`Entry::unregister`].
pub(crate) struct Link {
    prev: Cell<*const Link>,
    next: Cell<*const Link>,
    waker: Unparker,
}

impl Link {
    pub(crate) fn new(waker: Unparker) -> Link {
        Link {
            prev: Cell::new(core::ptr::null()),
            next: Cell::new(core::ptr::null()),
            waker,
        }
    }
}

/// The entry of `fd`, made if need be; None for a negative or too large number.
pub(crate) fn entry(fd: c_int) -> Option<&'static Entry> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < LIMIT)?;
    let dir = &TABLE[fd / CHUNK];
    let mut chunk = dir.load(Acquire);
    if chunk.is_null() {
        chunk = new_chunk(dir);
    }
    // SAFETY: a chunk is an array of CHUNK entries that is never freed.
    Some(unsafe { &*chunk.add(fd % CHUNK) })
}

#[cold]
fn new_chunk(dir: &AtomicPtr<Entry>) -> *mut Entry {
    let layout = std::alloc::Layout::array::<Entry>(CHUNK).expect("a small array");
    // SAFETY: a non-zero size; all-zero bytes are a valid `Entry` (atomics, a null
    // pointer, a false flag).
    let fresh = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Entry>();
    if fresh.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    match dir.compare_exchange(core::ptr::null_mut(), fresh, AcqRel, Acquire) {
        Ok(_) => fresh,
        Err(other) => {
            // SAFETY: ours, never published.
            unsafe { std::alloc::dealloc(fresh.cast(), layout) };
            other
        }
    }
}

/// The entry's lock, held with preemption off (a green thread switched out holding it
/// would make others spin).
struct Guard<'a>(&'a Entry, #[allow(dead_code)] NoPreempt);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.0.lock.store(false, Release);
    }
}

impl Entry {
    fn lock(&self) -> Guard<'_> {
        let np = NoPreempt::new();
        while self
            .lock
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        Guard(self, np)
    }

    /// The generation now.
    #[inline]
    pub(crate) fn gen(&self) -> u32 {
        self.gen.load(Acquire)
    }

    /// Adds `link` to the waiters, unless the generation is no longer `gen` (closed or
    /// replaced since the caller read it): then false. The caller removes it with
    /// [`Entry::unregister`] before `link` moves or dies.
    pub(crate) fn register(&self, link: &Link, gen: u32) -> bool {
        let _g = self.lock();
        if !is_open(gen) || self.gen.load(Relaxed) != gen {
            return false;
        }
        // SAFETY: the list is ours while the lock is held; `link` outlives its time on
        // it (contract).
        unsafe {
            let head = *self.head.get();
            link.prev.set(core::ptr::null());
            link.next.set(head);
            if !head.is_null() {
                (*head).prev.set(link);
            }
            *self.head.get() = link;
        }
        true
    }

    /// Takes `link` off the waiters (if a close has not taken the whole list already).
    pub(crate) fn unregister(&self, link: &Link) {
        let _g = self.lock();
        // SAFETY: as in `register`.
        unsafe {
            let (p, n) = (link.prev.get(), link.next.get());
            let on_list = !p.is_null() || core::ptr::eq(*self.head.get(), link);
            if !on_list {
                return;
            }
            if p.is_null() {
                *self.head.get() = n;
            } else {
                (*p).next.set(n);
            }
            if !n.is_null() {
                (*n).prev.set(p);
            }
            link.prev.set(core::ptr::null());
            link.next.set(core::ptr::null());
        }
    }

    /// Moves the generation (to `next(gen)`) and empties the waiter list; returns the
    /// new generation and whom to wake. Lock held by the caller.
    fn bump(&self, next: impl FnOnce(u32) -> u32) -> (u32, Vec<Unparker>) {
        let g = next(self.gen.load(Relaxed));
        self.gen.store(g, Release);
        let mut wake = Vec::new();
        // SAFETY: the list is ours while the lock is held; each link is alive while
        // it is on it.
        unsafe {
            let mut l = *self.head.get();
            *self.head.get() = core::ptr::null();
            while !l.is_null() {
                wake.push((*l).waker.clone());
                let n = (*l).next.get();
                (*l).prev.set(core::ptr::null());
                (*l).next.set(core::ptr::null());
                l = n;
            }
        }
        (g, wake)
    }

    /// The descriptor's registration with the thread fallback's epoll thread, made if
    /// need be: None if the generation is no longer `gen`, or the kernel refuses it
    /// (`EEXIST`: another registration of the same file, or `EPERM`: not pollable).
    pub(crate) fn registration(&self, fd: c_int, gen: u32) -> Option<Arc<Registration>> {
        let _g = self.lock();
        if self.gen.load(Relaxed) != gen {
            return None;
        }
        let p = self.reg.load(Relaxed);
        if !p.is_null() {
            // SAFETY: a count the entry holds (`Arc::into_raw`), alive under the lock.
            return Some(unsafe {
                Arc::increment_strong_count(p);
                Arc::from_raw(p)
            });
        }
        let r = Arc::new(Registration::new(fd).ok()?);
        self.reg.store(Arc::into_raw(r.clone()).cast_mut(), Relaxed);
        Some(r)
    }

    /// The descriptor's registration, if it has one in generation `gen` (none is made).
    pub(crate) fn existing_registration(&self, gen: u32) -> Option<Arc<Registration>> {
        if self.reg.load(Relaxed).is_null() {
            return None;
        }
        let _g = self.lock();
        let p = self.reg.load(Relaxed);
        if p.is_null() || self.gen.load(Relaxed) != gen {
            return None;
        }
        // SAFETY: a count the entry holds (`Arc::into_raw`), alive under the lock.
        Some(unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        })
    }

    /// Takes the registration away (lock held by the caller).
    fn take_registration(&self) -> Option<Arc<Registration>> {
        let p = self.reg.swap(core::ptr::null_mut(), Relaxed);
        // SAFETY: the entry's count, given up here.
        (!p.is_null()).then(|| unsafe { Arc::from_raw(p) })
    }

    /// Whether the last reads had to wait, so a read may skip its first attempt: the
    /// descriptor is known (in generation `gen`) to be a blocking socket, and this is
    /// not the one read in `retry` that tries anyway.
    #[inline]
    pub(crate) fn waited(&self, gen: u32, retry: u32) -> bool {
        let w = self.waits.load(Relaxed);
        w != 0
            && !w.is_multiple_of(retry)
            && self.kind(gen) == Some(Kind::Socket)
            && self.nonblocking(gen) == Some(false)
    }

    /// A read had to wait.
    #[inline]
    pub(crate) fn waiting(&self) {
        self.waits
            .store(self.waits.load(Relaxed).wrapping_add(1).max(1), Relaxed);
    }

    /// A read found something at once.
    #[inline]
    pub(crate) fn ready(&self) {
        if self.waits.load(Relaxed) != 0 {
            self.waits.store(0, Relaxed);
        }
    }

    /// Learned kind, if learned in this generation.
    #[inline]
    pub(crate) fn kind(&self, gen: u32) -> Option<Kind> {
        let k = self.kind.load(Acquire);
        if (k >> 32) as u32 != gen {
            return None;
        }
        match k as u32 {
            1 => Some(Kind::Socket),
            2 => Some(Kind::Disk),
            3 => Some(Kind::Other),
            _ => None,
        }
    }

    pub(crate) fn set_kind(&self, gen: u32, k: Kind) {
        self.kind.store((gen as u64) << 32 | k as u64, Release);
    }

    /// Whether the program made it non-blocking, if learned since the last change.
    #[inline]
    pub(crate) fn nonblocking(&self, gen: u32) -> Option<bool> {
        let v = self.nonblock.load(Acquire);
        let epoch = FLAG_EPOCH.load(Acquire) & 0x7fff_ffff;
        ((v >> 32) as u32 == gen && ((v as u32) >> 1) == epoch).then_some(v & 1 != 0)
    }

    pub(crate) fn set_nonblocking(&self, gen: u32, epoch: u32, nb: bool) {
        let v = (gen as u64) << 32 | ((epoch & 0x7fff_ffff) as u64) << 1 | nb as u64;
        self.nonblock.store(v, Release);
    }

    /// The socket's (receive, send) timeouts in microseconds (0: none), if learned
    /// since the last change.
    #[inline]
    pub(crate) fn timeouts(&self, gen: u32) -> Option<(u64, u64)> {
        let tag = (gen as u64) << 32 | TIMEO_EPOCH.load(Acquire) as u64;
        if self.timeo_tag.load(Acquire) != tag {
            return None;
        }
        let r = (
            self.rcvtimeo_us.load(Relaxed),
            self.sndtimeo_us.load(Relaxed),
        );
        // Learned again meanwhile (by a racing caller, with the same values) or not.
        (self.timeo_tag.load(Acquire) == tag).then_some(r)
    }

    pub(crate) fn set_timeouts(&self, gen: u32, epoch: u32, rcv_us: u64, snd_us: u64) {
        self.timeo_tag.store(0, Release);
        self.rcvtimeo_us.store(rcv_us, Relaxed);
        self.sndtimeo_us.store(snd_us, Relaxed);
        self.timeo_tag
            .store((gen as u64) << 32 | epoch as u64, Release);
    }
}

/// A close of a descriptor under way (see [`closing`]).
pub(crate) struct Closing(Option<(&'static Entry, u32)>);

impl Closing {
    /// The close has been made: the number may be given out again.
    pub(crate) fn done(self) {
        if let Some((e, g)) = self.0 {
            let _l = e.lock();
            if e.gen.load(Relaxed) == g {
                e.gen.store(g.wrapping_add(1), Release);
            }
        }
    }
}

/// `fd` is about to be closed (or replaced): every green thread waiting on it is woken
/// (it sees the generation change: `EBADF`), and calls that start before
/// [`Closing::done`] see it being closed.
pub(crate) fn closing(fd: c_int) -> Closing {
    if !super::enabled() {
        return Closing(None);
    }
    let Some(e) = entry(fd) else {
        return Closing(None);
    };
    let (g, wake, reg) = {
        let _l = e.lock();
        // Odd: being closed. A second close racing with this one keeps it odd.
        let (g, wake) = e.bump(|g| {
            if g & 1 == 0 {
                g.wrapping_add(1)
            } else {
                g.wrapping_add(2)
            }
        });
        (g, wake, e.take_registration())
    };
    if let Some(r) = reg {
        // Before the close: the epoll thread's registration goes with the descriptor.
        r.deregister(fd);
    }
    for w in wake {
        w.unpark_owned();
    }
    Closing(Some((e, g)))
}

/// `fd` has just been given out by a call the layer saw (a new socket, file, pipe,
/// duplicate, ...): whatever the layer knew of that number is forgotten, and a waiter
/// still registered under the old meaning is woken (it fails with `EBADF`).
pub(crate) fn created(fd: c_int) {
    if !super::enabled() {
        return;
    }
    let Some(e) = entry(fd) else { return };
    let (wake, reg) = {
        let _l = e.lock();
        let (_, wake) = e.bump(|g| (g | 1).wrapping_add(1));
        (wake, e.take_registration())
    };
    if let Some(r) = reg {
        r.deregister(fd);
    }
    for w in wake {
        w.unpark_owned();
    }
}

/// Whether `gen` names an open descriptor (not one being closed).
#[inline]
pub(crate) fn is_open(gen: u32) -> bool {
    gen & 1 == 0
}

/// Descriptors `first..=last` were closed by one call (`close_range`): as [`created`]
/// for each that has an entry (only the entries made so far are looked at).
pub(crate) fn forget_range(first: usize, last: usize) {
    let last = last.min(LIMIT - 1);
    let mut fd = first;
    while fd <= last {
        let dir = TABLE[fd / CHUNK].load(Acquire);
        let end = ((fd / CHUNK + 1) * CHUNK - 1).min(last);
        if !dir.is_null() {
            for f in fd..=end {
                created(f as c_int);
            }
        }
        fd = end + 1;
    }
}
