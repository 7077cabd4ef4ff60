/* A thread that ends while it runs a fiber it created leaves its converted
 * fiber behind, as on Windows: another thread can switch to it later, and it
 * goes on from where it stopped, with its frames, its locals and its FLS
 * values; DeleteFiber then frees it.
 *
 *   exit:    thread A converts, sets FLS values, creates fiber F and switches
 *            to it; F calls pthread_exit. The main thread joins A, switches
 *            to A's converted fiber: it resumes after its SwitchToFiber, on
 *            the main thread, with its locals (and a pointer to one) and its
 *            FLS values intact, and switches back. It can be resumed again;
 *            then DeleteFiber runs its FLS callbacks.
 *   return:  the same, but F's start routine returns (which ends the thread,
 *            as on Windows); A's converted fiber uses a lot of its stack when
 *            it resumes.
 *   detached: the first again with A detached: the main thread resumes A's
 *            converted fiber as soon as A's end has finished F.
 *   elsewhere: A's converted fiber is resumed by a third thread B and A's
 *            start routine returns there: as on Windows, that ends B (its
 *            join returns the routine's value); the fiber is finished, its
 *            FLS callbacks ran on B, and DeleteFiber frees it.
 *   size:    a thread made with a 256 KiB stack size gets enough stack for
 *            three 64 KiB frames in its start routine.
 *   own stack: a thread made on a stack of the caller's own
 *            (pthread_attr_setstack) is run by glibc as it is: its converted
 *            fiber's frames are on that stack, so after the thread ends in
 *            another fiber it cannot run again (ERROR_INVALID_HANDLE), while
 *            DeleteFiber still runs its callbacks.
 * The harness also runs this under valgrind and AddressSanitizer. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>

#include "fls_log.h"
#include "heap_value.h"

static DWORD g_idx, g_idx_heap;
static char g_log[64];
static int g_nlog;

static void log_step(char c) {
    pthread_mutex_lock(&g_lock);
    CHECK(g_nlog < (int)sizeof g_log - 1);
    g_log[g_nlog++] = c;
    pthread_mutex_unlock(&g_lock);
}

static void reset_log(void) {
    memset(g_log, 0, sizeof g_log);
    g_nlog = 0;
}

/* ---- the thread that ends in its fiber ----------------------------------- */

enum how { BY_EXIT, BY_RETURN };

struct ender {
    enum how how;
    LPVOID thread_fiber; /* its converted fiber */
    LPVOID fiber;        /* F */
    LPVOID back;         /* where the converted fiber goes when resumed */
    int fiber_data;      /* GetFiberData of the converted fiber */
    int v_thread, v_fiber;
    int resumes;
    int ran_on;          /* gettid of the thread that resumed it last */
    int big_stack;       /* use a lot of stack once resumed */
};

static VOID WINAPI ends_thread(LPVOID param) {
    struct ender *e = (struct ender *)param;
    log_step('2');
    CHECK(FlsSetValue(g_idx, &e->v_fiber));
    CHECK(FlsGetValue(g_idx) == &e->v_fiber);
    if (e->how == BY_EXIT)
        pthread_exit((void *)7);
    /* returning ends the thread, as on Windows */
}

/* Touches n bytes of stack, a page at a time, and checks them. */
static int __attribute__((noinline)) use_stack(size_t n) {
    volatile char buf[64 * 1024];
    if (n == 0)
        return 0;
    size_t here = n < sizeof buf ? n : sizeof buf;
    for (size_t i = 0; i < here; i += 4096)
        buf[i] = (char)i;
    int r = use_stack(n - here);
    for (size_t i = 0; i < here; i += 4096)
        CHECK(buf[i] == (char)i);
    return r + 1;
}

static void *ender_main(void *arg) {
    struct ender *e = (struct ender *)arg;
    volatile int local = 42;
    volatile int *p = &local;
    int me = test_gettid();
    e->thread_fiber = ConvertThreadToFiber(&e->fiber_data);
    CHECK(e->thread_fiber != NULL);
    /* A thread's FLS exists from the start: empty, not missing. */
    SetLastError(ERROR_BUSY);
    CHECK(FlsGetValue(g_idx) == NULL);
    CHECK_EQ(GetLastError(), ERROR_SUCCESS);
    CHECK(FlsSetValue(g_idx, &e->v_thread));
    void *heap = heap_value();
    CHECK(FlsSetValue(g_idx_heap, heap));
    e->fiber = CreateFiber(0, ends_thread, e);
    CHECK(e->fiber != NULL);
    log_step('1');
    SwitchToFiber(e->fiber);
    /* Resumed by another thread, after this one ended. */
    for (;;) {
        e->resumes++;
        e->ran_on = test_gettid();
        CHECK(e->ran_on != me);
        log_step('4');
        CHECK_EQ(local, 42);
        CHECK_EQ(*p, 42);
        local++;
        CHECK_EQ(*p, 43);
        local--;
        CHECK(GetCurrentFiber() == e->thread_fiber);
        CHECK(GetFiberData() == &e->fiber_data);
        CHECK(FlsGetValue(g_idx) == &e->v_thread);
        CHECK(FlsGetValue(g_idx_heap) == heap);
        if (e->big_stack)
            CHECK_EQ(use_stack(512 * 1024), 8);
        if (e->back == NULL)
            return (void *)(intptr_t)e->resumes; /* ends the thread running it */
        SwitchToFiber(e->back);
    }
}

