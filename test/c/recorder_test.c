/* recorder_test.c: the recorder, live table and stack interning, driven directly (no LD_PRELOAD):
 * the recorder never dereferences a recorded address, so made-up addresses serve as blocks. Run
 * with MTRACE_SAMPLE=1, it checks the same with a sparse table (table.h): every block sampled.
 * Prints one line per check and "N passed, M failed"; exits 1 on any failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../c_src/recorder.h"
#include "../../c_src/stack.h"
#include "../../c_src/table.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (ok)
        passed++;
    else
        failed++;
}

#define HOOK ((uintptr_t)0x1234)
/* No frame has this stack pointer: the recorder falls back to a plain unwind. */
#define SITE (&(struct mt_site){HOOK, 0x5678, 16})
/* Each made-up block's size is a function of its address: a record whose size does not match its
 * address was torn or misattributed. Sizes start at 64 bytes, so that under MTRACE_SAMPLE=1 every
 * block is sampled but for a chance of e^-64. */
static uint64_t size_of(uintptr_t a)
{
    return (a >> 4) * 2654435761u % 100000 + 64;
}
static void *block(unsigned owner, unsigned i)
{
    return (void *)(((uintptr_t)owner << 32) + 16 * (uintptr_t)(i + 1));
}

static void alloc(void *p)
{
    if (mt_enter(MT_MALLOC)) mt_alloc_done(p, size_of((uintptr_t)p), SITE);
}

/* As the free hook does it. */
static void release(void *p)
{
    if (mt_enter(MT_FREE))
        mt_forget(p);
    else
        mt_forget_unentered(p);
}

struct scan {
    size_t seen, bad;
    unsigned owner; /* 0: any */
};

static void verify(const struct mt_record *r, void *arg)
{
    struct scan *s = arg;
    const uintptr_t *ips;
    int n = mt_stack_get(r->stack, &ips);
    if (s->owner && (r->addr >> 32) != s->owner) return;
    s->seen++;
    if (r->size != size_of(r->addr) || n < 1 || ips[0] != HOOK) s->bad++;
}

static struct scan scan_owner(unsigned owner)
{
    struct scan s = {0, 0, owner};
    mt_table_each(verify, &s);
    return s;
}

static void test_basics(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    for (unsigned i = 0; i < 100; i++)
        alloc(block(1, i));
    struct scan s = scan_owner(1);
    check(s.seen == 100 && s.bad == 0, "100 records, each with its own size and the hook frame");
    for (unsigned i = 0; i < 100; i += 2)
        release(block(1, i));
    release(block(1, 100000)); /* never recorded */
    s = scan_owner(1);
    check(s.seen == 50 && s.bad == 0, "frees remove exactly their records");
    mt_stats_read(&after);
    check(after.calls[MT_MALLOC] - before.calls[MT_MALLOC] == 100 &&
              after.calls[MT_FREE] - before.calls[MT_FREE] == 51,
          "call counters move by exactly the calls made");
    check(after.untracked_frees - before.untracked_frees == 1, "a free without record is counted");

    alloc(block(1, 1)); /* address handed out again: its free was never seen */
    mt_stats_read(&after);
    check(scan_owner(1).seen == 50 && after.stale_replaced - before.stale_replaced == 1,
          "a stale record is replaced, not duplicated");
    check(mt_table_clear() >= 50 && scan_owner(1).seen == 0, "clear empties the table");
}

static void test_realloc(void)
{
    struct mt_record old;
    alloc(block(2, 1));
    mt_enter(MT_REALLOC);
    int had = mt_take(block(2, 1), &old);
    check(had && scan_owner(2).seen == 0, "realloc takes the old record out before the real call");
    mt_realloc_done(NULL, 999, SITE, 1, &old);
    struct scan s = scan_owner(2);
    check(s.seen == 1 && s.bad == 0, "a failed realloc puts the old record back intact");

    mt_enter(MT_REALLOC);
    had = mt_take(block(2, 1), &old);
    mt_realloc_done(NULL, 0, SITE, 0, &old);
    check(had && scan_owner(2).seen == 0, "realloc(p, 0) leaves no record");

    alloc(block(2, 2));
    mt_enter(MT_REALLOC);
    mt_take(block(2, 2), &old);
    mt_realloc_done(block(2, 3), size_of((uintptr_t)block(2, 3)), SITE, 1, &old);
    s = scan_owner(2);
    check(s.seen == 1 && s.bad == 0, "a moved block has one record, at its new address");
    mt_table_clear();
}

