#!/bin/sh
# Builds the Debian 12 image and runs a command in it: ./docker.sh [COMMAND...] (default: bin/demo),
# e.g. ./docker.sh bin/test. MTRACE_DOCKER_NAME, when set, names the container, so that a script
# that gives up on it can remove it (docker rm -f).
set -eu
cd "$(dirname "$0")"
# --force-rm: a step that fails leaves no stopped container behind either.
docker build --force-rm -t mtrace .
[ $# -gt 0 ] || set -- bin/demo
# --init reaps the daemons' orphans the tests leave to PID 1; -t only when there is a terminal.
tty=
[ -t 0 ] && [ -t 1 ] && tty=-it
name=
[ -z "${MTRACE_DOCKER_NAME:-}" ] || name=--name=$MTRACE_DOCKER_NAME
exec docker run --rm --init $tty ${name:+"$name"} mtrace "$@"
