/*
 * weft/syslet.h - syslets: programs of system calls, run asynchronously.
 *
 * A syslet is a small program of system calls ("atoms") with stop
 * conditions, branches and loops, submitted with one call.  It runs at once
 * on the caller's thread as long as no atom would block (the kernel
 * syslets' "cached" case: the final atom comes straight back); when one
 * would, the rest moves to a "cachemiss" thread and the call returns; the
 * completion later arrives in the context's ring, which the program drains
 * without a system call.
 * This is Ingo Molnar's 2007 design (sys_async_exec, sys_async_wait,
 * sys_umem_add) done in user space by weft; the C face of the Rust module
 * weft_runtime::syslet (docs/syslets.md has the details).
 *
 *     // open -> read -> close, the open's result feeding the other two.
 *     long fd = 0, n = 0, cret = 0;
 *     unsigned long dirfd = (unsigned long)AT_FDCWD, path = (unsigned long)"/etc/hostname";
 *     unsigned long flags = O_RDONLY, mode = 0, buf = (unsigned long)buffer, len = 4096;
 *     struct syslet_uatom a[3] = {{0}};
 *     a[0].nr = SYS_openat; a[0].ret_ptr = &fd; a[0].next = &a[1];
 *     a[0].flags = SYSLET_STOP_ON_NEGATIVE;      // a failed open ends it there
 *     a[0].arg_ptr[0] = &dirfd; a[0].arg_ptr[1] = &path;
 *     a[0].arg_ptr[2] = &flags; a[0].arg_ptr[3] = &mode;
 *     a[1].nr = SYS_read; a[1].ret_ptr = &n; a[1].next = &a[2];
 *     a[1].arg_ptr[0] = (unsigned long *)&fd;    // the open's result
 *     a[1].arg_ptr[1] = &buf; a[1].arg_ptr[2] = &len;
 *     a[2].nr = SYS_close; a[2].ret_ptr = &cret;
 *     a[2].arg_ptr[0] = (unsigned long *)&fd;
 *
 *     weft_syslet_ctx *ctx = weft_syslet_ctx_new(64);
 *     if (weft_syslet_validate(a, NULL, NULL) != 0)
 *         puts(weft_syslet_validate_error());
 *     uint64_t h;
 *     struct syslet_uatom *end = async_exec(ctx, a, &h);
 *     if (end == NULL && h != 0) {               // it went asynchronous
 *         struct weft_syslet_completion c;
 *         async_wait(ctx, 1, -1);
 *         weft_syslet_pop(ctx, &c);              // c.atom, c.ret, c.handle == h
 *     }                                          // else: ended at `end`
 *     weft_syslet_ctx_free(ctx);
 *
 * Atoms and how a syslet runs (the kernel syslets' rules)
 * -------------------------------------------------------
 *   - Arguments are pointers to values, read when the atom runs.  An atom's
 *     ret_ptr and a later atom's arg_ptr[i] may point to the same variable:
 *     that is how a result feeds a later argument.  The arguments end at the
 *     first NULL arg_ptr; the ones after it are 0.
 *   - After an atom runs, its result (>= 0, or -errno) goes to *ret_ptr (if
 *     ret_ptr is not NULL).  If one of its stop conditions holds
 *     (SYSLET_STOP_ON_*), the syslet ends at that atom, unless the atom has
 *     SYSLET_SKIP_TO_NEXT_ON_STOP: then it goes on with the linearly next atom
 *     in memory (atom + 1: the "else" branch).  Otherwise it follows next; a
 *     NULL next ends it.  A next pointing back is a loop (leave it with a stop
 *     condition, typically on a SYS_UMEM_ADD counter).
 *   - SYS_UMEM_ADD(ptr, val): *ptr += val on a 64-bit, 8-byte-aligned
 *     variable, atomically; returns the new value (val 0 reads it).  Its first
 *     argument is the variable's address, so arg_ptr[0] points to a variable
 *     that holds that address.
 *   - A syslet's result is its final atom and that atom's result: -errno if
 *     the system call failed (a failing open with SYSLET_STOP_ON_NEGATIVE says
 *     which atom failed and why), -ECANCELED if cancelled, -EFAULT if a
 *     pointer (the atom itself, an argument pointer, ret_ptr, next, a
 *     umem_add variable) was bad: never a crash.  An unknown system call
 *     number gives -ENOSYS, a forbidden one (fork, clone, execve, exit...)
 *     -EPERM: weft_syslet_validate() finds both before anything runs.
 *   - Memory: the atoms and everything they point to are the caller's, and
 *     must stay valid (and not be written by the caller) until the syslet has
 *     completed: until async_exec / weft_syslet_exec returns if it finished
 *     inline, else until its completion has been popped.  Invalid addresses
 *     are caught (-EFAULT); memory freed and reused meanwhile is not.
 *   - Atoms that never block (close, lseek, umem_add, setsockopt...) run
 *     inline; calls with a non-blocking form (read, write, open, accept,
 *     recv...) run inline when that form succeeds.  A call that would block,
 *     or an atom with SYSLET_ASYNC, moves the syslet to a cachemiss thread
 *     from that atom on.  SYSLET_SYNC keeps an atom inline even if it blocks
 *     (a green thread parks meanwhile; its worker runs other green threads).
 *     An inline run also hands over after 256 atoms (a loop over cached data
 *     would otherwise keep the caller).
 *   - SYSLET_NO_COMPLETE: if an asynchronous syslet ends at this atom, no
 *     completion is posted (the syslet is just forgotten).
 *
 * Contexts, completions, cancellation
 * -----------------------------------
 *   - A context (weft_syslet_ctx) owns a completion ring of ring_size slots.
 *     A full ring drops nothing: the completion waits in an overflow list
 *     and moves in as the ring drains (weft_syslet_overflowed() counts those,
 *     to size the ring).  A context may be used from several threads at once.
 *   - A syslet is "in flight" from the moment it goes asynchronous until its
 *     completion is popped (or, with SYSLET_NO_COMPLETE, until it ends).
 *   - weft_syslet_ctx_free() refuses (WEFT_ERR_SYSLET_BUSY, nothing freed)
 *     while any syslet is in flight: the cachemiss thread still uses the
 *     caller's memory.  Cancel, wait and pop first.
 *   - weft_syslet_cancel(): the syslet stops before its next atom, and an
 *     atom blocked on a cachemiss thread is interrupted (a signal,
 *     SIGRTMIN+7, whose handler does nothing); its completion then reports
 *     -ECANCELED, or -EINTR from the interrupted call.  A syslet that had
 *     already finished (completion not popped yet) keeps its own result.
 *   - async_wait() parks only the calling green thread (weft/runtime.h), or
 *     blocks a plain OS thread.
 *
 * Errors
 * ------
 * Functions that return uint32_t return 0 or an error code; the others say
 * below how they fail.  On failure the code is also set as GetLastError(),
 * and weft_error_message(code) (weft/fibers.h) explains it; for
 * weft_syslet_validate(), weft_syslet_validate_error() also says which atom
 * and what exactly.  Entry points that may park (async_exec and
 * weft_syslet_exec with a SYSLET_SYNC atom, async_wait) fail with
 * WEFT_ERR_SHUTDOWN when the runtime of the calling green thread shuts down.
 * After a SHUTDOWN from async_exec/weft_syslet_exec, the SYSLET_SYNC atom's
 * system call may still be running on weft's blocking pool: keep the memory
 * its arguments point to (a read buffer, say) alive until the process exits,
 * or until that call must have returned.
 *
 * Linux only (LP64: x86_64, aarch64).  Link with -lweft.
 */
