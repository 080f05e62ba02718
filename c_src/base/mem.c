/* mem.c: mtrace's remembered mappings (see mem.h). A slot is claimed by compare-and-swap on its
 * start and released by storing 0, so mapping and unmapping never wait for each other. */
#include "base/mem.h"

#include <errno.h>
#include <sys/mman.h>

static struct {
    uintptr_t lo, len;
} regions[MT_MEM_REGIONS];
static size_t forgotten;

void *mt_mem_map(size_t len)
{
    int e = errno;
    void *p =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    errno = e;
    if (p == MAP_FAILED) return NULL;
    for (size_t i = 0; i < MT_MEM_REGIONS; i++) {
        uintptr_t free_ = 0;
        if (!__atomic_load_n(&regions[i].lo, __ATOMIC_RELAXED) &&
            __atomic_compare_exchange_n(&regions[i].lo, &free_, (uintptr_t)p, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            __atomic_store_n(&regions[i].len, len, __ATOMIC_RELEASE);
            return p;
        }
    }
    __atomic_fetch_add(&forgotten, 1, __ATOMIC_RELAXED);
    return p;
}

/* A reserved region's first 64 bytes: the region reserved before it, and its length. */
struct reserved {
    struct reserved *next;
    size_t len;
};
static struct reserved *reserved;

void *mt_mem_reserve(size_t len)
{
    int e = errno;
    struct reserved *r = mmap(NULL, len + 64, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    errno = e;
    if (r == MAP_FAILED) return NULL;
    r->len = len + 64;
    r->next = __atomic_load_n(&reserved, __ATOMIC_RELAXED);
    while (
        !__atomic_compare_exchange_n(&reserved, &r->next, r, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        ;
    return (char *)r + 64;
}

void mt_mem_unmap(void *p, size_t len)
{
    int e = errno;
    for (size_t i = 0; i < MT_MEM_REGIONS; i++)
        if (__atomic_load_n(&regions[i].lo, __ATOMIC_ACQUIRE) == (uintptr_t)p) {
            __atomic_store_n(&regions[i].len, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&regions[i].lo, 0, __ATOMIC_RELEASE);
            break;
        }
    munmap(p, len);
    errno = e;
}

void mt_mem_each(void (*fn)(uintptr_t lo, uintptr_t hi, void *arg), void *arg)
{
    for (size_t i = 0; i < MT_MEM_REGIONS; i++) {
        uintptr_t lo = __atomic_load_n(&regions[i].lo, __ATOMIC_ACQUIRE);
        size_t len = __atomic_load_n(&regions[i].len, __ATOMIC_ACQUIRE);
        if (lo && len) fn(lo, lo + len, arg);
    }
    for (const struct reserved *r = __atomic_load_n(&reserved, __ATOMIC_ACQUIRE); r; r = r->next)
        fn((uintptr_t)r, (uintptr_t)r + r->len, arg);
}

size_t mt_mem_forgotten(void)
{
    return __atomic_load_n(&forgotten, __ATOMIC_RELAXED);
}
