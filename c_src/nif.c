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
#include "attach.h"
#include "config.h"
#include "hooks.h"
#include "reach.h"
#include "recorder.h"
#include "snapshot.h"
#include "stack.h"
#include "symbols.h"
#include "table.h"

#pragma weak enif_alloc
#pragma weak enif_free
#pragma weak enif_get_list_cell
#pragma weak enif_get_list_length
#pragma weak enif_get_tuple
#pragma weak enif_get_ulong
#pragma weak enif_inspect_binary
#pragma weak enif_is_empty_list
#pragma weak enif_is_identical
#pragma weak enif_make_atom
#pragma weak enif_make_badarg
#pragma weak enif_make_double
#pragma weak enif_make_list_from_array
#pragma weak enif_make_map_from_arrays
#pragma weak enif_make_new_binary
#pragma weak enif_make_tuple_from_array
#pragma weak enif_make_ulong
#pragma weak enif_raise_exception

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

/* Which records a reader wants: of an age in [min_age_ns, max_age_ns], allocated after
 * since_ns, at least min_size bytes, and with a stack through a library whose path contains
 * `library`, a frame whose (demangled) function name contains `function`, and an Erlang frame
 * whose name ("'Mod':fun/arity", as the perf map writes it) starts with `erlang` (when that ends
 * in a digit, the arity: the whole name), when given. The answer per stack is kept in memo (0:
 * not known yet). */
struct filter {
    uint64_t min_age_ns, max_age_ns, since_ns, min_size;
    char library[1024], function[1024], erlang[1024];
    int has_library, has_function, has_erlang;
    int8_t *memo;
    size_t ids;
};

static int erlang_matches(const struct filter *f, const struct mt_frame_info *fr)
{
    size_t n = strlen(f->erlang);
    if (!fr->erlang || strncmp(fr->function, f->erlang, n) != 0) return 0;
    return !(f->erlang[n - 1] >= '0' && f->erlang[n - 1] <= '9') || fr->function[n] == '\0';
}

static int stack_matches(struct filter *f, uint32_t id)
{
    if (id >= f->ids) return 0;
    if (!f->memo[id]) {
        const uintptr_t *ips;
        int n = mt_stack_get(id, &ips), library = !f->has_library, function = !f->has_function,
            erlang = !f->has_erlang;
        struct mt_frame_info fr[MT_INLINE_MAX];
        for (int i = 0; i < n && !(library && function && erlang); i++) {
            /* A library is a path: the symbol tables name it without the cost of DWARF. Inlined
             * functions' names are DWARF's. */
            int k = 1;
            if (f->has_function)
                k = mt_symbolize_frames(id, ips[i], 1, fr, MT_INLINE_MAX);
            else
                fr[0] = mt_symbolize_function(id, ips[i], 0);
            for (int j = 0; j < k; j++) {
                library = library || (fr[j].path && strstr(fr[j].path, f->library));
                function = function ||
                           (!fr[j].erlang && fr[j].function && strstr(fr[j].function, f->function));
                erlang = erlang || erlang_matches(f, &fr[j]);
            }
        }
        f->memo[id] = library && function && erlang ? 1 : -1;
    }
    return f->memo[id] > 0;
}

static int wanted(struct filter *f, const struct mt_snapshot *s, const struct mt_record *r)
{
    uint64_t age = mt_snapshot_age(s, r);
    return age >= f->min_age_ns && age <= f->max_age_ns && r->time_ns > f->since_ns &&
           r->size >= f->min_size && (!f->memo || stack_matches(f, r->stack));
}

/* A string option of the filter, or nil; 0, or -1 for badarg. */
static int get_text(ErlNifEnv *env, ERL_NIF_TERM term, char *out, size_t cap, int *has)
{
    ErlNifBinary bin;
    *has = !enif_is_identical(term, atom_nil);
    if (!*has) return 0;
    if (!enif_inspect_binary(env, term, &bin) || bin.size >= cap || memchr(bin.data, 0, bin.size))
        return -1;
    memcpy(out, bin.data, bin.size);
    out[bin.size] = '\0';
    return 0;
}

