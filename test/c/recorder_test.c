/* recorder_test.c: the recorder, live table and stack interning, driven directly (no LD_PRELOAD):
 * the recorder never dereferences a recorded address, so made-up addresses serve as blocks. The
 * table starts at 4096 slots and grows; the checks of a table that may not grow run in a second
 * process, this program run again with "capped". Run with MTRACE_SAMPLE=1, it checks the same with
 * a sparse table (table.h): every block sampled. Prints one line per check and "N passed, M
 * failed"; exits 1 on any failure. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "blocks.h"
#include "record/beam_frames.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "record/table.h"

/* Passed and failed checks, in memory shared with the children that make checks of their own. */
static int *counts;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    __atomic_fetch_add(&counts[!ok], 1, __ATOMIC_RELAXED);
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

/* Run in a process of its own whose table may not grow (see main). */
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

/* A region spread in one generation starts in its own lane again in the next, larger one (table.c,
 * place()). While the first is drained, a free looks in each generation as that generation placed
 * its records: the spread region's in both lanes of the old one, in its own lane of the new one.
 * Run in a child, on a table that has not grown yet. */
static void test_spread_then_grown(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    unsigned grown = mt_table_grown();
    size_t spread = mt_table_slots() * 5 / 8, other = 0; /* more than one lane holds */
    each_block(&(struct blocks){alloc, 10, spread});
    check(mt_table_grown() == grown, "a region spread over both lanes, in the first table");
    while (mt_table_grown() == grown && other < 4 * mt_table_slots())
        alloc(block(11, (unsigned)other++));
    check(mt_table_grown() == grown + 1, "another region's records make the table grow");
    each_block_elsewhere((struct blocks){release, 10, spread});
    mt_stats_read(&after);
    check(after.untracked_frees - before.untracked_frees == after.dropped - before.dropped &&
              scan_owner(10).seen == 0,
          "while the table grows, another thread's frees find the spread region's every record");
    each_block_elsewhere((struct blocks){release, 11, other});
    mt_stats_read(&after);
    check(after.untracked_frees - before.untracked_frees == after.dropped - before.dropped &&
              mt_table_count() == 0,
          "and the other region's, in the grown table");
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

static int stop; /* read and written atomically */

static void *churn(void *arg)
{
    unsigned owner = (unsigned)(uintptr_t)arg;
    for (unsigned round = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); round++)
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
    size_t *bad = arg; /* shared by the readers */
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        struct scan s = scan_owner(0);
        __atomic_fetch_add(bad, s.bad, __ATOMIC_RELAXED);
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
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 6; i++)
        pthread_join(t[i], NULL);
    check(bad == 0, "4 writers, 2 readers, clears: no record read torn");
    check(children_ok, "20 forks under churn: children neither hang nor see torn records");
    for (unsigned owner = 10; owner < 14; owner++)
        check(scan_owner(owner).seen == 0, "every writer's records are gone after its frees");
}

/* Growth (table.h): four threads allocate, each from a region of its own, while other threads
 * free, read or clear, or the process forks. Each scenario runs in a child forked while the table
 * is at its starting size, and says what it checked on lines of its own; the child's exit status
 * is its number of failures. */
#define GROWERS 4
#define GROW_EACH 340000 /* a block in 8 is freed: 1.19M stay live */
#define GROW_OWNER 20

static unsigned done[GROWERS];  /* blocks allocated so far, by each grower */
static unsigned freed[GROWERS]; /* blocks freed so far: those below it that are FREED_ONE */
static uint32_t grower_tid[GROWERS];
static int growers_done; /* read and written atomically */

#define FREED_ONE(i) ((i) % 8 == 7)

