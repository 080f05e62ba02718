/* snapshot.c: the table copied out, sorted and indexed (see snapshot.h).
 *
 * Sorting is sort.h's radix sort on the address: qsort may call malloc, which a stopped thread
 * may hold the lock of. The index is an open-addressed table of 1 MiB regions, each with the
 * span of sorted records that touch it; a block that crosses regions is in each of their spans,
 * which stay contiguous because the records are sorted. */
#define _GNU_SOURCE
#include "mark/snapshot.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "base/mem.h"
#include "base/platform.h"
#include "base/sort.h"
#include "record/account.h"
#include "record/recorder.h"

#define REGION_SHIFT 20

struct mt_snapshot_region {
    uintptr_t key; /* region + 1; 0 while free */
    size_t first, last;
};

struct fill {
    struct mt_record *to;
    size_t n, cap;
};

static void copy_record(const struct mt_record *r, void *arg)
{
    struct fill *f = arg;
    if (f->n < f->cap) f->to[f->n] = *r;
    f->n++;
}

static uintptr_t record_addr(const struct mt_record *r)
{
    return r->addr;
}

MT_DEFINE_RADIX_SORT(radix_sort, struct mt_record, record_addr)
MT_DEFINE_UPPER_BOUND(past, struct mt_record, record_addr)

static struct mt_snapshot_region *slot_of(const struct mt_snapshot *s, uintptr_t region)
{
    size_t i = (size_t)((region * 0x9E3779B97F4A7C15ull) >> 20) & s->index_mask;
    for (;;) {
        struct mt_snapshot_region *e = &s->index[i];
        if (e->key == region + 1 || e->key == 0) return e;
        i = (i + 1) & s->index_mask;
    }
}

static uintptr_t last_byte(const struct mt_record *r)
{
    return r->addr + (r->size ? r->size - 1 : 0);
}

static int build_index(struct mt_snapshot *s)
{
    size_t regions = 0;
    uintptr_t prev = UINTPTR_MAX;
    for (size_t i = 0; i < s->heap; i++) {
        uintptr_t lo = s->rec[i].addr >> REGION_SHIFT, hi = last_byte(&s->rec[i]) >> REGION_SHIFT;
        regions += hi - lo + (lo != prev);
        prev = hi;
    }
    size_t slots = 64;
    while (slots < 2 * regions)
        slots *= 2;
    s->index_len = slots * sizeof *s->index;
    if (!(s->index_map = mt_mem_map(s->index_len))) return -1;
    s->index = s->index_map;
    s->index_mask = slots - 1;
    for (size_t i = 0; i < s->heap; i++) {
        uintptr_t lo = s->rec[i].addr >> REGION_SHIFT, hi = last_byte(&s->rec[i]) >> REGION_SHIFT;
        for (uintptr_t r = lo; r <= hi; r++) {
            struct mt_snapshot_region *e = slot_of(s, r);
            if (!e->key) *e = (struct mt_snapshot_region){r + 1, i, i};
            e->last = i + 1;
        }
    }
    return 0;
}

int mt_snapshot_take(struct mt_snapshot *s, int order)
{
    int sort = order == MT_SNAPSHOT_BY_ADDRESS;
    *s = (struct mt_snapshot){0};
    mt_guard_hold();
    /* The table may grow while it is copied: a copy that overflowed is taken again, larger. A
     * copy that is not recording (loaded as a NIF alone) has no table: its snapshot is empty. */
    size_t held = mt_active() ? mt_table_count() : 0;
    for (size_t cap = held + held / 4 + 1024;; cap *= 2) {
        /* Sorting takes a second array as large. */
        s->map_len = (sort ? 2 : 1) * cap * sizeof *s->rec;
        if (!(s->map = mt_mem_map(s->map_len))) break;
        /* The pages the copy will fill, faulted in by one call rather than a fault each; before
         * Linux 5.14 (no MADV_POPULATE_WRITE) the copy faults them in. */
        int e = errno;
        madvise(s->map, (held + 1) * sizeof *s->rec, MT_MADV_POPULATE_WRITE);
        errno = e;
        struct fill f = {s->map, 0, cap};
        s->now_ns = mt_now_ns(CLOCK_MONOTONIC_COARSE);
        if (mt_active()) mt_table_each(copy_record, &f);
        if (f.n <= cap) {
            s->rec = s->map;
            s->n = s->heap = f.n;
            if (sort) radix_sort(s->rec, s->rec + cap, s->n);
            while (sort && s->heap > 0 && (s->rec[s->heap - 1].addr & MT_TRACK_BIT))
                s->heap--;
            if (!sort || build_index(s) == 0) {
                mt_guard_release();
                return 0;
            }
            break;
        }
        mt_mem_unmap(s->map, s->map_len);
    }
    mt_snapshot_drop(s);
    mt_guard_release();
    errno = ENOMEM;
    return -1;
}

