/* beam_heaps.c: the unused part of each Erlang process's heaps (see beam_heaps.h). */
#define _GNU_SOURCE
#include "mark/beam_heaps.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/proc.h"
#include "base/sort.h"

#define WORD sizeof(uintptr_t)
#define LEARN_BYTES 2048 /* of each Process read while learning */
#define TABLE_BYTES 1024 /* of erts_proc, where its table's fields are looked for */
#define CHUNK 8192       /* table entries read at a time */
#define BATCH 256        /* processes read by one process_vm_readv */
#define FIRST_GAPS 4096

/* ERTS_PSFLG_* of OTP 25 to 27: flag n is bit 6 + n, past the three 2-bit priority fields. */
#define PS_FLAG(n) (1u << (6 + (n)))
#define PS_PRIO 0xFu /* the active and user priority fields */
#define PS_FREE PS_FLAG(4)
#define PS_EXITING PS_FLAG(5)
#define PS_RUNNING PS_FLAG(9)
#define PS_GC PS_FLAG(11)
#define PS_RUNNING_SYS PS_FLAG(15)
#define PS_DIRTY_RUNNING PS_FLAG(23)
#define PS_DIRTY_RUNNING_SYS PS_FLAG(24)
#define PS_LEAVE                                                                                   \
    (PS_FREE | PS_EXITING | PS_RUNNING | PS_GC | PS_RUNNING_SYS | PS_DIRTY_RUNNING |               \
     PS_DIRTY_RUNNING_SYS)

/* An internal pid, a Process's first word: immediate, tag 0x3 in the low four bits. */
#define PID_TAG_MASK 0xFu
#define PID_TAG 0x3u

/* Where the fields lie, in words of a Process, once learnt: top (the heap top, the stack top
 * after it), heap (start, end, abandoned heap, size in words), old (high water, old end, old top,
 * old start); state in bytes; span: the bytes read of each. table: the address of erts_proc's
 * table pointer, its free id list's after it and its 32-bit size two words on; ports: the same
 * in erts_port (0 when not found). */
static struct {
    uintptr_t table, ports;
    size_t top, heap, old, state, span;
    int learnt;
} shape;
static pthread_mutex_t learning = PTHREAD_MUTEX_INITIALIZER;
static uint64_t asker_pid;
static pid_t asker_tid;

/* The table's pointer in erts_proc: the one cache line of its first TABLE_BYTES whose 32-bit word
 * at 16 is the process limit, after two pointers (the table, its free list). */
static uintptr_t find_table(uintptr_t base, uint64_t limit)
{
    uintptr_t w[TABLE_BYTES / WORD], found = 0;
    if (mt_proc_read(base, w, sizeof w) != 0) return 0;
    for (size_t i = 0; i + 3 <= TABLE_BYTES / WORD; i += 64 / WORD) {
        uint32_t max;
        memcpy(&max, &w[i + 2], sizeof max);
        if (max != limit || !w[i] || !w[i + 1]) continue;
        if (found) return 0;
        found = base + i * WORD;
    }
    return found;
}

/* The Processes whose first words are pid[0 .. n), from the table of max entries at tab. */
static int find_processes(uintptr_t tab, uint32_t max, const uint64_t *pid, uintptr_t *at, size_t n)
{
    uintptr_t *e = mt_mem_map(CHUNK * WORD);
    if (!e) return -1;
    size_t got = 0;
    memset(at, 0, n * sizeof *at);
    for (uint32_t from = 0; from < max && got < n; from += CHUNK) {
        size_t k = max - from < CHUNK ? max - from : CHUNK;
        if (mt_proc_read(tab + from * WORD, e, k * WORD) != 0) break;
        for (size_t i = 0; i < k; i++) {
            uintptr_t id;
            if (!e[i] || mt_proc_read(e[i], &id, sizeof id) != 0) continue;
            for (size_t j = 0; j < n; j++)
                if (id == pid[j] && !at[j]) {
                    at[j] = e[i];
                    got++;
                }
        }
    }
    mt_mem_unmap(e, CHUNK * WORD);
    return got == n ? 0 : -1;
}

/* A process while learning: its words, and what process_info said of it (NULL: the caller). */
struct seen {
    uintptr_t w[LEARN_BYTES / WORD];
    const struct mt_beam_known *k;
};

