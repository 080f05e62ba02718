/* api.c: the C API's entry points, exported for mtrace.h (which explains them to programs).
 *
 * Tracked resources go through the recorder like allocations, under their own call kinds, with
 * MT_TRACK_BIT set in the key (account.h): they get a stack, a record, a site tally and CSV rows,
 * and never meet a heap block's record. Frame 0 of their stacks is mtrace_lib_track.
 *
 * mtrace_lib_attach and mtrace_lib_detach are for a library dlopen'ed into a running process (by
 * a debugger, or a program of the tests) rather than for mtrace.h: they return 0 or an
 * enum mt_attach_error (attach.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>

#include "account.h"
#include "attach.h"
#include "recorder.h"
#include "service.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT int mtrace_lib_active(void);
EXPORT int mtrace_lib_report(const char *path);
EXPORT int mtrace_lib_report_fd(int fd);
EXPORT int mtrace_lib_snapshot(void);
EXPORT void mtrace_lib_track(const void *id, size_t size);
EXPORT void mtrace_lib_untrack(const void *id);
EXPORT int mtrace_lib_attach(void);
EXPORT int mtrace_lib_detach(void);

int mtrace_lib_active(void)
{
    return mt_active();
}

int mtrace_lib_report(const char *path)
{
    return mt_service_report(path, -1);
}

int mtrace_lib_report_fd(int fd)
{
    if (fd >= 0) return mt_service_report(NULL, fd);
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

int mtrace_lib_attach(void)
{
    mt_guard_hold();
    int e = (int)mt_attach(NULL);
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
