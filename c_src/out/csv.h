/* csv.h: the CSV export of old allocations and of their frees.
 *
 * Each pass appends to the file MTRACE_CSV names (a path template, see writer.h) one row per
 * live block at least MTRACE_CSV_AGE seconds old that no earlier pass wrote ("alloc"), and one
 * row per block an earlier pass wrote that is gone now ("free": an orphan free, whose alloc row
 * is in an earlier part of the file). A block is known by its address, size, allocation time and
 * stack, so an address reused for another block is another row. Frees are seen at the pass
 * after them: their time is the pass's.
 *
 * The file starts with a header row:
 *   event,time,address,size,allocated,tid,kind,stack_id,stack,weight
 * time and allocated are Unix times in seconds with milliseconds; kind is heap or track
 * (mtrace_track); stack is one RFC 4180 quoted field, one frame a line, innermost first; weight
 * is how many blocks the row stands for, to three decimals: 1, or under sampling 1/p for a block
 * sampled with probability p (account.h), so that sum(weight) and sum(size * weight) over a
 * site estimate its blocks and bytes.
 * Records end with CRLF (RFC 4180). The file is created exclusively (writer.h), and written
 * only while the path names that very file (same device and inode): one that is moved or
 * deleted is created again, with a header, at the next pass; one that has passed MTRACE_CSV_MAX
 * bytes is emptied and restarts with a header at the next pass that has rows to write. A file or
 * symbolic link at the path that this process did not create, there before or put in its place, is
 * never written, emptied or followed: one "mtrace:" line, and no CSV while it is there.
 *
 * Contract
 * - Never on the hook path; it allocates (untraced, under the recorder's guard) and symbolizes
 *   with no table slot held. Not thread safe: the caller serializes passes (service.c's lock).
 * - Failures (the file cannot be created or written) give one "mtrace:" line on stderr when they
 *   start, not one per pass; the rows of a pass whose file could not be opened are written by
 *   the next pass that can.
 */
#ifndef MTRACE_CSV_H
#define MTRACE_CSV_H

/* One pass now; prog names the program for %n in the path. */
void mt_csv_pass(const char *prog);

#endif
