/* table.h: the live table, one record per traced live allocation, found by its address.
 *
 * Contract
 * - Memory: reserved once by mt_table_init() with mmap (never malloc), as address space only, for
 *   every size the table may grow to; pages are touched as they are used, and those of a size the
 *   table has grown past are given back. 25.125 bytes a slot (a 24-byte packed record, a one-byte
 *   tag, and a two-byte counter per 16 slots), a 16 KiB census (touched only by a sparse table)
 *   and an 8 KiB region map in the library's own data. A record keeps sizes up to 2^46 - 1 bytes,
 *   stack ids up to 2^25 - 1, thread ids up to 2^22 - 1 (Linux's limit) and its time to the
 *   millisecond for 198 days after mt_table_init(); beyond those, the largest value is kept.
 * - Growth: the table starts with the slots given and doubles, up to the cap, whenever a record
 *   finds no free slot it may use. The records of the smaller sizes move to the current one a
 *   group at a time, by the inserts that follow. Below the cap every record is stored, but one
 *   inserted by a thread that is itself in a pass of mt_table_each() (its fn allocating); at the
 *   cap, one that finds no free slot it may use is not. mt_table_insert() then returns 0, and the
 *   caller counts the drop.
 * - Thread safety: every function may run on any thread at once. Inserts that find a slot and
 *   removals take no lock. A slot is owned by whoever swings its tag to BUSY with a
 *   compare-and-swap; owners hold a slot for a few stores, never across a call. Readers take a slot
 * the same way, so a copied record is never torn: address, size, time, thread and stack always
 * belong to one allocation. A pass of mt_table_each(), mt_table_clear() or mt_table_count() holds
 * records in place: it sees every record that is there from its start to its end exactly once, and
 * any other at most once. Passes, and growths, take turns (a spinning ticket lock, table.c): an
 * insert waits only when it needs a growth while a pass is on.
 * - Lanes: the table is cut into lanes, and each 64 MiB region of the address space has one, given
 *   in turn as regions are first seen and never changed. glibc gives each thread's arena regions of
 *   its own, so threads that allocate at once mostly write different cache lines. A region that
 *   fills its part of its lane is spread: its later records go to the lane of their hash, as in a
 *   table without lanes, until the table grows; in the grown table it starts in its own lane
 *   again. A record is stored in a fixed window of slots (a probe window) after its
 *   hash in its lane. Removal frees a slot at once (no tombstones), so the table never degrades.
 * - Fork: mt_table_after_fork() (child side) repairs slots left BUSY by threads that do not exist
 *   in the child, in every table size in use; afterwards no operation can wait on them, and a
 *   growth under way goes on.
 * - None of these functions allocates, prints, changes errno or takes a lock other than the turn.
 */
#ifndef MTRACE_TABLE_H
#define MTRACE_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct mt_record {
    uintptr_t addr; /* 0 only in an empty slot */
    uint64_t size;
    uint64_t time_ns;  /* CLOCK_MONOTONIC_COARSE at the allocation; kept to the millisecond */
    uint32_t stack;    /* interned stack id (stack.h), 0 when the stack could not be kept */
    uint32_t tid : 30; /* allocating thread (Linux tid) */
    uint32_t vm : 1;   /* served by the VM's allocator through the NIF API: in its carriers */
    uint32_t lost : 1; /* a leak scan found the block lost (mt_table_set_lost); 0 when inserted */
};

/* Reserves a table of slots slots that may grow up to slots_max (both multiples of 16), in lanes
 * lanes (1 to MT_TABLE_LANES_MAX; fewer when a lane of the first size would have less than 2048
 * slots); returns 0, or -1 when not even the first size can be mapped. When the address space
 * cannot hold every size up to slots_max, the cap is lowered until it does. sparse: most frees will
 * find no record (sampling); the table then keeps a census, which answers them without a look at
 * the slots, at the cost of a shared counter that every insert and removal writes, and has one
 * lane. */
int mt_table_init(size_t slots, size_t slots_max, int sparse, unsigned lanes);

/* Where an address is kept: table.c takes its home group, fingerprint and census bucket from this
 * hash. */
static inline uint64_t mt_table_hash(uintptr_t addr)
{
    return (uint64_t)(addr >> 4) * 0x9E3779B97F4A7C15ull;
}

/* A sparse table's records, counted by bits 16..27 of their hashes; written by table.c only. */
#define MT_CENSUS_BUCKETS 4096
#define MT_CENSUS_BUCKET(h) ((h) >> 16 & (MT_CENSUS_BUCKETS - 1))
extern struct mt_census {
    int on;
    uint32_t count[MT_CENSUS_BUCKETS];
} mt_census __attribute__((visibility("hidden")));

/* Returns 0 when addr surely has no record (its census bucket is empty), else 1. A check for the
 * free hook to make inline; mt_table_remove() makes it too. */
static inline int mt_table_may_hold(uintptr_t addr)
{
    return !mt_census.on || __atomic_load_n(&mt_census.count[MT_CENSUS_BUCKET(mt_table_hash(addr))],
                                            __ATOMIC_RELAXED) != 0;
}

/* The slots of the table now, and of the largest it may grow to; how many times it has grown. */
size_t mt_table_slots(void);
size_t mt_table_slots_max(void);
unsigned mt_table_grown(void);

/* A spread region's record has two lanes to go to (see table.c): with two lanes that is all of the
 * table. With eight, one region leaking 1M blocks in 1.25M slots filled the lanes its records
 * could reach and lost 36,000 to 89,000 of them. */
#define MT_TABLE_LANES_MAX 2
/* Lanes in use (see mt_table_init). */
unsigned mt_table_lanes(void);

/* Stores rec (rec->addr != 0). A stale record of the same address (its free was never seen) is
 * replaced; *replaced is set to 1 then. Returns 1 if stored, 0 if dropped (see Growth). */
int mt_table_insert(const struct mt_record *rec, int *replaced);

/* Marks the record rec (its address, and its other fields as a copy of it has them) lost: the
 * bit stays with the record until it is removed, and is not kept by a new record of the same
 * address (a free, then an allocation). Not for the hooks: it takes the turn, as a pass does, and
 * waits out a slot's owner. Returns 1 when done, 0 when the table has no such record. */
int mt_table_set_lost(const struct mt_record *rec);

/* Removes the record of addr. Returns 1 and copies it to *out (if out) when there was one. */
int mt_table_remove(uintptr_t addr, struct mt_record *out);

/* Calls fn on a consistent copy of every record, in slot order; the slot is held only while it
 * is copied, never while fn runs. Returns the number of records visited. fn may allocate: the
 * table grows meanwhile if it must, but its records do not move until the pass ends. */
size_t mt_table_each(void (*fn)(const struct mt_record *, void *), void *arg);

/* Holds the records in place, as a pass does, until mt_table_release(): no growth begins and
 * every move has finished; passes of this thread meanwhile nest in it. For a reader that is about
 * to stop the other threads (reach.h): a stopped thread may be in the middle of a move or hold
 * the turn, and a pass started then would wait for it for ever. Inserts and frees go on. */
void mt_table_hold(void);
void mt_table_release(void);

/* Empties the table; returns the number of records removed. */
size_t mt_table_clear(void);

/* Counts the records held now (a scan of the tags, no slot is taken). */
size_t mt_table_count(void);

void mt_table_after_fork(void);

#endif
