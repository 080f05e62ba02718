/* lost.c: a test NIF whose blocks are lost, or kept, in the ways a program keeps or loses them,
 * for the tests of Mtrace.leaks/1. Each block is written over (no stale pointer in it) and made
 * by a named function, so that its site is known. Built -O0, without inlining or sibling calls.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <erl_nif.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define NAMED __attribute__((noinline))

struct node {
    struct node *left, *right;
    char pad[48];
};

static void *kept_static[64];
static struct node *kept_tree;
static __thread void *kept_tls;
static ErlNifResourceType *buffer_type, *leaky_type;

struct buffer {
    void *data;
};

static ERL_NIF_TERM ok(ErlNifEnv *env)
{
    return enif_make_atom(env, "ok");
}

/* Runs work(arg) 256 KiB below the caller's frame, then clears the registers a call may leave
 * anything in. A conservative mark reads a stack from its stack pointer up, and a scheduler that
 * waits after a NIF call waits deeper than the call itself went: the words its frames leave
 * unwritten would still hold the lost addresses. Far below, they stay in the dead part. And the
 * VM may save a register the NIF returned with (memset's destination, say) where it keeps its
 * own. */
NAMED static void deep(void (*work)(void *), void *arg, int depth)
{
    char frame[4096];
    __asm__ volatile("" : : "r"(frame) : "memory"); /* the frame is kept, and kept this size */
    if (depth > 0)
        deep(work, arg, depth - 1);
    else
        work(arg);
    __asm__ volatile("xor %%eax, %%eax\n\txor %%ecx, %%ecx\n\txor %%edx, %%edx\n\t"
                     "xor %%esi, %%esi\n\txor %%edi, %%edi\n\txor %%r8d, %%r8d\n\t"
                     "xor %%r9d, %%r9d\n\txor %%r10d, %%r10d\n\txor %%r11d, %%r11d"
                     :
                     :
                     : "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11");
}

#define DEPTH 64

NAMED static struct node *lost_node(void)
{
    struct node *n = malloc(sizeof *n);
    memset(n, 0, sizeof *n);
    return n;
}

static void make_list(void *arg)
{
    struct node *head = NULL;
    for (unsigned i = 0; i < *(unsigned *)arg; i++) {
        struct node *x = lost_node();
        x->left = head;
        head = x;
    }
}

/* lose_list(n): a list of n nodes whose head nothing keeps: 1 direct, n - 1 indirect. */
static ERL_NIF_TERM lose_list(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned n;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &n)) return enif_make_badarg(env);
    deep(make_list, &n, DEPTH);
    return ok(env);
}

/* The lost blocks' addresses go back to Erlang xor'ed with this, so that no Erlang term points to
 * them. */
#define MASK 0x5a5a5a5a5a5a5a5aULL

struct masked {
    unsigned n, size;
    int raw;
    uint64_t *out;
};

NAMED static void *masked_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

/* A block left as malloc handed it out, as new char[n] leaves it: whatever its chunk held. */
NAMED static void *raw_block(size_t size)
{
    return malloc(size);
}

static void make_masked(void *arg)
{
    struct masked *m = arg;
    for (unsigned i = 0; i < m->n; i++)
        m->out[i] =
            (uint64_t)(uintptr_t)(m->raw ? raw_block(m->size) : masked_block(m->size)) ^ MASK;
}

/* lose_masked(n, size): n blocks that nothing keeps, as a list of their addresses xor MASK;
 * lose_raw(n, size): the same, left unwritten. */
static ERL_NIF_TERM lose(ErlNifEnv *env, const ERL_NIF_TERM argv[], int raw)
{
    struct masked m = {.raw = raw};
    if (!enif_get_uint(env, argv[0], &m.n) || !enif_get_uint(env, argv[1], &m.size) || m.n > 4096)
        return enif_make_badarg(env);
    uint64_t out[4096];
    m.out = out;
    deep(make_masked, &m, DEPTH);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (unsigned i = 0; i < m.n; i++)
        list = enif_make_list_cell(env, enif_make_uint64(env, out[i]), list);
    memset(out, 0, sizeof out);
    return list;
}

static ERL_NIF_TERM lose_masked(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose(env, argv, 0);
}

static ERL_NIF_TERM lose_raw(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose(env, argv, 1);
}

/* lose_in_vm_free(size): a block of size bytes whose address only a block of the VM's own
 * allocators held (enif_alloc's, of driver_alloc where the VM keeps it), freed since: the word
 * lies in a free block of one of the VM's carriers. Copies fill the second half of a 16 KiB
 * block, which the VM's own next allocations, carved from the free block's start, leave alone.
 * Returns the lost block's address xor MASK. */
struct in_vm {
    unsigned size;
    uint64_t masked;
};

static void make_in_vm(void *arg)
{
    struct in_vm *v = arg;
    void *p = masked_block(v->size), **q = enif_alloc(16384);
    for (size_t i = 1024; q && i < 2048; i++)
        q[i] = p;
    enif_free(q);
    v->masked = (uint64_t)(uintptr_t)p ^ MASK;
}

/* A block of argv[0] bytes made by make deep down the stack; its address xor MASK. */
static ERL_NIF_TERM lose_by(ErlNifEnv *env, const ERL_NIF_TERM argv[], void (*make)(void *))
{
    struct in_vm v = {0, 0};
    if (!enif_get_uint(env, argv[0], &v.size)) return enif_make_badarg(env);
    deep(make, &v, DEPTH);
    return v.masked ? enif_make_uint64(env, v.masked) : enif_make_badarg(env);
}

static ERL_NIF_TERM lose_in_vm_free(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_vm);
}

/* lose_in_vm_carrier(size): a block of size bytes whose address only the free block of a
 * carrier made by hand holds, laid out as the VM's multi-block carriers are (layouts.h) but on a
 * 128 KiB boundary that is not a 256 KiB one, as some of the VM's own are: {size, next, prev,
 * allocator}, a 64-byte block, an 8 KiB free block full of pointers inside the lost block (a word
 * equal to its address would not count for why/2), and the last block to the carrier's end. Returns
 * the address xor MASK. */
#define VM_CARRIER ((size_t)64 << 10)
static const char vm_carrier_name[] = "test_";
static const char *const vm_carrier_allocator[] = {vm_carrier_name};

