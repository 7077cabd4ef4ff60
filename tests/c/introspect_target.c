/* The target of crates/weft-cli/tests/ps.rs: a process whose fibers another process
 * (weft ps, weft top, the FUSE view) reads through the fiber registry.
 *
 *   introspect_target [K]      K fibers (default 8), fiber i created with entry
 *                              weft_target_alpha (i even, default 1 MiB stack) or
 *                              weft_target_beta (i odd, 256 KiB stack, touches 64 KiB
 *                              of it); fiber i is activated exactly i + 1 times and
 *                              fiber 0 runs ~50 ms in its first activation. A second
 *                              thread then tries to switch into the (running) main
 *                              fiber 3 times, which fails each time.
 *   introspect_target spin     two fibers switching between each other forever.
 *   introspect_target many N   N fibers (16 KiB stacks); every 100th is activated once.
 *   introspect_target green    a runtime of 2 workers and four green threads that
 *                              park: "green-alpha" (weft_spawn_named), one with a
 *                              name too long to keep whole, one without a name
 *                              (weft_spawn), and one on worker 1 (weft_spawn_on)
 *                              that names itself "renamed-by-itself"
 *                              (weft_thread_set_name). Prints "greenfn <address of
 *                              weft_target_green>", "renamerfn <address of
 *                              weft_target_renamer>", "long <the long name>", and
 *                              its ready line lists the four in that order. The
 *                              main thread's fiber is named "target-main".
 *
 * Then it prints, on stdout:
 *   tid <gettid() of the main thread>
 *   alpha <address of weft_target_alpha>
 *   beta <address of weft_target_beta>
 *   main <fiber id of the converted main thread>
 *   stack <id> <stack size> (one line per created fiber, default mode only)
 *   wall <id> <ns> (default mode: the wall time main spent in its switches to that
 *                   fiber, which bounds the fiber's run time)
 *   ready <id of fiber 0> <id of fiber 1> ... (nothing after "ready" in many mode)
 * and parks (spin mode: keeps switching) until stdin closes (or it is killed), then
 * exits normally, which removes its registry. */
#define _GNU_SOURCE
#include <weft/fibers.h>
#include <weft/runtime.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DIE(...)                                                                 \
    do {                                                                         \
        fprintf(stderr, "introspect_target: " __VA_ARGS__);                      \
        fprintf(stderr, " (GetLastError %u)\n", (unsigned)GetLastError());       \
        exit(2);                                                                 \
    } while (0)

static LPVOID g_main;
static int g_stop; /* set by the stdin watcher (spin mode) */

static pid_t my_tid(void) { return (pid_t)syscall(SYS_gettid); }

