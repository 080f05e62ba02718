/* symbols.h: instruction addresses to {library path, function name}, in C.
 *
 * Contract
 * - Never called on the allocation hook path: it takes a mutex, reads ELF files and allocates
 *   with malloc. Callers (the NIF, reports) run it after they have copied records out of the
 *   live table, so no allocating thread ever waits for it.
 * - Thread safe: every function may be called from any thread; a single mutex guards the cache
 *   of loaded modules and their symbol tables.
 * - Names come from the ELF .symtab when the file has one (static functions included), else
 *   from .dynsym. Separate debug files are not read.
 * - Demangling (C++ and Rust) is done by libiberty's cplus_demangle in this process: no shell,
 *   no subprocess.
 * - Strings returned are interned and stay valid for the life of the process; the caller never
 *   frees them. Modules are keyed by path, load address and the file's inode, size and mtime,
 *   so a library unloaded and another loaded at the same address is read afresh. The module
 *   list is walked again whenever the loader's dlopen/dlclose count has moved.
 * - An IFUNC resolves to the implementation chosen at load time, whose name is often only in
 *   .symtab: in a stripped library such an address may get a path but no name.
 */
#ifndef MTRACE_SYMBOLS_H
#define MTRACE_SYMBOLS_H

#include <stdint.h>

struct mt_symbol {
    const char *path; /* the module's file path; NULL when no loaded module holds the address */
    const char *name; /* function name (demangled if asked), NULL when none covers the address */
    uintptr_t base;   /* the module's load bias: ip - base is the address in its ELF file */
};

/* Resolves a return address (or a hook's entry + 1): the lookup is done at ip - 1 so that a
 * call in the last instruction of a function is not attributed to the next one. Returns 0 and
 * fills *out; returns -1 with out->path = NULL when no loaded module contains the address. */
int mt_symbolize(uintptr_t ip, int demangle, struct mt_symbol *out);

#endif
