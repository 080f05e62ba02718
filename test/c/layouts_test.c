/* layouts_test.c: the structures the mark knows (layouts.h), each rule on words made to its
 * layout: what it takes and, one field off at a time, what it refuses. A rule that refuses too
 * little hides real pointers (a false leak); one that takes too little leaves stale words (a
 * missed one). Prints one line per check and "N passed, M failed"; exits 1 on any failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <locale.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/platform.h"
#include "mark/beam_vm.h"
#include "mark/layouts.h"

static int passed, failed;

static void check(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    ok ? passed++ : failed++;
}

/* GDB finds it by name; exported (-rdynamic) so that dlsym does too. */
struct {
    unsigned version, action;
    void *relevant, *first;
} __jit_debug_descriptor = {1, 0, NULL, NULL};

static void procbins(void)
{
    const uintptr_t val = 0x7f0012345670, fwd = 0x7f00abcdef02;
    uintptr_t pb[MT_PROCBIN_WORDS] = {MT_PROCBIN_HEADER, 1100, 0, val, val + MT_BINARY_HEADER, 1};
    check(mt_layout_procbin(pb, MT_PROCBIN_WORDS), "a ProcBin is taken");
    check(!mt_layout_procbin(pb, MT_PROCBIN_WORDS - 1), "one cut short is not");
    pb[0] = fwd;
    check(mt_layout_procbin(pb, MT_PROCBIN_WORDS),
          "one the collector moved (a boxed pointer for its thing word) is taken");
    pb[0] = fwd + 1;
    check(!mt_layout_procbin(pb, MT_PROCBIN_WORDS), "a thing word of another tag is not");
    pb[0] = MT_PROCBIN_HEADER;
    pb[4] = val + 16;
    check(!mt_layout_procbin(pb, MT_PROCBIN_WORDS), "bytes other than val + 24 are not");
    pb[4] = val + MT_BINARY_HEADER;
    pb[5] = 4;
    check(!mt_layout_procbin(pb, MT_PROCBIN_WORDS), "flags past 3 are not");
}

static void matchstates(void)
{
    const uintptr_t orig = 0x7f00abcdef02, base = 0x7f0012345688;
    uintptr_t ms[MT_MATCHSTATE_WORDS] = {MT_MATCHSTATE_HEADER, orig, base, 0, 0x4c40};
    check(mt_layout_matchstate(ms, MT_MATCHSTATE_WORDS), "a match state is taken: base is skipped");
    check(!mt_layout_matchstate(ms, MT_MATCHSTATE_WORDS - 1), "one cut short is not");
    ms[1] = orig + 1;
    check(!mt_layout_matchstate(ms, MT_MATCHSTATE_WORDS), "an orig that is not boxed is not");
    ms[1] = orig;
    ms[3] = 0x4c48;
    check(!mt_layout_matchstate(ms, MT_MATCHSTATE_WORDS), "an offset past the size is not");
    ms[3] = 0;
    ms[0] = MT_MATCHSTATE_HEADER + 0x40;
    check(!mt_layout_matchstate(ms, MT_MATCHSTATE_WORDS), "another arity is not");
}

static void sub_bits(void)
{
    const uintptr_t orig = 0x7f00abcdef0a, base = 0x7f0012345691;
    uintptr_t sb[MT_SUBBITS_WORDS] = {MT_SUBBITS_HEADER, base, 0, 0x7180, orig};
    check(mt_layout_subbits(sb, MT_SUBBITS_WORDS),
          "an OTP 27 sub-bitstring is taken: base is skipped");
    check(!mt_layout_subbits(sb, MT_SUBBITS_WORDS - 1), "one cut short is not");
    sb[4] = orig + 1;
    check(!mt_layout_subbits(sb, MT_SUBBITS_WORDS), "an orig that is not boxed is not");
    sb[4] = orig;
    sb[2] = 0x7188;
    check(!mt_layout_subbits(sb, MT_SUBBITS_WORDS), "a start past the end is not");
    sb[2] = 0;
    sb[1] = 20;
    check(!mt_layout_subbits(sb, MT_SUBBITS_WORDS),
          "an OTP 25 heap binary of the same thing word (its size next) is not");
    sb[1] = base;
    sb[0] = MT_SUBBITS_HEADER + 0x40;
    check(!mt_layout_subbits(sb, MT_SUBBITS_WORDS), "another arity is not");
}

