/* config.c: parses MTRACE_* once; see config.h for the contract. */
#define _GNU_SOURCE
#include "config.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "table.h"
#include "writer.h"

struct mt_config mt_config = {
    .slots = 4096,
    .slots_max = (size_t)1 << 26,
    .depth = 20,
    .stacks = 65536,
    .unwind = MT_UNWIND_LIBUNWIND,
    .csv_age = 60,
    .csv_period = 10,
    .fork_report = 1,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static size_t join(char *buf, size_t cap, const char *const *parts, size_t count)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        for (const char *c = parts[i]; *c && n < cap - 1; c++)
            buf[n++] = *c;
    buf[n] = '\0';
    return n;
}

/* Through mt_say, not stdio, which may allocate: this runs inside the first allocation. */
static void say(const char *name, const char *value, const char *why)
{
    const char *parts[] = {name, "=", value, ": ", why};
    mt_say(parts, COUNT(parts));
}

static char *utoa(size_t v, char *end)
{
    *--end = '\0';
    do
        *--end = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return end;
}

/* Reads an unsigned decimal in [lo, hi]; anything else keeps *out and says why. */
static void load_size(const char *name, size_t lo, size_t hi, size_t *out)
{
    const char *s = getenv(name);
    if (!s) return;
    size_t v = 0;
    const char *c = s;
    if (*c == '\0') goto bad;
    for (; *c; c++) {
        size_t d = (size_t)(*c - '0');
        if (*c < '0' || *c > '9' || d > hi || v > (hi - d) / 10) goto bad;
        v = v * 10 + d;
    }
    if (v < lo) goto bad;
    *out = v;
    return;
bad:;
    char why[160], lo_s[24], hi_s[24], def_s[24];
    const char *parts[] = {"expected a whole number from ",
                           utoa(lo, lo_s + sizeof lo_s),
                           " to ",
                           utoa(hi, hi_s + sizeof hi_s),
                           "; using ",
                           utoa(*out, def_s + sizeof def_s)};
    join(why, sizeof why, parts, COUNT(parts));
    say(name, s, why);
}

/* A private copy: the program may rewrite its environment (setenv, a process title) later. */
static const char *load_text(const char *name, char *buf, size_t cap)
{
    const char *s = getenv(name);
    if (!s) return NULL;
    size_t n = strlen(s);
    if (n == 0 || n >= cap) {
        say(name, s, n ? "longer than a path may be; ignored" : "empty; ignored");
        return NULL;
    }
    memcpy(buf, s, n + 1);
    return buf;
}

/* The n of "+n" (after RTMIN) or "-n" (after RTMAX), 0 for nothing, -1 when malformed. */
static long rt_offset(const char *s, char sign)
{
    char *end;
    if (*s == '\0') return 0;
    if (s[0] != sign || s[1] < '0' || s[1] > '9') return -1;
    long n = strtol(s + 1, &end, 10);
    return *end == '\0' ? n : -1;
}

/* A name with or without "SIG", or a number, of a signal that is safe to take: one whose default
 * only ends the program, or a real-time one (SIGRTMIN is glibc's, at run time). A fault signal's
 * handler that returns re-runs the fault (a report each time, forever), and a handler on SIGPIPE
 * or SIGCHLD changes what the program does; those are refused, by name and by number. 0 (no
 * signal) when refused. */
static int load_signal(const char *name)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},    {"USR1", SIGUSR1},
                 {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},    {"WINCH", SIGWINCH},
                 {"URG", SIGURG},   {"PROF", SIGPROF}, {"VTALRM", SIGVTALRM}};
    const char *s = getenv(name);
    if (!s) return 0;
    const char *bare = strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
    long rtmin = SIGRTMIN, rtmax = SIGRTMAX, v = -1, n;
    char *end;
    for (size_t i = 0; i < COUNT(names); i++)
        if (strcmp(bare, names[i].name) == 0) v = names[i].sig;
    if (strncmp(bare, "RTMIN", 5) == 0 && (n = rt_offset(bare + 5, '+')) >= 0) v = rtmin + n;
    if (strncmp(bare, "RTMAX", 5) == 0 && (n = rt_offset(bare + 5, '-')) >= 0) v = rtmax - n;
    if (s[0] >= '0' && s[0] <= '9' && (v = strtol(s, &end, 10), *end != '\0')) v = -1;
    int safe = v >= rtmin && v <= rtmax;
    for (size_t i = 0; i < COUNT(names); i++)
        safe = safe || v == names[i].sig;
    if (safe) return (int)v;
    char why[256], lo_s[24], hi_s[24];
    const char *parts[] = {"expected HUP, INT, QUIT, USR1, USR2, ALRM, TERM, WINCH, URG, PROF, "
                           "VTALRM or a real-time signal (RTMIN+n, RTMAX-n: ",
                           utoa((size_t)rtmin, lo_s + sizeof lo_s), " to ",
                           utoa((size_t)rtmax, hi_s + sizeof hi_s),
                           "), by name or number; no signal reports"};
    join(why, sizeof why, parts, COUNT(parts));
    say(name, s, why);
    return 0;
}