#ifndef WEFT_SYSLET_H
#define WEFT_SYSLET_H

#include <stddef.h>
#include <stdint.h>

#include <weft/runtime.h> /* WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_SHUTDOWN, ... */

#if !defined(__LP64__)
#error "weft/syslet.h: struct syslet_uatom is laid out for LP64 (64-bit Linux) only"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes (see also weft/runtime.h) ------------------------------- */

/* weft_syslet_validate: an atom names a system call number that weft's
 * syslet table does not know (running it gives -ENOSYS). */
#define WEFT_ERR_SYSLET_UNKNOWN_SYSCALL 0x20000201u
/* weft_syslet_validate: an atom names a system call that cannot run in a
 * syslet (fork, vfork, clone, execve, exit...; running it gives -EPERM). */
#define WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL 0x20000202u
/* weft_syslet_validate: an atom has fewer argument pointers (before the first
 * NULL one) than its system call takes. */
#define WEFT_ERR_SYSLET_MISSING_ARGUMENT 0x20000203u
/* weft_syslet_validate: an atom's flags have bits that are not SYSLET_*. */
#define WEFT_ERR_SYSLET_BAD_FLAGS 0x20000204u
/* weft_syslet_validate: an atom has SYSLET_ASYNC with SYSLET_SYNC. */
#define WEFT_ERR_SYSLET_ASYNC_AND_SYNC 0x20000205u
/* weft_syslet_validate: an atom cannot be read: a bad first pointer, a bad
 * next, or no readable atom after one with SYSLET_SKIP_TO_NEXT_ON_STOP. */
