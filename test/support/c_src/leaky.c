/* leaky.c: a test NIF that allocates through every function mtrace intercepts, each from a
 * distinctly named function so that the tests can check the stack mtrace recorded.
 * Built -O0 with sibling calls off: a tail call would take the named frame off the stack. */
#define _GNU_SOURCE
#include <erl_nif.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *leaky_cxx_new(size_t n);
void leaky_cxx_delete(void *p);
void *leaky_cxx_widget(size_t n);

#define NAMED __attribute__((noinline, visibility("default")))

NAMED void *leak_malloc(size_t n)
{
    return malloc(n);
}
NAMED void *leak_calloc(size_t n)
{
    return calloc(n, 1);
}
NAMED void *leak_realloc(size_t n)
{
    void *p = malloc(8);
    return p ? realloc(p, n) : NULL;
}
NAMED void *leak_reallocarray(size_t n)
{
    void *p = malloc(8);
    return p ? reallocarray(p, n, 1) : NULL;
}
NAMED void *leak_posix_memalign(size_t n)
{
    void *p = NULL;
    return posix_memalign(&p, 64, n) == 0 ? p : NULL;
}
NAMED void *leak_aligned_alloc(size_t n)
{
    return aligned_alloc(64, n);
}
NAMED void *leak_memalign(size_t n)
{
    return memalign(128, n);
}
NAMED void *leak_valloc(size_t n)
{
    return valloc(n);
}
NAMED void *leak_pvalloc(size_t n)
{
    return pvalloc(n);
}
NAMED void *leak_strdup(size_t n)
{
    char buf[4096];
    size_t len = n - 1 < sizeof buf ? n - 1 : sizeof buf - 1;
    memset(buf, 'x', len);
    buf[len] = '\0';
    return strdup(buf);
}
NAMED void *leak_strndup(size_t n)
{
    static const char text[] =
        "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz";
    return strndup(text, n - 1);
}

/* Through the NIF API: seen only when the VM hands driver_alloc to malloc (+MRe false). */
NAMED void *leak_enif_alloc(size_t n)
{
    return enif_alloc(n);
}

static const struct {
    const char *name;
    void *(*fn)(size_t);
} kinds[] = {
    {"malloc", leak_malloc},
    {"calloc", leak_calloc},
    {"realloc", leak_realloc},
    {"reallocarray", leak_reallocarray},
    {"posix_memalign", leak_posix_memalign},
    {"aligned_alloc", leak_aligned_alloc},
    {"memalign", leak_memalign},
    {"valloc", leak_valloc},
    {"pvalloc", leak_pvalloc},
    {"strdup", leak_strdup},
    {"strndup", leak_strndup},
    {"cxx_new", leaky_cxx_new},
    {"cxx_widget", leaky_cxx_widget},
    {"enif_alloc", leak_enif_alloc},
};

/* alloc(kind, size) -> address */
static ERL_NIF_TERM nif_alloc(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    char kind[32];
    ErlNifUInt64 size;
    (void)argc;
    if (!enif_get_atom(env, argv[0], kind, sizeof kind, ERL_NIF_LATIN1) ||
        !enif_get_uint64(env, argv[1], &size) || size == 0)
        return enif_make_badarg(env);
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, kind) == 0) {
            void *p = kinds[i].fn(size);
            return enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)p);
        }
    return enif_make_badarg(env);
}

/* release(kind, address): free, delete[] for blocks from cxx_new, enif_free for enif_alloc */
static ERL_NIF_TERM nif_release(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    char kind[32];
    ErlNifUInt64 addr;
    (void)argc;
    if (!enif_get_atom(env, argv[0], kind, sizeof kind, ERL_NIF_LATIN1) ||
        !enif_get_uint64(env, argv[1], &addr))
        return enif_make_badarg(env);
    if (strcmp(kind, "cxx_new") == 0)
        leaky_cxx_delete((void *)(uintptr_t)addr);
    else if (strcmp(kind, "enif_alloc") == 0)
        enif_free((void *)(uintptr_t)addr);
    else
        free((void *)(uintptr_t)addr);
    return enif_make_atom(env, "ok");
}

/* A ring of 64 blocks, each freed and allocated again, rounds times: sizes keep the parity of
 * size, which is how the concurrency tests tell a torn record. */
static ERL_NIF_TERM ring(ErlNifEnv *env, const ERL_NIF_TERM argv[], void *(*alloc)(size_t),
                         void (*release)(void *))
{
    unsigned rounds, size;
    if (!enif_get_uint(env, argv[0], &rounds) || !enif_get_uint(env, argv[1], &size))
        return enif_make_badarg(env);
    void *kept[64] = {0};
    for (unsigned i = 0; i < rounds; i++) {
        if (kept[i % 64]) release(kept[i % 64]);
        kept[i % 64] = alloc(size + 2 * (i % 64));
    }
    for (unsigned i = 0; i < 64; i++)
        if (kept[i]) release(kept[i]);
    return enif_make_atom(env, "ok");
}

/* churn(rounds, size): the ring through malloc and free, for the concurrency tests and
 * bench/churn.exs. */
static ERL_NIF_TERM nif_churn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return ring(env, argv, leak_malloc, free);
}

/* enif_churn(rounds, size): the ring through enif_alloc and enif_free, the NIF API's pair
 * (bench/churn.exs). */
static ERL_NIF_TERM nif_enif_churn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return ring(env, argv, leak_enif_alloc, enif_free);
}

/* Two paths to the same call of malloc (leak_malloc's), from the same stack depth: path_a and
 * path_b have the same frame, and two_paths calls them from the same place of its own, so that
 * both calls of malloc have the same return address and stack pointer, the stack cache's key;
 * only frame 2 tells them apart. */
NAMED void *path_a(size_t n)
{
    return leak_malloc(n);
}
NAMED void *path_b(size_t n)
{
    return leak_malloc(n);
}

/* two_paths(rounds, size) -> [a, b]: path_a rounds times (each block freed but the last), then
 * path_b once; the last blocks of each are kept, their addresses returned. */
static ERL_NIF_TERM nif_two_paths(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned rounds, size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &rounds) || !enif_get_uint(env, argv[1], &size) || !rounds)
        return enif_make_badarg(env);
    void *kept[2] = {NULL, NULL};
    for (unsigned i = 0; i <= rounds; i++) {
        void *(*path)(size_t) = i < rounds ? path_a : path_b;
        void *p = path(size);
        if (i + 1 < rounds)
            free(p);
        else
            kept[i < rounds ? 0 : 1] = p;
    }
    return enif_make_list2(env, enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)kept[0]),
                           enif_make_uint64(env, (ErlNifUInt64)(uintptr_t)kept[1]));
}

static ErlNifFunc funcs[] = {
    {"alloc", 2, nif_alloc, 0},
    {"dirty_alloc", 2, nif_alloc, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"release", 2, nif_release, 0},
    {"churn", 2, nif_churn, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"enif_churn", 2, nif_enif_churn, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"two_paths", 2, nif_two_paths, 0 /* both paths in one call: one thread's cache */},
};

/* The module that loads it: Elixir's Mtrace.Test.Leaky, or with -DLEAKY_MODULE=... an Erlang one
 * (test/support/erl/, a node without Elixir). */
#ifndef LEAKY_MODULE
#define LEAKY_MODULE Elixir.Mtrace.Test.Leaky
#endif
/* ERL_NIF_INIT takes its name as written: one macro more expands it first. */
#define LEAKY_INIT(name) ERL_NIF_INIT(name, funcs, NULL, NULL, NULL, NULL)
LEAKY_INIT(LEAKY_MODULE)
