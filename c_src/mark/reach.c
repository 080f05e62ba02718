/* reach.c: the conservative mark (see reach.h). */
#define _GNU_SOURCE
#include "mark/reach.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "base/config.h"
#include "base/mem.h"
#include "base/platform.h"
#include "base/proc.h"
#include "base/sort.h"
#include "mark/beam_alloc.h"
#include "mark/beam_heaps.h"
#include "mark/beam_regs.h"
#include "mark/beam_vm.h"
#include "mark/glibc_heap.h"
#include "mark/layouts.h"
#include "mark/rules.h"
#include "mark/stacks.h"
#include "mark/world.h"
#include "record/account.h"
#include "record/beam_frames.h"
#include "record/cfi.h"
#include "record/intern.h"
#include "record/recorder.h"
#include "record/table.h"

#define BUF ((size_t)1 << 20)
#define SCRATCH ((size_t)64 << 10) /* memory read only to note its words */
#define BATCH 512
#define WALK_TRIES 50
#define ALLOCATORS 64 /* the VM's allocator instances told apart in one mark */

/* States of blocks while the mark runs; the final ones are in reach.h. STICKY: an earlier scan
 * found the block lost, so no word marks it (it cannot have become reachable again). */
enum { UNSEEN = 0, LOST = 10, POINTED, STICKY };

struct ctx {
    struct mt_reach *r;
    const struct mt_snapshot *s;
    uint8_t *st;
    size_t *work, nwork;
    char *buf;
    struct mt_maps maps;
    pid_t pid;
    int direct;                         /* process_vm_readv was refused: read memory directly */
    uintptr_t readable_lo, readable_hi; /* the last readable mapping found, when direct */
    int mincore;                        /* skip pages that are not resident */
    /* a word pointing into a block of state from or from2 sets it to target, and, with push,
     * queues it to be read */
    uint8_t from, from2, target;
    int push;
    size_t self; /* the block being read, which its own words do not mark */
    struct mt_world *world;
    struct mt_stacks stacks; /* the threads' stacks, learnt as the roots are read */
    uintptr_t self_sp;       /* the calling thread's stack pointer; 0 at exit */
    int table; /* this copy records: its table is held while the threads are stopped */
    /* Paths (mt_reach_paths): the queue is read first in, first out, so that the mark is a
     * breadth-first search, and each block marked notes what marked it: the block being read,
     * or root (the kind of root being read), and the address of the word (via). */
    size_t *parent;
    uintptr_t *via;
    size_t root, head;
    /* The address asked about, xor HIDE_MASK (so that the ctx holds no copy of it), and whether
     * the root being read is one where the asker's own copies of it lie (see reach.h). */
    uintptr_t hide;
    int hiding;
    int vm;        /* the root being read is anonymous memory that is no thread's stack: the VM's */
    uintptr_t jit; /* the GDB JIT interface's descriptor (layouts.h), 0 when none */
    /* libc's and the loader's strings (layouts.h), sorted */
    uintptr_t strings[MT_LAYOUT_STRINGS];
    size_t nstrings;
    struct mt_beam_gaps gaps; /* the unused parts of the VM's process heaps (beam_heaps.h) */
    /* bits a word may not have set to keep a block: MT_TERMS_UNTAG while a carrier of Erlang
     * terms is read (layouts.h), else 0; the allocators whose carriers were asked about, each
     * with the places (rules.h) its carriers are, 0 when it names no allocator */
    uintptr_t untag;
    struct {
        uintptr_t al;
        unsigned place;
    } allocators[ALLOCATORS];
    size_t nallocators;
    /* Where the memory being read lies (rules.h's places) and the VM's release (beam_vm.h): a
     * rule applies only where both are its own. */
    unsigned place, otp;
    /* The roots' pass: a discounted word that points into a block is noted (r->rule), since the
     * memory that holds it is reachable; in the lost blocks' passes it is not. */
    int noting;
    uint8_t *binary;            /* by record: a live ProcBin or BinRef names it (MT_PLACE_BINARY) */
    uintptr_t libc_lo, libc_hi; /* libc's writable data */
    uint8_t *vm_stacks;         /* by stack id: whether the VM's code allocated (vm_block) */
    size_t nvm_stacks;
    uintptr_t *scratch; /* for the words of memory read only to note them */
    size_t nvm;         /* records of the VM's blocks (mt_record.vm) in the snapshot */
    uint32_t on;        /* rules_here(): the rules of place on_place, once on_known */
    unsigned on_place;
    int on_known;
};

#define HIDE_MASK ((uintptr_t)0x5a5a5a5a5a5a5a5aULL)

extern void *__libc_stack_end;

/* libc's writable data, where malloc keeps its arenas' bookkeeping (MT_RULE_CHUNK_HEADER). */
static int note_libc(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct ctx *c = arg;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    if (!base || strncmp(base, "/libc.so", 8) != 0) return 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!c->libc_hi || lo < c->libc_lo) c->libc_lo = lo;
        if (hi > c->libc_hi) c->libc_hi = hi;
    }
    return 1;
}

/* The loaded objects' writable segments (data and bss), listed before a mark with paths: an
 * object's bss past its file's last page is an anonymous mapping, and a library's data is never
 * where the asker keeps its copies. One mark with paths at a time (paths_lock). */
#define SEGMENTS 1024
static pthread_mutex_t paths_lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment {
    uintptr_t lo, hi;
} segments[SEGMENTS];
static size_t nsegments;

static int note_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    for (size_t i = 0; i < info->dlpi_phnum && nsegments < SEGMENTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_W))
            segments[nsegments++] = (struct segment){info->dlpi_addr + ph->p_vaddr,
                                                     info->dlpi_addr + ph->p_vaddr + ph->p_memsz};
    }
    return 0;
}

static int in_segment(uintptr_t lo, uintptr_t hi)
{
    for (size_t i = 0; i < nsegments; i++)
        if (lo < segments[i].hi && hi > segments[i].lo) return 1;
    return 0;
}

/* Whether [a, a + len) lies in one readable mapping, for reads in place: the rules read addresses
 * that words gave (a link, an allocator, a name), which may be unmapped. The last mapping found
 * is kept: most reads follow one another in it. */
static int readable(struct ctx *c, uintptr_t a, size_t len)
{
    if (a + len < a) return 0;
    if (a >= c->readable_lo && a + len <= c->readable_hi) return 1;
    struct mt_mapping m;
    if (!mt_maps_find(&c->maps, a, &m) || !m.readable || a + len > m.hi) return 0;
    c->readable_lo = m.lo;
    c->readable_hi = m.hi;
    return 1;
}

/* Reads [a, a + len) to `to`; returns how many bytes from a were read. */
static size_t read_mem(struct ctx *c, uintptr_t a, size_t len, void *to)
{
    if (!c->direct) {
        struct iovec local = {to, len}, remote = {(void *)a, len};
        ssize_t got = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);
        if (got >= 0) return (size_t)got;
        if (errno != ENOSYS && errno != EPERM) return 0;
        c->direct = 1;
    }
    if (!readable(c, a, len)) return 0;
    memcpy(to, (const void *)a, len);
    return len;
}

/* The header of the chunk after block r, when it lies in r's last bytes: glibc lets a block use
 * the next chunk's first word, so main_arena's `top`, `last_remainder` and bin heads, which point
 * at chunk headers and live in libc's data (a root), point into the block before the chunk. Such
 * a word is malloc's bookkeeping, not the program's pointer. */
static int next_chunk_header(const struct mt_record *r, uintptr_t w)
{
    uintptr_t chunk = (r->size + sizeof(size_t) + 15) & ~(uintptr_t)15;
    if (chunk < 32) chunk = 32;
    return w != r->addr && w == r->addr - 16 + chunk;
}

static void note_block_words(struct ctx *c, enum mt_rule rule, size_t i);

/* Whether block i can be marked now: it is in state from or from2, and not the block being
 * read. */
static int markable(const struct ctx *c, size_t i)
{
    return i != c->self && (c->st[i] == c->from || c->st[i] == c->from2);
}

/* Block i, markable, becomes target through the word at address at. */
static void mark(struct ctx *c, size_t i, uintptr_t at)
{
    c->st[i] = c->target;
    if (c->parent) {
        c->parent[i] = c->self != MT_SNAPSHOT_NONE ? c->self : c->root;
        c->via[i] = at;
    }
}

/* Whether rule applies to the memory being read: its place and the VM's release. */
static int applies(const struct ctx *c, enum mt_rule rule)
{
    const struct mt_rule_row *row = &mt_rules[rule];
    return (c->place & row->where) && (!row->otp || (row->otp & c->otp));
}

_Static_assert(MT_RULES <= 32, "a rule is a bit of rules_here's answer");

/* The rules that apply where the memory being read lies, a bit a rule: the table says, for the
 * place last asked about (one mark, one release). */