/* In secure-execution mode (a setuid or setgid program: AT_SECURE, as glibc's secure_getenv
 * decides) the environment is whoever started the program's: it may not name files for the
 * program's privileges to write, and a report, even on stderr, would show that user the heap and
 * library addresses of a privileged process. Returns nonzero, having said so, when name is set
 * there. */
static int refused(const char *name)
{
    const char *s = getauxval(AT_SECURE) ? getenv(name) : NULL;
    if (s) say(name, s, "ignored in secure-execution mode (a setuid or setgid program)");
    return s != NULL;
}

/* One lane per CPU the process may run on: sched_getaffinity neither allocates nor opens a file. */
static size_t cpu_lanes(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > MT_TABLE_LANES_MAX ? MT_TABLE_LANES_MAX : (size_t)n;
}

void mt_config_load(void)
{
    size_t depth = (size_t)mt_config.depth;
    load_size("MTRACE_SLOTS", 16, (size_t)1 << 30, &mt_config.slots);
    load_size("MTRACE_SLOTS_MAX", 16, (size_t)1 << 30, &mt_config.slots_max);
    load_size("MTRACE_DEPTH", 2, MT_DEPTH_MAX, &depth);
    load_size("MTRACE_STACKS", 16, (size_t)1 << 24, &mt_config.stacks);
    mt_config.depth = (int)depth;
    load_size("MTRACE_SAMPLE", 0, (size_t)1 << 40, &mt_config.sample);
    mt_config.lanes = cpu_lanes();
    load_size("MTRACE_LANES", 1, MT_TABLE_LANES_MAX, &mt_config.lanes);

    const char *u = getenv("MTRACE_UNWIND");
    if (u && strcmp(u, "fp") == 0)
        mt_config.unwind = MT_UNWIND_FP;
    else if (u && strcmp(u, "erlang") == 0)
        mt_config.unwind = MT_UNWIND_ERLANG;
    else if (u && strcmp(u, "libunwind") != 0)
        say("MTRACE_UNWIND", u, "expected libunwind, fp or erlang; using libunwind");

    static char report[1024], csv[1024];
    if (!refused("MTRACE_REPORT"))
        mt_config.report = load_text("MTRACE_REPORT", report, sizeof report);
    if (!refused("MTRACE_REPORT_SIGNAL"))
        mt_config.report_signal = load_signal("MTRACE_REPORT_SIGNAL");
    load_size("MTRACE_REPORT_TOP", 0, (size_t)1 << 30, &mt_config.report_top);
    load_size("MTRACE_REPORT_DEPTH", 0, MT_DEPTH_MAX, &mt_config.report_depth);
    load_size("MTRACE_REPORT_REACHABLE", 0, 1, &mt_config.report_reachable);
    load_size("MTRACE_REPORT_PID", 0, (size_t)1 << 22, &mt_config.report_pid);
    if (!refused("MTRACE_CSV")) mt_config.csv = load_text("MTRACE_CSV", csv, sizeof csv);
    load_size("MTRACE_CSV_AGE", 0, (size_t)1 << 31, &mt_config.csv_age);
    load_size("MTRACE_CSV_PERIOD", 1, 86400, &mt_config.csv_period);
    load_size("MTRACE_CSV_MAX", 0, (size_t)1 << 60, &mt_config.csv_max);
    const char *f = getenv("MTRACE_FORK");
    if (f && strcmp(f, "none") == 0)
        mt_config.fork_report = 0;
    else if (f && strcmp(f, "report") != 0)
        say("MTRACE_FORK", f, "expected report or none; using report");
    mt_config.account = mt_config.report || mt_config.report_signal;

    mt_config.slots = (mt_config.slots + 15) / 16 * 16;
    mt_config.slots_max = (mt_config.slots_max + 15) / 16 * 16;
    /* A start above the cap is a fixed table of that size: the start was asked for by name. */
    if (mt_config.slots_max < mt_config.slots) mt_config.slots_max = mt_config.slots;
}