/* Apart: FLS callbacks are told by address. */
static struct ender g_enders[3];

static void ends_in_its_fiber(enum how how, int detached) {
    reset_log();
    struct ender *e = &g_enders[detached ? 2 : how];
    e->how = how;
    e->big_stack = how == BY_RETURN;
    int freed = g_freed;
    pthread_t t;
    void *result = NULL;
    if (detached) {
        pthread_attr_t attr;
        CHECK_EQ(pthread_attr_init(&attr), 0);
        CHECK_EQ(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED), 0);
        CHECK_EQ(pthread_create(&t, &attr, ender_main, e), 0);
        CHECK_EQ(pthread_attr_destroy(&attr), 0);
        /* F finishes as the thread ends; the converted fiber may be resumed
         * from then on, whether or not the thread has quite gone. */
        while (calls_with(&e->v_fiber, NULL) == 0 ||
               test_stats(e->fiber).state != WEFT_FIBER_FINISHED)
            sched_yield();
    } else {
        CHECK_EQ(pthread_create(&t, NULL, ender_main, e), 0);
        CHECK_EQ(pthread_join(t, &result), 0);
        if (how == BY_EXIT)
            CHECK(result == (void *)7);
    }
    CHECK(strcmp(g_log, "12") == 0);
    /* F's values got their callbacks when the thread ended in it; the
     * converted fiber's did not: it lives on. */
    CHECK_EQ(calls_with(&e->v_fiber, NULL), 1);
    CHECK_EQ(calls_with(&e->v_thread, NULL), 0);
    CHECK_EQ(g_freed, freed);
    CHECK_EQ(test_stats(e->fiber).state, WEFT_FIBER_FINISHED);
    CHECK_EQ(test_stats(e->thread_fiber).state, WEFT_FIBER_READY);

    LPVOID me = ConvertThreadToFiber(NULL);
    CHECK(me != NULL);
    e->back = me;
    log_step('3');
    SetLastError(0);
    SwitchToFiber(e->thread_fiber);
    CHECK_EQ(GetLastError(), 0);
    CHECK(GetCurrentFiber() == me);
    log_step('5');
    SwitchToFiber(e->thread_fiber);
    log_step('6');
    CHECK(strcmp(g_log, "1234546") == 0);
    CHECK_EQ(e->resumes, 2);
    CHECK_EQ(e->ran_on, test_gettid());
    CHECK_EQ(test_stats(e->thread_fiber).state, WEFT_FIBER_READY);

    /* DeleteFiber frees it (and its stack), running its FLS callbacks. */
    SetLastError(0);
    DeleteFiber(e->thread_fiber);
    CHECK_EQ(GetLastError(), 0);
    int tid = 0;
    CHECK_EQ(calls_with(&e->v_thread, &tid), 1);
    CHECK_EQ(tid, test_gettid());
    CHECK_EQ(g_freed, freed + 1);
    SetLastError(0);
    SwitchToFiber(e->thread_fiber);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);
    DeleteFiber(e->fiber);
    CHECK_EQ(calls_with(&e->v_fiber, NULL), 1);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
}

/* ---- its start routine returns on another thread -------------------------- */

static struct ender g_e3;
static int g_b_after;
static LPVOID g_b_fiber;
static int g_b_tid;

static void *resumer_main(void *arg) {
    (void)arg;
    g_b_tid = test_gettid();
    g_b_fiber = ConvertThreadToFiber(NULL);
    CHECK(g_b_fiber != NULL);
    log_step('3');
    SwitchToFiber(g_e3.thread_fiber); /* A's start routine returns in there */
    g_b_after = 1;
    CHECK(!"the thread went on after another thread's start routine returned in it");
    return NULL;
}

