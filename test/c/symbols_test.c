/* symbols_test.c: standalone checks for symbols.c and its backends, one line per check, then
 * "N passed, M failed". Built by test/c/Makefile. Without mt_symbols_start() every address is
 * taken as live now; the test/symbols_test.exs tests cover source lines and unloaded libraries.
 * The asm labels give this program symbols spelled as C++ and Rust compilers would spell them,
 * so demangling is checked without a C++ or Rust toolchain.
 */
#define _GNU_SOURCE
#include "../../c_src/symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int passed, failed;

/* The old one-frame view of an address: its module and the function its code is in. */
struct mt_symbol {
    const char *path, *name;
};

static int mt_symbolize(uintptr_t ip, int demangle, struct mt_symbol *out)
{
    struct mt_frame_info f[MT_INLINE_MAX];
    int n = mt_symbolize_frames(UINT64_MAX, ip, demangle, f, MT_INLINE_MAX);
    out->path = f[n - 1].path;
    out->name = f[n - 1].function;
    return out->path ? 0 : -1;
}

static void check(int ok, const char *what, const struct mt_symbol *s)
{
    if (ok)
        passed++;
    else
        failed++;
    printf("%s: %s", ok ? "ok" : "FAIL", what);
    if (s) printf(" (path=%s name=%s)", s->path ? s->path : "NULL", s->name ? s->name : "NULL");
    printf("\n");
}

/* Distinct bodies, so identical code folding cannot merge them into one symbol. */
static __attribute__((noinline)) int local_fn(int x)
{
    return x * 3 + 1;
}

int cxx_fn(int x) __asm__("_ZN5leaky9cxx_allocEi");
__attribute__((noinline)) int cxx_fn(int x)
{
    return x * 5 + 2;
}

int rust_fn(int x) __asm__("_ZN4core3fmt5write17h0123456789abcdefE");
__attribute__((noinline)) int rust_fn(int x)
{
    return x * 7 + 3;
}

static int (*volatile keep[])(int) = {local_fn, cxx_fn, rust_fn};

static uintptr_t ip_of(void *fn)
{
    return (uintptr_t)fn + 1;
}

