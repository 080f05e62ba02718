/* mbench: the cost of one malloc+free pair, for comparing allocator tracers (see bin/bench).
 *
 * Each thread keeps a ring of `live` blocks: an iteration frees the oldest and mallocs a new one
 * of 16..4096 bytes; with -s (steady) of the freed one's size, so that glibc finds an exact fit
 * and the untraced pair is a third of the cost. The malloc is made at the bottom of `depth`
 * distinct frames, so that an unwinder has a real stack to walk. `leak` blocks are allocated first
 * and never freed (for RSS, and for the time a tracer takes to keep a large live set: ns_per_leak).
 * Prints one line of key=value pairs; ns_per_pair is the median over the repetitions of the wall
 * time of one repetition divided by its iterations. With MBENCH_ATTACH=path, the program first
 * dlopens that mtrace.so and attaches it (attach.h), as `bin/mtrace attach` would, and says how
 * long the attach took (attach_us): the pairs then measure the hot path of an attached process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define MAX_THREADS 64
#define MAX_REPS 101

/* Distinct functions, one per level: libunwind caches per address, so one recursive function
 * would flatter it. Each asm string differs so that gcc's identical code folding keeps them
 * apart; sibling-call optimisation must be off (Makefile) or the frames would vanish. */
/* clang-format off */
#define LEVELS(X)                                                                                  \
    X(l00) X(l01) X(l02) X(l03) X(l04) X(l05) X(l06) X(l07) X(l08) X(l09) X(l10) X(l11) X(l12)     \
    X(l13) X(l14) X(l15) X(l16) X(l17) X(l18) X(l19) X(l20) X(l21) X(l22) X(l23) X(l24) X(l25)     \
    X(l26) X(l27) X(l28) X(l29) X(l30) X(l31) X(l32) X(l33) X(l34) X(l35) X(l36) X(l37) X(l38)     \
    X(l39) X(l40) X(l41) X(l42) X(l43) X(l44) X(l45) X(l46) X(l47) X(l48) X(l49) X(l50) X(l51)     \
    X(l52) X(l53) X(l54) X(l55) X(l56) X(l57) X(l58) X(l59) X(l60) X(l61) X(l62) X(l63)
/* clang-format on */

typedef void *level_fn(int, size_t);
#define DECLARE(name) static level_fn name;
LEVELS(DECLARE)
#define NAME(name) name,
static level_fn *const levels[] = {LEVELS(NAME)};
#define MAX_DEPTH ((int)(sizeof levels / sizeof levels[0]))

#define DEFINE(name)                                                                               \
    static NOINLINE void *name(int d, size_t n)                                                    \
    {                                                                                              \
        __asm__ volatile("# " #name);                                                              \
        return d > 0 ? levels[d - 1](d - 1, n) : malloc(n);                                        \
    }
LEVELS(DEFINE)

static void *alloc_at_depth(int depth, size_t n)
{
    return levels[depth - 1](depth - 1, n);
}

static int threads = 1, depth = 10, reps = 5, steady = 0;
static long iters = 200000, live = 1000, leak = 0;
/* Each thread times its own repetitions: a main thread timing them could be descheduled after
 * the start and read its clock when the work is already done (seen under valgrind). */
static pthread_barrier_t rep_start, done;
static uint64_t t_start[MAX_THREADS][MAX_REPS], t_end[MAX_THREADS][MAX_REPS];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static inline size_t next_size(uint32_t *s)
{
    return 16 + next_rand(s) % 4081;
}

static void *worker(void *arg)
{
    int t = (int)(uintptr_t)arg;
    uint32_t seed = 2463534242u + 7919u * (uint32_t)t;
    void **ring = calloc((size_t)live, sizeof *ring);
    size_t *sizes = calloc((size_t)live, sizeof *sizes);
    if (!ring || !sizes) {
        perror("mbench: calloc");
        exit(1);
    }
    for (long i = 0; i < live; i++)
        ring[i] = alloc_at_depth(depth, sizes[i] = next_size(&seed));
    long head = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_wait(&rep_start);
        t_start[t][r] = now_ns();
        for (long i = 0; i < iters; i++) {
            free(ring[head]);
            ring[head] = alloc_at_depth(depth, steady ? sizes[head] : next_size(&seed));
            if (++head == live) head = 0;
        }
        t_end[t][r] = now_ns();
    }
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&done); /* main reads RSS in between, with every ring still live */
    for (long i = 0; i < live; i++)
        free(ring[i]);
    free(ring);
    free(sizes);
    return NULL;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: mbench [-t threads] [-n iterations per repetition] [-d depth 1..%d]\n"
            "              [-l live blocks per thread] [-k leaked blocks] [-r repetitions] [-s]\n",
            MAX_DEPTH);
    exit(2);
}

