/* scrub.c: zeroing the stack below the caller's frame (scrub.h). */
#define _GNU_SOURCE
#include "mark/scrub.h"

#include <stdint.h>
#include <string.h>

#include "record/recorder.h"
#include "record/stack.h"

/* Its own frame, so that the bytes it zeroes lie below its caller's. */
__attribute__((noinline)) static void zero_below(size_t len)
{
    char dead[len];
    explicit_bzero(dead, len);
}

void mt_scrub(void)
{
    uintptr_t lo, hi, here = (uintptr_t)__builtin_frame_address(0);
    mt_guard_hold();
    int known = mt_stack_bounds(&lo, &hi);
    mt_guard_release();
    if (!known) return;
    uintptr_t floor = lo + MT_SCRUB_MARGIN;
    if (here < floor + 4096 || here >= hi) return;
    size_t room = here - floor - 4096; /* zero_below's own frame */
    zero_below(room < MT_SCRUB ? room : MT_SCRUB);
}
