/* layouts.h: what the mark knows of other code's structures, so that it does not take their
 * stale words for pointers. A conservative mark reads every word of a reachable block; these
 * structures hold words that are not pointers the program follows (bytes never written since
 * malloc handed out the chunk, or data kept for a debugger), and such a word equal to a lost
 * block's address keeps that block. Each layout is the other code's published or stable one,
 * and each is taken only where the memory proves it.
 *
 * Contract
 * - mt_layout_jit_descriptor() looks a symbol up (dlsym: the loader's lock; may allocate on a
 * miss), and mt_layout_strings() walks the loaded objects (the loader's lock): call them before
 * the threads stop. mt_layout_carrier() reads memory with
 *   process_vm_readv, for naming a root after the threads go on. The others only read the words
 *   they are given (and mt_layout_pointer_range() calls _dl_find_object, lock-free): safe with
 *   the threads stopped.
 * - No state; any thread.
 */
#ifndef MTRACE_LAYOUTS_H
#define MTRACE_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

/* Which of the len bytes of the block at `at` (w: a copy of them; len is the block's size rounded
 * down to whole words, as the mark reads it, or glibc's usable size when unrecorded: a block
 * without a record) can hold pointers: from *first to the offset returned. All of them, but:
 * - in a block that a live Erlang reference proves a Binary (binary: the VM's release bits of
 *   beam_vm.h, 0 when nothing proves it one), and only with that release's header:
 *   - in an OTP 27 Binary that is no magic one, its header's flags and unwritten word (a
 *     literal's kept a lost C++ buffer), taken when its original size makes the block's size;
 *   - in a block without a record that is such a Binary, or OTP 25 and 26's ({flags, count,
 *     original size}), whose header and original size make its usable size: the bytes past its
 *     own, which the VM never writes, and the last word of its bytes that is partly past them;
 * - in a segment of the loader's _dl_find_object (platform.h), which were never written: the
 *   bytes before its 128-byte boundary, and its entries past those in use. A block is taken for
 *   one only when its header says so (to_free is the block, size <= allocated, all within the
 *   block) and its first entry is a loaded object's range, as _dl_find_object says. */
size_t mt_layout_pointer_range(const uintptr_t *w, size_t len, uintptr_t at, int unrecorded,
                               unsigned binary, size_t *first);

/* An Erlang ProcBin of OTP 25 and 26, a reference to an off-heap binary in the VM's memory: a
 * thing word (arity 5, subtag REFC_BINARY), the binary's size, the next ProcBin, val (the
 * Binary) and bytes (val + MT_BINARY_HEADER, its data). */
#define MT_PROCBIN_HEADER 0x160
#define MT_BINARY_HEADER 24
#define MT_PROCBIN_WORDS 6 /* and flags, 0 to 3 */

/* Whether the n words at w start a ProcBin: the thing word, or a pointer to its copy (boxed, low
 * bits 2: the collector leaves one where it moved a term from), then size, next, val, bytes =
 * val + 24 and flags. Dead ones are told by their val (mt_layout_binary_place and _live). */
int mt_layout_procbin(const uintptr_t *w, size_t n);

/* Whether the words at a ProcBin's val, head = {flags, reference count, original size}, are a
 * live Binary of at least `size` bytes in `room` bytes past its header: flags of OTP's few bits,
 * a count from 1 to 2^32 - 1, an original size from size to room. The VM leaves dead ProcBins
 * in its garbage; once their Binary is freed, malloc's own links (free) or a new block's bytes
 * lie there, and the ProcBin's two words are not pointers. */
int mt_layout_binary_live(const uintptr_t head[3], uintptr_t size, size_t room);

/* Whether a Binary can start at `at` in the block [addr, addr + size): a live one is a block of
 * its own (malloc's, with +MBe false), or lies in one of the VM's allocator carriers, far larger
 * than MT_CARRIER_MIN (those the VM takes from malloc are 256 KiB and up). Anywhere else the
 * block is another's, which malloc made over the freed Binary's chunk. */
#define MT_CARRIER_MIN ((size_t)64 << 10)
int mt_layout_binary_place(uintptr_t at, uintptr_t addr, size_t size);

