# Sourced by bin/mtrace: attach, report and detach in a running process, through gdb.
#
# gdb stops the process at its next call to malloc (or calloc, realloc, free), not wherever it
# happens to be: stopped inside the loader or the allocator, a call into it (dlopen, or mtrace's
# own) could deadlock on a lock the stopped thread holds. There it loads priv/mtrace.so (which stays inert until attached) and
# calls one of its entry points (c_src/api.c), then detaches. gdb runs in a session of its own,
# so that a Ctrl-C at the terminal never reaches it in the middle of a call: the interrupt, like
# the end of --wait, only ever abandons the wait for malloc, and the process runs on untouched.
# Whichever comes first, gdb at malloc or the abandon, takes the directory "$dir/go" (mkdir is
# atomic): the other then stands aside.

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

# Whether the process is one mtrace can reach, or a line why not (and exit).
check_target() {
  pid=$1
  [ -d "/proc/$pid" ] || die "no process $pid"
  command -v gdb >/dev/null 2>&1 ||
    die "gdb is needed to reach a running process: apt-get install gdb"
  maps=$(cat "/proc/$pid/maps" 2>/dev/null) || die "cannot attach to $pid: $(ptrace_refusal "$pid")"
  [ "$(awk '/^TracerPid:/ { print $2 }' "/proc/$pid/status")" = 0 ] ||
    die "cannot attach to $pid: $(ptrace_refusal "$pid")"
  case $maps in
    */libc.so.6*) ;;
    *) die "process $pid has no glibc loaded (a static program, or another C library such as" \
      "musl): mtrace reaches dynamically linked glibc programs only" ;;
  esac
  # The library's path must name the same file in the process, and gdb must see its pids.
  for ns in mnt pid; do
    [ "$(readlink "/proc/$pid/ns/$ns")" = "$(readlink "/proc/self/ns/$ns")" ] ||
      die "process $pid runs in another $ns namespace (a container): run mtrace inside it" \
        "(docker exec, kubectl exec), with gdb there"
  done
}

# Text made a C string literal for gdb.
c_string() {
  printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | awk '{ printf "%s%s", (NR > 1 ? "\\n" : ""), $0 }'
}

# gdb lines that put TEXT in the process, at $NAME: a string literal passed to a call would be
# copied into a block of its malloc that nobody frees (a leak mtrace itself would then report).
# glibc's own entry points are used, which mtrace never records; gdb_free gives it back as soon
# as it has served, for a block only gdb points to reads as lost to a report's mark.
gdb_string() {
  n=$(($(printf '%s' "$2" | wc -c) + 1))
  printf 'set $%s = ((void *(*)(unsigned long))__libc_malloc)(%d)\n' "$1" "$n"
  printf 'set {char[%d]}$%s = "%s"\n' "$n" "$1" "$(c_string "$2")"
}

gdb_free() {
  printf 'call ((void (*)(void *))__libc_free)($%s)\n' "$1"
}

