/* valloc: page-aligned blocks of any size, and refused sizes. */
#include "common.h"

int main(void)
{
    size_t page = page_size();
    size_t sizes[] = {0, 1, 100, page - 1, page, page + 1, 3 * page, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        char label[80];
        snprintf(label, sizeof label, "valloc(%zu)", sizes[s]);
        int err;
        void *p;
        CALL(err, p = valloc(opaque(sizes[s])));
        expect_block(label, p, err, sizes[s], page);
        if (p) {
            fill(p, sizes[s], 5);
            expect(intact(p, sizes[s], 5), "valloc'd block holds its contents");
        }
        free(p);
    }

    int err;
    void *p;
    CALL(err, p = valloc(opaque(SIZE_MAX)));
    expect_null("valloc(SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = valloc(opaque(SIZE_MAX - page)));
    expect_null("valloc(SIZE_MAX-page)", p, err, ENOMEM);
    CALL(err, p = valloc(opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("valloc(PTRDIFF_MAX+1)", p, err, ENOMEM);

    return finish();
}
