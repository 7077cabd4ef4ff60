//! The runtime: building it, spawning green threads, and shutting it down.
//!
//! ```
//! let rt = weft_runtime::Runtime::new().unwrap();
//! let sum = rt.block_on(|| {
//!     let hs: Vec<_> = (0..10u64).map(|i| weft_runtime::spawn(move || i * i)).collect();
//!     hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 285);
//! ```
//!
//! Dropping a [`Runtime`] shuts it down: green threads that are parked are resumed with
//! a [`Shutdown`](crate::Shutdown) unwind (their destructors run), green threads that
//! never ran are dropped (their join handles report the same payload), and the worker
//! threads end once none is left. A green thread that never parks or yields keeps its
//! worker (and so the drop) waiting.

use crate::msgbox;
use crate::shim::CachePadded;
use crate::task::{JoinHandle, Outcome, Task, MAX_WORKERS};
use crate::worker::{self, Shared, Worker, WorkerShared};
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weft_fiber::raw::{self, RawFiber, SpawnInfo};

/// Settings every worker reads.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub stack_size: usize,
    /// The I/O backend of every worker's driver.
    pub io_backend: crate::io::IoBackend,
    /// How long an idle worker spins before it sleeps.
    pub idle_spin: Duration,
}

/// Options for a [`Runtime`].
#[derive(Debug, Clone)]
pub struct Builder {
    workers: Option<usize>,
    pin: bool,
    stack_size: usize,
    name: String,
    preempt: bool,
    io_backend: Option<crate::io::IoBackend>,
    idle_spin: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            workers: None,
            pin: true,
            stack_size: 0,
            name: "weft-worker".into(),
            preempt: std::env::var("WEFT_PREEMPT").map_or(true, |v| v != "off" && v != "0"),
            io_backend: None,
            idle_spin: crate::msgbox::SPIN_BEFORE_SLEEP,
        }
    }
}

impl Builder {
    /// Number of worker threads (default: one per CPU this process may run on).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }
    /// Whether worker `i` is pinned to the `i`-th CPU the process may run on (default
    /// true; skipped silently where the affinity call is refused, as in some
    /// containers).
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }
    /// Usable stack bytes of each green thread (default 1 MiB, committed lazily: only
    /// the pages a thread touches use memory).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }
    /// Whether green threads that hold a worker for 10 ms without yielding are preempted
    /// (default true; `WEFT_PREEMPT=off` changes the default). When and how a thread is
    /// switched out is described in docs/runtime.md ("Preemption").
    pub fn preempt(mut self, on: bool) -> Self {
        self.preempt = on;
        self
    }
    /// The I/O backend (default: `WEFT_IO_BACKEND`, else io_uring where the kernel
    /// allows it, else the thread pool). For tests that run on both; `build` fails if
    /// io_uring is asked for and unavailable.
    #[doc(hidden)]
    pub fn io_backend(mut self, backend: crate::io::IoBackend) -> Self {
        self.io_backend = Some(backend);
        self
    }
    /// How long a worker that runs out of work watches for new work before it sleeps
    /// (default [`SPIN_BEFORE_SLEEP`](crate::msgbox::SPIN_BEFORE_SLEEP), 20 us: work
    /// arriving within it costs no wake-up). Zero for a runtime whose CPU time others
    /// on the machine need more than it needs a quick wake-up (a load generator sharing
    /// the CPUs with the server it measures).
    pub fn idle_spin(mut self, d: Duration) -> Self {
        self.idle_spin = d;
        self
    }
    /// Prefix of the worker threads' names (default `weft-worker`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Starts the workers.
    pub fn build(self) -> std::io::Result<Runtime> {
        let io_backend = match self.io_backend {
            Some(b) => crate::io::check_backend(b)?,
            None => crate::io::default_backend()?,
        };
        let cpus = allowed_cpus();
        let n = self.workers.unwrap_or(cpus.len().max(1));
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a runtime needs at least one worker (Builder::workers(0) was given)",
            ));
        }
        if n > MAX_WORKERS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a runtime has at most {MAX_WORKERS} workers ({n} were asked for)"),
            ));
        }
        let endpoints = msgbox::matrix::<worker::Mail>(n, 1024)?;
        let remote = endpoints[0].remote();
        let deques: Vec<_> = (0..n)
            .map(|_| crossbeam_deque::Worker::new_fifo())
            .collect();
        let shared = Arc::new(Shared {
            workers: deques
                .iter()
                .map(|d| {
                    CachePadded(WorkerShared {
                        inbox: Default::default(),
                        stealer: d.stealer(),
                        next: worker::NextSlot::new(),
                        tid: AtomicI32::new(0),
                        progress: CachePadded(Default::default()),
                        ended: AtomicBool::new(false),
                    })
                })
                .collect(),
            remote,
            shutdown: AtomicBool::new(false),
            next_worker: AtomicUsize::new(0),
            config: Config {
                stack_size: self.stack_size,
                io_backend,
                idle_spin: self.idle_spin,
            },
        });
        let mut threads = Vec::with_capacity(n);
        for (id, (ep, dq)) in endpoints.into_iter().zip(deques).enumerate() {
            let shared2 = shared.clone();
            let cpu = (self.pin && !cpus.is_empty()).then(|| cpus[id % cpus.len()]);
            let name = format!("{}-{id}", self.name);
            let t = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || worker_main(id, &name, shared2, ep, dq, cpu))?;
            threads.push(t);
        }
        let monitor = if self.preempt {
            Some(crate::monitor::start(shared.clone())?)
        } else {
            None
        };
        Ok(Runtime {
            shared,
            threads,
            monitor,
        })
    }
}

