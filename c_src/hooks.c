/* hooks.c: the interposed malloc family. Each hook forwards to glibc and reports to the recorder;
 * what the program sees (pointer, return value, errno) is exactly what glibc gave. Only the bytes
 * of a new block, which glibc leaves as its chunk held them, are zeroed first (mt_clear).
 *
 * The originals come from glibc's exported __libc_* entry points, which need no dlsym (dlsym may
 * itself allocate). The three without such a name are looked up once with dlsym; that lookup may
 * call calloc, which is served by the calloc hook, never by a hook that is still resolving.
 * strdup and strndup are implemented here on __libc_malloc: glibc's own would reach the malloc
 * hook and count each copy twice.
 */
#define _GNU_SOURCE
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"

#define EXPORT __attribute__((visibility("default")))

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_reallocarray)(void *, size_t, size_t);

/* Each hook's own address, frame 0 of its stacks (MT_SITE). The exported name's address is read
 * from the GOT, which in a non-PIE program that takes the function's address holds the
 * executable's PLT entry; an alias is this file's function whatever the name resolves to. */
#define OWN(hook, kind)                                                                            \
    static __typeof__(hook) own_##hook __attribute__((alias(#hook), copy(hook)));
MT_FOR_EACH_HOOK(OWN)

#define FUNCTION(hook, kind) [kind] = (void *)own_##hook,
void *const mt_hook_functions[] = {MT_FOR_EACH_HOOK(FUNCTION)};

static void *original(const char *name)
{
    int e = errno;
    void *fn = dlsym(RTLD_NEXT, name);
    errno = e;
    return fn;
}

/* The body of every hook that only allocates: glibc's answer, cleared past the bytes the call
 * wrote (written), and recorded unless the thread is already inside mtrace or sampling leaves it
 * out. MT_SITE must expand here, in the hook itself, and only on the way to a record: a call
 * sampled out does not build it. */
