/*
 * weft/runtime.h - green threads for C: weft's M:N runtime.
 *
 * A runtime is a set of worker threads (one per CPU by default); green threads
 * run on them, many per worker, and switch in user space when they block in a
 * weft call (IPC, join, yield, sleep).  This is the C face of the Rust crate
 * weft_runtime (Runtime, spawn, spawn_on, JoinHandle).
 *
 *     static void *hello(void *arg) { printf("%s\n", (char *)arg); return NULL; }
 *
 *     weft_runtime *rt = weft_runtime_new(0);        // one worker per CPU
 *     if (!rt) { printf("%s\n", weft_error_message(GetLastError())); exit(1); }
 *     void *result;
 *     weft_runtime_run(rt, hello, "hi", &result);    // runs hello as a green thread
 *     weft_runtime_free(rt);
 *
 * Green threads
 * -------------
 *   - A green thread runs a weft_thread_fn.  When the function returns, the
 *     thread ends; its return value is what weft_thread_join() gives.
 *   - A green thread that has started stays on its worker.  Several green
 *     threads share a worker's OS thread, so OS-thread-local state (errno,
 *     GetLastError(), locale, ...) is shared by the green threads of a worker.
 *   - Green threads of a C program switch only inside weft calls: a green
 *     thread that computes for a long time without one keeps its worker (and
 *     the other green threads of that worker wait).  Call weft_yield() in long
 *     loops.  (When libweft.a is linked statically into the program, the
 *     runtime may also preempt it after 10 ms in the program's own code.)
 *   - Do not block a worker in a plain blocking call (a pthread mutex held by
 *     another green thread, a long read(), sleep()): the other green threads
 *     of its worker cannot run meanwhile.  weft_sleep_ns() parks only the
 *     calling green thread.  A program linked with -lweft-hook instead of
 *     -lweft (or run with LD_PRELOAD=libweft-hook.so) has read(), write(),
 *     accept(), poll(), sleep() and the other calls of docs/hook.md park only
 *     the calling green thread too.
 *
 * Errors
 * ------
 * Functions that return uint32_t return 0 on success and an error code on
 * failure; functions that return a pointer return NULL on failure.  Either
 * way the code is also set as GetLastError() (on failure only), and
 * weft_error_message(code) (from weft/fibers.h) says what went wrong and what
 * to do.  The return value is the reliable one: GetLastError() is per OS
 * thread, so read it at once.
 *
 * Shutdown
 * --------
 * weft_runtime_free() shuts the runtime down and waits until every green
 * thread has ended.  A green thread blocked in a weft call at that moment (or
 * blocking in one afterwards) gets WEFT_ERR_SHUTDOWN from it, and from then
 * on every weft call of that thread that could block (IPC, join, run, yield,
 * sleep, spawn) fails at once with WEFT_ERR_SHUTDOWN: the thread must return
 * from its function.  Threads that never started do not run; joining them
 * gives WEFT_ERR_SHUTDOWN.  A green thread that never returns keeps
 * weft_runtime_free() waiting.
 *
 * Link with -lweft, as for weft/fibers.h.  Synchronous IPC between green
 * threads is in weft/ipc.h.
 */
#ifndef WEFT_RUNTIME_H
#define WEFT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <weft/fibers.h> /* GetLastError, weft_error_message, ERROR_NOT_ENOUGH_MEMORY */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes ------------------------------------------------------- */

/* weft's own error codes (runtime and IPC), as returned and as set for
 * GetLastError().  They have bit 29 set, the bit Windows reserves for
 * application error codes, so they never collide with the ERROR_* codes of
 * weft/fibers.h.  The IPC codes (0x201xx) are in weft/ipc.h. */

/* A required pointer is NULL, or a value is out of range (worker index,
 * timeout, payload length). */
#define WEFT_ERR_INVALID_ARGUMENT 0x20000001u
/* The call needs a green thread and was made from a plain OS thread. */
#define WEFT_ERR_NOT_GREEN_THREAD 0x20000002u
/* The runtime is shutting down (weft_runtime_free): return from the green
 * thread's function.  For a join: the thread was cancelled before it ran. */
#define WEFT_ERR_SHUTDOWN 0x20000003u
/* weft_runtime_free() was called from a runtime's own thread; call it from a
 * plain OS thread (the one that created the runtime). */
#define WEFT_ERR_WRONG_THREAD 0x20000004u
/* A system call failed while creating the runtime (threads, io_uring, memory
 * mappings); errno says which error. */
#define WEFT_ERR_SYSTEM 0x20000005u
/* An internal error in weft (a Rust panic stopped at the C boundary): a bug,
 * please report it with the message printed on stderr. */
#define WEFT_ERR_INTERNAL 0x20000006u

/* ---- Types -------------------------------------------------------------- */

/* A runtime (opaque). */
typedef struct weft_runtime weft_runtime;

/* A green thread's handle (opaque): join it or detach it, once. */
typedef struct weft_thread weft_thread;

/* The function a green thread runs.  The thread ends when it returns. */
typedef void *(*weft_thread_fn)(void *arg);

