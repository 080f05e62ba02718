/* recorder.h: the narrow interface between the hooks and everything mtrace keeps.
 *
 * Contract
 * - Hook side (mt_enter ... mt_*_done): called on the allocation path of any thread. These calls
 *   never allocate, print, call erl_nif or symbolize, and never change errno; they take no lock
 *   but the table's turn, when a record finds the table full and it must grow (table.h). The
 *   stack is unwound before any table slot is taken, so no slot is owned while unwinding.
 * - mt_enter() returns nonzero when the call is to be recorded: the thread-local guard is then
 *   held and exactly one *_done/mt_forget call must follow. It returns 0 when the thread is
 *   already inside mtrace (libunwind or the loader allocating, a signal handler interrupting a
 *   hook, the NIF's own work): the hook then only forwards, and the call is counted as untraced.
 * - The first mt_enter() of the process initialises everything (configuration, table, stacks)
 *   from mmap'd memory. A library that is loaded but never called as the allocator (dlopen'd as
 *   a NIF only) initialises nothing, and mt_active() says so.
 * - Reader side (mt_stats_read, mt_guard_*): any thread, any time; they may not be called from a
 *   hook.
 * - Without LD_PRELOAD, a program may call the hook side directly with pointers of its own: the
 *   recorder never dereferences a recorded address.
 */
#ifndef MTRACE_RECORDER_H
#define MTRACE_RECORDER_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/config.h"
#include "base/platform.h"
#include "record/hooklist.h"
#include "record/stack.h"
#include "record/table.h"

/* The call site of a hook, expanded inside the hook itself. Frame 0 is the hook's entry + 1 (the
 * symbolizer looks up return address - 1). Hooks are built with frame pointers, so the caller's
 * stack pointer at the call is the hook's frame address + 16. */
#define MT_SITE(hook)                                                                              \
    ((struct mt_site){(uintptr_t)&hook + 1, (uintptr_t)__builtin_return_address(0),                \
                      (uintptr_t)__builtin_frame_address(0) + 16})

#define MT_KIND(name, kind) kind,
enum mt_kind {
    MT_FOR_EACH_HOOK(MT_KIND) MT_FOR_EACH_NIF_HOOK(MT_KIND)
        MT_TRACK, /* mtrace_track and mtrace_untrack (mtrace.h): the program's own resources */
    MT_UNTRACK,
    MT_RESOURCE_DTOR,  /* a resource's end: the VM ran its type's destructor (nif_hooks.h) */
    MT_EXTENDED_ALLOC, /* the allocator's own API (extended.h): its allocations */
    MT_EXTENDED_FREE,
    MT_EXTENDED_REALLOC, /* reallocations, and resizes in place */
    MT_KINDS
};
#undef MT_KIND
/* The malloc family's kinds are the first MT_HOOKS. */
#define MT_HOOKS MT_ENIF_ALLOC

extern const char *const mt_kind_names[MT_KINDS];

/* Since when the records may miss live blocks because recording began over a running process:
 * 0 when it began with the process (preloaded) or never did, else the CLOCK_MONOTONIC_COARSE time
 * of the last attach (attach.h sets it). Blocks live before it may have no record (allocated
 * before the attach, or while detached), and a record made before the last detach may stand for
 * a block freed since. Any thread, lock-free. */
void mt_records_partial(uint64_t since_ns);
uint64_t mt_records_partial_since(void);

/* Initialises the recorder now rather than at the first hook call (so that configuration errors
 * show even in a program that never allocates). Returns nonzero when recording. */
int mt_start(void);

/* Called at load by a copy that is not the process's malloc: its hooks, if something calls them
 * directly (a debugger's call, dlsym on the copy's handle), forward to glibc and record nothing
 * instead of starting the recorder with whatever configuration is at hand; only mt_start (an
 * attach) starts it. */
void mt_inert(void);

struct mt_stats {
    uint64_t calls[MT_KINDS];
    uint64_t untraced;        /* calls forwarded unrecorded because the thread was inside mtrace */
    uint64_t dropped;         /* allocations not recorded: no free slot in their probe window */
    uint64_t stacks_dropped;  /* allocations recorded without a stack: the stack table was full */
    uint64_t stale_replaced;  /* records replaced because their address was allocated again */
    uint64_t untracked_frees; /* frees of pointers with no record (dropped or untraced blocks) */
    uint64_t sampled;         /* allocations chosen by sampling (MTRACE_SAMPLE), 0 without it */
    uint64_t missed_frees;    /* records removed because glibc's heap holds their block free */
};

/* The common cases of mt_enter, mt_alloc_done and mt_forget are inline in the hooks, so that a
 * call that records nothing (most calls, when sampling) costs a few loads and stores of this
 * thread's own state and no call into the recorder; their other cases, and everything else, are
 * in recorder.c. The hot state is one thread-local struct: one address to find per hook. */
#define MT_TLS __thread __attribute__((tls_model("initial-exec")))
#define MT_HIDDEN __attribute__((visibility("hidden")))

struct mt_thread {
    int guard;               /* nonzero while the thread is inside mtrace */
    int shared;              /* counts is shared (threads past their TLS destructors): atomic */
    struct mt_stats *counts; /* the thread's counters; NULL before its first call */
    int64_t sample_left;     /* bytes to allocate before the next sampled block */
};

extern MT_TLS struct mt_thread mt_thread MT_HIDDEN;

/* Counts one event on the calling thread's counters: a plain add, since no other thread writes
 * them, unless they are shared. */
