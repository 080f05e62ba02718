/* nif.c: the Erlang NIF half of mtrace.so, behind the Elixir module Mtrace (the NIF API through
 * nif_api.h).
 *
 * Every NIF holds the recorder's guard while it runs, so its own allocations (and those of the
 * symbolizer) are not traced. Records are copied out of the table first; symbolization runs after,
 * with no slot held, so allocating threads never wait for it.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "attach/attach.h"
#include "base/config.h"
#include "base/mem.h"
#include "base/platform.h"
#include "base/proc.h"
#include "mark/beam_heaps.h"
#include "mark/beam_regs.h"
#include "mark/beam_vm.h"
#include "mark/reach.h"
#include "mark/roots.h"
#include "mark/rules.h"
#include "mark/snapshot.h"
#include "mark/world.h"
#include "nif/filter.h"
#include "nif/nif_api.h"
#include "nif/nif_hooks.h"
#include "record/account.h"
#include "record/allocator.h"
#include "record/beam_frames.h"
#include "record/hooks.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "record/table.h"
#include "symbols/symbols.h"

static ERL_NIF_TERM atom_true, atom_false, atom_nil, atom_not_preloaded, atom_error, atom_sampling,
    atom_dropped, atom_reset, atom_enomem, atom_maybe, atom_erlang, atom_attached, atom_ok;

/* When reset/0 last emptied the table (CLOCK_MONOTONIC_COARSE), 0 if never: the blocks live
 * then have no record, so nothing can be called lost. */
static uint64_t reset_ns, resets;

static ERL_NIF_TERM make_string(ErlNifEnv *env, const char *s)
{
    ERL_NIF_TERM t;
    size_t n = strlen(s);
    memcpy(enif_make_new_binary(env, n, &t), s, n);
    return t;
}

/* A map of the NIF's answers, from names and values. */
struct field {
    const char *name;
    ERL_NIF_TERM value;
};

static ERL_NIF_TERM map_of(ErlNifEnv *env, const struct field *f, size_t n)
{
    ERL_NIF_TERM keys[32], vals[32], map;
    if (n > 32) n = 32;
    for (size_t i = 0; i < n; i++) {
        keys[i] = enif_make_atom(env, f[i].name);
        vals[i] = f[i].value;
    }
    enif_make_map_from_arrays(env, keys, vals, n, &map);
    return map;
}

/* A max-heap on age order keeps the `cap` oldest records seen so far: its root is the youngest
 * of them, the one a still older record replaces. */
struct oldest {
    struct mt_record *r;
    size_t n, cap;
};

static int younger(const struct mt_record *a, const struct mt_record *b)
{
    return a->time_ns != b->time_ns ? a->time_ns > b->time_ns : a->addr > b->addr;
}

static void sift_down(struct mt_record *r, size_t n, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && younger(&r[c + 1], &r[c])) c++;
        if (!younger(&r[c], &r[i])) return;
        struct mt_record t = r[i];
        r[i] = r[c];
        r[c] = t;
        i = c;
    }
}

static void keep_oldest(struct oldest *o, const struct mt_record *rec)
{
    if (o->n < o->cap) {
        size_t i = o->n++;
        o->r[i] = *rec;
        while (i > 0 && younger(&o->r[i], &o->r[(i - 1) / 2])) {
            struct mt_record t = o->r[i];
            o->r[i] = o->r[(i - 1) / 2];
            o->r[(i - 1) / 2] = t;
            i = (i - 1) / 2;
        }
    } else if (o->cap > 0 && younger(&o->r[0], rec)) {
        o->r[0] = *rec;
        sift_down(o->r, o->n, 0);
    }
}

static ERL_NIF_TERM make_stack(ErlNifEnv *env, uint32_t id, int demangle)
{
    const uintptr_t *ips;
    int n = mt_stack_get(id, &ips);
    ERL_NIF_TERM frames[MT_DEPTH_MAX];
    for (int i = 0; i < n; i++) {
        /* One pair an address, inlined functions aside: the function its code belongs to, and
         * nil for a library unloaded since; {erlang, "Mod:fun/arity"} for JIT code. */
        struct mt_frame_info outer = mt_symbolize_function(id, ips[i], demangle);
        if (outer.erlang) {
            ERL_NIF_TERM pair[2] = {atom_erlang, make_string(env, outer.function)};
            frames[i] = enif_make_tuple_from_array(env, pair, 2);
            continue;
        }
        if (!outer.path || outer.unloaded != MT_FRAME_LOADED) {
            frames[i] = atom_nil;
            continue;
        }
        ERL_NIF_TERM pair[2] = {make_string(env, outer.path),
                                outer.function ? make_string(env, outer.function) : atom_nil};
        frames[i] = enif_make_tuple_from_array(env, pair, 2);
    }
    return enif_make_list_from_array(env, frames, (unsigned)n);
}

/* olds(n, demangle, filter) */
static ERL_NIF_TERM olds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 want;
    struct mt_filter f;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &want) ||
        !(enif_is_identical(argv[1], atom_true) || enif_is_identical(argv[1], atom_false)) ||
        mt_filter_get(env, argv[2], &f) != 0)
        return enif_make_badarg(env);
    if (!mt_active()) {
        mt_filter_drop(&f);
        return atom_not_preloaded;
    }
    int demangle = enif_is_identical(argv[1], atom_true);

    mt_guard_hold();
    struct mt_snapshot snap;
    if (mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        mt_filter_drop(&f);
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    struct oldest o = {NULL, 0, want < snap.n ? (size_t)want : snap.n};
    o.r = o.cap ? enif_alloc(o.cap * sizeof *o.r) : NULL;
    if (o.cap && !o.r) o.cap = 0;
    for (size_t i = 0; i < snap.n; i++)
        if (mt_filter_wants(&f, &snap, &snap.rec[i])) keep_oldest(&o, &snap.rec[i]);
    /* Heap sort in place: each step moves the youngest left to the end, so the array ends oldest
     * first. */
    for (size_t n = o.n; n > 1; n--) {
        struct mt_record t = o.r[0];
        o.r[0] = o.r[n - 1];
        o.r[n - 1] = t;
        sift_down(o.r, n - 1, 0);
    }

    ERL_NIF_TERM *items = enif_alloc((o.n ? o.n : 1) * sizeof *items);
    for (size_t i = 0; i < o.n; i++) {
        const struct mt_record *r = &o.r[i];
        uint64_t t0 = mt_now_ns(CLOCK_MONOTONIC);
        ERL_NIF_TERM stack = make_stack(env, r->stack, demangle);
        uint64_t spent = mt_now_ns(CLOCK_MONOTONIC) - t0;
        ERL_NIF_TERM tuple[5] = {
            enif_make_double(env, (double)mt_snapshot_age(&snap, r) / 1e9),
            enif_make_uint64(env, r->size),
            enif_make_uint64(env, r->addr),
            enif_make_uint64(env, spent),
            stack,
        };
        items[i] = enif_make_tuple_from_array(env, tuple, 5);
    }
    ERL_NIF_TERM list = enif_make_list_from_array(env, items, (unsigned)o.n);
    enif_free(items);
    enif_free(o.r);
    mt_filter_drop(&f);
    mt_snapshot_drop(&snap);
    mt_guard_release();
    return list;
}

