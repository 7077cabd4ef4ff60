/* Stack overflow in a fiber: a fiber with a 64 KiB stack recurses without
 * bound. weft must print a line with "stack overflow", the fiber's id and
 * its stack size (65536) to stderr, and the process must die by SIGSEGV.
 * The harness runs this program and checks both; it prints the fiber's id
 * on stdout ("overflow fiber id N stack S") for the harness to look for.
 *
 * Usage: overflow [main|thread|start]  (overflow on the main thread or in a
 * fiber on a second thread; `start`: a thread with a 256 KiB stack converts
 * and its start routine recurses on the start stack weft gave it, so the line
 * must name the thread ("overflow thread tid T stack S" on stdout), its start
 * stack and the size) */
#include "check.h"

#include <pthread.h>
#include <sys/resource.h>

static volatile int g_depth;
static volatile int g_limit = -1; /* never reached: the recursion is unbounded */

static int __attribute__((noinline, noclone)) recurse(int n) {
    volatile char buf[512];
    buf[0] = (char)n;
    buf[sizeof buf - 1] = (char)n;
    g_depth = n;
    if (n == g_limit)
        return 0;
    return recurse(n + 1) + buf[0] + buf[sizeof buf - 1];
}

static VOID WINAPI overflow_fiber(LPVOID param) {
    (void)param;
    int r = recurse(0);
    printf("recursion ended?! %d\n", r);
    fflush(stdout);
    _exit(3);
}

static void run(void) {
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    /* Some fibers first, so the id is not a small number by chance. */
    for (int i = 0; i < 40; i++) {
        LPVOID f = CreateFiber(0, overflow_fiber, NULL);
        CHECK(f != NULL);
        DeleteFiber(f);
    }
    LPVOID f = CreateFiber(64 * 1024, overflow_fiber, NULL);
    CHECK(f != NULL);
    struct weft_fiber_stats s = test_stats(f);
    CHECK_EQ(s.stack_size, 65536);
    printf("overflow fiber id %llu stack %llu\n", (unsigned long long)s.id,
           (unsigned long long)s.stack_size);
    fflush(stdout);
    SwitchToFiber(f);
    printf("SwitchToFiber returned?!\n");
    fflush(stdout);
    _exit(4);
}

/* The start routine of `start`: converted, so weft watches its stack. */
static void *start_main(void *arg) {
    (void)arg;
    CHECK(ConvertThreadToFiber(NULL) != NULL);
    printf("overflow thread tid %d stack %d\n", test_gettid(), 256 * 1024);
    fflush(stdout);
    int r = recurse(0);
    printf("recursion ended?! %d\n", r);
    fflush(stdout);
    _exit(3);
}

static void *thread_main(void *arg) {
    (void)arg;
    run();
    return NULL;
}

int main(int argc, char **argv) {
    /* No core file for the expected crash. */
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);

    if (argc > 1 && strcmp(argv[1], "start") == 0) {
        pthread_attr_t a;
        pthread_t t;
        CHECK_EQ(pthread_attr_init(&a), 0);
        CHECK_EQ(pthread_attr_setstacksize(&a, 256 * 1024), 0);
        CHECK_EQ(pthread_create(&t, &a, start_main, NULL), 0);
        pthread_join(t, NULL);
        printf("thread ended?!\n");
        return 5;
    }
    if (argc > 1 && strcmp(argv[1], "thread") == 0) {
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, thread_main, NULL), 0);
        pthread_join(t, NULL);
        printf("thread ended?!\n");
        return 5;
    }
    run();
    return 6;
}
