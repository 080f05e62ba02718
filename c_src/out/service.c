/* service.c: the exit report, signal reports, CSV passes and reports on request (service.h). */
#define _GNU_SOURCE
#include "out/service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "base/config.h"
#include "base/mem.h"
#include "base/writer.h"
#include "mark/world.h"
#include "out/csv.h"
#include "out/report.h"
#include "record/account.h"
#include "record/hooks.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "symbols/symbols.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int started;       /* the service was set up in this copy (once a process) */
static int armed;         /* reports and CSV run: preloaded, or attached and not detached */
static pid_t first_pid;   /* the process that started; a forked child has another pid */
static unsigned numbered; /* reports this process has numbered */
static char prog[NAME_MAX + 1];
static struct mt_tally *signal_base, *snapshot_base;
static unsigned signal_prev; /* the previous signal report, 0 before the first */
static int wake_fd = -1;     /* the signal handler's only action is to write here */
static sem_t worker_out;     /* posted once the worker is out of the world's stops */

/* Incremental reports need a name per report: MTRACE_REPORT when it has a %s, else this. */
static const char default_signal_template[] = "%n-%p-%s.memlog";

static void say(const char *line)
{
    struct mt_out o;
    mt_out_init(&o, 2);
    mt_out_str(&o, line);
    mt_out_flush(&o);
}

/* Under lock. The name is taken once: a process title rewrite must not change report names. */
static void name_program(void)
{
    if (prog[0]) return;
    const char *n = program_invocation_short_name;
    size_t len = n ? strnlen(n, sizeof prog - 1) : 0;
    memcpy(prog, len ? n : "program", len ? len : 7);
    for (char *c = prog; *c; c++)
        if (*c == '/') *c = '_';
}

static struct mt_tally *new_base(void)
{
    return mt_mem_reserve((mt_config.stacks + 1) * sizeof(struct mt_tally));
}

/* Unlinks path if it still names the file made, not one put in its place since. */
static int remove_made(const char *path, const struct stat *made)
{
    struct stat now;
    return lstat(path, &now) == 0 && now.st_dev == made->st_dev && now.st_ino == made->st_ino &&
           unlink(path) == 0;
}

/* Writes req to dest (a template or "stderr"). A file not written whole is removed rather than
 * left to be read as the report. With quiet unset, a failure says one line. */
/* A copy of stderr taken at start: many programs close their stderr before they exit (ls,
 * through close_stdout), and the exit report comes after. Kept far above the descriptors a
 * program counts on, and used only while it is still the file it was (a program may dup2 over
 * it or close it). */
static int stderr_copy = -1;
static dev_t stderr_dev;
static ino_t stderr_ino;

static void keep_stderr(void)
{
    struct stat st;
    int fd = fcntl(2, F_DUPFD_CLOEXEC, 512);
    if (fd < 0) return;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return;
    }
    stderr_copy = fd;
    stderr_dev = st.st_dev;
    stderr_ino = st.st_ino;
}

static int report_stderr(void)
{
    struct stat st;
    if (stderr_copy >= 0 && fstat(stderr_copy, &st) == 0 && st.st_dev == stderr_dev &&
        st.st_ino == stderr_ino)
        return stderr_copy;
    return 2;
}

static int emit(const char *dest, const struct mt_report_req *req, int quiet)
{
    char path[PATH_MAX];
    int fd = 2;
    if (strcmp(dest, "stderr") == 0) {
        fd = report_stderr();
        strcpy(path, "stderr");
    } else if (mt_path_expand(dest, prog, req->seq, path, sizeof path) != 0) {
        if (!quiet) mt_say_error("cannot name the report file", dest, ENAMETOOLONG);
        errno = ENAMETOOLONG;
        return -1;
    } else if ((fd = mt_file_create(path)) < 0) {
        int e = errno;
        if (!quiet) mt_say_error("cannot create the report file", path, e);
        errno = e;
        return -1;
    }
    struct stat made;
    int rc = mt_report_write(fd, req), e = errno, removed = 0;
    if (strcmp(dest, "stderr") != 0) {
        int known = fstat(fd, &made) == 0;
        if (close(fd) != 0 && rc == 0) {
            rc = -1;
            e = errno;
        }
        removed = rc != 0 && known && remove_made(path, &made);
    }
    if (rc != 0 && !quiet)
        mt_say_error(removed ? "cannot write the whole report, removed it"
                             : "cannot write the report",
                     path, e);
    errno = e;
    return rc;
}

/* "on SIGUSR2"; a real-time signal has no abbreviation (sigabbrev_np gives NULL) and is named
 * from SIGRTMIN, which glibc sets at run time: "on SIGRTMIN+6". */
