/* load.c: the dlopen interposer of the preloaded copy. An object loaded with RTLD_DEEPBIND binds
 * the malloc family to glibc's definitions, past the preload (its own scope is searched before
 * the global one): mtrace would see neither its allocations nor its frees of other objects'
 * blocks, and would call those lost. After such a load, its words are rewritten as an attach
 * rewrites them (mt_attach_bypassed); and after every load when the allocator's own API is
 * rewritten (mt_load_rewrites), in the objects it brought.
 *
 * Every other call is glibc's own: the exported dlopen jumps to the next definition with the
 * caller's return address untouched, since glibc takes the object that return address lies in as
 * the caller, whose RPATH, RUNPATH and $ORIGIN it searches. A RTLD_DEEPBIND load, and a call
 * before the next dlopen is known, goes through load_slow, which names the file as its caller
 * would (dlopen_as.h), as does every call while mt_load_rewrites is set. errno is left as the real
 * dlopen left it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>

#include "attach/attach.h"
#include "attach/dlopen_as.h"

__attribute__((visibility("hidden"))) void *(*mt_next_dlopen)(const char *, int);
int mt_load_rewrites;
__attribute__((visibility("hidden"), used)) void *mt_load_slow(const char *file, int mode);

/* RTLD_DEEPBIND is 8 in glibc's dlfcn.h: checked below. */
_Static_assert(RTLD_DEEPBIND == 8, "the interposer tests bit 3 of mode");
__asm__(".text\n"
        ".globl dlopen\n"
        ".type dlopen, @function\n"
        "dlopen:\n"
        "  endbr64\n"
        "  movq mt_next_dlopen(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz mt_load_slow\n"
        "  testl $8, %esi\n"
        "  jnz mt_load_slow\n"
        "  cmpl $0, mt_load_rewrites(%rip)\n"
        "  jne mt_load_slow\n"
        "  jmp *%rax\n"
        ".size dlopen, .-dlopen\n");

static void *(*next_dlopen(void))(const char *, int)
{
    void *(*next)(const char *, int) = __atomic_load_n(&mt_next_dlopen, __ATOMIC_ACQUIRE);
    if (!next) {
        /* threads racing here all find the same function */
        int e = errno;
        next = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
        errno = e;
        __atomic_store_n(&mt_next_dlopen, next, __ATOMIC_RELEASE);
    }
    return next;
}

__attribute__((constructor)) static void find_next(void)
{
    next_dlopen();
}

void *mt_load_slow(const char *file, int mode)
{
    void *(*next)(const char *, int) = next_dlopen();
    if (!next) return NULL;
    char path[PATH_MAX];
    const char *as = mt_dlopen_name(file, __builtin_return_address(0), path, sizeof path);
    void *handle = next(as, mode);
    if (handle &&
        ((mode & RTLD_DEEPBIND) || __atomic_load_n(&mt_load_rewrites, __ATOMIC_ACQUIRE))) {
        int e = errno;
        mt_attach_bypassed();
        errno = e;
    }
    return handle;
}
