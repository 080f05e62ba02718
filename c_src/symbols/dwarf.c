/* symbols/dwarf.c: the DWARF backend, on elfutils' libdwfl (see symbols/backend.h).
 *
 * One Dwfl per module, holding that module alone at its load bias: a module's answers then do
 * not depend on what else is loaded, and an unloaded module can still be read.
 *
 * Separate debug files are found by our own callback rather than dwfl_standard_find_debuginfo,
 * which after a miss would dlopen libdebuginfod (and with it libcurl) into the traced process.
 *
 * libdw is opened at the first mt_dwarf_open(), not linked: the processes the library is
 * preloaded into (sh, epmd, every child of a release) then map neither it nor libelf, libz and
 * libbz2 as they start, and where libdw is missing frames are named without file:line.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols/backend.h"

#define DW_FUNCTIONS(X)                                                                            \
    X(dwfl_begin)                                                                                  \
    X(dwfl_end)                                                                                    \
    X(dwfl_report_begin)                                                                           \
    X(dwfl_report_elf)                                                                             \
    X(dwfl_report_end)                                                                             \
    X(dwfl_module_getdwarf)                                                                        \
    X(dwfl_module_addrdie)                                                                         \
    X(dwfl_module_getsrc)                                                                          \
    X(dwfl_lineinfo)                                                                               \
    X(dwfl_build_id_find_debuginfo)                                                                \
    X(dwarf_attr)                                                                                  \
    X(dwarf_attr_integrate)                                                                        \
    X(dwarf_formstring)                                                                            \
    X(dwarf_formudata)                                                                             \
    X(dwarf_diecu)                                                                                 \
    X(dwarf_getsrcfiles)                                                                           \
    X(dwarf_filesrc)                                                                               \
    X(dwarf_getscopes)                                                                             \
    X(dwarf_offdie)                                                                                \
    X(dwarf_dieoffset)                                                                             \
    X(dwarf_getscopes_die)                                                                         \
    X(dwarf_tag)

static struct {
#define DECLARE(f) __typeof__(f) *f;
    DW_FUNCTIONS(DECLARE)
#undef DECLARE
} dw;

/* Whether libdw is there: opened once (the caller holds the symbols' mutex), never closed. */
static int dw_open(void)
{
    static int state; /* 0: not tried; 1: open; -1: missing */
    if (state) return state > 0;
    state = -1;
    void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
#define LOAD(f)                                                                                    \
    if (!(dw.f = (__typeof__(f) *)dlsym(h, #f))) return 0;
    DW_FUNCTIONS(LOAD)
#undef LOAD
    state = 1;
    return 1;
}

struct mt_dwarf {
    Dwfl *dwfl;
    Dwfl_Module *mod;
};

/* libdwfl reads the search path through this pointer, for the build-id lookup. */
static char *search_path;

/* The CRC-32 .gnu_debuglink carries of its debug file (zlib's polynomial). */
static uint32_t file_crc(int fd)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    unsigned char buf[65536];
    uint32_t crc = 0xFFFFFFFFu;
    ssize_t got;
    off_t at = 0;
    while ((got = pread(fd, buf, sizeof buf, at)) > 0) {
        for (ssize_t i = 0; i < got; i++)
            crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
        at += got;
    }
    return crc ^ 0xFFFFFFFFu;
}

/* Opens dir/sub/name when its CRC is crc; sets *found to a malloc'd copy of its path. */
static int try_debuglink(const char *dir, const char *sub, const char *name, uint32_t crc,
                         char **found)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s/%s", dir, sub, name) >= (int)sizeof path) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (file_crc(fd) != crc || !(*found = strdup(path))) {
        close(fd);
        return -1;
    }
    return fd;
}

/* By build id in each absolute directory of the search path, then by .gnu_debuglink: beside
 * the file, in its .debug directory, and under each absolute directory of the search path. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink, GElf_Word crc,
                          char **debuginfo_file_name)
{
    int fd = dw.dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink,
                                             crc, debuginfo_file_name);
    if (fd >= 0 || !debuglink || !file_name || file_name[0] != '/') return fd;
    char dir[PATH_MAX];
    const char *slash = strrchr(file_name, '/');
    size_t len = (size_t)(slash - file_name);
    if (len >= sizeof dir || strchr(debuglink, '/')) return -1;
    memcpy(dir, file_name, len);
    dir[len] = '\0';
    if ((fd = try_debuglink(dir, "", debuglink, crc, debuginfo_file_name)) >= 0 ||
        (fd = try_debuglink(dir, "/.debug", debuglink, crc, debuginfo_file_name)) >= 0)
        return fd;
    char *copy = search_path ? strdup(search_path) : NULL, *rest = copy, *d;
    while (fd < 0 && (d = strsep(&rest, ":")))
        if (d[0] == '/') fd = try_debuglink(d, dir, debuglink, crc, debuginfo_file_name);
    free(copy);
    return fd;
}

/* The main file is handed over by descriptor: libdwfl never has to look for it. */
static int no_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                  char **file_name, Elf **elfp)
{
    (void)mod, (void)userdata, (void)modname, (void)base, (void)file_name, (void)elfp;
    return -1;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = no_elf,
    .find_debuginfo = find_debuginfo,
    .debuginfo_path = &search_path,
};