static void name_signal(int sig, char *when, size_t cap)
{
    if (sig < SIGRTMIN) {
        strcpy(when, "on SIG");
        strncat(when, sigabbrev_np(sig), cap - strlen(when) - 1);
    } else {
        mt_path_expand(sig > SIGRTMIN ? "on SIGRTMIN+%s" : "on SIGRTMIN", prog,
                       (unsigned)(sig - SIGRTMIN), when, cap);
    }
}

static void signal_report(void)
{
    char when[32], since[32] = "start";
    pthread_mutex_lock(&lock);
    name_signal(mt_config.report_signal, when, sizeof when);
    if (signal_prev) mt_path_expand("report %s", prog, signal_prev, since, sizeof since);
    const char *r = mt_config.report;
    struct mt_report_req req = {
        .prog = prog,
        .seq = ++numbered,
        .when = when,
        .base = signal_base,
        .since = since,
        .advance = 1,
    };
    if (emit(r && strstr(r, "%s") ? r : default_signal_template, &req, 0) == 0)
        signal_prev = req.seq;
    pthread_mutex_unlock(&lock);
}

static void csv_pass(void)
{
    pthread_mutex_lock(&lock);
    mt_csv_pass(prog);
    pthread_mutex_unlock(&lock);
}

static uint64_t now_ms(void)
{
    return mt_now_ns(CLOCK_MONOTONIC) / 1000000u;
}

static void *worker(void *arg)
{
    (void)arg;
    mt_guard_hold();
    mt_world_exclude();
    sem_post(&worker_out);
    uint64_t period = (uint64_t)mt_config.csv_period * 1000u, next = now_ms() + period;
    for (;;) {
        int timeout = -1;
        if (mt_config.csv) {
            uint64_t now = now_ms();
            timeout = next > now ? (int)(next - now) : 0;
        }
        struct pollfd p = {.fd = wake_fd, .events = POLLIN};
        if (poll(&p, 1, timeout) > 0 && (p.revents & POLLIN)) {
            uint64_t signals;
            if (read(wake_fd, &signals, sizeof signals) == (ssize_t)sizeof signals) signal_report();
        }
        if (mt_config.csv && now_ms() >= next && __atomic_load_n(&armed, __ATOMIC_ACQUIRE)) {
            csv_pass();
            next = now_ms() + period;
        }
    }
    return NULL;
}

static void on_signal(int sig)
{
    (void)sig;
    int e = errno;
    uint64_t one = 1;
    ssize_t w = write(wake_fd, &one, sizeof one);
    (void)w;
    errno = e;
}

static void before_fork(void)
{
    pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&lock);
}

/* The child has no background thread; its signal handler must not wake the parent's. */
static void after_fork_child(void)
{
    if (wake_fd >= 0) close(wake_fd);
    wake_fd = -1;
    numbered = 0;
    signal_prev = 0;
    pthread_mutex_unlock(&lock);
}

/* Until the worker has said which thread it is, a stop (the exit report's, in a program that
 * exits at once) would count it as one of the program's threads that cannot stop. Bounded: a
 * worker the scheduler keeps waiting costs start-up at most a second, and is miscounted. */
static void await_worker(void)
{
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += 1;
    while (sem_clockwait(&worker_out, CLOCK_MONOTONIC, &at) != 0 && errno == EINTR)
        ;
}

static int start_worker(void)
{
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd < 0) return -1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sem_init(&worker_out, 0, 0);
    int rc = pthread_create(&t, &attr, worker, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        await_worker();
        return 0;
    }
    close(wake_fd);
    wake_fd = -1;
    return -1;
}

/* The handler of MTRACE_REPORT_SIGNAL, while armed; a detach gives the signal back its old
 * disposition. Under lock. */
static struct sigaction signal_old;
static int signal_taken;

static void take_signal(void)
{
    if (!signal_base || wake_fd < 0 || signal_taken) return;
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    if (sigaction(mt_config.report_signal, &sa, &signal_old) != 0)
        say("mtrace: cannot handle MTRACE_REPORT_SIGNAL; no signal reports\n");
    else
        signal_taken = 1;
}

static void give_signal_back(void)
{
    if (signal_taken && sigaction(mt_config.report_signal, &signal_old, NULL) == 0)
        signal_taken = 0;
}

static void start(void)
{
    if (mt_config.report && !mt_config.account)
        say("mtrace: cannot reserve memory for report counts; reports show no peak\n");
    if (mt_config.report_signal && mt_config.account && !(signal_base = new_base()))
        say("mtrace: cannot reserve memory for signal reports; none will be written\n");
    if ((signal_base || mt_config.csv) && start_worker() != 0) {
        say("mtrace: cannot start the report thread; no signal reports and no CSV\n");
        signal_base = NULL;
    }
    take_signal();
}

