/* common.h: what the report test programs share. They write with write(2) and never use stdio,
 * whose buffer would be one more heap block in every report. */
#ifndef REPORT_COMMON_H
#define REPORT_COMMON_H

#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Named functions stay on the stack: no inlining, no tail calls (the Makefile builds -O0). */
#define NAMED __attribute__((noinline, used))

static inline void say(const char *s)
{
    ssize_t w = write(1, s, strlen(s));
    (void)w;
}

static inline void say_num(uint64_t v, int hex)
{
    char b[24], *p = b + sizeof b;
    do
        *--p = "0123456789abcdef"[v % (hex ? 16 : 10)];
    while ((v /= (hex ? 16 : 10)) != 0);
    if (hex) {
        *--p = 'x';
        *--p = '0';
    }
    ssize_t w = write(1, p, (size_t)(b + sizeof b - p));
    (void)w;
}

#endif
