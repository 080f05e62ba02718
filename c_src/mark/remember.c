/* remember.c: the lost blocks of complete scans, remembered (remember.h). */
#include "mark/remember.h"

#include <pthread.h>
#include <string.h>

#include "base/mem.h"
#include "record/recorder.h"
#include "record/table.h"

/* Scans remembered, by stack id: how many found lost blocks of that stack, and the last of them.
 * In mtrace's own memory (mem.h), so that it is never a root; grown by doubling. */
struct scans {
    uint32_t count, last;
};
static pthread_mutex_t scans_lock = PTHREAD_MUTEX_INITIALIZER;
static struct scans *scans;
static size_t scans_cap;
static uint32_t scans_made;

/* Room for stack id `id` (scans_lock held); 0, or -1 when memory cannot be had. */
static int scans_room(uint32_t id)
{
    if (id < scans_cap) return 0;
    size_t cap = scans_cap ? scans_cap : 4096;
    while (cap <= id)
        cap *= 2;
    struct scans *to = mt_mem_map(cap * sizeof *to);
    if (!to) return -1;
    if (scans) {
        memcpy(to, scans, scans_cap * sizeof *to);
        mt_mem_unmap(scans, scans_cap * sizeof *to);
    }
    scans = to;
    scans_cap = cap;
    return 0;
}

void mt_remember(const struct mt_reach *r)
{
    mt_guard_hold();
    pthread_mutex_lock(&scans_lock);
    scans_made++;
    int table = mt_active();
    if (table) mt_table_hold();
    for (size_t i = 0; i < r->snap.heap; i++) {
        const struct mt_record *b = &r->snap.rec[i];
        if (r->state[i] == MT_REACH_REACHABLE || b->stack == MT_SNAPSHOT_UNRECORDED) continue;
        if (table && !b->lost) mt_table_set_lost(b);
        if (scans_room(b->stack) == 0 && scans[b->stack].last != scans_made) {
            scans[b->stack].last = scans_made;
            scans[b->stack].count++;
        }
    }
    if (table) mt_table_release();
    pthread_mutex_unlock(&scans_lock);
    mt_guard_release();
}

unsigned mt_remembered_scans(uint32_t stack)
{
    pthread_mutex_lock(&scans_lock);
    unsigned n = stack < scans_cap ? scans[stack].count : 0;
    pthread_mutex_unlock(&scans_lock);
    return n;
}