static uint32_t rules_here(struct ctx *c)
{
    if (c->place != c->on_place || !c->on_known) {
        c->on = 0;
        for (int r = MT_RULE_NONE + 1; r < MT_RULES; r++)
            if (applies(c, (enum mt_rule)r)) c->on |= (uint32_t)1 << r;
        c->on_place = c->place;
        c->on_known = 1;
    }
    return c->on;
}

/* Notes that the word w at address at, discounted by rule, points into block i: a lost block so
 * pointed into is lost only possibly (rules.h). The first such word is kept. */
static void note_block(struct ctx *c, enum mt_rule rule, size_t i, uintptr_t at)
{
    if (!c->noting || i == c->self || c->r->rule[i]) return;
    c->r->rule[i] = (uint8_t)rule;
    c->r->rule_at[i] = at;
}

/* The word w at address at is not taken for a pointer, by rule. */
static void discount(struct ctx *c, enum mt_rule rule, uintptr_t w, uintptr_t at)
{
    c->r->discounted[rule]++;
    size_t i;
    if (c->noting && (i = mt_snapshot_find(c->s, w)) != MT_SNAPSHOT_NONE)
        note_block(c, rule, i, at);
}

/* Notes each of the n words at w (a copy of the memory at `at`), discounted by rule, that
 * points into a block. */
static void note_words(struct ctx *c, enum mt_rule rule, const uintptr_t *w, size_t n, uintptr_t at)
{
    if (!c->noting) return;
    for (size_t k = 0; k < n; k++) {
        size_t i;
        if (w[k] && (i = mt_snapshot_find(c->s, w[k])) != MT_SNAPSHOT_NONE)
            note_block(c, rule, i, at + k * sizeof *w);
    }
}

/* The n words at w, a copy of the memory at `at`, are not read, by rule. */
static void discount_words(struct ctx *c, enum mt_rule rule, const uintptr_t *w, size_t n,
                           uintptr_t at)
{
    c->r->discounted[rule] += n;
    note_words(c, rule, w, n, at);
}

/* w, the word at address at (for registers: the thread's index << 8 | the register's * 8). */
static void consider(struct ctx *c, uintptr_t w, uintptr_t at)
{
    if (c->hiding && (w ^ HIDE_MASK) == c->hide) return;
    if (w & c->untag) {
        discount(c, MT_RULE_TERM_TAGS, w, at);
        return;
    }
    size_t i = mt_snapshot_find(c->s, w);
    if (i == MT_SNAPSHOT_NONE) return;
    if (c->st[i] == STICKY) {
        c->r->discounted[MT_RULE_REMEMBERED]++;
        note_block(c, MT_RULE_REMEMBERED, i, at);
        return;
    }
    if (!markable(c, i)) return;
    if (c->self == MT_SNAPSHOT_NONE && at >= c->libc_lo && at < c->libc_hi && !c->s->rec[i].vm &&
        next_chunk_header(&c->s->rec[i], w)) {
        c->r->discounted[MT_RULE_CHUNK_HEADER]++;
        note_block(c, MT_RULE_CHUNK_HEADER, i, at);
        return;
    }
    mark(c, i, at);
    if (c->push) c->work[c->nwork++] = i;
}

/* An alternate signal stack: only the kernel points to it, and what it holds is the signal
 * frames of handlers, the stop's own included, whose registers are read from the stop. It is
 * reachable, and its stale frames are not read. */
static void keep(struct ctx *c, uintptr_t a, size_t thread)
{
    size_t i = mt_snapshot_find(c->s, a);
    if (i == MT_SNAPSHOT_NONE || c->st[i] != UNSEEN) return;
    c->st[i] = MT_REACH_REACHABLE;
    if (c->parent) {
        c->parent[i] = MT_REACH_ALTSTACK;
        c->via[i] = thread << 8;
    }
    note_block_words(c, MT_RULE_SIGNAL_STACKS, i);
}

/* Block i is reachable through the word at `at` of block `parent` (or of memory outside every
 * block: MT_REACH_MEMORY), without being read. */
static void known(struct ctx *c, size_t i, size_t parent, uintptr_t at)
{
    c->st[i] = MT_REACH_REACHABLE;
    if (c->parent) {
        c->parent[i] = parent;
        c->via[i] = at;
    }
}

/* The GDB JIT interface's list (layouts.h): each entry, and the symfile it names, is reachable
 * from the descriptor, a static, and none is read: the entries' words are the list, which this
 * walk follows, and the symfiles hold no pointers. An entry that is no block's start, or is
 * marked already (a cycle), ends the walk; a symfile that is not a block of its size is left to
 * the mark. */
static void keep_jit(struct ctx *c)
{
    uintptr_t at = c->jit + MT_JIT_FIRST, e;
    size_t parent = MT_REACH_MEMORY;
    if (!c->jit || read_mem(c, at, sizeof e, &e) != sizeof e) return;
    for (size_t k = 0; e && k < MT_JIT_MAX; k++) {
        uintptr_t w[MT_JIT_ENTRY];
        size_t i = mt_snapshot_find(c->s, e);
        if (i == MT_SNAPSHOT_NONE || c->s->rec[i].addr != e || c->st[i] != UNSEEN ||
            c->s->rec[i].size < sizeof w || read_mem(c, e, sizeof w, w) != sizeof w)
            return;
        known(c, i, parent, at);
        size_t j = mt_snapshot_find(c->s, w[2]);
        if (j != MT_SNAPSHOT_NONE && c->s->rec[j].addr == w[2] && w[3] <= c->s->rec[j].size &&
            c->st[j] == UNSEEN) {
            known(c, j, i, e + 2 * sizeof *w);
            note_block_words(c, MT_RULE_JIT_SYMFILES, j);
        }
        parent = i;
        at = e;
        e = w[0];
    }
}

/* The first n words of a Binary that would start at v, into head, and in *room the bytes of its
 * block past them. Returns 1 when read; 0 when nothing is concluded (v lies in no block, or the
 * words cannot be read); -1 when no live Binary can start there: v is not where the VM places one
 * in its block, or its head would run past the block. */
static int binary_head(struct ctx *c, uintptr_t v, uintptr_t *head, size_t n, size_t *room)
{
    size_t i = mt_snapshot_find(c->s, v);
    if (i == MT_SNAPSHOT_NONE) return 0;
    uintptr_t start = c->s->rec[i].addr, end = start + c->s->rec[i].size;
    if (!mt_layout_binary_place(v, start, c->s->rec[i].size) || v + n * sizeof *head > end)
        return -1;
    *room = end - v - n * sizeof *head;
    return read_mem(c, v, n * sizeof *head, head) == n * sizeof *head;
}

/* A dead Erlang reference to an off-heap binary at w[k] (layouts.h: a ProcBin's val, w[k - 3]
 * its thing word): val lies in a block, and that block holds no live Binary there any more. The
 * VM leaves dead ones in the garbage and free space of its carriers; once the Binary is freed its
 * chunk goes to the next malloc (whole, or as part of a larger chunk), and a NIF's block lost there
 * read as kept (bench/stale.exs: the commonest stale word). A live Binary is a block
 * of its own with +MBe false, or lies inside a carrier the VM took from malloc. */
static int dead_procbin(struct ctx *c, const uintptr_t *w, size_t k)
{
    uintptr_t head[MT_BINARY_HEADER / sizeof(uintptr_t)];
    size_t room;
    int got = binary_head(c, w[k], head, MT_BINARY_HEADER / sizeof *head, &room);
    return got < 0 || (got && !mt_layout_binary_live(head, w[k - 2], room));
}

/* A dead Erlang reference to a magic binary (a resource, for one) at w, an MRef's mb (layouts.h):
 * mb lies in a block where no live magic binary starts, as for dead_procbin. */
static int dead_mref(struct ctx *c, uintptr_t w)
{
    uintptr_t head[2];
    size_t room;
    int got = binary_head(c, w, head, 2, &room);
    return got < 0 || (got && !mt_layout_magic_live(head));
}

/* A dead Erlang reference to an off-heap binary of OTP 27 at w, a BinRef's val (layouts.h): as
 * for dead_procbin, with OTP 27's Binary header. */
static int dead_binref(struct ctx *c, uintptr_t w)
{
    uintptr_t head[MT_BINARY27_HEADER / sizeof(uintptr_t)];
    size_t room;
    int got = binary_head(c, w, head, MT_BINARY27_HEADER / sizeof *head, &room);
    return got < 0 || (got && !mt_layout_binary27_live(head, room));
}

/* Whether the words at w are an entry of the VM's atom table, by its name, read (layouts.h). */
static int atom(struct ctx *c, const uintptr_t *w)
{
    unsigned char name[MT_ATOM_NAME_MAX];
    size_t len = mt_layout_atom(w, MT_ATOM_WORDS);
    return len && read_mem(c, w[4], len, name) == len && mt_layout_atom_named(w, name, len);
}