#define WEFT_ERR_SYSLET_BAD_ATOM 0x20000206u
/* weft_syslet_ctx_free: syslets are in flight in the context. */
#define WEFT_ERR_SYSLET_BUSY 0x20000207u
/* weft_syslet_cancel: no syslet of the context has this handle (it never went
 * asynchronous there, or its completion has been popped). */
#define WEFT_ERR_SYSLET_NOT_IN_FLIGHT 0x20000208u

/* ---- The atom (the kernel syslets' struct syslet_uatom) ------------------ */

/* One system call of a syslet: 88 bytes, the layout of the Rust
 * weft_runtime::syslet::SysletUatom. */
struct syslet_uatom {
    unsigned long flags;        /* SYSLET_* */
    unsigned long nr;           /* system call number (SYS_*), or SYS_UMEM_ADD */
    long *ret_ptr;              /* where the result goes (NULL: nowhere) */
    struct syslet_uatom *next;  /* the atom after this one (NULL: the end) */
    unsigned long *arg_ptr[6];  /* pointers to the arguments, NULL-terminated */
#ifdef __cplusplus
    void *private_;             /* "private" is a C++ keyword */
#else
    void *private;              /* the caller's; never touched */
#endif
};

/* Layout checks (C99 and C++ alike: a negative array size fails to compile). */
typedef char weft_syslet_check_uatom_size[sizeof(struct syslet_uatom) == 88 ? 1 : -1];
typedef char weft_syslet_check_uatom_args[offsetof(struct syslet_uatom, arg_ptr) == 32 ? 1 : -1];

/* Run this atom (and the rest of the syslet) on a cachemiss thread at once,
 * without trying it inline (for calls known to block, or to take long). */
#define SYSLET_ASYNC 0x00000001UL
/* Never go asynchronous: run inline even if the call blocks. */
#define SYSLET_SYNC 0x00000002UL
/* If an asynchronous syslet ends at this atom, post no completion. */
#define SYSLET_NO_COMPLETE 0x00000004UL
/* Stop if the result is not 0. */
#define SYSLET_STOP_ON_NONZERO 0x00000008UL
/* Stop if the result is 0. */
#define SYSLET_STOP_ON_ZERO 0x00000010UL
/* Stop if the result is negative (a failed call: -errno). */
#define SYSLET_STOP_ON_NEGATIVE 0x00000020UL
/* Stop if the result is 0 or negative. */
#define SYSLET_STOP_ON_NON_POSITIVE 0x00000040UL
/* On a stop condition, go on with the linearly next atom (atom + 1) instead
 * of stopping. */
#define SYSLET_SKIP_TO_NEXT_ON_STOP 0x00000080UL

/* Every stop condition, and every defined flag. */
#define SYSLET_STOP_MASK                                                     \
    (SYSLET_STOP_ON_NONZERO | SYSLET_STOP_ON_ZERO | SYSLET_STOP_ON_NEGATIVE | \
     SYSLET_STOP_ON_NON_POSITIVE)
#define SYSLET_FLAGS                                                         \
    (SYSLET_ASYNC | SYSLET_SYNC | SYSLET_NO_COMPLETE | SYSLET_STOP_MASK |     \
     SYSLET_SKIP_TO_NEXT_ON_STOP)

