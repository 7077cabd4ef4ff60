//! Fibers shared by many threads: atomic ownership under contention, migration,
//! failed activations, deleting busy and running fibers.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;
use weft_fiber::win::*;

thread_local! {
    static HOME: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Reads this OS thread's home fiber. Not inlined, so the thread-local is looked up on
/// whichever thread the (migrating) fiber runs on now.
#[inline(never)]
fn home() -> LPVOID {
    HOME.with(|h| h.get()) as LPVOID
}

struct Pool {
    inside: Vec<AtomicBool>,
    entries: AtomicU64,
    overlaps: AtomicU64,
}

static mut POOL: *const Pool = std::ptr::null();

unsafe extern "C" fn pool_fiber(param: LPVOID) {
    let i = param as usize;
    loop {
        // SAFETY: POOL is set to a leaked (never freed) Pool before any fiber runs.
        let pool = unsafe { &*POOL };
        if pool.inside[i].swap(true, SeqCst) {
            pool.overlaps.fetch_add(1, SeqCst);
        }
        pool.entries.fetch_add(1, SeqCst);
        for _ in 0..(i * 7) % 50 {
            std::hint::spin_loop();
        }
        pool.inside[i].store(false, SeqCst);
        // SAFETY: the Windows fiber calls take handles this test created and has not
        // deleted (or, where the test says so, deliberately bad ones, which the API must
        // refuse), and FLS values are integers it never dereferences.
        unsafe { SwitchToFiber(home()) };
    }
}

#[test]
fn many_threads_contending_for_the_same_fibers_never_run_one_twice() {
    const THREADS: usize = 4;
    const FIBERS: usize = 3; // fewer fibers than threads: lots of contention
    let rounds: usize = std::env::var("WEFT_STRESS_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let pool = Box::leak(Box::new(Pool {
        inside: (0..FIBERS).map(|_| AtomicBool::new(false)).collect(),
        entries: AtomicU64::new(0),
        overlaps: AtomicU64::new(0),
    }));
    // SAFETY: set once, before any fiber that reads it is created.
    unsafe { POOL = pool };
    let fibers: Arc<Vec<usize>> = Arc::new(
        (0..FIBERS)
            // SAFETY: the Windows fiber calls take handles this test created and has not
            // deleted (or deliberately bad ones, which the API must refuse); FLS values are
            // integers never dereferenced.
            .map(|i| unsafe { CreateFiber(64 * 1024, Some(pool_fiber), i as LPVOID) } as usize)
            .collect(),
    );
    let ok = Arc::new(AtomicU64::new(0));
    let busy = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (fibers, ok, busy) = (fibers.clone(), ok.clone(), busy.clone());
        // SAFETY: the Windows fiber calls take handles this test created and has not
        // deleted (or, where the test says so, deliberately bad ones, which the API must
        // refuse), and FLS values are integers it never dereferences.
        handles.push(std::thread::spawn(move || unsafe {
            let me = ConvertThreadToFiber(std::ptr::null_mut());
            HOME.with(|h| h.set(me as usize));
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
            let (mut mine_ok, mut mine_busy) = (0u64, 0u64);
            for _ in 0..rounds {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let f = fibers[(rng % FIBERS as u64) as usize] as LPVOID;
                SetLastError(0);
                SwitchToFiber(f);
                match GetLastError() {
                    0 => mine_ok += 1,
                    ERROR_BUSY => mine_busy += 1,
                    e => panic!("unexpected error {e}"),
                }
            }
            let s = stats(me);
            assert_eq!(
                s.activations, mine_ok,
                "every successful switch came back home once"
            );
            ok.fetch_add(mine_ok, SeqCst);
            busy.fetch_add(mine_busy, SeqCst);
            assert_eq!(ConvertFiberToThread(), TRUE);
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    let elapsed = started.elapsed().as_nanos() as u64;
    let (mut act, mut failed) = (0, 0);
    for &f in fibers.iter() {
        let s = stats(f as LPVOID);
        act += s.activations;
        failed += s.failed_activations;
        // A fiber runs on one thread at a time, so its slices never overlap: its run
        // time fits in the test's. (The public switch reads the clock before it takes
        // the fiber, and starts the slice no earlier than the end of the last one.)
        assert!(
            s.run_time_ns <= elapsed,
            "fiber ran {} ns in a {elapsed} ns test",
            s.run_time_ns
        );
        // SAFETY: the Windows fiber calls take handles this test created and has not
        // deleted (or, where the test says so, deliberately bad ones, which the API must
        // refuse), and FLS values are integers it never dereferences.
        unsafe { DeleteFiber(f as LPVOID) };
    }
    assert_eq!(
        pool.overlaps.load(SeqCst),
        0,
        "a fiber ran on two threads at once"
    );
    assert_eq!(ok.load(SeqCst), act, "successful switches == activations");
    assert_eq!(
        pool.entries.load(SeqCst),
        act,
        "fiber entries == activations"
    );
    assert_eq!(
        busy.load(SeqCst),
        failed,
        "ERROR_BUSY returns == failed activations"
    );
    assert_eq!(act + failed, (THREADS * rounds) as u64);
    assert!(failed > 0, "the test produced contention");
}

fn stats(f: LPVOID) -> WeftFiberStats {
    let mut s = WeftFiberStats::default();
    // SAFETY: a live fiber handle and a local to fill in.
    assert_eq!(unsafe { weft_fiber_stats(f, &mut s) }, TRUE);
    s
}

static RUNNING_ELSEWHERE: AtomicUsize = AtomicUsize::new(0);
static RELEASE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn spin_until_released(_: LPVOID) {
    RUNNING_ELSEWHERE.store(1, SeqCst);
    while !RELEASE.load(SeqCst) {
        std::hint::spin_loop();
    }
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe { SwitchToFiber(home()) };
}

unsafe extern "C" fn straight_home(_: LPVOID) {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe { SwitchToFiber(home()) };
}

#[test]
fn a_fiber_running_elsewhere_cannot_be_switched_to_or_deleted() {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    let f = unsafe { CreateFiber(0, Some(spin_until_released), std::ptr::null_mut()) } as usize;
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or deliberately bad ones, which the API must refuse); FLS values are integers never
    // dereferenced.
    let runner = std::thread::spawn(move || unsafe {
        let me = ConvertThreadToFiber(std::ptr::null_mut());
        HOME.with(|h| h.set(me as usize));
        SwitchToFiber(f as LPVOID);
        assert_eq!(GetLastError(), 0);
    });
    while RUNNING_ELSEWHERE.load(SeqCst) == 0 {
        std::hint::spin_loop();
    }
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        let me = ConvertThreadToFiber(std::ptr::null_mut());
        assert!(!me.is_null());
        let mine = stats(me);
        SwitchToFiber(f as LPVOID);
        assert_eq!(GetLastError(), ERROR_BUSY);
        assert_eq!(stats(f as LPVOID).failed_activations, 1);
        assert_eq!(stats(f as LPVOID).state, 1, "running");
        // The refused switch left ours as it was (its statistics readable, still
        // running) and the thread able to switch: it timed and opened the switch
        // before it tried to take `f`, and undid both.
        let after = stats(me);
        assert_eq!((after.state, after.activations), (1, mine.activations));
        assert!(after.run_time_ns >= mine.run_time_ns);
        HOME.with(|h| h.set(me as usize));
        let g = CreateFiber(0, Some(straight_home), std::ptr::null_mut());
        SetLastError(0);
        SwitchToFiber(g);
        assert_eq!(GetLastError(), 0, "the next switch works");
        assert_eq!(stats(g).activations, 1);
        assert_eq!(stats(me).activations, mine.activations + 1);
        DeleteFiber(g);
        SetLastError(0);
        DeleteFiber(f as LPVOID);
        assert_eq!(GetLastError(), ERROR_BUSY, "deleting a running fiber fails");
        RELEASE.store(true, SeqCst);
        runner.join().unwrap();
        DeleteFiber(f as LPVOID);
        assert_eq!(
            GetLastError(),
            ERROR_BUSY,
            "unchanged: the delete succeeded"
        );
        assert_eq!(ConvertFiberToThread(), TRUE);
    }
}

