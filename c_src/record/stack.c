/* stack.c: capture (the table unwinder of cfi.h with libunwind behind it, a guarded frame-pointer
 * walk, or libunwind continued through the BEAM's JIT frames) and the validated cache of each
 * thread; interning is intern.c's. */
#define _GNU_SOURCE
#include "record/stack.h"

#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

#include "base/mem.h"
#include "base/proc.h"
#include "record/beam_frames.h"
#include "record/cfi.h"

static enum mt_unwind unwind_mode;
static int depth_max;

/* Text of the tracer and of libunwind: leading frames inside them are the tracer's own. */
static struct range {
    uintptr_t lo, hi;
} own[2];

extern void *__libc_stack_end;
static pthread_rwlock_t unwinding = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

static __thread uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
#define STACK_SPAN ((uintptr_t)64 << 20)

static int find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct range *r = arg;
    uintptr_t want = r->lo;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        if (want >= lo && want < lo + ph->p_memsz) {
            r->lo = lo;
            r->hi = lo + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

static void text_of(const void *fn, struct range *r)
{
    r->lo = (uintptr_t)fn;
    r->hi = 0;
    if (!dl_iterate_phdr(find_text, r)) r->lo = r->hi = 0;
}

/* This thread's stack, cached: [stack_lo, stack_hi). The initial thread's top is
 * __libc_stack_end; "tid == pid" does not tell the initial thread (a child forked from another
 * thread passes that test), the stack pointer itself does. Other threads read their descriptor
 * with pthread_getattr_np, which for them opens no file. A stack found neither way (a coroutine's,
 * say) is marked unknown, and every check against it fails. */
__attribute__((noinline, cold)) static int find_stack(void)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0), top = (uintptr_t)__libc_stack_end;
    stack_hi = 1;
    if (sp < top && top - sp < STACK_SPAN) {
        stack_lo = top - STACK_SPAN;
        stack_hi = top;
    } else {
        pthread_attr_t attr;
        void *addr;
        size_t size;
        if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
        if (pthread_attr_getstack(&attr, &addr, &size) == 0 && sp >= (uintptr_t)addr &&
            sp < (uintptr_t)addr + size) {
            stack_lo = (uintptr_t)addr;
            stack_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&attr);
    }
    return stack_hi > 1;
}

static inline int stack_known(void)
{
    return __builtin_expect(stack_hi != 0, 1) ? stack_hi > 1 : find_stack();
}

/* Whether [sp, hi) is the live part of this thread's own stack, hi being its top. */
static inline int on_stack(uintptr_t sp, uintptr_t *hi)
{
    if (!stack_known() || sp < stack_lo || sp >= stack_hi) return 0;
    *hi = stack_hi;
    return 1;
}

int mt_stack_bounds(uintptr_t *lo, uintptr_t *hi)
{
    if (!stack_known()) return 0;
    *lo = stack_lo;
    *hi = stack_hi;
    return 1;
}

/* libunwind 1.6 checks doubtful addresses by writing them to a private pipe and reading the pipe
 * back. In a program that closes every descriptor at start (erl_child_setup, ssh) the pipe's
 * number is reused by a socket: libunwind then blocks reading it, or eats the program's data.
 * Its local memory accessor is replaced by one that uses no descriptor: reads inside this
 * thread's stack go direct, any other read goes through process_vm_readv, which fails cleanly
 * on unmapped memory. The generic accessor getter is the one libunwind.so exports; it returns the
 * table of whichever address space it is given. */
extern unw_accessors_t *_Ux86_64_get_accessors(unw_addr_space_t);
static int (*libunwind_access_mem)(unw_addr_space_t, unw_word_t, unw_word_t *, int, void *);

static int safe_access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write,
                           void *arg)
{
    if (write) return libunwind_access_mem(as, addr, val, write, arg);
    uintptr_t here = (uintptr_t)__builtin_frame_address(0), hi;
    if (on_stack(here, &hi) && addr >= here && addr <= hi - sizeof *val) {
        *val = *(const unw_word_t *)addr;
        return 0;
    }
    return mt_proc_read(addr, val, sizeof *val) == 0 ? 0 : -UNW_EINVAL;
}