#define ALLOCATE(kind, hook, call, size, written)                                                  \
    do {                                                                                           \
        if (!mt_enter(kind)) return call;                                                          \
        void *p_ = call;                                                                           \
        mt_clear(p_, written);                                                                     \
        if (!mt_alloc_skip(p_, size)) mt_alloc_slow(p_, size, &MT_SITE(own_##hook));               \
        return p_;                                                                                 \
    } while (0)

EXPORT void *malloc(size_t n)
{
    ALLOCATE(MT_MALLOC, malloc, __libc_malloc(n), n, 0);
}

EXPORT void *calloc(size_t count, size_t n)
{
    ALLOCATE(MT_CALLOC, calloc, __libc_calloc(count, n), count * n, SIZE_MAX);
}

EXPORT void free(void *p)
{
    if (mt_enter(MT_FREE))
        mt_forget(p);
    else
        mt_forget_unentered(p);
    __libc_free(p);
}

EXPORT void *realloc(void *p, size_t n)
{
    struct mt_record old;
    if (!mt_enter(MT_REALLOC)) {
        int had = mt_take_unentered(p, &old);
        void *q = __libc_realloc(p, n);
        if (had && !q && n != 0) mt_put_back_unentered(&old);
        return q;
    }
    int had = mt_take(p, &old);
    size_t kept = p ? mt_usable(p) : 0;
    void *q = __libc_realloc(p, n);
    mt_clear(q, kept);
    mt_realloc_done(q, n, &MT_SITE(own_realloc), had && n != 0, &old);
    return q;
}

EXPORT void *reallocarray(void *p, size_t count, size_t n)
{
    if (!real_reallocarray && !(real_reallocarray = original("reallocarray"))) {
        errno = ENOMEM;
        return NULL;
    }
    size_t bytes;
    int overflow = __builtin_mul_overflow(count, n, &bytes);
    struct mt_record old;
    if (!mt_enter(MT_REALLOCARRAY)) {
        int had = mt_take_unentered(p, &old);
        void *q = real_reallocarray(p, count, n);
        if (had && !q && (overflow || bytes != 0)) mt_put_back_unentered(&old);
        return q;
    }
    int had = mt_take(p, &old);
    size_t kept = p ? mt_usable(p) : 0;
    void *q = real_reallocarray(p, count, n);
    mt_clear(q, kept);
    mt_realloc_done(q, bytes, &MT_SITE(own_reallocarray), had && (overflow || bytes != 0), &old);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (!real_posix_memalign && !(real_posix_memalign = original("posix_memalign"))) return ENOMEM;
    if (!mt_enter(MT_POSIX_MEMALIGN)) return real_posix_memalign(out, align, n);
    int rc = real_posix_memalign(out, align, n);
    if (rc == 0) mt_clear(*out, 0);
    mt_alloc_done(rc == 0 ? *out : NULL, n, &MT_SITE(own_posix_memalign));
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    if (!real_aligned_alloc && !(real_aligned_alloc = original("aligned_alloc"))) {
        errno = ENOMEM;
        return NULL;
    }
    ALLOCATE(MT_ALIGNED_ALLOC, aligned_alloc, real_aligned_alloc(align, n), n, 0);
}

EXPORT void *memalign(size_t align, size_t n)
{
    ALLOCATE(MT_MEMALIGN, memalign, __libc_memalign(align, n), n, 0);
}

EXPORT void *valloc(size_t n)
{
    ALLOCATE(MT_VALLOC, valloc, __libc_valloc(n), n, 0);
}

EXPORT void *pvalloc(size_t n)
{
    ALLOCATE(MT_PVALLOC, pvalloc, __libc_pvalloc(n), n, 0);
}

static char *copy(const char *s, size_t len)
{
    char *p = __libc_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

EXPORT char *strdup(const char *s)
{
    size_t len = strlen(s);
    ALLOCATE(MT_STRDUP, strdup, copy(s, len), len + 1, len + 1);
}

EXPORT char *strndup(const char *s, size_t max)
{
    size_t len = strnlen(s, max);
    ALLOCATE(MT_STRNDUP, strndup, copy(s, len), len + 1, len + 1);
}

/* The loader relocates these dynamic-section addresses in place, except in the vDSO, whose
 * entries stay offsets from its base: an address outside the object's own segments is one. */
static const void *dyn_ptr(const struct dl_phdr_info *info, ElfW(Addr) lo, ElfW(Addr) hi,
                           ElfW(Addr) p)
{
    return (const void *)(p >= lo && p < hi ? p : info->dlpi_addr + p);
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

/* dl_iterate_phdr's callback: stops at the first object that defines malloc and keeps where. An
 * undefined symbol with a value (a non-PIE executable's canonical PLT entry, which dlsym returns
 * first) is not a definition: the loader binds calls past it. */
static int find_malloc(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    ElfW(Addr) lo = UINTPTR_MAX, hi = 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const void *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type != PT_LOAD) continue;
        ElfW(Addr) start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo) lo = start;
        if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
    }
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    const uint32_t *gnu = NULL, *sysv = NULL;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        const void *p = dyn_ptr(info, lo, hi, dyn->d_un.d_ptr);
        if (dyn->d_tag == DT_SYMTAB) syms = p;
        if (dyn->d_tag == DT_STRTAB) strs = p;
        if (dyn->d_tag == DT_GNU_HASH) gnu = p;
        if (dyn->d_tag == DT_HASH) sysv = p;
    }
    if (!syms || !strs || (!gnu && !sysv)) return 0;
    const ElfW(Sym) *s =
        gnu ? gnu_lookup(gnu, syms, strs, "malloc") : sysv_lookup(sysv, syms, strs, "malloc");
    if (!s || s->st_shndx == SHN_UNDEF || ELF64_ST_BIND(s->st_info) == STB_LOCAL) return 0;
    *(uintptr_t *)arg = info->dlpi_addr + s->st_value;
    return 1;
}

uintptr_t mt_malloc_definition(void)
{
    uintptr_t first = 0;
    dl_iterate_phdr(find_malloc, &first);
    return first;
}

int mt_interposing(void)
{
    return mt_malloc_definition() == (uintptr_t)own_malloc;
}

/* Starts the recorder at load time only in the copy of mtrace.so that is the process's malloc: a
 * copy dlopen'ed as a NIF alone must stay inert. */
__attribute__((constructor)) static void start_if_interposing(void)
{
    if (mt_interposing())
        mt_start();
    else
        mt_inert();
}
