/* extended_plugin.c: loaded by extended.c after its start, this object's words for the operators
 * new and delete are bound then, to the allocator's (every allocator of extended.c defines
 * them): with own, blocks of malloc deleted, and one block of 321 bytes lost through new; with
 * std, the same through malloc and free. */
#include <stdlib.h>
#include <string.h>

void *_Znwm(size_t);
void _ZdlPv(void *);

static void *volatile sink;

__attribute__((noinline)) static void lose_in_plugin(int own)
{
    sink = own ? _Znwm(321) : malloc(321);
    memset(sink, 1, 321);
    sink = NULL;
}

void extended_plugin(int own);
void extended_plugin(int own)
{
    for (int i = 0; i < 100; i++) {
        char *p = malloc(64 + (size_t)i);
        memset(p, 2, 64 + (size_t)i);
        if (own)
            _ZdlPv(p);
        else
            free(p);
    }
    lose_in_plugin(own);
}
