/* weft_introspect / weft_introspect_error (weft/introspect.h): the fibers of
 * this process read through its registry, every field checked against what
 * the program did; the cap semantics; and the errors (ESRCH for a process
 * without weft and for no process, EINVAL for bad arguments, ESTALE for a
 * registry left by a process that died). Run with WEFT_REGISTRY_DIR set to a
 * scratch directory (the harness does). */
#include "check.h"

#include <weft/introspect.h>
#include <weft/introspect.h> /* twice: include guard */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

STATIC_CHECK(size, sizeof(struct weft_fiber_info) == 80);
STATIC_CHECK(id, offsetof(struct weft_fiber_info, id) == 0);
STATIC_CHECK(state, offsetof(struct weft_fiber_info, state) == 8);
STATIC_CHECK(thread, offsetof(struct weft_fiber_info, is_thread_fiber) == 12);
STATIC_CHECK(entry, offsetof(struct weft_fiber_info, entry) == 16);
STATIC_CHECK(creator, offsetof(struct weft_fiber_info, creator_tid) == 24);
STATIC_CHECK(running_on, offsetof(struct weft_fiber_info, running_on) == 28);
STATIC_CHECK(last, offsetof(struct weft_fiber_info, last_tid) == 32);
STATIC_CHECK(flags, offsetof(struct weft_fiber_info, flags) == 36);
STATIC_CHECK(act, offsetof(struct weft_fiber_info, activations) == 40);
STATIC_CHECK(failed, offsetof(struct weft_fiber_info, failed_activations) == 48);
STATIC_CHECK(time, offsetof(struct weft_fiber_info, run_time_ns) == 56);
STATIC_CHECK(base, offsetof(struct weft_fiber_info, stack_base) == 64);
STATIC_CHECK(stack, offsetof(struct weft_fiber_info, stack_size) == 72);

#define MAX_FIBERS 16
#define STACK_A (64 * 1024)
#define STACK_B (256 * 1024)

static LPVOID g_main, g_a, g_b;
static uint64_t g_id_main, g_id_a, g_id_b;
static int g_tid;
/* Wall time spent in main's switches to a and to b: a fiber runs only inside them. */
static uint64_t g_wall_a, g_wall_b;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Switches to `f` and adds the wall time until it switches back to *wall. */
static void timed_switch(LPVOID f, uint64_t *wall) {
    uint64_t t0 = now_ns();
    SwitchToFiber(f);
    *wall += now_ns() - t0;
}

/* The most run time a fiber switched to for `wall` ns in all may show: `wall`, with 1%
 * and 1 ms for converting clock ticks to time. */
static uint64_t at_most(uint64_t wall) { return wall + wall / 100 + 1000000u; }

/* Reads this process's fibers; returns the count, checks the call worked. */
static long read_self(struct weft_fiber_info *out, size_t cap) {
    errno = 0;
    long n = weft_introspect(0, out, cap);
    if (n < 0) {
        fprintf(stderr, "weft_introspect(0): errno %d: %s\n", errno, weft_introspect_error());
        CHECK(n >= 0);
    }
    return n;
}

static const struct weft_fiber_info *find(const struct weft_fiber_info *v, long n, uint64_t id) {
    for (long i = 0; i < n; i++)
        if (v[i].id == id)
            return &v[i];
    fprintf(stderr, "fiber %llu not in the registry\n", (unsigned long long)id);
    CHECK(!"fiber found");
    return NULL;
}

/* ---- the fibers -------------------------------------------------------------- */

static VOID WINAPI routine_a(LPVOID param) {
    CHECK(param == &g_a);
    /* First activation: run ~20 ms, so run_time_ns has something to show. */
    uint64_t end = now_ns() + 20 * 1000000u;
    while (now_ns() < end) {
    }
    for (;;)
        SwitchToFiber(g_main);
}

static int g_b_checked;

static VOID WINAPI routine_b(LPVOID param) {
    CHECK(param == &g_b);
    for (;;) {
        if (!g_b_checked) {
            /* Seen from inside b: b runs on this thread, main and a wait. */
            struct weft_fiber_info v[MAX_FIBERS];
            long n = read_self(v, MAX_FIBERS);
            const struct weft_fiber_info *b = find(v, n, g_id_b);
            CHECK_EQ(b->state, WEFT_FIBER_RUNNING);
            CHECK_EQ(b->running_on, g_tid);
            CHECK_EQ(b->last_tid, g_tid);
            CHECK_EQ(b->activations, 1);
            const struct weft_fiber_info *m = find(v, n, g_id_main);
            CHECK_EQ(m->state, WEFT_FIBER_READY);
            CHECK_EQ(m->running_on, 0);
            CHECK_EQ(m->last_tid, g_tid);
            CHECK_EQ(find(v, n, g_id_a)->state, WEFT_FIBER_READY);
            g_b_checked = 1;
        }
        SwitchToFiber(g_main);
    }
}

