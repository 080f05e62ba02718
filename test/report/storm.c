/* storm: 16 threads make millions of allocations over every allocating function and C++'s new[]
 * and aligned new[] (storm_new.cc), checking each
 * block's bytes before they free it; each thread then leaks known blocks and exits holding them;
 * then 10,000 short-lived threads allocate and exit. Prints one line of counts and exits 1 on a
 * corrupt block.
 *
 *   leaked: 16 threads x 8 blocks of 1000 + thread bytes (leak_in_thread): 128 blocks, 128960 B
 *
 * `storm [ops [short]]`: operations a thread (default 150000), short-lived threads (10000). */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "common.h"

enum { THREADS = 16, SLOTS = 64, LEAKS = 8, KINDS = 13 };

unsigned char *storm_new(size_t n, int aligned);
void storm_delete(unsigned char *p, int aligned);

static unsigned long ops = 150000;
static unsigned long corrupt;

struct block {
    unsigned char *p;
    size_t n;
    unsigned char fill;
    unsigned char cxx; /* 0: from the C functions; 1: new[]; 2: aligned new[] */
};

/* Frees b as it was made. */
static void release(struct block *b)
{
    if (b->cxx)
        storm_delete(b->p, b->cxx == 2);
    else
        free(b->p);
    b->p = NULL;
}

static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* One allocation by the function k picks, filled with its own byte. */
static struct block make(unsigned k, size_t n, unsigned char fill, struct block *old)
{
    struct block b = {NULL, n, fill, 0};
    void *p = NULL;
    switch (k % KINDS) {
    case 0:
        b.p = malloc(n);
        break;
    case 1:
        b.p = calloc(1, n);
        break;
    case 2:
        b.p = realloc(old->p, n), old->p = NULL;
        break;
    case 3:
        b.p = reallocarray(old->p, n, 1), old->p = NULL;
        break;
    case 4:
        b.p = posix_memalign(&p, 64, n) == 0 ? p : NULL;
        break;
    case 5:
        b.p = aligned_alloc(32, (n + 31) & ~(size_t)31);
        break;
    case 6:
        b.p = memalign(128, n);
        break;
    case 7:
        b.p = valloc(n);
        break;
    case 8:
        b.p = pvalloc(n);
        break;
    case 9: {
        char s[64];
        memset(s, 'a' + fill % 26, sizeof s - 1);
        s[sizeof s - 1] = '\0';
        b.p = (unsigned char *)strdup(s);
        break;
    }
    case 10:
        b.p = (unsigned char *)strndup("mtrace storm strndup block", n % 20 + 1);
        break;
    default:
        b.cxx = (unsigned char)(k % KINDS - 10), b.p = storm_new(n, b.cxx == 2);
    }
    if (!b.p) return b;
    if (k % KINDS == 9 || k % KINDS == 10) b.n = strlen((char *)b.p) + 1;
    memset(b.p, fill, b.n);
    return b;
}

static int intact(const struct block *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->p[i] != b->fill) return 0;
    return 1;
}

NAMED static void *leak_in_thread(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 0x5a, n);
    return p;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint32_t seed = 2463534242u + id;
    struct block slots[SLOTS] = {{0}};
    unsigned long bad = 0;
    for (unsigned long i = 0; i < ops; i++) {
        struct block *s = &slots[next(&seed) % SLOTS];
        unsigned k = next(&seed);
        if (s->p && !intact(s)) bad++;
        /* realloc and reallocarray take the slot's block, if C made it; else it is freed first. */
        if ((k % KINDS != 2 && k % KINDS != 3) || s->cxx) release(s);
        struct block nb = make(k, 16 + next(&seed) % 2048, (unsigned char)(i + id), s);
        release(s);
        *s = nb;
    }
    for (unsigned j = 0; j < SLOTS; j++) {
        if (slots[j].p && !intact(&slots[j])) bad++;
        release(&slots[j]);
    }
    for (unsigned j = 0; j < LEAKS; j++)
        leak_in_thread(1000 + id);
    __atomic_fetch_add(&corrupt, bad, __ATOMIC_RELAXED);
    return NULL;
}

static void *short_lived(void *arg)
{
    (void)arg;
    free(malloc(64));
    free(strdup("short"));
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long shorts = 10000;
    if (argc > 1) ops = strtoul(argv[1], NULL, 10);
    if (argc > 2) shorts = strtoul(argv[2], NULL, 10);
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) return 2;
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (unsigned long i = 0; i < shorts; i++) {
        pthread_t s;
        if (pthread_create(&s, NULL, short_lived, NULL) != 0) return 2;
        pthread_join(s, NULL);
    }
    say("storm: ");
    say_num(THREADS * ops, 0);
    say(" operations, ");
    say_num(shorts, 0);
    say(" short-lived threads, corrupt blocks: ");
    say_num(corrupt, 0);
    say("\n");
    return corrupt != 0;
}
