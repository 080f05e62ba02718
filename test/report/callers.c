/* callers: one function that leaks from three call paths, and another from one, for the exit
 * report's summary by calling function.
 *
 *   leaked: 15000 in 3 (index_build, from index_a, index_b, index_c), 100 in 1 (note_once) */
#include <stdlib.h>

#include "common.h"

NAMED void *index_build(size_t n)
{
    return malloc(n);
}

NAMED void *index_a(void)
{
    return index_build(5000);
}

NAMED void *index_b(void)
{
    return index_build(5000);
}

NAMED void *index_c(void)
{
    return index_build(5000);
}

NAMED void *note_once(void)
{
    return malloc(100);
}

int main(void)
{
    index_a();
    index_b();
    index_c();
    note_once();
    say("callers: done\n");
    return 0;
}
