/* SwitchToFiber from a signal handler: a 1 ms ITIMER_REAL drives a
 * round-robin between three fibers that spin forever and never switch by
 * themselves; after enough ticks the handler switches back to main, which
 * stops the timer and checks that every fiber made progress. */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#define NFIB 3
#define TICKS 200

static LPVOID g_main;
static LPVOID g_fib[NFIB];
static volatile unsigned long long g_count[NFIB];
static volatile sig_atomic_t g_ticks;
static volatile sig_atomic_t g_done;
/* Set while the handler is switching; a nested SIGALRM (SA_NODEFER) that
 * lands then just returns. Cleared by whatever runs after the switch: the
 * resumed handler frame, or a fiber's first instructions. */
static volatile sig_atomic_t g_switching;
static volatile sig_atomic_t g_switch_errors;

static void on_alarm(int sig) {
    (void)sig;
    if (g_done || g_switching)
        return;
    int saved_errno = errno;
    DWORD saved_err = GetLastError();
    g_switching = 1;
    int n = ++g_ticks;
    LPVOID next = n >= TICKS ? g_main : g_fib[n % NFIB];
    if (n >= TICKS)
        g_done = 1;
    SetLastError(0);
    SwitchToFiber(next);
    if (GetLastError() != 0 && GetLastError() != ERROR_BUSY)
        g_switch_errors++;
    g_switching = 0;
    SetLastError(saved_err);
    errno = saved_errno;
}

static VOID WINAPI spinner(LPVOID param) {
    size_t i = (size_t)param;
    g_switching = 0;
    for (;;)
        g_count[i]++;
}

int main(void) {
    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    for (size_t i = 0; i < NFIB; i++) {
        g_fib[i] = CreateFiber(64 * 1024, spinner, (LPVOID)i);
        CHECK(g_fib[i] != NULL);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGALRM, &sa, NULL), 0);

    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_interval.tv_usec = 1000;
    it.it_value.tv_usec = 1000;
    CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long main_spins = 0;
    while (!g_done) /* the first tick takes us away from here */
        main_spins++;
    clock_gettime(CLOCK_MONOTONIC, &t1);

    memset(&it, 0, sizeof it);
    CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
    CHECK(GetCurrentFiber() == g_main);

    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("signal_switch: %d ticks in %.1f ms; counts %llu %llu %llu (main %llu)\n",
           (int)g_ticks, ms, g_count[0], g_count[1], g_count[2], main_spins);
    CHECK_EQ(g_switch_errors, 0);
    CHECK(g_ticks >= TICKS);
    for (int i = 0; i < NFIB; i++) {
        CHECK(g_count[i] > 0);
        struct weft_fiber_stats s = test_stats(g_fib[i]);
        CHECK(s.activations >= 10);
        CHECK_EQ(s.state, WEFT_FIBER_READY);
        CHECK(s.run_time_ns > 0);
    }

    /* The spinners are suspended inside their handler frames; deleting
     * them is fine. */
    for (int i = 0; i < NFIB; i++)
        DeleteFiber(g_fib[i]);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    TEST_PASS("signal_switch");
    return 0;
}