static void test_full_table(void)
{
    struct mt_stats before, after;
    size_t slots = mt_table_slots();
    mt_stats_read(&before);
    for (unsigned i = 0; i < 4 * slots; i++)
        alloc(block(3, i));
    mt_stats_read(&after);
    struct scan s = scan_owner(3);
    uint64_t dropped = after.dropped - before.dropped;
    check(s.seen + dropped == 4 * slots, "every allocation is either held or counted as dropped");
    check(s.seen > slots / 2 && s.seen <= slots && s.bad == 0,
          "a full table holds most slots and misattributes nothing");
    mt_table_clear();
}

/* A free from a thread inside mtrace (the NIF, the symbolizer, or the unwinder) records nothing,
 * but must not leave the block's record behind. */
static void test_guarded_free(void)
{
    alloc(block(6, 1));
    alloc(block(6, 2));
    mt_guard_hold();
    release(block(6, 1));
    mt_guard_release();
    struct scan s = scan_owner(6);
    check(s.seen == 1 && s.bad == 0, "a free made inside mtrace still removes its record");
    mt_table_clear();
}

/* op (alloc or release) on blocks 0..n-1 of owner, on this thread or on a thread of its own. */
struct blocks {
    void (*op)(void *);
    unsigned owner;
    size_t n;
};

static void *each_block(void *arg)
{
    const struct blocks *b = arg;
    for (unsigned i = 0; i < b->n; i++)
        b->op(block(b->owner, i));
    return NULL;
}

static void each_block_elsewhere(struct blocks b)
{
    pthread_t t;
    pthread_create(&t, NULL, each_block, &b);
    pthread_join(t, NULL);
}

/* Lanes (table.h): the records of one region fill its lane and are then spread over both, and
 * frees from another thread find every one of them. */
static void test_lanes(void)
{
    check(mt_table_lanes() == (mt_census.on ? 1u : 2u),
          mt_census.on ? "a sparse table has one lane" : "MTRACE_LANES=2 gives two lanes");
    struct mt_stats before, after;
    mt_stats_read(&before);
    size_t n = mt_table_slots() * 3 / 4;
    each_block(&(struct blocks){alloc, 7, n});
    struct scan s = scan_owner(7);
    each_block_elsewhere((struct blocks){release, 7, n});
    mt_stats_read(&after);
    uint64_t dropped = after.dropped - before.dropped;
    check(s.seen + dropped == n && dropped <= n / 100 && s.bad == 0,
          "one region fills three quarters of the table, across its lane, with under 1% dropped");
    check(after.untracked_frees - before.untracked_frees == dropped && mt_table_count() == 0,
          "another thread's frees find every record, in every lane");
}

/* A region spread by another thread after this one last looked at it: this thread's frees still
 * find the records that went to other lanes. */
static void test_spread_seen_late(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    alloc(block(8, 100000));
    release(block(8, 100000));
    size_t n = mt_table_slots() / 2;
    each_block_elsewhere((struct blocks){alloc, 8, n});
    each_block(&(struct blocks){release, 8, n});
    mt_stats_read(&after);
    check(after.untracked_frees - before.untracked_frees == after.dropped - before.dropped &&
              mt_table_count() == 0,
          "a region spread by another thread: this thread's frees find every record");
}

/* More regions than the region map holds: those it has no room for still keep one lane each. */
static void test_regions(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    void *kept[3000 / 8];
    for (unsigned r = 0; r < 3000; r++) {
        void *p = (void *)(((uintptr_t)1 << 44) + ((uintptr_t)r << 26) + 16);
        alloc(p);
        if (r % 8)
            release(p);
        else
            kept[r / 8] = p;
    }
    for (unsigned i = 0; i < 3000 / 8; i++)
        release(kept[i]);
    release((void *)((uintptr_t)3 << 45)); /* a region never seen */
    mt_stats_read(&after);
    check(after.untracked_frees - before.untracked_frees == after.dropped - before.dropped + 1 &&
              mt_table_count() == 0,
          "3000 regions: every record is found by its free");
}

static void test_interning(void)
{
    uintptr_t a[5] = {HOOK, 10, 20, 30, 40}, b[5] = {HOOK, 10, 20, 30, 41};
    uint32_t ia = mt_stack_intern(a, 5), ia2 = mt_stack_intern(a, 5), ib = mt_stack_intern(b, 5);
    const uintptr_t *f;
    check(ia && ia == ia2 && ib && ib != ia, "equal stacks share an id, different ones do not");
    check(mt_stack_get(ib, &f) == 5 && f[4] == 41, "an id gives back its frames");
}

