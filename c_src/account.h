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
 * - Resources recorded through the C API (mtrace_track) carry MT_TRACK_BIT in their key; they
 *   have their own totals and are not heap.
 */
#ifndef MTRACE_ACCOUNT_H
#define MTRACE_ACCOUNT_H

#include <stdint.h>
#include <sys/mman.h>

#include "config.h"
#include "table.h"

/* Tracked keys live above every user-space address, so they never meet a heap block's. */
#define MT_TRACK_BIT ((uintptr_t)1 << 63)

struct mt_tally {
    uint64_t alloc_bytes, alloc_blocks, free_bytes, free_blocks;
};

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

static inline void mt_account_heap(int64_t bytes, int64_t blocks)
{
    int64_t now = __atomic_add_fetch(&mt_account.live_bytes, bytes, __ATOMIC_RELAXED);
    mt_account_add(&mt_account.live_blocks, blocks);
    int64_t peak = __atomic_load_n(&mt_account.peak_bytes, __ATOMIC_RELAXED);
    while (now > peak && !__atomic_compare_exchange_n(&mt_account.peak_bytes, &peak, now, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* After an insert of r (stored: it found a slot). */
static inline void mt_account_alloc(const struct mt_record *r, int stored)
{
    if (stored) {
        struct mt_tally *t = &mt_account.tally[r->stack];
        mt_tally_add(&t->alloc_bytes, r->size);
        mt_tally_add(&t->alloc_blocks, 1);
    }
    if (r->addr & MT_TRACK_BIT) {
        if (stored) {
            mt_account_add(&mt_account.tracked_bytes, (int64_t)r->size);
            mt_account_add(&mt_account.tracked_blocks, 1);
        }
        return;
    }
    if (!stored) {
        mt_account_add(&mt_account.untabled_bytes, (int64_t)r->size);
        mt_account_add(&mt_account.untabled_blocks, 1);
    }
    mt_account_heap((int64_t)r->size, 1);
}

/* Before the real free of p: r is the record removed for it, or NULL when it had none. */
static inline void mt_account_free(void *p, const struct mt_record *r)
{
    if (r) {
        struct mt_tally *t = &mt_account.tally[r->stack];
        mt_tally_add(&t->free_bytes, r->size);
        mt_tally_add(&t->free_blocks, 1);
        if (r->addr & MT_TRACK_BIT) {
            mt_account_add(&mt_account.tracked_bytes, -(int64_t)r->size);
            mt_account_add(&mt_account.tracked_blocks, -1);
        } else {
            mt_account_add(&mt_account.live_bytes, -(int64_t)r->size);
            mt_account_add(&mt_account.live_blocks, -1);
        }
        return;
    }
    if ((uintptr_t)p & MT_TRACK_BIT) return;
    int64_t n = __atomic_load_n(&mt_account.untabled_blocks, __ATOMIC_RELAXED);
    while (n > 0 && !__atomic_compare_exchange_n(&mt_account.untabled_blocks, &n, n - 1, 1,
                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    if (n <= 0) return;
    int64_t bytes = __atomic_load_n(&mt_account.untabled_bytes, __ATOMIC_RELAXED) / n;
    mt_account_add(&mt_account.untabled_bytes, -bytes);
    mt_account_add(&mt_account.live_bytes, -bytes);
    mt_account_add(&mt_account.live_blocks, -1);
}

/* A failed realloc put old back, stored or not (no slot left): its free is undone. */
static inline void mt_account_restore(const struct mt_record *old, int stored)
{
    if (!stored) {
        /* Live again but without a record: untabled from now on. Its site keeps the free it
         * saw, since the block's real free will not reach the site any more. */
        if (old->addr & MT_TRACK_BIT) return;
        mt_account_add(&mt_account.untabled_bytes, (int64_t)old->size);
        mt_account_add(&mt_account.untabled_blocks, 1);
        mt_account_heap((int64_t)old->size, 1);
        return;
    }
    struct mt_tally *t = &mt_account.tally[old->stack];
    __atomic_fetch_sub(&t->free_bytes, old->size, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&t->free_blocks, 1, __ATOMIC_RELAXED);
    if (old->addr & MT_TRACK_BIT) {
        mt_account_add(&mt_account.tracked_bytes, (int64_t)old->size);
        mt_account_add(&mt_account.tracked_blocks, 1);
    } else {
        mt_account_heap((int64_t)old->size, 1);
    }
}

#endif
