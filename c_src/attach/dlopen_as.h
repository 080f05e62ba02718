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
 * loads what the object holding address `caller` would have loaded with `file` (an address in no
 * object stands for the executable, as for the loader):
 * - a name with a slash and no '$', or one some loaded object already answers to (its path, or
 *   its soname): file itself, as dlopen finds those without a search;
 * - a name with a slash and $ORIGIN or ${ORIGIN}: file with each replaced by the caller's
 *   directory (its name up to the last slash, from the working directory when relative), in path;
 * - else the first directory of the caller's search list (dlinfo's RTLD_DI_SERINFO) up to the
 *   last that is the caller's own (not in mtrace.so's list: LD_LIBRARY_PATH and the default
 *   directories are everyone's) where the loader's search would stop (a file it can open that is
 *   not an ELF object of another class or machine: it loads it, or fails on it): that directory
 *   and file, in path; and file itself when there is none, dlopen then searching the cache and
 *   the default directories as it would for the caller.
 * In a secure-execution process (setuid, AT_SECURE), a name with $ORIGIN is passed as given.
 * Not reproduced: a caller in another namespace (dlmopen), whose dlopen loads there; the
 * executable's RPATH, which dlopen searches for a caller without RUNPATH, and so for the wrapper
 * too; a name an object was loaded by that is neither its path nor its soname (an object without
 * a soname that this wrapper loaded by its path answers later only to that path); the
 * glibc-hwcaps subdirectories of each directory; a caller marked DF_1_NODEFLIB; a relative
 * caller's directory when the working directory changed since it was loaded; other DSTs ($LIB,
 * $PLATFORM), which do not depend on the caller. Where the caller's directory cannot be known
 * (its name relative and the working directory gone, no /proc, a name past PATH_MAX), a name
 * with $ORIGIN is passed as given.
 *
 * Contract: any thread but a hook (dladdr1, dlinfo and dl_iterate_phdr take the loader's locks).
 * No allocation: what it needs beyond the stack it maps. Returns file or path (len bytes, which it
 * may write to even when it returns file), never NULL when file is not. A name that does not fit
 * in path is not changed.
 */
#ifndef MTRACE_DLOPEN_AS_H
#define MTRACE_DLOPEN_AS_H

#include <stddef.h>

const char *mt_dlopen_name(const char *file, const void *caller, char *path, size_t len);

#endif
