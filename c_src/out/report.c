/* report.c: live and changes reports (see report.h). */
#define _GNU_SOURCE
#include "out/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "mark/reach.h"
#include "mark/roots.h"
#include "mark/rules.h"
#include "mark/snapshot.h"
#include "record/allocator.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "symbols/symbols.h"

struct site {
    uint32_t id;
    int n;                    /* frames shown */
    const uintptr_t *ips;     /* the stack's frames, interned (immutable) */
    int64_t bytes, blocks;    /* live report: live (or lost, at exit); changes report: net */
    uint64_t ab, an, fb, fn;  /* changes report: allocated and freed since the baseline */
    int64_t direct, indirect; /* lost blocks, at exit */
    int64_t possible;         /* of them, those a discounted word points into (reach.h) */
    uint8_t rule;             /* the rule of the first such word (rules.h) */
};

int mt_report_depth(int n)
{
    size_t d = mt_config.report_depth;
    return d && d < (size_t)n ? (int)d : n;
}

/* " (FILE:LINE)", the file without its directories. */
static void source(struct mt_out *o, const struct mt_frame_info *f,
                   void (*text)(struct mt_out *, const char *))
{
    const char *slash = strrchr(f->file, '/');
    mt_out_str(o, " (");
    text(o, slash ? slash + 1 : f->file);
    mt_out_str(o, ":");
    mt_out_u64(o, (uint64_t)f->line);
    mt_out_str(o, ")");
}

