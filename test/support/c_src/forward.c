/* A library preloaded before mtrace that defines the malloc family and forwards each call to the
 * next definition (dlsym(RTLD_NEXT)), as memusage and other tracers do: mtrace's hooks are then
 * reached through it, and must forward onwards, never back (test/allocators_test.exs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static char boot[4096];
static size_t boot_used;
static void *(*next_malloc)(size_t);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static int resolving;

static void resolve(void)
{
    resolving = 1;
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    resolving = 0;
}

/* dlsym's own calloc while it resolves, from a static buffer (already zero), never freed. */
static void *from_boot(size_t n)
{
    void *p = boot + boot_used;
    boot_used += (n + 15) & ~(size_t)15;
    return boot_used <= sizeof boot ? p : NULL;
}

void *malloc(size_t n)
{
    if (!next_malloc) {
        if (resolving) return from_boot(n);
        resolve();
    }
    return next_malloc(n);
}

void *calloc(size_t count, size_t n)
{
    if (!next_calloc) {
        if (resolving) return from_boot(count * n);
        resolve();
    }
    return next_calloc(count, n);
}

void *realloc(void *p, size_t n)
{
    if (!next_realloc) resolve();
    return next_realloc(p, n);
}

void free(void *p)
{
    if ((char *)p >= boot && (char *)p < boot + sizeof boot) return;
    if (!next_free) resolve();
    next_free(p);
}
