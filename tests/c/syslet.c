/* Syslets from C (weft/syslet.h): open -> read -> close with the open's
 * result feeding the read and the close; a failing open that stops the
 * chain and names atom 0; a SYSLET_SKIP_TO_NEXT_ON_STOP branch; umem_add
 * countdown loops (inline, and past the inline budget); an asynchronous read
 * from an empty pipe completing after a write (async_wait, weft_syslet_pop);
 * cancelling a blocked read; a context that refuses to be freed while busy;
 * SYSLET_NO_COMPLETE; bad pointers giving -EFAULT, not a crash; validation
 * errors (unknown number, forbidden call, missing argument, bad flags,
 * ASYNC|SYNC, unreadable atoms) naming the atom; ring overflow; the seed's
 * server loop (accept -> setsockopt(TCP_NODELAY) -> read while positive ->
 * umem_add counter -> back to accept while positive), asynchronous and
 * inline; async_wait from a green thread; NULL arguments. */
#include "check.h"

#include <weft/runtime.h>
#include <weft/syslet.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>

#define SEC ((int64_t)1000000000)
#define MS(n) ((int64_t)(n) * 1000000)

static weft_syslet_ctx *ctx;
static long page;

/* Fills atom `a`: system call nr, flags, ret_ptr, next, then `nargs`
 * argument pointers (unsigned long *). */
static void set_atom(struct syslet_uatom *a, unsigned long nr, unsigned long flags, long *ret,
                     struct syslet_uatom *next, int nargs, ...) {
    va_list ap;
    int i;
    memset(a, 0, sizeof *a);
    a->nr = nr;
    a->flags = flags;
    a->ret_ptr = ret;
    a->next = next;
    va_start(ap, nargs);
    for (i = 0; i < nargs; i++)
        a->arg_ptr[i] = va_arg(ap, unsigned long *);
    va_end(ap);
}

/* Runs the syslet at `first` in `c` to its end: inline, or asynchronously
 * (then waits for its completion, which must be the only one).  *went_async
 * says which. */
static struct weft_syslet_completion run_in(weft_syslet_ctx *c, struct syslet_uatom *first,
                                            int *went_async) {
    struct weft_syslet_completion done;
    uint64_t h = 12345;
    memset(&done, 0xAB, sizeof done);
    CHECK_EQ(weft_syslet_exec(c, first, &done, &h), 0);
    if (h == 0) {
        CHECK_EQ(done.handle, 0);
        CHECK_EQ(weft_syslet_last_ret(), done.ret);
        if (went_async)
            *went_async = 0;
        return done;
    }
    if (went_async)
        *went_async = 1;
    CHECK(async_wait(c, 1, 10 * SEC) >= 1);
    CHECK_EQ(weft_syslet_pop(c, &done), 1);
    CHECK_EQ(done.handle, h);
    return done;
}

static struct weft_syslet_completion run(struct syslet_uatom *first, int *went_async) {
    return run_in(ctx, first, went_async);
}

/* An address nothing is mapped at. */
static void *unmapped(void) {
    void *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    CHECK_EQ(munmap(p, (size_t)page), 0);
    return p;
}

static char tmp_path[64];

static void make_file(const char *content) {
    int fd;
    strcpy(tmp_path, "/tmp/weft-syslet-XXXXXX");
    fd = mkstemp(tmp_path);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, content, strlen(content)), strlen(content));
    CHECK_EQ(close(fd), 0);
}

/* ---- names ------------------------------------------------------------------ */

