/* A program whose executable defines the malloc family itself, as a program statically linked
 * with its allocator does: a bump allocator whose free aborts on any block it did not give. Every
 * library's malloc binds to it; under mtrace, so must every call mtrace's hooks forward
 * (test/allocators_test.exs). It prints what it did and exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARENA ((size_t)1 << 24)
#define MAGIC 0x6f776e616c6c6f63ull /* "ownalloc" */

static _Alignas(16) char arena[ARENA];
static size_t used;
static unsigned long given, taken;

/* Each block is preceded by 16 bytes: the magic and its size. */
void *malloc(size_t n)
{
    size_t need = 16 + ((n + 15) & ~(size_t)15);
    size_t at = __atomic_fetch_add(&used, need, __ATOMIC_RELAXED);
    if (n > ARENA || at + need > ARENA) {
        errno = ENOMEM;
        return NULL;
    }
    uint64_t *h = (uint64_t *)(arena + at);
    h[0] = MAGIC;
    h[1] = n;
    __atomic_fetch_add(&given, 1, __ATOMIC_RELAXED);
    return h + 2;
}

static uint64_t *header(void *p)
{
    uint64_t *h = (uint64_t *)p - 2;
    if ((char *)p < arena || (char *)p >= arena + ARENA || h[0] != MAGIC) {
        static const char msg[] = "own_allocator: a foreign block reached free\n";
        (void)!write(2, msg, sizeof msg - 1);
        abort();
    }
    return h;
}

void free(void *p)
{
    if (!p) return;
    header(p);
    __atomic_fetch_add(&taken, 1, __ATOMIC_RELAXED);
}

void *calloc(size_t count, size_t n)
{
    size_t bytes;
    if (__builtin_mul_overflow(count, n, &bytes)) {
        errno = ENOMEM;
        return NULL;
    }
    return malloc(bytes); /* the arena is never reused: already zero */
}

void *realloc(void *p, size_t n)
{
    if (!p) return malloc(n);
    size_t old = header(p)[1];
    void *q = malloc(n);
    if (q) {
        memcpy(q, p, old < n ? old : n);
        free(p);
    }
    return q;
}

int main(void)
{
    unsigned long sum = 0;
    for (int i = 0; i < 1000; i++) {
        char word[32];
        snprintf(word, sizeof word, "word-%d", i);
        char *a = strdup(word), *b = strndup(word, 4);
        char *c = realloc(strdup(a), 64);
        sum += strlen(a) + strlen(b) + strlen(c);
        free(a);
        free(b);
        free(c);
    }
    FILE *f = fopen("/proc/self/stat", "r");
    if (f) fclose(f);
    printf("own_allocator: %lu bytes; %lu blocks given, %lu freed\n", sum, given, taken);
    return 0;
}