static void binaries27(void)
{
    uintptr_t live[4] = {0, 0x7f0012345000, 1, 1000};
    check(mt_layout_binary27_live(live, 1000),
          "a live OTP 27 Binary: flags, an unwritten word, a count, its size");
    live[1] = 0;
    live[2] = 0;
    check(!mt_layout_binary27_live(live, 1000), "a count of 0 is no live one");
    live[2] = 1;
    check(!mt_layout_binary27_live(live, 999), "nor a size past its room");
    live[0] = 0x7f0012345000;
    check(!mt_layout_binary27_live(live, 1000), "nor flags that are a pointer");
}

static void binaries(void)
{
    const uintptr_t link = 0x7f0012345000;
    uintptr_t live[3] = {0, 1, 1100};
    check(mt_layout_binary_live(live, 1100, 1100), "a live Binary: flags, a count, its size");
    check(!mt_layout_binary_live(live, 1101, 1100), "its size below the ProcBin's: dead");
    check(!mt_layout_binary_live(live, 1100, 1099), "its size past its block: dead");
    uintptr_t unsorted[3] = {link, link + 0x10, 1100};
    check(!mt_layout_binary_live(unsorted, 1100, 1100),
          "malloc's links over flags and count (an unsorted chunk): dead");
    uintptr_t tcache[3] = {link >> 12, 0, 1100};
    check(!mt_layout_binary_live(tcache, 1100, 1100), "a tcache's next and cleared key: dead");
    uintptr_t huge[3] = {0, (uintptr_t)1 << 32, 1100};
    check(!mt_layout_binary_live(huge, 1100, 1100), "a count of 2^32: dead");
    check(mt_layout_binary_place(link, link, 1124), "a Binary at its block's start may live");
    check(!mt_layout_binary_place(link + 1136, link, 2248),
          "one inside another's small block does not");
    check(mt_layout_binary_place(link + 1136, link, (size_t)256 << 10),
          "one inside a 256 KiB carrier may");
    uintptr_t magic[2] = {1, 1}, plain[2] = {0, 1}, freed[2] = {link, 0};
    check(mt_layout_magic_live(magic), "a live magic binary: the magic flag and a count");
    check(!mt_layout_magic_live(plain) && !mt_layout_magic_live(freed),
          "without the flag, or over malloc's links: dead");
}

/* A _dl_find_object segment made in a buffer at a given address: header at the first 128-byte
 * boundary, then entries, the first being this program's range. */
static void segments(void)
{
    struct dl_find_object self;
    if (_dl_find_object((void *)segments, &self) != 0) {
        check(0, "_dl_find_object knows this program");
        return;
    }
    static uintptr_t w[64];
    uintptr_t at = 0x7f0012345640; /* 64 bytes below a 128-byte boundary */
    size_t o = 64, len = sizeof w;
    uintptr_t *h = w + o / sizeof *w, *e = h + MT_DLFO_HEADER / sizeof *w;
    h[0] = 0;
    h[1] = at;
    h[2] = 1;
    h[3] = 4;
    e[0] = (uintptr_t)self.dlfo_map_start;
    e[1] = (uintptr_t)self.dlfo_map_end;
    e[2] = (uintptr_t)self.dlfo_link_map;
    size_t first;
    check(mt_layout_pointer_range(w, len, at, 0, 0, &first) == o + MT_DLFO_HEADER + MT_DLFO_ENTRY,
          "a segment is read as far as its entries in use");
    check(first == o, "from its 128-byte boundary: the bytes before it were never written");
    h[1] = at + 16;
    check(mt_layout_pointer_range(w, len, at, 0, 0, &first) == len && first == 0,
          "one whose to_free is not the block: whole");
    h[1] = at;
    e[1]++;
    check(mt_layout_pointer_range(w, len, at, 0, 0, &first) == len && first == 0,
          "one whose entry is no object's: whole");
}

/* An OTP 27 Binary: its flags and unwritten word are no pointers, the rest may be. */
static void binary27_blocks(void)
{
    uintptr_t b[4 + 5] = {0, 0x7f0012345678, 1, 40}, at = 0x1000;
    size_t first;
    check(mt_layout_pointer_range(b, 72, at, 0, MT_OTP27, &first) == 72 && first == 16,
          "a Binary of 40 bytes is read from its count on");
    check(mt_layout_pointer_range(b, 64, at, 0, MT_OTP27, &first) == 64 && first == 0,
          "a block its size does not make is read whole");
    b[3] = 47;
    check(mt_layout_pointer_range(b, 72, at, 0, MT_OTP27, &first) == 72 && first == 16,
          "a Binary of 47 bytes, its block's size rounded down to 72, from its count on");
    b[3] = 48;
    check(mt_layout_pointer_range(b, 72, at, 0, MT_OTP27, &first) == 72 && first == 0,
          "a Binary of 48 bytes in 72 is no Binary: read whole");
    b[3] = 40;
    check(mt_layout_pointer_range(b, 72, at, 0, 0, &first) == 72 && first == 0,
          "a block that no live reference proves a Binary is read whole");
    check(mt_layout_pointer_range(b, 72, at, 0, MT_OTP25, &first) == 72 && first == 0,
          "and so is one in a VM of OTP 25, whose Binary has no such header");
    b[0] = 1;
    check(mt_layout_pointer_range(b, 72, at, 0, MT_OTP27, &first) == 72 && first == 0,
          "a magic binary is read whole");
}

