/* cfi_test.c: the table unwinder (cfi.h) against libunwind's unw_backtrace, frame for frame, from
 * the same function: stacks of frames with and without frame pointers, a CFA on RBP (alloca), a
 * callback from inside libc (qsort), other threads, a stack deeper than the buffer, each twice
 * (the second time from the rows cached the first). Where the rules cannot say (a signal frame,
 * code in no object) it must give up, never guess. Prints one line per check and
 * "N passed, M failed"; exits 1 on any failure. */
#define _GNU_SOURCE
#include <alloca.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "record/cfi.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    fflush(stdout);
    ok ? passed++ : failed++;
}

enum { MAX = 48 };
static __thread struct mt_cfi_rows *rows;
static int compared, differed, gave_up;

static uintptr_t stack_top(void)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    return (uintptr_t)addr + size;
}

/* Both unwinders from here; the frames from this function's caller on must be the same. Returns
 * the table unwinder's count (-1: gave up). */
__attribute__((noinline)) static int compare_here(void)
{
    void *a[MAX];
    uintptr_t b[MAX], sps[MAX], me = (uintptr_t)__builtin_return_address(0);
    int na = unw_backtrace(a, MAX);
    int nb = mt_cfi_backtrace(rows, stack_top(), b, sps, MAX, NULL);
    if (nb < 0) {
        gave_up++;
        return nb;
    }
    int i = 0, j = 0;
    while (i < na && (uintptr_t)a[i] != me)
        i++;
    while (j < nb && b[j] != me)
        j++;
    /* Both buffers full: the deeper one is cut where the buffer ends. */
    int n = na - i < nb - j ? na - i : nb - j, same = i < na && j < nb;
    same &= (na - i == nb - j) || (na == MAX && nb == MAX);
    for (int k = 0; same && k < n; k++)
        same = (uintptr_t)a[i + k] == b[j + k];
    for (int k = j + 1; same && k < nb; k++)
        same = sps[k] > sps[k - 1];
    compared++;
    differed += !same;
    return nb;
}

__attribute__((noinline)) static int with_alloca(int n)
{
    if (!n) return compare_here();
    volatile char *p = alloca((size_t)n * 40);
    p[0] = (char)n;
    return with_alloca(n - 1) + p[0] - n;
}

__attribute__((noinline, optimize("omit-frame-pointer"))) static int without_fp(int n)
{
    if (!n) return compare_here();
    return without_fp(n - 1) * 2 + 1 - without_fp(0) * 0;
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) static int with_fp(int n)
{
    if (!n) return without_fp(3);
    volatile int x = with_fp(n - 1);
    return x;
}

static int by_qsort(const void *x, const void *y)
{
    compare_here();
    return *(const int *)x - *(const int *)y;
}

static void shapes(void)
{
    compare_here();
    with_alloca(6);
    with_fp(5);
    with_alloca(70); /* deeper than MAX */
    int v[4] = {4, 2, 3, 1};
    qsort(v, 4, sizeof v[0], by_qsort);
}

static void *thread(void *arg)
{
    (void)arg;
    rows = calloc(1, mt_cfi_rows_bytes());
    for (int pass = 0; pass < 2; pass++)
        shapes();
    free(rows);
    return NULL;
}

/* What the erlang mode's walk saw from the stub (jit_here). */
static struct {
    int found, n;
    uintptr_t last;   /* its last frame's address: in the stub */
    int link_in_main; /* the chain's first return address, at RBP + 8, lies in this program */
} jit_walk;

static int follow(void)
{
    return 1;
}

__attribute__((noinline)) static int jit_here(void)
{
    uintptr_t b[MAX], sps[MAX];
    struct mt_cfi_jit j = {.follow = follow};
    int n = mt_cfi_backtrace(rows, stack_top(), b, sps, MAX, &j);
    struct dl_find_object o;
    jit_walk.n = n;
    jit_walk.found = n > 0 && j.found;
    if (jit_walk.found) {
        jit_walk.last = b[n - 1];
        jit_walk.link_in_main = _dl_find_object((void *)((const uintptr_t *)j.rbp)[1], &o) == 0;
    }
    return n;
}

static int in_handler;
static void handler(int sig)
{
    (void)sig;
    in_handler = compare_here();
}

int main(void)
{
    printf("cfi_test\n");
    rows = calloc(1, mt_cfi_rows_bytes());
    for (int pass = 0; pass < 2; pass++)
        shapes();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    mt_cfi_unloading();
    shapes();
    struct mt_cfi_rows *kept = rows;
    rows = NULL; /* no cache: every address looked up afresh */
    shapes();
    rows = kept;
    char what[160];
    snprintf(what, sizeof what,
             "%d stacks, each libunwind's frame for frame; none given up (%d given up)", compared,
             gave_up);
    check(compared >= 11 * 8 && differed == 0 && gave_up == 0, what);

    signal(SIGUSR1, handler);
    raise(SIGUSR1);
    check(in_handler == -1, "a stack through a signal frame is given up");

    /* push rbp; mov rbp, rsp; movabs rax, compare_here; call rax; pop rbp; ret: code in no
     * object, with a frame pointer libunwind may follow. */
    unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8, 0,    0,    0,
                            0,    0,    0,    0,    0,    0xff, 0xd0, 0x5d, 0xc3};
    uintptr_t fn = (uintptr_t)compare_here;
    memcpy(code + 6, &fn, sizeof fn);
    void *jit =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int from_jit = 0;
    if (jit != MAP_FAILED) {
        memcpy(jit, code, sizeof code);
        from_jit = ((int (*)(void))jit)();
    }
    check(jit != MAP_FAILED && from_jit == -1,
          "a stack through code in no object with a frame pointer is given up");

    /* The erlang mode's walk ends there instead, with the RBP the chain starts from: the stub's
     * frame, whose return address is main's. */
    uintptr_t walker = (uintptr_t)jit_here;
    memcpy(code + 6, &walker, sizeof walker);
    if (jit != MAP_FAILED) {
        memcpy(jit, code, sizeof code);
        __builtin___clear_cache((char *)jit, (char *)jit + sizeof code);
        ((int (*)(void))jit)();
    }
    check(jit != MAP_FAILED && jit_walk.found && jit_walk.n > 0 &&
              jit_walk.last >= (uintptr_t)jit && jit_walk.last < (uintptr_t)jit + sizeof code &&
              jit_walk.link_in_main,
          "asked for Erlang frames, the walk ends in code in no object, at its RBP");

    /* push rbp; xor ebp, ebp; ...: with RBP 0 there, libunwind ends the stack at that code */
    unsigned char ends[] = {0x55, 0x31, 0xed, 0x48, 0xb8, 0,    0,    0,   0,
                            0,    0,    0,    0,    0xff, 0xd0, 0x5d, 0xc3};
    memcpy(ends + 5, &fn, sizeof fn);
    int before = compared, ended = -1;
    if (jit != MAP_FAILED) {
        memcpy(jit, ends, sizeof ends);
        __builtin___clear_cache((char *)jit, (char *)jit + sizeof ends);
        ended = ((int (*)(void))jit)();
    }
    check(ended > 0 && compared == before + 1 && !differed,
          "a stack through code in no object without a frame pointer ends there, as libunwind's");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