static int heap_at(const struct seen *p, size_t b)
{
    uintptr_t heap = p->w[b], hend = p->w[b + 1], abandoned = p->w[b + 2], size = p->w[b + 3];
    if (!heap || heap % WORD || hend <= heap || abandoned || hend - heap != size * WORD) return 0;
    return !p->k || size == p->k->heap_block;
}

static int top_at(const struct seen *p, size_t b, size_t a)
{
    uintptr_t heap = p->w[b], hend = p->w[b + 1], top = p->w[a], stop = p->w[a + 1];
    if (heap > top || top > stop || stop > hend) return 0;
    return !p->k || ((top - heap) / WORD == p->k->heap_used && (hend - stop) / WORD == p->k->stack);
}

static int old_at(const struct seen *p, size_t b, size_t a, size_t o)
{
    uintptr_t heap = p->w[b], high = p->w[o], oend = p->w[o + 1], otop = p->w[o + 2],
              old = p->w[o + 3];
    if (high < heap || high > p->w[a]) return 0;
    if (!old ? otop || oend : old % WORD || old > otop || otop > oend) return 0;
    return !p->k ||
           ((high - heap) / WORD == p->k->recent && (oend - old) / WORD == p->k->old_block &&
            (otop - old) / WORD == p->k->old_used);
}

static int state_at(const struct seen *p, size_t s)
{
    uint32_t v;
    memcpy(&v, (const char *)p->w + s, sizeof v);
    if (!p->k) return (v & PS_PRIO) == MT_BEAM_PRIO_NORMAL && (v & PS_RUNNING) && !(v & PS_FREE);
    return (v & PS_PRIO) == p->k->prio && !(v & PS_LEAVE);
}

enum field { HEAP, TOP, OLD, STATE };

/* The one offset from lo (before hi, by step) at which every process agrees on the field; 0 when
 * none or more than one does. */
static size_t agreed(const struct seen *p, size_t n, enum field f, size_t lo, size_t hi,
                     size_t step)
{
    size_t found = 0;
    for (size_t at = lo; at < hi; at += step) {
        size_t j = 0;
        for (; j < n; j++) {
            int ok = f == HEAP  ? heap_at(&p[j], at)
                     : f == TOP ? top_at(&p[j], shape.heap, at)
                     : f == OLD ? old_at(&p[j], shape.heap, shape.top, at)
                                : state_at(&p[j], at);
            if (!ok) break;
        }
        if (j < n) continue;
        if (found) return 0;
        found = at;
    }
    return found;
}

static int learn(uint64_t limit, uint64_t port_limit, uint64_t self,
                 const struct mt_beam_known known[2], const char **why)
{
    *why = "no process table (erts_proc): not a BEAM";
    void *base = dlsym(RTLD_DEFAULT, "erts_proc");
    if (!base) return -1;
    *why = "the process table's layout was not recognized";
    uintptr_t table = find_table((uintptr_t)base, limit), head[3];
    if (!table || mt_proc_read(table, head, sizeof head) != 0) return -1;
    *why = "the processes were not found in the table";
    uint64_t pid[3] = {self, known[0].pid, known[1].pid};
    uintptr_t at[3];
    if (find_processes(head[0], (uint32_t)limit, pid, at, 3) != 0) return -1;
    *why = "no old heap to learn from";
    if (!known[0].old_block && !known[1].old_block) return -1;
    struct seen *p = mt_mem_map(3 * sizeof *p);
    *why = "no memory";
    if (!p) return -1;
    int rc = -1;
    *why = "a process could not be read";
    for (size_t j = 0; j < 3; j++) {
        p[j].k = j ? &known[j - 1] : NULL;
        if (mt_proc_read(at[j], p[j].w, sizeof p[j].w) != 0) goto out;
    }
    size_t words = LEARN_BYTES / WORD;
    *why = "the heap's fields did not agree";
    if (!(shape.heap = agreed(p, 3, HEAP, 1, words / 2, 1))) goto out;
    *why = "the heap top did not agree";
    if (!(shape.top = agreed(p, 3, TOP, 1, shape.heap, 1))) goto out;
    *why = "the old heap's fields did not agree";
    if (!(shape.old = agreed(p, 3, OLD, shape.heap + 4, words - 4, 1))) goto out;
    *why = "the state did not agree";
    if (!(shape.state = agreed(p, 3, STATE, (shape.heap + 4) * WORD, LEARN_BYTES - 4, 4))) goto out;
    shape.table = table;
    void *ports = dlsym(RTLD_DEFAULT, "erts_port");
    shape.ports = ports ? find_table((uintptr_t)ports, port_limit) : 0;
    size_t end = (shape.old + 4) * WORD;
    shape.span = shape.state + 4 > end ? shape.state + 4 : end;
    rc = 0;
out:
    mt_mem_unmap(p, 3 * sizeof *p);
    return rc;
}

