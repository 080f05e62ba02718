/* table.c: the live table (see table.h).
 *
 * Layout: records in one array, tags in another (per generation, see Growth). Slots come in groups
 * of 16 so that one SSE2 compare tests 16 tags. The groups are cut into lanes, each starting on a
 * tag line of its own. An address's home group is in its lane (see place()); the address may live
 * anywhere in the WINDOW groups from there. Homes are spread over the groups of a lane that have a
 * whole window after them, so windows never leave their lane. A tag is EMPTY, BUSY (owned by one
 * thread) or a 2..255 fingerprint of the address.
 *
 * Why lanes: with one shared array, two threads allocating at once both write tag lines all over
 * it, and every such line moves between the cores. A lane per thread instead would make each
 * thread's share of the table a fraction of it, and a free from another thread would have to search
 * every lane. A region's lane is a function of the address, so a free looks in one place whichever
 * thread makes it, and one thread with a large heap (many regions) still uses every lane. A region
 * that fills its window in its lane is spread: its new records go by hash over every lane, so one
 * busy region still has the whole table. Spilling into one group of each other lane instead would
 * make every insert and free look through all of them once its lane was full; spread, it pays for
 * one second lane, where its stale records and its frees are looked for. The region's word is
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
 * where a look at the home group is a call and a load that misses the L1 cache. Fewer buckets
 * fail: with 16, so many frees find their bucket taken that the mispredicted branch costs what the
 * look would; with 256, a sampled heap of a few GB (thousands of records) leaves no bucket empty,
 * and every free looks at the slots. At 16384 the census no longer stays in the cache. Like a
 * spill count, a bucket is raised before its record is written and lowered after it is removed,
 * so it is never below the truth.
 *
 * The address field is the only one read outside ownership (atomically), to skip candidates that
 * merely share a fingerprint without taking them; it is written last on insert so that a record
 * whose address is set is complete, which is what the fork repair relies on.
 *
 * Growth. The table is a run of generations, each twice the slots of the one before (the last one
 * capped), all reserved at start-up as address space, each in pages of its own. cur takes every
 * new record. An insert that finds no slot it may use makes the next generation cur; the inserts
 * that follow drain the older ones into it, each taking the slots of one group of the oldest in
 * turn: a record is stored in cur, then its old slot emptied. So a record only ever moves from the
 * oldest generation to cur, and is in cur before it leaves: a free that looks from the oldest
 * generation to cur cannot miss it, unless cur changed meanwhile, which it checks (a growth may
 * have moved the record past it). A drained generation is swept for what found no room and
 * retired: its pages go back (madvise), the mapping stays, and no other generation ever uses them,
 * so that a thread still looking at it reads zeros (empty tags), never other slots. The hot paths
 * pay one load of cur (its fields stand for the table's old globals), a test of its prev, and a
 * load of cur after the compare-and-swap that takes a slot: an inserter that read cur just before
 * a growth may take a slot of the old generation after the drain passed it, and must give it back
 * (store_in). No hot path takes a lock or a fence.
 *
 * Why the drain is shared and the growth does not wait for it: with one drainer at a time, or a
 * growth that waited for the last drain to end, a drainer descheduled in the middle of a group
 * (four threads on two cores) held the drain back for a time slice while the others filled the new
 * generation; the old one's records then had nowhere to go, and recorder_test's growth check
 * dropped records. Drainers now claim groups side by side, and a full cur grows even while older
 * generations drain: more than two are in use only when the table doubles faster than it drains.
 *
 * Readers. A pass (mt_table_each, clear, count) must see each record once, and a drain moves
 * records from ahead of it to behind it, or back. So a pass holds the turn, a ticket lock that
 * only passes, growths and retirements take: no growth begins during it, and it first finishes
 * every drain itself, so that no record moves while it reads. Inserts and frees go on meanwhile;
 * only an insert that needs a growth waits for the pass to end.
 */
#include "record/table.h"

#include <emmintrin.h>
#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"

enum { TAG_EMPTY = 0, TAG_BUSY = 1 };
#define GROUP 16
#define WINDOW 4

/* A record as kept: 24 bytes. Sizes above 2^45 - 1 bytes (32 TiB, a quarter of x86-64's user
 * address space) are kept as that; times are milliseconds since the table was made, kept for
 * 2^34 ms (198 days), after which every record carries the last of them. The lost bit is set by
 * mt_table_set_lost() only: pack() leaves it clear, so the hooks pay nothing for it. */
struct slot {
    uintptr_t addr;
    uint64_t size_stack;     /* size (45 bits), the VM bit, the lost bit, stack id bits 0..16 */
    uint64_t stack_tid_time; /* stack id bits 17..24, thread (22 bits), time (34 bits) */
};

#define SIZE_BITS 45
#define VM_BIT ((uint64_t)1 << SIZE_BITS)
#define LOST_BIT ((uint64_t)1 << (SIZE_BITS + 1))
#define STACK_SHIFT (SIZE_BITS + 2)
#define STACK_LOW 17
#define TID_BITS 22
#define TIME_BITS 34

/* A generation: a table of its own size in its own pages of the reservation. The fields the hooks
 * read share a line; the drain's counters, written by every insert while it drains, have their
 * own. */
struct gen {
    uint8_t *tags;
    struct slot *recs;
    uint16_t *spills; /* by home group; at most 16 * (WINDOW - 1) each, plus fork leftovers */
    struct gen *prev; /* the generation before, while it holds records; else NULL */
    size_t lane_groups, homes, window;
    unsigned index; /* in gens[] */
    size_t slots, groups;
    char *mem; /* the generation's pages, given back when it retires */
    size_t bytes;
    size_t next __attribute__((aligned(64))); /* groups claimed by drainers (may run past groups) */
    size_t finished;                          /* groups drained */
} __attribute__((aligned(64)));

