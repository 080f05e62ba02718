/* verdict.c: what a finished mark answers (see reach.h): how sure it may be that its unreachable
 * blocks are lost, the oldest block of each stack, and the chain that keeps a block. Reads a
 * mark's results only; the mark itself is reach.c's. */
#include "base/config.h"
#include "mark/reach.h"
#include "record/recorder.h"

/* What the records alone leave unknown; MT_LOST_KNOWN when nothing. */
static enum mt_lost_rule records_rule(int after_reset)
{
    if (!mt_active()) return MT_LOST_NOT_RECORDING;
    if (mt_config.sample) return MT_LOST_SAMPLING;
    struct mt_stats st;
    mt_stats_read(&st);
    if (st.dropped) return MT_LOST_DROPPED;
    if (after_reset) return MT_LOST_RESET;
    return mt_records_partial_since() ? MT_LOST_ATTACHED : MT_LOST_KNOWN;
}

enum mt_lost_rule mt_reach_rule(const struct mt_reach *r, int after_reset)
{
    return r->heap_walked ? MT_LOST_KNOWN : records_rule(after_reset);
}

int mt_reach_needs_walk(int after_reset)
{
    return records_rule(after_reset) != MT_LOST_KNOWN;
}

/* Lost: an indirect block before a direct one (its chain says whose loss it is), then the
 * oldest. */
static int before(const struct mt_reach *r, size_t i, size_t o, int lost)
{
    if (o == MT_SNAPSHOT_NONE) return 1;
    if (lost && r->state[i] != r->state[o]) return r->state[i] == MT_REACH_INDIRECT;
    return r->snap.rec[i].time_ns < r->snap.rec[o].time_ns;
}

void mt_reach_oldest(const struct mt_reach *r, size_t *oldest, size_t ids, int lost)
{
    for (size_t id = 0; id < ids; id++)
        oldest[id] = MT_SNAPSHOT_NONE;
    for (size_t i = 0; i < r->snap.heap; i++) {
        const struct mt_record *b = &r->snap.rec[i];
        size_t *o = b->stack < ids ? &oldest[b->stack] : NULL;
        int wanted = lost ? r->state[i] == MT_REACH_DIRECT || r->state[i] == MT_REACH_INDIRECT
                          : r->state[i] == MT_REACH_REACHABLE;
        if (o && wanted && before(r, i, *o, lost)) *o = i;
    }
}

size_t mt_reach_path(const struct mt_reach *r, size_t i, size_t *chain, size_t cap)
{
    size_t len = 0;
    if (!r->parent || i >= r->snap.heap ||
        (r->state[i] != MT_REACH_REACHABLE && r->state[i] != MT_REACH_DIRECT &&
         r->state[i] != MT_REACH_INDIRECT))
        return 0;
    for (;;) {
        if (len < cap) chain[len] = i;
        len++;
        if (r->parent[i] >= r->snap.heap) return len;
        i = r->parent[i];
    }
}