/* The words of [lo, hi), memory the mark does not read by rule: counted, and while noting, read
 * (what of them can be, a page run at a time, past pages that are not resident, as scan_range
 * skips them) to note those that point into a block. */
static void note_unread(struct ctx *c, enum mt_rule rule, uintptr_t lo, uintptr_t hi)
{
    lo = (lo + 7) & ~(uintptr_t)7;
    if (lo < hi) c->r->discounted[rule] += (hi - lo) / sizeof(uintptr_t);
    while (c->noting && lo < hi) {
        size_t len = hi - lo < SCRATCH ? hi - lo : SCRATCH;
        if (c->mincore) {
            uintptr_t page = lo & ~(uintptr_t)(MT_PAGE - 1);
            unsigned char vec[SCRATCH / MT_PAGE + 1];
            size_t pages = (lo + len - page + MT_PAGE - 1) / MT_PAGE;
            if (mincore((void *)page, pages * MT_PAGE, vec) == 0 && !(vec[0] & 1)) {
                lo = page + MT_PAGE;
                continue;
            }
        }
        size_t got = read_mem(c, lo, len, c->scratch);
        note_words(c, rule, c->scratch, got / sizeof(uintptr_t), lo);
        if (got < len) {
            lo = ((lo + got) & ~(uintptr_t)(MT_PAGE - 1)) + MT_PAGE;
        } else {
            lo += len;
        }
    }
}

/* Block i is reachable but its words are not read, by rule: they are noted. */
static void note_block_words(struct ctx *c, enum mt_rule rule, size_t i)
{
    note_unread(c, rule, c->s->rec[i].addr, c->s->rec[i].addr + (c->s->rec[i].size & ~(size_t)7));
}

/* mtrace's own object, whose frames lead every recorded stack. */
static int own_code(uintptr_t ip)
{
    static void *own;
    struct dl_find_object f;
    if (!own && _dl_find_object((void *)(uintptr_t)own_code, &f) == 0) own = f.dlfo_link_map;
    return _dl_find_object((void *)ip, &f) == 0 && f.dlfo_link_map == own;
}

/* Whether the block being read was allocated by the VM's own code: its record's first frame past
 * mtrace's lies in the VM's executable (MT_PLACE_VM_BLOCK). */
static int vm_block(struct ctx *c)
{
    const uintptr_t *ips;
    if (!c->otp || c->self == MT_SNAPSHOT_NONE) return 0;
    uint32_t id = c->s->rec[c->self].stack;
    if (id == MT_SNAPSHOT_UNRECORDED) return 0;
    /* by stack, once a mark: 1 not the VM's, 2 the VM's */
    if (id < c->nvm_stacks && c->vm_stacks[id]) return c->vm_stacks[id] == 2;
    int n = mt_stack_get(id, &ips), k = 0;
    while (k < n && own_code(ips[k]))
        k++;
    int vm = k < n && mt_beam_vm_code(ips[k]);
    if (id < c->nvm_stacks) c->vm_stacks[id] = (uint8_t)(vm ? 2 : 1);
    return vm;
}

/* Whether w is asmjit's JitAllocatorBlock (layouts.h) whose bit vectors are a block of their own
 * (at their request's size, or glibc's rounding past it), in a block the VM allocated: that block,
 * which holds no pointer, is marked through the word at `at` and not read. */
static int jit_bits(struct ctx *c, const uintptr_t *w, uintptr_t at)
{
    size_t bytes = mt_layout_jit_bits(w), i;
    if (!bytes || (i = mt_snapshot_find(c->s, w[MT_JITB_USED])) == MT_SNAPSHOT_NONE ||
        c->s->rec[i].addr != w[MT_JITB_USED] || c->s->rec[i].size < 2 * bytes ||
        c->s->rec[i].size >= 2 * bytes + 16)
        return 0;
    if (markable(c, i)) {
        mark(c, i, at);
        note_block_words(c, MT_RULE_JIT_BIT_VECTORS, i);
    }
    return 1;
}

/* A live reference to an off-heap Binary at v, in a carrier of terms: the block that starts there
 * is that Binary (MT_PLACE_BINARY). */
static void binary_named(struct ctx *c, uintptr_t v)
{
    size_t i = mt_snapshot_find(c->s, v);
    if (i != MT_SNAPSHOT_NONE && c->s->rec[i].addr == v) c->binary[i] = 1;
}

#define WORD_KEY(p) (*(p))
MT_DEFINE_UPPER_BOUND(string_after, uintptr_t, WORD_KEY)

/* Whether a is one of libc's or the loader's strings: a block of text up to its NUL, and after it
 * of what its chunk held before (layouts.h), which holds no pointer. */
static int string_block(const struct ctx *c, uintptr_t a)
{
    size_t k = string_after(c->strings, 0, c->nstrings, a);
    return k && c->strings[k - 1] == a;
}

/* Whether the block being read (c->self) has no record: it is read to its usable size. */
static int unrecorded(const struct ctx *c)
{
    return c->self != MT_SNAPSHOT_NONE && c->s->rec[c->self].stack == MT_SNAPSHOT_UNRECORDED;
}

/* The words of p, a copy of len bytes from address at, with the rules that apply where they lie
 * (c->place, c->otp). */
static void scan_words(struct ctx *c, const void *p, size_t len, uintptr_t at)
{
    const uintptr_t *w = p;
    /* a word partly data: a heap binary's last, a fun's, an atom's, a port's reds */
    size_t padded = SIZE_MAX;
    uintptr_t data = 0, text;
    enum mt_rule padding = MT_RULE_NONE;
    /* the NUL's word of a block without a record that is a string from its first byte */
    uint32_t on = rules_here(c);
#define ON(rule) ((on >> (rule)) & 1)
    size_t nul_word = SIZE_MAX;
    if (ON(MT_RULE_STRING_END) && at == c->s->rec[c->self].addr &&
        (text = mt_layout_string_end(w, len / sizeof *w)) != UINTPTR_MAX) {
        nul_word = text;
    }
    /* the terms' rules, and the VM's own structs' (which prove themselves: an atom by its name's
     * hash, a port by its queue's pointers into itself) */
    int terms = (on & ((uint32_t)1 << MT_RULE_HEAP_BINARY | (uint32_t)1 << MT_RULE_FUN_PADDING |
                       (uint32_t)1 << MT_RULE_DEAD_PROCBIN | (uint32_t)1 << MT_RULE_DEAD_MREF |
                       (uint32_t)1 << MT_RULE_DEAD_BINREF | (uint32_t)1 << MT_RULE_MATCH_STATE |
                       (uint32_t)1 << MT_RULE_SUB_BITS)) != 0;
    int own = ON(MT_RULE_ATOM_INDEX) || ON(MT_RULE_IO_QUEUE);
    /* the heap binary's thing word: OTP 27's heap bitstring, or OTP 25 and 26's heap binary */
    uintptr_t heap_subtag = c->otp & MT_OTP27 ? MT_HEAPBITS_SUBTAG : MT_HEAPBIN_SUBTAG;
    for (size_t k = 0, n = len / sizeof *w; k < n; k++) {
        uint32_t live;
        size_t last;
        unsigned bytes;
        if (k == padded) {
            if (w[k] & ~data) discount(c, padding, w[k], at + k * sizeof *w);
            consider(c, w[k] & data, at + k * sizeof *w);
            continue;
        }
        if (k == nul_word) {
            uintptr_t mask = mt_layout_text_mask(w[k]);
            if (w[k] & ~mask) discount(c, MT_RULE_STRING_END, w[k], at + k * sizeof *w);
            consider(c, w[k] & mask, at + k * sizeof *w);
            continue;
        }
        if (terms) {
            if (ON(MT_RULE_HEAP_BINARY) && (w[k] & 0x3F) == heap_subtag &&
                (bytes = mt_layout_heapbin(w + k, n - k, &last))) {
                padded = k + last;
                data = ((uintptr_t)1 << 8 * bytes) - 1;
                padding = MT_RULE_HEAP_BINARY;
            }
            if (ON(MT_RULE_FUN_PADDING) && w[k] == MT_FUN_HEADER && mt_layout_fun(w + k, n - k)) {
                padded = k + MT_FUN_PADDED;
                data = MT_FUN_DATA;
                padding = MT_RULE_FUN_PADDING;
            }
            if (ON(MT_RULE_DEAD_PROCBIN) && k >= 3 && mt_layout_procbin(w + k - 3, n - (k - 3))) {
                if (dead_procbin(c, w, k)) {
                    discount(c, MT_RULE_DEAD_PROCBIN, w[k], at + k * sizeof *w);
                    if (k + 1 < n)
                        discount(c, MT_RULE_DEAD_PROCBIN, w[k + 1], at + (k + 1) * sizeof *w);
                    k++; /* bytes too */
                    continue;
                }
                binary_named(c, w[k]);
            }
            if (ON(MT_RULE_DEAD_MREF) && k >= 1 && w[k - 1] == MT_MREF_HEADER &&
                dead_mref(c, w[k])) {
                discount(c, MT_RULE_DEAD_MREF, w[k], at + k * sizeof *w);
                continue;
            }
            if (ON(MT_RULE_DEAD_BINREF) && k >= 1 && w[k - 1] == MT_BINREF_HEADER) {
                if (dead_binref(c, w[k])) {
                    discount(c, MT_RULE_DEAD_BINREF, w[k], at + k * sizeof *w);
                    continue;
                }
                binary_named(c, w[k]);
            }
            /* a match state's or a sub-bitstring's base, which its orig keeps */
            if (ON(MT_RULE_MATCH_STATE) && k >= 2 && mt_layout_matchstate(w + k - 2, n - (k - 2))) {
                discount(c, MT_RULE_MATCH_STATE, w[k], at + k * sizeof *w);
                continue;
            }
            if (ON(MT_RULE_SUB_BITS) && k >= 1 && mt_layout_subbits(w + k - 1, n - (k - 1))) {
                discount(c, MT_RULE_SUB_BITS, w[k], at + k * sizeof *w);
                continue;
            }
        }
        if (own) {
            /* read only where the word's padding would keep a block: a name costs a system
             * call */
            if (ON(MT_RULE_ATOM_INDEX) && k + MT_ATOM_WORDS <= n && MT_LAYOUT_ATOM_MAY(w + k) &&
                w[k + MT_ATOM_INDEX] >> 32 &&
                mt_snapshot_find(c->s, w[k + MT_ATOM_INDEX]) != MT_SNAPSHOT_NONE &&
                atom(c, w + k)) {
                padded = k + MT_ATOM_INDEX;
                data = MT_ATOM_INDEX_DATA;
                padding = MT_RULE_ATOM_INDEX;
            }
            if (ON(MT_RULE_IO_QUEUE) && w[k] == at + (k + 4) * sizeof *w &&
                mt_layout_ioqueue(w + k, n - k, at + k * sizeof *w, &live)) {
                for (size_t j = 0; j < MT_IOQ_WORDS; j++) {
                    if (live >> j & 1)
                        consider(c, w[k + j], at + (k + j) * sizeof *w);
                    else
                        discount(c, MT_RULE_IO_QUEUE, w[k + j], at + (k + j) * sizeof *w);
                }
                size_t tail = k + MT_IOQ_WORDS;
                if (ON(MT_RULE_PORT_REDS) && tail < n &&
                    mt_layout_port_reds(w + tail, n - tail, at + tail * sizeof *w)) {
                    padded = tail + MT_PORT_REDS;
                    data = MT_PORT_REDS_DATA;
                    padding = MT_RULE_PORT_REDS;
                }
                k = tail - 1;
                continue;
            }
        }
        if (ON(MT_RULE_JIT_BIT_VECTORS) && k >= MT_JITB_USED && k + 1 < n &&
            MT_LAYOUT_JITB_MAY(w + k - MT_JITB_USED) &&
            jit_bits(c, w + k - MT_JITB_USED, at + k * sizeof *w)) {
            c->r->discounted[MT_RULE_JIT_BIT_VECTORS] += 2;
            k++; /* the stop vector's pointer, into the same block */
            continue;
        }
        consider(c, w[k], at + k * sizeof *w);
    }
#undef ON
}