static void test_names_and_contexts(void) {
    static const uint32_t codes[] = {
        WEFT_ERR_SYSLET_UNKNOWN_SYSCALL, WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL,
        WEFT_ERR_SYSLET_MISSING_ARGUMENT, WEFT_ERR_SYSLET_BAD_FLAGS,
        WEFT_ERR_SYSLET_ASYNC_AND_SYNC, WEFT_ERR_SYSLET_BAD_ATOM,
        WEFT_ERR_SYSLET_BUSY, WEFT_ERR_SYSLET_NOT_IN_FLIGHT,
    };
    size_t i;
    CHECK_EQ(weft_syslet_nr("read"), SYS_read);
    CHECK_EQ(weft_syslet_nr("openat"), SYS_openat);
    CHECK_EQ(weft_syslet_nr("close"), SYS_close);
    CHECK_EQ(weft_syslet_nr("umem_add"), SYS_UMEM_ADD);
    CHECK_EQ(weft_syslet_nr("clone"), SYS_clone); /* forbidden, but named */
    CHECK_ERR(weft_syslet_nr("no_such_call") == -1, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL);
    CHECK_ERR(weft_syslet_nr(NULL) == -1, WEFT_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(weft_syslet_name(SYS_read), "read") == 0);
    CHECK(strcmp(weft_syslet_name(SYS_UMEM_ADD), "umem_add") == 0);
    CHECK(strcmp(weft_syslet_name(SYS_clone), "clone") == 0);
    CHECK_ERR(weft_syslet_name(5000) == NULL, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL);
    for (i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECK_EQ(codes[i] & 0x20000000u, 0x20000000u);
        CHECK(strstr(weft_error_message(codes[i]), "syslet") != NULL);
    }
    CHECK_ERR(weft_syslet_ctx_new(0) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_syslet_ctx_new(WEFT_SYSLET_RING_MAX + 1) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(weft_syslet_ctx_free(weft_syslet_ctx_new(WEFT_SYSLET_RING_MAX)), 0);
    CHECK_EQ(weft_syslet_in_flight(ctx), 0);
    CHECK_EQ(weft_syslet_ready(ctx), 0);
    CHECK_EQ(weft_syslet_overflowed(ctx), 0);
}

/* ---- open -> read -> close -------------------------------------------------- */

static void test_open_read_close(void) {
    static const char content[] = "hello syslets\n";
    struct syslet_uatom a[3];
    struct weft_syslet_completion c;
    char buf[256];
    long fd = -77, n = -77, cret = -77;
    unsigned long dirfd = (unsigned long)AT_FDCWD, path, flags = O_RDONLY, mode = 0;
    unsigned long bufp = (unsigned long)buf, len = sizeof buf;
    struct syslet_uatom *end;
    uint64_t h = 99;

    make_file(content);
    path = (unsigned long)tmp_path;
    set_atom(&a[0], SYS_openat, SYSLET_STOP_ON_NEGATIVE, &fd, &a[1], 4, &dirfd, &path, &flags,
             &mode);
    /* The open's result (fd) is the read's and the close's first argument. */
    set_atom(&a[1], SYS_read, SYSLET_STOP_ON_NEGATIVE, &n, &a[2], 3, (unsigned long *)&fd, &bufp,
             &len);
    set_atom(&a[2], SYS_close, 0, &cret, NULL, 1, (unsigned long *)&fd);
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);

    memset(buf, 0, sizeof buf);
    c = run(a, NULL);
    CHECK(c.atom == &a[2]);
    CHECK_EQ(c.ret, 0);
    CHECK(fd >= 0);
    CHECK_EQ(n, strlen(content));
    CHECK(memcmp(buf, content, strlen(content)) == 0);
    CHECK_EQ(cret, 0);
    CHECK_EQ(fcntl((int)fd, F_GETFD), -1); /* closed by the syslet */
    CHECK_EQ(errno, EBADF);

    /* Again through the seed's async_exec (the file is cached now). */
    fd = n = cret = -77;
    memset(buf, 0, sizeof buf);
    end = async_exec(ctx, a, &h);
    if (end != NULL) {
        CHECK(end == &a[2]);
        CHECK_EQ(h, 0);
        CHECK_EQ(weft_syslet_last_ret(), 0);
    } else {
        CHECK(h != 0);
        CHECK_EQ(async_wait(ctx, 1, WEFT_SYSLET_TIMEOUT_NEVER), 1);
        CHECK_EQ(weft_syslet_pop(ctx, &c), 1);
        CHECK(c.atom == &a[2] && c.ret == 0 && c.handle == h);
    }
    CHECK_EQ(n, strlen(content));
    CHECK(memcmp(buf, content, strlen(content)) == 0);
    CHECK_EQ(cret, 0);
    CHECK_EQ(unlink(tmp_path), 0);
}

/* ---- a failing open --------------------------------------------------------- */

static void test_failing_open(void) {
    struct syslet_uatom a[3];
    struct weft_syslet_completion c;
    char buf[16];
    long fd = -77, n = -77, cret = -77;
    unsigned long dirfd = (unsigned long)AT_FDCWD, flags = O_RDONLY, mode = 0;
    unsigned long path = (unsigned long)"/nonexistent/weft-syslet-test";
    unsigned long bufp = (unsigned long)buf, len = sizeof buf;

    set_atom(&a[0], SYS_openat, SYSLET_STOP_ON_NEGATIVE, &fd, &a[1], 4, &dirfd, &path, &flags,
             &mode);
    set_atom(&a[1], SYS_read, 0, &n, &a[2], 3, (unsigned long *)&fd, &bufp, &len);
    set_atom(&a[2], SYS_close, 0, &cret, NULL, 1, (unsigned long *)&fd);
    c = run(a, NULL);
    CHECK(c.atom == &a[0]); /* atom 0 failed ... */
    CHECK_EQ(c.atom - a, 0);
    CHECK_EQ(c.ret, -ENOENT); /* ... and why */
    CHECK_EQ(fd, -ENOENT);    /* its result still went to ret_ptr */
    CHECK_EQ(n, -77);         /* the rest never ran */
    CHECK_EQ(cret, -77);
}

