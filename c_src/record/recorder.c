/* recorder.c: the per-call work of the hooks (see recorder.h).
 *
 * Counters live in per-thread blocks so that no cache line bounces between cores: the owning
 * thread alone writes a block, readers sum every block. A block outlives its thread and is handed
 * to the next new thread with its counts intact, so totals stay exact and the list stays as long
 * as the most threads that ever ran at once.
 */
#define _GNU_SOURCE
#include "record/recorder.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/mem.h"
#include "record/account.h"
#include "record/stack.h"

#define MT_KIND_NAME(name, kind) [kind] = #name,
const char *const mt_kind_names[MT_KINDS] = {
    MT_FOR_EACH_HOOK(MT_KIND_NAME) MT_FOR_EACH_NIF_HOOK(MT_KIND_NAME)[MT_TRACK] = "track",
    [MT_UNTRACK] = "untrack",
    [MT_RESOURCE_DTOR] = "resource_dtor",
    [MT_EXTENDED_ALLOC] = "extended_alloc",
    [MT_EXTENDED_FREE] = "extended_free",
    [MT_EXTENDED_REALLOC] = "extended_realloc",
};
#undef MT_KIND_NAME

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

/* initial-exec (MT_TLS): a general-dynamic TLS access may call malloc on first touch, from
 * inside malloc. */
MT_TLS struct mt_thread mt_thread;
static MT_TLS struct block *self;
static MT_TLS uint32_t tid_cache;
/* The state of the thread's random numbers for sampling; 0 until its first sampled-mode call. */
static MT_TLS uint64_t rng;

/* A thread past its TLS destructors still allocates and frees (glibc's own cleanup runs after
 * them). It shares this block, counting atomically, rather than claim one that no destructor
 * would hand back; the block keeps no stack cache. */
static struct block orphans;

