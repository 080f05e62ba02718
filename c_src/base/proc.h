/* proc.h: reading /proc without malloc or stdio: a directory's entries, a status file's field,
 * and the process's mappings; and reading the process's own memory where it may be unmapped.
 *
 * The world stop lists /proc/self/task and reads each thread's status, reach reads the process's
 * status, and the stack unwinder looks through /proc/self/fd from inside an allocation hook: none
 * of them may allocate, take a lock or use stdio (a stopped thread may hold any of them).
 *
 * Contract
 * - Any thread, the hook path and a stopped world included: open, read, getdents64, close and
 *   process_vm_readv (or, where a seccomp profile refuses it, as Docker's default one does, pread
 *   of /proc/self/mem), on buffers of the stack or the caller's (the mappings: in mtrace's own
 *   memory, mem.h). No malloc, no lock, no stdio.
 * - Each returns what it says below; errno is set only where it says so.
 */
#ifndef MTRACE_PROC_H
#define MTRACE_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* process_vm_readv of this process's own memory, each local[i] as long as remote[i]: the bytes
 * read, in order, up to the first element that cannot be read whole (an unmapped word fails,
 * never faults), or -1 with errno when not even the first can. Where the system call is refused
 * (EPERM, ENOSYS: a seccomp profile), this and every later read goes through /proc/self/mem
 * instead, opened for the call, which reads PROT_NONE pages too. The pid is kept from the first
 * call; mt_proc_forked() forgets it in a forked child. The mark and the heap walk read in place
 * where the call is refused (reach.h, glibc_heap.h): a system call a block would cost them more. */
long mt_proc_readv(const struct iovec *local, const struct iovec *remote, size_t n);
/* Copies len bytes at addr into buf with mt_proc_readv: 0, or -1 when any of them cannot be
 * read. */
int mt_proc_read(uintptr_t addr, void *buf, size_t len);
void mt_proc_forked(void);

/* Calls fn(dir_fd, name, arg) for each entry of the directory at path ("." and ".." included),
 * until fn returns nonzero; dir_fd is the directory, open until mt_proc_each returns, for the
 * *at() calls. Returns fn's nonzero answer, 0 when every entry was seen, or -1 with errno when
 * the directory cannot be opened or read. */
int mt_proc_each(const char *path, int (*fn)(int dir_fd, const char *name, void *arg), void *arg);

/* The value of field (e.g. "SigBlk:") in a /proc status file at path, read into text (cap
 * bytes): a pointer to its first character past the blanks, or NULL when the file cannot be
 * read or has no such line within cap. */
const char *mt_proc_field(const char *path, const char *field, char *text, size_t cap);

/* /proc/self/maps, read whole into mtrace's memory (mem.h), so that the scans that take it for
 * their list of memory never see it as a root of their own. */
struct mt_maps {
    char *text;
    size_t len, cap;
};

/* One line of it: [lo, hi), readable and writable, its path (not NUL-terminated; len 0 for
 * anonymous memory). */
struct mt_mapping {
    uintptr_t lo, hi;
    int readable, writable;
    const char *path;
    size_t path_len;
};

/* Reads the mappings; returns 0, or -1 with errno. mt_maps_drop() releases them. */
int mt_maps_read(struct mt_maps *m);
void mt_maps_drop(struct mt_maps *m);

/* The mapping after *at (start with *at = 0): returns 1 and fills *out, or 0 at the end. */
int mt_maps_next(const struct mt_maps *m, size_t *at, struct mt_mapping *out);

/* The mapping that holds a, into *out: 1, or 0 when none does. */
int mt_maps_find(const struct mt_maps *m, uintptr_t a, struct mt_mapping *out);

/* Whether [lo, hi) lies inside one readable mapping. */
int mt_maps_readable(const struct mt_maps *m, uintptr_t lo, uintptr_t hi);

#endif
