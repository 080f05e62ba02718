/* beam_alloc.c: the blocks the VM's allocators hold freed (see beam_alloc.h). */
#define _GNU_SOURCE
#include "mark/beam_alloc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "base/mem.h"
#include "base/platform.h"
#include "base/proc.h"
#include "mark/layouts.h"

#define WORD sizeof(uintptr_t)
#define SPECS 16       /* erts_allctr_thr_spec entries looked at: OTP 25 to 27 have 12 */
#define INSTANCES 1024 /* at most, of one allocator */
#define ALLCTRS 8192   /* at most, of all allocators */
#define ENTRY 64       /* bytes of a list's entry, ErtsAlcFixList_t */
#define TYPES 64       /* at most, entries an instance (OTP 25 to 27: 15) */
#define LIST_MAX 1000  /* ERTS_ALCU_FIX_MAX_LIST_SZ: blocks a list keeps at most */
#define TYPE_MAX 65536 /* bytes of a type, at most (a Process: 760 to 776) */
#define FIX_PREFIX "fix_"
#define BLK_MAX ((uintptr_t)1 << 36) /* bytes of a queued block, at most */
#define HOMECOMING 5u /* the header of a carrier queued to go home: free and last, no size */

/* ErtsAllocatorThrSpec_t: the instances of one allocator. */
struct spec {
    int32_t enabled, dd, aix, size;
    uintptr_t allctr; /* Allctr_t *[size] */
};

/* Once learnt: the instances of all allocators (a mapping of ALLCTRS words), whether their queues
 * are read, and fix_alloc's first instance's lists and how many entries all instances have. */
static struct {
    uintptr_t *allctr;
    size_t n;
    int queues;
    uintptr_t lists;
    size_t entries;
    int tried;
} vm;
static pthread_mutex_t learning = PTHREAD_MUTEX_INITIALIZER;

/* Whether the n instances' entries, types an instance, read as fix lists: each type's size the
 * same in every instance, counts and links that can be a list's. */
static int lists_agree(const uintptr_t *e, size_t n, size_t types)
{
    for (size_t t = 0; t < types; t++) {
        uintptr_t size = e[t * ENTRY / WORD];
        if (size < 2 * WORD || size > TYPE_MAX || size % WORD) return 0;
        for (size_t i = 0; i < n; i++) {
            const uintptr_t *l = e + (i * types + t) * (ENTRY / WORD);
            if (l[0] != size || l[1] > LIST_MAX || l[2] % WORD) return 0;
        }
    }
    return 1;
}

/* Whether word k of the instances al[0 .. n), whose first words are w0 and w1, points to their
 * entries; they are then read into *e (a mapping of *len bytes). */
static int lists_at(const uintptr_t *al, size_t n, const uintptr_t *w0, const uintptr_t *w1,
                    size_t k, uintptr_t **e, size_t *len)
{
    uintptr_t step = w1[k] - w0[k], types = step / ENTRY;
    if (w1[k] <= w0[k] || step % ENTRY || types > TYPES || w0[k] % ENTRY) return 0;
    for (size_t i = 2; i < n; i++) {
        uintptr_t v;
        if (mt_proc_read(al[i] + k * WORD, &v, sizeof v) != 0 || v != w0[k] + i * step) return 0;
    }
    *len = n * step;
    if (!(*e = mt_mem_map(*len))) return 0;
    if (mt_proc_read(w0[k], *e, *len) == 0 && lists_agree(*e, n, types)) return 1;
    mt_mem_unmap(*e, *len);
    return 0;
}

/* The lists of the fix_ allocator whose n instances are al[0 .. n): the one word that points to
 * them. */
