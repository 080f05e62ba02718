/* inject.c: mtrace-inject, a ptrace injector of mtrace.so's entry points into a running process,
 * without gdb (bin/mtrace-attach.sh runs it for attach, report and detach).
 *
 *   mtrace-inject PID LIBRARY MODE ENTRY ARG WAIT PREFIX
 *
 * It seizes every thread of PID, stops at the next entry of malloc, calloc, realloc or free (a
 * breakpoint there: a thread entering the allocator holds neither the allocator's lock nor, but
 * for the loader's own allocations, the loader's), and on that thread loads LIBRARY (MODE 2: as
 * bytes, a memfd of the process's own that it dlopens as /proc/self/fd/N, so that its user and
 * mounts need not see LIBRARY's path; by the path where it has no memfd_create or /proc), then
 * calls the library's int ENTRY(const char *ARG) (ENTRY(void) when ARG is "-"), then
 * detaches, the thread's registers, errno and every byte of the process as they were. Only the
 * general registers are saved and written back (PTRACE_GETREGS/SETREGS), never the extended
 * state: Linux takes an XSAVE buffer of the CPU's full size back, which a fixed-size one (gdb 13's,
 * on a CPU with AMX) is not. Each call runs on the thread's stack below its red zone, 16-byte
 * aligned, and returns to address 0, where the fault it takes is the injector's, not the
 * program's. MODE 6 (RTLD_NOLOAD) only finds a copy loaded already (as bytes: by its code's
 * mapping and its own symbols; by path: dlopen), or else the preloaded one.
 *
 * Prints, for bin/mtrace-attach.sh, "mtrace-rc N" with ENTRY's result, "mtrace-paused-ms T" with
 * how long every thread was stopped while the breakpoints went in, "mtrace-held-ms H C" with how
 * long the thread that made the calls was held and its time on a CPU meanwhile (-1: not known),
 * "mtrace-abandoned WHY" when it gave up (WHY is "stopped" for a process stopped by its user),
 * and "mtrace-error TEXT" when dlopen fails or the result is not 0 (PREFIX, then
 * mtrace_lib_attach_reason's text, or for mtrace_lib_leaks strerror of the errno it left). Exit
 * status 0 once ENTRY was called; 3 when ptrace is refused (the script says why); 4 when no
 * thread entered the allocator within WAIT seconds, or the wait was interrupted (SIGINT,
 * SIGTERM): the process runs on untouched, and when it was stopped (SIGSTOP, Ctrl-Z) or is
 * stopped meanwhile, it stays so; 1 on any other error, with one line on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define THREADS_MAX 4096
#define BREAKS_MAX 32
#define RED_ZONE 128
#define CALL_SECONDS 30

static pid_t pid;
static int mem = -1;
static pid_t threads[THREADS_MAX];
static size_t nthreads;
static struct breakpoint {
    uintptr_t at;
    unsigned char byte;
} breaks[BREAKS_MAX];
static size_t nbreaks;
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void fail(int status, const char *what)
{
    fprintf(stderr, "mtrace-inject: %s\n", what);
    exit(status);
}

static int peek(uintptr_t at, void *to, size_t len)
{
    return pread(mem, to, len, (off_t)at) == (ssize_t)len ? 0 : -1;
}

static int poke(uintptr_t at, const void *from, size_t len)
{
    return pwrite(mem, from, len, (off_t)at) == (ssize_t)len ? 0 : -1;
}

/* The load address of the object loaded from a file whose path ends with suffix, from its code's
 * mapping (executable; its address less its offset in the file: a linker lays a shared object's
 * code at the same offset in the file and in memory), and its path (the process's view, read
 * through /proc/PID/root; a memfd's, which has none, through /proc/PID/map_files: the very file
 * mapped); 0 when none. Mappings of the file that are not code (mtrace's symbolizer maps the
 * files it reads) are not taken. */
