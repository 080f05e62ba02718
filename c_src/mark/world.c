/* world.c: stopping the other threads (see world.h).
 *
 * The stopping thread sets `state` to STOPPING, lists /proc/self/task with getdents64 (opendir
 * would call malloc) and sends each thread the signal with tgkill. A thread's handler finds its
 * entry by tid, saves its registers from the signal's ucontext, says it stopped, and sleeps on
 * the futex `state` until it leaves STOPPING; `inside` counts the handlers that have not
 * returned yet, so that a stop never begins while a thread still sits in the previous one's
 * handler (its signal would be blocked there, and it would look unresponsive). */
#define _GNU_SOURCE
#include "mark/world.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/proc.h"
#include "base/writer.h"
#include "record/recorder.h"

#define MAX_THREADS 8192

enum { IDLE, STOPPING };

static pthread_mutex_t one_stop = PTHREAD_MUTEX_INITIALIZER;
static struct mt_world_thread *threads; /* mapped once and kept: a late handler may read it */
static size_t listed;                   /* entries of threads in use by the stop under way */
static int stop_signal;                 /* chosen at the first stop; 0 when none was free */
static int state = IDLE;
static int inside;
static pid_t excluded, excluded_in; /* mt_world_exclude()'s thread, and its process */

static const int saved[MT_WORLD_REGS] = {
    REG_RAX, REG_RBX, REG_RCX, REG_RDX, REG_RSI, REG_RDI, REG_RBP, REG_RSP, REG_R8,
    REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP, REG_EFL,
};

const char *const mt_world_reg_names[MT_WORLD_REGS] = {
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8",
    "r9",  "r10", "r11", "r12", "r13", "r14", "r15", "rip", "eflags",
};

void mt_world_regs(const void *ucontext, uintptr_t out[MT_WORLD_REGS])
{
    const greg_t *g = ((const ucontext_t *)ucontext)->uc_mcontext.gregs;
    for (int r = 0; r < MT_WORLD_REGS; r++)
        out[r] = (uintptr_t)g[saved[r]];
}

static pid_t gettid_(void)
{
    return (pid_t)syscall(SYS_gettid);
}

void mt_world_exclude(void)
{
    __atomic_store_n(&excluded, gettid_(), __ATOMIC_RELAXED);
    __atomic_store_n(&excluded_in, getpid(), __ATOMIC_RELEASE);
}

static void on_stop(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    int e = errno;
    __atomic_fetch_add(&inside, 1, __ATOMIC_ACQ_REL);
    if (si->si_code == SI_TKILL && si->si_pid == getpid() &&
        __atomic_load_n(&state, __ATOMIC_ACQUIRE) == STOPPING) {
        pid_t me = gettid_();
        size_t n = __atomic_load_n(&listed, __ATOMIC_ACQUIRE);
        for (size_t i = 0; i < n; i++) {
            struct mt_world_thread *t = &threads[i];
            if (t->tid != me || __atomic_load_n(&t->stopped, __ATOMIC_ACQUIRE)) continue;
            mt_world_regs(ctx, t->regs);
            t->sp = t->regs[MT_WORLD_RSP];
            stack_t alt;
            t->tp = (uintptr_t)pthread_self();
            t->altstack = sigaltstack(NULL, &alt) == 0 && !(alt.ss_flags & SS_DISABLE)
                              ? (uintptr_t)alt.ss_sp
                              : 0;
            __atomic_store_n(&t->stopped, 1, __ATOMIC_RELEASE);
            while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == STOPPING)
                syscall(SYS_futex, &state, FUTEX_WAIT_PRIVATE, STOPPING, NULL, NULL, 0);
            break;
        }
    }
    __atomic_fetch_sub(&inside, 1, __ATOMIC_RELEASE);
    errno = e;
}

/* The highest real-time signal nobody handles: the program's own signals stay its own. */
static int choose_signal(void)
{
    for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
        struct sigaction old;
        if (sigaction(sig, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
            old.sa_handler != SIG_DFL)
            continue;
        /* SA_ONSTACK: the BEAM's JIT runs Erlang code on each process's own small stack, inside
         * the VM's heap carriers; a signal frame written there could overrun it. The BEAM gives
         * every thread an alternate stack for exactly that reason. */
        struct sigaction sa = {.sa_sigaction = on_stop,
                               .sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK};
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) return sig;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    return mt_now_ns(CLOCK_MONOTONIC);
}

struct listing {
    struct mt_world *w;
    pid_t self, skip;
    long added;
};

static int list_one(int dir_fd, const char *name, void *arg)
{
    (void)dir_fd;
    struct listing *l = arg;
    struct mt_world *w = l->w;
    pid_t tid = 0;
    for (const char *c = name; *c >= '0' && *c <= '9'; c++)
        tid = tid * 10 + (*c - '0');
    if (tid <= 0 || tid == l->self || tid == l->skip) return 0;
    size_t i = 0;
    while (i < w->n && threads[i].tid != tid)
        i++;
    if (i < w->n || w->n == MAX_THREADS) return 0;
    threads[w->n] = (struct mt_world_thread){.tid = tid};
    __atomic_store_n(&listed, ++w->n, __ATOMIC_RELEASE);
    l->added++;
    return 0;
}

