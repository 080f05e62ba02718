/* heap_test.c: the walk of glibc's heap (glibc_heap.h) against the program's own list of what it
 * holds.
 *
 * The program interposes the malloc family itself (as an executable's definitions do for every
 * library), so that its list holds glibc's own blocks too (a thread's DTV, stdio's buffers).
 * Chunks are put in each place glibc keeps them: tcaches, fastbins, the unsorted, small and large
 * bins, top chunks, mmapped chunks (memalign'd too), sixteen threads' arenas, after malloc_trim,
 * in a forked child. After each scenario the walk's blocks must be exactly the program's live
 * pointers (with their usable sizes), and its totals
 * must agree with mallinfo2. A corrupted arena must be refused, not walked. Prints one line per
 * check and "N passed, M failed"; exits 1 on any failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/platform.h"
#include "mark/glibc_heap.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    fflush(stdout);
    ok ? passed++ : failed++;
}

enum { MAX_LIVE = 100000 };
static void *live[MAX_LIVE];
static int aligned_mmapped[MAX_LIVE];
static size_t nlive;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static void *keep(void *p)
{
    if (!p) return p;
    pthread_mutex_lock(&lock);
    if (nlive < MAX_LIVE) {
        /* an mmapped chunk that memalign moved into its mapping: the walk's block starts at the
         * mapping */
        size_t head = ((size_t *)p)[-1], prev = ((size_t *)p)[-2];
        aligned_mmapped[nlive] = (head & 2) && prev;
        live[nlive++] = p;
    }
    pthread_mutex_unlock(&lock);
    return p;
}

static void forget(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == p) {
            live[i] = live[--nlive];
            aligned_mmapped[i] = aligned_mmapped[nlive];
            break;
        }
    pthread_mutex_unlock(&lock);
}

void *malloc(size_t n)
{
    return keep(__libc_malloc(n));
}

void *calloc(size_t k, size_t n)
{
    return keep(__libc_calloc(k, n));
}

void *realloc(void *p, size_t n)
{
    forget(p);
    void *q = __libc_realloc(p, n);
    if (!q && n) return keep(p);
    return keep(q);
}

void free(void *p)
{
    forget(p);
    __libc_free(p);
}

void *memalign(size_t a, size_t n)
{
    return keep(__libc_memalign(a, n));
}

void *aligned_alloc(size_t a, size_t n)
{
    return keep(__libc_memalign(a, n));
}

int posix_memalign(void **out, size_t a, size_t n)
{
    void *p = __libc_memalign(a, n);
    if (!p) return 12;
    *out = keep(p);
    return 0;
}

static void drop(void *p)
{
    free(p);
}

/* Blocks the test keeps: stored where the compiler cannot drop the allocation. */
static void *volatile held[64];
static unsigned nheld;

static void hold(void *p)
{
    held[nheld++ % 64] = p;
}

static int walk(struct mt_heap *h)
{
    struct mt_maps maps;
    if (mt_maps_read(&maps) != 0) return -1;
    int rc = mt_heap_prepare(h);
    if (rc == 0) rc = mt_heap_walk(h, &maps, NULL, (uintptr_t)__builtin_frame_address(0));
    mt_maps_drop(&maps);
    return rc;
}