static uintptr_t base_of(const char *suffix, char *path, size_t cap)
{
    char name[64], line[4096];
    snprintf(name, sizeof name, "/proc/%d/maps", pid);
    FILE *f = fopen(name, "r");
    uintptr_t base = 0;
    while (f && !base && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8] = "", file[4096] = "";
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &lo, &hi, perms, &off, file) < 4 ||
            perms[2] != 'x' || off > lo)
            continue;
        size_t n = strlen(file), s = strlen(suffix);
        if (n >= s && !strcmp(file + n - s, suffix)) {
            base = lo - off;
            if (!strncmp(file, "/memfd:", 7))
                snprintf(path, cap, "/proc/%d/map_files/%lx-%lx", pid, lo, hi);
            else
                snprintf(path, cap, "/proc/%d/root%s", pid, file);
        }
    }
    if (f) fclose(f);
    return base;
}

/* The value of each of the n dynamic symbols names[] in the ELF file at path (0 for a missing
 * one), and in *type its e_type (when type is not NULL); -1 when the file cannot be read as one.
 * Only the headers and the dynamic symbol table are read: a program may be large. */
static int symbols(const char *path, const char *const *names, uintptr_t *values, size_t n,
                   int *type)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    Elf64_Ehdr eh;
    if (fd < 0 || fstat(fd, &st) != 0 || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr) > (size_t)st.st_size) {
        if (fd >= 0) close(fd);
        return -1;
    }
    if (type) *type = eh.e_type;
    size_t shbytes = (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    Elf64_Shdr *sh = malloc(shbytes ? shbytes : 1);
    int ok = sh && pread(fd, sh, shbytes, (off_t)eh.e_shoff) == (ssize_t)shbytes;
    for (size_t i = 0; i < n; i++)
        values[i] = 0;
    for (size_t s = 0; ok && s < eh.e_shnum; s++) {
        if (sh[s].sh_type != SHT_DYNSYM || sh[s].sh_link >= eh.e_shnum) continue;
        const Elf64_Shdr *ss = &sh[s], *ts = &sh[sh[s].sh_link];
        if (ss->sh_offset + ss->sh_size > (size_t)st.st_size ||
            ts->sh_offset + ts->sh_size > (size_t)st.st_size)
            break;
        Elf64_Sym *sym = malloc(ss->sh_size ? ss->sh_size : 1);
        char *str = malloc(ts->sh_size + 1);
        if (sym && str &&
            pread(fd, sym, ss->sh_size, (off_t)ss->sh_offset) == (ssize_t)ss->sh_size &&
            pread(fd, str, ts->sh_size, (off_t)ts->sh_offset) == (ssize_t)ts->sh_size) {
            str[ts->sh_size] = 0;
            for (size_t k = 0, count = ss->sh_size / sizeof *sym; k < count; k++) {
                if (sym[k].st_shndx == SHN_UNDEF || sym[k].st_name >= ts->sh_size) continue;
                for (size_t i = 0; i < n; i++)
                    if (!values[i] && !strcmp(str + sym[k].st_name, names[i]))
                        values[i] = sym[k].st_value;
            }
        }
        free(sym);
        free(str);
    }
    free(sh);
    close(fd);
    return ok ? 0 : -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The entries of malloc, calloc, realloc and free in every object mapped but libc, the loader
 * and mtrace, that defines them: an allocator the program is linked with (jemalloc, tcmalloc,
 * mimalloc), or its own. A thread entering any allocator holds none of its locks; a program whose
 * malloc is not glibc's never enters glibc's. Writes at most cap addresses to out; returns how
 * many. */
static size_t allocator_entries(uintptr_t *out, size_t cap)
{
    static const char *const names[4] = {"malloc", "calloc", "realloc", "free"};
    char name[64], line[4096], last[4096] = "";
    snprintf(name, sizeof name, "/proc/%d/maps", pid);
    FILE *f = fopen(name, "r");
    size_t got = 0;
    while (f && got + 4 <= cap && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, off;
        char perms[8] = "", file[4096] = "", path[4200];
        if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &lo, &hi, perms, &off, file) < 5 ||
            perms[2] != 'x' || off > lo || file[0] != '/' || !strcmp(file, last) ||
            ends_with(file, "/libc.so.6") || strstr(file, "/ld-linux") ||
            ends_with(file, "/mtrace.so") || !strncmp(file, "/memfd:", 7))
            continue;
        snprintf(last, sizeof last, "%s", file);
        snprintf(path, sizeof path, "/proc/%d/root%s", pid, file);
        uintptr_t v[4];
        int type = 0;
        if (symbols(path, names, v, 4, &type) != 0) continue;
        for (int i = 0; i < 4; i++)
            if (v[i]) out[got++] = v[i] + (type == ET_EXEC ? 0 : lo - off);
    }
    if (f) fclose(f);
    return got;
}