/* Weights (account.h): with sampling, what the records stand for; blocks in 1/MT_ONE units. */
struct tally {
    uint64_t bytes[2], units[2], oldest_ns; /* [0]: allocated by split_ns, [1]: after it */
};

/* sites(filter, split_ns) -> {now_ns, [{stack_id, bytes_before, blocks_before, bytes_after,
 * blocks_after, oldest_age_ns}]}: when the snapshot was taken, and the live records that pass
 * the filter, summed by stack, those allocated at or before split_ns (CLOCK_MONOTONIC_COARSE)
 * apart from those after it (a mark, diff/2); with sampling, each record weighs what it stands
 * for (account.h), as in reports, so that the sums are estimates of the whole heap. */
static ERL_NIF_TERM sites(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_filter f;
    ErlNifUInt64 split;
    (void)argc;
    if (mt_filter_get(env, argv[0], &f) != 0 || !enif_get_uint64(env, argv[1], &split))
        return enif_make_badarg(env);
    if (!mt_active()) {
        mt_filter_drop(&f);
        return atom_not_preloaded;
    }
    mt_guard_hold();
    struct mt_snapshot snap;
    size_t ids = mt_stack_count() + 1;
    struct tally *t = enif_alloc(ids * sizeof *t);
    if (!t || mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        enif_free(t);
        mt_filter_drop(&f);
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    memset(t, 0, ids * sizeof *t);
    size_t n = 0;
    for (size_t i = 0; i < snap.n; i++) {
        const struct mt_record *r = &snap.rec[i];
        if (r->stack >= ids || !mt_filter_wants(&f, &snap, r)) continue;
        struct tally *x = &t[r->stack];
        int after = r->time_ns > split;
        struct mt_weight w = mt_weigh(r);
        n += !x->units[0] && !x->units[1];
        x->bytes[after] += w.bytes;
        x->units[after] += w.blocks;
        uint64_t age = mt_snapshot_age(&snap, r);
        if (age > x->oldest_ns) x->oldest_ns = age;
    }
    ERL_NIF_TERM *items = enif_alloc((n ? n : 1) * sizeof *items);
    size_t k = 0;
    for (size_t id = 0; items && id < ids; id++) {
        const struct tally *x = &t[id];
        if (!x->units[0] && !x->units[1]) continue;
        ERL_NIF_TERM e[6] = {
            enif_make_uint64(env, id),
            enif_make_uint64(env, x->bytes[0]),
            enif_make_uint64(env, (uint64_t)mt_blocks((int64_t)x->units[0])),
            enif_make_uint64(env, x->bytes[1]),
            enif_make_uint64(env, (uint64_t)mt_blocks((int64_t)x->units[1])),
            enif_make_uint64(env, x->oldest_ns),
        };
        items[k++] = enif_make_tuple_from_array(env, e, 6);
    }
    ERL_NIF_TERM pair[2] = {enif_make_uint64(env, snap.now_ns),
                            enif_make_list_from_array(env, items, (unsigned)k)};
    enif_free(items);
    enif_free(t);
    mt_filter_drop(&f);
    mt_snapshot_drop(&snap);
    mt_guard_release();
    return enif_make_tuple_from_array(env, pair, 2);
}

/* What a lost block without a record holds, from its first len bytes in head (0 when they could
 * not be read; read after the threads went on: nothing else points to it): {:cxx, class} when its
 * first word points into a C++ vtable that the dynamic symbols name; {:erlang_binary, bytes} or
 * {:erlang_resource, bytes} for an off-heap binary of the VM (which reaches malloc with +MBe
 * false): a header of flags (1: a magic binary, as resources are), on OTP 27 a word of the VM's
 * own, a reference count of at least 1 and the data's size, that size filling the block but for
 * malloc's rounding; {:string, text} for printable text; else nil. */
#define HEAD_BYTES 40
static ERL_NIF_TERM describe(ErlNifEnv *env, const unsigned char *head, size_t len, size_t size)
{
    if (len < sizeof(uintptr_t)) return atom_nil;
    uintptr_t first;
    memcpy(&first, head, sizeof first);
    const char *cls = mt_symbolize_class(first);
    if (cls) {
        ERL_NIF_TERM t[2] = {enif_make_atom(env, "cxx"), make_string(env, cls)};
        return enif_make_tuple_from_array(env, t, 2);
    }
    uintptr_t w[4];
    /* flags, then (OTP 27) a word of the VM's, the reference count, the size; then the data */
    for (size_t k = 2; len >= (k + 1) * sizeof *w && k < 4; k++) {
        memcpy(w, head, (k + 1) * sizeof *w);
        size_t used = w[k] + (k + 1) * sizeof *w;
        if (w[0] <= 0xF && w[k - 1] >= 1 && w[k - 1] < ((uintptr_t)1 << 31) && w[k] < size &&
            used <= size && size - used < 24) {
            ERL_NIF_TERM t[2] = {
                enif_make_atom(env, w[0] & 1 ? "erlang_resource" : "erlang_binary"),
                enif_make_uint64(env, w[k])};
            return enif_make_tuple_from_array(env, t, 2);
        }
    }
    size_t n = 0;
    while (n < len && head[n] >= 0x20 && head[n] < 0x7f)
        n++;
    if (n < 4 || (n < len && head[n] != '\0')) return atom_nil;
    char text[HEAD_BYTES + 1];
    memcpy(text, head, n);
    text[n] = '\0';
    ERL_NIF_TERM t[2] = {enif_make_atom(env, "string"), make_string(env, text)};
    return enif_make_tuple_from_array(env, t, 2);
}

/* A batch of lost blocks (their indexes in the snapshot) and the first bytes of those without a
 * record. One process_vm_readv reads all of a batch's: one call a block was most of the time
 * leaks/1 took outside the pause in a sampled node. In mem.h's memory: the addresses it holds,
 * left in a freed block of the VM's carriers, kept the next scan's lost blocks. */
#define BATCH 1024 /* IOV_MAX */
struct batch {
    size_t n, at[BATCH], len[BATCH];
    struct iovec local[BATCH], remote[BATCH];
    unsigned char head[BATCH][HEAD_BYTES];
};

/* Reads the heads of b's blocks without a record; len is 0 for the others and for a block that
 * could not be read. The kernel moves whole elements up to the first it cannot read: that one is
 * passed, and the read goes on after it. */
static void read_heads(struct batch *b, const struct mt_snapshot *snap)
{
    size_t n = 0, index[BATCH];
    for (size_t j = 0; j < b->n; j++) {
        const struct mt_record *rec = &snap->rec[b->at[j]];
        b->len[j] = 0;
        if (rec->stack != MT_SNAPSHOT_UNRECORDED) continue;
        size_t len = rec->size < HEAD_BYTES ? rec->size : HEAD_BYTES;
        b->local[n] = (struct iovec){b->head[j], len};
        b->remote[n] = (struct iovec){(void *)rec->addr, len};
        index[n++] = j;
    }
    for (size_t k = 0; k < n;) {
        long got = mt_proc_readv(b->local + k, b->remote + k, n - k);
        size_t done = got > 0 ? (size_t)got : 0;
        for (; k < n && done >= b->local[k].iov_len; k++) {
            done -= b->local[k].iov_len;
            b->len[index[k]] = b->local[k].iov_len;
        }
        k++;
    }
}

/* How sure the mark is that block i is lost (reach.h): nil when definitely, else {rule, holder}:
 * the rule (rules.h) that discounted a word pointing into it, or into a lost block that reaches
 * it, and that word's address. */
static ERL_NIF_TERM certainty(ErlNifEnv *env, const struct mt_reach *r, size_t i)
{
    if (!r->rule[i]) return atom_nil;
    ERL_NIF_TERM t[2] = {enif_make_atom(env, mt_rules[r->rule[i]].name),
                         enif_make_uint64(env, r->rule_at[i])};
    return enif_make_tuple_from_array(env, t, 2);
}

/* The words each rule discounted in the scan r, as a map of rule to words. */
static ERL_NIF_TERM rule_counts(ErlNifEnv *env, const struct mt_reach *r)
{
    ERL_NIF_TERM keys[MT_RULES], vals[MT_RULES], map;
    for (int k = MT_RULE_NONE + 1; k < MT_RULES; k++) {
        keys[k - 1] = enif_make_atom(env, mt_rules[k].name);
        vals[k - 1] = enif_make_uint64(env, r->discounted[k]);
    }
    enif_make_map_from_arrays(env, keys, vals, MT_RULES - 1, &map);
    return map;
}

/* The batch's blocks as leaks/1's tuples, appended to items at *k. */
static void batch_items(ErlNifEnv *env, struct batch *b, const struct mt_reach *r,
                        ERL_NIF_TERM *items, size_t *k)
{
    read_heads(b, &r->snap);
    for (size_t j = 0; j < b->n; j++) {
        const struct mt_record *rec = &r->snap.rec[b->at[j]];
        int unrecorded = rec->stack == MT_SNAPSHOT_UNRECORDED;
        ERL_NIF_TERM t[7] = {
            enif_make_uint64(env, rec->addr),
            enif_make_uint64(env, rec->size),
            unrecorded ? describe(env, b->head[j], b->len[j], rec->size)
                       : enif_make_uint64(env, mt_snapshot_age(&r->snap, rec)),
            unrecorded ? atom_nil : enif_make_uint64(env, rec->stack),
            r->state[b->at[j]] == MT_REACH_DIRECT ? atom_true : atom_false,
            unrecorded ? atom_nil : enif_make_uint64(env, mt_reach_scans(rec->stack)),
            certainty(env, r, b->at[j]),
        };
        items[(*k)++] = enif_make_tuple_from_array(env, t, 7);
    }
    b->n = 0;
}

/* Why the scan r cannot call blocks lost (reach.h's one rule), or 0. */
static ERL_NIF_TERM incomplete(ErlNifEnv *env, const struct mt_reach *r)
{
    switch (mt_reach_rule(r, reset_ns != 0)) {
    case MT_LOST_SAMPLING:
        return atom_sampling;
    case MT_LOST_DROPPED: {
        struct mt_stats st;
        mt_stats_read(&st);
        ERL_NIF_TERM pair[2] = {atom_dropped, enif_make_uint64(env, st.dropped)};
        return enif_make_tuple_from_array(env, pair, 2);
    }
    case MT_LOST_RESET:
        return atom_reset;
    case MT_LOST_ATTACHED:
        return atom_attached;
    case MT_LOST_NOT_RECORDING:
        return atom_not_preloaded;
    case MT_LOST_KNOWN:
        break;
    }
    return 0;
}

/* The answer of a reader whose scan r cannot call blocks lost: {:not_preloaded, heap_refused} or
 * {:error, why, heap_refused | nil}; 0 when it can. */
static ERL_NIF_TERM refusal(ErlNifEnv *env, const struct mt_reach *r)
{
    ERL_NIF_TERM why = incomplete(env, r);
    if (!why) return 0;
    if (enif_is_identical(why, atom_not_preloaded)) {
        ERL_NIF_TERM t[2] = {why, make_string(env, r->heap_refused ? r->heap_refused : "")};
        return enif_make_tuple_from_array(env, t, 2);
    }
    ERL_NIF_TERM t[3] = {atom_error, why,
                         r->heap_refused ? make_string(env, r->heap_refused) : atom_nil};
    return enif_make_tuple_from_array(env, t, 3);
}

static ERL_NIF_TERM path_of(ErlNifEnv *env, const struct mt_reach *r, size_t i);

/* [{id, path_of() oldest[id] | nil}] for each of ids[0 .. n), the ids oldest was filled for
 * (mt_reach_oldest); 0 when out of memory. */
static ERL_NIF_TERM paths_by_id(ErlNifEnv *env, const struct mt_reach *r, const size_t *oldest,
                                const uint32_t *ids, size_t n)
{
    ERL_NIF_TERM *pairs = enif_alloc((n + 1) * sizeof *pairs), result = 0;
    size_t k = 0;
    for (; pairs && k < n; k++) {
        size_t i = oldest[ids[k]];
        ERL_NIF_TERM pair[2] = {enif_make_uint64(env, ids[k]),
                                i == MT_SNAPSHOT_NONE ? atom_nil : path_of(env, r, i)};
        if (!pair[1]) break;
        pairs[k] = enif_make_tuple_from_array(env, pair, 2);
    }
    if (pairs && k == n) result = enif_make_list_from_array(env, pairs, (unsigned)n);
    enif_free(pairs);
    return result;
}

/* For each stack id of the lost blocks the filter wants, [{stack_id, path_of() its oldest lost
 * block}] (that block's chain from its direct lost block); 0 when out of memory. */
static ERL_NIF_TERM lost_whys(ErlNifEnv *env, const struct mt_reach *r, struct mt_filter *f)
{
    size_t span = 1;
    for (size_t i = 0; i < r->snap.heap; i++)
        if (r->state[i] != MT_REACH_REACHABLE && r->snap.rec[i].stack < MT_SNAPSHOT_UNRECORDED &&
            r->snap.rec[i].stack >= span)
            span = (size_t)r->snap.rec[i].stack + 1;
    size_t *oldest = enif_alloc(span * sizeof *oldest), n = 0;
    uint32_t *ids = enif_alloc(span * sizeof *ids);
    ERL_NIF_TERM result = 0;
    if (oldest && ids) {
        mt_reach_oldest(r, oldest, span, 1);
        for (size_t id = 0; id < span; id++)
            if (oldest[id] != MT_SNAPSHOT_NONE &&
                mt_filter_wants(f, &r->snap, &r->snap.rec[oldest[id]]))
                ids[n++] = (uint32_t)id;
        result = paths_by_id(env, r, oldest, ids, n);
    }
    enif_free(oldest);
    enif_free(ids);
    return result;
}

/* The calling process, whose heap the mark may leave out while this NIF runs (beam_heaps.h). */
static void asker(ErlNifEnv *env)
{
    ErlNifPid self;
    if (enif_self(env, &self)) mt_beam_heaps_asker((uint64_t)self.pid);
}

/* leaks(filter, why) -> {[{address, size, age_ns, stack_id, direct, scans}], info}, and with why
 * a third element, lost_whys(); a block without a record has nil for its stack id and scans, and
 * what describe() says of it for its age. */
static ERL_NIF_TERM leaks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_filter f;
    (void)argc;
    int paths = enif_is_identical(argv[1], atom_true);
    if ((!paths && !enif_is_identical(argv[1], atom_false)) || mt_filter_get(env, argv[0], &f) != 0)
        return enif_make_badarg(env);
    mt_guard_hold();
    struct mt_reach r;
    asker(env);
    int marked = paths ? mt_reach_run_paths(&r, 0, 1) : mt_reach_run(&r, 0, 1);
    mt_beam_heaps_asker(0);
    if (marked != 0) {
        mt_guard_release();
        mt_filter_drop(&f);
        return enif_raise_exception(env, atom_enomem);
    }
    ERL_NIF_TERM why = refusal(env, &r);
    if (why) {
        mt_reach_drop(&r);
        mt_guard_release();
        mt_filter_drop(&f);
        return why;
    }
    for (size_t i = 0; i < r.missed_frees && i < MT_REACH_MISSED; i++)
        mt_forget_missed(&r.missed[i]);
    mt_reach_remember(&r);
    /* The filter is applied after the mark, which reads every block: a block outside the filter
     * may be the only way to one inside it. Symbolizing for it runs with the threads going. */
    size_t lost = 0;
    uint64_t kept_bytes = 0, kept_blocks = 0;
    for (size_t i = 0; i < r.snap.heap; i++) {
        if (r.state[i] == MT_REACH_REACHABLE) {
            kept_bytes += r.snap.rec[i].size;
            kept_blocks++;
        } else if (mt_filter_wants(&f, &r.snap, &r.snap.rec[i])) {
            lost++;
        }
    }
    /* The second pass asks the filter again: its answer per stack is memoized. */
    ERL_NIF_TERM *items = enif_alloc((lost ? lost : 1) * sizeof *items);
    struct batch *b = mt_mem_map(sizeof *b);
    size_t k = 0;
    for (size_t i = 0; items && b && i < r.snap.heap; i++) {
        if (r.state[i] == MT_REACH_REACHABLE || !mt_filter_wants(&f, &r.snap, &r.snap.rec[i]))
            continue;
        b->at[b->n++] = i;
        if (b->n == BATCH) batch_items(env, b, &r, items, &k);
    }
    if (items && b) batch_items(env, b, &r, items, &k);
    if (b)
        mt_mem_unmap(b, sizeof *b);
    else if (items) {
        enif_free(items);
        items = NULL;
    }
    const struct field info[] = {
        {"threads", enif_make_uint64(env, r.threads)},
        {"threads_stopped", enif_make_uint64(env, r.stopped)},
        {"pause_ns", enif_make_uint64(env, r.pause_ns)},
        {"root_bytes", enif_make_uint64(env, r.root_bytes)},
        {"block_bytes", enif_make_uint64(env, r.block_bytes)},
        {"unreadable_bytes", enif_make_uint64(env, r.unreadable_bytes)},
        {"vm_free_bytes", enif_make_uint64(env, r.vm_free_bytes)},
        {"process_free_bytes", enif_make_uint64(env, r.left.bytes[MT_BEAM_GAP_HEAP])},
        {"id_list_bytes", enif_make_uint64(env, r.left.bytes[MT_BEAM_GAP_IDS])},
        {"fix_list_bytes", enif_make_uint64(env, r.left.bytes[MT_BEAM_GAP_FIX])},
        {"delayed_free_bytes", enif_make_uint64(env, r.left.bytes[MT_BEAM_GAP_DD])},
        {"float_register_bytes", enif_make_uint64(env, r.left.bytes[MT_BEAM_GAP_FREGS])},
        {"processes", enif_make_uint64(env, r.processes)},
        {"processes_read_whole", enif_make_uint64(env, r.processes_read_whole)},
        {"reachable_bytes", enif_make_uint64(env, kept_bytes)},
        {"reachable_blocks", enif_make_uint64(env, kept_blocks)},
        {"live_blocks", enif_make_uint64(env, r.snap.heap)},
        {"heap_walked", r.heap_walked ? atom_true : atom_false},
        {"heap_refused", r.heap_refused ? make_string(env, r.heap_refused) : atom_nil},
        {"unrecorded_blocks", enif_make_uint64(env, r.unrecorded)},
        {"missed_frees", enif_make_uint64(env, r.missed_frees)},
        {"mmapped_missing", enif_make_uint64(env, r.mmapped_missing)},
        {"bad_chunks", enif_make_uint64(env, r.bad_chunks)},
        {"rules", rule_counts(env, &r)},
        {"otp", enif_make_uint64(env, mt_beam_vm_release())},
    };
    ERL_NIF_TERM result[3];
    result[1] = map_of(env, info, sizeof info / sizeof info[0]);
    result[0] = enif_make_list_from_array(env, items, (unsigned)k);
    result[2] = paths && items ? lost_whys(env, &r, &f) : 0;
    enif_free(items);
    mt_filter_drop(&f);
    mt_reach_drop(&r);
    mt_guard_release();
    if (!items || (paths && !result[2])) return enif_raise_exception(env, atom_enomem);
    return enif_make_tuple_from_array(env, result, paths ? 3 : 2);
}

