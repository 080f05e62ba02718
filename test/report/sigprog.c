/* sigprog: three phases, each ended by kill(getpid(), SIGUSR2) (MTRACE_REPORT_SIGNAL=USR2), or
 * by the signal MTRACE_REPORT_SIGNAL gives when it is a number; after each it sits idle,
 * sleeping, until its report <prog>-<pid>-<n>.memlog in the current directory is complete.
 * Expected changes per report:
 *   1: signal_a +3000 bytes, +3 blocks
 *   2: signal_a -2000, -2 (its blocks freed), signal_b +500, +1; signal_churn allocates and
 *      frees 2 x 64 bytes: in the totals, not in the list
 *   3: signal_a -1000, -1; signal_b -500, -1
 * `sigprog PREFIX SUFFIX` waits for PREFIX<n>SUFFIX instead. Exits 2 when a report does not come
 * within 10 s. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

static void *a[3], *b;

NAMED static void signal_a(void)
{
    for (int i = 0; i < 3; i++)
        a[i] = malloc(1000);
}

NAMED static void signal_b(void)
{
    b = malloc(500);
}

NAMED static void signal_churn(void)
{
    for (int i = 0; i < 2; i++)
        free(malloc(64));
}

static const char *prefix, *suffix;

/* Builds the name by hand: snprintf is stdio. */
static void report_name(char *out, unsigned n)
{
    char digits[24], *p = digits + sizeof digits;
    *--p = '\0';
    unsigned long pid = (unsigned long)getpid();
    do
        *--p = (char)('0' + pid % 10);
    while ((pid /= 10) != 0);
    if (prefix) {
        strcpy(out, prefix);
    } else {
        strcpy(out, "sigprog-");
        strcat(out, p);
        strcat(out, "-");
    }
    size_t len = strlen(out);
    out[len++] = (char)('0' + n);
    strcpy(out + len, suffix ? suffix : ".memlog");
}

static int complete(unsigned n)
{
    static char text[65536];
    char name[4096], end[64] = "mtrace: end of report ";
    report_name(name, n);
    int fd = open(name, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    text[got > 0 ? got : 0] = '\0';
    size_t len = strlen(end);
    end[len] = (char)('0' + n);
    end[len + 1] = '\0';
    return strstr(text, end) != NULL;
}

static int report_signal(void)
{
    const char *s = getenv("MTRACE_REPORT_SIGNAL");
    int sig = s ? atoi(s) : 0;
    return sig > 0 ? sig : SIGUSR2;
}

static void report_and_wait(unsigned n)
{
    kill(getpid(), report_signal());
    struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 1000; i++) {
        if (complete(n)) return;
        nanosleep(&pause, NULL);
    }
    say("sigprog: no report\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc == 3) {
        prefix = argv[1];
        suffix = argv[2];
    }
    signal_a();
    report_and_wait(1);
    free(a[0]);
    free(a[1]);
    signal_b();
    signal_churn();
    report_and_wait(2);
    free(a[2]);
    free(b);
    report_and_wait(3);
    say("sigprog: done\n");
    return 0;
}