/* ---- SYSLET_SKIP_TO_NEXT_ON_STOP: if / else ------------------------------------ */

static void test_skip_branch(void) {
    struct syslet_uatom a[3];
    struct weft_syslet_completion c;
    long fd = -77, else_ret = -77, cret = -77, else_count = 0;
    unsigned long dirfd = (unsigned long)AT_FDCWD, flags = O_RDONLY, mode = 0, path;
    unsigned long else_addr = (unsigned long)&else_count, one = 1;

    /* a[0]: open; on failure skip to a[1] (else), on success next = a[2] (then). */
    set_atom(&a[0], SYS_openat, SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP, &fd, &a[2],
             4, &dirfd, &path, &flags, &mode);
    set_atom(&a[1], SYS_UMEM_ADD, 0, &else_ret, NULL, 2, &else_addr, &one);
    set_atom(&a[2], SYS_close, 0, &cret, NULL, 1, (unsigned long *)&fd);
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);

    path = (unsigned long)"/nonexistent/weft-syslet-test";
    c = run(a, NULL);
    CHECK(c.atom == &a[1]);
    CHECK_EQ(c.ret, 1);
    CHECK_EQ(else_count, 1);
    CHECK_EQ(fd, -ENOENT);
    CHECK_EQ(cret, -77);

    make_file("x");
    path = (unsigned long)tmp_path;
    c = run(a, NULL);
    CHECK(c.atom == &a[2]);
    CHECK_EQ(c.ret, 0);
    CHECK(fd >= 0);
    CHECK_EQ(cret, 0);
    CHECK_EQ(else_count, 1); /* the else branch did not run */
    CHECK_EQ(unlink(tmp_path), 0);
}

/* ---- umem_add loops ------------------------------------------------------------ */

static void test_countdown(void) {
    struct syslet_uatom a[2];
    struct weft_syslet_completion c;
    long counter = 5, iterations = 0, ret = -77;
    unsigned long counter_addr = (unsigned long)&counter, iter_addr = (unsigned long)&iterations;
    unsigned long minus_one = (unsigned long)-1L, one = 1;
    int went_async = -1;

    /* a[0]: iterations += 1; a[1]: counter -= 1, leave at 0, else back to a[0]. */
    set_atom(&a[0], SYS_UMEM_ADD, 0, NULL, &a[1], 2, &iter_addr, &one);
    set_atom(&a[1], SYS_UMEM_ADD, SYSLET_STOP_ON_NON_POSITIVE, &ret, &a[0], 2, &counter_addr,
             &minus_one);
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0); /* the loop does not hang it */
    c = run(a, &went_async);
    CHECK_EQ(went_async, 0); /* nothing blocks: all inline */
    CHECK(c.atom == &a[1]);
    CHECK_EQ(c.ret, 0);
    CHECK_EQ(counter, 0);
    CHECK_EQ(ret, 0);
    CHECK_EQ(iterations, 5);

    /* 2 x 1000 atoms: past the inline budget (256), the rest goes to a
     * cachemiss thread; the result is the same. */
    counter = 1000;
    iterations = 0;
    c = run(a, &went_async);
    CHECK_EQ(went_async, 1);
    CHECK(c.atom == &a[1]);
    CHECK_EQ(c.ret, 0);
    CHECK_EQ(counter, 0);
    CHECK_EQ(iterations, 1000);
}

/* ---- asynchronous: an empty pipe --------------------------------------------- */

