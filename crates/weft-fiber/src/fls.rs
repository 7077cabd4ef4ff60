//! Fiber-local storage: `FlsAlloc`, `FlsGetValue`, `FlsSetValue`, `FlsFree`.
//!
//! # Indexes
//!
//! Indexes run from 1 to 4079: `FLS_MAXIMUM_AVAILABLE` (4080, the Windows 10 figure)
//! slots, of which index 0 is never handed out, as on Windows. Which indexes are
//! allocated, and their callbacks, are process-wide tables of atomics. As on Windows,
//! `FlsGetValue` and `FlsSetValue` accept any index in that range, allocated or not (a
//! freed index reads NULL, and may be set); only `FlsFree` needs an allocated one. A
//! value stored under an index that is not allocated has no callback.
//!
//! # Storage
//!
//! Each fiber's values live in a [`FlsStorage`] (Windows: the fiber's FLS block): 64
//! lazily allocated chunks of 64 slots. A read is a handful of dependent loads and no
//! lock: thread block -> current fiber -> storage -> chunk -> slot.
//!
//! When a fiber gets its storage follows Windows. Every thread has one (its record's,
//! made on the first `FlsSetValue`; until then it reads as empty). A fiber made with
//! `CreateFiber` has none until it calls `FlsSetValue` (any value, NULL too) or
//! `FlsAlloc`; until then `FlsGetValue` fails with `ERROR_INVALID_PARAMETER`. A
//! converted thread's fiber uses the thread's.
//!
//! `FlsFree` must call the index's callback for *every* fiber holding a value, so every
//! storage is also on a process-wide list (`STORAGES`), under a mutex taken only when a
//! storage is created or freed and by `FlsFree`. Slots are atomics so that `FlsFree` can
//! take values out of fibers running on other threads without a data race.
//!
//! Callbacks run for non-null values on `DeleteFiber`, when a thread ends (for the fiber
//! running then, or the plain thread), on `FlsFree`, and at process exit for the fiber
//! that called `exit()`: where Windows runs them.

use crate::error::Error;
use crate::fiber::FiberRecord;
use crate::thread;
use crate::tls;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// FLS slots per fiber, as Windows counts them: index 0 is reserved, so a process can
/// hold 4079 indexes at once (1..=4079).
pub const FLS_MAXIMUM_AVAILABLE: u32 = 4080;
/// The highest index.
const MAX_INDEX: u32 = FLS_MAXIMUM_AVAILABLE - 1;
/// What `FlsAlloc` returns when every index is taken.
pub const FLS_OUT_OF_INDEXES: u32 = 0xFFFF_FFFF;

/// An FLS callback: called with a fiber's non-null value when the value goes away.
pub type FlsCallback = unsafe extern "C" fn(*mut c_void);

const CHUNK: usize = 64;
const CHUNKS: usize = 64;
const SLOTS: usize = CHUNK * CHUNKS; // 4096 >= 4080

type Chunk = [AtomicPtr<c_void>; CHUNK];

/// One fiber's values.
pub(crate) struct FlsStorage {
    chunks: [AtomicPtr<Chunk>; CHUNKS],
}

/// Bit i set: index i allocated. Bit 0 is never set.
static ALLOCATED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];
/// Callback of each index (0 = none).
static CALLBACKS: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Serialises FlsAlloc/FlsFree.
static ALLOC_LOCK: Mutex<()> = Mutex::new(());

/// Every live storage, for FlsFree.
struct Storages(Vec<*mut FlsStorage>);
// SAFETY: the pointers are only dereferenced under the mutex or by their owner.
unsafe impl Send for Storages {}
static STORAGES: Mutex<Storages> = Mutex::new(Storages(Vec::new()));

#[inline(always)]
fn in_range(index: u32) -> bool {
    index.wrapping_sub(1) < MAX_INDEX
}

#[inline(always)]
fn is_allocated(index: u32) -> bool {
    let i = index as usize;
    in_range(index) && ALLOCATED[i / 64].load(Acquire) & (1 << (i % 64)) != 0
}

fn bad_index() -> Error {
    Error::InvalidParameter("FLS index: use 1..=4079 (FlsFree: an index FlsAlloc returned)")
}

