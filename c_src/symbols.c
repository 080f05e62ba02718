/* symbols.c: turns instruction addresses into {module path, function name}; see symbols.h.
 *
 * We read each module's ELF symbol table ourselves rather than use dladdr, which only sees
 * .dynsym and so misses static functions, or addr2line, which would need a subprocess. Names
 * are copied into a cache that is never freed, so the strings we return never dangle.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libiberty/demangle.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct sym {
    uint64_t start; /* st_value, so lookups subtract the module's load bias first */
    uint64_t size;
    const char *name;
    const char *demangled; /* NULL until first asked; == name when demangling failed */
    int rank;              /* which of several aliases at one address reads best */
};

/* Size and mtime join the inode because a file rebuilt in place often gets the inode back. */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

struct module {
    struct module *next;
    char *path;
    uintptr_t base, lo, hi; /* load bias and the span of the PT_LOAD segments */
    struct file_id file;    /* all zero when the path names no regular file */
    int live;               /* seen in the latest dl_iterate_phdr walk */
    int loaded;             /* symbols read, or known to be unreadable */
    struct sym *syms;
    size_t nsyms;
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *modules;
static unsigned long long seen_gen;

static struct file_id id_of(const struct stat *st)
{
    return (struct file_id){st->st_dev, st->st_ino, st->st_size, st->st_mtim};
}

static int same_file(struct file_id a, struct file_id b)
{
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size &&
           a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec;
}

/* Overflow-safe: does [off, off + len) lie within a file of n bytes? */
static int inside(uint64_t off, uint64_t len, uint64_t n)
{
    return off <= n && len <= n - off;
}

/* The symbol's name when it is a defined function we keep, else NULL. */
static const char *func_name(const Elf64_Sym *s, const char *strs, uint64_t strsz)
{
    int type = ELF64_ST_TYPE(s->st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !s->st_value || s->st_shndx == SHN_UNDEF ||
        s->st_name >= strsz || !strs[s->st_name] ||
        !memchr(strs + s->st_name, '\0', strsz - s->st_name))
        return NULL;
    return strs + s->st_name;
}

static int by_start(const void *pa, const void *pb)
{
    const struct sym *a = pa, *b = pb;
    if (a->start != b->start) return a->start < b->start ? -1 : 1;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return strcmp(b->name, a->name);
}

static void read_elf(struct module *m, const unsigned char *f, uint64_t n)
{
    const Elf64_Ehdr *eh = (const void *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        !eh->e_shoff || eh->e_shoff % 8 || !inside(eh->e_shoff, sizeof(Elf64_Shdr), n))
        return;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
    /* With 0xff00 sections or more, e_shnum is 0 and the count moves to section 0. */
    uint64_t shnum = eh->e_shnum ? eh->e_shnum : sh[0].sh_size;
    if (shnum > (n - eh->e_shoff) / sizeof *sh) return;
    const Elf64_Shdr *tab = NULL;
    for (uint64_t i = 0; i < shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !tab)) tab = &sh[i];
    if (!tab || tab->sh_entsize != sizeof(Elf64_Sym) || tab->sh_offset % 8 ||
        !inside(tab->sh_offset, tab->sh_size, n) || tab->sh_link >= shnum)
        return;
    const Elf64_Shdr *strh = &sh[tab->sh_link];
    if (strh->sh_type != SHT_STRTAB || !inside(strh->sh_offset, strh->sh_size, n)) return;
    const Elf64_Sym *es = (const void *)(f + tab->sh_offset);
    const char *strs = (const char *)f + strh->sh_offset;
    size_t count = tab->sh_size / sizeof *es, kept = 0, bytes = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = func_name(&es[i], strs, strh->sh_size);
        if (name) {
            kept++;
            bytes += strlen(name) + 1;
        }
    }
    if (!kept) return;
    struct sym *v = malloc(kept * sizeof *v);
    char *buf = malloc(bytes);
    if (!v || !buf) {
        free(v);
        free(buf);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = func_name(&es[i], strs, strh->sh_size);
        if (!name) continue;
        size_t len = strlen(name) + 1;
        int bind = ELF64_ST_BIND(es[i].st_info);
        memcpy(buf, name, len);
        /* Public spellings (malloc, not __libc_malloc) first, then the strongest binding. */
        v[k++] = (struct sym){.start = es[i].st_value,
                              .size = es[i].st_size,
                              .name = buf,
                              .rank = (name[0] != '_') * 4 + (bind == STB_GLOBAL) * 2 +
                                      (bind == STB_WEAK)};
        buf += len;
    }
    qsort(v, kept, sizeof *v, by_start);
    /* One entry per address, the best-ranked alias last in its run, so the binary search
     * below sees a strictly increasing array. */
    k = 0;
    for (size_t i = 0; i < kept; i++) {
        if (i + 1 < kept && v[i + 1].start == v[i].start) {
            if (v[i].size > v[i + 1].size) v[i + 1].size = v[i].size;
            continue;
        }
        v[k++] = v[i];
    }
    m->syms = v;
    m->nsyms = k;
}