static void test_async_pipe(void) {
    struct syslet_uatom a[1];
    struct weft_syslet_completion c;
    char buf[64];
    int p[2];
    long n = -77;
    unsigned long rfd, bufp = (unsigned long)buf, len = sizeof buf;
    uint64_t h = 0;

    CHECK_EQ(pipe(p), 0);
    rfd = (unsigned long)p[0];
    set_atom(&a[0], SYS_read, 0, &n, NULL, 3, &rfd, &bufp, &len);
    CHECK(async_exec(ctx, a, &h) == NULL); /* it would block: asynchronous */
    CHECK(h != 0);
    CHECK_EQ(weft_syslet_in_flight(ctx), 1);
    CHECK_EQ(weft_syslet_ready(ctx), 0);
    CHECK_EQ(weft_syslet_pop(ctx, &c), 0);
    CHECK_EQ(async_wait(ctx, 1, 0), 0);       /* no wait */
    CHECK_EQ(async_wait(ctx, 1, MS(20)), 0);  /* times out */
    CHECK_EQ(write(p[1], "ping", 4), 4);
    CHECK_EQ(async_wait(ctx, 1, WEFT_SYSLET_TIMEOUT_NEVER), 1);
    CHECK_EQ(weft_syslet_ready(ctx), 1);
    CHECK_EQ(weft_syslet_pop(ctx, &c), 1);
    CHECK(c.atom == &a[0]);
    CHECK_EQ(c.ret, 4);
    CHECK_EQ(c.handle, h);
    CHECK_EQ(n, 4);
    CHECK(memcmp(buf, "ping", 4) == 0);
    CHECK_EQ(weft_syslet_in_flight(ctx), 0); /* popped: no longer in flight */
    CHECK_EQ(weft_syslet_pop(ctx, &c), 0);
    CHECK_ERR(weft_syslet_cancel(ctx, h) == WEFT_ERR_SYSLET_NOT_IN_FLIGHT,
              WEFT_ERR_SYSLET_NOT_IN_FLIGHT);
    close(p[0]);
    close(p[1]);
}

/* ---- cancel a blocked read; free a busy context ------------------------------- */

static void test_cancel(void) {
    weft_syslet_ctx *c2 = weft_syslet_ctx_new(4);
    struct syslet_uatom a[2];
    struct weft_syslet_completion c;
    char buf[8];
    int p[2];
    long n = -77, after = -77;
    unsigned long rfd, bufp = (unsigned long)buf, len = sizeof buf;
    uint64_t h = 0;

    CHECK(c2 != NULL);
    CHECK_EQ(pipe(p), 0);
    rfd = (unsigned long)p[0];
    set_atom(&a[0], SYS_read, 0, &n, &a[1], 3, &rfd, &bufp, &len);
    set_atom(&a[1], SYS_getpid, 0, &after, NULL, 0);
    CHECK_EQ(weft_syslet_exec(c2, a, NULL, &h), 0);
    CHECK(h != 0);
    CHECK_ERR(weft_syslet_ctx_free(c2) == WEFT_ERR_SYSLET_BUSY, WEFT_ERR_SYSLET_BUSY);
    CHECK_EQ(weft_syslet_in_flight(c2), 1); /* still usable */
    /* Give the read time to block (in a cachemiss thread or in io_uring). The checks
     * below accept a cancel that lands before it blocks as well: no failure hangs on
     * this pause. */
    usleep(50000);
    CHECK_EQ(weft_syslet_cancel(c2, h), 0);
    CHECK_EQ(async_wait(c2, 1, 10 * SEC), 1);
    CHECK_EQ(weft_syslet_pop(c2, &c), 1);
    CHECK_EQ(c.handle, h);
    CHECK(c.ret == -ECANCELED || c.ret == -EINTR);
    CHECK(c.atom == &a[0] || c.atom == &a[1]);
    CHECK_EQ(after, -77); /* getpid never ran */
    CHECK_EQ(weft_syslet_in_flight(c2), 0);
    CHECK_ERR(weft_syslet_cancel(c2, h) == WEFT_ERR_SYSLET_NOT_IN_FLIGHT,
              WEFT_ERR_SYSLET_NOT_IN_FLIGHT);
    CHECK_ERR(weft_syslet_cancel(c2, 0) == WEFT_ERR_SYSLET_NOT_IN_FLIGHT,
              WEFT_ERR_SYSLET_NOT_IN_FLIGHT);
    CHECK_EQ(weft_syslet_ctx_free(c2), 0);
    close(p[0]);
    close(p[1]);
}

/* ---- SYSLET_NO_COMPLETE --------------------------------------------------------- */

static void test_no_complete(void) {
    struct syslet_uatom a[1];
    char buf[8];
    int p[2], i;
    long n = -77;
    unsigned long rfd, bufp = (unsigned long)buf, len = sizeof buf;
    uint64_t h = 0;

    CHECK_EQ(pipe(p), 0);
    rfd = (unsigned long)p[0];
    set_atom(&a[0], SYS_read, SYSLET_NO_COMPLETE, &n, NULL, 3, &rfd, &bufp, &len);
    CHECK(async_exec(ctx, a, &h) == NULL && h != 0);
    CHECK_EQ(write(p[1], "abc", 3), 3);
    for (i = 0; i < 12000 && weft_syslet_in_flight(ctx) != 0; i++) /* 60 s: a hang */
        usleep(5000);
    CHECK_EQ(weft_syslet_in_flight(ctx), 0); /* ended, forgotten */
    CHECK_EQ(n, 3);
    CHECK_EQ(weft_syslet_ready(ctx), 0); /* and nothing posted */
    close(p[0]);
    close(p[1]);
}

