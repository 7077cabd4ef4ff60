//! A quick look at switch, create and FLS costs (the full comparison is `weft bench fibers`).
use std::ffi::c_void;
use std::time::Instant;
use weft_fiber::win::*;

static mut MAIN: LPVOID = std::ptr::null_mut();
unsafe extern "C" fn bounce(_: LPVOID) {
    loop {
        unsafe { SwitchToFiber(MAIN) };
    }
}
unsafe extern "C" fn back(_: LPVOID) {
    unsafe { SwitchToFiber(MAIN) };
}

fn main() {
    unsafe {
        MAIN = ConvertThreadToFiber(std::ptr::null_mut());
        let f = CreateFiber(65536, Some(bounce), std::ptr::null_mut());
        for round in 0..3 {
            let n = 10_000_000u64;
            let t = Instant::now();
            for _ in 0..n {
                SwitchToFiber(f);
            }
            let sw = t.elapsed().as_nanos() as f64 / (2 * n) as f64;
            let r = weft_fiber::raw::pingpong(n).as_nanos() as f64 / (2 * n) as f64;
            let t = Instant::now();
            for _ in 0..1_000_000 {
                let g = CreateFiber(65536, Some(back), std::ptr::null_mut());
                SwitchToFiber(g);
                DeleteFiber(g);
            }
            let cr = t.elapsed().as_nanos() as f64 / 1e6;
            let k = FlsAlloc(None);
            FlsSetValue(k, 42 as *mut c_void);
            let t = Instant::now();
            let mut acc = 0usize;
            for _ in 0..n {
                acc = acc.wrapping_add(
                    std::hint::black_box(FlsGetValue(std::hint::black_box(k))) as usize
                );
            }
            let fl = t.elapsed().as_nanos() as f64 / n as f64;
            FlsFree(k);
            println!("round {round}: SwitchToFiber {sw:.2} ns, raw switch {r:.2} ns, create+switch+delete {cr:.1} ns, FlsGetValue {fl:.2} ns ({acc})");
        }
    }
}
