/* glibc_heap.c: the walk of glibc's heap (see glibc_heap.h). */
#define _GNU_SOURCE
#include "mark/glibc_heap.h"

#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/platform.h"
#include "base/sort.h"
#include "base/writer.h"
#include "record/allocator.h"

extern void *__libc_malloc(size_t);

#define MAX_ARENAS 4096
#define MAX_HEAPS 65536
/* A tag on an entry of the free-looking list: the chunk is glibc's own (a thread's tcache), in
 * use but no block. Chunk addresses are 16-aligned, so the low bit is free. */
#define INTERNAL 1

struct arena {
    uintptr_t at;
    uintptr_t w[MT_ARENA_SIZE / 8];
};

struct walk {
    struct mt_heap *h;
    const struct mt_maps *maps;
    const struct mt_world *world;
    uintptr_t self_sp;
    pid_t pid;
    int direct;
    struct arena a; /* the arena being walked */
    uintptr_t par[MT_PAR_SIZE / 8];
    uintptr_t main_arena, sbrk_base;
    struct mt_heap_chunk *used, *fr, *tmp; /* chunks that look in use (start, size); free ones */
    size_t nused, nfr, cap;
    uintptr_t *freed, *cand; /* fastbin and tcache chunks, tcaches; tcache candidates */
    size_t nfreed, ncand, cap_cand;
    uintptr_t heap_lo[MAX_HEAPS], heap_hi[MAX_HEAPS];
    size_t nheaps;
};

/* Libc's writable data (.data and .bss), where main_arena and mp_ live; found before the stop,
 * since dl_iterate_phdr takes the loader's lock. */
static uintptr_t libc_lo, libc_hi, main_known;

static int find_libc(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t fn = (uintptr_t)arg, lo = 0, hi = 0;
    int has = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (fn >= s && fn < s + ph->p_memsz) has = 1;
        if (ph->p_flags & PF_W) {
            lo = s;
            hi = s + ph->p_memsz;
        }
    }
    if (!has || !hi) return 0;
    libc_lo = lo;
    libc_hi = hi;
    return 1;
}

static int version(void)
{
    const char *v = gnu_get_libc_version();
    int major = 0, minor = 0;
    for (; *v >= '0' && *v <= '9'; v++)
        major = major * 10 + (*v - '0');
    if (*v == '.')
        for (v++; *v >= '0' && *v <= '9'; v++)
            minor = minor * 10 + (*v - '0');
    return major * 100 + minor;
}

int mt_heap_prepare(struct mt_heap *h)
{
    *h = (struct mt_heap){0};
    h->version = version();
    if (h->version < MT_GLIBC_CHECKED_MIN || h->version > MT_GLIBC_CHECKED_MAX) {
        h->refused = "this glibc's malloc layout is not one mtrace has checked (2.35 to 2.41)";
        return -1;
    }
    if (mt_real.foreign) {
        h->refused = "the process's allocator is not glibc's (stats/0's allocator): its heap is "
                     "not walked";
        return -1;
    }
    if (!libc_hi) dl_iterate_phdr(find_libc, (void *)(uintptr_t)__libc_malloc);
    if (!libc_hi) {
        h->refused = "libc's data segment not found";
        return -1;
    }
    return 0;
}

/* Reads [a, a + len) of glibc's structures, which a bad pointer could put anywhere. */
static int peek(struct walk *w, uintptr_t a, void *to, size_t len)
{
    if (!w->direct) {
        struct iovec local = {to, len}, remote = {(void *)a, len};
        ssize_t got = process_vm_readv(w->pid, &local, 1, &remote, 1, 0);
        if (got == (ssize_t)len) return 0;
        if (got >= 0 || (errno != ENOSYS && errno != EPERM)) return -1;
        w->direct = 1;
    }
    if (!mt_maps_readable(w->maps, a, a + len)) return -1;
    memcpy(to, (const void *)a, len);
    return 0;
}

static uintptr_t word(uintptr_t a)
{
    return *(const volatile uintptr_t *)a;
}

/* An arena's shape: each of its 127 bins empty (both links to itself) or holding chunks (both
 * links elsewhere, aligned), enough of them empty, and its memory counts in order. */