/* Reads the filter the Elixir side built once for every reader (Mtrace.Options):
 * {min_age_ns, max_age_ns, since_ns, min_size, library | nil, function | nil, erlang | nil}. With
 * a library, a function or an Erlang name, memo is allocated (enif_alloc) and must be freed by
 * the caller. Returns 0, or -1 for badarg. */
static int get_filter(ErlNifEnv *env, ERL_NIF_TERM term, struct filter *f)
{
    const ERL_NIF_TERM *t;
    int arity;
    ErlNifUInt64 v[4];
    f->memo = NULL;
    if (!enif_get_tuple(env, term, &arity, &t) || arity != 7) return -1;
    for (int i = 0; i < 4; i++)
        if (!enif_get_uint64(env, t[i], &v[i])) return -1;
    f->min_age_ns = v[0];
    f->max_age_ns = v[1];
    f->since_ns = v[2];
    f->min_size = v[3];
    if (get_text(env, t[4], f->library, sizeof f->library, &f->has_library) != 0 ||
        get_text(env, t[5], f->function, sizeof f->function, &f->has_function) != 0 ||
        get_text(env, t[6], f->erlang, sizeof f->erlang, &f->has_erlang) != 0 ||
        (f->has_erlang && !f->erlang[0]))
        return -1;
    if (!f->has_library && !f->has_function && !f->has_erlang) return 0;
    f->ids = mt_stack_count() + 1;
    f->memo = enif_alloc(f->ids);
    if (!f->memo) return -1;
    memset(f->memo, 0, f->ids);
    return 0;
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
    struct filter f;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &want) ||
        !(enif_is_identical(argv[1], atom_true) || enif_is_identical(argv[1], atom_false)) ||
        get_filter(env, argv[2], &f) != 0)
        return enif_make_badarg(env);
    if (!mt_active()) {
        enif_free(f.memo);
        return atom_not_preloaded;
    }
    int demangle = enif_is_identical(argv[1], atom_true);

    mt_guard_hold();
    struct mt_snapshot snap;
    if (mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        enif_free(f.memo);
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    struct oldest o = {NULL, 0, want < snap.n ? (size_t)want : snap.n};
    o.r = o.cap ? enif_alloc(o.cap * sizeof *o.r) : NULL;
    if (o.cap && !o.r) o.cap = 0;
    for (size_t i = 0; i < snap.n; i++)
        if (wanted(&f, &snap, &snap.rec[i])) keep_oldest(&o, &snap.rec[i]);
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
    enif_free(f.memo);
    mt_snapshot_drop(&snap);
    mt_guard_release();
    return list;
}

struct tally {
    uint64_t bytes[2], blocks[2], oldest_ns; /* [0]: allocated by split_ns, [1]: after it */
};

/* sites(filter, split_ns) -> {now_ns, [{stack_id, bytes_before, blocks_before, bytes_after,
 * blocks_after, oldest_age_ns}]}: when the snapshot was taken, and the live records that pass
 * the filter, summed by stack, those allocated at or before split_ns (CLOCK_MONOTONIC_COARSE)
 * apart from those after it (a mark, diff/2). */
