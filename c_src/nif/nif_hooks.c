/* nif_hooks.c: the NIF API's blocks and resources, recorded (nif_hooks.h). */
#define _GNU_SOURCE
#include "nif/nif_hooks.h"

#include "nif/nif_api.h"
#include <pthread.h>
#include <stddef.h>

#include "base/proc.h"
#include "mark/beam_vm.h"
#include "mark/layouts.h"
#include "record/bindings.h"
#include "record/recorder.h"

typedef void *alloc_fn(size_t);
typedef void *realloc_fn(void *, size_t);
typedef void free_fn(void *);
typedef void *alloc_resource_fn(ErlNifResourceType *, size_t);
typedef ErlNifResourceType *open_fn(ErlNifEnv *, const char *, const char *, ErlNifResourceDtor *,
                                    ErlNifResourceFlags, ErlNifResourceFlags *);
typedef ErlNifResourceType *init_fn(ErlNifEnv *, const char *, const ErlNifResourceTypeInit *,
                                    ErlNifResourceFlags, ErlNifResourceFlags *);
typedef int alloc_binary_fn(size_t, ErlNifBinary *);
typedef int realloc_binary_fn(ErlNifBinary *, size_t);
typedef void release_binary_fn(ErlNifBinary *);
typedef ERL_NIF_TERM make_binary_fn(ErlNifEnv *, ErlNifBinary *);
typedef int ioq_enq_binary_fn(ErlNifIOQueue *, ErlNifBinary *, size_t);

static void *hook_enif_alloc(size_t n);
static void *hook_enif_realloc(void *p, size_t n);
static void hook_enif_free(void *p);
static void *hook_enif_alloc_resource(ErlNifResourceType *type, size_t n);
static open_fn hook_enif_open_resource_type;
static init_fn hook_enif_open_resource_type_x, hook_enif_init_resource_type;
static alloc_binary_fn hook_enif_alloc_binary;
static realloc_binary_fn hook_enif_realloc_binary;
static release_binary_fn hook_enif_release_binary;
static make_binary_fn hook_enif_make_binary;
static ioq_enq_binary_fn hook_enif_ioq_enq_binary;

#define ROW(name, kind) [kind - MT_HOOKS] = {#name, 0, (uintptr_t)hook_##name},
struct mt_nif_hook mt_nif_hooks[MT_NIF_HOOKS] = {MT_FOR_EACH_NIF_HOOK(ROW)};
#undef ROW

#define VM(kind, type) ((type *)mt_nif_hooks[kind - MT_HOOKS].vm)

/* Counts a call that records nothing. */
static void count(enum mt_kind kind)
{
    if (mt_enter(kind)) mt_thread.guard = 0;
}

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

/* The record of the block at p goes before the VM's call that ends it, made within the guard: the
 * VM's own free of it (glibc's, with +MRe false) is not a free without a record. */
__attribute__((noinline)) static void hook_enif_free(void *p)
{
    struct mt_record old;
    int entered = mt_enter(MT_ENIF_FREE);
    if (entered)
        mt_take(p, &old);
    else
        mt_forget_unentered(p);
    VM(MT_ENIF_FREE, free_fn)(p);
    if (entered) mt_thread.guard = 0;
}

/* Resources. A resource is the VM's magic binary: its header, the resource's own (its type),
 * then the data the NIF gets. Terms name it by the header's address (an MRef's mb), so its
 * record is the whole magic binary, whose header's length the VM's release gives (layouts.h),
 * checked on the first resource of a type whose end can be seen: the words below its data hold,
 * in turn, a live magic binary's flags, a count of 1, the destructor the VM gives every
 * resource (a function of the VM's own code) and the type the NIF passed. The end is the type's
 * destructor, which the VM runs when the last reference goes (often in a garbage collection,
 * with no NIF call): each type opened through the hooks gets a trampoline of its own, which
 * forgets the record and calls the NIF's destructor, if it has one. A type opened before the
 * hooks (before an attach) gets its trampoline at its first resource since, written into the
 * VM's own struct of the type where the release's layout is known and the struct proves it
 * (adopt()). The resources of a type that could not be, or of a release whose header is not
 * known, are counted and not recorded, and the VM's own call of malloc (+MBe false) then records
 * them. A type is taken for wrapped only while the VM's struct still names its trampoline. */
#define TYPES 64

static struct {
    ErlNifResourceType *type;
    ErlNifResourceDtor *dtor;
} types[TYPES];
static unsigned ntypes;
static uint64_t types_unwrapped, unseen;
static size_t header; /* 0 until learnt, SIZE_MAX when it could not be */

