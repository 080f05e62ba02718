/* platform.h: the facts of x86-64 Linux and of glibc's malloc that mtrace relies on, in one place.
 *
 * Everything here is a constant or a pure inline function: no state, no allocation, any thread.
 * What is written here was read off glibc's sources and checked on the running library: the
 * heap walker (glibc_heap.h) never trusts a layout it has not validated in the process itself, and
 * accepts only the glibc versions listed by MT_GLIBC_CHECKED_*, whose layout is the one below.
 */
#ifndef MTRACE_PLATFORM_H
#define MTRACE_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

/* x86-64 Linux. */
#define MT_PAGE 4096
#define MT_RED_ZONE 128 /* bytes below the stack pointer a leaf function may use */
/* glibc's thread control block (struct pthread) lies at the thread pointer, about 2304 bytes in
 * glibc 2.35 to 2.41; the static TLS blocks lie below it. */
#define MT_TCB_BYTES 2304
#define MT_MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
/* DWARF's numbers of the two registers a step through x86-64 frames needs (the psABI's table). */
#define MT_DWARF_RBP 6
#define MT_DWARF_RSP 7

/* glibc's malloc (ptmalloc2) on 64-bit: the versions whose layout is below (checked on 2.36 and
 * 2.41, Debian 12 and 13). 2.35 gave heap_info its pagesize field; 2.42 moved the tcache out of
 * the first chunk of a heap and widened it. */
#define MT_GLIBC_CHECKED_MIN 235
#define MT_GLIBC_CHECKED_MAX 241

/* Chunks: a header of two words (the previous chunk's size when it is free, then this chunk's
 * size with three flags); the user's block starts after it and may use the next chunk's first
 * word. */
#define MT_CHUNK_HDR 16
#define MT_CHUNK_MIN 32
#define MT_CHUNK_ALIGN 16
#define MT_CHUNK_PREV_INUSE 1
#define MT_CHUNK_MMAPPED 2
#define MT_CHUNK_NON_MAIN 4
#define MT_CHUNK_FLAGS 7

/* The chunk size glibc gives a request of n bytes (request2size). */
static inline size_t mt_chunk_size(size_t n)
{
    size_t c = (n + sizeof(size_t) + MT_CHUNK_ALIGN - 1) & ~(size_t)(MT_CHUNK_ALIGN - 1);
    return c < MT_CHUNK_MIN ? MT_CHUNK_MIN : c;
}

/* struct malloc_state, an arena (2.27 and later): offsets of its fields and its size. */
#define MT_ARENA_MUTEX 0
#define MT_ARENA_FLAGS 4
#define MT_ARENA_FASTBINS 16
#define MT_ARENA_NFASTBINS 10
#define MT_ARENA_TOP 96
#define MT_ARENA_BINS 112
#define MT_ARENA_NBINS 127 /* bin i (1 to 127) is the pair of words at BINS + 16 * (i - 1) */
#define MT_ARENA_NEXT 2160
#define MT_ARENA_SYSTEM_MEM 2184
#define MT_ARENA_MAX_SYSTEM_MEM 2192
#define MT_ARENA_SIZE 2200
#define MT_ARENA_NONCONTIGUOUS 2 /* in flags: not one sbrk'd range (every thread arena) */

/* struct heap_info, at the start of each heap of a thread arena (2.35 and later), and the
 * heaps' size and alignment (HEAP_MAX_SIZE: twice the largest mmap threshold). The first heap
 * of an arena holds the arena right after it. */
#define MT_HEAP_INFO_ARENA 0
#define MT_HEAP_INFO_PREV 8
#define MT_HEAP_INFO_SIZE 16
#define MT_HEAP_INFO_BYTES 48
#define MT_HEAP_MAX ((uintptr_t)64 << 20)

/* struct malloc_par, the parameters (mp_, 2.35 and later). */
#define MT_PAR_MMAP_THRESHOLD 16
#define MT_PAR_N_MMAPS 60
#define MT_PAR_MAX_N_MMAPS 68
#define MT_PAR_MMAPPED_MEM 80
#define MT_PAR_MAX_MMAPPED_MEM 88
#define MT_PAR_SBRK_BASE 96
#define MT_PAR_TCACHE_BINS 104
#define MT_PAR_TCACHE_MAX_BYTES 112
#define MT_PAR_TCACHE_COUNT 120
#define MT_PAR_SIZE 136
#define MT_MMAP_THRESHOLD_MAX ((size_t)32 << 20)

/* The per-thread cache (2.30 and later): 64 uint16_t counts, then 64 list heads, in a chunk of
 * its own; an entry is a free chunk's user address, whose first word is the next entry and
 * whose second is the process's random tcache key (2.34 and later). */
#define MT_TCACHE_BINS 64
#define MT_TCACHE_ENTRIES 128
#define MT_TCACHE_CHUNK 0x290
#define MT_TCACHE_KEY 8

/* The loader's _dl_find_object (2.35 and later, dl-find_object.c) keeps the loaded objects'
 * ranges in segments it mallocs: at the block's first 128-byte boundary, a header {previous
 * segment, to_free (the block itself), size (entries in use), allocated}, then `allocated` entries
 * {map_start, map_end, link_map, eh_frame} (x86-64 has no eh_dbase or eh_count). */
#define MT_DLFO_ALIGN 128
#define MT_DLFO_HEADER 32
#define MT_DLFO_ENTRY 32

/* Safe-linking (2.32 and later): the fastbins' and tcache's next pointers are stored xor'ed with
 * the address they are stored at, shifted right by 12. */
static inline uintptr_t mt_reveal(uintptr_t at, uintptr_t stored)
{
    return (at >> 12) ^ stored;
}

#endif