int mt_stack_init(size_t cap, int depth, enum mt_unwind mode)
{
    unwind_mode = mode;
    depth_max = depth;
    if (mt_intern_init(cap, depth) != 0) return -1;
    text_of((const void *)mt_stack_capture, &own[0]);
    text_of((const void *)unw_backtrace, &own[1]);
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    void *first[1];
    unw_backtrace(first, 1); /* libunwind's lazy init would overwrite the accessor set below */
    unw_accessors_t *acc = _Ux86_64_get_accessors(unw_local_addr_space);
    libunwind_access_mem = acc->access_mem;
    acc->access_mem = safe_access_mem;
    return 0;
}

static inline int is_own(uintptr_t ip)
{
    return (ip >= own[0].lo && ip < own[0].hi) || (ip >= own[1].lo && ip < own[1].hi);
}

/* Follows the frame-pointer chain from fp, writing each return address (and, when slots is not
 * NULL, where on the stack it lies), at most max. Only sound where every frame keeps a frame
 * pointer; each step must stay inside [lo, hi - 16] of this thread's stack and move outwards by
 * less than 1 MiB, so a frame without one ends the walk instead of faulting (hi - 16, not fp + 16:
 * a garbage frame pointer near 2^64 would wrap). */
static int fp_chain(const uintptr_t *fp, uintptr_t lo, uintptr_t hi, uintptr_t *ips,
                    uintptr_t *slots, int max)
{
    int n = 0;
    while (n < max && (uintptr_t)fp >= lo && (uintptr_t)fp <= hi - 16 && !((uintptr_t)fp & 7) &&
           fp[1] >= 4096) {
        ips[n] = fp[1];
        if (slots) slots[n] = (uintptr_t)(fp + 1);
        n++;
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if (next <= fp || (uintptr_t)next - (uintptr_t)fp > ((uintptr_t)1 << 20)) break;
        fp = next;
    }
    return n;
}

static int fp_walk(uintptr_t *buf, int max)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    uintptr_t hi;
    if (!on_stack((uintptr_t)fp, &hi)) return 0;
    return fp_chain(fp, (uintptr_t)fp, hi, buf, NULL, max);
}

#define OWN_FRAMES_MAX 16

/* Where the Erlang frames of a walk start (ips[first], 0: none), where the JIT frame's RBP was
 * saved on the thread's stack (0: not in memory), and whether the chain ended at a link of 0. */
struct erlang_tail {
    int first;
    uintptr_t saved_at;
    int closed;
};

/* From the cursor's frame, whose ip is in JIT code: the chain from its RBP (beam_frames.h),
 * writing each return address to ips and its frame's fp to fps, at most max; returns how many. */
static int erlang_chain(unw_cursor_t *cur, uintptr_t *ips, uintptr_t *fps, int max,
                        struct erlang_tail *t)
{
    unw_word_t fp;
    unw_save_loc_t loc;
    t->closed = 0;
    t->saved_at = 0;
    /* The registers are read before any further step: a failed step leaves the cursor broken. */
    if (!mt_beam_perf_map() || unw_get_reg(cur, UNW_X86_64_RBP, &fp) != 0) return 0;
    if (unw_get_save_loc(cur, UNW_X86_64_RBP, &loc) == 0 && loc.type == UNW_SLT_MEMORY)
        t->saved_at = loc.u.addr;
    return mt_beam_chain(fp, ips, fps, max, &t->closed);
}

/* Steps the cursor outwards, writing each frame's ip and the stack address of its return address
 * (an Erlang frame's: its fp), at most max; in the erlang mode, through the Erlang frames from
 * the first ip outside every object. Returns how many. */
static int steps(unw_cursor_t *cur, uintptr_t *ips, uintptr_t *slots, int max,
                 struct erlang_tail *t)
{
    unw_word_t ip, sp;
    int n = 0;
    t->first = 0;
    while (n < max && unw_step(cur) > 0 && unw_get_reg(cur, UNW_REG_IP, &ip) == 0 &&
           unw_get_reg(cur, UNW_REG_SP, &sp) == 0 && ip != 0) {
        ips[n] = ip;
        slots[n++] = sp - sizeof(uintptr_t);
        if (unwind_mode == MT_UNWIND_ERLANG && !mt_beam_in_object(ip)) {
            t->first = n;
            n += erlang_chain(cur, ips + n, slots + n, max - n, t);
            break;
        }
    }
    return n;
}

