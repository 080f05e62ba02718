/* scrub.h: stale words in stacks. A thread lays each frame over what its earlier, deeper calls
 * left there, and a slot the frame never writes keeps the old word: a scheduler asleep in such
 * frames shows a mark, as live, a pointer that a NIF that ran on it before held.
 *
 * Contract
 * - mt_scrub() zeroes up to MT_SCRUB bytes of the calling thread's stack below its caller's frame
 *   (never the last MT_SCRUB_MARGIN bytes of the stack), so that the frames it lays there next
 *   hold zeros where they write nothing.
 * - Any thread but a hook or a signal handler; the first call on a thread allocates (stack.h's
 *   mt_stack_bounds); does nothing where the stack's bounds are not known.
 */
#ifndef MTRACE_SCRUB_H
#define MTRACE_SCRUB_H

#include <stddef.h>

#define MT_SCRUB ((size_t)64 << 10)
#define MT_SCRUB_MARGIN ((size_t)32 << 10)

void mt_scrub(void);

#endif
