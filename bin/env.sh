# Sourced by bin/run and bin/demo: the environment of a node of this repository that mtrace
# traces: the preload. The NIF API's blocks, resources and binaries are seen with the VM's
# default flags; MTRACE_NIF_API=malloc also turns the VM's driver_alloc and binary_alloc off
# (+MRe false +MBe false), so that the VM's own blocks there reach malloc, where mtrace sees them.
export LD_PRELOAD="$PWD/priv/mtrace.so${LD_PRELOAD:+:$LD_PRELOAD}"
if [ "${MTRACE_NIF_API:-hooks}" = malloc ]; then
  export ERL_AFLAGS="+MRe false +MBe false${ERL_AFLAGS:+ $ERL_AFLAGS}"
fi
