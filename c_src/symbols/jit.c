/* symbols/jit.c: names, files and lines of the BEAM's JIT code from what the VM registers for a
 * debugger, through the GDB JIT interface (layouts.h): one entry a loaded module, and more for the
 * VM's shared code ("global"), each with a symfile in the VM's own format (OTP 25 to 27; GDB reads
 * it with OTP's erts/etc/unix/jit-reader.c). A module's symfile, little-endian, each record
 * starting its struct's size (24, 16, 12: the C padding) plus its name's length past the last:
 *   {u32 kind = 1, pad, u64 base, u32 ranges, u32 code bytes, u16 name bytes, name with its NUL}
 *   ranges of {u32 start, u32 end (offsets from base), u32 lines, u16 name bytes, name}
 *   each followed by its lines {u32 start, u32 line, u16 file bytes, file}.
 * Kind 0 is the emulator's own entry, which names nothing; other JITs' symfiles (ELF) are not
 * modules.
 *
 * The VM adds and removes entries under a lock of its own, while this reads them: every read of
 * the VM's memory goes through mt_proc_read (a symfile freed and unmapped since fails, never
 * faults), every record of a copied symfile must lie whole inside it, and a walk of the list
 * during which the descriptor changed is made again, up to WALK_TRIES times (then the next lookup
 * walks again). A walk is made when the descriptor says the list changed: its last action, the
 * entry it was about, the first entry, and that entry's symfile, size and base (an entry freed
 * and one made at its address by a reload, with a symfile of its own).
 *
 * Dated as the perf map's lines are (symbols/perf.c), with the stack ids' clock: a module first
 * found by a walk was loaded after every stack the look at the list before it had seen (each
 * lookup looks, and walks only if the list changed), and one a walk no longer finds was gone
 * before any stack made after that walk began. A module's symfile is read the first time an
 * address in it is asked about, and kept parsed (or kept as naming nothing, when it is not well
 * formed): a module purged before any of its code was asked about names nothing.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "base/proc.h"
#include "mark/layouts.h"
#include "symbols/backend.h"

enum {
    MOD_HEAD = 24, /* sizeof the module's struct, its name at MOD_NAME */
    MOD_NAME = 18,
    RANGE_HEAD = 16,
    RANGE_NAME = 14,
    LINE_HEAD = 12,
    LINE_NAME = 10,
    KIND_MODULE = 1,
    WALK_TRIES = 4,
    WALK_CHECK = 1024,
    SYMFILE_MAX = 64 << 20, /* more is no module's (the largest of OTP's own are some 100 KiB) */
};

struct line {
    uint32_t start, line;
    const char *file;
};

struct range {
    uint32_t start, end;
    const char *name;
    uint32_t first, n; /* its lines: lines[first .. first + n) */
};

/* Keyed by entry, symfile, size, base and code bytes: what a reload at the same addresses
 * changes. */
struct module {
    uintptr_t entry, symfile, size, base, code;
    uint64_t before, gone; /* gone: UINT64_MAX while registered */
    int seen;              /* during a walk: found by it */
    int parsed;
    struct range *ranges;
    struct line *lines;
    uint32_t nranges;
};

/* What says the list changed: see the file's comment. */
struct mark {
    uintptr_t action, relevant, first, symfile, size, base;
};

static struct module *mods;
static size_t nmods, mods_cap;
static struct mark last_mark;
static uint64_t last_look; /* the clock before the latest look at the list */
static int looked, listed; /* listed: a walk has read the list whole */
static uintptr_t desc;
static size_t hint; /* where known() starts: a walk finds the modules in the order it did before */

static uint16_t u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Whether the symfile is a module's, and its base and code bytes. */
static int head_of(uintptr_t symfile, uintptr_t size, uintptr_t *base, uintptr_t *code)
{
    unsigned char h[8 + MOD_NAME];
    if (size < 8 + MOD_HEAD || mt_proc_read(symfile, h, sizeof h) != 0 || u32(h) != KIND_MODULE)
        return 0;
    memcpy(base, h + 8, sizeof *base);
    *code = u32(h + 20);
    return 1;
}

