//! `weft`: the command-line tool of the weft project.
//!
//! This file is only the command line (clap derive) and the dispatch:
//!
//! * `weft bench <suite> [--json] [--quick] [--plot DIR]` runs a benchmark suite,
//!   `weft bench plot FILE --out DIR` draws the charts of a saved run (see [`bench`],
//!   which holds these arguments too; one module per suite under `src/bench/`).
//! * `weft bench-worker <job> ...` is hidden from `--help`: it is how a suite
//!   re-executes this binary to run a workload in a fresh process (e.g. the
//!   "4 processes at once" rows of `bench fibers`). It prints one JSON line.
//! * `weft kv <subcommand>`: the weft-kv store (see [`kv`]: `serve`, `set`, `get`,
//!   `del`, `keys`, `stats`, `check`).
//!
//! Errors are printed as `weft: error: ...` on stderr with exit status 1 (2 for
//! `weft kv`, whose status 1 means "not found": see [`kv`]).

mod bench;
mod fs;
mod hookcalls;
mod introspect;
mod kv;
mod ps;
mod top;

// Link libweft's C entry points (SwitchToFiber, ...) into this binary: the C
// peers in peers/peers.c call them as a C program would.
use weft_capi as _;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "weft",
    version,
    about = "weft: fibers, green threads and a Redis-compatible store for Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a benchmark suite and print a table (or JSON lines with --json).
    Bench(bench::Args),
    /// List the processes using weft, or (with a PID) the fibers of one of them.
    Ps(ps::Args),
    /// Watch the fibers of a process, refreshing like top (q or Ctrl-C quits).
    Top(top::Args),
    /// The fibers of weft processes as files: DIR/<pid>/fibers/<id> (FUSE).
    #[command(subcommand)]
    Fs(fs::FsCommand),
    /// weft-kv, a key-value store shared by the processes of this machine (Redis
    /// protocol): run the server, or set, get, delete and list keys.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Internal: run one benchmark workload in this process and print one JSON line.
    #[command(name = "bench-worker", hide = true)]
    BenchWorker {
        #[command(subcommand)]
        job: bench::WorkerJob,
    },
}

/// The system-call layer (weft-hook) is linked for `weft bench runtime`'s hooked rows,
/// which turn it on for what they measure; it is off everywhere else, from before
/// `main` (and in this crate's unit tests, which have no `main` of ours).
#[used]
#[link_section = ".init_array"]
static HOOK_OFF: extern "C" fn() = {
    extern "C" fn off() {
        weft_hook::set_enabled(false);
    }
    off
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::main(args),
        Command::BenchWorker { job } => bench::run_worker(job),
        Command::Fs(cmd) => fs::run(cmd),
        Command::Kv(cmd) => return kv::run(cmd),
        Command::Ps(args) => ps::run(args),
        Command::Top(args) => top::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weft: error: {e}");
            ExitCode::FAILURE
        }
    }
}