int mt_beam_heaps_learn(uint64_t limit, uint64_t port_limit, uint64_t self,
                        const struct mt_beam_known known[2], const char **why)
{
    pthread_mutex_lock(&learning);
    int rc = 0;
    if (!__atomic_load_n(&shape.learnt, __ATOMIC_ACQUIRE)) {
        rc = learn(limit, port_limit, self, known, why);
        if (rc == 0) __atomic_store_n(&shape.learnt, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&learning);
    return rc;
}

int mt_beam_gap_add(struct mt_beam_gaps *g, uintptr_t lo, uintptr_t hi, enum mt_beam_gap_kind kind)
{
    if (g->n == g->cap) {
        /* a mapping twice the size, copied, with room for the sort's scratch after the gaps */
        size_t cap = g->cap ? 2 * g->cap : FIRST_GAPS, len = 2 * cap * sizeof *g->gap;
        struct mt_beam_gap *to = mt_mem_map(len);
        if (!to) return -1;
        if (g->n) memcpy(to, g->gap, g->n * sizeof *g->gap);
        if (g->map) mt_mem_unmap(g->map, g->map_len);
        g->map = g->gap = to;
        g->map_len = len;
        g->cap = cap;
    }
    g->gap[g->n++] = (struct mt_beam_gap){lo, hi, kind};
    return 0;
}

/* The gaps of the Process whose first shape.span bytes are w. */
static int take(struct mt_beam_gaps *g, const uintptr_t *w)
{
    uint32_t state;
    memcpy(&state, (const char *)w + shape.state, sizeof state);
    if ((w[0] & PID_TAG_MASK) != PID_TAG) return 0;
    g->processes++;
    uintptr_t heap = w[shape.heap], hend = w[shape.heap + 1], size = w[shape.heap + 3];
    uintptr_t top = w[shape.top], stop = w[shape.top + 1];
    uintptr_t oend = w[shape.old + 1], otop = w[shape.old + 2], old = w[shape.old + 3];
    uint32_t leave = state & PS_LEAVE;
    if (g->asker && w[0] == g->asker) leave &= ~PS_DIRTY_RUNNING;
    if (leave || w[shape.heap + 2] || !heap || hend <= heap || hend - heap != size * WORD ||
        top < heap || stop < top || hend < stop || (old && (otop < old || oend < otop))) {
        g->left++;
        return 0;
    }
    if (stop > top && mt_beam_gap_add(g, top, stop, MT_BEAM_GAP_HEAP) != 0) return -1;
    if (old && oend > otop && mt_beam_gap_add(g, otop, oend, MT_BEAM_GAP_HEAP) != 0) return -1;
    return 0;
}

/* Reads the k Processes at e[0 .. k) into buf, a batch at a time, and takes their gaps. One that
 * cannot be read (freed meanwhile: the table is read first) is passed over. */
static int take_batch(struct mt_beam_gaps *g, const uintptr_t *e, size_t k, char *buf)
{
    struct iovec local[BATCH] = {{0}}, remote[BATCH] = {{0}};
    for (size_t from = 0; from < k;) {
        size_t n = k - from < BATCH ? k - from : BATCH;
        for (size_t j = 0; j < n; j++) {
            local[j] = (struct iovec){buf + j * shape.span, shape.span};
            remote[j] = (struct iovec){(void *)e[from + j], shape.span};
        }
        long got = mt_proc_readv(local, remote, n);
        size_t whole = got > 0 ? (size_t)got / shape.span : 0;
        for (size_t j = 0; j < whole; j++)
            if (take(g, (const uintptr_t *)(buf + j * shape.span)) != 0) return -1;
        from += whole < n ? whole + 1 : n;
    }
    return 0;
}

/* The free id list of a table whose head is {entries, free id list, size}: a 32-bit id an entry. */
static int take_ids(struct mt_beam_gaps *g, const uintptr_t head[3])
{
    uint32_t max;
    memcpy(&max, &head[2], sizeof max);
    return head[1] ? mt_beam_gap_add(g, head[1], head[1] + (uintptr_t)max * 4, MT_BEAM_GAP_IDS) : 0;
}

#define GAP_LO(g) ((g)->lo)
MT_DEFINE_RADIX_SORT(sort_gaps, struct mt_beam_gap, GAP_LO)
MT_DEFINE_UPPER_BOUND(gap_after, struct mt_beam_gap, GAP_LO)

int mt_beam_heaps_gaps(struct mt_beam_gaps *g)
{
    *g = (struct mt_beam_gaps){0};
    uintptr_t head[3];
    if (!__atomic_load_n(&shape.learnt, __ATOMIC_ACQUIRE) ||
        mt_proc_read(shape.table, head, sizeof head) != 0)
        return 0;
    pid_t me = (pid_t)syscall(SYS_gettid);
    if (__atomic_load_n(&asker_tid, __ATOMIC_ACQUIRE) == me)
        g->asker = __atomic_load_n(&asker_pid, __ATOMIC_RELAXED);
    uint32_t max;
    memcpy(&max, &head[2], sizeof max);
    size_t scratch = CHUNK * WORD + BATCH * shape.span;
    char *buf = mt_mem_map(scratch);
    if (!buf) return -1;
    uintptr_t *e = (uintptr_t *)buf, *used = e;
    char *procs = buf + CHUNK * WORD;
    int rc = 0;
    for (uint32_t from = 0; rc == 0 && from < max; from += CHUNK) {
        size_t k = max - from < CHUNK ? max - from : CHUNK, n = 0;
        if (mt_proc_read(head[0] + from * WORD, e, k * WORD) != 0) break;
        for (size_t i = 0; i < k; i++)
            if (e[i]) used[n++] = e[i];
        rc = take_batch(g, used, n, procs);
    }
    mt_mem_unmap(buf, scratch);
    uintptr_t ports[3];
    if (rc == 0) rc = take_ids(g, head);
    if (rc == 0 && shape.ports && mt_proc_read(shape.ports, ports, sizeof ports) == 0)
        rc = take_ids(g, ports);
    if (rc != 0) {
        mt_beam_heaps_drop(g);
        return -1;
    }
    return 0;
}

void mt_beam_gaps_sort(struct mt_beam_gaps *g)
{
    sort_gaps(g->gap, g->gap + g->cap, g->n);
    /* the clear takes them disjoint: one that overlaps the one before joins it */
    size_t n = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (n && g->gap[i].lo < g->gap[n - 1].hi) {
            if (g->gap[i].hi > g->gap[n - 1].hi) g->gap[n - 1].hi = g->gap[i].hi;
            continue;
        }
        g->gap[n++] = g->gap[i];
    }
    g->n = n;
}

