/* strdup: empty, short, and long strings (past the mmap threshold), copies that are distinct
 * from their source, and a source that ends exactly at the end of its mapping. */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <sys/mman.h>

static char *checked(const char *label, const char *s)
{
    size_t len = strlen(s);
    int err;
    char *p;
    CALL(err, p = strdup(s));
    expect_block(label, p, err, len + 1, 1);
    if (!p) return NULL;
    int same = strcmp(p, s) == 0 && p[len] == '\0';
    printf("  copy equal:%s distinct:%s\n", same ? "yes" : "NO", p != s ? "yes" : "NO");
    expect(same && p != s, "strdup copies");
    return p;
}

int main(void)
{
    free(checked("strdup(\"\")", ""));
    free(checked("strdup(\"a\")", "a"));

    char *p = checked("strdup(\"hello, world\")", "hello, world");
    if (p) {
        p[0] = 'J';
        printf("  writing the copy: %s\n", p);
        free(p);
    }

    size_t n = 300000;
    char *big = malloc(opaque(n + 1));
    expect(big != NULL, "malloc for the long string");
    if (big) {
        for (size_t i = 0; i < n; i++)
            big[i] = (char)('a' + i % 26);
        big[n] = '\0';
        free(checked("strdup(300000 chars)", big));
        free(big);
    }

    /* The terminator is the last byte before an inaccessible page: no read past it. */
    size_t page = page_size();
    char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    expect(map != MAP_FAILED && mprotect(map + page, page, PROT_NONE) == 0, "guard page");
    if (map != MAP_FAILED) {
        memcpy(map + page - 4, "end", 4);
        free(checked("strdup(\"end\" at a page end)", map + page - 4));
        munmap(map, 2 * page);
    }

    /* Many copies alive at once. */
    enum { N = 1000 };
    static char *copies[N];
    char src[64];
    size_t ok = 0;
    for (size_t i = 0; i < N; i++) {
        snprintf(src, sizeof src, "string number %zu", i);
        copies[i] = strdup(src);
    }
    for (size_t i = 0; i < N; i++) {
        snprintf(src, sizeof src, "string number %zu", i);
        if (copies[i] && strcmp(copies[i], src) == 0) ok++;
        free(copies[i]);
    }
    printf("%d copies, %zu intact\n", N, ok);
    expect(ok == N, "every copy intact");

    return finish();
}
