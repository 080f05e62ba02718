/* stacks.h: the threads' stacks in a mark. A thread's frames live above its stack pointer; the
 * words below it are dead, and so is every word of an exited thread's stack. glibc keeps a joined
 * thread's stack mapped for a later thread, and an exited one's until it is joined: their stale
 * words would keep what they pointed to (LeakSanitizer scans live threads' stacks only).
 *
 * glibc's struct pthread lies at a stack's top, as far below it in every stack of the process (the
 * static TLS block's size), its first and third words pointing to it; the kernel clears its tid
 * when the thread exits, and glibc makes it -1 once the thread is joined. The tid's offset is
 * learnt from the calling thread's descriptor, the distance from its stack's mapping (or, for the
 * main thread, from the exited stacks themselves), and every stopped thread's must agree; else no
 * stack is taken for dead.
 *
 * Contract
 * - With the other threads stopped (world.h): memory is read with mt_proc_read() only; nothing
 *   allocates or takes a lock. mt_stacks_learn() uses a static buffer: one mark at a time (the
 *   world's own lock serializes them).
 */
#ifndef MTRACE_STACKS_H
#define MTRACE_STACKS_H

#include <stddef.h>
#include <stdint.h>

#include "base/proc.h"
#include "mark/world.h"

struct mt_stacks {
    const struct mt_world *world; /* the stopped threads */
    const struct mt_maps *maps;   /* the process's mappings, read while they were stopped */
    uintptr_t self_sp;            /* the calling thread's stack pointer; 0 at exit */
    int beam;                     /* the VM's process table is known (beam_heaps.h) */
    /* learnt by mt_stacks_learn(): */
    uintptr_t below_top; /* where struct pthread lies below a stack's top; 0: not learnt */
    size_t tid_at;       /* its tid's offset */
    uintptr_t guard[2];  /* the stack and pointer guards, which glibc copies into every thread's */
};

/* Where the live part of the stopped thread t's stack starts, when [lo, hi) is that stack; 0
 * when it is not. beam: the JIT runs Erlang code on each process's stack (beam_frames.h). */
uintptr_t mt_stacks_thread_live(const struct mt_world_thread *t, uintptr_t lo, uintptr_t hi,
                                int beam);

/* Where the mapping [lo, hi)'s live part starts: that of the stopped thread (or the caller) whose
 * stack it is; lo when it is no known thread's stack (the whole mapping is a root). */
uintptr_t mt_stacks_live_from(const struct mt_stacks *s, uintptr_t lo, uintptr_t hi);

/* Learns where the threads' descriptors lie (s->below_top stays 0 when it cannot be known).
 * own_hi: the top of the calling thread's stack's mapping at exit (0: from its stack pointer). */
void mt_stacks_learn(struct mt_stacks *s, uintptr_t own_hi);

/* Whether [lo, hi), a mapping that holds no live thread's stack pointer, is an exited thread's
 * stack: 1, with its descriptor's address in *pd and whether it was joined in *joined. */
int mt_stacks_exited(const struct mt_stacks *s, uintptr_t lo, uintptr_t hi, uintptr_t *pd,
                     int *joined);

#endif
