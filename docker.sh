#!/bin/sh
# Builds the Debian 12 image and runs a command in it: ./docker.sh [COMMAND...] (default: bin/demo),
# e.g. ./docker.sh bin/test. MTRACE_DOCKER_NAME, when set, names the container, so that a script
# that gives up on it can remove it (docker rm -f).
set -eu
cd "$(dirname "$0")"
# --force-rm: a step that fails leaves no stopped container behind either.
old=$(docker image inspect --format '{{.Id}}' mtrace 2>/dev/null || true)
docker build --force-rm -t mtrace .
# The image the tag left, unless a container still runs it: each change of the sources would
# otherwise keep its layers for good (all 1.6 GB of them when bin/setup changes).
if [ -n "$old" ] && [ "$old" != "$(docker image inspect --format '{{.Id}}' mtrace)" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true
fi
[ $# -gt 0 ] || set -- bin/demo
# --init reaps the daemons' orphans the tests leave to PID 1; -t only when there is a terminal.
tty=
[ -t 0 ] && [ -t 1 ] && tty=-it
name=
[ -z "${MTRACE_DOCKER_NAME:-}" ] || name=--name=$MTRACE_DOCKER_NAME
exec docker run --rm --init $tty ${name:+"$name"} mtrace "$@"
