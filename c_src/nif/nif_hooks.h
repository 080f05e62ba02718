/* nif_hooks.h: the NIF API's allocation functions, recorded.
 *
 * NIF libraries call the NIF API (enif_alloc, enif_alloc_resource, enif_alloc_binary...) in
 * beam.smp, which the loader searches before any preloaded library: a definition of mtrace's would
 * never be called. These hooks are reached instead through the NIF libraries' own words that name
 * those functions, which the patcher rewrites (attach.h), and they call the VM's functions. The VM
 * serves such blocks from its carriers (driver_alloc), or from malloc when that allocator is off
 * (+MRe false): their records carry the VM bit (mt_record.vm), and the VM's own calls, which are
 * direct, are never seen. A resource's record is its whole magic binary, from the VM's header
 * (which terms name) to the end of its data; it goes when the VM runs its type's destructor, which
 * the hooks of enif_open_resource_type, _x and enif_init_resource_type wrap (nif_hooks.c says how),
 * and, for a type opened before the hooks were in, its first resource since, in the VM's own struct
 * of the type where the VM's release proves its layout: the resources of a type that cannot be
 * wrapped are not recorded, only counted. A binary
 * from enif_alloc_binary is recorded, header and bytes, until enif_release_binary or
 * enif_make_binary (the VM's from then on).
 *
 * Contract
 * - mt_nif_hooks_find() returns nonzero when one object, the first in load order to define them
 *   (the VM's executable), defines every function of MT_FOR_EACH_NIF_HOOK, and then fills
 *   mt_nif_hooks[] (kind - MT_HOOKS: the VM's function, this copy's hook) and *vm_base (that
 *   object's load bias). No allocation; any thread.
 * - The hooks behave as the malloc family's (recorder.h): what the NIF gets back is what the VM
 *   gave, errno untouched; they record nothing while the thread is inside mtrace. Wrapping a type
 *   of before the hooks takes a lock and reads its struct with process_vm_readv, once a type.
 */
#ifndef MTRACE_NIF_HOOKS_H
#define MTRACE_NIF_HOOKS_H

#include <stdint.h>

#include "record/hooklist.h"

#define MT_NIF_COUNT(name, kind) +1
enum { MT_NIF_HOOKS = 0 MT_FOR_EACH_NIF_HOOK(MT_NIF_COUNT) };
#undef MT_NIF_COUNT

struct mt_nif_hook {
    const char *name;
    uintptr_t vm, hook;
};

extern struct mt_nif_hook mt_nif_hooks[MT_NIF_HOOKS];

int mt_nif_hooks_find(uintptr_t *vm_base);

struct mt_nif_state {
    uint64_t types_wrapped;    /* resource types whose destructor a trampoline wraps */
    uint64_t types_unwrapped;  /* opened through the hooks after every trampoline was taken */
    uint64_t resources_unseen; /* resources of other types (or before the header was known) */
    uint64_t resource_header;  /* bytes of the VM's before a resource's data; 0 until learnt */
};

/* Any thread; lock-free. */
void mt_nif_hooks_state(struct mt_nif_state *out);

#endif