/* Another thread tries to switch into the main fiber while it runs: refused. */
static void *contender(void *unused) {
    (void)unused;
    LPVOID self = ConvertThreadToFiber(NULL);
    CHECK(self != NULL);
    SetLastError(0);
    SwitchToFiber(g_main);
    CHECK_EQ(GetLastError(), ERROR_BUSY);
    CHECK(ConvertFiberToThread());
    return NULL;
}

/* ---- checks ---------------------------------------------------------------- */

static void check_fields(void) {
    struct weft_fiber_info v[MAX_FIBERS];
    memset(v, 0xAB, sizeof v);
    long n = read_self(v, MAX_FIBERS);
    CHECK_EQ(n, 3); /* main, a, b (the contender's fiber is gone) */
    for (long i = 1; i < n; i++)
        CHECK(v[i - 1].id < v[i].id); /* sorted by id */

    struct weft_fiber_stats sm = test_stats(g_main), sa = test_stats(g_a), sb = test_stats(g_b);

    const struct weft_fiber_info *m = find(v, n, g_id_main);
    CHECK_EQ(m->state, WEFT_FIBER_RUNNING);
    CHECK_EQ(m->is_thread_fiber, 1);
    CHECK_EQ(m->entry, 0);
    CHECK_EQ(m->creator_tid, g_tid);
    CHECK_EQ(m->running_on, g_tid);
    CHECK_EQ(m->last_tid, g_tid);
    CHECK_EQ(m->flags, 0); /* read consistently */
    CHECK_EQ(m->activations, 5); /* back from a 3 times and from b 2 times */
    CHECK_EQ(m->activations, sm.activations);
    CHECK_EQ(m->failed_activations, 1); /* the contender */
    CHECK_EQ(m->stack_base, 0);
    CHECK_EQ(m->stack_size, 0);

    const struct weft_fiber_info *a = find(v, n, g_id_a);
    CHECK_EQ(a->state, WEFT_FIBER_READY);
    CHECK_EQ(a->is_thread_fiber, 0);
    CHECK_EQ(a->entry, (uint64_t)(uintptr_t)routine_a);
    CHECK_EQ(a->entry, sa.entry);
    CHECK_EQ(a->creator_tid, g_tid);
    CHECK_EQ(a->running_on, 0);
    CHECK_EQ(a->last_tid, g_tid);
    CHECK_EQ(a->flags, 0);
    CHECK_EQ(a->activations, 3);
    CHECK_EQ(a->failed_activations, 0);
    /* Its 20 ms spin. Run time is wall time while the fiber is current, so a machine
     * busy with other work cannot make it shorter (19 ms: room for converting clock
     * ticks to time); and the fiber ran only inside main's switches to it. */
    CHECK(a->run_time_ns >= 19 * 1000000u);
    CHECK(a->run_time_ns <= at_most(g_wall_a));
    CHECK(a->stack_size >= STACK_A);
    CHECK_EQ(a->stack_size, sa.stack_size);
    CHECK(a->stack_base != 0 && a->stack_base % 4096 == 0); /* page-aligned mapping */

    const struct weft_fiber_info *b = find(v, n, g_id_b);
    CHECK_EQ(b->state, WEFT_FIBER_READY);
    CHECK_EQ(b->is_thread_fiber, 0);
    CHECK_EQ(b->entry, (uint64_t)(uintptr_t)routine_b);
    CHECK_EQ(b->entry, sb.entry);
    CHECK_EQ(b->creator_tid, g_tid);
    CHECK_EQ(b->running_on, 0);
    CHECK_EQ(b->last_tid, g_tid);
    CHECK_EQ(b->activations, 2);
    CHECK_EQ(b->failed_activations, 0);
    /* b's time is its own, none of a's spin: it fits in main's switches to b. */
    CHECK(b->run_time_ns > 0);
    CHECK(b->run_time_ns <= at_most(g_wall_b));
    CHECK(b->stack_size >= STACK_B);
    CHECK_EQ(b->stack_size, sb.stack_size);
    CHECK(b->stack_base != 0 && b->stack_base != a->stack_base);

    /* Run time agrees with weft_fiber_stats (two clocks read a moment apart). */
    uint64_t lo = sa.run_time_ns - sa.run_time_ns / 20, hi = sa.run_time_ns + sa.run_time_ns / 20;
    CHECK(a->run_time_ns >= lo && a->run_time_ns <= hi);
}

