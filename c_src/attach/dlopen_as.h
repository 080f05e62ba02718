/* dlopen_as.h: the name to give dlopen on behalf of the object that called it.
 *
 * glibc's dlopen takes its caller to be the object its return address lies in, and searches for a
 * name without a slash as that object would: the RPATH of it and of the objects that loaded it
 * (when it has no RUNPATH), LD_LIBRARY_PATH, its RUNPATH, then the cache and the default
 * directories; $ORIGIN in a name is its directory. A wrapper that calls dlopen for another object
 * (attach.c's, which rewrites the objects loaded since) is that caller instead, and a plugin that
 * its loader finds by its RUNPATH or $ORIGIN would not be found: the program would change.
 *
 * mt_dlopen_name(file, caller, path, len) gives the name that, passed to dlopen by any object,
 * loads what the object holding address `caller` would have loaded with `file`:
 * - a name some loaded object already answers to (its path, or its soname), or one with a slash
 *   and no '$': file itself, as dlopen finds those without a search;
 * - $ORIGIN or ${ORIGIN} in file: file with each replaced by the caller's directory, in path;
 * - else the first directory of the caller's search list (dlinfo's RTLD_DI_SERINFO) up to the
 *   last that is the caller's own (not in mtrace.so's list: LD_LIBRARY_PATH and the default
 *   directories are everyone's) where file can be read: that directory and file, in path; and
 *   file itself when there is none, dlopen then searching the cache and the default directories
 *   as it would for the caller.
 * Not reproduced: a caller in another namespace (dlmopen), whose dlopen loads there; the
 * executable's RPATH, which dlopen searches for a caller without RUNPATH, and so for the wrapper
 * too; other DSTs ($LIB, $PLATFORM), which do not depend on the caller.
 *
 * Contract: any thread but a hook (dladdr1, dlinfo and dl_iterate_phdr take the loader's locks;
 * realpath may allocate, through the hooks when recording). Returns file or path (len bytes, which
 * it may write to even when it returns file), never NULL when file is not. A name that does not
 * fit in path is not changed.
 */
#ifndef MTRACE_DLOPEN_AS_H
#define MTRACE_DLOPEN_AS_H

#include <stddef.h>

const char *mt_dlopen_name(const char *file, const void *caller, char *path, size_t len);

#endif
