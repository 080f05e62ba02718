/* extended.c: the allocator's own API beyond the malloc family (extended.h). */
#include "record/extended.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "record/recorder.h"

#define ORIGINAL(name, shape) static mt_word_fn original_##name;
MT_FOR_EACH_EXTENDED(ORIGINAL)

/* Every argument register is passed on (six on x86-64), whatever the function takes. A heap's
 * function (mimalloc's mi_heap_*) takes the heap first, then the arguments of the function it
 * is the heap's form of: its hook is that function's shape over the arguments after the heap. */
#define PLAIN_PARAMS uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e, uintptr_t f
#define PLAIN_FORWARD a, b, c, d, e, f
#define HEAP_PARAMS uintptr_t h, uintptr_t a, uintptr_t b, uintptr_t c, uintptr_t d, uintptr_t e
#define HEAP_FORWARD h, a, b, c, d, e
#define CALL(name, P) __atomic_load_n(&original_##name, __ATOMIC_ACQUIRE)(P##_FORWARD)

/* An allocation of size bytes: the allocator's answer, recorded. The allocator runs inside the
 * guard, as under the malloc family's hooks: a call of its own through the malloc family's names
 * is not recorded a second time. */
#define ALLOCATED(name, size, P)                                                                   \
    do {                                                                                           \
        size_t size_ = (size);                                                                     \
        if (!mt_enter(MT_EXTENDED_ALLOC)) return CALL(name, P);                                    \
        uintptr_t p_ = CALL(name, P);                                                              \
        mt_alloc_done((void *)p_, size_, &MT_SITE(name));                                          \
        return p_;                                                                                 \
    } while (0)

/* The same for a function that may throw (operator new): recorded once it has answered, since a
 * throw would leave the guard held. */
#define NEWED(name, size, P)                                                                       \
    do {                                                                                           \
        size_t size_ = (size);                                                                     \
        uintptr_t p_ = CALL(name, P);                                                              \
        if (mt_enter(MT_EXTENDED_ALLOC)) mt_alloc_done((void *)p_, size_, &MT_SITE(name));         \
        return p_;                                                                                 \
    } while (0)

static inline size_t product(uintptr_t count, uintptr_t n)
{
    size_t bytes;
    return __builtin_mul_overflow(count, n, &bytes) ? 0 : bytes;
}

/* A block p moved to one of size bytes; keep: whether a NULL answer leaves p live. */
#define REALLOCATED(name, p, size, keep, P)                                                        \
    do {                                                                                           \
        struct mt_record old_;                                                                     \
        if (!mt_enter(MT_EXTENDED_REALLOC)) {                                                      \
            int had_ = mt_take_unentered((void *)(p), &old_);                                      \
            uintptr_t q_ = CALL(name, P);                                                          \
            if (had_ && !q_ && (keep)) mt_put_back_unentered(&old_);                               \
            return q_;                                                                             \
        }                                                                                          \
        int had_ = mt_take((void *)(p), &old_);                                                    \
        uintptr_t q_ = CALL(name, P);                                                              \
        mt_realloc_done((void *)q_, (size), &MT_SITE(name), had_ && (keep), &old_);                \
        return q_;                                                                                 \
    } while (0)

/* size in the first argument (mallocx, tc_malloc, mi_malloc_aligned, nothrow new...) */
#define SHAPE_ALLOC(name, P)                                                                       \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, a, P);                                                                     \
    }
#define SHAPE_NEW(name, P)                                                                         \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        NEWED(name, a, P);                                                                         \
    }
#define SHAPE_NEW_N(name, P)                                                                       \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        NEWED(name, product(a, b), P);                                                             \
    }
/* size in the second (tc_memalign, mi_aligned_alloc) */
#define SHAPE_ALLOC_B(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, b, P);                                                                     \
    }
/* count and size (tc_calloc, mi_mallocn, mi_calloc_aligned) */
#define SHAPE_CALLOC(name, P)                                                                      \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, product(a, b), P);                                                         \
    }
#define SHAPE_STRDUP(name, P)                                                                      \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, strlen((const char *)a) + 1, P);                                           \
    }
#define SHAPE_STRNDUP(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, strnlen((const char *)a, b) + 1, P);                                       \
    }
