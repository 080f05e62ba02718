/* capi <dir>: drives the C API (mtrace.h) and prints one line per call: its name, its return
 * value and errno's name. Under the preload with MTRACE_REPORT=none:
 *   - a live report to <dir>/capi-<pid>-1.txt: tracked pool chunks 100 + 300 bytes (pool_take;
 *     the 200 was untracked) and api_leak's 700 bytes;
 *   - a snapshot; then api_after allocates 300 and api_leak's block is freed;
 *   - a report to <dir>/capi-fd.txt through a descriptor: api_after +300, api_leak -700;
 *   - a report to that existing file (EEXIST), and one to no path (EINVAL: MTRACE_REPORT=none).
 * Without the preload every call is a no-op: 0 from mtrace_active, ENOSYS from the others. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "common.h"
#include "mtrace.h"

static char pool[4096];

NAMED static void pool_take(size_t offset, size_t size)
{
    mtrace_track(pool + offset, size);
}

NAMED static void pool_give(size_t offset)
{
    mtrace_untrack(pool + offset);
}

NAMED static void *api_leak(void)
{
    return malloc(700);
}

NAMED static void *api_after(void)
{
    return malloc(300);
}

static void show(const char *call, int rc)
{
    int e = errno;
    say(call);
    say(rc < 0 ? " -1 " : " ");
    if (rc >= 0) say_num((uint64_t)rc, 0);
    if (rc < 0)
        say(e == ENOSYS    ? "ENOSYS"
            : e == EEXIST  ? "EEXIST"
            : e == EINVAL  ? "EINVAL"
            : e == ENOTSUP ? "ENOTSUP"
                           : "other");
    say("\n");
}

static char *path(const char *dir, const char *name)
{
    static char buf[4096];
    strcpy(buf, dir);
    strcat(buf, "/");
    strcat(buf, name);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 64;
    show("active", mtrace_active());
    pool_take(0, 100);
    pool_take(128, 200);
    pool_take(512, 300);
    pool_give(128);
    void *leak = api_leak();

    show("report", mtrace_report(path(argv[1], "capi-%p-%s.txt")));
    show("snapshot", mtrace_snapshot());
    api_after();
    free(leak);

    int fd = open(path(argv[1], "capi-fd.txt"), O_WRONLY | O_CREAT | O_EXCL, 0644);
    show("report_fd", mtrace_report_fd(fd));
    close(fd);
    show("exists", mtrace_report(path(argv[1], "capi-fd.txt")));
    show("null", mtrace_report(NULL));
    return 0;
}
