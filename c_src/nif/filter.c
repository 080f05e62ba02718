/* filter.c: which records a reader wants (filter.h). */
#include "nif/filter.h"

#include <string.h>

#include "record/intern.h"
#include "symbols/symbols.h"

static int erlang_matches(const struct mt_filter *f, const struct mt_frame_info *fr)
{
    size_t n = strlen(f->erlang);
    if (!fr->erlang || strncmp(fr->function, f->erlang, n) != 0) return 0;
    return !(f->erlang[n - 1] >= '0' && f->erlang[n - 1] <= '9') || fr->function[n] == '\0';
}

int mt_filter_stack(struct mt_filter *f, uint32_t id)
{
    if (!f->memo) return 1;
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

int mt_filter_wants(struct mt_filter *f, const struct mt_snapshot *s, const struct mt_record *r)
{
    /* A block without a record has no stack, age or mark to be filtered by. */
    if (r->stack == MT_SNAPSHOT_UNRECORDED)
        return !f->memo && !f->since_ns && f->max_age_ns == UINT64_MAX && r->size >= f->min_size;
    uint64_t age = mt_snapshot_age(s, r);
    return age >= f->min_age_ns && age <= f->max_age_ns && r->time_ns > f->since_ns &&
           r->size >= f->min_size && mt_filter_stack(f, r->stack);
}

/* A string option of the filter, or nil; 0, or -1 for badarg. */
static int get_text(ErlNifEnv *env, ERL_NIF_TERM term, char *out, size_t cap, int *has)
{
    ErlNifBinary bin;
    char atom[4];
    *has = !(enif_get_atom(env, term, atom, sizeof atom, ERL_NIF_LATIN1) > 0 &&
             strcmp(atom, "nil") == 0);
    if (!*has) return 0;
    if (!enif_inspect_binary(env, term, &bin) || bin.size >= cap || memchr(bin.data, 0, bin.size))
        return -1;
    memcpy(out, bin.data, bin.size);
    out[bin.size] = '\0';
    return 0;
}

int mt_filter_get(ErlNifEnv *env, ERL_NIF_TERM term, struct mt_filter *f)
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

void mt_filter_drop(struct mt_filter *f)
{
    if (f->memo) enif_free(f->memo);
    f->memo = NULL;
}
