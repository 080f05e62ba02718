/* beam_alloc.h: the blocks the VM's allocators hold freed, which the mark does not read.
 *
 * To the carrier walk (layouts.h) a block of the VM's allocators is in use or free, by its
 * header. Two kinds are neither: freed, and held by the allocator, their words what the freed
 * object left (pointers to memory freed since, given by malloc to other blocks):
 * - the free lists of fix_alloc, which hands out the VM's fixed-size structs (a Process, a
 *   monitor, a link, a thread queue element, a timer...) and keeps the ones freed on a list a
 *   type, up to 1000 each, for the next of that type: only a block's first word, the list's link,
 *   is written, and the rest keeps the freed struct's words;
 * - each instance's delayed-dealloc queue: a block that another thread frees is queued to the
 *   instance that allocated it, which frees it when it next runs (a scheduler asleep may not for
 *   long), the link and the block's type in its first two words: in a busy node, process heaps
 *   emptied by a collection elsewhere, their references to binaries freed since (a BinRef moved
 *   out of a heap, in a block of an eheap_alloc carrier); a busy node's queues can grow large.
 *
 * Each allocator's instances (one a scheduler, one shared, and the dirty ones) are in
 * erts_allctr_thr_spec, exported by beam.smp, each an Allctr_t (OTP 25 to 27):
 * - its first 64 bytes are the queue's tail, beginning with the queue's marker {next, type}, and
 *   then the tail's last; the head's first (MT_ALLOC_DD_FIRST) follows: the marker's own address
 *   when the queue is empty. Learnt when, in every instance, the head's first and the tail's last
 *   are the marker or a block's address, and both are the marker in most.
 * - fix_alloc's instances point to their lists, {type_size, list_size, list, four counters, type}
 *   of 64 bytes each, one malloc for all instances in turn. The pointer's place differs between
 *   releases: it is learnt as the one word of the first MT_ALLOCTR_WORDS whose values in the
 *   instances step by the same multiple of 64 bytes, and whose entries then read as lists (type
 *   sizes the same in every instance, counts and links that can be a list's).
 * A layout not learnt so leaves no block out.
 *
 * Contract
 * - mt_beam_alloc_learn(): dlsym (the loader's lock; may allocate), mmap and process_vm_readv, the
 *   threads going: call it before they stop. The instances and the lists are looked for once;
 *   the queues, until they are learnt (a busy moment may have most of them in use). Returns 0
 *   when either layout is learnt, else -1 (as in a program that is no BEAM). Any thread, one at
 *   a time (a mutex).
 * - mt_beam_alloc_gaps(): with the other threads stopped, every one of them (a queue and a list
 *   are then whole: only an instance's own thread takes a block off, and a block is linked only
 *   once freed); process_vm_readv and the gaps' own memory (mt_beam_gap_add) only: no malloc, no
 *   lock. Each block on a list gives the gap past its link, [block + 8, block + type_size),
 *   MT_BEAM_GAP_FIX; each queue's own words (tail and head, MT_ALLOC_DD_WORDS), MT_BEAM_GAP_DD:
 *   they name queued blocks, which mtrace saw freed before they were queued, or blocks queued
 *   once and handed out again since (the head's and the tail's ends stay behind), never a block
 *   that is live by what the VM did; each block queued, the gap past its link and type to its
 *   end (its header's size), MT_BEAM_GAP_DD, but for a carrier queued to go home (its header says
 * so), which is none, and for a block that does not lie whole in a carrier of one of the VM's
 * instances (found by its header's offset; a queue read amiss then clears nothing it does not own).
 *   A list or queue is followed for MT_ALLOC_WALK_MAX links at most (a list for its count), and
 *   stops at a link that is NULL, misaligned or unreadable. Returns 0 (nothing added when no
 *   layout was learnt), or -1 when memory for the gaps cannot be mapped.
 */
#ifndef MTRACE_BEAM_ALLOC_H
#define MTRACE_BEAM_ALLOC_H

#include "mark/beam_heaps.h"

#define MT_ALLOC_DD_FIRST 8  /* the word of an Allctr_t that is its queue's head */
#define MT_ALLOC_DD_WORDS 14 /* the queue's tail (a cache line) and head */
#define MT_ALLOC_WALK_MAX 100000

int mt_beam_alloc_learn(void);
int mt_beam_alloc_gaps(struct mt_beam_gaps *g);

#endif
