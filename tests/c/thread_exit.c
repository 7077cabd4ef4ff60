/* Threads that end while they are fibers, as on Windows: the FLS callbacks
 * of the fiber running when the thread ends run once, at its end; a
 * converted fiber left behind keeps its values until DeleteFiber; nothing
 * leaks (the harness also runs this under valgrind).
 *
 *   A: convert, fiber sets a value, DeleteFiber, ConvertFiberToThread (the
 *      thread keeps its values), return
 *   B: convert, set values, return without ConvertFiberToThread (a created
 *      fiber holding a value is left for main to delete)
 *   C: convert, switch to a fiber whose start routine returns: the thread
 *      ends, pthread_join returns, the fiber is FINISHED; the thread's
 *      converted fiber lives on (thread_outlived.c resumes such fibers) and
 *      keeps its values until main deletes it
 *   D: a thread that never converts uses FLS and returns
 *   E: a fiber deletes itself: the thread ends
 *   F: a fiber calls pthread_exit
 *   G: many short-lived converted threads with a few fibers each */
#include "check.h"

#include <pthread.h>
#include <stdint.h>

#include "heap_value.h"

#define MAX_CALLS 256
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static PVOID g_calls[MAX_CALLS];
static int g_ncalls;

static VOID WINAPI fls_cb(PVOID value) {
    CHECK(value != NULL);
    pthread_mutex_lock(&g_lock);
    CHECK(g_ncalls < MAX_CALLS);
    g_calls[g_ncalls++] = value;
    pthread_mutex_unlock(&g_lock);
}

static int calls_with(PVOID value) {
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_ncalls; i++)
        n += g_calls[i] == value;
    pthread_mutex_unlock(&g_lock);
    return n;
}

static DWORD g_idx, g_idx_heap;
static int v_a_fiber, v_a_thread, v_b_thread, v_b_fiber, v_c_thread, v_c_fiber, v_d,
    v_e_thread, v_e_fiber, v_f_thread, v_f_fiber;

static LPVOID g_back; /* per-case: the thread fiber to return to */

/* Sets its value (param) and a heap value, then returns to g_back. */
static VOID WINAPI setter(LPVOID param) {
    CHECK(FlsSetValue(g_idx, param));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    for (;;)
        SwitchToFiber(g_back);
}

/* ---- A ---- */
static void *case_a(void *arg) {
    (void)arg;
    g_back = ConvertThreadToFiber(NULL);
    CHECK(g_back != NULL);
    CHECK(FlsSetValue(g_idx, &v_a_thread));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    LPVOID f = CreateFiber(0, setter, &v_a_fiber);
    CHECK(f != NULL);
    SwitchToFiber(f);
    DeleteFiber(f);
    CHECK_EQ(calls_with(&v_a_fiber), 1);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(calls_with(&v_a_thread), 0); /* the thread keeps its values */
    CHECK(FlsGetValue(g_idx) == &v_a_thread);
    return NULL; /* their callbacks run now */
}

/* ---- B ---- */
static LPVOID g_b_left;
static void *case_b(void *arg) {
    (void)arg;
    g_back = ConvertThreadToFiber(NULL);
    CHECK(g_back != NULL);
    CHECK(FlsSetValue(g_idx, &v_b_thread));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    g_b_left = CreateFiber(0, setter, &v_b_fiber);
    CHECK(g_b_left != NULL);
    SwitchToFiber(g_b_left);
    LPVOID unused = CreateFiber(0, setter, NULL); /* never runs */
    CHECK(unused != NULL);
    DeleteFiber(unused);
    return NULL; /* no ConvertFiberToThread */
}

/* ---- C ---- */
static LPVOID g_c_fiber, g_c_main;
static int g_c_tid;
static int g_c_after;
static VOID WINAPI returns(LPVOID param) {
    CHECK(FlsSetValue(g_idx, param));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    /* returning ends the thread */
}
static void *case_c(void *arg) {
    (void)arg;
    g_c_tid = test_gettid();
    g_c_main = ConvertThreadToFiber(NULL);
    CHECK(g_c_main != NULL);
    CHECK(FlsSetValue(g_idx, &v_c_thread));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    g_c_fiber = CreateFiber(0, returns, &v_c_fiber);
    CHECK(g_c_fiber != NULL);
    SwitchToFiber(g_c_fiber);
    g_c_after = 1;
    CHECK(!"the thread went on after its fiber's start routine returned");
    return NULL;
}

/* ---- D ---- */
static void *case_d(void *arg) {
    (void)arg;
    CHECK(FlsSetValue(g_idx, &v_d));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    CHECK_EQ(IsThreadAFiber(), FALSE);
    return NULL;
}

/* ---- E ---- */
static int g_e_after;
static LPVOID g_e_main;
static VOID WINAPI deletes_itself(LPVOID param) {
    CHECK(FlsSetValue(g_idx, param));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    DeleteFiber(GetCurrentFiber());
    g_e_after = 1;
}
static void *case_e(void *arg) {
    (void)arg;
    g_e_main = ConvertThreadToFiber(NULL);
    CHECK(g_e_main != NULL);
    CHECK(FlsSetValue(g_idx, &v_e_thread));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    LPVOID f = CreateFiber(0, deletes_itself, &v_e_fiber);
    CHECK(f != NULL);
    SwitchToFiber(f);
    g_e_after = 2;
    return NULL;
}

/* ---- F ---- */
static LPVOID g_f_fiber, g_f_main;
static int g_f_after;
static VOID WINAPI calls_pthread_exit(LPVOID param) {
    CHECK(FlsSetValue(g_idx, param));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    pthread_exit(NULL);
}
static void *case_f(void *arg) {
    (void)arg;
    g_f_main = ConvertThreadToFiber(NULL);
    CHECK(g_f_main != NULL);
    CHECK(FlsSetValue(g_idx, &v_f_thread));
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    g_f_fiber = CreateFiber(0, calls_pthread_exit, &v_f_fiber);
    CHECK(g_f_fiber != NULL);
    SwitchToFiber(g_f_fiber);
    g_f_after = 1;
    return NULL;
}

