/* reachprog: what is still reachable at exit and what is lost, for the exit report's split and
 * its comparison with LeakSanitizer. Prints with stdio, so that stdout's buffer is a heap block.
 *
 *   reachable: stdout's buffer; kept_static (a static pointer, 111 bytes); kept_tls (a
 *     thread-local pointer of the main thread, 222 bytes); held (333 bytes), which only the stack
 *     of a thread still waiting at exit points to
 *   lost: a list of 4 nodes of 48 bytes (1 direct, 3 indirect); 2 blocks of 1000 bytes (lose)
 *     = 2192 bytes in 6 blocks
 *
 * With the argument "blocked" the waiting thread blocks every signal, as a program's sigwait
 * thread does: it cannot be stopped, so its whole stack is read.
 *
 * With "jit" it registers code as a JIT does, through the GDB JIT interface: an entry on the
 * list of __jit_debug_descriptor names a 64-byte symfile, data for a debugger, in which a word
 * equals the address of a block lost otherwise (444 bytes: lost by jit_lost), as a JIT's unwritten
 * padding may. The entry and the symfile are reachable, the 444 bytes lost.
 *
 * With "unmapping" the process exits while an mmapped chunk that glibc no longer counts is still
 * mapped, as a thread stopped inside free between the count and the munmap leaves it; the chunk
 * is unmapped UNMAP_MS later, by the waiting thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NAMED __attribute__((noinline, used))

struct node {
    struct node *next;
    char pad[40];
};

static void *kept_static;
static __thread void *kept_tls;
static int ready[2];
static int blocked;
static void *uncounted;
enum { UNCOUNTED_BYTES = 1 << 16, UNMAP_MS = 100 };

NAMED static void *keep(size_t n)
{
    void *p = malloc(n);
    memset(p, 0, n);
    return p;
}

NAMED static void lose_list(int n)
{
    struct node *head = NULL;
    for (int i = 0; i < n; i++) {
        struct node *x = calloc(1, sizeof *x);
        x->next = head;
        head = x;
    }
}

NAMED static void lose(size_t n)
{
    memset(malloc(n), 0, n);
}

/* The GDB JIT interface's layout (GDB's manual), exported for the tracer to find. */
struct jit_code_entry {
    struct jit_code_entry *next, *prev;
    const char *symfile;
    unsigned long symfile_size;
};
__attribute__((used, visibility("default"))) struct {
    unsigned version, action;
    struct jit_code_entry *relevant, *first;
} __jit_debug_descriptor = {1, 0, NULL, NULL};

NAMED static char *jit_lost(void)
{
    char *p = malloc(444);
    memset(p, 0, 444);
    return p;
}

NAMED static void jit_register(void)
{
    char *symfile = keep(64);
    struct jit_code_entry *e = keep(sizeof *e);
    char *volatile lost = jit_lost();
    memcpy(symfile + 40, (const void *)&lost, sizeof lost);
    lost = NULL;
    e->symfile = symfile;
    e->symfile_size = 64;
    __jit_debug_descriptor.first = e;
}

/* Zeroes the stack below its caller's frame, where keep's copies of the address lie dead: the
 * word that keeps the block is then the caller's own. */
NAMED static void wipe_below(void)
{
    volatile char dead[1024];
    for (size_t i = 0; i < sizeof dead; i++)
        dead[i] = 0;
}

/* Holds a block on its stack and waits for ever: exit comes while it waits. */
NAMED static void *holder(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "holder");
    if (blocked) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, NULL);
    }
    void *volatile held = keep(333);
    wipe_below();
    char c = 1;
    ssize_t w = write(ready[1], &c, 1);
    (void)w;
    if (uncounted) {
        /* the report's stops interrupt the sleep: it ends at its time all the same */
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_nsec += UNMAP_MS * 1000000L;
        at.tv_sec += at.tv_nsec / 1000000000L;
        at.tv_nsec %= 1000000000L;
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) != 0)
            ;
        munmap(uncounted, UNCOUNTED_BYTES);
    }
    for (;;)
        pause();
    return held;
}

int main(int argc, char **argv)
{
    blocked = argc > 1 && strcmp(argv[1], "blocked") == 0;
    if (argc > 1 && strcmp(argv[1], "unmapping") == 0) {
        uncounted =
            mmap(NULL, UNCOUNTED_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (uncounted == MAP_FAILED) return 1;
        ((size_t *)uncounted)[1] = UNCOUNTED_BYTES | 2; /* an mmapped chunk's header */
    }
    if (argc > 1 && strcmp(argv[1], "jit") == 0) jit_register();
    kept_static = keep(111);
    kept_tls = keep(222);
    lose_list(4);
    lose(1000);
    lose(1000);
    pthread_t t;
    char c;
    if (pipe(ready) != 0 || pthread_create(&t, NULL, holder, NULL) != 0 ||
        read(ready[0], &c, 1) != 1)
        return 1;
    printf("reachprog: done\n");
    return 0;
}