static void learn_lists(const uintptr_t *al, size_t n)
{
    size_t span = 2 * MT_ALLOCTR_WORDS * WORD, len = 0, found = 0;
    uintptr_t *w = mt_mem_map(span), *e = NULL;
    if (!w) return;
    if (mt_proc_read(al[0], w, span / 2) == 0 &&
        mt_proc_read(al[1], w + MT_ALLOCTR_WORDS, span / 2) == 0) {
        for (size_t k = 0; k < MT_ALLOCTR_WORDS; k++) {
            uintptr_t *got;
            size_t got_len;
            if (!lists_at(al, n, w, w + MT_ALLOCTR_WORDS, k, &got, &got_len)) continue;
            if (e) mt_mem_unmap(e, len);
            e = got;
            len = got_len;
            vm.lists = w[k];
            found++;
        }
    }
    if (e) mt_mem_unmap(e, len);
    mt_mem_unmap(w, span);
    vm.entries = found == 1 ? len / ENTRY : 0;
}

/* Whether v can be a queue's head or tail in the instance at al: its marker, or a block. */
static int queue_end(uintptr_t v, uintptr_t al)
{
    return v == al || (v && v % WORD == 0);
}

/* Whether the instances' queues read as queues (or as none: temp_alloc's, all zeros, as only its
 * own thread frees its blocks), most of them empty. */
static int learn_queues(void)
{
    size_t idle = 0, queues = 0;
    for (size_t j = 0; j < vm.n; j++) {
        uintptr_t w[MT_ALLOC_DD_FIRST + 1], al = vm.allctr[j];
        if (mt_proc_read(al, w, sizeof w) != 0) return 0;
        uintptr_t first = w[MT_ALLOC_DD_FIRST], last = w[2];
        if (!first && !last && !w[0]) continue;
        if (!queue_end(first, al) || !queue_end(last, al)) return 0;
        queues++;
        idle += first == al && last == al;
    }
    return 2 * idle > queues;
}

/* The instances, and fix_alloc's lists. */
static void learn(void)
{
    void *table = dlsym(RTLD_DEFAULT, "erts_allctr_thr_spec");
    struct spec s[SPECS];
    uintptr_t *al;
    if (!table || mt_proc_read((uintptr_t)table, s, sizeof s) != 0 ||
        !(al = mt_mem_map(ALLCTRS * WORD)))
        return;
    size_t n = 0;
    for (size_t i = 0; i < SPECS; i++) {
        char prefix[16];
        size_t k = (size_t)s[i].size;
        if (s[i].enabled != 1 || s[i].size < 2 || k > INSTANCES || n + k > ALLCTRS ||
            !s[i].allctr || s[i].allctr % WORD ||
            mt_proc_read(s[i].allctr, al + n, k * WORD) != 0 ||
            !mt_layout_allocator_prefix(al[n], prefix, mt_layout_read_proc, NULL))
            continue;
        if (strcmp(prefix, FIX_PREFIX) == 0) learn_lists(al + n, k);
        n += k;
    }
    if (!n) {
        mt_mem_unmap(al, ALLCTRS * WORD);
        return;
    }
    vm.allctr = al;
    vm.n = n;
}

int mt_beam_alloc_learn(void)
{
    pthread_mutex_lock(&learning);
    if (!vm.tried) learn();
    int queues = vm.queues || (vm.n && learn_queues());
    int rc = queues || vm.entries ? 0 : -1;
    __atomic_store_n(&vm.queues, queues, __ATOMIC_RELAXED);
    __atomic_store_n(&vm.tried, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&learning);
    return rc;
}

/* Whether v is one of the VM's allocator instances. */
static int an_instance(uintptr_t v)
{
    for (size_t j = 0; j < vm.n; j++)
        if (vm.allctr[j] == v) return 1;
    return 0;
}

/* Whether the block whose header h lies at `at`, of size bytes, lies whole in a carrier of one of
 * the VM's instances (the carrier's fourth word; a block may go home to an instance other than
 * the carrier's current one): a single-block carrier starts on the page of its block, a
 * multi-block one where the block's offset says. A block that does not is no gap: a queue read
 * amiss never clears memory it does not own. */