static void make_in_vm_carrier(void *arg)
{
    struct in_vm *v = arg;
    const size_t align = (size_t)256 << 10, words = VM_CARRIER / sizeof(uintptr_t);
    char *m = mmap(NULL, 2 * align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    uintptr_t *w = (uintptr_t *)(((uintptr_t)m + align - 1) / align * align + align / 2);
    uintptr_t p = (uintptr_t)masked_block(v->size);
    const size_t free_at = 16, free_words = 1024, last_at = free_at + free_words;
    w[0] = VM_CARRIER;
    w[3] = (uintptr_t)vm_carrier_allocator;
    w[8] = 64;
    w[free_at] = free_words * sizeof *w | 1;
    w[free_at + 1] = (uintptr_t)w;
    for (size_t i = free_at + 2; i < last_at - 1; i++)
        w[i] = p + 16;
    w[last_at - 1] = free_words * sizeof *w;
    w[last_at] = (words - last_at) * sizeof *w | 2 | 4;
    v->masked = (uint64_t)p ^ MASK;
}

/* lose_in_released_carrier(size): single-block carriers made by hand, laid out as the VM's
 * (layouts.h), each 64 KiB, and three allocators, whose list heads (words 44 and 45) name their
 * first and last. The first allocator holds one carrier, alone on its list, full of pointers
 * inside a block that only it keeps, and has let go of two: one whose stale link names the held
 * one as its previous carrier (whose next is not it), and one that was alone on the list (no
 * links; the head names the held one), each full of pointers inside a lost block. The second
 * holds a carrier whose next is an address no longer mapped (its last, as the head says), and a
 * carrier being moved by a stopped thread: its previous carrier is that one, which does not name
 * it yet, full of pointers inside a block that only it keeps. The third holds none (its list is
 * empty) and has let go of one that was alone on it, full of pointers inside a lost block.
 * Returns {lost, lost_alone, lost_empty, kept, kept_moving}, each the address xor MASK. */
struct in_released {
    unsigned size;
    uint64_t lost, lost_alone, lost_empty, kept, kept_moving;
};

#define RELEASED_ALLOCTRS 16
static uintptr_t released_allctr[RELEASED_ALLOCTRS][64];
static unsigned released_used;

static void fill_carrier(uintptr_t *w, uintptr_t next, uintptr_t prev, const uintptr_t *allctr,
                         uintptr_t inside)
{
    const size_t words = VM_CARRIER / sizeof(uintptr_t);
    w[0] = VM_CARRIER | 3;
    w[1] = next;
    w[2] = prev;
    w[3] = (uintptr_t)allctr;
    for (size_t i = 8; i < words; i++)
        w[i] = inside + 16;
}

static void make_in_released_carrier(void *arg)
{
    struct in_released *v = arg;
    unsigned a = __atomic_fetch_add(&released_used, 3, __ATOMIC_RELAXED);
    if (a + 3 > RELEASED_ALLOCTRS) return;
    char *m =
        mmap(NULL, 7 * VM_CARRIER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    uintptr_t held = (uintptr_t)m, released = held + VM_CARRIER, alone = released + VM_CARRIER;
    uintptr_t last = alone + VM_CARRIER, moving = last + VM_CARRIER, empty = moving + VM_CARRIER;
    uintptr_t gone = empty + VM_CARRIER;
    munmap((void *)gone, VM_CARRIER);
    uintptr_t *one = released_allctr[a], *two = released_allctr[a + 1];
    uintptr_t *three = released_allctr[a + 2];
    uintptr_t kept = (uintptr_t)masked_block(v->size), lost = (uintptr_t)masked_block(v->size);
    uintptr_t lost_alone = (uintptr_t)masked_block(v->size);
    uintptr_t kept_moving = (uintptr_t)masked_block(v->size);
    uintptr_t lost_empty = (uintptr_t)masked_block(v->size);
    one[0] = two[0] = three[0] = (uintptr_t)vm_carrier_name;
    one[44] = one[45] = held;
    two[44] = last;
    two[45] = gone;
    fill_carrier((uintptr_t *)held, 0, 0, one, kept);
    fill_carrier((uintptr_t *)released, 0, held, one, lost);
    fill_carrier((uintptr_t *)alone, 0, 0, one, lost_alone);
    fill_carrier((uintptr_t *)last, gone, 0, two, kept);
    fill_carrier((uintptr_t *)moving, 0, last, two, kept_moving);
    fill_carrier((uintptr_t *)empty, 0, 0, three, lost_empty);
    v->kept = (uint64_t)kept ^ MASK;
    v->lost = (uint64_t)lost ^ MASK;
    v->lost_alone = (uint64_t)lost_alone ^ MASK;
    v->lost_empty = (uint64_t)lost_empty ^ MASK;
    v->kept_moving = (uint64_t)kept_moving ^ MASK;
}

static ERL_NIF_TERM lose_in_released_carrier(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_released v = {0, 0, 0, 0, 0, 0};
    (void)argc;
    if (!enif_get_uint(env, argv[0], &v.size)) return enif_make_badarg(env);
    deep(make_in_released_carrier, &v, DEPTH);
    if (!v.lost) return enif_make_badarg(env);
    ERL_NIF_TERM t[5] = {enif_make_uint64(env, v.lost), enif_make_uint64(env, v.lost_alone),
                         enif_make_uint64(env, v.lost_empty), enif_make_uint64(env, v.kept),
                         enif_make_uint64(env, v.kept_moving)};
    return enif_make_tuple_from_array(env, t, 5);
}

/* lose_in_terms_carrier(size): three blocks of size bytes, and two multi-block carriers made by
 * hand, laid out as the VM's (layouts.h), each 64 KiB. The first is the allocator of Erlang terms'
 * ("eheap_"): past its header, words inside the first block with their low bits tagged as a list,
 * a boxed term or an immediate (1, 2, 3), and one aligned word inside the second. The second,
 * another allocator's, holds tagged words inside the third. Returns {lost, kept, kept_other}, each
 * the address xor MASK. */
struct in_terms {
    unsigned size;
    uint64_t lost, kept, kept_other;
};

static const char terms_carrier_name[] = "eheap_";
static const char *const terms_carrier_allocator[] = {terms_carrier_name};

/* The two carriers' memory: a mapping of their own, or (in_block) malloc blocks that a static
 * keeps, as an allocator keeps its first carrier, which the VM takes from malloc (sys_alloc). */
static void *terms_blocks[32];
static unsigned terms_blocks_n;

static void make_terms_carriers(struct in_terms *v, int in_block)
{
    const size_t words = VM_CARRIER / sizeof(uintptr_t);
    uintptr_t *terms, *other;
    if (in_block) {
        if (terms_blocks_n + 2 > 32 ||
            posix_memalign(&terms_blocks[terms_blocks_n], 4096, VM_CARRIER) != 0 ||
            posix_memalign(&terms_blocks[terms_blocks_n + 1], 4096, VM_CARRIER) != 0)
            return;
        terms = terms_blocks[terms_blocks_n++];
        other = terms_blocks[terms_blocks_n++];
        memset(terms, 0, VM_CARRIER);
        memset(other, 0, VM_CARRIER);
    } else {
        char *m =
            mmap(NULL, 2 * VM_CARRIER, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return;
        terms = (uintptr_t *)m;
        other = (uintptr_t *)(m + VM_CARRIER);
    }
    uintptr_t lost = (uintptr_t)masked_block(v->size), kept = (uintptr_t)masked_block(v->size);
    uintptr_t kept_other = (uintptr_t)masked_block(v->size);
    terms[0] = other[0] = VM_CARRIER;
    terms[3] = (uintptr_t)terms_carrier_allocator;
    other[3] = (uintptr_t)vm_carrier_allocator;
    for (size_t i = 8; i < words; i++) {
        terms[i] = lost + 8 + 1 + i % 3;
        other[i] = kept_other + 8 + 1 + i % 3;
    }
    terms[words / 2] = kept + 8;
    v->lost = (uint64_t)lost ^ MASK;
    v->kept = (uint64_t)kept ^ MASK;
    v->kept_other = (uint64_t)kept_other ^ MASK;
}

static void make_in_terms_carrier(void *arg)
{
    make_terms_carriers(arg, 0);
}

static void make_in_terms_block(void *arg)
{
    make_terms_carriers(arg, 1);
}

/* lose_in_terms_carrier(size), lose_in_terms_block(size): as above, the carriers mapped, or malloc
 * blocks kept in a static. */
static ERL_NIF_TERM lose_terms(ErlNifEnv *env, const ERL_NIF_TERM argv[], void (*make)(void *))
{
    struct in_terms v = {0, 0, 0, 0};
    if (!enif_get_uint(env, argv[0], &v.size)) return enif_make_badarg(env);
    deep(make, &v, DEPTH);
    if (!v.lost) return enif_make_badarg(env);
    return enif_make_tuple3(env, enif_make_uint64(env, v.lost), enif_make_uint64(env, v.kept),
                            enif_make_uint64(env, v.kept_other));
}

static ERL_NIF_TERM lose_in_terms_carrier(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_terms(env, argv, make_in_terms_carrier);
}

static ERL_NIF_TERM lose_in_terms_block(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_terms(env, argv, make_in_terms_block);
}

static ERL_NIF_TERM lose_in_vm_carrier(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_vm_carrier);
}

/* lose_in_merged_heap(size): a block of size bytes whose address only a free chunk of one of
 * glibc's thread arenas holds, in a heap that shares its mapping with memory just below it, as the
 * kernel merges the VM's carriers with a heap above them. glibc packs its heaps, each below the
 * last one's reserved tail: the tail's top page is made writable here (it then has the heap's
 * flags, and is merged with it), or, below the lowest heap, a page mapped. Made in a thread whose
 * arena is not the main one: threads are started until one has such an arena (each waits until
 * all have started, so that each takes another arena). Returns the address xor MASK; badarg when
 * no thread could make such a heap. */
#define MERGED_THREADS 48
struct in_merged {
    unsigned size;
    int taken, go;
    uint64_t masked;
};

/* Where the mapping that holds a starts, from /proc/self/maps; a itself when that is not known. */
static uintptr_t mapping_start(uintptr_t a)
{
    char line[512];
    uintptr_t lo = 0, hi = 0, found = a;
    FILE *f = fopen("/proc/self/maps", "r");
    while (f && found == a && fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && a >= lo && a < hi) found = lo;
    if (f) fclose(f);
    return found;
}

static void merge_below(uintptr_t heap)
{
    const uintptr_t page = 4096;
    if (mprotect((void *)(heap - page), page, PROT_READ | PROT_WRITE) == 0) return;
    void *m = mmap((void *)(heap - page), page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != MAP_FAILED && m != (void *)(heap - page)) munmap(m, page);
}

static void *merged_heap_thread(void *arg)
{
    struct in_merged *v = arg;
    const uintptr_t heap_max = (uintptr_t)64 << 20;
    uintptr_t *q = malloc(64), size = 0;
    /* a chunk of a thread arena says so in its size word (NON_MAIN_ARENA), malloc's own */
    if (q) memcpy(&size, (char *)q - sizeof size, sizeof size);
    uintptr_t heap = (uintptr_t)q & ~(heap_max - 1);
    if (q && (size & 4) && !__atomic_load_n(&v->taken, __ATOMIC_ACQUIRE)) {
        if (mapping_start(heap) == heap) merge_below(heap);
        if (mapping_start(heap) < heap && !__atomic_exchange_n(&v->taken, 1, __ATOMIC_ACQ_REL)) {
            uintptr_t p = (uintptr_t)masked_block(v->size);
            /* inside it: a word equal to its address would not count for why/2 */
            for (size_t i = 2; i < 8; i++)
                q[i] = p + 16;
            __atomic_store_n(&v->masked, (uint64_t)p ^ MASK, __ATOMIC_RELEASE);
        }
    }
    while (!__atomic_load_n(&v->go, __ATOMIC_ACQUIRE))
        usleep(1000);
    free(q);
    return NULL;
}

static ERL_NIF_TERM lose_in_merged_heap(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_merged v = {0, 0, 0, 0};
    pthread_t t[MERGED_THREADS];
    int n = 0;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &v.size)) return enif_make_badarg(env);
    while (n < MERGED_THREADS && !__atomic_load_n(&v.taken, __ATOMIC_ACQUIRE) &&
           pthread_create(&t[n], NULL, merged_heap_thread, &v) == 0)
        n++;
    __atomic_store_n(&v.go, 1, __ATOMIC_RELEASE);
    while (n)
        pthread_join(t[--n], NULL);
    return v.masked ? enif_make_uint64(env, v.masked) : enif_make_badarg(env);
}

/* lose_in_port(size): a block of size bytes whose address only the `reds` word of a port made by
 * hand holds, laid out as the VM's port structs are (layouts.h): an empty I/O queue at offset
 * 288, the name "fd" at the block's end, and the address where the int reds and its padding lie.
 * The port is a block a static keeps. Returns the address xor MASK. */
#define PORTS 16
static uintptr_t *ports[PORTS];
static unsigned ports_used;

static void make_in_port(void *arg)
{
    struct in_vm *v = arg;
    enum { WORDS = 74, IOQ = 36, V = IOQ + 4, B = IOQ + 14, NAME = IOQ + 23, AT = 72 };
    uintptr_t *b = ports_used < PORTS ? calloc(WORDS, sizeof *b) : NULL;
    if (!b) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    b[IOQ] = b[IOQ + 2] = b[IOQ + 3] = (uintptr_t)(b + V);
    b[IOQ + 1] = (uintptr_t)(b + V + 10);
    b[B] = b[B + 2] = b[B + 3] = (uintptr_t)(b + B + 4);
    b[B + 1] = (uintptr_t)(b + B + 9);
    memcpy(b + AT, "fd", 3);
    b[NAME] = (uintptr_t)(b + AT);
    b[NAME + 9] = p;
    ports[ports_used++] = b;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_port(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_port);
}

/* lose_in_heap(size): a block of size bytes whose address only an 8-byte Erlang heap binary made
 * here holds, on the calling process's heap; the binary is not returned, so it is dead at once.
 * Made deep in the stack, as the others are. Returns the address xor MASK. */
struct in_heap {
    ErlNifEnv *env;
    unsigned size;
    uint64_t masked;
};