static int traced(pid_t tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i] == tid) return 1;
    return 0;
}

static void forget(pid_t tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i] == tid) threads[i] = threads[--nthreads];
}

/* Seizes every thread, until a listing finds none new (threads may start meanwhile; the clone
 * option seizes those started later). Returns 0, or the errno of the first refusal. */
static int seize_all(void)
{
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/task", pid);
    for (int added = 1; added;) {
        added = 0;
        DIR *d = opendir(name);
        if (!d) return ESRCH;
        for (struct dirent *e; (e = readdir(d));) {
            pid_t tid = (pid_t)atoi(e->d_name);
            if (tid <= 0 || traced(tid) || nthreads == THREADS_MAX) continue;
            if (ptrace(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACECLONE) != 0) {
                int err = errno;
                if (err == ESRCH) continue; /* it exited meanwhile */
                closedir(d);
                return err;
            }
            threads[nthreads++] = tid;
            added = 1;
        }
        closedir(d);
    }
    return 0;
}

static void set_breaks(int on)
{
    for (size_t i = 0; i < nbreaks; i++) {
        unsigned char b = on ? 0xCC : breaks[i].byte;
        poke(breaks[i].at, &b, 1);
    }
}

static int is_break(uintptr_t at)
{
    for (size_t i = 0; i < nbreaks; i++)
        if (breaks[i].at == at) return 1;
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Thread tid's time on a CPU so far, in seconds, as the kernel counts it
 * (/proc/PID/task/TID/schedstat); -1 where it keeps no such count. */
static double cpu_time(pid_t tid)
{
    char name[64];
    unsigned long long ns;
    snprintf(name, sizeof name, "/proc/%d/task/%d/schedstat", pid, tid);
    FILE *f = fopen(name, "r");
    if (!f) return -1;
    int n = fscanf(f, "%llu", &ns);
    fclose(f);
    return n == 1 ? (double)ns / 1e9 : -1;
}

/* A thread stopped at one of the breakpoints, after they are gone: it goes back to the
 * instruction the breakpoint stood for. */
static void rewind_break(pid_t tid)
{
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, tid, 0, &r) == 0 && is_break(r.rip - 1)) {
        r.rip--;
        ptrace(PTRACE_SETREGS, tid, 0, &r);
    }
}

/* The thread that tid, stopped at its clone event, started: seized by the clone option, and
 * listed; 0 when none is. */
static pid_t adopt(pid_t tid)
{
    unsigned long child;
    if (ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) != 0 || traced((pid_t)child) ||
        nthreads == THREADS_MAX)
        return 0;
    threads[nthreads++] = (pid_t)child;
    return (pid_t)child;
}

/* Lets a stopped thread go on after the stop waitpid reported as status: a signal it was to
 * receive is delivered, the stops of ptrace itself are not. A group-stop (SIGSTOP, Ctrl-Z) is
 * kept, until the thread's SIGCONT, unless through (the thread that makes the calls, which must
 * come back from them). */
