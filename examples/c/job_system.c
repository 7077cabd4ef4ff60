/*
 * A fiber-based job system, as game engines build them, on the Windows fiber
 * API that weft provides (<weft/fibers.h>, -lweft). Built with -DJOBS_UCONTEXT
 * it is the same program on glibc's ucontext, for comparison.
 *
 * N worker threads (one per CPU) each become a fiber and run fibers from a
 * shared pool. A job is a function and its data. Jobs wait in one shared queue
 * and each runs to its end on whichever pool fiber picks it up. A job that
 * waits for other jobs (jobs_wait on a counter that they count down as they
 * end) does not block its thread: its fiber is parked on the counter and the
 * thread switches to a free fiber, which runs other jobs. When the counter
 * reaches zero, the parked fiber is ready again, and the first worker free to
 * run it switches into it, perhaps on another thread. A job finds its own
 * context through fiber-local storage, across waits and threads.
 *
 * The workload is a game's frame loop: every frame, one job per entity; each
 * entity job starts sub-jobs (physics, animation, AI...), waits for them and
 * combines their results; the frame waits for all its entities. The program
 * checks every result against a single-threaded computation and prints
 * jobs/s and waits/s.
 *
 *   cc -O2 -pthread job_system.c -lweft -o job_system
 *   cc -O2 -pthread -DJOBS_UCONTEXT job_system.c -o job_system_ucontext
 *   ./job_system [workers [frames [entities [sub-jobs [work]]]]]
 *
 * With -DJOBS_NO_MAIN it is a library: JOBS_ENTRY (default jobs_run) runs the
 * workload once; `weft bench fibers` runs both builds this way.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef JOBS_UCONTEXT
#include <sys/mman.h>
#include <ucontext.h>
#else
#include <weft/fibers.h>
#endif

#ifndef JOBS_ENTRY
#define JOBS_ENTRY jobs_run
#endif

#define FIBER_STACK (64 * 1024)

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "job_system: %s:%d: %s failed\n", __FILE__,    \
                    __LINE__, #cond);                                      \
            abort();                                                       \
        }                                                                  \
    } while (0)

struct jobs_config {
    int workers;  /* worker threads */
    int frames;   /* frames to run */
    int entities; /* entity jobs per frame */
    int subjobs;  /* sub-jobs per entity */
    int work;     /* iterations of arithmetic per sub-job */
};

struct jobs_result {
    double seconds;                /* from the first job to the last */
    unsigned long long jobs;       /* jobs run */
    unsigned long long waits;      /* jobs_wait calls that parked their fiber */
    unsigned long long migrations; /* waits resumed on another thread */
    unsigned long long switches;   /* fiber switches */
};

int JOBS_ENTRY(const struct jobs_config *cfg, struct jobs_result *res);

/* ---- fibers: the one part that differs between the two builds ------------ */

struct fiber;
static void fiber_main(struct fiber *self);

#ifdef JOBS_UCONTEXT

struct fiber {
    ucontext_t ctx;
    void *stack;
    void *fls; /* this fiber's job (ucontext has no fiber-local storage) */
};

static struct fiber *current_fiber(void);