int main(int argc, char **argv)
{
    int c;
    while ((c = getopt(argc, argv, "t:n:d:l:k:r:s")) != -1) {
        switch (c) {
        case 's':
            steady = 1;
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'n':
            iters = atol(optarg);
            break;
        case 'd':
            depth = atoi(optarg);
            break;
        case 'l':
            live = atol(optarg);
            break;
        case 'k':
            leak = atol(optarg);
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        default:
            usage();
        }
    }
    if (optind != argc || threads < 1 || threads > MAX_THREADS || iters < 0 || depth < 1 ||
        depth > MAX_DEPTH || live < 1 || leak < 0 || reps < 1 || reps > MAX_REPS)
        usage();

    double attach_us = 0;
    const char *lib = getenv("MBENCH_ATTACH");
    if (lib) {
        uint64_t t0 = now_ns();
        void *h = dlopen(lib, RTLD_NOW);
        int (*attach)(const char *) = h ? (int (*)(const char *))dlsym(h, "mtrace_lib_attach") : 0;
        int e = attach ? attach(NULL) : -1;
        if (e != 0) {
            fprintf(stderr, "mbench: cannot attach %s (%s, error %d)\n", lib,
                    h ? "loaded" : dlerror(), e);
            return 1;
        }
        attach_us = (double)(now_ns() - t0) / 1000;
    }

    /* Leaked from a fixed small size: only the tracer's share of RSS should vary with it. */
    uint64_t leak_start = now_ns();
    for (long i = 0; i < leak; i++)
        if (!alloc_at_depth(depth, 32)) {
            perror("mbench: malloc");
            return 1;
        }
    double per_leak = leak ? (double)(now_ns() - leak_start) / (double)leak : 0;

    pthread_barrier_init(&rep_start, NULL, (unsigned)threads);
    pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
    pthread_t tids[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            fprintf(stderr, "mbench: pthread_create failed\n");
            return 1;
        }
    pthread_barrier_wait(&done);
    long rss = rss_kb();
    pthread_barrier_wait(&done);
    for (int t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);

    /* A repetition lasts from the first thread's start to the last thread's end. */
    uint64_t ns[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        uint64_t lo = t_start[0][r], hi = t_end[0][r];
        for (int t = 1; t < threads; t++) {
            if (t_start[t][r] < lo) lo = t_start[t][r];
            if (t_end[t][r] > hi) hi = t_end[t][r];
        }
        ns[r] = hi - lo;
    }

    qsort(ns, (size_t)reps, sizeof ns[0], cmp_u64);
    double per = iters ? (double)ns[reps / 2] / (double)iters : 0;
    double best = iters ? (double)ns[0] / (double)iters : 0;
    printf("mbench threads=%d iters=%ld depth=%d live=%ld leak=%ld reps=%d ns_per_pair=%.2f "
           "ns_per_pair_min=%.2f ns_per_leak=%.2f rss_kb=%ld attach_us=%.0f\n",
           threads, iters, depth, live, leak, reps, per, best, per_leak, rss, attach_us);
    return 0;
}