static void returns_elsewhere(void) {
    reset_log();
    memset(&g_e3, 0, sizeof g_e3);
    g_e3.how = BY_EXIT;
    int freed = g_freed;
    pthread_t a, b;
    CHECK_EQ(pthread_create(&a, NULL, ender_main, &g_e3), 0);
    CHECK_EQ(pthread_join(a, NULL), 0);
    void *result = NULL;
    CHECK_EQ(pthread_create(&b, NULL, resumer_main, NULL), 0);
    CHECK_EQ(pthread_join(b, &result), 0);
    CHECK(result == (void *)1); /* what A's start routine returned */
    CHECK_EQ(g_b_after, 0);
    CHECK(strcmp(g_log, "1234") == 0);
    CHECK_EQ(g_e3.resumes, 1);
    /* It finished on B, which ran its callbacks; it stays a finished fiber
     * until DeleteFiber. */
    CHECK_EQ(test_stats(g_e3.thread_fiber).state, WEFT_FIBER_FINISHED);
    int tid = 0;
    CHECK_EQ(calls_with(&g_e3.v_thread, &tid), 1);
    CHECK_EQ(tid, g_b_tid);
    CHECK_EQ(g_freed, freed + 1);
    SetLastError(0);
    DeleteFiber(g_e3.thread_fiber);
    CHECK_EQ(GetLastError(), 0);
    CHECK_EQ(calls_with(&g_e3.v_thread, NULL), 1);
    DeleteFiber(g_e3.fiber);
    /* B's own converted fiber lives on too, until deleted. */
    CHECK_EQ(test_stats(g_b_fiber).state, WEFT_FIBER_READY);
    SetLastError(0);
    DeleteFiber(g_b_fiber);
    CHECK_EQ(GetLastError(), 0);
}

/* ---- the stack size asked for ---------------------------------------------- */

static void *sized_main(void *arg) {
    (void)arg;
    /* 256 KiB asked for: three 64 KiB frames fit (more would not, but that
     * cannot be checked without dying). */
    return (void *)(intptr_t)use_stack(128 * 1024);
}

static void stack_size_asked_for(void) {
    pthread_attr_t attr;
    CHECK_EQ(pthread_attr_init(&attr), 0);
    CHECK_EQ(pthread_attr_setstacksize(&attr, 256 * 1024), 0);
    pthread_t t;
    void *r = NULL;
    CHECK_EQ(pthread_create(&t, &attr, sized_main, NULL), 0);
    CHECK_EQ(pthread_join(t, &r), 0);
    CHECK(r == (void *)2);
    CHECK_EQ(pthread_attr_destroy(&attr), 0);
}

/* ---- a stack of the caller's own ------------------------------------------- */

static int g_own_after;

static void *own_stack_main(void *arg) {
    struct ender *e = (struct ender *)arg;
    e->thread_fiber = ConvertThreadToFiber(NULL);
    CHECK(e->thread_fiber != NULL);
    CHECK(FlsSetValue(g_idx, &e->v_thread));
    e->fiber = CreateFiber(0, ends_thread, e);
    CHECK(e->fiber != NULL);
    SwitchToFiber(e->fiber);
    g_own_after = 1;
    CHECK(!"a converted fiber on the thread's own stack resumed after the thread ended");
    return NULL;
}

static void callers_own_stack(void) {
    size_t size = 256 * 1024;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(stack != MAP_FAILED);
    pthread_attr_t attr;
    CHECK_EQ(pthread_attr_init(&attr), 0);
    CHECK_EQ(pthread_attr_setstack(&attr, stack, size), 0);
    struct ender e;
    memset(&e, 0, sizeof e);
    e.how = BY_EXIT;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, &attr, own_stack_main, &e), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(pthread_attr_destroy(&attr), 0);
    CHECK_EQ(test_stats(e.thread_fiber).state, WEFT_FIBER_FINISHED);
    LPVOID me = ConvertThreadToFiber(NULL);
    CHECK(me != NULL);
    SetLastError(0);
    SwitchToFiber(e.thread_fiber);
    CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);
    CHECK_EQ(g_own_after, 0);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    DeleteFiber(e.thread_fiber);
    CHECK_EQ(calls_with(&e.v_thread, NULL), 1);
    DeleteFiber(e.fiber);
    CHECK_EQ(munmap(stack, size), 0);
}

int main(void) {
    g_idx = FlsAlloc(fls_cb);
    g_idx_heap = FlsAlloc(free_cb);
    CHECK(g_idx != FLS_OUT_OF_INDEXES && g_idx_heap != FLS_OUT_OF_INDEXES);
    ends_in_its_fiber(BY_EXIT, 0);
    ends_in_its_fiber(BY_RETURN, 0);
    ends_in_its_fiber(BY_EXIT, 1);
    returns_elsewhere();
    stack_size_asked_for();
    callers_own_stack();
    CHECK_EQ(FlsFree(g_idx), TRUE);
    CHECK_EQ(FlsFree(g_idx_heap), TRUE);
    TEST_PASS("thread_outlived");
    return 0;
}