/* posix_memalign's shape: the block through the first argument, the size in the third */
#define SHAPE_POSIX(name, P)                                                                       \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        if (!mt_enter(MT_EXTENDED_ALLOC)) return CALL(name, P);                                    \
        int rc = (int)CALL(name, P);                                                               \
        mt_alloc_done(rc == 0 ? *(void **)a : NULL, c, &MT_SITE(name));                            \
        return (uintptr_t)(unsigned)rc;                                                            \
    }
/* the record goes first, and the allocator frees inside the guard */
#define SHAPE_FREE(name, P)                                                                        \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        if (!mt_enter(MT_EXTENDED_FREE)) {                                                         \
            mt_forget_unentered((void *)a);                                                        \
            return CALL(name, P);                                                                  \
        }                                                                                          \
        struct mt_record old;                                                                      \
        mt_take((void *)a, &old);                                                                  \
        uintptr_t r = CALL(name, P);                                                               \
        mt_leave();                                                                                \
        return r;                                                                                  \
    }
/* realloc's semantics: a NULL answer to a size of 0 freed the block */
#define SHAPE_REALLOC(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED(name, a, b, b != 0, P);                                                        \
    }
/* rallocx: NULL is a failure, the block stays */
#define SHAPE_REALLOCX(name, P)                                                                    \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED(name, a, b, 1, P);                                                             \
    }
/* count and size (mi_reallocn, mi_recalloc, mi_reallocarray): an overflow fails, the block stays */
#define SHAPE_REALLOCN(name, P)                                                                    \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED(name, a, product(b, c), b &&c, P);                                             \
    }
/* reallocf: the block is freed when the reallocation fails */
#define SHAPE_REALLOCF(name, P)                                                                    \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED(name, a, b, 0, P);                                                             \
    }
/* reallocarr(&p, count, size): the block through the first argument, 0 when it moved */
#define SHAPE_REALLOCARR(name, P)                                                                  \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        void **at = (void **)a;                                                                    \
        struct mt_record old;                                                                      \
        if (!mt_enter(MT_EXTENDED_REALLOC)) {                                                      \
            int had = mt_take_unentered(*at, &old);                                                \
            int rc = (int)CALL(name, P);                                                           \
            if (had && rc != 0) mt_put_back_unentered(&old);                                       \
            return (uintptr_t)(unsigned)rc;                                                        \
        }                                                                                          \
        int had = mt_take(*at, &old);                                                              \
        int rc = (int)CALL(name, P);                                                               \
        mt_realloc_done(rc == 0 ? *at : NULL, product(b, c), &MT_SITE(name), had && rc != 0,       \
                        &old);                                                                     \
        return (uintptr_t)(unsigned)rc;                                                            \
    }
/* xallocx(p, size, extra, flags): the block resized where it lies, its real size answered; at
 * least size means done, and the record takes the size asked for (up to size + extra, as far as
 * the real size goes), else the block and its record stay as they were */
#define SHAPE_XALLOCX(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        struct mt_record old;                                                                      \
        if (!mt_enter(MT_EXTENDED_REALLOC)) return CALL(name, P);                                  \
        int had = mt_take((void *)a, &old);                                                        \
        uintptr_t got = CALL(name, P);                                                             \
        size_t most = b + c < b ? SIZE_MAX : b + c;                                                \
        mt_realloc_done(got >= b ? (void *)a : NULL, got < most ? got : most, &MT_SITE(name),      \
                        had && got < b, &old);                                                     \
        return got;                                                                                \
    }

/* a reallocation that throws where it fails (mimalloc's mi_new_realloc): the old record is taken
 * out first, and the new one made once it has answered, since a throw would leave the guard held
 * (the block it leaves then has no record, and its free counts as one without) */
#define REALLOCATED_OR_THROWN(name, p, size, P)                                                    \
    do {                                                                                           \
        struct mt_record old_;                                                                     \
        mt_take_unentered((void *)(p), &old_);                                                     \
        uintptr_t q_ = CALL(name, P);                                                              \
        if (mt_enter(MT_EXTENDED_REALLOC)) mt_alloc_done((void *)q_, (size), &MT_SITE(name));      \
        return q_;                                                                                 \
    } while (0)
#define SHAPE_NEW_REALLOC(name, P)                                                                 \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED_OR_THROWN(name, a, b, P);                                                      \
    }
#define SHAPE_NEW_REALLOCN(name, P)                                                                \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        REALLOCATED_OR_THROWN(name, a, product(b, c), P);                                          \
    }
/* mimalloc's wide strings are Windows', of 16-bit units */
static size_t units16(const void *s)
{
    size_t n = 0;
    while (((const uint16_t *)s)[n])
        n++;
    return n;
}