/* The registers of thread number `thread` (an index in r->thread). */
static void scan_regs(struct ctx *c, const uintptr_t *regs, size_t thread)
{
    c->root = MT_REACH_REGISTER;
    scan_words(c, regs, MT_WORLD_REGS * sizeof *regs, thread << 8);
    c->root = MT_REACH_MEMORY;
}

/* The size of the VM's carrier whose first words are head, when it fits in room bytes: the size
 * its first word gives (layouts.h), and an allocator's address in its fourth; else 0. */
static size_t vm_carrier(const uintptr_t head[4], uintptr_t room)
{
    size_t size = mt_layout_carrier_size(head[0]);
    return size <= MT_CARRIER_REACH && size <= room && (head[3] & ~(uintptr_t)7) >= MT_PAGE ? size
                                                                                            : 0;
}

static int read_all(uintptr_t a, void *to, size_t len, void *arg)
{
    return read_mem(arg, a, len, to) == len ? 0 : -1;
}

/* Whether the carrier at `at`, whose first words are head, is one the VM still holds (layouts.h);
 * its allocator's words are read into the scan buffer, not in use yet. */
static int carrier_held(struct ctx *c, uintptr_t at, const uintptr_t head[4])
{
    return mt_layout_carrier_held(head, at, read_all, c, (uintptr_t *)c->buf);
}

/* A process heap's unused part, a free id list, ... (beam_heaps.h), zeroed in the copy. */
static void note_gap(void *arg, enum mt_beam_gap_kind kind, const void *p, size_t len, uintptr_t at)
{
    static const enum mt_rule rule[MT_BEAM_GAP_KINDS] = {
        [MT_BEAM_GAP_HEAP] = MT_RULE_PROCESS_HEAP_GAPS, [MT_BEAM_GAP_IDS] = MT_RULE_ID_LISTS,
        [MT_BEAM_GAP_FIX] = MT_RULE_FIX_LISTS,          [MT_BEAM_GAP_DD] = MT_RULE_DELAYED_FREES,
        [MT_BEAM_GAP_FREGS] = MT_RULE_FLOAT_REGISTERS,
    };
    discount_words(arg, rule[kind], p, len / sizeof(uintptr_t), at);
}

/* A carrier's free block, [at, at + n words), which the carrier walk zeroes (layouts.h). */
static size_t first_after(const struct mt_snapshot *s, uintptr_t a);

/* [lo, hi), memory the VM's allocators hold free (a free block of a carrier, a carrier let go
 * of): a block of the VM's recorded there was freed by a path the hooks did not see (a NIF API
 * function reached through a copy of its address), a free missed, whose record goes
 * (mt_forget_missed), and which is not reported lost. */
static void vm_blocks_freed(struct ctx *c, uintptr_t lo, uintptr_t hi)
{
    for (size_t i = c->nvm ? first_after(c->s, lo) : c->s->heap; i < c->s->heap; i++) {
        const struct mt_record *b = &c->s->rec[i];
        if (b->addr >= hi) break;
        if (!b->vm || b->addr < lo || (c->st[i] != UNSEEN && c->st[i] != STICKY)) continue;
        c->st[i] = MT_REACH_REACHABLE;
        if (c->r->missed_frees < MT_REACH_MISSED) c->r->missed[c->r->missed_frees] = *b;
        c->r->missed_frees++;
    }
}

/* A free block of a carrier, n words at `at`: its words are stale. */
static void note_free(void *arg, const uintptr_t *w, size_t n, uintptr_t at)
{
    struct ctx *c = arg;
    discount_words(c, MT_RULE_FREE_VM_BLOCKS, w, n, at);
    vm_blocks_freed(c, at, at + n * sizeof *w);
}

/* The places (rules.h) of a carrier of allocator al: terms in eheap_alloc's, ets_alloc's and
 * literal_alloc's; the VM's own structs in every other allocator's but driver_alloc's and
 * binary_alloc's, where NIFs and drivers keep theirs; none when al names no allocator of the VM's,
 * or in a process that is no BEAM. Each allocator's name is read once a mark. */
static unsigned place_of(struct ctx *c, uintptr_t al)
{
    size_t i = 0;
    while (i < c->nallocators && c->allocators[i].al != al)
        i++;
    if (i < c->nallocators) return c->allocators[i].place;
    char prefix[16];
    unsigned place = 0;
    if (c->otp && mt_layout_allocator_prefix(al, prefix, read_all, c)) {
        if (!strcmp(prefix, MT_TERMS_PREFIX) || !strcmp(prefix, "ets_") ||
            !strcmp(prefix, "literal_"))
            place = MT_PLACE_TERMS;
        else if (strcmp(prefix, "driver_") && strcmp(prefix, "binary_"))
            place = MT_PLACE_VM_OWN;
        else
            place = MT_PLACE_VM_DATA;
        if (!strcmp(prefix, MT_TERMS_PREFIX)) place |= MT_PLACE_TAGGED;
    }
    if (i < ALLOCATORS) {
        c->allocators[c->nallocators].al = al;
        c->allocators[c->nallocators++].place = place;
    }
    return place;
}

/* Reads the carrier of allocator al (its words in buf, got bytes from at): its places set, its
 * free blocks noted and zeroed where the whole carrier is in buf (whole), the untag bits of a
 * carrier of terms set. */
