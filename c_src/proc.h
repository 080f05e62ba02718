/* proc.h: reading /proc without malloc or stdio: a directory's entries and a status file's field.
 *
 * The world stop lists /proc/self/task and reads each thread's status, reach reads the process's
 * status, and the stack unwinder looks through /proc/self/fd from inside an allocation hook: none
 * of them may allocate, take a lock or use stdio (a stopped thread may hold any of them).
 *
 * Contract
 * - Any thread, the hook path and a stopped world included: open, read, getdents64, close,
 *   on buffers of the stack or the caller's. No malloc, no lock, no stdio.
 * - Each returns what it says below; errno is set only where it says so.
 */
#ifndef MTRACE_PROC_H
#define MTRACE_PROC_H

#include <stddef.h>

/* Calls fn(dir_fd, name, arg) for each entry of the directory at path ("." and ".." included),
 * until fn returns nonzero; dir_fd is the directory, open until mt_proc_each returns, for the
 * *at() calls. Returns fn's nonzero answer, 0 when every entry was seen, or -1 with errno when
 * the directory cannot be opened or read. */
int mt_proc_each(const char *path, int (*fn)(int dir_fd, const char *name, void *arg), void *arg);

/* The value of field (e.g. "SigBlk:") in a /proc status file at path, read into text (cap
 * bytes): a pointer to its first character past the blanks, or NULL when the file cannot be
 * read or has no such line within cap. */
const char *mt_proc_field(const char *path, const char *field, char *text, size_t cap);

#endif
