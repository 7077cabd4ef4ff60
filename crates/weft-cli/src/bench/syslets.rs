//! The `syslets` suite of `weft bench`: the async-test of Ingo Molnar's syslet patches
//! ("Syslets, generic asynchronous system call support", linux-kernel, February 2007)
//! redone. open() + read() + close() of 1,000 small random files, cached and uncached,
//! done six ways side by side in one run:
//!
//! * `sync`: a plain loop of `openat(O_RDONLY)`, `read(4 KiB)`, `close` on one OS thread.
//! * `syslets-1-worker`: the same work as 1,000 syslets (`openat` -> `read` -> `close`,
//!   the descriptor feeding the read's and the close's argument, `SYSLET_STOP_ON_NEGATIVE`
//!   on the open) submitted from one green thread on a 1-worker runtime, which collects
//!   every completion (inline `Done`s and ring completions).
//! * `syslets-all-workers`: the files split over one submitting green thread per worker
//!   (a runtime of one worker per CPU), each with its own `Context`.
//! * `inline-floor`: what the opportunistic path itself costs, with no executor: per
//!   file the very calls a syslet's inline run makes when nothing blocks,
//!   `openat2(RESOLVE_CACHED)`, `preadv2(RWF_NOWAIT)` into a buffer of the file's own (as
//!   each syslet has), `close`, made by hand in a plain loop (falling back to the
//!   blocking call on `EAGAIN`, as the executor hands such an atom on). No syslet
//!   executor can run the cached case faster than this on one thread; the gap between
//!   it and `syslets-1-worker` is the executor's own cost. `inline-floor-all-threads`:
//!   the same calls with the files dealt out to one OS thread per CPU (started before
//!   the timed part, spinning until it starts): how far the kernel lets this work
//!   scale over the CPUs of one process (the descriptor table is shared), the ceiling
//!   of `syslets-all-workers`.
//! * `io_uring-raw`: a hand-written io_uring loop: per file an `IORING_OP_OPENAT` into a
//!   direct descriptor slot, linked (`IOSQE_IO_LINK`) to a `READ` with `IOSQE_FIXED_FILE`
//!   on that slot, hard-linked (`IOSQE_IO_HARDLINK`: a short read, the normal case for a
//!   file under 4 KiB, would otherwise cancel the close) to a `CLOSE` of the slot;
//!   [`IN_FLIGHT`] chains in flight, refilled as they complete.
//!
//! The files (1-4 KiB, random sizes and content; 100 with `--quick`) are created in a
//! directory under /var/tmp (not tmpfs: "uncached" needs a disk behind the page cache),
//! read in one fixed shuffled order by every implementation, and removed at the end.
//! Every pass checks that the bytes read add up to the files' sizes (and that every call
//! succeeded): a broken pass is an error, never a figure.
//!
//! Method: cached, one untimed pass of each implementation, then [`CACHED_ROUNDS`] rounds
//! in which each implementation runs one timed pass in turn (the first of a round
//! rotating); uncached, [`UNCACHED_ROUNDS`] such rounds, each pass preceded by the
//! eviction of the suite's own files from the page cache ([`evict`]: per file
//! `fdatasync`, then `posix_fadvise(POSIX_FADV_DONTNEED)`, then a check with `mincore`
//! that none of its pages is left) and by a one-file warm-up of the implementation on a
//! file in another directory, evicted too (so that the path a miss takes has run once
//! before the timer starts). Nothing else on the machine is evicted, and no privilege
//! is needed; the files' names and inodes stay cached, so an uncached pass waits for the
//! files' data only. A pass that starts with some pages still cached is counted and
//! reported under the table; where the first eviction leaves pages in the cache (tmpfs,
//! or a file system that ignores the advice), or with `--quick`, the uncached rows are
//! skipped (and say why). The figure of a row is the median pass. The syslet programs
//! are built once, before the passes, and re-run every pass (what building costs is
//! printed beside).
//!
//! JSON: name `cached` or `uncached`, value the median time per file (ns).
//!
//! `WEFT_BENCH_SYSLETS_SMOKE=1` runs every part, the uncached one too, with tiny sizes
//! (20 files, one timed round each): it proves in a second that the suite runs end to
//! end, as the tests do; its figures mean nothing.
//!
//! Diagnostics: with `WEFT_BENCH_TRACE=1` in the environment, every timed pass also
//! prints to stderr the process's CPU time and, per group of threads (by name), their
//! time on a CPU and waiting for one (schedstat); every syslets submitter prints when it
//! had submitted everything, its first completion, its end, how often it waited, and the
//! engine's counters (cumulative); the raw loop prints when its first chain was done.
//! Nothing of this changes what is measured (it is read outside the timed part, or
//! once per completion already taken).
//!
//! Targets: cached, syslets on one worker no slower than sync, and at least
//! 1.3x faster than sync on every worker; uncached, at least 2.5x faster than sync and
//! within 10% of the raw io_uring version. The async-test's published figures: cached
//! 31.6 ms sync vs 26.5 ms syslets (+19.2%), uncached 45.8 s vs 34.2 s (+33.9%).

use super::progress::{self, Part};
use super::{median, nproc, print_target, Measurement, Options, Reporter, Suite};
use io_uring::{opcode, squeue, types, IoUring};
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weft_runtime::syslet::{Builder, Context, Done, Outcome, Program, Var};
use weft_runtime::syslet::{Completion, SYSLET_STOP_ON_NEGATIVE};
use weft_runtime::Runtime;

/// How many files a pass reads (`--quick`: [`FILES_QUICK`]).
const FILES: usize = 1000;
const FILES_QUICK: usize = 100;
/// File sizes: uniform in this range (bytes).
const SIZE_MIN: usize = 1024;
const SIZE_MAX: usize = 4096;
/// What each read asks for.
const READ_LEN: usize = 4096;
/// Timed passes per implementation.
const CACHED_ROUNDS: usize = 21;
const CACHED_ROUNDS_QUICK: usize = 1;
const UNCACHED_ROUNDS: usize = 9;
/// Chains (open, read, close) the raw io_uring version keeps in flight.
const IN_FLIGHT: usize = 64;

/// The targets syslets are held to (printed beside the results), as sync time /
/// implementation time.
const TARGET_CACHED_ONE: f64 = 1.0;
const TARGET_CACHED_ALL: f64 = 1.3;
const TARGET_UNCACHED: f64 = 2.5;
/// Syslets' time at most this times the raw io_uring version's (uncached).
const TARGET_URING_SLACK: f64 = 1.10;

/// Ingo Molnar's async-test, as published with the syslet patches (2007: one PATA disk,
/// ext3, deadline scheduler).
const ASYNC_TEST_CACHED_SYNC_MS: f64 = 31.6;
const ASYNC_TEST_CACHED_SYSLETS_MS: f64 = 26.5;
const ASYNC_TEST_UNCACHED_SYNC_S: f64 = 45.8;
const ASYNC_TEST_UNCACHED_SYSLETS_S: f64 = 34.2;

/// The sizes of a smoke run (`WEFT_BENCH_SYSLETS_SMOKE=1`): it proves in a second that
/// every part runs, the uncached one too (`--quick` skips it); its figures mean nothing.
const SMOKE_FILES: usize = 20;

