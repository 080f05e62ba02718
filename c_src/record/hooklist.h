/* hooklist.h: the one list of the allocation functions mtrace interposes.
 *
 * MT_FOR_EACH_HOOK(X) expands X(name, KIND) once per function, in the order of the recorder's
 * kinds (recorder.h) and of stats/0's call counters. Everything that names the hooked functions
 * derives from it: the hooks' own addresses (hooks.c), the recorder's kinds and their names
 * (recorder.[ch]), the NIF's stats keys; the version script is checked against it (c_test), and
 * the attach patcher will rewrite exactly these names.
 *
 * MT_FOR_EACH_EXTENDED(X) is the allocators' own API beyond the malloc family (extended.h):
 * jemalloc's *allocx, tcmalloc's tc_*, mimalloc's mi_* (its heaps' among them), the standard names
 * glibc lacks, and C++'s operators new and delete, which each of the three defines. A program
 * linked with one of them calls these past mtrace's exported names; they are reached by rewriting
 * words, as the NIF API is. X(name, SHAPE): SHAPE says which argument is the block and which the
 * size (extended.c).
 *
 * MT_FOR_EACH_NIF_HOOK(X) is the NIF API's share (nif_hooks.h): the functions NIF libraries call
 * in the VM, reached by rewriting their words only (a preloaded definition of them would never
 * be called), with kinds after the malloc family's.
 *
 * Contract: a pure preprocessor list; no code, no allocation.
 */
#ifndef MTRACE_HOOKLIST_H
#define MTRACE_HOOKLIST_H

#define MT_FOR_EACH_HOOK(X)                                                                        \
    X(malloc, MT_MALLOC)                                                                           \
    X(calloc, MT_CALLOC)                                                                           \
    X(realloc, MT_REALLOC)                                                                         \
    X(reallocarray, MT_REALLOCARRAY)                                                               \
    X(free, MT_FREE)                                                                               \
    X(posix_memalign, MT_POSIX_MEMALIGN)                                                           \
    X(aligned_alloc, MT_ALIGNED_ALLOC)                                                             \
    X(memalign, MT_MEMALIGN)                                                                       \
    X(valloc, MT_VALLOC)                                                                           \
    X(pvalloc, MT_PVALLOC)                                                                         \
    X(strdup, MT_STRDUP)                                                                           \
    X(strndup, MT_STRNDUP)

