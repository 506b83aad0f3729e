/* Exercises every function of buddyfree.h, bad input included, on every registered
 * allocator, from several pthreads. Built and run by tests/c_program.rs; exits non-zero on
 * the first failed check. */

#define _POSIX_C_SOURCE 200809L

#include "buddyfree.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#define CHECK_STATUS(call, expected)                                              \
    do {                                                                          \
        BuddyfreeStatus got_ = (call);                                            \
        if (got_ != (expected)) {                                                 \
            fprintf(stderr, "%s:%d: %s returned %d (%s), expected %s\n", __FILE__, \
                    __LINE__, #call, (int)got_, buddyfree_strerror(got_), #expected); \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

enum { UNIT = 64, UNITS = 1024, MAX_ORDER = 6, THREADS = 4, STEPS = 2000 };

/* The largest power of two a size_t holds. */
#define TOP_BIT ((size_t)1 << (sizeof(size_t) * 8 - 1))

static _Alignas(4096) unsigned char caller_region[UNIT * UNITS];
/* Metadata for the allocators that keep theirs in the caller's memory (no heap for tables). */
static _Alignas(4096) unsigned char caller_metadata[256 << 10];

/* The suite's configuration, designated so that fields added later keep their default 0. */
static BuddyfreeConfig config(uint32_t cores, const char *name) {
    return (BuddyfreeConfig){
        .unit_size = UNIT, .units = UNITS, .max_order = MAX_ORDER, .cores = cores, .allocator = name};
}

static size_t free_units(const Buddyfree *bf) {
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    return s.free_units;
}

static void check_strerror(void) {
    for (int32_t code = 0; code <= BUDDYFREE_STATUS_RESERVED; code++) {
        const char *s = buddyfree_strerror(code);
        CHECK(s != NULL && strlen(s) > 0 && strcmp(s, "unknown status code") != 0);
    }
    CHECK(strcmp(buddyfree_strerror(BUDDYFREE_STATUS_OK), "ok") == 0);
    CHECK(strcmp(buddyfree_strerror(-1), "unknown status code") == 0);
    CHECK(strcmp(buddyfree_strerror(BUDDYFREE_STATUS_RESERVED + 1), "unknown status code") == 0);
}

static void check_bad_configs(const char *name) {
    Buddyfree *bf = (Buddyfree *)0x1;
    BuddyfreeConfig c = config(2, name);
    CHECK_STATUS(buddyfree_create(NULL, NULL, 0, &bf), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_create(&c, NULL, 0, NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    BuddyfreeConfig bad_unit = c;
    bad_unit.unit_size = 48;
    CHECK_STATUS(buddyfree_create(&bad_unit, NULL, 0, &bf), BUDDYFREE_STATUS_INVALID_CONFIG);
    BuddyfreeConfig no_units = c;
    no_units.units = 0;
    CHECK_STATUS(buddyfree_create(&no_units, NULL, 0, &bf), BUDDYFREE_STATUS_INVALID_CONFIG);
    CHECK(strcmp(buddyfree_last_error(), "invalid configuration: zero units") == 0);
    BuddyfreeConfig big_order = c;
    big_order.max_order = 11; /* 2^11 > 1024 units */
    CHECK_STATUS(buddyfree_create(&big_order, NULL, 0, &bf), BUDDYFREE_STATUS_INVALID_CONFIG);
    BuddyfreeConfig many_cores = c;
    many_cores.cores = UINT32_MAX;
    CHECK_STATUS(buddyfree_create(&many_cores, NULL, 0, &bf), BUDDYFREE_STATUS_INVALID_CONFIG);
    CHECK(strstr(buddyfree_last_error(), "MAX_CORES") != NULL);
    BuddyfreeConfig unknown = c;
    unknown.allocator = "no such allocator";
    CHECK_STATUS(buddyfree_create(&unknown, NULL, 0, &bf), BUDDYFREE_STATUS_UNKNOWN_ALLOCATOR);
    /* A caller's region smaller than the units asked for. */
    CHECK_STATUS(buddyfree_create(&c, caller_region, UNIT * 100, &bf), BUDDYFREE_STATUS_BAD_REGION);
    CHECK(bf == (Buddyfree *)0x1); /* untouched on failure */
    buddyfree_destroy(NULL);
}

/* Every bad request on a live instance: an error code, and nothing changes. */
static void check_bad_requests(Buddyfree *bf) {
    size_t before = free_units(bf);
    void *p = (void *)0x1;
    size_t index = 0;
    BuddyfreeStats s;

    CHECK_STATUS(buddyfree_alloc(NULL, 8, 0, &p), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(p == NULL);
    CHECK_STATUS(buddyfree_alloc(bf, 8, 0, NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc(bf, 0, 0, &p), BUDDYFREE_STATUS_ZERO_SIZE);
    CHECK(p == NULL);
    CHECK_STATUS(buddyfree_alloc(bf, (UNIT << MAX_ORDER) + 1, 0, &p), BUDDYFREE_STATUS_TOO_LARGE);
    CHECK_STATUS(buddyfree_alloc(bf, SIZE_MAX, 0, &p), BUDDYFREE_STATUS_TOO_LARGE);
    CHECK_STATUS(buddyfree_alloc(bf, 8, 3, &p), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_alloc(bf, 8, (size_t)1 << 30, &p), BUDDYFREE_STATUS_BAD_ALIGN);
    /* An alignment no region honours, whatever the size: not "too large". */
    CHECK_STATUS(buddyfree_alloc(bf, 8, TOP_BIT, &p), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_try_alloc(bf, 8, TOP_BIT, &p), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_alloc(bf, SIZE_MAX, TOP_BIT, &p), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_alloc(bf, 0, TOP_BIT, &p), BUDDYFREE_STATUS_ZERO_SIZE);
    CHECK_STATUS(buddyfree_alloc_order(NULL, 0, &index, &p), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc_order(bf, MAX_ORDER + 1, &index, &p), BUDDYFREE_STATUS_BAD_ORDER);
    CHECK(p == NULL);
    CHECK_STATUS(buddyfree_stats(NULL, &s), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_stats(bf, NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(free_units(bf) == before);

    void *a = NULL;
    CHECK_STATUS(buddyfree_alloc(bf, 100, 8, &a), BUDDYFREE_STATUS_OK);
    CHECK(a != NULL);
    size_t mid = free_units(bf);
    int on_stack = 0;
    CHECK_STATUS(buddyfree_free(NULL, a, 100, 8), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_free(bf, NULL, 100, 8), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_free(bf, &on_stack, 100, 8), BUDDYFREE_STATUS_FOREIGN_POINTER);
    CHECK_STATUS(buddyfree_free(bf, (char *)a + 1, 100, 8), BUDDYFREE_STATUS_MISALIGNED);
    CHECK_STATUS(buddyfree_free(bf, a, 10, 8), BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK_STATUS(buddyfree_free(bf, a, 0, 8), BUDDYFREE_STATUS_ZERO_SIZE);
    CHECK_STATUS(buddyfree_free(bf, a, 100, 3), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_free(bf, a, 100, TOP_BIT), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_try_free(bf, a, 100, TOP_BIT), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_free(bf, a, (UNIT << MAX_ORDER) * 2, 8), BUDDYFREE_STATUS_TOO_LARGE);
    CHECK(free_units(bf) == mid);
    CHECK_STATUS(buddyfree_free(bf, a, 100, 8), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free(bf, a, 100, 8), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK(free_units(bf) == before);

    CHECK_STATUS(buddyfree_alloc_order(bf, 2, &index, &p), BUDDYFREE_STATUS_OK);
    CHECK(index % 4 == 0 && p != NULL);
    CHECK_STATUS(buddyfree_free_order(NULL, index, 2), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_free_order(bf, index, 1), BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK_STATUS(buddyfree_free_order(bf, index + 1, 2), BUDDYFREE_STATUS_MISALIGNED);
    CHECK_STATUS(buddyfree_free_order(bf, (size_t)1 << 40, 0), BUDDYFREE_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(buddyfree_free_order(bf, index, MAX_ORDER + 1), BUDDYFREE_STATUS_BAD_ORDER);
    CHECK_STATUS(buddyfree_free_order(bf, index, 2), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_order(bf, index, 2), BUDDYFREE_STATUS_NOT_ALLOCATED);
    /* A class of memory: placed apart by llfree-classes, ignored by the others; freed alike. */
    CHECK_STATUS(buddyfree_alloc_class(NULL, 0, BUDDYFREE_CLASS_HUGE, &index, &p), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc_class(bf, MAX_ORDER + 1, BUDDYFREE_CLASS_HUGE, &index, &p), BUDDYFREE_STATUS_BAD_ORDER);
    CHECK_STATUS(buddyfree_alloc_class(bf, 1, BUDDYFREE_CLASS_UNMOVABLE, &index, &p), BUDDYFREE_STATUS_OK);
    CHECK(index % 2 == 0 && p != NULL);
    CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK_STATUS(buddyfree_free_order(bf, index, 1), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == before);
    /* Index and pointer name the same block. */
    CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, &p), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free(bf, p, UNIT, 0), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_alloc_order(bf, 0, NULL, NULL), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == before - 1);
    CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, NULL), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_OK);
    /* The block allocated without asking where: find it as the only live order-0 block by
     * freeing every unit index; all but one report NOT_ALLOCATED. */
    int freed = 0;
    for (size_t i = 0; i < UNITS; i++) {
        BuddyfreeStatus st = buddyfree_free_order(bf, i, 0);
        CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_NOT_ALLOCATED);
        freed += st == BUDDYFREE_STATUS_OK;
    }
    CHECK(freed == 1);
    CHECK(free_units(bf) == before);
}

/* Fills the instance with order-MAX_ORDER blocks, then checks exhaustion is an error. */
static void check_exhaustion(Buddyfree *bf) {
    size_t before = free_units(bf);
    size_t n = before >> MAX_ORDER;
    void **blocks = calloc(n, sizeof *blocks);
    CHECK(blocks != NULL);
    for (size_t i = 0; i < n; i++) {
        CHECK_STATUS(buddyfree_alloc(bf, UNIT << MAX_ORDER, UNIT << MAX_ORDER, &blocks[i]), BUDDYFREE_STATUS_OK);
        CHECK((uintptr_t)blocks[i] % (UNIT << MAX_ORDER) == 0);
    }
    void *p = (void *)0x1;
    CHECK_STATUS(buddyfree_alloc(bf, 1, 0, &p), BUDDYFREE_STATUS_OUT_OF_MEMORY);
    CHECK(p == NULL);
    for (size_t i = 0; i < n; i++)
        CHECK_STATUS(buddyfree_free(bf, blocks[i], UNIT << MAX_ORDER, 0), BUDDYFREE_STATUS_OK);
    free(blocks);
    CHECK(free_units(bf) == before);
}

/* Bulk allocation and free: distinct aligned blocks, as many as asked while any is free,
 * the exact count at exhaustion, and a free that stops at the first bad block. */
static void check_bulk(Buddyfree *bf) {
    size_t before = free_units(bf);
    size_t idx[UNITS];
    size_t got = 99, done = 99, none = 99;
    CHECK_STATUS(buddyfree_alloc_bulk(NULL, 1, idx, 8, &got), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(got == 0);
    CHECK_STATUS(buddyfree_alloc_bulk(bf, 1, NULL, 8, &got), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc_bulk(bf, MAX_ORDER + 1, idx, 8, &got), BUDDYFREE_STATUS_BAD_ORDER);
    CHECK(got == 0);
    CHECK_STATUS(buddyfree_free_bulk(bf, NULL, 8, 1, &done), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(done == 0);
    CHECK_STATUS(buddyfree_alloc_bulk(bf, 1, idx, 0, &got), BUDDYFREE_STATUS_OK);
    CHECK(got == 0);
    CHECK(free_units(bf) == before);

    CHECK_STATUS(buddyfree_alloc_bulk(bf, 1, idx, 8, &got), BUDDYFREE_STATUS_OK);
    CHECK(got == 8);
    for (size_t i = 0; i < got; i++) {
        CHECK(idx[i] % 2 == 0 && idx[i] < UNITS);
        for (size_t j = 0; j < i; j++)
            CHECK(idx[i] != idx[j]);
    }
    CHECK(free_units(bf) == before - 16);
    /* The fifth block again at the end: the eight are freed, the ninth is refused. */
    idx[8] = idx[4];
    CHECK_STATUS(buddyfree_free_bulk(bf, idx, 9, 1, &done), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK(done == 8);
    CHECK(free_units(bf) == before);

    /* Every block of the largest order, then none; a free of the wrong order changes nothing. */
    size_t n = before >> MAX_ORDER;
    CHECK_STATUS(buddyfree_alloc_bulk(bf, MAX_ORDER, idx, UNITS, &got), BUDDYFREE_STATUS_OK);
    CHECK(got == n);
    CHECK_STATUS(buddyfree_alloc_bulk(bf, MAX_ORDER, idx + got, 1, &none), BUDDYFREE_STATUS_OUT_OF_MEMORY);
    CHECK(none == 0);
    CHECK(free_units(bf) == 0);
    CHECK_STATUS(buddyfree_free_bulk(bf, idx, got, MAX_ORDER - 1, &done), BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK(done == 0 && free_units(bf) == 0);
    CHECK_STATUS(buddyfree_free_bulk(bf, idx, got, MAX_ORDER, NULL), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == before);
}

/* What a held-core callback did: how often it ran, and whether its checks passed. */
struct held_run {
    unsigned char *base; /* read before: inside the callback, no other call on the instance */
    int calls;
    unsigned char stamp;
    int alone; /* no other thread runs: a double free cannot hit another thread's block */
};

/* Inside buddyfree_with_core: blocks of orders 0 to 2, written and checked, a free of the
 * wrong order refused, everything freed again (and, alone, freed twice: refused). */
static void held_burst(BuddyfreeCore *core, void *arg) {
    struct held_run *run = arg;
    run->calls++;
    size_t idx[12];
    void *ptr[12];
    int n = 0;
    for (; n < 12; n++) {
        uint32_t order = (uint32_t)n % 3;
        BuddyfreeStatus st = buddyfree_core_alloc_order(core, order, &idx[n], &ptr[n]);
        if (st == BUDDYFREE_STATUS_OUT_OF_MEMORY)
            break;
        CHECK_STATUS(st, BUDDYFREE_STATUS_OK);
        CHECK(idx[n] % ((size_t)1 << order) == 0 && idx[n] < UNITS);
        CHECK(ptr[n] == run->base + idx[n] * UNIT);
        memset(ptr[n], run->stamp, UNIT << order);
    }
    for (int i = n - 1; i >= 0; i--) {
        uint32_t order = (uint32_t)i % 3;
        for (size_t b = 0; b < ((size_t)UNIT << order); b++)
            CHECK(((unsigned char *)ptr[i])[b] == run->stamp);
        if (order > 0)
            CHECK_STATUS(buddyfree_core_free_order(core, idx[i], order - 1), BUDDYFREE_STATUS_ORDER_MISMATCH);
        CHECK_STATUS(buddyfree_core_free_order(core, idx[i], order), BUDDYFREE_STATUS_OK);
        if (run->alone)
            CHECK_STATUS(buddyfree_core_free_order(core, idx[i], order), BUDDYFREE_STATUS_NOT_ALLOCATED);
    }
}

/* A held core: null arguments refused, the callback run once, its blocks and bad frees as
 * through the plain calls, nothing lost. */
static void check_held_core(Buddyfree *bf) {
    size_t before = free_units(bf);
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    struct held_run run = {s.base, 0, 0x5a, 1};
    CHECK_STATUS(buddyfree_with_core(NULL, 0, held_burst, &run), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_with_core(bf, 0, NULL, &run), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(run.calls == 0);
    size_t index = 99;
    void *p = (void *)1;
    CHECK_STATUS(buddyfree_core_alloc_order(NULL, 0, &index, &p), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(index == 0 && p == NULL);
    CHECK_STATUS(buddyfree_core_free_order(NULL, 0, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    /* Core numbers past the configured cores are reduced, not refused. */
    CHECK_STATUS(buddyfree_with_core(bf, 0, held_burst, &run), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_with_core(bf, 1000003, held_burst, &run), BUDDYFREE_STATUS_OK);
    CHECK(run.calls == 2);
    CHECK(free_units(bf) == before);
}

struct worker {
    Buddyfree *bf;
    unsigned char *base;
    unsigned id;
    void *shared_block; /* freed by every thread at once: exactly one must succeed */
    int shared_freed;
    pthread_barrier_t *barrier;
};

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull ^ w->id;
    struct { unsigned char *p; size_t size, align; } live[32];
    int n = 0;
    unsigned char stamp = (unsigned char)(w->id + 1);

    w->shared_freed = buddyfree_free(w->bf, w->shared_block, UNIT * 3, 0) == BUDDYFREE_STATUS_OK;
    /* No thread allocates before every thread has tried that free: a later free could
     * otherwise hit a block reallocated in between. */
    pthread_barrier_wait(w->barrier);
    for (int step = 0; step < STEPS; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (step % 64 == 0) {
            /* A burst on a held core; two threads per core, so holds of one core queue. */
            struct held_run run = {w->base, 0, stamp, 0};
            CHECK_STATUS(buddyfree_with_core(w->bf, w->id % 2, held_burst, &run), BUDDYFREE_STATUS_OK);
            CHECK(run.calls == 1);
        } else if (n < 32 && (x & 1)) {
            size_t size = 1 + (size_t)(x >> 8) % (UNIT * 8);
            size_t align = (size_t)1 << ((x >> 40) % 10);
            void *p;
            BuddyfreeStatus st = buddyfree_alloc(w->bf, size, align, &p);
            CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_OUT_OF_MEMORY);
            if (st == BUDDYFREE_STATUS_OK) {
                CHECK((uintptr_t)p % align == 0);
                memset(p, stamp, size);
                live[n].p = p;
                live[n].size = size;
                live[n].align = align;
                n++;
            }
        } else if (n > 0) {
            n--;
            for (size_t i = 0; i < live[n].size; i++)
                CHECK(live[n].p[i] == stamp);
            /* A bad free of our own live block first (an order too small), then the real one.
             * (A double free here could hit a block another thread got in between; the
             * shared block above tests racing double frees.) */
            if (live[n].size > UNIT)
                CHECK_STATUS(buddyfree_free(w->bf, live[n].p, 1, 0), BUDDYFREE_STATUS_ORDER_MISMATCH);
            CHECK_STATUS(buddyfree_free(w->bf, live[n].p, live[n].size, live[n].align), BUDDYFREE_STATUS_OK);
        }
    }
    while (n-- > 0)
        CHECK_STATUS(buddyfree_free(w->bf, live[n].p, live[n].size, live[n].align), BUDDYFREE_STATUS_OK);
    return NULL;
}

static void check_threads(Buddyfree *bf) {
    size_t before = free_units(bf);
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    void *shared;
    CHECK_STATUS(buddyfree_alloc(bf, UNIT * 3, 0, &shared), BUDDYFREE_STATUS_OK);
    pthread_t threads[THREADS];
    struct worker workers[THREADS];
    pthread_barrier_t barrier;
    CHECK(pthread_barrier_init(&barrier, NULL, THREADS) == 0);
    for (unsigned t = 0; t < THREADS; t++) {
        workers[t] = (struct worker){bf, s.base, t, shared, 0, &barrier};
        CHECK(pthread_create(&threads[t], NULL, work, &workers[t]) == 0);
    }
    int shared_frees = 0;
    for (unsigned t = 0; t < THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0);
        shared_frees += workers[t].shared_freed;
    }
    CHECK(pthread_barrier_destroy(&barrier) == 0);
    CHECK(shared_frees == 1);
    CHECK(free_units(bf) == before);
}

/* What hold_and_park does with core 0 held, and the other thread's answer meanwhile. */
struct park_run {
    Buddyfree *bf;
    pthread_barrier_t barrier;
    int park;                /* free every unit through the held core first */
    BuddyfreeStatus answer;  /* the other thread's buddyfree_try_alloc_order(MAX_ORDER) */
    size_t index;
};

static void *try_alloc_while_held(void *arg) {
    struct park_run *r = arg;
    void *p = NULL;
    pthread_barrier_wait(&r->barrier); /* core 0 held (and its units parked) */
    r->answer = buddyfree_try_alloc_order(r->bf, MAX_ORDER, &r->index, &p);
    pthread_barrier_wait(&r->barrier); /* answered */
    return NULL;
}

/* Inside buddyfree_with_core(bf, 0, ...): if asked, frees every unit through the held core,
 * the first and the last ones a unit in every 8 spread over every block of MAX_ORDER, so that
 * the caching allocators keep a unit of each parked in core 0's cache, whether a full list
 * gives back its oldest blocks or (one block a batch) its newest; then lets the other thread
 * ask. */
static void hold_and_park(BuddyfreeCore *core, void *arg) {
    struct park_run *r = arg;
    enum { SPREAD = 8, BIG = 1 << MAX_ORDER };
    if (r->park) {
        for (size_t big = 0; big < UNITS; big += BIG)
            CHECK_STATUS(buddyfree_core_free_order(core, big, 0), BUDDYFREE_STATUS_OK);
        for (size_t i = 0; i < UNITS; i++)
            if (i % SPREAD != 0)
                CHECK_STATUS(buddyfree_core_free_order(core, i, 0), BUDDYFREE_STATUS_OK);
        for (size_t j = SPREAD; j < BIG; j += SPREAD)
            for (size_t big = 0; big < UNITS; big += BIG)
                CHECK_STATUS(buddyfree_core_free_order(core, big + j, 0), BUDDYFREE_STATUS_OK);
    }
    pthread_barrier_wait(&r->barrier);
    pthread_barrier_wait(&r->barrier);
}

/* Another thread's buddyfree_try_alloc_order(MAX_ORDER) while this one holds core 0 (having
 * parked every unit there first if `park`); a block it got is freed again. */
static BuddyfreeStatus try_alloc_beside_held_core(Buddyfree *bf, int park) {
    struct park_run r = {.bf = bf, .park = park};
    CHECK(pthread_barrier_init(&r.barrier, NULL, 2) == 0);
    pthread_t other;
    CHECK(pthread_create(&other, NULL, try_alloc_while_held, &r) == 0);
    CHECK_STATUS(buddyfree_with_core(bf, 0, hold_and_park, &r), BUDDYFREE_STATUS_OK);
    CHECK(pthread_join(other, NULL) == 0);
    CHECK(pthread_barrier_destroy(&r.barrier) == 0);
    if (r.answer == BUDDYFREE_STATUS_OK)
        CHECK_STATUS(buddyfree_free_order(bf, r.index, MAX_ORDER), BUDDYFREE_STATUS_OK);
    return r.answer;
}

/* Every unit, with the last of every 4 freed and allocated again: a magazine takes no run
 * of allocations that short for a stream (whose blocks its frees would give straight back to
 * the allocator instead of parking them: over NBBS, whose order 0 moves a block at a time). */
static void allocate_every_unit(Buddyfree *bf) {
    static unsigned char taken[UNITS];
    memset(taken, 0, sizeof taken);
    for (size_t i = 0; i < UNITS; i++) {
        size_t index = 0;
        void *p = NULL;
        CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, &p), BUDDYFREE_STATUS_OK);
        if (i % 4 == 3) {
            CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_OK);
            CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, &p), BUDDYFREE_STATUS_OK);
        }
        CHECK(index < UNITS && !taken[index]);
        taken[index] = 1;
    }
}

/* Blocks parked in per-core caches count as free, but only going back to the allocator lets
 * them merge. buddyfree_try_alloc_order gives back what the caches it can take at once
 * park, never waiting: with core 0 held (by this thread) and holding the parked units, the
 * other thread's answer is WOULD_BLOCK; unheld, this thread's is OK. After
 * buddyfree_drain_core of core 1 it is still WOULD_BLOCK; after buddyfree_drain_core of core
 * 0, or buddyfree_drain, the other thread gets its block even with core 0 held. */
static void check_drain(Buddyfree *bf, const char *name) {
    CHECK_STATUS(buddyfree_drain(NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(free_units(bf) == UNITS);
    int caches = strstr(name, "magazine") != NULL;
    allocate_every_unit(bf);
    BuddyfreeStatus st = try_alloc_beside_held_core(bf, 1);
    CHECK(caches ? st == BUDDYFREE_STATUS_WOULD_BLOCK
                 : st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    CHECK(free_units(bf) == UNITS);
    size_t index = 0;
    void *p = NULL;
    st = buddyfree_try_alloc_order(bf, MAX_ORDER, &index, &p);
    CHECK(st == BUDDYFREE_STATUS_OK || (!caches && st == BUDDYFREE_STATUS_UNSUPPORTED));
    if (st == BUDDYFREE_STATUS_OK)
        CHECK_STATUS(buddyfree_free_order(bf, index, MAX_ORDER), BUDDYFREE_STATUS_OK);
    allocate_every_unit(bf);
    try_alloc_beside_held_core(bf, 1);
    CHECK_STATUS(buddyfree_drain_core(NULL, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_drain_core(bf, 1), BUDDYFREE_STATUS_OK);
    st = try_alloc_beside_held_core(bf, 0);
    CHECK(caches ? st == BUDDYFREE_STATUS_WOULD_BLOCK
                 : st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    CHECK_STATUS(buddyfree_drain_core(bf, 0), BUDDYFREE_STATUS_OK);
    st = try_alloc_beside_held_core(bf, 0);
    CHECK(st == BUDDYFREE_STATUS_OK || (!caches && st == BUDDYFREE_STATUS_UNSUPPORTED));
    allocate_every_unit(bf);
    try_alloc_beside_held_core(bf, 1);
    CHECK_STATUS(buddyfree_drain(bf), BUDDYFREE_STATUS_OK);
    st = try_alloc_beside_held_core(bf, 0);
    CHECK(st == BUDDYFREE_STATUS_OK || (!caches && st == BUDDYFREE_STATUS_UNSUPPORTED));
    CHECK(free_units(bf) == UNITS);
}

/* buddyfree_try_free_order and buddyfree_try_free: the answers of buddyfree_free_order and
 * buddyfree_free, where they are offered; buddyfree_try_alloc with them. */
static void check_try_free(Buddyfree *bf) {
    size_t before = free_units(bf), index = 0;
    void *p = NULL;
    CHECK_STATUS(buddyfree_try_free_order(NULL, 0, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_try_free(NULL, p, UNIT, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_try_alloc(bf, UNIT, 0, NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc_order(bf, 1, &index, &p), BUDDYFREE_STATUS_OK);
    BuddyfreeStatus st = buddyfree_try_free_order(bf, index, 0);
    if (st == BUDDYFREE_STATUS_UNSUPPORTED) {
        CHECK_STATUS(buddyfree_try_free(bf, p, 2 * UNIT, 0), BUDDYFREE_STATUS_UNSUPPORTED);
        CHECK_STATUS(buddyfree_free_order(bf, index, 1), BUDDYFREE_STATUS_OK);
        return;
    }
    CHECK_STATUS(st, BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK_STATUS(buddyfree_try_free_order(bf, index + 1, 0), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_try_free_order(bf, UNITS, 0), BUDDYFREE_STATUS_OUT_OF_RANGE);
    CHECK_STATUS(buddyfree_try_free_order(bf, index, 1), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_try_free_order(bf, index, 1), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK(free_units(bf) == before);

    void *q = NULL;
    st = buddyfree_try_alloc(bf, 3 * UNIT, 0, &q);
    if (st == BUDDYFREE_STATUS_UNSUPPORTED) {
        CHECK(q == NULL);
        CHECK_STATUS(buddyfree_alloc(bf, 3 * UNIT, 0, &q), BUDDYFREE_STATUS_OK);
    } else {
        CHECK_STATUS(st, BUDDYFREE_STATUS_OK);
    }
    CHECK(free_units(bf) == before - 4);
    CHECK_STATUS(buddyfree_try_free(bf, q, UNIT, 0), BUDDYFREE_STATUS_ORDER_MISMATCH);
    CHECK_STATUS(buddyfree_try_free(bf, (char *)q + UNIT, UNIT, 0), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_try_free(bf, q, 3 * UNIT, 3), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK_STATUS(buddyfree_try_free(bf, q, 4 * UNIT, 0), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_try_free(bf, q, 4 * UNIT, 0), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK(free_units(bf) == before);
}

static void run_suite(Buddyfree *bf, const char *name, const char *kind) {
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    CHECK(s.total_units == UNITS && s.free_units == UNITS);
    CHECK(s.unit_size == UNIT && s.max_order == MAX_ORDER);
    CHECK(s.max_align >= (size_t)UNIT << MAX_ORDER && s.base != NULL);
    check_bad_requests(bf);
    check_exhaustion(bf);
    check_bulk(bf);
    check_held_core(bf);
    check_threads(bf);
    check_drain(bf, name);
    check_try_free(bf);
    printf("%s over %s: ok\n", name, kind);
}

/* An allocator that serves single units only: larger orders are refused at creation, and
 * a unit-sized block comes and goes with the usual checks. */
/* Allocator i's capability bits: the same by index and on an instance, and each call whose
 * bit is clear answers BUDDYFREE_STATUS_UNSUPPORTED, each whose bit is set does not. */
static void check_capabilities(size_t i, const char *name, uint32_t max_order) {
    const uint32_t known = BUDDYFREE_CAP_TRY_ALLOC | BUDDYFREE_CAP_TRY_FREE | BUDDYFREE_CAP_ALLOC_AT |
                           BUDDYFREE_CAP_ORDER_AT | BUDDYFREE_CAP_TRY_ORDER_AT;
    uint32_t by_index = 0, of_instance = 0;
    CHECK_STATUS(buddyfree_allocator_capabilities(i, &by_index), BUDDYFREE_STATUS_OK);
    CHECK((by_index & ~known) == 0);
    BuddyfreeConfig c = config(1, name);
    c.max_order = max_order;
    Buddyfree *bf = NULL;
    CHECK_STATUS(buddyfree_create(&c, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_capabilities(bf, &of_instance), BUDDYFREE_STATUS_OK);
    CHECK(of_instance == by_index);
    BuddyfreeStatus got = buddyfree_alloc_at(bf, UNITS - 1, 0);
    CHECK((got == BUDDYFREE_STATUS_UNSUPPORTED) == !(by_index & BUDDYFREE_CAP_ALLOC_AT));
    if (got == BUDDYFREE_STATUS_OK) {
        CHECK_STATUS(buddyfree_free_order(bf, UNITS - 1, 0), BUDDYFREE_STATUS_OK);
    }
    size_t index = 0;
    got = buddyfree_try_alloc_order(bf, 0, &index, NULL);
    CHECK((got == BUDDYFREE_STATUS_UNSUPPORTED) == !(by_index & BUDDYFREE_CAP_TRY_ALLOC));
    if (got != BUDDYFREE_STATUS_OK) {
        CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, NULL), BUDDYFREE_STATUS_OK);
    }
    got = buddyfree_try_free_order(bf, index, 0);
    CHECK((got == BUDDYFREE_STATUS_UNSUPPORTED) == !(by_index & BUDDYFREE_CAP_TRY_FREE));
    if (got != BUDDYFREE_STATUS_OK) {
        CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_OK);
    }
    void *p = NULL;
    uint32_t order = 99;
    CHECK_STATUS(buddyfree_alloc_order(bf, 0, &index, &p), BUDDYFREE_STATUS_OK);
    got = buddyfree_order_at(bf, p, &order);
    CHECK((got == BUDDYFREE_STATUS_UNSUPPORTED) == !(by_index & BUDDYFREE_CAP_ORDER_AT));
    CHECK_STATUS(buddyfree_free_order(bf, index, 0), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_drain(bf), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == UNITS);
    buddyfree_destroy(bf);
}

/* A caller built against an older header passes a shorter BuddyfreeConfig and its size: the
 * library reads that much (the set bytes after it change nothing) and defaults the rest. A
 * newer caller's longer struct is taken while the fields this library does not know are 0. */
struct first_config {
    size_t unit_size;
    size_t units;
    uint32_t max_order;
    uint32_t cores;
    const char *allocator;
};

static void check_config_sizes(const char *name) {
    union {
        struct first_config old;
        unsigned char bytes[sizeof(BuddyfreeConfig) + 64];
    } u;
    memset(&u, 0xff, sizeof u);
    u.old.unit_size = UNIT;
    u.old.units = UNITS;
    u.old.max_order = MAX_ORDER;
    u.old.cores = 2;
    u.old.allocator = name;
    Buddyfree *bf = NULL;
    CHECK_STATUS(buddyfree_create_sized((const BuddyfreeConfig *)&u, sizeof u.old, NULL, 0, NULL, 0, &bf),
                 BUDDYFREE_STATUS_OK);
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    CHECK(s.unit_size == UNIT && s.total_units == UNITS && s.max_order == MAX_ORDER);
    buddyfree_destroy(bf);
    size_t size = 0, align = 0, want_size = 0, want_align = 0;
    BuddyfreeConfig c = config(2, name);
    BuddyfreeStatus by_size = buddyfree_metadata_size_sized((const BuddyfreeConfig *)&u, sizeof u.old, &size, &align);
    CHECK(by_size == buddyfree_metadata_size(&c, &want_size, &want_align));
    CHECK(size == want_size && align == want_align);
    /* Too short for the first fields: refused, nothing built. */
    bf = (Buddyfree *)0x1;
    CHECK_STATUS(buddyfree_create_sized(&c, sizeof u.old - 1, NULL, 0, NULL, 0, &bf),
                 BUDDYFREE_STATUS_INVALID_CONFIG);
    CHECK(bf == (Buddyfree *)0x1);
    CHECK(strstr(buddyfree_last_error(), "config_size") != NULL);

    struct {
        BuddyfreeConfig current;
        uint64_t later;
    } newer = {.current = c, .later = 0};
    CHECK_STATUS(buddyfree_create_sized(&newer.current, sizeof newer, NULL, 0, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
    buddyfree_destroy(bf);
    newer.later = 1;
    bf = (Buddyfree *)0x1;
    CHECK_STATUS(buddyfree_create_sized(&newer.current, sizeof newer, NULL, 0, NULL, 0, &bf),
                 BUDDYFREE_STATUS_INVALID_CONFIG);
    CHECK(bf == (Buddyfree *)0x1);
    CHECK(strstr(buddyfree_last_error(), "does not know") != NULL);
    BuddyfreeDevice *dev = NULL;
    CHECK_STATUS(buddyfree_device_create_sized((const BuddyfreeConfig *)&u, sizeof u.old, (uint64_t)1 << 40, NULL, 0, &dev),
                 BUDDYFREE_STATUS_OK);
    uint32_t bits = 0;
    CHECK_STATUS(buddyfree_device_capabilities(dev, &bits), BUDDYFREE_STATUS_OK);
    buddyfree_device_destroy(dev);
}

static void check_order_0_allocator(const char *name) {
    BuddyfreeConfig c = config(THREADS, name);
    Buddyfree *bf = NULL;
    CHECK_STATUS(buddyfree_create(&c, NULL, 0, &bf), BUDDYFREE_STATUS_INVALID_CONFIG);
    c.max_order = 0;
    CHECK_STATUS(buddyfree_create(&c, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
    void *p = NULL;
    CHECK_STATUS(buddyfree_alloc(bf, UNIT + 1, 0, &p), BUDDYFREE_STATUS_TOO_LARGE);
    CHECK_STATUS(buddyfree_alloc(bf, UNIT, 8, &p), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == UNITS - 1);
    CHECK_STATUS(buddyfree_free(bf, p, UNIT, 8), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free(bf, p, UNIT, 8), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK(free_units(bf) == UNITS);
    buddyfree_destroy(bf);
    printf("%s (order 0 only): ok\n", name);
}

/* What a held device core's callback did: how often it ran, and the block it kept. */
struct device_run {
    int calls;
    uint64_t kept;
};

/* Inside buddyfree_device_with_core: blocks of 1 to 3 units, one freed twice (refused), one
 * kept for after the callback. */
static void device_burst(BuddyfreeDeviceCore *core, void *arg) {
    struct device_run *run = arg;
    run->calls++;
    uint64_t a = 1, b = 1;
    CHECK_STATUS(buddyfree_device_core_alloc(core, 3 * UNIT, 0, &a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_core_alloc(core, UNIT, 3, &b), BUDDYFREE_STATUS_BAD_ALIGN);
    CHECK(b == 0);
    CHECK_STATUS(buddyfree_device_core_alloc(core, UNIT, 1024, &b), BUDDYFREE_STATUS_OK);
    CHECK(a >= 0x100000000ull && a % (4 * UNIT) == 0 && b % 1024 == 0 && a != b);
    CHECK_STATUS(buddyfree_device_core_free(core, a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_core_free(core, a), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_device_core_free(core, 5), BUDDYFREE_STATUS_FOREIGN_POINTER);
    CHECK_STATUS(buddyfree_device_core_free(core, b + 1), BUDDYFREE_STATUS_MISALIGNED);
    run->kept = b;
}

/* A held core of a device instance: null arguments refused, the callback run once per call,
 * its blocks ordinary blocks after it. */
static void check_held_device(BuddyfreeDevice *dev) {
    struct device_run run = {0, 0};
    CHECK_STATUS(buddyfree_device_with_core(NULL, 0, device_burst, &run), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_device_with_core(dev, 0, NULL, &run), BUDDYFREE_STATUS_NULL_ARGUMENT);
    uint64_t addr = 1;
    CHECK_STATUS(buddyfree_device_core_alloc(NULL, UNIT, 0, &addr), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(addr == 0);
    CHECK_STATUS(buddyfree_device_core_free(NULL, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK(run.calls == 0);
    CHECK_STATUS(buddyfree_device_with_core(dev, 1000003, device_burst, &run), BUDDYFREE_STATUS_OK);
    CHECK(run.calls == 1);
    CHECK_STATUS(buddyfree_device_free(dev, run.kept), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_free(dev, run.kept), BUDDYFREE_STATUS_NOT_ALLOCATED);
}

/* A memory map: every unit reserved, two usable ranges with ragged ends freed, a block
 * taken at a position, frees by address alone; then a device instance of addresses above
 * 4 GiB. Allocators that cannot place blocks answer UNSUPPORTED. */
static void check_memory_map(const char *name) {
    BuddyfreeConfig c = config(2, name);
    Buddyfree *bf = NULL;
    CHECK_STATUS(buddyfree_create(&c, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
    BuddyfreeStatus st = buddyfree_reserve_range(bf, 0, UNITS);
    if (st == BUDDYFREE_STATUS_UNSUPPORTED) {
        buddyfree_destroy(bf);
        return;
    }
    CHECK_STATUS(st, BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == 0);
    CHECK_STATUS(buddyfree_free_range(bf, 3, 500), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_range(bf, 600, UNITS - 600), BUDDYFREE_STATUS_OK);
    CHECK(free_units(bf) == UNITS - 3 - 97);
    CHECK_STATUS(buddyfree_free_range(bf, 550, 10), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_range(bf, 550, 10), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_alloc_at(bf, 640, 6), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_alloc_at(bf, 640, 0), BUDDYFREE_STATUS_OCCUPIED);
    CHECK_STATUS(buddyfree_alloc_at(bf, 1, 0), BUDDYFREE_STATUS_OCCUPIED);
    BuddyfreeStats s;
    CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
    unsigned char *block = (unsigned char *)s.base + 640 * UNIT;
    uint32_t order = 99;
    CHECK_STATUS(buddyfree_order_at(bf, block, &order), BUDDYFREE_STATUS_OK);
    CHECK(order == 6);
    CHECK_STATUS(buddyfree_order_at(bf, block + UNIT, &order), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_free_at(bf, block), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_free_at(bf, block), BUDDYFREE_STATUS_NOT_ALLOCATED);
    /* By address alone, never waiting. */
    void *run = NULL;
    CHECK_STATUS(buddyfree_try_free_at(NULL, block), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_alloc(bf, 3 * UNIT, 0, &run), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_try_free_at(bf, (unsigned char *)run + UNIT),
                 BUDDYFREE_STATUS_NOT_ALLOCATED);
    st = buddyfree_try_free_at(bf, run);
    CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    CHECK_STATUS(buddyfree_free_at(bf, run), st == BUDDYFREE_STATUS_OK
                                                 ? BUDDYFREE_STATUS_NOT_ALLOCATED
                                                 : BUDDYFREE_STATUS_OK);
    size_t index = 0;
    void *p = NULL;
    st = buddyfree_try_alloc_order(bf, 2, &index, &p);
    CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    if (st == BUDDYFREE_STATUS_OK) {
        CHECK(p == (unsigned char *)s.base + index * UNIT);
        CHECK_STATUS(buddyfree_free_at(bf, p), BUDDYFREE_STATUS_OK);
    }
    buddyfree_destroy(bf);

    BuddyfreeDevice *dev = NULL;
    CHECK_STATUS(buddyfree_device_create(&c, 0x100000000ull + 1, &dev), BUDDYFREE_STATUS_BAD_REGION);
    CHECK_STATUS(buddyfree_device_create(&c, 0x100000000ull, &dev), BUDDYFREE_STATUS_OK);
    uint64_t a = 0, b = 0;
    CHECK_STATUS(buddyfree_device_alloc(dev, 3 * UNIT, 0, &a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_alloc(dev, UNIT, 1024, &b), BUDDYFREE_STATUS_OK);
    CHECK(a >= 0x100000000ull && b % 1024 == 0 && a != b);
    CHECK_STATUS(buddyfree_device_free(dev, a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_free(dev, a), BUDDYFREE_STATUS_NOT_ALLOCATED);
    CHECK_STATUS(buddyfree_device_free(dev, 5), BUDDYFREE_STATUS_FOREIGN_POINTER);
    CHECK_STATUS(buddyfree_device_free(dev, b), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_try_alloc(NULL, UNIT, 0, &a), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_device_try_free(NULL, a, UNIT, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    st = buddyfree_device_try_alloc(dev, 2 * UNIT, 0, &a);
    CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    if (st == BUDDYFREE_STATUS_OK) {
        CHECK(a >= 0x100000000ull && a % (2 * UNIT) == 0);
        CHECK_STATUS(buddyfree_device_try_free(dev, a, UNIT, 0), BUDDYFREE_STATUS_ORDER_MISMATCH);
        CHECK_STATUS(buddyfree_device_try_free(dev, 5, UNIT, 0), BUDDYFREE_STATUS_FOREIGN_POINTER);
        CHECK_STATUS(buddyfree_device_try_free(dev, a, 2 * UNIT, 0), BUDDYFREE_STATUS_OK);
        CHECK_STATUS(buddyfree_device_try_free(dev, a, 2 * UNIT, 0), BUDDYFREE_STATUS_NOT_ALLOCATED);
    } else {
        CHECK(a == 0);
    }
    /* By address alone, never waiting: the block's size is found without a lock held. */
    CHECK_STATUS(buddyfree_device_try_free_at(NULL, a), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_device_alloc(dev, 3 * UNIT, 0, &a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_try_free_at(dev, 5), BUDDYFREE_STATUS_FOREIGN_POINTER);
    CHECK_STATUS(buddyfree_device_try_free_at(dev, a + UNIT), BUDDYFREE_STATUS_NOT_ALLOCATED);
    st = buddyfree_device_try_free_at(dev, a);
    CHECK(st == BUDDYFREE_STATUS_OK || st == BUDDYFREE_STATUS_UNSUPPORTED);
    if (st == BUDDYFREE_STATUS_OK) {
        CHECK_STATUS(buddyfree_device_try_free_at(dev, a), BUDDYFREE_STATUS_NOT_ALLOCATED);
    } else {
        CHECK_STATUS(buddyfree_device_free(dev, a), BUDDYFREE_STATUS_OK);
    }
    CHECK_STATUS(buddyfree_device_drain(NULL), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_device_drain(dev), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_drain_core(NULL, 0), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_device_drain_core(dev, 1), BUDDYFREE_STATUS_OK);
    check_held_device(dev);
    buddyfree_device_destroy(dev);
}

/* The allocator's tables in the caller's memory: sized by buddyfree_metadata_size, refused
 * when too small or misaligned, and then the full suite on it, over a caller's region too. */
static void check_caller_metadata(const char *name) {
    BuddyfreeConfig c = config(THREADS, name);
    size_t size = 0, align = 0;
    Buddyfree *bf = NULL;
    BuddyfreeStatus st = buddyfree_metadata_size(&c, &size, &align);
    if (st == BUDDYFREE_STATUS_UNSUPPORTED) {
        CHECK_STATUS(buddyfree_create_with_metadata(&c, NULL, 0, caller_metadata,
                                                    sizeof caller_metadata, &bf),
                     BUDDYFREE_STATUS_UNSUPPORTED);
        CHECK(strstr(buddyfree_last_error(), "metadata") != NULL);
        return;
    }
    CHECK_STATUS(st, BUDDYFREE_STATUS_OK);
    CHECK(size > 0 && size <= sizeof caller_metadata && align > 0 && align <= 4096);
    CHECK_STATUS(buddyfree_metadata_size(&c, NULL, &align), BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_create_with_metadata(&c, NULL, 0, NULL, size, &bf),
                 BUDDYFREE_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(buddyfree_create_with_metadata(&c, NULL, 0, caller_metadata, size - 1, &bf),
                 BUDDYFREE_STATUS_METADATA_TOO_SMALL);
    if (align > 1) {
        CHECK_STATUS(buddyfree_create_with_metadata(&c, NULL, 0, caller_metadata + 1, size, &bf),
                     BUDDYFREE_STATUS_METADATA_MISALIGNED);
    }
    CHECK(bf == NULL); /* untouched on failure */
    BuddyfreeConfig fit = c;
    fit.units = 0; /* as many as fit in the region: the metadata is sized for UNITS */
    CHECK_STATUS(buddyfree_create_with_metadata(&fit, caller_region, sizeof caller_region,
                                                caller_metadata, size, &bf),
                 BUDDYFREE_STATUS_OK);
    run_suite(bf, name, "caller metadata and region");
    buddyfree_destroy(bf);

    BuddyfreeDevice *dev = NULL;
    CHECK_STATUS(buddyfree_device_create_with_metadata(&c, 0x100000000ull, caller_metadata, size,
                                                       &dev),
                 BUDDYFREE_STATUS_OK);
    uint64_t a = 0;
    CHECK_STATUS(buddyfree_device_alloc(dev, 3 * UNIT, 0, &a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_free(dev, a), BUDDYFREE_STATUS_OK);
    CHECK_STATUS(buddyfree_device_free(dev, a), BUDDYFREE_STATUS_NOT_ALLOCATED);
    buddyfree_device_destroy(dev);
}

int main(void) {
    check_strerror();
    size_t count = buddyfree_allocator_count();
    CHECK(count > 0);
    CHECK(buddyfree_allocator_name(count) == NULL);
    CHECK(buddyfree_allocator_max_order(count) == -1);
    uint32_t bits = 7;
    CHECK_STATUS(buddyfree_allocator_capabilities(count, &bits), BUDDYFREE_STATUS_OUT_OF_RANGE);
    CHECK(bits == 7);
    for (size_t i = 0; i < count; i++) {
        const char *name = buddyfree_allocator_name(i);
        CHECK(name != NULL);
        int32_t max_order = buddyfree_allocator_max_order(i);
        CHECK(max_order >= 0);
        check_capabilities(i, name, max_order < MAX_ORDER ? (uint32_t)max_order : MAX_ORDER);
        if (max_order < MAX_ORDER) {
            check_order_0_allocator(name);
            continue;
        }
        check_bad_configs(name);
        check_config_sizes(name);
        check_memory_map(name);
        check_caller_metadata(name);

        BuddyfreeConfig c = config(THREADS, name);
        Buddyfree *bf = NULL;
        CHECK_STATUS(buddyfree_create(&c, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
        run_suite(bf, name, "an internal mapping");
        buddyfree_destroy(bf);

        /* The caller's region, units 0 = as many as fit. */
        BuddyfreeConfig fit = c;
        fit.units = 0;
        CHECK_STATUS(buddyfree_create(&fit, caller_region, sizeof caller_region, &bf), BUDDYFREE_STATUS_OK);
        BuddyfreeStats s;
        CHECK_STATUS(buddyfree_stats(bf, &s), BUDDYFREE_STATUS_OK);
        CHECK(s.base == (void *)caller_region);
        run_suite(bf, name, "a caller's region");
        buddyfree_destroy(bf);
    }
    /* NULL names the default allocator. */
    BuddyfreeConfig d = config(1, NULL);
    Buddyfree *bf = NULL;
    CHECK_STATUS(buddyfree_create(&d, NULL, 0, &bf), BUDDYFREE_STATUS_OK);
    buddyfree_destroy(bf);
    printf("all ok\n");
    return 0;
}