/* An Erlang BinRef of OTP 27, the reference to an off-heap binary that replaced the ProcBin: a
 * thing word (arity 2, subtag BIN_REF), val (the Binary) and the next off-heap item. OTP 27's
 * Binary has a header of MT_BINARY27_HEADER bytes, {flags, a word it leaves unwritten, reference
 * count, original size}. mt_layout_binary27_live(): whether that head is a live Binary's, with
 * `room` bytes past its header (flags of OTP's few bits, a count from 1 to 2^32 - 1, an original
 * size that fits); where one can start is mt_layout_binary_place's rule. The thing word alone is
 * a weak sign (168 is a plausible length in C data before a buffer's pointer), so the mark takes
 * it only in the VM's own memory (reach.c). */
#define MT_BINREF_HEADER 0xA8
#define MT_BINARY27_HEADER 32
int mt_layout_binary27_live(const uintptr_t head[4], size_t room);

/* An Erlang MRef of OTP 25 and 26, a reference to a magic binary (a NIF resource, an ETS table's
 * identity): a thing word (arity 2, subtag REF), mb (the magic binary) and the next off-heap
 * item. mt_layout_magic_live(): whether head = {flags, reference count} at mb is a live magic
 * binary (the magic flag among OTP's few, a count from 1 to 2^32 - 1); where one can start is
 * mt_layout_binary_place's rule. */
#define MT_MREF_HEADER 0x90
int mt_layout_magic_live(const uintptr_t head[2]);

/* A NIF resource: the VM's magic binary {its Binary header, its size, its destructor, ...}, then
 * the resource's own {type, monitors}, then the data: MT_RESOURCE_HEADER bytes before the data in
 * OTP 25 and 26, MT_RESOURCE27_HEADER in 27 (its Binary header has one word more).
 * mt_layout_magic_flags(): whether w is a live magic binary's flags word. */
#define MT_RESOURCE_HEADER 64
#define MT_RESOURCE27_HEADER 72
int mt_layout_magic_flags(uintptr_t w);

/* A NIF resource type of OTP 25 to 27 (the VM's struct enif_resource_type_t, which the NIF API
 * names ErlNifResourceType): {next, prev, owner, fn, fn_real, refc, module, name}, fn and fn_real
 * each an ErlNifResourceTypeInit {dtor, stop, down, members, dyncall}. The VM runs fn's destructor
 * when a resource of the type ends; during a takeover (an upgrade's library opening the type
 * anew) fn holds the VM's own wrappers, which call fn_real's, until the load commits and fn takes
 * the new library's. mt_layout_resource_type(): whether the MT_RESOURCE_TYPE_WORDS words w, read
 * at `self`, are such a type, no takeover's (fn's callbacks are fn_real's): in the VM's circular
 * list (next_prev and prev_next, the prev of its next and the next of its prev, name it), with an
 * owner (the NIF library that opened it), a count of at least the owner's one, and atoms for its
 * module and name. */
#define MT_RESOURCE_TYPE_WORDS 16
#define MT_RESOURCE_TYPE_DTOR 3      /* fn.dtor */
#define MT_RESOURCE_TYPE_DTOR_REAL 8 /* fn_real.dtor */
int mt_layout_resource_type(const uintptr_t w[MT_RESOURCE_TYPE_WORDS], uintptr_t self,
                            uintptr_t next_prev, uintptr_t prev_next);

/* Whether the n words at w start an Erlang match state of OTP 25 and 26 (ErlBinMatchState, a
 * binary being matched): a thing word (arity 4, subtag BIN_MATCHSTATE), orig (the binary's term:
 * boxed, low bits 2), base (a raw pointer into the binary's bytes), then offset and size in bits
 * (offset <= size). base never keeps anything: orig keeps the binary. The VM leaves dead ones in
 * its garbage, and base then points into whatever malloc gave the freed binary's chunk to. */
#define MT_MATCHSTATE_HEADER 0x104
#define MT_MATCHSTATE_WORDS 5
int mt_layout_matchstate(const uintptr_t *w, size_t n);

/* Whether the n words at w start an Erlang sub-bitstring of OTP 27 (ErlSubBits: a binary's part,
 * a match context, a writable binary): a thing word (arity 4, subtag SUB_BITS), base_flags (a raw
 * pointer into the binary's bytes, its two low bits flags), then start and end in bits (start <=
 * end) and orig (the BinRef or heap bitstring's term: boxed, low bits 2). As in OTP 25's match
 * state, base never keeps anything: orig keeps the binary, and the collector remakes base from
 * it. Dead ones lie in the garbage of process heaps, their base pointing into whatever malloc
 * gave the freed binary's chunk to. The same thing word is an OTP 25 heap binary of 17 to 24
 * bytes, whose next word, its size, is no pointer. */
