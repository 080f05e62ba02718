/* nif_api.h: erl_nif.h, with every NIF API function mtrace.so calls made a weak reference.
 *
 * The same file is preloaded into every process of a release (sh, epmd, erl_child_setup), where
 * no enif_* function exists. The references are weak so that loading succeeds there even with
 * LD_BIND_NOW=1; they are only ever called from inside the BEAM, in a NIF. The link uses -z defs,
 * so a function used but missing from this list (enif_make_uint64 is a macro for enif_make_ulong)
 * fails the build instead of the preload. Include it instead of erl_nif.h.
 */
#ifndef MTRACE_NIF_API_H
#define MTRACE_NIF_API_H

#include <erl_nif.h>

#pragma weak enif_alloc
#pragma weak enif_free
#pragma weak enif_get_atom
#pragma weak enif_get_double
#pragma weak enif_get_list_cell
#pragma weak enif_get_list_length
#pragma weak enif_get_local_pid
#pragma weak enif_get_tuple
#pragma weak enif_get_uint
#pragma weak enif_get_ulong
#pragma weak enif_inspect_binary
#pragma weak enif_is_binary
#pragma weak enif_is_empty_list
#pragma weak enif_is_identical
#pragma weak enif_make_atom
#pragma weak enif_make_badarg
#pragma weak enif_make_double
#pragma weak enif_make_int
#pragma weak enif_make_list_from_array
#pragma weak enif_make_long
#pragma weak enif_make_map_from_arrays
#pragma weak enif_make_new_binary
#pragma weak enif_make_tuple_from_array
#pragma weak enif_make_ulong
#pragma weak enif_raise_exception
#pragma weak enif_self
#pragma weak enif_system_info

#endif
