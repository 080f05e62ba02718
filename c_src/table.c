/* table.c: the live table (see table.h).
 *
 * Layout: records in one array, tags in another, both from mmap. Slots come in groups of 16 so
 * that one SSE2 compare tests 16 tags; an address may live anywhere in the WINDOW groups from its
 * home group. Homes are spread over the groups that have a whole window after them, so windows
 * never wrap around the end. A tag is EMPTY, BUSY
 * (owned by one thread) or a 2..255 fingerprint of the address.
 *
 * Most records live in their home group. Each group counts its spills: the records whose home it
 * is that live further on in the window. While a group has none, an address of that home is looked
 * for in that one group, so the free of an untraced pointer usually reads 16 tags and a counter,
 * and no record. The count is raised before a spilled record's address is written and lowered
 * after it is removed, so it is never below the truth (a fork between the two leaves it above,
 * which only costs a longer look).
 *
 * A sparse table (one whose frees mostly find no record: sampling) also keeps a census, its
 * records counted by 256 buckets of their hashes (table.h). With few records nearly every bucket
 * is zero, so the free hook's check is a load from a hot kilobyte and a branch predicted right,
 * where a look at the home group is a call and a load that misses the L1 cache (it took sampling
 * from 1.10x to 1.08x on one thread). Fewer buckets fail: at 16, one free in five found its bucket
 * taken, and the mispredicted branch cost what the look had. Like a spill count, a bucket is
 * raised before its record is written and lowered after it is removed, so it is never below the
 * truth.
 *
 * The address field is the only one read outside ownership (atomically), to skip candidates that
 * merely share a fingerprint without taking them; it is written last on insert so that a record
 * whose address is set is complete, which is what the fork repair relies on.
 */
#include "table.h"

#include <emmintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

enum { TAG_EMPTY = 0, TAG_BUSY = 1 };
#define GROUP 16
#define WINDOW 4

/* A record as kept: 24 bytes. Sizes above 2^47 - 1 bytes (more than x86-64's 128 TiB of user
 * address space) are kept as that; times are milliseconds since the table was made, kept for
 * 2^34 ms (198 days), after which every record carries the last of them. */
struct slot {
    uintptr_t addr;
    uint64_t size_stack;     /* size (47 bits), stack id bits 0..16 */
    uint64_t stack_tid_time; /* stack id bits 17..24, thread (22 bits), time (34 bits) */
};

#define SIZE_BITS 47
#define STACK_LOW 17
#define TID_BITS 22
#define TIME_BITS 34

static struct slot *recs;
static uint64_t epoch_ns;
static uint8_t *tags;
static uint16_t *spills; /* by home group; at most 16 * (WINDOW - 1) each, plus fork leftovers */
static size_t nslots, groups, homes, window;
struct mt_census mt_census __attribute__((aligned(64)));

int mt_table_init(size_t slots, int sparse)
{
    void *r = mmap(NULL, slots * sizeof *recs, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return -1;
    void *t = mmap(NULL, slots, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    void *c = mmap(NULL, slots / GROUP * sizeof *spills, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED || c == MAP_FAILED) {
        munmap(r, slots * sizeof *recs);
        if (t != MAP_FAILED) munmap(t, slots);
        if (c != MAP_FAILED) munmap(c, slots / GROUP * sizeof *spills);
        return -1;
    }
    spills = c;
    recs = r;
    tags = t;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    epoch_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    nslots = slots;
    groups = slots / GROUP;
    window = groups < WINDOW ? groups : WINDOW;
    homes = groups - window + 1;
    mt_census.on = sparse;
    return 0;
}

size_t mt_table_slots(void)
{
    return nslots;
}

/* Bits 24..55 scaled to [0, homes): independent of the tag's bits 56..63. */
static inline size_t group_of(uint64_t h)
{
    return (size_t)((((h >> 24) & 0xFFFFFFFFu) * homes) >> 32);
}
static inline void census_add(uint64_t h, int n)
{
    if (mt_census.on)
        __atomic_fetch_add(&mt_census.count[MT_CENSUS_BUCKET(h)], (uint32_t)n, __ATOMIC_RELAXED);
}
static inline uint8_t tag_of(uint64_t h)
{
    uint8_t t = (uint8_t)(h >> 56);
    return t < 2 ? (uint8_t)(t + 2) : t;
}

/* Bit i set where tag i of the group equals t. The load is plain: a stale view only costs a
 * retry, because every decision is confirmed by a compare-and-swap on the tag itself. */
static inline unsigned match(size_t g, uint8_t t)
{
    __m128i v = _mm_load_si128((const __m128i *)(tags + g * GROUP));
    return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)t)));
}

