/* attach.c: the GOT patcher behind Mtrace.attach/0 (attach.h). */
#define _GNU_SOURCE
#include "attach.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "hooks.h"
#include "mem.h"
#include "recorder.h"
#include "service.h"
#include "stack.h"
#include "symbols.h"

/* The hooked functions, then dlopen, which the attach needs for objects loaded later. */
#define DLOPEN MT_TRACK
#define TARGETS (MT_TRACK + 1)

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
static uintptr_t originals[TARGETS], replacements[TARGETS];
static const char *names[TARGETS];
static uintptr_t self_base;
static int attached, symbols_started;
static uint64_t since_ns, realtime_s, attaches, objects, skipped, copies, pause_ns;

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
            for (int k = 0; k < MT_TRACK; k++)
                if (v == originals[k]) copies++;
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
};

static int target_of(const char *name)
{
    for (int i = 0; i < TARGETS; i++)
        if (strcmp(name, names[i]) == 0) return i;
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

static void store(uintptr_t *at, uintptr_t value, int relro)
{
    uintptr_t page = (uintptr_t)at & ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    if (relro && mprotect((void *)page, len, PROT_READ | PROT_WRITE) != 0) return;
    __atomic_store_n(at, value, __ATOMIC_RELEASE);
    if (relro) mprotect((void *)page, len, PROT_READ);
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
        if (i < 0) continue;
        uintptr_t *at = (uintptr_t *)(o->info->dlpi_addr + r[k].r_offset);
        uintptr_t v = __atomic_load_n(at, __ATOMIC_ACQUIRE);
        if (v == replacements[i]) continue;
        int relro;
        int lazy = type == R_X86_64_JUMP_SLOT && v >= o->lo && v < o->hi;
        if ((v != originals[i] && !lazy) || (type == R_X86_64_64 && r[k].r_addend != 0) ||
            !writable(o, (uintptr_t)at, &relro) || nwords == MAX_WORDS) {
            skipped++;
            continue;
        }
        words[nwords++] = (struct word){o->info->dlpi_addr, at, v, replacements[i], relro};
        store(at, replacements[i], relro);
        o->rewritten = 1;
    }
}

/* dl_iterate_phdr's callback: rewrites one object's words (the loader keeps x86-64's dynamic
 * section relocated in place, but for the vDSO, which is skipped). */
static int patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    uintptr_t base = info->dlpi_addr;
    if (base == self_base || base == getauxval(AT_BASE) || base == getauxval(AT_SYSINFO_EHDR))
        return 0;
    long page = sysconf(_SC_PAGESIZE);
    struct object o = {.info = info, .lo = UINTPTR_MAX};
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = base + ph->p_vaddr;
        if (ph->p_type == PT_DYNAMIC) dyn = (const void *)start;
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
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            syms = (const void *)dyn->d_un.d_ptr;
            break;
        case DT_STRTAB:
            strs = (const void *)dyn->d_un.d_ptr;
            break;
        case DT_RELA:
            rela = (const void *)dyn->d_un.d_ptr;
            break;
        case DT_RELASZ:
            relasz = dyn->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = (const void *)dyn->d_un.d_ptr;
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
    if (rela) patch(&o, rela, relasz / sizeof *rela, syms, strs);
    if (jmprel && pltrela) patch(&o, jmprel, pltsz / sizeof *jmprel, syms, strs);
    if (o.rewritten) objects++;
    return 0;
}

static void *attached_dlopen(const char *file, int mode)
{
    void *(*real)(const char *, int) = (void *(*)(const char *, int))originals[DLOPEN];
    void *handle = real(file, mode);
    if (!handle || !__atomic_load_n(&attached, __ATOMIC_ACQUIRE)) return handle;
    int e = errno;
    mt_guard_hold();
    pthread_mutex_lock(&lock);
    if (attached) dl_iterate_phdr(patch_object, NULL);
    pthread_mutex_unlock(&lock);
    mt_guard_release();
    errno = e;
    return handle;
}

static uint64_t stacks_so_far(void)
{
    return mt_stack_count();
}

/* The functions glibc defines, which the words must hold to be rewritten. */
static enum mt_attach_error find_originals(void)
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc) return MT_ATTACH_NO_GLIBC;
    for (int i = 0; i < TARGETS; i++) {
        names[i] = i == DLOPEN ? "dlopen" : mt_kind_names[i];
        replacements[i] =
            i == DLOPEN ? (uintptr_t)attached_dlopen : (uintptr_t)mt_hook_functions[i];
        originals[i] = (uintptr_t)dlsym(libc, names[i]);
        if (!originals[i] && i != DLOPEN) return MT_ATTACH_NO_GLIBC;
    }
    return MT_ATTACH_OK;
}

static enum mt_attach_error attach_locked(const char *const *vars)
{
    if (mt_interposing()) return MT_ATTACH_PRELOADED;
    if (attached) return MT_ATTACH_ALREADY;
    enum mt_attach_error e = find_originals();
    if (e != MT_ATTACH_OK) return e;
    if (mt_malloc_definition() != originals[MT_MALLOC]) return MT_ATTACH_OTHER_MALLOC;
    if (!words && !(words = mt_mem_map(MAX_WORDS * sizeof *words))) return MT_ATTACH_NO_MEMORY;
    mt_config_override(vars);
    int started = mt_start();
    mt_config_override(NULL);
    if (!started) return MT_ATTACH_NO_RECORDER;
    if (!symbols_started) {
        mt_symbols_start(stacks_so_far);
        symbols_started = 1;
    }
    Dl_info self;
    if (dladdr((void *)attach_locked, &self)) self_base = (uintptr_t)self.dli_fbase;
    uint64_t t0 = mt_now_ns(CLOCK_MONOTONIC);
    skipped = objects = copies = 0;
    dl_iterate_phdr(patch_object, NULL);
    __atomic_store_n(&pause_ns, mt_now_ns(CLOCK_MONOTONIC) - t0, __ATOMIC_RELAXED);
    dl_iterate_phdr(count_copies, NULL);
    __atomic_store_n(&since_ns, mt_now_ns(CLOCK_MONOTONIC_COARSE), __ATOMIC_RELAXED);
    mt_records_partial(__atomic_load_n(&since_ns, __ATOMIC_RELAXED));
    __atomic_store_n(&realtime_s, mt_now_ns(CLOCK_REALTIME) / 1000000000u, __ATOMIC_RELAXED);
    __atomic_fetch_add(&attaches, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&attached, 1, __ATOMIC_RELEASE);
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
    for (size_t k = nwords; k-- > 0;) {
        struct word *w = &words[k];
        Dl_info in;
        /* An object unloaded since (or another loaded at its place) is not written to. */
        if (dladdr(w->at, &in) && (uintptr_t)in.dli_fbase == w->base &&
            __atomic_load_n(w->at, __ATOMIC_ACQUIRE) == w->now)
            store(w->at, w->old, w->relro);
    }
    nwords = 0;
    objects = 0;
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
        return "another library defines malloc in this process (a preloaded allocator such as "
               "jemalloc or tcmalloc, or mtrace preloaded from another path): mtrace can only "
               "attach to glibc's malloc";
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
}