/* Doubling from 16 slots reaches 2^30 (MTRACE_SLOTS_MAX's bound) in 27 steps. */
#define GENS 32
static struct gen gens[GENS];
static struct gen *cur;  /* takes every new record */
static struct gen *last; /* the largest generation the reservation holds: the cap */

/* The turn, taken by tickets in order: a reader's pass, a growth and the retirement of a generation
 * each hold it (see read_begin, make_room, try_retire). in_pass: the thread holds it for a pass. */
static unsigned tickets, serving;
static __thread __attribute__((tls_model("initial-exec"))) int in_pass;

static uint64_t epoch_ns;
static unsigned lanes;
struct mt_census mt_census __attribute__((aligned(64)));

/* Regions, in the order they are first seen: (region + 1) << KEY_SHIFT | spread << SPREAD_SHIFT |
 * lane, 0 while free. An entry is written once, but for its spread field, which only grows: a
 * region keeps its lane for the life of the process. spread: the region is spread in the
 * generations below it (see place()). */
#define REGION_SHIFT 26
#define REGIONS 1024
#define REGION_PROBES 16
#define UNMAPPED 0x40 /* a region the map has no room for: spread, with no lane of its own */
#define SPREAD_SHIFT 8
#define SPREAD_ALL 63 /* above every generation's index (GENS) */
#define KEY_SHIFT 14
#define NO_LANE MT_TABLE_LANES_MAX
static uint64_t regions[REGIONS];
static unsigned regions_seen;
static unsigned spreads; /* regions spread so far: a thread's cached word is good while unchanged */

static size_t page_up(size_t n, size_t page)
{
    return (n + page - 1) / page * page;
}

int mt_table_init(size_t slots, size_t slots_max, int sparse, unsigned want_lanes)
{
    /* A lane starts on a tag line of its own (4 groups) and holds at least 2048 slots: a region
     * whose live set outgrows its lane is spread, which costs it a second lane to look in, and
     * small lanes spread even a small live set. A sparse table is written too rarely for lanes to
     * pay: they would only make a full table's lookups longer. Every generation has the lanes of
     * the first: a region's lane is for life. */
    lanes = sparse || want_lanes < 1          ? 1
            : want_lanes > MT_TABLE_LANES_MAX ? MT_TABLE_LANES_MAX
                                              : want_lanes;
    while (lanes > 1 && slots / GROUP / lanes < 128)
        lanes--;

    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0, total = 0;
    for (size_t s = slots; n < GENS; s = (s > slots_max / 2 ? slots_max : 2 * s)) {
        gens[n].slots = s;
        gens[n].bytes = page_up(s * sizeof(struct slot), page) + page_up(s, page) +
                        page_up(s / GROUP * sizeof(uint16_t), page);
        total += gens[n++].bytes;
        if (s >= slots_max) break;
    }
    /* Where address space is limited (ulimit -v, or overcommit off, which ignores
     * MAP_NORESERVE), a lower cap still traces. */
    /* mem.h's memory: the records name every live block, and must never be a root. */
    char *mem;
    while (!(mem = mt_mem_map(total))) {
        if (n == 1) return -1;
        total -= gens[--n].bytes;
    }
    for (size_t i = 0; i < n; i++) {
        struct gen *g = &gens[i];
        g->index = (unsigned)i;
        g->mem = mem;
        g->recs = (struct slot *)mem;
        g->tags = (uint8_t *)mem + page_up(g->slots * sizeof(struct slot), page);
        g->spills = (uint16_t *)(g->tags + page_up(g->slots, page));
        g->groups = g->slots / GROUP;
        g->lane_groups = lanes > 1 ? g->groups / lanes / 4 * 4 : g->groups;
        g->window = g->lane_groups < WINDOW ? g->lane_groups : WINDOW;
        g->homes = g->lane_groups - g->window + 1;
        /* The generation before is in use until it retires, which clears this: a growth is then
         * one store of cur. */
        g->prev = i ? &gens[i - 1] : NULL;
        mem += g->bytes;
    }
    cur = &gens[0];
    last = &gens[n - 1];
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    epoch_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    mt_census.on = sparse;
    return 0;
}

size_t mt_table_slots(void)
{
    return __atomic_load_n(&cur, __ATOMIC_ACQUIRE)->slots;
}

size_t mt_table_slots_max(void)
{
    return last->slots;
}

unsigned mt_table_grown(void)
{
    return (unsigned)(__atomic_load_n(&cur, __ATOMIC_ACQUIRE) - gens);
}

unsigned mt_table_lanes(void)
{
    return lanes;
}

/* The map entry of region r; NULL when the map has no room for it. create: a region seen for the
 * first time takes the next lane in turn; else *absent says that no record of r can exist. */
static uint64_t *region_entry(uint64_t r, int create, int *absent)
{
    uint64_t key = (r + 1) << KEY_SHIFT;
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
        if (w >> KEY_SHIFT << KEY_SHIFT == key) return &regions[i];
    }
    return NULL;
}

/* Region r's word as it is now; 0 when r was never seen (only without create). */
static uint64_t region_word(uint64_t r, int create)
{
    int absent = 0;
    uint64_t *e = region_entry(r, create, &absent);
    return absent ? 0
           : e    ? __atomic_load_n(e, __ATOMIC_ACQUIRE)
                  : (uint64_t)SPREAD_ALL << SPREAD_SHIFT | UNMAPPED;
}