/* The stack through the Erlang frames, when unw_backtrace stopped at JIT code: 0 on failure. */
__attribute__((noinline)) static int through_erlang(uintptr_t *ips, int max)
{
    unw_context_t uc;
    unw_cursor_t cur;
    uintptr_t slots[MT_DEPTH_MAX + OWN_FRAMES_MAX];
    struct erlang_tail t;
    if (unw_getcontext(&uc) != 0 || unw_init_local(&cur, &uc) != 0) return 0;
    return steps(&cur, ips, slots, max, &t);
}

/* The table unwinder's frames (cfi.h), each with its stack pointer in sps; in the erlang mode,
 * from code in no object on along the Erlang frames' chain, in a BEAM that keeps frame pointers
 * (*jit then set; an Erlang frame's sps is its fp). -1 where it gave up. The perf map is looked
 * at only once a stack reaches code in no object: before its JIT starts, a BEAM has none open. */
static int table_frames(struct mt_cfi_rows *rows, uintptr_t *ips, uintptr_t *sps, int max, int *jit,
                        struct erlang_tail *t)
{
    uintptr_t hi;
    struct mt_cfi_jit j = {.follow = mt_beam_perf_map};
    if (!on_stack((uintptr_t)__builtin_frame_address(0), &hi)) return -1;
    int n = mt_cfi_backtrace(rows, hi, ips, sps, max, unwind_mode == MT_UNWIND_ERLANG ? &j : NULL);
    if (n < 0 || unwind_mode != MT_UNWIND_ERLANG || !j.found) return n;
    *jit = 1;
    t->first = n;
    t->saved_at = j.rbp_at;
    return n + mt_beam_chain(j.rbp, ips + n, sps + n, max - n, &t->closed);
}

/* libunwind's frames, and in the erlang mode, when they end in JIT code, the Erlang frames after
 * them (*jit then set). */
static int libunwind_frames(uintptr_t *ips, int max, int *jit)
{
    pthread_rwlock_rdlock(&unwinding);
    int got = unw_backtrace((void **)ips, max);
    /* Only a stack that reaches JIT code pays for the step-by-step walk. */
    *jit = unwind_mode == MT_UNWIND_ERLANG && got > 0 && got < max &&
           !mt_beam_in_object(ips[got - 1]) && mt_beam_perf_map();
    if (*jit) {
        uintptr_t longer[MT_DEPTH_MAX + OWN_FRAMES_MAX];
        int n = through_erlang(longer, max);
        if (n > got) {
            memcpy(ips, longer, (size_t)n * sizeof *ips);
            got = n;
        }
    }
    pthread_rwlock_unlock(&unwinding);
    return got;
}

/* mt_stack_capture, also telling whether it went on through Erlang frames (the erlang mode). */
static int capture(uintptr_t hook_ip, uintptr_t *ips, int depth, int *jit, struct mt_cfi_rows *rows)
{
    uintptr_t raw[MT_DEPTH_MAX + OWN_FRAMES_MAX], sps[MT_DEPTH_MAX + OWN_FRAMES_MAX];
    int want = depth - 1 + OWN_FRAMES_MAX, got;
    struct erlang_tail t = {0, 0, 0};
    *jit = 0;
    if (unwind_mode == MT_UNWIND_FP)
        got = fp_walk(raw, want);
    else if ((got = table_frames(rows, raw, sps, want, jit, &t)) < 0)
        got = libunwind_frames(raw, want, jit);
    int i = 0;
    while (i < got && is_own(raw[i]))
        i++;
    ips[0] = hook_ip;
    int n = 1;
    for (; i < got && n < depth; i++)
        ips[n++] = raw[i];
    return n;
}

int mt_stack_capture(uintptr_t hook_ip, uintptr_t *ips, int depth)
{
    int jit;
    return capture(hook_ip, ips, depth, &jit, NULL);
}

/* The validated cache. An entry remembers, for one call site, the interned stack and, for each of
 * its return addresses (frames 2 and up), the stack word that held it and its value. The key
 * includes the caller's stack pointer, so those words are at fixed addresses for as long as the
 * entry matches. Entries are only made for call sites on this thread's own stack, with every word
 * of their native frames inside it, so validating those only reads memory that is mapped. A hit
 * reads the entry and the stack, nothing of the interned stacks.
 *
 * Erlang frames (the erlang mode) lie outside the thread's stack, and another Erlang process
 * calling from the same native frames has other ones. Their checks come after the native ones, in
 * chain order: the word where the JIT frame's RBP is saved holds the first fp; then, per frame,
 * the return address at fp + 8 and the link at fp. Each fp read is one just compared equal to a
 * live word of the current chain (the saved RBP of a native frame that matched, or a link of a
 * frame that matched), so it is the running process's live frame, on memory that is mapped. */
