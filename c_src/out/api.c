/* api.c: the C API's entry points, exported for mtrace.h (which explains them to programs).
 *
 * Tracked resources go through the recorder like allocations, under their own call kinds, with
 * MT_TRACK_BIT set in the key (account.h): they get a stack, a record, a site tally and CSV rows,
 * and never meet a heap block's record. Frame 0 of their stacks is mtrace_lib_track.
 *
 * mtrace_lib_attach, mtrace_lib_detach and mtrace_lib_leaks are for a library dlopen'ed into a
 * running process (by bin/mtrace attach through priv/mtrace-inject, or a program of the tests)
 * rather than for mtrace.h. The attach takes the options as "MTRACE_NAME=value" lines (or NULL) and
 * returns 0 or an enum mt_attach_error (attach.h), as the detach does; mtrace_lib_leaks(path)
 * writes a report of what is lost and still reachable now and returns as mtrace_lib_report does;
 * mtrace_lib_attach_reason(error) is a person's sentence for an attach's or detach's error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "attach/attach.h"
#include "out/service.h"
#include "record/account.h"
#include "record/recorder.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int mtrace_lib_active(void);
EXPORT int mtrace_lib_report(const char *path);
EXPORT int mtrace_lib_report_fd(int fd);
EXPORT int mtrace_lib_snapshot(void);
EXPORT void mtrace_lib_track(const void *id, size_t size);
EXPORT void mtrace_lib_untrack(const void *id);
EXPORT int mtrace_lib_attach(const char *options);
EXPORT int mtrace_lib_detach(void);
EXPORT int mtrace_lib_leaks(const char *path);
EXPORT const char *mtrace_lib_attach_reason(int error);

int mtrace_lib_active(void)
{
    return mt_active();
}

int mtrace_lib_report(const char *path)
{
    return mt_service_report(path, -1, 0);
}

int mtrace_lib_report_fd(int fd)
{
    if (fd >= 0) return mt_service_report(NULL, fd, 0);
    errno = EBADF;
    return -1;
}

int mtrace_lib_snapshot(void)
{
    return mt_service_snapshot();
}

/* mt_active() first: in a copy of the library that is not the allocator, mt_enter would start a
 * recorder of its own. */
void mtrace_lib_track(const void *id, size_t size)
{
    if (mt_active() && mt_enter(MT_TRACK))
        mt_alloc_done((void *)((uintptr_t)id | MT_TRACK_BIT), size, &MT_SITE(mtrace_lib_track));
}

void mtrace_lib_untrack(const void *id)
{
    if (mt_active() && mt_enter(MT_UNTRACK)) mt_forget((void *)((uintptr_t)id | MT_TRACK_BIT));
}

/* The options' lines, split in place in a copy: config.h copies what it keeps. */
int mtrace_lib_attach(const char *options)
{
    static char copy[4096];
    const char *vars[64];
    size_t n = 0;
    if (options) {
        size_t len = strlen(options);
        if (len >= sizeof copy) return MT_ATTACH_BAD_OPTIONS;
        memcpy(copy, options, len + 1);
        for (char *line = copy, *end; line && *line; line = end) {
            if ((end = strchr(line, '\n'))) *end++ = 0;
            if (!*line) continue;
            if (n == sizeof vars / sizeof *vars - 1) return MT_ATTACH_BAD_OPTIONS;
            vars[n++] = line;
        }
    }
    vars[n] = NULL;
    mt_guard_hold();
    int e = (int)mt_attach(vars);
    mt_guard_release();
    return e;
}

int mtrace_lib_detach(void)
{
    mt_guard_hold();
    int e = (int)mt_detach();
    mt_guard_release();
    return e;
}

int mtrace_lib_leaks(const char *path)
{
    return mt_service_report(path, -1, 1);
}

const char *mtrace_lib_attach_reason(int error)
{
    return mt_attach_reason((enum mt_attach_error)error);
}