#define MT_FOR_EACH_EXTENDED(X)                                                                    \
    X(mallocx, ALLOC)                                                                              \
    X(rallocx, REALLOCX)                                                                           \
    X(xallocx, XALLOCX)                                                                            \
    X(dallocx, FREE)                                                                               \
    X(sdallocx, FREE)                                                                              \
    X(tc_malloc, ALLOC)                                                                            \
    X(tc_malloc_skip_new_handler, ALLOC)                                                           \
    X(tc_calloc, CALLOC)                                                                           \
    X(tc_memalign, ALLOC_B)                                                                        \
    X(tc_posix_memalign, POSIX)                                                                    \
    X(tc_valloc, ALLOC)                                                                            \
    X(tc_pvalloc, ALLOC)                                                                           \
    X(tc_realloc, REALLOC)                                                                         \
    X(tc_free, FREE)                                                                               \
    X(tc_free_sized, FREE)                                                                         \
    X(tc_cfree, FREE)                                                                              \
    X(tc_new, NEW)                                                                                 \
    X(tc_newarray, NEW)                                                                            \
    X(tc_new_nothrow, ALLOC)                                                                       \
    X(tc_newarray_nothrow, ALLOC)                                                                  \
    X(tc_new_aligned, NEW)                                                                         \
    X(tc_newarray_aligned, NEW)                                                                    \
    X(tc_new_aligned_nothrow, ALLOC)                                                               \
    X(tc_newarray_aligned_nothrow, ALLOC)                                                          \
    X(tc_delete, FREE)                                                                             \
    X(tc_deletearray, FREE)                                                                        \
    X(tc_delete_sized, FREE)                                                                       \
    X(tc_deletearray_sized, FREE)                                                                  \
    X(tc_delete_nothrow, FREE)                                                                     \
    X(tc_deletearray_nothrow, FREE)                                                                \
    X(tc_delete_aligned, FREE)                                                                     \
    X(tc_deletearray_aligned, FREE)                                                                \
    X(tc_delete_sized_aligned, FREE)                                                               \
    X(tc_deletearray_sized_aligned, FREE)                                                          \
    X(tc_delete_aligned_nothrow, FREE)                                                             \
    X(tc_deletearray_aligned_nothrow, FREE)                                                        \
    X(mi_malloc, ALLOC)                                                                            \
    X(mi_zalloc, ALLOC)                                                                            \
    X(mi_malloc_small, ALLOC)                                                                      \
    X(mi_zalloc_small, ALLOC)                                                                      \
    X(mi_calloc, CALLOC)                                                                           \
    X(mi_mallocn, CALLOC)                                                                          \
    X(mi_malloc_aligned, ALLOC)                                                                    \
    X(mi_malloc_aligned_at, ALLOC)                                                                 \
    X(mi_zalloc_aligned, ALLOC)                                                                    \
    X(mi_zalloc_aligned_at, ALLOC)                                                                 \
    X(mi_calloc_aligned, CALLOC)                                                                   \
    X(mi_calloc_aligned_at, CALLOC)                                                                \
    X(mi_memalign, ALLOC_B)                                                                        \
    X(mi_aligned_alloc, ALLOC_B)                                                                   \
    X(mi_posix_memalign, POSIX)                                                                    \
    X(mi_valloc, ALLOC)                                                                            \
    X(mi_pvalloc, ALLOC)                                                                           \
    X(mi_strdup, STRDUP)                                                                           \
    X(mi_strndup, STRNDUP)                                                                         \
    X(mi_new, NEW)                                                                                 \
    X(mi_new_nothrow, ALLOC)                                                                       \
    X(mi_new_aligned, NEW)                                                                         \
    X(mi_new_aligned_nothrow, ALLOC)                                                               \
    X(mi_new_n, NEW_N)                                                                             \
    X(mi_realloc, REALLOC)                                                                         \
    X(mi_rezalloc, REALLOC)                                                                        \
    X(mi_realloc_aligned, REALLOC)                                                                 \
    X(mi_realloc_aligned_at, REALLOC)                                                              \
    X(mi_rezalloc_aligned, REALLOC)                                                                \
    X(mi_rezalloc_aligned_at, REALLOC)                                                             \
    X(mi_reallocn, REALLOCN)                                                                       \
    X(mi_recalloc, REALLOCN)                                                                       \
    X(mi_recalloc_aligned, REALLOCN)                                                               \
    X(mi_recalloc_aligned_at, REALLOCN)                                                            \
    X(mi_reallocarray, REALLOCN)                                                                   \
    X(mi_reallocf, REALLOCF)                                                                       \
    X(mi_reallocarr, REALLOCARR)                                                                   \
    X(mi_expand, REALLOCX)                                                                         \
    X(mi__expand, REALLOCX)                                                                        \
    X(mi_aligned_recalloc, REALLOCN)                                                               \
    X(mi_aligned_offset_recalloc, REALLOCN)                                                        \
    X(mi_new_realloc, NEW_REALLOC)                                                                 \
    X(mi_new_reallocn, NEW_REALLOCN)                                                               \
    X(_aligned_malloc, ALLOC)                                                                      \
    X(mi_mbsdup, STRDUP)                                                                           \
    X(mi_wcsdup, WCSDUP)                                                                           \
    X(mi_realpath, REALPATH)                                                                       \
    X(mi_dupenv_s, DUPENV)                                                                         \
    X(mi_wdupenv_s, WDUPENV)                                                                       \
    X(mi_heap_malloc, HEAP_ALLOC)                                                                  \
    X(mi_heap_zalloc, HEAP_ALLOC)                                                                  \
    X(mi_heap_malloc_small, HEAP_ALLOC)                                                            \
    X(mi_heap_malloc_aligned, HEAP_ALLOC)                                                          \
    X(mi_heap_malloc_aligned_at, HEAP_ALLOC)                                                       \
    X(mi_heap_zalloc_aligned, HEAP_ALLOC)                                                          \
    X(mi_heap_zalloc_aligned_at, HEAP_ALLOC)                                                       \
    X(mi_heap_calloc, HEAP_CALLOC)                                                                 \
    X(mi_heap_mallocn, HEAP_CALLOC)                                                                \
    X(mi_heap_calloc_aligned, HEAP_CALLOC)                                                         \
    X(mi_heap_calloc_aligned_at, HEAP_CALLOC)                                                      \
    X(mi_heap_alloc_new, HEAP_NEW)                                                                 \
    X(mi_heap_alloc_new_n, HEAP_NEW_N)                                                             \
    X(mi_heap_strdup, HEAP_STRDUP)                                                                 \
    X(mi_heap_strndup, HEAP_STRNDUP)                                                               \
    X(mi_heap_realloc, HEAP_REALLOC)                                                               \
    X(mi_heap_rezalloc, HEAP_REALLOC)                                                              \
    X(mi_heap_realloc_aligned, HEAP_REALLOC)                                                       \
    X(mi_heap_realloc_aligned_at, HEAP_REALLOC)                                                    \
    X(mi_heap_rezalloc_aligned, HEAP_REALLOC)                                                      \
    X(mi_heap_rezalloc_aligned_at, HEAP_REALLOC)                                                   \
    X(mi_heap_reallocn, HEAP_REALLOCN)                                                             \
    X(mi_heap_recalloc, HEAP_REALLOCN)                                                             \
    X(mi_heap_recalloc_aligned, HEAP_REALLOCN)                                                     \
    X(mi_heap_recalloc_aligned_at, HEAP_REALLOCN)                                                  \
    X(mi_heap_reallocf, HEAP_REALLOCF)                                                             \
    X(mi_heap_realpath, HEAP_REALPATH)                                                             \
    X(mi_heap_destroy, DESTROY)                                                                    \
    X(mi_heap_visit_blocks, PASS)                                                                  \
    X(mi_free, FREE)                                                                               \
    X(mi_cfree, FREE)                                                                              \
    X(mi_free_size, FREE)                                                                          \
    X(mi_free_aligned, FREE)                                                                       \
    X(mi_free_size_aligned, FREE)                                                                  \
    X(cfree, FREE)                                                                                 \
    X(vfree, FREE)                                                                                 \
    X(reallocf, REALLOCF)                                                                          \
    X(reallocarr, REALLOCARR)                                                                      \
    X(_Znwm, NEW)                                                                                  \
    X(_Znam, NEW)                                                                                  \
    X(_ZnwmRKSt9nothrow_t, ALLOC)                                                                  \
    X(_ZnamRKSt9nothrow_t, ALLOC)                                                                  \
    X(_ZnwmSt11align_val_t, NEW)                                                                   \
    X(_ZnamSt11align_val_t, NEW)                                                                   \
    X(_ZnwmSt11align_val_tRKSt9nothrow_t, ALLOC)                                                   \
    X(_ZnamSt11align_val_tRKSt9nothrow_t, ALLOC)                                                   \
    X(_ZdlPv, FREE)                                                                                \
    X(_ZdaPv, FREE)                                                                                \
    X(_ZdlPvm, FREE)                                                                               \
    X(_ZdaPvm, FREE)                                                                               \
    X(_ZdlPvRKSt9nothrow_t, FREE)                                                                  \
    X(_ZdaPvRKSt9nothrow_t, FREE)                                                                  \
    X(_ZdlPvSt11align_val_t, FREE)                                                                 \
    X(_ZdaPvSt11align_val_t, FREE)                                                                 \
    X(_ZdlPvmSt11align_val_t, FREE)                                                                \
    X(_ZdaPvmSt11align_val_t, FREE)                                                                \
    X(_ZdlPvSt11align_val_tRKSt9nothrow_t, FREE)                                                   \
    X(_ZdaPvSt11align_val_tRKSt9nothrow_t, FREE)

#define MT_FOR_EACH_NIF_HOOK(X)                                                                    \
    X(enif_alloc, MT_ENIF_ALLOC)                                                                   \
    X(enif_realloc, MT_ENIF_REALLOC)                                                               \
    X(enif_free, MT_ENIF_FREE)                                                                     \
    X(enif_alloc_resource, MT_ENIF_ALLOC_RESOURCE)                                                 \
    X(enif_open_resource_type, MT_ENIF_OPEN_RESOURCE_TYPE)                                         \
    X(enif_open_resource_type_x, MT_ENIF_OPEN_RESOURCE_TYPE_X)                                     \
    X(enif_init_resource_type, MT_ENIF_INIT_RESOURCE_TYPE)                                         \
    X(enif_alloc_binary, MT_ENIF_ALLOC_BINARY)                                                     \
    X(enif_realloc_binary, MT_ENIF_REALLOC_BINARY)                                                 \
    X(enif_release_binary, MT_ENIF_RELEASE_BINARY)                                                 \
    X(enif_make_binary, MT_ENIF_MAKE_BINARY)                                                       \
    X(enif_ioq_enq_binary, MT_ENIF_IOQ_ENQ_BINARY)

#endif
