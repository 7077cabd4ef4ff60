/* weft/syslet.h on its own: included twice, compiled as C99 and C++11 with
 * -Wall -Wextra -Werror -pedantic; the atom's and the completion's layouts as
 * the Rust side defines them, the flags with the seed's values, the error
 * codes, and every declared function present in the library (each one is
 * referenced, so linking fails if one is missing). */
#include <weft/syslet.h>
#include <weft/syslet.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

#ifdef __cplusplus
#define ATOM_PRIVATE private_
#else
#define ATOM_PRIVATE private
#endif

STATIC_CHECK(atom_size, sizeof(struct syslet_uatom) == 88);
STATIC_CHECK(atom_flags, offsetof(struct syslet_uatom, flags) == 0);
STATIC_CHECK(atom_nr, offsetof(struct syslet_uatom, nr) == 8);
STATIC_CHECK(atom_ret_ptr, offsetof(struct syslet_uatom, ret_ptr) == 16);
STATIC_CHECK(atom_next, offsetof(struct syslet_uatom, next) == 24);
STATIC_CHECK(atom_arg_ptr, offsetof(struct syslet_uatom, arg_ptr) == 32);
STATIC_CHECK(atom_private, offsetof(struct syslet_uatom, ATOM_PRIVATE) == 80);
STATIC_CHECK(completion_size, sizeof(struct weft_syslet_completion) == 24);
STATIC_CHECK(completion_atom, offsetof(struct weft_syslet_completion, atom) == 0);
STATIC_CHECK(completion_ret, offsetof(struct weft_syslet_completion, ret) == 8);
STATIC_CHECK(completion_handle, offsetof(struct weft_syslet_completion, handle) == 16);
STATIC_CHECK(flags, SYSLET_ASYNC == 0x1 && SYSLET_SYNC == 0x2 && SYSLET_NO_COMPLETE == 0x4 &&
                        SYSLET_STOP_ON_NONZERO == 0x8 && SYSLET_STOP_ON_ZERO == 0x10 &&
                        SYSLET_STOP_ON_NEGATIVE == 0x20 && SYSLET_STOP_ON_NON_POSITIVE == 0x40 &&
                        SYSLET_SKIP_TO_NEXT_ON_STOP == 0x80);
STATIC_CHECK(flag_masks, SYSLET_STOP_MASK == 0x78 && SYSLET_FLAGS == 0xFF);
STATIC_CHECK(umem_add, SYS_UMEM_ADD == (1UL << 20));
STATIC_CHECK(timeout_never, WEFT_SYSLET_TIMEOUT_NEVER == -1 && sizeof(WEFT_SYSLET_TIMEOUT_NEVER) == 8);
STATIC_CHECK(ring_max, WEFT_SYSLET_RING_MAX == 1048576);
STATIC_CHECK(err_unknown, WEFT_ERR_SYSLET_UNKNOWN_SYSCALL == 0x20000201u);
STATIC_CHECK(err_forbidden, WEFT_ERR_SYSLET_FORBIDDEN_SYSCALL == 0x20000202u);
STATIC_CHECK(err_missing, WEFT_ERR_SYSLET_MISSING_ARGUMENT == 0x20000203u);
STATIC_CHECK(err_flags, WEFT_ERR_SYSLET_BAD_FLAGS == 0x20000204u);
STATIC_CHECK(err_async_sync, WEFT_ERR_SYSLET_ASYNC_AND_SYNC == 0x20000205u);
STATIC_CHECK(err_bad_atom, WEFT_ERR_SYSLET_BAD_ATOM == 0x20000206u);
STATIC_CHECK(err_busy, WEFT_ERR_SYSLET_BUSY == 0x20000207u);
STATIC_CHECK(err_not_in_flight, WEFT_ERR_SYSLET_NOT_IN_FLIGHT == 0x20000208u);

typedef void (*any_fn)(void);
static const any_fn all_functions[] = {
    (any_fn)weft_syslet_ctx_new,    (any_fn)weft_syslet_ctx_free,      (any_fn)async_exec,
    (any_fn)weft_syslet_exec,       (any_fn)weft_syslet_last_ret,      (any_fn)async_wait,
    (any_fn)weft_syslet_pop,        (any_fn)weft_syslet_cancel,        (any_fn)weft_syslet_in_flight,
    (any_fn)weft_syslet_ready,      (any_fn)weft_syslet_overflowed,    (any_fn)weft_syslet_nr,
    (any_fn)weft_syslet_name,       (any_fn)weft_syslet_validate,      (any_fn)weft_syslet_validate_error,
    (any_fn)weft_error_message,     (any_fn)GetLastError,
};

int main(void) {
    struct syslet_uatom a[2];
    struct weft_syslet_completion c;
    weft_syslet_ctx *ctx;
    long ret = -1;
    uint64_t h = 7;
    size_t i;

    for (i = 0; i < sizeof all_functions / sizeof all_functions[0]; i++) {
        if (all_functions[i] == NULL) {
            printf("function %u is NULL\n", (unsigned)i);
            return 1;
        }
    }
    /* One atom: getpid, inline. */
    memset(a, 0, sizeof a);
    a[0].nr = (unsigned long)weft_syslet_nr("getpid");
    a[0].ret_ptr = &ret;
    a[0].ATOM_PRIVATE = &c;
    ctx = weft_syslet_ctx_new(4);
    if (ctx == NULL || weft_syslet_validate(a, NULL, NULL) != 0 ||
        async_exec(ctx, a, &h) != &a[0] || h != 0 || ret <= 0 ||
        weft_syslet_last_ret() != ret || weft_syslet_pop(ctx, &c) != 0 ||
        a[0].ATOM_PRIVATE != (void *)&c || weft_syslet_ctx_free(ctx) != 0) {
        printf("a getpid syslet did not run inline\n");
        return 1;
    }
    printf("syslet_header: all checks passed\n");
    return 0;
}
