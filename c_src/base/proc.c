/* proc.c: reading /proc without malloc or stdio (see proc.h). Directories are read with the
 * getdents64 system call: opendir allocates its buffer with malloc. */
#define _GNU_SOURCE
#include "base/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/mem.h"

static pid_t self;  /* getpid is a system call: a read costs one, not two */
static int refused; /* process_vm_readv is refused here: reads go through /proc/self/mem */

/* process_vm_readv's answer for the same iovecs, read with pread from /proc/self/mem, opened for
 * the call (a descriptor kept open could be closed or reused by the program). */
static long read_mem_file(const struct iovec *local, const struct iovec *remote, size_t n)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/mem", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    long total = 0, got = 0;
    for (size_t i = 0; i < n; i++) {
        got = syscall(SYS_pread64, fd, local[i].iov_base, remote[i].iov_len,
                      (long)(uintptr_t)remote[i].iov_base);
        if (got > 0) total += got;
        if (got != (long)remote[i].iov_len) break;
    }
    int e = errno;
    syscall(SYS_close, fd);
    if (total) return total;
    errno = got < 0 ? e : EFAULT;
    return -1;
}

long mt_proc_readv(const struct iovec *local, const struct iovec *remote, size_t n)
{
    if (!n) return 0;
    if (!__atomic_load_n(&refused, __ATOMIC_RELAXED)) {
        pid_t pid = __atomic_load_n(&self, __ATOMIC_RELAXED);
        if (!pid) {
            pid = (pid_t)syscall(SYS_getpid);
            __atomic_store_n(&self, pid, __ATOMIC_RELAXED);
        }
        long got = syscall(SYS_process_vm_readv, pid, local, n, remote, n, 0UL);
        if (got >= 0 || (errno != EPERM && errno != ENOSYS)) return got;
        __atomic_store_n(&refused, 1, __ATOMIC_RELAXED);
    }
    return read_mem_file(local, remote, n);
}

int mt_proc_read(uintptr_t addr, void *buf, size_t len)
{
    struct iovec local = {buf, len}, remote = {(void *)addr, len};
    return mt_proc_readv(&local, &remote, 1) == (long)len ? 0 : -1;
}

void mt_proc_forked(void)
{
    self = 0;
}

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

int mt_maps_read(struct mt_maps *m)
{
    *m = (struct mt_maps){0};
    for (size_t cap = (size_t)1 << 20;; cap *= 4) {
        if (m->text) mt_mem_unmap(m->text, m->cap);
        if (!(m->text = mt_mem_map(cap))) return -1;
        m->cap = cap;
        int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        size_t n = 0;
        ssize_t got;
        while (n < cap && (got = read(fd, m->text + n, cap - n)) > 0)
            n += (size_t)got;
        close(fd);
        if (n < cap) {
            m->len = n;
            return 0;
        }
    }
}

void mt_maps_drop(struct mt_maps *m)
{
    if (m->text) mt_mem_unmap(m->text, m->cap);
    *m = (struct mt_maps){0};
}

static uintptr_t hex(const char **p, const char *end)
{
    uintptr_t v = 0;
    for (; *p < end; (*p)++) {
        char ch = **p;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + (uintptr_t)d;
    }
    return v;
}

int mt_maps_next(const struct mt_maps *m, size_t *at, struct mt_mapping *out)
{
    const char *end = m->text + m->len;
    for (const char *p = m->text + *at; p < end;) {
        const char *line = p;
        while (p < end && *p != '\n')
            p++;
        const char *eol = p;
        *at = (size_t)(p < end ? p + 1 - m->text : p - m->text);
        const char *q = line;
        out->lo = hex(&q, eol);
        q++;
        out->hi = hex(&q, eol);
        q++;
        if (q + 4 > eol) continue;
        out->readable = q[0] == 'r';
        out->writable = q[1] == 'w';
        /* the path, after five fields */
        for (int field = 0; field < 4 && q < eol; field++) {
            while (q < eol && *q != ' ')
                q++;
            while (q < eol && *q == ' ')
                q++;
        }
        out->path = q;
        out->path_len = (size_t)(eol - q);
        return 1;
    }
    return 0;
}

int mt_maps_find(const struct mt_maps *m, uintptr_t a, struct mt_mapping *out)
{
    for (size_t at = 0; mt_maps_next(m, &at, out);)
        if (a >= out->lo && a < out->hi) return 1;
    return 0;
}

int mt_maps_readable(const struct mt_maps *m, uintptr_t lo, uintptr_t hi)
{
    struct mt_mapping k;
    size_t at = 0;
    while (mt_maps_next(m, &at, &k))
        if (lo >= k.lo && hi <= k.hi && hi >= lo) return k.readable;
    return 0;
}