/* Groups in which a record of home g0 may be: its home alone while nothing of it spilled. */
static inline size_t reach(size_t g0)
{
    return __atomic_load_n(&spills[g0], __ATOMIC_RELAXED) ? window : 1;
}

static inline void spill(size_t g0, int n)
{
    __atomic_fetch_add(&spills[g0], (uint16_t)n, __ATOMIC_RELAXED);
}

static inline uintptr_t addr_at(size_t s)
{
    return __atomic_load_n(&recs[s].addr, __ATOMIC_RELAXED);
}

static inline int take(size_t s, uint8_t t)
{
    return __atomic_compare_exchange_n(&tags[s], &t, TAG_BUSY, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static inline void give(size_t s, uint8_t t)
{
    __atomic_store_n(&tags[s], t, __ATOMIC_RELEASE);
}

static inline void pause_briefly(unsigned *spins)
{
    if (++*spins < 64)
        _mm_pause();
    else
        sched_yield();
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
}

static inline uint64_t clamp(uint64_t v, int bits)
{
    uint64_t max = ((uint64_t)1 << bits) - 1;
    return v < max ? v : max;
}

/* Fields first, the address last (see the file comment). Caller owns slot s. */
static inline void fill(size_t s, const struct mt_record *rec)
{
    uint64_t ms = rec->time_ns > epoch_ns ? (rec->time_ns - epoch_ns) / 1000000 : 0;
    recs[s].size_stack = clamp(rec->size, SIZE_BITS) | (uint64_t)rec->stack << SIZE_BITS;
    recs[s].stack_tid_time = ((uint64_t)rec->stack >> STACK_LOW & 0xFF) |
                             (uint64_t)(rec->tid & ((1u << TID_BITS) - 1))
                                 << (64 - TIME_BITS - TID_BITS) |
                             clamp(ms, TIME_BITS) << (64 - TIME_BITS);
    __atomic_store_n(&recs[s].addr, rec->addr, __ATOMIC_RELAXED);
}

/* The record in slot s, whose owner is the caller. */
static inline struct mt_record unpack(size_t s)
{
    uint64_t a = recs[s].size_stack, b = recs[s].stack_tid_time;
    return (struct mt_record){
        .addr = recs[s].addr,
        .size = a & (((uint64_t)1 << SIZE_BITS) - 1),
        .time_ns = epoch_ns + (b >> (64 - TIME_BITS)) * 1000000,
        .stack = (uint32_t)(a >> SIZE_BITS | (b & 0xFF) << STACK_LOW),
        .tid = (uint32_t)(b >> (64 - TIME_BITS - TID_BITS)) & ((1u << TID_BITS) - 1),
    };
}

int mt_table_insert(const struct mt_record *rec, int *replaced)
{
    uint64_t h = mt_table_hash(rec->addr);
    size_t g0 = group_of(h);
    uint8_t t = tag_of(h);
    *replaced = 0;
    census_add(h, 1);

    /* A stale record of this address can only be left by a free we never saw; replacing it keeps
     * one record per live address. */
    for (size_t w = 0, n = reach(g0); w < n; w++) {
        size_t g = g0 + w;
        for (unsigned m = match(g, t); m; m &= m - 1) {
            size_t s = g * GROUP + (size_t)__builtin_ctz(m);
            if (addr_at(s) != rec->addr || !take(s, t)) continue;
            if (recs[s].addr == rec->addr) {
                __atomic_store_n(&recs[s].addr, 0, __ATOMIC_RELAXED);
                fill(s, rec);
                give(s, t);
                census_add(h, -1);
                *replaced = 1;
                return 1;
            }
            give(s, t);
        }
    }
    for (size_t w = 0; w < window; w++) {
        size_t g = g0 + w;
        for (unsigned m = match(g, TAG_EMPTY); m; m &= m - 1) {
            size_t s = g * GROUP + (size_t)__builtin_ctz(m);
            if (!take(s, TAG_EMPTY)) continue;
            if (w) spill(g0, 1);
            fill(s, rec);
            give(s, t);
            return 1;
        }
    }
    census_add(h, -1);
    return 0;
}

/* The removal proper, once the quick look of mt_table_remove found a candidate. Kept apart so
 * that the common case does not pay for this loop's registers. */
__attribute__((noinline)) static int remove_slow(uintptr_t addr, size_t g0, uint8_t t,
                                                 struct mt_record *out)
{
    const __m128i want = _mm_set1_epi8((char)t), busy = _mm_set1_epi8((char)TAG_BUSY);
    unsigned spins = 0;
    for (;;) {
        int held = 0; /* a slot with our address is owned by another thread (a reader) */
        for (size_t w = 0; w < window; w++) {
            size_t g = g0 + w;
            __m128i v = _mm_load_si128((const __m128i *)(tags + g * GROUP));
            unsigned ours = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, want));
            unsigned owned = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, busy));
            for (unsigned m = ours; m; m &= m - 1) {
                size_t s = g * GROUP + (size_t)__builtin_ctz(m);
                if (addr_at(s) != addr) continue;
                if (!take(s, t)) {
                    held = 1;
                    continue;
                }
                if (recs[s].addr != addr) {
                    give(s, t);
                    continue;
                }
                if (out) *out = unpack(s);
                __atomic_store_n(&recs[s].addr, 0, __ATOMIC_RELAXED);
                give(s, TAG_EMPTY);
                if (w) spill(g0, -1);
                census_add(mt_table_hash(addr), -1);
                return 1;
            }
            for (unsigned m = owned; m; m &= m - 1)
                if (addr_at(g * GROUP + (size_t)__builtin_ctz(m)) == addr) held = 1;
        }
        if (!held) return 0;
        pause_briefly(&spins);
    }
}