#define MT_SUBBITS_HEADER 0x124
#define MT_SUBBITS_WORDS 5
int mt_layout_subbits(const uintptr_t *w, size_t n);

/* An Erlang heap binary of OTP 25 and 26 (ErlHeapBin): a thing word, (1 + its data's words) << 6
 * | MT_HEAPBIN_SUBTAG, its size in bytes (1 to 64, ERL_ONHEAP_BIN_LIMIT), then its data; or the
 * heap bitstring of OTP 27 that replaced it (ErlHeapBits): the same with MT_HEAPBITS_SUBTAG and
 * the size in bits (1 to 512). The VM writes the last data word only as far as the size: the
 * bytes after it keep what the memory held, the high bytes of a stale pointer as often as not,
 * which the data's last byte turns into an address inside the same block (bench/stale.exs finds
 * lost blocks kept so). Returns how many of the last word's bytes are data (1 to 7), its index in
 * *last; 0 when the n words at w are neither or the last word is all data. In OTP 25 and 26 the
 * bitstring's thing word is a ProcBin's, which agrees with its size only from 193 to 256 bytes:
 * then the word masked is its flags. */
#define MT_HEAPBIN_SUBTAG 0x24
#define MT_HEAPBITS_SUBTAG 0x20
unsigned mt_layout_heapbin(const uintptr_t *w, size_t n, size_t *last);

/* An Erlang fun of OTP 25 and 26 (ErlFunThing): the thing word MT_FUN_HEADER (arity 3, subtag
 * FUN), the fun's entry (a pointer), the next off-heap item (a pointer or NULL), a word whose two
 * low bytes are the fun's arity and its number of free variables, then its creator (a local pid,
 * a remote pid's box, or the atom external) and the free variables. The VM writes those two
 * bytes only: the word's other six keep what the memory held, the high bytes of a stale pointer
 * as often as not. Returns whether the n words at w start such a fun; its word MT_FUN_PADDED is
 * then data in its low two bytes only (MT_FUN_DATA). OTP 27's funs have no such word, and no header
 * equal to this one. */
#define MT_FUN_HEADER 0xD4
#define MT_FUN_PADDED 3
#define MT_FUN_DATA ((uintptr_t)0xFFFF)
int mt_layout_fun(const uintptr_t *w, size_t n);

/* An ERTS atom table entry (Atom, OTP 25 to 27): its hash bucket's next, its hash value, its
 * index, then len | latin1_chars << 16 | ord0 << 32 (its name's first bytes, c0 << 23 | c1 << 15
 * | c2 << 7 | c3 >> 1), and its name. The index is an int: the word's four high bytes are
 * padding, which keeps what the memory held before the atom was made, an old pointer's high half
 * as often as not; with an index in the low half it can make an address (atom 0x4300 under a
 * stale 0x7F1F reads 0x7F1F00004300). mt_layout_atom(): the name's length when the n words at w can
 * be an atom (a hash value below 2^28, a length of 1 to 1020 bytes that its latin1_chars agrees
 * with, a name that starts with a printable character), else 0. mt_layout_atom_named(): whether its
 * name, read, is the atom's (the atom table's hash of it, hashpjw with OTP's latin1 rule, is the
 * hash value, and its first bytes are ord0's); its word MT_ATOM_INDEX is then data in its low four
 * bytes only (MT_ATOM_INDEX_DATA). */
#define MT_ATOM_WORDS 5
#define MT_ATOM_INDEX 2
#define MT_ATOM_NAME_MAX 1020
#define MT_ATOM_INDEX_DATA ((uintptr_t)0xFFFFFFFF)
size_t mt_layout_atom(const uintptr_t *w, size_t n);
int mt_layout_atom_named(const uintptr_t *w, const unsigned char *name, size_t len);
/* Whether the word after w can be an atom's hash value and the third after it its lengths: the
 * test that passes most words over before mt_layout_atom(). */
#define MT_LAYOUT_ATOM_MAY(w)                                                                      \
    ((w)[1] - 1 < ((uint64_t)1 << 28) - 1 && (uint16_t)(w)[3] - 1u < MT_ATOM_NAME_MAX)

