/* hooks.c: the interposed malloc family. Each hook forwards to the process's own allocator
 * (allocator.h: glibc's, or the jemalloc, tcmalloc or mimalloc that follows the preload) and
 * reports to the recorder; what the program sees (pointer, return value, errno) is exactly what
 * that allocator gave. With MTRACE_CLEAR, and glibc's allocator, the bytes of a new block are
 * zeroed first (mt_clear); by default nothing the program receives is written.
 *
 * strdup and strndup are implemented here on the allocator's malloc: glibc's own would reach the
 * malloc hook and count each copy twice.
 */
#define _GNU_SOURCE
#include "record/hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/writer.h"
#include "record/allocator.h"
#include "record/bindings.h"
#include "record/recorder.h"

#define EXPORT __attribute__((visibility("default")))

/* Each hook's own address, frame 0 of its stacks (MT_SITE). The exported name's address is read
 * from the GOT, which in a non-PIE program that takes the function's address holds the
 * executable's PLT entry; an alias is this file's function whatever the name resolves to. */
#define OWN(hook, kind)                                                                            \
    static __typeof__(hook) own_##hook __attribute__((alias(#hook), copy(hook)));
MT_FOR_EACH_HOOK(OWN)

#define FUNCTION(hook, kind) [kind] = (void *)own_##hook,
void *const mt_hook_functions[] = {MT_FOR_EACH_HOOK(FUNCTION)};

/* Which allocator is the process's, and whether this copy records: a hook reached before the
 * constructor ran (from another object's constructor) must not start the recorder in a copy that
 * is not the process's malloc (one behind an allocator ahead of it, whose frees it never sees). */
__attribute__((noinline, cold)) static void resolve(void)
{
    if (!mt_interposing() && !mt_active()) mt_inert();
    mt_real_resolve();
}

/* Before the first call reaches the allocator, which one it is; a call made while this thread
 * finds out (dlsym's own) gets `boot` instead. */
#define RESOLVED(boot)                                                                             \
    do {                                                                                           \
        if (__builtin_expect(!mt_real_ready(), 0)) {                                               \
            if (mt_real_resolving()) return boot;                                                  \
            resolve();                                                                             \
        }                                                                                          \
    } while (0)

/* Clearing reads glibc's chunk header: only for glibc's blocks, and only when asked. */
static inline void clear(void *p, size_t from)
{
    if (!mt_real.foreign) mt_clear(p, from);
}

static inline size_t usable(void *p)
{
    return p && mt_config.clear && !mt_real.foreign ? mt_usable(p) : 0;
}

/* The body of every hook that only allocates: the allocator's answer, cleared past the bytes the
 * call wrote (written), and recorded unless the thread is already inside mtrace or sampling
 * leaves it out. MT_SITE must expand here, in the hook itself, and only on the way to a record: a
 * call sampled out does not build it. */