int mt_table_remove(uintptr_t addr, struct mt_record *out)
{
    uint64_t h = mt_table_hash(addr);
    size_t g0 = group_of(h);
    uint8_t t = tag_of(h);
    /* Most frees are of blocks without a record (sampled out, dropped, untraced): the census says
     * so in a sparse table, else, with nothing spilled from the home group, one look at its tags
     * does. A slot of ours may be BUSY, held by a reader: then the slow path waits for it. */
    if (!mt_table_may_hold(addr)) return 0;
    __m128i v = _mm_load_si128((const __m128i *)(tags + g0 * GROUP));
    __m128i ours = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)t)),
                                _mm_cmpeq_epi8(v, _mm_set1_epi8((char)TAG_BUSY)));
    if (!_mm_movemask_epi8(ours) && reach(g0) == 1) return 0;
    return remove_slow(addr, g0, t, out);
}

size_t mt_table_each(void (*fn)(const struct mt_record *, void *), void *arg)
{
    size_t seen = 0;
    for (size_t s = 0; s < nslots; s++) {
        uint8_t t = __atomic_load_n(&tags[s], __ATOMIC_RELAXED);
        if (t < 2 || !take(s, t)) continue;
        struct mt_record copy = unpack(s);
        give(s, t);
        fn(&copy, arg);
        seen++;
    }
    return seen;
}

size_t mt_table_clear(void)
{
    size_t cleared = 0;
    for (size_t s = 0; s < nslots; s++) {
        uint8_t t = __atomic_load_n(&tags[s], __ATOMIC_RELAXED);
        if (t < 2 || !take(s, t)) continue;
        uint64_t h = mt_table_hash(recs[s].addr);
        size_t home = group_of(h);
        __atomic_store_n(&recs[s].addr, 0, __ATOMIC_RELAXED);
        give(s, TAG_EMPTY);
        if (s / GROUP != home) spill(home, -1);
        census_add(h, -1);
        cleared++;
    }
    return cleared;
}

size_t mt_table_count(void)
{
    size_t n = 0;
    for (size_t g = 0; g < groups; g++)
        n += GROUP - (size_t)__builtin_popcount(match(g, TAG_EMPTY) | match(g, TAG_BUSY));
    return n;
}

/* In the child only the forking thread exists: a BUSY slot will never be given back. A slot whose
 * address is set holds a complete record (the address is written last), so it gets its tag again;
 * any other was mid-insert or already removed, and becomes empty. */
void mt_table_after_fork(void)
{
    for (size_t g = 0; g < groups; g++)
        for (unsigned m = match(g, TAG_BUSY); m; m &= m - 1) {
            size_t s = g * GROUP + (size_t)__builtin_ctz(m);
            uintptr_t a = recs[s].addr;
            tags[s] = a ? tag_of(mt_table_hash(a)) : TAG_EMPTY;
        }
}
