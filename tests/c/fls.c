/* Fiber-local storage, as Windows behaves: index range and exhaustion
 * (ERROR_NOT_ENOUGH_MEMORY), indexes outside the range, indexes that are not
 * allocated (usable by get and set, refused by FlsFree), last error on
 * success, per-fiber values, a new fiber's missing FLS (ERROR_INVALID_PARAMETER
 * until it stores a value), values following a migrating fiber, FlsFree
 * callbacks for every holder, values kept by ConvertFiberToThread and
 * callbacks at the exit of a thread. */
#include "check.h"

#include <pthread.h>
#include <stdint.h>

static LPVOID g_main;

#include "fls_log.h"

/* ---- helpers ----------------------------------------------------------- */

/* An index outside 1..=4079: every call refuses it. */
static void check_out_of_range(DWORD idx) {
    SetLastError(0);
    CHECK_ERR(FlsGetValue(idx) == NULL, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(FlsSetValue(idx, (PVOID)1) == FALSE, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(FlsFree(idx) == FALSE, ERROR_INVALID_PARAMETER);
}

/* An index in range that is not allocated (never, or freed): FlsFree
 * refuses it; get and set work, as on Windows (the value is left NULL). */
static void check_not_allocated(DWORD idx) {
    SetLastError(0);
    CHECK_ERR(FlsFree(idx) == FALSE, ERROR_INVALID_PARAMETER);
    SetLastError(99);
    CHECK(FlsGetValue(idx) == NULL);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    SetLastError(99);
    CHECK_EQ(FlsSetValue(idx, (PVOID)0x217), TRUE);
    CHECK_EQ(GetLastError(), 99); /* success leaves the last error alone */
    SetLastError(99);
    CHECK(FlsGetValue(idx) == (PVOID)0x217);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK_EQ(FlsSetValue(idx, NULL), TRUE);
}

/* Indexes allocated by the exhaustion step. */
static DWORD g_all[FLS_MAXIMUM_AVAILABLE + 1];
static int g_nall;

/* Every index of g_all reads NULL, with `err` as the last error (a fiber
 * that has no FLS yet gets ERROR_INVALID_PARAMETER). */
static void check_all_null(DWORD err) {
    for (int i = 0; i < g_nall; i++) {
        SetLastError(99);
        CHECK(FlsGetValue(g_all[i]) == NULL);
        CHECK_EQ(GetLastError(), err);
    }
}

/* ---- per-fiber values ---------------------------------------------------- */

static DWORD g_idx_plain; /* no callback */
static DWORD g_idx_cb;    /* fls_cb */
static int g_x, v_main, v_a1, v_a2, v_b1, v_c1, v_m1, v_m2, v_conv, v_plain;

enum {
    CMD_CHECK_FRESH,
    CMD_SET_A,
    CMD_CHECK_A,
    CMD_SET_NULL,
    CMD_CHECK_ALL_NULL,
    CMD_CHECK_ALL_NULL_FRESH,
    CMD_SET_C_THEN_NULL
};
static int g_cmd;

/* Each worker fiber executes g_cmd and switches back to main. */
static VOID WINAPI worker(LPVOID param) {
    PVOID mine = param;
    for (;;) {
        switch (g_cmd) {
        case CMD_CHECK_FRESH:
            /* A new fiber has no FLS until it stores a value (any value):
             * FlsGetValue fails, as on Windows. */
            SetLastError(99);
            CHECK(FlsGetValue(g_idx_plain) == NULL);
            CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
            SetLastError(99);
            CHECK(FlsGetValue(g_idx_cb) == NULL);
            CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
            break;
        case CMD_SET_A:
            CHECK_EQ(FlsSetValue(g_idx_plain, mine), TRUE);
            CHECK_EQ(FlsSetValue(g_idx_cb, mine), TRUE);
            break;
        case CMD_CHECK_A:
            CHECK(FlsGetValue(g_idx_plain) == mine);
            CHECK(FlsGetValue(g_idx_cb) == mine);
            break;
        case CMD_SET_NULL:
            CHECK_EQ(FlsSetValue(g_idx_cb, NULL), TRUE);
            break;
        case CMD_SET_C_THEN_NULL:
            CHECK_EQ(FlsSetValue(g_idx_cb, &v_c1), TRUE);
            CHECK_EQ(FlsSetValue(g_idx_cb, NULL), TRUE);
            break;
        case CMD_CHECK_ALL_NULL:
            check_all_null(ERROR_SUCCESS);
            break;
        case CMD_CHECK_ALL_NULL_FRESH:
            check_all_null(ERROR_INVALID_PARAMETER);
            break;
        }
        SwitchToFiber(g_main);
    }
}

static void run(LPVOID f, int cmd) {
    g_cmd = cmd;
    SwitchToFiber(f);
    CHECK(GetCurrentFiber() == g_main);
}

/* ---- migration --------------------------------------------------------- */

static LPVOID g_mig;
static LPVOID g_t_fiber;
static int g_mig_step;

static VOID WINAPI migrant(LPVOID param) {
    (void)param;
    int home = test_gettid();
    CHECK(FlsSetValue(g_idx_plain, &v_m1));
    g_mig_step = 1;
    SwitchToFiber(g_main);
    /* Now on the other thread. */
    CHECK(test_gettid() != home);
    CHECK(FlsGetValue(g_idx_plain) == &v_m1);
    CHECK(FlsSetValue(g_idx_plain, &v_m2));
    g_mig_step = 2;
    SwitchToFiber(g_t_fiber);
    /* Back home. */
    CHECK_EQ(test_gettid(), home);
    CHECK(FlsGetValue(g_idx_plain) == &v_m2);
    g_mig_step = 3;
    for (;;)
        SwitchToFiber(g_main);
}

static void *migrate_thread(void *arg) {
    (void)arg;
    g_t_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_t_fiber != NULL);
    CHECK(FlsGetValue(g_idx_plain) == NULL); /* its own fiber's slots */
    SwitchToFiber(g_mig);
    CHECK_EQ(g_mig_step, 2);
    CHECK(FlsGetValue(g_idx_plain) == NULL);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

/* ---- ConvertFiberToThread keeps the values -------------------------------- */

static int g_conv_tid;

static void *convert_thread(void *arg) {
    (void)arg;
    g_conv_tid = test_gettid();
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    CHECK(FlsSetValue(g_idx_cb, &v_conv));
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    /* As on Windows, the values stay with the thread, and no callback runs
     * until the thread ends. */
    CHECK_EQ(calls_with(&v_conv, NULL), 0);
    CHECK(FlsGetValue(g_idx_cb) == &v_conv);
    return NULL;
}

/* ---- a thread that never converts --------------------------------------- */

static int g_plain_tid;
static int v_plain2;

static void *plain_thread(void *arg) {
    (void)arg;
    g_plain_tid = test_gettid();
    CHECK_EQ(IsThreadAFiber(), FALSE);
    SetLastError(5);
    CHECK(FlsGetValue(g_idx_cb) == NULL); /* not main's value */
    CHECK_EQ(GetLastError(), 0);
    CHECK(FlsSetValue(g_idx_cb, &v_plain));
    CHECK(FlsGetValue(g_idx_cb) == &v_plain);
    CHECK(FlsSetValue(g_idx_plain, &v_plain2));
    CHECK(FlsGetValue(g_idx_plain) == &v_plain2);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    return NULL; /* fls_cb(&v_plain) runs at exit */
}

int main(void) {
    /* Indexes outside 1..=4079, and ones not allocated, before anything is
     * allocated. */
    check_out_of_range(0);
    check_out_of_range(FLS_MAXIMUM_AVAILABLE);
    check_out_of_range(FLS_MAXIMUM_AVAILABLE + 1);
    check_out_of_range(FLS_OUT_OF_INDEXES);
    check_not_allocated(1);
    check_not_allocated(FLS_MAXIMUM_AVAILABLE - 1);

    /* FLS on a thread that has not converted. */
    DWORD idx = FlsAlloc(NULL);
    CHECK(idx != 0 && idx != FLS_OUT_OF_INDEXES && idx < FLS_MAXIMUM_AVAILABLE);
    SetLastError(77);
    CHECK(FlsGetValue(idx) == NULL);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(FlsSetValue(idx, &g_x), TRUE);
    CHECK(FlsGetValue(idx) == &g_x);
    CHECK_EQ(FlsSetValue(idx, NULL), TRUE);
    CHECK_EQ(FlsSetValue(idx, &g_x), TRUE);
    CHECK_EQ(FlsFree(idx), TRUE);
    check_not_allocated(idx); /* freed: reads NULL, a second FlsFree fails */

    g_idx_plain = FlsAlloc(NULL);
    g_idx_cb = FlsAlloc(fls_cb);
    CHECK(g_idx_plain != FLS_OUT_OF_INDEXES && g_idx_cb != FLS_OUT_OF_INDEXES);
    CHECK(g_idx_plain != 0 && g_idx_cb != 0 && g_idx_plain != g_idx_cb);

    /* Implicit FLS of a thread that never converts; callback at its exit. */
    CHECK(FlsSetValue(g_idx_cb, &v_main));
    pthread_t pt;
    CHECK_EQ(pthread_create(&pt, NULL, plain_thread, NULL), 0);
    CHECK_EQ(pthread_join(pt, NULL), 0);
    int tid = 0;
    CHECK_EQ(calls_with(&v_plain, &tid), 1);
    CHECK_EQ(tid, g_plain_tid);
    CHECK(FlsGetValue(g_idx_cb) == &v_main); /* main's own is untouched */
    CHECK(FlsSetValue(g_idx_cb, NULL));

    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    int me = test_gettid();

    /* New fibers read NULL; values are per fiber. */
    CHECK(FlsSetValue(g_idx_plain, &v_main));
    CHECK(FlsSetValue(g_idx_cb, &v_main));
    LPVOID a = CreateFiber(0, worker, &v_a1);
    LPVOID b = CreateFiber(0, worker, &v_b1);
    LPVOID c = CreateFiber(0, worker, &v_c1);
    LPVOID d = CreateFiber(0, worker, &v_a2); /* never runs */
    CHECK(a && b && c && d);
    run(a, CMD_CHECK_FRESH);
    run(b, CMD_CHECK_FRESH);
    run(c, CMD_CHECK_FRESH);
    run(a, CMD_SET_A);
    run(b, CMD_SET_A);
    CHECK(FlsGetValue(g_idx_plain) == &v_main);
    run(a, CMD_CHECK_A);
    run(b, CMD_CHECK_A);
    run(b, CMD_SET_NULL);
    run(c, CMD_SET_C_THEN_NULL);
    CHECK(FlsGetValue(g_idx_cb) == &v_main);
    CHECK_EQ(g_ncalls, 1); /* only v_plain so far: FlsSetValue runs no callback */

    /* FlsFree calls the callback once for every fiber holding a non-null
     * value (main, a), on the calling thread, and for no one else. */
    CHECK_EQ(FlsFree(g_idx_cb), TRUE);
    CHECK_EQ(g_ncalls, 3);
    tid = 0;
    CHECK_EQ(calls_with(&v_main, &tid), 1);
    CHECK_EQ(tid, me);
    tid = 0;
    CHECK_EQ(calls_with(&v_a1, &tid), 1);
    CHECK_EQ(tid, me);
    CHECK_EQ(calls_with(&v_b1, NULL), 0);
    CHECK_EQ(calls_with(&v_c1, NULL), 0);
    check_not_allocated(g_idx_cb);

    /* Exhaustion: 4079 indexes in all (g_idx_plain is one of them), all in
     * 1..=4079 and distinct; the freed g_idx_cb comes back among them. Then
     * FlsAlloc fails with ERROR_NOT_ENOUGH_MEMORY, as on Windows. */
    for (;;) {
        DWORD i = FlsAlloc(fls_cb);
        if (i == FLS_OUT_OF_INDEXES)
            break;
        CHECK(g_nall < FLS_MAXIMUM_AVAILABLE);
        g_all[g_nall++] = i;
    }
    CHECK_EQ(g_nall + 1, FLS_MAXIMUM_AVAILABLE - 1);
    {
        static unsigned char seen[FLS_MAXIMUM_AVAILABLE + 1];
        seen[g_idx_plain] = 1;
        for (int i = 0; i < g_nall; i++) {
            CHECK(g_all[i] >= 1 && g_all[i] < FLS_MAXIMUM_AVAILABLE);
            CHECK(!seen[g_all[i]]);
            seen[g_all[i]] = 1;
        }
        CHECK(seen[g_idx_cb]);
    }
    SetLastError(0);
    CHECK_EQ(FlsAlloc(NULL), FLS_OUT_OF_INDEXES);
    CHECK_EQ(GetLastError(), ERROR_NOT_ENOUGH_MEMORY);
    SetLastError(0);
    CHECK_EQ(FlsAlloc(fls_cb), FLS_OUT_OF_INDEXES);
    CHECK_EQ(GetLastError(), ERROR_NOT_ENOUGH_MEMORY);

    /* The reallocated slot reads NULL everywhere, as do all new ones; d has
     * never run, so it has no FLS yet. */
    check_all_null(ERROR_SUCCESS);
    run(a, CMD_CHECK_ALL_NULL);
    run(b, CMD_CHECK_ALL_NULL);
    run(c, CMD_CHECK_ALL_NULL);
    run(d, CMD_CHECK_ALL_NULL_FRESH);
    /* Untouched slot keeps its per-fiber values. */
    CHECK(FlsGetValue(g_idx_plain) == &v_main);

    /* Free one: it is the only one FlsAlloc can give back. */
    DWORD k = g_all[g_nall / 2];
    CHECK_EQ(FlsFree(k), TRUE);
    CHECK_EQ(FlsAlloc(NULL), k);
    CHECK_EQ(FlsAlloc(NULL), FLS_OUT_OF_INDEXES);
    for (int i = 0; i < g_nall; i++)
        CHECK_EQ(FlsFree(g_all[i]), TRUE);
    CHECK_EQ(g_ncalls, 3); /* all values were NULL */
    g_nall = 0;

    /* Values follow a fiber that migrates between threads. */
    g_mig = CreateFiber(0, migrant, NULL);
    CHECK(g_mig != NULL);
    SwitchToFiber(g_mig);
    CHECK_EQ(g_mig_step, 1);
    pthread_t mt;
    CHECK_EQ(pthread_create(&mt, NULL, migrate_thread, NULL), 0);
    CHECK_EQ(pthread_join(mt, NULL), 0);
    CHECK_EQ(g_mig_step, 2);
    CHECK(FlsGetValue(g_idx_plain) == &v_main);
    SwitchToFiber(g_mig);
    CHECK_EQ(g_mig_step, 3);

    /* ConvertFiberToThread keeps the values; they get their callback when
     * the thread ends, on that thread. */
    g_idx_cb = FlsAlloc(fls_cb);
    CHECK(g_idx_cb != FLS_OUT_OF_INDEXES);
    pthread_t ct;
    CHECK_EQ(pthread_create(&ct, NULL, convert_thread, NULL), 0);
    CHECK_EQ(pthread_join(ct, NULL), 0);
    tid = 0;
    CHECK_EQ(calls_with(&v_conv, &tid), 1);
    CHECK_EQ(tid, g_conv_tid);
    CHECK_EQ(g_ncalls, 4);

    DeleteFiber(a);
    DeleteFiber(b);
    DeleteFiber(c);
    DeleteFiber(d);
    DeleteFiber(g_mig);
    CHECK_EQ(g_ncalls, 4);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(FlsFree(g_idx_cb), TRUE);
    CHECK_EQ(FlsFree(g_idx_plain), TRUE);
    CHECK_EQ(g_ncalls, 4);
    TEST_PASS("fls");
    return 0;
}