static int starts_with(const char *s, const char *prefix)
{
    return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

static int same_str(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

enum { QUERIES = 6, THREADS = 4, ROUNDS = 10000 };
static uintptr_t query_ip[QUERIES];
static int query_dm[QUERIES];
static struct mt_symbol expected[QUERIES];

/* Each thread also looks up 256 addresses of libc after malloc that no one looked up before, so
 * that the caches are written while the other threads read them. */
static void *hammer(void *arg)
{
    long bad = 0;
    uintptr_t fresh = query_ip[1] + (uintptr_t)arg * 256 * 16;
    for (int r = 0; r < ROUNDS; r++) {
        for (int q = 0; q < QUERIES; q++) {
            struct mt_symbol s;
            mt_symbolize(query_ip[q], query_dm[q], &s);
            /* Interned strings: the very same pointers, not just equal text. */
            bad += s.path != expected[q].path || s.name != expected[q].name;
        }
        struct mt_symbol s;
        if (r < 256)
            bad +=
                mt_symbolize(fresh + 16 * (uintptr_t)r, 1, &s) != 0 || s.path != expected[1].path;
    }
    return (void *)bad;
}

static int write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    int ok = write(fd, data, len) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

static unsigned char *read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    unsigned char *buf = malloc((size_t)st.st_size);
    *len = (size_t)st.st_size;
    if (buf && read(fd, buf, *len) != (ssize_t)*len) {
        free(buf);
        buf = NULL;
    }
    close(fd);
    return buf;
}

/* dlopens a private copy of libm under dir, replaces the file on disk with now (the mapping
 * keeps the old inode alive; NULL leaves no file), and symbolizes hypot in the copy. True when
 * the answer is 0 with the copy's path. */
static int replaced_lib(const char *dir, const unsigned char *orig, size_t orig_len,
                        const void *now, size_t now_len, struct mt_symbol *s)
{
    static int serial;
    char path[PATH_MAX];
    int ok = 0;
    s->path = s->name = NULL;
    /* A fresh path each time, so no cached module can answer for the new file. */
    snprintf(path, sizeof path, "%s/copy%d.so", dir, serial++);
    if (write_file(path, orig, orig_len) != 0) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *fn = h ? dlsym(h, "hypot") : NULL;
    unlink(path);
    if (fn && (!now || write_file(path, now, now_len) == 0))
        ok = mt_symbolize(ip_of(fn), 0, s) == 0 && same_str(s->path, path);
    if (h) dlclose(h);
    unlink(path);
    return ok;
}

/* A random byte of the ELF header's section fields, the section headers or the symbol table. */
static size_t fuzz_offset(const unsigned char *f, size_t len)
{
    const Elf64_Ehdr *eh = (const void *)f;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
    int pick = rand() % 3;
    if (pick == 0) return 0x28 + (size_t)rand() % 0x18;
    if (pick == 1) return eh->e_shoff + (size_t)rand() % ((size_t)eh->e_shnum * sizeof *sh);
    for (int i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_DYNSYM || sh[i].sh_type == SHT_SYMTAB)
            return sh[i].sh_offset + (size_t)rand() % sh[i].sh_size;
    return (size_t)rand() % len;
}

static void malformed_files(void)
{
    char dir[] = "/tmp/test_symbols.XXXXXX", what[128];
    size_t len = 0;
    void *libm = dlopen("libm.so.6", RTLD_NOW);
    struct mt_symbol s;
    Dl_info info;
    unsigned char *orig = NULL;
    if (libm && dladdr(dlsym(libm, "hypot"), &info) && info.dli_fname)
        orig = read_file(info.dli_fname, &len);
    if (!orig || len < 4096 || !mkdtemp(dir)) {
        check(0, "set up copies of libm for the malformed-file checks", NULL);
        free(orig);
        return;
    }
    int ok = replaced_lib(dir, orig, len, orig, len, &s);
    check(ok && same_str(s.name, "hypot"), "intact copy of libm at a private path", &s);
    ok = replaced_lib(dir, orig, len, NULL, 0, &s);
    check(ok && !s.name, "deleted file: path, no name", &s);
    ok = replaced_lib(dir, orig, len, "not an ELF file\n", 16, &s);
    check(ok && !s.name, "non-ELF file: path, no name", &s);
    /* The build id survives in the first half: a debug file found by it may still name it. */
    ok = replaced_lib(dir, orig, len, orig, len / 2, &s);
    check(ok && (!s.name || strstr(s.name, "hypot")), "truncated file: path, no other name", &s);

    /* Any answer is acceptable for a corrupted file; a crash or a wrong path is not. */
    unsigned char *bad = malloc(len);
    int survived = 0, named = 0, rounds = 300;
    srand(12345);
    for (int r = 0; bad && r < rounds; r++) {
        memcpy(bad, orig, len);
        for (int flips = 1 + rand() % 4; flips > 0; flips--) {
            size_t at = fuzz_offset(orig, len);
            if (at < len) bad[at] = (unsigned char)rand();
        }
        survived += replaced_lib(dir, orig, len, bad, len, &s);
        named += s.name != NULL;
    }
    snprintf(what, sizeof what, "%d of %d corrupted copies give their path (%d with a name)",
             survived, rounds, named);
    check(survived == rounds, what, NULL);
    free(bad);
    free(orig);
    rmdir(dir);
    dlclose(libm);
}

int main(void)
{
    struct mt_symbol s, s2;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';

    int rc = mt_symbolize(ip_of(keep[0]), 1, &s);
    check(rc == 0 && same_str(s.name, "local_fn") && same_str(s.path, exe),
          "static function resolves to its name and the program's path", &s);

    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *malloc_fn = libc ? dlsym(libc, "malloc") : NULL;
    rc = mt_symbolize(ip_of(malloc_fn), 1, &s);
    check(rc == 0 && s.path && strstr(s.path, "libc") && s.name && strstr(s.name, "malloc"),
          "malloc resolves into libc", &s);

    rc = mt_symbolize(ip_of(keep[1]), 1, &s);
    check(rc == 0 && same_str(s.name, "leaky::cxx_alloc(int)"), "C++ name demangled", &s);
    mt_symbolize(ip_of(keep[1]), 1, &s2);
    check(s2.name == s.name, "demangled name is cached (same pointer)", &s2);
    rc = mt_symbolize(ip_of(keep[1]), 0, &s);
    check(rc == 0 && same_str(s.name, "_ZN5leaky9cxx_allocEi"), "C++ name raw", &s);

    rc = mt_symbolize(ip_of(keep[2]), 1, &s);
    check(rc == 0 && starts_with(s.name, "core::fmt::write"), "Rust legacy name demangled", &s);
    rc = mt_symbolize(ip_of(keep[2]), 0, &s);
    check(rc == 0 && same_str(s.name, "_ZN4core3fmt5write17h0123456789abcdefE"),
          "Rust legacy name raw", &s);

    rc = mt_symbolize(0x10, 1, &s);
    check(rc == -1 && !s.path && !s.name, "address 0x10 is in no module", &s);

    /* A library loaded after the cache was filled is found. */
    void *libm = dlopen("libm.so.6", RTLD_NOW);
    void *hypot_fn = libm ? dlsym(libm, "hypot") : NULL;
    rc = mt_symbolize(ip_of(hypot_fn), 1, &s);
    check(rc == 0 && s.path && strstr(s.path, "libm") && starts_with(s.name, "hypot"),
          "library dlopened later is found", &s);

    void *fns[QUERIES] = {keep[0], malloc_fn, keep[1], keep[1], keep[2], hypot_fn};
    int dms[QUERIES] = {1, 1, 1, 0, 1, 0};
    for (int q = 0; q < QUERIES; q++) {
        query_ip[q] = ip_of(fns[q]);
        query_dm[q] = dms[q];
        mt_symbolize(query_ip[q], query_dm[q], &expected[q]);
    }
    pthread_t t[THREADS];
    long bad = 0;
    int started = 0;
    for (int i = 0; i < THREADS; i++)
        started += pthread_create(&t[i], NULL, hammer, (void *)(uintptr_t)i) == 0;
    for (int i = 0; i < started; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    check(started == THREADS && bad == 0,
          "4 threads x 10000 rounds agree with one thread, 1024 new lookups among them", NULL);

    malformed_files();
    if (libm) dlclose(libm);
    printf("%d passed, %d failed\n", passed, failed);
    return failed > 0;
}