static void enter_carrier(struct ctx *c, uintptr_t al, uintptr_t *buf, size_t got, uintptr_t at,
                          int whole)
{
    unsigned place = place_of(c, al);
    c->place = place & (MT_PLACE_TERMS | MT_PLACE_VM_OWN | MT_PLACE_VM_DATA);
    c->untag = place & MT_PLACE_TAGGED ? MT_TERMS_UNTAG : 0;
    if (place && whole)
        c->r->vm_free_bytes += mt_layout_carrier_free(buf, got / sizeof *buf, at, note_free, c);
}

/* Leaves a carrier, or a block: no place is the mark's but where it proves one. */
static void leave_place(struct ctx *c)
{
    c->place = 0;
    c->untag = 0;
}

/* How much of buf (got bytes, read from lo) lies before the first page after its first that
 * starts a carrier (vm_carrier), which the next read then starts on. */
static size_t before_carrier(const char *buf, size_t got, uintptr_t lo, uintptr_t hi)
{
    size_t off = (MT_PAGE - (lo & (MT_PAGE - 1))) & (MT_PAGE - 1);
    for (off = off ? off : MT_PAGE; off + 4 * sizeof(uintptr_t) <= got; off += MT_PAGE) {
        uintptr_t head[4];
        memcpy(head, buf + off, sizeof head);
        if (vm_carrier(head, hi - (lo + off))) return off;
    }
    return got;
}

/* Reads and scans [lo, hi), a page at a time past what cannot be read. */

/* The VM's blocks in len bytes read at `at` to buf, but for the one being read, zeroed: they lie
 * in its carriers, which are read whole as roots so that their places and free blocks are
 * told, but a block is read only once it is marked. */
static void blank_vm_blocks(const struct ctx *c, char *buf, size_t len, uintptr_t at)
{
    for (size_t i = first_after(c->s, at); i < c->s->heap; i++) {
        const struct mt_record *b = &c->s->rec[i];
        if (b->addr >= at + len) break;
        if (!b->vm || i == c->self) continue;
        uintptr_t lo = b->addr > at ? b->addr : at, hi = b->addr + b->size;
        if (hi > at + len) hi = at + len;
        if (lo < hi) memset(buf + (lo - at), 0, hi - lo);
    }
}

static void scan_range(struct ctx *c, uintptr_t lo, uintptr_t hi, uint64_t *bytes)
{
    lo = (lo + 7) & ~(uintptr_t)7;
    while (lo < hi) {
        size_t len = hi - lo < BUF ? hi - lo : BUF;
        if (c->mincore) {
            /* Not resident: never written (reads as zeros) or a file's unchanged page. A run of
             * them is skipped whole, a run of resident ones read whole: one call for each. */
            uintptr_t page = lo & ~(uintptr_t)(MT_PAGE - 1);
            unsigned char vec[256];
            size_t pages = (hi - page + MT_PAGE - 1) / MT_PAGE, k = 0;
            if (pages > sizeof vec) pages = sizeof vec;
            if (mincore((void *)page, pages * MT_PAGE, vec) == 0) {
                while (k < pages && !(vec[k] & 1))
                    k++;
                if (k) {
                    lo = page + k * MT_PAGE;
                    continue;
                }
                while (k < pages && (vec[k] & 1))
                    k++;
                if (page + k * MT_PAGE < lo + len) len = page + k * MT_PAGE - lo;
            }
        }
        /* Only a carrier of the VM's read whole has its free blocks told (layouts.h): a read
         * that starts on one reads it whole, and one that runs into one ends there. Carriers
         * start on any page: most on 256 KiB boundaries, but not all. */
        size_t carrier = 0;
        uintptr_t head[4];
        if (!(lo & (MT_PAGE - 1)) && read_mem(c, lo, sizeof head, head) == sizeof head)
            carrier = vm_carrier(head, hi - lo);
        /* only a carrier whose allocator names itself is the VM's */
        if (carrier && !place_of(c, head[3] & ~(uintptr_t)7)) carrier = 0;
        /* a carrier the VM let go of is free memory, its words stale */
        if (carrier && !carrier_held(c, lo, head)) {
            c->r->vm_free_bytes += carrier;
            note_unread(c, MT_RULE_RELEASED_CARRIERS, lo, lo + carrier);
            vm_blocks_freed(c, lo, lo + carrier);
            lo += carrier;
            continue;
        }
        char *buf = c->buf;
        if (carrier > BUF && !(buf = mt_mem_map(carrier))) {
            carrier = 0;
            buf = c->buf;
        }
        if (carrier) len = carrier;
        size_t got = read_mem(c, lo, len, buf);
        size_t cut = carrier ? got : before_carrier(buf, got, lo, hi);
        if (cut < got) got = len = cut;
        if (carrier)
            enter_carrier(c, head[3] & ~(uintptr_t)7, (uintptr_t *)buf, got, lo, got == carrier);
        mt_beam_gaps_clear(&c->gaps, buf, got, lo, &c->r->left, note_gap, c);
        if (c->nvm) blank_vm_blocks(c, buf, got, lo);
        scan_words(c, buf, got, lo);
        if (carrier) leave_place(c);
        if (buf != c->buf) mt_mem_unmap(buf, carrier);
        *bytes += got;
        if (got < len) {
            uintptr_t skip = ((lo + got) & ~(uintptr_t)(MT_PAGE - 1)) + MT_PAGE;
            c->r->unreadable_bytes += skip - (lo + got);
            lo = skip;
        } else {
            lo += len;
        }
    }
}

