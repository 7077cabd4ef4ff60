/* Handles that no longer name a fiber, and values that never did: every
 * call fails with an error and acts on nothing else.
 *
 *   - a deleted fiber's handle: SwitchToFiber, DeleteFiber, weft_fiber_stats
 *     fail with ERROR_INVALID_HANDLE, also once its record holds a new fiber,
 *     whose state and statistics stay as they were
 *   - the handle of a thread's fiber after ConvertFiberToThread
 *   - NULL, small integers, pointers to other memory, a handle of a later
 *     generation: ERROR_INVALID_PARAMETER
 *   - a race: one thread creates and deletes fibers while another switches to
 *     whatever handle was published last; the switch either runs the fiber that
 *     handle named or fails, never another fiber
 * The harness also runs this under valgrind and AddressSanitizer. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

static LPVOID g_main;

static VOID WINAPI bounce(LPVOID param) {
    int *count = (int *)param;
    for (;;) {
        (*count)++;
        SwitchToFiber(g_main);
    }
}

/* Every call with `h` fails with `err` and leaves the caller running. */
static void check_refused(LPVOID h, DWORD err) {
    struct weft_fiber_stats s;
    SetLastError(0);
    SwitchToFiber(h);
    CHECK_EQ(GetLastError(), err);
    CHECK(GetCurrentFiber() == g_main);
    SetLastError(0);
    DeleteFiber(h);
    CHECK_EQ(GetLastError(), err);
    SetLastError(0);
    CHECK_ERR(weft_fiber_stats(h, &s) == FALSE, err);
}

/* ---- the race ------------------------------------------------------------ */

#define RACE_ATTEMPTS 5000

struct racer {
    unsigned serial;
    LPVOID back;
};

static _Atomic(LPVOID) g_published;
static atomic_uint g_published_serial;
static atomic_int g_switcher_done;
static atomic_uint g_last_ran; /* serial of the fiber that ran last */

static VOID WINAPI racer_fn(LPVOID param) {
    struct racer *r = (struct racer *)param;
    for (;;) {
        atomic_store(&g_last_ran, r->serial);
        SwitchToFiber(r->back);
    }
}

static LPVOID g_switcher_fiber;
static unsigned g_created;

/* Creates fibers, publishes each handle, deletes it (retrying while the
 * switcher runs it), and goes on until the switcher is done: the switcher
 * mostly holds stale handles, whose records are being reused. */
static void *creator(void *arg) {
    (void)arg;
    static struct racer rs[64]; /* a deleted fiber's entry is free again */
    for (unsigned i = 0; !atomic_load(&g_switcher_done); i++) {
        struct racer *r = &rs[i % 64];
        r->serial = i + 1;
        r->back = g_switcher_fiber;
        LPVOID f = CreateFiber(16 * 1024, racer_fn, r);
        CHECK(f != NULL);
        atomic_store(&g_published_serial, i + 1);
        atomic_store(&g_published, f);
        sched_yield();
        for (;;) {
            SetLastError(0);
            DeleteFiber(f);
            DWORD e = GetLastError();
            if (e == 0)
                break;
            CHECK_EQ(e, ERROR_BUSY); /* the switcher runs it right now */
            sched_yield();
        }
        /* Deleted: the handle is stale from now on. */
        SetLastError(0);
        DeleteFiber(f);
        CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);
        g_created = i + 1;
    }
    return NULL;
}

