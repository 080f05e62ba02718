/* recorder.c: the per-call work of the hooks (see recorder.h).
 *
 * Counters live in per-thread blocks so that no cache line bounces between cores: the owning
 * thread alone writes a block, readers sum every block. A block outlives its thread and is handed
 * to the next new thread with its counts intact, so totals stay exact and the list stays as long
 * as the most threads that ever ran at once.
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "account.h"
#include "config.h"
#include "stack.h"

/* initial-exec: a general-dynamic TLS access may call malloc on first touch, from inside malloc. */
#define TLS __thread __attribute__((tls_model("initial-exec")))

const char *const mt_kind_names[MT_KINDS] = {
    "malloc",   "calloc", "realloc", "reallocarray", "free",    "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "strdup",       "strndup", "track",          "untrack",
};

struct mt_account mt_account;

struct block {
    struct mt_stats s;
    struct mt_stack_cache *cache; /* stacks seen by the owning thread; emptied for the next one */
    struct block *next;
    int owned;
} __attribute__((aligned(64)));

enum { UNINIT, STARTING, READY, FAILED };

static struct block *blocks;
static int state = UNINIT;
static pthread_key_t exit_key;
static int have_exit_key;

static TLS struct block *self;
static TLS int guard;
static TLS uint32_t tid_cache;
/* Sampling: bytes this thread may still allocate before the next sampled one, and the state of
 * its random numbers (0 until the thread's first allocation seeds it). */
static TLS int64_t sample_left;
static TLS uint64_t rng;

/* A thread past its TLS destructors still allocates and frees (glibc's own cleanup runs after
 * them). It shares this block, counting atomically, rather than claim one that no destructor would
 * hand back. */
static struct block orphans;

static inline void bump(uint64_t *c)
{
    if (__builtin_expect(self == &orphans, 0))
        __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
    else
        __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

static void release_block(void *b)
{
    if (self == b) self = &orphans;
    __atomic_store_n(&((struct block *)b)->owned, 0, __ATOMIC_RELEASE);
}

static struct block *claim_block(void)
{
    struct block *b;
    for (b = __atomic_load_n(&blocks, __ATOMIC_ACQUIRE); b; b = b->next) {
        int free_ = 0;
        if (!__atomic_load_n(&b->owned, __ATOMIC_RELAXED) &&
            __atomic_compare_exchange_n(&b->owned, &free_, 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            break;
    }
    if (!b) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE), per = page / sizeof *b;
        struct block *fresh =
            mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (fresh == MAP_FAILED) return NULL;
        fresh[0].owned = 1;
        for (size_t i = 0; i + 1 < per; i++)
            fresh[i].next = &fresh[i + 1];
        struct block *head = __atomic_load_n(&blocks, __ATOMIC_RELAXED);
        do
            fresh[per - 1].next = head;
        while (!__atomic_compare_exchange_n(&blocks, &head, fresh, 1, __ATOMIC_RELEASE,
                                            __ATOMIC_RELAXED));
        b = fresh;
    }
    if (b->cache)
        mt_stack_cache_reset(b->cache);
    else
        b->cache = mt_stack_cache_new();
    if (have_exit_key) pthread_setspecific(exit_key, b);
    return b;
}

static void after_fork_child(void)
{
    tid_cache = 0;
    rng = 0; /* the child would otherwise sample exactly as its parent does */
    mt_table_after_fork();
    mt_stack_fork_child();
}

static void init(void)
{
    mt_config_load();
    if (mt_table_init(mt_config.slots) != 0 ||
        mt_stack_init(mt_config.stacks, mt_config.depth, mt_config.unwind) != 0) {
        static const char msg[] = "mtrace: cannot reserve memory for the tables; not recording\n";
        while (write(2, msg, sizeof msg - 1) < 0 && errno == EINTR)
            ;
        __atomic_store_n(&state, FAILED, __ATOMIC_RELEASE);
        return;
    }
    mt_account_init();
    have_exit_key = pthread_key_create(&exit_key, release_block) == 0;
    pthread_atfork(mt_stack_fork_prepare, mt_stack_fork_parent, after_fork_child);
    __atomic_store_n(&state, READY, __ATOMIC_RELEASE);
}

int mt_start(void)
{
    int expected = UNINIT;
    if (__atomic_compare_exchange_n(&state, &expected, STARTING, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
        int e = errno;
        guard = 1;
        init();
        guard = 0;
        errno = e;
    }
    while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == STARTING)
        sched_yield();
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == READY;
}

static inline uint32_t tid(void)
{
    if (__builtin_expect(!tid_cache, 0)) tid_cache = (uint32_t)syscall(SYS_gettid);
    return tid_cache;
}

/* The first call of a thread (or of the process): start, claim a counter block. */
__attribute__((noinline, cold)) static int enter_first(enum mt_kind kind)
{
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != READY && !mt_start()) return 0;
    guard = 1;
    if (!(self = claim_block())) {
        guard = 0;
        return 0;
    }
    bump(&self->s.calls[kind]);
    return 1;
}

