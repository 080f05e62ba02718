/* report.c: live and changes reports (see report.h). */
#define _GNU_SOURCE
#include "report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "recorder.h"
#include "stack.h"
#include "symbols.h"
#include "table.h"

struct site {
    uint32_t id;
    int n;                   /* frames shown */
    const uintptr_t *ips;    /* the stack's frames, interned (immutable) */
    int64_t bytes, blocks;   /* live report: live; changes report: net */
    uint64_t ab, an, fb, fn; /* changes report: allocated and freed since the baseline */
};

int mt_report_depth(int n)
{
    size_t d = mt_config.report_depth;
    return d && d < (size_t)n ? (int)d : n;
}

const char *mt_report_frame(struct mt_out *o, uintptr_t ip, int quoted)
{
    struct mt_symbol sym;
    void (*text)(struct mt_out *, const char *) = quoted ? mt_out_quoted : mt_out_str;
    if (mt_symbolize(ip, 1, &sym) != 0) {
        mt_out_str(o, "?? (no module)");
        return NULL;
    }
    text(o, sym.name ? sym.name : "??");
    mt_out_str(o, " (");
    text(o, sym.path);
    mt_out_str(o, ")");
    return sym.name;
}

static int by_frames(const void *pa, const void *pb)
{
    const struct site *a = pa, *b = pb;
    for (int i = 0; i < a->n && i < b->n; i++)
        if (a->ips[i] != b->ips[i]) return a->ips[i] < b->ips[i] ? -1 : 1;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int by_size(const void *pa, const void *pb)
{
    const struct site *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->blocks != b->blocks) return a->blocks > b->blocks ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int same_frames(const struct site *a, const struct site *b)
{
    if (a->n != b->n) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->ips[i] != b->ips[i]) return 0;
    return 1;
}

static void add(struct site *sum, const struct site *s)
{
    sum->bytes += s->bytes;
    sum->blocks += s->blocks;
    sum->ab += s->ab;
    sum->an += s->an;
    sum->fb += s->fb;
    sum->fn += s->fn;
}

/* Sites whose shown frames are equal become one, named by the lowest id; then largest first. */
static size_t merge(struct site *s, size_t n)
{
    qsort(s, n, sizeof *s, by_frames);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && same_frames(&s[k - 1], &s[i])) {
            add(&s[k - 1], &s[i]);
        } else {
            s[k++] = s[i];
        }
    }
    qsort(s, k, sizeof *s, by_size);
    return k;
}

static struct site site_of(uint32_t id)
{
    struct site s = {.id = id};
    s.n = id ? mt_report_depth(mt_stack_get(id, &s.ips)) : 0;
    return s;
}

struct gather {
    int64_t *per_id; /* bytes and blocks, by stack id; blocks here in 1/MT_ONE units */
    size_t ids;
    int64_t heap_bytes, heap_blocks, tracked_bytes, tracked_blocks;
};

/* Per site, weights (account.h): the estimate a sampled record stands for. */
static void gather_live(const struct mt_record *r, void *arg)
{
    struct gather *g = arg;
    size_t id = r->stack < g->ids ? r->stack : 0;
    struct mt_weight w = mt_weigh(r);
    g->per_id[2 * id] += (int64_t)w.bytes;
    g->per_id[2 * id + 1] += (int64_t)w.blocks;
    if (r->addr & MT_TRACK_BIT) {
        g->tracked_bytes += (int64_t)w.bytes;
        g->tracked_blocks += (int64_t)w.blocks;
    } else {
        g->heap_bytes += (int64_t)w.bytes;
        g->heap_blocks += (int64_t)w.blocks;
    }
}

/* "<label>12 bytes in 3 blocks", with signs when plus is set. */
static void amount(struct mt_out *o, const char *label, int64_t bytes, int64_t blocks,
                   const char *unit, int plus)
{
    mt_out_str(o, label);
    mt_out_i64(o, bytes, plus);
    mt_out_str(o, " bytes in ");
    mt_out_i64(o, blocks, plus);
    mt_out_str(o, " ");
    mt_out_str(o, unit);
    if (blocks != 1 && blocks != -1) mt_out_str(o, "s");
}

/* What follows a figure made from sampled records. */
static const char *estimated(void)
{
    return mt_config.sample ? " (estimated)" : "";
}

static int64_t load(const int64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}

/* Totals come from the accounting when it is on (every block counted, peak kept), else from
 * the records of a live report's scan (estimates, when sampling). */