struct check {
    const uintptr_t *slot;
    uintptr_t value;
};

struct entry {
    uintptr_t sp, ret, hook_ip;
    uint32_t id;
    uint16_t n;            /* 1 + the checks a hit makes; 0: not checkable (yet), see mt_stack_id */
    uint16_t seen;         /* misses of this call site since it was last walked */
    int jit;               /* its stack went through Erlang frames: walked at each miss */
    struct check checks[]; /* the native frames' return addresses, then the Erlang chain's words */
};

#define CACHE_ENTRIES 256

struct mt_stack_cache {
    size_t stride;
    struct mt_cfi_rows *rows; /* the table unwinder's, after the entries */
    char entries[];
};

/* Frames 2 and up; in the erlang mode also the saved RBP and two words an Erlang frame. */
static size_t checks_max(void)
{
    return unwind_mode == MT_UNWIND_ERLANG ? 3 * (size_t)depth_max : (size_t)depth_max;
}

static size_t cache_bytes(size_t *stride)
{
    *stride = sizeof(struct entry) + sizeof(struct check) * checks_max();
    return sizeof(struct mt_stack_cache) + CACHE_ENTRIES * *stride + mt_cfi_rows_bytes();
}

struct mt_stack_cache *mt_stack_cache_new(void)
{
    size_t stride, bytes = cache_bytes(&stride);
    struct mt_stack_cache *c = mt_mem_reserve(bytes);
    if (c) {
        c->stride = stride;
        c->rows = (struct mt_cfi_rows *)(c->entries + CACHE_ENTRIES * stride);
    }
    return c;
}

void mt_stack_cache_reset(struct mt_stack_cache *c)
{
    size_t stride;
    memset(c->entries, 0, cache_bytes(&stride) - sizeof *c);
}

static inline struct entry *slot_for(struct mt_stack_cache *c, const struct mt_site *site)
{
    uint64_t h = (site->ret ^ (site->sp << 7) ^ (site->hook_ip << 17)) * 0x9E3779B97F4A7C15ull;
    return (struct entry *)(c->entries + (size_t)(h >> 56) % CACHE_ENTRIES * c->stride);
}

static inline int same_key(const struct entry *e, const struct mt_site *site)
{
    return e->sp == site->sp && e->ret == site->ret && e->hook_ip == site->hook_ip;
}

static inline int still_valid(const struct entry *e, const struct mt_site *site)
{
    if (!same_key(e, site) || !e->id) return 0;
    for (uint32_t k = 0; k + 1 < e->n; k++)
        if (*e->checks[k].slot != e->checks[k].value) return 0;
    return 1;
}

/* The walk by the table unwinder: the frames after the hook caller's, each with the stack address
 * of its return address (its CFA less 8; an Erlang frame's: its fp, t saying where those start).
 * Returns how many, or -1 when the table unwinder gave up or never met the caller's frame. */
static int table_walk(const struct mt_site *site, struct mt_cfi_rows *rows, uintptr_t *ips,
                      uintptr_t *slots, int max, struct erlang_tail *t)
{
    uintptr_t raw[MT_DEPTH_MAX + OWN_FRAMES_MAX + 2], sps[MT_DEPTH_MAX + OWN_FRAMES_MAX + 2];
    int jit = 0, k = 0;
    int got = table_frames(rows, raw, sps, max + OWN_FRAMES_MAX + 2, &jit, t);
    if (got < 0) return -1;
    int first = jit ? t->first : got; /* raw's first Erlang frame */
    while (k < first && sps[k] != site->sp)
        k++;
    if (k >= first || raw[k] != site->ret) return -1;
    int n = 0;
    t->first = 0;
    for (k++; k < got && n < max; k++) {
        if (k == first) t->first = n;
        ips[n] = raw[k];
        slots[n++] = k < first ? sps[k] - sizeof(uintptr_t) : sps[k];
    }
    return n;
}

/* Walks from the hook caller's frame outwards, writing frames and the stack address of each
 * return address (of an Erlang frame: its fp, the tail saying where those start). Returns the
 * number of frames, or 0 when no frame had the caller's stack pointer, or when only libunwind's
 * step-by-step walk could tell and slow is 0 (then the caller uses mt_stack_capture). */