int mt_enter(enum mt_kind kind)
{
    if (__builtin_expect(guard, 0)) {
        if (self) bump(&self->s.untraced);
        return 0;
    }
    /* A thread holds a block only once the recorder is ready. */
    if (__builtin_expect(!self, 0)) return enter_first(kind);
    guard = 1;
    bump(&self->s.calls[kind]);
    return 1;
}

static void record(void *p, size_t size, const struct mt_site *site)
{
    uint32_t id = mt_stack_id(self->cache, site);
    if (!id) bump(&self->s.stacks_dropped);
    struct mt_record r = {
        .addr = (uintptr_t)p,
        .size = size,
        .time_ns = mt_now_ns(CLOCK_MONOTONIC_COARSE),
        .stack = id,
        .tid = tid(),
    };
    int replaced, stored = mt_table_insert(&r, &replaced);
    if (!stored)
        bump(&self->s.dropped);
    else if (replaced)
        bump(&self->s.stale_replaced);
    if (MT_ACCOUNTING) mt_account_alloc(&r, stored);
}

/* An exponential draw of mean mt_config.sample, rounded up: a geometric count of bytes, so the
 * countdown stays memoryless and every block of s bytes is sampled with p = 1 - e^(-s/N)
 * whatever came before it. */
static int64_t next_interval(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    double u = (double)((rng * 0x2545F4914F6CDD1Dull) >> 11 | 1) * 0x1p-53; /* in (0, 1) */
    return (int64_t)ceil(-log(u) * (double)mt_config.sample);
}

__attribute__((noinline, cold)) static int sample_slow(size_t size)
{
    int e = errno;
    int fresh = !rng;
    if (fresh) {
        rng = mt_now_ns(CLOCK_MONOTONIC) ^ ((uint64_t)tid() << 32) ^ (uintptr_t)&rng;
        if (!rng) rng = 1;
        sample_left = next_interval() - (int64_t)size;
    }
    int hit = !fresh || sample_left <= 0;
    if (hit) {
        sample_left = next_interval();
        bump(&self->s.sampled);
    }
    errno = e;
    return hit;
}

/* Whether the block of size bytes is to be recorded. Sizes are those of blocks that exist, far
 * below 2^63. */
static inline int sampled(size_t size)
{
    if (!mt_config.sample) return 1;
    sample_left -= (int64_t)size;
    return sample_left > 0 ? 0 : sample_slow(size);
}

/* A tracked resource is never sampled: the program asked for it by name. */
static inline void allocated(void *p, size_t size, const struct mt_site *site)
{
    if (((uintptr_t)p & MT_TRACK_BIT) || sampled(size)) {
        int e = errno;
        record(p, size, site);
        errno = e;
    }
}

void mt_alloc_done(void *p, size_t size, struct mt_site site)
{
    if (p) allocated(p, size, &site);
    guard = 0;
}

struct mt_weight mt_weigh(const struct mt_record *r)
{
    if (!mt_config.sample || (r->addr & MT_TRACK_BIT)) return (struct mt_weight){r->size, MT_ONE};
    double p = -expm1(-(double)r->size / (double)mt_config.sample);
    if (p <= 0) return (struct mt_weight){0, 0};
    return (struct mt_weight){(uint64_t)llround((double)r->size / p), (uint64_t)llround(MT_ONE / p)};
}

/* Removes p's record into *old before p is released (free or realloc), counting a free without
 * one, and takes p's bytes off the totals when reports keep them. Returns 1 when p had a record. */
static int drop(void *p, struct mt_record *old)
{
    int had = mt_table_remove((uintptr_t)p, old);
    if (!had) bump(&self->s.untracked_frees);
    if (MT_ACCOUNTING) mt_account_free(p, had ? old : NULL);
    return had;
}

void mt_forget(void *p)
{
    struct mt_record old;
    if (p) drop(p, &old);
    guard = 0;
}

int mt_take(void *p, struct mt_record *old)
{
    return p ? drop(p, old) : 0;
}

void mt_realloc_done(void *q, size_t size, struct mt_site site, int keep_old,
                     const struct mt_record *old)
{
    int replaced;
    if (q)
        allocated(q, size, &site);
    else if (keep_old) {
        int stored = mt_table_insert(old, &replaced);
        if (!stored) bump(&self->s.dropped);
        if (MT_ACCOUNTING) mt_account_restore(old, stored);
    }
    guard = 0;
}

int mt_active(void)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == READY;
}

void mt_guard_hold(void)
{
    guard++;
}
void mt_guard_release(void)
{
    guard--;
}

static void add_counts(struct mt_stats *sum, const struct block *b)
{
    const uint64_t *c = (const uint64_t *)&b->s;
    uint64_t *to = (uint64_t *)sum;
    for (size_t i = 0; i < sizeof *sum / sizeof(uint64_t); i++)
        to[i] += __atomic_load_n(&c[i], __ATOMIC_RELAXED);
}

void mt_stats_read(struct mt_stats *out)
{
    *out = (struct mt_stats){0};
    add_counts(out, &orphans);
    for (struct block *b = __atomic_load_n(&blocks, __ATOMIC_ACQUIRE); b; b = b->next)
        add_counts(out, b);
}
