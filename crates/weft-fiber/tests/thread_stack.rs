//! `weft_fiber::thread_stack::pthread_create`, which libweft exports as `pthread_create`:
//! a thread that ends in a fiber it created leaves its converted fiber behind, and
//! another thread resumes it where it stopped, as on Windows; and the thread learns its
//! start stack from `pthread_getattr_np`.

use core::ffi::c_void;
use core::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use weft_fiber::win::*;

static THREAD_FIBER: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static BACK: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static RESUMED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn ends_the_thread(_: LPVOID) {
    // SAFETY: pthread_exit from a fiber ends the thread (weft's documented behaviour).
    unsafe { libc::pthread_exit(ptr::null_mut()) }
}

unsafe extern "C" fn thread_main(_: *mut c_void) -> *mut c_void {
    let local = [7u64; 16];
    // SAFETY: the fiber calls take handles this test made and has not deleted.
    unsafe {
        let me = ConvertThreadToFiber(ptr::null_mut());
        assert!(!me.is_null());
        THREAD_FIBER.store(me, SeqCst);
        let f = CreateFiber(0, Some(ends_the_thread), ptr::null_mut());
        assert!(!f.is_null());
        SwitchToFiber(f);
        // Resumed by the test's thread after this one ended.
        assert_eq!(core::hint::black_box(local), [7u64; 16]);
        RESUMED.fetch_add(1, SeqCst);
        SwitchToFiber(BACK.load(SeqCst));
        unreachable!("switched to again after the test deleted it");
    }
}

#[test]
fn a_converted_fiber_outlives_its_thread() {
    // SAFETY: the fiber calls take handles this test made and has not deleted; the
    // start routine is sound to call on a new thread.
    unsafe {
        let mut th: libc::pthread_t = 0;
        let rc = weft_fiber::thread_stack::pthread_create(
            &mut th,
            ptr::null(),
            Some(thread_main),
            ptr::null_mut(),
        );
        assert_eq!(rc, 0);
        assert_eq!(libc::pthread_join(th, ptr::null_mut()), 0);
        let back = ConvertThreadToFiber(ptr::null_mut());
        assert!(!back.is_null());
        BACK.store(back, SeqCst);
        SetLastError(0);
        SwitchToFiber(THREAD_FIBER.load(SeqCst));
        assert_eq!(GetLastError(), 0);
        assert_eq!(RESUMED.load(SeqCst), 1);
        DeleteFiber(THREAD_FIBER.load(SeqCst));
        assert_eq!(GetLastError(), 0);
        assert_eq!(ConvertFiberToThread(), TRUE);
    }
}

unsafe extern "C" fn reports_its_stack(_: *mut c_void) -> *mut c_void {
    let on_stack = 0u8;
    let here = core::hint::black_box(&on_stack) as *const u8 as usize;
    // SAFETY: an attribute object filled by pthread_getattr_np, then destroyed.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        assert_eq!(
            weft_fiber::thread_stack::pthread_getattr_np(libc::pthread_self(), &mut attr),
            0
        );
        let mut addr: *mut c_void = ptr::null_mut();
        let mut size = 0usize;
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        let lo = addr as usize;
        assert!(
            (lo..lo + size).contains(&here),
            "{here:#x} is not in the stack reported, {lo:#x}+{size:#x}"
        );
        assert_eq!(size, 512 * 1024);
    }
    ptr::null_mut()
}

#[test]
fn the_start_stack_has_the_size_asked_for_and_is_the_one_reported() {
    // SAFETY: an attribute object initialised here; a start routine sound to call.
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        assert_eq!(libc::pthread_attr_init(&mut attr), 0);
        assert_eq!(libc::pthread_attr_setstacksize(&mut attr, 512 * 1024), 0);
        let mut th: libc::pthread_t = 0;
        let rc = weft_fiber::thread_stack::pthread_create(
            &mut th,
            &attr,
            Some(reports_its_stack),
            ptr::null_mut(),
        );
        assert_eq!(rc, 0);
        assert_eq!(libc::pthread_join(th, ptr::null_mut()), 0);
        libc::pthread_attr_destroy(&mut attr);
    }
}