/* weft's sys_umem_add(ptr, val) (as in the kernel syslets): outside Linux's
 * numbers. */
#define SYS_UMEM_ADD 0x100000UL

/* ---- Contexts ---------------------------------------------------------------- */

/* A syslet context: a completion ring and the syslets in flight (opaque). */
typedef struct weft_syslet_ctx weft_syslet_ctx;

/* The largest ring_size weft_syslet_ctx_new() accepts. */
#define WEFT_SYSLET_RING_MAX ((size_t)1 << 20)

/* A context whose ring holds ring_size completions (1 .. WEFT_SYSLET_RING_MAX).
 * Returns NULL on failure: WEFT_ERR_INVALID_ARGUMENT (another size). */
weft_syslet_ctx *weft_syslet_ctx_new(size_t ring_size);

/* Frees ctx.  Refused while syslets are in flight in it
 * (weft_syslet_in_flight(ctx) > 0): WEFT_ERR_SYSLET_BUSY, and ctx stays
 * usable.  No other call may use ctx once this one has succeeded.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (ctx NULL), WEFT_ERR_SYSLET_BUSY. */
uint32_t weft_syslet_ctx_free(weft_syslet_ctx *ctx);

/* ---- Running ------------------------------------------------------------------- */

/* A finished syslet (24 bytes; the Rust weft::WeftSysletCompletion). */
struct weft_syslet_completion {
    struct syslet_uatom *atom; /* the atom it ended at */
    int64_t ret;               /* that atom's result: >= 0, or -errno */
    uint64_t handle;           /* its handle; 0 if it finished inline */
};

/* The kernel syslets' sys_async_exec: runs the syslet whose first atom is
 * `first`.
 *   - It finished inline: returns its final atom, sets *handle to 0; the
 *     result is in the atom's *ret_ptr (if any) and weft_syslet_last_ret().
 *   - It went asynchronous: returns NULL and sets *handle to its handle
 *     (never 0); the completion will come to the ring.
 *   - Error: returns NULL and sets *handle to 0; the code is GetLastError():
 *     WEFT_ERR_INVALID_ARGUMENT (ctx or first NULL), WEFT_ERR_SHUTDOWN.
 * handle may be NULL (completions name their atom anyway); then NULL means
 * "asynchronous" for valid arguments.  Bad pointers inside the syslet are
 * not errors here: they are -EFAULT results. */
struct syslet_uatom *async_exec(weft_syslet_ctx *ctx, struct syslet_uatom *first,
                                uint64_t *handle);

/* The same, with a status code: returns 0 on success, then *handle is 0 if
 * the syslet finished inline (and *done, if done is not NULL, is its final
 * atom and result, handle 0), or its handle if it went asynchronous (*done
 * untouched).  Errors (out parameters untouched): WEFT_ERR_INVALID_ARGUMENT
 * (ctx, first or handle NULL), WEFT_ERR_SHUTDOWN. */
uint32_t weft_syslet_exec(weft_syslet_ctx *ctx, struct syslet_uatom *first,
                          struct weft_syslet_completion *done, uint64_t *handle);

/* The result of the calling OS thread's last syslet that finished inline
 * (async_exec or weft_syslet_exec); 0 before the first.  Per OS thread, like
 * GetLastError(): read it right after the call. */
int64_t weft_syslet_last_ret(void);

/* No time limit, for async_wait(). */
#define WEFT_SYSLET_TIMEOUT_NEVER ((int64_t)-1)

/* The kernel syslets' sys_async_wait: waits until at least min_completions
 * completions are in the ring, or timeout_ns nanoseconds pass (-1: no limit;
 * 0: do not wait).  Returns how many completions are in the ring (fewer than
 * min_completions if the timeout passed), or -1 on error:
 * WEFT_ERR_INVALID_ARGUMENT (ctx NULL, timeout below -1), WEFT_ERR_SHUTDOWN. */
int async_wait(weft_syslet_ctx *ctx, size_t min_completions, int64_t timeout_ns);