static void load_symbols(struct module *m)
{
    int fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    void *map = MAP_FAILED;
    /* The file must still be the one we keyed the module on, not a replacement. */
    if (fstat(fd, &st) == 0 && same_file(id_of(&st), m->file) &&
        (uint64_t)st.st_size >= sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return;
    read_elf(m, map, (uint64_t)st.st_size);
    munmap(map, (size_t)st.st_size);
}

/* Greatest start <= a; a zero-sized symbol is taken to run up to the next one. */
static struct sym *find_sym(const struct module *m, uint64_t a)
{
    size_t lo = 0, hi = m->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->syms[mid].start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo) return NULL;
    struct sym *s = &m->syms[lo - 1];
    return s->size == 0 || a - s->start < s->size ? s : NULL;
}

/* Loads plus unloads so far: any dlopen or dlclose changes it. 0 when the loader keeps no
 * count, which makes every call walk the module list. */
static int gen_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    int counted = size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs;
    *(unsigned long long *)arg = counted ? info->dlpi_adds + info->dlpi_subs : 0;
    return 1;
}

static int refresh_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo) lo = start;
        if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
    }
    if (lo >= hi) return 0;
    char exe[PATH_MAX];
    const char *path = info->dlpi_name;
    if (!path || !path[0]) {
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (len > 0) exe[len] = '\0';
        path = len > 0 ? exe : program_invocation_name;
    }
    struct stat st;
    int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    struct file_id id = is_file ? id_of(&st) : (struct file_id){0};
    for (struct module *m = modules; m; m = m->next)
        if (m->base == info->dlpi_addr && same_file(m->file, id) && !strcmp(m->path, path)) {
            m->live = 1;
            return 0;
        }
    struct module *m = calloc(1, sizeof *m);
    char *copy = strdup(path);
    if (!m || !copy) {
        free(m);
        free(copy);
        *(int *)arg = 1;
        return 0;
    }
    *m = (struct module){.next = modules,
                         .path = copy,
                         .base = info->dlpi_addr,
                         .lo = lo,
                         .hi = hi,
                         .file = id,
                         .live = 1,
                         .loaded = !is_file};
    modules = m;
    return 0;
}

int mt_symbolize(uintptr_t ip, int demangle, struct mt_symbol *out)
{
    uintptr_t a = ip - 1;
    unsigned long long gen = 0;
    struct module *m;
    out->path = out->name = NULL;
    out->base = 0;
    pthread_mutex_lock(&cache_lock);
    dl_iterate_phdr(gen_cb, &gen);
    /* Without a change in the count, a walk could find nothing new: skip it. */
    if (!gen || gen != seen_gen) {
        int failed = 0;
        for (m = modules; m; m = m->next)
            m->live = 0;
        dl_iterate_phdr(refresh_cb, &failed);
        seen_gen = failed ? 0 : gen;
    }
    m = modules;
    while (m && !(m->live && a >= m->lo && a < m->hi))
        m = m->next;
    if (m) {
        out->path = m->path;
        out->base = m->base;
        if (!m->loaded) {
            load_symbols(m);
            m->loaded = 1;
        }
        struct sym *s = find_sym(m, a - m->base);
        if (s && demangle) {
            if (!s->demangled) {
                char *d = cplus_demangle(s->name, DMGL_PARAMS | DMGL_ANSI);
                s->demangled = d ? d : s->name;
            }
            out->name = s->demangled;
        } else if (s) {
            out->name = s->name;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    return m ? 0 : -1;
}
