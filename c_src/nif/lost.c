/* lost.c: the NIFs of the mark (readers.h): leaks, why, whys; the lost blocks as terms, what a
 * block without a record holds, the chains of pointers that keep a block.
 */
#define _GNU_SOURCE
#include <string.h>

#include "base/mem.h"
#include "mark/beam_vm.h"
#include "mark/remember.h"
#include "mark/roots.h"
#include "nif/filter.h"
#include "nif/readers.h"
#include "nif/terms.h"
#include "record/recorder.h"
#include "symbols/symbols.h"

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
    if (len < sizeof(uintptr_t)) return mt_atom_nil;
    uintptr_t first;
    memcpy(&first, head, sizeof first);
    const char *cls = mt_symbolize_class(first);
    if (cls) {
        ERL_NIF_TERM t[2] = {enif_make_atom(env, "cxx"), mt_nif_string(env, cls)};
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
    if (n < 4 || (n < len && head[n] != '\0')) return mt_atom_nil;
    char text[HEAD_BYTES + 1];
    memcpy(text, head, n);
    text[n] = '\0';
    ERL_NIF_TERM t[2] = {enif_make_atom(env, "string"), mt_nif_string(env, text)};
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
    if (!r->rule[i]) return mt_atom_nil;
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
            unrecorded ? mt_atom_nil : enif_make_uint64(env, rec->stack),
            r->state[b->at[j]] == MT_REACH_DIRECT ? mt_atom_true : mt_atom_false,
            unrecorded ? mt_atom_nil : enif_make_uint64(env, mt_remembered_scans(rec->stack)),
            certainty(env, r, b->at[j]),
        };
        items[(*k)++] = enif_make_tuple_from_array(env, t, 7);
    }
    b->n = 0;
}