/* The thread's last region and its word: a thread mostly allocates from one arena, and a look in
 * the region map would sit between the address and the first load of its slots. The word is good
 * while no region has been spread since it was read. */
static __thread __attribute__((tls_model("initial-exec"))) struct {
    uint64_t key; /* region + 1 (below 2^38), and spreads above bit 40: 0 before the first look */
    uint64_t word;
} last_region;

static inline uint64_t cached_word(uint64_t r, int create)
{
    uint64_t key = (r + 1) | (uint64_t)__atomic_load_n(&spreads, __ATOMIC_ACQUIRE) << 40;
    if (__builtin_expect(last_region.key == key, 1)) return last_region.word;
    uint64_t w = region_word(r, create);
    if (w) {
        last_region.key = key;
        last_region.word = w;
    }
    return w;
}

/* Whether a region whose word is word is spread in generation c. */
static inline int spread_in(uint64_t word, const struct gen *c)
{
    return (word >> SPREAD_SHIFT & SPREAD_ALL) > c->index;
}

/* Marks region r spread in c and the generations before it, then tells every thread's cache (a
 * record put by hash is then found by any free that happens after it). */
static void region_spread(uint64_t r, const struct gen *c)
{
    int absent = 0;
    uint64_t *e = region_entry(r, 0, &absent);
    if (!e) return;
    uint64_t w = __atomic_load_n(e, __ATOMIC_ACQUIRE), want;
    do {
        if (spread_in(w, c)) return;
        want = (w & ~((uint64_t)SPREAD_ALL << SPREAD_SHIFT)) | (uint64_t)(c->index + 1)
                                                                   << SPREAD_SHIFT;
    } while (!__atomic_compare_exchange_n(e, &w, want, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
    __atomic_fetch_add(&spreads, 1, __ATOMIC_RELEASE);
}

/* Bits 16..23 of the hash scaled to [0, lanes): the lane of a spread region's record. */
static inline unsigned hash_lane(uint64_t h)
{
    return (unsigned)((((h >> 16) & 0xFF) * lanes) >> 8);
}

/* Where a record of generation c is to be looked for, given its region's word: lane first, then
 * lane second (NO_LANE: nowhere else). A region keeps its records in its own lane until it fills
 * its window there; from then on it is spread in that generation: its new records go to the lane
 * of their hash, as in a table without lanes, or else to its own lane, where its old ones stay. A
 * record whose hash lane is its own has the next lane for second: the own lane filled before the
 * region spread, and what is left of the table is in the other lanes. A generation made after the
 * spread has lanes twice as large, and the region starts in its own lane again: spread for good,
 * a region that filled its lane once in the first 4096 slots (a BEAM's main heap, as it starts)
 * paid for two lanes at every insert and free ever after. A region spread in c is taken as spread
 * in every generation before c too: that only adds a lane to look in, so a generation's placement
 * still only ever widens. */
static inline void place(uint64_t h, uint64_t word, const struct gen *c, unsigned *first,
                         unsigned *second)
{
    unsigned own = (unsigned)(word & 15), by_hash;
    if (!spread_in(word, c)) {
        *first = own;
        *second = NO_LANE;
        return;
    }
    *first = by_hash = hash_lane(h);
    *second = !(word & UNMAPPED) && own != by_hash ? own : by_hash + 1 < lanes ? by_hash + 1 : 0;
}

/* Home group in lane k: bits 24..55 scaled to [0, homes), independent of the tag's bits 56..63. */
static inline size_t group_of(const struct gen *c, uint64_t h, unsigned k)
{
    return k * c->lane_groups + (size_t)((((h >> 24) & 0xFFFFFFFFu) * c->homes) >> 32);
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

/* The 16 tags of group g. The load is plain: a stale view only costs a retry, because every
 * decision is confirmed by a compare-and-swap on the tag itself. On x86 a 16-byte load sees each
 * byte as an atomic load would; ThreadSanitizer cannot know that, and its build reads the tags
 * one by one. */
static inline __m128i group_tags(const struct gen *c, size_t g)
{
#ifdef __SANITIZE_THREAD__
    uint8_t b[GROUP];
    for (unsigned i = 0; i < GROUP; i++)
        b[i] = __atomic_load_n(&c->tags[g * GROUP + i], __ATOMIC_RELAXED);
    return _mm_loadu_si128((const __m128i *)b);
#else
    return _mm_load_si128((const __m128i *)(c->tags + g * GROUP));
#endif
}

/* Bit i set where tag i of the group equals t. */
static inline unsigned match(const struct gen *c, size_t g, uint8_t t)
{
    return (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(group_tags(c, g), _mm_set1_epi8((char)t)));
}

/* Groups in which a record of home g0 may be: its home alone while nothing of it spilled. */
static inline size_t reach(const struct gen *c, size_t g0)
{
    return __atomic_load_n(&c->spills[g0], __ATOMIC_RELAXED) ? c->window : 1;
}

static inline void spill(struct gen *c, size_t g0, int n)
{
    __atomic_fetch_add(&c->spills[g0], (uint16_t)n, __ATOMIC_RELAXED);
}

static inline uintptr_t addr_at(const struct gen *c, size_t s)
{
    return __atomic_load_n(&c->recs[s].addr, __ATOMIC_RELAXED);
}

static inline int take(struct gen *c, size_t s, uint8_t t)
{
    return __atomic_compare_exchange_n(&c->tags[s], &t, TAG_BUSY, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static inline void give(struct gen *c, size_t s, uint8_t t)
{
    __atomic_store_n(&c->tags[s], t, __ATOMIC_RELEASE);
}

/* gcc refuses fences under ThreadSanitizer, which does not model them; the TSan build of the
 * C tests (test/c) goes without. That only takes happens-before edges from TSan's view, so a
 * build it finds free of races is free of them with the fences too. */
#ifdef __SANITIZE_THREAD__
#define ACQUIRE_FENCE() ((void)0)
#else
#define ACQUIRE_FENCE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#endif

static inline void pause_briefly(unsigned *spins)
{
    if (++*spins < 64)
        _mm_pause();
    else
        sched_yield();
    ACQUIRE_FENCE();
}

static inline uint64_t clamp(uint64_t v, int bits)
{
    uint64_t max = ((uint64_t)1 << bits) - 1;
    return v < max ? v : max;
}

static inline struct slot pack(const struct mt_record *rec)
{
    uint64_t ms = rec->time_ns > epoch_ns ? (rec->time_ns - epoch_ns) / 1000000 : 0;
    return (struct slot){
        .addr = rec->addr,
        .size_stack = clamp(rec->size, SIZE_BITS) | (rec->vm ? VM_BIT : 0) |
                      (uint64_t)rec->stack << STACK_SHIFT,
        .stack_tid_time = ((uint64_t)rec->stack >> STACK_LOW & 0xFF) |
                          (uint64_t)(rec->tid & ((1u << TID_BITS) - 1))
                              << (64 - TIME_BITS - TID_BITS) |
                          clamp(ms, TIME_BITS) << (64 - TIME_BITS),
    };
}

/* Fields first, the address last (see the file comment). Caller owns slot s. */
static inline void put(struct gen *c, size_t s, const struct slot *v)
{
    c->recs[s].size_stack = v->size_stack;
    c->recs[s].stack_tid_time = v->stack_tid_time;
    __atomic_store_n(&c->recs[s].addr, v->addr, __ATOMIC_RELAXED);
}

/* The record in slot s, whose owner is the caller. */
static inline struct mt_record unpack(const struct gen *c, size_t s)
{
    uint64_t a = c->recs[s].size_stack, b = c->recs[s].stack_tid_time;
    return (struct mt_record){
        .addr = c->recs[s].addr,
        .size = a & (((uint64_t)1 << SIZE_BITS) - 1),
        .time_ns = epoch_ns + (b >> (64 - TIME_BITS)) * 1000000,
        .stack = (uint32_t)(a >> STACK_SHIFT | (b & 0xFF) << STACK_LOW),
        .tid = (uint32_t)(b >> (64 - TIME_BITS - TID_BITS)) & ((1u << TID_BITS) - 1),
        .vm = !!(a & VM_BIT),
        .lost = !!(a & LOST_BIT),
    };
}

/* The home group of the record of addr that is in slot s of c: a spread region's record may be
 * in either of two windows. */
static size_t home_of(const struct gen *c, uintptr_t addr, size_t s)
{
    uint64_t h = mt_table_hash(addr);
    unsigned first, second;
    place(h, lanes > 1 ? region_word(addr >> REGION_SHIFT, 0) : 0, c, &first, &second);
    size_t home = group_of(c, h, first);
    if (second != NO_LANE && (s / GROUP < home || s / GROUP >= home + c->window))
        home = group_of(c, h, second);
    return home;
}

/* Replaces a stale record of v->addr in group g. A stale record can only be left by a free we
 * never saw; replacing it keeps one record per live address. */
static inline int replace_in(struct gen *c, size_t g, uint8_t t, const struct slot *v)
{
    for (unsigned m = match(c, g, t); m; m &= m - 1) {
        size_t s = g * GROUP + (size_t)__builtin_ctz(m);
        if (addr_at(c, s) != v->addr || !take(c, s, t)) continue;
        if (c->recs[s].addr == v->addr) {
            __atomic_store_n(&c->recs[s].addr, 0, __ATOMIC_RELAXED);
            put(c, s, v);
            give(c, s, t);
            return 1;
        }
        give(c, s, t);
    }
    return 0;
}

/* Stores v in an empty slot of group g of c, counting a spill from g0 when g is not its home.
 * Returns 1 when stored, 0 when the group has no empty slot, -1 when c stopped being the current
 * generation before the slot was taken: its drain may have passed the slot already, so the slot
 * is given back. The compare-and-swap that takes the slot and the load of cur after it pair with
 * the seq_cst publication of a new generation: either this thread sees the new one, or the drain,
 * which runs after the publication, sees the slot taken. On x86 neither costs a fence. */
static inline int store_in(struct gen *c, size_t g, size_t g0, uint8_t t, const struct slot *v)
{
    for (unsigned m = match(c, g, TAG_EMPTY); m; m &= m - 1) {
        size_t s = g * GROUP + (size_t)__builtin_ctz(m);
        uint8_t empty = TAG_EMPTY;
        if (!__atomic_compare_exchange_n(&c->tags[s], &empty, TAG_BUSY, 0, __ATOMIC_SEQ_CST,
                                         __ATOMIC_RELAXED))
            continue;
        if (__builtin_expect(__atomic_load_n(&cur, __ATOMIC_SEQ_CST) != c, 0)) {
            give(c, s, TAG_EMPTY);
            return -1;
        }
        if (g != g0) spill(c, g0, 1);
        put(c, s, v);
        give(c, s, t);
        return 1;
    }
    return 0;
}

/* Replaces a stale record of v->addr in its window in lane k. */
static int replace_in_lane(struct gen *c, unsigned k, uint64_t h, uint8_t t, const struct slot *v)
{
    size_t g0 = group_of(c, h, k);
    for (size_t w = 0, n = reach(c, g0); w < n; w++)
        if (replace_in(c, g0 + w, t, v)) return 1;
    return 0;
}

static int store_in_lane(struct gen *c, unsigned k, uint64_t h, uint8_t t, const struct slot *v)
{
    size_t g0 = group_of(c, h, k);
    for (size_t w = 0; w < c->window; w++) {
        int r = store_in(c, g0 + w, g0, t, v);
        if (r) return r;
    }
    return 0;
}

/* Stores v (hash h, its region's word) in a free slot of c, as store_in() answers. A spread
 * region's record may go to its second lane when its first is full: without it, a region that
 * leaks fills its own lane and drops records while the rest of the table has room. */
static int store(struct gen *c, uint64_t h, uint64_t word, uint8_t t, const struct slot *v)
{
    unsigned first, second;
    place(h, word, c, &first, &second);
    int r = store_in_lane(c, first, h, t, v);
    if (!r && second != NO_LANE) r = store_in_lane(c, second, h, t, v);
    /* The region has filled its window in its own lane. A lane is a fraction of the table, and one
     * busy region must still have all of it: spread. */
    if (!r && lanes > 1 && !spread_in(word, c)) {
        region_spread(v->addr >> REGION_SHIFT, c);
        place(h, word | (uint64_t)SPREAD_ALL << SPREAD_SHIFT, c, &first, &second);
        r = store_in_lane(c, first, h, t, v);
        if (!r) r = store_in_lane(c, second, h, t, v);
    }
    return r;
}

/* Removes addr's record from slot s of group g (tag t; home g0). Returns 1 when done, 0 when the
 * slot holds another address, -1 when another thread owns the slot (a reader copying it). */
static inline int take_out(struct gen *c, size_t s, size_t g, size_t g0, uintptr_t addr, uint8_t t,
                           struct mt_record *out)
{
    if (addr_at(c, s) != addr) return 0;
    if (!take(c, s, t)) return -1;
    if (c->recs[s].addr != addr) {
        give(c, s, t);
        return 0;
    }
    if (out) *out = unpack(c, s);
    __atomic_store_n(&c->recs[s].addr, 0, __ATOMIC_RELAXED);
    give(c, s, TAG_EMPTY);
    if (g != g0) spill(c, g0, -1);
    census_add(mt_table_hash(addr), -1);
    return 1;
}

/* The window of home g0, waiting out readers that own one of its slots. Kept apart so that the
 * common case does not pay for this loop's registers. */
__attribute__((noinline)) static int remove_slow(struct gen *c, uintptr_t addr, size_t g0,
                                                 uint8_t t, struct mt_record *out)
{
    const __m128i want = _mm_set1_epi8((char)t), busy = _mm_set1_epi8((char)TAG_BUSY);
    unsigned spins = 0;
    for (;;) {
        int held = 0; /* a slot with our address is owned by another thread */
        for (size_t g = g0, end = g0 + reach(c, g0); g < end; g++) {
            __m128i v = group_tags(c, g);
            unsigned ours = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, want));
            unsigned owned = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, busy));
            for (unsigned m = ours; m; m &= m - 1) {
                int r = take_out(c, g * GROUP + (size_t)__builtin_ctz(m), g, g0, addr, t, out);
                if (r > 0) return 1;
                held |= r < 0;
            }
            for (unsigned m = owned; m; m &= m - 1)
                if (addr_at(c, g * GROUP + (size_t)__builtin_ctz(m)) == addr) held = 1;
        }
        if (!held) return 0;
        pause_briefly(&spins);
    }
}

/* Most records are in their home group: they are taken out here. A slot of the home group may be
 * BUSY, held by a reader or a drain: the slow path waits for it. */
__attribute__((always_inline)) static inline int remove_in_lane(struct gen *c, uintptr_t addr,
                                                                unsigned k, uint64_t h, uint8_t t,
                                                                struct mt_record *out)
{
    size_t g0 = group_of(c, h, k);
    /* The address to compare is read only once the tags have named its slot: in a table larger
     * than the caches, two misses one after the other. Slots are taken lowest first, so the
     * group's first two record lines (the addresses of slots 0..5) hold most records' addresses,
     * and are fetched beside the tags. A third line cost more than it saved. */
    __builtin_prefetch((const char *)(c->recs + g0 * GROUP));
    __builtin_prefetch((const char *)(c->recs + g0 * GROUP) + 64);
    __m128i v = group_tags(c, g0);
    for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)t))); m;
         m &= m - 1) {
        int r = take_out(c, g0 * GROUP + (size_t)__builtin_ctz(m), g0, g0, addr, t, out);
        if (r > 0) return 1;
        if (r < 0) return remove_slow(c, addr, g0, t, out);
    }
    if (!_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8((char)TAG_BUSY))) &&
        !__atomic_load_n(&c->spills[g0], __ATOMIC_RELAXED))
        return 0;
    return remove_slow(c, addr, g0, t, out);
}

