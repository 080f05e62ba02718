/* bindings.c: where the loader binds a name (see bindings.h), read from the loaded objects' own
 * dynamic symbol tables. */
#define _GNU_SOURCE
#include "record/bindings.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <string.h>

struct mt_dynamic mt_dynamic(const struct dl_phdr_info *info)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            return (struct mt_dynamic){(const void *)(info->dlpi_addr + ph->p_vaddr),
                                       ph->p_flags & PF_W ? 0 : info->dlpi_addr};
    }
    return (struct mt_dynamic){NULL, 0};
}

static const ElfW(Sym) *
    gnu_lookup(const uint32_t *h, const ElfW(Sym) * syms, const char *strs, const char *name)
{
    uint32_t hash = 5381;
    for (const char *c = name; *c; c++)
        hash = hash * 33 + (unsigned char)*c;
    uint32_t nbuckets = h[0], first = h[1], bloom_words = h[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(h + 4) + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    for (uint32_t i = nbuckets ? buckets[hash % nbuckets] : 0; i >= first && i != 0; i++) {
        uint32_t c = chain[i - first];
        if ((c | 1) == (hash | 1) && strcmp(strs + syms[i].st_name, name) == 0) return &syms[i];
        if (c & 1) break;
    }
    return NULL;
}

static const ElfW(Sym) *
    sysv_lookup(const uint32_t *h, const ElfW(Sym) * syms, const char *strs, const char *name)
{
    uint32_t hash = 0;
    for (const char *c = name; *c; c++) {
        hash = (hash << 4) + (unsigned char)*c;
        hash = (hash ^ ((hash >> 24) & 0xf0)) & 0x0fffffff;
    }
    const uint32_t *buckets = h + 2, *chain = buckets + h[0];
    for (uint32_t i = h[0] ? buckets[hash % h[0]] : 0; i != 0 && i < h[1]; i = chain[i])
        if (strcmp(strs + syms[i].st_name, name) == 0) return &syms[i];
    return NULL;
}

struct definition {
    const char *name;
    uintptr_t at, base;
};

/* dl_iterate_phdr's callback: stops at the first object that defines the name and keeps where. An
 * undefined symbol with a value (a non-PIE executable's canonical PLT entry, which dlsym returns
 * first) is not a definition: the loader binds calls past it. */
static int find_definition(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct definition *d = arg;
    struct mt_dynamic dynamic = mt_dynamic(info);
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    const uint32_t *gnu = NULL, *sysv = NULL;
    for (const ElfW(Dyn) *dyn = dynamic.dyn; dyn && dyn->d_tag != DT_NULL; dyn++) {
        const void *p = mt_dynamic_ptr(dynamic, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_SYMTAB) syms = p;
        if (dyn->d_tag == DT_STRTAB) strs = p;
        if (dyn->d_tag == DT_GNU_HASH) gnu = p;
        if (dyn->d_tag == DT_HASH) sysv = p;
    }
    if (!syms || !strs || (!gnu && !sysv)) return 0;
    const ElfW(Sym) *s =
        gnu ? gnu_lookup(gnu, syms, strs, d->name) : sysv_lookup(sysv, syms, strs, d->name);
    if (!s || s->st_shndx == SHN_UNDEF || ELF64_ST_BIND(s->st_info) == STB_LOCAL) return 0;
    d->at = info->dlpi_addr + s->st_value;
    d->base = info->dlpi_addr;
    return 1;
}

uintptr_t mt_definition(const char *name, uintptr_t *base)
{
    struct definition d = {name, 0, 0};
    dl_iterate_phdr(find_definition, &d);
    if (base) *base = d.base;
    return d.at;
}

/* Where in load order the first definer of malloc, this copy and libc lie. */
struct order {
    uintptr_t first, self, libc; /* an address in the definer, in this copy, in libc */
    int seen_first, seen_self, behind;
};

static int holds(const struct dl_phdr_info *info, uintptr_t a)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= start && a < start + ph->p_memsz) return 1;
    }
    return 0;
}

static int load_order(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct order *o = arg;
    if (holds(info, o->self)) {
        if (holds(info, o->first)) return 1; /* this copy is the process's malloc */
        o->seen_self = 1;
    } else if (holds(info, o->libc)) {
        o->behind = o->seen_first && o->seen_self;
        return 1;
    } else if (holds(info, o->first) && !o->seen_self) {
        o->seen_first = 1;
    }
    return 0;
}

uintptr_t mt_behind_allocator(void)
{
    uintptr_t at = mt_definition("malloc", NULL);
    if (!at) return 0;
    struct order o = {at, (uintptr_t)mt_behind_allocator, (uintptr_t)gnu_get_libc_version, 0, 0, 0};
    dl_iterate_phdr(load_order, &o);
    return o.behind ? at : 0;
}

const char *mt_ahead_name(void)
{
    uintptr_t first = mt_behind_allocator();
    if (!first) return NULL;
    Dl_info info;
    return dladdr((void *)first, &info) && info.dli_fname && *info.dli_fname ? info.dli_fname
                                                                             : "the program";
}
