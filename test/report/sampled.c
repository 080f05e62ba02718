/* sampled.c: leaks of three sizes from three named functions, and churn that leaves nothing,
 * for the tests of the sampling mode (MTRACE_SAMPLE). */
#include <stdlib.h>

#include "common.h"

#define BIG 16
#define BIG_SIZE (1u << 20)
#define MEDIUM 1000
#define MEDIUM_SIZE 8192
#define SMALL 50000
#define SMALL_SIZE 100
#define CHURN 200000

static void *keep[BIG + MEDIUM + SMALL];
static size_t kept;

NAMED void big_leaks(void)
{
    for (int i = 0; i < BIG; i++)
        keep[kept++] = malloc(BIG_SIZE);
}

NAMED void medium_leaks(void)
{
    for (int i = 0; i < MEDIUM; i++)
        keep[kept++] = calloc(1, MEDIUM_SIZE);
}

NAMED void small_leaks(void)
{
    for (int i = 0; i < SMALL; i++)
        keep[kept++] = malloc(SMALL_SIZE);
}

NAMED void churn(void)
{
    for (int i = 0; i < CHURN; i++)
        free(malloc(64 + (size_t)(i % 64)));
}

int main(void)
{
    churn();
    small_leaks();
    churn();
    medium_leaks();
    big_leaks();
    churn();
    say("sampled: done\n");
    return 0;
}