static int arena_shape(uintptr_t at, const uintptr_t *w)
{
    int empty = 0;
    for (int i = 1; i <= MT_ARENA_NBINS; i++) {
        uintptr_t self = at + MT_ARENA_BINS + 16 * (uintptr_t)(i - 1) - 16;
        uintptr_t fd = w[(MT_ARENA_BINS + 16 * (i - 1)) / 8],
                  bk = w[(MT_ARENA_BINS + 16 * (i - 1)) / 8 + 1];
        if (fd == self && bk == self)
            empty++;
        else if (fd == self || bk == self || !fd || !bk || (fd | bk) % MT_CHUNK_ALIGN)
            return 0;
    }
    uintptr_t top = w[MT_ARENA_TOP / 8];
    return empty >= 8 && top && top % MT_CHUNK_ALIGN == 0 && w[MT_ARENA_NEXT / 8] &&
           w[MT_ARENA_NEXT / 8] % 8 == 0 &&
           w[MT_ARENA_SYSTEM_MEM / 8] <= w[MT_ARENA_MAX_SYSTEM_MEM / 8];
}

static uintptr_t initial_top(uintptr_t arena)
{
    return arena + MT_ARENA_BINS - 16;
}

/* mp_'s shape, and its agreement with the main arena: the sbrk'd range it begins ends where the
 * main arena's top chunk does. */
static int par_shape(const uintptr_t *p, const uintptr_t *arena, uintptr_t arena_at,
                     uintptr_t top_size)
{
    const int *ints = (const int *)p;
    int n_mmaps = ints[MT_PAR_N_MMAPS / 4], max_n_mmaps = ints[MT_PAR_MAX_N_MMAPS / 4];
    uintptr_t mmapped = p[MT_PAR_MMAPPED_MEM / 8], sbrk = p[MT_PAR_SBRK_BASE / 8];
    if (p[MT_PAR_TCACHE_BINS / 8] > MT_TCACHE_BINS || p[MT_PAR_TCACHE_COUNT / 8] > 65535 ||
        p[MT_PAR_TCACHE_MAX_BYTES / 8] > 16 * (MT_TCACHE_BINS - 1) + 24 ||
        p[MT_PAR_MMAP_THRESHOLD / 8] > MT_MMAP_THRESHOLD_MAX || n_mmaps < 0 ||
        max_n_mmaps < n_mmaps || mmapped > p[MT_PAR_MAX_MMAPPED_MEM / 8] || mmapped % MT_PAGE ||
        sbrk % MT_CHUNK_ALIGN)
        return 0;
    uintptr_t top = arena[MT_ARENA_TOP / 8], system = arena[MT_ARENA_SYSTEM_MEM / 8];
    if (top == initial_top(arena_at)) return sbrk == 0 || system == 0;
    return sbrk && top >= sbrk && top < sbrk + system && top + top_size == sbrk + system;
}

/* main_arena and mp_, each the one structure of its shape in libc's data. */
static const char *find_main(struct walk *w)
{
    size_t found = 0;
    for (uintptr_t at = (libc_lo + 7) & ~(uintptr_t)7; at + MT_ARENA_SIZE <= libc_hi; at += 8)
        if (arena_shape(at, (const uintptr_t *)at)) {
            w->main_arena = at;
            found++;
        }
    if (found != 1) return found ? "more than one main arena found" : "main arena not found";
    const uintptr_t *arena = (const uintptr_t *)w->main_arena;
    if (((const int *)arena)[MT_ARENA_FLAGS / 4] & MT_ARENA_NONCONTIGUOUS)
        return "the main arena is not contiguous (sbrk failed)";
    uintptr_t top = arena[MT_ARENA_TOP / 8], head = 0;
    if (top != initial_top(w->main_arena) && peek(w, top + 8, &head, sizeof head) != 0)
        return "the main arena's top chunk cannot be read";
    found = 0;
    for (uintptr_t at = (libc_lo + 7) & ~(uintptr_t)7; at + MT_PAR_SIZE <= libc_hi; at += 8)
        if (par_shape((const uintptr_t *)at, arena, w->main_arena,
                      head & ~(uintptr_t)MT_CHUNK_FLAGS)) {
            memcpy(w->par, (const void *)at, MT_PAR_SIZE);
            found++;
        }
    if (found != 1)
        return found ? "more than one set of malloc parameters" : "malloc parameters not found";
    w->sbrk_base = w->par[MT_PAR_SBRK_BASE / 8];
    return NULL;
}

