/* sort.h: a radix sort by address, and the search of a sorted array, for the readers that must
 * not call malloc or qsort.
 *
 * The snapshot of the table and the walk of glibc's heap sort up to millions of entries while
 * the other threads are stopped, where qsort (which may call malloc, whose lock a stopped thread
 * may hold) cannot run. MT_DEFINE_RADIX_SORT(name, type, key) defines
 * `static void name(type *v, type *tmp, size_t n)`, which sorts v[0 .. n) by the uintptr_t
 * `key(&v[i])` into ascending order, eight bits a pass, using tmp (n entries) as scratch, and
 * skips the passes whose digit is the same in every entry (the high bits, mostly). Stable.
 *
 * MT_DEFINE_UPPER_BOUND(name, type, key) defines `static size_t name(const type *v, size_t lo,
 * size_t hi, uint64_t a)`: in v[lo .. hi), sorted by key, the index past the last entry whose key
 * is at most a (lo when there is none): the entry that may hold a is the one before it.
 *
 * Contract: pure; no allocation, no lock, any thread.
 */
#ifndef MTRACE_SORT_H
#define MTRACE_SORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MT_DEFINE_RADIX_SORT(name, type, key)                                                      \
    static void name(type *v, type *tmp, size_t n)                                                 \
    {                                                                                              \
        type *from = v, *to = tmp;                                                                 \
        for (int shift = 0; n > 1 && shift < 64; shift += 8) {                                     \
            size_t count[256] = {0};                                                               \
            for (size_t i = 0; i < n; i++)                                                         \
                count[key(&from[i]) >> shift & 0xFF]++;                                            \
            if (count[key(&from[0]) >> shift & 0xFF] == n) continue;                               \
            for (size_t d = 0, at = 0; d < 256; d++) {                                             \
                size_t c = count[d];                                                               \
                count[d] = at;                                                                     \
                at += c;                                                                           \
            }                                                                                      \
            for (size_t i = 0; i < n; i++)                                                         \
                to[count[key(&from[i]) >> shift & 0xFF]++] = from[i];                              \
            type *t = from;                                                                        \
            from = to;                                                                             \
            to = t;                                                                                \
        }                                                                                          \
        if (from != v) memcpy(v, from, n * sizeof *v);                                             \
    }

#define MT_DEFINE_UPPER_BOUND(name, type, key)                                                     \
    static size_t name(const type *v, size_t lo, size_t hi, uint64_t a)                            \
    {                                                                                              \
        while (lo < hi) {                                                                          \
            size_t mid = lo + (hi - lo) / 2;                                                       \
            if (key(&v[mid]) <= a)                                                                 \
                lo = mid + 1;                                                                      \
            else                                                                                   \
                hi = mid;                                                                          \
        }                                                                                          \
        return lo;                                                                                 \
    }

#endif