static void make_in_heap(void *arg)
{
    struct in_heap *v = arg;
    ERL_NIF_TERM bin;
    unsigned char *data = enif_make_new_binary(v->env, sizeof(uintptr_t), &bin);
    uintptr_t p = (uintptr_t)masked_block(v->size);
    memcpy(data, &p, sizeof p);
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_heap(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_heap v = {env, 0, 0};
    (void)argc;
    if (!enif_get_uint(env, argv[0], &v.size)) return enif_make_badarg(env);
    deep(make_in_heap, &v, DEPTH);
    return enif_make_uint64(env, v.masked);
}

/* lose_in_float_regs(size): a block of size bytes whose address only an unused float register of
 * the calling scheduler holds (the 901st), as the frames of the thread's start leave theirs: the
 * JIT calls a NIF with argv at its X registers, and the float registers, 1024 doubles, lie
 * FREGS_AT words above (OTP 25 and 27: beam_regs.h). Returns the address xor MASK; badarg where
 * they would not lie on the thread's stack. */
#define FREGS_AT 1032
#define FREG_USED 900

static ERL_NIF_TERM lose_in_float_regs(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    pthread_attr_t a;
    void *lo;
    size_t len;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || pthread_getattr_np(pthread_self(), &a) != 0)
        return enif_make_badarg(env);
    int got = pthread_attr_getstack(&a, &lo, &len);
    pthread_attr_destroy(&a);
    uintptr_t *f = (uintptr_t *)argv + FREGS_AT;
    if (got != 0 || (uintptr_t)f < (uintptr_t)lo || (uintptr_t)(f + 1024) > (uintptr_t)lo + len)
        return enif_make_badarg(env);
    uintptr_t p = (uintptr_t)masked_block(size);
    f[FREG_USED] = p;
    return enif_make_uint64(env, (uint64_t)p ^ MASK);
}

/* lose_in_text_tail(size): a block of size bytes (512 or more) whose address only the bytes
 * after a C string's NUL hold, in a block that has no record (glibc's own malloc, as libc's and
 * the loader's blocks made before an attach have none), which a static keeps: {0, "UTC\0UTC0",
 * then the string's NUL as the low byte of the first address in the lost block whose low byte is
 * 0}, as libc's time zone strings were found to end. Returns the address xor MASK. */
extern void *__libc_malloc(size_t);
#define TEXT_TAILS 16
static uintptr_t *text_tails[TEXT_TAILS];
static unsigned text_tails_used;

static void make_in_text_tail(void *arg)
{
    struct in_vm *v = arg;
    if (text_tails_used == TEXT_TAILS || v->size < 512) return;
    uintptr_t *t = __libc_malloc(3 * sizeof *t), p = (uintptr_t)masked_block(v->size);
    if (!t) return;
    t[0] = 0;
    memcpy(&t[1], "UTC\0UTC0", sizeof t[1]);
    t[2] = (p + 255) & ~(uintptr_t)255;
    text_tails[text_tails_used++] = t;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_text_tail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_text_tail);
}

/* A block of size bytes (33 MiB or more: glibc maps it, whatever its threshold) whose mapping is
 * moved (mremap, as glibc's realloc moves one) to `past` bytes after a boundary of `align`, in
 * address space reserved for that; it then has no record (its old address, in no chunk, is a free
 * mtrace missed). Returns the block, or NULL. */
static char *block_past(size_t size, uintptr_t align, uintptr_t past)
{
    /* room for a boundary, past, and the mapping: the block, its header and its page's rest */
    const size_t span = align + past + size + (1u << 20);
    char *p = raw_block(size);
    char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (!p || r == MAP_FAILED || !(((size_t *)(void *)p)[-1] & 2)) return NULL;
    /* a mapped chunk's header: its mapping starts prev_size before it, prev_size + size long */
    size_t before = ((size_t *)(void *)p)[-2],
           len = before + (((size_t *)(void *)p)[-1] & ~(size_t)7);
    char *at = (char *)(((uintptr_t)r + align - 1) & ~(align - 1)) + past;
    if (mremap(p - 16 - before, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) != at) return NULL;
    munmap(r, (size_t)(at - r));
    munmap(at + len, (size_t)(r + span - (at + len)));
    return at + before + 16;
}

/* lose_in_counted_text(size): a block of size bytes (33 MiB or more) whose address only a word
 * after a short string holds, in a block that has no record, which a static keeps: libc's time
 * zone name as a node not yet attached to keeps it, {0, 3, "UTC\0" then an old pointer's high
 * half}. Such a word points 0x435455 bytes past a 4 GiB boundary, so the block lies 4 MiB past
 * one (block_past). Returns the address xor MASK. */
static void make_in_counted_text(void *arg)
{
    struct in_vm *v = arg;
    const uintptr_t four = (uintptr_t)1 << 32;
    if (text_tails_used == TEXT_TAILS || v->size < (33u << 20)) return;
    char *p = block_past(v->size, four, 4 << 20);
    uintptr_t *t = __libc_malloc(3 * sizeof *t);
    if (!p || !t) return;
    t[0] = 0;
    t[1] = 3;
    t[2] = ((uintptr_t)p & ~(four - 1)) | 0x00435455;
    text_tails[text_tails_used++] = t;
    v->masked = (uint64_t)(uintptr_t)p ^ MASK;
}

/* keep_by_text_pointer(size): a block of size bytes (33 MiB or more) held only by the first word
 * of a block without a record, which a static keeps: a pointer whose low four bytes are letters
 * and whose fifth is zero, as every pointer into a heap mapped between 0x5600_0000_0000 and
 * 0x5600_ffff_ffff may be; read as bytes, "dcba\0" and the pointer's high byte. The block lies
 * just below 0x61626364 past a 1 TiB boundary (block_past). Returns the address xor MASK. */
static void make_by_text_pointer(void *arg)
{
    struct in_vm *v = arg;
    const uintptr_t tib = (uintptr_t)1 << 40, text = 0x61626364;
    if (text_tails_used == TEXT_TAILS || v->size < (33u << 20)) return;
    char *p = block_past(v->size, tib, (text - (1u << 20)) & ~(uintptr_t)0xFFF);
    uintptr_t *t = __libc_malloc(2 * sizeof *t);
    if (!p || !t) return;
    t[0] = ((uintptr_t)p & ~(tib - 1)) | text;
    t[1] = 0;
    text_tails[text_tails_used++] = t;
    v->masked = (uint64_t)(uintptr_t)p ^ MASK;
}

static ERL_NIF_TERM keep_by_text_pointer(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_by_text_pointer);
}

static ERL_NIF_TERM lose_in_counted_text(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_counted_text);
}

/* lose_in_library_name(path): a block of 64 bytes whose address only the bytes after the name of
 * a library (path, opened here and kept open) hold: the loader keeps that name in a block of its
 * own, made to its length, which in a node without the preload has no record and is read to its
 * usable size; the address is written in its first whole word past the NUL, which must lie
 * inside that size. Returns the address xor MASK. */
static ERL_NIF_TERM lose_in_library_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    char path[4096];
    struct link_map *map;
    (void)argc;
    if (enif_get_string(env, argv[0], path, sizeof path, ERL_NIF_LATIN1) <= 0)
        return enif_make_badarg(env);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0) return enif_make_badarg(env);
    size_t at = (strlen(map->l_name) / 8 + 1) * 8;
    if (at + 8 > malloc_usable_size(map->l_name)) return enif_make_badarg(env);
    uintptr_t p = (uintptr_t)masked_block(64);
    memcpy(map->l_name + at, &p, sizeof p);
    return enif_make_uint64(env, (uint64_t)p ^ MASK);
}

/* free_heap_holds(masked): the first word of the calling process's heap between its top and its
 * stack that equals the address, as {its address, heap top, stack top}, or false: the NIF's env
 * starts its terms there ({mod_nif, proc, hp, hp_end,
 * ...}: OTP's struct enif_environment_t, whose hp and hp_end are the heap top and stack top when
 * the NIF is called). */
static ERL_NIF_TERM free_heap_holds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 masked;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &masked)) return enif_make_badarg(env);
    const uintptr_t *const *e = (const uintptr_t *const *)env;
    uintptr_t want = (uintptr_t)(masked ^ MASK);
    for (const uintptr_t *w = e[2]; w < e[3]; w++)
        if (*w == want)
            return enif_make_tuple3(env, enif_make_uint64(env, (uintptr_t)w),
                                    enif_make_uint64(env, (uintptr_t)e[2]),
                                    enif_make_uint64(env, (uintptr_t)e[3]));
    return enif_make_atom(env, "false");
}

/* lose_in_old_heap(size, block_words, used_words): a block of size bytes whose only pointer (to
 * 16 bytes inside it) lies in the unused part of the calling process's old heap, which the VM
 * never reads: halfway between its top and its end. The old heap is found in the process's
 * struct (the env's second word, OTP's struct enif_environment_t) as three words {start, top,
 * end} that agree with the sizes process_info/2 gave, in words. Returns the address xor MASK,
 * or false when no three words agree or the old heap has no unused word. */
#define PROCESS_WORDS 256
struct in_old_heap {
    const uintptr_t *proc;
    size_t size, block, used;
    uint64_t masked;
};

static void make_in_old_heap(void *arg)
{
    struct in_old_heap *v = arg;
    for (size_t i = 0; i < PROCESS_WORDS; i++) {
        uintptr_t start = v->proc[i], top = start + v->used * 8, end = start + v->block * 8;
        int has_top = 0, has_end = 0;
        if (!start || start & 7 || top + 8 >= end) continue;
        for (size_t j = 0; j < PROCESS_WORDS; j++) {
            has_top |= v->proc[j] == top;
            has_end |= v->proc[j] == end;
        }
        if (!has_top || !has_end) continue;
        uintptr_t p = (uintptr_t)masked_block(v->size);
        ((uintptr_t *)top)[(end - top) / 16] = p + 16;
        v->masked = (uint64_t)p ^ MASK;
        return;
    }
}

static ERL_NIF_TERM lose_in_old_heap(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_old_heap v = {((const uintptr_t *const *)env)[1], 0, 0, 0, 0};
    ErlNifUInt64 size, block, used;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &size) || !enif_get_uint64(env, argv[1], &block) ||
        !enif_get_uint64(env, argv[2], &used))
        return enif_make_badarg(env);
    v.size = size;
    v.block = block;
    v.used = used;
    deep(make_in_old_heap, &v, DEPTH);
    return v.masked ? enif_make_uint64(env, v.masked) : enif_make_atom(env, "false");
}

/* n words of an anonymous mapping, as the VM's carriers are, for terms made by hand; NULL when
 * its page is full. */
static uintptr_t *vm_words(unsigned n)
{
    static uintptr_t *page;
    static unsigned used;
    if (!page) {
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        page = m == MAP_FAILED ? NULL : m;
    }
    if (!page || (used + n) * sizeof(uintptr_t) > 4096) return NULL;
    used += n;
    return page + used - n;
}