/// How much a run does.
struct Sizes {
    files: usize,
    /// Timed cached rounds.
    cached: usize,
    /// Timed uncached rounds; None with `--quick`.
    uncached: Option<usize>,
}

fn sizes(opts: &Options) -> Sizes {
    if std::env::var_os("WEFT_BENCH_SYSLETS_SMOKE").is_some_and(|v| v == "1") {
        Sizes {
            files: SMOKE_FILES,
            cached: 1,
            uncached: Some(1),
        }
    } else if opts.quick {
        Sizes {
            files: FILES_QUICK,
            cached: CACHED_ROUNDS_QUICK,
            uncached: None,
        }
    } else {
        Sizes {
            files: FILES,
            cached: CACHED_ROUNDS,
            uncached: Some(UNCACHED_ROUNDS),
        }
    }
}

/// The suite's parts for the progress line, with estimated seconds.
pub fn parts(opts: &Options) -> Vec<Part> {
    let z = sizes(opts);
    let n = z.files as f64;
    let mut parts = vec![
        // Writing the files and a sync.
        Part::new("files", 0.2 + n * 50e-6),
        // Six implementations, a few us a file.
        Part::new("cached", ((z.cached + 1) * 6) as f64 * n * 4e-6),
    ];
    if let Some(rounds) = z.uncached {
        // Each pass: the eviction, then the reads from the disk.
        parts.push(Part::new("uncached", (rounds * 6) as f64 * n * 100e-6));
    }
    parts
}

/// The `method:` line of the table header.
pub fn method_line(opts: &Options) -> String {
    let z = sizes(opts);
    format!(
        "method: one pass = open+read+close of {} files; implementations take turns pass \
         by pass; per implementation the median of {} cached passes (after an untimed \
         one){}; sync / impl > 1 means impl is faster than sync",
        z.files,
        z.cached,
        match z.uncached {
            None => String::from(" (uncached skipped with --quick)"),
            Some(rounds) => format!(
                " and of {rounds} uncached passes (each after the files' pages are evicted \
                 from the page cache, and a one-file warm-up)"
            ),
        }
    )
}

