/*
 * weft/introspect.h - read the fibers of a process, this one or another.
 *
 * Every process using weft keeps a registry of its fibers in shared memory
 * (a file weft-<pid> in $WEFT_REGISTRY_DIR, else /dev/shm, else
 * $XDG_RUNTIME_DIR; mode 0600, so only the same user and root can read it).
 * weft_introspect() copies it without stopping or signalling the process:
 * each fiber's record is consistent on its own (read under a seqlock), even
 * while the process switches fibers.  This is the C face of `weft ps`, and
 * of the Rust API weft_fiber::introspect.
 *
 * A process has a registry from the moment it first creates or converts a
 * fiber until it exits normally.
 *
 * Link with -lweft, as for weft/fibers.h.
 */
#ifndef WEFT_INTROSPECT_H
#define WEFT_INTROSPECT_H

#include <stddef.h>
#include <stdint.h>

#include <weft/fibers.h> /* WEFT_FIBER_READY / RUNNING / FINISHED */

#ifdef __cplusplus
extern "C" {
#endif

/* One fiber as weft_introspect() sees it (80 bytes; same layout as the Rust
 * struct weft::WeftFiberInfo).  A fiber's name, spawn site and function are
 * not in this record: `weft ps PID --json` shows them.  `flags` was a reserved
 * field, always 0, before it carried WEFT_FIBER_INFO_INCONSISTENT: the record's
 * size and layout are unchanged. */
struct weft_fiber_info {
    uint64_t id;                 /* unique in its process, never reused */
    uint32_t state;              /* WEFT_FIBER_READY/RUNNING/FINISHED */
    uint32_t is_thread_fiber;    /* 1: a converted thread (ConvertThreadToFiber) */
    uint64_t entry;              /* address of the start routine (0 for a converted thread) */
    int32_t creator_tid;         /* gettid() of the thread that created it */
    int32_t running_on;          /* gettid() of the thread running it now; 0 if not running */
    int32_t last_tid;            /* gettid() of the thread that ran it last; 0 if never */
    uint32_t flags;              /* WEFT_FIBER_INFO_* bits below; 0 for most fibers */
    uint64_t activations;        /* successful switches into it */
    uint64_t failed_activations; /* switches into it refused (ERROR_BUSY) */
    uint64_t run_time_ns;        /* total time it has run */
    uint64_t stack_base;         /* lowest usable stack address (0 for a converted thread) */
    uint64_t stack_size;         /* usable stack bytes (0 for a converted thread) */
};

/* In `flags`: the process kept this fiber's record busy for the whole time the
 * reader waited (a thread stopped in the middle of a switch, by a debugger say),
 * so the fields were copied one by one rather than as one: each is a value the
 * fiber had while the reader looked, but the state may be a switch behind or
 * ahead of the counts, and the run time leaves out a current slice.  The id and
 * stack are the fiber's.  `weft ps` shows such a fiber's state with a `?`. */
#define WEFT_FIBER_INFO_INCONSISTENT 1u

/* Reads the fibers of process `pid` (0 = this process): writes up to `cap`
 * entries to `out`, sorted by fiber id, and returns the number of fibers
 * (which may exceed cap: call again with a larger buffer; `out` may be NULL
 * when cap is 0, to ask only for the count).
 * On failure returns -1 with errno set:
 *   ESRCH   no such process, or it does not use weft (no registry);
 *   EACCES  not allowed to read its registry (another user's process);
 *   ESTALE  the process died without removing its registry;
 *   EINVAL  bad arguments (pid < 0, or out NULL with cap > 0), or a registry
 *           this version of weft cannot parse;
 *   other   an I/O error reading the registry (e.g. EIO, ENOMEM).
 * weft_introspect_error() then says what went wrong and what to do. */
long weft_introspect(int pid, struct weft_fiber_info *out, size_t cap);

/* A NUL-terminated message for the last weft_introspect() failure on this
 * thread: what went wrong and what to do ("no error" before any failure).
 * Do not free it; it stays valid until the next weft_introspect() call on
 * this thread. */
const char *weft_introspect_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_INTROSPECT_H */
