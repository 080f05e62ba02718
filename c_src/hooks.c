/* hooks.c: the interposed malloc family. Each hook forwards to glibc and reports to the recorder;
 * what the program sees (pointer, return value, errno) is exactly what glibc gave.
 *
 * The originals come from glibc's exported __libc_* entry points, which need no dlsym (dlsym may
 * itself allocate). The three without such a name are looked up once with dlsym; that lookup may
 * call calloc, which is served by the calloc hook, never by a hook that is still resolving.
 * strdup and strndup are implemented here on __libc_malloc: glibc's own would reach the malloc
 * hook and count each copy twice.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
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

static void *original(const char *name)
{
    int e = errno;
    void *fn = dlsym(RTLD_NEXT, name);
    errno = e;
    return fn;
}

/* The body of every hook that only allocates: glibc's answer, recorded unless the thread is
 * already inside mtrace or sampling leaves it out. MT_SITE must expand here, in the hook itself,
 * and only on the way to a record: a call sampled out does not build it. */
#define ALLOCATE(kind, hook, call, size)                                                           \
    do {                                                                                           \
        if (!mt_enter(kind)) return call;                                                          \
        void *p_ = call;                                                                           \
        if (!mt_alloc_skip(p_, size)) mt_alloc_slow(p_, size, &MT_SITE(hook));                     \
        return p_;                                                                                 \
    } while (0)

EXPORT void *malloc(size_t n)
{
    ALLOCATE(MT_MALLOC, malloc, __libc_malloc(n), n);
}

EXPORT void *calloc(size_t count, size_t n)
{
    ALLOCATE(MT_CALLOC, calloc, __libc_calloc(count, n), count * n);
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
    void *q = __libc_realloc(p, n);
    mt_realloc_done(q, n, &MT_SITE(realloc), had && n != 0, &old);
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
    void *q = real_reallocarray(p, count, n);
    mt_realloc_done(q, bytes, &MT_SITE(reallocarray), had && (overflow || bytes != 0), &old);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (!real_posix_memalign && !(real_posix_memalign = original("posix_memalign"))) return ENOMEM;
    if (!mt_enter(MT_POSIX_MEMALIGN)) return real_posix_memalign(out, align, n);
    int rc = real_posix_memalign(out, align, n);
    mt_alloc_done(rc == 0 ? *out : NULL, n, &MT_SITE(posix_memalign));
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    if (!real_aligned_alloc && !(real_aligned_alloc = original("aligned_alloc"))) {
        errno = ENOMEM;
        return NULL;
    }
    ALLOCATE(MT_ALIGNED_ALLOC, aligned_alloc, real_aligned_alloc(align, n), n);
}

EXPORT void *memalign(size_t align, size_t n)
{
    ALLOCATE(MT_MEMALIGN, memalign, __libc_memalign(align, n), n);
}

EXPORT void *valloc(size_t n)
{
    ALLOCATE(MT_VALLOC, valloc, __libc_valloc(n), n);
}

EXPORT void *pvalloc(size_t n)
{
    ALLOCATE(MT_PVALLOC, pvalloc, __libc_pvalloc(n), n);
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
    ALLOCATE(MT_STRDUP, strdup, copy(s, len), len + 1);
}

EXPORT char *strndup(const char *s, size_t max)
{
    size_t len = strnlen(s, max);
    ALLOCATE(MT_STRNDUP, strndup, copy(s, len), len + 1);
}

/* Starts the recorder at load time only in the copy of mtrace.so that is the process's malloc: a
 * copy dlopen'ed as a NIF alone must stay inert. The hidden alias is this file's own malloc,
 * whatever the global symbol resolves to. */
extern void *mt_own_malloc(size_t)
    __attribute__((alias("malloc"), copy(malloc), visibility("hidden")));

__attribute__((constructor)) static void start_if_interposing(void)
{
    if (dlsym(RTLD_DEFAULT, "malloc") == (void *)mt_own_malloc) mt_start();
}