#define ALLOCATE(kind, hook, call, size, written)                                                  \
    do {                                                                                           \
        if (!mt_enter(kind)) return call;                                                          \
        void *p_ = call;                                                                           \
        clear(p_, written);                                                                        \
        if (!mt_alloc_skip(p_, size)) mt_alloc_slow(p_, size, &MT_SITE(own_##hook));               \
        return p_;                                                                                 \
    } while (0)

EXPORT void *malloc(size_t n)
{
    RESOLVED(mt_boot_alloc(n));
    ALLOCATE(MT_MALLOC, malloc, mt_real.malloc(n), n, 0);
}

static void *boot_calloc(size_t count, size_t n)
{
    size_t bytes;
    return __builtin_mul_overflow(count, n, &bytes) ? NULL : mt_boot_alloc(bytes);
}

EXPORT void *calloc(size_t count, size_t n)
{
    RESOLVED(boot_calloc(count, n));
    ALLOCATE(MT_CALLOC, calloc, mt_real.calloc(count, n), count * n, SIZE_MAX);
}

EXPORT void free(void *p)
{
    if (__builtin_expect(mt_boot_owns(p), 0)) return;
    RESOLVED();
    if (mt_enter(MT_FREE))
        mt_forget(p);
    else
        mt_forget_unentered(p);
    mt_real.free(p);
}

/* realloc of a bootstrap block: a new block of the allocator's, through the malloc hook. */
static void *boot_realloc(void *p, size_t n)
{
    void *q = malloc(n);
    size_t old = mt_boot_size(p);
    if (q) memcpy(q, p, old < n ? old : n);
    return q;
}

EXPORT void *realloc(void *p, size_t n)
{
    RESOLVED(p ? NULL : mt_boot_alloc(n));
    if (__builtin_expect(mt_boot_owns(p), 0)) return boot_realloc(p, n);
    struct mt_record old;
    if (!mt_enter(MT_REALLOC)) {
        int had = mt_take_unentered(p, &old);
        void *q = mt_real.realloc(p, n);
        if (had && !q && n != 0) mt_put_back_unentered(&old);
        return q;
    }
    int had = mt_take(p, &old);
    size_t kept = usable(p);
    void *q = mt_real.realloc(p, n);
    clear(q, kept);
    mt_realloc_done(q, n, &MT_SITE(own_realloc), had && n != 0, &old);
    return q;
}

EXPORT void *reallocarray(void *p, size_t count, size_t n)
{
    RESOLVED(p ? NULL : boot_calloc(count, n));
    size_t bytes;
    int overflow = __builtin_mul_overflow(count, n, &bytes);
    if (__builtin_expect(mt_boot_owns(p), 0)) {
        if (!overflow) return boot_realloc(p, bytes);
        errno = ENOMEM;
        return NULL;
    }
    if (!mt_real.reallocarray) {
        errno = ENOMEM;
        return NULL;
    }
    struct mt_record old;
    if (!mt_enter(MT_REALLOCARRAY)) {
        int had = mt_take_unentered(p, &old);
        void *q = mt_real.reallocarray(p, count, n);
        if (had && !q && (overflow || bytes != 0)) mt_put_back_unentered(&old);
        return q;
    }
    int had = mt_take(p, &old);
    size_t kept = usable(p);
    void *q = mt_real.reallocarray(p, count, n);
    clear(q, kept);
    mt_realloc_done(q, bytes, &MT_SITE(own_reallocarray), had && (overflow || bytes != 0), &old);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    RESOLVED(ENOMEM);
    if (!mt_real.posix_memalign) return ENOMEM;
    if (!mt_enter(MT_POSIX_MEMALIGN)) return mt_real.posix_memalign(out, align, n);
    int rc = mt_real.posix_memalign(out, align, n);
    if (rc == 0) clear(*out, 0);
    mt_alloc_done(rc == 0 ? *out : NULL, n, &MT_SITE(own_posix_memalign));
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    RESOLVED(NULL);
    if (!mt_real.aligned_alloc) {
        errno = ENOMEM;
        return NULL;
    }
    ALLOCATE(MT_ALIGNED_ALLOC, aligned_alloc, mt_real.aligned_alloc(align, n), n, 0);
}

EXPORT void *memalign(size_t align, size_t n)
{
    RESOLVED(NULL);
    ALLOCATE(MT_MEMALIGN, memalign, mt_real.memalign(align, n), n, 0);
}

EXPORT void *valloc(size_t n)
{
    RESOLVED(NULL);
    ALLOCATE(MT_VALLOC, valloc, mt_real.valloc(n), n, 0);
}

EXPORT void *pvalloc(size_t n)
{
    RESOLVED(NULL);
    ALLOCATE(MT_PVALLOC, pvalloc, mt_real.pvalloc(n), n, 0);
}

static char *copy(const char *s, size_t len)
{
    char *p = mt_real.copy_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

/* A copy in the bootstrap buffer, for a thread that finds out which allocator is the process's. */
static char *boot_copy(const char *s, size_t len)
{
    char *p = mt_boot_alloc(len + 1);
    if (p) memcpy(p, s, len);
    return p;
}

EXPORT char *strdup(const char *s)
{
    size_t len = strlen(s);
    RESOLVED(boot_copy(s, len));
    ALLOCATE(MT_STRDUP, strdup, copy(s, len), len + 1, len + 1);
}

EXPORT char *strndup(const char *s, size_t max)
{
    size_t len = strnlen(s, max);
    RESOLVED(boot_copy(s, len));
    ALLOCATE(MT_STRNDUP, strndup, copy(s, len), len + 1, len + 1);
}

uintptr_t mt_malloc_definition(void)
{
    return mt_definition("malloc", NULL);
}

int mt_interposing(void)
{
    return mt_malloc_definition() == (uintptr_t)own_malloc;
}

/* Starts the recorder at load time only in the copy of mtrace.so that is the process's malloc: a
 * copy dlopen'ed as a NIF alone must stay inert. */
__attribute__((constructor)) static void start_if_interposing(void)
{
    if (mt_interposing()) {
        mt_start();
        return;
    }
    mt_inert();
    /* preloaded for a report that cannot be: say why, once, in the process that would report */
    const char *ahead = mt_ahead_name();
    if (!ahead) return;
    mt_config_load();
    if (!mt_config_exit_report() || !mt_config_reports_here()) return;
    const char *parts[] = {
        ahead, " defines malloc ahead of mtrace (an allocator linked in, or preloaded first): "
               "nothing is recorded, and no report is written"};
    mt_say(parts, 2);
}
