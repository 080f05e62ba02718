/* inlineprog: loses one block from an always_inline helper inside a static function, and one
 * behind a plain static function, for the source lines of the exit report and the CSV. Each
 * allocating line carries a "site:" marker that the test finds. Built like the others (-O0 -g
 * -fno-inline): always_inline is inlined even so. */
#include <stdlib.h>

#include "common.h"

static inline __attribute__((always_inline)) void *inline_leak(size_t n)
{
    return malloc(n); /* site:inline */
}

NAMED static void *outer_static(size_t n)
{
    return inline_leak(n); /* site:outer */
}

NAMED static void *plain_static(size_t n)
{
    return malloc(n); /* site:plain */
}

int main(void)
{
    outer_static(4242); /* site:main_outer */
    plain_static(2424); /* site:main_plain */
    say("inlineprog: done\n");
    return 0;
}
