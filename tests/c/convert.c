/* Thread <-> fiber conversion: ConvertThreadToFiber(Ex), ConvertFiberToThread
 * (from the thread's own fiber and from one it created), IsThreadAFiber,
 * GetCurrentFiber, GetFiberData, and the per-thread last error. */
#include "check.h"

#include <pthread.h>

static LPVOID g_main_fiber;
static int g_inner_param;
static int g_inner_ran;
static DWORD g_idx;
static int v_main, v_inner;
static LPVOID g_inner_self, g_inner_again;

/* ConvertFiberToThread from a fiber the thread created works, as on Windows:
 * the thread goes on as a plain thread on that fiber's stack, with that
 * fiber's FLS values; the fiber's handle stops working; the thread's
 * converted fiber stays a fiber. */
static VOID WINAPI inner(LPVOID param) {
    CHECK(param == &g_inner_param);
    CHECK(GetFiberData() == &g_inner_param);
    CHECK(GetCurrentFiber() != NULL);
    CHECK(GetCurrentFiber() != g_main_fiber);
    CHECK_EQ(IsThreadAFiber(), TRUE);

    /* Still a fiber: converting again fails. */
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiber(NULL) == NULL, ERROR_ALREADY_FIBER);

    CHECK(FlsSetValue(g_idx, &v_inner));
    g_inner_self = GetCurrentFiber();
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);
    CHECK(GetFiberData() == NULL);
    CHECK(FlsGetValue(g_idx) == &v_inner);

    /* Its handle is stale now: every use fails, nothing is touched. */
    struct weft_fiber_stats st;
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(g_inner_self, &st) == FALSE, ERROR_INVALID_HANDLE);
    SetLastError(0);
    DeleteFiber(g_inner_self);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);

    /* Convert again, here, and go back to the thread's first fiber. */
    g_inner_again = ConvertThreadToFiber(&g_inner_param);
    CHECK(g_inner_again != NULL);
    CHECK(g_inner_again != g_inner_self);
    CHECK(GetFiberData() == &g_inner_param);
    CHECK(FlsGetValue(g_idx) == &v_inner);
    g_inner_ran++;
    for (;;)
        SwitchToFiber(g_main_fiber);
}

/* Goes back to g_main_fiber, forever. */
static VOID WINAPI bouncer(LPVOID param) {
    int *count = (int *)param;
    for (;;) {
        (*count)++;
        SwitchToFiber(g_main_fiber);
    }
}

static int g_thread_param;

static void *thread_main(void *arg) {
    (void)arg;
    /* Conversion is per thread: main is a fiber, this thread is not. */
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);

    /* Last error is per thread. */
    SetLastError(4242);
    CHECK_EQ(GetLastError(), 4242);

    LPVOID me = ConvertThreadToFiber(&g_thread_param);
    CHECK(me != NULL);
    CHECK(me != g_main_fiber);
    CHECK(GetCurrentFiber() == me);
    CHECK(GetFiberData() == &g_thread_param);
    CHECK_EQ(IsThreadAFiber(), TRUE);

    struct weft_fiber_stats s = test_stats(me);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(s.creator_tid, test_gettid());

    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);
    return NULL;
}