int mt_snapshot_join_heap(struct mt_snapshot *s, const struct mt_heap *h, struct mt_record *missed,
                          size_t missed_cap, size_t *missed_n, size_t *unrecorded)
{
    size_t cap = s->n + h->blocks, len = (cap ? cap : 1) * sizeof *s->rec;
    struct mt_record *to = mt_mem_map(len);
    if (!to) {
        errno = ENOMEM;
        return -1;
    }
    /* Both lists are sorted by address, and the blocks do not overlap. A block holds the records
     * that start inside it (a block memalign moved into an mmapped chunk starts past the chunk's
     * first bytes); a record inside no block is a free mtrace missed: its chunk is free, or
     * unmapped; but for the VM's blocks, which lie in its carriers, unless in a free chunk. */
    size_t i = 0, j = 0, k = 0;
    *missed_n = *unrecorded = 0;
    while (i < s->heap || j < h->blocks) {
        if (j < h->blocks && (i >= s->heap || h->block[j].addr <= s->rec[i].addr)) {
            const struct mt_heap_chunk *b = &h->block[j++];
            /* A block with no record of its own, a record of glibc's or the VM's block that is
             * the chunk itself (+MRe false), joins as unrecorded, before the VM's blocks it
             * holds: it is then a carrier the VM took from malloc (reach.c reads it whole). */
            int own = 0;
            size_t in = i;
            for (; in < s->heap && s->rec[in].addr < b->addr + b->size; in++)
                own |= !s->rec[in].vm || s->rec[in].addr == b->addr;
            if (!own) {
                to[k++] = (struct mt_record){
                    .addr = b->addr, .size = b->size, .stack = MT_SNAPSHOT_UNRECORDED};
                ++*unrecorded;
            }
            while (i < in)
                to[k++] = s->rec[i++];
        } else if ((h->mmapped_missing || s->rec[i].vm) && !mt_heap_free_at(h, s->rec[i].addr)) {
            /* perhaps in an mmapped chunk the walk did not find; or the VM's, in its carriers */
            to[k++] = s->rec[i++];
        } else if (++*missed_n <= missed_cap) {
            missed[*missed_n - 1] = s->rec[i++];
        } else {
            i++;
        }
    }
    size_t heap = k;
    for (i = s->heap; i < s->n; i++)
        to[k++] = s->rec[i];
    struct mt_snapshot joined = *s;
    joined.map = joined.rec = to;
    joined.map_len = len;
    joined.n = k;
    joined.heap = heap;
    joined.index_map = NULL;
    if (build_index(&joined) != 0) {
        mt_mem_unmap(to, len);
        errno = ENOMEM;
        return -1;
    }
    mt_snapshot_drop(s);
    *s = joined;
    return 0;
}

void mt_snapshot_drop(struct mt_snapshot *s)
{
    if (s->map) mt_mem_unmap(s->map, s->map_len);
    if (s->index_map) mt_mem_unmap(s->index_map, s->index_len);
    *s = (struct mt_snapshot){0};
}

size_t mt_snapshot_find(const struct mt_snapshot *s, uintptr_t a)
{
    if (!s->index) return MT_SNAPSHOT_NONE;
    const struct mt_snapshot_region *e = slot_of(s, a >> REGION_SHIFT);
    if (!e->key) return MT_SNAPSHOT_NONE;
    size_t lo = past(s->rec, e->first, e->last, a);
    if (lo == e->first) return MT_SNAPSHOT_NONE;
    const struct mt_record *r = &s->rec[lo - 1];
    return a <= last_byte(r) ? lo - 1 : MT_SNAPSHOT_NONE;
}
