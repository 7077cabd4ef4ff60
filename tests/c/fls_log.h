/* fls_log.h: an FLS callback that records every call (value and thread),
 * shared by the C tests that check when weft runs FLS callbacks. The callback
 * fails the test if it is ever called with NULL: weft calls callbacks for
 * non-null values only. Include after check.h and <pthread.h>. */
#ifndef WEFT_TEST_FLS_LOG_H
#define WEFT_TEST_FLS_LOG_H

#define MAX_CALLS 64
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    PVOID value;
    int tid;
} g_calls[MAX_CALLS];
static int g_ncalls;

static VOID WINAPI fls_cb(PVOID value) {
    CHECK(value != NULL);
    pthread_mutex_lock(&g_lock);
    CHECK(g_ncalls < MAX_CALLS);
    g_calls[g_ncalls].value = value;
    g_calls[g_ncalls].tid = test_gettid();
    g_ncalls++;
    pthread_mutex_unlock(&g_lock);
}

static int calls_with(PVOID value, int *tid) {
    int n = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_ncalls; i++)
        if (g_calls[i].value == value) {
            n++;
            if (tid)
                *tid = g_calls[i].tid;
        }
    pthread_mutex_unlock(&g_lock);
    return n;
}

#endif
