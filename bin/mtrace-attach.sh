# Sourced by bin/mtrace: attach, report and detach in a running process, through mtrace's own
# injector, priv/mtrace-inject (c_src/attach/inject.c; no gdb).
#
# The injector stops the process at its next call to malloc (or calloc, realloc, free), not
# wherever it happens to be: stopped inside the loader or the allocator, a call into it (dlopen,
# or mtrace's own) could deadlock on a lock the stopped thread holds. There it loads
# priv/mtrace.so (which stays inert until attached) and calls one of its entry points
# (c_src/out/api.c), then detaches. A Ctrl-C, like the end of --wait, only ever abandons the wait
# for malloc, and the process runs on untouched; once the call is made, the injector waits for
# its end.

# A user's name, or their number.
user_name() {
  getent passwd "$1" | cut -d: -f1 | grep . || echo "$1"
}

# One line why the process cannot be traced, from what the system says of it.
ptrace_refusal() {
  pid=$1
  mine=$(id -u)
  theirs=$(awk '/^Uid:/ { print $3 }' "/proc/$pid/status" 2>/dev/null || echo "?")
  tracer=$(awk '/^TracerPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
  scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)
  # CAP_SYS_PTRACE is bit 19 of the effective capabilities.
  caps=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
  if [ $((0x$caps >> 19 & 1)) = 1 ]; then cap=1; else cap=; fi
  if [ "$tracer" != 0 ]; then
    echo "process $pid is already traced by process $tracer (a debugger?): detach that first"
  elif [ "$scope" = 3 ]; then
    echo "Yama's ptrace_scope is 3: no process may be traced until the next boot"
  elif [ "$theirs" != "$mine" ] && [ -z "$cap" ]; then
    if [ "$mine" = 0 ]; then
      echo "process $pid runs as user $(user_name "$theirs"), and this root lacks CAP_SYS_PTRACE" \
        "(a container?):" \
        "add it (docker run --cap-add=SYS_PTRACE; in Kubernetes, the pod's securityContext)"
    else
      echo "process $pid runs as user $(user_name "$theirs") and this as user $(user_name "$mine"):" \
        "run mtrace as that user or as root"
    fi
  elif [ "$scope" = 2 ] && [ -z "$cap" ]; then
    echo "Yama's ptrace_scope is 2: only root (CAP_SYS_PTRACE) may trace; run mtrace as root"
  elif [ "$scope" = 1 ] && [ -z "$cap" ]; then
    echo "Yama's ptrace_scope is 1: a process may only trace its own children; run mtrace as" \
      "root, or lower it: echo 0 > /proc/sys/kernel/yama/ptrace_scope"
  else
    echo "ptrace of process $pid was refused (a seccomp profile forbids it? Docker's allows it" \
      "from 4.8 kernels on; add CAP_SYS_PTRACE, or run with --security-opt seccomp=unconfined)"
  fi
}

# A line and exit when the process is stopped (SIGSTOP, Ctrl-Z): it calls no malloc until it is
# continued, which is its user's to decide, not mtrace's.
stopped() {
  case $(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) in
    T) die_stopped "$1" ;;
  esac
}

die_stopped() {
  die "process $1 is stopped (SIGSTOP or Ctrl-Z), so it calls no malloc: continue it" \
    "(kill -CONT $1), then try again"
}

# Whether the process is one mtrace can reach, or a line why not (and exit).
check_target() {
  pid=$1
  [ -d "/proc/$pid" ] || die "no process $pid"
  maps=$(cat "/proc/$pid/maps" 2>/dev/null) || die "cannot attach to $pid: $(ptrace_refusal "$pid")"
  [ "$(awk '/^TracerPid:/ { print $2 }' "/proc/$pid/status")" = 0 ] ||
    die "cannot attach to $pid: $(ptrace_refusal "$pid")"
  stopped "$pid"
  case $maps in
    */libc.so.6*) ;;
    *) die "process $pid has no glibc loaded (a static program, or another C library such as" \
      "musl): mtrace reaches dynamically linked glibc programs only" ;;
  esac
  # The report's path must name the same file in the process (the library goes as bytes, which
  # no path needs), and the injector see its pids.
  for ns in mnt pid; do
    [ "$(readlink "/proc/$pid/ns/$ns")" = "$(readlink "/proc/self/ns/$ns")" ] ||
      die "process $pid runs in another $ns namespace (a container): run mtrace inside it" \
        "(docker exec, kubectl exec)"
  done
}