/* lose_in_sub_bits(size): a block of size bytes into which only the base of an OTP 27
 * sub-bitstring points (layouts.h), 32 bytes in, past a Binary's header, with a match context's
 * flag, in an anonymous mapping, as a dead one in a process heap was found. Returns the address
 * xor MASK. */
static void make_in_sub_bits(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t *sb = vm_words(5);
    if (!sb) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    sb[0] = 0x124;
    sb[1] = (p + 32) | 1;
    sb[2] = 0;
    sb[3] = 8 * (v->size - 32);
    sb[4] = (uintptr_t)(sb - 2) | 2;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_sub_bits(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_sub_bits);
}

/* lose_in_bin_ref(size): a block of size bytes whose address only the val of an OTP 27 BinRef
 * holds (layouts.h: thing word 0xA8, val, next), in an anonymous mapping, as a dead one in a
 * process heap was found: the block, zeroed, is no live Binary. Returns the address xor MASK. */
static void make_in_bin_ref(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t *br = vm_words(3);
    if (!br) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    br[0] = 0xA8;
    br[1] = p;
    br[2] = 0;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_bin_ref(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_bin_ref);
}

/* A block of size bytes on a 4 GiB boundary, at h << 32, where any two 32-bit numbers (n, h) side
 * by side, n < size, read as a pointer into it. A first one, kept, takes the highest such h
 * below the process's mappings: the high half that stale padding in stacks and the VM's memory
 * holds most often (an int 1 on a scheduler's stack, 2 in an ETS table, kept that block in half
 * the nodes), so that the ones made here show the kind of numbers each test means. */
static void *on_4g(size_t size)
{
    static void *spacer;
    void *p;
    if (!spacer && posix_memalign(&spacer, (size_t)1 << 32, 64) != 0) return NULL;
    return posix_memalign(&p, (size_t)1 << 32, size) == 0 ? p : NULL;
}

/* lose_on_4g(size): a block of size bytes on a 4 GiB boundary (on_4g): the free id lists of the
 * VM's process and port tables hold nearly every pair (n, h) with h below 2^16 (beam_heaps.h).
 * Returns the address xor MASK. */
static void make_on_4g(void *arg)
{
    struct in_vm *v = arg;
    void *p = on_4g(v->size);
    if (p) v->masked = (uint64_t)(uintptr_t)p ^ MASK;
}

static ERL_NIF_TERM lose_on_4g(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_on_4g);
}

/* lose_in_heap_binary(size): a block of size bytes whose address only the last word of an
 * Erlang heap binary holds: the binary's 17 bytes of data end with the address's low byte, and
 * the word's 7 bytes after them, which the VM never writes, hold the rest of it (layouts.h).
 * lose_in_heap_bits(size): the same in an OTP 27 heap bitstring of 80 bits, whose last word holds
 * two bytes of data. Each returns the address xor MASK. */
static void in_heap_term(struct in_vm *v, uintptr_t head, uintptr_t size, const char *text,
                         size_t words)
{
    uintptr_t *b = vm_words(words);
    if (!b) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    b[0] = head;
    b[1] = size;
    memcpy(&b[2], text, 8 * (words - 3));
    b[words - 1] = p;
    v->masked = (uint64_t)p ^ MASK;
}

static void make_in_heap_binary(void *arg)
{
    /* thing word: arity 4, HEAP_BINARY_SUBTAG */
    in_heap_term(arg, 4 << 6 | 0x24, 17, "lib/supervisor.e", 5);
}

static void make_in_heap_bits(void *arg)
{
    /* thing word: arity 3, OTP 27's HEAP_BITS_SUBTAG */
    in_heap_term(arg, 3 << 6 | 0x20, 80, "--no-sta", 4);
}

static ERL_NIF_TERM lose_in_heap_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_heap_binary);
}

static ERL_NIF_TERM lose_in_heap_bits(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_heap_bits);
}

/* lose_in_fun(size): a block of size bytes whose address only the arity word of an Erlang fun of
 * OTP 25 and 26 holds: its two low bytes are the fun's arity and number of free variables, its
 * six others, which the VM never writes, the rest of an address 16 bytes into the block
 * (layouts.h). Returns the block's address xor MASK. */
static uintptr_t fun_entry;

static void make_in_fun(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t *f = vm_words(6);
    if (!f) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    f[0] = 0xD4; /* thing word: arity 3, FUN_SUBTAG */
    f[1] = (uintptr_t)&fun_entry;
    f[2] = 0;                          /* next off-heap item */
    f[3] = p + 16;                     /* arity and free variables, then six unwritten bytes */
    f[4] = (uintptr_t)0x1234 << 4 | 3; /* creator: a local pid */
    f[5] = 0x3B;                       /* a free variable: [] */
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_fun(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_fun);
}

/* lose_in_atom(size): a block of size bytes whose address only the index word of an atom table
 * entry holds (one made by hand, named "application_controller", as the VM lays its atoms out):
 * an atom's index is an int, and the word's four high bytes, which the VM never writes, hold the
 * address's high half (layouts.h). Returns the address xor MASK. */
static const char atom_name[] = "application_controller";

static void make_in_atom(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t *a = vm_words(5);
    if (!a) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    a[0] = 0;                                           /* the next in its hash bucket */
    a[1] = 0x3709b02;                                   /* the atom table's hash of the name */
    a[2] = p + 16;                                      /* the index, then four unwritten bytes */
    a[3] = (uintptr_t)0x30b83836 << 32 | 22 << 16 | 22; /* ord0, latin1 characters, bytes */
    a[4] = (uintptr_t)atom_name;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_atom(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_atom);
}

/* lose_in_rows(size): a block of size bytes (16 MiB or more, never touched) on a 4 GiB boundary
 * (on_4g), whose address fills 32 KiB of the stack just before a malloc from a return address
 * mtrace has not unwound yet: the table unwinder makes that address's row in those bytes, and
 * the row's padding keeps the address's high bytes, beside three bytes of rules that point into
 * the block's first 16 MiB (cfi.c, mem.h). Returns the address xor MASK. */
NAMED static uintptr_t spray(uintptr_t p)
{
    volatile uintptr_t w[4096];
    for (size_t i = 0; i < 4096; i++)
        w[i] = p;
    return w[4095] - p;
}

NAMED static void fresh_malloc(void)
{
    free(malloc(24));
}

static void make_in_rows(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t p = (uintptr_t)on_4g(v->size);
    if (!p) return;
    if (spray(p) == 0) fresh_malloc();
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_rows(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_rows);
}

/* lose_in_binary27(size): a block of size bytes whose address only the word an OTP 27 Binary's
 * header leaves unwritten holds (layouts.h): a Binary of 43 bytes made by hand (a size of no whole
 * words, as most literals' are) and kept in a static. Returns the address xor MASK. */
static void *binaries27[16];
static unsigned binaries27_n;

static void make_in_binary27(void *arg)
{
    struct in_vm *v = arg;
    uintptr_t *b = calloc(1, 32 + 43), p = (uintptr_t)masked_block(v->size);
    if (!b || binaries27_n == 16) return;
    b[1] = p; /* flags 0, then the unwritten word */
    b[2] = 1; /* the reference count */
    b[3] = 43;
    binaries27[binaries27_n++] = b;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_binary27(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_binary27);
}

/* lose_in_unwritten(size): a block of size bytes whose address only the unwritten bytes of a kept
 * block hold: a block of 824 bytes that held it at byte 392 is freed, and the next one of that
 * size, which malloc makes in the same chunk, is kept in a static with only its first word
 * written (OTP 27's inet driver leaves a socket's unused sockaddr bytes so). Returns the address
 * xor MASK. */
static void *unwritten_kept[16];
static unsigned unwritten_n;

static void make_in_unwritten(void *arg)
{
    struct in_vm *v = arg;
    if (unwritten_n == 16) return;
    uintptr_t p = (uintptr_t)masked_block(v->size);
    volatile uintptr_t *before = malloc(824);
    before[392 / sizeof p] = p;
    free((void *)before);
    uintptr_t *kept = malloc(824);
    kept[0] = 1;
    unwritten_kept[unwritten_n++] = kept;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_unwritten(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_unwritten);
}

/* lose_in_jit_bits(size): a block of size bytes whose address only the last word of a block
 * without a record holds, past the bytes its program asked for: the two bit vectors of a block
 * of asmjit's JIT code (layouts.h), 2 x 64 bytes that glibc rounds to 136, behind a
 * JitAllocatorBlock that a static keeps. That word is written here as a chunk's earlier user
 * would have left it. Returns the address xor MASK. */
#define JIT_BLOCKS 16
static uintptr_t *jit_blocks[JIT_BLOCKS];
static unsigned jit_blocks_used;

static void make_in_jit_bits(void *arg)
{
    struct in_vm *v = arg;
    enum { AREA = 512, BYTES = AREA / 8 };
    if (jit_blocks_used == JIT_BLOCKS) return;
    uintptr_t *b = calloc(13, sizeof *b), *bits = __libc_malloc(2 * BYTES);
    if (!b || !bits || malloc_usable_size(bits) != 2 * BYTES + sizeof *bits) return;
    memset(bits, 0, 2 * BYTES);
    uintptr_t p = (uintptr_t)masked_block(v->size);
    bits[2 * BYTES / sizeof *bits] = p + 40;
    b[7] = AREA * 64;                         /* blockSize: 64-byte units */
    b[8] = 6 | (uintptr_t)AREA << 32;         /* flags, areaSize */
    b[9] = 40 | (uintptr_t)(AREA - 40) << 32; /* areaUsed, largestUnusedArea */
    b[10] = 40 | (uintptr_t)AREA << 32;       /* searchStart, searchEnd */
    b[11] = (uintptr_t)bits;                  /* usedBitVector */
    b[12] = (uintptr_t)bits + BYTES;          /* stopBitVector */
    jit_blocks[jit_blocks_used++] = b;
    v->masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_jit_bits(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return lose_by(env, argv, make_in_jit_bits);
}

/* jit_bits_blocks(): the addresses of the bit vectors lose_in_jit_bits/1 made, a list. */
static ERL_NIF_TERM jit_bits_blocks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ERL_NIF_TERM list = enif_make_list(env, 0);
    (void)argc;
    (void)argv;
    for (unsigned i = 0; i < jit_blocks_used; i++)
        list = enif_make_list_cell(env, enif_make_uint64(env, jit_blocks[i][11]), list);
    return list;
}

