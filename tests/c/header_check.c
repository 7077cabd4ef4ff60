/* The header on its own: included twice, compiled as C99 and C++11 with
 * -Wall -Wextra -Werror -pedantic, type sizes and the stats layout as the
 * Rust side defines them, and every declared function present in the
 * library (each one is referenced, so linking fails if one is missing). */
#include <weft/fibers.h>
#include <weft/fibers.h>

#include <stddef.h>
#include <stdio.h>

#define STATIC_CHECK(name, cond) typedef char static_check_##name[(cond) ? 1 : -1]

STATIC_CHECK(dword, sizeof(DWORD) == 4);
STATIC_CHECK(bool, sizeof(BOOL) == 4);
STATIC_CHECK(size_t, sizeof(SIZE_T) == sizeof(void *));
STATIC_CHECK(dword_unsigned, (DWORD)-1 > 0);
STATIC_CHECK(stats_size, sizeof(struct weft_fiber_stats) == 64);
STATIC_CHECK(stats_id, offsetof(struct weft_fiber_stats, id) == 0);
STATIC_CHECK(stats_entry, offsetof(struct weft_fiber_stats, entry) == 8);
STATIC_CHECK(stats_stack, offsetof(struct weft_fiber_stats, stack_size) == 16);
STATIC_CHECK(stats_act, offsetof(struct weft_fiber_stats, activations) == 24);
STATIC_CHECK(stats_failed, offsetof(struct weft_fiber_stats, failed_activations) == 32);
STATIC_CHECK(stats_time, offsetof(struct weft_fiber_stats, run_time_ns) == 40);
STATIC_CHECK(stats_state, offsetof(struct weft_fiber_stats, state) == 48);
STATIC_CHECK(stats_creator, offsetof(struct weft_fiber_stats, creator_tid) == 52);
STATIC_CHECK(stats_last, offsetof(struct weft_fiber_stats, last_tid) == 56);
STATIC_CHECK(stats_reserved, offsetof(struct weft_fiber_stats, reserved) == 60);
STATIC_CHECK(out_of_indexes, FLS_OUT_OF_INDEXES == 0xFFFFFFFFu);
STATIC_CHECK(max_available, FLS_MAXIMUM_AVAILABLE == 4080);
STATIC_CHECK(float_switch, FIBER_FLAG_FLOAT_SWITCH == 1);
STATIC_CHECK(err_success, ERROR_SUCCESS == 0);
STATIC_CHECK(err_invalid_function, ERROR_INVALID_FUNCTION == 1);
STATIC_CHECK(err_invalid_handle, ERROR_INVALID_HANDLE == 6);
STATIC_CHECK(err_memory, ERROR_NOT_ENOUGH_MEMORY == 8);
STATIC_CHECK(err_param, ERROR_INVALID_PARAMETER == 87);
STATIC_CHECK(err_busy, ERROR_BUSY == 170);
STATIC_CHECK(err_fiber, ERROR_ALREADY_FIBER == 1280);
STATIC_CHECK(err_thread, ERROR_ALREADY_THREAD == 1281);
STATIC_CHECK(states, WEFT_FIBER_READY == 0 && WEFT_FIBER_RUNNING == 1 && WEFT_FIBER_FINISHED == 2);
STATIC_CHECK(truth, TRUE == 1 && FALSE == 0);

static VOID WINAPI start(LPVOID p) { (void)p; }
static VOID WINAPI cb(PVOID p) { (void)p; }

/* The typedefs accept functions of the Windows shape. */
static LPFIBER_START_ROUTINE start_routine = start;
static PFIBER_START_ROUTINE start_routine2 = start;
static PFLS_CALLBACK_FUNCTION fls_callback = cb;

typedef void (*any_fn)(void);
static const any_fn all_functions[] = {
    (any_fn)ConvertThreadToFiber, (any_fn)ConvertThreadToFiberEx, (any_fn)ConvertFiberToThread,
    (any_fn)CreateFiber,          (any_fn)CreateFiberEx,          (any_fn)SwitchToFiber,
    (any_fn)DeleteFiber,          (any_fn)GetCurrentFiber,        (any_fn)GetFiberData,
    (any_fn)IsThreadAFiber,       (any_fn)FlsAlloc,               (any_fn)FlsFree,
    (any_fn)FlsGetValue,          (any_fn)FlsSetValue,            (any_fn)GetLastError,
    (any_fn)SetLastError,         (any_fn)weft_fiber_stats,       (any_fn)weft_error_message,
};

int main(void) {
    size_t i;
    for (i = 0; i < sizeof all_functions / sizeof all_functions[0]; i++) {
        if (all_functions[i] == NULL) {
            printf("function %u is NULL\n", (unsigned)i);
            return 1;
        }
    }
    if (start_routine == NULL || start_routine2 == NULL || fls_callback == NULL)
        return 1;
    /* A few calls through the header's prototypes. */
    {
        struct weft_fiber_stats s;
        LPVOID f;
        if (IsThreadAFiber() != FALSE || GetCurrentFiber() != NULL)
            return 1;
        f = CreateFiber(0, start_routine, NULL);
        if (f == NULL || !weft_fiber_stats(f, &s) || s.state != WEFT_FIBER_READY)
            return 1;
        if (s.entry != (uintptr_t)start)
            return 1;
        DeleteFiber(f);
    }
    printf("header_check: all checks passed\n");
    return 0;
}
