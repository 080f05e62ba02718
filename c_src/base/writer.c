/* writer.c: buffered output and file creation for reports and CSV; see writer.h. */
#define _GNU_SOURCE
#include "base/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

void mt_out_init(struct mt_out *o, int fd)
{
    o->fd = fd;
    o->err = 0;
    o->n = 0;
}

static void drain(struct mt_out *o)
{
    size_t done = 0;
    while (!o->err && done < o->n) {
        ssize_t w = write(o->fd, o->buf + done, o->n - done);
        if (w > 0)
            done += (size_t)w;
        else if (w < 0 && errno != EINTR)
            o->err = errno;
        else if (w == 0)
            o->err = EIO;
    }
    o->n = 0;
}

void mt_out_mem(struct mt_out *o, const char *s, size_t len)
{
    while (len && !o->err) {
        if (o->n == sizeof o->buf) drain(o);
        size_t k = sizeof o->buf - o->n;
        if (k > len) k = len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

void mt_out_str(struct mt_out *o, const char *s)
{
    mt_out_mem(o, s, strlen(s));
}

char *mt_utoa(uint64_t v, char *end)
{
    *--end = '\0';
    do
        *--end = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return end;
}

void mt_out_u64(struct mt_out *o, uint64_t v)
{
    char b[24];
    mt_out_str(o, mt_utoa(v, b + sizeof b));
}

void mt_out_i64(struct mt_out *o, int64_t v, int plus)
{
    if (v < 0)
        mt_out_mem(o, "-", 1);
    else if (plus && v > 0)
        mt_out_mem(o, "+", 1);
    mt_out_u64(o, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

void mt_out_hex(struct mt_out *o, uint64_t v)
{
    char b[18], *p = b + sizeof b;
    do
        *--p = "0123456789abcdef"[v & 15];
    while ((v >>= 4) != 0);
    *--p = 'x';
    *--p = '0';
    mt_out_mem(o, p, (size_t)(b + sizeof b - p));
}

void mt_out_quoted(struct mt_out *o, const char *s)
{
    const char *q;
    while ((q = strchr(s, '"')) != NULL) {
        mt_out_mem(o, s, (size_t)(q - s) + 1); /* the quote itself, then its double */
        mt_out_mem(o, "\"", 1);
        s = q + 1;
    }
    mt_out_str(o, s);
}

int mt_out_flush(struct mt_out *o)
{
    drain(o);
    if (!o->err) return 0;
    errno = o->err;
    return -1;
}

static int put(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    if (len >= cap - *n) return -1;
    memcpy(out + *n, s, len);
    *n += len;
    return 0;
}

int mt_path_expand(const char *tmpl, const char *prog, unsigned seq, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *c = tmpl; *c; c++) {
        char num[24];
        const char *s = c;
        size_t len = 1;
        if (c[0] == '%' && (c[1] == 'p' || c[1] == 's')) {
            s = mt_utoa(c[1] == 'p' ? (uint64_t)getpid() : seq, num + sizeof num);
            len = strlen(s);
            c++;
        } else if (c[0] == '%' && c[1] == 'n') {
            s = prog;
            len = strlen(prog);
            c++;
        } else if (c[0] == '%' && c[1] == '%') {
            c++;
        }
        if (put(out, cap, &n, s, len) != 0) return -1;
    }
    out[n] = '\0';
    return 0;
}

int mt_file_create(const char *path)
{
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* Room for "...\n" is kept at the end of the line, whatever the parts hold. */
void mt_say(const char *const *parts, size_t count)
{
    static const char hex[] = "0123456789abcdef";
    char line[MT_SAY_LINE];
    size_t n = 8, room = sizeof line - 4;
    memcpy(line, "mtrace: ", n);
    for (size_t i = 0; i < count && n <= room; i++) {
        size_t used = 0;
        for (const unsigned char *c = (const unsigned char *)parts[i]; *c; c++) {
            char e[4] = {(char)*c, '\\', hex[*c >> 4], hex[*c & 15]};
            size_t k = 1;
            if (*c == '\\') {
                k = 2;
            } else if (*c < 0x20 || *c >= 0x7f) {
                e[0] = '\\';
                e[1] = 'x';
                k = 4;
            }
            if (used + k > MT_SAY_PART || n + k > room) {
                memcpy(line + n, "...", 3);
                n += 3;
                break;
            }
            memcpy(line + n, e, k);
            n += k;
            used += k;
        }
    }
    line[n++] = '\n';
    for (size_t done = 0; done < n;) {
        ssize_t w = write(2, line + done, n - done);
        if (w > 0)
            done += (size_t)w;
        else if (w == 0 || errno != EINTR)
            break;
    }
}

void mt_say_error(const char *what, const char *path, int err)
{
    const char *parts[] = {what, ": ", path, ": ", strerror(err)};
    mt_say(parts, sizeof parts / sizeof parts[0]);
}
