//! Where fiber records live, and what a fiber handle is.
//!
//! # Records never go back to the allocator
//!
//! Every [`FiberRecord`] lives in one reservation of address space, in slots of
//! [`STRIDE`] bytes that are committed as the pool grows and never unmapped. A freed
//! record's slot is reused for a later fiber. So no pointer to a record ever dangles:
//! code that still holds one (a stale handle, a racing thread) reads a record-shaped
//! slot, never freed memory.
//!
//! # A handle is an index and a generation
//!
//! The `LPVOID` that `CreateFiber` and `ConvertThreadToFiber` return is not a pointer.
//! It is `generation << 32 | index`: the slot's index, and a per-slot counter that
//! goes up each time the slot gets a new handle. The slot stores the handle it issued
//! (`FiberRecord::handle`), or [`NO_HANDLE`] when it has none (freed, or a thread's
//! own record while the thread is not a fiber). A handle is valid when its index is
//! below the pool's length and its slot stores exactly that value: a bounds check and
//! one compare, before any other field is read. A handle to a deleted fiber therefore
//! fails, and never reaches the slot's next fiber (that one has another generation).
//! Generations are 32 bits, so one slot would have to be reused four billion times for
//! an old handle to match again.
//!
//! Reading `handle` through a stale index is safe because the slot stays mapped and
//! `handle` is an atomic. A thread that validated a handle and then lost a race with
//! `DeleteFiber` and a new `CreateFiber` on the same slot is caught by the switch and
//! by `DeleteFiber`, which check the handle again once they own the record (see
//! `fiber::begin_switch`).

use crate::error::Error;
use crate::fiber::FiberRecord;
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering::*};
use std::sync::Mutex;

/// Bytes from one record to the next: the record, rounded up to cache lines.
pub(crate) const STRIDE: usize = core::mem::size_of::<FiberRecord>().div_ceil(64) * 64;
// docs/runtime.md gives what a green thread's record costs.
const _: () = assert!(STRIDE == 192);

/// What `FiberRecord::handle` holds when the record has no valid handle. Its index
/// part is never below the pool's length, so it matches no handle a caller can pass.
pub(crate) const NO_HANDLE: u64 = u64::MAX;

/// Records the pool can hold, tried largest first (tools such as valgrind limit the
/// address space a process may reserve).
const RESERVE: [usize; 4] = [1 << 22, 1 << 18, 1 << 14, 1 << 10];
/// Records committed at a time.
const GROW: usize = 1024;

struct Pool {
    /// The reservation (null until the first record).
    base: AtomicPtr<u8>,
    /// Slots ever handed out; slots below it are committed and hold a record (live or
    /// freed). Stored with Release after the slot is committed.
    len: AtomicU32,
}

static POOL: Pool = Pool {
    base: AtomicPtr::new(core::ptr::null_mut()),
    len: AtomicU32::new(0),
};

/// Freed slots any thread may reuse, and what the pool has reserved and committed.
struct Shared {
    free: Vec<u32>,
    reserved: usize,
    committed: usize,
}

static SHARED: Mutex<Shared> = Mutex::new(Shared {
    free: Vec::new(),
    reserved: 0,
    committed: 0,
});

/// The record a handle names, if the handle is valid (see the module comment).
#[inline(always)]
pub(crate) fn lookup(handle: u64) -> Option<*mut FiberRecord> {
    let index = handle as u32;
    if index >= POOL.len.load(Acquire) {
        return None;
    }
    let rec = slot(index);
    // SAFETY: slots below `len` are committed and stay mapped; `handle` is an atomic.
    if unsafe { (*rec).handle.load(Relaxed) } != handle {
        return None;
    }
    Some(rec)
}

