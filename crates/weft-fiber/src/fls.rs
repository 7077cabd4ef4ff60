//! Fiber-local storage: `FlsAlloc`, `FlsGetValue`, `FlsSetValue`, `FlsFree`.
//!
//! Indexes run from 1 to [`FLS_MAXIMUM_AVAILABLE`] (4080, the Windows 10 figure); index 0
//! is never handed out, as on Windows. Which indexes are allocated, and their callbacks,
//! are process-wide tables of atomics.
//!
//! Each fiber's values live in a [`FlsStorage`] it gets on its first non-null
//! `FlsSetValue` (a fiber that never sets a value costs nothing): 64 lazily allocated
//! chunks of 64 slots. A read is a handful of dependent loads and no lock:
//! thread block -> current fiber -> storage -> chunk -> slot.
//!
//! `FlsFree` must call the index's callback for *every* fiber holding a value, so every
//! storage is also on a process-wide list (`STORAGES`), under a mutex taken only when a
//! storage is created or freed and by `FlsFree`. Slots are atomics so that `FlsFree` can
//! take values out of fibers running on other threads without a data race.
//!
//! Callbacks run for non-null values on `DeleteFiber`, on thread exit (the fiber running
//! then and the thread's own fiber), on `ConvertFiberToThread`, and on `FlsFree`.

use crate::error::Error;
use crate::fiber::FiberRecord;
use crate::thread;
use crate::tls;
use core::ffi::c_void;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// The number of FLS indexes a process can hold at once (1..=4080).
pub const FLS_MAXIMUM_AVAILABLE: u32 = 4080;
/// What `FlsAlloc` returns when every index is taken.
pub const FLS_OUT_OF_INDEXES: u32 = 0xFFFF_FFFF;

/// An FLS callback: called with a fiber's non-null value when the value goes away.
pub type FlsCallback = unsafe extern "C" fn(*mut c_void);

const CHUNK: usize = 64;
const CHUNKS: usize = 64;
const SLOTS: usize = CHUNK * CHUNKS; // 4096 >= 4081

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
fn is_allocated(index: u32) -> bool {
    let i = index as usize;
    index != 0
        && index <= FLS_MAXIMUM_AVAILABLE
        && ALLOCATED[i / 64].load(Acquire) & (1 << (i % 64)) != 0
}

fn bad_index() -> Error {
    Error::InvalidParameter(
        "FLS index: use an index FlsAlloc returned and has not been freed (1..=4080)",
    )
}

/// Allocates an index (Windows `FlsAlloc`). `callback` runs for each non-null value
/// when it goes away.
pub fn alloc(callback: Option<FlsCallback>) -> Result<u32, Error> {
    let _g = ALLOC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for index in 1..=FLS_MAXIMUM_AVAILABLE {
        let i = index as usize;
        let word = &ALLOCATED[i / 64];
        if word.load(Relaxed) & (1 << (i % 64)) == 0 {
            CALLBACKS[i].store(callback.map_or(0, |f| f as usize), Relaxed);
            word.fetch_or(1 << (i % 64), Release);
            return Ok(index);
        }
    }
    Err(Error::InvalidParameter(
        "FLS: all 4080 indexes are in use; free some with FlsFree",
    ))
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
    if !is_allocated(index) {
        return Err(bad_index());
    }
    let f = owner();
    if f.is_null() {
        return Ok(ptr::null_mut());
    }
    let i = index as usize;
    // SAFETY: `f` is the running fiber (or this thread's record), alive while we run.
    unsafe {
        let s = (*f).fls.load(Acquire);
        if s.is_null() {
            return Ok(ptr::null_mut());
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
    if !is_allocated(index) {
        return Err(bad_index());
    }
    let mut f = owner();
    if f.is_null() {
        if value.is_null() {
            return Ok(());
        }
        f = thread::ensure_main(thread::ensure());
    }
    let i = index as usize;
    // SAFETY: `f` is the running fiber (or this thread's record); only the fiber itself
    // creates its storage and chunks, so these plain check-then-store steps do not race.
    unsafe {
        let mut s = (*f).fls.load(Acquire);
        if s.is_null() {
            if value.is_null() {
                return Ok(());
            }
            s = Box::into_raw(Box::new(FlsStorage {
                chunks: [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS],
            }));
            STORAGES.lock().unwrap_or_else(|e| e.into_inner()).0.push(s);
            (*f).fls.store(s, Release);
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

/// Runs the callbacks for `rec`'s non-null values and clears them (thread exit).
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