pub fn run(opts: &Options, rep: &mut Reporter) -> Result<(), String> {
    let z = sizes(opts);
    let n = z.files;
    progress::part("files");
    let files = Files::create(n)?;
    rep.line("");
    rep.line(format!(
        "files: {n} files of {}-{} KiB (random sizes and content, {:.2} MiB in all) in {} \
         ({}), read in one fixed shuffled order by every implementation; per file \
         openat(O_RDONLY), read({} KiB), close",
        SIZE_MIN / 1024,
        SIZE_MAX / 1024,
        files.main.total as f64 / (1 << 20) as f64,
        files.root.display(),
        files.fs,
        READ_LEN / 1024
    ));
    let workers = nproc().max(1);
    let rt1 = Runtime::builder()
        .workers(1)
        .build()
        .map_err(|e| format!("cannot start a 1-worker weft runtime: {e}"))?;
    let rt_all = Runtime::builder()
        .workers(workers)
        .build()
        .map_err(|e| format!("cannot start a {workers}-worker weft runtime: {e}"))?;
    let t = Instant::now();
    let one = Syslets::new(&rt1, 1, &files)?;
    let build = t.elapsed();
    let all = Syslets::new(&rt_all, workers, &files)?;
    rep.line(format!(
        "syslets: programs built once, before the passes, and re-run every pass (building \
         the {n} took {:.2} ms, {:.2} us a program); syslets-1-worker: one submitting green \
         thread on a 1-worker runtime; syslets-all-workers: one per worker, {workers} \
         worker(s), each with its own Context, the files dealt out to them in turn",
        build.as_secs_f64() * 1e3,
        build.as_secs_f64() * 1e6 / n as f64
    ));
    let uring = RawUring::new();
    rep.line(match &uring {
        Ok(u) => format!(
            "io_uring-raw: one OS thread, {IN_FLIGHT} chains in flight (openat into a direct \
             slot -> IO_LINK -> read on the fixed slot -> IO_HARDLINK -> close of the slot), \
             ring of {} entries, setup flags {}, io-wq workers at most {} bounded / {} \
             unbounded",
            u.entries, u.setup, u.iowq.0, u.iowq.1
        ),
        Err(why) => format!("io_uring-raw: {why}: its rows are skipped"),
    });
    let mut contenders = vec![
        Contender {
            name: "sync",
            run: Ok(Box::new(|set: &Set, _| sync_pass(set))),
        },
        Contender {
            name: "syslets-1-worker",
            run: Ok(Box::new({
                let mut s = one;
                move |set: &Set, measured| s.pass(set, measured)
            })),
        },
        Contender {
            name: "syslets-all-workers",
            run: Ok(Box::new({
                let mut s = all;
                move |set: &Set, measured| s.pass(set, measured)
            })),
        },
        Contender {
            name: "inline-floor",
            run: Ok(Box::new({
                let mut bufs = vec![0u8; n * READ_LEN];
                move |set: &Set, _| inline_floor_pass(set, &mut bufs)
            })),
        },
        Contender {
            name: "inline-floor-all-threads",
            run: Ok(Box::new({
                let mut bufs = vec![0u8; n * READ_LEN];
                move |set: &Set, _| inline_floor_all_pass(set, &mut bufs, workers)
            })),
        },
        Contender {
            name: "io_uring-raw",
            run: uring.map(|mut u| Box::new(move |set: &Set, _| u.pass(set)) as PassFn<'_>),
        },
    ];

    // Cached: one untimed pass each (it also fills the page cache), then the rounds.
    progress::part("cached");
    for c in contenders.iter_mut() {
        if let Ok(run) = &mut c.run {
            if let Err(e) = run(&files.main, true) {
                if c.name != "io_uring-raw" {
                    return Err(format!("{} (untimed first pass): {e}", c.name));
                }
                c.run = Err(format!("its first pass failed: {e}"));
            }
        }
    }
    let rounds = z.cached;
    let cached = measure(&mut contenders, &files, rounds, false)?;
    print_case(
        rep,
        "cached",
        &format!(
            "the files in the page cache (and their names in the dentry cache); median of \
             {rounds} pass(es)"
        ),
        n,
        &cached,
    );
    cached_targets(rep, &cached, workers, n);

    // Uncached.
    let skip = if z.uncached.is_none() {
        Some("skipped with --quick (each pass reads every file from the disk)".to_string())
    } else if !files.disk {
        Some(format!(
            "skipped: the files are on {} (no disk behind the page cache: uncached would \
             mean nothing)",
            files.fs
        ))
    } else {
        match evict(&files.main).and_then(|m| Ok(m.add(evict(&files.warm)?))) {
            Err(e) => Some(format!(
                "skipped: cannot evict the files from the page cache ({e}), so there is no \
                 uncached figure"
            )),
            Ok(left) if left.resident > 0 => Some(format!(
                "skipped: after fdatasync and POSIX_FADV_DONTNEED, {} of the files' {} pages \
                 are still in the page cache (mincore): {} keeps them here, so an uncached \
                 pass would read cached data",
                left.resident, left.pages, files.fs
            )),
            Ok(_) => None,
        }
    };
    let uncached_rounds = z.uncached.unwrap_or(0);
    let uncached = match skip {
        Some(why) => {
            rep.line("");
            rep.line(format!("uncached: {why}"));
            None
        }
        None => {
            progress::part("uncached");
            let u = measure(&mut contenders, &files, uncached_rounds, true)?;
            print_case(
                rep,
                "uncached",
                &format!(
                    "before each pass the files' pages are evicted from the page cache \
                     (fdatasync + POSIX_FADV_DONTNEED per file, checked with mincore; only \
                     these files, their names and inodes stay cached), then a one-file \
                     warm-up of the implementation on a file in another directory; median \
                     of {uncached_rounds} passes"
                ),
                n,
                &u,
            );
            left_cached_lines(rep, &u);
            rep.line(format!(
                "  threads of this process after the uncached passes: {} syslet cachemiss \
                 (weft-cachemiss*, by the CPUs they may run on: {}), {} io-wq (iou-wrk-*)",
                threads_named("weft-cachemiss").len(),
                cpus_of(&threads_named("weft-cachemiss")),
                threads_named("iou-wrk").len()
            ));
            uncached_targets(rep, &u);
            Some(u)
        }
    };
    published_lines(rep, &cached, uncached.as_deref());
    for (case, rows) in [("cached", Some(&cached)), ("uncached", uncached.as_ref())] {
        for r in rows.into_iter().flatten() {
            rep.emit(&Measurement {
                suite: Suite::Syslets.name(),
                name: case.to_string(),
                impl_name: r.name.to_string(),
                value: r.median.map(|m| m.as_nanos() as f64 / n as f64),
                unit: "ns",
                note: r.note.clone(),
            });
        }
    }
    drop(contenders);
    drop(rt_all);
    drop(rt1);
    drop(files);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The files

/// A set of files an implementation reads in one pass.
struct Set {
    paths: Vec<CString>,
    total: u64,
}

impl Set {
    fn new(paths: Vec<PathBuf>, total: u64) -> Result<Set, String> {
        let paths = paths
            .into_iter()
            .map(|p| {
                CString::new(p.into_os_string().into_encoded_bytes())
                    .map_err(|_| "a path with a NUL byte".to_string())
            })
            .collect::<Result<_, _>>()?;
        Ok(Set { paths, total })
    }
}

/// The files of a run, removed when dropped.
struct Files {
    root: PathBuf,
    /// The measured files.
    main: Set,
    /// The warm-up file (another directory).
    warm: Set,
    /// The file system's name.
    fs: String,
    /// Whether it has a disk behind it (not tmpfs or ramfs).
    disk: bool,
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// xorshift64*: reproducible sizes, order and content.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl Files {
    fn create(n: usize) -> Result<Files, String> {
        let (base, fs, disk) = pick_base()?;
        let root = base.join(format!("weft-bench-syslets-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("files");
        let warm_dir = root.join("warm");
        for d in [&dir, &warm_dir] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let mut files = Files {
            root,
            main: Set {
                paths: Vec::new(),
                total: 0,
            },
            warm: Set {
                paths: Vec::new(),
                total: 0,
            },
            fs,
            disk,
        };
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let write = |path: &Path, rng: &mut Rng| -> Result<u64, String> {
            let size = SIZE_MIN + rng.below(SIZE_MAX - SIZE_MIN + 1);
            let mut data = Vec::with_capacity(size + 8);
            while data.len() < size {
                data.extend_from_slice(&rng.next().to_le_bytes());
            }
            data.truncate(size);
            std::fs::write(path, &data)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok(size as u64)
        };
        let mut paths = Vec::with_capacity(n);
        let mut total = 0;
        for i in 0..n {
            let p = dir.join(format!("f{i:04}"));
            total += write(&p, &mut rng)?;
            paths.push(p);
        }
        // One fixed shuffled order (Fisher-Yates).
        for i in (1..paths.len()).rev() {
            paths.swap(i, rng.below(i + 1));
        }
        let warm = warm_dir.join("w");
        let warm_total = write(&warm, &mut rng)?;
        files.main = Set::new(paths, total)?;
        files.warm = Set::new(vec![warm], warm_total)?;
        // SAFETY: sync has no preconditions.
        unsafe { libc::sync() };
        Ok(files)
    }
}

/// Where the files go: /var/tmp, else the system's temporary directory, whichever is
/// on a disk-backed file system first (else the first writable one, uncached skipped).
fn pick_base() -> Result<(PathBuf, String, bool), String> {
    let mut first = None;
    for base in [PathBuf::from("/var/tmp"), std::env::temp_dir()] {
        let Some((fs, disk)) = fs_type(&base) else {
            continue;
        };
        let probe = base.join(format!(".weft-bench-probe-{}", std::process::id()));
        if std::fs::create_dir(&probe).is_err() {
            continue;
        }
        let _ = std::fs::remove_dir(&probe);
        if disk {
            return Ok((base, fs, true));
        }
        first.get_or_insert((base, fs, false));
    }
    first.ok_or_else(|| "no writable directory for the files (/var/tmp, $TMPDIR)".into())
}

/// The file system of `p` (a name) and whether a disk is behind it.
fn fs_type(p: &Path) -> Option<(String, bool)> {
    let c = CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statfs is valid; the call fills it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `s` a valid out-parameter.
    if unsafe { libc::statfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let magic = s.f_type as u64;
    Some(match magic {
        0x0102_1994 => ("tmpfs".into(), false),
        0x8584_58f6 => ("ramfs".into(), false),
        0xef53 => ("ext2/ext3/ext4".into(), true),
        0x5846_5342 => ("xfs".into(), true),
        0x9123_683e => ("btrfs".into(), true),
        0x794c_7630 => ("overlayfs".into(), true),
        0x2fc1_2fc1 => ("zfs".into(), true),
        0x6969 => ("nfs".into(), true),
        m => (format!("file system {m:#x}"), true),
    })
}

/// How many of a set of files' pages are in the page cache.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Residency {
    pages: u64,
    resident: u64,
}

impl Residency {
    fn add(self, o: Residency) -> Residency {
        Residency {
            pages: self.pages + o.pages,
            resident: self.resident + o.resident,
        }
    }
}

/// Evicts the files of `set` (and nothing else) from the page cache: per file
/// `fdatasync` (a dirty page cannot be dropped), then `posix_fadvise(0, 0,
/// POSIX_FADV_DONTNEED)` over the whole file. Returns how many of their pages are still
/// in the cache after it, counted with `mincore` ([`residency`]). Needs no privilege.
fn evict(set: &Set) -> Result<Residency, String> {
    let mut r = Residency::default();
    for p in &set.paths {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        let fd = opened(fd, p)?;
        let one = (|| {
            // SAFETY: our descriptor.
            if unsafe { libc::fdatasync(fd) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("fdatasync {}: {e}", p.to_string_lossy()));
            }
            // SAFETY: our descriptor; offset 0 and length 0 mean the whole file.
            let e = unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) };
            if e != 0 {
                let e = std::io::Error::from_raw_os_error(e);
                return Err(format!("posix_fadvise {}: {e}", p.to_string_lossy()));
            }
            residency(fd, p)
        })();
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(fd) };
        r = r.add(one?);
    }
    Ok(r)
}

