/* CreateFiber / CreateFiberEx / SwitchToFiber on one thread: parameter
 * checks, creation before conversion, switch order, switching to oneself,
 * stack sizes and alignment, deep stack use, nested creation, and the
 * counters of weft_fiber_stats. */
#include "check.h"

#include <stdint.h>
#include <time.h>

static LPVOID g_main;

/* ---- a fiber created before the thread converted ---------------------- */

static int g_early_param;
static int g_early_runs;

static VOID WINAPI early(LPVOID param) {
    CHECK(param == &g_early_param);
    for (;;) {
        g_early_runs++;
        CHECK(GetFiberData() == &g_early_param);
        SwitchToFiber(g_main);
    }
}

/* ---- switch order: main -> a -> b -> a -> main ... -------------------- */

static char g_log[256];
static size_t g_log_len;
static LPVOID g_a, g_b;

static void log_char(char c) {
    CHECK(g_log_len + 1 < sizeof g_log);
    g_log[g_log_len++] = c;
    g_log[g_log_len] = 0;
}

static VOID WINAPI fiber_a(LPVOID param) {
    CHECK(param == (LPVOID)&g_a);
    for (;;) {
        log_char('a');
        SwitchToFiber(g_b);
        log_char('A');
        SwitchToFiber(g_main);
    }
}

static VOID WINAPI fiber_b(LPVOID param) {
    CHECK(param == (LPVOID)&g_b);
    for (;;) {
        log_char('b');
        SwitchToFiber(g_a);
    }
}

/* ---- self switch, stats while running, alignment ----------------------- */

static LPVOID g_self;

static VOID WINAPI self_switcher(LPVOID param) {
    (void)param;
    /* The System V ABI wants rsp+8 16-byte aligned at function entry, so
     * the frame address (rbp after push) is 16-byte aligned. */
    CHECK_EQ((uintptr_t)__builtin_frame_address(0) % 16, 0);
    {
        char buf[64];
        volatile double d = 3.25;
        snprintf(buf, sizeof buf, "%.2f %g", d, d * 2); /* SSE on the stack */
        CHECK(strcmp(buf, "3.25 6.5") == 0);
    }
    CHECK(GetCurrentFiber() == g_self);
    struct weft_fiber_stats s = test_stats(g_self);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    CHECK_EQ(s.last_tid, test_gettid());
    uint64_t before = s.activations;
    SetLastError(0);
    SwitchToFiber(GetCurrentFiber()); /* no-op, counted as an activation */
    CHECK_EQ(GetLastError(), 0);
    CHECK(GetCurrentFiber() == g_self);
    s = test_stats(g_self);
    CHECK_EQ(s.activations, before + 1);
    CHECK_EQ(s.state, WEFT_FIBER_RUNNING);
    for (;;)
        SwitchToFiber(g_main);
}

/* ---- deep stack use within the default 1 MiB --------------------------- */

static int g_deep_done;

static VOID WINAPI deep(LPVOID param) {
    size_t n = (size_t)param;
    volatile unsigned char *buf = __builtin_alloca(n);
    for (size_t i = 0; i < n; i += 512)
        buf[i] = (unsigned char)i;
    unsigned sum = 0;
    for (size_t i = 0; i < n; i += 512)
        sum += buf[i];
    CHECK(sum != 0xFFFFFFFFu);
    g_deep_done = 1;
    for (;;)
        SwitchToFiber(g_main);
}

/* ---- nested creation: a fiber creates and runs another ----------------- */

static int g_nested_depth;

static VOID WINAPI nested(LPVOID param) {
    LPVOID parent = param;
    int depth = ++g_nested_depth;
    if (depth < 50) {
        LPVOID child = CreateFiber(16 * 1024, nested, GetCurrentFiber());
        CHECK(child != NULL);
        SwitchToFiber(child);
        DeleteFiber(child);
    }
    CHECK_EQ(g_nested_depth, 50);
    (void)depth;
    for (;;)
        SwitchToFiber(parent);
}

/* ---- a busy fiber, for run_time_ns ------------------------------------- */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static VOID WINAPI busy(LPVOID param) {
    (void)param;
    for (;;) {
        uint64_t start = now_ns();
        while (now_ns() - start < 20u * 1000 * 1000) {
        }
        SwitchToFiber(g_main);
    }
}

