/* scrub.c: the NIFs that zero the schedulers' stacks before a mark (readers.h): scrub on a
 * normal scheduler, scrub_dirty_cpu and scrub_dirty_io on the dirty ones.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "mark/beam_regs.h"
#include "mark/scrub.h"
#include "nif/readers.h"
#include "nif/terms.h"

/* scrub(binary, float) -> ok: the calling scheduler's stack below this NIF zeroed (reach.h), so
 * that the frames it lays there as it goes back to sleep do not keep what a NIF that ran on it
 * left; and where its float registers lie noted (beam_regs.h), by the float its caller computed
 * just before. The binary, which its caller built on this scheduler just before
 * (src/mtrace_node.erl), is not read. */
ERL_NIF_TERM mt_nif_scrub(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    double f0;
    if (!enif_is_binary(env, argv[0]) || !enif_get_double(env, argv[1], &f0))
        return enif_make_badarg(env);
    mt_beam_regs_note((const uint64_t *)argv, (unsigned)argc, f0);
    mt_scrub();
    return mt_atom_ok;
}

/* scrub_dirty_cpu(round, n), scrub_dirty_io(round, n) -> ok: the calling dirty scheduler's stack
 * zeroed as scrub's, once n calls of the same round are in at once, or after 100 ms. No process
 * can be bound to a dirty scheduler, but calls that wait for one another each hold one of their
 * own: n calls, n being how many schedulers there are of the kind, reach every one that is free.
 * A later round takes the gate over; the calls of the earlier one go on. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t in;
    uint64_t round;
    unsigned calls;
};

static struct gate cpu_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
static struct gate io_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static ERL_NIF_TERM scrub_at(ErlNifEnv *env, const ERL_NIF_TERM argv[], struct gate *g)
{
    ErlNifUInt64 round;
    unsigned n;
    if (!enif_get_uint64(env, argv[0], &round) || !enif_get_uint(env, argv[1], &n))
        return enif_make_badarg(env);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&g->lock);
    if (g->round != round) {
        g->round = round;
        g->calls = 0;
    }
    g->calls++;
    pthread_cond_broadcast(&g->in);
    while (g->round == round && g->calls < n &&
           pthread_cond_timedwait(&g->in, &g->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&g->lock);
    mt_scrub();
    return mt_atom_ok;
}

ERL_NIF_TERM mt_nif_scrub_dirty_cpu(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return scrub_at(env, argv, &cpu_gate);
}

ERL_NIF_TERM mt_nif_scrub_dirty_io(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return scrub_at(env, argv, &io_gate);
}
