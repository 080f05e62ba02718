/* attachprog SECONDS [fork|static]: the program bin/mtrace attaches to (test/attach_cli_test.exs).
 * For SECONDS it works in steps of 1 ms: a ring of 64 kept blocks is renewed through every
 * allocating function, each block filled and checked before it is freed, and every 50th step
 * loses a 100-byte block in attach_lose. It checks what the allocator gave: no errno changed by a
 * call that succeeded, no block whose contents changed. With fork, every 500th step forks a child
 * that allocates, loses one block and exits. It ends with one line of its counts and status 7,
 * the same with or without mtrace. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define RING 64

static unsigned char *ring[RING];
static size_t sizes[RING];
static uint64_t losses, errno_changed, corrupt, children_failed;

NAMED void *attach_lose(void)
{
    void *p = malloc(100);
    if (p) memset(p, 0x5a, 100);
    return p;
}

/* One block of size n from the function picked by step, errno set before and checked after. */
NAMED unsigned char *attach_get(size_t step, size_t n)
{
    void *p = NULL;
    errno = 4242;
    switch (step % 5) {
    case 0:
        p = malloc(n);
        break;
    case 1:
        p = calloc(1, n);
        break;
    case 2:
        p = realloc(NULL, n);
        break;
    case 3:
        if (posix_memalign(&p, 64, n) != 0) p = NULL;
        break;
    case 4:
        p = aligned_alloc(16, (n + 15) & ~(size_t)15);
        break;
    }
    if (p && errno != 4242) errno_changed++;
    return p;
}

static void renew(size_t step)
{
    size_t k = step % RING, n = 24 + step % 300;
    if (ring[k]) {
        for (size_t i = 0; i < sizes[k]; i++)
            if (ring[k][i] != (unsigned char)(k + sizes[k])) {
                corrupt++;
                break;
            }
        free(ring[k]);
    }
    ring[k] = attach_get(step, n);
    sizes[k] = ring[k] ? n : 0;
    if (ring[k]) memset(ring[k], (int)(k + n), n);
}

NAMED void attach_child(void)
{
    for (size_t i = 0; i < 100; i++)
        free(attach_get(i, 40));
    attach_lose();
    exit(0);
}

int main(int argc, char **argv)
{
    long steps = (argc > 1 ? atol(argv[1]) : 3) * 1000;
    int forking = argc > 2 && strcmp(argv[2], "fork") == 0;
    struct timespec ms = {0, 1000000};
    for (long step = 0; step < steps; step++) {
        renew((size_t)step);
        if (step % 50 == 0 && attach_lose()) losses++;
        if (forking && step % 500 == 0) {
            pid_t child = fork();
            if (child == 0) attach_child();
            int status = 0;
            if (child < 0 || waitpid(child, &status, 0) != child || status != 0) children_failed++;
        }
        nanosleep(&ms, NULL);
    }
    say("attachprog: lost ");
    say_num(losses, 0);
    say(", errno changed ");
    say_num(errno_changed, 0);
    say(", corrupt ");
    say_num(corrupt, 0);
    say(", children failed ");
    say_num(children_failed, 0);
    say("\n");
    return 7;
}
