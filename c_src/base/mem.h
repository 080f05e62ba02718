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

/* Memory that holds no block address the program needs (return addresses, stack slots, ids,
 * counters) and is never unmapped: zeroed, reserved (MAP_NORESERVE), 64-byte aligned; NULL when
 * it cannot be mapped. Any number of them: each carries the link to the one before. Its structs'
 * padding keeps what the stack held where they were made, so it is listed with the rest
 * (a table unwinder's row, its padding the high bytes of a block's address, kept a lost block). */
void *mt_mem_reserve(size_t len);

/* Calls fn on every region of mtrace's own [lo, hi): the remembered ones, then the reserved ones.
 * The reachability scan skips them all, and the heap walk takes no chunk there (mtrace's
 * counters and ids can look like a chunk's header). */
void mt_mem_each(void (*fn)(uintptr_t lo, uintptr_t hi, void *arg), void *arg);

/* Mappings made when the list was full: not remembered. */
size_t mt_mem_forgotten(void);

#endif