/* ---- bad pointers: -EFAULT ------------------------------------------------------ */

static void test_efault(void) {
    struct syslet_uatom a[2];
    struct weft_syslet_completion c;
    void *bad = unmapped();
    long ret = -77, fd_long;
    unsigned long bad_addr = (unsigned long)bad, zero = 0, len = 16, fd;
    unsigned long misaligned;
    int devzero = open("/dev/zero", O_RDONLY);
    long counter[2] = {0, 0};

    /* The first atom itself. */
    c = run((struct syslet_uatom *)bad, NULL);
    CHECK(c.atom == (struct syslet_uatom *)bad);
    CHECK_EQ(c.ret, -EFAULT);

    /* An argument pointer. */
    set_atom(&a[0], SYS_close, 0, &ret, NULL, 1, (unsigned long *)bad);
    c = run(a, NULL);
    CHECK(c.atom == &a[0]);
    CHECK_EQ(c.ret, -EFAULT);

    /* ret_ptr. */
    set_atom(&a[0], SYS_getpid, 0, (long *)bad, NULL, 0);
    c = run(a, NULL);
    CHECK(c.atom == &a[0]);
    CHECK_EQ(c.ret, -EFAULT);

    /* next: the completion names the bad atom. */
    set_atom(&a[0], SYS_getpid, 0, &ret, (struct syslet_uatom *)bad, 0);
    c = run(a, NULL);
    CHECK(c.atom == (struct syslet_uatom *)bad);
    CHECK_EQ(c.ret, -EFAULT);
    CHECK_EQ(ret, getpid()); /* a[0] ran */

    /* umem_add's variable: bad, then misaligned. */
    set_atom(&a[0], SYS_UMEM_ADD, 0, &ret, NULL, 2, &bad_addr, &zero);
    c = run(a, NULL);
    CHECK_EQ(c.ret, -EFAULT);
    misaligned = (unsigned long)counter + 4;
    set_atom(&a[0], SYS_UMEM_ADD, 0, &ret, NULL, 2, &misaligned, &zero);
    c = run(a, NULL);
    CHECK_EQ(c.ret, -EINVAL);

    /* A buffer the kernel writes to. */
    CHECK(devzero >= 0);
    fd = (unsigned long)devzero;
    set_atom(&a[0], SYS_read, 0, &ret, NULL, 3, &fd, &bad_addr, &len);
    c = run(a, NULL);
    CHECK_EQ(c.ret, -EFAULT);
    close(devzero);

    /* SKIP_TO_NEXT_ON_STOP off the end of the mapped memory. */
    {
        char *two = (char *)mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        struct syslet_uatom *last;
        CHECK(two != (char *)MAP_FAILED);
        CHECK_EQ(munmap(two + page, (size_t)page), 0);
        last = (struct syslet_uatom *)(two + page) - 1;
        fd_long = -1;
        fd = (unsigned long)-1L;
        set_atom(last, SYS_close, SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP, &fd_long,
                 NULL, 1, &fd);
        c = run(last, NULL);
        CHECK(c.atom == last + 1);
        CHECK_EQ(c.ret, -EFAULT);
        CHECK_EQ(fd_long, -EBADF);
        CHECK_EQ(munmap(two, (size_t)page), 0);
    }
}

/* ---- validation ------------------------------------------------------------------ */

#define CHECK_INVALID(first, code, index, text)                                   \
    do {                                                                          \
        const struct syslet_uatom *bad_ = NULL;                                   \
        ptrdiff_t index_ = -12345;                                                \
        CHECK_EQ(weft_syslet_validate((first), &bad_, &index_), (code));          \
        CHECK_EQ(GetLastError(), (code));                                         \
        CHECK_EQ(index_, (index));                                                \
        CHECK(bad_ == (first) + (index));                                         \
        if (strstr(weft_syslet_validate_error(), (text)) == NULL) {               \
            fprintf(stderr, "message: %s\n", weft_syslet_validate_error());       \
            CHECK(!"the message says " text);                                     \
        }                                                                         \
    } while (0)