static volatile int stop;

static void *churn(void *arg)
{
    unsigned owner = (unsigned)(uintptr_t)arg;
    for (unsigned round = 0; !stop; round++)
        for (unsigned i = 0; i < 512; i++) {
            alloc(block(owner, i));
            if (i >= 64) release(block(owner, i - 64));
            if (i == 511)
                for (unsigned j = 448; j < 512; j++)
                    release(block(owner, j));
        }
    return NULL;
}

static void *reader(void *arg)
{
    size_t *bad = arg;
    while (!stop) {
        struct scan s = scan_owner(0);
        *bad += s.bad;
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[6];
    size_t bad = 0;
    for (unsigned i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(10 + i));
    pthread_create(&t[4], NULL, reader, &bad);
    pthread_create(&t[5], NULL, reader, &bad);
    for (int i = 0; i < 20; i++) {
        usleep(20000);
        mt_table_clear();
    }
    /* fork while writers hold slots: the child must neither hang nor see a torn record */
    int children_ok = 1;
    for (int i = 0; i < 20; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(10);
            for (unsigned j = 0; j < 1000; j++)
                alloc(block(99, j));
            for (unsigned j = 0; j < 1000; j++)
                release(block(99, j));
            struct scan s = scan_owner(0);
            _exit(s.bad == 0 && scan_owner(99).seen == 0 ? 0 : 1);
        }
        int status;
        waitpid(pid, &status, 0);
        children_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    stop = 1;
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    check(bad == 0, "4 writers, 2 readers, clears: no record read torn");
    check(children_ok, "20 forks under churn: children neither hang nor see torn records");
    for (unsigned owner = 10; owner < 14; owner++)
        check(scan_owner(owner).seen == 0, "every writer's records are gone after its frees");
}

static void count_bucket(const struct mt_record *r, void *arg)
{
    ((uint32_t *)arg)[MT_CENSUS_BUCKET(mt_table_hash(r->addr))]++;
}

/* With no thread inside the table, a sparse table's census counts exactly the records it holds. */
static void test_census(void)
{
    static uint32_t held[MT_CENSUS_BUCKETS];
    for (unsigned i = 0; i < 300; i++)
        alloc(block(5, i));
    for (unsigned i = 0; i < 300; i += 3)
        release(block(5, i));
    mt_table_each(count_bucket, held);
    int same = 1;
    for (int b = 0; b < MT_CENSUS_BUCKETS; b++)
        same &= mt_census.count[b] == (mt_census.on ? held[b] : 0);
    check(same, mt_census.on ? "the census counts every record in its bucket"
                             : "a table that is not sparse keeps no census");
    mt_table_clear();
}

/* The table keeps records packed: every field must come back as it went in, up to its limit. */
static void test_packing(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    struct mt_record in[] = {
        {0x7f0000001230, ((uint64_t)1 << 47) - 1, now + 5000000, (1u << 24), (1u << 22) - 1},
        {0x7f0000001240, 1, now + 1234000000, 1, 1},
        {0x7f0000001250, 0, now, 0x155555, 0x2aaaaa},
        {0x7f0000001260, (uint64_t)1 << 50, now, 7, 3},
    };
    int ok = 1, replaced;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        struct mt_record out;
        if (!mt_table_insert(&in[i], &replaced) || !mt_table_remove(in[i].addr, &out)) {
            ok = 0;
            continue;
        }
        uint64_t size = i == 3 ? ((uint64_t)1 << 47) - 1 : in[i].size;
        ok &= out.addr == in[i].addr && out.size == size && out.stack == in[i].stack &&
              out.tid == in[i].tid && out.time_ns <= in[i].time_ns &&
              in[i].time_ns - out.time_ns < 1000000;
    }
    check(ok, "packed records keep address, size (up to 2^47 - 1), stack, thread and time (ms)");
}

int main(void)
{
    setenv("MTRACE_SLOTS", "8192", 1);
    setenv("MTRACE_LANES", "2", 1);
    check(mt_start() && mt_active(), "the recorder starts without LD_PRELOAD");
    test_basics();
    test_realloc();
    test_full_table();
    test_guarded_free();
    test_lanes();
    test_spread_seen_late();
    test_regions();
    test_interning();
    test_threads();
    test_packing();
    test_census();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
