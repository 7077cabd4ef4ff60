/* Green threads and synchronous IPC from C (weft/runtime.h, weft/ipc.h):
 * a server green thread answering calls from clients on both workers, the
 * payload round trip and its ownership, zero and finite timeouts, unknown
 * ids, invalid partners, calls from a plain OS thread, cancellation, a
 * partner that dies, NULL arguments, and a shutdown that ends a blocked
 * receive. */
#include "check.h"

#include <weft/ipc.h>
#include <weft/runtime.h>

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#define NEVER WEFT_IPC_TIMEOUT_NEVER
#define ZERO WEFT_IPC_TIMEOUT_ZERO
#define MS(n) ((int64_t)(n) * 1000000)
#define CALLS 1000
#define PAYLOAD 4096

/* Checks an IPC result: the code returned, the same code as GetLastError(),
 * and the stage. */
#define CHECK_IPC_FAIL(expr, code, stage)                                  \
    do {                                                                   \
        uint32_t rc_ = (expr);                                             \
        CHECK_EQ(rc_, (code));                                             \
        CHECK_EQ(GetLastError(), (code));                                  \
        CHECK_EQ(weft_ipc_error_stage(), (stage));                         \
    } while (0)

static weft_runtime *rt;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the server ------------------------------------------------------------ */

/* Answers every call: words[0] + 1, the payload's length, the caller's id as
 * the server saw it, the server's own id; and the payload reversed. */
struct server {
    atomic_int done;
    uint32_t last_rc;
    int last_stage;
    uint64_t reply_failures;
};

static void *server_fn(void *arg) {
    struct server *s = (struct server *)arg;
    uint64_t client = 0, served = 0;
    struct weft_ipc_msg req = WEFT_IPC_MSG_INIT;
    unsigned char *buf = NULL;
    uint32_t rc = weft_ipc_receive(0, NEVER, &client, &req);
    while (rc == 0) {
        struct weft_ipc_msg rep = WEFT_IPC_MSG_INIT;
        served++;
        CHECK(client != 0);
        rep.words[0] = req.words[0] + 1;
        rep.words[1] = req.payload_len;
        rep.words[2] = client;
        rep.words[3] = weft_ipc_self();
        /* The previous reply's buffer was copied when it was sent: it is
         * still ours, to free now. */
        free(buf);
        buf = NULL;
        if (req.payload != NULL) {
            const unsigned char *in = (const unsigned char *)req.payload;
            size_t i, n = req.payload_len;
            CHECK(n > 0);
            buf = (unsigned char *)malloc(n);
            CHECK(buf != NULL);
            for (i = 0; i < n; i++)
                buf[i] = in[n - 1 - i];
            rep.payload = buf;
            rep.payload_len = n;
        }
        weft_ipc_payload_free(&req);
        CHECK(req.payload == NULL && req.payload_len == 0);
        rc = weft_ipc_reply_and_wait(client, &rep, NEVER, &client, &req);
        if (rc != 0 && weft_ipc_error_stage() == WEFT_IPC_STAGE_SEND) {
            /* The reply did not reach the client: serve the next one. */
            s->reply_failures++;
            rc = weft_ipc_receive(0, NEVER, &client, &req);
        }
    }
    free(buf);
    s->last_rc = rc;
    s->last_stage = weft_ipc_error_stage();
    atomic_store(&s->done, 1);
    return (void *)(uintptr_t)served;
}

/* ---- clients ----------------------------------------------------------------- */

struct client {
    uint64_t server;
    uint64_t salt;
};

static void *client_fn(void *arg) {
    struct client *c = (struct client *)arg;
    uint64_t me = weft_ipc_self(), i;
    CHECK(me != 0);
    for (i = 0; i < CALLS; i++) {
        struct weft_ipc_msg m = WEFT_IPC_MSG_INIT, r;
        m.words[0] = c->salt * 1000000 + i;
        CHECK_EQ(weft_ipc_call(c->server, &m, &r, NEVER), 0);
        CHECK_EQ(r.words[0], m.words[0] + 1);
        CHECK_EQ(r.words[1], 0);
        CHECK_EQ(r.words[2], me);
        CHECK_EQ(r.words[3], c->server);
        CHECK(r.payload == NULL && r.payload_len == 0);
    }
    return (void *)(uintptr_t)CALLS;
}