# inject PID LOAD ENTRY ARG WHY PREFIX: stops PID at malloc, finds mtrace.so in it (LOAD is the
# dlopen mode: 2 loads it, 6 only finds a copy loaded already, else the preloaded one's entry
# points are used), and calls its int ENTRY(const char *ARG), or ENTRY(void) when ARG is "-". A
# result other than 0 is an error: PREFIX, then the gdb string expression WHY (of $h, the
# library, $rc, the result, and $call_errno, errno as the call left it). Sets rc to the result,
# or fails with a line why.
inject() {
  pid=$1
  check_target "$pid"
  if [ "$4" = - ]; then
    call="((int (*)(void))\$fn)()"
  else
    call="((int (*)(const char *))\$fn)(\$arg)"
  fi
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  chmod 1733 "$dir"
  cat >"$dir/script.gdb" <<EOF
set confirm off
set pagination off
set width 0
handle all nostop noprint pass
set \$_hit_bpnum = 0
handle SIGSTOP stop print nopass
shell touch '$dir/attached'
break malloc
break calloc
break realloc
break free
continue
delete
shell mkdir '$dir/go' 2>/dev/null
if \$_shell_exitcode == 0 && \$_hit_bpnum >= 1
  printf "mtrace-at-malloc\\n"
  set \$errno = *((int *(*)(void))__errno_location)()
$(gdb_string path "$so")
  set \$h = ((void *(*)(const char *, int))dlopen)(\$path, $2)
$(gdb_free path)
  set \$dlsym = (void *(*)(void *, const char *))dlsym
  set \$preloaded = 0
  if \$h == 0
    set \$error = ((char *(*)(void))dlerror)()
$(gdb_string active mtrace_lib_active)
    set \$found = \$dlsym(0, \$active)
    set \$preloaded = $2 == 6 && \$found != 0
$(gdb_free active)
  end
  if \$h == 0 && \$preloaded == 0 && $2 == 6
    printf "mtrace-error mtrace is not attached to process $pid (nor preloaded)\\n"
  end
  if \$h == 0 && $2 == 2
    printf "mtrace-error %s\\n", \$error
  end
  if \$h != 0 || \$preloaded
$(gdb_string entry "$3")
    set \$fn = \$dlsym(\$h, \$entry)
$(gdb_free entry)
$(gdb_string arg "$4")
    set \$rc = $call
    set \$call_errno = *((int *(*)(void))__errno_location)()
$(gdb_free arg)
    printf "mtrace-rc %d\\n", \$rc
    if \$rc != 0
$(gdb_string reason mtrace_lib_attach_reason)
      printf "mtrace-error %s%s\\n", "$6", $5
$(gdb_free reason)
    end
  end
  set *((int *(*)(void))__errno_location)() = \$errno
end
detach
quit
EOF
  setsid gdb -q -batch -nx -p "$pid" -x "$dir/script.gdb" >"$dir/gdb.log" 2>&1 </dev/null &
  gdb_pid=$!
  # An abandon stops the process with SIGSTOP, which gdb (attached by then, see "attached")
  # reports and does not pass on: "continue" returns without a call to malloc, and gdb detaches.
  # Not SIGINT: gdb's interrupt of a thread in nanosleep made the call return 0 at once after the
  # detach (sleep 30 ended at 0.3 s). A SIGSTOP that lands after gdb is gone is undone below.
  abandon() {
    if mkdir "$dir/go" 2>/dev/null; then
      echo "$1" >"$dir/abandoned"
      while [ ! -e "$dir/attached" ] && kill -0 "$gdb_pid" 2>/dev/null; do sleep 0.1; done
      if kill -0 "$gdb_pid" 2>/dev/null; then
        : >"$dir/stopped"
        kill -STOP "$pid" 2>/dev/null || true
      fi
    fi
  }
  trap 'abandon interrupted' INT TERM HUP
  (
    sleep "$wait"
    abandon "no call to malloc within $wait s"
  ) >/dev/null 2>&1 &
  timer=$!
  while kill -0 "$gdb_pid" 2>/dev/null; do wait "$gdb_pid" 2>/dev/null || true; done
  kill "$timer" 2>/dev/null || true
  trap - INT TERM HUP
  if [ -e "$dir/stopped" ] && [ "$(awk '/^State:/ { print $2 }' "/proc/$pid/status")" = T ]; then
    kill -CONT "$pid"
  fi
  if [ -f "$dir/abandoned" ]; then
    case $(readlink "/proc/$pid/exe") in
      */beam.smp) beam=" (an Erlang node allocates little with malloc: Mtrace.attach() from an rpc or a remote shell needs no gdb)" ;;
      *) beam= ;;
    esac
    die "gave up on process $pid ($(cat "$dir/abandoned")); it runs on untouched. mtrace waits" \
      "for a call to malloc so as never to stop it inside the loader or the allocator: try while" \
      "it works, or wait longer with --wait$beam"
  fi
  if grep -q "ptrace: Operation not permitted" "$dir/gdb.log"; then
    die "cannot attach to $pid: $(ptrace_refusal "$pid")"
  fi
  error=$(sed -n 's/^mtrace-error //p' "$dir/gdb.log")
  [ -z "$error" ] || die "$error"
  rc=$(sed -n 's/^mtrace-rc //p' "$dir/gdb.log")
  [ -n "$rc" ] ||
    die "gdb could not reach process $pid: $(grep -v '^\[' "$dir/gdb.log" | tail -n 1)"
  rm -rf "$dir"
  trap - EXIT
}

# The reason for an attach's or a detach's error; a failed report's errno.
attach_reason='((const char *(*)(int))$dlsym($h, $reason))($rc)'
errno_text='((char *(*)(int))strerror)($call_errno)'

attach_pid() {
  options=$(env | grep '^MTRACE_[A-Z_]*=' || true)
  inject "$1" 2 mtrace_lib_attach "$options" "$attach_reason" ""
  echo "mtrace: attached to process $1; its exit report goes to $MTRACE_REPORT"
}

detach_pid() {
  inject "$1" 6 mtrace_lib_detach - "$attach_reason" ""
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
  inject "$1" 6 mtrace_lib_leaks "$out" "$errno_text" \
    "process $1 cannot write its report to $(c_string "$out"): "
  if [ -n "$shown" ]; then
    cat "$out"
    rm -rf "$shown"
  fi
}
