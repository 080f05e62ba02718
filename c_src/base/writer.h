/* writer.h: buffered text output to a file descriptor, and the creation of mtrace's own files.
 *
 * Contract
 * - Never on the hook path, but for mt_say(), which config.c calls from the first allocation
 *   (its line is on the stack, 1 KiB), and mt_utoa() and mt_path_expand(), which only write to
 *   the caller's buffer. Output goes through write(2) alone: no stdio (which may
 *   allocate and shares its buffers with the program) and no malloc; the buffer lives inside
 *   struct mt_out.
 * - Every "mtrace:" message that quotes a variable's value or a path goes through mt_say(), so
 *   that the value can neither break the line nor put control bytes on the terminal.
 * - Not thread safe: one struct mt_out belongs to one thread at a time.
 * - Errors stick: the first failing write(2) stores its errno in err and every later call does
 *   nothing, so a caller checks once, with mt_out_flush().
 * - mt_file_create() never follows a symbolic link at the path and never opens a file that
 *   exists already: O_CREAT | O_EXCL | O_NOFOLLOW, so no planted link or earlier file can be
 *   overwritten or truncated.
 */
#ifndef MTRACE_WRITER_H
#define MTRACE_WRITER_H

#include <stddef.h>
#include <stdint.h>

struct mt_out {
    int fd;
    int err; /* errno of the first failed write, 0 while all is well */
    size_t n;
    char buf[8192];
};

void mt_out_init(struct mt_out *o, int fd);
void mt_out_mem(struct mt_out *o, const char *s, size_t len);
void mt_out_str(struct mt_out *o, const char *s);
void mt_out_u64(struct mt_out *o, uint64_t v);
/* With plus set, a positive value is written with its sign ("+12"): report deltas. */
void mt_out_i64(struct mt_out *o, int64_t v, int plus);
void mt_out_hex(struct mt_out *o, uint64_t v);
/* s with every '"' doubled: the inside of an RFC 4180 quoted field (the caller writes the
 * enclosing quotes). */
void mt_out_quoted(struct mt_out *o, const char *s);
/* Writes what is buffered. Returns 0, or -1 with errno set to the first error seen. */
int mt_out_flush(struct mt_out *o);

/* v in decimal, written so that its terminating NUL is end[-1] (end must have 21 bytes before
 * it); returns its first digit. */
char *mt_utoa(uint64_t v, char *end);

/* Expands a path template: %p the pid, %n the program name, %s seq, %% a '%'; any other
 * character, an unknown %x included, is copied. Returns 0, or -1 when the result does not fit
 * in cap bytes. */
int mt_path_expand(const char *tmpl, const char *prog, unsigned seq, char *out, size_t cap);

/* Creates path for writing, mode 0600: reports and CSV rows hold heap and library addresses,
 * which would help another user attack the process. Returns the descriptor (close-on-exec), or
 * -1 with errno set (EEXIST when anything, a link included, is there already). */
int mt_file_create(const char *path);

/* One line on stderr, "mtrace: " and the parts, in one write(2), whatever the parts hold: a
 * backslash is written \\, a byte below 0x20, 0x7f or above it \xNN, and a part is cut with
 * "..." at MT_SAY_PART bytes (escapes counted), the line at MT_SAY_LINE. */
#define MT_SAY_PART 200
#define MT_SAY_LINE 1024
void mt_say(const char *const *parts, size_t count);

/* mt_say of "<what>: <path>: <strerror(err)>". */
void mt_say_error(const char *what, const char *path, int err);

#endif