/* A call with a payload: it comes back reversed, in a buffer the caller
 * frees with weft_ipc_payload_free; the caller's own buffer is untouched. */
static void *payload_client_fn(void *arg) {
    struct client *c = (struct client *)arg;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT, r;
    unsigned char *p = (unsigned char *)malloc(PAYLOAD);
    size_t i;
    CHECK(p != NULL);
    for (i = 0; i < PAYLOAD; i++)
        p[i] = (unsigned char)(i * 31 + c->salt);
    m.words[0] = 77;
    m.payload = p;
    m.payload_len = PAYLOAD;
    CHECK_EQ(weft_ipc_call(c->server, &m, &r, NEVER), 0);
    CHECK_EQ(r.words[0], 78);
    CHECK_EQ(r.words[1], PAYLOAD);
    CHECK(r.payload != NULL && r.payload != (void *)p);
    CHECK_EQ(r.payload_len, PAYLOAD);
    for (i = 0; i < PAYLOAD; i++) {
        CHECK_EQ(((unsigned char *)r.payload)[i], p[PAYLOAD - 1 - i]);
        CHECK_EQ(p[i], (unsigned char)(i * 31 + c->salt));
    }
    weft_ipc_payload_free(&r);
    CHECK(r.payload == NULL && r.payload_len == 0);
    weft_ipc_payload_free(&r); /* cleared: a no-op */
    weft_ipc_payload_free(NULL);

    /* An empty payload arrives as none. */
    m.payload = p;
    m.payload_len = 0;
    CHECK_EQ(weft_ipc_call(c->server, &m, &r, NEVER), 0);
    CHECK_EQ(r.words[1], 0);
    CHECK(r.payload == NULL && r.payload_len == 0);

    /* The same buffer can be sent again: it was only read. */
    m.payload_len = 16;
    CHECK_EQ(weft_ipc_call(c->server, &m, &r, NEVER), 0);
    CHECK_EQ(r.words[1], 16);
    CHECK_EQ(r.payload_len, 16);
    CHECK_EQ(((unsigned char *)r.payload)[0], p[15]);
    weft_ipc_payload_free(&r);
    free(p);
    return (void *)(uintptr_t)3;
}

/* ---- small helpers -------------------------------------------------------------- */

/* Receives once from `from` only (sender NULL: not asked); returns words[0]. */
struct gate {
    uint64_t from;
    uint32_t rc;
};

static void *gate_fn(void *arg) {
    struct gate *g = (struct gate *)arg;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    g->rc = weft_ipc_receive(g->from, NEVER, NULL, &m);
    return (void *)(uintptr_t)m.words[0];
}

/* Sends one message with timeout zero to the thread in *arg; returns the code. */
static void *zero_sender_fn(void *arg) {
    uint64_t dest = *(uint64_t *)arg;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    unsigned char bytes[3] = {1, 2, 3};
    uint32_t rc;
    m.words[0] = 5;
    m.payload = bytes;
    m.payload_len = sizeof bytes;
    rc = weft_ipc_send(dest, &m, ZERO);
    if (rc != 0) {
        CHECK_EQ(GetLastError(), rc);
        CHECK_EQ(weft_ipc_error_stage(), WEFT_IPC_STAGE_SEND);
        /* Nothing lost: the message is still the caller's, as it was. */
        CHECK(m.payload == bytes && m.payload_len == 3 && bytes[2] == 3 && m.words[0] == 5);
    }
    return (void *)(uintptr_t)rc;
}

/* Blocks in a receive until cancelled; returns the code. */
struct waiter {
    atomic_int done;
    int stage;
};

static void *waiter_fn(void *arg) {
    struct waiter *w = (struct waiter *)arg;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    uint32_t rc = weft_ipc_receive(0, NEVER, NULL, &m);
    w->stage = weft_ipc_error_stage();
    atomic_store(&w->done, 1);
    return (void *)(uintptr_t)rc;
}

/* Cancels `tid` until the flag says its operation has ended (a cancel that
 * arrives before the thread blocks is not remembered). */
static void cancel_until(uint64_t tid, atomic_int *done) {
    while (!atomic_load(done)) {
        CHECK_EQ(weft_ipc_cancel(tid), 0);
        CHECK_EQ(weft_sleep_ns(1000000), 0);
    }
}

