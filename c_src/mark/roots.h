/* roots.h: what marked a block first in a mark with paths (reach.h's mt_reach_paths), named: a
 * stopped thread's thread-local storage (an object's static TLS block, or the thread's control
 * block) or stack, a loaded object's data (by its data symbol, symbols.h), a register, an
 * alternate signal stack, or another mapping (/proc/self/maps). The NIF makes terms of it
 * (why/2, top/2's why:); a text report can print it.
 *
 * Contract
 * - After the threads go on: it lists the loaded objects (dl_iterate_phdr, the loader's lock),
 *   reads /proc/self/maps and symbolizes data (symbols.h: may allocate, takes its mutex). Any
 *   thread holding the recorder's guard, as every reader does.
 * - The strings in *out are its own (copied in) or the symbol tables' (alive while their module
 *   is loaded): read them before the next unload.
 */
#ifndef MTRACE_ROOTS_H
#define MTRACE_ROOTS_H

#include <stdint.h>
#include <sys/types.h>

#include "mark/reach.h"

enum mt_root_kind {
    MT_ROOT_TLS,      /* tid, via; library NULL: the control block, offset from the thread
                       * pointer; else the object, offset in its block */
    MT_ROOT_STACK,    /* tid, via; offset from its stack pointer (negative in the red zone);
                       * ip: the code of the frame that holds via, when the stopped thread's
                       * frames were known that far (cfi.h); lookup: the address to symbolize
                       * it by (symbols.h: a return address), ip + 1 for the instruction it was
                       * stopped at (frame 0) */
    MT_ROOT_STATIC,   /* via; library, symbol (NULL when none covers it), offset in it or in
                       * the file */
    MT_ROOT_MAPPING,  /* via; lo and hi (0 when no mapping holds it), library: its path ("" for
                       * anonymous memory); allocator: the VM's allocator whose carrier holds
                       * via ("" when none, layouts.h) */
    MT_ROOT_REGISTER, /* tid, reg: the register's name */
    MT_ROOT_ALTSTACK, /* tid */
    MT_ROOT_LOST,     /* none: the chain starts at a direct lost block */
};

struct mt_root {
    enum mt_root_kind kind;
    uintptr_t via;
    pid_t tid;
    int64_t offset;
    uintptr_t lo, hi;
    const char *library, *symbol, *reg;
    uintptr_t ip, lookup;
    char text[256]; /* a TLS object's or a mapping's path, which library points to */
    char allocator[32];
    char thread[16]; /* the name of tid (its comm), "" when it has none or has gone */
};

/* Names what marked record i of r first. */
void mt_root_name(const struct mt_reach *r, size_t i, struct mt_root *out);

#endif