static void resume(pid_t tid, int status, int through)
{
    int sig = WSTOPSIG(status), event = status >> 16;
    if (event == PTRACE_EVENT_CLONE) {
        adopt(tid);
        sig = 0;
    } else if (event == PTRACE_EVENT_STOP && sig != SIGTRAP && !through) {
        ptrace(PTRACE_LISTEN, tid, 0, 0);
        return;
    } else if (event == PTRACE_EVENT_STOP || sig == SIGTRAP) {
        sig = 0;
    }
    ptrace(PTRACE_CONT, tid, 0, sig);
}

/* Waits for a thread to enter the allocator; its id, or 0 on a timeout or an interrupt. */
static pid_t wait_for_break(double until)
{
    while (!interrupted && now() < until) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL | WNOHANG);
        if (tid == 0) {
            usleep(1000);
            continue;
        }
        if (tid < 0) return 0;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            forget(tid);
            if (!nthreads) fail(1, "the process exited meanwhile");
            continue;
        }
        if (WSTOPSIG(status) == SIGTRAP && !(status >> 16)) {
            struct user_regs_struct r;
            if (ptrace(PTRACE_GETREGS, tid, 0, &r) == 0 && is_break(r.rip - 1)) return tid;
        }
        resume(tid, status, 0);
    }
    return 0;
}

/* Calls fn(a, b) on thread tid, stopped, its registers saved in *saved: the call's frame lies
 * below the red zone of the stack the thread stopped on, with `data` (len bytes, when not NULL)
 * copied there first, its address then passed as the first argument instead of a. Returns 0 with
 * the call's result in *rax; -1 when it did not come back. */
static int call(pid_t tid, const struct user_regs_struct *saved, uintptr_t fn, uintptr_t a,
                uintptr_t b, const void *data, size_t len, uintptr_t *rax)
{
    struct user_regs_struct r = *saved;
    uintptr_t sp = (saved->rsp - RED_ZONE - len) & ~(uintptr_t)15, zero = 0;
    if (data) {
        if (poke(sp, data, len) != 0) return -1;
        a = sp;
    }
    sp -= 16;
    sp -= 8; /* the return address: at a function's entry, rsp + 8 is 16-byte aligned */
    if (poke(sp, &zero, sizeof zero) != 0) return -1;
    r.rsp = sp;
    r.rip = fn;
    r.rdi = a;
    r.rsi = b;
    r.rax = 0;
    r.orig_rax = (unsigned long)-1; /* no system call to restart */
    if (ptrace(PTRACE_SETREGS, tid, 0, &r) != 0 || ptrace(PTRACE_CONT, tid, 0, 0) != 0) return -1;
    double until = now() + CALL_SECONDS;
    for (;;) {
        int status;
        pid_t who = waitpid(-1, &status, __WALL | WNOHANG);
        if (who == 0) {
            if (now() > until) return -1;
            usleep(200);
            continue;
        }
        if (who < 0) return -1;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            forget(who);
            if (who == tid) fail(1, "the process died in the injected call");
            continue;
        }
        if (who != tid) {
            if (WSTOPSIG(status) == SIGTRAP && !(status >> 16)) rewind_break(who);
            resume(who, status, 0);
            continue;
        }
        if (WSTOPSIG(status) == SIGSEGV && ptrace(PTRACE_GETREGS, tid, 0, &r) == 0 && r.rip == 0) {
            *rax = r.rax;
            return 0;
        }
        resume(tid, status, 1);
    }
}

/* A C string of the process's at `at`, into out. */
static void string_at(uintptr_t at, char *out, size_t cap)
{
    size_t n = 0;
    while (at && n + 1 < cap && peek(at + n, &out[n], 1) == 0 && out[n])
        n++;
    out[n] = '\0';
}