fn no_storage() -> Error {
    Error::InvalidParameter(
        "FLS: this fiber has stored no value yet (as on Windows, a new fiber's FLS exists \
         once it calls FlsSetValue or FlsAlloc)",
    )
}

/// Allocates an index (Windows `FlsAlloc`). `callback` runs for each non-null value
/// when it goes away. As on Windows, the calling fiber gets its FLS storage if it had
/// none.
pub fn alloc(callback: Option<FlsCallback>) -> Result<u32, Error> {
    let f = owner();
    // SAFETY: `f` is the running fiber or this thread's record, alive while we run. A
    // thread's record reads as having storage already.
    unsafe {
        if !f.is_null() && !(*f).is_thread_record() {
            storage(f);
        }
    }
    let _g = ALLOC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for index in 1..=MAX_INDEX {
        let i = index as usize;
        let word = &ALLOCATED[i / 64];
        if word.load(Relaxed) & (1 << (i % 64)) == 0 {
            CALLBACKS[i].store(callback.map_or(0, |f| f as usize), Relaxed);
            word.fetch_or(1 << (i % 64), Release);
            return Ok(index);
        }
    }
    Err(Error::NoFlsIndex)
}

/// Frees an index (Windows `FlsFree`): the callback runs for every fiber's non-null
/// value, and the slot reads NULL everywhere afterwards.
pub fn free(index: u32) -> Result<(), Error> {
    let cb;
    let mut values = Vec::new();
    {
        let _g = ALLOC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if !is_allocated(index) {
            return Err(bad_index());
        }
        let i = index as usize;
        ALLOCATED[i / 64].fetch_and(!(1 << (i % 64)), Release);
        cb = CALLBACKS[i].swap(0, Relaxed);
        let storages = STORAGES.lock().unwrap_or_else(|e| e.into_inner());
        for &s in &storages.0 {
            // SAFETY: storages on the list are live (removed under this mutex before
            // being freed).
            let chunk = unsafe { (*s).chunks[i / CHUNK].load(Acquire) };
            if !chunk.is_null() {
                // SAFETY: chunks live as long as their storage.
                let v = unsafe { (*chunk)[i % CHUNK].swap(ptr::null_mut(), AcqRel) };
                if !v.is_null() {
                    values.push(v);
                }
            }
        }
    }
    if cb != 0 {
        // SAFETY: the callback was registered as an FlsCallback.
        let cb: FlsCallback = unsafe { core::mem::transmute::<usize, FlsCallback>(cb) };
        for v in values {
            // SAFETY: calling the user's callback with the value it stored.
            unsafe { cb(v) };
        }
    }
    Ok(())
}

/// The fiber whose storage FLS calls on this thread use: the running fiber, or the
/// thread's own (implicit) record on a thread that is not a fiber.
#[inline(always)]
fn owner() -> *mut FiberRecord {
    let t = tls::thread();
    if t.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a non-null thread pointer is this thread's live state.
    unsafe {
        let cur = (*t).current;
        if cur.is_null() {
            (*t).main
        } else {
            cur
        }
    }
}

/// Reads the current fiber's value at `index` (Windows `FlsGetValue`).
#[inline(always)]
pub fn get(index: u32) -> Result<*mut c_void, Error> {
    if !in_range(index) {
        return Err(bad_index());
    }
    let f = owner();
    if f.is_null() {
        // A thread weft has not seen: it has FLS (every thread does), still empty.
        return Ok(ptr::null_mut());
    }
    let i = index as usize;
    // SAFETY: `f` is the running fiber (or this thread's record), alive while we run.
    unsafe {
        let s = (*f).fls.load(Acquire);
        if s.is_null() {
            return if (*f).is_thread_record() {
                // A thread's own record: its storage exists from the start on Windows.
                Ok(ptr::null_mut())
            } else {
                Err(no_storage())
            };
        }
        let chunk = (*s).chunks[i / CHUNK].load(Acquire);
        if chunk.is_null() {
            return Ok(ptr::null_mut());
        }
        Ok((*chunk)[i % CHUNK].load(Relaxed))
    }
}

