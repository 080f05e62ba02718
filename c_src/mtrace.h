/* mtrace.h: the C API of mtrace, for C and C++ programs (installable; it needs nothing else).
 *
 *     #include "mtrace.h"
 *     mtrace_snapshot();                   // later reports show the changes since here
 *     ...
 *     mtrace_report("/tmp/%n-%p-%s.txt");  // a report now, to a new file
 *
 * Link nothing: the functions below are inline wrappers around weak references to
 * priv/mtrace.so. Run under the preload (LD_PRELOAD=.../priv/mtrace.so, or bin/mtrace run),
 * each call reaches the library; run without it, the references are null and every call is a
 * cheap no-op: mtrace_active() returns 0, the report and snapshot calls return -1 with errno
 * ENOSYS, track and untrack do nothing. The references must go through the GOT, which a PIE
 * (the default of Debian's compilers) or -fPIC code does; in a non-PIE executable built without
 * -fPIC the linker resolves them to null for good.
 *
 * Contract
 * - Any thread may call any of these; none may be called from a signal handler, and none from
 *   inside a malloc replacement that mtrace itself interposes.
 * - Reports are written synchronously, before the call returns; they are the same text as the
 *   exit report (docs/report-format.md). Paths are templates: %p the pid, %n the program name,
 *   %s the report's number in the process, %% a '%'; "stderr" is standard error. A file is always
 *   created anew: an existing file or symbolic link at the path is an error (EEXIST), never
 *   overwritten.
 * - Return values: 0 on success; -1 with errno set on failure (ENOSYS: not preloaded; EINVAL:
 *   no path given and no MTRACE_REPORT set; ENOTSUP: snapshots need MTRACE_REPORT or
 *   MTRACE_REPORT_SIGNAL set, which keep per-site counts; or the error of open/write).
 * - Tracking: mtrace_track(id, size) records a resource of your own (a block of a pool or
 *   arena, a cache entry, a handle) with the caller's stack, like an allocation;
 *   mtrace_untrack(id) forgets it. Ids are 63-bit (the top bit is ignored) and have their own
 *   space: an id equal to a malloc'd address does not disturb that block's record. Tracked
 *   resources appear in reports as call sites whose frame 0 is mtrace_lib_track, in a total of
 *   their own (they are not heap bytes), and in the CSV with kind "track".
 */
#ifndef MTRACE_H
#define MTRACE_H

#include <errno.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library's side; null unless priv/mtrace.so is loaded as the process's allocator. */
extern int mtrace_lib_active(void) __attribute__((weak));
extern int mtrace_lib_report(const char *path) __attribute__((weak));
extern int mtrace_lib_report_fd(int fd) __attribute__((weak));
extern int mtrace_lib_snapshot(void) __attribute__((weak));
extern void mtrace_lib_track(const void *id, size_t size) __attribute__((weak));
extern void mtrace_lib_untrack(const void *id) __attribute__((weak));

/* 1 when allocations are being recorded, else 0. */
static inline int mtrace_active(void)
{
    return mtrace_lib_active ? mtrace_lib_active() : 0;
}

/* Writes a report to a new file named by the template path, or to MTRACE_REPORT when path is
 * NULL. A live report (every live block by call site), or, after mtrace_snapshot(), the
 * changes since the snapshot. */
static inline int mtrace_report(const char *path)
{
    if (!mtrace_lib_report) {
        errno = ENOSYS;
        return -1;
    }
    return mtrace_lib_report(path);
}

/* The same, written to an open descriptor (left open). */
static inline int mtrace_report_fd(int fd)
{
    if (!mtrace_lib_report_fd) {
        errno = ENOSYS;
        return -1;
    }
    return mtrace_lib_report_fd(fd);
}

/* Later reports, the exit report included, show per call site what was allocated minus what
 * was freed since now. Signal reports keep their own chain. */
static inline int mtrace_snapshot(void)
{
    if (!mtrace_lib_snapshot) {
        errno = ENOSYS;
        return -1;
    }
    return mtrace_lib_snapshot();
}

static inline void mtrace_track(const void *id, size_t size)
{
    if (mtrace_lib_track) mtrace_lib_track(id, size);
}

static inline void mtrace_untrack(const void *id)
{
    if (mtrace_lib_untrack) mtrace_lib_untrack(id);
}

#ifdef __cplusplus
}
#endif

#endif
