/* csv.c: the CSV export (see csv.h).
 *
 * What earlier passes wrote is kept as an array of blocks sorted by address; each pass keeps the
 * blocks old enough now from a snapshot (sorted the same way, one record per address) and walks
 * both arrays together: a block only in the new array is an alloc row, one only in the old array
 * a free row. The new array then replaces the old, since every block old enough now has been
 * written.
 */
#define _GNU_SOURCE
#include "out/csv.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "base/writer.h"
#include "mark/snapshot.h"
#include "out/report.h"
#include "record/account.h"
#include "record/recorder.h"
#include "record/stack.h"

struct blocks {
    struct mt_record *v;
    size_t n;
};

static struct blocks written;
static int fd = -1;
static int failing; /* an error was said and nothing has succeeded since */
static uint64_t wall_offset;

static const char header[] = "event,time,address,size,allocated,tid,kind,stack_id,stack,weight\r\n";

static int order(const struct mt_record *a, const struct mt_record *b)
{
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    if (a->time_ns != b->time_ns) return a->time_ns < b->time_ns ? -1 : 1;
    if (a->size != b->size) return a->size < b->size ? -1 : 1;
    return a->stack < b->stack ? -1 : a->stack > b->stack;
}

/* The snapshot's blocks allocated at or before cutoff_ns, in its order; 0, or -1 when memory
 * runs short. */
static int collect(const struct mt_snapshot *snap, uint64_t cutoff_ns, struct blocks *b)
{
    size_t n = 0;
    for (size_t i = 0; i < snap->n; i++)
        n += snap->rec[i].time_ns <= cutoff_ns;
    if (n && !(b->v = malloc(n * sizeof *b->v))) return -1;
    for (size_t i = 0; i < snap->n; i++)
        if (snap->rec[i].time_ns <= cutoff_ns) b->v[b->n++] = snap->rec[i];
    return 0;
}

static void fail(const char *what, const char *path, int err)
{
    if (!failing) mt_say_error(what, path, err);
    failing = 1;
}

/* Whether a pass over now has a row to write: the arrays differ. */
static int changed(const struct blocks *now)
{
    if (now->n != written.n) return 1;
    for (size_t i = 0; i < now->n; i++)
        if (order(&now->v[i], &written.v[i]) != 0) return 1;
    return 0;
}

/* The file this process created, while the path still names it: created again (exclusively)
 * when it was moved or deleted, emptied when too big and rows are coming, so that a pass with
 * nothing to write never leaves a file of only its header. Anything else at the path, there
 * before or put in its place, is never opened. */
static int open_file(const char *path, int rows)
{
    struct stat named, open_;
    if (fd >= 0 && (lstat(path, &named) != 0 || fstat(fd, &open_) != 0 ||
                    named.st_dev != open_.st_dev || named.st_ino != open_.st_ino)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        /* O_APPEND, so that the writes after an ftruncate start at the new end. */
        fd = mt_file_create(path);
        if (fd >= 0 && fcntl(fd, F_SETFL, O_APPEND) != 0) {
            int e = errno;
            close(fd);
            fd = -1;
            errno = e;
        }
        if (fd < 0) {
            fail("cannot create the CSV file", path, errno);
            return -1;
        }
    }
    if (fstat(fd, &open_) != 0) return -1;
    if (rows && mt_config.csv_max && (uint64_t)open_.st_size > mt_config.csv_max) {
        if (ftruncate(fd, 0) != 0) {
            fail("cannot restart the CSV file", path, errno);
            return -1;
        }
        open_.st_size = 0;
    }
    if (open_.st_size == 0 && write(fd, header, sizeof header - 1) != (ssize_t)sizeof header - 1) {
        /* An empty file (a full filesystem) is removed rather than left to be read as an export
         * with no rows; the next pass makes it again. */
        int e = errno;
        struct stat now;
        int removed = lstat(path, &now) == 0 && now.st_dev == open_.st_dev &&
                      now.st_ino == open_.st_ino && unlink(path) == 0;
        close(fd);
        fd = -1;
        fail(removed ? "cannot write the CSV file, removed it" : "cannot write the CSV file", path,
             e);
        return -1;
    }
    return 0;
}