/* The walk's blocks are the live pointers, exactly; and its totals are glibc's. */
static void compare(const char *what)
{
    struct mt_heap h;
    char line[256];
    if (walk(&h) != 0) {
        snprintf(line, sizeof line, "%s: walked (refused: %s)", what, h.refused ? h.refused : "?");
        check(0, line);
        return;
    }
    size_t matched = 0, extra = 0, missing = 0;
    for (size_t i = 0; i < h.blocks; i++) {
        const struct mt_heap_chunk *b = &h.block[i];
        int found = 0;
        for (size_t j = 0; j < nlive && !found; j++) {
            uintptr_t p = (uintptr_t)live[j];
            if (aligned_mmapped[j] ? p >= b->addr && p < b->addr + b->size
                                   : p == b->addr && malloc_usable_size(live[j]) == b->size)
                found = 1;
        }
        if (found)
            matched++;
        else
            extra++;
    }
    missing = nlive - matched;
    snprintf(
        line, sizeof line,
        "%s: %zu live blocks, walk has each (%zu missing) and no other (%zu extra; %zu blocks, "
        "%zu tcaches, %zu fast, %zu tcached, %zu mmapped, %zu arenas, %zu bad)",
        what, nlive, missing, extra, h.blocks, h.tcaches, h.fast, h.tcached, h.mmapped, h.arenas,
        h.bad);
    check(missing == 0 && extra == 0 && h.bad == 0, line);
    struct mallinfo2 mi = mallinfo2();
    snprintf(line, sizeof line,
             "%s: totals agree with mallinfo2 (free %zu/%zu, fast %zu/%zu, mmapped %zu/%zu)", what,
             (size_t)(h.free_bytes - h.tcached_bytes), mi.fordblks, h.fast, mi.smblks, h.mmapped,
             mi.hblks);
    check(h.free_bytes - h.tcached_bytes == mi.fordblks && h.fast == mi.smblks &&
              h.mmapped == mi.hblks && h.mmapped_bytes == mi.hblkhd,
          line);
    mt_heap_drop(&h);
}

static void single_thread_places(void)
{
    /* tcache: three small chunks freed */
    void *t[3];
    for (int i = 0; i < 3; i++)
        t[i] = malloc(24);
    hold(malloc(100));
    for (int i = 0; i < 3; i++)
        drop(t[i]);
    /* fastbins: a tcache bin filled, then more of the same size */
    void *f[12];
    for (int i = 0; i < 12; i++) {
        f[i] = malloc(40);
        hold(malloc(16)); /* no two fast chunks side by side */
    }
    for (int i = 0; i < 12; i++)
        drop(f[i]);
    /* unsorted, then small and large bins: freed between kept blocks, then sorted by a request
     * none of them fits */
    void *u[20];
    for (int i = 0; i < 20; i++) {
        u[i] = malloc(i < 10 ? 2000 : 20000);
        hold(malloc(24));
    }
    for (int i = 0; i < 20; i += 2)
        drop(u[i]);
    compare("unsorted");
    hold(malloc(60000));
    compare("small and large bins");
    /* calloc, realloc, memalign, mmapped */
    hold(calloc(10, 100));
    void *r = malloc(50);
    hold(realloc(r, 5000));
    hold(memalign(256, 1000));
    hold(malloc(1 << 20));
    void *a = NULL;
    check(posix_memalign(&a, 1 << 16, 1 << 20) == 0, "posix_memalign");
    compare("calloc, realloc, memalign, mmapped");
    malloc_trim(0);
    compare("after malloc_trim");
}

/* An mmapped chunk in one mapping with a thread arena's heap: glibc 2.41 maps a heap so that the
 * kernel merges its writable part with an anonymous mapping made just below it later. An mmapped
 * chunk is made so: a new mapping there, below the first of the threads' heaps that has room
 * below it (a heap often ends where the next one starts), takes a copy of a chunk that glibc
 * mapped elsewhere, which is then unmapped (glibc counts its mmapped chunks, not their places).
 * Run while the threads of threads() wait, their arenas in use. */
static void merged_with_a_heap(void)
{
    /* the mapping of an mmapped chunk of 1 MiB (its two size words, no footer, a page's
     * rounding), placed before glibc maps the chunk, which could take the room below a heap */
    size_t page = (size_t)sysconf(_SC_PAGESIZE),
           len = ((1u << 20) + 2 * sizeof(size_t) + page - 1) & ~(page - 1);
    void *below = MAP_FAILED;
    for (size_t i = 0; i < nlive && below == MAP_FAILED; i++) {
        if (!(((size_t *)live[i])[-1] & 4)) continue; /* not in a thread arena */
        uintptr_t heap = (uintptr_t)live[i] & ~(uintptr_t)(MT_HEAP_MAX - 1);
        void *at = (void *)(heap - len);
        below = mmap(at, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (below != at && below != MAP_FAILED) munmap(below, len);
        if (below != at) below = MAP_FAILED;
    }
    check(below != MAP_FAILED, "a mapping made just below a thread arena's heap");
    if (below == MAP_FAILED) return;
    char *p = malloc(1 << 20);
    if (malloc_usable_size(p) + MT_CHUNK_HDR != len) {
        check(0, "an mmapped chunk of 1 MiB as long as its mapping was reckoned");
        munmap(below, len);
        drop(p);
        return;
    }
    memcpy(below, p - MT_CHUNK_HDR, len);
    forget(p);
    munmap(p - MT_CHUNK_HDR, len);
    char *q = keep((char *)below + MT_CHUNK_HDR);
    compare("an mmapped chunk in one mapping with a thread arena's heap");
    drop(q);
}

static pthread_barrier_t ready, done;

static void *thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *mine[64];
    for (int round = 0; round < 200; round++)
        for (int i = 0; i < 64; i++) {
            if (round) drop(mine[i]);
            mine[i] = malloc((size_t)(rand_r(&seed) % 3000) + 1);
        }
    for (int i = 0; i < 32; i++)
        drop(mine[i]);
    void *small = malloc(24); /* left in this thread's tcache, which then proves itself */
    free(small);
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&done);
    return NULL;
}