static DELETED_SELF_RAN: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn deletes_itself(_: LPVOID) {
    DELETED_SELF_RAN.fetch_add(1, SeqCst);
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe { DeleteFiber(GetCurrentFiber()) };
    unreachable!("DeleteFiber of the running fiber ends the thread");
}

extern "C" fn thread_whose_fiber_deletes_itself(_: *mut c_void) -> *mut c_void {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        ConvertThreadToFiber(std::ptr::null_mut());
        let f = CreateFiber(64 * 1024, Some(deletes_itself), std::ptr::null_mut());
        SwitchToFiber(f);
    }
    std::process::abort(); // not reached
}

extern "C" fn thread_that_deletes_its_own_fiber(_: *mut c_void) -> *mut c_void {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    unsafe {
        ConvertThreadToFiber(std::ptr::null_mut());
        DELETED_SELF_RAN.fetch_add(10, SeqCst);
        DeleteFiber(GetCurrentFiber());
    }
    std::process::abort(); // not reached
}

#[test]
fn deleting_the_running_fiber_ends_the_thread() {
    for body in [
        thread_whose_fiber_deletes_itself as extern "C" fn(*mut c_void) -> *mut c_void,
        thread_that_deletes_its_own_fiber,
    ] {
        // SAFETY: the Windows fiber calls take handles this test created and has not
        // deleted (or, where the test says so, deliberately bad ones, which the API must
        // refuse), and FLS values are integers it never dereferences.
        unsafe {
            let mut th: libc::pthread_t = 0;
            assert_eq!(
                libc::pthread_create(&mut th, std::ptr::null(), body, std::ptr::null_mut()),
                0
            );
            assert_eq!(libc::pthread_join(th, std::ptr::null_mut()), 0);
        }
    }
    assert_eq!(DELETED_SELF_RAN.load(SeqCst), 11);
}