static ERL_NIF_TERM sites(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct filter f;
    ErlNifUInt64 split;
    (void)argc;
    if (get_filter(env, argv[0], &f) != 0 || !enif_get_uint64(env, argv[1], &split))
        return enif_make_badarg(env);
    if (!mt_active()) {
        enif_free(f.memo);
        return atom_not_preloaded;
    }
    mt_guard_hold();
    struct mt_snapshot snap;
    size_t ids = mt_stack_count() + 1;
    struct tally *t = enif_alloc(ids * sizeof *t);
    if (!t || mt_snapshot_take(&snap, MT_SNAPSHOT_ANY_ORDER) != 0) {
        enif_free(t);
        enif_free(f.memo);
        mt_guard_release();
        return enif_raise_exception(env, atom_enomem);
    }
    memset(t, 0, ids * sizeof *t);
    size_t n = 0;
    for (size_t i = 0; i < snap.n; i++) {
        const struct mt_record *r = &snap.rec[i];
        if (r->stack >= ids || !wanted(&f, &snap, r)) continue;
        struct tally *x = &t[r->stack];
        int after = r->time_ns > split;
        n += !x->blocks[0] && !x->blocks[1];
        x->bytes[after] += r->size;
        x->blocks[after]++;
        uint64_t age = mt_snapshot_age(&snap, r);
        if (age > x->oldest_ns) x->oldest_ns = age;
    }
    ERL_NIF_TERM *items = enif_alloc((n ? n : 1) * sizeof *items);
    size_t k = 0;
    for (size_t id = 0; items && id < ids; id++) {
        const struct tally *x = &t[id];
        if (!x->blocks[0] && !x->blocks[1]) continue;
        ERL_NIF_TERM e[6] = {
            enif_make_uint64(env, id),           enif_make_uint64(env, x->bytes[0]),
            enif_make_uint64(env, x->blocks[0]), enif_make_uint64(env, x->bytes[1]),
            enif_make_uint64(env, x->blocks[1]), enif_make_uint64(env, x->oldest_ns),
        };
        items[k++] = enif_make_tuple_from_array(env, e, 6);
    }
    ERL_NIF_TERM pair[2] = {enif_make_uint64(env, snap.now_ns),
                            enif_make_list_from_array(env, items, (unsigned)k)};
    enif_free(items);
    enif_free(t);
    enif_free(f.memo);
    mt_snapshot_drop(&snap);
    mt_guard_release();
    return enif_make_tuple_from_array(env, pair, 2);
}

/* Why no block can be called lost now, or 0: every live block must have a record. */
static ERL_NIF_TERM incomplete(ErlNifEnv *env)
{
    struct mt_stats st;
    mt_stats_read(&st);
    if (mt_config.sample) return atom_sampling;
    if (st.dropped) {
        ERL_NIF_TERM pair[2] = {atom_dropped, enif_make_uint64(env, st.dropped)};
        return enif_make_tuple_from_array(env, pair, 2);
    }
    if (reset_ns) return atom_reset;
    return mt_attach_covered_since() ? atom_attached : 0;
}

/* leaks(min_age_ns) -> {[{address, size, age_ns, stack_id, direct}], info} */
static ERL_NIF_TERM leaks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct filter f;
    (void)argc;
    if (get_filter(env, argv[0], &f) != 0) return enif_make_badarg(env);
    if (!mt_active()) {
        enif_free(f.memo);
        return atom_not_preloaded;
    }
    ERL_NIF_TERM why = incomplete(env);
    if (why) {
        enif_free(f.memo);
        ERL_NIF_TERM pair[2] = {atom_error, why};
        return enif_make_tuple_from_array(env, pair, 2);
    }
    mt_guard_hold();
    struct mt_reach r;
    if (mt_reach_run(&r, 0) != 0) {
        mt_guard_release();
        enif_free(f.memo);
        return enif_raise_exception(env, atom_enomem);
    }
    /* The filter is applied after the mark, which reads every block: a block outside the filter
     * may be the only way to one inside it. Symbolizing for it runs with the threads going. */
    size_t lost = 0;
    uint64_t kept_bytes = 0, kept_blocks = 0;
    for (size_t i = 0; i < r.snap.heap; i++) {
        if (r.state[i] == MT_REACH_REACHABLE) {
            kept_bytes += r.snap.rec[i].size;
            kept_blocks++;
        } else if (wanted(&f, &r.snap, &r.snap.rec[i])) {
            lost++;
        }
    }
    /* The second pass asks the filter again: its answer per stack is memoized. */
    ERL_NIF_TERM *items = enif_alloc((lost ? lost : 1) * sizeof *items);
    size_t k = 0;
    for (size_t i = 0; items && i < r.snap.heap; i++) {
        const struct mt_record *b = &r.snap.rec[i];
        if (r.state[i] == MT_REACH_REACHABLE || !wanted(&f, &r.snap, b)) continue;
        ERL_NIF_TERM t[5] = {
            enif_make_uint64(env, b->addr),
            enif_make_uint64(env, b->size),
            enif_make_uint64(env, mt_snapshot_age(&r.snap, b)),
            enif_make_uint64(env, b->stack),
            r.state[i] == MT_REACH_DIRECT ? atom_true : atom_false,
        };
        items[k++] = enif_make_tuple_from_array(env, t, 5);
    }
    ERL_NIF_TERM keys[] = {
        enif_make_atom(env, "threads"),         enif_make_atom(env, "threads_stopped"),
        enif_make_atom(env, "pause_ns"),        enif_make_atom(env, "root_bytes"),
        enif_make_atom(env, "block_bytes"),     enif_make_atom(env, "unreadable_bytes"),
        enif_make_atom(env, "reachable_bytes"), enif_make_atom(env, "reachable_blocks"),
        enif_make_atom(env, "live_blocks"),
    };
    ERL_NIF_TERM vals[] = {
        enif_make_uint64(env, r.threads),     enif_make_uint64(env, r.stopped),
        enif_make_uint64(env, r.pause_ns),    enif_make_uint64(env, r.root_bytes),
        enif_make_uint64(env, r.block_bytes), enif_make_uint64(env, r.unreadable_bytes),
        enif_make_uint64(env, kept_bytes),    enif_make_uint64(env, kept_blocks),
        enif_make_uint64(env, r.snap.heap),
    };
    ERL_NIF_TERM info, pair[2];
    enif_make_map_from_arrays(env, keys, vals, sizeof keys / sizeof keys[0], &info);
    pair[0] = enif_make_list_from_array(env, items, (unsigned)k);
    pair[1] = info;
    enif_free(items);
    enif_free(f.memo);
    mt_reach_drop(&r);
    mt_guard_release();
    if (!items) return enif_raise_exception(env, atom_enomem);
    return enif_make_tuple_from_array(env, pair, 2);
}