/* a copy of a wide string (mi_wcsdup) */
#define SHAPE_WCSDUP(name, P)                                                                      \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        ALLOCATED(name, (units16((const void *)a) + 1) * 2, P);                                    \
    }
/* realpath(path, resolved): a new block only where resolved is NULL */
#define SHAPE_REALPATH(name, P)                                                                    \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        if (b || !mt_enter(MT_EXTENDED_ALLOC)) return CALL(name, P);                               \
        uintptr_t q = CALL(name, P);                                                               \
        mt_alloc_done((void *)q, q ? strlen((const char *)q) + 1 : 0, &MT_SITE(name));             \
        return q;                                                                                  \
    }
/* dupenv_s(&buf, &size, name): the copy through the first argument, 0 when done (the wide one's
 * of 16-bit units) */
#define DUPENV(name, P, unit, length)                                                              \
    do {                                                                                           \
        if (!mt_enter(MT_EXTENDED_ALLOC)) return CALL(name, P);                                    \
        int rc = (int)CALL(name, P);                                                               \
        const void *q = rc == 0 ? *(void **)a : NULL;                                              \
        mt_alloc_done((void *)q, q ? (length(q) + 1) * (unit) : 0, &MT_SITE(name));                \
        return (uintptr_t)(unsigned)rc;                                                            \
    } while (0)
#define SHAPE_DUPENV(name, P)                                                                      \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        DUPENV(name, P, 1, strlen);                                                                \
    }
#define SHAPE_WDUPENV(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        DUPENV(name, P, 2, units16);                                                               \
    }

/* mi_heap_destroy(heap): every block still in the heap is freed with it, each record forgotten
 * first; the blocks are the allocator's own answer (mi_heap_visit_blocks), never a guess */
static int forget_block(uintptr_t heap, uintptr_t area, uintptr_t block, uintptr_t size,
                        uintptr_t arg, uintptr_t unused)
{
    (void)heap, (void)area, (void)size, (void)arg, (void)unused;
    if (block) mt_forget_unentered((void *)block);
    return 1;
}

#define SHAPE_DESTROY(name, P)                                                                     \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        mt_word_fn visit = __atomic_load_n(&original_mi_heap_visit_blocks, __ATOMIC_ACQUIRE);      \
        int entered = mt_enter(MT_EXTENDED_FREE);                                                  \
        if (visit) visit(a, 1, (uintptr_t)forget_block, 0, 0, 0);                                  \
        uintptr_t r = CALL(name, P);                                                               \
        if (entered) mt_leave();                                                                   \
        return r;                                                                                  \
    }
/* a function the hooks call, passed on (its original is what they need) */
#define SHAPE_PASS(name, P)                                                                        \
    static uintptr_t name(P##_PARAMS)                                                              \
    {                                                                                              \
        return CALL(name, P);                                                                      \
    }

/* A heap's shapes (hooklist.h's HEAP_*): the plain shape over the arguments after the heap. */
#define SHAPE_HEAP_ALLOC(name, P) SHAPE_ALLOC(name, HEAP)
#define SHAPE_HEAP_CALLOC(name, P) SHAPE_CALLOC(name, HEAP)
#define SHAPE_HEAP_NEW(name, P) SHAPE_NEW(name, HEAP)
#define SHAPE_HEAP_NEW_N(name, P) SHAPE_NEW_N(name, HEAP)
#define SHAPE_HEAP_STRDUP(name, P) SHAPE_STRDUP(name, HEAP)
#define SHAPE_HEAP_STRNDUP(name, P) SHAPE_STRNDUP(name, HEAP)
#define SHAPE_HEAP_REALLOC(name, P) SHAPE_REALLOC(name, HEAP)
#define SHAPE_HEAP_REALLOCN(name, P) SHAPE_REALLOCN(name, HEAP)
#define SHAPE_HEAP_REALLOCF(name, P) SHAPE_REALLOCF(name, HEAP)
#define SHAPE_HEAP_REALPATH(name, P) SHAPE_REALPATH(name, HEAP)

#define HOOK(name, shape) SHAPE_##shape(name, PLAIN)
MT_FOR_EACH_EXTENDED(HOOK)

#define ENTRY(name, shape) {#name, (uintptr_t)name, &original_##name},
const struct mt_extended mt_extended[MT_EXTENDED] = {MT_FOR_EACH_EXTENDED(ENTRY)};
