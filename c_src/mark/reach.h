/* reach.h: which live blocks the program can still reach, and which it has lost.
 *
 * A conservative mark, as LeakSanitizer and the Boehm collector make it. The other threads are
 * stopped (world.h) and the table is copied (snapshot.h). The roots are every readable and
 * writable mapping of the process except glibc's own heaps (the main arena's [heap] and the
 * 64 MiB heaps of its thread arenas) and mtrace's own memory (mem.h): the data and bss of every
 * object, anonymous mappings (the BEAM's carriers and process heaps, malloc's mmapped chunks of
 * blocks mtrace has no record of), thread stacks from each stopped thread's stack pointer up
 * (less the 128-byte red zone), the stopped threads' registers, and their alternate signal
 * stacks (sigaltstack: only the kernel points to them). Every aligned word that
 * points into a recorded block, at its start or inside it, marks that block, whose words are
 * then read in turn, but for a block whose record has the lost bit (an earlier scan found it
 * lost: remember.h), which nothing marks, and for the two words of an Erlang ProcBin
 * (OTP 25, 26) whose binary is dead (reach.c: the block they point into holds no live Binary).
 * Recorded blocks are never roots: a block is read only once it is marked.
 *
 * What is not marked is lost: directly when no other lost block points to it, indirectly when
 * one does (a lost list's head is direct, its other nodes indirect). Lost blocks that only point
 * at each other in a cycle have one of them, the lowest, called direct.
 *
 * Memory is read with process_vm_readv, so that a mapping that goes away while it is read (a
 * thread that did not stop) costs its bytes, never a crash; where the system call is refused
 * (a seccomp profile), memory is read directly, the other threads being stopped. Pages that are
 * not resident are skipped unless the process has swap in use (a page never touched reads as
 * zeros, and reading it would make it resident).
 *
 * Contract
 * - In a copy that is not recording (loaded as a NIF without the preload) there is no table: the
 *   snapshot is empty, and only the walk gives the mark its blocks.
 * - mt_reach_run() holds the recorder's guard and calls no malloc; it may be called from any
 *   thread that is not a hook or a signal handler, and once at a time (world.h serializes).
 *   at_exit: the calling thread is exiting, so its stack and registers are not roots (whatever
 *   its frames held died with main or with the call to exit).
 * - Returns 0 and fills *r (r->state[i] is the verdict on r->snap.rec[i] for each heap block,
 *   MT_REACH_TRACKED for tracked resources), or -1 with errno (ENOMEM). mt_reach_drop() releases
 *   it.
 * - walk_heap: glibc's heap is walked while the threads are stopped (glibc_heap.h), so that blocks
 *   without a record (allocated before mtrace started, by a thread inside mtrace, not sampled,
 *   dropped for want of room, forgotten by a reset) are blocks of the mark too, with stack id
 *   MT_SNAPSHOT_UNRECORDED, and records whose block glibc holds free (a free mtrace missed) are
 *   left out; r->heap_walked says whether it was, r->heap_refused why not. The stop is taken
 *   again (at most 50 times, 1 to 10 ms apart) while a stopped thread holds an arena's lock, and
 *   5 times while a structure does not validate (one half made by a stopped thread).
 *   Without the walk, heap memory outside records is not read, so pointers held only there are
 *   not seen.
 * - mt_reach_rule() is the one rule for calling unreachable blocks lost, for leaks/1 and the
 *   exit report alike: only when every live block was known to the scan, by the walk or by
 *   complete records (no sampling, no drop, no reset, no attach to a running process).
 */
#ifndef MTRACE_REACH_H
#define MTRACE_REACH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mark/beam_heaps.h"
#include "mark/glibc_heap.h"
#include "mark/rules.h"
#include "mark/snapshot.h"

#define MT_REACH_MISSED 256

enum mt_reach_state {
    MT_REACH_REACHABLE = 1,
    MT_REACH_DIRECT,
    MT_REACH_INDIRECT,
    MT_REACH_TRACKED, /* mtrace_track'ed resources: not memory, never marked */
};

/* A thread as mt_reach_paths() names it: its stack pointer and the mapping that holds it (0 and
 * 0 when none does), its thread pointer, and its frames as they were while it was stopped (cfi.h's
 * mt_cfi_frames: frames of them, innermost first; the calling thread's from the mark's own
 * frame); tid 0 for a thread that did not stop. */
#define MT_REACH_FRAMES 48
struct mt_reach_thread {
    pid_t tid;
    uintptr_t sp, lo, hi;
    uintptr_t tp; /* its thread pointer (world.h) */
    int frames;
    uintptr_t ip[MT_REACH_FRAMES], top[MT_REACH_FRAMES];
};

/* What marked a block first (mt_reach_paths), other than a block: a word of memory outside every
 * block (via: its address), a register (via: the thread's index in thread[] << 8 | the
 * register's index in world.h's order * 8), or the thread's alternate signal stack (via: the
 * thread's index << 8). */
#define MT_REACH_MEMORY ((size_t)-3)
#define MT_REACH_REGISTER ((size_t)-4)
#define MT_REACH_ALTSTACK ((size_t)-5)
/* A lost block that no other block marked (direct): a lost chain starts at it. */
#define MT_REACH_LOST ((size_t)-6)