/* What marked record i first (roots.h), as why/2's term, a thread as {tid, name | nil}:
 * {:tls, via, thread, path | nil, offset}, {:stack, via, thread, offset, {ip, lookup} | nil} (the
 * frame's code address, and the one to symbolize: ip + 1 where the thread was stopped),
 * {:static, via, path, symbol | nil, offset}, {:mapping, via, lo | nil, hi | nil, path | nil},
 * {:register, thread, name} or {:altstack, thread}. */
static ERL_NIF_TERM root_of(ErlNifEnv *env, const struct mt_reach *r, size_t i)
{
    struct mt_root root = {0};
    mt_root_name(r, i, &root);
    ERL_NIF_TERM via = enif_make_uint64(env, root.via);
    ERL_NIF_TERM thread[2] = {enif_make_int(env, root.tid),
                              root.thread[0] ? make_string(env, root.thread) : atom_nil};
    ERL_NIF_TERM tid = enif_make_tuple_from_array(env, thread, 2);
    ERL_NIF_TERM library = root.library ? make_string(env, root.library) : atom_nil;
    switch (root.kind) {
    case MT_ROOT_TLS: {
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "tls"), via, tid, library,
                             enif_make_uint64(env, (uint64_t)root.offset)};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_STACK: {
        ERL_NIF_TERM ip[2] = {enif_make_uint64(env, root.ip), enif_make_uint64(env, root.lookup)};
        ERL_NIF_TERM frame = root.ip ? enif_make_tuple_from_array(env, ip, 2) : atom_nil;
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "stack"), via, tid,
                             enif_make_long(env, (long)root.offset), frame};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_STATIC: {
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "static"), via, library,
                             root.symbol ? make_string(env, root.symbol) : atom_nil,
                             enif_make_uint64(env, (uint64_t)root.offset)};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_MAPPING: {
        ERL_NIF_TERM k[6] = {enif_make_atom(env, "mapping"),
                             via,
                             root.hi ? enif_make_uint64(env, root.lo) : atom_nil,
                             root.hi ? enif_make_uint64(env, root.hi) : atom_nil,
                             library,
                             root.allocator[0] ? make_string(env, root.allocator) : atom_nil};
        return enif_make_tuple_from_array(env, k, 6);
    }
    case MT_ROOT_REGISTER: {
        ERL_NIF_TERM k[3] = {enif_make_atom(env, "register"), tid, make_string(env, root.reg)};
        return enif_make_tuple_from_array(env, k, 3);
    }
    case MT_ROOT_LOST: {
        ERL_NIF_TERM k[1] = {enif_make_atom(env, "lost")};
        return enif_make_tuple_from_array(env, k, 1);
    }
    case MT_ROOT_ALTSTACK:
        break;
    }
    ERL_NIF_TERM k[2] = {enif_make_atom(env, "altstack"), tid};
    return enif_make_tuple_from_array(env, k, 2);
}

