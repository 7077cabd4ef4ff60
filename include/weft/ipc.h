/*
 * weft/ipc.h - synchronous IPC between green threads (L4-style).
 *
 * Green threads (weft/runtime.h) send each other small messages: four
 * 64-bit words plus an optional payload of bytes.  Nothing is buffered: a
 * message moves only when the receiver is in a receive that accepts the
 * sender (a rendezvous).  This is the C face of the Rust module
 * weft_runtime::ipc; its documentation has the full semantics.
 *
 *     // A server: answers every request with words[0] + 1.
 *     static void *server(void *arg) {
 *         uint64_t client;
 *         struct weft_ipc_msg req = WEFT_IPC_MSG_INIT, rep = WEFT_IPC_MSG_INIT;
 *         uint32_t rc = weft_ipc_receive(0, WEFT_IPC_TIMEOUT_NEVER, &client, &req);
 *         while (rc == 0) {
 *             rep.words[0] = req.words[0] + 1;
 *             weft_ipc_payload_free(&req);
 *             rc = weft_ipc_reply_and_wait(client, &rep, WEFT_IPC_TIMEOUT_NEVER,
 *                                          &client, &req);
 *             if (rc != 0 && weft_ipc_error_stage() == WEFT_IPC_STAGE_SEND)
 *                 // the client gave up: serve the next one
 *                 rc = weft_ipc_receive(0, WEFT_IPC_TIMEOUT_NEVER, &client, &req);
 *         }
 *         return NULL; // cancelled (weft_ipc_cancel) or shut down
 *     }
 *
 *     // A client, in another green thread:
 *     struct weft_ipc_msg m = WEFT_IPC_MSG_INIT, r;
 *     m.words[0] = 41;
 *     if (weft_ipc_call(server_id, &m, &r, WEFT_IPC_TIMEOUT_NEVER) == 0)
 *         assert(r.words[0] == 42);
 *
 * Semantics
 * ---------
 *   - Thread ids.  A green thread's id is a nonzero uint64_t: weft_ipc_self()
 *     in the thread, weft_thread_id() of its handle, or the sender id a
 *     receive reports.  An id stays usable while the thread runs and while a
 *     handle of it exists; IPC to a thread that has ended fails with
 *     WEFT_ERR_PARTNER_DEAD, or WEFT_ERR_NO_SUCH_THREAD once nothing refers to
 *     it any more (as for an id that never existed).
 *   - Only green threads do IPC: from a plain OS thread every operation fails
 *     with WEFT_ERR_NOT_GREEN_THREAD (weft_ipc_cancel excepted).  The function
 *     given to weft_runtime_run() runs as a green thread.
 *   - Timeouts are signed nanoseconds: WEFT_IPC_TIMEOUT_ZERO (0) fails at once
 *     with WEFT_ERR_TIMED_OUT unless the partner is ready, a positive value
 *     fails after that long, WEFT_IPC_TIMEOUT_NEVER (-1) waits; other negative
 *     values are WEFT_ERR_INVALID_ARGUMENT.  For weft_ipc_call a positive
 *     timeout bounds the whole call, and ZERO applies to the send only ("fail
 *     unless the server is waiting now; then wait for its reply").
 *   - A call is atomic from send to receive: the caller is receiving from the
 *     server from the moment its request is delivered, so a reply (which
 *     reply_and_wait sends with timeout zero) always finds the caller waiting.
 *   - Two stages.  send is one stage (SEND), receive one (RECEIVE); call and
 *     reply_and_wait have both, SEND first.  After a failure,
 *     weft_ipc_error_stage() tells which failed: at the SEND stage the message
 *     was not delivered (the partner never saw it); at the RECEIVE stage of a
 *     call, the request was delivered but no reply came.
 *   - Same behaviour whether the partner is on the same worker or another.
 *
 * Messages and payload ownership
 * ------------------------------
 *   - Sending copies the payload: the library reads payload_len bytes at
 *     payload during the call, and the caller's buffer stays the caller's
 *     (to reuse or free as it likes, whether the send succeeded or failed: on
 *     a failed send nothing is lost, the caller still has its message).
 *   - A received message's payload belongs to the receiver: a buffer
 *     allocated by weft (the sender's copy, not copied again), which the
 *     receiver must release with weft_ipc_payload_free(&msg) (not free()).
 *     An empty payload is received as payload NULL, payload_len 0.
 *   - On failure, out parameters are left untouched.
 *
 * Errors
 * ------
 * Each function returns 0 on success or one of the codes below (and the
 * WEFT_ERR_* codes of weft/runtime.h it lists), also set as GetLastError()
 * on failure; weft_error_message(code) explains each one.  The return value
 * is the reliable one (GetLastError() is per OS thread; read it at once).
 *
 * Link with -lweft.
 */
#ifndef WEFT_IPC_H
#define WEFT_IPC_H

#include <stddef.h>
#include <stdint.h>

#include <weft/runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Error codes (see also weft/runtime.h) ------------------------------- */

/* The timeout passed; with WEFT_IPC_TIMEOUT_ZERO: the partner was not ready
 * (not waiting to receive from this sender, or no sender waiting). */
#define WEFT_ERR_TIMED_OUT 0x20000101u
/* Another thread cancelled the operation with weft_ipc_cancel(). */
#define WEFT_ERR_CANCELLED 0x20000102u
/* The partner has ended (before the operation, or while it waited). */
#define WEFT_ERR_PARTNER_DEAD 0x20000103u
/* No green thread has this id (never had, or it has ended and nothing refers
 * to it any more). */