/* The end of a C string in a block without a record (one made before recording began: the
 * loader's library names, libc's time zone strings). Such a block is read to its usable size,
 * and a string allocated to its length leaves the bytes after its NUL as malloc handed them out:
 * with the NUL's word they make an address as often as the string's last bytes are an address's
 * low ones (a loader's "/lib/x86_64-linux-gnu/liblzma.so.5" ended so in a lost block).
 * mt_layout_string_end(): the index of the word that holds the NUL when the n words at w are a
 * string's block: printable text from its first byte, a whole word of it at least, up to a NUL,
 * or libc's time zone name, a 24-byte block {next, length, name} whose name has that length (3 to
 * 7 printable bytes) and its NUL; UINTPTR_MAX when they are not. A pointer's two high bytes are
 * zero, so a first word of text is none, though a shorter text may be one: the low bytes of an
 * address in a heap mapped at 0x5600_xxxx_xxxx are often four letters and a NUL. Text holds no
 * NUL, so no pointer lies before the NUL's word. mt_layout_text_mask(): the mask of the NUL's
 * word's bytes before its first NUL, the string's. */
uintptr_t mt_layout_string_end(const uintptr_t *w, size_t n);
uintptr_t mt_layout_text_mask(uintptr_t word);

/* The GDB JIT interface (GDB's manual, "JIT Compilation Interface"; the BEAM's JIT, LLVM and
 * LuaJIT register their code so): a global __jit_debug_descriptor {version, action, relevant
 * entry, first entry} heads a list of entries {next, previous, symfile address, symfile size}.
 * A symfile is data for a debugger, written as the JIT packs it (the BEAM's leaves padding and
 * malloc's rounding unwritten): nothing the program follows. Every entry on the list and its
 * symfile are reachable from the descriptor, a static, and their words are not read.
 * mt_layout_jit_descriptor(): the descriptor's address in the global scope, 0 when none. */
#define MT_JIT_FIRST 16 /* the descriptor's first entry */
#define MT_JIT_ENTRY 4  /* words of an entry: next, previous, symfile, symfile size */
#define MT_JIT_MAX 1000000
uintptr_t mt_layout_jit_descriptor(void);

/* The strings libc and the loader keep in blocks of their own, each made to its length: a loaded
 * object's path (the link map's l_name, which dl_iterate_phdr gives) and each locale category's
 * name (setlocale(category, NULL) returns the pointer the global locale holds). Such a block
 * holds text up to its NUL, and after it only what its chunk held before: nothing in it is a
 * pointer, and in a block without a record, read to its usable size, the words past the one
 * that holds the NUL are wholly that (a loader's "/mtrace/_build/test/lib/mtrace/priv/mtrace.so"
 * in a 56-byte block, the image's locale "C.UTF-8" in a 24-byte one, each kept lost buffers).
 * Writes up to max of their addresses, some perhaps no block's (a static "C"), into out, sorted;
 * returns how many. They are listed before the threads stop: an object closed since may have
 * had its name's block handed out again, so a block is taken for one of them only while
 * mt_layout_is_text() says its bytes are still text up to a NUL. */
#define MT_LAYOUT_STRINGS 256
size_t mt_layout_strings(uintptr_t *out, size_t max);
int mt_layout_is_text(const void *p, size_t len);

/* asmjit's JitAllocatorBlock (asmjit 1.9, the BEAM's JIT in OTP 25), one for each block of JIT
 * code: {tree and list links (4 words), pool, rx, rw, blockSize, flags | areaSize << 32, areaUsed
 * | largestUnusedArea << 32, searchStart | searchEnd << 32, usedBitVector, stopBitVector}. Its two
 * bit vectors, of areaSize bits each, are one malloc of twice areaSize / 8 bytes, which asmjit
 * zeroes to that size: bits, never pointers, and the chunk's last word past them (glibc's
 * rounding, read in a block without a record) keeps what the chunk held. OTP 27's asmjit makes them
 * part of the block's own malloc. mt_layout_jit_bits(): for the MT_JITB_WORDS words at w, the bytes
 * of each vector (areaSize / 8) when they are such a block: areaSize a multiple of 64, blockSize
 * areaSize units of a power of two from 16 to 64 KiB, the counts and the search range within the
 * area, and stopBitVector that many bytes past usedBitVector; else 0. */
