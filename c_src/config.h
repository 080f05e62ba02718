/* config.h: the MTRACE_* environment variables, read once.
 *
 * Contract
 * - mt_config_load() is called once, from the recorder's first initialisation, before any
 *   record is made. It uses getenv, getauxval, sched_getaffinity and write(2) only: no malloc,
 *   no stdio, so it is safe on the hook path of the very first allocation.
 * - In secure-execution mode (setuid or setgid: AT_SECURE) MTRACE_REPORT, MTRACE_REPORT_SIGNAL
 *   and MTRACE_CSV are ignored, whatever their value, with one "mtrace:" line each: no file and
 *   no report is written on the environment's word.
 * - A malformed value prints exactly one line, "mtrace: ...", on stderr and the default is kept.
 * - After loading, mt_config is read-only: every thread may read it without a lock.
 */
#ifndef MTRACE_CONFIG_H
#define MTRACE_CONFIG_H

#include <stddef.h>

enum mt_unwind { MT_UNWIND_LIBUNWIND, MT_UNWIND_FP, MT_UNWIND_ERLANG };

struct mt_config {
    size_t slots;          /* MTRACE_SLOTS: live-table slots at the start, a multiple of 16 */
    size_t slots_max;      /* MTRACE_SLOTS_MAX: the most the table may grow to, >= slots */
    int depth;             /* MTRACE_DEPTH: frames kept per stack, hook frame included */
    size_t stacks;         /* MTRACE_STACKS: distinct stacks the intern table can hold */
    enum mt_unwind unwind; /* MTRACE_UNWIND: libunwind (default), fp or erlang */
    size_t sample;         /* MTRACE_SAMPLE: mean bytes between sampled allocations, 0: all */
    size_t lanes;          /* MTRACE_LANES: table lanes (table.h); one per CPU, at most 2 */
    /* Reports and CSV (report.h, csv.h); the strings are copies, NULL when unset. */
    const char *report;  /* MTRACE_REPORT: "stderr", "none" or a path template */
    int report_signal;   /* MTRACE_REPORT_SIGNAL: a signal number, 0 for none */
    size_t report_top;   /* MTRACE_REPORT_TOP: call sites shown, 0 for all */
    size_t report_depth; /* MTRACE_REPORT_DEPTH: frames shown per site, 0 for all kept */
    size_t report_reachable; /* MTRACE_REPORT_REACHABLE: 1 lists reachable sites at exit too */
    const char *csv;     /* MTRACE_CSV: path template of the CSV export */
    size_t csv_age;      /* MTRACE_CSV_AGE: seconds a block must have lived to be written */
    size_t csv_period;   /* MTRACE_CSV_PERIOD: seconds between two passes */
    size_t csv_max;      /* MTRACE_CSV_MAX: bytes past which the file restarts, 0 for no limit */
    int fork_report;     /* MTRACE_FORK: report (1, the default) or none (0) in forked children */
    size_t report_pid;   /* MTRACE_REPORT_PID: only this process reports (bin/mtrace run), 0: any */
    int account;         /* derived: live totals and site tallies kept (account.h) */
};

#define MT_DEPTH_MAX 128

extern struct mt_config mt_config;

void mt_config_load(void);

#endif
