/* attach.c: the GOT patcher behind Mtrace.attach/0 (attach.h). */
#define _GNU_SOURCE
#include "attach/attach.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "attach/dlopen_as.h"
#include "base/config.h"
#include "base/mem.h"
#include "mark/beam_vm.h"
#include "nif/nif_hooks.h"
#include "out/service.h"
#include "record/allocator.h"
#include "record/bindings.h"
#include "record/extended.h"
#include "record/hooks.h"
#include "record/recorder.h"
#include "record/stack.h"
#include "symbols/symbols.h"

/* What a word may be rewritten to name: the malloc family's hooks (attached), the NIF API's
 * (in a BEAM, attached or preloaded), the allocator's own API's (preloaded, with another
 * allocator than glibc's), and dlopen's wrapper, for the objects loaded later. */
enum where { EVERY_OBJECT, BUT_THE_VM, THE_VM, BUT_THE_ALLOCATOR };

struct target {
    const char *name;
    uintptr_t original, replacement;
    /* the NIF API's words are never rewritten in the VM's own executable (its calls stay its
     * own); a preloaded BEAM's dlopen only there, where the VM loads NIF libraries (a library's
     * own dlopen through the wrapper would resolve its RUNPATH and $ORIGIN as mtrace.so's) */
    enum where where;
};

#define MAX_TARGETS (MT_HOOKS + MT_NIF_HOOKS + MT_EXTENDED + 1)

/* A word rewritten: where, in which object (its load bias), what it held and holds now, and
 * whether it lies in RELRO (read-only but for the store). */
struct word {
    uintptr_t base;
    uintptr_t *at;
    uintptr_t old, now;
    int relro;
};

#define MAX_WORDS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct word *words;
static size_t nwords;
static struct target targets[MAX_TARGETS];
static int ntargets, malloc_targets, nif_targets, extended_targets;
static uintptr_t self_base, vm_base, allocator_base;
/* rewriting: words are rewritten, and dlopen rewrites the objects it loads; preloaded: this copy
 * is the process's malloc, to which the loader binds every object's words but those bound past
 * it (RTLD_DEEPBIND) */
static int attached, rewriting, symbols_started, preloaded;
static uint64_t since_ns, realtime_s, attaches, objects, skipped, copies, pause_ns, nif_words;
static uintptr_t dlopen_original;

/* dl_iterate_phdr's callback: counts the words of an object's writable segments that still hold
 * one of glibc's functions once its relocated words are rewritten: copies the program made (an
 * allocator table filled at start-up) and the loader's own (__rtld_malloc and its kin, which it
 * calls with its lock held: rewritten, they would bring the hooks' unwinding into the loader's
 * lock). Calls through them bypass mtrace; the count says how many ways around it there are. */
static int count_copies(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    uintptr_t base = info->dlpi_addr;
    if (base == self_base || base == getauxval(AT_SYSINFO_EHDR)) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        const uintptr_t *w = (const uintptr_t *)((base + ph->p_vaddr + 7) & ~(uintptr_t)7);
        const uintptr_t *end =
            (const uintptr_t *)((base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)7);
        for (; w < end; w++) {
            uintptr_t v = __atomic_load_n(w, __ATOMIC_RELAXED);
            for (int k = 0; k < malloc_targets; k++)
                if (v == targets[k].original) copies++;
        }
    }
    return 0;
}

static void *attached_dlopen(const char *file, int mode);

/* One pass over the objects: bounds of the one being patched. */
struct object {
    const struct dl_phdr_info *info;
    uintptr_t lo, hi, relro_lo, relro_hi;
    int rewritten;
    /* a pass that only looks: the NIF API's words that could not be rewritten; then whether
     * they are left alone, all of them (an object whose enif_alloc is recorded and whose
     * enif_free goes unseen would leave records behind their blocks) */
    int dry, nif_refused, nif_alone;
    size_t nif_left; /* the NIF API's words still to rewrite, for which room is kept */
};

static int target_of(const char *name)
{
    for (int i = 0; i < ntargets; i++)
        if (strcmp(name, targets[i].name) == 0) return i;
    return -1;
}

/* Whether the word at p lies in a writable segment of the object; *relro set when in the part
 * the loader made read-only. */
static int writable(const struct object *o, uintptr_t p, int *relro)
{
    *relro = p >= o->relro_lo && p + sizeof(uintptr_t) <= o->relro_hi;
    if (*relro) return 1;
    const struct dl_phdr_info *info = o->info;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W) && p >= start &&
            p + sizeof(uintptr_t) <= start + ph->p_memsz)
            return 1;
    }
    return 0;
}