#define MT_JITB_WORDS 13
#define MT_JITB_USED 11 /* the word of usedBitVector, stopBitVector's after it */
size_t mt_layout_jit_bits(const uintptr_t *w);
/* Whether the words at w can be one (an area of 64 bits or more, the vectors that far apart):
 * the first tests, which most words fail (zeros too), inline. */
#define MT_LAYOUT_JITB_MAY(w)                                                                      \
    ((w)[8] >> 38 && (w)[MT_JITB_USED + 1] - (w)[MT_JITB_USED] == (w)[8] >> 35)

/* An ERTS I/O queue (ErtsIOQueue: a port's output queue, OTP 25 to 27) with its vectors inline:
 * v_start, v_end, v_head, v_tail, five SysIOVecs {base, len}, then b_start, b_end, b_head,
 * b_tail and five binary pointers. The queue uses [head, tail) of each vector only: the other
 * entries hold what was sent long ago (the port of erl_child_setup's forker keeps such a word to
 * a block freed since, which a NIF's lost block then reuses). Returns MT_IOQ_WORDS when the n
 * words w at address at start such a queue (the vectors where v_start and b_start say, head and
 * tail inside them, on entry boundaries), and sets bit i of *live for each word i that can hold a
 * pointer; else 0. */
#define MT_IOQ_WORDS 23
size_t mt_layout_ioqueue(const uintptr_t *w, size_t n, uintptr_t at, uint32_t *live);

/* A port of the VM's (struct _erl_drv_port, OTP 25 to 27), told by the words after its I/O queue
 * (ErtsIOQueue above): the name it was opened with, which create_port() puts at the end of the
 * port's own block (a NUL-terminated printable string past the struct), then drv_ptr, drv_data,
 * os_pid, suspended, linebuf, state and control_flags, port_data_lock, psd, and `reds`: an int
 * the VM writes only while a driver callback runs, its word's other four bytes never (what a
 * chunk held before keeps a block there). mt_layout_port_reds(): given the n words w at address
 * at that follow an I/O queue, MT_PORT_REDS when they are such a port's, else 0. */
#define MT_PORT_REDS 9 /* the reds word's index in w */
#define MT_PORT_REDS_DATA ((uintptr_t)0xFFFFFFFF)
size_t mt_layout_port_reds(const uintptr_t *w, size_t n, uintptr_t at);

/* A block's header word in the VM's carriers (erl_alloc_util.h, OTP 25 to 27): flags in bits 0
 * to 2 (this block free, the one before it free, the last of its carrier; all three: the block of
 * a single-block carrier) and 63 (an allocation tag); an allocated block's size in bits 3 to 39,
 * and above them, in a multi-block carrier, the 16 KiB units from its carrier's start (the carrier
 * starts on a page within that unit); a free block's size in all the others. */
#define MT_BLK_FREE 1u
#define MT_BLK_PREV_FREE 2u
#define MT_BLK_LAST 4u
#define MT_BLK_SBC 7u
#define MT_BLK_FLAGS ((uintptr_t)7 | (uintptr_t)1 << 63)
#define MT_BLK_ALLOCATED_SIZE ((((uintptr_t)1 << 40) - 1) & ~(uintptr_t)7)
#define MT_BLK_MBC_OFFSET 40
#define MT_BLK_MBC_UNIT 14

/* The free blocks of an ERTS multi-block carrier (OTP 25 to 27). A carrier starts with {its
 * size | flags, next, prev, allocator | flags, ...}; its blocks follow, each headed by a word of
 * its size and flags (this block free, the one before free, the last); a free block's next word
 * is its carrier's address, and (but for the last block) its last word its size. A free block is
 * the remains of what the VM freed (a process's heap before a collection, a dead process's heap,
 * a deleted ETS object, a NIF's enif_alloc block): its words are stale, and one that held a
 * Binary's or a NIF block's address keeps what malloc gave that chunk to since. Where the n words
 * at w, a copy of the memory at `at`, are such a carrier, all of it, walked from its first block
 * to its last, ending at its size, with every block's flags and every free block's words agreeing,
 * this zeroes the free blocks' words past those two and returns how many bytes it zeroed, having
 * shown each free block's words to seen (when not NULL) first; else it returns 0 and changes
 * nothing. mt_layout_carrier_size(): the size a carrier whose first word is
 * head would have (a whole number of pages, at least MT_CARRIER_SMALL), else 0. */