/* Takes the oldest completion from the ring into *out, without a system
 * call: returns 1 if there was one, 0 if the ring is empty (*out
 * untouched), -1 on error: WEFT_ERR_INVALID_ARGUMENT (ctx or out NULL).
 * Once popped, the syslet is no longer in flight: its memory is the
 * caller's again. */
int weft_syslet_pop(weft_syslet_ctx *ctx, struct weft_syslet_completion *out);

/* Cancels syslet `handle` of ctx (see "cancellation" above); returns at once.
 * Its completion still comes (-ECANCELED or -EINTR, or its own result if it
 * had finished), and must still be popped.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (ctx NULL), WEFT_ERR_SYSLET_NOT_IN_FLIGHT. */
uint32_t weft_syslet_cancel(weft_syslet_ctx *ctx, uint64_t handle);

/* How many syslets of ctx are in flight (asynchronous, completion not
 * popped).  0 with WEFT_ERR_INVALID_ARGUMENT if ctx is NULL. */
size_t weft_syslet_in_flight(const weft_syslet_ctx *ctx);

/* How many completions wait in the ring of ctx (0 if ctx is NULL). */
size_t weft_syslet_ready(const weft_syslet_ctx *ctx);

/* How many completions found the ring of ctx full and waited in its
 * overflow list (0 if ctx is NULL). */
uint64_t weft_syslet_overflowed(const weft_syslet_ctx *ctx);

/* ---- System calls ---------------------------------------------------------------- */

/* The number of the system call called `name` in weft's syslet table ("read",
 * "openat", "umem_add"...: the names of SYS_* in <sys/syscall.h>), or -1:
 * WEFT_ERR_SYSLET_UNKNOWN_SYSCALL (not in the table), WEFT_ERR_INVALID_ARGUMENT
 * (name NULL). */
long weft_syslet_nr(const char *name);

/* The name of system call nr in weft's syslet table (static text, forbidden
 * calls included), or NULL (WEFT_ERR_SYSLET_UNKNOWN_SYSCALL). */
const char *weft_syslet_name(unsigned long nr);

/* ---- Validation ------------------------------------------------------------------ */

/* weft_syslet_validate() sets *bad_index to this when the bad atom is not a
 * whole number of atoms away from `first`. */
#define WEFT_SYSLET_NO_INDEX PTRDIFF_MIN

/* Checks the syslet at `first` before it runs.  It walks every atom
 * reachable from first: through next, and through atom + 1 for atoms with
 * SYSLET_SKIP_TO_NEXT_ON_STOP (each atom once, so loops end), and checks
 * that each one can be read, names a known system call that may run in a
 * syslet, has at least as many argument pointers (before the first NULL
 * one) as that call takes, and has valid flags (only SYSLET_* bits, not
 * SYSLET_ASYNC with SYSLET_SYNC).  It does not run anything, nor read what
 * the argument pointers and ret_ptr point to (bad ones there are -EFAULT
 * results when the syslet runs).
 * Returns 0, or the code of the first problem found, in this order for each
 * atom: WEFT_ERR_SYSLET_BAD_ATOM, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL,
 * WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL, WEFT_ERR_SYSLET_MISSING_ARGUMENT,
 * WEFT_ERR_SYSLET_BAD_FLAGS, WEFT_ERR_SYSLET_ASYNC_AND_SYNC; or
 * WEFT_ERR_INVALID_ARGUMENT (first NULL).  On a problem, *bad_atom (if
 * bad_atom is not NULL) is the atom at fault and *bad_index (if not NULL)
 * its index from first (bad_atom - first, for atoms in one array;
 * WEFT_SYSLET_NO_INDEX otherwise), and weft_syslet_validate_error() says
 * which atom and what is wrong ("syslet atom 1 (at 0x...): read takes 3
 * arguments, 1 given ...").  `first` may be any address: the atoms are read
 * without trusting it. */
uint32_t weft_syslet_validate(const struct syslet_uatom *first,
                              const struct syslet_uatom **bad_atom, ptrdiff_t *bad_index);

/* The message of the calling OS thread's last failed weft_syslet_validate()
 * ("no error" before the first).  Static for the caller: do not free; valid
 * until the next weft_syslet_validate() on this thread. */
const char *weft_syslet_validate_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_SYSLET_H */
