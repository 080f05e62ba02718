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

EXPORT void *malloc(size_t n)
{
    if (!mt_enter(MT_MALLOC)) return __libc_malloc(n);
    void *p = __libc_malloc(n);
    mt_alloc_done(p, n, MT_SITE(malloc));
    return p;
}

EXPORT void *calloc(size_t count, size_t n)
{
    if (!mt_enter(MT_CALLOC)) return __libc_calloc(count, n);
    void *p = __libc_calloc(count, n);
    mt_alloc_done(p, count * n, MT_SITE(calloc));
    return p;
}

EXPORT void free(void *p)
{
    if (mt_enter(MT_FREE)) mt_forget(p);
    __libc_free(p);
}

EXPORT void *realloc(void *p, size_t n)
{
    if (!mt_enter(MT_REALLOC)) return __libc_realloc(p, n);
    struct mt_record old;
    int had = mt_take(p, &old);
    void *q = __libc_realloc(p, n);
    mt_realloc_done(q, n, MT_SITE(realloc), had && n != 0, &old);
    return q;
}

EXPORT void *reallocarray(void *p, size_t count, size_t n)
{
    if (!real_reallocarray && !(real_reallocarray = original("reallocarray"))) {
        errno = ENOMEM;
        return NULL;
    }
    if (!mt_enter(MT_REALLOCARRAY)) return real_reallocarray(p, count, n);
    size_t bytes;
    int overflow = __builtin_mul_overflow(count, n, &bytes);
    struct mt_record old;
    int had = mt_take(p, &old);
    void *q = real_reallocarray(p, count, n);
    mt_realloc_done(q, bytes, MT_SITE(reallocarray), had && (overflow || bytes != 0), &old);
    return q;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (!real_posix_memalign && !(real_posix_memalign = original("posix_memalign"))) return ENOMEM;
    if (!mt_enter(MT_POSIX_MEMALIGN)) return real_posix_memalign(out, align, n);
    int rc = real_posix_memalign(out, align, n);
    mt_alloc_done(rc == 0 ? *out : NULL, n, MT_SITE(posix_memalign));
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    if (!real_aligned_alloc && !(real_aligned_alloc = original("aligned_alloc"))) {
        errno = ENOMEM;
        return NULL;
    }
    if (!mt_enter(MT_ALIGNED_ALLOC)) return real_aligned_alloc(align, n);
    void *p = real_aligned_alloc(align, n);
    mt_alloc_done(p, n, MT_SITE(aligned_alloc));
    return p;
}

EXPORT void *memalign(size_t align, size_t n)
{
    if (!mt_enter(MT_MEMALIGN)) return __libc_memalign(align, n);
    void *p = __libc_memalign(align, n);
    mt_alloc_done(p, n, MT_SITE(memalign));
    return p;
}

EXPORT void *valloc(size_t n)
{
    if (!mt_enter(MT_VALLOC)) return __libc_valloc(n);
    void *p = __libc_valloc(n);
    mt_alloc_done(p, n, MT_SITE(valloc));
    return p;
}

EXPORT void *pvalloc(size_t n)
{
    if (!mt_enter(MT_PVALLOC)) return __libc_pvalloc(n);
    void *p = __libc_pvalloc(n);
    mt_alloc_done(p, n, MT_SITE(pvalloc));
    return p;
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
    if (!mt_enter(MT_STRDUP)) return copy(s, len);
    char *p = copy(s, len);
    mt_alloc_done(p, len + 1, MT_SITE(strdup));
    return p;
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

EXPORT char *strndup(const char *s, size_t max)
{
    size_t len = strnlen(s, max);
    if (!mt_enter(MT_STRNDUP)) return copy(s, len);
    char *p = copy(s, len);
    mt_alloc_done(p, len + 1, MT_SITE(strndup));
    return p;
}
