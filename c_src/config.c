/* config.c: parses MTRACE_* once; see config.h for the contract. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_config mt_config = {
    .slots = 4096,
    .depth = 20,
    .stacks = 65536,
    .unwind = MT_UNWIND_LIBUNWIND,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static size_t join(char *buf, size_t cap, const char *const *parts, size_t count)
{
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        for (const char *c = parts[i]; *c && n < cap - 1; c++)
            buf[n++] = *c;
    buf[n] = '\0';
    return n;
}

/* One line, one write(2): stdio may allocate, and a line must not interleave with others. */
static void say(const char *name, const char *value, const char *why)
{
    char line[512];
    const char *parts[] = {"mtrace: ", name, "=", value, ": ", why};
    size_t n = join(line, sizeof line - 1, parts, COUNT(parts));
    line[n++] = '\n';
    while (write(2, line, n) < 0 && errno == EINTR)
        ;
}

static char *utoa(size_t v, char *end)
{
    *--end = '\0';
    do
        *--end = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    return end;
}

/* Reads an unsigned decimal in [lo, hi]; anything else keeps *out and says why. */
static void load_size(const char *name, size_t lo, size_t hi, size_t *out)
{
    const char *s = getenv(name);
    if (!s) return;
    size_t v = 0;
    const char *c = s;
    if (*c == '\0') goto bad;
    for (; *c; c++) {
        if (*c < '0' || *c > '9' || v > (hi - (size_t)(*c - '0')) / 10) goto bad;
        v = v * 10 + (size_t)(*c - '0');
    }
    if (v < lo) goto bad;
    *out = v;
    return;
bad:;
    char why[160], lo_s[24], hi_s[24], def_s[24];
    const char *parts[] = {"expected a whole number from ",
                           utoa(lo, lo_s + sizeof lo_s),
                           " to ",
                           utoa(hi, hi_s + sizeof hi_s),
                           "; using ",
                           utoa(*out, def_s + sizeof def_s)};
    join(why, sizeof why, parts, COUNT(parts));
    say(name, s, why);
}

void mt_config_load(void)
{
    size_t depth = (size_t)mt_config.depth;
    load_size("MTRACE_SLOTS", 16, (size_t)1 << 30, &mt_config.slots);
    load_size("MTRACE_DEPTH", 2, MT_DEPTH_MAX, &depth);
    load_size("MTRACE_STACKS", 16, (size_t)1 << 26, &mt_config.stacks);
    mt_config.depth = (int)depth;

    const char *u = getenv("MTRACE_UNWIND");
    if (u && strcmp(u, "fp") == 0)
        mt_config.unwind = MT_UNWIND_FP;
    else if (u && strcmp(u, "libunwind") != 0)
        say("MTRACE_UNWIND", u, "expected libunwind or fp; using libunwind");

    size_t pow2 = 16;
    while (pow2 < mt_config.slots)
        pow2 <<= 1;
    mt_config.slots = pow2;
}
