/* rules.c: the mark's rules (see rules.h). docs/rules.md lists this table; test/rules_test.exs
 * checks that it does. */
#include "mark/rules.h"

#include "mark/beam_vm.h"

const struct mt_rule_row mt_rules[MT_RULES] = {
    [MT_RULE_NONE] = {"none", 0, 0, "-"},
    [MT_RULE_HEAP_BINARY] =
        {"heap_binary", MT_PLACE_TERMS, MT_OTP_ALL,
         "a heap binary's thing word and size agree; its last word's bytes past "
         "the size were never written"},
    [MT_RULE_FUN_PADDING] = {"fun_padding", MT_PLACE_TERMS, MT_OTP_25_26,
                             "a fun's thing word, entry and creator; six bytes of its arity word "
                             "are padding"},
    [MT_RULE_ATOM_INDEX] = {"atom_index", MT_PLACE_VM_OWN | MT_PLACE_VM_DATA | MT_PLACE_VM_BLOCK,
                            MT_OTP_ALL,
                            "an atom entry whose name hashes to its hash value; its index's high "
                            "half is padding"},
    [MT_RULE_IO_QUEUE] = {"io_queue", MT_PLACE_VM_OWN | MT_PLACE_VM_DATA | MT_PLACE_VM_BLOCK,
                          MT_OTP_ALL,
                          "an I/O queue whose vectors point into itself; entries outside [head, "
                          "tail) were sent long ago"},
    [MT_RULE_PORT_REDS] = {"port_reds", MT_PLACE_VM_OWN | MT_PLACE_VM_DATA | MT_PLACE_VM_BLOCK,
                           MT_OTP_ALL,
                           "a port after its I/O queue, named by a string at its block's end; "
                           "its reds word's high half is never written"},
    [MT_RULE_DEAD_PROCBIN] = {"dead_procbin", MT_PLACE_TERMS, MT_OTP_25_26,
                              "a ProcBin whose bytes are its val + 24, where no live Binary is any "
                              "more"},
    [MT_RULE_DEAD_MREF] = {"dead_mref", MT_PLACE_TERMS, MT_OTP_25_26,
                           "a magic reference whose magic binary is no longer live"},
    [MT_RULE_DEAD_BINREF] = {"dead_binref", MT_PLACE_TERMS, MT_OTP27,
                             "a BinRef whose Binary is no longer live"},
    [MT_RULE_MATCH_STATE] = {"match_state", MT_PLACE_TERMS, MT_OTP_25_26,
                             "a match state's base, which its orig term keeps"},
    [MT_RULE_SUB_BITS] = {"sub_bits", MT_PLACE_TERMS, MT_OTP27,
                          "a sub-bitstring's base, which its orig term keeps"},
    [MT_RULE_TERM_TAGS] = {"term_tags", MT_PLACE_TAGGED, MT_OTP_ALL,
                           "in eheap_alloc's carriers, a word with tag bits is a term, not a C "
                           "pointer"},
    [MT_RULE_JIT_BIT_VECTORS] = {"jit_bit_vectors", MT_PLACE_VM_BLOCK, MT_OTP_25_26,
                                 "asmjit's block, allocated by the VM, whose bit vectors are one "
                                 "block of their size"},
    [MT_RULE_BINARY_SLACK] = {"binary_slack", MT_PLACE_BINARY, MT_OTP_ALL,
                              "a Binary that a live reference names; its header's unwritten words "
                              "and the bytes past its size"},
    [MT_RULE_LOADER_SEGMENT] = {"loader_segment", MT_PLACE_LISTED, 0,
                                "a segment of _dl_find_object's data whose first entry the loader "
                                "itself returns"},
    [MT_RULE_STRING_END] = {"string_end", MT_PLACE_UNRECORDED, 0,
                            "a block without a record that is text from its first byte, a word of "
                            "it at least; the bytes after the NUL in the NUL's word"},
    [MT_RULE_LIBC_STRINGS] = {"libc_strings", MT_PLACE_LISTED, 0,
                              "the loader's object names and the locale's names, listed by "
                              "dl_iterate_phdr and setlocale, still text"},
    [MT_RULE_JIT_SYMFILES] = {"jit_symfiles", MT_PLACE_LISTED, 0,
                              "the entries and symfiles of __jit_debug_descriptor's list"},
    [MT_RULE_CHUNK_HEADER] = {"chunk_header", MT_PLACE_LIBC, 0,
                              "a word of libc's data that points at the next chunk's header, "
                              "malloc's own bookkeeping"},
    [MT_RULE_FREE_VM_BLOCKS] = {"free_vm_blocks",
                                MT_PLACE_VM_OWN | MT_PLACE_TERMS | MT_PLACE_VM_DATA, MT_OTP_ALL,
                                "a carrier of the VM's walked whole from its first block to its "
                                "end; its free blocks' words"},
    [MT_RULE_RELEASED_CARRIERS] = {"released_carriers",
                                   MT_PLACE_VM_OWN | MT_PLACE_TERMS | MT_PLACE_VM_DATA, MT_OTP_ALL,
                                   "a single-block carrier its allocator's whole list leaves out"},
    [MT_RULE_PROCESS_HEAP_GAPS] = {"process_heap_gaps", MT_PLACE_VM_TABLES, MT_OTP_ALL,
                                   "the process table's heaps, between heap top and stack top"},
    [MT_RULE_ID_LISTS] = {"id_lists", MT_PLACE_VM_TABLES, MT_OTP_ALL,
                          "the process and port tables' free id lists"},
    [MT_RULE_FIX_LISTS] = {"fix_lists", MT_PLACE_VM_TABLES, MT_OTP_ALL,
                           "fix_alloc's free lists, from erts_allctr_thr_spec"},
    [MT_RULE_DELAYED_FREES] = {"delayed_frees", MT_PLACE_VM_TABLES, MT_OTP_ALL,
                               "the allocators' delayed-dealloc queues, from "
                               "erts_allctr_thr_spec"},
    [MT_RULE_FLOAT_REGISTERS] = {"float_registers", MT_PLACE_VM_TABLES, MT_OTP_ALL,
                                 "each scheduler's JIT float registers, found by a NIF's F0"},
    [MT_RULE_EXITED_STACKS] = {"exited_stacks", MT_PLACE_THREADS, 0,
                               "a stack whose struct pthread's tid the kernel cleared"},
    [MT_RULE_SIGNAL_STACKS] = {"signal_stacks", MT_PLACE_THREADS, 0,
                               "the alternate signal stacks sigaltstack names"},
    [MT_RULE_REMEMBERED] = {"remembered", MT_PLACE_MTRACE, 0,
                            "a block an earlier complete scan found lost"},
};