/* Whether stopped thread tid has a SIGTRAP of its own pending: an int3 it ran, whose stop is
 * still to come. */
static int trap_pending(pid_t tid)
{
    struct __ptrace_peeksiginfo_args a = {.off = 0, .flags = 0, .nr = 32};
    siginfo_t si[32];
    long n = ptrace(PTRACE_PEEKSIGINFO, tid, &a, si);
    for (long i = 0; i < n; i++)
        if (si[i].si_signo == SIGTRAP) return 1;
    return 0;
}

/* Interrupts and detaches every thread, but for `stopped`, stopped already (0: none), which is
 * detached at once; a thread stopped at a breakpoint goes back before it. Returns whether a thread
 * was in a group-stop (SIGSTOP, Ctrl-Z), which it goes back to once detached: known here, as the
 * interrupt reports the stop's signal, and not after, as the thread wakes first to stop again. */
static int detach_all(pid_t stopped)
{
    int group_stopped = 0;
    if (stopped) {
        ptrace(PTRACE_DETACH, stopped, 0, 0);
        forget(stopped);
    }
    for (size_t i = 0; i < nthreads; i++)
        ptrace(PTRACE_INTERRUPT, threads[i], 0, 0);
    while (nthreads) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) break;
        if (!traced(tid)) continue;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            forget(tid);
            continue;
        }
        int sig = WSTOPSIG(status), event = status >> 16;
        group_stopped |= event == PTRACE_EVENT_STOP && sig != SIGTRAP;
        struct user_regs_struct r;
        if (sig == SIGTRAP && !event) {
            rewind_break(tid);
        } else if (ptrace(PTRACE_GETREGS, tid, 0, &r) == 0 && is_break(r.rip - 1) &&
                   trap_pending(tid)) {
            /* it ran a breakpoint whose SIGTRAP is still to come, which would kill it once
             * detached: back before it, on until that stop, and detached then (without the
             * SIGTRAP, just past a one-byte first instruction, push %rbp, is where it is) */
            r.rip--;
            ptrace(PTRACE_SETREGS, tid, 0, &r);
            ptrace(PTRACE_CONT, tid, 0, 0);
            continue;
        }
        /* a thread started meanwhile is seized, and detached in turn */
        pid_t child = event == PTRACE_EVENT_CLONE ? adopt(tid) : 0;
        if (child) ptrace(PTRACE_INTERRUPT, child, 0, 0);
        /* a signal on its way is delivered: a SIGSTOP then stops the process once detached */
        group_stopped |= !event && sig == SIGSTOP;
        int deliver = event || sig == SIGTRAP ? 0 : sig;
        ptrace(PTRACE_DETACH, tid, 0, deliver);
        forget(tid);
    }
    return group_stopped;
}

/* dlsym(handle, name) in the process: the name is written to the stack and passed second. */
static int dlsym_in(pid_t tid, const struct user_regs_struct *saved, uintptr_t dlsym_at,
                    uintptr_t handle, const char *name, uintptr_t *out)
{
    struct user_regs_struct r = *saved;
    size_t len = strlen(name) + 1;
    uintptr_t at = (saved->rsp - RED_ZONE - 4096 - len) & ~(uintptr_t)15;
    if (poke(at, name, len) != 0) return -1;
    /* the call's frame goes below the name */
    r.rsp = at;
    return call(tid, &r, dlsym_at, handle, at, NULL, 0, out);
}

/* The library's bytes in a file of the process's own, made by memfd_create in it: written
 * through /proc/PID/fd, so that neither the process's user nor its mounts (another namespace,
 * PrivateTmp, ProtectHome) need to see the library's path. *self: the name the process opens it
 * by. It stays open, close-on-exec: the loader names the library after it, and mtrace names its
 * own frames from it. Returns its descriptor, or -1 with nothing left open in the process. */
