/* weft/runtime.h and weft/ipc.h on their own: each included twice, in both
 * orders, compiled as C99 and C++11 with -Wall -Wextra -Werror -pedantic;
 * the message layout as the Rust side defines it, the constants, and every
 * declared function present in the library (each one is referenced, so
 * linking fails if one is missing). */
#include <weft/ipc.h>
#include <weft/runtime.h>
#include <weft/ipc.h>
#include <weft/runtime.h>

#include <stddef.h>
#include <stdio.h>

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

STATIC_CHECK(msg_size, sizeof(struct weft_ipc_msg) == 48);
STATIC_CHECK(msg_words, offsetof(struct weft_ipc_msg, words) == 0);
STATIC_CHECK(msg_payload, offsetof(struct weft_ipc_msg, payload) == 32);
STATIC_CHECK(msg_len, offsetof(struct weft_ipc_msg, payload_len) == 40);
STATIC_CHECK(timeout_zero, WEFT_IPC_TIMEOUT_ZERO == 0);
STATIC_CHECK(timeout_never, WEFT_IPC_TIMEOUT_NEVER == -1);
STATIC_CHECK(timeout_type, sizeof(WEFT_IPC_TIMEOUT_NEVER) == 8);
STATIC_CHECK(stages, WEFT_IPC_STAGE_NONE == 0 && WEFT_IPC_STAGE_SEND == 1 &&
                         WEFT_IPC_STAGE_RECEIVE == 2);
STATIC_CHECK(err_invalid_argument, WEFT_ERR_INVALID_ARGUMENT == 0x20000001u);
STATIC_CHECK(err_not_green, WEFT_ERR_NOT_GREEN_THREAD == 0x20000002u);
STATIC_CHECK(err_shutdown, WEFT_ERR_SHUTDOWN == 0x20000003u);
STATIC_CHECK(err_wrong_thread, WEFT_ERR_WRONG_THREAD == 0x20000004u);
STATIC_CHECK(err_system, WEFT_ERR_SYSTEM == 0x20000005u);
STATIC_CHECK(err_internal, WEFT_ERR_INTERNAL == 0x20000006u);
STATIC_CHECK(err_timed_out, WEFT_ERR_TIMED_OUT == 0x20000101u);
STATIC_CHECK(err_cancelled, WEFT_ERR_CANCELLED == 0x20000102u);
STATIC_CHECK(err_partner_dead, WEFT_ERR_PARTNER_DEAD == 0x20000103u);
STATIC_CHECK(err_no_such_thread, WEFT_ERR_NO_SUCH_THREAD == 0x20000104u);
STATIC_CHECK(err_invalid_partner, WEFT_ERR_INVALID_PARTNER == 0x20000105u);

static void *thread_fn(void *arg) { return arg; }
static weft_thread_fn fn = thread_fn;

typedef void (*any_fn)(void);
static const any_fn all_functions[] = {
    (any_fn)weft_runtime_new,      (any_fn)weft_runtime_workers, (any_fn)weft_runtime_run,
    (any_fn)weft_runtime_free,     (any_fn)weft_spawn,           (any_fn)weft_spawn_on,
    (any_fn)weft_thread_id,        (any_fn)weft_thread_join,     (any_fn)weft_thread_detach,
    (any_fn)weft_yield,            (any_fn)weft_sleep_ns,        (any_fn)weft_ipc_payload_free,
    (any_fn)weft_ipc_self,         (any_fn)weft_ipc_send,        (any_fn)weft_ipc_receive,
    (any_fn)weft_ipc_call,         (any_fn)weft_ipc_reply_and_wait, (any_fn)weft_ipc_cancel,
    (any_fn)weft_ipc_error_stage,  (any_fn)GetLastError,         (any_fn)weft_error_message,
    (any_fn)weft_spawn_named,      (any_fn)weft_thread_set_name,
};

int main(void) {
    struct weft_ipc_msg m = WEFT_IPC_MSG_INIT;
    size_t i;
    for (i = 0; i < sizeof all_functions / sizeof all_functions[0]; i++) {
        if (all_functions[i] == NULL) {
            printf("function %u is NULL\n", (unsigned)i);
            return 1;
        }
    }
    if (m.payload != NULL || m.payload_len != 0 || m.words[3] != 0 || fn(&m) != (void *)&m) {
        printf("WEFT_IPC_MSG_INIT is not empty\n");
        return 1;
    }
    /* From this plain thread: not a green thread. */
    if (weft_ipc_self() != 0 || GetLastError() != WEFT_ERR_NOT_GREEN_THREAD) {
        printf("weft_ipc_self from a plain thread\n");
        return 1;
    }
    printf("runtime_ipc_header: all checks passed\n");
    return 0;
}