/* The first heap record whose block ends after a. */
static size_t first_after(const struct mt_snapshot *s, uintptr_t a)
{
    size_t lo = 0, hi = s->heap;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->rec[mid].addr + s->rec[mid].size <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A root range less the recorded blocks inside it: a block is read when it is marked. The VM's
 * blocks are cut where they are read (blank_vm_blocks). */
static void scan_root(struct ctx *c, uintptr_t lo, uintptr_t hi)
{
    for (size_t i = first_after(c->s, lo); lo < hi && i < c->s->heap; i++) {
        const struct mt_record *b = &c->s->rec[i];
        if (b->addr >= hi) break;
        if (b->vm) continue;
        if (b->addr > lo) scan_range(c, lo, b->addr, &c->r->root_bytes);
        if (b->addr + b->size > lo) lo = b->addr + b->size;
    }
    if (lo < hi) scan_range(c, lo, hi, &c->r->root_bytes);
}

/* mtrace's own regions (mem.h) cut the roots they overlap, nearest first. */
struct cut {
    uintptr_t lo, hi, best_lo, best_hi;
};

static void first_own(uintptr_t lo, uintptr_t hi, void *arg)
{
    struct cut *k = arg;
    if (hi <= k->lo || lo >= k->hi) return;
    if (!k->best_hi || lo < k->best_lo) {
        k->best_lo = lo;
        k->best_hi = hi;
    }
}

static void scan_minus_own(struct ctx *c, uintptr_t lo, uintptr_t hi)
{
    while (lo < hi) {
        struct cut k = {lo, hi, 0, 0};
        mt_mem_each(first_own, &k);
        if (!k.best_hi) {
            scan_root(c, lo, hi);
            return;
        }
        if (k.best_lo > lo) scan_root(c, lo, k.best_lo);
        lo = k.best_hi;
    }
}

/* Blocks queued and not read yet; the next one to read (the newest, or with paths the oldest). */
static int queued(const struct ctx *c)
{
    return c->parent ? c->head < c->nwork : c->nwork > 0;
}

static size_t next_queued(struct ctx *c)
{
    return c->parent ? c->work[c->head++] : c->work[--c->nwork];
}

/* Scans block c->self, whose len bytes at address at were read to w, with the rules its place
 * proves: a carrier of the VM's (an allocator's first carrier comes from malloc, sys_alloc), a
 * block the VM allocated, a Binary a live reference names, or a string without a record. */
static void read_block(struct ctx *c, void *w, size_t len, uintptr_t at)
{
    const uintptr_t *head = w;
    if (len >= MT_CARRIER_SMALL && vm_carrier(head, len) && place_of(c, head[3] & ~(uintptr_t)7))
        enter_carrier(c, head[3] & ~(uintptr_t)7, w, len, at, 1);
    else
        c->place = (unrecorded(c) ? MT_PLACE_UNRECORDED
                    : vm_block(c) ? MT_PLACE_VM_BLOCK
                                  : 0) |
                   (c->binary[c->self] ? MT_PLACE_BINARY : 0);
    mt_beam_gaps_clear(&c->gaps, w, len, at, &c->r->left, note_gap, c);
    if (unrecorded(c) && string_block(c, at) && mt_layout_is_text(w, len)) {
        discount_words(c, MT_RULE_LIBC_STRINGS, w, len / sizeof(uintptr_t), at);
        leave_place(c);
        return;
    }
    int binary = applies(c, MT_RULE_BINARY_SLACK);
    size_t first,
        end = mt_layout_pointer_range(w, len, at, unrecorded(c), binary ? c->otp : 0, &first);
    enum mt_rule rule = binary ? MT_RULE_BINARY_SLACK : MT_RULE_LOADER_SEGMENT;
    discount_words(c, rule, w, first / sizeof(uintptr_t), at);
    discount_words(c, rule, (const uintptr_t *)((const char *)w + end),
                   (len - end) / sizeof(uintptr_t), at + end);
    scan_words(c, (const char *)w + first, end - first, at + first);
    leave_place(c);
}

/* Reads and scans the queued blocks, a batch per system call, until none is left. With paths the
 * queue only grows while it is read: it starts again at 0 once read, so that no pass's pushes
 * (each block at most once a pass) run past its n slots. */
static void drain(struct ctx *c)
{
    while (queued(c)) {
        struct iovec local[BATCH], remote[BATCH];
        /* idx zeroed: cppcheck cannot tell that only idx[0 .. k) is read (4 KiB a batch) */
        size_t idx[BATCH] = {0}, k = 0, used = 0, start = c->head;
        while (queued(c) && k < BATCH) {
            size_t i = c->parent ? c->work[c->head] : c->work[c->nwork - 1];
            size_t len = c->s->rec[i].size & ~(size_t)7;
            if (k && used + len > BUF) break;
            next_queued(c);
            if (len > BUF) {
                /* a block larger than the buffer is read on its own, in pieces */
                size_t saved = c->self;
                c->self = i;
                scan_range(c, c->s->rec[i].addr, c->s->rec[i].addr + len, &c->r->block_bytes);
                c->self = saved;
                start = c->head;
                continue;
            }
            local[k] = (struct iovec){c->buf + used, len};
            remote[k] = (struct iovec){(void *)c->s->rec[i].addr, len};
            idx[k++] = i;
            used += len;
        }
        size_t got = 0;
        if (k && !c->direct) {
            ssize_t n = process_vm_readv(c->pid, local, k, remote, k, 0);
            if (n < 0 && (errno == ENOSYS || errno == EPERM))
                c->direct = 1;
            else
                got = n > 0 ? (size_t)n : 0;
        }
        for (size_t j = 0; c->direct && j < k; got += remote[j].iov_len, j++) {
            if (!readable(c, (uintptr_t)remote[j].iov_base, remote[j].iov_len)) break;
            memcpy(local[j].iov_base, remote[j].iov_base, remote[j].iov_len);
        }
        /* The call stops at the first block it cannot read: the ones after it go back (with
         * paths, the queue is read again from there, so that it keeps its order). */
        size_t at = 0, j = 0;
        for (; j < k && at + local[j].iov_len <= got; at += local[j++].iov_len) {
            c->self = idx[j];
            /* A block may be one of the VM's carriers: an allocator's first one comes from
             * malloc (sys_alloc), and is read as a block, with the rules of a mapped one. */
            read_block(c, local[j].iov_base, local[j].iov_len, (uintptr_t)remote[j].iov_base);
            c->r->block_bytes += local[j].iov_len;
        }
        c->self = MT_SNAPSHOT_NONE;
        if (j < k) {
            c->r->unreadable_bytes += local[j].iov_len;
            if (c->parent)
                c->head = start + j + 1;
            else
                for (size_t m = j + 1; m < k; m++)
                    c->work[c->nwork++] = idx[m];
        }
    }
    c->head = c->nwork = 0;
}

/* Whether a is where an arena's first heap starts: its heap_info's arena pointer is ar, just past
 * it (the arena's struct follows). */
static int first_heap(struct ctx *c, uintptr_t a, uintptr_t ar)
{
    uintptr_t info[1];
    return read_mem(c, a, sizeof info, info) == sizeof info && info[0] == ar &&
           (ar - a == 0x20 || ar - a == 0x30);
}

/* A heap of one of glibc's thread arenas at lo, in a mapping that ends at hi: 64 MiB-aligned,
 * starting with a heap_info whose arena pointer is just past it (the arena's first heap), or,
 * with a previous heap on a 64 MiB boundary, points into the arena's first heap; its writable
 * part (heap_info's mprotect_size) ends the mapping, where the rest of its 64 MiB, not writable,
 * starts, unless it spans all 64 MiB. Returns that part's length, 0 when lo starts no heap. Words
 * of the VM's that happen to lie on a 64 MiB boundary rarely pass all of it. */
static uintptr_t arena_heap(struct ctx *c, uintptr_t lo, uintptr_t hi)
{
    uintptr_t info[4];
    if (lo % MT_HEAP_MAX || read_mem(c, lo, sizeof info, info) != sizeof info) return 0;
    uintptr_t ar = info[0], prev = info[1], size = info[2], rw = info[3];
    if (!ar || !size || size > MT_HEAP_MAX) return 0;
    rw = rw > size && rw <= MT_HEAP_MAX ? rw : size;
    if (rw < hi - lo && rw != MT_HEAP_MAX) return 0;
    if (prev ? prev % MT_HEAP_MAX != 0 || !first_heap(c, ar & ~(MT_HEAP_MAX - 1), ar)
             : ar - lo != 0x20 && ar - lo != 0x30)
        return 0;
    return rw < hi - lo ? rw : hi - lo;
}

/* An anonymous mapping read as roots from `from`, less the arena heaps inside it: the kernel
 * merges a heap's writable part with an anonymous mapping just below it made with the same flags
 * (the VM's carriers are), so a heap need not start its mapping. A heap's chunks are blocks or
 * free memory, never roots. */
static void scan_minus_heaps(struct ctx *c, uintptr_t lo, uintptr_t from, uintptr_t hi)
{
    for (uintptr_t a = (lo + MT_HEAP_MAX - 1) & ~(MT_HEAP_MAX - 1); a >= lo && a < hi;
         a += MT_HEAP_MAX) {
        uintptr_t held = arena_heap(c, a, hi);
        if (!held) continue;
        if (from < a) scan_minus_own(c, from, a);
        if (from < a + held) from = a + held;
    }
    if (from < hi) scan_minus_own(c, from, hi);
}

/* Swap in use (or a status that cannot be read): a page out of memory then reads as not
 * resident, but is not zeros. */
static int swap_in_use(void)
{
    char text[4096];
    const char *v = mt_proc_field("/proc/self/status", "VmSwap:", text, sizeof text);
    return !v || *v != '0';
}

static int named(const char *p, size_t len, const char *name)
{
    return strlen(name) == len && memcmp(p, name, len) == 0;
}

/* Whether the mapping [lo, hi) may hold the asker's own copies of the address asked about: the
 * asking thread's stack, or anonymous memory that is no other thread's stack and no object's data
 * (the VM's, where the asking process keeps the address as an integer). */
static int hides(const struct ctx *c, uintptr_t lo, uintptr_t hi, int of_file)
{
    if (c->self_sp >= lo && c->self_sp < hi) return 1;
    for (size_t i = 0; i < c->world->n; i++)
        if (mt_stacks_thread_live(&c->world->t[i], lo, hi, c->stacks.beam)) return 0;
    return !of_file && !in_segment(lo, hi);
}

static void scan_roots(struct ctx *c, uintptr_t own_lo, uintptr_t own_hi)
{
    struct mt_mapping m;
    c->stacks = (struct mt_stacks){
        .world = c->world, .maps = &c->maps, .self_sp = c->self_sp, .beam = c->gaps.processes != 0};
    mt_stacks_learn(&c->stacks, own_hi);
    for (size_t at = 0; mt_maps_next(&c->maps, &at, &m);) {
        if (!m.readable || !m.writable) continue;
        uintptr_t lo = m.lo, hi = m.hi;
        const char *q = m.path;
        size_t plen = m.path_len;
        /* the exiting thread's own frames are dead, but for what lies above the main thread's
         * first frame: argv, the environment and the auxiliary vector, which a program may
         * still point into (setproctitle's copies of argv are kept there) */
        if (own_hi && lo < own_hi && hi > own_lo) {
            uintptr_t top = (uintptr_t)__libc_stack_end;
            if (top > lo && top < hi) scan_minus_own(c, top, hi);
            continue;
        }
        /* devices are not memory to read */
        if (named(q, plen, "[heap]") || named(q, plen, "[vvar]") || named(q, plen, "[vdso]") ||
            named(q, plen, "[vsyscall]") ||
            (plen > 5 && memcmp(q, "/dev/", 5) == 0 && !named(q, plen, "/dev/zero (deleted)") &&
             memcmp(q, "/dev/shm/", plen < 9 ? plen : 9) != 0))
            continue;
        c->hiding = c->hide && hides(c, lo, hi, plen != 0);
        uintptr_t from = mt_stacks_live_from(&c->stacks, lo, hi);
        c->vm = from == lo && !plen;
        uintptr_t pd;
        int joined = 0;
        if (c->vm && mt_stacks_exited(&c->stacks, lo, hi, &pd, &joined)) {
            uintptr_t dtv = pd + sizeof(uintptr_t);
            note_unread(c, MT_RULE_EXITED_STACKS, from, joined ? dtv : pd);
            if (!joined) {
                scan_minus_own(c, pd, hi);
                continue;
            }
            scan_minus_own(c, dtv, dtv + sizeof(uintptr_t));
            note_unread(c, MT_RULE_EXITED_STACKS, dtv + sizeof(uintptr_t), hi);
            continue;
        }
        if (plen)
            scan_minus_own(c, from, hi);
        else
            scan_minus_heaps(c, lo, from, hi);
    }
    c->vm = 0;
    c->hiding = 0;
}

/* A block of glibc's that holds blocks the VM served (mt_record.vm) is a carrier the VM took
 * from malloc (sys_alloc): it is the VM's memory, reachable, and read as a root, less those
 * blocks. */
static void carriers_from_malloc(struct ctx *c)
{
    for (size_t i = 0; c->nvm && i + 1 < c->s->heap; i++) {
        const struct mt_record *b = &c->s->rec[i], *next = b + 1;
        if (b->vm || !next->vm || next->addr >= b->addr + b->size) continue;
        c->st[i] = MT_REACH_REACHABLE;
        if (c->parent) {
            c->parent[i] = MT_REACH_MEMORY;
            c->via[i] = b->addr;
        }
        scan_range(c, b->addr, b->addr + b->size, &c->r->root_bytes);
    }
}

/* here: the calling thread's registers (NULL at exit), its index in r->thread after the others. */
static void mark_from_roots(struct ctx *c, uintptr_t own_lo, uintptr_t own_hi,
                            const uintptr_t *here)
{
    c->from = c->from2 = UNSEEN;
    c->target = MT_REACH_REACHABLE;
    c->push = 1;
    c->root = MT_REACH_MEMORY;
    c->noting = 1;
    /* before any word is read: a thread's stack may point to its own alternate signal stack
     * (the BEAM's threads do), and a block marked so would be read */
    for (size_t i = 0; i < c->world->n; i++)
        if (c->world->t[i].tid > 0 && c->world->t[i].stopped) keep(c, c->world->t[i].altstack, i);
    stack_t alt;
    if (sigaltstack(NULL, &alt) == 0 && !(alt.ss_flags & SS_DISABLE))
        keep(c, (uintptr_t)alt.ss_sp, c->world->n);
    keep_jit(c);
    carriers_from_malloc(c);
    scan_roots(c, own_lo, own_hi);
    for (size_t i = 0; i < c->world->n; i++)
        if (c->world->t[i].tid > 0 && c->world->t[i].stopped) scan_regs(c, c->world->t[i].regs, i);
    c->hiding = c->hide != 0;
    if (here) scan_regs(c, here, c->world->n);
    c->hiding = 0;
    drain(c);
    c->noting = 0;
}

/* Block i becomes `becomes` and is queued to be read; a direct lost block starts its chain. */
static void queue(struct ctx *c, size_t i, uint8_t becomes)
{
    c->st[i] = becomes;
    c->work[c->nwork++] = i;
    if (c->parent && becomes == MT_REACH_DIRECT) c->parent[i] = MT_REACH_LOST;
}

/* Every block in state `state` becomes `becomes` and is queued to be read. */
static void queue_all(struct ctx *c, uint8_t state, uint8_t becomes)
{
    for (size_t i = 0; i < c->s->heap; i++)
        if (c->st[i] == state) queue(c, i, becomes);
}

/* A lost block that a discounted word of reachable memory points into may be referenced after
 * all, and so may every lost block it reaches: those get its rule, each through the first word
 * that points into it. */
static void spread_possible(struct ctx *c)
{
    const struct mt_snapshot *s = c->s;
    size_t n = 0;
    for (size_t i = 0; i < s->heap; i++)
        if (c->r->rule[i] && (c->st[i] == MT_REACH_DIRECT || c->st[i] == MT_REACH_INDIRECT))
            c->work[n++] = i;
    while (n) {
        size_t i = c->work[--n];
        uintptr_t a = s->rec[i].addr, end = a + (s->rec[i].size & ~(uint64_t)7);
        while (a < end) {
            size_t len = end - a < SCRATCH ? end - a : SCRATCH,
                   got = read_mem(c, a, len, c->scratch);
            for (size_t k = 0; k < got / sizeof(uintptr_t); k++) {
                size_t j = mt_snapshot_find(s, c->scratch[k]);
                if (j == MT_SNAPSHOT_NONE || c->r->rule[j] ||
                    (c->st[j] != MT_REACH_DIRECT && c->st[j] != MT_REACH_INDIRECT))
                    continue;
                c->r->rule[j] = c->r->rule[i];
                c->r->rule_at[j] = a + k * sizeof(uintptr_t);
                c->work[n++] = j;
            }
            if (got < len) break;
            a += len;
        }
    }
}

/* Lost blocks: direct when no other lost block points to them, indirect otherwise; cycles of
 * lost blocks that nothing else points to get their lowest block called direct. Each step queues
 * all its blocks at once, so that they are read in batches. */
static void classify_lost(struct ctx *c)
{
    const struct mt_snapshot *s = c->s;
    c->from = LOST;
    c->from2 = POINTED;
    c->target = POINTED;
    c->push = 0;
    queue_all(c, UNSEEN, LOST);
    drain(c);
    c->from = c->from2 = POINTED;
    c->target = MT_REACH_INDIRECT;
    c->push = 1;
    queue_all(c, LOST, MT_REACH_DIRECT);
    drain(c);
    for (size_t i = 0; i < s->heap; i++)
        if (c->st[i] == POINTED) {
            queue(c, i, MT_REACH_DIRECT);
            drain(c);
        }
}

static void own_stack(uintptr_t sp, uintptr_t *lo, uintptr_t *hi, struct ctx *c)
{
    struct mt_mapping m;
    int found = mt_maps_find(&c->maps, sp, &m);
    *lo = found ? m.lo : 0;
    *hi = found ? m.hi : 0;
}

/* Stops the world with glibc's arena locks free and its structures whole: a thread stopped
 * inside malloc may have left them half written, and is let go on for a moment (at most
 * WALK_TRIES times while an arena is locked or a free of an mmapped chunk is half done; half as
 * many while a structure does not validate, which a walk refused for good also costs). The pauses
 * grow, so that a lock holder waiting for a core on a loaded machine gets one: a few short tries
 * still leave a busy BEAM's walk refused. */
static int stop_and_walk(struct ctx *c, struct mt_world *world, struct mt_heap *heap, int walk)
{
    for (int tries = 0;; tries++) {
        if (mt_world_stop(world) != 0) return -1;
        if (!walk) return 0;
        if (mt_maps_read(&c->maps) != 0) return 0;
        if (mt_heap_walk(heap, &c->maps, world, (uintptr_t)__builtin_frame_address(0)) == 0) {
            c->r->heap_walked = 1;
            return 0;
        }
        /* A thread stopped inside malloc may hold an arena's lock, or inside free between its
         * count of an mmapped chunk and its munmap (EAGAIN both), or have left a structure half
         * made outside a lock (an arena being linked into the ring): all pass. */
        if (tries == (errno == EAGAIN ? WALK_TRIES : WALK_TRIES / 2)) {
            c->r->heap_refused = heap->refused ? heap->refused : "glibc's arenas stayed locked";
            return 0;
        }
        mt_maps_drop(&c->maps);
        mt_world_resume(world);
        /* 1 ms, then longer: a lock holder may be waiting for a core */
        struct timespec pause = {0, 1000000L * (tries < 10 ? 1 : tries < 30 ? 4 : 10)};
        nanosleep(&pause, NULL);
    }
}

/* Stops the other threads with the table held (when this copy records) and, with walk, glibc's
 * heap walked (prepared by the caller). Returns 0, or -1 with errno with nothing held. */
static int stop(struct ctx *c, struct mt_world *world, struct mt_heap *heap, int walk)
{
    c->table = mt_active();
    if (c->table) mt_table_hold();
    if (stop_and_walk(c, world, heap, walk) == 0) return 0;
    int e = errno;
    mt_maps_drop(&c->maps);
    if (c->table) mt_table_release();
    errno = e;
    return -1;
}

/* The records, joined to the walk when there was one. Returns 0, or -1 with errno. */
static int take(struct ctx *c, const struct mt_heap *heap)
{
    struct mt_reach *r = c->r;
    if (mt_snapshot_take(&r->snap, MT_SNAPSHOT_BY_ADDRESS) != 0) return -1;
    if (!r->heap_walked) return 0;
    r->mmapped_missing = heap->mmapped_missing;
    r->bad_chunks = heap->bad;
    return mt_snapshot_join_heap(&r->snap, heap, r->missed, MT_REACH_MISSED, &r->missed_frees,
                                 &r->unrecorded);
}

/* Lets the threads go on, and says for how long they were stopped. */
static void go_on(struct ctx *c, struct mt_world *world)
{
    c->r->threads = world->stopped + world->running;
    c->r->stopped = world->stopped;
    c->r->pause_ns = mt_world_resume(world);
    if (c->table) mt_table_release();
    mt_maps_drop(&c->maps);
}

/* The threads as the paths name them: the stopped ones in the world's order, then the caller
 * (here: its registers). */
static void note_threads(struct ctx *c, struct mt_reach_thread *to, const uintptr_t *here)
{
    for (size_t i = 0; i <= c->world->n; i++) {
        struct mt_reach_thread *t = &to[i];
        struct mt_mapping m;
        if (i < c->world->n) {
            t->tid = c->world->t[i].stopped ? c->world->t[i].tid : 0;
            t->sp = c->world->t[i].sp;
            t->tp = c->world->t[i].tp;
            /* one that runs the JIT's code: its stack is its thread pointer's, live from there */
            uintptr_t from;
            if (mt_maps_find(&c->maps, t->tp, &m) && (t->sp < m.lo || t->sp >= m.hi) &&
                (from =
                     mt_stacks_thread_live(&c->world->t[i], m.lo, m.hi, c->gaps.processes != 0))) {
                t->sp = from;
                t->lo = m.lo;
                t->hi = m.hi;
                continue;
            }
        } else {
            t->tid = (pid_t)syscall(SYS_gettid);
            t->sp = c->self_sp;
            t->tp = (uintptr_t)pthread_self();
        }
        int found = mt_maps_find(&c->maps, t->sp, &m);
        t->lo = found ? m.lo : 0;
        t->hi = found ? m.hi : 0;
        /* its frames, read in place: only in a mapping that can be read */
        const uintptr_t *regs = i < c->world->n ? c->world->t[i].regs : here;
        if (t->tid && found && m.readable && regs[MT_WORLD_RSP] >= m.lo &&
            regs[MT_WORLD_RSP] < m.hi)
            t->frames = mt_cfi_frames(regs[MT_WORLD_RIP], regs[MT_WORLD_RSP], regs[MT_WORLD_RBP],
                                      t->hi, t->ip, t->top, MT_REACH_FRAMES);
    }
}

static int run(struct mt_reach *r, int at_exit, int walk_heap, int paths, uintptr_t hide)
{
    *r = (struct mt_reach){0};
    mt_guard_hold();
    /* Callee-saved registers of this thread's callers, spilled where the stack scan sees them. */
    ucontext_t here;
    getcontext(&here);
    uintptr_t regs[MT_WORLD_REGS];
    mt_world_regs(&here, regs);
    struct mt_world world;
    struct mt_heap heap = {0};
    int rc = -1, e = ENOMEM;
    int walk = walk_heap && mt_heap_prepare(&heap) == 0;
    if (walk_heap && !walk) r->heap_refused = heap.refused;
    mt_beam_alloc_learn();
    mt_beam_vm_learn();
    struct ctx c = {.r = r,
                    .s = &r->snap,
                    .pid = getpid(),
                    .world = &world,
                    .self = MT_SNAPSHOT_NONE,
                    .hide = hide,
                    .jit = mt_layout_jit_descriptor(),
                    .otp = mt_beam_vm_otp()};
    c.nstrings = mt_layout_strings(c.strings, MT_LAYOUT_STRINGS);
    dl_iterate_phdr(note_libc, &c);
    if (stop(&c, &world, &heap, walk) != 0) {
        e = errno;
        mt_guard_release();
        errno = e;
        return -1;
    }
    if (take(&c, &heap) != 0) goto out;
    if (mt_beam_heaps_gaps(&c.gaps) == 0) {
        r->processes = c.gaps.processes;
        r->processes_read_whole = c.gaps.left;
    }
    /* a thread that did not stop may be taking a block off a list */
    if (!world.running) mt_beam_alloc_gaps(&c.gaps);
    mt_beam_regs_gaps(&c.gaps, &world);
    mt_beam_gaps_sort(&c.gaps);
    size_t n = r->snap.n ? r->snap.n : 1, threads = world.n + 1;
    c.nvm_stacks = mt_stack_count() + 1;
    r->map_len = BUF + SCRATCH + n * (sizeof(size_t) + sizeof(uintptr_t) + 3) + c.nvm_stacks + 64;
    if (paths) r->map_len += n * (sizeof *r->parent + sizeof *r->via) + threads * sizeof *r->thread;
    if (!(r->map = mt_mem_map(r->map_len))) goto out;
    c.buf = r->map;
    c.scratch = (uintptr_t *)((char *)r->map + BUF);
    c.work = (size_t *)((char *)c.scratch + SCRATCH);
    r->rule_at = (uintptr_t *)(c.work + n);
    uint8_t *bytes;
    if (paths) {
        c.parent = r->parent = (size_t *)(r->rule_at + n);
        c.via = r->via = (uintptr_t *)(r->parent + n);
        r->thread = (struct mt_reach_thread *)(r->via + n);
        bytes = (uint8_t *)(r->thread + threads);
    } else {
        bytes = (uint8_t *)(r->rule_at + n);
    }
    r->state = bytes;
    r->rule = bytes + n;
    c.binary = bytes + 2 * n;
    c.vm_stacks = bytes + 3 * n;
    c.st = r->state;
    for (size_t i = r->snap.heap; i < r->snap.n; i++)
        r->state[i] = MT_REACH_TRACKED;
    for (size_t i = 0; i < r->snap.heap; i++) {
        if (r->snap.rec[i].lost) r->state[i] = STICKY;
        c.nvm += r->snap.rec[i].vm;
    }
    c.mincore = !swap_in_use();
    if (!c.maps.text && mt_maps_read(&c.maps) != 0) goto out;
    uintptr_t own_lo = 0, own_hi = 0;
    if (at_exit)
        own_stack((uintptr_t)__builtin_frame_address(0), &own_lo, &own_hi, &c);
    else
        c.self_sp = (uintptr_t)__builtin_frame_address(0);
    mark_from_roots(&c, own_lo, own_hi, at_exit ? NULL : regs);
    if (paths) {
        note_threads(&c, r->thread, regs);
        r->threads_noted = threads;
        /* the lost ones are classified breadth first too, each noting its parent */
        c.nwork = c.head = 0;
    }
    for (size_t i = 0; i < r->snap.heap; i++)
        if (r->state[i] == STICKY) r->state[i] = UNSEEN;
    classify_lost(&c);
    spread_possible(&c);
    rc = 0;
out:
    if (rc != 0) e = errno ? errno : ENOMEM;
    go_on(&c, &world);
    mt_beam_heaps_drop(&c.gaps);
    mt_heap_drop(&heap);
    if (rc != 0) mt_reach_drop(r);
    mt_guard_release();
    if (rc != 0) errno = e;
    return rc;
}

int mt_reach_run(struct mt_reach *r, int at_exit, int walk_heap)
{
    return run(r, at_exit, walk_heap, 0, 0);
}

static int run_paths(struct mt_reach *r, int at_exit, int walk_heap, uintptr_t masked)
{
    pthread_mutex_lock(&paths_lock);
    nsegments = 0;
    dl_iterate_phdr(note_segments, NULL);
    int rc = run(r, at_exit, walk_heap, 1, masked ? masked ^ MT_REACH_MASK ^ HIDE_MASK : 0);
    pthread_mutex_unlock(&paths_lock);
    return rc;
}

int mt_reach_paths(struct mt_reach *r, uintptr_t masked)
{
    return run_paths(r, 0, 1, masked);
}

int mt_reach_run_paths(struct mt_reach *r, int at_exit, int walk_heap)
{
    return run_paths(r, at_exit, walk_heap, 0);
}

int mt_reach_heap(struct mt_reach *r, struct mt_heap *heap)
{
    *r = (struct mt_reach){0};
    if (mt_heap_prepare(heap) != 0) {
        r->heap_refused = heap->refused;
        return 0;
    }
    mt_guard_hold();
    struct mt_world world;
    struct ctx c = {.r = r, .s = &r->snap, .pid = getpid(), .world = &world};
    if (stop(&c, &world, heap, 1) != 0) {
        int e = errno;
        mt_guard_release();
        errno = e;
        return -1;
    }
    int rc = r->heap_walked ? take(&c, heap) : 0, e = errno;
    go_on(&c, &world);
    if (rc != 0 || !r->heap_walked) {
        mt_reach_drop(r);
        mt_heap_drop(heap);
    }
    mt_guard_release();
    if (rc != 0) errno = e ? e : ENOMEM;
    return rc;
}

void mt_reach_drop(struct mt_reach *r)
{
    mt_snapshot_drop(&r->snap);
    if (r->map) mt_mem_unmap(r->map, r->map_len);
    r->map = NULL;
    r->state = NULL;
}
