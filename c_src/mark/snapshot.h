/* snapshot.h: the live records, copied out of the table once, sorted by address when asked.
 *
 * The one reader of the table for everything that is not a hook: olds/2, leaks/1, reports and
 * the CSV export each take a snapshot and work on the copy, so that no table slot is held while
 * they sort, symbolize or write, and all of them see records the same way.
 *
 * Contract
 * - mt_snapshot_take() copies every record the table holds (each consistent: table.h). Asked
 *   for MT_SNAPSHOT_BY_ADDRESS, it also sorts them by address (tracked resources, whose keys
 *   carry MT_TRACK_BIT, come last) and indexes the heap blocks by 1 MiB region, so that
 *   mt_snapshot_find() answers "which block holds this address" in a hash probe and a short
 *   binary search. Readers that only count or pick records take them in the table's order: on
 *   a million records the sort and the index cost twenty times the copy.
 * - It neither calls malloc nor takes a lock: its memory comes from mem.h (so that a
 *   reachability scan never takes it for a root), which lets it run while the other threads are
 *   stopped (world.h). Returns 0, or -1 with errno ENOMEM.
 * - A snapshot is owned by one thread; mt_snapshot_drop() releases it.
 */
#ifndef MTRACE_SNAPSHOT_H
#define MTRACE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "mark/glibc_heap.h"
#include "record/table.h"

#define MT_SNAPSHOT_NONE ((size_t)-1)

/* The stack id of a block known from glibc's heap alone (glibc_heap.h): it has no record, so no
 * stack, no age and no thread (time_ns and tid are 0), and its size is the usable size. */
#define MT_SNAPSHOT_UNRECORDED UINT32_MAX

enum { MT_SNAPSHOT_ANY_ORDER, MT_SNAPSHOT_BY_ADDRESS };

struct mt_snapshot {
    struct mt_record *rec; /* n records, by address if asked, else in the table's order */
    size_t n;
    size_t heap;     /* by address: rec[0 .. heap) are heap blocks, the rest tracked resources */
    uint64_t now_ns; /* CLOCK_MONOTONIC_COARSE when taken, the clock of the records' times */
    /* the index (1 MiB region -> the records that touch it) and the memory behind it all */
    struct mt_snapshot_region *index;
    size_t index_mask;
    void *map, *index_map;
    size_t map_len, index_len;
};

int mt_snapshot_take(struct mt_snapshot *s, int order);
void mt_snapshot_drop(struct mt_snapshot *s);

/* Joins a walk of glibc's heap to a snapshot taken by address, as the mark needs it: a record
 * that starts in no block of the walk (its chunk is free, or unmapped) is a free mtrace missed
 * (a block freed behind its back) and goes (but one in no free chunk stays while the walk missed
 * mmapped chunks, and when the VM served it: mt_record.vm), counted in *missed_n and copied
 * to missed[] while missed_cap allows; a block of the walk that holds no record joins as an
 * unrecorded one (MT_SNAPSHOT_UNRECORDED), counted in *unrecorded. No malloc, no lock. Returns 0,
 * or -1 with errno ENOMEM (the snapshot is then unchanged). */
int mt_snapshot_join_heap(struct mt_snapshot *s, const struct mt_heap *h, struct mt_record *missed,
                          size_t cap, size_t *missed_n, size_t *unrecorded);

/* The heap block whose bytes hold address a (interior addresses too; a block of size 0 holds
 * its own address), or MT_SNAPSHOT_NONE; always NONE in a snapshot not taken by address. */
size_t mt_snapshot_find(const struct mt_snapshot *s, uintptr_t a);

/* The record's age when the snapshot was taken, in nanoseconds, in whole milliseconds: the table
 * keeps times to the millisecond, so finer figures would only be the clock's phase. */
static inline uint64_t mt_snapshot_age(const struct mt_snapshot *s, const struct mt_record *r)
{
    uint64_t age = s->now_ns > r->time_ns ? s->now_ns - r->time_ns : 0;
    return age - age % 1000000;
}

#endif
