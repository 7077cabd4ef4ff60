/* What Windows does with fibers and fiber-local storage, checked on weft: the
 * behaviour that Windows's own conformance tests rely on, apart from what
 * depends on Windows internals (TEB and PEB fields, Rtl* functions,
 * activation contexts).
 *
 *   1. fiber handling: creating before converting, converting twice, the Ex
 *      forms, a start routine's parameter, IsThreadAFiber
 *   2. FLS indexes: exhaustion with a value in every index, the lowest free
 *      index handed out again, indexes never allocated or freed (usable), index
 *      0 and indexes past the limit (refused), the last error
 *   3. FLS callbacks on FlsFree, for non-NULL values only
 *   4. FLS with several fibers: a new fiber has no FLS until it stores a
 *      value; callbacks on DeleteFiber and FlsFree for every holder
 *   5. a thread's converted fiber runs on another thread and comes back
 *   6. a thread that ends in a fiber it created, after ConvertFiberToThread:
 *      the fibers it created stay alive and another thread switches to them;
 *      so does the thread's converted fiber, which goes on where it stopped
 * (Process exit with a thread stuck in an FLS callback: process_exit.c.) */
#include "check.h"

#include <pthread.h>
#include <stdint.h>

static LPVOID g_fibers[3];
static unsigned char g_param = 185;
static DWORD g_fls_index = FLS_OUT_OF_INDEXES;
static PVOID g_value; /* what the fiber stores, and what the callback expects */
static int g_runs, g_callbacks;

static VOID WINAPI expect_value_callback(PVOID value) {
    CHECK(value == g_value);
    g_callbacks++;
}

/* Counts its run, checks its parameter; with an FLS index set, checks that it
 * has no FLS yet, then stores g_value. Goes back to g_fibers[0]. */
static VOID WINAPI counting_fiber(LPVOID param) {
    CHECK(param == &g_param);
    CHECK_EQ(*(unsigned char *)param, 185);
    g_runs++;
    if (g_fls_index != FLS_OUT_OF_INDEXES) {
        SetLastError(0xdeadbeef);
        CHECK(FlsGetValue(g_fls_index) == NULL);
        CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
        CHECK_EQ(FlsSetValue(g_fls_index, g_value), TRUE);
        SetLastError(0xdeadbeef);
        CHECK(FlsGetValue(g_fls_index) == g_value);
        CHECK_EQ(GetLastError(), ERROR_SUCCESS);
        /* It has FLS now: another index reads NULL, without an error. */
        SetLastError(0xdeadbeef);
        CHECK(FlsGetValue(127) == NULL);
        CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    }
    SwitchToFiber(g_fibers[0]);
    CHECK(!"a counting fiber was resumed");
}

static void convert_checked(void) {
    g_fibers[0] = ConvertThreadToFiber(&g_param);
    CHECK(g_fibers[0] != NULL);
    SetLastError(0xdeadbeef);
    CHECK_ERR(ConvertThreadToFiber(&g_param) == NULL, ERROR_ALREADY_FIBER);
}

/* ---- 1 ---------------------------------------------------------------------- */

static void fiber_handling(void) {
    g_runs = 0;
    LPVOID early = CreateFiber(0, counting_fiber, &g_param);
    CHECK(early != NULL);
    DeleteFiber(early);

    convert_checked();
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    g_fibers[0] = ConvertThreadToFiberEx(&g_param, 0);
    CHECK(g_fibers[0] != NULL);
    SetLastError(0xdeadbeef);
    CHECK_ERR(ConvertThreadToFiberEx(&g_param, 0) == NULL, ERROR_ALREADY_FIBER);

    g_fibers[1] = CreateFiber(0, counting_fiber, &g_param);
    CHECK(g_fibers[1] != NULL);
    SwitchToFiber(g_fibers[1]);
    CHECK_EQ(g_runs, 1);
    DeleteFiber(g_fibers[1]);

    g_fibers[1] = CreateFiberEx(0, 0, 0, counting_fiber, &g_param);
    CHECK(g_fibers[1] != NULL);
    SwitchToFiber(g_fibers[1]);
    CHECK_EQ(g_runs, 2);
    DeleteFiber(g_fibers[1]);

    CHECK_EQ(IsThreadAFiber(), TRUE);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(IsThreadAFiber(), FALSE);
}

/* ---- 2 ---------------------------------------------------------------------- */

static unsigned g_freed_values;
static VOID WINAPI count_callback(PVOID value) {
    (void)value;
    g_freed_values++;
}

