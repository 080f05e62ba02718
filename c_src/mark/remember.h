/* remember.h: scans that add up. A block a complete scan found lost stays lost until it is freed:
 * it cannot become reachable again in a correct program, while a stale word that appears later
 * (a conservative mark's false reference) could keep it.
 *
 * Contract
 * - mt_remember(r), called once r is known to be complete (reach.h's mt_reach_rule() said
 *   MT_LOST_KNOWN), sets the lost bit of each lost recorded block's record (table.h); every later
 *   mt_reach_run() then marks no such block from any word, and reads none of its words, so it and
 *   what only it reaches are lost again. A freed block's record goes, and a block allocated at
 *   its address gets a new record, without the bit. Blocks without a record
 *   (MT_SNAPSHOT_UNRECORDED) are neither kept lost nor counted.
 * - It also counts the scan for each stack id with lost blocks in r: mt_remembered_scans() says
 *   how many remembered scans found lost blocks of a stack (0 for none).
 * - Thread safe (a mutex); mt_remember takes the table's turn, so never while the threads are
 *   stopped. Its counts live in mtrace's own memory (mem.h), never a root; growing them may fail
 *   (a stack then goes uncounted, its records still marked lost).
 */
#ifndef MTRACE_REMEMBER_H
#define MTRACE_REMEMBER_H

#include <stdint.h>

#include "mark/reach.h"

void mt_remember(const struct mt_reach *r);
unsigned mt_remembered_scans(uint32_t stack);

#endif
