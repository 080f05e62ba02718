/* memalign: alignments below malloc's own (plain malloc), non-powers of two (rounded up), large
 * ones, and refused sizes and alignments. */
#include "common.h"

int main(void)
{
    static const size_t aligns[] = {0, 1, 3, 8, 16, 24, 48, 64, 100, 4096, 1 << 16, 1 << 21};
    static const size_t sizes[] = {0, 1, 100, 4096, 1 << 20};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            /* What glibc guarantees: the next power of two, and never less than malloc's. */
            size_t want = MAX_ALIGN;
            while (want < aligns[a])
                want <<= 1;
            char label[80];
            snprintf(label, sizeof label, "memalign(%zu, %zu)", aligns[a], sizes[s]);
            int err;
            void *p;
            CALL(err, p = memalign(opaque(aligns[a]), opaque(sizes[s])));
            expect_block(label, p, err, sizes[s], want);
            if (p) {
                fill(p, sizes[s], 4);
                expect(intact(p, sizes[s], 4), "aligned block holds its contents");
            }
            free(p);
        }

    int err;
    void *p;
    CALL(err, p = memalign(opaque(64), opaque(SIZE_MAX)));
    expect_null("memalign(64, SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = memalign(opaque(64), opaque(SIZE_MAX - 100)));
    expect_null("memalign(64, SIZE_MAX-100)", p, err, ENOMEM);
    CALL(err, p = memalign(opaque(16), opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("memalign(16, PTRDIFF_MAX+1)", p, err, ENOMEM);
    CALL(err, p = memalign(opaque(SIZE_MAX / 2 + 2), opaque(1)));
    expect_null("memalign(SIZE_MAX/2+2, 1)", p, err, EINVAL);
    CALL(err, p = memalign(opaque(SIZE_MAX), opaque(1)));
    expect_null("memalign(SIZE_MAX, 1)", p, err, EINVAL);

    return finish();
}