static void *grower(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    __atomic_store_n(&grower_tid[k], (uint32_t)gettid(), __ATOMIC_RELEASE);
    for (unsigned i = 0; i < GROW_EACH; i++) {
        alloc(block(GROW_OWNER + k, i));
        __atomic_store_n(&done[k], i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void start_growers(pthread_t *t)
{
    for (unsigned k = 0; k < GROWERS; k++)
        pthread_create(&t[k], NULL, grower, (void *)(uintptr_t)k);
}

static int all_done(void)
{
    int end = 1;
    for (unsigned k = 0; k < GROWERS; k++)
        end &= __atomic_load_n(&done[k], __ATOMIC_ACQUIRE) == GROW_EACH;
    return end;
}

static void join_growers(pthread_t *t)
{
    for (unsigned k = 0; k < GROWERS; k++)
        pthread_join(t[k], NULL);
}

/* Frees every FREED_ONE block as soon as its grower has made it: a free from another thread than
 * the allocating one, while the table grows. */
static void *freer(void *arg)
{
    (void)arg;
    for (int busy = 1; busy;) {
        busy = 0;
        for (unsigned k = 0; k < GROWERS; k++) {
            unsigned i = freed[k], n = __atomic_load_n(&done[k], __ATOMIC_ACQUIRE);
            for (; i < n; i++) {
                if (FREED_ONE(i)) release(block(GROW_OWNER + k, i));
                __atomic_store_n(&freed[k], i + 1, __ATOMIC_RELEASE);
            }
            busy |= i < GROW_EACH;
        }
    }
    return NULL;
}

/* Times each grower's block was seen by one pass; bad: records not exactly as made. */
static uint8_t seen_at[GROWERS][GROW_EACH];
static size_t seen_bad;

static void tally(const struct mt_record *r, void *arg)
{
    (void)arg;
    unsigned k = (unsigned)(r->addr >> 32) - GROW_OWNER,
             i = (unsigned)(r->addr & 0xFFFFFFFF) / 16 - 1;
    if (k >= GROWERS || i >= GROW_EACH) return;
    const uintptr_t *ips;
    int n = mt_stack_get(r->stack, &ips);
    if (r->size != size_of(r->addr) || n < 1 || ips[0] != HOOK ||
        r->tid != __atomic_load_n(&grower_tid[k], __ATOMIC_ACQUIRE))
        seen_bad++;
    if (seen_at[k][i] < 255) seen_at[k][i]++;
}

/* One pass of mt_table_each; counts the blocks it saw other than the rules say: a block allocated
 * before the pass and not freed before its end exactly once; one freed before it never; any other
 * at most once. A grower's block done[k], and the freer's block freed[k], may be on their way. */
static size_t checked_pass(void)
{
    unsigned d0[GROWERS], f0[GROWERS], f1[GROWERS];
    for (unsigned k = 0; k < GROWERS; k++) {
        d0[k] = __atomic_load_n(&done[k], __ATOMIC_ACQUIRE);
        f0[k] = __atomic_load_n(&freed[k], __ATOMIC_ACQUIRE);
    }
    memset(seen_at, 0, sizeof seen_at);
    mt_table_each(tally, NULL);
    for (unsigned k = 0; k < GROWERS; k++)
        f1[k] = __atomic_load_n(&freed[k], __ATOMIC_ACQUIRE);
    size_t wrong = 0;
    for (unsigned k = 0; k < GROWERS; k++)
        for (unsigned i = 0; i < GROW_EACH; i++) {
            unsigned n = seen_at[k][i];
            int gone = FREED_ONE(i) && i < f0[k];
            int kept = i < d0[k] && !(FREED_ONE(i) && i <= f1[k]); /* f1: maybe being freed */
            wrong += n > 1 || (gone && n) || (kept && n != 1);
        }
    return wrong;
}

static void *pass_reader(void *arg)
{
    size_t *r = arg; /* passes, wrong counts */
    while (!__atomic_load_n(&growers_done, __ATOMIC_RELAXED)) {
        r[1] += checked_pass();
        r[0]++;
    }
    return NULL;
}

static void test_growth_reads_and_frees(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    unsigned grown = mt_table_grown();
    size_t slots = mt_table_slots();
    pthread_t t[GROWERS], f, r;
    size_t passes[2] = {0, 0};
    start_growers(t);
    pthread_create(&f, NULL, freer, NULL);
    pthread_create(&r, NULL, pass_reader, passes);
    join_growers(t);
    __atomic_store_n(&growers_done, 1, __ATOMIC_RELAXED);
    pthread_join(f, NULL);
    pthread_join(r, NULL);
    mt_stats_read(&after);
    char what[200];
    snprintf(what, sizeof what,
             "growth from %zu to %zu slots (%u times), 4 threads, %u blocks: none dropped", slots,
             mt_table_slots(), mt_table_grown() - grown, GROWERS * GROW_EACH);
    check(after.dropped == before.dropped && mt_table_grown() - grown >= 8 &&
              mt_table_slots() >= 1048576,
          what);
    check(after.untracked_frees == before.untracked_frees,
          "frees from another thread during growth all find their records");
    seen_bad = 0;
    size_t wrong = checked_pass();
    size_t live = 0;
    for (unsigned k = 0; k < GROWERS; k++)
        for (unsigned i = 0; i < GROW_EACH; i++)
            live += seen_at[k][i];
    check(wrong == 0 && seen_bad == 0 && live == GROWERS * (GROW_EACH - GROW_EACH / 8),
          "every live record is found once, with its own size, stack and thread");
    snprintf(what, sizeof what, "%zu passes of a reader during growth (at least 2)", passes[0]);
    check(passes[0] >= 2, what);
    check(passes[1] == 0 && seen_bad == 0,
          "each pass saw every record live throughout it exactly once, none twice, none torn");

    /* Each grower's blocks freed by another thread than its own. */
    mt_stats_read(&before);
    for (unsigned k = 0; k < GROWERS; k++) {
        unsigned owner = GROW_OWNER + (k + 1) % GROWERS;
        for (unsigned i = 0; i < GROW_EACH; i++)
            if (!FREED_ONE(i)) release(block(owner, i));
    }
    mt_stats_read(&after);
    check(after.untracked_frees == before.untracked_frees && mt_table_count() == 0,
          "after growth, another thread's frees find every record");
}

/* Clears made just as the table has grown, while its predecessor drains: each removes every
 * record there from its start to its end and leaves the later ones. A grower's block d1[k] may
 * have been recorded before the clear ended, its done[k] stored after: either way is right. */
static void test_growth_clear(void)
{
    struct mt_stats before, after;
    mt_stats_read(&before);
    pthread_t t[GROWERS];
    unsigned d0[GROWERS], d1[GROWERS], clears = 0;
    start_growers(t);
    for (unsigned g = mt_table_grown(); !all_done();) {
        if (mt_table_grown() == g) continue;
        g = mt_table_grown();
        for (unsigned k = 0; k < GROWERS; k++)
            d0[k] = __atomic_load_n(&done[k], __ATOMIC_ACQUIRE);
        mt_table_clear();
        for (unsigned k = 0; k < GROWERS; k++)
            d1[k] = __atomic_load_n(&done[k], __ATOMIC_ACQUIRE);
        clears++;
    }
    join_growers(t);
    mt_stats_read(&after);
    seen_bad = 0;
    memset(seen_at, 0, sizeof seen_at);
    mt_table_each(tally, NULL);
    size_t wrong = 0;
    long first = 0; /* the first wrong block, from its grower's d1 */
    for (unsigned k = 0; k < GROWERS; k++)
        for (unsigned i = 0; i < GROW_EACH; i++) {
            unsigned n = seen_at[k][i];
            int bad = n > 1 || (i < d0[k] && n) || (i > d1[k] && n != 1);
            if (bad && !wrong++) first = (long)i - (long)d1[k];
        }
    char what[200];
    snprintf(what, sizeof what, "%u clears made as the table grew (at least 2)", clears);
    check(clears >= 2, what);
    snprintf(what, sizeof what,
             "the last clear removed what it found and kept what came after; nothing dropped or "
             "torn (%zu wrong, the first at d1%+ld; %zu torn)",
             wrong, first, seen_bad);
    check(wrong == 0 && seen_bad == 0 && after.dropped == before.dropped, what);
    mt_table_clear();
}

/* Forks made just as the table has grown, while its predecessor drains: the child finds every
 * block allocated before the fork once, exact, frees it, and can go on growing. */
static void test_growth_fork(void)
{
    pthread_t t[GROWERS];
    pid_t pids[6];
    int forks = 0, children_ok = 1;
    start_growers(t);
    for (unsigned g = mt_table_grown(); forks < 6 && !all_done();) {
        if (mt_table_grown() == g) continue;
        g = mt_table_grown();
        pid_t pid = fork();
        if (pid == 0) {
            alarm(90);
            struct mt_stats before, after;
            seen_bad = 0;
            memset(seen_at, 0, sizeof seen_at);
            mt_table_each(tally, NULL);
            int ok = seen_bad == 0;
            /* A grower's block d[k] was being allocated at the fork: it may have a record. */
            unsigned d[GROWERS];
            for (unsigned k = 0; k < GROWERS; k++)
                d[k] = done[k];
            for (unsigned k = 0; k < GROWERS; k++)
                for (unsigned i = 0; i < GROW_EACH; i++)
                    ok &= seen_at[k][i] == (i < d[k]) || (i == d[k] && seen_at[k][i] < 2);
            size_t more = 2 * mt_table_slots();
            unsigned grown = mt_table_grown();
            mt_stats_read(&before);
            for (unsigned i = 0; i < more; i++)
                alloc(block(99, i));
            for (unsigned k = 0; k < GROWERS; k++)
                for (unsigned i = 0; i < d[k]; i++)
                    release(block(GROW_OWNER + k, i));
            for (unsigned i = 0; i < more; i++)
                release(block(99, i));
            mt_stats_read(&after);
            _exit(ok && mt_table_grown() > grown && after.dropped == before.dropped &&
                          after.untracked_frees == before.untracked_frees &&
                          mt_table_count() <= GROWERS
                      ? 0
                      : 1);
        }
        pids[forks++] = pid;
    }
    join_growers(t);
    for (int i = 0; i < forks; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        children_ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    char what[200];
    snprintf(what, sizeof what, "%d forks made as the table grew (at least 2)", forks);
    check(forks >= 2, what);
    check(children_ok, "each child found every block allocated before the fork once and exact, "
                       "freed them all, and grew on");
    mt_table_clear();
}

/* Runs test in a child of this process, whose table is still at its starting size. */
static void in_child(void (*test)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(90);
        test();
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        check(0, "a child making checks ended early");
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
        {0x7f0000001230, ((uint64_t)1 << 45) - 1, now + 5000000, (1u << 24), (1u << 22) - 1, 1, 0},
        {0x7f0000001240, 1, now + 1234000000, 1, 1, 0, 0},
        {0x7f0000001250, 0, now, 0x155555, 0x2aaaaa, 1, 0},
        {0x7f0000001260, (uint64_t)1 << 50, now, 7, 3, 0, 0},
    };
    int ok = 1, replaced;
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        struct mt_record out;
        if (!mt_table_insert(&in[i], &replaced) || !mt_table_remove(in[i].addr, &out)) {
            ok = 0;
            continue;
        }
        uint64_t size = i == 3 ? ((uint64_t)1 << 45) - 1 : in[i].size;
        ok &= out.addr == in[i].addr && out.size == size && out.stack == in[i].stack &&
              out.tid == in[i].tid && out.vm == in[i].vm && out.time_ns <= in[i].time_ns &&
              in[i].time_ns - out.time_ns < 1000000 && !out.lost;
    }
    check(ok, "packed records keep address, size (up to 2^45 - 1), the VM bit, stack, thread and "
              "time (ms)");
}

/* The lost bit: set on the record a copy names, kept by it, not given to a later record of the
 * same address, and never set on another block's record. */
static void test_lost_bit(void)
{
    struct mt_record rec = {0x7f0000002230, 48, 0, (1u << 24) | (1u << 17) | 5, 77, 0, 0}, out,
                     copy;
    int replaced, ok = mt_table_insert(&rec, &replaced);
    ok &= mt_table_remove(rec.addr, &copy) && !copy.lost && mt_table_insert(&copy, &replaced);
    ok &= mt_table_set_lost(&copy) == 1;
    ok &= mt_table_remove(rec.addr, &out) && out.lost && out.size == 48 && out.stack == rec.stack;
    /* a free, then a new block at the address: its record is not lost, nor made so by a copy of
     * the old one */
    struct mt_record again = rec;
    again.stack = 9;
    ok &= mt_table_insert(&again, &replaced) && mt_table_set_lost(&copy) == 0;
    ok &= mt_table_remove(rec.addr, &out) && !out.lost && mt_table_set_lost(&copy) == 0;
    check(ok, "the lost bit stays with its record only, and a copy of another record sets none");
}

/* A table that may not grow, in a process of its own: the table is made once per process. Its
 * lines go to the same output; its status says whether they all passed. */
static void test_capped(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MTRACE_SLOTS_MAX", "8192", 1);
        execl("/proc/self/exe", "recorder_test", "capped", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a table capped at its start (MTRACE_SLOTS_MAX) passes its checks above");
}

/* In a child (a fork takes the answer afresh, for the child's pid): a perf map at the child's
 * path, held open (as the BEAM holds its own) or left closed (as an earlier process of the same
 * pid leaves one). Exits 0 when mt_beam_perf_map() answers `held`. */
static void perf_map_child(int held)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) _exit(2);
    if (write(fd, "7f0000000000 10 Elixir.Stale:left/0\n", 36) != 36) _exit(2);
    if (!held) close(fd);
    int answer = mt_beam_perf_map();
    unlink(path);
    _exit(answer == held ? 0 : 1);
}

static void test_perf_map(void)
{
    for (int held = 0; held < 2; held++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) perf_map_child(held);
        int status;
        waitpid(pid, &status, 0);
        check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              held ? "a perf map the process holds open is the BEAM's"
                   : "a perf map the process does not hold is one left behind, not its own");
    }
}

