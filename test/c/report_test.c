/* report_test.c: live reports written while four threads allocate and free, driven directly (no
 * LD_PRELOAD), so that the report, the symbolizer and the recorder run side by side under the
 * sanitizers. Made-up addresses serve as blocks (nothing reads them without
 * MTRACE_REPORT_REACHABLE). 1000 blocks stay live throughout; each churning thread keeps at most 64
 * more. Every report must be whole and its live heap within those bounds; once the threads are
 * done, exactly the 1000 and their bytes. Prints one line per check and "N passed, M failed"; exits
 * 1 on any failure. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blocks.h"
#include "out/report.h"
#include "record/recorder.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    ok ? passed++ : failed++;
}

enum { KEPT = 1000, CHURNERS = 4, WINDOW = 64, REPORTS = 200 };

static int stop;

static void *churn(void *arg)
{
    unsigned owner = (unsigned)(uintptr_t)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
        for (unsigned i = 0; i < 512; i++) {
            alloc(block(owner, i));
            if (i >= WINDOW - 1) release(block(owner, i - (WINDOW - 1)));
            if (i == 511)
                for (unsigned j = 512 - (WINDOW - 1); j < 512; j++)
                    release(block(owner, j));
        }
    return NULL;
}

/* One live report into a memory file; returns its text (NUL-terminated, to free) or NULL. */
static char *report(unsigned seq)
{
    int fd = memfd_create("report", 0);
    if (fd < 0) return NULL;
    struct mt_report_req req = {.prog = "report_test", .seq = seq, .when = "on request"};
    char *text = NULL;
    off_t n;
    if (mt_report_write(fd, &req) == 0 && (n = lseek(fd, 0, SEEK_END)) > 0 &&
        (text = calloc(1, (size_t)n + 1)) && pread(fd, text, (size_t)n, 0) != n) {
        free(text);
        text = NULL;
    }
    close(fd);
    return text;
}

/* The live heap's bytes and blocks, from the summary line; -1 when it is missing. */
static int live_heap(const char *text, long long *bytes, long long *blocks)
{
    const char *l = strstr(text, "  live heap: ");
    return l && sscanf(l, "  live heap: %lld bytes in %lld block", bytes, blocks) == 2 ? 0 : -1;
}

int main(void)
{
    /* The tallies and totals a report prints are kept when a report is configured. */
    setenv("MTRACE_REPORT", "/dev/null", 1);
    unsetenv("MTRACE_SAMPLE");
    check(mt_start() && mt_active(), "the recorder starts without LD_PRELOAD");
    long long kept_bytes = 0;
    for (unsigned i = 0; i < KEPT; i++) {
        alloc(block(1, i));
        kept_bytes += (long long)size_of((uintptr_t)block(1, i));
    }

    pthread_t t[CHURNERS];
    for (unsigned k = 0; k < CHURNERS; k++)
        pthread_create(&t[k], NULL, churn, (void *)(uintptr_t)(10 + k));
    unsigned whole = 0, bounded = 0;
    for (unsigned seq = 1; seq <= REPORTS; seq++) {
        char *text = report(seq);
        char end[64];
        snprintf(end, sizeof end, "\nmtrace: end of report %u\n", seq);
        long long bytes, blocks;
        if (text && strstr(text, end) && strstr(text, "report_test")) whole++;
        if (text && live_heap(text, &bytes, &blocks) == 0 && blocks >= KEPT &&
            blocks <= KEPT + CHURNERS * WINDOW && bytes >= kept_bytes)
            bounded++;
        free(text);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (unsigned k = 0; k < CHURNERS; k++)
        pthread_join(t[k], NULL);
    check(whole == REPORTS, "200 reports during churn: each whole, with its title and end line");
    check(bounded == REPORTS,
          "each counts the 1000 kept blocks and at most 64 more a churning thread");

    char *text = report(REPORTS + 1);
    long long bytes = 0, blocks = 0;
    check(text && live_heap(text, &bytes, &blocks) == 0 && blocks == KEPT && bytes == kept_bytes,
          "after the churn: exactly the kept blocks and their bytes");
    free(text);
    for (unsigned i = 0; i < KEPT; i++)
        release(block(1, i));
    text = report(REPORTS + 2);
    check(text && live_heap(text, &bytes, &blocks) == 0 && blocks == 0 && bytes == 0,
          "once they are freed: an empty heap");
    free(text);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
