/* Four threads each make 100000 allocations of varying sizes (malloc, some calloc and realloc),
 * checking every block before freeing it; the blocks left at the end are checked and freed by the
 * main thread, so that frees also cross threads. The summary depends only on the seeds. */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>

enum { THREADS = 4, OPS = 100000, SLOTS = 256 };

struct slot {
    unsigned char *p;
    size_t n;
    unsigned seed;
};

struct worker {
    int id;
    size_t allocations, corrupt, live;
    struct slot slots[SLOTS];
};

static pthread_barrier_t start;

static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static size_t size_of(uint32_t r)
{
    switch (r % 256) { /* big blocks rare: checking their contents is what costs */
    case 0:
        return 128 * 1024 + r % 200000; /* above the mmap threshold */
    case 1:
    case 2:
    case 3:
        return 4096 + r % 60000;
    default:
        return 1 + r % 600;
    }
}

static void *work(void *arg)
{
    struct worker *w = arg;
    uint32_t rng = 2463534242u + (uint32_t)w->id * 7919u;
    pthread_barrier_wait(&start);
    for (unsigned i = 0; i < OPS; i++) {
        struct slot *s = &w->slots[next(&rng) % SLOTS];
        uint32_t r = next(&rng);
        size_t n = size_of(r);
        unsigned seed = (unsigned)w->id * 1000003u + i;
        if (s->p && !intact(s->p, s->n, s->seed)) w->corrupt++;
        unsigned char *q;
        if (r % 16 == 5 && s->p) {
            q = realloc(s->p, opaque(n));
            if (q && !intact(q, n < s->n ? n : s->n, s->seed)) w->corrupt++;
        } else {
            free(s->p);
            q = r % 16 == 9 ? calloc(opaque(1), opaque(n)) : malloc(opaque(n));
            if (q && r % 16 == 9 && !all_zero(q, n)) w->corrupt++;
        }
        if (!q || malloc_usable_size(q) < n) {
            w->corrupt++;
            s->p = NULL;
            continue;
        }
        fill(q, n, seed);
        *s = (struct slot){q, n, seed};
        w->allocations++;
    }
    for (int k = 0; k < SLOTS; k++)
        if (w->slots[k].p) w->live++;
    return NULL;
}

int main(void)
{
    static struct worker workers[THREADS];
    pthread_t tids[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int t = 0; t < THREADS; t++) {
        workers[t].id = t;
        expect(pthread_create(&tids[t], NULL, work, &workers[t]) == 0, "pthread_create");
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(tids[t], NULL);

    size_t live = 0, survived = 0;
    for (int t = 0; t < THREADS; t++) {
        struct worker *w = &workers[t];
        printf("thread %d: %zu allocations, %zu corrupt, %zu live at exit\n", t, w->allocations,
               w->corrupt, w->live);
        expect(w->allocations == OPS && w->corrupt == 0, "every allocation sound");
        for (int k = 0; k < SLOTS; k++) {
            struct slot *s = &w->slots[k];
            if (!s->p) continue;
            live++;
            if (intact(s->p, s->n, s->seed)) survived++;
            free(s->p);
        }
    }
    printf("final check: %zu live blocks, %zu intact\n", live, survived);
    expect(live == survived, "every block survived");
    pthread_barrier_destroy(&start);
    return finish();
}
