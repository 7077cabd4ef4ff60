/*
 * An echo server written with plain accept(), read() and write(), one green thread
 * per connection (include/weft/runtime.h), on a runtime of two workers.  Linked with
 * -lweft-hook (or run with LD_PRELOAD=libweft-hook.so), each blocking call parks
 * only its green thread: the server holds every connection at once.  Without the
 * layer the first idle connection would block a worker.
 *
 * Usage: hook_echo N.  Prints "port P" once it listens on 127.0.0.1:P, accepts N
 * connections, echoes each until its end of stream, then prints the most
 * connections it held at once and "all checks passed".  The client (the test
 * harness, crates/libweft-hook/tests/c_hook.rs) checks every byte.
 */
#include <weft/runtime.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static weft_runtime *rt;
static int listener;
static int conns;
static atomic_int live, most;
static atomic_long echoed;

static void *connection(void *arg)
{
    int fd = (int)(intptr_t)arg;
    int now = atomic_fetch_add(&live, 1) + 1;
    int m = atomic_load(&most);
    while (now > m && !atomic_compare_exchange_weak(&most, &m, now))
        ;
    char buf[4096];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r == 0)
            break;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            perror("read");
            exit(1);
        }
        for (ssize_t off = 0; off < r;) {
            ssize_t w = write(fd, buf + off, (size_t)(r - off));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                perror("write");
                exit(1);
            }
            off += w;
        }
        atomic_fetch_add(&echoed, r);
    }
    close(fd);
    atomic_fetch_sub(&live, 1);
    return NULL;
}

static void *acceptor(void *arg)
{
    (void)arg;
    weft_thread **threads = calloc((size_t)conns, sizeof *threads);
    if (!threads) {
        perror("calloc");
        exit(1);
    }
    for (int i = 0; i < conns; i++) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) {
            perror("accept");
            exit(1);
        }
        threads[i] = weft_spawn(rt, connection, (void *)(intptr_t)fd);
        if (!threads[i]) {
            fprintf(stderr, "weft_spawn: %s\n", weft_error_message(GetLastError()));
            exit(1);
        }
    }
    for (int i = 0; i < conns; i++)
        weft_thread_join(threads[i], NULL);
    free(threads);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hook_echo N\n");
        return 2;
    }
    conns = atoi(argv[1]);
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t want = (rlim_t)conns + 256;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(listener, 65535) != 0 || getsockname(listener, (struct sockaddr *)&a, &len) != 0) {
        perror("listen");
        return 1;
    }
    printf("port %d\n", ntohs(a.sin_port));
    fflush(stdout);
    rt = weft_runtime_new(2);
    if (!rt) {
        fprintf(stderr, "weft_runtime_new: %s\n", weft_error_message(GetLastError()));
        return 1;
    }
    if (weft_runtime_run(rt, acceptor, NULL, NULL) != 0) {
        fprintf(stderr, "weft_runtime_run: %s\n", weft_error_message(GetLastError()));
        return 1;
    }
    weft_runtime_free(rt);
    printf("most %d live %d echoed %ld\n", atomic_load(&most), atomic_load(&live),
           atomic_load(&echoed));
    printf("all checks passed\n");
    return 0;
}
