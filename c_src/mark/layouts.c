/* layouts.c: other code's structures, as the mark reads them (see layouts.h). */
#define _GNU_SOURCE
#include "mark/layouts.h"

#include <dlfcn.h>
#include <link.h>
#include <locale.h>
#include <string.h>

#include "base/platform.h"
#include "base/proc.h"
#include "mark/beam_vm.h"

/* OTP's BIN_FLAG_* bits (erl_binary.h) all lie below this. */
#define BINARY_FLAGS 0x100
/* BIN_FLAG_MAGIC */
#define BINARY_MAGIC 1

/* The length of a block asked for n bytes, as the mark reads it: n rounded down to words (a
 * record's), or glibc's usable size (a block without one). */
static size_t block_len(size_t n, int unrecorded)
{
    return unrecorded ? mt_chunk_size(n) - sizeof(size_t) : n & ~(sizeof(uintptr_t) - 1);
}

/* Where the bytes of an off-heap Binary that is no magic one end in the block, rounded down to
 * words, when the block is one (*first: its first word that may hold a pointer); else 0. */
static size_t binary_end(const uintptr_t *w, size_t len, int unrecorded, unsigned otp,
                         size_t *first)
{
    /* len is rounded down to words: its last word's bytes may hold data too */
    size_t room = len + sizeof *w - 1, words = ~(sizeof *w - 1);
    if (!otp || len < MT_BINARY_HEADER || (w[0] & BINARY_MAGIC)) return 0;
    if ((otp & MT_OTP27) && len >= MT_BINARY27_HEADER &&
        mt_layout_binary27_live(w, room - MT_BINARY27_HEADER) &&
        block_len(MT_BINARY27_HEADER + w[3], unrecorded) == len) {
        *first = 2 * sizeof *w;
        return (MT_BINARY27_HEADER + w[3]) & words;
    }
    if ((otp & MT_OTP_25_26) && unrecorded &&
        mt_layout_binary_live(w, 0, room - MT_BINARY_HEADER) &&
        block_len(MT_BINARY_HEADER + w[2], unrecorded) == len) {
        *first = MT_BINARY_HEADER;
        return (MT_BINARY_HEADER + w[2]) & words;
    }
    return 0;
}

size_t mt_layout_pointer_range(const uintptr_t *w, size_t len, uintptr_t at, int unrecorded,
                               unsigned binary, size_t *first)
{
    size_t o = ((at + MT_DLFO_ALIGN - 1) & ~(uintptr_t)(MT_DLFO_ALIGN - 1)) - at, end;
    *first = 0;
    if ((end = binary_end(w, len, unrecorded, binary, first))) return end;
    if (o + MT_DLFO_HEADER + MT_DLFO_ENTRY > len) return len;
    const uintptr_t *h = w + o / sizeof *w, *e = h + MT_DLFO_HEADER / sizeof *w;
    size_t size = h[2], allocated = h[3];
    if (h[1] != at || !size || size > allocated ||
        allocated > (len - o - MT_DLFO_HEADER) / MT_DLFO_ENTRY)
        return len;
    struct dl_find_object found;
    if (_dl_find_object((void *)e[0], &found) != 0 || (uintptr_t)found.dlfo_map_start != e[0] ||
        (uintptr_t)found.dlfo_map_end != e[1] || (uintptr_t)found.dlfo_link_map != e[2])
        return len;
    *first = o;
    return o + MT_DLFO_HEADER + size * MT_DLFO_ENTRY;
}

/* PB_IS_WRITABLE | PB_ACTIVE_WRITER */
#define PROCBIN_FLAGS 3

int mt_layout_procbin(const uintptr_t *w, size_t n)
{
    return n >= MT_PROCBIN_WORDS && (w[0] == MT_PROCBIN_HEADER || (w[0] & 3) == 2) &&
           w[4] == w[3] + MT_BINARY_HEADER && w[5] <= PROCBIN_FLAGS;
}

int mt_layout_binary_live(const uintptr_t head[3], uintptr_t size, size_t room)
{
    return head[0] < BINARY_FLAGS && head[1] >= 1 && head[1] <= UINT32_MAX && head[2] >= size &&
           head[2] <= room;
}

