/* symbols.c: the symbolizer's seam (see symbols.h): which module an address of a stack was in,
 * the backends asked about it (symbols/elf.c, symbols/dwarf.c; symbols/jit.c, then
 * symbols/perf.c, for JIT code in none), and the caches.
 *
 * Module records are never freed: an unloaded module keeps its record (its range and the walks
 * that saw it) so that old stacks are still told apart from the modules loaded after it, and
 * the strings handed out never dangle.
 */
#define _GNU_SOURCE
#include "symbols/symbols.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/config.h"
#include "symbols/backend.h"

struct module {
    struct module *next;
    char *path;
    uintptr_t base, lo, hi; /* load bias and the span of the PT_LOAD segments */
    struct mt_file_id file; /* all zero when the path names no regular file */
    int is_file;
    unsigned first, last; /* the walks that saw it: first..last, without a gap */
    int live;             /* seen in the latest walk */
    int seen;             /* during a walk: seen in it */
    int elf_tried, dwarf_tried;
    struct mt_elf_syms *elf;
    struct mt_dwarf *dwarf;
};

/* A look at the module list. Stacks with ids in (clock of the walk before, clock] were interned
 * between the two; exact: every unload between them is one of the modules the walk found gone. */
struct walk {
    uint64_t clock;
    int exact;
};

/* How much a lookup reads: names demangled or not, and DWARF or the symbol tables only. */
enum { DEMANGLE = 1, NAMES_ONLY = 2 };

/* One cached answer: frames pool[first .. first + n) for address a of module m. */
struct entry {
    const struct module *m;
    uintptr_t a;
    int mode;
    uint32_t first, n;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *modules;
static struct walk *walks;
static unsigned nwalks, walks_cap;
static unsigned long long seen_adds, seen_subs;
static int walked;
static uint64_t (*clock_fn)(void);
static char *debug_path;

static struct entry *entries;
static size_t entries_cap, entries_used;
static struct mt_frame_info *pool;
static size_t pool_cap, pool_used;

static char **interned;
static size_t interned_cap, interned_used;

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Grows an open-addressed table of pointers to twice its size; NULL slots are empty. */
static int grow_strings(void)
{
    size_t cap = interned_cap ? interned_cap * 2 : 1024;
    char **t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < interned_cap; i++) {
        if (!interned[i]) continue;
        size_t j = hash_str(interned[i]) & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = interned[i];
    }
    free(interned);
    interned = t;
    interned_cap = cap;
    return 0;
}

const char *mt_symbols_intern(const char *s)
{
    if (!s) return NULL;
    if (2 * (interned_used + 1) > interned_cap && grow_strings() != 0) return NULL;
    size_t i = hash_str(s) & (interned_cap - 1);
    for (; interned[i]; i = (i + 1) & (interned_cap - 1))
        if (strcmp(interned[i], s) == 0) return interned[i];
    if (!(interned[i] = strdup(s))) return NULL;
    interned_used++;
    return interned[i];
}

static size_t hash_entry(const struct module *m, uintptr_t a, int mode)
{
    uint64_t h = ((uint64_t)(uintptr_t)m * 0x9E3779B97F4A7C15ull) ^ a ^ (uint64_t)mode << 62;
    h *= 0xff51afd7ed558ccdull;
    return (size_t)(h ^ h >> 33);
}

static struct entry *find_entry(const struct module *m, uintptr_t a, int mode)
{
    if (!entries_cap) return NULL;
    for (size_t i = hash_entry(m, a, mode) & (entries_cap - 1);; i = (i + 1) & (entries_cap - 1)) {
        struct entry *e = &entries[i];
        if (!e->m) return NULL;
        if (e->m == m && e->a == a && e->mode == mode) return e;
    }
}

static int grow_entries(void)
{
    size_t cap = entries_cap ? entries_cap * 2 : 4096;
    struct entry *t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < entries_cap; i++) {
        if (!entries[i].m) continue;
        size_t j = hash_entry(entries[i].m, entries[i].a, entries[i].mode) & (cap - 1);
        while (t[j].m)
            j = (j + 1) & (cap - 1);
        t[j] = entries[i];
    }
    free(entries);
    entries = t;
    entries_cap = cap;
    return 0;
}