static void threads(void)
{
    enum { N = 16 };
    pthread_t t[N];
    pthread_barrier_init(&ready, NULL, N + 1);
    pthread_barrier_init(&done, NULL, N + 1);
    for (int i = 0; i < N; i++)
        pthread_create(&t[i], NULL, thread, (void *)(uintptr_t)(i + 1));
    pthread_barrier_wait(&ready);
    compare("16 threads, waiting");
    merged_with_a_heap();
    pthread_barrier_wait(&done);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    compare("16 threads, exited");
}

static void forked(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        hold(malloc(333));
        compare("in a forked child");
        exit(failed ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child's walk");
}

/* Words shaped like an mmapped chunk's header (a page that starts with 0, then a page-multiple
 * size with the mmapped flag alone) where glibc puts no chunk: mtrace's reserved memory (a
 * thread's counters can read so), a stopped thread's dead frames. Each would be one chunk more
 * than glibc counts, and the walk refused. */
#define LOOK_ALIKE ((size_t)0x60000 | 2)

static pthread_barrier_t stack_ready, stack_done;
static uintptr_t stack_sp;

static void *stack_look_alike(void *arg)
{
    (void)arg;
    volatile size_t frame[(0x60000 + 8192) / sizeof(size_t)];
    uintptr_t page = ((uintptr_t)frame + 4095) & ~(uintptr_t)4095;
    memset((void *)frame, 1, sizeof frame);
    ((volatile size_t *)page)[0] = 0;
    ((volatile size_t *)page)[1] = LOOK_ALIKE;
    stack_sp = (uintptr_t)__builtin_frame_address(0);
    pthread_barrier_wait(&stack_ready);
    pthread_barrier_wait(&stack_done);
    return NULL;
}

/* Look-alikes in memory of the program's own, as the VM's carriers are (mapped far from any
 * other, so that no guard page precedes it): one candidate more than glibc counts, the only one
 * of the excess's size, is left out; two of one size are refused. */
static void program_look_alikes(void)
{
    size_t *anon = mmap((void *)0x3e0000000000, 4 << 20, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t *first = (size_t *)((char *)anon + 4096), *second = (size_t *)((char *)anon + (2 << 20));
    first[0] = 0;
    first[1] = LOOK_ALIKE;
    compare("a chunk's look-alike in the program's anonymous memory");
    second[0] = 0;
    second[1] = LOOK_ALIKE;
    struct mt_heap h;
    char line[256];
    int rc = walk(&h);
    snprintf(line, sizeof line, "two look-alikes of one size are refused (%s)",
             rc == 0     ? "walked"
             : h.refused ? h.refused
                         : "?");
    check(rc != 0 && errno == EAGAIN, line);
    if (rc == 0) mt_heap_drop(&h);
    munmap(anon, 4 << 20);
}

static void look_alikes(void)
{
    size_t *own = mt_mem_reserve(2 << 20);
    size_t *page = (size_t *)(((uintptr_t)own + 4095) & ~(uintptr_t)4095) + 512;
    page[0] = 0;
    page[1] = LOOK_ALIKE;
    compare("a chunk's look-alike in mtrace's reserved memory");

    pthread_t t;
    pthread_barrier_init(&stack_ready, NULL, 2);
    pthread_barrier_init(&stack_done, NULL, 2);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 4 << 20);
    pthread_create(&t, &attr, stack_look_alike, NULL);
    pthread_barrier_wait(&stack_ready);
    struct mt_world_thread stopped = {.tid = 1, .stopped = 1, .sp = stack_sp};
    struct mt_world world = {.t = &stopped, .n = 1, .stopped = 1};
    struct mt_maps maps;
    struct mt_heap h;
    int rc = mt_maps_read(&maps);
    if (rc == 0) rc = mt_heap_prepare(&h);
    if (rc == 0) rc = mt_heap_walk(&h, &maps, &world, (uintptr_t)__builtin_frame_address(0));
    struct mallinfo2 mi = mallinfo2();
    char line[256];
    snprintf(line, sizeof line,
             "a chunk's look-alike in a stopped thread's stack: walked (%s), %zu mmapped of %zu",
             rc == 0     ? "yes"
             : h.refused ? h.refused
                         : "no",
             rc == 0 ? h.mmapped : 0, mi.hblks);
    check(rc == 0 && h.mmapped == mi.hblks, line);
    if (rc == 0) mt_heap_drop(&h);
    mt_maps_drop(&maps);
    pthread_barrier_wait(&stack_done);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
}

/* A thread in glibc's tcache_thread_shutdown frees its entries one by one, moving each list's
 * head on but not its count down. Stopped there, its tcache must still prove itself: else the
 * entries still listed would be blocks that only safe-linked words point to, lost to a scan. */
static pthread_barrier_t shut_ready, shut_done;
static void *shut_entries[5];

/* 200-byte blocks: tcache bin 11, which nothing else in the thread fills */
enum { SHUT_SIZE = 200, SHUT_BIN = (SHUT_SIZE + 8 + 15) / 16 - 2 };

/* n blocks of SHUT_SIZE into the calling thread's tcache bin, the last freed its head */
static void fill_bin(void **entries, int n)
{
    for (int i = 0; i < n; i++)
        entries[i] = __libc_malloc(SHUT_SIZE);
    for (int i = 0; i < n; i++)
        __libc_free(entries[i]);
}

static void *fill_tcache(void *arg)
{
    (void)arg;
    fill_bin(shut_entries, 5);
    pthread_barrier_wait(&shut_ready);
    pthread_barrier_wait(&shut_done);
    return NULL;
}

/* The word of a tcache that holds its bin's head: head, with the bin's count and a chunk of a
 * tcache's size around it, in any heap. */
static uintptr_t *tcache_slot(uintptr_t head, uint16_t count)
{
    uintptr_t *slot = NULL;
    struct mt_maps maps;
    struct mt_mapping m;
    if (mt_maps_read(&maps) != 0) return NULL;
    size_t before = MT_TCACHE_ENTRIES + 8 * SHUT_BIN;
    for (size_t at = 0; !slot && mt_maps_next(&maps, &at, &m);) {
        if (!m.readable || !m.writable ||
            (m.path_len && !(m.path_len == 6 && !memcmp(m.path, "[heap]", 6))))
            continue;
        for (uintptr_t p = m.lo + before + 16; !slot && p < m.hi; p += 8) {
            uintptr_t base = p - before;
            if (*(uintptr_t *)p == head && *(uint16_t *)(base + 2 * SHUT_BIN) == count &&
                (*(size_t *)(base - 8) & ~(size_t)7) - MT_TCACHE_CHUNK < MT_CHUNK_MIN)
                slot = (uintptr_t *)p;
        }
    }
    mt_maps_drop(&maps);
    return slot;
}

/* A tcache in a chunk larger than its struct: malloc gives a free chunk whole when the remainder
 * would be too small to split. In a forked child with one arena, a new thread's tcache is made
 * from the only free chunk that fits, a 0x2a0 one kept apart by two blocks. */
static pthread_barrier_t larger_go, larger_ready, larger_done;
static void *larger_entries[3];

static void *larger_thread(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&larger_go);
    fill_bin(larger_entries, 3);
    pthread_barrier_wait(&larger_ready);
    pthread_barrier_wait(&larger_done);
    return NULL;
}

