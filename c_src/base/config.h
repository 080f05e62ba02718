/* config.h: the MTRACE_* environment variables, declared once (mt_options) and read once.
 *
 * Contract
 * - mt_options is the one list of the variables: the parser reads it, and options_dump (built
 *   with the library) prints it into priv/mtrace-options.txt, which bin/mtrace --help, bin/bench
 *   and the tests read, and into priv/mtrace-options.md, docs/configuration.md's table. A
 *   variable is added here and nowhere else in C.
 * - mt_config_load() is called once, from the recorder's first initialisation, before any
 *   record is made (or from the constructor of a copy that stays inert behind another
 *   allocator, to know whether a report was asked for). It uses getenv, getauxval,
 *   sched_getaffinity and write(2) only: no malloc, no stdio, so it is safe on the hook path of
 *   the very first allocation.
 * - In secure-execution mode (setuid or setgid: AT_SECURE) the variables that name a file or a
 *   signal (MTRACE_REPORT, MTRACE_REPORT_SIGNAL, MTRACE_CSV, MTRACE_DEBUG_DIRS) are ignored,
 *   whatever their value, with one "mtrace:" line each: no file and no report is written on
 *   the environment's word.
 * - A malformed value prints exactly one line, "mtrace: ...", on stderr and the default is kept.
 * - After loading, mt_config is read-only: every thread may read it without a lock.
 */
#ifndef MTRACE_CONFIG_H
#define MTRACE_CONFIG_H

#include <stddef.h>

enum mt_unwind { MT_UNWIND_LIBUNWIND, MT_UNWIND_FP, MT_UNWIND_ERLANG };
enum mt_fork { MT_FORK_REPORT, MT_FORK_NONE }; /* what forked children do about reports */

struct mt_config {
    size_t slots;          /* MTRACE_SLOTS: live-table slots at the start, a multiple of 16 */
    size_t slots_max;      /* MTRACE_SLOTS_MAX: the most the table may grow to, >= slots */
    size_t depth;          /* MTRACE_DEPTH: frames kept per stack, hook frame included */
    size_t stacks;         /* MTRACE_STACKS: distinct stacks the intern table can hold */
    enum mt_unwind unwind; /* MTRACE_UNWIND: libunwind (default), fp or erlang */
    size_t sample;         /* MTRACE_SAMPLE: mean bytes between sampled allocations, 0: all */
    size_t clear;          /* MTRACE_CLEAR: the most bytes of a new block cleared, 0: none */
    size_t lanes;          /* MTRACE_LANES: table lanes (table.h); one per CPU, at most 2 */
    /* Reports and CSV (report.h, csv.h); the strings are copies, NULL when unset. */
    const char *report;      /* MTRACE_REPORT: "stderr", "none" or a path template */
    int report_signal;       /* MTRACE_REPORT_SIGNAL: a signal number, 0 for none */
    size_t report_top;       /* MTRACE_REPORT_TOP: call sites shown, 0 for all */
    size_t report_depth;     /* MTRACE_REPORT_DEPTH: frames shown per site, 0 for all kept */
    size_t report_reachable; /* MTRACE_REPORT_REACHABLE: 1 lists reachable sites at exit too */
    size_t report_why;       /* MTRACE_REPORT_WHY: 1 gives each reachable site what keeps it */
    const char *csv;         /* MTRACE_CSV: path template of the CSV export */
    size_t csv_age;          /* MTRACE_CSV_AGE: seconds a block must have lived to be written */
    size_t csv_period;       /* MTRACE_CSV_PERIOD: seconds between two passes */
    size_t csv_max;    /* MTRACE_CSV_MAX: bytes past which the file restarts, 0 for no limit */
    int fork;          /* MTRACE_FORK: MT_FORK_REPORT (the default) or MT_FORK_NONE */
    size_t report_pid; /* MTRACE_REPORT_PID: only this process reports (bin/mtrace run), 0: any */
    const char *debug_dirs; /* MTRACE_DEBUG_DIRS: colon-separated, searched before Debian's */
    int account;            /* derived: live totals and site tallies kept (account.h) */
};

#define MT_DEPTH_MAX 128

extern struct mt_config mt_config;

void mt_config_load(void);

/* After mt_config_load(): the exit report's destination, MTRACE_REPORT unless unset or "none"
 * (NULL then); and whether this process reports at all, MTRACE_REPORT_PID (bin/mtrace run) being
 * unset or its pid: the others it starts run quietly. */
const char *mt_config_exit_report(void);
int mt_config_reports_here(void);

/* Values that mt_config_load() takes before the environment's: a NULL-terminated list of
 * "NAME=value" strings (Mtrace.attach/1's options), or NULL. The strings must outlive the load;
 * call before it, from one thread. */
void mt_config_override(const char *const *vars);

/* One variable: its name, how its value is read into mt_config, and what it means. */
enum mt_option_kind { MT_OPTION_NUMBER, MT_OPTION_CHOICE, MT_OPTION_TEXT, MT_OPTION_SIGNAL };

struct mt_option {
    const char *name;
    enum mt_option_kind kind;
    size_t lo, hi;              /* NUMBER: bounds; TEXT: the most bytes */
    const char *const *choices; /* CHOICE: the words, NULL-terminated; the value is the index */
    size_t *number;             /* NUMBER */
    int *choice;                /* CHOICE, SIGNAL (a signal number, 0 for none) */
    const char **text;          /* TEXT: a copy, NULL when unset */
    int secure;                 /* ignored in secure-execution mode */
    const char *unset;          /* how the default reads when it is no value, or NULL */
    const char *meaning;        /* one line, for bin/mtrace --help */
    const char *doc;            /* docs/configuration.md's text for it, in Markdown */
};

extern const struct mt_option mt_options[];
extern const size_t mt_options_count;

/* The default of o as text, from mt_config before mt_config_load(). */
void mt_option_default(const struct mt_option *o, char *buf, size_t cap);

#endif