/* frames(stack_ids, demangle) -> one list per id of {address, path | nil, name | nil,
 * offset | nil, file | nil, line | nil, inlined, unloaded, erlang}, a tuple per function (inlined
 * ones first, with their caller's address); unloaded is false, true, or maybe (symbols.h's
 * REPLACED, with path nil); erlang is true for JIT code named by the perf map (path nil). */
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
    while (enif_get_list_cell(env, list, &head, &list)) {
        ErlNifUInt64 id;
        if (!enif_get_uint64(env, head, &id) || id > mt_stack_count()) break;
        const uintptr_t *ips;
        int depth = id ? mt_stack_get((uint32_t)id, &ips) : 0;
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
    ERL_NIF_TERM result = enif_is_empty_list(env, list) ? enif_make_list_from_array(env, out, n)
                                                        : enif_make_badarg(env);
    enif_free(out);
    mt_guard_release();
    return result;
}

#define STAT_KEYS (MT_KINDS + 34)

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
    /* For stats/0's erlang_frames, which the Elixir side derives and removes; looked at only in
     * the mode that follows the map. */
    PUT("perf_map",
        mt_config.unwind == MT_UNWIND_ERLANG && mt_stack_perf_map() ? atom_true : atom_false);
    PUT("unwind", enif_make_atom(env, mt_config.unwind == MT_UNWIND_FP       ? "fp"
                                      : mt_config.unwind == MT_UNWIND_ERLANG ? "erlang"
                                                                             : "libunwind"));
    PUT_U("stacks", active ? mt_stack_count() : 0);
    PUT_U("stack_bytes", active ? mt_stack_bytes() : 0);
    PUT_U("stacks_dropped", s.stacks_dropped);
    PUT_U("untraced", s.untraced);
    PUT_U("untracked_frees", s.untracked_frees);
    PUT_U("stale_replaced", s.stale_replaced);
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
    PUT_U("attach_pause_us", a.pause_ns / 1000);
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
    return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return load(env, priv, info);
}

static ErlNifFunc funcs[] = {
    {"olds_nif", 3, olds, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"sites_nif", 2, sites, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"leaks_nif", 1, leaks, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"frames_nif", 2, frames, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"stats_nif", 0, stats, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"reset_nif", 0, reset, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"attach_nif", 1, attach_nif, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"detach_nif", 0, detach_nif, ERL_NIF_DIRTY_JOB_CPU_BOUND},
};

ERL_NIF_INIT(Elixir.Mtrace.Nif, funcs, load, NULL, upgrade, NULL)