/* Binaries in blocks without a record, read to glibc's usable size: their bytes past their own
 * are not read, nor the word they end in. */
static void unrecorded_binaries(void)
{
    static const struct {
        uintptr_t head[4];
        int unrecorded;
        size_t end, first;
        const char *what;
    } cases[] = {
        {{0, 1, 105},
         1,
         128,
         MT_BINARY_HEADER,
         "an OTP 25 Binary of 105 bytes in 136: its bytes, but for the word they end in"},
        {{0, 1, 105}, 0, 136, 0, "the same with a record (read to its request's size): whole"},
        {{0, 1, 1788}, 1, 136, 0, "an original size the block cannot hold: whole"},
        {{0, 1, 88}, 1, 136, 0, "a Binary whose size makes a smaller block (glibc's 120): whole"},
        {{0, 1, 112}, 1, 136, MT_BINARY_HEADER, "one of 112 bytes, whose 136 it fills: all of it"},
        {{0, 0, 105}, 1, 136, 0, "a count of 0 is no live Binary's: whole"},
        {{1, 1, 105}, 1, 136, 0, "a magic binary: whole"},
        {{0, 0x7f0012345678, 1, 97},
         1,
         128,
         16,
         "an OTP 27 Binary of 97 bytes in 136: its bytes, but for the word they end in"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uintptr_t b[136 / sizeof(uintptr_t)] = {0};
        size_t first;
        memcpy(b, cases[i].head, sizeof cases[i].head);
        check(mt_layout_pointer_range(b, sizeof b, 0x1000, cases[i].unrecorded, MT_OTP_ALL,
                                      &first) == cases[i].end &&
                  first == cases[i].first,
              cases[i].what);
    }
}

/* A port's output queue as ERTS lays it out, its vectors inline: one entry queued (the second),
 * the others sent long ago. */
static void ioqueues(void)
{
    uintptr_t q[MT_IOQ_WORDS + 2], at = (uintptr_t)q, v = at + 4 * 8, b = at + 18 * 8;
    uintptr_t good[MT_IOQ_WORDS] = {v,
                                    v + 80,
                                    v + 16,
                                    v + 32,
                                    0x7f0011110000,
                                    32,
                                    0x7f0022220000,
                                    32,
                                    0x7f0033330000,
                                    32,
                                    0,
                                    0,
                                    0,
                                    0,
                                    b,
                                    b + 40,
                                    b + 8,
                                    b + 16,
                                    0x7f0044440000,
                                    0x7f0055550000,
                                    0,
                                    0,
                                    0};
    uint32_t live = 0;
    memcpy(q, good, sizeof good);
    check(mt_layout_ioqueue(q, MT_IOQ_WORDS + 2, at, &live) == MT_IOQ_WORDS,
          "a port's I/O queue with its vectors inline is taken");
    check(live == (0xFu | 3u << 6 | 0xFu << 14 | 1u << 19),
          "only its pointers and its queued entries can keep anything");
    check(!mt_layout_ioqueue(q, MT_IOQ_WORDS - 1, at, &live), "one cut short is not");
    q[0] = v + 8;
    check(!mt_layout_ioqueue(q, MT_IOQ_WORDS, at, &live), "one whose v_start is elsewhere is not");
    memcpy(q, good, sizeof good);
    q[2] = v + 24;
    check(!mt_layout_ioqueue(q, MT_IOQ_WORDS, at, &live), "a head inside an entry is not");
    memcpy(q, good, sizeof good);
    q[17] = b + 48;
    check(!mt_layout_ioqueue(q, MT_IOQ_WORDS, at, &live), "a tail past the binaries' end is not");
}

/* The words after a port's I/O queue (the tail of struct _erl_drv_port), its name "fd" at the
 * end of its block. */
static void ports(void)
{
    uintptr_t t[16] = {0}, at = (uintptr_t)t;
    t[0] = at + 13 * sizeof *t;
    memcpy(&t[13], "fd", 3);
    check(mt_layout_port_reds(t, 16, at) == MT_PORT_REDS,
          "a port's tail, its name past its fields, is taken");
    check(!mt_layout_port_reds(t, 13, at), "one whose name lies past the words read is not");
    t[0] = at + 8 * sizeof *t;
    check(!mt_layout_port_reds(t, 16, at), "one whose name lies among its fields is not");
    t[0] = at + 13 * sizeof *t;
    memcpy(&t[13], "f\nd", 4);
    check(!mt_layout_port_reds(t, 16, at), "one whose name is not printable text is not");
}

/* A carrier of the VM's as ERTS lays one out, in a mapping of its own: its header at a 256 KiB
 * boundary, its allocator's name_prefix among the allocator's first words. */
#define CARRIER_ALIGN ((uintptr_t)256 << 10)

static void carriers(void)
{
    size_t span = 4 * CARRIER_ALIGN;
    char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        check(0, "a mapping for the carrier");
        return;
    }
    uintptr_t lo = (uintptr_t)m, hi = lo + span;
    uintptr_t c = (lo + CARRIER_ALIGN - 1) & ~(CARRIER_ALIGN - 1);
    static const char prefix[] = "ets_", bad[] = "Ets_";
    uintptr_t allctr[20] = {0, 0, 1, 7, 0};
    allctr[15] = (uintptr_t)prefix;
    uintptr_t *head = (uintptr_t *)c;
    head[0] = 2 * CARRIER_ALIGN | 1;
    head[3] = (uintptr_t)allctr | 1;
    char name[32] = "";
    uintptr_t in = c + CARRIER_ALIGN + 4096;
    check(c + 2 * CARRIER_ALIGN <= hi && mt_layout_carrier(in, lo, hi, name, sizeof name) &&
              strcmp(name, "ets_alloc") == 0,
          "a word in a carrier's second 256 KiB: its allocator, named");
    check(!mt_layout_carrier(c + 2 * CARRIER_ALIGN, lo, hi, name, sizeof name),
          "a word past the carrier's size: none");
    check(!mt_layout_carrier(in, lo, hi, name, 6), "a name that does not fit: none");
    allctr[15] = (uintptr_t)bad;
    check(!mt_layout_carrier(in, lo, hi, name, sizeof name),
          "an allocator without a lower-case name_prefix: none");
    allctr[15] = (uintptr_t)prefix;
    head[0] = 2 * CARRIER_ALIGN + 8;
    check(!mt_layout_carrier(in, lo, hi, name, sizeof name),
          "a header whose size is no multiple of a page: none");
    uintptr_t *single = (uintptr_t *)(c + 3 * 4096);
    single[0] = CARRIER_ALIGN | 3;
    single[3] = (uintptr_t)allctr;
    check(mt_layout_carrier((uintptr_t)single + 8192, lo, hi, name, sizeof name) &&
              strcmp(name, "ets_alloc") == 0,
          "a carrier on a page that is no 256 KiB boundary (a single-block one): named");
    munmap(m, span);
}