/* A heap about to be walked, [lo, hi): its pages hold no mmapped chunk (find_mmapped). */
static void add_heap(struct walk *w, uintptr_t lo, uintptr_t hi)
{
    w->h->heaps++;
    if (w->nheaps < MAX_HEAPS) {
        w->heap_lo[w->nheaps] = lo;
        w->heap_hi[w->nheaps++] = hi;
    }
}

static void add_free(struct walk *w, uintptr_t c, size_t size)
{
    if (w->nfr < w->cap) w->fr[w->nfr++] = (struct mt_heap_chunk){c, size};
    w->h->free_bytes += size;
}

/* Walks the chunks of [first, end): top is the arena's top chunk when it lies there, else the
 * range ends in a fencepost (a chunk of 16 bytes). Direct reads: the range is a validated heap,
 * mapped and readable. */
static void walk_range(struct walk *w, uintptr_t first, uintptr_t end, uintptr_t top, int main)
{
    for (uintptr_t c = first; c < end;) {
        uintptr_t head = word(c + 8), size = head & ~(uintptr_t)MT_CHUNK_FLAGS;
        if (c == top) {
            if (c + size != end) w->h->bad++;
            w->h->top_bytes += size;
            add_free(w, c, size);
            return;
        }
        if (size == 16 && !top) return; /* the fencepost that ends an old heap */
        if (size < MT_CHUNK_MIN || size % MT_CHUNK_ALIGN || size > end - c ||
            (head & MT_CHUNK_MMAPPED) || end - c - size < 16) {
            w->h->bad++;
            return;
        }
        uintptr_t next = c + size;
        if (!(word(next + 8) & MT_CHUNK_PREV_INUSE)) {
            if (word(next) != size) {
                w->h->bad++;
                return;
            }
            add_free(w, c, size);
        } else {
            if (!main != !!(head & MT_CHUNK_NON_MAIN)) w->h->bad++;
            if (w->nused < w->cap) w->used[w->nused++] = (struct mt_heap_chunk){c, size};
            /* malloc gives the whole of a free chunk whose remainder would be too small to
             * split: a tcache may sit in a chunk up to MT_CHUNK_MIN - 16 bytes larger */
            if (size - MT_TCACHE_CHUNK < MT_CHUNK_MIN && w->ncand < w->cap_cand)
                w->cand[w->ncand++] = c;
        }
        c = next;
    }
}

/* A thread arena's heaps, from the one that holds its top back along their links. */
static const char *walk_thread_arena(struct walk *w)
{
    uintptr_t at = w->a.at, top = w->a.w[MT_ARENA_TOP / 8];
    uintptr_t hh = top & ~(MT_HEAP_MAX - 1);
    for (size_t n = 0; hh; n++) {
        uintptr_t info[3];
        if (n > MAX_HEAPS || hh % MT_HEAP_MAX || peek(w, hh, info, sizeof info) != 0 ||
            info[0] != at || info[2] > MT_HEAP_MAX || info[2] < MT_HEAP_INFO_BYTES ||
            !mt_maps_readable(w->maps, hh, hh + info[2]))
            return "a thread arena's heap does not validate";
        uintptr_t first =
            hh == at - MT_HEAP_INFO_BYTES
                ? (at + MT_ARENA_SIZE + MT_CHUNK_ALIGN - 1) & ~(uintptr_t)(MT_CHUNK_ALIGN - 1)
                : hh + MT_HEAP_INFO_BYTES;
        int has_top = top >= hh && top < hh + info[2];
        uintptr_t end = has_top ? top + (word(top + 8) & ~(uintptr_t)MT_CHUNK_FLAGS) : hh + info[2];
        if (has_top && end > hh + info[2]) return "a thread arena's top chunk overruns its heap";
        add_heap(w, hh, hh + info[2]);
        walk_range(w, first, end, has_top ? top : 0, 0);
        hh = info[1];
    }
    return NULL;
}

static uintptr_t chunk_addr(const struct mt_heap_chunk *c)
{
    return c->addr;
}

static uintptr_t word_value(const uintptr_t *w)
{
    return *w;
}