/* ---- G ---- */
static __thread LPVOID t_back;
static LPVOID __attribute__((noinline)) my_back(void) { return t_back; }
static VOID WINAPI g_fiber2(LPVOID param) {
    (void)param;
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    for (;;)
        SwitchToFiber(my_back());
}
static void *case_g(void *arg) {
    int i = (int)(intptr_t)arg;
    t_back = ConvertThreadToFiber(NULL);
    CHECK(t_back != NULL);
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    LPVOID f[3];
    for (int k = 0; k < 3; k++) {
        f[k] = CreateFiber(k == 0 ? 0 : 32 * 1024, g_fiber2, NULL);
        CHECK(f[k] != NULL);
        SwitchToFiber(f[k]);
    }
    for (int k = 0; k < 3; k++)
        DeleteFiber(f[k]);
    if (i % 2)
        CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg) {
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, fn, arg), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

int main(void) {
    g_idx = FlsAlloc(fls_cb);
    g_idx_heap = FlsAlloc(free_cb);
    CHECK(g_idx != FLS_OUT_OF_INDEXES && g_idx_heap != FLS_OUT_OF_INDEXES);
    int expect_freed = 0;

    run_thread(case_a, NULL);
    expect_freed += 2;
    CHECK_EQ(g_freed, expect_freed);

    run_thread(case_b, NULL);
    expect_freed += 1; /* the thread fiber's; the left fiber's is still held */
    CHECK_EQ(calls_with(&v_b_thread), 1);
    CHECK_EQ(calls_with(&v_b_fiber), 0);
    CHECK_EQ(g_freed, expect_freed);
    CHECK_EQ(test_stats(g_b_left).state, WEFT_FIBER_READY);
    DeleteFiber(g_b_left); /* on main, a plain thread */
    expect_freed += 1;
    CHECK_EQ(calls_with(&v_b_fiber), 1);
    CHECK_EQ(g_freed, expect_freed);

    run_thread(case_c, NULL);
    expect_freed += 1; /* the returning fiber's values */
    CHECK_EQ(g_c_after, 0);
    CHECK_EQ(calls_with(&v_c_thread), 0);
    CHECK_EQ(calls_with(&v_c_fiber), 1);
    CHECK_EQ(g_freed, expect_freed);
    struct weft_fiber_stats s = test_stats(g_c_fiber);
    CHECK_EQ(s.state, WEFT_FIBER_FINISHED);
    CHECK_EQ(s.last_tid, g_c_tid);
    CHECK_EQ(s.activations, 1);
    CHECK_EQ(test_stats(g_c_main).state, WEFT_FIBER_READY);
    /* The fiber whose routine returned cannot run again. */
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    SetLastError(0);
    SwitchToFiber(g_c_fiber);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    DeleteFiber(g_c_fiber); /* frees it; its callbacks already ran */
    CHECK_EQ(calls_with(&v_c_fiber), 1);
    CHECK_EQ(g_freed, expect_freed);
    DeleteFiber(g_c_main); /* its values get their callbacks now */
    expect_freed += 1;
    CHECK_EQ(calls_with(&v_c_thread), 1);
    CHECK_EQ(g_freed, expect_freed);

    run_thread(case_d, NULL);
    expect_freed += 1;
    CHECK_EQ(calls_with(&v_d), 1);
    CHECK_EQ(g_freed, expect_freed);

    run_thread(case_e, NULL);
    expect_freed += 1;
    CHECK_EQ(g_e_after, 0);
    CHECK_EQ(calls_with(&v_e_thread), 0);
    CHECK_EQ(calls_with(&v_e_fiber), 1);
    CHECK_EQ(g_freed, expect_freed);
    DeleteFiber(g_e_main);
    expect_freed += 1;
    CHECK_EQ(calls_with(&v_e_thread), 1);
    CHECK_EQ(g_freed, expect_freed);

    run_thread(case_f, NULL);
    expect_freed += 1;
    CHECK_EQ(g_f_after, 0);
    CHECK_EQ(calls_with(&v_f_thread), 0);
    CHECK_EQ(calls_with(&v_f_fiber), 1);
    CHECK_EQ(g_freed, expect_freed);
    CHECK_EQ(test_stats(g_f_fiber).state, WEFT_FIBER_FINISHED);
    DeleteFiber(g_f_fiber);
    CHECK_EQ(g_freed, expect_freed);
    DeleteFiber(g_f_main);
    expect_freed += 1;
    CHECK_EQ(calls_with(&v_f_thread), 1);
    CHECK_EQ(g_freed, expect_freed);

    for (int i = 0; i < 20; i++) {
        run_thread(case_g, (void *)(intptr_t)i);
        expect_freed += 4;
        CHECK_EQ(g_freed, expect_freed);
    }

    /* Several at once. */
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, case_g, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    expect_freed += 16;
    CHECK_EQ(g_freed, expect_freed);

    /* The main thread itself: its implicit FLS, then a converted fiber. */
    CHECK(FlsSetValue(g_idx_heap, heap_value()));
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    CHECK_EQ(g_freed, expect_freed); /* converting keeps the values */
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(g_freed, expect_freed); /* and so does converting back */

    CHECK_EQ(FlsFree(g_idx), TRUE);
    CHECK_EQ(FlsFree(g_idx_heap), TRUE);
    expect_freed += 1;
    CHECK_EQ(g_freed, expect_freed);
    TEST_PASS("thread_exit");
    return 0;
}
