/* attach.h: recording without a restart, by rewriting the words through which the process's
 * loaded objects reach the malloc family; and in a BEAM, preloaded or attached, the NIF API's
 * allocation functions (nif_hooks.h), through the same words of every object but the VM's
 * executable.
 *
 * A node started without LD_PRELOAD loads mtrace.so as a NIF; that copy is not the process's
 * malloc and stays inert (hooks.h) until mt_attach(). mt_attach() starts its recorder and then,
 * in every object dl_iterate_phdr lists (but the loader, the vDSO and mtrace.so itself), points
 * each word named by a JUMP_SLOT, GLOB_DAT or R_X86_64_64 (addend 0) relocation to one of the
 * hooked functions (hooklist.h) at this copy's hook, when the word holds glibc's function (or,
 * for a lazy JUMP_SLOT, the object's own PLT stub while glibc's function is what the process
 * binds the name to). Where the process binds malloc to another allocator, a library of its own
 * (jemalloc, tcmalloc, mimalloc), the hooks forward to it (allocator.h's mt_real_adopt), and the
 * words rewritten are those that hold its functions, and its own API's (extended.h), in every
 * object but its own; an allocator in the executable, or another copy of mtrace, is refused: calls
 * of it that no word carries would go unseen. Words in RELRO
 * are made writable for the store and read-only again. Each rewritten word is remembered
 * (object base, address, old value); mt_detach() stores every old value back, in the objects
 * still loaded at the same base whose word still holds the hook. Words naming dlopen point at a
 * wrapper that, after the real dlopen returns, rewrites the objects loaded since.
 *
 * What this cannot reach: an address of malloc copied before the attach into memory no
 * relocation names (an allocator table filled at start-up), objects loaded by the loader's own
 * internal dlopen (NSS, gconv) until the next dlopen, and blocks allocated before the attach,
 * which have no record (their free passes through and counts as an untracked free).
 *
 * Contract
 * - mt_attach, mt_detach, mt_attach_state: any thread but a hook; serialised by one mutex, never
 *   held while the real dlopen runs (the loader's lock is taken inside it, and constructors run
 *   there allocate). They may allocate (dlopen of libc with RTLD_NOLOAD) and must be called with
 *   the recorder's guard held, as every NIF runs.
 * - The stores are single aligned 8-byte stores: a thread calling through a word sees the old or
 *   the new function, both of which work on any block (the hooks forward to the same allocator).
 * - mtrace.so is never unloaded once attached: the rewritten words and any copy of them point
 *   into it.
 */
#ifndef MTRACE_ATTACH_H
#define MTRACE_ATTACH_H

#include <stdint.h>

enum mt_attach_error {
    MT_ATTACH_OK = 0,
    MT_ATTACH_PRELOADED,    /* this copy is the preloaded malloc: recording already */
    MT_ATTACH_ALREADY,      /* attached, not detached since */
    MT_ATTACH_NOT_ATTACHED, /* mt_detach without an attach */
    MT_ATTACH_OTHER_MALLOC, /* malloc is the executable's, another mtrace's, or ahead of this copy
                             */
    MT_ATTACH_NO_GLIBC,     /* libc.so.6 is not loaded, or lacks a hooked function */
    MT_ATTACH_NO_RECORDER,  /* the recorder could not start (its tables could not be mapped) */
    MT_ATTACH_NO_MEMORY,    /* the list of rewritten words could not be mapped */
    MT_ATTACH_BAD_OPTIONS,  /* more options, or longer, than mtrace_lib_attach takes */
};

/* Attaches (see above). vars: "MTRACE_NAME=value" strings, NULL-terminated, that the recorder
 * takes before the environment's if this attach starts it (config.h), or NULL. Returns
 * MT_ATTACH_OK or why not; on an error nothing is rewritten. */
enum mt_attach_error mt_attach(const char *const *vars);

/* In the copy that is the process's malloc (preloaded), once, from a constructor: when the
 * process is a BEAM, rewrites the words that name the NIF API (nif_hooks.h) in every object but
 * the VM's executable, now and after each dlopen, for as long as the process runs; when its
 * allocator is not glibc's, the words that name that allocator's own API (extended.h) in every
 * object but the allocator's, now and after each dlopen (mt_load_rewrites). Allocates only
 * through dlopen's and dlsym's lookups. */
void mt_attach_preloaded(void);

/* Nonzero when the dlopen interposer (load.c) must rewrite the words of the objects each load
 * brings (mt_attach_bypassed), not only those of a RTLD_DEEPBIND load. */
extern int mt_load_rewrites __attribute__((visibility("hidden")));

/* In the copy that is the process's malloc (preloaded): rewrites the malloc family's words that
 * hold glibc's own functions, which an object loaded with RTLD_DEEPBIND binds past the preload,
 * as an attach would (with glibc's allocator only), so that its calls are recorded like every
 * other object's; the words of the NIF API too, in a BEAM. Called by the dlopen interposer
 * (load.c) after such a load; takes the guard. Does nothing in another copy. */
void mt_attach_bypassed(void);

/* Writes every remembered word back; the records stay, readable as before, but for those of the
 * NIF API's blocks (their frees would go unseen). */
enum mt_attach_error mt_detach(void);

/* A person's reason for an error, one sentence without a newline. */
const char *mt_attach_reason(enum mt_attach_error e);

struct mt_attach_state {
    int attached;        /* attached now */
    uint64_t since_ns;   /* CLOCK_MONOTONIC_COARSE of the last attach, 0 if never */
    uint64_t realtime_s; /* its wall-clock seconds, 0 if never */
    uint64_t attaches;   /* attaches since the start */
    uint64_t words;      /* words rewritten now (and to write back) */
    uint64_t objects;    /* objects with at least one of them */
    uint64_t skipped;    /* words naming a hooked function left alone (another value, or not
                            in a writable or RELRO page) */
    uint64_t copies;     /* words of the objects' writable data that still held one of glibc's
                            hooked functions after the attach's rewrite (the loader's own among
                            them): calls through them bypass mtrace */
    uint64_t pause_ns;   /* how long the last attach's rewriting took */
    uint64_t nif_words;  /* of the words, those naming the NIF API (nif_hooks.h) */
    int nif_api;         /* the NIF API's words are rewritten, now and at each dlopen */
};

/* The state as of now; lock-free but not one consistent snapshot. Each attach also tells the
 * recorder since when its records are partial (recorder.h's mt_records_partial), the fact the
 * lost rule reads. */
void mt_attach_state(struct mt_attach_state *out);

#endif