/* ---- many fibers ------------------------------------------------------- */

#define MANY 256
static LPVOID g_many[MANY];
static int g_many_hits[MANY];

static VOID WINAPI many_fn(LPVOID param) {
    size_t i = (size_t)param;
    for (;;) {
        g_many_hits[i]++;
        SwitchToFiber(i + 1 < MANY ? g_many[i + 1] : g_main);
    }
}

static VOID WINAPI never_runs(LPVOID param) {
    (void)param;
    CHECK(!"never_runs ran");
}

int main(void) {
    /* Parameter checks, before converting. */
    SetLastError(0);
    CHECK_ERR(CreateFiber(0, NULL, NULL) == NULL, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(CreateFiberEx(0, 0, 0, NULL, NULL) == NULL, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(CreateFiberEx(0, 0, 2, never_runs, NULL) == NULL, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(CreateFiberEx(0, 0, 0xFFFFFFFFu, never_runs, NULL) == NULL,
              ERROR_INVALID_PARAMETER);

    /* CreateFiber before conversion is allowed; switching is not. */
    LPVOID early_f = CreateFiber(0, early, &g_early_param);
    CHECK(early_f != NULL);
    struct weft_fiber_stats s = test_stats(early_f);
    CHECK_EQ(s.state, WEFT_FIBER_READY);
    CHECK_EQ(s.activations, 0);
    CHECK_EQ(s.entry, (uintptr_t)early);
    CHECK_EQ(s.creator_tid, test_gettid());
    CHECK_EQ(s.stack_size, 1024 * 1024); /* 0 = the default, 1 MiB */
    SetLastError(0);
    SwitchToFiber(early_f);
    CHECK_EQ(GetLastError(), ERROR_ALREADY_THREAD);
    CHECK_EQ(g_early_runs, 0);
    CHECK_EQ(test_stats(early_f).activations, 0);

    /* weft_fiber_stats parameter checks. */
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(NULL, &s) == FALSE, ERROR_INVALID_PARAMETER);
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(early_f, NULL) == FALSE, ERROR_INVALID_PARAMETER);

    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);

    /* SwitchToFiber(NULL). */
    SetLastError(0);
    SwitchToFiber(NULL);
    CHECK_EQ(GetLastError(), ERROR_INVALID_PARAMETER);
    CHECK(GetCurrentFiber() == g_main);

    /* The early fiber runs now. */
    SwitchToFiber(early_f);
    CHECK_EQ(g_early_runs, 1);
    CHECK(GetCurrentFiber() == g_main);
    s = test_stats(early_f);
    CHECK_EQ(s.activations, 1);
    CHECK_EQ(s.failed_activations, 0);
    CHECK_EQ(s.state, WEFT_FIBER_READY);
    CHECK_EQ(s.last_tid, test_gettid());
    SwitchToFiber(early_f);
    CHECK_EQ(g_early_runs, 2);
    CHECK_EQ(test_stats(early_f).activations, 2);

    /* Switch order. */
    g_a = CreateFiber(0, fiber_a, &g_a);
    g_b = CreateFiberEx(0, 0, FIBER_FLAG_FLOAT_SWITCH, fiber_b, &g_b);
    CHECK(g_a != NULL && g_b != NULL && g_a != g_b);
    uint64_t main_act = test_stats(g_main).activations;
    for (int i = 0; i < 3; i++) {
        log_char('m');
        SwitchToFiber(g_a);
    }
    CHECK(strcmp(g_log, "mabAmabAmabA") == 0);
    CHECK_EQ(test_stats(g_a).activations, 6);
    CHECK_EQ(test_stats(g_b).activations, 3);
    CHECK_EQ(test_stats(g_main).activations, main_act + 3);

    /* Distinct ids. */
    uint64_t ids[4] = {test_stats(g_main).id, test_stats(early_f).id,
                       test_stats(g_a).id, test_stats(g_b).id};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            CHECK(ids[i] != ids[j]);

    /* Switching to oneself, from main and from a fiber. */
    uint64_t before = test_stats(g_main).activations;
    SetLastError(0);
    SwitchToFiber(g_main);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(test_stats(g_main).activations, before + 1);
    g_self = CreateFiber(0, self_switcher, NULL);
    CHECK(g_self != NULL);
    SwitchToFiber(g_self);
    CHECK_EQ(test_stats(g_self).activations, 2);

    /* Stack sizes: page-multiples are reported exactly, CreateFiberEx uses
     * max(commit, reserve). */
    LPVOID f64 = CreateFiber(64 * 1024, never_runs, NULL);
    CHECK(f64 != NULL);
    CHECK_EQ(test_stats(f64).stack_size, 64 * 1024);
    LPVOID fodd = CreateFiber(10000, never_runs, NULL);
    CHECK(fodd != NULL);
    CHECK(test_stats(fodd).stack_size >= 10000);
    LPVOID fex1 = CreateFiberEx(128 * 1024, 64 * 1024, 0, never_runs, NULL);
    CHECK(fex1 != NULL);
    CHECK_EQ(test_stats(fex1).stack_size, 128 * 1024);
    LPVOID fex2 = CreateFiberEx(64 * 1024, 256 * 1024, 0, never_runs, NULL);
    CHECK(fex2 != NULL);
    CHECK_EQ(test_stats(fex2).stack_size, 256 * 1024);
    LPVOID fex3 = CreateFiberEx(0, 0, 0, never_runs, NULL);
    CHECK(fex3 != NULL);
    CHECK_EQ(test_stats(fex3).stack_size, 1024 * 1024);
    DeleteFiber(f64);
    DeleteFiber(fodd);
    DeleteFiber(fex1);
    DeleteFiber(fex2);
    DeleteFiber(fex3);

    /* 768 KiB of the default 1 MiB stack, touched page by page. */
    LPVOID d = CreateFiber(0, deep, (LPVOID)(size_t)(768 * 1024));
    CHECK(d != NULL);
    SwitchToFiber(d);
    CHECK_EQ(g_deep_done, 1);
    DeleteFiber(d);
    /* And 3 MiB of a 4 MiB one. */
    g_deep_done = 0;
    d = CreateFiberEx(0, 4 * 1024 * 1024, 0, deep, (LPVOID)(size_t)(3 * 1024 * 1024));
    CHECK(d != NULL);
    SwitchToFiber(d);
    CHECK_EQ(g_deep_done, 1);
    DeleteFiber(d);

    /* Fibers creating fibers. */
    LPVOID n = CreateFiber(16 * 1024, nested, g_main);
    CHECK(n != NULL);
    SwitchToFiber(n);
    CHECK_EQ(g_nested_depth, 50);
    DeleteFiber(n);

    /* run_time_ns counts the time a fiber runs: wall time while it is current, so each
     * 20 ms spin adds at least that however busy the machine (15 ms: room for converting
     * clock ticks to time); and it runs only inside our switches to it (with 1% and 1 ms
     * for the conversion). */
    LPVOID bz = CreateFiber(0, busy, NULL);
    CHECK(bz != NULL);
    uint64_t t0 = now_ns();
    SwitchToFiber(bz);
    uint64_t wall = now_ns() - t0;
    s = test_stats(bz);
    CHECK(s.run_time_ns >= 15u * 1000 * 1000);
    CHECK(s.run_time_ns <= wall + wall / 100 + 1000000u);
    t0 = now_ns();
    SwitchToFiber(bz);
    wall += now_ns() - t0;
    CHECK(test_stats(bz).run_time_ns >= s.run_time_ns + 15u * 1000 * 1000);
    CHECK(test_stats(bz).run_time_ns <= wall + wall / 100 + 1000000u);
    DeleteFiber(bz);

    /* A chain of many fibers, several laps. */
    for (size_t i = 0; i < MANY; i++) {
        g_many[i] = CreateFiber(0, many_fn, (LPVOID)i);
        CHECK(g_many[i] != NULL);
    }
    for (int lap = 0; lap < 10; lap++)
        SwitchToFiber(g_many[0]);
    for (size_t i = 0; i < MANY; i++) {
        CHECK_EQ(g_many_hits[i], 10);
        CHECK_EQ(test_stats(g_many[i]).activations, 10);
        DeleteFiber(g_many[i]);
    }

    DeleteFiber(early_f);
    DeleteFiber(g_a);
    DeleteFiber(g_b);
    DeleteFiber(g_self);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    TEST_PASS("create_switch");
    return 0;
}