static void fls_indexes(void) {
    /* Exhaustion: every index gets a value, all read back, then the limit's
     * error; between 4000 and 4096 indexes, as Windows 10 has. */
    static DWORD idx[4096];
    unsigned n = 0;
    for (;;) {
        SetLastError(0xdeadbeef);
        DWORD i = FlsAlloc(count_callback);
        if (i == FLS_OUT_OF_INDEXES) {
            CHECK_EQ(GetLastError(), ERROR_NOT_ENOUGH_MEMORY);
            break;
        }
        CHECK(n < 4096);
        CHECK(i != 0);
        idx[n] = i;
        CHECK_EQ(FlsSetValue(i, (PVOID)(uintptr_t)(n + 1)), TRUE);
        n++;
    }
    CHECK(n > 4000 && n < 4096);
    for (unsigned k = 0; k < n; k++)
        CHECK(FlsGetValue(idx[k]) == (PVOID)(uintptr_t)(k + 1));

    /* Freeing one runs its callback once; the next FlsAlloc hands it out
     * again (the lowest free index). */
    g_freed_values = 0;
    CHECK_EQ(FlsFree(idx[16]), TRUE);
    CHECK_EQ(g_freed_values, 1);
    CHECK_EQ(FlsAlloc(count_callback), idx[16]);
    CHECK_EQ(FlsSetValue(idx[16], (PVOID)(uintptr_t)17), TRUE);
    g_freed_values = 0;
    for (unsigned k = 0; k < n; k++) {
        CHECK(FlsGetValue(idx[k]) == (PVOID)(uintptr_t)(k + 1));
        CHECK_EQ(FlsFree(idx[k]), TRUE);
    }
    CHECK_EQ(g_freed_values, n);

    /* An index that is not allocated: FlsFree refuses it, get and set work. */
    SetLastError(0xdeadbeef);
    CHECK_ERR(FlsFree(127) == FALSE, ERROR_INVALID_PARAMETER);
    CHECK(FlsGetValue(127) == NULL);
    CHECK_EQ(FlsSetValue(127, (PVOID)0x217), TRUE);
    SetLastError(0xdeadbeef);
    CHECK(FlsGetValue(127) == (PVOID)0x217);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK_EQ(FlsSetValue(127, NULL), TRUE);

    /* Past the limit, and index 0: refused by all three. */
    DWORD refused[] = {0, FLS_MAXIMUM_AVAILABLE};
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        SetLastError(0xdeadbeef);
        CHECK_ERR(FlsFree(refused[k]) == FALSE, ERROR_INVALID_PARAMETER);
        SetLastError(0xdeadbeef);
        CHECK_ERR(FlsSetValue(refused[k], (PVOID)0xdeadbeef) == FALSE,
                  ERROR_INVALID_PARAMETER);
        SetLastError(0xdeadbeef);
        CHECK_ERR(FlsGetValue(refused[k]) == NULL, ERROR_INVALID_PARAMETER);
    }

    /* One index through its life. */
    DWORD fls = FlsAlloc(NULL);
    CHECK(fls != FLS_OUT_OF_INDEXES && fls != 0);
    CHECK(FlsGetValue(fls) == NULL);
    SetLastError(0xdeadbeef);
    CHECK_EQ(FlsSetValue(fls, (PVOID)0xdeadbeef), TRUE);
    CHECK_EQ(GetLastError(), 0xdeadbeef); /* success leaves the last error */
    SetLastError(0xdeadbeef);
    CHECK(FlsGetValue(fls) == (PVOID)0xdeadbeef);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK_EQ(FlsFree(fls), TRUE);
    SetLastError(0xdeadbeef);
    CHECK(FlsGetValue(fls) == NULL); /* freed: NULL, and no error */
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK_EQ(FlsSetValue(fls, (PVOID)0xdeadbabe), TRUE); /* and settable */
    CHECK(FlsGetValue(fls) == (PVOID)0xdeadbabe);
    DWORD again = FlsAlloc(NULL);
    CHECK_EQ(again, fls);
    SetLastError(0xdeadbeef);
    PVOID v = FlsGetValue(again);
    CHECK(v == NULL || v == (PVOID)0xdeadbabe); /* Windows allows either */
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK_EQ(FlsSetValue(again, NULL), TRUE);
    CHECK_EQ(FlsFree(again), TRUE);
}

/* ---- 3 ---------------------------------------------------------------------- */

