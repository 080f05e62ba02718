#!/bin/sh
# Builds an image of Debian with the packages bin/setup installs and a built copy of the
# repository, and runs a command in it: ./docker.sh [--debian 12|13] [COMMAND...] (Debian 12
# unless told; default command: bin/demo), e.g. ./docker.sh --debian 13 bin/test, or one file:
# ./docker.sh --debian 13 bin/test test/leaks_test.exs. Where the engine has no debian base image
# and none can be pulled, the base is made with debootstrap from the Debian mirror that apt uses
# here (needs root). MTRACE_DOCKER_NAME, when set, names the container, so that a script that
# gives up on it can remove it (docker rm -f).
set -eu
cd "$(dirname "$0")"
debian=12
if [ "${1:-}" = --debian ] && [ $# -ge 2 ]; then
  debian=$2
  shift 2
elif [ "${1:-}" = --debian ]; then
  debian=
fi
case $debian in
  12) suite=bookworm ;;
  13) suite=trixie ;;
  *) echo "docker.sh: --debian takes 12 or 13" >&2; exit 2 ;;
esac
image=mtrace:debian$debian

if ! docker image inspect "debian:$suite" >/dev/null 2>&1 &&
  ! docker pull -q "debian:$suite" >/dev/null 2>&1; then
  if ! command -v debootstrap >/dev/null; then
    echo "docker.sh: no debian:$suite image, none can be pulled, and no debootstrap to make one" >&2
    exit 1
  fi
  # The mirror of this machine's own release, as apt reads its sources (either format).
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' |
    awk -v r="$codename" '$2 == r && $3 == "main" { print $1; exit }')
  root=$(mktemp -d)
  echo "docker.sh: making debian:$suite with debootstrap from ${mirror:=http://deb.debian.org/debian/}"
  if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1; then
    tail -20 "$root.log" >&2
    rm -rf "$root" "$root.log"
    exit 1
  fi
  tar -C "$root" -c . | docker import - "debian:$suite" >/dev/null
  rm -rf "$root" "$root.log"
fi

# --force-rm: a step that fails leaves no stopped container behind either.
old=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
docker build --force-rm --build-arg "DEBIAN=$suite" -t "$image" .
# The image the tag left, unless a container still runs it: each change of the sources would
# otherwise keep its layers for good (all 1.6 GB of them when bin/setup changes).
if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' "$image")" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true
fi
[ $# -gt 0 ] || set -- bin/demo
# --init reaps the daemons' orphans the tests leave to PID 1. SYS_PTRACE: Docker's default seccomp
# profile refuses process_vm_readv without it, and the erlang mode reads the Erlang frames with
# it (without, stacks end at the JIT's call_nif_shared). SYS_ADMIN lets the fault test mount its
# small file systems. -t only when there is a terminal.
tty=
[ -t 0 ] && [ -t 1 ] && tty=-it
name=
[ -z "${MTRACE_DOCKER_NAME:-}" ] || name=--name=$MTRACE_DOCKER_NAME
exec docker run --rm --init --cap-add SYS_PTRACE --cap-add SYS_ADMIN $tty ${name:+"$name"} "$image" "$@"