int main(void) {
    int data1 = 1, data2 = 2;

    /* A fresh thread is not a fiber. */
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);

    /* ConvertFiberToThread on a plain thread. */
    SetLastError(0);
    CHECK_ERR(ConvertFiberToThread() == FALSE, ERROR_ALREADY_THREAD);

    /* Bad flags are refused and leave the thread alone. */
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiberEx(&data1, 2) == NULL, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiberEx(&data1, 0xFFFFFFFFu) == NULL,
              ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiberEx(&data1, FIBER_FLAG_FLOAT_SWITCH | 4) == NULL,
              ERROR_INVALID_PARAMETER);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);

    /* Convert. */
    g_main_fiber = ConvertThreadToFiber(&data1);
    CHECK(g_main_fiber != NULL);
    CHECK_EQ(IsThreadAFiber(), TRUE);
    CHECK(GetCurrentFiber() == g_main_fiber);
    CHECK(GetFiberData() == &data1);

    struct weft_fiber_stats s = test_stats(g_main_fiber);
    CHECK(s.id != 0);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(s.creator_tid, test_gettid());
    unsigned long long main_id = s.id;

    /* Twice. */
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiber(&data2) == NULL, ERROR_ALREADY_FIBER);
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiberEx(&data2, 0) == NULL, ERROR_ALREADY_FIBER);
    SetLastError(0);
    CHECK_ERR(ConvertThreadToFiberEx(&data2, FIBER_FLAG_FLOAT_SWITCH) == NULL,
              ERROR_ALREADY_FIBER);
    CHECK(GetCurrentFiber() == g_main_fiber);
    CHECK(GetFiberData() == &data1);

    /* ConvertFiberToThread from a fiber the thread created (see inner). */
    g_idx = FlsAlloc(NULL);
    CHECK(g_idx != FLS_OUT_OF_INDEXES);
    CHECK(FlsSetValue(g_idx, &v_main));
    LPVOID f = CreateFiber(0, inner, &g_inner_param);
    CHECK(f != NULL);
    SwitchToFiber(f);
    CHECK_EQ(g_inner_ran, 1);
    CHECK(GetCurrentFiber() == g_main_fiber);
    CHECK(GetFiberData() == &data1);
    CHECK(FlsGetValue(g_idx) == &v_main);
    s = test_stats(g_main_fiber);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(s.id, main_id);
    s = test_stats(g_inner_again);
    CHECK_EQ(s.state, WEFT_FIBER_READY);
    /* The fiber inner converted to is this thread's now: it may delete it. */
    DeleteFiber(g_inner_again);
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(g_inner_again, &s) == FALSE, ERROR_INVALID_HANDLE);
    CHECK(GetCurrentFiber() == g_main_fiber);

    /* Another thread converts on its own. */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, thread_main, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(IsThreadAFiber(), TRUE);
    CHECK(GetCurrentFiber() == g_main_fiber);

    /* Back to a thread: the handle stops working, the FLS values stay. */
    int bounces = 0;
    LPVOID g = CreateFiber(0, bouncer, &bounces);
    CHECK(g != NULL);
    SwitchToFiber(g);
    CHECK_EQ(bounces, 1);
    LPVOID old_main = g_main_fiber;
    SetLastError(0);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(IsThreadAFiber(), FALSE);
    CHECK(GetCurrentFiber() == NULL);
    CHECK(FlsGetValue(g_idx) == &v_main);
    SetLastError(0);
    CHECK_ERR(ConvertFiberToThread() == FALSE, ERROR_ALREADY_THREAD);
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(old_main, &s) == FALSE, ERROR_INVALID_HANDLE);

    /* Switching needs a fiber; the fiber created earlier is still there. */
    SetLastError(0);
    SwitchToFiber(g);
    CHECK_EQ(GetLastError(), ERROR_ALREADY_THREAD);
    CHECK_EQ(bounces, 1);

    /* ConvertThreadToFiberEx with FIBER_FLAG_FLOAT_SWITCH, then with 0. */
    LPVOID m2 = ConvertThreadToFiberEx(&data2, FIBER_FLAG_FLOAT_SWITCH);
    CHECK(m2 != NULL);
    CHECK(m2 != old_main);
    CHECK(GetCurrentFiber() == m2);
    CHECK(GetFiberData() == &data2);
    CHECK(FlsGetValue(g_idx) == &v_main);
    g_main_fiber = m2;
    SwitchToFiber(g); /* the old fiber resumes, and switches to the new main */
    CHECK_EQ(bounces, 2);
    CHECK(GetCurrentFiber() == m2);
    CHECK_EQ(ConvertFiberToThread(), TRUE);

    LPVOID m3 = ConvertThreadToFiberEx(NULL, 0);
    CHECK(m3 != NULL);
    CHECK(GetFiberData() == NULL);
    CHECK_EQ(IsThreadAFiber(), TRUE);
    DeleteFiber(g);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    CHECK_EQ(FlsFree(g_idx), TRUE);

    /* Several round trips. */
    for (int i = 0; i < 100; i++) {
        LPVOID m = ConvertThreadToFiber(&data1);
        CHECK(m != NULL);
        CHECK(GetFiberData() == &data1);
        CHECK_EQ(ConvertFiberToThread(), TRUE);
    }

    /* Last error round trip. */
    SetLastError(ERROR_BUSY);
    CHECK_EQ(GetLastError(), ERROR_BUSY);
    SetLastError(ERROR_SUCCESS);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);

    /* weft_error_message: never NULL, says something. */
    DWORD codes[] = {ERROR_SUCCESS, ERROR_INVALID_FUNCTION, ERROR_INVALID_HANDLE,
                     ERROR_NOT_ENOUGH_MEMORY, ERROR_INVALID_PARAMETER, ERROR_BUSY,
                     ERROR_ALREADY_FIBER, ERROR_ALREADY_THREAD, 123456u};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *msg = weft_error_message(codes[i]);
        CHECK(msg != NULL);
        CHECK(strlen(msg) > 3);
    }
    CHECK(strcmp(weft_error_message(ERROR_BUSY),
                 weft_error_message(ERROR_INVALID_PARAMETER)) != 0);

    TEST_PASS("convert");
    return 0;
}
