/* Tiny test helpers for the weft C tests.  A failed check prints the file,
 * line, expression, the values involved and the thread's last error, then
 * ends the process with status 1 at once (_exit: no atexit handlers, no
 * thread-exit hooks, so a broken fiber state cannot hang the report). */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H

#define _GNU_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <weft/fibers.h>

static inline void check_fail(const char *file, int line, const char *expr,
                              const char *detail) {
    unsigned err = (unsigned)GetLastError();
    fprintf(stderr, "%s:%d: CHECK failed: %s%s%s (GetLastError()=%u: %s)\n",
            file, line, expr, detail ? " " : "", detail ? detail : "", err,
            weft_error_message(err));
    fflush(stdout);
    fflush(stderr);
    _exit(1);
}

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond))                                                       \
            check_fail(__FILE__, __LINE__, #cond, NULL);                   \
    } while (0)

/* Compares two integers (as unsigned long long) and prints both values. */
#define CHECK_EQ(a, b)                                                     \
    do {                                                                   \
        unsigned long long check_a_ = (unsigned long long)(a);             \
        unsigned long long check_b_ = (unsigned long long)(b);             \
        if (check_a_ != check_b_) {                                        \
            char check_buf_[128];                                          \
            snprintf(check_buf_, sizeof check_buf_, "[%llu != %llu]",      \
                     check_a_, check_b_);                                  \
            check_fail(__FILE__, __LINE__, #a " == " #b, check_buf_);      \
        }                                                                  \
    } while (0)

/* Checks a call's result and the last error it set. */
#define CHECK_ERR(expr_ok, code)                                           \
    do {                                                                   \
        CHECK(expr_ok);                                                    \
        CHECK_EQ(GetLastError(), (code));                                  \
    } while (0)

static inline int test_gettid(void) { return (int)syscall(SYS_gettid); }

static inline struct weft_fiber_stats test_stats(LPVOID fiber) {
    struct weft_fiber_stats s;
    memset(&s, 0xAB, sizeof s);
    if (!weft_fiber_stats(fiber, &s))
        check_fail(__FILE__, __LINE__, "weft_fiber_stats(fiber, &s)", NULL);
    return s;
}

#define TEST_PASS(name)                                                    \
    do {                                                                   \
        printf("%s: all checks passed\n", (name));                         \
        fflush(stdout);                                                    \
    } while (0)

#endif
