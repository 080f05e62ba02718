/* proc.c: reading /proc without malloc or stdio (see proc.h). Directories are read with the
 * getdents64 system call: opendir allocates its buffer with malloc. */
#define _GNU_SOURCE
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int mt_proc_each(const char *path, int (*fn)(int dir_fd, const char *name, void *arg), void *arg)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buf[2048] __attribute__((aligned(8))); /* small: this may run inside a hook */
    long got;
    int answer = 0;
    while (!answer && (got = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long at = 0; at < got && !answer;) {
            const struct dirent64 *d = (const struct dirent64 *)(buf + at);
            at += d->d_reclen;
            answer = fn(fd, d->d_name, arg);
        }
    int e = errno;
    close(fd);
    if (!answer && got < 0) {
        errno = e;
        return -1;
    }
    return answer;
}

const char *mt_proc_field(const char *path, const char *field, char *text, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    ssize_t got = read(fd, text, cap - 1);
    close(fd);
    if (got <= 0) return NULL;
    text[got] = '\0';
    size_t len = strlen(field);
    const char *v = text;
    while (v && strncmp(v, field, len) != 0)
        if ((v = strchr(v, '\n'))) v++;
    if (!v) return NULL;
    for (v += len; *v == ' ' || *v == '\t'; v++)
        ;
    return v;
}