/* The chain from a root to snapshot record i: {root, [{address, size, stack_id | nil,
 * offset | nil}]}, each block with the offset of its pointer to the next; nil when i was not
 * reached; 0 when out of memory. */
static ERL_NIF_TERM path_of(ErlNifEnv *env, const struct mt_reach *r, size_t i)
{
    size_t n = mt_reach_path(r, i, NULL, 0);
    if (!n) return atom_nil;
    size_t *chain = enif_alloc(n * sizeof *chain);
    ERL_NIF_TERM *links = enif_alloc(n * sizeof *links), result = 0;
    if (chain && links) {
        mt_reach_path(r, i, chain, n);
        /* from the root outwards: chain[n - 1] first */
        for (size_t k = 0; k < n; k++) {
            const struct mt_record *b = &r->snap.rec[chain[n - 1 - k]];
            ERL_NIF_TERM t[4] = {
                enif_make_uint64(env, b->addr), enif_make_uint64(env, b->size),
                b->stack == MT_SNAPSHOT_UNRECORDED ? atom_nil : enif_make_uint64(env, b->stack),
                k + 1 < n ? enif_make_uint64(env, r->via[chain[n - 2 - k]] - b->addr) : atom_nil};
            links[k] = enif_make_tuple_from_array(env, t, 4);
        }
        ERL_NIF_TERM pair[2] = {root_of(env, r, chain[n - 1]),
                                enif_make_list_from_array(env, links, (unsigned)n)};
        result = enif_make_tuple_from_array(env, pair, 2);
    }
    enif_free(chain);
    enif_free(links);
    return result;
}

