/* aligned_alloc: power-of-two alignments from tiny to large, sizes that are and are not
 * multiples of the alignment, and refused sizes and alignments. glibc 2.36 takes any alignment
 * (it rounds up like memalign); whatever it does, the preload must do the same. */
#include "common.h"

int main(void)
{
    static const size_t aligns[] = {1, 2, 8, 16, 64, 4096, 1 << 16, 1 << 21};
    static const size_t sizes[] = {0, 1, 64, 5000, 1 << 21};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            char label[80];
            snprintf(label, sizeof label, "aligned_alloc(%zu, %zu)", aligns[a], sizes[s]);
            int err;
            void *p;
            CALL(err, p = aligned_alloc(opaque(aligns[a]), opaque(sizes[s])));
            expect_block(label, p, err, sizes[s], aligns[a]);
            if (p) {
                fill(p, sizes[s], 2);
                expect(intact(p, sizes[s], 2), "aligned block holds its contents");
            }
            free(p);
        }

    /* Not powers of two: glibc's answer, whichever it is, is printed. */
    static const size_t odd[] = {0, 3, 24, 100, 4097};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        char label[80];
        snprintf(label, sizeof label, "aligned_alloc(%zu, 64)", odd[i]);
        int err;
        void *p;
        CALL(err, p = aligned_alloc(opaque(odd[i]), opaque(64)));
        size_t pow2 = 1;
        while (pow2 < odd[i])
            pow2 <<= 1;
        show(label, p, err, 64, pow2);
        free(p);
    }

    int err;
    void *p;
    CALL(err, p = aligned_alloc(opaque(16), opaque(SIZE_MAX)));
    expect_null("aligned_alloc(16, SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = aligned_alloc(opaque(4096), opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("aligned_alloc(4096, PTRDIFF_MAX+1)", p, err, ENOMEM);
    CALL(err, p = aligned_alloc(opaque(SIZE_MAX / 2 + 2), opaque(16)));
    show("aligned_alloc(SIZE_MAX/2+2, 16)", p, err, 16, 1);
    expect(p == NULL, "an impossible alignment is refused");
    CALL(err, p = aligned_alloc(opaque(SIZE_MAX), opaque(16)));
    show("aligned_alloc(SIZE_MAX, 16)", p, err, 16, 1);
    expect(p == NULL, "an impossible alignment is refused");

    return finish();
}