MT_DEFINE_RADIX_SORT(radix, struct mt_heap_chunk, chunk_addr)
MT_DEFINE_UPPER_BOUND(past, struct mt_heap_chunk, chunk_addr)
MT_DEFINE_RADIX_SORT(radix_words, uintptr_t, word_value)

/* The chunk that looks in use at c with this size, or NULL: every free list must lead to such
 * chunks only. */
static const struct mt_heap_chunk *used_at(const struct walk *w, uintptr_t c)
{
    size_t lo = 0, hi = w->nused;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->used[mid].addr < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->nused && w->used[lo].addr == c ? &w->used[lo] : NULL;
}

static void add_freed(struct walk *w, uintptr_t c)
{
    if (w->nfreed < w->cap) w->freed[w->nfreed++] = c;
}

/* A fastbin's chain: chunks of its size, linked by safe-linked pointers. */
static void follow_fastbins(struct walk *w)
{
    for (int i = 0; i < MT_ARENA_NFASTBINS; i++) {
        size_t size = (size_t)(i + 2) * 16, n = 0;
        for (uintptr_t c = w->a.w[MT_ARENA_FASTBINS / 8 + i]; c; n++) {
            const struct mt_heap_chunk *u = used_at(w, c);
            if (!u || u->size != size || n > w->nused) {
                w->h->bad++;
                break;
            }
            add_freed(w, c);
            add_free(w, c, size);
            w->h->fast++;
            w->h->fast_bytes += size;
            c = mt_reveal(c + 16, word(c + 16));
        }
    }
}

/* A candidate that proves to be a thread's tcache: every list leads to chunks of its bin's size
 * that all carry one key (the process's random tcache key: never zero, never learned from a
 * chunk of our own, since a thread whose tcache is shut down frees past it), and ends by its
 * count (one past it when the thread was stopped between linking an entry and counting it; short
 * of it in a thread stopped inside tcache_thread_shutdown, which moves each head on as it frees
 * and counts nothing down). An empty one proves nothing and stays a block. One that fails after two
 * entries that did validate counts as bad: its entries stay blocks, which only its safe-linked
 * words point to. */
static void follow_tcache(struct walk *w, uintptr_t c)
{
    uint16_t counts[MT_TCACHE_BINS];
    uintptr_t heads[MT_TCACHE_BINS];
    memcpy(counts, (const void *)(c + 16), sizeof counts);
    memcpy(heads, (const void *)(c + 16 + MT_TCACHE_ENTRIES), sizeof heads);
    size_t total = 0, good = 0;
    uintptr_t key = 0;
    for (int i = 0; i < MT_TCACHE_BINS; i++) {
        size_t n = 0;
        for (uintptr_t e = heads[i]; e; n++) {
            const struct mt_heap_chunk *u = e % MT_CHUNK_ALIGN ? NULL : used_at(w, e - 16);
            if (!u || u->size != (size_t)(i + 2) * 16 || n > (size_t)counts[i] + 1) goto failed;
            if (!key) key = word(e + MT_TCACHE_KEY);
            if (!key || word(e + MT_TCACHE_KEY) != key) goto failed;
            good++;
            e = mt_reveal(e, word(e));
        }
        total += n;
    }
    if (!total) return;
    w->h->tcaches++;
    add_freed(w, c | INTERNAL);
    for (int i = 0; i < MT_TCACHE_BINS; i++)
        for (uintptr_t e = heads[i]; e; e = mt_reveal(e, word(e))) {
            add_freed(w, e - 16);
            add_free(w, e - 16, (size_t)(i + 2) * 16);
            w->h->tcached++;
            w->h->tcached_bytes += (size_t)(i + 2) * 16;
        }
    return;
failed:
    if (good > 1) w->h->bad++; /* two entries with one key: a tcache, not a block's words */
}

/* Where the pages from p on stop being outside every walked heap: *end is the start of the
 * first heap past p (or hi); returns the page after the heap that holds p, or 0 when none does.
 * glibc 2.41 maps a thread's heap so that the kernel merges its writable part with an anonymous
 * mapping beside it, an mmapped chunk's too: one mapping then holds both. */
