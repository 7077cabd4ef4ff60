/* Fibers on several threads: a fiber created on one thread runs on another
 * (migration, with its stack and data intact), a switch to a fiber running
 * on another thread fails with ERROR_BUSY and counts a failed activation,
 * and under contention (threads racing to enter a shared pool of fibers)
 * no fiber ever runs on two threads at once and the statistics add up. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* Reads of __thread variables go through noinline functions: a compiler
 * may keep a TLS address in a register across SwitchToFiber, and the fiber
 * may come back on another thread. */
static __thread int t_slot = -1;
static int __attribute__((noinline)) my_slot(void) {
    __asm__ volatile("" ::: "memory");
    return t_slot;
}

/* ---- migration ----------------------------------------------------------- */

static LPVOID g_main;
static LPVOID g_back; /* where the migrant switches back to */
static int g_hops;
static int g_tids[8];

static VOID WINAPI migrant(LPVOID param) {
    int *hops_on_stack = param;
    volatile int local = 0; /* lives on the fiber's stack across threads */
    for (;;) {
        CHECK(GetCurrentFiber() != NULL);
        CHECK(GetFiberData() == hops_on_stack);
        CHECK_EQ(local, g_hops);
        g_tids[g_hops % 8] = test_gettid();
        local++;
        g_hops++;
        SwitchToFiber(g_back);
    }
}

