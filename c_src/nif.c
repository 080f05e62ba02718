/* nif.c: the Erlang NIF half of mtrace.so, behind the Elixir module Mtrace.
 *
 * The same file is preloaded into every process of a release (sh, epmd, erl_child_setup), where
 * no enif_* function exists. The references below are weak so that loading succeeds there even
 * with LD_BIND_NOW=1; they are only ever called from inside the BEAM. The link uses -z defs, so
 * a reference missing from this list (enif_make_uint64 is a macro for enif_make_ulong) fails the
 * build instead of the preload.
 *
 * Every NIF holds the recorder's guard while it runs, so its own allocations (and those of the
 * symbolizer) are not traced. Records are copied out of the table first; symbolization runs after,
 * with no slot held, so allocating threads never wait for it.
 */
#define _GNU_SOURCE
#include <erl_nif.h>
#include <malloc.h>
#include <string.h>
#include <time.h>

#include "account.h"
#include "config.h"
#include "recorder.h"
#include "stack.h"
#include "symbols.h"
#include "table.h"

#pragma weak enif_alloc
#pragma weak enif_free
#pragma weak enif_get_ulong
#pragma weak enif_is_identical
#pragma weak enif_make_atom
#pragma weak enif_make_badarg
#pragma weak enif_make_double
#pragma weak enif_make_list_from_array
#pragma weak enif_make_map_from_arrays
#pragma weak enif_make_new_binary
#pragma weak enif_make_tuple_from_array
#pragma weak enif_make_ulong

static ERL_NIF_TERM atom_true, atom_false, atom_nil, atom_not_preloaded;

static ERL_NIF_TERM make_string(ErlNifEnv *env, const char *s)
{
    ERL_NIF_TERM t;
    size_t n = strlen(s);
    memcpy(enif_make_new_binary(env, n, &t), s, n);
    return t;
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

static void keep_oldest(const struct mt_record *rec, void *arg)
{
    struct oldest *o = arg;
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
        struct mt_symbol sym;
        if (mt_symbolize(ips[i], demangle, &sym) != 0) {
            frames[i] = atom_nil;
            continue;
        }
        ERL_NIF_TERM pair[2] = {make_string(env, sym.path),
                                sym.name ? make_string(env, sym.name) : atom_nil};
        frames[i] = enif_make_tuple_from_array(env, pair, 2);
    }
    return enif_make_list_from_array(env, frames, (unsigned)n);
}

static ERL_NIF_TERM olds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 want;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &want) ||
        !(enif_is_identical(argv[1], atom_true) || enif_is_identical(argv[1], atom_false)))
        return enif_make_badarg(env);
    if (!mt_active()) return atom_not_preloaded;
    int demangle = enif_is_identical(argv[1], atom_true);

    mt_guard_hold();
    struct oldest o = {NULL, 0, want < mt_table_slots() ? (size_t)want : mt_table_slots()};
    o.r = o.cap ? enif_alloc(o.cap * sizeof *o.r) : NULL;
    if (o.cap && !o.r) o.cap = 0;
    mt_table_each(keep_oldest, &o);
    /* Heap sort in place: each step moves the youngest left to the end, so the array ends oldest
     * first. */
    for (size_t n = o.n; n > 1; n--) {
        struct mt_record t = o.r[0];
        o.r[0] = o.r[n - 1];
        o.r[n - 1] = t;
        sift_down(o.r, n - 1, 0);
    }

    uint64_t now = mt_now_ns(CLOCK_MONOTONIC_COARSE);
    ERL_NIF_TERM *items = enif_alloc((o.n ? o.n : 1) * sizeof *items);
    for (size_t i = 0; i < o.n; i++) {
        const struct mt_record *r = &o.r[i];
        uint64_t t0 = mt_now_ns(CLOCK_MONOTONIC);
        ERL_NIF_TERM stack = make_stack(env, r->stack, demangle);
        uint64_t spent = mt_now_ns(CLOCK_MONOTONIC) - t0;
        uint64_t age = now > r->time_ns ? now - r->time_ns : 0;
        ERL_NIF_TERM tuple[5] = {
            enif_make_double(env, (double)age / 1e9),
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
    mt_guard_release();
    return list;
}

#define STAT_KEYS (MT_KINDS + 25)

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
#define PUT(key, term)                                                                             \
    do {                                                                                           \
        keys[k] = enif_make_atom(env, key);                                                        \
        vals[k++] = (term);                                                                        \
    } while (0)
#define PUT_U(key, v) PUT(key, enif_make_uint64(env, (uint64_t)(v)))
    PUT_U("allocated_bytes", mi.arena + mi.hblkhd);
    PUT_U("used_bytes", mi.uordblks + mi.hblkhd);
    PUT_U("free_bytes", mi.fordblks);
    PUT_U("mmap_chunks", mi.hblks);
    PUT_U("mmap_bytes", mi.hblkhd);
    PUT("preloaded", active ? atom_true : atom_false);
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
    PUT_U("dropped", s.dropped);
    PUT_U("depth", mt_config.depth);
    PUT("unwind", enif_make_atom(env, mt_config.unwind == MT_UNWIND_FP ? "fp" : "libunwind"));
    PUT_U("stacks", active ? mt_stack_count() : 0);
    PUT_U("stack_bytes", active ? mt_stack_bytes() : 0);
    PUT_U("stacks_dropped", s.stacks_dropped);
    PUT_U("untraced", s.untraced);
    PUT_U("untracked_frees", s.untracked_frees);
    PUT_U("stale_replaced", s.stale_replaced);
#undef PUT_U
#undef PUT
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, vals, k, &map);
    mt_guard_release();
    return map;
}

static ERL_NIF_TERM reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    if (!mt_active()) return atom_not_preloaded;
    return enif_make_uint64(env, mt_table_clear());
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    atom_true = enif_make_atom(env, "true");
    atom_false = enif_make_atom(env, "false");
    atom_nil = enif_make_atom(env, "nil");
    atom_not_preloaded = enif_make_atom(env, "not_preloaded");
    return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return load(env, priv, info);
}

static ErlNifFunc funcs[] = {
    {"olds_nif", 2, olds, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stats_nif", 0, stats, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"reset_nif", 0, reset, ERL_NIF_DIRTY_JOB_CPU_BOUND},
};

ERL_NIF_INIT(Elixir.Mtrace.Nif, funcs, load, NULL, upgrade, NULL)