/* Returns 0, or -1 when a RELRO page could not be made writable (nothing stored). */
static int store(uintptr_t *at, uintptr_t value, int relro)
{
    uintptr_t page = (uintptr_t)at & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    if (relro && mprotect((void *)page, len, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(at, value, __ATOMIC_RELEASE);
    if (relro) mprotect((void *)page, len, PROT_READ);
    return 0;
}

static void patch(struct object *o, const ElfW(Rela) * r, size_t n, const ElfW(Sym) * syms,
                  const char *strs)
{
    for (size_t k = 0; k < n; k++) {
        unsigned type = ELF64_R_TYPE(r[k].r_info), sym = ELF64_R_SYM(r[k].r_info);
        if (!sym ||
            (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT && type != R_X86_64_64))
            continue;
        int i = target_of(strs + syms[sym].st_name);
        if (i < 0 || (targets[i].where == BUT_THE_VM && o->info->dlpi_addr == vm_base) ||
            (targets[i].where == THE_VM && o->info->dlpi_addr != vm_base) ||
            (targets[i].where == BUT_THE_ALLOCATOR && o->info->dlpi_addr == allocator_base))
            continue;
        const struct target *t = &targets[i];
        int nif = t->where == BUT_THE_VM;
        if (o->dry && !nif) continue;
        uintptr_t *at = (uintptr_t *)(o->info->dlpi_addr + r[k].r_offset);
        uintptr_t v = __atomic_load_n(at, __ATOMIC_ACQUIRE);
        if (v == t->replacement) {
            o->rewritten |= !preloaded || nif;
            continue;
        }
        int relro;
        int lazy = type == R_X86_64_JUMP_SLOT && v >= o->lo && v < o->hi;
        int refused = (v != t->original && !lazy) || (type == R_X86_64_64 && r[k].r_addend != 0) ||
                      !writable(o, (uintptr_t)at, &relro) ||
                      nwords + (nif ? 0 : o->nif_left) >= MAX_WORDS;
        if (o->dry) {
            o->nif_refused += refused;
            o->nif_left++;
            continue;
        }
        if (nif && o->nif_left) o->nif_left--;
        if (refused || (nif && o->nif_alone) || store(at, t->replacement, relro) != 0) {
            skipped++;
            continue;
        }
        words[nwords++] = (struct word){o->info->dlpi_addr, at, v, t->replacement, relro};
        if (nif) nif_words++;
        o->rewritten = 1;
    }
}

/* dl_iterate_phdr's callback: rewrites one object's words (the vDSO has none to rewrite). */
static int patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    uintptr_t base = info->dlpi_addr;
    if (base == self_base || base == getauxval(AT_BASE) || base == getauxval(AT_SYSINFO_EHDR))
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    struct object o = {.info = info, .lo = UINTPTR_MAX};
    struct mt_dynamic dynamic = mt_dynamic(info);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = base + ph->p_vaddr;
        if (ph->p_type == PT_GNU_RELRO) {
            o.relro_lo = start & ~(uintptr_t)(page - 1);
            o.relro_hi = (start + ph->p_memsz) & ~(uintptr_t)(page - 1);
        }
        if (ph->p_type != PT_LOAD) continue;
        if (start < o.lo) o.lo = start;
        if (start + ph->p_memsz > o.hi) o.hi = start + ph->p_memsz;
    }
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    const ElfW(Rela) *rela = NULL, *jmprel = NULL;
    size_t relasz = 0, pltsz = 0;
    int pltrela = 1;
    for (const ElfW(Dyn) *dyn = dynamic.dyn; dyn && dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            syms = mt_dynamic_ptr(dynamic, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strs = mt_dynamic_ptr(dynamic, dyn->d_un.d_ptr);
            break;
        case DT_RELA:
            rela = mt_dynamic_ptr(dynamic, dyn->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = dyn->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = mt_dynamic_ptr(dynamic, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltsz = dyn->d_un.d_val;
            break;
        case DT_PLTREL:
            pltrela = dyn->d_un.d_val == DT_RELA;
            break;
        }
    }
    if (!syms || !strs) return 0;
    for (o.dry = 1; o.dry >= 0; o.dry--) {
        if (rela) patch(&o, rela, relasz / sizeof *rela, syms, strs);
        if (jmprel && pltrela) patch(&o, jmprel, pltsz / sizeof *jmprel, syms, strs);
        o.nif_alone = o.nif_refused > 0 || nwords + o.nif_left > MAX_WORDS;
        if (o.nif_alone) o.nif_left = 0;
    }
    if (o.rewritten) objects++;
    return 0;
}

/* One pass over every object; skipped and objects say what the last pass found. */
static void rewrite_all(void)
{
    skipped = objects = 0;
    dl_iterate_phdr(patch_object, NULL);
}

/* The caller's dlopen, as its own: the name it gives is searched as it would be (dlopen_as.h). */
static void *attached_dlopen(const char *file, int mode)
{
    void *(*real)(const char *, int) = (void *(*)(const char *, int))dlopen_original;
    char path[PATH_MAX];
    const char *as = mt_dlopen_name(file, __builtin_return_address(0), path, sizeof path);
    void *handle = real(as, mode);
    if (!handle || !__atomic_load_n(&rewriting, __ATOMIC_ACQUIRE)) return handle;
    int e = errno;
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    if (rewriting) rewrite_all();
    pthread_mutex_unlock(&lock);
    mt_guard_release();
    errno = e;
    return handle;
}

static uint64_t stacks_so_far(void)
{
    return mt_stack_count();
}

/* The allocator's own functions that the process binds to its definitions (extended.h), each
 * its hook's original from now on. */
static void find_extended(void)
{
    for (int i = 0; i < MT_EXTENDED; i++) {
        uintptr_t base, f = mt_definition(mt_extended[i].name, &base);
        if (!f || base != allocator_base) continue;
        __atomic_store_n(mt_extended[i].original, (mt_word_fn)f, __ATOMIC_RELEASE);
        targets[ntargets++] =
            (struct target){mt_extended[i].name, f, mt_extended[i].hook, BUT_THE_ALLOCATOR};
        extended_targets++;
    }
}

/* The malloc family's functions that the words hold: glibc's, in every object; or, where another
 * allocator is the process's (foreign), those it defines, in every object but its own (a name it
 * does not define is glibc's, whose calls reach the allocator through libc's own words). */
static enum mt_attach_error find_family(void *libc, int foreign)
{
    for (int i = 0; i < MT_HOOKS; i++) {
        uintptr_t base = 0, f;
        if (foreign) {
            if (!(f = mt_definition(mt_kind_names[i], &base)) || base != allocator_base) continue;
        } else if (!(f = (uintptr_t)dlsym(libc, mt_kind_names[i]))) {
            return MT_ATTACH_NO_GLIBC;
        }
        targets[ntargets++] = (struct target){mt_kind_names[i], f, (uintptr_t)mt_hook_functions[i],
                                              foreign ? BUT_THE_ALLOCATOR : EVERY_OBJECT};
    }
    return MT_ATTACH_OK;
}

/* The functions the words must hold to be rewritten: the malloc family (with malloc_family:
 * glibc's, or the allocator's when mt_real is foreign), the allocator's own API (with extended),
 * dlopen (the one the process binds: the preloaded copy's own interposer, else glibc's), and in a
 * BEAM the VM's NIF API. */
static enum mt_attach_error find_targets(int malloc_family, int extended)
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc) return MT_ATTACH_NO_GLIBC;
    ntargets = extended_targets = 0;
    Dl_info in;
    allocator_base =
        mt_real.foreign && dladdr((void *)mt_real.malloc, &in) ? (uintptr_t)in.dli_fbase : 0;
    if (malloc_family) {
        enum mt_attach_error e = find_family(libc, mt_real.foreign);
        if (e != MT_ATTACH_OK) return e;
    }
    malloc_targets = ntargets;
    if (extended && allocator_base) find_extended();
    nif_targets = mt_nif_hooks_find(&vm_base);
    if (nif_targets) {
        mt_beam_vm_learn(); /* the resources' hooks ask which release runs */
        for (int i = 0; i < MT_NIF_HOOKS; i++)
            targets[ntargets++] = (struct target){mt_nif_hooks[i].name, mt_nif_hooks[i].vm,
                                                  mt_nif_hooks[i].hook, BUT_THE_VM};
    }
    dlopen_original = (uintptr_t)dlsym(libc, "dlopen");
    uintptr_t bound = preloaded ? mt_definition("dlopen", NULL) : dlopen_original;
    if (dlopen_original && bound)
        targets[ntargets++] = (struct target){"dlopen", bound, (uintptr_t)attached_dlopen,
                                              preloaded ? THE_VM : EVERY_OBJECT};
    return MT_ATTACH_OK;
}

