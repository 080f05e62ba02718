/* terms.c: the terms every family of NIFs makes (terms.h). */
#include "nif/terms.h"

#include <string.h>

ERL_NIF_TERM mt_atom_true, mt_atom_false, mt_atom_nil, mt_atom_not_preloaded, mt_atom_error,
    mt_atom_sampling, mt_atom_dropped, mt_atom_reset, mt_atom_enomem, mt_atom_maybe, mt_atom_erlang,
    mt_atom_attached, mt_atom_ok;

void mt_nif_terms_load(ErlNifEnv *env)
{
    mt_atom_true = enif_make_atom(env, "true");
    mt_atom_false = enif_make_atom(env, "false");
    mt_atom_nil = enif_make_atom(env, "nil");
    mt_atom_not_preloaded = enif_make_atom(env, "not_preloaded");
    mt_atom_error = enif_make_atom(env, "error");
    mt_atom_sampling = enif_make_atom(env, "sampling");
    mt_atom_dropped = enif_make_atom(env, "dropped");
    mt_atom_reset = enif_make_atom(env, "reset");
    mt_atom_enomem = enif_make_atom(env, "enomem");
    mt_atom_maybe = enif_make_atom(env, "maybe");
    mt_atom_erlang = enif_make_atom(env, "erlang");
    mt_atom_attached = enif_make_atom(env, "attached");
    mt_atom_ok = enif_make_atom(env, "ok");
}

ERL_NIF_TERM mt_nif_string(ErlNifEnv *env, const char *s)
{
    ERL_NIF_TERM t;
    size_t n = strlen(s);
    memcpy(enif_make_new_binary(env, n, &t), s, n);
    return t;
}

ERL_NIF_TERM mt_nif_map(ErlNifEnv *env, const struct mt_nif_field *f, size_t n)
{
    ERL_NIF_TERM keys[32], vals[32], map;
    if (n > 32) n = 32;
    for (size_t i = 0; i < n; i++) {
        keys[i] = enif_make_atom(env, f[i].name);
        vals[i] = f[i].value;
    }
    enif_make_map_from_arrays(env, keys, vals, n, &map);
    return map;
}