static int read_mark(struct mark *m)
{
    unsigned char d[MT_JIT_FIRST + sizeof(uintptr_t)];
    uintptr_t e[MT_JIT_ENTRY];
    *m = (struct mark){0};
    if (mt_proc_read(desc, d, sizeof d) != 0) return 0;
    m->action = u32(d + 4);
    memcpy(&m->relevant, d + 8, sizeof m->relevant);
    memcpy(&m->first, d + MT_JIT_FIRST, sizeof m->first);
    if (m->first && mt_proc_read(m->first, e, sizeof e) == 0) {
        uintptr_t code;
        m->symfile = e[2];
        m->size = e[3];
        if (!head_of(e[2], e[3], &m->base, &code)) m->base = 0;
    }
    return u32(d) == 1; /* the interface's version */
}

/* Whether the descriptor still says what it said at the latest walk. */
static int unchanged(void)
{
    struct mark now;
    return read_mark(&now) && !memcmp(&now, &last_mark, sizeof now);
}

static struct module *known(uintptr_t entry, uintptr_t symfile, uintptr_t size, uintptr_t base,
                            uintptr_t code)
{
    for (size_t k = 0; k < nmods; k++) {
        size_t i = (hint + k) % nmods;
        struct module *m = &mods[i];
        if (m->gone == UINT64_MAX && m->entry == entry && m->symfile == symfile &&
            m->size == size && m->base == base && m->code == code) {
            hint = i + 1;
            return m;
        }
    }
    return NULL;
}

/* One walk of the list: each module found is marked seen, and those new are added dated
 * `before`. Returns 0 when the list could not be read to its end, or changed meanwhile (looked
 * at every WALK_CHECK entries, so that a torn walk in a cycle stops soon). */
static int walk_once(uint64_t before)
{
    uintptr_t at = last_mark.first, e[MT_JIT_ENTRY];
    for (size_t k = 1; at; k++, at = e[0]) {
        uintptr_t base, code;
        if (k == MT_JIT_MAX || mt_proc_read(at, e, sizeof e) != 0) return 0;
        if (k % WALK_CHECK == 0 && !unchanged()) return 0;
        if (!head_of(e[2], e[3], &base, &code) || !code) continue;
        struct module *m = known(at, e[2], e[3], base, code);
        if (!m) {
            if (nmods == mods_cap) {
                size_t cap = mods_cap ? 2 * mods_cap : 512;
                struct module *t = realloc(mods, cap * sizeof *t);
                if (!t) return 0;
                mods = t;
                mods_cap = cap;
            }
            m = &mods[nmods++];
            *m = (struct module){.entry = at,
                                 .symfile = e[2],
                                 .size = e[3],
                                 .base = base,
                                 .code = code,
                                 .before = before,
                                 .gone = UINT64_MAX};
        }
        m->seen = 1;
    }
    return 1;
}

void mt_jit_refresh(uint64_t (*clock)(void))
{
    if (!looked) desc = mt_layout_jit_descriptor();
    looked = 1;
    struct mark now, after;
    uint64_t start = clock ? clock() : 0;
    if (!desc || !read_mark(&now)) return;
    if (listed && !memcmp(&now, &last_mark, sizeof now)) {
        last_look = start; /* unchanged at start: what a later walk finds came after it */
        return;
    }
    size_t old = nmods;
    for (int tries = 0; tries < WALK_TRIES; tries++) {
        last_mark = now;
        for (size_t i = 0; i < nmods; i++)
            mods[i].seen = 0;
        int whole = walk_once(last_look);
        if (whole && read_mark(&after) && !memcmp(&after, &now, sizeof now)) {
            for (size_t i = 0; i < nmods; i++)
                if (!mods[i].seen && mods[i].gone == UINT64_MAX) mods[i].gone = start;
            last_look = start;
            listed = 1;
            return;
        }
        nmods = old; /* modules added by a torn walk are found again by the next */
        start = clock ? clock() : 0;
        if (!read_mark(&now)) break;
    }
    last_mark = (struct mark){0}; /* the list kept changing: the next lookup walks again */
}

/* The name at p, of len bytes with its NUL (empty: len 1), or NULL when it is not one. */
static char *name_at(unsigned char *p, size_t len)
{
    if (len < 1 || p[len - 1] || memchr(p, '\0', len - 1)) return NULL;
    return (char *)p;
}

/* Parses the copy s of m's symfile into its ranges and lines; 0 when it is not well formed, or
 * not the module the walk found. Names are cut in place (mt_jit_name_clean) and interned. */
