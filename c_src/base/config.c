/* config.c: parses MTRACE_* once; see config.h for the contract. */
#define _GNU_SOURCE
#include "base/config.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/writer.h"
#include "record/table.h"

struct mt_config mt_config = {
    .slots = 4096,
    .slots_max = (size_t)1 << 26,
    .depth = 20,
    .stacks = 65536,
    .unwind = MT_UNWIND_LIBUNWIND,
    .clear = 0,
    .csv_age = 60,
    .csv_period = 10,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const unwinders[] = {"libunwind", "fp", "erlang", NULL};
static const char *const fork_modes[] = {"report", "none", NULL};

_Static_assert(sizeof(enum mt_unwind) == sizeof(int), "MTRACE_UNWIND is read as an int");

#define NUMBER(n, l, h, field, unset_, what, doc_)                                                 \
    {                                                                                              \
        .name = n, .kind = MT_OPTION_NUMBER, .lo = l, .hi = h, .number = &mt_config.field,         \
        .unset = unset_, .meaning = what, .doc = doc_                                              \
    }
#define TEXT(n, field, what, doc_)                                                                 \
    {                                                                                              \
        .name = n, .kind = MT_OPTION_TEXT, .hi = 1023, .text = &mt_config.field, .secure = 1,      \
        .unset = "unset", .meaning = what, .doc = doc_                                             \
    }

/* Every MTRACE_* variable the library reads, in the order docs/configuration.md lists them. */
const struct mt_option mt_options[] = {
    NUMBER("MTRACE_SLOTS", 16, (size_t)1 << 30, slots, NULL,
           "live-table slots at the start; the table doubles up to MTRACE_SLOTS_MAX",
           "live-table slots at the start (rounded up to a multiple of 16; 25 bytes each, "
           "touched as used). The table doubles whenever a record finds no room, up to "
           "`MTRACE_SLOTS_MAX`; its records move to the larger table a few at a time, with the"
           " allocations that follow"),
    NUMBER("MTRACE_SLOTS_MAX", 16, (size_t)1 << 30, slots_max, NULL,
           "the most slots the table may grow to; only a table at the cap drops records",
           "the most slots the table may grow to (16 to 2^30; at least `MTRACE_SLOTS`). Every "
           "size up to it is reserved once as address space only (about 3.1 GiB at the "
           "defaults); where that much cannot be mapped (`ulimit -v`, no overcommit) the cap "
           "is lowered until it can. Only a table at the cap drops records, and counts them "
           "(`dropped`): it holds a live set of about 80% of its slots"),
    NUMBER("MTRACE_LANES", 1, MT_TABLE_LANES_MAX, lanes, "CPUs, at most 2",
           "lanes the table is cut into, so that threads of different arenas share no lines",
           "lanes the table is cut into (1 or 2). Each lane has at least 2048 slots. The "
           "records of one 64 MiB region of the address space (one of glibc's thread arenas) "
           "are kept in one lane, so threads that allocate from different arenas do not write "
           "the same cache lines; a region that fills its lane is spread over all of them "
           "until the table grows. A sampling table has one lane"),
    NUMBER("MTRACE_DEPTH", 2, MT_DEPTH_MAX, depth, NULL,
           "frames kept per stack, the intercepted function's included",
           "frames kept per stack, frame 0 included (2 to 128)"),
    NUMBER("MTRACE_STACKS", 16, (size_t)1 << 24, stacks, NULL, "distinct stacks kept",
           "distinct stacks kept, at most 16777216 (their frames are reserved once, touched as"
           " used)"),
    {.name = "MTRACE_UNWIND",
     .kind = MT_OPTION_CHOICE,
     .choices = unwinders,
     .choice = (int *)&mt_config.unwind,
     .meaning = "libunwind (DWARF), fp (frame pointers) or erlang (on through Erlang frames)",
     .doc = "`libunwind` (DWARF), `fp`: a guarded frame-pointer walk, for programs built with "
            "frame pointers, or `erlang`: libunwind, and a stack that reaches the BEAM's JIT "
            "code goes on through the Erlang functions that called the NIF (a node started with"
            " `+JPperf map`; see \"Which Erlang function leaks\")"},
    NUMBER("MTRACE_SAMPLE", 0, (size_t)1 << 40, sample, NULL,
           "record about one allocation per this many bytes; 0 records every one",
           "sampling: record about one allocation per this many bytes allocated (0: every "
           "allocation; 524288 is jemalloc's interval). A block of `s` bytes is recorded with "
           "probability `p = 1 - exp(-s/N)`, so blocks well above `N` are always seen; "
           "reports, `Mtrace.stats()`, `top/2` and `diff/2` scale each record by `1/p` and say"
           " that their figures are estimates (`estimated: true` on a site)"),
    NUMBER("MTRACE_CLEAR", 0, (size_t)1 << 40, clear, "0",
           "a debugging aid that changes what a program reads: the most bytes of each new block "
           "zeroed before the program has it (glibc's allocator only); 0: none",
           "a debugging aid that changes what a program reads, as AddressSanitizer's fill "
           "does: the most bytes of each new block zeroed before the program has it (from "
           "`malloc`, the aligned allocators, `realloc`'s new part, a string's bytes past its "
           "NUL; glibc's allocator only). 0, the default, writes nothing the program receives:"
           " a program reads what its allocator gave it, as without mtrace"),
    TEXT("MTRACE_REPORT", report, "the exit report: stderr, none or a path (%p pid, %n name)",
         "where the exit report goes: `stderr`, or a path template (`%p` pid, `%n` program "
         "name, `%s` report number, `%%` a `%`); `none` writes nothing at exit but keeps the"
         " counts for the C API. Any value turns on the live total, peak and per-site counts"
         " (a few atomic adds per allocation; unset, their cost is one predictable branch)"),
    {.name = "MTRACE_REPORT_SIGNAL",
     .kind = MT_OPTION_SIGNAL,
     .choice = &mt_config.report_signal,
     .secure = 1,
     .unset = "unset",
     .meaning = "a signal that writes an incremental report",
     .doc = "a signal that writes an incremental report, by name or number (`USR2`, `SIGUSR2`, "
            "`12`, `RTMIN+6`, `40`): `HUP`, `INT`, `QUIT`, `USR1`, `USR2`, `ALRM`, `TERM`, "
            "`WINCH`, `URG`, `PROF`, `VTALRM` or a real-time signal (`RTMIN` to `RTMAX`, 34 to "
            "64 with glibc). Others (fault signals, `PIPE`, `CHLD`, ...) are refused: a handler"
            " there would change what the program does. Never on by default"},
    NUMBER("MTRACE_REPORT_TOP", 0, (size_t)1 << 30, report_top, NULL,
           "call sites a report shows; 0 for all",
           "call sites shown, largest first; 0 for all (the rest are summed on one line)"),
    NUMBER("MTRACE_REPORT_DEPTH", 0, MT_DEPTH_MAX, report_depth, NULL,
           "frames a report shows per site; 0 for all kept",
           "frames shown per site; 0 for all that were kept (`MTRACE_DEPTH`). Stacks equal "
           "once cut are merged"),
    NUMBER("MTRACE_REPORT_REACHABLE", 0, 1, report_reachable, NULL,
           "1: the exit report lists the still reachable sites too",
           "1: the exit report lists the sites of the blocks still reachable too, after the "
           "lost ones"),
    NUMBER("MTRACE_REPORT_WHY", 0, 1, report_why, NULL,
           "1: each still reachable site says what keeps its oldest block",
           "1: with `MTRACE_REPORT_REACHABLE`, each reachable site says what keeps its oldest "
           "block (`kept by` a root and the blocks on the way, as `Mtrace.why/2` names them)"),
    TEXT("MTRACE_CSV", csv, "path template of the CSV export of old blocks and frees",
         "path template of the CSV export"),
    NUMBER("MTRACE_CSV_AGE", 0, (size_t)1 << 31, csv_age, NULL,
           "seconds a block must have lived before it is exported",
           "seconds a block must have lived before it is exported"),
    NUMBER("MTRACE_CSV_PERIOD", 1, 86400, csv_period, NULL, "seconds between two exports",
           "seconds between two exports (1 to 86400)"),
    NUMBER("MTRACE_CSV_MAX", 0, (size_t)1 << 60, csv_max, NULL,
           "bytes past which the CSV file restarts; 0 for no limit",
           "bytes past which the CSV file is emptied and restarts with its header, at the next"
           " pass with rows to write; 0 for no limit"),
    {.name = "MTRACE_FORK",
     .kind = MT_OPTION_CHOICE,
     .choices = fork_modes,
     .choice = &mt_config.fork,
     .meaning = "report: forked children write their own exit report; none: they write none",
     .doc = "`report`: a forked child writes its own exit report (its own pid); `none`: "
            "children write nothing"},
    {.name = "MTRACE_DEBUG_DIRS",
     .kind = MT_OPTION_TEXT,
     .hi = 4095,
     .text = &mt_config.debug_dirs,
     .secure = 1,
     .unset = "unset",
     .meaning = "directories (colon-separated) of separate debug files, before /usr/lib/debug",
     .doc = "directories (colon-separated) searched for separate debug files by build id, "
            "before `/usr/lib/debug`"},
    NUMBER("MTRACE_REPORT_PID", 0, (size_t)1 << 22, report_pid, "unset",
           "only the process of this pid writes reports (bin/mtrace run)",
           "only the process of this pid writes reports; the others it starts run quietly "
           "(`bin/mtrace run` sets it to the command's own pid, which it keeps through `exec`)"),
};

const size_t mt_options_count = COUNT(mt_options);

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

/* An unsigned decimal in [lo, hi]; anything else keeps *out and says why. */
static void load_number(const char *name, const char *s, size_t lo, size_t hi, size_t *out)
{
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
                           mt_utoa(lo, lo_s + sizeof lo_s),
                           " to ",
                           mt_utoa(hi, hi_s + sizeof hi_s),
                           "; using ",
                           mt_utoa(*out, def_s + sizeof def_s)};
    join(why, sizeof why, parts, COUNT(parts));
    say(name, s, why);
}

