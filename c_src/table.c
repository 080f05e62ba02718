/* table.c: the live table (see table.h).
 *
 * Layout: records in one array, tags in another, both from mmap. Slots come in groups of 16 so
 * that one SSE2 compare tests 16 tags. The groups are cut into lanes, each starting on a tag line
 * of its own. An address's home group is in its lane (see place()); the address may live
 * anywhere in the WINDOW groups from there. Homes are spread over the groups of a lane that have a
 * whole window after them, so windows never leave their lane. A tag is EMPTY, BUSY (owned by one
 * thread) or a 2..255 fingerprint of the address.
 *
 * Why lanes: with one shared array, two threads allocating at once both wrote tag lines all over
 * it, and every such line moved between the cores (bench/mbench, two threads, frame pointers:
 * 1.84x untraced; with a lane per CPU, 1.50x). A lane per thread instead would make each thread's
 * share of the table a fraction of it, and a free from another thread would have to search every
 * lane. A region's lane is a function of the address, so a free looks in one place whichever
 * thread makes it, and one thread with a large heap (many regions) still uses every lane. A region
 * that fills its window in its lane is spread: its new records go by hash over every lane, so one
 * busy region still has the whole table. Before, it spilled into one group of each other lane, and
 * once its lane was full every insert and free looked through all of them (one thread, 3000 live
 * blocks in 4096 slots: 1.60x untraced without lanes, 1.91x so, 1.80x spread; the rest is the
 * second lane a spread region's stale records and frees are looked for in). The region's word is
 * looked up in a small map, remembered per thread for its last region.
 *
 * Most records live in their home group. Each group counts its spills: the records whose home it
 * is that live further on in the window. While a group has none, an address
 * of that home is looked for in that one group, so the free of an untraced pointer usually reads
 * 16 tags and a counter, and no record. The count is raised before a spilled record's address is
 * written and lowered after it is removed, so it is never below the truth (a fork between the two
 * leaves it above, which only costs a longer look).
 *
 * A sparse table (one whose frees mostly find no record: sampling) also keeps a census, its
 * records counted by 4096 buckets of their hashes (table.h). With few records nearly every bucket
 * is zero, so the free hook's check is a load from a hot array and a branch predicted right,
 * where a look at the home group is a call and a load that misses the L1 cache (it took sampling
 * from 1.10x to 1.08x on one thread). Fewer buckets fail: at 16, one free in five found its bucket
 * taken, and the mispredicted branch cost what the look had; at 256, sampling a 2 GB heap (4000
 * records) left no bucket empty, and every free looked at the slots (1.12x; 1.08x with 4096). At
 * 16384 the census no longer stays in the cache, and gained nothing. Like a spill count, a bucket
 * is raised before its record is written and lowered after it is removed, so it is never below the
 * truth.
 *
 * The address field is the only one read outside ownership (atomically), to skip candidates that
 * merely share a fingerprint without taking them; it is written last on insert so that a record
 * whose address is set is complete, which is what the fork repair relies on.
 */
#include "table.h"

#include <emmintrin.h>
#include <sched.h>
#include <time.h>

#include "mem.h"

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
/* By home group; at most 16 * (WINDOW - 1) each, plus fork leftovers. */
static uint16_t *spills;
static size_t nslots, groups, homes, window;
static unsigned lanes;
static size_t lane_groups;
struct mt_census mt_census __attribute__((aligned(64)));

/* Regions, in the order they are first seen: (region + 1) << 8 | SPREAD | lane, 0 while free. An
 * entry is written once, but for its SPREAD bit, which is set once: a region keeps its lane for
 * the life of the process. */
#define REGION_SHIFT 26
#define REGIONS 1024
#define REGION_PROBES 16
#define SPREAD 0x80
#define UNMAPPED 0x40 /* a region the map has no room for: spread, with no lane of its own */
#define NO_LANE MT_TABLE_LANES_MAX
static uint64_t regions[REGIONS];
static unsigned regions_seen;
static unsigned spreads; /* regions spread so far: a thread's cached word is good while unchanged */

