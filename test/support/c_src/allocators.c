/* allocators.c: the whole malloc family, as a program linked with another allocator (jemalloc,
 * tcmalloc, mimalloc) uses it, and five blocks lost on purpose: what runs under mtrace must run
 * as without it, and report those five (test/allocators_test.exs). Its threads (argv[1]) each
 * churn the same calls, as the main thread does, argv[2] rounds of them (1 by default), and with
 * a file's path in argv[3] on until that file exists. Each round that gets what it asked for from
 * every call adds 20000 to the sum. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile sink;

static unsigned long churn(unsigned seed)
{
    unsigned long sum = 0;
    void *kept[64] = {0};
    for (unsigned i = 0; i < 20000; i++) {
        size_t n = 16 + (seed * 2654435761u + i * 40503u) % 4000;
        char *a = malloc(n), *b = calloc(1, n), *c = NULL, *d = strdup("a string of some length");
        void *e = NULL;
        if (posix_memalign(&e, 64, n) != 0 || ((uintptr_t)e & 63)) abort();
        memset(a, 1, n);
        if (b[n - 1]) abort(); /* calloc's bytes are zero */
        c = realloc(a, 2 * n);
        if (!c || c[n - 1] != 1) abort(); /* realloc kept the bytes */
        sum += malloc_usable_size(c) >= 2 * n;
        char *f = aligned_alloc(128, 256), *g = memalign(32, 100);
        if (((uintptr_t)f & 127) || ((uintptr_t)g & 31)) abort();
        kept[i % 64] = realloc(kept[i % 64], i % 7 ? n / 2 : 0); /* realloc(p, 0) frees */
        free(b);
        free(c);
        free(d);
        free(e);
        free(f);
        free(g);
    }
    for (int i = 0; i < 64; i++)
        free(kept[i]);
    return sum;
}

static int rounds = 1;
static const char *stop; /* a file whose existence ends the rounds, after the first `rounds` */
static unsigned long done;

/* Rounds of churn until there are `rounds` and the stop file (if any) exists; their sum. */
static unsigned long run(unsigned seed)
{
    unsigned long sum = 0;
    for (int r = 0; r < rounds || (stop && access(stop, F_OK) != 0); r++) {
        sum += churn(seed);
        __atomic_fetch_add(&done, 1, __ATOMIC_RELAXED);
    }
    return sum;
}

static void *thread(void *arg)
{
    return (void *)run((unsigned)(uintptr_t)arg);
}

__attribute__((noinline)) static void lose_five(void)
{
    for (int i = 0; i < 3; i++) {
        sink = malloc(777);
        memset(sink, 7, 777);
    }
    sink = strdup("forty characters of text that leak away");
    sink = calloc(3, 11);
    sink = NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    rounds = argc > 2 ? atoi(argv[2]) : 1;
    stop = argc > 3 ? argv[3] : NULL;
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++)
        pthread_create(&t[i], NULL, thread, (void *)(uintptr_t)i);
    unsigned long sum = run(99);
    for (int i = 0; i < threads && i < 64; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (unsigned long)r;
    }
    errno = 0;
    void *big = malloc((size_t)1 << 62);
    int refused = !big && errno == ENOMEM;
    lose_five();
    printf("allocators: sum %lu in %lu rounds, refused %d\n", sum, done, refused);
    return 0;
}