/* Removes addr's record from generation c, in both of its lanes (second may be NO_LANE). */
__attribute__((always_inline)) static inline int remove_in(struct gen *c, uintptr_t addr,
                                                           uint64_t h, unsigned first,
                                                           unsigned second, uint8_t t,
                                                           struct mt_record *out)
{
    return remove_in_lane(c, addr, first, h, t, out) ||
           (second != NO_LANE && remove_in_lane(c, addr, second, h, t, out));
}

/* The oldest generation in use: c itself, unless generations before it still hold records. The
 * generations in use are those from it to cur: only the oldest ever retires. */
static inline struct gen *oldest(struct gen *c)
{
    for (struct gen *p; (p = __atomic_load_n(&c->prev, __ATOMIC_ACQUIRE)) != NULL;)
        c = p;
    return c;
}

/* Removes addr's record (its region's word is word) from the generations before c, oldest first.
 * They exist only while the table grows, so they are looked at out of line. */
__attribute__((noinline)) static int remove_from_old(struct gen *c, uintptr_t addr, uint64_t h,
                                                     uint64_t word, uint8_t t,
                                                     struct mt_record *out)
{
    for (struct gen *o = oldest(c); o != c; o++) {
        unsigned first, second;
        place(h, word, o, &first, &second);
        if (remove_in(o, addr, h, first, second, t, out)) return 1;
    }
    return 0;
}