static int as_bytes(pid_t tid, const struct user_regs_struct *saved, uintptr_t memfd_create_at,
                    uintptr_t close_at, const char *library, char *self, size_t cap)
{
    static const char name[] = "mtrace.so";
    uintptr_t r = 0;
    if (call(tid, saved, memfd_create_at, 0, 1 /* MFD_CLOEXEC */, name, sizeof name, &r) != 0)
        return -1;
    int fd = (int)(uint32_t)r;
    if (fd < 0) return -1;
    char at[64], buf[65536];
    snprintf(at, sizeof at, "/proc/%d/fd/%d", pid, fd);
    int in = open(library, O_RDONLY | O_CLOEXEC), out = open(at, O_WRONLY | O_CLOEXEC);
    ssize_t n = 0;
    int ok = in >= 0 && out >= 0;
    while (ok && (n = read(in, buf, sizeof buf)) > 0)
        ok = write(out, buf, (size_t)n) == n;
    ok = ok && n == 0;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (!ok) {
        if (close_at) call(tid, saved, close_at, (uintptr_t)fd, 0, NULL, 0, &r);
        return -1;
    }
    snprintf(self, cap, "/proc/self/fd/%d", fd);
    return fd;
}

enum {
    DLOPEN,
    DLSYM,
    DLERROR,
    ERRNO,
    STRERROR,
    MALLOC,
    CALLOC,
    REALLOC,
    FREE,
    MEMFD_CREATE,
    CLOSE,
    LIBC_NAMES
};