/* Keeps n frames as the answer for (m, a, mode); on failure the answer is simply not kept. */
static void remember(const struct module *m, uintptr_t a, int mode, const struct mt_frame_info *f,
                     int n)
{
    if (2 * (entries_used + 1) > entries_cap && grow_entries() != 0) return;
    if (pool_used + (size_t)n > pool_cap) {
        size_t cap = pool_cap ? pool_cap * 2 : 4096;
        struct mt_frame_info *p = realloc(pool, cap * sizeof *p);
        if (!p) return;
        pool = p;
        pool_cap = cap;
    }
    size_t i = hash_entry(m, a, mode) & (entries_cap - 1);
    while (entries[i].m)
        i = (i + 1) & (entries_cap - 1);
    entries[i] = (struct entry){m, a, mode, (uint32_t)pool_used, (uint32_t)n};
    memcpy(&pool[pool_used], f, (size_t)n * sizeof *f);
    pool_used += (size_t)n;
    entries_used++;
}

/* The debug file search path libdwfl reads: MTRACE_DEBUG_DIRS, then Debian's. */
static void set_debug_path(void)
{
    const char *dirs = mt_config.debug_dirs;
    const char *system_dir = "/usr/lib/debug";
    size_t len = dirs && *dirs ? strlen(dirs) + 1 : 0;
    debug_path = malloc(len + strlen(system_dir) + 1);
    if (!debug_path) return;
    if (len) {
        memcpy(debug_path, dirs, len - 1);
        debug_path[len - 1] = ':';
    }
    strcpy(debug_path + len, system_dir);
}

/* One walk of the loader's list, as seen under its lock. */
struct walking {
    unsigned index;
    int failed, counted;
    unsigned long long adds, subs;
    uint64_t clock;
};

static int walk_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct walking *w = arg;
    if (!w->counted) {
        /* Read here, under the loader's lock, so that the clock and the counts describe the
         * very list this walk sees. */
        w->counted = 1;
        w->clock = clock_fn ? clock_fn() : 0;
        if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
            w->adds = info->dlpi_adds;
            w->subs = info->dlpi_subs;
        } else {
            w->failed = 1;
        }
    }
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo) lo = start;
        if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
    }
    if (lo >= hi) lo = hi = 0; /* kept, so that the counts still match, but covering nothing */
    char exe[PATH_MAX];
    const char *path = info->dlpi_name;
    if (!path || !path[0]) {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len > 0) exe[len] = '\0';
        path = len > 0 ? exe : program_invocation_name;
    }
    struct stat st;
    int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    struct mt_file_id id = is_file ? mt_file_id_of(&st) : (struct mt_file_id){0};
    for (struct module *m = modules; m; m = m->next)
        if (m->live && m->base == info->dlpi_addr && mt_same_file(m->file, id) &&
            !strcmp(m->path, path)) {
            m->seen = 1;
            return 0;
        }
    struct module *m = calloc(1, sizeof *m);
    char *copy = strdup(path);
    if (!m || !copy) {
        free(m);
        free(copy);
        w->failed = 1;
        return 0;
    }
    *m = (struct module){.next = modules,
                         .path = copy,
                         .base = info->dlpi_addr,
                         .lo = lo,
                         .hi = hi,
                         .file = id,
                         .is_file = is_file,
                         .first = w->index,
                         .last = w->index,
                         .live = 1,
                         .seen = 1};
    modules = m;
    return 0;
}

/* The loader's counts of loads and unloads so far. */
static int counts_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1;
}