static void uc_entry(unsigned hi, unsigned lo) {
    fiber_main((struct fiber *)(((uintptr_t)hi << 32) | lo));
}
static void backend_start(void) {}
static void backend_stop(void) {}
static void backend_become_fiber(struct fiber *f) { (void)f; }
static void backend_back_to_thread(struct fiber *f) { (void)f; }
static void backend_create(struct fiber *f) {
    f->stack = mmap(NULL, FIBER_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(f->stack != MAP_FAILED);
    REQUIRE(getcontext(&f->ctx) == 0);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = FIBER_STACK;
    f->ctx.uc_link = NULL;
    uintptr_t p = (uintptr_t)f;
    makecontext(&f->ctx, (void (*)(void))uc_entry, 2, (unsigned)(p >> 32),
                (unsigned)p);
}
static void backend_delete(struct fiber *f) { munmap(f->stack, FIBER_STACK); }
static void backend_switch(struct fiber *from, struct fiber *to) {
    REQUIRE(swapcontext(&from->ctx, &to->ctx) == 0);
}
static void *backend_fls_get(void) { return current_fiber()->fls; }
static void backend_fls_set(void *v) { current_fiber()->fls = v; }

#else

struct fiber {
    LPVOID handle;
};

static DWORD g_fls = FLS_OUT_OF_INDEXES;

static VOID WINAPI weft_entry(LPVOID param) { fiber_main((struct fiber *)param); }
static void backend_start(void) {
    g_fls = FlsAlloc(NULL);
    REQUIRE(g_fls != FLS_OUT_OF_INDEXES);
}
static void backend_stop(void) { REQUIRE(FlsFree(g_fls)); }
static void backend_become_fiber(struct fiber *f) {
    f->handle = ConvertThreadToFiber(f);
    REQUIRE(f->handle != NULL);
}
static void backend_back_to_thread(struct fiber *f) {
    REQUIRE(ConvertFiberToThread());
    f->handle = NULL;
}
static void backend_create(struct fiber *f) {
    f->handle = CreateFiber(FIBER_STACK, weft_entry, f);
    REQUIRE(f->handle != NULL);
}
static void backend_delete(struct fiber *f) { DeleteFiber(f->handle); }
static void backend_switch(struct fiber *from, struct fiber *to) {
    (void)from;
    SwitchToFiber(to->handle);
}
static void *backend_fls_get(void) { return FlsGetValue(g_fls); }
static void backend_fls_set(void *v) { REQUIRE(FlsSetValue(g_fls, v)); }

#endif

/* ---- workers ------------------------------------------------------------------ */

/* What the fiber that runs next on a thread does with the one that switched
 * to it: a fiber cannot publish itself before it has switched away (another
 * thread could resume it while it still runs), so the next one does. */
enum { PENDING_NONE, PENDING_FREE, PENDING_PARK };

struct counter;

struct worker {
    pthread_t thread;
    struct fiber home; /* the thread's own fiber */
    struct fiber *current;
    int pending;
    struct fiber *pending_fiber;
    struct counter *pending_counter;
    unsigned long long jobs, waits, migrations, switches;
};

static __thread struct worker *t_worker;

/* Read after every switch, never kept across one: a fiber may come back on
 * another thread, and the compiler could reuse a thread-local address it
 * computed before the switch. */
#if defined(__clang__)
#define JOBS_NOINLINE __attribute__((noinline))
#else
#define JOBS_NOINLINE __attribute__((noipa))
#endif
static JOBS_NOINLINE struct worker *current_worker(void) { return t_worker; }

#ifdef JOBS_UCONTEXT
static struct fiber *current_fiber(void) { return current_worker()->current; }
#endif

static void switch_to(struct worker *w, struct fiber *from, struct fiber *to) {
    w->current = to;
    w->switches++;
    backend_switch(from, to);
}

/* ---- the scheduler's shared state ----------------------------------------- */

struct job {
    void (*fn)(struct job *);
    void *data;
    struct counter *done; /* counted down when the job ends */
};

struct counter {
    atomic_int value;
    pthread_mutex_t lock;
    struct fiber *waiter; /* the fiber parked on it (one at most here) */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static struct job *g_jobs; /* ring of queued jobs */
static size_t g_jobs_cap, g_jobs_head, g_jobs_len;
static struct fiber **g_ready; /* ring of fibers ready to resume */
static size_t g_ready_cap, g_ready_head, g_ready_len;
static struct fiber **g_free; /* stack of idle pool fibers */
static size_t g_free_len;
static int g_stop;

static void push_ready(struct fiber *f) {
    pthread_mutex_lock(&g_lock);
    REQUIRE(g_ready_len < g_ready_cap);
    g_ready[(g_ready_head + g_ready_len++) % g_ready_cap] = f;
    pthread_cond_signal(&g_wake);
    pthread_mutex_unlock(&g_lock);
}

static void push_free(struct fiber *f) {
    pthread_mutex_lock(&g_lock);
    g_free[g_free_len++] = f;
    pthread_mutex_unlock(&g_lock);
}

static struct fiber *take_free(void) {
    pthread_mutex_lock(&g_lock);
    REQUIRE(g_free_len > 0); /* the pool is sized for the workload */
    struct fiber *f = g_free[--g_free_len];
    pthread_mutex_unlock(&g_lock);
    return f;
}

static void jobs_add(struct job *jobs, int n, struct counter *c) {
    atomic_fetch_add(&c->value, n);
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < n; i++) {
        REQUIRE(g_jobs_len < g_jobs_cap);
        jobs[i].done = c;
        g_jobs[(g_jobs_head + g_jobs_len++) % g_jobs_cap] = jobs[i];
    }
    if (n > 1)
        pthread_cond_broadcast(&g_wake);
    else
        pthread_cond_signal(&g_wake);
    pthread_mutex_unlock(&g_lock);
}

static void counter_init(struct counter *c) {
    atomic_init(&c->value, 0);
    pthread_mutex_init(&c->lock, NULL);
    c->waiter = NULL;
}

static void counter_done(struct counter *c) {
    if (atomic_fetch_sub(&c->value, 1) != 1)
        return;
    pthread_mutex_lock(&c->lock);
    struct fiber *w = c->waiter;
    c->waiter = NULL;
    pthread_mutex_unlock(&c->lock);
    if (w)
        push_ready(w);
}

/* Runs in the fiber that a switch went to: see PENDING_*. */
static void after_switch(void) {
    struct worker *w = current_worker();
    int kind = w->pending;
    struct fiber *f = w->pending_fiber;
    struct counter *c = w->pending_counter;
    w->pending = PENDING_NONE;
    if (kind == PENDING_FREE) {
        push_free(f);
    } else if (kind == PENDING_PARK) {
        pthread_mutex_lock(&c->lock);
        int done = atomic_load(&c->value) == 0;
        if (!done) {
            REQUIRE(c->waiter == NULL);
            c->waiter = f;
        }
        pthread_mutex_unlock(&c->lock);
        if (done)
            push_ready(f);
    }
}

/* Returns once every job counted by `c` has ended; meanwhile this thread runs
 * other jobs on other fibers. */
static void jobs_wait(struct counter *c) {
    if (atomic_load(&c->value) == 0)
        return;
    struct worker *w = current_worker();
    struct fiber *self = w->current;
    struct fiber *next = take_free();
    long tid = syscall(SYS_gettid);
    w->pending = PENDING_PARK;
    w->pending_fiber = self;
    w->pending_counter = c;
    switch_to(w, self, next);
    after_switch();
    w = current_worker();
    w->waits++;
    if (syscall(SYS_gettid) != tid)
        w->migrations++;
}

static void run_job(struct job *j) {
    backend_fls_set(j);
    j->fn(j);
    REQUIRE(backend_fls_get() == j);
    backend_fls_set(NULL);
    current_worker()->jobs++;
    if (j->done)
        counter_done(j->done);
}

/* Every pool fiber runs this: ready fibers first, then new jobs, else sleep. */
static void fiber_main(struct fiber *self) {
    after_switch();
    for (;;) {
        pthread_mutex_lock(&g_lock);
        while (!g_ready_len && !g_jobs_len && !g_stop)
            pthread_cond_wait(&g_wake, &g_lock);
        struct worker *w = current_worker();
        if (g_ready_len) {
            struct fiber *r = g_ready[g_ready_head];
            g_ready_head = (g_ready_head + 1) % g_ready_cap;
            g_ready_len--;
            pthread_mutex_unlock(&g_lock);
            w->pending = PENDING_FREE;
            w->pending_fiber = self;
            switch_to(w, self, r);
            after_switch();
        } else if (g_jobs_len) {
            struct job j = g_jobs[g_jobs_head];
            g_jobs_head = (g_jobs_head + 1) % g_jobs_cap;
            g_jobs_len--;
            pthread_mutex_unlock(&g_lock);
            run_job(&j);
        } else {
            pthread_mutex_unlock(&g_lock);
            w->pending = PENDING_FREE;
            w->pending_fiber = self;
            switch_to(w, self, &w->home);
            after_switch();
        }
    }
}

static void *worker_main(void *arg) {
    struct worker *w = (struct worker *)arg;
    t_worker = w;
    backend_become_fiber(&w->home);
    w->current = &w->home;
    switch_to(w, &w->home, take_free());
    after_switch(); /* back: the pool fiber that brought us here is free */
    backend_back_to_thread(&w->home);
    return NULL;
}

/* ---- the workload: a game's frame loop ----------------------------------------- */

static struct jobs_config g_cfg;
static uint64_t *g_results; /* [frame][entity] */
static atomic_int g_finished;

static uint64_t compute(uint64_t input, int n) {
    uint64_t x = input * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}

static uint64_t combine(uint64_t acc, uint64_t v) {
    return (acc << 7 | acc >> 57) ^ v;
}

struct sub {
    uint64_t input, result;
};

static void sub_job(struct job *j) {
    struct sub *s = (struct sub *)j->data;
    s->result = compute(s->input, g_cfg.work);
}

struct entity {
    int frame, id;
};

static void entity_job(struct job *j) {
    struct entity *e = (struct entity *)j->data;
    struct sub subs[64];
    struct job jobs[64];
    struct counter c;
    counter_init(&c);
    for (int k = 0; k < g_cfg.subjobs; k++) {
        subs[k].input = (uint64_t)e->frame << 40 | (uint64_t)e->id << 16 | (uint64_t)k;
        jobs[k] = (struct job){sub_job, &subs[k], NULL};
    }
    jobs_add(jobs, g_cfg.subjobs, &c);
    jobs_wait(&c);
    REQUIRE(backend_fls_get() == j); /* this job's context, wherever it resumed */
    uint64_t acc = 0;
    for (int k = 0; k < g_cfg.subjobs; k++)
        acc = combine(acc, subs[k].result);
    g_results[(size_t)e->frame * (size_t)g_cfg.entities + (size_t)e->id] = acc;
    pthread_mutex_destroy(&c.lock);
}

static void frame_loop_job(struct job *j) {
    struct entity *ents = malloc(sizeof *ents * (size_t)g_cfg.entities);
    struct job *jobs = malloc(sizeof *jobs * (size_t)g_cfg.entities);
    REQUIRE(ents && jobs);
    for (int f = 0; f < g_cfg.frames; f++) {
        struct counter c;
        counter_init(&c);
        for (int e = 0; e < g_cfg.entities; e++) {
            ents[e] = (struct entity){f, e};
            jobs[e] = (struct job){entity_job, &ents[e], NULL};
        }
        jobs_add(jobs, g_cfg.entities, &c);
        jobs_wait(&c);
        REQUIRE(backend_fls_get() == j);
        pthread_mutex_destroy(&c.lock);
    }
    free(ents);
    free(jobs);
    pthread_mutex_lock(&g_lock);
    atomic_store(&g_finished, 1);
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_lock);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int JOBS_ENTRY(const struct jobs_config *cfg, struct jobs_result *res) {
    if (cfg->workers < 1 || cfg->frames < 1 || cfg->entities < 1 || cfg->subjobs < 1 ||
        cfg->subjobs > 64 || cfg->work < 0)
        return -1;
    g_cfg = *cfg;
    size_t per_frame = (size_t)cfg->entities * (size_t)(cfg->subjobs + 1);
    g_jobs_cap = per_frame + 16;
    g_ready_cap = (size_t)cfg->entities + 16;
    /* A fiber for each entity waiting, the frame loop, and each worker. */
    size_t pool = (size_t)cfg->entities + 2 * (size_t)cfg->workers + 8;
    g_jobs = calloc(g_jobs_cap, sizeof *g_jobs);
    g_ready = calloc(g_ready_cap, sizeof *g_ready);
    g_free = calloc(pool, sizeof *g_free);
    struct fiber *fibers = calloc(pool, sizeof *fibers);
    struct worker *workers = calloc((size_t)cfg->workers, sizeof *workers);
    g_results = calloc((size_t)cfg->frames * (size_t)cfg->entities, sizeof *g_results);
    REQUIRE(g_jobs && g_ready && g_free && fibers && workers && g_results);
    g_jobs_head = g_jobs_len = g_ready_head = g_ready_len = g_free_len = 0;
    g_stop = 0;
    atomic_store(&g_finished, 0);
    backend_start();
    for (size_t i = 0; i < pool; i++) {
        backend_create(&fibers[i]);
        g_free[g_free_len++] = &fibers[i];
    }

    double t0 = now_s();
    struct counter root_done;
    counter_init(&root_done);
    struct job root = {frame_loop_job, NULL, NULL};
    jobs_add(&root, 1, &root_done);
    for (int i = 0; i < cfg->workers; i++)
        REQUIRE(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0);
    pthread_mutex_lock(&g_lock);
    while (!atomic_load(&g_finished))
        pthread_cond_wait(&g_wake, &g_lock);
    double t1 = now_s();
    g_stop = 1;
    pthread_cond_broadcast(&g_wake);
    pthread_mutex_unlock(&g_lock);
    for (int i = 0; i < cfg->workers; i++)
        REQUIRE(pthread_join(workers[i].thread, NULL) == 0);

    /* Every result, against the same computation on one thread. */
    for (int f = 0; f < cfg->frames; f++)
        for (int e = 0; e < cfg->entities; e++) {
            uint64_t acc = 0;
            for (int k = 0; k < cfg->subjobs; k++)
                acc = combine(acc, compute((uint64_t)f << 40 | (uint64_t)e << 16 |
                                               (uint64_t)k,
                                           cfg->work));
            REQUIRE(g_results[(size_t)f * (size_t)cfg->entities + (size_t)e] == acc);
        }

    memset(res, 0, sizeof *res);
    res->seconds = t1 - t0;
    for (int i = 0; i < cfg->workers; i++) {
        res->jobs += workers[i].jobs;
        res->waits += workers[i].waits;
        res->migrations += workers[i].migrations;
        res->switches += workers[i].switches;
    }
    REQUIRE(res->jobs == 1 + (unsigned long long)cfg->frames * per_frame);
    REQUIRE(g_free_len == pool); /* every fiber came back to the pool */
    for (size_t i = 0; i < pool; i++)
        backend_delete(&fibers[i]);
    backend_stop();
    pthread_mutex_destroy(&root_done.lock);
    free(g_jobs);
    free(g_ready);
    free(g_free);
    free(fibers);
    free(workers);
    free(g_results);
    return 0;
}

#ifndef JOBS_NO_MAIN
int main(int argc, char **argv) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    struct jobs_config cfg = {
        .workers = argc > 1 ? atoi(argv[1]) : (int)(cpus > 0 ? cpus : 2),
        .frames = argc > 2 ? atoi(argv[2]) : 200,
        .entities = argc > 3 ? atoi(argv[3]) : 64,
        .subjobs = argc > 4 ? atoi(argv[4]) : 8,
        .work = argc > 5 ? atoi(argv[5]) : 200,
    };
    struct jobs_result r;
    if (JOBS_ENTRY(&cfg, &r) != 0) {
        fprintf(stderr,
                "usage: %s [workers [frames [entities [sub-jobs (1..64) [work]]]]]\n",
                argv[0]);
        return 2;
    }
    printf("%d workers, %d frames of %d entities x %d sub-jobs: %llu jobs, %llu waits "
           "(%llu resumed on another thread), %llu switches in %.3f s\n",
           cfg.workers, cfg.frames, cfg.entities, cfg.subjobs, r.jobs, r.waits,
           r.migrations, r.switches, r.seconds);
    printf("%.0f jobs/s, %.0f waits/s\n", (double)r.jobs / r.seconds,
           (double)r.waits / r.seconds);
    printf("job_system: all checks passed\n");
    return 0;
}
#endif