/* This copy, pinned: the rewritten words, and the destructors of the resource types opened
 * through the hooks (which stay after a detach), point into it. */
static void find_self(void)
{
    Dl_info self;
    if (!dladdr((void *)find_self, &self)) return;
    self_base = (uintptr_t)self.dli_fbase;
    dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

/* In the preloaded copy: the targets once, then a pass. The malloc family's words are rewritten
 * only where they hold glibc's functions, bound past the preload; with another allocator than
 * glibc's those calls are the program's own business, and stay as the loader bound them, but
 * for its own API's, which mtrace does not export. Those are rewritten again after every dlopen
 * (load.c), in the objects it loaded. */
static void rewrite_preloaded(void)
{
    if (!preloaded) {
        preloaded = 1;
        if (find_targets(!mt_real.foreign, mt_real.foreign) != MT_ATTACH_OK)
            ntargets = malloc_targets = extended_targets = 0;
        find_self();
        __atomic_store_n(&mt_load_rewrites, extended_targets > 0, __ATOMIC_RELEASE);
    }
    if (ntargets && (words || (words = mt_mem_map(MAX_WORDS * sizeof *words)))) rewrite_all();
}

void mt_attach_preloaded(void)
{
    uintptr_t base;
    if (!mt_real.foreign && !mt_nif_hooks_find(&base)) return;
    pthread_mutex_lock(&lock);
    if (!rewriting) {
        rewrite_preloaded();
        __atomic_store_n(&rewriting, nif_targets > 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
}

void mt_attach_bypassed(void)
{
    if (!mt_interposing() || !mt_active()) return;
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    rewrite_preloaded();
    pthread_mutex_unlock(&lock);
    mt_guard_release();
}

/* The allocator the process binds becomes the hooks' (allocator.h), unless recording it would
 * miss calls: an allocator defined in the executable (its own calls of it bind in place, past
 * every word), or ahead of a copy of mtrace that is preloaded behind it, or another copy of
 * mtrace (it records already). */
static enum mt_attach_error adopt_allocator(void)
{
    uintptr_t f = mt_definition("malloc", NULL);
    Dl_info in;
    struct link_map *map = NULL;
    if (!f || !dladdr1((void *)f, &in, (void **)&map, RTLD_DL_LINKMAP) || !map)
        return MT_ATTACH_NO_GLIBC;
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (libc && f == (uintptr_t)dlsym(libc, "malloc")) return MT_ATTACH_OK;
    if (mt_behind_allocator() || !map->l_name[0]) return MT_ATTACH_OTHER_MALLOC;
    void *definer = dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
    int mtrace = definer && dlsym(definer, "nif_init") && dlsym(definer, "malloc") == (void *)f;
    if (definer) dlclose(definer);
    if (mtrace) return MT_ATTACH_OTHER_MALLOC;
    mt_real_adopt();
    return mt_real.foreign ? MT_ATTACH_OK : MT_ATTACH_OTHER_MALLOC;
}

static enum mt_attach_error attach_locked(const char *const *vars)
{
    if (mt_interposing()) return MT_ATTACH_PRELOADED;
    if (attached) return MT_ATTACH_ALREADY;
    enum mt_attach_error e = adopt_allocator();
    if (e == MT_ATTACH_OK) e = find_targets(1, mt_real.foreign);
    if (e != MT_ATTACH_OK) return e;
    if (mt_malloc_definition() != targets[MT_MALLOC].original) return MT_ATTACH_OTHER_MALLOC;
    if (!words && !(words = mt_mem_map(MAX_WORDS * sizeof *words))) return MT_ATTACH_NO_MEMORY;
    mt_config_override(vars);
    int started = mt_start();
    mt_config_override(NULL);
    if (!started) return MT_ATTACH_NO_RECORDER;
    if (!symbols_started) {
        mt_symbols_start(stacks_so_far);
        symbols_started = 1;
    }
    find_self();
    /* a hook that ran across the last detach may have recorded a block whose free went unseen */
    mt_forget_vm_records();
    uint64_t t0 = mt_now_ns(CLOCK_MONOTONIC);
    copies = 0;
    rewrite_all();
    __atomic_store_n(&pause_ns, mt_now_ns(CLOCK_MONOTONIC) - t0, __ATOMIC_RELAXED);
    dl_iterate_phdr(count_copies, NULL);
    __atomic_store_n(&since_ns, mt_now_ns(CLOCK_MONOTONIC_COARSE), __ATOMIC_RELAXED);
    mt_records_partial(__atomic_load_n(&since_ns, __ATOMIC_RELAXED));
    __atomic_store_n(&realtime_s, mt_now_ns(CLOCK_REALTIME) / 1000000000u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&attaches, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&rewriting, 1, __ATOMIC_RELEASE);
    mt_service_attached();
    return MT_ATTACH_OK;
}

enum mt_attach_error mt_attach(const char *const *vars)
{
    pthread_mutex_lock(&lock);
    enum mt_attach_error e = attach_locked(vars);
    pthread_mutex_unlock(&lock);
    return e;
}

enum mt_attach_error mt_detach(void)
{
    pthread_mutex_lock(&lock);
    if (!attached) {
        pthread_mutex_unlock(&lock);
        return mt_interposing() ? MT_ATTACH_PRELOADED : MT_ATTACH_NOT_ATTACHED;
    }
    __atomic_store_n(&attached, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&rewriting, 0, __ATOMIC_RELEASE);
    for (size_t k = nwords; k-- > 0;) {
        struct word *w = &words[k];
        Dl_info in;
        /* An object unloaded since (or another loaded at its place) is not written to. */
        if (dladdr(w->at, &in) && (uintptr_t)in.dli_fbase == w->base &&
            __atomic_load_n(w->at, __ATOMIC_ACQUIRE) == w->now)
            store(w->at, w->old, w->relro);
    }
    nwords = nif_words = 0;
    objects = 0;
    /* the NIF API's frees go unseen from now on: its records would outlive their blocks */
    mt_forget_vm_records();
    mt_service_detached();
    pthread_mutex_unlock(&lock);
    return MT_ATTACH_OK;
}

const char *mt_attach_reason(enum mt_attach_error e)
{
    switch (e) {
    case MT_ATTACH_OK:
        return "attached";
    case MT_ATTACH_PRELOADED:
        return "mtrace is preloaded in this process (LD_PRELOAD): it records already, and cannot "
               "be attached or detached";
    case MT_ATTACH_ALREADY:
        return "mtrace is already attached; Mtrace.detach() first";
    case MT_ATTACH_NOT_ATTACHED:
        return "mtrace is not attached";
    case MT_ATTACH_OTHER_MALLOC:
        return "malloc in this process is the program's own (linked in), another copy of "
               "mtrace's, or a library's preloaded ahead of mtrace: an attach would miss its "
               "calls (an allocator in a library of its own, as jemalloc, tcmalloc and mimalloc "
               "are, can be attached to)";
    case MT_ATTACH_NO_GLIBC:
        return "libc.so.6 is not loaded or lacks a malloc function: mtrace attaches to glibc only";
    case MT_ATTACH_NO_RECORDER:
        return "mtrace could not map memory for its tables (see the mtrace: line on stderr; lower "
               "MTRACE_SLOTS or MTRACE_STACKS)";
    case MT_ATTACH_NO_MEMORY:
        return "mtrace could not map memory for the list of rewritten words";
    case MT_ATTACH_BAD_OPTIONS:
        return "the options are too many or too long (at most 63 lines, 4095 bytes)";
    }
    return "unknown";
}

void mt_attach_state(struct mt_attach_state *out)
{
    out->attached = __atomic_load_n(&attached, __ATOMIC_ACQUIRE);
    out->since_ns = __atomic_load_n(&since_ns, __ATOMIC_RELAXED);
    out->realtime_s = __atomic_load_n(&realtime_s, __ATOMIC_RELAXED);
    out->attaches = __atomic_load_n(&attaches, __ATOMIC_RELAXED);
    out->words = __atomic_load_n(&nwords, __ATOMIC_RELAXED);
    out->objects = __atomic_load_n(&objects, __ATOMIC_RELAXED);
    out->skipped = __atomic_load_n(&skipped, __ATOMIC_RELAXED);
    out->copies = __atomic_load_n(&copies, __ATOMIC_RELAXED);
    out->pause_ns = __atomic_load_n(&pause_ns, __ATOMIC_RELAXED);
    out->nif_words = __atomic_load_n(&nif_words, __ATOMIC_RELAXED);
    out->nif_api = __atomic_load_n(&rewriting, __ATOMIC_ACQUIRE) && nif_targets;
}
