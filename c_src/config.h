/* config.h: the MTRACE_* environment variables, read once.
 *
 * Contract
 * - mt_config_load() is called once, from the recorder's first initialisation, before any
 *   record is made. It uses getenv and write(2) only: no malloc, no stdio, so it is safe on the
 *   hook path of the very first allocation.
 * - A malformed value prints exactly one line, "mtrace: ...", on stderr and the default is kept.
 * - After loading, mt_config is read-only: every thread may read it without a lock.
 */
#ifndef MTRACE_CONFIG_H
#define MTRACE_CONFIG_H

#include <stddef.h>

enum mt_unwind { MT_UNWIND_LIBUNWIND, MT_UNWIND_FP };

struct mt_config {
    size_t slots;          /* MTRACE_SLOTS: live-table slots, rounded up to a power of two */
    int depth;             /* MTRACE_DEPTH: frames kept per stack, hook frame included */
    size_t stacks;         /* MTRACE_STACKS: distinct stacks the intern table can hold */
    enum mt_unwind unwind; /* MTRACE_UNWIND: libunwind (default) or fp */
};

#define MT_DEPTH_MAX 128

extern struct mt_config mt_config;

void mt_config_load(void);

#endif
