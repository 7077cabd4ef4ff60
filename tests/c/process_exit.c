/* What happens when the process, or a thread, ends, in child processes:
 *
 *   atexit:   the main thread, a fiber, calls exit(). Its atexit handler still
 *             runs on that fiber: it switches to another fiber and back and
 *             uses FLS. After the atexit handlers, the FLS callback of the
 *             fiber that called exit() runs, as Windows runs FLS callbacks at
 *             ExitProcess.
 *   deadlock: a thread ends and its FLS callback never returns; the main
 *             thread then calls exit(). The process exits all the same, and
 *             the main thread's FLS callback runs during the exit.
 *   foreign:  a thread ends (pthread_exit) while it runs another thread's
 *             converted fiber, whose frames are on that thread's stack: weft
 *             stops the process with a message rather than go on.
 *
 * Each child reports what it saw through a pipe; the parent checks the order
 * and the exit status. A child that hangs is caught by the harness's time
 * limit. */
#include "check.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/wait.h>

static int g_pipe = -1;

static void report(const char *what) {
    size_t n = strlen(what);
    CHECK_EQ(write(g_pipe, what, n), n);
}

/* ---- atexit ---------------------------------------------------------------- */

static LPVOID g_main, g_other;
static DWORD g_idx;
static int g_other_runs, v_main, v_other;
static int g_handler_done;

static VOID WINAPI other(LPVOID param) {
    (void)param;
    for (;;) {
        g_other_runs++;
        CHECK(FlsSetValue(g_idx, &v_other));
        SwitchToFiber(g_main);
    }
}

static VOID WINAPI exit_callback(PVOID value) {
    if (value == &v_main) {
        /* Only after the atexit handlers, as Windows does at ExitProcess. */
        CHECK(g_handler_done);
        report("main-callback;");
    } else {
        report("other-callback;"); /* only the exiting fiber's values */
    }
}

static void atexit_handler(void) {
    CHECK(GetCurrentFiber() == g_main);
    CHECK_EQ(IsThreadAFiber(), TRUE);
    CHECK(FlsGetValue(g_idx) == &v_main);
    SwitchToFiber(g_other);
    CHECK_EQ(g_other_runs, 2);
    CHECK(GetCurrentFiber() == g_main);
    CHECK(FlsGetValue(g_idx) == &v_main);
    CHECK(FlsSetValue(g_idx, &v_main));
    report("atexit;");
    g_handler_done = 1;
}

static void child_atexit(void) {
    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    g_idx = FlsAlloc(exit_callback);
    CHECK(g_idx != FLS_OUT_OF_INDEXES);
    CHECK(FlsSetValue(g_idx, &v_main));
    g_other = CreateFiber(0, other, NULL);
    CHECK(g_other != NULL);
    SwitchToFiber(g_other);
    CHECK_EQ(g_other_runs, 1);
    CHECK_EQ(atexit(atexit_handler), 0);
    report("exit;");
    exit(0);
}

/* ---- deadlock ---------------------------------------------------------------- */

static sem_t g_stuck;
static int v_one, v_two;

static VOID WINAPI blocking_callback(PVOID value) {
    if (value == &v_one) {
        report("thread-callback;");
        CHECK_EQ(sem_post(&g_stuck), 0);
        for (;;)
            pause(); /* never returns: the thread stays in its exit */
    }
    if (value == &v_two)
        report("main-callback;");
}

static void *ends_with_a_value(void *arg) {
    CHECK(FlsSetValue(*(DWORD *)arg, &v_one));
    return NULL;
}

static void child_deadlock(void) {
    static DWORD idx;
    idx = FlsAlloc(blocking_callback);
    CHECK(idx != FLS_OUT_OF_INDEXES);
    CHECK(FlsSetValue(idx, &v_two));
    CHECK_EQ(sem_init(&g_stuck, 0, 0), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, ends_with_a_value, &idx), 0);
    while (sem_wait(&g_stuck) != 0)
        ;
    report("exit;");
    exit(0);
}

/* ---- a thread ends on another thread's stack -------------------------------------- */

static LPVOID g_home, g_borrower;

static void *borrower(void *arg) {
    (void)arg;
    g_borrower = ConvertThreadToFiber(NULL);
    CHECK(g_borrower != NULL);
    SwitchToFiber(g_home); /* runs the main thread's fiber here */
    CHECK(!"the borrowed fiber came back");
    return NULL;
}

static VOID WINAPI lender(LPVOID param) {
    (void)param;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, borrower, NULL), 0);
    pthread_join(t, NULL); /* the process ends before */
    CHECK(!"the borrowing thread ended");
}

static void child_foreign_end(void) {
    dup2(g_pipe, 2); /* weft's message goes to the parent */
    g_home = ConvertThreadToFiber(NULL);
    CHECK(g_home != NULL);
    LPVOID f = CreateFiber(0, lender, NULL);
    CHECK(f != NULL);
    SwitchToFiber(f);
    /* Here on the borrowing thread: ending it here would leave this fiber's
     * frames, on the main thread's stack, to a thread that is gone. weft stops
     * the process with a message instead. */
    report("ending;");
    pthread_exit(NULL);
}

/* ---- parent ---------------------------------------------------------------------- */

/* Runs fn in a child process; returns what it reported (static) and its status. */
static const char *run_child_status(void (*fn)(void), const char *name, int *status);

static void run_child(void (*fn)(void), const char *name, const char *expect) {
    int status = 0;
    const char *got = run_child_status(fn, name, &status);
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(strcmp(got, expect) == 0);
}

static const char *run_child_status(void (*fn)(void), const char *name, int *status) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        g_pipe = fds[1];
        fn();
        _exit(3); /* not reached: fn exits */
    }
    close(fds[1]);
    static char got[1024];
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fds[0], got + len, sizeof got - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    got[len] = 0;
    close(fds[0]);
    CHECK_EQ(waitpid(pid, status, 0), pid);
    printf("%s: child reported \"%s\", status %d\n", name, got, *status);
    return got;
}

int main(void) {
    run_child(child_atexit, "atexit", "exit;atexit;main-callback;");
    run_child(child_deadlock, "deadlock", "thread-callback;exit;main-callback;");
    int status = 0;
    const char *got = run_child_status(child_foreign_end, "foreign end", &status);
    CHECK(WIFSIGNALED(status));
    CHECK_EQ(WTERMSIG(status), SIGABRT);
    CHECK(strncmp(got, "ending;", 7) == 0);
    CHECK(strstr(got, "another thread's converted fiber") != NULL);
    TEST_PASS("process_exit");
    return 0;
}
