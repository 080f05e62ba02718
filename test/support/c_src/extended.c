/* extended.c: a program that calls its allocator's own API (jemalloc's, tcmalloc's or mimalloc's,
 * chosen at build time), and C++'s operators new and delete, which each of them defines: with
 * "own", blocks of malloc freed by the allocator's free, blocks of its malloc freed by free, a
 * reallocation of its own, and five blocks lost through those functions (2434 bytes), then the
 * same of extended_plugin.so, loaded since (one more block, of 321 bytes); with "std", the same
 * blocks through the malloc family only (test/allocators_test.exs). Under mtrace the two runs'
 * exit reports must count the same blocks. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *_Znwm(size_t);
void _ZdlPvm(void *, size_t);

#if defined(JEMALLOC)
void *mallocx(size_t, int);
void *rallocx(void *, size_t, int);
void dallocx(void *, int);
void sdallocx(void *, size_t, int);
size_t xallocx(void *, size_t, size_t, int);
#define OWN_ALLOC(n) mallocx(n, 0)
#define OWN_RESIZE(p, n) (xallocx(p, n, 0, 0) >= (n) ? (p) : rallocx(p, n, 0))
#define OWN_REALLOC(p, n) rallocx(p, n, 0)
#define OWN_FREE(p, n, i) ((i) % 2 ? dallocx(p, 0) : sdallocx(p, n, 0))
#elif defined(TCMALLOC)
void *tc_malloc(size_t);
void *tc_realloc(void *, size_t);
void tc_free(void *);
void tc_free_sized(void *, size_t);
#define OWN_ALLOC(n) tc_malloc(n)
#define OWN_REALLOC(p, n) tc_realloc(p, n)
#define OWN_RESIZE(p, n) tc_realloc(p, n)
#define OWN_FREE(p, n, i) ((i) % 2 ? tc_free(p) : tc_free_sized(p, n))
#elif defined(MIMALLOC)
void *mi_malloc(size_t);
void *mi_realloc(void *, size_t);
void mi_free(void *);
void mi_free_size(void *, size_t);
void *mi_expand(void *, size_t);
void *mi_heap_new(void);
void *mi_heap_set_default(void *);
void mi_heap_destroy(void *);
void *mi_heap_malloc(void *, size_t);
void *mi_heap_calloc(void *, size_t, size_t);
void *mi_heap_realloc(void *, void *, size_t);
char *mi_heap_strdup(void *, const char *);
void *mi_malloc_aligned(size_t, size_t);
void *mi_new_realloc(void *, size_t);
void *mi_aligned_recalloc(void *, size_t, size_t, size_t);
char *mi_realpath(const char *, char *);
unsigned short *mi_wcsdup(const unsigned short *);
int mi_dupenv_s(char **, size_t *, const char *);
#define HEAPS 1
#define OWN_ALLOC(n) mi_malloc(n)
#define OWN_RESIZE(p, n) (mi_expand(p, n) ? (p) : mi_realloc(p, n))
#define OWN_REALLOC(p, n) mi_realloc(p, n)
#define OWN_FREE(p, n, i) ((i) % 2 ? mi_free(p) : mi_free_size(p, n))
#else
#error "build with -DJEMALLOC, -DTCMALLOC or -DMIMALLOC"
#endif

static int own;
static void *volatile sink;

static void *alloc(size_t n)
{
    return own ? OWN_ALLOC(n) : malloc(n);
}

static void *grow(void *p, size_t n)
{
    return own ? OWN_REALLOC(p, n) : realloc(p, n);
}

/* a block made smaller: where it lies, through the allocator's own resize (jemalloc's xallocx,
 * mimalloc's mi_expand; tcmalloc has none) */
static void *shrink(void *p, size_t n)
{
    return own ? OWN_RESIZE(p, n) : realloc(p, n);
}

static void *cxx_new(size_t n)
{
    return own ? _Znwm(n) : malloc(n);
}

