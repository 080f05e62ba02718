/* linked: leaks 100 bytes, with priv/mtrace.so linked in by its absolute path instead of
 * preloaded: a setuid program ignores an LD_PRELOAD path, but loads its own dependencies. */
#include <stdlib.h>

#include "common.h"

int main(void)
{
    void *p = malloc(100);
    (void)p;
    say("linked: done\n");
    return 0;
}