int main(void) {
    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);

    /* A deleted fiber's handle. */
    int n_f = 0, n_g = 0;
    LPVOID f = CreateFiber(0, bounce, &n_f);
    CHECK(f != NULL);
    SwitchToFiber(f);
    CHECK_EQ(n_f, 1);
    DeleteFiber(f);
    check_refused(f, ERROR_INVALID_HANDLE);

    /* ... once its record holds a new fiber (this thread reuses the record it
     * freed last): the new fiber is untouched by the old handle. */
    LPVOID g = CreateFiber(0, bounce, &n_g);
    CHECK(g != NULL);
    CHECK(g != f);
    struct weft_fiber_stats before = test_stats(g);
    check_refused(f, ERROR_INVALID_HANDLE);
    struct weft_fiber_stats after = test_stats(g);
    CHECK_EQ(after.state, WEFT_FIBER_READY);
    CHECK_EQ(after.activations, before.activations);
    CHECK_EQ(after.failed_activations, before.failed_activations);
    CHECK_EQ(n_g, 0);
    SwitchToFiber(g);
    CHECK_EQ(n_g, 1);
    CHECK_EQ(n_f, 1);

    /* Many generations of handles, all stale; the live fiber is untouched. */
    static LPVOID old[500];
    for (int i = 0; i < 500; i++) {
        old[i] = CreateFiber(16 * 1024, bounce, &n_f);
        CHECK(old[i] != NULL);
        if (i % 2)
            SwitchToFiber(old[i]);
        DeleteFiber(old[i]);
    }
    CHECK_EQ(n_f, 1 + 250);
    before = test_stats(g);
    for (int i = 0; i < 500; i++) {
        SetLastError(0);
        SwitchToFiber(old[i]);
        CHECK_EQ(GetLastError(), ERROR_INVALID_HANDLE);
    }
    after = test_stats(g);
    CHECK_EQ(after.activations, before.activations);
    CHECK_EQ(after.failed_activations, before.failed_activations);
    CHECK_EQ(n_f, 1 + 250);

    /* Values that were never handles. */
    int local = 0;
    void *heap = malloc(64);
    CHECK(heap != NULL);
    LPVOID never[] = {NULL,
                      (LPVOID)1,
                      (LPVOID)(uintptr_t)0xdeadbeef,
                      (LPVOID)&local,
                      heap,
                      (LPVOID)main,
                      (LPVOID)(uintptr_t)-1,
                      /* g's slot, a generation it has not reached */
                      (LPVOID)((uintptr_t)g + ((uintptr_t)1 << 40))};
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        check_refused(never[i], ERROR_INVALID_PARAMETER);
    free(heap);
    CHECK_EQ(test_stats(g).state, WEFT_FIBER_READY);

    /* A thread's fiber after ConvertFiberToThread. */
    LPVOID m = g_main;
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    CHECK(g_main != m);
    check_refused(m, ERROR_INVALID_HANDLE);
    SwitchToFiber(g); /* the live one still works */
    CHECK_EQ(n_g, 2);

    /* The race. */
    g_switcher_fiber = g_main;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, creator, NULL), 0);
    unsigned ran = 0, refused = 0, busy = 0;
    for (unsigned attempt = 0; attempt < RACE_ATTEMPTS;) {
        unsigned serial = atomic_load(&g_published_serial);
        LPVOID h = atomic_load(&g_published);
        if (h == NULL || atomic_load(&g_published_serial) != serial)
            continue; /* read the pair again */
        attempt++;
        atomic_store(&g_last_ran, 0);
        SetLastError(0);
        SwitchToFiber(h);
        DWORD e = GetLastError();
        CHECK(GetCurrentFiber() == g_main);
        if (e == 0) {
            /* It ran: it must be the fiber this handle named. Then wait for the
             * next one, so that most attempts race with a DeleteFiber. */
            CHECK_EQ(atomic_load(&g_last_ran), serial);
            ran++;
            while (atomic_load(&g_published_serial) == serial)
                sched_yield();
        } else {
            CHECK(e == ERROR_INVALID_HANDLE || e == ERROR_BUSY);
            CHECK_EQ(atomic_load(&g_last_ran), 0);
            if (e == ERROR_BUSY)
                busy++;
            else
                refused++;
        }
    }
    atomic_store(&g_switcher_done, 1);
    CHECK_EQ(pthread_join(t, NULL), 0);
    printf("race: %u fibers made and deleted; %u switches ran, %u refused as stale, "
           "%u busy\n",
           g_created, ran, refused, busy);

    DeleteFiber(g);
    check_refused(g, ERROR_INVALID_HANDLE);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    TEST_PASS("stale_handles");
    return 0;
}