static void walk(void)
{
    if (nwalks == walks_cap) {
        unsigned cap = walks_cap ? walks_cap * 2 : 64;
        struct walk *t = realloc(walks, cap * sizeof *t);
        if (!t) return;
        walks = t;
        walks_cap = cap;
    }
    struct walking w = {.index = nwalks};
    for (struct module *m = modules; m; m = m->next)
        m->seen = 0;
    dl_iterate_phdr(walk_cb, &w);
    unsigned long long gone = 0;
    for (struct module *m = modules; m; m = m->next) {
        if (!m->live) continue;
        if (m->seen)
            m->last = nwalks;
        else
            m->live = 0, gone++;
    }
    /* Only an unload can hide a module from the walks: one loaded since and still there is
     * found. So a walk is exact when the loader unloaded just the modules it found gone; the
     * first, when nothing was ever unloaded. */
    int exact = !w.failed && w.subs - (walked ? seen_subs : 0) == gone;
    walks[nwalks++] = (struct walk){w.clock, exact};
    seen_adds = w.adds;
    seen_subs = w.subs;
    walked = 1;
}

/* Walks when a module came or went since the last walk (or the loader keeps no counts). */
static void refresh(void)
{
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(counts_cb, c);
    if (!walked || (c[0] | c[1]) == 0 || c[0] != seen_adds || c[1] != seen_subs) walk();
}

static struct module *covering(uintptr_t a, unsigned w)
{
    for (struct module *m = modules; m; m = m->next)
        if (a >= m->lo && a < m->hi && m->first <= w && w <= m->last) return m;
    return NULL;
}

/* The module whose code was at a when stack `when` was interned (see symbols.h); NULL with
 * *state MT_FRAME_REPLACED when that is not known, or MT_FRAME_LOADED when no module was there. */
static struct module *resolve(uint64_t when, uintptr_t a, int *state)
{
    *state = MT_FRAME_LOADED;
    if (!nwalks) return NULL;
    unsigned k = nwalks;
    if (clock_fn) {
        unsigned lo = 0, hi = nwalks;
        while (lo < hi) {
            unsigned mid = lo + (hi - lo) / 2;
            if (when <= walks[mid].clock)
                hi = mid;
            else
                lo = mid + 1;
        }
        k = lo;
    }
    if (k == nwalks) {
        /* After the latest walk, and the loader's counts have not moved since. */
        struct module *m = covering(a, nwalks - 1);
        return m && m->live ? m : NULL;
    }
    struct module *before = k ? covering(a, k - 1) : NULL, *after = covering(a, k);
    if (before == after) return before;
    if (walks[k].exact && !(before && after)) return before ? before : after;
    *state = MT_FRAME_REPLACED;
    return NULL;
}

/* The frames of address a in module m, computed (cache miss). At most MT_INLINE_MAX. */
static int compute(struct module *m, uintptr_t a, int mode, struct mt_frame_info *f)
{
    int demangle = mode & DEMANGLE, n = 0;
    if (!(mode & NAMES_ONLY)) {
        if (!m->dwarf_tried && m->is_file)
            m->dwarf = mt_dwarf_open(m->path, m->file, m->base, debug_path);
        m->dwarf_tried = 1;
        n = m->dwarf ? mt_dwarf_frames(m->dwarf, a, demangle, f, MT_INLINE_MAX) : 0;
    }
    if (!n) {
        f[0] = (struct mt_frame_info){0};
        n = 1;
    }
    if (!m->elf_tried && m->is_file) m->elf = mt_elf_open(m->path, m->file);
    m->elf_tried = 1;
    /* The function the machine code is in keeps its symbol table name, as mtrace named it
     * before it read DWARF: a clone's suffix, the public alias of several. */
    const char *name = mt_elf_name(m->elf, a - m->base, demangle);
    if (name) f[n - 1].function = name;
    for (int i = 0; i < n; i++) {
        f[i].path = m->path;
        f[i].offset = a + 1 - m->base;
        f[i].function = mt_symbols_intern(f[i].function);
        f[i].file = mt_symbols_intern(f[i].file);
        if (!f[i].file) f[i].line = 0;
    }
    return n;
}

