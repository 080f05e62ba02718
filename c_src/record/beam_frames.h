/* beam_frames.h: the Erlang frames of the BEAM's JIT, for the erlang mode (MTRACE_UNWIND=erlang).
 *
 * The JIT's code lies in no loaded object. Started with +JPperf map, the JIT keeps frame pointers
 * ([fp] the caller's fp, [fp + 8] the return address into it, 0 past the outermost frame) and
 * writes /tmp/perf-<pid>.map; without it RBP holds anything, and no chain is followed. DWARF
 * unwinding stops at the first JIT frame; the unwind goes on from the RBP restored for that frame,
 * along the chain. Erlang frames lie on the process's own stack, in the VM's carriers: every word
 * of the chain is read with mt_proc_read (process_vm_readv: an unmapped word fails, never
 * faults), a window at a time, and each step is checked: aligned, below 2^47, outwards by less
 * than 1 MiB, a return address in no loaded object.
 *
 * Contract
 * - Any thread, the hook path included: no malloc, no lock, no stdio.
 * - mt_beam_perf_map() looks once (then remembers) whether this process holds its perf map open:
 *   the BEAM opens it as its JIT starts, before any NIF runs, and keeps it open; a file of that
 *   name it does not hold was left by an earlier process of the same pid.
 * - mt_beam_chain() follows the chain from fp, writing each return address to ips and its frame's
 *   fp to fps, at most max; returns how many, with *closed set when the chain ended at a link of 0
 *   (the outermost frame), not at a doubtful step.
 * - mt_beam_forked(), in a forked child: the perf map is looked at again (it is the parent's).
 */
#ifndef MTRACE_BEAM_FRAMES_H
#define MTRACE_BEAM_FRAMES_H

#include <stdint.h>

int mt_beam_perf_map(void);
int mt_beam_chain(uintptr_t fp, uintptr_t *ips, uintptr_t *fps, int max, int *closed);
void mt_beam_forked(void);

/* Whether ip lies in a loaded object (_dl_find_object: lock-free in glibc 2.35 and later). */
int mt_beam_in_object(uintptr_t ip);

/* A thread that runs the JIT's code (its ip in no loaded object) with its stack pointer outside
 * its own stack runs Erlang code on its process's stack, in the VM's carriers: its own stack
 * then holds live frames only above the scheduler's register block, which the JIT makes there
 * as it starts and below which every C call's frames go (rbx points into it, its first bytes
 * within an 8-bit displacement below: beam_asm.hpp's `registers`, process_main.cpp).
 * mt_beam_jit_stack(): where the live part of such a thread's own stack [lo, hi) starts; lo when
 * rbx points elsewhere. */
uintptr_t mt_beam_jit_stack(uintptr_t rbx, uintptr_t lo, uintptr_t hi);

#endif
