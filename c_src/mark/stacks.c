/* stacks.c: the threads' stacks in a mark (see stacks.h). */
#define _GNU_SOURCE
#include "mark/stacks.h"

#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/platform.h"
#include "base/proc.h"
#include "record/beam_frames.h"

/* Where the live part of the stopped thread t's stack starts, when [lo, hi) is that stack; 0
 * when it is not. A thread's stack holds its stack pointer (the live part starts there, less the
 * red zone), unless the thread runs code of no loaded object with its stack pointer outside the
 * mapping of its thread pointer (glibc keeps a thread's struct pthread at its stack's top): then
 * the stack pointer's mapping is read whole, and in the BEAM (beam, where the JIT runs Erlang
 * code on each process's stack, in the VM's memory) the thread's own stack is live from the
 * JIT's register block up; elsewhere it is read whole too. */
uintptr_t mt_stacks_thread_live(const struct mt_world_thread *t, uintptr_t lo, uintptr_t hi,
                                int beam)
{
    if (t->tid <= 0 || !t->stopped) return 0;
    int sp_in = t->sp >= lo && t->sp < hi, tp_in = t->tp >= lo && t->tp < hi;
    if (sp_in != tp_in && !mt_beam_in_object(t->regs[MT_WORLD_RIP]))
        return tp_in && beam ? mt_beam_jit_stack(t->regs[MT_WORLD_RBX], lo, hi) : 0;
    return sp_in ? (t->sp - MT_RED_ZONE > lo ? t->sp - MT_RED_ZONE : lo) : 0;
}

/* Where a stack mapping's live part starts: that of the thread it belongs to, if that thread
 * stopped (mt_stacks_thread_live; the BEAM is known by its process table, beam_heaps.h); lo when it
 * is no known thread's stack (a thread that did not stop, or memory that is no stack: the whole
 * mapping is a root). */
uintptr_t mt_stacks_live_from(const struct mt_stacks *s, uintptr_t lo, uintptr_t hi)
{
    if (s->self_sp >= lo && s->self_sp < hi) return s->self_sp;
    for (size_t i = 0; i < s->world->n; i++) {
        uintptr_t from = mt_stacks_thread_live(&s->world->t[i], lo, hi, s->beam);
        if (from) return from;
    }
    return lo;
}

/* tcbhead_t's words: the descriptor itself at 0 and 2, the two guards at 5 and 6 */
#define TCB_WORDS 7

/* Whether pd is a descriptor of this process's threads: its own address in its first and third
 * words, and the process's two guards (random, 128 bits) in its sixth and seventh. */
static int tcb_at(const struct mt_stacks *t, uintptr_t pd, const uintptr_t *head)
{
    return head[0] == pd && head[2] == pd && head[5] == t->guard[0] && head[6] == t->guard[1];
}

static int tcb_read(const struct mt_stacks *t, uintptr_t pd)
{
    uintptr_t head[TCB_WORDS];
    return mt_proc_read(pd, head, sizeof head) == 0 && tcb_at(t, pd, head);
}

/* The hi of the readable and writable mapping that holds a, or 0. */
static uintptr_t mapping_top(const struct mt_stacks *s, uintptr_t a)
{
    struct mt_mapping m;
    return mt_maps_find(s->maps, a, &m) && m.readable && m.writable ? m.hi : 0;
}

/* The distance below a stack's top at which struct pthread lies, found where the calling thread
 * cannot show it (the main thread's lies outside its stack): at the top of each anonymous mapping
 * that holds no live thread's stack, a descriptor of this process's (tcb_at; the tid at the
 * calling thread's offset 0 or -1), at one distance in every such mapping where there is one. 0
 * when none is found, or two disagree. */