/// Stores the current fiber's value at `index` (Windows `FlsSetValue`).
pub fn set(index: u32, value: *mut c_void) -> Result<(), Error> {
    if !in_range(index) {
        return Err(bad_index());
    }
    let mut f = owner();
    if f.is_null() {
        if value.is_null() {
            return Ok(());
        }
        f = thread::ensure_main(thread::ensure())?;
    }
    let i = index as usize;
    // SAFETY: `f` is the running fiber (or this thread's record); only the fiber itself
    // creates its storage and chunks, so these plain check-then-store steps do not race.
    unsafe {
        let mut s = (*f).fls.load(Acquire);
        if s.is_null() {
            if value.is_null() && (*f).is_thread_record() {
                // A thread's record reads as empty storage already.
                return Ok(());
            }
            s = storage(f);
        }
        let slot = &(*s).chunks[i / CHUNK];
        let mut chunk = slot.load(Acquire);
        if chunk.is_null() {
            if value.is_null() {
                return Ok(());
            }
            chunk = Box::into_raw(Box::new([const { AtomicPtr::new(ptr::null_mut()) }; CHUNK]));
            slot.store(chunk, Release);
        }
        (*chunk)[i % CHUNK].store(value, Relaxed);
    }
    Ok(())
}

/// `f`'s storage, made (empty, and put on the list `FlsFree` walks) if it has none.
///
/// # Safety
/// `f` is the running fiber or this thread's record: only it makes its own storage.
unsafe fn storage(f: *mut FiberRecord) -> *mut FlsStorage {
    // SAFETY: per the contract.
    unsafe {
        let s = (*f).fls.load(Acquire);
        if !s.is_null() {
            return s;
        }
        let s = Box::into_raw(Box::new(FlsStorage {
            chunks: [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS],
        }));
        STORAGES.lock().unwrap_or_else(|e| e.into_inner()).0.push(s);
        (*f).fls.store(s, Release);
        s
    }
}

/// Runs the callbacks for `rec`'s non-null values and clears them (thread or process
/// exit).
///
/// # Safety
/// `rec` is live and owned by the caller (running on this thread or not running at all).
pub(crate) unsafe fn run_callbacks(rec: *mut FiberRecord) {
    // SAFETY: per the contract.
    let s = unsafe { (*rec).fls.load(Acquire) };
    if s.is_null() {
        return;
    }
    for c in 0..CHUNKS {
        // SAFETY: `s` is live while `rec` is.
        let chunk = unsafe { (*s).chunks[c].load(Acquire) };
        if chunk.is_null() {
            continue;
        }
        for k in 0..CHUNK {
            // SAFETY: as above.
            let v = unsafe { (*chunk)[k].swap(ptr::null_mut(), AcqRel) };
            let index = c * CHUNK + k;
            if v.is_null() || !is_allocated(index as u32) {
                continue;
            }
            let cb = CALLBACKS[index].load(Relaxed);
            if cb != 0 {
                // SAFETY: registered as an FlsCallback; called with the stored value.
                unsafe { core::mem::transmute::<usize, FlsCallback>(cb)(v) };
            }
        }
    }
}

/// Runs the callbacks and frees `rec`'s storage (the fiber is being freed).
///
/// # Safety
/// As for [`run_callbacks`]; `rec` is not used for FLS afterwards.
pub(crate) unsafe fn run_callbacks_and_free(rec: *mut FiberRecord) {
    // SAFETY: per the contract.
    unsafe {
        run_callbacks(rec);
        // Only the fiber itself sets its storage (a store, on first use), and it is
        // gone: a load and a store do, with no locked instruction for the common
        // fiber that never used FLS.
        let s = (*rec).fls.load(Acquire);
        if s.is_null() {
            return;
        }
        (*rec).fls.store(ptr::null_mut(), Relaxed);
        {
            let mut list = STORAGES.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pos) = list.0.iter().position(|&p| p == s) {
                list.0.swap_remove(pos);
            }
        }
        let s = Box::from_raw(s);
        for c in &s.chunks {
            let chunk = c.load(Acquire);
            if !chunk.is_null() {
                drop(Box::from_raw(chunk));
            }
        }
    }
}