void mt_beam_heaps_asker(uint64_t pid)
{
    pid_t me = (pid_t)syscall(SYS_gettid);
    if (pid) {
        __atomic_store_n(&asker_pid, pid, __ATOMIC_RELAXED);
        __atomic_store_n(&asker_tid, me, __ATOMIC_RELEASE);
    } else {
        __atomic_compare_exchange_n(&asker_tid, &me, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    }
}

void mt_beam_heaps_drop(struct mt_beam_gaps *g)
{
    if (g->map) mt_mem_unmap(g->map, g->map_len);
    *g = (struct mt_beam_gaps){0};
}

void mt_beam_gaps_clear(const struct mt_beam_gaps *g, void *buf, size_t len, uintptr_t at,
                        struct mt_beam_cleared *cleared, mt_beam_gap_seen seen, void *arg)
{
    if (!g->n || !len) return;
    size_t i = gap_after(g->gap, 0, g->n, at);
    uintptr_t end = at + len;
    for (i = i ? i - 1 : 0; i < g->n && g->gap[i].lo < end; i++) {
        uintptr_t lo = g->gap[i].lo > at ? g->gap[i].lo : at;
        uintptr_t hi = g->gap[i].hi < end ? g->gap[i].hi : end;
        if (lo >= hi) continue;
        if (seen) seen(arg, g->gap[i].kind, (char *)buf + (lo - at), hi - lo, lo);
        memset((char *)buf + (lo - at), 0, hi - lo);
        cleared->bytes[g->gap[i].kind] += hi - lo;
    }
}