/// The CPUs this process may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is valid; the call fills it.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        if libc::sched_getaffinity(0, core::mem::size_of_val(&set), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: as above; failure (EINVAL/EPERM in a restricted container) is ignored.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of_val(&set), &set);
    }
}

fn worker_main(
    id: usize,
    name: &str,
    shared: Arc<Shared>,
    ep: msgbox::Endpoint<worker::Mail>,
    dq: crossbeam_deque::Worker<Arc<Task>>,
    cpu: Option<usize>,
) {
    if let Some(c) = cpu {
        pin_to(c);
    }
    // SAFETY: gettid has no preconditions.
    shared.workers[id]
        .tid
        .store(unsafe { libc::gettid() }, Relaxed);
    let me = weft_fiber::convert_thread().expect("a new worker thread is not yet a fiber");
    // `weft ps` shows the worker's own fiber under its thread's name.
    let _ = weft_fiber::set_name(name);
    let mut w = match Worker::new(id, shared, ep, dq, RawFiber::of_thread(&me)) {
        Ok(w) => Box::new(w),
        Err(e) => panic!("weft: worker {id} cannot set up its I/O: {e}"),
    };
    let wp: *mut Worker = &mut *w;
    raw::set_thread_word(wp.cast());
    // SAFETY: `wp` is this thread's worker and we are its scheduler fiber.
    unsafe { worker::sched_loop(wp) };
    raw::set_thread_word(core::ptr::null_mut());
    drop(w);
    drop(me);
}

/// A running M:N runtime: worker threads and the green threads on them.
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    monitor: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.workers())
            .finish()
    }
}

impl Runtime {
    /// A runtime with default options: one pinned worker per CPU.
    pub fn new() -> std::io::Result<Runtime> {
        Builder::default().build()
    }

    /// Options for a runtime.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.shared.workers.len()
    }

    /// Runs `f` on a green thread and waits for it (blocking the calling OS thread, or
    /// parking the calling green thread). A panic in `f` is resumed here.
    #[track_caller]
    pub fn block_on<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        match self.spawn(f).join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// Starts a green thread on some worker (round robin from outside the runtime; the
    /// caller's own worker from a green thread of this runtime, where it runs at the
    /// caller's next switch, and an idle worker may steal it until then).
    #[track_caller]
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        spawn_in(&self.shared, None, Location::caller(), f)
    }

    /// Starts a green thread on worker `worker` (it stays there).
    ///
    /// # Panics
    /// If `worker` is not below [`Runtime::workers`].
    #[track_caller]
    pub fn spawn_on<T: Send + 'static>(
        &self,
        worker: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        check_worker(&self.shared, worker);
        spawn_in(&self.shared, Some(worker), Location::caller(), f)
    }

    /// Shuts down (as dropping it does) and waits for the workers to end.
    pub fn shutdown(self) {}
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let w = worker::current();
        // SAFETY: a non-null thread word is this thread's live worker.
        if !w.is_null() && core::ptr::eq(unsafe { worker::shared_of(w) }, &*self.shared) {
            panic!(
                "a weft Runtime was dropped from one of its own green threads: its workers \
                 cannot be joined from inside; drop it from outside (the thread that built it)"
            );
        }
        self.shared.shutdown.store(true, Release);
        for i in 0..self.shared.workers.len() {
            self.shared.remote.wake(i);
        }
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                eprintln!("weft: a worker thread panicked during shutdown");
            }
        }
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
        // Mail that reached a worker after it ended (a race with its `ended` flag):
        // dropping it cancels spawns (their join handles report `Shutdown`) and drops
        // wake-ups, and breaks the cycle task -> runtime -> box -> task.
        for w in self.shared.workers.iter() {
            while w.inbox.pop().is_some() {}
        }
        // SAFETY: every worker has ended and dropped its endpoint.
        unsafe { self.shared.remote.drain(drop) };
    }
}