/* A private copy, of at most max bytes: the program may rewrite its environment (setenv, a
 * process title) later. */
static const char *load_text(const char *name, const char *s, size_t max)
{
    static char pool[8192];
    static size_t used;
    size_t n = strlen(s);
    if (n == 0 || n > max || used + n + 1 > sizeof pool) {
        say(name, s, n ? "longer than a path may be; ignored" : "empty; ignored");
        return NULL;
    }
    char *copy = memcpy(pool + used, s, n + 1);
    used += n + 1;
    return copy;
}

/* One of choices (its index), or -1 having said which were expected. */
static int load_choice(const char *name, const char *s, const char *const *choices, int def)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(s, choices[i]) == 0) return i;
    char why[160];
    size_t n = join(why, sizeof why, (const char *const[]){"expected "}, 1);
    for (int i = 0; choices[i]; i++) {
        const char *sep = !choices[i + 1] ? "" : !choices[i + 2] ? " or " : ", ";
        n += join(why + n, sizeof why - n, (const char *const[]){choices[i], sep}, 2);
    }
    join(why + n, sizeof why - n, (const char *const[]){"; using ", choices[def]}, 2);
    say(name, s, why);
    return -1;
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
static int load_signal(const char *name, const char *s)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},    {"USR1", SIGUSR1},
                 {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},    {"WINCH", SIGWINCH},
                 {"URG", SIGURG},   {"PROF", SIGPROF}, {"VTALRM", SIGVTALRM}};
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
                           mt_utoa((size_t)rtmin, lo_s + sizeof lo_s), " to ",
                           mt_utoa((size_t)rtmax, hi_s + sizeof hi_s),
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
static int refused(const char *name, const char *s)
{
    int secure = getauxval(AT_SECURE) != 0;
    if (secure) say(name, s, "ignored in secure-execution mode (a setuid or setgid program)");
    return secure;
}