/* A 64 KiB carrier as the VM lays one out: a 55-word header, an allocated block of 64 bytes, a
 * free one of 1024 (carrier, tree words, stale words, its size last), an allocated one of 512
 * and a free last one to the end. */
#define CW (((size_t)64 << 10) / sizeof(uintptr_t))
static uintptr_t carrier[CW];

static void layout_carrier(uintptr_t at)
{
    memset(carrier, 0, sizeof carrier);
    uintptr_t *w = carrier, stale = 0x7f0012345670;
    w[0] = (CW * sizeof *w) | 1;
    w[3] = 0x55aa00001000;
    size_t k = 55;
    w[k] = 64 | (uintptr_t)1 << 63; /* an allocation tag */
    w[k + 5] = stale;
    k += 8;
    w[k] = 1024 | 1;
    w[k + 1] = at;
    for (size_t i = 2; i < 127; i++)
        w[k + i] = stale;
    w[k + 127] = 1024;
    k += 128;
    w[k] = 512 | 2;
    w[k + 3] = stale;
    k += 64;
    w[k] = ((CW - k) * sizeof *w) | 1 | 4;
    w[k + 1] = at;
    w[k + 9] = stale;
    w[k + 130] = (CW - k - 128) * sizeof *w | 1 | 4; /* a header the VM left when it merged */
}