static int lookup(uint64_t when, uintptr_t ip, int mode, struct mt_frame_info *out, int max)
{
    uintptr_t a = ip - 1;
    int state, n;
    pthread_mutex_lock(&cache_lock);
    int saved = errno;
    if (!debug_path) set_debug_path();
    refresh();
    struct module *m = resolve(when, a, &state);
    if (!m && state == MT_FRAME_LOADED) {
        n = 1;
        mt_jit_refresh(clock_fn);
        if (!mt_jit_frame(when, ip, out)) {
            mt_perf_refresh(clock_fn);
            const char *name = mt_perf_name(when, ip);
            out[0] = (struct mt_frame_info){.function = name, .erlang = !!name};
        }
    } else if (!m) {
        out[0] = (struct mt_frame_info){.unloaded = state};
        n = 1;
    } else {
        struct mt_frame_info computed[MT_INLINE_MAX];
        const struct mt_frame_info *f = computed;
        struct entry *e = find_entry(m, a, mode);
        if (e) {
            f = &pool[e->first];
            n = (int)e->n;
        } else {
            n = compute(m, a, mode, computed);
            remember(m, a, mode, computed, n);
        }
        /* Too deep for the caller: the innermost frames and the function they are in. */
        int k = n <= max ? n : max;
        memcpy(out, f, (size_t)(k - 1) * sizeof *f);
        out[k - 1] = f[n - 1];
        n = k;
        for (int i = 0; i < n; i++)
            out[i].unloaded = m->live ? MT_FRAME_LOADED : MT_FRAME_UNLOADED;
    }
    errno = saved;
    pthread_mutex_unlock(&cache_lock);
    return n;
}

int mt_symbolize_frames(uint64_t when, uintptr_t ip, int demangle, struct mt_frame_info *out,
                        int max)
{
    return lookup(when, ip, demangle ? DEMANGLE : 0, out, max);
}

struct mt_frame_info mt_symbolize_function(uint64_t when, uintptr_t ip, int demangle)
{
    struct mt_frame_info f;
    lookup(when, ip, NAMES_ONLY | (demangle ? DEMANGLE : 0), &f, 1);
    return f;
}

struct mt_data_info mt_symbolize_data(uintptr_t a)
{
    struct mt_data_info d = {0};
    pthread_mutex_lock(&cache_lock);
    int saved = errno;
    if (!debug_path) set_debug_path();
    refresh();
    struct module *m = nwalks ? covering(a, nwalks - 1) : NULL;
    if (m && m->live) {
        if (!m->elf_tried && m->is_file) m->elf = mt_elf_open(m->path, m->file);
        m->elf_tried = 1;
        uint64_t start = 0;
        const char *name = mt_elf_data_name(m->elf, a - m->base, &start);
        d.path = m->path;
        d.symbol = mt_symbols_intern(name);
        d.offset = name ? a - m->base - start : a - m->base;
    }
    errno = saved;
    pthread_mutex_unlock(&cache_lock);
    return d;
}

const char *mt_symbolize_class(uintptr_t vptr)
{
    Dl_info info;
    if (!vptr || !dladdr((void *)vptr, &info) || !info.dli_sname ||
        strncmp(info.dli_sname, "_ZTV", 4) != 0)
        return NULL;
    char *name = mt_demangle(info.dli_sname);
    const char *cls = name && strncmp(name, "vtable for ", 11) == 0 ? name + 11 : info.dli_sname;
    pthread_mutex_lock(&cache_lock);
    cls = mt_symbols_intern(cls);
    pthread_mutex_unlock(&cache_lock);
    free(name);
    return cls;
}

void mt_symbols_start(uint64_t (*clock)(void))
{
    pthread_mutex_lock(&cache_lock);
    int saved = errno;
    clock_fn = clock;
    if (!debug_path) set_debug_path();
    walk();
    errno = saved;
    pthread_mutex_unlock(&cache_lock);
}

void mt_symbols_unloading(void)
{
    pthread_mutex_lock(&cache_lock);
    int saved = errno;
    refresh();
    errno = saved;
    pthread_mutex_unlock(&cache_lock);
}