static void resource_end(void *obj)
{
    size_t h = __atomic_load_n(&header, __ATOMIC_ACQUIRE);
    void *mb = h && h != SIZE_MAX ? (char *)obj - h : NULL;
    if (!mt_enter(MT_RESOURCE_DTOR)) {
        mt_forget_unentered(mb);
        return;
    }
    if (mb)
        mt_forget(mb);
    else
        mt_thread.guard = 0;
}

/* Trampoline 8 * a + b; eight of them, then all sixty-four. */
#define DTOR(a, b)                                                                                 \
    static void dtor_##a##b(ErlNifEnv *env, void *obj)                                             \
    {                                                                                              \
        resource_end(obj);                                                                         \
        ErlNifResourceDtor *own = __atomic_load_n(&types[8 * a + b].dtor, __ATOMIC_ACQUIRE);       \
        if (own) own(env, obj);                                                                    \
    }
#define EIGHT(X, a) X(a, 0) X(a, 1) X(a, 2) X(a, 3) X(a, 4) X(a, 5) X(a, 6) X(a, 7)
#define ALL(X)                                                                                     \
    EIGHT(X, 0) EIGHT(X, 1) EIGHT(X, 2) EIGHT(X, 3) EIGHT(X, 4) EIGHT(X, 5) EIGHT(X, 6) EIGHT(X, 7)
ALL(DTOR)
#define NAME(a, b) dtor_##a##b,
static ErlNifResourceDtor *const trampolines[TYPES] = {ALL(NAME)};
#undef NAME
#undef ALL
#undef EIGHT
#undef DTOR

/* A slot for a type about to be opened with the NIF's destructor own (TYPES when none is left),
 * and what the VM is to be given instead. */
static ErlNifResourceDtor *wrap(ErlNifResourceDtor *own, unsigned *slot)
{
    unsigned i = __atomic_fetch_add(&ntypes, 1, __ATOMIC_RELAXED);
    if (i >= TYPES) {
        __atomic_fetch_add(&types_unwrapped, 1, __ATOMIC_RELAXED);
        *slot = TYPES;
        return own;
    }
    __atomic_store_n(&types[i].dtor, own, __ATOMIC_RELEASE);
    *slot = i;
    return trampolines[i];
}

/* The words of t's destructor in the VM's struct (fn's, then fn_real's), or NULL where this
 * release's layout is not known. t is a type the VM gave, which the VM reads as well. */
static ErlNifResourceDtor **vm_dtors(const ErlNifResourceType *t)
{
    return mt_beam_vm_otp() & MT_OTP_ALL ? (ErlNifResourceDtor **)t : NULL;
}

static int wrapped(const ErlNifResourceType *t)
{
    unsigned n = __atomic_load_n(&ntypes, __ATOMIC_ACQUIRE);
    ErlNifResourceDtor **vm = vm_dtors(t);
    for (unsigned i = 0; i < n && i < TYPES; i++)
        if (__atomic_load_n(&types[i].type, __ATOMIC_ACQUIRE) == t &&
            (!vm ||
             __atomic_load_n(&vm[MT_RESOURCE_TYPE_DTOR], __ATOMIC_ACQUIRE) == trampolines[i]))
            return 1;
    return 0;
}

/* Types that adopt() could not take, never tried again: at most TYPES, then none is tried. */
static const ErlNifResourceType *refused[TYPES];
static unsigned nrefused;
static pthread_mutex_t adopting = PTHREAD_MUTEX_INITIALIZER;

/* A type opened before the hooks, wrapped now in the VM's own struct: fn_real's destructor, then
 * fn's, each swapped from the NIF's own only if it still holds it (a takeover starting meanwhile
 * changes fn's; fn_real's is then put back). Only a struct of the layout this release is known to
 * have, read with process_vm_readv (neighbours included), in the VM's list and no takeover's
 * (layouts.h). Once a type, under a lock: two threads allocating its first resources at once
 * wrap it once. Returns whether t is wrapped. */
