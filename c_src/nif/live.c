/* live.c: the NIFs that read the live heap (readers.h): olds, sites, stacks_matching, frames.
 * Records are copied out of the table first; symbolization runs after, with no slot held, so
 * allocating threads never wait for it.
 */
#define _GNU_SOURCE
#include <string.h>

#include "nif/filter.h"
#include "nif/readers.h"
#include "nif/terms.h"
#include "record/account.h"
#include "record/recorder.h"
#include "symbols/symbols.h"

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
            ERL_NIF_TERM pair[2] = {mt_atom_erlang, mt_nif_string(env, outer.function)};
            frames[i] = enif_make_tuple_from_array(env, pair, 2);
            continue;
        }
        if (!outer.path || outer.unloaded != MT_FRAME_LOADED) {
            frames[i] = mt_atom_nil;
            continue;
        }
        ERL_NIF_TERM pair[2] = {mt_nif_string(env, outer.path),
                                outer.function ? mt_nif_string(env, outer.function) : mt_atom_nil};
        frames[i] = enif_make_tuple_from_array(env, pair, 2);
    }
    return enif_make_list_from_array(env, frames, (unsigned)n);
}

/* olds(n, demangle, filter) */
ERL_NIF_TERM mt_nif_olds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 want;
    struct mt_filter f;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &want) ||
        !(enif_is_identical(argv[1], mt_atom_true) || enif_is_identical(argv[1], mt_atom_false)) ||
        mt_filter_get(env, argv[2], &f) != 0)
        return enif_make_badarg(env);
    if (!mt_active()) {
        mt_filter_drop(&f);
        return mt_atom_not_preloaded;
    }
    int demangle = enif_is_identical(argv[1], mt_atom_true);

    mt_guard_hold();
    struct mt_snapshot snap;
    if (mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        mt_filter_drop(&f);
        mt_guard_release();
        return enif_raise_exception(env, mt_atom_enomem);
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
ERL_NIF_TERM mt_nif_sites(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_filter f;
    ErlNifUInt64 split;
    (void)argc;
    if (mt_filter_get(env, argv[0], &f) != 0 || !enif_get_uint64(env, argv[1], &split))
        return enif_make_badarg(env);
    if (!mt_active()) {
        mt_filter_drop(&f);
        return mt_atom_not_preloaded;
    }
    mt_guard_hold();
    struct mt_snapshot snap;
    size_t ids = mt_stack_count() + 1;
    struct tally *t = enif_alloc(ids * sizeof *t);
    if (!t || mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        enif_free(t);
        mt_filter_drop(&f);
        mt_guard_release();
        return enif_raise_exception(env, mt_atom_enomem);
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

/* stacks_matching(filter, ids) -> the ids (in their order) whose stacks pass the filter's library,
 * function and erlang: diff/2's test of the stacks its mark holds and no record does now. */
ERL_NIF_TERM mt_nif_stacks_matching(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
        return enif_raise_exception(env, mt_atom_enomem);
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
ERL_NIF_TERM mt_nif_frames(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ERL_NIF_TERM list = argv[0], head, *out;
    unsigned n = 0, len;
    (void)argc;
    if (!enif_get_list_length(env, list, &len) ||
        !(enif_is_identical(argv[1], mt_atom_true) || enif_is_identical(argv[1], mt_atom_false)))
        return enif_make_badarg(env);
    int demangle = enif_is_identical(argv[1], mt_atom_true);
    mt_guard_hold();
    if (!(out = enif_alloc((len ? len : 1) * sizeof *out))) {
        mt_guard_release();
        return enif_raise_exception(env, mt_atom_enomem);
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
                    x->path ? mt_nif_string(env, x->path) : mt_atom_nil,
                    x->function ? mt_nif_string(env, x->function) : mt_atom_nil,
                    x->path ? enif_make_uint64(env, x->offset) : mt_atom_nil,
                    x->file ? mt_nif_string(env, x->file) : mt_atom_nil,
                    x->file ? enif_make_uint64(env, (uint64_t)x->line) : mt_atom_nil,
                    x->inlined ? mt_atom_true : mt_atom_false,
                    x->unloaded == MT_FRAME_LOADED     ? mt_atom_false
                    : x->unloaded == MT_FRAME_UNLOADED ? mt_atom_true
                                                       : mt_atom_maybe,
                    x->erlang ? mt_atom_true : mt_atom_false,
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
