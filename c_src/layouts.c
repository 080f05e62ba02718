/* layouts.c: other code's structures, as the mark reads them (see layouts.h). */
#define _GNU_SOURCE
#include "layouts.h"

#include <dlfcn.h>
#include <link.h>

#include "platform.h"

size_t mt_layout_pointer_bytes(const uintptr_t *w, size_t len, uintptr_t at)
{
    size_t o = ((at + MT_DLFO_ALIGN - 1) & ~(uintptr_t)(MT_DLFO_ALIGN - 1)) - at;
    if (o + MT_DLFO_HEADER + MT_DLFO_ENTRY > len) return len;
    const uintptr_t *h = w + o / sizeof *w, *e = h + MT_DLFO_HEADER / sizeof *w;
    size_t size = h[2], allocated = h[3];
    if (h[1] != at || !size || size > allocated ||
        allocated > (len - o - MT_DLFO_HEADER) / MT_DLFO_ENTRY)
        return len;
    struct dl_find_object found;
    if (_dl_find_object((void *)e[0], &found) != 0 || (uintptr_t)found.dlfo_map_start != e[0] ||
        (uintptr_t)found.dlfo_map_end != e[1] || (uintptr_t)found.dlfo_link_map != e[2])
        return len;
    return o + MT_DLFO_HEADER + size * MT_DLFO_ENTRY;
}

/* PB_IS_WRITABLE | PB_ACTIVE_WRITER */
#define PROCBIN_FLAGS 3

int mt_layout_procbin(const uintptr_t *w, size_t n)
{
    return n >= MT_PROCBIN_WORDS && (w[0] == MT_PROCBIN_HEADER || (w[0] & 3) == 2) &&
           w[4] == w[3] + MT_BINARY_HEADER && w[5] <= PROCBIN_FLAGS;
}

/* OTP's BIN_FLAG_* bits (erl_binary.h) all lie below this. */
#define BINARY_FLAGS 0x100

int mt_layout_binary_live(const uintptr_t head[3], uintptr_t size, size_t room)
{
    return head[0] < BINARY_FLAGS && head[1] >= 1 && head[1] <= UINT32_MAX && head[2] >= size &&
           head[2] <= room;
}

int mt_layout_binary_place(uintptr_t at, uintptr_t addr, size_t size)
{
    return at == addr || size >= MT_CARRIER_MIN;
}

/* BIN_FLAG_MAGIC */
#define BINARY_MAGIC 1

int mt_layout_magic_live(const uintptr_t head[2])
{
    return (head[0] & BINARY_MAGIC) && head[0] < BINARY_FLAGS && head[1] >= 1 &&
           head[1] <= UINT32_MAX;
}

int mt_layout_matchstate(const uintptr_t *w, size_t n)
{
    return n >= MT_MATCHSTATE_WORDS && w[0] == MT_MATCHSTATE_HEADER && (w[1] & 3) == 2 &&
           w[3] <= w[4];
}

uintptr_t mt_layout_jit_descriptor(void)
{
    return (uintptr_t)dlsym(RTLD_DEFAULT, "__jit_debug_descriptor");
}