static void free_blocks(void)
{
    uintptr_t at = 0x7f0000040000;
    layout_carrier(at);
    size_t free = 1024 - 16 + (CW - 55 - 8 - 128 - 64) * sizeof(uintptr_t) - 16;
    check(mt_layout_carrier_free(carrier, CW, at, NULL, NULL) == free && carrier[63 + 5] == 0 &&
              carrier[63 + 127] == 0 && carrier[255 + 9] == 0 && carrier[255 + 130] == 0,
          "a carrier's free blocks are cleared, past their header and carrier words");
    check(carrier[55 + 5] && carrier[191 + 3] && carrier[63 + 1] == at,
          "its allocated blocks are left whole");
    layout_carrier(at);
    check(!mt_layout_carrier_free(carrier, CW - 1, at, NULL, NULL) && carrier[63 + 5],
          "a carrier past the words given: untouched");
    check(!mt_layout_carrier_free(carrier, CW, at + 4096, NULL, NULL) && carrier[63 + 5],
          "free blocks that name another carrier: untouched");
    carrier[63 + 127] = 1016;
    check(!mt_layout_carrier_free(carrier, CW, at, NULL, NULL) && carrier[63 + 5],
          "a free block whose last word is not its size: untouched");
    layout_carrier(at);
    carrier[191] = 512;
    check(!mt_layout_carrier_free(carrier, CW, at, NULL, NULL) && carrier[63 + 5],
          "a block after a free one that does not say so: untouched");
    layout_carrier(at);
    carrier[255] &= ~(uintptr_t)4;
    check(!mt_layout_carrier_free(carrier, CW, at, NULL, NULL) && carrier[63 + 5],
          "blocks that end at the carrier's end without the last one: untouched");
    check(mt_layout_carrier_size(CW * sizeof(uintptr_t) | 1) == CW * sizeof(uintptr_t) &&
              !mt_layout_carrier_size(4096) && !mt_layout_carrier_size((CW + 1) * 8),
          "a carrier's size: a whole number of pages, 64 KiB and up");
}

/* A made-up address space for mt_layout_carrier_held(): regions of words at fixed addresses. */
struct region {
    uintptr_t at;
    uintptr_t *w;
    size_t n;
};
struct space {
    struct region r[8];
    size_t n;
};

static int space_read(uintptr_t a, void *to, size_t len, void *arg)
{
    const struct space *s = arg;
    for (size_t i = 0; i < s->n; i++)
        if (a >= s->r[i].at && a + len <= s->r[i].at + s->r[i].n * sizeof(uintptr_t)) {
            memcpy(to, (const char *)s->r[i].w + (a - s->r[i].at), len);
            return 0;
        }
    return -1;
}

/* A carrier's header, read where it should start: its size and its kind. */
static void carrier_heads(void)
{
    const uintptr_t at = 0x7f0000100000;
    uintptr_t c[4] = {0x40000 | 1, 0, 0, 0x550000001000 | 1}, w[4];
    struct space s = {{{at, c, 4}}, 1};
    check(mt_layout_carrier_head(at, 0, w, space_read, &s) == 0x40000 && w[3] == c[3],
          "a multi-block carrier's header: its size, and its words read");
    check(!mt_layout_carrier_head(at, 1, w, space_read, &s),
          "a multi-block carrier is no single-block one");
    c[0] = 0x40000 | MT_CARRIER_SBC | 1;
    check(mt_layout_carrier_head(at, 1, w, space_read, &s) == 0x40000 &&
              !mt_layout_carrier_head(at, 0, w, space_read, &s),
          "a single-block carrier's header: its size, and only as one");
    c[0] = 0x40100 | MT_CARRIER_SBC;
    check(!mt_layout_carrier_head(at, 1, w, space_read, &s),
          "a size that is no whole number of pages: no carrier");
    c[0] = 0x40000 | MT_CARRIER_SBC;
    check(!mt_layout_carrier_head(at + 8, 1, w, space_read, &s) &&
              !mt_layout_carrier_head(at + 4096, 1, w, space_read, &s),
          "no carrier where none starts on a page, nor where nothing can be read");
}

/* Single-block carriers on their allocator's list, and ones the VM let go of: let go of only when
 * the allocator's whole list leaves them out. The list head's place is learnt from the first
 * whole list seen, so the order of the checks matters. */