void mt_report_frame(struct mt_out *o, const struct mt_frame_info *f, int how)
{
    void (*text)(struct mt_out *, const char *) =
        how & MT_REPORT_QUOTED ? mt_out_quoted : mt_out_str;
    if (f->unloaded == MT_FRAME_REPLACED) {
        mt_out_str(o, "?? (unloaded or replaced)");
        return;
    }
    if (f->erlang) {
        text(o, f->function);
        if (f->file) source(o, f, text);
        mt_out_str(o, " (erlang)");
        return;
    }
    if (!f->path) {
        mt_out_str(o, "?? (no module)");
        return;
    }
    if (f->function) {
        text(o, f->function);
        if (f->file) {
            source(o, f, text);
            if (how & MT_REPORT_LIBRARY) {
                mt_out_str(o, " ");
                text(o, f->path);
                mt_out_str(o, "+");
                mt_out_hex(o, f->offset);
            }
        } else {
            mt_out_str(o, " (");
            text(o, f->path);
            mt_out_str(o, ")");
        }
    } else {
        text(o, f->path);
        mt_out_str(o, "+");
        mt_out_hex(o, f->offset);
    }
    if (f->unloaded == MT_FRAME_UNLOADED) mt_out_str(o, " [unloaded]");
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
    sum->direct += s->direct;
    sum->indirect += s->indirect;
    sum->possible += s->possible;
    if (!sum->rule) sum->rule = s->rule;
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

/* Per stack id: bytes, blocks (in 1/MT_ONE units), and of lost blocks, how many are direct. */
struct per_id {
    int64_t bytes, units, direct, indirect, possible;
    uint8_t rule;
};

/* A live report's records, summed by stack id. At exit, when reachability is known (split),
 * lost blocks go to `lost` and reachable ones to `kept`; otherwise every record goes to `lost`,
 * which is then simply the live heap. When glibc's heap was walked (exact: the records were not
 * complete), every live block is in the scan once, with its record or without one: the lost and
 * reachable totals count each block as itself, while the sites keep the records' weights (with
 * sampling, estimates of everything their stack allocated), so blocks without a record are in
 * the totals and in no site. */
struct gather {
    struct per_id *lost, *kept;
    size_t *oldest; /* MTRACE_REPORT_WHY: by stack id, its oldest reachable record, or NONE */
    size_t ids;
    int split, exact;
    const char *refused; /* why the walk the scan needed was refused, when it was */
    struct mt_reach reach;
    int64_t heap_bytes, heap_units, tracked_bytes, tracked_units;
    int64_t lost_bytes, lost_units, kept_bytes, kept_units, direct, indirect, possible;
};

/* Per site, weights (account.h): the estimate a sampled record stands for; the totals of a
 * walked heap count the block itself. */
static void gather_record(struct gather *g, const struct mt_record *r, int state, uint8_t rule)
{
    size_t id = r->stack < g->ids ? r->stack : 0;
    struct mt_weight w =
        r->stack == MT_SNAPSHOT_UNRECORDED ? (struct mt_weight){0, 0} : mt_weigh(r);
    struct mt_weight t = g->exact ? (struct mt_weight){r->size, MT_ONE} : w;
    if (r->addr & MT_TRACK_BIT) {
        g->tracked_bytes += (int64_t)w.bytes;
        g->tracked_units += (int64_t)w.blocks;
    } else {
        g->heap_bytes += (int64_t)t.bytes;
        g->heap_units += (int64_t)t.blocks;
    }
    struct per_id *p = &g->lost[id];
    if (state == MT_REACH_REACHABLE) {
        p = &g->kept[id];
        g->kept_bytes += (int64_t)t.bytes;
        g->kept_units += (int64_t)t.blocks;
    } else if (g->split && !(r->addr & MT_TRACK_BIT)) {
        g->lost_bytes += (int64_t)t.bytes;
        g->lost_units += (int64_t)t.blocks;
        int direct = state == MT_REACH_DIRECT;
        g->direct += direct;
        g->indirect += !direct;
        g->possible += rule != MT_RULE_NONE;
        if (w.blocks) {
            p->direct += direct;
            p->indirect += !direct;
            p->possible += rule != MT_RULE_NONE;
            if (!p->rule) p->rule = rule;
        }
    }
    p->bytes += (int64_t)w.bytes;
    p->units += (int64_t)w.blocks;
}

/* Reads the live records; at exit or for a leaks report, with every live block known (every
 * allocation recorded, or else glibc's heap walked), marks what the program can still reach.
 * Returns 0, or -1 with errno. With complete records the heap is not walked: the blocks without a
 * record would then be mtrace's own (allocated while it ran), not the program's. */
static int gather_live(struct gather *g, const struct mt_report_req *req)
{
    struct mt_snapshot own, *snap = &own;
    int why = mt_config.report_why && mt_config.report_reachable;
    g->split = (req->at_exit || req->leaks) &&
               (why ? mt_reach_run_paths(&g->reach, req->at_exit, mt_reach_needs_walk(0))
                    : mt_reach_run(&g->reach, req->at_exit, mt_reach_needs_walk(0))) == 0;
    if (g->split && mt_reach_rule(&g->reach, 0) != MT_LOST_KNOWN) {
        g->refused = g->reach.heap_refused;
        mt_reach_drop(&g->reach);
        g->split = 0;
    }
    g->exact = g->split && g->reach.heap_walked;
    if (g->split)
        snap = &g->reach.snap;
    else if (mt_snapshot_take(&own, MT_SNAPSHOT_ANY_ORDER) != 0)
        return -1;
    if (!(g->lost = calloc(g->ids, sizeof *g->lost)) ||
        (g->split && !(g->kept = calloc(g->ids, sizeof *g->kept)))) {
        if (!g->split) mt_snapshot_drop(&own);
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < snap->n; i++)
        gather_record(g, &snap->rec[i], g->split ? g->reach.state[i] : 0,
                      g->split ? g->reach.rule[i] : MT_RULE_NONE);
    if (g->split && why && (g->oldest = malloc(g->ids * sizeof *g->oldest)))
        mt_reach_oldest(&g->reach, g->oldest, g->ids, 0);
    if (!g->split) mt_snapshot_drop(&own);
    return 0;
}

static void gather_drop(struct gather *g)
{
    if (g->split) mt_reach_drop(&g->reach);
    free(g->lost);
    free(g->kept);
    free(g->oldest);
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
    if (mt_real.foreign) {
        mt_out_str(o, "  allocator: ");
        mt_out_str(o, mt_real.name);
        mt_out_str(o, " (not glibc's: blocks are known from the records alone)\n");
    }
    if (g->split) {
        amount(o, req->at_exit ? "  leaked at exit: " : "  lost now: ", g->lost_bytes,
               mt_blocks(g->lost_units), "block", 0);
        mt_out_str(o, " (");
        mt_out_i64(o, g->direct, 0);
        mt_out_str(o, " direct, ");
        mt_out_i64(o, g->indirect, 0);
        mt_out_str(o, " indirect)\n");
        if (g->possible) {
            mt_out_str(o, "    of which possibly lost: ");
            mt_out_i64(o, g->possible, 0);
            mt_out_str(o, " blocks that a word a rule discounted points into (docs/rules.md)\n");
        }
        amount(o, req->at_exit ? "  still reachable at exit: " : "  still reachable now: ",
               g->kept_bytes, mt_blocks(g->kept_units), "block", 0);
        mt_out_str(o, "\n");
    } else {
        mt_out_str(o, req->at_exit ? "  leaked at exit" : "  live heap");
        mt_out_str(o, estimated());
        amount(o, ": ", counted ? load(&mt_account.live_bytes) : g->heap_bytes,
               mt_blocks(counted ? load(&mt_account.live_blocks) : g->heap_units), "block", 0);
        mt_out_str(o, "\n");
    }
    if (counted && load(&mt_account.untabled_blocks) > 0) {
        amount(o,
               g->split ? "  live at exit without a record (table full; see MTRACE_SLOTS_MAX): "
                        : "    of which without a record (table full; see MTRACE_SLOTS_MAX): ",
               load(&mt_account.untabled_bytes), load(&mt_account.untabled_blocks), "block", 0);
        mt_out_str(o, "\n");
    }
    if (g->split) {
        mt_out_str(o, "  reachability: ");
        mt_out_u64(o, g->reach.stopped);
        mt_out_str(o, " of ");
        mt_out_u64(o, g->reach.threads);
        mt_out_str(o, " other threads stopped for ");
        mt_out_u64(o, g->reach.pause_ns / 1000);
        mt_out_str(o, " us; ");
        mt_out_u64(o, g->reach.root_bytes);
        mt_out_str(o, " bytes of roots and ");
        mt_out_u64(o, g->reach.block_bytes);
        mt_out_str(o, " bytes of blocks read\n");
        if (g->exact) {
            mt_out_str(o, "  glibc's heap walked: ");
            mt_out_u64(o, g->reach.unrecorded);
            mt_out_str(o, " live blocks without a record (in the totals, in no site), ");
            mt_out_u64(o, g->reach.missed_frees);
            mt_out_str(o, " frees mtrace did not see\n");
        }
    } else if ((req->at_exit || req->leaks) && !req->base) {
        const char *why = mt_config.sample ? "not sampled blocks have no record (MTRACE_SAMPLE)"
                          : st.dropped     ? "the table dropped records: see MTRACE_SLOTS_MAX"
                          : mt_records_partial_since()
                              ? "blocks from before the attach have no record"
                              : "the mark failed";
        mt_out_str(o, "  reachability: not known (");
        mt_out_str(o, why);
        if (g->refused) {
            mt_out_str(o, ", and glibc's heap was not walked: ");
            mt_out_str(o, g->refused);
        }
        mt_out_str(o, ")\n");
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
               mt_blocks(counted ? load(&mt_account.tracked_blocks) : g->tracked_units), "resource",
               0);
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
    if (s->direct || s->indirect) {
        mt_out_str(o, " lost (");
        mt_out_i64(o, s->direct, 0);
        mt_out_str(o, " direct, ");
        mt_out_i64(o, s->indirect, 0);
        mt_out_str(o, " indirect)");
        if (s->possible) {
            /* how many a discounted word points into, and the first such word's rule */
            mt_out_str(o, " (");
            mt_out_i64(o, s->possible, 0);
            mt_out_str(o, " possibly: ");
            mt_out_str(o, mt_rules[s->rule].name);
            mt_out_str(o, ")");
        }
    }
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
    /* As valgrind does, nothing below main: the C library's start-up, the same for every site.
     * An address with inlined functions takes a line for each, all with that address. */
    struct mt_frame_info f[MT_INLINE_MAX];
    int lines = 0, at_main = 0;
    for (int i = 0; i < s->n && !at_main; i++) {
        int n = mt_symbolize_frames(s->id, s->ips[i], 1, f, MT_INLINE_MAX);
        for (int k = 0; k < n; k++) {
            mt_out_str(o, lines++ ? "    by " : "    at ");
            mt_out_hex(o, s->ips[i]);
            mt_out_str(o, ": ");
            mt_report_frame(o, &f[k], MT_REPORT_LIBRARY);
            mt_out_str(o, "\n");
        }
        at_main = f[n - 1].function && strcmp(f[n - 1].function, "main") == 0;
    }
}

/* What keeps record i (MTRACE_REPORT_WHY): the root, as Mtrace.Path's inspect names it, then
 * each block on the way with the offset of its pointer to the next, the last one i. */
enum { WHY_LINKS = 12 };

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A thread: its id, and its name when it has one ("1234 (1_scheduler)"). */
static void print_thread(struct mt_out *o, const struct mt_root *root)
{
    mt_out_u64(o, (uint64_t)root->tid);
    if (!root->thread[0]) return;
    mt_out_str(o, " (");
    mt_out_str(o, root->thread);
    mt_out_str(o, ")");
}

static void print_root(struct mt_out *o, const struct mt_root *root)
{
    switch (root->kind) {
    case MT_ROOT_STATIC:
        mt_out_str(o, "static ");
        mt_out_str(o, base_name(root->library));
        mt_out_str(o, ":");
        if (root->symbol) mt_out_str(o, root->symbol);
        mt_out_str(o, "+");
        mt_out_i64(o, root->offset, 0);
        return;
    case MT_ROOT_STACK: {
        mt_out_str(o, "stack of thread ");
        print_thread(o, root);
        mt_out_str(o, " (sp+");
        mt_out_i64(o, root->offset, 0);
        mt_out_str(o, ")");
        if (!root->ip) return;
        struct mt_frame_info f = mt_symbolize_function(UINT64_MAX, root->lookup, 1);
        if (f.function) {
            mt_out_str(o, " in ");
            mt_out_str(o, f.function);
        }
        return;
    }
    case MT_ROOT_TLS:
        mt_out_str(o, root->library ? "TLS of " : "control block");
        if (root->library) mt_out_str(o, base_name(root->library));
        mt_out_str(o, root->library ? " in thread " : " of thread ");
        print_thread(o, root);
        mt_out_str(o, "+");
        mt_out_i64(o, root->offset, 0);
        return;
    case MT_ROOT_REGISTER:
        mt_out_str(o, root->reg);
        mt_out_str(o, " of thread ");
        print_thread(o, root);
        return;
    case MT_ROOT_ALTSTACK:
        mt_out_str(o, "sigaltstack of thread ");
        print_thread(o, root);
        return;
    case MT_ROOT_LOST:
        mt_out_str(o, "nothing (lost)");
        return;
    case MT_ROOT_MAPPING:
        mt_out_str(o, root->library && root->library[0] ? "other " : "vm ");
        mt_out_str(o, root->library && root->library[0] ? root->library : "mapping");
        mt_out_str(o, "+");
        mt_out_u64(o, root->hi ? root->via - root->lo : 0);
        if (root->allocator[0]) {
            mt_out_str(o, " (");
            mt_out_str(o, root->allocator);
            mt_out_str(o, ")");
        }
        return;
    }
}

static void print_why(struct mt_out *o, const struct mt_reach *r, size_t i)
{
    size_t chain[WHY_LINKS], n = mt_reach_path(r, i, chain, WHY_LINKS);
    if (!n) return;
    mt_out_str(o, "    kept by ");
    if (n > WHY_LINKS) {
        mt_out_str(o, "a chain of ");
        mt_out_u64(o, n);
        mt_out_str(o, " blocks\n");
        return;
    }
    struct mt_root root;
    mt_root_name(r, chain[n - 1], &root);
    print_root(o, &root);
    for (size_t k = n; k-- > 0;) {
        const struct mt_record *b = &r->snap.rec[chain[k]];
        mt_out_str(o, " -> ");
        mt_out_hex(o, b->addr);
        mt_out_str(o, " (");
        mt_out_u64(o, b->size);
        mt_out_str(o, " B)");
        if (k) {
            mt_out_str(o, " +");
            mt_out_u64(o, r->via[chain[k - 1]] - b->addr);
        }
    }
    mt_out_str(o, "\n");
}

/* Sites of a live report: the records gathered, summed by stack id. */
static size_t live_sites(struct site *sites, size_t ids, const struct per_id *p)
{
    size_t n = 0;
    for (size_t id = 0; id < ids; id++) {
        if (!p[id].units) continue;
        sites[n] = site_of((uint32_t)id);
        sites[n].bytes = p[id].bytes;
        sites[n].blocks = mt_blocks(p[id].units);
        sites[n].direct = p[id].direct;
        sites[n].possible = p[id].possible;
        sites[n].rule = p[id].rule;
        sites[n++].indirect = p[id].indirect;
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

/* How many of n entries a list shows: MTRACE_REPORT_TOP, or all. */
static size_t shown_of(size_t n)
{
    return mt_config.report_top && mt_config.report_top < n ? mt_config.report_top : n;
}

/* The end of a list's header: "n sites, showing k):". */
static void list_count(struct mt_out *o, size_t n, size_t shown, const char *one, const char *many)
{
    mt_out_u64(o, n);
    mt_out_str(o, n == 1 ? one : many);
    if (shown < n) {
        mt_out_str(o, ", showing ");
        mt_out_u64(o, shown);
    }
    mt_out_str(o, "):\n");
}

static void title(struct mt_out *o, const struct mt_report_req *req)
{
    mt_out_str(o, MT_REPORT_MAGIC);
    mt_out_u64(o, MT_REPORT_FORMAT);
    mt_out_str(o, "\nmtrace report ");
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

/* what: "leaks", "live", "still reachable"; or NULL for the changes since req->base. */
static void sites_header(struct mt_out *o, const struct mt_report_req *req, const char *what,
                         const struct site *all, size_t n, size_t shown)
{
    if (!what) {
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
        mt_out_str(o, what);
        mt_out_str(o, strcmp(what, "live") == 0 ? " blocks: none\n" : ": none\n");
        return;
    } else {
        mt_out_str(o, what);
        mt_out_str(o, estimated());
        amount(o, ": ", all->bytes, all->blocks, "block", 0);
        mt_out_str(o, " by call site, largest first (");
    }
    list_count(o, n, shown, " site", " sites");
}

/* A function's share of a list of sites: those whose frame 1, the caller of the intercepted
 * function, is in it (heaptrack's "leaked over 3 calls from f"). */
struct caller {
    struct mt_frame_info frame; /* the innermost function at frame 1 */
    uintptr_t key;              /* frame 1's address when no function is named, else 0 */
    int64_t bytes, blocks;
    size_t paths;
};

static int by_caller(const void *pa, const void *pb)
{
    /* Names are interned: equal text, equal pointer. */
    const struct caller *a = pa, *b = pb;
    uintptr_t x[3] = {(uintptr_t)a->frame.path, (uintptr_t)a->frame.function, a->key};
    uintptr_t y[3] = {(uintptr_t)b->frame.path, (uintptr_t)b->frame.function, b->key};
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

static int by_caller_size(const void *pa, const void *pb)
{
    const struct caller *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->blocks != b->blocks) return a->blocks > b->blocks ? -1 : 1;
    return by_caller(pa, pb);
}

/* The list's sites summed by calling function, largest first, before the stacks themselves;
 * cut to MTRACE_REPORT_TOP. Nothing is printed when memory for it runs out. */
static void print_callers(struct mt_out *o, const char *what, const struct site *sites, size_t n)
{
    struct caller *c = malloc(n * sizeof *c);
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        c[i] = (struct caller){.bytes = sites[i].bytes, .blocks = sites[i].blocks, .paths = 1};
        if (sites[i].n < 2) continue;
        struct mt_frame_info f[MT_INLINE_MAX];
        mt_symbolize_frames(sites[i].id, sites[i].ips[1], 1, f, MT_INLINE_MAX);
        c[i].frame = f[0];
        c[i].key = f[0].function ? 0 : sites[i].ips[1];
    }
    qsort(c, n, sizeof *c, by_caller);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && by_caller(&c[k - 1], &c[i]) == 0) {
            c[k - 1].bytes += c[i].bytes;
            c[k - 1].blocks += c[i].blocks;
            c[k - 1].paths++;
        } else {
            c[k++] = c[i];
        }
    }
    qsort(c, k, sizeof *c, by_caller_size);
    size_t shown = shown_of(k);
    mt_out_str(o, what);
    mt_out_str(o, " by calling function, largest first (");
    list_count(o, k, shown, " function", " functions");
    for (size_t i = 0; i < shown; i++) {
        amount(o, "  ", c[i].bytes, c[i].blocks, "block", 0);
        mt_out_str(o, " from ");
        if (c[i].frame.path || c[i].frame.unloaded || c[i].key)
            mt_report_frame(o, &c[i].frame, 0);
        else
            mt_out_str(o, "(no stack)");
        if (c[i].paths > 1) {
            mt_out_str(o, " over ");
            mt_out_u64(o, c[i].paths);
            mt_out_str(o, " call paths");
        }
        mt_out_str(o, "\n");
    }
    mt_out_str(o, "\n");
    free(c);
}

/* One list of sites, merged, largest first, cut to MTRACE_REPORT_TOP. all: the totals, which a
 * changes report also takes from the sites it does not list; NULL to sum the sites. */
static void print_sites(struct mt_out *o, const struct mt_report_req *req, const char *what,
                        struct site *sites, size_t n, const struct site *totals,
                        const struct gather *why)
{
    struct site all = {0};
    for (size_t i = 0; !totals && i < n; i++)
        add(&all, &sites[i]);
    if (totals) all = *totals;
    n = merge(sites, n);
    size_t shown = shown_of(n);
    if (what && n) print_callers(o, what, sites, n);
    sites_header(o, req, what, &all, n, shown);
    for (size_t i = 0; i < shown; i++) {
        print_site(o, &sites[i], i + 1, n, what == NULL);
        size_t oldest = why && why->oldest ? why->oldest[sites[i].id] : MT_SNAPSHOT_NONE;
        if (oldest != MT_SNAPSHOT_NONE) print_why(o, &why->reach, oldest);
    }
    if (shown < n) {
        struct site rest = {0};
        for (size_t i = shown; i < n; i++)
            add(&rest, &sites[i]);
        mt_out_str(o, "\n... and ");
        mt_out_u64(o, n - shown);
        amount(o, n - shown == 1 ? " more site: " : " more sites: ", rest.bytes, rest.blocks,
               "block", what == NULL);
        mt_out_str(o, "\n");
    }
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
    int failed = !req->base && gather_live(&g, req) != 0;
    /* Read after the scan, so that it covers every id gathered; a changes report leaves later
     * ones to the next report. */
    size_t ids = mt_stack_count() + 1;
    struct site *sites = failed ? NULL : malloc(ids * sizeof *sites);
    if (!sites) {
        gather_drop(&g);
        mt_guard_release();
        errno = ENOMEM;
        return -1;
    }
    struct site all = {0};
    size_t n = req->base ? changed_sites(sites, ids, req->base, req->advance, &all)
                         : live_sites(sites, ids, g.lost);

    struct mt_out o;
    mt_out_init(&o, fd);
    title(&o, req);
    summary(&o, req, &g);
    print_sites(&o, req,
                req->base                 ? NULL
                : req->at_exit || g.split ? "leaks"
                                          : "live",
                sites, n, req->base ? &all : NULL, NULL);
    if (g.split && mt_config.report_reachable) {
        mt_out_str(&o, "\n");
        print_sites(&o, req, "still reachable", sites, live_sites(sites, ids, g.kept), NULL, &g);
    }
    mt_out_str(&o, "\nmtrace: end of report ");
    mt_out_u64(&o, req->seq);
    mt_out_str(&o, "\n");
    gather_drop(&g);
    free(sites);
    int rc = mt_out_flush(&o);
    mt_guard_release();
    return rc;
}