static uintptr_t past_heap(const struct walk *w, uintptr_t p, uintptr_t hi, uintptr_t *end)
{
    *end = hi;
    for (size_t i = 0; i < w->nheaps; i++) {
        uintptr_t lo = w->heap_lo[i] & ~(uintptr_t)(MT_PAGE - 1);
        uintptr_t up = (w->heap_hi[i] + MT_PAGE - 1) & ~(uintptr_t)(MT_PAGE - 1);
        if (p >= lo && p < up) return up;
        if (lo > p && lo < *end) *end = lo;
    }
    return 0;
}

/* Whether [lo, hi) lies inside one region of mtrace's own (mem.h: its counters and ids can look
 * like a chunk's header). */
struct own_cover {
    uintptr_t lo, hi;
    int covered;
};

static void own_covers(uintptr_t lo, uintptr_t hi, void *arg)
{
    struct own_cover *o = arg;
    if (lo <= o->lo && o->hi <= hi) o->covered = 1;
}

static int own(uintptr_t lo, uintptr_t hi)
{
    struct own_cover o = {lo, hi, 0};
    mt_mem_each(own_covers, &o);
    return o.covered;
}

/* A thread's stack: a mapping that holds a stopped thread's stack pointer, or the caller's.
 * glibc puts no chunk there, and dead frames may hold copies of a chunk's header. (The kernel
 * does not merge a thread's stack, mapped MAP_STACK, with a chunk's mapping. An alternate signal
 * stack is no such mapping: it is a block, often an mmapped chunk, that reach.c keeps.) */
static int a_stack(const struct walk *w, const struct mt_mapping *m)
{
    if (w->self_sp >= m->lo && w->self_sp < m->hi) return 1;
    for (size_t i = 0; w->world && i < w->world->n; i++) {
        const struct mt_world_thread *t = &w->world->t[i];
        if (t->stopped && t->sp >= m->lo && t->sp < m->hi) return 1;
    }
    return 0;
}

/* mmapped chunks: page-aligned headers with the mmapped flag alone, in anonymous mappings. A
 * memalign'd one keeps its first header at the mapping's start, spanning the whole mapping. */
static void find_mmapped(struct walk *w)
{
    struct mt_mapping m;
    unsigned char vec[4096];
    for (size_t at = 0; mt_maps_next(w->maps, &at, &m);) {
        if (!m.readable || !m.writable || m.path_len || own(m.lo, m.hi) || a_stack(w, &m)) continue;
        for (uintptr_t p = m.lo, end; p < m.hi;) {
            uintptr_t past = past_heap(w, p, m.hi, &end);
            if (past) {
                p = past;
                continue;
            }
            size_t pages = (end - p) / MT_PAGE;
            if (pages > sizeof vec) pages = sizeof vec;
            if (mincore((void *)p, pages * MT_PAGE, vec) != 0) break;
            size_t i = 0;
            for (; i < pages; i++) {
                uintptr_t page = p + i * MT_PAGE;
                if (!(vec[i] & 1) || word(page) != 0) continue;
                uintptr_t head = word(page + 8), size = head & ~(uintptr_t)MT_CHUNK_FLAGS;
                if ((head & MT_CHUNK_FLAGS) != MT_CHUNK_MMAPPED || !size || size % MT_PAGE ||
                    size > end - page || own(page, page + MT_CHUNK_HDR))
                    continue;
                if (w->nused < w->cap)
                    w->used[w->nused++] = (struct mt_heap_chunk){page | MT_CHUNK_MMAPPED, size};
                w->h->mmapped++;
                w->h->mmapped_bytes += size;
                i += size / MT_PAGE - 1;
            }
            p += i * MT_PAGE;
        }
    }
}

/* One candidate more than glibc counts, whose size is all the bytes glibc does not count, and
 * the only one of that size: it is not glibc's chunk now, whether a look-alike (words of the VM's
 * memory, which the kernel may have merged into one mapping with glibc's chunks, can read as a
 * header) or a chunk a free has just uncounted before its munmap (whose block is gone). It is
 * dropped, and its memory stays a root. Any other excess is refused (mt_heap_walk). */
