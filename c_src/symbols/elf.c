/* symbols/elf.c: the ELF symbol table backend (see symbols/backend.h).
 *
 * We read each module's symbol table ourselves rather than use dladdr, which only sees .dynsym
 * and so misses static functions. The file is mapped only while its table is copied out.
 * Several tables (a file's and its MiniDebugInfo's) add up before they are sorted.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <libiberty/demangle.h>
#include <lzma.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "symbols/backend.h"

struct sym {
    uint64_t start; /* st_value, so lookups subtract the module's load bias first */
    uint64_t size;
    const char *name;
    const char *demangled; /* NULL until first asked; == name when demangling failed */
    int rank;              /* which of several aliases at one address reads best */
};

struct table {
    struct sym *syms;
    size_t n;
};

/* Functions, and data objects (for the roots of Mtrace.why/2: a library's static data). */
struct mt_elf_syms {
    struct table fn, data;
};

struct mt_file_id mt_file_id_of(const struct stat *st)
{
    return (struct mt_file_id){st->st_dev, st->st_ino, st->st_size, st->st_mtim};
}

int mt_same_file(struct mt_file_id a, struct mt_file_id b)
{
    return a.dev == b.dev && a.ino == b.ino && a.size == b.size &&
           a.mtime.tv_sec == b.mtime.tv_sec && a.mtime.tv_nsec == b.mtime.tv_nsec;
}

char *mt_demangle(const char *name)
{
    return cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI);
}

/* Overflow-safe: does [off, off + len) lie within a file of n bytes? */
static int inside(uint64_t off, uint64_t len, uint64_t n)
{
    return off <= n && len <= n - off;
}

/* The symbol's name when it is a defined function (data: a data object) we keep, else NULL. */
static const char *sym_name(const Elf64_Sym *s, const char *strs, uint64_t strsz, int data)
{
    int type = ELF64_ST_TYPE(s->st_info);
    if ((data ? type != STT_OBJECT : type != STT_FUNC && type != STT_GNU_IFUNC) || !s->st_value ||
        s->st_shndx == SHN_UNDEF || s->st_name >= strsz || !strs[s->st_name] ||
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

/* Appends the functions (data: the data objects) of a symbol table to t. */
static void append(struct table *t, const Elf64_Sym *es, size_t count, const char *strs,
                   uint64_t strsz, int data)
{
    size_t kept = 0, bytes = 0;
    for (size_t i = 0; i < count; i++) {
        const char *name = sym_name(&es[i], strs, strsz, data);
        if (name) {
            kept++;
            bytes += strlen(name) + 1;
        }
    }
    if (!kept) return;
    struct sym *v = realloc(t->syms, (t->n + kept) * sizeof *v);
    char *buf = malloc(bytes);
    if (!v || !buf) {
        if (v) t->syms = v;
        free(buf);
        return;
    }
    t->syms = v;
    for (size_t i = 0; i < count; i++) {
        const char *name = sym_name(&es[i], strs, strsz, data);
        if (!name) continue;
        size_t len = strlen(name) + 1;
        int bind = ELF64_ST_BIND(es[i].st_info);
        memcpy(buf, name, len);
        /* Public spellings (malloc, not __libc_malloc) first, then the strongest binding. */
        v[t->n++] = (struct sym){.start = es[i].st_value,
                                 .size = es[i].st_size,
                                 .name = buf,
                                 .rank = (name[0] != '_') * 4 + (bind == STB_GLOBAL) * 2 +
                                         (bind == STB_WEAK)};
        buf += len;
    }
}

/* Appends the functions and data objects of f's symbol table (.symtab, else .dynsym) to e.
 * Returns the span of f's .gnu_debugdata section when f has no .symtab (*dd_len 0 when none). */
static void read_elf(struct mt_elf_syms *e, const unsigned char *f, uint64_t n, uint64_t *dd_off,
                     uint64_t *dd_len)
{
    const Elf64_Ehdr *eh = (const void *)f;
    *dd_len = 0;
    if (n < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || !eh->e_shoff || eh->e_shoff % 8 ||
        !inside(eh->e_shoff, sizeof(Elf64_Shdr), n))
        return;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
    /* With 0xff00 sections or more, e_shnum is 0 and the count moves to section 0. */
    uint64_t shnum = eh->e_shnum ? eh->e_shnum : sh[0].sh_size;
    if (shnum > (n - eh->e_shoff) / sizeof *sh) return;
    const Elf64_Shdr *tab = NULL, *dd = NULL;
    const Elf64_Shdr *names = eh->e_shstrndx < shnum ? &sh[eh->e_shstrndx] : NULL;
    if (names && !inside(names->sh_offset, names->sh_size, n)) names = NULL;
    for (uint64_t i = 0; i < shnum; i++) {
        if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !tab)) tab = &sh[i];
        if (names && sh[i].sh_type == SHT_PROGBITS && sh[i].sh_name < names->sh_size &&
            strncmp((const char *)f + names->sh_offset + sh[i].sh_name, ".gnu_debugdata",
                    names->sh_size - sh[i].sh_name) == 0 &&
            inside(sh[i].sh_offset, sh[i].sh_size, n))
            dd = &sh[i];
    }
    if (dd && !(tab && tab->sh_type == SHT_SYMTAB)) {
        *dd_off = dd->sh_offset;
        *dd_len = dd->sh_size;
    }
    if (!tab || tab->sh_entsize != sizeof(Elf64_Sym) || tab->sh_offset % 8 ||
        !inside(tab->sh_offset, tab->sh_size, n) || tab->sh_link >= shnum)
        return;
    const Elf64_Shdr *strh = &sh[tab->sh_link];
    if (strh->sh_type != SHT_STRTAB || !inside(strh->sh_offset, strh->sh_size, n)) return;
    const Elf64_Sym *es = (const void *)(f + tab->sh_offset);
    const char *strs = (const char *)f + strh->sh_offset;
    size_t count = tab->sh_size / sizeof *es;
    append(&e->fn, es, count, strs, strh->sh_size, 0);
    append(&e->data, es, count, strs, strh->sh_size, 1);
}

