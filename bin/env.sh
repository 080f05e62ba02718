# Sourced by bin/run and bin/demo: the environment of a node of this repository that mtrace
# traces. The preload, and the VM's driver_alloc and binary_alloc off (+MRe false +MBe false),
# so that enif_alloc'd blocks, resources and binaries reach malloc, where mtrace sees them;
# MTRACE_NIF_API=hidden leaves the VM's allocators on. Untraced, the two flags cost nothing
# measurable (300k ETS inserts: 0.94 s with them, 1.03 s without).
export LD_PRELOAD="$PWD/priv/mtrace.so${LD_PRELOAD:+:$LD_PRELOAD}"
if [ "${MTRACE_NIF_API:-visible}" != hidden ]; then
  export ERL_AFLAGS="+MRe false +MBe false${ERL_AFLAGS:+ $ERL_AFLAGS}"
fi