static void test_validate(void) {
    struct syslet_uatom a[4];
    char buf[8];
    long fd = 0;
    unsigned long bufp = (unsigned long)buf, len = sizeof buf;
    void *bad = unmapped();
    const struct syslet_uatom *bad_atom = NULL;
    ptrdiff_t index = 0;

    set_atom(&a[0], SYS_getpid, 0, NULL, &a[1], 0);
    set_atom(&a[1], SYS_read, 0, NULL, &a[2], 3, (unsigned long *)&fd, &bufp, &len);
    set_atom(&a[2], SYS_close, 0, NULL, NULL, 1, (unsigned long *)&fd);
    set_atom(&a[3], 0xFFFFF, 0, NULL, NULL, 0); /* garbage, but unreachable */
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);

    /* Unknown system call number, on atom 1. */
    a[1].nr = 5000;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL, 1, "syslet atom 1");
    CHECK_INVALID(a, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL, 1, "unknown system call number 5000");
    a[1].nr = SYS_read;

    /* A forbidden call. */
    a[2].nr = SYS_execve;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL, 2, "execve cannot run in a syslet");
    a[2].nr = SYS_close;

    /* A missing argument: read with one. */
    a[1].arg_ptr[1] = NULL;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_MISSING_ARGUMENT, 1, "read takes 3 arguments, 1 given");
    a[1].arg_ptr[1] = &bufp;

    /* ASYNC with SYNC; an unknown flag bit. */
    a[2].flags = SYSLET_ASYNC | SYSLET_SYNC;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_ASYNC_AND_SYNC, 2, "SYSLET_ASYNC with SYSLET_SYNC");
    a[2].flags = SYSLET_STOP_ON_ZERO | 0x100;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_BAD_FLAGS, 2, "unknown flag bits 0x100");
    a[2].flags = 0;
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);

    /* A problem reached only through the skip branch: a[2]'s linearly next. */
    a[2].flags = SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP;
    CHECK_INVALID(a, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL, 3, "syslet atom 3");
    a[3].nr = SYS_getpid;
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);
    a[2].flags = 0;

    /* Loops end: a[2] back to a[0]; a[0] onto itself. */
    a[2].next = &a[0];
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);
    a[2].next = NULL;

    /* A next that cannot be read. */
    a[1].next = (struct syslet_uatom *)bad;
    CHECK_EQ(weft_syslet_validate(a, &bad_atom, &index), WEFT_ERR_SYSLET_BAD_ATOM);
    CHECK(bad_atom == (const struct syslet_uatom *)bad);
    CHECK(strstr(weft_syslet_validate_error(), "cannot be read") != NULL);
    CHECK(strstr(weft_syslet_validate_error(), "the next of syslet atom 1") != NULL);
    a[1].next = &a[2];

    /* The first atom itself; NULL. */
    CHECK_EQ(weft_syslet_validate((const struct syslet_uatom *)bad, &bad_atom, &index),
             WEFT_ERR_SYSLET_BAD_ATOM);
    CHECK_EQ(index, 0);
    CHECK_ERR(weft_syslet_validate(NULL, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
              WEFT_ERR_INVALID_ARGUMENT);

    /* An index that is not a whole number of atoms from first. */
    {
        union {
            struct syslet_uatom atoms[3];
            char bytes[3 * sizeof(struct syslet_uatom)];
        } u;
        struct syslet_uatom *odd =
            (struct syslet_uatom *)(u.bytes + sizeof(struct syslet_uatom) + 8);
        set_atom(&u.atoms[0], SYS_getpid, 0, NULL, odd, 0);
        set_atom(odd, 0xFFFFF, 0, NULL, NULL, 0);
        CHECK_EQ(weft_syslet_validate(&u.atoms[0], &bad_atom, &index),
                 WEFT_ERR_SYSLET_UNKNOWN_SYSCALL);
        CHECK(bad_atom == odd);
        CHECK(index == WEFT_SYSLET_NO_INDEX);
    }
}

/* ---- ring overflow ---------------------------------------------------------------- */

