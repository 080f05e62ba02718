/* beam_vm.c: which Erlang VM runs in this process (see beam_vm.h). */
#define _GNU_SOURCE
#include "mark/beam_vm.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TEXTS 4

static unsigned otp_bit;         /* 0: unknown or no BEAM */
static int told;                 /* the NIF said which release */
static int learnt;               /* the executable was looked at */
static uintptr_t text[TEXTS][2]; /* the executable's executable segments */
static unsigned texts;

/* The release bit of an erts major version: erts 13 is OTP 25, 14 OTP 26, 15 OTP 27. */
static unsigned bit_of(long erts_major)
{
    switch (erts_major) {
    case 13:
        return MT_OTP25;
    case 14:
        return MT_OTP26;
    case 15:
        return MT_OTP27;
    default:
        return 0;
    }
}

void mt_beam_vm_set(const char *erts_version)
{
    __atomic_store_n(&otp_bit, bit_of(strtol(erts_version, NULL, 10)), __ATOMIC_RELAXED);
    __atomic_store_n(&told, 1, __ATOMIC_RELAXED);
}

static int note_text(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    /* the executable comes first */
    for (size_t i = 0; i < info->dlpi_phnum && texts < TEXTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            text[texts][0] = info->dlpi_addr + ph->p_vaddr;
            text[texts][1] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
            texts++;
        }
    }
    return 1;
}

/* The erts major version in the executable's path (".../erts-13.1.5/bin/beam.smp"), 0 when it
 * is no beam there. */
static long erts_of_exe(void)
{
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    const char *base = strrchr(path, '/'), *erts = strstr(path, "/erts-");
    if (!base || strncmp(base + 1, "beam", 4) != 0 || !erts) return 0;
    return strtol(erts + 6, NULL, 10);
}

void mt_beam_vm_learn(void)
{
    if (__atomic_load_n(&learnt, __ATOMIC_ACQUIRE)) return;
    /* the VM's process table: the executable is a BEAM, whatever its name */
    if (!dlsym(RTLD_DEFAULT, "erts_proc")) {
        __atomic_store_n(&otp_bit, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&learnt, 1, __ATOMIC_RELEASE);
        return;
    }
    dl_iterate_phdr(note_text, NULL);
    if (!__atomic_load_n(&told, __ATOMIC_RELAXED))
        __atomic_store_n(&otp_bit, bit_of(erts_of_exe()), __ATOMIC_RELAXED);
    __atomic_store_n(&learnt, 1, __ATOMIC_RELEASE);
}

unsigned mt_beam_vm_otp(void)
{
    return __atomic_load_n(&learnt, __ATOMIC_ACQUIRE) ? __atomic_load_n(&otp_bit, __ATOMIC_RELAXED)
                                                      : 0;
}

unsigned mt_beam_vm_release(void)
{
    unsigned bit = mt_beam_vm_otp();
    return bit == MT_OTP25 ? 25 : bit == MT_OTP26 ? 26 : bit == MT_OTP27 ? 27 : 0;
}

int mt_beam_vm_code(uintptr_t ip)
{
    if (!__atomic_load_n(&learnt, __ATOMIC_ACQUIRE) || !mt_beam_vm_otp()) return 0;
    for (unsigned i = 0; i < texts; i++)
        if (ip >= text[i][0] && ip < text[i][1]) return 1;
    return 0;
}