static uintptr_t tcb_found(const struct mt_stacks *t)
{
    enum { SEARCH = 16384, STEP = 16 };
    static uintptr_t top[SEARCH / sizeof(uintptr_t)];
    uintptr_t found = 0;
    struct mt_mapping m;
    for (size_t at = 0; mt_maps_next(t->maps, &at, &m);) {
        if (!m.readable || !m.writable || m.path_len || m.hi - m.lo <= 4 * SEARCH ||
            mt_stacks_live_from(t, m.lo, m.hi) != m.lo || mt_proc_read(m.hi - SEARCH, top, SEARCH))
            continue;
        size_t past = t->tid_at + sizeof(int32_t);
        if (past < TCB_WORDS * sizeof(uintptr_t)) past = TCB_WORDS * sizeof(uintptr_t);
        for (uintptr_t below = STEP; below <= SEARCH - past; below += STEP) {
            uintptr_t pd = m.hi - below;
            const uintptr_t *head = &top[(SEARCH - below) / sizeof *top];
            int32_t tid;
            memcpy(&tid, (const char *)head + t->tid_at, sizeof tid);
            if (!tcb_at(t, pd, head) || tid > 0 || tid < -1) continue;
            if (found && found != below) return 0;
            found = below;
        }
    }
    return found;
}

/* own_hi: the top of the calling thread's stack's mapping at exit (0: from its stack pointer).
 * Returns 1 when the distance is learnt and every stopped thread agrees with it. */
static int learn(struct mt_stacks *s, uintptr_t own_hi)
{
    struct mt_stacks *t = s;
    uintptr_t pd = (uintptr_t)pthread_self(), top = mapping_top(s, pd);
    uint32_t words[512], tid = (uint32_t)syscall(SYS_gettid);
    if (mt_proc_read(pd, words, sizeof words)) return 0;
    const uintptr_t *head = (const uintptr_t *)words;
    t->guard[0] = head[5];
    t->guard[1] = head[6];
    if (!(t->guard[0] | t->guard[1]) || !tcb_at(t, pd, head)) return 0;
    for (size_t i = 2 * TCB_WORDS; i < 512 && !t->tid_at; i++)
        if (words[i] == tid) t->tid_at = i * sizeof *words;
    if (!t->tid_at) return 0;
    /* a thread glibc started holds its descriptor in its stack's mapping, with its stack */
    uintptr_t my_top = own_hi ? own_hi : mapping_top(s, s->self_sp);
    int in_stack = top && top - pd <= 65536 && my_top == top;
    t->below_top = in_stack ? top - pd : tcb_found(t);
    if (!t->below_top) return 0;
    for (size_t i = 0; i < s->world->n; i++) {
        const struct mt_world_thread *w = &s->world->t[i];
        uint32_t its = 0;
        if (w->tid <= 0 || !w->stopped || mapping_top(s, w->tp) != w->tp + t->below_top) continue;
        if (!tcb_read(t, w->tp) || mt_proc_read(w->tp + t->tid_at, &its, sizeof its) ||
            its != (uint32_t)w->tid)
            return 0;
    }
    return 1;
}

void mt_stacks_learn(struct mt_stacks *s, uintptr_t own_hi)
{
    s->below_top = s->tid_at = 0;
    if (!learn(s, own_hi)) s->below_top = 0;
}

/* Whether [lo, hi), a mapping that holds no live thread's stack pointer, is an exited thread's
 * stack, and where its descriptor (struct pthread) lies: below it, its stack and static TLS are
 * dead. Before the join, the descriptor holds the thread's result, which the join returns, and is
 * read whole. Once joined (tid -1), the stack waits in glibc's cache for the next thread and the
 * descriptor's words are what the thread left (a block it freed as it exited goes to the next
 * malloc), but for the DTV (its second word), which glibc keeps and gives the next thread. */
int mt_stacks_exited(const struct mt_stacks *t, uintptr_t lo, uintptr_t hi, uintptr_t *pd,
                     int *joined)
{
    int32_t tid = 0;
    *pd = hi - t->below_top;
    if (!t->below_top || hi - lo <= t->below_top || !tcb_read(t, *pd) ||
        mt_proc_read(*pd + t->tid_at, &tid, sizeof tid) || tid > 0 || tid < -1)
        return 0;
    *joined = tid < 0;
    return 1;
}
