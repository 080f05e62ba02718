/* cleared: what a new block still holds of its chunk's past. Each case first leaves a chunk
 * written over with 0xa5 and freed where glibc takes the next request from (the thread's cache for
 * small ones, the unsorted list behind a guard block for the others), then makes the request and
 * prints how many of the block's usable bytes past those it wrote are not zero, and where the
 * first one is. Untraced, glibc hands the old bytes back; under the preload mtrace zeroes them
 * (MTRACE_CLEAR bytes at most). Unlike the other programs, this one's output is meant to differ. */
#include "common.h"

#include <stdalign.h>

#define DIRTY 0xa5

/* A chunk of n bytes written over and freed; the guard after it keeps it from the top chunk. */
static void dirty(size_t n)
{
    char *d = malloc(opaque(n));
    void *guard = malloc(opaque(100));
    memset(d, DIRTY, n);
    free(d);
    (void)guard;
}

static void show_past(const char *label, const void *p, size_t from)
{
    const unsigned char *b = p;
    size_t usable = malloc_usable_size((void *)p), nonzero = 0, first = usable;
    for (size_t i = from; i < usable; i++)
        if (b[i]) {
            nonzero++;
            if (first == usable) first = i;
        }
    if (nonzero)
        printf("%s: %zu of %zu bytes not zero, the first at %zu\n", label, nonzero, usable - from,
               first);
    else
        printf("%s: 0 of %zu bytes not zero\n", label, usable - from);
}

/* The block `call` returns over a dirty chunk of `bytes`, from its first byte. */
#define OVER_DIRTY(bytes, label, call)                                                             \
    do {                                                                                           \
        dirty(bytes);                                                                              \
        show_past(label, call, 0);                                                                 \
    } while (0)

int main(void)
{
    char *p, *q;
    void *v;

    /* realloc in place: the free chunk after p is taken in. First, while the heap is as the
     * program starts it (stdio has no buffer yet), so that p and the chunk after it are
     * neighbours. */
    p = malloc(opaque(100));
    memset(p, 7, 100);
    char *after = malloc(opaque(2000));
    malloc(opaque(100));
    memset(after, DIRTY, 2000);
    free(after);
    q = realloc(p, opaque(1500));
    expect(q == p, "realloc(p, 1500) grew in place");
    show_past("realloc(p, 1500), in place", q, 100);

    OVER_DIRTY(824, "malloc(824)", malloc(opaque(824)));
    OVER_DIRTY(60000, "malloc(20000)", malloc(opaque(20000)));

    /* realloc that moves: p cannot grow where it is (its neighbour is in use), and the request
     * fits the dirty chunk exactly. */
    p = malloc(opaque(100));
    memset(p, 7, 100);
    void *neighbour = malloc(opaque(100));
    dirty(4000);
    q = realloc(p, opaque(4000));
    expect(q != p, "realloc(p, 4000) moved");
    show_past("realloc(p, 4000), moved", q, 100);
    expect(q[0] == 7 && q[99] == 7, "realloc kept the first 100 bytes");
    (void)neighbour;

    OVER_DIRTY(60000, "memalign(64, 2000)", memalign(opaque(64), opaque(2000)));
    OVER_DIRTY(60000, "posix_memalign(256, 2000)",
               posix_memalign(&v, opaque(256), opaque(2000)) == 0 ? v : NULL);
    OVER_DIRTY(60000, "aligned_alloc(128, 2048)", aligned_alloc(opaque(128), opaque(2048)));
    OVER_DIRTY(60000, "valloc(2000)", valloc(opaque(2000)));
    OVER_DIRTY(60000, "pvalloc(2000)", pvalloc(opaque(2000)));

    dirty(20);
    p = strdup("hello");
    show_past("strdup(\"hello\")", p, 6);

    dirty(20);
    p = strndup("hello, world", opaque(5));
    show_past("strndup(\"hello, world\", 5)", p, 6);

    return finish();
}