/// The pages of the file open on `fd` (of path `p`) and how many of them are in the
/// page cache: `mincore` on a shared read-only mapping of it, which reads nothing.
fn residency(fd: i32, p: &CStr) -> Result<Residency, String> {
    let fail = |what: &str| {
        let e = std::io::Error::last_os_error();
        format!("{what} {}: {e}", p.to_string_lossy())
    };
    // SAFETY: a zeroed stat is valid; fstat fills it from our descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(fail("fstat"));
    }
    let len = st.st_size as usize;
    if len == 0 {
        return Ok(Residency::default());
    }
    // SAFETY: no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a fresh read-only shared mapping of `len` bytes of our descriptor; the
    // kernel picks the address.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(fail("mmap"));
    }
    let mut v = vec![0u8; pages];
    // SAFETY: `map` is a mapping of `len` bytes; `v` has a byte per page of it.
    let rc = unsafe { libc::mincore(map, len, v.as_mut_ptr()) };
    let err = (rc != 0).then(|| fail("mincore"));
    // SAFETY: the mapping made above, unmapped once; nothing refers to it.
    unsafe { libc::munmap(map, len) };
    if let Some(e) = err {
        return Err(e);
    }
    Ok(Residency {
        pages: pages as u64,
        resident: v.iter().filter(|&&b| b & 1 == 1).count() as u64,
    })
}

/// Under the uncached table: the passes that started with some of their files' pages
/// still in the page cache (the eviction did not take), if any.
fn left_cached_lines(rep: &mut Reporter, rows: &[Row]) {
    for r in rows {
        if let Some(c) = r.left_cached.filter(|c| c.passes > 0) {
            rep.line(format!(
                "  warning: {}: {} of its {} passes started with some of the files' pages \
                 still in the page cache (at most {} of {} pages): those passes read partly \
                 cached data",
                r.name, c.passes, c.of, c.max_resident, c.pages
            ));
        }
    }
}

/// The threads of this process (their /proc/self/task directories) whose name starts
/// with `prefix`.
fn threads_named(prefix: &str) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let path = e.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        name.starts_with(prefix).then_some(path)
    })
    .collect()
}

/// "CPUs 0: 150, CPUs 0-1: 40": how many of `threads` may run on which CPUs.
fn cpus_of(threads: &[PathBuf]) -> String {
    let mut by: Vec<(String, usize)> = Vec::new();
    for t in threads {
        let Ok(status) = std::fs::read_to_string(t.join("status")) else {
            continue;
        };
        let Some(list) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        else {
            continue;
        };
        let list = list.trim().to_string();
        match by.iter_mut().find(|(l, _)| *l == list) {
            Some((_, n)) => *n += 1,
            None => by.push((list, 1)),
        }
    }
    by.sort();
    let parts: Vec<String> = by.iter().map(|(l, n)| format!("CPUs {l}: {n}")).collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------------------
// Measuring

/// One pass's result.
struct Pass {
    took: Duration,
    /// How many syslets went to a cachemiss thread.
    went_async: usize,
}

/// One pass over a set of files; `true` for the measured files, `false` for the warm-up.
type PassFn<'a> = Box<dyn FnMut(&Set, bool) -> Result<Pass, String> + 'a>;

struct Contender<'a> {
    name: &'static str,
    run: Result<PassFn<'a>, String>,
}

/// A row: the median pass, its spread, and the syslets that went async (mean a pass).
struct Row {
    name: &'static str,
    median: Option<Duration>,
    min: Duration,
    max: Duration,
    went_async: Option<f64>,
    note: Option<String>,
    /// Uncached: how many passes started with pages still cached.
    left_cached: Option<LeftCached>,
}

/// Of `of` uncached passes, how many started with some of the files' `pages` still in
/// the page cache, and at most how many.
#[derive(Clone, Copy, Debug, Default)]
struct LeftCached {
    passes: usize,
    of: usize,
    max_resident: u64,
    pages: u64,
}

/// `rounds` rounds, each a timed pass of every contender (the first of each round
/// rotating); uncached, each pass after the eviction of the files and a warm-up pass.
fn measure(
    contenders: &mut [Contender<'_>],
    files: &Files,
    rounds: usize,
    uncached: bool,
) -> Result<Vec<Row>, String> {
    let k = contenders.len();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); k];
    let mut asyncs = vec![0usize; k];
    let mut left = vec![LeftCached::default(); k];
    for round in 0..rounds {
        for j in 0..k {
            let i = (round + j) % k;
            let c = &mut contenders[i];
            progress::step(
                format_args!("{}, pass {} of {rounds}", c.name, round + 1),
                round * k + j,
                rounds * k,
            );
            let Ok(run) = &mut c.run else { continue };
            if uncached {
                let r = evict(&files.main)?;
                evict(&files.warm)?;
                let l = &mut left[i];
                l.of += 1;
                l.pages = r.pages;
                if r.resident > 0 {
                    l.passes += 1;
                    l.max_resident = l.max_resident.max(r.resident);
                }
                run(&files.warm, false).map_err(|e| format!("{} (warm-up): {e}", c.name))?;
            }
            let trace = std::env::var_os("WEFT_BENCH_TRACE").is_some();
            let (cpu0, by0) = if trace {
                (cpu_time(), cpu_by_thread())
            } else {
                (0.0, Default::default())
            };
            let p = run(&files.main, true).map_err(|e| format!("{}: {e}", c.name))?;
            if trace {
                eprintln!(
                    "trace: {} {} pass {:.2} ms, process CPU {:.2} ms",
                    c.name,
                    if uncached { "uncached" } else { "cached" },
                    p.took.as_secs_f64() * 1e3,
                    (cpu_time() - cpu0) * 1e3
                );
                let by1 = cpu_by_thread();
                let mut groups: Vec<(String, f64, f64, usize)> = Vec::new();
                for (tid, (name, (ns, wait))) in &by1 {
                    let (ns0, wait0) = by0.get(tid).map_or((0, 0), |x| x.1);
                    let (d, w) = (ns - ns0, wait - wait0);
                    if d == 0 {
                        continue;
                    }
                    let g = name
                        .trim_end_matches(|c: char| c.is_ascii_digit())
                        .to_string();
                    match groups.iter_mut().find(|x| x.0 == g) {
                        Some(x) => {
                            x.1 += d as f64 / 1e6;
                            x.2 += w as f64 / 1e6;
                            x.3 += 1
                        }
                        None => groups.push((g, d as f64 / 1e6, w as f64 / 1e6, 1)),
                    }
                }
                let parts: Vec<String> = groups
                    .iter()
                    .map(|(g, ms, w, n)| format!("{g}x{n} {ms:.2} (runnable {w:.2})"))
                    .collect();
                eprintln!("trace:   threads {}", parts.join(", "));
            }
            samples[i].push(p.took);
            asyncs[i] += p.went_async;
        }
    }
    Ok(contenders
        .iter()
        .zip(samples)
        .zip(asyncs)
        .zip(left)
        .map(|(((c, mut s), a), l)| match &c.run {
            Ok(_) => {
                let mut ns: Vec<f64> = s.iter().map(|d| d.as_nanos() as f64).collect();
                let m = median(&mut ns);
                s.sort();
                Row {
                    name: c.name,
                    median: Some(Duration::from_nanos(m as u64)),
                    min: s[0],
                    max: s[s.len() - 1],
                    went_async: c
                        .name
                        .starts_with("syslets")
                        .then(|| a as f64 / rounds as f64),
                    note: None,
                    left_cached: uncached.then_some(l),
                }
            }
            Err(why) => Row {
                name: c.name,
                median: None,
                min: Duration::ZERO,
                max: Duration::ZERO,
                went_async: None,
                note: Some(why.clone()),
                left_cached: None,
            },
        })
        .collect())
}