struct mt_reach {
    struct mt_snapshot snap;
    uint8_t *state;              /* by snapshot record */
    size_t threads, stopped;     /* other threads, and those that stopped */
    uint64_t pause_ns;           /* how long the other threads were stopped */
    uint64_t root_bytes;         /* bytes of roots read */
    uint64_t block_bytes;        /* bytes of marked blocks read */
    uint64_t unreadable_bytes;   /* bytes that could not be read */
    uint64_t vm_free_bytes;      /* bytes of the VM's free blocks not read (layouts.h) */
    struct mt_beam_cleared left; /* bytes not read: process heaps' unused parts, id lists */
    size_t processes;            /* Erlang processes, when their layout is known */
    size_t processes_read_whole; /* of them, those whose heaps were read whole (running) */
    int heap_walked;             /* glibc's heap was walked: every live block is in snap */
    const char *heap_refused;    /* why it was not, when it was asked for */
    size_t missed_frees;         /* records left out: glibc holds their blocks free */
    struct mt_record missed[MT_REACH_MISSED]; /* the first of them, for mt_forget_missed() */
    size_t unrecorded;                        /* blocks known from the walk alone */
    /* By snapshot record: the rule (rules.h) of the first discounted word of reachable memory
     * that points into the block, MT_RULE_NONE when none does (a lost block is then lost
     * definitely, else possibly), and that word's address (for registers as via below); a lost
     * block that such a lost block reaches gets its rule, and the address of the first word of a
     * lost block that points into it. By rule: the words it discounted. */
    uint8_t *rule;
    uintptr_t *rule_at;
    uint64_t discounted[MT_RULES];
    size_t mmapped_missing; /* mmapped chunks glibc counts that the walk did not find */
    size_t bad_chunks;      /* chunks or lists the walk could not validate (glibc_heap.h's bad) */
    /* mt_reach_paths() only (else NULL): by snapshot record, the block whose word marked it (or
     * MT_REACH_MEMORY, _REGISTER, _ALTSTACK), and the address of that word (see above); the
     * threads, the stopped ones in the world's order and then the caller, threads_noted of them */
    size_t *parent;
    uintptr_t *via;
    struct mt_reach_thread *thread;
    size_t threads_noted;
    void *map;
    size_t map_len;
};

enum mt_lost_rule {
    MT_LOST_KNOWN,    /* every live block was known: unreachable ones are lost */
    MT_LOST_SAMPLING, /* MTRACE_SAMPLE left most blocks unrecorded, and the heap was not walked */
    MT_LOST_DROPPED,  /* the table dropped records, and the heap was not walked */
    MT_LOST_RESET,    /* a reset forgot records, and the heap was not walked */
    MT_LOST_ATTACHED, /* recording began at an attach, and the heap was not walked */
    MT_LOST_NOT_RECORDING, /* this copy records nothing (no preload), and the heap was not walked */
};

int mt_reach_run(struct mt_reach *r, int at_exit, int walk_heap);

/* Why blocks are kept. mt_reach_run(r, 0, 1), whose mark is a breadth-first search from the roots
 * (every root is read before any block) that notes, for each block it marks, what marked it:
 * r->parent and r->via. Following parents from a reachable block back to a root gives a shortest
 * chain of pointers (fewest blocks) from the roots to it. Lost blocks get parents too: each
 * indirect one the lost block whose word marked it first, read breadth first from the direct ones,
 * whose parent is MT_REACH_LOST. Costs 16 bytes a live block more than a mark; one at a time (a
 * mutex), as mt_reach_run() is.
 * mt_reach_path(): that chain for block i, the block itself first, the one a root points to (or
 * the direct lost block) last, in chain[0 .. min(n, cap)); returns n, 0 when i is no heap block.
 * The asker holds the address it asks about (an integer in its process's heap, copies in its
 * thread's frames and registers), and such a word would be the shortest chain to any block:
 * masked is that address xor MT_REACH_MASK (so that the caller need keep no copy of it), and a
 * word equal to it is not counted in the calling thread's stack and registers, nor in anonymous
 * mappings that are no other thread's stack and no loaded object's data or bss (the VM's memory;
 * the objects' writable segments are listed, with dl_iterate_phdr, before the threads stop).
 * Words in libraries' data, other threads' stacks and blocks are. 0: none is hidden. */
#define MT_REACH_MASK ((uintptr_t)0x3c3c3c3c3c3c3c3cULL)
int mt_reach_paths(struct mt_reach *r, uintptr_t masked);
/* mt_reach_run() with the paths of mt_reach_paths(), nothing hidden: for a report whose writer
 * holds no address (the exit report's chains, MTRACE_REPORT_WHY). */
int mt_reach_run_paths(struct mt_reach *r, int at_exit, int walk_heap);
size_t mt_reach_path(const struct mt_reach *r, size_t i, size_t *chain, size_t cap);
/* For each stack id below ids, the index in r->snap of its oldest block the mark reached (lost: its
 * oldest indirect lost block, else its oldest direct one), or MT_SNAPSHOT_NONE, into
 * oldest[0 .. ids): the block whose chain the readers show for a site. */
void mt_reach_oldest(const struct mt_reach *r, size_t *oldest, size_t ids, int lost);
enum mt_lost_rule mt_reach_rule(const struct mt_reach *r, int after_reset);

/* Whether a scan must walk glibc's heap for mt_reach_rule to call blocks lost: the records alone
 * miss live blocks (the rule without a walk would not be MT_LOST_KNOWN). Any thread. */
int mt_reach_needs_walk(int after_reset);

/* The walk alone, for a census of the heap: the threads stopped, glibc's heap walked into *heap
 * and joined to a snapshot of the records in r->snap (as mt_reach_run does, without the mark:
 * r->state stays NULL). Returns 0 with r->heap_walked set, or with r->heap_refused saying why it
 * was not (nothing to drop then); -1 with errno when the threads could not be stopped.
 * mt_reach_drop() and mt_heap_drop() release what it made. */
int mt_reach_heap(struct mt_reach *r, struct mt_heap *heap);
void mt_reach_drop(struct mt_reach *r);

#endif