/* One lane per CPU the process may run on: sched_getaffinity neither allocates nor opens a file. */
static size_t cpu_lanes(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > MT_TABLE_LANES_MAX ? MT_TABLE_LANES_MAX : (size_t)n;
}

static const char *const *overrides;

void mt_config_override(const char *const *vars)
{
    overrides = vars;
}

static const char *lookup(const char *name)
{
    size_t len = strlen(name);
    for (const char *const *v = overrides; v && *v; v++)
        if (strncmp(*v, name, len) == 0 && (*v)[len] == '=') return *v + len + 1;
    return getenv(name);
}

const char *mt_config_exit_report(void)
{
    const char *r = mt_config.report;
    return r && strcmp(r, "none") != 0 ? r : NULL;
}

int mt_config_reports_here(void)
{
    return !mt_config.report_pid || (pid_t)mt_config.report_pid == getpid();
}

void mt_config_load(void)
{
    mt_config.lanes = cpu_lanes();
    for (size_t i = 0; i < COUNT(mt_options); i++) {
        const struct mt_option *o = &mt_options[i];
        const char *s = lookup(o->name);
        if (!s || (o->secure && refused(o->name, s))) continue;
        switch (o->kind) {
        case MT_OPTION_NUMBER:
            load_number(o->name, s, o->lo, o->hi, o->number);
            break;
        case MT_OPTION_TEXT:
            *o->text = load_text(o->name, s, o->hi);
            break;
        case MT_OPTION_SIGNAL:
            *o->choice = load_signal(o->name, s);
            break;
        case MT_OPTION_CHOICE: {
            int v = load_choice(o->name, s, o->choices, *o->choice);
            if (v >= 0) *o->choice = v;
        }
        }
    }
    mt_config.account = mt_config.report || mt_config.report_signal;
    mt_config.slots = (mt_config.slots + 15) / 16 * 16;
    mt_config.slots_max = (mt_config.slots_max + 15) / 16 * 16;
    /* A start above the cap is a fixed table of that size: the start was asked for by name. */
    if (mt_config.slots_max < mt_config.slots) mt_config.slots_max = mt_config.slots;
}

void mt_option_default(const struct mt_option *o, char *buf, size_t cap)
{
    char digits[24];
    const char *shown = o->unset;
    if (!shown && o->kind == MT_OPTION_NUMBER) shown = mt_utoa(*o->number, digits + sizeof digits);
    if (!shown && o->kind == MT_OPTION_CHOICE) shown = o->choices[*o->choice];
    join(buf, cap, (const char *const[]){shown ? shown : ""}, 1);
}