static void check_cap(void) {
    /* cap 0, out NULL: only the count. */
    CHECK_EQ(read_self(NULL, 0), 3);

    /* cap 1: the count is still 3; only out[0] written (the lowest id). */
    struct weft_fiber_info v[4], sentinel;
    memset(v, 0xAB, sizeof v);
    memset(&sentinel, 0xAB, sizeof sentinel);
    CHECK_EQ(read_self(v, 1), 3);
    CHECK_EQ(v[0].id, g_id_main < g_id_a ? g_id_main : g_id_a);
    CHECK(memcmp(&v[1], &sentinel, sizeof sentinel) == 0);

    /* cap larger than the count: 3 written, the rest untouched. */
    memset(v, 0xAB, sizeof v);
    CHECK_EQ(read_self(v, 4), 3);
    CHECK(memcmp(&v[3], &sentinel, sizeof sentinel) == 0);
    CHECK(v[2].id != sentinel.id);
}

static void check_fails(int pid, struct weft_fiber_info *out, size_t cap, int expected,
                        const char *what) {
    errno = 0;
    long n = weft_introspect(pid, out, cap);
    if (n != -1 || errno != expected) {
        fprintf(stderr, "%s: weft_introspect(%d, %p, %zu) = %ld errno %d (%s), expected -1 errno %d\n",
                what, pid, (void *)out, cap, n, errno, weft_introspect_error(), expected);
        CHECK(!"weft_introspect failed as expected");
    }
    const char *msg = weft_introspect_error();
    CHECK(msg != NULL && strlen(msg) > 10);
}

static void check_errors(void) {
    struct weft_fiber_info v[MAX_FIBERS];
    CHECK(strlen(weft_introspect_error()) > 0);

    /* Our parent (the test harness) does not use weft. */
    check_fails((int)getppid(), v, MAX_FIBERS, ESRCH, "parent without weft");
    /* No such process. */
    check_fails(999999, v, MAX_FIBERS, ESRCH, "pid 999999");
    CHECK(strstr(weft_introspect_error(), "999999") != NULL);
    /* Bad arguments. */
    check_fails(0, NULL, 4, EINVAL, "NULL out with cap 4");
    CHECK(strstr(weft_introspect_error(), "NULL") != NULL);
    check_fails(-5, v, MAX_FIBERS, EINVAL, "negative pid");
    /* A success leaves the last message alone and still works after failures. */
    CHECK_EQ(read_self(v, MAX_FIBERS), 3);

    /* A child that uses weft (it inherits our fibers, in a registry of its
     * own) and dies without cleaning up (_exit skips atexit): its registry is
     * stale once it is reaped. */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        LPVOID f = CreateFiber(0, routine_a, &g_a);
        _exit(f != NULL ? 0 : 3);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    check_fails((int)child, v, MAX_FIBERS, ESTALE, "a child that died without cleanup");
    const char *dir = getenv("WEFT_REGISTRY_DIR");
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/weft-%d", dir, (int)child);
        CHECK(unlink(path) == 0); /* it was there: remove it */
    }
}

int main(void) {
    g_tid = test_gettid();

    /* Before any fiber exists this process has no registry. */
    errno = 0;
    CHECK_EQ(weft_introspect(0, NULL, 0), -1);
    CHECK_EQ(errno, ESRCH);

    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    g_a = CreateFiber(STACK_A, routine_a, &g_a);
    g_b = CreateFiber(STACK_B, routine_b, &g_b);
    CHECK(g_a != NULL && g_b != NULL);
    g_id_main = test_stats(g_main).id;
    g_id_a = test_stats(g_a).id;
    g_id_b = test_stats(g_b).id;

    /* Fresh fibers: never activated. */
    {
        struct weft_fiber_info v[MAX_FIBERS];
        long n = read_self(v, MAX_FIBERS);
        CHECK_EQ(n, 3);
        const struct weft_fiber_info *a = find(v, n, g_id_a);
        CHECK_EQ(a->state, WEFT_FIBER_READY);
        CHECK_EQ(a->activations, 0);
        CHECK_EQ(a->last_tid, 0);
        CHECK_EQ(a->run_time_ns, 0);
    }

    timed_switch(g_a, &g_wall_a);
    timed_switch(g_b, &g_wall_b); /* b checks the registry from inside */
    CHECK(g_b_checked);
    timed_switch(g_a, &g_wall_a);
    timed_switch(g_b, &g_wall_b);
    timed_switch(g_a, &g_wall_a);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, contender, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);

    check_fields();
    check_cap();
    check_errors();

    DeleteFiber(g_a);
    DeleteFiber(g_b);
    CHECK_EQ(read_self(NULL, 0), 1); /* deleted fibers leave the registry */
    CHECK(ConvertFiberToThread());

    TEST_PASS("introspect");
    return 0;
}