static void drop_extra_mmapped(struct walk *w, size_t counted, uint64_t counted_bytes)
{
    struct mt_heap *h = w->h;
    if (h->mmapped != counted + 1 || h->mmapped_bytes <= counted_bytes) return;
    uint64_t extra = h->mmapped_bytes - counted_bytes;
    size_t at = w->nused, same = 0;
    for (size_t i = 0; i < w->nused; i++)
        if ((w->used[i].addr & MT_CHUNK_MMAPPED) && w->used[i].size == extra) {
            at = i;
            same++;
        }
    if (same != 1) return;
    w->used[at] = w->used[--w->nused];
    h->mmapped--;
    h->mmapped_bytes -= extra;
}

/* The refusal of more mmapped chunks than glibc counts, with the figures: a static buffer, since
 * walks run one at a time (under the world's stop) and the message outlives the walk. */
static const char *mmapped_mismatch(const struct mt_heap *h, size_t n, uint64_t bytes)
{
    static char text[200];
    const char *parts[] = {"mmapped chunks do not add up to glibc's count of them (found ",
                           NULL,
                           " chunks of ",
                           NULL,
                           " bytes, glibc counts ",
                           NULL,
                           " of ",
                           NULL,
                           ")"};
    uint64_t values[] = {h->mmapped, h->mmapped_bytes, n, bytes};
    char *o = text;
    for (size_t i = 0, v = 0; i < sizeof parts / sizeof parts[0]; i++) {
        char digits[24];
        const char *p = parts[i] ? parts[i] : mt_utoa(values[v++], digits + sizeof digits);
        size_t len = strlen(p);
        memcpy(o, p, len);
        o += len;
    }
    *o = '\0';
    return text;
}