#[test]
fn errors_for_bad_handles_flags_and_conversions() {
    // SAFETY: the Windows fiber calls take handles this test created and has not deleted
    // (or, where the test says so, deliberately bad ones, which the API must refuse), and
    // FLS values are integers it never dereferences.
    std::thread::spawn(|| unsafe {
        SetLastError(0);
        SwitchToFiber(std::ptr::null_mut());
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        assert_eq!(ConvertFiberToThread(), FALSE);
        assert_eq!(GetLastError(), ERROR_ALREADY_THREAD);
        assert!(ConvertThreadToFiberEx(std::ptr::null_mut(), 0x80).is_null());
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        assert!(CreateFiber(0, None, std::ptr::null_mut()).is_null());
        assert_eq!(GetLastError(), ERROR_INVALID_PARAMETER);
        let me = ConvertThreadToFiberEx(42 as LPVOID, FIBER_FLAG_FLOAT_SWITCH);
        assert!(!me.is_null());
        assert_eq!(GetFiberData() as usize, 42);
        assert_eq!(GetCurrentFiber(), me);
        assert_eq!(IsThreadAFiber(), TRUE);
        assert!(ConvertThreadToFiber(std::ptr::null_mut()).is_null());
        assert_eq!(GetLastError(), ERROR_ALREADY_FIBER);
        let mut junk = [0u64; 64];
        SetLastError(0);
        SwitchToFiber(junk.as_mut_ptr().cast());
        assert_eq!(
            GetLastError(),
            ERROR_INVALID_PARAMETER,
            "a pointer that is not a fiber"
        );
        assert_eq!(ConvertFiberToThread(), TRUE);
        assert_eq!(IsThreadAFiber(), FALSE);
        assert!(GetCurrentFiber().is_null());
    })
    .join()
    .unwrap();
}