/* why(address) -> path_of() the block that holds address; nil for a lost block; not_a_block; or
 * leaks()'s refusals. */
static ERL_NIF_TERM why(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 addr;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &addr)) return enif_make_badarg(env);
    /* the mark must not take this frame's copy for a pointer: it keeps the address masked */
    volatile uintptr_t masked = (uintptr_t)addr ^ MT_REACH_MASK;
    *(volatile ErlNifUInt64 *)&addr = 0;
    mt_guard_hold();
    struct mt_reach r;
    asker(env);
    int marked = mt_reach_paths(&r, masked);
    mt_beam_heaps_asker(0);
    if (marked != 0) {
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    ERL_NIF_TERM result = refusal(env, &r);
    if (!result) {
        size_t i = mt_snapshot_find(&r.snap, masked ^ MT_REACH_MASK);
        result = i == MT_SNAPSHOT_NONE              ? enif_make_atom(env, "not_a_block")
                 : r.state[i] != MT_REACH_REACHABLE ? atom_nil
                                                    : path_of(env, &r, i);
    }
    mt_reach_drop(&r);
    mt_guard_release();
    return result ? result : enif_raise_exception(env, atom_enomem);
}

/* whys(stack_ids) -> [{stack_id, path_of() | nil}]: for each stack, the chain that keeps its
 * oldest reachable block, from one mark; nil when the mark reached none of its blocks. No address
 * is hidden: the caller holds none. */
static ERL_NIF_TERM whys(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned len;
    (void)argc;
    if (!enif_get_list_length(env, argv[0], &len)) return enif_make_badarg(env);
    uint32_t *ids = enif_alloc((len + 1) * sizeof *ids);
    if (!ids) return enif_raise_exception(env, atom_enomem);
    size_t span = 1; /* past the largest id asked about */
    ERL_NIF_TERM list = argv[0], head;
    for (unsigned k = 0; enif_get_list_cell(env, list, &head, &list); k++) {
        ErlNifUInt64 id;
        if (!enif_get_uint64(env, head, &id) || id >= MT_SNAPSHOT_UNRECORDED) {
            enif_free(ids);
            return enif_make_badarg(env);
        }
        ids[k] = (uint32_t)id;
        if (id >= span) span = (size_t)id + 1;
    }
    size_t *oldest = enif_alloc(span * sizeof *oldest);
    mt_guard_hold();
    struct mt_reach r;
    asker(env);
    int marked = oldest ? mt_reach_paths(&r, 0) : -1;
    mt_beam_heaps_asker(0);
    if (marked != 0) {
        mt_guard_release();
        enif_free(ids);
        enif_free(oldest);
        return enif_raise_exception(env, atom_enomem);
    }
    mt_reach_oldest(&r, oldest, span, 0);
    ERL_NIF_TERM result = paths_by_id(env, &r, oldest, ids, len);
    mt_reach_drop(&r);
    mt_guard_release();
    enif_free(ids);
    enif_free(oldest);
    return result ? result : enif_raise_exception(env, atom_enomem);
}

