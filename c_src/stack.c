/* stack.c: capture (libunwind or a guarded frame-pointer walk) and lock-free interning.
 *
 * Interned stacks live in three mmap'd arrays: the frames, one descriptor per id (where its frames
 * start, how many), and an open-addressed index of 64-bit words (hash high half, id low half). A
 * new stack is written to the frames and its descriptor before its index word is published with a
 * compare-and-swap, so a reader that finds an id always finds complete frames. The index is twice
 * the capacity, so a probe always ends at an empty word.
 */
#define _GNU_SOURCE
#include "stack.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

struct desc {
    uint32_t first;
    uint32_t n;
};

static uintptr_t *frames;
static struct desc *descs;
static uint64_t *index_words;
static size_t capacity, frames_cap, index_mask;
static size_t frames_used, ids_used; /* atomic */
static enum mt_unwind unwind_mode;

/* Text of the tracer and of libunwind: leading frames inside them are the tracer's own. */
static struct range {
    uintptr_t lo, hi;
} own[2];

extern void *__libc_stack_end;
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));

static void *reserve(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

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

static uintptr_t thread_stack_top(void)
{
    if (stack_hi) return stack_hi;
    if (syscall(SYS_gettid) == getpid()) {
        stack_hi = (uintptr_t)__libc_stack_end;
    } else {
        pthread_attr_t attr;
        void *addr;
        size_t size;
        if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) stack_hi = (uintptr_t)addr + size;
        pthread_attr_destroy(&attr);
    }
    return stack_hi;
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
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    uintptr_t hi = thread_stack_top();
    if (addr >= here && addr + sizeof *val <= hi && addr + sizeof *val > addr) {
        *val = *(const unw_word_t *)addr;
        return 0;
    }
    struct iovec local = {val, sizeof *val}, remote = {(void *)addr, sizeof *val};
    if (syscall(SYS_process_vm_readv, (pid_t)syscall(SYS_getpid), &local, 1UL, &remote, 1UL, 0UL) ==
        (long)sizeof *val)
        return 0;
    return -UNW_EINVAL;
}

int mt_stack_init(size_t cap, int depth, enum mt_unwind mode)
{
    size_t idx = 2;
    while (idx < 2 * cap)
        idx <<= 1;
    capacity = cap;
    frames_cap = cap * (size_t)depth;
    index_mask = idx - 1;
    unwind_mode = mode;
    frames = reserve(frames_cap * sizeof *frames);
    descs = reserve(cap * sizeof *descs);
    index_words = reserve(idx * sizeof *index_words);
    if (!frames || !descs || !index_words) return -1;
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

/* Only sound where every frame keeps a frame pointer; each step is checked to stay inside this
 * thread's stack and to move outwards, so a frame without one ends the walk instead of faulting. */
static int fp_walk(uintptr_t *buf, int max)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    uintptr_t hi = thread_stack_top();
    int n = 0;
    while (n < max && (uintptr_t)fp + 2 * sizeof *fp <= hi && !((uintptr_t)fp & 7)) {
        uintptr_t ret = fp[1];
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if (ret < 4096) break;
        buf[n++] = ret;
        if (next <= fp || (uintptr_t)next - (uintptr_t)fp > ((uintptr_t)1 << 20)) break;
        fp = next;
    }
    return n;
}

#define OWN_FRAMES_MAX 16

int mt_stack_capture(uintptr_t hook_ip, uintptr_t *ips, int depth)
{
    uintptr_t raw[MT_DEPTH_MAX + OWN_FRAMES_MAX];
    int want = depth - 1 + OWN_FRAMES_MAX;
    int got = unwind_mode == MT_UNWIND_FP ? fp_walk(raw, want) : unw_backtrace((void **)raw, want);
    int i = 0;
    while (i < got && is_own(raw[i]))
        i++;
    ips[0] = hook_ip;
    int n = 1;
    for (; i < got && n < depth; i++)
        ips[n++] = raw[i];
    return n;
}

static inline uint64_t hash_frames(const uintptr_t *ips, int n)
{
    uint64_t h = (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h = (h ^ ips[i]) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 32;
    }
    return h;
}

static int same(uint32_t id, const uintptr_t *ips, int n)
{
    const struct desc *d = &descs[id - 1];
    if (d->n != (uint32_t)n) return 0;
    for (int i = 0; i < n; i++)
        if (frames[d->first + i] != ips[i]) return 0;
    return 1;
}

uint32_t mt_stack_intern(const uintptr_t *ips, int n)
{
    uint64_t h = hash_frames(ips, n);
    uint64_t tag = h & 0xffffffff00000000ull;
    uint32_t mine = 0;
    for (size_t i = (size_t)h & index_mask;; i = (i + 1) & index_mask) {
        uint64_t w = __atomic_load_n(&index_words[i], __ATOMIC_ACQUIRE);
        if (w == 0) {
            if (!mine) {
                size_t id = __atomic_add_fetch(&ids_used, 1, __ATOMIC_RELAXED);
                size_t first = __atomic_fetch_add(&frames_used, (size_t)n, __ATOMIC_RELAXED);
                if (id > capacity || first + (size_t)n > frames_cap) return 0;
                for (int k = 0; k < n; k++)
                    frames[first + (size_t)k] = ips[k];
                descs[id - 1] = (struct desc){(uint32_t)first, (uint32_t)n};
                mine = (uint32_t)id;
            }
            if (__atomic_compare_exchange_n(&index_words[i], &w, tag | mine, 0, __ATOMIC_RELEASE,
                                            __ATOMIC_ACQUIRE))
                return mine;
        }
        if ((w & 0xffffffff00000000ull) == tag && same((uint32_t)w, ips, n)) return (uint32_t)w;
    }
}

int mt_stack_get(uint32_t id, const uintptr_t **ips)
{
    if (id == 0 || id > mt_stack_count()) return 0;
    *ips = &frames[descs[id - 1].first];
    return (int)descs[id - 1].n;
}

size_t mt_stack_count(void)
{
    size_t n = __atomic_load_n(&ids_used, __ATOMIC_RELAXED);
    return n < capacity ? n : capacity;
}

size_t mt_stack_bytes(void)
{
    size_t f = __atomic_load_n(&frames_used, __ATOMIC_RELAXED);
    return (f < frames_cap ? f : frames_cap) * sizeof *frames + mt_stack_count() * sizeof *descs +
           (index_mask + 1) * sizeof *index_words;
}
