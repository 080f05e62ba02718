/* unload.c: the dlclose interposer. The symbolizer looks at the module list just before and
 * just after each unload the program asks for, so that a later stack is never named after a
 * library that was unloaded before it, nor an earlier one after a library loaded later at the
 * same address (symbols.h). The loader's own unloads (glibc's gconv and NSS modules) do not pass
 * through here; the walks notice them by the loader's counts.
 *
 * dlclose runs the library's destructors, which may allocate: the guard is held only around the
 * walks, never around the real call. errno is left as the real dlclose left it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>

#include "record/cfi.h"
#include "record/recorder.h"
#include "symbols/symbols.h"

static int (*real_dlclose)(void *);

static void walk_modules(void)
{
    int e = errno;
    mt_guard_hold();
    mt_cfi_unloading();
    mt_symbols_unloading();
    mt_guard_release();
    errno = e;
}

__attribute__((visibility("default"))) int dlclose(void *handle)
{
    int (*real)(void *) = __atomic_load_n(&real_dlclose, __ATOMIC_RELAXED);
    if (!real) {
        /* Threads racing here all find the same function. */
        mt_guard_hold();
        int e = errno;
        real = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
        errno = e;
        mt_guard_release();
        if (!real) return -1;
        __atomic_store_n(&real_dlclose, real, __ATOMIC_RELAXED);
    }
    if (!mt_active()) return real(handle);
    walk_modules();
    int rc = real(handle);
    walk_modules();
    return rc;
}
