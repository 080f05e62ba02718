/* blocks.h: made-up blocks for the C tests that drive the recorder directly (no LD_PRELOAD). The
 * recorder never dereferences a recorded address, so an owner's i-th block is an address of its
 * own, and its size a function of that address: a record whose size does not match its address
 * was torn or misattributed. Sizes start at 64 bytes, so that under MTRACE_SAMPLE=1 every block is
 * sampled but for a chance of e^-64. alloc() and release() call the recorder as the malloc and
 * free hooks do. Header-only: each test includes it once. */
#ifndef MTRACE_TEST_BLOCKS_H
#define MTRACE_TEST_BLOCKS_H

#include <stdint.h>

#include "record/recorder.h"

#define HOOK ((uintptr_t)0x1234)
/* No frame has this stack pointer: the recorder falls back to a plain unwind. */
#define SITE (&(struct mt_site){HOOK, 0x5678, 16})

static inline uint64_t size_of(uintptr_t a)
{
    return (a >> 4) * 2654435761u % 100000 + 64;
}

static inline void *block(unsigned owner, unsigned i)
{
    return (void *)(((uintptr_t)owner << 32) + 16 * (uintptr_t)(i + 1));
}

static inline void alloc(void *p)
{
    if (mt_enter(MT_MALLOC)) mt_alloc_done(p, size_of((uintptr_t)p), SITE);
}

static inline void release(void *p)
{
    if (mt_enter(MT_FREE))
        mt_forget(p);
    else
        mt_forget_unentered(p);
}

#endif
