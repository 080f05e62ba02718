/* csvprog [ticks [idle_ms]]: allocations for the CSV export tests (MTRACE_CSV naming a plain path,
 * MTRACE_CSV_AGE=0, MTRACE_CSV_PERIOD=1). Prints "keep|drop|pair|literal <address>" per block,
 * then:
 *   - without ticks: waits until the CSV file has the drop blocks' rows, frees them, and waits
 *     until it has their free rows (so that a periodic pass, not only the one at exit, wrote
 *     them); exits 2 if either takes more than 20 s; kept blocks stay live;
 *   - with ticks: allocates and keeps one 40-byte block every 100 ms, ticks times (printing
 *     "tick <address>"), so that every pass has rows to write; then sleeps idle_ms, so that the
 *     passes of that time have none.
 * Addresses print like the CSV's: lower-case hex with 0x. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>

#include "common.h"

void *csv_pair(void);
void *csv_literal(void);

static void show(const char *what, void *p)
{
    say(what);
    say(" ");
    say_num((uintptr_t)p, 1);
    say("\n");
}

NAMED static void *csv_keep(void)
{
    return malloc(111);
}

NAMED static void *csv_drop(void)
{
    return malloc(222);
}

NAMED static void *csv_tick(void)
{
    return malloc(40);
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, ms % 1000 * 1000000};
    while (nanosleep(&t, &t) != 0)
        ;
}

static void hex(char *out, void *p)
{
    char b[24], *c = b + sizeof b;
    uintptr_t v = (uintptr_t)p;
    *--c = '\0';
    do
        *--c = "0123456789abcdef"[v % 16];
    while ((v /= 16) != 0);
    strcpy(out, "0x");
    strcat(out, c);
}

/* How many times p's address is in the CSV file. */
static int rows_of(void *p)
{
    static char text[1 << 20];
    char needle[32];
    int fd = open(getenv("MTRACE_CSV"), O_RDONLY);
    if (fd < 0) return 0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    text[got > 0 ? got : 0] = '\0';
    hex(needle, p);
    strcat(needle, ",");
    int n = 0;
    for (const char *c = text; (c = strstr(c, needle)) != NULL; c++)
        n++;
    return n;
}

static void wait_rows(void **blocks, int count, int rows)
{
    for (int waited = 0; waited < 20000; waited += 50) {
        int all = 1;
        for (int i = 0; i < count; i++)
            all = all && rows_of(blocks[i]) >= rows;
        if (all) return;
        sleep_ms(50);
    }
    say("csvprog: no rows\n");
    exit(2);
}

int main(int argc, char **argv)
{
    void *drop[3];
    for (int i = 0; i < 2; i++)
        show("keep", csv_keep());
    for (int i = 0; i < 3; i++)
        show("drop", drop[i] = csv_drop());
    show("pair", csv_pair());
    show("literal", csv_literal());
    if (argc > 1) {
        for (int i = atoi(argv[1]); i > 0; i--) {
            show("tick", csv_tick());
            sleep_ms(100);
        }
        if (argc > 2) sleep_ms(atol(argv[2]));
        return 0;
    }
    wait_rows(drop, 3, 1);
    for (int i = 0; i < 3; i++)
        free(drop[i]);
    say("freed\n");
    wait_rows(drop, 3, 2);
    return 0;
}
