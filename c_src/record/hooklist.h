/* hooklist.h: the one list of the allocation functions mtrace interposes.
 *
 * MT_FOR_EACH_HOOK(X) expands X(name, KIND) once per function, in the order of the recorder's
 * kinds (recorder.h) and of stats/0's call counters. Everything that names the hooked functions
 * derives from it: the hooks' own addresses (hooks.c), the recorder's kinds and their names
 * (recorder.[ch]), the NIF's stats keys; the version script is checked against it (c_test), and
 * the attach patcher will rewrite exactly these names.
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