static inline void mt_count(uint64_t *c)
{
    if (__builtin_expect(mt_thread.shared, 0))
        __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
    else
        __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

int mt_enter_slow(enum mt_kind kind);

static inline int mt_enter(enum mt_kind kind)
{
    if (__builtin_expect(mt_thread.guard || !mt_thread.counts, 0)) return mt_enter_slow(kind);
    mt_thread.guard = 1;
    mt_count(&mt_thread.counts->calls[kind]);
    return 1;
}

/* mt_alloc_done when the block may be recorded: the sampling countdown (already charged with
 * size) ran out, sampling is off, or p is NULL or a tracked key. */
void mt_alloc_slow(void *p, size_t size, const struct mt_site *site);

/* After the real allocation, when sampling leaves p out: charges the countdown with size and, if
 * it has not run out, releases the guard and returns 1. Else mt_alloc_slow must follow. A heap
 * pointer is positive as a signed number; NULL and tracked keys (MT_TRACK_BIT) are not. */
static inline int mt_alloc_skip(void *p, size_t size)
{
    if (mt_config.sample && (intptr_t)p > 0 && (mt_thread.sample_left -= (int64_t)size) > 0) {
        mt_thread.guard = 0;
        return 1;
    }
    return 0;
}

/* After mt_enter, for a call that is counted and records nothing. Releases the guard. */
static inline void mt_leave(void)
{
    mt_thread.guard = 0;
}

/* mt_alloc_slow for a block the VM's allocator served through the NIF API (nif_hooks.h): its
 * record says so (mt_record.vm). Sampling charges it as any block: mt_alloc_skip first. */
void mt_alloc_vm(void *p, size_t size, const struct mt_site *site);
/* After the real allocation: records p (when not NULL) with size and the stack seen from site,
 * or with sampling only when its countdown runs out. Releases the guard. */
static inline void mt_alloc_done(void *p, size_t size, const struct mt_site *site)
{
    if (!mt_alloc_skip(p, size)) mt_alloc_slow(p, size, site);
}

/* The bytes of glibc's block at p the program may use: its chunk less the header, and for a chunk
 * in a heap, plus the next chunk's first word. */
static inline size_t mt_usable(const void *p)
{
    size_t head = ((const size_t *)p)[-1];
    return (head & ~(size_t)MT_CHUNK_FLAGS) - (head & MT_CHUNK_MMAPPED ? MT_CHUNK_HDR : 8);
}

/* After the real allocation, before the program has the block: zeroes its bytes from `from` (what
 * a realloc kept) to its usable end, at most MTRACE_CLEAR of them. What a chunk held before (a
 * freed block's pointers, glibc's own links) would otherwise read to the mark as the program's
 * words, in bytes the program has not written yet or never will (a struct's padding, a sockaddr's
 * unused tail): the conservative mark would keep whatever they point to. mmapped chunks come
 * zeroed from the kernel. NULL: nothing. Never allocates; errno untouched. */
static inline void mt_clear(void *p, size_t from)
{
    if (!p || !mt_config.clear || (((const size_t *)p)[-1] & MT_CHUNK_MMAPPED)) return;
    size_t usable = mt_usable(p);
    if (from >= usable) return;
    size_t n = usable - from;
    __builtin_memset((char *)p + from, 0, n < mt_config.clear ? n : mt_config.clear);
}

/* mt_forget when reports keep totals (account.h), or p is NULL. */
void mt_forget_slow(void *p);

/* Before the real free: removes p's record. Releases the guard. */
static inline void mt_forget(void *p)
{
    if (__builtin_expect(mt_config.account, 0) || !p) {
        mt_forget_slow(p);
        return;
    }
    if (!mt_table_may_hold((uintptr_t)p) || !mt_table_remove((uintptr_t)p, NULL))
        mt_count(&mt_thread.counts->untracked_frees);
    mt_thread.guard = 0;
}

/* realloc family (and the allocator's own frees, extended.h), before the real call: takes p's
 * record out (so no other thread can lose a record at p once the real call frees it). Returns 1
 * when there was one. Keeps the guard. */
int mt_take(void *p, struct mt_record *old);

/* realloc family, after the real call: q != NULL is recorded like a new allocation; q == NULL
 * with keep_old set (the old block is still live) puts old back. Releases the guard. */
void mt_realloc_done(void *q, size_t size, const struct mt_site *site, int keep_old,
                     const struct mt_record *old);

/* free and the realloc family when mt_enter refused (the thread is inside mtrace, or could not
 * get counters): nothing is counted or recorded, but the block's record still goes, so that no
 * record outlives its block. mt_take_unentered returns 1 when p had a record, which
 * mt_put_back_unentered restores when the real realloc failed. */
void mt_forget_unentered(void *p);

/* Reader side: a record whose block a walk of glibc's heap found free (a free mtrace never saw,
 * glibc_heap.h) is removed and counted in missed_frees, unless its address has been allocated again
 * since (its record is then another's, and stays). Not from a hook; takes the guard. */
void mt_forget_missed(const struct mt_record *rec);
int mt_take_unentered(void *p, struct mt_record *old);
void mt_put_back_unentered(const struct mt_record *old);

/* Reader side: removes every record of a block the VM served through the NIF API (mt_record.vm),
 * when their frees can no longer be seen (a detach). Returns how many went. Not from a hook. */
size_t mt_forget_vm_records(void);

/* Nonzero once this library is the process's allocator interceptor and its table is ready. */
int mt_active(void);

/* Makes the calling thread's own allocations untraced (the NIF and symbolizer use it); nests. */
void mt_guard_hold(void);
void mt_guard_release(void);

void mt_stats_read(struct mt_stats *out);

/* A clock read in nanoseconds (the vDSO: no system call, no allocation; any thread). Records are
 * stamped with CLOCK_MONOTONIC_COARSE, whose resolution is a few milliseconds. */
static inline uint64_t mt_now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