int mt_layout_binary_place(uintptr_t at, uintptr_t addr, size_t size)
{
    return at == addr || size >= MT_CARRIER_MIN;
}

int mt_layout_binary27_live(const uintptr_t head[4], size_t room)
{
    return head[0] < BINARY_FLAGS && head[2] >= 1 && head[2] <= UINT32_MAX && head[3] <= room;
}

int mt_layout_magic_live(const uintptr_t head[2])
{
    return (head[0] & BINARY_MAGIC) && head[0] < BINARY_FLAGS && head[1] >= 1 &&
           head[1] <= UINT32_MAX;
}

int mt_layout_magic_flags(uintptr_t w)
{
    return (w & BINARY_MAGIC) && w < BINARY_FLAGS;
}

/* An immediate atom: its index, then the tag 0b001011. */
#define IS_ATOM(w) (((w)&0x3F) == 0x0B)

int mt_layout_resource_type(const uintptr_t w[MT_RESOURCE_TYPE_WORDS], uintptr_t self,
                            uintptr_t next_prev, uintptr_t prev_next)
{
    for (int i = 0; i < 5; i++)
        if (i != 3 && w[MT_RESOURCE_TYPE_DTOR + i] != w[MT_RESOURCE_TYPE_DTOR_REAL + i]) return 0;
    return next_prev == self && prev_next == self && w[0] && w[1] && w[2] && w[13] >= 1 &&
           IS_ATOM(w[14]) && IS_ATOM(w[15]);
}

int mt_layout_matchstate(const uintptr_t *w, size_t n)
{
    return n >= MT_MATCHSTATE_WORDS && w[0] == MT_MATCHSTATE_HEADER && (w[1] & 3) == 2 &&
           w[3] <= w[4];
}

/* ERL_ONHEAP_BIN_LIMIT */
#define HEAPBIN_LIMIT 64

int mt_layout_subbits(const uintptr_t *w, size_t n)
{
    return n >= MT_SUBBITS_WORDS && w[0] == MT_SUBBITS_HEADER && w[1] > HEAPBIN_LIMIT &&
           w[2] <= w[3] && (w[4] & 3) == 2;
}

static int printable(unsigned char b)
{
    return (b >= 0x20 && b < 0x7F) || b == '\t' || b == '\n' || b == '\r';
}

/* The length of the printable text at b that a NUL ends within len bytes; len when none does. */
static size_t text_length(const unsigned char *b, size_t len)
{
    size_t i = 0;
    while (i < len && printable(b[i]))
        i++;
    return i < len && !b[i] ? i : len;
}

#define TZ_BLOCK 24 /* libc's tzstring_list entry for a name of up to 7 bytes */

uintptr_t mt_layout_string_end(const uintptr_t *w, size_t n)
{
    size_t len = n * sizeof *w, j = text_length((const unsigned char *)w, len);
    if (j >= sizeof *w && j < len) return j / sizeof *w;
    if (n == TZ_BLOCK / sizeof *w && w[1] - 3u < 5u &&
        text_length((const unsigned char *)&w[2], sizeof *w) == w[1])
        return 2;
    return UINTPTR_MAX;
}

uintptr_t mt_layout_text_mask(uintptr_t word)
{
    size_t j = 0;
    while (j < sizeof word && (word >> 8 * j & 0xFF))
        j++;
    return j == sizeof word ? UINTPTR_MAX : ((uintptr_t)1 << 8 * j) - 1;
}

unsigned mt_layout_heapbin(const uintptr_t *w, size_t n, size_t *last)
{
    /* the size's unit, in bits: a byte (OTP 25, 26) or a bit (OTP 27) */
    size_t unit = (w[0] & 0x3F) == MT_HEAPBIN_SUBTAG    ? 8
                  : (w[0] & 0x3F) == MT_HEAPBITS_SUBTAG ? 1
                                                        : 0;
    if (n < 3 || !unit || !w[1] || w[1] > 8 * HEAPBIN_LIMIT / unit) return 0;
    size_t per_word = 8 * sizeof *w / unit, words = (w[1] + per_word - 1) / per_word;
    unsigned bytes = (unsigned)((w[1] % per_word * unit + 7) / 8);
    if (w[0] >> 6 != 1 + words || 2 + words > n || !bytes || bytes == sizeof *w) return 0;
    *last = 1 + words;
    return bytes;
}