/* heap() -> {:ok, census map} | {:error, why}: glibc's heap as a walk sees it (reach.h). */
static ERL_NIF_TERM heap_census(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    struct mt_reach r;
    struct mt_heap h;
    mt_guard_hold();
    if (mt_reach_heap(&r, &h) != 0) {
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    if (!r.heap_walked) {
        mt_guard_release();
        ERL_NIF_TERM pair[2] = {atom_error, make_string(env, r.heap_refused)};
        return enif_make_tuple_from_array(env, pair, 2);
    }
    /* Blocks by size class: powers of two, 16 bytes up. */
    enum { CLASSES = 48, LARGEST = 10 };
    uint64_t blocks[CLASSES] = {0}, bytes[CLASSES] = {0}, recorded = 0, recorded_bytes = 0;
    for (size_t i = 0; i < h.blocks; i++) {
        int c = 0;
        while (c < CLASSES - 1 && ((uint64_t)16 << c) < h.block[i].size)
            c++;
        blocks[c]++;
        bytes[c] += h.block[i].size;
    }
    for (size_t i = 0; i < r.snap.heap; i++)
        if (r.snap.rec[i].stack != MT_SNAPSHOT_UNRECORDED) {
            recorded++;
            recorded_bytes += r.snap.rec[i].size;
        }
    ERL_NIF_TERM class_terms[CLASSES];
    unsigned nc = 0;
    for (int c = 0; c < CLASSES; c++)
        if (blocks[c]) {
            ERL_NIF_TERM t[3] = {enif_make_uint64(env, (uint64_t)16 << c),
                                 enif_make_uint64(env, blocks[c]), enif_make_uint64(env, bytes[c])};
            class_terms[nc++] = enif_make_tuple_from_array(env, t, 3);
        }
    ERL_NIF_TERM classes = enif_make_list_from_array(env, class_terms, nc);
    /* The largest free chunks, largest first: each one larger than the last kept goes in. */
    size_t largest[LARGEST], nl = 0;
    for (size_t i = 0; i < h.frees; i++) {
        size_t sz = h.free[i].size;
        if (nl == LARGEST && sz <= largest[LARGEST - 1]) continue;
        size_t k = nl < LARGEST ? nl++ : LARGEST - 1;
        for (; k > 0 && largest[k - 1] < sz; k--)
            largest[k] = largest[k - 1];
        largest[k] = sz;
    }
    ERL_NIF_TERM free_terms[LARGEST];
    for (size_t k = 0; k < nl; k++)
        free_terms[k] = enif_make_uint64(env, largest[k]);
    ERL_NIF_TERM free_list = enif_make_list_from_array(env, free_terms, (unsigned)nl);
    char version[8] = {(char)('0' + h.version / 100), '.', (char)('0' + h.version / 10 % 10),
                       (char)('0' + h.version % 10), '\0'};
    const struct field census[] = {
        {"arenas", enif_make_uint64(env, h.arenas)},
        {"heaps", enif_make_uint64(env, h.heaps)},
        {"blocks", enif_make_uint64(env, h.blocks)},
        {"block_bytes", enif_make_uint64(env, h.block_bytes)},
        {"free_chunks", enif_make_uint64(env, h.frees)},
        {"free_bytes", enif_make_uint64(env, h.free_bytes)},
        {"top_bytes", enif_make_uint64(env, h.top_bytes)},
        {"fastbin_chunks", enif_make_uint64(env, h.fast)},
        {"tcache_chunks", enif_make_uint64(env, h.tcached)},
        {"tcaches", enif_make_uint64(env, h.tcaches)},
        {"mmapped_blocks", enif_make_uint64(env, h.mmapped)},
        {"mmapped_bytes", enif_make_uint64(env, h.mmapped_bytes)},
        {"recorded_blocks", enif_make_uint64(env, recorded)},
        {"recorded_bytes", enif_make_uint64(env, recorded_bytes)},
        {"missed_frees", enif_make_uint64(env, r.missed_frees)},
        {"bad_chunks", enif_make_uint64(env, h.bad)},
        {"mmapped_missing", enif_make_uint64(env, h.mmapped_missing)},
        {"by_size", classes},
        {"largest_free", free_list},
        {"threads_stopped", enif_make_uint64(env, r.stopped)},
        {"pause_ns", enif_make_uint64(env, r.pause_ns)},
        {"glibc", make_string(env, version)},
    };
    ERL_NIF_TERM pair[2];
    pair[1] = map_of(env, census, sizeof census / sizeof census[0]);
    mt_reach_drop(&r);
    mt_heap_drop(&h);
    mt_guard_release();
    pair[0] = enif_make_atom(env, "ok");
    return enif_make_tuple_from_array(env, pair, 2);
}

/* stacks_matching(filter, ids) -> the ids (in their order) whose stacks pass the filter's library,
 * function and erlang: diff/2's test of the stacks its mark holds and no record does now. */
static ERL_NIF_TERM stacks_matching(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_filter f;
    ERL_NIF_TERM list = argv[1], head, *out;
    unsigned len, n = 0;
    (void)argc;
    if (!enif_get_list_length(env, list, &len) || mt_filter_get(env, argv[0], &f) != 0)
        return enif_make_badarg(env);
    mt_guard_hold();
    if (!(out = enif_alloc((len ? len : 1) * sizeof *out))) {
        mt_guard_release();
        mt_filter_drop(&f);
        return enif_raise_exception(env, atom_enomem);
    }
    int bad = 0;
    while (enif_get_list_cell(env, list, &head, &list)) {
        ErlNifUInt64 id;
        if ((bad = !enif_get_uint64(env, head, &id) || id > mt_stack_count())) break;
        if (mt_filter_stack(&f, (uint32_t)id)) out[n++] = head;
    }
    ERL_NIF_TERM result = bad ? enif_make_badarg(env) : enif_make_list_from_array(env, out, n);
    enif_free(out);
    mt_guard_release();
    mt_filter_drop(&f);
    return result;
}

/* frames(stack_ids, demangle) -> one list per id of {address, path | nil, name | nil,
 * offset | nil, file | nil, line | nil, inlined, unloaded, erlang}, a tuple per function (inlined
 * ones first, with their caller's address); unloaded is false, true, or maybe (symbols.h's
 * REPLACED, with path nil); erlang is true for JIT code, named (path nil). */
static ERL_NIF_TERM frames(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ERL_NIF_TERM list = argv[0], head, *out;
    unsigned n = 0, len;
    (void)argc;
    if (!enif_get_list_length(env, list, &len) ||
        !(enif_is_identical(argv[1], atom_true) || enif_is_identical(argv[1], atom_false)))
        return enif_make_badarg(env);
    int demangle = enif_is_identical(argv[1], atom_true);
    mt_guard_hold();
    if (!(out = enif_alloc((len ? len : 1) * sizeof *out))) {
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    int bad = 0;
    while (enif_get_list_cell(env, list, &head, &list)) {
        ErlNifUInt64 id, code;
        const ERL_NIF_TERM *one;
        int arity;
        const uintptr_t *ips;
        int depth;
        /* {ip}: one address of code live now (a why/2 root's frame) */
        if (enif_get_tuple(env, head, &arity, &one) && arity == 1 &&
            enif_get_uint64(env, one[0], &code)) {
            id = UINT64_MAX;
            ips = (const uintptr_t *)&code;
            depth = 1;
        } else {
            /* Not a stack id: badarg, even for the list's last element (list is its tail). */
            if ((bad = !enif_get_uint64(env, head, &id) || id > mt_stack_count())) break;
            depth = id ? mt_stack_get((uint32_t)id, &ips) : 0;
        }
        ERL_NIF_TERM f[MT_DEPTH_MAX * 4];
        unsigned nf = 0;
        for (int i = 0; i < depth; i++) {
            struct mt_frame_info fr[MT_INLINE_MAX];
            /* Room for every address, then as many inlined frames as fit. */
            int room = (int)(sizeof f / sizeof *f - nf) - (depth - i - 1);
            int k = mt_symbolize_frames(id, ips[i], demangle, fr,
                                        room < MT_INLINE_MAX ? room : MT_INLINE_MAX);
            for (int j = 0; j < k; j++) {
                const struct mt_frame_info *x = &fr[j];
                ERL_NIF_TERM t[9] = {
                    enif_make_uint64(env, ips[i]),
                    x->path ? make_string(env, x->path) : atom_nil,
                    x->function ? make_string(env, x->function) : atom_nil,
                    x->path ? enif_make_uint64(env, x->offset) : atom_nil,
                    x->file ? make_string(env, x->file) : atom_nil,
                    x->file ? enif_make_uint64(env, (uint64_t)x->line) : atom_nil,
                    x->inlined ? atom_true : atom_false,
                    x->unloaded == MT_FRAME_LOADED     ? atom_false
                    : x->unloaded == MT_FRAME_UNLOADED ? atom_true
                                                       : atom_maybe,
                    x->erlang ? atom_true : atom_false,
                };
                f[nf++] = enif_make_tuple_from_array(env, t, 9);
            }
        }
        out[n++] = enif_make_list_from_array(env, f, nf);
    }
    ERL_NIF_TERM result = !bad && enif_is_empty_list(env, list)
                              ? enif_make_list_from_array(env, out, n)
                              : enif_make_badarg(env);
    enif_free(out);
    mt_guard_release();
    return result;
}

#define STAT_KEYS (MT_KINDS + 46)

/* The live heap the records stand for: their sizes, or with sampling their weights. */
struct live {
    uint64_t bytes, units;
};

static void add_live(const struct mt_record *r, void *arg)
{
    struct live *l = arg;
    if (r->addr & MT_TRACK_BIT) return;
    struct mt_weight w = mt_weigh(r);
    l->bytes += w.bytes;
    l->units += w.blocks;
}

static ERL_NIF_TERM stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    mt_guard_hold();
    struct mt_stats s = {0};
    int active = mt_active();
    if (active) mt_stats_read(&s);
    struct mallinfo2 mi = mallinfo2();
    struct live live = {0};
    if (active) mt_table_each(add_live, &live);

    ERL_NIF_TERM keys[STAT_KEYS], vals[STAT_KEYS];
    unsigned k = 0;
    for (int i = 0; i < MT_KINDS; i++) {
        char name[32];
        size_t len = strlen(mt_kind_names[i]);
        memcpy(name, mt_kind_names[i], len);
        memcpy(name + len, "_cnt", 5);
        keys[k] = enif_make_atom(env, name);
        vals[k++] = enif_make_uint64(env, s.calls[i]);
    }
    /* A key added without raising STAT_KEYS is not written past the arrays, and fails loudly. */
#define PUT(key, term)                                                                             \
    do {                                                                                           \
        if (k < STAT_KEYS) {                                                                       \
            keys[k] = enif_make_atom(env, key);                                                    \
            vals[k] = (term);                                                                      \
        }                                                                                          \
        k++;                                                                                       \
    } while (0)
#define PUT_U(key, v) PUT(key, enif_make_uint64(env, (uint64_t)(v)))
    PUT_U("allocated_bytes", mi.arena + mi.hblkhd);
    PUT_U("used_bytes", mi.uordblks + mi.hblkhd);
    PUT_U("free_bytes", mi.fordblks);
    PUT_U("mmap_chunks", mi.hblks);
    PUT_U("mmap_bytes", mi.hblkhd);
    PUT("preloaded", mt_interposing() ? atom_true : atom_false);
    PUT("recording", active ? atom_true : atom_false);
    PUT("allocator", make_string(env, mt_real.name));
    PUT_U("slots", active ? mt_table_slots() : 0);
    PUT_U("slots_max", active ? mt_table_slots_max() : 0);
    PUT_U("grown", active ? mt_table_grown() : 0);
    PUT_U("lanes", active ? mt_table_lanes() : 0);
    PUT_U("records", active ? mt_table_count() : 0);
    PUT_U("live_bytes", live.bytes);
    PUT_U("live_blocks", mt_blocks((int64_t)live.units));
    PUT("estimated", active && mt_config.sample ? atom_true : atom_false);
    PUT_U("sample_bytes", active ? mt_config.sample : 0);
    PUT_U("sampled", s.sampled);
    PUT_U("clear_bytes", active ? mt_config.clear : 0);
    PUT_U("dropped", s.dropped);
    PUT_U("depth", mt_config.depth);
    /* For stats/0's erlang_frames, which the Elixir side derives and removes; looked at only in
     * the mode that follows the map. */
    PUT("perf_map",
        mt_config.unwind == MT_UNWIND_ERLANG && mt_beam_perf_map() ? atom_true : atom_false);
    PUT("unwind", enif_make_atom(env, mt_config.unwind == MT_UNWIND_FP       ? "fp"
                                      : mt_config.unwind == MT_UNWIND_ERLANG ? "erlang"
                                                                             : "libunwind"));
    PUT_U("stacks", active ? mt_stack_count() : 0);
    PUT_U("stack_bytes", active ? mt_stack_bytes() : 0);
    PUT_U("stacks_dropped", s.stacks_dropped);
    PUT_U("untraced", s.untraced);
    PUT_U("untracked_frees", s.untracked_frees);
    PUT_U("stale_replaced", s.stale_replaced);
    PUT_U("missed_frees", s.missed_frees);
    PUT_U("own_maps_unremembered", mt_mem_forgotten());
    PUT_U("resets", __atomic_load_n(&resets, __ATOMIC_RELAXED));
    struct mt_attach_state a;
    mt_attach_state(&a);
    PUT("attach", enif_make_atom(env, a.attached         ? "attached"
                                      : a.attaches       ? "detached"
                                      : mt_interposing() ? "preloaded"
                                                         : "none"));
    PUT("attached_at", a.attaches ? enif_make_uint64(env, a.realtime_s) : atom_nil);
    PUT_U("attaches", a.attaches);
    PUT_U("attach_words", a.words);
    PUT_U("attach_objects", a.objects);
    PUT_U("attach_skipped", a.skipped);
    PUT_U("attach_copies", a.copies);
    PUT_U("attach_pause_us", a.pause_ns / 1000);
    PUT_U("nif_api_words", a.nif_words);
    PUT("nif_api_hooked", a.nif_api ? atom_true : atom_false);
    struct mt_nif_state ns;
    mt_nif_hooks_state(&ns);
    PUT_U("resource_types_wrapped", ns.types_wrapped);
    PUT_U("resource_types_unwrapped", ns.types_unwrapped);
    PUT_U("resources_unseen", ns.resources_unseen);
    PUT_U("resource_header_bytes", ns.resource_header);
#undef PUT_U
#undef PUT
    mt_guard_release();
    if (k > STAT_KEYS) return enif_raise_exception(env, enif_make_atom(env, "stat_keys_overflow"));
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, vals, k, &map);
    return map;
}