static void fls_callbacks(void) {
    g_callbacks = 0;
    DWORD fls = FlsAlloc(expect_value_callback);
    CHECK(fls != FLS_OUT_OF_INDEXES);
    g_value = (PVOID)0x1587;
    CHECK_EQ(FlsSetValue(fls, g_value), TRUE);
    CHECK(FlsGetValue(fls) == g_value);
    CHECK_EQ(FlsFree(fls), TRUE);
    CHECK_EQ(g_callbacks, 1);

    g_callbacks = 0;
    fls = FlsAlloc(expect_value_callback);
    CHECK(fls != FLS_OUT_OF_INDEXES);
    CHECK_EQ(FlsSetValue(fls, NULL), TRUE);
    CHECK_EQ(FlsFree(fls), TRUE);
    CHECK_EQ(g_callbacks, 0); /* no callback for NULL */
}

/* ---- 4 ---------------------------------------------------------------------- */

static void fls_with_fibers(void) {
    PVOID val1 = (PVOID)0x314, val2 = (PVOID)0x152;
    g_fls_index = FlsAlloc(expect_value_callback);
    CHECK(g_fls_index != FLS_OUT_OF_INDEXES);
    convert_checked();

    g_runs = g_callbacks = 0;
    g_fibers[1] = CreateFiber(0, counting_fiber, &g_param);
    g_fibers[2] = CreateFiber(0, counting_fiber, &g_param);
    CHECK(g_fibers[1] != NULL && g_fibers[2] != NULL);
    CHECK_EQ(g_runs, 0);
    CHECK_EQ(g_callbacks, 0);

    g_value = val1;
    SwitchToFiber(g_fibers[1]);
    CHECK_EQ(g_runs, 1);
    CHECK_EQ(g_callbacks, 0);
    g_value = val2;
    SwitchToFiber(g_fibers[2]);
    CHECK_EQ(g_runs, 2);
    CHECK_EQ(g_callbacks, 0);

    CHECK_EQ(FlsSetValue(g_fls_index, val2), TRUE);
    CHECK(FlsGetValue(g_fls_index) == val2);

    g_value = val1;
    DeleteFiber(g_fibers[1]);
    CHECK_EQ(g_callbacks, 1);
    g_callbacks = 0;
    g_value = val2;
    CHECK_EQ(FlsFree(g_fls_index), TRUE); /* g_fibers[2]'s and this fiber's */
    CHECK_EQ(g_callbacks, 2);
    g_callbacks = 0;
    DeleteFiber(g_fibers[2]); /* FlsFree took its value */
    CHECK_EQ(g_callbacks, 0);
    CHECK_EQ(g_runs, 2);
    g_fls_index = FLS_OUT_OF_INDEXES;
    CHECK_EQ(ConvertFiberToThread(), TRUE);
}

/* ---- 5 ---------------------------------------------------------------------- */

static int g_step;