/// This process's CPU time so far (user + system, every thread, io-wq's included), s.
fn cpu_time() -> f64 {
    // SAFETY: a zeroed rusage is valid; the call fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-parameter.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// Per thread of this process: (name, ns on a CPU so far) from schedstat.
fn cpu_by_thread() -> std::collections::HashMap<String, (String, (u64, u64))> {
    let mut m = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return m;
    };
    for e in dir.flatten() {
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| {
                let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
                Some((f.next()??, f.next()??))
            })
            .unwrap_or((0, 0));
        m.insert(
            e.file_name().to_string_lossy().into_owned(),
            (name.trim().to_string(), ns),
        );
    }
    m
}

fn median_of(rows: &[Row], name: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.name == name)
        .and_then(|r| r.median)
        .map(|d| d.as_secs_f64())
}

/// A pass time in ms (or s above 10 s).
fn fmt_time(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn print_case(rep: &mut Reporter, case: &str, what: &str, files: usize, rows: &[Row]) {
    let sync = median_of(rows, "sync");
    rep.line("");
    rep.line(format!("{case}: {what}"));
    rep.line(format!(
        "  {:<24} {:>12} {:>23} {:>9} {:>11} {:>11}",
        "impl", "median pass", "min..max", "us/file", "sync / impl", "went async"
    ));
    for r in rows {
        match r.median {
            Some(m) => {
                let ratio = match sync {
                    Some(s) => format!("{:.2}", s / m.as_secs_f64()),
                    None => "-".into(),
                };
                rep.line(format!(
                    "  {:<24} {:>12} {:>23} {:>9.2} {:>11} {:>11}",
                    r.name,
                    fmt_time(m),
                    format!("{}..{}", fmt_time(r.min), fmt_time(r.max)),
                    m.as_secs_f64() * 1e6 / files as f64,
                    ratio,
                    r.went_async
                        .map_or("-".to_string(), |a| format!("{a:.0}/{files}"))
                ));
            }
            None => rep.line(format!(
                "  {:<24} {:>12}   ({})",
                r.name,
                "-",
                r.note.as_deref().unwrap_or("not measured")
            )),
        }
    }
}

/// "1.23x (needs >= 1.30x: 5.4% short)" or "... 12.0% to spare".
fn versus(r: f64, needed: f64) -> String {
    let margin = (r / needed - 1.0) * 100.0;
    if margin >= 0.0 {
        format!("{r:.2}x (needs >= {needed:.2}x: {margin:.1}% to spare)")
    } else {
        format!("{r:.2}x (needs >= {needed:.2}x: {:.1}% short)", -margin)
    }
}

fn ratio_target(rep: &mut Reporter, rows: &[Row], what: &str, name: &str, needed: f64) {
    let r = match (median_of(rows, "sync"), median_of(rows, name)) {
        (Some(s), Some(v)) => Some(s / v),
        _ => None,
    };
    print_target(
        rep,
        what,
        &r.map_or("-".into(), |r| {
            format!("sync / {name} = {}", versus(r, needed))
        }),
        r.map(|r| r >= needed),
    );
}

fn cached_targets(rep: &mut Reporter, rows: &[Row], workers: usize, files: usize) {
    ratio_target(
        rep,
        rows,
        "cached, syslets on one worker no slower than sync",
        "syslets-1-worker",
        TARGET_CACHED_ONE,
    );
    if let (Some(s), Some(f), Some(one)) = (
        median_of(rows, "sync"),
        median_of(rows, "inline-floor"),
        median_of(rows, "syslets-1-worker"),
    ) {
        rep.line(format!(
            "  floor: the inline path's own calls by hand (inline-floor) are {:.2}x sync, so \
             no executor of that path reaches more on one thread here; syslets-1-worker \
             spends {:.2} us a file more than them (the executor's own cost)",
            s / f,
            (one - f) * 1e6 / files as f64
        ));
    }
    ratio_target(
        rep,
        rows,
        &format!("cached, syslets on every worker ({workers}) at least {TARGET_CACHED_ALL}x faster than sync"),
        "syslets-all-workers",
        TARGET_CACHED_ALL,
    );
    if let (Some(s), Some(f)) = (
        median_of(rows, "sync"),
        median_of(rows, "inline-floor-all-threads"),
    ) {
        rep.line(format!(
            "  floor: the same calls on {workers} threads of this process \
             (inline-floor-all-threads) are {:.2}x sync: what the kernel lets this work \
             gain from more CPUs here",
            s / f
        ));
    }
}

fn uncached_targets(rep: &mut Reporter, rows: &[Row]) {
    let uring = median_of(rows, "io_uring-raw");
    for name in ["syslets-1-worker", "syslets-all-workers"] {
        ratio_target(
            rep,
            rows,
            &format!("uncached, {name} at least {TARGET_UNCACHED}x faster than sync"),
            name,
            TARGET_UNCACHED,
        );
        let v = median_of(rows, name);
        let r = match (v, uring) {
            (Some(v), Some(u)) => Some(v / u),
            _ => None,
        };
        print_target(
            rep,
            &format!(
                "uncached, {name} within {:.0}% of raw io_uring",
                (TARGET_URING_SLACK - 1.0) * 100.0
            ),
            &r.map_or("-".into(), |r| {
                format!(
                    "{name} / io_uring-raw time = {r:.2} (needs <= {TARGET_URING_SLACK:.2}: \
                     {})",
                    if r <= TARGET_URING_SLACK {
                        format!("{:.1}% to spare", (TARGET_URING_SLACK / r - 1.0) * 100.0)
                    } else {
                        format!("{:.1}% over", (r / TARGET_URING_SLACK - 1.0) * 100.0)
                    }
                )
            }),
            r.map(|r| r <= TARGET_URING_SLACK),
        );
    }
}

fn published_lines(rep: &mut Reporter, cached: &[Row], uncached: Option<&[Row]>) {
    let here = |rows: &[Row]| -> String {
        let Some(s) = median_of(rows, "sync") else {
            return String::new();
        };
        let parts: Vec<String> = ["syslets-1-worker", "syslets-all-workers", "io_uring-raw"]
            .iter()
            .filter_map(|&n| {
                let v = median_of(rows, n)?;
                Some(format!(
                    "{n} {:.2}x ({:+.1}%)",
                    s / v,
                    (s / v - 1.0) * 100.0
                ))
            })
            .collect();
        format!("; here sync / impl: {}", parts.join(", "))
    };
    rep.line("");
    rep.line(format!(
        "published (Ingo Molnar's async-test of syslets, 2007; one PATA disk, ext3, \
         deadline): cached {ASYNC_TEST_CACHED_SYNC_MS} \
         ms sync vs {ASYNC_TEST_CACHED_SYSLETS_MS} ms syslets = {:.2}x (+{:.1}%){}",
        ASYNC_TEST_CACHED_SYNC_MS / ASYNC_TEST_CACHED_SYSLETS_MS,
        (ASYNC_TEST_CACHED_SYNC_MS / ASYNC_TEST_CACHED_SYSLETS_MS - 1.0) * 100.0,
        here(cached)
    ));
    rep.line(format!(
        "published: uncached {ASYNC_TEST_UNCACHED_SYNC_S} s sync vs \
         {ASYNC_TEST_UNCACHED_SYSLETS_S} s syslets = {:.2}x (+{:.1}%){}",
        ASYNC_TEST_UNCACHED_SYNC_S / ASYNC_TEST_UNCACHED_SYSLETS_S,
        (ASYNC_TEST_UNCACHED_SYNC_S / ASYNC_TEST_UNCACHED_SYSLETS_S - 1.0) * 100.0,
        uncached.map_or("; not measured here".to_string(), here)
    ));
}

fn check_bytes(name: &str, got: u64, want: u64) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{name}: read {got} bytes in all, the files hold {want}: a broken pass"
        ))
    }
}

