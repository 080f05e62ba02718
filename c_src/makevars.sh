#!/bin/sh
# Writes makevars.mk on stdout: the compiler and the flags this machine needs to build mtrace.so.
# Kept out of the makefiles so that they stay plain POSIX make, readable by GNU make and bmake.
set -eu

erl_include=$(erl -noshell -eval \
  'io:format("~s/erts-~s/include", [code:root_dir(), erlang:system_info(version)]), halt().')
if [ ! -f "$erl_include/erl_nif.h" ]; then
  echo "makevars.sh: erl_nif.h not found in $erl_include (install erlang-dev)" >&2
  exit 1
fi

if pkg-config --exists libunwind 2>/dev/null; then
  unwind_cflags=$(pkg-config --cflags libunwind)
  unwind_libs=$(pkg-config --libs libunwind)
else
  unwind_cflags=
  unwind_libs=-lunwind
fi

# libdw's headers only: symbols/dwarf.c opens the library itself, at its first use.
if pkg-config --exists libdw 2>/dev/null; then
  dw_cflags=$(pkg-config --cflags libdw)
else
  dw_cflags=
fi

cat <<MK
CC = ${CC:-cc}
CXX = ${CXX:-c++}
ERL_CFLAGS = -I$erl_include
UNWIND_CFLAGS = $unwind_cflags
UNWIND_LIBS = $unwind_libs
DW_CFLAGS = $dw_cflags
IBERTY_LIBS = -liberty
MK
