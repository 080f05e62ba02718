/* account.h: the live-heap total, its peak, and per-call-site tallies, kept for reports.
 *
 * Contract
 * - Off unless a report is configured (mt_config.account, see config.h): then the recorder's
 *   only extra cost per call is one predictable branch on that read-only flag, and no memory is
 *   reserved. When on, each recorded allocation or free also does a few relaxed atomic adds: on
 *   two global counters (live bytes and blocks), a compare-and-swap on the peak only when the
 *   peak grows, and two adds on its call site's tally. The global counters are one cache line
 *   that every allocating thread writes: the price of an exact total and peak, paid only by
 *   programs that ask for reports.
 * - The hook-side functions (mt_account_alloc, _free, _restore) run on the allocation path: they
 *   never allocate, lock, print or change errno. mt_account_init() runs once, from the recorder's
 *   initialisation, before any record is made.
 * - Sizes: a block with a record counts its requested size, both ways (the record keeps it). A
 *   block the table had no room for ("untabled") adds its requested size too, but its free finds
 *   no record to say how big it was: such a free subtracts the mean size of the untabled blocks
 *   outstanding, so their part of the total returns to exactly zero once they are all freed, and
 *   nothing here ever reads a block (the recorder's promise, recorder.h). A free without a record
 *   subtracts only while untabled blocks are outstanding, so frees of blocks mtrace never counted
 *   (its own, or those made before it started) cannot drive the total down. The total and peak
 *   are exact while nothing is dropped, close otherwise.
 * - Tallies are per interned stack id (0: no stack kept) and count recorded blocks only: a free
 *   subtracts from the site that made the block, so a site's alloc - free is its net growth.
 *   Readers take the difference of two reads (a failed realloc undoes its free, so a count may
 *   also step back).
 * - Sampling (MTRACE_SAMPLE=N): a block of s bytes is recorded with probability p = 1 - e^(-s/N)
 *   (recorder.c). Each record then stands for 1/p blocks and s/p bytes, its weight (mt_weigh),
 *   and tallies add weights, so a site's figures are unbiased estimates. Tallied blocks are in
 *   1/MT_ONE units, since 1/p is rarely whole; without sampling a block weighs exactly MT_ONE
 *   and its size. The live totals and peak add weights too; an unsampled block touches nothing
 *   here, which also keeps the shared counters off the sampling mode's common path.
 * - Resources recorded through the C API (mtrace_track) carry MT_TRACK_BIT in their key; they
 *   have their own totals and are not heap.
 */
#ifndef MTRACE_ACCOUNT_H
#define MTRACE_ACCOUNT_H

#include <stdint.h>
#include <sys/mman.h>

#include "base/config.h"
#include "record/table.h"

/* Tracked keys live above every user-space address, so they never meet a heap block's. */
#define MT_TRACK_BIT ((uintptr_t)1 << 63)

#define MT_ONE 1024

struct mt_tally {
    uint64_t alloc_bytes, alloc_blocks, free_bytes, free_blocks; /* blocks in 1/MT_ONE units */
};

struct mt_weight {
    uint64_t bytes, blocks; /* blocks in 1/MT_ONE units */
};

/* Whole blocks from 1/MT_ONE units, rounded to the nearest. */
static inline int64_t mt_blocks(int64_t units)
{
    return (units + (units < 0 ? -MT_ONE / 2 : MT_ONE / 2)) / MT_ONE;
}

/* What record r stands for (a tracked resource is never sampled); pure, any thread
 * (recorder.c). */
struct mt_weight mt_weigh(const struct mt_record *r);

/* Blocks in 1/MT_ONE units, bytes whole; with sampling, estimates (see above). */
struct mt_account {
    int64_t live_bytes, live_blocks, peak_bytes; /* heap, tabled or not */
    int64_t untabled_bytes, untabled_blocks;     /* the part of live the table has no record of */
    int64_t tracked_bytes, tracked_blocks;       /* mtrace_track'ed resources */
    struct mt_tally *tally;                      /* [mt_config.stacks + 1], by stack id */
} __attribute__((aligned(64)));

/* Defined in recorder.c, so that the recorder links alone (as test/c does). */
extern struct mt_account mt_account;

#define MT_ACCOUNTING __builtin_expect(mt_config.account, 0)

static inline void mt_account_add(int64_t *c, int64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

static inline void mt_tally_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}

