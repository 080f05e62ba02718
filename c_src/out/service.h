/* service.h: when reports and CSV passes happen: at exit, on a signal, every CSV period, and on
 * request through the C API (mtrace.h).
 *
 * Contract
 * - Nothing runs unless configured (config.h): without MTRACE_REPORT, MTRACE_REPORT_SIGNAL and
 *   MTRACE_CSV there is no thread, no signal handler, no file and no output. A copy of the
 *   library that is not the process's allocator (dlopen'ed as a NIF only) does nothing at all
 *   until it is attached (mt_service_attached).
 * - At load, when configured: the exit report is armed (a destructor, so it runs after the
 *   program's atexit handlers and static destructors), and, for signal reports or CSV, one
 *   background thread is started with every signal blocked. The signal handler only writes to an
 *   eventfd; the thread writes the report. The thread holds the recorder's guard: nothing it does
 *   is traced.
 * - One lock serializes every report and CSV pass; fork waits for it (pthread_atfork), so a child
 *   never inherits it held. A forked child has no background thread: it writes its own exit
 *   report (its own pid in the name), or none with MTRACE_FORK=none, and no CSV.
 * - Configured destinations that cannot be written give one "mtrace:" line on stderr per report;
 *   the program runs on. The C API returns errors instead (-1 and errno), without a line. A
 *   report file that could not be written whole (a full disk, a file size limit) is removed.
 * - The C API may be called from any thread, never from a signal handler or an allocation hook.
 */
#ifndef MTRACE_SERVICE_H
#define MTRACE_SERVICE_H

/* A report now: to fd when fd >= 0, else to path (a template, or "stderr"), else to the
 * configured MTRACE_REPORT. A live report, or the changes since the snapshot once one was taken;
 * with leaks, what is lost and what is still reachable now, as the exit report splits them (the
 * other threads stopped for the mark). Returns 0, or -1 with errno: ENOSYS when this library is
 * not the allocator, EINVAL with no destination, EEXIST when the file exists, or the error of
 * the write. */
int mt_service_report(const char *path, int fd, int leaks);

/* Later reports of this process (not the signal ones) show the changes since now. Returns 0,
 * or -1 with errno: ENOSYS when this library is not the allocator, ENOTSUP when no report is
 * configured (the tallies are not kept), ENOMEM. */
int mt_service_snapshot(void);

/* An attach (attach.h) arms what the configuration asks for, as a preloaded copy's start does:
 * the exit report, signal reports, CSV; a detach disarms them and gives the report signal back
 * its old disposition, so that a detached program writes nothing more and ends as it would have.
 * A later attach arms them again, with the configuration of the first. Any thread but a hook,
 * with the recorder running. */
void mt_service_attached(void);
void mt_service_detached(void);

#endif