/* Seconds with milliseconds, and the comma that ends the field. */
static void time_field(struct mt_out *o, uint64_t ns)
{
    char ms[4] = {(char)('0' + ns / 100000000 % 10), (char)('0' + ns / 10000000 % 10),
                  (char)('0' + ns / 1000000 % 10), ','};
    mt_out_u64(o, ns / 1000000000);
    mt_out_str(o, ".");
    mt_out_mem(o, ms, sizeof ms);
}

/* The blocks a row stands for (mt_weigh), to three decimals: 1 without sampling. */
static void weight_field(struct mt_out *o, const struct mt_record *b)
{
    uint64_t thousandths = (mt_weigh(b).blocks * 1000 + MT_ONE / 2) / MT_ONE;
    uint64_t milli = thousandths % 1000;
    mt_out_u64(o, thousandths / 1000);
    if (!milli) return;
    char digits[4] = {'.', (char)('0' + milli / 100), (char)('0' + milli / 10 % 10),
                      (char)('0' + milli % 10)};
    mt_out_mem(o, digits, sizeof digits);
}

static void row(struct mt_out *o, const char *event, const struct mt_record *b, uint64_t event_ns,
                uint64_t alloc_ns)
{
    const uintptr_t *ips;
    int n = b->stack ? mt_report_depth(mt_stack_get(b->stack, &ips)) : 0;
    mt_out_str(o, event);
    mt_out_str(o, ",");
    time_field(o, event_ns);
    mt_out_hex(o, b->addr & ~MT_TRACK_BIT);
    mt_out_str(o, ",");
    mt_out_u64(o, b->size);
    mt_out_str(o, ",");
    time_field(o, alloc_ns);
    mt_out_u64(o, b->tid);
    mt_out_str(o, b->addr & MT_TRACK_BIT ? ",track," : ",heap,");
    mt_out_u64(o, b->stack);
    mt_out_str(o, ",\"");
    struct mt_frame_info f[MT_INLINE_MAX];
    for (int i = 0, lines = 0; i < n; i++) {
        int k = mt_symbolize_frames(b->stack, ips[i], 1, f, MT_INLINE_MAX);
        for (int j = 0; j < k; j++) {
            if (lines++) mt_out_str(o, "\n");
            mt_report_frame(o, &f[j], MT_REPORT_QUOTED | MT_REPORT_LIBRARY);
        }
    }
    mt_out_str(o, "\",");
    weight_field(o, b);
    mt_out_str(o, "\r\n");
}

void mt_csv_pass(const char *prog)
{
    char path[PATH_MAX];
    mt_guard_hold();
    if (mt_path_expand(mt_config.csv, prog, 0, path, sizeof path) != 0) {
        fail("cannot name the CSV file", mt_config.csv, ENAMETOOLONG);
        mt_guard_release();
        return;
    }
    /* Records carry CLOCK_MONOTONIC_COARSE times; rows carry wall-clock ones, through one offset
     * taken at the first pass, so that a block's allocation time reads the same in every row. */
    uint64_t mono = mt_now_ns(CLOCK_MONOTONIC_COARSE);
    if (!wall_offset) wall_offset = mt_now_ns(CLOCK_REALTIME) - mono;
    uint64_t wall = mono + wall_offset;
    uint64_t age = (uint64_t)mt_config.csv_age * 1000000000u;
    struct blocks now = {0};
    struct mt_snapshot snap;
    int failed = mt_snapshot_take(&snap, MT_SNAPSHOT_BY_ADDRESS) != 0;
    if (!failed) {
        failed = collect(&snap, mono > age ? mono - age : 0, &now) != 0;
        mt_snapshot_drop(&snap);
    }
    if (failed || open_file(path, changed(&now)) != 0) {
        free(now.v);
        mt_guard_release();
        return;
    }

    struct mt_out o;
    mt_out_init(&o, fd);
    size_t i = 0, j = 0;
    while (i < now.n || j < written.n) {
        int c = i == now.n ? 1 : j == written.n ? -1 : order(&now.v[i], &written.v[j]);
        if (c < 0) {
            uint64_t at = now.v[i].time_ns + wall_offset;
            row(&o, "alloc", &now.v[i++], at, at);
        } else if (c > 0) {
            row(&o, "free", &written.v[j], wall, written.v[j].time_ns + wall_offset);
            j++;
        } else {
            i++;
            j++;
        }
    }
    if (mt_out_flush(&o) != 0)
        fail("cannot write the CSV file", path, errno);
    else
        failing = 0;
    free(written.v);
    written = now;
    mt_guard_release();
}
