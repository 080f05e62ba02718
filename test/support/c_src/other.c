/* other.c: a second plain library for the unload test, loaded where symbolic.so was. */
#include <stdlib.h>

__attribute__((noinline, visibility("default"))) void *other_alloc(size_t n)
{
    return malloc(n); /* site:other */
}