int mt_layout_fun(const uintptr_t *w, size_t n)
{
    if (n <= MT_FUN_PADDED + 1 || w[0] != MT_FUN_HEADER || !w[1] || w[1] % sizeof *w ||
        w[2] % sizeof *w)
        return 0;
    uintptr_t creator = w[MT_FUN_PADDED + 1];
    return (creator & 0xF) == 0x3 ||  /* a local pid */
           (creator & 0x3F) == 0xB || /* an atom */
           (creator & 0x3) == 0x2;    /* a box: a remote pid */
}

size_t mt_layout_atom(const uintptr_t *w, size_t n)
{
    if (n < MT_ATOM_WORDS || w[0] % sizeof *w || !MT_LAYOUT_ATOM_MAY(w) || !w[4]) return 0;
    size_t len = (uint16_t)w[3];
    int16_t latin1 = (int16_t)(w[3] >> 16);
    uint32_t first = (uint32_t)(w[3] >> 32) >> 23;
    return (latin1 == -1 || (latin1 >= 0 && (size_t)latin1 <= len)) && first > 0x20 && first < 0x7F
               ? len
               : 0;
}

int mt_layout_atom_named(const uintptr_t *w, const unsigned char *name, size_t len)
{
    unsigned char c[4] = {0};
    for (size_t i = 0; i < 4 && i < len; i++)
        c[i] = name[i];
    if ((uint32_t)(w[3] >> 32) !=
        ((uint32_t)c[0] << 23) + ((uint32_t)c[1] << 15) + ((uint32_t)c[2] << 7) + (c[3] >> 1u))
        return 0;
    uint64_t h = 0, g;
    for (size_t i = 0; i < len; i++) {
        unsigned v = name[i];
        /* a latin1 character in two bytes of UTF-8 counts as one */
        if (i + 1 < len && (v & 0xFE) == 0xC2 && (name[i + 1] & 0xC0) == 0x80)
            v = (v << 6 | (name[++i] & 0x3F)) & 0xFF;
        h = (h << 4) + v;
        if ((g = h & 0xF0000000u)) {
            h ^= g >> 24;
            h ^= g;
        }
    }
    return h == w[1];
}

uintptr_t mt_layout_jit_descriptor(void)
{
    return (uintptr_t)dlsym(RTLD_DEFAULT, "__jit_debug_descriptor");
}

struct strings {
    uintptr_t *out;
    size_t n, max;
};

static void add_string(struct strings *s, const char *p)
{
    if (!p || !*p || s->n == s->max) return;
    size_t i = s->n;
    for (; i && s->out[i - 1] >= (uintptr_t)p; i--)
        if (s->out[i - 1] == (uintptr_t)p) return;
    memmove(&s->out[i + 1], &s->out[i], (s->n - i) * sizeof *s->out);
    s->out[i] = (uintptr_t)p;
    s->n++;
}

static int add_object_name(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    add_string(arg, info->dlpi_name);
    return 0;
}

int mt_layout_is_text(const void *p, size_t len)
{
    size_t n = text_length(p, len);
    return n > 0 && n < len;
}

size_t mt_layout_strings(uintptr_t *out, size_t max)
{
    static const int categories[] = {LC_CTYPE,    LC_NUMERIC,   LC_TIME,        LC_COLLATE,
                                     LC_MONETARY, LC_MESSAGES,  LC_PAPER,       LC_NAME,
                                     LC_ADDRESS,  LC_TELEPHONE, LC_MEASUREMENT, LC_IDENTIFICATION};
    struct strings s = {out, 0, max};
    dl_iterate_phdr(add_object_name, &s);
    for (size_t i = 0; i < sizeof categories / sizeof categories[0]; i++)
        add_string(&s, setlocale(categories[i], NULL));
    return s.n;
}