// ---------------------------------------------------------------------------------------
// 1. sync

fn sync_pass(set: &Set) -> Result<Pass, String> {
    let mut buf = [0u8; READ_LEN];
    file_loop("sync", set, |_, p| {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::openat(libc::AT_FDCWD, p.as_ptr(), libc::O_RDONLY) };
        let fd = opened(fd, p)?;
        // SAFETY: a buffer of READ_LEN bytes; our descriptor.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), READ_LEN) };
        read_and_closed(fd, n, p)
    })
}

/// Times one pass of `one(index, path)` over the files of `set` (each returning the
/// bytes it read), and checks the bytes add up.
fn file_loop(
    name: &str,
    set: &Set,
    mut one: impl FnMut(usize, &CStr) -> Result<u64, String>,
) -> Result<Pass, String> {
    let mut bytes = 0u64;
    let t = Instant::now();
    for (i, p) in set.paths.iter().enumerate() {
        bytes += one(i, p)?;
    }
    let took = t.elapsed();
    check_bytes(name, bytes, set.total)?;
    Ok(Pass {
        took,
        went_async: 0,
    })
}

/// `fd`, or the error of the open of `p` that returned it.
fn opened(fd: i32, p: &CStr) -> Result<i32, String> {
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("open {}: {e}", p.to_string_lossy()));
    }
    Ok(fd)
}

/// Closes `fd` after a read of `p` that returned `n`: the bytes read, or its error.
fn read_and_closed(fd: i32, n: isize, p: &CStr) -> Result<u64, String> {
    let e = (n < 0).then(std::io::Error::last_os_error);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    match e {
        Some(e) => Err(format!("read {}: {e}", p.to_string_lossy())),
        None => Ok(n as u64),
    }
}

// ---------------------------------------------------------------------------------------
// 1b. the inline path's own calls, by hand

/// One pass of the calls a syslet's inline run makes, without the executor (see
/// [`inline_calls`]), on this thread.
fn inline_floor_pass(set: &Set, bufs: &mut [u8]) -> Result<Pass, String> {
    file_loop("inline-floor", set, |i, p| {
        inline_calls(p, &mut bufs[i * READ_LEN..(i + 1) * READ_LEN])
    })
}

/// openat2 with `RESOLVE_CACHED` (else a plain openat), preadv2 with `RWF_NOWAIT` (else
/// a plain read) into `buf`, close: what a syslet's inline run of this program makes
/// when nothing blocks. Returns the bytes read.
fn inline_calls(p: &CStr, buf: &mut [u8]) -> Result<u64, String> {
    // SAFETY: open_how is plain integers, all-zero valid (libc marks it non-exhaustive).
    let mut how: libc::open_how = unsafe { core::mem::zeroed() };
    how.flags = libc::O_RDONLY as u64;
    how.resolve = libc::RESOLVE_CACHED;
    // SAFETY: a NUL-terminated path and an open_how of the size we pass.
    let mut fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            p.as_ptr(),
            &how as *const libc::open_how,
            core::mem::size_of::<libc::open_how>(),
        )
    } as i32;
    if fd < 0 {
        // SAFETY: a NUL-terminated path.
        fd = unsafe { libc::openat(libc::AT_FDCWD, p.as_ptr(), libc::O_RDONLY) };
    }
    let fd = opened(fd, p)?;
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over `buf`, which is ours; our descriptor.
    let mut n = unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
    if n < 0 {
        // SAFETY: as above.
        n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    }
    read_and_closed(fd, n, p)
}

/// The same calls with the files dealt out to `threads` OS threads of this process
/// (this one and `threads - 1` more, started for the pass, each spinning until the
/// timed start so that neither their start nor a futex wake-up is in the time).
fn inline_floor_all_pass(set: &Set, bufs: &mut [u8], threads: usize) -> Result<Pass, String> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
    let (ready, go, done) = (
        AtomicUsize::new(0),
        AtomicBool::new(false),
        AtomicUsize::new(0),
    );
    // Per thread, its files' (path, buffer) pairs.
    let mut shares: Vec<Vec<(&CStr, &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, (p, b)) in set.paths.iter().zip(bufs.chunks_mut(READ_LEN)).enumerate() {
        shares[i % threads].push((p.as_c_str(), b));
    }
    let run = |share: Vec<(&CStr, &mut [u8])>| -> Result<u64, String> {
        let mut bytes = 0;
        for (p, b) in share {
            bytes += inline_calls(p, b)?;
        }
        Ok(bytes)
    };
    let mut shares = shares.into_iter();
    let mine = shares.next().expect("at least one thread");
    let (took, results) = std::thread::scope(|sc| {
        let helpers: Vec<_> = shares
            .map(|share| {
                let (ready, go, done, run) = (&ready, &go, &done, &run);
                sc.spawn(move || {
                    ready.fetch_add(1, AcqRel);
                    while !go.load(Acquire) {
                        std::hint::spin_loop();
                    }
                    let r = run(share);
                    done.fetch_add(1, AcqRel);
                    r
                })
            })
            .collect();
        while ready.load(Acquire) < threads - 1 {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        go.store(true, Release);
        let mut results = vec![run(mine)];
        while done.load(Acquire) < threads - 1 {
            std::hint::spin_loop();
        }
        let took = t.elapsed();
        results.extend(helpers.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("an inline-floor thread panicked".to_string()))
        }));
        (took, results)
    });
    let mut bytes = 0;
    for r in results {
        bytes += r?;
    }
    check_bytes("inline-floor-all-threads", bytes, set.total)?;
    Ok(Pass {
        took,
        went_async: 0,
    })
}

// ---------------------------------------------------------------------------------------
// 2, 3. syslets

/// Where the variables of a program are (the same in every program built here).
#[derive(Clone, Copy)]
struct Layout {
    path: Var,
    fd: Var,
    n: Var,
    /// The file's index, to put the programs back in order after a pass.
    tag: Var,
}