static ERL_NIF_TERM reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    if (!mt_active()) return atom_not_preloaded;
    __atomic_store_n(&reset_ns, mt_now_ns(CLOCK_MONOTONIC_COARSE), __ATOMIC_RELAXED);
    __atomic_fetch_add(&resets, 1, __ATOMIC_RELAXED);
    return enif_make_uint64(env, mt_table_clear());
}

/* heaps_learn(limit, port_limit, [known, known]): teaches beam_heaps.h where the VM's process and
 * port tables lie, by their limits, and its Process layout, from the caller (running this NIF on
 * a normal scheduler) and two waiting processes, each known as {pid, heap_block, heap_used,
 * recent, stack, old_block, old_used, :normal | :high} (process_info/2's words). :ok, or
 * {:error, reason}. */
static ERL_NIF_TERM heaps_learn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_beam_known known[2];
    ErlNifUInt64 limit, port_limit;
    ErlNifPid self;
    ERL_NIF_TERM list = argv[2], head;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &limit) || limit > UINT32_MAX ||
        !enif_get_uint64(env, argv[1], &port_limit) || port_limit > UINT32_MAX ||
        !enif_self(env, &self))
        return enif_make_badarg(env);
    for (size_t j = 0; j < 2; j++) {
        const ERL_NIF_TERM *t;
        int arity;
        ErlNifPid pid;
        ErlNifUInt64 v[6];
        if (!enif_get_list_cell(env, list, &head, &list) ||
            !enif_get_tuple(env, head, &arity, &t) || arity != 8 ||
            !enif_get_local_pid(env, t[0], &pid))
            return enif_make_badarg(env);
        for (size_t i = 0; i < 6; i++)
            if (!enif_get_uint64(env, t[1 + i], &v[i])) return enif_make_badarg(env);
        unsigned prio = enif_is_identical(t[7], enif_make_atom(env, "normal")) ? MT_BEAM_PRIO_NORMAL
                        : enif_is_identical(t[7], enif_make_atom(env, "high")) ? MT_BEAM_PRIO_HIGH
                                                                               : 0;
        if (!prio) return enif_make_badarg(env);
        known[j] =
            (struct mt_beam_known){(uint64_t)pid.pid, v[0], v[1], v[2], v[3], v[4], v[5], prio};
    }
    if (!enif_is_empty_list(env, list)) return enif_make_badarg(env);
    const char *reason;
    if (mt_beam_heaps_learn(limit, port_limit, (uint64_t)self.pid, known, &reason) == 0)
        return atom_ok;
    ERL_NIF_TERM pair[2] = {atom_error, make_string(env, reason)};
    return enif_make_tuple_from_array(env, pair, 2);
}

