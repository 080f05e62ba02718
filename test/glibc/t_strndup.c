/* strndup: n below, at and above strlen (up to SIZE_MAX), n = 0, and a source that is not
 * terminated within n bytes and ends at an inaccessible page, so no byte past n may be read. */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <sys/mman.h>

static void checked(const char *label, const char *s, size_t n, const char *want)
{
    size_t len = strlen(want);
    int err;
    char *p;
    CALL(err, p = strndup(s, opaque(n)));
    expect_block(label, p, err, len + 1, 1);
    if (!p) return;
    int same = memcmp(p, want, len + 1) == 0;
    printf("  copy \"%s\" equal:%s distinct:%s\n", p, same ? "yes" : "NO", p != s ? "yes" : "NO");
    expect(same && p != s, "strndup copies at most n bytes and terminates");
    free(p);
}

int main(void)
{
    const char *s = "hello";
    checked("strndup(s, 0)", s, 0, "");
    checked("strndup(s, 1)", s, 1, "h");
    checked("strndup(s, 3)", s, 3, "hel");
    checked("strndup(s, 5)", s, 5, "hello");
    checked("strndup(s, 6)", s, 6, "hello");
    checked("strndup(s, 100)", s, 100, "hello");
    checked("strndup(s, SIZE_MAX)", s, SIZE_MAX, "hello");
    checked("strndup(\"\", 10)", "", 10, "");

    char unterminated[4] = {'a', 'b', 'c', 'd'};
    checked("strndup(unterminated, 4)", unterminated, 4, "abcd");
    checked("strndup(unterminated, 2)", unterminated, 2, "ab");

    size_t page = page_size();
    char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    expect(map != MAP_FAILED && mprotect(map + page, page, PROT_NONE) == 0, "guard page");
    if (map != MAP_FAILED) {
        memcpy(map + page - 4, "wxyz", 4);
        checked("strndup(4 chars at a page end, 4)", map + page - 4, 4, "wxyz");
        checked("strndup(4 chars at a page end, 3)", map + page - 4, 3, "wxy");
        munmap(map, 2 * page);
    }

    size_t n = 200000;
    char *big = malloc(opaque(n + 1));
    expect(big != NULL, "malloc for the long string");
    if (big) {
        memset(big, 'q', n);
        big[n] = '\0';
        int err;
        char *p;
        CALL(err, p = strndup(big, opaque(n - 1)));
        expect_block("strndup(200000 chars, 199999)", p, err, n, 1);
        if (p) {
            int ok = strlen(p) == n - 1 && memcmp(p, big, n - 1) == 0;
            printf("  copy of 199999 equal:%s\n", ok ? "yes" : "NO");
            expect(ok, "long strndup");
        }
        free(p);
        free(big);
    }

    return finish();
}