#define WEFT_ERR_NO_SUCH_THREAD 0x20000104u
/* The partner cannot be used: the calling thread itself, or a thread of
 * another runtime. */
#define WEFT_ERR_INVALID_PARTNER 0x20000105u

/* ---- Timeouts (int64_t nanoseconds) --------------------------------------- */

#define WEFT_IPC_TIMEOUT_ZERO ((int64_t)0)
#define WEFT_IPC_TIMEOUT_NEVER ((int64_t)-1)

/* ---- Stages (weft_ipc_error_stage) ---------------------------------------- */

/* Nothing was attempted (bad arguments, not a green thread, shutdown, a
 * failed weft_ipc_cancel), or no IPC call has failed yet on this thread. */
#define WEFT_IPC_STAGE_NONE 0
/* The send failed: the message was not delivered. */
#define WEFT_IPC_STAGE_SEND 1
/* The receive failed (for a call: the request was delivered, no reply came). */
#define WEFT_IPC_STAGE_RECEIVE 2

/* ---- Messages -------------------------------------------------------------- */

/* One message (48 bytes; same layout as the Rust struct weft::WeftIpcMsg). */
struct weft_ipc_msg {
    uint64_t words[4];  /* inline words, always transferred */
    void *payload;      /* NULL: no payload; see "payload ownership" above */
    size_t payload_len; /* bytes at payload; must be 0 when payload is NULL */
};

/* An empty message, to initialise a struct weft_ipc_msg. */
#define WEFT_IPC_MSG_INIT { { 0, 0, 0, 0 }, NULL, 0 }

/* Releases the payload of a message filled in by weft (a receive, a call's
 * reply): frees msg->payload (which must still be the pointer and length
 * weft stored) and sets payload to NULL and payload_len to 0.  No effect if
 * msg or msg->payload is NULL.  Never pass a message whose payload is a
 * buffer of your own. */
void weft_ipc_payload_free(struct weft_ipc_msg *msg);

/* ---- Identity -------------------------------------------------------------- */

/* The calling green thread's id, or 0 (with WEFT_ERR_NOT_GREEN_THREAD) from a
 * plain OS thread. */
uint64_t weft_ipc_self(void);

/* ---- Operations ------------------------------------------------------------- */

/* Sends *msg to thread `dest`: returns once `dest` has received it.
 * Errors: WEFT_ERR_INVALID_ARGUMENT (msg NULL, bad timeout, payload NULL
 * with a nonzero length), WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_NO_SUCH_THREAD,
 * WEFT_ERR_INVALID_PARTNER, WEFT_ERR_TIMED_OUT, WEFT_ERR_CANCELLED,
 * WEFT_ERR_PARTNER_DEAD, WEFT_ERR_SHUTDOWN. */
uint32_t weft_ipc_send(uint64_t dest, const struct weft_ipc_msg *msg, int64_t timeout_ns);

/* Receives a message from thread `from` (0: from any thread) into *msg, and
 * the sender's id into *sender (sender may be NULL).
 * Errors: WEFT_ERR_INVALID_ARGUMENT (msg NULL, bad timeout),
 * WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_NO_SUCH_THREAD (from),
 * WEFT_ERR_INVALID_PARTNER (from is the caller), WEFT_ERR_TIMED_OUT,
 * WEFT_ERR_CANCELLED, WEFT_ERR_PARTNER_DEAD (from ended), WEFT_ERR_SHUTDOWN. */
uint32_t weft_ipc_receive(uint64_t from, int64_t timeout_ns, uint64_t *sender,
                          struct weft_ipc_msg *msg);

/* Sends *msg to `dest` and waits for its reply (dest's next send to the
 * caller, typically by weft_ipc_reply_and_wait), stored in *reply.
 * Errors: as weft_ipc_send (msg or reply NULL: WEFT_ERR_INVALID_ARGUMENT);
 * at the RECEIVE stage: WEFT_ERR_TIMED_OUT, WEFT_ERR_CANCELLED,
 * WEFT_ERR_PARTNER_DEAD (the server ended without replying). */
uint32_t weft_ipc_call(uint64_t dest, const struct weft_ipc_msg *msg, struct weft_ipc_msg *reply,
                       int64_t timeout_ns);

/* A server's step: sends *reply to `client` with timeout zero (a caller
 * always waits for its reply), then receives the next message from any
 * thread into *msg and its sender into *sender (sender may be NULL), waiting
 * at most timeout_ns.  If the reply cannot be delivered (the client gave up,
 * was cancelled or ended) it fails at the SEND stage and receives nothing.
 * Errors: as weft_ipc_send and weft_ipc_receive (reply or msg NULL:
 * WEFT_ERR_INVALID_ARGUMENT). */
uint32_t weft_ipc_reply_and_wait(uint64_t client, const struct weft_ipc_msg *reply,
                                 int64_t timeout_ns, uint64_t *sender, struct weft_ipc_msg *msg);

/* Cancels the IPC operation thread `tid` is blocked in, if any: it fails
 * with WEFT_ERR_CANCELLED.  If `tid` is in no IPC operation, nothing happens
 * (the cancel is not remembered).  Returns at once; callable from any thread,
 * green or not.  Errors: WEFT_ERR_NO_SUCH_THREAD. */
uint32_t weft_ipc_cancel(uint64_t tid);

/* The stage (WEFT_IPC_STAGE_*) at which the calling thread's last failed IPC
 * operation failed.  Like GetLastError() it is per OS thread: read it right
 * after the failing call. */
int weft_ipc_error_stage(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* WEFT_IPC_H */