static void summary(struct mt_out *o, const struct mt_report_req *req, const struct gather *g)
{
    struct mt_stats st;
    mt_stats_read(&st);
    int counted = mt_config.account;
    mt_out_str(o, req->at_exit ? "  leaked at exit" : "  live heap");
    mt_out_str(o, estimated());
    amount(o, ": ", counted ? load(&mt_account.live_bytes) : g->heap_bytes,
           mt_blocks(counted ? load(&mt_account.live_blocks) : g->heap_blocks), "block", 0);
    mt_out_str(o, "\n");
    if (counted && load(&mt_account.untabled_blocks) > 0) {
        amount(o, "    of which without a record (table full; see MTRACE_SLOTS_MAX): ",
               load(&mt_account.untabled_bytes), load(&mt_account.untabled_blocks), "block", 0);
        mt_out_str(o, "\n");
    }
    if (counted) {
        mt_out_str(o, "  peak live heap");
        mt_out_str(o, estimated());
        mt_out_str(o, ": ");
        mt_out_i64(o, load(&mt_account.peak_bytes), 0);
        mt_out_str(o, " bytes\n");
    } else {
        mt_out_str(o, "  peak live heap: not kept (MTRACE_REPORT is unset)\n");
    }
    if (st.calls[MT_TRACK]) {
        amount(o, "  tracked (mtrace_track): ",
               counted ? load(&mt_account.tracked_bytes) : g->tracked_bytes,
               mt_blocks(counted ? load(&mt_account.tracked_blocks) : g->tracked_blocks),
               "resource", 0);
        mt_out_str(o, "\n");
    }
    mt_out_str(o, "  calls:");
    for (int k = 0; k < MT_KINDS; k++) {
        mt_out_str(o, k ? ", " : " ");
        mt_out_str(o, mt_kind_names[k]);
        mt_out_str(o, " ");
        mt_out_u64(o, st.calls[k]);
    }
    if (mt_config.sample) {
        mt_out_str(o, "\n  sampled: ");
        mt_out_u64(o, st.sampled);
        mt_out_str(o, " allocations, about one per ");
        mt_out_u64(o, mt_config.sample);
        mt_out_str(o, " bytes (MTRACE_SAMPLE); figures by call site are estimates");
    }
    mt_out_str(o, "\n  dropped: ");
    mt_out_u64(o, st.dropped);
    mt_out_str(o, " allocations not recorded (table full), ");
    mt_out_u64(o, st.stacks_dropped);
    mt_out_str(o, " recorded without a stack (stack table full)\n  frees without a record: ");
    mt_out_u64(o, st.untracked_frees);
    mt_out_str(o, "\n");
}

static void print_site(struct mt_out *o, const struct site *s, size_t rank, size_t total,
                       int changes)
{
    amount(o, "\n", s->bytes, s->blocks, "block", changes);
    if (changes) {
        amount(o, " (allocated ", (int64_t)s->ab, (int64_t)s->an, "block", 0);
        amount(o, ", freed ", (int64_t)s->fb, (int64_t)s->fn, "block", 0);
        mt_out_str(o, ")");
    }
    mt_out_str(o, ", site ");
    mt_out_u64(o, rank);
    mt_out_str(o, " of ");
    mt_out_u64(o, total);
    mt_out_str(o, "\n");
    if (s->id == 0) mt_out_str(o, "    (no stack: the stack table was full)\n");
    /* As valgrind does, nothing below main: the C library's start-up, the same for every site. */
    const char *name = NULL;
    for (int i = 0; i < s->n && !(name && strcmp(name, "main") == 0); i++) {
        mt_out_str(o, i ? "    by " : "    at ");
        mt_out_hex(o, s->ips[i]);
        mt_out_str(o, ": ");
        name = mt_report_frame(o, s->ips[i], 0);
        mt_out_str(o, "\n");
    }
}

/* Sites of a live report: the records gathered, summed by stack id. */
static size_t live_sites(struct site *sites, size_t ids, const struct gather *g)
{
    size_t n = 0;
    for (size_t id = 0; id < ids; id++) {
        if (!g->per_id[2 * id + 1]) continue;
        sites[n] = site_of((uint32_t)id);
        sites[n].bytes = g->per_id[2 * id];
        sites[n++].blocks = mt_blocks(g->per_id[2 * id + 1]);
    }
    return n;
}

/* Sites of a changes report: tallies minus base, the sites whose net moved; *all sums every site,
 * churn included. With advance, base becomes the tallies read, in the same pass, so that no
 * allocation falls between two reports. */
static size_t changed_sites(struct site *sites, size_t ids, struct mt_tally *base, int advance,
                            struct site *all)
{
    size_t n = 0;
    for (size_t id = 0; id < ids; id++) {
        const struct mt_tally *t = &mt_account.tally[id];
        struct mt_tally now = {
            __atomic_load_n(&t->alloc_bytes, __ATOMIC_RELAXED),
            __atomic_load_n(&t->alloc_blocks, __ATOMIC_RELAXED),
            __atomic_load_n(&t->free_bytes, __ATOMIC_RELAXED),
            __atomic_load_n(&t->free_blocks, __ATOMIC_RELAXED),
        };
        struct site s = site_of((uint32_t)id);
        s.ab = now.alloc_bytes - base[id].alloc_bytes;
        s.an = (uint64_t)mt_blocks((int64_t)(now.alloc_blocks - base[id].alloc_blocks));
        s.fb = now.free_bytes - base[id].free_bytes;
        s.fn = (uint64_t)mt_blocks((int64_t)(now.free_blocks - base[id].free_blocks));
        s.bytes = (int64_t)(s.ab - s.fb);
        s.blocks = mt_blocks((int64_t)(now.alloc_blocks - base[id].alloc_blocks) -
                             (int64_t)(now.free_blocks - base[id].free_blocks));
        if (advance) base[id] = now;
        add(all, &s);
        if (s.bytes || s.blocks) sites[n++] = s;
    }
    return n;
}

