/* cfi.h: the table unwinder. Steps through this thread's stack with the call frame information of
 * each loaded object (.eh_frame, found through .eh_frame_hdr's sorted table), keeping for each
 * return address the few rules a step on x86-64 needs: where the CFA is (RSP or RBP plus an
 * offset), where the return address and the caller's RBP were saved. A step is then a look-up and
 * two loads: no system call, no lock, no signal mask, where libunwind's unw_backtrace takes its
 * locks and, on each new address, walks the loaded objects.
 *
 * It gives up, rather than guess, on what its rules cannot say (a CFA on another register or an
 * expression, a signal frame, a register rule it does not keep, a 64-bit .eh_frame, a table
 * encoded otherwise than gcc and clang write it) and on any read outside this thread's own stack:
 * the caller then unwinds with libunwind, which guards its reads. At an address in no object (JIT
 * code) libunwind ends the stack unless RBP is at most 16 KiB above the stack pointer, and then
 * guesses a frame along it: the table unwinder ends it in the same cases and gives up in the
 * others, as at an address its object has no rules for. So its stacks are libunwind's, frame for
 * frame (but for code in no object that reads, at a return address, as a signal return or a PLT
 * stub, which libunwind would take as one).
 *
 * Contract
 * - mt_cfi_backtrace() runs on the hook path of the calling thread: no malloc, no lock, no system
 *   call; it reads .eh_frame of objects found by _dl_find_object (lock-free in glibc 2.35 and
 *   later) and words of the thread's own stack in [its stack pointer, top).
 * - rows is the thread's own cache of rules by return address (mt_cfi_rows_bytes() bytes, zeroed
 *   or left by earlier calls of the same thread); NULL looks every address up afresh.
 * - Returns the number of frames written (ips: the return addresses from the caller of
 *   mt_cfi_backtrace outwards; sps: each frame's stack pointer after the return, i.e. its CFA), or
 *   -1 when a frame could not be stepped by these rules (nothing then is to be used).
 * - With jit (the erlang mode), a walk that reaches code in no object with RBP known asks
 *   jit->follow() (only then: a BEAM opens its perf map as its JIT starts); when that answers
 *   nonzero, the walk ends there, that frame included, and says so: jit->found, jit->rbp (RBP
 *   there, the first link of the Erlang frames' chain, beam_frames.h) and jit->rbp_at (the stack
 *   word RBP was restored from, 0 when never saved, as libunwind's save location of RBP says).
 *   Otherwise, and without jit, the walk ends there or gives up as libunwind's would.
 */
#ifndef MTRACE_CFI_H
#define MTRACE_CFI_H

#include <stddef.h>
#include <stdint.h>

struct mt_cfi_rows;

size_t mt_cfi_rows_bytes(void);

/* Called before and after each dlclose the program makes (unload.c): a thread's rows are dropped
 * at its next walk, since another object may come to the addresses of the one unloaded. The
 * loader's own unloads (glibc's gconv and NSS modules) are not seen. Any thread, no allocation. */
void mt_cfi_unloading(void);

struct mt_cfi_jit {
    int (*follow)(void);
    int found;
    uintptr_t rbp, rbp_at;
};

int mt_cfi_backtrace(struct mt_cfi_rows *rows, uintptr_t stack_hi, uintptr_t *ips, uintptr_t *sps,
                     int max, struct mt_cfi_jit *jit);

/* The frames of another thread, stopped (world.h) at pc with stack pointer sp and RBP rbp, its
 * stack [sp, hi): ips[k] is frame k's code address (frame 0: pc, the instruction it was stopped
 * at, looked up there; then return addresses, looked up at ip - 1) and tops[k] where its frame
 * ends (its CFA; hi for the outermost frame), so that frame k holds the words in
 * [tops[k - 1], tops[k]). Returns how many frames are known, at most max: the walk ends, without
 * a guess, at a frame these rules cannot step (code in no object, a signal frame), which is not
 * counted. Reads .eh_frame and the stack only; no malloc, no lock, no rows cache. The thread
 * must stay stopped. */
int mt_cfi_frames(uintptr_t pc, uintptr_t sp, uintptr_t rbp, uintptr_t hi, uintptr_t *ips,
                  uintptr_t *tops, int max);

#endif