static uint64_t stacks_so_far(void)
{
    return mt_stack_count();
}

/* Arms the exit report, signal reports and CSV as configured, setting them up the first time. */
static void serve(void)
{
    if (!mt_config.report && !mt_config.report_signal && !mt_config.csv) return;
    if (!mt_config_reports_here()) return;
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    if (!started) {
        name_program();
        first_pid = getpid();
        keep_stderr();
        start();
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        started = 1;
    } else {
        take_signal();
    }
    __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    mt_guard_release();
}

__attribute__((constructor)) static void boot(void)
{
    /* Only the copy that is the process's malloc (see hooks.c's constructor). */
    if (!mt_active() && (!mt_interposing() || !mt_start())) return;
    /* The symbolizer's first look at the modules, before the program can unload any. */
    mt_guard_hold();
    mt_symbols_start(stacks_so_far);
    /* in a BEAM, what NIF libraries allocate through the NIF API; with another allocator than
     * glibc's, what the program allocates through its own API */
    mt_attach_preloaded();
    mt_guard_release();
    serve();
}

void mt_service_attached(void)
{
    serve();
}

void mt_service_detached(void)
{
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
    give_signal_back();
    pthread_mutex_unlock(&lock);
    mt_guard_release();
}

static int exit_reported;

__attribute__((destructor)) static void report_at_exit(void)
{
    if (!__atomic_load_n(&armed, __ATOMIC_ACQUIRE) ||
        __atomic_exchange_n(&exit_reported, 1, __ATOMIC_ACQ_REL))
        return;
    int child = getpid() != first_pid;
    if (child && (mt_config.fork == MT_FORK_NONE || !mt_config_reports_here())) return;
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    if (mt_config.csv && !child) mt_csv_pass(prog);
    if (mt_config_exit_report()) {
        struct mt_report_req req = {
            .prog = prog,
            .seq = ++numbered,
            .when = "at exit",
            .at_exit = 1,
            .base = snapshot_base,
            .since = "the snapshot",
        };
        emit(mt_config_exit_report(), &req, 0);
    }
    pthread_mutex_unlock(&lock);
    mt_guard_release();
}

/* A program that ends with _exit (dash's sh -c, daemons after their work) runs no destructor:
 * the exit report is written here first, in the process mtrace started in. A forked child that
 * calls _exit (an exec that failed, a vfork child sharing its parent's memory) is left alone.
 * glibc's own exit() reaches the system call through an internal name, not this one. */
__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
    if (__atomic_load_n(&armed, __ATOMIC_ACQUIRE) && getpid() == first_pid) report_at_exit();
    for (;;)
        syscall(SYS_exit_group, status);
}

__attribute__((visibility("default"), noreturn, alias("_exit"))) void _Exit(int status);

int mt_service_report(const char *path, int fd, int leaks)
{
    if (!mt_active()) {
        errno = ENOSYS;
        return -1;
    }
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    name_program();
    struct mt_report_req req = {
        .prog = prog,
        .seq = ++numbered,
        .when = "on request",
        .leaks = leaks,
        .base = leaks ? NULL : snapshot_base,
        .since = "the snapshot",
    };
    const char *dest = path ? path : mt_config_exit_report();
    int rc;
    if (fd >= 0) {
        rc = mt_report_write(fd, &req);
    } else if (dest) {
        rc = emit(dest, &req, 1);
    } else {
        errno = EINVAL;
        rc = -1;
    }
    int e = errno;
    pthread_mutex_unlock(&lock);
    mt_guard_release();
    errno = e;
    return rc;
}

int mt_service_snapshot(void)
{
    if (!mt_active()) {
        errno = ENOSYS;
        return -1;
    }
    if (!mt_config.account) {
        errno = ENOTSUP;
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (!snapshot_base) snapshot_base = new_base();
    if (snapshot_base) {
        for (size_t id = 0, ids = mt_stack_count() + 1; id < ids; id++) {
            const struct mt_tally *t = &mt_account.tally[id];
            snapshot_base[id] = (struct mt_tally){
                __atomic_load_n(&t->alloc_bytes, __ATOMIC_RELAXED),
                __atomic_load_n(&t->alloc_blocks, __ATOMIC_RELAXED),
                __atomic_load_n(&t->free_bytes, __ATOMIC_RELAXED),
                __atomic_load_n(&t->free_blocks, __ATOMIC_RELAXED),
            };
        }
    } else {
        errno = ENOMEM;
        rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
