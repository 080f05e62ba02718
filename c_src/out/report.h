/* report.h: one text report of the heap, written to a file descriptor.
 *
 * The report is for people and for programs (lib/mtrace/report.ex, bin/mtrace convert): its
 * first line is MT_REPORT_MAGIC and the format's version, "# mtrace report v1", and every other
 * line is one record of the grammar in docs/report-format.md. A change that a reader of the
 * version before would misread raises MT_REPORT_FORMAT; readers refuse a version they do not
 * know.
 *
 * Two kinds. A live report lists the blocks live now, grouped by call site (identical stacks
 * merged, and stacks that look identical once cut to MTRACE_REPORT_DEPTH frames), largest bytes
 * first, after a summary: live bytes and blocks, peak, calls per intercepted function, records
 * dropped. A changes report lists, per call site, what was allocated minus what was freed since
 * a baseline of site tallies (account.h): frees count against the site that made the block, so
 * sites can go negative. Each stack is printed innermost frame first, symbolized and demangled
 * by symbols.c (a line per inlined function), down to main (what lies below it is the C
 * library's start-up).
 *
 * Contract
 * - Never on the hook path: it allocates (untraced: the calling thread holds the recorder's
 *   guard throughout), symbolizes, and writes with write(2). Records are copied out of the table
 *   first (mt_table_each); no slot is held while symbolizing.
 * - Not reentrant and not thread safe: callers serialize reports (service.c holds one lock).
 * - Returns 0, or -1 with errno set: the error of write(2), ENOMEM, or ENOTSUP for a changes
 *   report while the tallies are not kept (mt_config.account off). The descriptor is left open.
 */
#ifndef MTRACE_REPORT_H
#define MTRACE_REPORT_H

#include <stdint.h>

#include "base/writer.h"
#include "record/account.h"
#include "symbols/symbols.h"

struct mt_report_req {
    const char *prog;      /* program name, for the title */
    unsigned seq;          /* this report's number in the process */
    const char *when;      /* "at exit", "on request", "on SIGUSR2" */
    int at_exit;           /* live blocks are then called leaks */
    int leaks;             /* a live report that splits lost from reachable now, as at exit */
    struct mt_tally *base; /* NULL: a live report; else changes since this baseline */
    const char *since;     /* what base is: "start", "report 2", "the snapshot" */
    int advance;           /* with base: base is moved to now, in the same pass */
};

#define MT_REPORT_MAGIC "# mtrace report v"
#define MT_REPORT_FORMAT 1

int mt_report_write(int fd, const struct mt_report_req *req);

/* How mt_report_frame writes a frame: as the inside of a quoted CSV field; and whether a frame
 * with a source line also says where its code is (stacks do, so that every native frame of a
 * report names its library; the summary by calling function names functions only). */
enum { MT_REPORT_QUOTED = 1, MT_REPORT_LIBRARY = 2 };

/* One frame, as valgrind prints it: "function (file:line)" (the file's base name) when DWARF
 * knows the line, followed with MT_REPORT_LIBRARY by " path+0xoffset" (as Mtrace.Frame's Inspect
 * does, with the whole path), else "function (path)", "path+0xoffset" without a name,
 * "'Mod':fun/arity (erlang)" for named JIT code ("'Mod':fun/arity (file:line) (erlang)" where
 * the VM gives the line), "?? (no module)" outside
 * any module; " [unloaded]" follows a frame of a library unloaded since, and "?? (unloaded or
 * replaced)" stands for one whose library is not known (symbols.h). */
void mt_report_frame(struct mt_out *o, const struct mt_frame_info *f, int how);

/* Frames shown of a stack of n: MTRACE_REPORT_DEPTH, at most n. */
int mt_report_depth(int n);

#endif
