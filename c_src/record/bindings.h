/* bindings.h: where the dynamic loader binds a name, for the libraries of the process.
 *
 * The loader binds a library's reference to the first object in load order (the executable, the
 * preloaded libraries, then the rest, as dl_iterate_phdr visits them) whose dynamic symbol table
 * defines the name; a copy of mtrace.so finds from these whether its hooks are the ones called.
 *
 * Contract
 * - Read from the objects' dynamic sections under the loader's list lock (dl_iterate_phdr):
 *   no allocation, no output; any thread, and from a constructor or a hook before the recorder
 *   starts.
 */
#ifndef MTRACE_BINDINGS_H
#define MTRACE_BINDINGS_H

#include <link.h>
#include <stdint.h>

/* In a copy loaded before libc (preloaded), the malloc of an object ahead of it in load order
 * (an allocator linked into the executable, or a library preloaded before mtrace), which the
 * loader binds every library to: this copy's hooks are reached then only for the names that
 * object does not define, and it must stay inert. Else (this copy is the process's malloc, or was
 * loaded after libc, as a NIF is), 0. */
uintptr_t mt_behind_allocator(void);

/* The path of that object (mt_behind_allocator), "the program" for the executable; NULL when
 * there is none. For the line and the stats/0 key that say why this copy stays inert. */
const char *mt_ahead_name(void);

/* The first definition of name in load order, the one the loader binds, and the load bias of the
 * object that holds it (*base, when base is not NULL); 0 if none. */
uintptr_t mt_definition(const char *name, uintptr_t *base);

/* A loaded object's dynamic section, and the bias its addresses (DT_STRTAB, DT_SYMTAB...) take:
 * the loader relocates the entries in place when the section is writable, and leaves them
 * offsets from the object's base in a read-only one (the vDSO's; any object's since glibc 2.35).
 * dyn is NULL for an object without one. */
struct mt_dynamic {
    const ElfW(Dyn) * dyn;
    uintptr_t bias;
};

struct mt_dynamic mt_dynamic(const struct dl_phdr_info *info);

static inline const void *mt_dynamic_ptr(struct mt_dynamic d, ElfW(Addr) p)
{
    return (const void *)(d.bias + p);
}

#endif