static void release(void *p, size_t n, int i)
{
    if (own)
        OWN_FREE(p, n, i);
    else
        free(p);
}

static void churn(void)
{
    for (int i = 0; i < 200; i++) {
        size_t n = 24 + (size_t)i * 8;
        char *a = malloc(n), *b = alloc(n), *c = grow(malloc(n), 2 * n), *d = cxx_new(n);
        memset(a, 1, n);
        memset(b, 2, n);
        memset(c, 3, 2 * n);
        memset(d, 4, n);
        release(a, n, i);
        free(b);
        free(c);
        if (own)
            _ZdlPvm(d, n);
        else
            free(d);
    }
}

/* Blocks of a heap of their own (mimalloc's): some freed one by one, the rest with the heap, among
 * them those malloc made while the heap was the default. With "std", the same blocks through the
 * malloc family, each freed. Nothing is left either way. */
static void heaps(void)
{
#ifdef HEAPS
    if (own) {
        void *heap = mi_heap_new(), *kept[100];
        for (int i = 0; i < 50; i++) {
            void *a = mi_heap_malloc(heap, 64 + (size_t)i),
                 *c = mi_heap_realloc(heap, mi_heap_malloc(heap, 10), 80);
            kept[2 * i] = mi_heap_calloc(heap, 4, 16);
            kept[2 * i + 1] = mi_heap_strdup(heap, "heap");
            memset(a, 6, 64);
            memset(c, 6, 80);
            mi_free(a);
            mi_free(c);
        }
        void *old = mi_heap_set_default(heap);
        for (int i = 0; i < 50; i++)
            memset(kept[i] = malloc(32), 7, 32);
        mi_heap_set_default(old);
        mi_heap_destroy(heap);
        return;
    }
    for (int i = 0; i < 50; i++) {
        void *a = malloc(64 + (size_t)i), *b = calloc(4, 16), *c = realloc(malloc(10), 80);
        char *d = strdup("heap");
        free(a);
        free(b);
        free(c);
        free(d);
        free(malloc(32));
    }
#endif
}

/* The rest of mimalloc's API that gives or moves a block: its copies of a path, a wide string and
 * a variable, and its reallocations that throw or align; each block freed. */
static void rest(void)
{
#ifdef HEAPS
    if (!own) return;
    static const unsigned short wide[] = {'h', 'e', 'a', 'p', 0};
    char *env = NULL;
    mi_free(mi_realpath("/", NULL));
    mi_free(mi_wcsdup(wide));
    if (mi_dupenv_s(&env, NULL, "PATH") == 0) mi_free(env);
    mi_free(mi_new_realloc(mi_malloc(16), 4096));
    mi_free(mi_aligned_recalloc(mi_malloc_aligned(16, 64), 4, 32, 64));
#endif
}

__attribute__((noinline)) static void lose_five(void)
{
    for (int i = 0; i < 3; i++) {
        sink = alloc(555);
        memset(sink, 5, 555);
    }
    sink = cxx_new(444);
    memset(sink, 4, 444);
    sink = shrink(grow(malloc(100), 333), 325);
    memset(sink, 3, 325);
    sink = NULL;
}

int main(int argc, char **argv)
{
    own = argc > 1 && strcmp(argv[1], "own") == 0;
    churn();
    heaps();
    lose_five();
    char plugin[4096];
    const char *slash = strrchr(argv[0], '/');
    snprintf(plugin, sizeof plugin, "%.*sextended_plugin.so",
             slash ? (int)(slash - argv[0] + 1) : 0, argv[0]);
    void *handle = dlopen(plugin, RTLD_NOW);
    void (*run)(int) = handle ? (void (*)(int))dlsym(handle, "extended_plugin") : NULL;
    if (!run) {
        fprintf(stderr, "extended: %s\n", dlerror());
        return 1;
    }
    run(own);
    rest();
    printf("extended: %s\n", own ? "own" : "std");
    return 0;
}