size_t mt_layout_jit_bits(const uintptr_t *w)
{
    uintptr_t area = w[8] >> 32;
    if (!MT_LAYOUT_JITB_MAY(w) || area % 64 || w[MT_JITB_USED] % sizeof *w || w[7] % area) return 0;
    uintptr_t unit = w[7] / area;
    if (unit < 16 || unit > 65536 || (unit & (unit - 1))) return 0;
    for (int k = 9; k <= 10; k++)
        if ((uint32_t)w[k] > area || w[k] >> 32 > area) return 0;
    return area / 8;
}

/* Whether p = {start, end, head, tail} is a vector of `entries` entries of `size` bytes at base,
 * its head and tail inside it on entry boundaries. */
static int ioq_vector(const uintptr_t *p, uintptr_t base, size_t entries, size_t size)
{
    return p[0] == base && p[1] == base + entries * size && p[2] >= base && p[2] <= p[3] &&
           p[3] <= p[1] && (p[2] - base) % size == 0 && (p[3] - base) % size == 0;
}

/* The bits of the words of p's queued entries, [head, tail), the vector's first word at bit
 * `first`. */
static uint32_t ioq_queued(const uintptr_t *p, size_t entries, size_t size, unsigned first)
{
    uint32_t live = 0, words = (uint32_t)(size / sizeof *p);
    for (size_t e = 0; e < entries; e++)
        if (p[0] + e * size >= p[2] && p[0] + e * size < p[3])
            live |= ((1u << words) - 1) << (first + words * e);
    return live;
}

size_t mt_layout_ioqueue(const uintptr_t *w, size_t n, uintptr_t at, uint32_t *live)
{
    enum { ENTRIES = 5, IOV = 2 * sizeof *w, B = 4 + ENTRIES * 2 }; /* B: b_start's index */
    if (n < MT_IOQ_WORDS || !ioq_vector(w, at + 4 * sizeof *w, ENTRIES, IOV) ||
        !ioq_vector(w + B, at + (B + 4) * sizeof *w, ENTRIES, sizeof *w))
        return 0;
    *live = 0xFu | 0xFu << B | ioq_queued(w, ENTRIES, IOV, 4) |
            ioq_queued(w + B, ENTRIES, sizeof *w, B + 4);
    return MT_IOQ_WORDS;
}

size_t mt_layout_port_reds(const uintptr_t *w, size_t n, uintptr_t at)
{
    const uintptr_t tail = at + (MT_PORT_REDS + 2) * sizeof *w, end = at + n * sizeof *w;
    if (w[0] < tail || w[0] >= end || w[0] % sizeof *w) return 0;
    const unsigned char *name = (const unsigned char *)w + (w[0] - at);
    size_t len = 0;
    while (w[0] + len < end && name[len] >= 0x20 && name[len] < 0x7F)
        len++;
    return len && w[0] + len < end && name[len] == '\0' ? MT_PORT_REDS : 0;
}

#define BLK_MIN 32              /* bytes of the smallest block */
#define CARRIER_HEADER_MAX 1024 /* bytes before the first block: Carrier_t and a strategy's */

/* The size in a carrier's first word: a whole number of pages, at least min; else 0. */
static size_t carrier_bytes(uintptr_t head, size_t min)
{
    uintptr_t size = head & ~(uintptr_t)7;
    return size >= min && !(size & (MT_PAGE - 1)) ? size : 0;
}

size_t mt_layout_carrier_size(uintptr_t head)
{
    return carrier_bytes(head, MT_CARRIER_SMALL);
}

size_t mt_layout_carrier_head(uintptr_t c, int sbc, uintptr_t w[4], mt_layout_read read, void *arg)
{
    if (!c || (c & (MT_PAGE - 1)) || read(c, w, 4 * sizeof *w, arg) != 0 ||
        !(w[0] & MT_CARRIER_SBC) != !sbc)
        return 0;
    return carrier_bytes(w[0], MT_PAGE);
}