/// openat(AT_FDCWD, path, O_RDONLY, 0) -> fd [stop if negative]; read(fd, buf, 4096) -> n;
/// close(fd).
fn build(path: &CStr, tag: usize) -> Result<(Program, Layout), String> {
    let path_str = path
        .to_str()
        .map_err(|_| format!("{}: not UTF-8", path.to_string_lossy()))?;
    let mut b = Builder::new();
    let tag_var = b.value(tag as i64);
    let (dirfd, p) = (b.value(libc::AT_FDCWD as i64), b.cstr(path_str));
    let (flags, mode, fd) = (b.value(libc::O_RDONLY as i64), b.value(0), b.var());
    let open = b.atom(libc::SYS_openat, &[dirfd, p, flags, mode]);
    b.ret(open, fd);
    b.flags(open, SYSLET_STOP_ON_NEGATIVE);
    let (buf, len, n) = (b.buffer(READ_LEN), b.value(READ_LEN as i64), b.var());
    let read = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.ret(read, n);
    b.atom(libc::SYS_close, &[fd]);
    let prog = b.build().map_err(|e| format!("building a syslet: {e}"))?;
    Ok((
        prog,
        Layout {
            path: p,
            fd,
            n,
            tag: tag_var,
        },
    ))
}

/// A syslets contender: `submitters` green threads (one per worker of `rt`), each with
/// its share of the programs.
struct Syslets<'a> {
    rt: &'a Runtime,
    submitters: usize,
    /// The programs of the measured files, `submitters` groups (every submitters-th file).
    groups: Vec<Vec<Program>>,
    layout: Layout,
}

impl<'a> Syslets<'a> {
    fn new(rt: &'a Runtime, submitters: usize, files: &Files) -> Result<Self, String> {
        let mut groups: Vec<Vec<Program>> = (0..submitters).map(|_| Vec::new()).collect();
        let mut layout = None;
        for (i, p) in files.main.paths.iter().enumerate() {
            let (prog, l) = build(p, i)?;
            layout = Some(l);
            groups[i % submitters].push(prog);
        }
        Ok(Syslets {
            rt,
            submitters,
            groups,
            layout: layout.ok_or("no files")?,
        })
    }

    /// One pass over `set`: the measured files (`measured`: the programs built for
    /// them), or the warm-up set (programs built for it now, each submitter running all
    /// of them).
    fn pass(&mut self, set: &Set, measured: bool) -> Result<Pass, String> {
        let (groups, layout) = if measured {
            (std::mem::take(&mut self.groups), self.layout)
        } else {
            let mut l = None;
            let mut groups = Vec::new();
            for _ in 0..self.submitters {
                let mut g = Vec::new();
                for (i, p) in set.paths.iter().enumerate() {
                    let (prog, lay) = build(p, i)?;
                    l = Some(lay);
                    g.push(prog);
                }
                groups.push(g);
            }
            (groups, l.ok_or("no files")?)
        };
        let handles: Vec<_> = groups
            .into_iter()
            .enumerate()
            .map(|(w, g)| self.rt.spawn_on(w, move || submit(g, layout)))
            .collect();
        let mut outs = Vec::new();
        let mut err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(o)) => outs.push(o),
                Ok(Err(e)) => {
                    err.get_or_insert(e);
                }
                Err(p) => {
                    err.get_or_insert(format!(
                        "a submitting green thread panicked: {}",
                        super::runtime::panic_text(&*p)
                    ));
                }
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        let start = outs.iter().map(|o| o.start).min().ok_or("no submitter")?;
        let end = outs.iter().map(|o| o.end).max().ok_or("no submitter")?;
        let bytes = outs.iter().map(|o| o.bytes).sum();
        let went_async = outs.iter().map(|o| o.went_async).sum();
        let want = if measured {
            set.total
        } else {
            set.total * self.submitters as u64
        };
        let name = if self.submitters == 1 {
            "syslets-1-worker"
        } else {
            "syslets-all-workers"
        };
        check_bytes(name, bytes, want)?;
        if measured {
            // Back in their order (completions come back in any order).
            for (g, o) in outs.into_iter().enumerate() {
                let mut progs = o.programs;
                progs.sort_by_key(|p| p.get(layout.tag));
                debug_assert!(g < self.submitters);
                self.groups.push(progs);
            }
        }
        Ok(Pass {
            took: end - start,
            went_async,
        })
    }
}

/// What one submitting green thread did.
struct Submitted {
    start: Instant,
    end: Instant,
    bytes: u64,
    went_async: usize,
    programs: Vec<Program>,
}

/// Submits every program, collecting the inline results and the ring's completions;
/// returns only when none is in flight (a Context must not go while syslets run).
fn submit(progs: Vec<Program>, l: Layout) -> Result<Submitted, String> {
    let ctx = Context::new(progs.len().next_power_of_two().max(64));
    let mut back = Vec::with_capacity(progs.len());
    let (mut bytes, mut went_async, mut pending) = (0u64, 0usize, 0usize);
    let mut err: Option<String> = None;
    let mut finish = |r: Result<Done, Completion>, back: &mut Vec<Program>| match r {
        Ok(d) => {
            if d.atom == 2 && d.ret == 0 && d.program.get(l.n) >= 0 {
                bytes += d.program.get(l.n) as u64;
            } else if err.is_none() {
                let path = String::from_utf8_lossy(d.program.buffer(l.path)).into_owned();
                let atom = ["openat", "read", "close"]
                    .get(d.atom)
                    .copied()
                    .unwrap_or("?");
                err = Some(format!(
                    "syslet for {}: ended at atom {} ({atom}) with {} ({}), read {}",
                    path.trim_end_matches('\0'),
                    d.atom,
                    d.ret,
                    std::io::Error::from_raw_os_error((-d.ret) as i32),
                    d.program.get(l.n)
                ));
            }
            back.push(d.program);
        }
        Err(c) => {
            err.get_or_insert(format!("a completion without its program: {c:?}"));
        }
    };
    let start = Instant::now();
    let mut first_done: Option<Instant> = None;
    let mut waits = 0usize;
    for mut p in progs {
        p.set(l.fd, -1);
        p.set(l.n, -1);
        match ctx.exec(p) {
            Outcome::Done(d) => finish(Ok(d), &mut back),
            Outcome::Async(_) => {
                went_async += 1;
                pending += 1;
            }
        }
        while let Some(c) = ctx.take() {
            first_done.get_or_insert_with(Instant::now);
            pending -= 1;
            finish(c, &mut back);
        }
    }
    let submitted = Instant::now();
    while pending > 0 {
        ctx.wait(1, None);
        waits += 1;
        while let Some(c) = ctx.take() {
            first_done.get_or_insert_with(Instant::now);
            pending -= 1;
            finish(c, &mut back);
        }
    }
    let end = Instant::now();
    if std::env::var_os("WEFT_BENCH_TRACE").is_some() {
        let ms = |t: Instant| (t - start).as_secs_f64() * 1e3;
        eprintln!(
            "trace: {} programs: submitted at {:.2} ms, first completion {:.2} ms, end {:.2} ms, {} waits, {:?}",
            back.len(),
            ms(submitted),
            first_done.map_or(f64::NAN, ms),
            ms(end),
            waits,
            weft_runtime::syslet::engine_stats()
        );
    }
    match err {
        Some(e) => Err(e),
        None => Ok(Submitted {
            start,
            end,
            bytes,
            went_async,
            programs: back,
        }),
    }
}

