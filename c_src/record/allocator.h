/* allocator.h: the allocator the hooks forward to.
 *
 * The process's own allocator is the definition of the malloc family that follows mtrace in the
 * loader's lookup order (dlsym(RTLD_NEXT)): glibc's, unless a library such as jemalloc, tcmalloc
 * or mimalloc defines malloc after the preload (tcmalloc and mimalloc define glibc's __libc_*
 * names too, so that even mtrace's defaults reach them). Blocks of two allocators must never meet:
 * every hook forwards to that one allocator, and a function it does not define (jemalloc has no
 * pvalloc, and no allocator but glibc has reallocarray's glibc entry) is made from the ones it
 * does, never taken from glibc. That allocator's own API beyond the family (mallocx, mi_free,
 * its operators new and delete) is recorded by extended.h's hooks. When an object ahead of mtrace
 * in load order defines malloc (an executable linked with its own allocator, or a library preloaded
 * before mtrace, which may itself forward to the next malloc: memusage, heaptrack), the loader
 * binds every library to it: a hook is then reached for a name that object does not define, or
 * through its forwarding, and forwards to the next definition as ever; only strdup's copy
 * (copy_malloc) comes from the malloc every library is bound to, as glibc's strdup would.
 *
 * Contract
 * - mt_real is resolved on the first call of any hook (mt_real_ready() says whether it is), by
 *   dlsym, which may allocate: while a thread resolves, its own calls of the hooks are served from
 *   a static bootstrap buffer (mt_boot_alloc), whose blocks mt_boot_owns() recognises, so that
 *   free and realloc never hand them to the allocator. Two threads that resolve at once find the
 *   same answers; no lock.
 * - Once resolved, mt_real is constant; any thread, the hook path included.
 * - mt_real.foreign: the allocator is not glibc's, so glibc's chunk headers (mt_usable,
 *   MTRACE_CLEAR) and heap (the heap walk) do not describe its blocks; mt_real.name names the
 *   object that defines it.
 */
#ifndef MTRACE_ALLOCATOR_H
#define MTRACE_ALLOCATOR_H

#include <stddef.h>

struct mt_real {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    void *(*memalign)(size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    void *(*copy_malloc)(size_t); /* strdup's and strndup's: the malloc the process binds */
    int foreign;
    const char *name; /* the defining object's path, when foreign; else "glibc" */
};

extern struct mt_real mt_real;

void mt_real_resolve(void);

/* For a copy that no object's lookup reaches (dlopened, to be attached): mt_real becomes the
 * allocator the process binds (dlsym(RTLD_DEFAULT)), glibc's or another. Only before any hook of
 * this copy has been called: after it, mt_real is constant again. */
void mt_real_adopt(void);

static inline int mt_real_ready(void)
{
    extern int mt_real_resolved;
    return __atomic_load_n(&mt_real_resolved, __ATOMIC_ACQUIRE);
}

/* Whether the calling thread is resolving: its hooks then serve it from the bootstrap buffer. */
int mt_real_resolving(void);

/* A block of n bytes (16-byte aligned) from the bootstrap buffer, NULL when it is used up;
 * whether p is one of its blocks, and its size. */
void *mt_boot_alloc(size_t n);
int mt_boot_owns(const void *p);
size_t mt_boot_size(const void *p);

#endif