static void test_overflow(void) {
    weft_syslet_ctx *c1 = weft_syslet_ctx_new(1);
    struct syslet_uatom a[2][1];
    struct weft_syslet_completion c;
    char buf[2][8];
    int p[2][2], i, seen = 0;
    long n[2];
    unsigned long rfd[2], bufp[2], len = 8;
    uint64_t h[2];

    CHECK(c1 != NULL);
    for (i = 0; i < 2; i++) {
        CHECK_EQ(pipe(p[i]), 0);
        rfd[i] = (unsigned long)p[i][0];
        bufp[i] = (unsigned long)buf[i];
        set_atom(&a[i][0], SYS_read, 0, &n[i], NULL, 3, &rfd[i], &bufp[i], &len);
        CHECK_EQ(weft_syslet_exec(c1, a[i], NULL, &h[i]), 0);
        CHECK(h[i] != 0);
    }
    CHECK(h[0] != h[1]);
    CHECK_EQ(weft_syslet_in_flight(c1), 2);
    CHECK_EQ(write(p[0][1], "a", 1), 1);
    CHECK_EQ(write(p[1][1], "bb", 2), 2);
    CHECK_EQ(async_wait(c1, 2, 10 * SEC), 2);
    CHECK_EQ(weft_syslet_overflowed(c1), 1); /* the second found the ring full */
    for (i = 0; i < 2; i++) {
        CHECK_EQ(weft_syslet_pop(c1, &c), 1);
        if (c.handle == h[0]) {
            CHECK(c.atom == a[0] && c.ret == 1);
            seen |= 1;
        } else {
            CHECK(c.handle == h[1] && c.atom == a[1] && c.ret == 2);
            seen |= 2;
        }
    }
    CHECK_EQ(seen, 3);
    CHECK_EQ(weft_syslet_pop(c1, &c), 0);
    CHECK_EQ(weft_syslet_ctx_free(c1), 0);
    for (i = 0; i < 2; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

/* ---- the seed's server loop ------------------------------------------------------- */

#define CLIENTS 3

static void client(unsigned short port, size_t bytes) {
    char data[1000];
    struct sockaddr_in sa;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(s >= 0 && bytes <= sizeof data);
    memset(data, 'x', sizeof data);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = port;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(write(s, data, bytes), bytes);
    CHECK_EQ(close(s), 0);
}

/* accept -> setsockopt(TCP_NODELAY) -> read while positive (adding up the
 * bytes) -> close -> counter -= 1 -> back to accept while positive.
 * clients_first: the clients connect before the syslet starts (so it may run
 * inline), else after (it goes asynchronous on accept). */
static void server_loop(int clients_first) {
    struct syslet_uatom a[6];
    struct weft_syslet_completion c;
    char buf[64];
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one_int = 1, i, went_async = -1;
    long cfd = -77, n = -77, total = 0, counter = CLIENTS, tmp = 0, nodelay_ret = -77;
    unsigned long lfd_u, zero = 0, level = IPPROTO_TCP, opt = TCP_NODELAY;
    unsigned long optval = (unsigned long)&one_int, optlen = sizeof one_int;
    unsigned long bufp = (unsigned long)buf, len = sizeof buf;
    unsigned long total_addr = (unsigned long)&total, counter_addr = (unsigned long)&counter;
    unsigned long minus_one = (unsigned long)-1L;
    uint64_t h = 0;
    size_t expected = 0;

    CHECK(lfd >= 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(lfd, 16), 0);
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    lfd_u = (unsigned long)lfd;

    set_atom(&a[0], SYS_accept, SYSLET_STOP_ON_NEGATIVE, &cfd, &a[1], 3, &lfd_u, &zero, &zero);
    set_atom(&a[1], SYS_setsockopt, SYSLET_STOP_ON_NEGATIVE, &nodelay_ret, &a[2], 5,
             (unsigned long *)&cfd, &level, &opt, &optval, &optlen);
    /* read: while positive, add to total (a[5]) and read again; at 0 (end of
     * stream) or an error, skip to a[3]. */
    set_atom(&a[2], SYS_read, SYSLET_STOP_ON_NON_POSITIVE | SYSLET_SKIP_TO_NEXT_ON_STOP, &n, &a[5],
             3, (unsigned long *)&cfd, &bufp, &len);
    set_atom(&a[3], SYS_close, 0, NULL, &a[4], 1, (unsigned long *)&cfd);
    set_atom(&a[4], SYS_UMEM_ADD, SYSLET_STOP_ON_NON_POSITIVE, &tmp, &a[0], 2, &counter_addr,
             &minus_one);
    set_atom(&a[5], SYS_UMEM_ADD, 0, NULL, &a[2], 2, &total_addr, (unsigned long *)&n);
    CHECK_EQ(weft_syslet_validate(a, NULL, NULL), 0);

    if (clients_first) {
        for (i = 0; i < CLIENTS; i++) {
            client(sa.sin_port, (size_t)(100 * (i + 1)));
            expected += (size_t)(100 * (i + 1));
        }
        c = run(a, &went_async);
    } else {
        CHECK_EQ(weft_syslet_exec(ctx, a, NULL, &h), 0);
        CHECK(h != 0); /* accept would block */
        went_async = 1;
        for (i = 0; i < CLIENTS; i++) {
            client(sa.sin_port, (size_t)(100 * (i + 1)));
            expected += (size_t)(100 * (i + 1));
        }
        CHECK_EQ(async_wait(ctx, 1, 10 * SEC), 1);
        CHECK_EQ(weft_syslet_pop(ctx, &c), 1);
        CHECK_EQ(c.handle, h);
    }
    CHECK(c.atom == &a[4]); /* ended when the counter reached 0 */
    CHECK_EQ(c.ret, 0);
    CHECK_EQ(counter, 0);
    CHECK_EQ(total, expected);
    CHECK_EQ(nodelay_ret, 0);
    CHECK_EQ(n, 0); /* the last read saw the end of the stream */
    CHECK_EQ(fcntl((int)cfd, F_GETFD), -1); /* the syslet closed it */
    CHECK_EQ(close(lfd), 0);
    printf("server loop (%s): %d clients, %ld bytes, %s\n",
           clients_first ? "clients first" : "clients after", CLIENTS, total,
           went_async ? "asynchronous" : "inline");
}

/* ---- from a green thread ----------------------------------------------------------- */

struct green_pipe {
    int p[2];
};

static void *writer(void *arg) {
    struct green_pipe *g = (struct green_pipe *)arg;
    CHECK_EQ(weft_sleep_ns((uint64_t)MS(30)), 0);
    CHECK_EQ(write(g->p[1], "green", 5), 5);
    return NULL;
}

static void *green_main(void *arg) {
    weft_runtime *rt = (weft_runtime *)arg;
    struct green_pipe g;
    struct syslet_uatom a[1];
    struct weft_syslet_completion c;
    weft_thread *w;
    char buf[8];
    long n = -77;
    unsigned long rfd, bufp = (unsigned long)buf, len = sizeof buf;
    uint64_t h = 0;

    CHECK_EQ(pipe(g.p), 0);
    rfd = (unsigned long)g.p[0];
    set_atom(&a[0], SYS_read, 0, &n, NULL, 3, &rfd, &bufp, &len);
    CHECK(async_exec(ctx, a, &h) == NULL && h != 0);
    /* One worker: the writer runs only if async_wait parks just this green
     * thread. */
    w = weft_spawn(rt, writer, &g);
    CHECK(w != NULL);
    CHECK_EQ(async_wait(ctx, 1, WEFT_SYSLET_TIMEOUT_NEVER), 1);
    CHECK_EQ(weft_syslet_pop(ctx, &c), 1);
    CHECK(c.atom == &a[0] && c.ret == 5 && c.handle == h);
    CHECK(memcmp(buf, "green", 5) == 0);
    CHECK_EQ(weft_thread_join(w, NULL), 0);
    close(g.p[0]);
    close(g.p[1]);
    return (void *)1;
}

static void test_green_thread(void) {
    weft_runtime *rt = weft_runtime_new(1);
    void *result = NULL;
    CHECK(rt != NULL);
    CHECK_EQ(weft_runtime_run(rt, green_main, rt, &result), 0);
    CHECK(result == (void *)1);
    CHECK_EQ(weft_runtime_free(rt), 0);
}

/* ---- NULL arguments ---------------------------------------------------------------- */

static void test_null_arguments(void) {
    struct syslet_uatom a[1];
    struct weft_syslet_completion c;
    uint64_t h = 5;
    set_atom(&a[0], SYS_getpid, 0, NULL, NULL, 0);
    CHECK_ERR(async_exec(NULL, a, &h) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(h, 0);
    h = 5;
    CHECK_ERR(async_exec(ctx, NULL, &h) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(h, 0);
    CHECK(async_exec(ctx, a, NULL) == &a[0]); /* handle is optional */
    CHECK_EQ(weft_syslet_last_ret(), getpid());
    h = 5;
    CHECK_EQ(weft_syslet_exec(NULL, a, &c, &h), WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(weft_syslet_exec(ctx, NULL, &c, &h), WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(weft_syslet_exec(ctx, a, &c, NULL), WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(h, 5); /* untouched on failure */
    CHECK_EQ(weft_syslet_exec(ctx, a, NULL, &h), 0); /* done is optional */
    CHECK_EQ(h, 0);
    CHECK_ERR(async_wait(NULL, 1, 0) == -1, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(async_wait(ctx, 1, -2) == -1, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_EQ(async_wait(ctx, 0, WEFT_SYSLET_TIMEOUT_NEVER), 0); /* nothing to wait for */
    CHECK_ERR(weft_syslet_pop(NULL, &c) == -1, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_syslet_pop(ctx, NULL) == -1, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_syslet_cancel(NULL, 1) == WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_syslet_in_flight(NULL) == 0, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_syslet_ctx_free(NULL) == WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_INVALID_ARGUMENT);
}

int main(void) {
    page = sysconf(_SC_PAGESIZE);
    ctx = weft_syslet_ctx_new(64);
    CHECK(ctx != NULL);
    test_names_and_contexts();
    test_open_read_close();
    test_failing_open();
    test_skip_branch();
    test_countdown();
    test_async_pipe();
    test_cancel();
    test_no_complete();
    test_efault();
    test_validate();
    test_overflow();
    server_loop(0);
    server_loop(1);
    test_green_thread();
    test_null_arguments();
    CHECK_EQ(weft_syslet_in_flight(ctx), 0);
    CHECK_EQ(weft_syslet_ctx_free(ctx), 0);
    TEST_PASS("syslet");
    return 0;
}
