/* symbols.h: instruction addresses to frames: library, function, offset, source file and line,
 * with inlined functions expanded.
 *
 * Contract
 * - Never called on the allocation hook path: it takes a mutex, reads ELF and DWARF files and
 *   allocates with malloc. Callers (the NIF, reports, the CSV export) hold the recorder's guard,
 *   so that nothing it allocates is traced, and run it after they have copied records out of the
 *   live table; it is never called while other threads are stopped.
 * - Thread safe: one mutex guards the module history and the caches.
 * - Code in no module is the BEAM's JIT code: it is named, with its Erlang file and line, from
 *   the modules the VM registers for a debugger (the GDB JIT interface, symbols/jit.c: walked
 *   again when its list changed, each module's entry read the first time it is asked about),
 *   else from the BEAM's perf map (/tmp/perf-<pid>.map, written when the node runs with
 *   +JPperf map), read again when it has grown (symbols/perf.c): "Mod:fun/arity" as the BEAM
 *   writes it, with erlang set. Where code was purged and other code loaded at its address, the
 *   latest module or line that may have been there when the stack was made names it: a stack
 *   made before the reload, read only after it, may get the new code's name.
 * - Two backends behind one answer for native code. Function names come from the ELF .symtab
 *   (static functions included), else .dynsym with the .symtab of a .gnu_debugdata section
 *   (MiniDebugInfo); the function an address is in keeps its symbol table name, DWARF's when
 *   no table names it, and inlined functions have DWARF's names. Source file and line, and the
 *   functions inlined at the address, come from DWARF through libdwfl, in the file itself or in
 *   a separate debug file found by build id (DIR/.build-id/xx/yyyy.debug) or by
 *   .gnu_debuglink (beside the file, in its .debug directory, or under DIR plus the file's
 *   directory), for each DIR of MTRACE_DEBUG_DIRS (colon-separated, read once) and then
 *   /usr/lib/debug. debuginfod is never asked. Without DWARF a frame has no file and line, and
 *   no inlined frames.
 * - Demangling (C++ and Rust) is done by libiberty's cplus_demangle in this process: no shell,
 *   no subprocess.
 * - Strings returned are interned and stay valid for the life of the process; the caller never
 *   frees them. Answers are cached per module and address.
 * - Unloaded libraries. Stacks are recorded without a note of what was loaded then; instead the
 *   loader's module list is walked (dl_iterate_phdr) at mt_symbols_start(), just before and just
 *   after each dlclose the program calls, and whenever a lookup finds that the loader's load and
 *   unload counts have moved. Each walk reads the clock (the number of interned stacks) under the
 *   loader's lock, so that every stack id falls between two walks; a walk is exact when the
 *   loader's unload count moved by as many modules as it found gone (only an unload can hide a
 *   module from the walks: one loaded since and still there is found). A thread cannot be inside
 *   a library while it is unloaded, so a frame's module is among those of the walk before its
 *   stack and the walk after. The same module in both, or exactly one of them after an exact
 *   walk, names the frame (MT_FRAME_UNLOADED when it has been unloaded since; its names and lines
 *   are still read from its file, if unchanged). Two different modules, or one of them after an
 *   inexact walk, mean the code there then is not known: MT_FRAME_REPLACED, with no path or name.
 *   So a frame is never named after a library loaded at its address after the stack was made.
 *   Not told apart: a module unloaded and loaded again, from the same file at the same address,
 *   between two walks with another module at that address in between; and a stack recorded
 *   again (the same addresses, so the same id) in a library loaded later at the address of the
 *   one it was first seen in.
 * - An IFUNC resolves to the implementation chosen at load time, whose name is often only in
 *   .symtab: in a stripped library such an address may get a path but no name.
 * - The DWARF backend keeps each module's file, and its debug file, open (libdwfl holds the
 *   descriptors) and mapped for the life of the process.
 */
#ifndef MTRACE_SYMBOLS_H
#define MTRACE_SYMBOLS_H

#include <stdint.h>

enum { MT_FRAME_LOADED, MT_FRAME_UNLOADED, MT_FRAME_REPLACED };

struct mt_frame_info {
    const char *path;     /* the module's file; NULL outside any module, and when REPLACED */
    const char *function; /* demangled if asked; NULL when no symbol or DWARF names one */
    uintptr_t offset; /* ip - the module's load bias (the address in its file); 0 without path */
    const char *file; /* source file, NULL without DWARF line information */
    int line;         /* 0 with file NULL */
    int inlined;      /* inlined into the next frame, which has the same ip */
    int unloaded;     /* MT_FRAME_*: the module is loaded, unloaded since, or not known */
    int erlang;       /* JIT code, named: function is its name, path NULL */
};

/* The most frames one address expands to; deeper inline chains keep their innermost frames
 * and the function they are in. */
#define MT_INLINE_MAX 16

/* Resolves a return address (or a hook's entry + 1): the lookup is done at ip - 1 so that a
 * call in the last instruction of a function is not attributed to the next one. when: the id of
 * the stack the address comes from (see the contract), or UINT64_MAX for an address live now.
 * Fills out[0..n) innermost first and returns n, 1 <= n <= max (max >= 1). */
int mt_symbolize_frames(uint64_t when, uintptr_t ip, int demangle, struct mt_frame_info *out,
                        int max);

/* Resolves ip as mt_symbolize_frames does, from the symbol tables alone: the module and the
 * function the code is in, without file, line or inlined frames. A first lookup in a module
 * costs reading its symbol table, not its DWARF (tens of milliseconds in the VM's libraries). */
struct mt_frame_info mt_symbolize_function(uint64_t when, uintptr_t ip, int demangle);

/* A loaded module's data at address a (its data, bss or RELRO, as its PT_LOAD segments span
 * them now): the module's path, the data object (a static or global variable, from the symbol
 * tables) that covers a and a's offset in it; without such a symbol, symbol NULL and the offset
 * in the module's file. path NULL when a is in no loaded module. */
struct mt_data_info {
    const char *path;
    const char *symbol;
    uintptr_t offset;
};
struct mt_data_info mt_symbolize_data(uintptr_t a);

/* The C++ class of an object whose first word is vptr: the class whose vtable the dynamic symbol
 * table puts vptr in ("_ZTV..."; the loader's own lookup, dladdr), demangled and interned, or NULL
 * when vptr is no vtable's. For blocks that have no stack to tell what they are. */
const char *mt_symbolize_class(uintptr_t vptr);

/* Takes the first walk of the module list, and from then on dates stacks with clock (the number
 * of stacks interned so far: an id is at most the clock read after it was interned). Called once,
 * at load, before the program runs. Without it every address is taken as live now. */
void mt_symbols_start(uint64_t (*clock)(void));

/* Walks the module list, from the dlclose interposer, before and after the real dlclose. */
void mt_symbols_unloading(void);

#endif
