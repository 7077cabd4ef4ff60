/*
 * peers.c: the C "peers" that `weft bench` measures weft against.
 *
 * Every function here runs one timed batch of `n` iterations and writes the
 * elapsed time of the loop alone (setup excluded) to `*elapsed_ns`, measured
 * with CLOCK_MONOTONIC, the clock behind Rust's std::time::Instant, so the
 * Rust side can compare it directly with its own batches. Each returns 0 on
 * success or an errno-style code when its setup failed; the Rust wrappers in
 * src/bench/peers.rs turn that into an error message.
 *
 * Built by build.rs with the `cc` crate at -O2. The Boost.Context peer is C++
 * and lives in fcontext.cpp, built only when Boost.Context is installed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <ucontext.h>

#include <weft/fibers.h>

/* Keep a call a real call: GCC's noipa also stops interprocedural constant
 * propagation and "pure" inference; clang knows only noinline. */
#if defined(__clang__)
#define PEER_NOINLINE __attribute__((noinline))
#else
#define PEER_NOINLINE __attribute__((noipa))
#endif

#define PEER_STACK_SIZE (64 * 1024)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Results go here so that the compiler cannot drop the loops. */
static volatile uintptr_t peer_sink;

/* ---- switch: glibc swapcontext ping-pong ------------------------------- */

static ucontext_t pp_main, pp_peer;
static _Alignas(64) unsigned char pp_stack[PEER_STACK_SIZE];

static void pp_pong(void)
{
    for (;;)
        swapcontext(&pp_peer, &pp_main);
}

/* `round_trips` round trips = 2 * round_trips context switches. The first
 * swap enters pp_pong from its start; every later one resumes it. */
int peer_ucontext_pingpong(uint64_t round_trips, uint64_t *elapsed_ns)
{
    if (getcontext(&pp_peer) != 0)
        return errno ? errno : EINVAL;
    pp_peer.uc_stack.ss_sp = pp_stack;
    pp_peer.uc_stack.ss_size = sizeof pp_stack;
    pp_peer.uc_link = NULL;
    makecontext(&pp_peer, pp_pong, 0);

    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < round_trips; i++)
        swapcontext(&pp_main, &pp_peer);
    *elapsed_ns = now_ns() - t0;
    return 0;
}

/* ---- create: getcontext + makecontext + swapcontext in and back --------- */

static ucontext_t cr_main, cr_peer;
static _Alignas(64) unsigned char cr_stack[PEER_STACK_SIZE];

static void cr_body(void)
{
    swapcontext(&cr_peer, &cr_main);
}

/* One iteration: make a fresh context on the preallocated stack, switch
 * into it, and let it switch straight back (it is then abandoned). Kept out
 * of line because getcontext "returns twice", which would otherwise force
 * the caller's loop counter into memory. */
PEER_NOINLINE static int cr_once(void)
{
    if (getcontext(&cr_peer) != 0)
        return errno ? errno : EINVAL;
    cr_peer.uc_stack.ss_sp = cr_stack;
    cr_peer.uc_stack.ss_size = sizeof cr_stack;
    cr_peer.uc_link = NULL;
    makecontext(&cr_peer, cr_body, 0);
    swapcontext(&cr_main, &cr_peer);
    return 0;
}

int peer_ucontext_create(uint64_t n, uint64_t *elapsed_ns)
{
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        int rc = cr_once();
        if (rc != 0)
            return rc;
    }
    *elapsed_ns = now_ns() - t0;
    return 0;
}

/* ---- create: pthread_create + pthread_join of an empty thread ----------- */

static void *empty_thread(void *arg)
{
    return arg;
}

int peer_pthread_create(uint64_t n, uint64_t *elapsed_ns)
{
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        pthread_t t;
        int rc = pthread_create(&t, NULL, empty_thread, NULL);
        if (rc != 0)
            return rc;
        rc = pthread_join(t, NULL);
        if (rc != 0)
            return rc;
    }
    *elapsed_ns = now_ns() - t0;
    return 0;
}

/* ---- fls-get: pthread_getspecific --------------------------------------- */

static pthread_key_t gs_key;
static int gs_key_rc = -1;
static pthread_once_t gs_once = PTHREAD_ONCE_INIT;

static void gs_make_key(void)
{
    gs_key_rc = pthread_key_create(&gs_key, NULL);
}

int peer_pthread_getspecific(uint64_t n, uint64_t *elapsed_ns)
{
    static int value;
    pthread_once(&gs_once, gs_make_key);
    if (gs_key_rc != 0)
        return gs_key_rc;
    int rc = pthread_setspecific(gs_key, &value);
    if (rc != 0)
        return rc;

    uintptr_t acc = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        acc += (uintptr_t)pthread_getspecific(gs_key);
    *elapsed_ns = now_ns() - t0;
    peer_sink = acc;
    return 0;
}

/* ---- fls-get: a C __thread variable read through a non-inlined call ----- */

static __thread void *tls_value;

PEER_NOINLINE static void *tls_get(void)
{
    return tls_value;
}

int peer_thread_local_get(uint64_t n, uint64_t *elapsed_ns)
{
    static int value;
    tls_value = &value;

    uintptr_t acc = 0;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        acc += (uintptr_t)tls_get();
    *elapsed_ns = now_ns() - t0;
    peer_sink = acc;
    return 0;
}

/* ---- weft through its C API, as a program using fibers.h calls it -------- */

/* The fiber that bounces straight back; created once, on the bench thread,
 * which is already a fiber (the Rust side converted it). */
static LPVOID wp_home, wp_pong;

static VOID WINAPI wp_bounce(LPVOID param)
{
    (void)param;
    for (;;)
        SwitchToFiber(wp_home);
}

/* Ping-pong with SwitchToFiber from C call sites: the path a C program takes
 * (the exported entry point of libweft, statistics on unless the caller
 * turned run-time accounting off). */
int peer_weft_c_pingpong(uint64_t round_trips, uint64_t *elapsed_ns)
{
    if (!wp_pong) {
        wp_home = GetCurrentFiber();
        if (!wp_home)
            return EINVAL;
        wp_pong = CreateFiber(PEER_STACK_SIZE, wp_bounce, NULL);
        if (!wp_pong)
            return ENOMEM;
    }
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < round_trips; i++)
        SwitchToFiber(wp_pong);
    *elapsed_ns = now_ns() - t0;
    return GetLastError() == ERROR_SUCCESS ? 0 : EBUSY;
}
