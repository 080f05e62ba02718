/* beam_regs.h: the JIT's float registers on each scheduler's stack, which the mark does not read.
 *
 * The JIT (OTP 24 and later, x86-64) keeps a scheduler's registers in one block it lays on the
 * scheduler's own stack as the thread starts: the X registers, then, a cache line aligned, 1024
 * float registers (MAX_REG doubles, 8 KiB). Nothing writes a float register but a float
 * instruction, and programs use few: the rest keep, for the thread's life, what the frames of
 * the thread's start left there, malloc's and free's among them (chunk addresses of its arena).
 * A block that malloc later hands out over such a chunk is kept by that word: why_test's asker
 * test, run 100 tries a node, missed 10 blocks of 1283 so (why/2: the scheduler's stack, 16 KiB
 * above its stack pointer: the 943rd float register, a free's frame around it). A float register
 * holds a double, never a pointer: the whole array is left out of the mark.
 *
 * Where it lies is learnt on each scheduler, by the one NIF that runs there before each mark
 * (nif/scrub.c): the JIT calls a NIF with argv at X0, and its Elixir caller computes a float
 * just before the call, which the JIT leaves in F0. F0 is the first word from argv up, at a
 * cache line, that holds that double's bits; OTP 25 and 27 both put it 1032 words above X0.
 *
 * Contract
 * - mt_beam_regs_note(argv, arity, f0): on the thread whose JIT called the NIF, with the double
 *   its caller left in F0. Notes where that thread's float registers lie, if argv lies on the
 *   thread's own stack (above the caller's frame, below its thread pointer, which glibc keeps at
 *   the stack's top) and the double is found within MT_BEAM_REGS_SEARCH words above argv's arity
 *   and below the thread pointer, at a cache line, with the whole array below the thread pointer
 *   by at most MT_BEAM_REGS_NEAR_TOP. No malloc, no lock (a slot claimed by compare-and-swap);
 *   any thread. Returns 0 when noted, -1 when not (a dirty scheduler's argv is a copy: nothing is
 *   noted).
 * - mt_beam_regs_gaps(g, world): with the other threads stopped, every noted thread that is
 *   among them, stopped, with the same thread pointer as when noted, gives the gap of its float
 *   registers (MT_BEAM_GAP_FREGS). mt_beam_gap_add's memory only. Returns 0, or -1 when memory
 *   for the gaps cannot be mapped.
 */
#ifndef MTRACE_BEAM_REGS_H
#define MTRACE_BEAM_REGS_H

#include <stddef.h>
#include <stdint.h>

#include "mark/beam_heaps.h"
#include "mark/world.h"

#define MT_BEAM_FREGS 1024 /* MAX_REG: the float registers of a scheduler */
#define MT_BEAM_REGS_SEARCH 4096
#define MT_BEAM_REGS_NEAR_TOP ((uintptr_t)1 << 20)

int mt_beam_regs_note(const uint64_t *argv, unsigned arity, double f0);
int mt_beam_regs_gaps(struct mt_beam_gaps *g, const struct mt_world *world);

#endif