static void larger_tcache(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        mallopt(M_ARENA_MAX, 1);
        /* the thread made first: making it allocates (its thread-local storage) */
        pthread_t t;
        pthread_barrier_init(&larger_go, NULL, 2);
        pthread_barrier_init(&larger_ready, NULL, 2);
        pthread_barrier_init(&larger_done, NULL, 2);
        pthread_create(&t, NULL, larger_thread, NULL);
        /* no free chunk of either size left: each taken until one comes from the top chunk */
        for (size_t n = 656; n >= 632; n -= 24)
            for (size_t top = mallinfo2().keepcost; hold(malloc(n)), mallinfo2().keepcost == top;)
                ;
        /* seven 0x2a0 chunks fill this thread's tcache bin; the eighth goes to the arena (all
         * volatile: gcc drops a malloc whose block is only freed) */
        void *volatile fill[7];
        for (int i = 0; i < 7; i++)
            fill[i] = malloc(656);
        hold(malloc(24));
        void *volatile p = malloc(656);
        hold(malloc(24));
        for (int i = 0; i < 7; i++)
            free(fill[i]);
        free(p);
        pthread_barrier_wait(&larger_go);
        pthread_barrier_wait(&larger_ready);
        uintptr_t *slot = tcache_slot((uintptr_t)larger_entries[2], 3);
        size_t chunk = slot ? *(size_t *)((char *)slot - MT_TCACHE_ENTRIES - 8 * SHUT_BIN - 8) : 0;
        char line[96];
        snprintf(line, sizeof line, "a new thread's tcache made from a free 0x2a0 chunk (%#zx)",
                 chunk & ~(size_t)7);
        check((chunk & ~(size_t)7) == MT_TCACHE_CHUNK + 16, line);
        compare("a tcache in a chunk larger than its struct");
        pthread_barrier_wait(&larger_done);
        pthread_join(t, NULL);
        exit(failed ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child with one arena");
}

static void shutting_down(void)
{
    pthread_t t;
    pthread_barrier_init(&shut_ready, NULL, 2);
    pthread_barrier_init(&shut_done, NULL, 2);
    pthread_create(&t, NULL, fill_tcache, NULL);
    pthread_barrier_wait(&shut_ready);
    uintptr_t head = (uintptr_t)shut_entries[4], *slot = tcache_slot(head, 5);
    if (!slot) {
        check(0, "a shutting-down tcache: the thread's tcache found");
    } else {
        /* two entries freed by the shutdown: out of the list, still chunks in use here */
        uintptr_t second = mt_reveal(head, *(uintptr_t *)head);
        *slot = mt_reveal(second, *(uintptr_t *)second);
        keep((void *)head);
        keep((void *)second);
        compare("a tcache shutting down (two entries past their count)");
        forget((void *)head);
        forget((void *)second);
        *slot = head;
    }
    pthread_barrier_wait(&shut_done);
    pthread_join(t, NULL);
}

/* The main arena found through a chunk freed to the unsorted bin, whose back link is the bin. */
static void corrupted(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        void *a = malloc(3000), *b = malloc(24);
        uintptr_t at = (uintptr_t)a;
        free(a);
        uintptr_t bin = ((volatile uintptr_t *)at)[1];
        uintptr_t *bins = (uintptr_t *)(bin + 16); /* the arena's bins: unsorted first */
        bins[2 * 100] = 0x1001;                    /* an empty bin's link made odd */
        struct mt_heap h;
        int rc = walk(&h);
        printf("refused: %s\n", h.refused ? h.refused : "(not refused)");
        fflush(stdout);
        (void)b;
        _exit(rc == -1 && h.refused && strstr(h.refused, "main arena") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a corrupted main arena is refused with its message");
}

int main(void)
{
    printf("heap_test\n");
    /* a thread's tcache proves itself by its entries: an empty one is a block like any other */
    hold(malloc(24));
    drop(held[0]);
    compare("at start");
    /* first: before any thread, so that the child's arena limit is its own */
    larger_tcache();
    /* then: its thread gets an arena of its own, whose tcache no earlier one has left words in */
    shutting_down();
    single_thread_places();
    threads();
    forked();
    look_alikes();
    program_look_alikes();
    corrupted();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
