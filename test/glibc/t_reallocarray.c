/* reallocarray: like realloc with count * size, except that an overflowing product is refused
 * with ENOMEM before anything is freed, so the old block must stay valid. */
#include "common.h"

static char *p;
static size_t kept;

static void refused(const char *label, size_t count, size_t n)
{
    int err;
    void *q;
    CALL(err, q = reallocarray(p, opaque(count), opaque(n)));
    expect_null(label, q, err, ENOMEM);
    int same = intact(p, kept, 3);
    printf("  old block intact:%s\n", same ? "yes" : "NO");
    expect(same, "a refused reallocarray keeps the old block");
    fill(p, kept, 3); /* written after the failure: the block is still ours */
    expect(intact(p, kept, 3), "old block writable");
}

int main(void)
{
    int err;
    char *q;

    CALL(err, q = reallocarray(NULL, opaque(10), opaque(10)));
    expect_block("reallocarray(NULL, 10, 10)", q, err, 100, MAX_ALIGN);
    free(q);
    CALL(err, q = reallocarray(NULL, opaque(0), opaque(0)));
    expect_block("reallocarray(NULL, 0, 0)", q, err, 0, MAX_ALIGN);
    free(q);
    CALL(err, q = reallocarray(NULL, opaque(SIZE_MAX / 2 + 1), opaque(2)));
    expect_null("reallocarray(NULL, SIZE_MAX/2+1, 2)", q, err, ENOMEM);

    static const size_t counts[] = {1, 4, 50, 1000, 40000, 3};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        size_t n = counts[i] * 8;
        char label[64];
        snprintf(label, sizeof label, "reallocarray(p, %zu, 8)", counts[i]);
        CALL(err, q = reallocarray(p, opaque(counts[i]), opaque(8)));
        expect_block(label, q, err, n, MAX_ALIGN);
        if (!q) return finish();
        size_t common_len = kept < n ? kept : n;
        int same = intact(q, common_len, 3);
        printf("  first %zu bytes kept:%s\n", common_len, same ? "yes" : "NO");
        expect(same, "reallocarray keeps the contents");
        fill(q, n, 3);
        kept = n;
        p = q;
    }

    refused("reallocarray(p, SIZE_MAX/2+1, 4)", SIZE_MAX / 2 + 1, 4);
    refused("reallocarray(p, 4, SIZE_MAX/4+1)", 4, SIZE_MAX / 4 + 1);
    refused("reallocarray(p, SIZE_MAX/2+1, 2)", SIZE_MAX / 2 + 1,
            2); /* wraps to 0: must not free */
    refused("reallocarray(p, SIZE_MAX, SIZE_MAX)", SIZE_MAX, SIZE_MAX);
    refused("reallocarray(p, 1, SIZE_MAX)", 1, SIZE_MAX); /* no overflow: realloc itself refuses */
    refused("reallocarray(p, 2, PTRDIFF_MAX/2+1)", 2, (size_t)PTRDIFF_MAX / 2 + 1);

    /* A zero product frees p like realloc(p, 0) (glibc 2.36), errno untouched. */
    CALL(err, q = reallocarray(p, opaque(0), opaque(8)));
    printf("reallocarray(p, 0, 8): %s errno=%s\n", q ? "block" : "NULL", errname(err));
    expect(q == NULL && err == SENTINEL, "reallocarray(p, 0, 8) frees p and returns NULL");
    free(q);

    return finish();
}