int mt_heap_walk(struct mt_heap *h, const struct mt_maps *maps, const struct mt_world *world,
                 uintptr_t self_sp)
{
    *h = (struct mt_heap){.version = h->version}; /* a walk tried again starts afresh */
    /* The main arena found before: while it is locked, its bins may be half linked, and its
     * shape would not be found. */
    if (main_known && *(const volatile int *)main_known) {
        errno = EAGAIN;
        return -1;
    }
    struct walk *w = mt_mem_map(sizeof *w);
    if (!w) return -1;
    *w = (struct walk){.h = h, .maps = maps, .world = world, .self_sp = self_sp, .pid = getpid()};
    int err = EINVAL;
    const char *why = find_main(w);
    if (why) goto refused;
    main_known = w->main_arena;
    /* The ring of arenas: each thread arena right after the heap_info of its first heap. */
    uintptr_t arenas[MAX_ARENAS];
    size_t n = 0;
    uint64_t total = 0;
    for (uintptr_t at = w->main_arena; n < MAX_ARENAS;) {
        uintptr_t info = 0;
        if (peek(w, at, w->a.w, MT_ARENA_SIZE) != 0) {
            why = "an arena in the ring could not be read";
            goto refused;
        }
        /* locked: its lists may be half linked, so its shape is not looked at yet */
        if (w->a.w[MT_ARENA_MUTEX / 8] & 0xFFFFFFFF) goto busy;
        if ((at != w->main_arena &&
             ((at - MT_HEAP_INFO_BYTES) % MT_HEAP_MAX ||
              peek(w, at - MT_HEAP_INFO_BYTES, &info, sizeof info) != 0 || info != at)) ||
            !arena_shape(at, w->a.w)) {
            why = "an arena in the ring does not validate";
            goto refused;
        }
        arenas[n++] = at;
        total += w->a.w[MT_ARENA_SYSTEM_MEM / 8];
        at = w->a.w[MT_ARENA_NEXT / 8];
        if (at == w->main_arena) break;
    }
    if (n == MAX_ARENAS) {
        why = "the arena ring does not come back";
        goto refused;
    }
    total += w->par[MT_PAR_MMAPPED_MEM / 8];
    w->cap = total / MT_CHUNK_MIN + 1024;
    w->cap_cand = total / MT_TCACHE_CHUNK + 64;
    h->map_len = w->cap * (3 * sizeof(struct mt_heap_chunk) + 2 * sizeof(uintptr_t)) +
                 w->cap_cand * sizeof(uintptr_t);
    if (!(h->map = mt_mem_map(h->map_len))) {
        mt_mem_unmap(w, sizeof *w);
        return -1;
    }
    w->used = h->map;
    w->fr = w->used + w->cap;
    w->tmp = w->fr + w->cap;
    w->freed = (uintptr_t *)(w->tmp + w->cap);
    w->cand = w->freed + 2 * w->cap;
    h->arenas = n;
    for (size_t i = 0; i < n; i++) {
        w->a.at = arenas[i];
        if (peek(w, arenas[i], w->a.w, MT_ARENA_SIZE) != 0) {
            why = "an arena could not be read";
            goto refused;
        }
        uintptr_t top = w->a.w[MT_ARENA_TOP / 8];
        if (top == initial_top(arenas[i])) continue; /* never used */
        if (arenas[i] == w->main_arena) {
            uintptr_t end = w->sbrk_base + w->a.w[MT_ARENA_SYSTEM_MEM / 8];
            if (!mt_maps_readable(maps, w->sbrk_base, end)) {
                why = "the main arena's heap is not mapped";
                goto refused;
            }
            add_heap(w, w->sbrk_base, end);
            walk_range(w, w->sbrk_base, end, top, 1);
        } else if ((why = walk_thread_arena(w))) {
            goto refused;
        }
    }
    radix(w->used, w->tmp, w->nused);
    for (size_t i = 0; i < n; i++) {
        w->a.at = arenas[i];
        if (peek(w, arenas[i], w->a.w, MT_ARENA_SIZE) == 0) follow_fastbins(w);
    }
    for (size_t i = 0; i < w->ncand; i++)
        follow_tcache(w, w->cand[i]);
    find_mmapped(w);
    const int *ints = (const int *)w->par;
    size_t counted = (size_t)ints[MT_PAR_N_MMAPS / 4];
    drop_extra_mmapped(w, counted, w->par[MT_PAR_MMAPPED_MEM / 8]);
    if (h->mmapped > counted || h->mmapped_bytes > w->par[MT_PAR_MMAPPED_MEM / 8]) {
        why = mmapped_mismatch(h, counted, w->par[MT_PAR_MMAPPED_MEM / 8]);
        err = EAGAIN; /* see glibc_heap.h: a free between its count and its munmap */
        goto refused;
    }
    h->mmapped_missing = counted - h->mmapped;
    if (w->nused == w->cap || w->nfr == w->cap || w->nfreed == w->cap) {
        why = "more chunks than the heap's size allows";
        goto refused;
    }
    /* The blocks: chunks that look in use, less those in a fastbin or a tcache and the tcaches
     * themselves. */
    radix(w->used, w->tmp, w->nused);
    radix_words(w->freed, (uintptr_t *)w->tmp, w->nfreed);
    size_t k = 0, f = 0;
    for (size_t i = 0; i < w->nused; i++) {
        uintptr_t c = w->used[i].addr & ~(uintptr_t)MT_CHUNK_MMAPPED;
        int mmapped = (w->used[i].addr & MT_CHUNK_MMAPPED) != 0;
        while (f < w->nfreed && (w->freed[f] & ~(uintptr_t)INTERNAL) < c)
            f++;
        if (f < w->nfreed && (w->freed[f] & ~(uintptr_t)INTERNAL) == c) continue;
        size_t usable = w->used[i].size - (mmapped ? MT_CHUNK_HDR : sizeof(size_t));
        w->used[k++] = (struct mt_heap_chunk){c + MT_CHUNK_HDR, usable};
        h->block_bytes += usable;
    }
    radix(w->fr, w->tmp, w->nfr);
    h->block = w->used;
    h->blocks = k;
    h->free = w->fr;
    h->frees = w->nfr;
    mt_mem_unmap(w, sizeof *w);
    return 0;
busy:
    mt_mem_unmap(w, sizeof *w);
    errno = EAGAIN;
    return -1;
refused:
    mt_mem_unmap(w, sizeof *w);
    mt_heap_drop(h);
    h->refused = why;
    errno = err;
    return -1;
}

void mt_heap_drop(struct mt_heap *h)
{
    if (h->map) mt_mem_unmap(h->map, h->map_len);
    h->map = NULL;
    h->block = h->free = NULL;
    h->blocks = h->frees = 0;
}

const struct mt_heap_chunk *mt_heap_free_at(const struct mt_heap *h, uintptr_t a)
{
    size_t lo = past(h->free, 0, h->frees, a);
    if (!lo) return NULL;
    const struct mt_heap_chunk *c = &h->free[lo - 1];
    return a < c->addr + c->size ? c : NULL;
}
