/* nopie: built -no-pie -fno-pic, it takes malloc's address in code, so that the executable
 * defines malloc's canonical address (its PLT entry), as Debian's python3.11 does; it leaks 777
 * bytes from leak_nopie through that pointer. */
#include <stdlib.h>

#include "common.h"

void *(*volatile allocate)(size_t);

NAMED static void *leak_nopie(void)
{
    return allocate(777);
}

int main(void)
{
    allocate = malloc;
    leak_nopie();
    say("nopie: done\n");
    return 0;
}
