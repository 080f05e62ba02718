/* free: NULL is a no-op, and every free (of blocks from each allocator, small, large and mmap'd,
 * in any order) leaves errno untouched, as glibc >= 2.33 promises. */
#include "common.h"

static void freed(const char *label, void *p)
{
    expect(p != NULL, label);
    errno = SENTINEL;
    free(p);
    int err = errno;
    printf("free(%s): errno=%s\n", label, errname(err));
    expect(err == SENTINEL, "free changed errno");
}

int main(void)
{
    int err;
    CALL(err, free(NULL));
    printf("free(NULL): errno=%s\n", errname(err));
    expect(err == SENTINEL, "free(NULL) changed errno");

    void *al = NULL;
    int rc = posix_memalign(&al, 64, opaque(100));
    expect(rc == 0, "posix_memalign");

    freed("malloc(0)", malloc(opaque(0)));
    freed("malloc(10)", malloc(opaque(10)));
    freed("malloc(5000)", malloc(opaque(5000)));
    freed("malloc(1 << 22)", malloc(opaque(1 << 22)));
    freed("calloc(10, 10)", calloc(opaque(10), opaque(10)));
    freed("realloc(NULL, 30)", realloc(NULL, opaque(30)));
    freed("posix_memalign(64, 100)", al);
    freed("aligned_alloc(256, 256)", aligned_alloc(opaque(256), opaque(256)));
    freed("memalign(4096, 10)", memalign(opaque(4096), opaque(10)));
    freed("valloc(10)", valloc(opaque(10)));
    freed("pvalloc(10)", pvalloc(opaque(10)));
    freed("strdup", strdup("abc"));
    freed("strndup", strndup("abcdef", opaque(2)));

    /* Frees in an order unrelated to allocation, each checked, and the freed memory reused. */
    enum { N = 3000 };
    static void *b[N];
    size_t changed = 0;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < N; i++)
            b[i] = malloc(opaque(1 + (i * 131 + (size_t)round) % 9000));
        for (size_t k = 0; k < N; k++) {
            size_t i = (k * 1009 + (size_t)round) % N; /* 1009 is prime to N */
            expect(b[i] != NULL, "malloc in rounds");
            errno = SENTINEL;
            free(b[i]);
            if (errno != SENTINEL) changed++;
            b[i] = NULL;
        }
    }
    printf("3 x %d frees, %zu changed errno\n", N, changed);
    expect(changed == 0, "no free changes errno");

    return finish();
}