int main(int argc, char **argv)
{
    int capped = argc > 1 && strcmp(argv[1], "capped") == 0;
    counts =
        mmap(NULL, 2 * sizeof *counts, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (counts == MAP_FAILED) return 2;
    setenv("MTRACE_SLOTS", capped ? "8192" : "4096", 1);
    if (!capped) unsetenv("MTRACE_SLOTS_MAX");
    setenv("MTRACE_LANES", "2", 1);
    check(mt_start() && mt_active(), "the recorder starts without LD_PRELOAD");
    if (capped) {
        test_full_table();
        printf("capped table: %d passed, %d failed\n", counts[0], counts[1]);
        return counts[1] != 0;
    }
    check(mt_table_slots() == 4096 && mt_table_slots_max() == (size_t)1 << 26,
          "the table starts at MTRACE_SLOTS, 4096 slots, and may grow to 2^26");
    in_child(test_growth_reads_and_frees);
    in_child(test_growth_clear);
    in_child(test_growth_fork);
    in_child(test_spread_then_grown);
    test_capped();
    test_perf_map();
    test_basics();
    test_realloc();
    test_guarded_free();
    test_lanes();
    test_spread_seen_late();
    test_regions();
    test_interning();
    test_threads();
    test_packing();
    test_lost_bit();
    test_census();
    printf("%d passed, %d failed\n", counts[0], counts[1]);
    return counts[1] != 0;
}