static int walk(const struct mt_site *site, uintptr_t *ips, uintptr_t *slots, int max,
                struct erlang_tail *t, struct mt_cfi_rows *rows, int slow)
{
    int n = 2;
    ips[0] = site->hook_ip;
    ips[1] = site->ret;
    slots[1] = site->sp - sizeof(uintptr_t);
    t->first = 0;
    if (unwind_mode == MT_UNWIND_FP) {
        const uintptr_t *fp = __builtin_frame_address(0);
        uintptr_t hi;
        if (!on_stack(site->sp, &hi)) return 0;
        while ((uintptr_t)fp + 16 != site->sp) {
            const uintptr_t *next = (const uintptr_t *)fp[0];
            if (next <= fp || (uintptr_t)next >= site->sp) return 0;
            fp = next;
        }
        if (fp[1] != site->ret) return 0;
        return n + fp_chain((const uintptr_t *)fp[0], site->sp, hi, ips + n, slots + n, max - n);
    }
    int got = table_walk(site, rows, ips + n, slots + n, max - n, t);
    if (got >= 0) {
        if (t->first) t->first += 2;
        return n + got;
    }
    t->first = 0;
    if (!slow) return 0;
    unw_context_t uc;
    unw_cursor_t cur;
    unw_word_t sp;
    pthread_rwlock_rdlock(&unwinding);
    if (unw_getcontext(&uc) != 0 || unw_init_local(&cur, &uc) != 0) goto none;
    do {
        if (unw_step(&cur) <= 0 || unw_get_reg(&cur, UNW_REG_SP, &sp) != 0 || sp > site->sp)
            goto none;
    } while (sp != site->sp);
    n += steps(&cur, ips + n, slots + n, max - n, t);
    pthread_rwlock_unlock(&unwinding);
    if (t->first) t->first += 2;
    return n;
none:
    pthread_rwlock_unlock(&unwinding);
    return 0;
}

/* libunwind's exact walk (a step at a time, for the slots) costs tens of unw_backtrace calls, so
 * it is paid only for a call site that keeps coming back: after WALK_AFTER misses in a row. The
 * one-off stacks a program's start-up is full of never pay it, and a site whose stack keeps
 * changing (two callers at the same depth) pays it once in WALK_AFTER + 1 misses. The
 * frame-pointer walk is cheap: it always runs. So does the walk of a call site whose stack went
 * into JIT code: continuing through the Erlang frames costs a step-by-step walk anyway, and an
 * Erlang process's stack moves at each of its garbage collections. */
#define WALK_AFTER 16
#define UNCHECKABLE UINT16_MAX

/* The hook has just stored its site as three 8-byte words. Read back as they were written: a
 * wider load spanning two of them (the compiler's choice for copying the key into an entry) cannot
 * be forwarded from the store buffer and stalls until the stores retire; perf put half of this
 * function's cycles on it. Relaxed atomic loads are never merged. */
static inline struct mt_site word_by_word(const struct mt_site *s)
{
    return (struct mt_site){__atomic_load_n(&s->hook_ip, __ATOMIC_RELAXED),
                            __atomic_load_n(&s->ret, __ATOMIC_RELAXED),
                            __atomic_load_n(&s->sp, __ATOMIC_RELAXED)};
}

/* Fills e's checks from a walk of n frames; returns how many, or -1 when the walk cannot be
 * checked: a native slot off the thread's stack, or an Erlang chain cut short by a doubtful step
 * (a check could not tell a longer chain from it). */
static int fill_checks(struct entry *e, const struct mt_site *site, uintptr_t hi,
                       const uintptr_t *ips, const uintptr_t *slots, int n,
                       const struct erlang_tail *t)
{
    int native = t->first ? t->first : n, c = 0;
    for (int k = 2; k < native; k++) {
        if (slots[k] < site->sp || slots[k] + sizeof(uintptr_t) > hi) return -1;
        e->checks[c++] = (struct check){(const uintptr_t *)slots[k], ips[k]};
    }
    if (native == n) return c;
    if (t->saved_at < site->sp || t->saved_at + sizeof(uintptr_t) > hi ||
        (!t->closed && n < depth_max))
        return -1;
    e->checks[c++] = (struct check){(const uintptr_t *)t->saved_at, slots[native]};
    for (int k = native; k < n; k++) {
        const uintptr_t *fp = (const uintptr_t *)slots[k];
        e->checks[c++] = (struct check){fp + 1, ips[k]};
        if (k + 1 < n || t->closed)
            e->checks[c++] = (struct check){fp, k + 1 < n ? slots[k + 1] : 0};
    }
    return c;
}

