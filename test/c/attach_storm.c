/* attach_storm: mtrace.so dlopen'ed as a NIF would be (not preloaded), attached and detached 100
 * times while 16 threads allocate and free through every hooked function, directly (PLT), by an
 * address taken in code (GOT) and from a table of addresses in data (R_X86_64_64 words in RELRO).
 * Each block is filled with its owner's pattern and checked before its free, so that a block
 * handed out twice or freed early shows; results and errno must be what glibc gives.
 *
 * Usage: attach_storm PATH_TO_MTRACE_SO. Prints "N passed, M failed".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 16
#define ROUNDS 100
#define LIVE 64

static int passed, failed;
static volatile int stop;
static uint64_t errors;

static void check(int ok, const char *what)
{
    if (ok)
        passed++;
    else {
        failed++;
        printf("FAIL: %s\n", what);
    }
}

/* Addresses of allocation functions in data: the loader fills them with R_X86_64_64 words. */
static void *(*const volatile table_malloc)(size_t) = malloc;
static void (*const volatile table_free)(void *) = free;

struct block {
    unsigned char *p;
    size_t n;
};

static void fail(void)
{
    __atomic_fetch_add(&errors, 1, __ATOMIC_RELAXED);
}

static void *allocate(int how, size_t n, unsigned seed)
{
    void *p = NULL;
    errno = 4242;
    switch (how) {
    case 0:
        p = malloc(n);
        break;
    case 1:
        p = calloc(1, n);
        break;
    case 2:
        p = realloc(NULL, n);
        break;
    case 3:
        p = reallocarray(NULL, 1, n);
        break;
    case 4:
        if (posix_memalign(&p, 64, n) != 0) p = NULL;
        break;
    case 5:
        p = aligned_alloc(64, (n + 63) & ~(size_t)63);
        break;
    case 6:
        p = memalign(32, n);
        break;
    case 7:
        p = valloc(n);
        break;
    case 8:
        p = pvalloc(n);
        break;
    case 9:
    case 10: {
        /* A string of n - 1 characters: the copy is n bytes, as the caller fills it. */
        char s[256];
        memset(s, 'a' + seed % 26, n - 1);
        s[n - 1] = 0;
        p = how == 9 ? strdup(s) : strndup(s, n - 1);
        break;
    }
    default:
        p = table_malloc(n);
        break;
    }
    if (errno != 4242) fail();
    return p;
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    struct block live[LIVE] = {{0}};
    unsigned char mark = (unsigned char)(seed * 7 + 1);
    void *(*volatile by_address)(size_t) = malloc;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        seed = seed * 1103515245 + 12345;
        int i = (int)(seed >> 8) % LIVE;
        struct block *b = &live[i];
        if (b->p) {
            for (size_t k = 0; k < b->n; k++)
                if (b->p[k] != mark) {
                    fail();
                    break;
                }
            if (seed & 0x10000) {
                errno = 77;
                unsigned char *q = realloc(b->p, b->n * 2);
                if (!q || errno != 77) fail();
                if (q) {
                    for (size_t k = 0; k < b->n; k++)
                        if (q[k] != mark) {
                            fail();
                            break;
                        }
                    b->p = q;
                    b->n *= 2;
                    memset(b->p, mark, b->n);
                }
                continue;
            }
            errno = 88;
            if (seed & 0x20000)
                table_free(b->p);
            else
                free(b->p);
            if (errno != 88) fail();
            b->p = NULL;
            continue;
        }
        size_t n = 1 + (seed >> 12) % 200;
        int how = (int)((seed >> 20) % 13);
        b->p = how == 12 ? by_address(n) : allocate(how, n, seed);
        if (!b->p) {
            fail();
            continue;
        }
        b->n = n;
        memset(b->p, mark, n);
    }
    /* Failures as glibc fails them. */
    errno = 0;
    if (malloc(SIZE_MAX / 2) != NULL || errno != ENOMEM) fail();
    void *p = (void *)1;
    errno = 99;
    if (posix_memalign(&p, 3, 16) != EINVAL || errno != 99 || p != (void *)1) fail();
    for (int i = 0; i < LIVE; i++)
        free(live[i].p);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAIL: dlopen: %s\n", dlerror());
        return 1;
    }
    int (*attach)(const char *) = (int (*)(const char *))dlsym(lib, "mtrace_lib_attach");
    int (*detach)(void) = (int (*)(void))dlsym(lib, "mtrace_lib_detach");
    void *hook = dlsym(lib, "malloc");
    void *(*volatile by_address)(size_t) = malloc;
    void *glibc = (void *)by_address;
    check(attach && detach && hook && hook != glibc, "the entries and the hook are found");
    if (!attach || !detach) return 1;
    check(detach() != 0, "detach before any attach is refused");

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    int attached = 0, covered = 0, restored = 0, table_covered = 0;
    for (int r = 0; r < ROUNDS; r++) {
        attached += attach(NULL) == 0;
        by_address = malloc;
        covered += (void *)by_address == hook;
        table_covered += (void *)table_malloc == hook;
        if (r == 0) check(attach(NULL) != 0, "a second attach is refused");
        usleep(2000);
        detach();
        by_address = malloc;
        restored += (void *)by_address == glibc && (void *)table_malloc == glibc;
        usleep(1000);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* The thread that attached records its own calls afterwards (the attach held its guard). */
    int (*report)(int) = (int (*)(int))dlsym(lib, "mtrace_lib_report_fd");
    FILE *out = tmpfile();
    check(attach(NULL) == 0, "attach once more");
    void *volatile mine = malloc(12345);
    check(report && out && report(fileno(out)) == 0, "a report is written while attached");
    char text[1 << 16] = {0};
    if (out) {
        rewind(out);
        text[fread(text, 1, sizeof text - 1, out)] = 0;
    }
    check(strstr(text, "12345 bytes in 1 block from main") != NULL,
          "the attaching thread's own malloc is recorded");
    free(mine);
    detach();
    check(attached == ROUNDS, "every attach succeeds");
    check(covered == ROUNDS, "an address taken in code (GLOB_DAT) is the hook while attached");
    check(table_covered == ROUNDS, "an address in a RELRO table (R_X86_64_64) too");
    check(restored == ROUNDS, "both are glibc's again after each detach");
    check(errors == 0, "every block intact, every result and errno as glibc's");
    if (errors) printf("  %llu errors\n", (unsigned long long)errors);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
