/* extended.c: the allocator's own API beyond the malloc family (extended.h). */
#include "record/extended.h"

#include <stddef.h>
#include <string.h>

#include "record/recorder.h"

#define ORIGINAL(name, shape) static mt_word_fn original_##name;
MT_FOR_EACH_EXTENDED(ORIGINAL)

#define ARGS uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d
#define CALL(name) __atomic_load_n(&original_##name, __ATOMIC_ACQUIRE)(a, b, c, d)

/* An allocation of size bytes: the allocator's answer, recorded. The allocator runs inside the
 * guard, as under the malloc family's hooks: a call of its own through the malloc family's names
 * is not recorded a second time. */
#define ALLOCATED(name, size)                                                                      \
    do {                                                                                           \
        size_t size_ = (size);                                                                     \
        if (!mt_enter(MT_EXTENDED_ALLOC)) return CALL(name);                                       \
        uintptr_t p_ = CALL(name);                                                                 \
        mt_alloc_done((void *)p_, size_, &MT_SITE(name));                                          \
        return p_;                                                                                 \
    } while (0)

/* The same for a function that may throw (operator new): recorded once it has answered, since a
 * throw would leave the guard held. */
#define NEWED(name, size)                                                                          \
    do {                                                                                           \
        size_t size_ = (size);                                                                     \
        uintptr_t p_ = CALL(name);                                                                 \
        if (mt_enter(MT_EXTENDED_ALLOC)) mt_alloc_done((void *)p_, size_, &MT_SITE(name));         \
        return p_;                                                                                 \
    } while (0)

static inline size_t product(uintptr_t count, uintptr_t n)
{
    size_t bytes;
    return __builtin_mul_overflow(count, n, &bytes) ? 0 : bytes;
}

/* A block p moved to one of size bytes; keep: whether a NULL answer leaves p live. */
#define REALLOCATED(name, p, size, keep)                                                           \
    do {                                                                                           \
        struct mt_record old_;                                                                     \
        if (!mt_enter(MT_EXTENDED_REALLOC)) {                                                      \
            int had_ = mt_take_unentered((void *)(p), &old_);                                      \
            uintptr_t q_ = CALL(name);                                                             \
            if (had_ && !q_ && (keep)) mt_put_back_unentered(&old_);                               \
            return q_;                                                                             \
        }                                                                                          \
        int had_ = mt_take((void *)(p), &old_);                                                    \
        uintptr_t q_ = CALL(name);                                                                 \
        mt_realloc_done((void *)q_, (size), &MT_SITE(name), had_ && (keep), &old_);                \
        return q_;                                                                                 \
    } while (0)

/* size in the first argument (mallocx, tc_malloc, mi_malloc_aligned, nothrow new...) */
#define HOOK_ALLOC(name)                                                                           \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        ALLOCATED(name, a);                                                                        \
    }
#define HOOK_NEW(name)                                                                             \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        NEWED(name, a);                                                                            \
    }
#define HOOK_NEW_N(name)                                                                           \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        NEWED(name, product(a, b));                                                                \
    }
/* size in the second (tc_memalign, mi_aligned_alloc) */
#define HOOK_ALLOC_B(name)                                                                         \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        ALLOCATED(name, b);                                                                        \
    }
/* count and size (tc_calloc, mi_mallocn, mi_calloc_aligned) */
#define HOOK_CALLOC(name)                                                                          \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        ALLOCATED(name, product(a, b));                                                            \
    }
#define HOOK_STRDUP(name)                                                                          \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        ALLOCATED(name, strlen((const char *)a) + 1);                                              \
    }
#define HOOK_STRNDUP(name)                                                                         \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        ALLOCATED(name, strnlen((const char *)a, b) + 1);                                          \
    }
/* posix_memalign's shape: the block through the first argument, the size in the third */
#define HOOK_POSIX(name)                                                                           \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        if (!mt_enter(MT_EXTENDED_ALLOC)) return CALL(name);                                       \
        int rc = (int)CALL(name);                                                                  \
        mt_alloc_done(rc == 0 ? *(void **)a : NULL, c, &MT_SITE(name));                            \
        return (uintptr_t)(unsigned)rc;                                                            \
    }
/* the record goes first, and the allocator frees inside the guard */
#define HOOK_FREE(name)                                                                            \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        if (!mt_enter(MT_EXTENDED_FREE)) {                                                         \
            mt_forget_unentered((void *)a);                                                        \
            return CALL(name);                                                                     \
        }                                                                                          \
        struct mt_record old;                                                                      \
        mt_take((void *)a, &old);                                                                  \
        uintptr_t r = CALL(name);                                                                  \
        mt_leave();                                                                                \
        return r;                                                                                  \
    }
/* realloc's semantics: a NULL answer to a size of 0 freed the block */
#define HOOK_REALLOC(name)                                                                         \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        REALLOCATED(name, a, b, b != 0);                                                           \
    }
/* rallocx: NULL is a failure, the block stays */
#define HOOK_REALLOCX(name)                                                                        \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        REALLOCATED(name, a, b, 1);                                                                \
    }
/* count and size (mi_reallocn, mi_recalloc, mi_reallocarray): an overflow fails, the block stays */
#define HOOK_REALLOCN(name)                                                                        \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        REALLOCATED(name, a, product(b, c), b &&c);                                                \
    }
/* reallocf: the block is freed when the reallocation fails */
#define HOOK_REALLOCF(name)                                                                        \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        REALLOCATED(name, a, b, 0);                                                                \
    }
/* reallocarr(&p, count, size): the block through the first argument, 0 when it moved */
#define HOOK_REALLOCARR(name)                                                                      \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        void **at = (void **)a;                                                                    \
        struct mt_record old;                                                                      \
        if (!mt_enter(MT_EXTENDED_REALLOC)) {                                                      \
            int had = mt_take_unentered(*at, &old);                                                \
            int rc = (int)CALL(name);                                                              \
            if (had && rc != 0) mt_put_back_unentered(&old);                                       \
            return (uintptr_t)(unsigned)rc;                                                        \
        }                                                                                          \
        int had = mt_take(*at, &old);                                                              \
        int rc = (int)CALL(name);                                                                  \
        mt_realloc_done(rc == 0 ? *at : NULL, product(b, c), &MT_SITE(name), had && rc != 0,       \
                        &old);                                                                     \
        return (uintptr_t)(unsigned)rc;                                                            \
    }
/* a block resized where it lies (xallocx, mi_expand): counted, its record unchanged */
#define HOOK_RESIZE(name)                                                                          \
    static uintptr_t name(ARGS)                                                                    \
    {                                                                                              \
        if (mt_enter(MT_EXTENDED_REALLOC)) mt_leave();                                             \
        return CALL(name);                                                                         \
    }

#define HOOK(name, shape) HOOK_##shape(name)
MT_FOR_EACH_EXTENDED(HOOK)

#define ENTRY(name, shape) {#name, (uintptr_t)name, &original_##name},
const struct mt_extended mt_extended[MT_EXTENDED] = {MT_FOR_EACH_EXTENDED(ENTRY)};