/* lose_in_dead_thread(size): a block of size bytes whose address only a thread's stack held, the
 * thread since exited and joined (glibc keeps its stack for the next thread it makes). Returns the
 * address xor MASK. */
static void *dead_thread(void *arg)
{
    struct in_vm *v = arg;
    void *volatile p = masked_block(v->size);
    v->masked = (uint64_t)(uintptr_t)p ^ MASK;
    return NULL;
}

static ERL_NIF_TERM lose_in_dead_thread(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_vm v = {0, 0};
    pthread_t t;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &v.size) || pthread_create(&t, NULL, dead_thread, &v) != 0)
        return enif_make_badarg(env);
    pthread_join(t, NULL);
    return enif_make_uint64(env, v.masked);
}

/* lose_in_altstack(size): a block of size bytes whose address only a thread's alternate signal
 * stack holds, deep in it, as a handler that ran there left it (the top is where the next
 * signal's frame goes: the stop's own, with the registers it saves); the thread, which sleeps
 * on, keeps the stack's address in a local too, as the BEAM's threads do
 * (sys_thread_init_signal_stack). Returns the address xor MASK. */
static pthread_mutex_t altstack_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t altstack_set = PTHREAD_COND_INITIALIZER;

struct altstack_job {
    struct in_vm v;
    uintptr_t *alt;
    int done;
};

enum { ALTSTACK_SIZE = 16384 };

/* deep down the thread's stack, so that no frame it sleeps in holds the address */
static void fill_altstack(void *arg)
{
    struct altstack_job *j = arg;
    uintptr_t p = (uintptr_t)masked_block(j->v.size);
    j->alt[64] = p;
    j->v.masked = (uint64_t)p ^ MASK;
}

static void *altstack_thread(void *arg)
{
    struct altstack_job *j = arg;
    uintptr_t *volatile alt = calloc(1, ALTSTACK_SIZE);
    stack_t ss = {.ss_sp = alt, .ss_size = ALTSTACK_SIZE};
    if (alt && sigaltstack(&ss, NULL) == 0) {
        j->alt = alt;
        deep(fill_altstack, j, DEPTH);
    }
    pthread_mutex_lock(&altstack_lock);
    j->done = 1;
    pthread_cond_broadcast(&altstack_set);
    pthread_mutex_unlock(&altstack_lock);
    for (;;)
        pause();
    return NULL;
}

static ERL_NIF_TERM lose_in_altstack(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct altstack_job j = {{0, 0}, NULL, 0};
    pthread_t t;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &j.v.size) ||
        pthread_create(&t, NULL, altstack_thread, &j) != 0)
        return enif_make_badarg(env);
    pthread_detach(t);
    pthread_mutex_lock(&altstack_lock);
    while (!j.done)
        pthread_cond_wait(&altstack_set, &altstack_lock);
    pthread_mutex_unlock(&altstack_lock);
    return j.v.masked ? enif_make_uint64(env, j.v.masked) : enif_make_badarg(env);
}

/* lose_in_fix_list(size, scheduler): a block of size bytes whose address only a free block of the
 * VM's fix_alloc holds, in its third word, as the struct that died there left it: the oldest
 * block of the longest of the free lists (of types 24 bytes or more) of the calling scheduler's
 * own instance, which no other thread changes while this NIF runs. They are found here as OTP 25
 * to 27 lay them out (beam_alloc.h): the lists' pointer is word FIX_AT of each instance's
 * Allctr_t (instance i: scheduler i), a list's entry {type_size, list_size, list, ...} is 64
 * bytes. Returns the address xor MASK; badarg when no list has 3 blocks or more. */
#define FIX_AT 117
#define FIX_ENTRY 8  /* words */
#define FIX_TYPES 15 /* entries an instance */

struct fix_spec {
    int32_t enabled, dd, aix, size;
    uintptr_t **allctr;
};

/* Whether one of the first words of the Allctr_t at al names it fix_alloc: its name_prefix, a
 * string of beam.smp's (dladdr: in a loaded object, so it can be read). */
static int fix_prefix(const uintptr_t *al)
{
    Dl_info d;
    for (int k = 0; k < 32; k++)
        if (dladdr((void *)al[k], &d) && strcmp((const char *)al[k], "fix_") == 0) return 1;
    return 0;
}

static uintptr_t *oldest_free_fix(unsigned scheduler)
{
    const struct fix_spec *spec = dlsym(RTLD_DEFAULT, "erts_allctr_thr_spec");
    for (int i = 0; spec && i < 12; i++) { /* ERTS_ALC_A_MAX + 1 */
        if (spec[i].enabled != 1 || spec[i].size <= (int32_t)scheduler ||
            !fix_prefix(spec[i].allctr[0]))
            continue;
        uintptr_t *lists = (uintptr_t *)spec[i].allctr[scheduler][FIX_AT], *best = NULL;
        size_t most = 2;
        for (size_t e = 0; e < FIX_TYPES; e++) {
            uintptr_t *l = lists + e * FIX_ENTRY;
            if (l[0] >= 24 && l[1] > most && l[1] <= 1000) {
                most = l[1];
                best = l;
            }
        }
        if (!best) return NULL;
        uintptr_t *p = (uintptr_t *)best[2];
        for (size_t n = 1; n < most && p[0]; n++)
            p = (uintptr_t *)p[0];
        return p;
    }
    return NULL;
}

struct in_fix {
    struct in_vm v;
    unsigned scheduler;
};

static void make_in_fix_list(void *arg)
{
    struct in_fix *f = arg;
    uintptr_t *free_block = oldest_free_fix(f->scheduler);
    if (!free_block) return;
    uintptr_t p = (uintptr_t)masked_block(f->v.size);
    free_block[2] = p;
    f->v.masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_fix_list(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_fix f = {{0, 0}, 0};
    (void)argc;
    if (!enif_get_uint(env, argv[0], &f.v.size) || !enif_get_uint(env, argv[1], &f.scheduler) ||
        f.scheduler == 0)
        return enif_make_badarg(env);
    deep(make_in_fix_list, &f, DEPTH);
    return f.v.masked ? enif_make_uint64(env, f.v.masked) : enif_make_badarg(env);
}

/* lose_in_binary_tail(size): a block of size bytes whose address only the last word of a live
 * off-heap binary's block holds, in a node whose binaries come from malloc (+MBe false): the
 * binary is 105 bytes, so that its last byte begins the block's last word (OTP 25's header is 24
 * bytes, OTP 27's 32) and the bytes after it, up to glibc's usable size, are ones the VM never
 * writes. The last byte is the address's low one. Returns {the binary, the address xor MASK,
 * the binary's bytes' address xor MASK}. */
struct in_tail {
    struct in_vm v;
    ErlNifBinary bin;
};

static void make_in_binary_tail(void *arg)
{
    struct in_tail *t = arg;
    if (!enif_alloc_binary(105, &t->bin)) return;
    memset(t->bin.data, 1, t->bin.size); /* no text: a string's end is another rule (layouts.h) */
    uintptr_t p = (uintptr_t)masked_block(t->v.size);
    memcpy(t->bin.data + 104, &p, sizeof p);
    t->v.masked = (uint64_t)p ^ MASK;
}

static ERL_NIF_TERM lose_in_binary_tail(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct in_tail t = {{0, 0}, {0}};
    (void)argc;
    if (!enif_get_uint(env, argv[0], &t.v.size)) return enif_make_badarg(env);
    deep(make_in_binary_tail, &t, DEPTH);
    if (!t.v.masked) return enif_make_badarg(env);
    uint64_t data = (uint64_t)(uintptr_t)t.bin.data ^ MASK;
    return enif_make_tuple3(env, enif_make_binary(env, &t.bin), enif_make_uint64(env, t.v.masked),
                            enif_make_uint64(env, data));
}

/* hold_scheduler(ms): keeps the calling scheduler in this NIF for ms milliseconds (at most 10 s):
 * it runs nothing else meanwhile, nor frees the blocks that other threads queue to its allocator
 * instances. */
static ERL_NIF_TERM hold_scheduler(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned ms;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &ms) || ms > 10000) return enif_make_badarg(env);
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
    return ok(env);
}

/* lose_in_sleeping_frames(size): a block of size bytes whose address only the dead part of the
 * scheduler's stack holds, 32 KiB of it below this NIF's frame: where the scheduler lays the frames
 * it next sleeps in, whose unwritten slots keep the word. Returns the address xor MASK.
 * dead_stack_holds(masked): how many words of those 32 KiB below this NIF's frame still hold the
 * address (read, not written: the bytes below the stack pointer, of the thread's own mapping). */
static ERL_NIF_TERM lose_in_sleeping_frames(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    uintptr_t p = (uintptr_t)masked_block(size);
    if (spray(p) != 0) return enif_make_badarg(env);
    return enif_make_uint64(env, (uint64_t)p ^ MASK);
}

/* How many words of the 32 KiB below top hold want. */
static unsigned words_below_equal(const volatile uintptr_t *top, uintptr_t want)
{
    unsigned n = 0;
    for (const volatile uintptr_t *w = top - 4096; w < top - 64; w++)
        n += *w == want;
    return n;
}

NAMED static unsigned dead_words_equal(uintptr_t want)
{
    volatile uintptr_t here = 0;
    return words_below_equal(&here, want) + (unsigned)here;
}

static ERL_NIF_TERM dead_stack_holds(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 masked;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &masked)) return enif_make_badarg(env);
    return enif_make_uint(env, dead_words_equal((uintptr_t)(masked ^ MASK)));
}

/* lose_in_dirty_frames(size, n): lose_in_sleeping_frames on a dirty CPU scheduler, returned from
 * once n calls are in it at once, each on a dirty scheduler of its own (so n of them cover every
 * one), the place of its frame noted. dirty_frames_hold(masked): how many words of the 32 KiB
 * below the frames of those calls, in the dirty schedulers' stacks, hold the address. */
static pthread_mutex_t dirty_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dirty_arrived = PTHREAD_COND_INITIALIZER;
static unsigned dirty_calls;
static const volatile uintptr_t *dirty_tops[16];

static ERL_NIF_TERM lose_in_dirty_frames(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size, n;
    volatile uintptr_t here = 0;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || !enif_get_uint(env, argv[1], &n) || n == 0)
        return enif_make_badarg(env);
    uintptr_t p = (uintptr_t)masked_block(size);
    if (spray(p) != 0) return enif_make_badarg(env);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    pthread_mutex_lock(&dirty_lock);
    unsigned mine = dirty_calls++;
    dirty_tops[mine % 16] = &here;
    pthread_cond_broadcast(&dirty_arrived);
    while (dirty_calls < (mine / n + 1) * n &&
           pthread_cond_timedwait(&dirty_arrived, &dirty_lock, &until) == 0)
        ;
    pthread_mutex_unlock(&dirty_lock);
    return enif_make_uint64(env, ((uint64_t)p ^ MASK) + here);
}