# inject PID LOAD ENTRY ARG PREFIX: stops PID at malloc, finds mtrace.so in it (LOAD is the
# dlopen mode: 2 loads it, 6 only finds a copy loaded already, else the preloaded one's entry
# points are used), and calls its int ENTRY(const char *ARG), or ENTRY(void) when ARG is "-". A
# result other than 0 is an error: PREFIX, then its reason. Sets rc to the result, or fails with
# a line why.
inject() {
  pid=$1
  check_target "$pid"
  injector=$(dirname "$so")/mtrace-inject
  [ -x "$injector" ] || die "$injector is missing: build mtrace (make -C c_src)"
  # The injector takes a Ctrl-C itself: it gives up the wait, or finishes the call it made.
  trap : INT TERM HUP
  status=0
  said=$("$injector" "$pid" "$so" "$2" "$3" "$4" "$wait" "$5" 2>&1) || status=$?
  trap - INT TERM HUP
  case $status in
    3) die "cannot attach to $pid: $(ptrace_refusal "$pid")" ;;
    4)
      case $(readlink "/proc/$pid/exe") in
        */beam.smp) beam=" (an Erlang node allocates little with malloc: Mtrace.attach() from an rpc or a remote shell needs no ptrace)" ;;
        *) beam= ;;
      esac
      # Stopped meanwhile, the injector says so: once detached, the process wakes to stop again,
      # so its state may not show it yet.
      [ "$(printf '%s\n' "$said" | sed -n 's/^mtrace-abandoned //p')" != stopped ] || die_stopped "$pid"
      die "gave up on process $pid ($(printf '%s\n' "$said" | sed -n 's/^mtrace-abandoned //p'));" \
        "it runs on untouched. mtrace waits for a call to malloc so as never to stop it inside" \
        "the loader or the allocator: try while it works, or wait longer with --wait$beam" ;;
  esac
  error=$(printf '%s\n' "$said" | sed -n 's/^mtrace-error //p')
  [ -z "$error" ] || die "$error"
  rc=$(printf '%s\n' "$said" | sed -n 's/^mtrace-rc //p')
  paused=$(printf '%s\n' "$said" | sed -n 's/^mtrace-paused-ms //p')
  held=$(printf '%s\n' "$said" | sed -n 's/^mtrace-held-ms \([^ ]*\) .*/\1/p')
  ran=$(printf '%s\n' "$said" | sed -n 's/^mtrace-held-ms [^ ]* \([^-].*\)/, \1 ms of it on a CPU/p')
  [ -n "$rc" ] || die "could not reach process $pid: $(printf '%s\n' "$said" | tail -n 1)"
}

attach_pid() {
  options=$(env | grep '^MTRACE_[A-Z_]*=' || true)
  inject "$1" 2 mtrace_lib_attach "$options" ""
  echo "mtrace: attached to process $1; its exit report goes to $MTRACE_REPORT (its threads" \
    "were stopped $paused ms; the one that loaded mtrace, $held ms$ran)"
}

detach_pid() {
  inject "$1" 6 mtrace_lib_detach - ""
  echo "mtrace: detached from process $1"
}

# The process writes the report itself, to a file it creates exclusively: by default in a
# directory of this script's, then shown here.
report_pid() {
  out=$output
  shown=
  if [ "$out" = stderr ]; then
    shown=$(mktemp -d)
    chmod 1733 "$shown"
    out=$shown/report.txt
  fi
  inject "$1" 6 mtrace_lib_leaks "$out" "process $1 cannot write its report to $out: "
  if [ -n "$shown" ]; then
    cat "$out"
    rm -rf "$shown"
  fi
}
