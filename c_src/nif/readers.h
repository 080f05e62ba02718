/* readers.h: the NIF's functions, which nif.c's table names, in one file a family: live.c (the
 * live heap: olds, sites, stacks_matching, frames), lost.c (the mark: leaks, why, whys), state.c
 * (stats, reset, heap, heaps_learn, attach, detach), scrub.c (the schedulers' stacks).
 *
 * Each runs as a NIF, in the env it is given (nif.c's table says which on a dirty scheduler),
 * and holds the recorder's guard while it runs, so that what it allocates (its terms, its copies
 * of the table, the symbolizer's caches) is not traced. Any thread may call any of them at once:
 * they read the table through copies and snapshots. Each returns its answer, or badarg for
 * arguments it does not take (lib/mtrace/nif.ex states their types).
 */
#ifndef MTRACE_NIF_READERS_H
#define MTRACE_NIF_READERS_H

#include <stdint.h>

#include "nif/nif_api.h"

ERL_NIF_TERM mt_nif_olds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_sites(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_stacks_matching(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_frames(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

ERL_NIF_TERM mt_nif_leaks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_why(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_whys(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

ERL_NIF_TERM mt_nif_stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_heap_census(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_heaps_learn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_attach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_detach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

ERL_NIF_TERM mt_nif_scrub(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_scrub_dirty_cpu(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);
ERL_NIF_TERM mt_nif_scrub_dirty_io(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]);

/* When reset last emptied the table (CLOCK_MONOTONIC_COARSE), 0 if never: the blocks live then
 * have no record, so nothing can be called lost. */
uint64_t mt_nif_last_reset(void);

#endif
