/* realloc: NULL acts as malloc, growth and shrinking keep the contents (through the mmap
 * threshold and back), a refused request leaves the old block valid, and size 0 frees. */
#include "common.h"

int main(void)
{
    int err;
    char *p, *q;

    CALL(err, p = realloc(NULL, opaque(100)));
    expect_block("realloc(NULL, 100)", p, err, 100, MAX_ALIGN);
    free(p);
    CALL(err, p = realloc(NULL, opaque(0)));
    expect_block("realloc(NULL, 0)", p, err, 0, MAX_ALIGN);
    free(p);

    static const size_t steps[] = {16, 17, 100, 5000, 300000, 2 << 20, 3 << 20, 40, 10, 200000};
    size_t kept = 0;
    p = NULL;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        char label[64];
        snprintf(label, sizeof label, "realloc(p, %zu)", n);
        CALL(err, q = realloc(p, opaque(n)));
        expect_block(label, q, err, n, MAX_ALIGN);
        if (!q) break;
        size_t common_len = kept < n ? kept : n;
        int same = intact(q, common_len, 7);
        printf("  first %zu bytes kept:%s\n", common_len, same ? "yes" : "NO");
        expect(same, "realloc keeps the contents");
        fill(q, n, 7);
        kept = n;
        p = q;
    }

    /* Refused: NULL, ENOMEM, and p untouched and still usable. */
    static const struct {
        size_t n;
        const char *label;
    } refused[] = {
        {SIZE_MAX, "realloc(p, SIZE_MAX)"},
        {(size_t)PTRDIFF_MAX + 1, "realloc(p, PTRDIFF_MAX+1)"},
        {SIZE_MAX - 100, "realloc(p, SIZE_MAX-100)"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CALL(err, q = realloc(p, opaque(refused[i].n)));
        expect_null(refused[i].label, q, err, ENOMEM);
        int same = intact(p, kept, 7);
        printf("  old block intact:%s\n", same ? "yes" : "NO");
        expect(same, "a refused realloc keeps the old block");
        fill(p, kept, 7);
    }

    /* glibc 2.36 frees p and returns NULL, errno untouched. */
    CALL(err, q = realloc(p, opaque(0)));
    printf("realloc(p, 0): %s errno=%s\n", q ? "block" : "NULL", errname(err));
    expect(q == NULL && err == SENTINEL, "realloc(p, 0) frees p and returns NULL");
    free(q);

    /* Many blocks grown in turns, so that each move lands among other live blocks. */
    enum { N = 200 };
    static char *b[N];
    static size_t len[N];
    for (int round = 1; round <= 5; round++)
        for (size_t i = 0; i < N; i++) {
            size_t n = (i % 13 + 1) * (size_t)round * 37;
            char *r = realloc(b[i], opaque(n));
            expect(r != NULL, "realloc in turns");
            if (!r) continue;
            expect(intact(r, len[i], (unsigned)i), "contents survive turns of realloc");
            fill(r, n, (unsigned)i);
            b[i] = r;
            len[i] = n;
        }
    for (size_t i = 0; i < N; i++)
        free(b[i]);
    printf("%d blocks grown in 5 turns\n", N);

    return finish();
}
