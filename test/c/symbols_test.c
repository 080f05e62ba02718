/* symbols_test.c: standalone checks for symbols.c and its backends, one line per check, then
 * "N passed, M failed". Built by test/c/Makefile. Without mt_symbols_start() every address is
 * taken as live now; the test/symbols_test.exs tests cover source lines and unloaded libraries.
 * The asm labels give this program symbols spelled as C++ and Rust compilers would spell them,
 * so demangling is checked without a C++ or Rust toolchain.
 */
#define _GNU_SOURCE
#include "symbols/symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* The GDB JIT interface as a JIT defines it (layouts.h); -rdynamic lets the symbolizer find it
 * by name. Its symfiles are laid out as the BEAM's (symbols/jit.c). */
struct jit_entry {
    struct jit_entry *next, *prev;
    const unsigned char *symfile;
    uint64_t size;
};
struct {
    uint32_t version, action;
    struct jit_entry *relevant, *first;
} __jit_debug_descriptor = {1, 0, NULL, NULL};

static void jit_register(struct jit_entry *e)
{
    e->prev = NULL;
    e->next = __jit_debug_descriptor.first;
    if (e->next) e->next->prev = e;
    __jit_debug_descriptor.first = __jit_debug_descriptor.relevant = e;
    __jit_debug_descriptor.action = 1;
}

static void jit_unregister(struct jit_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        __jit_debug_descriptor.first = e->next;
    if (e->next) e->next->prev = e->prev;
    __jit_debug_descriptor.relevant = e;
    __jit_debug_descriptor.action = 2;
}

static size_t put_name(unsigned char *at, uint16_t len_at, const char *name)
{
    uint16_t len = (uint16_t)(strlen(name) + 1);
    memcpy(at + len_at, &len, 2);
    memcpy(at + len_at + 2, name, len);
    return len;
}

/* A module at base of 256 bytes of code: f/1's prologue [0, 16), f/1 [16, 64) with lines 5 at
 * 20 and 7 at 40, and g/0 [64, 96) with none. Returns the symfile's size. */
static size_t jit_module(unsigned char *b, uintptr_t base)
{
    uint32_t one = 1, three = 3, code = 256;
    memset(b, 0, 512);
    memcpy(b, &one, 4);
    memcpy(b + 8, &base, 8);
    memcpy(b + 16, &three, 4);
    memcpy(b + 20, &code, 4);
    size_t at = 8 + 24 + put_name(b + 8, 16, "Elixir.A");
    const struct {
        uint32_t start, end, lines;
        const char *name;
    } ranges[] = {{0, 16, 0, "'Elixir.A':f/1-CodeInfoPrologue"},
                  {16, 64, 2, "'Elixir.A':f/1"},
                  {64, 96, 0, "'Elixir.A':g/0"}};
    for (int r = 0; r < 3; r++) {
        memcpy(b + at, &ranges[r].start, 4);
        memcpy(b + at + 4, &ranges[r].end, 4);
        memcpy(b + at + 8, &ranges[r].lines, 4);
        at += 16 + put_name(b + at, 12, ranges[r].name);
        for (uint32_t l = 0; l < ranges[r].lines; l++) {
            uint32_t start = 20 + 20 * l, line = 5 + 2 * l;
            memcpy(b + at, &start, 4);
            memcpy(b + at + 4, &line, 4);
            at += 12 + put_name(b + at, 8, "lib/a.ex");
        }
    }
    return at;
}

static struct mt_frame_info jit_frame(uintptr_t ip)
{
    struct mt_frame_info f[MT_INLINE_MAX];
    mt_symbolize_frames(UINT64_MAX, ip, 0, f, MT_INLINE_MAX);
    return f[0];
}

/* JIT code named from the descriptor's list: a module's functions, lines, and one gone; and
 * symfiles cut short or corrupted, which must name nothing wrongly nor be read past. */
static void jit_modules(void)
{
    static unsigned char symfile[512];
    static struct jit_entry entry;
    /* Code in no module, as the JIT's is. */
    void *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code == MAP_FAILED) {
        check(0, "map the JIT checks' code", NULL);
        return;
    }
    uintptr_t base = (uintptr_t)code;
    entry = (struct jit_entry){.symfile = symfile, .size = jit_module(symfile, base)};
    jit_register(&entry);

    struct mt_frame_info f = jit_frame(base + 41);
    check(f.erlang && same_str(f.function, "'Elixir.A':f/1") && same_str(f.file, "lib/a.ex") &&
              f.line == 7 && !f.path,
          "JIT code: the range's name, and the line of the call before a return address", NULL);
    f = jit_frame(base + 21);
    check(f.line == 5, "JIT code: the first line", NULL);
    f = jit_frame(base + 8);
    check(same_str(f.function, "'Elixir.A':f/1") && !f.file,
          "JIT code: a function's prologue named after it, without a line", NULL);
    f = jit_frame(base + 70);
    check(same_str(f.function, "'Elixir.A':g/0") && !f.file, "JIT code: a range without lines",
          NULL);
    f = jit_frame(base + 200);
    check(!f.function && !f.erlang, "JIT code: inside the module, in no range: no name", NULL);

    jit_unregister(&entry);
    f = jit_frame(base + 41);
    check(!f.function, "JIT code: a module no longer registered names no code now", NULL);

    /* Each a module of its own (an entry and a symfile of their own), parsed at its first lookup:
     * every length cut or flipped at random. */
    int named = 0, cut_named = 0, rounds = 2000;
    unsigned char good[512];
    size_t good_len = jit_module(good, base);
    srand(4321);
    for (int r = 0; r < rounds; r++) {
        struct jit_entry *e = calloc(1, sizeof *e);
        size_t len = r % 2 ? good_len : 1 + (size_t)rand() % good_len;
        unsigned char *b = malloc(len);
        if (!e || !b) break;
        memcpy(b, good, len);
        for (int flips = r % 2 ? 1 + rand() % 3 : 0; flips > 0; flips--)
            b[(size_t)rand() % len] = (unsigned char)rand();
        *e = (struct jit_entry){.symfile = b, .size = len};
        jit_register(e);
        f = jit_frame(base + (uintptr_t)(rand() % 256));
        named += f.function != NULL;
        cut_named += f.function != NULL && len < good_len && r % 2 == 0;
        jit_unregister(e);
        free(b);
        free(e);
    }
    char what[160];
    snprintf(what, sizeof what,
             "%d cut or corrupted symfiles read within their size: %d named, %d of them cut short",
             rounds, named, cut_named);
    check(cut_named == 0, what, NULL);
    munmap(code, 4096);
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
    jit_modules();
    if (libm) dlclose(libm);
    printf("%d passed, %d failed\n", passed, failed);
    return failed > 0;
}
