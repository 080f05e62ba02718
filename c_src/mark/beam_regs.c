/* beam_regs.c: the JIT's float registers on each scheduler's stack (see beam_regs.h). */
#define _GNU_SOURCE
#include "mark/beam_regs.h"

#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS 1024 /* ERTS_MAX_NO_OF_SCHEDULERS */
#define LINE 64

/* One scheduler's float registers: its thread, thread pointer and F0. tid 0: a free slot; a
 * slot is claimed by its tid, then its other fields are written (published by f0). */
static struct slot {
    pid_t tid;
    uintptr_t tp, f0;
} slots[SLOTS];

int mt_beam_regs_note(const uint64_t *argv, unsigned arity, double f0)
{
    uint64_t bits;
    memcpy(&bits, &f0, sizeof bits);
    /* the thread pointer as the world records it for a stopped thread (world.h) */
    uintptr_t tp = (uintptr_t)pthread_self(), f = 0, here = (uintptr_t)__builtin_frame_address(0);
    /* argv on this thread's own stack, above this frame: the words up to the thread pointer are
     * then that stack's */
    if ((uintptr_t)argv <= here || (uintptr_t)argv >= tp) return -1;
    for (size_t k = arity; k < MT_BEAM_REGS_SEARCH && (uintptr_t)(argv + k + 1) <= tp; k++) {
        uintptr_t at = (uintptr_t)(argv + k);
        if (at % LINE == 0 && argv[k] == bits) {
            f = at;
            break;
        }
    }
    if (!f || tp - f > MT_BEAM_REGS_NEAR_TOP || tp - f < MT_BEAM_FREGS * 8) return -1;
    pid_t self = (pid_t)syscall(SYS_gettid);
    for (size_t i = 0; i < SLOTS; i++) {
        pid_t seen = __atomic_load_n(&slots[i].tid, __ATOMIC_ACQUIRE), none = 0;
        if (seen != self &&
            (seen || !__atomic_compare_exchange_n(&slots[i].tid, &none, self, 0, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_ACQUIRE)))
            continue;
        slots[i].tp = tp;
        __atomic_store_n(&slots[i].f0, f, __ATOMIC_RELEASE);
        return 0;
    }
    return -1;
}

int mt_beam_regs_gaps(struct mt_beam_gaps *g, const struct mt_world *world)
{
    for (size_t i = 0; i < SLOTS; i++) {
        pid_t tid = __atomic_load_n(&slots[i].tid, __ATOMIC_ACQUIRE);
        uintptr_t f = __atomic_load_n(&slots[i].f0, __ATOMIC_ACQUIRE);
        if (!tid || !f) continue;
        for (size_t j = 0; j < world->n; j++) {
            const struct mt_world_thread *t = &world->t[j];
            if (t->tid != tid || !t->stopped || t->tp != slots[i].tp) continue;
            if (mt_beam_gap_add(g, f, f + MT_BEAM_FREGS * 8, MT_BEAM_GAP_FREGS) != 0) return -1;
            break;
        }
    }
    return 0;
}