/* Receives one request and ends without replying. */
static void *one_shot_fn(void *arg) {
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    (void)arg;
    CHECK_EQ(weft_ipc_receive(0, NEVER, NULL, &m), 0);
    return (void *)(uintptr_t)m.words[0];
}

static void *join_result(weft_thread *t) {
    void *r = (void *)1;
    CHECK_EQ(weft_thread_join(t, &r), 0);
    return r;
}

/* ---- the green main -------------------------------------------------------------- */

static void *green_main(void *arg) {
    uint64_t me = weft_ipc_self(), server_id, dead_id;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT, r = WEFT_IPC_MSG_INIT;
    struct server srv;
    struct client clients[4], pc[2];
    weft_thread *server, *ct[4], *pt[2];
    int64_t t0;
    unsigned w;
    int i;

    CHECK(arg == (void *)&rt);
    CHECK(me != 0);

    /* Bad arguments. */
    m.payload = NULL;
    m.payload_len = 5;
    CHECK_IPC_FAIL(weft_ipc_send(me, &m, NEVER), WEFT_ERR_INVALID_ARGUMENT, WEFT_IPC_STAGE_NONE);
    m.payload_len = 0;
    CHECK_IPC_FAIL(weft_ipc_send(me, &m, -2), WEFT_ERR_INVALID_ARGUMENT, WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_send(me, NULL, NEVER), WEFT_ERR_INVALID_ARGUMENT, WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_receive(0, NEVER, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_call(me, &m, NULL, NEVER), WEFT_ERR_INVALID_ARGUMENT,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_call(me, NULL, &r, NEVER), WEFT_ERR_INVALID_ARGUMENT,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_reply_and_wait(me, NULL, NEVER, NULL, &r), WEFT_ERR_INVALID_ARGUMENT,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_reply_and_wait(me, &m, NEVER, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
                   WEFT_IPC_STAGE_NONE);

    /* Unknown ids, and the caller itself. */
    CHECK_IPC_FAIL(weft_ipc_call(UINT64_C(0xDEAD0000BEEF), &m, &r, NEVER),
                   WEFT_ERR_NO_SUCH_THREAD, WEFT_IPC_STAGE_SEND);
    CHECK_IPC_FAIL(weft_ipc_send(0, &m, ZERO), WEFT_ERR_NO_SUCH_THREAD, WEFT_IPC_STAGE_SEND);
    CHECK_IPC_FAIL(weft_ipc_receive(UINT64_C(0xDEAD0000BEEF), ZERO, NULL, &r),
                   WEFT_ERR_NO_SUCH_THREAD, WEFT_IPC_STAGE_RECEIVE);
    CHECK_IPC_FAIL(weft_ipc_reply_and_wait(UINT64_C(0xDEAD0000BEEF), &m, ZERO, NULL, &r),
                   WEFT_ERR_NO_SUCH_THREAD, WEFT_IPC_STAGE_SEND);
    CHECK_EQ(weft_ipc_cancel(UINT64_C(0xDEAD0000BEEF)), WEFT_ERR_NO_SUCH_THREAD);
    CHECK_IPC_FAIL(weft_ipc_call(me, &m, &r, NEVER), WEFT_ERR_INVALID_PARTNER, WEFT_IPC_STAGE_SEND);
    CHECK_IPC_FAIL(weft_ipc_receive(me, NEVER, NULL, &r), WEFT_ERR_INVALID_PARTNER,
                   WEFT_IPC_STAGE_RECEIVE);
    CHECK(r.payload == NULL && r.words[0] == 0); /* out parameters untouched */

    /* A finite timeout, and zero, with nobody sending. */
    t0 = now_ns();
    CHECK_IPC_FAIL(weft_ipc_receive(0, MS(20), NULL, &r), WEFT_ERR_TIMED_OUT,
                   WEFT_IPC_STAGE_RECEIVE);
    CHECK(now_ns() - t0 >= MS(20));
    CHECK_IPC_FAIL(weft_ipc_receive(0, ZERO, NULL, &r), WEFT_ERR_TIMED_OUT, WEFT_IPC_STAGE_RECEIVE);

    /* Freeing the runtime from inside it is refused (and frees nothing). */
    CHECK_EQ(weft_runtime_free(rt), WEFT_ERR_WRONG_THREAD);
    CHECK_EQ(GetLastError(), WEFT_ERR_WRONG_THREAD);
    CHECK_EQ(weft_runtime_workers(rt), 2);

    /* A server on worker 0, clients on both workers. */
    memset(&srv, 0, sizeof srv);
    server = weft_spawn_on(rt, 0, server_fn, &srv);
    CHECK(server != NULL);
    server_id = weft_thread_id(server);
    CHECK(server_id != 0 && server_id != me);
    CHECK_EQ(weft_thread_id(server), server_id);
    for (i = 0; i < 4; i++) {
        clients[i].server = server_id;
        clients[i].salt = (uint64_t)i + 1;
        ct[i] = weft_spawn_on(rt, (unsigned)(i % 2), client_fn, &clients[i]);
        CHECK(ct[i] != NULL);
    }
    for (i = 0; i < 2; i++) {
        pc[i].server = server_id;
        pc[i].salt = (uint64_t)i + 11;
        pt[i] = weft_spawn_on(rt, (unsigned)i, payload_client_fn, &pc[i]);
        CHECK(pt[i] != NULL);
    }
    /* And this thread, wherever it runs, with a finite timeout (long: it must not
     * expire on a busy machine). */
    m.words[0] = 1000;
    CHECK_EQ(weft_ipc_call(server_id, &m, &r, MS(60000)), 0);
    CHECK_EQ(r.words[0], 1001);
    CHECK_EQ(r.words[2], me);
    for (i = 0; i < 4; i++)
        CHECK_EQ((uintptr_t)join_result(ct[i]), CALLS);
    for (i = 0; i < 2; i++)
        CHECK_EQ((uintptr_t)join_result(pt[i]), 3);

    /* Zero timeout, on each worker: fails while the receiver does not accept
     * this sender, succeeds once it waits for it. */
    for (w = 0; w < 2; w++) {
        struct gate g;
        weft_thread *gt, *zt;
        uint64_t gid;
        int64_t since;
        uint32_t rc;
        g.from = me;
        g.rc = 1;
        gt = weft_spawn_on(rt, w, gate_fn, &g);
        CHECK(gt != NULL);
        gid = weft_thread_id(gt);
        /* A third thread's zero-timeout send: the gate accepts only `me`. */
        zt = weft_spawn_on(rt, 1 - w, zero_sender_fn, &gid);
        CHECK(zt != NULL);
        CHECK_EQ((uintptr_t)join_result(zt), WEFT_ERR_TIMED_OUT);
        m.words[0] = 4242 + w;
        /* Until the gate waits (however long a busy machine keeps it from getting
         * there; the ceiling only stops a hang). */
        since = now_ns();
        while ((rc = weft_ipc_send(gid, &m, ZERO)) != 0) {
            CHECK_EQ(rc, WEFT_ERR_TIMED_OUT);
            CHECK_EQ(weft_ipc_error_stage(), WEFT_IPC_STAGE_SEND);
            CHECK(now_ns() - since < MS(60000));
            CHECK_EQ(weft_sleep_ns(100000), 0);
        }
        CHECK_EQ((uintptr_t)join_result(gt), 4242 + w);
        CHECK_EQ(g.rc, 0);
    }

    /* Cancel, on each worker. */
    for (w = 0; w < 2; w++) {
        struct waiter wt;
        weft_thread *h;
        atomic_init(&wt.done, 0);
        wt.stage = -1;
        h = weft_spawn_on(rt, w, waiter_fn, &wt);
        CHECK(h != NULL);
        cancel_until(weft_thread_id(h), &wt.done);
        CHECK_EQ((uintptr_t)join_result(h), WEFT_ERR_CANCELLED);
        CHECK_EQ(wt.stage, WEFT_IPC_STAGE_RECEIVE);
    }

    /* A server that ends without replying: partner dead, at the receive stage
     * (the request was delivered); then at the send stage; then, once its
     * handle is gone, the id is unknown. */
    for (w = 0; w < 2; w++) {
        weft_thread *h = weft_spawn_on(rt, w, one_shot_fn, NULL);
        CHECK(h != NULL);
        dead_id = weft_thread_id(h);
        m.words[0] = 99;
        CHECK_IPC_FAIL(weft_ipc_call(dead_id, &m, &r, NEVER), WEFT_ERR_PARTNER_DEAD,
                       WEFT_IPC_STAGE_RECEIVE);
        CHECK_IPC_FAIL(weft_ipc_send(dead_id, &m, NEVER), WEFT_ERR_PARTNER_DEAD,
                       WEFT_IPC_STAGE_SEND);
        CHECK_EQ((uintptr_t)join_result(h), 99);
        /* The ended thread's worker gives its identity back just after the join
         * completes: until then a send finds the partner dead, and then, for good,
         * no such thread. Not before, and eventually (a 60 s ceiling). */
        {
            int64_t give_up = now_ns() + 60 * (int64_t)1000000000;
            uint32_t rc;
            while ((rc = weft_ipc_send(dead_id, &m, NEVER)) == WEFT_ERR_PARTNER_DEAD) {
                CHECK_EQ(weft_ipc_error_stage(), WEFT_IPC_STAGE_SEND);
                CHECK(now_ns() < give_up);
                usleep(1000);
            }
            CHECK_EQ(rc, WEFT_ERR_NO_SUCH_THREAD);
            CHECK_IPC_FAIL(weft_ipc_send(dead_id, &m, NEVER), WEFT_ERR_NO_SUCH_THREAD,
                           WEFT_IPC_STAGE_SEND);
        }
    }

    /* Stop the server: cancel its wait. */
    cancel_until(server_id, &srv.done);
    CHECK_EQ((uintptr_t)join_result(server), 4 * CALLS + 2 * 3 + 1);
    CHECK_EQ(srv.last_rc, WEFT_ERR_CANCELLED);
    CHECK_EQ(srv.last_stage, WEFT_IPC_STAGE_RECEIVE);
    CHECK_EQ(srv.reply_failures, 0);
    return (void *)0x1234;
}

/* ---- shutdown ends a blocked receive --------------------------------------------- */

struct blocked {
    atomic_int started;
    uint32_t rc1, rc2, rc3;
};

static void *blocked_fn(void *arg) {
    struct blocked *b = (struct blocked *)arg;
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    atomic_store(&b->started, 1);
    b->rc1 = weft_ipc_receive(0, NEVER, NULL, &m);
    /* Every later blocking call fails at once: the thread must return. */
    b->rc2 = weft_ipc_receive(0, NEVER, NULL, &m);
    b->rc3 = weft_yield();
    return (void *)0x5;
}

/* Runs on the worker only once blocked_fn has given it up: blocked in its receive. */
static void *probe_fn(void *arg) {
    atomic_store((atomic_int *)arg, 1);
    return NULL;
}

static void shutdown_test(void) {
    struct blocked b;
    atomic_int probed;
    weft_runtime *r2 = weft_runtime_new(1);
    weft_thread *h, *p;
    CHECK(r2 != NULL);
    CHECK_EQ(weft_runtime_workers(r2), 1);
    atomic_init(&b.started, 0);
    atomic_init(&probed, 0);
    b.rc1 = b.rc2 = b.rc3 = 1;
    h = weft_spawn(r2, blocked_fn, &b);
    CHECK(h != NULL);
    while (!atomic_load(&b.started))
        usleep(1000);
    /* One worker: a green thread spawned now runs when blocked_fn parks in its receive. */
    p = weft_spawn(r2, probe_fn, &probed);
    CHECK(p != NULL);
    while (!atomic_load(&probed))
        usleep(1000);
    CHECK(join_result(p) == NULL);
    CHECK_EQ(weft_runtime_free(r2), 0);
    CHECK_EQ(b.rc1, WEFT_ERR_SHUTDOWN);
    CHECK_EQ(b.rc2, WEFT_ERR_SHUTDOWN);
    CHECK_EQ(b.rc3, WEFT_ERR_SHUTDOWN);
    CHECK_EQ((uintptr_t)join_result(h), 0x5);
}

/* ---- the plain main thread ----------------------------------------------------- */

static void *nothing_fn(void *arg) { return arg; }

int main(void) {
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT, r = WEFT_IPC_MSG_INIT;
    const uint32_t codes[] = {
        WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_SHUTDOWN,
        WEFT_ERR_WRONG_THREAD,     WEFT_ERR_SYSTEM,           WEFT_ERR_INTERNAL,
        WEFT_ERR_TIMED_OUT,        WEFT_ERR_CANCELLED,        WEFT_ERR_PARTNER_DEAD,
        WEFT_ERR_NO_SUCH_THREAD,   WEFT_ERR_INVALID_PARTNER,
    };
    size_t i, j, n = sizeof codes / sizeof codes[0];
    void *result = NULL;
    weft_thread *t;

    /* Every code is distinct, and explained. */
    for (i = 0; i < n; i++) {
        const char *msg = weft_error_message(codes[i]);
        CHECK(codes[i] != 0);
        CHECK(msg != NULL && strcmp(msg, weft_error_message(0xFFFFFFF0u)) != 0);
        for (j = 0; j < i; j++) {
            CHECK(codes[i] != codes[j]);
            CHECK(strcmp(msg, weft_error_message(codes[j])) != 0);
        }
    }
    CHECK(strstr(weft_error_message(WEFT_ERR_NOT_GREEN_THREAD), "green thread") != NULL);

    /* IPC from a plain OS thread. */
    CHECK_EQ(weft_ipc_self(), 0);
    CHECK_EQ(GetLastError(), WEFT_ERR_NOT_GREEN_THREAD);
    CHECK_IPC_FAIL(weft_ipc_send(UINT64_C(0xDEAD0000BEEF), &m, NEVER), WEFT_ERR_NOT_GREEN_THREAD,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_receive(0, NEVER, NULL, &r), WEFT_ERR_NOT_GREEN_THREAD,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_call(1, &m, &r, NEVER), WEFT_ERR_NOT_GREEN_THREAD,
                   WEFT_IPC_STAGE_NONE);
    CHECK_IPC_FAIL(weft_ipc_reply_and_wait(1, &m, NEVER, NULL, &r), WEFT_ERR_NOT_GREEN_THREAD,
                   WEFT_IPC_STAGE_NONE);

    /* NULL arguments of the runtime API. */
    CHECK_ERR(weft_spawn(NULL, nothing_fn, NULL) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_runtime_run(NULL, nothing_fn, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
              WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_thread_join(NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_thread_id(NULL) == 0, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_runtime_free(NULL) == WEFT_ERR_INVALID_ARGUMENT, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_runtime_workers(NULL) == 0, WEFT_ERR_INVALID_ARGUMENT);
    weft_thread_detach(NULL);
    CHECK_ERR(weft_spawn_named(NULL, "n", nothing_fn, NULL) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    /* Naming needs a green thread (or fiber): this is a plain thread. */
    CHECK_ERR(weft_thread_set_name("n") == WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_NOT_GREEN_THREAD);

    rt = weft_runtime_new(2);
    CHECK(rt != NULL);
    CHECK_EQ(weft_runtime_workers(rt), 2);
    CHECK_ERR(weft_spawn(rt, NULL, NULL) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_spawn_on(rt, 2, nothing_fn, NULL) == NULL, WEFT_ERR_INVALID_ARGUMENT);
    CHECK_ERR(weft_runtime_run(rt, NULL, NULL, NULL) == WEFT_ERR_INVALID_ARGUMENT,
              WEFT_ERR_INVALID_ARGUMENT);

    /* Spawn and join from the plain thread; detach. */
    t = weft_spawn_on(rt, 1, nothing_fn, (void *)0x77);
    CHECK(t != NULL);
    CHECK(weft_thread_id(t) != 0);
    CHECK(join_result(t) == (void *)0x77);
    t = weft_spawn(rt, nothing_fn, NULL);
    CHECK(t != NULL);
    weft_thread_detach(t);
    t = weft_spawn_named(rt, NULL, nothing_fn, (void *)0x78);
    CHECK(t != NULL);
    CHECK(join_result(t) == (void *)0x78);

    CHECK_EQ(weft_runtime_run(rt, green_main, &rt, &result), 0);
    CHECK(result == (void *)0x1234);
    CHECK_EQ(weft_runtime_run(rt, nothing_fn, (void *)0x99, NULL), 0);
    CHECK_EQ(weft_runtime_free(rt), 0);

    shutdown_test();

    TEST_PASS("runtime_ipc");
    return 0;
}
