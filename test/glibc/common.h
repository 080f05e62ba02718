/* common.h: what the t_*.c programs share. Each program prints only what a caller can observe of
 * an allocation (NULL or not, errno, alignment, usable size against the request, contents), never
 * an address, so that a run under the preload must print exactly what a run without it prints.
 * A violated expectation prints a FAIL line and makes the exit status 1. */
#ifndef T_COMMON_H
#define T_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* No call sets errno to this: an errno still equal to it afterwards was left alone. */
#define SENTINEL 12345

/* What malloc, calloc and realloc promise. */
#define MAX_ALIGN _Alignof(max_align_t)

/* Calls with errno preset to SENTINEL; `err` then holds what the call left in errno. */
#define CALL(err, expr) (errno = SENTINEL, (expr), (err) = errno)

static int failures;

static inline void expect(int ok, const char *what)
{
    if (!ok) {
        printf("FAIL: %s\n", what);
        failures++;
    }
}

static inline int finish(void)
{
    printf("%s\n", failures ? "some checks failed" : "all checks passed");
    fflush(stdout);
    return failures ? 1 : 0;
}

/* A size the compiler cannot see: it neither folds the call nor rejects a huge constant. */
static inline size_t opaque(size_t v)
{
    volatile size_t x = v;
    return x;
}

static inline const char *errname(int e)
{
    switch (e) {
    case SENTINEL:
        return "unchanged";
    case 0:
        return "0";
    case ENOMEM:
        return "ENOMEM";
    case EINVAL:
        return "EINVAL";
    case EAGAIN:
        return "EAGAIN";
    default: {
        static char buf[32];
        snprintf(buf, sizeof buf, "%d", e);
        return buf;
    }
    }
}

static inline size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* One line about a block returned for a request of `want` bytes aligned to `align`. */
static inline void show(const char *label, const void *p, int err, size_t want, size_t align)
{
    printf("%s: ", label);
    if (!p) {
        printf("NULL errno=%s\n", errname(err));
        return;
    }
    int big_enough = malloc_usable_size((void *)p) >= want;
    int aligned = (uintptr_t)p % align == 0;
    printf("block usable>=%zu:%s aligned%zu:%s errno=%s\n", want, big_enough ? "yes" : "NO", align,
           aligned ? "yes" : "NO", errname(err));
    expect(big_enough, "usable size below the request");
    expect(aligned, "misaligned block");
}

/* Expects a block, with errno untouched. */
static inline void expect_block(const char *label, const void *p, int err, size_t want,
                                size_t align)
{
    show(label, p, err, want, align);
    expect(p != NULL, label);
    expect(err == SENTINEL, "errno changed by a successful call");
}

/* Expects NULL with errno set to `want_err`. */
static inline void expect_null(const char *label, const void *p, int err, int want_err)
{
    show(label, p, err, 0, 1);
    expect(p == NULL && err == want_err, label);
}

static inline void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)(seed + i * 31u + (i >> 8));
}

static inline int intact(const void *p, size_t n, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)(seed + i * 31u + (i >> 8))) return 0;
    return 1;
}

static inline int all_zero(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i]) return 0;
    return 1;
}

#endif
