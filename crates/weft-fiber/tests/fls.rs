//! Fiber-local storage through the Windows API, as Windows behaves: a new fiber has no
//! FLS until it stores a value, per-fiber values, callbacks on delete / free / thread
//! exit, any index below the limit usable, errors for indexes outside it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Mutex;
use weft_fiber::error_codes::*;
use weft_fiber::win::*;

/// FLS indexes and callback counters are process-wide; tests here take turns.
static SERIAL: Mutex<()> = Mutex::new(());
static FREED: AtomicUsize = AtomicUsize::new(0);
static FREED_SUM: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn count_free(v: *mut c_void) {
    FREED.fetch_add(1, SeqCst);
    FREED_SUM.fetch_add(v as usize, SeqCst);
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    FREED.store(0, SeqCst);
    FREED_SUM.store(0, SeqCst);
    g
}

static mut HOME: LPVOID = std::ptr::null_mut();
static mut INDEX: DWORD = 0;
static mut SEEN: usize = usize::MAX;

/// Reads the slot (NULL, and ERROR_INVALID_PARAMETER: a new fiber has no FLS yet),
/// stores its param there, goes home, then checks its value survived.
unsafe extern "C" fn reader(param: LPVOID) {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        SetLastError(0);
        SEEN = FlsGetValue(INDEX) as usize;
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        assert_eq!(FlsSetValue(INDEX, param), TRUE);
        SwitchToFiber(HOME);
        assert_eq!(FlsGetValue(INDEX), param, "value survived switches");
        SwitchToFiber(HOME);
        unreachable!();
    }
}

#[test]
fn values_are_per_fiber_and_callbacks_run_on_delete_and_free() {
    let _g = serial();
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    std::thread::spawn(|| unsafe {
        HOME = ConvertThreadToFiber(std::ptr::null_mut());
        INDEX = FlsAlloc(Some(count_free));
        assert!(INDEX >= 1 && INDEX < FLS_MAXIMUM_AVAILABLE);
        assert_eq!(FlsSetValue(INDEX, 1000 as LPVOID), TRUE);
        let a = CreateFiber(64 * 1024, Some(reader), 7 as LPVOID);
        let b = CreateFiber(64 * 1024, Some(reader), 11 as LPVOID);
        SwitchToFiber(a);
        assert_eq!(std::ptr::read(&raw const SEEN), 0, "a new fiber reads NULL");
        SwitchToFiber(b);
        assert_eq!(std::ptr::read(&raw const SEEN), 0, "a new fiber reads NULL");
        assert_eq!(
            FlsGetValue(INDEX) as usize,
            1000,
            "the thread's fiber kept its own value"
        );
        SwitchToFiber(a);
        SwitchToFiber(b);
        DeleteFiber(a);
        assert_eq!(FREED.load(SeqCst), 1);
        assert_eq!(FREED_SUM.load(SeqCst), 7);
        assert_eq!(FlsFree(INDEX), TRUE); // b (11) and the thread's fiber (1000)
        assert_eq!(FREED.load(SeqCst), 3);
        assert_eq!(FREED_SUM.load(SeqCst), 7 + 11 + 1000);
        SetLastError(1);
        assert_eq!(FlsGetValue(INDEX), std::ptr::null_mut());
        assert_eq!(
            GetLastError(),
            ERROR_SUCCESS,
            "a freed index reads NULL, as on Windows"
        );
        DeleteFiber(b);
        assert_eq!(FREED.load(SeqCst), 3, "FlsFree already took b's value");
        // A reallocated index reads NULL everywhere.
        let again = FlsAlloc(None);
        assert_eq!(FlsGetValue(again), std::ptr::null_mut());
        assert_eq!(GetLastError(), ERROR_SUCCESS);
        assert_eq!(FlsFree(again), TRUE);
        assert_eq!(ConvertFiberToThread(), TRUE);
    })
    .join()
    .unwrap();
}

#[test]
fn bad_indexes_are_invalid_parameters() {
    let _g = serial();
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        for bad in [
            0,
            FLS_MAXIMUM_AVAILABLE,
            FLS_MAXIMUM_AVAILABLE + 1,
            FLS_OUT_OF_INDEXES,
        ] {
            SetLastError(0);
            assert_eq!(FlsGetValue(bad), std::ptr::null_mut());
            assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
            SetLastError(0);
            assert_eq!(FlsSetValue(bad, 1 as LPVOID), FALSE);
            assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
            SetLastError(0);
            assert_eq!(FlsFree(bad), FALSE);
            assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        }
        let i = FlsAlloc(None);
        assert_eq!(FlsFree(i), TRUE);
        assert_eq!(FlsFree(i), FALSE, "double free");
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
    }
}