static ERL_NIF_TERM attach_result(ErlNifEnv *env, enum mt_attach_error e)
{
    if (e == MT_ATTACH_OK) return atom_ok;
    ERL_NIF_TERM pair[2] = {atom_error, make_string(env, mt_attach_reason(e))};
    return enif_make_tuple_from_array(env, pair, 2);
}

/* attach(["MTRACE_NAME=value", ...]): the options as variables (lib/mtrace/options.ex). */
static ERL_NIF_TERM attach_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    enum { MAX_VARS = 16 };
    static char text[4096];
    const char *vars[MAX_VARS + 1] = {0};
    ERL_NIF_TERM list = argv[0], head;
    ErlNifBinary b;
    size_t used = 0, n = 0;
    (void)argc;
    while (enif_get_list_cell(env, list, &head, &list)) {
        if (n == MAX_VARS || !enif_inspect_binary(env, head, &b) || used + b.size + 1 > sizeof text)
            return enif_make_badarg(env);
        memcpy(text + used, b.data, b.size);
        text[used + b.size] = '\0';
        vars[n++] = text + used;
        used += b.size + 1;
    }
    if (!enif_is_empty_list(env, list)) return enif_make_badarg(env);
    mt_guard_hold();
    enum mt_attach_error e = mt_attach(vars);
    mt_guard_release();
    return attach_result(env, e);
}

static ERL_NIF_TERM detach_nif(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    mt_guard_hold();
    enum mt_attach_error e = mt_detach();
    mt_guard_release();
    return attach_result(env, e);
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    atom_true = enif_make_atom(env, "true");
    atom_false = enif_make_atom(env, "false");
    atom_nil = enif_make_atom(env, "nil");
    atom_not_preloaded = enif_make_atom(env, "not_preloaded");
    atom_error = enif_make_atom(env, "error");
    atom_sampling = enif_make_atom(env, "sampling");
    atom_dropped = enif_make_atom(env, "dropped");
    atom_reset = enif_make_atom(env, "reset");
    atom_enomem = enif_make_atom(env, "enomem");
    atom_maybe = enif_make_atom(env, "maybe");
    atom_erlang = enif_make_atom(env, "erlang");
    atom_attached = enif_make_atom(env, "attached");
    atom_ok = enif_make_atom(env, "ok");
    ErlNifSysInfo sys;
    enif_system_info(&sys, sizeof sys);
    mt_beam_vm_set(sys.erts_version);
    return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return load(env, priv, info);
}

/* scrub(binary, float) -> ok: the calling scheduler's stack below this NIF zeroed (reach.h), so
 * that the frames it lays there as it goes back to sleep do not keep what a NIF that ran on it
 * left; and where its float registers lie noted (beam_regs.h), by the float its caller computed
 * just before. The binary, which its caller built on this scheduler just before
 * (src/mtrace_node.erl), is not read. */
static ERL_NIF_TERM scrub(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    double f0;
    if (!enif_is_binary(env, argv[0]) || !enif_get_double(env, argv[1], &f0))
        return enif_make_badarg(env);
    mt_beam_regs_note((const uint64_t *)argv, (unsigned)argc, f0);
    mt_reach_scrub();
    return atom_ok;
}

/* scrub_dirty_cpu(round, n), scrub_dirty_io(round, n) -> ok: the calling dirty scheduler's stack
 * zeroed as scrub's, once n calls of the same round are in at once, or after 100 ms. No process
 * can be bound to a dirty scheduler, but calls that wait for one another each hold one of their
 * own: n calls, n being how many schedulers there are of the kind, reach every one that is free.
 * A later round takes the gate over; the calls of the earlier one go on. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t in;
    uint64_t round;
    unsigned calls;
};

static struct gate cpu_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
static struct gate io_gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static ERL_NIF_TERM scrub_at(ErlNifEnv *env, const ERL_NIF_TERM argv[], struct gate *g)
{
    ErlNifUInt64 round;
    unsigned n;
    if (!enif_get_uint64(env, argv[0], &round) || !enif_get_uint(env, argv[1], &n))
        return enif_make_badarg(env);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 100000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&g->lock);
    if (g->round != round) {
        g->round = round;
        g->calls = 0;
    }
    g->calls++;
    pthread_cond_broadcast(&g->in);
    while (g->round == round && g->calls < n &&
           pthread_cond_timedwait(&g->in, &g->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&g->lock);
    mt_reach_scrub();
    return atom_ok;
}

static ERL_NIF_TERM scrub_dirty_cpu(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return scrub_at(env, argv, &cpu_gate);
}

static ERL_NIF_TERM scrub_dirty_io(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return scrub_at(env, argv, &io_gate);
}

/* A reader's frames hold the addresses of blocks (its snapshot's, its mark's): once it has made
 * its answer, the dirty scheduler's stack below it is zeroed, so that a mark made from another
 * dirty scheduler does not find them there, in the frames this one sleeps in. */
#define SCRUBBED(reader)                                                                           \
    static ERL_NIF_TERM reader##_scrubbed(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])     \
    {                                                                                              \
        ERL_NIF_TERM result = reader(env, argc, argv);                                             \
        mt_reach_scrub();                                                                          \
        return result;                                                                             \
    }
SCRUBBED(olds)
SCRUBBED(sites)
SCRUBBED(leaks)
SCRUBBED(heap_census)
SCRUBBED(why)
SCRUBBED(whys)

static ErlNifFunc funcs[] = {
    {"olds_nif", 3, olds_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"sites_nif", 2, sites_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"leaks_nif", 2, leaks_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"frames_nif", 2, frames, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stacks_matching_nif", 2, stacks_matching, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stats_nif", 0, stats, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"reset_nif", 0, reset, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"heap_nif", 0, heap_census_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"attach_nif", 1, attach_nif, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"detach_nif", 0, detach_nif, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"why_nif", 1, why_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"whys_nif", 1, whys_scrubbed, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"heaps_learn_nif", 3, heaps_learn, 0},
    {"scrub_nif", 2, scrub, 0},
    {"scrub_dirty_cpu_nif", 2, scrub_dirty_cpu, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"scrub_dirty_io_nif", 2, scrub_dirty_io, ERL_NIF_DIRTY_JOB_IO_BOUND},
};

ERL_NIF_INIT(mtrace_nif, funcs, load, NULL, upgrade, NULL)