static uint64_t fiber_id(LPVOID f) {
    struct weft_fiber_stats s;
    if (!weft_fiber_stats(f, &s))
        DIE("weft_fiber_stats failed");
    return s.id;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- default mode -------------------------------------------------------- */

struct fiber_arg {
    int index;
};

static __attribute__((noinline)) void burn_50ms(void) {
    uint64_t end = now_ns() + 50 * 1000000u;
    while (now_ns() < end) {
    }
}

static __attribute__((noinline)) void touch_64k(void) {
    volatile char buf[64 * 1024];
    for (size_t i = 0; i < sizeof buf; i += 512)
        buf[i] = (char)i;
    __asm__ volatile("" ::"r"(buf) : "memory");
}

__attribute__((noinline)) VOID WINAPI weft_target_alpha(LPVOID param) {
    struct fiber_arg *a = param;
    int first = 1;
    for (;;) {
        if (first && a->index == 0)
            burn_50ms();
        first = 0;
        SwitchToFiber(g_main);
    }
}

__attribute__((noinline)) VOID WINAPI weft_target_beta(LPVOID param) {
    (void)param;
    touch_64k();
    for (;;)
        SwitchToFiber(g_main);
}

/* Tries to switch into the main fiber, which runs on the main thread: fails. */
static void *contender(void *unused) {
    (void)unused;
    LPVOID self = ConvertThreadToFiber(NULL);
    if (!self)
        DIE("contender: ConvertThreadToFiber failed");
    for (int i = 0; i < 3; i++) {
        SwitchToFiber(g_main);
        if (GetLastError() != ERROR_BUSY)
            DIE("contender: switching into the running main fiber did not fail busy");
    }
    if (!ConvertFiberToThread())
        DIE("contender: ConvertFiberToThread failed");
    return NULL;
}

static void park_until_stdin_closes(void) {
    char buf[256];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

static int run_default(int k) {
    struct fiber_arg *args = calloc((size_t)k, sizeof *args);
    LPVOID *f = calloc((size_t)k, sizeof *f);
    uint64_t *wall = calloc((size_t)k, sizeof *wall);
    if (!args || !f || !wall)
        DIE("out of memory");
    for (int i = 0; i < k; i++) {
        args[i].index = i;
        f[i] = i % 2 == 0 ? CreateFiber(0, weft_target_alpha, &args[i])
                          : CreateFiber(256 * 1024, weft_target_beta, &args[i]);
        if (!f[i])
            DIE("CreateFiber %d failed", i);
    }
    for (int i = 0; i < k; i++)
        for (int j = 0; j <= i; j++) {
            uint64_t t0 = now_ns();
            SwitchToFiber(f[i]);
            wall[i] += now_ns() - t0;
        }

    pthread_t t;
    if (pthread_create(&t, NULL, contender, NULL) != 0 || pthread_join(t, NULL) != 0)
        DIE("contender thread failed");

    for (int i = 0; i < k; i++) {
        struct weft_fiber_stats s;
        if (!weft_fiber_stats(f[i], &s))
            DIE("weft_fiber_stats failed");
        printf("stack %llu %llu\n", (unsigned long long)s.id,
               (unsigned long long)s.stack_size);
        printf("wall %llu %llu\n", (unsigned long long)s.id, (unsigned long long)wall[i]);
    }
    printf("ready");
    for (int i = 0; i < k; i++)
        printf(" %llu", (unsigned long long)fiber_id(f[i]));
    printf("\n");
    fflush(stdout);

    park_until_stdin_closes();
    for (int i = 0; i < k; i++)
        DeleteFiber(f[i]);
    free(wall);
    free(f);
    free(args);
    ConvertFiberToThread();
    return 0;
}

/* ---- spin mode ------------------------------------------------------------ */

static LPVOID g_a, g_b;

static VOID WINAPI spin_a(LPVOID unused) {
    (void)unused;
    for (;;) {
        if (__atomic_load_n(&g_stop, __ATOMIC_RELAXED))
            SwitchToFiber(g_main);
        SwitchToFiber(g_b);
    }
}

static VOID WINAPI spin_b(LPVOID unused) {
    (void)unused;
    for (;;)
        SwitchToFiber(g_a);
}

static void *stdin_watcher(void *unused) {
    (void)unused;
    park_until_stdin_closes();
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
    return NULL;
}

static int run_spin(void) {
    g_a = CreateFiber(0, spin_a, NULL);
    g_b = CreateFiber(0, spin_b, NULL);
    if (!g_a || !g_b)
        DIE("CreateFiber failed");
    pthread_t t;
    if (pthread_create(&t, NULL, stdin_watcher, NULL) != 0)
        DIE("pthread_create failed");
    printf("ready %llu %llu\n", (unsigned long long)fiber_id(g_a),
           (unsigned long long)fiber_id(g_b));
    fflush(stdout);
    SwitchToFiber(g_a); /* back only when stdin closed */
    pthread_join(t, NULL);
    DeleteFiber(g_a);
    DeleteFiber(g_b);
    ConvertFiberToThread();
    return 0;
}

/* ---- green mode ----------------------------------------------------------- */

#define LONG_NAME "a green thread whose name is much longer than forty-eight bytes"

/* Parks until the runtime shuts down. */
__attribute__((noinline)) void *weft_target_green(void *unused) {
    (void)unused;
    while (weft_sleep_ns(1000000) == 0) {
    }
    return NULL;
}

static int g_renamed;

__attribute__((noinline)) void *weft_target_renamer(void *unused) {
    (void)unused;
    if (weft_thread_set_name("renamed-by-itself") != 0)
        DIE("weft_thread_set_name failed");
    __atomic_store_n(&g_renamed, 1, __ATOMIC_RELEASE);
    return weft_target_green(NULL);
}

static int run_green(void) {
    /* The main thread is a fiber (of weft/fibers.h): it can be named too. */
    if (weft_thread_set_name("target-main") != 0)
        DIE("weft_thread_set_name on the main fiber failed");
    weft_runtime *rt = weft_runtime_new(2);
    if (!rt)
        DIE("weft_runtime_new failed");
    weft_thread *t[4] = {
        weft_spawn_named(rt, "green-alpha", weft_target_green, NULL),
        weft_spawn_named(rt, LONG_NAME, weft_target_green, NULL),
        weft_spawn(rt, weft_target_green, NULL),
        weft_spawn_on(rt, 1, weft_target_renamer, NULL),
    };
    for (int i = 0; i < 4; i++)
        if (!t[i])
            DIE("spawning green thread %d failed", i);
    while (!__atomic_load_n(&g_renamed, __ATOMIC_ACQUIRE))
        usleep(1000);
    printf("greenfn %p\nrenamerfn %p\nlong %s\n", (void *)weft_target_green,
           (void *)weft_target_renamer, LONG_NAME);
    printf("ready");
    for (int i = 0; i < 4; i++)
        printf(" %llu", (unsigned long long)weft_thread_id(t[i]));
    printf("\n");
    fflush(stdout);
    park_until_stdin_closes();
    for (int i = 0; i < 4; i++)
        weft_thread_detach(t[i]);
    if (weft_runtime_free(rt) != 0)
        DIE("weft_runtime_free failed");
    ConvertFiberToThread();
    return 0;
}

/* ---- many mode ------------------------------------------------------------ */

static VOID WINAPI many_entry(LPVOID unused) {
    (void)unused;
    for (;;)
        SwitchToFiber(g_main);
}

static int run_many(long n) {
    LPVOID *f = calloc((size_t)n, sizeof *f);
    if (!f)
        DIE("out of memory");
    for (long i = 0; i < n; i++) {
        f[i] = CreateFiber(16 * 1024, i % 2 == 0 ? weft_target_alpha : many_entry, NULL);
        if (!f[i])
            DIE("CreateFiber %ld of %ld failed", i, n);
        if (i % 100 == 1)
            SwitchToFiber(f[i]);
    }
    printf("ready\n");
    fflush(stdout);
    park_until_stdin_closes();
    for (long i = 0; i < n; i++)
        DeleteFiber(f[i]);
    free(f);
    ConvertFiberToThread();
    return 0;
}

int main(int argc, char **argv) {
    g_main = ConvertThreadToFiber(NULL);
    if (!g_main)
        DIE("ConvertThreadToFiber failed");
    printf("tid %d\n", (int)my_tid());
    printf("alpha %p\nbeta %p\n", (void *)weft_target_alpha, (void *)weft_target_beta);
    printf("main %llu\n", (unsigned long long)fiber_id(g_main));

    if (argc > 1 && strcmp(argv[1], "spin") == 0)
        return run_spin();
    if (argc > 1 && strcmp(argv[1], "green") == 0)
        return run_green();
    if (argc > 2 && strcmp(argv[1], "many") == 0)
        return run_many(strtol(argv[2], NULL, 10));
    int k = argc > 1 ? atoi(argv[1]) : 8;
    if (k < 1)
        DIE("K must be at least 1");
    return run_default(k);
}
