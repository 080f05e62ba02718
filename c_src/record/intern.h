/* intern.h: the table of interned stacks, one id a distinct stack.
 *
 * Interned stacks live in three mmap'd arrays: the frames, one descriptor per id (where its frames
 * start, how many), and an open-addressed index of 64-bit words (hash high half, id low half). A
 * new stack is written to the frames and its descriptor before its index word is published with a
 * compare-and-swap, so a reader that finds an id always finds complete frames. The index is twice
 * the capacity, so a probe always ends at an empty word.
 *
 * Contract
 * - mt_intern_init() reserves all memory once (mt_mem_reserve); nothing else maps, allocates or
 *   takes a lock: any thread, the hook path included.
 * - An interned stack is immutable and lives as long as the process: ids (>= 1) stay valid for
 *   readers without any lock. Two threads interning the same new stack get the same id.
 * - mt_stack_intern() returns 0 when the table of stacks is full; the caller counts it.
 */
#ifndef MTRACE_INTERN_H
#define MTRACE_INTERN_H

#include <stddef.h>
#include <stdint.h>

/* Room for capacity stacks of at most depth frames. Returns 0, or -1 when it cannot be mapped. */
int mt_intern_init(size_t capacity, int depth);

uint32_t mt_stack_intern(const uintptr_t *ips, int n);

/* Sets *ips to the frames of stack id; returns their number, 0 for an unknown id. */
int mt_stack_get(uint32_t id, const uintptr_t **ips);

/* Stacks interned so far, and the bytes they take (frames, descriptors and index). */
size_t mt_stack_count(void);
size_t mt_stack_bytes(void);

#endif
