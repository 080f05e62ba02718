/* beam_heaps.h: the unused part of each Erlang process's heaps, and the process and port
 * tables' free id lists, which the mark does not read.
 *
 * A process's heap is one block of the VM's eheap_alloc: its terms grow up from the block's start
 * to the heap top, its stack down from the block's end to the stack top. Between the two lies
 * memory the process has not written since the block was handed to it, holding what an earlier
 * heap there held: dead terms, among them a bignum's or a binary's raw words and ProcBins of
 * binaries freed since (bench/stale.exs found lost blocks kept by both). The old generation's
 * heap has such a part too, above its own top. None of it is a term the VM will read; as roots,
 * its words keep lost blocks.
 *
 * The VM's Process struct has no published layout, and it differs between releases. It is
 * learnt once, by agreement, from three processes of which the VM says the numbers
 * (process_info/2: garbage_collection_info's heap_block_size, heap_size, recent_size,
 * stack_size, old_heap_block_size and old_heap_size): the caller, running a NIF, and two
 * processes waiting in receive, of normal and of high priority, one at least with an old heap.
 * Each field is the one offset at which all of them agree: heap start, heap end, abandoned heap
 * (NULL) and heap size in words; heap top and stack top; the high-water mark and the old heap's
 * end, top and start; the 32-bit state (its active and user priority fields, and the running
 * flag in the caller only: OTP 25 to 27's ERTS_PSFLG_* bits). The process table is erts_proc
 * (exported by beam.smp), its entries and size found by the process limit. A layout that does
 * not agree so is not learnt, and nothing is left out.
 *
 * Each of the VM's two tables, erts_proc and erts_port (found by the port limit), keeps beside its
 * entries a list of the ids it hands out next: one 32-bit number an entry, never a pointer. Two of
 * them side by side read as one word, and with a process limit of 262144 the list holds pairs such
 * as (n, n + 4096) for nearly every 18-bit n: a thread arena whose address has high half h is
 * pointed into at offset h - 4096.
 *
 * Contract
 * - mt_beam_heaps_learn(): from a NIF on a normal scheduler, the threads going: dlsym and
 *   process_vm_readv; no malloc. Returns 0 once a layout is learnt (at once when it was
 *   before), else -1 with *why set to a static reason. Any thread; one at a time (a mutex).
 * - mt_beam_heaps_gaps(): with the other threads stopped; mmap (mem.h) and process_vm_readv
 *   only: no malloc, no lock. Each process that is not running, on a scheduler or a dirty one,
 *   its own code or a system task (its heap top and stack top may then be in a register, newer
 *   than its struct), nor exiting, free or in a delayed collection, and whose pointers agree
 *   (start <= top <= stack top <= end, end - start its size), gives its gaps [heap top, stack
 *   top) and [old top, old end); each table's free id list is one gap more. Returns 0 (g->n == 0
 *   when no layout was learnt), or -1 when memory for the list cannot be mapped (then no gap is
 *   left out). The gaps are not sorted yet: others may be added (mt_beam_gap_add).
 * - mt_beam_gaps_clear(): zeroes the bytes of the copy buf, of [at, at + len), that lie in a gap
 *   of the sorted list, and adds how many to *cleared, each kind apart, having shown each such
 *   part to seen (when not NULL) first. Pure but for seen.
 */
#ifndef MTRACE_BEAM_HEAPS_H
#define MTRACE_BEAM_HEAPS_H

#include <stddef.h>
#include <stdint.h>

/* A waiting process as process_info/2 describes it (sizes in words), and its priority field:
 * MT_BEAM_PRIO_NORMAL or MT_BEAM_PRIO_HIGH. */
struct mt_beam_known {
    uint64_t pid; /* its term */
    uint64_t heap_block, heap_used, recent, stack, old_block, old_used;
    unsigned prio;
};
/* Its state's active and user priority fields (2 bits each): PRIORITY_NORMAL or PRIORITY_HIGH.
 * The third, the run queue's, keeps the priority it was last queued at. */
#define MT_BEAM_PRIO_NORMAL 0xAu
#define MT_BEAM_PRIO_HIGH 0x5u

int mt_beam_heaps_learn(uint64_t limit, uint64_t port_limit, uint64_t self,
                        const struct mt_beam_known known[2], const char **why);

/* What a gap is: a heap's unused part, a table's free id list, a free block of fix_alloc's or
 * one queued to be freed (beam_alloc.h), a scheduler's float registers (beam_regs.h). */
enum mt_beam_gap_kind {
    MT_BEAM_GAP_HEAP,
    MT_BEAM_GAP_IDS,
    MT_BEAM_GAP_FIX,
    MT_BEAM_GAP_DD,
    MT_BEAM_GAP_FREGS,
    MT_BEAM_GAP_KINDS
};
struct mt_beam_gap {
    uintptr_t lo, hi;
    enum mt_beam_gap_kind kind;
};

struct mt_beam_gaps {
    struct mt_beam_gap *gap; /* by address and disjoint once sorted */
    size_t n, cap;
    size_t processes; /* processes in the table */
    size_t left;      /* of them, those whose heaps are read whole (running, or not agreeing) */
    uint64_t asker;   /* the pid of mt_beam_heaps_asker() on the marking thread, or 0 */
    void *map;
    size_t map_len;
};

int mt_beam_heaps_gaps(struct mt_beam_gaps *g);
/* One gap more, [lo, hi) of that kind: 0, or -1 when memory for the list cannot be mapped (the
 * gaps so far stay). mt_beam_gaps_sort(): sorts them, once all are added, for the clear, and joins
 * those that overlap (the clear takes them disjoint). Both as mt_beam_heaps_gaps: no malloc, no
 * lock. */
int mt_beam_gap_add(struct mt_beam_gaps *g, uintptr_t lo, uintptr_t hi, enum mt_beam_gap_kind kind);
void mt_beam_gaps_sort(struct mt_beam_gaps *g);

/* The process whose NIF marks on the calling thread: its heaps' gaps are taken though it runs (on
 * a dirty scheduler), since a NIF's env makes terms from the struct's heap top only after the mark.
 * A NIF calls mt_beam_heaps_asker(its pid) before the mark and mt_beam_heaps_asker(0) after; a
 * mark on another thread does not take it. Any thread; atomic stores, no lock. */
void mt_beam_heaps_asker(uint64_t pid);
void mt_beam_heaps_drop(struct mt_beam_gaps *g);
struct mt_beam_cleared {
    uint64_t bytes[MT_BEAM_GAP_KINDS]; /* by kind */
};
typedef void (*mt_beam_gap_seen)(void *arg, enum mt_beam_gap_kind kind, const void *p, size_t len,
                                 uintptr_t at);
void mt_beam_gaps_clear(const struct mt_beam_gaps *g, void *buf, size_t len, uintptr_t at,
                        struct mt_beam_cleared *cleared, mt_beam_gap_seen seen, void *arg);

#endif
