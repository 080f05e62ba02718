/* pvalloc: page-aligned, and the size rounded up to whole pages (usable size at least the rounded
 * size), and sizes whose rounding overflows refused. */
#include "common.h"

int main(void)
{
    size_t page = page_size();
    size_t sizes[] = {1, 100, page - 1, page, page + 1, 3 * page - 5, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t rounded = (sizes[s] + page - 1) / page * page;
        char label[80];
        snprintf(label, sizeof label, "pvalloc(%zu pages)", rounded / page);
        int err;
        void *p;
        CALL(err, p = pvalloc(opaque(sizes[s])));
        expect_block(label, p, err, rounded, page);
        if (p) {
            fill(p, rounded, 6);
            expect(intact(p, rounded, 6), "the whole rounded size is usable");
        }
        free(p);
    }

    /* Rounding 0 up gives 0 pages; glibc's answer is printed, whichever it is. */
    int err;
    void *p;
    CALL(err, p = pvalloc(opaque(0)));
    show("pvalloc(0)", p, err, 0, page);
    printf("  usable>=page:%s\n", p && malloc_usable_size(p) >= page ? "yes" : "no");
    free(p);

    CALL(err, p = pvalloc(opaque(SIZE_MAX)));
    expect_null("pvalloc(SIZE_MAX)", p, err, ENOMEM);
    CALL(err, p = pvalloc(opaque(SIZE_MAX - page + 2)));
    expect_null("pvalloc(SIZE_MAX-page+2)", p, err, ENOMEM);
    CALL(err, p = pvalloc(opaque((size_t)PTRDIFF_MAX + 1)));
    expect_null("pvalloc(PTRDIFF_MAX+1)", p, err, ENOMEM);

    return finish();
}
