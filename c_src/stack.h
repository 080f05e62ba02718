/* stack.h: stack capture and the table of interned stacks.
 *
 * Contract
 * - mt_stack_init() reserves all memory once with mmap; nothing here calls malloc afterwards, and
 *   nothing takes a lock: interning is lock-free (compare-and-swap on an index word).
 * - mt_stack_capture() runs on the hook path of the calling thread. Frame 0 is the hook's own
 *   address (it names the intercepted function); then come the callers outside the tracer. No
 *   other tracer frame appears, however inlining arranged them: leading frames inside mtrace.so or
 *   the unwinder are skipped by address range, not by a fixed count.
 * - An interned stack is immutable and lives as long as the process: ids (>= 1) stay valid for
 *   readers without any lock. Two threads interning the same new stack get the same id.
 * - mt_stack_intern() returns 0 when the table of stacks is full; the caller counts it.
 */
#ifndef MTRACE_STACK_H
#define MTRACE_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Returns 0, or -1 when the memory cannot be mapped. */
int mt_stack_init(size_t capacity, int depth, enum mt_unwind mode);

/* Writes at most depth frames to ips; returns how many. */
int mt_stack_capture(uintptr_t hook_ip, uintptr_t *ips, int depth);

uint32_t mt_stack_intern(const uintptr_t *ips, int n);

/* Sets *ips to the frames of stack id; returns their number, 0 for an unknown id. */
int mt_stack_get(uint32_t id, const uintptr_t **ips);

/* Stacks interned so far, and the bytes they take (frames, descriptors and index). */
size_t mt_stack_count(void);
size_t mt_stack_bytes(void);

#endif