/* Moves the records of group g of o into cur, waiting out the few stores of a slot's owner (no
 * reader owns one: passes hold the turn, and drain everything first). Returns 0 when a record
 * finds no slot in cur; it stays where it is, for the sweep. */
static int drain_group(struct gen *o, size_t g)
{
    int all = 1;
    for (size_t s = g * GROUP; s < (g + 1) * GROUP; s++) {
        unsigned spins = 0;
        for (;;) {
            uint8_t t = __atomic_load_n(&o->tags[s], __ATOMIC_ACQUIRE);
            if (t == TAG_EMPTY) break;
            if (t == TAG_BUSY || !take(o, s, t)) {
                pause_briefly(&spins);
                continue;
            }
            struct slot v = o->recs[s];
            uint64_t word = lanes > 1 ? region_word(v.addr >> REGION_SHIFT, 0) : 0;
            int r;
            while ((r = store(__atomic_load_n(&cur, __ATOMIC_ACQUIRE), mt_table_hash(v.addr), word,
                              t, &v)) < 0)
                ;
            if (!r) {
                give(o, s, t);
                all = 0;
                break;
            }
            size_t home = home_of(o, v.addr, s);
            __atomic_store_n(&o->recs[s].addr, 0, __ATOMIC_RELAXED);
            give(o, s, TAG_EMPTY);
            if (s / GROUP != home) spill(o, home, -1);
            break;
        }
    }
    return all;
}