static int adopt(ErlNifResourceType *t)
{
    ErlNifResourceDtor **vm = vm_dtors(t);
    if (!vm) return 0;
    pthread_mutex_lock(&adopting);
    int done = wrapped(t), tried = 0;
    for (unsigned i = 0; i < nrefused && !done; i++)
        tried |= refused[i] == t;
    if (!done && !tried && nrefused < TYPES) {
        uintptr_t w[MT_RESOURCE_TYPE_WORDS], next_prev, prev_next;
        unsigned slot = TYPES;
        if (mt_proc_read((uintptr_t)t, w, sizeof w) == 0 &&
            mt_proc_read(w[0] + sizeof(uintptr_t), &next_prev, sizeof next_prev) == 0 &&
            mt_proc_read(w[1], &prev_next, sizeof prev_next) == 0 &&
            mt_layout_resource_type(w, (uintptr_t)t, next_prev, prev_next)) {
            ErlNifResourceDtor *own = (ErlNifResourceDtor *)w[MT_RESOURCE_TYPE_DTOR];
            ErlNifResourceDtor *tramp = wrap(own, &slot), *real = own, *fn = own;
            if (slot < TYPES &&
                __atomic_compare_exchange_n(&vm[MT_RESOURCE_TYPE_DTOR_REAL], &real, tramp, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                if (__atomic_compare_exchange_n(&vm[MT_RESOURCE_TYPE_DTOR], &fn, tramp, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                    __atomic_store_n(&types[slot].type, t, __ATOMIC_RELEASE);
                    done = 1;
                } else {
                    __atomic_compare_exchange_n(&vm[MT_RESOURCE_TYPE_DTOR_REAL], &tramp, own, 0,
                                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
                }
            }
        }
        if (!done) refused[nrefused++] = t;
    }
    pthread_mutex_unlock(&adopting);
    return done;
}

/* The type t the VM opened (done: created or taken over) with slot's trampoline (TYPES: with the
 * NIF's own destructor). Its resources are recorded only while every destructor the VM may run
 * for them is a trampoline: a type created with one, or taken over with one from a type that had
 * one. A type given the NIF's own destructor (or taken over from before the hooks, whose resources
 * keep that until the load commits) is no longer taken for wrapped, nor is a freed type's struct
 * reused for it. */
static ErlNifResourceType *opened(ErlNifResourceType *t, ErlNifResourceFlags done, unsigned slot)
{
    if (!t) return t;
    int keep = slot < TYPES && (done == ERL_NIF_RT_CREATE || wrapped(t));
    unsigned n = __atomic_load_n(&ntypes, __ATOMIC_ACQUIRE);
    /* One slot names a type: a takeover's new one (the old trampoline still runs, by its slot's
     * dtor, until the VM commits the load) or none. */
    for (unsigned i = 0; i < n && i < TYPES; i++)
        if (i != slot && __atomic_load_n(&types[i].type, __ATOMIC_ACQUIRE) == t)
            __atomic_store_n(&types[i].type, NULL, __ATOMIC_RELEASE);
    if (keep) __atomic_store_n(&types[slot].type, t, __ATOMIC_RELEASE);
    return t;
}

static size_t learn_header(const void *p, const ErlNifResourceType *type)
{
    unsigned otp = mt_beam_vm_otp();
    size_t h = otp & MT_OTP_25_26 ? MT_RESOURCE_HEADER : otp & MT_OTP27 ? MT_RESOURCE27_HEADER : 0;
    const uintptr_t *w = (const uintptr_t *)p - h / sizeof(uintptr_t);
    if (!h || !mt_layout_magic_flags(w[0])) return SIZE_MAX;
    int count = 0, dtor = 0, typed = 0;
    for (size_t i = 1; i < h / sizeof *w; i++) {
        if (!count)
            count = w[i] == 1;
        else if (!dtor)
            dtor = mt_beam_vm_code(w[i]);
        else if (!typed)
            typed = w[i] == (uintptr_t)type;
    }
    return typed ? h : SIZE_MAX;
}

__attribute__((noinline)) static void *hook_enif_alloc_resource(ErlNifResourceType *type, size_t n)
{
    size_t h = __atomic_load_n(&header, __ATOMIC_ACQUIRE);
    if (h == SIZE_MAX || !(wrapped(type) || adopt(type))) {
        count(MT_ENIF_ALLOC_RESOURCE);
        void *p = VM(MT_ENIF_ALLOC_RESOURCE, alloc_resource_fn)(type, n);
        if (p) __atomic_fetch_add(&unseen, 1, __ATOMIC_RELAXED);
        return p;
    }
    if (!mt_enter(MT_ENIF_ALLOC_RESOURCE))
        return VM(MT_ENIF_ALLOC_RESOURCE, alloc_resource_fn)(type, n);
    void *p = VM(MT_ENIF_ALLOC_RESOURCE, alloc_resource_fn)(type, n);
    if (p && !h) {
        h = learn_header(p, type);
        __atomic_store_n(&header, h, __ATOMIC_RELEASE);
    }
    if (!p || h == SIZE_MAX) {
        if (p) __atomic_fetch_add(&unseen, 1, __ATOMIC_RELAXED);
        mt_thread.guard = 0;
        return p;
    }
    void *mb = (char *)p - h;
    if (!mt_alloc_skip(mb, h + n)) mt_alloc_vm(mb, h + n, &MT_SITE(hook_enif_alloc_resource));
    return p;
}

static ErlNifResourceType *hook_enif_open_resource_type(ErlNifEnv *env, const char *module,
                                                        const char *name, ErlNifResourceDtor *dtor,
                                                        ErlNifResourceFlags flags,
                                                        ErlNifResourceFlags *tried)
{
    count(MT_ENIF_OPEN_RESOURCE_TYPE);
    unsigned slot;
    ErlNifResourceFlags done = 0;
    ErlNifResourceDtor *given = wrap(dtor, &slot);
    ErlNifResourceType *t =
        VM(MT_ENIF_OPEN_RESOURCE_TYPE, open_fn)(env, module, name, given, flags, &done);
    if (tried) *tried = done;
    return opened(t, done, slot);
}

/* init with its destructor wrapped: the members the VM reads (3 for enif_open_resource_type_x,
 * init->members for enif_init_resource_type), or NULL when it reads more than this build knows,
 * or no destructor. */
static const ErlNifResourceTypeInit *wrap_init(const ErlNifResourceTypeInit *init, int members,
                                               ErlNifResourceTypeInit *mine, unsigned *slot)
{
    *slot = TYPES;
    if (!init || members < 1 || members > 4) return NULL;
    *mine = (ErlNifResourceTypeInit){NULL, init->stop, init->down, members,
                                     members >= 4 ? init->dyncall : NULL};
    mine->dtor = wrap(init->dtor, slot);
    return mine;
}

/* An opener of init's kind, with init's destructor wrapped. */
static ErlNifResourceType *open_init(enum mt_kind kind, ErlNifEnv *env, const char *name,
                                     const ErlNifResourceTypeInit *init, int members,
                                     ErlNifResourceFlags flags, ErlNifResourceFlags *tried)
{
    count(kind);
    ErlNifResourceTypeInit mine;
    unsigned slot;
    ErlNifResourceFlags done = 0;
    const ErlNifResourceTypeInit *given = wrap_init(init, members, &mine, &slot);
    ErlNifResourceType *t = VM(kind, init_fn)(env, name, given ? given : init, flags, &done);
    if (tried) *tried = done;
    return opened(t, done, slot);
}

static ErlNifResourceType *hook_enif_open_resource_type_x(ErlNifEnv *env, const char *name,
                                                          const ErlNifResourceTypeInit *init,
                                                          ErlNifResourceFlags flags,
                                                          ErlNifResourceFlags *tried)
{
    return open_init(MT_ENIF_OPEN_RESOURCE_TYPE_X, env, name, init, 3, flags, tried);
}

static ErlNifResourceType *hook_enif_init_resource_type(ErlNifEnv *env, const char *name,
                                                        const ErlNifResourceTypeInit *init,
                                                        ErlNifResourceFlags flags,
                                                        ErlNifResourceFlags *tried)
{
    return open_init(MT_ENIF_INIT_RESOURCE_TYPE, env, name, init, init ? init->members : 0, flags,
                     tried);
}

/* Binaries. A binary the NIF allocates is the VM's Binary (ErlNifBinary's ref_bin), its header
 * then its bytes: the record spans both, from ref_bin, as terms name it. It is the NIF's until it
 * releases it, makes it a term or gives it to an I/O queue (the VM's from then on: its end comes
 * with the last reference, and is no leak of the NIF's). */
static void *binary_block(const ErlNifBinary *bin, size_t *bytes)
{
    uintptr_t at = (uintptr_t)bin->ref_bin, data = (uintptr_t)bin->data;
    if (!at || data < at || data - at > 4096) return NULL;
    *bytes = data - at + bin->size;
    return bin->ref_bin;
}

__attribute__((noinline)) static int hook_enif_alloc_binary(size_t n, ErlNifBinary *bin)
{
    if (!mt_enter(MT_ENIF_ALLOC_BINARY)) return VM(MT_ENIF_ALLOC_BINARY, alloc_binary_fn)(n, bin);
    int ok = VM(MT_ENIF_ALLOC_BINARY, alloc_binary_fn)(n, bin);
    size_t bytes;
    void *b = ok ? binary_block(bin, &bytes) : NULL;
    if (!b)
        mt_thread.guard = 0;
    else if (!mt_alloc_skip(b, bytes))
        mt_alloc_vm(b, bytes, &MT_SITE(hook_enif_alloc_binary));
    return ok;
}

__attribute__((noinline)) static int hook_enif_realloc_binary(ErlNifBinary *bin, size_t n)
{
    struct mt_record old;
    void *was = bin->ref_bin;
    if (!mt_enter(MT_ENIF_REALLOC_BINARY)) {
        int had = mt_take_unentered(was, &old);
        int ok = VM(MT_ENIF_REALLOC_BINARY, realloc_binary_fn)(bin, n);
        if (had && !ok) mt_put_back_unentered(&old);
        return ok;
    }
    int had = mt_take(was, &old);
    int ok = VM(MT_ENIF_REALLOC_BINARY, realloc_binary_fn)(bin, n);
    size_t bytes;
    void *b = ok ? binary_block(bin, &bytes) : NULL;
    if (!b)
        mt_realloc_done(NULL, n, &MT_SITE(hook_enif_realloc_binary), had && !ok, &old);
    else if (!mt_alloc_skip(b, bytes))
        mt_alloc_vm(b, bytes, &MT_SITE(hook_enif_realloc_binary));
    return ok;
}

/* The binary stops being the NIF's (released, made a term, queued): its record goes, and the
 * VM's call follows within the guard, as for enif_free. Returns whether the guard is held. */
static int binary_gone(enum mt_kind kind, const ErlNifBinary *bin)
{
    struct mt_record old;
    if (mt_enter(kind)) {
        mt_take(bin->ref_bin, &old);
        return 1;
    }
    mt_forget_unentered(bin->ref_bin);
    return 0;
}

__attribute__((noinline)) static void hook_enif_release_binary(ErlNifBinary *bin)
{
    int entered = binary_gone(MT_ENIF_RELEASE_BINARY, bin);
    VM(MT_ENIF_RELEASE_BINARY, release_binary_fn)(bin);
    if (entered) mt_thread.guard = 0;
}

__attribute__((noinline)) static ERL_NIF_TERM hook_enif_make_binary(ErlNifEnv *env,
                                                                    ErlNifBinary *bin)
{
    int entered = binary_gone(MT_ENIF_MAKE_BINARY, bin);
    ERL_NIF_TERM t = VM(MT_ENIF_MAKE_BINARY, make_binary_fn)(env, bin);
    if (entered) mt_thread.guard = 0;
    return t;
}

__attribute__((noinline)) static int hook_enif_ioq_enq_binary(ErlNifIOQueue *q, ErlNifBinary *bin,
                                                              size_t skip)
{
    int entered = binary_gone(MT_ENIF_IOQ_ENQ_BINARY, bin);
    int ok = VM(MT_ENIF_IOQ_ENQ_BINARY, ioq_enq_binary_fn)(q, bin, skip);
    if (entered) mt_thread.guard = 0;
    return ok;
}

void mt_nif_hooks_state(struct mt_nif_state *out)
{
    unsigned n = __atomic_load_n(&ntypes, __ATOMIC_RELAXED), held = 0;
    size_t h = __atomic_load_n(&header, __ATOMIC_RELAXED);
    /* the slots that name a type: not those a type gave up (opened anew without a trampoline)
     * or that an adoption took and could not use */
    for (unsigned i = 0; i < n && i < TYPES; i++)
        held += __atomic_load_n(&types[i].type, __ATOMIC_RELAXED) != NULL;
    out->types_wrapped = held;
    out->types_unwrapped = __atomic_load_n(&types_unwrapped, __ATOMIC_RELAXED);
    out->resources_unseen = __atomic_load_n(&unseen, __ATOMIC_RELAXED);
    out->resource_header = h == SIZE_MAX ? 0 : h;
}

int mt_nif_hooks_find(uintptr_t *vm_base)
{
    uintptr_t exe = 0;
    for (int i = 0; i < MT_NIF_HOOKS; i++) {
        uintptr_t base;
        uintptr_t at = mt_definition(mt_nif_hooks[i].name, &base);
        /* all of them in one object: the VM's executable */
        if (!at || (i && base != exe)) return 0;
        exe = base;
        __atomic_store_n(&mt_nif_hooks[i].vm, at, __ATOMIC_RELEASE);
    }
    *vm_base = exe;
    return 1;
}