fn check_worker(shared: &Shared, worker: usize) {
    assert!(
        worker < shared.workers.len(),
        "spawn_on({worker}): this runtime has {} workers (0..{})",
        shared.workers.len(),
        shared.workers.len()
    );
}

fn spawn_in<T: Send + 'static>(
    shared: &Arc<Shared>,
    to: Option<usize>,
    at: &'static Location<'static>,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    try_spawn_in(shared, to, &ThreadBuilder::new(), at, f)
        .unwrap_or_else(|e| panic!("weft: cannot create a green thread: {e}"))
}

/// Spawns `f`, spawned by the code at `at` (what `weft ps` shows as its spawn site).
fn try_spawn_in<T: Send + 'static, F: FnOnce() -> T + Send + 'static>(
    shared: &Arc<Shared>,
    to: Option<usize>,
    opts: &ThreadBuilder,
    at: &'static Location<'static>,
    f: F,
) -> std::io::Result<JoinHandle<T>> {
    // What `weft ps` shows: the user's function (not the wrapper below) and the call
    // that spawned it; a foreign function is shown by its entry address instead.
    let info = match opts.foreign_entry {
        0 => SpawnInfo {
            name: &opts.name,
            function: std::any::type_name::<F>(),
            location: Some(at),
            entry: 0,
        },
        entry => SpawnInfo {
            name: &opts.name,
            entry,
            ..SpawnInfo::default()
        },
    };
    // The closure holds no reference to its task (that would be a cycle through the
    // task's never-run fiber): it finds itself as the worker's current thread.
    let stack_size = opts.stack_size.unwrap_or(shared.config.stack_size);
    let fiber = RawFiber::spawn_with(stack_size, &info, move || {
        // The thread's entry of its worker's live list, in this base frame until exit.
        let node = worker::LiveNode::new();
        // SAFETY: `node` is not moved before `exit_current`, which never returns.
        unsafe { worker::task_started(&node) };
        let out: Outcome<T> = if worker::starting_cancelled() {
            // Shut down before it ran: its closure is dropped here, in its own green
            // context (a destructor may park), and its join reports `Shutdown`.
            let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
            Err(Box::new(worker::Shutdown))
        } else {
            catch_unwind(AssertUnwindSafe(f))
        };
        // The join completes first: `ipc::exited` relies on that order.
        worker::complete_current(out);
        crate::ipc::exited();
        // SAFETY: everything this frame owned has been moved or dropped; `node` is the
        // entry given to `task_started`.
        unsafe { worker::exit_current(&node) }
    })
    .map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e.to_string()))?;
    let task = Arc::new(Task::new(shared, opts.preemptible, to.is_some()));
    let id = fiber.id();
    task.fiber.set(Some(fiber));
    let handle = JoinHandle {
        task: task.clone(),
        id,
        _result: std::marker::PhantomData,
    };
    worker::submit(shared, task, to);
    worker::preemption_point();
    Ok(handle)
}

/// Options for one green thread, as `std::thread::Builder` is for OS threads: its
/// name, stack size and whether it may be preempted. Its `spawn` methods return an
/// `io::Error` (instead of panicking) when the stack cannot be allocated.
///
/// ```
/// let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
/// let h = weft_runtime::ThreadBuilder::new()
///     .name("answer")     // as `weft ps` shows it
///     .stack_size(64 * 1024)
///     .preemptible(false) // never switched out by the 10 ms preemption
///     .spawn_in(&rt, || 6 * 7)
///     .unwrap();
/// assert_eq!(h.join().unwrap(), 42);
/// ```
#[derive(Debug, Clone)]
pub struct ThreadBuilder {
    stack_size: Option<usize>,
    preemptible: bool,
    name: String,
    /// A foreign function's address, shown as the thread's entry point (0: none).
    foreign_entry: usize,
}

impl Default for ThreadBuilder {
    fn default() -> Self {
        ThreadBuilder {
            stack_size: None,
            preemptible: true,
            name: String::new(),
            foreign_entry: 0,
        }
    }
}