/* ---- Runtimes ------------------------------------------------------------ */

/* Starts a runtime with `workers` worker threads (0 = one per CPU the process
 * may run on).  Returns NULL on failure: ERROR_NOT_ENOUGH_MEMORY, or
 * WEFT_ERR_SYSTEM with errno set. */
weft_runtime *weft_runtime_new(unsigned int workers);

/* The number of workers of `rt` (0 if rt is NULL, with
 * WEFT_ERR_INVALID_ARGUMENT).  Workers are numbered 0 .. n-1. */
unsigned int weft_runtime_workers(const weft_runtime *rt);

/* Runs fn(arg) as a green thread of `rt` and waits until it returns; stores
 * its return value in *result if result is not NULL.  Callable from a plain
 * OS thread (which blocks) or from a green thread (which parks: its worker
 * runs other green threads meanwhile).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (rt or fn NULL), ERROR_NOT_ENOUGH_MEMORY
 * (no stack), WEFT_ERR_SHUTDOWN. */
uint32_t weft_runtime_run(weft_runtime *rt, weft_thread_fn fn, void *arg, void **result);

/* Shuts `rt` down and frees it: see "Shutdown" above.  No other call may use
 * `rt` once this one has started.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (rt NULL), WEFT_ERR_WRONG_THREAD (called
 * from a green thread or worker of a runtime; nothing is freed). */
uint32_t weft_runtime_free(weft_runtime *rt);

/* ---- Green threads -------------------------------------------------------- */

/* Starts fn(arg) as a green thread of `rt`: on some worker (from a plain OS
 * thread, round robin; from a green thread of `rt`, its own worker, though an
 * idle worker may take the new thread before it starts).  Returns its handle,
 * or NULL on failure: WEFT_ERR_INVALID_ARGUMENT (rt or fn NULL),
 * ERROR_NOT_ENOUGH_MEMORY (no stack), WEFT_ERR_SHUTDOWN. */
weft_thread *weft_spawn(weft_runtime *rt, weft_thread_fn fn, void *arg);

/* As weft_spawn(), on worker `worker` (0 .. weft_runtime_workers(rt) - 1),
 * where the thread stays.  WEFT_ERR_INVALID_ARGUMENT if there is no such
 * worker. */
weft_thread *weft_spawn_on(weft_runtime *rt, unsigned int worker, weft_thread_fn fn, void *arg);

/* As weft_spawn(), and names the thread `name` (UTF-8; NULL or "" for no
 * name).  `weft ps PID`, `weft top PID` and `weft fs` show the name beside
 * the thread's entry point (fn, as a symbol).  The name is copied: `name` may
 * be freed once the call returns.  A name longer than 48 bytes is shown cut,
 * ending in "...".  A thread can also name itself with
 * weft_thread_set_name(), which works for threads from weft_spawn_on() and
 * weft_runtime_run() too. */
weft_thread *weft_spawn_named(weft_runtime *rt, const char *name, weft_thread_fn fn, void *arg);

/* The thread's id: its IPC address (weft/ipc.h) and its fiber id as
 * `weft ps` shows it.  Never 0 for a valid handle (0 with
 * WEFT_ERR_INVALID_ARGUMENT if t is NULL).  Once asked for, the id stays
 * known to IPC while the handle exists: after the thread has ended, IPC to
 * it fails with WEFT_ERR_PARTNER_DEAD.  (An id first asked for after the
 * thread has ended is not known to IPC: WEFT_ERR_NO_SUCH_THREAD.) */
uint64_t weft_thread_id(const weft_thread *t);

/* Waits for the thread to end and frees its handle; stores the thread's
 * return value in *result if result is not NULL.  From a green thread it
 * parks.  The handle is freed in every case except t == NULL.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (t NULL), WEFT_ERR_SHUTDOWN (the thread
 * was cancelled before it ran, or the caller's runtime is shutting down). */
uint32_t weft_thread_join(weft_thread *t, void **result);

/* Frees the handle without waiting: the thread runs on, and its return value
 * is dropped.  NULL is ignored. */
void weft_thread_detach(weft_thread *t);

/* ---- The running green thread --------------------------------------------- */

/* Lets the other ready green threads of this worker run, and returns (at once
 * if there are none).  From a plain OS thread: sched_yield().
 * Errors: WEFT_ERR_SHUTDOWN. */
uint32_t weft_yield(void);

/* Parks the calling green thread for `ns` nanoseconds (other green threads
 * run meanwhile); from a plain OS thread, sleeps.  Errors: WEFT_ERR_SHUTDOWN
 * (it may then return early). */
uint32_t weft_sleep_ns(uint64_t ns);

/* Names the calling green thread `name` (UTF-8; NULL or "" removes the name),
 * as weft_spawn_named() does; the name is copied.  Also names a fiber of
 * weft/fibers.h (the one running).
 * Errors: WEFT_ERR_NOT_GREEN_THREAD (the calling thread is neither a green
 * thread nor a fiber). */
uint32_t weft_thread_set_name(const char *name);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_RUNTIME_H */
