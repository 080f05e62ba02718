/* nif.c: the Erlang NIF half of mtrace.so, behind the modules mtrace_nif (src/) and Mtrace (the
 * NIF API through nif_api.h): the function table, load and upgrade. The functions are in one
 * file a family (readers.h).
 *
 * Every NIF holds the recorder's guard while it runs, so its own allocations (and those of the
 * symbolizer) are not traced.
 */
#define _GNU_SOURCE

#include "mark/beam_vm.h"
#include "mark/scrub.h"
#include "nif/readers.h"
#include "nif/terms.h"

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    mt_nif_terms_load(env);
    ErlNifSysInfo sys;
    enif_system_info(&sys, sizeof sys);
    mt_beam_vm_set(sys.erts_version);
    return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return load(env, priv, info);
}

/* A reader's frames hold the addresses of blocks (its snapshot's, its mark's): once it has made
 * its answer, the dirty scheduler's stack below it is zeroed, so that a mark made from another
 * dirty scheduler does not find them there, in the frames this one sleeps in. */
#define SCRUBBED(reader)                                                                           \
    static ERL_NIF_TERM reader##_scrubbed(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])     \
    {                                                                                              \
        ERL_NIF_TERM result = reader(env, argc, argv);                                             \
        mt_scrub();                                                                                \
        return result;                                                                             \
    }
SCRUBBED(mt_nif_olds)
SCRUBBED(mt_nif_sites)
SCRUBBED(mt_nif_leaks)
SCRUBBED(mt_nif_heap_census)
SCRUBBED(mt_nif_why)
SCRUBBED(mt_nif_whys)

static ErlNifFunc funcs[] = {
    {"olds_nif", 3, mt_nif_olds_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"sites_nif", 2, mt_nif_sites_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"leaks_nif", 2, mt_nif_leaks_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"frames_nif", 2, mt_nif_frames, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stacks_matching_nif", 2, mt_nif_stacks_matching, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stats_nif", 0, mt_nif_stats, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"reset_nif", 0, mt_nif_reset, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"heap_nif", 0, mt_nif_heap_census_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"attach_nif", 1, mt_nif_attach, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"detach_nif", 0, mt_nif_detach, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"why_nif", 1, mt_nif_why_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"whys_nif", 1, mt_nif_whys_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"heaps_learn_nif", 3, mt_nif_heaps_learn, 0},
    {"scrub_nif", 2, mt_nif_scrub, 0},
    {"scrub_dirty_cpu_nif", 2, mt_nif_scrub_dirty_cpu, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"scrub_dirty_io_nif", 2, mt_nif_scrub_dirty_io, ERL_NIF_DIRTY_JOB_IO_BOUND},
};

ERL_NIF_INIT(mtrace_nif, funcs, load, NULL, upgrade, NULL)
