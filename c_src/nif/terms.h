/* terms.h: the terms every family of NIFs makes (readers.h): the atoms, made once by
 * mt_nif_terms_load (the library's load and upgrade, before any NIF runs; read-only after, by
 * any thread), a C string as a binary, a map from names and values. The makers allocate in the
 * env they are given only, and return the term.
 */
#ifndef MTRACE_NIF_TERMS_H
#define MTRACE_NIF_TERMS_H

#include <stddef.h>

#include "nif/nif_api.h"

extern ERL_NIF_TERM mt_atom_true, mt_atom_false, mt_atom_nil, mt_atom_not_preloaded, mt_atom_error,
    mt_atom_sampling, mt_atom_dropped, mt_atom_reset, mt_atom_enomem, mt_atom_maybe, mt_atom_erlang,
    mt_atom_attached, mt_atom_ok;

void mt_nif_terms_load(ErlNifEnv *env);

/* s, NUL-terminated, as a binary. */
ERL_NIF_TERM mt_nif_string(ErlNifEnv *env, const char *s);

/* A map of the NIF's answers, from names and values: the first 32 of f[0 .. n). */
struct mt_nif_field {
    const char *name;
    ERL_NIF_TERM value;
};

ERL_NIF_TERM mt_nif_map(ErlNifEnv *env, const struct mt_nif_field *f, size_t n);

#endif