int mt_table_init(size_t slots, int sparse, unsigned want_lanes)
{
    /* mem.h's memory: the records name every live block, and must never be a root. */
    void *r = mt_mem_map(slots * sizeof *recs);
    void *t = mt_mem_map(slots);
    void *c = mt_mem_map(slots / GROUP * sizeof *spills);
    if (!r || !t || !c) {
        if (r) mt_mem_unmap(r, slots * sizeof *recs);
        if (t) mt_mem_unmap(t, slots);
        if (c) mt_mem_unmap(c, slots / GROUP * sizeof *spills);
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
    /* A lane starts on a tag line of its own (4 groups) and holds at least 2048 slots: a region
     * whose live set outgrows its lane is spread, which costs it a second lane to look in (one
     * thread, 1000 live blocks, 4096 slots cut in 8 lanes of 512: 1.44x untraced to 1.66x). A
     * sparse table is written too rarely for lanes to pay: they would only make a full table's
     * lookups longer (sampling a 2 GB heap in 4096 slots ran 22% slower with two lanes). */
    lanes = sparse || want_lanes < 1          ? 1
            : want_lanes > MT_TABLE_LANES_MAX ? MT_TABLE_LANES_MAX
                                              : want_lanes;
    while (lanes > 1 && groups / lanes < 128)
        lanes--;
    lane_groups = lanes > 1 ? groups / lanes / 4 * 4 : groups;
    window = lane_groups < WINDOW ? lane_groups : WINDOW;
    homes = lane_groups - window + 1;
    mt_census.on = sparse;
    return 0;
}

size_t mt_table_slots(void)
{
    return nslots;
}

unsigned mt_table_lanes(void)
{
    return lanes;
}

/* The map entry of region r; NULL when the map has no room for it. create: a region seen for the
 * first time takes the next lane in turn; else *absent says that no record of r can exist. */
static uint64_t *region_entry(uint64_t r, int create, int *absent)
{
    uint64_t key = (r + 1) << 8;
    size_t i = (size_t)((r * 0x9E3779B97F4A7C15ull) >> 54);
    for (int n = 0; n < REGION_PROBES; n++, i = (i + 1) % REGIONS) {
        uint64_t w = __atomic_load_n(&regions[i], __ATOMIC_ACQUIRE);
        if (!w) {
            if (!create) {
                *absent = 1;
                return NULL;
            }
            uint64_t mine = key | __atomic_fetch_add(&regions_seen, 1, __ATOMIC_RELAXED) % lanes;
            if (__atomic_compare_exchange_n(&regions[i], &w, mine, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return &regions[i];
        }
        if ((w & ~(uint64_t)0xFF) == key) return &regions[i];
    }
    return NULL;
}

/* Region r's word as it is now; 0 when r was never seen (only without create). */
static uint64_t region_word(uint64_t r, int create)
{
    int absent = 0;
    uint64_t *e = region_entry(r, create, &absent);
    return absent ? 0 : e ? __atomic_load_n(e, __ATOMIC_ACQUIRE) : SPREAD | UNMAPPED;
}

/* The thread's last region and its word: a thread mostly allocates from one arena, and a look in
 * the region map would sit between the address and the first load of its slots. The word is good
 * while no region has been spread since it was read. */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    uint64_t key; /* region + 1 (below 2^38), and spreads above bit 40: 0 before the first look */
    uint64_t word;
} last;

static inline uint64_t cached_word(uint64_t r, int create)
{
    uint64_t key = (r + 1) | (uint64_t)__atomic_load_n(&spreads, __ATOMIC_ACQUIRE) << 40;
    if (__builtin_expect(last.key == key, 1)) return last.word;
    uint64_t w = region_word(r, create);
    if (w) {
        last.key = key;
        last.word = w;
    }
    return w;
}

/* Marks region r spread, then tells every thread's cache (a record put by hash is then found by
 * any free that happens after it). */
static void region_spread(uint64_t r)
{
    int absent = 0;
    uint64_t *e = region_entry(r, 0, &absent);
    if (!e) return;
    __atomic_fetch_or(e, SPREAD, __ATOMIC_RELEASE);
    __atomic_fetch_add(&spreads, 1, __ATOMIC_RELEASE);
}

/* Bits 16..23 of the hash scaled to [0, lanes): the lane of a spread region's record. */
static inline unsigned hash_lane(uint64_t h)
{
    return (unsigned)((((h >> 16) & 0xFF) * lanes) >> 8);
}

/* Where a record is to be looked for, given its region's word: lane first, then lane second
 * (NO_LANE: nowhere else). A region keeps its records in its own lane until it fills its window
 * there; from then on it is spread: its new records go to the lane of their hash, as in a table
 * without lanes, or else to its own lane, where its old ones stay. A record whose hash lane is its
 * own has the next lane for second: the own lane filled before the region spread, and what is
 * left of the table is in the other lanes. */
static inline void place(uint64_t h, uint64_t word, unsigned *first, unsigned *second)
{
    unsigned own = (unsigned)(word & 15), by_hash;
    if (!(word & SPREAD)) {
        *first = own;
        *second = NO_LANE;
        return;
    }
    *first = by_hash = hash_lane(h);
    *second = !(word & UNMAPPED) && own != by_hash ? own : by_hash + 1 < lanes ? by_hash + 1 : 0;
}

/* Home group in lane k: bits 24..55 scaled to [0, homes), independent of the tag's bits 56..63. */
static inline size_t group_of(uint64_t h, unsigned k)
{
    return k * lane_groups + (size_t)((((h >> 24) & 0xFFFFFFFFu) * homes) >> 32);
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

/* Replaces a stale record of rec->addr in group g. A stale record can only be left by a free we
 * never saw; replacing it keeps one record per live address. */
static inline int replace_in(size_t g, uint8_t t, const struct mt_record *rec)
{
    for (unsigned m = match(g, t); m; m &= m - 1) {
        size_t s = g * GROUP + (size_t)__builtin_ctz(m);
        if (addr_at(s) != rec->addr || !take(s, t)) continue;
        if (recs[s].addr == rec->addr) {
            __atomic_store_n(&recs[s].addr, 0, __ATOMIC_RELAXED);
            fill(s, rec);
            give(s, t);
            return 1;
        }
        give(s, t);
    }
    return 0;
}

/* Stores rec in an empty slot of group g, counting a spill from g0 when g is not its home. */
static inline int store_in(size_t g, size_t g0, uint8_t t, const struct mt_record *rec)
{
    for (unsigned m = match(g, TAG_EMPTY); m; m &= m - 1) {
        size_t s = g * GROUP + (size_t)__builtin_ctz(m);
        if (!take(s, TAG_EMPTY)) continue;
        if (g != g0) spill(g0, 1);
        fill(s, rec);
        give(s, t);
        return 1;
    }
    return 0;
}

/* Replaces a stale record of rec->addr in its window in lane k. */
static int replace_in_lane(unsigned k, uint64_t h, uint8_t t, const struct mt_record *rec)
{
    size_t g0 = group_of(h, k);
    for (size_t w = 0, n = reach(g0); w < n; w++)
        if (replace_in(g0 + w, t, rec)) return 1;
    return 0;
}

static int store_in_lane(unsigned k, uint64_t h, uint8_t t, const struct mt_record *rec)
{
    size_t g0 = group_of(h, k);
    for (size_t w = 0; w < window; w++)
        if (store_in(g0 + w, g0, t, rec)) return 1;
    return 0;
}

/* Everything but the common case of mt_table_insert, whose census count it takes over: a record
 * that may be in more than one group, or whose home group is full. */
__attribute__((noinline)) static int insert_slow(const struct mt_record *rec, int *replaced,
                                                 uint64_t h, uint64_t word)
{
    uint8_t t = tag_of(h);
    unsigned first, second;
    place(h, word, &first, &second);
    *replaced = replace_in_lane(first, h, t, rec) ||
                (second != NO_LANE && replace_in_lane(second, h, t, rec));
    if (*replaced) {
        census_add(h, -1);
        return 1;
    }
    /* A spread region's record may go to its second lane when its first is full: without it, one
     * region leaking 1M blocks in 1.25M slots filled its own lane and lost 100,000 to 190,000
     * records, where a table without lanes lost none. */
    if (store_in_lane(first, h, t, rec) || (second != NO_LANE && store_in_lane(second, h, t, rec)))
        return 1;
    /* The region has filled its window in its own lane. A lane is a fraction of the table, and one
     * busy region must still have all of it: spread. */
    if (lanes > 1 && !(word & SPREAD)) {
        region_spread(rec->addr >> REGION_SHIFT);
        place(h, word | SPREAD, &first, &second);
        if (store_in_lane(first, h, t, rec) || store_in_lane(second, h, t, rec)) return 1;
    }
    census_add(h, -1);
    return 0;
}

int mt_table_insert(const struct mt_record *rec, int *replaced)
{
    uint64_t h = mt_table_hash(rec->addr);
    uint64_t word = lanes > 1 ? cached_word(rec->addr >> REGION_SHIFT, 1) : 0;
    census_add(h, 1);
    /* Commonly the record can be in one group only, its home, and there is room there. */
    unsigned first, second;
    place(h, word, &first, &second);
    size_t g0 = group_of(h, first);
    if (second == NO_LANE && !__atomic_load_n(&spills[g0], __ATOMIC_RELAXED)) {
        uint8_t t = tag_of(h);
        if ((*replaced = replace_in(g0, t, rec))) {
            census_add(h, -1);
            return 1;
        }
        if (store_in(g0, g0, t, rec)) return 1;
    }
    return insert_slow(rec, replaced, h, word);
}

/* Removes addr's record from slot s of group g (tag t; home g0). Returns 1 when done, 0 when the
 * slot holds another address, -1 when another thread owns the slot (a reader copying it). */
static inline int take_out(size_t s, size_t g, size_t g0, uintptr_t addr, uint8_t t,
                           struct mt_record *out)
{
    if (addr_at(s) != addr) return 0;
    if (!take(s, t)) return -1;
    if (recs[s].addr != addr) {
        give(s, t);
        return 0;
    }
    if (out) *out = unpack(s);
    __atomic_store_n(&recs[s].addr, 0, __ATOMIC_RELAXED);
    give(s, TAG_EMPTY);
    if (g != g0) spill(g0, -1);
    census_add(mt_table_hash(addr), -1);
    return 1;
}

/* The window of home g0, waiting out readers that own one of its slots. Kept apart so that the
 * common case does not pay for this loop's registers. */
__attribute__((noinline)) static int remove_slow(uintptr_t addr, size_t g0, uint8_t t,
                                                 struct mt_record *out)
{
    const __m128i want = _mm_set1_epi8((char)t), busy = _mm_set1_epi8((char)TAG_BUSY);
    unsigned spins = 0;
    for (;;) {
        int held = 0; /* a slot with our address is owned by another thread */
        for (size_t g = g0, end = g0 + reach(g0); g < end; g++) {
            __m128i v = _mm_load_si128((const __m128i *)(tags + g * GROUP));
            unsigned ours = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, want));
            unsigned owned = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, busy));
            for (unsigned m = ours; m; m &= m - 1) {
                int r = take_out(g * GROUP + (size_t)__builtin_ctz(m), g, g0, addr, t, out);
                if (r > 0) return 1;
                held |= r < 0;
            }
            for (unsigned m = owned; m; m &= m - 1)
                if (addr_at(g * GROUP + (size_t)__builtin_ctz(m)) == addr) held = 1;
        }
        if (!held) return 0;
        pause_briefly(&spins);
    }
}