static ERL_NIF_TERM dirty_frames_hold(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 masked;
    unsigned n = 0;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &masked)) return enif_make_badarg(env);
    pthread_mutex_lock(&dirty_lock);
    for (unsigned i = 0; i < 16 && i < dirty_calls; i++)
        n += words_below_equal(dirty_tops[i], (uintptr_t)(masked ^ MASK));
    pthread_mutex_unlock(&dirty_lock);
    return enif_make_uint(env, n);
}

/* binary_bytes(binary): the address of a binary's bytes. lose_over(bytes): a block of 336 bytes
 * that malloc makes over the freed chunk whose bytes were at `bytes` (an Erlang binary of 300 to
 * 308 bytes, with +MBe false: its chunk is of the same size), asked for until one holds that
 * address (the others freed), as its address xor MASK; false when 64 did not. */
static ERL_NIF_TERM binary_bytes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifBinary b;
    (void)argc;
    if (!enif_inspect_binary(env, argv[0], &b)) return enif_make_badarg(env);
    return enif_make_uint64(env, (uint64_t)(uintptr_t)b.data);
}

static ERL_NIF_TERM lose_over(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 bytes;
    char *tried[64], *hit = NULL;
    unsigned n = 0;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &bytes)) return enif_make_badarg(env);
    while (!hit && n < 64) {
        char *p = raw_block(336);
        if ((uintptr_t)p <= bytes && bytes < (uintptr_t)p + 336)
            hit = p;
        else
            tried[n++] = p;
    }
    for (unsigned i = 0; i < n; i++)
        free(tried[i]);
    return hit ? enif_make_uint64(env, (uint64_t)(uintptr_t)hit ^ MASK)
               : enif_make_atom(env, "false");
}

extern void __libc_free(void *);

/* free_behind(size): a block allocated through malloc and freed through glibc's own __libc_free,
 * which mtrace does not see: its record outlives it. Returns its address xor MASK. A block of
 * malloc's own mapping (an mmapped chunk) leaves a hole that the kernel gives to the next mapping
 * of its size, which another thread may make at once (a chunk whose block then starts at the same
 * address, and the record seems alive): the hole is held by a mapping of no access, for good. */
static ERL_NIF_TERM free_behind(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    char *p = masked_block(size);
    uint64_t masked = (uint64_t)(uintptr_t)p ^ MASK;
    size_t chunk = ((size_t *)p)[-1];
    __libc_free(p);
    if (chunk & 2) /* IS_MMAPPED: the chunk starts 16 bytes before the block, on a page */
        mmap(p - 16, chunk & ~(size_t)7, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    return enif_make_uint64(env, masked);
}

NAMED static void *static_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

/* keep_static(n, size): n blocks in a static array. */
static ERL_NIF_TERM keep_static(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned n, size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &n) || !enif_get_uint(env, argv[1], &size) || n > 64)
        return enif_make_badarg(env);
    for (unsigned i = 0; i < n; i++)
        kept_static[i] = static_block(size);
    return ok(env);
}

NAMED static struct node *tree_node(unsigned depth)
{
    struct node *n = malloc(sizeof *n);
    memset(n, 0, sizeof *n);
    if (depth > 1) {
        n->left = tree_node(depth - 1);
        n->right = tree_node(depth - 1);
    }
    return n;
}

/* keep_tree(depth): a full binary tree of 2^depth - 1 nodes under a static root. */
static ERL_NIF_TERM keep_tree(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned depth;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &depth) || depth > 16) return enif_make_badarg(env);
    kept_tree = tree_node(depth);
    return ok(env);
}

NAMED static void *tls_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

/* keep_tls(size): a block that only the calling thread's thread-local variable points to. */
static ERL_NIF_TERM keep_tls(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    kept_tls = tls_block(size);
    return ok(env);
}

/* keep_tls_here(size): keep_tls's block, and where: {its address xor MASK, the thread's id}. */
static ERL_NIF_TERM keep_tls_here(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    kept_tls = tls_block(size);
    return enif_make_tuple2(env, enif_make_uint64(env, (uint64_t)(uintptr_t)kept_tls ^ MASK),
                            enif_make_int(env, gettid()));
}

NAMED static void *buffer_data(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

static void buffer_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    free(((struct buffer *)obj)->data);
}

/* A resource of type that owns a malloc'd buffer of size bytes, as a term that alone holds it;
 * *out: the object. */
static ERL_NIF_TERM new_buffer(ErlNifEnv *env, ErlNifResourceType *type, unsigned size,
                               struct buffer **out)
{
    struct buffer *b = enif_alloc_resource(type, sizeof *b);
    b->data = buffer_data(size);
    ERL_NIF_TERM term = enif_make_resource(env, b);
    enif_release_resource(b);
    *out = b;
    return term;
}

/* buffer(size): a resource that owns a malloc'd buffer; the caller keeps the term or drops it. */
static ERL_NIF_TERM buffer(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    struct buffer *b;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    return new_buffer(env, buffer_type, size, &b);
}

/* buffer_addresses(buffer) -> {data, object}: where a buffer resource's data and the resource
 * itself lie, each xor MASK. */
static ERL_NIF_TERM buffer_addresses(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    struct buffer *b;
    (void)argc;
    if (!enif_get_resource(env, argv[0], buffer_type, (void **)&b)) return enif_make_badarg(env);
    return enif_make_tuple2(env, enif_make_uint64(env, (uint64_t)(uintptr_t)b->data ^ MASK),
                            enif_make_uint64(env, (uint64_t)(uintptr_t)b ^ MASK));
}

/* leaky_buffer(size) -> {resource, data}: a buffer resource whose destructor forgets its data:
 * the data is lost when the VM frees the resource, once no term refers to it (after a collection
 * of the heap that held the last one). data is its address xor MASK. */
static void leaky_dtor(ErlNifEnv *env, void *obj)
{
    (void)env;
    (void)obj;
}

static ERL_NIF_TERM leaky_buffer(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    struct buffer *b;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    ERL_NIF_TERM term = new_buffer(env, leaky_type, size, &b);
    return enif_make_tuple2(env, term, enif_make_uint64(env, (uint64_t)(uintptr_t)b->data ^ MASK));
}

NAMED static void *lost_resource(size_t size)
{
    void *r = enif_alloc_resource(buffer_type, size);
    memset(r, 0, size);
    return r;
}

static void make_lost_resource(void *arg)
{
    lost_resource(*(unsigned *)arg);
}

/* lose_resource(size): a resource whose only reference is never released: it stays allocated,
 * and nothing points to it. */
static ERL_NIF_TERM lose_resource(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || size < sizeof(struct buffer))
        return enif_make_badarg(env);
    deep(make_lost_resource, &size, DEPTH);
    return ok(env);
}

/* lose_binary(size): an off-heap binary allocated and never released nor made a term. */
static ERL_NIF_TERM lose_binary(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    ErlNifBinary bin;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || !enif_alloc_binary(size, &bin))
        return enif_make_badarg(env);
    memset(bin.data, 'b', size);
    memset(&bin, 0, sizeof bin);
    return ok(env);
}

/* resource_header(size): how many bytes of the VM's own come before a resource's data, in a node
 * whose resources come from malloc (+MBe false), as the C library's block says. The word before
 * a block holds its chunk's size: the size asked for and one word, rounded up to 16 bytes (32 at
 * least), and three flag bits. The nearest such word below the data is the block's own: the VM's
 * header holds pointers, counts and sizes of other things. */
static ERL_NIF_TERM resource_header(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || size < sizeof(struct buffer))
        return enif_make_badarg(env);
    char *r = enif_alloc_resource(buffer_type, size);
    memset(r, 0, size);
    int header = -1;
    for (size_t h = 0; h <= 256 && header < 0; h += sizeof(size_t)) {
        size_t word, chunk = (h + size + sizeof word + 15) & ~(size_t)15;
        memcpy(&word, r - h - sizeof word, sizeof word);
        if ((word & ~(size_t)7) == (chunk < 32 ? 32 : chunk)) header = (int)h;
    }
    enif_release_resource(r);
    return header < 0 ? enif_make_badarg(env) : enif_make_int(env, header);
}

NAMED static void *lost_enif(size_t size)
{
    void *p = enif_alloc(size);
    memset(p, 0, size);
    return p;
}

NAMED static void *kept_enif(size_t size)
{
    void *p = enif_alloc(size);
    memset(p, 0, size);
    return p;
}

struct counts {
    unsigned n, size;
};

static void make_lost_enif(void *arg)
{
    const struct counts *c = arg;
    for (unsigned i = 0; i < c->n; i++)
        lost_enif(c->size);
}

/* enif_blocks(lost, kept, size): lost blocks from enif_alloc, and kept ones (in kept_static's
 * last slots). */
static ERL_NIF_TERM enif_blocks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned lost, kept, size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &lost) || !enif_get_uint(env, argv[1], &kept) ||
        !enif_get_uint(env, argv[2], &size) || kept > 16)
        return enif_make_badarg(env);
    struct counts c = {lost, size};
    deep(make_lost_enif, &c, DEPTH);
    for (unsigned i = 0; i < kept; i++)
        kept_static[63 - i] = kept_enif(size);
    return ok(env);
}

/* freed_behind(n, size): n blocks of enif_alloc (at most 64), then each freed through the VM's own
 * enif_free, its address looked up by name (a copy of it, as a library may keep one): frees no
 * hook sees. */
static ERL_NIF_TERM freed_behind(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned n, size;
    (void)argc;
    void (*vm_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "enif_free");
    if (!enif_get_uint(env, argv[0], &n) || !enif_get_uint(env, argv[1], &size) || !vm_free)
        return enif_make_badarg(env);
    void *blocks[64];
    if (n > 64) return enif_make_badarg(env);
    for (unsigned i = 0; i < n; i++)
        blocks[i] = lost_enif(size);
    for (unsigned i = 0; i < n; i++)
        vm_free(blocks[i]);
    return ok(env);
}

NAMED static void *dead_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

static void leave_on_stack(void *arg)
{
    volatile char frame[256];
    void *p = dead_block(*(unsigned *)arg);
    memcpy((char *)frame + 64, &p, sizeof p);
}

