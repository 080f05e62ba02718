/* filter.h: which records a reader (olds/2, the sites of top/2 and diff/2, leaks/1) wants, from
 * the one filter term Mtrace.Options builds for all of them:
 * {min_age_ns, max_age_ns, since_ns, min_size, library | nil, function | nil, erlang | nil}.
 *
 * Contract
 * - mt_filter_get() reads the term in a NIF call; returns 0, or -1 for badarg (then nothing is
 *   held). With a library, a function or an Erlang name it allocates a memo (enif_alloc, one byte
 *   a stack id) that mt_filter_drop() frees; the caller drops every filter it got.
 * - mt_filter_wants() may symbolize (symbols.h: names only for library and erlang, DWARF for
 *   function) and keeps its answer per stack in the memo: one reader's filter, one thread. Never
 *   on the hook path; never while the other threads are stopped (the symbolizer takes locks).
 * - A block without a record (MT_SNAPSHOT_UNRECORDED) has no stack, age or time: only a filter
 *   of size alone wants it.
 */
#ifndef MTRACE_FILTER_H
#define MTRACE_FILTER_H

#include <stddef.h>
#include <stdint.h>

#include "mark/snapshot.h"
#include "nif/nif_api.h"

/* Which records a reader wants: of an age in [min_age_ns, max_age_ns], allocated after
 * since_ns, at least min_size bytes, and with a stack through a library whose path contains
 * `library`, a frame whose (demangled) function name contains `function`, and an Erlang frame
 * whose name ("'Mod':fun/arity", as the perf map writes it) starts with `erlang` (when that ends
 * in a digit, the arity: the whole name), when given. The answer per stack is kept in memo (0:
 * not known yet). */
struct mt_filter {
    uint64_t min_age_ns, max_age_ns, since_ns, min_size;
    char library[1024], function[1024], erlang[1024];
    int has_library, has_function, has_erlang;
    int8_t *memo;
    size_t ids;
};

int mt_filter_get(ErlNifEnv *env, ERL_NIF_TERM term, struct mt_filter *f);
int mt_filter_wants(struct mt_filter *f, const struct mt_snapshot *s, const struct mt_record *r);
/* Whether stack id passes the filter's library, function and erlang (1 when it has none): the one
 * test of them, also for stacks no record holds now (diff/2's marked ones). */
int mt_filter_stack(struct mt_filter *f, uint32_t id);
void mt_filter_drop(struct mt_filter *f);

#endif
