/* world.h: the process's other threads, stopped for a consistent look at memory.
 *
 * The reachability scan (reach.h) must see each block where it is: a pointer moved from one
 * place to another while the scan runs could be missed in both. So the other threads are stopped
 * as the Boehm collector stops them: each is sent a real-time signal (the highest one whose
 * disposition is the default, chosen once and kept), whose handler saves the thread's registers
 * stack pointer and alternate signal stack, and waits on a futex until resumed.
 *
 * Contract
 * - mt_world_stop() returns once every other thread has stopped, has exited, blocks the signal
 *   (read from its /proc status: it is not waited for), or has not answered within
 *   MT_WORLD_WAIT_MS (one stuck in the kernel); those that did not stop are counted in
 *   `running`, with their stack pointers unknown (sp 0). Threads started while the others stop
 *   are found by listing /proc/self/task again until no new one appears. The thread that called
 *   mt_world_exclude() is none of them: it is not signalled, waited for or counted.
 * - Between stop and resume the caller must not call malloc, take a lock, symbolize or print with
 *   stdio: a stopped thread may hold malloc's arena lock or any of mtrace's own. mtrace's table is
 *   safe (its readers skip slots another thread holds).
 * - The handler is installed at the first stop and stays: it does nothing unless a stop is under
 *   way, so a late copy of the signal is harmless. It keeps errno.
 * - One stop at a time: callers serialize (a mutex here); not from a signal handler or a hook.
 *   The thread list lives in mtrace's own memory (mem.h).
 * - x86-64 Linux only (registers from the signal's ucontext).
 */
#ifndef MTRACE_WORLD_H
#define MTRACE_WORLD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MT_WORLD_REGS 18 /* general registers a stopped thread saves */
#define MT_WORLD_WAIT_MS 500

struct mt_world_thread {
    pid_t tid;
    int stopped;  /* its handler ran and it waits */
    int blocking; /* it blocks the signal: not sent it, not waited for */
    uintptr_t sp; /* stack pointer where it was stopped, 0 when unknown */
    uintptr_t regs[MT_WORLD_REGS];
    uintptr_t altstack; /* its sigaltstack, which only the kernel may point to; 0 when none */
    uintptr_t tp;       /* its thread pointer (glibc's pthread_self(): its static TLS lies below) */
};

struct mt_world {
    struct mt_world_thread *t; /* the other threads */
    size_t n, stopped, running;
    int signal;       /* the signal used, 0 when none could be */
    uint64_t stop_ns; /* CLOCK_MONOTONIC when the stop started, for the pause's length */
};

/* The registers a stopped thread saves, in regs[] order, from a ucontext_t (a signal's, or
 * getcontext's); async-signal-safe. Their names ("rax", ..., "rsp" at 7, "rip", "eflags"). */
void mt_world_regs(const void *ucontext, uintptr_t out[MT_WORLD_REGS]);
extern const char *const mt_world_reg_names[MT_WORLD_REGS];
#define MT_WORLD_RBX 1
#define MT_WORLD_RBP 6
#define MT_WORLD_RSP 7
#define MT_WORLD_RIP 16

/* mtrace's own background thread (service.h) blocks every signal and touches none of the
 * program's memory: the calling thread is left out of every later stop. One thread at a time;
 * async-signal-safe. */
void mt_world_exclude(void);

/* Returns 0 (w describes the other threads), or -1 with errno when the thread list cannot be
 * read or its memory mapped: then nothing is stopped. */
int mt_world_stop(struct mt_world *w);

/* Lets every stopped thread go on and releases w's memory; returns the pause in nanoseconds. */
uint64_t mt_world_resume(struct mt_world *w);

#endif
