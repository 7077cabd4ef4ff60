//! Build script of weft-cli: compiles the benchmark peers.
//!
//! * `peers/peers.c` (always): the glibc ucontext, pthread and `__thread`
//!   peers, at -O2, into a static library linked into the `weft` binary.
//! * `examples/c/job_system.c` (always), twice: on weft's fibers and on ucontext
//!   (`-DJOBS_UCONTEXT`), as the library functions `peer_jobs_weft` and
//!   `peer_jobs_ucontext` (`-DJOBS_NO_MAIN`) that the fibers suite's job-system
//!   rows run.
//! * `peers/fcontext.cpp` (only when Boost.Context is installed): the
//!   `boost-fcontext` switch peer. We look for the header
//!   `boost/context/detail/fcontext.hpp` and the shared library
//!   `libboost_context.so` in the usual system directories; when both are
//!   there we compile the peer, link `boost_context` and set the cfg
//!   `weft_have_boost`. When they are not, the bench prints the row as
//!   "not installed" (install with `apt-get install libboost-context-dev`,
//!   then `cargo clean -p weft-cli`: the script does not watch for it).

use std::path::{Path, PathBuf};

const INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

fn find_boost_context() -> Option<(PathBuf, PathBuf)> {
    let include = INCLUDE_DIRS
        .iter()
        .map(Path::new)
        .find(|d| d.join("boost/context/detail/fcontext.hpp").is_file())?;
    let lib = LIB_DIRS
        .iter()
        .map(Path::new)
        .find(|d| d.join("libboost_context.so").exists())?;
    Some((include.to_path_buf(), lib.to_path_buf()))
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(weft_have_boost)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=peers/peers.c");
    println!("cargo::rerun-if-changed=peers/fcontext.cpp");
    println!("cargo::rerun-if-changed=../../include/weft/fibers.h");

    cc::Build::new()
        .file("peers/peers.c")
        .include("../../include")
        .opt_level(2)
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .compile("weft_peers");

    println!("cargo::rerun-if-changed=../../examples/c/job_system.c");
    for (name, defines) in [
        ("weft_jobs_weft", &[("JOBS_ENTRY", "peer_jobs_weft")][..]),
        (
            "weft_jobs_ucontext",
            &[("JOBS_ENTRY", "peer_jobs_ucontext"), ("JOBS_UCONTEXT", "1")][..],
        ),
    ] {
        let mut b = cc::Build::new();
        b.file("../../examples/c/job_system.c")
            .include("../../include")
            .opt_level(2)
            .define("JOBS_NO_MAIN", None)
            .warnings(true);
        for (k, v) in defines {
            b.define(k, *v);
        }
        b.compile(name);
    }

    match find_boost_context() {
        Some((include, lib)) => {
            // Watch only paths that exist: a missing one would make cargo
            // rerun this script on every build.
            let header = include.join("boost/context/detail/fcontext.hpp");
            println!("cargo::rerun-if-changed={}", header.display());
            println!("cargo::rerun-if-changed={}", lib.join("libboost_context.so").display());
            cc::Build::new()
                .cpp(true)
                .file("peers/fcontext.cpp")
                .include(&include)
                .opt_level(2)
                .warnings(true)
                .compile("weft_peers_fcontext");
            println!("cargo::rustc-link-search=native={}", lib.display());
            println!("cargo::rustc-link-lib=dylib=boost_context");
            println!("cargo::rustc-cfg=weft_have_boost");
        }
        None => println!(
            "cargo::warning=Boost.Context not found (no boost/context/detail/fcontext.hpp + \
             libboost_context.so): `weft bench fibers` will show the boost-fcontext row as \
             \"not installed\"; install libboost-context-dev, then `cargo clean -p weft-cli` and rebuild to measure it"
        ),
    }
}
