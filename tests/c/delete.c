/* DeleteFiber: NULL, never-run fibers, FLS callbacks (non-null values only,
 * on the calling thread), fibers running on another thread (ERROR_BUSY),
 * another live thread's converted fiber (ERROR_INVALID_PARAMETER), the
 * converted fiber of a thread that ended in another fiber, deleting the
 * current fiber (ends the thread), stale handles, and many create/delete
 * cycles. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

static LPVOID g_main;

#include "fls_log.h"

static DWORD g_idx1, g_idx2, g_idx3;
static int v_a, v_b, v_c, v_d, v_e, v_f;

/* ---- fibers ----------------------------------------------------------- */

static VOID WINAPI never_runs(LPVOID param) {
    (void)param;
    CHECK(!"never_runs ran");
}

/* Sets slot1 = &v_a, slot2 = NULL, slot3 = set then reset to NULL. */
static VOID WINAPI fls_setter(LPVOID param) {
    (void)param;
    CHECK(FlsSetValue(g_idx1, &v_a));
    CHECK(FlsSetValue(g_idx2, NULL));
    CHECK(FlsSetValue(g_idx3, &v_c));
    CHECK(FlsSetValue(g_idx3, NULL));
    for (;;)
        SwitchToFiber(g_main);
}

/* ---- a fiber held busy on another thread ------------------------------- */

static atomic_int g_stage;
static LPVOID g_worker_thread_fiber;
static LPVOID g_held;
static int g_worker_tid;

static void wait_stage(int s) {
    while (atomic_load(&g_stage) < s)
        sched_yield();
}

static VOID WINAPI held(LPVOID param) {
    (void)param;
    CHECK(FlsSetValue(g_idx1, &v_b));
    atomic_store(&g_stage, 1); /* running on the worker */
    wait_stage(2);
    SwitchToFiber(g_worker_thread_fiber);
    CHECK(!"held resumed");
}

static void *worker(void *arg) {
    (void)arg;
    g_worker_tid = test_gettid();
    g_worker_thread_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_worker_thread_fiber != NULL);
    SwitchToFiber(g_held); /* returns once main has seen ERROR_BUSY */
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

/* ---- another thread's converted fiber, while suspended ----------------- */

static atomic_int g_stage2;
static LPVOID g_t2_fiber;
static LPVOID g_t2_other;

static VOID WINAPI t2_other(LPVOID param) {
    (void)param;
    atomic_store(&g_stage2, 1); /* g_t2_fiber is suspended now */
    while (atomic_load(&g_stage2) < 2)
        sched_yield();
    SwitchToFiber(g_t2_fiber);
    CHECK(!"t2_other resumed");
}

static void *t2_main(void *arg) {
    (void)arg;
    g_t2_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_t2_fiber != NULL);
    g_t2_other = CreateFiber(0, t2_other, NULL);
    CHECK(g_t2_other != NULL);
    SwitchToFiber(g_t2_other);
    CHECK(GetCurrentFiber() == g_t2_fiber); /* not deleted */
    DeleteFiber(g_t2_other);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

/* ---- DeleteFiber(GetCurrentFiber()) ends the thread -------------------- */

static int g_after_delete;
static LPVOID g_t3_fiber;

static VOID WINAPI self_deleter(LPVOID param) {
    (void)param;
    CHECK(FlsSetValue(g_idx1, &v_d));
    DeleteFiber(GetCurrentFiber());
    g_after_delete = 1;
    CHECK(!"DeleteFiber(GetCurrentFiber()) returned");
}

static void *t3_main(void *arg) {
    (void)arg;
    g_t3_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_t3_fiber != NULL);
    CHECK(FlsSetValue(g_idx1, &v_e));
    LPVOID f = CreateFiber(0, self_deleter, NULL);
    CHECK(f != NULL);
    SwitchToFiber(f);
    g_after_delete = 2;
    CHECK(!"the thread's fiber resumed after its thread ended");
    return NULL;
}

/* The thread's own converted fiber deletes itself. */
static void *t4_main(void *arg) {
    (void)arg;
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    CHECK(FlsSetValue(g_idx1, &v_f));
    DeleteFiber(GetCurrentFiber());
    g_after_delete = 3;
    CHECK(!"DeleteFiber(GetCurrentFiber()) returned on the thread fiber");
    return NULL;
}

static VOID WINAPI run_once(LPVOID param) {
    (*(int *)param)++;
    for (;;)
        SwitchToFiber(g_main);
}