static void *visitor(void *arg) {
    (void)arg;
    LPVOID mine = ConvertThreadToFiber(NULL);
    CHECK(mine != NULL);
    g_fibers[2] = mine;
    /* Runs the main thread's own fiber here, on this thread; it comes back
     * by switching to g_fibers[2]. */
    SwitchToFiber(g_fibers[0]);
    CHECK(GetCurrentFiber() == mine);
    CHECK_EQ(g_step, 2);
    g_fibers[2] = NULL;
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

static VOID WINAPI host(LPVOID param) {
    (void)param;
    g_step = 1;
    SwitchToFiber(g_fibers[0]);
    /* Second run: let another thread borrow the main thread's fiber. */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, visitor, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(g_step, 2);
    g_step = 3;
    SwitchToFiber(g_fibers[0]);
    CHECK(!"host was resumed");
}

static void converted_fiber_visits_another_thread(void) {
    convert_checked();
    int me = test_gettid();
    g_fibers[1] = CreateFiber(0, host, NULL);
    CHECK(g_fibers[1] != NULL);
    SwitchToFiber(g_fibers[1]);
    CHECK_EQ(g_step, 1);
    CHECK_EQ(test_gettid(), me);
    SwitchToFiber(g_fibers[1]);
    /* Here on the visitor's thread. */
    CHECK(test_gettid() != me);
    CHECK(GetCurrentFiber() == g_fibers[0]);
    /* Converting back here would leave the visitor on this thread's stack
     * (undefined on Windows): weft refuses, and nothing changes. */
    SetLastError(0);
    CHECK_ERR(ConvertFiberToThread() == FALSE, ERROR_INVALID_PARAMETER);
    CHECK(GetCurrentFiber() == g_fibers[0]);
    /* So would deleting it, which ends the thread that runs it. */
    SetLastError(0);
    DeleteFiber(GetCurrentFiber());
    CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
    CHECK(GetCurrentFiber() == g_fibers[0]);
    g_step = 2;
    SwitchToFiber(g_fibers[2]);
    /* Back on this thread, from host, once the visitor has ended. */
    CHECK_EQ(test_gettid(), me);
    CHECK_EQ(g_step, 3);
    CHECK(g_fibers[2] == NULL);
    DeleteFiber(g_fibers[1]);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
}

/* ---- 6 ---------------------------------------------------------------------- */

static DWORD g_idx6;
static int v_thread_fiber, v_kept;
static LPVOID g_exiter, g_kept, g_ended_fiber, g_return_to;
static int g_kept_runs, g_ended_resumed;
static int g_callbacks6[3]; /* v_thread_fiber, v_kept, other */

static VOID WINAPI callback6(PVOID value) {
    g_callbacks6[value == &v_thread_fiber ? 0 : value == &v_kept ? 1 : 2]++;
}

/* Made by the thread that ends; stays alive, and runs on whichever thread
 * switches to it, going back to g_return_to. */
static VOID WINAPI kept(LPVOID param) {
    (void)param;
    CHECK(FlsSetValue(g_idx6, &v_kept));
    for (;;) {
        g_kept_runs++;
        CHECK(FlsGetValue(g_idx6) == &v_kept);
        SwitchToFiber(g_return_to);
    }
}

static VOID WINAPI exiter(LPVOID param) {
    (void)param;
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    pthread_exit((void *)16);
}

static void *ends_in_its_fiber(void *arg) {
    (void)arg;
    g_ended_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_ended_fiber != NULL);
    CHECK(FlsSetValue(g_idx6, &v_thread_fiber));
    g_return_to = g_ended_fiber;
    g_kept = CreateFiber(0, kept, NULL);
    CHECK(g_kept != NULL);
    SwitchToFiber(g_kept);
    CHECK_EQ(g_kept_runs, 1);
    g_exiter = CreateFiber(0, exiter, NULL);
    CHECK(g_exiter != NULL);
    SwitchToFiber(g_exiter); /* the thread ends in there */
    /* Resumed by another thread, after this one ended. */
    for (;;) {
        g_ended_resumed++;
        CHECK(FlsGetValue(g_idx6) == &v_thread_fiber);
        CHECK(GetCurrentFiber() == g_ended_fiber);
        SwitchToFiber(g_return_to);
    }
    return NULL;
}

static void thread_ends_in_a_fiber_it_created(void) {
    g_idx6 = FlsAlloc(callback6);
    CHECK(g_idx6 != FLS_OUT_OF_INDEXES);
    pthread_t t;
    void *result = NULL;
    CHECK_EQ(pthread_create(&t, NULL, ends_in_its_fiber, NULL), 0);
    CHECK_EQ(pthread_join(t, &result), 0);
    CHECK(result == (void *)16);
    CHECK_EQ(g_callbacks6[0], 0); /* the thread's fiber keeps its value */
    CHECK_EQ(g_callbacks6[1], 0);
    CHECK_EQ(g_callbacks6[2], 0);

    /* The fiber the thread made is alive: this thread runs it, with its
     * values. */
    LPVOID me = ConvertThreadToFiber(NULL);
    CHECK(me != NULL);
    g_return_to = me;
    SwitchToFiber(g_kept);
    CHECK_EQ(g_kept_runs, 2);
    CHECK(GetCurrentFiber() == me);

    /* The fiber that converted back is no fiber any more. */
    SetLastError(0);
    SwitchToFiber(g_exiter);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);

    /* The ended thread's own fiber lives on: this thread resumes it where
     * it stopped, with its values. DeleteFiber runs its FLS callbacks. */
    CHECK_EQ(test_stats(g_ended_fiber).state, WEFT_FIBER_READY);
    SetLastError(0);
    SwitchToFiber(g_ended_fiber);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(g_ended_resumed, 1);
    CHECK(GetCurrentFiber() == me);
    CHECK_EQ(g_callbacks6[0], 0);
    SetLastError(0);
    DeleteFiber(g_ended_fiber);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(g_callbacks6[0], 1);
    DeleteFiber(g_kept);
    CHECK_EQ(g_callbacks6[1], 1);
    CHECK_EQ(g_callbacks6[2], 0);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(FlsFree(g_idx6), TRUE);
}

int main(void) {
    fiber_handling();
    fls_indexes();
    fls_callbacks();
    fls_with_fibers();
    converted_fiber_visits_another_thread();
    thread_ends_in_a_fiber_it_created();
    TEST_PASS("windows_behaviour");
    return 0;
}