/* Whether the carrier at c is a single-block one of allocator al, its first words read into w. */
static int sbc_of(uintptr_t c, uintptr_t al, uintptr_t w[4], mt_layout_read read, void *arg)
{
    return mt_layout_carrier_head(c, 1, w, read, arg) && (w[3] & ~(uintptr_t)7) == al;
}

/* Whether the carrier a link of at's names links back to it (back 1: its next, 2: its prev). */
static int names_back(uintptr_t target, int back, uintptr_t at, uintptr_t al, mt_layout_read read,
                      void *arg)
{
    uintptr_t t[4];
    return target && sbc_of(target, al, t, read, arg) && t[back] == at;
}

#define LIST_MAX 4096 /* carriers on a list walked; a longer one tells nothing */
enum { ON_LIST, OFF_LIST, UNKNOWN };

/* Where al's list {first, last} says at is: ON_LIST when the walk from first meets it; OFF_LIST
 * when the list is whole without it (empty, or each carrier al's, the first's previous 0, each
 * next's previous the one before, ending at last); else UNKNOWN. */
static int on_list(uintptr_t first, uintptr_t last, uintptr_t at, uintptr_t al, mt_layout_read read,
                   void *arg)
{
    if (!first || !last) return !first && !last ? OFF_LIST : UNKNOWN;
    uintptr_t c = first, prev = 0, w[4];
    for (size_t n = 0; n < LIST_MAX; n++) {
        if (c == at) return ON_LIST;
        if (!sbc_of(c, al, w, read, arg) || w[2] != prev) return UNKNOWN;
        if (!w[1]) return c == last ? OFF_LIST : UNKNOWN;
        prev = c;
        c = w[1];
    }
    return UNKNOWN;
}

/* The index of {first, last} of the single-block carrier list among an allocator's words:
 * learnt from the first whose words hold a whole list, since an empty list ({0, 0}) shows
 * nothing. SIZE_MAX until then. */
static size_t list_head = SIZE_MAX;

static size_t list_at(const uintptr_t *w, size_t n, uintptr_t al, mt_layout_read read, void *arg)
{
    size_t k = __atomic_load_n(&list_head, __ATOMIC_RELAXED);
    if (k != SIZE_MAX) return k + 1 < n ? k : SIZE_MAX;
    for (k = 0; k + 1 < n; k++) {
        uintptr_t head[4];
        if (w[k] && w[k + 1] && sbc_of(w[k], al, head, read, arg) && !head[2] &&
            on_list(w[k], w[k + 1], 0, al, read, arg) == OFF_LIST) {
            __atomic_store_n(&list_head, k, __ATOMIC_RELAXED);
            return k;
        }
    }
    return SIZE_MAX;
}

int mt_layout_carrier_held(const uintptr_t head[4], uintptr_t at, mt_layout_read read, void *arg,
                           uintptr_t *scratch)
{
    uintptr_t al = head[3] & ~(uintptr_t)7;
    if (!(head[0] & MT_CARRIER_SBC) || names_back(head[2], 1, at, al, read, arg) ||
        names_back(head[1], 2, at, al, read, arg))
        return 1;
    enum { CHUNK = 64 };
    size_t n = 0;
    while (n < MT_ALLOCTR_WORDS &&
           read(al + n * sizeof *scratch, scratch + n, CHUNK * sizeof *scratch, arg) == 0)
        n += CHUNK;
    size_t k = list_at(scratch, n, al, read, arg);
    return k == SIZE_MAX || on_list(scratch[k], scratch[k + 1], at, al, read, arg) != OFF_LIST;
}

/* Walks the blocks of the carrier at `at` (w: its `words` words) from word k on; returns the
 * number of free bytes when they end exactly at its end, each block as its header and its
 * neighbours say, else 0 (as when none is free: nothing to clear). With clear, zeroes them. */
