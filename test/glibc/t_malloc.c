/* malloc: zero and tiny requests, the mmap threshold, sizes glibc must refuse, and many live
 * blocks at once keeping their contents. */
#include "common.h"

int main(void)
{
    int err;
    void *p;

    CALL(err, p = malloc(opaque(0)));
    expect_block("malloc(0)", p, err, 0, MAX_ALIGN);
    free(p);

    static const size_t sizes[] = {1, 8, 24, 25, 100, 4095, 4096, 65536, 200000, 1 << 20, 5 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        char label[64];
        snprintf(label, sizeof label, "malloc(%zu)", n);
        CALL(err, p = malloc(opaque(n)));
        expect_block(label, p, err, n, MAX_ALIGN);
        if (!p) continue;
        fill(p, n, (unsigned)i);
        expect(intact(p, n, (unsigned)i), "contents of a fresh block");
        free(p);
    }

    CALL(err, p = malloc(opaque(SIZE_MAX)));
    expect_null("malloc(SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = malloc(opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("malloc(PTRDIFF_MAX+1)", p, err, ENOMEM);
    CALL(err, p = malloc(opaque(SIZE_MAX - 4096)));
    expect_null("malloc(SIZE_MAX-4096)", p, err, ENOMEM);

    printf("malloc_usable_size(NULL) = %zu\n", malloc_usable_size(NULL));

    /* Blocks of every size class alive together, freed out of allocation order. */
    enum { N = 2000 };
    static void *live[N];
    static size_t len[N];
    for (size_t i = 0; i < N; i++) {
        len[i] = 1 + (i * 7919) % 3000;
        live[i] = malloc(opaque(len[i]));
        expect(live[i] != NULL && malloc_usable_size(live[i]) >= len[i], "a live block");
        if (live[i]) fill(live[i], len[i], (unsigned)i);
    }
    size_t ok = 0;
    for (size_t k = 0; k < N; k++) {
        size_t i = (k * 1237) % N; /* 1237 is prime to N: every index once */
        if (live[i] && intact(live[i], len[i], (unsigned)i)) ok++;
        free(live[i]);
    }
    printf("%d live blocks, %zu intact\n", N, ok);
    expect(ok == N, "every live block intact");

    return finish();
}
