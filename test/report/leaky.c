/* leaky: leaks known blocks from named functions, through malloc, calloc, realloc growth, C++
 * new, strdup and posix_memalign, after a transient 1 MiB block that sets the peak.
 *
 *   leaked: 3000 in 3 (leak_malloc), 500 in 1 (leak_calloc), 4096 in 1 (grow_realloc),
 *           144 in 3 (leaky::make_list, C++ new), 30 in 1 (leak_strdup),
 *           256 in 1 (leak_posix_memalign): 8026 bytes in 10 blocks
 *
 * `leaky [status [extra]]` exits with status, after leaking extra more 16-byte blocks from
 * leak_many (for a table too small to hold them). */
#define _GNU_SOURCE
#include <stdlib.h>

#include "common.h"

void *leak_cxx_new(int n);

NAMED static void peak_once(void)
{
    char *big = malloc(1 << 20);
    memset(big, 1, 1 << 20);
    free(big);
}

NAMED static void churn(void)
{
    for (int i = 0; i < 5; i++)
        free(malloc(200));
}

NAMED void *leak_malloc(void)
{
    void *last = NULL;
    for (int i = 0; i < 3; i++)
        last = malloc(1000);
    return last;
}

NAMED void *leak_calloc(void)
{
    return calloc(25, 20);
}

NAMED void *grow_realloc(void)
{
    char *p = malloc(16);
    for (size_t n = 32; n <= 4096; n *= 2)
        p = realloc(p, n);
    return p;
}

NAMED char *leak_strdup(void)
{
    return strdup("mtrace finds this strdup leak");
}

NAMED void *leak_posix_memalign(void)
{
    void *p = NULL;
    return posix_memalign(&p, 64, 256) == 0 ? p : NULL;
}

NAMED static void *leak_many(int n)
{
    void *last = NULL;
    for (int i = 0; i < n; i++)
        last = malloc(16);
    return last;
}

int main(int argc, char **argv)
{
    peak_once();
    churn();
    leak_malloc();
    leak_calloc();
    grow_realloc();
    leak_cxx_new(3);
    leak_strdup();
    leak_posix_memalign();
    leak_many(argc > 2 ? atoi(argv[2]) : 0);
    say("leaky: done\n");
    return argc > 1 ? atoi(argv[1]) : 0;
}