int main(void) {
    g_idx1 = FlsAlloc(fls_cb);
    g_idx2 = FlsAlloc(fls_cb);
    g_idx3 = FlsAlloc(fls_cb);
    CHECK(g_idx1 != FLS_OUT_OF_INDEXES && g_idx2 != FLS_OUT_OF_INDEXES &&
          g_idx3 != FLS_OUT_OF_INDEXES);

    /* DeleteFiber(NULL). */
    SetLastError(0);
    DeleteFiber(NULL);
    CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);

    /* A fiber created (and deleted) before conversion never runs. */
    LPVOID nr = CreateFiber(0, never_runs, NULL);
    CHECK(nr != NULL);
    SetLastError(0);
    DeleteFiber(nr);
    CHECK_EQ(GetLastError(), 0);

    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    int me = test_gettid();

    nr = CreateFiber(0, never_runs, NULL);
    CHECK(nr != NULL);
    DeleteFiber(nr);
    CHECK_EQ(g_ncalls, 0);

    /* FLS callbacks run on DeleteFiber, for non-null values only, on the
     * calling thread. */
    LPVOID setter = CreateFiber(0, fls_setter, NULL);
    CHECK(setter != NULL);
    SwitchToFiber(setter);
    CHECK_EQ(g_ncalls, 0);
    DeleteFiber(setter);
    int tid = 0;
    CHECK_EQ(calls_with(&v_a, &tid), 1);
    CHECK_EQ(tid, me);
    CHECK_EQ(calls_with(&v_c, NULL), 0);
    CHECK_EQ(calls_with(NULL, NULL), 0);
    CHECK_EQ(g_ncalls, 1);

    /* A fiber running on another thread cannot be deleted. */
    g_held = CreateFiber(0, held, NULL);
    CHECK(g_held != NULL);
    pthread_t w;
    CHECK_EQ(pthread_create(&w, NULL, worker, NULL), 0);
    wait_stage(1);
    SetLastError(0);
    DeleteFiber(g_held);
    CHECK_EQ(GetLastError(), ERROR_BUSY);
    struct weft_fiber_stats s = test_stats(g_held); /* still alive */
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(s.last_tid, g_worker_tid);
    CHECK_EQ(calls_with(&v_b, NULL), 0);
    atomic_store(&g_stage, 2);
    CHECK_EQ(pthread_join(w, NULL), 0);
    /* Now it is suspended: main may delete it; its callback runs here. */
    CHECK_EQ(test_stats(g_held).state, WEFT_FIBER_READY);
    SetLastError(0);
    DeleteFiber(g_held);
    CHECK_EQ(GetLastError(), 0);
    tid = 0;
    CHECK_EQ(calls_with(&v_b, &tid), 1);
    CHECK_EQ(tid, me);

    /* Another thread's converted fiber, suspended while that thread runs
     * another fiber: ERROR_INVALID_PARAMETER, and the thread goes on. */
    pthread_t t2;
    CHECK_EQ(pthread_create(&t2, NULL, t2_main, NULL), 0);
    while (atomic_load(&g_stage2) < 1)
        sched_yield();
    CHECK_EQ(test_stats(g_t2_fiber).state, WEFT_FIBER_READY);
    SetLastError(0);
    DeleteFiber(g_t2_fiber);
    CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
    /* And g_t2_other runs on t2: ERROR_BUSY. */
    SetLastError(0);
    DeleteFiber(g_t2_other);
    CHECK_EQ(GetLastError(), ERROR_BUSY);
    atomic_store(&g_stage2, 2);
    CHECK_EQ(pthread_join(t2, NULL), 0);

    /* DeleteFiber(GetCurrentFiber()) in a fiber ends the thread; that
     * fiber's callbacks run. As on Windows, the thread's converted fiber
     * lives on with its values (thread_outlived.c resumes such fibers), and
     * any thread may delete it, never having run it again. */
    pthread_t t3;
    CHECK_EQ(pthread_create(&t3, NULL, t3_main, NULL), 0);
    CHECK_EQ(pthread_join(t3, NULL), 0);
    CHECK_EQ(g_after_delete, 0);
    CHECK_EQ(calls_with(&v_d, NULL), 1);
    CHECK_EQ(calls_with(&v_e, NULL), 0);
    CHECK_EQ(test_stats(g_t3_fiber).state, WEFT_FIBER_READY);
    CHECK(GetCurrentFiber() == g_main);
    SetLastError(0);
    DeleteFiber(g_t3_fiber);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(calls_with(&v_e, NULL), 1);
    SetLastError(0);
    DeleteFiber(g_t3_fiber);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);

    /* ... and on the thread's own converted fiber too. */
    pthread_t t4;
    CHECK_EQ(pthread_create(&t4, NULL, t4_main, NULL), 0);
    CHECK_EQ(pthread_join(t4, NULL), 0);
    CHECK_EQ(g_after_delete, 0);
    CHECK_EQ(calls_with(&v_f, NULL), 1);

    /* Many create/run/delete cycles (a leak of stacks or mappings would
     * exhaust vm.max_map_count long before the end). */
    int runs = 0;
    for (int i = 0; i < 40000; i++) {
        LPVOID f = CreateFiber(i % 2 ? 0 : 32 * 1024, run_once, &runs);
        CHECK(f != NULL);
        SwitchToFiber(f);
        DeleteFiber(f);
    }
    CHECK_EQ(runs, 40000);
    for (int i = 0; i < 40000; i++) {
        LPVOID f = CreateFiber(0, never_runs, NULL);
        CHECK(f != NULL);
        DeleteFiber(f);
    }

    /* No callback ran twice or for a value it should not have. */
    CHECK_EQ(g_ncalls, 5); /* v_a, v_b, v_d, v_e, v_f */

    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK(FlsFree(g_idx1) && FlsFree(g_idx2) && FlsFree(g_idx3));
    TEST_PASS("delete");
    return 0;
}