#define MT_CARRIER_SMALL ((size_t)64 << 10)
size_t mt_layout_carrier_size(uintptr_t head);
typedef void (*mt_layout_seen)(void *arg, const uintptr_t *w, size_t n, uintptr_t at);
size_t mt_layout_carrier_free(uintptr_t *w, size_t n, uintptr_t at, mt_layout_seen seen, void *arg);

/* Whether a carrier whose first words are head (at address at) is one the VM still holds (OTP 25
 * to 27); only single-block carriers are told. A single-block carrier says so in its first word's
 * flags, and lies on its allocator's doubly linked list: its second and third words are its next
 * and previous carriers, 0 at the list's ends, where the allocator's own list head ({first, last},
 * words 44 and 45 of its struct in OTP 25 and 27; learnt among its first MT_ALLOCTR_WORDS from the
 * first allocator whose words hold a whole list) names it instead. When the VM lets one go, it is
 * unlinked, and its memory segment cache (+MMmcs, 10 segments by default) keeps it mapped as it
 * was: its block (most often a process heap or a NIF's heap fragment before a collection: the
 * objects the collector moved, their words stale) whole, and its links as they were, which nothing
 * returns any more. Held when a neighbour names it back, or the walk of the allocator's list from
 * its first meets it; let go of only when that list is whole without it (empty, or each carrier
 * the allocator's, linked both ways, ending at the head's last). Anything unread or unproven says
 * held, so that a carrier a stopped thread was moving or relinking (a neighbour's link already
 * changed, or still naming an address unmapped since) is read. read(a, to, len, arg): 0, or -1
 * when any byte cannot be read; scratch holds MT_ALLOCTR_WORDS words. */
#define MT_CARRIER_SBC ((uintptr_t)2)
#define MT_ALLOCTR_WORDS 1024
typedef int (*mt_layout_read)(uintptr_t a, void *to, size_t len, void *arg);
/* An mt_layout_read of the process's own memory, with mt_proc_read (proc.h); arg unused. */
int mt_layout_read_proc(uintptr_t a, void *to, size_t len, void *arg);
int mt_layout_carrier_held(const uintptr_t head[4], uintptr_t at, mt_layout_read read, void *arg,
                           uintptr_t *scratch);

/* The size of the carrier at c when its first words, read into w, are a carrier's header: its
 * first word a whole number of pages with the flags of a single-block carrier or not, as sbc
 * says; else 0 (as when they cannot be read). */
size_t mt_layout_carrier_head(uintptr_t c, int sbc, uintptr_t w[4], mt_layout_read read, void *arg);

/* The VM's allocator whose carrier holds addr, in the anonymous mapping [lo, hi), named as the
 * VM names it ("eheap_alloc": process heaps; "ets_alloc", "binary_alloc", ...) into name (len
 * bytes); returns 1, or 0 when no carrier proves itself there. An ERTS carrier (OTP 25 to 27)
 * starts on a page (a multi-block one mostly on a 256 KiB boundary, but not always) with
 * {its size | flags, next, prev, allocator | flags}, and the allocator's first words hold its
 * name_prefix ("eheap_"): a pointer to a short lower-case word that ends in '_'. The carrier's
 * start is looked for page by page, at most MT_CARRIER_REACH back from addr. Reads memory with
 * mt_proc_read (proc.h): after the threads go on, a carrier may be gone, and nothing faults. */
#define MT_CARRIER_REACH ((uintptr_t)64 << 20)
int mt_layout_carrier(uintptr_t addr, uintptr_t lo, uintptr_t hi, char *name, size_t len);

/* The name_prefix of the allocator at al (a carrier's fourth word, its flags cleared), such as
 * "eheap_", into prefix: 1, or 0 when its first words name none. read as for
 * mt_layout_carrier_held. */
int mt_layout_allocator_prefix(uintptr_t al, char prefix[16], mt_layout_read read, void *arg);

/* The allocator of Erlang terms: process heaps and stacks, heap fragments, messages. In its
 * carriers a list or boxed term points at terms, an immediate at nothing, and a raw word that
 * holds the address of memory malloc gave (a BinRef's val, a NIF's handle in a binary's bytes)
 * holds it as C keeps a pointer, aligned: only a word whose two low bits are 0 is taken to keep a
 * block there. A stale word whose low bits are tagged (left in a stack slot never written, or in a
 * heap's garbage) keeps nothing. */
#define MT_TERMS_PREFIX "eheap_"
#define MT_TERMS_UNTAG ((uintptr_t)3)

#endif
