/* nif_hooks.c: enif_alloc, enif_realloc and enif_free, recorded (nif_hooks.h). */
#include "nif_hooks.h"

#include <stddef.h>

#include "hooks.h"
#include "recorder.h"

typedef void *alloc_fn(size_t);
typedef void *realloc_fn(void *, size_t);
typedef void free_fn(void *);

static void *hook_enif_alloc(size_t n);
static void *hook_enif_realloc(void *p, size_t n);
static void hook_enif_free(void *p);

#define ROW(name, kind) [kind - MT_HOOKS] = {#name, 0, (uintptr_t)hook_##name},
struct mt_nif_hook mt_nif_hooks[MT_NIF_HOOKS] = {MT_FOR_EACH_NIF_HOOK(ROW)};
#undef ROW

#define VM(kind, type) ((type *)mt_nif_hooks[kind - MT_HOOKS].vm)

__attribute__((noinline)) static void *hook_enif_alloc(size_t n)
{
    if (!mt_enter(MT_ENIF_ALLOC)) return VM(MT_ENIF_ALLOC, alloc_fn)(n);
    void *p = VM(MT_ENIF_ALLOC, alloc_fn)(n);
    if (!mt_alloc_skip(p, n)) mt_alloc_vm(p, n, &MT_SITE(hook_enif_alloc));
    return p;
}

__attribute__((noinline)) static void *hook_enif_realloc(void *p, size_t n)
{
    struct mt_record old;
    if (!mt_enter(MT_ENIF_REALLOC)) {
        int had = mt_take_unentered(p, &old);
        void *q = VM(MT_ENIF_REALLOC, realloc_fn)(p, n);
        if (had && !q && n != 0) mt_put_back_unentered(&old);
        return q;
    }
    int had = mt_take(p, &old);
    void *q = VM(MT_ENIF_REALLOC, realloc_fn)(p, n);
    if (!q)
        mt_realloc_done(NULL, n, &MT_SITE(hook_enif_realloc), had && n != 0, &old);
    else if (!mt_alloc_skip(q, n))
        mt_alloc_vm(q, n, &MT_SITE(hook_enif_realloc));
    return q;
}

__attribute__((noinline)) static void hook_enif_free(void *p)
{
    if (mt_enter(MT_ENIF_FREE))
        mt_forget(p);
    else
        mt_forget_unentered(p);
    VM(MT_ENIF_FREE, free_fn)(p);
}

int mt_nif_hooks_find(uintptr_t *vm_base)
{
    uintptr_t exe = 0;
    for (int i = 0; i < MT_NIF_HOOKS; i++) {
        uintptr_t base;
        uintptr_t at = mt_definition(mt_nif_hooks[i].name, &base);
        /* all three in one object: the VM's executable */
        if (!at || (i && base != exe)) return 0;
        exe = base;
        __atomic_store_n(&mt_nif_hooks[i].vm, at, __ATOMIC_RELEASE);
    }
    *vm_base = exe;
    return 1;
}
