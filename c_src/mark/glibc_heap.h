/* glibc_heap.h: glibc's heap as glibc holds it: every chunk in use, and every free one.
 *
 * mtrace's table knows the blocks it recorded; glibc knows every chunk it handed out. The walk
 * reads glibc's own structures, without debug symbols (glibc exports neither main_arena nor
 * mp_): it finds the main arena and the parameters in libc's writable data by their shape (127
 * bins whose empty ones point to themselves, an arena ring that comes back, a top chunk that
 * ends the sbrk'd range the parameters begin), every thread arena through the ring (each in a
 * 64 MiB-aligned heap whose heap_info points back to it), and walks each heap chunk by chunk.
 * A chunk is free when the next chunk's PREV_INUSE bit is clear, when it is a top chunk, or when
 * it sits in a fastbin or a thread's tcache (those look in use to their neighbours): fastbins
 * are followed from the arenas, tcaches from each chunk that proves to be a thread's tcache (its
 * lists lead, by safe-linked pointers, to chunks of their bin's size that all carry one nonzero
 * key, the process's tcache key, and end by their counts). mmapped chunks are found in
 * anonymous mappings (not mtrace's own, not a thread's stack: their words can look like a
 * chunk's header), outside the heaps walked (glibc 2.41 maps a thread arena's heap so that the
 * kernel merges it with an anonymous mapping made just below it: one mapping then holds an
 * mmapped chunk and a heap), and may not exceed glibc's own count and bytes of them (but for one
 * candidate whose size is exactly the excess, and no other's: it is not glibc's chunk now, and is
 * left out); fewer found leaves h->mmapped_missing set, and the blocks in them unknown: a reader
 * keeps the records it cannot place rather than call them freed.
 *
 * Nothing is guessed: a structure that does not validate is refused (h->refused says what, and
 * nothing is returned), a chunk or list that fails inside an otherwise valid heap is counted in
 * h->bad and not followed; a heap cut short that way ends its walk there.
 *
 * Contract
 * - mt_heap_prepare() runs before the other threads are stopped (it looks for libc with
 *   dl_iterate_phdr, which takes the loader's lock, once) and checks the glibc version; it does
 *   not allocate. Returns 0, or -1 with h->refused set.
 * - mt_heap_walk() runs with every other thread stopped (world.h), or in a program whose other
 *   threads do not allocate. It calls no malloc and takes no lock; its memory comes from mem.h.
 *   It reads glibc's structures with process_vm_readv (or, where that is refused, only inside
 *   mappings listed by maps) and chunks inside validated heaps directly. Returns 0 with the
 *   blocks and free chunks sorted by address; -1 with errno EAGAIN when a stopped thread holds
 *   an arena's lock (its structures may be half written: resume and try again), or when more
 *   mmapped chunks are found than glibc counts (h->refused says so: free lowers the count before
 *   its munmap, without a lock, so a thread stopped between the two leaves a chunk glibc no
 *   longer counts; resume and try again); -1 with errno EINVAL and h->refused set when the
 *   layout does not validate.
 * - mt_heap_drop() releases the arrays; h may then be walked again (a walk starts afresh, its
 *   figures and arrays its own).
 */
#ifndef MTRACE_HEAP_H
#define MTRACE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/proc.h"
#include "mark/world.h"

/* A block in use (addr: the address malloc returned; size: malloc_usable_size), or a free
 * chunk (addr: the chunk's start, size: its whole size). */
struct mt_heap_chunk {
    uintptr_t addr;
    size_t size;
};

struct mt_heap {
    struct mt_heap_chunk *block, *free;
    size_t blocks, frees;
    uint64_t block_bytes, free_bytes;
    size_t arenas, heaps, mmapped, fast, tcached, tcaches;
    uint64_t top_bytes, mmapped_bytes, fast_bytes, tcached_bytes;
    size_t bad;             /* chunks or lists that failed validation and were not followed */
    size_t mmapped_missing; /* mmapped chunks glibc counts that the walk did not find */
    const char *refused;    /* why the walk was refused, or NULL */
    int version;            /* glibc's, as 100 * major + minor */
    void *map;
    size_t map_len;
};

int mt_heap_prepare(struct mt_heap *h);
/* world: the stopped threads (NULL: none), and self_sp a stack pointer of the caller's: the
 * mappings that hold their stacks hold no chunk, and are not looked at for mmapped ones. */
int mt_heap_walk(struct mt_heap *h, const struct mt_maps *maps, const struct mt_world *world,
                 uintptr_t self_sp);
void mt_heap_drop(struct mt_heap *h);

/* The free chunk (or top chunk, fastbin or tcache entry) that holds address a, or NULL. */
const struct mt_heap_chunk *mt_heap_free_at(const struct mt_heap *h, uintptr_t a);

#endif
