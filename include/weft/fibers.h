/*
 * weft/fibers.h - the Windows Fibers API on Linux.
 *
 * Porting a Windows program
 * -------------------------
 *   1. Replace `#include <windows.h>` with `#include <weft/fibers.h>`.
 *   2. Link with `-lweft` (or use `pkg-config --cflags --libs weft`).
 *      For static linking use libweft.a plus
 *      `-lgcc_s -lutil -lrt -lpthread -lm -ldl` (`pkg-config --static --libs weft`).
 *
 * The names, types, constants and error codes below are the Windows ones
 * (ConvertThreadToFiber, CreateFiber, SwitchToFiber, FlsAlloc, GetLastError,
 * ERROR_INVALID_PARAMETER, ...), so fiber code compiles unchanged.
 * DWORD is 32 bits as on Windows (it is `unsigned int` here, so print it
 * with %u rather than %lu).
 *
 * Behaviour
 * ---------
 * Where Windows defines the behaviour, weft matches it: for instance
 * ConvertFiberToThread works from any fiber and keeps the FLS values,
 * FlsGetValue and FlsSetValue take any index from 1 to 4079 (allocated or
 * not), a new fiber's FlsGetValue fails with ERROR_INVALID_PARAMETER until it
 * stores a value, and FlsAlloc fails with ERROR_NOT_ENOUGH_MEMORY when every
 * index is taken. Where Windows leaves it undefined or crashes, weft reports
 * an error and the caller goes on:
 *   - SwitchToFiber on a thread that is not a fiber: ERROR_ALREADY_THREAD.
 *   - SwitchToFiber to a fiber that is running on another thread:
 *     ERROR_BUSY (the target's failed_activations count goes up).
 *   - DeleteFiber of a fiber running on another thread: ERROR_BUSY.
 *   - ConvertFiberToThread in another thread's converted fiber (the thread
 *     would go on on that thread's stack): ERROR_INVALID_PARAMETER.
 *   - A fiber handle is checked before anything is read: a deleted fiber's
 *     handle gives ERROR_INVALID_HANDLE, NULL or any other value
 *     ERROR_INVALID_PARAMETER.
 *   - A stack overflow in a fiber prints "stack overflow" with the fiber's
 *     id and stack size to stderr and the process dies by SIGSEGV.
 * Where weft cannot do as Windows does:
 *   - FIBER_FLAG_FLOAT_SWITCH is always on: every fiber has its own MXCSR
 *     and x87 control word, inherited from its creator at CreateFiber (their
 *     control bits; MXCSR's exception flags, which the ABI does not keep
 *     across a call, are not kept across a switch either).
 *   - While a thread lives, only that thread may delete its converted
 *     fiber (ERROR_INVALID_PARAMETER elsewhere).
 *   - A thread that ends inside another fiber leaves its converted fiber
 *     behind, and any thread may switch to it later, as on Windows, when
 *     libweft started the thread: libweft's pthread_create runs the start
 *     routine on a stack weft owns, which outlives the thread. Not so for
 *     the process's main thread, a thread given a stack of the caller's own
 *     (pthread_attr_setstack), or any thread with WEFT_THREAD_STACKS=off:
 *     there the converted fiber's frames are on the thread's own stack,
 *     which Linux frees when the thread ends, so switching to it then fails
 *     with ERROR_INVALID_HANDLE (DeleteFiber frees it and runs its FLS
 *     callbacks, as on Windows).
 *
 * As on Windows, a fiber start routine that returns ends the thread that
 * runs it, and DeleteFiber(GetCurrentFiber()) ends the calling thread.
 *
 * weft extensions (not in Windows): weft_fiber_stats() and
 * weft_error_message(), declared at the end of this file.
 */
#ifndef WEFT_FIBERS_H
#define WEFT_FIBERS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Windows types ---------------------------------------------------- */

/* WEFT_WIN_TYPES_DEFINED lets another porting header that already defines
 * these types (with the same meaning) be included before this one. */
#if !defined(WEFT_WIN_TYPES_DEFINED) && !defined(_WINDEF_)
#define WEFT_WIN_TYPES_DEFINED 1
#ifndef VOID
#define VOID void
#endif
typedef void *PVOID;
typedef void *LPVOID;
typedef int BOOL;
typedef uint32_t DWORD;
typedef size_t SIZE_T;
#endif

#ifndef WINAPI
#define WINAPI
#endif

#ifndef TRUE
#define TRUE 1
#endif
#ifndef FALSE
#define FALSE 0
#endif

#ifndef WEFT_FIBER_TYPES_DEFINED
#define WEFT_FIBER_TYPES_DEFINED 1
typedef VOID (WINAPI *PFIBER_START_ROUTINE)(LPVOID lpFiberParameter);
typedef PFIBER_START_ROUTINE LPFIBER_START_ROUTINE;
typedef VOID (WINAPI *PFLS_CALLBACK_FUNCTION)(PVOID lpFlsData);
#endif

