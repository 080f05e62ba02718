/* A program that closes every descriptor from 3 up, as daemons and erl_child_setup do, then
 * reuses the numbers for its own pipes. A tracer that kept a descriptor of its own (libunwind 1.6
 * validates addresses through a private pipe) would now read the program's data from, or write
 * its own into, whatever took that number. */
#include "common.h" /* first: it defines _GNU_SOURCE */

#include <fcntl.h>

static const char *drain(int fd, char *got, int *n)
{
    *n = 0;
    for (;;) {
        char c;
        ssize_t r = read(fd, &c, 1);
        if (r == 1) {
            if (*n < 8) got[(*n)++] = c;
            continue;
        }
        return r == 0 ? "EOF" : errname(errno);
    }
}

int main(void)
{
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    int a[2], b[2];
    expect(pipe(a) == 0 && pipe(b) == 0, "pipe");
    for (int i = 0; i < 2; i++) {
        fcntl(a[i], F_SETFL, O_NONBLOCK);
        fcntl(b[i], F_SETFL, O_NONBLOCK);
    }
    expect(write(a[1], "x", 1) == 1, "write");

    size_t ok = 0;
    for (size_t i = 0; i < 1000; i++) {
        size_t n = 1 + (i * 7919) % 70000;
        char *p = i % 4 ? malloc(opaque(n)) : calloc(opaque(n), opaque(1));
        if (p) {
            fill(p, n, (unsigned)i);
            if (intact(p, n, (unsigned)i)) ok++;
        }
        free(p);
    }
    printf("1000 allocations, %zu intact\n", ok);
    expect(ok == 1000, "allocations intact");

    char got[8];
    int n;
    const char *end = drain(a[0], got, &n);
    printf("first pipe: %d byte(s)", n);
    for (int i = 0; i < n; i++)
        printf(" %02x", (unsigned char)got[i]);
    printf(", then %s\n", end);
    expect(n == 1 && got[0] == 'x' && strcmp(end, "EAGAIN") == 0, "first pipe holds only 'x'");
    end = drain(b[0], got, &n);
    printf("second pipe: %d byte(s), then %s\n", n, end);
    expect(n == 0 && strcmp(end, "EAGAIN") == 0, "nothing written into the second pipe");

    return finish();
}