static int in_carrier(uintptr_t at, uintptr_t h, uintptr_t size)
{
    int sbc = (h & MT_BLK_SBC) == MT_BLK_SBC;
    uintptr_t near = sbc ? at : at - ((h >> MT_BLK_MBC_OFFSET) << MT_BLK_MBC_UNIT);
    size_t pages = sbc ? 1 : ((size_t)1 << MT_BLK_MBC_UNIT) / MT_PAGE;
    near &= ~(uintptr_t)(MT_PAGE - 1);
    for (size_t k = 0; k < pages && near >= k * MT_PAGE; k++) {
        uintptr_t c = near - k * MT_PAGE, w[4];
        size_t bytes = mt_layout_carrier_head(c, sbc, w, mt_layout_read_proc, NULL);
        if (bytes && an_instance(w[3] & ~(uintptr_t)7) && c < at && at + size <= c + bytes)
            return 1;
    }
    return 0;
}

/* The blocks queued to the instance at al. */
static int queued(struct mt_beam_gaps *g, uintptr_t al)
{
    uintptr_t w[MT_ALLOC_DD_FIRST + 1];
    if (mt_proc_read(al, w, sizeof w) != 0) return 0;
    uintptr_t p = w[MT_ALLOC_DD_FIRST];
    for (size_t n = 0; n < MT_ALLOC_WALK_MAX && p && p % WORD == 0; n++) {
        if (p == al) { /* the marker, whose link is the instance's first word */
            p = w[0];
            continue;
        }
        uintptr_t b[2]; /* the block's header, its link */
        if (mt_proc_read(p - WORD, b, sizeof b) != 0) break;
        uintptr_t size = b[0] & MT_BLK_ALLOCATED_SIZE;
        if (b[0] != HOMECOMING && (!(b[0] & MT_BLK_FREE) || (b[0] & MT_BLK_SBC) == MT_BLK_SBC) &&
            size > 3 * WORD && size <= BLK_MAX && in_carrier(p - WORD, b[0], size) &&
            mt_beam_gap_add(g, p + 2 * WORD, p - WORD + size, MT_BEAM_GAP_DD) != 0)
            return -1;
        p = b[1];
    }
    return 0;
}

/* The blocks on fix_alloc's lists. */
static int listed(struct mt_beam_gaps *g)
{
    size_t len = vm.entries * ENTRY;
    uintptr_t *e = mt_mem_map(len);
    if (!e) return -1;
    int rc = 0;
    if (mt_proc_read(vm.lists, e, len) == 0) {
        for (size_t i = 0; rc == 0 && i < vm.entries; i++) {
            const uintptr_t *l = e + i * (ENTRY / WORD);
            uintptr_t size = l[0], p = l[2];
            if (size < 2 * WORD || size > TYPE_MAX || l[1] > LIST_MAX) continue;
            for (uintptr_t n = l[1], next; n && p && p % WORD == 0; n--, p = next) {
                if (mt_proc_read(p, &next, sizeof next) != 0) break;
                if ((rc = mt_beam_gap_add(g, p + WORD, p + size, MT_BEAM_GAP_FIX)) != 0) break;
            }
        }
    }
    mt_mem_unmap(e, len);
    return rc;
}

int mt_beam_alloc_gaps(struct mt_beam_gaps *g)
{
    if (!__atomic_load_n(&vm.tried, __ATOMIC_ACQUIRE)) return 0;
    for (size_t j = 0; __atomic_load_n(&vm.queues, __ATOMIC_RELAXED) && j < vm.n; j++)
        if (queued(g, vm.allctr[j]) != 0 ||
            mt_beam_gap_add(g, vm.allctr[j], vm.allctr[j] + MT_ALLOC_DD_WORDS * WORD,
                            MT_BEAM_GAP_DD) != 0)
            return -1;
    return vm.entries ? listed(g) : 0;
}