/* lose_on_stack(size): a block whose only pointer is left in a dead part of the stack. */
static ERL_NIF_TERM lose_on_stack(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size)) return enif_make_badarg(env);
    deep(leave_on_stack, &size, DEPTH);
    return ok(env);
}

/* hold_word(masked): the address masked xor MASK written into a block that a static keeps: a word
 * that points at a block, in reachable memory, as a stale one would. */
static void **holder;

static ERL_NIF_TERM hold_word(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 masked;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &masked)) return enif_make_badarg(env);
    if (!holder) holder = static_block(64);
    holder[0] = (void *)(uintptr_t)(masked ^ MASK);
    return ok(env);
}

NAMED static void *reused_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

/* free_and_reuse(masked, size): frees the block at masked xor MASK and allocates one of size
 * bytes, which a static keeps; on one thread glibc's tcache gives the freed address back at
 * once. The call site is run once before, so that mtrace's first unwind of it (which may
 * allocate) does not take the address. Returns whether it got the address. */
static void *reused;

static ERL_NIF_TERM free_and_reuse(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifUInt64 masked;
    unsigned size;
    (void)argc;
    if (!enif_get_uint64(env, argv[0], &masked) || !enif_get_uint(env, argv[1], &size))
        return enif_make_badarg(env);
    void *p = (void *)(uintptr_t)(masked ^ MASK), *warm = NULL;
    for (int i = 0; i < 2; i++) {
        if (i) free(p);
        reused = reused_block(size);
        if (!i) warm = reused;
    }
    free(warm);
    return enif_make_atom(env, reused == p ? "true" : "false");
}

/* static_address(i): kept_static[i] xor MASK. */
static ERL_NIF_TERM static_address(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned i;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &i) || i >= 64) return enif_make_badarg(env);
    return enif_make_uint64(env, (uint64_t)(uintptr_t)kept_static[i] ^ MASK);
}

/* keep_chain(): three 64-byte blocks under a static: chain_root -> a, a's word 2 (offset 16) ->
 * b, b's word 5 (offset 40) -> c. Returns [a, b, c], each xor MASK. */
static void **chain_root;

NAMED static void **chain_block(void)
{
    void **p = malloc(64);
    memset(p, 0, 64);
    return p;
}

static ERL_NIF_TERM keep_chain(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    void **a = chain_block(), **b = chain_block(), **c = chain_block();
    a[2] = b;
    b[5] = c;
    chain_root = a;
    ERL_NIF_TERM masked[3] = {enif_make_uint64(env, (uint64_t)(uintptr_t)a ^ MASK),
                              enif_make_uint64(env, (uint64_t)(uintptr_t)b ^ MASK),
                              enif_make_uint64(env, (uint64_t)(uintptr_t)c ^ MASK)};
    return enif_make_list_from_array(env, masked, 3);
}

/* hold_on_stack(size): a thread whose stack alone keeps a block, until release_stack(). Returns
 * {the block's address xor MASK, the thread's id}. */
static pthread_t holding;
static int hold_state; /* 1: the thread holds its block; 2: told to end */
static uint64_t held_masked;
static pid_t held_tid;

NAMED static void *stack_block(size_t size)
{
    void *p = malloc(size);
    memset(p, 0, size);
    return p;
}

/* Zeroes the stack below its caller's frame, where stack_block's copies of the address lie dead:
 * the word that keeps the block is then the caller's own. */
NAMED static void wipe_below(void)
{
    volatile char dead[1024];
    for (size_t i = 0; i < sizeof dead; i++)
        dead[i] = 0;
}

static void *stack_holder(void *arg)
{
    pthread_setname_np(pthread_self(), "mt_holder");
    void *volatile kept = stack_block((size_t)(uintptr_t)arg);
    wipe_below();
    held_masked = (uint64_t)(uintptr_t)kept ^ MASK;
    held_tid = gettid();
    __atomic_store_n(&hold_state, 1, __ATOMIC_RELEASE);
    while (__atomic_load_n(&hold_state, __ATOMIC_ACQUIRE) != 2)
        usleep(1000);
    free(kept);
    return NULL;
}

static ERL_NIF_TERM hold_on_stack(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &size) || hold_state ||
        pthread_create(&holding, NULL, stack_holder, (void *)(uintptr_t)size) != 0)
        return enif_make_badarg(env);
    while (__atomic_load_n(&hold_state, __ATOMIC_ACQUIRE) != 1)
        usleep(1000);
    return enif_make_tuple2(env, enif_make_uint64(env, held_masked), enif_make_int(env, held_tid));
}

static ERL_NIF_TERM release_stack(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    if (__atomic_load_n(&hold_state, __ATOMIC_ACQUIRE) != 1) return enif_make_badarg(env);
    __atomic_store_n(&hold_state, 2, __ATOMIC_RELEASE);
    pthread_join(holding, NULL);
    hold_state = 0;
    return ok(env);
}

/* many(kept, lost, size): kept blocks in an array that a static pointer keeps, and lost ones;
 * for bench/leaks.exs. */
static void **kept_array;

static ERL_NIF_TERM many(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned kept, lost, size;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &kept) || !enif_get_uint(env, argv[1], &lost) ||
        !enif_get_uint(env, argv[2], &size) || kept_array)
        return enif_make_badarg(env);
    kept_array = calloc(kept + 1, sizeof *kept_array);
    for (unsigned i = 0; i < kept; i++)
        kept_array[i] = static_block(size);
    for (unsigned i = 0; i < lost; i++)
        lost_node();
    return ok(env);
}

/* A storm: threads that allocate and free, and one that maps and unmaps, until stopped. */
static int storming;
static pthread_t storm_threads[17];
static unsigned storm_count;

static void *allocate_loop(void *arg)
{
    void *ring[256] = {0};
    unsigned i = (unsigned)(uintptr_t)arg;
    while (__atomic_load_n(&storming, __ATOMIC_RELAXED)) {
        free(ring[i % 256]);
        ring[i % 256] = malloc(16 + i % 512);
        i++;
    }
    for (int k = 0; k < 256; k++)
        free(ring[k]);
    return NULL;
}

static void *map_loop(void *arg)
{
    (void)arg;
    while (__atomic_load_n(&storming, __ATOMIC_RELAXED)) {
        char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) continue;
        memset(m, 1, 1 << 20);
        munmap(m, 1 << 20);
    }
    return NULL;
}

/* storm(n): starts n allocating threads and one mapping thread; storm(0) stops them. */
static ERL_NIF_TERM storm(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned n;
    (void)argc;
    if (!enif_get_uint(env, argv[0], &n) || n > 16) return enif_make_badarg(env);
    if (n == 0) {
        __atomic_store_n(&storming, 0, __ATOMIC_RELAXED);
        for (unsigned i = 0; i < storm_count; i++)
            pthread_join(storm_threads[i], NULL);
        storm_count = 0;
        return ok(env);
    }
    __atomic_store_n(&storming, 1, __ATOMIC_RELAXED);
    for (unsigned i = 0; i < n; i++)
        if (pthread_create(&storm_threads[storm_count], NULL, allocate_loop,
                           (void *)(uintptr_t)(i * 7919)) == 0)
            storm_count++;
    if (pthread_create(&storm_threads[storm_count], NULL, map_loop, NULL) == 0) storm_count++;
    return ok(env);
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv;
    (void)info;
    buffer_type =
        enif_open_resource_type(env, NULL, "buffer", buffer_dtor, ERL_NIF_RT_CREATE, NULL);
    leaky_type =
        enif_open_resource_type(env, NULL, "leaky_buffer", leaky_dtor, ERL_NIF_RT_CREATE, NULL);
    return buffer_type && leaky_type ? 0 : 1;
}

/* report_leaks(path): the preloaded mtrace.so's report of the blocks lost now, written by
 * report.c as the exit report is (mtrace_lib_leaks): its answer, 0 or -1; -2 without it. */
static ERL_NIF_TERM report_leaks(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    char path[4096];
    (void)argc;
    if (enif_get_string(env, argv[0], path, sizeof path, ERL_NIF_LATIN1) <= 0)
        return enif_make_badarg(env);
    int (*leaks)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "mtrace_lib_leaks");
    return enif_make_int(env, leaks ? leaks(path) : -2);
}

/* keep_lookalikes(n): C structs whose words have the shapes of Erlang terms and VM structs, as C
 * libraries' data has them (an OpenSSL BUF_MEM {length, data, max, flags}, a struct whose int
 * id 0x90 is followed by its name's pointer, ...), each holding the only pointer to a block of
 * its own: n of each kind, in blocks this NIF allocates, in blocks without a record
 * (__libc_malloc) and in a static. Every such block is still referenced, and no rule may
 * discount the word that points to it. Returns the pointed-to blocks' addresses xor MASK;
 * drop_lookalikes() frees the holders (not the blocks they point to), which are then lost. */
#define LOOKALIKES 9
#define LOOKALIKE_MAX 64
static uintptr_t *lookalike_holder[LOOKALIKE_MAX * LOOKALIKES];
static int lookalike_untold[LOOKALIKE_MAX * LOOKALIKES];
static size_t lookalikes;
static uintptr_t lookalike_static[LOOKALIKES][8];

/* Fills w (8 words) with shape `kind`, its one pointer to target. */
static void lookalike(uintptr_t *w, unsigned kind, uintptr_t target)
{
    memset(w, 0, 8 * sizeof *w);
    switch (kind) {
    case 0: /* BUF_MEM: an OTP 27 Binary's header {flags, -, count, size} */
        w[0] = 40, w[1] = target, w[2] = 64, w[3] = 0;
        break;
    case 1: /* {int id = 0x90; char *name}: an MRef */
        w[0] = 0x90, w[1] = target;
        break;
    case 2: /* a ProcBin's {thing, size, next, val, bytes = val + 24, flags} */
        w[0] = 0x160, w[1] = 16, w[2] = 0, w[3] = target, w[4] = target + 24, w[5] = 1;
        break;
    case 3: /* an OTP 27 sub-bitstring {thing, base, start, end, orig} */
        w[0] = 0x124, w[1] = target, w[2] = 0, w[3] = 8, w[4] = 0x7f0000001002;
        break;
    case 4: /* a match state {thing, orig, base, offset, size} */
        w[0] = 0x104, w[1] = 0x7f0000001002, w[2] = target, w[3] = 0, w[4] = 8;
        break;
    case 5: /* a heap binary of 3 bytes {thing, size, data}: its data word the pointer */
        w[0] = 2 << 6 | 0x24, w[1] = 3, w[2] = target;
        break;
    case 6: /* a fun {thing, entry, next, arity word, creator (an atom)} */
        w[0] = 0xD4, w[1] = 0x7f0000001000, w[2] = 0, w[3] = target, w[4] = 0x4B;
        break;
    case 7: /* {count, "sixteen chars!!!" inline, pointer}: text before a pointer */
        w[0] = 7;
        memcpy(&w[1], "abcdefghabcdefgh", 16);
        w[3] = target;
        break;
    default: /* an OTP 25 Binary's header {flags, count, size} before a pointer */
        w[0] = 0, w[1] = 1, w[2] = 8, w[3] = target;
        break;
    }
}

