/* heap_value.h: FLS values on the heap whose callback frees them, shared by
 * the C tests of what happens when threads end: valgrind reports a value
 * whose callback was missed as a leak, and g_freed counts the callbacks.
 * Include after check.h. */
#ifndef WEFT_TEST_HEAP_VALUE_H
#define WEFT_TEST_HEAP_VALUE_H

static int g_freed;

static VOID WINAPI free_cb(PVOID value) {
    CHECK(value != NULL);
    free(value);
    __atomic_add_fetch(&g_freed, 1, __ATOMIC_SEQ_CST);
}

static void *heap_value(void) {
    void *p = malloc(32);
    CHECK(p != NULL);
    memset(p, 0x5A, 32);
    return p;
}

#endif