/// Why `handle` is not valid: it named a fiber that no longer has it (deleted, or a
/// thread that converted back), or it was never a handle at all.
#[cold]
#[inline(never)]
pub(crate) fn invalid(handle: u64) -> Error {
    if handle == 0 {
        return Error::InvalidParameter("fiber handle is NULL");
    }
    let (index, generation) = (handle as u32, (handle >> 32) as u32);
    if generation != 0 && index < POOL.len.load(Acquire) {
        // SAFETY: as in `lookup`.
        let issued = unsafe { (*slot(index)).generation.load(Relaxed) };
        if generation <= issued {
            return Error::StaleHandle;
        }
    }
    Error::InvalidParameter("not a fiber handle")
}

/// The slot at `index` (below `len`).
#[inline(always)]
fn slot(index: u32) -> *mut FiberRecord {
    let base = POOL.base.load(Relaxed);
    base.wrapping_add(index as usize * STRIDE).cast()
}

/// A slot for a new record: one this thread freed (`cache`), else a shared one, else a
/// fresh one. Its memory holds a previous record (whose `handle` is [`NO_HANDLE`]) or
/// zeroes; the caller initialises it with `fiber::init`.
pub(crate) fn alloc(cache: Option<&mut Vec<u32>>) -> Result<*mut FiberRecord, Error> {
    if let Some(index) = cache.and_then(|c| c.pop()) {
        return Ok(slot(index));
    }
    let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(index) = s.free.pop() {
        return Ok(slot(index));
    }
    let len = POOL.len.load(Relaxed) as usize;
    if len == s.committed {
        grow(&mut s)?;
    }
    // Release: a thread that sees the new length (to validate a handle) sees the slot
    // committed.
    POOL.len.store(len as u32 + 1, Release);
    Ok(slot(len as u32))
}

/// Returns a freed record's slot (its handle already [`NO_HANDLE`]) for reuse: to this
/// thread's `cache` while it has room for `keep`, else to every thread.
pub(crate) fn free(rec: *mut FiberRecord, cache: Option<&mut Vec<u32>>, keep: usize) {
    // SAFETY: `rec` is a slot of the pool: its index is written once, at `init`.
    let index = unsafe { (*rec).index };
    match cache {
        Some(c) if c.len() < keep => c.push(index),
        _ => SHARED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .free
            .push(index),
    }
}

/// Hands a thread's cached slots to every thread (the thread is ending).
pub(crate) fn give_back(cache: &mut Vec<u32>) {
    if cache.is_empty() {
        return;
    }
    SHARED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .free
        .append(cache);
}

/// The index of the slot `rec` (for `fiber::init`).
pub(crate) fn index_of(rec: *mut FiberRecord) -> u32 {
    ((rec as usize - POOL.base.load(Relaxed) as usize) / STRIDE) as u32
}

/// Commits [`GROW`] more slots, reserving the address space first if needed.
fn grow(s: &mut Shared) -> Result<(), Error> {
    if s.reserved == 0 {
        let (base, records) = RESERVE
            .into_iter()
            .find_map(|records| {
                // SAFETY: reserves address space only (PROT_NONE, no memory).
                let p = unsafe {
                    libc::mmap(
                        core::ptr::null_mut(),
                        records * STRIDE,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                (p != libc::MAP_FAILED).then_some((p.cast::<u8>(), records))
            })
            .ok_or(Error::OutOfMemory(std::io::Error::last_os_error()))?;
        POOL.base.store(base, Relaxed);
        s.reserved = records;
    }
    if s.committed == s.reserved {
        return Err(Error::TooManyFibers);
    }
    let more = GROW.min(s.reserved - s.committed);
    let at = POOL.base.load(Relaxed).wrapping_add(s.committed * STRIDE);
    // SAFETY: the range lies inside our reservation and holds no record yet.
    if unsafe { libc::mprotect(at.cast(), more * STRIDE, libc::PROT_READ | libc::PROT_WRITE) } != 0
    {
        return Err(Error::OutOfMemory(std::io::Error::last_os_error()));
    }
    s.committed += more;
    Ok(())
}