impl ThreadBuilder {
    /// Default options: the runtime's stack size, preemptible.
    pub fn new() -> Self {
        Self::default()
    }
    /// Usable stack bytes (rounded up to pages, at least 16 KiB), instead of the
    /// runtime's default.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }
    /// Whether the preemption signal may switch this thread out (default true). A
    /// thread that is not preemptible only has its yield flag set: use it for code that
    /// must not be interleaved with other green threads of its worker (say, code that
    /// holds per-OS-thread state of a C library between two calls).
    pub fn preemptible(mut self, on: bool) -> Self {
        self.preemptible = on;
        self
    }
    /// A name for the thread, shown by `weft ps`, `weft top` and `weft fs` beside where
    /// it was spawned (default none). A name longer than 48 bytes is shown cut, ending
    /// in `...`. The thread can rename itself with [`set_name`].
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }
    /// The thread runs the foreign function at `addr` (a C start routine): `weft ps`
    /// shows it as the entry point, instead of the Rust closure and its spawn site.
    #[doc(hidden)]
    pub fn foreign_entry(mut self, addr: usize) -> Self {
        self.foreign_entry = addr;
        self
    }
    /// Spawns in the caller's runtime (from a green thread), like [`spawn`].
    ///
    /// # Panics
    /// Outside a runtime's green thread.
    #[track_caller]
    pub fn spawn<T: Send + 'static>(
        self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<JoinHandle<T>> {
        let at = Location::caller();
        with_current_shared(|s| try_spawn_in(s, None, &self, at, f))
    }
    /// Spawns on worker `worker` of the caller's runtime, like [`spawn_on`].
    ///
    /// # Panics
    /// Outside a runtime's green thread, or if `worker` does not exist.
    #[track_caller]
    pub fn spawn_on<T: Send + 'static>(
        self,
        worker: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<JoinHandle<T>> {
        let s = current_shared();
        check_worker(&s, worker);
        try_spawn_in(&s, Some(worker), &self, Location::caller(), f)
    }
    /// Spawns in runtime `rt`, from anywhere, like [`Runtime::spawn`].
    #[track_caller]
    pub fn spawn_in<T: Send + 'static>(
        self,
        rt: &Runtime,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<JoinHandle<T>> {
        try_spawn_in(&rt.shared, None, &self, Location::caller(), f)
    }
    /// Spawns on worker `worker` of runtime `rt`, from anywhere, like
    /// [`Runtime::spawn_on`].
    ///
    /// # Panics
    /// If `worker` is not below [`Runtime::workers`].
    #[track_caller]
    pub fn spawn_on_in<T: Send + 'static>(
        self,
        rt: &Runtime,
        worker: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<JoinHandle<T>> {
        check_worker(&rt.shared, worker);
        try_spawn_in(&rt.shared, Some(worker), &self, Location::caller(), f)
    }
}

/// Runs `f` with the caller's runtime, borrowed from its worker (no reference-count
/// traffic: a spawn's hot path).
///
/// # Panics
/// Outside a runtime's worker.
fn with_current_shared<R>(f: impl FnOnce(&Arc<Shared>) -> R) -> R {
    let w = worker::current();
    assert!(
        !w.is_null(),
        "weft_runtime::spawn called outside a runtime's worker: use Runtime::spawn (or call it from a green thread)"
    );
    // SAFETY: the thread word is this thread's live worker, and the worker (with its
    // `shared`) outlives every green thread that runs on it, so the borrow is valid for
    // the call even if `f` switches (a spawn's preemption point).
    f(unsafe { &(*w).shared })
}

fn current_shared() -> Arc<Shared> {
    let w = worker::current();
    assert!(
        !w.is_null(),
        "weft_runtime::spawn called outside a runtime's worker: use Runtime::spawn (or call it from a green thread)"
    );
    // SAFETY: the thread word is this thread's live worker.
    unsafe { (*w).shared.clone() }
}

/// Starts a green thread in the caller's runtime (see [`Runtime::spawn`]).
///
/// # Panics
/// When called outside a green thread or worker of a runtime.
#[track_caller]
pub fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let at = Location::caller();
    with_current_shared(|s| spawn_in(s, None, at, f))
}

/// Starts a green thread on worker `worker` of the caller's runtime.
///
/// # Panics
/// Outside a runtime, or if `worker` does not exist.
#[track_caller]
pub fn spawn_on<T: Send + 'static>(
    worker: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let s = current_shared();
    check_worker(&s, worker);
    spawn_in(&s, Some(worker), Location::caller(), f)
}

/// Names the calling green thread, as [`ThreadBuilder::name`] does, for `weft ps`,
/// `weft top` and `weft fs`; `""` removes the name. Returns false outside a green
/// thread (or fiber), where there is nothing to name.
pub fn set_name(name: &str) -> bool {
    weft_fiber::set_name(name).is_ok()
}

/// Number of workers of the caller's runtime (None outside one).
pub fn workers() -> Option<usize> {
    let w = worker::current();
    // SAFETY: as above.
    (!w.is_null()).then(|| unsafe { worker::shared_of(w).workers.len() })
}

/// Puts the calling green thread to sleep for `d` (other green threads run meanwhile);
/// outside the runtime, sleeps the OS thread.
pub fn sleep(d: Duration) {
    let deadline = Instant::now() + d;
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        crate::park::park_until(deadline);
    }
}
