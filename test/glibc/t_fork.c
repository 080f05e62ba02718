/* fork while two other threads allocate: each of 50 children allocates and frees and must exit 0;
 * a child that inherited a lock held by a thread that no longer exists would hang instead (the
 * test runs this under `timeout`). */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>
#include <sys/wait.h>

enum { CHILDREN = 50, ALLOCATORS = 2 };

static int stop;

static void *allocate(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    size_t rounds = 0;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        size_t n = 1 + (rounds * 2654435761u + seed) % 5000;
        char *p = malloc(opaque(n));
        if (p) fill(p, n, seed);
        char *q = realloc(p, opaque(n * 2));
        free(q ? q : p);
        rounds++;
    }
    return (void *)(uintptr_t)(rounds > 0);
}

static int child(int k)
{
    int bad = 0;
    for (size_t i = 0; i < 1000; i++) {
        size_t n = 1 + (i * 7919 + (size_t)k) % 20000;
        unsigned char *p = i % 3 ? malloc(opaque(n)) : calloc(opaque(1), opaque(n));
        if (!p) {
            bad++;
            continue;
        }
        fill(p, n, (unsigned)k);
        if (!intact(p, n, (unsigned)k)) bad++;
        free(p);
    }
    char *s = strdup("child");
    if (!s || strcmp(s, "child") != 0) bad++;
    free(s);
    return bad ? 1 : 0;
}

int main(void)
{
    pthread_t tids[ALLOCATORS];
    for (int t = 0; t < ALLOCATORS; t++)
        expect(pthread_create(&tids[t], NULL, allocate, (void *)(uintptr_t)(t + 1)) == 0,
               "pthread_create");

    fflush(stdout); /* children exit(): an unflushed buffer would be written twice */
    pid_t pids[CHILDREN];
    for (int k = 0; k < CHILDREN; k++) {
        pids[k] = fork();
        if (pids[k] == 0) exit(child(k));
        expect(pids[k] > 0, "fork");
        free(malloc(opaque(100 + (size_t)k))); /* the parent allocates between forks too */
    }

    int exited0 = 0;
    for (int k = 0; k < CHILDREN; k++) {
        int status;
        if (pids[k] > 0 && waitpid(pids[k], &status, 0) == pids[k] && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            exited0++;
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    int ran = 0;
    for (int t = 0; t < ALLOCATORS; t++) {
        void *r;
        pthread_join(tids[t], &r);
        ran += r != NULL;
    }
    printf("%d children forked, %d exited 0\n", CHILDREN, exited0);
    printf("%d allocating threads, %d joined\n", ALLOCATORS, ran);
    expect(exited0 == CHILDREN, "every child exits 0");
    return finish();
}
