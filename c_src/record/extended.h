/* extended.h: the allocator's own API beyond the malloc family, recorded.
 *
 * A program linked with jemalloc, tcmalloc or mimalloc may call that allocator's own functions
 * (hooklist.h's MT_FOR_EACH_EXTENDED: mallocx and dallocx, tc_free, mi_free, its operators new
 * and delete...), which mtrace does not export: exported, they would tell a program that probes
 * for them (a weak reference, dlsym) that such an allocator is there when it is not. A block
 * malloc gave and dallocx freed would keep its record, and be reported lost. So the preloaded
 * copy rewrites the words through which every object but the allocator calls them (attach.h's
 * mt_attach_preloaded) to these hooks, which forward to the allocator's definition and record
 * as the malloc family's hooks do, the allocator running inside the guard; but a throwing
 * operator new is recorded once it has returned, since a throw would leave the guard held.
 * xallocx and mi_expand resize a block where it lies: its record takes the new size, as after
 * a realloc that did not move it.
 *
 * Contract
 * - The hooks run on the allocation path of any thread, under recorder.h's hook-side contract:
 *   no allocation, lock, output or change of errno of their own; what the program sees is what
 *   the allocator's function returned. Each is reached only through a word rewritten after its
 *   `original` was set, and never while that is NULL.
 * - Their calls count in three kinds (recorder.h): MT_EXTENDED_ALLOC, MT_EXTENDED_FREE and
 *   MT_EXTENDED_REALLOC (xallocx and mi_expand among them).
 * - The hooks take every argument as a machine word: on x86-64 the functions listed take only
 *   integers and pointers, in the same registers whatever their C types, and at most six, the
 *   registers that carry them, which every hook passes on whole.
 * - mt_extended is constant but for each entry's *original, which attach.c sets once, before
 *   the first word is rewritten to the hook.
 */
#ifndef MTRACE_EXTENDED_H
#define MTRACE_EXTENDED_H

#include <stdint.h>

#include "record/hooklist.h"

typedef uintptr_t (*mt_word_fn)(uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t);

struct mt_extended {
    const char *name;
    uintptr_t hook;
    mt_word_fn *original; /* the allocator's definition, which the hook calls */
};

#define MT_EXTENDED_ONE(name, shape) +1
enum { MT_EXTENDED = 0 MT_FOR_EACH_EXTENDED(MT_EXTENDED_ONE) };
#undef MT_EXTENDED_ONE

extern const struct mt_extended mt_extended[MT_EXTENDED];

#endif
