/* beam_frames.c: the Erlang frames of the BEAM's JIT (see beam_frames.h). */
#define _GNU_SOURCE
#include "record/beam_frames.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#include "base/proc.h"
#include "base/writer.h"

#define STEP_MAX ((uintptr_t)1 << 20)
#define USER_TOP ((uintptr_t)1 << 47)

/* 1: the BEAM writes the perf map; -1: it does not; 0: not looked at yet. */
static int perf_map;

int mt_beam_in_object(uintptr_t ip)
{
    struct dl_find_object found;
    return _dl_find_object((void *)ip, &found) == 0;
}

/* The bytes below rbx that the register block's first field may lie at (an 8-bit
 * displacement's reach, and its alignment). */
#define JIT_REGISTERS_BELOW 256

uintptr_t mt_beam_jit_stack(uintptr_t rbx, uintptr_t lo, uintptr_t hi)
{
    if (rbx < lo + JIT_REGISTERS_BELOW || rbx >= hi) return lo;
    return rbx - JIT_REGISTERS_BELOW;
}

static int names_path(int dir_fd, const char *name, void *path)
{
    char target[64];
    ssize_t len = readlinkat(dir_fd, name, target, sizeof target - 1);
    if (len <= 0) return 0;
    target[len] = '\0';
    return strcmp(target, path) == 0;
}

int mt_beam_perf_map(void)
{
    int state = __atomic_load_n(&perf_map, __ATOMIC_RELAXED);
    if (!state) {
        /* Whether one of this process's descriptors is the map (this may run inside a hook). */
        char path[64];
        state = mt_path_expand("/tmp/perf-%p.map", "", 0, path, sizeof path) == 0 &&
                        mt_proc_each("/proc/self/fd", names_path, path) > 0
                    ? 1
                    : -1;
        __atomic_store_n(&perf_map, state, __ATOMIC_RELAXED);
    }
    return state > 0;
}

void mt_beam_forked(void)
{
    perf_map = 0;
}

/* A copy of the chain's memory, refilled when a frame lies outside it. */
struct window {
    uintptr_t lo, hi;
    uintptr_t words[32];
};

/* The link and return address of the frame at fp; 0, or -1 when they cannot be read. */
static int chain_link(struct window *win, uintptr_t fp, uintptr_t out[2])
{
    if (fp < win->lo || fp + 16 > win->hi) {
        size_t len = sizeof win->words, to_page = ((fp | 4095) + 1) - fp;
        if (to_page >= 16 && to_page < len) len = to_page; /* no read past a page for nothing */
        if (mt_proc_read(fp, win->words, len) != 0) return -1;
        win->lo = fp;
        win->hi = fp + len;
    }
    const uintptr_t *at = &win->words[(fp - win->lo) / sizeof(uintptr_t)];
    out[0] = at[0];
    out[1] = at[1];
    return 0;
}

int mt_beam_chain(uintptr_t fp, uintptr_t *ips, uintptr_t *fps, int max, int *closed)
{
    struct window win = {0, 0, {0}};
    uintptr_t link[2];
    int n = 0;
    *closed = 0;
    while (n < max && fp && !(fp & 7) && fp < USER_TOP && chain_link(&win, fp, link) == 0 &&
           link[1] >= 4096 && !mt_beam_in_object(link[1])) {
        ips[n] = link[1];
        fps[n++] = fp;
        if (!link[0]) {
            *closed = 1;
            break;
        }
        if (link[0] <= fp || link[0] - fp > STEP_MAX) break;
        fp = link[0];
    }
    return n;
}
