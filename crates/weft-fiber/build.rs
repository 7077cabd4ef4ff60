//! Sets `cfg(weft_asan)` when the crate is compiled with AddressSanitizer
//! (`-Zsanitizer=address`, nightly): the context switch then tells ASan about each stack
//! switch (`src/sanitizer.rs`). Other builds have no such code at all.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(weft_asan)");
    println!("cargo::rerun-if-changed=build.rs");
    let asan = std::env::var("CARGO_CFG_SANITIZE")
        .is_ok_and(|s| s.split(',').any(|s| s.trim() == "address"));
    if asan {
        println!("cargo::rustc-cfg=weft_asan");
    }
}
