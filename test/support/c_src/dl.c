/* dl.c: a test NIF that loads plain shared libraries, calls their allocating functions by name
 * and unloads them, so that tests can symbolize stacks through libraries that come and go. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <erl_nif.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

static ERL_NIF_TERM error(ErlNifEnv *env)
{
    const char *why = dlerror();
    return enif_make_tuple2(env, enif_make_atom(env, "error"),
                            enif_make_string(env, why ? why : "?", ERL_NIF_LATIN1));
}

/* open(path) -> {:ok, handle, load_bias} | {:error, charlist} */
static ERL_NIF_TERM open_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    char path[4096];
    struct link_map *map;
    (void)argc;
    if (enif_get_string(env, argv[0], path, sizeof path, ERL_NIF_LATIN1) <= 0)
        return enif_make_badarg(env);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0) return error(env);
    return enif_make_tuple3(env, enif_make_atom(env, "ok"), enif_make_uint64(env, (uintptr_t)h),
                            enif_make_uint64(env, map->l_addr));
}

/* call(handle, symbol, size) -> address of the block the function allocated */
static ERL_NIF_TERM call_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 h, size;
    char name[256];
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &h) ||
        enif_get_string(env, argv[1], name, sizeof name, ERL_NIF_LATIN1) <= 0 ||
        !enif_get_uint64(env, argv[2], &size))
        return enif_make_badarg(env);
    void *(*fn)(size_t) = (void *(*)(size_t))dlsym((void *)h, name);
    if (!fn) return error(env);
    return enif_make_uint64(env, (uintptr_t)fn(size));
}

static ERL_NIF_TERM close_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 h;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &h)) return enif_make_badarg(env);
    return dlclose((void *)h) == 0 ? enif_make_atom(env, "ok") : error(env);
}

/* libc's dlclose by its own handle, past mtrace's interposer: an unload that mtrace does not
 * see happen, as glibc's own unloads of its gconv and NSS modules are. */
static ERL_NIF_TERM close_unseen_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 h;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &h)) return enif_make_badarg(env);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    int (*libc_dlclose)(void *) = libc ? (int (*)(void *))dlsym(libc, "dlclose") : NULL;
    if (!libc_dlclose) return error(env);
    int rc = libc_dlclose((void *)h);
    libc_dlclose(libc);
    return rc == 0 ? enif_make_atom(env, "ok") : error(env);
}

static ERL_NIF_TERM free_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 p;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &p)) return enif_make_badarg(env);
    free((void *)p);
    return enif_make_atom(env, "ok");
}

static ErlNifFunc funcs[] = {
    {"open", 1, open_nif, 0},   {"call", 3, call_nif, 0},
    {"close", 1, close_nif, 0}, {"close_unseen", 1, close_unseen_nif, 0},
    {"free", 1, free_nif, 0},
};

ERL_NIF_INIT(Elixir.Mtrace.Test.Dl, funcs, NULL, NULL, NULL, NULL)