/* Why the scan r cannot call blocks lost (reach.h's one rule), or 0. */
static ERL_NIF_TERM incomplete(ErlNifEnv *env, const struct mt_reach *r)
{
    switch (mt_reach_rule(r, mt_nif_last_reset() != 0)) {
    case MT_LOST_SAMPLING:
        return mt_atom_sampling;
    case MT_LOST_DROPPED: {
        struct mt_stats st;
        mt_stats_read(&st);
        ERL_NIF_TERM pair[2] = {mt_atom_dropped, enif_make_uint64(env, st.dropped)};
        return enif_make_tuple_from_array(env, pair, 2);
    }
    case MT_LOST_RESET:
        return mt_atom_reset;
    case MT_LOST_ATTACHED:
        return mt_atom_attached;
    case MT_LOST_NOT_RECORDING:
        return mt_atom_not_preloaded;
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
    if (enif_is_identical(why, mt_atom_not_preloaded)) {
        ERL_NIF_TERM t[2] = {why, mt_nif_string(env, r->heap_refused ? r->heap_refused : "")};
        return enif_make_tuple_from_array(env, t, 2);
    }
    ERL_NIF_TERM t[3] = {mt_atom_error, why,
                         r->heap_refused ? mt_nif_string(env, r->heap_refused) : mt_atom_nil};
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
                                i == MT_SNAPSHOT_NONE ? mt_atom_nil : path_of(env, r, i)};
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
ERL_NIF_TERM mt_nif_leaks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct mt_filter f;
    (void)argc;
    int paths = enif_is_identical(argv[1], mt_atom_true);
    if ((!paths && !enif_is_identical(argv[1], mt_atom_false)) ||
        mt_filter_get(env, argv[0], &f) != 0)
        return enif_make_badarg(env);
    mt_guard_hold();
    struct mt_reach r;
    asker(env);
    int marked = paths ? mt_reach_run_paths(&r, 0, 1) : mt_reach_run(&r, 0, 1);
    mt_beam_heaps_asker(0);
    if (marked != 0) {
        mt_guard_release();
        mt_filter_drop(&f);
        return enif_raise_exception(env, mt_atom_enomem);
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
    mt_remember(&r);
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
    const struct mt_nif_field info[] = {
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
        {"heap_walked", r.heap_walked ? mt_atom_true : mt_atom_false},
        {"heap_refused", r.heap_refused ? mt_nif_string(env, r.heap_refused) : mt_atom_nil},
        {"unrecorded_blocks", enif_make_uint64(env, r.unrecorded)},
        {"missed_frees", enif_make_uint64(env, r.missed_frees)},
        {"mmapped_missing", enif_make_uint64(env, r.mmapped_missing)},
        {"bad_chunks", enif_make_uint64(env, r.bad_chunks)},
        {"rules", rule_counts(env, &r)},
        {"otp", enif_make_uint64(env, mt_beam_vm_release())},
    };
    ERL_NIF_TERM result[3];
    result[1] = mt_nif_map(env, info, sizeof info / sizeof info[0]);
    result[0] = enif_make_list_from_array(env, items, (unsigned)k);
    result[2] = paths && items ? lost_whys(env, &r, &f) : 0;
    enif_free(items);
    mt_filter_drop(&f);
    mt_reach_drop(&r);
    mt_guard_release();
    if (!items || (paths && !result[2])) return enif_raise_exception(env, mt_atom_enomem);
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
                              root.thread[0] ? mt_nif_string(env, root.thread) : mt_atom_nil};
    ERL_NIF_TERM tid = enif_make_tuple_from_array(env, thread, 2);
    ERL_NIF_TERM library = root.library ? mt_nif_string(env, root.library) : mt_atom_nil;
    switch (root.kind) {
    case MT_ROOT_TLS: {
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "tls"), via, tid, library,
                             enif_make_uint64(env, (uint64_t)root.offset)};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_STACK: {
        ERL_NIF_TERM ip[2] = {enif_make_uint64(env, root.ip), enif_make_uint64(env, root.lookup)};
        ERL_NIF_TERM frame = root.ip ? enif_make_tuple_from_array(env, ip, 2) : mt_atom_nil;
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "stack"), via, tid,
                             enif_make_long(env, (long)root.offset), frame};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_STATIC: {
        ERL_NIF_TERM k[5] = {enif_make_atom(env, "static"), via, library,
                             root.symbol ? mt_nif_string(env, root.symbol) : mt_atom_nil,
                             enif_make_uint64(env, (uint64_t)root.offset)};
        return enif_make_tuple_from_array(env, k, 5);
    }
    case MT_ROOT_MAPPING: {
        ERL_NIF_TERM k[6] = {enif_make_atom(env, "mapping"),
                             via,
                             root.hi ? enif_make_uint64(env, root.lo) : mt_atom_nil,
                             root.hi ? enif_make_uint64(env, root.hi) : mt_atom_nil,
                             library,
                             root.allocator[0] ? mt_nif_string(env, root.allocator) : mt_atom_nil};
        return enif_make_tuple_from_array(env, k, 6);
    }
    case MT_ROOT_REGISTER: {
        ERL_NIF_TERM k[3] = {enif_make_atom(env, "register"), tid, mt_nif_string(env, root.reg)};
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

/* A block of a chain: {address, size, stack_id | nil, offset}, offset that of its pointer to the
 * next block, or nil for the last. */
static ERL_NIF_TERM link_of(ErlNifEnv *env, const struct mt_record *b, ERL_NIF_TERM offset)
{
    ERL_NIF_TERM t[4] = {
        enif_make_uint64(env, b->addr), enif_make_uint64(env, b->size),
        b->stack == MT_SNAPSHOT_UNRECORDED ? mt_atom_nil : enif_make_uint64(env, b->stack), offset};
    return enif_make_tuple_from_array(env, t, 4);
}

/* The chain from a root to snapshot record i: {root, [link_of()]}; nil when i was not reached; 0
 * when out of memory. */
static ERL_NIF_TERM path_of(ErlNifEnv *env, const struct mt_reach *r, size_t i)
{
    size_t n = mt_reach_path(r, i, NULL, 0);
    if (!n) return mt_atom_nil;
    size_t *chain = enif_alloc(n * sizeof *chain);
    ERL_NIF_TERM *links = enif_alloc(n * sizeof *links), result = 0;
    if (chain && links) {
        mt_reach_path(r, i, chain, n);
        /* from the root outwards: chain[n - 1] first */
        for (size_t k = 0; k < n; k++) {
            const struct mt_record *b = &r->snap.rec[chain[n - 1 - k]];
            links[k] = link_of(env, b,
                               k + 1 < n ? enif_make_uint64(env, r->via[chain[n - 2 - k]] - b->addr)
                                         : mt_atom_nil);
        }
        ERL_NIF_TERM pair[2] = {root_of(env, r, chain[n - 1]),
                                enif_make_list_from_array(env, links, (unsigned)n)};
        result = enif_make_tuple_from_array(env, pair, 2);
    }
    enif_free(chain);
    enif_free(links);
    return result;
}

/* A possibly lost block's answer to why/2: {{discounted, rule, holder}, [the block]}, as path_of()
 * gives a chain: the word a rule discounted that points into it (or into a lost block that
 * reaches it: certainty()), which may be a reference after all. */
static ERL_NIF_TERM discounted_of(ErlNifEnv *env, const struct mt_reach *r, size_t i)
{
    ERL_NIF_TERM root[3] = {enif_make_atom(env, "discounted"),
                            enif_make_atom(env, mt_rules[r->rule[i]].name),
                            enif_make_uint64(env, r->rule_at[i])};
    ERL_NIF_TERM block = link_of(env, &r->snap.rec[i], mt_atom_nil);
    ERL_NIF_TERM pair[2] = {enif_make_tuple_from_array(env, root, 3),
                            enif_make_list_from_array(env, &block, 1)};
    return enif_make_tuple_from_array(env, pair, 2);
}

/* why(address) -> path_of() the block that holds address; discounted_of() a possibly lost one;
 * nil for a block lost definitely; not_a_block; or leaks()'s refusals. */
ERL_NIF_TERM mt_nif_why(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
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
        return enif_raise_exception(env, mt_atom_enomem);
    }
    ERL_NIF_TERM result = refusal(env, &r);
    if (!result) {
        size_t i = mt_snapshot_find(&r.snap, masked ^ MT_REACH_MASK);
        result = i == MT_SNAPSHOT_NONE              ? enif_make_atom(env, "not_a_block")
                 : r.state[i] == MT_REACH_REACHABLE ? path_of(env, &r, i)
                 : r.rule[i]                        ? discounted_of(env, &r, i)
                                                    : mt_atom_nil;
    }
    mt_reach_drop(&r);
    mt_guard_release();
    return result ? result : enif_raise_exception(env, mt_atom_enomem);
}

/* whys(stack_ids) -> [{stack_id, path_of() | nil}]: for each stack, the chain that keeps its
 * oldest reachable block, from one mark; nil when the mark reached none of its blocks. No address
 * is hidden: the caller holds none. */
ERL_NIF_TERM mt_nif_whys(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned len;
    (void)argc;
    if (!enif_get_list_length(env, argv[0], &len)) return enif_make_badarg(env);
    uint32_t *ids = enif_alloc((len + 1) * sizeof *ids);
    if (!ids) return enif_raise_exception(env, mt_atom_enomem);
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
        return enif_raise_exception(env, mt_atom_enomem);
    }
    mt_reach_oldest(&r, oldest, span, 0);
    ERL_NIF_TERM result = paths_by_id(env, &r, oldest, ids, len);
    mt_reach_drop(&r);
    mt_guard_release();
    enif_free(ids);
    enif_free(oldest);
    return result ? result : enif_raise_exception(env, mt_atom_enomem);
}