static void *migrate_thread(void *arg) {
    LPVOID m = arg;
    LPVOID me = ConvertThreadToFiber(NULL);
    CHECK(me != NULL);
    for (int i = 0; i < 3; i++) {
        int h = g_hops;
        g_back = me;
        SwitchToFiber(m);
        CHECK_EQ(g_hops, h + 1);
        CHECK_EQ(g_tids[h % 8], test_gettid());
        struct weft_fiber_stats s = test_stats(m);
        CHECK_EQ(s.last_tid, test_gettid());
        CHECK_EQ(s.state, WEFT_FIBER_READY);
    }
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

/* ---- deterministic ERROR_BUSY ------------------------------------------- */

static atomic_int g_busy_stage;
static LPVOID g_busy_thread_fiber;
static int g_busy_entries;

static VOID WINAPI busy_fiber(LPVOID param) {
    (void)param;
    g_busy_entries++;
    atomic_store(&g_busy_stage, 1);
    while (atomic_load(&g_busy_stage) < 2)
        sched_yield();
    SwitchToFiber(g_busy_thread_fiber);
    CHECK(!"busy_fiber resumed");
}

static void *busy_thread(void *arg) {
    g_busy_thread_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_busy_thread_fiber != NULL);
    SwitchToFiber(arg);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

/* ---- contention ---------------------------------------------------------- */

#define NTHREADS 4
#define NPOOL 6
#define ITERS 20000

static LPVOID g_pool[NPOOL];
static atomic_int g_inside[NPOOL];
static atomic_ullong g_entries[NPOOL];
static LPVOID g_thread_fibers[NTHREADS];
static volatile int g_entered[NTHREADS];
static atomic_int g_violations;
static atomic_int g_wrong_thread;
static atomic_int g_start;
static unsigned long long g_ok[NTHREADS], g_busy[NTHREADS], g_other_err[NTHREADS];

static VOID WINAPI pool_fiber(LPVOID param) {
    int me = (int)(intptr_t)param;
    for (;;) {
        if (atomic_exchange(&g_inside[me], 1) != 0)
            atomic_fetch_add(&g_violations, 1);
        int t = my_slot();
        if (t < 0 || t >= NTHREADS) {
            atomic_fetch_add(&g_wrong_thread, 1);
            t = 0;
        }
        atomic_fetch_add(&g_entries[me], 1);
        g_entered[t] = 1;
        /* Stay inside a little so that other threads find us busy. */
        for (volatile int spin = 0; spin < 200; spin++) {
        }
        atomic_store(&g_inside[me], 0);
        SwitchToFiber(g_thread_fibers[t]);
    }
}

static void *contender(void *arg) {
    int slot = (int)(intptr_t)arg;
    t_slot = slot;
    g_thread_fibers[slot] = ConvertThreadToFiber(NULL);
    CHECK(g_thread_fibers[slot] != NULL);
    atomic_fetch_add(&g_start, 1);
    while (atomic_load(&g_start) < NTHREADS)
        sched_yield();
    unsigned seed = 12345u + (unsigned)slot * 7919u;
    for (int i = 0; i < ITERS; i++) {
        seed = seed * 1103515245u + 12345u;
        LPVOID target = g_pool[(seed >> 16) % NPOOL];
        g_entered[slot] = 0;
        SetLastError(0);
        SwitchToFiber(target);
        CHECK_EQ(my_slot(), slot);
        CHECK(GetCurrentFiber() == g_thread_fibers[slot]);
        if (g_entered[slot]) {
            g_ok[slot]++;
        } else if (GetLastError() == ERROR_BUSY) {
            g_busy[slot]++;
        } else {
            g_other_err[slot]++;
        }
    }
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

int main(void) {
    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    int main_tid = test_gettid();

    /* Migration: created and first run on main, then run on three other
     * threads in turn, then on main again. */
    int hops = 0;
    LPVOID m = CreateFiber(0, migrant, &hops);
    CHECK(m != NULL);
    g_back = g_main;
    SwitchToFiber(m);
    CHECK_EQ(g_hops, 1);
    CHECK_EQ(g_tids[0], main_tid);
    for (int k = 0; k < 3; k++) {
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, migrate_thread, m), 0);
        CHECK_EQ(pthread_join(t, NULL), 0);
    }
    CHECK_EQ(g_hops, 10);
    g_back = g_main;
    SwitchToFiber(m);
    CHECK_EQ(g_hops, 11);
    struct weft_fiber_stats s = test_stats(m);
    CHECK_EQ(s.creator_tid, main_tid);
    CHECK_EQ(s.last_tid, main_tid);
    CHECK_EQ(s.activations, 11);
    CHECK_EQ(s.failed_activations, 0);
    DeleteFiber(m);

    /* A fiber running on another thread: ERROR_BUSY at once. */
    LPVOID bf = CreateFiber(0, busy_fiber, NULL);
    CHECK(bf != NULL);
    pthread_t bt;
    CHECK_EQ(pthread_create(&bt, NULL, busy_thread, bf), 0);
    while (atomic_load(&g_busy_stage) < 1)
        sched_yield();
    for (int i = 0; i < 5; i++) {
        SetLastError(0);
        SwitchToFiber(bf);
        CHECK_EQ(GetLastError(), ERROR_BUSY);
        CHECK(GetCurrentFiber() == g_main);
    }
    s = test_stats(bf);
    CHECK_EQ(s.activations, 1);
    CHECK_EQ(s.failed_activations, 5);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(g_busy_entries, 1);
    atomic_store(&g_busy_stage, 2);
    CHECK_EQ(pthread_join(bt, NULL), 0);
    CHECK_EQ(test_stats(bf).state, WEFT_FIBER_READY);
    DeleteFiber(bf);

    /* Contention. */
    for (int i = 0; i < NPOOL; i++) {
        g_pool[i] = CreateFiber(64 * 1024, pool_fiber, (LPVOID)(intptr_t)i);
        CHECK(g_pool[i] != NULL);
    }
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, contender, (void *)(intptr_t)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);

    CHECK_EQ(atomic_load(&g_violations), 0);
    CHECK_EQ(atomic_load(&g_wrong_thread), 0);
    unsigned long long ok = 0, busy = 0, other = 0, act = 0, failed = 0, entries = 0;
    for (int i = 0; i < NTHREADS; i++) {
        ok += g_ok[i];
        busy += g_busy[i];
        other += g_other_err[i];
        CHECK_EQ(g_ok[i] + g_busy[i] + g_other_err[i], ITERS);
    }
    for (int i = 0; i < NPOOL; i++) {
        s = test_stats(g_pool[i]);
        CHECK_EQ(s.state, WEFT_FIBER_READY);
        CHECK_EQ(s.activations, atomic_load(&g_entries[i]));
        act += s.activations;
        failed += s.failed_activations;
        entries += atomic_load(&g_entries[i]);
    }
    printf("contention: %llu entries, %llu ERROR_BUSY, %llu other\n", ok, busy, other);
    CHECK_EQ(other, 0);
    CHECK_EQ(ok, act);
    CHECK_EQ(ok, entries);
    CHECK_EQ(busy, failed);
    CHECK_EQ(ok + busy, (unsigned long long)NTHREADS * ITERS);

    for (int i = 0; i < NPOOL; i++)
        DeleteFiber(g_pool[i]);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    TEST_PASS("migrate_contention");
    return 0;
}
