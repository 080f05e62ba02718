/* hooks.h: whether this copy of mtrace.so is the process's malloc.
 *
 * Contract
 * - mt_interposing() returns nonzero when the dynamic loader binds malloc, for the libraries of
 *   the process, to this copy's hook: the first object in load order (the executable, the
 *   preloaded libraries, then the rest, as dl_iterate_phdr visits them) whose dynamic symbol
 *   table defines malloc is this one. A copy dlopen'ed as a NIF only, or a second copy of the
 *   file while another is preloaded, gets 0 and must stay inert.
 * - It neither allocates nor prints; it may be called before the recorder starts, from a
 *   constructor.
 * - mt_hook_functions is constant.
 */
#ifndef MTRACE_HOOKS_H
#define MTRACE_HOOKS_H

#include <stdint.h>

int mt_interposing(void);

/* The address of the malloc the loader binds the process's libraries to (see above), 0 if none
 * is found; the same rules, no allocation. */
uintptr_t mt_malloc_definition(void);

/* This copy's hooks, indexed by kind (recorder.h), for the attach patcher: their own code,
 * whatever the exported names resolve to in the process. */
extern void *const mt_hook_functions[];

#endif
