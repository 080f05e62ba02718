/* rules.h: the mark's rules, in one table. A conservative mark takes every aligned word of
 * reachable memory for a pointer; a rule names words that are no pointer the program follows
 * (bytes never written since the memory was handed out, data kept for a debugger, what a freed
 * object left in an allocator's free list), so that such a word, equal to a lost block's address
 * by chance, does not keep that block.
 *
 * A rule discounts a word only where the memory is proved to be the structure it knows, never by
 * its shape alone: each row says where it may apply (mt_rule_row.where), and the mark applies it
 * only there. Erlang layouts apply only in a BEAM of a release they know (beam_vm.h), and only in
 * the VM's own carriers of the right allocator, or in a block the VM itself allocated, or one a
 * live Erlang term proves; a shape met anywhere else (a C library's block, a static, a thread's
 * stack, a register, a block without a record) discounts nothing.
 *
 * Every discounted word is counted by rule, and one that points into a block is noted: a lost
 * block that such a word pointed into (or that a lost block so pointed into reaches) is lost only
 * possibly, with that rule named, where every other is lost definitely: no word of reachable
 * memory, discounted or not, points into it (reach.h).
 *
 * Contract
 * - The table is constant; any thread, no lock, no allocation.
 */
#ifndef MTRACE_RULES_H
#define MTRACE_RULES_H

enum mt_rule {
    MT_RULE_NONE, /* no rule: a lost block no discounted word points into */
    MT_RULE_HEAP_BINARY,
    MT_RULE_FUN_PADDING,
    MT_RULE_ATOM_INDEX,
    MT_RULE_IO_QUEUE,
    MT_RULE_PORT_REDS,
    MT_RULE_DEAD_PROCBIN,
    MT_RULE_DEAD_MREF,
    MT_RULE_DEAD_BINREF,
    MT_RULE_MATCH_STATE,
    MT_RULE_SUB_BITS,
    MT_RULE_TERM_TAGS,
    MT_RULE_JIT_BIT_VECTORS,
    MT_RULE_BINARY_SLACK,
    MT_RULE_LOADER_SEGMENT,
    MT_RULE_STRING_END,
    MT_RULE_LIBC_STRINGS,
    MT_RULE_JIT_SYMFILES,
    MT_RULE_CHUNK_HEADER,
    MT_RULE_FREE_VM_BLOCKS,
    MT_RULE_RELEASED_CARRIERS,
    MT_RULE_PROCESS_HEAP_GAPS,
    MT_RULE_ID_LISTS,
    MT_RULE_FIX_LISTS,
    MT_RULE_DELAYED_FREES,
    MT_RULE_FLOAT_REGISTERS,
    MT_RULE_EXITED_STACKS,
    MT_RULE_SIGNAL_STACKS,
    MT_RULE_REMEMBERED,
    MT_RULES
};

/* Where a rule may apply: the memory the word lies in. */
enum mt_rule_place {
    MT_PLACE_TERMS = 1,       /* a carrier of Erlang terms: eheap_alloc, ets_alloc, literal_alloc */
    MT_PLACE_VM_OWN = 2,      /* a carrier of the VM's own structs: not driver_ or binary_alloc's */
    MT_PLACE_VM_BLOCK = 4,    /* a recorded block whose first caller is the VM's own code */
    MT_PLACE_BINARY = 8,      /* a block a live ProcBin or BinRef in a carrier of terms points at */
    MT_PLACE_UNRECORDED = 16, /* a block without a record that is a C string from its first byte */
    MT_PLACE_LISTED = 32,     /* a structure a symbol or the loader names */
    MT_PLACE_LIBC = 64,       /* libc's own data */
    MT_PLACE_VM_TABLES = 128, /* found from the VM's exported tables (beam_heaps.h, beam_alloc.h) */
    MT_PLACE_THREADS = 256,   /* what the kernel and glibc say of threads */
    MT_PLACE_MTRACE = 512,    /* mtrace's own records */
    MT_PLACE_VM_DATA =
        1024,               /* a carrier of driver_alloc or binary_alloc: NIFs' and drivers' data */
    MT_PLACE_TAGGED = 2048, /* a carrier of eheap_alloc, where terms are tagged words */
};

struct mt_rule_row {
    const char *name;   /* as leaks_info/1 and the sites name it */
    unsigned where;     /* mt_rule_place bits */
    unsigned otp;       /* beam_vm.h's release bits where it applies; 0: any process */
    const char *proves; /* what makes the memory that structure */
};

extern const struct mt_rule_row mt_rules[MT_RULES];

#endif
