/* symbolic.c: a plain shared library (not a NIF) for the symbolizer's tests, loaded and called
 * through dl.c. Its blocks are allocated behind a static function, inside an always_inline
 * helper, and under Rust-mangled names (the C++ one is in symbolic_cxx.cc). Each allocating line
 * carries a "site:" marker, so that the tests read its number from this file. Built -O0 -g;
 * always_inline is inlined even so. */
#include <stdlib.h>

#define API __attribute__((noinline, visibility("default")))

static __attribute__((noinline)) void *hidden_alloc(size_t n)
{
    return malloc(n); /* site:static */
}

API void *sym_static(size_t n)
{
    return hidden_alloc(n); /* site:static_caller */
}

static inline __attribute__((always_inline)) void *inlined_alloc(size_t n)
{
    return malloc(n); /* site:inline */
}

API void *sym_inline(size_t n)
{
    return inlined_alloc(n); /* site:inline_caller */
}

/* Two levels: an inlined function that an inlined function calls. */
static inline __attribute__((always_inline)) void *inner_alloc(size_t n)
{
    return malloc(n); /* site:inner */
}

static inline __attribute__((always_inline)) void *middle_alloc(size_t n)
{
    return inner_alloc(n); /* site:middle */
}

API void *sym_nested(size_t n)
{
    return middle_alloc(n); /* site:nested_caller */
}

/* Names as rustc spells them (legacy and v0 manglings), for the demangler. */
API void *rust_legacy(size_t n) __asm__("_ZN8symbolic6legacy5alloc17h0123456789abcdefE");
API void *rust_legacy(size_t n)
{
    return malloc(n); /* site:rust_legacy */
}

API void *rust_v0(size_t n) __asm__("_RNvNtC8symbolic2v05alloc");
API void *rust_v0(size_t n)
{
    return malloc(n); /* site:rust_v0 */
}