static void turn_take(void)
{
    unsigned spins = 0, ticket = __atomic_fetch_add(&tickets, 1, __ATOMIC_RELAXED);
    while (__atomic_load_n(&serving, __ATOMIC_ACQUIRE) != ticket)
        pause_briefly(&spins);
}

/* Takes the turn if no one holds it or waits for it. */
static int turn_try(void)
{
    unsigned free_ = __atomic_load_n(&serving, __ATOMIC_SEQ_CST);
    return __atomic_compare_exchange_n(&tickets, &free_, free_ + 1, 0, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static void turn_release(void)
{
    __atomic_store_n(&serving, serving + 1, __ATOMIC_SEQ_CST);
}

/* With the turn, once every group of o (the oldest generation, not cur) has been drained: moves
 * what is left (records that found cur full where they go) and retires o when it is empty. No
 * record can come in behind: a thread that takes a slot of o gives it back, as o is not cur
 * (store_in). Its pages go back to the system; the mapping stays, so that a thread still looking
 * at o reads zeros: empty tags, no spills. Returns 0 when records are left. */
static int sweep(struct gen *o)
{
    for (size_t g = 0; g < o->groups; g++)
        if (match(o, g, TAG_EMPTY) != 0xFFFF && !drain_group(o, g)) return 0;
    __atomic_store_n(&o[1].prev, NULL, __ATOMIC_RELEASE);
    int e = errno;
    madvise(o->mem, o->bytes, MADV_DONTNEED);
    errno = e;
    return 1;
}

/* Retires the oldest generation once all its groups have been drained, if the turn is free. The
 * drainer of the last group calls it, and so does every holder of the turn as it gives it back:
 * the drainer cannot take the turn while it is held. Each side changes what the other reads
 * (finished, serving) before it reads, with seq_cst, so that one of them sees the other. */
static void try_retire(void)
{
    struct gen *c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE), *o = oldest(c);
    if (o == c || __atomic_load_n(&o->finished, __ATOMIC_SEQ_CST) < o->groups || !turn_try())
        return;
    if (__atomic_load_n(&o[1].prev, __ATOMIC_ACQUIRE) == o) sweep(o);
    turn_release();
}

static void turn_give(void)
{
    turn_release();
    try_retire();
}

/* Drains up to n groups of o, the oldest generation, into cur. Drainers work side by side, each on
 * the groups it claims, so that one descheduled in the middle of a group holds back that group
 * only: with one drainer at a time, such a pause let four threads on two cores fill the new
 * generation before the old one was drained. */
static void drain(struct gen *o, size_t n)
{
    for (; n; n--) {
        size_t g = __atomic_fetch_add(&o->next, 1, __ATOMIC_RELAXED);
        if (g >= o->groups) return;
        drain_group(o, g);
        if (__atomic_add_fetch(&o->finished, 1, __ATOMIC_SEQ_CST) == o->groups) try_retire();
    }
}

/* With the turn: drains and retires every generation before cur, waiting for the drainers of
 * claimed groups, and grows when cur is too full to take their records. Returns cur, which then
 * holds every record but at the cap, where what finds no slot stays where it is. */
static struct gen *finish(void)
{
    unsigned spins = 0;
    for (;;) {
        struct gen *c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE), *o;
        if (!__atomic_load_n(&c->prev, __ATOMIC_ACQUIRE)) return c;
        drain(o = oldest(c), SIZE_MAX);
        while (__atomic_load_n(&o->finished, __ATOMIC_ACQUIRE) < o->groups)
            pause_briefly(&spins);
        if (!sweep(o)) {
            if (c == last) return c;
            __atomic_store_n(&cur, c + 1, __ATOMIC_SEQ_CST);
        }
    }
}