static size_t carrier_blocks(uintptr_t *w, size_t words, uintptr_t at, size_t k, int clear,
                             mt_layout_seen seen, void *arg)
{
    size_t free_bytes = 0;
    int prev_free = 0;
    while (k < words) {
        uintptr_t h = w[k];
        int is_free = h & MT_BLK_FREE;
        size_t size = is_free ? h & ~MT_BLK_FLAGS : h & MT_BLK_ALLOCATED_SIZE, n = size / sizeof *w;
        if (size < BLK_MIN || n > words - k || !(h & MT_BLK_PREV_FREE) != !prev_free ||
            (is_free &&
             (prev_free || w[k + 1] != at || (!(h & MT_BLK_LAST) && w[k + n - 1] != size))))
            return 0;
        if (is_free) {
            free_bytes += size - 2 * sizeof *w;
            if (clear && seen) seen(arg, w + k + 2, n - 2, at + (k + 2) * sizeof *w);
            if (clear) memset(w + k + 2, 0, size - 2 * sizeof *w);
        }
        k += n;
        prev_free = is_free;
        if (h & MT_BLK_LAST) return k == words ? free_bytes : 0;
    }
    return 0;
}

/* The first block is the first word a walk goes from to the carrier's end: the header's size
 * differs by allocator and OTP release. Later ones walk too: each block of the chain, and the
 * headers the VM left inside a free block when it merged it with its neighbours. */
size_t mt_layout_carrier_free(uintptr_t *w, size_t n, uintptr_t at, mt_layout_seen seen, void *arg)
{
    size_t size = n ? mt_layout_carrier_size(w[0]) : 0, words = size / sizeof *w;
    if (!size || words > n) return 0;
    for (size_t k = 4; k < CARRIER_HEADER_MAX / sizeof *w; k++)
        if (!(w[k] & MT_BLK_PREV_FREE) && carrier_blocks(w, words, at, k, 0, NULL, NULL))
            return carrier_blocks(w, words, at, k, 1, seen, arg);
    return 0;
}

/* Whether the string at p is an allocator's name_prefix: 2 to 15 lower-case letters and the
 * final '_', then NUL; copied to prefix. */
static int name_prefix(uintptr_t p, char prefix[16], mt_layout_read read, void *arg)
{
    if (!p || read(p, prefix, 16, arg) != 0) return 0;
    size_t n = 0;
    while (n < 15 && prefix[n] >= 'a' && prefix[n] <= 'z')
        n++;
    return n >= 2 && n < 15 && prefix[n] == '_' && prefix[n + 1] == '\0';
}

#define ALLOCATOR_WORDS 32 /* of an Allctr_t, where its name_prefix is looked for */

int mt_layout_allocator_prefix(uintptr_t al, char prefix[16], mt_layout_read read, void *arg)
{
    uintptr_t w[ALLOCATOR_WORDS];
    if (!al || read(al, w, sizeof w, arg) != 0) return 0;
    for (size_t k = 0; k < ALLOCATOR_WORDS; k++)
        if (name_prefix(w[k], prefix, read, arg)) return 1;
    return 0;
}

int mt_layout_read_proc(uintptr_t a, void *to, size_t len, void *arg)
{
    (void)arg;
    return mt_proc_read(a, to, len);
}

int mt_layout_carrier(uintptr_t addr, uintptr_t lo, uintptr_t hi, char *name, size_t len)
{
    uintptr_t c = addr & ~(uintptr_t)(MT_PAGE - 1);
    for (uintptr_t end = c > lo + MT_CARRIER_REACH ? c - MT_CARRIER_REACH : lo; c >= end && c < hi;
         c -= MT_PAGE) {
        uintptr_t head[4];
        char prefix[16];
        if (c + sizeof head > hi || mt_proc_read(c, head, sizeof head) != 0) continue;
        uintptr_t size = carrier_bytes(head[0], MT_PAGE);
        if (!size || c + size <= addr || c + size > hi ||
            !mt_layout_allocator_prefix(head[3] & ~(uintptr_t)7, prefix, mt_layout_read_proc, NULL))
            continue;
        size_t n = strlen(prefix);
        if (n + 6 > len) return 0;
        memcpy(name, prefix, n);
        memcpy(name + n, "alloc", 6);
        return 1;
    }
    return 0;
}