/* exact: the walk that gives the slots is to be tried; slow: libunwind's may serve for it. The
 * frame-pointer walk and the table unwinder's are as cheap as a capture, and are tried at every
 * miss; where the table unwinder gives up, the entry waits for WALK_AFTER misses as under
 * libunwind alone. */
static uint32_t unwind(struct entry *e, const struct mt_site *site, uintptr_t hi,
                       struct mt_cfi_rows *rows)
{
    int exact = 0, slow = 0;
    if (e && same_key(e, site)) {
        if (e->n != UNCHECKABLE) e->n = 0;
        if (e->seen < WALK_AFTER) e->seen++;
        slow = unwind_mode == MT_UNWIND_FP || e->jit || e->seen == WALK_AFTER;
        exact = e->n != UNCHECKABLE;
    } else if (e) {
        *e = (struct entry){.sp = site->sp, .ret = site->ret, .hook_ip = site->hook_ip, .seen = 1};
        slow = unwind_mode == MT_UNWIND_FP;
        exact = 1;
    }

    uintptr_t ips[MT_DEPTH_MAX], slots[MT_DEPTH_MAX];
    struct erlang_tail tail = {0, 0, 0};
    int n = 0, jit = 0;
    if (exact) {
        n = walk(site, ips, slots, depth_max, &tail, rows, slow);
        if (!n && !slow) exact = 0; /* undecided: the table unwinder gave up */
    }
    int checkable = n > 0;
    if (!checkable) n = capture(site->hook_ip, ips, depth_max, &jit, rows);

    uint32_t id = mt_stack_intern(ips, n);
    if (!e || !id) return id;
    e->id = id;
    e->jit = e->jit || jit;
    if (!exact) return id;
    int c = checkable ? fill_checks(e, site, hi, ips, slots, n, &tail) : -1;
    e->n = c >= 0 ? (uint16_t)(c + 1) : UNCHECKABLE;
    e->seen = 0;
    return id;
}

/* A miss: unwinds, interns, and (when the walk gave every frame's slot) refills e. Apart from
 * the hit path, whose frame then needs no room for these buffers nor the registers this uses.
 * The unwinders may set errno (a failed read of a doubtful address): it is kept for the program
 * here, the only place on the hook path that can change it. */
__attribute__((noinline)) static uint32_t miss(struct entry *e, const struct mt_site *site,
                                               uintptr_t hi, struct mt_cfi_rows *rows)
{
    int saved_errno = errno;
    uint32_t id = unwind(e, site, hi, rows);
    errno = saved_errno;
    return id;
}

uint32_t mt_stack_id(struct mt_stack_cache *c, const struct mt_site *at)
{
    const struct mt_site copy = word_by_word(at), *site = &copy;
    uintptr_t hi = 0;
    struct entry *e = c && on_stack(site->sp, &hi) ? slot_for(c, site) : NULL;
    if (e && e->n && e->n != UNCHECKABLE && still_valid(e, site)) return e->id;
    return miss(e, site, hi, c ? c->rows : NULL);
}

/* libunwind's step takes mutexes of its own: a child forked while another thread held one would
 * hang on its first unwind. Unwinding holds this lock shared and fork takes it exclusively, so
 * no thread is inside libunwind when the child is made. Writers first, so that a steady stream
 * of unwinds cannot hold a fork off. Stack cache hits never take it. */
void mt_stack_fork_prepare(void)
{
    pthread_rwlock_wrlock(&unwinding);
}
void mt_stack_fork_parent(void)
{
    pthread_rwlock_unlock(&unwinding);
}

/* The child's thread has a new tid, which glibc's rwlock does not know as its writer: the lock is
 * made anew (no other thread exists to hold it). ThreadSanitizer sees no assignment as an unlock,
 * and is told. */
void mt_stack_fork_child(void)
{
#ifdef __SANITIZE_THREAD__
    __tsan_mutex_pre_unlock(&unwinding, 0);
    __tsan_mutex_post_unlock(&unwinding, 0);
#endif
    unwinding = (pthread_rwlock_t)PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    mt_proc_forked();
    mt_beam_forked();
}