/* c has no slot for a record: makes the next generation current, with the turn. Only here may an
 * insert wait: for a reader's pass to end (no generation is made during one, so that no record
 * moves under it), or for another thread's growth. The generations before c need not be drained
 * yet: a drainer descheduled in the middle of a group would hold the growth back while the other
 * threads filled c. Returns 1 when cur has changed (here or in another thread), 0 when the record
 * is to be dropped: c is the last generation, or this thread is in a pass. */
static int make_room(struct gen *c)
{
    if (c == last || in_pass) return 0;
    turn_take();
    if (__atomic_load_n(&cur, __ATOMIC_ACQUIRE) == c)
        __atomic_store_n(&cur, c + 1, __ATOMIC_SEQ_CST);
    turn_give();
    return 1;
}

/* Everything but the common case of mt_table_insert, whose census count it takes over: a record
 * that may be in more than one group, whose home group is full, or that comes while the table
 * grows. */
__attribute__((noinline)) static int insert_slow(const struct mt_record *rec, int *replaced,
                                                 uint64_t h)
{
    struct slot packed = pack(rec), *v = &packed;
    uint8_t t = tag_of(h);
    *replaced = 0;
    for (;;) {
        uint64_t word = lanes > 1 ? cached_word(v->addr >> REGION_SHIFT, 1) : 0;
        struct gen *c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
        unsigned first, second;
        place(h, word, c, &first, &second);
        struct gen *o = oldest(c);
        if (o != c) {
            /* Each insert moves a group while the table grows, so a generation is drained long
             * before its successor could fill. A stale record may still be in an older one: one
             * record per address. */
            drain(o, 1);
            if (remove_from_old(c, v->addr, h, word, t, NULL)) *replaced = 1;
        }
        if (replace_in_lane(c, first, h, t, v) ||
            (second != NO_LANE && replace_in_lane(c, second, h, t, v))) {
            census_add(h, -1);
            *replaced = 1;
            return 1;
        }
        int r = store(c, h, word, t, v);
        if (r > 0) return 1;
        if (r == 0 && !make_room(c)) {
            census_add(h, -1);
            return 0;
        }
    }
}

int mt_table_insert(const struct mt_record *rec, int *replaced)
{
    uint64_t h = mt_table_hash(rec->addr);
    uint64_t word = lanes > 1 ? cached_word(rec->addr >> REGION_SHIFT, 1) : 0;
    census_add(h, 1);
    /* Commonly the table is not growing, the record can be in one group only, its home, and there
     * is room there. */
    struct gen *c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
    unsigned first, second;
    place(h, word, c, &first, &second);
    size_t g0 = group_of(c, h, first);
    if (!__atomic_load_n(&c->prev, __ATOMIC_RELAXED) && second == NO_LANE &&
        !__atomic_load_n(&c->spills[g0], __ATOMIC_RELAXED)) {
        uint8_t t = tag_of(h);
        struct slot v = pack(rec);
        if ((*replaced = replace_in(c, g0, t, &v))) {
            census_add(h, -1);
            return 1;
        }
        if (store_in(c, g0, g0, t, &v) > 0) return 1;
    }
    return insert_slow(rec, replaced, h);
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
    struct gen *c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
    for (;;) {
        /* A record moves only from the oldest generation to cur, stored in cur before it leaves:
         * looked for from the oldest to c, it cannot slip past. */
        if (__builtin_expect(__atomic_load_n(&c->prev, __ATOMIC_ACQUIRE) != NULL, 0) &&
            remove_from_old(c, addr, h, word, t, out))
            return 1;
        unsigned first, second;
        place(h, word, c, &first, &second);
        if (remove_in(c, addr, h, first, second, t, out)) return 1;
        /* Unless a newer generation took it from c meanwhile, or the region was spread meanwhile:
         * a drain then stores the record it moves in the lane of its hash, where a look placed by
         * the word from before the spread does not go. A drain that read the spread word emptied
         * the old slot after, and this look saw that: so it sees the spread word too. */
        ACQUIRE_FENCE();
        struct gen *now = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
        uint64_t fresh = lanes > 1 ? region_word(r, 0) : 0;
        if (__builtin_expect(now == c && fresh == word, 1)) return 0;
        word = fresh;
        c = now;
    }
}

/* A pass holds the turn from start to end: no generation is made meanwhile, and it first finishes
 * every drain, so that no record moves under it (a move would carry a record from ahead of the
 * pass to behind it, or back). Inserts and removals go on. Returns cur, whose generations (itself
 * and, only at the cap, older ones) hold every record. */
static struct gen *read_begin(void)
{
    /* A pass inside mt_table_hold() already has the turn, and every drain finished. */
    if (in_pass++) return __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
    turn_take();
    return finish();
}

static void read_end(void)
{
    if (--in_pass == 0) turn_give();
}

void mt_table_hold(void)
{
    read_begin();
}

void mt_table_release(void)
{
    read_end();
}

/* Sets the lost bit of rec's record in generation c, lanes as place() gives them: -1 when c holds
 * no record of rec->addr, 0 when the one it holds is another block's, 1 when set. With the turn
 * held no record moves, so a BUSY slot is owned for a few stores (an insert or a removal). */