#[test]
fn any_index_below_the_limit_can_be_set_and_read_as_on_windows() {
    let _g = serial();
    // SAFETY: FLS calls with plain values, on a thread of our own.
    std::thread::spawn(|| unsafe {
        // Never allocated: FlsFree refuses it, get and set work.
        let top = FLS_MAXIMUM_AVAILABLE - 1;
        assert_eq!(FlsFree(top), FALSE);
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        SetLastError(1);
        assert_eq!(FlsGetValue(top), std::ptr::null_mut());
        assert_eq!(GetLastError(), ERROR_SUCCESS);
        assert_eq!(FlsSetValue(top, 0x217 as LPVOID), TRUE);
        SetLastError(1);
        assert_eq!(FlsGetValue(top) as usize, 0x217);
        assert_eq!(GetLastError(), ERROR_SUCCESS);
        // Freed: reads NULL, can be set again.
        let i = FlsAlloc(Some(count_free));
        assert_eq!(FlsSetValue(i, 3 as LPVOID), TRUE);
        assert_eq!(FlsFree(i), TRUE);
        assert_eq!(
            FREED.load(SeqCst),
            1,
            "FlsFree ran the callback for the value"
        );
        SetLastError(1);
        assert_eq!(FlsGetValue(i), std::ptr::null_mut());
        assert_eq!(GetLastError(), ERROR_SUCCESS);
        assert_eq!(FlsSetValue(i, 4 as LPVOID), TRUE);
        assert_eq!(FlsGetValue(i) as usize, 4);
        // Values under indexes that are not allocated have no callback.
        assert_eq!(FlsSetValue(i, std::ptr::null_mut()), TRUE);
        assert_eq!(FlsSetValue(top, std::ptr::null_mut()), TRUE);
    })
    .join()
    .unwrap();
    assert_eq!(FREED.load(SeqCst), 1);
}

#[test]
fn a_thread_that_never_converts_has_fls_and_its_callbacks_run_at_exit() {
    let _g = serial();
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    let i = unsafe { FlsAlloc(Some(count_free)) };
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or deliberately bad ones, which the API must refuse); FLS values are integers never
    // dereferenced.
    std::thread::spawn(move || unsafe {
        assert_eq!(IsThreadAFiber(), FALSE);
        assert_eq!(FlsGetValue(i), std::ptr::null_mut());
        assert_eq!(FlsSetValue(i, 5 as LPVOID), TRUE);
        assert_eq!(FlsGetValue(i) as usize, 5);
        // Converting keeps the thread's values.
        assert!(!ConvertThreadToFiber(std::ptr::null_mut()).is_null());
        assert_eq!(FlsGetValue(i) as usize, 5);
    })
    .join()
    .unwrap();
    assert_eq!(FREED.load(SeqCst), 1, "thread exit ran the callback");
    assert_eq!(FREED_SUM.load(SeqCst), 5);
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe { assert_eq!(FlsFree(i), TRUE) };
}

#[test]
fn callbacks_run_for_the_fiber_running_when_its_thread_exits() {
    let _g = serial();
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    let i = unsafe { FlsAlloc(Some(count_free)) };
    let key = weft_fiber::FlsKey::new(None).unwrap();
    let k2 = key.index();
    INDEX2.store(i as usize, SeqCst);
    K2.store(k2 as usize, SeqCst);
    // A pthread, not a std::thread: ending a thread from a fiber skips std's own
    // bookkeeping frames, so JoinHandle::join would panic (documented in weft-fiber).
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        let mut th: libc::pthread_t = 0;
        assert_eq!(
            libc::pthread_create(
                &mut th,
                std::ptr::null(),
                converts_and_runs_a_returning_fiber,
                std::ptr::null_mut()
            ),
            0
        );
        assert_eq!(libc::pthread_join(th, std::ptr::null_mut()), 0);
    }
    // As on Windows, the thread's end runs the callbacks of the fiber running then
    // only; the thread's own fiber keeps its value (its record stays until DeleteFiber),
    // and FlsFree reaches it.
    assert_eq!(FREED.load(SeqCst), 1, "the returning fiber's callback ran");
    assert_eq!(FREED_SUM.load(SeqCst), 23);
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe { assert_eq!(FlsFree(i), TRUE) };
    assert_eq!(
        FREED.load(SeqCst),
        2,
        "FlsFree reached the thread fiber's value"
    );
    assert_eq!(FREED_SUM.load(SeqCst), 123);
}

extern "C" fn converts_and_runs_a_returning_fiber(_: *mut c_void) -> *mut c_void {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        assert!(!ConvertThreadToFiber(std::ptr::null_mut()).is_null());
        assert_eq!(
            FlsSetValue(INDEX2.load(SeqCst) as DWORD, 100 as LPVOID),
            TRUE
        );
        let f = CreateFiber(64 * 1024, Some(ends_thread), 23 as LPVOID);
        SwitchToFiber(f);
        eprintln!("the fiber's return should have ended this thread");
        std::process::abort();
    }
}

static INDEX2: AtomicUsize = AtomicUsize::new(0);
static K2: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn ends_thread(param: LPVOID) {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        assert_eq!(FlsSetValue(INDEX2.load(SeqCst) as DWORD, param), TRUE);
        assert_eq!(FlsGetValue(K2.load(SeqCst) as DWORD), std::ptr::null_mut());
    }
    // Returning ends the thread, as on Windows.
}