/* Most records are in their home group: they are taken out here. A slot of the home group may be
 * BUSY, held by a reader: the slow path waits for it. */
__attribute__((always_inline)) static inline int
remove_in_lane(uintptr_t addr, unsigned k, uint64_t h, uint8_t t, struct mt_record *out)
{
    size_t g0 = group_of(h, k);
    __m128i v = _mm_load_si128((const __m128i *)(tags + g0 * GROUP));
    for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)t))); m;
         m &= m - 1) {
        int r = take_out(g0 * GROUP + (size_t)__builtin_ctz(m), g0, g0, addr, t, out);
        if (r > 0) return 1;
        if (r < 0) return remove_slow(addr, g0, t, out);
    }
    if (!_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)TAG_BUSY))) &&
        !__atomic_load_n(&spills[g0], __ATOMIC_RELAXED))
        return 0;
    return remove_slow(addr, g0, t, out);
}

int mt_table_remove(uintptr_t addr, struct mt_record *out)
{
    /* Most frees are of blocks without a record (sampled out, dropped, untraced): the census says
     * so in a sparse table, a region never seen does, else, with nothing spilled from the home
     * group, one look at its tags does. */
    if (!mt_table_may_hold(addr)) return 0;
    uint64_t h = mt_table_hash(addr), r = addr >> REGION_SHIFT, word = 0;
    if (lanes > 1 && !(word = cached_word(r, 0))) return 0;
    uint8_t t = tag_of(h);
    unsigned first, second;
    place(h, word, &first, &second);
    return remove_in_lane(addr, first, h, t, out) ||
           (second != NO_LANE && remove_in_lane(addr, second, h, t, out));
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
        unsigned first, second;
        place(h, lanes > 1 ? region_word(recs[s].addr >> REGION_SHIFT, 0) : 0, &first, &second);
        size_t home = group_of(h, first);
        if (second != NO_LANE && (s / GROUP < home || s / GROUP >= home + window))
            home = group_of(h, second);
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
