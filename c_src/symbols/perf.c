/* symbols/perf.c: names of the BEAM's JIT code from its perf map, /tmp/perf-<pid>.map, which a node
 * started with +JPperf map writes: one line a range, "hexstart hexsize $Name", appended as code is
 * loaded. A range freed by a code purge may be used again: the file then has several lines over
 * the same addresses, the latest naming what is there now.
 *
 * The latest line wins, among those that may have been there when the stack was made: each read
 * of the file first reads the clock (the number of stacks interned), so a line first found by a
 * read was written after every stack the read before it had seen (its `before`). Which of two
 * lines over one address held it for a stack made between two reads is not known: the later is
 * taken. A lookup of JIT code reads the lines appended since, unless no stack was made since the
 * last read.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/writer.h"
#include "symbols/backend.h"

struct line {
    uintptr_t lo, hi;
    const char *name;
    uint64_t before;
    size_t seq; /* order in the file */
};

static struct line *lines;
static size_t nlines, lines_cap;
static uintptr_t widest;   /* the largest range: how far back a lookup looks */
static off_t read_to;      /* bytes of the file parsed, whole lines only */
static uint64_t last_read; /* the clock at the start of the latest read */
static int read_once;
static char path[64];

static int by_start(const void *a, const void *b)
{
    const struct line *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

const char *mt_jit_name_clean(char *name)
{
    static const char prologue[] = "-CodeInfoPrologue";
    size_t n = strlen(name), p = sizeof prologue - 1;
    if (n > p && strcmp(name + n - p, prologue) == 0) name[n - p] = '\0';
    return mt_symbols_intern(name[0] == '$' ? name + 1 : name);
}

/* Parses whole lines of buf[0..len); returns the bytes used. */
static size_t parse(char *buf, size_t len, uint64_t before)
{
    size_t used = 0;
    for (;;) {
        char *end = memchr(buf + used, '\n', len - used), *at = buf + used, *rest;
        if (!end) return used;
        *end = '\0';
        used = (size_t)(end - buf) + 1;
        unsigned long long lo = strtoull(at, &rest, 16), size = strtoull(rest, &rest, 16);
        if (*rest++ != ' ' || size == 0) continue;
        if (nlines == lines_cap) {
            size_t cap = lines_cap ? 2 * lines_cap : 4096;
            struct line *t = realloc(lines, cap * sizeof *t);
            if (!t) return used;
            lines = t;
            lines_cap = cap;
        }
        const char *name = mt_jit_name_clean(rest);
        if (!name) continue;
        lines[nlines] = (struct line){lo, lo + size, name, before, nlines};
        nlines++;
        if (size > widest) widest = size;
    }
}

void mt_perf_refresh(uint64_t (*clock)(void))
{
    if (!path[0]) mt_path_expand("/tmp/perf-%p.map", "", 0, path, sizeof path); /* it fits */
    uint64_t start = clock ? clock() : 0, before = last_read;
    /* No stack was made since the last read: lines written since then name none. */
    if (clock && read_once && start == before) return;
    read_once = 1;
    last_read = start;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) != 0 || st.st_size <= read_to) {
        close(fd);
        return;
    }
    size_t len = (size_t)(st.st_size - read_to), old = nlines;
    char *buf = malloc(len);
    ssize_t got = buf ? pread(fd, buf, len, read_to) : -1;
    close(fd);
    if (got > 0) read_to += (off_t)parse(buf, (size_t)got, before);
    free(buf);
    if (nlines != old) qsort(lines, nlines, sizeof *lines, by_start);
}

const char *mt_perf_name(uint64_t when, uintptr_t a)
{
    size_t lo = 0, hi = nlines;
    while (lo < hi) { /* the first line starting past a */
        size_t mid = lo + (hi - lo) / 2;
        if (lines[mid].lo <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct line *best = NULL;
    for (size_t i = lo; i-- > 0 && a - lines[i].lo < widest;) {
        const struct line *l = &lines[i];
        if (a >= l->hi || l->before >= when) continue; /* elsewhere, or written after the stack */
        if (!best || l->seq > best->seq) best = l;
    }
    return best ? best->name : NULL;
}
