/* mem.h: mtrace's own memory, mapped anonymously and remembered.
 *
 * The reachability scan (reach.h) takes every writable mapping of the process for a root; the
 * live table and the snapshots hold the address of every live block, and as roots they would
 * keep every leak alive. So mtrace maps the memory that may hold block addresses here, and the
 * scan skips what this file remembers.
 *
 * Contract
 * - Any thread, the hook path included: mmap and atomic stores only; no malloc, no lock. errno is
 *   kept.
 * - mt_mem_map() returns zeroed memory (MAP_NORESERVE: reserved, touched as used), or NULL.
 *   A mapping is remembered while fewer than MT_MEM_REGIONS are; past that it is still returned,
 *   and mt_mem_forgotten() counts it, so that stats/0 can say the scan's roots may include it.
 * - mt_mem_each() may run while other threads map or unmap: it sees every region remembered
 *   before it started, and none that was unmapped before it started.
 */
#ifndef MTRACE_MEM_H
#define MTRACE_MEM_H

#include <stddef.h>
#include <stdint.h>

#define MT_MEM_REGIONS 256

void *mt_mem_map(size_t len);
void mt_mem_unmap(void *p, size_t len);

/* Memory that holds no block address (return addresses, stack slots, ids, counters) and is
 * never unmapped: zeroed, reserved (MAP_NORESERVE), 64-byte aligned, left out of
 * mt_mem_each() (so that the reachability scan need not skip it) but listed by
 * mt_mem_each_own() (its counters and ids can look like a chunk's header to the heap walk); NULL
 * when it cannot be mapped. Any number of them: each carries the link to the one before. */
void *mt_mem_reserve(size_t len);

/* Calls fn on every remembered region [lo, hi). */
void mt_mem_each(void (*fn)(uintptr_t lo, uintptr_t hi, void *arg), void *arg);

/* Calls fn on every region of mtrace's own: the remembered ones, then the reserved ones. */
void mt_mem_each_own(void (*fn)(uintptr_t lo, uintptr_t hi, void *arg), void *arg);

/* Mappings made when the list was full: not remembered. */
size_t mt_mem_forgotten(void);

#endif