/* Adds the threads not listed yet, but self; returns how many, or -1 with errno. */
static long list_new(struct mt_world *w, pid_t self)
{
    /* a forked child has no copy of the thread, and its tid may be reused there */
    pid_t skip = __atomic_load_n(&excluded_in, __ATOMIC_ACQUIRE) == getpid()
                     ? __atomic_load_n(&excluded, __ATOMIC_RELAXED)
                     : 0;
    struct listing l = {w, self, skip, 0};
    return mt_proc_each("/proc/self/task", list_one, &l) < 0 ? -1 : l.added;
}

/* Whether thread tid blocks sig: then it cannot stop, and waiting for it would only add
 * MT_WORLD_WAIT_MS to the pause. A status that cannot be read says no (the thread is waited
 * for). */
static int blocks(pid_t tid, int sig)
{
    char path[48] = "/proc/self/task/", digits[24], text[4096];
    strcat(strcat(path, mt_utoa((uint64_t)tid, digits + sizeof digits)), "/status");
    const char *v = mt_proc_field(path, "SigBlk:", text, sizeof text);
    uint64_t mask = 0;
    for (; v; v++) {
        int d = *v >= '0' && *v <= '9' ? *v - '0' : *v >= 'a' && *v <= 'f' ? *v - 'a' + 10 : -1;
        if (d < 0) break;
        mask = mask << 4 | (uint64_t)d;
    }
    return (int)(mask >> (sig - 1) & 1);
}

static void wait_for(struct mt_world *w, size_t from, uint64_t deadline, pid_t pid)
{
    for (;;) {
        int waiting = 0;
        for (size_t i = from; i < w->n; i++) {
            struct mt_world_thread *t = &threads[i];
            if (t->tid <= 0 || t->blocking || __atomic_load_n(&t->stopped, __ATOMIC_ACQUIRE))
                continue;
            if (syscall(SYS_tgkill, pid, t->tid, 0) != 0 && errno == ESRCH)
                t->tid = -t->tid; /* gone */
            else
                waiting = 1;
        }
        if (!waiting || now_ns() >= deadline) return;
        struct timespec pause = {0, 50000};
        nanosleep(&pause, NULL);
    }
}

int mt_world_stop(struct mt_world *w)
{
    pthread_mutex_lock(&one_stop);
    int e = errno;
    *w = (struct mt_world){.stop_ns = now_ns()};
    if (!threads && !(threads = mt_mem_map(MAX_THREADS * sizeof *threads))) {
        pthread_mutex_unlock(&one_stop);
        errno = ENOMEM;
        return -1;
    }
    while (__atomic_load_n(&inside, __ATOMIC_ACQUIRE) > 0)
        sched_yield();
    if (!stop_signal) stop_signal = choose_signal();
    w->signal = stop_signal;
    w->t = threads;
    __atomic_store_n(&listed, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&state, STOPPING, __ATOMIC_SEQ_CST);
    pid_t self = gettid_(), pid = getpid();
    uint64_t deadline = w->stop_ns + (uint64_t)MT_WORLD_WAIT_MS * 1000000u;
    long added;
    /* Until a listing finds no thread that was not there before: a thread not yet stopped may
     * have started another. */
    while ((added = list_new(w, self)) > 0) {
        size_t from = w->n - (size_t)added;
        for (size_t i = from; i < w->n && stop_signal; i++)
            if (blocks(threads[i].tid, stop_signal))
                threads[i].blocking = 1;
            else if (syscall(SYS_tgkill, pid, threads[i].tid, stop_signal) != 0 && errno == ESRCH)
                threads[i].tid = -threads[i].tid;
        if (stop_signal) wait_for(w, from, deadline, pid);
    }
    if (added < 0 && w->n == 0) {
        e = errno;
        __atomic_store_n(&state, IDLE, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&one_stop);
        errno = e;
        return -1;
    }
    for (size_t i = 0; i < w->n; i++) {
        if (threads[i].tid <= 0) continue;
        if (__atomic_load_n(&threads[i].stopped, __ATOMIC_ACQUIRE))
            w->stopped++;
        else
            w->running++;
    }
    errno = e;
    return 0;
}

uint64_t mt_world_resume(struct mt_world *w)
{
    __atomic_store_n(&state, IDLE, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &state, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
    uint64_t pause = now_ns() - w->stop_ns;
    __atomic_store_n(&listed, 0, __ATOMIC_RELEASE);
    *w = (struct mt_world){0};
    pthread_mutex_unlock(&one_stop);
    return pause;
}