static void release_block(void *b)
{
    if (self == b) {
        self = &orphans;
        mt_thread.counts = &orphans.s;
        mt_thread.shared = 1;
    }
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
        /* a page with the reservation's own 64 bytes */
        size_t len = (size_t)sysconf(_SC_PAGESIZE) - 64, per = len / sizeof *b;
        struct block *fresh = mt_mem_reserve(len);
        if (!fresh) return NULL;
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
    if (mt_table_init(mt_config.slots, mt_config.slots_max, mt_config.sample != 0,
                      (unsigned)mt_config.lanes) != 0 ||
        mt_stack_init(mt_config.stacks, (int)mt_config.depth, mt_config.unwind) != 0) {
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
        int e = errno, guard = mt_thread.guard; /* an attach starts it with the guard held */
        mt_thread.guard = 1;
        init();
        mt_thread.guard = guard;
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

static int inert;

void mt_inert(void)
{
    __atomic_store_n(&inert, 1, __ATOMIC_RELEASE);
}

/* The first call of a thread (or of the process): start, claim a counter block. A thread holds a
 * block only once the recorder is ready. */
__attribute__((noinline, cold)) static int enter_first(enum mt_kind kind)
{
    if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != READY &&
        (__atomic_load_n(&inert, __ATOMIC_ACQUIRE) || !mt_start()))
        return 0;
    mt_thread.guard = 1;
    int e = errno; /* claim_block's mmap may fail */
    self = claim_block();
    errno = e;
    if (!self) {
        mt_thread.guard = 0;
        return 0;
    }
    mt_thread.counts = &self->s;
    mt_count(&mt_thread.counts->calls[kind]);
    return 1;
}

int mt_enter_slow(enum mt_kind kind)
{
    if (!mt_thread.guard) return enter_first(kind);
    if (mt_thread.counts) mt_count(&mt_thread.counts->untraced);
    return 0;
}

static void record(void *p, size_t size, const struct mt_site *site, unsigned vm)
{
    uint32_t id = mt_stack_id(self->cache, site);
    if (!id) mt_count(&mt_thread.counts->stacks_dropped);
    struct mt_record r = {
        .addr = (uintptr_t)p,
        .size = size,
        .time_ns = mt_now_ns(CLOCK_MONOTONIC_COARSE),
        .stack = id,
        .tid = tid(),
        .vm = vm,
        .lost = 0, /* named, so that tid's word is stored whole, not read, masked and merged */
    };
    int replaced, stored = mt_table_insert(&r, &replaced);
    if (!stored)
        mt_count(&mt_thread.counts->dropped);
    else if (replaced)
        mt_count(&mt_thread.counts->stale_replaced);
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

/* Whether a block of size bytes, whose countdown has run out (is <= 0 once charged with size),
 * is sampled. A thread's first countdown is drawn here: until then it reads 0, and its first
 * charge says nothing. */
static int sample_due(size_t size)
{
    int fresh = !rng;
    if (fresh) {
        rng = mt_now_ns(CLOCK_MONOTONIC) ^ ((uint64_t)tid() << 32) ^ (uintptr_t)&rng;
        if (!rng) rng = 1;
        mt_thread.sample_left = next_interval() - (int64_t)size;
        if (mt_thread.sample_left > 0) return 0;
    }
    mt_thread.sample_left = next_interval();
    mt_count(&mt_thread.counts->sampled);
    return 1;
}

/* Records p unless sampling leaves it out; mt_alloc_skip has charged the countdown. A tracked
 * resource is never sampled: the program asked for it by name. */
void mt_alloc_slow(void *p, size_t size, const struct mt_site *site)
{
    if (p && (!mt_config.sample || ((uintptr_t)p & MT_TRACK_BIT) || sample_due(size)))
        record(p, size, site, 0);
    mt_thread.guard = 0;
}

void mt_alloc_vm(void *p, size_t size, const struct mt_site *site)
{
    if (p && (!mt_config.sample || sample_due(size))) record(p, size, site, 1);
    mt_thread.guard = 0;
}

struct mt_weight mt_weigh(const struct mt_record *r)
{
    if (!mt_config.sample || (r->addr & MT_TRACK_BIT)) return (struct mt_weight){r->size, MT_ONE};
    double p = -expm1(-(double)r->size / (double)mt_config.sample);
    if (p <= 0) return (struct mt_weight){0, 0};
    return (struct mt_weight){(uint64_t)llround((double)r->size / p),
                              (uint64_t)llround(MT_ONE / p)};
}

/* Removes p's record into *old before p is released (free or realloc), counting a free without
 * one, and takes p's bytes off the totals when reports keep them. Returns 1 when p had a record. */
static int drop(void *p, struct mt_record *old)
{
    int had = mt_table_remove((uintptr_t)p, old);
    if (!had) mt_count(&mt_thread.counts->untracked_frees);
    if (MT_ACCOUNTING) mt_account_free(p, had ? old : NULL);
    return had;
}

void mt_forget_slow(void *p)
{
    struct mt_record old;
    if (p) drop(p, &old);
    mt_thread.guard = 0;
}

int mt_take(void *p, struct mt_record *old)
{
    return p ? drop(p, old) : 0;
}

/* A failed realloc's old record, stored again; returns 0 when no slot was left for it. */
static int put_back(const struct mt_record *old)
{
    int replaced, stored = mt_table_insert(old, &replaced);
    if (MT_ACCOUNTING) mt_account_restore(old, stored);
    return stored;
}

struct vm_records {
    uintptr_t *addr;
    size_t n, cap;
};

static void note_vm(const struct mt_record *r, void *arg)
{
    struct vm_records *v = arg;
    if (r->vm && v->n < v->cap) v->addr[v->n++] = r->addr;
}

size_t mt_forget_vm_records(void)
{
    if (!mt_active()) return 0;
    mt_guard_hold();
    size_t held = mt_table_count();
    struct vm_records v = {NULL, 0, held + held / 4 + 1024};
    size_t gone = 0, len = (v.cap ? v.cap : 1) * sizeof *v.addr;
    if ((v.addr = mt_mem_map(len))) {
        mt_table_each(note_vm, &v);
        for (size_t i = 0; i < v.n; i++) {
            struct mt_record old;
            if (!mt_table_remove(v.addr[i], &old)) continue;
            if (!old.vm) {
                put_back(&old); /* the address is a new block's, of another allocator */
                continue;
            }
            if (MT_ACCOUNTING) mt_account_free((void *)old.addr, &old);
            gone++;
        }
        mt_mem_unmap(v.addr, len);
    }
    mt_guard_release();
    return gone;
}

void mt_realloc_done(void *q, size_t size, const struct mt_site *site, int keep_old,
                     const struct mt_record *old)
{
    if (q) {
        mt_alloc_done(q, size, site);
        return;
    }
    if (keep_old && !put_back(old)) mt_count(&mt_thread.counts->dropped);
    mt_thread.guard = 0;
}

/* The table never allocates, and its turn is never awaited by a thread that holds it (a pass's own
 * inserts are dropped instead), so it may be used wherever a hook runs, even from inside mtrace;
 * before the recorder is ready there is no table and no record. */
int mt_take_unentered(void *p, struct mt_record *old)
{
    if (!p || !mt_active() || !mt_table_remove((uintptr_t)p, old)) return 0;
    if (MT_ACCOUNTING) mt_account_free(p, old);
    return 1;
}

void mt_forget_unentered(void *p)
{
    struct mt_record old;
    mt_take_unentered(p, &old);
}

void mt_put_back_unentered(const struct mt_record *old)
{
    put_back(old);
}

int mt_active(void)
{
    return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == READY;
}

void mt_guard_hold(void)
{
    mt_thread.guard++;
}
void mt_guard_release(void)
{
    mt_thread.guard--;
}

static void add_counts(struct mt_stats *sum, const struct mt_stats *s)
{
    const uint64_t *c = (const uint64_t *)s;
    uint64_t *to = (uint64_t *)sum;
    for (size_t i = 0; i < sizeof *sum / sizeof(uint64_t); i++)
        to[i] += __atomic_load_n(&c[i], __ATOMIC_RELAXED);
}

static uint64_t missed_frees, partial_since;

void mt_records_partial(uint64_t since_ns)
{
    __atomic_store_n(&partial_since, since_ns, __ATOMIC_RELAXED);
}

uint64_t mt_records_partial_since(void)
{
    return __atomic_load_n(&partial_since, __ATOMIC_RELAXED);
}

void mt_forget_missed(const struct mt_record *rec)
{
    struct mt_record now;
    mt_guard_hold();
    if (mt_take_unentered((void *)rec->addr, &now)) {
        if (now.time_ns == rec->time_ns && now.stack == rec->stack && now.tid == rec->tid &&
            now.size == rec->size)
            __atomic_fetch_add(&missed_frees, 1, __ATOMIC_RELAXED);
        else
            mt_put_back_unentered(&now);
    }
    mt_guard_release();
}

void mt_stats_read(struct mt_stats *out)
{
    *out = (struct mt_stats){0};
    add_counts(out, &orphans.s);
    for (struct block *b = __atomic_load_n(&blocks, __ATOMIC_ACQUIRE); b; b = b->next)
        add_counts(out, &b->s);
    out->missed_frees = __atomic_load_n(&missed_frees, __ATOMIC_RELAXED);
}