NAMED static void *lookalike_target(void)
{
    char *p = malloc(40);
    memset(p, 'x', 40);
    return p;
}

static ERL_NIF_TERM keep_lookalikes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned n;
    if (!enif_get_uint(env, argv[0], &n) || n == 0 || n > LOOKALIKE_MAX / 2 || lookalikes)
        return enif_make_badarg(env);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (unsigned kind = 0; kind < LOOKALIKES; kind++) {
        for (unsigned i = 0; i < 2 * n; i++) {
            /* half recorded, half without a record */
            int untold = i >= n;
            uintptr_t *w = untold ? __libc_malloc(8 * sizeof *w) : malloc(8 * sizeof *w);
            uintptr_t t = (uintptr_t)lookalike_target();
            lookalike(w, kind, t);
            lookalike_holder[lookalikes] = w;
            lookalike_untold[lookalikes++] = untold;
            list = enif_make_list_cell(env, enif_make_uint64(env, t ^ MASK), list);
        }
        uintptr_t t = (uintptr_t)lookalike_target();
        lookalike(lookalike_static[kind], kind, t);
        list = enif_make_list_cell(env, enif_make_uint64(env, t ^ MASK), list);
    }
    return list;
}

static ERL_NIF_TERM drop_lookalikes(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < lookalikes; i++) {
        memset(lookalike_holder[i], 0, 8 * sizeof(uintptr_t));
        if (lookalike_untold[i])
            __libc_free(lookalike_holder[i]);
        else
            free(lookalike_holder[i]);
        lookalike_holder[i] = NULL;
    }
    memset(lookalike_static, 0, sizeof lookalike_static);
    lookalikes = 0;
    return ok(env);
}

/* holders(blocks): the independent verifier of leaks/1. blocks: [{address, size}], the blocks a
 * scan called lost. Every readable and writable mapping of this process is read here (not
 * through mtrace), but for the calling thread's stack and this verifier's own memory, and each
 * aligned word that points into one of the blocks is a holder: returns [{block, holder,
 * mapping}], at most HOLDERS_MAX, mapping the holder's mapping's path ("" for an anonymous one).
 * The caller tells which holders are reachable memory. */
#define HOLDERS_MAX 4096
struct range {
    uintptr_t lo, hi;
};

static int by_lo(const void *a, const void *b)
{
    uintptr_t x = ((const struct range *)a)->lo, y = ((const struct range *)b)->lo;
    return x < y ? -1 : x > y;
}

static ERL_NIF_TERM holders(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    unsigned n;
    if (!enif_get_list_length(env, argv[0], &n)) return enif_make_badarg(env);
    size_t bytes = (n + 1) * sizeof(struct range) + (64 << 10);
    char *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return enif_make_badarg(env);
    struct range *r = (struct range *)mem;
    uintptr_t *buf = (uintptr_t *)(mem + (n + 1) * sizeof(struct range));
    ERL_NIF_TERM list = argv[0], head, out = enif_make_list(env, 0);
    for (unsigned i = 0; i < n && enif_get_list_cell(env, list, &head, &list); i++) {
        const ERL_NIF_TERM *t;
        int arity;
        ErlNifUInt64 a, size;
        if (!enif_get_tuple(env, head, &arity, &t) || arity != 2 ||
            !enif_get_uint64(env, t[0], &a) || !enif_get_uint64(env, t[1], &size)) {
            munmap(mem, bytes);
            return enif_make_badarg(env);
        }
        r[i] = (struct range){a, a + (size ? size : 1)};
    }
    qsort(r, n, sizeof *r, by_lo);
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0), self = (uintptr_t)mem;
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    unsigned found = 0;
    while (maps && found < HOLDERS_MAX && fgets(line, sizeof line, maps)) {
        uintptr_t lo, hi;
        char perms[5] = {0}, path[4096] = {0};
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %4095[^\n]", &lo, &hi, perms, path) < 3) continue;
        char *p = path;
        while (*p == ' ')
            p++;
        if (perms[0] != 'r' || perms[1] != 'w' || (sp >= lo && sp < hi) ||
            (self >= lo && self < hi) || !strcmp(p, "[vvar]") || !strcmp(p, "[vsyscall]"))
            continue;
        for (uintptr_t at = lo; at < hi && found < HOLDERS_MAX;) {
            size_t len = hi - at < (64 << 10) ? hi - at : (64 << 10);
            struct iovec local = {buf, len}, remote = {(void *)at, len};
            ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
            if (got <= 0) {
                at += 4096;
                continue;
            }
            for (size_t k = 0; k < (size_t)got / sizeof *buf && found < HOLDERS_MAX; k++) {
                uintptr_t w = buf[k];
                size_t l = 0, h = n;
                while (l < h) {
                    size_t m = (l + h) / 2;
                    if (r[m].lo <= w)
                        l = m + 1;
                    else
                        h = m;
                }
                if (!l || w >= r[l - 1].hi) continue;
                ERL_NIF_TERM e[3] = {enif_make_uint64(env, r[l - 1].lo),
                                     enif_make_uint64(env, at + k * sizeof *buf),
                                     enif_make_string(env, p, ERL_NIF_LATIN1)};
                out = enif_make_list_cell(env, enif_make_tuple_from_array(env, e, 3), out);
                found++;
            }
            at += (size_t)got;
        }
    }
    if (maps) fclose(maps);
    munmap(mem, bytes);
    return out;
}

static ErlNifFunc funcs[] = {
    {"lose_list", 1, lose_list, 0},
    {"keep_lookalikes", 1, keep_lookalikes, 0},
    {"holders", 1, holders, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"drop_lookalikes", 0, drop_lookalikes, 0},
    {"keep_static", 2, keep_static, 0},
    {"keep_tree", 1, keep_tree, 0},
    {"keep_tls", 1, keep_tls, 0},
    {"buffer", 1, buffer, 0},
    {"leaky_buffer", 1, leaky_buffer, 0},
    {"buffer_addresses", 1, buffer_addresses, 0},
    {"lose_resource", 1, lose_resource, 0},
    {"resource_header", 1, resource_header, 0},
    {"enif_blocks", 3, enif_blocks, 0},
    {"freed_behind", 2, freed_behind, 0},
    {"lose_on_stack", 1, lose_on_stack, 0},
    {"storm", 1, storm, 0},
    {"many", 3, many, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"lose_masked", 2, lose_masked, 0},
    {"lose_raw", 2, lose_raw, 0},
    {"lose_in_vm_free", 1, lose_in_vm_free, 0},
    {"lose_in_vm_carrier", 1, lose_in_vm_carrier, 0},
    {"lose_in_terms_block", 1, lose_in_terms_block, 0},
    {"lose_in_port", 1, lose_in_port, 0},
    {"lose_in_merged_heap", 1, lose_in_merged_heap, 0},
    {"lose_in_released_carrier", 1, lose_in_released_carrier, 0},
    {"lose_in_terms_carrier", 1, lose_in_terms_carrier, 0},
    {"lose_in_sub_bits", 1, lose_in_sub_bits, 0},
    {"lose_in_bin_ref", 1, lose_in_bin_ref, 0},
    {"lose_on_4g", 1, lose_on_4g, 0},
    {"lose_in_rows", 1, lose_in_rows, 0},
    {"lose_in_binary27", 1, lose_in_binary27, 0},
    {"lose_in_heap_binary", 1, lose_in_heap_binary, 0},
    {"lose_in_heap_bits", 1, lose_in_heap_bits, 0},
    {"lose_in_fun", 1, lose_in_fun, 0},
    {"lose_in_atom", 1, lose_in_atom, 0},
    {"lose_in_dead_thread", 1, lose_in_dead_thread, 0},
    {"lose_in_unwritten", 1, lose_in_unwritten, 0},
    {"lose_in_jit_bits", 1, lose_in_jit_bits, 0},
    {"jit_bits_blocks", 0, jit_bits_blocks, 0},
    {"lose_in_altstack", 1, lose_in_altstack, 0},
    {"lose_in_fix_list", 2, lose_in_fix_list, 0},
    {"lose_in_sleeping_frames", 1, lose_in_sleeping_frames, 0},
    {"hold_scheduler", 1, hold_scheduler, 0},
    {"lose_in_binary_tail", 1, lose_in_binary_tail, 0},
    {"dead_stack_holds", 1, dead_stack_holds, 0},
    {"lose_in_dirty_frames", 2, lose_in_dirty_frames, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"dirty_frames_hold", 1, dirty_frames_hold, 0},
    {"binary_bytes", 1, binary_bytes, 0},
    {"lose_over", 1, lose_over, 0},
    {"lose_in_heap", 1, lose_in_heap, 0},
    {"free_heap_holds", 1, free_heap_holds, 0},
    {"lose_in_float_regs", 1, lose_in_float_regs, 0},
    {"lose_in_old_heap", 3, lose_in_old_heap, 0},
    {"lose_in_text_tail", 1, lose_in_text_tail, 0},
    {"lose_in_counted_text", 1, lose_in_counted_text, 0},
    {"keep_by_text_pointer", 1, keep_by_text_pointer, 0},
    {"lose_in_library_name", 1, lose_in_library_name, 0},
    {"free_behind", 1, free_behind, 0},
    {"lose_binary", 1, lose_binary, 0},
    {"hold_word", 1, hold_word, 0},
    {"free_and_reuse", 2, free_and_reuse, 0},
    {"static_address", 1, static_address, 0},
    {"keep_chain", 0, keep_chain, 0},
    {"hold_on_stack", 1, hold_on_stack, 0},
    {"release_stack", 0, release_stack, 0},
    {"keep_tls_here", 1, keep_tls_here, 0},
    {"report_leaks", 1, report_leaks, ERL_NIF_DIRTY_JOB_CPU_BOUND},
};

ERL_NIF_INIT(Elixir.Mtrace.Test.Lost, funcs, load, NULL, NULL, NULL)