static void title(struct mt_out *o, const struct mt_report_req *req)
{
    mt_out_str(o, "mtrace report ");
    mt_out_u64(o, req->seq);
    mt_out_str(o, ": ");
    mt_out_str(o, req->prog);
    mt_out_str(o, ", pid ");
    mt_out_u64(o, (uint64_t)getpid());
    mt_out_str(o, ", ");
    mt_out_str(o, req->when);
    if (req->base) {
        mt_out_str(o, ", changes since ");
        mt_out_str(o, req->since);
    }
    mt_out_str(o, "\n");
}

static void sites_header(struct mt_out *o, const struct mt_report_req *req, const struct site *all,
                         size_t n, size_t shown)
{
    if (req->base) {
        mt_out_str(o, "changes since ");
        mt_out_str(o, req->since);
        mt_out_str(o, estimated());
        amount(o, ": allocated ", (int64_t)all->ab, (int64_t)all->an, "block", 0);
        amount(o, ", freed ", (int64_t)all->fb, (int64_t)all->fn, "block", 0);
        amount(o, ", net ", all->bytes, all->blocks, "block", 1);
        if (n == 0) {
            mt_out_str(o, "; no call site grew or shrank\n");
            return;
        }
        mt_out_str(o, "; by call site, largest growth first (");
    } else if (n == 0) {
        mt_out_str(o, req->at_exit ? "leaks: none\n" : "live blocks: none\n");
        return;
    } else {
        mt_out_str(o, req->at_exit ? "leaks" : "live");
        mt_out_str(o, estimated());
        amount(o, ": ", all->bytes, all->blocks, "block", 0);
        mt_out_str(o, " by call site, largest first (");
    }
    mt_out_u64(o, n);
    mt_out_str(o, n == 1 ? " site" : " sites");
    if (shown < n) {
        mt_out_str(o, ", showing ");
        mt_out_u64(o, shown);
    }
    mt_out_str(o, "):\n");
}

int mt_report_write(int fd, const struct mt_report_req *req)
{
    if (req->base && !mt_config.account) {
        errno = ENOTSUP;
        return -1;
    }
    mt_guard_hold();
    /* Room for every id: a record may carry a stack interned while the table is read. */
    struct gather g = {.ids = mt_config.stacks + 1};
    if (!req->base && (g.per_id = calloc(g.ids, 2 * sizeof *g.per_id)) != NULL)
        mt_table_each(gather_live, &g);
    /* Read after the scan, so that it covers every id gathered; a changes report leaves later
     * ones to the next report. */
    size_t ids = mt_stack_count() + 1;
    struct site *sites = malloc(ids * sizeof *sites);
    if (!sites || (!req->base && !g.per_id)) {
        free(sites);
        free(g.per_id);
        mt_guard_release();
        errno = ENOMEM;
        return -1;
    }
    struct site all = {0};
    size_t n = req->base ? changed_sites(sites, ids, req->base, req->advance, &all)
                         : live_sites(sites, ids, &g);
    for (size_t i = 0; !req->base && i < n; i++)
        add(&all, &sites[i]);
    n = merge(sites, n);
    size_t shown = mt_config.report_top && mt_config.report_top < n ? mt_config.report_top : n;

    struct mt_out o;
    mt_out_init(&o, fd);
    title(&o, req);
    summary(&o, req, &g);
    sites_header(&o, req, &all, n, shown);
    for (size_t i = 0; i < shown; i++)
        print_site(&o, &sites[i], i + 1, n, req->base != NULL);
    if (shown < n) {
        struct site rest = {0};
        for (size_t i = shown; i < n; i++)
            add(&rest, &sites[i]);
        mt_out_str(&o, "\n... and ");
        mt_out_u64(&o, n - shown);
        amount(&o, n - shown == 1 ? " more site: " : " more sites: ", rest.bytes, rest.blocks,
               "block", req->base != NULL);
        mt_out_str(&o, "\n");
    }
    mt_out_str(&o, "\nmtrace: end of report ");
    mt_out_u64(&o, req->seq);
    mt_out_str(&o, "\n");
    free(g.per_id);
    free(sites);
    int rc = mt_out_flush(&o);
    mt_guard_release();
    return rc;
}
