/* faults: the programs of the fault tests (test/faults_test.exs), each printing only what a
 * caller can observe, so that a traced run must print what an untraced one does.
 *
 *   faults enomem        every allocating function asked for more than RLIMIT_AS leaves
 *   faults exec N        execs itself N times, allocating before each exec
 *   faults dlopen N LIB  N cycles of dlopen, other_alloc, free, dlclose; the last block leaks
 *   faults busy MS       allocates and frees for MS milliseconds
 *   faults forks N       forks N children while four threads allocate (see forks()) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* What a failed call showed: NULL (or the code) and errno, which must be ENOMEM. */
static void show(const char *what, const void *p, int err)
{
    say(what);
    say(p ? ": not NULL" : ": NULL");
    say(err == ENOMEM ? ", ENOMEM\n" : ", another errno\n");
}

/* The address space now, from /proc/self/statm (pages). */
static size_t mapped_bytes(void)
{
    char b[128] = {0};
    FILE *f = fopen("/proc/self/statm", "r");
    size_t pages = 0;
    if (f && fgets(b, sizeof b, f)) pages = strtoul(b, NULL, 10);
    if (f) fclose(f);
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static int enomem(void)
{
    /* strdup and strndup are asked to copy a string of 80 MiB, made before the limit. */
    size_t text_len = (size_t)80 << 20;
    char *text =
        mmap(NULL, text_len + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (text == MAP_FAILED) return 2;
    memset(text, 'x', text_len);
    text[text_len] = '\0';
    /* 64 MiB more than the process maps now, then asks for 256 MiB: only the kernel says no. */
    struct rlimit r = {mapped_bytes() + (64 << 20), RLIM_INFINITY};
    r.rlim_max = r.rlim_cur;
    if (setrlimit(RLIMIT_AS, &r) != 0) return 2;
    size_t big = (size_t)256 << 20;
    void *p;
    errno = 0, p = malloc(big), show("malloc", p, errno);
    errno = 0, p = calloc(big / 16, 16), show("calloc", p, errno);
    /* A failed realloc leaves the block as it was: each gets one of its own, freed after. */
    void *small[2] = {malloc(16), malloc(16)};
    errno = 0, p = realloc(small[0], big), show("realloc", p, errno);
    errno = 0, p = reallocarray(small[1], big / 16, 16), show("reallocarray", p, errno);
    if (!p) free(small[1]);
    free(small[0]);
    errno = 0;
    int rc = posix_memalign(&p, 64, big);
    show("posix_memalign", rc == 0 ? p : NULL, rc);
    say(errno == 0 ? "posix_memalign: errno untouched\n" : "posix_memalign: errno set\n");
    errno = 0, p = aligned_alloc(64, big), show("aligned_alloc", p, errno);
    errno = 0, p = memalign(64, big), show("memalign", p, errno);
    errno = 0, p = valloc(big), show("valloc", p, errno);
    errno = 0, p = pvalloc(big), show("pvalloc", p, errno);
    errno = 0, p = strdup(text), show("strdup", p, errno);
    errno = 0, p = strndup(text, text_len - 1), show("strndup", p, errno);
    /* And what fits still works. */
    char *s = strdup("still allocating");
    say(s && strcmp(s, "still allocating") == 0 ? "small: ok\n" : "small: failed\n");
    free(s);
    return 0;
}

static int exec_chain(char **argv, int n)
{
    if (n == 0) {
        say("exec: done\n");
        return 0;
    }
    char *keep = malloc(100 + (size_t)n);
    if (!keep) return 2;
    char next[16];
    snprintf(next, sizeof next, "%d", n - 1);
    char *args[] = {argv[0], "exec", next, NULL};
    execv("/proc/self/exe", args);
    return 3;
}

static int dlopen_cycles(int n, const char *lib)
{
    void *last = NULL;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) return 2;
        void *(*other_alloc)(size_t) = (void *(*)(size_t))dlsym(h, "other_alloc");
        if (!other_alloc) return 3;
        void *p = other_alloc(64);
        if (i == n - 1)
            last = p;
        else
            free(p);
        dlclose(h);
    }
    say(last ? "dlopen: done\n" : "dlopen: failed\n");
    return 0;
}

static int busy(long ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 1000; i++)
            free(malloc(16 + (size_t)i));
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
    say("busy: done\n");
    return 0;
}

