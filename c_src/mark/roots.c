/* roots.c: naming what marked a block first (roots.h). */
#define _GNU_SOURCE
#include "mark/roots.h"

#include <link.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "base/platform.h"
#include "base/proc.h"
#include "base/writer.h"
#include "mark/layouts.h"
#include "mark/world.h"
#include "symbols/symbols.h"

/* The loaded objects' static TLS blocks, each at the same distance below every thread's thread
 * pointer: found from the calling thread's own (dl_iterate_phdr's dlpi_tls_data). A block of
 * dynamic TLS (an object loaded later, out of the static room) is a malloc block of its own. */
#define TLS_OBJECTS 64
struct tls_objects {
    uintptr_t tp;
    size_t n;
    struct {
        char path[256];
        uintptr_t below, size;
    } o[TLS_OBJECTS];
};

static int note_tls(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct tls_objects *t = arg;
    uintptr_t data = (uintptr_t)info->dlpi_tls_data;
    (void)size;
    if (!data || data >= t->tp || t->tp - data > ((uintptr_t)1 << 20) || t->n == TLS_OBJECTS)
        return 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            /* the program itself is listed without a name */
            char *path = t->o[t->n].path;
            ssize_t len = info->dlpi_name[0]
                              ? (ssize_t)strnlen(info->dlpi_name, sizeof t->o[t->n].path - 1)
                              : readlink("/proc/self/exe", path, sizeof t->o[t->n].path - 1);
            if (info->dlpi_name[0]) memcpy(path, info->dlpi_name, (size_t)len);
            path[len > 0 ? len : 0] = '\0';
            t->o[t->n].below = t->tp - data;
            t->o[t->n++].size = info->dlpi_phdr[i].p_memsz;
        }
    return 0;
}

static void copy_text(struct mt_root *out, const char *s, size_t len)
{
    if (len >= sizeof out->text) len = sizeof out->text - 1;
    memcpy(out->text, s, len);
    out->text[len] = '\0';
    out->library = out->text;
}

/* Whether via lies in thread t's static TLS (the object, offset in its block) or its control
 * block (library NULL, offset from the thread pointer). */
static int tls_root(const struct mt_reach_thread *t, const struct tls_objects *objects,
                    uintptr_t via, struct mt_root *out)
{
    *out = (struct mt_root){.kind = MT_ROOT_TLS, .via = via, .tid = t->tid};
    if (t->tp && via >= t->tp && via < t->tp + MT_TCB_BYTES) {
        out->offset = (int64_t)(via - t->tp);
        return 1;
    }
    for (size_t i = 0; t->tp && i < objects->n; i++) {
        uintptr_t lo = t->tp - objects->o[i].below;
        if (via >= lo && via < lo + objects->o[i].size) {
            if (objects->o[i].path[0])
                copy_text(out, objects->o[i].path, strlen(objects->o[i].path));
            out->offset = (int64_t)(via - lo);
            return 1;
        }
    }
    return 0;
}

/* The frame of thread t that holds the stack word at via: the first whose end lies above it (the
 * red zone below the stack pointer is frame 0's). */
static void frame_of(const struct mt_reach_thread *t, uintptr_t via, struct mt_root *out)
{
    for (int k = 0; k < t->frames; k++)
        if (via < t->top[k]) {
            out->ip = t->ip[k];
            out->lookup = k == 0 ? t->ip[k] + 1 : t->ip[k];
            return;
        }
}

/* The name the kernel keeps for thread tid, when it is still there. */
static void thread_name(pid_t tid, struct mt_root *out)
{
    char path[48] = "/proc/self/task/", digits[24], text[128];
    strcat(strcat(path, mt_utoa((uint64_t)tid, digits + sizeof digits)), "/status");
    const char *v = mt_proc_field(path, "Name:", text, sizeof text);
    size_t len = v ? strcspn(v, "\n") : 0;
    if (len >= sizeof out->thread) len = sizeof out->thread - 1;
    if (v) memcpy(out->thread, v, len);
    out->thread[len] = '\0';
}

/* The root that holds the word at via (MT_REACH_MEMORY): a stopped thread's TLS or stack, a
 * loaded module's data, or another mapping. */
static void memory_root(const struct mt_reach *r, uintptr_t via, struct mt_root *out)
{
    struct tls_objects objects = {.tp = (uintptr_t)pthread_self()};
    dl_iterate_phdr(note_tls, &objects);
    for (size_t i = 0; i < r->threads_noted; i++)
        if (r->thread[i].tid && tls_root(&r->thread[i], &objects, via, out)) return;
    for (size_t i = 0; i < r->threads_noted; i++) {
        const struct mt_reach_thread *t = &r->thread[i];
        if (t->tid && via >= t->lo && via < t->hi) {
            *out = (struct mt_root){
                .kind = MT_ROOT_STACK, .via = via, .tid = t->tid, .offset = (int64_t)(via - t->sp)};
            frame_of(t, via, out);
            return;
        }
    }
    struct mt_data_info d = mt_symbolize_data(via);
    if (d.path) {
        *out = (struct mt_root){.kind = MT_ROOT_STATIC,
                                .via = via,
                                .library = d.path,
                                .symbol = d.symbol,
                                .offset = (int64_t)d.offset};
        return;
    }
    *out = (struct mt_root){.kind = MT_ROOT_MAPPING, .via = via};
    struct mt_maps maps = {0};
    struct mt_mapping m = {0};
    int found = 0;
    if (mt_maps_read(&maps) == 0)
        for (size_t at = 0; !found && mt_maps_next(&maps, &at, &m);)
            found = via >= m.lo && via < m.hi;
    if (found) {
        out->lo = m.lo;
        out->hi = m.hi;
        copy_text(out, m.path, m.path_len);
        if (!m.path_len) mt_layout_carrier(via, m.lo, m.hi, out->allocator, sizeof out->allocator);
    }
    mt_maps_drop(&maps);
}

void mt_root_name(const struct mt_reach *r, size_t i, struct mt_root *out)
{
    uintptr_t via = r->via[i];
    size_t thread = via >> 8;
    pid_t tid = thread < r->threads_noted ? r->thread[thread].tid : 0;
    if (r->parent[i] == MT_REACH_REGISTER) {
        size_t reg = (via & 0xFF) / sizeof(uintptr_t);
        *out = (struct mt_root){.kind = MT_ROOT_REGISTER,
                                .tid = tid,
                                .reg = reg < MT_WORLD_REGS ? mt_world_reg_names[reg] : ""};
    } else if (r->parent[i] == MT_REACH_ALTSTACK) {
        *out = (struct mt_root){.kind = MT_ROOT_ALTSTACK, .tid = tid};
    } else if (r->parent[i] == MT_REACH_LOST) {
        *out = (struct mt_root){.kind = MT_ROOT_LOST};
    } else {
        memory_root(r, via, out);
    }
    if (out->tid) thread_name(out->tid, out);
}