static void released_carriers(void)
{
    enum { P, C, N, O, AL };
    const uintptr_t at[] = {0x7f0000100000, 0x7f0000200000, 0x7f0000300000, 0x7f0000400000,
                            0x550000001000};
    const uintptr_t gone = 0x7f0000500000;
    uintptr_t w[4][4], al[MT_ALLOCTR_WORDS] = {0}, scratch[MT_ALLOCTR_WORDS];
    struct space s = {{{at[P], w[P], 4},
                       {at[C], w[C], 4},
                       {at[N], w[N], 4},
                       {at[O], w[O], 4},
                       {at[AL], al, MT_ALLOCTR_WORDS}},
                      5};
    for (int k = P; k <= O; k++) {
        w[k][0] = 0x20000 | 3;
        w[k][1] = w[k][2] = 0;
        w[k][3] = at[AL];
    }
    uintptr_t *c = w[C];
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "before any whole list was seen, one alone beside an empty list is not told");
    al[44] = al[45] = at[C];
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one alone on its list, which its allocator names, is held");
    al[44] = al[45] = at[O];
    check(!mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one alone whose allocator names another of its carriers is let go of");
    al[44] = al[45] = 0;
    check(!mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one alone whose allocator's list is empty is let go of");
    s.n = 4;
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one alone whose allocator cannot be read is not told");
    s.n = 5;
    /* the list P, O, N; C names P and N, as it did before it was unlinked */
    al[44] = at[P];
    al[45] = at[N];
    w[P][1] = at[O];
    w[O][2] = at[P];
    w[O][1] = at[N];
    w[N][2] = at[O];
    c[1] = at[N];
    c[2] = at[P];
    check(!mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose old neighbours are linked to each other on a whole list is let go of");
    w[P][1] = at[C];
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose previous carrier names it is held");
    w[P][1] = at[O];
    w[N][2] = at[C];
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose next carrier names it is held");
    w[N][2] = at[O];
    w[O][1] = gone;
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose list names an address no carrier is at (a carrier being moved) is not told");
    w[O][1] = 0;
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose list ends before its head's last is not told");
    w[O][1] = at[N];
    w[O][2] = at[N];
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose list's links disagree is not told");
    w[O][2] = at[P];
    w[O][3] = 0x550000002000;
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "one whose list runs through another allocator's carrier is not told");
    w[O][3] = at[AL];
    check(!mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "the whole list again: let go of");
    c[0] = 0x20000 | 1;
    check(mt_layout_carrier_held(c, at[C], space_read, &s, scratch),
          "a multi-block carrier is not told");
}

/* A 17-byte heap binary: its last data word holds one byte of data. */
static void heap_binaries(void)
{
    uintptr_t b[6] = {4 << 6 | MT_HEAPBIN_SUBTAG, 17, 1, 2, 0x7f0012345678, 0};
    size_t last = 0;
    check(mt_layout_heapbin(b, 6, &last) == 1 && last == 4,
          "a heap binary's last word is read as far as its data: one byte of 17");
    check(!mt_layout_heapbin(b, 4, &last), "one cut short is not taken");
    b[1] = 16;
    check(!mt_layout_heapbin(b, 6, &last), "one of 16 bytes, whose last word is all data, is not");
    b[0] = 3 << 6 | MT_HEAPBIN_SUBTAG;
    b[1] = 17;
    check(!mt_layout_heapbin(b, 6, &last), "a thing word that disagrees with the size is not");
    b[0] = 10 << 6 | MT_HEAPBIN_SUBTAG;
    b[1] = 65;
    check(!mt_layout_heapbin(b, 6, &last), "a size past 64 bytes is not");
}

/* An 80-bit heap bitstring of OTP 27: its last data word holds two bytes of data. */
static void heap_bitstrings(void)
{
    uintptr_t b[5] = {3 << 6 | MT_HEAPBITS_SUBTAG, 80, 1, 0x7f0012345678, 0};
    size_t last = 0;
    check(mt_layout_heapbin(b, 5, &last) == 2 && last == 3,
          "a heap bitstring's last word is read as far as its data: two bytes of 80 bits");
    check(!mt_layout_heapbin(b, 3, &last), "one cut short is not taken");
    b[1] = 128;
    check(!mt_layout_heapbin(b, 5, &last), "one of 128 bits, whose last word is all data, is not");
    b[1] = 121;
    check(!mt_layout_heapbin(b, 5, &last), "nor one of 121: its last byte is data too");
    b[1] = 129;
    check(!mt_layout_heapbin(b, 5, &last), "a thing word that disagrees with the size is not");
    b[0] = 10 << 6 | MT_HEAPBITS_SUBTAG;
    b[1] = 513;
    check(!mt_layout_heapbin(b, 5, &last), "a size past 512 bits is not");
}

/* A fun of OTP 25 and 26: its arity word is data in its two low bytes only. */
static void funs(void)
{
    static uintptr_t entry;
    uintptr_t f[6] = {MT_FUN_HEADER, (uintptr_t)&entry, 0, 0x7f0012340500, 0x30000000603, 0xB};
    check(mt_layout_fun(f, 6), "a fun made by a local process is taken");
    f[4] = 0x1CB; /* external */
    check(mt_layout_fun(f, 6), "an external fun is taken");
    check(!mt_layout_fun(f, 4), "one cut short is not");
    f[4] = 0x7f0012345678;
    check(!mt_layout_fun(f, 6), "one whose creator is no pid, box or atom is not");
    f[4] = 0x30000000603;
    f[1] = 0;
    check(!mt_layout_fun(f, 6), "one without an entry is not");
    f[1] = (uintptr_t)&entry + 4;
    check(!mt_layout_fun(f, 6), "one whose entry is not a word's address is not");
    f[1] = (uintptr_t)&entry;
    f[0] = 0xC0; /* a tuple of 3 */
    check(!mt_layout_fun(f, 6), "another thing word is not");
}

/* An atom table entry: its index word is data in its low four bytes, once its name proves it. */
static void atoms(void)
{
    static const unsigned char name[] = "application_controller", cafe[] = "caf\xc3\xa9";
    uintptr_t a[5] = {0, 0x3709b02, 0x7f0000004300, (uintptr_t)0x30b83836 << 32 | 22 << 16 | 22,
                      (uintptr_t)name};
    check(mt_layout_atom(a, 5) == 22 && mt_layout_atom_named(a, name, 22),
          "an atom is taken by its name's hash and first bytes");
    check(!mt_layout_atom(a, 4), "one cut short is not");
    a[1] = 0x3709b03;
    check(mt_layout_atom(a, 5) == 22 && !mt_layout_atom_named(a, name, 22),
          "a hash value that is not the name's is not");
    a[1] = 0x3709b02;
    a[3] ^= (uintptr_t)1 << 40;
    check(!mt_layout_atom_named(a, name, 22), "first bytes that are not the name's are not");
    a[3] = (uintptr_t)0x30b83836 << 32 | 23 << 16 | 22;
    check(!mt_layout_atom(a, 5), "more latin1 characters than bytes are not");
    a[3] = (uintptr_t)0x30b83836 << 32 | 22 << 16 | 22;
    uintptr_t e[5] = {0, 0x69849, 0, (uintptr_t)0x31b0b361 << 32 | 4 << 16 | 5, (uintptr_t)cafe};
    check(mt_layout_atom(e, 5) == 5 && mt_layout_atom_named(e, cafe, 5),
          "a latin1 character in two bytes hashes as one");
}

/* The ends of C strings in a block without a record: the bytes after the NUL are not read, and
 * only in a block that is a string from its first byte. */
static void text_ends(void)
{
    uintptr_t path[5];
    memcpy(path, "/lib/x86_64-linux-gnu/liblzma.so.5", 35);
    memcpy((char *)path + 35, "\xb4\x3e\x7f\0\0", 5); /* an old pointer's high bytes */
    check(mt_layout_string_end(path, 5) == 4, "a path's NUL is in its last word");
    check(mt_layout_text_mask(path[4]) == 0xFFFF, "which keeps its two bytes of text");
    check(mt_layout_string_end(path, 4) == UINTPTR_MAX, "text without a NUL is no string");
    uintptr_t tz[3];
    memcpy(tz, "UTC0UTC1", 8);
    memcpy(&tz[1], "UTC2UTC3", 8);
    tz[2] = 0x7f0012345600;
    check(mt_layout_string_end(tz, 3) == 2 && mt_layout_text_mask(tz[2]) == 0,
          "a NUL that starts the word after text leaves nothing");
    uintptr_t pair[2] = {0x7f0012345678, 0x7f0012345600};
    check(mt_layout_string_end(pair, 2) == UINTPTR_MAX, "a pointer after a pointer is read");
    memcpy(&pair[0], "ab\0\0\0\0\0c", 8);
    check(mt_layout_string_end(pair, 2) == UINTPTR_MAX, "so is a block of less than 4 bytes text");
    pair[0] = 0x560061626364; /* "dcba\0V": a pointer into a heap mapped at 0x5600_xxxx_xxxx */
    check(mt_layout_string_end(pair, 2) == UINTPTR_MAX, "and one of less than a word");
    memcpy(&pair[0], "abcdefgh", 8);
    pair[1] = 0x7f0012345600;
    check(mt_layout_string_end(pair, 2) == 1 && mt_layout_text_mask(pair[1]) == 0,
          "a word of text then a NUL ends it");
    /* a C struct: a count, then a name inline, then a pointer */
    uintptr_t st[4] = {7, 0, 0, 0x7f0012345600};
    memcpy(&st[1], "abcdefghabcdefgh", 16);
    check(mt_layout_string_end(st, 4) == UINTPTR_MAX,
          "a struct's inline name after a count is no string: its pointer is read");
    /* libc's time zone name, as a node that had not been attached to held it */
    uintptr_t name[3] = {0, 3, 0x7f0d00435455};
    check(mt_layout_string_end(name, 3) == 2 && mt_layout_text_mask(name[2]) == 0xFFFFFF,
          "a short string after its length ends it");
    name[1] = 4;
    check(mt_layout_string_end(name, 3) == UINTPTR_MAX, "only after its own length");
    name[1] = 2;
    name[2] = 0x7f0d00005455;
    check(mt_layout_string_end(name, 3) == UINTPTR_MAX, "of 3 bytes at least");
    name[1] = 3;
    name[2] = 0x7f0d00431f55;
    check(mt_layout_string_end(name, 3) == UINTPTR_MAX, "all of them printable");
    name[2] = 0x7f0d12345678;
    check(mt_layout_string_end(name, 3) == UINTPTR_MAX, "a pointer after a count is read");
    uintptr_t big[4] = {0, 3, 0x7f0d00435455, 0};
    check(mt_layout_string_end(big, 4) == UINTPTR_MAX, "and only in a block of 24 bytes");
}

static int has_name(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    const uintptr_t *s = arg;
    int found = !*info->dlpi_name;
    for (size_t i = 1; !found && i <= s[0]; i++)
        found = s[i] == (uintptr_t)info->dlpi_name;
    return !found;
}

/* libc's and the loader's strings: each object's name and the locale's, sorted, once each */
static void strings(void)
{
    uintptr_t s[1 + MT_LAYOUT_STRINGS];
    const char *set = setlocale(LC_ALL, "C.UTF-8"), *ctype = setlocale(LC_CTYPE, NULL);
    s[0] = mt_layout_strings(s + 1, MT_LAYOUT_STRINGS);
    int sorted = 1, named = 0;
    for (size_t i = 1; i <= s[0]; i++) {
        sorted &= i == 1 || s[i - 1] < s[i];
        named |= s[i] == (uintptr_t)ctype;
    }
    check(s[0] > 1 && sorted, "libc's and the loader's strings come sorted, once each");
    check(set && named, "the locale's name is among them");
    check(dl_iterate_phdr(has_name, s) == 0, "so is every loaded object's name");
    check(mt_layout_strings(s + 1, 1) == 1, "no more than asked for");
    check(mt_layout_is_text("C.UTF-8\0\x10\x32\x7f", 11), "a name's block is text up to a NUL");
    check(!mt_layout_is_text("C.UTF-8", 7), "not without the NUL");
    check(!mt_layout_is_text("\0abc", 4), "nor empty");
    check(!mt_layout_is_text("\x10\x32\x7f\0\0\0\0\0", 8), "nor a pointer's bytes");
}

/* A resource type of the VM's list: taken whole, refused in a takeover, out of the list, ownerless
 * or with a name that is no atom. */
static void resource_types(void)
{
    uintptr_t self = 0x5000, w[MT_RESOURCE_TYPE_WORDS] = {0x6000, 0x7000, 0x8000};
    w[MT_RESOURCE_TYPE_DTOR] = w[MT_RESOURCE_TYPE_DTOR_REAL] = 0x9000;
    w[13] = 1;
    w[14] = (42 << 6) | 0x0B;
    w[15] = (43 << 6) | 0x0B;
    check(mt_layout_resource_type(w, self, self, self), "a resource type in the VM's list is one");
    check(!mt_layout_resource_type(w, self, self + 8, self),
          "a resource type whose next does not name it back is none");
    w[MT_RESOURCE_TYPE_DTOR] = 0xA000;
    check(!mt_layout_resource_type(w, self, self, self),
          "a resource type in a takeover (fn's destructor another than fn_real's) is refused");
    w[MT_RESOURCE_TYPE_DTOR] = 0x9000;
    w[2] = 0;
    check(!mt_layout_resource_type(w, self, self, self),
          "a resource type without an owner is none");
    w[2] = 0x8000;
    w[15] = 0x5571412b4340;
    check(!mt_layout_resource_type(w, self, self, self),
          "a resource type whose name is no atom is none");
}

int main(void)
{
    resource_types();
    procbins();
    matchstates();
    sub_bits();
    funs();
    atoms();
    binary27_blocks();
    unrecorded_binaries();
    heap_binaries();
    heap_bitstrings();
    text_ends();
    strings();
    binaries();
    binaries27();
    segments();
    carriers();
    carrier_heads();
    released_carriers();
    free_blocks();
    ioqueues();
    ports();
    check(mt_layout_jit_descriptor() == (uintptr_t)&__jit_debug_descriptor,
          "the GDB JIT interface's descriptor is found");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
