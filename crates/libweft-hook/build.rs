//! The shared library's soname: the name C programs link with (`-lweft-hook`), not
//! cargo's file name.
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libweft-hook.so");
}
