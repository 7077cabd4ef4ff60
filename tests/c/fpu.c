/* Floating-point control state is per fiber: the rounding mode (fesetround),
 * MXCSR (FTZ/DAZ) and the x87 control word (precision control) are saved
 * and restored on every switch, a new fiber inherits its creator's values
 * at CreateFiber, and the state follows a fiber that migrates to another
 * thread. */
#include "check.h"

#include <fenv.h>
#include <pthread.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#define HAVE_X87 1
static unsigned get_mxcsr(void) {
    unsigned v;
    __asm__ volatile("stmxcsr %0" : "=m"(v));
    return v;
}
static void set_mxcsr(unsigned v) { __asm__ volatile("ldmxcsr %0" : : "m"(v)); }
static unsigned get_x87cw(void) {
    unsigned short v;
    __asm__ volatile("fnstcw %0" : "=m"(v));
    return v;
}
static void set_x87cw(unsigned v) {
    unsigned short s = (unsigned short)v;
    __asm__ volatile("fldcw %0" : : "m"(s));
}
#define MXCSR_CONTROL_MASK 0xFFC0u /* without the sticky exception flags */
#define MXCSR_FTZ_DAZ 0x8040u
#define X87_PC_MASK 0x0300u
#define X87_PC_SINGLE 0x0000u
#endif

static volatile double g_one = 1.0, g_three = 3.0, g_ten = 10.0;

/* 1/3 computed at run time under the current rounding mode. */
static double __attribute__((noinline)) third(void) { return g_one / g_three; }
static double __attribute__((noinline)) neg_third(void) { return -g_one / g_three; }
/* Round to nearest rounds 1/3 down and 1/10 up, so the pair tells the three
 * modes apart. */
static double __attribute__((noinline)) tenth(void) { return g_one / g_ten; }

static double q_near, q_up, q_down, t_near, t_down;

static void check_nearest(void) {
    CHECK_EQ(fegetround(), FE_TONEAREST);
    CHECK(third() == q_near);
    CHECK(tenth() == t_near);
#ifdef HAVE_X87
    CHECK_EQ(get_mxcsr() & MXCSR_CONTROL_MASK, 0x1F80u);
    CHECK_EQ(get_x87cw() & 0x0F3Fu, 0x033Fu);
#endif
}

static void check_upward(void) {
    CHECK_EQ(fegetround(), FE_UPWARD);
    CHECK(third() == q_up);
    CHECK(third() > q_down);
    CHECK(neg_third() == -q_down);
}

static LPVOID g_main, g_a, g_b, g_c;
static int g_step;

static VOID WINAPI fiber_c(LPVOID param) {
    (void)param;
    /* Created by A while A had FE_UPWARD and FTZ/DAZ and single precision. */
    check_upward();
#ifdef HAVE_X87
    CHECK_EQ(get_mxcsr() & MXCSR_FTZ_DAZ, MXCSR_FTZ_DAZ);
    CHECK_EQ(get_x87cw() & X87_PC_MASK, X87_PC_SINGLE);
#endif
    fesetround(FE_TOWARDZERO);
    g_step = 30;
    for (;;)
        SwitchToFiber(g_a);
}

static VOID WINAPI fiber_a(LPVOID param) {
    (void)param;
    check_nearest(); /* inherited from main at CreateFiber */
    CHECK_EQ(fesetround(FE_UPWARD), 0);
#ifdef HAVE_X87
    set_mxcsr(get_mxcsr() | MXCSR_FTZ_DAZ);
    set_x87cw((get_x87cw() & ~X87_PC_MASK) | X87_PC_SINGLE);
#endif
    check_upward();
    g_step = 1;
    SwitchToFiber(g_b);
    /* B changed its own rounding mode; ours is intact. */
    CHECK_EQ(g_step, 2);
    check_upward();
#ifdef HAVE_X87
    CHECK_EQ(get_mxcsr() & MXCSR_FTZ_DAZ, MXCSR_FTZ_DAZ);
    CHECK_EQ(get_x87cw() & X87_PC_MASK, X87_PC_SINGLE);
#endif
    /* A child inherits A's state. */
    g_c = CreateFiber(0, fiber_c, NULL);
    CHECK(g_c != NULL);
    SwitchToFiber(g_c);
    CHECK_EQ(g_step, 30);
    check_upward();
    g_step = 3;
    for (;;) {
        SwitchToFiber(g_main);
        check_upward();
        g_step++;
    }
}

