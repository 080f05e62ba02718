/* state.c: the NIFs of the recording's state (readers.h): stats, reset, heap (glibc's heap's
 * census), heaps_learn, attach, detach.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <string.h>

#include "attach/attach.h"
#include "base/mem.h"
#include "mark/roots.h"
#include "nif/nif_hooks.h"
#include "nif/readers.h"
#include "nif/terms.h"
#include "record/account.h"
#include "record/allocator.h"
#include "record/beam_frames.h"
#include "record/bindings.h"
#include "record/hooks.h"
#include "record/recorder.h"

/* When reset/0 last emptied the table (CLOCK_MONOTONIC_COARSE), 0 if never: the blocks live
 * then have no record, so nothing can be called lost. */
static uint64_t reset_ns, resets;

uint64_t mt_nif_last_reset(void)
{
    return __atomic_load_n(&reset_ns, __ATOMIC_RELAXED);
}

/* heap() -> {:ok, census map} | {:error, why}: glibc's heap as a walk sees it (reach.h). */
ERL_NIF_TERM mt_nif_heap_census(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    struct mt_reach r;
    struct mt_heap h;
    mt_guard_hold();
    if (mt_reach_heap(&r, &h) != 0) {
        mt_guard_release();
        return enif_raise_exception(env, mt_atom_enomem);
    }
    if (!r.heap_walked) {
        mt_guard_release();
        ERL_NIF_TERM pair[2] = {mt_atom_error, mt_nif_string(env, r.heap_refused)};
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
    const struct mt_nif_field census[] = {
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
        {"glibc", mt_nif_string(env, version)},
    };
    ERL_NIF_TERM pair[2];
    pair[1] = mt_nif_map(env, census, sizeof census / sizeof census[0]);
    mt_reach_drop(&r);
    mt_heap_drop(&h);
    mt_guard_release();
    pair[0] = enif_make_atom(env, "ok");
    return enif_make_tuple_from_array(env, pair, 2);
}

#define STAT_KEYS (MT_KINDS + 47)

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

ERL_NIF_TERM mt_nif_stats(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
    PUT("preloaded", mt_interposing() ? mt_atom_true : mt_atom_false);
    PUT("recording", active ? mt_atom_true : mt_atom_false);
    PUT("allocator", mt_nif_string(env, mt_real.name));
    const char *ahead = mt_ahead_name();
    PUT("malloc_ahead", ahead ? mt_nif_string(env, ahead) : mt_atom_nil);
    PUT_U("slots", active ? mt_table_slots() : 0);
    PUT_U("slots_max", active ? mt_table_slots_max() : 0);
    PUT_U("grown", active ? mt_table_grown() : 0);
    PUT_U("lanes", active ? mt_table_lanes() : 0);
    PUT_U("records", active ? mt_table_count() : 0);
    PUT_U("live_bytes", live.bytes);
    PUT_U("live_blocks", mt_blocks((int64_t)live.units));
    PUT("estimated", active && mt_config.sample ? mt_atom_true : mt_atom_false);
    PUT_U("sample_bytes", active ? mt_config.sample : 0);
    PUT_U("sampled", s.sampled);
    PUT_U("clear_bytes", active ? mt_config.clear : 0);
    PUT_U("dropped", s.dropped);
    PUT_U("depth", mt_config.depth);
    /* For stats/0's erlang_frames, which the Elixir side derives and removes; looked at only in
     * the mode that follows the map. */
    PUT("perf_map",
        mt_config.unwind == MT_UNWIND_ERLANG && mt_beam_perf_map() ? mt_atom_true : mt_atom_false);
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
    PUT("attached_at", a.attaches ? enif_make_uint64(env, a.realtime_s) : mt_atom_nil);
    PUT_U("attaches", a.attaches);
    PUT_U("attach_words", a.words);
    PUT_U("attach_objects", a.objects);
    PUT_U("attach_skipped", a.skipped);
    PUT_U("attach_copies", a.copies);
    PUT_U("attach_pause_us", a.pause_ns / 1000);
    PUT_U("nif_api_words", a.nif_words);
    PUT("nif_api_hooked", a.nif_api ? mt_atom_true : mt_atom_false);
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

ERL_NIF_TERM mt_nif_reset(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    if (!mt_active()) return mt_atom_not_preloaded;
    __atomic_store_n(&reset_ns, mt_now_ns(CLOCK_MONOTONIC_COARSE), __ATOMIC_RELAXED);
    __atomic_fetch_add(&resets, 1, __ATOMIC_RELAXED);
    return enif_make_uint64(env, mt_table_clear());
}

/* heaps_learn(limit, port_limit, [known, known]): teaches beam_heaps.h where the VM's process and
 * port tables lie, by their limits, and its Process layout, from the caller (running this NIF on
 * a normal scheduler) and two waiting processes, each known as {pid, heap_block, heap_used,
 * recent, stack, old_block, old_used, :normal | :high} (process_info/2's words). :ok, or
 * {:error, reason}. */
ERL_NIF_TERM mt_nif_heaps_learn(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
        return mt_atom_ok;
    ERL_NIF_TERM pair[2] = {mt_atom_error, mt_nif_string(env, reason)};
    return enif_make_tuple_from_array(env, pair, 2);
}

static ERL_NIF_TERM attach_result(ErlNifEnv *env, enum mt_attach_error e)
{
    if (e == MT_ATTACH_OK) return mt_atom_ok;
    ERL_NIF_TERM pair[2] = {mt_atom_error, mt_nif_string(env, mt_attach_reason(e))};
    return enif_make_tuple_from_array(env, pair, 2);
}

/* attach(["MTRACE_NAME=value", ...]): the options as variables (mtrace_options:variables/1). */
ERL_NIF_TERM mt_nif_attach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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

ERL_NIF_TERM mt_nif_detach(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    mt_guard_hold();
    enum mt_attach_error e = mt_detach();
    mt_guard_release();
    return attach_result(env, e);
}