int main(int argc, char **argv)
{
    if (argc != 8) fail(1, "usage: mtrace-inject PID LIBRARY MODE ENTRY ARG|- WAIT_SECONDS PREFIX");
    const char *prefix = argv[7];
    pid = (pid_t)atoi(argv[1]);
    const char *library = argv[2], *entry = argv[4], *arg = argv[5];
    int mode = atoi(argv[3]), with_arg = strcmp(arg, "-") != 0;
    double wait = atof(argv[6]);
    if (pid <= 0) fail(1, "no such process");
    setvbuf(stdout, NULL, _IOLBF, 0);

    static const char *const libc_names[LIBC_NAMES] = {
        "dlopen", "dlsym",   "dlerror", "__errno_location", "strerror", "malloc",
        "calloc", "realloc", "free",    "memfd_create",     "close"};
    uintptr_t libc[LIBC_NAMES];
    char path[4200];
    uintptr_t libc_base = base_of("/libc.so.6", path, sizeof path);
    if (!libc_base) fail(1, "the process has no glibc loaded");
    if (symbols(path, libc_names, libc, LIBC_NAMES, NULL) != 0 || !libc[DLOPEN] || !libc[DLSYM])
        fail(1, "libc.so.6 in the process has no dlopen (glibc 2.34 or later is needed)");
    for (int i = 0; i < LIBC_NAMES; i++)
        if (libc[i]) libc[i] += libc_base;
    /* the preloaded or attached mtrace.so's hooks are entered first */
    static const char *const hook_names[4] = {"malloc", "calloc", "realloc", "free"};
    uintptr_t hooks[4] = {0};
    char own[4200];
    uintptr_t own_base = base_of("/mtrace.so", own, sizeof own);
    /* else a copy an earlier attach loaded as bytes, which the maps name after its memfd */
    uintptr_t bytes_base = own_base ? 0 : base_of("/memfd:mtrace.so", own, sizeof own);
    uintptr_t base = own_base ? own_base : bytes_base;
    if (base && symbols(own, hook_names, hooks, 4, NULL) == 0)
        for (int i = 0; i < 4; i++)
            if (hooks[i]) hooks[i] += base;

    uintptr_t others[BREAKS_MAX - 8];
    size_t nothers = allocator_entries(others, sizeof others / sizeof *others);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    int err = seize_all();
    if (err) {
        detach_all(0);
        if (err == EPERM || err == EACCES) return 3;
        fail(1, err == ESRCH ? "no such process" : strerror(err));
    }
    char name[64];
    snprintf(name, sizeof name, "/proc/%d/mem", pid);
    if ((mem = open(name, O_RDWR | O_CLOEXEC)) < 0) {
        detach_all(0);
        return 3;
    }
    double stopped_at = now();
    for (size_t i = 0; i < nthreads; i++)
        ptrace(PTRACE_INTERRUPT, threads[i], 0, 0);
    /* every thread stopped: the breakpoints go in */
    int group_stopped = 0;
    for (size_t stopped = 0; stopped < nthreads;) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL);
        if (tid < 0) break;
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            forget(tid);
            continue;
        }
        if ((status >> 16) == PTRACE_EVENT_STOP) {
            group_stopped |= WSTOPSIG(status) != SIGTRAP;
            stopped++;
            continue;
        }
        resume(tid, status, 0);
        ptrace(PTRACE_INTERRUPT, tid, 0, 0);
    }
    if (group_stopped) {
        /* stopped by its user: it is theirs to continue, not ours (a PTRACE_CONT would); every
         * thread is let go as it stands, those in the group-stop staying there */
        for (size_t i = 0; i < nthreads; i++)
            ptrace(PTRACE_DETACH, threads[i], 0, 0);
        printf("mtrace-abandoned stopped\n");
        return 4;
    }
    const uintptr_t entries[] = {libc[MALLOC], libc[CALLOC], libc[REALLOC], libc[FREE],
                                 hooks[0],     hooks[1],     hooks[2],      hooks[3]};
    for (size_t i = 0; i < sizeof entries / sizeof *entries; i++)
        if (entries[i] && !is_break(entries[i]) && peek(entries[i], &breaks[nbreaks].byte, 1) == 0)
            breaks[nbreaks++].at = entries[i];
    for (size_t i = 0; i < nothers && nbreaks < BREAKS_MAX; i++)
        if (!is_break(others[i]) && peek(others[i], &breaks[nbreaks].byte, 1) == 0)
            breaks[nbreaks++].at = others[i];
    set_breaks(1);
    for (size_t i = 0; i < nthreads; i++)
        ptrace(PTRACE_CONT, threads[i], 0, 0);
    double paused = now() - stopped_at;

    pid_t tid = wait_for_break(now() + wait);
    set_breaks(0);
    if (!tid) {
        if (detach_all(0))
            printf("mtrace-abandoned stopped\n");
        else if (interrupted)
            printf("mtrace-abandoned interrupted\n");
        else
            printf("mtrace-abandoned no call to malloc within %s s\n", argv[6]);
        return 4;
    }
    double hit = now(), cpu_at_hit = cpu_time(tid);
    /* the call must not be cut short: a Ctrl-C from now on waits for its end */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    struct user_regs_struct saved;
    if (ptrace(PTRACE_GETREGS, tid, 0, &saved) != 0) fail(1, "the stopped thread vanished");
    saved.rip--; /* the breakpoint's instruction, run again once the thread goes on */

    uintptr_t errno_at = 0, h = 0, fn = 0, result = 0, bytes_reason = 0;
    int saved_errno = 0, ok, fd;
    char text[4096], self[64];
    if (libc[ERRNO] && call(tid, &saved, libc[ERRNO], 0, 0, NULL, 0, &errno_at) == 0)
        peek(errno_at, &saved_errno, sizeof saved_errno);
    if (bytes_base) {
        /* the copy loaded as bytes: its entry points at its base, by its own symbols */
        const char *const names[2] = {entry, "mtrace_lib_attach_reason"};
        uintptr_t v[2];
        ok = symbols(own, names, v, 2, NULL) == 0 && v[0];
        if (ok) {
            fn = bytes_base + v[0];
            bytes_reason = v[1] ? bytes_base + v[1] : 0;
        } else {
            printf("mtrace-error the mtrace.so in process %d has no %s\n", pid, entry);
        }
    } else if (mode != 6 && !own_base && libc[MEMFD_CREATE] &&
               (fd = as_bytes(tid, &saved, libc[MEMFD_CREATE], libc[CLOSE], library, self,
                              sizeof self)) >= 0) {
        ok = call(tid, &saved, libc[DLOPEN], 0, (uintptr_t)mode, self, strlen(self) + 1, &h) == 0;
        if (ok && !h) {
            /* a process without /proc: by its path, as the process sees it */
            uintptr_t r;
            if (libc[CLOSE]) call(tid, &saved, libc[CLOSE], (uintptr_t)fd, 0, NULL, 0, &r);
            ok = call(tid, &saved, libc[DLOPEN], 0, (uintptr_t)mode, library, strlen(library) + 1,
                      &h) == 0;
        }
    } else {
        ok = call(tid, &saved, libc[DLOPEN], 0, (uintptr_t)mode, library, strlen(library) + 1,
                  &h) == 0;
    }
    if (ok && !h && !bytes_base) {
        uintptr_t e = 0, found = 0;
        if (libc[DLERROR]) call(tid, &saved, libc[DLERROR], 0, 0, NULL, 0, &e);
        string_at(e, text, sizeof text);
        /* not loaded by name: the preloaded copy's entry points, in the global scope */
        if (mode == 6) dlsym_in(tid, &saved, libc[DLSYM], 0, "mtrace_lib_active", &found);
        if (!found) {
            if (mode == 6)
                printf("mtrace-error mtrace is not attached to process %d (nor preloaded)\n", pid);
            else
                printf("mtrace-error %s\n", text);
            ok = 0;
        }
    }
    /* dlsym(handle, name): the name is the second argument */
    if (ok && !bytes_base) {
        ok = dlsym_in(tid, &saved, libc[DLSYM], h, entry, &fn) == 0 && fn;
        if (!ok) printf("mtrace-error %s has no %s\n", library, entry);
    }
    if (ok) {
        ok = call(tid, &saved, fn, 0, 0, with_arg ? arg : NULL, with_arg ? strlen(arg) + 1 : 0,
                  &result) == 0;
        int rc = (int)(uint32_t)result, call_errno = 0;
        if (errno_at) peek(errno_at, &call_errno, sizeof call_errno);
        if (ok) printf("mtrace-rc %d\n", rc);
        if (ok && rc != 0) {
            uintptr_t reason = 0, s = 0;
            if (!strcmp(entry, "mtrace_lib_leaks")) {
                if (libc[STRERROR])
                    call(tid, &saved, libc[STRERROR], (uintptr_t)call_errno, 0, NULL, 0, &s);
            } else if (bytes_base ? (reason = bytes_reason) != 0
                                  : dlsym_in(tid, &saved, libc[DLSYM], h,
                                             "mtrace_lib_attach_reason", &reason) == 0 &&
                                        reason) {
                call(tid, &saved, reason, (uintptr_t)(uint32_t)rc, 0, NULL, 0, &s);
            }
            string_at(s, text, sizeof text);
            printf("mtrace-error %s%s\n", prefix, text);
        }
    }
    if (errno_at) poke(errno_at, &saved_errno, sizeof saved_errno);
    ptrace(PTRACE_SETREGS, tid, 0, &saved);
    double cpu = cpu_time(tid), held = now() - hit;
    detach_all(tid);
    /* every thread's stop, and the calling thread's: how long, and how much of it on a CPU (the
     * rest it waited for one, or for a lock, beside the process's other threads, which ran) */
    printf("mtrace-paused-ms %.1f\n", 1000 * paused);
    printf("mtrace-held-ms %.1f %.1f\n", 1000 * held,
           cpu >= 0 && cpu_at_hit >= 0 ? 1000 * (cpu - cpu_at_hit) : -1.0);
    return ok ? 0 : 1;
}