/* Reserves the tallies; on failure, accounting is switched off (reports say so). */
static inline void mt_account_init(void)
{
    if (!mt_config.account) return;
    void *t = mmap(NULL, (mt_config.stacks + 1) * sizeof(struct mt_tally), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (t == MAP_FAILED)
        mt_config.account = 0;
    else
        mt_account.tally = t;
}

static inline void mt_account_heap(int64_t bytes, int64_t units)
{
    int64_t now = __atomic_add_fetch(&mt_account.live_bytes, bytes, __ATOMIC_RELAXED);
    mt_account_add(&mt_account.live_blocks, units);
    int64_t peak = __atomic_load_n(&mt_account.peak_bytes, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&mt_account.peak_bytes, &peak, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* Adds sign (+1 or -1) times w to a tally's pair of counters (unsigned: -1 wraps, as intended). */
static inline void mt_tally_weight(uint64_t *bytes, uint64_t *blocks, struct mt_weight w, int sign)
{
    mt_tally_add(bytes, (uint64_t)sign * w.bytes);
    mt_tally_add(blocks, (uint64_t)sign * w.blocks);
}

/* Adds sign times w, the weight of record r, to the live totals (heap or tracked). */
static inline void mt_account_live(const struct mt_record *r, struct mt_weight w, int sign)
{
    int64_t bytes = sign * (int64_t)w.bytes, units = sign * (int64_t)w.blocks;
    if (r->addr & MT_TRACK_BIT) {
        mt_account_add(&mt_account.tracked_bytes, bytes);
        mt_account_add(&mt_account.tracked_blocks, units);
    } else if (sign > 0) {
        mt_account_heap(bytes, units);
    } else {
        mt_account_add(&mt_account.live_bytes, bytes);
        mt_account_add(&mt_account.live_blocks, units);
    }
}

/* After an insert of r (stored: it found a slot). */
static inline void mt_account_alloc(const struct mt_record *r, int stored)
{
    if (stored) {
        struct mt_tally *t = &mt_account.tally[r->stack];
        struct mt_weight w = mt_weigh(r);
        mt_tally_weight(&t->alloc_bytes, &t->alloc_blocks, w, 1);
        mt_account_live(r, w, 1);
        return;
    }
    /* With sampling, a free of a dropped block cannot be told from a free of an unsampled one:
     * estimates are made of records alone, and the drop is counted (stats, report). */
    if ((r->addr & MT_TRACK_BIT) || mt_config.sample) return;
    mt_account_add(&mt_account.untabled_bytes, (int64_t)r->size);
    mt_account_add(&mt_account.untabled_blocks, 1);
    mt_account_heap((int64_t)r->size, MT_ONE);
}

/* Before the real free of p: r is the record removed for it, or NULL when it had none. */
static inline void mt_account_free(void *p, const struct mt_record *r)
{
    if (r) {
        struct mt_tally *t = &mt_account.tally[r->stack];
        struct mt_weight w = mt_weigh(r);
        mt_tally_weight(&t->free_bytes, &t->free_blocks, w, 1);
        mt_account_live(r, w, -1);
        return;
    }
    if (((uintptr_t)p & MT_TRACK_BIT) || mt_config.sample) return;
    int64_t n = __atomic_load_n(&mt_account.untabled_blocks, __ATOMIC_RELAXED);
    while (n > 0 && !__atomic_compare_exchange_n(&mt_account.untabled_blocks, &n, n - 1, 1,
                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    if (n <= 0) return;
    int64_t bytes = __atomic_load_n(&mt_account.untabled_bytes, __ATOMIC_RELAXED) / n;
    mt_account_add(&mt_account.untabled_bytes, -bytes);
    mt_account_add(&mt_account.live_bytes, -bytes);
    mt_account_add(&mt_account.live_blocks, -MT_ONE);
}

/* A failed realloc put old back, stored or not (no slot left): its free is undone. */
static inline void mt_account_restore(const struct mt_record *old, int stored)
{
    if (!stored) {
        /* Live again but without a record, like a drop. Its site keeps the free it saw, since
         * the block's real free will not reach the site any more. */
        mt_account_alloc(old, 0);
        return;
    }
    struct mt_tally *t = &mt_account.tally[old->stack];
    struct mt_weight w = mt_weigh(old);
    mt_tally_weight(&t->free_bytes, &t->free_blocks, w, -1);
    mt_account_live(old, w, 1);
}

#endif
