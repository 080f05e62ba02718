/* beam_vm.h: which Erlang VM runs in this process, for the rules that know its structures.
 *
 * A rule that reads a word as part of an Erlang term or an ERTS struct applies only where the
 * process is a BEAM of a release whose layout it knows (rules.h): in any other process, or in a
 * VM of a release mtrace does not know, no Erlang layout is taken.
 *
 * The release is told by the NIF when it is loaded (the VM's own erts version, from
 * enif_system_info), and otherwise learnt from the executable: a beam.smp under an erts-N.M
 * directory whose loaded image exports the VM's process table (erts_proc). The VM's code is the
 * executable's own text: a record whose first caller past the allocator lies there was allocated
 * by the VM itself.
 *
 * Contract
 * - mt_beam_vm_learn(): before the threads stop (readlink, dlsym, dl_iterate_phdr: the loader's
 *   lock; dlsym may allocate on a miss). Idempotent; any thread.
 * - mt_beam_vm_set(): from the NIF's load, with the VM's erts version ("13.1.5"); any thread.
 * - mt_beam_vm_otp(), mt_beam_vm_code(): lock-free reads, safe with the threads stopped.
 */
#ifndef MTRACE_BEAM_VM_H
#define MTRACE_BEAM_VM_H

#include <stdint.h>

/* The OTP releases whose layouts the rules know, as bits of mt_beam_vm_otp()'s answer. */
#define MT_OTP25 1u
#define MT_OTP26 2u
#define MT_OTP27 4u
#define MT_OTP_25_26 (MT_OTP25 | MT_OTP26)
#define MT_OTP_ALL (MT_OTP25 | MT_OTP26 | MT_OTP27)

void mt_beam_vm_learn(void);
void mt_beam_vm_set(const char *erts_version);

/* The running VM's release as one of the bits above; 0 when this process is no BEAM, or one of a
 * release the rules do not know. */
unsigned mt_beam_vm_otp(void);

/* The same as an OTP release number (25, 26, 27), 0 for none. */
unsigned mt_beam_vm_release(void);

/* Whether ip lies in the VM's own code (the executable's text); 0 in a process that is no BEAM. */
int mt_beam_vm_code(uintptr_t ip);

#endif
