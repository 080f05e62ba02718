/* stack.h: stack capture, and each thread's cache of the stacks it has seen.
 *
 * Contract
 * - mt_stack_init() reserves all memory once with mmap. Nothing here calls malloc (but glibc's
 *   pthread_getattr_np, once per thread, under the recorder's guard) and nothing takes a lock:
 *   interning is lock-free (compare-and-swap on an index word).
 * - mt_stack_id() and mt_stack_capture() run on the hook path of the calling thread; mt_stack_id()
 *   leaves errno as it found it, mt_stack_capture() may not (a failed read). Frame 0 is
 *   the hook's own address (it names the intercepted function); then come the callers outside the
 *   tracer. No other tracer frame appears, however inlining arranged them: the unwind starts at
 *   the frame whose stack pointer is the hook caller's, or else skips leading frames inside
 *   mtrace.so or the unwinder by address range; never by a fixed count.
 * - The libunwind mode (the default) and the erlang mode step with the table unwinder (cfi.h),
 *   whose stacks are libunwind's frame for frame, and call libunwind only where it gives up (a
 *   signal frame, code in no object where libunwind would guess along RBP, rules it does not
 *   keep). Only libunwind's calls take the lock that fork waits for.
 * - mt_stack_id() first tries the thread's stack cache: a stack seen before from the same call
 *   site (same hook, return address and caller stack pointer) is reused when every return address
 *   it recorded is still in its slot on the stack; that costs a compare a frame and no unwinding.
 *   The slots come from the unwinder itself (each frame's stack pointer), never from a search.
 * - Ids come from intern.h's table, which this header brings along.
 * - In the erlang mode (MTRACE_UNWIND=erlang), a stack whose unwind ends in code of no loaded
 *   object goes on along the JIT's frame pointers, when the BEAM writes /tmp/perf-<pid>.map
 *   (+JPperf map): Erlang frames, read with process_vm_readv only, each step checked. Their
 *   cache entries also check the saved RBP and each Erlang frame's words, in chain order (see
 *   stack.c for why those reads are safe). Stacks that reach no JIT code cost one
 *   _dl_find_object more a miss.
 */
#ifndef MTRACE_STACK_H
#define MTRACE_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "record/intern.h"

/* Returns 0, or -1 when the memory cannot be mapped. */
int mt_stack_init(size_t capacity, int depth, enum mt_unwind mode);

/* Where a hook was called from; taken inside the hook (see MT_SITE in recorder.h). */
struct mt_site {
    uintptr_t hook_ip; /* the hook's entry + 1: frame 0 */
    uintptr_t ret;     /* return address into the hook's caller: frame 1 */
    uintptr_t sp;      /* the caller's stack pointer at the call */
};

/* One per thread at a time; memory from mmap, handed to the next thread after a reset. */
struct mt_stack_cache;
struct mt_stack_cache *mt_stack_cache_new(void);
void mt_stack_cache_reset(struct mt_stack_cache *cache);

/* The interned id of the calling thread's stack, as seen from site; 0 when the stack table is
 * full. cache may be NULL (no reuse). */
uint32_t mt_stack_id(struct mt_stack_cache *cache, const struct mt_site *site);

/* The calling thread's stack, [*lo, *hi), as the unwinder's checks know it (found once per
 * thread and kept; the initial thread's is the 64 MiB below its top): 1, or 0 where it is not
 * known. The first call on a thread allocates (pthread_getattr_np): call it under the recorder's
 * guard. */
int mt_stack_bounds(uintptr_t *lo, uintptr_t *hi);

/* Fork handlers (pthread_atfork): no thread may be inside libunwind when a child is made. */
void mt_stack_fork_prepare(void);
void mt_stack_fork_parent(void);
void mt_stack_fork_child(void);

/* Writes at most depth frames to ips, frame 0 being hook_ip; returns how many. */
int mt_stack_capture(uintptr_t hook_ip, uintptr_t *ips, int depth);

#endif