static int set_lost_in(struct gen *c, const struct mt_record *rec, unsigned first, unsigned second)
{
    uint64_t h = mt_table_hash(rec->addr);
    uint8_t t = tag_of(h);
    struct slot want = pack(rec);
    unsigned lane[2] = {first, second};
    for (int i = 0; i < 2 && lane[i] != NO_LANE; i++)
        for (size_t g = group_of(c, h, lane[i]), w = 0; w < c->window; w++)
            for (unsigned m = match(c, g + w, t); m; m &= m - 1) {
                size_t s = (g + w) * GROUP + (size_t)__builtin_ctz(m);
                unsigned spins = 0;
                int owned = 0;
                while (addr_at(c, s) == rec->addr && !(owned = take(c, s, t)))
                    pause_briefly(&spins);
                if (!owned) continue;
                if (c->recs[s].addr != rec->addr) {
                    give(c, s, t);
                    continue;
                }
                int same = (c->recs[s].size_stack & ~LOST_BIT) == want.size_stack &&
                           c->recs[s].stack_tid_time == want.stack_tid_time;
                if (same) c->recs[s].size_stack |= LOST_BIT;
                give(c, s, t);
                return same;
            }
    return -1;
}

int mt_table_set_lost(const struct mt_record *rec)
{
    uint64_t word = lanes > 1 ? region_word(rec->addr >> REGION_SHIFT, 0) : 0;
    if (lanes > 1 && !word) return 0;
    int r = -1;
    for (struct gen *c = read_begin(); c && r < 0;
         c = __atomic_load_n(&c->prev, __ATOMIC_ACQUIRE)) {
        unsigned first, second;
        place(mt_table_hash(rec->addr), word, c, &first, &second);
        r = set_lost_in(c, rec, first, second);
    }
    read_end();
    return r > 0;
}

static size_t each_in(struct gen *c, void (*fn)(const struct mt_record *, void *), void *arg)
{
    size_t seen = 0;
    for (size_t s = 0; s < c->slots; s++) {
        uint8_t t = __atomic_load_n(&c->tags[s], __ATOMIC_RELAXED);
        if (t < 2 || !take(c, s, t)) continue;
        struct mt_record copy = unpack(c, s);
        give(c, s, t);
        fn(&copy, arg);
        seen++;
    }
    return seen;
}

/* A pass's generations are cur and, at the cap only, the older ones, read newest first. */
size_t mt_table_each(void (*fn)(const struct mt_record *, void *), void *arg)
{
    size_t seen = 0;
    for (struct gen *c = read_begin(); c; c = __atomic_load_n(&c->prev, __ATOMIC_ACQUIRE))
        seen += each_in(c, fn, arg);
    read_end();
    return seen;
}

static size_t clear_in(struct gen *c)
{
    size_t cleared = 0;
    for (size_t s = 0; s < c->slots; s++) {
        uint8_t t = __atomic_load_n(&c->tags[s], __ATOMIC_RELAXED);
        if (t < 2 || !take(c, s, t)) continue;
        uintptr_t addr = c->recs[s].addr;
        size_t home = home_of(c, addr, s);
        __atomic_store_n(&c->recs[s].addr, 0, __ATOMIC_RELAXED);
        give(c, s, TAG_EMPTY);
        if (s / GROUP != home) spill(c, home, -1);
        census_add(mt_table_hash(addr), -1);
        cleared++;
    }
    return cleared;
}

size_t mt_table_clear(void)
{
    size_t cleared = 0;
    for (struct gen *c = read_begin(); c; c = __atomic_load_n(&c->prev, __ATOMIC_ACQUIRE))
        cleared += clear_in(c);
    read_end();
    return cleared;
}

static size_t count_in(const struct gen *c)
{
    size_t n = 0;
    for (size_t g = 0; g < c->groups; g++)
        n += GROUP - (size_t)__builtin_popcount(match(c, g, TAG_EMPTY) | match(c, g, TAG_BUSY));
    return n;
}

size_t mt_table_count(void)
{
    size_t n = 0;
    for (struct gen *c = read_begin(); c; c = __atomic_load_n(&c->prev, __ATOMIC_ACQUIRE))
        n += count_in(c);
    read_end();
    return n;
}

/* Whether c holds a record of addr; for the fork repair, when no other thread exists. */
static int holds(const struct gen *c, uintptr_t addr)
{
    uint64_t h = mt_table_hash(addr);
    unsigned lane[2];
    place(h, lanes > 1 ? region_word(addr >> REGION_SHIFT, 0) : 0, c, &lane[0], &lane[1]);
    for (int i = 0; i < 2 && lane[i] != NO_LANE; i++)
        for (size_t g = group_of(c, h, lane[i]), w = 0; w < c->window; w++)
            for (unsigned m = match(c, g + w, tag_of(h)); m; m &= m - 1)
                if (c->recs[(g + w) * GROUP + (size_t)__builtin_ctz(m)].addr == addr) return 1;
    return 0;
}

/* In the child only the forking thread exists: a BUSY slot will never be given back. A slot whose
 * address is set holds a complete record (the address is written last), so it gets its tag again;
 * any other was mid-insert or already removed, and becomes empty. In an older generation, a drain
 * may have been stopped between storing a record in a newer one and emptying its slot: the newer
 * copy is kept. The turn's holder is gone too, and so are those waiting for it. The drain of the
 * oldest generation starts again from its first group: a group a drainer had claimed may not be
 * drained, and those that are have nothing left to move. */
void mt_table_after_fork(void)
{
    tickets = serving;
    struct gen *c = cur, *o = c;
    for (; o; o = o->prev) {
        for (size_t g = 0; g < o->groups; g++)
            for (unsigned m = match(o, g, TAG_BUSY); m; m &= m - 1) {
                size_t s = g * GROUP + (size_t)__builtin_ctz(m);
                uintptr_t a = o->recs[s].addr;
                for (const struct gen *newer = o + 1; a && newer <= c; newer++)
                    if (holds(newer, a)) o->recs[s].addr = a = 0;
                o->tags[s] = a ? tag_of(mt_table_hash(a)) : TAG_EMPTY;
            }
        if (!o->prev) o->next = o->finished = 0;
    }
}
