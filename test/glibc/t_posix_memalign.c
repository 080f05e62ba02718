/* posix_memalign: every valid alignment honoured; an invalid one (not a power-of-two multiple of
 * sizeof(void *)) gives EINVAL without touching errno or *memptr; a refused size gives ENOMEM
 * and leaves *memptr alone too. */
#include "common.h"

static char marker;
#define UNTOUCHED ((void *)&marker)

int main(void)
{
    static const size_t aligns[] = {sizeof(void *), 16, 32, 64, 256, 4096, 65536, 1 << 22};
    static const size_t sizes[] = {0, 1, 100, 4096, 300000};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            char label[80];
            snprintf(label, sizeof label, "posix_memalign(%zu, %zu)", aligns[a], sizes[s]);
            void *p = UNTOUCHED;
            int err, rc;
            CALL(err, rc = posix_memalign(&p, opaque(aligns[a]), opaque(sizes[s])));
            printf("rc=%s ", errname(rc));
            expect(rc == 0, label);
            expect_block(label, rc == 0 ? p : NULL, err, sizes[s], aligns[a]);
            if (rc == 0 && p) {
                fill(p, sizes[s], 1);
                expect(intact(p, sizes[s], 1), "aligned block holds its contents");
                free(p);
            }
        }

    static const size_t bad[] = {0, 1, 2, 3, 4, 12, sizeof(void *) * 3, 40, 4097, SIZE_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *p = UNTOUCHED;
        int err, rc;
        CALL(err, rc = posix_memalign(&p, opaque(bad[i]), opaque(64)));
        printf("posix_memalign(%zu, 64): rc=%s errno=%s memptr %s\n", bad[i], errname(rc),
               errname(err), p == UNTOUCHED ? "untouched" : "CHANGED");
        expect(rc == EINVAL && err == SENTINEL && p == UNTOUCHED, "bad alignment: EINVAL only");
    }

    static const size_t huge[][2] = {
        {16, SIZE_MAX},
        {4096, SIZE_MAX - 4096},
        {64, (size_t)PTRDIFF_MAX + 1},
        {SIZE_MAX / 2 + 1, 1},
    };
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        void *p = UNTOUCHED;
        int err, rc;
        CALL(err, rc = posix_memalign(&p, opaque(huge[i][0]), opaque(huge[i][1])));
        /* errno is whatever glibc's internals left: the preload must leave the same. */
        printf("posix_memalign(%zu, %zu): rc=%s errno=%s memptr %s\n", huge[i][0], huge[i][1],
               errname(rc), errname(err), p == UNTOUCHED ? "untouched" : "CHANGED");
        expect(rc == ENOMEM && p == UNTOUCHED, "refused size: ENOMEM, memptr untouched");
    }

    return finish();
}
