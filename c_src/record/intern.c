/* intern.c: the lock-free table of interned stacks (intern.h). */
#include "record/intern.h"

#include "base/mem.h"

struct desc {
    uint32_t first;
    uint32_t n;
};

static uintptr_t *frames;
static struct desc *descs;
static uint64_t *index_words;
static size_t capacity, frames_cap, index_mask;
static size_t frames_used, ids_used; /* atomic */

int mt_intern_init(size_t cap, int depth)
{
    size_t idx = 2;
    while (idx < 2 * cap)
        idx <<= 1;
    capacity = cap;
    frames_cap = cap * (size_t)depth;
    index_mask = idx - 1;
    frames = mt_mem_reserve(frames_cap * sizeof *frames);
    descs = mt_mem_reserve(cap * sizeof *descs);
    index_words = mt_mem_reserve(idx * sizeof *index_words);
    return frames && descs && index_words ? 0 : -1;
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