/* forks: blocks of known sizes and contents, checked before they are freed. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 31u);
}

static int intact(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 31u)) return 0;
    return 1;
}

enum { KEPT = 100, CHILD_LEAKS = 3, CHURNERS = 4, WINDOW = 32 };
static unsigned char *kept[KEPT];               /* the main thread's, made before the threads */
static unsigned char *child_leaks[CHILD_LEAKS]; /* a child's, live at its exit */
static int stop;                                /* read and written atomically */

NAMED static unsigned char *fork_keep(size_t i)
{
    unsigned char *p = malloc(300 + i);
    if (p) fill(p, 300 + i, (unsigned)i);
    return p;
}

NAMED static unsigned char *fork_leak(size_t i)
{
    unsigned char *p = calloc(1, 77);
    if (p) fill(p, 77, 7 + (unsigned)i);
    return p;
}

NAMED static unsigned char *churn_block(size_t n, unsigned seed)
{
    unsigned char *p = (seed & 1) ? malloc(n) : realloc(NULL, n);
    if (p) fill(p, n, seed);
    return p;
}

/* The churning threads' live blocks, where a child finds them: a slot is emptied before its
 * block is freed and filled once the new block is made, so that a child knows every block the
 * threads had live at the fork but the one each may have been making. */
static unsigned char *churned[CHURNERS][WINDOW];

/* Allocates and frees, WINDOW blocks live at a time, until stop; returns the corrupt ones. */
static void *churn(void *arg)
{
    unsigned char **live = churned[(uintptr_t)arg];
    size_t len[WINDOW] = {0}, bad = 0;
    for (unsigned i = (unsigned)(uintptr_t)arg * 7919u; !__atomic_load_n(&stop, __ATOMIC_RELAXED);
         i++) {
        size_t k = i % WINDOW;
        unsigned char *old = live[k];
        if (old && !intact(old, len[k], i - WINDOW)) bad++;
        __atomic_store_n(&live[k], NULL, __ATOMIC_SEQ_CST);
        free(old);
        len[k] = 16 + (i * 2654435761u) % 4000;
        __atomic_store_n(&live[k], churn_block(len[k], i), __ATOMIC_SEQ_CST);
    }
    for (size_t k = 0; k < WINDOW; k++)
        free(live[k]);
    return (void *)bad;
}

/* In a child: the blocks kept before the fork are intact; frees half of them and every block the
 * threads had live, leaks three. Exits through exit(), so that its own exit report is written. */
static void child(void)
{
    int bad = 0;
    for (size_t i = 0; i < KEPT; i++) {
        if (!intact(kept[i], 300 + i, (unsigned)i)) bad = 1;
        if (i % 2) free(kept[i]);
    }
    for (size_t k = 0; k < CHURNERS; k++)
        for (size_t j = 0; j < WINDOW; j++)
            free(churned[k][j]);
    for (size_t i = 0; i < CHILD_LEAKS; i++)
        if (!(child_leaks[i] = fork_leak(i)) || !intact(child_leaks[i], 77, 7 + (unsigned)i))
            bad = 1;
    exit(bad ? 1 : 0);
}

/* Four threads allocate and free while the main thread forks n children one after another, each
 * at once where it happens to fall in the others' calls. Prints how many children exited 0. */
static int forks(int n)
{
    for (size_t i = 0; i < KEPT; i++)
        if (!(kept[i] = fork_keep(i))) return 2;
    pthread_t t[CHURNERS];
    for (int k = 0; k < CHURNERS; k++)
        if (pthread_create(&t[k], NULL, churn, (void *)(uintptr_t)k) != 0) return 2;
    int ok = 0;
    for (int c = 0; c < n; c++) {
        pid_t pid = fork();
        if (pid == 0) child();
        int status;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            ok++;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    size_t bad = 0;
    for (int k = 0; k < CHURNERS; k++) {
        void *r;
        pthread_join(t[k], &r);
        bad += (size_t)r;
    }
    for (size_t i = 0; i < KEPT; i++)
        free(kept[i]);
    say("forks: ");
    say_num((uint64_t)ok, 0);
    say(" of ");
    say_num((uint64_t)n, 0);
    say(bad ? " children exited 0, corrupt blocks\n" : " children exited 0, no corrupt block\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "enomem") == 0) return enomem();
    if (argc >= 3 && strcmp(argv[1], "exec") == 0) return exec_chain(argv, atoi(argv[2]));
    if (argc >= 4 && strcmp(argv[1], "dlopen") == 0) return dlopen_cycles(atoi(argv[2]), argv[3]);
    if (argc >= 3 && strcmp(argv[1], "busy") == 0) return busy(atol(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "forks") == 0) return forks(atoi(argv[2]));
    return 2;
}
