/* calloc: zero counts, zeroed memory even where a dirty block is reused, and every product that
 * overflows size_t (including one that wraps to exactly 0) refused with ENOMEM. */
#include "common.h"

static void zeroed(const char *label, size_t count, size_t n)
{
    int err;
    void *p;
    CALL(err, p = calloc(opaque(count), opaque(n)));
    expect_block(label, p, err, count * n, MAX_ALIGN);
    if (p) {
        int zero = all_zero(p, count * n);
        printf("  zeroed:%s\n", zero ? "yes" : "NO");
        expect(zero, "calloc'd memory is zero");
    }
    free(p);
}

int main(void)
{
    zeroed("calloc(0, 0)", 0, 0);
    zeroed("calloc(0, 5)", 0, 5);
    zeroed("calloc(5, 0)", 5, 0);
    zeroed("calloc(1, 1)", 1, 1);
    zeroed("calloc(10, 100)", 10, 100);
    zeroed("calloc(3, 4099)", 3, 4099);
    zeroed("calloc(1, 1 << 20)", 1, 1 << 20);

    /* Blocks freed dirty: calloc must zero whatever it hands back of them. */
    static const size_t sizes[] = {16, 1000, 5000, 300000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *dirty[8];
        for (int k = 0; k < 8; k++) {
            dirty[k] = malloc(opaque(sizes[i]));
            expect(dirty[k] != NULL, "malloc for a dirty block");
            if (dirty[k]) memset(dirty[k], 0xA5, sizes[i]);
        }
        for (int k = 0; k < 8; k++)
            free(dirty[k]);
        char label[64];
        snprintf(label, sizeof label, "calloc(1, %zu) after dirty frees", sizes[i]);
        zeroed(label, 1, sizes[i]);
    }

    int err;
    void *p;
    CALL(err, p = calloc(opaque(SIZE_MAX / 2 + 1), opaque(4)));
    expect_null("calloc(SIZE_MAX/2+1, 4)", p, err, ENOMEM);
    CALL(err, p = calloc(opaque(4), opaque(SIZE_MAX / 2 + 1)));
    expect_null("calloc(4, SIZE_MAX/2+1)", p, err, ENOMEM);
    /* The product wraps to 0, which a careless wrapper would happily allocate. */
    CALL(err, p = calloc(opaque(SIZE_MAX / 2 + 1), opaque(2)));
    expect_null("calloc(SIZE_MAX/2+1, 2)", p, err, ENOMEM);
    CALL(err, p = calloc(opaque(SIZE_MAX), opaque(SIZE_MAX)));
    expect_null("calloc(SIZE_MAX, SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = calloc(opaque(1), opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("calloc(1, PTRDIFF_MAX+1)", p, err, ENOMEM);
    CALL(err, p = calloc(opaque(SIZE_MAX), opaque(1)));
    expect_null("calloc(SIZE_MAX, 1)", p, err, ENOMEM);

    return finish();
}