// ---------------------------------------------------------------------------------------
// 4. raw io_uring

struct RawUring {
    ring: IoUring,
    entries: u32,
    setup: &'static str,
    /// io-wq's worker limits (bounded, unbounded) as the kernel reports them.
    iowq: (u32, u32),
    /// One read buffer per slot.
    bufs: Vec<u8>,
    /// CQEs seen per slot's chain (3 when it is done) and the file it reads.
    seen: Vec<u8>,
    freed: Vec<usize>,
}

impl RawUring {
    fn new() -> Result<RawUring, String> {
        let entries = (3 * IN_FLIGHT).next_power_of_two() as u32;
        let (ring, setup) = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(r) => (r, "SINGLE_ISSUER|DEFER_TASKRUN"),
            Err(_) => match IoUring::builder().setup_coop_taskrun().build(entries) {
                Ok(r) => (r, "COOP_TASKRUN"),
                Err(_) => (
                    IoUring::new(entries).map_err(|e| format!("no io_uring here ({e})"))?,
                    "none",
                ),
            },
        };
        let mut probe = io_uring::Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| format!("io_uring probe failed ({e})"))?;
        for (code, name) in [
            (opcode::OpenAt::CODE, "OPENAT"),
            (opcode::Read::CODE, "READ"),
            (opcode::Close::CODE, "CLOSE"),
        ] {
            if !probe.is_supported(code) {
                return Err(format!("this kernel's io_uring has no {name}"));
            }
        }
        ring.submitter()
            .register_files_sparse(IN_FLIGHT as u32)
            .map_err(|e| format!("cannot register {IN_FLIGHT} direct descriptor slots ({e})"))?;
        // The kernel's default limits, left as they are ([0, 0] only reads them): opens
        // that miss the dentry cache run on io-wq's bounded workers.
        let mut limits = [0u32; 2];
        let iowq = match ring.submitter().register_iowq_max_workers(&mut limits) {
            Ok(()) => (limits[0], limits[1]),
            Err(_) => (0, 0),
        };
        Ok(RawUring {
            ring,
            entries,
            setup,
            iowq,
            bufs: vec![0u8; IN_FLIGHT * READ_LEN],
            seen: vec![0; IN_FLIGHT],
            freed: Vec::with_capacity(IN_FLIGHT),
        })
    }

    /// Queues the chain of file `path` on `slot`.
    fn push(&mut self, slot: usize, path: &CStr) -> Result<(), String> {
        let s = slot as u32;
        let ud = (slot as u64) << 2;
        let dest = types::DestinationSlot::try_from_slot_target(s)
            .map_err(|_| format!("slot {s} is not a valid direct descriptor slot"))?;
        let open = opcode::OpenAt::new(types::Fd(libc::AT_FDCWD), path.as_ptr())
            .flags(libc::O_RDONLY)
            .file_index(Some(dest))
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(ud);
        let buf = self.bufs[slot * READ_LEN..].as_mut_ptr();
        let read = opcode::Read::new(types::Fixed(s), buf, READ_LEN as u32)
            .build()
            .flags(squeue::Flags::IO_HARDLINK)
            .user_data(ud | 1);
        let close = opcode::Close::new(types::Fixed(s))
            .build()
            .user_data(ud | 2);
        // SAFETY: the path and the buffer stay valid until the chain's last CQE is reaped
        // (`pass` does not return before, and both outlive the ring's use).
        unsafe { self.ring.submission().push_multiple(&[open, read, close]) }
            .map_err(|_| "the submission queue is full".to_string())
    }

    fn pass(&mut self, set: &Set) -> Result<Pass, String> {
        let n = set.paths.len();
        let depth = IN_FLIGHT.min(n);
        let (mut next, mut finished, mut bytes) = (0usize, 0usize, 0u64);
        let mut err: Option<String> = None;
        let mut file = vec![0usize; IN_FLIGHT];
        let mut first_done: Option<Instant> = None;
        let mut enters = 0usize;
        let t = Instant::now();
        for (slot, f) in file.iter_mut().enumerate().take(depth) {
            self.push(slot, &set.paths[next])?;
            *f = next;
            next += 1;
        }
        while finished < n {
            enters += 1;
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            self.freed.clear();
            for cqe in self.ring.completion() {
                let slot = (cqe.user_data() >> 2) as usize;
                let op = cqe.user_data() & 3;
                let res = cqe.result();
                if res < 0 && err.is_none() {
                    err = Some(format!(
                        "{} of {}: {}",
                        ["openat", "read", "close"][op as usize],
                        set.paths[file[slot]].to_string_lossy(),
                        std::io::Error::from_raw_os_error(-res)
                    ));
                } else if op == 1 && res >= 0 {
                    bytes += res as u64;
                }
                self.seen[slot] += 1;
                if self.seen[slot] == 3 {
                    self.seen[slot] = 0;
                    first_done.get_or_insert_with(Instant::now);
                    finished += 1;
                    self.freed.push(slot);
                }
            }
            for i in 0..self.freed.len() {
                if next < n {
                    let slot = self.freed[i];
                    self.push(slot, &set.paths[next])?;
                    file[slot] = next;
                    next += 1;
                }
            }
        }
        let took = t.elapsed();
        if std::env::var_os("WEFT_BENCH_TRACE").is_some() {
            eprintln!(
                "trace: raw {n} files: first chain done at {:.2} ms, end {:.2} ms, {enters} waits",
                first_done.map_or(f64::NAN, |f| (f - t).as_secs_f64() * 1e3),
                took.as_secs_f64() * 1e3
            );
        }
        if let Some(e) = err {
            return Err(e);
        }
        check_bytes("io_uring-raw", bytes, set.total)?;
        Ok(Pass {
            took,
            went_async: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the files are read (so cached), `evict` leaves none of their pages in the
    /// page cache, and `residency` sees them come back when they are read again.
    #[test]
    fn evicting_the_files_leaves_none_of_their_pages_cached() {
        let files = Files::create(8).unwrap();
        if !files.disk {
            // tmpfs keeps its pages: nothing to evict them to (the suite skips there).
            return;
        }
        let cached = |set: &Set| {
            set.paths.iter().fold(Residency::default(), |r, p| {
                // SAFETY: a NUL-terminated path.
                let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                let fd = opened(fd, p).unwrap();
                let one = residency(fd, p).unwrap();
                // SAFETY: our descriptor.
                unsafe { libc::close(fd) };
                r.add(one)
            })
        };
        sync_pass(&files.main).unwrap();
        let before = cached(&files.main);
        assert!(before.pages >= 8, "{before:?}");
        assert_eq!(before.resident, before.pages, "read just now: all cached");
        let left = evict(&files.main).unwrap();
        assert_eq!(
            left,
            Residency {
                pages: before.pages,
                resident: 0
            }
        );
        assert_eq!(cached(&files.main).resident, 0);
        sync_pass(&files.main).unwrap();
        assert_eq!(cached(&files.main).resident, before.pages);
    }
}
