/* symbols/backend.h: the symbolizer's backends behind symbols.c (ELF, DWARF; for the BEAM's JIT
 * code, the VM's debugger entries and its perf map),
 * private to it.
 *
 * Contract
 * - Called only by symbols.c, with its mutex held; nothing here locks.
 * - A backend's state is opened once per module (a file at a load bias) and kept for the life
 *   of the process, so every string a backend returns stays valid; symbols.c interns them
 *   anyway, since demangled names are made per call.
 * - Both open the file by path and check that it is still the file the module was keyed on
 *   (device, inode, size and mtime), so that a file replaced on disk is never read for it.
 * - Addresses are file addresses (ip - 1 - load bias) for the ELF backend and process addresses
 *   (ip - 1) for the DWARF one, which knows the bias.
 */
#ifndef MTRACE_SYMBOLS_BACKEND_H
#define MTRACE_SYMBOLS_BACKEND_H

#include <stdint.h>
#include <sys/stat.h>

#include "symbols/symbols.h"

/* Size and mtime join the inode because a file rebuilt in place often gets the inode back. */
struct mt_file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct mt_file_id mt_file_id_of(const struct stat *st);
int mt_same_file(struct mt_file_id a, struct mt_file_id b);

/* ELF symbol tables (.symtab, else .dynsym and MiniDebugInfo's .symtab): NULL when the file
 * cannot be read or names no function and no data object. */
struct mt_elf_syms;
struct mt_elf_syms *mt_elf_open(const char *path, struct mt_file_id id);
/* The name of the function covering file address a, demangled if asked (the result of a failed
 * demangling is the raw name); NULL when none does. */
const char *mt_elf_name(struct mt_elf_syms *e, uint64_t a, int demangle);

/* The data object (a static or global variable, from the same tables) covering file address a,
 * its start in *start; NULL when none does. */
const char *mt_elf_data_name(struct mt_elf_syms *e, uint64_t a, uint64_t *start);

/* DWARF through libdwfl: NULL when the file cannot be read. debug_path: libdwfl's search path
 * for separate debug files. */
struct mt_dwarf;
struct mt_dwarf *mt_dwarf_open(const char *path, struct mt_file_id id, uintptr_t bias,
                               const char *debug_path);
/* Frames at process address a, innermost first, at most max: the inlined functions and the one
 * they are in, with file and line (function NULL where DWARF names none), strings interned. 0
 * when the module has no DWARF for a (out untouched). */
int mt_dwarf_frames(struct mt_dwarf *d, uintptr_t a, int demangle, struct mt_frame_info *out,
                    int max);

/* The BEAM's perf map (symbols/perf.c). mt_perf_refresh reads the lines appended since it last
 * did, dated by clock (NULL: every line taken as there before any stack). mt_perf_name: the name
 * of the JIT range at process address a (a return address as it is, not a - 1) when stack `when`
 * was made, the latest line that may have been there then, without the leading '$' and the
 * "-CodeInfoPrologue" suffix, interned; NULL when no line covers a. */
void mt_perf_refresh(uint64_t (*clock)(void));
const char *mt_perf_name(uint64_t when, uintptr_t a);

/* The name of a JIT range as a frame has it, interned: the perf map's leading '$' and the
 * "-CodeInfoPrologue" suffix (such a range holds the function's header, and a NIF's call) taken
 * off, in place. */
const char *mt_jit_name_clean(char *name);

/* The BEAM's JIT code as the VM registers it for a debugger (symbols/jit.c). mt_jit_refresh
 * walks the registered modules again when the list changed, dated by clock (NULL: every module
 * taken as there before any stack). mt_jit_frame: 1 and *out (function, file and line, erlang
 * set) for the JIT range at process address a (a return address as it is) when stack `when`
 * was made, from the latest module that may have been there then; 0 when none covers a. */
void mt_jit_refresh(uint64_t (*clock)(void));
int mt_jit_frame(uint64_t when, uintptr_t a, struct mt_frame_info *out);

/* cplus_demangle's answer, or NULL; malloc'd. */
char *mt_demangle(const char *name);

/* From symbols.c: a copy of s that lives as long as the process, one per distinct text; NULL
 * for NULL (or when out of memory). */
const char *mt_symbols_intern(const char *s);

#endif