static VOID WINAPI fiber_b(LPVOID param) {
    (void)param;
    CHECK_EQ(g_step, 1);
    check_nearest(); /* created by main: default state, not A's */
    CHECK_EQ(fesetround(FE_DOWNWARD), 0);
    CHECK(third() == q_down);
    CHECK(tenth() == t_down);
    g_step = 2;
    SwitchToFiber(g_a);
    CHECK(!"b resumed");
}

/* ---- across threads ------------------------------------------------------ */

/* Created by main while main had FE_UPWARD, FTZ/DAZ and single precision;
 * switched to alternately from main (round to nearest) and from another
 * thread (round downward); switches back to g_back. */
static LPVOID g_back;

static void check_migrant_state(void) {
    check_upward();
#ifdef HAVE_X87
    CHECK_EQ(get_mxcsr() & MXCSR_FTZ_DAZ, MXCSR_FTZ_DAZ);
    CHECK_EQ(get_x87cw() & X87_PC_MASK, X87_PC_SINGLE);
#endif
}

static VOID WINAPI migrant(LPVOID param) {
    (void)param;
    for (;;) {
        check_migrant_state();
        g_step++;
        SwitchToFiber(g_back);
    }
}

static void *other_thread(void *arg) {
    LPVOID m = arg;
    CHECK_EQ(fesetround(FE_DOWNWARD), 0);
    LPVOID me = ConvertThreadToFiber(NULL);
    CHECK(me != NULL);
    for (int i = 0; i < 100; i++) {
        int before = g_step;
        g_back = me;
        SwitchToFiber(m);
        CHECK_EQ(g_step, before + 1);
        CHECK_EQ(fegetround(), FE_DOWNWARD);
        CHECK(third() == q_down);
        CHECK(tenth() == t_down);
#ifdef HAVE_X87
        CHECK_EQ(get_mxcsr() & MXCSR_FTZ_DAZ, 0);
        CHECK_EQ(get_x87cw() & X87_PC_MASK, X87_PC_MASK);
#endif
    }
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    return NULL;
}

int main(void) {
    q_near = third();
    t_near = tenth();
    fesetround(FE_UPWARD);
    q_up = third();
    fesetround(FE_DOWNWARD);
    q_down = third();
    t_down = tenth();
    fesetround(FE_TONEAREST);
    CHECK(q_up > q_down);
    CHECK(q_near == q_down && q_near < q_up);
    CHECK(t_down < t_near);
    CHECK(neg_third() == -q_near);
    fesetround(FE_UPWARD);
    CHECK(neg_third() == -q_down); /* -1/3 rounded up == -(1/3 rounded down) */
    fesetround(FE_TONEAREST);

    g_main = ConvertThreadToFiber(NULL);
    CHECK(g_main != NULL);
    check_nearest();

    /* A (upward) -> B (default, sets downward) -> A (still upward) -> C
     * (created by A: inherits upward) -> A -> main (still nearest). */
    g_a = CreateFiber(0, fiber_a, NULL);
    g_b = CreateFiber(0, fiber_b, NULL);
    CHECK(g_a && g_b);
    SwitchToFiber(g_a);
    CHECK_EQ(g_step, 3);
    check_nearest();
    for (int i = 0; i < 100; i++) {
        SwitchToFiber(g_a);
        CHECK_EQ(g_step, 4 + i);
        check_nearest();
    }

    /* Across threads. */
#ifdef HAVE_X87
    unsigned saved_mxcsr = get_mxcsr(), saved_cw = get_x87cw();
#endif
    CHECK_EQ(fesetround(FE_UPWARD), 0);
#ifdef HAVE_X87
    set_mxcsr(get_mxcsr() | MXCSR_FTZ_DAZ);
    set_x87cw((get_x87cw() & ~X87_PC_MASK) | X87_PC_SINGLE);
#endif
    LPVOID m = CreateFiber(0, migrant, NULL); /* inherits all of that */
    CHECK(m != NULL);
    CHECK_EQ(fesetround(FE_TONEAREST), 0);
#ifdef HAVE_X87
    set_mxcsr(saved_mxcsr);
    set_x87cw(saved_cw);
#endif
    check_nearest();
    g_step = 0;
    g_back = g_main;
    SwitchToFiber(m);
    CHECK_EQ(g_step, 1);
    check_nearest();

    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, other_thread, m), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(g_step, 101);

    g_back = g_main;
    SwitchToFiber(m); /* back on the main thread, still upward */
    CHECK_EQ(g_step, 102);
    check_nearest();

    DeleteFiber(m);
    DeleteFiber(g_a);
    DeleteFiber(g_b);
    DeleteFiber(g_c);
    CHECK_EQ(ConvertFiberToThread(), TRUE);
    check_nearest();
    TEST_PASS("fpu");
    return 0;
}