struct mt_dwarf *mt_dwarf_open(const char *path, struct mt_file_id id, uintptr_t bias,
                               const char *debug_path)
{
    if (!dw_open()) return NULL;
    if (!search_path && debug_path) search_path = strdup(debug_path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    struct mt_dwarf *d = NULL;
    Dwfl *dwfl = NULL;
    Dwfl_Module *mod = NULL;
    if (fstat(fd, &st) == 0 && mt_same_file(mt_file_id_of(&st), id) &&
        (dwfl = dw.dwfl_begin(&callbacks))) {
        dw.dwfl_report_begin(dwfl);
        mod = dw.dwfl_report_elf(dwfl, path, path, fd, bias, true);
        dw.dwfl_report_end(dwfl, NULL, NULL);
    }
    if (!mod || !(d = malloc(sizeof *d))) {
        /* Without a module the descriptor is still ours; with one, dwfl_end closes it. */
        if (!mod) close(fd);
        if (dwfl) dw.dwfl_end(dwfl);
        return NULL;
    }
    *d = (struct mt_dwarf){dwfl, mod};
    /* Every file it needs is opened now, under our mutex, rather than at some later lookup. */
    Dwarf_Addr dbias;
    dw.dwfl_module_getdwarf(mod, &dbias);
    return d;
}

static const char *attr_string(Dwarf_Die *die, int name)
{
    Dwarf_Attribute at;
    return dw.dwarf_formstring(dw.dwarf_attr_integrate(die, name, &at));
}

/* A function's name: its linkage name (demangled if asked), else its plain name. Through
 * DW_AT_abstract_origin, as an inlined instance names nothing itself. *owned is what to free. */
static const char *die_name(Dwarf_Die *die, int demangle, char **owned)
{
    const char *link = attr_string(die, DW_AT_linkage_name);
    if (!link) link = attr_string(die, DW_AT_MIPS_linkage_name);
    if (link && demangle && (*owned = mt_demangle(link))) return *owned;
    return link ? link : attr_string(die, DW_AT_name);
}

/* Where an inlined instance was called from: a line in its caller. */
static void call_site(Dwarf_Die *die, const char **file, int *line)
{
    Dwarf_Attribute at;
    Dwarf_Word w;
    Dwarf_Die cu;
    Dwarf_Files *files;
    size_t nfiles;
    *file = NULL;
    *line = 0;
    if (dw.dwarf_formudata(dw.dwarf_attr(die, DW_AT_call_line, &at), &w) == 0) *line = (int)w;
    if (dw.dwarf_formudata(dw.dwarf_attr(die, DW_AT_call_file, &at), &w) == 0 &&
        dw.dwarf_diecu(die, &cu, NULL, NULL) && dw.dwarf_getsrcfiles(&cu, &files, &nfiles) == 0 &&
        w < nfiles)
        *file = dw.dwarf_filesrc(files, w, NULL, NULL);
}

int mt_dwarf_frames(struct mt_dwarf *d, uintptr_t a, int demangle, struct mt_frame_info *out,
                    int max)
{
    Dwarf_Addr bias;
    Dwarf_Die *cu = dw.dwfl_module_addrdie(d->mod, a, &bias);
    if (!cu) return 0;
    Dwfl_Line *ln = dw.dwfl_module_getsrc(d->mod, a);
    int line = 0;
    const char *file = ln ? dw.dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL) : NULL;
    Dwarf_Die *scopes = NULL, inner;
    int nscopes = dw.dwarf_getscopes(cu, a - bias, &scopes), n = 0;
    /* dwarf_getscopes goes on from an inlined instance into its abstract definition's scopes;
     * the callers are the DIEs that hold the instance, as elfutils' addr2line finds them. */
    Dwarf_Addr dwarf_bias;
    if (nscopes > 0 && dw.dwarf_offdie(dw.dwfl_module_getdwarf(d->mod, &dwarf_bias),
                                       dw.dwarf_dieoffset(&scopes[0]), &inner)) {
        Dwarf_Die *chain = NULL;
        int nchain = dw.dwarf_getscopes_die(&inner, &chain);
        if (nchain > 0) {
            free(scopes);
            scopes = chain;
            nscopes = nchain;
        }
    }
    int outer = 0;
    for (int i = 0; i < nscopes && !outer; i++) {
        int tag = dw.dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
        outer = tag == DW_TAG_subprogram;
        /* The last place is kept for the function the chain is inlined into. */
        if (outer || n < max - 1) {
            char *owned = NULL;
            out[n++] = (struct mt_frame_info){
                .function = mt_symbols_intern(die_name(&scopes[i], demangle, &owned)),
                .file = mt_symbols_intern(file),
                .line = line,
                .inlined = !outer};
            free(owned);
        }
        if (!outer) call_site(&scopes[i], &file, &line);
    }
    free(scopes);
    /* No enclosing subprogram: the symbol table names the function (the caller fills it in). */
    if (!outer && n < max)
        out[n++] = (struct mt_frame_info){.file = mt_symbols_intern(file), .line = line};
    return n;
}
