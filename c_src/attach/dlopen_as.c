/* dlopen_as.c: the name a wrapper gives dlopen for the object that called it (dlopen_as.h). */
#define _GNU_SOURCE
#include "attach/dlopen_as.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/mem.h"
#include "record/bindings.h"

struct answer {
    const char *name;
    int found;
};

/* dl_iterate_phdr's callback: whether the object answers to a->name, by its path or its soname. */
static int answers(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct answer *a = arg;
    if (info->dlpi_name && strcmp(info->dlpi_name, a->name) == 0) return a->found = 1;
    struct mt_dynamic dynamic = mt_dynamic(info);
    const char *strs = NULL;
    size_t soname = SIZE_MAX;
    for (const ElfW(Dyn) *d = dynamic.dyn; d && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB) strs = mt_dynamic_ptr(dynamic, d->d_un.d_ptr);
        if (d->d_tag == DT_SONAME) soname = d->d_un.d_val;
    }
    if (strs && soname != SIZE_MAX && strcmp(strs + soname, a->name) == 0) return a->found = 1;
    return 0;
}

/* The directory of the object whose link map is map, in dir (PATH_MAX bytes), as the loader
 * takes it: its name up to the last slash, a relative one from the working directory, the
 * executable's from /proc/self/exe; 0, or -1. */
static int origin(const struct link_map *map, char *dir)
{
    size_t n = 0;
    if (!map->l_name || !map->l_name[0]) {
        ssize_t got = readlink("/proc/self/exe", dir, PATH_MAX - 1);
        if (got <= 0) return -1;
        n = (size_t)got;
    } else {
        if (map->l_name[0] != '/') {
            if (!getcwd(dir, PATH_MAX)) return -1;
            n = strlen(dir);
            if (n + 1 >= PATH_MAX) return -1;
            dir[n++] = '/';
        }
        size_t name = strlen(map->l_name);
        if (n + name >= PATH_MAX) return -1;
        memcpy(dir + n, map->l_name, name);
        n += name;
    }
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return -1;
    *(slash == dir ? slash + 1 : slash) = '\0';
    return 0;
}

static int ident(char c)
{
    return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* file with $ORIGIN and ${ORIGIN} replaced by dir, in path; 0, or -1 when it does not fit. A
 * name is the DST only when no letter, digit or '_' follows it, as for the loader. */
static int expand(const char *file, const char *dir, char *path, size_t len)
{
    size_t n = 0, d = strlen(dir);
    for (const char *p = file; *p;) {
        size_t skip = 0;
        if (strncmp(p, "${ORIGIN}", 9) == 0) skip = 9;
        if (strncmp(p, "$ORIGIN", 7) == 0 && !ident(p[7])) skip = 7;
        if (skip) {
            if (n + d >= len) return -1;
            memcpy(path + n, dir, d);
            n += d;
            p += skip;
        } else {
            if (n + 1 >= len) return -1;
            path[n++] = *p++;
        }
    }
    path[n] = '\0';
    return 0;
}

#define SERINFO_MAX 65536 /* bytes of one object's search list */

static Dl_serinfo *search_list(void *handle, Dl_serinfo *si)
{
    Dl_serinfo size;
    if (dlinfo(handle, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size > SERINFO_MAX) return NULL;
    si->dls_size = size.dls_size;
    si->dls_cnt = size.dls_cnt;
    return dlinfo(handle, RTLD_DI_SERINFO, si) == 0 ? si : NULL;
}

static int listed(const Dl_serinfo *si, const char *dir)
{
    for (unsigned i = 0; i < si->dls_cnt; i++)
        if (strcmp(si->dls_serpath[i].dls_name, dir) == 0) return 1;
    return 0;
}

/* Whether the loader's search stops at path, as glibc's open_verify decides: it goes on past a
 * file it cannot open and an ELF object of another class or machine than this process's (read
 * from mtrace.so's own header), and stops at anything else, to load it or to fail on it (a file
 * too short, no ELF header, another byte order). */
static int stops_search(const char *path, const ElfW(Ehdr) * own)
{
    ElfW(Ehdr) h;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, &h, sizeof h);
    close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) return 1;
    return h.e_ident[EI_CLASS] == own->e_ident[EI_CLASS] && h.e_machine == own->e_machine;
}

/* The first directory of the caller's own search where the loader's search for file stops, and
 * file, in path; 0, or -1 when there is none. */
static int search(const char *file, struct link_map *caller, char *path, size_t len)
{
    Dl_info self;
    struct link_map *own = NULL;
    if (!dladdr1((void *)search, &self, (void **)&own, RTLD_DL_LINKMAP) || !own) return -1;
    char *room = mt_mem_map(2 * SERINFO_MAX);
    if (!room) return -1;
    const Dl_serinfo *theirs = search_list(caller, (Dl_serinfo *)room),
                     *ours = search_list(own, (Dl_serinfo *)(room + SERINFO_MAX));
    int rc = -1;
    if (theirs && ours) {
        unsigned last = 0;
        for (unsigned i = 0; i < theirs->dls_cnt; i++)
            if (!listed(ours, theirs->dls_serpath[i].dls_name)) last = i + 1;
        for (unsigned i = 0; rc != 0 && i < last; i++) {
            int n = snprintf(path, len, "%s/%s", theirs->dls_serpath[i].dls_name, file);
            if (n > 0 && (size_t)n < len && stops_search(path, self.dli_fbase)) rc = 0;
        }
    }
    mt_mem_unmap(room, 2 * SERINFO_MAX);
    return rc;
}

const char *mt_dlopen_name(const char *file, const void *caller, char *path, size_t len)
{
    if (!file || !*file) return file;
    Dl_info info;
    struct link_map *map = NULL;
    /* a caller in no object is taken for the executable, as by the loader */
    if (!dladdr1(caller, &info, (void **)&map, RTLD_DL_LINKMAP) || !map) map = _r_debug.r_map;
    if (!map) return file;
    if (strchr(file, '/')) {
        /* a secure-execution process expands $ORIGIN only into trusted directories */
        if (!strchr(file, '$') || getauxval(AT_SECURE)) return file;
        char *dir = mt_mem_map(PATH_MAX);
        if (!dir) return file;
        const char *as = origin(map, dir) == 0 && expand(file, dir, path, len) == 0 ? path : file;
        mt_mem_unmap(dir, PATH_MAX);
        return as;
    }
    struct answer a = {file, 0};
    dl_iterate_phdr(answers, &a);
    return !a.found && search(file, map, path, len) == 0 ? path : file;
}