static int parse(struct module *m, unsigned char *s)
{
    size_t size = m->size, at = 8 + MOD_HEAD + u16(s + 8 + 16);
    uint32_t nranges = u32(s + 16), nlines = 0, lines_cap = 0;
    uintptr_t base;
    memcpy(&base, s + 8, sizeof base);
    if (u32(s) != KIND_MODULE || base != m->base || u32(s + 20) != m->code || at > size ||
        nranges > (size - at) / RANGE_HEAD)
        return 0;
    m->ranges = calloc(nranges ? nranges : 1, sizeof *m->ranges);
    if (!m->ranges) return 0;
    /* Each record lies whole inside the copy, so at never passes size. */
    for (uint32_t r = 0; r < nranges; r++) {
        if (size - at < RANGE_HEAD) return 0;
        unsigned char *p = s + at;
        uint32_t start = u32(p), end = u32(p + 4), n = u32(p + 8);
        size_t len = u16(p + 12);
        if (start > end || end > m->code || (r && start < m->ranges[r - 1].end) ||
            len > size - at - RANGE_HEAD)
            return 0;
        char *name = name_at(p + RANGE_NAME, len);
        if (!name) return 0;
        m->ranges[r] =
            (struct range){start, end, *name ? mt_jit_name_clean(name) : NULL, nlines, n};
        at += RANGE_HEAD + len;
        for (uint32_t i = 0; i < n; i++, nlines++) {
            if (size - at < LINE_HEAD) return 0;
            p = s + at;
            len = u16(p + 8);
            const char *file = len <= size - at - LINE_HEAD ? name_at(p + LINE_NAME, len) : NULL;
            if (!file) return 0;
            if (nlines == lines_cap) {
                lines_cap = lines_cap ? 2 * lines_cap : 64;
                struct line *t = realloc(m->lines, lines_cap * sizeof *t);
                if (!t) return 0;
                m->lines = t;
            }
            m->lines[nlines] =
                (struct line){u32(p), u32(p + 4), *file ? mt_symbols_intern(file) : NULL};
            at += LINE_HEAD + len;
        }
    }
    m->nranges = nranges;
    return 1;
}

/* Reads and parses m's symfile once, while it is still registered as the walk found it: a
 * change to the list since leaves it for a lookup after the next walk. */
static void read_module(struct module *m)
{
    if (m->parsed || m->gone != UINT64_MAX) return;
    unsigned char *s = m->size <= SYMFILE_MAX ? malloc(m->size) : NULL;
    if (!s && m->size <= SYMFILE_MAX) return; /* out of memory: asked again later */
    int copied = s && mt_proc_read(m->symfile, s, m->size) == 0;
    if (!unchanged()) {
        free(s);
        return;
    }
    m->parsed = 1;
    if (!copied || !parse(m, s)) {
        free(m->ranges);
        free(m->lines);
        m->ranges = NULL;
        m->lines = NULL;
        m->nranges = 0;
    }
    free(s);
}

int mt_jit_frame(uint64_t when, uintptr_t a, struct mt_frame_info *out)
{
    struct module *best = NULL;
    for (size_t i = 0; i < nmods; i++) {
        struct module *m = &mods[i];
        if (a < m->base || a - m->base >= m->code || m->before >= when) continue;
        if (m->gone != UINT64_MAX && when > m->gone) continue; /* purged before the stack */
        if (!best || m->before > best->before ||
            (m->before == best->before && m->gone > best->gone))
            best = m;
    }
    if (!best) return 0;
    read_module(best);
    uint32_t off = (uint32_t)(a - best->base), lo = 0, hi = best->nranges;
    while (lo < hi) { /* the first range starting past off */
        uint32_t mid = lo + (hi - lo) / 2;
        if (best->ranges[mid].start <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo || off >= best->ranges[lo - 1].end || !best->ranges[lo - 1].name) return 0;
    const struct range *r = &best->ranges[lo - 1];
    *out = (struct mt_frame_info){.function = r->name, .erlang = 1};
    /* The line of the instruction before a return address: the call. */
    for (uint32_t i = r->n; i-- > 0;) {
        const struct line *l = &best->lines[r->first + i];
        if (l->start < off) {
            out->file = l->file;
            out->line = l->file ? (int)l->line : 0;
            break;
        }
    }
    return 1;
}