/* ---- Constants -------------------------------------------------------- */

#ifndef FLS_OUT_OF_INDEXES
#define FLS_OUT_OF_INDEXES ((DWORD)0xFFFFFFFF)
#endif
#ifndef FLS_MAXIMUM_AVAILABLE
#define FLS_MAXIMUM_AVAILABLE 4080
#endif
#ifndef FIBER_FLAG_FLOAT_SWITCH
#define FIBER_FLAG_FLOAT_SWITCH 0x1
#endif

/* Error codes returned by GetLastError(). */
#ifndef ERROR_SUCCESS
#define ERROR_SUCCESS 0
#endif
#ifndef ERROR_INVALID_FUNCTION
#define ERROR_INVALID_FUNCTION 1
#endif
#ifndef ERROR_INVALID_HANDLE
#define ERROR_INVALID_HANDLE 6
#endif
#ifndef ERROR_NOT_ENOUGH_MEMORY
#define ERROR_NOT_ENOUGH_MEMORY 8
#endif
#ifndef ERROR_INVALID_PARAMETER
#define ERROR_INVALID_PARAMETER 87
#endif
#ifndef ERROR_BUSY
#define ERROR_BUSY 170
#endif
#ifndef ERROR_ALREADY_FIBER
#define ERROR_ALREADY_FIBER 1280
#endif
#ifndef ERROR_ALREADY_THREAD
#define ERROR_ALREADY_THREAD 1281
#endif

/* ---- Threads and fibers ----------------------------------------------- */

LPVOID WINAPI ConvertThreadToFiber(LPVOID lpParameter);
LPVOID WINAPI ConvertThreadToFiberEx(LPVOID lpParameter, DWORD dwFlags);
BOOL WINAPI ConvertFiberToThread(void);

LPVOID WINAPI CreateFiber(SIZE_T dwStackSize,
                          LPFIBER_START_ROUTINE lpStartAddress,
                          LPVOID lpParameter);
LPVOID WINAPI CreateFiberEx(SIZE_T dwStackCommitSize,
                            SIZE_T dwStackReserveSize, DWORD dwFlags,
                            LPFIBER_START_ROUTINE lpStartAddress,
                            LPVOID lpParameter);
VOID WINAPI SwitchToFiber(LPVOID lpFiber);
VOID WINAPI DeleteFiber(LPVOID lpFiber);

LPVOID WINAPI GetCurrentFiber(void);
LPVOID WINAPI GetFiberData(void);
BOOL WINAPI IsThreadAFiber(void);

/* ---- Fiber-local storage ---------------------------------------------- */

DWORD WINAPI FlsAlloc(PFLS_CALLBACK_FUNCTION lpCallback);
BOOL WINAPI FlsFree(DWORD dwFlsIndex);
PVOID WINAPI FlsGetValue(DWORD dwFlsIndex);
BOOL WINAPI FlsSetValue(DWORD dwFlsIndex, PVOID lpFlsData);

/* ---- Errors ------------------------------------------------------------ */

DWORD WINAPI GetLastError(void);
VOID WINAPI SetLastError(DWORD dwErrCode);

/* ---- weft extensions --------------------------------------------------- */

/* Values of weft_fiber_stats.state. */
#define WEFT_FIBER_READY 0u
#define WEFT_FIBER_RUNNING 1u
#define WEFT_FIBER_FINISHED 2u

/* A snapshot of one fiber's statistics (64 bytes, same layout as the Rust
 * struct weft_fiber::win::WeftFiberStats). */
struct weft_fiber_stats {
    uint64_t id;                 /* unique, never reused in a process */
    uintptr_t entry;             /* address of the start routine */
    size_t stack_size;           /* reserved stack size in bytes */
    uint64_t activations;        /* successful switches into the fiber */
    uint64_t failed_activations; /* switches refused with ERROR_BUSY */
    uint64_t run_time_ns;        /* time spent running */
    uint32_t state;              /* WEFT_FIBER_READY/RUNNING/FINISHED */
    int32_t creator_tid;         /* gettid() of the creating thread */
    int32_t last_tid;            /* gettid() of the thread that ran it last */
    uint32_t reserved;
};

/* Fills *out with the statistics of lpFiber.  Returns FALSE and sets
 * ERROR_INVALID_PARAMETER if lpFiber is no fiber handle or out is NULL, and
 * ERROR_INVALID_HANDLE if lpFiber's fiber has been deleted. */
BOOL weft_fiber_stats(LPVOID lpFiber, struct weft_fiber_stats *out);

/* A static, NUL-terminated description of an error code: what went wrong
 * and what to do.  Never NULL; do not free it. */
const char *weft_error_message(DWORD dwErrCode);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_FIBERS_H */
