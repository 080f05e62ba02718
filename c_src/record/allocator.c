/* allocator.c: the allocator the hooks forward to (see allocator.h). */
#define _GNU_SOURCE
#include "record/allocator.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "record/bindings.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

struct mt_real mt_real = {.malloc = __libc_malloc,
                          .calloc = __libc_calloc,
                          .realloc = __libc_realloc,
                          .free = __libc_free,
                          .memalign = __libc_memalign,
                          .valloc = __libc_valloc,
                          .pvalloc = __libc_pvalloc,
                          .copy_malloc = __libc_malloc,
                          .name = "glibc"};
int mt_real_resolved;
static __thread int resolving;

/* dlsym's own needs while it resolves: a few small blocks, never freed. */
#define BOOT ((size_t)64 << 10)
static _Alignas(16) char boot[BOOT];
static size_t boot_used;

void *mt_boot_alloc(size_t n)
{
    size_t need = 16 + ((n + 15) & ~(size_t)15),
           at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
    if (n > BOOT || at + need > BOOT) return NULL;
    *(size_t *)(boot + at) = n;
    return boot + at + 16;
}

int mt_boot_owns(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + BOOT;
}

size_t mt_boot_size(const void *p)
{
    return *(const size_t *)((const char *)p - 16);
}

int mt_real_resolving(void)
{
    return resolving;
}

/* The allocator's own function name, or NULL where it has none: a definition that is glibc's
 * (the next one in lookup order when the allocator does not define the name) is not its. */
static void *own(void *where, const char *name, const void *libc_base)
{
    void *fn = dlsym(where, name);
    Dl_info info;
    if (!fn || (dladdr(fn, &info) && info.dli_fbase == libc_base)) return NULL;
    return fn;
}

/* The functions a foreign allocator may not define, made from those it does. */
static void *aligned(size_t align, size_t n)
{
    void *p = NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    int rc = mt_real.posix_memalign(&p, align, n);
    if (rc != 0) {
        errno = rc;
        return NULL;
    }
    return p;
}

static void *page_aligned(size_t n)
{
    return mt_real.memalign((size_t)sysconf(_SC_PAGESIZE), n);
}

static void *page_rounded(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (n > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return mt_real.memalign(page, (n + page - 1) & ~(page - 1));
}

static void *realloc_array(void *p, size_t count, size_t n)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, n, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return mt_real.realloc(p, bytes);
}

/* The allocator that dlsym finds from where (RTLD_NEXT: the one that follows this copy in lookup
 * order; RTLD_DEFAULT: the one the process binds), whole, or glibc's. */
static struct mt_real found(void *where)
{
    /* libc is found by a function of its own: tcmalloc and mimalloc define __libc_malloc too */
    Dl_info libc;
    const void *libc_base = dladdr((void *)gnu_get_libc_version, &libc) ? libc.dli_fbase : NULL;
    struct mt_real r = mt_real;
    void *m = dlsym(where, "malloc");
    Dl_info info;
    r.foreign = m && dladdr(m, &info) && info.dli_fbase != libc_base;
    if (r.foreign) {
        r.name = info.dli_fname;
        r.malloc = m;
        r.calloc = own(where, "calloc", libc_base);
        r.realloc = own(where, "realloc", libc_base);
        r.free = own(where, "free", libc_base);
        r.posix_memalign = own(where, "posix_memalign", libc_base);
        if (!r.calloc || !r.realloc || !r.free || !r.posix_memalign) {
            /* not a whole allocator: glibc's stays */
            r = mt_real;
        } else {
            r.memalign = own(where, "memalign", libc_base);
            r.aligned_alloc = own(where, "aligned_alloc", libc_base);
            r.valloc = own(where, "valloc", libc_base);
            r.pvalloc = own(where, "pvalloc", libc_base);
            r.reallocarray = own(where, "reallocarray", libc_base);
            if (!r.memalign) r.memalign = aligned;
            if (!r.aligned_alloc) r.aligned_alloc = aligned;
            if (!r.valloc) r.valloc = page_aligned;
            if (!r.pvalloc) r.pvalloc = page_rounded;
            if (!r.reallocarray) r.reallocarray = realloc_array;
        }
    }
    if (!r.foreign) {
        r.posix_memalign = dlsym(where, "posix_memalign");
        r.aligned_alloc = dlsym(where, "aligned_alloc");
        r.reallocarray = dlsym(where, "reallocarray");
    }
    return r;
}

static void resolve(void *where)
{
    int e = errno;
    resolving = 1;
    struct mt_real r = found(where);
    /* glibc's strdup would call the malloc every library is bound to: an object's ahead of this
     * copy, whose hooks are then reached only through that object's own forwarding */
    void *first = (void *)mt_behind_allocator();
    r.copy_malloc = first ? (void *(*)(size_t))first : r.malloc;
    mt_real = r;
    __atomic_store_n(&mt_real_resolved, 1, __ATOMIC_RELEASE);
    resolving = 0;
    errno = e;
}

void mt_real_resolve(void)
{
    resolve(RTLD_NEXT);
}

void mt_real_adopt(void)
{
    resolve(RTLD_DEFAULT);
}