/* Sorted by address, one entry per address: the best-ranked alias, so that the binary search
 * below sees a strictly increasing array. */
static void finish(struct table *e)
{
    struct sym *v = e->syms;
    if (!e->n) return;
    qsort(v, e->n, sizeof *v, by_start);
    size_t k = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (i + 1 < e->n && v[i + 1].start == v[i].start) {
            if (v[i].size > v[i + 1].size) v[i + 1].size = v[i].size;
            continue;
        }
        v[k++] = v[i];
    }
    e->n = k;
}

/* MiniDebugInfo: .gnu_debugdata is an xz-compressed ELF file whose .symtab holds the functions
 * that .dynsym lacks (static ones among them). */
static void read_minidebuginfo(struct mt_elf_syms *e, const unsigned char *xz, uint64_t len)
{
    size_t cap = len * 8 > (1u << 20) ? len * 8 : (1u << 20);
    for (int tries = 0; tries < 6; tries++, cap *= 2) {
        unsigned char *out = malloc(cap);
        if (!out) return;
        uint64_t memlimit = UINT64_MAX;
        size_t in_pos = 0, out_pos = 0;
        lzma_ret r =
            lzma_stream_buffer_decode(&memlimit, 0, NULL, xz, &in_pos, len, out, &out_pos, cap);
        if (r == LZMA_OK) {
            uint64_t dd_off, dd_len;
            read_elf(e, out, out_pos, &dd_off, &dd_len);
            /* Names point into out: it is kept. */
            return;
        }
        free(out);
        if (r != LZMA_BUF_ERROR) return;
    }
}

struct mt_elf_syms *mt_elf_open(const char *path, struct mt_file_id id)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && mt_same_file(mt_file_id_of(&st), id) &&
        (uint64_t)st.st_size >= sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return NULL;
    struct mt_elf_syms *e = calloc(1, sizeof *e);
    uint64_t dd_off, dd_len;
    if (e) {
        read_elf(e, map, (uint64_t)st.st_size, &dd_off, &dd_len);
        if (dd_len) read_minidebuginfo(e, (const unsigned char *)map + dd_off, dd_len);
        finish(&e->fn);
        finish(&e->data);
    }
    munmap(map, (size_t)st.st_size);
    if (e && !e->fn.n && !e->data.n) {
        free(e);
        e = NULL;
    }
    return e;
}

/* Greatest start <= a; a zero-sized symbol is taken to run up to the next one. */
static struct sym *find_sym(const struct table *e, uint64_t a)
{
    size_t lo = 0, hi = e->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->syms[mid].start <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo) return NULL;
    struct sym *s = &e->syms[lo - 1];
    return s->size == 0 || a - s->start < s->size ? s : NULL;
}

const char *mt_elf_name(struct mt_elf_syms *e, uint64_t a, int demangle)
{
    struct sym *s = e ? find_sym(&e->fn, a) : NULL;
    if (!s) return NULL;
    if (!demangle) return s->name;
    if (!s->demangled) {
        char *d = mt_demangle(s->name);
        s->demangled = d ? d : s->name;
    }
    return s->demangled;
}

const char *mt_elf_data_name(struct mt_elf_syms *e, uint64_t a, uint64_t *start)
{
    struct sym *s = e ? find_sym(&e->data, a) : NULL;
    if (!s) return NULL;
    *start = s->start;
    return s->name;
}
